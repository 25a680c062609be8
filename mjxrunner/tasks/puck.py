"""Puck on ``models/puck.xml`` and its variants: push the puck onto a target.

``qpos = (x, y, z)`` of the puck; the target is the scene's mocap body, drawn anew
at every restart. The variants (``puck_blocks``, ``puck_steps``) share joints,
actuators and keyframe, so this task runs on each of them (``model=`` of
:func:`mjxrunner.env.make`, or a group of a heterogeneous env).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks.base import Task, never_terminated

START_RADIUS = 0.1
"""The puck starts uniformly in this disc around the origin."""

TARGET_RADII = (0.2, 0.6)
"""Targets lie in this ring around the origin (uniform in area)."""


def to_target(data: mjx.Data) -> jax.Array:
    """``(2,)`` vector from the puck to the target in the plane."""
    return data.mocap_pos[0, :2] - data.qpos[:2]


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(8,)``: puck position and velocity, puck-to-target vector."""
    del model
    return jnp.concatenate([data.qpos, data.qvel, to_target(data)])


def reward(model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data) -> jax.Array:
    """Minus the puck's distance to the target, minus a small control cost."""
    del model, data
    distance = jnp.linalg.norm(to_target(next_data))
    return (-distance - 0.01 * jnp.sum(action**2)).astype(next_data.qpos.dtype)


def _in_disc(key: jax.Array, r_in: float, r_out: float, dtype) -> jax.Array:
    """``(2,)`` point uniform in area over the ring ``r_in <= r <= r_out``."""
    k_r, k_a = jax.random.split(key)
    radius = jnp.sqrt(jax.random.uniform(k_r, (), dtype, r_in**2, r_out**2))
    angle = jax.random.uniform(k_a, (), dtype, -jnp.pi, jnp.pi)
    return jnp.stack([radius * jnp.cos(angle), radius * jnp.sin(angle)])


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """The puck at rest anywhere in :data:`START_RADIUS`, a target in the ring
    :data:`TARGET_RADII`."""
    del model
    k_p, k_t = jax.random.split(key)
    dtype = data.qpos.dtype
    xy = _in_disc(k_p, 0.0, START_RADIUS, dtype)
    qpos = data.qpos.at[:2].set(xy)
    target = jnp.concatenate([_in_disc(k_t, *TARGET_RADII, dtype), jnp.zeros((1,), dtype)])
    mocap_pos = data.mocap_pos.at[0].set(target.astype(data.mocap_pos.dtype))
    return data.replace(qpos=qpos, qvel=jnp.zeros_like(data.qvel), mocap_pos=mocap_pos)


REACH = Task(
    name="puck_reach",
    model="puck",
    observation=observation,
    reward=reward,
    terminated=never_terminated,
    initial_state=start,
    max_episode_steps=200,  # 2 s at the scene's 0.01 s timestep
    keyframe="home",
    forward_on_reset=False,  # observation and reward read qpos, qvel and mocap only
)

TASKS = (REACH,)
