"""Cart-pole tasks on ``models/cartpole.xml``: balance upright, and swing up.

``qpos = (cart position, pole angle)``; the angle is 0 with the pole upright and
pi hanging down. The motor pushes the cart with ``gear * ctrl``, ``ctrl`` in [-1, 1].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks import rewards
from mjxrunner.tasks.base import Task, never_terminated

BALANCE_ANGLE = 0.2
"""Balance ends (terminated) once the pole leans more than this, in radians (~11.5
degrees, as in Gymnasium's CartPole and InvertedPendulum)."""


def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """``(5,)``: cart position, cos and sin of the pole angle, both velocities.

    The angle enters as cos/sin so swing-up sees no jump when the pole turns over.
    """
    del model
    x, angle = data.qpos[0], data.qpos[1]
    return jnp.stack([x, jnp.cos(angle), jnp.sin(angle), data.qvel[0], data.qvel[1]])


# --- balance ---------------------------------------------------------------------


def balance_terminated(model: mjx.Model, data: mjx.Data) -> jax.Array:
    """The pole leans more than :data:`BALANCE_ANGLE` from upright."""
    del model
    return jnp.abs(data.qpos[1]) > BALANCE_ANGLE


def balance_reward(
    model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data
) -> jax.Array:
    """1 for every step that does not end in the fall: the return counts upright steps,
    so the maximum return is ``max_episode_steps``."""
    del data, action
    return 1.0 - balance_terminated(model, next_data).astype(next_data.qpos.dtype)


def balance_start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Near upright: each of ``qpos``, ``qvel`` uniform in +-0.05 around rest."""
    del model
    return rewards.uniform_around_rest(data, key, 0.05, 0.05)


# --- swing-up ----------------------------------------------------------------------


def swingup_reward(
    model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data
) -> jax.Array:
    """In [0, 1]: upright times centred times small control times slow pole.

    Each factor is smooth, so the gradient of the reward leads all the way up from
    hanging; the last three only scale it between 1/2 (or 4/5) and 1, so being upright
    always pays most.
    """
    del model, data
    x, angle, angle_vel = next_data.qpos[0], next_data.qpos[1], next_data.qvel[1]
    upright = rewards.to_unit(jnp.cos(angle), 1.0)
    centred = (1.0 + jnp.exp(-0.5 * x**2)) / 2.0
    small_control = (4.0 + (1.0 - jnp.clip(action[0], -1.0, 1.0) ** 2)) / 5.0
    slow = (1.0 + jnp.exp(-0.5 * (angle_vel / 5.0) ** 2)) / 2.0
    return (upright * centred * small_control * slow).astype(next_data.qpos.dtype)


def swingup_start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Hanging (the ``hanging`` keyframe) with cart and angle uniform in +-0.1 and
    velocities uniform in +-0.05."""
    del model
    return rewards.uniform_around_rest(data, key, 0.1, 0.05)


BALANCE = Task(
    name="cartpole_balance",
    model="cartpole",
    observation=observation,
    reward=balance_reward,
    terminated=balance_terminated,
    initial_state=balance_start,
    forward_on_reset=False,  # observation reads qpos and qvel only
    max_episode_steps=500,  # 5 s at the scene's 0.01 s timestep
    keyframe="upright",
)

SWINGUP = Task(
    name="cartpole_swingup",
    model="cartpole",
    observation=observation,
    reward=swingup_reward,
    terminated=never_terminated,
    initial_state=swingup_start,
    forward_on_reset=False,  # observation reads qpos and qvel only
    max_episode_steps=1000,  # 10 s
    keyframe="hanging",
)

TASKS = (BALANCE, SWINGUP)
