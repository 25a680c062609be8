"""Step throughput with 0, 5 and 20 per-world (randomized) model fields.

A per-world field turns a broadcast model leaf into a batched one inside the
step's vmap; this measures what that costs at a fixed batch.

    .venv/bin/python benchmarks/per_world_params.py [--num-envs 1024] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from mjxrunner import MultiEnvRunner
from mjxrunner.engine.params import Term

# Float fields of the cartpole model that are safe to vary, in the order they are
# made per-world.
FIELDS = [
    ("body_mass", "scale"),
    ("geom_friction", "scale"),
    ("dof_damping", "scale"),
    ("opt.gravity", "scale"),
    ("actuator_gear", "scale"),
    ("body_inertia", "scale"),
    ("dof_armature", "add"),
    ("dof_frictionloss", "add"),
    ("actuator_gainprm", "scale"),
    ("actuator_biasprm", "add"),
    ("geom_rgba", "scale"),
    ("geom_solref", "scale"),
    ("geom_solimp", "scale"),
    ("dof_solref", "scale"),
    ("dof_solimp", "scale"),
    ("jnt_solref", "scale"),
    ("jnt_solimp", "scale"),
    ("jnt_stiffness", "add"),
    ("opt.wind", "add"),
    ("actuator_ctrlrange", "scale"),
]


def measure(n_fields: int, num_envs: int, steps: int) -> dict:
    runner = MultiEnvRunner("cartpole", num_envs, impl="jax", seed=0)
    terms = [Term(path, 0.9, 1.1, operation=op) for path, op in FIELDS[:n_fields]]
    if terms:
        runner.set_randomization(terms)
    t0 = time.perf_counter()
    runner.step()
    jax.block_until_ready(runner.data)
    compile_s = time.perf_counter() - t0
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            runner.step()
        jax.block_until_ready(runner.data)
        rates.append(steps * num_envs / (time.perf_counter() - t0))
    return {
        "per_world_fields": n_fields,
        "steps_per_s": float(np.median(rates)),
        "spread": float(np.ptp(rates)),
        "compile_s": compile_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = [measure(n, args.num_envs, args.steps) for n in (0, 5, 20)]
    base = rows[0]["steps_per_s"]
    for row in rows:
        row["ratio_to_shared"] = row["steps_per_s"] / base
    runner = MultiEnvRunner("cartpole", 1)
    out = {"num_envs": args.num_envs, "rows": rows, "backend": runner.backend_info}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"cartpole, {args.num_envs} worlds, median of 3 x {args.steps} steps")
    print(f"{'per-world fields':>16} {'steps/s':>12} {'vs shared':>9} {'compile s':>9}")
    for r in rows:
        print(
            f"{r['per_world_fields']:>16} {r['steps_per_s']:>12,.0f} "
            f"{r['ratio_to_shared']:>9.2f} {r['compile_s']:>9.1f}"
        )


if __name__ == "__main__":
    main()
