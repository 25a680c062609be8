"""Acrobot swing-up on ``models/acrobot.xml``.

``qpos = (shoulder, elbow)``, both 0 with the links pointing up; the ``hanging``
keyframe has the shoulder at pi. Only the elbow has a motor (``2 * ctrl`` N m,
``ctrl`` in [-1, 1]), so the swing-up has to use the coupling of the two links.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks import rewards
from mjxrunner.tasks.base import Task, never_terminated


def tip_height(data: mjx.Data) -> jax.Array:
    """Height of the lower link's tip above the shoulder, in link lengths: in [-2, 2]."""
    shoulder, elbow = data.qpos[0], data.qpos[1]
    return jnp.cos(shoulder) + jnp.cos(shoulder + elbow)


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(6,)``: cos and sin of both angles, both angular velocities."""
    del model
    q = data.qpos
    return jnp.concatenate([jnp.cos(q), jnp.sin(q), data.qvel])


def reward(model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data) -> jax.Array:
    """In [0, 1]: the tip's height, 0 hanging straight down, 1 straight up."""
    del model, data, action
    return rewards.to_unit(tip_height(next_data), 2.0).astype(next_data.qpos.dtype)


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Hanging, angles uniform in +-0.1 around it, velocities uniform in +-0.05."""
    del model
    return rewards.uniform_around_rest(data, key, 0.1, 0.05)


SWINGUP = Task(
    name="acrobot_swingup",
    model="acrobot",
    observation=observation,
    reward=reward,
    terminated=never_terminated,
    initial_state=start,
    max_episode_steps=1000,  # 10 s at the scene's 0.01 s timestep
    keyframe="hanging",
)

TASKS = (SWINGUP,)
