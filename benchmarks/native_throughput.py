"""Impl "c" against MuJoCo's own ``mujoco.rollout`` and against MJX: world-steps/s,
the compile time of an env, and memory per world.

Every variant steps the same worlds from the same start with the same random controls
(uniform in each actuator's range), one ``mj_step`` per world per step (the tasks are
run with ``substeps=1``), on ``--threads`` threads:

* ``step_loop``: ``MultiEnvRunner(impl="c")``, ``set_actions`` + ``step()`` from a
  Python loop;
* ``step_wait``: the same loop, waiting for every step (``block_until_ready``) before
  the next, reading nothing back: the floor of a door that hands out each step's
  results, as the Gymnasium door does, before any task or autoreset;
* ``rollout``: the same runner's ``rollout`` (one compiled scan);
* ``env``: a jitted ``lax.scan`` of ``mjxrunner.env.step`` with the model's first
  task, same-step autoreset;
* ``gym``: ``MjxVectorEnv.step`` from a Python loop, the same task, the door's default
  autoreset (next step);
* ``mjx``: ``jit(vmap(scan(mjx.step)))`` on MJX impl ``"jax"`` (float32), fewer steps
  per call (it is slow on CPU);
* ``rollout_1``: ``mujoco.rollout`` once per step (``nstep=1``) from a Python loop;
* ``rollout_100``: ``mujoco.rollout`` over 100 steps in one call (``nstep=100``);
* ``batch_1``: ``mujoco.batch.Batch.step()`` once per step from a Python loop, the
  controls written into its state rows: MuJoCo's own batched step on the exact
  state (warm start included), with nothing around it. The floor of any API that
  returns to Python after every step, as the runner's step loop and the doors do.

Rates are medians of ``--rounds`` interleaved rounds (each round calls every variant
once, from its start state restored untimed), so a change of load on a shared
machine touches all alike; ratios are to the two ``mujoco.rollout`` rates of the same
run. Calls that compile happen before the first round.

The compile time of an env (``make``, then ``reset`` and the first ``step``, each
jitted and blocked on) is measured in a fresh process whose JAX compilation cache is
an empty temporary folder. Memory per world is the growth of the process's resident
set (``VmRSS``) from before ``make`` to after the first steps, divided by
``num_envs``, each in a fresh process (runner and env apart).

    .venv/bin/python -m benchmarks.native_throughput                     # everything
    .venv/bin/python -m benchmarks.native_throughput --models hopper --num-envs 256 \\
        --rounds 3 --no-probes                                           # a quick look
    .venv/bin/python -m benchmarks.native_throughput --out benchmarks/results/native_throughput.md

Impl "c" runs on any CPU; the rates depend on what steps the worlds from inside the
compiled step (the C++ FFI host call, or ``jax.pure_callback`` where it cannot be
built: ``backend_info["host_call"]``), so rerun this after that changes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MODELS = ("cartpole", "hopper", "ant", "humanoid")
SIZES = (256, 1024)
STEPS = 100  # env steps per timed call (and rollout_100's nstep)
MJX_STEPS = {"cartpole": 100, "hopper": 20, "ant": 10, "humanoid": 10}
ROLLOUT_REFS = ("rollout_100", "rollout_1")
VARIANTS = (
    "step_loop",
    "step_wait",
    "rollout",
    "env",
    "gym",
    "mjx",
    "rollout_1",
    "rollout_100",
    "batch_1",
)
PROBE_MODEL = "humanoid"  # the env whose compile time is reported
ROOT = Path(__file__).resolve().parents[1]  # run as ``python -m benchmarks.native_throughput``


def rss_bytes() -> int:
    """The process's resident set now (Linux ``VmRSS``; peak elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


# --- the variants ---------------------------------------------------------------------


class Case:
    """One prepared variant: ``run`` does ``steps`` env steps of every world."""

    def __init__(self, run: Callable[[], None], steps: int, restore=lambda: None, close=None):
        self.run, self.steps, self.restore = run, steps, restore
        self.close = close or (lambda: None)


def _task(model: str):
    from mjxrunner import tasks

    return tasks.for_model(model)[0].replace(substeps=1)


