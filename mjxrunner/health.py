"""Unstable worlds: per-world detection of numerical blow-ups, and health counters.

A world is *unstable* after a step when its state is no longer usable: ``qpos``,
``qvel`` or ``qacc`` holds a NaN or Inf, or some ``|qvel|`` exceeds a bound. The
default bound is MuJoCo's own ``mjMAXVAL`` (1e10), the value above which native
``mj_checkVel`` declares a simulation diverged. The test is a few element-wise
comparisons per world, run inside the compiled step (:func:`mjxrunner.core.step`).

Each world is judged from its own arrays only, so one world's NaN never changes
another world's flag, and a flagged world can be truncated and reset alone.

The counters (:class:`HealthCounts`) live in the :class:`~mjxrunner.RunnerState`
and, like the RNG, are never restored by a reset: they count over the whole run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.sharding import host_copy
from mjxrunner.worlds import pytree_dataclass, world_field

MAX_QVEL = float(mujoco.mjMAXVAL)
"""Default bound on ``|qvel|``: MuJoCo's divergence threshold (1e10)."""

POLICIES = ("raise", "warn", "reset")
"""What a runner does with an unstable world (see :class:`~mjxrunner.MultiEnvRunner`)."""


class InstabilityError(FloatingPointError):
    """A world's state became non-finite or ran away (policy ``"raise"``)."""


class InstabilityWarning(RuntimeWarning):
    """A world's state became non-finite or ran away (policy ``"warn"``)."""


@dataclasses.dataclass(frozen=True)
class Check:
    """What counts as unstable and what the step does about it.

    Hashable, so it is a static argument of a compiled step: each distinct value
    compiles once.

    Attributes:
      max_qvel: bound on ``|qvel|`` (any unit the joint has); ``inf`` checks only
        for NaN/Inf.
      truncate: mark unstable worlds ``truncated``, so the next reset of truncated
        worlds replaces them.
    """

    max_qvel: float = MAX_QVEL
    truncate: bool = True

    def __post_init__(self):
        bound = self.max_qvel
        if isinstance(bound, bool) or not isinstance(bound, (int, float, np.floating)):
            raise TypeError(f"max_qvel must be a real number, got {type(bound).__name__}")
        if math.isnan(bound) or bound <= 0:
            raise ValueError(f"max_qvel must be > 0 (inf allowed), got {bound}")
        if not isinstance(self.truncate, bool):
            raise TypeError(f"truncate must be a bool, got {type(self.truncate).__name__}")
        object.__setattr__(self, "max_qvel", float(bound))


@pytree_dataclass
class HealthCounts:
    """Per-world event counts over a run; resets never clear them.

    Attributes:
      unstable: ``(num_envs,)`` int32, times the world became unstable (a step
        after which it was unstable and before which it was not).
      overflow: ``(num_envs,)`` int32, steps in which a Warp buffer overflowed.
      resets: ``(num_envs,)`` int32, resets of the world by the runner.
    """

    unstable: jax.Array = world_field(0)
    overflow: jax.Array = world_field(0)
    resets: jax.Array = world_field(0)

    @classmethod
    def zeros(cls, num_envs: int) -> HealthCounts:
        z = jnp.zeros((num_envs,), jnp.int32)
        return cls(unstable=z, overflow=z, resets=z)


def unstable(data: mjx.Data, max_qvel: float = MAX_QVEL) -> jax.Array:
    """``(num_envs,)`` bool: worlds of batched ``data`` that blew up.

    Args:
      data: batched ``mjx.Data``.
      max_qvel: bound on ``|qvel|`` (static).

    Returns:
      True where ``qpos``, ``qvel`` or ``qacc`` has a NaN/Inf or ``|qvel| > max_qvel``.
    """
    n = data.qpos.shape[0]

    def all_finite(x):
        return jnp.isfinite(x.reshape(n, -1)).all(axis=1)

    qvel = data.qvel.reshape(n, -1)
    # NaN fails every comparison, so the bound also catches NaN (and Inf when finite).
    ok = all_finite(data.qpos) & all_finite(data.qacc) & (jnp.abs(qvel) <= max_qvel).all(axis=1)
    if math.isinf(max_qvel):
        ok = ok & jnp.isfinite(qvel).all(axis=1)
    return ~ok


def after_step(
    counts: HealthCounts | None, events: jax.Array | None, overflow: jax.Array
) -> HealthCounts | None:
    """Adds one step's counts (None counts stay None).

    Args:
      counts: the counters before the step.
      events: ``(num_envs,)`` bool, worlds that became unstable in this step (None:
        not checked).
      overflow: ``(num_envs,)`` int32 overflow bits of this step.
    """
    if counts is None:
        return None
    unstable = counts.unstable if events is None else counts.unstable + events.astype(jnp.int32)
    return counts.replace(
        unstable=unstable, overflow=counts.overflow + (overflow != 0).astype(jnp.int32)
    )


def count_resets(counts: HealthCounts | None, done: jax.Array) -> HealthCounts | None:
    """Adds one reset to each world in ``done`` (``(num_envs,)`` bool)."""
    if counts is None:
        return None
    return counts.replace(resets=counts.resets + done.astype(jnp.int32))


@dataclasses.dataclass(frozen=True)
class Report:
    """A NumPy snapshot of a runner's health (``MultiEnvRunner.health``).

    Attributes:
      unstable: ``(num_envs,)`` bool, worlds unstable after the last step.
      unstable_count: ``(num_envs,)`` int32, times each world became unstable.
      overflow: ``(num_envs,)`` int32, Warp overflow bits of the last step.
      overflow_count: ``(num_envs,)`` int32, steps with a Warp overflow.
      reset_count: ``(num_envs,)`` int32, resets of each world.
    """

    unstable: np.ndarray
    unstable_count: np.ndarray
    overflow: np.ndarray
    overflow_count: np.ndarray
    reset_count: np.ndarray

    @classmethod
    def from_state(cls, state: Any) -> Report:
        """Host copies of the state's flags and counters (gathered if sharded)."""
        counts = state.health
        return cls(
            unstable=host_copy(state.unstable).astype(bool),
            unstable_count=host_copy(counts.unstable),
            overflow=host_copy(state.overflow),
            overflow_count=host_copy(counts.overflow),
            reset_count=host_copy(counts.resets),
        )

    def totals(self) -> dict[str, int]:
        """Sums over worlds: for logging."""
        return {
            "unstable_now": int(self.unstable.sum()),
            "unstable_events": int(self.unstable_count.sum()),
            "overflow_now": int(np.count_nonzero(self.overflow)),
            "overflow_steps": int(self.overflow_count.sum()),
            "resets": int(self.reset_count.sum()),
        }


def describe(worlds: np.ndarray, check: Check) -> str:
    """A message naming the unstable worlds and the ways out."""
    shown = worlds[:10].tolist() + (["..."] if len(worlds) > 10 else [])
    return (
        f"{len(worlds)} world(s) {shown} became unstable: NaN/Inf in qpos/qvel/qacc or "
        f"|qvel| > {check.max_qvel:g}. Lower the timestep or the controls, raise "
        "max_qvel, or use instability_policy='reset' to truncate and reset them."
    )
