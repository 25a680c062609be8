"""The real robots (Unitree Go1 and G1 from MuJoCo Menagerie, the ``robots`` extra)
and their joystick tasks.

Impl "c" equals native ``mj_step`` bit for bit on every scene, these included
(``tests/test_native.py``). Here: what the scenes are (feet-only contacts, the
sensors, controls as offsets from the standing pose), MJX against native MuJoCo
over 200 steps at two worlds (held to 2e-3 in qpos), the clear error without the
extra, and the joystick tasks through the functional env, Gymnasium and torch.
"""

import dataclasses

import gymnasium
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import torch

from mjxrunner import MultiEnvRunner
from mjxrunner.doors.torch import TorchVecEnv
from mjxrunner.engine import models, robots
from mjxrunner.rl import env as E
from mjxrunner.tasks import joystick

ROBOTS = {"go1": joystick.GO1, "g1": joystick.G1}
PARITY_STEPS = 200
PARITY_ATOL = 2e-3
# MJX's jax impl parts from MuJoCo on the G1 once its feet move: from the step
# where one of its eight foot contacts opens, a 0.1 rad target wave leaves it
# 0.3 rad off (float64 too), while Warp stays within 4e-6 of MuJoCo. Standing
# (zero targets: gravity, contacts, servos and joint friction) it matches to 5e-5.
AMPLITUDE = {("go1", "jax"): 0.1, ("go1", "warp"): 0.1, ("g1", "warp"): 0.1, ("g1", "jax"): 0.0}


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


@pytest.mark.parametrize("impl", ["jax", "warp"])
@pytest.mark.parametrize("name", sorted(ROBOTS))
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


@pytest.fixture(scope="module", params=sorted(ROBOTS))
def joystick_env(request):
    name = request.param
    task = {"go1": joystick.GO1_JOYSTICK, "g1": joystick.G1_JOYSTICK}[name]
    env = E.make(task, 4, impl="c", num_threads=1, latency=joystick.LATENCY, pushes=joystick.PUSHES)
    return name, task, env.with_randomization(joystick.randomization(ROBOTS[name]))


def test_a_joystick_task_runs_with_the_kit(joystick_env):
    name, _, env = joystick_env
    state = E.jit_reset(env, jax.random.key(0))
    obs_size = sum(int(np.prod(state.obs[k].shape[1:])) for k in joystick.TERMS)
    assert obs_size > 0 and set(state.obs) == set(joystick.TERMS)
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
    assert len(terms) == len(joystick.WEIGHTS)
    np.testing.assert_allclose(np.maximum(sum(terms), 0.0), rewards[-1], rtol=1e-5, atol=1e-7)
    # randomization reached the worlds: masses and centres of mass per world
    assert len({tuple(np.asarray(state.model.tree.body_mass)[i]) for i in range(4)}) == 4
    base = models.load(name).body(ROBOTS[name].base).id
    com = np.asarray(state.model.tree.body_ipos)[:, base]
    assert len({tuple(c) for c in com.round(6)}) == 4
    # servo stiffness drawn per world and actuator, its three fields together: the
    # pose a zero action holds (bias / gain) is the scene's own
    gain = np.asarray(state.model.tree.actuator_gainprm)[..., 0]
    bias = np.asarray(state.model.tree.actuator_biasprm)
    m = models.load(name)
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
    obs, reward, terminated, _, _ = door.step(torch.zeros((2, 29)))
    assert set(obs) == set(joystick.TERMS) and reward.shape == (2,) and not terminated.any()
    assert torch.isfinite(reward).all()
