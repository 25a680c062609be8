"""XLA:CPU's thread pool cut to one thread on a CPU-only machine of at most 2 CPUs,
before JAX starts its backends.

Why: XLA:CPU runs a program of more than 8 thunks on a dataflow executor that hands
ready thunks to the other threads of its pool, and each hand-off wakes a thread (tens
of microseconds on these hosts). On 2 CPUs that second XLA thread has no core of its
own: MuJoCo's threads (impl "c") and the Python thread want both. With a pool of one
thread, a program's thunks run one after the other on the thread that started it.
Measured on 2-core hosts (``python -m benchmarks.native_throughput``, four pairs of
processes alternating, each rate over ``mujoco.rollout``'s of its own process): the
functional env's compiled step and the Gymnasium door ran 1.2-1.3x as fast at 256
and 1,024 worlds (cartpole, hopper, ant), the runner's step loop 1.0-1.16x; MJX
impl "jax" moved 0.91-1.14x and PPO's training on impl "c" stayed within its spread
(``docs/throughput.md``). Machines with more CPUs were not measured, so there XLA
keeps its default (one thread per CPU), and so does a process that may start an
accelerator (a GPU or TPU plugin installed, unless ``JAX_PLATFORMS`` names only the
CPU): XLA's GPU client sizes a pool of its own by the same setting.

The size is XLA's own setting, ``PJRT_NPROC`` (then ``NPROC``), read once when its
CPU client starts: :func:`install` (called by ``import mjxrunner``) sets
``PJRT_NPROC=1`` only if neither is set, no backend has started yet, the process
may run on at most 2 CPUs and JAX can start no accelerator. To keep XLA's default,
set ``PJRT_NPROC`` yourself (to the number of CPUs, ``nproc``); any value you set is
left as it is.
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
from importlib import metadata

import jax
from jax._src import xla_bridge

ENV = ("PJRT_NPROC", "NPROC")  # what XLA:CPU reads, in this order
MEASURED_CPUS = 2  # the most CPUs of a machine where one thread was measured to pay

_threads: int | None = None
_wrote = False  # install() set PJRT_NPROC (not the user)


def usable_cpus() -> int:
    """The CPUs this process may run on (as XLA counts them for its pool)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def cpu_only() -> bool:
    """Whether JAX can start no backend but the CPU: ``jax_platforms`` names only
    ``cpu``, or no accelerator plugin (``jax_plugins``, libtpu) is installed."""
    platforms = jax.config.jax_platforms
    if platforms:
        return all(p.strip() == "cpu" for p in platforms.split(","))
    namespace = xla_bridge.jax_plugins
    if namespace is not None and any(pkgutil.iter_modules(namespace.__path__)):
        return False
    if metadata.entry_points(group="jax_plugins"):
        return False
    return importlib.util.find_spec("libtpu") is None


def _xla_reads() -> int:
    """The pool's size as XLA:CPU reads it: the first of ``ENV`` that is an integer,
    else one thread per usable CPU."""
    for name in ENV:
        try:
            return max(0, int(os.environ.get(name, "")))
        except ValueError:
            continue
    return usable_cpus()


def install() -> int | None:
    """Gives XLA:CPU's pool one thread on a CPU-only machine of at most 2 CPUs, if it
    still can.

    Returns the pool's size as XLA will read it when its CPU client starts, or None
    when JAX's backends had started before the call (import mjxrunner before running
    any JAX computation).
    """
    global _threads, _wrote
    if xla_bridge.backends_are_initialized():
        _threads = None
        return None
    users = any(os.environ.get(name, "").strip() for name in ENV)
    if not users and usable_cpus() <= MEASURED_CPUS and cpu_only():
        os.environ[ENV[0]] = "1"
        _wrote = True
    _threads = _xla_reads()
    return _threads


def widen() -> int | None:
    """Gives XLA:CPU's pool back its default size (a thread per CPU) where
    :func:`install` cut it to one and no backend has started yet: for a process whose
    programs are wide, such as a trainer's, whose minibatch updates are matrix
    products that a second thread halves. Measured on a 2-core host
    (``python -m benchmarks.train_throughput --symmetric``, 1,024 Go1 worlds, PPO
    with 128-wide MLPs): 24.4 k env steps/s against 18.0 k with one thread; the
    env's rollout alone ran the same (35.8 k and 35.1 k). A size the user set is
    kept.

    Returns the pool's size as XLA will read it, or None when the backends had
    started before the call.
    """
    global _threads, _wrote
    if xla_bridge.backends_are_initialized():
        return threads()
    if _wrote:
        os.environ.pop(ENV[0], None)
        _wrote = False
    _threads = _xla_reads()
    return _threads


def threads() -> int | None:
    """The size of XLA:CPU's pool as decided by :func:`install` (None: not known,
    the backends had started before it). Once the backends run, at least one thread
    per CPU device: XLA starts that many whatever the setting."""
    if _threads is None or not xla_bridge.backends_are_initialized():
        return _threads
    return max(_threads, len(jax.devices("cpu")))
