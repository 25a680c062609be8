"""Observation terms, sensor noise and history: what the env does between a task's
``observation`` and the policy.

A task's ``observation(model, data)`` returns one world's observation: an array, or
a dict of named **terms** (``{"state": (d,), "pixels": (H, W, 3)}``), each with its
own shape and dtype. A task's :class:`ObsConfig` then says, per term, what the env
does to it inside the compiled step, in this order, for every world:

1. **noise** (:class:`Noise`): ``value * (1 + scale * e1) + std * e2``, with ``e``
   standard normal or uniform in ``[-1, 1]``, drawn from the world's own PRNG stream
   at every step (and at every restart, for the first observation);
2. **history**: the last ``k`` noisy values of the term, oldest first, shaped
   ``(k, *term)``; a vector term's history is flattened to ``(k * d,)`` so that it
   stays a vector. A restarted world's history is filled with ``k`` copies of its
   first observation: nothing of the previous episode is ever seen again.

Observation normalization (:mod:`mjxrunner.kit.normalize`) comes after, on what the
policy receives. Frame stacking of pixels is the history of the pixel term.

Everything here is pure and batched over a leading world axis; keys are raw
``(num_envs, 2)`` ``uint32``, one per world.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner.engine import checks

WHOLE = ""
"""The term name of an observation that is one array rather than a dict."""

DISTRIBUTIONS = ("gaussian", "uniform")


@dataclasses.dataclass(frozen=True)
class Noise:
    """Sensor noise on one observation term, drawn per world and per step.

    The noisy value is ``value * (1 + scale * e1) + std * e2``, with ``e1``, ``e2``
    independent per element: standard normal (``"gaussian"``: ``std`` and ``scale``
    are standard deviations) or uniform in ``[-1, 1]`` (``"uniform"``: they are
    half-widths).

    Attributes:
      std: additive noise; a float, or a tuple with one value per element of a
        vector term.
      scale: multiplicative noise, likewise.
      distribution: ``"gaussian"`` or ``"uniform"``.
    """

    std: float | tuple[float, ...] = 0.0
    scale: float | tuple[float, ...] = 0.0
    distribution: str = "gaussian"

    def __post_init__(self) -> None:
        for name in ("std", "scale"):
            value = getattr(self, name)
            values = value if isinstance(value, tuple) else (value,)
            if isinstance(value, list):
                raise TypeError(f"Noise.{name} must be a float or a tuple, got a list")
            for v in values:
                v = checks.real(v, f"Noise.{name}")
                if not (math.isfinite(v) and v >= 0):
                    raise ValueError(f"Noise.{name} must be finite and >= 0, got {v}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(
                f"Noise.distribution must be one of {DISTRIBUTIONS}, got {self.distribution!r}"
            )

    def _values(self, name: str, shape: tuple[int, ...], term: str) -> np.ndarray:
        value = getattr(self, name)
        if not isinstance(value, tuple):
            return np.full(shape, float(value))
        if len(shape) != 1 or len(value) != shape[0]:
            raise ValueError(
                f"Noise.{name} of term {term!r} has {len(value)} values; a tuple needs a "
                f"vector term and one value per element, the term has shape {shape}"
            )
        return np.asarray(value, float)


@dataclasses.dataclass(frozen=True)
class ObsConfig:
    """What the env does to a task's observation terms (see the module docstring).

    Attributes:
      noise: a :class:`Noise` for an array observation; for a dict observation, a
        mapping from term names to :class:`Noise` (terms not named get none).
      history: ``k >= 1`` (1: no history) for an array observation; for a dict
        observation, a mapping from term names to ``k``.

    Mappings are stored as sorted tuples of ``(name, value)`` pairs, so the config
    (and the task holding it) stays hashable.
    """

    noise: Any = None
    history: Any = None

    def __post_init__(self) -> None:
        noise = _pairs(self.noise, "noise", Noise)
        history = _pairs(self.history, "history", int)
        for name, k in history:
            checks.count(k, f"history of term {name!r}")
        object.__setattr__(self, "noise", noise)
        object.__setattr__(self, "history", history)


def _pairs(value: Any, name: str, kind: type) -> tuple[tuple[str, Any], ...]:
    """``value`` (None, one item for an array observation, or a mapping from term
    names) as sorted ``(term, item)`` pairs."""
    if value is None:
        return ()
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already pairs (a config rebuilt by dataclasses.replace)
    if isinstance(value, Mapping):
        items = []
        for term, item in value.items():
            if not isinstance(term, str) or not term:
                raise TypeError(f"ObsConfig.{name} keys must be term names, got {term!r}")
            items.append((term, _item(item, name, kind, term)))
        return tuple(sorted(items))
    return ((WHOLE, _item(value, name, kind, WHOLE)),)


def _item(item: Any, name: str, kind: type, term: str) -> Any:
    if kind is int:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"ObsConfig.history of term {term!r} must be an int, got {item!r}")
        return int(item)
    if not isinstance(item, kind):
        raise TypeError(
            f"ObsConfig.{name} of term {term!r} must be a {kind.__name__}, got {item!r}"
        )
    return item


# --- checked against a task's observation ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """An :class:`ObsConfig` checked against the observation it applies to (static).

    Attributes:
      noise: ``(term, std, scale, distribution)``; ``std``/``scale`` as tuples of the
        term's shape, flattened.
      history: ``(term, k)`` for terms with ``k > 1``.
      terms: the observation's term names (``(WHOLE,)`` for an array).
    """

    noise: tuple[tuple[str, tuple[float, ...], tuple[float, ...], str], ...] = ()
    history: tuple[tuple[str, int], ...] = ()
    terms: tuple[str, ...] = (WHOLE,)

    @property
    def random(self) -> bool:
        """A step draws noise (and so splits every world's stream)."""
        return bool(self.noise)

    @property
    def identity(self) -> bool:
        return not self.noise and not self.history


NONE = Pipeline()


def check(config: ObsConfig | None, spec: Any, task: str = "task") -> Pipeline:
    """``config`` checked against one world's observation ``spec`` (a
    ``ShapeDtypeStruct`` or a dict of them).

    Raises:
      TypeError: the observation is neither an array nor a flat dict of arrays with
        string keys; noise on a term that is not floating.
      ValueError: a term the observation lacks, a noise tuple of the wrong length.
    """
    terms = term_specs(spec, task)
    if config is None:
        return Pipeline(terms=tuple(terms))
    if not isinstance(config, ObsConfig):
        raise TypeError(f"{task}: obs_config must be an ObsConfig or None, got {config!r}")

    def known(term: str, what: str) -> jax.ShapeDtypeStruct:
        if term not in terms:
            if term == WHOLE:
                raise ValueError(
                    f"{task}: the observation is a dict of terms {sorted(terms)}; give {what} "
                    "as a mapping from term names"
                )
            raise ValueError(f"{task}: {what} names term {term!r}; terms: {sorted(terms)}")
        return terms[term]

    noise = []
    for term, n in config.noise:
        s = known(term, "noise")
        if not jnp.issubdtype(s.dtype, jnp.floating):
            raise TypeError(f"{task}: noise on term {term!r} of dtype {s.dtype}; it must be float")
        std, scale = (tuple(n._values(a, s.shape, term).ravel().tolist()) for a in ("std", "scale"))
        if any(std) or any(scale):
            noise.append((term, std, scale, n.distribution))
    history = []
    for term, k in config.history:
        known(term, "history")
        if k > 1:
            history.append((term, k))
    return Pipeline(tuple(noise), tuple(history), tuple(terms))


def term_specs(spec: Any, task: str = "task") -> dict[str, Any]:
    """``{term: ShapeDtypeStruct}`` of one world's observation (``{WHOLE: spec}`` for
    an array)."""
    if isinstance(spec, Mapping):
        out = {}
        for term, s in spec.items():
            if not isinstance(term, str) or not term or not hasattr(s, "shape"):
                raise TypeError(
                    f"{task}: a dict observation maps term names (str) to arrays; got "
                    f"{term!r}: {type(s).__name__}"
                )
            out[term] = s
        if not out:
            raise ValueError(f"{task}: the observation is an empty dict")
        return out
    if not hasattr(spec, "shape"):
        raise TypeError(
            f"{task}: observation must return an array or a dict of arrays, got "
            f"{type(spec).__name__}"
        )
    return {WHOLE: spec}


def _terms(obs: Any) -> dict[str, jax.Array]:
    return dict(obs) if isinstance(obs, Mapping) else {WHOLE: obs}


def _rebuilt(like: Any, terms: dict[str, jax.Array]) -> Any:
    return terms[WHOLE] if not isinstance(like, Mapping) else {k: terms[k] for k in like}


# --- the pure functions ----------------------------------------------------------------


def noisy(pipeline: Pipeline, obs: Any, keys: jax.Array) -> Any:
    """``obs`` (leading world axis) with each term's noise drawn from ``keys``
    ``(num_envs, 2)``: term ``i`` of the pipeline draws from ``fold_in(key, i)``."""
    if not pipeline.noise:
        return obs
    terms = _terms(obs)
    for i, (term, std, scale, distribution) in enumerate(pipeline.noise):
        x = terms[term]
        shape = x.shape[1:]

        def draw(key, i=i, shape=shape, dtype=x.dtype, distribution=distribution):
            k1, k2 = jax.random.split(jax.random.fold_in(jax.random.wrap_key_data(key), i))
            if distribution == "gaussian":
                return jax.random.normal(k1, shape, dtype), jax.random.normal(k2, shape, dtype)
            return (
                jax.random.uniform(k1, shape, dtype, -1.0, 1.0),
                jax.random.uniform(k2, shape, dtype, -1.0, 1.0),
            )

        e1, e2 = jax.vmap(draw)(keys)
        std_, scale_ = (jnp.asarray(v, x.dtype).reshape(shape) for v in (std, scale))
        terms[term] = (x * (1 + scale_ * e1) + std_ * e2).astype(x.dtype)
    return _rebuilt(obs, terms)


def start_history(pipeline: Pipeline, obs: Any) -> Any:
    """Histories filled with ``k`` copies of ``obs``: ``{term: (num_envs, k, *term)}``
    (None without history)."""
    if not pipeline.history:
        return None
    terms = _terms(obs)
    return {term: jnp.repeat(terms[term][:, None], k, axis=1) for term, k in pipeline.history}


def push(pipeline: Pipeline, history: Any, obs: Any) -> Any:
    """``history`` with ``obs`` appended as the newest entry (the oldest drops out)."""
    if not pipeline.history:
        return history
    terms = _terms(obs)
    return {
        term: jnp.concatenate([history[term][:, 1:], terms[term][:, None]], axis=1)
        for term, _ in pipeline.history
    }


def view(pipeline: Pipeline, history: Any, obs: Any) -> Any:
    """What the policy sees: ``obs`` with each term that has a history replaced by
    it (``(num_envs, k, *term)``; a vector term's flattened to ``(num_envs, k * d)``)."""
    if not pipeline.history:
        return obs
    terms = _terms(obs)
    for term, _ in pipeline.history:
        h = history[term]
        terms[term] = h.reshape(h.shape[0], -1) if h.ndim == 3 else h
    return _rebuilt(obs, terms)


def view_spec(pipeline: Pipeline, spec: Any) -> Any:
    """One world's :func:`view` shapes from one world's observation ``spec``."""
    one = jax.tree.map(lambda s: jax.ShapeDtypeStruct((1, *s.shape), s.dtype), spec)
    shapes = jax.eval_shape(lambda o: view(pipeline, start_history(pipeline, o), o), one)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), shapes)
