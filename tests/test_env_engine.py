"""What the functional env gained from the engine: every task on impl "warp" (also
through the Gymnasium adapter), warp and jax parity with native MuJoCo (impl "c")
over whole episodes with restarts, per-world parameters and randomization redrawn
on restart, sharding over the two forced host devices, and guards (non-finite
actions, Warp overflow, a user guard).

Compiles are the cost (10-60 s each on two cores), so envs are module-scoped, worlds
few, horizons short, and every env steps through the shared ``jit_*`` functions of
``mjxrunner.env``. What is not about MJX's physics runs on impl "c", which compiles
no physics; impl "jax" keeps the cartpole (parity, sharding, the guards' NaNs). The
cartpole task is cut to 25 steps and pushed so that, within 40 steps, some worlds
fall (terminated) and others hit the limit (truncated).
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec
from test_parity import SMOOTH_ATOL

from mjxrunner import CompileCounter, tasks, world_mask
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.engine import core, guards, params
from mjxrunner.engine.guards import CapacityOverflowError, CapacityWarning
from mjxrunner.rl import env as E

N = 4
STEPS = 40
LIMIT = 25  # max_episode_steps of the cut tasks: the pushed poles fall before it
BALANCE = tasks.get("cartpole_balance").replace(max_episode_steps=LIMIT)
PENDULUM = tasks.get("pendulum_swingup").replace(max_episode_steps=LIMIT)
CUT = {t.name: t for t in (BALANCE, PENDULUM)}

# Observation entries that are velocities: compared with test_parity's qvel
# tolerance (10x that of positions), as the parity test does for qvel.
VELOCITY_OBS = {"cartpole_balance": [3, 4], "pendulum_swingup": [2]}


def actions(name: str, t: int) -> np.ndarray:
    """Deterministic ``(N, nu)`` actions at step ``t``, independent of the state.

    Cartpole: world 0 pushes right and world 1 left (both poles fall), world 2
    wiggles, world 3 stays still (it times out). Pendulum: a different sine per world.
    """
    if name == "cartpole_balance":
        u = np.array([1.0, -1.0, 0.5 * np.sin(0.3 * t), 0.0])
    else:
        u = 2.0 * np.sin(0.2 * t + np.arange(N))
    return u[:, None].astype(np.float32)


def run(env, mode: str, name: str, steps: int = STEPS, key: int = 0) -> list:
    """Host copies of the state after reset and after each step."""
    env = env.with_autoreset(mode)
    s = E.jit_reset(env, jax.random.key(key))
    out = [jax.device_get(s)]
    for t in range(steps):
        s = E.jit_step(env, s, actions(name, t))
        out.append(jax.device_get(s))
    return out


def per_world_leaves(tree) -> list[tuple[np.ndarray, bool]]:
    """``(leaf, is per world)`` for every leaf of a host copy."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(tree)]
    return list(zip(leaves, jax.tree.leaves(world_mask(tree)), strict=True))


def assert_worlds_identical(a, b, worlds) -> None:
    """Bit-identical ``worlds`` of every per-world leaf, and identical shared leaves."""
    for (x, is_world), (y, _) in zip(per_world_leaves(a), per_world_leaves(b), strict=True):
        if is_world:
            np.testing.assert_array_equal(x[worlds], y[worlds])
        else:
            np.testing.assert_array_equal(x, y)


# --- 1. every task on impl "warp" -----------------------------------------------------

N_SMOKE = 8


# The contact scenes' tasks and one smooth one: every scene also runs on warp against
# native MuJoCo in test_parity, and a task's functions do not depend on the impl,
# so the smooth scenes' other tasks add compile time, not coverage.
WARP_TASKS = ["ant_walk", "cartpole_balance", "hopper_hop", "humanoid_walk", "puck_reach"]


