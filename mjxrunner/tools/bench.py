"""Throughput harness: one workload run several ways, timed honestly, side by side.

A *workload* is a model, a batch size, a step count and one fixed sequence of random
controls. Every *variant* runs exactly that workload from the same start state:

1. ``raw``: ``jit(vmap(lax.scan(mjx.step)))`` with everything already on the device,
   the floor of overhead that the other MJX variants are measured against; for
   impl ``"c"`` it runs MJX's impl ``"jax"``, so the report sets impl "c" beside MJX;
2. ``rollout``: ``MultiEnvRunner.rollout`` (fused on-device ``lax.scan``, host
   controls validated and uploaded per call, ``qpos``/``qvel`` trajectory recorded);
   ``env``: a jitted ``lax.scan`` of :func:`mjxrunner.env.step` for the model's first
   registered task (observation, reward, termination, same-step autoreset,
   episode statistics), where the model has a task;
3. ``step_loop``: ``set_actions`` + ``step()`` from a Python loop, as an RL loop
   that lives on the host would call it; ``raw_loop``: ``raw`` called once per env
   step from Python with the same host controls, the same loop written over raw MJX;
4. ``native``: ``mujoco.rollout`` with ``num_threads`` threads (default: one per
   usable CPU core) over the whole workload in one call, the physics reference on
   the CPU (float64; the floor of impl ``"c"``, which runs the same C engine);
   ``native_loop``: the same, called once per env step from Python, the floor of
   ``step_loop``;
5. ``sharded``: ``runner.rollout`` with the worlds split over every device of the
   platform (``MultiEnvRunner(devices=...)``); unavailable with one device (on CPU,
   ``backend.force_host_devices(2)`` or ``mjxrunner bench --host-devices 2`` before
   JAX starts makes two); unavailable for impl ``"c"``, whose worlds share threads.

Every record names what stepped its worlds (``impl``: ``"jax"``, ``"warp"``, ``"c"``,
or ``"mujoco"`` for ``mujoco.rollout``).

Each variant is one :class:`Variant` entry in :data:`VARIANTS`; a variant that cannot
run here is reported as unavailable with its reason, never dropped.

How time is measured: building the variant (``setup_s``) is timed apart; the first
call (``first_call_s``) includes compilation and is excluded from the rate; then
``repeats`` rounds call every variant once in turn (interleaved, so drifting load on
a shared machine touches all alike), each call from the same start state (restored
untimed), with ``block_until_ready`` before every clock read. Rates are env steps per second (one
env step is ``substeps`` solver calls of every world); the report gives the median
and the spread of the repeats, and ratios of medians to ``raw`` and to ``native``.

The workload and the variants live in :mod:`mjxrunner.tools.bench_variants`, the
report's layout, JSON, table and plot in :mod:`mjxrunner.tools.bench_report`; this
module times the variants and makes the report, and every name of the three is
importable from here.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import mujoco
import numpy as np

from mjxrunner.engine import backend, checks, models, native
from mjxrunner.engine.backend import describe_backend  # noqa: F401 (re-exported)
from mjxrunner.engine.models import action_bounds, load_any
from mjxrunner.engine.options import Options
from mjxrunner.tools.bench_report import SCHEMA, plot, save, table, to_json, validate
from mjxrunner.tools.bench_variants import (
    NATIVE,
    NATIVE_BUFFER_BYTES,
    RAW,
    VARIANTS,
    Trial,
    Unavailable,
    Variant,
    Workload,
    native_threads,
)

__all__ = [
    "NATIVE",
    "NATIVE_BUFFER_BYTES",
    "RAW",
    "SCHEMA",
    "VARIANTS",
    "Trial",
    "Unavailable",
    "Variant",
    "Workload",
    "measure",
    "native_threads",
    "plot",
    "random_actions",
    "run",
    "save",
    "table",
    "to_json",
    "validate",
]

# --- measurement -----------------------------------------------------------------------


def _reset_peak_rss() -> bool:
    """Restarts the kernel's resident-set high-water mark (Linux only)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    """The process's resident-set high-water mark in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def _device_memory(device: jax.Device) -> dict[str, int] | None:
    stats = device.memory_stats()  # None on CPU
    if not stats:
        return None
    keys = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")
    return {k: int(stats[k]) for k in keys if k in stats}


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(
    variants: Sequence[Variant],
    w: Workload,
    repeats: int,
    tick: Callable[[], None] = lambda: None,
) -> list[dict]:
    """Times each variant on ``w``: setup, a first call, then ``repeats`` rounds.

    Every variant is built and called once (that call compiles) before any timing;
    then each round calls every variant once, in turn, from its start state. On a
    shared machine the load drifts, and interleaving spreads the drift over all
    variants alike, so their ratios stay fair.

    Args:
      variants: the variants, in report order.
      w: the workload.
      repeats: timed rounds.
      tick: called after each call (progress bars).

    Returns:
      One record per variant (see :func:`run`); ``status`` is ``"ok"``,
      ``"unavailable"`` (``prepare`` said why it cannot run) or ``"failed"`` (it
      raised; the error is the ``reason``). ``peak_rss_bytes`` is the process's
      resident high-water mark during the variant's timed calls, which includes
      what the other variants hold (None where the kernel cannot restart the mark).
    """
    records = {v.name: {"variant": v.name, "num_envs": w.num_envs} for v in variants}
    trials: dict[str, Trial] = {}
    seconds: dict[str, list[float]] = {}
    peaks: dict[str, int] = {}
    can_reset_peak = _reset_peak_rss()

    def give_up(name: str, error: Exception) -> None:
        unavailable = isinstance(error, (Unavailable, NotImplementedError))
        records[name] = {
            "variant": name,
            "num_envs": w.num_envs,
            "status": "unavailable" if unavailable else "failed",
            "reason": str(error) if unavailable else f"{type(error).__name__}: {error}",
        }
        trial = trials.pop(name, None)
        if trial is not None:
            trial.close()

    try:
        for v in variants:
            try:
                t0 = time.perf_counter()
                trials[v.name] = v.prepare(w)
                records[v.name]["setup_s"] = time.perf_counter() - t0
                records[v.name]["impl"] = trials[v.name].impl or w.impl
                trials[v.name].restore()
                records[v.name]["first_call_s"] = _timed(trials[v.name].run)
                seconds[v.name] = []
                tick()
            except Exception as e:
                give_up(v.name, e)
        for _ in range(repeats):
            for name in list(trials):
                try:
                    trials[name].restore()
                    _reset_peak_rss()
                    seconds[name].append(_timed(trials[name].run))
                    peaks[name] = max(peaks.get(name, 0), _peak_rss_bytes())
                    tick()
                except Exception as e:
                    give_up(name, e)
    finally:
        for trial in trials.values():
            trial.close()
        trials.clear()
        gc.collect()  # free the batch buffers before the next size is built

    steps = w.num_envs * w.n_steps
    for name, record in records.items():
        if "status" in record:
            continue
        rates = [steps / s for s in seconds[name]]
        median = statistics.median(rates)
        record.update(
            status="ok",
            reason=None,
            run_s=seconds[name],
            steps_per_s=median,
            steps_per_s_min=min(rates),
            steps_per_s_max=max(rates),
            spread=(max(rates) - min(rates)) / median,
            compile_s=max(record["first_call_s"] - statistics.median(seconds[name]), 0.0),
            peak_rss_bytes=peaks[name] if can_reset_peak else None,
            device_memory=_device_memory(w.device),
        )
    return list(records.values())


