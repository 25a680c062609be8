"""Tiled heightfield terrain for locomotion, and a curriculum over its levels.

All worlds of a runner share one model, so every world holds the same terrain: a
grid of square tiles, ``levels`` of them along x (difficulty grows with the level)
and ``columns`` along y (each column one terrain type), ringed by a flat border.
Each world's robot is spawned on the flat platform at the centre of the tile of
its own level and column, and the curriculum moves the world's level between
episodes.

Terrain types (``"up"``/``"down"``: what a robot walking out of the centre does):

* ``"flat"``: height 0.
* ``"slope_up"`` / ``"slope_down"``: a square pyramid pit / hill. The slope rises
  (falls) at the level's angle from the central platform to the tile's edge.
* ``"stairs_up"`` / ``"stairs_down"``: the same pyramids as square rings of steps
  of the level's height and ``step_width`` deep.
* ``"rough"``: random heights, uniform in ``[-a, a]`` for the level's amplitude ``a``
  on a grid of ``rough_cell`` spacing, interpolated bilinearly; flat platform.

Every tile's edge is at height 0, so neighbouring tiles meet without cliffs, and
its central platform is flat, so a spawn's height is known exactly. The tile at
level 0, column 0 is centred on the world origin, so a robot's keyframe standing at
the origin stands on flat ground.

Why a heightfield: MJX's jax impl collides a heightfield with spheres, capsules,
boxes and meshes (not cylinders or ellipsoids); impl "warp" with every convex
primitive. Steps made of boxes would have exact risers, but MJX-jax has no dynamic
broadphase: every box pairs with every robot geom in every world at every step,
hundreds of pairs for a field of stairs. A heightfield interpolates between its
samples, so a riser is a ramp one ``resolution`` wide (45 degrees at 0.1 m for a
0.1 m step).

What it costs, and the resolution: MJX-jax tests each robot geom that can touch the
terrain against a fixed window of the grid, ``ceil(2 * rbound / resolution) + 1``
cells a side (two prisms per cell), wherever the geom is, and keeps 4 contacts per
pair, so the cost follows the resolution and the size of the colliding geoms, never
the terrain's extent. The ant's shin capsules (bounding radius 0.27 m) see 7 x 7
cells at 0.1 m; spheres of 5 cm at its feet see 2 x 2. Measured on 2 shared CPU
cores over three runs (``benchmarks/terrain_cost.py``, 64 and 256 worlds, rates as
fractions of the flat-floor ant's in the same run): the capsule ant 0.09 to 0.33 at
0.1 m and 0.04 to 0.06 at 0.05 m; with sphere feet (``scene(feet=ANT_FEET)``) 0.53
to 0.92 at 0.1 m and 0.40 to 0.60 at 0.05 m. So the resolution defaults to 0.1 m
(fine enough for 2 cm steps and a 0.2 m rough grid; 0.05 m costs the sphere-footed
ant another 1.3 to 2 times, its torso's window growing to 11 x 11, for ramps half
as wide), and a locomotion task should use sphere feet. Either way MJX-jax allocates
4 contacts per terrain pair: the ant has 20 contacts and 68 constraint rows per
world instead of 9 and 35 on its plane, which are also the Warp capacities to give
(``naconmax = 20 * num_envs``, ``njmax = 68``).

Curriculum (Isaac Lab's rule, written here for per-world JAX arrays): when a world's
episode ends, with ``walked`` the horizontal distance from its spawn point to where
it ended and ``commanded`` the distance its command asked for,

* up: ``walked > up_fraction * tile_size`` (it reached its tile's edge, at 0.5);
* down: ``walked < down_fraction * commanded`` and not up;
* ``level + up - down``, clamped at 0 below; a world that moves up from the top
  level goes to a level drawn uniformly from ``[0, levels)`` from its own key, so
  the top does not fill with worlds that have nothing left to learn.

Worlds keep their column (terrain type) for life: world ``i`` has column
``i % columns``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjxrunner.engine import checks, models
from mjxrunner.engine.worlds import pytree_dataclass, world_field

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


# --- the scene (MjSpec) ------------------------------------------------------------------


def add_to_spec(
    spec: mujoco.MjSpec, terrain: Terrain, name: str = "terrain", like: str | None = None
) -> mujoco.MjsGeom:
    """Adds ``terrain`` to ``spec`` as a heightfield asset and a world geom.

    Args:
      spec: the scene to edit (in place).
      terrain: from :func:`generate`.
      name: name of the heightfield asset and of its geom.
      like: None, or the name of a geom of ``spec`` (the floor it replaces) whose
        contact settings (contype, conaffinity, condim, friction, solref, solimp,
        priority) and colour the terrain copies.

    Returns:
      The new geom.
    """
    heights = terrain.heights
    ny, nx = heights.shape
    low, high = float(heights.min()), float(heights.max())
    span = high - low
    res = terrain.config.resolution
    half = np.array([(nx - 1) * res / 2, (ny - 1) * res / 2])
    # MuJoCo rescales elevations to [0, 1] times size[2], above the geom's z
    data = (heights - low) / span if span > 0 else np.zeros_like(heights)
    spec.add_hfield(
        name=name,
        nrow=ny,
        ncol=nx,
        size=[half[0], half[1], span if span > 0 else 1.0, terrain.config.base],
        userdata=data.ravel().tolist(),
    )
    centre = terrain.corner + half
    geom = spec.worldbody.add_geom(
        name=name,
        type=mujoco.mjtGeom.mjGEOM_HFIELD,
        hfieldname=name,
        pos=[centre[0], centre[1], low],
    )
    if like is not None:
        source = spec.geom(like)
        if source is None:
            raise ValueError(f"no geom named {like!r} in the spec")
        for field in (
            "contype",
            "conaffinity",
            "condim",
            "friction",
            "solref",
            "solimp",
            "priority",
            "rgba",
        ):
            setattr(geom, field, getattr(source, field))
    return geom


ANT_FEET = ("foot_front_left", "foot_front_right", "foot_back_left", "foot_back_right")
"""The ant's foot sites: the centres of its shin capsules' lower end caps."""


def scene(
    config: TerrainConfig | None = None,
    robot: str = "ant",
    floor: str = "floor",
    feet: Sequence[str] = (),
    foot_radius: float = 0.05,
) -> tuple[mujoco.MjModel, Terrain]:
    """A registry scene with its floor replaced by the terrain of ``config``.

    The robot keeps its keyframes: a keyframe standing at the origin stands on tile
    (level 0, column 0), whose centre is the origin at height 0.

    Args:
      config: the terrain; None for :class:`TerrainConfig`'s defaults.
      robot: a scene in ``models/`` (see ``mjxrunner.models.list()``).
      floor: the name of the robot scene's floor geom, removed and replaced.
      feet: names of sites; each gets a collision sphere of ``foot_radius`` at the
        site, with the contact settings of the first colliding geom of the site's
        body, whose geoms then stop colliding. MJX-jax tests each geom against a
        grid window sized by its bounding radius, so small feet cost far less than
        long limbs (see :mod:`mjxrunner.kit.terrain`). For the ant, :data:`ANT_FEET`
        with the default radius puts the spheres exactly on the shin capsules' end
        caps: the feet touch as before, only a shin's side no longer does.
      foot_radius: radius of the foot spheres, in metres.

    Returns:
      ``(model, terrain)``.

    Raises:
      TypeError, ValueError: a bad config, an unknown robot, no geom ``floor``, or
        a foot site that does not exist or whose body has no colliding geom.
    """
    config = TerrainConfig() if config is None else config
    terrain = generate(config)
    spec = _robot_spec(robot, feet, foot_radius)
    old = spec.geom(floor)
    if old is None:
        raise ValueError(f"scene {robot!r} has no geom named {floor!r} to replace")
    geom = add_to_spec(spec, terrain, like=floor)
    spec.delete(old)
    _grid_material(spec, geom, config.tile_size)
    return spec.compile(), terrain


def flat_scene(
    robot: str = "ant", feet: Sequence[str] = ANT_FEET, foot_radius: float = 0.05
) -> mujoco.MjModel:
    """A registry scene on its own flat floor, with the sphere feet of :func:`scene`:
    the flat-ground twin of a terrain scene, so a policy meets the same contacts on
    both.

    Raises:
      TypeError, ValueError: an unknown robot, or a foot site that does not exist or
        whose body has no colliding geom.
    """
    return _robot_spec(robot, feet, foot_radius).compile()


def _robot_spec(robot: str, feet: Sequence[str], foot_radius: float) -> mujoco.MjSpec:
    """The scene ``robot`` as a spec, with sphere feet at the sites ``feet``."""
    checks.real(foot_radius, "foot_radius", positive=True)
    if isinstance(feet, str):
        raise TypeError("feet must be a sequence of site names, got a str")
    spec = mujoco.MjSpec.from_file(str(models.path(robot)))
    for name in feet:
        _sphere_foot(spec, name, foot_radius)
    return spec


def _grid_material(spec: mujoco.MjSpec, geom: mujoco.MjsGeom, tile_size: float) -> None:
    """A checker of 0.5 m squares with lines, so renders show slopes and steps."""
    texture = spec.add_texture(
        name="terrain_grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        mark=mujoco.mjtMark.mjMARK_EDGE,
        rgb1=[0.25, 0.35, 0.45],
        rgb2=[0.2, 0.3, 0.4],
        markrgb=[0.6, 0.65, 0.7],
        width=256,
        height=256,
    )
    material = spec.add_material(name="terrain_grid", texrepeat=[1.0, 1.0], texuniform=True)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = texture.name
    geom.material = material.name
    geom.rgba = [1, 1, 1, 1]  # the texture gives the colour


def _sphere_foot(spec: mujoco.MjSpec, site_name: str, radius: float) -> None:
    site = spec.site(site_name)
    if site is None:
        raise ValueError(f"no site named {site_name!r} for a foot")
    body = site.parent
    colliding = [g for g in body.geoms if g.contype or g.conaffinity]
    if not colliding:
        raise ValueError(f"the body of site {site_name!r} has no colliding geom to replace")
    like = colliding[0]
    foot = body.add_geom(
        name=site_name,
        type=mujoco.mjtGeom.mjGEOM_SPHERE,
        size=[radius, 0, 0],
        pos=site.pos,
        mass=0,  # the body's mass and inertia stay those of its geoms
    )
    for field in ("contype", "conaffinity", "condim", "friction", "solref", "solimp", "priority"):
        setattr(foot, field, getattr(like, field))
    foot.rgba = [0, 0, 0, 0]  # drawn by the limb it ends
    for g in colliding:
        g.contype, g.conaffinity = 0, 0


# --- the curriculum (JAX, per world) --------------------------------------------------------


@pytree_dataclass
class Curriculum:
    """Each world's place on the terrain.

    Attributes:
      level: ``(num_envs,)`` int32, the world's difficulty level.
      column: ``(num_envs,)`` int32, the world's column (terrain type), for life.
      spawn: ``(num_envs, 3)`` float32, where the current episode started: the
        tile's origin plus the world's random horizontal offset, z the ground.
    """

    level: jax.Array = world_field(0)
    column: jax.Array = world_field(0)
    spawn: jax.Array = world_field(1)


def _world_keys(keys: jax.Array, name: str = "keys") -> jax.Array:
    """``(n, 2)`` raw uint32 keys from raw or typed per-world keys."""
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        if keys.ndim != 1:
            raise ValueError(f"{name} must be (num_envs,) typed keys, got shape {keys.shape}")
        return jax.random.key_data(keys)
    if keys.ndim != 2 or keys.shape[1] != 2 or keys.dtype != jnp.uint32:
        raise ValueError(
            f"{name} must be (num_envs, 2) uint32 raw keys or (num_envs,) typed keys, "
            f"got shape {keys.shape} dtype {keys.dtype}"
        )
    return keys


def _check_worlds(n: int, **arrays: tuple[jax.Array, tuple[int, ...]]) -> None:
    for name, (value, core) in arrays.items():
        if jnp.shape(value) != (n, *core):
            raise ValueError(f"{name} must have shape {(n, *core)}, got {jnp.shape(value)}")


def _typed_key(key: jax.Array) -> jax.Array:
    """One world's key as a typed key, from a typed key or ``(2,)`` uint32 raw data."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def _level_draw(key: jax.Array, count: int) -> jax.Array:
    """``()`` int32 uniform in ``[0, count)`` from one world's typed key."""
    return jax.random.randint(key, (), 0, count).astype(jnp.int32)


