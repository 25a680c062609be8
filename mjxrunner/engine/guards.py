"""Guards: per-world checks after every step, each with a policy.

A guard is a *detector* ``batched data -> (num_envs,) bool`` (True where the world
is in trouble) and a *policy* from one vocabulary:

* ``"truncate"``: mark those worlds ``truncated`` on device, inside the compiled
  step, so the next reset of truncated worlds (or the env's autoreset) replaces
  them. Nothing is read back.
* ``"warn"``: the stateful front doors (runner, Gymnasium env) read the flags back
  after each step and warn when a world newly trips the guard.
* ``"raise"``: as ``"warn"``, but the step is rolled back and an error raised.

Every step records, per guard, which worlds tripped it (``RunnerState.tripped``)
and counts each new trip (``HealthCounts.events``: a step after which the guard
was tripped and before which it was not). Each world is judged from its own arrays
only, so one world's NaN never changes another world's flag. The exception is
MJX-Warp's contact pool, shared by all worlds: when it overflows, Warp sets the
overflow bits of every world, and contacts may be lost in any of them.

Built in: :func:`instability` (NaN/Inf or runaway ``qvel``), :func:`overflow`
(a Warp buffer too small) and :func:`nonfinite_action` (a NaN/Inf control). A user
guard is a :class:`Guard` with a detector of their own; detectors are static
configuration of the compiled step, so define them once (module-level functions
or frozen dataclasses), not as a fresh lambda per call, or each call compiles.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import backend, backends
from mjxrunner.engine.errors import (
    CapacityOverflowError,
    CapacityWarning,
    GuardError,
    GuardWarning,
    InstabilityError,
    InstabilityWarning,
)

POLICIES = ("raise", "warn", "truncate")

MAX_QVEL = float(mujoco.mjMAXVAL)
"""Default bound on ``|qvel|``: MuJoCo's divergence threshold (1e10), the value
above which native ``mj_checkVel`` declares a simulation diverged."""


def check_policy(policy: Any, name: str, extra: Sequence[str] = ()) -> str:
    """``policy`` if it is one of :data:`POLICIES` (or ``extra``), else ValueError."""
    allowed = (*POLICIES, *extra)
    if not isinstance(policy, str) or policy not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {policy!r}")
    return policy


@dataclasses.dataclass(frozen=True)
class Guard:
    """One per-world check and what to do when it trips.

    Attributes:
      name: key of the guard in ``RunnerState.tripped``, ``HealthCounts.events`` and
        the health report.
      detect: ``detect(data) -> (num_envs,) bool`` on the batched ``mjx.Data`` after
        the step; ``data.ctrl`` holds the controls the step used. Must be hashable
        (functions are, by identity). It may define ``message(worlds, state) -> str``
        for the error and warning text.
      policy: ``"truncate"``, ``"warn"`` or ``"raise"``.
      error: the exception raised under ``"raise"``.
      warning: the warning issued under ``"warn"``.
    """

    name: str
    detect: Callable[[mjx.Data], jax.Array]
    policy: str = "truncate"
    error: type[Exception] = GuardError
    warning: type[Warning] = GuardWarning

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a guard's name must be an identifier, got {self.name!r}")
        if not callable(self.detect):
            raise TypeError(f"guard {self.name!r}: detect must be callable")
        check_policy(self.policy, f"guard {self.name!r} policy")

    def message(self, worlds: np.ndarray, state: Any) -> str:
        """The text of the error or warning for the tripped ``worlds``."""
        describe = getattr(self.detect, "message", None)
        if describe is not None:
            return describe(worlds, state)
        return f"guard {self.name!r} tripped in {len(worlds)} world(s) {_shown(worlds)}"


def _shown(worlds: np.ndarray) -> list:
    return worlds[:10].tolist() + (["..."] if len(worlds) > 10 else [])


# --- detectors -------------------------------------------------------------------------


def unstable(data: mjx.Data, max_qvel: float = MAX_QVEL) -> jax.Array:
    """``(num_envs,)`` bool: worlds of batched ``data`` that blew up.

    True where ``qpos``, ``qvel`` or ``qacc`` has a NaN/Inf or ``|qvel| > max_qvel``
    (static), and on impl "c" where MuJoCo reset a diverging world in the last step
    (it does so by itself, with a warning, instead of letting NaN through).
    """
    n = data.qpos.shape[0]

    def all_finite(x):
        return jnp.isfinite(x.reshape(n, -1)).all(axis=1)

    qvel = data.qvel.reshape(n, -1)
    # NaN fails every comparison, so the bound also catches NaN (and Inf when finite).
    ok = all_finite(data.qpos) & all_finite(data.qacc) & (jnp.abs(qvel) <= max_qvel).all(axis=1)
    if math.isinf(max_qvel):
        ok = ok & jnp.isfinite(qvel).all(axis=1)
    # "ok & ~diverged", not "~ok | diverged": the same truth, but measured, the second
    # form changed a Brax run on impl "c" in its last float32 bits (XLA fuses the
    # step's program otherwise); this one keeps runs as they were
    ok = ok & ~backends.of(data).diverged(data)
    return ~ok


@dataclasses.dataclass(frozen=True)
class Unstable:
    """Detector: NaN/Inf in ``qpos``/``qvel``/``qacc``, or ``|qvel| > max_qvel``."""

    max_qvel: float = MAX_QVEL

    def __post_init__(self):
        bound = self.max_qvel
        if isinstance(bound, bool) or not isinstance(bound, (int, float, np.floating)):
            raise TypeError(f"max_qvel must be a real number, got {type(bound).__name__}")
        if math.isnan(bound) or bound <= 0:
            raise ValueError(f"max_qvel must be > 0 (inf allowed), got {bound}")
        object.__setattr__(self, "max_qvel", float(bound))

    def __call__(self, data: mjx.Data) -> jax.Array:
        return unstable(data, self.max_qvel)

    def message(self, worlds: np.ndarray, state: Any) -> str:
        return (
            f"{len(worlds)} world(s) {_shown(worlds)} became unstable: NaN/Inf in "
            f"qpos/qvel/qacc or |qvel| > {self.max_qvel:g}. Lower the timestep or the "
            "controls, raise max_qvel, or use instability_policy='truncate' to truncate "
            "and reset them."
        )


@dataclasses.dataclass(frozen=True)
class Overflow:
    """Detector: a Warp buffer was too small in the step (never trips on impl "jax")."""

    caps: backend.Capacities | None = None

    def __call__(self, data: mjx.Data) -> jax.Array:
        return backend.overflow_bits(data) != 0

    def message(self, worlds: np.ndarray, state: Any) -> str:
        from mjxrunner.engine.sharding import host_copy

        return backend.describe_overflow(host_copy(state.overflow), self.caps)


@dataclasses.dataclass(frozen=True)
class NonfiniteAction:
    """Detector: the step's controls held a NaN or Inf."""

    def __call__(self, data: mjx.Data) -> jax.Array:
        n = data.ctrl.shape[0]
        return ~jnp.isfinite(data.ctrl.reshape(n, -1)).all(axis=1)

    def message(self, worlds: np.ndarray, state: Any) -> str:
        return f"{len(worlds)} world(s) {_shown(worlds)} were given NaN/Inf controls"


