"""Where cameras and lights are: MuJoCo's camlight rules written in JAX, from the
body poses of every world, for the renderer's pose (:meth:`PixelRenderer.pose` of
:mod:`mjxrunner.kit.pixels`), since MJX-Warp's kinematics leaves cameras and lights
alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

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
