"""The engine: one pytree for a batch of worlds, and the pure functions over it.

Every front door is a thin layer over this module: :class:`~mjxrunner.MultiEnvRunner`
holds an :class:`Engine` and swaps buffers, :mod:`mjxrunner.env` adds a task and
autoreset, the Gymnasium adapter adds NumPy. A capability written here (impl
"warp", sharding, per-world parameters, randomization, guards) works through all
of them.

An :class:`Engine` is a pytree: its :class:`Config` (backend, number of worlds,
guards, randomization terms, mesh) is static treedef metadata, so it can be an
argument of a user's ``jit``; models are :class:`~mjxrunner.engine.worlds.FlatModel`
(leaves plus an interned treedef), the convention for every model the engine holds.

Each verb (:func:`step`, :func:`reset`, :func:`rollout`, :func:`randomize`) has one
form: it takes an :class:`Engine` and runs over the config's mesh (``shard_map``,
each device stepping its own worlds). Code already inside ``shard_map`` gives it an
engine of its own worlds (:func:`local`). A door's compiled call returns only what
the verb changed (each result costs host time), and donates its double buffer.
:mod:`mjxrunner.engine.core` holds the steps and resets of one ``mjx.Model`` and
state, which the verbs are made of.

Action latency and pushes (:mod:`mjxrunner.engine.events`) act inside the step, and a
restored world starts a new episode (its events are drawn anew, its kinematics
recomputed on request); :func:`get_state`/:func:`set_state`
read and write MuJoCo's ``mjtState`` vectors world by world.

``reset`` takes a *source of fresh worlds*: the engine's default snapshot (what
the runner restores), or any ``RunnerState`` of the same structure (the env's draws
from a task's ``initial_state``, a reset pool), always applied through
:func:`mjxrunner.engine.worlds.select_worlds`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from mjxrunner.engine import backend as backend_
from mjxrunner.engine import backends, core, deprecated, events, guards, health, params, sharding
from mjxrunner.engine import guards as guards_
from mjxrunner.engine import options as options_
from mjxrunner.engine.options import Options
from mjxrunner.engine.sharding import AXIS, on_worlds, specs
from mjxrunner.engine.state import RunnerState
from mjxrunner.engine.worlds import (
    FlatModel,
    pytree_dataclass,
    select_worlds,
    static_field,
    tree_of,
    world_axes,
)

Randomization = params.Randomization

__all__ = [
    "Config",
    "Engine",
    "Randomization",
    "attach_events",
    "build",
    "check_guards",
    "cleared",
    "collide_flags",
    "configure",
    "contact_count",
    "forward_kinematics",
    "has_events",
    "local",
    "place",
    "put",
    "randomize",
    "redraws_in_step",
    "reset",
    "rollout",
    "split_rng",
    "step",
    "structure",
    "with_events",
    "with_host_model",
    "with_ref",
    "write_params",
]


@dataclasses.dataclass(frozen=True)
class Config:
    """What is fixed for a batch of worlds: static metadata of the engine pytree.

    Attributes:
      backend: impl, device, Warp graph mode and capacities.
      num_envs: number of worlds (all devices together).
      nu: number of actuators.
      guards: the per-world checks after every step (:mod:`mjxrunner.engine.guards`).
      randomization: None, or the randomized parameters.
      mesh: None (one device) or the 1-D ``"worlds"`` mesh the worlds are split over.
      pushes: None, or the random pushes of ``options.pushes`` resolved on the model
        (:class:`mjxrunner.engine.events.PushPlan`).
      options: the :class:`~mjxrunner.engine.options.Options` it was configured
        from, with the backend's choices (:meth:`~mjxrunner.engine.backend.Backend.resolved`):
        what checkpoints save, and where the latency and the contact switch are read.
    """

    backend: backend_.Backend
    num_envs: int
    nu: int
    guards: tuple[guards.Guard, ...] = core.DEFAULT_GUARDS
    randomization: Randomization | None = None
    mesh: Mesh | None = None
    pushes: events.PushPlan | None = None
    options: Options = options_.RUNNER

    @property
    def latency(self) -> events.Latency | None:
        """None, or the action latency (:class:`mjxrunner.engine.events.Latency`)."""
        return self.options.latency

    @property
    def collisions(self) -> bool:
        """False steps every world with its contacts switched off (see
        :func:`mjxrunner.engine.core.without_contacts`)."""
        return self.options.collision_enabled

    def replace(self, **changes: Any) -> Config:
        moved = {"latency": "latency", "collisions": "collision_enabled"}
        if set(changes) & set(moved):  # they were fields before the options held them
            deprecated.warn(
                "Config.replace(latency=, collisions=)",
                "they are options, config.replace(options=config.options.replace(...))",
            )
            now = {moved[k]: changes.pop(k) for k in list(changes) if k in moved}
            options = changes.get("options", self.options)
            changes["options"] = options.replace(**now)
        return dataclasses.replace(self, **changes)


@pytree_dataclass
class Engine:
    """A batch of worlds: configuration, models, state and the default snapshot.

    Attributes:
      config: the static :class:`Config`.
      model: the device model as a :class:`~mjxrunner.engine.worlds.FlatModel`; leaves
        shared (core shape) or per world (``(num_envs, *core)``).
      default_model: the model that resets restore and randomization draws around.
      state: the :class:`~mjxrunner.RunnerState` of every world.
      default: the snapshot resets restore (counters and flags cleared).
      ref: what rebuilding mj_setConst's constants needs (None until their inputs change).
    """

    config: Config = static_field()
    model: FlatModel
    default_model: FlatModel
    state: RunnerState
    default: RunnerState
    ref: params.Reference | None = None

    @property
    def num_envs(self) -> int:
        return self.config.num_envs


def configure(
    m: mujoco.MjModel, num_envs: int, options: Options | None = None, **kwargs: Any
) -> Config:
    """The validated :class:`Config` of every front door, from its
    :class:`~mjxrunner.engine.options.Options` (or the same names as keyword
    arguments, which change ``options``); see ``Options`` for their meaning."""
    opts = options_.of(options_.RUNNER, options, **kwargs)
    guards_.check_policy(opts.overflow_policy, "overflow_policy")
    opts = opts.replace(latency=events.check_latency(opts.latency))
    plan = events.resolve_pushes(m, opts.pushes)
    b = backend_.Backend.make(m, num_envs, opts)
    return Config(b, num_envs, m.nu, opts.guard_set(b), pushes=plan, options=b.resolved(opts))


def cleared(state: RunnerState) -> RunnerState:
    """A copy of ``state`` with counters and flags cleared: a default snapshot."""
    return jax.tree.map(jnp.copy, state).replace(
        episode_length=jnp.zeros_like(state.episode_length),
        terminated=jnp.zeros_like(state.terminated),
        truncated=jnp.zeros_like(state.truncated),
        tripped={k: jnp.zeros_like(v) for k, v in state.tripped.items()},
    )


def build(
    mj_model: mujoco.MjModel,
    config: Config,
    *,
    seed: int = 0,
    keyframe: int | str | None = None,
    start: Any = None,
) -> Engine:
    """An engine of ``config.num_envs`` copies of one start (host side, not jit-able).

    Args:
      mj_model: the host model (its structure is compiled into the step).
      config: the configuration (its mesh is applied by :func:`place`).
      seed: seeds the per-world RNG keys.
      keyframe: the keyframe to start from (None: ``qpos0``), forwarded.
      start: or a host ``MjData`` to start from (as it is).
    """
    from mjxrunner.engine.models import start_data

    b = config.backend
    host = start_data(mj_model, keyframe) if start is None else start
    model = FlatModel.of(b.put_model(mj_model))
    template = b.put_data(mj_model, host)
    with jax.default_device(b.device):
        init = jax.jit(core.init, static_argnames=("num_envs", "nu", "guards"))
        state = init(template, config.num_envs, jax.random.key(seed), config.nu, config.guards)
        if has_events(config):  # the first episode draws its delays and push times
            everyone = jnp.ones((config.num_envs,), bool)
            first = local(config, None, attach_events(config, state))
            state = _begin_jit(first, everyone).state
    default = jax.jit(cleared)(state)
    eng = Engine(config, model, model, state, default)
    return eng if config.mesh is None else place(eng, config.mesh)


def put(tree: Any, config: Config) -> Any:
    """Places ``tree`` like the engine's buffers: on the device, or over the mesh."""
    if config.mesh is None:
        return jax.device_put(tree, config.backend.device)
    return sharding.place(tree, config.mesh)