def _next_level(
    key: jax.Array,
    level: jax.Array,
    walked: jax.Array,
    commanded: jax.Array,
    levels: int,
    up_distance: float,
    down_fraction: float,
) -> jax.Array:
    """One world's level after its episode (the rule of the module docstring)."""
    up = walked > up_distance
    down = (walked < down_fraction * commanded) & ~up
    new = level + up.astype(jnp.int32) - down.astype(jnp.int32)
    anywhere = _level_draw(key, levels)
    return jnp.where(new >= levels, anywhere, jnp.maximum(new, 0)).astype(jnp.int32)


def _spawn(
    key: jax.Array, level: jax.Array, column: jax.Array, origins: jax.Array, radius: float
) -> jax.Array:
    """``(3,)``: the origin of tile ``(level, column)`` plus a horizontal offset
    uniform in ``[-radius, radius]^2``."""
    offset = jax.random.uniform(key, (2,), jnp.float32, -1, 1)
    return origins[level, column] + jnp.concatenate([radius * offset, jnp.zeros(1)])


def _origins(origins: Any) -> jax.Array:
    if jnp.ndim(origins) != 3 or jnp.shape(origins)[2] != 3:
        raise ValueError(f"origins must be (levels, columns, 3), got {jnp.shape(origins)}")
    return jnp.asarray(origins, jnp.float32)


