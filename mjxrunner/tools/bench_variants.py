"""The benchmark's workload and its variants: :class:`Workload`, what every variant
runs, and :data:`VARIANTS`, each way of running it (``raw``, ``rollout``, ``env``,
``step_loop``, ``native``, ``sharded``) as a :class:`Variant` that prepares a
:class:`Trial`.

What each variant is and how they are timed is told in :mod:`mjxrunner.tools.bench`,
which re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import backend
from mjxrunner.engine.options import Options

RAW = "raw"
NATIVE = "native"


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
      impl: the runner's implementation: ``"jax"`` or ``"warp"`` (MJX), or ``"c"``
        (MuJoCo's C engine; ``raw`` then runs MJX's impl ``"jax"``).
      device: the JAX device the MJX variants run on.
      seed: seeds the controls and the runner.
      actions: ``(n_steps, num_envs, nu)`` host controls in the MJX float dtype,
        uniform in each actuator's ``ctrlrange`` (``[-1, 1]`` where unlimited).
      num_threads: threads of impl ``"c"`` and of the native variants (None: every
        core this process may use).
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
    num_threads: int | None = None

    @property
    def threads(self) -> int:
        """Threads of impl ``"c"`` and of ``mujoco.rollout``."""
        return self.num_threads if self.num_threads is not None else native_threads()


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
      impl: what steps the worlds, recorded with the result: ``"jax"``, ``"warp"``
        or ``"c"``, or ``"mujoco"`` for ``mujoco.rollout`` itself.
    """

    run: Callable[[], None]
    restore: Callable[[], None] = lambda: None
    close: Callable[[], None] = lambda: None
    impl: str | None = None


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


def raw_impl(impl: str) -> str:
    """The MJX impl of ``raw`` for a runner of ``impl``: itself, or ``"jax"`` for impl
    ``"c"`` (MJX has no C step: ``raw`` is then the MJX floor impl "c" is weighed
    against)."""
    return "jax" if impl == "c" else impl


def _batched_start(w: Workload) -> tuple[mjx.Model, mjx.Data]:
    """Device model and ``num_envs`` copies of the start data, as the runner builds them
    (on ``raw``'s impl).

    ``vmap`` broadcasts the per-world leaves; MJX-Warp's pooled contact buffers stay
    pooled (MJX declares them unmapped), sized by the runner's default capacities.
    """
    b = backend.Backend.make(
        w.mj_model, w.num_envs, Options(impl=raw_impl(w.impl), device=w.device)
    )
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


def _raw_rollout_of(w: Workload) -> Callable:
    """The raw rollout of ``w``'s impl."""
    return _raw_rollout_warp if w.impl == "warp" else _raw_rollout


def _prepare_raw(w: Workload) -> Trial:
    model, data = _batched_start(w)
    actions = jax.device_put(w.actions, w.device)
    rollout = _raw_rollout_of(w)
    return Trial(
        run=lambda: jax.block_until_ready(rollout(model, data, actions, w.substeps)),
        impl=raw_impl(w.impl),
    )


def _prepare_raw_loop(w: Workload) -> Trial:
    """``raw`` called once per env step from Python with that step's host controls, as
    ``step_loop`` takes them: the loop a user writes over raw MJX (one call and one
    upload a step, the physics the same). Not a floor: each call passes MJX's model
    and data as pytrees of ~220 leaves, where the runner's packed step passes a few
    buffers."""
    model, start = _batched_start(w)
    rollout = _raw_rollout_of(w)

    def run() -> None:
        data = start
        for t in range(w.n_steps):
            data = rollout(model, data, w.actions[t : t + 1], w.substeps)
        jax.block_until_ready(data)

    return Trial(run=run, impl=raw_impl(w.impl))


def _runner(w: Workload) -> Any:
    from mjxrunner.doors.runner import MultiEnvRunner

    return MultiEnvRunner(
        w.mj_model, w.num_envs, impl=w.impl, seed=w.seed, device=w.device, num_threads=w.threads
    )


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
        task,
        w.num_envs,
        autoreset="same_step",
        impl=w.impl,
        device=w.device,
        model=w.mj_model,
        num_threads=w.threads,
    )
    key = jax.device_put(jax.random.key(w.seed), w.device)
    start = jax.block_until_ready(jax.jit(env_.reset)(env, key))
    actions = jax.device_put(w.actions, w.device)
    return Trial(run=lambda: jax.block_until_ready(_env_scan_jit(env, start, actions)))


