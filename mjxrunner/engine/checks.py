"""Validation of user input. Each function raises before anything is changed."""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import numpy as np


def count(value: Any, name: str, minimum: int = 1) -> int:
    """A Python or NumPy integer ``>= minimum`` (bools refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def seed(value: Any, name: str = "seed") -> int:
    """A PRNG seed: an int in ``[0, 2**63)`` with ``jax_enable_x64``, else ``[0, 2**32)``.

    ``jax.random.key`` takes an int64 (a larger int raises OverflowError inside
    JAX); without x64 it keeps only a seed's low 32 bits, so a larger seed would
    silently repeat a smaller one's streams.
    """
    bits = 63 if jax.config.jax_enable_x64 else 32
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value < 2**bits:
        why = (
            "jax.random.key takes an int64"
            if bits == 63
            else "without jax_enable_x64, jax.random.key keeps a seed's low 32 bits only"
        )
        shown = value if abs(value) < 2**64 else f"an int of {int(value).bit_length()} bits"
        raise ValueError(f"{name} must be an int in [0, 2**{bits}) ({why}), got {shown}")
    return int(value)


def options(value: Any, name: str = "options") -> dict:
    """A copy of a dict of options (a reset's ``options=``); None is no options."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict or None, got {type(value).__name__}")
    return dict(value)


def real(value: Any, name: str, positive: bool = False) -> float:
    """A finite real scalar (bools refused), optionally > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:  # an int beyond float64
        raise ValueError(
            f"{name} must be finite, got an int of {value.bit_length()} bits"
        ) from None
    if not np.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be finite{' and > 0' if positive else ''}, got {value}")
    return value


def _array(value: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as e:  # ragged lists and the like
        raise TypeError(f"{name} must be array-like: {e}") from None
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got objects")
    return arr


def env_ids(value: Any, num_envs: int, name: str = "env_ids") -> np.ndarray:
    """World indices, in the order given, as unique int64 in ``[0, num_envs)``.

    Accepts an int, a sequence or 1-D array of ints; refuses bools, floats,
    duplicates and out-of-range or negative ids (no Python-style wrap-around).
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be ints, got a bool (pass a mask to reset() instead)")
    if isinstance(value, numbers.Integral):
        value = [value]
    ids = _array(value, name)
    if ids.size == 0:
        return np.zeros((0,), np.int64)
    if ids.dtype.kind not in "iu":  # not bool, and not timedelta (a NumPy "integer")
        raise TypeError(f"{name} must be integers, got dtype {ids.dtype}")
    if ids.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {ids.shape}")
    bad = ids[(ids < 0) | (ids >= num_envs)]
    if bad.size:
        raise ValueError(f"{name} must lie in [0, {num_envs}), got {bad.tolist()}")
    if np.unique(ids).size != ids.size:
        raise ValueError(f"{name} must be unique, got duplicates in {ids.tolist()}")
    return ids.astype(np.int64)


def env_id(value: Any, num_envs: int, name: str = "env_id") -> int:
    """One world index: an int in ``[0, num_envs)`` (bools refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be one int world index, got {type(value).__name__}")
    if not 0 <= value < num_envs:
        raise ValueError(f"{name} must lie in [0, {num_envs}), got {value}")
    return int(value)


def ids_mask(value: Any, num_envs: int) -> np.ndarray:
    """A ``(num_envs,)`` bool mask from env ids (None selects every world)."""
    mask = np.zeros((num_envs,), bool)
    if value is None:
        mask[:] = True
    else:
        mask[env_ids(value, num_envs)] = True
    return mask


def bool_vector(value: Any, name: str, sizes: tuple[int, ...]) -> np.ndarray:
    """A 1-D bool array whose length is one of ``sizes``."""
    arr = _array(value, name)
    if arr.dtype != bool:
        raise TypeError(f"{name} must have dtype bool, got {arr.dtype}")
    if arr.ndim != 1 or arr.shape[0] not in sizes:
        shapes = " or ".join(f"({s},)" for s in sizes)
        raise ValueError(f"{name} must have shape {shapes}, got {arr.shape}")
    return arr


def finite_array(value: Any, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A real array of exactly ``shape``, all finite, cast to ``dtype``."""
    arr = _array(value, name)
    if arr.dtype.kind not in "iuf":  # refuses bool, complex, timedelta, strings
        raise TypeError(f"{name} must be real numbers, got dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        where = np.argwhere(~np.isfinite(arr)).tolist()[:5]
        raise ValueError(f"{name} must be finite; got NaN or Inf at {where}")
    limit = np.finfo(dtype).max
    if arr.size and np.abs(arr).max() > limit:
        raise ValueError(f"{name} overflows {np.dtype(dtype).name} (|x| > {limit:.3g})")
    return arr.astype(dtype)


def positive_scalar(value: Any, name: str, dtype: np.dtype) -> np.ndarray:
    """A real ``value > 0`` that stays finite and > 0 once cast to ``dtype``."""
    value = real(value, name, positive=True)
    with np.errstate(over="ignore"):  # an overflow is reported below
        cast = np.asarray(value, dtype)
    if not np.isfinite(cast) or cast <= 0:
        info = np.finfo(dtype)
        raise ValueError(
            f"{name} must lie in [{info.tiny:.3g}, {info.max:.3g}] to fit "
            f"{np.dtype(dtype).name}, got {value:g}"
        )
    return cast


def spacing(value: Any, num_envs: int) -> float:
    """A finite layout spacing whose farthest world origin is finite too."""
    value = real(value, "spacing")
    if not math.isfinite(abs(value) * max(num_envs - 1, 1)):
        raise ValueError(
            f"spacing must keep every world origin finite; {value:g} x {num_envs - 1} "
            "overflows float64"
        )
    return value


def flag(value: Any, name: str) -> bool:
    """``value`` if it is a bool (NumPy's too), else TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def world_rows(
    values: Any, name: str, env_ids: Any, num_envs: int, width: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, full)`` of rows given for every world (``env_ids=None``: values
    ``(num_envs, width)``) or for unique ``env_ids`` (``(len(env_ids), width)``, row
    ``k`` for world ``env_ids[k]``): ``(num_envs,)`` bool of the worlds given and
    ``(num_envs, width)`` finite values of ``dtype``, zero elsewhere."""
    if env_ids is None:  # every world: no scatter (this runs before every step)
        rows = finite_array(values, name, (num_envs, width), dtype)
        return np.ones((num_envs,), bool), rows
    ids = env_ids_(env_ids, num_envs)
    rows = finite_array(values, name, (len(ids), width), dtype)
    full = np.zeros((num_envs, width), rows.dtype)
    full[ids] = rows
    mask = np.zeros((num_envs,), bool)
    mask[ids] = True
    return mask, full


env_ids_ = env_ids  # world_rows' ``env_ids`` argument shadows the function
