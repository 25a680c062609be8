"""Pendulum swing-up on ``models/pendulum.xml``.

``qpos = (angle,)`` is 0 with the bob hanging down and pi upright. The motor's
torque limit (2 N m) is below the bob's gravity torque (~4.9 N m), so the policy
must pump energy: it cannot lift the bob directly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks.base import Task, never_terminated


def _from_upright(data: mjx.Data) -> jax.Array:
    """The angle from upright, wrapped into [-pi, pi)."""
    # wrap(q - pi) = mod((q - pi) + pi, 2 pi) - pi
    return jnp.mod(data.qpos[0], 2 * jnp.pi) - jnp.pi


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(3,)``: cos and sin of the angle from upright, angular velocity."""
    del model
    phi = _from_upright(data)
    return jnp.stack([jnp.cos(phi), jnp.sin(phi), data.qvel[0]])


def reward(model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data) -> jax.Array:
    """Minus a quadratic cost of angle from upright, speed and torque (the weights of
    Gymnasium's Pendulum): 0 is best, about -16.3 at worst per step."""
    del model, data
    phi = _from_upright(next_data)
    cost = phi**2 + 0.1 * next_data.qvel[0] ** 2 + 0.001 * action[0] ** 2
    return (-cost).astype(next_data.qpos.dtype)


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Any angle (uniform over the circle) and angular velocity uniform in +-1."""
    del model
    k_pos, k_vel = jax.random.split(key)
    dtype = data.qpos.dtype
    qpos = jax.random.uniform(k_pos, data.qpos.shape, dtype, 0.0, 2 * jnp.pi)
    qvel = jax.random.uniform(k_vel, data.qvel.shape, dtype, -1.0, 1.0)
    return data.replace(qpos=qpos, qvel=qvel)


SWINGUP = Task(
    name="pendulum_swingup",
    model="pendulum",
    observation=observation,
    reward=reward,
    terminated=never_terminated,
    initial_state=start,
    forward_on_reset=False,  # observation reads qpos and qvel only
    max_episode_steps=200,  # 4 s at the scene's 0.02 s timestep
)

TASKS = (SWINGUP,)
