"""``mjxrunner play``: a trained run's policy, deterministic, for whole episodes.

One world per episode, every world from its own start (the task's
``initial_state`` on the world's key stream), the Gaussian's mean as the action and
the observation normalizer frozen at the run's statistics. The task runs nominal:
without sensor noise and the training's latency and pushes, as :mod:`.sim2sim` runs
it, so the two returns compare. Returns and lengths are summed on the host until every episode has
ended (terminated or truncated at ``max_episode_steps``); ``play.json`` in the run's
folder keeps them, and :mod:`.export` copies them into the ONNX file's metadata.
With ``video``, chosen worlds are drawn by MuJoCo's renderer every few steps
(about 30 frames per second of simulated time) and written as MP4 or GIF.

A run of another trainer (rsl_rl, Brax) is played the same way with that trainer's
deterministic policy (:func:`trainer_module`'s ``play_policy``: observations to
controls, its own normalizer inside), which the loop calls between jitted env steps.
"""

from __future__ import annotations

import importlib
import json
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjxrunner import tasks
from mjxrunner.engine import checks
from mjxrunner.kit import observations
from mjxrunner.rl import env as E
from mjxrunner.tasks.locomotion import base_velocity
from mjxrunner.tools.train import TRAINERS, ppo, run_dir, trainer

VIDEO_SUFFIXES = (".mp4", ".gif")
FPS = 30


def load_policy(folder: str | os.PathLike) -> tuple[dict, ppo.PPOConfig, dict, Any]:
    """``(record, config, params, obs_norm)`` of the run in ``folder``; ``obs_norm``
    is None without observation normalization."""
    record = run_dir.load_record(folder, trainer="ppo")
    config = trainer.config_of(record)
    _, start, _ = ppo.make_parts(config)
    template = jax.eval_shape(start, jax.random.key(record["seed"]))
    params, _, state, _ = run_dir.load_carry(folder, template, record)
    return record, config, params, state.obs_norm


def trainer_module(record: dict, folder: str | os.PathLike) -> ModuleType:
    """The module of the run's trainer other than the project's PPO (``rsl_rl`` ->
    :mod:`.rsl_rl_trainer`), imported here: it imports that trainer's package.

    Raises:
      RunError: a trainer this mjxrunner does not know, or the project's PPO (whose
        runs :func:`load_policy` reads).
    """
    name = record.get("trainer")
    if name not in TRAINERS:
        raise run_dir.RunError(
            f"the run in {str(folder)!r} was trained by {name!r}; this mjxrunner reads runs "
            f"of {list(TRAINERS)}"
        )
    if name == "ppo":
        raise run_dir.RunError(
            f"the run in {str(folder)!r} was trained by the project's PPO: read it with "
            "play.load_policy"
        )
    return importlib.import_module(f"mjxrunner.tools.train.{name}_trainer")


def record_env(record: dict, num_envs: int, impl: str | None = None, task: Any = None) -> E.Env:
    """The task of a run of another trainer (or ``task``, a variant of it), nominal
    (:func:`nominal_env_of`) on the run's impl unless ``impl`` is given; its normalizer
    is the trainer's, in its policy."""
    config = record["config"]
    task = record["task"] if task is None else task
    return nominal_env_of(task, num_envs, impl or config["impl"], config["num_threads"])


def nominal_env_of(task: Any, num_envs: int, impl: str, num_threads: int | None = None) -> E.Env:
    """``task`` on ``num_envs`` worlds as play and sim2sim evaluate it: without sensor
    noise (its observation history kept), latency or pushes, autoreset off."""
    task = tasks.get(task) if isinstance(task, str) else task
    config = task.obs_config
    if config is not None and config.noise:
        task = task.replace(obs_config=observations.ObsConfig(history=dict(config.history)))
    # num_threads is impl "c"'s; the MJX impls ignore it
    return E.make(task, num_envs, autoreset="disabled", impl=impl, num_threads=num_threads)


def nominal_env(
    config: ppo.PPOConfig, num_envs: int, impl: str | None = None, task: Any = None
) -> E.Env:
    """The run's task (or ``task``, a variant of it), nominal (:func:`nominal_env_of`),
    with the run's normalization."""
    impl = impl or config.impl
    task = config.task if task is None else task
    env = nominal_env_of(task, num_envs, impl, config.num_threads)
    return env.with_obs_normalization(True) if config.normalize_obs else env