def prepare(name: str, model: str, num_envs: int, threads: int, seed: int) -> Case:
    """Builds variant ``name`` for ``num_envs`` worlds of ``model``."""
    import jax
    import numpy as np

    from mjxrunner.engine import models
    from mjxrunner.tools import bench, bench_variants

    m = models.load_any(model)
    steps = MJX_STEPS[model] if name == "mjx" else STEPS
    actions = bench.random_actions(m, steps, num_envs, seed)
    w = bench.Workload(
        name=model,
        mj_model=m,
        mj_data=models.start_data(m),
        num_envs=num_envs,
        n_steps=steps,
        substeps=1,
        impl="c",
        device=jax.devices("cpu")[0],
        seed=seed,
        actions=actions,
        num_threads=threads,
    )
    if name == "env":
        return _env_case(w, threads)
    if name == "gym":
        return _gym_case(w, threads, np)
    if name == "batch_1":
        return _batch_case(w, threads, np)
    if name in ("step_loop", "rollout"):
        trial = getattr(bench_variants, f"_prepare_{name}")(w)
    elif name == "step_wait":
        trial = bench_variants._prepare_step_loop(w, wait=True)
    elif name == "mjx":
        trial = bench_variants._prepare_raw(w)  # MJX impl jax beside impl c
    elif name == "rollout_1":
        trial = bench_variants._prepare_native_loop(w)
    elif name == "rollout_100":
        trial = bench_variants._prepare_native(w)
    else:
        raise ValueError(f"unknown variant {name!r}")
    return Case(trial.run, steps, trial.restore, trial.close)


def _env_case(w, threads: int) -> Case:
    import jax

    from mjxrunner.rl import env as env_

    env = env_.make(_task(w.name), w.num_envs, autoreset="same_step", impl="c", num_threads=threads)

    @jax.jit
    def scan(env, state, actions):
        return jax.lax.scan(lambda s, u: (env_.step(env, s, u), None), state, actions)[0]

    start = jax.block_until_ready(jax.jit(env_.reset)(env, jax.random.key(w.seed)))
    actions = jax.device_put(w.actions)
    return Case(lambda: jax.block_until_ready(scan(env, start, actions)), w.n_steps)


def _gym_case(w, threads: int, np) -> Case:
    from mjxrunner.doors.gym import MjxVectorEnv

    env = MjxVectorEnv(_task(w.name), w.num_envs, seed=w.seed, impl="c", num_threads=threads)
    actions = [np.asarray(a) for a in w.actions]

    def run() -> None:
        for a in actions:
            env.step(a)  # NumPy out: every step waits for its results

    return Case(run, w.n_steps, restore=lambda: env.reset(seed=w.seed), close=env.close)


def native_batch(mj_model, mj_data, num_envs: int, threads: int):
    """``(batch, start, ctrl)``: ``mujoco.batch``'s batch of ``num_envs`` worlds on
    ``threads`` threads, the ``mjSTATE_INTEGRATION`` row of ``mj_data``, and the
    columns of a row that hold the controls (a slice)."""
    import mujoco
    import numpy as np
    from mujoco import batch as mjbatch

    b = mjbatch.Batch(mj_model, num_envs, threads)
    start = np.empty(b.nstate)
    mujoco.mj_getState(mj_model, mj_data, start, mujoco.mjtState.mjSTATE_INTEGRATION)
    offset, size = b._component(mjbatch._STATE_FIELDS["ctrl"])
    return b, start, slice(offset, offset + size)


def _batch_case(w, threads: int, np) -> Case:
    b, start, ctrl = native_batch(w.mj_model, w.mj_data, w.num_envs, threads)
    actions = [np.asarray(a, np.float64) for a in w.actions]

    def run() -> None:
        rows = b.state
        for a in actions:
            rows[:, ctrl] = a
            b.step()

    def restore() -> None:
        b.state[...] = start

    restore()
    return Case(run, w.n_steps, restore=restore)


# --- measuring ------------------------------------------------------------------------


