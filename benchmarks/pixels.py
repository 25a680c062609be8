"""Batched pixel throughput: frames/s of the renderer alone, steps/s of a physics
step followed by a render against the physics step alone, and steps/s of the pixel
env against the state-only env of the same task.

Renderer part (``--part renderer``): for each world count and image size, builds an
impl "warp" runner (for its device model and data) and a
:class:`mjxrunner.pixels.PixelRenderer` (one RGB camera), times the render context's
construction, the first call of each compiled function (XLA compile plus Warp's
kernel build or cache load) and, apart from that, the steady state: the median over
``--reps`` timed loops of ``--calls`` calls, each loop ended by
``block_until_ready``, the data of every call fed to the next.

Env part (``--part env``): ``cartpole_balance_pixels`` (one RGB camera at each size,
three frames stacked, rendered every step) against ``cartpole_balance`` (state
observation), both impl "warp", autoreset ``"next_step"``, uniform random actions:
``--env-steps`` env steps in one compiled ``lax.scan``; XLA's compiles
(``lower().compile()``) and the first call (Warp's kernel load) apart from the
median of ``--reps`` timed calls, with their spread ((max - min) / median).

    .venv/bin/python -m benchmarks.pixels --num-envs 64 256 --sizes 64 128
    .venv/bin/python -m benchmarks.pixels --part env --num-envs 64 256 1024
    .venv/bin/python -m benchmarks.pixels --device cuda --num-envs 1024 4096 --json
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner import MultiEnvRunner
from mjxrunner.engine import core
from mjxrunner.engine.backend import describe_backend
from mjxrunner.kit.pixels import PixelRenderer, PixelSpec
from mjxrunner.rl import env as mjxenv
from mjxrunner.tasks import cartpole, cartpole_pixels


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def _steady(call, data, calls: int, reps: int) -> float:
    """Median seconds per call over ``reps`` loops of ``calls`` chained calls."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            data = call(data)
        jax.block_until_ready(data)
        times.append((time.perf_counter() - t0) / calls)
    return float(np.median(times))


def measure(model: str, num_envs: int, size: int, device, calls: int, reps: int) -> dict:
    runner = MultiEnvRunner(model, num_envs, impl="warp", device=device)
    m, mx = runner.mj_model, runner.model
    spec = PixelSpec(0, width=size, height=size)
    t0 = time.perf_counter()
    renderer = PixelRenderer(m, num_envs, spec, devices=runner.device)
    context_s = time.perf_counter() - t0

    render = jax.jit(renderer.render)
    ctrl = jax.device_put(jnp.zeros((num_envs, m.nu), jnp.float32), runner.device)

    @jax.jit
    def physics(model, data, ctrl):
        return core.physics_step(model, data, ctrl, None, 1)[0]

    @jax.jit
    def physics_and_render(model, data, ctrl):
        return renderer.render(model, physics(model, data, ctrl))

    data = runner.data
    (data, frames), render_compile = _timed(render, mx, data)
    assert frames["rgb"].shape == (num_envs, size, size, 3)
    data, physics_compile = _timed(physics, mx, data, ctrl)
    (data, _), both_compile = _timed(physics_and_render, mx, data, ctrl)

    render_s = _steady(lambda d: render(mx, d)[0], data, calls, reps)
    physics_s = _steady(lambda d: physics(mx, d, ctrl), data, calls, reps)
    both_s = _steady(lambda d: physics_and_render(mx, d, ctrl)[0], data, calls, reps)
    return {
        "num_envs": num_envs,
        "size": size,
        "context_s": context_s,
        "compile_s": {
            "render": render_compile,
            "physics": physics_compile,
            "physics_and_render": both_compile,
        },
        "frames_per_s": num_envs / render_s,
        "physics_steps_per_s": num_envs / physics_s,
        "physics_and_render_steps_per_s": num_envs / both_s,
        "megapixels_per_s": num_envs * size * size / render_s / 1e6,
    }


def _env_scan(steps: int):
    """``run(env, state, key) -> state``: ``steps`` env steps with uniform random
    actions in one ``lax.scan`` (jitted; the env is an argument)."""

    def run(env, state, key):
        def body(s, k):
            shape = (env.num_envs, env.action_size)
            action = jax.random.uniform(k, shape, minval=env.low, maxval=env.high)
            return mjxenv.step(env, s, action), None

        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    return jax.jit(run)


