"""Deprecated alias of :mod:`mjxrunner.tools.bench`, the throughput harness.

The harness is tooling, not engine, so it moved to :mod:`mjxrunner.tools`; this
module keeps old imports working and warns. Import ``mjxrunner.tools.bench`` instead
(and ``describe_backend`` from :mod:`mjxrunner.backend`).
"""

from __future__ import annotations

import warnings
from typing import Any

from mjxrunner.backend import describe_backend
from mjxrunner.tools import bench as _bench
from mjxrunner.tools.bench import *  # noqa: F403 - the alias re-exports the public API
from mjxrunner.tools.bench import __all__ as _public

# stacklevel 2: the warning points at the importing line (import machinery is skipped).
warnings.warn(
    "mjxrunner.bench is deprecated: import mjxrunner.tools.bench",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [*_public, "describe_backend"]  # the public names the old module had


def __getattr__(name: str) -> Any:
    """Everything else of the old module (private helpers included) still resolves."""
    try:
        return getattr(_bench, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
