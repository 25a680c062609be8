"""Pure, jit-able functions over :class:`RunnerState`.

Everything the runner does is here, so a training loop can put it inside its own
``jit`` or ``lax.scan``. The model is an argument, not part of the state: its shared
leaves are broadcast by ``vmap`` axes derived from :func:`world_axes`, so the same
code runs a model whose parameters are shared or given per world.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from mujoco import mjx

from mjxrunner.state import RunnerState
from mjxrunner.worlds import num_worlds, select_worlds, world_axes

Policy = Callable[[RunnerState, jax.Array], jax.Array]


def init(data: mjx.Data, num_envs: int, key: jax.Array, nu: int) -> RunnerState:
    """Copies single-world ``data`` into ``num_envs`` worlds with fresh counters.

    Args:
      data: unbatched ``mjx.Data`` (``make_data`` / ``put_data`` output).
      num_envs: number of worlds.
      key: a PRNG key (typed or raw), split into one key per world.
      nu: number of actuators.

    Returns:
      The batched state, controls taken from ``data.ctrl``.
    """
    batched = jax.tree.map(lambda x: jnp.repeat(x[None], num_envs, axis=0), data)
    return RunnerState(
        data=batched,
        ctrl=jnp.repeat(data.ctrl[None, :nu], num_envs, axis=0),
        episode_length=jnp.zeros((num_envs,), jnp.int32),
        terminated=jnp.zeros((num_envs,), bool),
        truncated=jnp.zeros((num_envs,), bool),
        rng=_raw_keys(jax.random.split(key, num_envs)),
    )


def _raw_keys(keys: jax.Array) -> jax.Array:
    """Raw ``uint32`` key data, whichever kind of key ``split`` returned."""
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(keys)
    return keys


def physics_step(
    model: mjx.Model, data: mjx.Data, ctrl: jax.Array, dt: jax.Array | None, substeps: int
) -> mjx.Data:
    """Advances batched ``data`` by ``dt`` in ``substeps`` solver steps.

    Args:
      model: ``mjx.Model``, leaves shared or per world.
      data: batched ``mjx.Data``.
      ctrl: ``(num_envs, nu)`` controls held for the whole ``dt``.
      dt: scalar or ``(num_envs,)`` step length; None keeps the model's timestep, so
        the step lasts ``substeps * timestep``.
      substeps: solver calls per step, each of ``dt / substeps``.

    Returns:
      The advanced batched data.
    """

    def one_world(m, d, u, dt):
        if dt is not None:
            m = m.tree_replace({"opt.timestep": jnp.asarray(dt / substeps, m.opt.timestep.dtype)})
        d = d.replace(ctrl=u.astype(d.ctrl.dtype))
        d, _ = jax.lax.scan(lambda d, _: (mjx.step(m, d), None), d, None, length=substeps)
        return d

    dt_axis = None if dt is None or jnp.ndim(dt) == 0 else 0
    return jax.vmap(one_world, in_axes=(world_axes(model), 0, 0, dt_axis))(model, data, ctrl, dt)


def step(
    model: mjx.Model,
    state: RunnerState,
    dt: jax.Array | None = None,
    substeps: int = 1,
) -> RunnerState:
    """One step of every world with the controls in ``state.ctrl``.

    Flags are left as they are: a task or the caller decides termination.
    """
    data = physics_step(model, state.data, state.ctrl, dt, substeps)
    return state.replace(data=data, episode_length=state.episode_length + 1)


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
    return restore(state, default, mask).replace(rng=state.rng)


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

    Returns:
      ``(final_state, trajectory)``.
    """
    if callable(actions_or_policy):
        policy = actions_or_policy

        def body(s, _):
            keys = jax.vmap(jax.random.split)(s.rng)
            s = s.replace(rng=keys[:, 0], ctrl=policy(s, keys[:, 1]).astype(s.ctrl.dtype))
            s = step(model, s, dt, substeps)
            return s, record(s)

        return jax.lax.scan(body, state, None, length=n_steps)

    actions = jnp.asarray(actions_or_policy)
    expected = (n_steps, *state.ctrl.shape)
    if actions.shape != expected:
        raise ValueError(f"actions must have shape {expected}, got {actions.shape}")

    def body(s, u):
        s = step(model, s.replace(ctrl=u.astype(s.ctrl.dtype)), dt, substeps)
        return s, record(s)

    return jax.lax.scan(body, state, actions)
