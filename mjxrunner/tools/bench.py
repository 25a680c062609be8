"""Throughput harness: one workload run several ways, timed honestly, side by side.

A *workload* is a model, a batch size, a step count and one fixed sequence of random
controls. Every *variant* runs exactly that workload from the same start state:

1. ``raw``: ``jit(vmap(lax.scan(mjx.step)))`` with everything already on the device,
   the floor of overhead that the other MJX variants are measured against;
2. ``rollout``: ``MultiEnvRunner.rollout`` (fused on-device ``lax.scan``, host
   controls validated and uploaded per call, ``qpos``/``qvel`` trajectory recorded);
   ``env``: a jitted ``lax.scan`` of :func:`mjxrunner.env.step` for the model's first
   registered task (observation, reward, termination, same-step autoreset,
   episode statistics), where the model has a task;
3. ``step_loop``: ``set_actions`` + ``step()`` from a Python loop, as an RL loop
   that lives on the host would call it;
4. ``native``: ``mujoco.rollout`` with one thread per usable CPU core, the physics
   reference on the CPU (float64, so it is a reference, not a like-for-like twin);
5. ``sharded``: ``runner.rollout`` with the worlds split over every device of the
   platform (``MultiEnvRunner(devices=...)``); unavailable with one device (on CPU,
   ``backend.force_host_devices(2)`` or ``mjxrunner bench --host-devices 2`` before
   JAX starts makes two).

Each variant is one :class:`Variant` entry in :data:`VARIANTS`; a variant that cannot
run here is reported as unavailable with its reason, never dropped.

How time is measured: building the variant (``setup_s``) is timed apart; the first
call (``first_call_s``) includes compilation and is excluded from the rate; then
``repeats`` rounds call every variant once in turn (interleaved, so drifting load on
a shared machine touches all alike), each call from the same start state (restored
untimed), with ``block_until_ready`` before every clock read. Rates are env steps per second (one
env step is ``substeps`` solver calls of every world); the report gives the median
and the spread of the repeats, and ratios of medians to ``raw`` and to ``native``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gc
import hashlib
import json
import math
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
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import backend, checks, models
from mjxrunner.engine.backend import describe_backend
from mjxrunner.engine.models import action_bounds, load_any

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

SCHEMA = "mjxrunner.bench/1"
"""Identifies the layout of a report; bump it when a field changes meaning (not when
the module moves: recorded reports keep validating)."""

RAW = "raw"
NATIVE = "native"

# --- workload and variants -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Workload:
    """What every variant runs: same model, batch, steps, substeps and controls.

    Attributes:
      name: the model as the user named it (registry name or file name).
      mj_model: the host model.
      mj_data: host data at the start state (``qpos0`` after ``mj_forward``).
      num_envs: number of worlds.
      n_steps: env steps per timed call.
      substeps: solver calls per env step (each of one ``timestep``).
      impl: MJX implementation, ``"jax"`` or ``"warp"``.
      device: the JAX device the MJX variants run on.
      seed: seeds the controls and the runner.
      actions: ``(n_steps, num_envs, nu)`` host controls in the MJX float dtype,
        uniform in each actuator's ``ctrlrange`` (``[-1, 1]`` where unlimited).
    """

    name: str
    mj_model: mujoco.MjModel
    mj_data: mujoco.MjData
    num_envs: int
    n_steps: int
    substeps: int
    impl: str
    device: jax.Device
    seed: int
    actions: np.ndarray


class Unavailable(Exception):
    """Raised by a variant's ``prepare`` when it cannot run here; the message says why."""


