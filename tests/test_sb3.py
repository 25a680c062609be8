"""Stable-Baselines3's ``VecEnv`` door (:mod:`mjxrunner.doors.sb3`) against the real SB3.

Every env runs on impl "c" (MuJoCo's C engine: nothing of the physics compiles, and
the physics is not what these tests are about). Checked: SB3's ``VecEnv`` contract
as its ``DummyVecEnv`` keeps it (spaces, dtypes, same-step autoreset with
``terminal_observation``, ``TimeLimit.truncated``, seeds used once), the episode
records against SB3's own ``VecMonitor`` counting the same steps, dict observations
under ``MultiInputPolicy``, bad input refused with nothing changed, and SB3's PPO
learning cartpole balance: measured here (16 worlds, 48 k steps, ~8 s of training
on 2 cores), a uniformly random policy's mean first-episode return is 57-79 of 500
over seeds 0-7 and the trained (deterministic) policy's 327-500, 4.8x to 8.8x of
it; the test asks for 3x.
"""

import jax
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from stable_baselines3 import PPO
from stable_baselines3.common import logger as sb3_logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv, VecMonitor

from mjxrunner import tasks
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.doors.sb3 import Sb3VecEnv
from mjxrunner.tasks import cartpole

C = {"impl": "c", "num_threads": 1}
N = 4
TASK = tasks.get("cartpole_balance").replace(max_episode_steps=25)
STEPS = 40
PUSHED = np.array([True, True, False, False])  # these worlds push the cart and fall


def actions_at(step: int) -> np.ndarray:
    """Full push in the PUSHED worlds (the pole falls: terminated), none in the others
    (the pole stays up until the time limit: truncated)."""
    del step
    return np.where(PUSHED, 1.0, 0.0).astype(np.float32)[:, None]


def pole_angle(obs: np.ndarray) -> np.ndarray:
    return np.arctan2(obs[..., 2], obs[..., 1])


@pytest.fixture(scope="module")
def env():
    return Sb3VecEnv(TASK, N, seed=3, **C)


@pytest.fixture(scope="module")
def run(env):
    """``(first obs, [(obs, rewards, dones, infos)] per step)`` of STEPS steps from the
    constructor's seed."""
    first = env.reset()
    steps = [env.step(actions_at(t)) for t in range(STEPS)]
    return first, steps


def state_of(env):
    return [np.array(x) for x in jax.tree.leaves(env.vector_env.state)]


def assert_same(before, after):
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_is_an_sb3_vecenv_of_single_world_spaces(env):
    assert isinstance(env, VecEnv)
    assert env.num_envs == N
    assert env.observation_space == spaces.Box(-np.inf, np.inf, (5,), np.float32)
    assert env.action_space == spaces.Box(-1.0, 1.0, (1,), np.float32)
    assert env.render_mode is None
    assert env.metadata["render_fps"] == 100  # SB3's VecVideoRecorder reads it
    assert env.vector_env.autoreset_mode == AutoresetMode.SAME_STEP


def test_steps_give_what_dummy_vec_env_gives(run):
    first, steps = run
    assert first.shape == (N, 5) and first.dtype == np.float32 and first.flags.writeable
    for obs, rewards, dones, infos in steps:
        assert obs.shape == (N, 5) and obs.dtype == np.float32
        assert obs.flags.writeable  # torch warns on read-only arrays; wrappers write
        assert rewards.shape == (N,) and rewards.dtype == np.float32
        assert dones.shape == (N,) and dones.dtype == np.bool_
        assert isinstance(infos, list) and len(infos) == N
        for i, info in enumerate(infos):
            assert isinstance(info["TimeLimit.truncated"], bool)
            ended = {"terminal_observation", "episode"} <= set(info)
            assert ended == dones[i]  # only a world whose episode ended has them
    assert any(d.any() for _, _, d, _ in steps)


def test_a_done_world_returns_its_reset_obs_and_keeps_its_terminal_one(run):
    first, steps = run
    previous = first
    falls = limits = 0
    for obs, _, dones, infos in steps:
        for i in np.flatnonzero(dones):
            terminal = infos[i]["terminal_observation"]
            assert terminal.shape == (5,) and terminal.dtype == np.float32
            # The terminal obs is 0.01 s on from the last one (positions barely
            # moved); the returned obs is a new start, within 0.05 of upright rest.
            assert np.abs(terminal[:3] - previous[i][:3]).max() < 0.03
            assert np.abs(obs[i] - terminal).max() > 1e-3
            assert np.abs(obs[i][[0, 3, 4]]).max() <= 0.05 + 1e-6
            assert abs(pole_angle(obs[i])) <= 0.05 + 1e-6
            if infos[i]["TimeLimit.truncated"]:
                limits += 1
                assert not PUSHED[i] and infos[i]["episode"]["l"] == TASK.max_episode_steps
                assert abs(pole_angle(terminal)) < cartpole.BALANCE_ANGLE
            else:  # terminated: the pole fell past the balance angle
                falls += 1
                assert PUSHED[i] and infos[i]["episode"]["l"] < TASK.max_episode_steps
                assert abs(pole_angle(terminal)) > cartpole.BALANCE_ANGLE
        previous = obs
    assert falls >= 2 and limits == 2


