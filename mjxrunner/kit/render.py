"""Pictures of worlds in a batch: one world, several side by side, and videos.

A frame needs one world's state on the host, not the batch: :class:`WorldRenderer`
gathers world ``i``'s slice of the state fields a picture depends on, and of every
model leaf that is world-indexed (per :func:`mjxrunner.world_mask`, e.g. a randomized
``geom_rgba`` or ``body_mass``), in one jitted gather on the device, moves just those
bytes to the host, writes them into its own ``MjModel``/``MjData`` copy and draws
with ``mujoco.Renderer``. Shared model leaves are taken from the host model the runner
was built from: the device model never changes them behind its back except by
explicit per-world parameters.

Several worlds are drawn into one scene, each shifted by its display origin
(``runner.env_origins``): the shift is visual only, the physics never sees it.

Headless machines need an OpenGL backend, e.g. ``MUJOCO_GL=egl``, set before
``mujoco`` is imported.
"""

from __future__ import annotations

import copy
import math
import os
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import checks
from mjxrunner.engine.worlds import world_mask

STATE_FIELDS = ("qpos", "qvel", "act", "mocap_pos", "mocap_quat", "time")
"""``mjx.Data`` fields copied for a frame; ``mj_forward`` derives the rest."""

MAX_SIZE = 8192
"""Largest width or height accepted, in pixels."""

_VIDEO_SUFFIXES = (".mp4", ".gif")


def _path_key(path: tuple) -> str:
    """``"opt.gravity"`` for the tree path of ``model.opt.gravity``."""
    return jax.tree_util.keystr(path).lstrip(".")


def _host_field(m: mujoco.MjModel, key: str) -> np.ndarray | None:
    """The host model's array for an mjx model path, or None if it has none."""
    obj: Any = m
    for part in key.split("."):
        if part.startswith("_") or not hasattr(obj, part):
            return None  # backend-specific leaves (``_impl``) have no host twin
        obj = getattr(obj, part)
    return obj if isinstance(obj, np.ndarray) else None


@jax.jit
def _gather(leaves: list[jax.Array], world: jax.Array) -> list[jax.Array]:
    """World ``world``'s row of each leaf, on the device (one compile per signature)."""
    return [jax.lax.dynamic_index_in_dim(x, world, keepdims=False) for x in leaves]


def _fetch(tree: Any) -> tuple[Any, int]:
    """Moves ``tree`` to the host; returns it and the bytes moved."""
    host = jax.device_get(tree)
    return host, sum(np.asarray(x).nbytes for x in jax.tree.leaves(host))


def check_size(width: Any, height: Any) -> tuple[int, int]:
    width = checks.count(width, "width")
    height = checks.count(height, "height")
    if width > MAX_SIZE or height > MAX_SIZE:
        raise ValueError(f"width and height must be <= {MAX_SIZE}, got {width} x {height}")
    return width, height


