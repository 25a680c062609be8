"""A training run's folder: what continuing, playing or exporting the run needs.

``run.json`` holds the record (format, trainer, task, the trainer's config, seed,
updates done, versions, observation layout, action bounds); ``checkpoint.npz`` holds
the leaves of the trainer's carry (policy, optimizer, env state with its
normalizer statistics, PRNG key), exactly, so a resumed run continues bit for bit.
Both are written to a temporary name and renamed, the record last: a run stopped
while saving keeps its previous checkpoint, never half of one.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

FORMAT = 1
RECORD = "run.json"
CHECKPOINT = "checkpoint.npz"


class RunError(ValueError):
    """A run folder that is missing, incomplete, of another format or another task."""


def exists(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a run's record."""
    return (Path(folder) / RECORD).is_file()


def refuse_existing(folder: str | os.PathLike, resumable: bool = True) -> Path:
    """``folder`` as a ``Path``, for a new run: a folder that holds a run is never
    trained over.

    Raises:
      RunError: ``folder`` holds a run (the message offers ``--resume`` if the
        trainer can resume).
    """
    folder = Path(folder)
    if exists(folder):
        resume = f"continue it with --resume {folder}, or " if resumable else ""
        raise RunError(f"{str(folder)!r} already holds a run; {resume}choose another --out")
    return folder


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _leaves(carry: Any) -> list[np.ndarray]:
    """The carry's leaves as NumPy arrays; PRNG keys as their raw ``uint32`` data."""
    out = []
    for leaf in jax.tree.leaves(carry):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out.append(np.asarray(leaf))
    return out


def save(folder: str | os.PathLike, record: dict, carry: Any) -> None:
    """Writes the checkpoint of ``carry`` and then ``record`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    leaves = _leaves(carry)
    _write_atomic(
        folder / CHECKPOINT,
        lambda f: np.savez(f, **{f"leaf_{i:05d}": x for i, x in enumerate(leaves)}),
    )
    write_record(folder, {**record, "leaves": len(leaves)})


def write_record(folder: str | os.PathLike, record: dict) -> None:
    """Writes ``record`` (with the format) as the run's ``run.json``, whole or not at
    all; a trainer with checkpoints of its own writes it after them."""
    text = json.dumps({"format": FORMAT, **record}, indent=1).encode()
    _write_atomic(Path(folder) / RECORD, lambda f: f.write(text))


def load_record(
    folder: str | os.PathLike, task: str | None = None, trainer: str | None = None
) -> dict:
    """The record of the run in ``folder``, checked.

    Raises:
      RunError: no run there, a record that does not parse, another format, or
        (``task`` or ``trainer`` given) a run of another task or trainer.
    """
    folder = Path(folder)
    path = folder / RECORD
    if not folder.is_dir():
        raise RunError(f"run folder {str(folder)!r} does not exist")
    if not path.is_file():
        raise RunError(
            f"{str(folder)!r} holds no run: {RECORD} is missing (train one with "
            "`mjxrunner train TASK --out FOLDER`)"
        )
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{str(path)!r} is not a run record (truncated or edited?): {e}") from e
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise RunError(f"{str(path)!r} has format {found!r}; this mjxrunner reads {FORMAT}")
    if task is not None and record.get("task") != task:
        raise RunError(
            f"the run in {str(folder)!r} trained task {record.get('task')!r}, not {task!r}"
        )
    if trainer is not None and record.get("trainer") != trainer:
        raise RunError(
            f"the run in {str(folder)!r} was trained by {record.get('trainer')!r}, not {trainer!r}"
        )
    return record


def load_carry(folder: str | os.PathLike, template: Any, record: dict) -> Any:
    """The saved carry, on the structure of ``template`` (e.g. ``jax.eval_shape`` of
    the trainer's start), every leaf checked for its shape and dtype.

    Raises:
      RunError: a missing or truncated checkpoint, or leaves that do not fit the
        template (a run of another task, size or config).
    """
    path = Path(folder) / CHECKPOINT
    specs, treedef = jax.tree.flatten(template)
    if record.get("leaves") != len(specs):
        raise RunError(
            f"the checkpoint in {str(folder)!r} has {record.get('leaves')} arrays; this run's "
            f"config makes {len(specs)} (another task, env size or trainer setting?)"
        )
    try:
        with np.load(path) as f:
            saved = [f[f"leaf_{i:05d}"] for i in range(len(specs))]
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise RunError(f"{str(path)!r} is missing or truncated: {e}") from e
    leaves = []
    for i, (spec, x) in enumerate(zip(specs, saved, strict=True)):
        is_key = jax.dtypes.issubdtype(spec.dtype, jax.dtypes.prng_key)
        want = jax.eval_shape(jax.random.key_data, spec) if is_key else spec
        if x.shape != want.shape or x.dtype != want.dtype:
            raise RunError(
                f"array {i} of {str(path)!r} is {x.dtype}{list(x.shape)}; this run's config "
                f"expects {want.dtype}{list(want.shape)}"
            )
        leaves.append(jax.random.wrap_key_data(x) if is_key else jax.numpy.asarray(x))
    return jax.tree.unflatten(treedef, leaves)
