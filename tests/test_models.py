"""The scene registry, the scenes themselves, and the built-in task of each scene.

Nothing here compiles an MJX step: scenes are checked with native MuJoCo, and task
functions are called eagerly on one world's ``mjx.Data`` made by ``put_data``.
"""

import copy
import re

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import tasks
from mjxrunner.engine import models

SCENES = [
    "acrobot",
    "ant",
    "cartpole",
    "g1",
    "g1_cpu",
    "go1",
    "go1_cpu",
    "hopper",
    "humanoid",
    "pendulum",
    "puck",
    "puck_blocks",
    "puck_steps",
    "reacher",
]
CONTACT_SCENES = ["ant", "g1", "go1", "hopper", "humanoid", "puck", "puck_blocks", "puck_steps"]
# go1_cpu and g1_cpu are not among them: scenes for impl "c" (PGS, pyramidal cones),
# not for MJX


# --- registry -------------------------------------------------------------------------


def test_registry_lists_every_scene_with_its_file():
    assert models.list() == SCENES
    for name in SCENES:
        assert models.path(name).name == f"{name}.xml"
        assert isinstance(models.load(name), mujoco.MjModel)
        assert models.info(name).name == name


@pytest.mark.parametrize("call", [models.path, models.load, models.info])
def test_unknown_name_lists_the_known_ones(call):
    with pytest.raises(ValueError, match=r"unknown model 'walker'.*humanoid"):
        call("walker")
    with pytest.raises(TypeError, match="must be a str"):
        call(3)


# --- the scenes -----------------------------------------------------------------------


@pytest.mark.parametrize("name", SCENES)
def test_scene_has_actuators_sensors_keyframe_and_camera(name):
    m = models.load(name)
    info = models.info(name)
    assert m.nu >= 1 and m.nsensor >= 2
    assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, info.keyframe) >= 0
    assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, info.camera) == 0  # the default
    assert m.actuator_ctrllimited.all()
    assert info.summary and "\n" not in info.summary
    # MJX's refusals: the energy flag is off and no flex is used
    assert not m.opt.enableflags & mujoco.mjtEnableBit.mjENBL_ENERGY and m.nflex == 0


@pytest.mark.parametrize("name", SCENES)
def test_keyframe_start_is_at_rest_and_stays_finite(name):
    m = models.load(name)
    d = mujoco.MjData(m)
    key = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, models.info(name).keyframe)
    mujoco.mj_resetDataKeyframe(m, d, key)
    rng = np.random.default_rng(0)
    for _ in range(300):
        d.ctrl[:] = rng.uniform(-1, 1, m.nu)
        mujoco.mj_step(m, d)
    assert np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()
    assert np.abs(d.qvel).max() < 100  # random controls do not make the scene explode


def _jax_bound(m):
    """``(contacts, constraint rows)`` MJX's jax impl allocates: the most possible.
    MJX has no PGS (``go1_cpu``); the bound follows the geoms, not the solver."""
    if m.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
        m = copy.copy(m)
        m.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    d = mjx.make_data(m, impl="jax")
    return d._impl.contact.dist.shape[0], d._impl.efc_J.shape[0]


@pytest.mark.parametrize("name", SCENES)
def test_capacities_cover_the_worst_case_and_a_random_run(name):
    m = models.load(name)
    info = models.info(name)
    ncon_bound, nefc_bound = _jax_bound(m)
    assert info.contacts == (ncon_bound > 0)
    assert info.naconmax_per_world >= ncon_bound
    assert info.njmax >= nefc_bound
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    rng = np.random.default_rng(1)
    worst = np.zeros(2, int)
    for _ in range(400):
        d.ctrl[:] = rng.uniform(-1, 1, m.nu)
        mujoco.mj_step(m, d)
        worst = np.maximum(worst, (d.ncon, d.nefc))
    assert worst[0] <= info.naconmax_per_world and worst[1] <= info.njmax
    if info.contacts:
        assert worst[0] > 0  # the scene really touches the floor


@pytest.mark.parametrize("name", CONTACT_SCENES)
def test_contact_scene_states_its_warp_capacities_in_the_xml(name):
    text = models.path(name).read_text()
    found = re.search(r"naconmax per world (\d+), njmax (\d+)", text)
    assert found, "the XML comment must state the Warp capacities"
    info = models.info(name)
    assert (int(found[1]), int(found[2])) == (info.naconmax_per_world, info.njmax)
    # elliptic cones: pyramids make MJX and native MuJoCo part at the first contact
    assert models.load(name).opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC


