"""Checkpoints of runners and envs: save, inspect, load.

A checkpoint is one NumPy ``.npz`` file (a zip of ``.npy`` arrays, read with
``allow_pickle=False``), holding:

* ``__header__``: UTF-8 JSON: format and version, ``kind`` (``"runner"`` or
  ``"env"``), ``num_envs``, the backend options (impl, Warp graph mode and
  capacities), the guards and their policies, randomization terms, the structure of
  the user state, the backend identity of the saving process, for a runner its
  layout, for an env its task name and autoreset mode, the index of every array
  (dtype, shape) and a SHA-256 checksum over the header and all arrays;
* ``mj_model``: the host model as MuJoCo's binary model bytes (``mj_saveModel``),
  which restore every value exactly, unlike XML;
* one array per leaf of each saved part, keyed ``"<part>/<tree path>"`` (e.g.
  ``"state/.data.qpos"``, ``"model/.opt.gravity"``); per-world model parameters
  keep their world axis. A runner saves ``state``, ``default``, ``model`` and
  ``default_model`` and its display ``origins``; an env saves its ``state``
  (an ``EnvState``), its ``model`` and its reset ``pool`` if it has one.

The generic layer (:func:`write`, :func:`read`, :func:`fill`) knows nothing of
runners or envs; :func:`save`/:func:`load_runner` and :func:`save_env`/
:func:`load_env` build on it over the engine's pytrees
(:mod:`mjxrunner.engine`). This module never imports the runner:
``MultiEnvRunner.load`` passes its class in.

Writing goes to a temporary file in the target directory, flushed to disk and then
renamed over the target (``os.replace``), so a crash leaves the old file or the new
one, never a mix. Loading reads and checks everything (zip CRCs, the checksum, the
structure against a freshly built runner or env) before it returns anything, so a
bad file raises :class:`CheckpointError` and never yields a half-restored object.

The runner's scratch buffer is not saved: after loading, ``next_data`` equals
``data``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import mujoco
import numpy as np

from mjxrunner import backend, core, engine, events, params
from mjxrunner import guards as guards_
from mjxrunner.models import from_mjb, load_any, mjb_bytes
from mjxrunner.sharding import host_copy
from mjxrunner.worlds import FlatModel

FORMAT = "mjxrunner-checkpoint"
VERSION = 2
KINDS = ("runner", "env", "groups")
RUNNER_PARTS = ("state", "default", "model", "default_model")


class CheckpointError(ValueError):
    """A checkpoint file is unreadable, corrupt, or does not fit what was asked."""


class CheckpointWarning(UserWarning):
    """A checkpoint was saved with other package versions than the loading process."""


# --- the generic layer: parts of pytrees in, parts of pytrees out -----------------------


def write(
    path: str | os.PathLike,
    kind: str,
    parts: dict[str, Any],
    mj_model: mujoco.MjModel,
    fields: dict[str, Any],
    *,
    arrays: dict[str, Any] | None = None,
    to_numpy: Callable[[Any], Any] | None = None,
) -> Path:
    """Writes a checkpoint of ``kind`` atomically.

    Args:
      path: the file to write; its directory must exist. An existing file is
        replaced only once the new one is complete.
      kind: ``"runner"`` or ``"env"``, recorded in the header.
      parts: ``{name: pytree of arrays}``; leaf ``p`` of part ``name`` is stored
        as ``"name/<keystr of p>"``.
      mj_model: the host model, stored as MJB bytes.
      fields: more header fields (JSON-serializable).
      arrays: more arrays stored under their own names (e.g. ``"origins"``).
      to_numpy: gathers the parts to the host (default: whole copies of every
        leaf, from other processes too). In a multi-process run every process must
        call :func:`write`; process 0 writes.

    Returns:
      The path written.
    """
    path = Path(os.fspath(path))
    if not path.parent.is_dir():
        raise ValueError(f"checkpoint directory {str(path.parent)!r} does not exist")
    if kind not in KINDS:
        raise ValueError(f"checkpoint kind must be one of {KINDS}, got {kind!r}")
    host = (to_numpy or _to_numpy)(parts)  # gathers shards, also from other processes
    out: dict[str, np.ndarray] = {}
    for part, tree in host.items():
        if "/" in part:
            raise ValueError(f"a checkpoint part name cannot contain '/': {part!r}")
        for key, leaf in _flatten(tree):
            out[f"{part}/{key}"] = np.asarray(leaf)
    out["mj_model"] = mjb_bytes(mj_model)
    for name, arr in (arrays or {}).items():
        out[name] = np.asarray(arr)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        **fields,
        "parts": sorted(parts),
        "arrays": {n: {"dtype": a.dtype.str, "shape": list(a.shape)} for n, a in out.items()},
    }
    header["sha256"] = _checksum(out, header)
    out["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    if jax.process_index() != 0:  # every process gathered; one writes
        return path

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **out)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _to_numpy(tree: Any) -> Any:
    return jax.tree.map(host_copy, tree)


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


_COMMON = frozenset(
    {
        "kind",
        "num_envs",
        "options",
        "guards",
        "overflow_policy",
        "instability_policy",
        "max_qvel",
        "randomization",
        "user",
        "backend",
        "signature",
        "ref",
        "parts",
        "arrays",
        "sha256",
    }
)
_REQUIRED: dict[str, frozenset] = {
    "runner": _COMMON | {"layout"},
    "env": _COMMON | {"task", "autoreset", "pool_size"},
    "groups": frozenset({"kind", "num_envs", "world_start", "layout", "parts", "arrays", "sha256"}),
}


def read(
    path: str | os.PathLike, kind: str | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Reads and verifies a checkpoint without building anything.

    Args:
      path: the file.
      kind: if given, the kind the caller expects (``"runner"`` or ``"env"``).

    Returns:
      ``(header, arrays)``: the JSON header and every array by name.

    Raises:
      FileNotFoundError: no such file.
      CheckpointError: the file is truncated, corrupt, not a checkpoint, of another
        format version (older files are refused, never guessed at), or of another
        kind than asked.
    """
    path = Path(os.fspath(path))
    where = repr(str(path))
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file {where}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise CheckpointError(
            f"{where} is not a readable checkpoint (truncated or corrupt): {e}"
        ) from None
    raw = arrays.pop("__header__", None)
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
        raise CheckpointError(f"{where} has no checkpoint header: not an {FORMAT} file")
    try:
        header = json.loads(raw.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{where} has a corrupt header: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{where} is not an {FORMAT} file")
    _check_version(header.get("version"), where)
    saved_kind = header.get("kind")
    if saved_kind not in KINDS:
        raise CheckpointError(f"{where} has an unknown checkpoint kind {saved_kind!r}")
    missing = _REQUIRED[saved_kind] - header.keys()
    if missing:
        raise CheckpointError(f"{where} has an incomplete header: no {sorted(missing)}")
    if _checksum(arrays, header) != header["sha256"]:
        raise CheckpointError(f"{where} is corrupt: its checksum does not match")
    index = header["arrays"]
    if set(index) != set(arrays):
        missing, extra = sorted(set(index) - set(arrays)), sorted(set(arrays) - set(index))
        raise CheckpointError(
            f"{where} is incomplete or altered: missing {missing[:5]}, extra {extra[:5]}"
        )
    if kind is not None and saved_kind != kind:
        what = {"runner": "a runner", "env": "an env", "groups": "groups"}
        how = {"runner": "MultiEnvRunner.load", "env": "mjxrunner.env.load"}
        if saved_kind == "groups":  # of a runner or of an env
            env_groups = header.get("of") == "env"
            what["groups"] = "groups of an env" if env_groups else "a group runner"
            how["groups"] = "mjxrunner.env.load" if env_groups else "GroupRunner.load"
        raise CheckpointError(
            f"{where} holds {what[saved_kind]}, not {what[kind]}: load it with {how[saved_kind]}"
        )
    return header, arrays


def _check_version(version: Any, where: str) -> None:
    if version == VERSION:
        return
    if isinstance(version, int) and not isinstance(version, bool) and version < VERSION:
        raise CheckpointError(
            f"{where} was written by an older mjxrunner (checkpoint format version "
            f"{version}) and cannot be read by this one (format version {VERSION}); "
            "load it with the mjxrunner version that wrote it"
        )
    raise CheckpointError(
        f"{where} has checkpoint format version {version!r}; this mjxrunner reads "
        f"version {VERSION} (was it written by a newer mjxrunner?)"
    )


def fill(
    part: str,
    template: Any,
    arrays: dict[str, np.ndarray],
    num_envs: int,
    where: str,
    kind: str = "runner",
    world_axis: Callable[[str], bool] | None = None,
) -> Any:
    """``template`` with every leaf replaced by the saved (host) array at its path.

    Leaves must match the template's shape and dtype exactly; those whose key
    ``world_axis(key)`` accepts (model leaves) may also carry a leading world axis
    (a per-world parameter). Template leaves may be arrays or
    ``jax.ShapeDtypeStruct`` s.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    keys = [jax.tree_util.keystr(p) for p, _ in leaves]
    saved = {k[len(part) + 1 :] for k in arrays if k.startswith(part + "/")}
    if saved != set(keys):
        missing, extra = sorted(set(keys) - saved), sorted(saved - set(keys))
        raise CheckpointError(
            f"checkpoint {where}: {part} does not fit this {kind} (other model, impl, "
            f"capacities, guards or mjx version, or another user state): missing "
            f"{missing[:5]}, unexpected {extra[:5]}"
        )
    out = []
    for key, (_, leaf) in zip(keys, leaves, strict=True):
        arr = arrays[f"{part}/{key}"]
        shape = tuple(np.shape(leaf))
        dtype = np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
        allowed = [shape] + ([(num_envs, *shape)] if world_axis and world_axis(key) else [])
        if leaf is not _LEAF and (arr.shape not in allowed or arr.dtype != dtype):
            raise CheckpointError(
                f"checkpoint {where}: {part}{key} is {arr.dtype}{list(arr.shape)}, this "
                f"{kind} needs {dtype}{list(shape)}"
                + (" (was it saved with another jax_enable_x64?)" if arr.dtype != dtype else "")
            )
        out.append(arr)
    return jax.tree_util.tree_unflatten(treedef, out)


def _every_key(key: str) -> bool:
    return True


def _model_part(part: str) -> Callable[[str], bool] | None:
    """Model parts' leaves may carry a world axis (per-world parameters)."""
    return _every_key if part.endswith("model") else None


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
    """A tree of the described containers with a placeholder where leaves go."""
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


def _user_tree(description: Any, template: Any) -> Any:
    if template is not None:
        return jax.tree.map(np.asarray, template)
    return _rebuild(description)


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


def _encode_randomization(rand: params.Randomization | None) -> dict[str, Any] | None:
    if rand is None:
        return None
    return {
        "terms": [_encode_term(t) for t in rand.terms],
        "on_reset": rand.on_reset,
        "every_n_steps": rand.every_n_steps,
    }


def _decode_terms(rand: dict[str, Any]) -> list[params.Term]:
    return [params.Term(**{**t, "index": _decode_index(t["index"])}) for t in rand["terms"]]


def _engine_fields(
    config: engine.Config, model: Any, user: Any, ref: Any, policies: dict[str, Any]
) -> dict[str, Any]:
    """The header fields every kind records about its engine configuration."""
    return {
        "num_envs": config.num_envs,
        "options": config.backend.options,
        "guards": [[g.name, g.policy] for g in config.guards],
        **policies,
        "randomization": _encode_randomization(config.randomization),
        "user": _describe(user),
        "backend": config.backend.info(),
        # MuJoCo's binary model format drops the compiler's signature, a static
        # field of the device model: kept here so the loaded model's is the same.
        "signature": int(getattr(model, "signature", 0)),
        "ref": ref is not None,
        "latency": events.latency_to_json(config.latency),
        "pushes": None if config.pushes is None else config.pushes.pushes.to_json(),
        "collision_enabled": config.collisions,
    }


def _event_options(header: dict[str, Any]) -> dict[str, Any]:
    """The engine options of the events a header records (absent from older files:
    none, collisions on)."""
    pushes = header.get("pushes")
    return {
        "latency": events.latency_from_json(header.get("latency")),
        "pushes": None if pushes is None else events.Pushes.from_json(pushes),
        "collision_enabled": header.get("collision_enabled", True),
    }


def _signed(model: Any, signature: int) -> Any:
    return model.replace(signature=signature) if hasattr(model, "signature") else model


def _host_model(arrays: dict[str, np.ndarray], where: str) -> mujoco.MjModel:
    try:
        return from_mjb(arrays["mj_model"])
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"checkpoint {where}: the model bytes do not load: {e}") from None


