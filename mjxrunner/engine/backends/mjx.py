"""MJX's physics: impl "jax" (XLA) and impl "warp" (MuJoCo Warp's kernels)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import checks
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


GRAPH_MODES = ("none", "jax", "warp", "warp_staged", "warp_staged_ex")


def default_graph_mode(device: jax.Device) -> str:
    """Warp's CUDA-graph capture mode: ``"warp"`` on CUDA, ``"jax"`` elsewhere (MJX's
    own choice: Warp graphs need a CUDA device)."""
    return "warp" if device.platform == "gpu" else "jax"


def check_graph_mode(graph_mode: Any, device: jax.Device) -> str:
    if graph_mode is None:
        return default_graph_mode(device)
    if not isinstance(graph_mode, str) or graph_mode.lower() not in GRAPH_MODES:
        raise ValueError(f"graph_mode must be None or one of {GRAPH_MODES}, got {graph_mode!r}")
    return graph_mode.lower()


@dataclasses.dataclass(frozen=True)
class Capacities:
    """Warp buffer sizes (ignored by impl ``"jax"``, whose buffers are exact).

    Attributes:
      naconmax: contact pool shared by all worlds together.
      njmax: constraint rows per world.
      naccdmax: convex-collision (CCD) contact pool for all worlds, <= naconmax.
      nvmax: active DOFs per world (island compaction); None means nv.
    """

    naconmax: int
    njmax: int
    naccdmax: int
    nvmax: int | None

    def as_dict(self) -> dict[str, int | None]:
        return dataclasses.asdict(self)


def contacts_per_world(m: mujoco.MjModel) -> int:
    """Default contact budget of one world: 4 per collidable geom, plus 8.

    A box resting on a plane makes 4 contacts; few geoms touch several others at
    once, so 4 per geom covers typical scenes with room to spare.
    """
    if m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT:
        return 0
    collidable = int(np.sum((m.geom_contype != 0) | (m.geom_conaffinity != 0)))
    return 4 * collidable + 8 * (collidable > 0) + 4 * m.npair


def rows_per_world(m: mujoco.MjModel, ncon: int) -> int:
    """Default constraint rows of one world for ``ncon`` contacts, rounded up to 8.

    Equality rows (6 per weld, 3 per connect, 1 otherwise), one per friction-loss
    DOF, one per limited joint, and per contact ``2 (condim - 1)`` rows (pyramidal
    cones) or ``condim`` (elliptic), with the model's largest condim.
    """
    eq_rows = {mujoco.mjtEq.mjEQ_WELD: 6, mujoco.mjtEq.mjEQ_CONNECT: 3}
    ne = sum(eq_rows.get(int(t), 1) for t in m.eq_type)
    nf = int(np.sum(m.dof_frictionloss > 0)) + int(np.sum(m.tendon_frictionloss > 0))
    nl = int(np.sum(m.jnt_limited)) + int(np.sum(m.tendon_limited))
    condim = int(max([1, *m.geom_condim, *m.pair_dim]))
    elliptic = m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    per_contact = condim if elliptic else max(1, 2 * (condim - 1))
    rows = ne + nf + nl + ncon * per_contact
    return max(8, -(-rows // 8) * 8)


def capacities(
    m: mujoco.MjModel,
    num_envs: int,
    naconmax: Any = None,
    njmax: Any = None,
    naccdmax: Any = None,
    nvmax: Any = None,
) -> Capacities:
    """Validated Warp capacities, with defaults that scale with the model and batch.

    Defaults: ``naconmax = contacts_per_world(m) * num_envs`` (at least 8),
    ``njmax = rows_per_world(m, contacts_per_world(m))``, ``naccdmax = naconmax``,
    ``nvmax = nv``.
    """
    per_world = contacts_per_world(m)
    naconmax = (
        max(8, per_world * num_envs) if naconmax is None else checks.count(naconmax, "naconmax")
    )
    njmax = rows_per_world(m, per_world) if njmax is None else checks.count(njmax, "njmax")
    naccdmax = naconmax if naccdmax is None else checks.count(naccdmax, "naccdmax", minimum=0)
    if naccdmax > naconmax:
        raise ValueError(f"naccdmax ({naccdmax}) must be <= naconmax ({naconmax})")
    if nvmax is not None:
        nvmax = checks.count(nvmax, "nvmax")
        if nvmax > m.nv:
            raise ValueError(f"nvmax must lie in [1, nv={m.nv}], got {nvmax}")
    return Capacities(naconmax, njmax, naccdmax, nvmax)


def _check_mjx_model(m: mujoco.MjModel, impl: str) -> None:
    if m.opt.enableflags & mujoco.mjtEnableBit.mjENBL_ENERGY:
        raise ValueError(
            "the model enables energy computation (<flag energy='enable'/>), which MJX "
            "does not support; remove the flag or set energy='disable'"
        )
    if m.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
        raise ValueError(
            f"the model uses MuJoCo's PGS solver, which MJX (impl {impl!r}) does not "
            "have; use impl='c', or set the solver to Newton or CG"
        )


class Jax(Physics):
    """MJX's JAX implementation: exact buffers, one slot per candidate contact."""

    name = "jax"

    def check_model(self, m: mujoco.MjModel) -> None:
        _check_mjx_model(m, self.name)
        if m.nflex:
            raise ValueError(
                f"the model has {m.nflex} flex object(s), which impl 'jax' cannot simulate; "
                "use impl='warp' or remove the flex"
            )

    def put_model(self, m: mujoco.MjModel, backend: Any, digest: str | None = None) -> mjx.Model:
        del digest
        options = self._model_options(backend)
        try:
            return mjx.put_model(m, impl=self.name, device=backend.device, **options)
        except NotImplementedError as e:
            raise ValueError(
                f"MJX impl {self.name!r} cannot run this model: {e}. Change the model, or "
                "try the other impl."
            ) from e

    def _model_options(self, backend: Any) -> dict[str, Any]:
        return {}

    def put_data(self, m: mujoco.MjModel, d: mujoco.MjData, backend: Any) -> mjx.Data:
        return mjx.put_data(m, d, impl=self.name, device=backend.device)

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
    float32_only = True

    def check_model(self, m: mujoco.MjModel) -> None:
        _check_mjx_model(m, self.name)

    def settings(self, m: mujoco.MjModel, num_envs: int, device: jax.Device, options) -> dict:
        caps = {k: getattr(options, k) for k in ("naconmax", "njmax", "naccdmax", "nvmax")}
        return {
            "graph_mode": check_graph_mode(options.graph_mode, device),
            "caps": capacities(m, num_envs, **caps),
        }

    def _model_options(self, backend: Any) -> dict[str, Any]:
        import warp as wp

        return {"graph_mode": getattr(wp.JaxCallableGraphMode, backend.graph_mode.upper())}

    def put_model(self, m: mujoco.MjModel, backend: Any, digest: str | None = None) -> mjx.Model:
        model = super().put_model(m, backend, digest)
        # The runner reads Warp's overflow flags and applies its policy; Warp's own
        # printf would only repeat that on stdout, unseen by the caller's code.
        return model.tree_replace({"opt._impl.warn_overflow": 0})

    def put_data(self, m: mujoco.MjModel, d: mujoco.MjData, backend: Any) -> mjx.Data:
        caps = {} if backend.caps is None else backend.caps.as_dict()
        return mjx.put_data(m, d, impl=self.name, device=backend.device, **caps)

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
