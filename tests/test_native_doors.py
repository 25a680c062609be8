"""Every front door and every kit capability on impl "c" (MuJoCo C under the engine).

Impl "c" compiles no physics, so these tests are cheap; what they check is that each
door and each term of the kit reaches MuJoCo's own step and gives its numbers:

* Gymnasium (``make_vec`` of a registered id and ``MjxVectorEnv``) against
  Gymnasium's ``SyncVectorEnv`` of native single worlds (test_gym's reference), in
  every autoreset mode, the float64 state compared bit for bit; ``rgb_array``
  frames against MuJoCo's renderer of the native worlds.
* The torch, rsl_rl, skrl and Brax doors against the functional env on impl "c".
* Groups, each stepped on its own ``MjModel``, against envs of one group each.
* The kit (latency, pushes, noise and history, per-world randomization of masses
  and frictions on reset and every n steps, normalization, terrain and its
  curriculum) through the env, against native ``mj_step`` where it moves physics.
* Restart slots, reset pools, env checkpoints, pixel tasks and bad input.

The exact state of a world is ``data._impl.state``: the bits of its float64
``mjSTATE_INTEGRATION`` vector (see :mod:`mjxrunner.engine.native`).
"""

import copy
import itertools

import gymnasium
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import test_gym
import test_torch_doors
import torch
from gymnasium.vector import AutoresetMode
from rsl_rl.env import VecEnv
from skrl.envs.wrappers.torch import wrap_env
from test_hostile import assert_same, refused
from test_hostile_doors import snapshot

from mjxrunner import MultiEnvRunner
from mjxrunner.doors.brax import BraxEnv
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.doors.rsl_rl import RslRlVecEnv
from mjxrunner.doors.torch import TorchVecEnv
from mjxrunner.engine import native
from mjxrunner.engine.params import Term
from mjxrunner.rl import env as E

INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION
N = test_gym.N  # 4 worlds
TASK = test_gym.TASK  # cartpole balance, episodes of at most 25 steps
GYM_ID = "mjxrunner/CartpoleBalance-v0"


def exact(data) -> np.ndarray:
    """``(n, nstate)`` float64: the exact states of batched impl "c" data."""
    return native.from_bits(np.asarray(data._impl.state))


def effective(model, data) -> np.ndarray:
    """``(n, nstate)`` float64: the states MuJoCo steps from next. As the engine's
    host call reads them: the exact value, except where the data's public field no
    longer equals its rounding (a reset or a task wrote it): that value, widened."""
    rows = exact(data).copy()
    at = 0
    for name, size in model._impl.host.fields:
        seen = np.asarray(getattr(data, name)).reshape(rows.shape[0], -1)
        part = rows[:, at : at + size]
        written = seen != part.astype(seen.dtype)
        part[written] = seen[written]
        at += size
    return rows


def env_model(env):
    """The impl "c" ``mjx.Model`` of a functional env."""
    return env.model.tree


