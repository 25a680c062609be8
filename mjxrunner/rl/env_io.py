"""An env's checkpoint: what :func:`mjxrunner.env.save` writes for an ``Env`` and
one of its states, and :func:`mjxrunner.env.load` reads back (the format is
:mod:`mjxrunner.engine.archive`'s, the engine's fields :mod:`mjxrunner.engine.codec`'s).
Groups of envs save through :mod:`.group_env`, which registers its loader here."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import jax

from mjxrunner import engine, tasks
from mjxrunner.engine import archive, codec, core, params
from mjxrunner.engine.archive import CheckpointError, every_key, fill, read, write
from mjxrunner.engine.options import Options
from mjxrunner.engine.sharding import host_copy
from mjxrunner.engine.worlds import FlatModel
from mjxrunner.rl import episode, functional, restart


def _as_tree(state: Any) -> Any:
    """The ``EnvState`` with its carried model as an ``mjx.Model`` (readable keys)."""
    return state if state.model is None else state.replace(model=state.model.tree)


def _carried_model(key: str) -> bool:
    return key.startswith(".model.")


def save_env(path: str | os.PathLike, env: Any, state: Any) -> Path:
    """Writes an :class:`~mjxrunner.env.Env` and one of its states atomically.

    Args:
      path: the file to write; its directory must exist.
      env: the env (its model with per-world parameters, randomization, guards,
        reset pool, autoreset mode, observation normalization and task name are
        saved).
      state: an ``EnvState`` of ``env``; :func:`load_env` continues it bit for bit.

    Returns:
      The path written.

    Raises:
      ValueError: the directory does not exist, or ``state`` has another
        ``num_envs`` than ``env``.
      TypeError: ``state`` is not an ``EnvState``, or a randomization index
        cannot be written as JSON.
    """
    if not isinstance(env, functional.Env):
        raise TypeError(f"env must be a mjxrunner.env.Env, got {type(env).__name__}")
    if not isinstance(state, episode.EnvState):
        raise TypeError(f"state must be a mjxrunner.env.EnvState, got {type(state).__name__}")
    if state.num_envs != env.num_envs:
        raise ValueError(
            f"state has num_envs={state.num_envs}, the env has num_envs={env.num_envs}"
        )
    config = env.config
    parts = {"state": _as_tree(state), "model": env.model.tree}
    if env.pool is not None:
        parts["pool"] = env.pool
    fields = {
        **codec.engine_fields(config, env.model.tree, state.runner.user, env.ref),
        "task": env.task.name,
        "autoreset": episode.AUTORESET_MODES[int(host_copy(env.mode))],
        "pool_size": env.pool_size,
        "restart_slots": env.restart_slots,
        "obs_normalization": None
        if env.normalize is None
        else {"clip": env.normalize.clip, "eps": env.normalize.eps},
    }
    return write(path, "env", parts, env.host.mj_model, fields)


def load_env(
    path: str | os.PathLike,
    *,
    task: Any = None,
    allow_other_task: bool = False,
    device: Any = None,
    devices: Any = None,
    guards: Any = (),
    user_template: Any = None,
) -> tuple[Any, Any]:
    """``(env, state)`` from a checkpoint written by :func:`save_env`; stepping the
    state continues the saved run bit for bit (same package versions and device kind).

    Args:
      path: the file.
      task: the task (a ``Task`` or a registered name), when it is not registered
        under its saved name; it must have the saved task's name.
      allow_other_task: load the saved state under a ``task`` of another name
        (e.g. a ``cartpole_balance`` run continued as ``cartpole_swingup``).
      device: where to put the env (None: JAX's default device).
      devices: devices to split the worlds over (None: one device); the file does
        not depend on how the saving env was split.
      guards: the saving env's extra guards (functions are not saved).
      user_template: a tree shaped like a custom user state in ``state.runner``.

    Raises:
      FileNotFoundError: no such file.
      CheckpointError: the file is unreadable, holds a runner, names a task that
        is not registered (and ``task`` is not given), names another task than
        ``task`` (and ``allow_other_task`` is not set), or does not fit this process.
    """
    header, arrays = read(path)
    where = repr(str(path))
    if header["kind"] in READERS and header.get("of") == "env":
        options = {
            "task": task,
            "allow_other_task": allow_other_task,
            "device": device,
            "devices": devices,
            "guards": guards,
        }
        return READERS[header["kind"]](
            header, arrays, where, user_template=user_template, **options
        )
    if header["kind"] != "env":
        read(path, kind="env")  # raises, saying what the file holds
    n = header["num_envs"]
    name = task if isinstance(task, str) else getattr(task, "name", None)
    if name is not None and name != header["task"] and not allow_other_task:
        raise CheckpointError(
            f"checkpoint {where} holds an env of task {header['task']!r}, not {name!r}: "
            f"pass allow_other_task=True to load its state under {name!r}"
        )
    if task is None:
        try:
            task = tasks.get(header["task"])
        except (TypeError, ValueError):
            raise CheckpointError(
                f"checkpoint {where} holds an env of task {header['task']!r}, which is not "
                "registered: register it (mjxrunner.tasks.register) or pass task="
            ) from None
    mj_model = codec.host_model(arrays, where)
    codec.check_process(header, where)

    env = functional.make(
        task,
        n,
        autoreset=header["autoreset"],
        model=mj_model,
        devices=devices,
        restart_slots=header.get("restart_slots"),  # absent from older files
        options=Options.from_header(header).replace(device=device, guards=guards),
    )
    norm = header.get("obs_normalization")  # absent from older files
    if norm is not None:
        env = env.with_obs_normalization(True, **norm)
    config = env.config
    codec.check_guards(header, config, "env", where)
    model = fill(
        "model",
        codec.signed(env.model.tree, header["signature"]),
        arrays,
        n,
        where,
        "env",
        every_key,
    )
    env = env.replace(model=engine.put(FlatModel.of(model), config))
    rand = header["randomization"]
    if rand is not None:
        env = env.with_randomization(
            codec.decode_terms(rand), on_reset=rand["on_reset"], every_n_steps=rand["every_n_steps"]
        )
        config = env.config
    unsharded = config.replace(mesh=None)  # the pool and the reference are not split
    if header["ref"] and env.ref is None:
        ref = params.Reference.build(mj_model, config.backend.device)
        env = env.replace(ref=engine.put(ref, unsharded))
    size = header["pool_size"]
    if size:
        keys = jax.eval_shape(lambda: core.init_keys(jax.random.key(0), size))
        shapes = jax.eval_shape(
            lambda m, s, k: restart.draw_starts(m, s, k, env.task), env.model, env.start, keys
        )
        pool = fill("pool", shapes, arrays, n, where, "env")
        env = env.replace(pool=engine.put(pool, unsharded))

    template = jax.eval_shape(functional.reset, env, jax.random.key(0))
    user = archive.user_tree(header["user"], user_template)
    template = _as_tree(template.replace(runner=template.runner.replace(user=user)))
    state = fill("state", template, arrays, n, where, "env", _carried_model)
    if state.model is not None:
        state = state.replace(model=FlatModel.of(state.model))
    return env, engine.put(state, config)


READERS: dict[str, Any] = {}
"""Readers of other kinds of env file, by header kind: :mod:`.group_env` registers
``"groups"`` when it loads. ``reader(header, arrays, where, **options) -> (env, state)``."""


@functools.singledispatch
def writer(env: Any) -> Any:
    """The function that writes a checkpoint of ``env``: :func:`save_env` for an
    :class:`~mjxrunner.rl.functional.Env`; other kinds register theirs."""
    return save_env


def save(path: str | os.PathLike, env: Any, state: Any) -> None:
    """Writes ``env`` and ``state`` to ``path`` atomically (the format:
    :mod:`mjxrunner.engine.archive`); :func:`load` continues the run bit for bit."""
    writer(env)(path, env, state)


def load(path: str | os.PathLike, **kwargs: Any) -> tuple[Any, Any]:
    """``(env, state)`` from a checkpoint written by :func:`save`.

    Keyword arguments as :func:`load_env`: ``task`` (when it is not registered under
    its saved name), ``allow_other_task`` (to load under a ``task`` of another name,
    refused otherwise), ``device``, ``devices`` (to split the worlds over),
    ``guards`` (user guards, which are not saved), ``user_template``.
    """
    return load_env(path, **kwargs)
