"""Display origins of the worlds: where each world is drawn, never where it is
simulated (every world has its own copy of the whole scene)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mjxrunner.engine import checks


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


class Layout:
    """The layout calls of a stateful shell (runner, group runner) over its
    ``_origins`` ``(num_envs, 3)``, ``_layout`` name and ``num_envs``."""

    _origins: np.ndarray
    _layout: str
    num_envs: int

    layout = property(lambda self: self._layout, doc="``linear``, ``grid`` or ``custom``.")
    env_origins = property(lambda self: self._origins.copy(), doc="``(num_envs, 3)`` origins.")

    def env_origin(self, i: int) -> np.ndarray:
        """``(3,)`` display origin of world ``i``."""
        return self._origins[checks.env_id(i, self.num_envs)].copy()

    def set_env_origins(self, origins: Any) -> None:
        """Sets custom ``(num_envs, 3)`` display origins."""
        self._origins, self._layout = custom(self.num_envs, origins), "custom"

    def set_linear_layout(self, spacing: float) -> None:
        """Places world ``i`` at ``(i * spacing, 0, 0)``."""
        self._origins, self._layout = linear(self.num_envs, spacing), "linear"

    def set_grid_layout(self, spacing: float, columns: int = 0) -> None:
        """Places worlds row by row on a grid, ``columns`` per row (0: near square)."""
        self._origins, self._layout = grid(self.num_envs, spacing, columns), "grid"
