"""Where mjxrunner keeps what it builds on a machine: the native host call's library
and the robot scenes. ``MJXRUNNER_CACHE_DIR`` moves it; by default it is the user's
cache folder (``$XDG_CACHE_HOME/mjxrunner``, else ``~/.cache/mjxrunner``)."""

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
