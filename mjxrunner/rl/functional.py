"""The functional env: :class:`Env`, :func:`make`, and the pure ``reset``/``step``.

See :mod:`mjxrunner.rl.env` (the public module ``mjxrunner.env``) for the autoreset
modes, fresh starts and what a state holds. Groups of envs register their variants of
the functions here (:mod:`.group_env`), which dispatch on the env's type.
"""

from __future__ import annotations

import abc
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner import engine
from mjxrunner import tasks as tasks_
from mjxrunner.engine import backend, checks, core, cpu_fusion, params, programs, sharding
from mjxrunner.engine import guards as guards_
from mjxrunner.engine import options as options_
from mjxrunner.engine.models import HostModel, action_bounds, keyframe_id, load_any, start_data
from mjxrunner.engine.options import Options
from mjxrunner.engine.worlds import (
    FlatModel,
    pytree_dataclass,
    static_field,
    world_mask,
)
from mjxrunner.kit import normalize, observations, pixels
from mjxrunner.rl.episode import AUTORESET_MODES, EnvState
from mjxrunner.rl.restart import draw_starts, raw_spec, renderers, sharded
from mjxrunner.rl.stepping import reset_local, reset_worlds_local, step_local
from mjxrunner.tasks import contract
from mjxrunner.tasks.base import Task


class AnyEnv(abc.ABC):  # noqa: B024 - a kind to register, no methods
    """What the env's functions and the doors take: :class:`Env`, and the kinds of
    env that register themselves (groups: :class:`~mjxrunner.rl.group_env.GroupEnv`)."""


_GROUPS: dict[str, Any] = {}
"""What :mod:`.group_env` registers when it loads (``"make"``: its ``make_groups``)."""


def register_groups(make_groups: Any) -> None:
    """Lets :func:`make` build groups of envs (``groups=``) with ``make_groups``."""
    _GROUPS["make"] = make_groups


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
      model: the device model (:class:`~mjxrunner.engine.worlds.FlatModel`); leaves shared
        or with a leading world axis. Restarts restore it, randomization draws
        around it.
      start: one world's default start (the task's keyframe, forwarded), unbatched.
      low: ``(nu,)`` lower action bounds (``-inf`` where unlimited).
      high: ``(nu,)`` upper action bounds.
      pool: None, or cached starts with a leading ``(pool_size,)`` axis.
      ref: what rebuilding mass-derived constants needs (None unless masses change).
      restart_slots: worlds restarted together in one pass of a restart (static).
      normalize: None, or how observations are normalized (static; see
        :meth:`with_obs_normalization`).
      pipeline: the task's observation noise and history, checked against its
        observation (static; :mod:`mjxrunner.kit.observations`).
      renderer: for a task with pixels (``Task.pixels``), the
        :class:`~mjxrunner.kit.pixels.PixelRenderer` made for this env's worlds and
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
        return observations.view_spec(self.pipeline, raw_spec(self.task, self.model, self.start))

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
        pool = jax.jit(draw_starts, static_argnames="task")(self.model, self.start, keys, self.task)
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
        spec = normalization_spec(enabled, clip, eps)
        if enabled:
            normalize.init(self.observation_spec, backend.float_dtype())  # something to scale
        return self.replace(normalize=spec)

    def shard(self, devices: Any) -> Env:
        """A copy split over ``devices`` (see :meth:`MultiEnvRunner.shard`); states
        from :func:`reset` of the copy are split too."""
        mesh = None if devices is None else sharding.make_mesh(devices)
        if mesh is not None:
            sharding.check_divisible(self.num_envs, mesh)
        config = self.config.replace(mesh=mesh)
        contexts = renderers(self.task, self.host.mj_model, config, self.restart_slots)
        placed = {
            f: engine.put(getattr(self, f), config)
            for f in ("mode", "model", "start", "low", "high")
        }
        return self.replace(config=config, **contexts, **placed)


AnyEnv.register(Env)


def _mode_code(autoreset: Any) -> int:
    if not isinstance(autoreset, str):
        raise TypeError(f"autoreset must be a str, got {type(autoreset).__name__}")
    if autoreset not in AUTORESET_MODES:
        raise ValueError(f"autoreset must be one of {AUTORESET_MODES}, got {autoreset!r}")
    return AUTORESET_MODES.index(autoreset)


