"""The package's old flat module paths, kept working after the move into layers.

``import mjxrunner.runner`` (or ``from mjxrunner import worlds``) still gives the
module, now :mod:`mjxrunner.doors.runner` (:mod:`mjxrunner.engine.worlds`): the very
same module object, so a patched attribute is seen by every user of it. Paths users
were told to import (``mjxrunner.env``, ``.gym``, ``.torch``, ...) resolve quietly;
the other old paths warn once with a :class:`DeprecationWarning` naming the new one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "errors": "engine.errors",
    "checks": "engine.checks",
    "worlds": "engine.worlds",
    "state": "engine.state",
    "backend": "engine.backend",
    "cpu_fusion": "engine.cpu_fusion",
    "cpu_linalg": "engine.cpu_linalg",
    "guards": "engine.guards",
    "health": "engine.health",
    "params": "engine.params",
    "events": "engine.events",
    "sharding": "engine.sharding",
    "models": "engine.models",
    "groups": "engine.groups",
    "core": "engine.core",
    "observations": "kit.observations",
    "normalize": "kit.normalize",
    "terrain": "kit.terrain",
    "pixels": "kit.pixels",
    "render": "kit.render",
    "env": "rl.env",
    "group_env": "rl.group_env",
    "curriculum": "rl.curriculum",
    "runner": "doors.runner",
    "group_runner": "doors.group_runner",
    "layout": "doors.layout",
    "door": "doors.door",
    "gym": "doors.gym",
    "torch": "doors.torch",
    "rsl_rl": "doors.rsl_rl",
    "sb3": "doors.sb3",
    "brax": "doors.brax",
    "registration": "doors.registration",
    "cli": "tools.cli",
}
"""Old name (after ``mjxrunner.``) -> new name (after ``mjxrunner.``)."""

PUBLIC = frozenset(
    # the paths the README and the docs name, and the top-level names of mjxrunner
    {"env", "gym", "torch", "rsl_rl", "sb3", "brax", "models", "params"}
    | {"core", "guards", "health", "registration", "cpu_fusion", "cpu_linalg"}
)
"""Old paths that resolve without a warning."""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the old paths with the moved modules."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname.partition("mjxrunner.")[2]
        if fullname.startswith("mjxrunner.") and old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module):
        old = module.__name__.partition("mjxrunner.")[2]
        new = "mjxrunner." + MOVED[old]
        if old not in PUBLIC:
            # stacklevel 2 lands on the importing line: import machinery frames are skipped
            warnings.warn(
                f"{module.__name__} is deprecated: import {new}", DeprecationWarning, stacklevel=2
            )
        # The import system returns what sys.modules holds once this returns.
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Puts the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


install()