def place(eng: Engine, mesh: Mesh | None) -> Engine:
    """The engine with its worlds split over ``mesh`` (None: back on one device)."""
    if mesh is not None:
        sharding.check_divisible(eng.num_envs, mesh)
        eng.config.backend.physics.check_mesh(mesh)
    config = eng.config.replace(mesh=mesh)
    return Engine(
        config,
        put(eng.model, config),
        put(eng.default_model, config),
        put(eng.state, config),
        put(eng.default, config),
        eng.ref,
    )


# --- parameters (host side) -------------------------------------------------------------


def with_ref(
    config: Config, ref: params.Reference | None, mj_model: mujoco.MjModel, paths: Any
) -> params.Reference | None:
    """``ref``, built now if it is None and ``paths`` touch ``params.CONST_INPUTS`` (whose derived
    constants need it), unless the backend derives them itself (impl "c": MuJoCo)."""
    derives = config.backend.physics.derives_constants
    if ref is not None or not set(paths) & params.CONST_INPUTS or derives:
        return ref
    return put(params.Reference.build(mj_model, config.backend.device), config.replace(mesh=None))


def write_params(
    config: Config,
    model: FlatModel,
    ref: params.Reference | None,
    mj_model: mujoco.MjModel,
    updates: dict[str, np.ndarray],
) -> tuple[FlatModel, params.Reference | None]:
    """``model`` with validated ``updates`` (see :func:`params.new_values`) written and
    placed; mass changes rebuild the derived constants. Returns ``(model, ref)``."""
    ref = with_ref(config, ref, mj_model, updates)
    return put(FlatModel.of(params.set_values(model.tree, updates, ref)), config), ref


