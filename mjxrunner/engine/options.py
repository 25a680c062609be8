"""Every option of the engine, in one frozen dataclass that every door passes through.

The runner, the env, the doors and checkpoints take an :class:`Options` (or the same
names as keyword arguments), hand it to :func:`mjxrunner.engine.configure` and save
it once (:meth:`Options.to_header`). Adding an option touches its owner and this
module only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from mjxrunner.engine import deprecated, events, guards
from mjxrunner.engine.guards import MAX_QVEL

SAVED = "saved"
"""The field-metadata key of an option that checkpoints save, and how (:class:`Saved`)."""


def _same(x: Any) -> Any:
    return x


@dataclasses.dataclass(frozen=True)
class Saved:
    """How a checkpoint header holds an option.

    Attributes:
      backend: under the header's ``"options"`` (the backend's choice), else at the top.
      write, read: the option to JSON and back.
      required: every header has it (False: older files lack it; its default then).
    """

    backend: bool = False
    write: Any = _same
    read: Any = _same
    required: bool = True


def _saved(default: Any, **how: Any) -> Any:
    """A field that checkpoints save, as ``how`` (:class:`Saved`) says."""
    return dataclasses.field(default=default, metadata={SAVED: Saved(**how)})


def _latency_json(latency: Any) -> Any:
    return events.latency_to_json(events.check_latency(latency))


def _pushes_json(pushes: Any) -> Any:
    return None if pushes is None else pushes.to_json()


def _pushes(fields: Any) -> Any:
    return None if fields is None else events.Pushes.from_json(fields)


@dataclasses.dataclass(frozen=True)
class Options:
    """The engine's options (hashable: part of the static configuration).

    Attributes:
      impl: ``"jax"`` or ``"warp"`` (MJX, always passed to it), or ``"c"`` (MuJoCo's
        C engine on CPU threads; ``"cpp"``, MJX's spelling, means the same).
      device: None (JAX's default), a ``jax.Device`` or a platform name.
      graph_mode: Warp's CUDA graph mode (None: MJX's default for the device).
      naconmax: Warp's contact pool for all worlds together (None: from the model).
      njmax: Warp's constraint rows per world (None: from the model).
      naccdmax: Warp's CCD contacts per world (None: from the model).
      nvmax: Warp's active DOFs per world, for island compaction (None: ``nv``);
        see :func:`mjxrunner.engine.backend.capacities`.
      num_threads: impl "c"'s threads (None: every core this process may use).
      overflow_policy: the Warp overflow guard's policy: ``"raise"`` (roll back the
        step, ``CapacityOverflowError``), ``"warn"`` or ``"truncate"`` (on device).
      instability_policy: the instability guard's policy (NaN/Inf state or
        ``|qvel| > max_qvel``): ``"truncate"`` (mark the world truncated, on
        device), ``"warn"`` or ``"raise"`` (roll back the step). ``"reset"``, its
        older name, warns and means ``"truncate"``.
      max_qvel: the ``|qvel|`` above which a world counts as unstable (MuJoCo's
        ``mjMAXVAL``, 1e10, by default).
      guards: your own :class:`~mjxrunner.engine.guards.Guard` s, after the
        standard ones (functions: not saved in checkpoints).
      latency: None, an :class:`~mjxrunner.engine.events.Latency`, or an int (a fixed
        delay in control steps).
      pushes: None or an :class:`~mjxrunner.engine.events.Pushes`.
      collision_enabled: False steps every world with its contacts switched off.
    """

    impl: str = _saved("jax", backend=True)
    device: Any = None  # a device of this process: not saved
    graph_mode: str | None = _saved(None, backend=True)
    naconmax: int | None = _saved(None, backend=True)
    njmax: int | None = _saved(None, backend=True)
    naccdmax: int | None = _saved(None, backend=True)
    nvmax: int | None = _saved(None, backend=True)
    num_threads: int | None = _saved(None, backend=True)
    overflow_policy: str = _saved("raise")
    instability_policy: str = _saved("truncate", read=lambda p: _current(p, warn=False))
    max_qvel: float = _saved(MAX_QVEL)
    guards: tuple = ()  # functions: the header lists every guard's name and policy apart
    # _saved returns a dataclasses.field (ruff cannot see it for these types)
    latency: Any = _saved(None, write=_latency_json, read=events.latency_from_json, required=False)  # noqa: RUF009
    pushes: Any = _saved(None, write=_pushes_json, read=_pushes, required=False)  # noqa: RUF009
    collision_enabled: bool = _saved(True, required=False)

    def __post_init__(self):
        if not isinstance(self.collision_enabled, (bool, np.bool_)):
            raise TypeError(f"collision_enabled must be a bool, got {self.collision_enabled!r}")
        if not isinstance(self.guards, tuple):  # hashable, as the configuration must be
            object.__setattr__(self, "guards", tuple(self.guards))

    def replace(self, **changes: Any) -> Options:
        return of(self, **changes)

    def guard_set(self, backend: Any) -> tuple[guards.Guard, ...]:
        """The guards of every step (:func:`mjxrunner.engine.guards.standard`, then
        the user's) on ``backend`` (a :class:`~mjxrunner.engine.backend.Backend`)."""
        return guards.standard(
            instability_policy=self.instability_policy,
            max_qvel=self.max_qvel,
            # impl "jax" never overflows: no host read-back for a guard that cannot trip
            overflow_policy=self.overflow_policy if backend.physics.overflows else "truncate",
            caps=backend.caps,
            extra=self.guards,
        )

    def to_header(self) -> dict[str, Any]:
        """The checkpoint header's fields of these options, as their fields'
        metadata says (:data:`SAVED`): the backend's under ``"options"``, the others
        at the top; the device and user guards are not saved."""
        header: dict[str, Any] = {"options": {}}
        for f in dataclasses.fields(self):
            if SAVED in f.metadata:
                how = f.metadata[SAVED]
                where = header["options"] if how.backend else header
                where[f.name] = how.write(getattr(self, f.name))
        return header

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> Options:
        """The options a checkpoint header records (fields that older files lack
        take their defaults: no events, contacts on)."""
        values = {}
        for f in dataclasses.fields(cls):
            if SAVED in f.metadata:
                how = f.metadata[SAVED]
                where = header["options"] if how.backend else header
                if f.name in where:
                    values[f.name] = how.read(where[f.name])
        return of(cls(), **values)


HEADER_KEYS = (
    "options",
    *(
        f.name
        for f in dataclasses.fields(Options)
        if SAVED in f.metadata and f.metadata[SAVED].required and not f.metadata[SAVED].backend
    ),
)
"""The header fields of the options that every runner or env checkpoint holds (the
others are absent from older files)."""

NAMES = tuple(f.name for f in dataclasses.fields(Options))
"""The option names, as keyword arguments of the runner, the env and the doors."""

RUNNER = Options()
"""The runner's defaults."""

ENV = Options(overflow_policy="truncate")
"""The env's defaults: every policy truncates on device, so autoreset restarts."""


def _current(policy: Any, warn: bool = True) -> Any:
    if policy != "reset":
        return policy
    if warn:
        # stacklevel 5: the caller of the runner's or env's constructor
        deprecated.warn('instability_policy="reset"', 'it means "truncate"; say "truncate"', 5)
    return "truncate"


def of(base: Options | None = None, options: Options | None = None, **kwargs: Any) -> Options:
    """``options`` (or ``base``, the door's defaults) with the keyword arguments
    ``kwargs`` (any of :data:`NAMES`) changed.

    Raises:
      TypeError: ``options`` is not an :class:`Options`, or a keyword is not an option.
    """
    if options is not None and not isinstance(options, Options):
        raise TypeError(f"options must be a mjxrunner.engine.Options, got {options!r}")
    unknown = sorted(set(kwargs) - set(NAMES))
    if unknown:
        raise TypeError(f"unknown engine option(s) {unknown}; the options are {list(NAMES)}")
    start = options if options is not None else (base if base is not None else RUNNER)
    if "instability_policy" in kwargs:
        kwargs["instability_policy"] = _current(kwargs["instability_policy"])
    return dataclasses.replace(start, **kwargs)
