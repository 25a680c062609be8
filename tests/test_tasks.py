"""Tasks: the registry, the Task protocol's checks and the built-in tasks' functions,
evaluated on single worlds (no physics step compiled here)."""

import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import tasks
from mjxrunner.engine import models
from mjxrunner.tasks import cartpole, pendulum


def one_world(name: str, qpos, qvel=None):
    """``(mjx.Model, mjx.Data)`` of scene ``name`` at ``qpos``/``qvel``, forwarded."""
    m = models.load(name)
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    d.qvel[:] = 0 if qvel is None else qvel
    mujoco.mj_forward(m, d)
    return mjx.put_model(m, impl="jax"), mjx.put_data(m, d, impl="jax")


# --- registry -------------------------------------------------------------------


def test_registry_discovers_the_built_in_tasks():
    assert {"cartpole_balance", "cartpole_swingup", "pendulum_swingup"} <= set(tasks.list())
    assert [t.name for t in tasks.for_model("cartpole")] == [
        "cartpole_balance",
        "cartpole_balance_pixels",
        "cartpole_swingup",
        "cartpole_swingup_pixels",
    ]
    assert [t.name for t in tasks.for_model("pendulum")] == ["pendulum_swingup"]
    assert tasks.for_model("no_such_scene") == ()
    assert tasks.get("cartpole_balance") is cartpole.BALANCE
    for task in map(tasks.get, tasks.list()):
        # every task runs on a scene we ship, or on one it generates from them
        assert task.model in models.list() or isinstance(task.load_model(), mujoco.MjModel)


def test_registry_rejects_bad_names_and_duplicates():
    with pytest.raises(ValueError, match=r"unknown task 'nope'.*cartpole_balance"):
        tasks.get("nope")
    with pytest.raises(TypeError, match="str"):
        tasks.get(3)
    with pytest.raises(TypeError, match="str"):
        tasks.for_model(None)
    with pytest.raises(TypeError, match="Task"):
        tasks.register("cartpole_balance")
    with pytest.raises(ValueError, match="already registered"):
        tasks.register(cartpole.BALANCE.replace(max_episode_steps=7))
    assert tasks.register(cartpole.BALANCE) is cartpole.BALANCE  # the same task again is fine
    assert tasks.get("cartpole_balance").max_episode_steps == 500


def test_user_tasks_can_be_registered(monkeypatch):
    tasks.list()  # discover the built-ins first, so the copy below holds them
    monkeypatch.setattr(tasks, "_REGISTRY", dict(tasks._REGISTRY))  # undone after the test
    mine = cartpole.SWINGUP.replace(name="test_swingup_short", max_episode_steps=50)
    tasks.register(mine)
    assert tasks.get("test_swingup_short") is mine
    assert mine in tasks.for_model("cartpole")


def test_task_fields_are_checked():
    base = cartpole.BALANCE
    with pytest.raises(ValueError, match="max_episode_steps"):
        base.replace(max_episode_steps=0)
    with pytest.raises(ValueError, match="substeps"):
        base.replace(substeps=True)
    with pytest.raises(TypeError, match="observation"):
        base.replace(observation=None)
    with pytest.raises(TypeError, match="name"):
        base.replace(name="")
    with pytest.raises(TypeError, match="forward_on_reset"):
        base.replace(forward_on_reset=1)
    with pytest.raises(TypeError, match="keyframe"):
        base.replace(keyframe=0)


def test_tasks_are_hashable_static_values():
    """Equal tasks hash equal, so ``jit`` reuses its compile for an equal copy."""
    a = cartpole.BALANCE.replace(max_episode_steps=25)
    b = cartpole.BALANCE.replace(max_episode_steps=25)
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != cartpole.BALANCE


def test_action_bounds_follow_ctrlrange(slider3):
    low, high = tasks.action_bounds(models.load("cartpole"))
    np.testing.assert_array_equal(low, [-1.0])
    np.testing.assert_array_equal(high, [1.0])
    low, high = tasks.action_bounds(models.load("pendulum"))
    np.testing.assert_array_equal(high, [2.0])
    low, high = tasks.action_bounds(slider3)  # motors without ctrlrange
    assert low.dtype == np.float32 and np.all(np.isneginf(low)) and np.all(np.isposinf(high))


# --- cartpole ---------------------------------------------------------------------


