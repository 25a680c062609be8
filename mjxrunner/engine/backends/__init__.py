"""The physics of each impl behind one interface, :class:`~.base.Physics`.

What the engine does differently on MJX-JAX, MJX-Warp and MuJoCo C (the step, the
forward and position passes, constants, divergence, overflow, MuJoCo's exact state,
packing hints) is a method of the impl's :class:`~.base.Physics`, so the rest of the
package never branches on the impl: it asks :func:`of` for the physics of an impl's
name, or of the model or data it holds (all code traced under ``jit`` has is trees).
"""

from __future__ import annotations

from typing import Any

from mujoco.mjx import Impl

from mjxrunner.engine import native
from mjxrunner.engine.backends.base import Physics
from mjxrunner.engine.backends.c import C
from mjxrunner.engine.backends.mjx import Jax, Warp

BY_NAME: dict[str, Physics] = {"jax": Jax(), "warp": Warp(), "c": C()}
"""The physics of each impl, by its name."""

_BY_IMPL = {Impl.JAX: "jax", Impl.WARP: "warp", Impl.CPP: "c"}


def of(x: Any) -> Physics:
    """The physics of ``x``: an impl's name (``"jax"``, ``"warp"``, ``"c"`` or
    ``"cpp"``), or a model or data (batched or not; a ``FlatModel`` too) of one."""
    if isinstance(x, str):
        name = native.ALIASES.get(x, x)
        if name not in BY_NAME:
            raise ValueError(f"impl must be 'jax', 'warp' or 'c' ('cpp'), got {x!r}")
        return BY_NAME[name]
    return BY_NAME[_BY_IMPL[getattr(x, "tree", x).impl]]


__all__ = ["BY_NAME", "C", "Jax", "Physics", "Warp", "of"]