def native_state(m: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
    out = np.empty(mujoco.mj_stateSize(m, INTEGRATION))
    mujoco.mj_getState(m, d, out, INTEGRATION)
    return out


# --- Gymnasium ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gyms():
    """The registered id on impl "c" in each autoreset mode (one compiled step)."""
    return {
        mode: gymnasium.make_vec(
            GYM_ID,
            num_envs=N,
            vectorization_mode="vector_entry_point",
            impl="c",
            task=TASK,
            autoreset_mode=mode,
            seed=test_gym.SEED,
        )
        for mode in AutoresetMode
    }


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_make_vec_steps_native_worlds_bit_for_bit(gyms, mode):
    """The Gymnasium door on impl "c" against ``SyncVectorEnv`` of single native
    worlds (float64 ``mj_step``, the task's functions, the documented key streams):
    the same observations, rewards, flags, autoresets and terminal observations,
    and the physics state of every world equal bit for bit at every step."""
    ours = gyms[mode]
    assert isinstance(ours, MjxVectorEnv) and ours.env.impl == "c"
    theirs = test_gym.reference(mode, ours)
    worlds = theirs.envs

    def assert_same_physics(t):
        """Bit for bit, but for worlds that start an episode now: their starts come
        from the task's draw compiled here and run eagerly there, equal up to float32
        rounding; the native world then continues from ours."""
        want = np.stack([native_state(w.m, w.d) for w in worlds])
        got = effective(env_model(ours.env), ours.state.runner.data)
        fresh = np.asarray(ours.state.episode_length) == 0
        np.testing.assert_array_equal(got[~fresh], want[~fresh], err_msg=f"step {t}")
        np.testing.assert_allclose(got[fresh], want[fresh], rtol=1e-6, atol=1e-8)
        for i in np.flatnonzero(fresh):
            mujoco.mj_setState(worlds[i].m, worlds[i].d, got[i], INTEGRATION)
        return int((~fresh).sum())

    obs, _ = ours.reset(seed=test_gym.SEED)
    ref_obs, _ = theirs.reset()
    np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
    assert_same_physics(-1)
    ends = finals = compared = 0
    for t in range(test_gym.STEPS):
        actions = test_gym.policy(obs)
        obs, reward, term, trunc, info = ours.step(actions)
        ref_obs, ref_reward, ref_term, ref_trunc, ref_info = theirs.step(actions)
        np.testing.assert_allclose(obs, ref_obs, atol=1e-6, err_msg=f"step {t}")
        np.testing.assert_array_equal(reward, ref_reward)
        np.testing.assert_array_equal(term, ref_term)
        np.testing.assert_array_equal(trunc, ref_trunc)
        test_gym.assert_same_infos(info, ref_info)
        compared += assert_same_physics(t)
        ends += int((term | trunc).sum())
        finals += len(info.get("final_obs", ()))
        if mode == AutoresetMode.DISABLED and (term | trunc).any():
            mask = term | trunc
            obs, _ = ours.reset(options={"reset_mask": mask.copy()})
            ref_obs, _ = theirs.reset(options={"reset_mask": mask.copy()})
            np.testing.assert_allclose(obs, ref_obs, atol=1e-6)
            assert_same_physics(t)
    assert ends >= 6  # terminations and time limits, several times
    assert compared > 150  # world-steps compared bit for bit
    assert finals > 0 or mode != AutoresetMode.SAME_STEP


def test_rgb_array_frames_are_mujocos_of_each_world():
    """``render_mode="rgb_array"`` on impl "c": world ``i``'s frame is MuJoCo's
    renderer drawing that world's native state."""
    size = (96, 64)
    v = gymnasium.make_vec(
        GYM_ID,
        num_envs=N,
        vectorization_mode="vector_entry_point",
        impl="c",
        render_mode="rgb_array",
        render_size=size,
    )
    v.reset(seed=0)
    for t in range(10):  # the carts go their own ways
        v.step(np.sin(0.3 * t + np.arange(N))[:, None].astype(np.float32))
    frames = v.render()
    m = v.env.host.mj_model
    d = mujoco.MjData(m)
    states = exact(v.state.runner.data)
    with mujoco.Renderer(m, height=size[1], width=size[0]) as renderer:
        for i in range(N):
            mujoco.mj_setState(m, d, states[i], INTEGRATION)
            mujoco.mj_forward(m, d)
            renderer.update_scene(d, camera=0 if m.ncam else -1)
            np.testing.assert_array_equal(frames[i], renderer.render(), err_msg=f"world {i}")
    assert frames[0].std() > 5 and not np.array_equal(frames[0], frames[1])
    v.close()


# --- the torch, rsl_rl, skrl and Brax doors ----------------------------------------------

STEPS = 40  # past the time limit: every world restarts at least once


def torch_actions(t: int) -> np.ndarray:
    u = 0.8 * np.sin(0.4 * t + np.arange(N))
    return u[:, None].astype(np.float32)


@pytest.fixture(scope="module")
def reference():
    """Host states of the functional env on impl "c" in same-step mode."""
    env = E.make(TASK, N, autoreset="same_step", impl="c")
    s = E.jit_reset(env, jax.random.key(3))
    out = [jax.device_get(s)]
    for t in range(STEPS):
        s = E.jit_step(env, s, torch_actions(t))
        out.append(jax.device_get(s))
    assert sum(int(x.final_mask.sum()) for x in out) >= N  # restarts happened
    return out


def restarted_by(reference, t: int) -> bool:
    """Whether a world of the reference restarted by step ``t`` (0: the reset)."""
    return any(bool(x.final_mask.any()) for x in reference[1 : t + 1])


def assert_same_step(reference, t, obs, reward, terminated, truncated, data=None):
    """Step ``t`` of a door against the reference: bit for bit until a world
    restarts. A restart draws its start with XLA in the door's compiled step and in
    the reference's, two programs that may round the draw's last bit differently
    (XLA keeps no bitwise promise across programs); from then on, to rounding."""
    ref = reference[t]
    if restarted_by(reference, t):
        np.testing.assert_allclose(np.asarray(obs), ref.obs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(reward).reshape(N), ref.reward, rtol=1e-5)
    else:
        np.testing.assert_array_equal(np.asarray(obs), ref.obs)
        np.testing.assert_array_equal(np.asarray(reward).reshape(N), ref.reward)
    np.testing.assert_array_equal(np.asarray(terminated).reshape(N), ref.terminated)
    np.testing.assert_array_equal(np.asarray(truncated).reshape(N), ref.truncated)
    if data is None:
        return
    if restarted_by(reference, t):
        np.testing.assert_allclose(exact(data), exact(ref.runner.data), rtol=1e-6, atol=1e-8)
    else:  # the physics, bit for bit
        np.testing.assert_array_equal(exact(data), exact(ref.runner.data))


@pytest.fixture(scope="module")
def torch_door():
    return TorchVecEnv(TASK, N, seed=3, impl="c")


def test_torch_door_gives_the_functional_envs_numbers(torch_door, reference):
    door = torch_door
    assert door.env.impl == "c"
    obs, _ = door.reset(seed=3)
    np.testing.assert_array_equal(obs["policy"].numpy(), reference[0].obs)
    for t in range(STEPS):
        obs, reward, terminated, truncated, extras = door.step(torch.from_numpy(torch_actions(t)))
        data = door.state.runner.data
        assert_same_step(reference, t + 1, obs["policy"], reward, terminated, truncated, data)
        ref = reference[t + 1]
        np.testing.assert_array_equal(extras["time_outs"].numpy(), ref.truncated)
        final = extras["final_obs"].numpy()
        if restarted_by(reference, t):  # before this step
            np.testing.assert_allclose(final, ref.final_obs, rtol=1e-5, atol=1e-6)
        else:  # also the terminal observations of this step's restarts
            np.testing.assert_array_equal(final, ref.final_obs)
        np.testing.assert_array_equal(extras["final_mask"].numpy(), ref.final_mask)
    # 24 steps of every world bit for bit, then the time limit's restarts
    assert restarted_by(reference, 25) and not restarted_by(reference, 24)


def test_torch_door_refuses_bad_actions_and_changes_nothing(torch_door):
    door = torch_door
    door.reset(seed=0)
    before = snapshot(door.state, door.env)
    for value, error, message in test_torch_doors.bad_actions(N):
        with pytest.raises(error, match=message):
            door.step(value)
        assert_same(before, snapshot(door.state, door.env))
    # a NaN action is the guard's: that world alone is truncated and restarts
    nan = torch.zeros(N, 1)
    nan[2] = torch.nan
    *_, truncated, extras = door.step(nan)
    np.testing.assert_array_equal(truncated.numpy(), [False, False, True, False])
    assert extras["final_mask"][2] and np.isfinite(exact(door.state.runner.data)).all()


def test_rsl_rl_vec_env_on_c(reference):
    vec = RslRlVecEnv(TASK, N, seed=3, impl="c")
    assert isinstance(vec, VecEnv) and vec.env.env.impl == "c"
    np.testing.assert_array_equal(vec.get_observations()["policy"].numpy(), reference[0].obs)
    # what OnPolicyRunner.learn(init_at_random_ep_len=True) does, then a seeded reset
    vec.episode_length_buf = torch.randint_like(vec.episode_length_buf, high=TASK.max_episode_steps)
    vec.env.reset(seed=3)
    for t in range(STEPS):
        obs, reward, dones, extras = vec.step(torch.from_numpy(torch_actions(t)))
        ref = reference[t + 1]
        data = vec.env.state.runner.data
        assert_same_step(
            reference, t + 1, obs["policy"], reward, ref.terminated, ref.truncated, data
        )
        np.testing.assert_array_equal(extras["time_outs"].numpy(), ref.truncated)
        np.testing.assert_array_equal(dones.numpy(), ref.done.astype(np.int64))


def test_skrl_wraps_the_torch_door_on_c(reference):
    door = TorchVecEnv(TASK, N, impl="c")
    env = wrap_env(door, wrapper="isaaclab", verbose=False)
    assert env.num_envs == N and env.observation_space.shape == (5,)
    env.reset()
    door.reset(seed=3)  # the reference's starts
    for t in range(STEPS):
        obs, reward, terminated, truncated, _ = env.step(torch.from_numpy(torch_actions(t)))
        data = door.state.runner.data
        assert_same_step(reference, t + 1, obs, reward, terminated, truncated, data)


def test_brax_env_runs_on_c_under_jit_vmap_and_pmap(reference):
    """Brax's own tracing takes impl "c": the step is a host callback with a batching
    rule, which ``jit``, ``vmap`` and ``pmap`` (how Brax's trainers call an env)
    all keep; each world's physics is the reference's, bit for bit."""
    env = BraxEnv(TASK, impl="c")
    assert env.backend == "mjx-c"
    keys = jax.random.key_data(jax.random.split(jax.random.key(3), N))
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    state = reset(keys)
    np.testing.assert_array_equal(state.obs, reference[0].obs)
    for t in range(STEPS):
        state = step(state, jnp.asarray(torch_actions(t)))
        ref, data = reference[t + 1], state.pipeline_state.runner.data
        assert_same_step(
            reference, t + 1, state.obs, state.reward, ref.terminated, ref.truncated, data
        )
        np.testing.assert_array_equal(state.done, ref.done.astype(np.float32))
        np.testing.assert_array_equal(state.info["truncation"], ref.truncated)
    # Brax's trainers: pmap over the local devices, each with its share of the worlds
    devices = jax.local_device_count()
    assert N % devices == 0
    split = keys.reshape(devices, N // devices, 2)
    state = jax.pmap(env.reset)(split)
    pstep = jax.pmap(env.step)
    for t in range(5):
        state = pstep(state, jnp.asarray(torch_actions(t)).reshape(devices, N // devices, 1))
    got = exact(
        jax.tree.map(lambda x: x.reshape(N, *x.shape[2:]), state.pipeline_state.runner.data)
    )
    # (the starts drawn by another program: equal up to the draw's rounding)
    np.testing.assert_allclose(got, exact(reference[5].runner.data), rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(state.pipeline_state.runner.episode_length.ravel(), 5)


# --- following an env natively ------------------------------------------------------------


def host_value(m: mujoco.MjModel, path: str) -> np.ndarray:
    node = m
    for part in path.split("."):
        node = getattr(node, part)
    return node


class Natives:
    """One native ``MjModel`` copy and ``MjData`` per world, following an env on impl
    "c" step by step: each step sets the world's model fields to the env's (a value
    equal to the rounding of the host model's keeps the exact host value, as the
    engine writes them), sets up masses again (``mj_setConst``), and steps with the
    controls the env's physics received (after latency)."""

    def __init__(self, hosts: list[mujoco.MjModel]):
        self.hosts = hosts
        self.models = [copy.copy(m) for m in hosts]
        self.datas = [mujoco.MjData(m) for m in self.models]

    def states(self) -> np.ndarray:
        return np.stack([native_state(m, d) for m, d in zip(self.models, self.datas, strict=True)])

    def sync(self, states: np.ndarray, worlds) -> None:
        for i in worlds:
            mujoco.mj_setState(self.models[i], self.datas[i], states[i], INTEGRATION)

    def set_fields(self, trees: list, paths) -> None:
        """``trees[i]``: world ``i``'s device model (a leaf may have a world axis)."""
        for i, (host, m) in enumerate(zip(self.hosts, self.models, strict=True)):
            for path in paths:
                leaf = np.asarray(host_value(trees[i], path))
                exact_value = host_value(host, path)
                value = leaf[i] if leaf.ndim > exact_value.ndim else leaf
                rounded = exact_value.astype(value.dtype)
                host_value(m, path)[...] = np.where(value == rounded, exact_value, value)
            mujoco.mj_setConst(m, mujoco.MjData(m))

    def step(self, ctrl: np.ndarray, nstep: int) -> None:
        for m, d, u in zip(self.models, self.datas, ctrl, strict=True):
            d.ctrl[:] = u
            mujoco.mj_step(m, d, nstep)


def follow(natives: Natives, model, state, skip=None) -> int:
    """Compares the env's physics after a step with the native worlds' and syncs the
    worlds that start an episode (or ``skip``, e.g. pushed ones) from the env.
    Returns the number of worlds compared."""
    got = effective(model, state.runner.data)
    fresh = np.asarray(state.episode_length) == 0
    if skip is not None:
        fresh |= skip
    np.testing.assert_array_equal(got[~fresh], natives.states()[~fresh])
    natives.sync(got, np.flatnonzero(fresh))
    return int((~fresh).sum())


# --- heterogeneous groups -----------------------------------------------------------------

# a cartpole with a heavier, damped pole: other physics, the same policy interface
HEAVY = (
    test_gym.models.path("cartpole")
    .read_text()
    .replace('mass="0.1"', 'mass="0.4"')
    .replace('<joint damping="0.05"/>', '<joint damping="0.2"/>')
)
GROUPS = [("cartpole", 2), (HEAVY, 2)]


def test_env_over_groups_steps_each_group_on_its_own_model():
    """An env over two groups on impl "c": each group's worlds follow native
    ``mj_step`` of that group's own ``MjModel``, bit for bit; observation statistics
    span both groups."""
    env = E.make(TASK, N, groups=GROUPS, autoreset="same_step", impl="c", normalize_obs=True)
    assert [e.impl for e in env.envs] == ["c", "c"]
    hosts = [e.host.mj_model for e in env.envs]
    assert hosts[0].body_mass[-1] != hosts[1].body_mass[-1]
    natives = [Natives([e.host.mj_model] * e.num_envs) for e in env.envs]
    state = E.jit_reset(env, jax.random.key(5))
    for e, s, native_group in zip(env.envs, state.groups, natives, strict=True):
        native_group.sync(effective(e.model.tree, s.runner.data), range(e.num_envs))
    rng = np.random.default_rng(0)
    raw, compared = [np.concatenate([np.asarray(s.obs) for s in state.groups])], 0
    for _ in range(30):
        state = E.jit_step(env, state, rng.uniform(-1, 1, (N, 1)).astype(np.float32))
        for e, s, native_group in zip(env.envs, state.groups, natives, strict=True):
            native_group.step(np.asarray(s.runner.data.ctrl), TASK.substeps)
            compared += follow(native_group, e.model.tree, s)
        raw.append(np.concatenate([np.asarray(s.obs) for s in state.groups]))
    assert compared > 80 and int(state.stats.completed.sum()) >= N
    everything = np.concatenate(raw)
    assert float(state.obs_norm.count) == everything.shape[0]
    np.testing.assert_allclose(state.obs_norm.mean, everything.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_group_runner_steps_each_group_on_its_own_model():
    r = MultiEnvRunner.from_groups(GROUPS, impl="c", seed=2)
    assert r.impl == "c" and r.num_groups == 2
    natives = Natives([m for m, (_, n) in zip(r.mj_models, GROUPS, strict=True) for _ in range(n)])
    starts = np.concatenate([exact(r.data_of(g)) for g in range(2)])
    natives.sync(starts, range(N))
    for t in range(20):
        u = np.full((N, 1), np.sin(0.3 * t), np.float32)
        r.set_actions(u)
        r.step()
        natives.step(u, 1)
    got = np.concatenate([exact(r.data_of(g)) for g in range(2)])
    np.testing.assert_array_equal(got, natives.states())


# --- the kit through the env ---------------------------------------------------------------


@pytest.fixture(scope="module")
def puck():
    """test_locomotion's puck on a terrain with every term of the kit (latency,
    pushes, noise and history, commands, a curriculum over the terrain's levels), on
    impl "c", with its masses and the puck's friction drawn per world on every
    restart and every 5 steps."""
    import test_locomotion as loco

    m = loco.build_scene()
    puck_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "puck")
    terms = [
        Term("body_mass", 0.5, 2.0),
        Term("geom_friction", 0.2, 2.0, index=(puck_geom, 0)),
        Term("dof_damping", 0.5, 1.5),
    ]
    env = E.make(loco.PUCK, N, autoreset="same_step", impl="c", **loco.EVENTS)
    return loco, env.with_randomization(terms, every_n_steps=5)


def test_every_kit_term_reaches_mujocos_step(puck):
    """Through 45 steps of the env: the physics of every world equals native
    ``mj_step`` of that world's own drawn masses, friction and damping, fed the
    delayed commands, bit for bit, except in steps where the world is pushed (there
    its velocity jumps by a kick within the pushes' range) or restarts."""
    loco, env = puck
    paths = ("body_mass", "geom_friction", "dof_damping")
    natives = Natives([env.host.mj_model] * N)
    state = E.jit_reset(env, jax.random.key(1))
    natives.sync(effective(env.model.tree, state.runner.data), range(N))
    delay = np.asarray(state.runner.latency.delay)
    start_ctrl = np.asarray(state.runner.data.ctrl).copy()
    states, compared, pushes, masses = [state], 0, 0, set()
    for t in range(45):
        natives.set_fields([state.model.tree] * N, paths)  # what this step runs on
        state = E.jit_step(env, state, loco.ACTIONS[t])
        states.append(state)
        ctrl = np.asarray(state.runner.data.ctrl)
        natives.step(ctrl, loco.PUCK.substeps)
        pushed = np.asarray(state.runner.pushes.pushed)
        fresh = np.asarray(state.episode_length) == 0
        for i in np.flatnonzero(pushed & ~fresh):  # along x only, by at most 0.3 m/s
            kick = effective(env.model.tree, state.runner.data)[i] - natives.states()[i]
            dvx = kick[1 + 3]  # time, qpos (3), then qvel: x, y, z
            assert 0 < abs(dvx) <= 0.3 + 0.05, (t, i, dvx)
            pushes += 1
        compared += follow(natives, env.model.tree, state, skip=pushed)
        if t < loco.STEPS - 1:  # before any restart: the commands arrive delay steps late
            for i in range(N):
                k = t - delay[i]
                want = loco.ACTIONS[k][i] if k >= 0 else start_ctrl[i]
                np.testing.assert_array_equal(ctrl[i], want)
        masses |= {tuple(np.asarray(state.model.tree.body_mass)[i]) for i in range(N)}
    assert compared > 100 and pushes >= N and len(set(delay.tolist())) > 1
    assert len(masses) > 3 * N  # drawn per world, at restarts and every 5 steps
    # the curriculum moved worlds over the terrain's levels at their restarts
    levels = np.stack([np.asarray(s.curriculum.level) for s in states])
    assert (levels != levels[0]).any() and np.asarray(state.stats.completed).min() >= 2
    # noise and history: the newest entry is the noisy velocity, the older ones the
    # last steps' (a world that restarts holds its new episode only)
    for prev, now in itertools.pairwise(states):
        v, v_prev = np.asarray(now.obs["velocity"]), np.asarray(prev.obs["velocity"])
        kept = np.asarray(now.episode_length) > 0
        # Within float32 rounding: XLA may compute a noisy value once for the history
        # and again, fused, for the observation, and two fusions can round differently.
        np.testing.assert_allclose(v[kept, :-2], v_prev[kept, 2:], rtol=1e-6, atol=1e-7)
        restarted = ~kept
        np.testing.assert_array_equal(v[restarted, :2], v[restarted, -2:])
    noise = np.concatenate(
        [
            np.asarray(s.obs["velocity"])[:, -2:] - np.asarray(s.runner.data.qvel)[:, :2]
            for s in states
        ]
    )
    assert 0.04 < noise.std() < 0.06  # the term's std, 0.05


def test_the_curriculum_moves_levels_by_the_rule_on_c(puck):
    """test_locomotion's rule, on impl "c": walked past half a tile, up a level;
    stood still under a command, down; mid-episode, kept; no command, stays; the
    restarted pucks start on their new tiles and land on the heightfield."""
    loco, env = puck
    first = E.jit_reset(env, jax.random.key(1))
    level = np.array([1, 1, 2, 0])
    qpos = np.array([[loco.UP + 0.2, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    command = np.array([[0.5, 0], [0.5, 0], [0.5, 0], [0, 0]])
    state = loco.ending(loco.with_places(first, level, qpos, command), [0, 1, 3])
    after = E.jit_step(env, state, np.zeros((N, 2)))
    np.testing.assert_array_equal(after.final_mask, [True, True, False, True])
    np.testing.assert_array_equal(after.curriculum.level, [2, 0, 2, 0])
    loco.check_spawned(after, [0, 1, 3])
    for _ in range(15):
        after = E.jit_step(env, after, np.zeros((N, 2)))
    heights = loco.TILES.surface_height(np.asarray(after.runner.data.qpos)[:, :2])
    np.testing.assert_allclose(np.asarray(after.runner.data.qpos)[:, 2], heights, atol=5e-3)
    assert np.asarray(after.runner.data._impl.ncon).sum() > 0  # MuJoCo's contacts


# --- restart slots, reset pools, normalization, checkpoints --------------------------------


def env_actions(t: int) -> np.ndarray:
    u = 0.9 * np.sin(0.5 * t + np.arange(N))[:, None].astype(np.float32)
    if t == 9:
        u[1] = np.nan  # the non-finite-action guard: world 1 truncated and restarted
    return u


@pytest.fixture(scope="module")
def c_envs():
    plain = E.make(TASK, N, autoreset="same_step", impl="c", normalize_obs=True)
    mass = np.asarray(plain.model.tree.body_mass) * np.linspace(0.5, 2.0, N)[:, None]
    varied = plain.with_param("body_mass", mass.astype(np.float32))  # per world
    varied = varied.with_randomization([Term("dof_damping", 0.5, 2.0)], every_n_steps=4)
    pooled = E.make(TASK, N, autoreset="same_step", impl="c", reset_pool=6, restart_slots=1)
    return {"varied": varied, "pooled": pooled}


def run_env(env, steps: int, key: int = 3) -> list:
    states = [E.jit_reset(env, jax.random.key(key))]
    for t in range(steps):
        states.append(E.jit_step(env, states[-1], env_actions(t)))
    return states


def assert_bit_identical(a, b) -> None:
    """Every leaf equal bit for bit (a loaded model steps on a host of its own, so
    the models' static parts differ: leaves are compared, not structures)."""
    for (path, x), y in zip(
        jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True
    ):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), jax.tree_util.keystr(path)


def test_restart_slots_and_a_reset_pool_follow_native_physics(c_envs):
    """A reset pool with one restart slot: every world restarts from one of the
    pool's starts, three at once at the time limit in three passes, the same as with
    every world in one pass; between restarts the physics is native ``mj_step``."""
    pooled = c_envs["pooled"]
    assert pooled.pool_size == 6 and pooled.restart_slots == 1
    pool = effective(pooled.model.tree, pooled.pool)
    pool_qpos = np.asarray(pooled.pool.qpos)
    natives = Natives([pooled.host.mj_model] * N)
    states = run_env(pooled, 30)
    natives.sync(effective(pooled.model.tree, states[0].runner.data), range(N))
    compared = restarts = 0
    for t, state in enumerate(states[1:]):
        natives.step(np.asarray(state.runner.data.ctrl), TASK.substeps)
        compared += follow(natives, pooled.model.tree, state)
        fresh = np.flatnonzero(np.asarray(state.episode_length) == 0)
        for i in fresh:  # a start of the pool, exact state included
            row = [j for j in range(6) if np.array_equal(state.runner.data.qpos[i], pool_qpos[j])]
            assert row, (t, i)
            got = effective(pooled.model.tree, state.runner.data)[i]
            assert any(np.array_equal(got, pool[j]) for j in row)
        restarts += len(fresh)
    assert restarts >= N and compared > 90
    # the time limit: three at once (world 1 restarted after its NaN action)
    np.testing.assert_array_equal(states[25].final_mask, [True, False, True, True])
    one_pass = pooled.replace(restart_slots=N)
    assert_bit_identical(run_env(one_pass, 30)[-1], states[-1])


@pytest.mark.parametrize("which", ["varied", "pooled"])
def test_env_checkpoint_continues_bit_for_bit(c_envs, which, tmp_path):
    """Saved mid-run and loaded, an env on impl "c" continues its run bit for bit
    (the exact float64 states included), through the guard's and the time limit's
    restarts, with per-world masses, redrawn damping and observation statistics
    (``varied``), or a reset pool drawn a restart slot at a time (``pooled``)."""
    env = c_envs[which]
    states = run_env(env, 7)
    E.save(tmp_path / "env.ckpt", env, states[-1])
    loaded, again = E.load(tmp_path / "env.ckpt", task=TASK)
    assert loaded.impl == "c" and loaded.pool_size == env.pool_size
    assert_bit_identical((env.model, env.pool, states[-1]), (loaded.model, loaded.pool, again))
    a = states[-1]
    for t in range(7, 30):  # the NaN at 9, the time limit at 25
        a = E.jit_step(env, a, env_actions(t))
        again = E.jit_step(loaded, again, env_actions(t))
    assert int(a.stats.completed.sum()) >= N
    np.testing.assert_array_equal(exact(again.runner.data), exact(a.runner.data))
    assert_bit_identical(again, a)
    if which == "varied":
        assert again.model.tree.dof_damping.shape == (N, 2)  # redrawn per world
        assert len({tuple(x) for x in np.asarray(again.model.tree.body_mass)}) == N


def test_normalized_observations_follow_their_statistics(c_envs):
    """``normalize_obs`` on impl "c": the statistics hold every observation returned
    (one per world and step), and each is scaled by them."""
    env = c_envs["varied"]
    states = run_env(env, 12)
    observe = jax.vmap(TASK.observation, in_axes=(None, 0))
    raw = [np.asarray(observe(None, s.runner.data)) for s in states]
    everything = np.concatenate(raw)
    norm = states[-1].obs_norm
    assert float(norm.count) == everything.shape[0]
    np.testing.assert_allclose(norm.mean, everything.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.var, everything.var(axis=0), rtol=1e-3, atol=1e-6)
    scaled = (raw[-1] - norm.mean) / np.sqrt(norm.var + 1e-8)
    np.testing.assert_allclose(states[-1].obs, scaled, rtol=1e-3, atol=1e-4)


# --- pixels ---------------------------------------------------------------------------------


def test_a_pixel_task_on_c_is_refused_naming_impl_warp():
    """MJX renders pixel observations with MuJoCo Warp only: every way of making a
    pixel task on impl "c" refuses it, naming both impls, before any work."""

    pixel = "cartpole_balance_pixels"
    makers = [
        lambda: E.make(pixel, 2, impl="c"),
        lambda: E.make(pixel, 2, impl="cpp"),
        lambda: E.make(pixel, 2, impl="c", groups=[("cartpole", 1), ("cartpole", 1)]),
        lambda: MjxVectorEnv(pixel, 2, impl="c"),
        lambda: TorchVecEnv(pixel, 2, impl="c"),
        lambda: BraxEnv(pixel, impl="c"),
        lambda: gymnasium.make_vec(
            "mjxrunner/CartpoleBalancePixels-v0",
            num_envs=2,
            vectorization_mode="vector_entry_point",
            impl="c",
        ),
    ]
    for make in makers:
        with pytest.raises(ValueError, match=r"observes pixels.*impl 'c'.*impl='warp'"):
            make()


# --- bad input ------------------------------------------------------------------------------


def refusal(call):
    """``(type, message)`` of the ValueError/TypeError ``call`` raises (None if none)."""
    try:
        call()
    except (ValueError, TypeError) as e:
        return type(e), str(e)
    return None


def test_the_runner_on_c_refuses_bad_input_as_on_jax(slider3):
    """Each bad call is refused on impl "c" with the error impl "jax" gives, naming
    its argument, and leaves every buffer of the runner as it was."""

    runners = {impl: MultiEnvRunner(slider3, N, impl=impl, seed=1) for impl in ("c", "jax")}
    r = runners["c"]
    r.set_actions(np.full((N, 3), 0.2, np.float32))
    r.step()  # a state of its own to keep
    nu = 3
    bad = [
        ("actions", lambda r: r.set_actions(np.zeros((N, 2), np.float32))),
        ("actions", lambda r: r.set_actions(np.zeros((N, nu), bool))),
        ("actions", lambda r: r.set_actions(np.zeros((N, nu), np.complex64))),
        ("actions", lambda r: r.set_actions(np.full((N, nu), np.nan, np.float32))),
        ("actions", lambda r: r.set_actions(np.full((N, nu), np.inf))),
        ("actions", lambda r: r.set_actions("fast")),
        ("env_ids", lambda r: r.set_actions(np.zeros((2, nu)), env_ids=[0, 0])),
        ("env_ids", lambda r: r.set_actions(np.zeros((1, nu)), env_ids=[N])),
        ("mask", lambda r: r.reset(np.ones(N, int))),
        ("mask", lambda r: r.reset(np.ones(N + 2, bool))),
        ("mask", lambda r: r.reset(np.ones((N, 1), bool))),
        ("env_ids", lambda r: r.reset_envs([N])),
        ("env_ids", lambda r: r.reset_envs([-1])),
        ("env_ids", lambda r: r.reset_envs([0.5])),
        ("env_ids", lambda r: r.reset_envs(True)),
        ("dt", lambda r: r.step(dt=-0.01)),
        ("dt", lambda r: r.step(dt=np.nan)),
        ("substeps", lambda r: r.step(substeps=0)),
        ("values", lambda r: r.set_param("body_mass", np.full(4, -1.0))),
        ("values", lambda r: r.set_param("geom_friction", np.zeros((2, 3)))),
        ("env_ids", lambda r: r.set_param("body_mass", np.ones(4), env_ids=[7])),
    ]
    for name, call in bad:
        assert not refused(r, lambda call=call: call(r), name), name
        assert refusal(lambda call=call: call(r)) == refusal(
            lambda call=call: call(runners["jax"])
        ), name
    r.step()  # and it steps on


def test_the_env_and_the_gymnasium_door_on_c_refuse_bad_input(gyms):
    """The functional env's and the Gymnasium door's checks hold on impl "c": bad
    actions, NaN actions, bad reset masks and seeds are refused, nothing changes."""

    v = gyms[AutoresetMode.NEXT_STEP]
    v.reset(seed=1)
    v.step(np.zeros((N, 1), np.float32))
    env, state = v.env, v.state
    before = snapshot(v.state, v.env)
    bad_calls = [
        *test_gym.bad_door_calls(v, N),
        (ValueError, "action must have shape", lambda: E.step(env, state, np.zeros((N, 2)))),
        (TypeError, "real numbers", lambda: E.step(env, state, np.zeros((N, 1), bool))),
        (ValueError, "mask must be bool", lambda: E.reset_worlds(env, state, np.ones(N, int))),
        (ValueError, "mask must be bool", lambda: E.reset_worlds(env, state, np.ones(2, bool))),
        (ValueError, "env_ids", lambda: env.with_param("body_mass", np.ones(3), env_ids=[N])),
        (ValueError, r"impl must be", lambda: E.make(TASK, N, impl="C")),
    ]
    for error, message, call in bad_calls:
        with pytest.raises(error, match=message):
            call()
        assert_same(before, snapshot(v.state, v.env))