def _prepare_step_loop(w: Workload, wait: bool = False) -> Trial:
    """The runner's ``set_actions`` + ``step()`` loop; with ``wait``, each step is
    waited for (``block_until_ready``) before the next, as a door that hands out
    every step's results must."""
    runner = _runner(w)

    def run() -> None:
        for t in range(w.n_steps):
            runner.set_actions(w.actions[t])
            runner.step(substeps=w.substeps)
            if wait:
                runner.block_until_ready()
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


def _native_start(w: Workload) -> tuple[np.ndarray, np.ndarray]:
    """``(num_envs, nstate)`` full-physics start states, and ``(num_envs, n_steps *
    substeps, nu)`` float64 controls (each held for its substeps)."""
    m, spec = w.mj_model, mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.empty(mujoco.mj_stateSize(m, spec))
    mujoco.mj_getState(m, w.mj_data, state0, spec)
    control = np.repeat(np.asarray(w.actions, np.float64).transpose(1, 0, 2), w.substeps, axis=1)
    return np.tile(state0, (w.num_envs, 1)), control


def _prepare_native(w: Workload) -> Trial:
    """``mujoco.rollout`` over the whole workload in as few calls as its buffer allows."""
    from mujoco import rollout

    m = w.mj_model
    state0, control = _native_start(w)
    total = control.shape[1]
    chunk = max(1, min(total, NATIVE_BUFFER_BYTES // (8 * w.num_envs * state0.shape[1])))
    pool = rollout.Rollout(nthread=w.threads)
    datas = [mujoco.MjData(m) for _ in range(w.threads)]

    def run() -> None:
        start = state0
        for t in range(0, total, chunk):
            states, _ = pool.rollout(
                m, datas, start, np.ascontiguousarray(control[:, t : t + chunk])
            )
            start = states[:, -1]

    return Trial(run=run, close=pool.close, impl="mujoco")


def _prepare_native_loop(w: Workload) -> Trial:
    """``mujoco.rollout`` called once per env step (``nstep=substeps``) from a Python
    loop: the floor of a loop that comes back to the host every step, as the runner's
    ``step_loop`` does. Outputs go to buffers made once; the solver's warm start is
    not carried from call to call (``rollout`` does not return it)."""
    from mujoco import rollout

    m = w.mj_model
    state0, control = _native_start(w)
    control = control.reshape(w.num_envs, w.n_steps, w.substeps, m.nu)
    steps = [np.ascontiguousarray(control[:, t]) for t in range(w.n_steps)]
    states = np.empty((w.num_envs, w.substeps, state0.shape[1]))
    sensors = np.empty((w.num_envs, w.substeps, m.nsensordata))
    pool = rollout.Rollout(nthread=w.threads)
    datas = [mujoco.MjData(m) for _ in range(w.threads)]

    def run() -> None:
        start = state0
        for u in steps:
            pool.rollout(m, datas, start, u, state=states, sensordata=sensors)
            start = states[:, -1].copy()

    return Trial(run=run, close=pool.close, impl="mujoco")


def _prepare_sharded(w: Workload) -> Trial:
    """The runner's rollout with its worlds split over every device of the platform."""
    import inspect

    from mjxrunner.doors.runner import MultiEnvRunner

    if w.impl == "c":
        raise Unavailable(
            "impl 'c' splits its worlds over threads (num_threads), not over JAX devices"
        )
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
        Variant(RAW, "jit(vmap(scan(mjx.step))), MJX (impl jax beside impl c)", _prepare_raw),
        Variant("rollout", "runner.rollout (fused scan)", _prepare_rollout),
        Variant("env", "scan of env.step (task + autoreset)", _prepare_env),
        Variant("raw_loop", "raw called per step from Python", _prepare_raw_loop),
        Variant("step_loop", "set_actions + step() Python loop", _prepare_step_loop),
        Variant(NATIVE, "mujoco.rollout, one call, num_threads", _prepare_native),
        Variant("native_loop", "mujoco.rollout per step, num_threads", _prepare_native_loop),
        Variant("sharded", "sharded runner", _prepare_sharded),
    )
}
"""Every variant, in report order. Adding a variant is adding one entry here."""