@pytest.mark.parametrize("name", WARP_TASKS)
def test_every_task_runs_on_warp_and_through_gymnasium(name):
    """Through the Gymnasium door only: it steps the functional env's step, packed
    (test_gym shows the two agree), and one compile per task is the cost here."""
    steps = 3
    venv = MjxVectorEnv(name, N_SMOKE, impl="warp")
    assert venv.env.impl == "warp"
    shape = (N_SMOKE, venv.env.observation_size)
    zeros = np.zeros((N_SMOKE, venv.env.action_size), np.float32)
    assert venv.observation_space.shape == shape
    assert venv.action_space.shape == zeros.shape
    first, info = venv.reset(seed=0)
    assert isinstance(info, dict)
    assert first.shape == shape and first.dtype == np.float32 and np.isfinite(first).all()
    for _ in range(steps):
        out = venv.step(zeros)
        assert len(out) == 5
        obs, reward, terminated, truncated, infos = out
        assert obs.shape == shape and obs.dtype == np.float32 and np.isfinite(obs).all()
        assert reward.shape == (N_SMOKE,) and reward.dtype == np.float64
        assert np.isfinite(reward).all() and isinstance(infos, dict)
        assert terminated.shape == truncated.shape == (N_SMOKE,)
        assert terminated.dtype == truncated.dtype == np.bool_
    s = venv.state
    assert not np.asarray(s.nonfinite).any() and not np.asarray(s.runner.overflow).any()
    np.testing.assert_array_equal(s.episode_length, steps)  # no world ended or blew up
    assert not np.array_equal(obs, first)  # the physics moved
    venv.close()


# --- shared envs and runs -------------------------------------------------------------


PAIRS = [(t.name, impl) for t in CUT.values() for impl in ("c", "warp")]
PAIRS.append((BALANCE.name, "jax"))


@pytest.fixture(scope="module")
def envs():
    """``{(task name, impl): env}`` of the cut tasks on 4 worlds (:data:`PAIRS`)."""
    return {(name, impl): E.make(CUT[name], N, impl=impl) for name, impl in PAIRS}


@pytest.fixture(scope="module")
def runs(envs):
    """``{(task name, impl, mode): states}``, same key and actions everywhere."""
    return {
        (name, impl, mode): run(env, mode, name)
        for (name, impl), env in envs.items()
        for mode in E.AUTORESET_MODES
    }


def assert_runs_agree(a: list, b: list, name: str, atol: float, vel_atol: float) -> None:
    """Same flags exactly, and observations, rewards and final observations within
    ``atol`` (velocity entries of the observation within ``vel_atol``)."""
    assert len(a) == len(b)
    obs_atol = np.full(a[0].obs.shape[1], atol)
    obs_atol[VELOCITY_OBS[name]] = vel_atol
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        msg = f"step {t}"
        for flag in ("terminated", "truncated", "final_mask", "episode_length"):
            np.testing.assert_array_equal(getattr(y, flag), getattr(x, flag), err_msg=msg)
        for field in ("obs", "final_obs"):
            err = np.abs(np.asarray(getattr(y, field)) - np.asarray(getattr(x, field)))
            assert np.all(err <= obs_atol), f"{field}, {msg}: max error {err.max(axis=0)}"
        np.testing.assert_allclose(y.reward, x.reward, atol=vel_atol, err_msg=msg)


def assert_episodes_ended(states: list, name: str, mode: str) -> None:
    """Episodes ended (time limits, and falls where the task has them) and, unless
    autoreset is disabled, the ended worlds restarted."""
    truncated = np.array([s.truncated for s in states[1:]])
    terminated = np.array([s.terminated for s in states[1:]])
    assert truncated.any()
    if name == "cartpole_balance":
        assert terminated[:, :2].any(axis=0).all()  # the pushed worlds fell
        assert truncated[:, 3].any()  # the still one timed out
    restarted = any(s.episode_length.min() < t for t, s in enumerate(states) if t > 0)
    assert restarted == (mode != "disabled")


# --- 2. warp and jax parity with native MuJoCo over whole episodes -------------------


