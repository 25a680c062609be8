"""Joystick tasks on the real robots: follow a commanded velocity with a gait.

``go1_joystick`` (Unitree Go1) and ``g1_joystick`` (Unitree G1) on flat ground,
on the scenes of :mod:`mjxrunner.engine.robots` (the ``robots`` extra);
``go1_joystick`` trains on a CPU: its scene is ``go1_cpu`` (PGS, impl ``"c"`` only, 4
physics steps of 5 ms a control step), its robot has a gait clock (a 2 Hz trot,
observed as the term ``gait`` and rewarded by :data:`GAIT_WEIGHTS`) and a mirror
image (``Task.mirror``, for symmetric policies); ``go1_joystick_mjx`` is the same task
on the scene ``go1``, which MJX runs (Newton, elliptic cones, 5 steps of 4 ms);
``g1_joystick`` trains the G1 on a CPU the same way: its scene is ``g1_cpu`` (12 leg
servos, waist and arms fixed, PGS), its clock a 1.25 Hz walk (the feet half a cycle
apart), with its legs' mirror image; ``g1_joystick_mjx`` is the 29-servo G1 on the
scene ``g1`` for MJX (its mirror image, no clock); and
``go1_joystick_rough``: the Go1 on the kit's tiled terrain (:data:`GO1_TERRAIN`)
with its level curriculum, as :mod:`.locomotion` runs the ant's (each world keeps
its column and moves up a level when it walked past half a tile, down when it
walked less than half its commanded distance; episodes start at the world's tile).
Each episode draws a command ``(vx, vy, yaw rate)`` in the robot's frame from
:class:`Legged.commands` (``g1_joystick`` draws a new one every 5 s); the action is
each joint's target as an offset from the standing pose (the scenes' position
actuators take it so: a zero action stands).

* **observation terms** (:data:`TERMS`): base linear and angular velocity in the
  base's frame, gravity in that frame, joint positions less the standing pose,
  joint velocities, the last action, the command; uniform sensor noise and the last
  3 joint readings (:data:`OBS_CONFIG`);
* **reward**, per second of control as :mod:`.locomotion` scales it (weights in
  :data:`WEIGHTS`): velocity and yaw-rate tracking ``exp(-error^2 / 0.25)``; and the
  usual shaping: vertical velocity, roll and pitch rates, base orientation, base
  height (from the standing height), joint torques, action rate, joints beyond 90 %
  of their range, feet air time (rewarded at touchdown, while a command asks to
  move), foot slip (horizontal speed of a foot on the ground). A step's reward is
  clipped at 0 from below, as MuJoCo Playground's joystick tasks clip it: with the
  penalties above the tracking terms, a policy would otherwise learn to fall at once
  (measured here: episodes of ~10 steps after 3.8 M steps of PPO);
* **termination** on a fall: the base below :attr:`Legged.min_height` or upside
  down;
* **the kit**: latency and pushes are env options (:data:`LATENCY`, :data:`PUSHES`);
  :func:`randomization` gives the usual domain randomization (floor friction, link
  masses, the base's centre of mass, joint offsets, motor strength) for
  ``env.with_randomization``.

Control at 50 Hz; episodes of 20 s. A foot is on the
ground when its site is within :attr:`Legged.contact_height` of the ground beneath
it; the base's height (its reward term and the fall) is measured the same way. The
observation is blind (no height scan) on both grounds, so one policy runs on both.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import checks, events, models, robots
from mjxrunner.engine.params import Term
from mjxrunner.kit import terrain
from mjxrunner.kit.observations import Noise, ObsConfig
from mjxrunner.kit.symmetry import Flip, Mirror
from mjxrunner.tasks.base import Task
from mjxrunner.tasks.locomotion import (  # the ant's velocity task: the same terms
    LATENCY,  # noqa: F401 - re-exported: the suggested latency
    TERMS,  # noqa: F401 - re-exported: the observation terms
    TRACKING_SIGMA,
    Commands,
    base_velocity,
    curriculum_hooks,
    height_above_ground,
    jittered_start,
    observe,
    projected_gravity,
    tracking_errors,
)

OBS_CONFIG = ObsConfig(
    noise={
        "base_lin_vel": Noise(std=0.1, distribution="uniform"),
        "base_ang_vel": Noise(std=0.2, distribution="uniform"),
        "projected_gravity": Noise(std=0.05, distribution="uniform"),
        "joint_pos": Noise(std=0.03, distribution="uniform"),
        "joint_vel": Noise(std=1.5, distribution="uniform"),
    },
    history={"joint_pos": 3, "joint_vel": 3},
)
"""Uniform sensor noise (half-widths in the terms' units) and the last 3 joint readings."""

PUSHES = events.Pushes(interval=(250, 500), velocity=((-0.5, 0.5), (-0.5, 0.5)))
"""Suggested pushes: a horizontal kick of up to 0.5 m/s every 5 to 10 s."""

WEIGHTS = {
    "track_lin_vel": 1.0,
    "track_yaw_rate": 0.5,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "orientation": -5.0,
    "base_height": -10.0,
    "torques": -2e-4,
    "action_rate": -0.01,
    "joint_limits": -1.0,
    "feet_air_time": 0.1,
    "foot_slip": -0.1,
}
"""The reward's terms and their weights."""

GAIT_WEIGHTS = {
    **{k: v for k, v in WEIGHTS.items() if k != "feet_air_time"},
    "track_lin_vel": 1.5,
    "track_yaw_rate": 0.8,
    "gait": 0.5,
}
"""The weights of a task on a robot with a gait clock: the clock's swing and stance
(``gait``) in place of the feet's air time, and the tracking terms above the rest."""

AIR_TIME_TARGET = 0.1
"""Seconds of swing the feet-air-time term counts from (shorter swings cost)."""

MOVING = 0.1
"""Commands slower than this (norm, m/s and rad/s) ask to stand: no air-time reward."""


GAIT_SIGMA = 0.01
"""``sigma`` of the gait term ``exp(-sum_feet (height - target)^2 / sigma)``, m^2."""


@dataclasses.dataclass(frozen=True)
class Gait:
    """A gait clock: the cycle runs at ``frequency`` Hz from the start of an episode
    (``data.time``), each foot at its own offset in it. A foot stands in the first
    half of its cycle and swings in the second, its target height above its standing
    height ``swing_height * max(0, -sin(2 pi phase))``.

    Attributes:
      frequency: cycles per second.
      offsets: each foot's phase offset, in cycles, in the order of ``Legged.feet``
        (a trot: the diagonal pairs half a cycle apart).
      swing_height: the swing's apex, m.
    """

    frequency: float
    offsets: tuple[float, ...]
    swing_height: float = 0.08

    def clock(self, time: jax.Array) -> jax.Array:
        """``(2,)`` the cycle's ``(sin, cos)`` at ``time``: what the policy observes."""
        angle = 2 * jnp.pi * self.frequency * time
        return jnp.stack([jnp.sin(angle), jnp.cos(angle)])

    def targets(self, time: jax.Array) -> jax.Array:
        """``(nfeet,)`` each foot's target height above its standing height at ``time``."""
        phase = self.frequency * time + jnp.asarray(self.offsets, time.dtype)
        return self.swing_height * jnp.maximum(0.0, -jnp.sin(2 * jnp.pi * phase))


@dataclasses.dataclass(frozen=True)
class Legged:
    """What a joystick task knows of its robot.

    Attributes:
      scene: the scene's name (``go1``, ``g1``).
      keyframe: its standing keyframe.
      feet: the feet's site names (the scene has ``<foot>_linvel`` sensors).
      base: the base body, whose centre of mass is randomized.
      min_height: the base's least height before the episode ends, m.
      contact_height: a foot's site at most this high is on the ground, m.
      commands: the command ranges.
      gait: None, or the gait clock the task observes and rewards.
      mirror: None, or the robot's joints mirrored left to right, for a symmetric
        robot: joint ``i`` of the image is ``sign[i]`` times joint ``perm[i]`` (a joint
        about the forward or vertical axis changes sign, one about the lateral axis
        keeps it).
    """

    scene: str
    keyframe: str
    feet: tuple[str, ...]
    base: str
    min_height: float
    contact_height: float
    commands: Commands
    gait: Gait | None = None
    mirror: Flip | None = None


GO1 = Legged(
    "go1",
    "home",
    tuple(robots.GO1_FEET),
    "trunk",
    min_height=0.15,
    contact_height=0.03,
    commands=Commands(vx=(-1.0, 1.0), vy=(-0.6, 0.6), yaw=(-1.0, 1.0)),
)
GO1_CPU = dataclasses.replace(
    GO1,
    scene="go1_cpu",
    commands=dataclasses.replace(GO1.commands, standing=0.1),
    gait=Gait(frequency=2.0, offsets=(0.0, 0.5, 0.5, 0.0)),  # FR, FL, RR, RL: a trot
    # legs FR, FL, RR, RL of (hip abduction, thigh, knee): right and left swap, and
    # abduction (about the forward axis) changes sign
    mirror=Flip(perm=(3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8), sign=(-1.0, 1.0, 1.0) * 4),
)
"""The Go1 as ``go1_joystick`` trains it on a CPU: the scene ``go1_cpu``
(:mod:`mjxrunner.engine.robots`), a 2 Hz trot clock, one episode in ten commanded to
stand, and its mirror image."""


G1_LEG_SIGNS = (1.0, -1.0, -1.0, 1.0, 1.0, -1.0)
"""A G1 leg's joints (hip pitch, roll, yaw, knee, ankle pitch, roll) in the mirror
image: a joint about the forward (roll) or vertical (yaw) axis changes sign."""


def _g1_mirror() -> Flip:
    """The G1's joints mirrored: legs (hip pitch, roll, yaw, knee, ankle pitch, roll),
    waist (yaw, roll, pitch) and arms (shoulder pitch, roll, yaw, elbow, wrist roll,
    pitch, yaw), left before right; right and left swap, and a joint about the forward
    (roll) or vertical (yaw) axis changes sign."""
    leg, waist, arm = G1_LEG_SIGNS, (-1, -1, 1), (1, -1, -1, 1, -1, 1, -1)
    legs, arms = list(range(6)), list(range(15, 22))
    perm = [i + 6 for i in legs] + legs + [12, 13, 14] + [i + 7 for i in arms] + arms
    return Flip(perm=tuple(perm), sign=leg + leg + waist + arm + arm)


G1 = Legged(
    "g1",
    "stand",
    tuple(robots.G1_FEET),
    "pelvis",
    min_height=0.5,
    contact_height=0.04,
    commands=Commands(vx=(-0.6, 1.0), vy=(-0.5, 0.5), yaw=(-0.8, 0.8)),
    mirror=_g1_mirror(),
)
"""The G1 on its MJX scene ``g1``: 29 servos (legs, waist, arms), no gait clock."""

G1_CPU = Legged(
    "g1_cpu",
    "stand",
    tuple(robots.G1_FEET),
    "pelvis",
    min_height=0.5,
    contact_height=0.04,
    commands=Commands(vx=(-0.5, 1.0), vy=(-0.3, 0.3), yaw=(-0.6, 0.6), standing=0.1),
    gait=Gait(frequency=1.25, offsets=(0.0, 0.5), swing_height=0.08),  # left, right
    mirror=Flip(perm=(*range(6, 12), *range(6)), sign=G1_LEG_SIGNS * 2),  # left legs first
)
"""The G1 as ``g1_joystick`` trains it on a CPU: the scene ``g1_cpu`` (12 leg servos,
waist and arms fixed; :mod:`mjxrunner.engine.robots`), a 1.25 Hz walking clock (the
feet half a cycle apart), one episode in ten commanded to stand, and its mirror
image."""


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Indices into the robot's model (static, read once from the host model)."""

    q0: np.ndarray  # (nq - 7,) the standing pose's joints
    base_height: float
    foot_sites: np.ndarray  # (nfeet,)
    foot_velocity: np.ndarray  # (nfeet, 3) sensordata indices of <foot>_linvel
    foot_height: np.ndarray  # (nfeet,) each foot site's height in the standing pose
    soft_low: np.ndarray  # (nq - 7,) 90 % of each joint's range
    soft_high: np.ndarray


@functools.cache
def _layout(robot: Legged) -> _Layout:
    m = models.load(robot.scene)
    key = m.key(robot.keyframe)
    sites = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, f) for f in robot.feet]
    sensors = [m.sensor(f"{f}_linvel") for f in robot.feet]
    low, high = m.jnt_range[1:, 0], m.jnt_range[1:, 1]
    mid, half = (low + high) / 2, (high - low) / 2
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, key.id)
    mujoco.mj_kinematics(m, d)
    return _Layout(
        q0=np.array(key.qpos[7:]),
        base_height=float(key.qpos[2]),
        foot_sites=np.array(sites),
        foot_velocity=np.array([s.adr[0] + np.arange(3) for s in sensors]),
        foot_height=d.site_xpos[sites, 2].copy(),
        soft_low=mid - 0.9 * half,
        soft_high=mid + 0.9 * half,
    )