def test_humanoid_has_at_least_twenty_degrees_of_freedom():
    m = models.load("humanoid")
    assert m.nv >= 20 and m.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE


# --- the tasks --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCENES)
def test_every_scene_has_a_task(name):
    found = tasks.for_model(name)
    assert found, f"scene {name!r} has no task in mjxrunner.tasks"
    for task in found:
        assert task.keyframe is None or task.keyframe in [
            models.load(name).key(i).name for i in range(models.load(name).nkey)
        ]


def _world(name, keyframe, qpos=None, qvel=None):
    """One world's host and device data at ``keyframe``, optionally moved."""
    m = models.load(name)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, keyframe))
    if qpos is not None:
        d.qpos[:] = qpos
    if qvel is not None:
        d.qvel[:] = qvel
    mujoco.mj_forward(m, d)
    return m, d, mjx.put_model(m, impl="jax"), mjx.put_data(m, d, impl="jax")


NEW_TASKS = [
    "acrobot_swingup",
    "reacher_reach",
    "hopper_hop",
    "ant_walk",
    "humanoid_walk",
    "puck_reach",
]
OBS_SIZE = {
    "puck_reach": 8,
    "acrobot_swingup": 6,
    "reacher_reach": 10,
    "hopper_hop": 11,
    "ant_walk": 27,
    "humanoid_walk": 53,
}


@pytest.mark.parametrize("task_name", NEW_TASKS)
def test_task_functions_on_one_world(task_name):
    task = tasks.get(task_name)
    m, _, mx, dx = _world(task.model, task.keyframe)
    obs = task.observation(mx, dx)
    assert obs.shape == (OBS_SIZE[task_name],) and jnp.isfinite(obs).all()
    action = jnp.zeros((m.nu,), dx.qpos.dtype)
    r = task.reward(mx, dx, action, dx)
    assert r.shape == () and jnp.isfinite(r)
    assert not task.terminated(mx, dx)  # the start is not terminal
    # different keys give different starts; the same key the same one
    a = task.initial_state(mx, dx, jax.random.key(0))
    b = task.initial_state(mx, dx, jax.random.key(1))
    again = task.initial_state(mx, dx, jax.random.key(0))
    assert not np.allclose(a.qpos, b.qpos)
    np.testing.assert_array_equal(a.qpos, again.qpos)
    assert not task.terminated(mx, a)
    assert a.qpos.dtype == dx.qpos.dtype and a.qpos.shape == dx.qpos.shape


@pytest.mark.parametrize(
    ("task_name", "fallen"),
    [
        ("hopper_hop", {1: -0.8}),  # torso centre at 0.45 m
        ("hopper_hop", {2: 0.6}),  # tilted by 0.6 rad
        ("ant_walk", {2: 0.2}),  # torso on the floor
        ("humanoid_walk", {2: 0.5}),  # torso at knee height
    ],
)
def test_falling_terminates(task_name, fallen):
    task = tasks.get(task_name)
    m = models.load(task.model)
    qpos = m.key_qpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, task.keyframe)].copy()
    for i, v in fallen.items():
        qpos[i] = v
    _, _, mx, dx = _world(task.model, task.keyframe, qpos=qpos)
    assert task.terminated(mx, dx)
    action = jnp.zeros((m.nu,), dx.qpos.dtype)
    _, _, _, standing = _world(task.model, task.keyframe)
    # falling forfeits the bonus for staying up
    assert task.reward(mx, standing, action, dx) < task.reward(mx, standing, action, standing)


@pytest.mark.parametrize("task_name", ["hopper_hop", "ant_walk", "humanoid_walk"])
def test_locomotion_rewards_forward_speed(task_name):
    task = tasks.get(task_name)
    m = models.load(task.model)
    action = jnp.zeros((m.nu,), jnp.float32)
    rewards = []
    for speed in (-1.0, 0.0, 1.0):
        qvel = np.zeros(m.nv)
        qvel[0] = speed
        _, _, mx, dx = _world(task.model, task.keyframe, qvel=qvel)
        rewards.append(float(task.reward(mx, dx, action, dx)))
    assert rewards[0] < rewards[1] < rewards[2]
    np.testing.assert_allclose(np.diff(rewards), 1.0, rtol=1e-5)  # 1 per m/s


