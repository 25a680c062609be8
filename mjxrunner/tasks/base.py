"""The ``Task`` protocol: what turns a MuJoCo scene into an RL problem.

A task is a frozen bundle of pure functions written for ONE world; the env layer
(:mod:`mjxrunner.env`) ``vmap``s them over the world axis, so a task never sees a
``(num_envs,)`` axis and never broadcasts a mask. Every function must be jit-able
and free of Python side effects. Tasks are hashable (functions compare by
identity), so a task can be a static argument of ``jax.jit``: define the functions
at module level, not as fresh lambdas per call, or each call compiles anew.

What a function may read from ``data``: ``qpos``, ``qvel``, ``time``, ``ctrl`` are
always current. Derived quantities (``xpos``, ``sensordata``, ...) come from the
forward pass at the start of the last physics step, as after ``mj_step``; after a
restart the env runs ``mjx.forward`` so they match the fresh state, unless the task
sets ``forward_on_reset=False`` (right for tasks that read only ``qpos``/``qvel``:
it saves a forward pass per restart and its compile; the physics is unaffected,
since every step begins with its own forward pass).

Adding a task for a new scene: write a module in ``mjxrunner/tasks/`` that defines
``TASKS = (Task(...), ...)``; the registry finds it without further edits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.models import action_bounds  # noqa: F401 - re-exported for tasks

ObservationFn = Callable[[mjx.Model, mjx.Data], jax.Array]
"""``observation(model, data) -> (obs_dim,)`` float array of one world."""

RewardFn = Callable[[mjx.Model, mjx.Data, jax.Array, mjx.Data], jax.Array]
"""``reward(model, data, action, next_data) -> ()``: the reward of the transition
from ``data`` to ``next_data`` under ``action`` (``(nu,)``, already clipped)."""

TerminatedFn = Callable[[mjx.Model, mjx.Data], jax.Array]
"""``terminated(model, data) -> ()`` bool: ``data`` is a terminal state of the MDP."""

InitialStateFn = Callable[[mjx.Model, mjx.Data, jax.Array], mjx.Data]
"""``initial_state(model, data, key) -> data``: randomizes one world's start.

``data`` is the world's default start (the task's keyframe), ``key`` a typed PRNG
key drawn from that world's own stream; return ``data`` with new ``qpos``/``qvel``
(or anything else that belongs to the state).
"""


def never_terminated(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """A ``terminated`` for tasks that only end by time limit."""
    del model, data
    return jnp.zeros((), bool)


def deterministic_start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """An ``initial_state`` that keeps the default start: every episode begins alike."""
    del model, key
    return data


@dataclasses.dataclass(frozen=True)
class Task:
    """An RL task on one scene, as pure single-world functions.

    Attributes:
      name: registry name, e.g. ``"cartpole_balance"``.
      model: name of the scene in ``models/`` (see :func:`mjxrunner.models.list`).
      observation: one world's observation, ``(obs_dim,)``.
      reward: one transition's reward, ``()``.
      terminated: whether a state is terminal, ``()`` bool. Time limits are not
        terminations: they come from ``max_episode_steps`` as ``truncated``.
      initial_state: per-world randomization of the start from the world's key.
      max_episode_steps: steps after which an episode is truncated (``>= 1``).
      keyframe: name of the scene's keyframe to start from (None: ``qpos0``).
      substeps: physics steps per env step (action repeat), ``>= 1``.
      forward_on_reset: run ``mjx.forward`` on a fresh start, so that ``observation``
        can read derived quantities at the first step of an episode.
    """

    name: str
    model: str
    observation: ObservationFn
    reward: RewardFn
    terminated: TerminatedFn = never_terminated
    initial_state: InitialStateFn = deterministic_start
    max_episode_steps: int = 1000
    keyframe: str | None = None
    substeps: int = 1
    forward_on_reset: bool = True

    def __post_init__(self) -> None:
        for field in ("name", "model"):
            if not isinstance(getattr(self, field), str) or not getattr(self, field):
                raise TypeError(f"Task.{field} must be a non-empty str")
        for field in ("observation", "reward", "terminated", "initial_state"):
            if not callable(getattr(self, field)):
                raise TypeError(f"Task.{field} must be callable, got {getattr(self, field)!r}")
        for field in ("max_episode_steps", "substeps"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Task.{field} must be an int >= 1, got {value!r}")
        if not isinstance(self.forward_on_reset, bool):
            raise TypeError(f"Task.forward_on_reset must be a bool, got {self.forward_on_reset!r}")
        if self.keyframe is not None and not isinstance(self.keyframe, str):
            raise TypeError(f"Task.keyframe must be None or a str, got {self.keyframe!r}")

    def replace(self, **changes) -> Task:
        """A copy with some fields changed (e.g. a shorter ``max_episode_steps``)."""
        return dataclasses.replace(self, **changes)
