"""A Gymnasium ``VectorEnv`` over the functional env: NumPy in, NumPy out.

It holds one :class:`~mjxrunner.env.EnvState` and the compiled ``reset``/``step``
of :mod:`mjxrunner.env` (shared by every adapter in the process, and with your own
calls of the same jitted functions), and follows the semantics of
``gymnasium.vector.SyncVectorEnv``: the three autoreset modes, ``final_obs`` and
``final_info`` with their masks in ``SAME_STEP``, partial resets through
``reset(options={"reset_mask": mask})``. ``terminated`` and ``truncated`` stay apart.
Each call moves its results to the host in one transfer.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import gymnasium
import jax
import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from mjxrunner import checks, core, guards
from mjxrunner import env as env_
from mjxrunner.tasks.base import Task

_MODES = {
    AutoresetMode.NEXT_STEP: "next_step",
    AutoresetMode.SAME_STEP: "same_step",
    AutoresetMode.DISABLED: "disabled",
}


def _reseed(state: env_.EnvState, mask: np.ndarray, key: jax.Array) -> env_.EnvState:
    """Gives the worlds in ``mask`` the streams that ``reset(key)`` would give them."""
    fresh = core.init_keys(key, mask.shape[0])
    rng = np.where(mask[:, None], np.asarray(fresh), np.asarray(state.runner.rng))
    rng = jax.device_put(rng, state.runner.rng.sharding)  # placed as before: no recompile
    return state.replace(runner=state.runner.replace(rng=rng))


def _autoreset_mode(value: Any) -> AutoresetMode:
    """An ``AutoresetMode`` from itself, its value (``"SameStep"``) or our name
    (``"same_step"``)."""
    by_name = {name: mode for mode, name in _MODES.items()}
    if isinstance(value, str) and value in by_name:
        return by_name[value]
    try:
        return AutoresetMode(value)
    except ValueError:
        names = [m.value for m in AutoresetMode] + list(by_name)
        raise ValueError(f"autoreset_mode must be one of {names}, got {value!r}") from None


class MjxVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` worlds of a task as a Gymnasium vector env.

    Args:
      task: a :class:`~mjxrunner.tasks.Task` or a registered task name.
      num_envs: number of worlds.
      autoreset_mode: a ``gymnasium.vector.AutoresetMode``, its value
        (``"NextStep"``, ``"SameStep"``, ``"Disabled"``) or the env's name for it
        (``"next_step"``, ``"same_step"``, ``"disabled"``).
      seed: seed of the first :meth:`reset` when it is given none.
      impl: MJX implementation, ``"jax"`` or ``"warp"``.
      device: None, a ``jax.Device`` or a platform name.
      model: a scene to use instead of the task's (see :func:`mjxrunner.env.make`).
      reset_pool: if > 0, restarts draw from this many cached starts.
      **options: every other option of :func:`mjxrunner.env.make`, passed through:
        Warp capacities and ``graph_mode``, ``overflow_policy``,
        ``instability_policy``, ``max_qvel``, ``guards``, ``devices``. Guards with
        policy ``"warn"`` or ``"raise"`` are applied after each step; ``"raise"``
        keeps the state of before the step.

    Per-world parameters and randomization: :meth:`set_param` and
    :meth:`set_randomization`, as on the runner.

    Spaces: ``single_observation_space`` is an unbounded float32 ``Box``;
    ``single_action_space`` is a float32 ``Box`` of the actuators' ``ctrlrange``
    (actions outside it are clipped, as MuJoCo clamps limited controls).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        task: Task | str,
        num_envs: int,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        seed: int = 0,
        impl: str = "jax",
        device: Any = None,
        model: mujoco.MjModel | str | os.PathLike | None = None,
        reset_pool: int = 0,
        **options: Any,
    ):
        mode = _autoreset_mode(autoreset_mode)
        self._seed = checks.count(seed, "seed", minimum=0)
        self.env = env_.make(
            task,
            num_envs,
            autoreset=_MODES[mode],
            impl=impl,
            device=device,
            model=model,
            reset_pool=reset_pool,
            pool_seed=self._seed,
            **options,
        )
        self.num_envs = self.env.num_envs
        self.autoreset_mode = mode
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        low, high = (np.asarray(b, np.float32) for b in (self.env.low, self.env.high))
        obs_dim = self.env.observation_size
        self.single_observation_space = gymnasium.spaces.Box(
            -np.inf, np.inf, (obs_dim,), np.float32
        )
        self.single_action_space = gymnasium.spaces.Box(low, high, low.shape, np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._state: env_.EnvState | None = None
        self._done = np.zeros((self.num_envs,), bool)
        self._host_guards = bool(guards.host_policies(self.env.config.guards))

    def set_param(self, path: str, values: Any, env_ids: Any = None) -> None:
        """Sets a model field for all worlds or per world (see
        :meth:`mjxrunner.MultiEnvRunner.set_param`); restarts keep the values."""
        self.env = self.env.with_param(path, values, env_ids)

    def set_randomization(
        self, terms: Any, *, on_reset: bool = True, every_n_steps: int = 0
    ) -> None:
        """Redraws parameters on every restart (see :meth:`Env.with_randomization`);
        takes effect from the next :meth:`reset` without a mask."""
        self.env = self.env.with_randomization(
            terms, on_reset=on_reset, every_n_steps=every_n_steps
        )
        self._state = None

    @property
    def health(self) -> Any:
        """NumPy snapshot of every guard's flags and counts (:class:`health.Report`)."""
        return env_.health_report(self.state)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the env and its state (see :func:`mjxrunner.env.save`)."""
        env_.save(path, self.env, self.state)

    @property
    def state(self) -> env_.EnvState:
        """The current :class:`~mjxrunner.env.EnvState` (device arrays)."""
        if self._state is None:
            raise RuntimeError("call reset() before reading the state")
        return self._state

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Restarts every world, or those of ``options["reset_mask"]``.

        Args:
          seed: an int restarts the selected worlds' PRNG streams from it (world
            ``i`` gets ``jax.random.split(jax.random.key(seed), num_envs)[i]``);
            None continues their streams (the constructor's seed on first reset).
          options: None, or ``{"reset_mask": (num_envs,) bool ndarray}`` to restart
            only those worlds (at least one); the others keep their state.

        Returns:
          ``(obs (num_envs, obs_dim) float32, info {})``.
        """
        if seed is not None:
            seed = checks.count(seed, "seed", minimum=0)
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; known: ['reset_mask']")
        if mask is not None:
            if not isinstance(mask, np.ndarray):
                raise TypeError(f"options['reset_mask'] must be a numpy array, got {type(mask)}")
            if mask.dtype != np.bool_:
                raise TypeError(f"options['reset_mask'] must have dtype bool, got {mask.dtype}")
            if mask.shape != (self.num_envs,):
                raise ValueError(
                    f"options['reset_mask'] must have shape ({self.num_envs},), got {mask.shape}"
                )
            if not mask.any():
                raise ValueError("options['reset_mask'] must select at least one world")
            if self._state is None:
                raise RuntimeError("reset() without a mask must come first")
        super().reset(seed=seed)

        if mask is None and (seed is not None or self._state is None):
            key = jax.random.key(self._seed if seed is None else seed)
            state = env_.jit_reset(self.env, key)
        else:
            mask = np.ones((self.num_envs,), bool) if mask is None else mask
            state = self._state
            if seed is not None:
                state = _reseed(state, mask, jax.random.key(seed))
            state = env_.jit_reset_worlds(self.env, state, mask)
        self._state = state
        obs, done = jax.device_get((state.obs, state.done))
        self._done = np.asarray(done)
        return np.asarray(obs, np.float32), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every world; autoresets as ``metadata["autoreset_mode"]`` says.

        Args:
          actions: ``(num_envs, nu)`` finite real numbers.

        Returns:
          ``(obs float32, rewards float64, terminated bool, truncated bool, infos)``,
          each with a leading ``num_envs`` axis. In ``SAME_STEP``, ``infos`` holds
          ``final_obs`` (an object array with each restarted world's terminal
          observation, None elsewhere), ``final_info`` and the masks
          ``_final_obs``/``_final_info``, as ``SyncVectorEnv`` gives them.

        Raises:
          RuntimeError: before the first :meth:`reset`, or in ``DISABLED`` mode when
            a world whose episode ended has not been reset.
          TypeError, ValueError: ``actions`` of the wrong type, shape or values.
        """
        state = self.state
        actions = checks.finite_array(
            actions, "actions", (self.num_envs, self.env.action_size), np.float32
        )
        if self.autoreset_mode == AutoresetMode.DISABLED and self._done.any():
            raise RuntimeError(
                f"worlds {np.flatnonzero(self._done).tolist()} ended their episode; with "
                "autoreset_mode DISABLED reset them with reset(options={'reset_mask': ...}) "
                "before stepping"
            )
        new = env_.jit_step(self.env, state, actions)
        found = env_.check_guards(self.env, state, new) if self._host_guards else None
        if found is not None:  # "raise": the state of before the step stays current
            guard, worlds = found
            raise guard.error(guard.message(worlds, new.runner))
        self._state = state = new
        obs, reward, terminated, truncated, final_obs, final_mask = jax.device_get(
            (
                state.obs,
                state.reward,
                state.terminated,
                state.truncated,
                state.final_obs,
                state.final_mask,
            )
        )
        terminated, truncated = np.asarray(terminated), np.asarray(truncated)
        self._done = terminated | truncated
        infos: dict[str, Any] = {}
        if final_mask.any():
            ended = np.asarray(final_mask)
            final = np.full((self.num_envs,), None, dtype=object)
            for i in np.flatnonzero(ended):
                final[i] = np.asarray(final_obs[i], np.float32)
            infos = {
                "final_obs": final,
                "_final_obs": ended.copy(),
                "final_info": {},
                "_final_info": ended.copy(),
            }
        return (
            np.asarray(obs, np.float32),
            np.asarray(reward, np.float64),
            terminated,
            truncated,
            infos,
        )

    def episode_statistics(self) -> dict[str, Any]:
        """NumPy view of the per-world episode statistics (see
        :func:`mjxrunner.env.episode_statistics`)."""
        return env_.episode_statistics(self.state)

    def __repr__(self) -> str:
        return (
            f"MjxVectorEnv({self.env.task.name!r}, num_envs={self.num_envs}, "
            f"autoreset_mode={self.autoreset_mode})"
        )
