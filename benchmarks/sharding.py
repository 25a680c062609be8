"""Sharded versus unsharded runner, side by side in one run.

Forces two host devices on a CPU (set before JAX starts), then for each batch size
times ``runner.rollout`` (one compiled scan per call) on one device and split over
two with ``shard_map``. Compile time is excluded; the median of 3 repeats is kept.

    .venv/bin/python benchmarks/sharding.py [--sizes 1024 4096 8192] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""
):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    )

import jax
import numpy as np

from mjxrunner import MultiEnvRunner


def rate(runner: MultiEnvRunner, steps: int, repeats: int = 3) -> tuple[float, float]:
    actions = np.zeros((steps, runner.num_envs, runner.action_dim()))
    t0 = time.perf_counter()
    jax.block_until_ready(runner.rollout(actions, steps))
    compile_s = time.perf_counter() - t0
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(runner.rollout(actions, steps))
        rates.append(steps * runner.num_envs / (time.perf_counter() - t0))
    return float(np.median(rates)), compile_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="cartpole")
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = []
    for n in args.sizes:
        one, one_compile = rate(MultiEnvRunner(args.model, n), args.steps)
        split = MultiEnvRunner(args.model, n, devices=args.devices)
        many, many_compile = rate(split, args.steps)
        rows.append(
            {
                "num_envs": n,
                "one_device_steps_per_s": one,
                "sharded_steps_per_s": many,
                "speedup": many / one,
                "compile_s": [one_compile, many_compile],
            }
        )
    out = {
        "model": args.model,
        "devices": args.devices,
        "rows": rows,
        "backend": MultiEnvRunner(args.model, args.devices).backend_info,
        "load_average": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.model}: rollout of {args.steps} steps, median of 3, compile excluded")
    print(f"{'num_envs':>8} {'1 device':>12} {f'{args.devices} devices':>12} {'speedup':>8}")
    for r in rows:
        print(
            f"{r['num_envs']:>8} {r['one_device_steps_per_s']:>12,.0f} "
            f"{r['sharded_steps_per_s']:>12,.0f} {r['speedup']:>8.2f}"
        )
    print(f"load average at the end: {out['load_average'][0]:.1f}")


if __name__ == "__main__":
    main()
