"""Action latency and random pushes: per-world events of the engine's step.

Both are configured once (:class:`Latency`, :class:`Pushes`, options of
:func:`mjxrunner.engine.configure`) and kept per world in the
:class:`~mjxrunner.RunnerState` (``latency``, ``pushes``; None when off, so a
configuration without them compiles the same step as before). They act where the
engine writes the controls into the physics (:func:`before_physics`, called by
:func:`mjxrunner.engine.core.step`), so every front door gets them: the runner, its
rollouts and the functional env, sharded or not.

Randomness comes from each world's own stream (``RunnerState.rng``), split only for
the worlds that draw: a world's delays, push times and kicks depend on its own
stream alone, whatever the other worlds do and however the worlds are sharded.
Draws are made on every (re)start of a world (:func:`restart`) and after every push.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjxrunner.engine.state import LatencyState, PushState, RunnerState

MAX_DELAY = 1024
"""The largest delay, in control steps (the queue holds ``max_delay + 1`` commands)."""

# fold_in constants: one sub-stream per kind of draw, so adding one never shifts another
_DELAY, _INTERVAL, _KICK = 0, 1, 2


def _steps(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int number of control steps, got {value!r}")
    if not minimum <= value < 2**31 - 1:  # int32 counters on device
        raise ValueError(f"{name} must be in [{minimum}, 2**31 - 1), got {value}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class Latency:
    """Action latency: a command set at step ``t`` reaches the physics at step ``t + k``.

    ``Latency(2)`` delays every world by 2 control steps; ``Latency(0, 3)`` draws
    each world's delay uniformly from ``{0, 1, 2, 3}`` on every (re)start, from the
    world's own stream. A (re)started world's queue holds its start's ``ctrl``, so
    for the first ``k`` steps of an episode the physics gets that control.

    Attributes:
      low: fewest control steps a command waits (``>= 0``).
      high: most control steps, inclusive (None: ``low``, a fixed delay); the
        queue holds ``high + 1`` commands per world.
    """

    low: int
    high: int | None = None

    def __post_init__(self):
        low = _steps(self.low, "Latency low", 0)
        high = low if self.high is None else _steps(self.high, "Latency high", 0)
        if high < low:
            raise ValueError(f"Latency high ({high}) must be >= low ({low})")
        if high > MAX_DELAY:
            raise ValueError(f"Latency high must be <= {MAX_DELAY} control steps, got {high}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def max_delay(self) -> int:
        return self.high

    @property
    def random(self) -> bool:
        """Whether delays are drawn (else every world waits ``low`` steps)."""
        return self.high > self.low


@dataclasses.dataclass(frozen=True)
class Pushes:
    """Random pushes: velocity kicks at random intervals, each world on its own clock.

    Every push adds a draw to the velocity of ``joint``'s dofs, before the solver
    runs in the step that pushes; then the world draws the steps to its next push.
    A (re)started world draws its first interval afresh. Example: kick a free-floating
    root sideways every 50 to 150 steps by up to 0.5 m/s::

        Pushes(interval=(50, 150), velocity=((-0.5, 0.5), (-0.5, 0.5)))

    Attributes:
      interval: ``(fewest, most)`` control steps from a (re)start or a push to the
        next push, inclusive, drawn uniformly (an int: always that many).
      velocity: one ``(low, high)`` per dof of ``joint`` from its first, drawn
        uniformly and added to that dof's velocity; fewer pairs than dofs leave the
        others alone. A free joint's first three dofs are its linear velocity in
        the world frame (m/s), the next three its angular velocity in the body
        frame (rad/s); a hinge has one (rad/s), a slide one (m/s).
      joint: the name of the joint kicked (None: the model's first free joint).
    """

    interval: Any
    velocity: Any
    joint: str | None = None

    def __post_init__(self):
        interval = self.interval
        if isinstance(interval, numbers.Integral) and not isinstance(interval, bool):
            interval = (interval, interval)
        if not isinstance(interval, (tuple, list)) or len(interval) != 2:
            raise TypeError(f"Pushes interval must be (fewest, most) steps, got {interval!r}")
        lo, hi = (_steps(v, "Pushes interval", 1) for v in interval)
        if hi < lo:
            raise ValueError(
                f"Pushes interval must be (fewest, most) with fewest <= most, got {interval}"
            )
        velocity = self.velocity
        if not isinstance(velocity, (tuple, list)) or not velocity:
            raise TypeError(f"Pushes velocity must be a sequence of (low, high), got {velocity!r}")
        pairs = []
        for pair in velocity:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"Pushes velocity must hold (low, high) pairs, got {pair!r}")
            for v in pair:
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                    raise TypeError(f"Pushes velocity bounds must be finite numbers, got {v!r}")
            if pair[0] > pair[1]:
                raise ValueError(f"Pushes velocity pair {tuple(pair)} has low > high")
            pairs.append((float(pair[0]), float(pair[1])))
        if self.joint is not None and not isinstance(self.joint, str):
            raise TypeError(f"Pushes joint must be a joint name or None, got {self.joint!r}")
        object.__setattr__(self, "interval", (lo, hi))
        object.__setattr__(self, "velocity", tuple(pairs))

    def to_json(self) -> dict[str, Any]:
        return {
            "interval": list(self.interval),
            "velocity": [list(p) for p in self.velocity],
            "joint": self.joint,
        }

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> Pushes:
        return cls(
            tuple(fields["interval"]), tuple(map(tuple, fields["velocity"])), fields["joint"]
        )


@dataclasses.dataclass(frozen=True)
class PushPlan:
    """:class:`Pushes` resolved against a model (static engine configuration).

    Attributes:
      pushes: what the user asked for.
      dofadr: the first dof of the kicked joint; ``len(pushes.velocity)`` dofs from it
        are kicked.
    """

    pushes: Pushes
    dofadr: int


def check_latency(latency: Any) -> Latency | None:
    """A :class:`Latency` from a ``Latency``, an int (fixed delay) or None; a delay
    of at most 0 is None: no queue, the step of a runner without latency."""
    if latency is None:
        return None
    if isinstance(latency, numbers.Integral) and not isinstance(latency, bool):
        latency = Latency(int(latency))
    if not isinstance(latency, Latency):
        raise TypeError(
            f"latency must be a mjxrunner.engine.events.Latency, an int or None, got {latency!r}"
        )
    return latency if latency.high > 0 else None


def resolve_pushes(m: mujoco.MjModel, pushes: Any) -> PushPlan | None:
    """The :class:`PushPlan` of ``pushes`` (a :class:`Pushes` or None) on host model ``m``."""
    if pushes is None:
        return None
    if not isinstance(pushes, Pushes):
        raise TypeError(f"pushes must be a mjxrunner.engine.events.Pushes or None, got {pushes!r}")
    names = [m.joint(j).name for j in range(m.njnt)]
    if pushes.joint is None:
        free = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        if not free:
            raise ValueError(
                f"Pushes(joint=None) kicks the first free joint, but the model has none: "
                f"name a joint (joints: {names})"
            )
        j = free[0]
    elif pushes.joint in names:
        j = names.index(pushes.joint)
    else:
        raise ValueError(f"Pushes joint {pushes.joint!r} is not in the model (joints: {names})")
    ndof = {0: 6, 1: 3}.get(int(m.jnt_type[j]), 1)  # free, ball, else hinge/slide
    if len(pushes.velocity) > ndof:
        raise ValueError(
            f"Pushes velocity has {len(pushes.velocity)} pairs, but joint {names[j]!r} "
            f"has {ndof} dof(s)"
        )
    return PushPlan(pushes, int(m.jnt_dofadr[j]))


# --- state -------------------------------------------------------------------------------


def attach(state: RunnerState, latency: Latency | None, plan: PushPlan | None) -> RunnerState:
    """``state`` with the event fields the configuration needs, and no others.

    New queues hold each world's ``ctrl``; new delays are ``latency.low`` and new
    countdowns the longest interval, until :func:`restart` draws them.
    """
    n, nu = state.ctrl.shape
    new_latency = new_pushes = None
    if latency is not None:
        old = state.latency
        if old is not None and old.queue.shape[1] == latency.max_delay + 1:
            new_latency = old
        else:
            queue = jnp.broadcast_to(state.ctrl[:, None, :], (n, latency.max_delay + 1, nu))
            new_latency = LatencyState(
                queue=jnp.array(queue), delay=jnp.full((n,), latency.low, jnp.int32)
            )
    if plan is not None:
        new_pushes = state.pushes
        if new_pushes is None:
            new_pushes = PushState(
                countdown=jnp.full((n,), plan.pushes.interval[1], jnp.int32),
                pushed=jnp.zeros((n,), bool),
            )
    return state.replace(latency=new_latency, pushes=new_pushes)


def _split(rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    keys = jax.vmap(jax.random.split)(rng)
    return keys[:, 0], keys[:, 1]


def _pick(mask: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """``a`` for the worlds in ``mask``, ``b`` elsewhere: a scalar choice per world."""
    return jax.vmap(jnp.where)(mask, a, b)


def _randint(keys: jax.Array, salt: int, low: int, high: int) -> jax.Array:
    """``(num_envs,)`` int32 uniform in ``[low, high]``, one per raw key."""
    draw = lambda k: jax.random.randint(jax.random.fold_in(k, salt), (), low, high + 1)  # noqa: E731
    return jax.vmap(draw)(keys).astype(jnp.int32)


def restart(
    state: RunnerState, done: jax.Array, latency: Latency | None, plan: PushPlan | None
) -> RunnerState:
    """Starts the events of a new episode for the worlds in ``(num_envs,)`` ``done``.

    Their queues are filled with their (restored) ``ctrl``, a delay and the steps to
    the first push are drawn from their streams, which advance; other worlds are
    untouched. A configuration that draws nothing (a fixed delay alone) leaves the
    streams as they are.
    """
    if state.latency is None and state.pushes is None:
        return state
    draws = (latency is not None and latency.random) or plan is not None
    keys = None
    if draws:
        rng, keys = _split(state.rng)
        state = state.replace(rng=_pick(done, rng, state.rng))
    if state.latency is not None:
        lat = state.latency
        queue = jnp.broadcast_to(state.ctrl[:, None, :].astype(lat.queue.dtype), lat.queue.shape)
        delay = (
            _randint(keys, _DELAY, latency.low, latency.high)
            if latency.random
            else jnp.full_like(lat.delay, latency.low)
        )
        state = state.replace(
            latency=LatencyState(
                queue=_pick(done, queue, lat.queue), delay=_pick(done, delay, lat.delay)
            )
        )
    if state.pushes is not None:
        lo, hi = plan.pushes.interval
        p = state.pushes
        state = state.replace(
            pushes=PushState(
                countdown=_pick(done, _randint(keys, _INTERVAL, lo, hi), p.countdown),
                pushed=p.pushed & ~done,
            )
        )
    return state


def before_physics(state: RunnerState, plan: PushPlan | None) -> tuple[RunnerState, jax.Array]:
    """The events of one step, before the solver: returns ``(state, ctrl)``.

    The step's command (``state.ctrl``) enters the queue and ``ctrl`` is the one
    ``delay`` steps old; worlds whose push countdown reaches 0 get their kick added
    to ``data.qvel`` and draw their next interval. Without events: ``state`` and
    ``state.ctrl`` as they are.
    """
    ctrl = state.ctrl
    if state.latency is not None:
        lat = state.latency
        queue = jnp.concatenate([ctrl[:, None].astype(lat.queue.dtype), lat.queue[:, :-1]], axis=1)
        ctrl = jax.vmap(lambda q, k: q[k])(queue, lat.delay)
        state = state.replace(latency=lat.replace(queue=queue))
    if state.pushes is not None:
        if plan is None:
            raise ValueError("the state has push timers but no pushes were given: pass pushes=")
        state = _push(state, plan)
    return state, ctrl


def _push(state: RunnerState, plan: PushPlan) -> RunnerState:
    p, data = state.pushes, state.data
    countdown = p.countdown - 1
    due = countdown <= 0
    rng, keys = _split(state.rng)
    dtype = data.qvel.dtype
    low = jnp.asarray([v[0] for v in plan.pushes.velocity], dtype)
    high = jnp.asarray([v[1] for v in plan.pushes.velocity], dtype)

    def kick(k):
        return jax.random.uniform(jax.random.fold_in(k, _KICK), low.shape, dtype, low, high)

    kicks = jnp.where(due[:, None], jax.vmap(kick)(keys), 0).astype(dtype)
    start = plan.dofadr
    qvel = data.qvel.at[:, start : start + low.shape[0]].add(kicks)
    lo, hi = plan.pushes.interval
    return state.replace(
        data=data.replace(qvel=qvel),
        rng=_pick(due, rng, state.rng),  # only the worlds that pushed advance
        pushes=PushState(
            countdown=jnp.where(due, _randint(keys, _INTERVAL, lo, hi), countdown), pushed=due
        ),
    )


# --- checkpoint headers -------------------------------------------------------------------


def latency_to_json(latency: Latency | None) -> dict[str, int] | None:
    return None if latency is None else {"low": latency.low, "high": latency.high}


def latency_from_json(fields: dict[str, int] | None) -> Latency | None:
    return None if fields is None else Latency(fields["low"], fields["high"])
