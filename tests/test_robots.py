"""The real robots (Unitree Go1 and G1 from MuJoCo Menagerie, the ``robots`` extra)
and their joystick tasks.

Impl "c" equals native ``mj_step`` bit for bit on every scene, these included
(``tests/test_native.py``). Here: what the scenes are (feet-only contacts, the
sensors, controls as offsets from the standing pose), MJX against native MuJoCo
over 200 steps at two worlds (held to 2e-3 in qpos), the clear error without the
extra, the joystick tasks through the functional env, Gymnasium and torch, each
task's env on MJX jax and warp against impl "c" (in the background:
joystick_impls_script.py), and ``go1_joystick_rough``'s terrain and curriculum.
"""

import dataclasses
import json

import conftest
import gymnasium
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import torch
from mujoco import mjx

from mjxrunner import MultiEnvRunner, tasks
from mjxrunner.doors.torch import TorchVecEnv
from mjxrunner.engine import models, robots
from mjxrunner.rl import env as E
from mjxrunner.tasks import joystick, locomotion

ROBOTS = {"go1": joystick.GO1, "g1": joystick.G1}
PARITY_STEPS = 200
PARITY_ATOL = 2e-3
# MJX's jax impl parts from MuJoCo on the G1 once its feet move: from the step
# where one of its eight foot contacts opens, a 0.1 rad target wave leaves it
# 0.3 rad off (float64 too), while Warp stays within 4e-6 of MuJoCo. Standing
# (zero targets: gravity, contacts, servos and joint friction) it matches to 5e-5.
AMPLITUDE = {("go1", "jax"): 0.1, ("go1", "warp"): 0.1, ("g1", "jax"): 0.0}


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_the_scene_stands_on_its_feet_alone(name):
    m = models.load(name)
    info, robot = models.info(name), ROBOTS[name]
    assert m.key(info.keyframe).name == robot.keyframe and m.cam(info.camera).name == "track"
    for sensor in ("gyro", "accelerometer", "local_linvel", "orientation", "upvector"):
        m.sensor(sensor)  # raises if missing
    for foot in robot.feet:
        m.sensor(f"{foot}_pos"), m.sensor(f"{foot}_linvel")
    # a zero control holds Menagerie's standing pose: controls are offsets from it
    np.testing.assert_array_equal(m.key_ctrl[0], np.zeros(m.nu))
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    for _ in range(250):  # 1 s
        mujoco.mj_step(m, d)
    # within the sag of a proportional servo under the robot's weight: the Go1's kp
    # 35 lets its knees give ~0.19 rad (about 6.6 N m / 35) and its base 4 cm
    joints, base = {"go1": (0.2, 0.05), "g1": (0.08, 0.02)}[name]
    np.testing.assert_allclose(d.qpos[7:], m.key_qpos[0, 7:], atol=joints)
    assert abs(d.qpos[2] - m.key_qpos[0, 2]) < base
    # only feet touch, and only the floor
    floor = m.geom("floor").id
    assert d.ncon > 0
    for c in d.contact[: d.ncon]:
        other = c.geom[1] if c.geom[0] == floor else c.geom[0]
        assert floor in c.geom
        body = m.body(m.geom_bodyid[other]).name
        assert m.geom(other).name in robot.feet or "ankle_roll" in body, body


def test_a_missing_extra_says_how_to_install_it(monkeypatch):
    gone = dataclasses.replace(robots.ROBOTS["go1"], package="no_such_assets_package")
    monkeypatch.setitem(robots.ROBOTS, "go1", gone)
    with pytest.raises(ValueError, match=r"mjxrunner\[robots\]"):
        models.load("go1")


# The G1 on warp is checked by test_joystick_tasks_on_mjx: its task env there steps
# the G1 scene 200 physics steps under the same 0.1 rad wave and stays within
# PARITY_ATOL of impl "c", which is native MuJoCo bit for bit (test_native.py). Warp
# on a CPU steps the G1 slowly (~0.1 s a step), so it runs once, not twice.
MJX_PARITY = [("g1", "jax"), ("go1", "jax"), ("go1", "warp")]


