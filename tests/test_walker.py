"""The walker factory behind the ant, hopper and humanoid tasks, and the shared reward
and start helpers: what they build, evaluated on single worlds (no physics step)."""

import pickle

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import models, tasks
from mjxrunner.tasks import ant, hopper, humanoid, rewards, walker


def one_world(name: str, qpos=None, qvel=None):
    """``(mjx.Model, mjx.Data)`` of scene ``name`` at its ``stand`` keyframe, with
    ``qpos``/``qvel`` overridden where given."""
    m = models.load(name)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("stand").id)
    if qpos is not None:
        d.qpos[:] = qpos
    if qvel is not None:
        d.qvel[:] = qvel
    mujoco.mj_forward(m, d)
    return mjx.put_model(m, impl="jax"), mjx.put_data(m, d, impl="jax")


def test_the_helper_modules_register_nothing_and_the_walkers_are_registered():
    assert not hasattr(walker, "TASKS") and not hasattr(rewards, "TASKS")
    assert tasks.get("ant_walk") is ant.WALK
    assert tasks.get("hopper_hop") is hopper.HOP
    assert tasks.get("humanoid_walk") is humanoid.WALK
    for module, task in ((ant, ant.WALK), (hopper, hopper.HOP), (humanoid, humanoid.WALK)):
        assert task.observation is module.observation and task.reward is module.reward
        assert task.terminated is module.terminated and task.initial_state is module.start
        assert (task.keyframe, task.substeps, task.max_episode_steps) == ("stand", 2, 1000)


def test_built_functions_are_named_as_the_task_modules_own():
    for module in (ant, hopper, humanoid):
        for role in ("healthy", "observation", "terminated", "reward", "start"):
            fn = getattr(module, role)
            assert (fn.__module__, fn.__qualname__) == (module.__name__, role)
            assert fn.__doc__
            assert pickle.loads(pickle.dumps(fn)) is fn  # found where it is named


def test_ant_reward_observation_and_termination():
    qvel = np.linspace(-1.0, 1.0, 14)
    model, data = one_world("ant", qvel=qvel)
    action = jnp.full((8,), 0.5, jnp.float32)
    assert ant.healthy(data) and not ant.terminated(model, data)
    expected = qvel[0] + 1.0 - 0.05 * 8 * 0.25
    np.testing.assert_allclose(ant.reward(model, data, action, data), expected, rtol=1e-6)
    obs = ant.observation(model, data)
    np.testing.assert_array_equal(obs, jnp.concatenate([data.qpos[2:], data.qvel]))
    low = data.replace(qpos=data.qpos.at[2].set(ant.HEALTHY_Z[0] - 0.01))
    assert ant.terminated(model, low)
    np.testing.assert_allclose(ant.reward(model, data, action, low), qvel[0] - 0.1, rtol=1e-6)


def test_humanoid_pays_two_for_staying_up():
    model, data = one_world("humanoid")
    action = jnp.zeros((model.nu,), jnp.float32)
    assert float(humanoid.reward(model, data, action, data)) == 2.0


def test_hopper_observes_clipped_velocities_and_falls_when_tilted():
    model, data = one_world("hopper", qvel=[20.0, -20.0, 0.0, 1.0, 0.0, 0.0])
    obs = hopper.observation(model, data)
    assert obs.shape == (11,)
    np.testing.assert_array_equal(obs[5:], [10.0, -10.0, 0.0, 1.0, 0.0, 0.0])
    assert not hopper.terminated(model, data)
    tilted = data.replace(qpos=data.qpos.at[2].set(hopper.MAX_TILT + 0.01))
    assert hopper.terminated(model, tilted)


def test_noisy_joints_keeps_the_free_joint_and_takes_one_velocity_noise():
    model, data = one_world("ant")
    s = ant.start(model, data, jax.random.key(0))
    np.testing.assert_array_equal(s.qpos[:7], data.qpos[:7])
    assert 0 < float(jnp.max(jnp.abs(s.qpos[7:] - data.qpos[7:]))) <= 0.1
    with pytest.raises(ValueError, match="exactly one"):
        walker.noisy_joints(7, 0.1)
    with pytest.raises(ValueError, match="exactly one"):
        walker.noisy_joints(7, 0.1, vel_noise=0.1, vel_std=0.1)


def test_shared_helpers():
    np.testing.assert_array_equal(rewards.to_unit(jnp.array([-2.0, 0.0, 2.0]), 2.0), [0, 0.5, 1])
    _, data = one_world("hopper")
    s = rewards.uniform_around_rest(data, jax.random.key(1), 0.005, 0.01)
    assert s.qpos.dtype == data.qpos.dtype and s.qvel.dtype == data.qvel.dtype
    assert 0 < float(jnp.max(jnp.abs(s.qpos - data.qpos))) <= 0.005
    assert 0 < float(jnp.max(jnp.abs(s.qvel))) <= 0.01
