"""Your own robot wherever a scene name goes: an MJCF path, MJCF text, an ``MjModel``
or an ``MjSpec`` builds a runner and a task's env, and steps as the same scene
loaded by name does."""

import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjxrunner import MultiEnvRunner, models, tasks
from mjxrunner.engine import native
from mjxrunner.rl import env as E

SCENE = models.path("cartpole")


def sources():
    return {
        "path": SCENE,
        "path str": str(SCENE),
        "text": SCENE.read_text(),
        "MjModel": mujoco.MjModel.from_xml_path(str(SCENE)),
        "MjSpec": mujoco.MjSpec.from_file(str(SCENE)),
    }


@pytest.fixture(scope="module")
def by_name():
    r = MultiEnvRunner("cartpole", 2, impl="c", seed=0)
    r.set_actions(np.full((2, 1), 0.5, np.float32))
    r.step()
    return native.from_bits(np.asarray(r.data._impl.state))


@pytest.mark.parametrize("kind", list(sources()))
def test_a_runner_takes_any_model_source(kind, by_name):
    r = MultiEnvRunner(sources()[kind], 2, impl="c", seed=0)
    r.set_actions(np.full((2, 1), 0.5, np.float32))
    r.step()
    np.testing.assert_array_equal(native.from_bits(np.asarray(r.data._impl.state)), by_name)


def upright(model, data):
    return jnp.cos(data.qpos[1]).astype(jnp.float32)


def observe(model, data):
    return jnp.concatenate([data.qpos, data.qvel])


def reward(model, data, action, next_data):
    return upright(model, next_data)


@pytest.mark.parametrize("kind", ["path", "MjSpec", "MjModel"])
def test_a_task_takes_any_model_source(kind):
    task = tasks.Task(
        name=f"my_cartpole_{kind}", model=sources()[kind], observation=observe, reward=reward
    )
    env = E.make(task, 3, impl="c")
    state = E.jit_step(env, E.jit_reset(env, jax.random.key(0)), jnp.zeros((3, 1)))
    assert state.obs.shape == (3, 4) and state.reward.shape == (3,)
    np.testing.assert_allclose(state.reward, np.cos(np.asarray(state.runner.data.qpos)[:, 1]))


def test_a_task_refuses_what_is_no_scene():
    with pytest.raises(TypeError, match="MjSpec"):
        dataclasses.replace(tasks.get("cartpole_balance"), model=3)
    with pytest.raises(TypeError, match="must be a scene"):
        dataclasses.replace(tasks.get("cartpole_balance"), model="")
    broken = mujoco.MjSpec.from_string(
        "<mujoco><worldbody><geom type='sphere'/></worldbody></mujoco>"
    )
    with pytest.raises(ValueError, match="could not compile the MjSpec"):
        MultiEnvRunner(broken, 1, impl="c")
