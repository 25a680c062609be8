"""The trainer front doors: torch tensors over DLPack (TorchVecEnv), rsl_rl's VecEnv,
skrl's own wrapper around TorchVecEnv, and Brax's Env interface (BraxEnv).

Each door must give the numbers of the functional env (same seed, same actions), move
no data where DLPack allows it, refuse bad input without changing the state, and
compile nothing after warm-up. Trainers actually learning through them is
test_trainers.py.

Every door runs on impl "c" (MuJoCo's C engine: the physics does not compile, and it
is not what these tests are about).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from rsl_rl.env import VecEnv
from skrl.envs.wrappers.torch import wrap_env
from tensordict import TensorDict

from mjxrunner import CompileCounter, tasks
from mjxrunner.doors.brax import BraxEnv
from mjxrunner.doors.rsl_rl import RslRlVecEnv
from mjxrunner.doors.torch import TorchVecEnv, to_jax, to_torch
from mjxrunner.engine import guards
from mjxrunner.rl import env as E

N = 8
STEPS = 30
TASK = tasks.get("cartpole_balance").replace(max_episode_steps=12)  # ends within 30 steps
IMPL = "c"  # the doors, not the physics: see the module docstring


def same_floats(ours, theirs) -> None:
    """The door's packed step is another XLA program than the functional env's
    ``jit_step``: it agrees to float32 rounding (XLA keeps no bitwise promise across
    programs; restarts fuse differently in each)."""
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def actions(t: int) -> np.ndarray:
    u = 0.8 * np.sin(0.4 * t + np.arange(N))
    return u[:, None].astype(np.float32)


@pytest.fixture(scope="module")
def reference():
    """Host states of the functional env in same-step mode: reset, then each step."""
    env = E.make(TASK, N, autoreset="same_step", impl=IMPL)
    s = E.jit_reset(env, jax.random.key(3))
    out = [jax.device_get(s)]
    for t in range(STEPS):
        s = E.jit_step(env, s, actions(t))
        out.append(jax.device_get(s))
    return out


@pytest.fixture(scope="module")
def door():
    return TorchVecEnv(TASK, N, seed=3, impl=IMPL)


def state_leaves(door):
    return [np.asarray(x) for x in jax.tree.leaves(door.state)]


def test_tensors_match_the_functional_env(door, reference):
    obs, info = door.reset(seed=3)
    assert info == {} and set(obs) == {"policy"}
    np.testing.assert_array_equal(obs["policy"].numpy(), reference[0].obs)
    ended = 0
    for t in range(STEPS):
        obs, reward, terminated, truncated, extras = door.step(torch.from_numpy(actions(t)))
        ref = reference[t + 1]
        same_floats(obs["policy"].numpy(), ref.obs)
        same_floats(reward.numpy(), ref.reward)
        np.testing.assert_array_equal(terminated.numpy(), ref.terminated)
        np.testing.assert_array_equal(truncated.numpy(), ref.truncated)
        np.testing.assert_array_equal(extras["time_outs"].numpy(), ref.truncated)
        same_floats(extras["final_obs"].numpy(), ref.final_obs)
        np.testing.assert_array_equal(extras["final_mask"].numpy(), ref.final_mask)
        assert reward.dtype == torch.float32 and terminated.dtype == torch.bool
        ended += int(ref.final_mask.sum())
    assert ended > 0  # same-step restarts happened and matched


def test_no_copies_between_jax_and_torch(door):
    door.reset(seed=0)
    action = torch.zeros(N, 1)
    assert to_jax(action).unsafe_buffer_pointer() == action.data_ptr()  # and back
    x = jnp.arange(6.0)
    assert to_torch(x).data_ptr() == x.unsafe_buffer_pointer()
    # after a step: views into the two buffers the compiled step packs
    stepped, reward, terminated, truncated, extras = door.step(torch.zeros(N, 1))
    floats, flags, _ = door._packed
    assert stepped["policy"].data_ptr() == floats.unsafe_buffer_pointer()
    assert stepped["policy"].is_contiguous() and reward.is_contiguous()
    assert terminated.data_ptr() == flags.unsafe_buffer_pointer()
    assert extras["time_outs"] is truncated
    # a later step makes new arrays: an earlier tensor keeps its values
    before = stepped["policy"].clone()
    for t in range(5):
        door.step(torch.from_numpy(actions(t)))
    torch.testing.assert_close(stepped["policy"], before, rtol=0, atol=0)


def bad_actions(n: int) -> list[tuple]:
    """``(actions, error, message)`` a torch door of ``n`` worlds and one control
    refuses, each changing nothing."""
    return [
        (np.zeros((n, 1), np.float32), TypeError, "torch.Tensor"),
        (torch.zeros(n, 2), ValueError, rf"shape \({n}, 1\)"),
        (torch.zeros(n), ValueError, "shape"),
        (torch.zeros(n, 1, dtype=torch.bool), TypeError, "real numbers"),
        (torch.zeros(n, 1, dtype=torch.complex64), TypeError, "real numbers"),
        (torch.zeros(n, 1, device="meta"), ValueError, "must be on cpu"),
    ]


def test_bad_actions_are_refused_and_change_nothing(door):
    door.reset(seed=0)
    before = state_leaves(door)
    for value, error, message in bad_actions(N):
        with pytest.raises(error, match=message):
            door.step(value)
    for x, y in zip(before, state_leaves(door), strict=True):
        np.testing.assert_array_equal(x, y)
    door.step(torch.zeros(N, 1, dtype=torch.float64))  # converted, not refused
    with pytest.raises(ValueError, match="same step"):
        TorchVecEnv(TASK, N, autoreset="next_step", impl=IMPL)
    with pytest.raises(ValueError, match="one device"):
        TorchVecEnv(TASK, N, devices=2, impl=IMPL)
    with pytest.raises(RuntimeError, match="reset"):
        TorchVecEnv(TASK, N, impl=IMPL).step(torch.zeros(N, 1))


def test_writes_into_handed_out_tensors_never_reach_the_state(door):
    rsl = RslRlVecEnv(door)
    obs, _ = door.reset(seed=0)
    obs["policy"][:] = 7.0  # the observation reset returned was the state's own array
    assert not (np.asarray(door.state.obs) == 7.0).any()
    rsl.episode_length_buf[:] = -5  # a copy: never in env.state, never skipping checks
    np.testing.assert_array_equal(door.state.episode_length, 0)
    with pytest.raises(ValueError, match=r"\[0, 12\]"):
        rsl.step(torch.zeros(N, 1))  # the write is checked before the step, and refused
    np.testing.assert_array_equal(door.state.episode_length, 0)
    for t in (1, 2):
        door.step(torch.zeros(N, 1))
        np.testing.assert_array_equal(door.state.episode_length, t)
    with pytest.raises(ValueError, match=r"\[0, 12\]"):
        rsl.episode_length_buf += 10**6  # refused: and nothing of it stays
    np.testing.assert_array_equal(door.state.episode_length, 2)
    rsl.episode_length_buf += 3  # assigned, checked, and stepped from
    door.step(torch.zeros(N, 1))
    np.testing.assert_array_equal(door.state.episode_length, 6)
    rsl.episode_length_buf[1:3] = 0  # written into: reaches the env, checked, at the step
    rsl.step(torch.zeros(N, 1))
    np.testing.assert_array_equal(door.state.episode_length, [7, 1, 1] + [7] * (N - 3))


def test_episode_lengths_can_be_set_and_bring_time_limits_forward(door):
    door.reset(seed=0)
    lengths = torch.arange(N, dtype=torch.int32) % TASK.max_episode_steps
    door.set_episode_length(lengths)
    np.testing.assert_array_equal(door.episode_length.numpy(), lengths.numpy())
    lengths[0] = TASK.max_episode_steps - 1
    door.set_episode_length(lengths)
    *_, truncated, _ = door.step(torch.zeros(N, 1))
    assert truncated[0] and not truncated[1:].any()  # world 0 hit the limit at once
    for bad, message in [(torch.full((N,), -1), r"\[0, 12\]"), (torch.zeros(3), "shape")]:
        with pytest.raises(ValueError, match=message):
            door.set_episode_length(bad)
    with pytest.raises(ValueError, match="whole numbers"):
        door.set_episode_length(np.full(N, 0.5))


def test_no_compiles_after_warm_up(door):
    def loop():
        for t in range(5):
            door.step(torch.from_numpy(actions(t)))
        door.reset(seed=1)  # after steps: it reads the packed state (unpacked once)
        door.set_episode_length(torch.zeros(N, dtype=torch.int32))
        door.step(torch.zeros(N, 1))

    door.reset(seed=0)
    loop()  # the warm-up runs what is counted once, whichever tests ran before
    with CompileCounter() as compiles:
        loop()
    assert compiles.count == 0


def test_doors_share_one_compiled_step():
    """The Gymnasium and torch doors of one task and size step the same packed
    buffers with the same outputs: one executable between them (on impl "c", envs
    of one model share its host model)."""
    from mjxrunner.doors.gym import MjxVectorEnv

    door = TorchVecEnv(TASK, N, impl=IMPL)
    door.reset(seed=0)
    door.step(torch.zeros(N, 1))  # compiled here
    gym = MjxVectorEnv(TASK, N, autoreset_mode="SameStep", seed=0, impl=IMPL)
    with CompileCounter() as compiles:
        gym.reset(seed=0)  # the reset and the packing of its state are compiled here
        before = compiles.count
        gym.step(np.zeros((N, 1), np.float32))
    assert compiles.count == before


def test_the_door_donates_only_its_own_buffers(door):
    """The step updates the door's packed state in place; states handed out or
    given to the door are arrays of their own and survive later steps."""
    door.reset(seed=0)
    given = door.state  # after a reset: the reset's own arrays, packed into copies
    door.step(torch.zeros(N, 1))
    held = door.state  # unpacked from the buffers
    snapshot = [np.asarray(x).copy() for x in jax.tree.leaves(held)]
    buffers = door._door._held.buffers
    for t in range(3):
        door.step(torch.from_numpy(actions(t)))
    assert all(b.is_deleted() for b in buffers)  # donated to the steps
    for x, y in zip(snapshot, jax.tree.leaves(held), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not any(x.is_deleted() for x in jax.tree.leaves(given))


def cart_off_centre(data):
    return jnp.abs(data.qpos[:, 0]) > 0.06


def test_a_raise_guard_keeps_the_state_of_before_the_step():
    """With a ``"raise"`` guard nothing is donated: the failed step leaves the
    state of before it."""
    far = guards.Guard("far", detect=cart_off_centre, policy="raise")
    door = TorchVecEnv(TASK, N, guards=[far], impl=IMPL)
    door.reset(seed=0)
    stepped = 0
    with pytest.raises(guards.GuardError, match="far"):
        for _ in range(TASK.max_episode_steps):
            before = state_leaves(door)
            door.step(torch.ones(N, 1))
            stepped += 1
    assert 1 <= stepped < TASK.max_episode_steps
    for x, y in zip(before, state_leaves(door), strict=True):
        np.testing.assert_array_equal(x, y)
    assert door.episode_length.numpy().max() == stepped


def test_rsl_rl_vec_env_interface(reference):
    vec = RslRlVecEnv(TASK, N, seed=3, impl=IMPL)
    assert isinstance(vec, VecEnv)
    assert (vec.num_envs, vec.num_actions, vec.max_episode_length) == (N, 1, 12)
    assert vec.device == torch.device("cpu") and vec.cfg["task"] == TASK.name
    obs = vec.get_observations()
    assert isinstance(obs, TensorDict) and obs.batch_size == torch.Size([N])
    np.testing.assert_array_equal(obs["policy"].numpy(), reference[0].obs)
    # what OnPolicyRunner.learn(init_at_random_ep_len=True) does
    vec.episode_length_buf = torch.randint_like(vec.episode_length_buf, high=12)
    vec.env.reset(seed=3)
    for t in range(STEPS):
        obs, _, dones, extras = vec.step(torch.from_numpy(actions(t)))
        ref = reference[t + 1]
        same_floats(obs["policy"].numpy(), ref.obs)
        np.testing.assert_array_equal(dones.numpy(), ref.done.astype(np.int64))
        np.testing.assert_array_equal(extras["time_outs"].numpy(), ref.truncated)
        assert dones.dtype == torch.long
    with pytest.raises(ValueError, match="num_envs"):
        RslRlVecEnv(TASK)


def test_skrl_wraps_the_torch_door_with_its_own_wrapper(reference):
    door = TorchVecEnv(TASK, N, impl=IMPL)
    env = wrap_env(door, wrapper="isaaclab", verbose=False)
    assert env.num_envs == N and env.device == torch.device("cpu")
    assert env.observation_space.shape == (5,) and env.action_space.shape == (1,)
    assert env.state_space is None
    obs, _ = env.reset()  # skrl resets once, with a seed of its own
    assert obs.shape == (N, 5)
    door.reset(seed=3)  # the reference's starts
    for t in range(STEPS):
        obs, reward, terminated, truncated, _ = env.step(torch.from_numpy(actions(t)))
        ref = reference[t + 1]
        same_floats(obs.numpy(), ref.obs)
        same_floats(reward.numpy(), ref.reward[:, None])
        np.testing.assert_array_equal(terminated.numpy(), ref.terminated[:, None])
        np.testing.assert_array_equal(truncated.numpy(), ref.truncated[:, None])


def test_brax_env_steps_like_the_functional_env_with_brax_bookkeeping(reference):
    env = BraxEnv(TASK, impl=IMPL)
    assert (env.observation_size, env.action_size, env.backend) == (5, 1, f"mjx-{IMPL}")
    keys = jax.random.key_data(jax.random.split(jax.random.key(3), N))
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    state = reset(keys)
    np.testing.assert_array_equal(state.obs, reference[0].obs)
    for t in range(STEPS):
        state = step(state, jnp.asarray(actions(t)))
        ref = reference[t + 1]
        # another compiled program (Brax's State around the step): XLA may round the
        # last bit differently; everything discrete must agree exactly
        np.testing.assert_allclose(state.obs, ref.obs, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(state.done, ref.done.astype(np.float32))
        np.testing.assert_array_equal(state.info["truncation"], ref.truncated)
        np.testing.assert_array_equal(state.info["episode_done"], ref.done)
        # the episode a step belongs to: its final length where a world restarted
        length = np.where(ref.final_mask, ref.stats.last_length, ref.runner.episode_length)
        np.testing.assert_array_equal(state.info["steps"], length)
        total = np.where(ref.final_mask, ref.stats.last_return, ref.stats.episode_return)
        np.testing.assert_allclose(state.info["episode_metrics"]["sum_reward"], total)
    # Brax's trainer resets through jit(vmap(reset)) over a device axis
    batched = jax.jit(jax.vmap(env.reset))(keys[None])
    np.testing.assert_array_equal(batched.obs[0], reference[0].obs)
    with pytest.raises(ValueError, match="one key per world"):
        env.reset(keys[0])
    with pytest.raises(ValueError, match="splits the batch over devices itself"):
        BraxEnv(TASK, devices=2, impl=IMPL)


def test_brax_env_refuses_what_env_step_refuses():
    env = BraxEnv(TASK, impl=IMPL)
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), 2))
    state = env.reset(keys)
    with pytest.raises(TypeError, match="action must be real numbers, got dtype bool"):
        env.step(state, jnp.ones((2, 1), bool))  # scaled into floats before the check
    with pytest.raises(TypeError, match="action must be an array"):
        env.step(state, None)
    with pytest.raises(TypeError, match="state must be the brax State"):
        env.step(None, jnp.zeros((2, 1)))  # AttributeError
    with pytest.raises(ValueError, match="num_envs="):
        BraxEnv(TASK, num_envs=4, impl=IMPL)  # make() got multiple values for argument 'num_envs'


def test_brax_actions_in_minus_one_one_span_the_ctrlrange():
    pendulum = tasks.get("pendulum_swingup")  # ctrlrange [-2, 2]
    env = BraxEnv(pendulum, impl=IMPL)
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), 2))
    state = env.step(env.reset(keys), jnp.array([[1.0], [-0.5]]))
    np.testing.assert_allclose(state.pipeline_state.runner.ctrl, [[2.0], [-1.0]])
