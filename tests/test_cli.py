"""The command line: the main job, info, models, and bad arguments."""

import json

import pytest

from mjxrunner import cli


def test_run_prints_a_summary(capsys):
    assert cli.main(["run", "pendulum", "--num-envs", "4", "--steps", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_envs"] == 4 and out["steps"] == 5
    assert out["env_steps_per_s"] > 0 and out["compile_s"] > 0
    assert out["backend"]["impl"] == "jax"


def test_run_resets_fallen_cartpoles(capsys):
    assert cli.main(["run", "cartpole", "--num-envs", "4", "--steps", "200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes_finished"] > 0  # random pushes topple the pole within 200 steps


def test_info_and_models(capsys):
    assert cli.main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["versions"]["mujoco"] and "jax_enable_x64" in info
    assert cli.main(["models"]) == 0
    assert {"cartpole", "pendulum"} <= set(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "cartpole", "--num-envs", "0"],
        ["run", "cartpole", "--impl", "cpp"],
        ["run"],
        ["nonsense"],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_unknown_model_is_a_one_line_error(capsys):
    assert cli.main(["run", "nope", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mjxrunner: error: unknown model") or "known models" in err
    assert "\n" not in err