@functools.cache
def _rough_scene(robot: Legged, config: terrain.TerrainConfig) -> tuple[bytes, terrain.Terrain]:
    """``robot``'s scene with its floor replaced by the terrain of ``config``, as MJB
    bytes, and the terrain; built once per process. The robot's bodies, joints,
    sites and sensors keep their ids (only the floor geom is replaced).

    Contact margins are 0 here (Menagerie's Go1 has 1 mm on every geom): MJX's jax
    impl has no margin for a heightfield against a sphere, and every impl should
    run the same scene."""
    m, ground = terrain.scene(config, robot=robot.scene)
    m.geom_margin[:] = 0.0
    return models.mjb_bytes(m).tobytes(), ground


def joystick_task(
    name: str,
    robot: Legged,
    *,
    ground: terrain.TerrainConfig | None = None,
    obs_config: ObsConfig | None = OBS_CONFIG,
    max_episode_steps: int = 1000,
    substeps: int = 5,
    resample_steps: int = 0,
) -> Task:
    """A joystick task for ``robot`` (see the module notes): on its scene's flat
    floor, or on the terrain of ``ground`` with the level curriculum. A robot with a
    gait clock (``robot.gait``) observes it (term ``gait``, zeros while the command
    is to stand) and is rewarded by :data:`GAIT_WEIGHTS`; a robot with a mirror
    (``robot.mirror``) gives the task its mirror image (``Task.mirror``). With
    ``resample_steps`` > 0 the command is drawn anew every that many control steps
    of an episode (:meth:`Commands.redraw`)."""
    if ground is not None and not isinstance(ground, terrain.TerrainConfig):
        raise TypeError(f"ground must be None or a TerrainConfig, got {type(ground).__name__}")
    checks.count(resample_steps, "resample_steps", minimum=0)
    nfeet = len(robot.feet)
    gait = robot.gait
    weights = WEIGHTS if gait is None else GAIT_WEIGHTS

    def ground_now() -> terrain.Terrain | None:
        return None if ground is None else _rough_scene(robot, ground)[1]

    def on_ground(data: mjx.Data) -> jax.Array:
        feet = data.site_xpos[_layout(robot).foot_sites]
        return height_above_ground(feet, ground_now()) < robot.contact_height

    def base_height(data: mjx.Data) -> jax.Array:
        return height_above_ground(data.qpos[:3], ground_now())

    def observation(model: mjx.Model, data: mjx.Data, info: dict) -> dict:
        del model
        terms = observe(data, info, jnp.asarray(_layout(robot).q0))
        if gait is not None:
            moving = jnp.linalg.norm(info["command"]) > MOVING
            terms["gait"] = moving * gait.clock(data.time).astype(data.qpos.dtype)
        return terms

    def reward_terms(model, action, next_data, info) -> dict:
        """Each term of the reward, unweighted."""
        layout = _layout(robot)
        command = info["command"]
        lin_err, yaw_err = tracking_errors(next_data, command)
        lin, ang = base_velocity(next_data)
        gravity = projected_gravity(next_data)
        q = next_data.qpos[7:]
        beyond = jnp.maximum(layout.soft_low - q, 0) + jnp.maximum(q - layout.soft_high, 0)
        contact = on_ground(next_data)
        first = contact & ~info["contact"]
        air = info["air_time"] + substeps * model.opt.timestep
        moving = jnp.linalg.norm(command) > MOVING
        foot_speed = next_data.sensordata[layout.foot_velocity][:, :2]
        terms = {
            "track_lin_vel": jnp.exp(-lin_err / TRACKING_SIGMA),
            "track_yaw_rate": jnp.exp(-yaw_err / TRACKING_SIGMA),
            "lin_vel_z": lin[2] ** 2,
            "ang_vel_xy": jnp.sum(ang[:2] ** 2),
            "orientation": jnp.sum(gravity[:2] ** 2),
            "base_height": (base_height(next_data) - layout.base_height) ** 2,
            "torques": jnp.sum(next_data.actuator_force**2),
            "action_rate": jnp.sum((action - info["last_action"]) ** 2),
            "joint_limits": jnp.sum(beyond),
            "feet_air_time": moving * jnp.sum((air - AIR_TIME_TARGET) * first),
            "foot_slip": jnp.sum(contact * jnp.sum(foot_speed**2, axis=-1)),
        }
        if gait is not None:  # the feet's heights against the clock's (all down to stand)
            feet = next_data.site_xpos[layout.foot_sites]
            height = height_above_ground(feet, ground_now()) - layout.foot_height
            target = moving * gait.targets(next_data.time)
            terms["gait"] = jnp.exp(-jnp.sum((height - target) ** 2) / GAIT_SIGMA)
        return {k: terms[k] for k in weights}

    def weighted(model, action, next_data, info) -> dict:
        """Each term of the reward as it enters the sum (per control step)."""
        dt = substeps * model.opt.timestep
        terms = reward_terms(model, action, next_data, info)
        return {k: dt * weights[k] * v for k, v in terms.items()}

    def reward(model, data, action, next_data, info) -> jax.Array:
        del data
        total = sum(weighted(model, action, next_data, info).values())
        return jnp.maximum(total, 0.0)  # never below 0: ending an episode early never pays

    def terminated(model, data, info) -> jax.Array:
        del model, info
        return (base_height(data) < robot.min_height) | (projected_gravity(data)[2] > 0)

    def initial_info(model, data, key) -> dict:
        dtype = data.qpos.dtype
        zero = jnp.zeros((), dtype)
        return {
            "command": robot.commands.draw(key, dtype),
            "last_action": jnp.zeros(model.nu, dtype),
            "steps": jnp.zeros((), jnp.int32),
            "air_time": jnp.zeros(nfeet, dtype),
            "contact": jnp.ones(nfeet, bool),
            "metrics": {
                "lin_vel_error": zero,
                "yaw_rate_error": zero,
                **{f"reward/{k}": zero for k in weights},
            },
        }

    def update_info(model, data, action, next_data, info, key) -> dict:
        del data
        dtype = info["command"].dtype
        lin_err, yaw_err = tracking_errors(next_data, info["command"])
        contact = on_ground(next_data)
        air = info["air_time"] + substeps * model.opt.timestep
        steps = info["steps"] + 1
        return {
            # the step's reward (below) is the old command's: the new one starts next step
            "command": robot.commands.redraw(info["command"], steps, resample_steps, key),
            "last_action": action.astype(dtype),
            "steps": steps,
            "air_time": jnp.where(contact, 0.0, air).astype(air.dtype),
            "contact": contact,
            "metrics": {
                "lin_vel_error": jnp.sqrt(lin_err),
                "yaw_rate_error": jnp.sqrt(yaw_err),
                # the reward's terms, weighted, logged per step: what to tune them by
                **{
                    f"reward/{k}": v.astype(dtype)
                    for k, v in weighted(model, action, next_data, info).items()
                },
            },
        }

    def initial_state(model, data, key, spawn=None) -> mjx.Data:
        """Joints jittered about the standing pose, a random heading, small
        velocities; the base moved by ``spawn`` (on a terrain: to the world's tile)."""
        del model
        return jittered_start(data, key, 0.05, 0.05, spawn)

    common = {
        "name": name,
        "observation": observation,
        "reward": reward,
        "terminated": terminated,
        "max_episode_steps": max_episode_steps,
        "keyframe": robot.keyframe,
        "substeps": substeps,
        # observation and termination read qpos and qvel only (reward and the feet
        # read the data after a step): no forward pass per restart, nor its compile
        "forward_on_reset": False,
        "obs_config": obs_config,
        "initial_info": initial_info,
        "update_info": update_info,
        "mirror": None if robot.mirror is None else mirror_of(robot.mirror, gait is not None),
    }
    if ground is None:
        return Task(model=robot.scene, initial_state=initial_state, **common)

    def build() -> mujoco.MjModel:
        return models.from_mjb(np.frombuffer(_rough_scene(robot, ground)[0], np.uint8))

    hooks = curriculum_hooks(build, ground_now, max_episode_steps, substeps, initial_state)
    return Task(**hooks, **common)


