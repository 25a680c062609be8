"""What an env's state holds: the per-world state of the RL layer over the engine's
``RunnerState``, episode statistics, and the host-side helpers that read or reseed it.

:class:`EnvState` is what :func:`mjxrunner.env.reset` returns and
:func:`mjxrunner.env.step` advances; groups of envs register their own variants of
the functions here (:mod:`.group_env`).
"""

from __future__ import annotations

import abc
import functools
from typing import Any

import jax
import numpy as np

from mjxrunner.engine import core, health
from mjxrunner.engine.state import RunnerState
from mjxrunner.engine.worlds import (
    BATCHED,
    FlatModel,
    pytree_dataclass,
    world_field,
)
from mjxrunner.kit import normalize

AUTORESET_MODES = ("next_step", "same_step", "disabled")


NEXT_STEP, SAME_STEP, DISABLED = range(3)  # codes of the modes in ``Env.mode``


@pytree_dataclass
class EpisodeStats:
    """Per-world episode statistics, kept on device and updated in the step.

    Attributes:
      episode_return: ``(num_envs,)`` float, return of the running episode so far.
      last_return: ``(num_envs,)`` float, return of the world's last completed
        episode (0 before the first).
      last_length: ``(num_envs,)`` int32, its length in steps.
      completed: ``(num_envs,)`` int32, episodes completed since :func:`reset`.
      return_sum: ``(num_envs,)`` float, sum of the returns of those episodes.
      length_sum: ``(num_envs,)`` int32, sum of their lengths.

    The running episode's length is ``RunnerState.episode_length``. Differences of
    ``completed``/``return_sum``/``length_sum`` between two reads give the mean over
    every episode that ended in between, with one host transfer per read.
    """

    episode_return: jax.Array = world_field(0)
    last_return: jax.Array = world_field(0)
    last_length: jax.Array = world_field(0)
    completed: jax.Array = world_field(0)
    return_sum: jax.Array = world_field(0)
    length_sum: jax.Array = world_field(0)


@pytree_dataclass
class LastFrames:
    """The frames a pixel env rendered last, kept when it renders every k-th step
    (``PixelSpec.every > 1``) to be shown again in between.

    Attributes:
      frames: ``{kind: (num_envs, ...)}`` as :meth:`PixelRenderer.render` gives them
        (``"rgb"``, ``"depth"``, ``"segmentation"``); a restarted world's are those
        of its fresh start.
      age: ``()`` int32, steps since the last render of every world (0: this step's).
    """

    frames: Any = world_field(BATCHED)
    age: jax.Array = world_field(0)


@pytree_dataclass
class EnvState:
    """State of ``num_envs`` worlds of a task, after a reset or a step.

    Attributes:
      runner: the :class:`RunnerState`: batched data, controls (the clipped last
        action), ``episode_length``, ``terminated``, ``truncated``, per-world raw
        ``uint32`` keys ``(num_envs, 2)``, guard flags and health counts.
      obs: ``(num_envs, obs_dim)`` observation to act on next; for a task whose
        observation is a dict of terms, a dict of ``(num_envs, *term)`` arrays.
        With an :class:`~mjxrunner.kit.observations.ObsConfig`, noisy, and a term with a
        history is its history (see :mod:`mjxrunner.kit.observations`).
      reward: ``(num_envs,)`` reward of the last step.
      final_obs: the observation at the end of the last step, before any restart,
        shaped like ``obs``. Equal to ``obs`` except where ``final_mask``.
      final_mask: ``(num_envs,)`` bool, worlds restarted in the same step
        (``"same_step"`` mode only); their terminal observation is ``final_obs``.
      stats: per-world :class:`EpisodeStats`.
      model: the current model when the env randomizes parameters (redrawn for
        each restarted world), else None (the env's own model).
      obs_norm: the running observation statistics when the env normalizes
        observations (:mod:`mjxrunner.kit.normalize`), else None. ``obs`` and
        ``final_obs`` are then normalized.
      info: the task's per-world state (``Task.initial_info``), each leaf with a
        leading world axis; None for a task without one.
      history: ``{term: (num_envs, k, *term)}`` the last ``k`` noisy values of each
        term with a history (``""`` names an array observation), oldest first,
        before normalization; None without history.
      last_frames: a pixel env's last rendered frames when it renders every k-th
        step (:class:`LastFrames`), else None.
      curriculum: the task's per-world state across episodes
        (``Task.initial_curriculum``; see :mod:`mjxrunner.rl.curriculum`), each leaf
        with a leading world axis; None for a task without one.
    """

    runner: RunnerState
    obs: Any = world_field(BATCHED)
    reward: jax.Array = world_field(0)
    final_obs: Any = world_field(BATCHED)
    final_mask: jax.Array = world_field(0)
    stats: EpisodeStats = None
    model: FlatModel | None = None
    obs_norm: normalize.ObsNorm | None = None
    info: Any = world_field(BATCHED, default=None)
    history: Any = world_field(BATCHED, default=None)
    last_frames: LastFrames | None = None
    curriculum: Any = world_field(BATCHED, default=None)

    @property
    def terminated(self) -> jax.Array:
        """``(num_envs,)`` bool: the last step reached a terminal state."""
        return self.runner.terminated

    @property
    def truncated(self) -> jax.Array:
        """``(num_envs,)`` bool: the last step hit the time limit (or a guard)."""
        return self.runner.truncated

    @property
    def done(self) -> jax.Array:
        """``(num_envs,)`` bool: ``terminated | truncated``."""
        return self.runner.terminated | self.runner.truncated

    @property
    def nonfinite(self) -> jax.Array:
        """``(num_envs,)`` bool: worlds the instability guard flagged in the last step
        (NaN/Inf or runaway state; they are also ``truncated``)."""
        return self.runner.tripped["unstable"]

    @property
    def episode_length(self) -> jax.Array:
        """``(num_envs,)`` int32, steps of the running episode."""
        return self.runner.episode_length

    @property
    def num_envs(self) -> int:
        return self.reward.shape[0]


