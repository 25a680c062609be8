"""Registry of the scenes and loading of any model source.

The scenes are the MJCF files in ``models/`` and the real robots of
:mod:`mjxrunner.engine.robots` (``go1``, ``g1``: Menagerie's robots in scenes of
ours, written into the cache on first use; they need the ``robots`` extra). Each
scene has a :class:`ModelInfo`: a one-line summary, whether it has contacts, the
MJX-Warp capacities it needs, its default keyframe and the camera to render it with.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np

from mjxrunner.engine import robots

ALL_IMPLS = ("jax", "warp", "c")
"""The impls a scene runs on unless its :class:`ModelInfo` says otherwise."""


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What the registry knows about one scene in ``models/``.

    Attributes:
      name: the registry name (the file name without ``.xml``).
      summary: one line for listings (README, ``mjxrunner models``).
      contacts: whether the scene has contacts (some geom pair can collide).
      naconmax_per_world: contacts one world can produce at most. MJX-Warp's
        ``naconmax`` pools contacts of all worlds, so size it
        ``num_envs * naconmax_per_world``.
      njmax: constraint rows one world can produce at most (MJX-Warp's per-world
        ``njmax``).
      keyframe: the keyframe tasks and demos start from.
      camera: the named camera that frames the scene; renders use it by default.
      variant_of: None, or the scene this one is a structural variant of: the same
        joints, actuators, sensors and keyframes with other geoms, so that scene's
        tasks run on it (``mjxrunner.env.make(task, n, model=name)``) and the two
        can be groups of one heterogeneous runner or env.
      impls: the impls that run the scene (``("c",)`` for one MJX cannot, such as a
        scene on MuJoCo's PGS solver); a Gymnasium id of a task on it defaults to
        the first.

    The two capacities are the sizes MJX's jax impl preallocates for the scene, which
    are upper bounds (every candidate geom pair at its most contacts, every limit
    active). A native MuJoCo run with random controls uses
    about half of them (``python scripts/contact_capacity.py`` prints both).
    """

    name: str
    summary: str
    contacts: bool
    naconmax_per_world: int
    njmax: int
    keyframe: str
    camera: str
    variant_of: str | None = None
    impls: tuple[str, ...] = ALL_IMPLS


_INFO = {
    info.name: info
    for info in (
        ModelInfo(
            "acrobot",
            "two links, motor at the elbow only: swing up through the coupling",
            contacts=False,
            naconmax_per_world=0,
            njmax=0,
            keyframe="hanging",
            camera="front",
        ),
        ModelInfo(
            "ant",
            "quadruped on a free joint, 8 motors, torso and shins touch the floor",
            contacts=True,
            naconmax_per_world=9,
            njmax=35,
            keyframe="stand",
            camera="track",
        ),
        ModelInfo(
            "cartpole",
            "cart on a rail with a hinged pole, one motor pushes the cart",
            contacts=False,
            naconmax_per_world=0,
            njmax=1,
            keyframe="upright",
            camera="side",
        ),
        ModelInfo(
            "g1",
            "Unitree G1 humanoid (Menagerie), 29 position actuators, feet on a floor",
            contacts=True,
            naconmax_per_world=8,
            njmax=90,
            keyframe="stand",
            camera="track",
        ),
        ModelInfo(
            "g1_cpu",
            "the G1 as a CPU trains it: 12 leg servos, waist and arms fixed, PGS, "
            "pyramidal cones (impl c only)",
            contacts=True,
            naconmax_per_world=8,
            njmax=44,
            keyframe="stand",
            camera="track",
            impls=("c",),
        ),
        ModelInfo(
            "go1",
            "Unitree Go1 quadruped (Menagerie), 12 position actuators, feet on a floor",
            contacts=True,
            naconmax_per_world=4,
            njmax=48,
            keyframe="home",
            camera="track",
        ),
        ModelInfo(
            "go1_cpu",
            "the Go1 as a CPU trains it: PGS, pyramidal cones, feet of condim 3, rotor "
            "armature (impl c only)",
            contacts=True,
            naconmax_per_world=4,
            njmax=28,
            keyframe="home",
            camera="track",
            impls=("c",),
        ),
        ModelInfo(
            "hopper",
            "planar one-legged hopper, 3 motors, capsule-floor contacts",
            contacts=True,
            naconmax_per_world=8,
            njmax=27,
            keyframe="stand",
            camera="track",
        ),
        ModelInfo(
            "humanoid",
            "27-dof humanoid on a free joint, 21 motors, contacts with the floor",
            contacts=True,
            naconmax_per_world=15,
            njmax=66,
            keyframe="stand",
            camera="track",
        ),
        ModelInfo(
            "pendulum",
            "torque-limited pendulum: too weak to lift the bob directly",
            contacts=False,
            naconmax_per_world=0,
            njmax=1,
            keyframe="down",
            camera="front",
        ),
        ModelInfo(
            "puck",
            "a sphere pushed over a flat floor by two motors onto a mocap target",
            contacts=True,
            naconmax_per_world=1,
            njmax=3,
            keyframe="home",
            camera="top",
        ),
        ModelInfo(
            "puck_blocks",
            "the puck among four fixed blocks: a structural variant of puck",
            contacts=True,
            naconmax_per_world=5,
            njmax=15,
            keyframe="home",
            camera="top",
            variant_of="puck",
        ),
        ModelInfo(
            "puck_steps",
            "the puck ringed by four low steps: a structural variant of puck",
            contacts=True,
            naconmax_per_world=5,
            njmax=15,
            keyframe="home",
            camera="top",
            variant_of="puck",
        ),
        ModelInfo(
            "reacher",
            "two-link planar arm reaching a per-world mocap target",
            contacts=False,
            naconmax_per_world=0,
            njmax=1,
            keyframe="home",
            camera="top",
        ),
    )
}


