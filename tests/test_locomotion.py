"""The sim-to-real kit composed into tasks: a curriculum through the env's restarts,
the ant's velocity-tracking task, bit-for-bit runs, sharded resets, compiles and
checkpoints with every term on.

Compiles are the cost here. The ant's env step takes a minute or more to compile on
2 cores, so the env's paths (autoreset in each mode, sharding, checkpoints,
recompiles, impl "warp") run on a small task composed the same way: a puck on a
terrain with every term on (commands and last action in the task state, noise and
history, latency, pushes, a curriculum over the terrain's levels). The ant's task is
checked through ``reset`` and ``reset_worlds`` and its functions on single worlds.

What is checked here is the env's bookkeeping, the same for every impl, so the envs
run on impl "c" (:data:`IMPL`: MuJoCo's C step, no physics compiled); test_native_doors
checks this puck's physics on impl "c" against native ``mj_step``. Two paths are
another impl's alone: impl "warp" steps the puck on the heightfield, and splitting
the worlds over two devices (impl "c" spreads them over threads) runs on impl "jax",
through ``reset`` and ``reset_worlds`` (no physics step compiled).
"""

import conftest
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import CompileCounter
from mjxrunner.engine import models
from mjxrunner.engine.events import Latency, Pushes
from mjxrunner.kit import terrain
from mjxrunner.kit.observations import Noise, ObsConfig
from mjxrunner.rl import env as mjxenv
from mjxrunner.tasks import Task, locomotion

# --- a puck on a terrain, with every term -------------------------------------------------

GROUND = terrain.TerrainConfig(
    tile_size=2.0,
    levels=4,
    columns=2,
    border=0.5,
    platform=0.4,
    proportions=(("flat", 1.0), ("stairs_down", 1.0)),
    max_initial_level=3,
)
# The impl of the envs here but the two-device and warp checks' (see above).
IMPL = "c"
STEPS = 20  # episode length; the puck's timestep is 0.01 s
UP = GROUND.up_fraction * GROUND.tile_size  # walked farther: up a level
N = 4
SCENE, TILES = terrain.scene(GROUND, robot="puck")
# The keyframe 1 cm up: a sphere resting exactly on a grid vertex touches six prisms
# in native MuJoCo, more contacts than MJX keeps for the pair (4), so the native start
# that env.make forwards would not fit; every episode starts 1 cm above its spawn.
LIFT = 0.01
SCENE.key_qpos[0, 2] = LIFT
SCENE_MJB = models.mjb_bytes(SCENE)
ORIGINS = TILES.origins.astype(np.float32)


def build_scene():
    return models.from_mjb(SCENE_MJB)


def observe(model, data, info):
    return {"velocity": data.qvel[:2], "command": info["command"], "action": info["action"]}


def initial_info(model, data, key):
    dtype = data.qpos.dtype
    return {
        "command": jax.random.uniform(key, (2,), dtype, -0.5, 0.5),
        "action": jnp.zeros(2, dtype),
    }


def update_info(model, data, action, next_data, info, key):
    return {**info, "action": action}


def reward(model, data, action, next_data, info):
    return jnp.exp(-jnp.sum((info["command"] - next_data.qvel[:2]) ** 2) / 0.25)


def never(model, data, info):
    return jnp.zeros((), bool)


def start(model, data, key, place):
    """At the world's spawn point (the puck's joints are world x, y, z), jittered by up
    to 1 cm."""
    jitter = jax.random.uniform(key, (2,), data.qpos.dtype, -0.01, 0.01)
    at = place.spawn.astype(data.qpos.dtype) + jnp.concatenate([jitter, jnp.zeros(1)])
    return data.replace(qpos=data.qpos + at)


def initial_curriculum(model, key, world):
    return terrain.start_world(key, world, ORIGINS, GROUND)


def update_curriculum(model, data, info, place, key):
    commanded = jnp.linalg.norm(info["command"]) * STEPS * model.opt.timestep
    return terrain.end_episode(place, key, data.qpos[:3], commanded, ORIGINS, GROUND)


