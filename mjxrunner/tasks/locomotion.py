"""Velocity tracking for the ant: a locomotion task built from the sim-to-real kit.

Each episode draws a command ``(vx, vy, yaw rate)`` (body frame, m/s and rad/s) from
the world's own stream; the ant is rewarded for matching it. What the task uses:

* **observation terms** (a dict; :data:`TERMS`): the torso's linear and angular
  velocity in its own frame, gravity projected into that frame, joint positions and
  velocities, the last action and the command;
* **sensor noise and history** (:data:`OBS_CONFIG`): uniform noise on every sensed
  term, the last 3 joint readings;
* **task state** (``info``): the command, the last action, a step counter (commands
  may be redrawn every ``resample_steps``) and the step's tracking errors
  (``info["metrics"]``, for logging);
* **reward**: tracking terms ``exp(-error^2 / sigma)`` for the horizontal velocity
  (weight 1) and the yaw rate (weight 0.5), as Isaac Lab's and MuJoCo Playground's
  velocity tasks use, minus small penalties (vertical velocity, roll and pitch
  rates, action rate, action size), times the control step (0.02 s): a perfect
  step earns 0.03, a perfect 10 s episode 15;
* **termination** when the torso is less than 0.3 m above the ground beneath it
  (the sphere's radius is 0.25 m) or upside down;
* **terrain and curriculum** (:func:`velocity_task` with a
  :class:`~mjxrunner.kit.terrain.TerrainConfig`): the scene is the ant with sphere feet
  on a generated heightfield; each world keeps its level, column and spawn point
  across episodes (``EnvState.curriculum``), moved by the terrain's rule at every
  restart (walked past half a tile: up; less than half the commanded distance,
  speed times the episode's full duration: down), and each episode starts at the
  world's spawn point;
* **latency and pushes** are env options (:data:`LATENCY`, :data:`PUSHES` are the
  suggested ones): ``mjxenv.make("ant_velocity", n, latency=LATENCY,
  pushes=PUSHES)``.

Registered: ``ant_velocity`` (flat ground) and ``ant_velocity_terrain`` (the default
:class:`~mjxrunner.kit.terrain.TerrainConfig`), both on the ant with sphere feet
(:data:`mjxrunner.kit.terrain.ANT_FEET`; on a heightfield they cost a fraction of the
shin capsules, and the flat variant keeps the same contacts) and joint position
servos (:func:`position_control`: the action is a target per joint). Their scenes
are generated, so ``Task.model`` is a builder. Control at 50 Hz (4 physics steps of
5 ms), episodes of 10 s.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import checks, events, models
from mjxrunner.kit import terrain
from mjxrunner.kit.observations import Noise, ObsConfig
from mjxrunner.tasks.base import Task

TERMS = (
    "base_lin_vel",
    "base_ang_vel",
    "projected_gravity",
    "joint_pos",
    "joint_vel",
    "last_action",
    "command",
)
"""The observation's terms, in the order a policy concatenates them."""

OBS_CONFIG = ObsConfig(
    noise={
        "base_lin_vel": Noise(std=0.1, distribution="uniform"),
        "base_ang_vel": Noise(std=0.2, distribution="uniform"),
        "projected_gravity": Noise(std=0.05, distribution="uniform"),
        "joint_pos": Noise(std=0.01, distribution="uniform"),
        "joint_vel": Noise(std=0.5, distribution="uniform"),
    },
    history={"joint_pos": 3, "joint_vel": 3},
)
"""Uniform sensor noise (half-widths in the terms' units) and the last 3 joint
readings."""

LATENCY = events.Latency(0, 1)
"""A suggested action latency: 0 or 1 control step (0 to 20 ms), drawn per episode."""

PUSHES = events.Pushes(interval=(150, 300), velocity=((-0.5, 0.5), (-0.5, 0.5)))
"""Suggested pushes: a horizontal kick of up to 0.5 m/s every 3 to 6 s."""


