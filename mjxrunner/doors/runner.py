"""``MultiEnvRunner``: a thin stateful shell over :mod:`mjxrunner.engine`.

It holds one :class:`~mjxrunner.engine.Engine` (config, models, state, default
snapshot), a scratch state buffer, host policies and display metadata. A step
writes into the scratch buffer by donation and then swaps, so the previous state
stays readable (``next_data``) until the next step, and stepping keeps two copies of
the batch, not three. The compiled functions are module-level: runners of the same
model and configuration share them.

A plain step (no host guard, no redraw inside the step) of a small batch, and its
``set_actions``, work on the state packed into a few buffers
(:mod:`mjxrunner.engine.packing`): the state's ~70 leaves and the model's ~120 as
separate arguments and results cost more host time per step than the physics of
small batches (a step and ``set_actions`` of 16 hoppers on impl "c": 0.9 ms over
leaves, 0.5 ms packed). Packing copies the state once per step, which on a CPU costs
more than it saves past a size the impl's physics gives
(:meth:`~mjxrunner.engine.backends.Physics.pack_limit`): 0.5 MB on impl "jax"; any
size on impl "c" on one device, whose step's host call writes the leaves it computes
straight into the scratch buffers, which the layout keeps apart from the other
leaves (:class:`~mjxrunner.engine.native.Placement`). The double buffer is then two
sets of packed buffers; the state's pytree is unpacked into arrays of its own when
something reads it, at most once per step, so no array handed out is ever donated.
Every other operation works on the pytree, and the next step packs it again. On
packed buffers ``set_actions`` only keeps the controls: the next step's program
writes them (one program call per step of a step loop, not two), and so does any
read of the state before it.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.sharding import Mesh

from mjxrunner import engine
from mjxrunner.doors import controls, layout, runner_io
from mjxrunner.engine import (
    backend,
    backends,
    checks,
    deprecated,
    health,
    native,
    params,
    sharding,
    statevec,
)
from mjxrunner.engine import guards as guards_  # the constructor's ``guards`` argument shadows it
from mjxrunner.engine import options as options_
from mjxrunner.engine.models import load_any
from mjxrunner.engine.options import Options
from mjxrunner.engine.packing import Held, Layout, compiled, packer, unpacker
from mjxrunner.engine.sharding import host_copy
from mjxrunner.engine.worlds import world_mask

_GROUPS: dict[str, Any] = {}
"""What :mod:`.group_runner` registers when it loads (``"runner"``: ``GroupRunner``)."""


def register_groups(group_runner: type) -> None:
    """Lets :meth:`MultiEnvRunner.from_groups` build ``group_runner`` objects."""
    _GROUPS["runner"] = group_runner


def _set_ctrl(ctrl, mask, values):
    # Only ctrl goes in and out: passing the whole state costs ~0.4 ms of per-leaf
    # dispatch per call, as much as a step of hundreds of cartpoles.
    return jnp.where(mask[:, None], values, ctrl)


def _stepped(eng, scratch, dt, substeps, collide):
    """``engine.step`` of ``eng``, returning only what it changed: ``(model or
    None, state)``, the model None unless the step redraws parameters (each result
    is a buffer per leaf; the model's cost 0.3 ms a step at 256 cartpoles).
    ``scratch`` is the door's double buffer, donated so the new state may take its
    memory; it is never read."""
    del scratch
    new = engine.step(eng, dt, substeps, collide)
    return (new.model if engine.redraws_in_step(eng.config) else None), new.state


def _for_step(eng: engine.Engine) -> engine.Engine:
    """``eng`` without the parts a step does not read (each argument leaf costs host
    time too): the snapshot, and the default model unless the step redraws."""
    redraws = engine.redraws_in_step(eng.config)
    return eng.replace(default=None, default_model=eng.default_model if redraws else None)


def _rolled(eng, actions_or_policy, n_steps, dt, substeps, collide, scratch):
    """``engine.rollout`` of ``eng``: ``(state, trajectory)``; ``scratch`` as in
    :func:`_stepped`."""
    del scratch
    new, trajectory = engine.rollout(eng, actions_or_policy, n_steps, dt, substeps, collide)
    return new.state, trajectory


def _parts(eng: engine.Engine) -> tuple[Any, Any]:
    """``(model, state)``: what a reset or a redraw changes."""
    return eng.model, eng.state


def _randomized(eng, mask):
    """``engine.randomize`` of ``eng``: ``(model, state)``."""
    return _parts(engine.randomize(eng, mask))


# Static and donated arguments by name: JAX finds their positions in the signatures.
_advance = jax.jit(
    _stepped, static_argnames="substeps", donate_argnames="scratch", keep_unused=True
)
_roll = {  # a policy is a function, so it is static: one compile per policy object
    policy: jax.jit(
        _rolled,
        static_argnames=("n_steps", "substeps") + (("actions_or_policy",) if policy else ()),
        donate_argnames="scratch",
        keep_unused=True,
    )
    for policy in (False, True)
}
_reset = jax.jit(engine.reset, static_argnames="update_fk")
_get_state = jax.jit(statevec.get_state, static_argnames=("config", "spec"))
_set_state = jax.jit(
    statevec.set_state, static_argnames=("config", "spec", "update_fk"), donate_argnames="state"
)
_redraw = jax.jit(_randomized)
_contact_count = jax.jit(engine.contact_count, static_argnames="config")
_set_ctrl_fn = jax.jit(_set_ctrl, donate_argnames="ctrl")
_set_flags = jax.jit(
    lambda state, te, tr: state.replace(terminated=te, truncated=tr), donate_argnames="state"
)
_copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))


def _packed_advance(config, model_layout: Layout, layout: Layout, substeps: int):
    """``jit`` of :func:`engine.step` on packed buffers: ``(model buffers, ref,
    state buffers, scratch buffers, dt, collide, mask, controls) -> new state
    buffers``, the scratch donated; the controls of the worlds in ``mask`` are written
    first (what ``set_actions`` left for the step: ``MultiEnvRunner._write_ctrl``).
    For steps that leave the model as it is (no redraw in the step)."""

    def advance(model_buffers, ref, buffers, scratch, dt, collide, mask, controls):
        model, unpacked = model_layout.unflatten(model_buffers), layout.unflatten(buffers)
        state = unpacked.replace(ctrl=_set_ctrl(unpacked.ctrl, mask, controls))
        # Impl "c" reads the state and model from their buffers and writes the new
        # state into the scratch buffers, in place.
        placement = native.Placement.of(
            layout, scratch, state, (buffers, unpacked), (model_layout, model_buffers, model)
        )
        with native.placing(placement):
            eng = engine.Engine(config, model, None, state, None, ref)
            new = engine.step(eng, dt, substeps, collide).state
        return layout.pack(jax.tree.leaves(new), placement.out, placement.values)

    key = ("runner.advance", config, model_layout, layout, substeps)
    return compiled(key, lambda: jax.jit(advance, donate_argnames="scratch", keep_unused=True))


def _packed_ctrl(layout: Layout, leaf: int):
    """``jit`` of a masked write of the controls (leaf ``leaf``) into packed state
    buffers (donated); returns the new buffers and the new controls."""

    def write(buffers, mask, values):
        ctrl = jnp.where(mask[:, None], values, layout.unpack(buffers, leaf, leaf + 1)[0])
        return layout.write(buffers, leaf, ctrl), ctrl

    key = ("runner.ctrl", layout, leaf)
    return compiled(key, lambda: jax.jit(write, donate_argnames="buffers"))


class MultiEnvRunner(layout.Layout, controls.Controls):  # layouts: display metadata, never physics
    """``num_envs`` MuJoCo worlds stepped together on MJX.

    Args:
      model: an ``MjModel``, a name from ``models/`` (see ``mjxrunner.models.list()``),
        a path to an MJCF/MJB file, or MJCF text.
      num_envs: number of worlds.
      seed: seeds the per-world RNG keys: an int in ``[0, 2**32)``, or ``[0, 2**63)``
        with ``jax_enable_x64`` (what ``jax.random.key`` takes whole).
      keyframe: name or index of a keyframe to start from (None: ``qpos0``).
      devices: None (one device), or devices to split the worlds across; see
        :meth:`shard`.
      options: the engine's :class:`~mjxrunner.engine.Options` (None: the runner's
        defaults, ``impl="jax"``, ``overflow_policy="raise"``,
        ``instability_policy="truncate"``, ...).
      **kwargs: any option of ``Options`` by name (``impl="warp"``, ``naconmax=``,
        ``max_qvel=``, ``guards=``, ``latency=``, ``pushes=``,
        ``collision_enabled=``, ...), changing ``options``. ``runner.overflow``
        always holds the last step's Warp overflow bits.

    Guards with policy ``"warn"`` or ``"raise"`` read their flags back after every
    step. The state after construction (and after :meth:`build_default`) is the
    default snapshot that resets restore.
    """

    def __init__(
        self,
        model: mujoco.MjModel | str | os.PathLike,
        num_envs: int,
        *,
        seed: int = 0,
        keyframe: int | str | None = None,
        devices: Any = None,
        options: Options | None = None,
        **kwargs: Any,
    ):
        num_envs = checks.count(num_envs, "num_envs")
        seed = checks.seed(seed)
        opts = options_.of(options_.RUNNER, options, **kwargs)
        backend.check_impl(opts.impl)
        mj_model = copy.copy(load_any(model))  # later edits of the caller's model stay there
        # The runner passes its contact switch to each step as values (collide flags),
        # so switching never recompiles; its engine's config keeps contacts on.
        self._collisions = opts.collision_enabled
        config = engine.configure(mj_model, num_envs, opts.replace(collision_enabled=True))
        self._mj_model = mj_model
        self._set_engine(engine.build(mj_model, config, seed=seed, keyframe=keyframe))
        self._origins, self._layout = layout.linear(num_envs, 0.0), "linear"
        if devices is not None:
            self.shard(devices)

    def _set_engine(self, eng: engine.Engine) -> None:
        # The engine without its state, which is held apart: packed, as a pytree, or both.
        self._frame, self._state = eng.replace(state=None), Held(eng.state)
        self._spare = Held(_copy(eng.state))  # the scratch buffer: the state of before
        self._state_layout: Layout | None = None  # of the last packed state
        self._controls: tuple[np.ndarray, np.ndarray] | None = None  # see _write_ctrl
        self._unset: tuple[np.ndarray, np.ndarray] | None = None  # see _no_controls
        self._model_pack: tuple | None = None  # (model, its layout, its buffers)
        self._advancers: dict[int, Any] = {}  # substeps -> packed step (layouts, config)
        self._host_guards = bool(guards_.host_policies(eng.config.guards))
        chosen = eng.config.backend
        limit = chosen.physics.pack_limit(
            eng.default_model.tree, chosen.device.platform, self.mesh is not None
        )
        small = limit is None or sum(x.nbytes for x in jax.tree.leaves(eng.state)) <= limit
        self._packs = small and not self._host_guards

    # --- the engine, packed or not ---------------------------------------------------
    #
    # ``_frame`` is the engine without its state; ``_state`` holds the state, as
    # packed buffers after a packed step, as a pytree once something reads it.
    # ``_controls`` are controls set on packed buffers and not written yet: the next
    # step writes them, or the next read of the state does.

    @property
    def _eng(self) -> engine.Engine:
        if self._controls is not None:
            self._flush_controls()
        return self._frame.replace(state=self._state.tree)

    @_eng.setter
    def _eng(self, eng: engine.Engine) -> None:
        if not self._state.holds(eng.state):
            self._state.set(eng.state)  # a new state: packed again by the next step
            self._controls = None  # it was made from a read, which wrote them
        if eng.config is not self._frame.config:
            self._advancers = {}  # the packed steps close over the config
        self._frame = eng.replace(state=None)

    @property
    def _scratch(self) -> Any:
        return self._spare.tree

    @_scratch.setter
    def _scratch(self, state: Any) -> None:
        self._spare.set(state)

    def _on_device(self, tree: Any) -> Any:
        """``tree`` with every leaf a placed ``jax.Array`` (an engine given by hand may
        hold NumPy leaves), as packing needs."""
        if all(isinstance(x, jax.Array) for x in jax.tree.leaves(tree)):
            return tree
        return self._put(tree)

    def _packed_state(self) -> tuple[Layout, tuple]:
        """The current state's layout and buffers (packing the pytree if needed)."""
        held = self._state
        if held.buffers is None:
            state = self._on_device(held.tree)
            apart = self._frame.config.backend.physics.written_leaves(state)
            layout = Layout.of(state, apart=apart)
            new = layout != self._state_layout
            if new:
                self._state_layout, self._advancers = layout, {}
                self._write_packed_ctrl = _packed_ctrl(layout, layout.index(state, "ctrl"))
            held.pack(self._state_layout, state)
            if new:  # compiled with the step, not at the first read after it
                unpacker(layout)(held.buffers)
        return held.layout, held.buffers

    def _packed_model(self) -> tuple[Layout, tuple]:
        """The model's layout and buffers, packed once per model."""
        model = self._frame.model
        if self._model_pack is None or self._model_pack[0] is not model:
            placed = self._on_device(model)
            first = self._frame.config.backend.physics.param_leaves(placed)
            layout = Layout.of(placed, first)
            if self._model_pack is None or layout != self._model_pack[1]:
                self._advancers = {}
            else:
                layout = self._model_pack[1]
            self._model_pack = (model, layout, packer(layout)(jax.tree.leaves(placed)))
        return self._model_pack[1], self._model_pack[2]

    # --- devices --------------------------------------------------------------------

    @property
    def mesh(self) -> Mesh | None:
        """The ``"worlds"`` mesh the runner is sharded over (None: one device)."""
        return self._frame.config.mesh

    def shard(self, devices: Any) -> None:
        """Splits the worlds across devices (of one or several processes).

        Args:
          devices: a ``jax.sharding.Mesh`` with the single axis ``"worlds"``, an int
            (the first n devices), a list of devices, or ``"all"``.

        World-indexed leaves are partitioned along ``"worlds"`` and shared leaves
        replicated (both from the world-axis rule); every compiled function then runs
        under ``shard_map``, each device stepping its own worlds without
        communication. ``num_envs`` must be divisible by the number of devices. With
        impl "warp" each device keeps its own contact pool of ``naconmax``.
        """
        self._set_engine(engine.place(self._eng, sharding.make_mesh(devices)))

    def _put(self, tree: Any) -> Any:
        """Places a tree like the runner's buffers (one device, or the mesh)."""
        return engine.put(tree, self._frame.config)

    # --- properties -------------------------------------------------------------

    model = property(lambda self: self._frame.model.tree, doc="The device ``mjx.Model``.")
    mj_model = property(lambda self: self._mj_model, doc="The host ``MjModel`` built from.")

    @property
    def engine(self) -> engine.Engine:
        """The :class:`~mjxrunner.engine.Engine`: config, models, state, snapshot."""
        return self._eng

    @engine.setter
    def engine(self, new: engine.Engine) -> None:
        # For shells over several runners (the group runner): the same configuration,
        # so the scratch buffer and the compiled functions still fit.
        if not isinstance(new, engine.Engine) or new.config != self._frame.config:
            raise ValueError("a runner's engine can only be replaced by one of the same config")
        self._eng = new

    state = property(lambda self: self._eng.state, doc="The current ``RunnerState``.")
    _default = property(lambda self: self._eng.default)
    data = property(lambda self: self._eng.state.data, doc="Current batched ``mjx.Data``.")
    next_data = property(
        lambda self: self._scratch.data, doc="The scratch buffer: the state before the step."
    )
    control = property(lambda self: self._eng.state.ctrl, doc="``(num_envs, nu)`` controls.")
    num_envs = property(lambda self: self._frame.num_envs)
    impl = property(lambda self: self._frame.config.backend.impl)
    device = property(lambda self: self._frame.config.backend.device)
    capacities = property(lambda self: self._frame.config.backend.caps, doc="Warp sizes.")

    @property
    def options(self) -> Options:
        """The engine's :class:`~mjxrunner.engine.Options` (capacities resolved)."""
        return self._frame.config.options.replace(collision_enabled=self._collisions)

    overflow_policy = property(lambda self: self.options.overflow_policy)
    instability_policy = property(lambda self: self.options.instability_policy)
    guards = property(lambda self: self._frame.config.guards, doc="The guards of every step.")
    latency = property(
        lambda self: self._frame.config.latency, doc="The action latency (None: none)."
    )

    @property
    def pushes(self) -> Any:
        """The random pushes (:class:`mjxrunner.engine.events.Pushes`; None: none)."""
        plan = self._frame.config.pushes
        return None if plan is None else plan.pushes

    collision_enabled = property(
        lambda self: self._collisions,
        doc="Whether steps collide (``set_collision_enabled``; ``step(collide=)`` per step).",
    )

    max_qvel = property(
        lambda self: self.options.max_qvel,
        doc="The ``|qvel|`` above which a world counts as unstable.",
    )

    episode_length = property(lambda self: host_copy(self.state.episode_length))
    terminated = property(lambda self: host_copy(self.state.terminated))
    truncated = property(lambda self: host_copy(self.state.truncated))
    overflow = property(
        lambda self: host_copy(self.state.overflow),
        doc="``(num_envs,)`` Warp capacity-overflow bits of the last step (0 for jax).",
    )

    @property
    def backend_info(self) -> dict[str, Any]:
        """Versions, impl, device and dtypes, to record with every result."""
        return self._frame.config.backend.info()

    @property
    def health(self) -> health.Report:
        """NumPy snapshot of every guard's flags and counts and the reset counts."""
        return health.Report.from_state(self.state)

    def contact_count(self) -> np.ndarray:
        """``(num_envs,)`` NumPy count of active contacts per world (both impls)."""
        return host_copy(_contact_count(self._frame.config, self.data))

    def to_numpy(self, tree: Any) -> Any:
        """NumPy copies of a tree of the runner's arrays, whole even when sharded over
        devices or processes (every process must call it together)."""
        return jax.tree.map(host_copy, tree)

    def action_dim(self) -> int:
        """Number of controls per world (``nu``)."""
        return self._mj_model.nu

    # --- controls and flags -----------------------------------------------------

    def _write_ctrl(self, mask: np.ndarray, full: np.ndarray) -> None:
        if self._state.buffers is not None:
            # Packed: kept for the next step's program to write, which saves a
            # program call per step (the step loop's set_actions + step).
            if self._controls is not None:
                before, values = self._controls
                full = np.where(mask[:, None], full, values)
                mask = mask | before
            self._controls = (mask, full)
            return
        state = self.state
        self._eng = self._eng.replace(
            state=state.replace(ctrl=_set_ctrl_fn(state.ctrl, mask, full))
        )

    def _no_controls(self) -> tuple[np.ndarray, np.ndarray]:
        """A packed step's controls when none were set: no world's (one program
        serves both)."""
        n, width = self.num_envs, self.action_dim()
        cached = self._unset
        if cached is None or cached[1].shape != (n, width):
            dtype = backend.float_dtype()
            cached = self._unset = (np.zeros((n,), bool), np.zeros((n, width), dtype))
        return cached

    def _flush_controls(self) -> None:
        """Writes the controls kept by ``_write_ctrl`` into the packed buffers (and
        the state, if current)."""
        (mask, full), self._controls = self._controls, None
        held = self._state
        buffers, ctrl = self._write_packed_ctrl(held.buffers, mask, full)
        tree = held.peek  # the pytree, if at hand: it gets the controls too
        held.set_packed(held.layout, buffers, None if tree is None else tree.replace(ctrl=ctrl))

    def set_done_flags(self, terminated: Any, truncated: Any) -> None:
        """Replaces the ``(num_envs,)`` bool ``terminated`` and ``truncated`` flags."""
        n = (self.num_envs,)
        terminated = checks.bool_vector(terminated, "terminated", n)
        truncated = checks.bool_vector(truncated, "truncated", n)
        self._eng = self._eng.replace(state=_set_flags(self.state, terminated, truncated))

    # --- stepping -----------------------------------------------------------------

    def step(self, dt: float | None = None, substeps: int = 1, collide: Any = None) -> None:
        """Advances every world by ``dt`` in ``substeps`` solver calls.

        Args:
          dt: step length in seconds; None means ``substeps * timestep``.
          substeps: solver calls per step, each of ``dt / substeps`` seconds. Each
            distinct value compiles once.
          collide: None (:attr:`collision_enabled`), or a bool or ``(num_envs,)``
            bool for this step only: worlds with False ignore every contact (see
            :func:`mjxrunner.engine.core.without_contacts`). Values never recompile.
        """
        substeps = checks.count(substeps, "substeps")
        if dt is not None:
            dt = checks.positive_scalar(dt, "dt", backend.float_dtype())
        collide = self._collide(collide)
        if self._packs and not engine.redraws_in_step(self._frame.config):
            return self._step_packed(dt, substeps, collide)
        eng = self._eng
        model, new = _advance(_for_step(eng), self._scratch, dt, substeps, collide)
        self._swap(eng.replace(model=eng.model if model is None else model, state=new))

    def block_until_ready(self) -> MultiEnvRunner:
        """Waits until every step dispatched so far is done, reading nothing back.

        A step returns once it is dispatched, before its results exist (JAX's
        asynchronous dispatch). Call this to time a loop, or to keep a loop in step
        with the physics, without the cost of reading the state. Returns the runner.
        """
        jax.block_until_ready(self._state.arrays())
        return self

    def _step_packed(self, dt: Any, substeps: int, collide: Any) -> None:
        """A step on packed buffers; the old ones become the scratch buffers."""
        model_layout, model_buffers = self._packed_model()
        layout, buffers = self._packed_state()
        advance = self._advancers.get(substeps)
        if advance is None:
            advance = _packed_advance(self._frame.config, model_layout, layout, substeps)
            self._advancers[substeps] = advance
        spare = self._spare
        if spare.buffers is not None and spare.layout is layout:
            scratch = spare.buffers
        else:  # buffers of the same signature: the step compiles once, not twice
            scratch = _copy(buffers)
        controls, self._controls = self._controls or self._no_controls(), None
        new = advance(model_buffers, self._frame.ref, buffers, scratch, dt, collide, *controls)
        # The scratch is the old buffers (donated by the next step); its pytree is
        # unpacked only if next_data is read. The pytree of before goes with them,
        # not a third copy of the state.
        spare.set_packed(layout, buffers)
        self._state.set_packed(layout, new)

    def _collide(self, collide: Any) -> np.ndarray | None:
        """The validated ``collide`` flags of a step (None: the runner's setting), as
        ``(num_envs,)`` bool, or None where every world collides: the step of a
        runner that never switches contacts off."""
        n = self.num_envs
        if collide is None:
            collide = self._collisions
        if isinstance(collide, (bool, np.bool_)):
            if collide:
                return None
            flags = np.full((n,), False)
        else:
            flags = checks.bool_vector(collide, "collide", (n,))
        if flags.all():
            return None
        return self._put(flags) if self.mesh is not None else flags

    def set_collision_enabled(self, enabled: bool) -> None:
        """Switches contacts on or off in every world for the steps to come.

        Off, each contact is kept out of the solver by its margin (see
        :func:`mjxrunner.engine.core.without_contacts`): nothing in the model or state
        changes and resets keep the setting. A value passed to every step: switching
        never recompiles (the first step with contacts off compiles once).
        """
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"enabled must be a bool, got {enabled!r}")
        self._collisions = bool(enabled)

    def _swap(self, new: engine.Engine) -> None:
        """Makes ``new`` current, the old state the scratch buffer, then applies the
        host policies (which may roll back to the old state and raise)."""
        before = self._install(new)
        found = self._found(before)
        if found is not None:
            guard, worlds = found
            raise guard.error(guard.message(worlds, self._roll_back(before)))

    def _install(self, new: engine.Engine) -> engine.Engine:
        """Makes ``new`` current and the old state the scratch buffer; returns the
        engine of before."""
        before = self._eng
        self._scratch, self._eng = before.state, new
        return before

    def _found(self, before: engine.Engine) -> tuple | None:
        """The first ``"warn"``/``"raise"`` guard the last step tripped, with its
        worlds (``"warn"`` has warned already), or None."""
        if not self._host_guards:
            return None
        return engine.check_guards(self._frame.config, before.state, self._eng.state)

    def _roll_back(self, before: engine.Engine) -> Any:
        """Back to the state before the step (the scratch buffer still holds it);
        returns the failed state. Its flags and counts stay readable (copied: the
        buffer is reused)."""
        failed = self._eng.state
        kept = _copy((failed.overflow, failed.tripped, failed.health))
        rolled = before.state.replace(overflow=kept[0], tripped=kept[1], health=kept[2])
        self._scratch, self._eng = failed, before.replace(state=rolled)
        return failed

    def rollout(
        self,
        actions_or_policy: Any,
        n_steps: int,
        dt: float | None = None,
        substeps: int = 1,
        collide: Any = None,
    ) -> Any:
        """Runs ``n_steps`` steps in one compiled ``lax.scan`` (see :func:`core.rollout`).

        Args:
          actions_or_policy: ``(n_steps, num_envs, nu)`` finite controls, or a
            function ``policy(state, keys) -> (num_envs, nu)`` (compiled once per
            function object).
          n_steps: number of steps.
          dt: as in :meth:`step`.
          substeps: as in :meth:`step`.
          collide: as in :meth:`step`, for every step of the rollout.

        Returns:
          The trajectory ``(qpos (n_steps, num_envs, nq), qvel (n_steps, num_envs, nv))``
          as device arrays. The runner ends in the final state, ``next_data`` holds
          the state before the rollout.
        """
        n_steps = checks.count(n_steps, "n_steps")
        substeps = checks.count(substeps, "substeps")
        if dt is not None:
            dt = checks.positive_scalar(dt, "dt", backend.float_dtype())
        collide = self._collide(collide)
        fn = _roll[callable(actions_or_policy)]
        if not callable(actions_or_policy):
            shape = (n_steps, self.num_envs, self.action_dim())
            actions_or_policy = checks.finite_array(
                actions_or_policy, "actions", shape, backend.float_dtype()
            )
        eng = self._eng
        parts = eng.replace(default_model=None, default=None, ref=None)  # what it reads
        args = (actions_or_policy, n_steps, dt, substeps, collide, self._scratch)
        new, trajectory = fn(parts, *args)
        self._swap(eng.replace(state=new))
        return trajectory

    # --- resets -------------------------------------------------------------------

    def reset(self, mask: Any = None, update_fk: bool = True) -> None:
        """Restores worlds from the default snapshot (see DESIGN's reset rules).

        Args:
          mask: None restores everything (RNG excepted). A ``(num_envs,)`` bool mask
            restores the world-indexed leaves of the selected worlds and leaves
            shared leaves alone; with shape ``(num_envs + 1,)`` the last entry also
            restores the shared leaves whole.
          update_fk: recompute the restored worlds' kinematics (``xpos``, ``xquat``,
            ``geom_xpos``, ``site_xpos``, ``subtree_com``, ...) with their restored
            parameters, so they match ``qpos`` even after a parameter change since
            the snapshot. False restores the snapshot's values as they are.

        The restored worlds start new episodes: delays and push times are drawn
        anew from their streams.
        """
        n = self.num_envs
        if mask is not None:
            mask = checks.bool_vector(mask, "mask", (n, n + 1))
        update_fk = checks.flag(update_fk, "update_fk")
        self._eng = _reset(self._eng, mask, None, update_fk)

    def reset_all(self, update_fk: bool = True) -> None:
        """Restores every world and every shared leaf; the RNG keeps advancing."""
        self.reset(None, update_fk)

    def reset_envs(self, env_ids: Any, update_fk: bool = True) -> None:
        """Restores the world-indexed leaves of ``env_ids``; shared leaves untouched."""
        self.reset(checks.ids_mask(env_ids, self.num_envs), update_fk)

    # --- MuJoCo state vectors -----------------------------------------------------------

    def get_state(
        self, spec: Any = mujoco.mjtState.mjSTATE_FULLPHYSICS, env_ids: Any = None
    ) -> np.ndarray:
        """Each world's MuJoCo state vector, as ``mujoco.mj_getState`` gives it.

        Args:
          spec: a ``mujoco.mjtState`` (``mjSTATE_PHYSICS``, ``mjSTATE_FULLPHYSICS``,
            ``mjSTATE_QPOS``, ...) or an int bitmask of them.
          env_ids: None (every world) or unique world indices.

        Returns:
          NumPy ``(num_envs, mj_stateSize(m, spec))``, or ``(len(env_ids), ...)``
          rows in the order given; float64 and exact on impl "c" (MuJoCo's own
          state), else the data's float dtype. ``mjSTATE_CTRL`` reads the controls set with
          :meth:`set_actions` (the command, before any latency).
        """
        spec = statevec.state_spec(self._mj_model, spec)
        ids = None if env_ids is None else checks.env_ids(env_ids, self.num_envs)
        eng = self._eng
        bits = eng.config.backend.physics.exact_bits(eng.state.data)
        if bits is not None:  # MuJoCo's own float64 state, exact
            ctrl = host_copy(eng.state.ctrl)
            out = statevec.exact_state(self._mj_model, host_copy(bits), ctrl, spec)
        else:
            out = host_copy(_get_state(eng.config, eng.model, eng.state, spec))
        return out if ids is None else out[ids]

    def set_state(
        self,
        states: Any,
        env_ids: Any = None,
        spec: Any = mujoco.mjtState.mjSTATE_FULLPHYSICS,
        update_fk: bool = True,
    ) -> None:
        """Sets worlds from MuJoCo state vectors (``mujoco.mj_setState``'s layout).

        Args:
          states: ``(num_envs, size)`` with ``env_ids=None``, else
            ``(len(env_ids), size)``, ``size = mj_stateSize(m, spec)``: finite
            numbers, e.g. rows of :meth:`get_state` or of native ``mj_getState``.
          env_ids: None (every world) or unique world indices.
          spec: as in :meth:`get_state`.
          update_fk: recompute those worlds' kinematics from the new ``qpos``
            (``mj_setState`` does not; quaternions come back normalized).

        On impl "c" MuJoCo's float64 state takes the rows' values unrounded.

        ``mjSTATE_CTRL`` also sets the controls. Counters, flags, latency queues and
        push timers are not part of a MuJoCo state and are left as they are.
        """
        spec = statevec.state_spec(self._mj_model, spec)
        update_fk = checks.flag(update_fk, "update_fk")
        size = mujoco.mj_stateSize(self._mj_model, spec)
        dtype = backend.float_dtype()
        mask, full = checks.world_rows(states, "states", env_ids, self.num_envs, size, dtype)
        eng = self._eng
        physics, exact = eng.config.backend.physics, None
        if physics.physics_dtype is not None:  # its exact state takes the rows' own values
            _, rows = checks.world_rows(states, "states", env_ids, self.num_envs, size, np.float64)
            exact = physics.exact_rows(rows)
        state = _set_state(eng.config, eng.model, eng.state, full, mask, spec, update_fk, exact)
        self._eng = eng.replace(state=state)

    def build_default(self) -> None:
        """Makes the current state and model the snapshot that resets restore."""
        eng = self._eng
        self._eng = eng.replace(default=jax.jit(engine.cleared)(eng.state), default_model=eng.model)

    # --- checkpoints (the file: mjxrunner.doors.runner_io) --------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Writes the whole runner to ``path`` atomically (see :mod:`.runner_io`)."""
        runner_io.save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs: Any) -> MultiEnvRunner:
        """A runner rebuilt from a checkpoint; it continues the saved run bit for bit.

        Keyword arguments as :func:`mjxrunner.doors.runner_io.load_runner`
        (``num_envs``, ``model``, ``impl``, ``device``, ``devices``,
        ``user_template``, ``guards``).
        """
        runner, eng, origins, layout_name = runner_io.load_runner(path, runner_cls=cls, **kwargs)
        runner._set_engine(eng)
        runner._origins, runner._layout = origins, layout_name
        return runner

    def restore(self, path: str | os.PathLike, *, user_template: Any = None) -> None:
        """Replaces this runner's whole state by a checkpoint's, in place.

        The checkpoint must hold the same ``num_envs``, impl and a model of the same
        structure; otherwise ``CheckpointError`` is raised and nothing changes. The
        runner keeps its device, mesh and extra guards.
        """
        standard = {g.name for g in guards_.standard()}
        new = type(self).load(
            path,
            num_envs=self.num_envs,
            model=self._mj_model,
            impl=self.impl,
            device=self.device,
            devices=self.mesh,
            user_template=user_template,
            guards=tuple(g for g in self.guards if g.name not in standard),
        )
        self.__dict__.update(new.__dict__)

    # --- per-world parameters and randomization ------------------------------------

    def param(self, path: str) -> np.ndarray:
        """NumPy copy of model field ``path``: core shape, or ``(num_envs, *core)``."""
        return host_copy(params.get_leaf(self.model, path))

    def set_param(self, path: str, values: Any, env_ids: Any = None) -> None:
        """Sets a model field for all worlds, or per world.

        Args:
          path: an ``mjx.Model`` array field, e.g. ``"opt.gravity"``, ``"body_mass"``,
            ``"geom_friction"``, ``"dof_damping"``, ``"actuator_gainprm"``,
            ``"opt.timestep"``. Static (structural) fields are refused.
          values: with ``env_ids=None``, the field's core shape (shared by all worlds:
            demotes a per-world field) or ``(num_envs, *core)`` (one value per world:
            promotes it). With ``env_ids``, ``(len(env_ids), *core)`` or the core shape
            (the same value for each of those worlds); the other worlds keep theirs.
          env_ids: None or unique world indices.

        Changing the shape signature (promotion, demotion) recompiles the step once;
        changing values never recompiles. Mass, inertia and armature changes also
        rebuild the constants MuJoCo derives from them (see ``mjxrunner.params``).
        """
        new = params.new_values(self.model, path, values, env_ids, self.num_envs)
        self._write_params({path: new})

    def _write_params(self, updates: dict[str, np.ndarray]) -> None:
        eng = self._eng
        model, ref = engine.write_params(eng.config, eng.model, eng.ref, self._mj_model, updates)
        self._eng = eng.replace(model=model, ref=ref)

    def update_model(self, source: mujoco.MjModel | None = None, *, fields: Any = None) -> None:
        """Copies new parameter values to the device model: the one way host edits
        reach it.

        Args:
          source: a host ``MjModel`` of the same structure (e.g. ``runner.mj_model``
            after editing it). Its derived constants are recomputed
            (``mj_setConst``) on a copy first; every device field becomes shared
            again, per-world values included.
          fields: or a mapping ``{path: value}`` of core-shaped values for all worlds,
            applied together (``"opt.gravity"``, ``"body_mass"``, ...).

        A structural change (sizes, static fields such as joint types or geom types)
        raises ``ValueError``: build a new runner. The default snapshot is not
        changed: call :meth:`build_default` to make the update survive resets.
        """
        if (source is None) == (fields is None):
            raise TypeError("update_model takes either a host MjModel or fields={path: value}")
        if fields is not None:
            self._write_params(params.field_values(self.model, fields))
            return
        self._mj_model, self._eng = engine.with_host_model(self._eng, source)

    def set_gravity(self, gravity: Any, world: int | None = None) -> None:
        """Sets gravity ``(3,)`` for every world (shared) or for world ``world`` only.

        Setting one world promotes gravity to per-world; setting all demotes it.
        """
        g = checks.finite_array(gravity, "gravity", (3,), backend.float_dtype())
        if np.linalg.norm(g) > 1e3:
            raise ValueError(f"gravity must have norm <= 1000 m/s^2, got {np.linalg.norm(g):.3g}")
        if world is None:
            self.set_param("opt.gravity", g)
        else:
            world = checks.env_id(world, self.num_envs, "world (env_ids)")
            self.set_param("opt.gravity", g[None], env_ids=[world])

    def set_randomization(
        self, terms: Any, *, on_reset: bool = True, every_n_steps: int = 0, at_startup: bool = True
    ) -> None:
        """Declares randomized parameters (``mjxrunner.params.Term``).

        Args:
          terms: a sequence of ``Term``; empty clears randomization.
          on_reset: redraw the parameters of the worlds a reset selects.
          every_n_steps: if > 0, redraw a world's parameters every that many steps
            of its episode, inside the compiled step.
          at_startup: redraw every world now.

        Each draw starts from the default model (``build_default`` moves it), so
        values never drift. Recompiles the step and reset once.
        """
        eng = self._eng
        rand = params.check_randomization(eng.default_model.tree, terms, on_reset, every_n_steps)
        if not isinstance(at_startup, bool):
            raise TypeError("on_reset and at_startup must be bools")
        paths = {t.path for t in rand.terms} if rand else set()
        ref = engine.with_ref(eng.config, eng.ref, self._mj_model, paths)
        self._eng = eng.replace(config=eng.config.replace(randomization=rand), ref=ref)
        if rand is not None and at_startup:
            self.randomize()

    def set_latency(self, latency: Any) -> None:
        """Sets the action latency (see :class:`mjxrunner.engine.events.Latency`).

        Args:
          latency: a ``Latency``, an int (a fixed delay in control steps) or None
            (off: no queue, the step without latency).

        Every world draws its delay now, as on a reset, and its queue holds its
        current control. Changes the state's structure: compiles the step once.
        """
        self._set_engine(engine.with_events(self._eng, latency, self.pushes, self._mj_model))

    def set_pushes(self, pushes: Any) -> None:
        """Sets the random pushes (see :class:`mjxrunner.engine.events.Pushes`; None: off).

        Every world draws the steps to its first push now, as on a reset. Pushes
        compose with randomization terms, latency and resets. Compiles the step once.
        """
        self._set_engine(engine.with_events(self._eng, self.latency, pushes, self._mj_model))

    def randomize(self, env_ids: Any = None) -> None:
        """Redraws the declared randomized parameters of all worlds or of ``env_ids``."""
        eng = self._eng
        if eng.config.randomization is None:
            raise ValueError("no randomization declared: call set_randomization(terms) first")
        mask = checks.ids_mask(env_ids, self.num_envs)
        model, state = _redraw(eng.replace(default=None), mask)
        self._eng = eng.replace(model=model, state=state)

    # --- user state -----------------------------------------------------------------

    @property
    def user_state(self) -> Any:
        """The user's pytree attached with :meth:`set_user_state` (None if none)."""
        return self.state.user

    def set_user_state(self, tree: Any) -> None:
        """Attaches a pytree of the user's own to every world's state.

        Leaves of dataclasses declared with ``world_field(core_ndim)`` are per world
        when they carry the extra leading ``num_envs`` axis; undeclared leaves (plain
        dicts of arrays) are shared. It follows resets by the world-axis rule and
        becomes part of the default snapshot now.
        """
        tree = self._put(tree)
        for leaf, is_world in zip(
            jax.tree.leaves(tree), jax.tree.leaves(world_mask(tree)), strict=True
        ):
            if is_world and leaf.shape[0] != self.num_envs:
                raise ValueError(
                    f"a per-world user leaf must lead with num_envs={self.num_envs}, "
                    f"got shape {leaf.shape}"
                )
        eng = self._eng
        state = eng.state.replace(user=tree)
        self._set_engine(eng.replace(state=state, default=eng.default.replace(user=_copy(tree))))

    # --- rendering (mjxrunner.kit.render; copies one world to the host, never the batch) ---

    def render(
        self, world: int = 0, camera: Any = None, width: int = 320, height: int = 240
    ) -> np.ndarray:
        """``(height, width, 3)`` uint8 picture of one world; see :func:`render.render`."""
        from mjxrunner.kit import render

        return render.render(self, world, camera, width, height)

    @classmethod
    def from_groups(cls, groups: Any, **kwargs: Any) -> Any:
        """A :class:`~mjxrunner.doors.group_runner.GroupRunner`: worlds of several scenes
        (groups of one structure each) stepped together behind one world index.

        ``groups`` is a sequence of ``(model, num_envs)`` or ``(model, num_envs,
        options)``; keyword arguments (``impl``, ``seed``, ``devices``, ...) apply to
        every group. Example::

            runner = MultiEnvRunner.from_groups([("puck", 512), ("puck_blocks", 512)])
        """
        return _GROUPS["runner"](groups, **kwargs)

    def render_video(self, worlds: Any = (0,), n_steps: int = 100, **kwargs: Any) -> np.ndarray:
        """Steps and films worlds side by side; see :func:`render.render_video`."""
        from mjxrunner.kit import render

        return render.render_video(self, worlds, n_steps, **kwargs)

    def __repr__(self) -> str:
        return (
            f"MultiEnvRunner({self._mj_model.nq} dof model, num_envs={self.num_envs}, "
            f"impl={self.impl!r}, device={self.device})"
        )


# The one packing limit of every impl became each impl's (Physics.pack_limit); the
# old value is impl "c"'s where its results are copied. Setting it changes nothing.
__getattr__ = deprecated.module_getattr(
    __name__,
    {
        "PACK_LIMIT": (
            "each impl's physics gives its limit, Physics.pack_limit(model, platform, sharded)",
            backends.c.COPIED_PACK_LIMIT,
        )
    },
)
