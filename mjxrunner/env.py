"""The functional RL env: ``reset(key) -> state``, ``step(state, action) -> state``.

An :class:`Env` binds a :class:`~mjxrunner.tasks.Task` to a device model and a
number of worlds. Its functions are pure and jit-able, so a whole training loop can
be one ``jit`` of ``lax.scan``s; the task's single-world functions are ``vmap``ped
over the world axis, and stepping, world selection and restoring reuse
:func:`mjxrunner.core.step`, :func:`mjxrunner.core.reset` and
:func:`mjxrunner.worlds.select_worlds`.

Autoreset modes, with Gymnasium's meaning:

* ``"next_step"``: a world whose step ended an episode (``terminated`` or
  ``truncated``) is restarted by the NEXT call to :func:`step`, which ignores its
  action and returns the reset observation, reward 0 and both flags False.
* ``"same_step"``: the world is restarted inside the step that ended the episode.
  ``obs`` is then the reset observation; the terminal observation is in
  ``final_obs`` and ``final_mask`` says which worlds restarted. The flags report
  the episode that just ended.
* ``"disabled"``: no restart; call :func:`reset_worlds` yourself. Stepping an ended
  world continues its physics, and its episode is counted only once.

Fresh starts: each restart draws a new start for the world from the world's own PRNG
stream (``RunnerState.rng``): world ``i``'s stream begins at
``jax.random.split(key, num_envs)[i]`` for the ``key`` given to :func:`reset`, and
every restart splits it into ``(next key, draw key)`` and calls
``task.initial_state(model, start, draw_key)``, followed by ``mjx.forward`` unless
the task sets ``forward_on_reset=False``. Only restarted worlds advance their
stream, so a world's sequence of starts does not depend on the other worlds. The
restart is computed under a ``lax.cond`` and skipped when no world ends in a step;
when one does, it costs one ``initial_state`` (and forward) for every world
(``vmap`` computes all, selection keeps the ended ones). A cached pool
(:meth:`Env.with_reset_pool`) replaces that by a gather of precomputed starts:
cheaper per step when the start needs a forward pass, but episodes then begin from
only ``pool_size`` distinct states, drawn once, with the model the pool was made
with.

Numerical blow-ups: a world whose ``qpos`` or ``qvel`` turns NaN/Inf is flagged in
``nonfinite`` and ``truncated`` (it cannot go on), so autoreset restarts it.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner import backend, checks, core
from mjxrunner import tasks as tasks_
from mjxrunner.models import load_any
from mjxrunner.state import RunnerState
from mjxrunner.tasks.base import Task, action_bounds
from mjxrunner.worlds import pytree_dataclass, static_field, world_axes, world_field, world_mask

AUTORESET_MODES = ("next_step", "same_step", "disabled")
NEXT_STEP, SAME_STEP, DISABLED = range(3)  # codes of the modes in ``Env.mode``


@pytree_dataclass
class EpisodeStats:
    """Per-world episode statistics, kept on device and updated in the step.

    Attributes:
      episode_return: ``(num_envs,)`` float, return of the running episode so far.
      last_return: ``(num_envs,)`` float, return of the world's last completed
        episode (0 before the first).
      last_length: ``(num_envs,)`` int32, its length in steps.
      completed: ``(num_envs,)`` int32, episodes completed since :func:`reset`.
      return_sum: ``(num_envs,)`` float, sum of the returns of those episodes.
      length_sum: ``(num_envs,)`` int32, sum of their lengths.

    The running episode's length is ``RunnerState.episode_length``. Differences of
    ``completed``/``return_sum``/``length_sum`` between two reads give the mean over
    every episode that ended in between, with one host transfer per read.
    """

    episode_return: jax.Array = world_field(0)
    last_return: jax.Array = world_field(0)
    last_length: jax.Array = world_field(0)
    completed: jax.Array = world_field(0)
    return_sum: jax.Array = world_field(0)
    length_sum: jax.Array = world_field(0)


@pytree_dataclass
class EnvState:
    """State of ``num_envs`` worlds of a task, after a reset or a step.

    Attributes:
      runner: the :class:`RunnerState`: batched data, controls (the clipped last
        action), ``episode_length``, ``terminated``, ``truncated`` and per-world raw
        ``uint32`` keys ``(num_envs, 2)``.
      obs: ``(num_envs, obs_dim)`` observation to act on next.
      reward: ``(num_envs,)`` reward of the last step.
      final_obs: ``(num_envs, obs_dim)`` observation at the end of the last step,
        before any restart. Equal to ``obs`` except where ``final_mask``.
      final_mask: ``(num_envs,)`` bool, worlds restarted in the same step
        (``"same_step"`` mode only); their terminal observation is ``final_obs``.
      nonfinite: ``(num_envs,)`` bool, worlds whose state became NaN/Inf in the last
        step (they are also ``truncated``).
      stats: per-world :class:`EpisodeStats`.
    """

    runner: RunnerState
    obs: jax.Array = world_field(1)
    reward: jax.Array = world_field(0)
    final_obs: jax.Array = world_field(1)
    final_mask: jax.Array = world_field(0)
    nonfinite: jax.Array = world_field(0)
    stats: EpisodeStats

    @property
    def terminated(self) -> jax.Array:
        """``(num_envs,)`` bool: the last step reached a terminal state."""
        return self.runner.terminated

    @property
    def truncated(self) -> jax.Array:
        """``(num_envs,)`` bool: the last step hit the time limit (or blew up)."""
        return self.runner.truncated

    @property
    def done(self) -> jax.Array:
        """``(num_envs,)`` bool: ``terminated | truncated``."""
        return self.runner.terminated | self.runner.truncated

    @property
    def episode_length(self) -> jax.Array:
        """``(num_envs,)`` int32, steps of the running episode."""
        return self.runner.episode_length

    @property
    def num_envs(self) -> int:
        return self.obs.shape[0]


@pytree_dataclass
class Env:
    """A task on ``num_envs`` worlds; build it with :func:`make`.

    A pytree: the arrays are children (so an ``Env`` can be a traced argument of
    ``jit``), the task and the number of worlds are static. The autoreset mode is
    an array, not a static setting: one compiled step serves all three modes, so
    switching modes (training with ``"same_step"``, evaluating with ``"disabled"``)
    never recompiles.

    Attributes:
      task: the :class:`Task` (static).
      num_envs: number of worlds (static).
      mode: ``()`` int32 code of the autoreset mode (index into
        ``AUTORESET_MODES``); read it as :attr:`autoreset`.
      model: device ``mjx.Model``; leaves shared or with a leading world axis.
      start: one world's default start (the task's keyframe, forwarded), unbatched.
      low: ``(nu,)`` lower action bounds (``-inf`` where unlimited).
      high: ``(nu,)`` upper action bounds.
      pool: None, or cached starts with a leading ``(pool_size,)`` axis.
    """

    task: Task = static_field()
    num_envs: int = static_field()
    mode: jax.Array
    model: mjx.Model
    start: mjx.Data
    low: jax.Array
    high: jax.Array
    pool: mjx.Data | None = None

    @property
    def autoreset(self) -> str:
        """``"next_step"``, ``"same_step"`` or ``"disabled"`` (outside ``jit`` only)."""
        return AUTORESET_MODES[int(self.mode)]

    def with_autoreset(self, autoreset: str) -> Env:
        """A copy in another autoreset mode (same compiled functions)."""
        # Placed like the current mode: a differently placed scalar would recompile.
        return self.replace(
            mode=jax.device_put(np.int32(_mode_code(autoreset)), self.mode.sharding)
        )

    @property
    def action_size(self) -> int:
        return self.low.shape[0]

    @property
    def observation_size(self) -> int:
        shape = jax.eval_shape(self.task.observation, self.model, self.start).shape
        return shape[0]

    @property
    def pool_size(self) -> int:
        """Number of cached starts (0: every restart draws a fresh one)."""
        return 0 if self.pool is None else self.pool.qpos.shape[0]

    def reset(self, key: jax.Array) -> EnvState:
        """See :func:`reset`."""
        return reset(self, key)

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        """See :func:`step`."""
        return step(self, state, action)

    def reset_worlds(self, state: EnvState, mask: jax.Array) -> EnvState:
        """See :func:`reset_worlds`."""
        return reset_worlds(self, state, mask)

    def with_reset_pool(self, size: int, key: jax.Array) -> Env:
        """A copy whose restarts gather from ``size`` starts drawn now from ``key``.

        Trade-off: a restart costs a gather instead of ``initial_state`` plus
        ``mjx.forward`` for every world, but episodes begin from only ``size``
        distinct states (fixed until the next call), computed with the current
        model, which must have no per-world leaves. ``size=0`` turns the pool off.
        """
        size = checks.count(size, "size", minimum=0)
        if size == 0:
            return self.replace(pool=None)
        if any(jax.tree.leaves(world_mask(self.model))):
            raise ValueError("a reset pool needs a model without per-world parameters")
        keys = jax.random.key_data(jax.random.split(key, size))
        pool = jax.jit(_draw_starts, static_argnums=3)(self.model, self.start, keys, self.task)
        return self.replace(pool=pool)


def _mode_code(autoreset: Any) -> int:
    if not isinstance(autoreset, str):
        raise TypeError(f"autoreset must be a str, got {type(autoreset).__name__}")
    if autoreset not in AUTORESET_MODES:
        raise ValueError(f"autoreset must be one of {AUTORESET_MODES}, got {autoreset!r}")
    return AUTORESET_MODES.index(autoreset)


def make(
    task: Task | str,
    num_envs: int,
    *,
    autoreset: str = "next_step",
    impl: str = "jax",
    device: Any = None,
    model: mujoco.MjModel | str | os.PathLike | None = None,
    reset_pool: int = 0,
    pool_seed: int = 0,
) -> Env:
    """Builds an :class:`Env`: loads the scene, puts it on device, forwards the start.

    Args:
      task: a :class:`Task` or a registered task name (``mjxrunner.tasks.list()``).
      num_envs: number of worlds, ``>= 1``.
      autoreset: ``"next_step"``, ``"same_step"`` or ``"disabled"``.
      impl: MJX implementation; ``"jax"`` (``"warp"`` is not supported yet, as in
        :class:`~mjxrunner.MultiEnvRunner`).
      device: None (JAX's default), a ``jax.Device`` or a platform name.
      model: the scene to use instead of ``task.model`` (an ``MjModel``, a name, a
        path or MJCF text), e.g. an edited copy with the same joints.
      reset_pool: if > 0, restarts draw from this many cached starts
        (see :meth:`Env.with_reset_pool`).
      pool_seed: seed of the cached starts.

    Raises:
      TypeError, ValueError: an argument of the wrong kind or out of range.
    """
    if isinstance(task, str):
        task = tasks_.get(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be a mjxrunner.tasks.Task or a name, got {type(task)}")
    num_envs = checks.count(num_envs, "num_envs")
    mode = _mode_code(autoreset)
    impl = backend.check_impl(impl)
    if impl == "warp":
        raise NotImplementedError("impl 'warp' is not supported by the env yet")
    reset_pool = checks.count(reset_pool, "reset_pool", minimum=0)
    pool_seed = checks.count(pool_seed, "pool_seed", minimum=0)
    device = backend.resolve_device(device)

    m = load_any(task.model if model is None else model)
    backend.check_supported(m, impl)
    if m.nu == 0:
        raise ValueError(f"task {task.name!r}: the model has no actuators to act with")
    d = mujoco.MjData(m)
    if task.keyframe is not None:
        key_id = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, task.keyframe)
        if key_id < 0:
            names = [m.key(k).name for k in range(m.nkey)]
            raise ValueError(f"task {task.name!r}: no keyframe {task.keyframe!r}; has {names}")
        mujoco.mj_resetDataKeyframe(m, d, key_id)
    mujoco.mj_forward(m, d)
    low, high = action_bounds(m)
    dtype = backend.float_dtype()
    env = Env(
        task=task,
        num_envs=num_envs,
        mode=jax.device_put(np.int32(mode), device),
        model=backend.put_model(m, impl, device),
        start=backend.put_data(m, d, impl, device),
        low=jax.device_put(low.astype(dtype), device),
        high=jax.device_put(high.astype(dtype), device),
    )
    if reset_pool:
        env = env.with_reset_pool(reset_pool, jax.random.key(pool_seed))
    return env


# --- restarting worlds -------------------------------------------------------------


def _start_one(model: mjx.Model, start: mjx.Data, raw_key: jax.Array, task: Task) -> mjx.Data:
    """One world's fresh start: the task's randomization, then (if the task asks for
    it) a forward pass so that derived quantities match the new state."""
    data = task.initial_state(model, start, jax.random.wrap_key_data(raw_key))
    return mjx.forward(model, data) if task.forward_on_reset else data


def _draw_starts(model: mjx.Model, start: mjx.Data, raw_keys: jax.Array, task: Task) -> mjx.Data:
    """Fresh starts for a batch of raw keys ``(n, 2)``; model leaves shared or per world."""
    return jax.vmap(_start_one, in_axes=(world_axes(model), None, 0, None))(
        model, start, raw_keys, task
    )


def _split_streams(rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(next keys, draw keys)``, each ``(num_envs, 2)`` raw, one split per world."""

    def split(raw):
        keys = jax.random.split(jax.random.wrap_key_data(raw))
        return jax.random.key_data(keys[0]), jax.random.key_data(keys[1])

    return jax.vmap(split)(rng)


def _pick(mask: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """``a`` for the worlds in ``mask``, ``b`` elsewhere; a scalar choice per world."""
    return jax.vmap(jnp.where)(mask, a, b)


def _observe(env: Env, data: mjx.Data) -> jax.Array:
    return jax.vmap(env.task.observation, in_axes=(world_axes(env.model), 0))(env.model, data)


def _fresh(env: Env, runner: RunnerState) -> tuple[RunnerState, jax.Array]:
    """Fresh starts for every world, as a cleared ``RunnerState`` and observations."""
    rng, draw = _split_streams(runner.rng)
    if env.pool is None:
        data = _draw_starts(env.model, env.start, draw, env.task)
    else:
        size = env.pool.qpos.shape[0]
        index = jax.vmap(lambda k: jax.random.randint(jax.random.wrap_key_data(k), (), 0, size))(
            draw
        )
        data = jax.tree.map(lambda leaf: leaf[index], env.pool)
    # core.init knows every field a fresh world has (counters, flags, ...): take its
    # cleared values and put the new data and keys in.
    cleared = core.init(env.start, env.num_envs, jax.random.key(0), env.action_size)
    fresh = cleared.replace(data=data, rng=rng)
    return fresh, _observe(env, data)


def _restart(
    env: Env, runner: RunnerState, obs: jax.Array, mask: jax.Array
) -> tuple[RunnerState, jax.Array]:
    """Restarts the worlds in ``mask``: fresh data, cleared counters, advanced keys.

    Skipped (``lax.cond``) when ``mask`` selects no world.
    """

    def restart(runner, obs):
        fresh, fresh_obs = _fresh(env, runner)
        out = core.reset(runner, fresh, mask)  # keeps every world's key ...
        rng = _pick(mask, fresh.rng, runner.rng)  # ... then advances the restarted ones
        return out.replace(rng=rng), _pick(mask, fresh_obs, obs)

    return jax.lax.cond(jnp.any(mask), restart, lambda r, o: (r, o), runner, obs)


# --- the functional API --------------------------------------------------------------


def _zeros_stats(n: int, dtype: Any) -> EpisodeStats:
    zf, zi = jnp.zeros((n,), dtype), jnp.zeros((n,), jnp.int32)
    return EpisodeStats(
        episode_return=zf,
        last_return=zf,
        last_length=zi,
        completed=zi,
        return_sum=zf,
        length_sum=zi,
    )


def reset(env: Env, key: jax.Array) -> EnvState:
    """Starts every world afresh; statistics cleared.

    Args:
      env: the env.
      key: a PRNG key (typed or raw); world ``i``'s stream begins at
        ``jax.random.split(key, num_envs)[i]``.

    Returns:
      The first state: ``obs`` of the fresh starts, reward 0, flags False.
    """
    runner = core.init(env.start, env.num_envs, key, env.action_size)
    all_worlds = jnp.ones((env.num_envs,), bool)
    fresh, obs = _fresh(env, runner)
    runner = core.reset(runner, fresh, all_worlds).replace(rng=fresh.rng)
    dtype = runner.data.qpos.dtype
    return EnvState(
        runner=runner,
        obs=obs,
        reward=jnp.zeros((env.num_envs,), dtype),
        final_obs=obs,
        final_mask=jnp.zeros((env.num_envs,), bool),
        nonfinite=jnp.zeros((env.num_envs,), bool),
        stats=_zeros_stats(env.num_envs, dtype),
    )


def _check_action(env: Env, action: Any) -> jax.Array:
    action = jnp.asarray(action)
    if action.shape != (env.num_envs, env.action_size):
        raise ValueError(
            f"action must have shape (num_envs, nu) = {(env.num_envs, env.action_size)}, "
            f"got {action.shape}"
        )
    if not (
        jnp.issubdtype(action.dtype, jnp.floating) or jnp.issubdtype(action.dtype, jnp.integer)
    ):
        raise TypeError(f"action must be real numbers, got dtype {action.dtype}")
    return action


def step(env: Env, state: EnvState, action: jax.Array) -> EnvState:
    """Steps every world with ``action`` and applies the env's autoreset mode.

    Args:
      env: the env.
      state: the state returned by :func:`reset` or the last :func:`step`.
      action: ``(num_envs, nu)``; clipped to the action bounds before use (the
        reward sees the clipped action).

    Returns:
      The next state. ``reward``, ``terminated`` and ``truncated`` describe this
      step; statistics count each episode once, when it ends.
    """
    action = _check_action(env, action)
    task, model = env.task, env.model
    prev = state.runner
    dtype = prev.data.qpos.dtype
    action = jnp.clip(action.astype(dtype), env.low, env.high)
    prev_done = prev.terminated | prev.truncated
    next_step, same_step = env.mode == NEXT_STEP, env.mode == SAME_STEP

    runner = core.step(model, prev.replace(ctrl=action), None, task.substeps)
    axes = world_axes(model)
    obs = _observe(env, runner.data)
    reward = jax.vmap(task.reward, in_axes=(axes, 0, 0, 0))(model, prev.data, action, runner.data)
    reward = reward.astype(dtype)
    terminated = jax.vmap(task.terminated, in_axes=(axes, 0))(model, runner.data).astype(bool)
    finite = jnp.isfinite(runner.data.qpos).all(axis=1) & jnp.isfinite(runner.data.qvel).all(axis=1)
    truncated = (runner.episode_length >= task.max_episode_steps) | ~finite
    done = terminated | truncated

    # A world whose last step ended its episode is stale now (restarted below in
    # "next_step", left alone in "disabled"); in "same_step" it was restarted already.
    stale = prev_done & ~same_step
    stats = state.stats
    episode_return = stats.episode_return + jnp.where(stale, 0.0, reward).astype(dtype)
    ended = done & ~stale
    length = runner.episode_length
    stats = stats.replace(
        last_return=jnp.where(ended, episode_return, stats.last_return),
        last_length=jnp.where(ended, length, stats.last_length),
        completed=stats.completed + ended,
        return_sum=stats.return_sum + jnp.where(ended, episode_return, 0.0).astype(dtype),
        length_sum=stats.length_sum + jnp.where(ended, length, 0),
    )

    # One compiled step serves every mode: the mode only chooses which worlds restart.
    restart = jnp.where(next_step, prev_done, same_step & done)
    runner = runner.replace(terminated=terminated, truncated=truncated)
    restarted, new_obs = _restart(env, runner, obs, restart)
    # "same_step" reports the episode that just ended; "next_step" clears the flags.
    runner = restarted.replace(
        terminated=jnp.where(same_step, terminated, restarted.terminated),
        truncated=jnp.where(same_step, truncated, restarted.truncated),
    )
    final_mask = same_step & done
    return EnvState(
        runner=runner,
        obs=new_obs,
        reward=jnp.where(next_step & prev_done, 0.0, reward).astype(dtype),
        final_obs=_pick(final_mask, obs, new_obs),
        final_mask=final_mask,
        nonfinite=~finite & ~(next_step & prev_done),  # restarted worlds are fine again
        stats=stats.replace(episode_return=jnp.where(restart, 0.0, episode_return).astype(dtype)),
    )


def reset_worlds(env: Env, state: EnvState, mask: jax.Array) -> EnvState:
    """Restarts the worlds in ``mask`` from fresh starts (for ``"disabled"`` mode).

    Args:
      env: the env.
      state: the current state.
      mask: ``(num_envs,)`` bool, the worlds to restart.

    Returns:
      The state with those worlds' data, observation, flags, reward and running
      return reset; other worlds and all statistics of completed episodes unchanged.
    """
    mask = jnp.asarray(mask)
    if mask.dtype != bool or mask.shape != (env.num_envs,):
        raise ValueError(
            f"mask must be bool of shape ({env.num_envs},), got {mask.dtype} {mask.shape}"
        )
    runner, obs = _restart(env, state.runner, state.obs, mask)
    return state.replace(
        runner=runner,
        obs=obs,
        reward=jnp.where(mask, 0.0, state.reward).astype(state.reward.dtype),
        final_obs=_pick(mask, obs, state.final_obs),
        final_mask=state.final_mask & ~mask,
        nonfinite=state.nonfinite & ~mask,
        stats=state.stats.replace(
            episode_return=jnp.where(mask, 0.0, state.stats.episode_return).astype(
                state.stats.episode_return.dtype
            )
        ),
    )


def episode_statistics(state: EnvState) -> dict[str, Any]:
    """A NumPy view of the episode statistics, for logging (one host transfer).

    Returns:
      Per-world ``(num_envs,)`` arrays ``episode_return``, ``episode_length``
      (running episode), ``last_return``, ``last_length``, ``completed``,
      ``return_sum``, ``length_sum``; and scalars ``episodes`` (completed in all
      worlds), ``mean_return`` and ``mean_length`` over them (NaN before the first).
    """
    stats, length = jax.device_get((state.stats, state.runner.episode_length))
    out: dict[str, Any] = {
        "episode_return": np.asarray(stats.episode_return),
        "episode_length": np.asarray(length),
        "last_return": np.asarray(stats.last_return),
        "last_length": np.asarray(stats.last_length),
        "completed": np.asarray(stats.completed),
        "return_sum": np.asarray(stats.return_sum),
        "length_sum": np.asarray(stats.length_sum),
    }
    episodes = int(out["completed"].sum())
    out["episodes"] = episodes
    out["mean_return"] = float(out["return_sum"].sum() / episodes) if episodes else float("nan")
    out["mean_length"] = float(out["length_sum"].sum() / episodes) if episodes else float("nan")
    return out


# Compiled once per process and shared (the gym adapter uses them): the env is an
# argument and its autoreset mode an array, so every env of the same task and size,
# in any mode, runs one executable per function.
jit_reset = jax.jit(reset)
jit_step = jax.jit(step)
jit_reset_worlds = jax.jit(reset_worlds)
