"""The terrain generator, its scene, the curriculum's rule, and the ant on it
against native MuJoCo."""

import copy
import dataclasses
import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import CompileCounter, MultiEnvRunner
from mjxrunner.engine import models
from mjxrunner.kit import terrain
from mjxrunner.kit.terrain import TerrainConfig

# A small terrain: every type once, 4 levels; the generator is pure NumPy, so tests
# that only read heights share one.
CONFIG = TerrainConfig(levels=4, columns=6, seed=3)
RES = CONFIG.resolution
M = round(CONFIG.tile_size / RES)  # grid steps per tile


@pytest.fixture(scope="module")
def ground():
    return terrain.generate(CONFIG)


def tile(t: terrain.Terrain, level: int, column: int) -> np.ndarray:
    """``(M + 1, M + 1)`` heights of one tile, rows along y."""
    b = round(CONFIG.border / RES)
    r0, c0 = b + column * M, b + level * M
    return t.heights[r0 : r0 + M + 1, c0 : c0 + M + 1]


def column_of(t: terrain.Terrain, kind: str) -> int:
    return t.column_types.index(kind)


# --- config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"levels": 0}, ValueError, "levels must be >= 1"),
        ({"levels": 2.0}, TypeError, "levels must be an int"),
        ({"tile_size": 4.05}, ValueError, "whole multiple of resolution"),
        ({"tile_size": 4.1}, ValueError, "even multiple"),
        ({"platform": 4.0}, ValueError, "smaller than tile_size"),
        ({"spawn_radius": 0.7}, ValueError, "half the platform"),
        ({"slope_deg": (30.0, 10.0)}, ValueError, "easiest <= hardest"),
        ({"step_height": 0.1}, TypeError, "tuple"),
        ({"max_initial_level": 6}, ValueError, "< levels"),
        ({"proportions": (("lava", 1.0),)}, ValueError, "unknown terrain type 'lava'"),
        ({"proportions": (("flat", 0.0),)}, ValueError, "positive weight"),
        ({"proportions": (("flat", 10.0), ("rough", 0.1))}, ValueError, "no column for"),
    ],
)
def test_config_refuses_bad_values(change, error, match):
    with pytest.raises(error, match=match):
        dataclasses.replace(TerrainConfig(), **change)


def test_columns_follow_the_proportions():
    assert terrain.column_types(TerrainConfig(columns=6)) == terrain.TYPES
    config = TerrainConfig(columns=8, proportions=(("flat", 1.0), ("stairs_up", 3.0)))
    assert terrain.column_types(config) == ("flat",) * 2 + ("stairs_up",) * 6


# --- the heightfield --------------------------------------------------------------------


def test_layout_origins_and_border(ground):
    b = round(CONFIG.border / RES)
    assert ground.heights.shape == (6 * M + 2 * b + 1, 4 * M + 2 * b + 1)
    assert ground.origins.shape == (4, 6, 3)
    np.testing.assert_allclose(ground.origins[0, 0], 0.0, atol=1e-12)  # tile (0, 0) at 0
    np.testing.assert_allclose(np.diff(ground.origins[:, 0, 0]), CONFIG.tile_size)  # x
    np.testing.assert_allclose(np.diff(ground.origins[0, :, 1]), CONFIG.tile_size)  # y
    # the border is flat at 0, and so is every tile's edge: tiles meet without cliffs
    for band in (ground.heights[:b], ground.heights[-b:], ground.heights[:, :b]):
        assert not band.any()
    for level in range(4):
        for column, kind in enumerate(ground.column_types):
            edge = np.concatenate(
                [
                    tile(ground, level, column)[[0, -1]].ravel(),
                    tile(ground, level, column)[:, [0, -1]].ravel(),
                ]
            )
            assert not edge.any(), (level, kind)


def test_spawn_platform_is_flat_at_the_origin_height(ground):
    rng = np.random.default_rng(0)
    for level in range(4):
        for column in range(6):
            origin = ground.origins[level, column]
            xy = origin[:2] + rng.uniform(-CONFIG.platform / 2, CONFIG.platform / 2, (50, 2))
            np.testing.assert_allclose(ground.surface_height(xy), origin[2], atol=1e-12)


def test_flat_is_flat(ground):
    for level in range(4):
        assert not tile(ground, level, column_of(ground, "flat")).any()


