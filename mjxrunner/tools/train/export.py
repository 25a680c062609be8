"""``mjxrunner export``: a trained run's policy as ONNX, for a robot or a simulator
without JAX.

Two files, both written by :mod:`.onnx_graph` from the JAX functions the env runs:

- ``FILE`` (the policy): input ``obs`` ``(1, n)`` float32, the task's observation
  terms flattened in the order of the metadata's layout (sorted term names); output
  ``action`` ``(1, nu)``, the control to write into ``MjData.ctrl``. The
  observation normalizer (frozen at the run's statistics) and the clipping to the
  control range are inside; the action is the Gaussian's mean.
- ``FILE``'s observer (``x.onnx`` -> ``x.observer.onnx``): the task's observation
  terms, before noise and history, as a graph of the ``MjData`` fields it reads
  (inputs named after them, float32: what a robot's state estimate would give) and
  of the task state it reads, where the deploy loop can keep that state: a value
  ``update_info`` passes on unchanged (a command, given at the episode's start) or
  the last action. A term's history is kept by the loop (:mod:`.deploy`). Not
  written for a task that observes state changing with the physics; the metadata
  then says why.

The policy's metadata (key ``"mjxrunner"``, JSON; see :mod:`.deploy`) holds the
task, observation layout and size, action bounds, control period and ``substeps``,
the default joint positions (the task's keyframe), the observer's inputs, the run's
record and the return ``play`` measured, if it was run. Everything is checked
before anything is written.

A run of another trainer (rsl_rl, Brax) gives its policy graph through its module
(:func:`.play.trainer_module`'s ``policy_graph``: the same input, output and
clipping, that trainer's normalizer inside); the observer and the metadata are the
task's, written here as for any run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.extend import core as jcore

from mjxrunner.kit import normalize, observations
from mjxrunner.rl import env as E
from mjxrunner.rl import restart
from mjxrunner.tools.train import deploy, onnx_graph, play, ppo, run_dir


def _terms(layout: list[dict], flat: jax.Array, spec: Any) -> Any:
    """The flat observation ``(n,)`` back as the env's terms (or its one array)."""
    if not isinstance(spec, dict):
        return flat
    return {x["term"]: flat[x["offset"] : x["offset"] + x["size"]] for x in layout}


def policy_graph(env: E.Env, record: dict, params: dict, obs_norm: Any):
    """The policy as ONNX (observation normalizer and action clipping inside)."""
    layout, size = record["observation"]["layout"], record["observation"]["size"]
    spec = env.observation_spec
    symmetric = record["config"].get("symmetric", False)  # absent from older runs
    symmetry = ppo.symmetry_of(env.task, spec) if symmetric else None

    def policy(obs: jax.Array) -> jax.Array:
        terms = _terms(layout, obs[0], spec)
        if obs_norm is not None:
            terms = normalize.apply(env.normalize, obs_norm, terms)
        return ppo.act(params, terms, env.low, env.high, symmetry)[None]

    arg = jax.ShapeDtypeStruct((1, size), jnp.float32)
    return onnx_graph.to_onnx(policy, [arg], ["obs"], ["action"], f"{env.task.name}_policy")