def _models_dir() -> Path:
    package = Path(__file__).resolve().parents[1]  # mjxrunner/
    packaged = package / "_models"  # wheel installs carry a copy
    return packaged if packaged.is_dir() else package.parent / "models"


def list() -> list[str]:  # noqa: A001 - the registry's verb, as in mjxrunner.models.list()
    """Names of the scenes: ``models/`` and the robots, sorted."""
    return sorted([p.stem for p in _models_dir().glob("*.xml")] + [*robots.ROBOTS])


def path(name: str) -> Path:
    """The MJCF file of scene ``name`` (a robot's is written into the cache on first
    use; without the ``robots`` extra, a ``ValueError`` says how to install it)."""
    if not isinstance(name, str):
        raise TypeError(f"model name must be a str, got {type(name).__name__}")
    if name in robots.ROBOTS:
        i = _INFO[name]
        return robots.scene_path(
            name,
            f"{i.summary}. MJX-Warp capacities: naconmax per world {i.naconmax_per_world}, "
            f"njmax {i.njmax}.",
        )
    file = _models_dir() / f"{name}.xml"
    if not file.is_file():
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(list())}")
    return file


def info(name: str) -> ModelInfo:
    """The registry's :class:`ModelInfo` for scene ``name``.

    Raises:
      TypeError: ``name`` is not a str.
      ValueError: ``name`` is not a scene in ``models/`` or has no registry entry.
    """
    path(name)  # the same checks and message as for an unknown file
    if name not in _INFO:
        raise ValueError(f"model {name!r} has no registry entry in mjxrunner.models")
    return _INFO[name]


def impls(name: str) -> tuple[str, ...]:
    """The impls that run scene ``name`` (``ModelInfo.impls``; every impl for a name
    the registry does not describe). Reads no file: a robot's scene is not written,
    nor its assets package imported, so it is safe at import time."""
    return _INFO[name].impls if name in _INFO else ALL_IMPLS


def load(name: str) -> mujoco.MjModel:
    """Compiles scene ``name`` into an ``MjModel``."""
    return mujoco.MjModel.from_xml_path(str(path(name)))


def load_any(source: mujoco.MjModel | mujoco.MjSpec | str | os.PathLike) -> mujoco.MjModel:
    """An ``MjModel`` from a model, an ``MjSpec`` (compiled), a registry name, an
    MJCF/MJB path or MJCF text.

    ``<include file=...>`` paths resolve relative to the directory of the model
    file (MuJoCo's rule, also for includes inside included files), never the working
    directory. MJCF text has no file, so its includes must be absolute paths.

    Raises:
      TypeError: ``source`` is none of these kinds.
      ValueError: the name is unknown, the file is missing, MJCF text includes a
        relative path, or MuJoCo rejects the model.
    """
    if isinstance(source, mujoco.MjModel):
        return source
    if isinstance(source, mujoco.MjSpec):
        try:
            return source.compile()
        except ValueError as e:
            raise ValueError(f"MuJoCo could not compile the MjSpec: {e}") from e
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            "model must be an MjModel, an MjSpec, a name from models/, a path or MJCF text, "
            f"got {type(source).__name__}"
        )
    text = os.fspath(source)
    if isinstance(source, str) and text.lstrip().startswith("<"):
        _check_text_includes(text)
    try:
        if isinstance(source, str) and text.lstrip().startswith("<"):
            return mujoco.MjModel.from_xml_string(text)
        if isinstance(source, str) and text in list():
            return load(text)
        file = Path(text)
        if not _is_file(file):
            raise ValueError(
                f"model {text!r} is neither a file nor a known name; known models: "
                f"{', '.join(list())}"
            )
        if file.suffix == ".mjb":
            return mujoco.MjModel.from_binary_path(str(file))
        return mujoco.MjModel.from_xml_path(str(file))
    except ValueError as e:
        if "known models" in str(e):
            raise
        raise ValueError(f"MuJoCo could not load model {text[:200]!r}: {e}") from e


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: not a file we can read
        return False


