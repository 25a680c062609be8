"""Batched pixel observations: every world's camera images, rendered on device.

Built on MJX's batched renderer (MuJoCo Warp ray tracing behind
``mjx.create_render_context`` / ``mjx.refit_bvh`` / ``mjx.render``), so it needs
impl ``"warp"``; it runs on CUDA and, slowly, on CPU. Two parts:

* :class:`PixelSpec`, frozen and hashable: cameras, size and outputs (the one config
  of this subsystem, static configuration of compiled functions);
* :class:`PixelRenderer`, built once per (host model, number of worlds, spec): it
  owns the render context (Warp's buffers and scene BVH, sized for a fixed number of
  worlds) and offers the pure function :meth:`PixelRenderer.render`
  ``(model, data) -> (data, frames)`` to call inside ``jit``, ``lax.scan`` or
  ``shard_map``, and :meth:`PixelRenderer.observe`, which first poses bodies,
  cameras and lights for the data's ``qpos`` (:meth:`PixelRenderer.pose`).

The env (:mod:`mjxrunner.env`) renders a task's ``PixelSpec`` inside its step and
adds the frames to the observation as the terms of :data:`TERMS`.

Facts of MJX 3.17 this module is built around (checked on this project's machines):

* The scene BVH holds every world's geom bounds and is not updated by the render:
  without ``mjx.refit_bvh`` first, geoms that moved since the context was made are
  missed. :meth:`~PixelRenderer.render` always refits, then renders.
* After ``mjx.step`` the data's poses (``geom_xpos``, ``cam_xpos``, ...) are those
  of the state the step started from (its forward pass comes first), and MJX-Warp's
  ``mjx.kinematics`` updates bodies and geoms but not cameras and lights:
  :meth:`~PixelRenderer.pose` recomputes all of them from ``qpos`` by MuJoCo's
  camlight rules (checked against ``mj_forward`` for every camera and light mode).
* Both calls read and return ``data._impl._jax_token``; the returned data must be
  carried on (it orders the next refit after this render, and this render after the
  physics that produced ``data``). Nothing else in the data changes.
* The context is made for a fixed number of worlds; data with another leading size
  is read out of bounds without any error from MJX, so it is refused here.
* Per-world model fields (a leading ``num_envs`` axis, the world-axis rule) are
  honoured by the renderer for colours (``geom_rgba``, ``mat_rgba``, ...), lights,
  materials, geom sizes and, through the kinematics of a step, camera and light
  poses. Camera intrinsics (``cam_fovy``, ``cam_intrinsic``) are read only when the
  rays are not precomputed (``PixelSpec(dynamic_rays=True)``). See
  :data:`SHARED_ONLY`.
* Images are rows top to bottom, like ``mujoco.Renderer``; the packed pixel is
  ``0xAARRGGBB``. Depth is planar (along the camera axis), in metres, like
  ``mujoco.Renderer``'s depth, except that pixels where no geom is hit read 0
  (``mujoco.Renderer`` gives the far plane there). Segmentation is the
  ``(object id, object type)`` pair of ``mujoco.Renderer``'s segmentation mode,
  ``(-1, -1)`` where nothing is hit.
* Contexts live per Warp device, looked up by the device the render runs on: under
  ``shard_map`` over several CUDA devices each device needs its own context sized
  for its share of the worlds (``devices=``). All JAX CPU devices are one Warp
  device, hence share one context; shards rendering concurrently on it race (measured:
  5 of 20 sharded renders over two host devices disagreed with one-device frames),
  so several CPU devices are refused.
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
from jax.sharding import Mesh
from mujoco import mjx

from mjxrunner.engine import backend, checks
from mjxrunner.engine.worlds import tree_of, world_axes, world_mask
from mjxrunner.kit.render import MAX_SIZE

OUTPUTS = ("rgb", "depth", "segmentation")
"""The frame kinds, in the order they appear in the frames dict."""

TERMS = {"rgb": "pixels", "depth": "depth", "segmentation": "segmentation"}
"""The observation term of each frame kind in an env's observation."""

STATE_TERM = "state"
"""The term of a pixel task's array observation (its own ``observation`` output)."""

GEOM_GROUPS = range(mujoco.mjNGROUP)

