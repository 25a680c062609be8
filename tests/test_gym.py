"""The Gymnasium adapter against Gymnasium's own ``SyncVectorEnv``.

The reference is a single-world ``gymnasium.Env`` written here on native MuJoCo
(float64), using the task's functions for observation, reward and termination and
the documented per-world key stream for its starts; ``SyncVectorEnv`` runs ``N`` of
them. For the same actions both must give the same observations, rewards, flags and
autoreset behaviour in every mode.

The doors run on impl "c" (MuJoCo's C engine: the physics does not compile, and the
door, not the physics, is what is tested), but for the door split over two devices,
which impl "c" refuses in one process: it runs on impl "jax" (MJX, float32).

Tolerance: observations are float32 (relative precision ~6e-8) and MJX computes in
float32, the reference in float64. The balance task's episodes last at most 25 steps
here, too short for the unstable pole to amplify rounding much: the worst observation
difference measured with MJX over these runs was 2.4e-7 (a few float32 ulps of the
velocities). ``ATOL = 1e-5`` leaves a margin of ~40x and still fails on any real
mismatch (a missed restart, a wrong world or a step out of phase moves observations
by > 1e-2). Rewards and flags are compared exactly.
"""

from types import SimpleNamespace

import gymnasium
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from mjxrunner import CompileCounter, tasks
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.engine import models
from mjxrunner.engine.params import Term
from mjxrunner.rl import env as E

TASK = tasks.get("cartpole_balance").replace(max_episode_steps=25)  # as in test_env
N = 4
SEED = 11
STEPS = 60
ATOL = 1e-5
C = {"impl": "c", "num_threads": 1}


def policy(obs) -> np.ndarray:
    """Worlds 0 and 1 push until they fall, worlds 2 and 3 balance to the time limit."""
    obs = np.asarray(obs)
    angle = np.arctan2(obs[:, 2], obs[:, 1])
    u = np.clip(10 * angle + 2 * obs[:, 4] + 0.5 * obs[:, 0] + obs[:, 3], -1, 1)
    u[0], u[1] = 1.0, -1.0
    return u[:, None].astype(np.float32)


def float32_view(d: mujoco.MjData) -> SimpleNamespace:
    """What a task function reads, as the float32 numbers MJX would hold."""
    return SimpleNamespace(qpos=d.qpos.astype(np.float32), qvel=d.qvel.astype(np.float32))


