"""The command line and the Gymnasium door keep JAX's compiled programs in the
user's cache folder, unless the user chose a folder or turned it off."""

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import jax
    from mjxrunner.doors.gym import MjxVectorEnv
    MjxVectorEnv("cartpole_balance", 2, impl="jax")
    print("DIR", jax.config.jax_compilation_cache_dir)
    """
)


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, "{tmp}/mine/jax"),  # on, in mjxrunner's cache folder
        ({"MJXRUNNER_COMPILE_CACHE": "off"}, "None"),  # turned off
        ({"JAX_COMPILATION_CACHE_DIR": "{tmp}/theirs"}, "{tmp}/theirs"),  # the user's kept
    ],
)
def test_the_gym_door_uses_the_compile_cache(tmp_path, extra, expected):
    # this suite's own cache settings are left out: the probe is a fresh user. It
    # builds its door on impl "jax", which compiles nothing big before the setting:
    # impl "c" would first build its host library into this fresh cache (8 s each)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JAX_") and k != "MJXRUNNER_COMPILE_CACHE"
    }
    env.update(MJXRUNNER_CACHE_DIR=str(tmp_path / "mine"), JAX_PLATFORMS="cpu")
    env.update({k: v.replace("{tmp}", str(tmp_path)) for k, v in extra.items()})
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("DIR ")[-1].strip() == expected.replace("{tmp}", str(tmp_path))
