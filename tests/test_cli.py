"""The command line: the main job, info, models, and bad arguments."""

import json

import jax
import pytest
from conftest import slider_xml

from mjxrunner import MultiEnvRunner, tasks
from mjxrunner.tools import bench, cli


def test_run_prints_a_summary(capsys):
    argv = ["run", "pendulum", "--num-envs", "4", "--steps", "5", "--json"]
    assert cli.main([*argv, "--impl", "jax"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_envs"] == 4 and out["steps"] == 5
    assert out["env_steps_per_s"] > 0 and out["compile_s"] > 0
    assert out["backend"]["impl"] == "jax"


@pytest.mark.parametrize("spelling", ["c", "cpp"])
def test_run_on_impl_c_with_its_threads(spelling, capsys):
    argv = ["run", "pendulum", "--num-envs", "4", "--steps", "5", "--json", "--impl", spelling]
    assert cli.main([*argv, "--num-threads", "1"]) == 0
    info = json.loads(capsys.readouterr().out)["backend"]
    assert info["impl"] == "c" and info["num_threads"] == 1
    assert info["physics_dtype"] == "float64"


@pytest.mark.parametrize(("platform", "impl"), [("cpu", "c"), ("gpu", "jax"), ("tpu", "jax")])
def test_the_default_impl_follows_the_machine(platform, impl, monkeypatch, capsys):
    # No accelerator: MuJoCo's C engine on the CPU's threads; a GPU or TPU: MJX.
    monkeypatch.setattr(jax, "default_backend", lambda: platform)
    assert cli.default_impl() == impl
    if platform == "cpu":  # the machine the suite runs on
        argv = ["run", "pendulum", "--num-envs", "2", "--steps", "2", "--json"]
        assert cli.main(argv) == 0
        assert json.loads(capsys.readouterr().out)["backend"]["impl"] == "c"


def test_threads_are_for_impl_c_only(capsys):
    argv = ["run", "pendulum", "--steps", "1", "--impl", "jax", "--num-threads", "2"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mjxrunner: error:") and "--num-threads" in err and "'jax'" in err


def test_run_resets_worlds_the_task_says_ended(capsys):
    # The time limit is out of reach, so only the task's termination ends episodes.
    argv = ["run", "cartpole", "--num-envs", "4", "--steps", "100", "--json"]
    assert cli.main([*argv, "--max-episode-steps", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "cartpole_balance" and out["max_episode_steps"] == 1000
    assert out["episodes_finished"] > 0  # random pushes tip the pole past the task's angle


def test_run_takes_the_time_limit_from_the_task(capsys):
    argv = ["run", "cartpole", "--num-envs", "4", "--steps", "20", "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "cartpole_balance"
    assert out["max_episode_steps"] == tasks.get("cartpole_balance").max_episode_steps


def test_run_without_a_task_has_only_the_time_limit(tmp_path, capsys):
    scene = tmp_path / "slider.xml"
    scene.write_text(slider_xml(2))
    argv = ["run", str(scene), "--num-envs", "4", "--steps", "20", "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] is None and out["max_episode_steps"] == cli.DEFAULT_MAX_EPISODE_STEPS
    assert out["episodes_finished"] == 0
    assert cli.main([*argv[:-1], "--max-episode-steps", "5"]) == 0  # the text summary
    # Every world ends every 5 steps: 4 worlds x 4 episodes.
    assert "episodes finished: 16 (time limit 5 steps, no task)" in capsys.readouterr().out


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
        ["run", "cartpole", "--impl", "c++"],
        ["run", "cartpole", "--num-threads", "0"],
        ["bench", "cartpole", "--num-threads", "two"],
        ["run", "cartpole", "--max-episode-steps", "0"],
        ["run"],
        ["nonsense"],
        ["run", "cartpole", "--num-envs"],
        ["bench"],
        ["bench", "cartpole", "--num-envs", "0"],
        ["bench", "cartpole", "--num-envs", "64", "x"],
        ["bench", "cartpole", "--steps", "many"],
        ["bench", "cartpole", "--variants", "raw,fastest"],
        ["bench", "cartpole", "--impl", "cuda"],
        ["bench", "cartpole", "--host-devices", "0"],
        ["info", "--bogus"],
        ["models", "extra"],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err
    assert len(err.strip().splitlines()) == 1, err  # one line, no usage dump


@pytest.mark.parametrize("command", [[], ["run"], ["bench"], ["info"], ["models"]])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([*command, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: mjxrunner {' '.join(command)}".strip())


def test_bench_prints_a_table_and_writes_json_and_plot(tmp_path, capsys):
    scene = tmp_path / "slider.xml"
    scene.write_text(slider_xml(4))
    out, png = tmp_path / "r" / "bench.json", tmp_path / "bench.png"
    argv = ["bench", str(scene), "--num-envs", "3", "--steps", "2", "--repeats", "2"]
    argv += ["--variants", "raw,native,sharded", "--no-progress"]
    assert cli.main([*argv, "--json", "--out", str(out), "--plot", str(png)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    bench.validate(printed)
    assert printed["config"]["model"] == "slider"
    assert printed["config"]["impl"] == cli.default_impl()  # c where there is no GPU or TPU
    rows = {r["variant"]: r for r in printed["results"]}
    assert rows["native"]["ratio_to_raw"] == pytest.approx(
        rows["native"]["steps_per_s"] / rows["raw"]["steps_per_s"]
    )
    assert rows["sharded"]["status"] == "unavailable"
    assert png.read_bytes()[:4] == b"\x89PNG"

    assert cli.main(argv) == 0
    table = capsys.readouterr().out
    assert "steps/s" in table and "x native" in table and "unavailable" in table


def test_bench_takes_impl_c_and_its_threads(tmp_path, capsys):
    scene = tmp_path / "slider.xml"
    scene.write_text(slider_xml(4))
    argv = ["bench", str(scene), "--num-envs", "3", "--steps", "2", "--repeats", "1"]
    argv += ["--variants", "rollout,native_loop", "--no-progress", "--json"]
    assert cli.main([*argv, "--impl", "cpp", "--num-threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    bench.validate(report)
    assert report["backend"]["impl"] == "c" and report["backend"]["num_threads"] == 1
    assert [(r["variant"], r["impl"]) for r in report["results"]] == [
        ("rollout", "c"),
        ("native_loop", "mujoco"),
    ]
    # The floor's threads may be set for the MJX impls too.
    assert cli.main([*argv, "--impl", "jax", "--num-threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["host"]["native_threads"] == 1


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["bench", "pendulum", "--device", "tpu"], "tpu"),
        (["bench", "no_such_scene"], "known models"),
        (["run", "pendulum", "--seed", "-1"], "seed"),
        # conftest starts JAX with 2 host devices: 3 can no longer be asked for.
        (["bench", "pendulum", "--num-envs", "2", "--host-devices", "3"], "3 host devices"),
    ],
)
def test_runtime_errors_are_one_line_exit_2(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mjxrunner: error:") and needle in err
    assert "\n" not in err


def test_run_writes_a_video(tmp_path, capsys):
    video = tmp_path / "clip.gif"
    argv = ["run", "pendulum", "--num-envs", "4", "--steps", "5", "--video", str(video), "--json"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["video"] == str(video)
    assert video.read_bytes()[:3] == b"GIF"


def test_video_path_is_checked_before_running(tmp_path, capsys):
    assert cli.main(["run", "pendulum", "--video", str(tmp_path / "clip.avi")]) == 2
    assert ".mp4 or .gif" in capsys.readouterr().err


def test_video_without_rendering_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delattr(MultiEnvRunner, "render_video", raising=False)
    video = tmp_path / "out.mp4"
    assert cli.main(["run", "pendulum", "--steps", "1", "--video", str(video)]) == 2
    assert "render_video" in capsys.readouterr().err
    assert not video.exists()


def test_unknown_model_is_a_one_line_error(capsys):
    assert cli.main(["run", "nope", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mjxrunner: error: unknown model") or "known models" in err
    assert "\n" not in err