def initial_levels(keys: jax.Array, max_initial_level: int) -> jax.Array:
    """``(num_envs,)`` int32 levels, uniform in ``[0, max_initial_level]``, each
    from its world's key (``(num_envs, 2)`` raw or ``(num_envs,)`` typed)."""
    keys = _world_keys(keys)
    checks.count(max_initial_level, "max_initial_level", minimum=0)
    return jax.vmap(lambda k: _level_draw(_typed_key(k), max_initial_level + 1))(keys)


def world_columns(num_envs: int, columns: int) -> jax.Array:
    """``(num_envs,)`` int32: world ``i`` gets column ``i % columns``, so every
    column (and each type, in its proportion) gets worlds evenly."""
    checks.count(num_envs, "num_envs")
    checks.count(columns, "columns")
    return jnp.arange(num_envs, dtype=jnp.int32) % columns


def next_levels(
    keys: jax.Array,
    level: jax.Array,
    walked: jax.Array,
    commanded: jax.Array,
    levels: int,
    up_distance: float,
    down_fraction: float,
) -> jax.Array:
    """Levels after an episode: the rule of the module docstring.

    Args:
      keys: ``(num_envs, 2)`` raw or ``(num_envs,)`` typed per-world keys; a world
        that leaves the top level draws its new level from its own key.
      level: ``(num_envs,)`` int, the levels the episodes were played at.
      walked: ``(num_envs,)`` horizontal distance from spawn to the episode's end.
      commanded: ``(num_envs,)`` the distance the episode's command asked for
        (e.g. commanded speed times the episode's full duration).
      levels: number of levels.
      up_distance: walked farther than this moves up (``up_fraction * tile_size``).
      down_fraction: walked less than this times ``commanded`` moves down.

    Returns:
      ``(num_envs,)`` int32 levels in ``[0, levels)``.
    """
    keys = _world_keys(keys)
    n = keys.shape[0]
    _check_worlds(n, level=(level, ()), walked=(walked, ()), commanded=(commanded, ()))
    checks.count(levels, "levels")

    def one(key, level, walked, commanded):
        return _next_level(
            _typed_key(key), level, walked, commanded, levels, up_distance, down_fraction
        )

    return jax.vmap(one)(keys, jnp.asarray(level, jnp.int32), walked, commanded)


