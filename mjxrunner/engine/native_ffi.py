"""Impl ``"c"``'s host call as an XLA FFI handler, built from ``native_ffi.cc``.

:func:`mjxrunner.engine.native._run` steps every world with one host call per
step. Through ``jax.pure_callback`` XLA copies its operands and results and the
packing runs in NumPy; through this module's FFI target XLA hands the handler its
buffers in place and the packing runs in C, with the same operands, results and
rules (see ``native_ffi.cc``).

The library is built on first use with the system's C++ compiler, against the
MuJoCo library and headers of the installed ``mujoco`` package and the XLA FFI
headers of ``jaxlib``, into a cache folder keyed by a hash of the source, the
versions and the compiler command. Where it cannot be built (no compiler, a failed
build) :func:`available` is False and impl "c" keeps the ``pure_callback`` path;
``backend_info()["host_call"]`` says which path runs.

Environment variables:

* ``MJXRUNNER_HOST_CALL``: ``"auto"`` (default: the FFI where it builds),
  ``"pure_callback"`` (never the FFI) or ``"ffi"`` (the FFI or an error). It is
  read when a host model is made (a runner, env or door is built); that host
  keeps its path.
* ``MJXRUNNER_CXX``: the compiler (default ``$CXX``, else ``c++``), split like a
  shell word list.
* ``MJXRUNNER_CACHE_DIR``: the cache folder (default ``$XDG_CACHE_HOME/mjxrunner``
  or ``~/.cache/mjxrunner``); the library goes under ``native/``.

Each host model (:class:`mjxrunner.engine.native.Host`) is registered with the
library under a token at its first call; the batches of its worlds are made at
first use and freed when the ``Host`` object goes away.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import os
import shlex
import subprocess
import tempfile
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any

import jax
import jaxlib
import mujoco
import numpy as np

from mjxrunner.engine import cache

SOURCE = Path(__file__).with_name("native_ffi.cc")
TARGET = "mjxrunner_native_host_call"
PLACED_TARGET = "mjxrunner_native_placed_host_call"
ABI = 4  # mjxr_version() of the source this module speaks to

MODE_ENV = "MJXRUNNER_HOST_CALL"
CXX_ENV = "MJXRUNNER_CXX"
CACHE_ENV = cache.CACHE_ENV
MODES = ("auto", "ffi", "pure_callback")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_failure: str | None = None  # why the library is not available, once known
_tokens: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Host -> token
_counter = itertools.count(1)


# --- building ---------------------------------------------------------------------


def mode() -> str:
    """The path asked for by ``MJXRUNNER_HOST_CALL``: ``auto``, ``ffi`` or
    ``pure_callback``."""
    value = os.environ.get(MODE_ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, got {value!r}")
    return value


def compiler() -> list[str]:
    """The C++ compiler command: ``MJXRUNNER_CXX``, else ``CXX``, else ``c++``."""
    return shlex.split(os.environ.get(CXX_ENV) or os.environ.get("CXX") or "c++")


def cache_dir() -> Path:
    """Where built libraries are kept."""
    return cache.root() / "native"


def _mujoco_dir() -> Path:
    return Path(mujoco.__file__).parent


def mujoco_library() -> Path:
    """The MuJoCo shared library inside the installed package (the one Python's
    bindings use: the handler works on their models)."""
    found = sorted(_mujoco_dir().glob("libmujoco.so.*"))
    if not found:
        raise FileNotFoundError(f"no libmujoco.so.* in {_mujoco_dir()}")
    return found[0]


def _command(output: Path) -> list[str]:
    lib = mujoco_library()
    return [
        *compiler(),
        "-std=c++17",
        "-O3",
        "-DNDEBUG",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        "-ffp-contract=off",
        "-w",
        f"-I{jax.ffi.include_dir()}",
        f"-I{_mujoco_dir() / 'include'}",
        str(SOURCE),
        "-o",
        str(output),
        f"-L{lib.parent}",
        f"-l:{lib.name}",
        f"-Wl,-rpath,{lib.parent}",
    ]


def library_path() -> Path:
    """The built library's path for this source, MuJoCo, jaxlib and compiler."""
    key = hashlib.sha256()
    key.update(SOURCE.read_bytes())
    for part in (
        mujoco.__version__,
        jaxlib.__version__,
        str(mujoco_library()),
        " ".join(_command(Path("out.so"))),
    ):
        key.update(b"\0" + part.encode())
    return cache_dir() / f"native_ffi-{key.hexdigest()[:20]}.so"


def build() -> Path:
    """Builds the library unless it is cached; returns its path. Raises
    ``RuntimeError`` naming the command and its output when the build fails."""
    path = library_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written under a temporary name, then renamed: a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    command = _command(Path(tmp))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        os.unlink(tmp)
        raise RuntimeError(f"impl 'c': could not run {shlex.join(command)}: {e}") from e
    if done.returncode != 0 or os.path.getsize(tmp) == 0:
        os.unlink(tmp)
        out = (done.stderr or done.stdout or "").strip()[-2000:]
        raise RuntimeError(
            f"impl 'c': {shlex.join(command)} failed (exit {done.returncode}): {out}"
        )
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build()))
    if lib.mjxr_version() != ABI:
        raise RuntimeError("impl 'c': the built library speaks another version")
    lib.mjxr_register.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    lib.mjxr_register.restype = None
    lib.mjxr_release.argtypes = [ctypes.c_int64]
    lib.mjxr_release.restype = None
    lib.mjxr_expanded.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.mjxr_expanded.restype = ctypes.c_int
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.MjxrHostCall), platform="cpu")
    jax.ffi.register_ffi_target(
        PLACED_TARGET, jax.ffi.pycapsule(lib.MjxrPlacedHostCall), platform="cpu"
    )
    return lib


