"""Brax's ``Env`` interface over the functional env, for ``brax.training``'s trainers.

``brax.training.agents.ppo.train`` and ``sac.train`` take :class:`BraxEnv` as they
are, with ``wrap_env_fn=mjxrunner.brax.wrap_env_fn`` (or, for PPO,
``wrap_env=False``): the env is already batched, autoresets and randomizes
itself, so Brax's own wrappers (``VmapWrapper``, ``EpisodeWrapper``,
``AutoResetWrapper``, ``DomainRandomizationVmapWrapper``) must not be stacked on
it. How Brax's training options map onto ours:

============================  ===================================================
Brax                          mjxrunner
============================  ===================================================
``wrap_env=True`` wrappers    ``wrap_env_fn=wrap_env_fn``; batching, autoreset (same
                              step, as Brax's ``AutoResetWrapper``) and
                              truncation are the env's
``num_envs``                  the batch of keys Brax resets with; a
                              :class:`~mjxrunner.env.Env` of that size is built
                              on first use (one per size, e.g. one for
                              ``num_eval_envs``)
``episode_length``            the task's ``max_episode_steps`` ends episodes
                              (``truncated``); pass the same number so Brax's
                              evaluator unrolls whole episodes
``action_repeat``             1; the task's ``substeps`` set physics steps per
                              action
``randomization_fn``          ``randomization=[params.Term(...)]``, redrawn per
                              world on every restart
``normalize_observations``    Brax's own running statistics (or the env's
                              ``normalize_obs=True``, not both)
============================  ===================================================

Truncation reaches Brax's bootstrapping through ``state.info["truncation"]``
(PPO's GAE masks truncated steps, SAC keeps their discount) and
``state.info["time_out"]`` (``bootstrap_on_timeout=True``); ``state.done`` is
``terminated | truncated``. ``info["steps"]`` and ``info["episode_metrics"]`` report
the episode a step belongs to (its last values for a world that restarted in
the step), as Brax's ``EpisodeWrapper`` and evaluator read them.

Actions: Brax's policies act in ``[-1, 1]``; each limited actuator's action is mapped
affinely onto its ``ctrlrange`` (identity for the built-in scenes but the
pendulum's ``[-2, 2]``), unlimited ones pass unchanged.

Imports brax (the extra ``mjxrunner[brax]``). Brax 0.14 still calls
``jax.device_put_replicated``, which JAX 0.10 dropped from its namespace; importing
this module puts the name back (see :func:`_restore_device_put_replicated`).
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
from brax.envs.base import Env as _BraxEnv
from brax.envs.base import State

from mjxrunner.rl import env as env_
from mjxrunner.tasks.base import Task


def _restore_device_put_replicated() -> None:
    """Brax 0.14 (the latest release) calls ``jax.device_put_replicated``, which JAX
    0.10 removed from its namespace (``jax.device_put`` replaces it); the function
    itself is still in ``jax._src.api``. Puts the name back if it is missing, so
    that Brax's trainers run; nothing else changes."""
    if "device_put_replicated" not in vars(jax):
        from jax._src.api import device_put_replicated

        jax.device_put_replicated = device_put_replicated


_restore_device_put_replicated()


