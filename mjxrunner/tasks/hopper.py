"""Hopper on ``models/hopper.xml``: hop forward without falling.

``qpos = (rootx, rootz, rooty, thigh, leg, foot)``: root slides and hinge, then the
three joints. The torso's centre is ``TORSO_HEIGHT + rootz`` above the floor.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks.base import Task

TORSO_HEIGHT = 1.25
"""Height of the torso's centre at ``rootz = 0`` (the ``stand`` keyframe)."""

MIN_HEIGHT, MAX_TILT = 0.7, 0.4
"""Healthy: torso centre above 0.7 m and torso tilted less than 0.4 rad (~23 deg)."""


def healthy(data: mjx.Data) -> jax.Array:
    """The torso is high and upright enough to go on."""
    height = TORSO_HEIGHT + data.qpos[1]
    return (height > MIN_HEIGHT) & (jnp.abs(data.qpos[2]) < MAX_TILT)


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(11,)``: ``qpos`` without ``rootx`` (the task does not depend on where it
    is), and ``qvel`` clipped to +-10."""
    del model
    return jnp.concatenate([data.qpos[1:], jnp.clip(data.qvel, -10.0, 10.0)])


def terminated(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """The hopper fell: torso too low or too tilted."""
    del model
    return ~healthy(data)


def reward(model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data) -> jax.Array:
    """Forward speed, plus 1 for staying healthy, minus a small control cost."""
    del model, data
    alive = healthy(next_data).astype(next_data.qpos.dtype)
    return next_data.qvel[0] + alive - 1e-3 * jnp.sum(action**2)


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Standing, ``qpos`` and ``qvel`` uniform in +-0.005 around rest."""
    del model
    k_pos, k_vel = jax.random.split(key)
    dtype = data.qpos.dtype
    qpos = data.qpos + jax.random.uniform(k_pos, data.qpos.shape, dtype, -0.005, 0.005)
    qvel = jax.random.uniform(k_vel, data.qvel.shape, dtype, -0.005, 0.005)
    return data.replace(qpos=qpos, qvel=qvel)


HOP = Task(
    name="hopper_hop",
    model="hopper",
    observation=observation,
    reward=reward,
    terminated=terminated,
    initial_state=start,
    max_episode_steps=1000,  # 8 s: two 0.004 s physics steps per env step
    keyframe="stand",
    substeps=2,
)

TASKS = (HOP,)
