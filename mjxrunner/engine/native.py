"""Impl ``"c"``: MuJoCo's own C engine under the engine's pure functions.

The worlds are stepped by :class:`mujoco.batch.Batch` (MuJoCo's thread pool over
``mjSTATE_INTEGRATION`` rows), called once per step from inside the compiled step
through an XLA FFI handler (:mod:`.native_ffi`; ``jax.pure_callback`` where it
cannot be built). Everything else (resets, guards, tasks, doors,
checkpoints, sharding over processes) sees an ordinary batched ``mjx.Data``:

* :class:`Data` is an ``mjx.Data`` whose ``_impl`` is :class:`DataC`. Its public
  fields are filled from the native step, in the dtype MJX would use (float32
  unless ``jax_enable_x64``).
* The physics state never passes through float32: ``DataC.state`` holds each
  world's ``mjSTATE_INTEGRATION`` vector as the bits of its float64 values
  (``(nstate, 2)`` uint32), so resets, ``where`` selects and checkpoints move it
  exactly. A state field of the public data (``qpos``, ``ctrl``, ...) that no
  longer equals the float32 rounding of its exact value was written by someone
  (a task's start, a reset noise, ``set_state``): that value is taken, widened.
* Model fields reach each world's native model the same way: a field equal to the
  float32 rounding of the host model's value keeps the exact value; another value
  (a per-world parameter, a randomized one, ``dt``, ``collide``) is written into
  the batch's per-simulation copy of that field (``Batch.expand``).
* MuJoCo resets a diverging world by itself (``mjWARN_BADQACC``/``BADQPOS``/
  ``BADQVEL``). :attr:`DataC.diverged` marks the step where it happened, and the
  ``unstable`` guard reads it like a non-finite state.

A shell that keeps the state packed (:mod:`.packing`) hands the step its scratch
buffers (:class:`Placement`): the host call then writes its results into them in
place, where packing separate results would copy every leaf once more.

Contacts and constraints live in MuJoCo's arena, whose size changes from step to
step: the data carries the number of contacts per world (``DataC.ncon``), not the
pools. ``qfrc_inverse`` is kept as it was (a step does not compute it).

MuJoCo's profiling timers (``MjData.timer``) are off in a process that steps worlds
here (see :func:`set_timers`): ``import mujoco`` turns them on, and reading the clock
costs 10-15% of a small model's step, for timers no one reads in a batch.
"""

# No ``from __future__ import annotations``: MJX's dataclasses tell array fields
# from static ones by their annotation being ``jax.Array`` itself.
import copy
import ctypes
import dataclasses
import functools
import os
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import batch as mjbatch
from mujoco import mjx
from mujoco.mjx._src.dataclasses import PyTreeNode

from mjxrunner.engine import native_ffi  # the C++ handler of the host call
from mjxrunner.engine.models import HostModel

# mjx.Data fields that are components of each world's exact state row.
STATE_FIELDS = (
    "time",
    "qpos",
    "qvel",
    "act",
    "history",
    "qacc_warmstart",
    "plugin_state",
    "ctrl",
    "qfrc_applied",
    "xfrc_applied",
    "eq_active",
    "mocap_pos",
    "mocap_quat",
    "userdata",
)

# mjx.Data fields a step (or a forward pass) computes: copied out of the batch.
DERIVED_FIELDS = (
    "qacc",
    "act_dot",
    "sensordata",
    "xpos",
    "xquat",
    "xmat",
    "xipos",
    "ximat",
    "xanchor",
    "xaxis",
    "ten_length",
    "geom_xpos",
    "geom_xmat",
    "site_xpos",
    "site_xmat",
    "cam_xpos",
    "cam_xmat",
    "subtree_com",
    "cvel",
    "cdof",
    "cdof_dot",
    "qfrc_bias",
    "qfrc_gravcomp",
    "qfrc_fluid",
    "qfrc_passive",
    "qfrc_actuator",
    "actuator_force",
    "actuator_length",
    "qfrc_smooth",
    "qacc_smooth",
    "qfrc_constraint",
)

# Of those, what the position stage (kinematics, com, tendons, actuator lengths)
# computes: a forward pass to mjSTAGE_POS leaves the others as they were.
POSITION_FIELDS = frozenset(
    {
        "xpos",
        "xquat",
        "xmat",
        "xipos",
        "ximat",
        "xanchor",
        "xaxis",
        "ten_length",
        "geom_xpos",
        "geom_xmat",
        "site_xpos",
        "site_xmat",
        "cam_xpos",
        "cam_xmat",
        "subtree_com",
        "cdof",
        "actuator_length",
    }
)

# DataC fields MJX keeps in its impl data (same names as impl "jax"'s DataJAX).
IMPL_FIELDS = ("cacc", "cfrc_int", "cfrc_ext", "subtree_linvel", "subtree_angmom")

