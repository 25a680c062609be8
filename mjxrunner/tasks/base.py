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

Observations may be one array or a dict of named terms (``{"state": ..., "pixels":
...}``); ``obs_config`` (:class:`~mjxrunner.kit.observations.ObsConfig`) adds sensor noise
and a history per term, applied by the env in its compiled step.

Pixel observations: a task that sets ``pixels`` (a
:class:`~mjxrunner.kit.pixels.PixelSpec`: cameras, size, RGB / depth / segmentation,
cadence) is observed through camera frames too. Frames are rendered for all worlds
together, so they are not part of the single-world ``observation``: the env renders
them after the physics and adds them as terms ``"pixels"`` (uint8 RGB), ``"depth"``
and ``"segmentation"`` (:data:`mjxrunner.kit.pixels.TERMS`) to the task's own terms (an
array observation becomes the term ``"state"``; :func:`no_state` observes pixels
alone). Frame stacking is the history of the ``"pixels"`` term. Such a task needs
impl ``"warp"``.

Per-world task state (``info``): a task that needs memory across steps (a velocity
command, a target, a phase) sets ``initial_info(model, data, key) -> info``, a
pytree of one world's arrays drawn at every restart; the env keeps it per world
(``EnvState.info``, leading world axis) and, for such a task, calls
``observation(model, data, info)``, ``reward(model, data, action, next_data, info)``
and ``terminated(model, data, info)``. ``update_info(model, data, action,
next_data, info, key) -> info`` (optional) changes it after each step (e.g.
resampling a command at intervals); the reward and termination of a step see the
info the step was taken under, the next observation the updated one.

Per-world state across episodes (a curriculum): the info is drawn afresh at every
restart, so what must outlive an episode (a terrain level, a spawn point, a
difficulty) lives apart. A task sets ``initial_curriculum(model, key, world) ->
state``, one world's state drawn at :func:`~mjxrunner.env.reset` (``world``: its
index in the batch, so that worlds can be spread evenly, e.g. over terrain types),
and ``update_curriculum(model, data, info, state, key) -> state``, called for each
restarted world at its restart with the state its episode ended in (``data`` and
``info``; None for a task without info), before its fresh start is drawn. The env
keeps it per world (``EnvState.curriculum``) and passes it to ``initial_state(model,
data, key, state)``, which places the new episode (e.g. at the world's spawn
point). Its keys come from the world's own stream, so it reproduces like the rest.

A scene may be generated rather than shipped (a terrain, a procedural object): the
task's ``model`` is then a function that builds it (see :attr:`Task.model`).

Adding a task for a new scene: write a module in ``mjxrunner/tasks/`` that defines
``TASKS = (Task(...), ...)``; the registry finds it without further edits.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx

from mjxrunner.engine.models import action_bounds, load_any  # noqa: F401 - re-exported for tasks
from mjxrunner.kit.observations import ObsConfig
from mjxrunner.kit.pixels import PixelSpec
from mjxrunner.kit.symmetry import Mirror

ObservationFn = Callable[..., Any]
"""``observation(model, data[, info]) -> obs`` of one world: an ``(obs_dim,)`` float
array, or a dict of named terms (arrays of any shape and dtype)."""

RewardFn = Callable[..., jax.Array]
"""``reward(model, data, action, next_data[, info]) -> ()``: the reward of the
transition from ``data`` to ``next_data`` under ``action`` (``(nu,)``, already
clipped)."""

TerminatedFn = Callable[..., jax.Array]
"""``terminated(model, data[, info]) -> ()`` bool: ``data`` is a terminal state of
the MDP."""

InitialStateFn = Callable[..., mjx.Data]
"""``initial_state(model, data, key[, curriculum]) -> data``: randomizes one world's
start.

``data`` is the world's default start (the task's keyframe), ``key`` a typed PRNG
key drawn from that world's own stream; return ``data`` with new ``qpos``/``qvel``
(or anything else that belongs to the state). A task with a curriculum also gets
the world's curriculum state (e.g. to place the robot at its spawn point).
"""


InitialInfoFn = Callable[[mjx.Model, mjx.Data, jax.Array], Any]
"""``initial_info(model, data, key) -> info``: one world's task state at the start
of an episode (``data`` is the fresh start, ``key`` a typed key of its own)."""

UpdateInfoFn = Callable[[mjx.Model, mjx.Data, jax.Array, mjx.Data, Any, jax.Array], Any]
"""``update_info(model, data, action, next_data, info, key) -> info`` after a step."""

InitialCurriculumFn = Callable[[mjx.Model, jax.Array, jax.Array], Any]
"""``initial_curriculum(model, key, world) -> state``: one world's curriculum state
at a reset; ``world`` is its ``()`` int32 index in the batch (in its group, for a
heterogeneous env)."""

UpdateCurriculumFn = Callable[[mjx.Model, mjx.Data, Any, Any, jax.Array], Any]
"""``update_curriculum(model, data, info, state, key) -> state`` when a world's
episode ends: ``data`` and ``info`` as the episode ended."""

ModelSource = str | os.PathLike | mujoco.MjModel | mujoco.MjSpec | Callable[[], mujoco.MjModel]
"""A scene: a name in ``models/``, a path to an MJCF or MJB file, MJCF text, an
``MjModel`` or ``MjSpec`` (your own robot), or a function of no arguments that builds
one."""


