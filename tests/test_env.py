"""The functional env: fresh per-world starts, the three autoreset modes, terminated
vs truncated, episode statistics, determinism and bad input.

Every test shares one compiled ``reset``/``step``/``reset_worlds`` (the module-level
``jit_*`` of ``mjxrunner.env``): the autoreset mode is an array, so switching modes
does not recompile (the blown-up world's per-world actuator compiles its own). The
task is cartpole balance cut to 25 steps, so that within a short run some worlds
fall (terminated) and others reach the limit (truncated). The env runs on impl "c"
(MuJoCo's C engine: the physics does not compile, and it is not what these tests
are about).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjxrunner import CompileCounter, tasks, world_mask
from mjxrunner.engine.worlds import num_worlds
from mjxrunner.rl import env as E

TASK = tasks.get("cartpole_balance").replace(max_episode_steps=25)
N = 4
STEPS = 60
IMPL = "c"  # autoreset and bookkeeping, not the physics: see the module docstring


def policy(obs) -> np.ndarray:
    """World 0 pushes right, world 1 left (both fall); worlds 2 and 3 balance with a
    PD rule until the time limit."""
    obs = np.asarray(obs)
    angle = np.arctan2(obs[:, 2], obs[:, 1])
    u = np.clip(10 * angle + 2 * obs[:, 4] + 0.5 * obs[:, 0] + obs[:, 3], -1, 1)
    u[0], u[1] = 1.0, -1.0
    return u[:, None].astype(np.float32)


def run(env, mode: str, key: int = 0, steps: int = STEPS) -> list:
    """Host copies of the state after reset and after each step."""
    env = env.with_autoreset(mode)
    s = E.jit_reset(env, jax.random.key(key))
    out = [jax.device_get(s)]
    for _ in range(steps):
        s = E.jit_step(env, s, policy(s.obs))
        out.append(jax.device_get(s))
    return out


@pytest.fixture(scope="module")
def env():
    return E.make(TASK, N, autoreset="next_step", impl=IMPL)


@pytest.fixture(scope="module")
def runs(env):
    return {mode: run(env, mode) for mode in E.AUTORESET_MODES}


def leaves_equal(a, b) -> bool:
    return all(
        np.array_equal(x, y, equal_nan=True)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# --- reset ------------------------------------------------------------------------


def test_reset_draws_a_fresh_start_per_world_from_its_own_stream(env, runs):
    s = runs["next_step"][0]
    assert s.obs.shape == (N, 5) and s.obs.dtype == np.float32
    assert s.runner.rng.shape == (N, 2) and s.runner.rng.dtype == np.uint32
    assert not s.done.any() and not s.final_mask.any() and not s.reward.any()
    assert not s.episode_length.any() and not s.stats.completed.any()
    qpos = s.runner.data.qpos
    assert len({tuple(q) for q in qpos}) == N  # different worlds, different starts
    assert np.all(np.abs(qpos) <= 0.05)
    # the documented stream: world i starts from split(split(key, N)[i])[1]
    for i, world_key in enumerate(jax.random.split(jax.random.key(0), N)):
        draw = jax.random.split(world_key)[1]
        expected = TASK.initial_state(env.model, env.start, draw)
        np.testing.assert_array_equal(qpos[i], expected.qpos)
        np.testing.assert_array_equal(s.obs[i], TASK.observation(env.model, expected))
    # every leaf of the state is per world, so resets and sharding see them all
    assert all(jax.tree.leaves(world_mask(s)))
    assert num_worlds(s) == N


def test_same_seed_is_bit_identical_and_another_seed_differs(env, runs):
    again = run(env, "next_step")
    for a, b in zip(runs["next_step"], again, strict=True):
        assert leaves_equal(a, b)
    other = run(env, "next_step", key=1, steps=1)
    assert not np.array_equal(other[0].obs, again[0].obs)


# --- autoreset modes ------------------------------------------------------------------


def first_end(states) -> int:
    return next(t for t, s in enumerate(states) if s.done.any())


def test_modes_agree_until_an_episode_ends_then_restart_as_gymnasium_says(runs):
    nxt, same, off = runs["next_step"], runs["same_step"], runs["disabled"]
    t = first_end(off)
    assert t == first_end(nxt) == first_end(same) > 1
    for k in range(t):  # identical trajectories before the first end
        np.testing.assert_array_equal(nxt[k].obs, same[k].obs)
        np.testing.assert_array_equal(off[k].obs, same[k].obs)
    ended = off[t].done
    live = ~ended
    for mode in (nxt, same):
        np.testing.assert_array_equal(mode[t].terminated, off[t].terminated)
        np.testing.assert_array_equal(mode[t].truncated, off[t].truncated)
        np.testing.assert_array_equal(mode[t].reward, off[t].reward)
        np.testing.assert_array_equal(mode[t].obs[live], off[t].obs[live])

    # next_step: the end step shows the terminal observation; the next step restarts
    np.testing.assert_array_equal(nxt[t].obs, off[t].obs)
    assert not nxt[t].final_mask.any()
    assert np.all(nxt[t + 1].reward[ended] == 0) and not nxt[t + 1].done[ended].any()
    assert np.all(nxt[t + 1].episode_length[ended] == 0)
    assert np.all(nxt[t + 1].episode_length[live] == t + 1)

    # same_step: restarted at once; the terminal observation is kept beside
    np.testing.assert_array_equal(same[t].final_mask, ended)
    np.testing.assert_array_equal(same[t].final_obs, off[t].obs)
    assert np.all(same[t].episode_length[ended] == 0)
    assert not np.any(same[t].obs[ended] == off[t].obs[ended])
    # both modes draw the restart from the same stream: the same fresh start
    np.testing.assert_array_equal(nxt[t + 1].obs[ended], same[t].obs[ended])

    # disabled: no restart; the ended world keeps going and keeps its flag
    assert np.all(off[t + 1].episode_length[ended] == t + 1)
    assert not off[t].final_mask.any()


def test_terminated_and_truncated_stay_apart(runs):
    for mode in ("next_step", "same_step"):
        states = runs[mode]
        term = np.array([s.terminated for s in states[1:]])
        trunc = np.array([s.truncated for s in states[1:]])
        assert term[:, :2].any() and not trunc[:, :2].any()  # the pushed worlds fall
        assert trunc[:, 2:].any() and not term[:, 2:].any()  # the balanced ones time out
        lengths = [s.stats.last_length for s in states[1:]]
        for t in np.flatnonzero(trunc[:, 2]):
            assert lengths[t][2] == TASK.max_episode_steps


def host_episodes(states, mode: str) -> list:
    """Per-world ``[(return, length), ...]`` of each ended episode, from the rewards."""
    episodes = [[] for _ in range(N)]
    ret, length = np.zeros(N), np.zeros(N, int)
    stale = np.zeros(N, bool)  # ended at the last step and not restarted since
    for s in states[1:]:
        for w in range(N):
            if stale[w]:
                if mode == "next_step":  # this step restarts it and does not count
                    ret[w], length[w] = 0, 0
                continue
            ret[w] += s.reward[w]
            length[w] += 1
            if s.done[w]:
                episodes[w].append((ret[w], length[w]))
                if mode == "same_step":
                    ret[w], length[w] = 0, 0
        stale = s.done.copy() if mode != "same_step" else np.zeros(N, bool)
    return episodes


@pytest.mark.parametrize("mode", E.AUTORESET_MODES)
def test_statistics_count_each_episode_once(runs, mode):
    states = runs[mode]
    last = states[-1]
    episodes = host_episodes(states, mode)
    np.testing.assert_array_equal(last.stats.completed, [len(e) for e in episodes])
    for w in range(N):
        if episodes[w]:
            np.testing.assert_allclose(last.stats.last_return[w], episodes[w][-1][0])
            assert last.stats.last_length[w] == episodes[w][-1][1]
            np.testing.assert_allclose(last.stats.return_sum[w], sum(r for r, _ in episodes[w]))
    if mode == "disabled":  # ended worlds keep stepping, but count once
        np.testing.assert_array_equal(last.stats.completed, [1] * N)
    view = E.episode_statistics(last)
    assert view["episodes"] == sum(map(len, episodes))
    all_returns = [r for e in episodes for r, _ in e]
    assert view["mean_return"] == pytest.approx(np.mean(all_returns), rel=1e-6)
    assert isinstance(view["last_return"], np.ndarray)


def test_disabled_mode_keeps_an_ended_worlds_flags(env):
    """An ended world stays ended until reset_worlds, whatever its physics does next
    (a fallen pole that swings back within the angle is still fallen), so its
    episode is never counted twice. Here the flags of upright worlds 0 and 1 are
    set as if their episodes had ended; the physics alone would clear them."""
    off = env.with_autoreset("disabled")
    s = E.jit_reset(off, jax.random.key(0))
    runner = s.runner.replace(
        terminated=s.runner.terminated.at[0].set(True), truncated=s.runner.truncated.at[1].set(True)
    )
    s = s.replace(runner=runner)
    for _ in range(3):
        s = E.jit_step(off, s, np.zeros((N, 1), np.float32))
        np.testing.assert_array_equal(s.terminated, [True, False, False, False])
        np.testing.assert_array_equal(s.truncated, [False, True, False, False])
    np.testing.assert_array_equal(s.stats.completed, [0, 0, 0, 0])  # counted when they ended
    np.testing.assert_array_equal(s.stats.episode_return[:2], [0, 0])  # stale: no reward


# --- manual resets, blow-ups, compiles --------------------------------------------------


def test_reset_worlds_restarts_only_the_masked_worlds(env, runs):
    off = env.with_autoreset("disabled")
    s = jax.tree.map(jnp.asarray, runs["disabled"][-1])
    mask = np.array([True, False, True, False])
    out = jax.device_get(E.jit_reset_worlds(off, s, mask))
    before = runs["disabled"][-1]
    assert not out.done[mask].any() and not out.episode_length[mask].any()
    assert not np.any(out.obs[mask] == before.obs[mask])
    assert not np.array_equal(out.runner.rng[mask], before.runner.rng[mask])  # advanced
    keep = ~mask
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(before), strict=True):
        np.testing.assert_array_equal(a[keep], b[keep])
    np.testing.assert_array_equal(out.stats.completed, before.stats.completed)

    for bad in (np.ones(N + 1, bool), np.ones(N, int)):
        with pytest.raises(ValueError, match=rf"mask must be bool of shape \({N},\)"):
            E.reset_worlds(off, s, bad)
    for bad in (",", object()):  # JAX reads a string as a dtype name
        with pytest.raises(TypeError, match=rf"mask must be bool of shape \({N},\)"):
            E.reset_worlds(off, s, bad)
    assert leaves_equal(jax.device_get(s), before)  # a rejected call changed nothing


def test_a_blown_up_world_is_flagged_truncated_and_restarted(env):
    """World 0's action is NaN (the action guard trips); world 1's actuator is 1e30
    times stronger and its push blows it up (the instability guard trips: on MJX its
    state turns NaN, MuJoCo's C engine resets the diverging world itself and says
    so). Both are truncated and restarted at the next step, and counted."""
    hot = env.with_param("actuator_gear", np.array([[1e30, 0, 0, 0, 0, 0]]), env_ids=[1])
    s = E.jit_reset(hot, jax.random.key(3))
    action = np.zeros((N, 1), np.float32)
    action[0], action[1] = np.nan, 1.0
    s = E.jit_step(hot, s, action)
    assert s.truncated[:2].all() and not s.terminated[0]
    assert s.nonfinite[1] and not s.nonfinite[2:].any() and not s.done[2:].any()
    np.testing.assert_array_equal(s.runner.tripped["action"], [True, False, False, False])
    s = E.jit_step(hot, s, np.zeros((N, 1), np.float32))  # next_step: restarted now
    assert np.all(np.isfinite(s.obs)) and not s.nonfinite.any()
    np.testing.assert_array_equal(s.episode_length[:2], 0)
    np.testing.assert_array_equal(s.stats.completed, [1, 1, 0, 0])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_infinite_actions_trip_the_action_guard_before_any_clipping(env):
    # +-inf (and a float64 that overflows float32) used to be clipped into the
    # control range and stepped as if valid.
    s = E.jit_reset(env, jax.random.key(3))
    action = np.zeros((N, 1), np.float64)
    action[0], action[1], action[2] = np.inf, -np.inf, 1e300
    s = E.jit_step(env, s, action)
    tripped = np.asarray(s.runner.tripped["action"])
    np.testing.assert_array_equal(tripped, [True, True, True, False])
    np.testing.assert_array_equal(np.asarray(s.truncated), [True, True, True, False])


def test_stepping_and_switching_modes_never_recompile(env, runs):
    def cycle(s):
        for mode in E.AUTORESET_MODES:
            other = env.with_autoreset(mode)
            s = E.jit_step(other, s, policy(s.obs))
            s = E.jit_reset_worlds(other, s, np.array([True, False, False, False]))
        return jax.block_until_ready(s)

    s = cycle(E.jit_reset(env, jax.random.key(0)))  # warm-up
    with CompileCounter() as c:
        s = cycle(cycle(s))
    assert c.count == 0
    assert env.with_autoreset("same_step").autoreset == "same_step"


def test_reset_pool_draws_starts_from_the_cached_set(env):
    pooled = env.with_reset_pool(2, jax.random.key(7))
    assert pooled.pool_size == 2 and env.pool_size == 0
    s = E.jit_reset(pooled, jax.random.key(0))
    pool = np.asarray(pooled.pool.qpos)
    qpos = np.asarray(s.runner.data.qpos)
    for q in qpos:
        assert any(np.array_equal(q, p) for p in pool)
    assert len({tuple(q) for q in qpos}) <= 2
    assert pooled.with_reset_pool(0, jax.random.key(0)).pool is None
    per_world = env.model.tree_replace({"opt.gravity": jnp.zeros((N, 3))})
    with pytest.raises(ValueError, match="per-world"):
        env.replace(model=per_world).with_reset_pool(2, jax.random.key(0))


def test_bad_arguments_are_rejected(env):
    with pytest.raises(ValueError, match="unknown task"):
        E.make("no_such_task", 2)
    with pytest.raises(TypeError, match="Task"):
        E.make(3, 2)
    with pytest.raises(ValueError, match="num_envs"):
        E.make(TASK, 0)
    with pytest.raises(ValueError, match="autoreset must be one of"):
        E.make(TASK, 2, autoreset="sometimes")
    with pytest.raises(ValueError, match="no keyframe 'nope'"):
        E.make(TASK.replace(keyframe="nope"), 2)
    with pytest.raises(ValueError, match="no actuators"):
        E.make(
            TASK, 2, model="<mujoco><worldbody><body><geom size='1'/></body></worldbody></mujoco>"
        )
    s = E.jit_reset(env, jax.random.key(0))
    with pytest.raises(ValueError, match=r"action must have shape \(num_envs, nu\) = \(4, 1\)"):
        E.step(env, s, np.zeros((N, 2), np.float32))
    with pytest.raises(TypeError, match="real numbers"):
        E.step(env, s, np.zeros((N, 1), bool))
