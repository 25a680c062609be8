"""Hostile input at the trainer doors (torch, rsl_rl, Gymnasium, Brax, an env of
groups through the torch door, GroupRunner), as tests/test_hostile.py does for the runner: each
public call either behaves or refuses with a ValueError/TypeError naming its
argument, and a refused call leaves every leaf of the door's state and env as it
was. A NaN/Inf action truncates exactly its worlds. The doors are built and warmed
up once for the module (the smallest task, 4 worlds): no example compiles. They run
on impl "c" (MuJoCo's C engine: the physics does not compile), since what is checked
here happens before and around the physics."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_hostile import (
    IDS,
    NOT_ARRAYS,
    arrays,
    as_array,
    assert_same,
    valid_dt,
    valid_ids,
    valid_mask,
    valid_reals,
)
from test_hostile import refused_by as refused

from mjxrunner import tasks
from mjxrunner.doors.brax import BraxEnv
from mjxrunner.doors.group_runner import GroupRunner
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.doors.rsl_rl import RslRlVecEnv
from mjxrunner.doors.torch import TorchVecEnv

N, NU = 4, 1
TASK = tasks.get("cartpole_balance")
MAX = TASK.max_episode_steps
SETTINGS = settings()  # the hypothesis profile's (tests/conftest.py)
IMPL = "c"  # the doors' checks, not the physics: see the module docstring


def host(x):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.array(x)


def snapshot(*trees):
    return [host(x) for x in jax.tree.leaves(trees)]


# --- the doors, warmed up -----------------------------------------------------------


def warm(door):
    door.reset()
    door.reset(seed=1)
    door.step(torch.zeros(N, NU))
    door.step(torch.full((N, NU), torch.nan))
    door.set_episode_length(np.zeros(N))
    return door


@pytest.fixture(scope="module")
def doors():
    torch_door = warm(TorchVecEnv(TASK, N, seed=1, impl=IMPL))
    # A GroupEnv behind the same door: the groups' worlds stepped as one.
    group = warm(TorchVecEnv(TASK, N, seed=1, groups=[("cartpole", 2), ("cartpole", 2)], impl=IMPL))
    rsl = RslRlVecEnv(TASK, N, seed=1, impl=IMPL)
    rsl.get_observations()
    rsl.step(torch.zeros(N, NU))
    return {"torch": torch_door, "group": group, "rsl": rsl}


def door_state(d):
    d = d.env if isinstance(d, RslRlVecEnv) else d
    return lambda: snapshot(d.state, d.env)


@pytest.fixture(scope="module")
def brax():
    env = BraxEnv(TASK, impl=IMPL)
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), N))
    step = jax.jit(env.step)
    state = step(jax.jit(env.reset)(keys), jnp.zeros((N, NU)))
    return env, step, state


@pytest.fixture(scope="module")
def group_runner(slider3):
    r = GroupRunner([(slider3, 2), (slider3, 2)], seed=1, impl=IMPL)
    r.step()
    r.step(dt=0.02)
    r.reset(np.ones(N, bool))
    r.reset_envs([0])
    return r


def runner_state(r):
    return lambda: snapshot([(m.engine, m._scratch) for m in r._members])


# --- strategies ---------------------------------------------------------------------

TORCH_DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]
SHAPES = st.one_of(
    st.just((N, NU)), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
)
# Floats with NaN, Inf and extremes, cast to every torch dtype (bfloat16 included).
TENSORS = st.builds(
    lambda a, dtype: torch.from_numpy(a).to(dtype),
    hnp.arrays(np.float64, SHAPES),
    st.sampled_from(TORCH_DTYPES),
)
ACTIONS = st.one_of(TENSORS, arrays(shapes=SHAPES), NOT_ARRAYS)
SEEDS = st.one_of(
    st.none(),
    st.integers(-5, 2**31 - 1),
    st.integers(2**31, 2**70),  # past what jax.random.key takes (whole) near the top
    st.booleans(),
    st.floats(),
    st.text(max_size=2),
)
OPTIONS = st.one_of(
    st.none(),
    st.just({}),
    st.dictionaries(st.text(max_size=3), st.integers(), min_size=1, max_size=2),
    st.text(max_size=2),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
)


def valid_tensor(values, shape):
    return (
        isinstance(values, torch.Tensor)
        and tuple(values.shape) == shape
        and values.dtype != torch.bool
        and not values.dtype.is_complex
    )


def nonfinite_rows(values):
    """The worlds whose action is NaN/Inf once in the env's float32 (as the door
    converts it: a float64 1e300 is Inf)."""
    a = values.detach().to(torch.float32).numpy()
    return ~np.isfinite(a).all(axis=1)


# --- torch, rsl_rl and an env of groups ----------------------------------------------


@SETTINGS
@given(values=ACTIONS)
@pytest.mark.parametrize("name", ["torch", "rsl", "group"])
def test_step_actions(doors, name, values):
    d = doors[name]
    env = d.env if name == "rsl" else d
    length = np.asarray(env.state.episode_length)
    out = []
    accepted = refused(door_state(d), lambda: out.append(d.step(values)), "actions")
    assert accepted == valid_tensor(values, (N, NU))
    if accepted:
        state = env.state
        limit = length + 1 >= MAX
        np.testing.assert_array_equal(state.truncated, nonfinite_rows(values) | limit)
        done = np.asarray(state.terminated | state.truncated)
        np.testing.assert_array_equal(state.episode_length, np.where(done, 0, length + 1))
        dones = out[0][2].numpy() if name == "rsl" else (out[0][2] | out[0][3]).numpy()
        np.testing.assert_array_equal(dones.astype(bool), done)


@SETTINGS
@given(seed=SEEDS, options=OPTIONS)
@pytest.mark.parametrize("name", ["torch", "group"])
def test_reset_arguments(doors, name, seed, options):
    d = doors[name]
    d.step(torch.zeros(N, NU))
    accepted = refused(door_state(d), lambda: d.reset(seed, options), "seed", "options")
    top = 2**63 if jax.config.jax_enable_x64 else 2**32  # what jax.random.key takes whole
    valid_seed = seed is None or (type(seed) is int and 0 <= seed < top)
    assert accepted == (valid_seed and (options is None or options == {}))
    if accepted:
        np.testing.assert_array_equal(d.state.episode_length, 0)


def valid_lengths(values):
    if isinstance(values, torch.Tensor):
        bf16 = values.dtype == torch.bfloat16
        values = (values.detach().float() if bf16 else values.detach()).numpy()
    arr = as_array(values)
    if arr is None or arr.dtype.kind not in "iuf" or arr.shape != (N,):
        return None
    with np.errstate(all="ignore"):
        ok = np.isfinite(arr).all() and (arr >= 0).all() and (arr <= MAX).all()
        return arr.astype(np.int64) if ok and (arr == np.round(arr)).all() else None


LENGTHS = st.one_of(
    TENSORS,
    st.builds(
        lambda a: torch.from_numpy(a), hnp.arrays(np.int64, (N,), elements=st.integers(-2, MAX + 2))
    ),
    hnp.arrays(st.sampled_from([np.int32, np.float64]), (N,), elements=st.integers(-2, MAX + 2)),
    arrays(shapes=st.just((N,))),
    NOT_ARRAYS,
)


@SETTINGS
@given(values=LENGTHS)
@pytest.mark.parametrize("name", ["torch", "rsl"])
def test_episode_lengths(doors, name, values):
    d = doors[name]
    env = d.env if name == "rsl" else d

    def assign():
        if name == "rsl":
            d.episode_length_buf = values
        else:
            d.set_episode_length(values)

    accepted = refused(door_state(d), assign, "lengths")
    want = valid_lengths(values)
    assert accepted == (want is not None)
    if accepted:
        np.testing.assert_array_equal(env.state.episode_length, want)
    # what the door hands out is a copy: writing into it changes nothing by itself
    before = door_state(d)()
    handed = d.episode_length_buf if name == "rsl" else d.episode_length
    handed[:] = -7
    assert_same(before, door_state(d)())
    if name == "rsl":  # rsl_rl's buffer: the write reaches the setter at the next use
        assert not refused(door_state(d), d.get_observations, "lengths")


# --- Gymnasium --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gym_door():
    v = MjxVectorEnv(TASK, N, seed=1, impl=IMPL)
    v.reset(seed=1)
    v.step(np.zeros((N, NU), np.float32))
    v.reset(options={"reset_mask": np.ones(N, bool)})
    return v


@SETTINGS
@given(values=st.one_of(arrays(shapes=SHAPES), TENSORS, NOT_ARRAYS))
def test_gym_step_actions(gym_door, values):
    """Gymnasium hands NumPy back at once, so its actions are checked on the host:
    finite reals of (num_envs, nu) that fit float32, nothing else."""
    v = gym_door
    length, was_done = np.array(v.state.episode_length), np.array(v.state.done)
    accepted = refused(door_state(v), lambda: v.step(values), "actions")
    assert accepted == valid_reals(values, (N, NU))
    if accepted:  # next_step: worlds that ended last step restart, the rest count on
        assert not np.asarray(v.state.nonfinite).any()
        want = np.where(was_done, 0, length + 1)
        np.testing.assert_array_equal(v.state.episode_length, want)


GYM_OPTIONS = st.one_of(
    OPTIONS,
    st.builds(lambda m: {"reset_mask": m}, st.one_of(arrays(shapes=st.just((N,))), NOT_ARRAYS)),
)


@SETTINGS
@given(seed=SEEDS, options=GYM_OPTIONS)
def test_gym_reset_arguments(gym_door, seed, options):
    v = gym_door
    v.step(np.zeros((N, NU), np.float32))
    call = lambda: v.reset(seed=seed, options=options)  # noqa: E731
    accepted = refused(door_state(v), call, "seed", "options", "reset_mask", "mask")
    top = 2**63 if jax.config.jax_enable_x64 else 2**32
    valid_seed = seed is None or (type(seed) is int and 0 <= seed < top)
    mask = options.get("reset_mask") if isinstance(options, dict) else None
    valid_options = (
        options is None
        or options == {}
        or (
            isinstance(options, dict)
            and set(options) == {"reset_mask"}
            and (mask is None or (valid_mask(mask, (N,)) and mask.any()))
        )
    )
    assert accepted == (valid_seed and valid_options)


# --- Brax -----------------------------------------------------------------------------


@SETTINGS
@given(values=st.one_of(arrays(shapes=SHAPES), NOT_ARRAYS))
@example(values=",")  # a string JAX reads as a dtype name: once a SyntaxError
def test_brax_step_actions(brax, values):
    env, step, state = brax
    arr = as_array(values)
    valid = arr is not None and arr.dtype.kind in "iuf" and arr.shape == (N, NU)
    if valid:  # traced, not compiled: a new dtype would be a new program
        native = arr.astype(arr.dtype.newbyteorder("="))  # what JAX's tracing takes
        out = jax.eval_shape(step, state, jnp.asarray(native))
        assert out.obs.shape == state.obs.shape and out.done.shape == (N,)
    else:  # refused before any work, as every door refuses it
        assert not refused(lambda: snapshot(state), lambda: env.step(state, values), "action")
    if isinstance(values, np.ndarray) and values.dtype == np.float32 and valid:
        new = step(state, values)  # the program compiled for float32
        truncated = np.asarray(new.info["truncation"]).astype(bool)
        np.testing.assert_array_equal(truncated, ~np.isfinite(values).all(axis=1))


@SETTINGS
@given(state=st.one_of(NOT_ARRAYS, arrays()))
def test_brax_step_states(brax, state):
    env, _, _ = brax
    assert not refused(lambda: [], lambda: env.step(state, jnp.zeros((N, NU))), "state")


# --- GroupRunner ----------------------------------------------------------------------


@SETTINGS
@given(values=st.one_of(arrays(shapes=st.just((N, 3))), arrays(), NOT_ARRAYS), ids=IDS)
def test_group_runner_actions(group_runner, values, ids):
    r = group_runner
    before = r.control
    accepted = refused(runner_state(r), lambda: r.set_actions(values, ids), "actions", "env_ids")
    expected = valid_ids(ids)
    arr = as_array(values)
    valid = expected is not None and arr is not None and arr.dtype.kind in "iuf"
    valid = valid and arr.shape == (len(expected), 3)
    with np.errstate(all="ignore"):
        valid = valid and bool(np.isfinite(arr).all())
        valid = valid and (arr.size == 0 or np.abs(arr).max() <= np.finfo(np.float32).max)
    assert accepted == valid
    if accepted:
        want = before.copy()
        want[expected] = arr.astype(np.float32)
        np.testing.assert_array_equal(r.control, want)


@SETTINGS
@given(
    dt=st.one_of(st.floats(), st.integers(-(2**80), 2**80), st.booleans(), st.text(max_size=2)),
    substeps=st.one_of(st.just(1), st.integers(-3, 0), st.floats(), st.booleans()),
)
def test_group_runner_step(group_runner, dt, substeps):
    r = group_runner
    accepted = refused(runner_state(r), lambda: r.step(dt, substeps), "dt", "substeps")
    assert accepted == (type(substeps) is int and substeps == 1 and valid_dt(dt))


@SETTINGS
@given(mask=st.one_of(arrays(shapes=hnp.array_shapes(min_dims=0, max_dims=2)), NOT_ARRAYS), ids=IDS)
def test_group_runner_resets(group_runner, mask, ids):
    r = group_runner
    accepted = refused(runner_state(r), lambda: r.reset(mask), "mask")
    assert accepted == (mask is None or valid_mask(mask, (N, N + 1)))
    accepted = refused(runner_state(r), lambda: r.reset_envs(ids), "env_ids")
    assert accepted == (valid_ids(ids) is not None)


@SETTINGS
@given(a=st.one_of(arrays(shapes=st.just((N,))), arrays(), NOT_ARRAYS), b=arrays())
def test_group_runner_done_flags(group_runner, a, b):
    r = group_runner
    accepted = refused(runner_state(r), lambda: r.set_done_flags(a, b), "terminated", "truncated")
    assert accepted == (valid_mask(a, (N,)) and valid_mask(b, (N,)))
