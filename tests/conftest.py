"""Shared fixtures. Compiles are the suite's cost, so runners are module-scoped and
JAX's persistent compilation cache and Warp's kernel cache are on."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
# SB3 makes a new folder in the temporary directory for every model whose logger is
# not configured (tests, README, notebooks): one shared folder instead.
os.environ.setdefault("SB3_LOGDIR", os.path.join(tempfile.gettempdir(), "mjxrunner-tests-sb3"))
# Two host devices, so the sharding tests run on this CPU; single-device runners use
# the first one and are unaffected.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()
# The suite compiles far more than it runs: XLA:CPU's backend at optimization level 0
# compiles about twice as fast (hopper's env step 56 -> 29 s, its reset 26 -> 9 s, on
# 2 cores) for steps ~2.7x slower, a good trade at the small batches of tests.
# Background jobs inherit it (but for two notebooks, test_notebooks.FULL_SPEED); a level
# already in XLA_FLAGS is kept.
FAST_COMPILE = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += f" {FAST_COMPILE}"
# The suite sets JAX's cache itself (below), and keeps no programs whole where the
# Gymnasium door or the command line would (mjxrunner.engine.programs): keeping one
# costs its export and a compile of its module's call, and pays off only in a later
# process; tests/test_programs.py turns it on where it is what the test is about.
# Background jobs inherit the setting.
os.environ.setdefault("MJXRUNNER_COMPILE_CACHE", "0")

import jax  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import warp as wp  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import mjxrunner.engine.cache  # noqa: E402

# Property tests: "suite" keeps them fast; benchmarks/fuzz.py runs them with "fuzz"
# (MJXRUNNER_HYPOTHESIS_PROFILE=fuzz), ~25x as many examples. No example database:
# nothing is written into the working tree.
settings.register_profile(
    "suite",
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile("fuzz", settings.get_profile("suite"), max_examples=1000)
settings.load_profile(os.environ.get("MJXRUNNER_HYPOTHESIS_PROFILE", "suite"))

# JAX's cache where the package keeps its own (MJXRUNNER_CACHE_DIR moves both).
CACHE = mjxrunner.engine.cache.root()
jax.config.update("jax_compilation_cache_dir", str(CACHE / "jax"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
# A size bound turns on JAX's file lock around cache reads and writes (it writes
# entries in place), so the background processes below can share the cache safely.
jax.config.update("jax_compilation_cache_max_size", 4 << 30)


def _stamp_cache_entries(folder: Path) -> None:
    """Gives entries written without a size bound (no ``-atime`` file beside them) an
    access time: JAX's eviction reads one per entry and otherwise fails every write."""
    for entry in folder.glob("*-cache"):
        atime = entry.with_name(entry.name.removesuffix("-cache") + "-atime")
        if not atime.exists():
            atime.write_bytes(time.time_ns().to_bytes(8, "little"))


_stamp_cache_entries(CACHE / "jax")

wp.config.cache_kernels = True  # Warp's kernel cache, in its default ~/.cache/warp
# As for XLA above: Warp's CPU kernels built at -O0 rather than -O2 cut a cold warp
# ant env's set-up from 49 to 35 s here, for slower kernels at tiny batches. Set on
# import, not in a pytest hook, so the background jobs (which import this module)
# build the same kernels and find the workers' builds in the cache: with the setting
# in the hook they built every module again at -O2 (the joystick job: 45 modules, 49 s).
wp.config.optimization_level = 0
wp.config.quiet = True


