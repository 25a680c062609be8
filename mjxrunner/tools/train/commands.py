"""The command line's ``train``, ``play``, ``export`` and ``sim2sim``.

Their work is imported when a command runs, so ``mjxrunner --help`` and the other
commands need none of the ``train`` extra (optax, tensorboardX, onnx, onnxruntime).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any

TUNABLE = ("num_envs", "rollout_steps", "learning_rate", "final_learning_rate", "epochs",
           "minibatches", "entropy_coef", "hidden", "init_log_std", "normalize_obs", "latency",
           "push_interval", "symmetric", "impl", "num_threads", "steps", "seed")  # fmt: skip
"""``train`` options that set up a new run; ``--resume`` takes the run's own."""


def _print(result: dict, as_json: bool, lines: list[str]) -> None:
    print(json.dumps(result) if as_json else "\n".join(lines))


def _returns(r: dict) -> str:
    return (f"{r['episodes']} episodes: return {r['mean_return']:.2f} +- "
            f"{r['stderr_return']:.2f} (std {r['std_return']:.2f}), "
            f"length {r['mean_length']:.1f}")  # fmt: skip


PPO_ONLY = ("latency", "push_interval", "init_log_std", "final_learning_rate", "epochs",
            "minibatches", "symmetric")  # fmt: skip
"""``train`` options of the project's PPO only: rsl_rl and Brax train the task nominal,
with their own initial action noise."""


def _other_trainer(name: str) -> Any:
    """The module of trainer ``name`` (not ``"ppo"``), which imports its package."""
    import importlib

    return importlib.import_module(f"mjxrunner.tools.train.{name}_trainer")


def _train(args: argparse.Namespace) -> int:
    from mjxrunner.engine import cpu_pool

    cpu_pool.widen()  # before anything runs JAX (the default impl asks for its backend)
    from mjxrunner.tools.train import TRAINERS, ppo, run_dir, trainer

    quiet = {"tensorboard": not args.no_tensorboard, "progress": not args.no_progress,
             "wandb": args.wandb}  # fmt: skip
    if args.wandb is not None and importlib.util.find_spec("wandb") is None:
        raise ValueError("--wandb needs the wandb package (pip install wandb)")  # before any write
    if args.resume is not None:
        given = [f"--{k.replace('_', '-')}" for k in TUNABLE if getattr(args, k) is not None]
        if args.out is not None:
            given.append("--out")
        if given:
            raise ValueError(f"--resume continues the run with its own settings; drop {given}")
        found = run_dir.load_record(args.resume, task=args.task).get("trainer")
        if args.trainer is not None and args.trainer != found:
            raise run_dir.RunError(
                f"the run in {str(args.resume)!r} was trained by {found!r}, not {args.trainer!r}"
            )
        if found != "ppo" and found in TRAINERS:
            module = _other_trainer(found)
            record = module.resume(args.resume, stop_after=args.stop_after, **quiet)
        else:  # the project's PPO, which refuses a trainer it does not know
            record = trainer.resume(args.resume, stop_after=args.stop_after, **quiet)
        folder = args.resume
    else:
        if args.task is None or args.out is None:
            raise ValueError("train needs a TASK and --out FOLDER (or --resume FOLDER)")
        from mjxrunner import tasks

        tasks.get(args.task)
        name = args.trainer or "ppo"
        if name == "ppo":  # the task's suggested settings, where no option is given
            taken = {k: v for k, v in ppo.SUGGESTED.get(args.task, {}).items()
                     if getattr(args, k) is None}  # fmt: skip
            for k, v in taken.items():
                setattr(args, k, v)
            if taken:
                shown = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
                                 for k, v in taken.items())  # fmt: skip
                print(f"{args.task}: the task's suggested settings {shown}", file=sys.stderr)
        impl, _ = args.impl_and_threads(args, threads_need_c=True)
        options = {
            k: getattr(args, k)
            for k in ("num_envs", "rollout_steps", "learning_rate", "entropy_coef", "hidden")
            if getattr(args, k) is not None
        }
        seed = 0 if args.seed is None else args.seed
        if name == "ppo":
            pushes = None
            if args.push_interval is not None:
                pushes = (*args.push_interval, args.push_speed)
            options.update({k: getattr(args, k) for k in ("final_learning_rate", "epochs",
                            "minibatches") if getattr(args, k) is not None})  # fmt: skip
            config = ppo.PPOConfig(
                task=args.task,
                normalize_obs=bool(args.normalize_obs),
                symmetric=bool(args.symmetric),
                latency=None if args.latency is None else tuple(args.latency),
                pushes=pushes,
                impl=impl,
                num_threads=args.num_threads,
                **options,
                **({} if args.init_log_std is None else {"init_log_std": args.init_log_std}),
            )
            config, chunk = trainer.plan(config, args.steps or 1_000_000, args.save_every)
            record = trainer.train(config, args.out, seed=seed, chunk=chunk,
                                   stop_after=args.stop_after, **quiet)  # fmt: skip
        else:
            given = [f"--{k.replace('_', '-')}" for k in PPO_ONLY if getattr(args, k) is not None]
            if given:
                raise ValueError(f"{given} are options of --trainer ppo; {name} trains the task "
                                 "nominal")  # fmt: skip
            module = _other_trainer(name)
            # The trainer's own observation normalizer is on by default: --normalize-obs
            # asks for what it does anyway.
            config = module.Config(task=args.task, impl=impl, num_threads=args.num_threads,
                                   **options)  # fmt: skip
            config, chunk = trainer.plan(config, args.steps or 1_000_000, args.save_every)
            record = module.train(config, args.out, seed=seed, chunk=chunk,
                                  stop_after=args.stop_after, **quiet)  # fmt: skip
        folder = args.out
    done, total = record["updates_done"], record["config"]["num_updates"]
    _print(record, args.json, [
        f"{record['task']}: {done} of {total} updates, {record['env_steps_done']} env steps, "
        f"saved in {folder}",
        f"play it: mjxrunner play {folder}" if done == total else
        f"continue: mjxrunner train --resume {folder}",
    ])  # fmt: skip
    return 0


