"""MuJoCo's state vectors (``mjtState``) of every world: :func:`get_state` reads
them and :func:`set_state` writes them, world by world, over the engine's mesh.

:func:`mjxrunner.engine.batch.forward_kinematics` recomputes positions after a write.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.sharding import PartitionSpec
from mujoco import mjx

from mjxrunner.engine.batch import Config, forward_kinematics
from mjxrunner.engine.sharding import AXIS, on_worlds
from mjxrunner.engine.state import RunnerState
from mjxrunner.engine.worlds import FlatModel, select_worlds, tree_of

__all__ = [
    "exact_columns",
    "exact_state",
    "get_state",
    "get_state_local",
    "set_state",
    "set_state_local",
    "state_spec",
]

# --- MuJoCo state vectors (mjtState), world by world ------------------------------------

_PLASTIC = int(mujoco.mjtState.mjSTATE_PLASTIC)
_ALL_STATE = (1 << int(mujoco.mjtState.mjNSTATE)) - 1


def state_spec(m: mujoco.MjModel, spec: Any) -> int:
    """The validated ``mjtState`` bitmask ``spec`` (an ``mjtState`` or an int) as MJX
    reads it.

    MJX keeps no plastic state (``mjSTATE_PLASTIC``, part of ``mjSTATE_PHYSICS``):
    for a model without any (``nplastic == 0``, its size is 0) the bit is dropped,
    which leaves the layout of ``mj_getState`` unchanged; a model with some is
    refused.
    """
    if isinstance(spec, (bool, np.bool_)) or not isinstance(
        spec, (int, np.integer, mujoco.mjtState)
    ):
        raise TypeError(f"spec must be a mujoco.mjtState or an int bitmask of them, got {spec!r}")
    value = int(spec)
    if value <= 0 or value & ~_ALL_STATE:
        raise ValueError(
            f"spec must be a nonzero bitmask of mujoco.mjtState bits (below {_ALL_STATE + 1}), "
            f"got {value}"
        )
    if value & _PLASTIC:
        if m.nplastic:
            raise ValueError(
                f"spec holds mjSTATE_PLASTIC, but MJX keeps no plastic state and this model "
                f"has {m.nplastic} values of it: leave the bit out"
            )
        value &= ~_PLASTIC
    return value


# The mjx.Data fields of the mjtState components, in bit order (MJX's own table is
# private): what get_state reads and set_state writes, all of them per world.
_STATE_FIELDS = (
    "time",
    "qpos",
    "qvel",
    "act",
    "history",
    "qacc_warmstart",
    "ctrl",
    "qfrc_applied",
    "xfrc_applied",
    "eq_active",
    "mocap_pos",
    "mocap_quat",
    "userdata",
    "plugin_state",
)


def exact_columns(m: mujoco.MjModel, spec: int) -> np.ndarray:
    """Where the ``spec`` state vector's entries sit in the ``mjSTATE_INTEGRATION``
    vector (every component, in bit order): impl "c"'s exact state row."""
    columns, offset = [], 0
    for bit in range(int(mujoco.mjtState.mjNSTATE)):
        size = mujoco.mj_stateSize(m, 1 << bit)
        if spec & (1 << bit):
            columns.extend(range(offset, offset + size))
        offset += size
    return np.asarray(columns, np.int32)


def exact_state(m: mujoco.MjModel, bits: np.ndarray, ctrl: np.ndarray, spec: int) -> np.ndarray:
    """Impl "c": ``(num_envs, mj_stateSize(m, spec))`` float64, the ``spec`` state
    vectors of MuJoCo's own state (``bits``, ``(num_envs, nstate, 2)`` uint32), exact;
    ``mjSTATE_CTRL`` reads the command ``ctrl`` as :func:`get_state_local` does."""
    from mjxrunner.engine import native

    out = native.from_bits(bits)[:, exact_columns(m, spec)]
    ctrl_bit = int(mujoco.mjtState.mjSTATE_CTRL)
    if spec & ctrl_bit:
        where = np.isin(exact_columns(m, spec), exact_columns(m, ctrl_bit))
        out[:, where] = ctrl
    return out