@pytest.mark.parametrize(("name", "impl"), MJX_PARITY, ids=[f"{n}-{i}" for n, i in MJX_PARITY])
def test_mjx_follows_native_mujoco(name, impl):
    m = models.load(name)
    amplitude = AMPLITUDE[name, impl]
    r = MultiEnvRunner(m, 2, impl=impl, keyframe=0)
    natives = [mujoco.MjData(m) for _ in range(2)]
    for d in natives:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    worst = 0.0
    for t in range(PARITY_STEPS):
        u = amplitude * np.sin(0.05 * t * np.arange(1, 3)[:, None] + np.arange(m.nu)[None, :])
        r.set_actions(u)
        r.step()
        for d, ui in zip(natives, u, strict=True):
            d.ctrl[:] = ui
            mujoco.mj_step(m, d)
        got, want = np.asarray(r.data.qpos), np.stack([d.qpos for d in natives])
        worst = max(worst, np.abs(got - want).max())
    assert worst < PARITY_ATOL, f"{name} on {impl}: {worst:.2e} off native"
    if amplitude:  # the robots really moved
        assert np.abs(want[:, 7:] - m.key_qpos[0, 7:]).max() > 0.02


# --- the joystick tasks on MJX, against impl "c" (a process per impl, in the background) --


@conftest.background("joystick mjx", needed_by="test_joystick_tasks_on_mjx")
def launch_mjx_job(out):
    return [conftest.start("joystick_impls_script.py", str(out / "result.json"), out=out)]


# How far each task's env on MJX may go from impl "c" over 40 control steps (200
# physics steps) of the same run: the scenes' bound where MJX follows MuJoCo. Not
# where it cannot: the G1 on the jax impl (see AMPLITUDE; the task's start jitters
# the joints, so even with zero targets its feet move), and the Go1 on a
# heightfield, where MuJoCo C makes its own contact set (2 or 3 contacts per foot
# standing on a flat tile, one per prism touched) and both MJX impls measured
# 0.028 in qpos, 2.7e-3 from the keyframe with zero targets.
MJX_TASK_ATOL = {
    "g1_joystick_mjx": PARITY_ATOL,
    ("g1_joystick_mjx", "jax"): 0.1,
    "go1_joystick_rough": 0.05,
}


def test_joystick_tasks_on_mjx():
    """The G1's and the rough Go1's joystick envs (the kit on: latency, pushes,
    noise, history) on MJX step as on impl "c" from the same seed, to the bounds
    above, through the Gymnasium door (the Go1's task) or the torch door (the
    G1's). The flat Go1 task is the rough one's functions on the flat scene, whose
    MJX parity test_mjx_follows_native_mujoco checks."""
    [(returncode, log)], out = conftest.finished("joystick mjx")
    assert returncode == 0, log[-4000:]
    results = json.loads((out / "result.json").read_text())
    for impl in ("warp", "jax"):
        assert set(results[impl]) == {"g1_joystick_mjx", "go1_joystick_rough"}
    terms = sorted(joystick.TERMS)
    for impl, runs in results.items():
        for name, r in runs.items():  # the Go1's through Gymnasium, the G1's through torch
            door = "torch" if name.startswith("g1") else "gym"
            assert (r["door"], r["terms"], r["worlds"], r["finite"]) == (door, terms, [2], True)
            atol = MJX_TASK_ATOL.get((name, impl), MJX_TASK_ATOL[name])
            assert r["qpos"] < atol, f"{name} on {impl}: {r}"
            assert r["reward"] < 0.01, f"{name} on {impl}: {r}"
            assert r["moved"] > 0.02, f"{name} on {impl}: the joints hardly moved: {r}"
    print(json.dumps(results, indent=1))


@pytest.fixture(scope="module", params=sorted(ROBOTS))
def joystick_env(request):
    name = request.param
    # go1_joystick trains the Go1 on its CPU scene, with a gait clock (tests/test_cpu_robots.py)
    task, robot = {"go1": (joystick.GO1_JOYSTICK, joystick.GO1_CPU),
                   "g1": (joystick.G1_JOYSTICK, joystick.G1_CPU)}[name]  # fmt: skip
    env = E.make(task, 4, impl="c", num_threads=1, latency=joystick.LATENCY, pushes=joystick.PUSHES)
    return robot, task, env.with_randomization(joystick.randomization(robot))


