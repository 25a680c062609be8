"""Where packing a runner's state stops paying: a plain step loop on packed buffers
against the same loop on the state's leaves, per impl, model and batch size.

Prints, per size, the state's size and the median ms a step (``set_actions`` +
``step``) of each, from runs that alternate between the two. The ratio crosses 1
where the step's copy of the state into its buffers costs as much as the separate
arguments and results it saves: that size is the impl's
:meth:`~mjxrunner.engine.backends.Physics.pack_limit` on this platform.

    .venv/bin/python -m benchmarks.pack_limit --impl jax --model cartpole --num-envs 256 512 1024
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import jax
import numpy as np

import mjxrunner
from mjxrunner.engine import backends


@contextlib.contextmanager
def limit_forced(impl: str, limit: int | None):
    """Runners made inside pack up to ``limit`` bytes of state (None: any size)."""
    physics = type(backends.of(impl))
    own = physics.pack_limit
    physics.pack_limit = lambda *_: limit
    try:
        yield
    finally:
        physics.pack_limit = own


def ms_per_step(runner, actions: np.ndarray, steps: int) -> float:
    for _ in range(3):  # compiled and warm
        runner.set_actions(actions)
        runner.step()
    runner.block_until_ready()
    start = time.perf_counter()
    for _ in range(steps):
        runner.set_actions(actions)
        runner.step()
    runner.block_until_ready()
    return (time.perf_counter() - start) / steps * 1e3


def compare(impl: str, model: str, num_envs: int, steps: int, repeats: int) -> dict:
    runners = {}
    for mode, limit in (("packed", None), ("unpacked", 0)):
        with limit_forced(impl, limit):
            runners[mode] = mjxrunner.MultiEnvRunner(model, num_envs, impl=impl)
    actions = np.zeros((num_envs, runners["packed"].action_dim()), np.float32)
    times = {mode: [] for mode in runners}
    for _ in range(repeats):
        for mode, runner in runners.items():
            times[mode].append(ms_per_step(runner, actions, steps))
    engine = runners["packed"].engine
    own = backends.of(impl).pack_limit(
        engine.default_model.tree, engine.config.backend.device.platform, False
    )
    return {
        "MiB": sum(x.nbytes for x in jax.tree.leaves(engine.state)) / 2**20,
        "limit": "any" if own is None else f"{own / 2**20:.2f}",
        **{mode: statistics.median(t) for mode, t in times.items()},
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", default="jax", choices=sorted(backends.BY_NAME))
    p.add_argument("--model", default="cartpole")
    p.add_argument("--num-envs", type=int, nargs="+", default=[256, 512, 1024])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    print(f"impl {args.impl!r}, {args.model}, on {jax.devices()[0].platform}")
    print("worlds  state MiB  packed ms  unpacked ms  unpacked/packed  limit MiB")
    for n in args.num_envs:
        r = compare(args.impl, args.model, n, args.steps, args.repeats)
        print(
            f"{n:6d}  {r['MiB']:9.3f}  {r['packed']:9.3f}  {r['unpacked']:11.3f}"
            f"  {r['unpacked'] / r['packed']:15.2f}  {r['limit']:>9}"
        )


if __name__ == "__main__":
    main()