# The warnings MuJoCo raises when it resets a diverging world.
DIVERGENCE = (
    mujoco.mjtWarning.mjWARN_BADQACC.value,
    mujoco.mjtWarning.mjWARN_BADQPOS.value,
    mujoco.mjtWarning.mjWARN_BADQVEL.value,
)

DIVERGED_MARK = 1 << 30

ALIASES = {"c": "c", "cpp": "c"}

# Model fields whose change alters what mj_setConst derives (subtree masses,
# invweights, ... at qpos0): a world given new values is set up again by MuJoCo.
SETCONST_FIELDS = frozenset(
    {
        "body_mass",
        "body_inertia",
        "dof_armature",
        "body_pos",
        "body_quat",
        "body_ipos",
        "body_iquat",
        "qpos0",
    }
)

LAYOUT_NOTE = (
    "contacts and constraint rows stay in MuJoCo's arena: the data carries the "
    "contact count per world (_impl.ncon), not MJX's contact or efc arrays"
)


class DataC(PyTreeNode):
    """What impl "c" keeps beside MJX's public fields, per world.

    Attributes:
      state: ``(nstate, 2)`` uint32, the bits of the world's float64
        ``mjSTATE_INTEGRATION`` vector (the exact state; see the module notes).
      ncon: ``()`` int32, contacts of the last step or forward pass.
      diverged: ``()`` bool, MuJoCo reset this world in the last step because its
        state diverged (it never passes silently: the ``unstable`` guard reads it).
      cacc, cfrc_int, cfrc_ext: ``(nbody, 6)``; subtree_linvel, subtree_angmom:
        ``(nbody, 3)``. As on impl "jax", MuJoCo computes them only for models with
        sensors that need them; zeros otherwise.
    """

    state: jax.Array
    ncon: jax.Array
    diverged: jax.Array
    cacc: jax.Array
    cfrc_int: jax.Array
    cfrc_ext: jax.Array
    subtree_linvel: jax.Array
    subtree_angmom: jax.Array


class ModelC(PyTreeNode):
    """The host side of an impl "c" model: static. Hosts are shared by models of
    equal content (see :meth:`Host.of`), so identity is equality."""

    host: Any  # Host


class Data(mjx.Data):
    """An ``mjx.Data`` stepped by MuJoCo C (``_impl`` is :class:`DataC`)."""

    @property
    def impl(self) -> mjx.Impl:
        return mjx.Impl.CPP


class Model(mjx.Model):
    """An ``mjx.Model`` whose worlds step on MuJoCo C (``_impl`` is :class:`ModelC`)."""

    @property
    def impl(self) -> mjx.Impl:
        return mjx.Impl.CPP


def is_native(tree: Any) -> bool:
    """Whether ``tree`` is impl "c" data or model."""
    return isinstance(tree, (Data, Model))


def writes_in_place(model: Any) -> bool:
    """Whether the host calls of impl "c" ``model`` can write their results into
    buffers handed to them (the FFI handler can; ``jax.pure_callback`` cannot)."""
    return is_native(model) and model._impl.host.ffi