def instability(max_qvel: float = MAX_QVEL, policy: str = "truncate") -> Guard:
    """The guard named ``"unstable"``: see :class:`Unstable`."""
    return Guard("unstable", Unstable(max_qvel), policy, InstabilityError, InstabilityWarning)


def overflow(caps: backend.Capacities | None = None, policy: str = "raise") -> Guard:
    """The guard named ``"overflow"``: see :class:`Overflow`."""
    return Guard("overflow", Overflow(caps), policy, CapacityOverflowError, CapacityWarning)


def nonfinite_action(policy: str = "truncate") -> Guard:
    """The guard named ``"action"``: see :class:`NonfiniteAction`."""
    return Guard("action", NonfiniteAction(), policy)


def standard(
    *,
    instability_policy: str = "truncate",
    max_qvel: float = MAX_QVEL,
    overflow_policy: str = "raise",
    caps: backend.Capacities | None = None,
    extra: Sequence[Guard] = (),
) -> tuple[Guard, ...]:
    """The guards every runner and env has, then the user's ``extra`` ones."""
    check_policy(instability_policy, "instability_policy")
    check_policy(overflow_policy, "overflow_policy")
    extra = tuple(extra)
    for g in extra:
        if not isinstance(g, Guard):
            raise TypeError(f"guards must be mjxrunner.engine.guards.Guard, got {type(g).__name__}")
    out = (
        instability(max_qvel, instability_policy),
        overflow(caps, overflow_policy),
        nonfinite_action(),
        *extra,
    )
    names = [g.name for g in out]
    if len(set(names)) != len(names):
        raise ValueError(f"guard names must be unique, got {names}")
    return out


