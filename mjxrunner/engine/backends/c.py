"""MuJoCo C's physics (impl "c"): each world's state on the host, stepped by MuJoCo's
own engine in one host call per batch (:mod:`mjxrunner.engine.native`)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import checks, native, native_ffi
from mjxrunner.engine.backends.base import Physics
from mjxrunner.engine.worlds import world_axes

COPIED_PACK_LIMIT = 2 << 20
"""Bytes of state up to which impl "c" steps faster packed where its host call
cannot write the packed buffers in place (2 threads: 256 hoppers or ants gained
10-25%, 1,024 hoppers and ants and 256 humanoids lost 10-20%)."""


class C(Physics):
    """MuJoCo C: exact float64 state per world, MuJoCo's own constants, contacts and
    divergence check."""

    name = "c"
    derives_constants = True
    runs_mjx_passes = False
    physics_dtype = "float64"  # each world's exact state beside what tasks read

    def check_model(self, m: mujoco.MjModel) -> None:
        pass  # MuJoCo runs every model it compiles

    def settings(self, m: mujoco.MjModel, num_envs: int, device: jax.Device, options) -> dict:
        if device.platform != "cpu":
            raise ValueError(
                f"impl 'c' runs MuJoCo on this machine's CPU threads; its worlds live "
                f"on a CPU device, got {device}"
            )
        threads = options.num_threads
        threads = native.default_threads() if threads is None else threads
        return {"num_threads": checks.count(threads, "num_threads")}

    def put_model(self, m: mujoco.MjModel, backend: Any, digest: str | None = None) -> mjx.Model:
        return native.put_model(m, backend.device, backend.num_threads, digest)

    def put_data(self, m: mujoco.MjModel, d: mujoco.MjData, backend: Any) -> mjx.Data:
        return native.put_data(m, d, backend.device)

    def info(self, backend: Any) -> dict[str, Any]:
        return {
            "num_threads": backend.num_threads,
            "contacts": native.LAYOUT_NOTE,
            # How each step reaches MuJoCo: the C++ FFI handler, or jax.pure_callback
            # where it could not be built (see mjxrunner.engine.native_ffi).
            "host_call": native_ffi.host_call(),
            "mujoco_timers": "on" if native.timers_on() else "off",
        }

    def step(self, model: mjx.Model, data: mjx.Data, substeps: int) -> mjx.Data:
        one_world = functools.partial(native.step, nstep=substeps)  # all substeps, one call
        return jax.vmap(one_world, in_axes=(world_axes(model), 0))(model, data)

    def forward(self, model: mjx.Model, data: mjx.Data) -> mjx.Data:
        return native.forward(model, data)

    def kinematics(self, model: mjx.Model, data: mjx.Data) -> mjx.Data:
        return native.kinematics(model, data)

    def diverged(self, data: mjx.Data) -> jax.Array:
        return data._impl.diverged

    def contact_count(self, data: mjx.Data) -> jax.Array:
        return data._impl.ncon  # MuJoCo counts them itself

    def check_mesh(self, mesh: Any) -> None:
        native.check_mesh(mesh)

    def pack_limit(self, model: Any, platform: str, sharded: bool) -> int | None:
        # On one device the FFI handler writes the leaves a step computes straight
        # into the packed buffers, so packing copies only the few others (1,024
        # hoppers and 256 humanoids: 5-8% faster packed). Split over processes the
        # leaves are rows of 2-D buffers, and jax.pure_callback's results are copied.
        in_place = not sharded and native.writes_in_place(model)
        return None if in_place else COPIED_PACK_LIMIT

    def written_leaves(self, state: Any) -> tuple[int, ...]:
        return native.written_leaves(state)

    def param_leaves(self, model: Any) -> tuple[int, ...]:
        return native.param_leaves(model)

    def exact_bits(self, data: mjx.Data) -> jax.Array:
        return data._impl.state

    def exact_rows(self, rows: np.ndarray) -> np.ndarray:
        return native.to_bits(rows)