def with_host_model(eng: Engine, source: mujoco.MjModel) -> tuple[mujoco.MjModel, Engine]:
    """``(host, engine)``: a copy of host model ``source`` with its derived constants
    recomputed (``mj_setConst``), and ``eng`` whose device model takes every value of
    it (every field shared again, per-world values included).

    Raises:
      TypeError: ``source`` is not an ``MjModel``.
      ValueError: ``source`` differs in structure (sizes or static fields such as
        joint, geom or actuator types), which is compiled into the step.
    """
    if not isinstance(source, mujoco.MjModel):
        raise TypeError(f"source must be a mujoco.MjModel, got {type(source).__name__}")
    host = copy.copy(source)
    mujoco.mj_setConst(host, mujoco.MjData(host))
    try:
        b = backend_.Backend.make(host, eng.num_envs, eng.config.options)
        new = put(FlatModel.of(b.put_model(host)), eng.config)
    except ValueError as e:
        raise ValueError(f"update_model: {e}") from e
    if structure(new) != structure(eng.default_model):
        raise ValueError(
            "update_model: the host model differs in structure (sizes or static "
            "fields such as joint, geom or actuator types), which is compiled into "
            "the step; build a new MultiEnvRunner for it"
        )
    # The mass constants' reference follows the new host model.
    ref = None if eng.ref is None else params.Reference.build(host, eng.config.backend.device)
    return host, eng.replace(model=new, ref=ref)


# --- local functions (one device's worlds) ---------------------------------------------


def split_rng(state: RunnerState) -> tuple[RunnerState, jax.Array]:
    """Advances every world's key; returns the state and one fresh raw key per world."""
    rng, draw = core.split_streams(state.rng)
    return state.replace(rng=rng), draw


def has_events(config: Config) -> bool:
    """Whether the state carries event fields (action latency, pushes)."""
    return config.latency is not None or config.pushes is not None


def attach_events(config: Config, state: RunnerState) -> RunnerState:
    """``state`` with the event fields ``config`` needs (and no others); see
    :func:`mjxrunner.engine.events.attach`. Every state the engine builds goes through it."""
    if not has_events(config) and state.latency is None and state.pushes is None:
        return state
    return events.attach(state, config.latency, config.pushes)


def collide_flags(config: Config, collide: jax.Array | None, num_envs: int) -> jax.Array | None:
    """The ``collide`` argument of :func:`mjxrunner.engine.core.step`: ``collide`` if given,
    else None (the model's contacts) or all False when ``config.collisions`` is off."""
    if collide is not None or config.collisions:
        return collide
    return jnp.zeros((num_envs,), bool)


def forward_kinematics(model: FlatModel, data: Any) -> Any:
    """Batched ``data`` with positions and orientations recomputed from ``qpos``
    (``mjx.kinematics`` and ``mjx.com_pos``: ``xpos``, ``xquat``, ``xmat``,
    ``geom_xpos``, ``site_xpos``, ``subtree_com``, ``cinert``, ``cdof``...), with
    the model's per-world parameters. Quaternions in ``qpos`` come back normalized;
    sensors, accelerations and contacts are left to the next step."""
    m = tree_of(model)
    return jax.vmap(backends.of(m).kinematics, in_axes=(world_axes(m), 0))(m, data)


