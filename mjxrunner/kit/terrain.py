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

This module builds the scene (:func:`scene`, :func:`add_to_spec`); the config and the
heightfield live in :mod:`mjxrunner.kit.terrain_grid`, the curriculum in
:mod:`mjxrunner.kit.terrain_curriculum`, and every name of theirs above is importable
from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

from mjxrunner.engine import checks, models
from mjxrunner.kit.terrain_curriculum import (
    Curriculum,
    end_episode,
    end_episodes,
    init,
    initial_levels,
    next_levels,
    spawn_points,
    start_world,
    world_columns,
)
from mjxrunner.kit.terrain_grid import (
    TYPES,
    Terrain,
    TerrainConfig,
    column_types,
    difficulty,
    generate,
    ground_height,
)

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