class AnyState(abc.ABC):  # noqa: B024 - a kind to register, no methods
    """States of an :class:`~mjxrunner.rl.functional.AnyEnv`: :class:`EnvState`, and
    those that register themselves (groups: ``GroupState``)."""


AnyState.register(EnvState)


@functools.singledispatch
def health_report(state: EnvState) -> health.Report:
    """NumPy snapshot of every guard's flags and counts and the restart counts."""
    return health.Report.from_state(state.runner)


@functools.singledispatch
def reseed(state: EnvState, mask: np.ndarray, key: jax.Array) -> EnvState:
    """The worlds in ``mask`` given the PRNG streams ``reset(key)`` would give them
    (host side: for doors that reseed chosen worlds)."""
    return with_streams(state, mask, np.asarray(core.init_keys(key, mask.shape[0])))


def with_streams(state: EnvState, mask: np.ndarray, fresh: np.ndarray) -> EnvState:
    """``state`` whose worlds in ``mask`` continue from the raw keys ``fresh``
    (``(num_envs, 2)``; host side)."""
    rng = np.where(mask[:, None], fresh, np.asarray(state.runner.rng))
    rng = jax.device_put(rng, state.runner.rng.sharding)  # placed as before: no recompile
    return state.replace(runner=state.runner.replace(rng=rng))


@functools.singledispatch
def with_episode_length(state: EnvState, lengths: np.ndarray) -> EnvState:
    """``state`` with each world's running episode length set (host side)."""
    current = state.runner.episode_length
    new = jax.device_put(np.asarray(lengths, np.int32), current.sharding)
    return state.replace(runner=state.runner.replace(episode_length=new))


def episode_statistics(state: EnvState) -> dict[str, Any]:
    """A NumPy view of the episode statistics, for logging (one host transfer).

    Returns:
      Per-world ``(num_envs,)`` arrays ``episode_return``, ``episode_length``
      (running episode), ``last_return``, ``last_length``, ``completed``,
      ``return_sum``, ``length_sum``; and scalars ``episodes`` (completed in all
      worlds), ``mean_return`` and ``mean_length`` over them (NaN before the first).
    """
    stats, length = jax.device_get((state.stats, state.episode_length))
    out: dict[str, Any] = {
        "episode_return": np.asarray(stats.episode_return),
        "episode_length": np.asarray(length),
        "last_return": np.asarray(stats.last_return),
        "last_length": np.asarray(stats.last_length),
        "completed": np.asarray(stats.completed),
        "return_sum": np.asarray(stats.return_sum),
        "length_sum": np.asarray(stats.length_sum),
    }
    episodes = int(out["completed"].sum())
    out["episodes"] = episodes
    out["mean_return"] = float(out["return_sum"].sum() / episodes) if episodes else float("nan")
    out["mean_length"] = float(out["length_sum"].sum() / episodes) if episodes else float("nan")
    return out