def test_episode_records_are_what_sb3s_vec_monitor_counts(env, run):
    """SB3's own VecMonitor over the same worlds, from the same seed, with the same
    actions, counts the same returns and lengths."""
    _, steps = run
    ours = [
        (i, info["episode"])
        for *_, infos in steps
        for i, info in enumerate(infos)
        if "episode" in info
    ]
    assert ours
    times = [e["t"] for _, e in ours]
    assert times == sorted(times) and times[0] >= 0  # seconds since the env was made
    monitor = VecMonitor(env)  # replaces infos[i]["episode"] with its own count
    assert env.seed(3) == [3, 4, 5, 6]
    monitor.reset()
    theirs = []
    for t in range(STEPS):
        *_, infos = monitor.step(actions_at(t))
        theirs += [(i, info["episode"]) for i, info in enumerate(infos) if "episode" in info]
    assert [(i, e["r"], e["l"]) for i, e in ours] == [(i, e["r"], e["l"]) for i, e in theirs]
    assert isinstance(ours[0][1]["r"], float) and isinstance(ours[0][1]["l"], int)


def test_seeds_are_used_by_the_next_reset_only(env):
    assert env.seed(7) == [7, 8, 9, 10]
    a = env.reset()
    assert env._seeds == [None] * N  # used once
    b = env.reset()  # continues the worlds' streams
    env.seed(7)
    np.testing.assert_array_equal(env.reset(), a)
    assert not np.array_equal(a, b)
    with pytest.raises(ValueError, match="seed"):
        env.seed(-1)
    with pytest.raises(TypeError, match="seed must be an int"):
        env.seed(1.5)
    assert env._seeds == [None] * N  # refused seeds are not kept
    PPO("MlpPolicy", env, n_steps=8, batch_size=16, seed=7, device="cpu")
    assert env._seeds == [7, 8, 9, 10]  # SB3 seeds the env through seed()
    np.testing.assert_array_equal(env.reset(), a)


def test_reset_options_are_refused(env):
    env.set_options(None)
    env.set_options({})
    env.set_options([{}] * N)
    with pytest.raises(ValueError, match="no reset options"):
        env.set_options({"reset_mask": np.ones(N, bool)})
    with pytest.raises(ValueError, match="no reset options"):
        env.set_options([{}, {"level": 2}, {}, {}])
    assert env._options == [{}] * N


def test_bad_actions_are_refused_and_change_nothing(env):
    env.reset()
    env.step(np.zeros((N, 1), np.float32))
    before = state_of(env)
    bad = [
        (np.zeros((N, 2), np.float32), ValueError, rf"actions must have shape \({N}, 1\)"),
        (np.zeros((N,), np.float32), ValueError, r"shape .*got \(4,\)"),
        (np.zeros((N + 1, 1), np.float32), ValueError, "shape"),
        (np.zeros((N, 1), bool), TypeError, "actions must be real numbers, got dtype bool"),
        (np.zeros((N, 1), np.complex64), TypeError, "real numbers"),
        (np.full((N, 1), "a"), TypeError, "real numbers"),
        (
            np.array([[0.0], [np.nan], [0.0], [0.0]]),
            ValueError,
            r"finite; got NaN or Inf at \[\[1, 0\]\]",
        ),
        (np.full((N, 1), np.inf), ValueError, "finite"),
        ([[0.0], [0.0, 1.0], [0.0], [0.0]], TypeError, "array-like"),
        (None, TypeError, "numeric"),
    ]
    for actions, error, message in bad:
        with pytest.raises(error, match=message):
            env.step(actions)
        assert_same(before, state_of(env))
        # the refused actions were dropped: nothing is left for step_wait
        with pytest.raises(RuntimeError, match="step_async"):
            env.step_wait()
    obs, *_ = env.step(np.zeros((N, 1), np.float64))  # another float dtype: converted
    assert obs.shape == (N, 5)
    with pytest.raises(RuntimeError, match="reset"):
        Sb3VecEnv(TASK, N, **C).step(np.zeros((N, 1), np.float32))


def test_bad_constructions_are_refused(env):
    vector = MjxVectorEnv(TASK, N, autoreset_mode="same_step", **C)
    assert Sb3VecEnv(vector).vector_env is vector
    with pytest.raises(ValueError, match="same step"):
        Sb3VecEnv(MjxVectorEnv(TASK, N, **C))  # next-step autoreset
    with pytest.raises(ValueError, match="either an MjxVectorEnv or a task"):
        Sb3VecEnv(vector, N)
    with pytest.raises(ValueError, match="no autoreset_mode"):
        Sb3VecEnv(TASK, N, autoreset_mode="same_step", **C)
    with pytest.raises(ValueError, match="num_envs is required"):
        Sb3VecEnv(TASK)


