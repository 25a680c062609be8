"""impl "warp" end to end on CPU: same user code as impl "jax", pooled buffers,
capacities and overflow policies, contact counts, per-world parameters, and the
explicit host-to-device model update (for both impls).

Warp kernels build once per model (about a minute on 2 cores, then cached in
~/.cache/warp), so this module uses two models and shares runners between tests.
"""

import warnings

import jax
import mujoco
import numpy as np
import pytest

from mjxrunner import CompileCounter, MultiEnvRunner, world_mask
from mjxrunner.engine import models
from mjxrunner.engine.backend import CapacityOverflowError, CapacityWarning, overflow_names

N = 4
# float32 on both sides; the two implementations order their sums differently.
ATOL = 1e-4

BOXES = """<mujoco><option timestep="0.01"/>
<worldbody><geom type="plane" size="2 2 .1"/>
<body pos="0 0 0.2"><freejoint/><geom type="box" size=".1 .1 .1" mass="1"/></body>
<body pos="0.5 0 0.2"><freejoint/><geom type="sphere" size=".1" mass="1"/></body>
</worldbody></mujoco>"""


def drive(r):
    """The same user code for any impl; returns qpos at checkpoints."""
    out = []
    r.reset_all()
    r.set_actions(np.linspace(-1, 1, N)[:, None])
    for _ in range(5):
        r.step()
    out.append(np.array(r.data.qpos))
    out.append(np.array(r.next_data.qpos))
    r.reset_envs([1])
    r.set_actions([[0.3], [-0.3]], env_ids=[0, 3])
    r.step(substeps=2)
    out.append(np.array(r.data.qpos))
    r.reset(np.array([True, False, False, False, True]))
    r.step()
    out.append(np.array(r.data.qpos))
    out.append(r.episode_length.copy())
    return out


@pytest.fixture(scope="module")
def cartpoles():
    return MultiEnvRunner("cartpole", N, impl="jax"), MultiEnvRunner("cartpole", N, impl="warp")


def test_same_user_code_same_results(cartpoles):
    jax_run, warp_run = (drive(r) for r in cartpoles)
    for a, b in zip(jax_run, warp_run, strict=True):
        np.testing.assert_allclose(b, a, atol=ATOL)
    assert warp_run[0][0, 0] != warp_run[0][3, 0]  # worlds did differ


def test_warp_double_buffers_by_donation(cartpoles):
    r = cartpoles[1]
    r.step()
    old_scratch = r.next_data
    before = np.array(r.data.qpos)
    r.step()
    assert old_scratch.qpos.is_deleted()
    np.testing.assert_array_equal(np.asarray(r.next_data.qpos), before)


def test_warp_backend_identity(cartpoles):
    info = cartpoles[1].backend_info
    assert info["impl"] == "warp" and info["graph_mode"] == "jax"  # CPU default
    assert info["qpos_dtype"] == "float32"
    assert set(info["capacities"]) == {"naconmax", "njmax", "naccdmax", "nvmax"}
    assert cartpoles[0].backend_info["capacities"] is None


def test_per_world_gravity_on_warp_matches_jax(cartpoles):
    results = []
    for r in cartpoles:
        r.reset_all()
        r.set_gravity([0, 0, -9.81])
        r.set_gravity([0, 0, -1.62], world=2)
        r.set_actions(np.full((N, 1), 0.5))
        r.step()  # compiles the per-world-gravity signature
        with CompileCounter() as c:
            r.set_gravity([0, 0, -3.7], world=1)  # a value change: no compile
            for _ in range(20):
                r.step()
        assert c.count == 0
        results.append(np.array(r.data.qpos))
        r.set_gravity([0, 0, -9.81])  # demote for the other tests
    np.testing.assert_allclose(results[1], results[0], atol=ATOL)
    assert not np.allclose(results[1][0], results[1][2])


def test_pools_are_shared_even_when_their_length_is_num_envs():
    r = MultiEnvRunner("cartpole", N, impl="warp", naconmax=N)
    impl_mask = world_mask(r.data)._impl
    assert r.data._impl.contact__dist.shape == (N,)  # same length as the world axis...
    assert not impl_mask.contact__dist and not impl_mask.nacon  # ...yet pooled
    assert world_mask(r.data).qpos and impl_mask.overflow
    pools = np.array(r.data._impl.contact__dist)
    r.step()
    r.reset(np.ones(N, bool))
    np.testing.assert_array_equal(np.asarray(r.data._impl.contact__dist), pools)
    r.reset(np.ones(N + 1, bool))
    np.testing.assert_array_equal(np.asarray(r.data._impl.contact__dist), pools)
    assert r.data._impl.nacon.shape == (1,)


