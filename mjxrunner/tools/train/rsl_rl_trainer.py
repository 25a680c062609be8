"""``mjxrunner train --trainer rsl_rl``: rsl_rl's own PPO (``OnPolicyRunner``) on the
rsl_rl door, into a run folder that ``play``, ``export`` and ``sim2sim`` read.

Why here: rsl_rl trains most robot policies that leave Isaac Lab for a robot. Run
through :mod:`mjxrunner.doors.rsl_rl` and read back by the project's ``play`` and
deploy check, a trained policy shows that the door's conventions (same-step
autoreset, ``time_outs``, observation groups) give a policy that also works on
plain MuJoCo.

The run folder holds:

- ``run.json``: the record of :func:`.trainer.record_of` (task, config, seed,
  updates done, observation layout and size, action bounds, control period,
  versions) with ``trainer: "rsl_rl"`` and ``checkpoint``, the last model file;
- ``model_<updates>.pt``: rsl_rl's own checkpoints (``OnPolicyRunner.save``: actor
  and critic with their observation normalizers, optimizer, update count), which
  ``OnPolicyRunner.load`` reads as it reads any rsl_rl run;
- ``metrics.jsonl`` (and TensorBoard scalars under ``tb/``): per update, the mean
  return of the episodes that ended in its rollout, rsl_rl's (adaptive) learning
  rate and the policy's mean standard deviation.

Resume loads the last checkpoint into a new runner and continues the update count
to the planned total. It is not bit for bit, unlike the project's PPO: the worlds
restart from fresh episodes and torch's random stream is seeded anew, since an
rsl_rl checkpoint holds neither.

The deterministic policy, for ``play`` and ``export``, is rsl_rl's own export
module of the actor (``MLPModel.as_onnx``: observation normalizer, MLP, the
Gaussian's mean) followed by the clip to the action bounds: run by torch on the
host in ``play``, written by ``torch.onnx.export`` in ``export``, so both compute
the same function.

Imports torch and rsl_rl (the extra ``mjxrunner[rsl_rl]``); the command line
imports this module only for a run of this trainer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rsl_rl.runners import OnPolicyRunner
from rsl_rl.utils import resolve_class
from tensordict import TensorDict

from mjxrunner import tasks
from mjxrunner.doors.rsl_rl import RslRlVecEnv
from mjxrunner.tools.train import onnx_graph, ppo, run_dir, trainer

NAME = "rsl_rl"
WHOLE_GROUP = "policy"  # the door's one group of a task without observation terms


@dataclasses.dataclass(frozen=True)
class Config:
    """rsl_rl's PPO settings and the env's; every field is recorded in ``run.json``.

    The defaults are sized for small tasks: two hidden layers of 64 and
    ``entropy_coef`` 0 (rsl_rl's default is 0.01). Over 80 updates (about 160 k env
    steps) they hold cartpole balance's pole for 420 to 500 of its 500 steps on
    seeds 0-2, where a random policy drops it after ~66.

    Attributes:
      task: registered task name.
      num_envs: parallel worlds.
      rollout_steps: env steps per world between updates (``num_steps_per_env``).
      num_updates: learning iterations; total env steps is ``num_updates *
        steps_per_update``.
      epochs, minibatches: passes over each rollout and minibatches per pass.
      gamma, gae_lambda, clip, value_coef, entropy_coef, max_grad_norm: PPO's.
      learning_rate: the first step size; ``schedule`` ``"adaptive"`` (rsl_rl's
        default) then adapts it to keep the KL divergence near ``desired_kl``.
      hidden: width of the actor's and critic's two hidden layers.
      activation: their activation, by rsl_rl's name.
      init_std: initial standard deviation of the Gaussian policy.
      normalize_obs: rsl_rl's own observation normalizer in actor and critic
        (exported inside the ONNX policy).
      impl: the env's physics, ``"jax"``, ``"warp"`` or ``"c"``.
      num_threads: impl ``"c"``'s threads (None: every core).
    """

    task: str = "cartpole_balance"
    num_envs: int = 64
    rollout_steps: int = 32
    num_updates: int = 80
    epochs: int = 5
    minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    value_coef: float = 1.0
    entropy_coef: float = 0.0
    learning_rate: float = 1e-3
    schedule: str = "adaptive"
    desired_kl: float = 0.01
    max_grad_norm: float = 1.0
    hidden: int = 64
    activation: str = "elu"
    init_std: float = 1.0
    normalize_obs: bool = True
    impl: str = "c"
    num_threads: int | None = None

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.rollout_steps

    def runner_cfg(self, groups: list[str]) -> dict:
        """``OnPolicyRunner``'s ``train_cfg``; ``groups``: the observation groups, in
        the order the actor concatenates them (the record's layout order)."""
        mlp = {
            "class_name": "MLPModel",
            "hidden_dims": [self.hidden, self.hidden],
            "activation": self.activation,
            "obs_normalization": self.normalize_obs,
        }
        gaussian = {"class_name": "GaussianDistribution", "init_std": self.init_std}
        return {
            "num_steps_per_env": self.rollout_steps,
            "save_interval": self.num_updates,  # unused: this module saves the checkpoints
            "obs_groups": {"actor": list(groups), "critic": list(groups)},
            "algorithm": {
                "class_name": "PPO",
                "num_learning_epochs": self.epochs,
                "num_mini_batches": self.minibatches,
                "clip_param": self.clip,
                "gamma": self.gamma,
                "lam": self.gae_lambda,
                "value_loss_coef": self.value_coef,
                "entropy_coef": self.entropy_coef,
                "learning_rate": self.learning_rate,
                "max_grad_norm": self.max_grad_norm,
                "schedule": self.schedule,
                "desired_kl": self.desired_kl,
            },
            "actor": {**mlp, "distribution_cfg": gaussian},
            "critic": mlp,
        }


def config_of(record: dict) -> Config:
    """The config a record of this trainer holds."""
    return Config(**record["config"])


def _groups(layout: list[dict]) -> list[str]:
    """The observation groups of the record's layout, in its order (sorted terms)."""
    return [x["term"] or WHOLE_GROUP for x in layout]


def _versions() -> dict[str, str]:
    from importlib import metadata

    ours = {"rsl_rl": metadata.version("rsl-rl-lib"), "torch": torch.__version__}
    return {**trainer.versions(), **ours}


def _record(config: Config, env: Any, seed: int, chunk: int, done: int) -> dict:
    record = trainer.record_of(config, env, seed, chunk, done)
    return {**record, "trainer": NAME, "checkpoint": f"model_{done}.pt", "versions": _versions()}


def load_record(folder: str | os.PathLike) -> dict:
    """The record of the rsl_rl run in ``folder`` (:func:`.run_dir.load_record`)."""
    return run_dir.load_record(folder, trainer=NAME)


def _runner(config: Config, seed: int) -> Any:
    """A new ``OnPolicyRunner`` on ``config.num_envs`` fresh worlds."""
    torch.manual_seed(seed)
    vec = RslRlVecEnv(
        config.task, config.num_envs, seed=seed, impl=config.impl, num_threads=config.num_threads
    )
    groups = sorted(vec.env.single_observation_space.spaces)  # the record's layout order
    with contextlib.redirect_stdout(sys.stderr):  # rsl_rl prints its models: keep stdout clean
        return OnPolicyRunner(vec, config.runner_cfg(groups), log_dir=None, device=str(vec.device))


def train(
    config: Config,
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
    A checkpoint is written after every ``chunk`` updates."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a rsl_rl_trainer.Config, got {type(config).__name__}")
    out = run_dir.refuse_existing(out)
    tasks.get(config.task)  # an unknown task is refused before anything is written
    runner = _runner(config, seed)
    return _loop(config, out, runner, seed=seed, chunk=chunk, done=0, stop_after=stop_after,
                 tensorboard=tensorboard, wandb=wandb, progress=progress)  # fmt: skip


def resume(
    folder: str | os.PathLike,
    *,
    stop_after: int | None = None,
    tensorboard: bool = True,
    wandb: str | None = None,
    progress: bool = True,
) -> dict:
    """Continues the run in ``folder`` from its last checkpoint to its planned
    updates (not bit for bit: see the module's docstring)."""
    folder = Path(folder)
    record = load_record(folder)
    config, done = config_of(record), record["updates_done"]
    # A seed of its own for the continuation: the fresh worlds and torch's stream
    # do not replay the run's first episodes.
    runner = _runner(config, record["seed"] + done)
    _load_into(runner, folder, record)
    return _loop(config, folder, runner, seed=record["seed"], chunk=record["chunk"], done=done,
                 stop_after=stop_after, tensorboard=tensorboard, wandb=wandb,
                 progress=progress)  # fmt: skip


# What torch.load and load_state_dict raise for a damaged or mismatched checkpoint.
_DAMAGED = (OSError, EOFError, RuntimeError, KeyError, ValueError, pickle.UnpicklingError)


def _checkpoint(folder: Path, record: dict) -> Path:
    path = folder / record["checkpoint"]
    if not path.is_file():
        raise run_dir.RunError(f"the checkpoint {str(path)!r} of the run is missing")
    return path


def _load_into(runner: Any, folder: Path, record: dict) -> None:
    """rsl_rl's own ``OnPolicyRunner.load`` of the run's last checkpoint."""
    path = _checkpoint(folder, record)
    try:
        runner.load(str(path), map_location=runner.device)
    except _DAMAGED as e:
        raise run_dir.RunError(
            f"{str(path)!r} is truncated or does not fit the record's config: {e}"
        ) from e
    if runner.current_learning_iteration != record["updates_done"]:
        raise run_dir.RunError(
            f"{str(path)!r} holds update {runner.current_learning_iteration}; the record "
            f"says {record['updates_done']}"
        )


@contextlib.contextmanager
def _one_torch_thread(device: str):
    """One intra-op torch thread while training on a CPU: the MLPs are small, and
    torch's threads spin against the env's own (on 2 loaded cores, an update took
    ~10x as long with two). Torch's setting is the process's: it is restored."""
    if device != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _loop(config, out, runner, *, seed, chunk, done, stop_after, tensorboard, progress, wandb=None):
    from tqdm import tqdm

    vec = runner.env.env  # the TorchVecEnv under rsl_rl's VecEnv
    env = vec.env
    last = config.num_updates if stop_after is None else min(config.num_updates, done + stop_after)
    log = trainer._Log(out, done, tensorboard, wandb) if done < last else None
    bar = tqdm(total=config.num_updates, initial=done, unit="update", disable=not progress,
               desc=f"{config.task} (rsl_rl)", file=sys.stderr)  # fmt: skip
    t0 = time.perf_counter()
    record = _record(config, env, seed, chunk, done)
    rows: dict[str, list[float]] = {}
    try:
        stats = vec.episode_statistics()
        with _one_torch_thread(runner.device):
            while done < last:
                row, stats = _update(runner, vec, stats)
                done += 1
                runner.current_learning_iteration = done
                for k, v in row.items():
                    rows.setdefault(k, []).append(v)
                if done % chunk == 0 or done == last:
                    log.write(done - len(rows["mean_return"]), rows, config.steps_per_update,
                              time.perf_counter() - t0)  # fmt: skip
                    rows = {}
                    record = _record(config, env, seed, chunk, done)
                    _save(runner, out, record)
                if row["episodes"]:
                    bar.set_postfix(mean_return=f"{row['mean_return']:.1f}")
                bar.update(1)
    finally:
        bar.close()
        if log is not None:
            log.close()
    return record


def _update(runner: Any, vec: Any, before: dict) -> tuple[dict, dict]:
    """One update (rollout and learning) and its metrics row; ``before``: the env's
    episode statistics before it, whose successor is returned too."""
    # One update per learn() call, so that every update has its row. (learn() leaves
    # the counter at the update's index; the loop sets it to the count.)
    runner.learn(num_learning_iterations=1)
    after = vec.episode_statistics()
    ended = int(after["completed"].sum() - before["completed"].sum())
    returns = float(after["return_sum"].sum() - before["return_sum"].sum())
    with torch.no_grad():
        std = float(runner.alg.get_policy().output_std.mean())
    row = {
        "mean_return": returns / ended if ended else math.nan,  # episodes ended in it
        "episodes": ended,
        "learning_rate": float(runner.alg.learning_rate),
        "action_std": std,
    }
    return row, after


def _save(runner: Any, folder: Path, record: dict) -> None:
    """rsl_rl's checkpoint, then the record naming it (each written whole, then
    renamed, as :mod:`.run_dir` writes its files)."""
    path = folder / record["checkpoint"]
    tmp = path.with_name(path.name + ".tmp")
    runner.save(str(tmp), infos={"mjxrunner": {"updates_done": record["updates_done"]}})
    os.replace(tmp, path)
    run_dir.write_record(folder, record)


# --- the deterministic policy: play and export ----------------------------------------


def policy_module(folder: str | os.PathLike, record: dict | None = None) -> Any:
    """The run's deterministic policy as a torch module on the CPU: ``(batch, n)``
    float32 observation (the record's layout) to ``(batch, nu)`` control, clipped to
    the action bounds; rsl_rl's export module of the actor inside.

    Raises:
      RunError: not an rsl_rl run, or a checkpoint that is missing, damaged or
        does not fit the record's config.
    """
    folder = Path(folder)
    record = load_record(folder) if record is None else record
    config = config_of(record)
    layout = record["observation"]["layout"]
    groups = _groups(layout)
    low, high = (torch.tensor(record["action"][k], dtype=torch.float32) for k in ("low", "high"))
    # The actor is built as the runner built it (rsl_rl's class from the config),
    # on zero observations of each group's size.
    obs = TensorDict({g: torch.zeros(1, x["size"]) for g, x in zip(groups, layout, strict=True)},
                     batch_size=[1])  # fmt: skip
    actor_class, actor_cfg = resolve_class(config.runner_cfg(groups)["actor"])
    obs_groups = {"actor": groups, "critic": groups}
    with contextlib.redirect_stdout(sys.stderr):
        actor = actor_class(obs, obs_groups, "actor", len(low), **actor_cfg)
    path = _checkpoint(folder, record)
    try:
        saved = torch.load(path, weights_only=False, map_location="cpu")
        actor.load_state_dict(saved["actor_state_dict"])
    except _DAMAGED as e:
        raise run_dir.RunError(
            f"{str(path)!r} is truncated or does not fit the record's config: {e}"
        ) from e
    return ClippedPolicy(actor.as_onnx(verbose=False), low, high).eval()


class ClippedPolicy(torch.nn.Module):
    """rsl_rl's deterministic actor with its action clipped to the bounds, as the env
    clips what it is given (so the exported graph gives what the env applied)."""

    def __init__(self, actor: torch.nn.Module, low: torch.Tensor, high: torch.Tensor):
        super().__init__()
        self.actor = actor
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.actor(obs), self.low, self.high)


