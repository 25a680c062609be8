"""``mjxrunner export``: a trained run's policy as ONNX, for a robot or a simulator
without JAX.

Two files, both written by :mod:`.onnx_graph` from the JAX functions the env runs:

- ``FILE`` (the policy): input ``obs`` ``(1, n)`` float32, the task's observation
  terms flattened in the order of the metadata's layout (sorted term names); output
  ``action`` ``(1, nu)``, the control to write into ``MjData.ctrl``. The
  observation normalizer (frozen at the run's statistics) and the clipping to the
  control range are inside; the action is the Gaussian's mean.
- ``FILE``'s observer (``x.onnx`` -> ``x.observer.onnx``): the task's observation as
  a graph of the ``MjData`` fields it reads (inputs named after them, float32), what
  a robot's state estimate would give. Not written for a task whose observation
  reads per-world task state (a command) or keeps a history; the metadata says why.

The policy's metadata (key ``"mjxrunner"``, JSON; see :mod:`.deploy`) holds the
task, observation layout and size, action bounds, control period and ``substeps``,
the default joint positions (the task's keyframe), the observer's inputs, the run's
record and the return ``play`` measured, if it was run. Everything is checked
before anything is written.
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

from mjxrunner.kit import normalize
from mjxrunner.rl import env as E
from mjxrunner.tools.train import deploy, onnx_graph, play, ppo


def _terms(layout: list[dict], flat: jax.Array, spec: Any) -> Any:
    """The flat observation ``(n,)`` back as the env's terms (or its one array)."""
    if not isinstance(spec, dict):
        return flat
    return {x["term"]: flat[x["offset"] : x["offset"] + x["size"]] for x in layout}


def policy_graph(env: E.Env, record: dict, params: dict, obs_norm: Any):
    """The policy as ONNX (observation normalizer and action clipping inside)."""
    layout, size = record["observation"]["layout"], record["observation"]["size"]
    spec = env.observation_spec

    def policy(obs: jax.Array) -> jax.Array:
        terms = _terms(layout, obs[0], spec)
        if obs_norm is not None:
            terms = normalize.apply(env.normalize, obs_norm, terms)
        return ppo.act(params, terms, env.low, env.high)[None]

    arg = jax.ShapeDtypeStruct((1, size), jnp.float32)
    return onnx_graph.to_onnx(policy, [arg], ["obs"], ["action"], f"{env.task.name}_policy")


def observer_graph(env: E.Env) -> tuple[Any, list[dict]]:
    """``(ONNX model, inputs)``: the task's observation of one world from the
    ``MjData`` fields it reads.

    Raises:
      ValueError: a task with per-world state or observation history, or one that
        reads something the native ``MjData`` does not hold.
    """
    task = env.task
    if task.has_info:
        raise ValueError(f"task {task.name!r} observes per-world task state (info)")
    if env.pipeline.history:
        raise ValueError(f"task {task.name!r} keeps an observation history")
    flat, treedef = jax.tree_util.tree_flatten_with_path(env.start)
    fields = [jax.tree_util.keystr(p).lstrip(".").removeprefix("_impl.") for p, _ in flat]
    leaves = [jax.ShapeDtypeStruct(x.shape, x.dtype) for _, x in flat]
    model = env.model.tree

    def observe(*leaves: jax.Array) -> jax.Array:
        data = jax.tree.unflatten(treedef, leaves)
        return ppo.flat_obs(task.observation(model, data))[None]

    used = onnx_graph.used_inputs(observe, leaves)
    names = [f if u else None for f, u in zip(fields, used, strict=True)]
    foreign = [f for f in names if f is not None and not hasattr(mujoco.MjData, f)]
    if foreign:
        raise ValueError(f"task {task.name!r} observes {foreign}, which MjData does not hold")
    graph = onnx_graph.to_onnx(observe, leaves, names, ["obs"], f"{task.name}_observer")
    inputs = [
        {"field": f, "shape": list(x.shape)}
        for f, x in zip(names, leaves, strict=True)
        if f is not None
    ]
    return graph, inputs


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
    record, config, params, obs_norm = play.load_policy(folder)
    env = play.nominal_env(config, 1)
    policy = policy_graph(env, record, params, obs_norm)
    beside = deploy.observer_path(path)
    try:
        observer, inputs = observer_graph(env)
        described = {"file": beside.name, "inputs": inputs}
    except ValueError as e:
        observer, described = None, {"missing": str(e)}
    meta = metadata(env, record, Path(folder), described)
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