# The files of the longest cold runs (worker-seconds on 2 cores), longest first. make
# test hands whole files to its two workers in collection order; with these first and
# the many short files after them, the workers end together. In pytest-xdist's own
# order (files with the most tests first) test_x64 and test_readme came last: in a
# cold run of 31 minutes the two workers' sums differed by ~100 s.
LONGEST_FIRST = (
    "test_robots",
    "test_env_engine",
    "test_notebooks",
    "test_readme",
    "test_trainers",
    "test_sharding",
    "test_groups",
    "test_parity",
    "test_x64",
    "test_train",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order above
        config.option.loadscopereorder = False


def load_benchmark(name: str):
    """``benchmarks/<name>.py``, a folder of scripts rather than a package, as a module
    (registered in ``sys.modules``: dataclasses look their module up there)."""
    import importlib.util

    path = HERE.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def slider_xml(nbody: int) -> str:
    """``nbody - 1`` bodies, each on its own vertical slide joint: nbody == nq + 1."""
    bodies = "".join(
        f"<body name='b{i}' pos='{i} 0 1'><joint name='j{i}' type='slide' axis='0 0 1'/>"
        f"<geom type='sphere' size='0.1' mass='1'/></body>"
        for i in range(nbody - 1)
    )
    motors = "".join(f"<motor joint='j{i}'/>" for i in range(nbody - 1))
    return (
        "<mujoco><option timestep='0.01'><flag contact='disable'/></option>"
        f"<worldbody>{bodies}</worldbody><actuator>{motors}</actuator></mujoco>"
    )


@pytest.fixture(scope="session")
def slider3() -> mujoco.MjModel:
    """3 slide joints, nbody == 4, nq == nv == nu == 3."""
    return mujoco.MjModel.from_xml_string(slider_xml(4))


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """torch on one intra-op thread: make test runs a worker per core, and torch's
    default pool then spins against the other worker (SB3's PPO test beside a busy
    core: 92 s with the default, 34 s with one thread). Only torch: XLA's CPU
    kernels ran test_ppo.py 17% slower with OMP_NUM_THREADS=1."""
    if "torch" in sys.modules:  # imported by the test modules while collecting
        sys.modules["torch"].set_num_threads(1)
    yield


# JAX's in-process caches that hold compiled executables (or lowerings, which hold
# them once compiled), by the name of the function each caches.
_EXECUTABLE_CACHES = (
    "_cached_compilation",
    "_cached_lowering_to_hlo",
    "_pjit_lower",
    "xla_primitive_callable",
)


def free_executables() -> None:
    """Drops every compiled executable JAX holds in memory, keeping its traces.

    ``jax.clear_caches`` drops the traced jaxprs as well, so each module traced
    MJX's step again for every model it used (~6 s for the hopper's env). JAX
    registers its caches by the function each wraps (``jax._src.util._caches``, JAX
    0.10); where that changes, this falls back to ``jax.clear_caches``.
    """
    from jax._src import pjit, util
    from jax._src.lib import _jax

    caches = [
        cache
        for cache, name in list(util._caches.items())
        if any(f"function {wrapped} at" in name for wrapped in _EXECUTABLE_CACHES)
    ]
    if len(caches) != len(_EXECUTABLE_CACHES):
        jax.clear_caches()
        return
    for cache in caches:
        cache.cache_clear()
    pjit._cpp_pjit_cache_fun_only.clear()
    pjit._cpp_pjit_cache_explicit_attributes.clear()
    _jax.PjitFunctionCache.clear_all()


@pytest.fixture(autouse=True, scope="module")
def _free_executables_between_modules():
    """Drops JAX's in-memory compiled functions after each test module.

    A whole suite in one process otherwise keeps every executable it ever built;
    after some hundreds of them, XLA:CPU crashed here while serializing one more
    for the persistent cache. Later modules read what they share back from that
    cache, which costs far less than compiling, and keep the traces.
    """
    yield
    free_executables()


# --- env states of tasks on a terrain, placed by hand -------------------------------


def placed(leaf, value):
    """``value`` as an array placed like ``leaf`` (so no program changes)."""
    return jax.device_put(np.asarray(value, leaf.dtype), leaf.sharding)


def on_tiles(state, level, spawn, qpos, command=None, qvel=None):
    """The env ``state`` of a task with the terrain curriculum, with each world's
    ``level`` and ``spawn``, its ``qpos``, and if given its ``qvel`` and the command
    in its info; every array placed like the one it replaces."""
    data = state.runner.data
    new = {"qpos": placed(data.qpos, qpos)}
    if qvel is not None:
        new["qvel"] = placed(data.qvel, qvel)
    info = state.info
    if command is not None:
        info = {**info, "command": placed(info["command"], command)}
    c = state.curriculum
    curriculum = c.replace(level=placed(c.level, level), spawn=placed(c.spawn, spawn))
    runner = state.runner.replace(data=data.replace(**new))
    return state.replace(runner=runner, curriculum=curriculum, info=info)


# --- tests that run in processes of their own, in the background -------------------
#
# A test whose work is a separate process (float64, two-process sharding, nv = 81,
# the notebooks, the README) is a job. When collection ends, a thread starts the
# selected jobs one after another, in the order the suite reaches their tests, so
# they run on the second core while this process runs other tests; a test waits for
# its job (starting it at once if the queue has not got there) and checks what it
# printed and wrote. One job at a time keeps the two cores from being oversubscribed.
# Under pytest-xdist (make test: one worker per core) there is no queue: a job starts
# when its first test asks for it, and its worker waits, so two processes work.

HERE = Path(__file__).parent


@dataclass
class Job:
    launch: Callable[[Path], list[subprocess.Popen]]  # out_dir -> processes
    needed_by: str  # a substring of the node ids of the tests that wait for it
    procs: list[subprocess.Popen] | None = None
    out: Path | None = None


_JOBS: dict[str, Job] = {}
_LOCK = threading.Lock()


def background(name: str, needed_by: str | None = None):
    """Registers ``launch(out_dir) -> [Popen, ...]`` as job ``name``, started when
    collection ends if a selected test's node id contains ``needed_by`` (default:
    ``name``, a test module's name)."""

    def register(launch):
        _JOBS[name] = Job(launch, needed_by or name)
        return launch

    return register


def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment, with the tests folder importable and the suite's JAX cache
    settings (JAX reads them from these variables when it starts)."""
    c = jax.config
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "JAX_COMPILATION_CACHE_DIR": c.jax_compilation_cache_dir or "",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(
            c.jax_persistent_cache_min_compile_time_secs
        ),
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": str(
            c.jax_persistent_cache_min_entry_size_bytes
        ),
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(c.jax_compilation_cache_max_size),
        **extra,
    }


def start(script: str, *args: str, out: Path, env: dict[str, str] | None = None):
    """Runs ``tests/script`` with ``args``; stdout and stderr go to a log in ``out``,
    and its temporary files (the notebooks' and the documentation's examples make
    folders of their own) into ``out/tmp``."""
    log = open(out / f"{Path(script).stem}-{len(list(out.glob('*.log')))}.log", "w")
    (out / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        env={**(env or subprocess_env()), "TMPDIR": str(out / "tmp")},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc.log_path = Path(log.name)
    return proc


def _launch(job: Job) -> list[subprocess.Popen]:
    """Starts ``job`` unless it has started; its processes either way."""
    with _LOCK:
        if job.procs is None:
            job.out = Path(tempfile.mkdtemp(prefix="mjxrunner-"))
            job.procs = job.launch(job.out)
        return job.procs


def _run_queue(jobs: list[Job]) -> None:
    for job in jobs:
        for p in _launch(job):
            p.wait()


def finished(name: str, timeout: float = 900) -> tuple[list[tuple[int, str]], Path]:
    """Waits for job ``name``'s processes: ``([(returncode, log), ...], out_dir)``."""
    job = _JOBS[name]
    logs = [(p.wait(timeout=timeout), p.log_path.read_text(errors="replace")) for p in _launch(job)]
    return logs, job.out


def pytest_collection_finish(session):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    ids = [item.nodeid for item in session.items]

    def first_use(job: Job) -> int:
        return next((i for i, nodeid in enumerate(ids) if job.needed_by in nodeid), -1)

    selected = sorted((j for j in _JOBS.values() if first_use(j) >= 0), key=first_use)
    threading.Thread(target=_run_queue, args=(selected,), daemon=True).start()


def pytest_sessionfinish(session, exitstatus):
    """Stops the jobs still running and removes the folders of those that succeeded
    (a run left ~15 of them, up to 13 MB each); a failed job's folder stays, to read."""
    with _LOCK:
        for job in _JOBS.values():
            job.procs = job.procs or []  # nothing starts any more
            for p in job.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if job.out is not None and all(p.returncode == 0 for p in job.procs):
                shutil.rmtree(job.out, ignore_errors=True)