def redraws_in_step(config: Config) -> bool:
    """Whether the step itself redraws parameters (randomization every n steps): only
    then does it read the default model and change the model."""
    rand = config.randomization
    return rand is not None and rand.every_n_steps > 0


# --- the verbs: each takes an Engine and runs over its config's mesh ---------------------
#
# One form per verb. Code already inside ``shard_map`` (the env's step) gives them an
# engine of its own worlds (:func:`local`: no mesh), so they do not shard again.


def local(
    config: Config,
    model: FlatModel | None,
    state: RunnerState,
    *,
    default_model: FlatModel | None = None,
    ref: params.Reference | None = None,
    default: RunnerState | None = None,
) -> Engine:
    """An engine of the worlds one device holds (``config`` without its mesh), for
    code that is already inside ``shard_map``. The parts a verb does not read may
    be None: the default model is read only by redraws, the snapshot only by a
    reset from it."""
    return Engine(config.replace(mesh=None), model, default_model, state, default, ref)


def _redraw(config, model, default_model, ref, state, mask):
    """The parameters of the worlds in ``mask`` redrawn around the default model,
    each from its own stream (which advances); returns ``(model, state)``."""
    rand = config.randomization
    if rand is None:
        return model, state
    advanced, keys = split_rng(state)
    # Only the redrawn worlds' streams advance: a world's draws never depend on others.
    state = state.replace(rng=jnp.where(mask[:, None], advanced.rng, state.rng))
    new = params.randomize(model.tree, default_model.tree, keys, mask, rand.terms, ref)
    return FlatModel.of(new), state


def step(
    eng: Engine, dt: jax.Array | None = None, substeps: int = 1, collide: Any = None
) -> Engine:
    """Advances every world by one step (``dt``, in ``substeps`` solver calls) and
    runs its guards; redraws the parameters that are due (randomization every n
    steps, :func:`redraws_in_step`: only then is the default model read and the
    model changed).

    ``collide``: None (``config.collisions``), or ``(num_envs,)`` bool: worlds with
    False ignore their contacts for this step. Latency and pushes act inside it.
    """
    config = eng.config

    def run(model, default_model, ref, state, dt, collide):
        # core.step's three parts: events before the physics, the physics, then the
        # guards and counters.
        state, ctrl = events.before_physics(state, config.pushes)
        collide = collide_flags(config, collide, state.ctrl.shape[0])
        data, overflow = core.physics_step(model, state.data, ctrl, dt, substeps, collide)
        state = core.after_physics(state, data, overflow, config.guards)
        if redraws_in_step(config):
            due = state.episode_length % config.randomization.every_n_steps == 0
            model, state = _redraw(config, model, default_model, ref, state, due)
        return model, state

    parts = (eng.model, eng.default_model, eng.ref, eng.state, dt, collide)
    model, state = on_worlds(run, config.mesh, *parts, per_world=(5,))
    return eng.replace(model=model, state=state)


def reset(eng: Engine, mask: Any = None, source: Any = None, update_fk: bool = True) -> Engine:
    """Restores worlds from ``source`` (None: the default snapshot).

    Args:
      eng: the engine.
      mask: None (every world, shared leaves too), ``(num_envs,)`` bool (those
        worlds' world-indexed leaves), or ``(num_envs + 1,)`` bool (the last entry
        adds the shared leaves).
      source: fresh worlds: a ``RunnerState`` of the engine's structure, or
        ``source(model, state) -> RunnerState``, drawn with the restored (and
        redrawn) parameters (the env's restarts).
      update_fk: recompute the restored worlds' kinematics with their (restored,
        maybe redrawn) parameters (:func:`forward_kinematics`), so positions match
        ``qpos`` even after a parameter change since the snapshot.

    The model's per-world leaves of the restored worlds come back from the default
    model, then the randomization redraws them if it does so on reset. Each world
    keeps its RNG stream and health counts; resets are counted. ``mask=None`` with
    the default snapshot returns the default model whole, so a parameter promoted
    since the snapshot becomes shared again. The restored worlds start new
    episodes: their events are drawn anew.
    """
    config, rand = eng.config, eng.config.randomization
    if mask is None and source is None:
        # Everything, shape signature included: the default model and snapshot whole.
        done = jnp.ones((config.num_envs,), bool)
        state = jax.tree.map(jnp.copy, core.kept_by_reset(eng.state, eng.default))
        state = state.replace(health=health.count_resets(state.health, done))
        new = eng.replace(model=eng.default_model, state=state)
        if rand is not None and rand.on_reset:
            new = randomize(new, done)
        return _begin(new, done, update_fk)

    def run(model, default_model, ref, state, fresh, done, shared):
        model = FlatModel.of(select_worlds(done, default_model.tree, model.tree, shared))
        if rand is not None and rand.on_reset:
            model, state = _redraw(config, model, default_model, ref, state, done)
        if callable(fresh):
            fresh = fresh(model, state)
        state = core.reset_selected(state, fresh, done, shared)
        state = _begin(local(config, model, state), done, update_fk).state
        return model, state.replace(health=health.count_resets(state.health, done))

    # The worlds of the state given: all of them, or those of one device or one pass.
    done, shared = core.parse_mask(mask, eng.state.ctrl.shape[0])
    fresh = eng.default if source is None else source
    parts = (eng.model, eng.default_model, eng.ref, eng.state, fresh, done, shared)
    model, state = on_worlds(run, config.mesh, *parts, per_world=(5,))
    return eng.replace(model=model, state=state)