DYNAMIC_RAY_FIELDS = ("cam_fovy", "cam_intrinsic")
"""Model fields the renderer reads only with ``dynamic_rays=True``; otherwise the rays
are precomputed from the host model when the renderer is built."""

SHARED_ONLY = ("cam_projection", "cam_sensorsize", "geom_dataid", "geom_type")
"""Model fields the renderer cannot take per world (MJX passes them to Warp without a
world axis). Per-world values are refused rather than silently mixed up."""

_MAX_RAYS = 2**31 - 1  # Warp launches one thread per (world, pixel) with int32 ids


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


def warp_device(device: Any) -> str:
    """The Warp device name (``"cpu"``, ``"cuda:0"``, ...) of a JAX device; ValueError
    for a platform Warp cannot render on."""
    platform = getattr(device, "platform", None)
    if platform not in ("cpu", "gpu"):
        raise ValueError(
            f"MJX renders with MuJoCo Warp, which runs on CPU and CUDA devices only; "
            f"got a {platform!r} device ({device})"
        )
    import warp as wp

    if platform == "gpu" and not wp.is_cuda_available():
        raise ValueError(
            f"device {device} is a GPU but Warp finds no CUDA driver; render on a CUDA "
            "machine or on the CPU"
        )
    try:
        return str(wp.device_from_jax(device).alias)
    except Exception as e:  # e.g. a ROCm GPU, which Warp does not drive
        raise ValueError(f"Warp cannot render on device {device}: {e}") from None


def _devices(devices: Any) -> list[jax.Device]:
    """The JAX devices the worlds live on (one, or those of a mesh / list)."""
    if devices is None or isinstance(devices, (str, jax.Device)):
        return [backend.resolve_device(devices)]
    if isinstance(devices, Mesh):
        return list(devices.devices.flat)
    if isinstance(devices, Sequence) and devices:
        if not all(isinstance(d, jax.Device) for d in devices):
            raise TypeError("devices must be jax.Device objects")
        if len(set(devices)) != len(devices):
            raise ValueError("devices must not repeat")
        return list(devices)
    raise TypeError(
        "devices must be None, a platform name, a jax.Device, a non-empty list of "
        f"devices or a Mesh, got {type(devices).__name__}"
    )


# --- where cameras and lights are ---------------------------------------------------

_CAMLIGHT = mujoco.mjtCamLight
_FIXED, _TRACK, _TRACKCOM = (
    _CAMLIGHT.mjCAMLIGHT_FIXED,
    _CAMLIGHT.mjCAMLIGHT_TRACK,
    _CAMLIGHT.mjCAMLIGHT_TRACKCOM,
)
_TARGET, _TARGETCOM = _CAMLIGHT.mjCAMLIGHT_TARGETBODY, _CAMLIGHT.mjCAMLIGHT_TARGETBODYCOM


@dataclasses.dataclass(frozen=True, eq=False)
class Rig:
    """How each camera and light hangs in the scene (static, from the host model).

    Attributes:
      cam_mode: ``(ncam,)`` ``mjtCamLight`` modes; a targeting camera without a
        target body counts as fixed (as in MuJoCo).
      cam_body: ``(ncam,)`` the body each camera is attached to.
      cam_target: ``(ncam,)`` its target body (0 where it has none).
      light_mode, light_body, light_target: the same for ``(nlight,)`` lights.
    """

    cam_mode: np.ndarray
    cam_body: np.ndarray
    cam_target: np.ndarray
    light_mode: np.ndarray
    light_body: np.ndarray
    light_target: np.ndarray

    @classmethod
    def of(cls, m: mujoco.MjModel) -> Rig:
        def modes(mode, target):
            mode = np.array(mode, int)
            aims = (mode == _TARGET) | (mode == _TARGETCOM)
            return np.where(aims & (target < 0), int(_FIXED), mode), np.maximum(target, 0)

        cam_mode, cam_target = modes(m.cam_mode, m.cam_targetbodyid)
        light_mode, light_target = modes(m.light_mode, m.light_targetbodyid)
        return cls(
            cam_mode,
            np.array(m.cam_bodyid),
            cam_target,
            light_mode,
            np.array(m.light_bodyid),
            light_target,
        )

    @property
    def needs_com(self) -> bool:
        """Some camera or light follows a subtree's centre of mass."""
        modes = np.concatenate([self.cam_mode, self.light_mode])
        return bool(np.isin(modes, [_TRACKCOM, _TARGETCOM]).any())