@pytest.fixture(scope="module")
def boxes():
    return {
        "jax": MultiEnvRunner(BOXES, 2, impl="jax"),
        "warp": MultiEnvRunner(BOXES, 2, impl="warp"),
    }


def test_contact_parity_and_counts(boxes):
    qpos = {}
    for impl, r in boxes.items():
        for _ in range(30):
            r.step()
        qpos[impl] = np.array(r.data.qpos)
        np.testing.assert_array_equal(r.contact_count(), [5, 5])  # box 4 + sphere 1
        np.testing.assert_array_equal(r.overflow, 0)
    # resting contact: the two impls solve the same LCP to solver tolerance
    np.testing.assert_allclose(qpos["warp"], qpos["jax"], atol=1e-3)
    assert boxes["warp"].capacities.naconmax >= 2 * 5


def test_overflow_raise_rolls_back():
    r = MultiEnvRunner(BOXES, 2, impl="warp", naconmax=4)
    before, done = None, 0
    with pytest.raises(CapacityOverflowError, match=r"naconmax \(now 4\)"):
        for _ in range(40):  # the bodies land after ~10 steps
            before = np.array(r.data.qpos)
            r.step()
            done += 1
    np.testing.assert_array_equal(np.asarray(r.data.qpos), before)  # rolled back
    np.testing.assert_array_equal(r.episode_length, done)
    assert "NARROWPHASE" in overflow_names(int(r.overflow.max()))


def test_overflow_warn_and_truncate():
    r = MultiEnvRunner(BOXES, 2, impl="warp", naconmax=4, overflow_policy="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(30):
            r.step()
    assert any(issubclass(w.category, CapacityWarning) for w in caught)
    assert r.overflow.any() and r.episode_length[0] == 30

    t = MultiEnvRunner(BOXES, 2, impl="warp", naconmax=4, overflow_policy="truncate")
    t.step()  # compiled first: a build's own warnings (Warp's, JAX's cache) are not checked
    t.reset_all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning, no exception
        for _ in range(30):
            t.step()
    assert t.truncated.all() and t.overflow.any()
    t.reset(t.truncated)
    assert not t.truncated.any() and (t.episode_length == 0).all()


# --- host/device model ---------------------------------------------------------------


def test_host_edits_are_not_followed_until_update_model(cartpoles):
    for r in cartpoles:
        r.mj_model.opt.gravity[:] = [0, 0, -1.0]
        np.testing.assert_allclose(r.param("opt.gravity"), [0, 0, -9.81], rtol=1e-6)
        r.mj_model.body_mass[2] = 0.5
        r.update_model(r.mj_model)
        np.testing.assert_allclose(r.param("opt.gravity"), [0, 0, -1.0], rtol=1e-6)
        native = models.load("cartpole")
        native.body_mass[2] = 0.5
        mujoco.mj_setConst(native, mujoco.MjData(native))
        np.testing.assert_allclose(r.param("dof_invweight0"), native.dof_invweight0, rtol=1e-5)
        r.update_model(fields={"opt.gravity": [0, 0, -9.81], "body_mass": native.body_mass * 0 + 1})
        np.testing.assert_allclose(r.param("body_mass"), 1.0)
        r.update_model(models.load("cartpole"))


def test_update_model_refuses_structural_changes_and_bad_input(cartpoles):
    r = cartpoles[0]
    before = [np.array(x) for x in jax.tree.leaves(r.model)]
    with pytest.raises(ValueError, match="build a new MultiEnvRunner"):
        r.update_model(models.load("pendulum"))
    other = models.load("cartpole")
    other.jnt_type[1] = mujoco.mjtJoint.mjJNT_SLIDE  # a static field: structural
    with pytest.raises(ValueError, match="structure"):
        r.update_model(other)
    with pytest.raises(TypeError, match="either"):
        r.update_model()
    with pytest.raises(TypeError, match="MjModel"):
        r.update_model("cartpole")
    with pytest.raises(ValueError, match="shape"):
        r.update_model(fields={"opt.gravity": [0, 0, -9.81], "body_mass": [1.0]})
    with pytest.raises(TypeError, match="static"):
        r.update_model(fields={"nq": 3})
    after = [np.array(x) for x in jax.tree.leaves(r.model)]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_unsupported_features_fail_at_construction():
    flex = """<mujoco><worldbody><flexcomp name="f" type="grid" count="2 2 1"
      spacing=".1 .1 .1" dim="2"/></worldbody></mujoco>"""
    with pytest.raises(ValueError, match=r"flex.*impl='warp'"):
        MultiEnvRunner(flex, 2, impl="jax")
