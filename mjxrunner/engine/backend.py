"""Choice of implementation and device, model checks, and compile counting."""

from __future__ import annotations

import dataclasses
import os
import threading
import types
from importlib import metadata
from typing import Any

import jax
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import backends, checks, cpu_fusion, cpu_linalg, cpu_pool, deprecated
from mjxrunner.engine.backends.mjx import (  # noqa: F401 - public here: Warp's sizes
    GRAPH_MODES,
    Capacities,
    capacities,
    check_graph_mode,
    contacts_per_world,
    default_graph_mode,
    rows_per_world,
)
from mjxrunner.engine.errors import CapacityOverflowError, CapacityWarning  # noqa: F401 - public here

IMPLS = tuple(backends.BY_NAME)


def check_impl(impl: Any) -> str:
    """Validates ``impl``: MJX is always told explicitly which one to use. ``"cpp"``
    (MJX's spelling of MuJoCo C) comes back as ``"c"``."""
    if not isinstance(impl, str):
        raise TypeError(f"impl must be the str 'jax', 'warp' or 'c', got {type(impl).__name__}")
    return backends.of(impl).name  # refuses a name no backend has


def resolve_device(device: Any) -> jax.Device:
    """A JAX device from None (the default), a ``jax.Device`` or a platform name.

    Platform names are ``"cpu"``, ``"gpu"``/``"cuda"``, optionally with an index
    (``"cuda:1"``).
    """
    if device is None:  # this process's first device (all of them in one process)
        return jax.local_devices()[0]
    if isinstance(device, jax.Device):
        if device not in jax.devices(device.platform):
            raise ValueError(f"device {device} is not one of this process's devices")
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be None, a jax.Device or a str, got {type(device).__name__}")
    platform, _, index = device.partition(":")
    platform = {"cuda": "gpu"}.get(platform, platform)
    try:
        devices = jax.devices(platform)
    except RuntimeError as e:
        raise ValueError(f"no {platform!r} devices here ({e})") from None
    i = int(index) if index.isdigit() else 0 if not index else -1
    if not 0 <= i < len(devices):
        raise ValueError(f"device {device!r}: there are {len(devices)} {platform} devices")
    return devices[i]


def check_supported(m: mujoco.MjModel, impl: str) -> None:
    """Refuses models ``impl`` cannot run, naming the feature and the way out."""
    backends.of(impl).check_model(m)


