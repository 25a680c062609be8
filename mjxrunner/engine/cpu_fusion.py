"""XLA:CPU's fusion emitters off, before the first compile: MJX's tree passes make
their cost grow exponentially with the depth of the kinematic tree.

Why: MJX runs kinematics (``mjx._src.smooth.kinematics``, via ``scan.body_tree``)
as one ``vmap`` per depth level, each reading its parent level's positions and
orientations several times. jaxlib 0.10's XLA:CPU fusion emitters fuse the whole
chain of levels into one kernel and recompute every shared producer at each use,
so the work of a step multiplies with every level. Measured here (2-core CPU, one
world, a hinge chain, ``benchmarks/compile_depth.py``): kinematics alone ran 1.5 ms
at depth 4, 47 ms at depth 7, and a step took 1.1 s at depth 8 and never
finished at depth 70; with the emitters off, kinematics runs 0.9 ms at depth 7
and 3.1 ms at depth 32. The same switch compiles the shipped scenes ~40% faster
with half the memory (``mjxrunner bench MODEL --variants raw``, 256 and 1024
worlds: cartpole 7.7 -> 4.3 s, hopper 14.7 -> 9.2 s, humanoid 22.8 -> 15.8 s), at
steady-state speeds within the run-to-run spread.

The flag is XLA's, so it is process-wide and read once, when JAX starts its
backends: :func:`install` (called by ``import mjxrunner``) adds it to
``XLA_FLAGS`` only if no backend has started yet and ``XLA_FLAGS`` does not set it
already. Set the environment variable ``MJXRUNNER_CPU_FUSION_EMITTERS=1`` to keep
XLA's default. Other platforms ignore the flag. jaxlib 0.11's XLA no longer knows
it and aborts the process on it (seen on a CUDA machine with jaxlib 0.11.2), so it
is added only with the jaxlib versions that read it.

Programs whose physics runs on impl "c" get the emitters back
(:func:`compiler_options`, passed to ``jax.jit`` by the doors' compiled step, the
env's ``jit_step``, ``jit_reset`` and ``jit_reset_worlds``, and the PPO trainer's
update). Their physics is a host call and they run no MJX tree pass, so the
problem above does not arise; without the emitters, XLA:CPU runs each scatter as a
loop, one per leaf of the env's state in a restart pass (60 of the 66 loops of a
cartpole door's step), and every loop's constants and conditions are buffers that
each call of the program allocates again. Measured (AMD EPYC, 2 CPUs, the
Gymnasium door's step compiled both ways in one process, seven alternating rounds
of 200 steps, the median of the per-round ratios): 0.93 of the time at 16
cartpoles, 0.95 at 256, 0.85 at 1,024; 0.93 at 256 hoppers and 0.91 at 1,024; 0.97
at 256 ants; 0.93 at 256 humanoids; the observations bit-identical. PPO's update on
``ant_velocity`` (256 worlds, five alternating chunks of two updates) took 0.89 of
the time. A task that runs MJX's own kinematics in its functions on impl "c" (none
of the package's do) runs them with the emitters on.
"""

from __future__ import annotations

import os
from typing import Any

from jax._src import xla_bridge
from jax._src.lib import version as jaxlib_version

FLAG = "--xla_cpu_use_fusion_emitters=false"
OPT_OUT = "MJXRUNNER_CPU_FUSION_EMITTERS"
KNOWN = jaxlib_version < (0, 11)  # whether this jaxlib's XLA reads the flag

_active = False


def install() -> bool:
    """Turns XLA:CPU's fusion emitters off for this process, if it still can.

    Returns whether they are off: False when opted out, when ``XLA_FLAGS`` sets
    them otherwise, when this jaxlib does not know the flag, or when JAX's backends
    started before the call (import mjxrunner before running any JAX computation).
    """
    global _active
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" in flags:  # the user's choice, either way
        _active = FLAG.lstrip("-") in flags
    elif (
        not KNOWN
        or os.environ.get(OPT_OUT, "") not in ("", "0")
        or xla_bridge.backends_are_initialized()
    ):
        _active = False
    else:
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
        _active = True
    return _active


def active() -> bool:
    """Whether the fusion emitters are off (as decided by :func:`install`)."""
    return _active


def compiler_options(impl: str) -> dict[str, Any] | None:
    """``jax.jit``'s ``compiler_options`` for a program whose physics runs on
    ``impl``: the fusion emitters back on for impl ``"c"`` where :func:`install`
    turned them off; None (XLA's options for the process) otherwise."""
    from mjxrunner.engine import backends

    host_physics = not backends.of(impl).runs_mjx_passes
    return {"xla_cpu_use_fusion_emitters": True} if _active and host_physics else None
