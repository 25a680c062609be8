"""Restarts of the functional env: fresh starts drawn from each world's stream (or
gathered from a reset pool), curriculum moves, pixel frames of the restarted worlds,
and the ``shard_map`` over the env's mesh. Everything here runs inside the env's
compiled functions, on the worlds of one device (see :mod:`.env`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx

from mjxrunner.engine import batch as engine
from mjxrunner.engine import core, native, params
from mjxrunner.engine.sharding import on_worlds
from mjxrunner.engine.state import RunnerState
from mjxrunner.engine.worlds import (
    BATCHED,
    FlatModel,
    put_worlds,
    pytree_dataclass,
    take_worlds,
    world_axes,
    world_field,
)
from mjxrunner.kit import observations, pixels
from mjxrunner.rl import curriculum as curriculum_
from mjxrunner.rl.episode import EpisodeStats, LastFrames
from mjxrunner.tasks.base import Task

Env = Any  # mjxrunner.rl.env.Env: named loosely here, so the import stays one-way


def renderers(
    task: Task, m: mujoco.MjModel, config: engine.Config, slots: int
) -> dict[str, pixels.PixelRenderer | None]:
    """A pixel task's render contexts (``renderer``, ``restart_renderer``): on the
    env's device, or one per device of its mesh; a ValueError naming the task where
    they cannot be made. Both None for a task without pixels."""
    if task.pixels is None:
        return {"renderer": None, "restart_renderer": None}
    where = config.backend.device if config.mesh is None else config.mesh
    devices = 1 if config.mesh is None else config.mesh.devices.size
    make = lambda n: pixels.PixelRenderer(  # noqa: E731
        m, n, task.pixels, impl=config.backend.impl, devices=where
    )
    try:
        renderer = make(config.num_envs)
        small = slots < renderer.worlds_per_device
        return {"renderer": renderer, "restart_renderer": make(slots * devices) if small else None}
    except ValueError as e:
        raise ValueError(f"task {task.name!r}: {e}") from None


def _start_one(
    model: mjx.Model, start: mjx.Data, raw_key: jax.Array, task: Task, curriculum: Any = None
) -> mjx.Data:
    """One world's fresh start: the task's randomization (placed by the world's
    curriculum state, if the task keeps one), then (if the task asks for it) a
    forward pass so that derived quantities match the new state."""
    extra = (curriculum,) if task.has_curriculum else ()
    data = task.initial_state(model, start, jax.random.wrap_key_data(raw_key), *extra)
    if not task.forward_on_reset:
        return data
    return native.forward(model, data) if native.is_native(data) else mjx.forward(model, data)


def draw_starts(
    model: Any, start: mjx.Data, raw_keys: jax.Array, task: Task, curriculum: Any = None
) -> mjx.Data:
    """Fresh starts for a batch of raw keys ``(n, 2)`` (and curriculum states, each
    leaf ``(n, ...)``); model leaves shared or per world."""
    model = FlatModel.of(model).tree
    return jax.vmap(_start_one, in_axes=(world_axes(model), None, 0, None, 0))(
        model, start, raw_keys, task, curriculum
    )


def pick(mask: jax.Array, a: Any, b: Any) -> Any:
    """``a`` for the worlds in ``mask``, ``b`` elsewhere (pytrees whose every leaf has
    a leading world axis); a scalar choice per world."""
    return jax.tree.map(jax.vmap(jnp.where, in_axes=(0, 0, 0)), _per_leaf(mask, a), a, b)


def _per_leaf(mask: jax.Array, tree: Any) -> Any:
    return jax.tree.map(lambda _: mask, tree)


def with_info(task: Task, info: Any) -> tuple:
    """The extra argument of a task function: its info, if the task keeps one."""
    return (info,) if task.has_info else ()


def observe(env: Env, model: FlatModel, data: mjx.Data, info: Any = None) -> Any:
    """The task's observation of every world (raw: before noise and history)."""
    model = model.tree
    extra = with_info(env.task, info)
    axes = (world_axes(model), 0, *(0 for _ in extra))
    return jax.vmap(env.task.observation, in_axes=axes)(model, data, *extra)


