"""Choice of implementation and device, model checks, and compile counting."""

from __future__ import annotations

import threading
from importlib import metadata
from typing import Any

import jax
import mujoco
import numpy as np
from mujoco import mjx

IMPLS = ("jax", "warp")


def check_impl(impl: Any) -> str:
    """Validates ``impl``: MJX is always told explicitly which one to use."""
    if not isinstance(impl, str):
        raise TypeError(f"impl must be the str 'jax' or 'warp', got {type(impl).__name__}")
    if impl not in IMPLS:
        raise ValueError(f"impl must be 'jax' or 'warp', got {impl!r}")
    return impl


def resolve_device(device: Any) -> jax.Device:
    """A JAX device from None (the default), a ``jax.Device`` or a platform name.

    Platform names are ``"cpu"``, ``"gpu"``/``"cuda"``, optionally with an index
    (``"cuda:1"``).
    """
    if device is None:
        return jax.devices()[0]
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
    """Refuses models MJX cannot run, naming the feature and the way out."""
    if m.opt.enableflags & mujoco.mjtEnableBit.mjENBL_ENERGY:
        raise ValueError(
            "the model enables energy computation (<flag energy='enable'/>), which MJX "
            "does not support; remove the flag or set energy='disable'"
        )
    if impl == "jax" and m.nflex:
        raise ValueError(
            f"the model has {m.nflex} flex object(s), which impl 'jax' cannot simulate; "
            "use impl='warp' or remove the flex"
        )


def put_model(m: mujoco.MjModel, impl: str, device: jax.Device) -> mjx.Model:
    """``mjx.put_model`` with ``impl`` explicit and MJX's refusals made readable."""
    try:
        return mjx.put_model(m, impl=impl, device=device)
    except NotImplementedError as e:
        raise ValueError(
            f"MJX impl {impl!r} cannot run this model: {e}. Change the model, or try "
            "the other impl."
        ) from e


def put_data(m: mujoco.MjModel, d: mujoco.MjData, impl: str, device: jax.Device) -> mjx.Data:
    """One world's ``mjx.Data`` from a host ``MjData``, ``impl`` explicit."""
    return mjx.put_data(m, d, impl=impl, device=device)


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


def backend_info(impl: str | None = None, device: jax.Device | None = None) -> dict[str, Any]:
    """The backend identity to record beside every result."""
    device = device or jax.devices()[0]
    return {
        "versions": versions(),
        "impl": impl,
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "qpos_dtype": float_dtype().name,
    }


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
