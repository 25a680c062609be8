"""Programs kept on disk as exported StableHLO, so that a new process skips tracing.

JAX's persistent compilation cache skips XLA's compile, but finds its entry by
the lowered program: every process still traces and lowers it first. For a robot
on impl "jax" that is most of what is left (the G1's joystick env: 3.1 s of
tracing and 0.9 s of lowering of its first step, 1.2 s to read the executable
back). A kept program is the function's exported module (``jax.export``) on its
flat leaves, found by what built it before anything is traced:

* the package's own source (a digest of its files) and the versions of JAX,
  jaxlib, MuJoCo and MJX; JAX's settings, ``XLA_FLAGS`` and the CPU patches;
  the devices;
* the jitted function and everything it closed over (layouts, treedefs, the task
  and kit settings inside them), walked down to plain values by :func:`fingerprint`;
* the structure, shapes, dtypes and placements of the arguments.

A process that finds it calls the module, jitted with the same donations; XLA's
executable for it comes from JAX's cache as before (the process that exported it
compiled that same call). The executable itself is never written by this module:
JAX's cache stays the one place executables are read from.

Only programs built from the package's own code are kept: a function, class or
object of any other module among what the function closed over (a task of your
own, a ``lambda`` in a notebook) cannot be described by value (its code, or what
its code reads, may change between processes), so such a program uses JAX's cache
alone, as before. Programs of impls "c" and "warp" are not kept either: they call
into objects of the process that made them (MuJoCo's batches, Warp's kernels),
which ``jax.export`` refuses, as it refuses host callbacks. :func:`stats` counts
what was read, exported, written and not kept (with the last reason).

Kept programs are on where :func:`mjxrunner.engine.cache.use_compile_cache` turns
JAX's cache on (the command line and the Gymnasium door; call it yourself for the
library's other entry points), in ``programs/`` of the cache folder, and off with
``MJXRUNNER_COMPILE_CACHE=0``. A file holds one module (100-250 kB for a
cartpole's env); the least recently used go when the folder passes
``MJXRUNNER_PROGRAMS_MAX_BYTES`` (2 GiB). What else changes a traced program and
is not in the key (a lowering rule you registered, a monkeypatch of the package)
calls for deleting the folder, or for ``MJXRUNNER_COMPILE_CACHE=0``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import os
import pickle
import re
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import mujoco
import numpy as np

from mjxrunner.engine import cache, models

# Modules whose code is pinned by the key (the package by its digest, the rest by
# their versions): their functions and types are described by name.
PINNED = ("mjxrunner", "jax", "jaxlib", "numpy", "mujoco", "builtins", "functools", "operator")
# Of those, modules whose objects live in one process (host models, Warp kernels).
UNKEPT = ("mjxrunner.engine.native", "mujoco.mjx.warp", "mujoco.mjx._src.warp", "warp")
SETTINGS_SKIPPED = re.compile(r"jax_(compilation_cache|persistent_cache|explain_cache|log)")

_lock = threading.Lock()

_stats = {"read": 0, "exported": 0, "written": 0, "not_kept": 0, "reason": ""}


class NotKept(Exception):
    """Why a program is not kept (the message says)."""


enable = cache.keep_programs
folder = cache.programs_folder


def stats() -> dict[str, Any]:
    """Programs ``read`` back, ``exported`` where none was kept yet, ``written``,
    and ``not_kept`` (traced as usual), with the last ``reason``; this process."""
    return dict(_stats)


# --- describing by value ----------------------------------------------------------


def _module_of(obj: Any) -> str:
    return getattr(obj, "__module__", None) or type(obj).__module__ or ""


def _pinned(module: str, what: str) -> None:
    if any(module == m or module.startswith(m + ".") for m in UNKEPT):
        raise NotKept(f"{what} of {module} belongs to this process")
    if not any(module == m or module.startswith(m + ".") for m in PINNED):
        raise NotKept(f"{what} of module {module!r} cannot be described by value")


def fingerprint(obj: Any) -> str:
    """A digest of ``obj`` by value: equal for equal descriptions in any process.

    Raises :class:`NotKept` for what cannot be described by value (see the module
    notes)."""
    h = hashlib.sha256()
    _walk(obj, h, set())
    return h.hexdigest()


def _walk(obj: Any, h: Any, path: set[int]) -> None:
    def put(*parts: Any) -> None:
        for part in parts:
            h.update(str(part).encode() + b"\0")

    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        put(type(obj).__name__, repr(obj))
        return
    if id(obj) in path:  # a cycle: its place is enough
        put("cycle")
        return
    path = path | {id(obj)}
    walk = functools.partial(_walk, h=h, path=path)
    if isinstance(obj, (np.ndarray, np.generic)):
        if obj.dtype.hasobject:
            raise NotKept("a NumPy array of Python objects")
        arr = np.ascontiguousarray(obj)
        put("array", arr.dtype.str, arr.shape, hashlib.sha256(arr.tobytes()).hexdigest())
    elif isinstance(obj, models.HostModel):
        put("host model", obj.digest)
    elif isinstance(obj, mujoco.MjModel):
        put("host model", hashlib.sha256(models.mjb_bytes(obj)).hexdigest())
    elif isinstance(obj, jax.Device):
        put("device", obj.platform, obj.id, obj.process_index)
    elif isinstance(obj, jax.sharding.Mesh):
        put("mesh", obj.axis_names, obj.devices.shape)
        walk(list(obj.devices.flat))
    elif isinstance(obj, (jax.sharding.Sharding, jax.sharding.PartitionSpec)):
        put("placement", _placement_of(obj))
    elif isinstance(obj, np.dtype):
        put("dtype", obj.str)
    elif isinstance(obj, (tuple, list)):
        put(type(obj).__name__, len(obj))
        for x in obj:
            walk(x)
    elif isinstance(obj, dict):
        put("dict", len(obj))
        for k, v in obj.items():
            walk(k)
            walk(v)
    elif isinstance(obj, (set, frozenset)):
        put("set", sorted(fingerprint(x) for x in obj))
    elif isinstance(obj, jax.tree_util.PyTreeDef):
        node = obj.node_data()
        put("treedef", obj.num_leaves, obj.num_nodes)
        if node is not None:
            walk(node[0])
            walk(node[1])
        for child in obj.children():
            walk(child)
    elif isinstance(obj, type):
        _pinned(obj.__module__, "the type")
        put("type", obj.__module__, obj.__qualname__)
    elif isinstance(obj, enum.Enum):
        walk(type(obj))
        put(obj.name)
    elif isinstance(obj, types.FunctionType):
        # The code is pinned by its module; what it closed over is walked.
        _pinned_code(obj)
        put("function", obj.__module__, obj.__qualname__)
        walk(obj.__defaults__)
        walk(obj.__kwdefaults__)
        for cell in obj.__closure__ or ():
            try:
                walk(cell.cell_contents)
            except ValueError:  # an empty cell
                put("empty")
    elif isinstance(obj, functools.partial):
        put("partial")
        walk(obj.func)
        walk(obj.args)
        walk(obj.keywords)
    elif isinstance(obj, types.MethodType):
        put("method")
        walk(obj.__func__)
        walk(obj.__self__)
    elif isinstance(obj, (types.BuiltinFunctionType, np.ufunc)):
        owner = getattr(obj, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            put("bound")
            walk(owner)
        else:
            _pinned(_module_of(obj) if not isinstance(obj, np.ufunc) else "numpy", "the function")
        put("builtin", _module_of(obj), getattr(obj, "__qualname__", obj.__name__))
    elif hasattr(obj, "__wrapped__") and callable(obj):  # jit and other wrappers
        put("wrapped", type(obj).__name__)
        if hasattr(obj, "lower"):  # a jit: its options shape its program
            put(*_options(obj))
        walk(obj.__wrapped__)
    else:
        walk(type(obj))
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                put(f.name)
                walk(getattr(obj, f.name))
        elif hasattr(obj, "__dict__"):
            walk(dict(sorted(vars(obj).items())))
        elif hasattr(type(obj), "__slots__"):
            for name in type(obj).__slots__:
                put(name)
                walk(getattr(obj, name, None))
        else:
            raise NotKept(f"a {type(obj).__qualname__} cannot be described by value")


def _pinned_code(fn: types.FunctionType) -> None:
    """Refuses a function whose code lies outside its pinned module's package (a
    wrapper given another function's name by ``functools.wraps``)."""
    what = f"the function {fn.__qualname__}"
    _pinned(fn.__module__ or "", what)
    top = sys.modules.get((fn.__module__ or "").split(".")[0])
    home = getattr(top, "__file__", None)
    if home is None:
        raise NotKept(f"{what} has no source file to pin it")
    home = os.path.dirname(os.path.abspath(home)) + os.sep
    if not os.path.abspath(fn.__code__.co_filename).startswith(home):
        raise NotKept(f"{what} is defined in {fn.__code__.co_filename}, outside its module")