def _one_world_observation(task: Task, model: mjx.Model, start: mjx.Data) -> Any:
    if task.has_info:
        info = task.initial_info(model, start, jax.random.key(0))
        return task.observation(model, start, info)
    return task.observation(model, start)


def raw_spec(task: Task, model: FlatModel, start: mjx.Data) -> Any:
    """One world's raw observation as ``ShapeDtypeStruct`` (s), pixel terms included."""
    spec = jax.eval_shape(lambda m, d: _one_world_observation(task, m, d), model.tree, start)
    if task.pixels is None:
        return spec
    return pixels.merge_spec(spec, task.pixels, f"task {task.name!r}")


def derived_keys(keys: jax.Array, stream: int) -> jax.Array:
    """Raw keys ``(n, 2)`` of sub-stream ``stream`` of each world's raw key."""
    fold = lambda k: jax.random.key_data(  # noqa: E731
        jax.random.fold_in(jax.random.wrap_key_data(k), stream)
    )
    return jax.vmap(fold)(keys)


# Sub-streams of a world's draw key (a restart's or a step's), by use.
INFO_STREAM, NOISE_STREAM, CURRICULUM_STREAM = 1, 2, 3


def typed_keys(keys: jax.Array, stream: int) -> jax.Array:
    """Typed keys ``(n,)`` of sub-stream ``stream`` of each world's raw key."""
    return jax.vmap(jax.random.wrap_key_data)(derived_keys(keys, stream))


@pytree_dataclass
class Seen:
    """What the env keeps of observing worlds (each leaf with a world axis).

    Attributes:
      info: the task's per-world state (None without one).
      history: the terms' histories (None without history).
      obs: what the policy receives, before normalization.
      frames: the raw frames kept between renders (``LastFrames.frames``), or None.
      curriculum: the task's state across episodes (None without one).
    """

    info: Any = world_field(BATCHED)
    history: Any = world_field(BATCHED)
    obs: Any = world_field(BATCHED)
    frames: Any = world_field(BATCHED, default=None)
    curriculum: Any = world_field(BATCHED, default=None)


def _keeps_frames(env: Env) -> bool:
    """Whether states keep the last frames (a pixel env rendering every k-th step)."""
    return env.renderer is not None and env.task.pixels.every > 1


def first_seen(
    env: Env,
    model: FlatModel,
    data: mjx.Data,
    draw: jax.Array,
    mask: jax.Array | None = None,
    slots: int = 0,
) -> tuple[mjx.Data, Seen]:
    """Info, history and observation of fresh starts, from their restart's raw draw
    keys ``(n, 2)``: the info and the noise draw from sub-streams of them. Only the
    worlds in ``mask`` (None: all) are used by the caller: a pixel env renders those
    (see :func:`_restart_frames`) and returns ``data`` with the render's token."""
    info = None
    if env.task.has_info:
        tree = model.tree
        keys = typed_keys(draw, INFO_STREAM)
        info = jax.vmap(env.task.initial_info, in_axes=(world_axes(tree), 0, 0))(tree, data, keys)
    obs = observe(env, model, data, info)
    frames = None
    if env.renderer is not None:
        data, frames = _restart_frames(env, model, data, mask, slots)
        obs = pixels.merge(obs, frames)
    obs = observations.noisy(env.pipeline, obs, derived_keys(draw, NOISE_STREAM))
    history = observations.start_history(env.pipeline, obs)
    view = observations.view(env.pipeline, history, obs)
    return data, Seen(info, history, view, frames if _keeps_frames(env) else None)


