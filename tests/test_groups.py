"""Heterogeneous worlds: groups of different scenes behind one world index.

The reference for a group is a homogeneous runner (or env) of its scene, seeded
and driven alike: a group runner must equal the separate runners world for world,
bit for bit, through steps, every kind of reset, per-world parameters and
randomization. The groups here are the cartpole and a structural variant of it
made below (one more geom): what the groups' code does is the same for any scene,
and a cartpole compiles in a fraction of a contact scene's time (the puck variants
of models/ run in the README, the notebook and test_models).

The groups' bookkeeping is the same for every impl, so the runners and the rendered
door here run on impl "c" (:data:`IMPL`: MuJoCo's C step, no physics compiled);
test_native_doors checks groups on impl "c" against native ``mj_step``. On impl
"jax": the functional env against the homogeneous envs (see :func:`envs`), and so
the doors compared with it, which share its compiled functions; and splitting groups
over two devices, which is MJX's alone (impl "c" spreads worlds over threads), in a
process of its own.
"""

import sys

import conftest
import gymnasium
import jax
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from mjxrunner import CompileCounter, MultiEnvRunner, tasks
from mjxrunner.doors.group_runner import GroupRunner
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.engine import core, models
from mjxrunner.engine.groups import WorldIndex
from mjxrunner.engine.params import Term
from mjxrunner.rl import env as E
from mjxrunner.rl.group_env import GroupEnv

# The impl of the runners and the rendered door here (see above).
IMPL = "c"
N0, N1 = 4, 4
N = N0 + N1
# A post beside the rail: one more geom, so another structure (a group of its own).
POSTED = (
    models.path("cartpole")
    .read_text()
    .replace(
        '<body name="cart"',
        '<geom name="post" type="box" pos="1.2 0.4 0.6" size="0.08 0.08 0.6" rgba="0.9 0.2 0.2 1"/>'
        '\n    <body name="cart"',
    )
)
SCENES = ("cartpole", POSTED)
GROUPS = [(SCENES[0], N0), (SCENES[1], N1)]
NU, OBS = 1, 5
# Episodes end in the tests (25 steps, as in test_env and test_gym).
TASK = tasks.get("cartpole_balance").replace(max_episode_steps=25)
DAMPING = [Term("dof_damping", 0.5, 2.0)]


# --- the index --------------------------------------------------------------------------


def test_world_index_numbers_groups_one_after_another():
    index = WorldIndex.of([3, 5, 2])
    np.testing.assert_array_equal(index.world_start, [0, 3, 8, 10])
    assert index.num_envs == 10 and index.num_groups == 3 and index.sizes == (3, 5, 2)
    assert index.group_of(0) == 0 and index.group_of(3) == 1 and index.group_of(9) == 2
    np.testing.assert_array_equal(index.group_of([9, 2, 4]), [2, 0, 1])
    assert index.local(8) == (2, 0)
    mask = np.arange(11) % 2 == 0  # (num_envs + 1,): the last entry is True
    pieces = index.split_mask(mask)
    assert [p.shape for p in pieces] == [(4,), (6,), (3,)]
    assert all(p[-1] for p in pieces)  # every group restores its shared leaves
    np.testing.assert_array_equal(pieces[1][:-1], mask[3:8])
    (at0, ids0), (at1, ids1), (at2, ids2) = index.split_ids(np.array([9, 0, 4]))
    assert at0.tolist() == [1] and ids0.tolist() == [0]
    assert at1.tolist() == [2] and ids1.tolist() == [1]
    assert at2.tolist() == [0] and ids2.tolist() == [1]
    with pytest.raises(ValueError, match="lie in"):
        index.group_of(10)
    with pytest.raises(ValueError, match="at least one group"):
        WorldIndex.of([])
    with pytest.raises(ValueError, match="num_envs of group 1"):
        WorldIndex.of([2, 0])


# --- the runner -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runners():
    """A two-group runner and the two homogeneous runners it must equal."""
    group = MultiEnvRunner.from_groups(GROUPS, seed=3, impl=IMPL)
    alone = [
        MultiEnvRunner(SCENES[0], N0, seed=3, impl=IMPL),
        MultiEnvRunner(SCENES[1], N1, seed=4, impl=IMPL),
    ]
    return group, alone


