"""Observation terms, noise, history and per-world task state (info) in the env.

The envs run on impl "c" (MuJoCo's C engine: the physics does not compile, and it is
not what these tests are about), but for the env split over two devices, which impl
"c" refuses in one process: it runs on impl "jax" and agrees within float32 rounding.
"""

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjxrunner import CompileCounter
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.kit import observations
from mjxrunner.kit.observations import Noise, ObsConfig
from mjxrunner.rl import env as mjxenv
from mjxrunner.tasks import cartpole

N = 8
C = {"impl": "c", "num_threads": 1}
STD, SCALE, HALF = 0.3, 0.1, 0.5


def observe(model, data, info):
    """Terms of several shapes: a vector, the episode clock, a constant (to read the
    noise off), the task's command and a small uint8 image."""
    del model
    return {
        "state": cartpole.observation(None, data),
        "clock": data.time[None],
        "const": jnp.ones((16,), data.qpos.dtype),
        "flat": jnp.ones((16,), data.qpos.dtype),
        "command": info["command"],
        "image": jnp.full((2, 3, 3), 7, jnp.uint8),
    }


def initial_info(model, data, key):
    del model
    return {
        "command": jax.random.uniform(key, (2,), data.qpos.dtype, -1.0, 1.0),
        "steps": jnp.zeros((), jnp.int32),
    }


def update_info(model, data, action, next_data, info, key):
    del model, data, action, next_data, key
    return {**info, "steps": info["steps"] + 1}


def reward(model, data, action, next_data, info):
    """The step count the step was taken under: shows which info the reward sees."""
    del model, data, action, next_data
    return info["steps"].astype(jnp.float32)


TASK = cartpole.BALANCE.replace(
    name="observation_terms",
    observation=observe,
    reward=reward,
    terminated=lambda model, data, info: cartpole.balance_terminated(model, data),
    initial_info=initial_info,
    update_info=update_info,
    max_episode_steps=6,
    obs_config=ObsConfig(
        noise={
            "const": Noise(std=STD, scale=SCALE),
            "flat": Noise(std=HALF, distribution="uniform"),
        },
        history={"clock": 3, "image": 2},
    ),
)


@pytest.fixture(scope="module")
def env():
    return mjxenv.make(TASK, N, autoreset="same_step", **C)


@pytest.fixture(scope="module")
def run(env):
    """Eight steps from a reset: the states, in order."""
    states = [mjxenv.jit_reset(env, jax.random.key(3))]
    for _ in range(8):
        states.append(mjxenv.jit_step(env, states[-1], jnp.zeros((N, 1))))
    return states


def test_terms_keep_their_shapes_and_history_stacks_them(env, run):
    spec = env.observation_spec
    assert set(spec) == {"state", "clock", "const", "flat", "command", "image"}
    assert spec["clock"].shape == (3,)  # a vector term's history is flattened
    assert spec["image"].shape == (2, 2, 3, 3) and spec["image"].dtype == jnp.uint8
    for s in run:
        for k, x in s.obs.items():
            assert x.shape == (N, *spec[k].shape) and x.dtype == spec[k].dtype
    with pytest.raises(TypeError, match="observation_spec"):
        _ = env.observation_size


def test_history_after_a_restart_holds_only_the_new_episode(env, run):
    dt = float(env.host.mj_model.opt.timestep)
    first = np.asarray(run[0].obs["clock"])
    np.testing.assert_array_equal(first, 0.0)  # k copies of the first observation
    after2 = np.asarray(run[2].obs["clock"])
    np.testing.assert_allclose(after2, np.tile([0.0, dt, 2 * dt], (N, 1)), atol=1e-6)
    # max_episode_steps=6: step 6 ends every episode; same_step restarts it at once.
    ended = run[6]
    assert np.asarray(ended.final_mask).all()
    last = np.tile([4 * dt, 5 * dt, 6 * dt], (N, 1))
    np.testing.assert_allclose(ended.final_obs["clock"], last, atol=1e-6)
    np.testing.assert_array_equal(ended.obs["clock"], 0.0)  # nothing of the last episode
    np.testing.assert_allclose(run[7].obs["clock"], np.tile([0.0, 0.0, dt], (N, 1)), atol=1e-6)


def test_noise_statistics_match_their_parameters(env, run):
    const = np.stack([np.asarray(s.obs["const"]) for s in run])  # value 1
    gaussian_sd = np.sqrt(STD**2 + SCALE**2)  # 1 * (1 + SCALE e1) + STD e2
    assert abs(const.mean() - 1.0) < 4 * gaussian_sd / np.sqrt(const.size)
    assert abs(const.std() / gaussian_sd - 1.0) < 0.1
    flat = np.stack([np.asarray(s.obs["flat"]) for s in run])
    assert flat.min() >= 1 - HALF and flat.max() <= 1 + HALF
    assert abs(flat.std() / (HALF / np.sqrt(3)) - 1.0) < 0.1  # uniform in +-HALF
    # Fresh noise every step and in every world; terms without noise are exact.
    assert not np.allclose(run[1].obs["const"], run[2].obs["const"])
    assert len(np.unique(np.asarray(run[1].obs["const"])[:, 0])) == N
    np.testing.assert_array_equal(run[3].obs["image"], 7)