def spawn_points(
    keys: jax.Array, level: jax.Array, column: jax.Array, origins: jax.Array, radius: float
) -> jax.Array:
    """``(num_envs, 3)``: each world's tile origin ``origins[level, column]`` plus a
    horizontal offset uniform in ``[-radius, radius]^2`` from its own key.

    ``origins`` is :attr:`Terrain.origins`, ``(levels, columns, 3)``; the platform
    around each origin is flat, so z stays the ground height.
    """
    keys = _world_keys(keys)
    n = keys.shape[0]
    _check_worlds(n, level=(level, ()), column=(column, ()))
    origins = _origins(origins)
    return jax.vmap(lambda k, lv, c: _spawn(_typed_key(k), lv, c, origins, radius))(
        keys, level, column
    )


# --- one world: what a task's curriculum hooks call (the env vmaps them) ------------------


def start_world(
    key: jax.Array, world: jax.Array, origins: jax.Array, config: TerrainConfig
) -> Curriculum:
    """One world's :class:`Curriculum` at the start of a run (unbatched leaves:
    ``level`` and ``column`` ``()``, ``spawn`` ``(3,)``): a level uniform in
    ``[0, max_initial_level]``, column ``world % columns``, a spawn point on that
    tile. :func:`init` is this for every world.

    Args:
      key: the world's typed key (or ``(2,)`` raw key data).
      world: ``()`` int, the world's index in the batch.
      origins: ``(levels, columns, 3)``, :attr:`Terrain.origins`.
      config: the terrain's config.
    """
    k_level, k_spawn = jax.random.split(_typed_key(key))
    level = _level_draw(k_level, config.max_initial_level + 1)
    column = jnp.asarray(world, jnp.int32) % config.columns
    spawn = _spawn(k_spawn, level, column, _origins(origins), config.spawn_radius)
    return Curriculum(level=level, column=column, spawn=spawn)