def assert_same(group: GroupRunner, alone, what: str) -> None:
    for g, r in enumerate(alone):
        for field in ("qpos", "qvel", "ctrl"):
            np.testing.assert_array_equal(
                getattr(group.data_of(g), field), getattr(r.data, field), err_msg=f"{what} {g}"
            )
    np.testing.assert_array_equal(
        group.episode_length, np.concatenate([r.episode_length for r in alone])
    )


def drive(group, alone, rng) -> None:
    """One step of random actions, the same for both."""
    u = rng.uniform(-1, 1, (N, NU)).astype(np.float32)
    group.set_actions(u)
    alone[0].set_actions(u[:N0])
    alone[1].set_actions(u[N0:])
    group.step()
    for r in alone:
        r.step()


def test_two_groups_equal_two_runners_through_resets_parameters_and_randomization(runners):
    group, alone = runners
    assert group.num_envs == N and group.num_groups == 2
    np.testing.assert_array_equal(group.world_start, [0, N0, N])
    assert group.group_of(N0) == 1 and group.group_of(N0 - 1) == 0
    # per-world gravity from the start, made the default: every call below then
    # meets one shape signature, so warm-up is short
    group.set_gravity([0.0, 0.0, -4.0], world=N0 + 1)
    alone[1].set_gravity([0.0, 0.0, -4.0], world=1)
    for r in (group, *alone):
        r.build_default()
    group.set_randomization(DAMPING)
    for r in alone:
        r.set_randomization(DAMPING)
    np.testing.assert_array_equal(group.param("dof_damping")[1], alone[1].param("dof_damping"))
    rng = np.random.default_rng(0)
    counter = None
    for t in range(100):
        if t == 50:  # every call has run: nothing may compile now
            counter = CompileCounter().__enter__()
        drive(group, alone, rng)
        if t in (10, 60):  # a (num_envs,) mask over both groups
            mask = np.zeros(N, bool)
            mask[[1, N0 + 2]] = True
            group.reset(mask)
            alone[0].reset(mask[:N0])
            alone[1].reset(mask[N0:])
        if t in (20, 70):  # ids
            group.reset_envs([N0 + 3, 0])
            alone[0].reset_envs([0])
            alone[1].reset_envs([3])
        if t in (5, 55):  # per-world gravity, new values in one world of group 1
            group.set_gravity([0.0, 0.0, -3.0 - t / 100], world=N0 + 1)
            alone[1].set_gravity([0.0, 0.0, -3.0 - t / 100], world=1)
        if t in (30, 80):  # a redraw of some worlds
            group.randomize([2, N0])
            alone[0].randomize([2])
            alone[1].randomize([0])
        if t in (40, 90):  # (num_envs + 1,): the last entry restores the shared leaves
            mask = np.zeros(N + 1, bool)
            mask[[N0 - 1, N]] = True
            group.reset(mask)
            alone[0].reset(np.append(mask[:N0], True))
            alone[1].reset(np.append(mask[N0:N], True))
        assert_same(group, alone, f"step {t}")
    counter.__exit__(None, None, None)
    assert counter.count == 0
    for r, gravity in zip(alone, group.param("opt.gravity"), strict=True):
        np.testing.assert_array_equal(gravity, r.param("opt.gravity"))
    damping = group.param("dof_damping")
    assert len({float(d[0]) for d in damping[1]}) == N1  # drawn per world
    assert group.contact_count().shape == (N,)
    report = group.health
    np.testing.assert_array_equal(
        report.reset_count, np.concatenate([r.health.reset_count for r in alone])
    )


def test_waiting_for_every_group_changes_nothing(runners):
    group, alone = runners
    drive(group, alone, np.random.default_rng(7))
    assert group.block_until_ready() is group
    assert all(x.is_ready() for m in group.groups for x in jax.tree.leaves(m.engine.state))
    assert_same(group, alone, "after waiting")


def test_full_reset_restores_every_group(runners):
    group, _ = runners
    group.set_gravity([0.0, 0.0, -1.0])  # shared in both groups now
    group.reset_all()
    for g, r in enumerate(group.groups):
        np.testing.assert_array_equal(group.data_of(g).qpos, r.engine.default.data.qpos)
        np.testing.assert_array_equal(r.param("opt.gravity"), r.engine.default_model.opt.gravity)
    np.testing.assert_array_equal(group.episode_length, 0)
    assert isinstance(group.data, tuple) and len(group.data) == 2
    assert group.data[1].qpos.shape == (N1, 2)