class NativeWorld(gymnasium.Env):
    """World ``index`` of ``N``: the task on native MuJoCo, one world."""

    metadata = {"render_modes": []}  # noqa: RUF012 - Gymnasium's class attribute

    def __init__(self, index: int, start_env: E.Env):
        self.m = models.load(TASK.model)
        self.d = mujoco.MjData(self.m)
        self.keyframe = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_KEY, TASK.keyframe)
        self.start_env = start_env  # the task's initial_state takes an mjx start
        self.key = jax.random.split(jax.random.key(SEED), N)[index]
        low, high = tasks.action_bounds(self.m)
        self.action_space = gymnasium.spaces.Box(low, high, low.shape, np.float32)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (5,), np.float32)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.asarray(TASK.observation(None, float32_view(self.d)), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.key, draw = jax.random.split(self.key)  # the documented stream
        start = TASK.initial_state(self.start_env.model, self.start_env.start, draw)
        mujoco.mj_resetDataKeyframe(self.m, self.d, self.keyframe)
        self.d.qpos[:] = np.asarray(start.qpos)
        self.d.qvel[:] = np.asarray(start.qvel)
        mujoco.mj_forward(self.m, self.d)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        before = float32_view(self.d)
        u = np.clip(action, self.action_space.low, self.action_space.high)
        self.d.ctrl[:] = u
        mujoco.mj_step(self.m, self.d)
        self.t += 1
        after = float32_view(self.d)
        reward = float(TASK.reward(None, before, jnp.asarray(u), after))
        terminated = bool(TASK.terminated(None, after))
        return self._obs(), reward, terminated, self.t >= TASK.max_episode_steps, {}


@pytest.fixture(scope="module")
def adapters():
    return {
        mode: MjxVectorEnv(TASK, N, autoreset_mode=mode, seed=SEED, **C) for mode in AutoresetMode
    }


def reference(mode: AutoresetMode, adapter: MjxVectorEnv) -> SyncVectorEnv:
    return SyncVectorEnv(
        [lambda i=i: NativeWorld(i, adapter.env) for i in range(N)], autoreset_mode=mode
    )


def assert_same_infos(ours: dict, theirs: dict) -> None:
    """As SyncVectorEnv's, besides the finished episodes that the door adds as
    RecordEpisodeStatistics does (tests/test_gym_episode_info.py)."""
    ours = {k: v for k, v in ours.items() if k not in ("episode", "_episode")}
    assert sorted(ours) == sorted(theirs)
    for key in ("_final_obs", "_final_info"):
        if key in theirs:
            np.testing.assert_array_equal(ours[key], theirs[key])
    if "final_obs" in theirs:
        for a, b in zip(ours["final_obs"], theirs["final_obs"], strict=True):
            assert (a is None) == (b is None)
            if b is not None:
                np.testing.assert_allclose(a, b, atol=ATOL)
        assert ours["final_info"] == theirs["final_info"]


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_matches_sync_vector_env_for_the_same_actions(adapters, mode):
    ours = adapters[mode]
    theirs = reference(mode, ours)
    obs, info = ours.reset(seed=SEED)
    ref_obs, ref_info = theirs.reset()
    np.testing.assert_allclose(obs, ref_obs, atol=ATOL)
    assert info == ref_info == {}
    ends = restarts = 0
    for t in range(STEPS):
        actions = policy(obs)
        obs, reward, term, trunc, info = ours.step(actions)
        ref_obs, ref_reward, ref_term, ref_trunc, ref_info = theirs.step(actions)
        np.testing.assert_allclose(obs, ref_obs, atol=ATOL, err_msg=f"step {t}")
        np.testing.assert_array_equal(reward, ref_reward)
        np.testing.assert_array_equal(term, ref_term)
        np.testing.assert_array_equal(trunc, ref_trunc)
        assert obs.dtype == np.float32 and reward.dtype == np.float64 and term.dtype == bool
        assert_same_infos(info, ref_info)
        ends += int((term | trunc).sum())
        if mode == AutoresetMode.DISABLED and (term | trunc).any():
            mask = term | trunc
            obs, _ = ours.reset(options={"reset_mask": mask.copy()})
            ref_obs, _ = theirs.reset(options={"reset_mask": mask.copy()})
            np.testing.assert_allclose(obs, ref_obs, atol=ATOL)
            restarts += 1
        if mode == AutoresetMode.NEXT_STEP and t == 5:  # a partial reset mid-episode
            mask = np.array([False, True, False, True])
            obs, _ = ours.reset(options={"reset_mask": mask.copy()})
            ref_obs, _ = theirs.reset(options={"reset_mask": mask.copy()})
            np.testing.assert_allclose(obs, ref_obs, atol=ATOL)
    assert ends >= 6  # both kinds of end, several times, were compared
    assert restarts > 0 or mode != AutoresetMode.DISABLED


def test_spaces_and_metadata(adapters):
    v = adapters[AutoresetMode.SAME_STEP]
    assert v.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert v.single_observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    assert v.single_action_space == gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    assert v.observation_space.shape == (N, 5) and v.action_space.shape == (N, 1)
    assert v.num_envs == N
    same = MjxVectorEnv(TASK, N, autoreset_mode="same_step", **C)
    assert same.autoreset_mode == AutoresetMode.SAME_STEP
    with pytest.raises(ValueError, match="autoreset_mode must be one of"):
        MjxVectorEnv(TASK, N, autoreset_mode="Sometimes")


def test_seeds_repeat_and_plain_resets_draw_new_starts(adapters):
    v = adapters[AutoresetMode.NEXT_STEP]
    a, _ = v.reset(seed=5)
    b, _ = v.reset(seed=5)
    c, _ = v.reset()  # the streams go on: new starts
    np.testing.assert_array_equal(a, b)
    assert not np.any(a == c)
    d, _ = v.reset(seed=5, options={"reset_mask": np.array([True, False, False, False])})
    # re-seeded world: its first start again, drawn by a masked reset (another
    # program than the full reset's, so equal up to float32 rounding)
    np.testing.assert_allclose(d[0], a[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(d[1:], c[1:])  # the others untouched


def snapshot(v: MjxVectorEnv):
    return jax.device_get(v.state)


def unchanged(v: MjxVectorEnv, before) -> bool:
    after = snapshot(v)
    return all(
        np.array_equal(x, y, equal_nan=True)
        for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(before), strict=True)
    )


def bad_door_calls(v, n: int) -> list[tuple]:
    """``(error, message, call)``: steps and resets the Gymnasium door ``v`` of ``n``
    worlds and one control refuses, each changing nothing."""
    return [
        (ValueError, "shape", lambda: v.step(np.zeros((n, 2)))),
        (ValueError, "finite", lambda: v.step(np.full((n, 1), np.nan))),
        (TypeError, "real numbers", lambda: v.step(np.zeros((n, 1), bool))),
        (TypeError, "numpy array", lambda: v.reset(options={"reset_mask": [True] * n})),
        (TypeError, "dtype bool", lambda: v.reset(options={"reset_mask": np.ones(n, int)})),
        (ValueError, "shape", lambda: v.reset(options={"reset_mask": np.ones(n + 1, bool)})),
        (ValueError, "at least one", lambda: v.reset(options={"reset_mask": np.zeros(n, bool)})),
        (ValueError, "unknown reset options", lambda: v.reset(options={"level": 3})),
        (ValueError, "seed", lambda: v.reset(seed=-1)),
    ]


def test_bad_input_is_rejected_and_changes_nothing(adapters):
    v = adapters[AutoresetMode.NEXT_STEP]
    v.reset(seed=1)
    before = snapshot(v)
    for error, message, call in bad_door_calls(v, N):
        with pytest.raises(error, match=message):
            call()
        assert unchanged(v, before), message


def test_disabled_mode_refuses_to_step_an_ended_world(adapters):
    v = adapters[AutoresetMode.DISABLED]
    v.reset(seed=2)
    push = np.ones((N, 1), np.float32)
    for _ in range(TASK.max_episode_steps):
        _, _, term, trunc, _ = v.step(push)
        if (term | trunc).any():
            break
    ended = term | trunc
    assert ended.any()
    before = snapshot(v)
    with pytest.raises(RuntimeError, match="reset_mask"):
        v.step(push)
    assert unchanged(v, before)
    v.reset(options={"reset_mask": ended})
    v.step(push)  # fine again


def test_no_recompiles_after_warm_up_and_statistics_view(adapters):
    v = adapters[AutoresetMode.SAME_STEP]
    obs, _ = v.reset(seed=3)
    obs, *_ = v.step(policy(obs))
    v.reset(options={"reset_mask": np.array([True, False, True, False])})
    with CompileCounter() as c:
        for _ in range(30):
            obs, *_ = v.step(policy(obs))
        v.reset(options={"reset_mask": np.array([False, True, False, False])})
        stats = v.episode_statistics()
        v.reset(seed=4)
    assert c.count == 0
    assert stats["episodes"] >= 2 and stats["last_return"].shape == (N,)
    assert v.episode_statistics()["episodes"] == 0  # a seeded full reset clears them
    with pytest.raises(RuntimeError, match="reset"):
        MjxVectorEnv(TASK, N, **C).step(np.zeros((N, 1)))


# --- the packed state under every stateful door -----------------------------------------


def test_layout_packs_leaves_into_few_buffers_and_back():
    """One buffer per dtype and placement: leaves split over the worlds axis go
    into a 2-D buffer split the same way, replicated and one-device leaves are
    raveled, PRNG keys keep buffers of their own; unpacking gives every leaf back,
    placed as it was."""
    from jax.sharding import NamedSharding, PartitionSpec

    from mjxrunner.engine import sharding
    from mjxrunner.engine.packing import Layout, packer, unpacker

    mesh = sharding.make_mesh(2)
    split = NamedSharding(mesh, PartitionSpec(sharding.AXIS))
    whole = NamedSharding(mesh, PartitionSpec())
    tree = {
        "pos": jax.device_put(np.arange(24.0, dtype=np.float32).reshape(4, 3, 2), split),
        "done": jax.device_put(np.array([True, False, True, True]), split),
        "t": jax.device_put(np.arange(4, dtype=np.float32), split),
        "scale": jax.device_put(np.float32(2.5), whole),
        "none": jax.device_put(np.zeros((4, 0), np.float32), whole),
        "key": jax.device_put(jax.random.split(jax.random.key(0), 4), split),
    }
    layout = Layout.of(tree)
    buffers = packer(layout)(jax.tree.leaves(tree))
    kinds = sorted((k, str(d), shape) for k, d, _, shape in layout.buffers)
    assert [k for k in kinds if k[0] != "own"] == [
        ("flat", "float32", (1,)),  # scale and the empty leaf
        ("rows", "bool", (4, 1)),
        ("rows", "float32", (4, 7)),  # pos (6 per world) and t
    ]
    assert len(buffers) == 4 and sum(k[0] == "own" for k in kinds) == 1
    back = layout.treedef.unflatten(unpacker(layout)(buffers))
    for name, x in tree.items():
        y = back[name]
        assert y.sharding == x.sharding and y.shape == x.shape, name
        if name == "key":
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    with pytest.raises(ValueError, match="do not fit"):
        layout.pack(jax.tree.leaves({**tree, "t": tree["t"][:2]}))
    # leaves chosen first lead their buffer, in the order given (leaves: done, key,
    # none, pos, scale, t): t, then pos
    first = Layout.of(tree, first=(5,))
    assert [first.leaves[i][1:3] for i in (5, 3)] == [(0, 1), (1, 7)]
    rows = packer(first)(jax.tree.leaves(tree))[first.leaves[5][0]]
    np.testing.assert_array_equal(np.asarray(rows)[:, 0], np.asarray(tree["t"]))
    again = first.treedef.unflatten(unpacker(first)(packer(first)(jax.tree.leaves(tree))))
    np.testing.assert_array_equal(np.asarray(again["pos"]), np.asarray(tree["pos"]))


def test_empty_leaves_take_no_buffer_of_their_own():
    """A leaf with no values joins a flat buffer of its dtype (even one kept apart
    for a host call's results), so a compiled call takes and returns no buffer of
    nothing; only a dtype with no other leaf gets an empty buffer. Packing and
    unpacking give every leaf back, empty ones with their shapes."""
    from mjxrunner.engine.packing import Layout, packer, unpacker

    tree = {
        "a": jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3),
        "b": jnp.array([True, False]),
        "e": jnp.zeros((2, 0), bool),  # empty, kept apart like the step's results
        "f": jnp.zeros((2, 0), jnp.float32),
        "g": jnp.zeros((0,), jnp.int32),  # empty, the only int32 leaf
    }
    layout = Layout.of(tree, apart=(2,))
    kinds = sorted((str(d), shape) for _, d, _, shape in layout.buffers)
    assert kinds == [("bool", (2,)), ("float32", (6,)), ("int32", (0,))]
    buffers = packer(layout)(jax.tree.leaves(tree))
    back = layout.treedef.unflatten(unpacker(layout)(buffers))
    for name, x in tree.items():
        assert back[name].shape == x.shape and back[name].dtype == x.dtype, name
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(x))


