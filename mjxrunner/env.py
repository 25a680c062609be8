"""The functional RL env: ``reset(key) -> state``, ``step(state, action) -> state``.

An :class:`Env` binds a :class:`~mjxrunner.tasks.Task` to a device model and a
number of worlds. Its functions are pure and jit-able, so a whole training loop can
be one ``jit`` of ``lax.scan`` loops; the task's single-world functions are mapped
over the world axis by ``vmap``, and stepping, world selection and restoring reuse
:func:`mjxrunner.core.step`, :func:`mjxrunner.core.reset` and
:func:`mjxrunner.worlds.select_worlds`.

Autoreset modes, with Gymnasium's meaning:

* ``"next_step"``: a world whose step ended an episode (``terminated`` or
  ``truncated``) is restarted by the NEXT call to :func:`step`, which ignores its
  action and returns the reset observation, reward 0 and both flags False.
* ``"same_step"``: the world is restarted inside the step that ended the episode.
  ``obs`` is then the reset observation; the terminal observation is in
  ``final_obs`` and ``final_mask`` says which worlds restarted. The flags report
  the episode that just ended.
* ``"disabled"``: no restart; call :func:`reset_worlds` yourself. Stepping an ended
  world continues its physics, its flags stay those of its episode's end until it
  is restarted, and its episode is counted only once.

Fresh starts: each restart draws a new start for the world from the world's own PRNG
stream (``RunnerState.rng``): world ``i``'s stream begins at
``jax.random.split(key, num_envs)[i]`` for the ``key`` given to :func:`reset`, and
every restart splits it into ``(next key, draw key)`` and calls
``task.initial_state(model, start, draw_key)``, followed by ``mjx.forward`` unless
the task sets ``forward_on_reset=False``. Only restarted worlds advance their
stream, so a world's sequence of starts does not depend on the other worlds. The
restart is computed under a ``lax.cond`` and skipped when no world ends in a step.
Its cost follows the number of worlds that end: starts are drawn in passes of
``restart_slots`` worlds (default ``ceil(num_envs / 8)``), each gathering the next
ended worlds' keys and per-world parameters, calling ``initial_state`` (and
forward) for those only, and scattering the starts back; a step with more ended
worlds than slots makes more passes, so no world ever waits for its restart. A
world's start depends only on its key and its parameters, so the number of
slots changes the cost, not which worlds restart, their keys or the state the
task draws. One caveat: XLA vectorizes a forward pass over ``k`` worlds
differently than over ``num_envs``, so quantities the forward derives
(accelerations, constraint forces) may differ in the last bits between slot
counts (hopper: 2.4e-7 in ``qacc``; cartpole: bit-identical). ``reset`` draws
all worlds in one pass. A cached pool
(:meth:`Env.with_reset_pool`) replaces that by a gather of precomputed starts:
cheaper per step when the start needs a forward pass, but episodes then begin from
only ``pool_size`` distinct states, drawn once, with the model the pool was made
with.

Per-world state across episodes (a task's curriculum, ``EnvState.curriculum``):
:func:`reset` draws it; a restart first moves it for the restarted worlds by the
state their episodes ended in, then draws their starts with it (see
:mod:`mjxrunner.curriculum`). Such a task takes no reset pool.

Everything the runner can do, the env can do, with the same arguments: impl
"warp" with its capacities, ``devices=`` (every function runs under ``shard_map``
over the ``"worlds"`` axis, restarts included), per-world parameters
(:meth:`Env.with_param`) and randomization redrawn on every restart
(:meth:`Env.with_randomization`), guards (:mod:`mjxrunner.guards`) and checkpoints
(:func:`save`, :func:`load`). The engine (:mod:`mjxrunner.engine`) does the work.

Pixels: for a task with ``Task.pixels`` (a :class:`~mjxrunner.pixels.PixelSpec`,
impl "warp" only) the env owns a render context for its worlds (one per device when
sharded; several CPU devices are refused, as they share one Warp device) and renders
inside the compiled step, after the physics: bodies, cameras and lights are posed
for the new ``qpos`` (:meth:`PixelRenderer.pose`), the render token is carried in
the runner's data, and the frames join the observation as terms (``"pixels"``,
``"depth"``, ``"segmentation"``) before noise and history, so frame stacking is the
history of ``"pixels"``. ``PixelSpec.every = k`` renders every k-th step and shows
the last frames in between (``EnvState.last_frames``). MJX renders all worlds of a
context at once, so restarted worlds are rendered in a second context of
``restart_slots`` worlds, gathered a pass of slots at a time: a restart changes
only the restarted worlds' frames and costs about ``slots / num_envs`` of a full
render per pass; a step without restarts renders once (``lax.cond``).

Guards: a world that trips a guard with policy ``"truncate"`` (by default the
instability guard, the Warp overflow guard and the non-finite-action guard) is
``truncated`` in that step, so autoreset restarts it; ``nonfinite`` shows the
instability guard's flags. Policies ``"warn"`` and ``"raise"`` are applied by the
stateful front doors (:class:`~mjxrunner.gym.MjxVectorEnv`); inside your own
``jit`` they only flag and count (``state.runner.tripped``, ``state.runner.health``).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner import (
    backend,
    checks,
    core,
    engine,
    health,
    normalize,
    observations,
    params,
    pixels,
    sharding,
)
from mjxrunner import curriculum as curriculum_
from mjxrunner import guards as guards_
from mjxrunner import tasks as tasks_
from mjxrunner.models import HostModel, action_bounds, keyframe_id, load_any, start_data
from mjxrunner.sharding import on_worlds
from mjxrunner.state import RunnerState
from mjxrunner.tasks.base import Task
from mjxrunner.worlds import (
    BATCHED,
    FlatModel,
    put_worlds,
    pytree_dataclass,
    static_field,
    take_worlds,
    world_axes,
    world_field,
    world_mask,
)

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
        With an :class:`~mjxrunner.observations.ObsConfig`, noisy, and a term with a
        history is its history (see :mod:`mjxrunner.observations`).
      reward: ``(num_envs,)`` reward of the last step.
      final_obs: the observation at the end of the last step, before any restart,
        shaped like ``obs``. Equal to ``obs`` except where ``final_mask``.
      final_mask: ``(num_envs,)`` bool, worlds restarted in the same step
        (``"same_step"`` mode only); their terminal observation is ``final_obs``.
      stats: per-world :class:`EpisodeStats`.
      model: the current model when the env randomizes parameters (redrawn for
        each restarted world), else None (the env's own model).
      obs_norm: the running observation statistics when the env normalizes
        observations (:mod:`mjxrunner.normalize`), else None. ``obs`` and
        ``final_obs`` are then normalized.
      info: the task's per-world state (``Task.initial_info``), each leaf with a
        leading world axis; None for a task without one.
      history: ``{term: (num_envs, k, *term)}`` the last ``k`` noisy values of each
        term with a history (``""`` names an array observation), oldest first,
        before normalization; None without history.
      last_frames: a pixel env's last rendered frames when it renders every k-th
        step (:class:`LastFrames`), else None.
      curriculum: the task's per-world state across episodes
        (``Task.initial_curriculum``; see :mod:`mjxrunner.curriculum`), each leaf
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


@pytree_dataclass
class Env:
    """A task on ``num_envs`` worlds; build it with :func:`make`.

    A pytree: the arrays are children (so an ``Env`` can be a traced argument of
    ``jit``); the task, the engine's :class:`~mjxrunner.engine.Config` and the host
    model are static. The autoreset mode is an array, not a static setting: one
    compiled step serves all three modes, so switching modes (training with
    ``"same_step"``, evaluating with ``"disabled"``) never recompiles.

    Attributes:
      task: the :class:`Task` (static).
      config: backend, number of worlds, guards, randomization, mesh (static).
      host: the host model (static, compared by content).
      mode: ``()`` int32 code of the autoreset mode; read it as :attr:`autoreset`.
      model: the device model (:class:`~mjxrunner.worlds.FlatModel`); leaves shared
        or with a leading world axis. Restarts restore it, randomization draws
        around it.
      start: one world's default start (the task's keyframe, forwarded), unbatched.
      low: ``(nu,)`` lower action bounds (``-inf`` where unlimited).
      high: ``(nu,)`` upper action bounds.
      pool: None, or cached starts with a leading ``(pool_size,)`` axis.
      ref: what rebuilding mass-derived constants needs (None unless masses change).
      restart_slots: worlds drawn together in one pass of a restart (static).
      normalize: None, or how observations are normalized (static; see
        :meth:`with_obs_normalization`).
      pipeline: the task's observation noise and history, checked against its
        observation (static; :mod:`mjxrunner.observations`).
      renderer: for a task with pixels (``Task.pixels``), the
        :class:`~mjxrunner.pixels.PixelRenderer` made for this env's worlds and
        devices (static, compared by identity: copies of the env share it and their
        compiled functions); else None.
      restart_renderer: a second one for ``restart_slots`` worlds (per device),
        which renders restarted worlds only, a pass of slots at a time; None when a
        pass holds every world or the task has no pixels (static).
    """

    task: Task = static_field()
    config: engine.Config = static_field()
    host: HostModel = static_field()
    mode: jax.Array
    model: FlatModel
    start: mjx.Data
    low: jax.Array
    high: jax.Array
    pool: mjx.Data | None = None
    ref: params.Reference | None = None
    restart_slots: int = static_field(default=1)
    normalize: normalize.Spec | None = static_field(default=None)
    pipeline: observations.Pipeline = static_field(default=observations.NONE)
    renderer: pixels.PixelRenderer | None = static_field(default=None)
    restart_renderer: pixels.PixelRenderer | None = static_field(default=None)

    @property
    def num_envs(self) -> int:
        return self.config.num_envs

    @property
    def impl(self) -> str:
        return self.config.backend.impl

    @property
    def autoreset(self) -> str:
        """``"next_step"``, ``"same_step"`` or ``"disabled"`` (outside ``jit`` only)."""
        return AUTORESET_MODES[int(self.mode)]

    def with_autoreset(self, autoreset: str) -> Env:
        """A copy in another autoreset mode (same compiled functions)."""
        # Placed like the current mode: a differently placed scalar would recompile.
        return self.replace(
            mode=jax.device_put(np.int32(_mode_code(autoreset)), self.mode.sharding)
        )

    @property
    def action_size(self) -> int:
        return self.low.shape[0]

    @property
    def observation_spec(self) -> Any:
        """One world's observation as the policy receives it: a
        ``jax.ShapeDtypeStruct``, or a dict of them for a task with observation terms
        (histories included)."""
        return observations.view_spec(self.pipeline, _raw_spec(self.task, self.model, self.start))

    @property
    def observation_size(self) -> int:
        """The length of a vector observation (see :attr:`observation_spec` for one
        made of terms)."""
        spec = self.observation_spec
        if not hasattr(spec, "shape") or len(spec.shape) != 1:
            raise TypeError(
                f"task {self.task.name!r} observes {spec}, not one vector: read "
                "observation_spec for its terms"
            )
        return spec.shape[0]

    @property
    def pool_size(self) -> int:
        """Number of cached starts (0: every restart draws a fresh one)."""
        return 0 if self.pool is None else self.pool.qpos.shape[0]

    @property
    def mesh(self) -> Any:
        """The ``"worlds"`` mesh the env is split over (None: one device)."""
        return self.config.mesh

    def reset(self, key: jax.Array) -> EnvState:
        """See :func:`reset`."""
        return reset(self, key)

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        """See :func:`step`."""
        return step(self, state, action)

    def reset_worlds(self, state: EnvState, mask: jax.Array) -> EnvState:
        """See :func:`reset_worlds`."""
        return reset_worlds(self, state, mask)

    def with_reset_pool(self, size: int, key: jax.Array) -> Env:
        """A copy whose restarts gather from ``size`` starts drawn now from ``key``.

        Trade-off: a restart costs a gather instead of ``initial_state`` plus
        ``mjx.forward`` for every world, but episodes begin from only ``size``
        distinct states (fixed until the next call), computed with the current
        model, which must have no per-world leaves. ``size=0`` turns the pool off.
        """
        size = checks.count(size, "size", minimum=0)
        if size == 0:
            return self.replace(pool=None)
        if self.task.has_curriculum:
            raise ValueError(
                f"task {self.task.name!r} places its starts by its curriculum: a reset pool "
                "of fixed starts cannot follow it"
            )
        if any(jax.tree.leaves(world_mask(self.model))):
            raise ValueError("a reset pool needs a model without per-world parameters")
        keys = core.init_keys(key, size)
        pool = jax.jit(_draw_starts, static_argnums=3)(self.model, self.start, keys, self.task)
        return self.replace(pool=engine.put(pool, self.config.replace(mesh=None)))

    def with_param(self, path: str, values: Any, env_ids: Any = None) -> Env:
        """A copy with model field ``path`` set for all worlds or per world.

        The same arguments and rules as :meth:`MultiEnvRunner.set_param`; restarts
        keep the new values (they are the env's model). Changing values never
        recompiles; promoting or demoting a field compiles once.
        """
        new = params.new_values(self.model.tree, path, values, env_ids, self.num_envs)
        return self.with_values({path: new})

    def with_values(self, updates: dict[str, np.ndarray]) -> Env:
        """A copy with validated values written (``params.new_values`` output)."""
        model, ref = engine.write_params(
            self.config, self.model, self.ref, self.host.mj_model, updates
        )
        return self.replace(model=model, ref=ref)

    def with_randomization(
        self, terms: Any, *, on_reset: bool = True, every_n_steps: int = 0
    ) -> Env:
        """A copy that redraws parameters (``mjxrunner.params.Term``) around its model.

        Args:
          terms: a sequence of ``Term``; empty turns randomization off.
          on_reset: redraw a world's parameters on every reset and restart.
          every_n_steps: if > 0, also redraw every that many steps of an episode.

        States then carry their current model (``EnvState.model``); draws start from
        the env's model, so values never drift. Compiles the step once.
        """
        rand = params.check_randomization(self.model.tree, terms, on_reset, every_n_steps)
        paths = {t.path for t in rand.terms} if rand else set()
        ref = engine.with_ref(self.config, self.ref, self.host.mj_model, paths)
        return self.replace(config=self.config.replace(randomization=rand), ref=ref)

    def with_obs_normalization(
        self, enabled: bool = True, *, clip: float | None = None, eps: float = 1e-8
    ) -> Env:
        """A copy that normalizes observations by running statistics on device.

        States of the copy carry the statistics (``EnvState.obs_norm``): every step
        updates them from the observations it returns, one sample per world, and
        ``obs``/``final_obs`` come back as ``(obs - mean) / sqrt(var + eps)``,
        clipped to ``[-clip, clip]`` if ``clip`` is set. :func:`reset` starts them
        afresh unless given ``obs_norm=``; ``state.obs_norm.freeze()`` stops them
        for evaluation. Changes the state's structure: compiles the step once.
        """
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        if enabled:
            normalize.init(self.observation_spec, backend.float_dtype())  # something to scale
        return self.replace(normalize=normalize.Spec.of(clip, eps) if enabled else None)

    def shard(self, devices: Any) -> Env:
        """A copy split over ``devices`` (see :meth:`MultiEnvRunner.shard`); states
        from :func:`reset` of the copy are split too."""
        mesh = None if devices is None else sharding.make_mesh(devices)
        if mesh is not None:
            sharding.check_divisible(self.num_envs, mesh)
        config = self.config.replace(mesh=mesh)
        renderers = _renderers(self.task, self.host.mj_model, config, self.restart_slots)
        placed = {
            f: engine.put(getattr(self, f), config)
            for f in ("mode", "model", "start", "low", "high")
        }
        return self.replace(config=config, **renderers, **placed)


def _mode_code(autoreset: Any) -> int:
    if not isinstance(autoreset, str):
        raise TypeError(f"autoreset must be a str, got {type(autoreset).__name__}")
    if autoreset not in AUTORESET_MODES:
        raise ValueError(f"autoreset must be one of {AUTORESET_MODES}, got {autoreset!r}")
    return AUTORESET_MODES.index(autoreset)


def make(
    task: Task | str,
    num_envs: int,
    *,
    autoreset: str = "next_step",
    impl: str = "jax",
    device: Any = None,
    model: mujoco.MjModel | str | os.PathLike | None = None,
    reset_pool: int = 0,
    pool_seed: int = 0,
    restart_slots: int | None = None,
    normalize_obs: bool = False,
    obs_clip: float | None = None,
    graph_mode: str | None = None,
    naconmax: int | None = None,
    njmax: int | None = None,
    naccdmax: int | None = None,
    nvmax: int | None = None,
    overflow_policy: str = "truncate",
    instability_policy: str = "truncate",
    max_qvel: float = health.MAX_QVEL,
    guards: Any = (),
    devices: Any = None,
    groups: Any = None,
    latency: Any = None,
    pushes: Any = None,
    collision_enabled: bool = True,
) -> Env:
    """Builds an :class:`Env`: loads the scene, puts it on device, forwards the start.

    Args:
      task: a :class:`Task` or a registered task name (``mjxrunner.tasks.list()``).
      num_envs: number of worlds, ``>= 1``.
      autoreset: ``"next_step"``, ``"same_step"`` or ``"disabled"``.
      impl: MJX implementation, ``"jax"`` or ``"warp"``.
      device: None (JAX's default), a ``jax.Device`` or a platform name.
      model: the scene to use instead of ``task.model`` (an ``MjModel``, a name, a
        path or MJCF text), e.g. an edited copy with the same joints.
      reset_pool: if > 0, restarts draw from this many cached starts
        (see :meth:`Env.with_reset_pool`).
      pool_seed: seed of the cached starts.
      restart_slots: worlds whose fresh starts are drawn together in one pass of a
        restart (on each device when sharded); a step with more restarts makes
        more passes. None: ``ceil(num_envs / 8)``; ``num_envs``: every restart
        draws for the whole batch (the cost no longer follows the number of
        restarts). See the module docstring.
      normalize_obs: normalize observations by running statistics on device
        (see :meth:`Env.with_obs_normalization`).
      obs_clip: with ``normalize_obs``, None or the bound of normalized values.
      graph_mode, naconmax, njmax, naccdmax, nvmax: Warp options, as for
        :class:`~mjxrunner.MultiEnvRunner`.
      overflow_policy, instability_policy, max_qvel, guards: the guards, as for the
        runner; the env's policies default to ``"truncate"`` (autoreset restarts).
      devices: None, or devices to split the worlds over (see :meth:`Env.shard`).
      groups: None, or worlds of several scenes: a sequence of ``(model, n)`` or
        ``(model, n, options)`` whose sizes sum to ``num_envs``; returns a
        :class:`~mjxrunner.group_env.GroupEnv`, which every function here takes
        (see :mod:`mjxrunner.group_env`). The other arguments apply to every group.
      latency, pushes, collision_enabled: action latency, random pushes and
        contacts, as for the runner (see :func:`mjxrunner.engine.configure`).

    Raises:
      TypeError, ValueError: an argument of the wrong kind or out of range.
    """
    if groups is not None:
        options = {k: v for k, v in locals().items() if k not in ("task", "num_envs", "groups")}
        from mjxrunner import group_env

        if options.pop("model") is not None:
            raise ValueError("with groups=, give each group its model: [(model, n), ...]")
        genv = group_env.make_groups(task, groups, **options)
        if genv.num_envs != checks.count(num_envs, "num_envs"):
            raise ValueError(f"the groups hold {genv.num_envs} worlds, but num_envs is {num_envs}")
        return genv
    if isinstance(task, str):
        task = tasks_.get(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be a mjxrunner.tasks.Task or a name, got {type(task)}")
    num_envs = checks.count(num_envs, "num_envs")
    mode = _mode_code(autoreset)
    backend.check_impl(impl)
    reset_pool = checks.count(reset_pool, "reset_pool", minimum=0)
    pool_seed = checks.count(pool_seed, "pool_seed", minimum=0)
    if restart_slots is None:
        restart_slots = -(-num_envs // 8)
    restart_slots = checks.count(restart_slots, "restart_slots")
    if task.pixels is not None and backend.check_impl(impl) != "warp":
        raise ValueError(
            f"task {task.name!r} observes pixels, which MJX renders only with MuJoCo "
            f"Warp (mjx.render has no impl {impl!r}): make the env with impl='warp'"
        )
    m = task.load_model() if model is None else load_any(model)
    if m.nu == 0:
        raise ValueError(f"task {task.name!r}: the model has no actuators to act with")
    if task.pixels is not None:
        try:
            pixels.camera_ids(m, task.pixels)
        except ValueError as e:
            raise ValueError(f"task {task.name!r}: {e}") from None
    if task.keyframe is not None:
        try:
            keyframe_id(m, task.keyframe)
        except ValueError:
            names = [m.key(k).name for k in range(m.nkey)]
            raise ValueError(
                f"task {task.name!r}: no keyframe {task.keyframe!r}; has {names}"
            ) from None
    config = engine.configure(
        m,
        num_envs,
        impl=impl,
        device=device,
        graph_mode=graph_mode,
        naconmax=naconmax,
        njmax=njmax,
        naccdmax=naccdmax,
        nvmax=nvmax,
        overflow_policy=overflow_policy,
        instability_policy=instability_policy,
        max_qvel=max_qvel,
        guards=guards,
        latency=latency,
        pushes=pushes,
        collision_enabled=collision_enabled,
    )
    b = config.backend
    low, high = action_bounds(m)
    dtype = backend.float_dtype()
    put = lambda x: jax.device_put(x, b.device)  # noqa: E731
    device_model = FlatModel.of(b.put_model(m))
    start = b.put_data(m, start_data(m, task.keyframe))
    pipeline = observations.check(
        task.obs_config, _raw_spec(task, device_model, start), f"task {task.name!r}"
    )
    env = Env(
        task=task,
        config=config,
        host=HostModel.of(m),
        mode=put(np.int32(mode)),
        model=device_model,
        start=start,
        low=put(low.astype(dtype)),
        high=put(high.astype(dtype)),
        restart_slots=restart_slots,
        pipeline=pipeline,
    )
    if normalize_obs or obs_clip is not None:
        env = env.with_obs_normalization(normalize_obs, clip=obs_clip)
    if reset_pool:
        env = env.with_reset_pool(reset_pool, jax.random.key(pool_seed))
    if devices is not None:
        return env.shard(devices)  # makes the renderers for the devices
    return env.replace(**_renderers(task, m, config, restart_slots))


def _renderers(
    task: Task, m: mujoco.MjModel, config: engine.Config, slots: int
) -> dict[str, pixels.PixelRenderer | None]:
    """A pixel task's render contexts (``renderer``, ``restart_renderer``): on the
    env's device, or one per device of its mesh; a ValueError naming the task where
    they cannot be made. Both None for a task without pixels."""
    if task.pixels is None:
        return {"renderer": None, "restart_renderer": None}
    where = config.backend.device if config.mesh is None else config.mesh
    devices = 1 if config.mesh is None else config.mesh.devices.size
    make = lambda n: pixels.PixelRenderer(  # noqa: E731
        m, n, task.pixels, impl=config.backend.impl, devices=where
    )
    try:
        renderer = make(config.num_envs)
        small = slots < renderer.worlds_per_device
        return {"renderer": renderer, "restart_renderer": make(slots * devices) if small else None}
    except ValueError as e:
        raise ValueError(f"task {task.name!r}: {e}") from None


# --- restarting worlds -------------------------------------------------------------


def _start_one(
    model: mjx.Model, start: mjx.Data, raw_key: jax.Array, task: Task, curriculum: Any = None
) -> mjx.Data:
    """One world's fresh start: the task's randomization (placed by the world's
    curriculum state, if the task keeps one), then (if the task asks for it) a
    forward pass so that derived quantities match the new state."""
    extra = (curriculum,) if task.has_curriculum else ()
    data = task.initial_state(model, start, jax.random.wrap_key_data(raw_key), *extra)
    return mjx.forward(model, data) if task.forward_on_reset else data


def _draw_starts(
    model: Any, start: mjx.Data, raw_keys: jax.Array, task: Task, curriculum: Any = None
) -> mjx.Data:
    """Fresh starts for a batch of raw keys ``(n, 2)`` (and curriculum states, each
    leaf ``(n, ...)``); model leaves shared or per world."""
    model = FlatModel.of(model).tree
    return jax.vmap(_start_one, in_axes=(world_axes(model), None, 0, None, 0))(
        model, start, raw_keys, task, curriculum
    )


def _pick(mask: jax.Array, a: Any, b: Any) -> Any:
    """``a`` for the worlds in ``mask``, ``b`` elsewhere (pytrees whose every leaf has
    a leading world axis); a scalar choice per world."""
    return jax.tree.map(jax.vmap(jnp.where, in_axes=(0, 0, 0)), _per_leaf(mask, a), a, b)


def _per_leaf(mask: jax.Array, tree: Any) -> Any:
    return jax.tree.map(lambda _: mask, tree)


def _with_info(task: Task, info: Any) -> tuple:
    """The extra argument of a task function: its info, if the task keeps one."""
    return (info,) if task.has_info else ()


def _observe(env: Env, model: FlatModel, data: mjx.Data, info: Any = None) -> Any:
    """The task's observation of every world (raw: before noise and history)."""
    model = model.tree
    extra = _with_info(env.task, info)
    axes = (world_axes(model), 0, *(0 for _ in extra))
    return jax.vmap(env.task.observation, in_axes=axes)(model, data, *extra)


def _one_world_observation(task: Task, model: mjx.Model, start: mjx.Data) -> Any:
    if task.has_info:
        info = task.initial_info(model, start, jax.random.key(0))
        return task.observation(model, start, info)
    return task.observation(model, start)


def _raw_spec(task: Task, model: FlatModel, start: mjx.Data) -> Any:
    """One world's raw observation as ``ShapeDtypeStruct`` (s), pixel terms included."""
    spec = jax.eval_shape(lambda m, d: _one_world_observation(task, m, d), model.tree, start)
    if task.pixels is None:
        return spec
    return pixels.merge_spec(spec, task.pixels, f"task {task.name!r}")


def _derived_keys(keys: jax.Array, stream: int) -> jax.Array:
    """Raw keys ``(n, 2)`` of sub-stream ``stream`` of each world's raw key."""
    fold = lambda k: jax.random.key_data(  # noqa: E731
        jax.random.fold_in(jax.random.wrap_key_data(k), stream)
    )
    return jax.vmap(fold)(keys)


# Sub-streams of a world's draw key (a restart's or a step's), by use.
_INFO_STREAM, _NOISE_STREAM, _CURRICULUM_STREAM = 1, 2, 3


def _typed_keys(keys: jax.Array, stream: int) -> jax.Array:
    """Typed keys ``(n,)`` of sub-stream ``stream`` of each world's raw key."""
    return jax.vmap(jax.random.wrap_key_data)(_derived_keys(keys, stream))


@pytree_dataclass
class _Seen:
    """What the env keeps of observing worlds (each leaf with a world axis).

    Attributes:
      info: the task's per-world state (None without one).
      history: the terms' histories (None without history).
      obs: what the policy receives, before normalization.
      frames: the raw frames kept between renders (``LastFrames.frames``), or None.
      curriculum: the task's state across episodes (None without one).
    """

    info: Any = world_field(BATCHED)
    history: Any = world_field(BATCHED)
    obs: Any = world_field(BATCHED)
    frames: Any = world_field(BATCHED, default=None)
    curriculum: Any = world_field(BATCHED, default=None)


def _keeps_frames(env: Env) -> bool:
    """Whether states keep the last frames (a pixel env rendering every k-th step)."""
    return env.renderer is not None and env.task.pixels.every > 1


def _first_seen(
    env: Env,
    model: FlatModel,
    data: mjx.Data,
    draw: jax.Array,
    mask: jax.Array | None = None,
    slots: int = 0,
) -> tuple[mjx.Data, _Seen]:
    """Info, history and observation of fresh starts, from their restart's raw draw
    keys ``(n, 2)``: the info and the noise draw from sub-streams of them. Only the
    worlds in ``mask`` (None: all) are used by the caller: a pixel env renders those
    (see :func:`_restart_frames`) and returns ``data`` with the render's token."""
    info = None
    if env.task.has_info:
        tree = model.tree
        keys = _typed_keys(draw, _INFO_STREAM)
        info = jax.vmap(env.task.initial_info, in_axes=(world_axes(tree), 0, 0))(tree, data, keys)
    obs = _observe(env, model, data, info)
    frames = None
    if env.renderer is not None:
        data, frames = _restart_frames(env, model, data, mask, slots)
        obs = pixels.merge(obs, frames)
    obs = observations.noisy(env.pipeline, obs, _derived_keys(draw, _NOISE_STREAM))
    history = observations.start_history(env.pipeline, obs)
    view = observations.view(env.pipeline, history, obs)
    return data, _Seen(info, history, view, frames if _keeps_frames(env) else None)


def _restart_frames(
    env: Env, model: FlatModel, data: mjx.Data, mask: jax.Array | None, slots: int
) -> tuple[mjx.Data, dict[str, jax.Array]]:
    """Frames of the worlds in ``mask`` (others' are zeros), with ``data`` carrying
    the render token. MJX renders every world of a context at once, so restarted
    worlds are gathered ``slots`` at a time into the restart renderer's context
    (a pass per ``slots`` restarts, each costing ``slots / num_envs`` of a full
    render); without one (or with ``mask`` None) every world is rendered."""
    small = env.restart_renderer
    if mask is None or small is None or small.worlds_per_device != slots:
        return env.renderer.observe(model.tree, data)
    n, tree = mask.shape[0], model.tree
    frames = {k: jnp.zeros(s.shape, s.dtype) for k, s in env.renderer.frame_shapes(n).items()}

    def one_pass(carry):
        token, frames, todo = carry
        (index,) = jnp.nonzero(todo, size=slots, fill_value=n)  # n: past the end
        some = take_worlds(data, index)
        some = pixels.with_render_token(some, token[jnp.minimum(index, n - 1)])
        some, new = small.observe(take_worlds(tree, index), some)
        token = token.at[index].set(pixels.render_token(some), mode="drop")
        frames = {k: v.at[index].set(new[k], mode="drop") for k, v in frames.items()}
        return token, frames, todo.at[index].set(False, mode="drop")

    start = (pixels.render_token(data), frames, mask)
    token, frames, _ = jax.lax.while_loop(lambda c: jnp.any(c[2]), one_pass, start)
    return pixels.with_render_token(data, token), frames


def _step_frames(
    env: Env, model: FlatModel, data: mjx.Data, last: LastFrames | None
) -> tuple[mjx.Data, dict[str, jax.Array], LastFrames | None]:
    """A step's frames of the state in ``data``: rendered, or every k-th step only
    (``last`` kept) with the last frames shown in between (``lax.cond``: a step
    that does not render costs no render). Returns ``(data with the render token,
    frames, last)``."""
    observe = env.renderer.observe
    if last is None:
        data, frames = observe(model.tree, data)
        return data, frames, None
    due = last.age + 1 >= env.task.pixels.every

    def fresh(data):
        data, frames = observe(model.tree, data)
        return pixels.render_token(data), frames

    def again(data):
        return pixels.render_token(data), last.frames

    token, frames = jax.lax.cond(due, fresh, again, data)
    age = jnp.where(due, jnp.zeros_like(last.age), last.age + 1)
    return pixels.with_render_token(data, token), frames, LastFrames(frames, age)


def _draws_every_step(env: Env) -> bool:
    """Whether a step draws (noise, info updates): then every world's stream splits."""
    return env.pipeline.random or env.task.update_info is not None


def _draw_masked(
    env: Env,
    model: FlatModel,
    draw: jax.Array,
    mask: jax.Array,
    current: mjx.Data,
    slots: int,
    curriculum: Any = None,
) -> mjx.Data:
    """``current`` with fresh starts for the worlds in ``mask``, ``slots`` at a time.

    Each pass gathers the next ``slots`` masked worlds (their keys and per-world
    parameters), draws their starts and scatters them back, so the cost follows the
    number of restarts, not the batch. With ``slots >= num_envs`` every world is
    drawn in one ``vmap`` (the cheaper choice when all restart). A world's start
    depends on its own key and parameters only (up to the rounding of a forward
    compiled for another batch size: see the module docstring)."""
    n = mask.shape[0]
    if slots >= n:
        return _draw_starts(model, env.start, draw, env.task, curriculum)
    tree = model.tree

    def one_pass(carry):
        data, todo = carry
        (index,) = jnp.nonzero(todo, size=slots, fill_value=n)  # n: past the end
        fresh = _draw_starts(
            take_worlds(tree, index),
            env.start,
            draw[jnp.minimum(index, n - 1)],
            env.task,
            curriculum_.take(curriculum, index),
        )
        return put_worlds(data, index, fresh), todo.at[index].set(False, mode="drop")

    data, _ = jax.lax.while_loop(lambda c: jnp.any(c[1]), one_pass, (current, mask))
    return data


def _fresh(
    env: Env,
    pool: Any,
    model: FlatModel,
    draw: jax.Array,
    mask: jax.Array,
    current: mjx.Data,
    slots: int,
    curriculum: Any = None,
) -> RunnerState:
    """Fresh starts from raw draw keys for the worlds in ``mask`` (others keep
    ``current``), as a cleared ``RunnerState``."""
    n = draw.shape[0]
    if pool is None:
        data = _draw_masked(env, model, draw, mask, current, slots, curriculum)
    else:
        size = pool.qpos.shape[0]
        index = jax.vmap(lambda k: jax.random.randint(jax.random.wrap_key_data(k), (), 0, size))(
            draw
        )
        data = jax.tree.map(lambda leaf: leaf[index], pool)
    # core.init knows every field a fresh world has (counters, flags, ...): take its
    # cleared values and put the new data in.
    cleared = core.init(env.start, n, jax.random.key(0), env.action_size, env.config.guards)
    cleared = engine.attach_events(env.config, cleared)  # queues, timers: drawn by the reset
    return cleared.replace(data=data)


def _restart(
    env: Env,
    pool: Any,
    model: FlatModel,
    runner: RunnerState,
    seen: _Seen,
    mask: jax.Array,
    slots: int | None = None,
    ended: Any = None,
) -> tuple[FlatModel, RunnerState, _Seen]:
    """Restarts the worlds in ``mask`` through the engine's reset: the curriculum
    moved by the ended episodes (``ended() -> (data, info)`` as they ended; None at
    a reset), parameters back from the env's model (and redrawn if randomized),
    fresh data, cleared counters, advanced keys, then a fresh info, history and
    observation. Skipped (``lax.cond``) when ``mask`` selects no world. Starts are
    drawn ``slots`` worlds at a time (None: the env's ``restart_slots``)."""
    slots = env.restart_slots if slots is None else slots

    def restart(model, runner, seen):
        rng, draw = core.split_streams(runner.rng)
        runner = runner.replace(rng=_pick(mask, rng, runner.rng))  # restarted ones advance
        curriculum = seen.curriculum
        if ended is not None and env.task.update_curriculum is not None:  # not at a reset
            data, info = ended()
            keys = _typed_keys(draw, _CURRICULUM_STREAM)
            moved = curriculum_.updated(env.task, model, curriculum, data, info, keys)
            curriculum = _pick(mask, moved, curriculum)

        def source(m, s):  # drawn with the restored (and redrawn) parameters
            return _fresh(env, pool, m, draw, mask, s.data, slots, curriculum)

        model, runner = engine.reset_local(
            env.config, model, env.model, env.ref, runner, source, mask, jnp.asarray(False)
        )
        data, first = _first_seen(env, model, runner.data, draw, mask, slots)
        seen = _pick(mask, first, seen.replace(curriculum=None))
        return model, runner.replace(data=data), seen.replace(curriculum=curriculum)

    # Both branches must return the same shapes: give the redrawn fields their world
    # axis first (a no-op once they have it).
    model = FlatModel.of(params.promote(model.tree, env.config.randomization, mask.shape[0]))
    keep = lambda m, r, s: (m, r, s)  # noqa: E731
    return jax.lax.cond(jnp.any(mask), restart, keep, model, runner, seen)


# --- the functional API --------------------------------------------------------------


def _zeros_stats(n: int, dtype: Any) -> EpisodeStats:
    zf, zi = jnp.zeros((n,), dtype), jnp.zeros((n,), jnp.int32)
    return EpisodeStats(
        episode_return=zf,
        last_return=zf,
        last_length=zi,
        completed=zi,
        return_sum=zf,
        length_sum=zi,
    )


def _carried(env: Env, model: FlatModel) -> FlatModel | None:
    """What a state carries of the model: its own only when parameters are redrawn."""
    return None if env.config.randomization is None else model


def _sharded(fn, env: Env, *args: Any, per_world: tuple[int, ...] = ()) -> Any:
    """``fn(env, pool, *args)`` on each device's worlds (see ``sharding.on_worlds``).

    The env's arrays are shared, but for a per-world model; the reset pool's leading
    axis counts starts, not worlds, so it is replicated whole.
    """
    if env.mesh is None:
        return fn(env, env.pool, *args)
    if env.pool is None:
        body = lambda e, *a: fn(e, None, *a)  # noqa: E731
        return on_worlds(body, env.mesh, env, *args, per_world=tuple(i + 1 for i in per_world))
    return on_worlds(
        fn,
        env.mesh,
        env.replace(pool=None),
        env.pool,
        *args,
        per_world=tuple(i + 2 for i in per_world),
        replicated=(1,),
    )


def reset(env: Env, key: jax.Array, obs_norm: normalize.ObsNorm | None = None) -> EnvState:
    """Starts every world afresh; statistics cleared.

    Args:
      env: the env.
      key: a PRNG key (typed or raw); world ``i``'s stream begins at
        ``jax.random.split(key, num_envs)[i]``.
      obs_norm: with observation normalization, statistics to continue from
        (e.g. the last state's ``obs_norm``); None starts them afresh. They are
        updated with the first observations unless frozen.

    Returns:
      The first state: ``obs`` of the fresh starts, reward 0, flags False.
    """
    keys = core.init_keys(key, env.num_envs)  # split here, whole: not per device
    return reset_from_keys(env, keys, obs_norm)


def _groups(env: Any) -> Any:
    """:mod:`mjxrunner.group_env` if ``env`` is a ``GroupEnv`` (or its state), else
    None: every function here takes one as it takes an ``Env``."""
    from mjxrunner import group_env

    kinds = (group_env.GroupEnv, group_env.GroupState)
    return group_env if isinstance(env, kinds) else None


def reset_from_keys(
    env: Env, keys: jax.Array, obs_norm: normalize.ObsNorm | None = None
) -> EnvState:
    """:func:`reset` with each world's PRNG stream given: world ``i``'s stream begins
    at ``keys[i]``, ``(num_envs, 2)`` raw ``uint32`` keys or ``(num_envs,)`` typed
    keys (e.g. a trainer's own per-world keys)."""
    if groups := _groups(env):
        return groups.reset_from_keys(env, keys, obs_norm)
    keys = core.raw_keys(keys)
    if keys.shape != (env.num_envs, 2) or keys.dtype != jnp.uint32:
        raise ValueError(
            f"keys must be ({env.num_envs}, 2) uint32 raw keys or ({env.num_envs},) typed "
            f"keys, got {keys.dtype} {keys.shape}"
        )
    if env.normalize is None:
        obs_norm = None
    elif obs_norm is None:
        obs_norm = normalize.init(env.observation_spec, backend.float_dtype())
    elif not isinstance(obs_norm, normalize.ObsNorm):
        raise TypeError(f"obs_norm must be a normalize.ObsNorm or None, got {type(obs_norm)}")
    # Each world's index in the whole batch (a curriculum may spread worlds by it).
    world = jnp.arange(env.num_envs, dtype=jnp.int32)
    return _sharded(_reset_local, env, keys, world, obs_norm, per_world=(0, 1))


def _normalized(
    env: Env, norm: normalize.ObsNorm | None, returned: jax.Array, *also: jax.Array
) -> tuple:
    """``(norm, returned, *also)``, with ``norm`` updated by the ``returned`` batch and
    every observation array scaled by it; as given without normalization."""
    if env.normalize is None:
        return (norm, returned, *also)
    axis = None if env.mesh is None else sharding.AXIS
    norm = normalize.update(norm, returned, axis)
    scale = lambda o: normalize.apply(env.normalize, norm, o)  # noqa: E731
    return (norm, scale(returned), *map(scale, also))


def _reset_local(
    env: Env, pool: Any, keys: jax.Array, world: jax.Array, obs_norm: normalize.ObsNorm | None
) -> EnvState:
    n = keys.shape[0]
    runner = core.init(env.start, n, jax.random.key(0), env.action_size, env.config.guards)
    runner = engine.attach_events(env.config, runner).replace(rng=keys)
    _, shapes = jax.eval_shape(_first_seen, env, env.model, runner.data, keys)
    # A placeholder: every world restarts.
    seen = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    seen = seen.replace(
        curriculum=curriculum_.initial(
            env.task, env.model, _typed_keys(keys, _CURRICULUM_STREAM), world
        )
    )
    everyone = jnp.ones((n,), bool)
    model, runner, seen = _restart(env, pool, env.model, runner, seen, everyone, slots=n)
    obs_norm, obs = _normalized(env, obs_norm, seen.obs)
    dtype = runner.data.qpos.dtype
    return EnvState(
        runner=runner,
        obs=obs,
        reward=jnp.zeros((n,), dtype),
        final_obs=obs,
        final_mask=jnp.zeros((n,), bool),
        stats=_zeros_stats(n, dtype),
        model=_carried(env, model),
        obs_norm=obs_norm,
        info=seen.info,
        history=seen.history,
        last_frames=None if seen.frames is None else LastFrames(seen.frames, jnp.int32(0)),
        curriculum=seen.curriculum,
    )


def _check_action(env: Env, action: Any) -> jax.Array:
    action = jnp.asarray(action)
    if action.shape != (env.num_envs, env.action_size):
        raise ValueError(
            f"action must have shape (num_envs, nu) = {(env.num_envs, env.action_size)}, "
            f"got {action.shape}"
        )
    if not (
        jnp.issubdtype(action.dtype, jnp.floating) or jnp.issubdtype(action.dtype, jnp.integer)
    ):
        raise TypeError(f"action must be real numbers, got dtype {action.dtype}")
    return action


def step(env: Env, state: EnvState, action: jax.Array) -> EnvState:
    """Steps every world with ``action`` and applies the env's autoreset mode.

    Args:
      env: the env.
      state: the state returned by :func:`reset` or the last :func:`step`.
      action: ``(num_envs, nu)``; clipped to the action bounds before use (the
        reward sees the clipped action). A NaN/Inf action trips the
        non-finite-action guard: that world is truncated and restarted.

    Returns:
      The next state. ``reward``, ``terminated`` and ``truncated`` describe this
      step; statistics count each episode once, when it ends.
    """
    if groups := _groups(env):
        return groups.step(env, state, action)
    action = _check_action(env, action)
    return _sharded(_step_local, env, state, action, per_world=(1,))


def _step_local(env: Env, pool: Any, state: EnvState, action: jax.Array) -> EnvState:
    task = env.task
    prev = state.runner
    model = env.model if state.model is None else state.model
    dtype = prev.data.qpos.dtype
    action = jnp.clip(action.astype(dtype), env.low, env.high)
    prev_done = prev.terminated | prev.truncated
    next_step, same_step = env.mode == NEXT_STEP, env.mode == SAME_STEP

    # The guards' truncations of this step alone (not last step's flags). Worlds
    # restarted in the last step ("same_step") start their episode with clear flags:
    # the flags they reported belong to the episode that ended.
    fresh = state.final_mask
    cleared = prev.replace(
        ctrl=action,
        truncated=jnp.zeros_like(prev.truncated),
        tripped={k: v & ~fresh for k, v in prev.tripped.items()},
    )
    draw = None
    if _draws_every_step(env):  # noise or info updates: every world's stream advances
        cleared, draw = engine.split_rng(cleared)
    model, runner = engine.step_local(
        env.config, model, env.model, env.ref, cleared, None, task.substeps
    )
    tree = model.tree
    axes = world_axes(tree)
    # Reward and termination see the info the step was taken under; the next
    # observation sees it updated.
    info = state.info
    extra = _with_info(task, info)
    reward = jax.vmap(task.reward, in_axes=(axes, 0, 0, 0, *(0 for _ in extra)))(
        tree, prev.data, action, runner.data, *extra
    )
    reward = reward.astype(dtype)
    terminated = jax.vmap(task.terminated, in_axes=(axes, 0, *(0 for _ in extra)))(
        tree, runner.data, *extra
    ).astype(bool)
    if task.update_info is not None:
        keys = _typed_keys(draw, _INFO_STREAM)
        info = jax.vmap(task.update_info, in_axes=(axes, 0, 0, 0, 0, 0))(
            tree, prev.data, action, runner.data, info, keys
        )
    obs = _observe(env, model, runner.data, info)
    last = state.last_frames
    if env.renderer is not None:  # after the physics: the frames show the new state
        data, frames, last = _step_frames(env, model, runner.data, last)
        runner = runner.replace(data=data)
        obs = pixels.merge(obs, frames)
    if env.pipeline.random:
        obs = observations.noisy(env.pipeline, obs, _derived_keys(draw, _NOISE_STREAM))
    history = observations.push(env.pipeline, state.history, obs)
    obs = observations.view(env.pipeline, history, obs)
    truncated = (runner.episode_length >= task.max_episode_steps) | runner.truncated
    # A world whose last step ended its episode is stale now (restarted below in
    # "next_step", left alone in "disabled"); in "same_step" it was restarted already.
    stale = prev_done & ~same_step
    # "disabled": an ended world keeps the flags of its episode's end until
    # reset_worlds restarts it (a fallen pole that swings back is still fallen).
    sticky = stale & (env.mode == DISABLED)
    terminated = jnp.where(sticky, prev.terminated, terminated)
    truncated = jnp.where(sticky, prev.truncated, truncated)
    done = terminated | truncated
    stats = state.stats
    episode_return = stats.episode_return + jnp.where(stale, 0.0, reward).astype(dtype)
    ended = done & ~stale
    length = runner.episode_length
    stats = stats.replace(
        last_return=jnp.where(ended, episode_return, stats.last_return),
        last_length=jnp.where(ended, length, stats.last_length),
        completed=stats.completed + ended,
        return_sum=stats.return_sum + jnp.where(ended, episode_return, 0.0).astype(dtype),
        length_sum=stats.length_sum + jnp.where(ended, length, 0),
    )

    # One compiled step serves every mode: the mode only chooses which worlds restart.
    restart = jnp.where(next_step, prev_done, same_step & done)
    runner = runner.replace(terminated=terminated, truncated=truncated)
    frames = None if last is None else last.frames
    seen = _Seen(info, history, obs, frames, state.curriculum)
    # The state each episode ended in: "next_step" restarts after the ending step.
    ended = lambda: curriculum_.episode_end(  # noqa: E731
        next_step, (prev.data, state.info), (runner.data, info)
    )
    model, restarted, seen = _restart(env, pool, model, runner, seen, restart, ended=ended)
    new_obs = seen.obs
    # "same_step" reports the episode that just ended; "next_step" clears the flags.
    runner = restarted.replace(
        terminated=jnp.where(same_step, terminated, restarted.terminated),
        truncated=jnp.where(same_step, truncated, restarted.truncated),
        tripped={
            k: jnp.where(same_step, v, restarted.tripped[k]) for k, v in runner.tripped.items()
        },
        overflow=jnp.where(same_step, runner.overflow, restarted.overflow),
    )
    final_mask = same_step & done
    # Statistics move by what the step returns: one observation per world per step.
    obs_norm, new_obs, final_obs = _normalized(
        env, state.obs_norm, new_obs, _pick(final_mask, obs, new_obs)
    )
    return EnvState(
        runner=runner,
        obs=new_obs,
        reward=jnp.where(next_step & prev_done, 0.0, reward).astype(dtype),
        final_obs=final_obs,
        final_mask=final_mask,
        stats=stats.replace(episode_return=jnp.where(restart, 0.0, episode_return).astype(dtype)),
        model=_carried(env, model),
        obs_norm=obs_norm,
        info=seen.info,
        history=seen.history,
        last_frames=None if last is None else last.replace(frames=seen.frames),
        curriculum=seen.curriculum,
    )


def reset_worlds(env: Env, state: EnvState, mask: jax.Array) -> EnvState:
    """Restarts the worlds in ``mask`` from fresh starts (for ``"disabled"`` mode).

    Args:
      env: the env.
      state: the current state.
      mask: ``(num_envs,)`` bool, the worlds to restart.

    Returns:
      The state with those worlds' data, observation, flags, reward and running
      return reset; other worlds and all statistics of completed episodes unchanged.
      Observation statistics scale the new observations but do not move (each
      step counts every world once).
    """
    if groups := _groups(env):
        return groups.reset_worlds(env, state, mask)
    mask = jnp.asarray(mask)
    if mask.dtype != bool or mask.shape != (env.num_envs,):
        raise ValueError(
            f"mask must be bool of shape ({env.num_envs},), got {mask.dtype} {mask.shape}"
        )
    return _sharded(_reset_worlds_local, env, state, mask, per_world=(1,))


def _reset_worlds_local(env: Env, pool: Any, state: EnvState, mask: jax.Array) -> EnvState:
    model = env.model if state.model is None else state.model
    last = state.last_frames
    frames = None if last is None else last.frames
    seen = _Seen(state.info, state.history, state.obs, frames, state.curriculum)
    ended = lambda: (state.runner.data, state.info)  # noqa: E731 - as the user stopped them
    model, runner, seen = _restart(env, pool, model, state.runner, seen, mask, ended=ended)
    fresh = seen.obs
    if env.normalize is not None:  # scaled, not counted: steps count each world once
        fresh = normalize.apply(env.normalize, state.obs_norm, fresh)
    obs = _pick(mask, fresh, state.obs)
    return state.replace(
        runner=runner,
        obs=obs,
        info=seen.info,
        history=seen.history,
        last_frames=None if last is None else last.replace(frames=seen.frames),
        curriculum=seen.curriculum,
        reward=jnp.where(mask, 0.0, state.reward).astype(state.reward.dtype),
        final_obs=_pick(mask, obs, state.final_obs),
        final_mask=state.final_mask & ~mask,
        stats=state.stats.replace(
            episode_return=jnp.where(mask, 0.0, state.stats.episode_return).astype(
                state.stats.episode_return.dtype
            )
        ),
        model=_carried(env, model),
    )


def health_report(state: EnvState) -> health.Report:
    """NumPy snapshot of every guard's flags and counts and the restart counts."""
    if groups := _groups(state):
        return groups.health_report(state)
    return health.Report.from_state(state.runner)


def check_guards(env: Env, before: EnvState, after: EnvState) -> tuple | None:
    """The ``"warn"``/``"raise"`` guard policies of one step, on the host (see
    :func:`mjxrunner.guards.check_on_host`): ``(guard, worlds)`` or None."""
    return guards_.check_on_host(env.config.guards, before.runner, after.runner)


def guard_error(env: Env, before: EnvState, after: EnvState) -> Exception | None:
    """The error of the first ``"warn"``/``"raise"`` guard one step tripped (already
    warned for ``"warn"``), or None; for stateful front doors."""
    if groups := _groups(env):
        return groups.guard_error(env, before, after)
    found = check_guards(env, before, after)
    if found is None:
        return None
    guard, worlds = found
    return guard.error(guard.message(worlds, after.runner))


def reseed(state: EnvState, mask: np.ndarray, key: jax.Array) -> EnvState:
    """The worlds in ``mask`` given the PRNG streams ``reset(key)`` would give them
    (host side: for doors that reseed chosen worlds)."""
    if groups := _groups(state):
        return groups.reseed(state, mask, key)
    return with_streams(state, mask, np.asarray(core.init_keys(key, mask.shape[0])))


def with_streams(state: EnvState, mask: np.ndarray, fresh: np.ndarray) -> EnvState:
    """``state`` whose worlds in ``mask`` continue from the raw keys ``fresh``
    (``(num_envs, 2)``; host side)."""
    rng = np.where(mask[:, None], fresh, np.asarray(state.runner.rng))
    rng = jax.device_put(rng, state.runner.rng.sharding)  # placed as before: no recompile
    return state.replace(runner=state.runner.replace(rng=rng))


def with_episode_length(state: EnvState, lengths: np.ndarray) -> EnvState:
    """``state`` with each world's running episode length set (host side)."""
    if groups := _groups(state):
        return groups.with_episode_length(state, lengths)
    current = state.runner.episode_length
    new = jax.device_put(np.asarray(lengths, np.int32), current.sharding)
    return state.replace(runner=state.runner.replace(episode_length=new))


def world_scene(env: Env, state: EnvState, world: int) -> tuple[Any, Any, Any, int]:
    """``(host MjModel, device mjx.Model, batched data, index in that data)`` of
    ``world``: what drawing it needs."""
    if groups := _groups(env):
        return groups.world_scene(env, state, world)
    model = (env.model if state.model is None else state.model).tree
    return env.host.mj_model, model, state.runner.data, world


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


# --- checkpoints -----------------------------------------------------------------------


def save(path: str | os.PathLike, env: Env, state: EnvState) -> None:
    """Writes ``env`` and ``state`` to ``path`` atomically (see
    :mod:`mjxrunner.checkpoint`); :func:`load` continues the run bit for bit."""
    from mjxrunner import checkpoint

    if _groups(env) is not None:
        checkpoint.save_env_groups(path, env, state)
        return
    checkpoint.save_env(path, env, state)


def load(path: str | os.PathLike, **kwargs: Any) -> tuple[Env, EnvState]:
    """``(env, state)`` from a checkpoint written by :func:`save`.

    Keyword arguments as :func:`mjxrunner.checkpoint.load_env`: ``task`` (when it
    is not registered under its saved name), ``device``, ``devices`` (to split the
    worlds over), ``guards`` (user guards, which are not saved), ``user_template``.
    """
    from mjxrunner import checkpoint

    return checkpoint.load_env(path, **kwargs)


_FLAT: dict[tuple, Any] = {}


def flat_step(env_def: Any, state_def: Any, pack: Any = None) -> Any:
    """``jit`` of :func:`step` on flat leaves, one per structure and process:
    ``(env leaves, state leaves, action) -> (new state leaves, pack(new state))``.

    :func:`jit_step` calls it. The stateful doors step packed buffers instead
    (:func:`mjxrunner.door.packed_step`): a call's host time grows with the number
    of arrays it returns, and a state has ~100 leaves."""
    key = (env_def, state_def, pack)
    if key not in _FLAT:

        def step_leaves(env_leaves, state_leaves, action):
            new = step(env_def.unflatten(env_leaves), state_def.unflatten(state_leaves), action)
            leaves, new_def = jax.tree.flatten(new)
            if new_def != state_def:  # at trace time: a step keeps the state's structure
                raise AssertionError(f"the step changed the state's structure: {new_def}")
            return leaves, None if pack is None else pack(new)

        _FLAT[key] = jax.jit(step_leaves)
    return _FLAT[key]


def jit_step(env: Env, state: EnvState, action: jax.Array) -> EnvState:
    """:func:`step`, compiled once per structure (see :func:`flat_step`)."""
    env_leaves, env_def = jax.tree.flatten(env)
    state_leaves, state_def = jax.tree.flatten(state)
    leaves, _ = flat_step(env_def, state_def)(env_leaves, state_leaves, action)
    return state_def.unflatten(leaves)


# Compiled once per process and shared (the doors use them): the env is an argument
# and its autoreset mode an array, so every env of the same task and size, in any
# mode, runs one executable per function.
jit_reset = jax.jit(reset)
jit_reset_worlds = jax.jit(reset_worlds)