PUCK = Task(
    name="test_puck_on_terrain",
    model=build_scene,
    observation=observe,
    reward=reward,
    terminated=never,
    initial_state=start,
    max_episode_steps=STEPS,
    keyframe="home",
    forward_on_reset=False,
    obs_config=ObsConfig(noise={"velocity": Noise(std=0.05)}, history={"velocity": 3}),
    initial_info=initial_info,
    update_info=update_info,
    initial_curriculum=initial_curriculum,
    update_curriculum=update_curriculum,
)
EVENTS = {
    "latency": Latency(0, 2),
    "pushes": Pushes(interval=(3, 6), velocity=((-0.3, 0.3),), joint="x"),  # along x
}
ACTIONS = np.random.default_rng(0).uniform(-1, 1, (45, N, 2)).astype(np.float32)
STANDING = np.array([0.0, 0.0, 0.5])  # the ant's keyframe root above its spawn


def with_places(state, level, qpos, command=None, qvel=None):
    """``state`` with each world at ``level`` (spawn at the tile's centre), its puck at
    ``qpos`` relative to that spawn, and optionally its command and velocity."""
    spawn = ORIGINS[level, np.asarray(state.curriculum.column)]
    return conftest.on_tiles(state, level, spawn, spawn + qpos, command, qvel)


def ending(state, worlds):
    """``state`` whose worlds in ``worlds`` reach the time limit at the next step."""
    length = np.where(np.isin(np.arange(N), worlds), STEPS - 1, 0)
    return mjxenv.with_episode_length(state, length)


def check_spawned(state, worlds):
    """The worlds' spawns are on their tiles and their pucks start there."""
    c = jax.device_get(state.curriculum)
    qpos = np.asarray(state.runner.data.qpos)
    for w in worlds:
        tile = ORIGINS[c.level[w], c.column[w]]
        assert np.abs(c.spawn[w][:2] - tile[:2]).max() <= GROUND.spawn_radius + 1e-6
        assert c.spawn[w][2] == tile[2]
        assert np.abs(qpos[w, :2] - c.spawn[w][:2]).max() <= 0.01 + 1e-6
        np.testing.assert_allclose(qpos[w, 2], c.spawn[w][2] + LIFT, atol=1e-6)


@pytest.fixture(scope="module")
def env():
    return mjxenv.make(PUCK, N, autoreset="same_step", impl=IMPL, **EVENTS)


@pytest.fixture(scope="module")
def first(env):
    """The first state of seed 1, after compiling reset, step and reset_worlds."""
    state = mjxenv.jit_reset(env, jax.random.key(1))
    mjxenv.jit_step(env, state, ACTIONS[0])
    mjxenv.jit_reset_worlds(env, state, np.ones(N, bool))
    return state


def run(env, key, steps=45):
    """``steps`` steps of :data:`ACTIONS` from ``reset(key)``: the states, in order."""
    states = [mjxenv.jit_reset(env, key)]
    for t in range(steps):
        states.append(mjxenv.jit_step(env, states[-1], ACTIONS[t]))
    return states


def assert_same(a, b):
    for (path, x), y in zip(
        jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str(path))


def test_reset_spreads_worlds_over_columns_and_levels(env, first):
    c = jax.device_get(first.curriculum)
    np.testing.assert_array_equal(c.column, np.arange(N) % GROUND.columns)
    assert ((c.level >= 0) & (c.level <= GROUND.max_initial_level)).all()
    check_spawned(first, range(N))
    again = mjxenv.jit_reset(env, jax.random.key(2))
    assert not np.array_equal(again.curriculum.spawn, first.curriculum.spawn)


