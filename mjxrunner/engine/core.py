"""Pure, jit-able functions over :class:`RunnerState`.

Everything the runner does is here, so a training loop can put it inside its own
``jit`` or ``lax.scan``. The model is an argument, not part of the state: its shared
leaves are broadcast by ``vmap`` axes derived from :func:`world_axes`, so the same
code runs a model whose parameters are shared or given per world.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx

from mjxrunner.engine import backend, backends, deprecated, events, guards, health
from mjxrunner.engine.state import RunnerState
from mjxrunner.engine.worlds import num_worlds, select_worlds, tree_of

Policy = Callable[[RunnerState, jax.Array], jax.Array]


DEFAULT_GUARDS = guards.standard()
"""The guards of a state built without naming any: instability (truncate), Warp
overflow (raise), non-finite controls (truncate)."""


def init(
    data: mjx.Data,
    num_envs: int,
    key: jax.Array,
    nu: int,
    guards: Sequence[guards.Guard] = DEFAULT_GUARDS,
) -> RunnerState:
    """Copies single-world ``data`` into ``num_envs`` worlds with fresh counters.

    Args:
      data: unbatched ``mjx.Data`` (``make_data`` / ``put_data`` output).
      num_envs: number of worlds.
      key: a PRNG key (typed or raw), split into one key per world.
      nu: number of actuators.
      guards: the guards the state keeps flags and counts for (their names matter).

    Returns:
      The batched state, controls taken from ``data.ctrl``.
    """
    # vmap broadcasts every per-world leaf; MJX-Warp's contact pools and counters
    # are declared non-mapped by MJX and stay pooled, as the world-axis rule expects.
    batched = jax.vmap(lambda _: data)(jnp.arange(num_envs))
    return RunnerState(
        data=batched,
        ctrl=jnp.repeat(data.ctrl[None, :nu], num_envs, axis=0),
        episode_length=jnp.zeros((num_envs,), jnp.int32),
        terminated=jnp.zeros((num_envs,), bool),
        truncated=jnp.zeros((num_envs,), bool),
        rng=init_keys(key, num_envs),
        overflow=jnp.zeros((num_envs,), jnp.int32),
        tripped={g.name: jnp.zeros((num_envs,), bool) for g in guards},
        health=health.HealthCounts.zeros(num_envs, [g.name for g in guards]),
    )


def init_keys(key: jax.Array, num_envs: int) -> jax.Array:
    """``(num_envs, 2)`` uint32: world ``i``'s stream starts at ``split(key, num_envs)[i]``."""
    return raw_keys(jax.random.split(key, num_envs))