def play_policy(folder: str | os.PathLike, record: dict) -> Callable[[Any], np.ndarray]:
    """``obs -> action`` for ``play``: the env's observations (a batch; terms are
    flattened in sorted order) to NumPy controls, computed by torch on the host."""
    module = policy_module(folder, record)

    def act(obs: Any) -> np.ndarray:
        flat = np.array(ppo.flat_obs(obs), np.float32)  # a copy torch may own
        with torch.inference_mode():
            return module(torch.from_numpy(flat)).numpy()

    return act


def policy_graph(folder: str | os.PathLike, record: dict, env: Any) -> tuple[Any, bool]:
    """``(ONNX model, normalizer inside)``: the policy written by torch's exporter,
    input ``obs`` ``(1, n)`` float32, output ``action`` ``(1, nu)``."""
    module = policy_module(folder, record)
    size = record["observation"]["size"]
    program = torch.onnx.export(
        module,
        (torch.zeros(1, size),),
        input_names=["obs"],
        output_names=["action"],
        opset_version=onnx_graph.OPSET,
        verbose=False,
    )
    model = program.model_proto
    # The exporter notes each node's Python source (paths of the machine that
    # exported): not part of the policy, so left out of the file.
    for node in model.graph.node:
        del node.metadata_props[:]
    for value in (*model.graph.input, *model.graph.output):
        del value.metadata_props[:]
    del model.metadata_props[:]
    model.graph.name = f"{env.task.name}_policy"
    return model, config_of(record).normalize_obs
