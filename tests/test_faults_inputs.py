"""Bad input that used to pass silently (issue 29, defects 3, 5 and 8a/8b): each is
refused where it is given, by the one check every door goes through, and a refused
call changes nothing. The checks are the same for every impl, so every runner and
door here runs on impl "c" (MuJoCo's C step: no physics compiled)."""

import jax
import numpy as np
import pytest
from test_hostile import assert_unchanged, snapshot

from mjxrunner import MultiEnvRunner, tasks
from mjxrunner.doors.brax import BraxEnv
from mjxrunner.doors.group_runner import GroupRunner
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.doors.rsl_rl import RslRlVecEnv
from mjxrunner.doors.torch import TorchVecEnv
from mjxrunner.engine.params import Term
from mjxrunner.rl import env as E

IMPL = "c"  # validation and bookkeeping, not the physics: see the module docstring
N = 2
TASK = tasks.get("cartpole_balance").replace(max_episode_steps=12)
# What jax.random.key keeps of a seed: its int64 with x64, its low 32 bits without.
SEED_BITS = 63 if jax.config.jax_enable_x64 else 32


@pytest.fixture(scope="module")
def runner():
    return MultiEnvRunner("cartpole", N, seed=1, impl=IMPL)


@pytest.fixture(scope="module")
def gym_door():
    return MjxVectorEnv(TASK, N, impl=IMPL)


# --- defect 3: randomization terms obey set_param's rules at the bounds of their draws ---

# (terms, the field and the rule the message must name)
BAD_TERMS = [
    ([Term("body_mass", -2, -1)], r"'body_mass' must be >= 0"),
    ([Term("opt.timestep", -1, -1)], r"'opt.timestep' must be > 0"),
    ([Term("dof_damping", -10, -10, operation="set")], r"'dof_damping' must be >= 0"),
    # a valid high end does not hide an invalid low one
    ([Term("dof_damping", -1.0, 0.0, operation="add")], r"'dof_damping' must be >= 0"),
    # each end of a range drawn on its own: the range [-1, 1] scaled by [-2, 2] inverts
    ([Term("actuator_ctrlrange", -2.0, 2.0)], r"'actuator_ctrlrange' must be ranges .*lo <= hi"),
    ([Term("actuator_ctrlrange", 1.5, 3.0, operation="set", index=(0, 0))], "lo <= hi"),
    # a draw past float32 is not finite once written
    ([Term("body_mass", 1e39, 1e39, operation="set")], r"'body_mass' must be finite"),
]  # fmt: skip


@pytest.mark.parametrize("terms, rule", BAD_TERMS)
def test_terms_set_param_refuses_are_refused_and_change_nothing(runner, terms, rule):
    before, config = snapshot(runner), runner.engine.config
    with pytest.raises(ValueError, match=rule) as err:
        runner.set_randomization(terms)
    assert "randomization term" in str(err.value) and terms[-1].path in str(err.value)
    assert runner.engine.config is config  # the randomization declared stays
    assert_unchanged(before, runner)


def test_every_door_refuses_the_same_terms(runner, gym_door):
    env = E.make(TASK, N, impl=IMPL)
    genv = E.make(TASK, 2 * N, groups=[("cartpole", N), ("cartpole", N)], impl=IMPL)
    group_runner = GroupRunner([("cartpole", 1), ("cartpole", 1)], impl=IMPL)
    bad = [Term("body_mass", -2, -1)]
    for attach in (
        env.with_randomization,
        genv.with_randomization,
        gym_door.set_randomization,
        group_runner.set_randomization,
        lambda terms: BraxEnv(TASK, randomization=terms, impl=IMPL),
    ):
        with pytest.raises(ValueError, match=r"'body_mass' must be >= 0, got min -2"):
            attach(bad)
    assert gym_door.env.config.randomization is None


def test_valid_terms_still_draw_and_step(runner):
    mass = runner.param("body_mass")
    runner.set_randomization(
        [
            Term("body_mass", 0.5, 2.0),
            Term("dof_damping", 0.0, 0.1, operation="add"),
            Term("actuator_ctrlrange", 0.5, 2.0),  # [-1, 1]: lo in [-2, -0.5], hi in [0.5, 2]
            Term("actuator_ctrlrange", -0.5, 0.5, operation="set", index=(0, 0)),
            Term("actuator_ctrlrange", 0.5, 1.0, operation="set", index=(0, 1)),
        ]
    )
    try:
        drawn = np.asarray(runner.param("body_mass"))
        assert drawn.shape == (N, *mass.shape)
        mass = np.asarray(mass)
        assert ((0.5 * mass <= drawn) & (drawn <= 2.0 * mass)).all() and np.ptp(drawn, 0).any()
        ranges = np.asarray(runner.param("actuator_ctrlrange"))
        assert (ranges[..., 0] <= ranges[..., 1]).all()
        for _ in range(3):
            runner.step()
        assert np.isfinite(runner.get_state()).all()
    finally:
        runner.set_randomization([])


