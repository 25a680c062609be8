"""Gymnasium ids for the built-in tasks, registered when mjxrunner is imported.

Task ``cartpole_balance`` is ``"mjxrunner/CartpoleBalance-v0"``: the namespace, the
task name in CamelCase, a version that grows when a task's dynamics, reward or
observation change. Each id has only a ``vector_entry_point``
(:class:`mjxrunner.gym.MjxVectorEnv`), since the worlds are batched on device::

    import gymnasium, mjxrunner
    envs = gymnasium.make_vec("mjxrunner/CartpoleBalance-v0", num_envs=64,
                              vectorization_mode="vector_entry_point", impl="jax")

Keyword arguments of ``make_vec`` reach :class:`~mjxrunner.gym.MjxVectorEnv`. A
task with pixel observations (``Task.pixels``) defaults to ``impl="warp"``, the
only impl MJX renders with; a task on a scene MJX cannot run
(``ModelInfo.impls``, e.g. ``go1_joystick`` on ``go1_cpu``) to ``impl="c"``.
"""

from __future__ import annotations

import gymnasium

from mjxrunner import tasks
from mjxrunner.engine import models

NAMESPACE = "mjxrunner"
VERSION = 0


def gym_id(task_name: str, version: int = VERSION) -> str:
    """``"mjxrunner/<TaskName>-v<version>"`` for a task name."""
    camel = "".join(part[:1].upper() + part[1:] for part in task_name.split("_"))
    return f"{NAMESPACE}/{camel}-v{version}"


def register(task_name: str, version: int = VERSION) -> str:
    """Registers a task (built in or from ``mjxrunner.tasks.register``) with Gymnasium;
    returns its id. Registering the same id again changes nothing."""
    task = tasks.get(task_name)  # refuses an unknown name, listing the known ones
    env_id = gym_id(task_name, version)
    kwargs = {"task": task_name}
    if task.pixels is not None:
        kwargs["impl"] = "warp"  # MJX renders only with MuJoCo Warp
    elif isinstance(task.model, str) and "jax" not in models.impls(task.model):
        # a scene MJX cannot run (go1_joystick: impl "c"); registration runs at import,
        # so it reads the registry, not the robot's files (the robots extra is optional)
        kwargs["impl"] = models.impls(task.model)[0]
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, vector_entry_point="mjxrunner.gym:MjxVectorEnv", kwargs=kwargs)
    return env_id


def register_all() -> list[str]:
    """Registers every task of ``mjxrunner.tasks.list()``; returns their ids."""
    return [register(name) for name in tasks.list()]
