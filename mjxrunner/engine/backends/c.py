"""MuJoCo C's physics (impl "c"): each world's state on the host, stepped by MuJoCo's
own engine in one host call per batch (:mod:`mjxrunner.engine.native`)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from mujoco import mjx

from mjxrunner.engine import native
from mjxrunner.engine.backends.base import Physics
from mjxrunner.engine.worlds import world_axes


class C(Physics):
    """MuJoCo C: exact float64 state per world, MuJoCo's own constants, contacts and
    divergence check."""

    name = "c"
    derives_constants = True
    runs_mjx_passes = False

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

    def written_leaves(self, state: Any) -> tuple[int, ...]:
        return native.written_leaves(state)

    def param_leaves(self, model: Any) -> tuple[int, ...]:
        return native.param_leaves(model)

    def exact_bits(self, data: mjx.Data) -> jax.Array:
        return data._impl.state

    def exact_rows(self, rows: np.ndarray) -> np.ndarray:
        return native.to_bits(rows)