# --- defect 8a: inverted ranges -----------------------------------------------------------


@pytest.mark.parametrize(
    "path, values",
    [
        ("actuator_ctrlrange", [[1.0, -1.0]]),
        ("actuator_forcerange", [[1.0, -1.0]]),
        ("jnt_range", [[0.0, 0.0], [2.0, 1.0]]),
    ],
)
def test_set_param_refuses_an_inverted_range(runner, path, values):
    before = snapshot(runner)
    with pytest.raises(ValueError, match=rf"{path}.*lo <= hi"):
        runner.set_param(path, values)
    with pytest.raises(ValueError, match=rf"{path}.*lo <= hi"):
        runner.set_param(path, values, env_ids=[1])
    with pytest.raises(ValueError, match=rf"{path}.*lo <= hi"):
        runner.update_model(fields={path: values})
    assert_unchanged(before, runner)


# --- defect 5: seeds -------------------------------------------------------------------------

BAD_SEEDS = [
    (2**70, ValueError),
    (2**63, ValueError),
    (2**SEED_BITS, ValueError),  # would repeat seed 0's streams (or overflow int64)
    (-1, ValueError),
    (np.uint64(2**64 - 1), ValueError),
    (1.5, TypeError),
    (True, TypeError),
    ("3", TypeError),
]


@pytest.mark.parametrize("seed, error", BAD_SEEDS)
def test_bad_seeds_are_refused_at_construction(seed, error):
    match = rf"seed must be an int in \[0, 2\*\*{SEED_BITS}\)" if error is ValueError else "seed"
    for build in (
        lambda: MultiEnvRunner("cartpole", N, seed=seed, impl=IMPL),
        lambda: GroupRunner([("cartpole", 1), ("cartpole", 1)], seed=seed, impl=IMPL),
        lambda: E.make(TASK, N, reset_pool=2, pool_seed=seed, impl=IMPL),
        lambda: MjxVectorEnv(TASK, N, seed=seed, impl=IMPL),
        lambda: TorchVecEnv(TASK, N, seed=seed, impl=IMPL),
        lambda: RslRlVecEnv(TASK, N, seed=seed, impl=IMPL),
    ):
        with pytest.raises(error, match=match):
            build()


def test_bad_seeds_are_refused_by_reset(gym_door):
    torch_door = TorchVecEnv(TASK, N, impl=IMPL)
    for door in (gym_door, torch_door):
        for seed, error in BAD_SEEDS:
            with pytest.raises(error, match="seed"):
                door.reset(seed=seed)
        assert not door._door.ready  # nothing reset


def test_the_largest_seed_taken_is_a_key_of_its_own():
    top = 2**SEED_BITS - 1
    assert MultiEnvRunner("cartpole", 1, seed=top, impl=IMPL).num_envs == 1
    keys = {tuple(np.asarray(jax.random.key_data(jax.random.key(s)))) for s in (0, 1, top)}
    assert len(keys) == 3


# --- defect 8b: obs_clip without normalize_obs ------------------------------------------------


def test_obs_clip_needs_normalize_obs():
    match = r"obs_clip .* needs normalize_obs=True"
    for build in (
        lambda: E.make(TASK, N, obs_clip=5.0, impl=IMPL),
        lambda: E.make(
            TASK, 2 * N, groups=[("cartpole", N), ("cartpole", N)], obs_clip=5.0, impl=IMPL
        ),
        lambda: MjxVectorEnv(TASK, N, obs_clip=5.0, impl=IMPL),
        lambda: TorchVecEnv(TASK, N, obs_clip=5.0, impl=IMPL),
        lambda: E.make(TASK, N, impl=IMPL).with_obs_normalization(False, clip=5.0),
    ):
        with pytest.raises(ValueError, match=match):
            build()
    assert E.make(TASK, N, normalize_obs=True, obs_clip=5.0, impl=IMPL).normalize.clip == 5.0