@dataclasses.dataclass(frozen=True)
class Backend:
    """How the worlds are simulated, chosen once: impl, device, and its settings.

    What differs between the impls is its :attr:`physics`
    (:mod:`mjxrunner.engine.backends`), so the engine, the runner, the env, the
    benchmarks and checkpoints never branch on the impl.
    Frozen and hashable: it is static configuration of compiled functions.

    Attributes:
      impl: ``"jax"`` or ``"warp"`` (always passed to MJX), or ``"c"``.
      device: the JAX device that holds the worlds (the first one when sharded).
      graph_mode: Warp's graph-capture mode (None for impls "jax" and "c").
      caps: Warp buffer sizes (None for impls "jax" and "c", whose buffers are exact).
      num_threads: impl "c"'s threads (None for the MJX impls).
    """

    impl: str
    device: jax.Device
    graph_mode: str | None = None
    caps: Capacities | None = None
    num_threads: int | None = None

    @classmethod
    def make(cls, m: mujoco.MjModel, num_envs: int, options: Any = None, **choice: Any) -> Backend:
        """Validates the choice for model ``m`` and ``num_envs`` worlds.

        Args:
          m: the host model; one the impl cannot run is refused here, naming the feature.
          num_envs: number of worlds (Warp's pools are sized for them).
          options: the engine's :class:`~mjxrunner.engine.options.Options`; it reads
            ``impl``, ``device`` and the fields its physics chooses from (Warp's
            graph mode and capacities, impl "c"'s threads: see :func:`capacities`
            for the Warp defaults), and ignores the others.
          **choice: deprecated: the choice as keywords (``impl``, ``device``,
            ``graph_mode``, ``naconmax``, ``njmax``, ``naccdmax``, ``nvmax``,
            ``num_threads``; ``options`` then the impl's name, default ``"jax"``),
            as before the options record.
        """
        if options is None or isinstance(options, str) or choice:
            if options is not None and not isinstance(options, str):
                raise TypeError("Backend.make takes an Options, or the old keywords, not both")
            options = _old_record(**({"impl": options} if options else {}), **choice)
            deprecated.warn(
                "Backend.make(m, num_envs, impl=..., ...)", "pass Options(impl=..., ...)"
            )
        impl = check_impl(options.impl)
        device = resolve_device(options.device)
        physics = backends.of(impl)
        physics.check_model(m)
        return cls(impl, device, **physics.settings(m, num_envs, device, options))

    @property
    def physics(self) -> backends.Physics:
        """What the impl does differently (:mod:`mjxrunner.engine.backends`)."""
        return backends.of(self.impl)

    def resolved(self, options: Any) -> Any:
        """``options`` with the choices this backend made from them: the impl's
        name, Warp's graph mode and capacities, impl "c"'s threads (what checkpoints
        save, so a restored engine chooses alike)."""
        return options.replace(**self._choice())

    @property
    def options(self) -> dict[str, Any]:
        """Deprecated: the keywords of :meth:`make`'s old form that rebuild this
        choice (:meth:`resolved` writes it into an ``Options``)."""
        deprecated.warn("Backend.options", "use Backend.resolved(options)")
        return self._choice()

    def _choice(self) -> dict[str, Any]:
        """The options this backend chose: impl, Warp's graph mode and capacities,
        impl "c"'s threads."""
        caps = {} if self.caps is None else self.caps.as_dict()
        return {
            "impl": self.impl,
            "graph_mode": self.graph_mode,
            "num_threads": self.num_threads,
            **caps,
        }

    def put_model(self, m: mujoco.MjModel, digest: str | None = None) -> mjx.Model:
        """The device model of ``m``, MJX's refusals made readable; ``digest``, the
        model's ``HostModel`` digest if the caller has it, spares impl "c" hashing
        it again."""
        return self.physics.put_model(m, self, digest)

    def put_data(self, m: mujoco.MjModel, d: mujoco.MjData) -> mjx.Data:
        """One world's device data from host ``d``, ``impl`` explicit."""
        return self.physics.put_data(m, d, self)

    def info(self) -> dict[str, Any]:
        """The backend identity to record with every result (:func:`backend_info`)."""
        info = backend_info(self.impl, self.device, self.graph_mode, self.caps)
        return {**info, **self.physics.info(self)}

    def describe_overflow(self, bits: np.ndarray) -> str:
        """A message naming overflowing worlds and the option to raise."""
        return describe_overflow(bits, self.caps)


_OLD_CHOICE = {
    "impl": "jax",
    "device": None,
    "graph_mode": None,
    "naconmax": None,
    "njmax": None,
    "naccdmax": None,
    "nvmax": None,
    "num_threads": None,
}
"""The keywords of :meth:`Backend.make`'s old form, with their defaults."""


def _old_record(**choice: Any) -> Any:
    """The record :meth:`Backend.make` reads, from its old form's keywords."""
    unknown = sorted(set(choice) - set(_OLD_CHOICE))
    if unknown:
        raise TypeError(f"Backend.make got unknown keyword(s) {unknown}; pass an Options")
    return types.SimpleNamespace(**{**_OLD_CHOICE, **choice})


def _put_model(
    m: mujoco.MjModel, impl: str, device: jax.Device, graph_mode: str | None = None
) -> mjx.Model:
    impl, device = check_impl(impl), resolve_device(device)
    settings = backends.of(impl).settings(m, 1, device, _old_record(graph_mode=graph_mode))
    return Backend(impl, device, **settings).put_model(m)


