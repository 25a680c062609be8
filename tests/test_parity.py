"""The runner against native MuJoCo (float64) on every model in models/.

MJX runs in float32 here (``jax_enable_x64`` off), whose relative precision is ~6e-8.
Each case names its horizon and tolerance:

* Smooth scenes without contacts (cartpole, pendulum, acrobot, reacher): over 250
  Euler steps the rounding difference grows to at most ~1e-4 (measured worst |qpos
  error|: cartpole 1.3e-4, pendulum 2.4e-7, acrobot 1.3e-6, reacher 1.6e-7).
  ``SMOOTH_ATOL = 1e-3`` leaves a margin of ~8x, yet a real mismatch (a wrong
  timestep, control or world mixing) moves qpos by > 1e-2.
* Contact scenes (hopper, ant, humanoid): each impact passes float32 rounding through
  a stiff contact solve, so the difference grows faster and, once a body tumbles,
  without bound: float32 and float64 worlds are then different trajectories and
  comparing them says nothing. Measured with these controls and start (worst |qpos
  error| / worst |qvel error| up to the step): hopper 2.2e-4 / 8.1e-3 at 200 steps
  (3.1e-4 / 1.9e-2 at 250); ant 1.9e-4 / 3.3e-3 at 100, then 7.6e-3 / 1.5 at 120
  (a foot lands in one and slips in the other); humanoid 2.9e-4 / 7.5e-3 at 120,
  1.3e-2 / 2.4 at 200. Each horizon stops before that divergence, and
  ``CONTACT_ATOL = 1e-2`` leaves a margin of >= 10x over the worst figures inside
  it. A wrong contact frame or solver setting shows at the first contact: with
  pyramidal cones the ant is 5e-3 off within 5 steps of landing, even in float64
  (hence elliptic cones in the contact scenes).

qvel is compared with 10x the qpos tolerance: velocities change by a contact impulse
within one step, positions only by ``timestep`` times that.

Both impls run every case against native MuJoCo and are held to the same
tolerances. impl "warp" stops its Newton solver at a different point than native
MuJoCo and MJX-JAX when the iteration cap binds: with the scenes' ``iterations=4``
the ant's qvel is ~1 off native within 20 steps of landing (humanoid: 0.6 at step
5), while with the solver converged (``WARP_CONTACT_ITERATIONS = 50``, set on the
model both engines run) Warp matches native to 2.8e-6 qpos / 4.9e-4 qvel over 100
ant steps and 1.2e-5 / 3.7e-4 on the humanoid. So Warp's contact cases compare
converged solves: what they test is the physics, not where a capped solver stops.
"""

import dataclasses

import mujoco
import numpy as np
import pytest
import test_robots

from mjxrunner import MultiEnvRunner
from mjxrunner.engine import models

IMPLS = ["jax", "warp"]
WARP_CONTACT_ITERATIONS = 50
N_WORLDS = 4
SMOOTH_ATOL = 1e-3
CONTACT_ATOL = 1e-2


@dataclasses.dataclass(frozen=True)
class Case:
    n_steps: int
    atol: float


CASES = {
    "acrobot": Case(250, SMOOTH_ATOL),
    "ant": Case(100, CONTACT_ATOL),
    "cartpole": Case(250, SMOOTH_ATOL),
    "hopper": Case(200, CONTACT_ATOL),
    "humanoid": Case(120, CONTACT_ATOL),
    "pendulum": Case(250, SMOOTH_ATOL),
    "puck_blocks": Case(200, CONTACT_ATOL),
    "reacher": Case(250, SMOOTH_ATOL),
}


def controls(nu, t):
    """A different smooth control per world: ``(N_WORLDS, nu)`` at step ``t``."""
    w = np.arange(N_WORLDS)[:, None]
    return 0.9 * np.sin(0.05 * t * (w + 1) + np.arange(nu)[None, :] + w)


def step_both(runner: MultiEnvRunner, native: list, m: mujoco.MjModel, t: int) -> None:
    """Step ``t`` of the runner and of the native worlds, with :func:`controls`."""
    u = controls(m.nu, t)
    runner.set_actions(u)
    runner.step()
    for w, d in enumerate(native):
        d.ctrl[:] = u[w]
        mujoco.mj_step(m, d)


def test_every_model_has_a_parity_case():
    """Structural variants share a case: puck_blocks has every geom type of the
    puck family (sphere on plane, sphere on box)."""

    def family(name: str) -> str:
        return models.info(name).variant_of or name

    robots = set(test_robots.ROBOTS)  # their parity runs in tests/test_robots.py
    # impl "c" only (PGS): test_native.py holds every scene, these too, to mj_step
    robots |= {"go1_cpu", "g1_cpu"}
    assert {family(n) for n in CASES} | robots == {family(n) for n in models.list()}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_runner_matches_native_mujoco(name, impl):
    case = CASES[name]
    m = models.load(name)
    m.key_qpos[0, -1] += 0.1  # start off the equilibrium, so the dynamics are exercised
    if impl == "warp" and case.atol == CONTACT_ATOL:
        m.opt.iterations = WARP_CONTACT_ITERATIONS  # see the module docstring
    runner = MultiEnvRunner(m, N_WORLDS, impl=impl, keyframe=0)
    native = []
    for _ in range(N_WORLDS):
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, 0)
        native.append(d)
    start = np.stack([d.qpos.copy() for d in native])
    np.testing.assert_allclose(np.asarray(runner.data.qpos), start, atol=1e-7)

    worst = 0.0
    for t in range(case.n_steps):
        step_both(runner, native, m, t)
        qpos = np.asarray(runner.data.qpos)
        expected = np.stack([d.qpos for d in native])
        worst = max(worst, np.abs(qpos - expected).max())
        np.testing.assert_allclose(qpos, expected, atol=case.atol, err_msg=f"step {t}")
        np.testing.assert_allclose(
            np.asarray(runner.data.qvel),
            np.stack([d.qvel for d in native]),
            atol=10 * case.atol,
            err_msg=f"qvel, step {t}",
        )
    # the worlds really took different paths
    assert np.abs(expected[0] - expected[1]).max() > 10 * case.atol
    assert not np.allclose(start, expected)
    print(f"{name} ({impl}): worst |qpos - native| over {case.n_steps} steps = {worst:.2e}")