@pytest.mark.parametrize("mode", E.AUTORESET_MODES)
@pytest.mark.parametrize(("name", "impl"), [p for p in PAIRS if p[1] != "c"])
def test_mjx_env_matches_the_native_env_with_restarts(runs, name, impl, mode):
    native_run, mjx_run = runs[(name, "c", mode)], runs[(name, impl, mode)]
    assert_episodes_ended(native_run, name, mode)
    # test_parity's smooth-scene tolerances (qvel: 10x)
    assert_runs_agree(native_run, mjx_run, name, SMOOTH_ATOL, 10 * SMOOTH_ATOL)
    if mode == "same_step":
        assert any(s.final_mask.any() for s in mjx_run)
    # the worlds took different paths
    assert np.abs(mjx_run[-1].obs[0] - mjx_run[-1].obs[1]).max() > 10 * SMOOTH_ATOL


# --- 3. per-world parameters and randomization ----------------------------------------


def test_per_world_gravity_changes_each_worlds_physics(envs, runs):
    base = envs[("cartpole_balance", "c")]
    gravity = np.array([[0, 0, 0], [0, 0, -9.81], [0, 0, 0], [0, 0, -9.81]], np.float32)
    env = base.with_param("opt.gravity", gravity)
    np.testing.assert_array_equal(env.model.opt.gravity, gravity)
    np.testing.assert_allclose(base.model.opt.gravity, [0, 0, -9.81], rtol=1e-6)  # a copy
    steps = LIMIT - 1  # before the first time limit
    mine = run(env, "disabled", "cartpole_balance", steps=steps)
    theirs = runs[("cartpole_balance", "c", "disabled")][: steps + 1]
    np.testing.assert_array_equal(mine[0].obs, theirs[0].obs)  # the same starts
    earth, zero_g = [1, 3], [0, 2]
    for a, b in zip(mine, theirs, strict=True):
        np.testing.assert_allclose(a.obs[earth], b.obs[earth], atol=1e-6)
    # without gravity the pole falls slower: its angle and speed part ways
    diff = np.abs(mine[-1].obs[zero_g] - theirs[-1].obs[zero_g])
    assert diff[:, [2, 4]].min() > 1e-3, diff


DAMPING = [params.Term("dof_damping", 0.5, 2.0)]


@pytest.fixture(scope="module")
def randomized(envs):
    return envs[("cartpole_balance", "c")].with_randomization(DAMPING, on_reset=True)


def damping_bounds(env):
    default = np.asarray(env.model.dof_damping)
    assert default.shape == (2,) and np.all(default > 0)  # shared, and not zero
    return np.float32(0.5) * default, np.float32(2.0) * default


def test_randomization_draws_per_world_on_reset_and_restart_without_drift(randomized):
    env = randomized.with_autoreset("disabled")
    lo, hi = damping_bounds(env)
    s = E.jit_reset(env, jax.random.key(0))
    drawn = np.asarray(s.model.dof_damping)
    assert drawn.shape == (N, 2)
    assert np.all((lo <= drawn) & (drawn <= hi)), drawn
    assert len({tuple(d) for d in drawn}) == N  # each world drew its own
    for t in range(3):
        s = E.jit_step(env, s, actions("cartpole_balance", t))

    before = jax.device_get(s)
    only_0 = np.array([True] + [False] * (N - 1))
    draws = []
    for _ in range(20):
        s = E.jit_reset_worlds(env, s, only_0)
        d = np.asarray(s.model.dof_damping)[0]
        assert np.all((lo <= d) & (d <= hi)), f"draw {len(draws)} drifted: {d}"
        draws.append(d)
    assert len({tuple(d) for d in draws}) == 20  # a new draw at every restart
    after = jax.device_get(s)
    assert_worlds_identical(before.model, after.model, slice(1, None))
    assert_worlds_identical(before.runner.data, after.runner.data, slice(1, None))
    np.testing.assert_array_equal(before.obs[1:], after.obs[1:])
    np.testing.assert_array_equal(before.runner.rng[1:], after.runner.rng[1:])
    assert after.runner.health.resets[0] == before.runner.health.resets[0] + 20
    np.testing.assert_array_equal(after.runner.health.resets[1:], before.runner.health.resets[1:])
    assert after.episode_length[0] == 0