def _check_process(header: dict[str, Any], where: str) -> None:
    """Refuses what this process cannot continue; warns about other versions."""
    saved = header["backend"]
    x64 = saved.get("jax_enable_x64")
    if x64 is not None and x64 != bool(jax.config.jax_enable_x64):
        raise CheckpointError(
            f"checkpoint {where} was saved with jax_enable_x64={x64}, this process runs "
            f"with jax_enable_x64={not x64}: set jax.config.update('jax_enable_x64', "
            f"{x64}) before anything compiles, then load it"
        )
    now = backend.versions()
    diff = {k: (v, now.get(k)) for k, v in saved.get("versions", {}).items() if now.get(k) != v}
    if diff:
        shown = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items())
        warnings.warn(
            f"checkpoint {where} was saved with other versions ({shown}); the run "
            "continues, but not necessarily bit for bit",
            CheckpointWarning,
            stacklevel=4,
        )


def _check_guards(header: dict[str, Any], config: engine.Config, kind: str, where: str) -> None:
    saved = [tuple(g) for g in header["guards"]]
    built = [(g.name, g.policy) for g in config.guards]
    if saved != built:
        raise CheckpointError(
            f"checkpoint {where} was saved with the guards {saved} (name, policy), this "
            f"{kind} has {built}: pass guards= with the same extra guards"
        )


