"""Runs with ``jax_enable_x64`` on, in its own process (test_x64.py starts it): the
flag is global, and the suite's other modules run in float32.

Usage: ``python x64_script.py OUT_DIR``. Asserts as it goes and prints one line of
figures per check.
"""

import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from test_parity import N_WORLDS, step_both  # noqa: E402

from mjxrunner import MultiEnvRunner, tasks  # noqa: E402
from mjxrunner.engine import models  # noqa: E402
from mjxrunner.engine.params import Term  # noqa: E402
from mjxrunner.rl import env  # noqa: E402

# Worst |qpos - native| / |qvel - native| over 200 steps, measured here in float64
# (float32, test_parity.py: hopper 2.2e-4 / 8.1e-3, and the ant leaves native
# altogether after ~120 steps):
# * hopper, the scene's own solver settings: 3.1e-13 / 6.6e-12. Bound 1e-9.
# * ant: with the scene's settings (4 Newton iterations, tolerance 1e-8) 1.5e-6 /
#   5e-5 within 40 steps of landing, because MJX's line search is not native's and
#   a solve that stops early stops at a different point (cf. Warp in
#   test_parity.py). With the solve converged (settings below) 6.9e-8 / 7.8e-7.
#   Bound 1e-6.
# Each bound leaves a margin of >= 10x, and qvel gets 10x the qpos bound.
X64_ATOL = {"hopper": 1e-9, "ant": 1e-6}
CONVERGED = {"ant": {"iterations": 100, "tolerance": 1e-15, "ls_tolerance": 1e-6}}
N_STEPS = 200


def native_parity(name: str) -> None:
    m = models.load(name)
    m.key_qpos[0, -1] += 0.1  # off the equilibrium, as in test_parity.py
    for option, value in CONVERGED.get(name, {}).items():
        setattr(m.opt, option, value)
    atol = X64_ATOL[name]
    runner = MultiEnvRunner(m, N_WORLDS, keyframe=0)
    assert runner.data.qpos.dtype == np.float64 and runner.data.ctrl.dtype == np.float64
    native = [mujoco.MjData(m) for _ in range(N_WORLDS)]
    for d in native:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    worst_qpos = worst_qvel = 0.0
    contacts = 0
    for t in range(N_STEPS):
        step_both(runner, native, m, t)
        contacts = max(contacts, max(d.ncon for d in native))
        qpos = np.stack([d.qpos for d in native])
        qvel = np.stack([d.qvel for d in native])
        worst_qpos = max(worst_qpos, np.abs(np.asarray(runner.data.qpos) - qpos).max())
        worst_qvel = max(worst_qvel, np.abs(np.asarray(runner.data.qvel) - qvel).max())
        assert worst_qpos < atol and worst_qvel < 10 * atol, (name, t, worst_qpos)
    assert contacts > 0, f"{name}: no contact in {N_STEPS} steps"
    assert np.abs(qpos[0] - qpos[1]).max() > 1e-2  # the worlds took different paths
    print(f"{name}: worst |qpos err| {worst_qpos:.1e}, |qvel err| {worst_qvel:.1e}")


def runner_features(out: Path) -> None:
    """Masked resets, a checkpoint round trip, and the same on two devices. The
    single-device runners share the parity hopper's compiled step (randomization,
    which would need another, is exercised by the env below)."""

    def drive(r: MultiEnvRunner) -> None:
        r.set_actions(np.linspace(-1, 1, 4)[:, None] * np.ones((1, r.action_dim())))
        for _ in range(10):
            r.step()
        r.reset_envs([1, 2])
        r.step()

    runner, sharded = (
        MultiEnvRunner("hopper", 4, seed=3),
        MultiEnvRunner("hopper", 4, seed=3, devices=2),
    )
    for r in (runner, sharded):
        drive(r)
    assert runner.param("opt.gravity").dtype == np.float64
    assert sharded.data.qpos.dtype == np.float64
    np.testing.assert_allclose(
        sharded.to_numpy(sharded.data.qpos), np.asarray(runner.data.qpos), atol=1e-12
    )
    runner.save(out / "runner.npz")
    loaded = MultiEnvRunner.load(out / "runner.npz")
    assert loaded.data.qpos.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(loaded.data.qpos), np.asarray(runner.data.qpos))
    for r in (runner, loaded):
        r.set_actions(np.full((4, r.action_dim()), -0.2))
        r.step()
    np.testing.assert_array_equal(np.asarray(loaded.data.qpos), np.asarray(runner.data.qpos))
    print("runner: reset_envs, checkpoint and 2 devices in float64")


def env_features(out: Path) -> None:
    """The functional env with autoreset, randomization and a checkpoint, on the
    cartpole: contacts in float64 are the parity runs' above, and the hopper's env
    would compile for ~40 s more."""
    task = tasks.get("cartpole_balance").replace(max_episode_steps=12)
    e = env.make(task, 4).with_randomization([Term("dof_damping", 0.8, 1.2)])
    state = env.jit_reset(e, jax.random.key(0))
    assert state.obs.dtype == np.float64 and state.reward.dtype == np.float64
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(40):  # the time limit ends every episode at least twice
        state = env.jit_step(e, state, rng.uniform(-1, 1, (4, e.action_size)))
        ended += int(np.asarray(state.runner.terminated | state.runner.truncated).sum())
    assert ended >= 8 and np.isfinite(np.asarray(state.obs)).all()
    env.save(out / "env.npz", e, state)
    e2, state2 = env.load(out / "env.npz")
    action = np.full((4, e.action_size), 0.1)
    a, b = env.jit_step(e, state, action), env.jit_step(e2, state2, action)
    np.testing.assert_array_equal(np.asarray(a.obs), np.asarray(b.obs))
    print(f"env: {ended} episode ends in 40 steps, checkpoint round trip in float64")


def native_c(name: str) -> None:
    """Impl "c" in float64: the fields tasks read are the native step's, unrounded,
    and the exact state equals native ``mj_step``'s bit for bit."""
    m = models.load(name)
    runner = MultiEnvRunner(m, N_WORLDS, impl="c")
    assert runner.data.qpos.dtype == np.float64
    native = [mujoco.MjData(m) for _ in range(N_WORLDS)]
    for d in native:
        mujoco.mj_forward(m, d)
    rng = np.random.default_rng(0)
    for _ in range(100):
        u = rng.uniform(-1, 1, (N_WORLDS, m.nu))
        runner.set_actions(u)
        runner.step()
        for d, ui in zip(native, u, strict=True):
            d.ctrl[:] = ui
            mujoco.mj_step(m, d)
    np.testing.assert_array_equal(np.asarray(runner.data.qpos), np.stack([d.qpos for d in native]))
    np.testing.assert_array_equal(np.asarray(runner.data.cvel), np.stack([d.cvel for d in native]))
    e = env.make("hopper_hop", 4, impl="c")
    state = env.jit_reset(e, jax.random.key(0))
    state = env.jit_step(e, state, np.zeros((4, e.action_size)))
    assert state.obs.dtype == np.float64
    print(f"impl c, {name}: 100 steps equal to native in float64")


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for name in ("hopper", "ant"):
        native_parity(name)
    native_c("ant")  # the C path is one for every scene; the ant has the most contacts
    runner_features(out)
    env_features(out)
    print("x64: all passed")
