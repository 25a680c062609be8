"""Registry of the MJCF scenes in ``models/`` and loading of any model source."""

from __future__ import annotations

import os
from pathlib import Path

import mujoco


def _models_dir() -> Path:
    packaged = Path(__file__).parent / "_models"  # wheel installs carry a copy
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[1] / "models"


def list() -> list[str]:  # noqa: A001 - the registry's verb, as in mjxrunner.models.list()
    """Names of the scenes in ``models/``, sorted."""
    return sorted(p.stem for p in _models_dir().glob("*.xml"))


def path(name: str) -> Path:
    """The MJCF file of scene ``name``."""
    if not isinstance(name, str):
        raise TypeError(f"model name must be a str, got {type(name).__name__}")
    file = _models_dir() / f"{name}.xml"
    if not file.is_file():
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(list())}")
    return file


def load(name: str) -> mujoco.MjModel:
    """Compiles scene ``name`` into an ``MjModel``."""
    return mujoco.MjModel.from_xml_path(str(path(name)))


def load_any(source: mujoco.MjModel | str | os.PathLike) -> mujoco.MjModel:
    """An ``MjModel`` from a model, a registry name, an MJCF/MJB path or MJCF text.

    Raises:
      TypeError: ``source`` is none of these kinds.
      ValueError: the name is unknown, the file is missing, or MuJoCo rejects it.
    """
    if isinstance(source, mujoco.MjModel):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            "model must be an MjModel, a name from models/, a path or MJCF text, "
            f"got {type(source).__name__}"
        )
    text = os.fspath(source)
    try:
        if isinstance(source, str) and text.lstrip().startswith("<"):
            return mujoco.MjModel.from_xml_string(text)
        if isinstance(source, str) and text in list():
            return load(text)
        file = Path(text)
        if not file.is_file():
            raise ValueError(
                f"model {text!r} is neither a file nor a known name; known models: "
                f"{', '.join(list())}"
            )
        if file.suffix == ".mjb":
            return mujoco.MjModel.from_binary_path(str(file))
        return mujoco.MjModel.from_xml_path(str(file))
    except ValueError as e:
        if "known models" in str(e):
            raise
        raise ValueError(f"MuJoCo could not load model {text[:200]!r}: {e}") from e
