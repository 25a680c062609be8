"""The runner's pytree: everything that changes from step to step, for all worlds."""

from __future__ import annotations

from typing import Any

import jax
from mujoco import mjx

from mjxrunner.engine.health import HealthCounts
from mjxrunner.engine.worlds import pytree_dataclass, world_field


@pytree_dataclass
class LatencyState:
    """Per-world action latency (:class:`mjxrunner.engine.events.Latency`).

    Attributes:
      queue: ``(num_envs, max_delay + 1, nu)`` the world's last commands, newest
        first: slot ``k`` holds the command of ``k`` steps ago, the one a delay of
        ``k`` sends to the physics now. A (re)started world's slots all hold its
        start's ``ctrl``.
      delay: ``(num_envs,)`` int32, the steps this episode's commands wait.
    """

    queue: jax.Array = world_field(2)
    delay: jax.Array = world_field(0)


@pytree_dataclass
class PushState:
    """Per-world random pushes (:class:`mjxrunner.engine.events.Pushes`).

    Attributes:
      countdown: ``(num_envs,)`` int32, steps until the next push: the step that
        brings it to 0 pushes, then a new interval is drawn.
      pushed: ``(num_envs,)`` bool, the last step pushed this world.
    """

    countdown: jax.Array = world_field(0)
    pushed: jax.Array = world_field(0)


@pytree_dataclass
class RunnerState:
    """State of ``num_envs`` worlds.

    The world axis of ``data`` is known from MJX's single-world template; the other
    fields declare their core ndim, so :func:`mjxrunner.world_mask` classifies every
    leaf without looking at sizes.

    Attributes:
      data: batched ``mjx.Data``; per-world leaves are ``(num_envs, *core_shape)``.
      ctrl: ``(num_envs, nu)`` commands, written into ``data.ctrl`` at every step
        (with action latency, the queue's delayed command is written instead).
      episode_length: ``(num_envs,)`` int32, steps since each world's last reset.
      terminated: ``(num_envs,)`` bool, the episode ended in a terminal state.
      truncated: ``(num_envs,)`` bool, the episode was cut short (time limit, ...).
      rng: ``(num_envs, 2)`` uint32 raw PRNG key data, one key per world. Resets
        never rewind it.
      overflow: ``(num_envs,)`` int32, the Warp capacity-overflow bits of the last
        step (``OverflowType`` flags; always 0 for impl "jax").
      tripped: ``{guard name: (num_envs,) bool}``, the worlds each guard flagged
        after the last step (see :mod:`mjxrunner.engine.guards`). Resets clear them.
      health: :class:`~mjxrunner.engine.health.HealthCounts`, per-world counts of each
        guard's trips and of resets; like ``rng``, never restored by a reset.
      user: the user's own pytree (None by default). Its leaves follow the
        world-axis rule: declared dataclass fields are per world, bare arrays shared.
      latency: :class:`LatencyState` with action latency on, else None (no buffer,
        the step as without it).
      pushes: :class:`PushState` with random pushes on, else None.
    """

    data: mjx.Data
    ctrl: jax.Array = world_field(1)
    episode_length: jax.Array = world_field(0)
    terminated: jax.Array = world_field(0)
    truncated: jax.Array = world_field(0)
    rng: jax.Array = world_field(1)
    overflow: jax.Array = world_field(0, default=None)
    tripped: dict[str, jax.Array] = world_field(0, default_factory=dict)
    health: HealthCounts | None = None
    user: Any = None
    latency: LatencyState | None = None
    pushes: PushState | None = None

    @property
    def num_envs(self) -> int:
        return self.ctrl.shape[0]

    @property
    def unstable(self) -> jax.Array | None:
        """``(num_envs,)`` bool: the ``"unstable"`` guard's flags of the last step."""
        return self.tripped.get("unstable")