def default_threads() -> int:
    """The batch's threads by default: every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_mesh(mesh: Any) -> None:
    """Refuses a mesh with several devices of this process: impl "c" spreads its
    worlds over threads, not devices. Across processes (``jax.distributed``) each
    process steps its own worlds on its own threads, so one device per process is
    the layout."""
    here = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    if len(here) > 1:
        raise ValueError(
            f"impl 'c' steps the worlds of a process on its CPU threads, not on several "
            f"devices: the mesh has {len(here)} devices of this process. Drop devices= "
            "(and set num_threads= for more threads), or run one process per machine "
            "with jax.distributed, one device each"
        )


# --- building ---------------------------------------------------------------------


def put_model(
    m: mujoco.MjModel, device: jax.Device, num_threads: int, digest: str | None = None
) -> Model:
    """The model pytree of ``m`` for impl "c": MjModel's fields as arrays (the
    per-world parameters' home), and the host that steps the worlds. ``digest``:
    ``HostModel.of(m).digest`` where the caller has it (a robot's MJB is tens of MB)."""
    template = mjx.put_model(_representable(m), impl="cpp", device=device)
    fields = {f.name: getattr(template, f.name) for f in dataclasses.fields(mjx.Model)}
    fields["_impl"] = ModelC(host=Host.of(m, num_threads, digest))
    return Model(**fields)


def _representable(m: mujoco.MjModel) -> mujoco.MjModel:
    """``m``, or a copy whose options MJX's pytree can hold: its ``Option`` has no PGS
    solver, so the template says Newton there. Only the template's fields are read
    from it; the worlds step with the host model's own options."""
    if m.opt.solver != mujoco.mjtSolver.mjSOL_PGS:
        return m
    m = copy.copy(m)
    m.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    return m


def put_data(m: mujoco.MjModel, d: mujoco.MjData, device: jax.Device) -> Data:
    """One world's data from host ``d``: its exact state and its derived fields."""
    like = _dtype_of_floats()
    fields = {}
    for f in dataclasses.fields(mjx.Data):
        if f.name == "_impl":
            continue
        value = np.asarray(getattr(d, f.name))
        if f.name in MATRICES:  # MJX keeps 3x3 matrices where MjData keeps rows of 9
            value = value.reshape(-1, 3, 3)
        fields[f.name] = value.astype(bool if f.name == "eq_active" else like)
    state = np.empty(mujoco.mj_stateSize(m, INTEGRATION), np.float64)
    mujoco.mj_getState(m, d, state, INTEGRATION)
    impl = {name: np.asarray(getattr(d, name)).astype(like) for name in IMPL_FIELDS}
    fields["_impl"] = DataC(
        state=to_bits(state),
        ncon=np.int32(d.ncon),
        diverged=np.bool_(False),
        **impl,
    )
    return jax.device_put(Data(**fields), device)


INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION


def _dtype_of_floats() -> np.dtype:
    return np.dtype(np.float64 if jax.config.jax_enable_x64 else np.float32)


MATRICES = frozenset({"xmat", "ximat", "geom_xmat", "site_xmat", "cam_xmat"})


def to_bits(x: np.ndarray) -> np.ndarray:
    """float64 ``(..., n)`` as its bits, ``(..., n, 2)`` uint32."""
    x = np.ascontiguousarray(x, np.float64)
    return x.view(np.uint32).reshape(*x.shape, 2)


def from_bits(bits: np.ndarray) -> np.ndarray:
    """The float64 ``(..., n)`` whose bits are ``(..., n, 2)`` uint32."""
    bits = np.ascontiguousarray(bits, np.uint32)
    return bits.view(np.float64).reshape(bits.shape[:-1])


# --- MuJoCo's timers ------------------------------------------------------------------

TIMERS_ENV = "MJXRUNNER_MUJOCO_TIMERS"
"""``1`` keeps MuJoCo's timers on when impl "c" makes a host (see :func:`set_timers`)."""

_clock: list[int | None] = []  # the timer function `import mujoco` installed, once read


@functools.cache
def _timer_slot() -> ctypes.c_void_p:
    """MuJoCo's ``mjcb_time``: the clock its ``TM_START``/``TM_END`` call, or NULL."""
    lib = ctypes.CDLL(str(native_ffi.mujoco_library()))  # the bindings' own copy
    return ctypes.c_void_p.in_dll(lib, "mjcb_time")


def set_timers(on: bool) -> None:
    """Turns MuJoCo's profiling timers (``MjData.timer``) on or off for the whole
    process, every ``MjData`` included.

    ``import mujoco`` installs a clock that MuJoCo reads at the start and end of
    each stage of every step; MuJoCo C alone has none. Impl "c" turns it off when it
    makes a host (unless ``MJXRUNNER_MUJOCO_TIMERS=1``): no one reads a batch's
    timers, and the clock costs 10-15% of a small model's step (hopper: 0.54 against
    0.46 ms for 256 worlds on 2 threads). Turn it back on to read ``MjData.timer``
    of your own worlds, e.g. in the viewer's profiler. Physics is the same either
    way.
    """
    slot = _timer_slot()
    if not _clock:
        _clock.append(slot.value)
    slot.value = _clock[0] if on else None


def timers_on() -> bool:
    """Whether MuJoCo's timers run in this process (see :func:`set_timers`)."""
    return _timer_slot().value is not None


def default_timers() -> None:
    """What making a host does to MuJoCo's timers: off, unless
    ``MJXRUNNER_MUJOCO_TIMERS=1``. A measurement calls it first, so that every
    variant it compares (``mujoco.rollout`` included) runs under one setting."""
    if os.environ.get(TIMERS_ENV, "").strip() != "1":
        set_timers(False)


# --- the host ------------------------------------------------------------------------


class Host:
    """Steps batches of one host model on MuJoCo's thread pool.

    One :class:`mujoco.batch.Batch` per batch size met (the full batch, restart
    slots, ...), made on first use. Calls are serialized by a lock: XLA may run
    two callbacks at once, and a batch serves one call at a time.

    Made by :meth:`of`, which gives every model of equal content (and threads and
    call path) the same host: a host is static in the compiled functions, so two
    runners, envs or doors of one model share their compiled programs, and a
    checkpoint's model is the same as its runner's. Sharing a batch cannot mix
    worlds: each call writes the whole state row of every world and every model
    field the batch holds per world, and reads back what it stepped.

    Attributes:
      model: a copy of the host model (never written: per-world values go to the
        batches; a copy, so that a user's later edit of theirs changes nothing).
      num_threads: threads of each batch, the caller's included.
      ffi: whether calls go through the FFI handler (else ``jax.pure_callback``),
        chosen when the host is made and kept.
      fields: ``(name, size)`` of the data's state fields in the order of the state
        row, which the packed state fields follow.
      nstate: size of a state row.
    """

    @classmethod
    def of(cls, m: mujoco.MjModel, num_threads: int, digest: str | None = None) -> "Host":
        """The host of ``m``'s content (``digest``: its :class:`HostModel` digest, if
        known) on ``num_threads`` threads, made once."""
        ffi = native_ffi.choose()
        key = (digest or HostModel.of(m).digest, int(num_threads), ffi)
        with _hosts_lock:
            host = _hosts.get(key)
            if host is None:
                host = _hosts[key] = cls(copy.copy(m), num_threads, ffi)
            return host

    def __init__(self, m: mujoco.MjModel, num_threads: int, ffi: bool):
        default_timers()
        self.model = m
        self.num_threads = num_threads
        self.ffi = ffi
        self._lock = threading.Lock()
        self._sims: dict[int, Any] = {}
        probe = mjbatch.Batch(m, 1, 1)
        layout = {name: probe._component(mjbatch._STATE_FIELDS[name]) for name in STATE_FIELDS}
        self.nstate = probe.nstate
        order = sorted(layout, key=lambda k: layout[k][0])
        if sum(layout[k][1] for k in order) != self.nstate:
            raise ValueError("impl 'c': the state row holds fields the data does not")
        self.fields = tuple((k, layout[k][1]) for k in order)

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: Any) -> bool:
        return self is other

    def sim(self, n: int) -> "_Sim":
        if n not in self._sims:
            self._sims[n] = _Sim(self, n)
        return self._sims[n]

    def run(self, call: "Call", state, shared, per_world, *fields):
        """The host function of a call; see :func:`_run` for the operands."""
        # The callback may be handed jax Arrays: an operation on one would dispatch a
        # computation from inside the running one (slow, and it can wait forever on
        # XLA's limit of computations in flight). NumPy views of them do not.
        state, shared, per_world = (np.asarray(x) for x in (state, shared, per_world))
        n = state.shape[0]
        seen = np.concatenate([np.asarray(f).reshape(n, -1) for f in fields], axis=1)
        with self._lock:
            return self.sim(n).run(call, state, seen, shared, per_world)


