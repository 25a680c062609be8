"""Where a step of impl "c" goes: XLA's own profile of a front door's compiled
calls, beside MuJoCo's batched step of the same worlds in the same process.

For one model and batch, it times ``--variant`` (``step_loop``: ``set_actions`` +
``MultiEnvRunner.step()``; ``step_wait``: the same, waiting for every step;
``gym``: the Gymnasium door with the model's task and autoreset) against
``batch_1`` (``mujoco.batch``'s own step called once per step, nothing around it)
in interleaved rounds, with the calling thread's CPU time per step (Python, JAX's
dispatch, and whatever part of the program XLA runs on that thread). Then it runs
the variant once under ``jax.profiler`` and sums, per step, the time of every
thunk XLA recorded (kernels, copies, loops, the host calls named ``ffi_call.*``).

Read the host calls' times as they are: MuJoCo's work and the handler's, which
profiling does not slow. Read the rest as a map, not a measure: profiling adds
about a microsecond to each thunk it records (a loop of 128 small iterations
reads several times its cost), and it records some loops' bodies and not
others'. ``benchmarks/xla_cpu_width.py`` and alternating runs measure.

    .venv/bin/python -m benchmarks.step_profile --model hopper --num-envs 256 --variant gym
"""

from __future__ import annotations

import argparse
import collections
import glob
import re
import statistics
import tempfile
import time

import mjxrunner  # noqa: F401  (the project's XLA:CPU flags, as every call sees them)

VARIANTS = ("step_loop", "step_wait", "gym")
_THUNK = re.compile(r"[a-z][a-z0-9_.\-]*")  # HLO names; the runtime's own events are not


def timed(case, steps: int) -> tuple[float, float]:
    """``(wall, this thread's CPU)`` seconds per step of one run of ``case``."""
    case.restore()
    wall, cpu = time.perf_counter(), time.thread_time()
    case.run()
    return (time.perf_counter() - wall) / steps, (time.thread_time() - cpu) / steps


def thunk_times(case, steps: int) -> dict[str, tuple[float, float]]:
    """Thunk name -> ``(us per step, calls per step)`` from one profiled run."""
    import jax

    with tempfile.TemporaryDirectory() as folder:
        case.restore()
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # Python's calls untraced: less work beside MuJoCo
        with jax.profiler.trace(folder, profiler_options=options):
            case.run()
        (path,) = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
        profile = jax.profiler.ProfileData.from_file(path)
    total, calls = collections.Counter(), collections.Counter()
    for plane in profile.planes:
        for line in plane.lines:  # any thread: XLA may run a small program on the caller's
            for event in line.events:
                if _THUNK.fullmatch(event.name):
                    total[event.name] += event.duration_ns
                    calls[event.name] += 1
    return {k: (total[k] / 1e3 / steps, calls[k] / steps) for k in total}


def main() -> None:
    from benchmarks import native_throughput as nt

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="hopper")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--variant", choices=VARIANTS, default="step_loop")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    cases = {
        name: nt.prepare(name, args.model, args.num_envs, args.threads, seed=0)
        for name in (args.variant, "batch_1")
    }
    for case in cases.values():  # compiles and first calls, outside every clock
        case.restore()
        case.run()
    seconds = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            seconds[name].append(timed(case, case.steps))
    door = cases[args.variant]
    thunks = thunk_times(door, door.steps)
    for case in cases.values():
        case.close()

    wall = {k: statistics.median(w for w, _ in v) * 1e6 for k, v in seconds.items()}
    cpu = statistics.median(c for _, c in seconds[args.variant]) * 1e6
    ratio = statistics.median(
        a[0] / b[0] for a, b in zip(seconds[args.variant], seconds["batch_1"], strict=True)
    )
    print(f"{args.model}, {args.num_envs} worlds, impl c, {args.threads} threads")
    print(
        f"- {args.variant}: {wall[args.variant]:.0f} us per step; mujoco.batch's step: "
        f"{wall['batch_1']:.0f} us; {args.variant} / batch_1 time: {ratio:.2f} "
        f"(medians of {args.rounds} interleaved rounds)"
    )
    print(f"- the calling thread's CPU per step of {args.variant}: {cpu:.0f} us")
    host = {k: v for k, v in thunks.items() if k.startswith("ffi_call")}
    step_call = max(host.values(), default=(0.0, 0.0))[0]  # others: a restart's forward
    print(
        f"- host calls: {sum(v[0] for v in host.values()):.0f} us per step, the longest "
        f"(the step's) {step_call:.0f} us"
    )
    print("\n| thunk | us per step | calls per step |\n| --- | ---: | ---: |")
    for name, (us, n) in sorted(thunks.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"| {name} | {us:.1f} | {n:.2f} |")


if __name__ == "__main__":
    main()
