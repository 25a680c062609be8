"""Impl "c"'s host call: the C++ FFI handler against ``jax.pure_callback``, and both
against MuJoCo's own ``mujoco.rollout``.

World-steps/s of the runner's step loop (``MultiEnvRunner(impl="c")``,
``set_actions`` + ``step()`` from a Python loop, one ``mj_step`` per world per step)
with each host-call path, beside:

* ``rollout_1``: ``mujoco.rollout.Rollout(nthread=threads)`` once per step
  (``nstep=1``) from a Python loop, the floor of a loop that returns to Python
  every step;
* ``rollout_100``: the same over 100 steps in one call;
* ``batch_1``: ``mujoco.batch.Batch.step()`` once per step from a Python loop, the
  batch the runner steps its worlds with, alone.

Every variant steps the same worlds from the same start with the same random
controls on ``--threads`` threads. Rates are medians of ``--rounds`` interleaved
rounds (each round calls every variant once, from its start restored untimed), so a
change of load on a shared machine touches all alike. Ratios are to ``rollout_1``.

    .venv/bin/python -m benchmarks.native_host_call
    .venv/bin/python -m benchmarks.native_host_call --models hopper --num-envs 256 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import time

MODELS = ("cartpole", "hopper", "ant", "humanoid")
SIZES = (256, 1024)
STEPS = 100
VARIANTS = ("ffi", "pure_callback", "rollout_1", "rollout_100", "batch_1")


class Case:
    def __init__(self, run, restore=lambda: None, close=lambda: None):
        self.run, self.restore, self.close = run, restore, close


def _batch_case(w) -> Case:
    import numpy as np
    from mujoco import batch as mjbatch

    b = mjbatch.Batch(w.mj_model, w.num_envs, w.num_threads)
    start = np.array(b.state)
    lo, size = b._component(mjbatch._STATE_FIELDS["ctrl"])
    actions = [np.asarray(a, np.float64) for a in w.actions]

    def run() -> None:
        for a in actions:
            b.state[:, lo : lo + size] = a
            b.step()

    def restore() -> None:
        b.state[...] = start

    return Case(run, restore)


def prepare(name: str, model: str, num_envs: int, threads: int, seed: int) -> Case:
    import jax

    from mjxrunner.engine import models, native_ffi
    from mjxrunner.tools import bench, bench_variants

    m = models.load_any(model)
    w = bench.Workload(
        name=model,
        mj_model=m,
        mj_data=models.start_data(m),
        num_envs=num_envs,
        n_steps=STEPS,
        substeps=1,
        impl="c",
        device=jax.devices("cpu")[0],
        seed=seed,
        actions=bench.random_actions(m, STEPS, num_envs, seed),
        num_threads=threads,
    )
    if name in ("ffi", "pure_callback"):
        # A host model keeps the path of its first call: make it now, under ``name``.
        saved = os.environ.get(native_ffi.MODE_ENV)
        os.environ[native_ffi.MODE_ENV] = name
        try:
            trial = bench_variants._prepare_step_loop(w)
            trial.run()
        finally:
            if saved is None:
                os.environ.pop(native_ffi.MODE_ENV)
            else:
                os.environ[native_ffi.MODE_ENV] = saved
        return Case(trial.run, trial.restore)
    if name == "batch_1":
        return _batch_case(w)
    prep = {"rollout_1": "_prepare_native_loop", "rollout_100": "_prepare_native"}[name]
    trial = getattr(bench_variants, prep)(w)
    return Case(trial.run, trial.restore, trial.close)


def measure(model: str, num_envs: int, threads: int, rounds: int, seed: int, names) -> dict:
    cases = {}
    for name in names:
        case = prepare(name, model, num_envs, threads, seed)
        case.restore()
        case.run()  # compiles, warms caches
        cases[name] = case
    seconds = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            case.restore()
            t0 = time.perf_counter()
            case.run()
            seconds[name].append(time.perf_counter() - t0)
    for case in cases.values():
        case.close()
    return {
        name: statistics.median(num_envs * STEPS / s for s in secs)
        for name, secs in seconds.items()
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--num-envs", nargs="+", type=int, default=list(SIZES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    args = p.parse_args(argv)

    import jax
    import mujoco

    from mjxrunner.engine import native_ffi

    print(f"command: python -m benchmarks.native_host_call {shlex.join(argv or sys.argv[1:])}")
    print(
        f"mujoco {mujoco.__version__}, jax {jax.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} cpus, threads={args.threads}, rounds={args.rounds}, "
        f"FFI handler: {'built' if native_ffi.available() else native_ffi.failure()}"
    )
    print(f"world-steps/s, median of {args.rounds} interleaved rounds of {STEPS} steps")
    cols = args.variants
    header = f"| model | worlds | {' | '.join(cols)} | ffi/rollout_1 | pure_callback/rollout_1 |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for model in args.models:
        for n in args.num_envs:
            rates = measure(model, n, args.threads, args.rounds, args.seed, cols)
            ref = rates.get("rollout_1")
            ratios = [
                f"{rates[k] / ref:.2f}" if ref and k in rates else "-"
                for k in ("ffi", "pure_callback")
            ]
            cells = " | ".join(f"{rates[k] / 1e3:.0f}k" for k in cols)
            print(f"| {model} | {n} | {cells} | {' | '.join(ratios)} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
