"""``mjxrunner train --trainer brax``: Brax's own PPO (``brax.training.agents.ppo``)
on the Brax door, into a run folder that ``play``, ``export`` and ``sim2sim`` read.

Why here: Brax's PPO is the JAX trainer of MuJoCo Playground. Run through
:mod:`mjxrunner.doors.brax` and read back by the project's ``play`` and deploy
check, a trained policy shows that the door's conventions (batched same-step
autoreset, ``truncation``, the action mapped from ``[-1, 1]`` onto the control
range) give a policy that also works on plain MuJoCo.

The run folder holds:

- ``run.json``: the record of :func:`.trainer.record_of` (task, config, seed,
  updates done, observation layout and size, action bounds, control period,
  versions) with ``trainer: "brax"`` and ``checkpoint``, the last checkpoint's
  folder;
- ``checkpoints/<env steps>/``: Brax's own checkpoints (``ppo.train``'s
  ``save_checkpoint_path``: the normalizer, policy and value parameters, and
  ``ppo_network_config.json``) after every ``chunk`` updates, which
  ``brax.training.agents.ppo.checkpoint.load`` reads;
- ``metrics.jsonl`` (and TensorBoard scalars under ``tb/``): per update, Brax's
  training metrics: the mean return and length of the last (up to 100) episodes
  that ended, and its losses over its last minibatches.

An update is one of Brax's training steps: ``minibatches`` unrolls of
``rollout_steps`` steps in each of the ``num_envs`` worlds (Brax's ``batch_size``
is ``num_envs``), then ``epochs`` passes of ``minibatches`` SGD steps over them.

No resume: ``ppo.train`` can start from saved parameters (``restore_params``) but
always begins a new optimizer state and step count, so what it would continue is
not the run. ``--resume`` and ``--stop-after`` are refused for this trainer.

The deterministic policy, for ``play`` and ``export``, is Brax's inference
function (``make_inference_fn(...)(params, deterministic=True)``: normalizer, MLP,
``tanh`` of the Gaussian's mean), mapped from ``[-1, 1]`` onto the control range as
the door maps it, and clipped to the bounds as the env clips: jitted in ``play``,
written by :func:`.onnx_graph.to_onnx` (parameters closed over) in ``export``.

A task whose observation is a dict of terms is refused: Brax's networks read one
observation vector (or named ones, which these tasks do not provide).

Imports Brax (the extra ``mjxrunner[brax]``); the command line imports this module
only for a run of this trainer.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from brax.training.acme import running_statistics, specs
from brax.training.agents.ppo import checkpoint as brax_checkpoint
from brax.training.agents.ppo import networks as ppo_networks
from brax.training.agents.ppo import train as brax_ppo

from mjxrunner import tasks
from mjxrunner.doors.brax import BraxEnv, wrap_env_fn
from mjxrunner.tools.train import onnx_graph, run_dir, trainer

NAME = "brax"
CHECKPOINTS = "checkpoints"
NO_RESUME = (
    "Brax's ppo.train cannot continue a run: it restores saved parameters but starts a "
    "new optimizer state and step count"
)


@dataclasses.dataclass(frozen=True)
class Config:
    """Brax PPO's settings and the env's; every field is recorded in ``run.json``.

    The defaults are Brax's usual settings for a small task, with two hidden layers
    of 64 for policy and value (Brax's default value network, five layers of 256,
    took a CPU about 1.6 times as long here). Over 25 updates (about 100 k env
    steps) they hold cartpole balance's pole for 340 to 500 of its 500 steps on
    seeds 0-2, where a random policy drops it after ~66.

    Attributes:
      task: registered task name.
      num_envs: parallel worlds (also Brax's ``batch_size``).
      rollout_steps: steps of each unroll (Brax's ``unroll_length``).
      num_updates: Brax's training steps; total env steps is ``num_updates *
        steps_per_update``.
      epochs: passes over each update's data (``num_updates_per_batch``).
      minibatches: SGD steps per pass, and unrolls per update (``num_minibatches``).
      gamma, gae_lambda: discount and GAE's lambda.
      clip: PPO's ratio clip (``clipping_epsilon``).
      value_coef, entropy_coef: weights of the value loss and the entropy bonus.
      learning_rate: Adam's step size.
      hidden: width of the policy's and value's two hidden layers.
      normalize_obs: Brax's own running observation statistics (exported inside
        the ONNX policy).
      impl: the env's physics, ``"jax"``, ``"warp"`` or ``"c"``.
      num_threads: impl ``"c"``'s threads (None: every core).
    """

    task: str = "cartpole_balance"
    num_envs: int = 64
    rollout_steps: int = 16
    num_updates: int = 25
    epochs: int = 4
    minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.3
    value_coef: float = 0.5
    entropy_coef: float = 1e-3
    learning_rate: float = 1e-3
    hidden: int = 64
    normalize_obs: bool = True
    impl: str = "c"
    num_threads: int | None = None

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.minibatches * self.rollout_steps

    def network_factory(self) -> Callable:
        """Brax's ``make_ppo_networks`` with this config's layer sizes."""
        sizes = (self.hidden, self.hidden)
        return functools.partial(ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=sizes,
                                 value_hidden_layer_sizes=sizes)  # fmt: skip


def config_of(record: dict) -> Config:
    """The config a record of this trainer holds."""
    return Config(**record["config"])


def _versions() -> dict[str, str]:
    from importlib import metadata

    return {**trainer.versions(), "brax": metadata.version("brax")}


def _record(config: Config, env: Any, seed: int, chunk: int, done: int) -> dict:
    record = trainer.record_of(config, env, seed, chunk, done)
    steps = done * config.steps_per_update
    return {**record, "trainer": NAME, "checkpoint": f"{CHECKPOINTS}/{steps:012d}",
            "versions": _versions()}  # fmt: skip


def load_record(folder: str | os.PathLike) -> dict:
    """The record of the brax run in ``folder`` (:func:`.run_dir.load_record`)."""
    return run_dir.load_record(folder, trainer=NAME)


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
    Brax writes a checkpoint after every ``chunk`` updates (``num_updates`` must be
    a whole number of chunks, as :func:`.trainer.plan` makes it).

    Raises:
      ValueError: ``stop_after`` given (the run could not be continued), a task
        with observation terms, or ``num_updates`` not in whole chunks.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a brax_trainer.Config, got {type(config).__name__}")
    if stop_after is not None:
        raise ValueError(f"{NO_RESUME}, so a run of --trainer brax cannot stop early "
                         "(--stop-after)")  # fmt: skip
    if chunk < 1 or config.num_updates % chunk:
        raise ValueError(
            f"num_updates ({config.num_updates}) must be a whole number of chunks of {chunk}"
        )
    out = run_dir.refuse_existing(out, resumable=False)
    task = tasks.get(config.task)  # an unknown task is refused before anything is written
    env = BraxEnv(task, impl=config.impl, num_threads=config.num_threads)
    one = env.env_for(1)  # for the record: observation layout, bounds, backend
    if isinstance(one.observation_spec, dict):
        raise ValueError(
            f"--trainer brax takes tasks with one observation vector; {task.name!r} observes "
            f"terms {sorted(one.observation_spec)} (train it with --trainer ppo or rsl_rl)"
        )
    return _run(config, out, env, one, task.max_episode_steps, seed=seed, chunk=chunk,
                tensorboard=tensorboard, wandb=wandb, progress=progress)  # fmt: skip


def _run(config, out, env, one, episode_length, *, seed, chunk, tensorboard, progress, wandb=None):
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    log = trainer._Log(out, 0, tensorboard, wandb)
    bar = tqdm(total=config.num_updates, unit="update", disable=not progress,
               desc=f"{config.task} (brax)", file=sys.stderr)  # fmt: skip
    t0 = time.perf_counter()
    record = _record(config, one, seed, chunk, 0)

    def progress_fn(step: int, metrics: dict) -> None:
        nonlocal record
        done = int(step) // config.steps_per_update
        if "training/sps" in metrics:
            # After each chunk, once Brax has written its checkpoint: the record last.
            record = _record(config, one, seed, chunk, done)
            run_dir.write_record(out, record)
            return
        # Every update: Brax's training metrics (episode ones once any has ended).
        row = {
            "mean_return": metrics.get("episode/sum_reward", math.nan),
            "mean_length": metrics.get("episode/length", math.nan),
            "policy_loss": metrics.get("episode/policy_loss", math.nan),
            "value_loss": metrics.get("episode/v_loss", math.nan),
            "entropy_loss": metrics.get("episode/entropy_loss", math.nan),
        }
        log.write(done - 1, {k: [float(v)] for k, v in row.items()}, config.steps_per_update,
                  time.perf_counter() - t0)  # fmt: skip
        if math.isfinite(row["mean_return"]):
            bar.set_postfix(mean_return=f"{row['mean_return']:.1f}")
        bar.update(1)

    try:
        brax_ppo.train(
            environment=env,
            wrap_env_fn=wrap_env_fn,  # the door batches and autoresets itself
            num_timesteps=config.num_updates * config.steps_per_update,
            max_devices_per_host=1,  # the env lives on one device, however many XLA shows
            num_envs=config.num_envs,
            episode_length=episode_length,
            action_repeat=1,
            unroll_length=config.rollout_steps,
            batch_size=config.num_envs,
            num_minibatches=config.minibatches,
            num_updates_per_batch=config.epochs,
            discounting=config.gamma,
            gae_lambda=config.gae_lambda,
            clipping_epsilon=config.clip,
            vf_loss_coefficient=config.value_coef,
            entropy_cost=config.entropy_coef,
            learning_rate=config.learning_rate,
            normalize_observations=config.normalize_obs,
            network_factory=config.network_factory(),
            seed=seed,
            num_evals=config.num_updates // chunk + 1,  # a checkpoint after every chunk
            run_evals=False,  # the per-update training metrics are the log
            log_training_metrics=True,
            progress_fn=progress_fn,
            save_checkpoint_path=str(out.resolve() / CHECKPOINTS),  # orbax wants it absolute
        )
    finally:
        bar.close()
        log.close()
    return record


def resume(folder: str | os.PathLike, **_: Any) -> dict:
    """Refused: see the module's docstring.

    Raises:
      RunError: no Brax run in ``folder``.
      ValueError: always, for a Brax run; nothing is written.
    """
    load_record(folder)
    raise ValueError(f"{NO_RESUME}; train a new run with `mjxrunner train TASK --trainer brax "
                     "--out FOLDER` instead of --resume")  # fmt: skip


# --- the deterministic policy: play and export ----------------------------------------


def inference_fn(folder: str | os.PathLike, record: dict | None = None) -> Callable:
    """Brax's deterministic inference function of the run's last checkpoint:
    ``(obs, key) -> (action in [-1, 1], extras)``.

    Raises:
      RunError: not a Brax run, or a checkpoint that is missing, damaged or does
        not fit the record's config.
    """
    folder = Path(folder)
    record = load_record(folder) if record is None else record
    config = config_of(record)
    path = folder / record["checkpoint"]
    if not path.is_dir():
        raise run_dir.RunError(f"the checkpoint {str(path)!r} of the run is missing")
    try:
        params = brax_checkpoint.load(path.resolve())  # orbax wants an absolute path
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise run_dir.RunError(f"{str(path)!r} is truncated or not a Brax checkpoint: {e}") from e
    size, nu = record["observation"]["size"], len(record["action"]["low"])
    normalize = running_statistics.normalize if config.normalize_obs else (lambda x, y: x)
    network = config.network_factory()(size, nu, preprocess_observations_fn=normalize)
    _check_fits(path, params, network, size)
    return ppo_networks.make_inference_fn(network)(params, deterministic=True)


def _check_fits(path: Path, params: Any, network: Any, size: int) -> None:
    """Refuses parameters whose shapes are not those of the record's networks."""
    key = jax.random.PRNGKey(0)
    want = (
        jax.eval_shape(running_statistics.init_state, specs.Array((size,), jnp.float32)).mean,
        jax.eval_shape(network.policy_network.init, key),
        jax.eval_shape(network.value_network.init, key),
    )
    got = (params[0].mean, params[1], params[2])
    shapes = [jax.tree.map(lambda x: tuple(np.shape(x)), t) for t in (got, want)]
    if shapes[0] != shapes[1]:
        raise run_dir.RunError(
            f"{str(path)!r} holds parameters of shapes {shapes[0]}; the record's config "
            f"makes {shapes[1]}"
        )


def _to_control(record: dict) -> Callable[[jax.Array], jax.Array]:
    """Brax's ``[-1, 1]`` action onto the control range as the door maps it (limited
    actuators affinely, unlimited ones unchanged), then clipped as the env clips."""
    low, high = (np.asarray(record["action"][k], np.float32) for k in ("low", "high"))
    limited = np.isfinite(low) & np.isfinite(high)
    lo, hi = np.where(limited, low, 0.0), np.where(limited, high, 0.0)
    middle = np.where(limited, (hi + lo) / 2, 0.0).astype(np.float32)
    half = np.where(limited, (hi - lo) / 2, 1.0).astype(np.float32)
    return lambda action: jnp.clip(middle + action * half, low, high)


def _deterministic(folder: str | os.PathLike, record: dict) -> Callable[[jax.Array], jax.Array]:
    inference, to_control = inference_fn(folder, record), _to_control(record)
    key = jax.random.PRNGKey(0)  # the deterministic policy does not draw from it
    return lambda obs: to_control(inference(obs, key)[0])


def play_policy(folder: str | os.PathLike, record: dict) -> Callable[[Any], jax.Array]:
    """``obs -> action`` for ``play``: a batch of observations to controls, jitted."""
    return jax.jit(_deterministic(folder, record))


def policy_graph(folder: str | os.PathLike, record: dict, env: Any) -> tuple[Any, bool]:
    """``(ONNX model, normalizer inside)``: the policy written by
    :func:`.onnx_graph.to_onnx`, input ``obs`` ``(1, n)`` float32, output ``action``
    ``(1, nu)``."""
    arg = jax.ShapeDtypeStruct((1, record["observation"]["size"]), jnp.float32)
    policy = _deterministic(folder, record)
    model = onnx_graph.to_onnx(policy, [arg], ["obs"], ["action"], f"{env.task.name}_policy")
    return model, config_of(record).normalize_obs
