"""Pure functions: step, substeps and dt, rollout, reset."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner.engine import core

N = 3


@pytest.fixture(scope="module")
def setup(slider3):
    model = mjx.put_model(slider3, impl="jax")
    data = mjx.put_data(slider3, mujoco.MjData(slider3), impl="jax")
    state = core.init(data, N, jax.random.key(0), slider3.nu)
    return model, state


step = jax.jit(core.step, static_argnums=(3,))


def test_init_shapes_and_distinct_keys(setup):
    _, state = setup
    assert state.ctrl.shape == (N, 3)
    assert state.episode_length.dtype == jnp.int32
    assert state.terminated.dtype == bool and state.truncated.shape == (N,)
    assert state.rng.shape == (N, 2) and state.rng.dtype == jnp.uint32
    assert len({tuple(k) for k in np.asarray(state.rng)}) == N


def test_substeps_split_dt(setup):
    model, state = setup
    two = step(model, step(model, state, None, 1), None, 1)
    sub = step(model, state, None, 2)  # dt=None: 2 * timestep in 2 solver calls
    np.testing.assert_allclose(sub.data.qpos, two.data.qpos, rtol=0, atol=1e-6)
    np.testing.assert_allclose(sub.data.time, 2 * 0.01, rtol=1e-6)
    assert (sub.episode_length == 1).all()  # one step, whatever the substeps
    sub_dt = step(model, state, jnp.float32(0.02), 2)  # dt/substeps = timestep
    np.testing.assert_allclose(sub_dt.data.qpos, two.data.qpos, rtol=0, atol=1e-6)
    long = step(model, state, jnp.float32(0.04), 2)  # solver timestep becomes 0.02
    np.testing.assert_allclose(long.data.time, 0.04, rtol=1e-6)
    assert not np.allclose(long.data.qpos, two.data.qpos)


def test_rollout_matches_steps_and_accepts_a_policy(setup):
    model, state = setup
    actions = jnp.linspace(-1, 1, 5 * N * 3).reshape(5, N, 3)
    final, (qpos, qvel) = jax.jit(core.rollout, static_argnums=(3,))(model, state, actions, 5)
    s = state
    for u in actions:
        s = step(model, s.replace(ctrl=u), None, 1)
    np.testing.assert_allclose(final.data.qpos, s.data.qpos, atol=1e-6)
    np.testing.assert_allclose(qpos[-1], s.data.qpos, atol=1e-6)
    assert qpos.shape == (5, N, 3) and qvel.shape == (5, N, 3)

    def policy(s, keys):
        return jax.vmap(lambda k: jax.random.uniform(k, (3,), minval=-1, maxval=1))(keys)

    final, _ = jax.jit(core.rollout, static_argnums=(2, 3))(model, state, policy, 4)
    assert (final.episode_length == 4).all()
    assert not np.array_equal(final.rng, state.rng)  # each world's stream advanced
    assert not np.allclose(final.ctrl[0], final.ctrl[1])  # worlds draw their own


def test_rollout_rejects_wrong_action_shape(setup):
    model, state = setup
    with pytest.raises(ValueError, match=r"\(5, 3, 3\)"):
        core.rollout(model, state, jnp.zeros((5, N, 2)), 5)


def test_reset_none_restores_all_but_rng(setup):
    model, state = setup
    moved = step(model, state.replace(ctrl=state.ctrl + 1), None, 1)
    moved = moved.replace(rng=moved.rng + 1, terminated=moved.terminated | True)
    out = core.reset(moved, state, None)
    for a, b in zip(
        jax.tree.leaves(out.replace(rng=state.rng)), jax.tree.leaves(state), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(out.rng, moved.rng)  # never rewound


def test_masked_reset_keeps_rng_and_other_worlds(setup):
    model, state = setup
    moved = step(model, state.replace(ctrl=state.ctrl + 1), None, 1)
    out = core.reset(moved, state, jnp.array([True, False, False]))
    np.testing.assert_array_equal(out.data.qpos[0], state.data.qpos[0])
    np.testing.assert_array_equal(out.data.qpos[1:], moved.data.qpos[1:])
    np.testing.assert_array_equal(out.episode_length, [0, 1, 1])
    np.testing.assert_array_equal(out.rng, moved.rng)


def test_per_world_gravity_uses_the_same_step(setup):
    model, state = setup
    g = jnp.array([[0, 0, -9.81], [0, 0, -1.62], [0, 0, -9.81]])
    per_world = model.tree_replace({"opt.gravity": g})
    shared = step(model, state, None, 1)
    mixed = step(per_world, state, None, 1)
    np.testing.assert_allclose(
        mixed.data.qvel[np.array([0, 2])], shared.data.qvel[np.array([0, 2])], atol=1e-6
    )
    np.testing.assert_allclose(mixed.data.qvel[1], -1.62 * 0.01, rtol=1e-5)
    # promoted gravity restored for one world from the shared default: broadcast
    back = core.restore(per_world, model, jnp.array([False, True, False]))
    np.testing.assert_allclose(back.opt.gravity[1], [0, 0, -9.81])
    np.testing.assert_allclose(back.opt.gravity[0], g[0])