def test_no_compiles_across_steps_restarts_and_new_parameter_values(randomized):
    rng = np.random.default_rng(0)

    def gravity():
        return rng.uniform(-10, 0, (N, 3)).astype(np.float32)

    env = randomized.with_param("opt.gravity", gravity()).with_autoreset("same_step")
    mask = np.array([False, True, False, False])

    def cycle(env, s):
        for t in range(LIMIT + 2):  # through a time limit: every world restarts
            s = E.jit_step(env, s, actions("cartpole_balance", t))
        s = E.jit_reset_worlds(env, s, mask)
        return jax.block_until_ready(s)

    s = cycle(env, E.jit_reset(env, jax.random.key(0)))  # warm-up
    with CompileCounter() as c:
        s = cycle(env, s)
        env = env.with_param("opt.gravity", gravity())  # new values, same shapes
        s = cycle(env, s)
        env = env.with_param("opt.gravity", [0.0, 0.0, -1.0], env_ids=[2])
        s = cycle(env, E.jit_reset(env, jax.random.key(1)))
        s = cycle(env.with_autoreset("next_step"), s)
    assert c.count == 0
    assert np.asarray(env.model.opt.gravity)[2, 2] == -1.0
    lo, hi = damping_bounds(env)
    drawn = np.asarray(s.model.dof_damping)
    assert np.all((lo <= drawn) & (drawn <= hi))


# --- 4. sharding ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded():
    return E.make(BALANCE, N, devices=2)


@pytest.mark.parametrize("mode", E.AUTORESET_MODES)
def test_two_devices_match_one(sharded, runs, mode):
    assert jax.device_count() >= 2
    mine = run(sharded, mode, "cartpole_balance")
    theirs = runs[("cartpole_balance", "jax", mode)]
    assert_episodes_ended(mine, "cartpole_balance", mode)
    assert_runs_agree(theirs, mine, "cartpole_balance", 1e-6, 1e-6)


