"""Observation normalization on device (mjxrunner.normalize and the env's use of it).

The statistics must equal NumPy's mean and variance over exactly the observations the
env returned (reset, then one per world per step), in every autoreset mode; obs and
final_obs come back scaled by them; frozen statistics stay; checkpoints and two
devices keep them. A plain env of the same task and seed gives the raw observations:
normalizing changes what the policy sees, never the physics.

The envs run on impl "c" (MuJoCo's C engine: the physics does not compile, and it is
not what these tests are about), but for the env split over two devices, which impl
"c" refuses in one process: it runs on impl "jax" (MJX, float32) and is compared with
the impl "c" env within the tolerances of two programs' rounding (measured: under
1/150 of them).
"""

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mjxrunner import CompileCounter, tasks
from mjxrunner.kit import normalize
from mjxrunner.rl import env as E

N = 4
STEPS = 30
TASK = tasks.get("cartpole_balance").replace(max_episode_steps=12)  # restarts within 30
IMPL = "c"  # the statistics, not the physics: see the module docstring


def actions(t: int) -> np.ndarray:
    u = np.array([1.0, -1.0, 0.5 * np.sin(0.3 * t), 0.0])  # worlds 0, 1 fall
    return u[:, None].astype(np.float32)


@pytest.fixture(scope="module")
def envs():
    plain = E.make(TASK, N, impl=IMPL)
    return plain, plain.with_obs_normalization()


def run(env, mode: str, steps: int = STEPS) -> list:
    env = env.with_autoreset(mode)
    s = E.jit_reset(env, jax.random.key(0))
    out = [jax.device_get(s)]
    for t in range(steps):
        s = E.jit_step(env, s, actions(t))
        out.append(jax.device_get(s))
    return out