def _begin(eng: Engine, done: jax.Array, update_fk: bool = False) -> Engine:
    """Starts new episodes in the worlds in ``done`` (their state already restored):
    event draws (:func:`mjxrunner.engine.events.restart`) and, with ``update_fk``,
    forward kinematics with the engine's model."""
    config = eng.config
    if not has_events(config) and not update_fk:
        return eng

    def run(model, state, done):
        state = events.restart(state, done, config.latency, config.pushes)
        if update_fk:
            fresh = forward_kinematics(model, state.data)
            state = state.replace(data=select_worlds(done, fresh, state.data))
        return state

    return eng.replace(
        state=on_worlds(run, config.mesh, eng.model, eng.state, done, per_world=(2,))
    )


_begin_jit = jax.jit(_begin, static_argnames="update_fk")


def randomize(eng: Engine, mask: jax.Array) -> Engine:
    """Redraws the randomized parameters of the worlds in ``(num_envs,)`` ``mask``
    around the default model, each from its own stream (which advances)."""
    config = eng.config
    run = lambda *parts: _redraw(config, *parts)  # noqa: E731
    parts = (eng.model, eng.default_model, eng.ref, eng.state, mask)
    model, state = on_worlds(run, config.mesh, *parts, per_world=(4,))
    return eng.replace(model=model, state=state)


def rollout(
    eng: Engine,
    actions_or_policy: Any,
    n_steps: int,
    dt: jax.Array | None = None,
    substeps: int = 1,
    collide: Any = None,
) -> tuple[Engine, Any]:
    """``n_steps`` steps in one ``lax.scan`` (see :func:`mjxrunner.engine.core.rollout`).

    Actions are ``(n_steps, num_envs, nu)``, or ``policy(state, keys)``; the
    trajectory ``(qpos, qvel)`` is time-major, ``(n_steps, num_envs, ...)``. The
    overflow bits of the final state OR those of every step. Latency and pushes act
    in every step; ``collide`` as in :func:`step`, for every step. Parameters are
    not redrawn within it.
    """
    config = eng.config

    # Actions and the trajectory are time-major: their world axis is the second one.
    def time_major(shapes):
        return specs(shapes[0]), jax.tree.map(lambda _: PartitionSpec(None, AXIS), shapes[1])

    def run(m, s, u, dt, c):
        c = collide_flags(config, c, s.ctrl.shape[0])
        if not callable(u):
            u = jnp.swapaxes(u, 0, 1)  # back to time-major, on this device's worlds
        pushes = config.pushes
        return core.rollout(
            m, s, u, n_steps, dt, substeps, guards=config.guards, pushes=pushes, collide=c
        )

    if callable(actions_or_policy):
        policy = lambda m, s, dt, c: run(m, s, actions_or_policy, dt, c)  # noqa: E731
        parts, per_world = (eng.model, eng.state, dt, collide), (3,)
    else:
        by_world = jnp.swapaxes(actions_or_policy, 0, 1)  # world-major, to split it
        policy = run
        parts, per_world = (eng.model, eng.state, by_world, dt, collide), (2, 4)
    state, trajectory = on_worlds(
        policy, config.mesh, *parts, per_world=per_world, out_specs=time_major
    )
    return eng.replace(state=state), trajectory


def contact_count(config: Config, data: Any) -> jax.Array:
    """``(num_envs,)`` int32 active contacts per world (both impls)."""
    out = lambda _: PartitionSpec(AXIS)  # noqa: E731
    return on_worlds(backend_.contact_count, config.mesh, data, out_specs=out)