@dataclasses.dataclass(frozen=True)
class Commands:
    """The command ranges, each ``(low, high)``, drawn uniformly.

    Attributes:
      vx: forward speed in the torso's frame, m/s.
      vy: sideways speed, m/s.
      yaw: yaw rate, rad/s.
      standing: the chance that a draw is the zero command (stand still), which a
        uniform draw almost never gives.
    """

    vx: tuple[float, float] = (-0.5, 0.5)
    vy: tuple[float, float] = (-0.5, 0.5)
    yaw: tuple[float, float] = (-0.5, 0.5)
    standing: float = 0.0

    def draw(self, key: jax.Array, dtype) -> jax.Array:
        """``(3,)`` one command ``(vx, vy, yaw rate)``."""
        low = jnp.array([self.vx[0], self.vy[0], self.yaw[0]], dtype)
        high = jnp.array([self.vx[1], self.vy[1], self.yaw[1]], dtype)
        if not self.standing:
            return jax.random.uniform(key, (3,), dtype, low, high)
        k_draw, k_stand = jax.random.split(key)
        command = jax.random.uniform(k_draw, (3,), dtype, low, high)
        return jnp.where(jax.random.uniform(k_stand) < self.standing, 0.0, command).astype(dtype)

    def redraw(self, command: jax.Array, steps: jax.Array, every: int, key: jax.Array) -> jax.Array:
        """``command`` after the episode's ``steps``-th step: drawn anew every ``every``
        steps (never if ``every`` is 0), so a policy learns the changes of command it
        will be given, not one command an episode."""
        if not every:
            return command
        return jnp.where(steps % every == 0, self.draw(key, command.dtype), command)


TRACKING_SIGMA = 0.25
"""``sigma`` of the tracking terms ``exp(-error^2 / sigma)`` (m/s and rad/s squared)."""

MIN_HEIGHT = 0.3
"""Least height of the torso's centre above the ground beneath it, in metres."""

WEIGHTS = {
    "track_lin_vel": 1.0,
    "track_yaw_rate": 0.5,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "action_rate": -0.01,
    "action": -0.005,
}
"""The reward's terms and their weights."""


# --- frames --------------------------------------------------------------------------------


def rotate_inverse(quat: jax.Array, v: jax.Array) -> jax.Array:
    """``R(quat)^T v``: a world vector in the frame of the unit quaternion ``quat``
    (MuJoCo's ``(w, x, y, z)``)."""
    w, u = quat[0], -quat[1:]  # the conjugate rotates back
    t = 2.0 * jnp.cross(u, v)
    return v + w * t + jnp.cross(u, t)


def base_velocity(data: mjx.Data) -> tuple[jax.Array, jax.Array]:
    """``(linear, angular)`` velocity of the torso in its own frame, each ``(3,)``.
    A free joint's ``qvel`` holds the linear velocity in the world frame and the
    angular one in the body frame."""
    return rotate_inverse(data.qpos[3:7], data.qvel[:3]), data.qvel[3:6]