def split_streams(rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(next keys, draw keys)``, each ``(num_envs, 2)`` raw: one split per world's
    stream, so each world's draws depend on its own stream only."""
    keys = jax.vmap(jax.random.split)(rng)
    return keys[:, 0], keys[:, 1]


def raw_keys(keys: jax.Array) -> jax.Array:
    """Raw ``uint32`` key data, whichever kind of key ``split`` returned."""
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(keys)
    return keys


def capacity_bits() -> int:
    """See :func:`mjxrunner.engine.backend.capacity_bits`."""
    return backend.capacity_bits()


NO_CONTACT_MARGIN = -float(mujoco.mjMAXVAL)
"""The contact margin of a world stepped with ``collide=False``: every contact's
distance exceeds it, so none is active."""


def without_contacts(model: mjx.Model, collide: jax.Array) -> mjx.Model:
    """``model`` whose worlds with ``collide`` False ignore every contact.

    ``opt.disableflags`` cannot do it cheaply: it is a static field of
    ``mjx.Model`` (a change recompiles the step), and impl "jax" sizes the
    contacts when the data is made, colliding whatever the flag says later. A
    contact enters the solver only when its distance is below its margin, so a
    margin of ``-mjMAXVAL`` switches it off by value: per world, no recompile.
    Impl "jax" still runs the collision functions (their contacts stay inactive);
    impl "warp"'s broadphase drops every pair.

    Args:
      model: ``mjx.Model``, leaves shared or per world.
      collide: ``(num_envs,)`` bool.
    """
    n = collide.shape[0]
    changes = {}
    for path in ("geom_margin", "pair_margin"):
        margin = getattr(model, path)
        if margin.shape[-1] == 0:
            continue
        if margin.ndim == 1:  # shared: give it the world axis
            margin = jnp.broadcast_to(margin, (n, *margin.shape))
        off = jnp.asarray(NO_CONTACT_MARGIN, margin.dtype)
        changes[path] = jnp.where(collide[:, None], margin, off)
    return model.tree_replace(changes) if changes else model


def physics_step(
    model: mjx.Model,
    data: mjx.Data,
    ctrl: jax.Array,
    dt: jax.Array | None,
    substeps: int,
    collide: jax.Array | None = None,
) -> tuple[mjx.Data, jax.Array]:
    """Advances batched ``data`` by ``dt`` in ``substeps`` solver steps.

    Args:
      model: ``mjx.Model``, leaves shared or per world.
      data: batched ``mjx.Data``.
      ctrl: ``(num_envs, nu)`` controls held for the whole ``dt``.
      dt: scalar or ``(num_envs,)`` step length; None keeps the model's timestep, so
        the step lasts ``substeps * timestep``.
      substeps: solver calls per step, each of ``dt / substeps``.
      collide: None (contacts as the model says), or ``(num_envs,)`` bool: worlds
        with False ignore every contact in this step (see :func:`without_contacts`).

    Returns:
      The advanced batched data and the ``(num_envs,)`` int32 bitmask of Warp
      capacities that overflowed during this step (zeros for impl "jax").
    """
    model = tree_of(model)
    num_envs = ctrl.shape[0]
    physics = backends.of(data)
    data = physics.clear_overflow(data)  # Warp ORs flags in: report this step only
    data = data.replace(ctrl=ctrl.astype(data.ctrl.dtype))
    if dt is not None:
        timestep = jnp.broadcast_to(dt / substeps, (num_envs,))
        model = model.tree_replace({"opt.timestep": timestep.astype(model.opt.timestep.dtype)})
    if collide is not None:
        model = without_contacts(model, collide)
    data = physics.step(model, data, substeps)
    return data, physics.overflow_bits(data)


contact_count = backend.contact_count


def step(
    model: mjx.Model,
    state: RunnerState,
    dt: jax.Array | None = None,
    substeps: int = 1,
    guards: Sequence[guards.Guard] = DEFAULT_GUARDS,
    pushes: events.PushPlan | None = None,
    collide: jax.Array | None = None,
) -> RunnerState:
    """One step of every world with the controls in ``state.ctrl``, then the guards.

    Args:
      model: ``mjx.Model`` (or :class:`~mjxrunner.engine.worlds.FlatModel`).
      state: the current state.
      dt: step length; None means ``substeps * timestep``.
      substeps: solver calls per step (static).
      guards: the guards to run after the physics (static; ``()``: none).
      pushes: the random pushes (static; with ``state.pushes``); see
        :mod:`mjxrunner.engine.events`. Action latency needs no argument: a state with a
        ``latency`` queue sends its delayed commands to the physics.
      collide: None, or ``(num_envs,)`` bool: worlds with False ignore contacts.

    Returns:
      The new state: ``overflow`` holds this step's Warp overflow bits, ``tripped``
      each guard's flags, ``health`` counts each new trip, and worlds of guards with
      policy ``"truncate"`` are ``truncated``. Other flags are left as they are: a
      task or the caller decides termination.
    """
    state, ctrl = events.before_physics(state, pushes)
    data, overflow = physics_step(model, state.data, ctrl, dt, substeps, collide)
    return after_physics(state, data, overflow, guards)


def after_physics(
    state: RunnerState, data: mjx.Data, overflow: jax.Array, guards: Sequence[guards.Guard]
) -> RunnerState:
    """``state`` advanced to the stepped ``data``: the episode counters, this step's
    overflow bits, and the guards' flags, counts and truncations."""
    tripped, new, truncate = _guards.after_step(guards, data, state.tripped)
    return state.replace(
        data=data,
        episode_length=state.episode_length + 1,
        overflow=overflow,
        truncated=state.truncated | truncate,
        tripped=tripped,
        health=health.after_step(state.health, new),
    )


_guards = guards


def parse_mask(mask: Any, num_envs: int) -> tuple[jax.Array, jax.Array]:
    """Splits a reset mask into ``(done (num_envs,), restore_shared scalar)``.

    ``None`` selects everything; ``(num_envs,)`` selects worlds and never shared
    leaves; ``(num_envs + 1,)`` selects worlds and, with its last entry, the shared
    leaves. The shape is static under ``jit``.
    """
    if mask is None:
        return jnp.ones((num_envs,), bool), jnp.asarray(True)
    mask = jnp.asarray(mask)
    if mask.dtype != bool or mask.ndim != 1 or mask.shape[0] not in (num_envs, num_envs + 1):
        raise ValueError(
            f"reset mask must be bool of shape ({num_envs},) or ({num_envs + 1},), "
            f"got {mask.dtype} {mask.shape}"
        )
    if mask.shape[0] == num_envs:
        return mask, jnp.asarray(False)
    return mask[:num_envs], mask[num_envs]


def restore(tree: Any, default: Any, mask: Any = None) -> Any:
    """Restores ``tree`` from ``default`` for the worlds (and shared leaves) in ``mask``.

    With ``mask=None`` the whole default is returned, shape signature included (a
    parameter promoted since the snapshot becomes shared again).
    """
    if mask is None:
        return default
    n = num_worlds(tree)
    if n is None:
        raise ValueError("tree has no world-indexed leaf to restore")
    done, shared = parse_mask(mask, n)
    return select_worlds(done, default, tree, shared)


def reset(state: RunnerState, default: RunnerState, mask: Any = None) -> RunnerState:
    """Restores ``state`` from the ``default`` snapshot, keeping each world's RNG.

    Args:
      state: the current state.
      default: the snapshot to restore from (counters and flags cleared).
      mask: None (everything), ``(num_envs,)`` bool (those worlds' world-indexed
        leaves) or ``(num_envs + 1,)`` bool (the last entry adds shared leaves).

    Returns:
      The restored state. The RNG is never rewound: restored worlds keep drawing
      new numbers.
    """
    return restore(state, kept_by_reset(state, default), mask)


def reset_selected(
    state: RunnerState, default: RunnerState, done: jax.Array, shared: jax.Array
) -> RunnerState:
    """:func:`reset` with the mask already split by :func:`parse_mask`."""
    return select_worlds(done, kept_by_reset(state, default), state, shared)


def kept_by_reset(state: RunnerState, default: RunnerState) -> RunnerState:
    """``default`` with what a reset never restores taken from ``state``: the RNG
    and the health counters. Guard flags are restored cleared, whatever the
    snapshot holds (a snapshot built by hand may have none)."""
    tripped = {k: jnp.zeros_like(v) for k, v in state.tripped.items()}
    return default.replace(rng=state.rng, health=state.health, tripped=tripped)


def qpos_qvel(state: RunnerState) -> tuple[jax.Array, jax.Array]:
    """The default rollout record: ``(qpos (num_envs, nq), qvel (num_envs, nv))``."""
    return state.data.qpos, state.data.qvel


def rollout(
    model: mjx.Model,
    state: RunnerState,
    actions_or_policy: jax.Array | Policy,
    n_steps: int,
    dt: jax.Array | None = None,
    substeps: int = 1,
    record: Callable[[RunnerState], Any] = qpos_qvel,
    guards: Sequence[guards.Guard] = DEFAULT_GUARDS,
    pushes: events.PushPlan | None = None,
    collide: jax.Array | None = None,
) -> tuple[RunnerState, Any]:
    """Runs ``n_steps`` steps on device in one ``lax.scan``.

    Args:
      model: ``mjx.Model``.
      state: the starting state.
      actions_or_policy: ``(n_steps, num_envs, nu)`` controls, or a function
        ``policy(state, keys) -> (num_envs, nu)`` called before every step with one
        fresh raw key per world (``(num_envs, 2)`` uint32) split from each world's
        RNG stream.
      n_steps: number of steps (static).
      dt: as in :func:`step`.
      substeps: as in :func:`step` (static).
      record: what to keep of each post-step state; stacked along a leading
        ``n_steps`` axis.
      guards: as in :func:`step` (static).
      pushes: as in :func:`step` (static).
      collide: as in :func:`step`, for every step.

    Returns:
      ``(final_state, trajectory)``; ``final_state.overflow`` ORs the overflow bits
      of every step of the rollout.
    """
    if callable(actions_or_policy):
        policy = actions_or_policy

        def body(s, _):
            rng, draw = split_streams(s.rng)
            s = s.replace(rng=rng, ctrl=policy(s, draw).astype(s.ctrl.dtype))
            s = _step_or(model, s, dt, substeps, guards, pushes, collide)
            return s, record(s)

        return jax.lax.scan(body, _no_overflow(state), None, length=n_steps)

    actions = jnp.asarray(actions_or_policy)
    expected = (n_steps, *state.ctrl.shape)
    if actions.shape != expected:
        raise ValueError(f"actions must have shape {expected}, got {actions.shape}")

    def body(s, u):
        s = s.replace(ctrl=u.astype(s.ctrl.dtype))
        s = _step_or(model, s, dt, substeps, guards, pushes, collide)
        return s, record(s)

    return jax.lax.scan(body, _no_overflow(state), actions)


def _no_overflow(state: RunnerState) -> RunnerState:
    return state.replace(overflow=jnp.zeros_like(state.overflow))


def _step_or(model, state, dt, substeps, guards, pushes=None, collide=None):
    """A step whose overflow bits accumulate, so a rollout reports any overflow."""
    new = step(model, state, dt, substeps, guards=guards, pushes=pushes, collide=collide)
    return new.replace(overflow=new.overflow | state.overflow)


# MJX's jitted step and forward pass moved to the MJX physics, which owns them
__getattr__ = deprecated.module_getattr(
    __name__,
    {name: (f"it is mjxrunner.engine.backends.mjx.{name}", getattr(backends.mjx, name))
     for name in ("MJX_STEP", "MJX_FORWARD")},
)  # fmt: skip