def test_group_checkpoint_continues_bit_for_bit(runners, tmp_path):
    group, _ = runners
    rng = np.random.default_rng(5)
    group.set_actions(rng.uniform(-1, 1, (N, NU)).astype(np.float32))
    group.set_grid_layout(2.0)
    path = tmp_path / "groups.npz"
    group.save(path)
    again = GroupRunner.load(path)
    assert again.layout == "grid"
    np.testing.assert_array_equal(again.env_origins, group.env_origins)
    for _ in range(3):
        group.step()
        again.step()
    for g in range(2):
        np.testing.assert_array_equal(again.data_of(g).qpos, group.data_of(g).qpos)
        np.testing.assert_array_equal(again.param("dof_damping")[g], group.param("dof_damping")[g])
    with pytest.raises(ValueError, match="holds a group runner"):
        MultiEnvRunner.load(path)


def test_bad_input_is_refused_and_changes_nothing(runners):
    group, _ = runners
    before = jax.device_get([m.engine for m in group.groups])

    def unchanged() -> bool:
        after = jax.device_get([m.engine for m in group.groups])
        return all(
            np.array_equal(x, y, equal_nan=True)
            for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(before), strict=True)
        )

    friction = models.load(SCENES[0]).geom_friction.astype(np.float32)  # (4, 3): group 0 only
    bad = [
        (ValueError, "shape", lambda: group.set_actions(np.zeros((N, 3)))),
        (ValueError, "finite", lambda: group.set_actions(np.full((N, NU), np.nan))),
        (ValueError, "group 1", lambda: group.set_param("geom_friction", friction)),
        (ValueError, "group 1", lambda: group.set_param("geom_friction", friction, [0, N0])),
        (ValueError, "shape", lambda: group.reset(np.ones(N + 2, bool))),
        (ValueError, "lie in", lambda: group.reset_envs([N])),
        (ValueError, "lie in", lambda: group.render(N)),
        (
            ValueError,
            "group 0",  # geom 4 (the post) exists in group 1 only
            lambda: group.set_randomization([Term("geom_friction", 1, 2, index=(4, 0))]),
        ),
    ]
    for error, message, call in bad:
        with pytest.raises(error, match=message):
            call()
        assert unchanged(), message
    # a field whose shape differs between groups is set through one group's ids
    group.set_param("geom_friction", friction[None], [1])
    np.testing.assert_array_equal(group.param("geom_friction")[0][1], friction)
    with pytest.raises(TypeError, match="group 0"):
        MultiEnvRunner.from_groups([(SCENES[0],)])
    with pytest.raises(ValueError, match="shared by every group"):
        MultiEnvRunner.from_groups([(SCENES[0], 2, {"impl": "warp"})])


def test_groups_of_different_nu_share_one_padded_action_row():
    group = MultiEnvRunner.from_groups([("cartpole", 2), ("puck", 3)], impl=IMPL)
    assert group.action_dim() == 2
    np.testing.assert_array_equal(group.action_mask[:, 1], [False, False, True, True, True])
    u = np.arange(10, dtype=np.float32).reshape(5, 2) / 10
    group.set_actions(u)
    np.testing.assert_array_equal(group.groups[0].control, u[:2, :1])  # column 0 only
    np.testing.assert_array_equal(group.groups[1].control, u[2:])
    np.testing.assert_array_equal(group.control, u * group.action_mask)
    group.set_actions(np.ones((1, 2), np.float32), env_ids=[3])
    np.testing.assert_array_equal(group.control[3], [1, 1])
    np.testing.assert_array_equal(group.control[2], u[2])


def test_render_and_layout_use_global_ids(runners):
    group, _ = runners
    frame = group.render(N0 + 1, width=64, height=48)
    own = group.groups[1].render(1, width=64, height=48)
    np.testing.assert_array_equal(frame, own)
    row = group.render_worlds([0, N0], width=64, height=48)
    assert row.shape == (48, 128, 3)
    assert not np.array_equal(row[:, :64], row[:, 64:])  # the post shows
    group.set_linear_layout(1.5)
    np.testing.assert_array_equal(group.env_origin(N0), [1.5 * N0, 0, 0])