def _put_data(
    m: mujoco.MjModel, d: mujoco.MjData, impl: str, device: jax.Device, caps: Any = None
) -> mjx.Data:
    # only Warp's physics reads the capacities; the others put the data without them
    return Backend(check_impl(impl), resolve_device(device), caps=caps).put_data(m, d)


def overflow_bits(data: mjx.Data) -> jax.Array:
    """``(num_envs,)`` int32: the Warp capacity bits batched ``data`` holds (bits of
    buffers too small; solver iteration limits left out). Zeros for impls "jax" and
    "c", whose buffers are exact."""
    return backends.of(data).overflow_bits(data)


def clear_overflow(data: mjx.Data) -> mjx.Data:
    """``data`` with Warp's overflow flags zeroed: Warp ORs flags in, so a step that
    starts from cleared flags reports only its own overflow."""
    return backends.of(data).clear_overflow(data)


capacity_bits = backends.mjx.capacity_bits


def contact_count(data: mjx.Data) -> jax.Array:
    """``(num_envs,)`` int32: contacts per world that enter the constraint solver."""
    return backends.of(data).contact_count(data)


HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def force_host_devices(n: Any) -> None:
    """Makes the CPU platform show ``n`` devices, so sharding can be run on one host.

    XLA reads the flag when JAX starts its backends, so this must come first; once
    they run, it only checks that the CPU already has ``n`` devices.

    Raises:
      ValueError: JAX's backends are up with another number of CPU devices.
    """
    from jax._src import xla_bridge

    n = checks.count(n, "host devices")
    if xla_bridge.backends_are_initialized():
        have = len(jax.devices("cpu"))
        if have != n:
            raise ValueError(
                f"JAX already runs with {have} CPU device(s); {n} host devices must be "
                f"asked for before JAX starts (XLA_FLAGS={HOST_DEVICES_FLAG}={n})"
            )
        return
    kept = [
        f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(HOST_DEVICES_FLAG)
    ]
    os.environ["XLA_FLAGS"] = " ".join([*kept, f"{HOST_DEVICES_FLAG}={n}"])


def float_dtype() -> np.dtype:
    """The float dtype MJX uses for the data (float64 only with ``jax_enable_x64``)."""
    return np.dtype(np.float64 if jax.config.jax_enable_x64 else np.float32)


