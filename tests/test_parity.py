"""impl "jax" against native MuJoCo (float64) on the models in models/.

Tolerance: MJX runs in float32 here (``jax_enable_x64`` off), whose relative precision
is ~6e-8; over 250 Euler steps of these smooth, contact-free systems the rounding
difference grows to ~1e-4 (measured: 1.3e-4 cartpole, 2.4e-7 pendulum). ``ATOL = 1e-3``
leaves a margin of ~8x yet fails on any real mismatch (a wrong timestep, control or
world mixing moves qpos by > 1e-2).
"""

import mujoco
import numpy as np
import pytest

from mjxrunner import MultiEnvRunner, models

ATOL = 1e-3
N_STEPS = 250
N_WORLDS = 4


def controls(nu, t):
    """A different smooth control per world: ``(N_WORLDS, nu)`` at step ``t``."""
    w = np.arange(N_WORLDS)[:, None]
    return 0.9 * np.sin(0.05 * t * (w + 1) + np.arange(nu)[None, :] + w)


@pytest.mark.parametrize("name", ["cartpole", "pendulum"])
def test_runner_matches_native_mujoco(name):
    m = models.load(name)
    m.key_qpos[0, -1] += 0.1  # start off the equilibrium, so the dynamics are exercised
    runner = MultiEnvRunner(m, N_WORLDS, keyframe=0)
    native = []
    for _ in range(N_WORLDS):
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, 0)
        native.append(d)
    start = np.stack([d.qpos.copy() for d in native])
    np.testing.assert_allclose(np.asarray(runner.data.qpos), start, atol=1e-7)

    worst = 0.0
    for t in range(N_STEPS):
        u = controls(m.nu, t)
        runner.set_actions(u)
        runner.step()
        for w, d in enumerate(native):
            d.ctrl[:] = u[w]
            mujoco.mj_step(m, d)
        qpos = np.asarray(runner.data.qpos)
        expected = np.stack([d.qpos for d in native])
        worst = max(worst, np.abs(qpos - expected).max())
        np.testing.assert_allclose(qpos, expected, atol=ATOL, err_msg=f"step {t}")
        np.testing.assert_allclose(
            np.asarray(runner.data.qvel), np.stack([d.qvel for d in native]), atol=10 * ATOL
        )
    # the worlds really took different paths
    assert np.abs(expected[0] - expected[1]).max() > 10 * ATOL
    assert not np.allclose(start, expected)
    print(f"{name}: worst |qpos - native| over {N_STEPS} steps = {worst:.2e}")