@dataclasses.dataclass
class Trial:
    """A prepared variant: callables over state it keeps to itself.

    Attributes:
      run: one whole call of ``n_steps`` env steps; returns only once the results
        are ready (``block_until_ready`` or a synchronous native call).
      restore: puts the variant back at the start state, also blocking; untimed.
      close: frees what ``prepare`` built.
    """

    run: Callable[[], None]
    restore: Callable[[], None] = lambda: None
    close: Callable[[], None] = lambda: None


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of running a workload.

    Attributes:
      name: short key used in reports and on the command line.
      label: what it is, for tables and plots.
      prepare: builds a :class:`Trial` for a workload (untimed apart from
        ``setup_s``); raises :class:`Unavailable` when it cannot run here.
    """

    name: str
    label: str
    prepare: Callable[[Workload], Trial]


def _batched_start(w: Workload) -> tuple[mjx.Model, mjx.Data]:
    """Device model and ``num_envs`` copies of the start data, as the runner builds them.

    ``vmap`` broadcasts the per-world leaves; MJX-Warp's pooled contact buffers stay
    pooled (MJX declares them unmapped), sized by the runner's default capacities.
    """
    b = backend.Backend.make(w.mj_model, w.num_envs, w.impl, w.device)
    model, one = b.put_model(w.mj_model), b.put_data(w.mj_model, w.mj_data)
    data = jax.jit(jax.vmap(lambda _: one))(jnp.arange(w.num_envs))
    return model, jax.block_until_ready(data)


@functools.partial(jax.jit, static_argnums=(3,))
def _raw_rollout(model: mjx.Model, data: mjx.Data, actions: jax.Array, substeps: int):
    """The floor: ``vmap`` over worlds of a ``lax.scan`` of ``mjx.step``, nothing else."""

    def one_world(d, us):
        def body(d, u):
            d = d.replace(ctrl=u)
            d, _ = jax.lax.scan(lambda d, _: (mjx.step(model, d), None), d, None, substeps)
            return d, None

        return jax.lax.scan(body, d, us)[0]

    return jax.vmap(one_world, in_axes=(0, 1))(data, actions)


@functools.partial(jax.jit, static_argnums=(3,))
def _raw_rollout_warp(model: mjx.Model, data: mjx.Data, actions: jax.Array, substeps: int):
    """The floor for impl "warp": the scan outside the ``vmap``, so that Warp's batched
    FFI call sees the whole batch (as in ``core.physics_step``)."""
    one_step = jax.vmap(mjx.step, in_axes=(None, 0))

    def body(d, u):
        d = d.replace(ctrl=u)
        d, _ = jax.lax.scan(lambda d, _: (one_step(model, d), None), d, None, substeps)
        return d, None

    return jax.lax.scan(body, data, actions)[0]


def _prepare_raw(w: Workload) -> Trial:
    model, data = _batched_start(w)
    actions = jax.device_put(w.actions, w.device)
    rollout = _raw_rollout_warp if w.impl == "warp" else _raw_rollout
    return Trial(run=lambda: jax.block_until_ready(rollout(model, data, actions, w.substeps)))


def _runner(w: Workload) -> Any:
    from mjxrunner.doors.runner import MultiEnvRunner

    return MultiEnvRunner(w.mj_model, w.num_envs, impl=w.impl, seed=w.seed, device=w.device)


def _restorer(runner: Any) -> Callable[[], None]:
    def restore() -> None:
        runner.reset_all()
        jax.block_until_ready(runner.state)

    return restore


def _prepare_rollout(w: Workload) -> Trial:
    runner = _runner(w)

    def run() -> None:
        trajectory = runner.rollout(w.actions, w.n_steps, substeps=w.substeps)
        jax.block_until_ready((trajectory, runner.state))

    return Trial(run=run, restore=_restorer(runner))


def _env_scan(env: Any, state: Any, actions: jax.Array) -> Any:
    from mjxrunner.rl import env as env_

    return jax.lax.scan(lambda s, u: (env_.step(env, s, u), None), state, actions)[0]


_env_scan_jit = jax.jit(_env_scan)


def _prepare_env(w: Workload) -> Trial:
    from mjxrunner import tasks
    from mjxrunner.rl import env as env_

    found = tasks.for_model(w.name)
    if not found:
        raise Unavailable(f"no task is registered for model {w.name!r}")
    task = found[0].replace(substeps=w.substeps)
    # "same_step": ended worlds restart inside the step that ended them.
    env = env_.make(
        task, w.num_envs, autoreset="same_step", impl=w.impl, device=w.device, model=w.mj_model
    )
    key = jax.device_put(jax.random.key(w.seed), w.device)
    start = jax.block_until_ready(jax.jit(env_.reset)(env, key))
    actions = jax.device_put(w.actions, w.device)
    return Trial(run=lambda: jax.block_until_ready(_env_scan_jit(env, start, actions)))


def _prepare_step_loop(w: Workload) -> Trial:
    runner = _runner(w)

    def run() -> None:
        for t in range(w.n_steps):
            runner.set_actions(w.actions[t])
            runner.step(substeps=w.substeps)
        jax.block_until_ready(runner.state)

    return Trial(run=run, restore=_restorer(runner))


NATIVE_BUFFER_BYTES = 256 * 2**20
"""Largest state trajectory ``mujoco.rollout`` writes in one call; longer runs go in
chunks, each restarting from the last state (its solver warm start is not carried)."""


def native_threads() -> int:
    """CPU cores this process may use: the thread count of the native reference."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _prepare_native(w: Workload) -> Trial:
    from mujoco import rollout

    m = w.mj_model
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.empty(mujoco.mj_stateSize(m, spec))
    mujoco.mj_getState(m, w.mj_data, state0, spec)
    state0 = np.tile(state0, (w.num_envs, 1))
    # (num_envs, n_steps * substeps, nu): each control held for its substeps.
    control = np.repeat(np.asarray(w.actions, np.float64).transpose(1, 0, 2), w.substeps, axis=1)
    total = control.shape[1]
    chunk = max(1, min(total, NATIVE_BUFFER_BYTES // (8 * w.num_envs * state0.shape[1])))
    threads = native_threads()
    pool = rollout.Rollout(nthread=threads)
    datas = [mujoco.MjData(m) for _ in range(threads)]

    def run() -> None:
        start = state0
        for t in range(0, total, chunk):
            states, _ = pool.rollout(
                m, datas, start, np.ascontiguousarray(control[:, t : t + chunk])
            )
            start = states[:, -1]

    return Trial(run=run, close=pool.close)


def _prepare_sharded(w: Workload) -> Trial:
    """The runner's rollout with its worlds split over every device of the platform."""
    import inspect

    from mjxrunner.doors.runner import MultiEnvRunner

    if "devices" not in inspect.signature(MultiEnvRunner).parameters:
        raise Unavailable("the sharded runner (issue 6) has not landed: no devices= argument")
    devices = jax.devices(w.device.platform)
    if len(devices) < 2:
        raise Unavailable(
            f"one {w.device.platform} device here; sharding needs two or more (on CPU, "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts)"
        )
    if w.num_envs % len(devices):
        raise Unavailable(f"{w.num_envs} worlds do not split over {len(devices)} devices")
    runner = MultiEnvRunner(w.mj_model, w.num_envs, impl=w.impl, seed=w.seed, devices=devices)

    def run() -> None:
        trajectory = runner.rollout(w.actions, w.n_steps, substeps=w.substeps)
        jax.block_until_ready((trajectory, runner.state))

    return Trial(run=run, restore=_restorer(runner))


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(RAW, "jit(vmap(scan(mjx.step)))", _prepare_raw),
        Variant("rollout", "runner.rollout (fused scan)", _prepare_rollout),
        Variant("env", "scan of env.step (task + autoreset)", _prepare_env),
        Variant("step_loop", "set_actions + step() Python loop", _prepare_step_loop),
        Variant(NATIVE, "mujoco.rollout, all CPU threads", _prepare_native),
        Variant("sharded", "sharded runner", _prepare_sharded),
    )
}
"""Every variant, in report order. Adding a variant is adding one entry here."""


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


