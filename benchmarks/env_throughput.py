"""Env steps/s of the task step (observation, reward, flags, autoreset) against the bare
physics step (``core.step``) at the same batch.

Each variant runs ``--steps`` steps inside one ``lax.scan``. Actions are zero by
default: balance episodes then end after ~45 steps (at 1024 worlds ~20 worlds restart
in every step, so the restart branch always runs) and the cart stays off its rail
limits in every variant. With ``--actions random`` the variants visit different
states (without restarts the carts drift onto their limits), and MJX's solver, whose
iteration count under ``vmap`` is the maximum over the batch, then costs different
amounts per variant: the comparison measures the states, not the step.

* ``bare``: ``core.step`` only;
* ``disabled``: the task step without restarts (observation, reward, flags, stats);
* ``same_step``: with autoreset, fresh random starts (the built-in task needs no
  forward pass on restart);
* ``same_step+forward``: the same task with ``forward_on_reset=True``, as a task whose
  observation reads derived quantities needs;
* ``same_step+forward+pool``: as above, restarts gathered from 256 cached starts.

    .venv/bin/python benchmarks/env_throughput.py [--num-envs 1024] [--rounds 5] [--json]

Measured on a 2-core CPU machine shared with other jobs (load ~8; ratios from one
run of interleaved rounds count, absolute figures drift), impl jax, float32, 1024
worlds, zero actions:

    variant                     steps/s  x bare
    bare                         410987    1.00
    disabled                     425457    1.04
    same_step                    240901    0.59   ~11 restarts per step
    same_step+forward            153862    0.37
    same_step+forward+pool       292059    0.71

Observation, reward, flags and statistics cost nothing measurable; the restart does:
it is computed for every world (random draws from each world's stream, and a select
over the whole batched ``mjx.Data``) whenever any world ends, which at 1024 worlds
is every step. A forward pass per start costs more; the pool removes it.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp

from mjxrunner import backend_info, core, tasks
from mjxrunner import env as E

RANDOM_ACTIONS = False  # set from --actions


def _actions(key, env):
    shape = (env.num_envs, env.action_size)
    if RANDOM_ACTIONS:
        return jax.random.uniform(key, shape, minval=env.low, maxval=env.high)
    return jnp.zeros(shape, env.low.dtype)


def bare_loop(env: E.Env, steps: int):
    def run(env, state, key):
        def body(s, k):
            return core.step(env.model, s.replace(ctrl=_actions(k, env))), None

        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    return jax.jit(run), lambda key: E.reset(env, key).runner


def env_loop(env: E.Env, steps: int):
    def run(env, state, key):
        def body(s, k):
            return E.step(env, s, _actions(k, env)), None

        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    return jax.jit(run), lambda key: E.reset(env, key)


def compile_variant(env: E.Env, loop, steps: int) -> dict:
    """Compiles one variant and runs it once; returns what timing needs."""
    run, first_state = loop(env, steps)
    state = jax.jit(first_state)(jax.random.key(0))
    t0 = time.perf_counter()
    state = jax.block_until_ready(run(env, state, jax.random.key(1)))
    return {"run": run, "env": env, "state": state, "compile_s": time.perf_counter() - t0}


def time_once(v: dict, steps: int, key: jax.Array) -> float:
    t0 = time.perf_counter()
    v["state"] = jax.block_until_ready(v["run"](v["env"], v["state"], key))
    return v["env"].num_envs * steps / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--actions", choices=("zero", "random"), default="zero")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    global RANDOM_ACTIONS
    RANDOM_ACTIONS = args.actions == "random"

    task = tasks.get("cartpole_balance")
    n = args.num_envs
    env = E.make(task, n, autoreset="same_step")
    forward = E.make(task.replace(forward_on_reset=True), n, autoreset="same_step")
    variants = [
        ("bare", env, bare_loop),
        ("disabled", env.with_autoreset("disabled"), env_loop),
        ("same_step", env, env_loop),
        ("same_step+forward", forward, env_loop),
        ("same_step+forward+pool", forward.with_reset_pool(256, jax.random.key(0)), env_loop),
    ]
    compiled = [compile_variant(e, loop, args.steps) for _, e, loop in variants]
    # Rounds interleave the variants, so a burst of load elsewhere hits them alike;
    # each keeps its best round.
    best = [0.0] * len(variants)
    for r in range(args.rounds):
        for i, v in enumerate(compiled):
            best[i] = max(best[i], time_once(v, args.steps, jax.random.key(2 + r)))
    rows = []
    for (name, _, _), v, rate in zip(variants, compiled, best, strict=True):
        row = {"variant": name, "compile_s": round(v["compile_s"], 1), "steps_per_s": round(rate)}
        if isinstance(v["state"], E.EnvState):
            row["episodes_per_step"] = round(
                E.episode_statistics(v["state"])["episodes"] / (args.steps * (1 + args.rounds)), 2
            )
        rows.append(row)
    base = rows[0]["steps_per_s"]
    print(f"cartpole_balance, {n} worlds, {args.steps} steps per scan, {args.actions} actions")
    print(f"{'variant':24s} {'steps/s':>10s} {'x bare':>7s} {'compile s':>10s}")
    for row in rows:
        row["vs_bare"] = round(row["steps_per_s"] / base, 2)
        print(
            f"{row['variant']:24s} {row['steps_per_s']:10d} {row['vs_bare']:7.2f} "
            f"{row['compile_s']:10.1f}"
        )
    if args.json:
        summary = {"num_envs": n, "actions": args.actions, "rows": rows}
        print(json.dumps({**summary, "backend": backend_info("jax")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