def test_sharded_state_is_split_over_both_devices(sharded, envs):
    s = E.jit_reset(sharded, jax.random.key(0))
    s = E.jit_step(sharded, s, actions("cartpole_balance", 0))
    for x in (s.obs, s.runner.data.qpos, s.reward, s.runner.rng):
        assert len(x.sharding.device_set) == 2
        assert x.sharding.spec[0] == "worlds"
        assert {sh.data.shape[0] for sh in x.addressable_shards} == {N // 2}
    assert s.obs.sharding.spec == PartitionSpec("worlds")
    # .shard() of a one-device env is the same split env
    resharded = envs[("cartpole_balance", "jax")].shard(2)
    assert resharded.mesh is not None and resharded.mesh.devices.size == 2
    r = E.jit_step(resharded, E.jit_reset(resharded, jax.random.key(0)), actions(BALANCE.name, 0))
    assert len(r.obs.sharding.device_set) == 2
    np.testing.assert_allclose(np.asarray(r.obs), np.asarray(s.obs), atol=1e-6)


# --- restarts drawn a few slots at a time ---------------------------------------------


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_restart_slots_change_the_cost_not_the_starts(envs, runs, mode):
    # The shared envs draw one world per pass (restart_slots = ceil(4 / 8) = 1); this
    # one draws all four in one vmap, as every restart did before slots.
    # On impl "jax": on "c" the program of a one-world pass fuses the start draw's
    # scale and shift into an FMA, so a world restarted alone starts 3 ulps apart
    # (docs/training.md); on "jax" both programs round it alike.
    assert envs[("cartpole_balance", "jax")].restart_slots == 1
    whole = run(E.make(BALANCE, N, restart_slots=N), mode, "cartpole_balance")
    slotted = runs[("cartpole_balance", "jax", mode)]
    restarts = [int((s.episode_length == 0).sum()) for s in slotted[1:]]
    assert max(restarts) >= 2  # some step needed more than one pass
    for t, (a, b) in enumerate(zip(whole, slotted, strict=True)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"step {t}")


def test_contact_starts_in_slots_match_one_pass_up_to_rounding():
    """A contact scene (the puck, with a forward pass on restart, the cheapest to
    compile): ``reset`` draws all 8 starts in one pass, ``reset_worlds`` with 2
    slots in 4 passes of 2; with the keys rewound, both draw the same worlds. XLA
    vectorizes the forward pass of 2 worlds differently from one of 8, so what it
    derives (accelerations, constraint forces) may differ in the last bits; the
    state the task drew, the keys and the bookkeeping are identical."""
    task = tasks.get("puck_reach").replace(forward_on_reset=True)
    env = E.make(task, 8, restart_slots=2)
    key = jax.random.key(0)
    one_pass = E.jit_reset(env, key)
    rewound = one_pass.replace(runner=one_pass.runner.replace(rng=core.init_keys(key, 8)))
    slotted = E.jit_reset_worlds(env, rewound, np.ones(8, bool))
    a, b = jax.device_get(one_pass), jax.device_get(slotted)
    for field in ("qpos", "mocap_pos"):  # the puck and its target, drawn per world
        x, y = getattr(a.runner.data, field), getattr(b.runner.data, field)
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x[0], x[1])  # different draws per world
    np.testing.assert_array_equal(a.runner.data.qvel, b.runner.data.qvel)
    np.testing.assert_array_equal(a.runner.rng, b.runner.rng)
    np.testing.assert_array_equal(a.episode_length, b.episode_length)
    np.testing.assert_array_equal(a.obs, b.obs)
    a_leaves = dict(jax.tree_util.tree_flatten_with_path(a.runner.data)[0])
    for path, y in jax.tree_util.tree_flatten_with_path(b.runner.data)[0]:
        x = a_leaves[path]
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5, err_msg=jax.tree_util.keystr(path))


def test_restart_slots_must_be_a_positive_count():
    with pytest.raises(ValueError, match="restart_slots"):
        E.make(BALANCE, N, restart_slots=0)
    with pytest.raises(TypeError, match="restart_slots"):
        E.make(BALANCE, N, restart_slots=1.5)


# --- 5. guards ------------------------------------------------------------------------


def poisoned_run(env, bad_steps, key: int = 5, steps: int = 10) -> list:
    """Host states of ``steps`` small steps; world 0's action is NaN at ``bad_steps``.

    The steps stay before any time limit or fall of a clean run."""
    s = E.jit_reset(env, jax.random.key(key))
    out = []
    for t in range(steps):
        u = 0.3 * actions("cartpole_balance", t)
        if t in bad_steps:
            u[0] = np.nan
        s = E.jit_step(env, s, u)
        out.append(jax.device_get(s))
    return out


BAD_STEP = 3


def test_nan_action_truncates_and_restarts_only_its_world(envs):
    env = envs[("cartpole_balance", "jax")].with_autoreset("same_step")
    clean, poisoned = poisoned_run(env, ()), poisoned_run(env, (BAD_STEP,))
    assert not any(s.done.any() for s in clean)
    for t, (a, b) in enumerate(zip(clean, poisoned, strict=True)):
        # the other worlds never see world 0's trouble, nor its restart
        assert_worlds_identical(a.runner.data, b.runner.data, slice(1, None))
        np.testing.assert_array_equal(a.obs[1:], b.obs[1:], err_msg=f"step {t}")
        np.testing.assert_array_equal(a.reward[1:], b.reward[1:], err_msg=f"step {t}")
        assert not b.done[1:].any()
        if t < BAD_STEP:
            assert_worlds_identical(a.runner.data, b.runner.data, slice(None))
    hit = poisoned[BAD_STEP]
    assert hit.truncated[0] and not hit.terminated[0] and hit.final_mask[0]
    np.testing.assert_array_equal(hit.final_mask[1:], False)
    assert hit.episode_length[0] == 0  # restarted in the same step
    assert np.isfinite(hit.obs).all() and np.isfinite(hit.runner.data.qpos).all()
    assert not np.isfinite(hit.final_obs[0]).all()  # the terminal observation blew up
    events = hit.runner.health.events
    assert events["action"][0] == 1 and events["unstable"][0] == 1
    np.testing.assert_array_equal(events["action"][1:], 0)
    np.testing.assert_array_equal(events["unstable"][1:], 0)
    assert hit.runner.health.resets[0] == poisoned[0].runner.health.resets[0] + 1
    last = poisoned[-1]
    assert last.runner.health.events["action"][0] == 1  # counted once
    assert last.episode_length[0] == len(poisoned) - BAD_STEP - 1 and not last.done.any()


