"""mjxrunner: thousands of MuJoCo worlds in parallel on MJX, for reinforcement learning.

The package is built in layers, each a subpackage that imports only from those
below it (``tests/test_layers.py`` enforces it):

* :mod:`mjxrunner.engine`: the world axis, batched state, backends, the pure
  step and resets, guards, parameters, events, sharding, models, checkpoint format;
* :mod:`mjxrunner.kit`: observation terms, normalization, terrain, pixels, rendering;
* :mod:`mjxrunner.tasks`: the tasks and their registry;
* :mod:`mjxrunner.rl`: the functional env, groups of envs, curricula;
* :mod:`mjxrunner.doors`: the runner, the packed door, Gymnasium, torch, rsl_rl, Brax;
* :mod:`mjxrunner.tools`: the benchmark harness and the command line.

This module and :mod:`mjxrunner.checkpoint` sit above them all.
"""

from mjxrunner import (
    _aliases,  # noqa: F401 - old flat paths (mjxrunner.runner, ...) keep working
    checkpoint,
    engine,
)
from mjxrunner.doors import registration
from mjxrunner.doors.runner import MultiEnvRunner
from mjxrunner.engine import core, cpu_fusion, cpu_linalg, guards, health, models
from mjxrunner.engine.backend import CompileCounter, backend_info
from mjxrunner.engine.options import Options
from mjxrunner.engine.state import RunnerState
from mjxrunner.engine.worlds import (
    CORE_NDIM,
    core_ndims,
    pytree_dataclass,
    select_worlds,
    static_field,
    world_axes,
    world_field,
    world_mask,
)

__all__ = [
    "CORE_NDIM",
    "CompileCounter",
    "MultiEnvRunner",
    "Options",
    "RunnerState",
    "backend_info",
    "checkpoint",
    "core",
    "core_ndims",
    "engine",
    "guards",
    "cpu_fusion",
    "cpu_linalg",
    "health",
    "models",
    "pytree_dataclass",
    "registration",
    "select_worlds",
    "static_field",
    "world_axes",
    "world_field",
    "world_mask",
]

registration.register_all()  # gymnasium.make_vec("mjxrunner/CartpoleBalance-v0", ...)

__version__ = "0.1.0"