def _host() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "native_threads": native_threads(),
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
      impl: ``"jax"`` or ``"warp"``.
      device: None, a ``jax.Device`` or a platform name such as ``"cuda"``.
      variants: names from :data:`VARIANTS` (None: all).
      seed: seeds the controls and the runners.
      progress: show a progress bar on stderr.

    Returns:
      A JSON-ready dict: ``schema``, ``created``, ``backend`` (the identity of
      :func:`mjxrunner.backend_info`), ``host`` (CPU, threads, load average at start
      and end), ``config``, ``model_info``, ``variants`` (name -> label) and
      ``results``: one record per size and variant with ``status``, ``reason``,
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
    names = _check_names(variants)
    dev = backend.resolve_device(device)
    mj_model = load_any(model)
    backend.check_supported(mj_model, impl)
    mj_data = models.start_data(mj_model)
    name = _model_name(model)

    report: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # Warp capacities scale with num_envs, so the report names only the graph mode.
        "backend": backend.Backend.make(mj_model, 1, impl, dev).info() | {"capacities": None},
        "host": _host(),
        "config": {
            "model": name,
            "num_envs": sizes,
            "n_steps": n_steps,
            "substeps": substeps,
            "repeats": repeats,
            "impl": impl,
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
            )
            bar.set_description(f"{name} x{size}")
            done = bar.n
            variants_ = [VARIANTS[n] for n in names]
            report["results"] += measure(variants_, w, repeats, lambda: bar.update())
            bar.update(done + len(names) * (repeats + 1) - bar.n)  # calls of unavailable ones
    report["host"]["load_avg_end"] = _load()
    _ratios(report["results"])
    return report


