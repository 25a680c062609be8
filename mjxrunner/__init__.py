"""mjxrunner: thousands of MuJoCo worlds in parallel on MJX, for reinforcement learning."""

from mjxrunner import cpu_fusion, cpu_linalg

# Before anything compiles: jaxlib 0.10's batched LAPACK calls can deadlock XLA's
# CPU thread pool inside an MJX step (see mjxrunner.cpu_linalg), and XLA:CPU's
# fusion emitters make deep kinematic trees cost exponentially (mjxrunner.cpu_fusion).
cpu_linalg.install()
cpu_fusion.install()

from mjxrunner import checkpoint, core, engine, guards, health, models, registration  # noqa: E402
from mjxrunner.backend import CompileCounter, backend_info  # noqa: E402
from mjxrunner.runner import MultiEnvRunner  # noqa: E402
from mjxrunner.state import RunnerState  # noqa: E402
from mjxrunner.worlds import (  # noqa: E402
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
