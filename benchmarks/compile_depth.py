"""Compile time and memory of one runner step against the depth of the kinematic tree.

A chain of ``depth`` capsule links, each on a hinge to its parent (contacts off, so
the tree is all that grows), is built, put on 64 worlds and stepped once; each
depth runs in a fresh process (no persistent compilation cache), which reports

* ``compile s``: the first ``step()`` (tracing, XLA compile, one step);
* ``step ms``: a later step at 64 worlds;
* ``peak RSS``: the process's peak resident memory.

Why depth matters for impl "jax": MJX's tree passes (``mjx._src.scan.body_tree``:
kinematics, composite inertia, RNE, velocities, the sparse LDL factorization above
nv = 60, ...) group bodies by depth and emit one ``vmap`` of the per-body function
for every depth level, in a Python loop, so the step's XLA program grows linearly
with depth. With XLA:CPU's fusion emitters on (``--emitters``, XLA's default), the
levels of kinematics fuse into one kernel that recomputes shared producers at
every use, and the cost of a step multiplies with each level; mjxrunner turns them
off (``mjxrunner.cpu_fusion``). impl "warp" runs each pass as Warp kernels that
loop over levels at run time.

    .venv/bin/python benchmarks/compile_depth.py [--depths 4 8 16 32] [--impl jax warp]
        [--emitters] [--timeout 600]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

NUM_ENVS = 64


def chain_xml(depth: int) -> str:
    """``depth`` links in a chain, each 0.1 long on a hinge about y."""
    body = ""
    for i in reversed(range(depth)):
        pos = "0 0 2" if i == 0 else "0 0 -0.1"
        body = (
            f"<body name='l{i}' pos='{pos}'><joint name='j{i}' axis='0 1 0' damping='0.1'/>"
            f"<geom type='capsule' fromto='0 0 0 0 0 -0.1' size='0.02' mass='0.1'/>"
            f"{body}</body>"
        )
    motors = "".join(f"<motor joint='j{i}' gear='0.1'/>" for i in range(min(depth, 4)))
    bent = " ".join(["0.3"] * depth)  # keyframe 0: every hinge at 0.3 rad, so gravity swings all
    return (
        "<mujoco><option timestep='0.005'><flag contact='disable'/></option>"
        f"<worldbody>{body}</worldbody><actuator>{motors}</actuator>"
        f"<keyframe><key qpos='{bent}'/></keyframe></mujoco>"
    )


def measure(depth: int, impl: str) -> dict:
    """In this process: build, step once (compile), time a later step."""
    import jax
    import mujoco
    import numpy as np

    import mjxrunner
    from mjxrunner import MultiEnvRunner

    m = mujoco.MjModel.from_xml_string(chain_xml(depth))
    start = time.perf_counter()
    runner = MultiEnvRunner(m, NUM_ENVS, impl=impl, keyframe=0)
    runner.step()
    jax.block_until_ready(runner.data.qpos)
    compile_s = time.perf_counter() - start
    runner.step()
    jax.block_until_ready(runner.data.qpos)
    start = time.perf_counter()
    for _ in range(10):
        runner.step()
    jax.block_until_ready(runner.data.qpos)
    step_ms = (time.perf_counter() - start) / 10 * 1e3
    assert np.isfinite(np.asarray(runner.data.qpos)).all()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        "depth": depth,
        "nv": m.nv,
        "impl": impl,
        "fusion_emitters_off": mjxrunner.cpu_fusion.active(),
        "compile_s": round(compile_s, 1),
        "step_ms": round(step_ms, 2),
        "peak_rss_mib": round(rss),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--impl", nargs="+", default=["jax", "warp"])
    parser.add_argument("--timeout", type=float, default=900, help="seconds per case")
    parser.add_argument("--emitters", action="store_true", help="keep XLA:CPU's fusion emitters on")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(int(args.one[0]), args.one[1])))
        return

    env = {k: v for k, v in os.environ.items() if k != "MJXRUNNER_JAX_CACHE"}
    if args.emitters:
        env["MJXRUNNER_CPU_FUSION_EMITTERS"] = "1"
    emitters = "on" if args.emitters else "off"
    print(f"XLA:CPU fusion emitters {emitters}, {NUM_ENVS} worlds, contacts off")
    rows = []
    print(f"{'impl':>5} {'depth':>5} {'nv':>4} {'compile s':>10} {'step ms':>8} {'peak RSS':>9}")
    for impl in args.impl:
        for depth in args.depths:
            cmd = [sys.executable, __file__, "--one", str(depth), impl]
            try:
                out = subprocess.run(
                    cmd, env=env, capture_output=True, text=True, timeout=args.timeout
                )
            except subprocess.TimeoutExpired:
                print(f"{impl:>5} {depth:>5}   over {args.timeout:.0f} s")
                continue
            if out.returncode != 0:
                print(f"{impl:>5} {depth:>5}   failed: {out.stderr.strip()[-300:]}")
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{impl:>5} {depth:>5} {row['nv']:>4} {row['compile_s']:>10.1f} "
                f"{row['step_ms']:>8.2f} {row['peak_rss_mib']:>6} MiB",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