_hosts: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> Host
_hosts_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Call:
    """What a compiled call asks of the host (static).

    Attributes:
      how: ``"step"``, ``"forward"`` (``mj_forward``) or ``"position"`` (its
        position stage).
      nstep: substeps of a step.
      dtype: the data's float dtype (float32, or float64 with x64).
      outputs: ``(name, size)`` of the derived fields returned, packed in order.
      shared: ``(path, size)`` of the model fields given once for all worlds.
      per_world: ``(path, size)`` of the model fields given per world.
    """

    how: str
    nstep: int
    dtype: str
    outputs: tuple
    shared: tuple
    per_world: tuple


class _Sim:
    """One batch of ``n`` simulations, the fields bound to it, and the model fields
    given per-simulation values so far."""

    def __init__(self, host: Host, n: int):
        self.host = host
        self.batch = mjbatch.Batch(host.model, n, host.num_threads)
        self.out = {name: self.batch.bind(name) for name in (*DERIVED_FIELDS, *IMPL_FIELDS)}
        self.ncon = self.batch.bind("ncon")
        self.expanded: set[str] = set()
        self.last: dict[str, np.ndarray] = {}  # setconst inputs as last written
        self._base: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def base(self, paths: tuple, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """The host model's values of ``paths``, packed: exact, and rounded to ``dtype``."""
        key = (paths, dtype.name)
        if key not in self._base:
            parts = [_model_field(self.host.model, p).ravel() for p, _ in paths]
            exact = np.concatenate([np.zeros(0), *parts]).astype(np.float64)
            with np.errstate(over="ignore"):  # a huge value rounds to inf, as in the data
                self._base[key] = (exact, exact.astype(dtype))
        return self._base[key]

    def write_params(self, paths: tuple, values: np.ndarray) -> np.ndarray:
        """Writes model fields ``values`` (``(1 or n, total size)``) where they differ
        from the host model's: a field equal to the rounding of the host value keeps
        the exact value. Returns the ``(n,)`` bool worlds whose mj_setConst inputs
        changed."""
        n = self.batch.nsim
        moved = np.zeros(n, bool)
        if not paths:
            return moved
        exact, rounded = self.base(paths, values.dtype)
        if not self.expanded.intersection(p for p, _ in paths) and np.array_equal(
            values, np.broadcast_to(rounded, values.shape)
        ):
            return moved  # the common case: nothing differs, nothing was written before
        offset = 0
        for path, size in paths:
            part = values[:, offset : offset + size]
            keep = part == rounded[offset : offset + size]
            if path in self.expanded or not keep.all():
                self.expanded.add(path)
                new = np.where(keep, exact[offset : offset + size], part)
                rows = self.batch.expand(path).reshape(n, -1)
                if path in SETCONST_FIELDS:
                    last = self.last.get(
                        path, np.broadcast_to(exact[offset : offset + size], rows.shape)
                    )
                    moved |= np.any(new != last, axis=1)
                    self.last[path] = np.broadcast_to(new, rows.shape).copy()
                rows[...] = new
            offset += size
        return moved

    def run(self, call: Call, state, seen, shared, per_world):
        b, n = self.batch, self.batch.nsim
        dtype = np.dtype(call.dtype)
        rows = from_bits(state).reshape(n, -1)
        # A state value that is not the rounding of the exact one was written: take it.
        changed = seen != rows.astype(seen.dtype)
        if changed.any():
            rows = rows.copy()
            np.copyto(rows, seen, where=changed)
        b.state[...] = rows
        moved = self.write_params(call.shared, shared) | self.write_params(
            call.per_world, per_world
        )
        if moved.any():
            b.set_const(np.flatnonzero(moved).astype(np.int32))
        # MuJoCo's reset of a diverging world clears the counts before counting it,
        # so a world that diverged before ends at 1 again: a nonzero count is set to
        # DIVERGED_MARK for the call, any other count after it is a divergence.
        before = b.warning[:, DIVERGENCE, 1].copy()
        marked = np.where(before != 0, DIVERGED_MARK, 0)
        b.warning[:, DIVERGENCE, 1] = marked
        if call.how == "step":
            b.step(nstep=call.nstep)
        else:
            position = call.how == "position"
            stage = mujoco.mjtStage.mjSTAGE_POS if position else mujoco.mjtStage.mjSTAGE_ACC
            b.forward(stage=stage)
        flags = np.empty((n, 2), np.int32)
        flags[:, 0] = self.ncon
        after = b.warning[:, DIVERGENCE, 1]
        flags[:, 1] = np.any(after != marked, axis=1)
        kept = (before != 0) & (after >= DIVERGED_MARK)  # the counts MuJoCo would hold
        b.warning[:, DIVERGENCE, 1] = np.where(kept, before + (after - DIVERGED_MARK), after)
        new = b.state
        # Results as the FFI handler gives them: each state field, then each output.
        ends = np.cumsum([size for _, size in self.host.fields])[:-1]
        fields = np.split(new.astype(dtype), ends, axis=1)
        outputs = [self.out[name].reshape(n, -1).astype(dtype) for name, _ in call.outputs]
        return (to_bits(new), flags, *fields, *outputs)


def _model_field(m: mujoco.MjModel, path: str) -> np.ndarray:
    node = m
    for part in path.split("."):
        node = getattr(node, part)
    return np.asarray(node)


# --- the traced side ---------------------------------------------------------------


def _params(model: Model) -> list[tuple[int, str]]:
    """``(flat index, path)`` of the model fields a world's native model takes from
    the pytree: the float fields MuJoCo's batch can give per-simulation values."""
    found = []
    for i, (path, leaf) in enumerate(jax.tree_util.tree_leaves_with_path(model)):
        name = ".".join(getattr(k, "name", str(k)) for k in path)
        if "_impl" in name or not jnp.issubdtype(leaf.dtype, jnp.floating):
            continue
        if name in mjbatch.MODEL_FIELDS:
            found.append((i, name))
    return found


def param_paths(model: Model) -> tuple[str, ...]:
    """The paths of the model fields the host call reads, in tree order."""
    return tuple(name for _, name in _params(model))


def param_leaves(model: Model) -> tuple[int, ...]:
    """Their flat indices: a shell that packs the model puts them first, in this
    order, so that the step reads them in place (``packing.Layout.of``). ``model``
    may be a :class:`~mjxrunner.engine.worlds.FlatModel` (same leaves, same order)."""
    return tuple(i for i, _ in _params(getattr(model, "tree", model)))


def _data_leaves(tree: Any) -> list[tuple[int, str]]:
    """``(flat index, field name)`` of the leaves of ``tree`` at ``data.<name>`` and
    ``data._impl.<name>``: the fields of the data a shell's state holds."""
    found = []
    for i, (path, _) in enumerate(jax.tree_util.tree_flatten_with_path(tree)[0]):
        names = tuple(getattr(k, "name", None) for k in path)
        if len(names) > 1 and names[:-1] in (("data",), ("data", "_impl")):
            found.append((i, names[-1]))
    return found


def written_leaves(tree: Any) -> tuple[int, ...]:
    """The flat indices of the leaves of ``tree`` (whose ``data`` is impl "c"'s) that
    a step's host call writes whole: its state and derived fields and exact rows.
    A shell packs them apart (``packing.Layout.of``) for :class:`Placement`."""
    written = {*STATE_FIELDS, *DERIVED_FIELDS, *IMPL_FIELDS, "state"}
    return tuple(i for i, name in _data_leaves(tree) if name in written)


def _leaf(model: Any, path: str) -> Any:
    node = model
    for part in path.split("."):
        node = getattr(node, part)
    return node


@dataclasses.dataclass(eq=False)
class Placement:
    """Packed buffers (a shell's scratch, donated) into which the next step's host
    call writes its results in place, each at its leaf's range: the shell then packs
    the new state by writing into them only the leaves the call did not (see
    :meth:`mjxrunner.engine.packing.Layout.pack`), where a concatenation would copy
    every leaf once more.

    Made by :meth:`of` and handed to the step with :func:`placing`; used by the
    first host call of a step whose batch fits, at trace time.

    Attributes:
      buffers: the buffers (traced), in the layout's order.
      where: data field name (``"state"`` for the exact rows) -> ``(leaf, buffer,
        offset, size)``: its leaf index in the packed tree, the buffer, the offset
        of its range and its size (in elements), for the leaves in flat buffers.
      dtypes: each buffer's dtype.
      inputs: the buffers the step's state was unpacked from (traced, same
        layout), or ().
      sources: ``id`` of a leaf as unpacked from ``inputs`` -> ``(leaf, buffer,
        offset)``: the host call reads a state field that is still that very value
        from its place in ``inputs`` (no copy of a slice).
      model_inputs: the packed model's buffers (traced), or ().
      model_sources: the same for the model's leaves in ``model_inputs``: model
        fields that lie side by side there are read in place.
      out: after the call, buffer index -> the buffer the call wrote.
      values: after the call, leaf index -> the value the call placed there.
    """

    buffers: tuple
    where: dict
    dtypes: tuple
    inputs: tuple = ()
    sources: dict = dataclasses.field(default_factory=dict)
    model_inputs: tuple = ()
    model_sources: dict = dataclasses.field(default_factory=dict)
    out: dict = dataclasses.field(default_factory=dict)
    values: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls, layout: Any, buffers: tuple, tree: Any, inputs: tuple = (), model: tuple = ()
    ) -> "Placement":
        """The placement of ``tree`` (whose ``data`` is the stepped data) packed by
        ``layout`` (a :class:`~mjxrunner.engine.packing.Layout`) into ``buffers``.
        ``inputs``: ``(buffers, state)``, the state as unpacked from its buffers by
        ``layout``, before any change; ``model``: ``(layout, buffers, model)``, the
        model as unpacked from its buffers."""
        where = {}
        for i, name in _data_leaves(tree):
            at = layout.flat_range(i)
            if at is not None:
                where[name] = (i, *at)
        dtypes = tuple(np.dtype(b[1]) for b in layout.buffers)
        state_inputs, sources = (), {}
        if inputs:
            state_inputs, unpacked = inputs
            sources = _origins(layout, unpacked)
        model_inputs, model_sources = (), {}
        if model:
            model_layout, model_inputs, unpacked = model
            model_sources = _origins(model_layout, unpacked)
        return cls(
            tuple(buffers),
            where,
            dtypes,
            tuple(state_inputs),
            sources,
            tuple(model_inputs),
            model_sources,
        )


