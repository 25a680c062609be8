"""Centre-of-mass offsets, body positions and joint offsets (``body_ipos``,
``body_pos``, ``qpos0``) per world: what ``mj_setConst`` derives from them is rebuilt
as MuJoCo does (impl "jax": in JAX; impl "c": MuJoCo's own), and what MuJoCo would
ignore or not rebuild is refused."""

import jax
import mujoco
import numpy as np
import pytest
from test_hostile import refused

from mjxrunner import MultiEnvRunner
from mjxrunner.engine import models, native, params
from mjxrunner.engine.params import DERIVED, Term

N = 4
CART, POLE = 1, 2  # cartpole's bodies: the cart's inertial frame is its body frame
CART_GEOM = 2  # the cart's box, at its body frame
POLE_IPOS = np.array([0.01, 0.0, -0.02])
POLE_POS = np.array([0.0, 0.03, 0.0])
QPOS0 = np.array([0.1, 0.3])


def native_constants(name, **fields) -> mujoco.MjModel:
    """Scene ``name`` with ``fields`` written and ``mj_setConst`` run."""
    m = models.load(name)
    for path, value in fields.items():
        getattr(m, path)[:] = value
    mujoco.mj_setConst(m, mujoco.MjData(m))
    return m


def assert_derived(got: dict, want: mujoco.MjModel, msg: str) -> None:
    for field in DERIVED:
        np.testing.assert_allclose(
            np.asarray(got[field]).reshape(-1),
            getattr(want, field).reshape(-1),
            rtol=1e-4,
            atol=1e-5,
            err_msg=f"{field} {msg}",
        )


@pytest.fixture(scope="module")
def cartpole():
    return MultiEnvRunner("cartpole", N, seed=3)


def test_set_values_rebuild_what_set_const_derives(cartpole):
    r = cartpole
    ipos = np.array(r.param("body_ipos"))
    pos = np.array(r.param("body_pos"))
    ipos[POLE] += POLE_IPOS
    pos[POLE] += POLE_POS
    r.set_param("body_ipos", ipos, env_ids=[1])
    r.set_param("body_pos", pos, env_ids=[1])
    r.set_param("qpos0", QPOS0, env_ids=[1])
    want = native_constants("cartpole", body_ipos=ipos, body_pos=pos, qpos0=QPOS0)
    got = {f: r.param(f) for f in DERIVED}
    assert_derived({f: v[1] for f, v in got.items()}, want, "world 1")
    assert_derived({f: v[0] for f, v in got.items()}, models.load("cartpole"), "world 0")
    assert not np.allclose(got["dof_invweight0"][1], got["dof_invweight0"][0], rtol=1e-3)


def test_drawn_values_rebuild_what_set_const_derives(cartpole):
    r = cartpole
    r.set_randomization(
        [
            Term("body_ipos", -0.05, 0.05, operation="add", index=POLE),
            Term("body_pos", -0.05, 0.05, operation="add", index=(POLE, 1)),
            Term("qpos0", -0.2, 0.2, operation="add"),
        ]
    )
    ipos, pos, qpos0 = (r.param(f) for f in ("body_ipos", "body_pos", "qpos0"))
    assert len({tuple(np.round(q, 6)) for q in qpos0}) == N  # drawn per world
    assert (ipos[:, CART] == models.load("cartpole").body_ipos[CART]).all()
    for w in range(N):
        want = native_constants("cartpole", body_ipos=ipos[w], body_pos=pos[w], qpos0=qpos0[w])
        assert_derived({f: r.param(f)[w] for f in DERIVED}, want, f"world {w}")
    r.set_randomization([])


def test_a_tracking_camera_follows_the_new_frames():
    """The ant's camera tracks its torso's subtree: its offsets are rebuilt."""
    m = models.load("ant")
    assert m.cam_mode[0] != mujoco.mjtCamLight.mjCAMLIGHT_FIXED
    fields = {
        "body_pos": m.body_pos + 0.02 * np.eye(m.nbody, 3),
        "body_ipos": m.body_ipos + 0.01 * (m.body_sameframe != 1)[:, None],
        "qpos0": m.qpos0 + 0.05 * (np.arange(m.nq) >= 7),
    }
    ref = params.Reference.build(m, jax.devices("cpu")[0])
    model = ref.model.replace(**{k: np.asarray(v, np.float32) for k, v in fields.items()})
    got = jax.jit(params.recompute_derived)(model, ref)
    want = native_constants("ant", **fields)
    assert_derived({f: getattr(got, f) for f in DERIVED}, want, "ant")
    assert not np.allclose(want.cam_poscom0, m.cam_poscom0)  # the case is one that moves


