"""Humanoid on ``models/humanoid.xml``: walk forward (+x) without falling.

``qpos = (x, y, z, quaternion (4), 21 joints)``; ``qvel`` starts with the torso's
linear velocity in the world frame.

A :mod:`~mjxrunner.tasks.walker`: reward forward speed, plus 2 for staying up, minus
0.01 times the squared action; observe ``qpos`` without x and y (26) and ``qvel``
(27); start standing, joints and velocities uniform in +-0.01 around rest. An
episode is 1000 steps, 10 s: two 0.005 s physics steps per env step.
"""

from __future__ import annotations

from mjxrunner.tasks import walker

HEALTHY_Z = (0.8, 2.0)
"""Healthy torso heights, in metres (standing puts the torso at about 1.2)."""

healthy, observation, terminated, reward, start, WALK = walker.on_free_joint(
    __name__,
    "humanoid_walk",
    "humanoid",
    HEALTHY_Z,
    ctrl_cost=0.01,
    healthy_reward=2.0,
    joint_noise=0.01,
    vel_noise=0.01,
)

TASKS = (WALK,)
