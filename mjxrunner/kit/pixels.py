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

The spec and the frames' observation terms live in :mod:`mjxrunner.kit.pixel_spec`,
the camera and light poses in :mod:`mjxrunner.kit.camlight`; their names are
importable from here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.sharding import Mesh
from mujoco import mjx

from mjxrunner.engine import backend, checks
from mjxrunner.engine.worlds import tree_of, world_axes, world_mask
from mjxrunner.kit.camlight import Rig, _camlight_one
from mjxrunner.kit.pixel_spec import (  # noqa: F401 (re-exported: their home was here)
    GEOM_GROUPS,
    OUTPUTS,
    STATE_TERM,
    TERMS,
    PixelSpec,
    camera_ids,
    merge,
    merge_spec,
)
from mjxrunner.kit.render import MAX_SIZE  # noqa: F401 (re-exported)

DYNAMIC_RAY_FIELDS = ("cam_fovy", "cam_intrinsic")
"""Model fields the renderer reads only with ``dynamic_rays=True``; otherwise the rays
are precomputed from the host model when the renderer is built."""

SHARED_ONLY = ("cam_projection", "cam_sensorsize", "geom_dataid", "geom_type")
"""Model fields the renderer cannot take per world (MJX passes them to Warp without a
world axis). Per-world values are refused rather than silently mixed up."""

_MAX_RAYS = 2**31 - 1  # Warp launches one thread per (world, pixel) with int32 ids


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