def test_attributes_and_methods_act_on_the_vector_env(env):
    assert env.get_attr("render_mode") == [None] * N
    assert env.get_attr("num_envs", indices=[1, 3]) == [N, N]
    assert env.get_attr("num_envs", indices=2) == [N]
    assert env.has_attr("episode_statistics") and not env.has_attr("nope")
    stats = env.env_method("episode_statistics")
    assert len(stats) == N and stats[0] is stats[-1] and "episodes" in stats[0]
    assert env.env_is_wrapped(Monitor) == [False] * N
    assert env.env_is_wrapped(Monitor, indices=[0]) == [False]
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 4\)"):
        env.get_attr("num_envs", indices=[N])
    with pytest.raises(ValueError, match="every world: pass indices=None"):
        env.set_attr("render_mode", None, indices=[0])
    with pytest.raises(ValueError, match="every world"):
        env.env_method("episode_statistics", indices=[0, 1])
    env.set_attr("spec", None)
    assert env.vector_env.spec is None


def test_dict_observations_train_with_multi_input_policy(tmp_path):
    def observe(model, data):
        return {"state": cartpole.observation(model, data), "clock": data.time[None]}

    task = cartpole.BALANCE.replace(name="sb3_terms", observation=observe, max_episode_steps=5)
    env = Sb3VecEnv(task, 3, **C)
    assert isinstance(env.observation_space, spaces.Dict)
    assert env.observation_space["state"].shape == (5,)
    obs = env.reset()
    assert {k: v.shape for k, v in obs.items()} == {"state": (3, 5), "clock": (3, 1)}
    for _ in range(task.max_episode_steps):
        obs, _, dones, infos = env.step(np.zeros((3, 1), np.float32))
    assert dones.all()
    np.testing.assert_array_equal(obs["clock"], 0.0)  # restarted
    terminal = infos[0]["terminal_observation"]
    assert set(terminal) == {"state", "clock"} and terminal["state"].shape == (5,)
    np.testing.assert_allclose(terminal["clock"], [0.05], rtol=1e-5)  # 5 steps of 0.01 s
    model = PPO("MultiInputPolicy", env, n_steps=8, batch_size=12, seed=0, device="cpu")
    quiet(model, tmp_path)
    model.learn(2 * 8 * 3)
    assert len(model.ep_info_buffer) > 0


def test_render_tiles_one_frame_per_world():
    env = Sb3VecEnv(TASK, 2, render_mode="rgb_array", render_size=(64, 48), **C)
    env.reset()
    frames = env.get_images()
    assert [f.shape for f in frames] == [(48, 64, 3)] * 2 and frames[0].dtype == np.uint8
    assert env.render().shape == (96, 64, 3)  # SB3's tile_images: 2 rows of 1
    env.close()


def test_get_images_without_rgb_array_warns(env):
    with pytest.warns(UserWarning, match="rgb_array"):
        assert env.get_images() == [None] * N


# --- PPO learns ---------------------------------------------------------------------

LEARN_TASK = tasks.get("cartpole_balance")  # episodes of at most 500 steps
LEARN_WORLDS = 16


def quiet(model, folder) -> None:
    """SB3's learn() otherwise makes a log folder of its own in the system's temp dir."""
    model.set_logger(sb3_logger.configure(str(folder), []))


def first_episode_return(env: Sb3VecEnv, act) -> float:
    """Mean return of each world's first episode after a reset, under ``act(obs)``."""
    obs = env.reset()
    returns = np.full(env.num_envs, np.nan)
    while np.isnan(returns).any():
        obs, _, dones, infos = env.step(act(obs))
        for i in np.flatnonzero(dones & np.isnan(returns)):
            returns[i] = infos[i]["episode"]["r"]
    return float(returns.mean())


def test_ppo_learns_cartpole_balance(tmp_path):
    env = Sb3VecEnv(LEARN_TASK, LEARN_WORLDS, seed=0, **C)
    rng = np.random.default_rng(0)
    low, high = env.action_space.low, env.action_space.high
    random = first_episode_return(
        env, lambda obs: rng.uniform(low, high, (LEARN_WORLDS, 1)).astype(np.float32)
    )
    assert 30 < random < 120  # as measured
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=64,
        batch_size=256,
        learning_rate=1e-3,
        policy_kwargs={"net_arch": [64, 64]},
        seed=0,
        device="cpu",
    )
    quiet(model, tmp_path)
    model.learn(48 * 64 * LEARN_WORLDS)
    # SB3's logger shows ep_rew_mean from these, with no Monitor or VecMonitor
    assert len(model.ep_info_buffer) == model.ep_info_buffer.maxlen
    trained = first_episode_return(env, lambda obs: model.predict(obs, deterministic=True)[0])
    print(f"random {random:.1f}, trained {trained:.1f}")
    assert trained > 3 * random
