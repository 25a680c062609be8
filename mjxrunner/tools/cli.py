"""The ``mjxrunner`` command line: ``run`` (the main job), ``bench``, ``info``, ``models``,
and ``train``, ``play``, ``export``, ``sim2sim`` (:mod:`mjxrunner.tools.train`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import numpy as np

if TYPE_CHECKING:
    from mujoco import mjx

    from mjxrunner.tasks import Task

DEFAULT_MAX_EPISODE_STEPS = 500
"""``run``'s time limit for a scene without a registered task."""

IMPLS = ("jax", "warp", "c", "cpp")
"""``--impl`` choices; ``"cpp"`` is MJX's spelling of ``"c"``."""


def default_impl() -> str:
    """The command line's impl when ``--impl`` is not given: ``"c"`` (MuJoCo's C
    engine on the CPU's threads) on a machine with no accelerator, where it is the
    fast path; ``"jax"`` where JAX has a GPU or TPU. The library API has no default:
    it is always told."""
    import jax

    return "c" if jax.default_backend() == "cpu" else "jax"


def _impl_and_threads(args: argparse.Namespace, *, threads_need_c: bool) -> tuple[str, int | None]:
    """``--impl`` (or the machine's default) and ``--num-threads``, checked together."""
    from mjxrunner.engine import backend

    impl = backend.check_impl(args.impl if args.impl is not None else default_impl())
    if threads_need_c and args.num_threads is not None and impl != "c":
        raise ValueError(f"--num-threads is for impl 'c' (its threads); impl is {impl!r}")
    return impl, args.num_threads


def _task(name: str) -> Task | None:
    """The scene's first registered task (by name), or None: MJCF paths have none."""
    from mjxrunner import tasks

    found = tasks.for_model(name)
    return found[0] if found else None


def _terminated_fn(task: Task, model: mjx.Model) -> Callable[[mjx.Data], np.ndarray]:
    """``data -> (num_envs,)`` bool NumPy: where ``task.terminated`` holds, one jitted call.

    ``model`` stays put during ``run`` (no parameters are set), so it is flattened once
    here: handing the ``mjx.Model`` to the jitted call every step would run MJX's
    Python flattener each time, which costs more than the check itself.
    """
    import jax

    leaves, treedef = jax.tree.flatten(model)
    batched = jax.vmap(task.terminated, in_axes=(None, 0))  # shared model, batched data
    fn = jax.jit(lambda flat, data: batched(jax.tree.unflatten(treedef, flat), data))
    return lambda data: np.asarray(fn(leaves, data), bool)