def data_fields(data: Any) -> tuple[list[str], list[Any], Any]:
    """``(MjData names, leaves, treedef)`` of one world's ``mjx.Data``: each leaf
    named as ``MjData`` names it (MJX keeps some under ``_impl``)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(data)
    names = [jax.tree_util.keystr(p).lstrip(".").removeprefix("_impl.") for p, _ in flat]
    return names, [x for _, x in flat], treedef


def info_sources(env: E.Env) -> dict[str, str]:
    """How each leaf of the task's info (by path) evolves over an episode: ``"held"``
    (``update_info`` passes it on as it is, e.g. a command), ``"last_action"`` (it
    becomes the step's action), ``"given"`` (it changes by the task's own schedule,
    from its info and key alone, never from the physics or the action: a command
    redrawn every few seconds, which a robot's operator gives) or ``"state"``
    (anything else)."""
    task = env.task
    info = jax.eval_shape(lambda: restart_info(env))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(info)[0]]
    if task.update_info is None:
        return dict.fromkeys(paths, "held")
    _, data, treedef = data_fields(env.start)
    action = jax.ShapeDtypeStruct((env.action_size,), jnp.float32)
    info_leaves, info_def = jax.tree.flatten(info)
    n = len(data)

    def update(*args):
        d, nd = (
            jax.tree.unflatten(treedef, args[:n]),
            jax.tree.unflatten(treedef, args[n + 1 : 2 * n + 1]),
        )
        i = jax.tree.unflatten(info_def, args[2 * n + 1 :])
        new = task.update_info(env.model.tree, d, args[n], nd, i, jax.random.key(0))
        return jax.tree.leaves(new)

    closed = jax.make_jaxpr(update)(*data, action, *data, *info_leaves)
    jaxpr = closed.jaxpr
    action_var, info_vars = jaxpr.invars[n], jaxpr.invars[2 * n + 1 :]
    made = {v: e for e in jaxpr.eqns for v in e.outvars}
    physical = set(jaxpr.invars[: 2 * n + 1])  # the data before and after, the action
    for e in jaxpr.eqns:  # in order: whatever reads them (sub-programs whole) is physical
        if any(v in physical for v in e.invars if not isinstance(v, jcore.Literal)):
            physical.update(e.outvars)
    sources = {}
    for path, var, out in zip(paths, info_vars, jaxpr.outvars, strict=True):
        eqn = made.get(out)
        if out is var:
            sources[path] = "held"
        elif out is action_var or (
            eqn is not None and eqn.primitive.name == "convert_element_type"
            and eqn.invars[0] is action_var
        ):  # fmt: skip
            sources[path] = "last_action"
        elif out in physical:
            sources[path] = "state"
        else:
            sources[path] = "given"
    return sources


def restart_info(env: E.Env) -> Any:
    """One world's info as a restart draws it (for shapes)."""
    return env.task.initial_info(env.model.tree, env.start, jax.random.key(0))


def observer_graph(env: E.Env) -> tuple[Any, dict]:
    """``(ONNX model, description)``: the task's observation terms of one world, before
    noise and history, from the ``MjData`` fields and the info leaves it reads.

    The description lists the inputs (``{"field", "shape"}``, or ``{"info", "shape",
    "source"}`` with source ``"held"`` or ``"last_action"``: see
    :func:`info_sources`) and the outputs, one per term in sorted order
    (``{"term", "size", "history"}``).

    Raises:
      ValueError: the observation reads something the native ``MjData`` does not
        hold, or task state that changes with the physics (the deploy loop could
        not keep it).
    """
    task = env.task
    names, data, treedef = data_fields(env.start)
    has_info = task.has_info
    info = jax.eval_shape(lambda: restart_info(env)) if has_info else None
    info_flat = jax.tree_util.tree_flatten_with_path(info)[0] if has_info else []
    info_paths = [jax.tree_util.keystr(p) for p, _ in info_flat]
    info_leaves = [x for _, x in info_flat]
    info_def = jax.tree.structure(info) if has_info else None
    model, n = env.model.tree, len(data)
    spec = restart.raw_spec(task, env.model, env.start)
    terms = sorted(spec) if isinstance(spec, dict) else [observations.WHOLE]

    def observe(*args: jax.Array) -> list[jax.Array]:
        d = jax.tree.unflatten(treedef, args[:n])
        if has_info:
            obs = task.observation(model, d, jax.tree.unflatten(info_def, args[n:]))
        else:
            obs = task.observation(model, d)
        obs = obs if isinstance(obs, dict) else {observations.WHOLE: obs}
        return [obs[t].reshape(1, -1) for t in terms]

    args = [*data, *info_leaves]
    used = onnx_graph.used_inputs(observe, args)
    inputs, input_names = [], []
    sources = info_sources(env) if has_info else {}
    for i, (x, u) in enumerate(zip(args, used, strict=True)):
        if not u:
            input_names.append(None)
        elif i < n:
            if not hasattr(mujoco.MjData, names[i]):
                raise ValueError(f"task {task.name!r} observes {names[i]!r}, not in MjData")
            inputs.append({"field": names[i], "shape": list(x.shape)})
            input_names.append(names[i])
        else:
            path = info_paths[i - n]
            if sources[path] == "state":
                raise ValueError(
                    f"task {task.name!r} observes info{path}, which update_info changes with "
                    "the physics: the deploy loop cannot keep it"
                )
            inputs.append({"info": path, "shape": list(x.shape), "source": sources[path]})
            input_names.append(f"info{path}")
    history = dict(env.pipeline.history)
    outputs = [
        {"term": t, "size": int(np.prod((spec[t] if isinstance(spec, dict) else spec).shape)),
         "history": history.get(t, 1)}
        for t in terms
    ]  # fmt: skip
    out_names = [f"term_{i}" for i in range(len(terms))]
    graph = onnx_graph.to_onnx(observe, args, input_names, out_names, f"{task.name}_observer")
    return graph, {"inputs": inputs, "terms": outputs}


def metadata(env: E.Env, record: dict, folder: Path, observer: dict) -> dict:
    task, m = env.task, env.host.mj_model
    key = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, task.keyframe) if task.keyframe else -1
    qpos = m.key_qpos[key] if key >= 0 else m.qpos0
    played = folder / "play.json"
    return {
        "format": deploy.FORMAT,
        "task": task.name,
        "observation": record["observation"],
        "action": {**record["action"], "meaning": "MjData.ctrl, clipped to the bounds"},
        "control_dt": record["control_dt"],
        "substeps": task.substeps,
        "max_episode_steps": task.max_episode_steps,
        "default_qpos": np.asarray(qpos).tolist(),
        "normalizer_inside": env.normalize is not None,
        "observer": observer,
        "play": json.loads(played.read_text()) if played.is_file() else None,
        "run": {k: record[k] for k in ("trainer", "seed", "updates_done", "env_steps_done")},
        "versions": record["versions"],
    }


def export(folder: str | os.PathLike, path: str | os.PathLike) -> dict:
    """Writes the run in ``folder`` as ONNX to ``path`` (and its observer beside it);
    returns the metadata."""
    path = Path(path)
    if path.suffix != ".onnx":
        raise ValueError(f"the ONNX file's name must end in .onnx, got {str(path)!r}")
    record = run_dir.load_record(folder)
    normalizer_inside = None  # the env's (the project's PPO) unless the trainer has its own
    if record.get("trainer") == "ppo":
        record, config, params, obs_norm = play.load_policy(folder)
        env = play.nominal_env(config, 1)
        policy = policy_graph(env, record, params, obs_norm)
    else:
        module = play.trainer_module(record, folder)
        env = play.record_env(record, 1)
        policy, normalizer_inside = module.policy_graph(folder, record, env)
    beside = deploy.observer_path(path)
    try:
        observer, described = observer_graph(env)
        described = {"file": beside.name, **described}
    except ValueError as e:
        observer, described = None, {"missing": str(e)}
    meta = metadata(env, record, Path(folder), described)
    if normalizer_inside is not None:
        meta["normalizer_inside"] = normalizer_inside
    onnx_graph.helper.set_model_props(policy, {deploy.METADATA_KEY: json.dumps(meta)})
    path.parent.mkdir(parents=True, exist_ok=True)
    if observer is not None:
        _save(observer, beside)
    _save(policy, path)
    return meta


def _save(model: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
