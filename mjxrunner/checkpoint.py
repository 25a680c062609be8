"""Checkpoints of runners, envs and their groups: one public module over their owners.

Each owner saves its own state: the file format (a checked prefix, then an ``.npz``
with a checksummed JSON header) is :mod:`mjxrunner.engine.archive`; the engine's configuration
:mod:`mjxrunner.engine.codec`; a runner and a group runner
:mod:`mjxrunner.doors.runner_io` (through ``MultiEnvRunner.save``/``load`` and
``GroupRunner.save``/``load``); an env :mod:`mjxrunner.rl.env_io` and groups of envs
:mod:`mjxrunner.rl.group_env` (through ``mjxrunner.env.save``/``load``).

Files are written at format version 3, whose prefix (length and SHA-256 of the
payload) is checked before the zip is opened. Files of format version 2 (a bare
``.npz``) load as they did; older versions are refused with a message that names
the version, as before.
"""

from mjxrunner.doors.runner_io import load_groups, load_runner, save, save_groups
from mjxrunner.engine.archive import (
    FORMAT,
    KINDS,
    VERSION,
    CheckpointError,
    CheckpointWarning,
    _checksum,
    fill,
    read,
    write,
)
from mjxrunner.rl.env_io import load_env, save_env
from mjxrunner.rl.group_env import load_groups as load_env_groups
from mjxrunner.rl.group_env import save_groups as save_env_groups

__all__ = [
    "FORMAT",
    "KINDS",
    "VERSION",
    "CheckpointError",
    "CheckpointWarning",
    "_checksum",
    "fill",
    "load_env",
    "load_env_groups",
    "load_groups",
    "load_runner",
    "read",
    "save",
    "save_env",
    "save_env_groups",
    "save_groups",
    "write",
]