def test_acrobot_reward_is_the_tip_height():
    task = tasks.get("acrobot_swingup")
    action = jnp.zeros((1,), jnp.float32)
    values = {}
    for label, qpos in {"up": [0, 0], "down": [np.pi, 0], "level": [np.pi / 2, 0]}.items():
        _, _, mx, dx = _world("acrobot", "hanging", qpos=qpos)
        values[label] = float(task.reward(mx, dx, action, dx))
    assert values["up"] == pytest.approx(1.0) and values["down"] == pytest.approx(0.0, abs=1e-6)
    assert values["level"] == pytest.approx(0.5, abs=1e-6)


def test_reacher_fingertip_matches_the_scene_and_targets_vary():
    from mjxrunner.tasks import reacher

    rng = np.random.default_rng(2)
    for _ in range(5):
        m, d, mx, dx = _world("reacher", "home", qpos=rng.uniform(-2.5, 2.5, 2))
        tip = d.site_xpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "fingertip")]
        np.testing.assert_allclose(reacher.fingertip(dx), tip[:2], atol=1e-6)
    task = tasks.get("reacher_reach")
    targets = np.array(
        [task.initial_state(mx, dx, jax.random.key(k)).mocap_pos[0] for k in range(20)]
    )
    radii = np.linalg.norm(targets[:, :2], axis=1)
    low, high = reacher.TARGET_RADII
    assert (radii >= low - 1e-6).all() and (radii <= high + 1e-6).all()
    assert np.unique(targets[:, 0]).size == 20 and (targets[:, 2] == 0).all()
    # reaching the target is the best reward
    on_target = dx.replace(mocap_pos=dx.mocap_pos.at[0, :2].set(reacher.fingertip(dx)))
    action = jnp.zeros((2,), jnp.float32)
    assert task.reward(mx, dx, action, on_target) > task.reward(mx, dx, action, dx)
    assert float(task.reward(mx, dx, action, on_target)) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("name", ["puck_blocks", "puck_steps"])
def test_puck_variants_share_everything_but_their_geoms(name):
    base, variant = models.load("puck"), models.load(name)
    assert models.info(name).variant_of == "puck" and models.info("puck").variant_of is None
    for size in ("nq", "nv", "nu", "nsensor", "nkey", "nmocap", "nbody"):
        assert getattr(variant, size) == getattr(base, size), size
    assert variant.ngeom > base.ngeom  # the structural difference
    assert tasks.for_model(name) == tasks.for_model("puck") == (tasks.get("puck_reach"),)
    # pushed along +x, the puck meets what the variant put in its way
    reached = []
    for m in (base, variant):
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, 0)
        d.ctrl[:] = (1.0, 0.0)
        highest = 0.0
        for _ in range(150):
            mujoco.mj_step(m, d)
            highest = max(highest, d.qpos[2])
        reached.append((d.qpos[0], highest))
    if name == "puck_blocks":
        assert reached[1][0] < 0.4 < reached[0][0]  # stopped by the block at x = 0.45
    else:
        assert reached[1][1] > 0.015 > reached[0][1]  # climbed the 2 cm step


def test_puck_targets_lie_in_their_ring_and_reaching_is_best():
    from mjxrunner.tasks import puck

    task = tasks.get("puck_reach")
    _, _, mx, dx = _world("puck", "home")
    starts = [task.initial_state(mx, dx, jax.random.key(k)) for k in range(20)]
    radii = np.array([np.linalg.norm(s.mocap_pos[0, :2]) for s in starts])
    low, high = puck.TARGET_RADII
    assert (radii >= low - 1e-6).all() and (radii <= high + 1e-6).all()
    assert max(float(np.linalg.norm(s.qpos[:2])) for s in starts) <= puck.START_RADIUS + 1e-6
    on_target = dx.replace(qpos=dx.qpos.at[:2].set(dx.mocap_pos[0, :2]))
    action = jnp.zeros((2,), jnp.float32)
    assert float(task.reward(mx, dx, action, on_target)) == pytest.approx(0.0, abs=1e-6)
    assert task.reward(mx, dx, action, on_target) > task.reward(mx, dx, action, dx)


# --- documentation ------------------------------------------------------------------------


def test_models_page_lists_every_scene_with_its_thumbnail():
    root = models.path("cartpole").parents[1]
    page = (root / "docs" / "models.md").read_text()
    for name in SCENES:
        image = root / "docs" / "images" / f"{name}.png"
        assert f"![{name}](images/{name}.png)" in page
        assert image.is_file() and image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert models.info(name).summary in page
