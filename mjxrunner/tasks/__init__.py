"""Tasks: the RL problems defined on the scenes in ``models/``, and their registry.

Every module of this package (other than ``base``) that defines ``TASKS``, a tuple
of :class:`Task`, is registered on first use: a new scene's tasks need only a new
module here. User tasks can be added at run time with :func:`register`.

May import: :mod:`mjxrunner.engine`, :mod:`mjxrunner.kit` and modules of this
subpackage.

Example::

    from mjxrunner import tasks
    task = tasks.get("cartpole_balance")
    [t.name for t in tasks.for_model("cartpole")]
"""

from __future__ import annotations

import builtins
import importlib
import pkgutil

from mjxrunner.tasks.base import (
    InitialStateFn,
    ObservationFn,
    RewardFn,
    Task,
    TerminatedFn,
    action_bounds,
    deterministic_start,
    never_terminated,
    no_state,
)

_REGISTRY: dict[str, Task] = {}
_discovered = False


def _discover() -> None:
    """Imports the task modules of this package once and registers their ``TASKS``."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for task in getattr(module, "TASKS", ()):
            register(task)


def register(task: Task) -> Task:
    """Adds ``task`` to the registry under ``task.name`` and returns it.

    Raises:
      TypeError: ``task`` is not a :class:`Task`.
      ValueError: another task already has that name.
    """
    if not isinstance(task, Task):
        raise TypeError(f"register() takes a mjxrunner.tasks.Task, got {type(task).__name__}")
    known = _REGISTRY.get(task.name)
    if known is not None and known != task:
        raise ValueError(f"a different task named {task.name!r} is already registered")
    _REGISTRY[task.name] = task
    return task


def list() -> builtins.list[str]:  # noqa: A001 - the registry's verb, as in models.list()
    """Names of the registered tasks, sorted."""
    _discover()
    return sorted(_REGISTRY)


def get(name: str) -> Task:
    """The task registered as ``name``.

    Raises:
      TypeError: ``name`` is not a str.
      ValueError: no task has that name (the message lists the known ones).
    """
    if not isinstance(name, str):
        raise TypeError(f"task name must be a str, got {type(name).__name__}")
    _discover()
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(list())}")
    return _REGISTRY[name]


def for_model(model_name: str) -> tuple[Task, ...]:
    """The tasks defined on scene ``model_name``, sorted by name (may be empty).

    A structural variant of a scene (``ModelInfo.variant_of``) has its tasks.

    Raises:
      TypeError: ``model_name`` is not a str.
    """
    if not isinstance(model_name, str):
        raise TypeError(f"model name must be a str, got {type(model_name).__name__}")
    _discover()
    from mjxrunner.engine import models

    try:
        base = models.info(model_name).variant_of or model_name
    except ValueError:  # not a scene of ours: only tasks named for it
        base = model_name
    return tuple(_REGISTRY[n] for n in sorted(_REGISTRY) if _REGISTRY[n].model == base)


__all__ = [
    "InitialStateFn",
    "ObservationFn",
    "RewardFn",
    "Task",
    "TerminatedFn",
    "action_bounds",
    "deterministic_start",
    "for_model",
    "get",
    "list",
    "never_terminated",
    "no_state",
    "register",
]
