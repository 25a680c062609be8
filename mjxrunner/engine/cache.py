"""Where mjxrunner keeps what it builds on a machine: the native host call's library,
the robot scenes and (for the command line and the Gymnasium door) JAX's compiled
programs. ``MJXRUNNER_CACHE_DIR`` moves it; by default it is the user's cache
folder (``$XDG_CACHE_HOME/mjxrunner``, else ``~/.cache/mjxrunner``)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "MJXRUNNER_CACHE_DIR"


def root() -> Path:
    """The cache folder (not created here)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mjxrunner"


COMPILE_CACHE_ENV = "MJXRUNNER_COMPILE_CACHE"


def use_compile_cache() -> str | None:
    """Turns JAX's persistent compilation cache on in ``root() / "jax"``, unless the
    user set a cache folder already (kept as it is) or ``MJXRUNNER_COMPILE_CACHE``
    is ``0``/``off``/``false`` (left off). Returns the folder in use, or None.

    The command line and the Gymnasium door call it: a second run of the same env
    reads its compiled programs back instead of compiling them again (minutes for
    a robot on impl "jax"). It also keeps the package's own programs whole, so a
    new process skips tracing them too (:mod:`mjxrunner.engine.programs`). The
    library's other entry points leave JAX's settings to the user.
    """
    import jax  # here: this module is also read by code that never needs JAX

    if os.environ.get(COMPILE_CACHE_ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return jax.config.jax_compilation_cache_dir
    if not jax.config.jax_compilation_cache_dir:
        folder = root() / "jax"
        folder.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(folder))
    if _programs is None:
        keep_programs(root() / "programs")
    return jax.config.jax_compilation_cache_dir


_programs: Path | None = None


def keep_programs(folder: str | os.PathLike | None) -> None:
    """Keeps the package's compiled programs in ``folder`` from now on (None: stops);
    :func:`use_compile_cache` keeps them in ``root() / "programs"``. See
    :mod:`mjxrunner.engine.programs`."""
    global _programs
    _programs = None if folder is None else Path(folder)


def programs_folder() -> Path | None:
    """Where the package's compiled programs are kept, or None when they are not."""
    return _programs
