"""What a pixel observation holds: :class:`PixelSpec` and its checks, the model's ids
of its cameras, and the frames' observation terms (:data:`TERMS`, :func:`merge`).

Host-side configuration only; the rendering is :mod:`mjxrunner.kit.pixels`, which
re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjxrunner.engine import checks
from mjxrunner.kit.render import MAX_SIZE

OUTPUTS = ("rgb", "depth", "segmentation")
"""The frame kinds, in the order they appear in the frames dict."""

TERMS = {"rgb": "pixels", "depth": "depth", "segmentation": "segmentation"}
"""The observation term of each frame kind in an env's observation."""

STATE_TERM = "state"
"""The term of a pixel task's array observation (its own ``observation`` output)."""

GEOM_GROUPS = range(mujoco.mjNGROUP)


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"PixelSpec.{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def _camera(value: Any) -> str | int:
    if isinstance(value, str):
        if not value:
            raise ValueError("PixelSpec camera names must be non-empty")
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"PixelSpec cameras must be names (str) or ids (int), got {type(value).__name__}"
        )
    if value < 0:
        raise ValueError(f"PixelSpec camera ids must be >= 0, got {value}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class PixelSpec:
    """What each world's pixel observation holds.

    Attributes:
      cameras: one camera (a name or an id): frames are ``(num_envs, H, W, ...)``;
        or a sequence of them: frames get a camera axis after the world axis,
        ``(num_envs, num_cameras, H, W, ...)``, cameras in the order given (kept as a
        tuple).
      width: image width in pixels, 1 to ``MAX_SIZE``.
      height: image height in pixels, 1 to ``MAX_SIZE``.
      rgb: render ``"rgb"``, uint8 ``(..., H, W, 3)``.
      depth: render ``"depth"``, float32 ``(..., H, W)`` metres along the camera axis
        (0 where no geom is hit).
      segmentation: render ``"segmentation"``, int32 ``(..., H, W, 2)`` holding
        ``(object id, object type)`` as ``mujoco.Renderer`` does (``(geom id,
        mjOBJ_GEOM)`` for a geom, ``(-1, -1)`` where nothing is hit).
      shadows: cast shadows (costs a second ray per light and pixel).
      textures: sample material textures.
      geom_groups: the geom groups drawn (``mujoco.Renderer``'s default: 0, 1, 2).
      dynamic_rays: compute camera rays from the device model's ``cam_fovy`` /
        ``cam_intrinsic`` at every render, so per-world or changed intrinsics take
        effect; False precomputes them once from the host model (faster).
      every: render cadence of an env (:mod:`mjxrunner.env`): its step renders every
        ``every``-th step and shows the last frames in between (a restarted world
        is always rendered anew). The renderer itself ignores it.
    """

    cameras: str | int | tuple[str | int, ...]
    width: int = 64
    height: int = 64
    rgb: bool = True
    depth: bool = False
    segmentation: bool = False
    shadows: bool = False
    textures: bool = True
    geom_groups: tuple[int, ...] = (0, 1, 2)
    dynamic_rays: bool = False
    every: int = 1

    def __post_init__(self):
        cams = self.cameras
        if isinstance(cams, (str, numbers.Integral)) and not isinstance(cams, (bool, np.bool_)):
            _camera(cams)
        elif isinstance(cams, Sequence) and not isinstance(cams, (str, bytes)):
            cams = tuple(_camera(c) for c in cams)
            if not cams:
                raise ValueError("PixelSpec.cameras must name at least one camera")
            if len(set(cams)) != len(cams):
                raise ValueError(f"PixelSpec.cameras must not repeat, got {cams}")
            object.__setattr__(self, "cameras", cams)
        else:
            raise TypeError(
                "PixelSpec.cameras must be a camera name or id, or a sequence of them, "
                f"got {type(cams).__name__}"
            )
        for name in ("width", "height"):
            value = checks.count(getattr(self, name), f"PixelSpec.{name}")
            if value > MAX_SIZE:
                raise ValueError(f"PixelSpec.{name} must be <= {MAX_SIZE}, got {value}")
        object.__setattr__(self, "every", checks.count(self.every, "PixelSpec.every"))
        for name in ("rgb", "depth", "segmentation", "shadows", "textures", "dynamic_rays"):
            object.__setattr__(self, name, _flag(getattr(self, name), name))
        if not (self.rgb or self.depth or self.segmentation):
            raise ValueError("PixelSpec must enable at least one of rgb, depth, segmentation")
        groups = self.geom_groups
        if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
            raise TypeError(
                f"PixelSpec.geom_groups must be a sequence of ints, got {type(groups).__name__}"
            )
        groups = tuple(checks.count(g, "PixelSpec.geom_groups entry", minimum=0) for g in groups)
        distinct = len(set(groups)) == len(groups)
        if not groups or not distinct or any(g not in GEOM_GROUPS for g in groups):
            raise ValueError(
                f"PixelSpec.geom_groups must be distinct groups in [0, {mujoco.mjNGROUP}), "
                f"got {groups}"
            )
        object.__setattr__(self, "geom_groups", groups)

    @property
    def camera_axis(self) -> bool:
        """Whether frames carry a camera axis (``cameras`` was given as a sequence)."""
        return isinstance(self.cameras, tuple)

    @property
    def camera_list(self) -> tuple[str | int, ...]:
        """The cameras as a tuple, whichever way they were given."""
        return self.cameras if self.camera_axis else (self.cameras,)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The enabled frame kinds, in :data:`OUTPUTS` order."""
        return tuple(k for k in OUTPUTS if getattr(self, k))

    def frame_specs(self) -> dict[str, jax.ShapeDtypeStruct]:
        """One world's frames: ``"rgb"`` uint8 ``([C,] H, W, 3)``, ``"depth"`` float32
        ``([C,] H, W)``, ``"segmentation"`` int32 ``([C,] H, W, 2)``; the camera axis
        ``C`` only when the cameras are a sequence."""
        lead = (len(self.camera_list),) if self.camera_axis else ()
        image = (self.height, self.width)
        table = {
            "rgb": ((3,), jnp.uint8),
            "depth": ((), jnp.float32),
            "segmentation": ((2,), jnp.int32),
        }
        return {
            k: jax.ShapeDtypeStruct(lead + image + table[k][0], table[k][1]) for k in self.outputs
        }


def camera_ids(m: mujoco.MjModel, spec: PixelSpec) -> tuple[int, ...]:
    """The model's ids of ``spec``'s cameras; ValueError naming a missing one."""
    if m.ncam == 0:
        raise ValueError("the model has no camera; add a <camera> to it to render pixels")
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) or f"#{i}" for i in range(m.ncam)]
    ids = []
    for cam in spec.camera_list:
        if isinstance(cam, str):
            i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, cam)
            if i < 0:
                raise ValueError(f"the model has no camera {cam!r}; its cameras are {names}")
        else:
            i = cam
            if i >= m.ncam:
                raise ValueError(
                    f"camera id {i} is out of range: the model has {m.ncam} camera(s), {names}"
                )
        ids.append(i)
    if len(set(ids)) != len(ids):
        raise ValueError(f"PixelSpec.cameras name the same camera twice: {spec.camera_list}")
    return tuple(ids)


# --- frames as observation terms ---------------------------------------------------------


def merge(obs: Any, frames: dict[str, Any]) -> dict[str, Any]:
    """A task's observation with ``frames`` added as terms (:data:`TERMS`): a dict
    observation keeps its terms, an array one becomes the term ``"state"``."""
    terms = dict(obs) if isinstance(obs, Mapping) else {STATE_TERM: obs}
    terms.update({TERMS[kind]: f for kind, f in frames.items()})
    return terms


def merge_spec(spec: Any, pixels: PixelSpec, task: str = "task") -> dict[str, Any]:
    """:func:`merge` of one world's observation ``spec`` with ``pixels``' frames;
    ValueError if the task's own terms take a frame's name."""
    if isinstance(spec, Mapping):
        taken = sorted(set(spec) & {TERMS[k] for k in pixels.outputs})
        if taken:
            raise ValueError(
                f"{task}: the observation's own terms {taken} clash with the pixel terms "
                f"{ {k: TERMS[k] for k in pixels.outputs} }; rename them"
            )
    return merge(spec, pixels.frame_specs())
