"""``mjxrunner train``: the project's PPO with a progress bar, logs and checkpoints.

Updates run in jitted chunks of ``save_every`` (one compiled program, reused for
every chunk); after each chunk the run's folder gets the chunk's metrics (one JSON
line per update in ``metrics.jsonl``, and TensorBoard scalars under ``tb/`` when
``tensorboardX`` is installed) and a checkpoint of everything the run carries
(:mod:`.run_dir`). ``resume`` continues from the last checkpoint with the same
compiled chunk, so a run stopped and resumed ends with the same arrays, bit for bit,
as one that never stopped. The planned number of updates is part of the run (the
learning rate anneals over it) and is rounded up to whole chunks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import jax
import numpy as np

from mjxrunner import tasks
from mjxrunner.engine import cpu_fusion, cpu_pool
from mjxrunner.tools.train import ppo, run_dir


def versions() -> dict[str, str]:
    from importlib import metadata

    import mujoco

    return {"mjxrunner": metadata.version("mjxrunner"), "mujoco": mujoco.__version__,
            "jax": jax.__version__}  # fmt: skip


def plan(config: ppo.PPOConfig, steps: int, save_every: int) -> tuple[ppo.PPOConfig, int]:
    """``(config, chunk)``: ``config`` with the updates that give at least ``steps`` env
    steps, in whole chunks of ``min(save_every, updates)``."""
    if steps < 1 or save_every < 1:
        raise ValueError(f"steps and save_every must be >= 1, got {steps} and {save_every}")
    updates = max(1, math.ceil(steps / config.steps_per_update))
    chunk = min(save_every, updates)
    return dataclasses.replace(config, num_updates=math.ceil(updates / chunk) * chunk), chunk


def record_of(config: ppo.PPOConfig, env: Any, seed: int, chunk: int, done: int) -> dict:
    """What the run folder says about the run (see :mod:`.run_dir`)."""
    spec = env.observation_spec
    terms = spec if isinstance(spec, dict) else {"": spec}
    layout, offset = [], 0
    for name in sorted(terms) if isinstance(spec, dict) else [""]:
        size = math.prod(terms[name].shape)
        layout.append({"term": name, "offset": offset, "size": size})
        offset += size
    return {
        "trainer": "ppo",
        "task": config.task,
        "config": dataclasses.asdict(config),
        "seed": seed,
        "chunk": chunk,
        "updates_done": done,
        "env_steps_done": done * config.steps_per_update,
        "observation": {"size": offset, "layout": layout},
        "action": {"low": np.asarray(env.low).tolist(), "high": np.asarray(env.high).tolist()},
        "control_dt": float(env.host.mj_model.opt.timestep) * env.task.substeps,
        "backend": env.config.backend.info(),
        "versions": versions(),
    }


def config_of(record: dict) -> ppo.PPOConfig:
    """The trainer's config a record holds (tuples restored from JSON lists)."""
    fields = dict(record["config"])
    for name in ("latency", "pushes"):
        if fields.get(name) is not None:
            fields[name] = tuple(fields[name])
    return ppo.PPOConfig(**fields)


class _Log:
    """``metrics.jsonl`` always; TensorBoard scalars when tensorboardX is installed;
    Weights & Biases when asked (``wandb``: its project), in its folder ``wandb/``."""

    def __init__(self, folder: Path, done: int, tensorboard: bool, wandb: str | None = None):
        folder.mkdir(parents=True, exist_ok=True)
        self.lines = folder / "metrics.jsonl"
        if self.lines.exists():  # lines past the checkpoint, from a run stopped mid-save
            lines = self.lines.read_text().splitlines()
            kept = [x for x in lines if json.loads(x)["update"] <= done]
            self.lines.write_text("".join(x + "\n" for x in kept))
        self.writer = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                print("tensorboardX is not installed (pip install 'mjxrunner[train]'): "
                      "logging to metrics.jsonl only", file=sys.stderr)  # fmt: skip
            else:
                self.writer = SummaryWriter(str(folder / "tb"))
        self.wandb = None
        if wandb is not None:
            self.wandb = start_wandb(wandb, folder)

    def write(self, first: int, metrics: dict, steps_per_update: int, wall_s: float) -> None:
        n = len(next(iter(metrics.values())))
        with open(self.lines, "a") as f:
            for i in range(n):
                update = first + i + 1
                row = {k: float(v[i]) for k, v in metrics.items()}
                f.write(json.dumps({"update": update, "wall_s": round(wall_s, 3), **row}) + "\n")
                finite = {f"train/{k}": v for k, v in row.items() if math.isfinite(v)}
                if self.writer is not None:
                    for k, v in finite.items():
                        self.writer.add_scalar(k, v, update * steps_per_update)
                if self.wandb is not None:
                    self.wandb.log({**finite, "env_steps": update * steps_per_update}, step=update)
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()