# --- checking and output -----------------------------------------------------------------

_RECORD_KEYS = {
    "variant": str,
    "num_envs": int,
    "status": str,
    "ratio_to_raw": (float, type(None)),
    "ratio_to_native": (float, type(None)),
}
_OK_KEYS = {
    "steps_per_s": float,
    "steps_per_s_min": float,
    "steps_per_s_max": float,
    "spread": float,
    "run_s": list,
    "setup_s": float,
    "first_call_s": float,
    "compile_s": float,
}


def validate(report: Any) -> None:
    """Checks that ``report`` has the layout :func:`run` writes (e.g. after loading JSON).

    Raises:
      ValueError: a key is missing, has the wrong type, or a ratio disagrees with
        the rates it is computed from.
    """

    def need(d: Any, key: str, kind: Any, where: str) -> Any:
        if not isinstance(d, dict) or key not in d:
            raise ValueError(f"{where}: missing key {key!r}")
        value = d[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return value  # JSON writes 2.0 as 2.0, but a hand-made report may hold ints
        if not isinstance(value, kind):
            raise ValueError(f"{where}.{key}: expected {kind}, got {type(value).__name__}")
        return value

    if need(report, "schema", str, "report") != SCHEMA:
        raise ValueError(f"report.schema: expected {SCHEMA!r}, got {report['schema']!r}")
    info = need(report, "backend", dict, "report")
    for key in ("versions", "impl", "platform", "device_kind", "device_count", "qpos_dtype"):
        need(info, key, object, "report.backend")
    for key in ("mujoco", "mujoco-mjx", "jax", "jaxlib"):
        need(info["versions"], key, str, "report.backend.versions")
    need(info, "jax_enable_x64", bool, "report.backend")
    config = need(report, "config", dict, "report")
    for key, kind in (("model", str), ("num_envs", list), ("n_steps", int), ("repeats", int)):
        need(config, key, kind, "report.config")
    need(report, "host", dict, "report")
    names = need(report, "variants", dict, "report")
    results = need(report, "results", list, "report")
    rates: dict[tuple[int, str], float] = {}
    for i, r in enumerate(results):
        where = f"report.results[{i}]"
        for key, kind in _RECORD_KEYS.items():
            need(r, key, kind, where)
        if r["variant"] not in names:
            raise ValueError(f"{where}.variant: {r['variant']!r} is not in report.variants")
        if r["status"] == "ok":
            for key, kind in _OK_KEYS.items():
                need(r, key, kind, where)
            rates[r["num_envs"], r["variant"]] = r["steps_per_s"]
        elif r["status"] in ("unavailable", "failed"):
            need(r, "reason", str, where)
        else:
            raise ValueError(f"{where}.status: unknown status {r['status']!r}")
    for i, r in enumerate(results):
        for ref, key in ((RAW, "ratio_to_raw"), (NATIVE, "ratio_to_native")):
            mine, base = rates.get((r["num_envs"], r["variant"])), rates.get((r["num_envs"], ref))
            expected = None if mine is None or base is None else mine / base
            got = r[key]
            if (expected is None) != (got is None) or (
                got is not None and not math.isclose(got, expected, rel_tol=1e-9)
            ):
                raise ValueError(f"report.results[{i}].{key}: {got} != rates' ratio {expected}")


def to_json(report: dict[str, Any]) -> str:
    """The report as indented JSON text."""
    return json.dumps(report, indent=2)


def save(report: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes the report as JSON to ``path`` (folders created) and returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(report) + "\n")
    return path


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(report: dict[str, Any]) -> str:
    """A plain-text table of the report, one row per size and variant."""
    c = report["config"]
    host = report["host"]
    lines = [
        f"{c['model']}: {c['n_steps']} steps x {c['substeps']} substeps, "
        f"{c['repeats']} repeats, median (spread = (max - min) / median)",
        describe_backend(report["backend"]),
        f"host: {host['cpu']}, {host['native_threads']} threads for native, "
        f"load avg {host.get('load_avg_start')} -> {host.get('load_avg_end')}",
        "",
        f"{'num_envs':>8}  {'variant':<10} {'steps/s':>12} {'spread':>7} "
        f"{'x raw':>6} {'x native':>8} {'compile s':>9} {'peak RSS':>9}",
    ]
    for r in report["results"]:
        head = f"{r['num_envs']:>8}  {r['variant']:<10}"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']}: {r['reason']}")
            continue
        rss = r.get("peak_rss_bytes")
        rss_text = "-" if rss is None else f"{rss / 2**20:.0f} MiB"
        lines.append(
            f"{head} {r['steps_per_s']:>12,.0f} {r['spread']:>6.0%} "
            f"{_ratio(r['ratio_to_raw']):>6} {_ratio(r['ratio_to_native']):>8} "
            f"{r['compile_s']:>9.1f} {rss_text:>9}"
        )
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes a PNG of steps/s versus ``num_envs`` (log axes), one line per variant.

    Bars span the slowest to the fastest repeat. Needs matplotlib
    (``pip install 'mjxrunner[bench]'``).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import NullLocator
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'mjxrunner[bench]'") from None
    fig = Figure(figsize=(7, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name, label in report["variants"].items():
        rows = [r for r in report["results"] if r["variant"] == name and r["status"] == "ok"]
        if not rows:
            continue
        x = np.array([r["num_envs"] for r in rows])
        y = np.array([r["steps_per_s"] for r in rows])
        err = [y - [r["steps_per_s_min"] for r in rows], [r["steps_per_s_max"] for r in rows] - y]
        color = f"C{list(VARIANTS).index(name)}" if name in VARIANTS else None  # same in every plot
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=color, label=f"{name}: {label}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = report["config"]["num_envs"]
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("num_envs (worlds)")
    ax.set_ylabel("env steps / s")
    c, info = report["config"], report["backend"]
    ax.set_title(
        f"{c['model']}, impl {c['impl']}, {info['platform']} ({info['device_kind']}), "
        f"{c['n_steps']} steps x {c['substeps']} substeps",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    host = report["host"]
    fig.text(
        0.01,
        0.01,
        f"{describe_backend(info)}\nhost: {host['cpu']}, load avg {host.get('load_avg_start')}",
        fontsize=6,
        color="0.4",
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