def test_info_is_drawn_per_world_and_updated_after_the_reward(env, run):
    command = np.asarray(run[0].info["command"])
    assert len(np.unique(command[:, 0])) == N and np.abs(command).max() <= 1
    np.testing.assert_array_equal(run[0].obs["command"], command)
    # The reward of step t sees the info it was taken under (t - 1 updates).
    for t in range(1, 6):
        np.testing.assert_array_equal(run[t].reward, t - 1)
        np.testing.assert_array_equal(run[t].info["steps"], t)
    np.testing.assert_array_equal(run[5].info["command"], command)  # kept in an episode
    # A restart draws a new command from the world's own stream.
    np.testing.assert_array_equal(run[6].info["steps"], 0)
    assert not np.allclose(run[6].info["command"], command)


def test_same_seed_reproduces_and_two_devices_agree(env, run):
    if len(jax.devices()) < 2:
        pytest.skip("needs two host devices (tests/conftest.py forces them)")
    again = mjxenv.jit_reset(env, jax.random.key(3))
    split = mjxenv.make(TASK, N, autoreset="same_step", devices=2)
    sharded = mjxenv.jit_reset(split, jax.random.key(3))
    for _ in range(7):
        again = mjxenv.jit_step(env, again, jnp.zeros((N, 1)))
        sharded = mjxenv.jit_step(split, sharded, jnp.zeros((N, 1)))
    assert sharded.obs["state"].sharding.num_devices == 2
    for k in again.obs:
        np.testing.assert_array_equal(np.asarray(again.obs[k]), np.asarray(run[7].obs[k]), k)
        # the same noise, info and history; MJX's float32 physics against MuJoCo's
        np.testing.assert_allclose(np.asarray(sharded.obs[k]), run[7].obs[k], atol=1e-5, err_msg=k)


def test_no_recompiles_after_warm_up(env, run):
    state = mjxenv.jit_reset_worlds(env, run[-1], np.arange(N) >= 6)  # its first compile
    with CompileCounter() as counter:
        for _ in range(3):
            state = mjxenv.jit_step(env, state, jnp.ones((N, 1)))
        state = mjxenv.jit_reset_worlds(env, state, np.arange(N) < 2)
        state = mjxenv.jit_step(env, state, jnp.ones((N, 1)))
        jax.block_until_ready(state)
    assert counter.count == 0


def test_normalization_scales_float_vector_terms_only():
    task = TASK.replace(obs_config=None, max_episode_steps=50)
    env = mjxenv.make(task, N, autoreset="same_step", normalize_obs=True, **C)
    state = mjxenv.jit_reset(env, jax.random.key(0))
    norm = state.obs_norm
    assert set(norm.mean) == {"state", "clock", "const", "flat", "command"}  # not "image"
    np.testing.assert_array_equal(state.obs["image"], 7)
    # One sample per world so far: the command is standardized over the worlds.
    np.testing.assert_allclose(np.asarray(state.obs["command"]).mean(0), 0.0, atol=1e-5)


def test_gymnasium_takes_observation_terms(env):
    vec = MjxVectorEnv(TASK, 4, autoreset_mode="same_step", **C)
    space = vec.single_observation_space
    assert isinstance(space, gymnasium.spaces.Dict)
    assert space["image"].dtype == np.uint8 and space["image"].high.max() == 255
    obs, _ = vec.reset(seed=0)
    assert vec.observation_space.contains(obs)
    for _ in range(6):
        obs, _, _, _, infos = vec.step(np.zeros((4, 1), np.float32))
        assert vec.observation_space.contains(obs)
    assert infos["_final_obs"].all()
    assert space.contains(infos["final_obs"][0])


def test_bad_configs_are_refused_at_make():
    with pytest.raises(ValueError, match="names term 'nope'"):
        mjxenv.make(TASK.replace(obs_config=ObsConfig(noise={"nope": Noise(std=1.0)})), 2)
    with pytest.raises(TypeError, match="must be float"):
        mjxenv.make(TASK.replace(obs_config=ObsConfig(noise={"image": Noise(std=1.0)})), 2)
    with pytest.raises(ValueError, match="mapping from term names"):
        mjxenv.make(TASK.replace(obs_config=ObsConfig(history=3)), 2)
    with pytest.raises(ValueError, match="one value per element"):
        mjxenv.make(TASK.replace(obs_config=ObsConfig(noise={"clock": Noise(std=(1.0, 2.0))})), 2)
    with pytest.raises(ValueError, match=">= 0"):
        Noise(std=-1.0)
    with pytest.raises(ValueError, match="distribution"):
        Noise(distribution="cauchy")
    with pytest.raises(ValueError, match="history of term"):
        ObsConfig(history={"clock": 0})
    with pytest.raises(TypeError, match="ObsConfig"):
        TASK.replace(obs_config={"noise": 1})
    with pytest.raises(ValueError, match=r"needs Task\.initial_info"):
        TASK.replace(initial_info=None)
    # an array observation takes one Noise and one history length
    plain = cartpole.BALANCE.replace(obs_config=ObsConfig(noise=Noise(std=0.1), history=2))
    assert mjxenv.make(plain, 2).observation_spec.shape == (10,)
    assert observations.check(None, jax.ShapeDtypeStruct((3,), jnp.float32)).identity
