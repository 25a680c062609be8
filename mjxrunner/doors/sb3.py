"""Stable-Baselines3's ``VecEnv`` over the Gymnasium front door, so SB3's algorithms
train on every world of one env.

SB3 steps a ``VecEnv`` of single envs (``DummyVecEnv``, ``SubprocVecEnv``); here the
"envs" are the worlds of one :class:`~mjxrunner.gym.MjxVectorEnv`, all stepped by one
compiled step per :meth:`Sb3VecEnv.step_wait`. What SB3 reads is given as its own
``DummyVecEnv`` gives it: single-world spaces, ``dones = terminated | truncated``,
autoreset in the same step (a done world's observation is already its next
episode's first; ``infos[i]["terminal_observation"]`` holds the one its episode ended
on), ``infos[i]["TimeLimit.truncated"]`` (``truncated and not terminated``: PPO and
the off-policy buffers bootstrap those steps from the terminal observation), and
float32 rewards. The worlds are on one device and counted there, so no ``Monitor``
is needed: ``infos[i]["episode"]`` carries each finished episode as SB3's
``Monitor`` writes it (``{"r": return, "l": length, "t": seconds since the env was
made}``), which SB3's logger reads for ``rollout/ep_rew_mean``. A task with
observation terms gives a ``Dict`` space and dict observations (SB3's
``MultiInputPolicy``).

Imports stable_baselines3; ``import mjxrunner`` does not (install
``stable-baselines3``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.engine import checks
from mjxrunner.tasks.base import Task


def _own(obs: Any) -> Any:
    """A writable copy of observations (an array, or a dict of them): what the
    Gymnasium door hands out are read-only views of the step's host buffers, which
    torch warns about when SB3 makes tensors of them and which SB3's wrappers may
    write into."""
    if isinstance(obs, dict):
        return {k: np.array(v) for k, v in obs.items()}
    return np.array(obs)


class Sb3VecEnv(VecEnv):
    """The worlds of a task as an SB3 ``VecEnv`` (one SB3 env per world).

    Args:
      task: a :class:`~mjxrunner.tasks.Task` or a registered task name, or a
        :class:`~mjxrunner.gym.MjxVectorEnv` in ``SAME_STEP`` autoreset mode to
        wrap as it is (then neither ``num_envs`` nor options).
      num_envs: number of worlds (with a task).
      **options: options of :class:`~mjxrunner.gym.MjxVectorEnv` (``seed``,
        ``impl``, ``device``, guards, ``normalize_obs``, ``render_mode``, ...),
        except ``autoreset_mode``: SB3 autoresets in the same step.
        ``episode_info=False`` leaves ``infos[i]["episode"]`` to SB3's ``VecMonitor``.

    Attributes:
      vector_env: the :class:`~mjxrunner.gym.MjxVectorEnv` underneath (its state,
        parameters, statistics and rendering).

    Seeds: SB3's :meth:`seed` (``PPO(..., seed=s)`` calls it) takes effect at the
    next :meth:`reset`, as in SB3, and seeds the batch: world ``i`` starts its PRNG
    stream at ``jax.random.split(jax.random.key(s), num_envs)[i]``. A reset without
    a new seed continues the worlds' streams.

    The SB3 envs are worlds of one env, so :meth:`get_attr` reads the vector env's
    attribute for each world asked; :meth:`set_attr` and :meth:`env_method` act on
    the vector env, hence on every world, and refuse ``indices`` that leave worlds
    out (``set_param`` selects worlds with its own ``env_ids``).
    """

    def __init__(self, task: Task | str | MjxVectorEnv, num_envs: int | None = None, **options):
        if isinstance(task, MjxVectorEnv):
            if num_envs is not None or options:
                raise ValueError("pass either an MjxVectorEnv or a task with its options")
            if task.autoreset_mode != AutoresetMode.SAME_STEP:
                raise ValueError(
                    "SB3 autoresets in the same step: make the MjxVectorEnv with "
                    f"autoreset_mode='same_step', got {task.autoreset_mode}"
                )
            vector_env = task
        else:
            if num_envs is None:
                raise ValueError("num_envs is required with a task")
            if "autoreset_mode" in options:
                raise ValueError(
                    "Sb3VecEnv takes no autoreset_mode: SB3 autoresets in the same step"
                )
            vector_env = MjxVectorEnv(
                task, num_envs, autoreset_mode=AutoresetMode.SAME_STEP, **options
            )
        self.vector_env = vector_env  # before VecEnv's constructor, which reads render_mode
        self._waiting: tuple[Any] | None = None  # (actions,) from step_async, for step_wait
        self._made_at = time.perf_counter()  # the origin of Monitor's "t"
        super().__init__(
            vector_env.num_envs,
            vector_env.single_observation_space,
            vector_env.single_action_space,
        )
        self.metadata = vector_env.metadata  # render_fps, for SB3's VecVideoRecorder

    # --- stepping ----------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Restarts every world, from the seed given to :meth:`seed` if one came since
        the last reset; drops actions waiting for :meth:`step_wait`.

        Returns:
          ``(num_envs, *obs_shape)`` float32, or a dict of such arrays (one per term).
        """
        given = [s for s in self._seeds if s is not None]
        obs, _ = self.vector_env.reset(seed=given[0] if given else None)
        self._waiting = None
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()  # seeds are used once, as in SB3
        self._reset_options()
        return _own(obs)

    def step_async(self, actions: np.ndarray) -> None:
        """Keeps ``(num_envs, *action_shape)`` actions for :meth:`step_wait`, which
        checks them (the Gymnasium door's checks)."""
        self._waiting = (actions,)

    def step_wait(self) -> VecEnvStepReturn:
        """Steps every world with the actions of :meth:`step_async`.

        Returns:
          ``(obs, rewards float32, dones bool, infos)``: ``infos`` a list of one dict
          per world, with ``"TimeLimit.truncated"``, and for a world whose episode
          ended ``"terminal_observation"`` and ``"episode"``.

        Raises:
          RuntimeError: without :meth:`step_async` first, or before :meth:`reset`.
          TypeError, ValueError: actions of the wrong type, shape or values; the
            worlds are left as they were, and the actions are dropped.
        """
        waiting, self._waiting = self._waiting, None  # a refused step leaves none waiting
        if waiting is None:
            raise RuntimeError("call step_async(actions) before step_wait()")
        (actions,) = waiting
        obs, rewards, terminated, truncated, info = self.vector_env.step(actions)
        time_limit = truncated & ~terminated
        infos: list[dict[str, Any]] = [{"TimeLimit.truncated": bool(t)} for t in time_limit]
        if "_final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                infos[i]["terminal_observation"] = _own(info["final_obs"][i])
        if "_episode" in info:
            episode = info["episode"]
            # Monitor's "t" is seconds since it was made, not the episode's duration.
            elapsed = round(time.perf_counter() - self._made_at, 6)
            for i in np.flatnonzero(info["_episode"]):
                infos[i]["episode"] = {
                    "r": round(float(episode["r"][i]), 6),
                    "l": int(episode["l"][i]),
                    "t": elapsed,
                }
        return _own(obs), rewards.astype(np.float32), terminated | truncated, infos

    def close(self) -> None:
        self.vector_env.close()

    # --- seeds and options ---------------------------------------------------------------

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """SB3's seeds, ``seed + i`` for world ``i``, for the next :meth:`reset`,
        which seeds the batch with ``seed`` (see the class). None draws one."""
        if seed is not None:
            checks.seed(seed)  # refused now rather than at the next reset
        return super().seed(seed)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """Refuses any reset option: the worlds restart together, and take none."""
        given = options if isinstance(options, list) else [options]
        if any(given):
            raise ValueError(f"Sb3VecEnv takes no reset options, got {options!r}")
        super().set_options(options)

    # --- attributes and methods of the worlds ---------------------------------------------

    def _worlds(self, indices: VecEnvIndices, what: str = "") -> np.ndarray:
        """The worlds of SB3's ``indices``; with ``what``, they must be all of them."""
        worlds = checks.env_ids(list(self._get_indices(indices)), self.num_envs, "indices")
        if what and len(worlds) != self.num_envs:
            raise ValueError(
                f"{what} acts on the vector env, hence on every world: pass indices=None "
                f"(got worlds {worlds.tolist()} of {self.num_envs})"
            )
        return worlds

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The vector env's ``attr_name``, once per world of ``indices``."""
        worlds = self._worlds(indices)
        value = getattr(self.vector_env, attr_name)  # AttributeError, as has_attr expects
        return [value] * len(worlds)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Sets ``attr_name`` of the vector env (for every world)."""
        self._worlds(indices, f"set_attr({attr_name!r})")
        setattr(self.vector_env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        """Calls the vector env's method once (for every world); its result, once per
        world."""
        self._worlds(indices, f"env_method({method_name!r})")
        result = getattr(self.vector_env, method_name)(*method_args, **method_kwargs)
        return [result] * self.num_envs

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """False for each world: no Gymnasium wrapper is between SB3 and the worlds."""
        return [False] * len(self._worlds(indices))

    # --- rendering -------------------------------------------------------------------------

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One ``(height, width, 3)`` uint8 frame per world (``render_mode="rgb_array"``;
        SB3's :meth:`render` tiles them). Every world is drawn: for a large batch,
        ``vector_env.render_tiled()`` draws only its ``render_worlds``."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but get_images needs 'rgb_array' "
                "(pass render_mode='rgb_array')",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return list(self.vector_env.render())

    def __repr__(self) -> str:
        return f"Sb3VecEnv({self.vector_env.env.task.name!r}, num_envs={self.num_envs})"
