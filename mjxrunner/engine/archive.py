"""The checkpoint file format: a checked prefix, then one ``.npz`` with a JSON header.

A checkpoint file (format version 3) starts with a fixed 52-byte prefix: the magic
bytes ``b"\\x93MJXCKPT"``, the format version (``uint32``, little-endian), the
payload's length in bytes (``uint64``) and the SHA-256 of the payload (32 bytes).
The payload follows: one NumPy ``.npz`` file (a zip of ``.npy`` arrays, read with
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

This module knows the format and nothing of what is saved: :func:`write`,
:func:`read` and :func:`fill` take parts of pytrees and header fields. Each owner
saves its own state with them: the engine's configuration (:mod:`.codec`), the
runner (:mod:`mjxrunner.doors.runner_io`), the env (:mod:`mjxrunner.rl.env_io`) and
the groups (:mod:`mjxrunner.rl.group_env`, :mod:`mjxrunner.doors.runner_io`).

The prefix is checked (its length and hash against the bytes that follow) before
the zip is opened: a zip reader finds its directory from the end of a file and
accepts data before it, so a cut file of groups, whose last member is a whole
checkpoint stored uncompressed, would otherwise read as that member. Files of
format version 2 (a bare ``.npz``, from before the prefix) still load; their zip
must start at the first byte of the file, which a cut file of groups fails.

Writing goes to a temporary file ``.<name>.<pid>.tmp`` in the target directory,
flushed to disk and then renamed over the target (``os.replace``), so a crash leaves
the old file or the new one, never a mix; the next save to the same path removes
the temporary files of saves whose process is gone. Loading reads and checks
everything (the prefix, the checksum, the structure against a freshly built runner
or env) before it returns anything, so a bad file raises :class:`CheckpointError`
and never yields a half-restored object.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import mujoco
import numpy as np

from mjxrunner.engine.models import mjb_bytes
from mjxrunner.engine.options import HEADER_KEYS
from mjxrunner.engine.sharding import host_copy

FORMAT = "mjxrunner-checkpoint"


VERSION = 3
"""The format version written; files of version 2 (a bare ``.npz``) still load."""

READABLE = (2, VERSION)

MAGIC = b"\x93MJXCKPT"
_PREFIX = struct.Struct("<8sIQ32s")  # magic, version, payload length, SHA-256 of the payload
_ZIP = b"PK\x03\x04"  # how a version-2 file, a bare zip, starts


KINDS = ("runner", "env", "groups")


class CheckpointError(ValueError):
    """A checkpoint file is unreadable, corrupt, or does not fit what was asked."""


class CheckpointWarning(UserWarning):
    """A checkpoint was saved with other package versions than the loading process."""


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
    host = (to_numpy or host_tree)(parts)  # gathers shards, also from other processes
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

    remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            for chunk in _encode(out):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    """The bytes of a checkpoint file holding ``arrays`` (``"__header__"`` among
    them): the prefix, then the ``.npz`` payload it describes."""
    return b"".join(_encode(arrays))


def _encode(arrays: dict[str, np.ndarray]) -> tuple[bytes, memoryview]:
    """``(prefix, payload)``: the payload not copied, as checkpoints can be large."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getbuffer()
    digest = hashlib.sha256(payload).digest()
    return _PREFIX.pack(MAGIC, VERSION, len(payload), digest), payload


