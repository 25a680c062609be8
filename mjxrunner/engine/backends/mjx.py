"""MJX's physics: impl "jax" (XLA) and impl "warp" (MuJoCo Warp's kernels)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.engine.backends.base import Physics
from mjxrunner.engine.worlds import world_axes

# MJX's step and forward pass behind a jit of their own, so that the programs that
# contain them (a runner's step, an env's reset and step, its restarts) trace each
# once per process and world shape instead of once per program: an env's step then
# reuses the forward pass its reset traced (hopper env step: 5.8 -> 4.2 s of
# tracing). XLA inlines the call: a hopper env over 60 steps with restarts gave the
# same observations and qpos bit for bit with and without these jits.
MJX_STEP = jax.jit(mjx.step)
MJX_FORWARD = jax.jit(mjx.forward)


class Jax(Physics):
    """MJX's JAX implementation: exact buffers, one slot per candidate contact."""

    name = "jax"

    def step(self, model: mjx.Model, data: mjx.Data, substeps: int) -> mjx.Data:
        one_step = jax.vmap(MJX_STEP, in_axes=(world_axes(model), 0))

        def substep(d, _):
            # With jax_enable_x64, MJX's collision driver builds the contact geom ids with
            # jnp.array over NumPy int64 tables (collision_driver.py, Contact(geom1=...)),
            # so they come back int64 where make_data made them int32. Casting back keeps
            # every carry (this scan, the env's, checkpoints) of one dtype.
            new = one_step(model, d)
            return jax.tree.map(lambda x, like: x.astype(like.dtype), new, d), None

        # The scan is outside the vmap, so MJX-Warp's batched FFI call sees the whole batch.
        data, _ = jax.lax.scan(substep, data, None, length=substeps)
        return data

    def forward(self, model: mjx.Model, data: mjx.Data) -> mjx.Data:
        return MJX_FORWARD(model, data)


def capacity_bits() -> int:
    """The Warp overflow bits that mean a buffer was too small.

    Solver iteration-limit bits are left out: they report convergence, not lost
    contacts or constraints.
    """
    from mujoco.mjx.third_party.mujoco_warp._src.types import OverflowType

    return int(OverflowType.ALL & ~(OverflowType.ITERATIONS | OverflowType.LS_ITERATIONS))


class Warp(Jax):
    """MJX's Warp implementation: contact and constraint pools of fixed capacity,
    whose overflow each world flags."""

    name = "warp"
    overflows = True

    def overflow_bits(self, data: mjx.Data) -> jax.Array:
        return (data._impl.overflow & capacity_bits()).astype(jnp.int32)

    def clear_overflow(self, data: mjx.Data) -> mjx.Data:
        # Warp ORs flags in, so a step that starts from cleared flags reports its own
        return data.tree_replace({"_impl.overflow": jnp.zeros_like(data._impl.overflow)})

    def contact_count(self, data: mjx.Data) -> jax.Array:
        # one pool of nacon contacts for all worlds, each tagged with its world
        impl, num_envs = data._impl, data.qpos.shape[0]
        active = (jnp.arange(impl.contact__worldid.shape[0]) < impl.nacon[0]) & (
            impl.contact__dist < impl.contact__includemargin
        )
        world = jnp.where(active, impl.contact__worldid, num_envs)
        return jnp.bincount(world, length=num_envs + 1)[:num_envs].astype(jnp.int32)