# --- the env ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def envs():
    """The env over two groups and the two homogeneous envs it must equal, on impl
    "jax": on impl "c" (at the suite's XLA optimization level 0) the two programs
    round the restarts' drawn starts differently (an FMA in one of them, see
    docs/training.md), one ulp apart."""
    group = E.make(TASK, N, groups=GROUPS, autoreset="same_step", normalize_obs=True, impl="jax")
    alone = [E.make(TASK, n, model=scene, impl="jax") for scene, n in GROUPS]
    return group, alone


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_env_over_groups_equals_the_homogeneous_envs(envs, mode):
    group, alone = envs
    group = group.with_autoreset(mode)
    alone = [e.with_autoreset(mode) for e in alone]
    assert isinstance(group, GroupEnv) and group.num_envs == N
    key = jax.random.key(7)
    keys = core.init_keys(key, N)
    s = E.jit_reset(group, key)
    reset = jax.jit(E.reset_from_keys)
    refs = [reset(alone[0], keys[:N0]), reset(alone[1], keys[N0:])]
    rng = np.random.default_rng(1)
    # the step compiled for "next_step" serves every mode, and new values never compile:
    # compiled here, whichever of the modes ran before on this worker
    zeros = np.zeros((N, NU), np.float32)
    warm, alone_warm = envs[0].with_autoreset("next_step"), envs[1]
    E.jit_step(warm, E.jit_reset(warm, key), zeros)
    for e, k, n in zip(alone_warm, (keys[:N0], keys[N0:]), (N0, N - N0), strict=True):
        e = e.with_autoreset("next_step")
        E.jit_step(e, reset(e, k), zeros[:n])
    counter = CompileCounter().__enter__()
    for t in range(60):
        if t == 30:  # a new shared value in every group
            group = group.with_param("opt.gravity", [0.0, 0.0, -5.0])
            alone = [e.with_param("opt.gravity", [0.0, 0.0, -5.0]) for e in alone]
        u = rng.uniform(-1, 1, (N, NU)).astype(np.float32)
        s = E.jit_step(group, s, u)
        refs = [E.jit_step(alone[0], refs[0], u[:N0]), E.jit_step(alone[1], refs[1], u[N0:])]
        if mode == "disabled" and t % 20 == 19:  # restart by hand
            mask = np.arange(N) % 3 == 0
            s = E.jit_reset_worlds(group, s, mask)
            refs = [
                E.jit_reset_worlds(a, r, m)
                for a, r, m in zip(alone, refs, (mask[:N0], mask[N0:]), strict=True)
            ]
        for field in ("obs", "final_obs"):  # the groups' own, before normalization
            raw = np.concatenate([np.asarray(getattr(g, field)) for g in s.groups])
            joined = np.concatenate([np.asarray(getattr(r, field)) for r in refs])
            np.testing.assert_array_equal(raw, joined, err_msg=f"{field} {t}")
        for field in ("reward", "final_mask", "terminated", "truncated", "episode_length"):
            joined = np.concatenate([np.asarray(getattr(r, field)) for r in refs])
            np.testing.assert_array_equal(
                np.asarray(getattr(s, field)), joined, err_msg=f"{field} {t}"
            )
    counter.__exit__(None, None, None)
    if mode == "same_step":
        assert counter.count == 0
    stats = E.episode_statistics(s)
    # episodes of at most 25 steps ended (and, but for "disabled", restarted)
    assert stats["episodes"] >= (N if mode != "disabled" else 1)
    np.testing.assert_array_equal(
        stats["return_sum"], np.concatenate([E.episode_statistics(r)["return_sum"] for r in refs])
    )


def test_env_groups_must_agree_on_what_the_policy_sees():
    with pytest.raises(ValueError, match="groups 0 and 1 differ in observation"):
        E.make("puck_reach", 4, groups=[("puck", 2), ("reacher", 2)], impl=IMPL)
    with pytest.raises(ValueError, match="hold 4 worlds, but num_envs is 5"):
        E.make("puck_reach", 5, groups=[("puck", 2), ("puck_steps", 2)], impl=IMPL)
    with pytest.raises(ValueError, match="give each group its model"):
        E.make("puck_reach", 4, groups=[("puck", 2), ("puck_steps", 2)], model="puck", impl=IMPL)