def _play(args: argparse.Namespace) -> int:
    from mjxrunner.tools.train import play

    r = play.play(args.run, episodes=args.episodes, seed=args.seed, impl=args.impl,
                  video=args.video, video_worlds=tuple(args.video_worlds),
                  commands=args.command, command_every=args.command_every)  # fmt: skip
    lines = [f"{r['task']} on impl {r['impl']}, deterministic policy, " + _returns(r)]
    for x in r.get("tracking", []):
        c, a = x["command"], x["achieved"]
        lines.append(f"command (vx, vy, yaw) = ({c[0]:+.2f}, {c[1]:+.2f}, {c[2]:+.2f}): "
                     f"base ({a[0]:+.2f}, {a[1]:+.2f}, {a[2]:+.2f}) over {x['samples']} "
                     "world-steps")  # fmt: skip
    if "falls" in r:
        lines.append(f"falls: {100 * r['falls']:.1f} % of episodes")
    if args.video:
        lines.append(f"video: {args.video}")
    _print(r, args.json, lines)
    return 0


def _export(args: argparse.Namespace) -> int:
    from mjxrunner.tools.train import deploy, export

    meta = export.export(args.run, args.onnx)
    lines = [f"policy: {args.onnx} (obs {meta['observation']['size']} -> "
             f"action {len(meta['action']['low'])}, normalizer inside: "
             f"{meta['normalizer_inside']})"]  # fmt: skip
    if "file" in meta["observer"]:
        reads = [x.get("field") or "info" + x["info"] for x in meta["observer"]["inputs"]]
        lines.append(f"observer: {deploy.observer_path(args.onnx)} (reads {', '.join(reads)})")
    else:
        lines.append(f"no observer: {meta['observer']['missing']}")
    _print(meta, args.json, lines)
    return 0


def _sim2sim(args: argparse.Namespace) -> int:
    from mjxrunner.tools.train import sim2sim

    r = sim2sim.sim2sim(args.onnx, episodes=args.episodes, seed=args.seed)
    lines = [f"{r['task']} on native MuJoCo through onnxruntime: " + _returns(r)]
    if r["play"] is None:
        lines.append("play measured nothing yet (run `mjxrunner play RUN_DIR` before export)")
    else:
        lines.append("play measured " + _returns(r["play"]))
        lines.append("agree within noise" if r["agrees"] else "DISAGREE beyond noise")
    _print(r, args.json, lines)
    return 0 if r.get("agrees", True) else 1