class BraxEnv(_BraxEnv):
    """A task as a Brax env, batched over the worlds.

    Args:
      task: a :class:`~mjxrunner.tasks.Task` or a registered task name.
      model: a scene to use instead of the task's.
      randomization: None, or ``mjxrunner.params.Term`` s redrawn per world on
        every restart (Brax's ``randomization_fn``).
      **options: every other option of :func:`mjxrunner.env.make` (the engine's:
        ``impl="c"`` makes one host call per step from inside Brax's programs,
        ``device=``, ...) but
        ``autoreset`` (always ``"same_step"``) and ``devices`` (Brax splits the
        batch over devices itself with ``pmap``).

    ``reset(keys)`` takes ``(num_envs, 2)`` per-world keys (or ``(num_envs,)``
    typed keys, or either with leading axes, which are mapped over) and
    ``step(state, action)`` a ``(num_envs, action_size)`` action.
    """

    def __init__(
        self,
        task: Task | str,
        *,
        model: mujoco.MjModel | str | os.PathLike | None = None,
        randomization: Any = None,
        **options: Any,
    ):
        for name in ("autoreset", "devices"):
            if name in options:
                raise ValueError(
                    f"BraxEnv does not take {name}=: it autoresets in the same step, and "
                    "Brax splits the batch over devices itself"
                )
        if "num_envs" in options:  # as Brax's own envs: the trainer's num_envs sizes it
            raise ValueError(
                "BraxEnv does not take num_envs=: reset(keys) builds the env of as many "
                "worlds as keys (pass num_envs to Brax's trainer)"
            )
        self._options = dict(task=task, model=model, **options)
        self._randomization = list(randomization) if randomization else None
        self._envs: dict[int, env_.Env] = {}
        self._template = self.env_for(1)  # builds once: bad options fail here

    def env_for(self, num_envs: int) -> env_.Env:
        """The :class:`~mjxrunner.env.Env` of ``num_envs`` worlds (built on first use)."""
        if num_envs not in self._envs:
            # Brax first asks from inside its jit or pmap, whose trace state is
            # per thread; built in a thread of its own, the env's arrays are plain
            # device arrays, not values of that trace (a pmap's mesh would stick).
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                self._envs[num_envs] = pool.submit(self._build, num_envs).result()
        return self._envs[num_envs]

    def _build(self, num_envs: int) -> env_.Env:
        options = dict(self._options)
        env = env_.make(options.pop("task"), num_envs, autoreset="same_step", **options)
        return env.with_randomization(self._randomization) if self._randomization else env

    @property
    def observation_size(self) -> int | dict[str, tuple[int, ...]]:
        """The vector size, or for an observation of terms the shape of each (as
        Brax's networks take it with ``policy_obs_key``/``value_obs_key``)."""
        spec = self._template.observation_spec
        if isinstance(spec, dict):
            return {k: tuple(s.shape) for k, s in spec.items()}
        return self._template.observation_size

    @property
    def action_size(self) -> int:
        return self._template.action_size

    @property
    def backend(self) -> str:
        return f"mjx-{self._template.impl}"

    @property
    def unwrapped(self) -> BraxEnv:
        return self

    def reset(self, rng: jax.Array) -> State:
        """Fresh worlds, one per key: world ``i``'s PRNG stream begins at ``rng[i]``."""
        typed = jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
        per_world_ndim = 1 if typed else 2
        if rng.ndim > per_world_ndim:  # e.g. (devices, num_envs, 2) from a trainer
            return jax.vmap(self.reset)(rng)
        if rng.ndim < per_world_ndim:
            raise ValueError(
                "BraxEnv.reset takes one key per world, (num_envs, 2) raw or (num_envs,) "
                f"typed, got shape {rng.shape}; it is batched already (use wrap_env=False)"
            )
        env = self.env_for(rng.shape[0])
        return _to_brax(env_.reset_from_keys(env, rng))

    def step(self, state: State, action: jax.Array) -> State:
        """One step of every world; worlds whose episode ended restart in it.

        Raises:
          TypeError, ValueError: ``state`` not one of this env's states, or
            ``action`` not ``(num_envs, action_size)`` real numbers (as
            :func:`mjxrunner.env.step` checks it; a NaN/Inf action trips the guard).
        """
        s = getattr(state, "pipeline_state", None)
        if not isinstance(state, State) or not isinstance(s, env_.AnyState):
            raise TypeError(
                f"state must be the brax State that reset or step returned, got {type(state)}"
            )
        env = self.env_for(s.num_envs)
        action = env_.check_action(env, action)  # before scaling, which makes bools floats
        low, high = env.low, env.high
        limited = jnp.isfinite(low) & jnp.isfinite(high)
        scaled = (high + low) / 2 + action * ((high - low) / 2)  # exact for [-1, 1]
        return _to_brax(env_.step(env, s, jnp.where(limited, scaled, action)))


def wrap_env_fn(
    env: BraxEnv,
    episode_length: int | None = None,
    action_repeat: int = 1,
    randomization_fn: Any = None,
) -> BraxEnv:
    """For the trainers' ``wrap_env_fn=``: keeps a :class:`BraxEnv` as it is, since it
    batches, autoresets and randomizes itself, and refuses what it cannot honour.

    ``ppo.train(..., wrap_env=False)`` works as well; ``sac.train`` in brax 0.14
    needs this instead (with ``wrap_env=False`` it reads a key it never made).
    """
    del episode_length  # the task's max_episode_steps ends episodes
    if not isinstance(env, BraxEnv):
        raise TypeError(f"env must be a mjxrunner.brax.BraxEnv, got {type(env).__name__}")
    if action_repeat != 1:
        raise ValueError(
            f"action_repeat must be 1, got {action_repeat}: set physics steps per action "
            "with the task's substeps"
        )
    if randomization_fn is not None:
        raise ValueError(
            "randomization_fn is not applied to a BraxEnv: pass "
            "BraxEnv(task, randomization=[mjxrunner.params.Term(...)]) instead"
        )
    return env


def _to_brax(s: env_.EnvState) -> State:
    """Brax's ``State`` of an ``EnvState`` (which rides along as ``pipeline_state``)."""
    dtype = s.reward.dtype
    ended = s.final_mask  # restarted in this step: report the episode that ended
    stats = s.stats
    length = jnp.where(ended, stats.last_length, s.episode_length).astype(dtype)
    total = jnp.where(ended, stats.last_return, stats.episode_return).astype(dtype)
    truncated = s.truncated.astype(dtype)
    info = {
        "truncation": truncated,
        "time_out": truncated,
        "steps": length,
        "episode_done": s.done.astype(dtype),
        "episode_metrics": {"sum_reward": total, "length": length},
    }
    return State(
        pipeline_state=s,
        obs=s.obs,
        reward=s.reward,
        done=s.done.astype(dtype),
        metrics={},
        info=info,
    )