def _origins(layout: Any, tree: Any) -> dict:
    """``id`` of each leaf of ``tree`` (as unpacked by ``layout``) that lies in a
    flat buffer -> ``(leaf, buffer, offset)``; the leaf is kept, so that an ``id``
    is never taken for another value's."""
    origins = {}
    for i, leaf in enumerate(jax.tree.leaves(tree)):
        at = layout.flat_range(i)
        if at is not None:
            origins[id(leaf)] = (leaf, at[0], at[1])
    return origins


def _origin(origins: dict, value: Any) -> tuple | None:
    """``(buffer, offset)`` of ``value`` in ``origins`` (:func:`_origins`) if it is
    that very leaf, else None."""
    src = origins.get(id(value))
    return src[1:] if src is not None and src[0] is value else None


_placement = threading.local()


class placing:
    """``with placing(placement):`` the next fitting step's host call, traced in
    this block on this thread, writes into ``placement`` (None: nowhere)."""

    def __init__(self, placement: Placement | None):
        self.placement = placement

    def __enter__(self) -> Placement | None:
        self.outer = getattr(_placement, "value", None)
        _placement.value = self.placement
        return self.placement

    def __exit__(self, *exc) -> None:
        _placement.value = self.outer


def _fits(placement: Placement, name: str, dtype: Any, size: int) -> bool:
    """Whether result ``name`` (``size`` values of ``dtype``) has its leaf's place."""
    at = placement.where.get(name)
    return at is not None and placement.dtypes[at[1]] == dtype and at[3] == size