def _structure(m: mujoco.MjModel, impl: str) -> tuple[Any, list[tuple[int, ...]]]:
    """Treedef (static fields) and leaf shapes of the device model, signature aside:
    a model loaded from binary bytes has none."""
    b = backend.Backend.make(m, 1, impl, jax.devices("cpu")[0], graph_mode="jax")
    mx = _signed(b.put_model(m), 0)
    return engine.structure(mx)


def _check_same_structure(expected: mujoco.MjModel, saved: mujoco.MjModel, impl, where) -> None:
    sizes = ("nq", "nv", "nu", "na", "nbody", "njnt", "ngeom", "nsite", "neq", "ntendon")
    diff = [
        f"{s} {getattr(saved, s)} != {getattr(expected, s)}"
        for s in sizes
        if getattr(saved, s) != getattr(expected, s)
    ]
    if diff or _structure(expected, impl) != _structure(saved, impl):
        detail = "; ".join(diff) if diff else "static fields (joint, geom or actuator types...)"
        raise CheckpointError(
            f"checkpoint {where} holds a structurally different model than expected "
            f"(saved vs expected: {detail})"
        )


# --- runners -----------------------------------------------------------------------------


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
    policies = {
        "overflow_policy": runner.overflow_policy,
        "instability_policy": runner.instability_policy,
        "max_qvel": runner.max_qvel,
    }
    fields = {
        **_engine_fields(eng.config, eng.model.tree, eng.state.user, eng.ref, policies),
        "collision_enabled": runner.collision_enabled,  # the runner's own switch
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
    options = dict(header["options"])
    if impl is not None and impl != options["impl"]:
        raise CheckpointError(
            f"checkpoint {where} holds an impl {options['impl']!r} runner, expected {impl!r}"
        )
    mj_model = _host_model(arrays, where)
    if model is not None:
        _check_same_structure(load_any(model), mj_model, options["impl"], where)
    _check_process(header, where)

    runner = runner_cls(
        mj_model,
        n,
        device=device,
        overflow_policy=header["overflow_policy"],
        instability_policy=header["instability_policy"],
        max_qvel=header["max_qvel"],
        devices=devices,
        guards=guards,
        **_event_options(header),
        **options,
    )
    _check_guards(header, runner.engine.config, "runner", where)
    rand = header["randomization"]
    if rand is not None:
        runner.set_randomization(
            _decode_terms(rand),
            on_reset=rand["on_reset"],
            every_n_steps=rand["every_n_steps"],
            at_startup=False,
        )
    eng = runner.engine
    user = _user_tree(header["user"], user_template)
    signed = _signed(eng.model.tree, header["signature"])
    templates = {
        "state": eng.state.replace(user=user),
        "default": eng.default.replace(user=user),
        "model": signed,
        "default_model": signed,
    }
    host = {
        part: fill(part, templates[part], arrays, n, where, "runner", _model_part(part))
        for part in RUNNER_PARTS
    }
    placed = engine.put(host, eng.config)
    ref = eng.ref
    if header["ref"] and ref is None:
        ref = params.Reference.build(mj_model, eng.config.backend.device)

    # Everything was read and checked; only now does the runner change.
    runner._set_engine(
        eng.replace(
            state=placed["state"],
            default=placed["default"],
            model=FlatModel.of(placed["model"]),
            default_model=FlatModel.of(placed["default_model"]),
            ref=ref,
        )
    )
    runner._origins = np.array(arrays["origins"], np.float64)
    runner._layout = header["layout"]
    return runner


def load(path: str | os.PathLike, **kwargs: Any) -> Any:
    """Deprecated: use ``MultiEnvRunner.load(path, **kwargs)``."""
    warnings.warn(
        "mjxrunner.checkpoint.load is deprecated; use MultiEnvRunner.load(path, ...)",
        DeprecationWarning,
        stacklevel=2,
    )
    from mjxrunner import MultiEnvRunner  # the one lazy import of the runner

    return MultiEnvRunner.load(path, **kwargs)


# --- group runners ----------------------------------------------------------------------


def _packed(writers: list[Callable[[Path], Path]]) -> dict[str, np.ndarray]:
    """Each group's own checkpoint, written by ``writers[g](file)``, as bytes
    ``"group/<g>"`` (the zip of a zip: every group keeps its own checks)."""
    import tempfile

    arrays: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for g, writer in enumerate(writers):
            file = writer(Path(tmp) / f"group{g}.npz")
            if jax.process_index() == 0:  # the process that wrote it
                arrays[f"group/{g}"] = np.frombuffer(file.read_bytes(), np.uint8)
    return arrays


def _unpacked(header: dict, arrays: dict, where: str, of: str, load: Callable) -> list[Any]:
    """``load(file, g, num_envs)`` of every group's checkpoint in a groups file."""
    import tempfile

    if header.get("of") != of:
        how = "GroupRunner.load" if header.get("of") == "runner" else "mjxrunner.env.load"
        raise CheckpointError(f"{where} holds groups of a {header.get('of')}: load it with {how}")
    sizes = [int(n) for n in np.diff(header["world_start"])]
    if any(f"group/{g}" not in arrays for g in range(len(sizes))):
        raise CheckpointError(f"{where} lacks a group's checkpoint")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for g, n in enumerate(sizes):
            file = Path(tmp) / f"group{g}.npz"
            file.write_bytes(arrays[f"group/{g}"].tobytes())
            try:
                out.append(load(file, g, n))
            except CheckpointError as e:
                raise CheckpointError(f"{where}, group {g}: {e}") from None
    return out


def save_groups(runner: Any, path: str | os.PathLike) -> Path:
    """Writes a :class:`~mjxrunner.group_runner.GroupRunner` to one file atomically:
    each group's runner checkpoint (as :func:`save` writes it) stored as bytes
    ``"group/<g>"``, with the world index and the layout."""
    arrays = _packed([lambda file, m=m: save(m, file) for m in runner.groups])
    arrays["origins"] = np.asarray(runner.env_origins, np.float64)
    fields = {
        "of": "runner",
        "num_envs": runner.num_envs,
        "world_start": [int(x) for x in runner.world_start],
        "layout": runner.layout,
    }
    return write(path, "groups", {}, runner.groups[0].mj_model, fields, arrays=arrays)


def load_groups(
    path: str | os.PathLike,
    *,
    runner_cls: type,
    member_cls: type,
    devices: Any = None,
    device: Any = None,
) -> Any:
    """Builds a group runner of ``runner_cls`` (its groups of ``member_cls``) from
    :func:`save_groups`'s file; each group is checked as :func:`load_runner` checks
    a runner."""
    header, arrays = read(path, kind="groups")

    def load(file: Path, g: int, n: int) -> Any:
        return load_runner(file, runner_cls=member_cls, num_envs=n, devices=devices, device=device)

    members = _unpacked(header, arrays, repr(str(path)), "runner", load)
    return runner_cls._of(members, np.array(arrays["origins"], np.float64), header["layout"])


_JOINED = ("obs", "reward", "final_obs", "final_mask", "terminated", "truncated", "episode_length")


def save_env_groups(path: str | os.PathLike, genv: Any, state: Any) -> Path:
    """Writes a :class:`~mjxrunner.group_env.GroupEnv` and one of its states: each
    group's env checkpoint (:func:`save_env`) as bytes, with the joined fields and
    the observation statistics over all groups."""
    writers = [
        lambda file, e=e, s=s: save_env(file, e, s)
        for e, s in zip(genv.envs, state.groups, strict=True)
    ]
    arrays = _packed(writers)
    parts = {"joined": {k: getattr(state, k) for k in _JOINED}}
    if state.obs_norm is not None:
        parts["obs_norm"] = state.obs_norm
    spec = genv.normalize
    fields = {
        "of": "env",
        "num_envs": genv.num_envs,
        "world_start": [int(x) for x in genv.world_start],
        "layout": None,
        "obs_normalization": None if spec is None else {"clip": spec.clip, "eps": spec.eps},
    }
    return write(path, "groups", parts, genv.host.mj_model, fields, arrays=arrays)


def _load_env_groups(header: dict, arrays: dict, where: str, **options: Any) -> tuple[Any, Any]:
    from mjxrunner import group_env
    from mjxrunner.groups import WorldIndex

    def load(file: Path, g: int, n: int) -> Any:
        return load_env(file, **options)

    members = _unpacked(header, arrays, where, "env", load)
    envs, states = zip(*members, strict=True)
    genv = group_env.GroupEnv(tuple(envs), WorldIndex.of([e.num_envs for e in envs]))
    norm = header["obs_normalization"]
    if norm is not None:
        genv = genv.with_obs_normalization(True, **norm)
    n = genv.num_envs
    template = jax.eval_shape(group_env.reset, genv, jax.random.key(0))
    joined = fill("joined", {k: getattr(template, k) for k in _JOINED}, arrays, n, where, "env")
    obs_norm = None
    if norm is not None:
        obs_norm = fill("obs_norm", template.obs_norm, arrays, n, where, "env")
    state = group_env.GroupState(groups=tuple(states), obs_norm=obs_norm, **joined)
    return genv, engine.put(state.replace(groups=()), genv.config).replace(groups=tuple(states))


# --- envs --------------------------------------------------------------------------------


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
    from mjxrunner import env as env_

    if not isinstance(env, env_.Env):
        raise TypeError(f"env must be a mjxrunner.env.Env, got {type(env).__name__}")
    if not isinstance(state, env_.EnvState):
        raise TypeError(f"state must be a mjxrunner.env.EnvState, got {type(state).__name__}")
    if state.num_envs != env.num_envs:
        raise ValueError(
            f"state has num_envs={state.num_envs}, the env has num_envs={env.num_envs}"
        )
    config = env.config
    unstable = guards_.find(config.guards, "unstable")
    policies = {
        "overflow_policy": guards_.find(config.guards, "overflow").policy,
        "instability_policy": unstable.policy,
        "max_qvel": unstable.detect.max_qvel,
    }
    parts = {"state": _as_tree(state), "model": env.model.tree}
    if env.pool is not None:
        parts["pool"] = env.pool
    fields = {
        **_engine_fields(config, env.model.tree, state.runner.user, env.ref, policies),
        "task": env.task.name,
        "autoreset": env_.AUTORESET_MODES[int(host_copy(env.mode))],
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
        under its saved name.
      device: where to put the env (None: JAX's default device).
      devices: devices to split the worlds over (None: one device); the file does
        not depend on how the saving env was split.
      guards: the saving env's extra guards (functions are not saved).
      user_template: a tree shaped like a custom user state in ``state.runner``.

    Raises:
      FileNotFoundError: no such file.
      CheckpointError: the file is unreadable, holds a runner, names a task that
        is not registered (and ``task`` is not given), or does not fit this process.
    """
    from mjxrunner import env as env_
    from mjxrunner import tasks

    header, arrays = read(path)
    where = repr(str(path))
    if header["kind"] == "groups" and header.get("of") == "env":
        options = {"task": task, "device": device, "devices": devices, "guards": guards}
        return _load_env_groups(header, arrays, where, user_template=user_template, **options)
    if header["kind"] != "env":
        read(path, kind="env")  # raises, saying what the file holds
    n = header["num_envs"]
    if task is None:
        try:
            task = tasks.get(header["task"])
        except (TypeError, ValueError):
            raise CheckpointError(
                f"checkpoint {where} holds an env of task {header['task']!r}, which is not "
                "registered: register it (mjxrunner.tasks.register) or pass task="
            ) from None
    mj_model = _host_model(arrays, where)
    _check_process(header, where)

    env = env_.make(
        task,
        n,
        autoreset=header["autoreset"],
        model=mj_model,
        device=device,
        overflow_policy=header["overflow_policy"],
        instability_policy=header["instability_policy"],
        max_qvel=header["max_qvel"],
        guards=guards,
        devices=devices,
        restart_slots=header.get("restart_slots"),  # absent from older files
        **_event_options(header),
        **header["options"],
    )
    norm = header.get("obs_normalization")  # absent from older files
    if norm is not None:
        env = env.with_obs_normalization(True, **norm)
    config = env.config
    _check_guards(header, config, "env", where)
    model = fill(
        "model", _signed(env.model.tree, header["signature"]), arrays, n, where, "env", _every_key
    )
    env = env.replace(model=engine.put(FlatModel.of(model), config))
    rand = header["randomization"]
    if rand is not None:
        env = env.with_randomization(
            _decode_terms(rand), on_reset=rand["on_reset"], every_n_steps=rand["every_n_steps"]
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
            lambda m, s, k: env_._draw_starts(m, s, k, env.task), env.model, env.start, keys
        )
        pool = fill("pool", shapes, arrays, n, where, "env")
        env = env.replace(pool=engine.put(pool, unsharded))

    template = jax.eval_shape(env_.reset, env, jax.random.key(0))
    user = _user_tree(header["user"], user_template)
    template = _as_tree(template.replace(runner=template.runner.replace(user=user)))
    state = fill("state", template, arrays, n, where, "env", _carried_model)
    if state.model is not None:
        state = state.replace(model=FlatModel.of(state.model))
    return env, engine.put(state, config)
