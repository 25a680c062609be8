"""A Gymnasium ``VectorEnv`` over the functional env: NumPy in, NumPy out.

It holds the env and its state in a :class:`~mjxrunner.doors.door.Door` (one compiled
step over packed buffers, shared by every door in the process) and follows the
semantics of ``gymnasium.vector.SyncVectorEnv``: the three autoreset modes,
``final_obs`` and ``final_info`` with their masks in ``SAME_STEP``, partial resets
through ``reset(options={"reset_mask": mask})``. ``terminated`` and ``truncated``
stay apart. A step's results come to the host as two buffers (floats and flags,
packed by the compiled step: :func:`mjxrunner.doors.door.outputs`), in one transfer.

Rendering copies only the drawn worlds' state to the host
(:class:`~mjxrunner.kit.render.WorldRenderer`), never the batch. With
``render_mode="rgb_array"``, :meth:`MjxVectorEnv.render` returns what Gymnasium's
vector wrappers (``RecordVideo``, ``HumanRendering``) read: one frame per world, as
a lazy sequence that draws a world when its frame is read, so
``RecordVideo(env, folder, record_first_only=True)`` draws one world per frame at any
batch size. ``"rgb_array_list"`` records, at every reset and step, one picture of
the ``render_worlds`` side by side, and :meth:`~MjxVectorEnv.render` returns and
clears them; :meth:`~MjxVectorEnv.render_tiled` draws that picture now in either
mode. Importing mjxrunner registers every built-in task with Gymnasium
(:mod:`mjxrunner.doors.registration`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import gymnasium
import jax
import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from mjxrunner.doors import door
from mjxrunner.engine import cache, checks
from mjxrunner.kit import render
from mjxrunner.rl import env as env_
from mjxrunner.tasks.base import Task

_MODES = {
    AutoresetMode.NEXT_STEP: "next_step",
    AutoresetMode.SAME_STEP: "same_step",
    AutoresetMode.DISABLED: "disabled",
}


class WorldFrames(Sequence):
    """One frame per world, each drawn the first time it is read.

    Args:
      draw: ``draw(world) -> (height, width, 3)`` uint8.
      num_envs: number of worlds.
    """

    def __init__(self, draw: Callable[[int], np.ndarray], num_envs: int):
        self._draw, self._n, self._drawn = draw, num_envs, {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        world = range(self._n)[index]  # IndexError past the end, negatives from the end
        if world not in self._drawn:
            self._drawn[world] = self._draw(world)
        return self._drawn[world]


def term_space(spec: Any) -> gymnasium.spaces.Box:
    """The space of one observation term of one world: float terms unbounded
    float32, integer terms (images) bounded by their dtype."""
    dtype = np.dtype(spec.dtype)
    if np.issubdtype(dtype, np.floating):
        return gymnasium.spaces.Box(-np.inf, np.inf, tuple(spec.shape), np.float32)
    if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        info = np.iinfo(dtype) if dtype != np.bool_ else np.iinfo(np.uint8)
        low, high = (0, 1) if dtype == np.bool_ else (info.min, info.max)
        return gymnasium.spaces.Box(low, high, tuple(spec.shape), dtype)
    raise TypeError(f"no Gymnasium space for an observation term of dtype {dtype}")


def observation_space(spec: Any) -> gymnasium.spaces.Space:
    """One world's observation space: a ``Box``, or a ``Dict`` of them for terms."""
    if isinstance(spec, dict):
        return gymnasium.spaces.Dict({k: term_space(s) for k, s in spec.items()})
    return term_space(spec)


def to_numpy(obs: Any) -> Any:
    """Host observations as Gymnasium gives them: float terms as float32, others
    in their own dtype; a dict of them for terms."""
    if isinstance(obs, dict):
        return {k: to_numpy(v) for k, v in obs.items()}
    obs = np.asarray(obs)
    return obs.astype(np.float32, copy=False) if np.issubdtype(obs.dtype, np.floating) else obs