def test_autoreset_moves_levels_by_the_rule(env, first):
    # world 0 walked past half a tile (up); 1 stood still under a command (down);
    # 2 is mid-episode (kept); 3 had no command (stays, at level 0)
    level = np.array([1, 1, 2, 0])
    qpos = np.array([[UP + 0.2, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    command = np.array([[0.5, 0], [0.5, 0], [0.5, 0], [0, 0]])
    state = ending(with_places(first, level, qpos, command), [0, 1, 3])
    after = mjxenv.jit_step(env, state, np.zeros((N, 2)))
    np.testing.assert_array_equal(after.final_mask, [True, True, False, True])
    np.testing.assert_array_equal(after.curriculum.level, [2, 0, 2, 0])
    np.testing.assert_array_equal(after.curriculum.column, first.curriculum.column)
    np.testing.assert_array_equal(after.curriculum.spawn[2], state.curriculum.spawn[2])
    check_spawned(after, [0, 1, 3])


def test_each_mode_judges_the_state_its_episode_ended_in(env, first):
    """Just short of the up distance, moving fast: the step that ends the episode
    carries the puck past it, and "same_step" judges that state; "next_step" judges
    the same state too (the last step's), not the one its restarting step reaches."""
    level = np.full(N, 1)
    qpos = np.zeros((N, 3))
    qpos[0, 0] = UP - 0.05
    qvel = np.zeros((N, 3))
    qvel[0, 0] = 10.0  # 0.1 m per step
    state = with_places(first, level, qpos, np.full((N, 2), 0.1), qvel)

    same = mjxenv.jit_step(env, ending(state, [0]), np.zeros((N, 2)))
    assert same.final_mask[0] and int(same.curriculum.level[0]) == 2

    nxt = env.with_autoreset("next_step")
    ended = mjxenv.jit_step(nxt, ending(state, [0]), np.zeros((N, 2)))
    assert ended.done[0] and int(ended.curriculum.level[0]) == 1  # not restarted yet
    # its last state: just short again (the restarting step would carry it past)
    ended = with_places(ended, level, qpos, None, qvel)
    restarted = mjxenv.jit_step(nxt, ended, np.zeros((N, 2)))
    assert int(restarted.episode_length[0]) == 0
    assert int(restarted.curriculum.level[0]) == 1  # walked < UP, > half the command
    check_spawned(restarted, [0])


def test_reset_worlds_moves_the_chosen_worlds(env, first):
    level = np.array([3, 1, 1, 2])
    qpos = np.array([[UP + 0.2, 0, 0], [UP + 0.2, 0, 0], [0, 0, 0], [0, 0, 0]])
    state = with_places(first, level, qpos, np.full((N, 2), 0.5))
    after = mjxenv.jit_reset_worlds(env, state, np.array([True, True, False, True]))
    new = np.asarray(after.curriculum.level)
    # world 0 leaves the top level for one drawn from its own stream; 1 goes up;
    # 2 was not reset; 3 stood still under a command and goes down
    assert 0 <= new[0] < GROUND.levels
    np.testing.assert_array_equal(new[1:], [2, 1, 1])
    check_spawned(after, [0, 1, 3])


def test_the_same_seed_reproduces_every_term(env):
    states = run(env, jax.random.key(5))
    assert_same(run(env, jax.random.key(5))[-1], states[-1])
    # every term was at work: restarts moved levels, delays differ, pushes happened,
    # the noise hides the exact velocity, commands differ per world
    levels = np.stack([np.asarray(s.curriculum.level) for s in states])
    assert (levels != levels[0]).any()
    assert np.asarray(states[-1].stats.completed).min() >= 2
    delays = np.stack([np.asarray(s.runner.latency.delay) for s in states])
    assert len(np.unique(delays)) > 1
    assert sum(np.asarray(s.runner.pushes.pushed).sum() for s in states) >= N
    last = states[-1]
    exact = np.asarray(last.runner.data.qvel[:, :2])
    assert not np.allclose(np.asarray(last.obs["velocity"])[:, -2:], exact, atol=1e-3)
    assert len(np.unique(np.asarray(states[0].info["command"])[:, 0])) == N


NOISY = ("obs", "final_obs", "history")  # the env state's fields that hold noisy values


def assert_same_but_noise(a, b):
    """:func:`assert_same`, but the noisy observations to float32 rounding: XLA
    vectorizes 2 worlds per device differently from 4 on one, so a noisy value may
    round differently in the last bit (see docs/training.md, restart slots)."""
    bare = dict.fromkeys(NOISY)
    assert_same(a.replace(**bare), b.replace(**bare))
    for field in NOISY:
        x, y = getattr(a, field), getattr(b, field)
        for (path, u), v in zip(
            jax.tree_util.tree_leaves_with_path(x), jax.tree.leaves(y), strict=True
        ):
            np.testing.assert_allclose(
                np.asarray(u), np.asarray(v), rtol=1e-6, err_msg=f"{field}{path}"
            )


def test_two_devices_reset_and_move_the_curriculum_as_one():
    """Split over two devices (impl "jax"), reset and reset_worlds give one device's
    states: the curriculum's columns, levels and spawns, the starts, the commands."""
    assert len(jax.devices()) >= 2  # tests/conftest.py forces two host devices
    one = mjxenv.make(PUCK, N, autoreset="same_step", impl="jax", **EVENTS)
    two = one.shard(jax.devices()[:2])
    states = [mjxenv.jit_reset(e, jax.random.key(5)) for e in (one, two)]
    assert states[1].runner.data.qpos.sharding.num_devices == 2
    assert_same_but_noise(states[1], states[0])
    np.testing.assert_array_equal(states[1].curriculum.column, np.arange(N) % GROUND.columns)
    level = np.array([3, 1, 1, 2])
    qpos = np.array([[UP + 0.2, 0, 0], [UP + 0.2, 0, 0], [0, 0, 0], [0, 0, 0]])
    mask = np.array([True, True, False, True])
    after = [
        mjxenv.jit_reset_worlds(e, with_places(s, level, qpos, np.full((N, 2), 0.5)), mask)
        for e, s in zip((one, two), states, strict=True)
    ]
    assert_same_but_noise(after[1], after[0])
    np.testing.assert_array_equal(np.asarray(after[1].curriculum.level)[1:], [2, 1, 1])


def test_no_recompiles_after_warm_up(env, first):
    with CompileCounter() as counter:
        state = mjxenv.jit_reset(env, jax.random.key(9))
        for t in range(25):  # through a restart
            state = mjxenv.jit_step(env, state, ACTIONS[t])
        state = with_places(state, np.array([3, 2, 1, 0]), np.zeros((N, 3)), np.ones((N, 2)))
        state = mjxenv.jit_reset_worlds(env, state, np.array([False, True, True, False]))
        nxt = env.with_autoreset("next_step")
        for t in range(25):
            state = mjxenv.jit_step(nxt, state, -ACTIONS[t])
        jax.block_until_ready(state)
    assert counter.count == 0


def test_checkpoint_round_trip_continues_bit_for_bit(env, first, tmp_path):
    states = run(env, jax.random.key(3), steps=10)
    mjxenv.save(tmp_path / "puck.ckpt", env, states[-1])
    loaded_env, loaded = mjxenv.load(tmp_path / "puck.ckpt", task=PUCK)
    assert_same(loaded, states[-1])
    a, b = states[-1], loaded
    for t in range(10, 35):  # through a restart: the curriculum moves in both
        a = mjxenv.jit_step(env, a, ACTIONS[t])
        b = mjxenv.jit_step(loaded_env, b, ACTIONS[t])
    assert_same(b, a)
    assert (np.asarray(a.curriculum.spawn) != np.asarray(states[-1].curriculum.spawn)).any()


def test_warp_moves_the_curriculum_too():
    """impl "warp" collides the heightfield; the curriculum is the env's, the same."""
    warp = mjxenv.make(PUCK, 2, autoreset="same_step", impl="warp", **EVENTS)
    state = mjxenv.jit_reset(warp, jax.random.key(1))
    column = np.asarray(state.curriculum.column)
    spawn = ORIGINS[[1, 1], column]
    qpos = spawn + np.array([[UP + 0.2, 0, 0], [0, 0, 0]])
    state = conftest.on_tiles(state, [1, 1], spawn, qpos, [[0.5, 0], [0.5, 0]])
    state = mjxenv.with_episode_length(state, np.array([STEPS - 1, STEPS - 1]))
    after = mjxenv.jit_step(warp, state, np.zeros((2, 2)))
    np.testing.assert_array_equal(after.curriculum.level, [2, 0])
    for _ in range(15):  # landed after the 1 cm drop
        after = mjxenv.jit_step(warp, after, np.zeros((2, 2)))
    assert not np.asarray(after.runner.overflow).any()
    heights = TILES.surface_height(np.asarray(after.runner.data.qpos)[:, :2])
    # resting on the heightfield (the puck's joint z is its height above 5 cm)
    np.testing.assert_allclose(np.asarray(after.runner.data.qpos)[:, 2], heights, atol=5e-3)


# --- the ant's velocity tracking ------------------------------------------------------------


@pytest.fixture(scope="module")
def ant():
    """``(env, first state)`` of the terrain task with every term, 4 worlds."""
    env = mjxenv.make(
        "ant_velocity_terrain",
        N,
        autoreset="disabled",
        impl=IMPL,
        latency=locomotion.LATENCY,
        pushes=locomotion.PUSHES,
    )
    return env, mjxenv.jit_reset(env, jax.random.key(0))


def test_ant_starts_on_its_tiles_with_a_command(ant):
    env, state = ant
    t = locomotion.terrain_of(env.task)
    config = t.config
    c = jax.device_get(state.curriculum)
    np.testing.assert_array_equal(c.column, np.arange(N) % config.columns)
    assert (c.level <= config.max_initial_level).all()
    tiles = t.origins[c.level, c.column]
    assert np.abs(c.spawn[:, :2] - tiles[:, :2]).max() <= config.spawn_radius + 1e-6
    qpos = np.asarray(state.runner.data.qpos)
    np.testing.assert_allclose(qpos[:, :3], c.spawn + STANDING, atol=1e-6)
    np.testing.assert_allclose(qpos[:, 4:6], 0.0)  # a heading only: upright
    np.testing.assert_allclose(np.linalg.norm(qpos[:, 3:7], axis=1), 1.0, atol=1e-6)
    command = np.asarray(state.info["command"])
    assert np.abs(command).max() <= 0.5 and len(np.unique(command[:, 0])) == N
    spec = env.observation_spec
    assert set(spec) == set(locomotion.TERMS)
    assert spec["joint_pos"].shape == (3 * 8,)  # three readings of 8 joints
    np.testing.assert_array_equal(state.obs["command"], command)  # no noise on it
    exact = np.asarray(state.runner.data.qpos[:, 7:])
    assert not np.allclose(np.asarray(state.obs["joint_pos"])[:, -8:], exact)


def test_ant_curriculum_moves_on_restart_and_respawns_there(ant):
    env, state = ant
    t = locomotion.terrain_of(env.task)
    up = t.config.up_fraction * t.config.tile_size
    column = np.asarray(state.curriculum.column)
    level = np.array([2, 2, 2, 0])
    spawn = t.origins[level, column].astype(np.float32)
    qpos = np.asarray(state.runner.data.qpos).copy()
    qpos[:, :3] = spawn + STANDING
    qpos[0, 0] += up + 0.3  # walked: up
    state = conftest.on_tiles(state, level, spawn, qpos, np.full((N, 3), 0.3))
    after = mjxenv.jit_reset_worlds(env, state, np.array([True, True, False, True]))
    c = jax.device_get(after.curriculum)
    # stood still under a command: down (clamped at 0 for world 3)
    np.testing.assert_array_equal(c.level, [3, 1, 2, 0])
    tiles = t.origins[c.level, c.column]
    assert np.abs(c.spawn[:, :2] - tiles[:, :2]).max() <= t.config.spawn_radius + 1e-6
    new = np.asarray(after.runner.data.qpos)
    np.testing.assert_allclose(new[[0, 1, 3], :3], c.spawn[[0, 1, 3]] + STANDING, atol=1e-6)
    np.testing.assert_array_equal(new[2], qpos[2])  # not restarted
    again = mjxenv.jit_reset_worlds(env, state, np.array([True, True, False, True]))
    assert_same(again, after)  # the same streams: the same draws


def one_world(task, qpos, qvel=None):
    """``(mjx.Model, mjx.Data)`` of one world of ``task``'s scene."""
    m = task.load_model()
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    d.qvel[:] = 0 if qvel is None else qvel
    return mjx.put_model(m, impl="jax"), mjx.put_data(m, d, impl="jax")


def stand(x=0.0, y=0.0, z=0.5, quat=(1, 0, 0, 0)):
    return np.concatenate([[x, y, z], quat, np.zeros(8)])


def test_ant_reward_tracks_the_command_in_the_body_frame():
    task = locomotion.VELOCITY
    # heading +90 degrees, moving along world +x: body frame velocity (0, -1, 0)
    quat = (np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4))
    qvel = np.zeros(14)
    qvel[0], qvel[5] = 1.0, 0.2
    model, data = one_world(task, stand(quat=quat), qvel)
    lin, ang = locomotion.base_velocity(data)
    np.testing.assert_allclose(lin, [0, -1, 0], atol=1e-6)
    np.testing.assert_allclose(ang, [0, 0, 0.2], atol=1e-6)
    np.testing.assert_allclose(locomotion.projected_gravity(data), [0, 0, -1], atol=1e-6)
    zero = jnp.zeros(8)
    info = task.initial_info(model, data, jax.random.key(0))
    dt = task.substeps * float(model.opt.timestep)  # rewards are per second of control
    perfect = {**info, "command": jnp.array([0.0, -1.0, 0.2])}
    np.testing.assert_allclose(task.reward(model, data, zero, data, perfect), 1.5 * dt, rtol=1e-6)
    off = {**info, "command": jnp.array([0.5, -1.0, 0.2])}  # 0.5 m/s off
    expected = (np.exp(-0.25 / locomotion.TRACKING_SIGMA) + 0.5) * dt
    np.testing.assert_allclose(task.reward(model, data, zero, data, off), expected, rtol=1e-6)
    # the action-rate and action penalties
    one = jnp.ones(8)
    w = locomotion.WEIGHTS
    shaken = task.reward(model, data, one, data, perfect)
    penalty = 8 * (w["action_rate"] + w["action"])
    np.testing.assert_allclose(shaken, (1.5 + penalty) * dt, rtol=1e-6)
    updated = task.update_info(model, data, one, data, off, jax.random.key(1))
    np.testing.assert_allclose(updated["metrics"]["lin_vel_error"], 0.5, rtol=1e-6)
    np.testing.assert_array_equal(updated["last_action"], one)
    np.testing.assert_array_equal(updated["command"], off["command"])  # kept


def test_ant_falls_by_its_height_above_the_ground_beneath():
    flat, rough = locomotion.VELOCITY, locomotion.VELOCITY_TERRAIN
    t = locomotion.terrain_of(rough)
    # over the hardest "stairs_down" tile, off its platform: the ground is up there
    column = t.column_types.index("stairs_down")
    x, y, _ = t.origins[t.config.levels - 1, column] + [0.8, 0.0, 0.0]
    ground = float(t.surface_height([x, y]))
    assert ground > 0.2
    for task, base in ((rough, ground), (flat, 0.0)):
        model, data = one_world(task, stand(x, y, base + 0.29))
        assert task.terminated(model, data, None)
        model, data = one_world(task, stand(x, y, base + 0.35))
        assert not task.terminated(model, data, None)
    model, data = one_world(flat, stand(z=0.5, quat=(0, 1, 0, 0)))  # upside down
    assert flat.terminated(model, data, None)


def test_commands_are_redrawn_at_intervals_when_asked():
    task = locomotion.velocity_task("test_ant_resampled", resample_steps=2, obs_config=None)
    assert task is locomotion.velocity_task("test_ant_resampled", resample_steps=2, obs_config=None)
    model, data = one_world(task, stand())
    info = task.initial_info(model, data, jax.random.key(0))
    zero = jnp.zeros(8)
    once = task.update_info(model, data, zero, data, info, jax.random.key(1))
    np.testing.assert_array_equal(once["command"], info["command"])
    twice = task.update_info(model, data, zero, data, once, jax.random.key(2))
    assert not np.allclose(twice["command"], info["command"])
    assert np.abs(np.asarray(twice["command"])).max() <= 0.5


def test_bad_tasks_and_options_are_refused():
    with pytest.raises(TypeError, match=r"Task\.model"):
        PUCK.replace(model=3)
    with pytest.raises(ValueError, match=r"needs Task\.initial_curriculum"):
        PUCK.replace(initial_curriculum=None)
    with pytest.raises(TypeError, match="update_curriculum must be None or callable"):
        PUCK.replace(update_curriculum=1)
    with pytest.raises(TypeError, match=r"not a mujoco\.MjModel"):
        mjxenv.make(PUCK.replace(model=lambda: "puck"), 2)
    with pytest.raises(ValueError, match="reset pool"):
        mjxenv.make(PUCK, 2, reset_pool=4)
    with pytest.raises(TypeError, match="TerrainConfig"):
        locomotion.velocity_task("x", "flat")
    with pytest.raises(ValueError, match=r"Commands\.vx"):
        locomotion.velocity_task("x", commands=locomotion.Commands(vx=(1.0, -1.0)))
    with pytest.raises(ValueError, match="resample_steps"):
        locomotion.velocity_task("x", resample_steps=-1)
