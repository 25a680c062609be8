"""The env's own work per step: every world is observed once by a step, and a
restart observes only the worlds it restarts, gathered ``restart_slots`` at a time.

The task's observation passes through a host callback that records how many worlds
each call sees (under ``vmap`` the callback gets the whole batch at once), so the
test reads what the compiled step did, not what it was meant to do. The envs run
on impl "c": the env's own work is the same code on every impl, and MuJoCo's C
engine needs no physics compiled.
"""

import jax
import numpy as np
import pytest

from mjxrunner import tasks
from mjxrunner.rl import env as E

BASE = tasks.get("cartpole_balance")
N, SLOTS, LIMIT = 16, 4, 3
CALLS: list[int] = []  # worlds seen by each call of the observation, in order


def _record(obs: np.ndarray) -> np.ndarray:
    CALLS.append(obs.shape[0] if obs.ndim > 1 else 1)
    return np.zeros(obs.shape, obs.dtype)


def counted_observation(model, data):
    obs = BASE.observation(model, data)
    spec = jax.ShapeDtypeStruct(obs.shape, obs.dtype)
    return obs + jax.pure_callback(_record, spec, obs, vmap_method="expand_dims")


# Zero actions keep every pole up for far longer than LIMIT steps: the worlds end by
# the time limit only, so the test chooses which worlds restart in which step.
TASK = BASE.replace(observation=counted_observation, max_episode_steps=LIMIT)
ZERO = np.zeros((N, 1), np.float32)
C = {"impl": "c", "num_threads": 1}


def calls(fn, *args):
    CALLS.clear()
    out = jax.block_until_ready(fn(*args))
    return out, list(CALLS)


@pytest.fixture(scope="module")
def env():
    assert not BASE.has_info  # the observation above takes (model, data)
    return E.make(TASK, N, autoreset="same_step", restart_slots=SLOTS, **C)


def test_reset_observes_every_world_once(env):
    _, seen = calls(E.jit_reset, env, jax.random.key(0))
    assert seen == [N]


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_a_step_observes_each_world_once_and_restarts_only_the_ended(env, mode):
    env = env.with_autoreset(mode)
    state = E.jit_reset(env, jax.random.key(0))
    # Five worlds start their episode one step later than the other eleven.
    late = np.arange(N) < 5
    state = E.jit_step(env, state, ZERO)
    state, seen = calls(E.jit_reset_worlds, env, state, late)
    assert seen == [SLOTS, SLOTS]  # 5 restarts: two passes of 4 slots
    _, seen = calls(E.jit_reset_worlds, env, state, np.zeros(N, bool))
    assert seen == []  # nothing restarts: no pass at all

    first_end = LIMIT - 1 if mode == "same_step" else LIMIT  # steps until it restarts
    per_step = []
    for _ in range(first_end + 1):
        state, seen = calls(E.jit_step, env, state, ZERO)
        per_step.append(seen)
    # Every step observes the whole batch once; the step where the eleven early worlds
    # restart observes those again in three passes of 4, the next the five late ones
    # in two. Before, any restart observed the whole batch a second time.
    assert per_step[:-2] == [[N]] * (first_end - 1)
    assert per_step[-2] == [N, SLOTS, SLOTS, SLOTS]
    assert per_step[-1] == [N, SLOTS, SLOTS]
    restarted = np.asarray(state.runner.episode_length) == 0
    if mode == "same_step":
        np.testing.assert_array_equal(restarted, late)


def test_slot_count_changes_the_cost_not_the_trajectory(env):
    """The same run with every restart in one pass over the whole batch."""
    whole = E.make(TASK, N, autoreset="same_step", restart_slots=N, **C)
    out = []
    for e in (env, whole):
        s = E.jit_reset(e, jax.random.key(1))
        s = E.jit_reset_worlds(e, s, np.arange(N) % 3 == 0)
        states = []
        for _ in range(2 * LIMIT):
            s = E.jit_step(e, s, ZERO)
            states.append(jax.device_get(s))
        out.append(states)
    for t, (a, b) in enumerate(zip(*out, strict=True)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"step {t}")