def _places(placement: Placement, n: int, floats: Any, named: tuple, nbits: int):
    """Where the results go: ``(buffers passed, places, spill size)``, or None where
    the bits (``nbits`` uint32) have no place. A field whose leaf lies elsewhere
    (another dtype or shape, a buffer of its own) goes to a spill buffer after the
    passed ones."""
    if not _fits(placement, "state", np.uint32, nbits):
        return None
    bits = placement.where["state"]
    places = [(bits[1], bits[2])]
    for name, size in named:
        at = placement.where.get(name)
        places.append((at[1], at[2]) if _fits(placement, name, floats, n * size) else None)
    order = sorted({p[0] for p in places if p is not None})  # the buffers passed
    position = {b: k for k, b in enumerate(order)}
    total, out = 0, []
    for p, size in zip(places, [nbits, *(n * s for _, s in named)], strict=True):
        if size == 0:  # nothing to write: any place will do
            out.append(("0", 0))
        elif p is None:
            out.append((str(len(order)), total))
            total += size
        else:
            out.append((str(position[p[0]]), p[1]))
    return order, tuple(out), total


def _views(placement: Placement, data: Data, fields: tuple, own: tuple, floats: Any) -> tuple:
    """``(operands, views)`` of the state fields for the placed host call: a field
    that is still the value unpacked from the shell's input buffers is read there
    (``(operand, offset, size)``), any other goes as its operand of its own
    (``own``: one per field, converted to the data's float type)."""
    operands, index, views = [], {}, []
    for (name, size), converted in zip(fields, own, strict=True):
        src = _origin(placement.sources, getattr(data, name))
        if src is not None and placement.dtypes[src[0]] == floats:
            buf, offset = placement.inputs[src[0]], src[1]
        else:
            buf, offset = converted, 0
        if id(buf) not in index:
            index[id(buf)] = len(operands)
            operands.append(buf)
        views.append((index[id(buf)], offset, size))
    return tuple(operands), tuple(views)