def mirror_of(joints: Flip, gait: bool) -> Mirror:
    """The joystick task's mirror image, from its robot's joints': the base's
    velocities and gravity in its frame reflected across its sagittal plane (a
    velocity's lateral part, a rate's roll and yaw parts change sign), the command's
    ``vy`` and yaw rate, and the clock half a cycle on (the mirror's right feet are
    the robot's left ones)."""
    vector, rate = Flip.signs(1, -1, 1), Flip.signs(-1, 1, -1)
    terms = {
        "base_lin_vel": vector,
        "base_ang_vel": rate,
        "projected_gravity": vector,
        "joint_pos": joints,
        "joint_vel": joints,
        "last_action": joints,
        "command": Flip.signs(1, -1, -1),
    }
    if gait:
        terms["gait"] = Flip.signs(-1, -1)
    return Mirror(terms=terms, action=joints)


def randomization(robot: Legged, model: mujoco.MjModel | None = None) -> list[Term]:
    """The usual domain randomization of a legged robot, for
    ``env.with_randomization``: floor friction 0.4 to 1.0, link masses x0.9 to 1.1,
    the base's centre of mass within 5 cm, joint offsets (``qpos0``) within
    0.05 rad, motor strength (each actuator's gear, which scales its whole force)
    x0.9 to 1.1, and the servos' stiffness ``kp`` x0.8 to 1.2.

    A position servo's stiffness sits in three fields: its gain ``kp``, the bias
    ``-kp * q`` and the bias ``kp * q0`` that makes a zero action hold the standing
    pose. Three terms linked as ``"kp"`` draw one factor per actuator for all three,
    so the pose a servo holds stays where it was.

    ``model`` is the task's scene (``task.load_model()``), the robot's flat scene if
    None; its ground is the colliding geom of the world body (floor or terrain)."""
    m = models.load(robot.scene) if model is None else model
    ground = np.flatnonzero((m.geom_bodyid == 0) & ((m.geom_contype | m.geom_conaffinity) > 0))
    if len(ground) != 1:
        raise ValueError(f"expected one colliding geom of the world body, found {len(ground)}")
    base = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, robot.base)
    return [
        Term("geom_friction", 0.4, 1.0, operation="set", index=(int(ground[0]), 0)),
        Term("body_mass", 0.9, 1.1),
        Term("body_ipos", -0.05, 0.05, operation="add", index=base),
        Term("qpos0", -0.05, 0.05, operation="add", index=np.s_[7:]),
        Term("actuator_gear", 0.9, 1.1, index=np.s_[:, 0]),
        *(Term(field, 0.8, 1.2, index=np.s_[:, i], link="kp") for field, i in KP_FIELDS),
    ]


