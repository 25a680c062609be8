"""PPO in pure JAX on the functional env: the whole training run is ONE jitted function.

The algorithm lives in :mod:`mjxrunner.tools.train.ppo` (``mjxrunner train`` runs it
with checkpoints and logs); this script times it and records learning curves.

Rollouts (``lax.scan`` over env steps), advantage estimation and the minibatch
updates (``lax.scan`` over epochs and minibatches) all live inside ``train(key)``,
so the host only starts it and reads the learning curve at the end. The env runs in
``"same_step"`` autoreset mode: ``final_obs`` lets the critic bootstrap from the last
observation of a time-limited (truncated) episode, while terminated episodes
bootstrap from zero.

    .venv/bin/python benchmarks/ppo.py                       # cartpole balance, ~1 M steps
    .venv/bin/python benchmarks/ppo.py --updates 20 --json   # shorter; JSON summary
    .venv/bin/python benchmarks/ppo.py --task ant_velocity --num-envs 256 \
        --normalize-obs --out curve.json                     # the ant's velocity tracking
    .venv/bin/python benchmarks/ppo.py --task ant_velocity --num-envs 256 \
        --normalize-obs --impl c --wall-time 300 --updates 1000 # 5 minutes of training

Prints the learning curve (mean return of the episodes that ended in each update),
the compile time and the training throughput in env steps per second (steady state,
compile excluded), with the backend identity.

``--impl`` picks the physics (``jax`` by default; ``c`` steps MuJoCo's C engine on
``--num-threads`` threads). ``--wall-time S`` trains for S seconds of wall time
instead of a fixed run: the updates go in jitted chunks of ``--chunk`` (the
learning-rate schedule still spans ``--updates``), and training stops at the end of
the chunk nearest S seconds, or after ``--updates``. Two impls given the
same S are compared at equal wall time (compile time is reported apart).

A task whose observation is a dict of terms (``mjxrunner.tasks.locomotion``) is fed
to the MLP as the float vector terms concatenated in sorted order. A task that logs
per-step metrics in ``info["metrics"]`` (the locomotion task's tracking errors) gets
their mean over each update's rollout in the curve. ``--latency`` and
``--push-interval``/``--push-speed`` pass the env's action latency and pushes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from typing import Any

import jax
import numpy as np

from mjxrunner.engine import cpu_fusion
from mjxrunner.tools.train.ppo import (  # noqa: F401 - the names this script offers
    PPOConfig,
    evaluate_random,
    flat_obs,
    make_parts,
    make_train,
    observation_size,
    policy_mean,
)


def run(config: PPOConfig, seed: int) -> dict[str, Any]:
    """Compiles and runs ``train``; returns the curve, timings and throughput."""
    env, train = make_train(config)
    key = jax.random.key(seed)
    t0 = time.perf_counter()
    options = cpu_fusion.compiler_options(env.impl)  # impl c: the emitters on
    compiled = jax.jit(train, compiler_options=options).lower(key).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    params, metrics = jax.block_until_ready(compiled(key))
    train_s = time.perf_counter() - t0
    total_steps = config.num_updates * config.steps_per_update
    return {
        "config": dataclasses.asdict(config),
        "seed": seed,
        "compile_s": round(compile_s, 2),
        "train_s": round(train_s, 2),
        "env_steps": total_steps,
        "env_steps_per_s": round(total_steps / train_s),
        "mean_return": np.asarray(metrics["mean_return"]).tolist(),
        "episodes": np.asarray(metrics["episodes"]).astype(int).tolist(),
        "mean_reward": np.asarray(metrics["mean_reward"]).tolist(),
        **{k: np.asarray(v).tolist() for k, v in metrics.items() if k.startswith("info/")},
        "params": params,
        "backend": env.config.backend.info(),
    }


def run_for(config: PPOConfig, seed: int, wall_s: float, chunk: int = 5) -> dict[str, Any]:
    """Trains for ``wall_s`` seconds of wall time (compile apart), in jitted chunks of
    ``chunk`` updates, at most ``config.num_updates``, stopping at the end of the chunk
    nearest ``wall_s``; returns what :func:`run` does, plus ``wall_s`` (per update:
    seconds of training when its chunk ended)."""
    env, start, one_update = make_parts(config)

    def segment(carry):
        return jax.lax.scan(one_update, carry, None, length=chunk)

    key = jax.random.key(seed)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(jax.jit(start)(key))
    options = cpu_fusion.compiler_options(env.impl)  # impl c: the emitters on
    step = jax.jit(segment, donate_argnums=0, compiler_options=options).lower(carry).compile()
    compile_s = time.perf_counter() - t0
    chunks, ends = [], []
    t0 = time.perf_counter()
    while len(chunks) * chunk < config.num_updates:
        carry, metrics = step(carry)
        chunks.append(jax.device_get(metrics))  # waits for the chunk
        ends.append(time.perf_counter() - t0)
        last = ends[-1] - (ends[-2] if len(ends) > 1 else 0.0)
        if ends[-1] + last / 2 >= wall_s:  # the chunk end nearest the budget
            break
    train_s = ends[-1]
    metrics = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    total_steps = len(chunks) * chunk * config.steps_per_update
    return {
        "config": dataclasses.asdict(config),
        "seed": seed,
        "compile_s": round(compile_s, 2),
        "train_s": round(train_s, 2),
        "wall_time_budget_s": wall_s,
        "updates_done": len(chunks) * chunk,
        "env_steps": total_steps,
        "env_steps_per_s": round(total_steps / train_s),
        "wall_s": [round(e, 2) for e in ends for _ in range(chunk)],
        "mean_return": np.asarray(metrics["mean_return"]).tolist(),
        "episodes": np.asarray(metrics["episodes"]).astype(int).tolist(),
        "mean_reward": np.asarray(metrics["mean_reward"]).tolist(),
        **{k: np.asarray(v).tolist() for k, v in metrics.items() if k.startswith("info/")},
        "params": carry[0],
        "backend": env.config.backend.info(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default=PPOConfig.task)
    parser.add_argument("--num-envs", type=int, default=PPOConfig.num_envs)
    parser.add_argument("--rollout-steps", type=int, default=PPOConfig.rollout_steps)
    parser.add_argument("--updates", type=int, default=PPOConfig.num_updates)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-rate", type=float, default=PPOConfig.learning_rate)
    parser.add_argument("--entropy-coef", type=float, default=PPOConfig.entropy_coef)
    parser.add_argument("--hidden", type=int, default=PPOConfig.hidden)
    parser.add_argument("--epochs", type=int, default=PPOConfig.epochs)
    parser.add_argument("--minibatches", type=int, default=PPOConfig.minibatches)
    parser.add_argument("--normalize-obs", action="store_true")
    parser.add_argument("--latency", type=int, nargs=2, metavar=("LOW", "HIGH"))
    parser.add_argument("--push-interval", type=int, nargs=2, metavar=("FEWEST", "MOST"))
    parser.add_argument("--push-speed", type=float, default=0.5)
    parser.add_argument("--impl", default="jax", help="jax (default), warp, or c (cpp)")
    parser.add_argument("--num-threads", type=int, help="impl c's threads (default: every core)")
    parser.add_argument(
        "--wall-time", type=float, metavar="S", help="train for S seconds (see above)"
    )
    parser.add_argument("--chunk", type=int, default=5, help="updates per chunk of --wall-time")
    parser.add_argument(
        "--baseline-steps", type=int, default=500, help="steps of the random baseline (0: none)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    parser.add_argument("--out", help="write the JSON summary to this file")
    args = parser.parse_args(argv)
    pushes = None
    if args.push_interval is not None:
        pushes = (*args.push_interval, args.push_speed)
    config = PPOConfig(
        task=args.task,
        num_envs=args.num_envs,
        rollout_steps=args.rollout_steps,
        num_updates=args.updates,
        learning_rate=args.learning_rate,
        entropy_coef=args.entropy_coef,
        hidden=args.hidden,
        epochs=args.epochs,
        minibatches=args.minibatches,
        normalize_obs=args.normalize_obs,
        latency=None if args.latency is None else tuple(args.latency),
        pushes=pushes,
        impl=args.impl,
        num_threads=args.num_threads,
    )
    if args.wall_time is not None:
        result = run_for(config, args.seed, args.wall_time, args.chunk)
    else:
        result = run(config, args.seed)
    baseline = float("nan")
    if args.baseline_steps:
        baseline = evaluate_random(config, jax.random.key(args.seed + 1), args.baseline_steps)
    curve = result["mean_return"]
    logged = sorted(k for k in result if k.startswith("info/"))
    print(f"PPO on {config.task}: {config.num_envs} worlds x {config.rollout_steps} steps/update")
    print(f"random policy: mean return {baseline:.1f}")
    if "wall_s" in result:
        print(f"trained {result['train_s']} s of a {args.wall_time} s budget: "
              f"{result['updates_done']} of {config.num_updates} updates")  # fmt: skip
    every = max(1, len(curve) // 25)
    for i in range(0, len(curve), every):
        extra = "".join(f"  {k[5:]} {result[k][i]:.3f}" for k in logged)
        print(f"update {i + 1:4d}  env steps {(i + 1) * config.steps_per_update:9d}  "
              f"mean return {curve[i]:8.1f}{extra}")  # fmt: skip
    tail = [r for r in curve[-10:] if not math.isnan(r)]
    final = float(np.mean(tail)) if tail else float("nan")
    print(f"final mean return (last 10 updates): {final:.1f}")
    print(f"compile {result['compile_s']} s; training {result['train_s']} s for "
          f"{result['env_steps']} env steps = {result['env_steps_per_s']} env steps/s")  # fmt: skip
    summary = {k: v for k, v in result.items() if k != "params"}
    summary.update(random_return=baseline, final_return=final)
    if args.json:
        print(json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
