"""XLA:CPU's thread pool has one thread in a process that imports mjxrunner first on
a machine of at most 2 CPUs, unless the user chose its size (mjxrunner/engine/cpu_pool.py
says why). Fresh processes show what XLA really starts: its pool's threads are named
``tf_XLAEigen``."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from mjxrunner.engine import cpu_pool

# Runs in a fresh process on at most `cpus` of this machine's CPUs; prints what XLA
# started and what mjxrunner reports.
PROBE = """
import json, os, sys
cpus, jax_first, widen = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cpus])
if jax_first:
    import jax.numpy as jnp
    jnp.ones(2).block_until_ready()
import mjxrunner
if widen:
    from mjxrunner.engine import cpu_pool
    cpu_pool.widen()
import jax.numpy as jnp
jnp.ones(2).block_until_ready()
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(json.dumps({
    "eigen": names.count("tf_XLAEigen"),
    "env": os.environ.get("PJRT_NPROC"),
    "info": mjxrunner.backend_info()["xla_cpu_threads"],
}))
"""


def probe(
    cpus: int, jax_first: bool = False, devices: int = 1, widen: bool = False, **env: str
) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in cpu_pool.ENV}
    # XLA gives its pool at least a thread per CPU device
    clean["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(cpus), "1" if jax_first else "0", "1" if widen else "0"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


needs_proc = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or not hasattr(os, "sched_setaffinity"),
    reason="counts XLA's threads through Linux's /proc",
)


@needs_proc
def test_two_cpus_get_one_xla_thread():
    assert probe(2) == {"eigen": 1, "env": "1", "info": 1}


@needs_proc
def test_several_cpu_devices_keep_a_thread_each():
    assert probe(2, devices=3) == {"eigen": 3, "env": "1", "info": 3}


@needs_proc
def test_the_users_size_is_kept():
    assert probe(2, PJRT_NPROC="2") == {"eigen": 2, "env": "2", "info": 2}
    assert probe(2, NPROC="3") == {"eigen": 3, "env": None, "info": 3}


@needs_proc
def test_a_trainer_widens_the_pool_back_unless_the_user_sized_it():
    # mjxrunner train calls widen() before JAX runs: its updates are matrix products
    assert probe(2, widen=True) == {"eigen": 2, "env": None, "info": 2}
    assert probe(2, widen=True, PJRT_NPROC="1") == {"eigen": 1, "env": "1", "info": 1}


@needs_proc
def test_too_late_once_jax_started():
    assert probe(2, jax_first=True) == {
        "eigen": 2 if len(os.sched_getaffinity(0)) > 1 else 1,
        "env": None,
        "info": None,
    }


@pytest.mark.parametrize(
    ("cpus", "env", "started", "cpu_only", "threads", "written"),
    [
        (2, {}, False, True, 1, "1"),
        (1, {}, False, True, 1, "1"),
        (4, {}, False, True, 4, None),  # not measured there: XLA's default
        (2, {}, False, False, 2, None),  # an accelerator's client reads it too
        (2, {"PJRT_NPROC": "3"}, False, True, 3, "3"),  # the user's
        (2, {"NPROC": "2"}, False, True, 2, None),  # XLA reads NPROC after PJRT_NPROC
        (2, {"PJRT_NPROC": "x", "NPROC": "2"}, False, True, 2, "x"),  # as XLA: no number
        (2, {}, True, True, None, None),  # too late: XLA read its setting already
    ],
)
def test_install_respects_the_users_choice(
    monkeypatch, cpus, env, started, cpu_only, threads, written
):
    for name in cpu_pool.ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cpu_pool, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(cpu_pool, "cpu_only", lambda: cpu_only)
    monkeypatch.setattr(cpu_pool.xla_bridge, "backends_are_initialized", lambda: started)
    monkeypatch.setattr(cpu_pool, "_threads", cpu_pool._threads)  # restored afterwards
    assert cpu_pool.install() == threads
    assert cpu_pool.threads() == threads
    assert os.environ.get("PJRT_NPROC") == written


@pytest.fixture
def set_platforms():
    """``jax.config.update("jax_platforms", ...)``, restored afterwards (a setting
    read only when backends start: this process's have)."""
    before = cpu_pool.jax.config.jax_platforms
    yield lambda value: cpu_pool.jax.config.update("jax_platforms", value)
    cpu_pool.jax.config.update("jax_platforms", before)


def test_cpu_only_reads_jax_platforms_and_the_installed_plugins(
    monkeypatch, tmp_path, set_platforms
):
    set_platforms(None)
    monkeypatch.setattr(cpu_pool.xla_bridge, "jax_plugins", None)
    monkeypatch.setattr(cpu_pool.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(cpu_pool.importlib.util, "find_spec", lambda name: None)
    assert cpu_pool.cpu_only()  # nothing but XLA:CPU to start

    (tmp_path / "xla_cuda.py").write_text("")  # a plugin under the jax_plugins namespace
    monkeypatch.setattr(
        cpu_pool.xla_bridge, "jax_plugins", SimpleNamespace(__path__=[str(tmp_path)])
    )
    assert not cpu_pool.cpu_only()
    set_platforms("cpu")  # the user's choice wins
    assert cpu_pool.cpu_only()
    set_platforms("cuda,cpu")
    assert not cpu_pool.cpu_only()

    set_platforms(None)
    monkeypatch.setattr(cpu_pool.xla_bridge, "jax_plugins", None)
    monkeypatch.setattr(cpu_pool.metadata, "entry_points", lambda group: ["jax_cuda12_plugin"])
    assert not cpu_pool.cpu_only()  # a plugin advertised by its package
    monkeypatch.setattr(cpu_pool.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(cpu_pool.importlib.util, "find_spec", lambda name: name == "libtpu")
    assert not cpu_pool.cpu_only()  # a TPU


@needs_proc
def test_mjxrunner_train_runs_its_updates_on_a_thread_per_cpu(tmp_path):
    """The command line's train widens the pool before anything starts JAX (its
    default impl asks JAX for the backend): the run's record says so."""
    clean = {k: v for k, v in os.environ.items() if k not in cpu_pool.ENV}
    run = tmp_path / "run"
    script = (
        "import os, sys; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2]); "
        "from mjxrunner.tools import cli; sys.exit(cli.main(sys.argv[1:]))"
    )
    args = ["train", "cartpole_balance", "--out", str(run), "--steps", "64", "--num-envs", "8",
            "--rollout-steps", "8", "--no-progress", "--no-tensorboard"]  # fmt: skip
    subprocess.run([sys.executable, "-c", script, *args], env=clean, check=True,
                   capture_output=True)  # fmt: skip
    threads = json.loads((run / "run.json").read_text())["backend"]["xla_cpu_threads"]
    assert threads == min(2, len(os.sched_getaffinity(0)))