def tracking_errors(data: mjx.Data, command: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Squared horizontal-velocity and yaw-rate errors of the base against ``command``
    ``(vx, vy, yaw rate)`` in its frame."""
    lin, ang = base_velocity(data)
    return jnp.sum((command[:2] - lin[:2]) ** 2), (command[2] - ang[2]) ** 2


def projected_gravity(data: mjx.Data) -> jax.Array:
    """``(3,)`` the unit gravity direction in the torso's frame (``(0, 0, -1)`` upright)."""
    down = jnp.array([0.0, 0.0, -1.0], data.qpos.dtype)
    return rotate_inverse(data.qpos[3:7], down)


def yaw_quaternion(angle: jax.Array) -> jax.Array:
    """``(4,)`` a rotation by ``angle`` about the world's z axis."""
    half = 0.5 * angle
    return jnp.stack([jnp.cos(half), jnp.zeros_like(half), jnp.zeros_like(half), jnp.sin(half)])


# --- observation and start of a legged robot on a free joint ----------------------------


def observe(data: mjx.Data, info: dict, standing: jax.Array | None = None) -> dict:
    """The terms of :data:`TERMS` of one world (``info`` holds the last action and
    the command); joint positions less ``standing``, the standing pose's joints, if
    given."""
    lin, ang = base_velocity(data)
    joints = data.qpos[7:]
    return {
        "base_lin_vel": lin,
        "base_ang_vel": ang,
        "projected_gravity": projected_gravity(data),
        "joint_pos": joints if standing is None else joints - standing.astype(joints.dtype),
        "joint_vel": data.qvel[6:],
        "last_action": info["last_action"],
        "command": info["command"],
    }


def jittered_start(
    data: mjx.Data, key: jax.Array, joints: float, speed: float, spawn: jax.Array | None = None
) -> mjx.Data:
    """``data`` with its joints moved by up to ``joints`` rad, velocities of
    ``speed`` times a standard normal draw, a random heading, and its base moved by
    ``spawn`` if given."""
    k_pos, k_vel, k_yaw = jax.random.split(key, 3)
    dtype = data.qpos.dtype
    qpos = data.qpos
    moved = qpos[7:] + jax.random.uniform(k_pos, qpos[7:].shape, dtype, -joints, joints)
    yaw = jax.random.uniform(k_yaw, (), dtype, -jnp.pi, jnp.pi)
    root = qpos[:3] if spawn is None else qpos[:3] + spawn.astype(dtype)
    qpos = jnp.concatenate([root, yaw_quaternion(yaw).astype(dtype), moved])
    qvel = speed * jax.random.normal(k_vel, data.qvel.shape, dtype)
    return data.replace(qpos=qpos, qvel=qvel)


# --- the terrain --------------------------------------------------------------------------


KP, KV = 25.0, 0.5
"""The joint servos' stiffness (Nm/rad) and damping (Nm s/rad)."""


def position_control(m: mujoco.MjModel) -> mujoco.MjModel:
    """``m`` (in place) with the ant's motors turned into joint position servos:
    torque ``KP * (target - q) - KV * dq`` limited to the motors' 15 Nm (gear 15 at
    control 1), the action being the target within the joint's range. Legged robots
    are commanded so in Isaac Lab and MuJoCo Playground: a zero action holds the
    standing pose, and random actions keep the ant up (torso above 0.33 m over 20 s,
    measured natively; with torques it falls to 0.25 m), so exploring finds gaits."""
    joint = m.actuator_trnid[:, 0]
    limit = m.actuator_gear[:, 0] * np.abs(m.actuator_ctrlrange).max(axis=1)
    m.actuator_gear[:, 0] = 1.0
    m.actuator_gainprm[:, 0] = KP
    m.actuator_biastype[:] = mujoco.mjtBias.mjBIAS_AFFINE
    m.actuator_biasprm[:, :3] = [0.0, -KP, -KV]
    m.actuator_forcelimited[:] = 1
    m.actuator_forcerange[:] = np.stack([-limit, limit], axis=1)
    m.actuator_ctrllimited[:] = 1
    m.actuator_ctrlrange[:] = m.jnt_range[joint]
    return m


@functools.cache
def _terrain(config: terrain.TerrainConfig | None) -> tuple[bytes, terrain.Terrain | None]:
    """The scene's MJB bytes and its terrain (None: flat ground), built once per
    config: the ant with sphere feet and joint servos, on the terrain or on its own
    floor."""
    if config is None:
        m, ground = terrain.flat_scene("ant", terrain.ANT_FEET), None
    else:
        m, ground = terrain.scene(config, feet=terrain.ANT_FEET)
    return models.mjb_bytes(position_control(m)).tobytes(), ground


def terrain_of(task: Task) -> terrain.Terrain | None:
    """The terrain a task walks on (None: flat ground, or a task not built on a
    terrain here), known by the task's scene builder."""
    ground = _TERRAINS.get(task.model) if callable(task.model) else None
    return None if ground is None else ground()


_TERRAINS: dict = {}  # scene builder -> () -> its Terrain


@functools.cache
def _surface(ground: terrain.Terrain, dtype: np.dtype) -> np.ndarray:
    """``ground.heights`` as one array per dtype, so every read of the surface in a
    traced function shares one constant: a fresh ``jnp.asarray`` per call put six
    0.8 MB copies of the grid into ``go1_joystick_rough``'s step."""
    return np.asarray(ground.heights, dtype)


def height_above_ground(xyz: jax.Array, ground: terrain.Terrain | None) -> jax.Array:
    """``(...,)`` heights of points ``xyz`` ``(..., 3)`` above the ground beneath
    them: ``ground``'s surface, or the plane z = 0 if it is None."""
    if ground is None:
        return xyz[..., 2]
    heights = jnp.asarray(_surface(ground, xyz.dtype))
    below = terrain.ground_height(heights, ground.corner, ground.config.resolution, xyz[..., :2])
    return xyz[..., 2] - below


def curriculum_hooks(
    build, ground, max_episode_steps: int, substeps: int, initial_state
) -> dict[str, object]:
    """The :class:`Task` fields of a task on a terrain with the level curriculum:
    ``build`` (its scene builder) registered for :func:`terrain_of`, episodes started
    by ``initial_state(model, data, key, spawn)`` at the world's spawn point, and the
    terrain's rule at every restart, the commanded distance being the command's
    horizontal speed (``info["command"][:2]``) over the episode's full duration.

    Args:
      build: the task's scene builder (``Task.model``).
      ground: ``() -> Terrain``, the scene's terrain (built on first use).
      max_episode_steps, substeps: the task's.
      initial_state: ``(model, data, key, spawn (3,)) -> data``.
    """
    _TERRAINS[build] = ground

    def start_on_tile(model, data, key, state: terrain.Curriculum) -> mjx.Data:
        return initial_state(model, data, key, state.spawn)

    def initial_curriculum(model, key, world) -> terrain.Curriculum:
        del model
        return terrain.start_world(key, world, ground().origins, ground().config)

    def update_curriculum(model, data, info, state, key) -> terrain.Curriculum:
        seconds = max_episode_steps * substeps * model.opt.timestep
        commanded = jnp.linalg.norm(info["command"][:2]) * seconds
        t = ground()
        return terrain.end_episode(state, key, data.qpos[:3], commanded, t.origins, t.config)

    return {
        "model": build,
        "initial_state": start_on_tile,
        "initial_curriculum": initial_curriculum,
        "update_curriculum": update_curriculum,
    }


# --- the task -----------------------------------------------------------------------------


@functools.cache
def velocity_task(
    name: str = "ant_velocity",
    ground: terrain.TerrainConfig | None = None,
    *,
    commands: Commands = Commands(),
    obs_config: ObsConfig | None = OBS_CONFIG,
    resample_steps: int = 0,
    max_episode_steps: int = 500,
    substeps: int = 4,
) -> Task:
    """The ant's velocity-tracking task, on flat ground or on a terrain.

    Equal arguments give the same :class:`Task` (cached), so envs of it share
    compiled functions.

    Args:
      name: the task's name.
      ground: None for flat ground (the scene ``ant``), or the terrain to generate
        (the ant with sphere feet on it) with a curriculum over its levels.
      commands: the command ranges.
      obs_config: noise and history of the observation terms (None: exact, no
        history).
      resample_steps: if > 0, a new command every that many steps of an episode.
      max_episode_steps: episode length in control steps; the curriculum's
        commanded distance is the command's speed times this duration, whatever
        ``Task.replace`` changes later.
      substeps: physics steps (5 ms each) per control step.

    Raises:
      TypeError, ValueError: arguments of the wrong kind or out of range.
    """
    if ground is not None and not isinstance(ground, terrain.TerrainConfig):
        raise TypeError(f"ground must be None or a TerrainConfig, got {type(ground).__name__}")
    if not isinstance(commands, Commands):
        raise TypeError(f"commands must be a Commands, got {type(commands).__name__}")
    for field in ("vx", "vy", "yaw"):
        lo, hi = getattr(commands, field)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ValueError(f"Commands.{field} must be finite (low, high), got {(lo, hi)}")
    if not 0.0 <= commands.standing <= 1.0:
        raise ValueError(f"Commands.standing must be in [0, 1], got {commands.standing}")
    checks.count(resample_steps, "resample_steps", minimum=0)

    def ground_now() -> terrain.Terrain | None:
        return None if ground is None else _terrain(ground)[1]

    def observation(model: mjx.Model, data: mjx.Data, info: dict) -> dict:
        del model
        return observe(data, info)  # the keyframe's joints are at 0

    def reward(model, data, action, next_data, info) -> jax.Array:
        del data
        lin_err, yaw_err = tracking_errors(next_data, info["command"])
        lin, ang = base_velocity(next_data)
        terms = {
            "track_lin_vel": jnp.exp(-lin_err / TRACKING_SIGMA),
            "track_yaw_rate": jnp.exp(-yaw_err / TRACKING_SIGMA),
            "lin_vel_z": lin[2] ** 2,
            "ang_vel_xy": jnp.sum(ang[:2] ** 2),
            "action_rate": jnp.sum((action - info["last_action"]) ** 2),
            "action": jnp.sum(action**2),
        }
        # per second of control, as Isaac Lab and Playground scale theirs: returns stay
        # O(10) whatever the control rate, so the critic's loss does not swamp the
        # policy's gradient under a global-norm clip
        return substeps * model.opt.timestep * sum(WEIGHTS[k] * v for k, v in terms.items())

    def terminated(model, data, info) -> jax.Array:
        del model, info
        upside_down = projected_gravity(data)[2] > 0
        return (height_above_ground(data.qpos[:3], ground_now()) < MIN_HEIGHT) | upside_down

    def initial_info(model, data, key) -> dict:
        dtype = data.qpos.dtype
        zero = jnp.zeros((), dtype)
        return {
            "command": commands.draw(key, dtype),
            "last_action": jnp.zeros(model.nu, dtype),
            "steps": jnp.zeros((), jnp.int32),
            "metrics": {"lin_vel_error": zero, "yaw_rate_error": zero},
        }

    def update_info(model, data, action, next_data, info, key) -> dict:
        del model, data
        lin_err, yaw_err = tracking_errors(next_data, info["command"])
        steps = info["steps"] + 1
        command = commands.redraw(info["command"], steps, resample_steps, key)
        return {
            "command": command,
            "last_action": action.astype(command.dtype),
            "steps": steps,
            "metrics": {"lin_vel_error": jnp.sqrt(lin_err), "yaw_rate_error": jnp.sqrt(yaw_err)},
        }

    def start(model, data, key, spawn=None) -> mjx.Data:
        del model
        return jittered_start(data, key, 0.1, 0.1, spawn)

    def build() -> mujoco.MjModel:
        return models.from_mjb(np.frombuffer(_terrain(ground)[0], np.uint8))

    common = {
        "name": name,
        "observation": observation,
        "reward": reward,
        "terminated": terminated,
        "max_episode_steps": max_episode_steps,
        "keyframe": "stand",
        "substeps": substeps,
        # everything reads qpos/qvel only: no forward pass (nor its compile) per restart
        "forward_on_reset": False,
        "obs_config": obs_config,
        "initial_info": initial_info,
        "update_info": update_info,
    }
    if ground is None:
        return Task(model=build, initial_state=start, **common)
    hooks = curriculum_hooks(build, ground_now, max_episode_steps, substeps, start)
    return Task(**hooks, **common)


VELOCITY = velocity_task("ant_velocity")
VELOCITY_TERRAIN = velocity_task("ant_velocity_terrain", terrain.TerrainConfig())

TASKS = (VELOCITY, VELOCITY_TERRAIN)