def test_a_door_split_over_two_devices_steps_as_on_one(adapters):
    one = adapters[AutoresetMode.SAME_STEP]
    two = MjxVectorEnv(TASK, N, autoreset_mode="same_step", seed=SEED, devices=2)
    obs, _ = one.reset(seed=SEED)
    np.testing.assert_allclose(two.reset(seed=SEED)[0], obs, atol=ATOL)
    for _ in range(TASK.max_episode_steps + 2):  # through the restarts
        u = policy(obs)
        obs, _, term, trunc, info = one.step(u)
        got = two.step(u)
        np.testing.assert_allclose(got[0], obs, atol=ATOL)
        np.testing.assert_array_equal(got[2] | got[3], term | trunc)
        assert sorted(got[4]) == sorted(info)
    assert two.state.runner.data.qpos.sharding.num_devices == 2


def test_set_randomization_keeps_the_running_worlds_until_the_next_reset(adapters):
    v = MjxVectorEnv(TASK, N, seed=SEED, **C)  # the compiled step of adapters' NEXT_STEP
    v.reset(seed=SEED)
    v.step(np.zeros((N, 1), np.float32))
    running = v.env
    v.set_randomization([Term("dof_damping", 0.5, 2.0)])
    v.step(np.zeros((N, 1), np.float32))  # the state was thrown away: "call reset()"
    np.testing.assert_array_equal(v.state.episode_length, 2)
    assert v.env is running and v.state.model is None  # the worlds run on as they were
    v.reset()  # the new terms from here on
    assert v.env.config.randomization is not None and v.state.model is not None
    np.testing.assert_array_equal(v.state.episode_length, 0)
