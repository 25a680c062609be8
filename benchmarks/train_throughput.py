"""The whole PPO training loop against the physics alone, on one scene, in one run.

Prints two rates in control steps (env steps) per second, and their ratio:

* ``physics``: ``mujoco.batch`` stepping the task's scene, ``num_envs`` worlds on the
  same threads, ``substeps`` physics steps a control step, the controls written from
  NumPy between calls (random targets within the control range): the floor no
  trainer on MuJoCo's C engine can pass;
* ``training``: ``mjxrunner train``'s PPO (rollout with the task's observation,
  reward, autoreset and sensor noise, the policy's sampling, advantages and the
  minibatch updates), steady state, compile excluded.

    .venv/bin/python -m benchmarks.train_throughput                  # go1_joystick, 1,024
    .venv/bin/python -m benchmarks.train_throughput --num-envs 256 --json

The backend identity is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from benchmarks.native_throughput import native_batch
from mjxrunner import tasks
from mjxrunner.engine import cpu_fusion, cpu_pool
from mjxrunner.engine.backend import describe_backend
from mjxrunner.tools.train import ppo


def physics_rate(task_name: str, num_envs: int, threads: int, steps: int, rounds: int) -> float:
    """Control steps per second of ``mujoco.batch`` on the task's scene (median)."""
    import mujoco

    task = tasks.get(task_name)
    m = task.load_model()
    d = mujoco.MjData(m)
    if task.keyframe is not None:
        mujoco.mj_resetDataKeyframe(m, d, m.key(task.keyframe).id)
    mujoco.mj_forward(m, d)
    b, start, ctrl = native_batch(m, d, num_envs, threads)
    rng = np.random.default_rng(0)
    low, high = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    actions = [rng.uniform(low, high, (num_envs, m.nu)) * 0.2 for _ in range(steps)]
    rates = []
    for _ in range(rounds + 1):  # the first round warms up
        b.state[...] = start
        t0 = time.perf_counter()
        rows = b.state
        for a in actions:
            rows[:, ctrl] = a
            b.step(nstep=task.substeps)
        rates.append(num_envs * steps / (time.perf_counter() - t0))
    return float(np.median(rates[1:]))


def training_rate(config: ppo.PPOConfig, chunk: int, rounds: int) -> tuple[float, float, dict]:
    """``(env steps/s, compile s, backend info)`` of chunks of ``chunk`` updates."""
    env, start, one_update = ppo.make_parts(config)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(jax.jit(start)(jax.random.key(0)))
    segment = jax.jit(
        lambda c: jax.lax.scan(one_update, c, None, length=chunk),
        donate_argnums=0,
        compiler_options=cpu_fusion.compiler_options(env.impl),
    )
    carry, _ = jax.block_until_ready(segment(carry))
    compile_s = time.perf_counter() - t0
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        carry, _ = jax.block_until_ready(segment(carry))
        rates.append(chunk * config.steps_per_update / (time.perf_counter() - t0))
    return float(np.median(rates)), compile_s, env.config.backend.info()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="go1_joystick")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--num-threads", type=int, default=2)
    parser.add_argument("--rollout-steps", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=ppo.PPOConfig.epochs)
    parser.add_argument("--minibatches", type=int, default=ppo.PPOConfig.minibatches)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--symmetric", action="store_true")
    parser.add_argument("--chunk", type=int, default=5, help="updates per timed call")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cpu_pool.widen()  # as mjxrunner train does, before JAX runs anything

    config = ppo.PPOConfig(
        task=args.task, num_envs=args.num_envs, rollout_steps=args.rollout_steps,
        epochs=args.epochs, minibatches=args.minibatches, hidden=args.hidden,
        normalize_obs=True, symmetric=args.symmetric, impl="c", num_threads=args.num_threads,
    )  # fmt: skip
    trained, compile_s, backend = training_rate(config, args.chunk, args.rounds)
    steps = args.chunk * args.rollout_steps
    physics = physics_rate(args.task, args.num_envs, args.num_threads, steps, args.rounds)
    result = {
        "task": args.task,
        "num_envs": args.num_envs,
        "threads": args.num_threads,
        "substeps": tasks.get(args.task).substeps,
        "physics_env_steps_per_s": round(physics),
        "training_env_steps_per_s": round(trained),
        "ratio": round(trained / physics, 3),
        "compile_s": round(compile_s, 1),
        "config": {
            k: getattr(config, k)
            for k in ("rollout_steps", "epochs", "minibatches", "hidden", "symmetric")
        },
        "backend": backend,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.task}, {args.num_envs} worlds, {args.num_threads} threads, "
              f"{result['substeps']} substeps: mujoco.batch {physics / 1e3:.1f} k env steps/s, "
              f"PPO training {trained / 1e3:.1f} k env steps/s ({result['ratio']:.2f}x); "
              f"compile {compile_s:.1f} s")  # fmt: skip
        print(f"backend: {describe_backend(backend)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
