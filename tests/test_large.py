"""Large and deep models on CPU.

* A model beyond the CPU linear-algebra lowering (nv > cpu_linalg.MAX_N) at a batch
  where jaxlib's batched LAPACK path once hung (256 worlds): three humanoids in one
  scene, nv = 81. Above nv = 60 MJX keeps the mass matrix sparse, so the Newton
  solver's Hessian is the one LAPACK factorization of a step, and one such call at
  a time cannot starve XLA's thread pool (see mjxrunner/cpu_linalg.py). Its
  compile is the cost, so it runs as this file run as a script, in a process that
  conftest starts when collection ends, beside the other tests.
* A deep tree: a 12-link hinge chain. With XLA:CPU's fusion emitters on, a step of
  a depth-8 chain took 1.1 s and each level multiplied that (mjxrunner/cpu_fusion.py);
  with them off (mjxrunner's default) this chain compiles in seconds and tracks
  native MuJoCo.
"""

import sys

import conftest
import mujoco
import numpy as np
from test_parity import CONTACT_ATOL, SMOOTH_ATOL, WARP_CONTACT_ITERATIONS

from mjxrunner import MultiEnvRunner
from mjxrunner.engine import cpu_linalg, models

NUM_ENVS = 256
STEPS = 4


def humanoid_spec() -> mujoco.MjSpec:
    """models/humanoid.xml, 2 cm lower (its feet reach the floor in the first steps),
    without its keyframe (one humanoid's does not fit three)."""
    spec = mujoco.MjSpec.from_file(str(models.path("humanoid")))
    spec.delete(spec.keys[0])
    spec.body("torso").pos[2] -= 0.02
    return spec


def three_humanoids() -> mujoco.MjModel:
    """Three humanoids 2 m apart; they touch the floor, not each other."""
    spec = humanoid_spec()
    for i in (1, 2):
        frame = spec.worldbody.add_frame(pos=[0, 2.0 * i, 0])
        frame.attach_body(humanoid_spec().body("torso"), f"h{i}_", "")
    return spec.compile()


def check_nv_81_at_256_worlds() -> None:
    m = three_humanoids()
    assert m.nv == 81 > cpu_linalg.MAX_N
    # Three bodies' contacts in one solve: with the scene's 4 Newton iterations the
    # solve stops short, and MJX and native stop at different points (measured: 0.07
    # rad apart within 12 steps); compare converged solves, as test_parity.py does
    # for Warp.
    m.opt.iterations = WARP_CONTACT_ITERATIONS
    runner = MultiEnvRunner(m, NUM_ENVS)
    u = np.random.default_rng(0).uniform(-1, 1, (STEPS, NUM_ENVS, m.nu))
    checked = (0, NUM_ENVS - 1)
    native = {w: mujoco.MjData(m) for w in checked}
    for t in range(STEPS):
        runner.set_actions(u[t])
        runner.step()
        for w, d in native.items():
            d.ctrl[:] = u[t, w]
            mujoco.mj_step(m, d)
    qpos = np.asarray(runner.data.qpos)
    assert np.isfinite(qpos).all()
    for w, d in native.items():
        np.testing.assert_allclose(qpos[w], d.qpos, atol=CONTACT_ATOL, err_msg=f"world {w}")
    assert not np.allclose(qpos[0], qpos[-1])  # different controls, different worlds
    assert sum(d.ncon for d in native.values()) > 0  # the feet are on the floor
    print("nv = 81 at 256 worlds: passed")


@conftest.background("test_large")
def launch(out):
    return [conftest.start("test_large.py", "nv81", out=out)]


def test_nv_81_steps_at_256_worlds_and_matches_native():
    [(returncode, log)], _ = conftest.finished("test_large")
    assert returncode == 0, log[-4000:]
    assert "nv = 81 at 256 worlds: passed" in log


DEPTH = 12


def test_a_12_link_chain_steps_and_matches_native():
    chain_xml = conftest.load_benchmark("compile_depth").chain_xml  # what it measures
    m = mujoco.MjModel.from_xml_string(chain_xml(DEPTH))
    runner = MultiEnvRunner(m, 4, keyframe=0)  # bent: gravity swings every link
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    for _ in range(100):
        runner.step()
        mujoco.mj_step(m, d)
    qpos = np.asarray(runner.data.qpos)
    np.testing.assert_allclose(qpos, np.broadcast_to(d.qpos, qpos.shape), atol=SMOOTH_ATOL)
    assert np.abs(d.qpos - m.key_qpos[0]).max() > 10 * SMOOTH_ATOL  # it moved


if __name__ == "__main__" and sys.argv[1:] == ["nv81"]:
    check_nv_81_at_256_worlds()