def test_same_step_reports_the_guard_flags_of_the_step_that_ended_the_episode(envs):
    """Like ``terminated``/``truncated``, the guards' flags describe the step that
    ended the episode, though the world restarted in it; a fresh start that trips a
    guard again is a new trip."""
    env = envs[("cartpole_balance", "jax")].with_autoreset("same_step")
    poisoned = poisoned_run(env, (BAD_STEP, BAD_STEP + 1))
    for t in (BAD_STEP, BAD_STEP + 1):
        hit = poisoned[t]
        assert hit.truncated[0] and hit.final_mask[0] and hit.episode_length[0] == 0
        assert hit.nonfinite[0], f"step {t}: the instability guard's flag of world 0"
        assert hit.runner.tripped["action"][0], f"step {t}: the action guard's flag"
        assert not hit.nonfinite[1:].any() and not hit.runner.tripped["action"][1:].any()
        assert hit.runner.health.events["action"][0] == t - BAD_STEP + 1
    after = poisoned[BAD_STEP + 2]
    assert not after.nonfinite.any() and not after.runner.tripped["action"].any()
    assert poisoned[-1].runner.health.events["action"][0] == 2
    assert poisoned[-1].runner.health.events["unstable"][0] == 2


# test_warp's boxes on a plane, plus an actuated slider that touches nothing (an env
# needs an actuator).
BOXES_XML = """<mujoco><option timestep="0.01"/>
<worldbody><geom type="plane" size="2 2 .1"/>
<body pos="0 0 0.2"><freejoint/><geom type="box" size=".1 .1 .1" mass="1"/></body>
<body pos="0.5 0 0.2"><freejoint/><geom type="sphere" size=".1" mass="1"/></body>
<body pos="1 1 1"><joint name="slide" type="slide" axis="1 0 0"/>
<geom type="sphere" size=".05" mass="1" contype="0" conaffinity="0"/></body>
</worldbody><actuator><motor joint="slide"/></actuator></mujoco>"""


def box_observation(model, data):
    del model
    return data.qpos[:3]  # the box's position


def box_reward(model, data, action, next_data):
    del model, data, action
    return next_data.qpos[2]


BOXES = tasks.Task(
    name="test_boxes_drop",
    model=BOXES_XML,
    observation=box_observation,
    reward=box_reward,
    max_episode_steps=100,
)
N_BOXES = 4
BOX_STEPS = 25  # the bodies land after ~14 steps


