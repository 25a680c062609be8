"""Per-world parameters, derived constants, randomization and user state."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import slider_xml

from mjxrunner import CompileCounter, MultiEnvRunner, pytree_dataclass, world_field, world_mask
from mjxrunner.engine import models
from mjxrunner.engine.params import DERIVED, Term

N = 4


@pytest.fixture(scope="module")
def cartpole():
    return MultiEnvRunner("cartpole", N, seed=5)


@pytest.fixture
def fresh(cartpole):
    r = cartpole
    r.set_randomization([])
    pristine = MultiEnvRunner("cartpole", N).engine.default_model
    r._eng = r._eng.replace(default_model=pristine)  # pristine defaults
    r.reset_all()
    r.clear_actions()
    return r


def host_snapshot(r):
    return [np.array(x) for x in jax.tree.leaves((r.state, r.model, r.engine.default_model))]


def test_promote_and_demote(fresh):
    r = fresh
    assert r.param("opt.gravity").shape == (3,)
    r.set_gravity([0, 0, -1.62], world=2)
    g = r.param("opt.gravity")
    assert g.shape == (N, 3) and world_mask(r.model).opt.gravity
    np.testing.assert_allclose(g[:, 2], [-9.81, -9.81, -1.62, -9.81], rtol=1e-6)
    r.set_gravity([0, 0, -3.7])
    assert r.param("opt.gravity").shape == (3,) and not world_mask(r.model).opt.gravity
    r.set_param("dof_damping", np.array([[0.1, 0.2]] * N))
    assert r.param("dof_damping").shape == (N, 2)
    r.set_param("dof_damping", [0.3, 0.4], env_ids=[1])
    np.testing.assert_allclose(r.param("dof_damping")[:, 1], [0.2, 0.4, 0.2, 0.2], rtol=1e-6)


def test_values_never_recompile_shapes_recompile_once(fresh):
    r = fresh
    r.set_param("geom_friction", np.ones((N, r.mj_model.ngeom, 3)))
    r.step()  # compiles the per-world friction signature
    with CompileCounter() as c:
        for i in range(3):
            r.set_param("geom_friction", np.full((N, r.mj_model.ngeom, 3), 0.5 + i))
            r.set_param("geom_friction", np.full((r.mj_model.ngeom, 3), 1.0 + i), env_ids=[i])
            r.step()
    assert c.count == 0
    r.set_param("geom_friction", np.ones((r.mj_model.ngeom, 3)))  # demoted
    with CompileCounter() as c:
        r.step()  # the new (shared) signature: its step and its model's packing
    assert c.count <= 2
    with CompileCounter() as c:
        r.step()
        r.set_param("geom_friction", np.full((r.mj_model.ngeom, 3), 0.9))
        r.step()
    assert c.count == 0


@pytest.mark.parametrize(
    "path, values, env_ids, error, match",
    [
        ("nq", 3, None, TypeError, "static"),
        ("geom_size", np.ones((3, 3)), None, ValueError, "geom_rbound"),
        ("no_such_field", 1.0, None, ValueError, "no field"),
        ("opt._impl", 1.0, None, ValueError, "no field"),
        ("body_mass", np.ones(2), None, ValueError, r"shape \(3,\)"),
        ("body_mass", np.ones((N + 1, 3)), None, ValueError, "shape"),
        ("body_mass", [-1.0, 1.0, 1.0], None, ValueError, ">= 0"),
        ("body_mass", [np.nan, 1.0, 1.0], None, ValueError, "finite"),
        ("opt.timestep", 0.0, None, ValueError, "> 0"),
        ("body_mass", np.ones((2, 3)), [0, 0], ValueError, "unique"),
        ("body_mass", np.ones((1, 3)), [N], ValueError, "env_ids"),
        ("jnt_type", np.zeros(2), None, TypeError, "static"),
        ("geom_matid", np.zeros(3), None, TypeError, "only float"),
    ],
)
def test_bad_params_change_nothing(fresh, path, values, env_ids, error, match):
    before = host_snapshot(fresh)
    with pytest.raises(error, match=match):
        fresh.set_param(path, values, env_ids=env_ids)
    after = host_snapshot(fresh)
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_gravity(fresh):
    with pytest.raises(ValueError, match="norm"):
        fresh.set_gravity([0, 0, -1e6])
    with pytest.raises(ValueError, match="shape"):
        fresh.set_gravity([0, -9.81])
    with pytest.raises(ValueError, match="env_ids"):
        fresh.set_gravity([0, 0, -1], world=N)


def test_per_world_gravity_matches_native_fall(slider3):
    gravities = np.array([[0, 0, -9.81], [0, 0, -1.62], [0, 0, -3.72], [0, 0, 0.0]])
    r = MultiEnvRunner(slider3, len(gravities))
    for w, g in enumerate(gravities):
        r.set_gravity(g, world=w)
    qpos, _ = r.rollout(np.zeros((50, len(gravities), 3)), 50)
    for w, g in enumerate(gravities):
        m = mujoco.MjModel.from_xml_string(slider_xml(slider3.nbody))
        m.opt.gravity[:] = g
        d = mujoco.MjData(m)
        for _ in range(50):
            mujoco.mj_step(m, d)
        np.testing.assert_allclose(np.asarray(qpos[-1, w]), d.qpos, atol=1e-5)
    drops = np.asarray(qpos[-1, :, 0])
    assert drops[0] < drops[2] < drops[1] < drops[3] == 0.0


def test_mass_change_rebuilds_derived_constants_like_set_const(fresh):
    r = fresh
    r.set_param("body_mass", [0.0, 2.5, 0.3], env_ids=[1])
    native = models.load("cartpole")
    native.body_mass[:] = [0.0, 2.5, 0.3]
    mujoco.mj_setConst(native, mujoco.MjData(native))
    for field in DERIVED:  # MJX keeps 3x3 matrices where MjModel keeps rows of 9
        got = r.param(field).reshape(N, -1)
        np.testing.assert_allclose(got[1], getattr(native, field).ravel(), rtol=1e-5, atol=1e-6)
        untouched = getattr(models.load("cartpole"), field).ravel()
        np.testing.assert_allclose(got[0], untouched, rtol=1e-5, atol=1e-6)


def test_heavier_world_steps_like_native_model_with_that_mass(fresh):
    r = fresh
    masses = [0.0, 3.0, 0.05]
    r.set_param("body_mass", masses, env_ids=[2])
    native = models.load("cartpole")
    native.body_mass[:] = masses
    mujoco.mj_setConst(native, mujoco.MjData(native))
    d = mujoco.MjData(native)
    # Push hard into the rail's end: the joint limit (softness set by dof_invweight0) acts.
    u = np.ones((120, N, 1))
    qpos, _ = r.rollout(u, 120)
    hit = False
    for t in range(120):
        d.ctrl[:] = 1.0
        mujoco.mj_step(native, d)
        hit |= d.nefc > 0
        np.testing.assert_allclose(np.asarray(qpos[t, 2]), d.qpos, atol=2e-3, err_msg=f"{t}")
    assert hit  # the limit constraint was active
    assert not np.allclose(np.asarray(qpos[-1, 2]), np.asarray(qpos[-1, 0]), atol=1e-2)


def test_randomization_draws_from_defaults_and_never_drifts(fresh):
    r = fresh
    base = r.param("body_mass").copy()
    terms = [
        Term("body_mass", 0.5, 2.0, index=2),
        Term("dof_damping", 0.0, 0.1, operation="add"),
        Term("opt.gravity", -1.0, 1.0, operation="add", index=0),
    ]
    r.set_randomization(terms)  # draws every world at start-up
    m0 = r.param("body_mass")
    assert m0.shape == (N, 3) and len(set(np.round(m0[:, 2], 6))) == N
    np.testing.assert_allclose(m0[:, :2], np.broadcast_to(base[:2], (N, 2)))
    for _ in range(20):  # many resets of one world: values stay within range of default
        r.reset_envs([1])
    m = r.param("body_mass")
    np.testing.assert_array_equal(m[[0, 2, 3], 2], m0[[0, 2, 3], 2])  # others untouched
    assert m[1, 2] != m0[1, 2]
    assert 0.5 * base[2] - 1e-6 <= m[1, 2] <= 2.0 * base[2] + 1e-6
    damping = r.param("dof_damping")
    assert ((damping >= 0.05 - 1e-6) & (damping <= 0.15 + 1e-6)).all()
    # derived constants follow the drawn masses
    assert len(set(np.round(r.param("body_invweight0")[:, 2, 0], 5))) == N


def test_linked_terms_draw_one_factor_for_every_field(fresh):
    r = fresh
    damping, mass = r.param("dof_damping").copy(), r.param("body_mass").copy()[1:]
    r.set_randomization(
        [
            Term("dof_damping", 0.5, 2.0, link="joint"),
            Term("body_mass", 0.5, 2.0, index=np.s_[1:], link="joint"),  # cart and pole
            Term("geom_friction", 0.5, 2.0, index=(0, 0)),  # unlinked: its own numbers
        ]
    )
    f_damping = r.param("dof_damping") / damping
    f_mass = r.param("body_mass")[:, 1:] / mass
    np.testing.assert_allclose(f_damping, f_mass, rtol=1e-6)
    assert len(set(np.round(f_damping[:, 0], 6))) == N  # per world
    assert not np.allclose(f_damping[:, 0], f_damping[:, 1])  # per element
    r.reset_envs([2])  # a redraw keeps them linked
    np.testing.assert_allclose(
        r.param("dof_damping") / damping, r.param("body_mass")[:, 1:] / mass, rtol=1e-6
    )


def test_randomize_every_n_steps_in_the_step(fresh):
    r = fresh
    r.set_randomization([Term("body_mass", 0.5, 2.0, index=1)], every_n_steps=3)
    m0 = r.param("body_mass")[:, 1].copy()
    r.step()
    r.step()
    np.testing.assert_array_equal(r.param("body_mass")[:, 1], m0)
    with CompileCounter() as c:
        r.step()  # episode step 3: redrawn inside the compiled step
    m3 = r.param("body_mass")[:, 1]
    assert (m3 != m0).all()
    with CompileCounter() as c2:
        for _ in range(4):
            r.step()
    assert c2.count == 0 and c.count <= 1


def test_bad_terms():
    with pytest.raises(ValueError, match="distribution"):
        Term("body_mass", 0.5, 2.0, distribution="normal")
    with pytest.raises(ValueError, match="low"):
        Term("body_mass", 2.0, 0.5)
    with pytest.raises(ValueError, match="loguniform"):
        Term("body_mass", 0.0, 2.0, distribution="loguniform")
    with pytest.raises(TypeError, match="finite"):
        Term("body_mass", np.nan, 1.0)
    with pytest.raises(TypeError, match="link"):
        Term("body_mass", 0.5, 1.0, link=3)


def test_bad_randomization_changes_nothing(fresh):
    before = host_snapshot(fresh)
    with pytest.raises(ValueError, match="geom_rbound"):
        fresh.set_randomization([Term("geom_size", 0.5, 2.0)])
    with pytest.raises(ValueError, match="index"):
        fresh.set_randomization([Term("body_mass", 0.5, 2.0, index=7)])
    with pytest.raises(TypeError, match="Term"):
        fresh.set_randomization([("body_mass", 0.5, 2.0)])
    with pytest.raises(ValueError, match="share link 'x' but not their draws"):
        fresh.set_randomization(
            [Term("dof_damping", 0.5, 2.0, link="x"), Term("body_mass", 0.5, 2.0, link="x")]
        )
    with pytest.raises(ValueError, match="no randomization"):
        fresh.randomize()
    for a, b in zip(before, host_snapshot(fresh), strict=True):
        np.testing.assert_array_equal(a, b)


def test_reset_rules_for_parameters(fresh):
    r = fresh
    r.set_param("body_mass", [0.0, 2.0, 0.2], env_ids=[0, 3])  # per world, not snapshotted
    r.set_param("dof_damping", [0.7, 0.7])  # shared, not snapshotted
    r.reset_envs([0, 1, 2, 3])
    np.testing.assert_allclose(r.param("body_mass")[:, 1], 1.0)  # per-world: restored
    np.testing.assert_allclose(r.param("dof_damping"), 0.7)  # shared: untouched
    r.reset(np.array([False] * N + [True]))  # the global slot restores shared leaves
    np.testing.assert_allclose(r.param("dof_damping"), 0.05)
    r.set_param("dof_damping", [0.7, 0.7])
    r.reset_all()
    np.testing.assert_allclose(r.param("dof_damping"), 0.05)
    r.set_param("dof_damping", [0.7, 0.7])
    r.build_default()  # a deliberate change survives resets
    r.reset_all()
    np.testing.assert_allclose(r.param("dof_damping"), 0.7)


@pytree_dataclass
class Battery:
    charge: jax.Array = world_field(0)  # (num_envs,) per world


def test_user_state_follows_resets(fresh):
    r = fresh
    r.set_user_state({"battery": Battery(charge=jnp.ones(N)), "table": {"k": jnp.ones(N)}})
    assert world_mask(r.user_state)["battery"].charge
    assert not world_mask(r.user_state)["table"]["k"]  # bare arrays are shared
    drained = Battery(charge=jnp.zeros(N))
    user = {"battery": drained, "table": {"k": jnp.zeros(N)}}
    r._eng = r._eng.replace(state=r.state.replace(user=user))
    r.reset_envs([2])
    np.testing.assert_array_equal(r.user_state["battery"].charge, [0, 0, 1, 0])
    np.testing.assert_array_equal(r.user_state["table"]["k"], 0)  # shared: untouched
    r.reset_all()
    np.testing.assert_array_equal(r.user_state["table"]["k"], 1)
    with pytest.raises(ValueError, match="num_envs"):
        r.set_user_state({"battery": Battery(charge=jnp.ones(N + 1))})
    r.set_user_state(None)