def _shared_view(placement: Placement, shared: list, floats: Any) -> tuple | None:
    """``(buffer, offset)`` where the shared model fields lie side by side, in order,
    in the packed model (so the host call reads them there), else None."""
    if not placement.model_inputs:
        return None
    start = buf = end = None
    for _, leaf in shared:
        if leaf.size == 0:  # no values to read, wherever it lies
            continue
        src = _origin(placement.model_sources, leaf)
        if src is None or (buf is not None and src != (buf, end)):  # not the next range
            return None
        buf, end = src[0], src[1] + leaf.size
        start = src[1] if start is None else start
    if buf is None:
        return None
    x = placement.model_inputs[buf]
    return (x, start) if x.dtype == floats and x.ndim == 1 else None


def _run(
    how: str, nstep: int, model: Model, data: Data, model_batched: Any, place: bool = True
) -> Data:
    """One host call over a batch: ``data`` leaves ``(n, ...)``; model leaves
    ``(n, ...)`` where ``model_batched`` says so, else their core shape.

    The operands: the exact state bits, the model fields packed (shared and per
    world), and the state fields as the data holds them in the state row's order.
    The results: the new bits, contacts and divergence flags, and each state and
    derived field.
    """
    host = model._impl.host
    n = data.qpos.shape[0]
    floats = data.qpos.dtype
    shared, per_world = [], []
    for path in param_paths(model):
        leaf = _leaf(model, path)
        batched = _leaf(model_batched, path)
        (per_world if batched else shared).append((path, leaf))
    fields = tuple(getattr(data, name).reshape(n, -1).astype(floats) for name, _ in host.fields)
    position = how == "position"
    outputs = tuple(
        (name, int(np.prod(getattr(data, name).shape[1:], dtype=int)))
        for name in (POSITION_FIELDS if position else DERIVED_FIELDS)
    )
    if not position:
        outputs += tuple(
            (name, int(np.prod(getattr(data._impl, name).shape[1:], dtype=int)))
            for name in IMPL_FIELDS
        )
    call = Call(
        how,
        nstep,
        np.dtype(floats).name,
        outputs,
        tuple((p, int(leaf.size)) for p, leaf in shared),
        tuple((p, int(leaf[0].size)) for p, leaf in per_world),
    )
    # The shared fields raveled, then concatenated: slices of one packed buffer that
    # lie side by side in this order compile into one copy, not one per field (75 for
    # a hopper).
    flat = [x.reshape(-1).astype(floats) for _, x in shared]
    shared_row = jnp.concatenate([jnp.zeros((0,), floats), *flat]).reshape(1, -1)
    rows = [x.reshape(n, -1).astype(floats) for _, x in per_world]
    per_world_rows = jnp.concatenate([jnp.zeros((n, 0), floats), *rows], axis=-1)
    # One result per field (the host writes each in place): slicing one packed
    # result costs XLA a copy per field and step.
    named = (*host.fields, *outputs)
    shapes = (
        jax.ShapeDtypeStruct(data._impl.state.shape, jnp.uint32),
        jax.ShapeDtypeStruct((n, 2), jnp.int32),
        *(jax.ShapeDtypeStruct((n, size), floats) for _, size in named),
    )
    operands = (data._impl.state, shared_row, per_world_rows)
    placement = getattr(_placement, "value", None)
    plan = None
    if place and placement is not None and host.ffi and how == "step":
        plan = _places(placement, n, np.dtype(floats), named, data._impl.state.size)
    if plan is not None:
        _placement.value = None  # one host call per step writes in place
        order, places, spill = plan
        passed = tuple(placement.buffers[b] for b in order)
        passed += (jnp.zeros((spill,), floats),) if spill else ()
        seen, views = _views(placement, data, host.fields, fields, np.dtype(floats))
        shared_at = _shared_view(placement, shared, np.dtype(floats))
        if shared_at is not None:
            operands = (operands[0], shared_at[0], operands[2])
        flags, *written = native_ffi.call(
            host,
            call,
            shapes[1:2],
            *operands,
            seen,
            SETCONST_FIELDS,
            (passed, places),
            views,
            shared_offset=-1 if shared_at is None else shared_at[1],
        )
        placement.out = dict(zip(order, written, strict=False))
        results = []
        for (buf, lo), like in zip(places, (shapes[0], *shapes[2:]), strict=True):
            size = int(np.prod(like.shape))
            if not size:
                results.append(jnp.zeros(like.shape, like.dtype))
                continue
            value = jax.lax.slice(written[int(buf)], (lo,), (lo + size,))
            results.append(value.reshape(like.shape))
        bits, results = results[0], results[1:]
    elif host.ffi:
        bits, flags, *results = native_ffi.call(
            host, call, shapes, *operands, fields, SETCONST_FIELDS
        )
    else:
        bits, flags, *results = jax.pure_callback(
            functools.partial(host.run, call), shapes, *operands, *fields, vmap_method="sequential"
        )
    updates, impl = {}, {}
    for (name, _), value in zip(named, results, strict=True):
        target = impl if name in IMPL_FIELDS else updates
        like = getattr(data._impl if name in IMPL_FIELDS else data, name)
        value = value.reshape(like.shape)
        target[name] = value if value.dtype == like.dtype else value.astype(like.dtype)
    if plan is not None:  # what the shell's packing need not write again
        for name, value in (*updates.items(), *impl.items(), ("state", bits)):
            kind = np.uint32 if name == "state" else np.dtype(floats)
            if _fits(placement, name, kind, value.size):  # written there
                placement.values[placement.where[name][0]] = value
    impl = data._impl.replace(state=bits, ncon=flags[:, 0], diverged=flags[:, 1] != 0, **impl)
    return data.replace(**updates, _impl=impl)