def test_warp_overflow_truncates_the_overflowing_worlds():
    env = E.make(
        BOXES, N_BOXES, impl="warp", naconmax=4, overflow_policy="truncate", autoreset="same_step"
    )
    zeros = np.zeros((N_BOXES, 1), np.float32)
    s = E.jit_reset(env, jax.random.key(0))
    states = [jax.device_get(s)]
    # compiled first: building it (Warp's kernels, JAX's compile cache, both shared with
    # the suite's other processes) may warn of its own, and is not what is checked here
    jax.block_until_ready(E.jit_step(env, s, zeros))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the policy acts on device: no warning
        for _ in range(BOX_STEPS):
            s = E.jit_step(env, s, zeros)
            states.append(jax.device_get(s))
    truncated = np.array([x.truncated for x in states])
    events = np.array([x.runner.health.events["overflow"] for x in states])
    # The only truncations are overflows (the time limit is 100 steps): a world is
    # truncated in exactly the steps whose overflow trips it count.
    np.testing.assert_array_equal(np.diff(events, axis=0), truncated[1:].astype(np.int32))
    hit = int(np.flatnonzero(truncated.any(axis=1))[0])
    assert 5 <= hit < BOX_STEPS  # when the bodies land
    x = states[hit]
    ended = x.truncated
    np.testing.assert_array_equal(x.final_mask, ended)  # restarted in the same step
    assert np.all(x.episode_length[ended] == 0)
    assert np.all(x.episode_length[~ended] == hit)
    np.testing.assert_allclose(x.obs[ended, 2], 0.2)  # the box back at its start height
    assert np.all(x.final_obs[ended, 2] < 0.2)
    assert not x.terminated.any()
    report = E.health_report(states[-1])
    np.testing.assert_array_equal(report.counts["overflow"], events[-1])
    assert events[-1].sum() >= 1


def test_warp_overflow_raise_and_warn_through_gymnasium():
    venv = MjxVectorEnv(BOXES, 2, impl="warp", naconmax=4, overflow_policy="raise")
    venv.reset(seed=0)
    zeros = np.zeros((2, 1), np.float32)
    stepped = 0
    with pytest.raises(CapacityOverflowError, match="naconmax"):
        for _ in range(BOX_STEPS):
            before = jax.device_get(venv.state)
            venv.step(zeros)
            stepped += 1
    assert 5 <= stepped < BOX_STEPS
    after = jax.device_get(venv.state)  # the state of before the failed step
    np.testing.assert_array_equal(after.runner.data.qpos, before.runner.data.qpos)
    np.testing.assert_array_equal(after.episode_length, stepped)

    venv = MjxVectorEnv(BOXES, 2, impl="warp", naconmax=4, overflow_policy="warn")
    venv.reset(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(BOX_STEPS):
            venv.step(zeros)
    warned = [w for w in caught if issubclass(w.category, CapacityWarning)]
    assert len(warned) >= 1
    assert venv.health.counts["overflow"].sum() >= 1
    assert np.all(venv.state.episode_length == BOX_STEPS)  # warned, not truncated


# --- 6. a user guard ------------------------------------------------------------------


def cart_far(data):
    """Worlds whose cart is more than 0.3 from the centre."""
    return jnp.abs(data.qpos[:, 0]) > 0.3


FAR = guards.Guard("far", detect=cart_far, policy="truncate")


def test_user_guard_truncates_and_counts():
    task = tasks.get("cartpole_swingup")  # never terminates; 1000-step limit
    env = E.make(task, N, impl="c", guards=[FAR])
    assert guards.find(env.config.guards, "far") is FAR
    push = np.array([[1.0], [-1.0], [0.0], [0.0]], np.float32)  # worlds 0 and 1 run off
    s = E.jit_reset(env, jax.random.key(0))
    states = []
    for _ in range(40):
        s = E.jit_step(env, s, push)
        states.append(jax.device_get(s))
    trips = {w: [t for t, x in enumerate(states) if x.truncated[w]] for w in range(N)}
    assert trips[2] == trips[3] == []
    for w in (0, 1):
        assert len(trips[w]) == 1, trips
        t = trips[w][0]
        x = states[t]
        assert abs(x.obs[w, 0]) > 0.3 and x.runner.tripped["far"][w] and not x.terminated[w]
        assert all(abs(y.obs[w, 0]) <= 0.3 for y in states[:t])  # the first step past 0.3
        assert states[t + 1].episode_length[w] == 0  # next_step: restarted
    last = states[-1]
    np.testing.assert_array_equal(last.runner.health.events["far"], [1, 1, 0, 0])
    assert not any(x.terminated.any() for x in states)
