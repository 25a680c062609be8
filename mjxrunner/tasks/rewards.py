"""Small pieces that several tasks' rewards and starts share.

Each helper is the expression the tasks wrote out before, in the same order of
operations, so a task that uses one computes what it did bit for bit. This module
defines no ``TASKS``: the registry finds nothing to register here.
"""

from __future__ import annotations

import jax
from mujoco import mjx


def to_unit(value: jax.Array, bound: float) -> jax.Array:
    """``value`` in ``[-bound, bound]`` mapped linearly onto ``[0, 1]``."""
    return (value + bound) / (2 * bound)


def uniform_around_rest(
    data: mjx.Data, key: jax.Array, qpos_noise: float, qvel_noise: float
) -> mjx.Data:
    """``data`` with each of ``qpos`` uniform in ``+-qpos_noise`` around its value and
    each of ``qvel`` uniform in ``+-qvel_noise`` around 0 (``key`` split in two)."""
    k_pos, k_vel = jax.random.split(key)
    qpos = data.qpos + jax.random.uniform(
        k_pos, data.qpos.shape, data.qpos.dtype, -qpos_noise, qpos_noise
    )
    qvel = jax.random.uniform(k_vel, data.qvel.shape, data.qvel.dtype, -qvel_noise, qvel_noise)
    return data.replace(qpos=qpos, qvel=qvel)
