"""Display origins of the worlds: where each world is drawn, never where it is
simulated (every world has its own copy of the whole scene)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mjxrunner import checks


def linear(num_envs: int, spacing: Any) -> np.ndarray:
    """``(num_envs, 3)``: world ``i`` at ``(i * spacing, 0, 0)``."""
    spacing = checks.spacing(spacing, num_envs)
    origins = np.zeros((num_envs, 3))
    origins[:, 0] = np.arange(num_envs) * spacing
    return origins


def grid(num_envs: int, spacing: Any, columns: Any = 0) -> np.ndarray:
    """``(num_envs, 3)``: worlds row by row, ``columns`` per row (0: near square)."""
    spacing = checks.spacing(spacing, num_envs)
    columns = checks.count(columns, "columns", minimum=0)
    # more columns than worlds is one row: clamping keeps huge ints out of NumPy
    columns = min(columns or math.ceil(math.sqrt(num_envs)), num_envs)
    i = np.arange(num_envs)
    origins = np.zeros((num_envs, 3))
    origins[:, 0] = (i % columns) * spacing
    origins[:, 1] = (i // columns) * spacing
    return origins


def custom(num_envs: int, origins: Any) -> np.ndarray:
    """Validated ``(num_envs, 3)`` finite origins."""
    return checks.finite_array(origins, "origins", (num_envs, 3), np.float64).copy()
