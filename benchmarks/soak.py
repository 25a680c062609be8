"""Soak test: a long run of step / autoreset / randomize, watching speed, memory and
compiles; and the cost of the unstable-world check in the step.

Usage::

    python -m benchmarks.soak                       # 20k batched steps x 1024 worlds
    python -m benchmarks.soak --steps 2000 --num-envs 256 --mode rollout
    python -m benchmarks.soak --impl c --mode gym --skip-check-cost
    python -m benchmarks.soak --check-cost-only

Two parts:

1. *Check cost*: the pure step (``mjxrunner.core.step``) compiled with the
   instability guard (``core.DEFAULT_GUARDS``) and without it (the overflow guard alone), timed in
   interleaved rounds, both as a ``lax.scan`` of steps (no dispatch in the timing)
   and as one compiled call per step (what ``runner.step`` does).
2. *Soak*: cartpole with randomized pole mass and joint damping (redrawn on
   reset), on ``--impl`` (``"c"``: MuJoCo's C engine on ``--num-threads``, where a
   leak of the host call would show). ``--mode step`` (default) is a
   ``MultiEnvRunner`` that calls ``set_actions`` and ``step`` once per batched step,
   with fresh random actions, and every ``--reset-every`` steps resets the worlds
   that fell, were truncated (unstable) or reached the time limit: an autoreset
   driven from the host, as a training loop over the runner does. ``--mode
   rollout`` runs ``runner.rollout`` with a random policy in chunks of
   ``--reset-every`` steps and resets between chunks. ``--mode gym`` steps the
   Gymnasium door on the cartpole balance task with same-step autoreset (the task
   ends and restarts worlds inside the step; every step's results come to NumPy).

Every ``--report-every`` seconds it prints world-steps per second over the interval,
resident memory (``/proc/self/statm``) and its growth since warm-up, peak resident
memory, XLA compiles since warm-up (``CompileCounter``) and the health counters.
Compile time (the warm-up) is reported apart from steady-state throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner import CompileCounter, MultiEnvRunner, backend_info
from mjxrunner.engine import core, guards
from mjxrunner.engine.params import Term

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    """Resident memory now, MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def peak_mib() -> float:
    """Peak resident memory of the process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- 1. the cost of the check ---------------------------------------------------------


def check_cost(num_envs: int, rounds: int, scan_steps: int, loop_steps: int) -> dict:
    """Steps/s of the pure step with and without the instability check."""
    r = MultiEnvRunner("cartpole", num_envs, seed=0)
    model, start = r.model, r.state
    rng = np.random.default_rng(0)
    actions = jnp.asarray(rng.uniform(-1, 1, (scan_steps, num_envs, 1)), jnp.float32)
    checks = {"with_check": core.DEFAULT_GUARDS, "without_check": (guards.overflow(),)}

    scans = {
        k: jax.jit(lambda m, s, u, c=c: core.rollout(m, s, u, scan_steps, guards=c)[0])
        for k, c in checks.items()
    }
    steps = {
        k: jax.jit(lambda m, s, c=c: core.step(m, s, guards=c), donate_argnums=(1,))
        for k, c in checks.items()
    }
    compile_s = {}
    for k in checks:  # compile (timed apart) and warm up
        t = time.perf_counter()
        jax.block_until_ready(scans[k](model, start, actions))
        jax.block_until_ready(steps[k](model, jax.tree.map(jnp.copy, start)))
        compile_s[k] = time.perf_counter() - t

    rates: dict[str, dict[str, list[float]]] = {"scan": {}, "loop": {}}
    for _ in range(rounds):
        for k in checks:  # interleaved, so load changes hit both alike
            t = time.perf_counter()
            jax.block_until_ready(scans[k](model, start, actions))
            rates["scan"].setdefault(k, []).append(
                scan_steps * num_envs / (time.perf_counter() - t)
            )
            s = jax.tree.map(jnp.copy, start)
            jax.block_until_ready(s)
            t = time.perf_counter()
            for _ in range(loop_steps):
                s = steps[k](model, s)
            jax.block_until_ready(s)
            rates["loop"].setdefault(k, []).append(
                loop_steps * num_envs / (time.perf_counter() - t)
            )
    out = {"num_envs": num_envs, "rounds": rounds, "compile_s": compile_s}
    for how, by in rates.items():
        med = {k: statistics.median(v) for k, v in by.items()}
        # per-round ratios cancel most of the drift a shared machine adds
        ratio = statistics.median(
            w / o for w, o in zip(by["with_check"], by["without_check"], strict=True)
        )
        out[how] = {**{f"{k}_steps_per_s": v for k, v in med.items()}, "ratio": ratio}
    return out


# --- 2. the soak ------------------------------------------------------------------------


def soak(args: argparse.Namespace) -> dict:
    n = args.num_envs
    t0 = time.perf_counter()
    threads = {"num_threads": args.num_threads} if args.num_threads else {}
    terms = [
        Term("body_mass", 0.5, 2.0, index=2),  # pole mass, x0.5..x2
        Term("dof_damping", 0.0, 0.05, operation="set"),  # both joints
    ]
    rng = np.random.default_rng(args.seed)
    if args.mode == "gym":
        from mjxrunner.doors.gym import MjxVectorEnv

        door = MjxVectorEnv(
            "cartpole_balance",
            n,
            autoreset_mode="same_step",
            seed=args.seed,
            impl=args.impl,
            **threads,
        )
        door.set_randomization(terms, on_reset=True)
        door.reset()

        def chunk():
            for _ in range(args.reset_every):
                door.step(rng.uniform(-1, 1, (n, 1)).astype(np.float32))

        return _soak(args, chunk, lambda: door.state, lambda: door.health.totals(), t0)

    r = MultiEnvRunner("cartpole", n, seed=args.seed, keyframe="upright", impl=args.impl, **threads)
    r.set_randomization(terms, on_reset=True)
    hinge = 1  # qpos index of the pole angle

    def policy(state, keys):
        del state
        return jax.vmap(lambda k: jax.random.uniform(k, (1,), minval=-1, maxval=1))(keys)

    def autoreset():
        done = (
            (np.abs(np.asarray(r.data.qpos)[:, hinge]) > 0.8)
            | r.truncated
            | (r.episode_length >= args.time_limit)
        )
        if done.any():
            r.reset(done)

    def chunk():
        """``--reset-every`` batched steps and one autoreset."""
        if args.mode == "step":
            for _ in range(args.reset_every):
                r.set_actions(rng.uniform(-1, 1, (n, 1)))
                r.step()
        else:
            r.rollout(policy, args.reset_every)
        autoreset()

    def warm():
        r.reset(np.zeros(n, bool))  # the masked reset, in case no world fell yet

    return _soak(args, chunk, lambda: r.state, lambda: r.health.totals(), t0, warm)


def _soak(args, chunk, state, totals, t0, warm=None) -> dict:
    """Runs ``chunk`` (``--reset-every`` batched steps) until ``--steps``, printing and
    returning a row every ``--report-every`` seconds; ``state()`` is what to wait for,
    ``totals()`` the health counters."""
    n = args.num_envs
    for _ in range(args.warmup_chunks):  # compiles everything the loop uses
        chunk()
    if warm is not None:
        warm()
    jax.block_until_ready(state())
    warmup_s = time.perf_counter() - t0
    base_rss = rss_mib()
    print(
        f"# warm-up (compiles) {warmup_s:.1f} s; resident {base_rss:.0f} MiB; "
        f"mode {args.mode}, {n} worlds, reset every {args.reset_every} steps",
        flush=True,
    )
    print(
        f"{'time_s':>7} {'steps':>9} {'world_steps':>12} {'steps/s':>10} {'rss_MiB':>8} "
        f"{'d_rss':>6} {'peak':>6} {'compiles':>8} {'resets':>9} {'unstable':>8}",
        flush=True,
    )
    rows = []
    done_steps = 0
    with CompileCounter() as compiles:
        start = last_t = time.perf_counter()
        last_steps = 0
        while done_steps < args.steps:
            chunk()
            done_steps += args.reset_every
            now = time.perf_counter()
            if now - last_t >= args.report_every or done_steps >= args.steps:
                jax.block_until_ready(state())
                now = time.perf_counter()
                counts = totals()
                row = {
                    "time_s": now - start,
                    "steps": done_steps,
                    "world_steps": done_steps * n,
                    "steps_per_s": (done_steps - last_steps) * n / (now - last_t),
                    "rss_mib": rss_mib(),
                    "peak_mib": peak_mib(),
                    "compiles": compiles.count,
                    **counts,
                }
                rows.append(row)
                print(
                    f"{row['time_s']:7.1f} {done_steps:9d} {row['world_steps']:12d} "
                    f"{row['steps_per_s']:10.0f} {row['rss_mib']:8.0f} "
                    f"{row['rss_mib'] - base_rss:+6.0f} {row['peak_mib']:6.0f} "
                    f"{row['compiles']:8d} {counts['resets']:9d} {counts['unstable_events']:8d}",
                    flush=True,
                )
                last_t, last_steps = now, done_steps
    total_s = time.perf_counter() - start
    later = rows[len(rows) // 2 :] or rows
    return {
        "mode": args.mode,
        "impl": args.impl,
        "num_envs": n,
        "batched_steps": done_steps,
        "world_steps": done_steps * n,
        "warmup_s": warmup_s,
        "steady_s": total_s,
        "mean_steps_per_s": done_steps * n / total_s,
        "rss_after_warmup_mib": base_rss,
        "rss_end_mib": rows[-1]["rss_mib"],
        "rss_growth_second_half_mib": later[-1]["rss_mib"] - later[0]["rss_mib"],
        "compiles_after_warmup": rows[-1]["compiles"],
        "health": totals(),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20_000, help="batched steps (x num-envs)")
    p.add_argument("--mode", choices=("step", "rollout", "gym"), default="step")
    p.add_argument("--impl", default="jax", help='"jax", "warp" or "c" (the soak only)')
    p.add_argument("--num-threads", type=int, default=0, help='impl "c": 0 is every core')
    p.add_argument("--reset-every", type=int, default=10)
    p.add_argument("--time-limit", type=int, default=500)
    p.add_argument("--warmup-chunks", type=int, default=3)
    p.add_argument("--report-every", type=float, default=15.0, help="seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cost-rounds", type=int, default=7)
    p.add_argument("--check-cost-only", action="store_true")
    p.add_argument("--skip-check-cost", action="store_true")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)

    result = {"backend": backend_info(args.impl), "argv": sys.argv[1:]}
    if not args.skip_check_cost:
        cost = check_cost(args.num_envs, args.cost_rounds, scan_steps=200, loop_steps=200)
        result["check_cost"] = cost
        for how in ("scan", "loop"):
            c = cost[how]
            print(
                f"# check cost ({how}, {args.num_envs} cartpoles, median of "
                f"{args.cost_rounds}): with {c['with_check_steps_per_s']:.0f} steps/s, "
                f"without {c['without_check_steps_per_s']:.0f} steps/s, "
                f"ratio with/without {c['ratio']:.3f}",
                flush=True,
            )
    if not args.check_cost_only:
        s = soak(args)
        result["soak"] = s
        print(
            f"# {s['world_steps']:,} world-steps in {s['steady_s']:.0f} s after "
            f"{s['warmup_s']:.0f} s warm-up: {s['mean_steps_per_s']:.0f} steps/s; "
            f"resident {s['rss_after_warmup_mib']:.0f} -> {s['rss_end_mib']:.0f} MiB "
            f"({s['rss_growth_second_half_mib']:+.0f} MiB over the second half); "
            f"compiles after warm-up: {s['compiles_after_warmup']}; health {s['health']}",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