def _run(args: argparse.Namespace) -> int:
    import jax
    from tqdm import tqdm

    from mjxrunner.doors.runner import MultiEnvRunner
    from mjxrunner.engine import models

    if args.video is not None:
        if not hasattr(MultiEnvRunner, "render_video"):
            raise NotImplementedError(
                "--video needs MultiEnvRunner.render_video, which this version of mjxrunner lacks"
            )
        video = Path(args.video)
        if video.suffix.lower() not in (".mp4", ".gif") or not video.parent.is_dir():
            raise ValueError(f"--video must be an .mp4 or .gif in an existing folder, got {video}")
    impl, num_threads = _impl_and_threads(args, threads_need_c=True)
    task = _task(args.model)
    if args.max_episode_steps is not None:
        max_steps = args.max_episode_steps
    else:
        max_steps = task.max_episode_steps if task is not None else DEFAULT_MAX_EPISODE_STEPS
    keyframe = task.keyframe if task is not None else None  # resets return there too
    runner = MultiEnvRunner(
        args.model,
        args.num_envs,
        impl=impl,
        seed=args.seed,
        keyframe=keyframe,
        num_threads=num_threads,
    )
    terminated = _terminated_fn(task, runner.model) if task is not None else None
    rng = np.random.default_rng(args.seed)
    nu = runner.action_dim()
    low, high = models.action_bounds(runner.mj_model, unlimited=1.0)

    def one_step() -> int:
        runner.set_actions(rng.uniform(low, high, (args.num_envs, nu)))
        runner.step()
        done = runner.episode_length >= max_steps
        if terminated is not None:
            done |= terminated(runner.data)
        if done.any():
            runner.reset(done)
        return int(done.sum())

    t0 = time.perf_counter()
    one_step()  # compiles the step and the done check (the reset below compiles reset)
    runner.reset(np.ones(args.num_envs, bool))
    jax.block_until_ready(runner.data)
    compile_s = time.perf_counter() - t0

    episodes = 0
    t0 = time.perf_counter()
    for _ in tqdm(range(args.steps), desc=f"{args.model} x{args.num_envs}", unit="step"):
        episodes += one_step()
    jax.block_until_ready(runner.data)
    run_s = time.perf_counter() - t0

    summary = {
        "model": args.model,
        "num_envs": args.num_envs,
        "steps": args.steps,
        "env_steps_per_s": args.steps * args.num_envs / run_s,
        "compile_s": compile_s,
        "run_s": run_s,
        "episodes_finished": episodes,
        "task": task.name if task is not None else None,
        "max_episode_steps": max_steps,
        "backend": runner.backend_info,
    }
    if args.video is not None:
        # A short clip of the first worlds, with fresh random controls, after the timing.
        n, worlds = min(args.steps, 300), list(range(min(4, args.num_envs)))
        controls = rng.uniform(low, high, (n, args.num_envs, nu))
        runner.render_video(worlds, n, policy=controls, path=args.video)
        summary["video"] = str(args.video)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"\n{summary['env_steps_per_s']:,.0f} env steps/s over {args.steps} steps "
            f"({run_s:.1f} s, compile time excluded)\n"
            f"compile + first step: {compile_s:.1f} s\n"
            f"episodes finished: {episodes} ({_done_rule(summary)})\n"
            f"backend: {_describe(summary['backend'])}"
        )
    return 0


def _done_rule(summary: dict) -> str:
    """What ended the episodes of a ``run`` summary, in words."""
    limit = f"{summary['max_episode_steps']} steps"
    task = summary["task"]
    return f"task {task} terminated or {limit}" if task else f"time limit {limit}, no task"


def _describe(info: dict) -> str:
    from mjxrunner.engine.backend import describe_backend

    return describe_backend(info)


def _bench(args: argparse.Namespace) -> int:
    from mjxrunner.engine import backend
    from mjxrunner.tools import bench

    if args.host_devices is not None:
        backend.force_host_devices(args.host_devices)  # before JAX starts its backends
    impl, num_threads = _impl_and_threads(args, threads_need_c=False)
    report = bench.run(
        args.model,
        args.num_envs,
        args.steps,
        substeps=args.substeps,
        repeats=args.repeats,
        impl=impl,
        num_threads=num_threads,
        device=args.device,
        variants=args.variants,
        seed=args.seed,
        progress=not args.no_progress,
    )
    print(bench.to_json(report) if args.json else bench.table(report))
    if args.out:
        print(f"wrote {bench.save(report, args.out)}", file=sys.stderr)
    if args.plot:
        print(f"wrote {bench.plot(report, args.plot)}", file=sys.stderr)
    failed = [
        f"{r['variant']} x{r['num_envs']}" for r in report["results"] if r["status"] == "failed"
    ]
    if failed:
        print(f"mjxrunner: {len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _variant_list(text: str) -> list[str]:
    from mjxrunner.tools.bench import VARIANTS

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list from {', '.join(VARIANTS)}, got {text!r}"
        )
    return names


def _info(args: argparse.Namespace) -> int:
    from mjxrunner.engine.backend import backend_info

    info = backend_info()
    print(json.dumps(info, indent=2) if args.json else _describe(info))
    return 0


def _models(args: argparse.Namespace) -> int:
    from mjxrunner.engine import models

    for name in models.list():
        print(name)
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