def check_guards(config: Config, before: RunnerState, after: RunnerState) -> tuple | None:
    """The host policies of the config's guards (see :func:`guards.check_on_host`)."""
    return guards.check_on_host(config.guards, before, after)


def structure(model: Any) -> tuple[Any, list[tuple[int, ...]]]:
    """What a compiled step depends on: the treedef (static fields) and leaf shapes."""
    model = model.tree if isinstance(model, FlatModel) else model
    return jax.tree.structure(model), [np.shape(x) for x in jax.tree.leaves(model)]


# --- events on an existing engine (host side) ------------------------------------------


def with_events(eng: Engine, latency: Any, pushes: Any, mj_model: mujoco.MjModel) -> Engine:
    """``eng`` with other action latency and pushes (see :func:`configure`): the
    state and the default snapshot gain or lose their event fields, and every world
    draws its events afresh from its stream, as on a reset."""
    config = eng.config.replace(
        pushes=events.resolve_pushes(mj_model, pushes),
        options=eng.config.options.replace(latency=events.check_latency(latency), pushes=pushes),
    )
    state = put(attach_events(config, eng.state), config)
    default = put(attach_events(config, eng.default), config)
    everyone = jnp.ones((config.num_envs,), bool)
    new = eng.replace(config=config, state=state, default=default)
    return new.replace(state=_begin_jit(new.replace(default=None), everyone).state)


# --- the verbs' older forms, deprecated -------------------------------------------------


def _parts(eng: Engine) -> tuple[FlatModel, RunnerState]:
    return eng.model, eng.state


def _advance(
    config, model, default_model, ref, state, scratch=None, dt=None, substeps=1, collide=None
):
    new = step(Engine(config, model, default_model, state, None, ref), dt, substeps, collide)
    return (new.model if redraws_in_step(config) else None), new.state


def _restore(
    config, model, default_model, ref, state, default, mask=None, source=None, update_fk=True
):
    return _parts(
        reset(Engine(config, model, default_model, state, default, ref), mask, source, update_fk)
    )


def _reset_local(config, model, default_model, ref, state, fresh, done, shared, update_fk=False):
    eng = local(config, model, state, default_model=default_model, ref=ref)
    return _parts(reset(eng, jnp.concatenate([done, shared[None]]), fresh, update_fk))


def _roll(
    config,
    model,
    state,
    actions_or_policy,
    n_steps,
    dt=None,
    substeps=1,
    collide=None,
    scratch=None,
):
    eng = Engine(config, model, None, state, None, None)
    new, trajectory = rollout(eng, actions_or_policy, n_steps, dt, substeps, collide)
    return new.state, trajectory


def _old_redraw(make):
    return lambda config, model, default_model, ref, state, mask: _parts(
        randomize(make(config, model, state, default_model, ref), mask)
    )


def _old_begin(make):
    return lambda config, model, state, done, update_fk=False: (
        _begin(make(config, model, state, None, None), done, update_fk).state
    )


def _whole(config, model, state, default_model, ref):
    return Engine(config, model, default_model, state, None, ref)


def _one_device(config, model, state, default_model, ref):
    return local(config, model, state, default_model=default_model, ref=ref)


def _step_local(config, model, default_model, ref, state, dt=None, substeps=1, collide=None):
    return _parts(
        step(_one_device(config, model, state, default_model, ref), dt, substeps, collide)
    )


_DEPRECATED = {  # old name: (what replaces it, a function of the old signature)
    old: (f"use mjxrunner.engine.{new}", fn)
    for old, (new, fn) in {
        "advance": ("step(eng, ...)", _advance),
        "step_local": ("step(local(...), ...)", _step_local),
        "restore": ("reset(eng, ...)", _restore),
        "reset_local": ("reset(local(...), ...)", _reset_local),
        "roll": ("rollout(eng, ...)", _roll),
        "redraw": ("randomize(eng, mask)", _old_redraw(_whole)),
        "randomize_local": ("randomize(local(...), mask)", _old_redraw(_one_device)),
        "begin": ("reset(eng, ...), which starts the new episodes", _old_begin(_whole)),
        "begin_local": ("reset(local(...), ...)", _old_begin(_one_device)),
    }.items()
}
"""The parts and one-device forms of the verbs, before each verb had one form."""

__getattr__ = deprecated.module_getattr(__name__, _DEPRECATED, shown="mjxrunner.engine")
