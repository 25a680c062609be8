"""Compile cost of a robot's env: ``reset`` plus the first ``step`` of a joystick task,
from cold caches and again from the caches, each in a fresh process.

Two modes, each in an empty temporary folder: ``jax``, JAX's persistent compilation
cache alone (the second process still traces and lowers every program to find it),
and ``kept``, as the command line and the Gymnasium door run (JAX's cache and the
package's kept programs, :mod:`mjxrunner.engine.programs`: nothing is traced again).

    .venv/bin/python -m benchmarks.robot_compile                       # g1, impl jax
    .venv/bin/python -m benchmarks.robot_compile --task go1_joystick --impl c
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

PROBE = textwrap.dedent(
    """
    import json, sys, time
    import jax, jax.numpy as jnp
    from mjxrunner.engine import cache, programs
    from mjxrunner.rl import env as E
    if sys.argv[4] == "kept":
        cache.use_compile_cache()  # as the command line and the Gymnasium door do
    task, impl, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t0 = time.perf_counter()
    env = E.make(task, n, impl=impl)
    t1 = time.perf_counter()
    state = jax.block_until_ready(E.jit_reset(env, jax.random.key(0)))
    t2 = time.perf_counter()
    state = jax.block_until_ready(E.jit_step(env, state, jnp.zeros((n, env.action_size))))
    t3 = time.perf_counter()
    times = {"make": t1 - t0, "reset": t2 - t1, "first_step": t3 - t2}
    print("RESULT", json.dumps({**times, "programs": programs.stats()}))
    """
)


def run(task: str, impl: str, num_envs: int, cache: str, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION")}
    env.update(
        JAX_COMPILATION_CACHE_DIR=os.path.join(cache, "jax"),
        MJXRUNNER_CACHE_DIR=cache,  # kept programs under programs/: empty at first
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
    )
    out = subprocess.run(
        [sys.executable, "-c", PROBE, task, impl, str(num_envs), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.split("RESULT ")[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="g1_joystick_mjx")
    p.add_argument("--impl", default="jax")
    p.add_argument("--num-envs", type=int, default=64)
    args = p.parse_args()
    for mode in ("jax", "kept"):
        with tempfile.TemporaryDirectory() as cache:
            for label in ("cold", "cached"):
                t = run(args.task, args.impl, args.num_envs, cache, mode)
                total = t["reset"] + t["first_step"]
                kept = t["programs"]
                print(
                    f"{args.task} impl {args.impl} x{args.num_envs} {mode} {label}: "
                    f"make {t['make']:.1f} s, reset {t['reset']:.1f} s, first step "
                    f"{t['first_step']:.1f} s, reset + first step {total:.1f} s | kept "
                    f"programs: read {kept['read']}, written {kept['written']}, not kept "
                    f"{kept['not_kept']} {kept['reason']}".rstrip(),
                    flush=True,
                )


if __name__ == "__main__":
    main()