def versions() -> dict[str, str]:
    """Installed versions of the packages that decide the numbers."""
    out = {}
    for pkg in ("mujoco", "mujoco-mjx", "jax", "jaxlib", "warp-lang"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def backend_info(
    impl: str | None = None,
    device: jax.Device | None = None,
    graph_mode: str | None = None,
    caps: Capacities | None = None,
) -> dict[str, Any]:
    """The backend identity to record beside every result.

    Versions of mujoco, mujoco-mjx, jax, jaxlib and warp-lang; impl; Warp graph mode
    and capacities (None for impl ``"jax"``); device platform, kind and count;
    ``jax_enable_x64`` and the dtype of ``qpos`` (Warp always runs float32).
    """
    device = device or jax.devices()[0]
    physics = None if impl is None else backends.of(impl)
    return {
        "versions": versions(),
        "impl": impl,
        "graph_mode": graph_mode,
        "capacities": None if caps is None else caps.as_dict(),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "qpos_dtype": "float32" if physics and physics.float32_only else float_dtype().name,
        # impl "c" keeps each world's exact float64 state beside what tasks read.
        "physics_dtype": physics.physics_dtype if physics else None,
        # How small Cholesky/triangular solves run on CPU (see mjxrunner.engine.cpu_linalg).
        "cpu_linalg": "xla" if cpu_linalg.installed() else "lapack",
        # Whether XLA:CPU's fusion emitters are off (see mjxrunner.engine.cpu_fusion).
        "cpu_fusion_emitters": not cpu_fusion.active(),
        # Whether impl "c"'s env, door and trainer programs turn them back on for
        # themselves (cpu_fusion.compiler_options); None for the other impls.
        "env_fusion_emitters": (cpu_fusion.compiler_options(impl) is not None)
        if physics and not physics.runs_mjx_passes
        else None,
        # Threads of XLA:CPU's pool; None: not known (see mjxrunner.engine.cpu_pool).
        "xla_cpu_threads": cpu_pool.threads(),
    }


def describe_backend(info: dict[str, Any]) -> str:
    """One line naming impl, device, dtype settings and package versions."""
    versions = " ".join(f"{k} {v}" for k, v in info["versions"].items())
    return (
        f"impl={info['impl']} device={info['platform']}:{info['device_kind']} "
        f"x{info['device_count']} x64={info['jax_enable_x64']} qpos={info['qpos_dtype']}"
        + (f" linalg={info['cpu_linalg']}" if info.get("cpu_linalg") else "")
        + (" fusion_emitters=off" if info.get("cpu_fusion_emitters") is False else "")
        + (" env_fusion_emitters=on" if info.get("env_fusion_emitters") else "")
        + (f" xla_threads={info['xla_cpu_threads']}" if info.get("xla_cpu_threads") else "")
        + f" | {versions}"
    )


# Which constructor option raises the capacity behind each Warp overflow bit.
_OVERFLOW_FIX = {
    "NEFC": "njmax",
    "NJMAX_NNZ": "njmax",
    "BROADPHASE": "naconmax",
    "NARROWPHASE": "naconmax",
    "CCD": "naccdmax",
    "NVMAX": "nvmax",
}


def overflow_names(bits: int) -> list[str]:
    """Names of the Warp ``OverflowType`` flags set in ``bits``."""
    from mujoco.mjx.third_party.mujoco_warp._src.types import OverflowType

    return [f.name for f in OverflowType if f.name != "ALL" and f.value and bits & f.value]


def describe_overflow(bits: np.ndarray, caps: Capacities | None) -> str:
    """A message naming the overflowing worlds, the buffers and the option to raise."""
    worlds = np.flatnonzero(bits)
    names = sorted({n for b in bits[worlds] for n in overflow_names(int(b))})
    fixes = []
    for name in names:
        option = _OVERFLOW_FIX.get(name)
        if option:
            now = None if caps is None else getattr(caps, option)
            fixes.append(f"{name}: raise {option} (now {now})")
        else:
            fixes.append(name)
    shown = worlds[:10].tolist() + (["..."] if len(worlds) > 10 else [])
    return (
        f"Warp capacity overflow in {len(worlds)} world(s) {shown}: {'; '.join(fixes)}. "
        "Contacts or constraints were dropped in those worlds this step."
    )


class CompileCounter:
    """Counts XLA executables built while the context is open.

    JAX records a backend-compile event for every executable it builds, also when
    the persistent cache supplies it (a hit still means the in-memory jit cache
    missed), so both count once. Use it to check that a loop causes zero recompilations::

        with CompileCounter() as c:
            runner.step()
        assert c.count == 0
    """

    _lock = threading.Lock()
    _total = 0
    _installed = False

    @classmethod
    def _listen(cls, event: str, *args: Any, **kwargs: Any) -> None:
        if "backend_compile" in event:
            with cls._lock:
                cls._total += 1

    @classmethod
    def _install(cls) -> None:
        with cls._lock:
            if cls._installed:
                return
            jax.monitoring.register_event_duration_secs_listener(cls._listen)
            cls._installed = True

    def __enter__(self) -> CompileCounter:
        self._install()
        self._start = CompileCounter._total
        self._end: int | None = None
        return self

    def __exit__(self, *exc: Any) -> None:
        self._end = CompileCounter._total

    @property
    def count(self) -> int:
        end = CompileCounter._total if self._end is None else self._end
        return end - self._start


__getattr__ = deprecated.module_getattr(
    __name__,
    {
        "put_model": ("use Backend.make(m, num_envs, options).put_model(m)", _put_model),
        "put_data": ("use Backend.make(m, num_envs, options).put_data(m, d)", _put_data),
    },
)