def test_cartpole_observation_and_balance_termination():
    model, data = one_world("cartpole", [0.3, 0.15], [0.5, -1.0])
    obs = cartpole.observation(model, data)
    np.testing.assert_allclose(obs, [0.3, math.cos(0.15), math.sin(0.15), 0.5, -1.0], rtol=1e-6)
    assert not cartpole.balance_terminated(model, data)
    assert cartpole.balance_reward(model, data, jnp.zeros(1), data) == 1.0
    _, fallen = one_world("cartpole", [0.0, -0.25])
    assert cartpole.balance_terminated(model, fallen)
    assert cartpole.balance_reward(model, data, jnp.zeros(1), fallen) == 0.0  # the fall pays 0


def test_cartpole_swingup_reward_prefers_upright_centred_and_calm():
    model, up = one_world("cartpole", [0.0, 0.0])
    _, hanging = one_world("cartpole", [0.0, math.pi])
    _, off_centre = one_world("cartpole", [1.5, 0.0])
    _, spinning = one_world("cartpole", [0.0, 0.0], [0.0, 8.0])
    zero, push = jnp.zeros(1), jnp.ones(1)

    def r(d, u=zero):
        return float(cartpole.swingup_reward(model, up, u, d))

    assert r(up) == pytest.approx(1.0, abs=1e-6)
    assert r(hanging) == pytest.approx(0.0, abs=1e-6)
    assert r(off_centre) < r(up) and r(spinning) < r(up) and r(up, push) < r(up)
    assert 0.0 <= r(spinning, push) <= 1.0


def test_cartpole_starts_are_random_per_key_and_near_the_keyframe():
    model, up = one_world("cartpole", [0.0, 0.0])
    a = cartpole.balance_start(model, up, jax.random.key(1))
    b = cartpole.balance_start(model, up, jax.random.key(1))
    c = cartpole.balance_start(model, up, jax.random.key(2))
    np.testing.assert_array_equal(a.qpos, b.qpos)
    assert not np.array_equal(a.qpos, c.qpos)
    assert np.all(np.abs(np.asarray(a.qpos)) <= 0.05) and np.all(np.abs(a.qvel) <= 0.05)
    _, hanging = one_world("cartpole", [0.0, math.pi])
    s = cartpole.swingup_start(model, hanging, jax.random.key(3))
    assert abs(float(s.qpos[1]) - math.pi) <= 0.1 and abs(float(s.qpos[0])) <= 0.1


# --- pendulum ---------------------------------------------------------------------


def test_pendulum_observation_and_reward_measure_from_upright():
    model, up = one_world("pendulum", [math.pi])
    _, down = one_world("pendulum", [0.0])
    _, up_twice = one_world("pendulum", [3 * math.pi])  # one turn further: same pose
    np.testing.assert_allclose(pendulum.observation(model, up), [1.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(pendulum.observation(model, down), [-1.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(
        pendulum.observation(model, up_twice), pendulum.observation(model, up), atol=1e-5
    )
    zero = jnp.zeros(1)
    assert float(pendulum.reward(model, up, zero, up)) == pytest.approx(0.0, abs=1e-6)
    assert float(pendulum.reward(model, up, zero, down)) == pytest.approx(-(math.pi**2), rel=1e-5)
    # torque costs 0.001 u^2
    cost = float(pendulum.reward(model, up, jnp.full(1, 2.0), up))
    assert cost == pytest.approx(-0.004, rel=1e-4)


def test_pendulum_start_covers_the_circle():
    model, down = one_world("pendulum", [0.0])
    keys = jax.random.split(jax.random.key(0), 64)
    starts = jax.vmap(pendulum.start, in_axes=(None, None, 0))(model, down, keys)
    qpos, qvel = np.asarray(starts.qpos[:, 0]), np.asarray(starts.qvel[:, 0])
    assert qpos.min() >= 0 and qpos.max() <= 2 * math.pi
    assert qpos.max() - qpos.min() > math.pi  # spread over the circle, not one start
    assert np.all(np.abs(qvel) <= 1.0) and qvel.std() > 0.2


def test_task_functions_vmap_over_worlds_like_single_calls():
    """Written for one world, vmapped by the env: the same numbers either way."""
    model, up = one_world("cartpole", [0.0, 0.0])
    keys = jax.random.split(jax.random.key(5), 3)
    batch = jax.vmap(cartpole.balance_start, in_axes=(None, None, 0))(model, up, keys)
    obs = jax.vmap(cartpole.observation, in_axes=(None, 0))(model, batch)
    for i in range(3):
        single = cartpole.balance_start(model, up, keys[i])
        np.testing.assert_allclose(obs[i], cartpole.observation(model, single), rtol=1e-6)