def test_env_observation_statistics_span_every_group(envs):
    normed, _ = envs
    s = E.jit_reset(normed, jax.random.key(2))
    raw = [np.concatenate([np.asarray(g.obs) for g in s.groups])]
    rng = np.random.default_rng(3)
    for _ in range(5):
        s = E.jit_step(normed, s, rng.uniform(-1, 1, (N, NU)).astype(np.float32))
        raw.append(np.concatenate([np.asarray(g.obs) for g in s.groups]))
    everything = np.concatenate(raw)
    assert float(s.obs_norm.count) == everything.shape[0]
    np.testing.assert_allclose(s.obs_norm.mean, everything.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.obs_norm.var, everything.var(axis=0), rtol=1e-4, atol=1e-6)
    scaled = (raw[-1] - everything.mean(axis=0)) / np.sqrt(everything.var(axis=0) + 1e-8)
    # cos(angle) barely varies: its float32 variance scales rounding by ~1e2
    np.testing.assert_allclose(s.obs, scaled, rtol=1e-2, atol=1e-3)


def test_env_over_groups_checkpoint_continues_bit_for_bit(envs, tmp_path):
    group, _ = envs
    s = E.jit_reset(group, jax.random.key(9))
    u = np.full((N, NU), 0.5, np.float32)
    for _ in range(3):
        s = E.jit_step(group, s, u)
    E.save(tmp_path / "env.npz", group, s)
    loaded, again = E.load(tmp_path / "env.npz", task=TASK)  # a changed task: not by name
    assert isinstance(loaded, GroupEnv) and loaded.normalize == group.normalize
    with CompileCounter() as c:  # the same structure: the same executables
        for _ in range(20):  # past the time limit: restarts from the saved streams
            s = E.jit_step(group, s, u)
            again = E.jit_step(loaded, again, u)
    assert c.count == 0
    for x, y in zip(jax.tree.leaves(s), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    with pytest.raises(ValueError, match=r"load it with mjxrunner\.env\.load"):
        GroupRunner.load(tmp_path / "env.npz")
    with pytest.raises(ValueError, match=r"holds groups of an env, not a runner"):
        MultiEnvRunner.load(tmp_path / "env.npz")


# --- Gymnasium -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vector_envs():
    return {
        mode: MjxVectorEnv(TASK, N, groups=GROUPS, autoreset_mode=mode, seed=4, normalize_obs=True)
        for mode in AutoresetMode
    }


def raw(state) -> np.ndarray:
    """The observations of every world before normalization."""
    return np.concatenate([np.asarray(g.obs) for g in state.groups])


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_gymnasium_over_groups_matches_its_groups_and_checks_out(vector_envs, envs, mode):
    v = vector_envs[mode]
    box = gymnasium.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    assert v.single_observation_space == box
    assert v.action_space.shape == (N, NU) and v.num_envs == N
    obs, info = v.reset(seed=4)
    assert v.observation_space.contains(obs) and info == {}
    # The door steps the same env packed into flat buffers: another XLA program, so
    # it agrees to float32 rounding (XLA keeps no bitwise promise across programs).
    functional = envs[0].with_autoreset(v.env.autoreset)
    s = E.jit_reset(functional, jax.random.key(4))
    first = raw(v.state)
    np.testing.assert_array_equal(obs, s.obs)
    rng = np.random.default_rng(2)
    wrapped = gymnasium.wrappers.vector.RecordEpisodeStatistics(v, stats_key="wrapper_episode")
    for _ in range(5):
        u = rng.uniform(-1, 1, (N, NU)).astype(np.float32)
        obs, reward, terminated, truncated, _ = wrapped.step(u)
        s = E.jit_step(functional, s, u)
        assert v.observation_space.contains(obs)
        assert reward.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
        np.testing.assert_allclose(obs, s.obs, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(reward, s.reward, rtol=1e-6, atol=1e-8)
    v.reset(seed=4, options={"reset_mask": np.arange(N) == N0})
    # re-seeded: its first start (drawn by a masked reset, up to rounding)
    np.testing.assert_allclose(raw(v.state)[N0], first[N0], rtol=1e-6, atol=1e-8)
    before = jax.device_get(v.state)
    with pytest.raises(ValueError, match="shape"):
        v.step(np.zeros((N, 3)))
    after = jax.device_get(v.state)
    assert all(
        np.array_equal(x, y)
        for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)
    )


def test_gymnasium_over_groups_renders_each_world_with_its_scene():
    v = MjxVectorEnv(
        TASK, N, groups=GROUPS, render_mode="rgb_array", render_size=(64, 48), impl=IMPL
    )
    v.reset(seed=0)
    frames = v.render()
    assert len(frames) == N and frames[N0].shape == (48, 64, 3)
    assert not np.array_equal(frames[0], frames[N0])  # the post shows in group 1
    tiled = v.render_tiled()  # the first four worlds: all of group 0, one scene
    assert tiled.shape == (48, 64, 3)
    v.close()


def test_torch_door_takes_groups(envs):
    """The torch door passes ``groups=`` to ``make`` and hands out what
    ``GroupState`` joins; its compiled step is the Gymnasium door's with a pack
    added, so here only what differs is checked, without compiling a step."""
    import torch

    from mjxrunner.doors import torch as torch_door

    v = torch_door.TorchVecEnv(TASK, N, groups=GROUPS, normalize_obs=True)
    assert isinstance(v.env, GroupEnv) and v.num_envs == N and v.num_actions == NU
    state = E.jit_reset(envs[0], jax.random.key(1))
    floats, flags, apart = torch_door._pack(state)
    assert apart == ()  # every group of a float vector observation shares the buffer
    # obs and final obs of every world, then rewards, last returns and last lengths
    assert floats.shape == (2 * N * OBS + 3 * N,) and flags.shape == (3 * N,)
    np.testing.assert_array_equal(np.asarray(floats[: N * OBS]).reshape(N, OBS), state.obs)
    v._door.state = state
    v.set_episode_length(torch.arange(N) % 5)
    np.testing.assert_array_equal(v.state.groups[1].episode_length, np.arange(N0, N) % 5)
    np.testing.assert_array_equal(v.state.episode_length, np.arange(N) % 5)


# --- two devices (a process of its own, in the background) ----------------------------


def check_two_devices() -> None:
    """Every group split over 2 devices steps, resets and restarts as on one, and
    as MuJoCo's C step does: the one-device reference runs on impl "c" (the jax
    programs of one device are this file's other tests'), which spares compiling
    them here. Over these 10 steps jax on 2 devices stayed within 4e-9 of it in
    qpos and 7e-7 in the env's observations; the bounds below leave room for
    XLA's float32 rounding on either side."""
    sharded_groups = [(SCENES[0], 4), (SCENES[1], 2)]
    one = MultiEnvRunner.from_groups(sharded_groups, seed=1, impl="c", num_threads=1)
    two = MultiEnvRunner.from_groups(sharded_groups, seed=1, devices=2)
    assert two.data_of(1).qpos.sharding.num_devices == 2
    rng = np.random.default_rng(0)
    for _ in range(10):
        u = rng.uniform(-1, 1, (6, NU)).astype(np.float32)
        for r in (one, two):
            r.set_actions(u)
            r.step()
    mask = np.zeros(7, bool)
    mask[[0, 5, 6]] = True
    for r in (one, two):
        r.reset(mask)
    for g in range(2):
        np.testing.assert_allclose(two.data_of(g).qpos, one.data_of(g).qpos, atol=1e-5)
    with pytest.raises(ValueError, match="group 1: num_envs=3"):
        MultiEnvRunner.from_groups([(SCENES[0], 4), (SCENES[1], 3)], devices=2)

    task = TASK.replace(max_episode_steps=5)
    options = {"groups": sharded_groups, "autoreset": "same_step", "normalize_obs": True}
    envs = [
        E.make(task, 6, impl="c", num_threads=1, **options),
        E.make(task, 6, devices=2, **options),
    ]
    states = [E.jit_reset(e, jax.random.key(0)) for e in envs]
    for _ in range(8):
        u = rng.uniform(-1, 1, (6, NU)).astype(np.float32)
        states = [E.jit_step(e, s, u) for e, s in zip(envs, states, strict=True)]
    assert states[1].groups[0].obs.sharding.num_devices == 2
    np.testing.assert_allclose(states[1].obs, states[0].obs, atol=1e-4)
    np.testing.assert_array_equal(states[1].episode_length, states[0].episode_length)
    print("groups on two devices: passed")


@conftest.background("test_groups")
def launch(out):
    return [conftest.start("test_groups.py", "two-devices", out=out)]


def test_every_group_splits_over_two_devices():
    [(returncode, log)], _ = conftest.finished("test_groups")
    assert returncode == 0, log[-4000:]
    assert "groups on two devices: passed" in log


if __name__ == "__main__" and sys.argv[1:] == ["two-devices"]:
    check_two_devices()