def test_a_joystick_task_runs_with_the_kit(joystick_env):
    robot, _, env = joystick_env
    state = E.jit_reset(env, jax.random.key(0))
    obs_size = sum(int(np.prod(state.obs[k].shape[1:])) for k in joystick.TERMS)
    gait = {"gait"} if robot.gait is not None else set()
    assert obs_size > 0 and set(state.obs) == set(joystick.TERMS) | gait
    commands = np.asarray(state.info["command"])
    assert len({tuple(c) for c in commands.round(6)}) == 4  # drawn per world
    rewards = []
    for _ in range(30):
        state = E.jit_step(env, state, jnp.zeros((4, env.action_size)))
        rewards.append(np.asarray(state.reward))
    rewards = np.stack(rewards)
    assert np.isfinite(rewards).all() and rewards.shape == (30, 4)
    # standing still under a command to move: the tracking error is the command
    metrics = state.info["metrics"]
    assert np.asarray(metrics["lin_vel_error"]).max() > 0.05
    # the logged terms are the reward's: their sum, clipped at 0 from below, is it
    terms = [np.asarray(v) for k, v in metrics.items() if k.startswith("reward/")]
    assert len(terms) == len(joystick.GAIT_WEIGHTS if gait else joystick.WEIGHTS)
    np.testing.assert_allclose(np.maximum(sum(terms), 0.0), rewards[-1], rtol=1e-5, atol=1e-7)
    # randomization reached the worlds: masses and centres of mass per world
    assert len({tuple(np.asarray(state.model.tree.body_mass)[i]) for i in range(4)}) == 4
    base = models.load(robot.scene).body(robot.base).id
    com = np.asarray(state.model.tree.body_ipos)[:, base]
    assert len({tuple(c) for c in com.round(6)}) == 4
    # servo stiffness drawn per world and actuator, its three fields together: the
    # pose a zero action holds (bias / gain) is the scene's own
    gain = np.asarray(state.model.tree.actuator_gainprm)[..., 0]
    bias = np.asarray(state.model.tree.actuator_biasprm)
    m = models.load(robot.scene)
    assert len({tuple(g) for g in gain.round(4)}) == 4
    np.testing.assert_allclose(bias[..., 1], -gain, rtol=1e-6)
    held = m.actuator_biasprm[:, 0] / m.actuator_gainprm[:, 0]
    np.testing.assert_allclose(bias[..., 0] / gain, np.broadcast_to(held, gain.shape), atol=1e-6)


def test_a_joystick_task_through_gymnasium_and_torch():
    envs = gymnasium.make_vec(
        "mjxrunner/Go1Joystick-v0",
        num_envs=3,
        vectorization_mode="vector_entry_point",
        impl="c",
        num_threads=1,
    )
    obs, _ = envs.reset(seed=0)
    obs, reward, terminated, _, _ = envs.step(np.zeros((3, 12), np.float32))
    assert reward.shape == (3,) and terminated.dtype == bool and not terminated.any()
    envs.close()
    door = TorchVecEnv("g1_joystick", 2, seed=0, impl="c", num_threads=1)
    obs, _ = door.reset()
    assert all(v.shape[0] == 2 for v in obs.values())
    obs, reward, terminated, _, _ = door.step(torch.zeros((2, 12)))
    assert set(obs) == {*joystick.TERMS, "gait"} and reward.shape == (2,)
    assert not terminated.any()
    assert torch.isfinite(reward).all()


# --- go1_joystick_rough: the Go1 on the terrain with its curriculum ------------------------

ROUGH = joystick.GO1_JOYSTICK_ROUGH


@pytest.fixture(scope="module")
def rough():
    """``(env, first state)``: 4 worlds of the rough task, randomized, impl "c"."""
    scene = ROUGH.load_model()
    env = E.make(ROUGH, 4, impl="c", num_threads=1, autoreset="disabled")
    env = env.with_randomization(joystick.randomization(joystick.GO1, scene))
    return env, E.jit_reset(env, jax.random.key(0))


