"""``mjxrunner train`` -> ``play --video`` -> ``export --onnx`` -> ``sim2sim`` on
cartpole balance, through the command line's own ``main``; resume bit for bit; the
ONNX graphs against the JAX functions they were written from; bad input.

The run is small (impl c, 32 worlds, ~61 k env steps, ~15 s here): its
deterministic policy holds the pole for the whole 500-step episode on the seeds
tried, where a uniformly random policy drops it after ~66 steps. The test asks for
three times the random return, in ``play`` and in ``sim2sim``, and for the two to
agree within noise (the command's own rule).
"""

import ast
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import imageio.v3 as iio
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import onnxruntime as ort
import pytest

from mjxrunner import tasks
from mjxrunner.engine import models
from mjxrunner.rl import env as E
from mjxrunner.tools import cli
from mjxrunner.tools.train import deploy, export, onnx_graph, play, ppo, run_dir, sim2sim, trainer

TASK = "cartpole_balance"
TRAIN = ["--impl", "c", "--num-threads", "1", "--num-envs", "32", "--no-progress"]


def main(*argv, capsys=None) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr() if capsys is not None else None
    return code, (out.out + out.err) if out is not None else ""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trained run, played with a video and exported: ``(folder, files)``."""
    folder = tmp_path_factory.mktemp("train") / "run"
    assert cli.main(["train", TASK, "--out", str(folder), "--steps", "60000", *TRAIN]) == 0
    video = folder.parent / "play.gif"
    assert cli.main(["play", str(folder), "--episodes", "8", "--video", str(video)]) == 0
    policy = folder.parent / "policy.onnx"
    assert cli.main(["export", str(folder), "--onnx", str(policy)]) == 0
    return folder, {"video": video, "policy": policy}


@pytest.fixture(scope="module")
def random_return():
    config = ppo.PPOConfig(task=TASK, num_envs=16, impl="c", num_threads=1)
    return ppo.evaluate_random(config, jax.random.key(3), 400)


def test_the_run_folder_holds_what_continuing_and_playing_need(run):
    folder, _ = run
    record = run_dir.load_record(folder, task=TASK)
    assert record["updates_done"] == record["config"]["num_updates"] == 60
    assert record["observation"]["size"] == 5 and record["action"]["low"] == [-1.0]
    assert record["versions"]["mujoco"] and record["backend"]["impl"] == "c"
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [x["update"] for x in lines] == list(range(1, 61))
    assert list((folder / "tb").glob("events.out.tfevents.*"))  # TensorBoard's log


def test_play_and_sim2sim_beat_random_and_agree(run, random_return, capsys):
    folder, files = run
    played = json.loads((folder / "play.json").read_text())
    code, out = main("sim2sim", files["policy"], "--episodes", "8", "--json", capsys=capsys)
    native = json.loads(out.strip().splitlines()[-1])
    print(f"random {random_return:.1f}, play {played['mean_return']:.1f}, "
          f"sim2sim {native['mean_return']:.1f}")  # fmt: skip
    assert 5 < random_return < 100
    assert played["mean_return"] > 3 * random_return
    assert native["mean_return"] > 3 * random_return
    assert code == 0 and native["agrees"] is True
    assert native["play"]["returns"] == played["returns"]  # the export carries play's record


def test_the_video_shows_the_moving_scene(run):
    _, files = run
    frames = iio.imread(files["video"])
    assert frames.ndim == 4 and frames.shape[0] > 10 and frames.shape[-1] == 3
    assert frames.std() > 10  # not blank
    assert np.abs(frames[-1].astype(int) - frames[0].astype(int)).mean() > 0.1  # it moves


def test_the_onnx_files_compute_what_jax_does(run):
    folder, files = run
    _, config, params, _ = play.load_policy(folder)
    env = play.nominal_env(config, 4)
    state = env.step(E.reset(env, jax.random.key(5)), jnp.full((4, 1), 0.3))
    obs = np.asarray(state.obs)
    policy = ort.InferenceSession(str(files["policy"]))
    observer = ort.InferenceSession(str(deploy.observer_path(files["policy"])))
    data = state.runner.data
    for w in range(4):
        feeds = {"qpos": np.asarray(data.qpos[w]), "qvel": np.asarray(data.qvel[w])}
        np.testing.assert_allclose(observer.run(None, feeds)[0][0], obs[w], atol=1e-6)
        action = policy.run(None, {"obs": obs[w : w + 1]})[0][0]
        want = ppo.act(params, obs[w], env.low, env.high)
        np.testing.assert_allclose(action, want, atol=1e-5)
    meta = deploy.Policy(files["policy"]).meta
    assert meta["task"] == TASK and meta["substeps"] == 1 and meta["control_dt"] == 0.01
    assert [x["field"] for x in meta["observer"]["inputs"]] == ["qpos", "qvel"]


def test_the_normalizer_is_inside_the_exported_policy(tmp_path):
    folder = tmp_path / "norm"
    config = ppo.PPOConfig(task=TASK, num_envs=8, rollout_steps=8, normalize_obs=True,
                           impl="c", num_threads=1)  # fmt: skip
    config, chunk = trainer.plan(config, 8 * 8 * 2, 2)
    trainer.train(config, folder, chunk=chunk, tensorboard=False, progress=False)
    meta = export.export(folder, tmp_path / "p.onnx")
    assert meta["normalizer_inside"] is True
    _, _, params, obs_norm = play.load_policy(folder)
    assert float(obs_norm.count) > 0 and not np.allclose(obs_norm.var, 1.0)
    env = play.nominal_env(config, 1)
    raw = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "p.onnx"))
    for x in raw:
        got = session.run(None, {"obs": x[None]})[0][0]
        normalized = (x - obs_norm.mean) / np.sqrt(obs_norm.var + env.normalize.eps)
        want = ppo.act(params, jnp.asarray(normalized, jnp.float32), env.low, env.high)
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_resume_continues_bit_for_bit(tmp_path):
    config = ppo.PPOConfig(task=TASK, num_envs=4, rollout_steps=8, impl="c", num_threads=1)
    config, chunk = trainer.plan(config, 4 * 8 * 6, 2)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    quiet = {"tensorboard": False, "progress": False}
    trainer.train(config, whole, chunk=chunk, seed=7, **quiet)
    stopped = trainer.train(config, parts, chunk=chunk, seed=7, stop_after=2, **quiet)
    assert stopped["updates_done"] == 2
    code = cli.main(["train", "--resume", str(parts), "--no-progress", "--no-tensorboard"])
    assert code == 0
    with np.load(whole / run_dir.CHECKPOINT) as a, np.load(parts / run_dir.CHECKPOINT) as b:
        assert a.files == b.files
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])
    assert (whole / "metrics.jsonl").read_text().count("\n") == 6
    rows = lambda f: [{k: v for k, v in json.loads(x).items() if k != "wall_s"}  # noqa: E731
                      for x in (f / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    assert json.dumps(rows(whole)) == json.dumps(rows(parts))


def test_the_deploy_loop_runs_without_jax(run, tmp_path):
    """deploy.py imports NumPy, MuJoCo and onnxruntime only, and runs as a script."""
    path = Path(deploy.__file__)
    tree = ast.parse(path.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}  # fmt: skip
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}  # fmt: skip
    assert imported <= {"__future__", "argparse", "json", "os", "sys", "pathlib", "mujoco",
                        "numpy", "onnxruntime"}, imported  # fmt: skip
    _, files = run
    policy = deploy.Policy(files["policy"])
    env, starts, _ = sim2sim.starts(TASK, 2, seed=1)
    np.savez(tmp_path / "starts.npz", **starts)
    scene = tmp_path / "scene.xml"
    import mujoco

    mujoco.mj_saveLastXML(str(scene), env.host.mj_model)
    out = subprocess.run(
        [sys.executable, str(path), str(files["policy"]), str(scene), "--starts",
         str(tmp_path / "starts.npz"), "--steps", "50", "--out", str(tmp_path / "t.npz")],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"episodes": 2, "jax_loaded": False}
    fields = [("qpos", (2,)), ("qvel", (2,))]
    with np.load(tmp_path / "t.npz") as f:
        for i in range(2):
            here, _ = deploy.run_episode(
                policy, env.host.mj_model, {k: v[i] for k, v in starts.items()}, 50, fields
            )
            np.testing.assert_array_equal(f["qpos"][i], here["qpos"])


# --- bad input: a clear error, nothing written -------------------------------------------


def test_unknown_task_or_trainer_writes_nothing(tmp_path, capsys):
    code, out = main("train", "no_such_task", "--out", tmp_path / "a", *TRAIN, capsys=capsys)
    assert code == 2 and "unknown task 'no_such_task'" in out
    with pytest.raises(SystemExit) as e:
        cli.main(["train", TASK, "--out", str(tmp_path / "b"), "--trainer", "sac"])
    assert e.value.code == 2 and "invalid choice: 'sac'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_missing_truncated_or_foreign_run_is_refused(run, tmp_path, capsys):
    folder, _ = run
    code, out = main("play", tmp_path / "nowhere", capsys=capsys)
    assert code == 2 and "does not exist" in out
    (tmp_path / "empty").mkdir()
    code, out = main("export", tmp_path / "empty", "--onnx", tmp_path / "x.onnx", capsys=capsys)
    assert code == 2 and "run.json is missing" in out and not (tmp_path / "x.onnx").exists()
    code, out = main("train", "cartpole_swingup", "--resume", folder, capsys=capsys)
    assert code == 2 and "trained task 'cartpole_balance', not 'cartpole_swingup'" in out
    code, out = main("train", "--resume", folder, "--num-envs", "8", capsys=capsys)
    assert code == 2 and "drop ['--num-envs']" in out
    # a truncated checkpoint and a truncated record, in a copy of the run
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    data = (copy / run_dir.CHECKPOINT).read_bytes()
    (copy / run_dir.CHECKPOINT).write_bytes(data[: len(data) // 2])
    code, out = main("play", copy, capsys=capsys)
    assert code == 2 and "missing or truncated" in out
    text = (copy / run_dir.RECORD).read_text()
    (copy / run_dir.RECORD).write_text(text[: len(text) // 2])
    code, out = main("play", copy, capsys=capsys)
    assert code == 2 and "not a run record" in out


def test_an_existing_run_is_never_overwritten(run, capsys):
    folder, _ = run
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    code, out = main("train", TASK, "--out", folder, *TRAIN, capsys=capsys)
    assert code == 2 and "already holds a run" in out
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before


def test_onnx_without_our_metadata_is_refused(tmp_path, capsys):
    model = onnx_graph.to_onnx(lambda x: x * 2.0, [np.zeros((1, 5), np.float32)], ["obs"],
                               ["action"], "plain")  # fmt: skip
    plain = tmp_path / "plain.onnx"
    plain.write_bytes(model.SerializeToString())
    code, out = main("sim2sim", plain, capsys=capsys)
    assert code == 2 and "has no 'mjxrunner' metadata" in out
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    code, out = main("sim2sim", tmp_path / "junk.onnx", capsys=capsys)
    assert code == 2 and "is not an ONNX model" in out
    code, out = main("sim2sim", tmp_path / "none.onnx", capsys=capsys)
    assert code == 2 and "no ONNX file" in out


def test_export_refuses_a_bad_file_name_and_names_what_it_cannot_convert(run, tmp_path):
    folder, _ = run
    with pytest.raises(ValueError, match=r"must end in \.onnx"):
        export.export(folder, tmp_path / "policy.pt")
    assert list(tmp_path.iterdir()) == []
    sort = lambda x: jnp.sort(x)  # noqa: E731 - no rule for sort
    with pytest.raises(onnx_graph.Unsupported, match="'sort'"):
        onnx_graph.to_onnx(sort, [np.zeros(3, np.float32)], ["x"], ["y"], "s")


# --- a task with per-world state and observation history: the Go1 joystick --------------


@pytest.fixture(scope="module")
def go1_export(tmp_path_factory):
    """An untrained Go1 joystick run (one update of 2 worlds, the symmetric policy),
    played and exported."""
    folder = tmp_path_factory.mktemp("go1") / "run"
    config = ppo.PPOConfig(task="go1_joystick", num_envs=2, rollout_steps=4, minibatches=2,
                           normalize_obs=True, symmetric=True, impl="c",
                           num_threads=1)  # fmt: skip
    config, chunk = trainer.plan(config, 8, 1)
    trainer.train(config, folder, chunk=chunk, tensorboard=False, progress=False)
    played = play.play(folder, episodes=3)
    assert cli.main(["export", str(folder), "--onnx", str(folder.parent / "go1.onnx")]) == 0
    return folder, played, deploy.Policy(folder.parent / "go1.onnx").meta


def test_the_go1_deploy_loop_keeps_command_last_action_and_history(go1_export):
    folder, played, meta = go1_export
    inputs = meta["observer"]["inputs"]
    assert {x["info"]: x["source"] for x in inputs if "info" in x} == {
        "['command']": "held",
        "['last_action']": "last_action",
    }
    history = {t["term"]: t["history"] for t in meta["observer"]["terms"]}
    assert history["joint_pos"] == history["joint_vel"] == 3 and history["command"] == 1
    assert meta["normalizer_inside"] is True
    native = sim2sim.sim2sim(folder.parent / "go1.onnx", episodes=3)
    # the same starts, commands and deterministic policy: the same episodes, up to the
    # float32 rounding of the graphs against the env's own float32 observation
    assert native["lengths"] == played["lengths"]
    np.testing.assert_allclose(native["returns"], played["returns"], rtol=1e-3, atol=1e-4)
    assert native["agrees"] is True


def test_the_deploy_loop_is_given_a_changing_command(go1_export):
    folder, _, _ = go1_export
    policy = deploy.Policy(folder.parent / "go1.onnx")
    with pytest.raises(ValueError, match="after reset"):
        policy.give({"['command']": np.zeros(3)})
    policy.reset({"['command']": np.zeros(3)})
    with pytest.raises(ValueError, match=r"no task state \["):
        policy.give({"['gait']": np.zeros(2)})
    m = models.load("go1_cpu")
    d = mujoco.MjData(m)
    d.qpos[:] = m.key_qpos[0]
    mujoco.mj_forward(m, d)
    standing = policy.observe(d)
    policy.give({"['command']": np.array([0.5, 0.0, 0.0])})
    walking = policy.observe(d)
    assert not np.allclose(standing, walking)  # the new command, seen at the next step


def test_a_redrawn_command_is_given_to_the_deploy_loop_as_the_scorer_draws_it():
    env = E.make("g1_joystick", 1, impl="c", num_threads=1)
    sources = export.info_sources(env)
    assert sources["['command']"] == "given" and sources["['steps']"] == "given"
    assert sources["['last_action']"] == "last_action" and sources["['contact']"] == "state"
    policy = types.SimpleNamespace(inputs=[{"info": "['command']", "source": "given"}])
    schedule = sim2sim.given_schedule(env, policy)
    info = export.restart_info(env)
    key = jax.random.key(4)
    commands = np.asarray(schedule(info, key)["['command']"])
    assert commands.shape == (env.task.max_episode_steps, 3)
    np.testing.assert_array_equal(commands[:250], np.broadcast_to(info["command"], (250, 3)))
    changes = np.flatnonzero(np.any(np.diff(commands, axis=0) != 0, axis=1)) + 1
    assert set(changes) <= {250, 500, 750} and len(changes) >= 2
    # the scorer carries the same commands: step 249's update, under its key, draws row 250
    keys = jax.random.split(key, env.task.max_episode_steps)
    steps = {**info, "steps": jnp.int32(249), "command": jnp.asarray(commands[249])}
    data = env.start
    after = env.task.update_info(env.model.tree, data, jnp.zeros(12), data, steps, keys[249])
    np.testing.assert_array_equal(after["command"], commands[250])


def test_play_holds_given_commands_and_measures_the_base_against_them(go1_export):
    folder, _, _ = go1_export
    before = (folder / "play.json").read_text()
    r = play.play(folder, episodes=2, commands=[[0.5, 0.0, 0.0], [0.0, 0.0, 1.0]],
                  command_every=60)  # fmt: skip
    assert [x["command"] for x in r["tracking"]] == [[0.5, 0.0, 0.0], [0.0, 0.0, 1.0]]
    # the first second (50 steps) of a command is not counted: 10 of its 60 steps are
    lived = min(r["lengths"])
    assert r["tracking"][0]["samples"] <= 2 * 10 and 0.0 <= r["falls"] <= 1.0
    assert all(np.isfinite(x["achieved"]).all() for x in r["tracking"])
    assert (folder / "play.json").read_text() == before  # what sim2sim compares with
    assert json.loads((folder / "play_commands.json").read_text())["tracking"] == r["tracking"]
    # the policy saw the command: the observation of the commanded env holds it
    task = play.commanded(tasks.get("go1_joystick"), np.array([[0.5, 0.0, 0.0]]), 60)
    env = E.make(task, 2, impl="c", num_threads=1)
    state = E.reset(env, jax.random.key(0))
    np.testing.assert_allclose(state.obs["command"], [[0.5, 0, 0]] * 2)
    np.testing.assert_allclose(env.step(state, jnp.zeros((2, 12))).info["command"],
                               [[0.5, 0, 0]] * 2)  # fmt: skip
    assert lived >= 1


@pytest.mark.parametrize(
    ("commands", "every", "error", "message"),
    [
        ([[np.nan, 0, 0]], 10, ValueError, "commands must be finite"),
        ([[0.5, 0, 0]], 0, ValueError, "command_every must be >= 1, got 0"),
        ([[0.5, 0, 0]], 2.5, TypeError, "command_every must be an int, got float"),
        ([[0.5, 0]], 10, ValueError, r"takes commands of shape \(3,\), got \(2,\)"),
    ],
)
def test_play_refuses_commands_it_cannot_hold(go1_export, commands, every, error, message):
    folder, _, _ = go1_export
    with pytest.raises(error, match=message):
        play.play(folder, episodes=1, commands=commands, command_every=every)


def test_a_task_without_a_command_cannot_be_commanded():
    with pytest.raises(ValueError, match="'cartpole_balance' keeps no info"):
        play.commanded(tasks.get("cartpole_balance"), np.zeros((1, 3)), 10)


def test_observed_state_that_follows_the_physics_is_not_exported(run):
    from mjxrunner.tasks import cartpole

    task = cartpole.BALANCE.replace(
        name="cartpole_with_memory",
        observation=lambda m, d, info: jnp.concatenate([d.qpos, info["seen"]]),
        reward=lambda m, d, a, nd, info: cartpole.balance_reward(m, d, a, nd),
        terminated=lambda m, d, info: cartpole.balance_terminated(m, d),
        initial_info=lambda m, d, key: {"seen": jnp.zeros(1)},
        update_info=lambda m, d, a, nd, info, key: {"seen": nd.qvel[:1]},
    )
    env = E.make(task, 1, impl="c", num_threads=1)
    with pytest.raises(ValueError, match=r"observes info\['seen'\], which update_info changes"):
        export.observer_graph(env)


def test_the_initial_action_noise_is_an_option_of_the_own_ppo(tmp_path, capsys):
    folder = tmp_path / "quiet"
    code, _ = main("train", TASK, "--out", folder, "--init-log-std", "-2", "--steps", "1024",
                   "--save-every", "1", "--stop-after", "1", *TRAIN, capsys=capsys)  # fmt: skip
    assert code == 0
    assert run_dir.load_record(folder)["config"]["init_log_std"] == -2.0
    code, out = main("train", TASK, "--out", tmp_path / "r", "--trainer", "rsl_rl",
                     "--init-log-std", "-2", capsys=capsys)  # fmt: skip
    assert code == 2 and "--init-log-std" in out and not (tmp_path / "r").exists()


def test_weights_and_biases_logs_the_same_metrics_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    folder = tmp_path / "wb"
    code, _ = main("train", TASK, "--out", folder, "--wandb", "mjxrunner-test", "--steps",
                   "2048", "--save-every", "1", *TRAIN, capsys=capsys)  # fmt: skip
    assert code == 0
    runs = list((folder / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and runs[0].name.endswith((folder / "wandb_id").read_text())
    history = [p for p in runs[0].rglob("*.wandb")]
    assert history and history[0].stat().st_size > 0  # the logged rows
