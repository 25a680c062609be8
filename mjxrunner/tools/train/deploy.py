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
    """An exported policy and its observer.

    Args:
      path: the policy's ``.onnx`` file, as ``mjxrunner export`` wrote it.

    Raises:
      ValueError: no such file, not ONNX, no ``"mjxrunner"`` metadata (not exported
        by ``mjxrunner export``) or another format, or no observer beside it.

    Attributes:
      meta: the metadata (task, observation layout, action bounds, control period,
        ``substeps``, observer inputs, what ``play`` measured).
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
        self.inputs = [(x["field"], tuple(x["shape"])) for x in observer["inputs"]]

    def observe(self, data: mujoco.MjData) -> np.ndarray:
        """``(1, n)`` float32: the task's observation of ``data``."""
        feeds = {
            f: np.asarray(getattr(data, f), np.float32).reshape(shape) for f, shape in self.inputs
        }
        return self.observer.run(None, feeds)[0]

    def control(self, data: mujoco.MjData) -> np.ndarray:
        """``(nu,)``: the control the policy gives for ``data``."""
        return self.session.run(None, {"obs": self.observe(data)})[0][0]


def run_episode(
    policy: Policy,
    model: mujoco.MjModel,
    start: dict[str, np.ndarray],
    steps: int,
    fields: list[tuple[str, tuple[int, ...]]] = (),
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Runs ``steps`` control steps from ``start`` (``qpos``, ``qvel``, ``act``).

    Returns:
      ``(trajectory, actions)``: each of ``fields`` (``MjData`` name and the shape to
      give it) at every control time, ``(steps + 1, *shape)``, and the controls
      applied, ``(steps, nu)``.
    """
    data = mujoco.MjData(model)
    for name in START_FIELDS:
        getattr(data, name)[:] = start[name]
    mujoco.mj_forward(model, data)
    substeps = int(policy.meta["substeps"])

    def snapshot() -> dict:
        return {f: np.array(getattr(data, f)).reshape(shape) for f, shape in fields}

    snaps, actions = [snapshot()], []
    for _ in range(steps):
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
    p.add_argument("--starts", required=True, help=".npz of qpos, qvel, act, one row each")
    p.add_argument("--steps", type=int, help="control steps (default: the task's episode)")
    p.add_argument("--out", required=True, help=".npz of qpos and qvel, (episodes, steps+1, .)")
    args = p.parse_args(argv)
    policy = Policy(args.policy)
    model = mujoco.MjModel.from_xml_path(args.scene)
    steps = args.steps or policy.meta["max_episode_steps"]
    with np.load(args.starts) as f:
        starts = {k: f[k] for k in START_FIELDS}
    fields = [("qpos", (model.nq,)), ("qvel", (model.nv,))]
    runs = [
        run_episode(policy, model, {k: v[i] for k, v in starts.items()}, steps, fields)[0]
        for i in range(len(starts["qpos"]))
    ]
    np.savez(args.out, **{f: np.stack([r[f] for r in runs]) for f, _ in fields})
    print(json.dumps({"episodes": len(runs), "jax_loaded": "jax" in sys.modules}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