def test_what_mujoco_would_ignore_or_not_rebuild_is_refused(cartpole):
    r = cartpole
    ipos = np.array(r.param("body_ipos"))
    ipos[CART] += 0.01
    assert not refused(r, lambda: r.set_param("body_ipos", ipos), "body_sameframe")
    assert not refused(
        r,
        lambda: r.set_randomization([Term("body_ipos", -0.01, 0.01, operation="add")]),
        "body_sameframe",
    )
    assert not refused(
        r,
        lambda: r.set_randomization([Term("body_ipos", 0.01, 0.02, "uniform", "set", (CART, 0))]),
        "body_sameframe",
    )
    # The cart's geom was compiled at its body frame: MuJoCo C would keep it there.
    assert r.mj_model.geom_sameframe[CART_GEOM] == mujoco.mjtSameFrame.mjSAMEFRAME_BODY
    assert not refused(
        r,
        lambda: r.set_randomization([Term("geom_pos", -0.01, 0.01, "uniform", "add", CART_GEOM)]),
        "geom_sameframe",
    )
    for path in ("body_quat", "body_iquat", "geom_quat"):
        same = np.array(r.param(path))
        assert not refused(r, lambda p=path, v=same: r.set_param(p, v), "quaternion")


def test_models_with_tendons_or_following_lights_are_refused():
    tendon = """<mujoco><worldbody>
      <body><joint name="a" type="slide"/><geom size=".1" mass="1"/><site name="s"/></body>
      <site name="o" pos="0 0 1"/></worldbody>
      <tendon><spatial><site site="s"/><site site="o"/></spatial></tendon></mujoco>"""
    light = """<mujoco><worldbody>
      <body><joint type="slide"/><geom size=".1" pos=".1 0 0" mass="1"/>
        <light mode="trackcom"/></body></worldbody></mujoco>"""
    for xml, match in ((tendon, "tendon_length0"), (light, "light_pos0")):
        r = MultiEnvRunner(mujoco.MjModel.from_xml_string(xml), 2)
        for path in ("body_pos", "qpos0"):
            same = np.array(r.param(path))
            assert not refused(r, lambda r=r, p=path, v=same: r.set_param(p, v), match)


def test_impl_c_steps_as_mujoco_with_the_new_frames():
    """Impl "c" hands the values to MuJoCo, which runs its own mj_setConst: the worlds
    step bit for bit as native MuJoCo on a model with those values."""
    r = MultiEnvRunner("cartpole", 2, impl="c", num_threads=1, seed=0)
    m = r.mj_model
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731 - what the data can hold
    ipos, pos = f32(m.body_ipos).copy(), f32(m.body_pos).copy()
    ipos[POLE] += f32(POLE_IPOS)
    pos[POLE] += f32(POLE_POS)
    r.set_param("body_ipos", ipos, env_ids=[1])
    r.set_param("body_pos", pos, env_ids=[1])
    r.set_param("qpos0", f32(QPOS0), env_ids=[1])
    states = r.get_state()
    plain = native_constants("cartpole")
    moved = native_constants("cartpole", body_ipos=ipos, body_pos=pos, qpos0=f32(QPOS0))
    ds = []
    for i, mm in enumerate((plain, moved)):
        d = mujoco.MjData(mm)
        mujoco.mj_setState(mm, d, states[i], mujoco.mjtState.mjSTATE_FULLPHYSICS)
        ds.append(d)
    u = np.linspace(-1, 1, 2 * 60, dtype=np.float32).reshape(60, 2, 1)
    for t in range(60):
        r.set_actions(u[t])
        r.step()
        for i, mm in enumerate((plain, moved)):
            ds[i].ctrl[:] = u[t, i]
            mujoco.mj_step(mm, ds[i])
    exact = native.from_bits(np.asarray(r.data._impl.state))
    for i, mm in enumerate((plain, moved)):
        want = np.empty(mujoco.mj_stateSize(mm, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(mm, ds[i], want, mujoco.mjtState.mjSTATE_INTEGRATION)
        np.testing.assert_array_equal(exact[i], want, err_msg=f"world {i}")
    assert not np.allclose(exact[0], exact[1])


def test_a_new_centre_of_mass_leaves_the_geoms_in_place_on_impl_c():
    """The pole's geom was compiled at the pole's inertial frame, which MuJoCo C
    copies to the geom while the flag (``geom_sameframe``) holds; MJX places it by
    its own offset. A world given a new ``body_ipos`` is set up again by
    ``mj_setConst``, which recomputes the flag (the rotation alone stays shared), so
    there too the centre of mass moves and the geom stays, as on MJX."""
    m = models.load("cartpole")
    pole_geom = int(np.flatnonzero(m.geom_bodyid == POLE)[0])
    assert m.geom_sameframe[pole_geom] == mujoco.mjtSameFrame.mjSAMEFRAME_INERTIA
    r = MultiEnvRunner(m, 2, impl="c", num_threads=1, seed=0)
    ipos = np.array(r.param("body_ipos"))
    ipos[POLE] += np.float32(POLE_IPOS)
    r.set_param("body_ipos", ipos, env_ids=[1])
    states = r.get_state()
    r.set_state(states[[0, 0]])  # both worlds at world 0's state, kinematics redone
    xipos, geom_xpos = np.asarray(r.data.xipos), np.asarray(r.data.geom_xpos)
    assert np.abs(xipos[1, POLE] - xipos[0, POLE]).max() > 0.005  # the com moved
    np.testing.assert_array_equal(geom_xpos[1], geom_xpos[0])  # the geoms did not
