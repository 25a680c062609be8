"""Health of the worlds: per-world counts of guard trips and resets, and the report.

The detection itself is done by guards (:mod:`mjxrunner.engine.guards`): a world is
*unstable* after a step when its state is no longer usable (``qpos``, ``qvel`` or
``qacc`` holds a NaN or Inf, or some ``|qvel|`` exceeds a bound, by default
MuJoCo's own ``mjMAXVAL``); a Warp buffer may *overflow*; a control may be
non-finite. Each guard's trips are counted here.

The counters (:class:`HealthCounts`) live in the :class:`~mjxrunner.RunnerState`
and, like the RNG, are never restored by a reset: they count over the whole run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner.engine.guards import InstabilityError, InstabilityWarning, unstable
from mjxrunner.engine.sharding import host_copy
from mjxrunner.engine.worlds import pytree_dataclass, world_field

__all__ = [
    "HealthCounts",
    "InstabilityError",
    "InstabilityWarning",
    "Report",
    "count_resets",
    "unstable",
]


@pytree_dataclass
class HealthCounts:
    """Per-world event counts over a run; resets never clear them.

    Attributes:
      events: ``{guard name: (num_envs,) int32}``, times each guard tripped (a step
        after which it was tripped and before which it was not).
      resets: ``(num_envs,)`` int32, resets of the world.
    """

    events: dict[str, jax.Array] = world_field(0)
    resets: jax.Array = world_field(0)

    @classmethod
    def zeros(cls, num_envs: int, names: Any = ("unstable", "overflow")) -> HealthCounts:
        z = jnp.zeros((num_envs,), jnp.int32)
        return cls(events={name: z for name in names}, resets=z)

    @property
    def unstable(self) -> jax.Array | None:
        """Times each world became unstable (the ``"unstable"`` guard)."""
        return self.events.get("unstable")

    @property
    def overflow(self) -> jax.Array | None:
        """Steps in which a Warp buffer newly overflowed (the ``"overflow"`` guard)."""
        return self.events.get("overflow")


def after_step(counts: HealthCounts | None, new: dict[str, jax.Array]) -> HealthCounts | None:
    """Adds one step's new trips, ``{guard name: (num_envs,) bool}``."""
    if counts is None:
        return None
    events = {k: v + new[k].astype(jnp.int32) if k in new else v for k, v in counts.events.items()}
    return counts.replace(events=events)


def count_resets(counts: HealthCounts | None, done: jax.Array) -> HealthCounts | None:
    """Adds one reset to each world in ``done`` (``(num_envs,)`` bool)."""
    if counts is None:
        return None
    return counts.replace(resets=counts.resets + done.astype(jnp.int32))


@dataclasses.dataclass(frozen=True)
class Report:
    """A NumPy snapshot of a runner's or env's health (``runner.health``).

    Attributes:
      tripped: ``{guard name: (num_envs,) bool}``, worlds that tripped each guard in
        the last step.
      counts: ``{guard name: (num_envs,) int32}``, times each world tripped each guard.
      overflow: ``(num_envs,)`` int32, Warp overflow bits of the last step.
      reset_count: ``(num_envs,)`` int32, resets of each world.
    """

    tripped: dict[str, np.ndarray]
    counts: dict[str, np.ndarray]
    overflow: np.ndarray
    reset_count: np.ndarray

    @classmethod
    def from_state(cls, state: Any) -> Report:
        """Host copies of the state's flags and counters (gathered if sharded)."""
        tripped = {k: host_copy(v).astype(bool) for k, v in state.tripped.items()}
        counts = {k: host_copy(v) for k, v in state.health.events.items()}
        return cls(tripped, counts, host_copy(state.overflow), host_copy(state.health.resets))

    def _flag(self, name: str) -> np.ndarray:
        return self.tripped.get(name, np.zeros(self.reset_count.shape, bool))

    def _count(self, name: str) -> np.ndarray:
        return self.counts.get(name, np.zeros(self.reset_count.shape, np.int32))

    @property
    def unstable(self) -> np.ndarray:
        """``(num_envs,)`` bool, worlds unstable after the last step."""
        return self._flag("unstable")

    @property
    def unstable_count(self) -> np.ndarray:
        """``(num_envs,)`` int32, times each world became unstable."""
        return self._count("unstable")

    @property
    def overflow_count(self) -> np.ndarray:
        """``(num_envs,)`` int32, times a Warp buffer of each world overflowed."""
        return self._count("overflow")

    def totals(self) -> dict[str, int]:
        """Sums over worlds, for logging: per guard ``<name>_now`` (worlds tripped in
        the last step) and ``<name>_events``, and ``resets``. The instability guard
        also appears as ``unstable_now``/``unstable_events``, the overflow guard as
        ``overflow_now``/``overflow_steps``."""
        out: dict[str, int] = {}
        for name in self.counts:
            out[f"{name}_now"] = int(self._flag(name).sum())
            out[f"{name}_events"] = int(self._count(name).sum())
        out["overflow_now"] = int(np.count_nonzero(self.overflow))
        out["overflow_steps"] = int(self.overflow_count.sum())
        out["resets"] = int(self.reset_count.sum())
        return out
