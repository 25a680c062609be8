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

from mjxrunner import engine
from mjxrunner.engine import backends, core, params
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
    return backends.of(data).forward(model, data)


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
    env: Env, model: FlatModel, data: mjx.Data, draw: jax.Array
) -> tuple[mjx.Data, Seen]:
    """Info, history and observation of a batch of fresh starts (every world of the
    env's batch, or the worlds a restart gathered), from their restart's raw draw
    keys ``(n, 2)``: the info and the noise draw from sub-streams of them. A pixel
    env renders them (:func:`_frames`) and returns ``data`` with the render's token."""
    info = None
    if env.task.has_info:
        tree = model.tree
        keys = typed_keys(draw, INFO_STREAM)
        info = jax.vmap(env.task.initial_info, in_axes=(world_axes(tree), 0, 0))(tree, data, keys)
    obs = observe(env, model, data, info)
    frames = None
    if env.renderer is not None:
        data, frames = _frames(env, model, data)
        obs = pixels.merge(obs, frames)
    obs = observations.noisy(env.pipeline, obs, derived_keys(draw, NOISE_STREAM))
    history = observations.start_history(env.pipeline, obs)
    view = observations.view(env.pipeline, history, obs)
    return data, Seen(info, history, view, frames if _keeps_frames(env) else None)


def _frames(env: Env, model: FlatModel, data: mjx.Data) -> tuple[mjx.Data, dict[str, jax.Array]]:
    """Frames of a batch of fresh starts, with ``data`` carrying the render token.
    MJX renders every world of a context at once: the env's batch goes through the
    env's renderer, the ``restart_slots`` worlds a restart gathered through the
    restart renderer (each pass costing ``slots / num_envs`` of a full render)."""
    n = data.qpos.shape[0]
    small = env.restart_renderer
    renderer = small if small is not None and n == small.worlds_per_device else env.renderer
    return renderer.observe(model.tree, data)


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


def _fresh(
    env: Env,
    pool: Any,
    model: FlatModel,
    draw: jax.Array,
    curriculum: Any = None,
) -> RunnerState:
    """Fresh starts from raw draw keys for a batch of worlds (every world of the
    env's batch, or the worlds a restart gathered), as a cleared ``RunnerState``."""
    n = draw.shape[0]
    if pool is None:
        data = draw_starts(model, env.start, draw, env.task, curriculum)
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
    moved by the ended episodes (``ended(take) -> (data, info)``, the state they
    ended in, each ``(data, info)`` pair read through ``take`` at the restarted
    worlds; None at a reset), parameters back from the env's model (and redrawn if
    randomized), fresh data, cleared counters, advanced keys, then a fresh info,
    history and observation.

    Only the restarted worlds are touched: each pass gathers the next ``slots`` of
    them (None: the env's ``restart_slots``; at most the batch) from every per-world
    leaf, restarts those, and scatters them back, so a step costs what its restarts
    cost, not selects over the whole batch; no pass runs when ``mask`` selects no
    world. Every slot count runs this same code (so the compiled step around it is
    the same), and a world's restart depends on its own leaves only."""
    n = mask.shape[0]
    slots = min(env.restart_slots if slots is None else slots, n)
    # The restarted worlds' redrawn fields need their world axis to be written back
    # (a no-op once they have it).
    model = FlatModel.of(params.promote(model.tree, env.config.randomization, n))

    def one_pass(carry):
        model, runner, seen, todo = carry
        (index,) = jnp.nonzero(todo, size=slots, fill_value=n)  # n: past the end
        some = index < n
        before = (FlatModel.of(take_worlds(model.tree, index)), take_worlds(runner, index))
        default = FlatModel.of(take_worlds(env.model.tree, index))
        taken = None if ended is None else lambda: ended(lambda pair: _take_pair(pair, index))
        old = take_worlds(seen, index)
        after, curriculum, draw = _restart(env, pool, *before, old.curriculum, default, some, taken)
        _check_kept_shapes(before, after)
        model = FlatModel.of(put_worlds(model.tree, index, after[0].tree))
        runner = put_worlds(runner, index, after[1])
        # The first observation reads what the worlds keep, gathered back from the
        # scattered state: fused with the draw that made it, XLA may round a start's
        # values one way for the state and another for the observation.
        kept = FlatModel.of(take_worlds(model.tree, index))
        data, first = first_seen(env, kept, take_worlds(runner.data, index), draw)
        if env.renderer is not None:  # the render token moved
            runner = runner.replace(data=put_worlds(runner.data, index, data))
        new = pick(some, first, old.replace(curriculum=None)).replace(curriculum=curriculum)
        _check_kept_shapes(old, new)
        seen = put_worlds(seen, index, new)
        return model, runner, seen, todo.at[index].set(False, mode="drop")

    start = (model, runner, seen, mask)
    model, runner, seen, _ = jax.lax.while_loop(lambda c: jnp.any(c[3]), one_pass, start)
    return model, runner, seen


def _take_pair(pair: tuple[mjx.Data, Any], index: jax.Array) -> tuple[mjx.Data, Any]:
    """Worlds ``index`` of a ``(data, info)`` pair: the data as ``take_worlds`` reads
    it (pooled leaves whole), every leaf of the info per world (a task's own dict,
    undeclared, would read as shared)."""
    data, info = pair
    return take_worlds(data, index), curriculum_.take(info, index)


def _check_kept_shapes(before: Any, after: Any) -> None:
    """At trace time: a restart of some worlds keeps every leaf's shape and dtype,
    or the scatter back would drop or cast what it changed."""
    spec = lambda t: [(jnp.shape(x), jnp.result_type(x)) for x in jax.tree.leaves(t)]  # noqa: E731
    if jax.tree.structure(before) != jax.tree.structure(after) or spec(before) != spec(after):
        raise AssertionError("a restart changed the structure or the shapes of the state")


def _restart(
    env: Env,
    pool: Any,
    model: FlatModel,
    runner: RunnerState,
    curriculum: Any,
    default: FlatModel,
    mask: jax.Array,
    ended: Any,
) -> tuple[tuple[FlatModel, RunnerState], Any, jax.Array]:
    """The worlds in ``mask`` of the worlds one pass gathered, restarted:
    ``((model, runner), curriculum, draw keys)``, the observation still to come
    (``default``: the env's model at the same worlds; ``ended``: None, or ``() ->
    (data, info)`` of those worlds as their episodes ended)."""
    rng, draw = core.split_streams(runner.rng)
    runner = runner.replace(rng=pick(mask, rng, runner.rng))  # restarted ones advance
    if ended is not None and env.task.update_curriculum is not None:  # not at a reset
        data, info = ended()
        keys = typed_keys(draw, CURRICULUM_STREAM)
        moved = curriculum_.updated(env.task, model, curriculum, data, info, keys)
        curriculum = pick(mask, moved, curriculum)

    def source(m, s):  # drawn with the restored (and redrawn) parameters
        del s
        return _fresh(env, pool, m, draw, curriculum)

    eng = engine.local(env.config, model, runner, default_model=default, ref=env.ref)
    restarted = engine.reset(eng, mask, source, update_fk=False)  # (slots,): no shared leaf
    model, runner = restarted.model, restarted.state
    return (model, runner), curriculum, draw


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