SETTLE_S = 1.0
"""Seconds after each change of a fixed command that its tracking does not count
(the robot starting to walk, turning from the last command)."""


def commanded(task: Any, commands: np.ndarray, every: int) -> Any:
    """``task`` with its command (``info["command"]``) fixed: the rows of ``commands``
    ``(k, m)`` in turn, each for ``every`` control steps, the last kept to the end.

    Raises:
      ValueError: the task keeps no command of ``m`` entries in its info.
    """
    schedule = np.asarray(commands, np.float64)
    if not task.has_info:
        raise ValueError(f"task {task.name!r} keeps no info, so no command to fix")

    def fixed(info: dict, step: jax.Array) -> dict:
        if not isinstance(info, dict) or "command" not in info:
            raise ValueError(f"task {task.name!r} keeps no info['command'] to fix")
        if info["command"].shape != schedule.shape[1:]:
            raise ValueError(
                f"task {task.name!r} takes commands of shape {info['command'].shape}, "
                f"got {schedule.shape[1:]}"
            )
        row = jnp.minimum(step // every, len(schedule) - 1)
        return {**info, "command": jnp.asarray(schedule, info["command"].dtype)[row]}

    def steps(model: Any, data: Any) -> jax.Array:
        return jnp.round(data.time / (task.substeps * model.opt.timestep)).astype(jnp.int32)

    def initial_info(model, data, key):
        return fixed(task.initial_info(model, data, key), jnp.int32(0))

    def update_info(model, data, action, next_data, info, key):
        if task.update_info is not None:
            info = task.update_info(model, data, action, next_data, info, key)
        return fixed(info, steps(model, next_data))

    return task.replace(initial_info=initial_info, update_info=update_info)


def _base_velocity(data: Any) -> np.ndarray:
    """``(num_envs, 3)`` each world's base ``(vx, vy, yaw rate)`` in its own frame."""
    lin, ang = jax.vmap(base_velocity)(data)
    return np.concatenate([np.asarray(lin[:, :2]), np.asarray(ang[:, 2:3])], axis=1)


def summary(returns: np.ndarray, lengths: np.ndarray) -> dict:
    """Mean, standard deviation and standard error of the returns, and the lengths."""
    n = len(returns)
    std = float(np.std(returns, ddof=1)) if n > 1 else 0.0
    return {
        "episodes": n,
        "mean_return": float(np.mean(returns)),
        "std_return": std,
        "stderr_return": std / math.sqrt(n),
        "mean_length": float(np.mean(lengths)),
        "returns": [float(r) for r in returns],
        "lengths": [int(x) for x in lengths],
    }


def play(
    folder: str | os.PathLike,
    *,
    episodes: int = 16,
    seed: int = 1,
    impl: str | None = None,
    video: str | os.PathLike | None = None,
    video_worlds: tuple[int, ...] = (0,),
    size: tuple[int, int] = (320, 240),
    camera: int | str | None = None,
    commands: Any = None,
    command_every: int = 250,
) -> dict:
    """Plays ``episodes`` episodes of the run in ``folder``; returns :func:`summary`
    plus the task, and writes it to ``play.json`` in the folder. ``camera``: a
    camera of the scene (None: the scene's first camera, or the free camera).

    ``commands``: None, or fixed commands ``(k, 3)`` (or one ``(3,)``) of a joystick
    task, each held for ``command_every`` control steps (:func:`commanded`); the
    result then also says, per command, the base's mean ``(vx, vy, yaw rate)`` over
    the living worlds from :data:`SETTLE_S` after the command on (``tracking``), and
    the share of episodes that ended in a fall (``falls``). Such a run writes
    ``play_commands.json``, leaving ``play.json`` (what export and sim2sim compare
    with) as it was."""
    if commands is not None:
        commands = np.atleast_2d(np.asarray(commands, np.float64))
        if commands.ndim != 2 or not np.isfinite(commands).all() or not commands.size:
            raise ValueError(f"commands must be finite rows of a command, got {commands!r}")
        checks.count(command_every, "command_every")
    if video is not None and Path(video).suffix.lower() not in VIDEO_SUFFIXES:
        raise ValueError(f"video must end in one of {VIDEO_SUFFIXES}, got {str(video)!r}")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    bad = [w for w in video_worlds if not 0 <= w < episodes]
    if bad:
        raise ValueError(f"video worlds must be in [0, {episodes}), got {bad}")
    record = run_dir.load_record(folder)
    task = tasks.get(record["task"])
    if commands is not None:
        task = commanded(task, commands, command_every)
    if record.get("trainer") == "ppo":
        record, config, params, obs_norm = load_policy(folder)
        env = nominal_env(config, episodes, impl, task)
        frozen = None if obs_norm is None else obs_norm.freeze()  # the run's statistics, kept
        state = E.reset(env, jax.random.key(seed), obs_norm=frozen)
        symmetry = ppo.symmetry_for(config, env)
        step = jax.jit(lambda s: env.step(s, ppo.act(params, s.obs, env.low, env.high, symmetry)))
    else:
        act = trainer_module(record, folder).play_policy(folder, record)
        env = record_env(record, episodes, impl, task)
        state = E.reset(env, jax.random.key(seed))
        env_step = jax.jit(env.step)
        step = lambda s: env_step(s, act(s.obs))  # noqa: E731 - the policy may run on the host

    dt = record["control_dt"]
    every = max(1, round(1.0 / (dt * FPS)))
    frames: list[np.ndarray] = []
    draw = _drawer(env, video_worlds, size, camera) if video is not None else None
    returns, lengths = np.zeros(episodes), np.zeros(episodes, int)
    alive, fell = np.ones(episodes, bool), np.zeros(episodes, bool)
    k = 0 if commands is None else len(commands)
    achieved, counted = np.zeros((k, 3)), np.zeros(k)
    settle = math.ceil(SETTLE_S / dt)
    for t in range(env.task.max_episode_steps):
        if draw is not None and t % every == 0 and alive[list(video_worlds)].any():
            frames.append(draw(state))
        state = step(state)
        runner = state.runner
        reward, terminated, truncated = jax.device_get(
            (state.reward, runner.terminated, runner.truncated)
        )
        returns += np.where(alive, reward, 0.0)
        lengths += alive
        row = min(t // command_every, k - 1)
        if k and t - row * command_every >= settle:  # the step's command, tracked
            living = alive & ~terminated
            achieved[row] += _base_velocity(state.runner.data)[living].sum(axis=0)
            counted[row] += living.sum()
        fell |= alive & terminated
        alive &= ~(terminated | truncated)
        if not alive.any():
            break
    result = {"task": record["task"], "impl": env.impl, "seed": seed, **summary(returns, lengths)}
    if k:
        result["falls"] = float(fell.mean())
        result["tracking"] = [
            {"command": c.tolist(), "achieved": (a / max(n, 1)).tolist(), "samples": int(n)}
            for c, a, n in zip(commands, achieved, counted, strict=True)
        ]
    if video is not None:
        frames.append(draw(state))
        _write_video(video, frames, fps=1.0 / (dt * every))
        result["video"] = str(video)
    name = "play.json" if commands is None else "play_commands.json"
    (Path(folder) / name).write_text(json.dumps(result, indent=1))
    return result


def _drawer(env: E.Env, worlds: tuple[int, ...], size: tuple[int, int], camera):
    from mjxrunner.kit import render

    renderer = render.WorldRenderer(env.host.mj_model)
    width, height = size
    if camera is None and env.host.mj_model.ncam:
        camera = 0

    def draw(state: E.EnvState) -> np.ndarray:
        pictures = []
        for w in worlds:
            _, model, data, local = E.world_scene(env, state, w)
            try:
                pictures.append(renderer.frame(model, data, local, camera, width, height))
            except mujoco.FatalError as e:  # no OpenGL context: a machine without display
                raise ValueError(
                    f"--video could not draw ({e}); on a machine without a display set "
                    "MUJOCO_GL=egl (or osmesa) before starting"
                ) from e
        return np.concatenate(pictures, axis=1)

    return draw


def _write_video(path: str | os.PathLike, frames: list[np.ndarray], fps: float) -> None:
    import imageio.v3 as iio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".gif":
        iio.imwrite(path, np.stack(frames), duration=1000.0 / fps, loop=0)
    else:
        iio.imwrite(path, np.stack(frames), fps=fps, codec="libx264", macro_block_size=1)
