"""Per-world task state across episodes (a curriculum), drawn and moved by the env.

A task's info (:mod:`mjxrunner.tasks.base`) is drawn afresh at every restart; what
must outlive an episode (a terrain level, a spawn point) is the task's curriculum
state, ``EnvState.curriculum``, each leaf with a leading world axis:

* :func:`mjxrunner.env.reset` draws it for every world with
  ``task.initial_curriculum(model, key, world)``;
* a restart (autoreset, or ``reset_worlds``) first moves it for the restarted worlds
  only, with ``task.update_curriculum(model, data, info, state, key)`` on the state
  their episodes ended in, then draws their fresh starts with it
  (``task.initial_state(model, data, key, state)``).

Which state an episode ended in, per autoreset mode: ``"same_step"``, the state the
step reached; ``"next_step"``, the state of the previous step (the one that reported
the end; the restarting step's own physics is discarded); ``reset_worlds``, the
world's current state.

Keys come from each world's own stream: the reset's from the world's first key, a
restart's from that restart's draw key, each through the env's curriculum
``fold_in`` sub-stream (3; its info and noise use 1 and 2), so the curriculum
reproduces bit for bit with the rest of a run, sharded or not.
Everything here runs inside the env's compiled functions, on each device's worlds.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mjxrunner.engine.worlds import FlatModel, world_axes
from mjxrunner.tasks.base import Task


def initial(task: Task, model: FlatModel, keys: jax.Array, world: jax.Array) -> Any:
    """Every local world's curriculum state at a reset (None for a task without one).

    Args:
      task: the task.
      model: the env's model (leaves shared or per world).
      keys: ``(n,)`` typed keys, each world's curriculum sub-stream at the reset.
      world: ``(n,)`` int32, each world's index in the whole batch (sharded, the
        devices hold slices of it).
    """
    if not task.has_curriculum:
        return None
    tree = model.tree
    return jax.vmap(task.initial_curriculum, in_axes=(world_axes(tree), 0, 0))(tree, keys, world)


def updated(task: Task, model: FlatModel, state: Any, data: Any, info: Any, keys: jax.Array) -> Any:
    """Every world's curriculum moved by the episode that ended in ``(data, info)``
    (the env keeps it for the restarted worlds only).

    Args:
      task: the task.
      model: the model the episodes ran with.
      state: the current curriculum state (None without one).
      data, info: the batch as the episodes ended.
      keys: ``(n,)`` typed keys, each world's curriculum sub-stream of this restart.
    """
    tree = model.tree
    return jax.vmap(task.update_curriculum, in_axes=(world_axes(tree), 0, 0, 0, 0))(
        tree, data, info, state, keys
    )


def episode_end(flag: jax.Array, previous: Any, current: Any) -> Any:
    """``previous`` where the scalar ``flag`` (the ``"next_step"`` mode), else
    ``current``: one choice for the whole batch, so pooled leaves are safe."""
    return jax.tree.map(lambda a, b: jnp.where(flag, a, b), previous, current)


def take(state: Any, index: jax.Array) -> Any:
    """Worlds ``index`` of a curriculum state (indices past the end read the last).
    Not ``worlds.take_worlds``: every leaf here has a world axis, declared or not
    (a task's own dict of arrays reads as shared there)."""
    if state is None:
        return None

    def gather(leaf):
        return leaf[jnp.minimum(index, leaf.shape[0] - 1)]

    return jax.tree.map(gather, state)
