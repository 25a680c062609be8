"""The interface every impl's physics gives the engine."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

XLA_CPU_PACK_LIMIT = 1 << 19
"""Bytes of runner state up to which a plain step of an XLA-compiled impl ("jax",
"warp") on a CPU is faster on packed buffers; past it, the step's copy into them
costs more than the ~190 separate arguments and results it saves. Measured on impl
"jax", 2 threads, packed against unpacked ms a step: 256 cartpoles (0.43 MB) 0.46
against 0.86, 64 hoppers (0.36 MB) 3.6 against 3.7, 16 humanoids (0.43 MB) 3.6
against 3.8; 512 cartpoles (0.85 MB) 0.91 against 0.86, 128 hoppers (0.71 MB) 6.6
against 6.5, 64 ants (0.75 MB) 5.4 against 5.2."""


class Physics:
    """How one impl simulates: the defaults here are MJX-JAX's, whose buffers are
    exact and whose constants are the model's own arrays.

    ``data`` below is batched (worlds on axis 0) unless a method says one world;
    ``model`` is an ``mjx.Model`` whose leaves carry a world axis or not, as
    :func:`mjxrunner.engine.worlds.world_axes` says.

    Attributes:
      name: the impl, as ``Backend.impl`` spells it.
      derives_constants: MuJoCo rebuilds the fields ``mj_setConst`` derives (from
        masses, inertias, frames, ``qpos0``) itself, per world; else the engine does
        (:func:`mjxrunner.engine.params.recompute_derived`).
      overflows: the impl's buffers have capacities a step can overflow (Warp's
        pools), so the overflow guard must read its flags back.
      runs_mjx_passes: its step runs MJX's tree passes under XLA, whose fusion
        emitters XLA:CPU then keeps off (:func:`mjxrunner.engine.cpu_fusion.compiler_options`).
      float32_only: it runs float32 whatever ``jax_enable_x64`` says (Warp).
      physics_dtype: None, or the dtype of the exact state it keeps beside the
        data's fields (``"float64"``: MuJoCo C).
    """

    name: str = ""
    derives_constants: bool = False
    overflows: bool = False
    runs_mjx_passes: bool = True
    float32_only: bool = False
    physics_dtype: str | None = None

    # --- the choice (host side; ``backend`` is a mjxrunner.engine.backend.Backend) ---

    def check_model(self, m: mujoco.MjModel) -> None:
        """Refuses a model the impl cannot run, naming the feature and the way out."""
        raise NotImplementedError

    def settings(self, m: mujoco.MjModel, num_envs: int, device: jax.Device, options) -> dict:
        """The impl's own fields of a ``Backend`` (``graph_mode``, ``caps``,
        ``num_threads``) from the engine's ``Options``, validated; the others ignored."""
        return {}

    def put_model(self, m: mujoco.MjModel, backend: Any, digest: str | None = None) -> mjx.Model:
        """The device model of ``m``; ``digest``: its ``HostModel`` digest if the
        caller has it (spares hashing a large model again)."""
        raise NotImplementedError

    def put_data(self, m: mujoco.MjModel, d: mujoco.MjData, backend: Any) -> mjx.Data:
        """One world's device data from host ``d``."""
        raise NotImplementedError

    def info(self, backend: Any) -> dict[str, Any]:
        """What the impl adds to the backend identity recorded with every result."""
        return {}

    # --- the physics (traced) ---

    def step(self, model: mjx.Model, data: mjx.Data, substeps: int) -> mjx.Data:
        """``substeps`` physics steps of every world."""
        raise NotImplementedError

    def forward(self, model: mjx.Model, data: mjx.Data) -> mjx.Data:
        """One world's forward pass (``mj_forward``)."""
        raise NotImplementedError

    def kinematics(self, model: mjx.Model, data: mjx.Data) -> mjx.Data:
        """One world's position stage: kinematics and centres of mass."""
        return mjx.com_pos(model, mjx.kinematics(model, data))

    def diverged(self, data: mjx.Data) -> jax.Array:
        """``(num_envs,)`` bool: worlds the impl itself found diverged in the last
        step (beside the non-finite values every impl shows)."""
        return jnp.zeros(data.qpos.shape[:1], bool)

    def overflow_bits(self, data: mjx.Data) -> jax.Array:
        """``(num_envs,)`` int32: each world's bits of buffers that were too small."""
        return jnp.zeros(data.qpos.shape[:1], jnp.int32)

    def clear_overflow(self, data: mjx.Data) -> mjx.Data:
        """``data`` with its overflow flags zeroed, before a step."""
        return data

    def contact_count(self, data: mjx.Data) -> jax.Array:
        """``(num_envs,)`` int32: contacts per world that enter the solver (impl
        "jax" keeps a slot per candidate pair, active while ``dist < includemargin``)."""
        contact = data._impl.contact
        if contact.dist.shape[-1] == 0:
            return jnp.zeros(data.qpos.shape[:1], jnp.int32)
        return jnp.sum(contact.dist < contact.includemargin, axis=-1).astype(jnp.int32)

    def check_mesh(self, mesh: Any) -> None:
        """Refuses a device mesh the impl cannot spread its worlds over."""

    def pack_limit(self, model: Any, platform: str, sharded: bool) -> int | None:
        """Packing hint: bytes of runner state up to which a plain step costs less on
        packed buffers than on the state's leaves (None: at any size), for
        ``model``'s worlds on ``platform``, ``sharded`` over a mesh or not. Off a
        CPU, a step's host time per argument (an H200's unpacked step loop cost
        ~2.7 ms a step over raw MJX at 4,096 and 16,384 impl "jax" hoppers) outweighs
        a copy bound by memory bandwidth (the 23 MB of 4,096 hoppers at 4.8 TB/s:
        ~10 us)."""
        return XLA_CPU_PACK_LIMIT if platform == "cpu" else None

    def written_leaves(self, state: Any) -> tuple[int, ...]:
        """Packing hint: flat indices of the leaves of a runner state that a step
        writes whole, which a packed shell keeps apart."""
        return ()

    def param_leaves(self, model: Any) -> tuple[int, ...]:
        """Packing hint: flat indices of the model leaves a step reads in place,
        which a packed shell puts first, in this order."""
        return ()

    def exact_bits(self, data: mjx.Data) -> jax.Array | None:
        """``(num_envs, nstate, 2)`` uint32: the bits of each world's float64
        integration state where the impl keeps one beside the data's fields (MuJoCo
        C); None where the fields are the state."""
        return None

    def exact_rows(self, rows: np.ndarray) -> np.ndarray | None:
        """Float64 state rows as :meth:`exact_bits` holds them, or None where the
        impl keeps no exact state."""
        return None
