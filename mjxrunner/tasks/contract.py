"""A task's functions held to their contract when an env is built.

The env ``vmap``s a task's single-world functions over the worlds; a function that
returns the wrong shape is broadcast instead of refused (a ``(1,)`` reward becomes a
``(num_envs, num_envs)`` batch), a float ``terminated`` is cast, and a function of
the wrong arity fails deep inside a trace. :func:`check` calls each function once,
abstractly (``jax.eval_shape``, so nothing runs or compiles), on one world, and
raises a ``TypeError`` or ``ValueError`` that names the task, the function, what
was expected and what came.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

__all__ = ["check"]


def _signature(task: Any, name: str) -> str:
    """The call a function of ``task`` must accept, as the docs write it."""
    info = ", info" if task.has_info else ""
    return {
        "initial_curriculum": "initial_curriculum(model, key, world)",
        "initial_state": "initial_state(model, data, key"
        + (", curriculum)" if task.has_curriculum else ")"),
        "initial_info": "initial_info(model, data, key)",
        "observation": f"observation(model, data{info})",
        "reward": f"reward(model, data, action, next_data{info})",
        "terminated": f"terminated(model, data{info})",
        "update_info": "update_info(model, data, action, next_data, info, key)",
        "update_curriculum": "update_curriculum(model, data, info, state, key)",
    }[name]


def _call(task: Any, name: str, args: tuple) -> Any:
    """``task.<name>(*args)`` traced abstractly; a signature that cannot take
    ``args`` is refused before the trace."""
    fn: Callable = getattr(task, name)
    where = f"task {task.name!r}: {name}"
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        raise TypeError(
            f"{where} must accept {_signature(task, name)} ({len(args)} arguments); "
            f"its signature is {name}{inspect.signature(fn)}"
        ) from None
    except ValueError:  # no signature to read (a builtin): the trace will tell
        pass
    return jax.eval_shape(fn, *args)


def _shown(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{np.dtype(x.dtype).name}{list(x.shape)}"
    return type(x).__name__


def _scalar(task: Any, name: str, out: Any, kind: str) -> None:
    """``out`` is one world's scalar of ``kind`` (``"float"`` or ``"bool"``)."""
    where = f"task {task.name!r}: {_signature(task, name)}"
    if not (hasattr(out, "shape") and hasattr(out, "dtype")):
        raise TypeError(f"{where} must return a {kind} scalar array, got {_shown(out)}")
    if out.shape != ():
        raise ValueError(
            f"{where} must return one world's {kind} scalar, shape (); got {_shown(out)} "
            "(the env adds the world axis itself)"
        )
    ok = jnp.issubdtype(out.dtype, jnp.floating) if kind == "float" else out.dtype == jnp.bool_
    if not ok:
        raise TypeError(f"{where} must return a {kind} scalar, got {_shown(out)}")


def _same_tree(task: Any, name: str, got: Any, want: Any, what: str) -> None:
    """``got`` has ``want``'s structure, shapes and dtypes."""
    where = f"task {task.name!r}: {_signature(task, name)}"
    got_paths = jax.tree_util.tree_flatten_with_path(got)
    want_paths = jax.tree_util.tree_flatten_with_path(want)
    if got_paths[1] != want_paths[1]:
        raise TypeError(f"{where} must return {what} of the same structure as it was given")
    for (path, g), (_, w) in zip(got_paths[0], want_paths[0], strict=True):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise ValueError(
                f"{where} returned {jax.tree_util.keystr(path)} as {_shown(g)}; the "
                f"model's is {_shown(w)}"
            )


def _observation(task: Any, obs: Any) -> None:
    where = f"task {task.name!r}: {_signature(task, 'observation')}"
    if isinstance(obs, dict):
        for term, value in obs.items():
            if not (hasattr(value, "shape") and hasattr(value, "dtype")):
                raise TypeError(f"{where}: term {term!r} must be an array, got {_shown(value)}")
        return
    if not (hasattr(obs, "shape") and hasattr(obs, "dtype")):
        raise TypeError(
            f"{where} must return an (obs_dim,) float array or a dict of arrays, got {_shown(obs)}"
        )
    if obs.ndim != 1 or not jnp.issubdtype(obs.dtype, jnp.floating):
        raise ValueError(
            f"{where} must return one world's (obs_dim,) float array (or a dict of "
            f"terms), got {_shown(obs)}"
        )


def check(task: Any, model: mjx.Model, data: mjx.Data, nu: int) -> None:
    """Checks every function of ``task`` on one world: ``model`` (no world axis),
    ``data`` (its default start) and an ``(nu,)`` action.

    Raises:
      TypeError: a function cannot take its arguments, or returns the wrong kind
        (a float ``terminated``, a reward that is not an array).
      ValueError: a function returns the wrong shape (a ``(1,)`` reward, a start
        whose ``qpos`` is not the model's).
    """
    key = jax.random.key(0)
    curriculum: tuple = ()
    if task.has_curriculum:
        curriculum = (_call(task, "initial_curriculum", (model, key, jnp.int32(0))),)
    start = _call(task, "initial_state", (model, data, key, *curriculum))
    if not isinstance(start, mjx.Data):
        raise TypeError(
            f"task {task.name!r}: {_signature(task, 'initial_state')} must return the "
            f"mjx.Data it was given with new values, got {type(start).__name__}"
        )
    _same_tree(task, "initial_state", start, jax.eval_shape(lambda d: d, data), "data")
    info: tuple = ()
    if task.has_info:
        info = (_call(task, "initial_info", (model, start, key)),)
    obs = _call(task, "observation", (model, start, *info))
    _observation(task, obs)
    if task.mirror is not None:
        _mirror(task, obs, nu)
    action = jax.ShapeDtypeStruct((nu,), data.qpos.dtype)
    _scalar(task, "reward", _call(task, "reward", (model, start, action, start, *info)), "float")
    _scalar(task, "terminated", _call(task, "terminated", (model, start, *info)), "bool")
    if task.has_info and task.update_info is not None:
        new = _call(task, "update_info", (model, start, action, start, info[0], key))
        _same_tree(task, "update_info", new, info[0], "info")
    if task.has_curriculum and task.update_curriculum is not None:
        info_arg = info[0] if info else None
        new = _call(task, "update_curriculum", (model, start, info_arg, curriculum[0], key))
        _same_tree(task, "update_curriculum", new, curriculum[0], "the curriculum state")


def _mirror(task: Any, obs: Any, nu: int) -> None:
    """The task's mirror acts on its observation's terms and on an ``(nu,)`` action."""
    try:
        jax.eval_shape(task.mirror.observation, obs)
    except ValueError as e:
        raise ValueError(
            f"task {task.name!r}: Task.mirror does not fit its observation: {e}"
        ) from None
    if len(task.mirror.action.perm) != nu:
        raise ValueError(
            f"task {task.name!r}: Task.mirror's action has {len(task.mirror.action.perm)} "
            f"entries, the action {nu}"
        )
