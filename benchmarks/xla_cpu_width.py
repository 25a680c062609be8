"""What a compiled call costs on XLA:CPU against the width of its program.

XLA:CPU runs a program of at most 8 thunks (kernels, copies, custom calls) one after
the other on the calling thread. A longer program runs on a dataflow executor that
hands ready thunks to its other threads once about 8 or more are ready at once,
and a custom call to another thread when anything else is ready beside it; each
hand-off costs a thread wake-up, which on a small virtual machine is tens of
microseconds. So the fixed cost of a call follows how many thunks are ready at
once more than how many there are.

Each row is ``width`` independent small kernels (a slice of 200 floats times a
constant, one result each, so nothing fuses), called and waited for in a loop:
microseconds per call, the best of three repeats. On this project's 2-core hosts
the cost per call steps up between 9 and 10 kernels, where about 8 are ready at
once besides the one running; a kernel more below that costs a few microseconds.

    .venv/bin/python -m benchmarks.xla_cpu_width [--widths 4 8 9 10 12 19 32]
"""

from __future__ import annotations

import argparse
import time

import mjxrunner  # noqa: F401  (the project's XLA:CPU flags, as every call sees them)


def parallel(width: int):
    import jax

    return jax.jit(lambda x: [x[i : i + 200] * (i + 1) for i in range(width)])


def per_call(f, x, calls: int) -> float:
    import jax

    jax.block_until_ready(f(x))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(f(x))
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[4, 8, 9, 10, 12, 19, 32])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    import jax.numpy as jnp

    x = jnp.arange(256.0, dtype=jnp.float32)
    print("| independent kernels | us per call |")
    print("| ---: | ---: |")
    for width in args.widths:
        print(f"| {width} | {per_call(parallel(width), x, args.calls):.1f} |", flush=True)


if __name__ == "__main__":
    main()