def normalization_spec(enabled: Any, clip: Any, eps: Any) -> normalize.Spec | None:
    """The normalization of ``with_obs_normalization(enabled, clip=, eps=)``, None
    when off; a clip without normalization is refused, not ignored."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    if not enabled and clip is not None:
        raise ValueError(
            f"obs_clip (clip) bounds normalized observations: it needs normalize_obs=True "
            f"(enabled=True), got obs_clip={clip!r} with normalization off"
        )
    return normalize.Spec.of(clip, eps) if enabled else None


def make(
    task: Task | str,
    num_envs: int,
    *,
    autoreset: str = "next_step",
    model: mujoco.MjModel | str | os.PathLike | None = None,
    reset_pool: int = 0,
    pool_seed: int = 0,
    restart_slots: int | None = None,
    normalize_obs: bool = False,
    obs_clip: float | None = None,
    devices: Any = None,
    groups: Any = None,
    options: Options | None = None,
    **kwargs: Any,
) -> Env:
    """Builds an :class:`Env`: loads the scene, puts it on device, forwards the start.

    Args:
      task: a :class:`Task` or a registered task name (``mjxrunner.tasks.list()``).
      num_envs: number of worlds, ``>= 1``.
      autoreset: ``"next_step"``, ``"same_step"`` or ``"disabled"``.
      model: the scene to use instead of ``task.model`` (an ``MjModel``, a name, a
        path or MJCF text), e.g. an edited copy with the same joints.
      reset_pool: if > 0, restarts draw from this many cached starts
        (see :meth:`Env.with_reset_pool`).
      pool_seed: seed of the cached starts.
      restart_slots: worlds restarted together in one pass of a restart (on each
        device when sharded): gathered from the batch, given fresh starts,
        parameters, counters and first observations, and scattered back; a step
        with more restarts makes more passes. None: ``ceil(num_envs / 8)``;
        ``num_envs``: one pass over the whole batch (the cost no longer follows the
        number of restarts). See the module docstring.
      normalize_obs: normalize observations by running statistics on device
        (see :meth:`Env.with_obs_normalization`).
      obs_clip: with ``normalize_obs``, None or the bound of normalized values.
      devices: None, or devices to split the worlds over (see :meth:`Env.shard`).
      groups: None, or worlds of several scenes: a sequence of ``(model, n)`` or
        ``(model, n, options)`` whose sizes sum to ``num_envs``; returns a
        :class:`~mjxrunner.rl.group_env.GroupEnv`, which every function here takes
        (see :mod:`mjxrunner.rl.group_env`). The other arguments apply to every group.
      options: the engine's :class:`~mjxrunner.engine.Options` (None: the env's
        defaults, :data:`mjxrunner.engine.options.ENV`: every policy
        ``"truncate"``, so autoreset restarts).
      **kwargs: any option of ``Options`` by name (``impl``, ``device``, Warp
        capacities, the guards and their policies, events, contacts), changing
        ``options``.

    Raises:
      TypeError, ValueError: an argument of the wrong kind or out of range.
    """
    opts = options_.of(options_.ENV, options, **kwargs)
    if groups is not None:
        common = {k: v for k, v in locals().items() if k not in ("task", "num_envs", "groups")}
        for name in ("options", "kwargs", "opts"):
            del common[name]
        if common.pop("model") is not None:
            raise ValueError("with groups=, give each group its model: [(model, n), ...]")
        genv = _GROUPS["make"](task, groups, options=opts, **common)
        if genv.num_envs != checks.count(num_envs, "num_envs"):
            raise ValueError(f"the groups hold {genv.num_envs} worlds, but num_envs is {num_envs}")
        return genv
    if isinstance(task, str):
        task = tasks_.get(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be a mjxrunner.tasks.Task or a name, got {type(task)}")
    num_envs = checks.count(num_envs, "num_envs")
    mode = _mode_code(autoreset)
    impl = backend.check_impl(opts.impl)
    reset_pool = checks.count(reset_pool, "reset_pool", minimum=0)
    pool_seed = checks.seed(pool_seed, "pool_seed")
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
    config = engine.configure(m, num_envs, opts)
    b = config.backend
    low, high = action_bounds(m)
    dtype = backend.float_dtype()
    put = lambda x: jax.device_put(x, b.device)  # noqa: E731
    host = HostModel.of(m)
    device_model = FlatModel.of(b.put_model(m, host.digest))
    start = b.put_data(m, start_data(m, task.keyframe))
    contract.check(task, device_model.tree, start, m.nu)
    pipeline = observations.check(
        task.obs_config, raw_spec(task, device_model, start), f"task {task.name!r}"
    )
    env = Env(
        task=task,
        config=config,
        host=host,
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
    return env.replace(**renderers(task, m, config, restart_slots))


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


@functools.singledispatch
def reset_from_keys(
    env: Env, keys: jax.Array, obs_norm: normalize.ObsNorm | None = None
) -> EnvState:
    """:func:`reset` with each world's PRNG stream given: world ``i``'s stream begins
    at ``keys[i]``, ``(num_envs, 2)`` raw ``uint32`` keys or ``(num_envs,)`` typed
    keys (e.g. a trainer's own per-world keys)."""
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
    return sharded(reset_local, env, keys, world, obs_norm, per_world=(0, 1))


def _array(value: Any, name: str, expected: str) -> jax.Array:
    """``jnp.asarray(value)``, or a TypeError naming ``name``. A string is refused
    first: JAX reads it as a dtype name (``","`` raised a SyntaxError)."""
    if not isinstance(value, (str, bytes)):
        try:
            return jnp.asarray(value)
        except (TypeError, ValueError):
            pass
    got = getattr(value, "dtype", type(value).__name__)
    raise TypeError(f"{name} must be {expected}, got {got}")


def check_action(env: Env, action: Any) -> jax.Array:
    """``action`` as an array of ``(num_envs, nu)`` real numbers (traceable: values
    are not read; a NaN/Inf trips the guard in the step)."""
    if isinstance(action, np.ndarray) and not action.dtype.isnative:  # JAX takes native only
        action = action.astype(action.dtype.newbyteorder("="))
    action = _array(action, "action", "an array of real numbers")
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


@functools.singledispatch
def step(env: Env, state: EnvState, action: jax.Array) -> EnvState:
    """Steps every world with ``action`` and applies the env's autoreset mode.

    Args:
      env: the env.
      state: the state returned by :func:`reset` or the last :func:`step`.
      action: ``(num_envs, nu)``; clipped to the action bounds before use (the
        reward sees the clipped action). A NaN/Inf action (also one that overflows
        the state's dtype) is never clipped: it trips the
        non-finite-action guard: that world is truncated and restarted.

    Returns:
      The next state. ``reward``, ``terminated`` and ``truncated`` describe this
      step; statistics count each episode once, when it ends.
    """
    action = check_action(env, action)
    return sharded(step_local, env, state, action, per_world=(1,))


@functools.singledispatch
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
    mask = _array(mask, "mask", f"bool of shape ({env.num_envs},)")
    if mask.dtype != bool or mask.shape != (env.num_envs,):
        raise ValueError(
            f"mask must be bool of shape ({env.num_envs},), got {mask.dtype} {mask.shape}"
        )
    return sharded(reset_worlds_local, env, state, mask, per_world=(1,))


def check_guards(env: Env, before: EnvState, after: EnvState) -> tuple | None:
    """The ``"warn"``/``"raise"`` guard policies of one step, on the host (see
    :func:`mjxrunner.engine.guards.check_on_host`): ``(guard, worlds)`` or None."""
    return guards_.check_on_host(env.config.guards, before.runner, after.runner)


@functools.singledispatch
def guard_error(env: Env, before: EnvState, after: EnvState) -> Exception | None:
    """The error of the first ``"warn"``/``"raise"`` guard one step tripped (already
    warned for ``"warn"``), or None; for stateful front doors."""
    found = check_guards(env, before, after)
    if found is None:
        return None
    guard, worlds = found
    return guard.error(guard.message(worlds, after.runner))


@functools.singledispatch
def world_scene(env: Env, state: EnvState, world: int) -> tuple[Any, Any, Any, int]:
    """``(host MjModel, device mjx.Model, batched data, index in that data)`` of
    ``world``: what drawing it needs."""
    model = (env.model if state.model is None else state.model).tree
    return env.host.mj_model, model, state.runner.data, world


_FLAT: dict[tuple, Any] = {}


def flat_step(env_def: Any, state_def: Any, pack: Any = None, *, impl: str) -> Any:
    """``jit`` of :func:`step` on flat leaves, one per structure and process:
    ``(env leaves, state leaves, action) -> (new state leaves, pack(new state))``;
    ``impl`` picks XLA's options (:func:`mjxrunner.engine.cpu_fusion.compiler_options`).

    :func:`jit_step` calls it. The stateful doors step packed buffers instead
    (:func:`mjxrunner.doors.door.packed_step`): a call's host time grows with the number
    of arrays it returns, and a state has ~100 leaves."""
    key = (env_def, state_def, pack, impl)
    if key not in _FLAT:

        def step_leaves(env_leaves, state_leaves, action):
            new = step(env_def.unflatten(env_leaves), state_def.unflatten(state_leaves), action)
            leaves, new_def = jax.tree.flatten(new)
            if new_def != state_def:  # at trace time: a step keeps the state's structure
                raise AssertionError(f"the step changed the state's structure: {new_def}")
            return leaves, None if pack is None else pack(new)

        jitted = jax.jit(step_leaves, compiler_options=cpu_fusion.compiler_options(impl))
        _FLAT[key] = programs.kept(jitted, "env.step")
    return _FLAT[key]


def jit_step(env: Env, state: EnvState, action: jax.Array) -> EnvState:
    """:func:`step`, compiled once per structure (see :func:`flat_step`)."""
    env_leaves, env_def = jax.tree.flatten(env)
    state_leaves, state_def = jax.tree.flatten(state)
    leaves, _ = flat_step(env_def, state_def, impl=env.impl)(env_leaves, state_leaves, action)
    return state_def.unflatten(leaves)


def _kept_per_impl(fn: Any, name: str) -> Any:
    """``fn(env, ...)`` jitted and kept (:func:`mjxrunner.engine.programs.kept`) once
    per process and impl: each impl compiles with its own XLA options."""
    jitted: dict[str, Any] = {}

    @functools.wraps(fn)
    def call(env: Any, *args: Any) -> Any:
        impl = env.impl
        if impl not in jitted:
            options = cpu_fusion.compiler_options(impl)
            jitted[impl] = programs.kept(jax.jit(fn, compiler_options=options), name)
        return jitted[impl](env, *args)

    return call


# Compiled once per process and impl, and shared (the doors use them): the env is an
# argument and its autoreset mode an array, so every env of the same task and size,
# in any mode, runs one executable per function.
jit_reset = _kept_per_impl(reset, "env.reset")


jit_reset_worlds = _kept_per_impl(reset_worlds, "env.reset_worlds")
