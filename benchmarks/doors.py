"""Steps/s of every front door against the jitted functional step called from a Python loop.

One run times every door at each batch size, in interleaved rounds (a burst of load
elsewhere hits them alike; each keeps its best round: many short rounds, so that on
a shared machine each door meets a quiet moment), cartpole balance, random actions
made on the host beforehand (each door gets them in its own type: NumPy, torch,
JAX):

* ``functional``: ``state = env.jit_step(env, state, action)``, blocked once at the
  end of a round: the reference, and the most favourable loop (the host dispatches
  step t + 1 while the device still computes step t);
* ``functional, synced``: the same, waiting for each step's observation, as any loop
  whose policy runs on the host must;
* ``gym``: ``MjxVectorEnv.step`` (NumPy out: one transfer per step);
* ``torch``: ``TorchVecEnv.step`` (tensors out, views of two output buffers; no
  transfer);
* ``rsl_rl``: ``RslRlVecEnv.step`` (TensorDict observations, long dones);
* ``skrl``: skrl's own ``wrap_env(TorchVecEnv, wrapper="isaaclab")``;
* ``brax``: ``jax.jit(BraxEnv.step)`` from a Python loop (Brax's trainers call it
  inside their own jit, so this is its worst case).

Every door that hands out data the host reads (NumPy; torch tensors on a CPU, where
an export waits for its buffer) waits for every step, so it loses the overlap the
reference loop has; "functional, synced" shows what that overlap is worth. A door
steps the state packed into a few buffers (``mjxrunner.door``), which costs less
host time per call than the reference's ~320 arguments and ~100 outputs.

``--calls`` adds where the time of one call goes, per batch size: the host time of
one call with nothing queued (the call returns once the work is handed to the
device; ms, median of 200) and one synced call (call and wait; best of 5 rounds of
100), for the compiled step over the state's leaves (``env.flat_step``, as
``jit_step`` runs it, without flattening) and over packed buffers, without and with
donation; then the host time of handing out the packed outputs (``device_get``,
DLPack exports) once they are ready.

    .venv/bin/python benchmarks/doors.py [--num-envs 64 1024] [--steps 100] [--rounds 20]
        [--calls] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from mjxrunner import backend_info, tasks
from mjxrunner.rl import env as E

TASK = tasks.get("cartpole_balance")


def doors(n: int, steps: int) -> dict:
    """name -> (step(t), finish()) for ``n`` worlds; every door reset and warmed up."""
    import torch
    from skrl.envs.wrappers.torch import wrap_env

    from mjxrunner.doors.brax import BraxEnv
    from mjxrunner.doors.gym import MjxVectorEnv
    from mjxrunner.doors.rsl_rl import RslRlVecEnv
    from mjxrunner.doors.torch import TorchVecEnv

    rng = np.random.default_rng(0)
    host = [rng.uniform(-1, 1, (n, 1)).astype(np.float32) for _ in range(steps)]
    dev = [jax.device_put(a) for a in host]
    tens = [torch.from_numpy(a) for a in host]
    out = {}

    env = E.make(TASK, n, autoreset="same_step")
    box = {"s": E.jit_reset(env, jax.random.key(0))}

    def functional(t):
        box["s"] = E.jit_step(env, box["s"], dev[t])

    def functional_synced(t):
        box["s"] = E.jit_step(env, box["s"], dev[t])
        box["s"].obs.block_until_ready()

    finish = lambda: box["s"].obs.block_until_ready()  # noqa: E731
    out["functional"] = (functional, finish)
    out["functional, synced"] = (functional_synced, finish)

    gym = MjxVectorEnv(TASK, n, autoreset_mode="SameStep")
    gym.reset(seed=0)
    out["gym"] = (lambda t: gym.step(host[t]), lambda: None)

    def synchronize(door):
        # the tensors a torch door hands out on a CPU are ready (an export waits); on
        # CUDA, torch waits for the device
        if door.device.type == "cuda":
            return lambda: torch.cuda.synchronize(door.device)
        return lambda: None

    door = TorchVecEnv(TASK, n)
    door.reset(seed=0)
    out["torch"] = (lambda t: door.step(tens[t]), synchronize(door))

    rsl = RslRlVecEnv(TASK, n)
    rsl.get_observations()
    out["rsl_rl"] = (lambda t: rsl.step(tens[t]), synchronize(rsl.env))

    skrl_door = TorchVecEnv(TASK, n)
    skrl_env = wrap_env(skrl_door, wrapper="isaaclab", verbose=False)
    skrl_env.reset()
    out["skrl"] = (lambda t: skrl_env.step(tens[t]), synchronize(skrl_door))

    brax = BraxEnv(TASK)
    brax_step = jax.jit(brax.step)
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), n))
    bbox = {"s": jax.jit(brax.reset)(keys)}

    def brax_door(t):
        bbox["s"] = brax_step(bbox["s"], dev[t])

    out["brax"] = (brax_door, lambda: bbox["s"].obs.block_until_ready())

    for step, finish in out.values():  # compile and warm up
        for t in range(5):
            step(t)
        finish()
    return out


def time_round(step, finish, steps: int, n: int) -> float:
    t0 = time.perf_counter()
    for t in range(steps):
        step(t)
    finish()
    return n * steps / (time.perf_counter() - t0)


def calls(n: int) -> list[dict]:
    """Host time of one compiled step, over leaves and over packed buffers."""
    import torch

    from mjxrunner.doors import door
    from mjxrunner.engine import packing

    env = E.make(TASK, n, autoreset="same_step")
    state = E.jit_reset(env, jax.random.key(0))
    action = jax.device_put(np.zeros((n, 1), np.float32))
    env_leaves, env_def = jax.tree.flatten(env)
    leaves, state_def = jax.tree.flatten(state)
    env_layout, layout = packing.Layout.of(env), packing.Layout.of(state)
    env_buffers = packing.packer(env_layout)(env_leaves)
    variants = {
        "leaves": (E.flat_step(env_def, state_def, door.outputs), env_leaves, leaves),
        "packed": (door.packed_step(env_layout, layout, door.outputs, False), env_buffers, None),
        "packed, donated": (
            door.packed_step(env_layout, layout, door.outputs, True),
            env_buffers,
            None,
        ),
    }
    rows = []
    for name, (step, e, s) in variants.items():
        box = {"s": packing.packer(layout)(leaves) if s is None else s}

        def call(step=step, e=e, box=box):
            box["s"], box["out"] = step(e, box["s"], action)

        def ready(box=box):
            jax.block_until_ready(box["out"])

        for _ in range(5):
            call()
            ready()
        host = []
        for _ in range(200):
            t0 = time.perf_counter()
            call()
            host.append(time.perf_counter() - t0)
            ready()
        synced = min(time_round(lambda t: (call(), ready()), ready, 100, 1) for _ in range(5))
        n_args = len(jax.tree.leaves((e, box["s"], action)))
        n_out = len(jax.tree.leaves(box["s"])) + len(jax.tree.leaves(box["out"]))
        rows.append(
            {
                "num_envs": n,
                "call": f"{name} ({n_args} in, {n_out} out)",
                "host_ms": round(float(np.median(host)) * 1e3, 3),
                "synced_ms": round(1e3 / synced, 3),
            }
        )
    out = box["out"]
    floats, flags, _ = out

    def timed(f, reps=500):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        return round((time.perf_counter() - t0) / reps * 1e3, 3)

    rows.append(
        {
            "num_envs": n,
            "call": "device_get(outputs)",
            "host_ms": timed(lambda: jax.device_get(out)),
            "synced_ms": None,
        }
    )
    rows.append(
        {
            "num_envs": n,
            "call": "2 DLPack exports",
            "host_ms": timed(lambda: (torch.from_dlpack(floats), torch.from_dlpack(flags))),
            "synced_ms": None,
        }
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", action="store_true", help="where one call's time goes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in args.num_envs:
        found = doors(n, args.steps)
        best = dict.fromkeys(found, 0.0)
        for _ in range(args.rounds):
            for name, (step, finish) in found.items():
                best[name] = max(best[name], time_round(step, finish, args.steps, n))
        base, synced = best["functional"], best["functional, synced"]
        for name, rate in best.items():
            rows.append(
                {
                    "num_envs": n,
                    "door": name,
                    "steps_per_s": round(rate),
                    "ms_per_step": round(n / rate * 1e3, 3),
                    "vs_functional": round(rate / base, 2),
                    "vs_synced": round(rate / synced, 2),
                }
            )
    print(f"{TASK.name}, {args.steps} steps per round, best of {args.rounds} rounds")
    print(
        f"{'worlds':>6s} {'door':20s} {'steps/s':>10s} {'ms/step':>8s} "
        f"{'x functional':>13s} {'x synced':>9s}"
    )
    for r in rows:
        print(
            f"{r['num_envs']:6d} {r['door']:20s} {r['steps_per_s']:10d} "
            f"{r['ms_per_step']:8.3f} {r['vs_functional']:13.2f} {r['vs_synced']:9.2f}"
        )
    parts = [r for n in args.num_envs for r in calls(n)] if args.calls else []
    if parts:
        print(f"\none call: {'worlds':>6s} {'call':34s} {'host ms':>8s} {'synced ms':>10s}")
        for r in parts:
            synced = "" if r["synced_ms"] is None else f"{r['synced_ms']:10.3f}"
            print(f"{'':10s} {r['num_envs']:6d} {r['call']:34s} {r['host_ms']:8.3f} {synced}")
    if args.json:
        print(json.dumps({"rows": rows, "calls": parts, "backend": backend_info("jax")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
