"""The deploy loop: an exported policy driving plain MuJoCo, as a robot's computer
would run it.

This module imports NumPy, MuJoCo and onnxruntime only (no JAX, nothing of
mjxrunner's engine), so it can be copied beside an exported policy and run there:

    python deploy.py POLICY.onnx SCENE.xml --starts starts.npz --out trajectory.npz

A policy exported by ``mjxrunner export`` is two ONNX files: the policy itself
(``obs`` ``(1, n)`` float32 to ``action`` ``(1, nu)``, the observation normalizer and
the clipping to the control range inside) and, beside it, the task's observation as
a graph of the ``MjData`` fields it reads (``*.observer.onnx``). The policy's
metadata (key ``"mjxrunner"``, JSON) says which fields, the control period, the
observation layout and the action's meaning. Each control step the loop feeds those
fields, runs both graphs, writes the action into ``ctrl`` and takes the task's
``substeps`` of ``mj_step``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import mujoco
import numpy as np
import onnxruntime

METADATA_KEY = "mjxrunner"
FORMAT = 1
START_FIELDS = ("qpos", "qvel", "act")


def observer_path(policy_path: str | os.PathLike) -> Path:
    """The observer file exported beside ``policy_path`` (``x.onnx`` -> ``x.observer.onnx``)."""
    path = Path(policy_path)
    return path.with_name(path.stem + ".observer.onnx")


def _session(path: Path) -> onnxruntime.InferenceSession:
    if not path.is_file():
        raise ValueError(f"no ONNX file at {str(path)!r}")
    try:
        return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise ValueError(f"{str(path)!r} is not an ONNX model onnxruntime can run: {e}") from e


class Policy:
    """An exported policy and its observer, with the state the loop keeps between
    control steps: each term's history, the last action, the held task state.

    Args:
      path: the policy's ``.onnx`` file, as ``mjxrunner export`` wrote it.

    Raises:
      ValueError: no such file, not ONNX, no ``"mjxrunner"`` metadata (not exported
        by ``mjxrunner export``) or another format, or no observer beside it.

    Attributes:
      meta: the metadata (task, observation layout, action bounds, control period,
        ``substeps``, the observer's inputs and terms, what ``play`` measured).
    """

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        self.session = _session(path)
        props = self.session.get_modelmeta().custom_metadata_map
        if METADATA_KEY not in props:
            raise ValueError(
                f"{str(path)!r} has no {METADATA_KEY!r} metadata: export a run with "
                "`mjxrunner export RUN_DIR --onnx FILE`"
            )
        self.meta = json.loads(props[METADATA_KEY])
        if self.meta.get("format") != FORMAT:
            raise ValueError(f"{str(path)!r} has format {self.meta.get('format')!r}, not {FORMAT}")
        observer = self.meta["observer"]
        if "file" not in observer:
            raise ValueError(f"{str(path)!r} has no observer: {observer['missing']}")
        self.observer = _session(path.with_name(observer["file"]))
        self.inputs = observer["inputs"]
        self.terms = observer["terms"]
        # the task state the loop is given: at the start (held), or at any step (given)
        given = ("held", "given")
        self.held_inputs = [x["info"] for x in self.inputs if x.get("source") in given]
        self._held: dict[str, np.ndarray] | None = None  # until reset() gives it
        self._last_action = np.zeros(len(self.meta["action"]["low"]), np.float32)
        self._history: list[list[np.ndarray]] | None = None

    def reset(self, held: dict[str, np.ndarray] | None = None) -> None:
        """Starts an episode: no history, a zero last action, and ``held`` (by info
        path, e.g. ``"['command']"``) for the task state given at the start."""
        held = held or {}
        missing = [p for p in self.held_inputs if p not in held]
        if missing:
            raise ValueError(f"the policy observes task state {missing}; give it to reset()")
        self._held = {p: np.asarray(held[p], np.float32) for p in self.held_inputs}
        self._last_action = np.zeros(len(self.meta["action"]["low"]), np.float32)
        self._history: list[list[np.ndarray]] | None = None

    def give(self, values: dict[str, np.ndarray]) -> None:
        """Changes task state the policy observes (by info path) from the next
        observation on: an operator's new command."""
        if self._held is None:
            raise ValueError("give() task state after reset()")
        unknown = [p for p in values if p not in self._held]
        if unknown:
            raise ValueError(
                f"the policy observes no task state {unknown}; it has {self.held_inputs}"
            )
        self._held.update({p: np.asarray(v, np.float32) for p, v in values.items()})

    def _feed(self, data: mujoco.MjData, x: dict) -> np.ndarray:
        if "field" in x:
            value = getattr(data, x["field"])
        elif x["source"] in ("held", "given"):
            if self._held is None:
                raise ValueError(f"the policy observes task state {x['info']}: call reset()")
            value = self._held[x["info"]]
        else:  # the last action
            value = self._last_action
        return np.asarray(value, np.float32).reshape(x["shape"])

    def observe(self, data: mujoco.MjData) -> np.ndarray:
        """``(1, n)`` float32: what the policy sees of ``data``, each term's history
        (oldest first) in place of the term where it has one."""
        feeds = {x.get("field") or f"info{x['info']}": self._feed(data, x) for x in self.inputs}
        terms = [t[0] for t in self.observer.run(None, feeds)]
        if self._history is None:  # an episode's first observation fills its history
            pairs = zip(terms, self.terms, strict=True)
            self._history = [[v] * spec["history"] for v, spec in pairs]
        else:
            self._history = [[*h[1:], v] for h, v in zip(self._history, terms, strict=True)]
        return np.concatenate([np.concatenate(h) for h in self._history])[None]

    def control(self, data: mujoco.MjData) -> np.ndarray:
        """``(nu,)``: the control the policy gives for ``data``."""
        action = self.session.run(None, {"obs": self.observe(data)})[0][0]
        self._last_action = action
        return action


def run_episode(
    policy: Policy,
    model: mujoco.MjModel,
    start: dict[str, np.ndarray],
    steps: int,
    fields: list[tuple[str, tuple[int, ...]]] = (),
    held: dict[str, np.ndarray] | None = None,
    schedule: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Runs ``steps`` control steps from ``start`` (``qpos``, ``qvel``, ``act``),
    with ``held`` the task state given at the start (see :meth:`Policy.reset`) and
    ``schedule`` the task state given at each step (by info path, ``(steps, ...)``:
    a command that changes, see :meth:`Policy.give`).

    Returns:
      ``(trajectory, actions)``: each of ``fields`` (``MjData`` name and the shape to
      give it) at every control time, ``(steps + 1, *shape)``, and the controls
      applied, ``(steps, nu)``.
    """
    policy.reset(held)
    data = mujoco.MjData(model)
    for name in START_FIELDS:
        getattr(data, name)[:] = start[name]
    mujoco.mj_forward(model, data)
    substeps = int(policy.meta["substeps"])

    def snapshot() -> dict:
        return {f: np.array(getattr(data, f)).reshape(shape) for f, shape in fields}

    snaps, actions = [snapshot()], []
    for t in range(steps):
        if schedule:
            policy.give({p: v[t] for p, v in schedule.items()})
        action = policy.control(data)
        data.ctrl[:] = action
        actions.append(action)
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        snaps.append(snapshot())
    trajectory = {f: np.stack([s[f] for s in snaps]) for f, _ in fields}
    return trajectory, np.stack(actions) if actions else np.zeros((0, model.nu))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run an exported policy on plain MuJoCo.")
    p.add_argument("policy", help="the policy's .onnx file")
    p.add_argument("scene", help="the task's MJCF scene")
    p.add_argument(
        "--starts",
        required=True,
        help=".npz of qpos, qvel, act, one row per episode, and of the held task state by "
        "its info path (e.g. \"['command']\")",
    )
    p.add_argument("--steps", type=int, help="control steps (default: the task's episode)")
    p.add_argument("--out", required=True, help=".npz of qpos and qvel, (episodes, steps+1, .)")
    args = p.parse_args(argv)
    policy = Policy(args.policy)
    model = mujoco.MjModel.from_xml_path(args.scene)
    steps = args.steps or policy.meta["max_episode_steps"]
    with np.load(args.starts) as f:
        starts = {k: f[k] for k in f.files}
    fields = [("qpos", (model.nq,)), ("qvel", (model.nv,))]
    runs = []
    for i in range(len(starts["qpos"])):
        one = {k: v[i] for k, v in starts.items()}
        held = {p: one[p] for p in policy.held_inputs}
        runs.append(run_episode(policy, model, one, steps, fields, held)[0])
    np.savez(args.out, **{f: np.stack([r[f] for r in runs]) for f, _ in fields})
    print(json.dumps({"episodes": len(runs), "jax_loaded": "jax" in sys.modules}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
