"""Steps/s of a two-group runner against its two homogeneous runners, one after another.

The groups are the puck on a flat floor and the puck among blocks (other geoms, so
other structures), ``n`` worlds each, random actions set once. Two loops are timed
in interleaved rounds (each keeps its best round):

* ``group``: ``GroupRunner.step()``, one compiled call for both groups;
* ``separate``: ``a.step(); b.step()``, the two ``MultiEnvRunner`` s one after the
  other (two dispatches per step: what a user stitching runners by hand gets).

Both block once at the end of a round. Steps/s count worlds of both groups.

    .venv/bin/python benchmarks/groups.py [--num-envs 512 2048] [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from mjxrunner import MultiEnvRunner, backend_info

SCENES = ("puck", "puck_blocks")


def loops(n: int) -> dict:
    """name -> (step(), block()) for two groups of ``n`` worlds; warmed up."""
    rng = np.random.default_rng(0)
    u = rng.uniform(-1, 1, (2 * n, 2)).astype(np.float32)
    group = MultiEnvRunner.from_groups([(SCENES[0], n), (SCENES[1], n)])
    group.set_actions(u)
    alone = [MultiEnvRunner(scene, n) for scene in SCENES]
    for r, part in zip(alone, (u[:n], u[n:]), strict=True):
        r.set_actions(part)

    def separate() -> None:
        for r in alone:
            r.step()

    out = {
        "group": (group.step, lambda: jax.block_until_ready(group.data)),
        "separate": (separate, lambda: jax.block_until_ready([r.data for r in alone])),
    }
    for step, block in out.values():  # compile and warm up
        step()
        block()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", help="also write the figures to this file (JSON)")
    args = p.parse_args()
    info = backend_info()
    v = info["versions"]
    print(
        f"# {info['device_kind']} x{info['device_count']}, jax {v['jax']}, "
        f"mujoco-mjx {v['mujoco-mjx']}, impl jax, {info['qpos_dtype']}"
    )
    print(f"{'worlds':>11} {'loop':<9} {'steps/s':>10} {'ms/step':>8} {'x separate':>11}")
    rows = []
    for n in args.num_envs:
        timed = loops(n)
        best = dict.fromkeys(timed, float("inf"))
        for _ in range(args.rounds):
            for name, (step, block) in timed.items():
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    step()
                block()
                best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
        for name, seconds in best.items():
            ratio = best["separate"] / seconds
            rows.append({"num_envs": 2 * n, "loop": name, "seconds": seconds, "x": ratio})
            print(
                f"{f'2 x {n}':>11} {name:<9} {2 * n / seconds:>10.0f} "
                f"{1e3 * seconds:>8.3f} {ratio:>11.2f}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": info, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
