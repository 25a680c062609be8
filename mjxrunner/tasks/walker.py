"""Walker tasks: the ant, hopper and humanoid tasks, built from what sets them apart.

A walker moves forward (+x) without falling: its reward is the forward speed
``qvel[0]``, plus a bonus while it is healthy, minus a quadratic control cost; its
episode ends once it is no longer healthy, and starts from the scene's ``stand``
keyframe with some noise. A task module names only what differs (the health check,
how much of ``qpos`` the policy sees, the weights, the start noise)::

    healthy, observation, terminated, reward, start, WALK = walker.on_free_joint(
        __name__, "ant_walk", "ant", (0.3, 1.0), ctrl_cost=0.05, joint_noise=0.1, vel_std=0.1
    )

:func:`on_free_joint` is :func:`walker` for a root on a free joint (the ant's, the
humanoid's); a walker on other joints (the hopper's slides) gives :func:`walker` its
own health check and start.

The functions are built once, at import, so a task keeps comparing (and hashing)
equal to itself. Each is named as if written in the task module (``ant.reward``),
which is where it is found. This module defines no ``TASKS``: the registry finds
nothing to register here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.tasks.base import InitialStateFn, ObservationFn, RewardFn, Task, TerminatedFn

HealthyFn = Callable[[mjx.Data], jax.Array]
"""``healthy(data) -> ()`` bool: the walker can go on from this state."""


class Walker(NamedTuple):
    """A walker task and its functions, in the order a task module unpacks them."""

    healthy: HealthyFn
    observation: ObservationFn
    terminated: TerminatedFn
    reward: RewardFn
    start: InitialStateFn
    task: Task


def height_between(low: float, high: float) -> HealthyFn:
    """A health check: the torso's height ``qpos[2]`` (a free joint's z) is in
    ``(low, high)``."""

    def healthy(data: mjx.Data) -> jax.Array:
        z = data.qpos[2]
        return (z > low) & (z < high)

    healthy.__doc__ = f"The torso's height is in ({low:g}, {high:g}) m."
    return healthy


def noisy_joints(
    first_joint: int,
    noise: float,
    *,
    vel_noise: float | None = None,
    vel_std: float | None = None,
) -> InitialStateFn:
    """A start: ``qpos[first_joint:]`` uniform in ``+-noise`` around the keyframe (7 for
    a walker on a free joint: the joints after its position and quaternion), and
    ``qvel`` uniform in ``+-vel_noise`` or normal with std ``vel_std`` (give one)."""
    if (vel_noise is None) == (vel_std is None):
        raise ValueError("noisy_joints() takes exactly one of vel_noise and vel_std")

    def start(model: mjx.Model, data: mjx.Data, key: jax.Array) -> mjx.Data:
        del model
        k_pos, k_vel = jax.random.split(key)
        dtype = data.qpos.dtype
        joints = data.qpos[first_joint:] + jax.random.uniform(
            k_pos, data.qpos[first_joint:].shape, dtype, -noise, noise
        )
        if vel_std is None:
            qvel = jax.random.uniform(k_vel, data.qvel.shape, dtype, -vel_noise, vel_noise)
        else:
            qvel = vel_std * jax.random.normal(k_vel, data.qvel.shape, dtype)
        return data.replace(qpos=data.qpos.at[first_joint:].set(joints), qvel=qvel)

    velocities = (
        f"uniform in +-{vel_noise:g}" if vel_std is None else f"normal with std {vel_std:g}"
    )
    start.__doc__ = f"Standing; joints uniform in +-{noise:g} rad, velocities {velocities}."
    return start


def walker(
    module: str,
    name: str,
    model: str,
    *,
    healthy: HealthyFn,
    observe_from: int,
    ctrl_cost: float,
    start: InitialStateFn,
    healthy_reward: float = 1.0,
    clip_qvel: float | None = None,
    max_episode_steps: int = 1000,
    keyframe: str = "stand",
    substeps: int = 2,
) -> Walker:
    """The walker task ``name`` on scene ``model``, and its functions.

    Args:
      module: the task module's ``__name__``: the built functions are named as its own.
      name, model: the task's name and scene.
      healthy: the health check; not healthy is terminal.
      observe_from: the observation is ``qpos[observe_from:]`` (leaving out where the
        walker is on the floor), then ``qvel``.
      ctrl_cost: weight of the control cost ``sum(action**2)``.
      start: the task's ``initial_state`` (see :func:`noisy_joints`).
      healthy_reward: bonus for every step that ends healthy.
      clip_qvel: None, or the observed ``qvel`` is clipped to ``+-clip_qvel``.
      max_episode_steps, keyframe, substeps: as for :class:`Task`.
    """

    def observation(model: mjx.Model, data: mjx.Data) -> jax.Array:
        del model
        qpos = data.qpos[observe_from:]
        if clip_qvel is None:
            return jnp.concatenate([qpos, data.qvel])
        return jnp.concatenate([qpos, jnp.clip(data.qvel, -clip_qvel, clip_qvel)])

    def terminated(model: mjx.Model, data: mjx.Data) -> jax.Array:
        del model
        return ~healthy(data)

    def reward(
        model: mjx.Model, data: mjx.Data, action: jax.Array, next_data: mjx.Data
    ) -> jax.Array:
        del model, data
        alive = healthy(next_data).astype(next_data.qpos.dtype)
        speed = next_data.qvel[0]
        bonus = alive if healthy_reward == 1.0 else healthy_reward * alive
        return speed + bonus - ctrl_cost * jnp.sum(action**2)

    clipped = "" if clip_qvel is None else f" clipped to +-{clip_qvel:g}"
    observation.__doc__ = f"``qpos[{observe_from}:]`` and ``qvel``{clipped}."
    terminated.__doc__ = "Not :func:`healthy`: the walker fell."
    reward.__doc__ = (
        f"Forward speed, plus {healthy_reward:g} for staying healthy, minus "
        f"{ctrl_cost:g} times the squared action."
    )
    functions = {
        "healthy": healthy,
        "observation": observation,
        "terminated": terminated,
        "reward": reward,
        "start": start,
    }
    for role, fn in functions.items():
        if "<locals>" in fn.__qualname__:  # built here: named as the task module's own
            fn.__module__, fn.__name__, fn.__qualname__ = module, role, role
    task = Task(
        name=name,
        model=model,
        observation=observation,
        reward=reward,
        terminated=terminated,
        initial_state=start,
        max_episode_steps=max_episode_steps,
        keyframe=keyframe,
        substeps=substeps,
    )
    return Walker(**functions, task=task)


def on_free_joint(
    module: str,
    name: str,
    model: str,
    healthy_z: tuple[float, float],
    *,
    ctrl_cost: float,
    joint_noise: float,
    vel_noise: float | None = None,
    vel_std: float | None = None,
    healthy_reward: float = 1.0,
) -> Walker:
    """A :func:`walker` whose root is a free joint, ``qpos = (x, y, z, quaternion (4),
    joints)``: healthy while the torso's height is in ``healthy_z``, observing
    ``qpos`` without x and y, starting with noise on the joints (:func:`noisy_joints`)."""
    return walker(
        module,
        name,
        model,
        healthy=height_between(*healthy_z),
        observe_from=2,
        ctrl_cost=ctrl_cost,
        start=noisy_joints(7, joint_noise, vel_noise=vel_noise, vel_std=vel_std),
        healthy_reward=healthy_reward,
    )