KP_FIELDS = (("actuator_gainprm", 0), ("actuator_biasprm", 0), ("actuator_biasprm", 1))
"""Where a position servo's stiffness ``kp`` is: its gain, and the bias terms
``kp * q0`` and ``-kp * q``."""


GO1_TERRAIN = terrain.TerrainConfig(border=10.0)
"""The terrain of ``go1_joystick_rough``: the kit's default tiles (six types, six
levels of 4 m; stairs up to 14 cm, slopes up to 25 degrees, rough ground up to
6 cm) with a 10 m flat border, since a command of 1 m/s over a 20 s episode can
carry the robot that far off its tile. A world that walks off the grid falls and
its episode ends."""

GO1_JOYSTICK = joystick_task("go1_joystick", GO1_CPU, substeps=4)
GO1_JOYSTICK_MJX = joystick_task("go1_joystick_mjx", dataclasses.replace(GO1_CPU, scene="go1"))
# a new command every 5 s: measured, a G1 trained on one command an episode fell in
# 31 % of episodes when its command changed (benchmarks/results/g1_walk.md)
G1_JOYSTICK = joystick_task("g1_joystick", G1_CPU, substeps=4, resample_steps=250)
G1_JOYSTICK_MJX = joystick_task("g1_joystick_mjx", G1)
GO1_JOYSTICK_ROUGH = joystick_task("go1_joystick_rough", GO1, ground=GO1_TERRAIN)

TASKS = (GO1_JOYSTICK, GO1_JOYSTICK_MJX, G1_JOYSTICK, G1_JOYSTICK_MJX, GO1_JOYSTICK_ROUGH)
