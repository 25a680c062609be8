"""Reacher on ``models/reacher.xml``: bring the fingertip to a target in the plane.

``qpos = (shoulder, elbow)``; the target is the scene's mocap body, so each world's
target is ``data.mocap_pos[0]`` and is drawn anew at every restart.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks.base import Task, never_terminated

UPPER, LOWER = 0.1, 0.11
"""Shoulder-to-elbow and elbow-to-fingertip lengths in the scene, in metres."""

TARGET_RADII = (0.05, 0.2)
"""Targets lie in this ring around the shoulder (the arm reaches 0.01 to 0.21)."""


def fingertip(data: mjx.Data) -> jax.Array:
    """``(2,)`` fingertip position in the plane, from ``qpos`` (so never a step late)."""
    shoulder, elbow = data.qpos[0], data.qpos[1]
    return jnp.stack(
        [
            UPPER * jnp.cos(shoulder) + LOWER * jnp.cos(shoulder + elbow),
            UPPER * jnp.sin(shoulder) + LOWER * jnp.sin(shoulder + elbow),
        ]
    )


def to_target(data: mjx.Data) -> jax.Array:
    """``(2,)`` vector from the fingertip to the target."""
    return data.mocap_pos[0, :2] - fingertip(data)


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(10,)``: cos and sin of both angles, both velocities, target position,
    fingertip-to-target vector."""
    del model
    q = data.qpos
    return jnp.concatenate(
        [jnp.cos(q), jnp.sin(q), data.qvel, data.mocap_pos[0, :2], to_target(data)]
    )


def reward(model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data) -> jax.Array:
    """Minus the fingertip's distance to the target, minus a small control cost."""
    del model, data
    distance = jnp.linalg.norm(to_target(next_data))
    return (-distance - 0.01 * jnp.sum(action**2)).astype(next_data.qpos.dtype)


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Any shoulder angle, elbow uniform in +-2.5, velocities uniform in +-0.005, and
    a target uniform over the ring :data:`TARGET_RADII` (uniform in area)."""
    del model
    k_q, k_v, k_r, k_a = jax.random.split(key, 4)
    dtype = data.qpos.dtype
    qpos = jax.random.uniform(k_q, (2,), dtype, -1.0, 1.0) * jnp.array([jnp.pi, 2.5], dtype)
    qvel = jax.random.uniform(k_v, data.qvel.shape, dtype, -0.005, 0.005)
    r_in, r_out = TARGET_RADII
    radius = jnp.sqrt(jax.random.uniform(k_r, (), dtype, r_in**2, r_out**2))
    angle = jax.random.uniform(k_a, (), dtype, -jnp.pi, jnp.pi)
    target = jnp.stack([radius * jnp.cos(angle), radius * jnp.sin(angle), jnp.zeros((), dtype)])
    mocap_pos = data.mocap_pos.at[0].set(target.astype(data.mocap_pos.dtype))
    return data.replace(qpos=qpos, qvel=qvel, mocap_pos=mocap_pos)


REACH = Task(
    name="reacher_reach",
    model="reacher",
    observation=observation,
    reward=reward,
    terminated=never_terminated,
    initial_state=start,
    max_episode_steps=200,  # 2 s at the scene's 0.01 s timestep
    keyframe="home",
)

TASKS = (REACH,)