def find(guards: Sequence[Guard], name: str) -> Guard | None:
    """The guard called ``name``, or None."""
    return next((g for g in guards if g.name == name), None)


# --- inside the step -------------------------------------------------------------------


def after_step(
    guards: Sequence[Guard], data: mjx.Data, tripped: dict[str, jax.Array]
) -> tuple[dict[str, jax.Array], dict[str, jax.Array], jax.Array]:
    """Runs every guard on the stepped ``data``.

    Args:
      guards: the guards.
      data: batched data after the step.
      tripped: each guard's ``(num_envs,)`` flags before the step.

    Returns:
      ``(tripped, new, truncate)``: the flags after the step (a guard of ``tripped``
      not in ``guards`` is cleared), the worlds that newly tripped each guard, and
      the ``(num_envs,)`` worlds to truncate (policy ``"truncate"``).
    """
    n = data.qpos.shape[0]
    now = {name: jnp.zeros((n,), bool) for name in tripped}
    new, truncate = {}, jnp.zeros((n,), bool)
    for g in guards:
        if g.name not in tripped:
            raise ValueError(
                f"the state has no flags for guard {g.name!r}: build it with the same "
                "guards (core.init(..., guards=...))"
            )
        flag = jnp.asarray(g.detect(data)).astype(bool).reshape(n)
        now[g.name] = flag
        new[g.name] = flag & ~tripped[g.name]
        if g.policy == "truncate":
            truncate = truncate | flag
    return now, new, truncate


# --- on the host ----------------------------------------------------------------------


def host_policies(guards: Sequence[Guard]) -> tuple[Guard, ...]:
    """The guards whose policy needs the flags on the host after every step."""
    return tuple(g for g in guards if g.policy != "truncate")


def check_on_host(
    guards: Sequence[Guard], before: Any, after: Any
) -> tuple[Guard, np.ndarray] | None:
    """Applies the ``"warn"`` and ``"raise"`` policies to one step or rollout.

    Reads back only the flags and counts of guards with those policies (one
    transfer, which waits for the step).

    Args:
      guards: the guards.
      before: the ``RunnerState`` before the step (or rollout).
      after: the state after it.

    Returns:
      None, or ``(guard, worlds)`` for the first guard with policy ``"raise"`` that
      tripped: the caller rolls back and raises ``guard.error(guard.message(worlds,
      after))``. Warnings are issued here, one per guard with a new trip (a world
      that stays in trouble warns once).
    """
    from mjxrunner.engine.sharding import host_copy

    checked = host_policies(guards)
    if not checked:
        return None
    names = [g.name for g in checked]
    flags, now, then = jax.tree.map(
        host_copy,
        (
            [after.tripped[k] for k in names],
            [after.health.events[k] for k in names],
            [before.health.events[k] for k in names],
        ),
    )
    for g, flag, a, b in zip(checked, flags, now, then, strict=True):
        new = a > b
        # A rollout may have passed through trouble and left it: the count tells.
        bad = np.flatnonzero(flag | new)
        if not bad.size:
            continue
        if g.policy == "raise":
            return g, bad
        if new.any():
            warnings.warn(g.message(bad, after), g.warning, stacklevel=4)
    return None
