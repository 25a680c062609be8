"""Writes tests/data/public_names.json, the public names of every module of the
mjxrunner on ``sys.path``, which tests/test_public_names.py holds to resolving.

Run from a checkout of the version whose names are promised (bf8b8f1, before the
backend redesign; its package on ``sys.path``):
``python tests/data/make_public_names.py tests/data/public_names.json``.

A module's public names are its ``__all__``, or else the names it binds without a
leading underscore, less modules, and less functions and classes defined elsewhere
(what it imports for its own use).
"""

import importlib
import inspect
import json
import pkgutil
import sys
import types
import warnings

import mjxrunner


def public_names(module: types.ModuleType) -> list[str]:
    declared = getattr(module, "__all__", None)
    names = declared or [n for n in vars(module) if not n.startswith("_")]
    kept = []
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, types.ModuleType) or name == "annotations":
            continue
        if inspect.isfunction(value) or inspect.isclass(value):
            home = value.__module__
            if not home.startswith("mjxrunner") or (home != module.__name__ and not declared):
                continue
        elif type(value).__module__ == "typing":  # Any and the like
            continue
        kept.append(name)
    return sorted(set(kept))


def main(path: str) -> None:
    out = {}
    for info in pkgutil.walk_packages(mjxrunner.__path__, "mjxrunner."):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            names = public_names(importlib.import_module(info.name))
        if names:
            out[info.name] = names
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