def remove_stale_temps(path: Path) -> list[Path]:
    """Removes the temporary files that saves to ``path`` left when their process
    was killed (``.<name>.<pid>.tmp`` whose pid runs no process); a running save's
    file is kept. Returns the files removed."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.tmp")
    removed = []
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        match = pattern.fullmatch(tmp.name)
        if match and not _running(int(match.group(1))):
            tmp.unlink(missing_ok=True)  # another save may have removed it first
            removed.append(tmp)
    return removed


def _running(pid: int) -> bool:
    """Whether ``pid`` is a running process (ours counts: a save in another thread)."""
    if pid == os.getpid() or os.name == "nt":  # Windows' os.kill would end the process
        return True
    try:
        os.kill(pid, 0)  # signal 0 checks existence only
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's process, or unknowable: keep its file
    return True


def host_tree(tree: Any) -> Any:
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
        "guards",
        "randomization",
        "user",
        "backend",
        "signature",
        "ref",
        "parts",
        "arrays",
        "sha256",
    }
) | frozenset(HEADER_KEYS)


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
    payload, container = _payload(path, where)
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            # A zip reader accepts data before the zip: a version-2 file's zip must
            # start at its first byte, or it is a member of a cut file of groups.
            if min((i.header_offset for i in z.zip.infolist()), default=0) != 0:
                raise CheckpointError("its zip does not start at the first byte")
            arrays = {name: z[name] for name in z.files}
    except Exception as e:  # corrupt bytes fail in many ways (zip, struct, numpy)
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
    if header["version"] != container:
        raise CheckpointError(
            f"{where} is corrupt: its header says format version {header['version']}, "
            f"its file is laid out as version {container}"
        )
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


def _payload(path: Path, where: str) -> tuple[bytes, int]:
    """``(the .npz bytes, format version of the file's layout)``, the prefix of a
    version-3 file checked (length, hash) before anything reads the zip."""
    with open(path, "rb") as f:
        head = f.read(_PREFIX.size)
        if head.startswith(_ZIP):  # version 2: a bare zip, checked once open
            return head + f.read(), 2
        if len(head) < _PREFIX.size or not head.startswith(MAGIC):
            raise CheckpointError(
                f"{where} is not a readable checkpoint (truncated or corrupt): it does "
                f"not start with the {FORMAT} prefix"
            )
        _, version, length, digest = _PREFIX.unpack(head)
        if version != VERSION:
            _check_version(version, where)  # a newer file: say so
            raise CheckpointError(
                f"{where} is not a readable checkpoint (truncated or corrupt): its "
                f"prefix says format version {version}"
            )
        held = os.fstat(f.fileno()).st_size - _PREFIX.size
        # Compared before reading: a corrupt length must not size a read.
        payload = f.read(length) if held == length else b""
    if len(payload) != length:
        raise CheckpointError(
            f"{where} is not a readable checkpoint (truncated or corrupt): its prefix "
            f"announces {length} bytes after it, the file holds {held}"
        )
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(
            f"{where} is not a readable checkpoint (truncated or corrupt): its SHA-256 "
            "does not match the one in its prefix"
        )
    return payload, VERSION


def _check_version(version: Any, where: str) -> None:
    if version in READABLE:
        return
    if isinstance(version, int) and not isinstance(version, bool) and version < VERSION:
        raise CheckpointError(
            f"{where} was written by an older mjxrunner (checkpoint format version "
            f"{version}) and cannot be read by this one (format versions "
            f"{READABLE[0]} to {VERSION}); load it with the mjxrunner version that wrote it"
        )
    raise CheckpointError(
        f"{where} has checkpoint format version {version!r}; this mjxrunner reads "
        f"versions {READABLE[0]} to {VERSION} (was it written by a newer mjxrunner?)"
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


def every_key(key: str) -> bool:
    return True


def model_part(part: str) -> Callable[[str], bool] | None:
    """Model parts' leaves may carry a world axis (per-world parameters)."""
    return every_key if part.endswith("model") else None


def describe(tree: Any) -> Any:
    """The user state's containers as JSON, or ``"custom"`` if it has other nodes."""
    if tree is None:
        return {"none": None}
    if isinstance(tree, (jax.Array, np.ndarray, np.generic)):
        return {"leaf": None}
    if type(tree) is dict and all(isinstance(k, str) for k in tree):
        return {"dict": {k: describe(v) for k, v in tree.items()}}
    if type(tree) in (list, tuple):
        return {type(tree).__name__: [describe(v) for v in tree]}
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


def user_tree(description: Any, template: Any) -> Any:
    if template is not None:
        return jax.tree.map(np.asarray, template)
    return _rebuild(description)


def pack_members(writers: list[Callable[[Path], Path]]) -> dict[str, np.ndarray]:
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


def unpack_members(header: dict, arrays: dict, where: str, of: str, load: Callable) -> list[Any]:
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