def _normalized(v: jax.Array) -> jax.Array:
    return v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), mujoco.mjMINVAL)


def _quat_mat(q: jax.Array) -> jax.Array:
    """Rotation matrices ``(..., 3, 3)`` of quaternions ``(..., 4)`` (w, x, y, z),
    normalized first (a drawn quaternion need not be a unit one)."""
    w, x, y, z = jnp.moveaxis(_normalized(q), -1, 0)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def _attached(mode, body, target, local_pos, pos0, poscom0, xpos, xmat, com):
    """Positions ``(k, 3)`` of ``k`` cameras or lights by MuJoCo's camlight rules,
    and the points targeting ones look at (None when none targets)."""
    pos = xpos[body] + jnp.einsum("kij,kj->ki", xmat[body], local_pos)
    pos = jnp.where((mode == _TRACK)[:, None], xpos[body] + pos0, pos)
    if com is not None:
        pos = jnp.where((mode == _TRACKCOM)[:, None], com[body] + poscom0, pos)
    aims = (mode == _TARGET) | (mode == _TARGETCOM)
    if not aims.any():
        return pos, None
    look_at = xpos[target]
    if com is not None:
        look_at = jnp.where((mode == _TARGETCOM)[:, None], com[target], look_at)
    return pos, look_at


def _camlight_one(rig: Rig, m: Any, xpos, xmat, com, nlight: int):
    """One world's ``(cam_xpos, cam_xmat, light_xpos, light_xdir)`` from its body
    poses, as MuJoCo's ``mj_camlight`` computes them."""
    tracks = lambda mode: ((mode == _TRACK) | (mode == _TRACKCOM))[:, None, None]  # noqa: E731
    mode = rig.cam_mode
    cam_pos, look_at = _attached(
        mode, rig.cam_body, rig.cam_target, m.cam_pos, m.cam_pos0, m.cam_poscom0, xpos, xmat, com
    )
    cam_mat = xmat[rig.cam_body] @ _quat_mat(m.cam_quat)
    cam_mat = jnp.where(tracks(mode), m.cam_mat0, cam_mat)
    if look_at is not None:  # z away from the target, x level (orthogonal to world z)
        z = _normalized(cam_pos - look_at)
        x = _normalized(jnp.cross(jnp.array([0.0, 0.0, 1.0], z.dtype), z))
        y = _normalized(jnp.cross(z, x))
        aims = ((mode == _TARGET) | (mode == _TARGETCOM))[:, None, None]
        cam_mat = jnp.where(aims, jnp.stack([x, y, z], axis=-1), cam_mat)
    if not nlight:
        return cam_pos, cam_mat, None, None
    mode = rig.light_mode
    light_pos, look_at = _attached(
        mode,
        rig.light_body,
        rig.light_target,
        m.light_pos,
        m.light_pos0,
        m.light_poscom0,
        xpos,
        xmat,
        com,
    )
    light_dir = jnp.einsum("kij,kj->ki", xmat[rig.light_body], m.light_dir)
    light_dir = jnp.where(tracks(mode)[:, :, 0], m.light_dir0, light_dir)
    if look_at is not None:
        aims = ((mode == _TARGET) | (mode == _TARGETCOM))[:, None]
        light_dir = jnp.where(aims, _normalized(look_at - light_pos), light_dir)
    return cam_pos, cam_mat, light_pos, light_dir


def render_token(data: mjx.Data) -> jax.Array:
    """The render token of impl "warp" batched data, ``(num_envs,)`` int32: what
    orders a render after what produced the data."""
    return data._impl._jax_token


def with_render_token(data: mjx.Data, token: jax.Array) -> mjx.Data:
    """``data`` carrying ``token`` (e.g. the one a render returned)."""
    return data.tree_replace({"_impl._jax_token": token})