def measure(model: str, num_envs: int, threads: int, rounds: int, seed: int, names) -> dict:
    """Rates of ``names`` at one size, interleaved; compile calls before the rounds."""
    cases, first, failed = {}, {}, {}
    for name in names:
        try:
            t0 = time.perf_counter()
            case = prepare(name, model, num_envs, threads, seed)
            case.restore()
            case.run()
            first[name] = time.perf_counter() - t0
            cases[name] = case
        except Exception as e:  # reported with the results, never dropped
            failed[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    seconds = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            case.restore()
            t0 = time.perf_counter()
            case.run()
            seconds[name].append(time.perf_counter() - t0)
    for case in cases.values():
        case.close()
    rates = {}
    for name, case in cases.items():
        per_call = [num_envs * case.steps / s for s in seconds[name]]
        rates[name] = {
            "steps_per_s": statistics.median(per_call),
            "min": min(per_call),
            "max": max(per_call),
            "setup_and_first_call_s": first[name],
            "steps_per_call": case.steps,
        }
    return {"model": model, "num_envs": num_envs, "rates": rates, "failed": failed}


def _probe(kind: str, model: str, num_envs: int, threads: int) -> dict:
    """In a fresh process: compile times from an empty cache and RSS per world."""
    cache = tempfile.mkdtemp(prefix="jax-cache-")
    import jax

    jax.config.update("jax_compilation_cache_dir", cache)
    import numpy as np

    import mjxrunner  # noqa: F401 - imports (and their memory) before the baseline
    from mjxrunner.doors.runner import MultiEnvRunner
    from mjxrunner.engine import models
    from mjxrunner.rl import env as env_

    m = models.load_any(model)
    task = _task(model)
    before = rss_bytes()
    out: dict = {"kind": kind, "model": model, "num_envs": num_envs, "cache_dir_empty": True}
    if kind == "env":
        t0 = time.perf_counter()
        env = env_.make(task, num_envs, autoreset="same_step", impl="c", num_threads=threads)
        out["make_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        state = jax.block_until_ready(jax.jit(env_.reset)(env, jax.random.key(0)))
        out["reset_s"] = time.perf_counter() - t0
        step = jax.jit(env_.step)
        u = np.zeros((num_envs, env.action_size), np.float32)
        t0 = time.perf_counter()
        state = jax.block_until_ready(step(env, state, u))
        out["first_step_s"] = time.perf_counter() - t0
        for _ in range(5):
            state = step(env, state, u)
        jax.block_until_ready(state)
    else:
        t0 = time.perf_counter()
        runner = MultiEnvRunner(m, num_envs, impl="c", num_threads=threads)
        out["make_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        runner.step()
        jax.block_until_ready(runner.data)
        out["first_step_s"] = time.perf_counter() - t0
        for _ in range(5):
            runner.step()
        jax.block_until_ready(runner.data)
    out["rss_delta_bytes"] = rss_bytes() - before
    out["bytes_per_world"] = out["rss_delta_bytes"] / num_envs
    return out


def probe(kind: str, model: str, num_envs: int, threads: int, timeout: float) -> dict:
    """:func:`_probe` in a fresh interpreter (its own JAX, its own empty cache)."""
    code = [sys.executable, "-m", "benchmarks.native_throughput", "--probe", kind, model]
    code += [str(num_envs), str(threads)]
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    try:
        done = subprocess.run(
            code, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return {"kind": kind, "model": model, "num_envs": num_envs, "error": "timed out"}
    if done.returncode:
        tail = " ".join(done.stderr.split())[-300:]
        return {"kind": kind, "model": model, "num_envs": num_envs, "error": tail}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the record -----------------------------------------------------------------------


def _k(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"


def _x(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def markdown(record: dict) -> str:
    """The record as the page ``benchmarks/results/native_throughput.md``."""
    host = record["host"]
    lines = [
        "# Impl c against mujoco.rollout and MJX",
        "",
        f"Recorded {record['created']} by `{record['command']}` "
        f"({record['rounds']} interleaved rounds, {record['threads']} threads).",
        "",
        f"- backend: `{record['backend_line']}`",
        f"- host: {host['cpu']}, {host['cpu_count']} CPUs, Python {host['python']}, "
        f"load average {host['load_start']} at start, {host['load_end']} at end",
        "- world-steps/s, medians; one `mj_step` per world per step (tasks with "
        "`substeps=1`); random controls; `mjx` is MJX impl jax in float32, the rest "
        "step MuJoCo C in float64",
        f"- MuJoCo's timers (`mjcb_time`): {record['mujoco_timers']} while measuring, for "
        "every variant alike (impl c turns them off for the process)",
        "- `/r100`: ratio to `mujoco.rollout` over 100 steps per call; `/r1`: ratio "
        "to `mujoco.rollout` called once per step; `/b1`: ratio to `mujoco.batch`'s "
        "step called once per step (exact state, nothing around it)",
        "",
        "| model | worlds | step loop | step wait | rollout | env | gym | mjx | rollout_1 "
        "| rollout_100 | batch_1 | step loop /r100 | step wait /r100 | rollout /r100 "
        "| env /r100 | gym /r100 | step loop /r1 | gym /r1 | step loop /b1 | gym /b1 "
        "| mjx /r100 | largest spread |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    failures = []
    for row in record["results"]:
        rates = row["rates"]

        def r(name: str, rates: dict = rates) -> float | None:
            return rates[name]["steps_per_s"] if name in rates else None

        spreads = [(v["max"] - v["min"]) / v["steps_per_s"] for v in rates.values()]
        r100, r1 = r("rollout_100"), r("rollout_1")
        cells = [row["model"], str(row["num_envs"])]
        cells += [_k(r(n)) for n in VARIANTS]
        cells += [_x(r(n), r100) for n in ("step_loop", "step_wait", "rollout", "env", "gym")]
        b1 = r("batch_1")
        cells += [_x(r("step_loop"), r1), _x(r("gym"), r1)]
        cells += [_x(r("step_loop"), b1), _x(r("gym"), b1), _x(r("mjx"), r100)]
        cells.append(f"{max(spreads):.0%}" if spreads else "-")
        lines.append("| " + " | ".join(cells) + " |")
        failures += [
            f"{row['model']} x{row['num_envs']} {n}: {e}" for n, e in row["failed"].items()
        ]
    if failures:
        lines += ["", "Failed: " + "; ".join(failures) + "."]
    probes = record.get("probes") or []
    compiles = [p for p in probes if p["kind"] == "env" and p["model"] == PROBE_MODEL]
    if compiles:
        lines += [
            "",
            f"## Compile: an env on the {PROBE_MODEL} from a cold cache",
            "",
            "A fresh process, its JAX compilation cache an empty temporary folder; "
            "`reset` and the first `step` each jitted and blocked on.",
            "",
            "| worlds | make s | reset s | first step s | reset + first step s |",
            "| ---: | ---: | ---: | ---: | ---: |",
        ]
        for p in compiles:
            if "error" in p:
                lines.append(f"| {p['num_envs']} | failed: {p['error']} | | | |")
                continue
            total = p["reset_s"] + p["first_step_s"]
            lines.append(
                f"| {p['num_envs']} | {p['make_s']:.1f} | {p['reset_s']:.1f} | "
                f"{p['first_step_s']:.1f} | {total:.1f} |"
            )
    if probes:
        lines += [
            "",
            "## Memory per world",
            "",
            "Growth of the resident set from before `make` to after the first steps, "
            "per world, in a fresh process each (includes what compiling left behind, "
            "so small batches read high).",
            "",
            "| model | worlds | runner KiB/world | env KiB/world |",
            "| --- | ---: | ---: | ---: |",
        ]
        keys = sorted({(p["model"], p["num_envs"]) for p in probes}, key=_probe_order)
        for model, n in keys:
            cell = {}
            for p in probes:
                if (p["model"], p["num_envs"]) == (model, n):
                    ok = "error" not in p
                    cell[p["kind"]] = f"{p['bytes_per_world'] / 1024:.0f}" if ok else "failed"
            lines.append(f"| {model} | {n} | {cell.get('runner', '-')} | {cell.get('env', '-')} |")
        marginal = _marginal(probes)
        if marginal:
            lines += [
                "",
                "What one more world costs (growth between the smallest and the largest "
                "batch, over the worlds added), which leaves out the fixed cost of "
                "compiling:",
                "",
                "| model | worlds | runner KiB/world | env KiB/world |",
                "| --- | --- | ---: | ---: |",
            ]
            for (model, span), cell in marginal.items():
                runner, env = cell.get("runner", "-"), cell.get("env", "-")
                lines.append(f"| {model} | {span} | {runner} | {env} |")
    lines.append("")
    return "\n".join(lines)


def _marginal(probes: list[dict]) -> dict:
    """``(model, "a → b") -> {kind: KiB per added world}`` from the smallest and the
    largest batch of each model and kind that both succeeded."""
    found: dict = {}
    for p in probes:
        if "error" not in p:
            found.setdefault((p["model"], p["kind"]), {})[p["num_envs"]] = p["rss_delta_bytes"]
    out: dict = {}
    for (model, kind), by_n in sorted(found.items(), key=lambda kv: _probe_order((kv[0][0], 0))):
        if len(by_n) < 2:
            continue
        a, b = min(by_n), max(by_n)
        per = (by_n[b] - by_n[a]) / (b - a) / 1024
        out.setdefault((model, f"{a} → {b}"), {})[kind] = f"{per:.0f}"
    return out


def _probe_order(key: tuple[str, int]) -> tuple[int, int]:
    model, n = key
    return (MODELS.index(model) if model in MODELS else len(MODELS), n)


def _host() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "python": platform.python_version()}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--num-envs", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--threads", type=int, default=2, help="impl c's and mujoco.rollout's")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-probes", action="store_true", help="skip compile and memory probes")
    p.add_argument(
        "--mujoco-timers",
        choices=("off", "on"),
        default="off",
        help="MuJoCo's profiling timers for every variant: off (what impl c leaves) or on "
        "(as `import mujoco` leaves them)",
    )
    p.add_argument("--probe-timeout", type=float, default=600)
    p.add_argument("--out", type=Path, help="write the markdown page here")
    p.add_argument("--json", type=Path, help="also write the raw record as JSON here")
    p.add_argument(
        "--probe", nargs=4, metavar=("KIND", "MODEL", "N", "THREADS"), help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.probe:
        kind, model, n, threads = args.probe
        print(json.dumps(_probe(kind, model, int(n), int(threads))))
        return 0

    from mjxrunner.engine import backend, models, native
    from mjxrunner.engine.options import Options

    if args.mujoco_timers == "on":  # every host made here keeps them
        os.environ[native.TIMERS_ENV] = "1"
        native.set_timers(True)
    else:
        native.default_timers()
    m = models.load_any(args.models[0])
    info = backend.Backend.make(
        m, 1, Options(impl="c", device="cpu", num_threads=args.threads)
    ).info()
    shown = sys.argv[1:] if argv is None else argv
    record = {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "-m", "benchmarks.native_throughput", *shown]),
        "backend": info,
        "backend_line": backend.describe_backend(info) + f" num_threads={args.threads}",
        "host": _host() | {"load_start": _load()},
        "threads": args.threads,
        "rounds": args.rounds,
        "results": [],
    }
    for model in args.models:
        for n in args.num_envs:
            row = measure(model, n, args.threads, args.rounds, args.seed, args.variants)
            record["results"].append(row)
            rates = {k: round(v["steps_per_s"]) for k, v in row["rates"].items()}
            print(f"{model} x{n}: {rates} {row['failed'] or ''}", file=sys.stderr, flush=True)
    if not args.no_probes:
        record["probes"] = []
        for model in args.models:
            for n in args.num_envs:
                for kind in ("runner", "env"):
                    record["probes"].append(probe(kind, model, n, args.threads, args.probe_timeout))
                    print(f"probe {record['probes'][-1]}", file=sys.stderr, flush=True)
    record["host"]["load_end"] = _load()
    record["mujoco_timers"] = "on" if native.timers_on() else "off"
    page = markdown(record)
    print(page)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(page)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