def add(
    sub: Any, positive: Any, impls: tuple[str, ...], impl_help: str, impl_and_threads: Any
) -> None:
    """Adds the four commands to the ``mjxrunner`` subparsers ``sub``; ``positive``
    parses a positive int, ``impl_and_threads(args, threads_need_c=)`` checks
    ``--impl`` (or the machine's default) and ``--num-threads`` together."""
    from mjxrunner.tools.train import TRAINERS

    t = sub.add_parser(
        "train",
        help="train a policy on a task (the project's PPO, rsl_rl or Brax), with logs and "
        "checkpoints",
        description="Trains TASK into --out FOLDER: metrics.jsonl, TensorBoard logs in tb/ "
        "(with tensorboardX), and a checkpoint after every --save-every updates of "
        "everything needed to continue (--resume FOLDER, bit for bit) or to play. "
        "--trainer rsl_rl and brax train with those packages' own PPO through their doors "
        "and write their own checkpoints; rsl_rl resumes (not bit for bit), Brax cannot.",
    )
    t.add_argument("task", nargs="?", help="a registered task (see mjxrunner.tasks.list())")
    t.add_argument("--out", metavar="FOLDER", help="the new run's folder")
    t.add_argument("--resume", metavar="FOLDER", help="continue the run in FOLDER")
    t.add_argument("--trainer", choices=TRAINERS, help="default: ppo (with --resume: the run's)")
    t.add_argument("--steps", type=positive, help="env steps in all (default: 1000000)")
    t.add_argument("--num-envs", type=positive)
    t.add_argument("--rollout-steps", type=positive)
    t.add_argument("--learning-rate", type=float)
    t.add_argument("--final-learning-rate", type=float, metavar="LR",
                   help="ppo: the learning rate at the end of the run (default 0: annealed "
                   "linearly from --learning-rate to it)")  # fmt: skip
    t.add_argument("--epochs", type=positive, help="ppo: passes over each rollout")
    t.add_argument("--minibatches", type=positive, help="ppo: minibatches per epoch")
    t.add_argument("--symmetric", action="store_true", default=None,
                   help="ppo: a mirror-symmetric policy and critic, for a task with a mirror "
                   "image (go1_joystick)")  # fmt: skip
    t.add_argument("--entropy-coef", type=float)
    t.add_argument("--init-log-std", type=float, metavar="L",
                   help="ppo: the policy's initial log standard deviation (default -0.5); "
                   "a robot on stiff servos falls under large exploration noise")  # fmt: skip
    t.add_argument("--hidden", type=positive, help="width of the MLPs' two hidden layers")
    t.add_argument("--seed", type=int)
    t.add_argument("--impl", choices=impls, help=impl_help)
    t.add_argument("--num-threads", type=positive, metavar="N", help="impl c's threads")
    t.add_argument("--normalize-obs", action="store_true", default=None)
    t.add_argument("--latency", type=int, nargs=2, metavar=("LOW", "HIGH"))
    t.add_argument("--push-interval", type=positive, nargs=2, metavar=("FEWEST", "MOST"))
    t.add_argument("--push-speed", type=float, default=0.5)
    t.add_argument("--save-every", type=positive, default=10, metavar="UPDATES")
    t.add_argument("--stop-after", type=positive, metavar="UPDATES",
                   help="stop after this many updates (continue later with --resume)")  # fmt: skip
    t.add_argument("--no-tensorboard", action="store_true")
    t.add_argument("--wandb", metavar="PROJECT",
                   help="also log to Weights & Biases (needs wandb; WANDB_MODE=offline "
                   "keeps it local)")  # fmt: skip
    t.add_argument("--no-progress", action="store_true")
    t.add_argument("--json", action="store_true", help="print the run's record as JSON")
    t.set_defaults(func=_train, impl_and_threads=impl_and_threads)

    p = sub.add_parser("play", help="run a trained policy, print returns, record a video")
    p.add_argument("run", metavar="RUN_DIR")
    p.add_argument("--episodes", type=positive, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--impl", choices=impls, help="default: the run's")
    p.add_argument("--video", metavar="FILE", help="write an .mp4 or .gif of --video-worlds")
    p.add_argument("--video-worlds", type=int, nargs="+", default=[0], metavar="W")
    p.add_argument("--command", type=float, nargs=3, action="append", metavar=("VX", "VY", "YAW"),
                   help="a joystick task's command, fixed (given again: the next command, "
                   "after --command-every steps); prints the base's velocity per command "
                   "and the share of falls")  # fmt: skip
    p.add_argument(
        "--command-every",
        type=positive,
        default=250,
        metavar="STEPS",
        help="control steps each --command is held (default 250: 5 s at 50 Hz)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_play)

    e = sub.add_parser("export", help="the trained policy as ONNX, with its metadata")
    e.add_argument("run", metavar="RUN_DIR")
    e.add_argument("--onnx", required=True, metavar="FILE")
    e.add_argument("--json", action="store_true", help="print the metadata as JSON")
    e.set_defaults(func=_export)

    s = sub.add_parser(
        "sim2sim",
        help="run an exported policy on plain MuJoCo and compare with play",
        description="Runs FILE.onnx with onnxruntime on native MuJoCo (no JAX in the loop) "
        "and compares its return with the one `play` measured. Exit status 1 if they "
        "disagree beyond noise.",
    )
    s.add_argument("onnx", metavar="FILE.onnx")
    s.add_argument("--episodes", type=positive, default=16)
    s.add_argument("--seed", type=int, default=1, help="as play's, for the same starts")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_sim2sim)