def _single(how: str, nstep: int):
    """One world's function (as ``mjx.step``), whose ``vmap`` makes one host call
    for the whole batch."""

    @jax.custom_batching.custom_vmap
    def one(model, data):
        batched = jax.tree.map(lambda x: x[None], data)
        no = jax.tree.map(lambda _: False, model)
        return jax.tree.map(lambda x: x[0], _run(how, nstep, model, batched, no, place=False))

    @one.def_vmap
    def rule(axis_size, in_batched, model, data):
        model_batched, data_batched = in_batched
        data = jax.tree.map(
            lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *x.shape)),
            data,
            data_batched,
        )
        out = _run(how, nstep, model, data, model_batched)
        return out, jax.tree.map(lambda _: True, out)

    return one


@functools.cache
def _function(how: str, nstep: int):
    return _single(how, nstep)


def step(model: Model, data: Data, nstep: int = 1) -> Data:
    """``nstep`` calls of ``mj_step`` on one world (``jax.vmap`` it: the batch is one
    host call)."""
    return _function("step", nstep)(model, data)


def forward(model: Model, data: Data) -> Data:
    """``mj_forward`` of one world, as ``mjx.forward``."""
    return _function("forward", 0)(model, data)


def kinematics(model: Model, data: Data) -> Data:
    """The position stage of one world (kinematics, centres of mass, tendon and
    actuator lengths), as ``mjx.kinematics`` followed by ``mjx.com_pos``."""
    return _function("position", 0)(model, data)
