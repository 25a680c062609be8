"""mjxrunner: thousands of MuJoCo worlds in parallel on MJX, for reinforcement learning."""

from mjxrunner import checkpoint, core, health, models
from mjxrunner.backend import CompileCounter, backend_info
from mjxrunner.runner import MultiEnvRunner
from mjxrunner.state import RunnerState
from mjxrunner.worlds import (
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
    "RunnerState",
    "backend_info",
    "checkpoint",
    "core",
    "core_ndims",
    "health",
    "models",
    "pytree_dataclass",
    "select_worlds",
    "static_field",
    "world_axes",
    "world_field",
    "world_mask",
]

__version__ = "0.1.0"
