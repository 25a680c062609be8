"""What MuJoCo's own batched step costs when its caller does other work between
steps, as any front door that returns to Python after every step does.

``mujoco.batch.Batch.step()`` of the same worlds, timed alone (the clock stops
between steps), with nothing between steps, then after each step a pause: the
caller sleeping (the host's cores may idle) or spinning (they stay busy) for
``--gap`` microseconds. The batch splits a call's worlds into one share per thread,
and its other threads sleep between calls: a pause makes the next step wait for
them to wake, and on a small virtual machine that wake-up is tens of
microseconds or more. ``mujoco.rollout``, which steps many times per call, never
pays it.

    .venv/bin/python -m benchmarks.batch_idle --model hopper --num-envs 16 256 --threads 1 2
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.native_throughput import native_batch
from mjxrunner.engine import models, native
from mjxrunner.tools import bench


def step_time(b, start, controls, ctrl: slice, gap: float, busy: bool) -> float:
    """Microseconds per ``b.step()``, the pause after each step not counted."""
    b.state[...] = start
    total = 0.0
    for c in controls:
        b.state[:, ctrl] = c
        t0 = time.perf_counter()
        b.step()
        total += time.perf_counter() - t0
        if gap and busy:
            t1 = time.perf_counter()
            while time.perf_counter() - t1 < gap:
                pass
        elif gap:
            time.sleep(gap)
    return total / len(controls) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="hopper")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[16, 256])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--gap", type=float, default=400.0, help="microseconds")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    native.set_timers(False)  # as impl "c" runs MuJoCo
    m = models.load_any(args.model)
    gap = args.gap * 1e-6
    cases = {"back to back": (0.0, False), "sleeping": (gap, False), "spinning": (gap, True)}
    print(f"{args.model}: us per batch step (median of {args.rounds}), pause {args.gap:.0f} us")
    print("\n| worlds | threads | " + " | ".join(cases) + " |")
    print("| ---: | ---: |" + " ---: |" * len(cases))
    for n in args.num_envs:
        controls = bench.random_actions(m, args.steps, n, seed=0)
        for threads in args.threads:
            b, start, ctrl = native_batch(m, models.start_data(m), n, threads)
            times = {k: [] for k in cases}
            for _ in range(args.rounds):  # interleaved: a change of load touches all alike
                for k, (pause, busy) in cases.items():
                    times[k].append(step_time(b, start, controls, ctrl, pause, busy))
            row = " | ".join(f"{statistics.median(v):.0f}" for v in times.values())
            print(f"| {n} | {threads} | {row} |", flush=True)


if __name__ == "__main__":
    main()
