"""One step and one reset of the worlds on one device: the bodies of
:func:`mjxrunner.env.step`, :func:`~mjxrunner.env.reset` and
:func:`~mjxrunner.env.reset_worlds`, run under :func:`.restart.sharded`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mjxrunner import engine
from mjxrunner.engine import core, sharding
from mjxrunner.engine.worlds import (
    world_axes,
)
from mjxrunner.kit import normalize, observations, pixels
from mjxrunner.rl import curriculum as curriculum_
from mjxrunner.rl.episode import DISABLED, NEXT_STEP, SAME_STEP, EnvState, LastFrames
from mjxrunner.rl.restart import (
    CURRICULUM_STREAM,
    INFO_STREAM,
    NOISE_STREAM,
    Seen,
    carried_model,
    derived_keys,
    draws_every_step,
    first_seen,
    observe,
    pick,
    restart_worlds,
    step_frames,
    typed_keys,
    with_info,
    zeros_stats,
)

Env = Any  # mjxrunner.rl.env.Env: named loosely here, so the import stays one-way


def normalized(
    env: Env, norm: normalize.ObsNorm | None, returned: jax.Array, *also: jax.Array
) -> tuple:
    """``(norm, returned, *also)``, with ``norm`` updated by the ``returned`` batch and
    every observation array scaled by it; as given without normalization."""
    if env.normalize is None:
        return (norm, returned, *also)
    axis = None if env.mesh is None else sharding.AXIS
    samples = returned
    if env.task.mirror is not None:  # symmetric statistics: mirroring commutes with scaling
        image = env.task.mirror.observation(returned)
        samples = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), returned, image)
    norm = normalize.update(norm, samples, axis)
    scale = lambda o: normalize.apply(env.normalize, norm, o)  # noqa: E731
    return (norm, scale(returned), *map(scale, also))


def reset_local(
    env: Env, pool: Any, keys: jax.Array, world: jax.Array, obs_norm: normalize.ObsNorm | None
) -> EnvState:
    n = keys.shape[0]
    runner = core.init(env.start, n, jax.random.key(0), env.action_size, env.config.guards)
    runner = engine.attach_events(env.config, runner).replace(rng=keys)
    _, shapes = jax.eval_shape(first_seen, env, env.model, runner.data, keys)
    # A placeholder: every world restarts.
    seen = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    seen = seen.replace(
        curriculum=curriculum_.initial(
            env.task, env.model, typed_keys(keys, CURRICULUM_STREAM), world
        )
    )
    everyone = jnp.ones((n,), bool)
    model, runner, seen = restart_worlds(env, pool, env.model, runner, seen, everyone, slots=n)
    obs_norm, obs = normalized(env, obs_norm, seen.obs)
    dtype = runner.data.qpos.dtype
    return EnvState(
        runner=runner,
        obs=obs,
        reward=jnp.zeros((n,), dtype),
        final_obs=obs,
        final_mask=jnp.zeros((n,), bool),
        stats=zeros_stats(n, dtype),
        model=carried_model(env, model),
        obs_norm=obs_norm,
        info=seen.info,
        history=seen.history,
        last_frames=None if seen.frames is None else LastFrames(seen.frames, jnp.int32(0)),
        curriculum=seen.curriculum,
    )


def step_local(env: Env, pool: Any, state: EnvState, action: jax.Array) -> EnvState:
    task = env.task
    prev = state.runner
    model = env.model if state.model is None else state.model
    dtype = prev.data.qpos.dtype
    action = action.astype(dtype)
    # Clipping would hide a NaN/Inf action (or one the cast overflowed) inside the
    # bounds; as NaN it reaches the action guard, which reads ``ctrl``. ``a - a`` is
    # 0 for a finite ``a`` and NaN otherwise (a select in its place changed how XLA
    # fuses the step, and a group env's step then differed from its members' by ~1e-9).
    action = jnp.clip(action, env.low, env.high) + (action - action)
    prev_done = prev.terminated | prev.truncated
    next_step, same_step = env.mode == NEXT_STEP, env.mode == SAME_STEP

    # The guards' truncations of this step alone (not last step's flags). Worlds
    # restarted in the last step ("same_step") start their episode with clear flags:
    # the flags they reported belong to the episode that ended.
    fresh = state.final_mask
    cleared = prev.replace(
        ctrl=action,
        truncated=jnp.zeros_like(prev.truncated),
        tripped={k: v & ~fresh for k, v in prev.tripped.items()},
    )
    draw = None
    if draws_every_step(env):  # noise or info updates: every world's stream advances
        cleared, draw = engine.split_rng(cleared)
    eng = engine.local(env.config, model, cleared, default_model=env.model, ref=env.ref)
    stepped = engine.step(eng, substeps=task.substeps)
    model, runner = stepped.model, stepped.state
    tree = model.tree
    axes = world_axes(tree)
    # Reward and termination see the info the step was taken under; the next
    # observation sees it updated.
    info = state.info
    extra = with_info(task, info)
    reward = jax.vmap(task.reward, in_axes=(axes, 0, 0, 0, *(0 for _ in extra)))(
        tree, prev.data, action, runner.data, *extra
    )
    reward = reward.astype(dtype)
    terminated = jax.vmap(task.terminated, in_axes=(axes, 0, *(0 for _ in extra)))(
        tree, runner.data, *extra
    ).astype(bool)
    if task.update_info is not None:
        keys = typed_keys(draw, INFO_STREAM)
        info = jax.vmap(task.update_info, in_axes=(axes, 0, 0, 0, 0, 0))(
            tree, prev.data, action, runner.data, info, keys
        )
    obs = observe(env, model, runner.data, info)
    last = state.last_frames
    if env.renderer is not None:  # after the physics: the frames show the new state
        data, frames, last = step_frames(env, model, runner.data, last)
        runner = runner.replace(data=data)
        obs = pixels.merge(obs, frames)
    if env.pipeline.random:
        obs = observations.noisy(env.pipeline, obs, derived_keys(draw, NOISE_STREAM))
    history = observations.push(env.pipeline, state.history, obs)
    obs = observations.view(env.pipeline, history, obs)
    truncated = (runner.episode_length >= task.max_episode_steps) | runner.truncated
    # A world whose last step ended its episode is stale now (restarted below in
    # "next_step", left alone in "disabled"); in "same_step" it was restarted already.
    stale = prev_done & ~same_step
    # "disabled": an ended world keeps the flags of its episode's end until
    # reset_worlds restarts it (a fallen pole that swings back is still fallen).
    sticky = stale & (env.mode == DISABLED)
    terminated = jnp.where(sticky, prev.terminated, terminated)
    truncated = jnp.where(sticky, prev.truncated, truncated)
    done = terminated | truncated
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
    frames = None if last is None else last.frames
    seen = Seen(info, history, obs, frames, state.curriculum)
    # The state each episode ended in: "next_step" restarts after the ending step.
    # Read at the restarted worlds (``take``) before choosing: nothing whole-batch.
    ended = lambda take: curriculum_.episode_end(  # noqa: E731
        next_step, take((prev.data, state.info)), take((runner.data, info))
    )
    model, restarted, seen = restart_worlds(env, pool, model, runner, seen, restart, ended=ended)
    new_obs = seen.obs
    # "same_step" reports the episode that just ended; "next_step" clears the flags.
    runner = restarted.replace(
        terminated=jnp.where(same_step, terminated, restarted.terminated),
        truncated=jnp.where(same_step, truncated, restarted.truncated),
        tripped={
            k: jnp.where(same_step, v, restarted.tripped[k]) for k, v in runner.tripped.items()
        },
        overflow=jnp.where(same_step, runner.overflow, restarted.overflow),
    )
    final_mask = same_step & done
    # Statistics move by what the step returns: one observation per world per step.
    obs_norm, new_obs, final_obs = normalized(
        env, state.obs_norm, new_obs, pick(final_mask, obs, new_obs)
    )
    return EnvState(
        runner=runner,
        obs=new_obs,
        reward=jnp.where(next_step & prev_done, 0.0, reward).astype(dtype),
        final_obs=final_obs,
        final_mask=final_mask,
        stats=stats.replace(episode_return=jnp.where(restart, 0.0, episode_return).astype(dtype)),
        model=carried_model(env, model),
        obs_norm=obs_norm,
        info=seen.info,
        history=seen.history,
        last_frames=None if last is None else last.replace(frames=seen.frames),
        curriculum=seen.curriculum,
    )


def reset_worlds_local(env: Env, pool: Any, state: EnvState, mask: jax.Array) -> EnvState:
    model = env.model if state.model is None else state.model
    last = state.last_frames
    frames = None if last is None else last.frames
    seen = Seen(state.info, state.history, state.obs, frames, state.curriculum)
    ended = lambda take: take((state.runner.data, state.info))  # noqa: E731 - as stopped
    model, runner, seen = restart_worlds(env, pool, model, state.runner, seen, mask, ended=ended)
    fresh = seen.obs
    if env.normalize is not None:  # scaled, not counted: steps count each world once
        fresh = normalize.apply(env.normalize, state.obs_norm, fresh)
    obs = pick(mask, fresh, state.obs)
    return state.replace(
        runner=runner,
        obs=obs,
        info=seen.info,
        history=seen.history,
        last_frames=None if last is None else last.replace(frames=seen.frames),
        curriculum=seen.curriculum,
        reward=jnp.where(mask, 0.0, state.reward).astype(state.reward.dtype),
        final_obs=pick(mask, obs, state.final_obs),
        final_mask=state.final_mask & ~mask,
        stats=state.stats.replace(
            episode_return=jnp.where(mask, 0.0, state.stats.episode_return).astype(
                state.stats.episode_return.dtype
            )
        ),
        model=carried_model(env, model),
    )
