"""Hopper on ``models/hopper.xml``: hop forward without falling.

``qpos = (rootx, rootz, rooty, thigh, leg, foot)``: root slides and hinge, then the
three joints. The torso's centre is ``TORSO_HEIGHT + rootz`` above the floor.

A :mod:`~mjxrunner.tasks.walker`: reward forward speed, plus 1 for staying healthy,
minus 0.001 times the squared action; observe ``qpos`` without ``rootx`` (the task
does not depend on where it is) and ``qvel`` clipped to +-10 (11 in all). An
episode is 1000 steps, 8 s: two 0.004 s physics steps per env step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks import rewards, walker

TORSO_HEIGHT = 1.25
"""Height of the torso's centre at ``rootz = 0`` (the ``stand`` keyframe)."""

MIN_HEIGHT, MAX_TILT = 0.7, 0.4
"""Healthy: torso centre above 0.7 m and torso tilted less than 0.4 rad (~23 deg)."""


def healthy(data: mjx.Data) -> jax.Array:
    """The torso is high and upright enough to go on."""
    height = TORSO_HEIGHT + data.qpos[1]
    return (height > MIN_HEIGHT) & (jnp.abs(data.qpos[2]) < MAX_TILT)


def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
    """Standing, ``qpos`` and ``qvel`` uniform in +-0.005 around rest."""
    del model
    return rewards.uniform_around_rest(data, key, 0.005, 0.005)


healthy, observation, terminated, reward, start, HOP = walker.walker(
    __name__,
    "hopper_hop",
    "hopper",
    healthy=healthy,
    observe_from=1,
    clip_qvel=10.0,
    ctrl_cost=1e-3,
    start=start,
)

TASKS = (HOP,)
