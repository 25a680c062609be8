"""Ant on ``models/ant.xml``: walk forward (+x) without falling over.

``qpos = (x, y, z, quaternion (4), 8 leg joints)``; ``qvel`` starts with the torso's
linear velocity in the world frame.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks.base import Task

HEALTHY_Z = (0.3, 1.0)
"""Healthy torso heights, in metres: below 0.3 the sphere (radius 0.25) is almost on
the floor, above 1.0 the ant has jumped off it."""


def healthy(data: mjx.Data) -> jax.Array:
    """The torso's height is in :data:`HEALTHY_Z`."""
    z = data.qpos[2]
    return (z > HEALTHY_Z[0]) & (z < HEALTHY_Z[1])


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(27,)``: ``qpos`` without x and y (13) and ``qvel`` (14)."""
    del model
    return jnp.concatenate([data.qpos[2:], data.qvel])


def terminated(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """The torso left :data:`HEALTHY_Z`."""
    del model
    return ~healthy(data)


def reward(model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data) -> jax.Array:
    """Forward speed, plus 1 for staying healthy, minus a control cost."""
    del model, data
    alive = healthy(next_data).astype(next_data.qpos.dtype)
    return next_data.qvel[0] + alive - 0.05 * jnp.sum(action**2)


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Standing; leg joints uniform in +-0.1 rad, velocities normal with std 0.1."""
    del model
    k_pos, k_vel = jax.random.split(key)
    dtype = data.qpos.dtype
    joints = data.qpos[7:] + jax.random.uniform(k_pos, data.qpos[7:].shape, dtype, -0.1, 0.1)
    qvel = 0.1 * jax.random.normal(k_vel, data.qvel.shape, dtype)
    return data.replace(qpos=data.qpos.at[7:].set(joints), qvel=qvel)


WALK = Task(
    name="ant_walk",
    model="ant",
    observation=observation,
    reward=reward,
    terminated=terminated,
    initial_state=start,
    max_episode_steps=1000,  # 10 s: two 0.005 s physics steps per env step
    keyframe="stand",
    substeps=2,
)

TASKS = (WALK,)