class _Fields(dict):
    """One world's state fields with the attribute access and ``replace`` that
    ``mjx.get_state``/``set_state`` use: vmapping them over these fields alone keeps
    MJX-Warp's pooled buffers out of the ``vmap``."""

    __getattr__ = dict.__getitem__

    def replace(self, **changes: Any) -> _Fields:
        return _Fields({**self, **changes})


def get_state_local(model: FlatModel, state: RunnerState, spec: int) -> jax.Array:
    """``(num_envs, mj_stateSize(m, spec))``: MJX's ``get_state`` of every world
    (``spec`` from :func:`state_spec`). ``mjSTATE_CTRL`` reads ``state.ctrl``, the
    command the next step takes (before any latency)."""
    data = state.data.replace(ctrl=state.ctrl.astype(state.data.ctrl.dtype))
    m = tree_of(model)
    dtype = data.qpos.dtype
    one = lambda f: mjx.get_state(m, _Fields(f), spec).astype(dtype)  # noqa: E731
    return jax.vmap(one)({k: getattr(data, k) for k in _STATE_FIELDS})


def set_state_local(
    model: FlatModel,
    state: RunnerState,
    values: jax.Array,
    mask: jax.Array,
    spec: int,
    update_fk: bool = True,
    exact: jax.Array | None = None,
) -> RunnerState:
    """``state`` whose worlds in ``(num_envs,)`` ``mask`` take the ``spec`` state
    vectors ``values`` ``(num_envs, size)`` (MJX's ``set_state`` in each world); the
    other rows of ``values`` are ignored. ``mjSTATE_CTRL`` also sets ``state.ctrl``.
    With ``update_fk`` their kinematics are recomputed (:func:`forward_kinematics`).
    Latency queues and push timers are not part of ``mjtState`` and stay.

    Impl "c" takes ``exact``, the same rows as float64 bits ``(num_envs, size, 2)``
    uint32: MuJoCo's own state gets them unrounded (its public fields their rounding).
    """
    data = state.data
    m = tree_of(model)
    put_one = lambda f, v: dict(mjx.set_state(m, _Fields(f), v, spec))  # noqa: E731
    fields = jax.vmap(put_one)({k: getattr(data, k) for k in _STATE_FIELDS}, values)
    new = data.replace(**{k: v.astype(getattr(data, k).dtype) for k, v in fields.items()})
    if exact is not None:
        columns = exact_columns(m._impl.host.model, spec)
        bits = new._impl.state.at[:, columns].set(exact)
        new = new.replace(_impl=new._impl.replace(state=bits))
    if update_fk:
        new = forward_kinematics(model, new)
    data = select_worlds(mask, new, data)
    ctrl = state.ctrl
    if spec & int(mujoco.mjtState.mjSTATE_CTRL):
        ctrl = jnp.where(mask[:, None], data.ctrl.astype(ctrl.dtype), ctrl)
    return state.replace(data=data, ctrl=ctrl)


def get_state(config: Config, model: FlatModel, state: RunnerState, spec: int) -> jax.Array:
    """:func:`get_state_local` over the config's mesh (``spec``: see :func:`state_spec`)."""
    fn = lambda m, s: get_state_local(m, s, spec)  # noqa: E731
    return on_worlds(fn, config.mesh, model, state, out_specs=lambda _: PartitionSpec(AXIS))


def set_state(
    config: Config,
    model: FlatModel,
    state: RunnerState,
    values: jax.Array,
    mask: jax.Array,
    spec: int,
    update_fk: bool = True,
    exact: jax.Array | None = None,
) -> RunnerState:
    """:func:`set_state_local` over the config's mesh."""
    if exact is None:
        fn = lambda m, s, v, k: set_state_local(m, s, v, k, spec, update_fk)  # noqa: E731
        return on_worlds(fn, config.mesh, model, state, values, mask, per_world=(2, 3))
    fn = lambda m, s, v, k, e: set_state_local(m, s, v, k, spec, update_fk, e)  # noqa: E731
    return on_worlds(fn, config.mesh, model, state, values, mask, exact, per_world=(2, 3, 4))
