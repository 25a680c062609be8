"""Observation normalization on device: running mean and variance, shared by all worlds.

The statistics live in the env's state (``EnvState.obs_norm``), are updated inside the
compiled step from the observations the step returns (one sample per world per step,
in every autoreset mode), and are saved with checkpoints. Policies see
``(obs - mean) / sqrt(var + eps)``, clipped to ``[-clip, clip]`` if a clip is set;
``final_obs`` is normalized with the same statistics, so a bootstrapped value and
the next action read the same scale. Frozen statistics (evaluation) normalize but do
not move. Under sharding the batch moments are summed over the ``"worlds"`` axis, so
every device holds the same statistics.

The update combines the batch's moments with the running ones exactly (Chan et al.'s
parallel variance), so the result does not depend on how samples were batched.

What is normalized: an observation that is one array, or, of an observation made of
terms (a dict), every floating term with one axis per world (a vector, or a vector
term's flattened history); images and other terms pass through unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner.engine import checks
from mjxrunner.engine.worlds import pytree_dataclass, static_field, world_field


@pytree_dataclass
class Spec:
    """How observations are normalized (static: part of the env's structure).

    Attributes:
      clip: None, or the bound of the normalized values (``[-clip, clip]``).
      eps: added to the variance before the square root.
    """

    clip: float | None = static_field(default=None)
    eps: float = static_field(default=1e-8)

    @staticmethod
    def of(clip: float | None = None, eps: float = 1e-8) -> Spec:
        if clip is not None:
            clip = checks.real(clip, "clip")
            if not clip > 0:
                raise ValueError(f"clip must be > 0 or None, got {clip}")
        eps = checks.real(eps, "eps")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        return Spec(clip=clip, eps=eps)


@pytree_dataclass
class ObsNorm:
    """Running statistics of the observations of every world.

    Attributes:
      mean: ``(obs_dim,)`` running mean; for a dict observation, a dict of them,
        one per normalized term.
      var: ``(obs_dim,)`` running (population) variance, 1 before the first sample;
        shaped like ``mean``.
      count: ``()`` float, samples seen.
      frozen: ``()`` bool; True keeps the statistics as they are (evaluation).
    """

    mean: jax.Array = world_field(1)
    var: jax.Array = world_field(1)
    count: jax.Array = world_field(0)
    frozen: jax.Array = world_field(0)

    def freeze(self, frozen: bool = True) -> ObsNorm:
        """A copy whose statistics stop (or resume) moving; same compiled step."""
        return self.replace(frozen=jnp.full_like(self.frozen, bool(frozen)))


def normalized_terms(spec: Any) -> Any:
    """Of one world's observation ``spec`` (``ShapeDtypeStruct`` or a dict of them),
    what is normalized: the spec itself if it is one float vector, else the dict of
    its float vector terms (None if there is nothing to normalize)."""
    vector = lambda s: s.ndim == 1 and jnp.issubdtype(s.dtype, jnp.floating)  # noqa: E731
    if isinstance(spec, Mapping):
        terms = {k: s for k, s in spec.items() if vector(s)}
        return terms or None
    return spec if vector(spec) else None


def init(spec: Any, dtype) -> ObsNorm:
    """No samples yet: mean 0, variance 1 (the identity until the first update).

    Args:
      spec: one world's observation (``ShapeDtypeStruct`` or a dict of them), or the
        size of a vector observation.
      dtype: the float dtype of the statistics.

    Raises:
      ValueError: the observation has nothing to normalize (no float vector term).
    """
    if isinstance(spec, (int, np.integer)):
        spec = jax.ShapeDtypeStruct((int(spec),), dtype)
    terms = normalized_terms(spec)
    if terms is None:
        raise ValueError(
            "observation normalization needs a float vector observation or float vector "
            f"terms; the observation is {spec}"
        )
    return ObsNorm(
        mean=jax.tree.map(lambda s: jnp.zeros(s.shape, dtype), terms),
        var=jax.tree.map(lambda s: jnp.ones(s.shape, dtype), terms),
        count=jnp.zeros((), dtype),
        frozen=jnp.zeros((), bool),
    )


def _normalized(norm: ObsNorm, obs: Any) -> Any:
    """The part of ``obs`` that ``norm`` normalizes, shaped like ``norm.mean``."""
    if isinstance(norm.mean, Mapping):
        return {k: obs[k] for k in norm.mean}
    return obs


def update(norm: ObsNorm, batch: Any, axis_name: str | None = None) -> ObsNorm:
    """``norm`` moved by a batch of observations (leading world axis; summed over
    ``axis_name`` inside ``shard_map``); unchanged if frozen."""
    total = functools.partial(_total, axis_name=axis_name)
    batch = _normalized(norm, batch)
    n = total(jnp.asarray(jax.tree.leaves(batch)[0].shape[0], norm.count.dtype))
    count = norm.count + n

    def moments(mean, var, x):
        batch_mean = total(x.sum(axis=0)) / n
        batch_m2 = total(jnp.square(x - batch_mean).sum(axis=0))
        delta = batch_mean - mean
        m2 = var * norm.count + batch_m2 + jnp.square(delta) * (norm.count * n / count)
        return mean + delta * (n / count), m2 / count

    pairs = jax.tree.map(moments, norm.mean, norm.var, batch)
    is_pair = lambda x: isinstance(x, tuple)  # noqa: E731
    mean = jax.tree.map(lambda p: p[0], pairs, is_leaf=is_pair)
    var = jax.tree.map(lambda p: p[1], pairs, is_leaf=is_pair)
    moved = norm.replace(mean=mean, var=var, count=count)
    return jax.tree.map(lambda old, new: jnp.where(norm.frozen, old, new), norm, moved)


def _total(x: jax.Array, axis_name: str | None) -> jax.Array:
    if axis_name is None:
        return x
    try:
        return jax.lax.psum(x, axis_name)
    except NameError:  # traced outside shard_map for output shapes only: shapes agree
        return x


def apply(spec: Spec, norm: ObsNorm, obs: Any) -> Any:
    """``obs`` (any leading axes) scaled by ``norm``; terms it does not normalize
    as they are."""

    def scale(x, mean, var):
        out = (x - mean) / jnp.sqrt(var + spec.eps)
        if spec.clip is not None:
            out = jnp.clip(out, -spec.clip, spec.clip)
        return out.astype(x.dtype)

    if isinstance(norm.mean, Mapping):
        return {
            k: scale(x, norm.mean[k], norm.var[k]) if k in norm.mean else x for k, x in obs.items()
        }
    return scale(obs, norm.mean, norm.var)