def _check_text_includes(text: str, depth: int = 0) -> None:
    """Refuses relative ``<include>`` paths in MJCF text.

    MuJoCo resolves them against the working directory when the model comes from a
    string, so the same text would load different files in different places. Files
    included by absolute path are checked too: their relative includes resolve
    against the main model's directory, which text does not have.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return  # MuJoCo reports the XML error itself
    for node in root.iter("include"):
        name = node.get("file", "")
        if not os.path.isabs(name):
            raise ValueError(
                f"MJCF text includes {name!r} by a relative path, which MuJoCo would "
                "resolve against the working directory; save the text to a file next to "
                "its includes and pass that path, or include absolute paths"
            )
        if depth < 8 and _is_file(Path(name)):
            _check_text_includes(Path(name).read_text(errors="replace"), depth + 1)


@dataclasses.dataclass(frozen=True, eq=False)
class HostModel:
    """A host ``MjModel`` as static configuration: equal when the model's binary
    bytes are (so equal models share compiled functions), hashable.

    Attributes:
      mj_model: the model.
      digest: SHA-256 of its binary (MJB) bytes.
    """

    mj_model: mujoco.MjModel
    digest: str

    @classmethod
    def of(cls, m: mujoco.MjModel) -> HostModel:
        return cls(m, hashlib.sha256(mjb_bytes(m)).hexdigest())  # the buffer, not a copy

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostModel) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)


def mjb_bytes(m: mujoco.MjModel) -> np.ndarray:
    """MuJoCo's binary model bytes (``mj_saveModel``): restore every value exactly."""
    buffer = np.zeros(mujoco.mj_sizeModel(m), np.uint8)
    mujoco.mj_saveModel(m, None, buffer)
    return buffer


# The binary model's header: a magic number, sizeof(mjtNum), the counts of its int,
# size and pointer fields... and, at this index, the MuJoCo version that wrote it.
_MJB_VERSION = 3


def _load_mjb(raw: bytes) -> mujoco.MjModel:
    return mujoco.MjModel.from_binary_path("model.mjb", {"model.mjb": raw})


def from_mjb(buffer: np.ndarray) -> mujoco.MjModel:
    """The model of :func:`mjb_bytes` output.

    MuJoCo refuses a binary model written by another release even where the layout is
    the same (e.g. 4.0.0 to 4.0.1). The layout is checked by the header's field counts
    and the byte size: where both match this MuJoCo's, the file loads with a warning;
    where they do not, MuJoCo's own error is raised.
    """
    raw = np.asarray(buffer).tobytes()
    try:
        return _load_mjb(raw)
    except ValueError:
        header = np.frombuffer(raw[: 4 * (_MJB_VERSION + 2)], np.int32).copy()
        if len(header) < _MJB_VERSION + 2 or header[_MJB_VERSION] == mujoco.mj_version():
            raise
        saved = int(header[_MJB_VERSION])
        header[_MJB_VERSION] = mujoco.mj_version()
        other = ValueError(
            f"the binary model was written by MuJoCo version {saved} with another "
            f"layout than this MuJoCo {mujoco.mj_versionString()}'s; it does not load"
        )
        try:
            m = _load_mjb(header.tobytes() + raw[header.nbytes :])
        except ValueError:
            raise other from None
        if mujoco.mj_sizeModel(m) != len(raw):
            raise other from None
        warnings.warn(
            f"the binary model was written by MuJoCo version {saved}; its layout is "
            f"this MuJoCo {mujoco.mj_versionString()}'s, so it is loaded as one",
            stacklevel=2,
        )
        return m


def keyframe_id(m: mujoco.MjModel, keyframe: int | str) -> int:
    """The index of keyframe ``keyframe`` (a name or an index) of ``m``.

    Raises:
      TypeError: ``keyframe`` is neither a str nor an int.
      ValueError: no keyframe of that name, or the index is out of range.
    """
    if isinstance(keyframe, str):
        i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, keyframe)
        if i < 0:
            names = [m.key(k).name for k in range(m.nkey)]
            raise ValueError(f"no keyframe named {keyframe!r}; keyframes: {names}")
        return i
    from mjxrunner.engine import checks

    i = checks.count(keyframe, "keyframe", minimum=0)
    if i >= m.nkey:
        raise ValueError(f"keyframe index {i} out of range: the model has {m.nkey}")
    return i


def start_data(m: mujoco.MjModel, keyframe: int | str | None = None) -> mujoco.MjData:
    """One world's host start: ``MjData`` at ``keyframe`` (None: ``qpos0``), forwarded
    so that derived quantities match it."""
    d = mujoco.MjData(m)
    if keyframe is not None:
        mujoco.mj_resetDataKeyframe(m, d, keyframe_id(m, keyframe))
    mujoco.mj_forward(m, d)
    return d


def action_bounds(
    m: mujoco.MjModel, unlimited: float = float("inf")
) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)``, each ``(nu,)`` float32, from the actuators' ``ctrlrange``.

    Actuators without a control limit get ``-unlimited``/``+unlimited`` (``inf`` by
    default; a sampler of random controls passes a finite scale such as 1).
    """
    limited = m.actuator_ctrllimited.astype(bool)
    low = np.where(limited, m.actuator_ctrlrange[:, 0], -unlimited).astype(np.float32)
    high = np.where(limited, m.actuator_ctrlrange[:, 1], unlimited).astype(np.float32)
    return low, high
