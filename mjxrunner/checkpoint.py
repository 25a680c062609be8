"""Checkpoints of a :class:`~mjxrunner.MultiEnvRunner`: save, inspect, load.

A checkpoint is one NumPy ``.npz`` file (a zip of ``.npy`` arrays, read with
``allow_pickle=False``), holding:

* ``__header__``: UTF-8 JSON: format and version, ``num_envs``, impl, Warp
  capacities and graph mode, policies, layout, randomization terms, the structure
  of the user state, the backend identity of the saving process, the index of
  every array (dtype, shape) and a SHA-256 checksum over all arrays;
* ``mj_model``: the host model as MuJoCo's binary model bytes (``mj_saveModel``),
  which restore every value exactly, unlike XML;
* ``origins``: the ``(num_envs, 3)`` display origins;
* one array per leaf of the runner's state, default snapshot, device model and
  default model, keyed ``"<part>/<tree path>"`` (e.g. ``"state/.data.qpos"``);
  per-world model parameters keep their world axis.

Writing goes to a temporary file in the target directory, flushed to disk and then
renamed over the target (``os.replace``), so a crash leaves the old file or the new
one, never a mix. Loading reads and checks everything (zip CRCs, the checksum, the
structure against a freshly built runner) before it builds anything the caller
sees, so a bad file raises :class:`CheckpointError` and never yields a
half-restored runner.

The scratch buffer is not saved: after loading, ``next_data`` equals ``data``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import mujoco
import numpy as np

from mjxrunner import backend, params
from mjxrunner.models import load_any

if TYPE_CHECKING:
    from mjxrunner.runner import MultiEnvRunner

FORMAT = "mjxrunner-checkpoint"
VERSION = 1
PARTS = ("state", "default", "model", "default_model")


class CheckpointError(ValueError):
    """A checkpoint file is unreadable, corrupt, or does not fit what was asked."""


class CheckpointWarning(UserWarning):
    """A checkpoint was saved with other package versions than the loading process."""


# --- saving -----------------------------------------------------------------------------


def save(runner: MultiEnvRunner, path: str | os.PathLike) -> Path:
    """Writes ``runner``'s whole state to ``path`` atomically.

    Args:
      runner: the runner.
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
    path = Path(os.fspath(path))
    if not path.parent.is_dir():
        raise ValueError(f"checkpoint directory {str(path.parent)!r} does not exist")
    arrays: dict[str, np.ndarray] = {}
    index: dict[str, dict[str, Any]] = {}
    trees = {
        "state": runner._state,
        "default": runner._default,
        "model": runner._model,
        "default_model": runner._default_model,
    }
    host = runner.to_numpy(trees)  # gathers shards, also from other processes
    for part in PARTS:
        for key, leaf in _flatten(host[part]):
            arrays[f"{part}/{key}"] = np.asarray(leaf)
    buffer = np.zeros(mujoco.mj_sizeModel(runner.mj_model), np.uint8)
    mujoco.mj_saveModel(runner.mj_model, None, buffer)
    arrays["mj_model"] = buffer
    arrays["origins"] = np.asarray(runner._origins, np.float64)
    for name, arr in arrays.items():
        index[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape)}

    rand = runner._randomization
    header = {
        "format": FORMAT,
        "version": VERSION,
        "num_envs": runner.num_envs,
        "impl": runner.impl,
        "graph_mode": runner._graph_mode,
        "capacities": None if runner.capacities is None else runner.capacities.as_dict(),
        "overflow_policy": runner.overflow_policy,
        "instability_policy": runner.instability_policy,
        "max_qvel": runner.max_qvel,
        "layout": runner.layout,
        # MuJoCo's binary model format drops the compiler's signature, a static
        # field of the device model: kept here so the loaded model's is the same.
        "signature": int(getattr(runner.model, "signature", 0)),
        "randomization": None
        if rand is None
        else {
            "terms": [_encode_term(t) for t in rand.terms],
            "on_reset": rand.on_reset,
            "every_n_steps": rand.every_n_steps,
        },
        "user": _describe(runner._state.user),
        "backend": runner.backend_info,
        "arrays": index,
    }
    header["sha256"] = _checksum(arrays, header)
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    if jax.process_index() != 0:  # every process gathered; one writes
        return path

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _flatten(tree: Any) -> list[tuple[str, Any]]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(p), leaf) for p, leaf in leaves]