def measure_env(task, num_envs: int, device, steps: int, reps: int) -> dict:
    """Env steps/s of ``task`` on ``num_envs`` worlds (impl "warp"): XLA compiles
    (``lower().compile()``) and the first call (Warp's kernel load) apart from the
    steady state."""
    env = mjxenv.make(task, num_envs, impl="warp", device=device)
    key = jax.random.key(0)
    t0 = time.perf_counter()
    reset = mjxenv.jit_reset.lower(env, key).compile()
    reset_compile_s = time.perf_counter() - t0
    state = jax.block_until_ready(reset(env, key))
    run = _env_scan(steps)
    t0 = time.perf_counter()
    scan = run.lower(env, state, key).compile()
    scan_compile_s = time.perf_counter() - t0
    state, first_s = _timed(scan, env, state, jax.random.key(1))
    times = []
    for r in range(reps):
        state, seconds = _timed(scan, env, state, jax.random.key(2 + r))
        times.append(seconds)
    return {
        "task": task.name,
        "num_envs": num_envs,
        "steps_per_scan": steps,
        "reset_compile_s": reset_compile_s,
        "scan_compile_s": scan_compile_s,
        "first_scan_s": first_s,
        "steps_per_s": num_envs * steps / float(np.median(times)),
        "spread": (max(times) - min(times)) / float(np.median(times)),
    }


def env_rows(args) -> list[dict]:
    rows = []
    measure_one = lambda task, n: measure_env(task, n, args.device, args.env_steps, args.reps)  # noqa: E731
    for n in args.num_envs:
        rows.append({"size": None, **measure_one(cartpole.BALANCE, n)})
        _print_env_row(rows[-1], args)
        for size in args.sizes:
            spec = PixelSpec("side", width=size, height=size)
            task = cartpole_pixels.BALANCE_PIXELS.replace(pixels=spec)
            rows.append({"size": size, **measure_one(task, n)})
            _print_env_row(rows[-1], args)
    return rows


def _print_env_row(r: dict, args) -> None:
    if args.json:
        return
    what = "state" if r["size"] is None else f"{r['size']}x{r['size']} rgb"
    print(
        f"env {r['num_envs']} worlds, {what}: {r['steps_per_s']:,.0f} steps/s, compile "
        f"reset {r['reset_compile_s']:.1f} s, step scan {r['scan_compile_s']:.1f} s, first "
        f"scan {r['first_scan_s']:.1f} s",
        flush=True,
    )


def renderer_rows(args) -> list[dict]:
    rows = []
    for size in args.sizes:
        for n in args.num_envs:
            rows.append(measure(args.model, n, size, args.device, args.calls, args.reps))
            if not args.json:
                r = rows[-1]
                print(
                    f"{args.model} {n} worlds {size}x{size}: {r['frames_per_s']:,.0f} frames/s, "
                    f"physics+render {r['physics_and_render_steps_per_s']:,.0f} steps/s "
                    f"(physics alone {r['physics_steps_per_s']:,.0f}), compile render "
                    f"{r['compile_s']['render']:.1f} s, context {r['context_s']:.1f} s",
                    flush=True,
                )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("all", "renderer", "env"), default="all")
    p.add_argument("--model", default="cartpole", help="scene of the renderer part")
    p.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: JAX's)")
    p.add_argument("--calls", type=int, default=5, help="renderer: calls per timed loop")
    p.add_argument("--env-steps", type=int, default=10, help="env: steps per timed scan")
    p.add_argument("--reps", type=int, default=3, help="timed loops (median reported)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    import warp as wp

    wp.config.quiet = True  # Warp's per-module load lines would bury the table
    out = {"model": args.model, "rgb_camera": 0}
    if args.part in ("all", "renderer"):
        out["rows"] = renderer_rows(args)
    if args.part in ("all", "env"):
        out["env_rows"] = env_rows(args)
    out["backend"] = MultiEnvRunner(args.model, 1, impl="warp", device=args.device).backend_info
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(describe_backend(out["backend"]))
    if "rows" in out:
        print(
            f"{'worlds':>7} {'size':>5} {'frames/s':>10} {'Mpix/s':>7} {'phys+render/s':>14} "
            f"{'physics/s':>10} {'compile s':>10} {'context s':>9}"
        )
        for r in out["rows"]:
            print(
                f"{r['num_envs']:>7} {r['size']:>5} {r['frames_per_s']:>10,.0f} "
                f"{r['megapixels_per_s']:>7.2f} {r['physics_and_render_steps_per_s']:>14,.0f} "
                f"{r['physics_steps_per_s']:>10,.0f} {r['compile_s']['render']:>10.1f} "
                f"{r['context_s']:>9.1f}"
            )
    if "env_rows" in out:
        print(
            "| worlds | observation | env steps/s | vs state | spread | compile: reset s "
            "| step scan s |"
        )
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        state = {}
        for r in out["env_rows"]:
            if r["size"] is None:
                state[r["num_envs"]] = r["steps_per_s"]
            what = "state (5,)" if r["size"] is None else f"rgb {r['size']}x{r['size']}, 3 stacked"
            ratio = r["steps_per_s"] / state[r["num_envs"]]
            print(
                f"| {r['num_envs']} | {what} | {r['steps_per_s']:,.0f} | {ratio:.3f}x | "
                f"{r['spread']:.0%} | {r['reset_compile_s']:.1f} | {r['scan_compile_s']:.1f} |"
            )


if __name__ == "__main__":
    main()