def end_episode(
    state: Curriculum,
    key: jax.Array,
    position: jax.Array,
    commanded: jax.Array,
    origins: jax.Array,
    config: TerrainConfig,
) -> Curriculum:
    """One world's :class:`Curriculum` after its episode ended: its new level
    (the rule of the module docstring) and the spawn point of its next episode.
    :func:`end_episodes` is this for the worlds that ended.

    Args:
      state: the world's curriculum (unbatched).
      key: the world's typed key (or ``(2,)`` raw key data).
      position: ``(2 or 3,)`` where the robot ended (e.g. its root's position).
      commanded: ``()`` the distance the episode's command asked for.
      origins: ``(levels, columns, 3)``, :attr:`Terrain.origins`.
      config: the terrain's config.
    """
    k_level, k_spawn = jax.random.split(_typed_key(key))
    walked = jnp.linalg.norm(position[:2] - state.spawn[:2])
    level = _next_level(
        k_level,
        state.level,
        walked,
        commanded,
        config.levels,
        config.up_fraction * config.tile_size,
        config.down_fraction,
    )
    spawn = _spawn(k_spawn, level, state.column, _origins(origins), config.spawn_radius)
    return state.replace(level=level, spawn=spawn)


def init(keys: jax.Array, origins: jax.Array, config: TerrainConfig) -> Curriculum:
    """Every world's start: :func:`start_world` for world ``i`` with its key
    (``(num_envs, 2)`` raw or ``(num_envs,)`` typed)."""
    keys = _world_keys(keys)
    origins = _origins(origins)
    world = jnp.arange(keys.shape[0], dtype=jnp.int32)
    return jax.vmap(lambda k, w: start_world(k, w, origins, config))(keys, world)


def end_episodes(
    state: Curriculum,
    keys: jax.Array,
    done: jax.Array,
    position: jax.Array,
    commanded: jax.Array,
    origins: jax.Array,
    config: TerrainConfig,
) -> Curriculum:
    """The curriculum after the episodes of the worlds in ``done`` ended: their new
    levels and the spawn points of their next episodes (:func:`end_episode`). Other
    worlds are unchanged.

    Args:
      state: the current :class:`Curriculum`.
      keys: ``(num_envs, 2)`` raw or ``(num_envs,)`` typed per-world keys.
      done: ``(num_envs,)`` bool, the worlds whose episodes ended.
      position: ``(num_envs, 2 or 3)`` where each world's robot is at the end
        (e.g. the root body's position in the terminal state).
      commanded: ``(num_envs,)`` the distance each episode's command asked for.
      origins: ``(levels, columns, 3)``, :attr:`Terrain.origins`.
      config: the terrain's config (levels, fractions, spawn radius).
    """
    keys = _world_keys(keys)
    n = keys.shape[0]
    _check_worlds(n, level=(state.level, ()), done=(done, ()), commanded=(commanded, ()))
    if jnp.ndim(position) != 2 or jnp.shape(position)[0] != n or jnp.shape(position)[1] < 2:
        raise ValueError(f"position must be (num_envs, 2 or 3), got {jnp.shape(position)}")
    origins = _origins(origins)
    new = jax.vmap(lambda s, k, p, c: end_episode(s, k, p, c, origins, config))(
        state, keys, position, commanded
    )
    pick = jax.vmap(lambda d, a, b: jnp.where(d, a, b))  # scalar done per world
    return jax.tree.map(lambda a, b: pick(done, a, b), new, state)


__all__: Sequence[str] = (
    "ANT_FEET",
    "TYPES",
    "Curriculum",
    "Terrain",
    "TerrainConfig",
    "add_to_spec",
    "column_types",
    "difficulty",
    "flat_scene",
    "end_episode",
    "end_episodes",
    "generate",
    "ground_height",
    "init",
    "initial_levels",
    "next_levels",
    "scene",
    "spawn_points",
    "start_world",
    "world_columns",
)