def _ratios(results: list[dict]) -> None:
    """Adds ``ratio_to_raw`` / ``ratio_to_native`` (ratios of medians) in place."""
    by_size: dict[int, dict[str, dict]] = {}
    for r in results:
        by_size.setdefault(r["num_envs"], {})[r["variant"]] = r
    for row in by_size.values():
        for r in row.values():
            for ref, key in ((RAW, "ratio_to_raw"), (NATIVE, "ratio_to_native")):
                base = row.get(ref)
                ok = r["status"] == "ok" and base is not None and base["status"] == "ok"
                r[key] = r["steps_per_s"] / base["steps_per_s"] if ok else None


def _host(threads: int) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "native_threads": threads,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
        "load_avg_start": _load(),
    }


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _check_names(names: Any) -> list[str]:
    if names is None:
        return list(VARIANTS)
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(f"variants must be a sequence of names, got {type(names).__name__}")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise ValueError(f"variants must be a non-empty list from {list(VARIANTS)}, got {names}")
    return [n for n in VARIANTS if n in names]  # report order


def _check_sizes(num_envs: Any) -> list[int]:
    if isinstance(num_envs, (str, bytes)) or not isinstance(num_envs, Sequence):
        raise TypeError(f"num_envs must be a sequence of ints, got {type(num_envs).__name__}")
    if not num_envs:
        raise ValueError("num_envs must name at least one batch size")
    sizes = [checks.count(n, "num_envs") for n in num_envs]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"num_envs must not repeat a size, got {sizes}")
    return sorted(sizes)


def _model_name(model: Any) -> str:
    """A short name for reports: the registry name or file stem; MJCF text is "mjcf"."""
    if isinstance(model, mujoco.MjModel):
        return "model"
    text = os.fspath(model)
    if isinstance(model, str) and text.lstrip().startswith("<"):
        return "mjcf"
    return Path(text).stem


def _source_sha256(model: Any) -> str | None:
    """SHA-256 of the MJCF/MJB bytes the model came from (None for an ``MjModel``)."""
    from mjxrunner.engine import models

    if isinstance(model, mujoco.MjModel):
        return None
    text = os.fspath(model)
    if isinstance(model, str) and text.lstrip().startswith("<"):
        data = text.encode()
    elif isinstance(model, str) and text in models.list():
        data = models.path(text).read_bytes()
    else:
        data = Path(text).read_bytes()
    return hashlib.sha256(data).hexdigest()