def never_terminated(model: mjx.Model, data: mjx.Data, info: Any = None) -> jax.Array:
    """A ``terminated`` for tasks that only end by time limit."""
    del model, data, info
    return jnp.zeros((), bool)


def no_state(model: mjx.Model, data: mjx.Data, info: Any = None) -> dict:
    """An ``observation`` with no terms of its own: a pixel task that observes only
    its frames."""
    del model, data, info
    return {}


def deterministic_start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """An ``initial_state`` that keeps the default start: every episode begins alike."""
    del model, key
    return data


@dataclasses.dataclass(frozen=True)
class Task:
    """An RL task on one scene, as pure single-world functions.

    Attributes:
      name: registry name, e.g. ``"cartpole_balance"``.
      model: the scene: a name in ``models/`` (see :func:`mjxrunner.models.list`),
        a path to your robot's MJCF or MJB file, MJCF text, an ``MjModel`` or an
        ``MjSpec``; or a function of no arguments that builds the scene (an
        ``MjModel``) for one generated at run time, such as a terrain. Define a
        function once (tasks compare functions by identity) and let it return a
        fresh model on every call.
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
      obs_config: None, or the noise and history of the observation terms
        (:class:`~mjxrunner.kit.observations.ObsConfig`).
      initial_info: None, or the per-world task state drawn at each restart; then
        ``observation``, ``reward`` and ``terminated`` take it as last argument.
      update_info: None (the info stays as drawn), or how a step changes it.
      pixels: None, or the camera frames the env adds to the observation
        (:class:`~mjxrunner.kit.pixels.PixelSpec`; see the module docstring).
      initial_curriculum: None, or the per-world state that outlives episodes,
        drawn at a reset; then ``initial_state`` takes it as last argument.
      update_curriculum: None (the state stays as drawn), or how an ended episode
        changes it (called at the world's restart, before its new start).
      mirror: None, or the task's left-right mirror image of its observation terms
        and its action (:class:`~mjxrunner.kit.symmetry.Mirror`), for symmetric
        policies; the env's observation normalizer then keeps symmetric statistics.
    """

    name: str
    model: ModelSource
    observation: ObservationFn
    reward: RewardFn
    terminated: TerminatedFn = never_terminated
    initial_state: InitialStateFn = deterministic_start
    max_episode_steps: int = 1000
    keyframe: str | None = None
    substeps: int = 1
    forward_on_reset: bool = True
    obs_config: ObsConfig | None = None
    initial_info: InitialInfoFn | None = None
    update_info: UpdateInfoFn | None = None
    pixels: PixelSpec | None = None
    initial_curriculum: InitialCurriculumFn | None = None
    update_curriculum: UpdateCurriculumFn | None = None
    mirror: Mirror | None = None

    @property
    def has_info(self) -> bool:
        """The task keeps per-world state, passed to its functions."""
        return self.initial_info is not None

    @property
    def has_curriculum(self) -> bool:
        """The task keeps per-world state across episodes, passed to ``initial_state``."""
        return self.initial_curriculum is not None

    def load_model(self) -> mujoco.MjModel:
        """The task's scene as an ``MjModel`` (loaded by name, or built)."""
        if callable(self.model) and not isinstance(self.model, (mujoco.MjModel, mujoco.MjSpec)):
            built = self.model()
            if not isinstance(built, mujoco.MjModel):
                raise TypeError(
                    f"task {self.name!r}: its model builder returned {type(built).__name__}, "
                    "not a mujoco.MjModel"
                )
            return built
        return load_any(self.model)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError("Task.name must be a non-empty str")
        sources = (str, os.PathLike, mujoco.MjModel, mujoco.MjSpec)
        if not (callable(self.model) or (isinstance(self.model, sources) and self.model != "")):
            raise TypeError(
                "Task.model must be a scene: a name from models/, a path to an MJCF or MJB "
                "file, MJCF text, an MjModel, an MjSpec, or a function that builds the "
                f"scene; got {self.model!r}"
            )
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
        if self.obs_config is not None and not isinstance(self.obs_config, ObsConfig):
            raise TypeError(
                f"Task.obs_config must be an ObsConfig or None, got {self.obs_config!r}"
            )
        for field in ("initial_info", "update_info", "initial_curriculum", "update_curriculum"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(f"Task.{field} must be None or callable, got {value!r}")
        if self.pixels is not None and not isinstance(self.pixels, PixelSpec):
            raise TypeError(
                f"Task.pixels must be a mjxrunner.kit.pixels.PixelSpec or None, got {self.pixels!r}"
            )
        if self.mirror is not None and not isinstance(self.mirror, Mirror):
            raise TypeError(
                f"Task.mirror must be a mjxrunner.kit.symmetry.Mirror or None, got {self.mirror!r}"
            )
        if self.update_info is not None and self.initial_info is None:
            raise ValueError("Task.update_info needs Task.initial_info (the info it updates)")
        if self.update_curriculum is not None and self.initial_curriculum is None:
            raise ValueError(
                "Task.update_curriculum needs Task.initial_curriculum (the state it updates)"
            )

    def replace(self, **changes) -> Task:
        """A copy with some fields changed (e.g. a shorter ``max_episode_steps``)."""
        return dataclasses.replace(self, **changes)