@functools.cache
def _package_digest() -> str:
    """The package's own source, and the versions of what it traces through."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".cc") and "__pycache__" not in path.parts:
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    for dist in ("jax", "jaxlib", "mujoco", "mujoco-mjx", "numpy"):
        try:
            h.update(f"{dist}={importlib.metadata.version(dist)}".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return h.hexdigest()


def _process() -> list[Any]:
    """What else of this process shapes a program: JAX's settings, XLA's flags, the
    CPU patches and the devices."""
    from mjxrunner.engine import cpu_fusion, cpu_linalg

    settings = sorted(
        (k, repr(v))
        for k, v in jax.config.values.items()
        if not SETTINGS_SKIPPED.match(k) and isinstance(v, (bool, int, float, str, type(None)))
    )
    devices = [(d.platform, d.device_kind, d.id, d.process_index) for d in jax.devices()]
    backend = jax.devices()[0].client
    return [
        _package_digest(),
        settings,
        os.environ.get("XLA_FLAGS", ""),
        cpu_linalg.installed(),
        cpu_fusion.active(),
        devices,
        jax.process_count(),
        backend.platform_version,
    ]


def _placement(x: Any) -> Any:
    sharding = getattr(x, "sharding", None)
    return None if sharding is None else _placement_of(sharding)


def _placement_of(sharding: Any) -> Any:
    if isinstance(sharding, jax.sharding.PartitionSpec):
        return ("spec", str(sharding))
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        return ("one", [d.id for d in sharding.device_set])
    if isinstance(sharding, jax.sharding.NamedSharding):
        mesh = sharding.mesh
        return (
            "named",
            mesh.axis_names,
            mesh.devices.shape,
            [d.id for d in mesh.devices.flat],
            str(sharding.spec),
        )
    raise NotKept(f"arguments placed by a {type(sharding).__name__}")


def key(jitted: Callable, args: tuple) -> str:
    """The digest a program of ``jitted`` (a ``jax.jit`` function) for ``args`` is
    kept by: the jit's options and its function with all it closed over (jits among
    that too, options and all), this process's settings (see
    :func:`_process`), and the arguments' structure, shapes, dtypes and placements.
    Raises :class:`NotKept` where that cannot be described by value."""
    leaves, treedef = jax.tree.flatten(args)
    avals = [(str(jax.typeof(x)), getattr(jax.typeof(x), "weak_type", False)) for x in leaves]
    placements = [_placement(x) for x in leaves]
    return fingerprint([_process(), jitted, treedef, avals, placements])


def _options(jitted: Callable) -> list[str]:
    """The jit's own options (donations above all: a program kept with them would
    delete the arguments of a caller that keeps them)."""
    info = getattr(jitted, "_jit_info", None)
    if info is None:
        raise NotKept("the jit's options cannot be read")
    names = (
        "static_argnums",
        "static_argnames",
        "donate_argnums",
        "donate_argnames",
        "keep_unused",
        "inline",
        "device",
        "backend",
        "compiler_options_kvs",
        "in_shardings_leaves",
        "out_shardings_leaves",
    )
    return [f"{name}={getattr(info, name)!r}" for name in names]


# --- keeping ------------------------------------------------------------------------


def _not_kept(reason: str) -> None:
    _stats["not_kept"] += 1
    _stats["reason"] = reason


class _Program:
    """A kept program: the exported (StableHLO) function of the jitted one on its
    flat leaves, jitted again with the same donations. XLA compiles it (JAX's
    persistent cache finds it from the second process on); nothing is traced but
    the call of the exported module."""

    def __init__(self, exported: Any, donated: tuple[int, ...], in_tree: Any, out_tree: Any):
        self.in_tree, self.out_tree = in_tree, out_tree
        self.call = jax.jit(exported.call, donate_argnums=donated)

    def __call__(self, *args: Any) -> Any:
        leaves, treedef = jax.tree.flatten(args)
        if treedef != self.in_tree:
            raise TypeError("arguments of another structure than the kept program's")
        return self.out_tree.unflatten(self.call(*leaves))


def _export(jitted: Callable, args: tuple) -> tuple[bytes, Any]:
    """``(file contents, program)`` of ``jitted`` for ``args``; raises
    :class:`NotKept` where it cannot be kept."""
    leaves, in_tree = jax.tree.flatten(args)
    traced = jitted.trace(*args)  # traced once: the export below reuses it; lowered once
    donated = tuple(i for i, info in enumerate(jax.tree.leaves(traced.args_info)) if info.donated)
    out_tree = jax.tree.structure(traced.out_info)

    def flat(*leaves):
        return jax.tree.leaves(jitted(*in_tree.unflatten(leaves)))

    try:
        exported = jax.export.export(jax.jit(flat))(*leaves)
        data = pickle.dumps((bytes(exported.serialize()), donated, out_tree))
    except Exception as e:  # a host callback, a custom call of this process, ...
        raise NotKept(f"cannot be exported: {type(e).__name__}: {e}") from e
    return data, _Program(exported, donated, in_tree, out_tree)


def _load(path: Path, args: tuple) -> _Program:
    blob, donated, out_tree = pickle.loads(path.read_bytes())
    exported = jax.export.deserialize(bytearray(blob))
    return _Program(exported, donated, jax.tree.structure(args), out_tree)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written under a temporary name, then renamed: a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class Kept:
    """A jitted function whose programs are kept on disk (where :func:`folder` says)
    and read back by later processes instead of being traced again: one program per
    structure of the arguments, for the shapes it first met. Other shapes, or a
    program that cannot be kept, go through the jitted function as usual."""

    def __init__(self, jitted: Callable, name: str):
        self.jitted, self.name = jitted, name
        self._last: Any = None  # the program of the last call
        self._programs: dict[Any, Any] = {}  # args' treedef -> program, or None
        functools.update_wrapper(self, jitted)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        last = self._last
        if last is self.jitted or kwargs:
            return self.jitted(*args, **kwargs)
        if last is not None:
            try:
                return last(*args)
            except (TypeError, ValueError):  # another structure, shape or placement
                pass
        where = folder()
        if where is None:
            return self.jitted(*args)
        treedef = jax.tree.structure(args)
        if treedef not in self._programs:
            self._programs[treedef] = self._load_or_export(where, args)
        program = self._programs[treedef]
        if program is None:  # not kept: plain jit from now on
            self._last = self.jitted
            return self.jitted(*args)
        try:
            out = program(*args)
        except (TypeError, ValueError):  # other shapes than the kept program's
            program = self.jitted  # jit's own cache serves every shape from now on
            out = program(*args)
        self._last = program
        return out

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted.lower(*args, **kwargs)

    def _load_or_export(self, where: Path, args: tuple) -> Any:
        try:
            path = where / f"{self.name}-{key(self.jitted, args)[:40]}.bin"
        except NotKept as e:
            _not_kept(str(e))
            return None
        with _lock:
            if path.exists():
                try:
                    program = _load(path, args)
                    _stats["read"] += 1
                    os.utime(path)  # recently used: evicted last
                    return program
                except Exception as e:  # a file of another build: export it again
                    _not_kept(f"could not read {path.name}: {type(e).__name__}: {e}")
            try:
                data, program = _export(self.jitted, args)
            except NotKept as e:
                _not_kept(str(e))
                return None
            _stats["exported"] += 1
            try:
                _write(path, data)
                _stats["written"] += 1
            except OSError as e:
                _not_kept(f"could not write {path.name}: {e}")
            _evict(path.parent)
            return program


def _evict(where: Path) -> None:
    """Deletes the least recently used programs while the folder holds more than
    ``MJXRUNNER_PROGRAMS_MAX_BYTES`` (default 2 GiB)."""
    limit = int(os.environ.get("MJXRUNNER_PROGRAMS_MAX_BYTES", 2 << 30))
    files = []
    for path in where.glob("*.bin"):
        try:
            st = path.stat()
        except FileNotFoundError:  # evicted by another process
            continue
        files.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size


def kept(jitted: Callable, name: str) -> Kept:
    """``jitted`` (a ``jax.jit`` of a function of the package), keeping its programs
    as :class:`Kept` says; ``name`` starts their files' names."""
    return Kept(jitted, name)