def _restart_frames(
    env: Env, model: FlatModel, data: mjx.Data, mask: jax.Array | None, slots: int
) -> tuple[mjx.Data, dict[str, jax.Array]]:
    """Frames of the worlds in ``mask`` (others' are zeros), with ``data`` carrying
    the render token. MJX renders every world of a context at once, so restarted
    worlds are gathered ``slots`` at a time into the restart renderer's context
    (a pass per ``slots`` restarts, each costing ``slots / num_envs`` of a full
    render); without one (or with ``mask`` None) every world is rendered."""
    small = env.restart_renderer
    if mask is None or small is None or small.worlds_per_device != slots:
        return env.renderer.observe(model.tree, data)
    n, tree = mask.shape[0], model.tree
    frames = {k: jnp.zeros(s.shape, s.dtype) for k, s in env.renderer.frame_shapes(n).items()}

    def one_pass(carry):
        token, frames, todo = carry
        (index,) = jnp.nonzero(todo, size=slots, fill_value=n)  # n: past the end
        some = take_worlds(data, index)
        some = pixels.with_render_token(some, token[jnp.minimum(index, n - 1)])
        some, new = small.observe(take_worlds(tree, index), some)
        token = token.at[index].set(pixels.render_token(some), mode="drop")
        frames = {k: v.at[index].set(new[k], mode="drop") for k, v in frames.items()}
        return token, frames, todo.at[index].set(False, mode="drop")

    start = (pixels.render_token(data), frames, mask)
    token, frames, _ = jax.lax.while_loop(lambda c: jnp.any(c[2]), one_pass, start)
    return pixels.with_render_token(data, token), frames


def step_frames(
    env: Env, model: FlatModel, data: mjx.Data, last: LastFrames | None
) -> tuple[mjx.Data, dict[str, jax.Array], LastFrames | None]:
    """A step's frames of the state in ``data``: rendered, or every k-th step only
    (``last`` kept) with the last frames shown in between (``lax.cond``: a step
    that does not render costs no render). Returns ``(data with the render token,
    frames, last)``."""
    observe = env.renderer.observe
    if last is None:
        data, frames = observe(model.tree, data)
        return data, frames, None
    due = last.age + 1 >= env.task.pixels.every

    def fresh(data):
        data, frames = observe(model.tree, data)
        return pixels.render_token(data), frames

    def again(data):
        return pixels.render_token(data), last.frames

    token, frames = jax.lax.cond(due, fresh, again, data)
    age = jnp.where(due, jnp.zeros_like(last.age), last.age + 1)
    return pixels.with_render_token(data, token), frames, LastFrames(frames, age)


def draws_every_step(env: Env) -> bool:
    """Whether a step draws (noise, info updates): then every world's stream splits."""
    return env.pipeline.random or env.task.update_info is not None


def _draw_masked(
    env: Env,
    model: FlatModel,
    draw: jax.Array,
    mask: jax.Array,
    current: mjx.Data,
    slots: int,
    curriculum: Any = None,
) -> mjx.Data:
    """``current`` with fresh starts for the worlds in ``mask``, ``slots`` at a time.

    Each pass gathers the next ``slots`` masked worlds (their keys and per-world
    parameters), draws their starts and scatters them back, so the cost follows the
    number of restarts, not the batch. With ``slots >= num_envs`` every world is
    drawn in one ``vmap`` (the cheaper choice when all restart). A world's start
    depends on its own key and parameters only (up to the rounding of a forward
    compiled for another batch size: see the module docstring)."""
    n = mask.shape[0]
    if slots >= n:
        return draw_starts(model, env.start, draw, env.task, curriculum)
    tree = model.tree

    def one_pass(carry):
        data, todo = carry
        (index,) = jnp.nonzero(todo, size=slots, fill_value=n)  # n: past the end
        fresh = draw_starts(
            take_worlds(tree, index),
            env.start,
            draw[jnp.minimum(index, n - 1)],
            env.task,
            curriculum_.take(curriculum, index),
        )
        return put_worlds(data, index, fresh), todo.at[index].set(False, mode="drop")

    data, _ = jax.lax.while_loop(lambda c: jnp.any(c[1]), one_pass, (current, mask))
    return data


