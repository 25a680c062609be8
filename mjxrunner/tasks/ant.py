"""Ant on ``models/ant.xml``: walk forward (+x) without falling over.

``qpos = (x, y, z, quaternion (4), 8 leg joints)``; ``qvel`` starts with the torso's
linear velocity in the world frame.

A :mod:`~mjxrunner.tasks.walker`: reward forward speed, plus 1 for staying healthy,
minus 0.05 times the squared action; observe ``qpos`` without x and y (13) and
``qvel`` (14); start standing, leg joints uniform in +-0.1 rad, velocities normal
with std 0.1. An episode is 1000 steps, 10 s: two 0.005 s physics steps per env step.
"""

from __future__ import annotations

from mjxrunner.tasks import walker

HEALTHY_Z = (0.3, 1.0)
"""Healthy torso heights, in metres: below 0.3 the sphere (radius 0.25) is almost on
the floor, above 1.0 the ant has jumped off it."""

healthy, observation, terminated, reward, start, WALK = walker.on_free_joint(
    __name__, "ant_walk", "ant", HEALTHY_Z, ctrl_cost=0.05, joint_noise=0.1, vel_std=0.1
)

TASKS = (WALK,)
