"""The terrain's config and its heightfield: the options of :mod:`mjxrunner.kit.terrain`,
the tiled heights they generate (NumPy) and the ground height under a point (NumPy or
JAX).

The terrain types, the layout of the tiles and what a heightfield costs MJX are told
in :mod:`mjxrunner.kit.terrain`, which re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from mjxrunner.engine import checks

TYPES = ("flat", "slope_up", "slope_down", "stairs_up", "stairs_down", "rough")
"""The terrain types, in the order columns are laid out."""

_TOL = 1e-6  # relative tolerance when checking that lengths are whole grid steps


@dataclasses.dataclass(frozen=True)
class TerrainConfig:
    """Every option of the terrain and its curriculum.

    Attributes:
      tile_size: side of a square tile, in metres.
      levels: tiles along x, one per difficulty level (level 0 at x = 0).
      columns: tiles along y; each holds one type (see ``proportions``).
      proportions: ``((type, weight), ...)``: the share of the columns each type
        gets (largest remainder; columns laid out in the order of :data:`TYPES`).
        A type with a positive weight must get at least one column.
      resolution: spacing of the heightfield's samples, in metres; ``tile_size``,
        ``border``, ``platform`` and ``step_width`` must be whole multiples of it,
        ``tile_size`` and ``platform`` even ones.
      border: width of the flat band around the tiles, in metres.
      platform: side of the flat square at each tile's centre, in metres.
      slope_deg: ``(easiest, hardest)`` slope angle in degrees, level 0 to last.
      step_height: ``(easiest, hardest)`` stair step height, in metres.
      step_width: depth of a stair step, in metres.
      rough_amplitude: ``(easiest, hardest)`` largest deviation of rough terrain
        from 0, in metres.
      rough_cell: spacing of rough terrain's random heights, in metres.
      base: thickness of the heightfield's solid below its lowest point, in metres.
      seed: seed of the rough tiles' heights.
      max_initial_level: worlds start at a level uniform in ``[0, max_initial_level]``.
      up_fraction: a world moves up when it walked more than this times ``tile_size``.
      down_fraction: a world moves down when it walked less than this times its
        commanded distance.
      spawn_radius: spawn points are uniform in a square of this half-side around
        the tile's centre, in metres; at most half the platform.
    """

    tile_size: float = 4.0
    levels: int = 6
    columns: int = 6
    proportions: tuple[tuple[str, float], ...] = tuple((t, 1.0) for t in TYPES)
    resolution: float = 0.1
    border: float = 2.0
    platform: float = 1.2
    slope_deg: tuple[float, float] = (0.0, 25.0)
    step_height: tuple[float, float] = (0.02, 0.14)
    step_width: float = 0.4
    rough_amplitude: tuple[float, float] = (0.01, 0.06)
    rough_cell: float = 0.2
    base: float = 0.25
    seed: int = 0
    max_initial_level: int = 1
    up_fraction: float = 0.5
    down_fraction: float = 0.5
    spawn_radius: float = 0.1

    def __post_init__(self) -> None:
        checks.count(self.levels, "levels")
        checks.count(self.columns, "columns")
        checks.count(self.seed, "seed", minimum=0)
        checks.count(self.max_initial_level, "max_initial_level", minimum=0)
        if self.max_initial_level >= self.levels:
            raise ValueError(
                f"max_initial_level must be < levels ({self.levels}), got {self.max_initial_level}"
            )
        for name in ("tile_size", "resolution", "step_width", "rough_cell", "base", "up_fraction"):
            checks.real(getattr(self, name), name, positive=True)
        for name in ("border", "platform", "down_fraction", "spawn_radius"):
            if checks.real(getattr(self, name), name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("tile_size", "border", "platform", "step_width"):
            steps = _grid_steps(getattr(self, name), self.resolution, name)
            if name in ("tile_size", "platform") and steps % 2:
                # a sample at the centre, and a platform symmetric about it
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must be an even multiple of "
                    f"resolution ({self.resolution})"
                )
        if self.platform >= self.tile_size:
            raise ValueError(
                f"platform ({self.platform}) must be smaller than tile_size ({self.tile_size})"
            )
        if self.spawn_radius > self.platform / 2:
            raise ValueError(
                f"spawn_radius ({self.spawn_radius}) must be at most half the platform "
                f"({self.platform / 2}), so spawns stay on flat ground"
            )
        for name, top in (("slope_deg", 80.0), ("step_height", None), ("rough_amplitude", None)):
            value = getattr(self, name)
            if not (isinstance(value, tuple) and len(value) == 2):
                raise TypeError(f"{name} must be a (easiest, hardest) tuple, got {value!r}")
            lo, hi = (checks.real(v, name) for v in value)
            if lo < 0 or hi < lo or (top is not None and hi > top):
                limit = f" and <= {top}" if top is not None else ""
                raise ValueError(f"{name} must satisfy 0 <= easiest <= hardest{limit}, got {value}")
        column_types(self)  # checks the proportions


def _grid_steps(length: float, resolution: float, name: str) -> int:
    """``length / resolution`` as an int, or a ValueError if it is not whole."""
    steps = round(length / resolution)
    if abs(steps * resolution - length) > _TOL * max(length, resolution):
        raise ValueError(f"{name} ({length}) must be a whole multiple of resolution ({resolution})")
    return steps


def column_types(config: TerrainConfig) -> tuple[str, ...]:
    """The type of each column, ``(columns,)``, by largest remainder over the weights.

    Raises:
      TypeError, ValueError: unknown types, negative or all-zero weights, or a type
        with a positive weight that would get no column.
    """
    props = config.proportions
    if not isinstance(props, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in props):
        raise TypeError(f"proportions must be a tuple of (type, weight) pairs, got {props!r}")
    weights = dict.fromkeys(TYPES, 0.0)
    for name, weight in props:
        if name not in weights:
            raise ValueError(f"unknown terrain type {name!r}; known types: {', '.join(TYPES)}")
        weights[name] += checks.real(weight, f"weight of {name!r}")
        if weight < 0:
            raise ValueError(f"weight of {name!r} must be >= 0, got {weight}")
    total = sum(weights.values())
    if total <= 0:
        raise ValueError("proportions must give some type a positive weight")
    quota = np.array([weights[t] / total * config.columns for t in TYPES])
    counts = np.floor(quota).astype(int)
    order = np.argsort(-(quota - counts), kind="stable")  # largest remainder first
    counts[order[: config.columns - counts.sum()]] += 1
    starved = [t for t, c in zip(TYPES, counts, strict=True) if c == 0 and weights[t] > 0]
    if starved:
        raise ValueError(
            f"{config.columns} columns leave no column for {starved}; add columns or "
            "drop those types from proportions"
        )
    return tuple(t for t, c in zip(TYPES, counts, strict=True) for _ in range(c))


def difficulty(config: TerrainConfig, name: str, level: int) -> float:
    """The value of range ``name`` (``"slope_deg"``, ``"step_height"``,
    ``"rough_amplitude"``) at ``level``: linear from easiest at level 0 to hardest
    at the last level."""
    lo, hi = getattr(config, name)
    return lo + (hi - lo) * (level / (config.levels - 1) if config.levels > 1 else 0.0)


# --- the heightfield (NumPy) ------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Terrain:
    """A generated terrain.

    Attributes:
      config: what it was generated from.
      heights: ``(ny, nx)`` float64 metres; ``heights[r, c]`` is the ground at
        ``x = corner[0] + c * resolution``, ``y = corner[1] + r * resolution``
        (MuJoCo's heightfield layout: rows along y).
      corner: ``(2,)`` world ``(x, y)`` of ``heights[0, 0]``.
      origins: ``(levels, columns, 3)`` float64: the centre of each tile, with z the
        ground height there (the top of its platform).
      column_types: ``(columns,)`` the type of each column.
    """

    config: TerrainConfig
    heights: np.ndarray
    corner: np.ndarray
    origins: np.ndarray
    column_types: tuple[str, ...]

    def surface_height(self, xy: Any) -> np.ndarray:
        """Ground height under points ``xy`` ``(..., 2)``, float64 (see
        :func:`ground_height`)."""
        xy = np.asarray(xy, np.float64)
        return ground_height(self.heights, self.corner, self.config.resolution, xy, np)


def ground_height(heights: Any, corner: Any, resolution: float, xy: Any, xp: Any = jnp) -> Any:
    """Ground height under points ``xy`` ``(..., 2)``, as MuJoCo builds the surface:
    each grid cell split into two triangles along the diagonal from its ``(r, c)`` to
    its ``(r + 1, c + 1)`` corner. Points off the grid take the nearest edge's height.

    Pure and jit-able with ``xp=jax.numpy`` (the default), e.g. for a task's
    termination on the torso's height above the ground or a height scan; ``xp=numpy``
    for host arrays.

    Args:
      heights: ``(ny, nx)``, :attr:`Terrain.heights`.
      corner: ``(2,)``, :attr:`Terrain.corner`.
      resolution: the grid spacing, in metres.
      xy: ``(..., 2)`` points.
      xp: the array module, ``jax.numpy`` or ``numpy``.

    Returns:
      ``(...,)`` heights.
    """
    ny, nx = heights.shape
    gx = xp.clip((xy[..., 0] - corner[0]) / resolution, 0, nx - 1)
    gy = xp.clip((xy[..., 1] - corner[1]) / resolution, 0, ny - 1)
    c = xp.minimum(xp.floor(gx).astype(int), nx - 2)
    r = xp.minimum(xp.floor(gy).astype(int), ny - 2)
    u, v = gx - c, gy - r
    h00, h10 = heights[r, c], heights[r, c + 1]
    h01, h11 = heights[r + 1, c], heights[r + 1, c + 1]
    upper = h00 + v * (h01 - h00) + u * (h11 - h01)  # triangle (0,0), (1,1), (0,1)
    lower = h00 + u * (h10 - h00) + v * (h11 - h10)  # triangle (0,0), (1,0), (1,1)
    return xp.where(v >= u, upper, lower)


def _tile(config: TerrainConfig, kind: str, level: int, column: int) -> np.ndarray:
    """``(m + 1, m + 1)`` heights of one tile, ``m = tile_size / resolution``, rows
    along y; its centre sample is ``[m // 2, m // 2]``."""
    res = config.resolution
    m = _grid_steps(config.tile_size, res, "tile_size")
    # Chebyshev distance of each sample from the tile's centre, in grid steps
    # (integers, so rings of steps fall exactly on samples)
    i = np.abs(np.arange(m + 1) - m / 2)
    ring = np.maximum(i[:, None], i[None, :])
    half_platform = _grid_steps(config.platform, res, "platform") / 2
    if kind == "flat":
        return np.zeros((m + 1, m + 1))
    if kind in ("slope_up", "slope_down"):
        grade = math.tan(math.radians(difficulty(config, "slope_deg", level)))
        # height above the edge: the slope runs from the platform's rim to the edge
        rise = grade * res * (m / 2 - np.maximum(ring, half_platform))
        return rise if kind == "slope_down" else -rise
    if kind in ("stairs_up", "stairs_down"):
        step = difficulty(config, "step_height", level)
        width = _grid_steps(config.step_width, res, "step_width")
        n = int((m / 2 - half_platform) // width)  # steps between platform and edge
        # ring index: 0 on the platform, 1 on the first step out, ..., n at the edge
        j = np.clip(np.ceil((ring - half_platform) / width - _TOL), 0, n)
        rise = step * (n - j)
        return rise if kind == "stairs_down" else -rise
    if kind == "rough":
        amplitude = difficulty(config, "rough_amplitude", level)
        rng = np.random.default_rng([config.seed, level, column])  # per tile: order-free
        k = max(1, round(config.tile_size / config.rough_cell))
        coarse = rng.uniform(-amplitude, amplitude, (k + 1, k + 1))
        fine = np.linspace(0.0, k, m + 1)
        rows = np.stack([np.interp(fine, np.arange(k + 1), row) for row in coarse])
        heights = np.stack([np.interp(fine, np.arange(k + 1), col) for col in rows.T], axis=1)
        heights[(ring <= half_platform) | (ring == m / 2)] = 0.0  # platform; edges meet at 0
        return heights
    raise ValueError(f"unknown terrain type {kind!r}; known types: {', '.join(TYPES)}")


def generate(config: TerrainConfig) -> Terrain:
    """The terrain of ``config``: heights, tile origins, column types. Deterministic
    given ``config`` (the rough tiles draw from ``config.seed``)."""
    if not isinstance(config, TerrainConfig):
        raise TypeError(f"config must be a TerrainConfig, got {type(config).__name__}")
    res = config.resolution
    m = _grid_steps(config.tile_size, res, "tile_size")
    b = _grid_steps(config.border, res, "border")
    kinds = column_types(config)
    heights = np.zeros((config.columns * m + 2 * b + 1, config.levels * m + 2 * b + 1))
    for level in range(config.levels):
        for column, kind in enumerate(kinds):
            r0, c0 = b + column * m, b + level * m
            heights[r0 : r0 + m + 1, c0 : c0 + m + 1] = _tile(config, kind, level, column)
    # tile (0, 0)'s centre sample sits at the world origin
    corner = -np.array([b + m / 2, b + m / 2]) * res
    levels, columns = np.meshgrid(
        np.arange(config.levels), np.arange(config.columns), indexing="ij"
    )
    centre_c, centre_r = b + levels * m + m // 2, b + columns * m + m // 2
    origins = np.stack(
        [
            corner[0] + centre_c * res,
            corner[1] + centre_r * res,
            heights[centre_r, centre_c],
        ],
        axis=-1,
    )
    return Terrain(config, heights, corner, origins, kinds)
