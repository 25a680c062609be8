"""Names that moved or changed form, kept working: each use warns with a
:class:`DeprecationWarning` naming what replaces it. One mechanism for every module
that keeps old names (:func:`module_getattr`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def warn(old: str, instead: str, stacklevel: int = 3) -> None:
    """Warns that ``old`` is deprecated, naming ``instead``; ``stacklevel`` 3 points at
    the caller of the function that calls this."""
    warnings.warn(f"{old} is deprecated: {instead}", DeprecationWarning, stacklevel=stacklevel)


def module_getattr(
    module: str, moved: Mapping[str, tuple[str, Any]], shown: str | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that gives each old name of ``moved`` (``name: (what
    replaces it, its value)``) with a warning naming it as ``{shown}.{name}``
    (``shown``: where users import it from, default ``module``); any other name is an
    ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        instead, value = moved[name]
        warn(f"{shown or module}.{name}", instead)
        return value

    return __getattr__
