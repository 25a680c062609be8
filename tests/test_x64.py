"""float64 end to end (impl "jax"), in a process of its own: ``jax_enable_x64`` is
global and the rest of the suite runs in float32. What runs and its tolerances are
in x64_script.py."""

import os
import subprocess
import sys
from pathlib import Path

import jax

HERE = Path(__file__).parent


def test_float64_contact_scenes_runner_env_and_checkpoints(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "MJXRUNNER_JAX_CACHE": jax.config.jax_compilation_cache_dir or "",
    }
    proc = subprocess.run(
        [sys.executable, str(HERE / "x64_script.py"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "x64: all passed" in proc.stdout
    print(proc.stdout)