IMPL_HELP = (
    "jax or warp (MJX), or c (also spelled cpp: MuJoCo's C engine under the same "
    "engine, on the CPU's threads); default: c on a machine with no GPU or TPU, else jax"
)


class _Parser(argparse.ArgumentParser):
    """Bad arguments end in one line on stderr and exit status 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    from mjxrunner.tools.bench import VARIANTS

    p = _Parser(prog="mjxrunner", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="step many worlds with random actions and report")
    run.add_argument("model", help="a name from `mjxrunner models` or an MJCF path")
    run.add_argument("--num-envs", type=_positive, default=1024)
    run.add_argument("--steps", type=_positive, default=1000)
    run.add_argument("--impl", choices=IMPLS, help=IMPL_HELP)
    run.add_argument(
        "--num-threads",
        type=_positive,
        metavar="N",
        help="impl c: threads that step the worlds (default: every core)",
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--max-episode-steps",
        type=_positive,
        metavar="N",
        help="reset a world after N steps; it is also reset when the scene's task says it "
        f"terminated (default: the task's limit, or {DEFAULT_MAX_EPISODE_STEPS} without a task)",
    )
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--video", metavar="OUT.mp4", help="also record a video of some worlds")
    run.set_defaults(func=_run)

    bench = sub.add_parser(
        "bench",
        help="throughput: the runner against raw MJX and native MuJoCo",
        description="Times one workload several ways (raw jit(vmap(scan(mjx.step))) on MJX, "
        "in one call and once per step, "
        "the runner's rollout and step loop and the env on --impl, native mujoco.rollout "
        "on --num-threads threads in one call and once per step, sharded) at each batch "
        "size: compile time apart, steady-state median of --repeats calls, ratios to raw "
        "and to native. With --impl c, raw runs MJX impl jax beside it and native is "
        "its floor: the same C engine on as many threads.",
    )
    bench.add_argument("model", help="a name from `mjxrunner models` or an MJCF path")
    bench.add_argument(
        "--num-envs",
        type=_positive,
        nargs="+",
        default=[256, 1024, 4096],
        metavar="N",
        help="batch sizes to sweep (default: 256 1024 4096)",
    )
    bench.add_argument("--steps", type=_positive, default=200, help="env steps per timed call")
    bench.add_argument("--substeps", type=_positive, default=1, help="solver calls per step")
    bench.add_argument("--repeats", type=_positive, default=3, help="timed calls per case")
    bench.add_argument("--impl", choices=IMPLS, help=IMPL_HELP)
    bench.add_argument(
        "--num-threads",
        type=_positive,
        metavar="N",
        help="threads of impl c and of the native mujoco.rollout floor (default: every core)",
    )
    bench.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: JAX's default)")
    bench.add_argument(
        "--host-devices",
        type=_positive,
        metavar="N",
        help="split the CPU into N JAX devices, so the sharded variant runs on one host "
        "(XLA's forced host device count; single-device variants use the first)",
    )
    bench.add_argument(
        "--variants",
        type=_variant_list,
        metavar="A,B",
        help=f"comma-separated subset of {','.join(VARIANTS)} (default: all)",
    )
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--json", action="store_true", help="print the report as JSON")
    bench.add_argument("--out", metavar="FILE.json", help="also write the report as JSON")
    bench.add_argument("--plot", metavar="FILE.png", help="write steps/s vs num_envs (PNG)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.set_defaults(func=_bench)

    info = sub.add_parser("info", help="print the backend identity")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=_info)

    models = sub.add_parser("models", help="list the scenes in models/")
    models.set_defaults(func=_models)

    from mjxrunner.tools.train import commands

    commands.add(sub, _positive, IMPLS, IMPL_HELP, _impl_and_threads)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from mjxrunner.engine import cache

    cache.use_compile_cache()  # a second run reads its compiled programs back
    try:
        return args.func(args)
    except (ValueError, TypeError, NotImplementedError) as e:
        print(f"mjxrunner: error: {' '.join(str(e).split())}", file=sys.stderr)  # one line
        return 2


if __name__ == "__main__":
    sys.exit(main())