class PixelRenderer:
    """Renders every world's cameras inside compiled code.

    Built once per (host model, number of worlds, spec, devices): it makes the render
    context (Warp buffers, scene BVH, precomputed rays, the render kernel is built on
    the first render). Keep the renderer alive while functions that call
    :meth:`render` may still run: dropping it frees the context they use.

    Args:
      m: the host model the device model was made from (same structure).
      num_envs: the number of worlds, all devices together.
      spec: what to render.
      impl: the MJX impl of the model and data; only ``"warp"`` can render.
      devices: where the worlds live: None (the default JAX device), a platform name,
        a ``jax.Device``; or, for worlds sharded under ``shard_map``, the list of
        devices or the ``"worlds"`` mesh: then one context per device is made for
        ``num_envs / len(devices)`` worlds, and :meth:`render` must be called on
        each device's shard (inside ``shard_map``). Several CPU devices are refused
        (they share one Warp device, hence one context, and shards would race).

    Raises:
      ValueError: impl ``"jax"``, a device Warp cannot render on, a camera the model
        lacks, an image too large for Warp's launch, ``num_envs`` not divisible by
        the devices.
      TypeError: arguments of the wrong type.
    """

    def __init__(
        self,
        m: mujoco.MjModel,
        num_envs: int,
        spec: PixelSpec,
        *,
        impl: str = "warp",
        devices: Any = None,
    ):
        if not isinstance(m, mujoco.MjModel):
            raise TypeError(f"m must be a mujoco.MjModel, got {type(m).__name__}")
        num_envs = checks.count(num_envs, "num_envs")
        if not isinstance(spec, PixelSpec):
            raise TypeError(f"spec must be a PixelSpec, got {type(spec).__name__}")
        if backend.check_impl(impl) != "warp":
            raise ValueError(
                f"batched pixels need impl='warp': MJX renders only with MuJoCo Warp "
                f"(mjx.render raises NotImplementedError for impl {impl!r}); build the "
                "runner or env with impl='warp'"
            )
        from mujoco.mjx import warp as mjx_warp

        if not mjx_warp.WARP_INSTALLED:
            raise ValueError("batched pixels need the warp-lang package (pip install warp-lang)")
        backend.check_supported(m, impl)
        devs = _devices(devices)
        if len([d for d in devs if d.platform == "cpu"]) > 1:
            raise ValueError(
                f"cannot render worlds sharded over {len(devs)} CPU devices: every JAX CPU "
                "device is the same Warp device, so all shards would share one render "
                "context and race on its buffers; render on one CPU device, or shard "
                "over CUDA devices (one context each)"
            )
        if num_envs % len(devs):
            raise ValueError(
                f"num_envs={num_envs} is not divisible by the {len(devs)} devices; use a "
                f"multiple of {len(devs)}"
            )
        local = [d for d in devs if d.process_index == jax.process_index()]
        if not local:
            raise ValueError("none of the given devices belongs to this process")
        warp_devices = [warp_device(d) for d in local]
        ids = camera_ids(m, spec)
        per_device = num_envs // len(devs)
        rays = per_device * len(ids) * spec.width * spec.height
        if rays > _MAX_RAYS:
            raise ValueError(
                f"{per_device} worlds x {len(ids)} camera(s) x {spec.width} x "
                f"{spec.height} pixels = {rays} rays per render exceeds Warp's int32 "
                f"launch size ({_MAX_RAYS}); use fewer worlds per device or smaller images"
            )

        self.spec = spec
        self.num_envs = num_envs
        self.worlds_per_device = per_device
        self.devices = tuple(devs)
        self.camera_ids = ids
        self._ngeom, self._ncam, self._nlight = m.ngeom, m.ncam, m.nlight
        self.rig = Rig.of(m)
        self._ctx = mjx.create_render_context(
            m,
            nworld=per_device,
            devices=warp_devices,
            cam_res=(spec.width, spec.height),
            render_rgb=spec.rgb,
            render_depth=spec.depth,
            render_seg=spec.segmentation,
            use_textures=spec.textures,
            use_shadows=spec.shadows,
            enabled_geom_groups=list(spec.geom_groups),
            cam_active=list(ids),
            use_precomputed_rays=not spec.dynamic_rays,
        )
        # Where each camera's pixels start in the packed per-world buffers.
        self._adr = {
            "rgb": tuple(int(a) for a in self._ctx.rgb_adr.numpy()),
            "depth": tuple(int(a) for a in self._ctx.depth_adr.numpy()),
            "segmentation": tuple(int(a) for a in self._ctx.seg_adr.numpy()),
        }

    # --- shapes -----------------------------------------------------------------

    def frame_shapes(self, num_envs: int | None = None) -> dict[str, jax.ShapeDtypeStruct]:
        """Shape and dtype of each frame kind, for ``num_envs`` worlds (default: all).

        ``"rgb"`` uint8 ``(n, [C,] H, W, 3)``, ``"depth"`` float32 ``(n, [C,] H, W)``,
        ``"segmentation"`` int32 ``(n, [C,] H, W, 2)``; the camera axis ``C`` only when
        the spec's cameras are a sequence.
        """
        n = self.num_envs if num_envs is None else checks.count(num_envs, "num_envs")
        return {
            k: jax.ShapeDtypeStruct((n, *s.shape), s.dtype)
            for k, s in self.spec.frame_specs().items()
        }

    # --- the pure function ------------------------------------------------------

    def render(self, model: Any, data: mjx.Data) -> tuple[mjx.Data, dict[str, jax.Array]]:
        """Renders every world of ``data``; pure, for use inside ``jit``/``scan``.

        Args:
          model: the device ``mjx.Model`` (or ``FlatModel``), impl ``"warp"``, of the
            host model's structure; leaves shared or per world (leading ``num_envs``
            axis, by the world-axis rule).
          data: batched ``mjx.Data``, impl ``"warp"``, with ``worlds_per_device``
            worlds (all of them on one device; one device's shard under
            ``shard_map``). Frames show the poses in ``data`` (``geom_xpos``,
            ``cam_xpos``, ...): after ``mjx.step`` those of the state the step
            started from, as after ``mj_step``.

        Returns:
          ``(data, frames)``: ``data`` with the render token
          (``data._impl._jax_token``, ``(n,)`` int32) replaced, to be carried on in
          place of the input; ``frames`` a dict with the spec's kinds (see
          :meth:`frame_shapes`).

        Raises:
          ValueError / TypeError at trace time: not impl "warp", unbatched data, a
          batch size other than the context's, a model of another structure, or
          per-world fields the renderer cannot honour.
        """
        model = tree_of(model)
        self._check(model, data)
        handle = self._ctx.pytree()
        axes = (world_axes(model), 0, None)
        data = jax.vmap(mjx.refit_bvh, in_axes=axes)(model, data, handle)
        if self.spec.segmentation:
            rgb, depth, seg, data = jax.vmap(mjx.render_with_segmentation, in_axes=axes)(
                model, data, handle
            )
        else:
            (rgb, depth, data), seg = jax.vmap(mjx.render, in_axes=axes)(model, data, handle), None
        packed = {"rgb": rgb, "depth": depth, "segmentation": seg}
        unpack = {"rgb": _rgb, "depth": lambda x: x, "segmentation": lambda x: x}
        frames = {}
        for kind in self.spec.outputs:
            cams = [
                unpack[kind](self._camera_pixels(packed[kind], kind, i))
                for i in range(len(self.camera_ids))
            ]
            frames[kind] = jnp.stack(cams, axis=1) if self.spec.camera_axis else cams[0]
        return data, frames

    __call__ = render

    def pose(self, model: Any, data: mjx.Data) -> mjx.Data:
        """``data`` with what a render reads recomputed from ``qpos``: body and geom
        poses (``mjx.kinematics``; ``mjx.com_pos`` too when a camera or light follows
        a centre of mass) and camera and light poses (MuJoCo's camlight rules, with
        the model's per-world ``cam_pos``, ``cam_quat``, ``light_pos``, ``light_dir``,
        ...; a drawn ``cam_quat`` is normalized). MJX-Warp's kinematics leaves
        cameras and lights alone, so they are placed here. Pure; batched like
        :meth:`render`.
        """
        model = tree_of(model)
        axes = world_axes(model)
        rig, nlight = self.rig, self._nlight

        def one(m, d):
            d = mjx.kinematics(m, d)
            return mjx.com_pos(m, d) if rig.needs_com else d

        data = jax.vmap(one, in_axes=(axes, 0))(model, data)
        com = data.subtree_com if rig.needs_com else None
        placed = jax.vmap(
            lambda m, xpos, xmat, com: _camlight_one(rig, m, xpos, xmat, com, nlight),
            in_axes=(axes, 0, 0, None if com is None else 0),
        )(model, data.xpos, data.xmat, com)
        cam_pos, cam_mat, light_pos, light_dir = placed
        dtype = data.cam_xpos.dtype
        data = data.replace(cam_xpos=cam_pos.astype(dtype), cam_xmat=cam_mat.astype(dtype))
        if nlight:
            lights = {"_impl.light_xpos": light_pos, "_impl.light_xdir": light_dir}
            data = data.tree_replace({k: v.astype(dtype) for k, v in lights.items()})
        return data

    def observe(self, model: Any, data: mjx.Data) -> tuple[mjx.Data, dict[str, jax.Array]]:
        """Frames of the state in ``data`` (its ``qpos``, whatever its derived
        quantities say): :meth:`pose`, then :meth:`render`. Pure, for ``jit``.

        Returns:
          ``(data, frames)``: the input ``data`` with only its render token replaced
          (carry it on), and the frames as :meth:`render` gives them.
        """
        rendered, frames = self.render(model, self.pose(model, data))
        return with_render_token(data, render_token(rendered)), frames

    def _camera_pixels(self, buffer: jax.Array, kind: str, i: int) -> jax.Array:
        """Camera ``i``'s pixels of a packed ``(n, pixels, ...)`` buffer as
        ``(n, H, W, ...)``: MJX stores them row by row, top row first."""
        h, w = self.spec.height, self.spec.width
        start = self._adr[kind][i]
        pixels = buffer[:, start : start + h * w]
        return pixels.reshape((buffer.shape[0], h, w, *buffer.shape[2:]))

    def _check(self, model: Any, data: Any) -> None:
        if not isinstance(model, mjx.Model):
            raise TypeError(f"model must be an mjx.Model, got {type(model).__name__}")
        if not isinstance(data, mjx.Data):
            raise TypeError(f"data must be an mjx.Data, got {type(data).__name__}")
        for name, x in (("model", model), ("data", data)):
            if x.impl != mjx.Impl.WARP:
                raise ValueError(
                    f"the {name} has impl {x.impl.value!r}; batched pixels need impl='warp' "
                    "(MJX renders only with MuJoCo Warp)"
                )
        if (model.ngeom, model.ncam) != (self._ngeom, self._ncam):
            raise ValueError(
                f"the model has {model.ngeom} geoms and {model.ncam} cameras, the renderer's "
                f"host model {self._ngeom} and {self._ncam}: build the renderer from the "
                "model the device model was made from"
            )
        if np.ndim(data.qpos) != 2:
            raise ValueError(
                f"data must be batched, qpos (num_envs, nq); got qpos of shape {data.qpos.shape}"
            )
        n = data.qpos.shape[0]
        if n != self.worlds_per_device:
            where = "per device " if len(self.devices) > 1 else ""
            raise ValueError(
                f"the render context holds {self.worlds_per_device} worlds {where}but data "
                f"has {n}; build the PixelRenderer for this batch (under shard_map: call "
                "render on each device's shard, with shapes evaluated per shard)"
            )
        per_world = {
            jax.tree_util.keystr(path).rsplit(".", 1)[-1]
            for path, w in jax.tree_util.tree_leaves_with_path(world_mask(model))
            if w
        }
        for field in SHARED_ONLY + DYNAMIC_RAY_FIELDS:
            if field not in per_world:
                continue
            if field in SHARED_ONLY:
                raise ValueError(
                    f"model.{field} is per world, which the renderer cannot honour (MJX "
                    "passes it to Warp shared by all worlds); keep it shared"
                )
            if not self.spec.dynamic_rays:
                raise ValueError(
                    f"model.{field} is per world, but the camera rays were precomputed from "
                    "the host model; use PixelSpec(dynamic_rays=True) to render per-world "
                    "camera intrinsics"
                )

    def __repr__(self) -> str:
        return f"PixelRenderer({self.num_envs} worlds, {len(self.devices)} device(s), {self.spec})"


def _rgb(packed: jax.Array) -> jax.Array:
    """uint8 ``(..., 3)`` RGB of packed ``0xAARRGGBB`` uint32 pixels (alpha dropped:
    Warp writes 255)."""
    channels = [(packed >> shift) & 0xFF for shift in (16, 8, 0)]
    return jnp.stack(channels, axis=-1).astype(jnp.uint8)


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
