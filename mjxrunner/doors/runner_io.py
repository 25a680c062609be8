"""A runner's checkpoint: what :meth:`MultiEnvRunner.save` writes and
:meth:`MultiEnvRunner.load` reads back, and the same for a group runner (each
group's runner file as bytes inside one file). The file format is
:mod:`mjxrunner.engine.archive`'s; the engine's fields are :mod:`mjxrunner.engine.codec`'s.

The runner's scratch buffer is not saved: after loading, ``next_data`` equals ``data``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from mjxrunner import engine
from mjxrunner.engine import archive, codec, params
from mjxrunner.engine.archive import CheckpointError, fill, read, write
from mjxrunner.engine.models import load_any
from mjxrunner.engine.options import Options
from mjxrunner.engine.worlds import FlatModel

RUNNER_PARTS = ("state", "default", "model", "default_model")


def save(runner: Any, path: str | os.PathLike) -> Path:
    """Writes ``runner``'s whole state to ``path`` atomically.

    Args:
      runner: a :class:`~mjxrunner.MultiEnvRunner` (read through its ``engine``,
        ``mj_model``, ``env_origins``, ``layout``, policies and ``to_numpy``).
      path: the file to write (any name; ``.npz`` is customary). Its directory
        must exist. An existing file is replaced only once the new one is complete.
        In a multi-process run every process must call it; process 0 writes.

    Returns:
      The path written.

    Raises:
      ValueError: the directory does not exist.
      TypeError: a randomization term's index is not made of ints, slices, tuples
        and lists, so it cannot be written as JSON.
    """
    eng = runner.engine
    parts = {
        "state": eng.state,
        "default": eng.default,
        # the mjx.Model, not the FlatModel: array keys are readable field paths
        "model": eng.model.tree,
        "default_model": eng.default_model.tree,
    }
    options = runner.options  # with the runner's own contact switch
    fields = {
        **codec.engine_fields(eng.config, eng.model.tree, eng.state.user, eng.ref, options),
        "layout": runner.layout,
    }
    origins = {"origins": np.asarray(runner.env_origins, np.float64)}
    return write(
        path, "runner", parts, runner.mj_model, fields, arrays=origins, to_numpy=runner.to_numpy
    )


def load_runner(
    path: str | os.PathLike,
    *,
    runner_cls: type,
    num_envs: int | None = None,
    model: Any = None,
    impl: str | None = None,
    device: Any = None,
    devices: Any = None,
    user_template: Any = None,
    guards: Any = (),
) -> Any:
    """Builds a runner of ``runner_cls`` from a checkpoint; stepping it continues the
    saved run bit for bit (same package versions and device kind).

    Called by :meth:`MultiEnvRunner.load`, which passes its class.

    Args:
      path: the checkpoint file.
      runner_cls: the class to build (``MultiEnvRunner`` or a subclass).
      num_envs: if given, the number of worlds the caller expects; a checkpoint
        of another size is refused.
      model: if given (any source ``MultiEnvRunner`` accepts), the model the caller
        expects; a checkpoint of a structurally different model (sizes, joint or
        geom types, ...) is refused. Parameter values come from the checkpoint.
      impl: if given, the impl the caller expects; a checkpoint of another is refused.
      device: where to put the runner (None: JAX's default device).
      devices: devices to shard the worlds over (see ``MultiEnvRunner.shard``); the
        checkpoint does not depend on how the saving runner was sharded.
      user_template: a tree shaped like the saved user state, needed only when
        that state has node types other than dict/list/tuple (e.g. dataclasses).
      guards: the saving runner's extra guards (functions are not saved).

    Raises:
      FileNotFoundError: no such file.
      CheckpointError: the file is unreadable, holds an env, or does not fit the
        expectations or this process (e.g. ``jax_enable_x64`` differs).
    """
    header, arrays = read(path, kind="runner")
    where = repr(str(path))
    n = header["num_envs"]
    if num_envs is not None and num_envs != n:
        raise CheckpointError(
            f"checkpoint {where} holds num_envs={n}, expected num_envs={num_envs}"
        )
    options = Options.from_header(header).replace(device=device, guards=guards)
    if impl is not None and impl != options.impl:
        raise CheckpointError(
            f"checkpoint {where} holds an impl {options.impl!r} runner, expected {impl!r}"
        )
    mj_model = codec.host_model(arrays, where)
    if model is not None:
        codec.check_same_structure(load_any(model), mj_model, options.impl, where)
    codec.check_process(header, where)

    runner = runner_cls(mj_model, n, devices=devices, options=options)
    codec.check_guards(header, runner.engine.config, "runner", where)
    rand = header["randomization"]
    if rand is not None:
        runner.set_randomization(
            codec.decode_terms(rand),
            on_reset=rand["on_reset"],
            every_n_steps=rand["every_n_steps"],
            at_startup=False,
        )
    eng = runner.engine
    user = archive.user_tree(header["user"], user_template)
    signed = codec.signed(eng.model.tree, header["signature"])
    templates = {
        "state": eng.state.replace(user=user),
        "default": eng.default.replace(user=user),
        "model": signed,
        "default_model": signed,
    }
    host = {
        part: fill(part, templates[part], arrays, n, where, "runner", archive.model_part(part))
        for part in RUNNER_PARTS
    }
    placed = engine.put(host, eng.config)
    ref = eng.ref
    if header["ref"] and ref is None:
        ref = params.Reference.build(mj_model, eng.config.backend.device)

    restored = eng.replace(
        state=placed["state"],
        default=placed["default"],
        model=FlatModel.of(placed["model"]),
        default_model=FlatModel.of(placed["default_model"]),
        ref=ref,
    )
    # Everything was read and checked; the runner takes it in (MultiEnvRunner.load).
    return runner, restored, np.array(arrays["origins"], np.float64), header["layout"]


def save_groups(runner: Any, path: str | os.PathLike) -> Path:
    """Writes a :class:`~mjxrunner.doors.group_runner.GroupRunner` to one file atomically:
    each group's runner checkpoint (as :func:`save` writes it) stored as bytes
    ``"group/<g>"``, with the world index and the layout."""
    arrays = archive.pack_members([lambda file, m=m: save(m, file) for m in runner.groups])
    arrays["origins"] = np.asarray(runner.env_origins, np.float64)
    fields = {
        "of": "runner",
        "num_envs": runner.num_envs,
        "world_start": [int(x) for x in runner.world_start],
        "layout": runner.layout,
    }
    return write(path, "groups", {}, runner.groups[0].mj_model, fields, arrays=arrays)


def load_groups(path: str | os.PathLike, load: Any) -> tuple[list[Any], np.ndarray, str]:
    """``(runners, origins, layout name)`` from :func:`save_groups`'s file; each
    group's runner is rebuilt by ``load(file, num_envs)`` (``MultiEnvRunner.load``,
    which checks it as it checks any runner file)."""
    header, arrays = read(path, kind="groups")
    members = archive.unpack_members(
        header, arrays, repr(str(path)), "runner", lambda file, g, n: load(file, n)
    )
    return members, np.array(arrays["origins"], np.float64), header["layout"]