def _fresh(
    env: Env,
    pool: Any,
    model: FlatModel,
    draw: jax.Array,
    mask: jax.Array,
    current: mjx.Data,
    slots: int,
    curriculum: Any = None,
) -> RunnerState:
    """Fresh starts from raw draw keys for the worlds in ``mask`` (others keep
    ``current``), as a cleared ``RunnerState``."""
    n = draw.shape[0]
    if pool is None:
        data = _draw_masked(env, model, draw, mask, current, slots, curriculum)
    else:
        size = pool.qpos.shape[0]
        index = jax.vmap(lambda k: jax.random.randint(jax.random.wrap_key_data(k), (), 0, size))(
            draw
        )
        data = jax.tree.map(lambda leaf: leaf[index], pool)
    # core.init knows every field a fresh world has (counters, flags, ...): take its
    # cleared values and put the new data in.
    cleared = core.init(env.start, n, jax.random.key(0), env.action_size, env.config.guards)
    cleared = engine.attach_events(env.config, cleared)  # queues, timers: drawn by the reset
    return cleared.replace(data=data)


def restart_worlds(
    env: Env,
    pool: Any,
    model: FlatModel,
    runner: RunnerState,
    seen: Seen,
    mask: jax.Array,
    slots: int | None = None,
    ended: Any = None,
) -> tuple[FlatModel, RunnerState, Seen]:
    """Restarts the worlds in ``mask`` through the engine's reset: the curriculum
    moved by the ended episodes (``ended() -> (data, info)`` as they ended; None at
    a reset), parameters back from the env's model (and redrawn if randomized),
    fresh data, cleared counters, advanced keys, then a fresh info, history and
    observation. Skipped (``lax.cond``) when ``mask`` selects no world. Starts are
    drawn ``slots`` worlds at a time (None: the env's ``restart_slots``)."""
    slots = env.restart_slots if slots is None else slots

    def restart(model, runner, seen):
        rng, draw = core.split_streams(runner.rng)
        runner = runner.replace(rng=pick(mask, rng, runner.rng))  # restarted ones advance
        curriculum = seen.curriculum
        if ended is not None and env.task.update_curriculum is not None:  # not at a reset
            data, info = ended()
            keys = typed_keys(draw, CURRICULUM_STREAM)
            moved = curriculum_.updated(env.task, model, curriculum, data, info, keys)
            curriculum = pick(mask, moved, curriculum)

        def source(m, s):  # drawn with the restored (and redrawn) parameters
            return _fresh(env, pool, m, draw, mask, s.data, slots, curriculum)

        model, runner = engine.reset_local(
            env.config, model, env.model, env.ref, runner, source, mask, jnp.asarray(False)
        )
        data, first = first_seen(env, model, runner.data, draw, mask, slots)
        seen = pick(mask, first, seen.replace(curriculum=None))
        return model, runner.replace(data=data), seen.replace(curriculum=curriculum)

    # Both branches must return the same shapes: give the redrawn fields their world
    # axis first (a no-op once they have it).
    model = FlatModel.of(params.promote(model.tree, env.config.randomization, mask.shape[0]))
    keep = lambda m, r, s: (m, r, s)  # noqa: E731
    return jax.lax.cond(jnp.any(mask), restart, keep, model, runner, seen)


def zeros_stats(n: int, dtype: Any) -> EpisodeStats:
    zf, zi = jnp.zeros((n,), dtype), jnp.zeros((n,), jnp.int32)
    return EpisodeStats(
        episode_return=zf,
        last_return=zf,
        last_length=zi,
        completed=zi,
        return_sum=zf,
        length_sum=zi,
    )


def carried_model(env: Env, model: FlatModel) -> FlatModel | None:
    """What a state carries of the model: its own only when parameters are redrawn."""
    return None if env.config.randomization is None else model


def sharded(fn, env: Env, *args: Any, per_world: tuple[int, ...] = ()) -> Any:
    """``fn(env, pool, *args)`` on each device's worlds (see ``sharding.on_worlds``).

    The env's arrays are shared, but for a per-world model; the reset pool's leading
    axis counts starts, not worlds, so it is replicated whole.
    """
    if env.mesh is None:
        return fn(env, env.pool, *args)
    if env.pool is None:
        body = lambda e, *a: fn(e, None, *a)  # noqa: E731
        return on_worlds(body, env.mesh, env, *args, per_world=tuple(i + 1 for i in per_world))
    return on_worlds(
        fn,
        env.mesh,
        env.replace(pool=None),
        env.pool,
        *args,
        per_world=tuple(i + 2 for i in per_world),
        replicated=(1,),
    )