def test_go1_rough_starts_each_world_on_its_tile(rough):
    env, state = rough
    t = locomotion.terrain_of(ROUGH)
    assert t.config == joystick.GO1_TERRAIN
    c = jax.device_get(state.curriculum)
    np.testing.assert_array_equal(c.column, np.arange(4) % t.config.columns)
    assert (c.level <= t.config.max_initial_level).all()
    tiles = t.origins[c.level, c.column]
    assert np.abs(c.spawn[:, :2] - tiles[:, :2]).max() <= t.config.spawn_radius + 1e-6
    np.testing.assert_allclose(c.spawn[:, 2], tiles[:, 2])  # on the tile's platform
    standing = models.load("go1").key("home").qpos[:3]
    qpos = np.asarray(state.runner.data.qpos)
    np.testing.assert_allclose(qpos[:, :3], c.spawn + standing, atol=1e-6)
    # the friction drawn per world is the terrain's: the scene's only world geom
    scene = ROUGH.load_model()
    ground = scene.geom("terrain").id
    friction = np.asarray(state.model.tree.geom_friction)
    assert len(set(friction[:, ground, 0].round(6))) == 4
    others = np.delete(scene.geom_friction, ground, axis=0).astype(friction.dtype)
    np.testing.assert_array_equal(np.delete(friction, ground, axis=1), np.stack([others] * 4))
    # a few steps standing: every world keeps its feet on its own ground
    for _ in range(10):
        state = E.jit_step(env, state, jnp.zeros((4, env.action_size)))
    assert not np.asarray(state.terminated).any()
    assert np.asarray(state.info["contact"]).sum() >= 12


def test_go1_rough_measures_heights_from_the_ground_beneath():
    t = locomotion.terrain_of(ROUGH)
    # over the hardest "stairs_down" tile, off its platform: the ground is up there
    column = t.column_types.index("stairs_down")
    x, y, _ = t.origins[t.config.levels - 1, column] + [1.0, 0.0, 0.0]
    ground = float(t.surface_height([x, y]))
    assert ground > 0.2
    scene = ROUGH.load_model()
    d = mujoco.MjData(scene)
    mujoco.mj_resetDataKeyframe(scene, d, scene.key("home").id)
    d.qpos[:2] = x, y
    model = mjx.put_model(scene, impl="jax")
    for base, fallen in ((0.14, True), (0.25, False)):
        d.qpos[2] = ground + base
        mujoco.mj_kinematics(scene, d)
        data = mjx.put_data(scene, d, impl="jax")
        assert bool(ROUGH.terminated(model, data, None)) is fallen
        assert bool(joystick.GO1_JOYSTICK.terminated(model, data, None)) is False  # 0.2 m up
    # feet on the ground beneath them: on the ground, 2 cm over it, 5 cm over it
    info = ROUGH.initial_info(model, data, jax.random.key(0))
    zero = jnp.zeros(scene.nu)
    for lift, touching in ((0.0, True), (0.02, True), (0.05, False)):
        feet = np.array([d.site_xpos[scene.site(f).id] for f in joystick.GO1.feet])
        d.qpos[2] += lift - (feet[:, 2] - t.surface_height(feet[:, :2])).min()
        mujoco.mj_kinematics(scene, d)
        data = mjx.put_data(scene, d, impl="jax")
        contact = np.asarray(ROUGH.update_info(model, data, zero, data, info, None)["contact"])
        assert bool(contact.any()) is touching, lift


def test_go1_rough_curriculum_moves_on_restart(rough):
    env, state = rough
    t = locomotion.terrain_of(ROUGH)
    up = t.config.up_fraction * t.config.tile_size
    column = np.asarray(state.curriculum.column)
    level = np.array([2, 2, 2, 0])
    spawn = t.origins[level, column].astype(np.float32)
    qpos = np.asarray(state.runner.data.qpos).copy()
    qpos[:, :3] = spawn + np.array([0.0, 0.0, 0.27])
    qpos[0, 0] += up + 0.3  # walked past half a tile: up
    state = conftest.on_tiles(state, level, spawn, qpos, np.full((4, 3), 0.5))
    after = E.jit_reset_worlds(env, state, np.array([True, True, False, True]))
    c = jax.device_get(after.curriculum)
    np.testing.assert_array_equal(c.level, [3, 1, 2, 0])  # stood still: down, at least 0
    tiles = t.origins[c.level, c.column]
    assert np.abs(c.spawn[:, :2] - tiles[:, :2]).max() <= t.config.spawn_radius + 1e-6
    new = np.asarray(after.runner.data.qpos)
    np.testing.assert_array_equal(new[2], qpos[2])  # not restarted
    standing = models.load("go1").key("home").qpos[:3]
    np.testing.assert_allclose(new[[0, 1, 3], :3], c.spawn[[0, 1, 3]] + standing, atol=1e-6)


def test_go1_rough_is_registered_for_gymnasium():
    assert "go1_joystick_rough" in tasks.list()
    assert "mjxrunner/Go1JoystickRough-v0" in gymnasium.registry