def start_wandb(project: str, folder: Path) -> Any:
    """A Weights & Biases run of ``project`` logging into ``folder``, resumed under the
    same id when the folder already has one (``WANDB_MODE=offline`` keeps it local).

    Raises:
      ValueError: wandb is not installed.
    """
    try:
        import wandb
    except ImportError:
        raise ValueError("--wandb needs the wandb package: pip install wandb") from None
    id_file = folder / "wandb_id"
    run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
    id_file.write_text(run_id)
    return wandb.init(project=project, dir=str(folder), id=run_id, resume="allow",
                      name=folder.name)  # fmt: skip


def train(
    config: ppo.PPOConfig,
    out: str | os.PathLike,
    *,
    seed: int = 0,
    chunk: int = 10,
    stop_after: int | None = None,
    tensorboard: bool = True,
    wandb: str | None = None,
    progress: bool = True,
) -> dict:
    """Trains a new run into ``out`` (which must not hold one); returns its record.

    Called before JAX has run anything in the process (``mjxrunner train``), it gives
    XLA's CPU pool a thread per CPU (:func:`mjxrunner.engine.cpu_pool.widen`): the
    updates are matrix products."""
    cpu_pool.widen()
    out = run_dir.refuse_existing(out)
    tasks.get(config.task)  # an unknown task is refused before anything is written
    parts = ppo.make_parts(config)
    carry = jax.jit(parts[1])(jax.random.key(seed))
    return _loop(config, out, parts, carry, seed=seed, chunk=chunk, done=0,
                 stop_after=stop_after, tensorboard=tensorboard, wandb=wandb,
                 progress=progress)  # fmt: skip


def resume(
    folder: str | os.PathLike,
    *,
    stop_after: int | None = None,
    tensorboard: bool = True,
    wandb: str | None = None,
    progress: bool = True,
) -> dict:
    """Continues the run in ``folder`` from its last checkpoint to its planned updates
    (XLA's pool as :func:`train` sizes it)."""
    cpu_pool.widen()
    record = run_dir.load_record(folder, trainer="ppo")
    config = config_of(record)
    parts = ppo.make_parts(config)
    template = jax.eval_shape(parts[1], jax.random.key(record["seed"]))
    carry = run_dir.load_carry(folder, template, record)
    return _loop(config, Path(folder), parts, carry, seed=record["seed"], chunk=record["chunk"],
                 done=record["updates_done"], stop_after=stop_after, tensorboard=tensorboard,
                 wandb=wandb, progress=progress)  # fmt: skip


def _loop(
    config, out, parts, carry, *, seed, chunk, done, stop_after, tensorboard, progress, wandb=None
):
    from tqdm import tqdm

    env, _, one_update = parts
    segment = jax.jit(
        lambda carry: jax.lax.scan(one_update, carry, None, length=chunk),
        donate_argnames="carry",
        compiler_options=cpu_fusion.compiler_options(env.impl),  # impl c: emitters on
    )
    last = config.num_updates if stop_after is None else min(config.num_updates, done + stop_after)
    log = _Log(out, done, tensorboard, wandb) if done < last else None
    bar = tqdm(total=config.num_updates, initial=done, unit="update", disable=not progress,
               desc=config.task, file=sys.stderr)  # fmt: skip
    t0 = time.perf_counter()
    record = record_of(config, env, seed, chunk, done)
    try:
        while done < last:
            carry, metrics = segment(carry)
            metrics = jax.device_get(metrics)
            log.write(done, metrics, config.steps_per_update, time.perf_counter() - t0)
            done += chunk
            record = record_of(config, env, seed, chunk, done)
            run_dir.save(out, record, carry)
            returns = [r for r in metrics["mean_return"] if not math.isnan(r)]
            bar.set_postfix(mean_return=f"{np.mean(returns):.1f}" if returns else "-")
            bar.update(chunk)
    finally:
        bar.close()
        if log is not None:
            log.close()
    return record