def scaled(x: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    return (x - mean) / np.sqrt(var + 1e-8)


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_statistics_follow_every_returned_observation(envs, mode):
    plain, normed = envs
    raw, out = run(plain, mode), run(normed, mode)
    seen = []
    for t, (r, s) in enumerate(zip(raw, out, strict=True)):
        # normalizing never changes the physics, the flags or the rewards
        np.testing.assert_array_equal(r.runner.data.qpos, s.runner.data.qpos)
        np.testing.assert_array_equal(r.reward, s.reward)
        seen.append(r.obs)
        batch = np.concatenate(seen).astype(np.float64)
        norm = s.obs_norm
        assert norm.count == batch.shape[0] == N * (t + 1)
        np.testing.assert_allclose(norm.mean, batch.mean(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(norm.var, batch.var(0), rtol=1e-3, atol=1e-5)
        np.testing.assert_allclose(s.obs, scaled(r.obs, norm.mean, norm.var), atol=1e-4)
        np.testing.assert_allclose(s.final_obs, scaled(r.final_obs, norm.mean, norm.var), atol=1e-4)
    assert any(s.done.any() for s in out)  # episodes did end (and restart) in the run
    if mode == "same_step":
        assert any(s.final_mask.any() for s in out)


@given(
    st.lists(st.integers(1, 7), min_size=1, max_size=5),
    st.floats(-1e3, 1e3),
    st.floats(1e-3, 1e3),
)
def test_update_is_exact_for_any_batching(sizes, shift, spread):
    rng = np.random.default_rng(len(sizes))
    batches = [shift + spread * rng.standard_normal((n, 3)) for n in sizes]
    norm = normalize.init(3, np.float32)
    for b in batches:
        norm = normalize.update(norm, jax.numpy.asarray(b, np.float32))
    every = np.concatenate(batches)
    assert float(norm.count) == every.shape[0]
    # float32 samples: each is off by ~|shift| * 6e-8, which bounds what is exact
    rounding = 1e-6 * (abs(shift) + spread)
    np.testing.assert_allclose(norm.mean, every.mean(0), rtol=1e-4, atol=1e-4 * spread + rounding)
    np.testing.assert_allclose(
        norm.var, every.var(0), rtol=2e-3, atol=1e-3 * spread**2 + spread * rounding
    )


def test_frozen_statistics_stay_and_still_scale(envs):
    _, normed = envs
    s = E.jit_reset(normed, jax.random.key(0))
    for t in range(3):
        s = E.jit_step(normed, s, actions(t))
    frozen = s.replace(obs_norm=s.obs_norm.freeze())
    with CompileCounter() as compiles:
        after = E.jit_step(normed, frozen, actions(3))
    assert compiles.count == 0  # freezing is a value, not a structure
    for name in ("mean", "var", "count"):
        np.testing.assert_array_equal(getattr(after.obs_norm, name), getattr(frozen.obs_norm, name))
    resumed = E.jit_step(normed, after.replace(obs_norm=after.obs_norm.freeze(False)), actions(4))
    assert float(resumed.obs_norm.count) == float(after.obs_norm.count) + N


def test_reset_continues_given_statistics(envs):
    _, normed = envs
    s = E.jit_reset(normed, jax.random.key(0))
    s = E.jit_step(normed, s, actions(0))
    again = E.jit_reset(normed, jax.random.key(1), s.obs_norm)
    assert float(again.obs_norm.count) == 3 * N
    fresh = E.jit_reset(normed, jax.random.key(1))
    assert float(fresh.obs_norm.count) == N


def test_reset_worlds_scales_without_counting(envs):
    _, normed = envs
    env = normed.with_autoreset("disabled")
    s = E.jit_reset(env, jax.random.key(0))
    s = E.jit_step(env, s, actions(0))
    mask = np.array([True, False, False, False])
    r = E.jit_reset_worlds(env, s, mask)
    assert float(r.obs_norm.count) == float(s.obs_norm.count)
    np.testing.assert_array_equal(r.obs[1:], s.obs[1:])
    assert np.abs(r.obs[0]).max() < 50  # scaled like the others (raw x ~ 0, 1/std large)


def test_clip_bounds_the_scaled_observations():
    env = E.make(TASK, N, normalize_obs=True, obs_clip=0.5, impl=IMPL)
    s = E.jit_reset(env, jax.random.key(0))
    for t in range(5):
        s = E.jit_step(env, s, actions(t))
    assert np.abs(np.asarray(s.obs)).max() <= 0.5
    assert np.isclose(np.abs(np.asarray(s.obs)).max(), 0.5)  # the clip is reached


def test_bad_options_are_refused(envs):
    _, normed = envs
    with pytest.raises(ValueError, match="clip"):
        E.make(TASK, N, normalize_obs=True, obs_clip=0.0)
    with pytest.raises(TypeError, match="enabled"):
        normed.with_obs_normalization("yes")
    with pytest.raises(TypeError, match="obs_norm"):
        E.reset(normed, jax.random.key(0), obs_norm={"mean": 0})
    with pytest.raises(ValueError, match="eps"):
        normed.with_obs_normalization(eps=-1.0)


def test_checkpoint_keeps_the_statistics(envs, tmp_path):
    _, normed = envs
    s = E.jit_reset(normed, jax.random.key(0))
    for t in range(4):
        s = E.jit_step(normed, s, actions(t))
    E.save(tmp_path / "n.ckpt", normed, s)
    env2, s2 = E.load(tmp_path / "n.ckpt", task=TASK)
    assert env2.normalize == normed.normalize
    for name in ("mean", "var", "count", "frozen"):
        np.testing.assert_array_equal(getattr(s2.obs_norm, name), getattr(s.obs_norm, name))
    a, b = E.jit_step(normed, s, actions(4)), E.jit_step(env2, s2, actions(4))
    np.testing.assert_array_equal(a.obs, b.obs)


def test_two_devices_hold_the_statistics_of_all_worlds(envs):
    _, normed = envs
    split = E.make(TASK, N, impl="jax").with_obs_normalization().shard(2)
    one, two = run(normed, "same_step", 6), run(split, "same_step", 6)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(b.obs_norm.mean, a.obs_norm.mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.obs_norm.var, a.obs_norm.var, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(b.obs, a.obs, atol=1e-4)
