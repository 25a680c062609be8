"""Humanoid on ``models/humanoid.xml``: walk forward (+x) without falling.

``qpos = (x, y, z, quaternion (4), 21 joints)``; ``qvel`` starts with the torso's
linear velocity in the world frame.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks.base import Task

HEALTHY_Z = (0.8, 2.0)
"""Healthy torso heights, in metres (standing puts the torso at about 1.2)."""


def healthy(data: mjx.Data) -> jax.Array:
    """The torso's height is in :data:`HEALTHY_Z`."""
    z = data.qpos[2]
    return (z > HEALTHY_Z[0]) & (z < HEALTHY_Z[1])


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(53,)``: ``qpos`` without x and y (26) and ``qvel`` (27)."""
    del model
    return jnp.concatenate([data.qpos[2:], data.qvel])


def terminated(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """The torso left :data:`HEALTHY_Z`: the humanoid fell."""
    del model
    return ~healthy(data)


def reward(model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data) -> jax.Array:
    """Forward speed, plus 2 for staying up, minus a small control cost."""
    del model, data
    alive = healthy(next_data).astype(next_data.qpos.dtype)
    return next_data.qvel[0] + 2.0 * alive - 0.01 * jnp.sum(action**2)


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Standing; joints and velocities uniform in +-0.01 around rest."""
    del model
    k_pos, k_vel = jax.random.split(key)
    dtype = data.qpos.dtype
    joints = data.qpos[7:] + jax.random.uniform(k_pos, data.qpos[7:].shape, dtype, -0.01, 0.01)
    qvel = jax.random.uniform(k_vel, data.qvel.shape, dtype, -0.01, 0.01)
    return data.replace(qpos=data.qpos.at[7:].set(joints), qvel=qvel)


WALK = Task(
    name="humanoid_walk",
    model="humanoid",
    observation=observation,
    reward=reward,
    terminated=terminated,
    initial_state=start,
    max_episode_steps=1000,  # 10 s: two 0.005 s physics steps per env step
    keyframe="stand",
    substeps=2,
)

TASKS = (WALK,)