def random_actions(m: mujoco.MjModel, n_steps: int, num_envs: int, seed: int) -> np.ndarray:
    """``(n_steps, num_envs, nu)`` uniform controls within ``ctrlrange`` (``[-1, 1]``
    where unlimited), in the MJX float dtype.

    The draws are those of every earlier version (one ``uniform`` call on a fresh
    generator), so recorded results stay comparable.
    """
    low, high = action_bounds(m, unlimited=1.0)
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, (n_steps, num_envs, m.nu)).astype(backend.float_dtype())


def run(
    model: mujoco.MjModel | str | os.PathLike,
    num_envs: Sequence[int],
    n_steps: int = 200,
    *,
    substeps: int = 1,
    repeats: int = 3,
    impl: str = "jax",
    num_threads: int | None = None,
    device: Any = None,
    variants: Sequence[str] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Runs every variant on ``model`` at each batch size and returns the report.

    Args:
      model: an ``MjModel``, a registry name, an MJCF/MJB path or MJCF text.
      num_envs: batch sizes to sweep (distinct, each >= 1).
      n_steps: env steps per timed call.
      substeps: solver calls per env step.
      repeats: timed calls per variant and size (the first, compiling call is extra).
      impl: ``"jax"``, ``"warp"`` or ``"c"`` (``"cpp"``) for the runner and env
        variants (``raw`` runs MJX impl ``"jax"`` beside impl ``"c"``).
      num_threads: threads of impl ``"c"`` and of the native variants (None: every
        core this process may use).
      device: None, a ``jax.Device`` or a platform name such as ``"cuda"``.
      variants: names from :data:`VARIANTS` (None: all).
      seed: seeds the controls and the runners.
      progress: show a progress bar on stderr.

    Returns:
      A JSON-ready dict: ``schema``, ``created``, ``backend`` (the identity of
      :func:`mjxrunner.backend_info`), ``host`` (CPU, threads, load average at start
      and end), ``config``, ``model_info``, ``variants`` (name -> label) and
      ``results``: one record per size and variant with ``status``, ``reason``,
      ``impl`` (what stepped the worlds; where the variant could be built),
      ``steps_per_s`` (median), ``steps_per_s_min``/``_max``, ``spread``
      ((max - min) / median), ``run_s``, ``setup_s``, ``first_call_s``,
      ``compile_s`` (first call minus a steady call), ``ratio_to_raw``,
      ``ratio_to_native``, ``peak_rss_bytes`` (host) and ``device_memory`` (the
      device's ``memory_stats`` after the size was measured, None on CPU; its
      ``peak_bytes_in_use`` counts from the start of the process).

    Raises:
      TypeError, ValueError: bad arguments, before anything runs.
    """
    from tqdm import tqdm

    sizes = _check_sizes(num_envs)
    n_steps = checks.count(n_steps, "n_steps")
    substeps = checks.count(substeps, "substeps")
    repeats = checks.count(repeats, "repeats")
    seed = checks.count(seed, "seed", minimum=0)
    impl = backend.check_impl(impl)
    threads = native_threads() if num_threads is None else checks.count(num_threads, "num_threads")
    names = _check_names(variants)
    dev = backend.resolve_device(device)
    mj_model = load_any(model)
    backend.check_supported(mj_model, impl)
    mj_data = models.start_data(mj_model)
    name = _model_name(model)
    if impl == "c":  # before anything runs: mujoco.rollout under impl c's setting too
        native.default_timers()

    report: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # Warp capacities scale with num_envs, so the report names only the graph mode.
        "backend": backend.Backend.make(
            mj_model, 1, Options(impl=impl, device=dev, num_threads=threads)
        ).info()
        | {"capacities": None},
        "host": _host(threads),
        "config": {
            "model": name,
            "num_envs": sizes,
            "n_steps": n_steps,
            "substeps": substeps,
            "repeats": repeats,
            "impl": impl,
            "num_threads": threads,
            "device": str(dev),
            "seed": seed,
            "compilation_cache": bool(jax.config.jax_compilation_cache_dir),
        },
        "model_info": {
            "nq": mj_model.nq,
            "nv": mj_model.nv,
            "nu": mj_model.nu,
            "timestep": float(mj_model.opt.timestep),
            "source_sha256": _source_sha256(model),
        },
        "variants": {n: VARIANTS[n].label for n in names},
        "results": [],
    }
    bar = tqdm(total=len(sizes) * len(names) * (repeats + 1), disable=not progress, unit="call")
    with bar:
        for size in sizes:
            w = Workload(
                name=name,
                mj_model=mj_model,
                mj_data=mj_data,
                num_envs=size,
                n_steps=n_steps,
                substeps=substeps,
                impl=impl,
                device=dev,
                seed=seed,
                actions=random_actions(mj_model, n_steps, size, seed),
                num_threads=threads,
            )
            bar.set_description(f"{name} x{size}")
            done = bar.n
            variants_ = [VARIANTS[n] for n in names]
            report["results"] += measure(variants_, w, repeats, lambda: bar.update())
            bar.update(done + len(names) * (repeats + 1) - bar.n)  # calls of unavailable ones
    report["host"]["load_avg_end"] = _load()
    _ratios(report["results"])
    return report
