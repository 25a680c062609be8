"""float64 end to end (impl "jax"), in a process of its own: ``jax_enable_x64`` is
global and the rest of the suite runs in float32. What runs and its tolerances are
in x64_script.py; conftest starts it when collection ends, so it compiles beside
the other tests."""

import conftest


@conftest.background("test_x64")
def launch(out):
    return [conftest.start("x64_script.py", str(out), out=out)]


def test_float64_contact_scenes_runner_env_and_checkpoints():
    [(returncode, log)], _ = conftest.finished("test_x64")
    assert returncode == 0, log[-4000:]
    assert "x64: all passed" in log
    print(log)
