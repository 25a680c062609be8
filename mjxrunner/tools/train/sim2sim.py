"""``mjxrunner sim2sim``: the deploy check. An exported policy runs on plain native
MuJoCo through :mod:`.deploy` (onnxruntime and ``mj_step``; no JAX, no engine), and
its return is compared with the one ``play`` measured.

Around the loop, and only around it, the task's own functions are used so that the
two returns mean the same thing: the episodes start where ``play``'s do (the task's
``initial_state`` on the same seed's key streams), and each recorded trajectory is
scored afterwards with the task's ``reward`` and ``terminated`` (an episode ends at
its first termination, or after ``max_episode_steps``). The returns agree when their
means differ by at most three standard errors of the difference, plus 1% of the
return for the rounding of float32 graphs against float64 physics.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner import tasks
from mjxrunner.rl import env as E
from mjxrunner.tools.train import deploy, export, onnx_graph, play


def starts(task: Any, episodes: int, seed: int) -> tuple[E.Env, dict[str, np.ndarray], Any]:
    """``(env, starts, info)``: one world per episode, started as ``play`` starts them:
    the state (``qpos``, ``qvel``, ``act``, one row each) and the task's info (leading
    episode axis; None for a task without one)."""
    env = play.nominal_env_of(task, episodes, "c", num_threads=1)
    state = E.reset(env, jax.random.key(seed))
    data = state.runner.data
    first = {f: np.asarray(getattr(data, f), np.float64) for f in deploy.START_FIELDS}
    return env, first, jax.device_get(state.info)


def held_values(policy: deploy.Policy, info: Any, episode: int) -> dict[str, np.ndarray]:
    """The task state ``policy`` is given at the start of ``episode``, by info path."""
    if info is None:
        return {}
    flat = jax.tree_util.tree_flatten_with_path(info)[0]
    values = {jax.tree_util.keystr(p): np.asarray(x[episode]) for p, x in flat}
    return {p: values[p] for p in policy.held_inputs}


def scorer(env: E.Env):
    """``(fields, score)``: the ``MjData`` fields the task's reward, termination and
    info updates read, and ``score(trajectory, actions, info) -> (rewards,
    terminated)`` over the steps of one recorded episode, the info carried along as
    the env carries it (the reward and termination of a step see the info it was
    taken under)."""
    task, model = env.task, env.model.tree
    names, template, treedef = export.data_fields(env.start)
    n = len(template)

    def one(before, action, after, info, key):
        data, nxt = (jax.tree.unflatten(treedef, x) for x in (before, after))
        if info is None:
            return task.reward(model, data, action, nxt), task.terminated(model, nxt), None
        reward = task.reward(model, data, action, nxt, info)
        terminated = task.terminated(model, nxt, info)
        if task.update_info is not None:
            info = task.update_info(model, data, action, nxt, info, key)
        return reward, terminated, info

    action = jax.ShapeDtypeStruct((env.action_size,), jnp.float32)
    info0 = export.restart_info(env) if task.has_info else None  # for what is read
    reads = onnx_graph.used_inputs(
        lambda *x: one(list(x[:n]), x[n], list(x[n + 1 : 2 * n + 1]), info0, jax.random.key(0)),
        [*template, action, *template],
    )
    read = [i for i in range(n) if reads[i] or reads[n + 1 + i]]
    fields = [(names[i], tuple(template[i].shape)) for i in read]

    @jax.jit
    def score(trajectory: dict, actions: jax.Array, info: Any, key: jax.Array):
        steps = actions.shape[0]
        before = [jnp.broadcast_to(x, (steps, *x.shape)) for x in template]
        after = list(before)
        for i in read:
            series = trajectory[names[i]].astype(template[i].dtype)
            before[i], after[i] = series[:-1], series[1:]
        keys = jax.random.split(key, steps)

        def body(info, x):
            b, a, nxt, key = x
            reward, terminated, info = one(b, a, nxt, info, key)
            return info, (reward, terminated)

        _, out = jax.lax.scan(body, info, (before, actions.astype(jnp.float32), after, keys))
        return out

    return fields, score


def given_schedule(env: E.Env, policy: deploy.Policy):
    """``schedule(info, key)``: the task state ``policy`` is given at each step of an
    episode (by info path, ``(max_episode_steps, ...)``), as the scorer carries it
    with the same key; None where it is given none. Those leaves change by the task's
    own rule, never by the physics (``export.info_sources``), so the start's data
    stands in for every step's."""
    given = [x["info"] for x in policy.inputs if x.get("source") == "given"]
    if not given:
        return None
    task, model, start = env.task, env.model.tree, env.start
    action = jnp.zeros((env.action_size,), jnp.float32)

    @jax.jit
    def schedule(info: Any, key: jax.Array) -> dict:
        def body(info, key):
            flat = jax.tree_util.tree_flatten_with_path(info)[0]
            now = {jax.tree_util.keystr(p): x for p, x in flat}
            new = task.update_info(model, start, action, start, info, key)
            return new, {p: now[p] for p in given}

        keys = jax.random.split(key, task.max_episode_steps)
        return jax.lax.scan(body, info, keys)[1]

    return schedule


def episode_return(rewards: np.ndarray, terminated: np.ndarray) -> tuple[float, int]:
    """Return and length of an episode cut at its first termination."""
    ends = np.flatnonzero(terminated)
    length = int(ends[0]) + 1 if len(ends) else len(rewards)
    return float(np.sum(rewards[:length])), length


def sim2sim(path: str | os.PathLike, *, episodes: int = 16, seed: int = 1) -> dict:
    """Runs the policy exported at ``path`` for ``episodes`` episodes on native
    MuJoCo; returns their :func:`~.play.summary`, ``play``'s and whether they agree."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    policy = deploy.Policy(path)
    task = tasks.get(policy.meta["task"])
    env, first, info = starts(task, episodes, seed)
    fields, score = scorer(env)
    schedule = given_schedule(env, policy)
    model = env.host.mj_model
    returns, lengths = [], []
    for i in range(episodes):
        start = {k: v[i] for k, v in first.items()}
        info_i = None if info is None else jax.tree.map(lambda x, i=i: x[i], info)
        key = jax.random.fold_in(jax.random.key(seed), i)  # the episode's task draws
        given = None if schedule is None else jax.device_get(schedule(info_i, key))
        trajectory, actions = deploy.run_episode(
            policy,
            model,
            start,
            env.task.max_episode_steps,
            fields,
            held_values(policy, info, i),
            given,
        )
        rewards, terminated = jax.device_get(score(trajectory, actions, info_i, key))
        r, n = episode_return(np.asarray(rewards), np.asarray(terminated))
        returns.append(r)
        lengths.append(n)
    result = {"task": task.name, "seed": seed, **play.summary(np.array(returns), np.array(lengths))}
    played = policy.meta.get("play")
    result["play"] = played
    if played is not None:
        gap = abs(result["mean_return"] - played["mean_return"])
        noise = 3 * math.hypot(result["stderr_return"], played["stderr_return"])
        result["agrees"] = bool(gap <= noise + 0.01 * max(1.0, abs(played["mean_return"])))
    return result
