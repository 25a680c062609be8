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
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from mjxrunner import checks
from mjxrunner.worlds import pytree_dataclass, static_field, world_field


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
      mean: ``(obs_dim,)`` running mean.
      var: ``(obs_dim,)`` running (population) variance; 1 before the first sample.
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


def init(obs_dim: int, dtype) -> ObsNorm:
    """No samples yet: mean 0, variance 1 (the identity until the first update)."""
    return ObsNorm(
        mean=jnp.zeros((obs_dim,), dtype),
        var=jnp.ones((obs_dim,), dtype),
        count=jnp.zeros((), dtype),
        frozen=jnp.zeros((), bool),
    )


def update(norm: ObsNorm, batch: jax.Array, axis_name: str | None = None) -> ObsNorm:
    """``norm`` moved by a ``(n, obs_dim)`` batch (summed over ``axis_name`` inside
    ``shard_map``); unchanged if frozen."""
    total = functools.partial(_total, axis_name=axis_name)
    n = total(jnp.asarray(batch.shape[0], norm.count.dtype))
    batch_mean = total(batch.sum(axis=0)) / n
    batch_m2 = total(jnp.square(batch - batch_mean).sum(axis=0))
    count = norm.count + n
    delta = batch_mean - norm.mean
    mean = norm.mean + delta * (n / count)
    m2 = norm.var * norm.count + batch_m2 + jnp.square(delta) * (norm.count * n / count)
    moved = norm.replace(mean=mean, var=m2 / count, count=count)
    return jax.tree.map(lambda old, new: jnp.where(norm.frozen, old, new), norm, moved)


def _total(x: jax.Array, axis_name: str | None) -> jax.Array:
    if axis_name is None:
        return x
    try:
        return jax.lax.psum(x, axis_name)
    except NameError:  # traced outside shard_map for output shapes only: shapes agree
        return x


def apply(spec: Spec, norm: ObsNorm, obs: jax.Array) -> jax.Array:
    """``obs`` (any leading axes) scaled by ``norm``."""
    out = (obs - norm.mean) / jnp.sqrt(norm.var + spec.eps)
    if spec.clip is not None:
        out = jnp.clip(out, -spec.clip, spec.clip)
    return out.astype(obs.dtype)