@pytest.mark.parametrize("kind, sign", [("slope_up", -1), ("slope_down", 1)])
def test_slopes_have_the_asked_angle(ground, kind, sign):
    for level in range(4):
        heights = tile(ground, level, column_of(ground, kind))
        angle = terrain.difficulty(CONFIG, "slope_deg", level)
        # along the tile's centre line, from the platform's rim to the edge
        line = heights[M // 2, M // 2 + round(CONFIG.platform / 2 / RES) :]
        grade = -np.diff(line) / RES * sign
        np.testing.assert_allclose(grade, math.tan(math.radians(angle)), atol=1e-9)
        centre = ground.origins[level, column_of(ground, kind), 2]
        expected = math.tan(math.radians(angle)) * (CONFIG.tile_size - CONFIG.platform) / 2
        assert centre == pytest.approx(sign * expected)
    assert terrain.difficulty(CONFIG, "slope_deg", 3) == CONFIG.slope_deg[1]


@pytest.mark.parametrize("kind, sign", [("stairs_up", -1), ("stairs_down", 1)])
def test_stairs_have_the_asked_step_height(ground, kind, sign):
    width = round(CONFIG.step_width / RES)
    half = round(CONFIG.platform / 2 / RES)
    n = (M // 2 - half) // width
    for level in range(4):
        heights = tile(ground, level, column_of(ground, kind))
        step = terrain.difficulty(CONFIG, "step_height", level)
        levels = np.unique(np.round(heights / step, 9))
        np.testing.assert_allclose(np.sort(sign * levels), np.arange(n + 1), atol=1e-9)
        line = sign * heights[M // 2, M // 2 :]  # centre to edge
        jumps = -np.diff(line)
        assert np.allclose(jumps[jumps > 0], step) and (jumps > 0).sum() == n
        # each tread is step_width deep: risers are width samples apart
        np.testing.assert_array_equal(np.diff(np.flatnonzero(jumps > 0)), width)
    assert step == pytest.approx(CONFIG.step_height[1])


def test_rough_stays_within_its_amplitude_and_the_seed_fixes_it(ground):
    column = column_of(ground, "rough")
    for level in range(4):
        heights = tile(ground, level, column)
        amplitude = terrain.difficulty(CONFIG, "rough_amplitude", level)
        assert np.abs(heights).max() <= amplitude + 1e-12
        assert np.abs(heights).max() > 0.5 * amplitude  # really rough
    again = terrain.generate(CONFIG)
    np.testing.assert_array_equal(again.heights, ground.heights)
    other = terrain.generate(dataclasses.replace(CONFIG, seed=4))
    assert not np.array_equal(tile(other, 2, column), tile(ground, 2, column))
    others = [c for c in range(6) if c != column]
    for level in range(4):
        for c in others:  # the seed moves the rough tiles only
            np.testing.assert_array_equal(tile(other, level, c), tile(ground, level, c))


# --- the scene ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ant_scene():
    return terrain.scene(CONFIG)


def test_scene_puts_the_heights_where_the_terrain_says(ant_scene):
    """Vertical rays onto MuJoCo's compiled heightfield hit ``surface_height``, and
    the terrain took over the floor's contact settings."""
    m, t = ant_scene
    ant = models.load("ant")
    assert m.nhfield == 1 and mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor") < 0
    g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "terrain")
    for field in ("geom_contype", "geom_conaffinity", "geom_condim", "geom_friction"):
        np.testing.assert_array_equal(getattr(m, field)[g], getattr(ant, field)[0])
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    rng = np.random.default_rng(1)
    lo, hi = t.corner, t.corner + (np.array(t.heights.shape[::-1]) - 1) * RES
    xy = rng.uniform(lo, hi, (500, 2))
    down = np.array([0.0, 0.0, -1.0])
    hit = [5.0 - mujoco.mj_rayHfield(m, d, g, np.array([x, y, 5.0]), down) for x, y in xy]
    np.testing.assert_allclose(hit, t.surface_height(xy), atol=1e-6)
    assert np.ptp(hit) > 0.5  # the rays met hills and pits, not only flat ground
    # the JAX twin, as a task would call it under jit (float32)
    on_device = jax.jit(terrain.ground_height, static_argnums=2)(
        jnp.asarray(t.heights, jnp.float32),
        jnp.asarray(t.corner, jnp.float32),
        RES,
        jnp.asarray(xy, jnp.float32),
    )
    np.testing.assert_allclose(on_device, hit, atol=1e-5)


def test_sphere_feet_replace_the_shins_contacts():
    m, _ = terrain.scene(CONFIG, feet=terrain.ANT_FEET)
    ant = models.load("ant")
    np.testing.assert_array_equal(m.body_mass, ant.body_mass)  # the feet weigh nothing
    for site in terrain.ANT_FEET:
        foot = m.geom(site)
        shin = m.geom(site.replace("foot", "shin"))
        assert foot.size[0] == 0.05 and foot.contype[0] == 1 and not shin.contype[0]
        np.testing.assert_allclose(foot.pos, m.site(site).pos)
    with pytest.raises(ValueError, match="no site named 'paw'"):
        terrain.scene(CONFIG, feet=["paw"])


# --- the curriculum -----------------------------------------------------------------------


def keys(n, seed=0):
    return jax.random.key_data(jax.random.split(jax.random.key(seed), n))


def test_levels_move_exactly_by_the_rule():
    L, tile_half = 5, 2.0
    # world:       up    down  stay  stay  clamp  top-up  top-stay top-down
    level = jnp.array([1, 2, 3, 3, 0, 4, 4, 4])
    walked = jnp.array([2.1, 0.4, 1.0, 2.0, 0.1, 3.0, 1.5, 0.2])
    commanded = jnp.array([5.0, 1.0, 1.9, 4.0, 5.0, 5.0, 2.0, 1.0])
    new = np.asarray(terrain.next_levels(keys(8), level, walked, commanded, L, tile_half, 0.5))
    assert new.dtype == np.int32
    np.testing.assert_array_equal(new[[0, 1, 2, 3, 4, 6, 7]], [2, 1, 3, 3, 0, 4, 3])
    assert 0 <= int(new[5]) < L
    # walking far is up even when short of half the command (up wins over down)
    assert (
        int(
            terrain.next_levels(
                keys(1), jnp.array([1]), jnp.array([2.5]), jnp.array([10.0]), L, tile_half, 0.5
            )[0]
        )
        == 2
    )


def test_top_level_winners_scatter_over_all_levels_from_their_own_keys():
    n, L = 400, 5
    level = jnp.full(n, L - 1)
    args = (jnp.full(n, 3.0), jnp.full(n, 1.0), L, 2.0, 0.5)
    new = np.asarray(terrain.next_levels(keys(n), level, *args))
    assert set(new) == set(range(L))  # uniform over [0, L): every level drawn
    assert np.abs(np.bincount(new) / n - 1 / L).max() < 0.08
    # a world's draw depends on its own key only
    part = terrain.next_levels(keys(n)[:10], level[:10], args[0][:10], args[1][:10], *args[2:])
    np.testing.assert_array_equal(part, new[:10])


def test_initial_levels_columns_and_spawns(ground):
    n = 240
    level = np.asarray(terrain.initial_levels(keys(n), 2))
    assert set(level) == {0, 1, 2}
    column = terrain.world_columns(n, 6)
    np.testing.assert_array_equal(np.bincount(np.asarray(column)), [40] * 6)
    spawn = np.asarray(terrain.spawn_points(keys(n, 1), level, column, ground.origins, 0.1))
    origin = ground.origins[level, np.asarray(column)]
    offset = spawn - origin
    assert np.abs(offset[:, :2]).max() <= 0.1 + 1e-6 and np.abs(offset[:, :2]).max() > 0.09
    np.testing.assert_allclose(offset[:, 2], 0, atol=1e-6)
    assert len(np.unique(offset[:, 0])) == n  # each world its own draw
    with pytest.raises(ValueError, match=r"column must have shape \(240,\)"):
        terrain.spawn_points(keys(n), level, column[:10], ground.origins, 0.1)
    with pytest.raises(ValueError, match="raw keys"):
        terrain.initial_levels(jnp.zeros((n, 3), jnp.uint32), 2)


def test_end_episodes_moves_only_ended_worlds_and_compiles_once(ground):
    config = dataclasses.replace(CONFIG, max_initial_level=1)
    origins = jnp.asarray(ground.origins, jnp.float32)
    state = terrain.init(keys(4), origins, config)
    state = state.replace(level=jnp.array([1, 1, 1, 1], jnp.int32))
    state = state.replace(spawn=origins[state.level, state.column])
    step = jax.jit(terrain.end_episodes, static_argnames="config")
    # world 0 walked 3 m (up), 1 stood still (down), 2 walked 3 m but is not done
    position = state.spawn + jnp.array([[3.0, 0, 0], [0, 0, 0], [3.0, 0, 0], [1.5, 0, 0]])
    done = jnp.array([True, True, False, True])
    commanded = jnp.array([4.0, 4.0, 4.0, 2.0])
    new = step(state, keys(4, 5), done, position, commanded, origins, config)
    np.testing.assert_array_equal(new.level, [2, 0, 1, 1])
    np.testing.assert_array_equal(new.column, state.column)
    np.testing.assert_array_equal(new.spawn[2], state.spawn[2])  # not done: kept
    expected = origins[new.level[:2], new.column[:2]]
    assert np.abs(np.asarray(new.spawn[:2] - expected)[:, :2]).max() <= config.spawn_radius
    args = jax.block_until_ready((keys(4, 6), ~done, position * 0.5, commanded + 1))
    with CompileCounter() as c:  # new values, same shapes: no new program
        jax.block_until_ready(step(new, *args[:2], *args[2:], origins, config))
    assert c.count == 0


# --- physics: the ant on terrain, MJX against native MuJoCo -------------------------------
#
# The ant with sphere feet (terrain.ANT_FEET), the scene a locomotion task should use
# (a fifth of the capsules' cost). MJX-jax and native MuJoCo collide a heightfield
# differently: MJX keeps at most 4 contacts per geom pair from a fixed grid window,
# native MuJoCo one per touching prism (6 for a foot resting on a grid vertex). With
# other contact sets the soft contacts push differently, so unlike on a plane
# (tests/test_parity.py: ant 1.9e-4 over 100 steps) the two part soon after a foot
# lands, on the flat tile too. Measured here, worst |qpos error| over the 5 worlds:
# standing (zero controls) 1e-4 by step 20, 8e-3 by step 40 (feet landing on step
# edges and slopes), then up to 3e-2 as the passive legs fold and slip; walking
# (smooth random controls) 1.5e-2 by step 20, decimetres by step 100. So:
# * standing, the landing is compared step by step (40 steps, ``LANDING_ATOL``: a
#   heightfield misplaced by one sample is 5 cm off on these slopes, one transposed
#   decimetres), and the rest states by where the feet stand and how high the torso
#   rests (measured: within 2.2 mm and 1.4 mm of native);
# * walking, by what both must show: no foot sinks into the ground (least foot
#   height 2.4 cm native, 2.1 cm MJX over 150 steps, radius 5 cm), the torso stays
#   up, and the ants move alike far.

LANDING_STEPS, LANDING_ATOL = 40, 3e-2
REST_ATOL = 5e-3
SETTLE_STEPS = 150
FOOT_RADIUS = 0.05  # the shin capsules' radius: their end caps are the feet
FEET = [f"foot_{s}" for s in ("front_left", "front_right", "back_left", "back_right")]
# (type, offset from the tile's centre): at the hardest level, feet over step edges,
# on the slopes, on the rough ground, and one ant on the flat tile
TILES = [
    ("flat", (0.0, 0.0)),
    ("stairs_down", (0.55, 0.3)),
    ("slope_down", (0.6, -0.4)),
    ("rough", (0.3, 0.2)),
    ("slope_up", (0.5, 0.3)),
]


def feet(m, qpos):
    """``(4, 3)`` world positions of the ant's foot sites at ``qpos``."""
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(m, d)
    return d.site_xpos[[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, f) for f in FEET]]


def starts(m, t):
    """``(len(TILES), nq)``: the ant's keyframe moved over each tile, its lowest
    foot 5 cm above the ground beneath it (the slopes rise under some feet)."""
    out = []
    for kind, offset in TILES:
        origin = t.origins[CONFIG.levels - 1, column_of(t, kind)]
        q = m.key_qpos[0].copy()
        q[:2] = origin[:2] + offset
        q[2] = 0.0
        p = feet(m, q)
        q[2] = (t.surface_height(p[:, :2]) - p[:, 2]).max() + FOOT_RADIUS + 0.05
        out.append(q)
    return np.stack(out)


@pytest.fixture(scope="module")
def rollouts():
    """Native and MJX-jax ``qpos`` ``(steps, worlds, nq)`` from :func:`starts`,
    for zero controls and for smooth random ones."""
    m, t = terrain.scene(CONFIG, feet=terrain.ANT_FEET)
    q0 = starts(m, t)
    n = len(q0)
    phase = np.arange(m.nu)[None, None, :] + np.arange(n)[None, :, None]
    ctrl = {
        "stand": np.zeros((SETTLE_STEPS, n, m.nu)),
        "walk": 0.6 * np.sin(0.04 * np.arange(SETTLE_STEPS)[:, None, None] + phase),
    }
    mx = mjx.put_model(m, impl="jax")
    d0 = mjx.make_data(m, impl="jax")

    @jax.jit
    def roll(qpos, ctrl):
        def body(d, u):
            d = jax.vmap(lambda d, u: mjx.step(mx, d.replace(ctrl=u)))(d, u)
            return d, d.qpos

        data = jax.vmap(lambda q: d0.replace(qpos=q))(qpos)
        return jax.lax.scan(body, data, ctrl)[1]

    out = {}
    for name, u in ctrl.items():
        native = np.zeros((SETTLE_STEPS, n, m.nq))
        for w in range(n):
            d = mujoco.MjData(m)
            d.qpos[:] = q0[w]
            for k in range(SETTLE_STEPS):
                d.ctrl[:] = u[k, w]
                mujoco.mj_step(m, d)
                native[k, w] = d.qpos
        ours = np.asarray(roll(jnp.asarray(q0, jnp.float32), jnp.asarray(u, jnp.float32)))
        out[name] = native, ours
    return m, t, q0, out


def foot_gaps(m, t, qpos):
    """Height of each foot site above the ground beneath it, ``(..., 4)``."""
    p = np.stack([feet(m, q) for q in qpos.reshape(-1, m.nq)])
    return (p[..., 2] - t.surface_height(p[..., :2])).reshape(*qpos.shape[:-1], 4)


def test_standing_ant_lands_as_native_mujoco_does(rollouts):
    _, _, q0, out = rollouts
    native, ours = out["stand"]
    err = np.abs(ours - native).max(axis=(1, 2))
    print(f"stand: worst |qpos - native| by step 20/40: {err[19]:.1e} {err[39]:.1e}")
    assert err[:LANDING_STEPS].max() < LANDING_ATOL
    # the ants really fell onto different ground
    assert np.ptp(native[LANDING_STEPS, :, 2] - q0[:, 2]) > 0.05


def test_standing_ant_rests_its_feet_on_the_heightfield(rollouts):
    """At rest, the feet that carry the ant are one radius from the ground: ``radius``
    above it on flat treads, ``radius / cos(slope)`` on the slopes; MJX and native
    agree on each foot and on the torso's height."""
    m, t, _, out = rollouts
    native, ours = out["stand"]
    slope = 1 / math.cos(math.radians(CONFIG.slope_deg[1]))
    gaps = foot_gaps(m, t, native[-1]), foot_gaps(m, t, ours[-1])
    for w, (kind, _) in enumerate(TILES):
        for gap in gaps:
            low = np.sort(gap[w])[:3]  # three feet or more carry it
            assert low.min() > FOOT_RADIUS - 2e-3, (kind, gap[w])
            assert low.max() < FOOT_RADIUS * slope + 2e-3, (kind, gap[w])
    np.testing.assert_allclose(gaps[1], gaps[0], atol=REST_ATOL)
    np.testing.assert_allclose(ours[-1, :, 2], native[-1, :, 2], atol=REST_ATOL)


def test_walking_ant_stays_on_the_terrain_in_both_engines(rollouts):
    m, t, q0, out = rollouts
    native, ours = out["walk"]
    moved = []
    for source in (native, ours):
        gaps = foot_gaps(m, t, source[::5])
        assert gaps.min() > 0.01  # at most 4 cm into the ground at an impact
        torso = source[::5, :, 2] - t.surface_height(source[::5, :, :2])
        assert torso.min() > 0.25  # up on its legs
        moved.append(np.linalg.norm(source[-1, :, :2] - q0[:, :2], axis=1).mean())
    print(f"walk: mean distance native {moved[0]:.3f} m, MJX {moved[1]:.3f} m")
    assert min(moved) > 0.05 and max(moved) < 2 * min(moved)


@pytest.mark.parametrize("kind", ["stairs_down", "slope_up"])
def test_standing_ant_on_warp_rests_where_native_does(rollouts, kind):
    """impl "warp" collides heightfields too (up to 4 contacts per pair, from the
    prisms under the geom's bounding box). Measured: landing within 2.2e-3
    (stairs) and 4.9e-3 (slope) of native over 40 steps, feet at rest within 2 mm."""
    m, t, q0, out = rollouts
    w = [k for k, _ in TILES].index(kind)
    m = copy.deepcopy(m)  # the module's model keeps its keyframe
    m.key_qpos[0] = q0[w]
    runner = MultiEnvRunner(m, 1, impl="warp", keyframe=0)
    qpos, _ = runner.rollout(np.zeros((SETTLE_STEPS, 1, m.nu)), SETTLE_STEPS)
    qpos = np.asarray(qpos)[:, 0]
    native = out["stand"][0][:, w]
    assert np.abs(qpos[:LANDING_STEPS] - native[:LANDING_STEPS]).max() < LANDING_ATOL
    np.testing.assert_allclose(
        foot_gaps(m, t, qpos[-1]), foot_gaps(m, t, native[-1]), atol=REST_ATOL
    )
    assert abs(qpos[-1, 2] - native[-1, 2]) < REST_ATOL
    assert not runner.health.overflow.any()