def available() -> bool:
    """Whether the FFI handler is built and registered (built on the first call)."""
    global _lib, _failure
    with _lock:
        if _lib is None and _failure is None:
            try:
                _lib = _load()
            except Exception as e:  # any failure means the fallback
                _failure = str(e) or type(e).__name__
                warnings.warn(
                    f"{_failure}; impl 'c' calls MuJoCo through jax.pure_callback "
                    "(slower; see mjxrunner.engine.native_ffi)",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return _lib is not None


def failure() -> str | None:
    """Why the FFI handler is not available (None: available, or not tried yet)."""
    return _failure


def host_call() -> str:
    """The path a host model made now gets: ``"ffi"`` or
    ``"pure_callback"`` (builds the library if it was not tried yet)."""
    asked = mode()
    if asked == "pure_callback":
        return "pure_callback"
    return "ffi" if available() else "pure_callback"


# --- calling -----------------------------------------------------------------------


def choose() -> bool:
    """Whether a host model made now calls through the FFI handler (else
    ``jax.pure_callback``); the host keeps that path. Raises ``RuntimeError`` when
    ``MJXRUNNER_HOST_CALL=ffi`` asks for a handler that is unavailable."""
    path = host_call()
    if mode() == "ffi" and path != "ffi":
        raise RuntimeError(f"{MODE_ENV}=ffi, but the FFI handler is unavailable: {_failure}")
    return path == "ffi"


def _token(host: Any) -> int:
    """``host``'s token in the library, registered at its first call."""
    with _lock:
        if host not in _tokens:
            token = next(_counter)
            _lib.mjxr_register(token, host.model._address, int(host.num_threads))
            weakref.finalize(host, _lib.mjxr_release, token)
            _tokens[host] = token
        return _tokens[host]


def _spec(items: tuple) -> str:
    return ",".join(f"{name}:{int(size)}" for name, size in items)


@functools.cache
def _setconst(fields: frozenset) -> str:
    return ",".join(sorted(fields))


def call(
    host: Any,
    call: Any,
    shapes: tuple,
    state,
    shared,
    per_world,
    fields,
    setconst: frozenset,
    placed: tuple = (),
    views: tuple = (),
    shared_offset: int = -1,
):
    """The FFI call that replaces ``jax.pure_callback(host.run, ...)`` in
    :func:`mjxrunner.engine.native._run`: same operands, same results; ``setconst``
    names the model fields whose change makes MuJoCo set a world up again.

    ``placed``: ``(buffers, places)``, where the results go instead of arrays of
    their own: ``places`` gives ``(buffer, offset)`` for the bits, each state field
    and each output, ``buffers`` (donated by the caller) are updated there and
    returned after the flags. ``shapes`` then holds the flags' shape alone.

    ``views`` (with ``placed``): ``(operand, offset, size)`` per state field: the
    field lies whole, ``(n, size)`` row-major, at ``offset`` of ``fields[operand]``
    (a packed buffer), where XLA would copy a slice of it into an operand of its
    own; empty: ``fields`` holds each state field. ``shared_offset`` (with
    ``placed``): where the shared model fields start in ``shared`` (a packed
    model buffer); -1: ``shared`` holds them alone."""
    attrs = dict(
        host=np.int64(_token(host)),
        how=call.how,
        nstep=np.int64(call.nstep),
        outputs=_spec(call.outputs),
        shared_fields=_spec(call.shared),
        world_fields=_spec(call.per_world),
        setconst_fields=_setconst(setconst),
    )
    if not placed:
        return jax.ffi.ffi_call(TARGET, shapes, vmap_method="sequential")(
            state, shared, per_world, *fields, **attrs
        )
    buffers, places = placed
    first = 3 + len(fields)
    shapes = (*shapes, *(jax.ShapeDtypeStruct(b.shape, b.dtype) for b in buffers))
    return jax.ffi.ffi_call(
        PLACED_TARGET,
        shapes,
        input_output_aliases={first + k: 1 + k for k in range(len(buffers))},
    )(
        state,
        shared,
        per_world,
        *fields,
        *buffers,
        places=_spec(places),
        views=",".join(f"{j}:{o}:{z}" for j, o, z in views),
        shared_offset=np.int64(shared_offset),
        **attrs,
    )


def expanded(host: Any, n: int) -> set[str] | None:
    """The model fields given per-world values so far in ``host``'s batch of ``n``
    worlds on the FFI path (None: no such batch)."""
    if _lib is None or host not in _tokens:
        return None
    token = _tokens[host]
    size = _lib.mjxr_expanded(token, n, None, 0)
    if size < 0:
        return None
    buf = ctypes.create_string_buffer(size + 1)
    _lib.mjxr_expanded(token, n, buf, size + 1)
    text = buf.value.decode()
    return set(text.split(",")) if text else set()