def _checksum(arrays: dict[str, np.ndarray], header: dict[str, Any]) -> str:
    """SHA-256 over the header (but its own checksum) and every array."""
    h = hashlib.sha256()
    rest = {k: v for k, v in header.items() if k != "sha256"}
    h.update(json.dumps(rest, sort_keys=True).encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _describe(tree: Any) -> Any:
    """The user state's containers as JSON, or ``"custom"`` if it has other nodes."""
    if tree is None:
        return {"none": None}
    if isinstance(tree, (jax.Array, np.ndarray, np.generic)):
        return {"leaf": None}
    if type(tree) is dict and all(isinstance(k, str) for k in tree):
        return {"dict": {k: _describe(v) for k, v in tree.items()}}
    if type(tree) in (list, tuple):
        return {type(tree).__name__: [_describe(v) for v in tree]}
    return "custom"


def _rebuild(description: Any) -> Any:
    """A tree of the described containers with None where leaves go."""
    if description == "custom":
        raise CheckpointError(
            "the checkpoint's user state is a custom pytree (e.g. a dataclass); pass "
            "user_template= with a tree of the same structure to load it"
        )
    (kind, value), *_ = description.items()
    if kind in ("none", "leaf"):
        return None if kind == "none" else _LEAF
    if kind == "dict":
        return {k: _rebuild(v) for k, v in value.items()}
    return {"list": list, "tuple": tuple}[kind](_rebuild(v) for v in value)


_LEAF = np.zeros(())  # placeholder leaf of a rebuilt user tree


def _encode_term(term: params.Term) -> dict[str, Any]:
    fields = dataclasses.asdict(term)
    fields["index"] = _encode_index(term.index)
    return fields


def _encode_index(index: Any) -> Any:
    if index is None:
        return None
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        return {"int": int(index)}
    if isinstance(index, slice):
        return {"slice": [index.start, index.stop, index.step]}
    if isinstance(index, (tuple, list)):
        return {type(index).__name__: [_encode_index(i) for i in index]}
    raise TypeError(f"cannot save randomization index {index!r}: use ints, slices, tuples or lists")


def _decode_index(code: Any) -> Any:
    if code is None:
        return None
    (kind, value), *_ = code.items()
    if kind == "int":
        return value
    if kind == "slice":
        return slice(*value)
    return {"list": list, "tuple": tuple}[kind](_decode_index(v) for v in value)


# --- reading ------------------------------------------------------------------------


def read(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Reads and verifies a checkpoint without building a runner.

    Returns:
      ``(header, arrays)``: the JSON header and every array by name.

    Raises:
      FileNotFoundError: no such file.
      CheckpointError: the file is truncated, corrupt, not a checkpoint, or of an
        unknown format version.
    """
    path = Path(os.fspath(path))
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file {str(path)!r}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise CheckpointError(
            f"{str(path)!r} is not a readable checkpoint (truncated or corrupt): {e}"
        ) from None
    raw = arrays.pop("__header__", None)
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
        raise CheckpointError(f"{str(path)!r} has no checkpoint header: not an {FORMAT} file")
    try:
        header = json.loads(raw.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{str(path)!r} has a corrupt header: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{str(path)!r} is not an {FORMAT} file")
    if header.get("version") != VERSION:
        raise CheckpointError(
            f"{str(path)!r} has format version {header.get('version')}; this mjxrunner "
            f"reads version {VERSION}"
        )
    if _REQUIRED - header.keys():
        raise CheckpointError(
            f"{str(path)!r} has an incomplete header: no {sorted(_REQUIRED - header.keys())}"
        )
    if _checksum(arrays, header) != header["sha256"]:
        raise CheckpointError(f"{str(path)!r} is corrupt: its checksum does not match")
    index = header["arrays"]
    if set(index) != set(arrays):
        missing, extra = sorted(set(index) - set(arrays)), sorted(set(arrays) - set(index))
        raise CheckpointError(
            f"{str(path)!r} is incomplete or altered: missing {missing[:5]}, extra {extra[:5]}"
        )
    return header, arrays


_REQUIRED = frozenset(
    {
        "num_envs",
        "impl",
        "graph_mode",
        "capacities",
        "overflow_policy",
        "instability_policy",
        "max_qvel",
        "layout",
        "signature",
        "randomization",
        "user",
        "backend",
        "arrays",
        "sha256",
    }
)


# --- loading ------------------------------------------------------------------------


def load(
    path: str | os.PathLike,
    *,
    num_envs: int | None = None,
    model: Any = None,
    device: Any = None,
    devices: Any = None,
    user_template: Any = None,
) -> MultiEnvRunner:
    """Builds a runner from a checkpoint; stepping it continues the saved run
    bit for bit (same package versions and device kind).

    Args:
      path: the checkpoint file.
      num_envs: if given, the number of worlds the caller expects; a checkpoint
        of another size is refused.
      model: if given (any source ``MultiEnvRunner`` accepts), the model the caller
        expects; a checkpoint of a structurally different model (sizes, joint or
        geom types, ...) is refused. Parameter values come from the checkpoint.
      device: where to put the runner (None: JAX's default device).
      devices: devices to shard the worlds over (see ``MultiEnvRunner.shard``); the
        checkpoint does not depend on how the saving runner was sharded.
      user_template: a tree shaped like the saved user state, needed only when
        that state has node types other than dict/list/tuple (e.g. dataclasses).

    Raises:
      FileNotFoundError: no such file.
      CheckpointError: the file is unreadable, or does not fit the expectations or
        this process (e.g. ``jax_enable_x64`` differs).
    """
    from mjxrunner.runner import MultiEnvRunner

    header, arrays = read(path)
    where = repr(str(path))
    saved_n = header["num_envs"]
    if num_envs is not None and num_envs != saved_n:
        raise CheckpointError(
            f"checkpoint {where} holds num_envs={saved_n}, expected num_envs={num_envs}"
        )
    try:
        mj_model = _model_from_bytes(arrays["mj_model"])
    except ValueError as e:
        raise CheckpointError(f"checkpoint {where}: the model bytes do not load: {e}") from None
    if model is not None:
        _check_same_structure(load_any(model), mj_model, header["impl"], where)
    _warn_versions(header["backend"], where)

    caps = header["capacities"] or {}
    runner = MultiEnvRunner(
        mj_model,
        saved_n,
        impl=header["impl"],
        device=device,
        graph_mode=header["graph_mode"],
        overflow_policy=header["overflow_policy"],
        instability_policy=header["instability_policy"],
        max_qvel=header["max_qvel"],
        devices=devices,
        **caps,
    )
    user = _user_tree(header["user"], user_template)
    signed = _signed(runner._model, header["signature"])
    fresh = {
        "state": runner._state.replace(user=user),
        "default": runner._default.replace(user=user),
        "model": signed,
        "default_model": signed,
    }
    host = {part: _fill(part, fresh[part], arrays, saved_n, where) for part in PARTS}
    restored = {part: runner._put(tree) for part, tree in host.items()}

    # Everything was read and checked; only now does the runner change.
    runner._model = restored["model"]
    runner._default_model = restored["default_model"]
    runner._state = restored["state"]
    runner._default = restored["default"]
    runner._scratch = runner._copy(runner._state)
    runner._origins = np.array(arrays["origins"], np.float64)
    runner._layout = header["layout"]
    rand = header["randomization"]
    if rand is not None:
        terms = [params.Term(**{**t, "index": _decode_index(t["index"])}) for t in rand["terms"]]
        runner.set_randomization(
            terms,
            on_reset=rand["on_reset"],
            every_n_steps=rand["every_n_steps"],
            at_startup=False,
        )
    return runner


def _model_from_bytes(buffer: np.ndarray) -> mujoco.MjModel:
    return mujoco.MjModel.from_binary_path("model.mjb", {"model.mjb": buffer.tobytes()})


def _signed(model: Any, signature: int) -> Any:
    return model.replace(signature=signature) if hasattr(model, "signature") else model


def _structure(m: mujoco.MjModel, impl: str) -> tuple[Any, list[tuple[int, ...]]]:
    """Treedef (static fields) and leaf shapes of the device model, signature aside:
    a model loaded from binary bytes has none."""
    device = jax.devices("cpu")[0]
    mx = _signed(backend.put_model(m, impl, device, "jax" if impl == "warp" else None), 0)
    return jax.tree.structure(mx), [np.shape(x) for x in jax.tree.leaves(mx)]


def _check_same_structure(expected: mujoco.MjModel, saved: mujoco.MjModel, impl, where) -> None:
    sizes = ("nq", "nv", "nu", "na", "nbody", "njnt", "ngeom", "nsite", "neq", "ntendon")
    diff = [f"{s} {getattr(saved, s)} != {getattr(expected, s)}" for s in sizes]
    diff = [
        d for d, s in zip(diff, sizes, strict=True) if getattr(saved, s) != getattr(expected, s)
    ]
    if diff or _structure(expected, impl) != _structure(saved, impl):
        detail = "; ".join(diff) if diff else "static fields (joint, geom or actuator types...)"
        raise CheckpointError(
            f"checkpoint {where} holds a structurally different model than expected "
            f"(saved vs expected: {detail})"
        )


def _warn_versions(saved: dict[str, Any], where: str) -> None:
    now = backend.versions()
    diff = {k: (v, now.get(k)) for k, v in saved.get("versions", {}).items() if now.get(k) != v}
    if diff:
        shown = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items())
        warnings.warn(
            f"checkpoint {where} was saved with other versions ({shown}); the run "
            "continues, but not necessarily bit for bit",
            CheckpointWarning,
            stacklevel=3,
        )


def _user_tree(description: Any, template: Any) -> Any:
    if template is not None:
        return jax.tree.map(np.asarray, template)
    return _rebuild(description)


def _fill(part: str, template: Any, arrays: dict[str, np.ndarray], num_envs: int, where: str):
    """``template`` with every leaf replaced by the saved (host) array at the same path.

    State leaves must match the template's shape and dtype exactly; model leaves
    may also carry a leading world axis (a per-world parameter).
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    keys = [jax.tree_util.keystr(p) for p, _ in leaves]
    saved = {k[len(part) + 1 :] for k in arrays if k.startswith(part + "/")}
    if saved != set(keys):
        missing, extra = sorted(set(keys) - saved), sorted(saved - set(keys))
        raise CheckpointError(
            f"checkpoint {where}: {part} does not fit this runner (other model, impl, "
            f"capacities or mjx version, or another user state): missing {missing[:5]}, "
            f"unexpected {extra[:5]}"
        )
    out = []
    for key, (_, leaf) in zip(keys, leaves, strict=True):
        arr = arrays[f"{part}/{key}"]
        shape, dtype = np.shape(leaf), np.asarray(leaf).dtype
        allowed = [shape] + ([(num_envs, *shape)] if part.endswith("model") else [])
        if leaf is not _LEAF and (arr.shape not in allowed or arr.dtype != dtype):
            raise CheckpointError(
                f"checkpoint {where}: {part}{key} is {arr.dtype}{list(arr.shape)}, this "
                f"runner needs {dtype}{list(shape)}"
                + (" (was it saved with another jax_enable_x64?)" if arr.dtype != dtype else "")
            )
        out.append(arr)
    return jax.tree_util.tree_unflatten(treedef, out)