def world_of(obs: Any, i: int) -> Any:
    """World ``i`` of host observations (each term's row, for terms)."""
    if isinstance(obs, dict):
        return {k: v[i] for k, v in obs.items()}
    return obs[i]


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
      model: a scene to use instead of the task's (see :func:`mjxrunner.env.make`).
      reset_pool: if > 0, restarts draw from this many cached starts.
      render_mode: None, ``"rgb_array"`` (:meth:`render` returns one frame per
        world, drawn when read) or ``"rgb_array_list"`` (every reset and step
        records a side-by-side picture of ``render_worlds``; :meth:`render`
        returns and clears them).
      render_worlds: the worlds :meth:`render_tiled` shows side by side (default:
        the first ``min(4, num_envs)``).
      render_size: ``(width, height)`` of a frame in pixels.
      camera: None (a free camera: the model's first camera for one world's frame,
        a camera framing them all for the side-by-side picture), or a camera
        name or index of the model.
      episode_info: :meth:`step`'s ``infos`` carry the episodes that ended
        (``"episode"``, ``"_episode"``), as Gymnasium's ``RecordEpisodeStatistics``
        adds them; False leaves that to such a wrapper (which refuses to add
        them where they are already).
      **options: every other option of :func:`mjxrunner.env.make`, passed through:
        the engine's (an ``options=`` :class:`~mjxrunner.engine.Options` or its
        fields by name: ``impl="c"``, ``device=``, ...), ``devices``,
        ``restart_slots``, ``normalize_obs`` and ``obs_clip``. Guards with policy
        ``"warn"`` or ``"raise"`` are applied after each step; ``"raise"`` keeps the
        state of before the step.

    Per-world parameters and randomization: :meth:`set_param` and
    :meth:`set_randomization`, as on the runner.

    Compiled programs: the door turns JAX's persistent compilation cache on in
    mjxrunner's cache folder (:func:`mjxrunner.engine.cache.use_compile_cache`)
    unless a cache folder is set already, and keeps the package's own programs whole
    (:mod:`mjxrunner.engine.programs`); ``MJXRUNNER_COMPILE_CACHE=0`` keeps both off.

    Spaces: ``single_observation_space`` is an unbounded float32 ``Box``, or for a
    task with observation terms a ``Dict`` of them (integer terms such as uint8
    images bounded by their dtype);
    ``single_action_space`` is a float32 ``Box`` of the actuators' ``ctrlrange``
    (actions outside it are clipped, as MuJoCo clamps limited controls).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array", "rgb_array_list"]}

    def __init__(
        self,
        task: Task | str,
        num_envs: int,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        seed: int = 0,
        model: mujoco.MjModel | str | os.PathLike | None = None,
        reset_pool: int = 0,
        render_mode: str | None = None,
        render_worlds: Any = None,
        render_size: tuple[int, int] = (640, 480),
        camera: int | str | None = None,
        episode_info: bool = True,
        **options: Any,
    ):
        mode = _autoreset_mode(autoreset_mode)
        self._seed = checks.seed(seed)
        if render_mode is not None and render_mode not in type(self).metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {type(self).metadata['render_modes']}, "
                f"got {render_mode!r}"
            )
        env = env_.make(
            task,
            num_envs,
            autoreset=_MODES[mode],
            model=model,
            reset_pool=reset_pool,
            pool_seed=self._seed,
            **options,
        )
        self._door = door.Door(env, door.outputs)
        self._next_env: env_.Env | None = None  # set_randomization's env, from reset() on
        self._outputs = door.Outputs(env.observation_spec, env.num_envs, env.low.dtype)
        self._episode_info = checks.flag(episode_info, "episode_info")
        self._episode_start = np.zeros((env.num_envs,))  # wall time, for info["episode"]
        self._whole = not isinstance(env.observation_spec, dict)
        self.num_envs = env.num_envs
        self.autoreset_mode = mode
        control_dt = float(env.host.mj_model.opt.timestep) * env.task.substeps
        self.metadata = {
            **type(self).metadata,
            "autoreset_mode": mode,
            "render_fps": max(1, round(1.0 / control_dt)),
        }
        self.render_mode = render_mode
        if render_worlds is None:
            render_worlds = range(min(4, self.num_envs))
        self._render_worlds = [
            int(w) for w in checks.env_ids(render_worlds, self.num_envs, "render_worlds")
        ]
        if not self._render_worlds:
            raise ValueError("render_worlds must name at least one world")
        self._render_size = render.check_size(*render_size)
        self._camera = camera
        self._renderers: list[tuple[mujoco.MjModel, render.WorldRenderer]] = []
        self._frames: list[np.ndarray] = []
        low, high = (np.asarray(b, np.float32) for b in (self.env.low, self.env.high))
        self.single_observation_space = observation_space(self.env.observation_spec)
        self.single_action_space = gymnasium.spaces.Box(low, high, low.shape, np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._done = np.zeros((self.num_envs,), bool)
        if camera is not None:
            self._world_renderer()._camera(camera)  # refuse a bad camera now
        # Last, once nothing is refused: a second process makes this env's compiled
        # programs from the cache (a robot's take minutes on impl "jax").
        cache.use_compile_cache()

    @property
    def env(self) -> env_.Env:
        """The functional :class:`~mjxrunner.env.Env` under this adapter."""
        return self._door.env

    @env.setter
    def env(self, env: env_.Env) -> None:
        self._door.env = env

    def set_param(self, path: str, values: Any, env_ids: Any = None) -> None:
        """Sets a model field for all worlds or per world (see
        :meth:`mjxrunner.MultiEnvRunner.set_param`); restarts keep the values."""
        env = self.env.with_param(path, values, env_ids)
        if self._next_env is not None:  # the randomization waiting for reset() gets it too
            self._next_env = self._next_env.with_param(path, values, env_ids)
        self.env = env

    def set_randomization(
        self, terms: Any, *, on_reset: bool = True, every_n_steps: int = 0
    ) -> None:
        """Redraws parameters on every restart (see :meth:`Env.with_randomization`);
        takes effect from the next :meth:`reset` without a mask. Until then the
        worlds run on as they are (their state may not fit the new env)."""
        env = self.env.with_randomization(terms, on_reset=on_reset, every_n_steps=every_n_steps)
        if self._door.ready:
            self._next_env = env
        else:
            self.env = env

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
        return self._door.state

    def freeze_obs_normalization(self, frozen: bool = True) -> None:
        """Stops (or resumes) the running observation statistics, e.g. to evaluate;
        the env must normalize observations (``normalize_obs=True``)."""
        state = self.state
        if state.obs_norm is None:
            raise ValueError("this env does not normalize observations (normalize_obs=True)")
        self._door.state = state.replace(obs_norm=state.obs_norm.freeze(frozen))

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
          ``(obs (num_envs, obs_dim) float32, info {})``; for a task with
          observation terms, ``obs`` is a dict of ``(num_envs, *term)`` arrays.
        """
        if seed is not None:
            seed = checks.seed(seed)
        options = checks.options(options)
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
            if not self._door.ready:
                raise RuntimeError("reset() without a mask must come first")
        super().reset(seed=seed)
        if mask is None and self._next_env is not None:
            self._door.env, self._next_env = self._next_env, None

        if mask is None and (seed is not None or not self._door.ready):
            key = jax.random.key(self._seed if seed is None else seed)
            # Running observation statistics survive resets, as in Gymnasium's wrapper.
            norm = self._door.state.obs_norm if self._door.ready else None
            state = env_.jit_reset(self.env, key, norm)
        else:
            mask = np.ones((self.num_envs,), bool) if mask is None else mask
            state = self.state
            if seed is not None:
                state = env_.reseed(state, mask, jax.random.key(seed))
            state = env_.jit_reset_worlds(self.env, state, mask)
        self._door.state = state
        obs, done = jax.device_get((state.obs, state.done))
        self._done = np.asarray(done)
        self._episode_start[slice(None) if mask is None else mask] = time.perf_counter()
        if self.render_mode == "rgb_array_list":
            self._frames = [self.render_tiled()]
        return to_numpy(obs), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every world; autoresets as ``metadata["autoreset_mode"]`` says.

        Args:
          actions: ``(num_envs, nu)`` finite real numbers.

        Returns:
          ``(obs float32, rewards float64, terminated bool, truncated bool, infos)``,
          each with a leading ``num_envs`` axis. When episodes end, ``infos`` holds
          ``"episode": {"r", "l", "t"}`` (return, length and wall seconds of the
          episodes that ended, 0 elsewhere) and the mask ``"_episode"``, as
          Gymnasium's ``RecordEpisodeStatistics`` gives them. In ``SAME_STEP``, ``infos`` holds
          ``final_obs`` (an object array with each restarted world's terminal
          observation, None elsewhere), ``final_info`` and the masks
          ``_final_obs``/``_final_info``, as ``SyncVectorEnv`` gives them.

        Raises:
          RuntimeError: before the first :meth:`reset`, or in ``DISABLED`` mode when
            a world whose episode ended has not been reset.
          TypeError, ValueError: ``actions`` of the wrong type, shape or values.
        """
        if not self._door.ready:
            raise RuntimeError("call reset() before step()")
        actions = checks.finite_array(
            actions, "actions", (self.num_envs, self.env.action_size), np.float32
        )
        if self.autoreset_mode == AutoresetMode.DISABLED and self._done.any():
            raise RuntimeError(
                f"worlds {np.flatnonzero(self._done).tolist()} ended their episode; with "
                "autoreset_mode DISABLED reset them with reset(options={'reset_mask': ...}) "
                "before stepping"
            )
        packed = self._door.step(actions)  # "raise" guards keep the state of before the step
        out = self._outputs.split(*jax.device_get(packed))  # views of two host buffers
        obs, final_obs = out["obs"], out["final_obs"]
        if self._whole:
            obs, final_obs = obs["policy"], final_obs["policy"]
        terminated, truncated = out["terminated"], out["truncated"]
        self._done = done = terminated | truncated
        infos: dict[str, Any] = {}
        if self._episode_info and done.any():  # as RecordEpisodeStatistics gives them
            now = time.perf_counter()
            infos["episode"] = {
                "r": np.where(done, out["last_return"], 0.0),
                "l": np.where(done, out["last_length"], 0).astype(np.int64),
                "t": np.where(done, np.round(now - self._episode_start, 6), 0.0),
            }
            infos["_episode"] = done.copy()
            self._episode_start[done] = now
        if out["final_mask"].any():
            ended = out["final_mask"]
            final = np.full((self.num_envs,), None, dtype=object)
            final_obs = to_numpy(final_obs)
            for i in np.flatnonzero(ended):
                final[i] = world_of(final_obs, i)
            infos |= {
                "final_obs": final,
                "_final_obs": ended.copy(),
                "final_info": {},
                "_final_info": ended.copy(),
            }
        if self.render_mode == "rgb_array_list":
            self._frames.append(self.render_tiled())
        return (
            to_numpy(obs),
            np.asarray(out["reward"], np.float64),
            terminated,
            truncated,
            infos,
        )

    # --- rendering ---------------------------------------------------------------------

    def _world_renderer(self, mj_model: mujoco.MjModel | None = None) -> render.WorldRenderer:
        """The renderer of ``mj_model`` (default: the env's), one per scene."""
        m = self.env.host.mj_model if mj_model is None else mj_model
        for known, renderer in self._renderers:
            if known is m:
                return renderer
        self._renderers.append((m, render.WorldRenderer(m)))
        return self._renderers[-1][1]

    def _frame_drawer(self, width: int = 0) -> Callable[[int], np.ndarray]:
        """``draw(world)`` of the current state (kept by the closure), ``width``
        pixels wide (0: the render size's)."""
        env, state, (full, height) = self.env, self.state, self._render_size
        width = width or full

        def draw(world: int) -> np.ndarray:
            m, model, data, local = env_.world_scene(env, state, world)
            return self._world_renderer(m).frame(model, data, local, self._camera, width, height)

        return draw

    def render_tiled(self) -> np.ndarray:
        """The ``render_worlds`` of the current state side by side, ``(height, width,
        3)`` uint8 (any render mode). Worlds of one scene share a picture; over
        groups, each world is drawn with its own scene, and the frames are joined."""
        worlds, (width, height) = self._render_worlds, self._render_size
        if len(worlds) == 1:
            return self._frame_drawer()(worlds[0])
        scenes = [env_.world_scene(self.env, self.state, w) for w in worlds]
        if any(s[0] is not scenes[0][0] for s in scenes):
            draw = self._frame_drawer(max(1, width // len(worlds)))
            return np.concatenate([draw(w) for w in worlds], axis=1)
        m, model, data, _ = scenes[0]
        renderer = self._world_renderer(m)
        local = [s[3] for s in scenes]
        origins = render.spread(renderer, model, data, local)
        return renderer.tiled(model, data, local, origins, self._camera, width, height)

    def render(self) -> Sequence[np.ndarray] | list[np.ndarray] | None:
        """``"rgb_array"``: one ``(height, width, 3)`` uint8 frame per world of the
        current state, as a lazy sequence (:class:`WorldFrames`: a world is drawn,
        and copied from the device, only when its frame is read; the sequence keeps
        showing this state after later steps). ``"rgb_array_list"``: the pictures
        recorded since the last call (then cleared). None without a render mode."""
        if self.render_mode is None:
            return None
        if self.render_mode == "rgb_array":
            return WorldFrames(self._frame_drawer(), self.num_envs)
        frames, self._frames = self._frames, []
        return frames

    def close_extras(self, **kwargs: Any) -> None:
        for _, renderer in self._renderers:
            renderer.close()
        self._renderers = []

    def episode_statistics(self) -> dict[str, Any]:
        """NumPy view of the per-world episode statistics (see
        :func:`mjxrunner.env.episode_statistics`)."""
        return env_.episode_statistics(self.state)

    def __repr__(self) -> str:
        return (
            f"MjxVectorEnv({self.env.task.name!r}, num_envs={self.num_envs}, "
            f"autoreset_mode={self.autoreset_mode})"
        )