class WorldRenderer:
    """Draws worlds of a batched ``mjx.Data`` with a private host copy of the model.

    Usable with the pure functions too::

        renderer = WorldRenderer(mj_model)
        image = renderer.frame(mjx_model, state.data, world=3)

    Args:
      mj_model: the host model the device model was made from. It is copied, so
        later edits of it do not show (as for the device model).

    Attributes:
      last_fetch_bytes: bytes moved from the device by the last frame.
    """

    def __init__(self, mj_model: mujoco.MjModel):
        if not isinstance(mj_model, mujoco.MjModel):
            raise TypeError(f"mj_model must be a mujoco.MjModel, got {type(mj_model).__name__}")
        self._m = copy.deepcopy(mj_model)
        self._d = mujoco.MjData(self._m)
        self._original: dict[str, np.ndarray] = {}  # host values replaced by a world's
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        # closes the GL contexts when this object goes, or at exit while modules live
        self._finalizer = weakref.finalize(self, _close_all, self._renderers)
        self._option = mujoco.MjvOption()
        self._perturb = mujoco.MjvPerturb()
        self.last_fetch_bytes = 0

    # --- host copies of worlds ------------------------------------------------------

    def _world_leaves(self, model: mjx.Model, data: mjx.Data) -> tuple[list, list, list, list]:
        """The leaves a frame reads: ``(keys, leaves, per_world, host arrays)``."""
        keys, leaves, per_world, host = [], [], [], []
        data_mask = world_mask(data)
        for name in STATE_FIELDS:
            keys.append(name)
            leaves.append(getattr(data, name))
            per_world.append(bool(getattr(data_mask, name)))
            host.append(getattr(self._d, name))
        mask = world_mask(model)
        flat_mask = jax.tree.leaves(mask)
        for (path, leaf), is_world in zip(
            jax.tree_util.tree_leaves_with_path(model), flat_mask, strict=True
        ):
            if not is_world:
                continue
            key = _path_key(path)
            target = _host_field(self._m, key)
            if target is None or target.shape != np.shape(leaf)[1:]:
                continue
            keys.append(key)
            leaves.append(leaf)
            per_world.append(True)
            host.append(target)
        return keys, leaves, per_world, host

    def load_world(self, model: mjx.Model, data: mjx.Data, world: int) -> mujoco.MjData:
        """Copies world ``world`` into the private ``MjData`` and runs ``mj_forward``.

        Only that world's rows of the state and of world-indexed model leaves leave
        the device. Host model fields replaced for an earlier world, whose leaf is
        shared again, get their original values back.

        Returns:
          The private ``MjData`` (valid until the next call).
        """
        keys, leaves, per_world, host = self._world_leaves(model, data)
        batched = [x for x, w in zip(leaves, per_world, strict=True) if w]
        rows = iter(_gather(batched, np.int32(world)) if batched else [])
        device = [next(rows) if w else x for x, w in zip(leaves, per_world, strict=True)]
        values, self.last_fetch_bytes = _fetch(device)

        model_keys = set(keys[len(STATE_FIELDS) :])
        for key in list(self._original):
            if key not in model_keys:  # no longer world-indexed: back to the host value
                _host_field(self._m, key)[...] = self._original.pop(key)
        for key, value, target in zip(keys, values, host, strict=True):
            if key in model_keys and key not in self._original:
                self._original[key] = target.copy()
            if key == "time":
                self._d.time = float(value)
            else:
                target[...] = np.reshape(value, target.shape)
        mujoco.mj_forward(self._m, self._d)
        return self._d

    # --- drawing --------------------------------------------------------------------

    def _renderer(self, width: int, height: int) -> mujoco.Renderer:
        key = (width, height)
        if key not in self._renderers:
            visual = self._m.vis.global_
            visual.offwidth = max(visual.offwidth, width)
            visual.offheight = max(visual.offheight, height)
            self._renderers[key] = mujoco.Renderer(self._m, height=height, width=width)
        return self._renderers[key]

    def _camera(self, camera: Any) -> int | str | mujoco.MjvCamera:
        """None: the model's first camera, else the free camera; names are checked."""
        if camera is None:
            return 0 if self._m.ncam else -1
        if isinstance(camera, mujoco.MjvCamera):
            return camera
        if isinstance(camera, str):
            if mujoco.mj_name2id(self._m, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
                names = [self._m.camera(i).name for i in range(self._m.ncam)]
                raise ValueError(f"no camera named {camera!r}; cameras: {names}")
            return camera
        cam = checks.count(camera, "camera", minimum=-1)
        if cam >= self._m.ncam:
            raise ValueError(
                f"camera index {cam} out of range: the model has {self._m.ncam} cameras "
                "(-1 is the free camera)"
            )
        return cam

    def frame(
        self,
        model: mjx.Model,
        data: mjx.Data,
        world: int = 0,
        camera: int | str | mujoco.MjvCamera | None = None,
        width: int = 320,
        height: int = 240,
    ) -> np.ndarray:
        """An RGB picture of one world.

        Args:
          model: the device model (leaves shared or per world).
          data: batched ``mjx.Data`` (or one world's).
          world: index of the world to draw.
          camera: None (the model's first camera, or the free camera if it has
            none), a camera name or index (-1: free camera), or an ``MjvCamera``.
          width: image width in pixels.
          height: image height in pixels.

        Returns:
          ``(height, width, 3)`` uint8.
        """
        width, height = check_size(width, height)
        camera = self._camera(camera)
        world = self._check_world(data, world)
        renderer = self._renderer(width, height)
        renderer.update_scene(self.load_world(model, data, world), camera, self._option)
        return renderer.render().copy()

    def tiled(
        self,
        model: mjx.Model,
        data: mjx.Data,
        worlds: Sequence[int],
        origins: np.ndarray,
        camera: int | str | mujoco.MjvCamera | None = None,
        width: int = 640,
        height: int = 480,
        azimuth: float = 90.0,
        elevation: float = -15.0,
    ) -> np.ndarray:
        """Several worlds drawn into one scene, world ``k`` shifted by ``origins[k]``.

        The shift is visual only. Floor planes are drawn once (the first world's,
        under the middle). With ``camera=None`` a free camera frames every world; a
        model camera stays where the model puts it relative to the first world.

        Args:
          model: the device model.
          data: batched ``mjx.Data``.
          worlds: world indices, unique.
          origins: ``(len(worlds), 3)`` display offsets.
          camera: as in :meth:`frame`, but None frames all worlds.
          width: image width in pixels.
          height: image height in pixels.
          azimuth: direction of the framing free camera, in degrees (90 looks
            along +y, so worlds laid out along x stand side by side).
          elevation: its tilt, in degrees (negative looks down).

        Returns:
          ``(height, width, 3)`` uint8.
        """
        width, height = check_size(width, height)
        azimuth = checks.real(azimuth, "azimuth")
        elevation = checks.real(elevation, "elevation")
        worlds = [self._check_world(data, w) for w in worlds]
        if not worlds:
            raise ValueError("worlds must name at least one world")
        if len(set(worlds)) != len(worlds):
            raise ValueError(f"worlds must be unique, got {worlds}")
        origins = checks.finite_array(origins, "origins", (len(worlds), 3), np.float64)
        offsets = origins - origins.mean(axis=0)
        free = camera is None
        camera = -1 if free else self._camera(camera)
        renderer = self._renderer(width, height)
        scene = renderer.scene
        for k, (world, offset) in enumerate(zip(worlds, offsets, strict=True)):
            d = self.load_world(model, data, world)
            start = scene.ngeom
            if k == 0:
                renderer.update_scene(d, camera, self._option)
                start = 0
            else:
                mujoco.mjv_addGeoms(
                    self._m, d, self._option, self._perturb, mujoco.mjtCatBit.mjCAT_ALL, scene
                )
            for g in scene.geoms[start : scene.ngeom]:
                if g.type != mujoco.mjtGeom.mjGEOM_PLANE:
                    g.pos[:] += offset
                elif k:
                    g.rgba[3] = 0.0  # one floor (the first world's) is drawn, under the middle
        if free:
            self._frame_all(scene, width / height, azimuth, elevation)
        else:  # a model camera sees the first world as it would alone
            for cam in scene.camera:
                cam.pos[:] += offsets[0]
            for light in scene.lights[: scene.nlight]:
                light.pos[:] += offsets[0]
        return renderer.render().copy()

    def _frame_all(
        self, scene: mujoco.MjvScene, aspect: float, azimuth: float, elevation: float
    ) -> None:
        """Aims the scene's camera along ``azimuth``/``elevation`` (degrees) at the
        bounding box of its solid geoms, from just far enough to see all of it."""
        boxes = [
            _half_extents(g)
            for g in scene.geoms[: scene.ngeom]
            if g.type != mujoco.mjtGeom.mjGEOM_PLANE
            and not g.category & mujoco.mjtCatBit.mjCAT_DECOR
            and g.rgba[3] > 0
        ]
        if not boxes:
            return
        low = np.min([centre - half for centre, half in boxes], axis=0)
        high = np.max([centre + half for centre, half in boxes], axis=0)
        centre = (low + high) / 2
        az, el = math.radians(azimuth), math.radians(elevation)
        forward = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
        right = np.array([math.sin(az), -math.cos(az), 0.0])
        up = np.cross(right, forward)
        corners = centre + (
            np.array(np.meshgrid(*[[-1, 1]] * 3)).reshape(3, -1).T * (high - centre)
        )
        rel = corners - centre
        tan_v = math.tan(math.radians(self._m.vis.global_.fovy) / 2)
        cam = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(self._m, cam)
        cam.lookat[:] = centre
        cam.distance = np.abs(rel @ forward).max() + 1.1 * max(
            np.abs(rel @ right).max() / (tan_v * aspect), np.abs(rel @ up).max() / tan_v
        )
        cam.azimuth, cam.elevation = azimuth, elevation
        mujoco.mjv_updateCamera(self._m, self._d, cam, scene)

    def world_width(self, model: mjx.Model, data: mjx.Data, world: int = 0) -> float:
        """Width along x of world ``world``'s solid geoms (planes left out), in metres."""
        d = self.load_world(model, data, self._check_world(data, world))
        solid = self._m.geom_type != mujoco.mjtGeom.mjGEOM_PLANE
        if not solid.any():
            return 0.0
        x, r = d.geom_xpos[solid, 0], self._m.geom_rbound[solid]
        return float((x + r).max() - (x - r).min())

    def _check_world(self, data: mjx.Data, world: Any) -> int:
        n = data.qpos.shape[0] if world_mask(data).qpos else 1
        world = checks.count(world, "world", minimum=0)
        if world >= n:
            raise ValueError(f"world must lie in [0, {n}), got {world}")
        return world

    def close(self) -> None:
        """Frees the OpenGL contexts (also done when the renderer is collected)."""
        _close_all(self._renderers)


def _half_extents(g: mujoco.MjvGeom) -> tuple[np.ndarray, np.ndarray]:
    """``(centre, half extents)`` of a drawn geom's axis-aligned bounding box."""
    r, _, h = (float(x) for x in g.size)
    local = {
        mujoco.mjtGeom.mjGEOM_SPHERE: (r, r, r),
        mujoco.mjtGeom.mjGEOM_CAPSULE: (r, r, h + r),
        mujoco.mjtGeom.mjGEOM_CYLINDER: (r, r, h),
        mujoco.mjtGeom.mjGEOM_BOX: tuple(g.size),
        mujoco.mjtGeom.mjGEOM_ELLIPSOID: tuple(g.size),
    }.get(g.type)
    if local is None:  # meshes and the rest: their bounding sphere
        return np.array(g.pos, float), np.full(3, float(g.modelrbound))
    rotation = np.asarray(g.mat, float).reshape(3, 3)
    return np.array(g.pos, float), np.abs(rotation) @ np.asarray(local, float)


def _close_all(renderers: dict[tuple[int, int], mujoco.Renderer]) -> None:
    for r in renderers.values():
        r.close()
    renderers.clear()


# --- the runner's delegates -------------------------------------------------------------

_RENDERERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def renderer_for(runner: Any) -> WorldRenderer:
    """The :class:`WorldRenderer` kept for ``runner`` (made on first use)."""
    r = _RENDERERS.get(runner)
    if r is None:
        r = _RENDERERS[runner] = WorldRenderer(runner.mj_model)
    return r


def render(
    runner: Any,
    world: int = 0,
    camera: int | str | mujoco.MjvCamera | None = None,
    width: int = 320,
    height: int = 240,
) -> np.ndarray:
    """``runner.render``: an ``(height, width, 3)`` uint8 picture of one world."""
    return renderer_for(runner).frame(runner.model, runner.data, world, camera, width, height)


def spread(
    renderer: WorldRenderer, model: mjx.Model, data: mjx.Data, worlds: Sequence[int]
) -> np.ndarray:
    """``(len(worlds), 3)`` display origins: a row along x, 1.2 world widths apart."""
    width = renderer.world_width(model, data, worlds[0])
    origins = np.zeros((len(worlds), 3))
    origins[:, 0] = np.arange(len(worlds)) * max(1.2 * width, 0.1)
    return origins


def _display_origins(runner: Any, worlds: list[int]) -> np.ndarray:
    """The worlds' layout origins; if they coincide, a row spaced by a world's width."""
    origins = runner.env_origins[worlds]
    if len(worlds) > 1 and np.ptp(origins, axis=0).max() == 0:
        origins = spread(renderer_for(runner), runner.model, runner.data, worlds)
    return origins


def render_video(
    runner: Any,
    worlds: Sequence[int] | int = (0,),
    n_steps: int = 100,
    policy: Callable | np.ndarray | None = None,
    fps: float = 30.0,
    path: str | os.PathLike | None = None,
    camera: int | str | mujoco.MjvCamera | None = None,
    width: int = 640,
    height: int = 480,
) -> np.ndarray:
    """Steps ``runner`` ``n_steps`` times and films ``worlds`` side by side.

    Frames are taken every ``round(1 / (fps * timestep))`` steps (at least 1), the
    first before any step, so the video plays at about real time. The worlds are
    drawn into one scene shifted by their ``runner.env_origins`` (visual only); when
    those coincide (the default layout) they are spread along x, 1.2 world widths
    apart.

    Args:
      runner: the :class:`~mjxrunner.MultiEnvRunner` to step; it ends ``n_steps``
        later.
      worlds: world indices to show (an int for one).
      n_steps: physics steps to run.
      policy: None keeps the current controls; a function
        ``policy(state, keys) -> (num_envs, nu)`` as in ``runner.rollout`` (compiled
        once per function object); or ``(n_steps, num_envs, nu)`` controls.
      fps: frames per second of the video (and the sampling of steps).
      path: where to write the video: ``.mp4`` (imageio's ffmpeg) or ``.gif``.
        None writes nothing.
      camera: as in :meth:`WorldRenderer.tiled`.
      width: frame width in pixels.
      height: frame height in pixels.

    Returns:
      ``(n_frames, height, width, 3)`` uint8 frames.

    Raises:
      ValueError, TypeError: bad arguments, found before the runner is stepped.
    """
    worlds = [int(w) for w in checks.env_ids(worlds, runner.num_envs)]
    if not worlds:
        raise ValueError("worlds must name at least one world")
    n_steps = checks.count(n_steps, "n_steps")
    fps = checks.real(fps, "fps", positive=True)
    width, height = check_size(width, height)
    if path is not None:
        path = Path(path)
        if path.suffix.lower() not in _VIDEO_SUFFIXES:
            raise ValueError(f"path must end in {' or '.join(_VIDEO_SUFFIXES)}, got {path.name!r}")
        if not path.parent.is_dir():
            raise ValueError(f"the folder of {str(path)!r} does not exist")
    renderer = renderer_for(runner)
    if camera is not None:
        renderer._camera(camera)  # refuse a bad camera before stepping
    actions = None
    if policy is not None and not callable(policy):
        shape = (n_steps, runner.num_envs, runner.action_dim())
        actions = checks.finite_array(policy, "policy actions", shape, np.float64)
    origins = _display_origins(runner, worlds)

    def shoot() -> np.ndarray:
        return renderer.tiled(runner.model, runner.data, worlds, origins, camera, width, height)

    every = max(1, round(1.0 / (fps * float(runner.mj_model.opt.timestep))))
    frames = [shoot()]
    done = 0
    while done < n_steps:
        k = min(every, n_steps - done)
        if policy is None:
            for _ in range(k):
                runner.step()  # the runner's compiled step: no new compile
        elif actions is None:
            runner.rollout(policy, k)
        else:
            runner.rollout(actions[done : done + k], k)
        done += k
        frames.append(shoot())
    frames = np.stack(frames)
    if path is not None:
        write_video(path, frames, fps)
    return frames


def write_video(path: str | os.PathLike, frames: np.ndarray, fps: float) -> Path:
    """Writes ``(n, height, width, 3)`` uint8 frames as an MP4 or a looping GIF.

    Returns:
      The path written.
    """
    path = Path(path)
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(
            f"frames must be (n, height, width, 3) uint8, got {frames.dtype} {frames.shape}"
        )
    suffix = path.suffix.lower()
    with warnings.catch_warnings():
        # ffmpeg runs as a subprocess (fork, then exec at once), which JAX's warning
        # about forking a multithreaded process does not apply to
        warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
        _write(path, suffix, list(frames), fps)
    return path


def _write(path: Path, suffix: str, frames: list[np.ndarray], fps: float) -> None:
    import imageio.v2 as imageio

    if suffix == ".gif":
        imageio.mimwrite(path, frames, duration=1000.0 / fps, loop=0)
    elif suffix == ".mp4":
        imageio.mimwrite(path, frames, fps=fps, macro_block_size=16)
    else:
        raise ValueError(f"path must end in {' or '.join(_VIDEO_SUFFIXES)}, got {path.name!r}")
