"""Shared fixtures. Compiles are the suite's cost, so runners are module-scoped and
JAX's persistent compilation cache and Warp's kernel cache are on."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
# Two host devices, so the sharding tests run on this CPU; single-device runners use
# the first one and are unaffected.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()
CACHE = Path(os.environ.get("MJXRUNNER_CACHE", Path.home() / ".cache" / "mjxrunner"))

import jax  # noqa: E402
import mujoco  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

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

jax.config.update("jax_compilation_cache_dir", str(CACHE / "jax"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def pytest_configure(config):
    import warp as wp

    wp.config.cache_kernels = True  # Warp's kernel cache, in its default ~/.cache/warp
    wp.config.quiet = True


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


@pytest.fixture(autouse=True, scope="module")
def _free_executables_between_modules():
    """Drops JAX's in-memory compiled functions after each test module.

    A whole suite in one process otherwise keeps every executable it ever built;
    after some hundreds of them, XLA:CPU crashed here while serializing one more
    for the persistent cache. Later modules read what they share back from that
    cache, which costs far less than compiling.
    """
    yield
    jax.clear_caches()


# --- tests that run in processes of their own, started early ---------------------------
#
# A test whose work is a separate process (float64, two-process sharding) starts it
# when collection ends, so it compiles on the second core while this process runs
# other tests; the test then waits for it and checks what it printed and wrote.

HERE = Path(__file__).parent
_LAUNCHERS = {}  # test module name -> launch(out_dir) -> [Popen, ...]
_STARTED: dict[str, tuple[list[subprocess.Popen], Path]] = {}


def background(module: str):
    """Registers ``launch(out_dir) -> [Popen, ...]`` for the tests of ``module``."""

    def register(launch):
        _LAUNCHERS[module] = launch
        return launch

    return register


def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment, with the tests folder importable and the suite's JAX cache."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "MJXRUNNER_JAX_CACHE": jax.config.jax_compilation_cache_dir or "",
        **extra,
    }


def start(script: str, *args: str, out: Path, env: dict[str, str] | None = None):
    """Runs ``tests/script`` with ``args``; stdout and stderr go to a log in ``out``."""
    log = open(out / f"{Path(script).stem}-{len(list(out.glob('*.log')))}.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        env=env or subprocess_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc.log_path = Path(log.name)
    return proc


def _launch(module: str) -> None:
    out = Path(tempfile.mkdtemp(prefix="mjxrunner-"))
    _STARTED[module] = (_LAUNCHERS[module](out), out)


def finished(module: str, timeout: float = 900) -> tuple[list[tuple[int, str]], Path]:
    """Waits for ``module``'s processes: ``([(returncode, log), ...], out_dir)``."""
    if module not in _STARTED:  # not started with the session (e.g. a direct call)
        _launch(module)
    procs, out = _STARTED[module]
    return [(p.wait(timeout=timeout), p.log_path.read_text(errors="replace")) for p in procs], out


def pytest_collection_finish(session):
    selected = {Path(str(item.fspath)).stem for item in session.items}
    for module in sorted(selected & set(_LAUNCHERS)):
        _launch(module)


def pytest_sessionfinish(session, exitstatus):
    for procs, _ in _STARTED.values():
        for p in procs:
            if p.poll() is None:
                p.kill()
