"""``mjxrunner train --trainer rsl_rl`` and ``--trainer brax`` -> ``play`` -> ``export
--onnx`` -> ``sim2sim`` on cartpole balance, through the command line's own ``main``;
rsl_rl's resume; Brax's refused resume; runs of one trainer refused by another.

Each trainer trains with its own package (rsl_rl's ``OnPolicyRunner``, Brax's
``ppo.train``) on its door, on impl c with one thread: rsl_rl 80 updates (~160 k
env steps), Brax 25 (~100 k), each some 10-20 s of training here. A uniformly random
policy drops the pole after ~66 steps; the test asks for three times that, in
``play`` and in ``sim2sim`` (plain MuJoCo and onnxruntime, the task's observer
graph), and for the two to agree (the command's own rule). On seeds 0-2, the
trained policies' mean returns over 8 episodes were 340 to 500 (of 500).
"""

import json
import shutil
import time

import jax
import numpy as np
import onnxruntime as ort
import pytest
import torch

from mjxrunner.tools import cli
from mjxrunner.tools.train import brax_trainer, deploy, ppo, rsl_rl_trainer, run_dir

TASK = "cartpole_balance"
ON_ONE_THREAD = ["--impl", "c", "--num-threads", "1", "--no-progress"]
SIZES = {  # env steps and one chunk of updates per run (Brax: one compiled epoch)
    "rsl_rl": ["--steps", "160000", "--save-every", "40"],
    "brax": ["--steps", "100000", "--save-every", "25"],
}
MODULES = {"rsl_rl": rsl_rl_trainer, "brax": brax_trainer}
METADATA_KEYS = {"format", "task", "observation", "action", "control_dt", "substeps",
                 "max_episode_steps", "default_qpos", "normalizer_inside", "observer", "play",
                 "run", "versions"}  # fmt: skip
"""What ``export.metadata`` writes for every run, the project's PPO's included."""


def main(*argv, capsys=None) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr() if capsys is not None else None
    return code, (out.out + out.err) if out is not None else ""


def files_of(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(trainer) -> (folder, policy.onnx, training seconds)``: a run trained,
    played and exported through the command line, made on first use."""
    made = {}

    def get(trainer: str):
        if trainer not in made:
            folder = tmp_path_factory.mktemp(trainer) / "run"
            start = time.perf_counter()
            argv = ["train", TASK, "--out", folder, "--trainer", trainer, *SIZES[trainer]]
            assert main(*argv, *ON_ONE_THREAD)[0] == 0
            seconds = time.perf_counter() - start
            assert main("play", folder, "--episodes", "8")[0] == 0
            policy = folder.parent / "policy.onnx"
            assert main("export", folder, "--onnx", policy)[0] == 0
            made[trainer] = folder, policy, seconds
        return made[trainer]

    return get


@pytest.fixture(scope="module")
def random_return():
    config = ppo.PPOConfig(task=TASK, num_envs=16, impl="c", num_threads=1)
    return ppo.evaluate_random(config, jax.random.key(3), 400)


@pytest.mark.parametrize("trainer", ["rsl_rl", "brax"])
def test_play_and_sim2sim_beat_random_and_agree(runs, trainer, random_return, capsys):
    folder, policy, seconds = runs(trainer)
    played = json.loads((folder / "play.json").read_text())
    capsys.readouterr()  # what training printed
    code = cli.main(["sim2sim", str(policy), "--episodes", "8", "--json"])
    native = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    with capsys.disabled():
        print(f"\n{trainer}: trained in {seconds:.1f} s; random {random_return:.1f}, "
              f"play {played['mean_return']:.1f}, sim2sim {native['mean_return']:.1f}")  # fmt: skip
    assert 5 < random_return < 100
    assert played["mean_return"] > 3 * random_return
    assert native["mean_return"] > 3 * random_return
    assert code == 0 and native["agrees"] is True
    assert native["play"]["returns"] == played["returns"]  # the export carries play's record


@pytest.mark.parametrize("trainer", ["rsl_rl", "brax"])
def test_the_run_folder_holds_the_record_and_the_trainers_own_checkpoint(runs, trainer):
    folder, _, _ = runs(trainer)
    record = run_dir.load_record(folder, task=TASK)
    assert record["trainer"] == trainer and record["seed"] == 0
    updates = {"rsl_rl": 80, "brax": 25}[trainer]
    assert record["updates_done"] == record["config"]["num_updates"] == updates
    assert record["observation"] == {"size": 5, "layout": [{"term": "", "offset": 0, "size": 5}]}
    assert record["action"] == {"low": [-1.0], "high": [1.0]} and record["control_dt"] == 0.01
    assert record["versions"][trainer] and record["versions"]["mujoco"]
    assert record["config"]["impl"] == "c" and record["config"]["num_threads"] == 1
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [x["update"] for x in lines] == list(range(1, record["updates_done"] + 1))
    assert np.isfinite(lines[-1]["mean_return"])
    assert list((folder / "tb").glob("events.out.tfevents.*"))
    checkpoint = folder / record["checkpoint"]
    if trainer == "rsl_rl":  # rsl_rl's own file, as OnPolicyRunner.save writes it
        saved = torch.load(checkpoint, weights_only=False)
        assert saved["iter"] == updates
        assert {"actor_state_dict", "critic_state_dict", "optimizer_state_dict"} <= set(saved)
        assert "obs_normalizer._mean" in saved["actor_state_dict"]
    else:  # Brax's own checkpoint: normalizer, policy and value parameters
        from brax.training.agents.ppo import checkpoint as brax_checkpoint

        normalizer, policy, value = brax_checkpoint.load(checkpoint.resolve())
        assert np.asarray(normalizer.mean).shape == (5,) and policy and value
        assert checkpoint.name == f"{record['env_steps_done']:012d}"  # Brax's name: env steps


@pytest.mark.parametrize("trainer", ["rsl_rl", "brax"])
def test_the_onnx_policy_computes_what_play_runs(runs, trainer):
    folder, policy, _ = runs(trainer)
    record = run_dir.load_record(folder)
    act = MODULES[trainer].play_policy(folder, record)  # the policy play ran
    session = ort.InferenceSession(str(policy))
    assert [(x.name, x.shape) for x in session.get_inputs()] == [("obs", [1, 5])]
    assert [(x.name, x.shape) for x in session.get_outputs()] == [("action", [1, 1])]
    rng = np.random.default_rng(0)
    obs = np.concatenate([rng.normal(size=(6, 5)), 100 * rng.normal(size=(2, 5))])  # some saturate
    obs = obs.astype(np.float32)
    want = np.asarray(act(obs))
    got = np.concatenate([session.run(None, {"obs": x[None]})[0] for x in obs])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.all(np.abs(got) <= 1.0) and np.isclose(np.abs(got).max(), 1.0)  # clipped to bounds
    meta = deploy.Policy(policy).meta
    assert set(meta) == METADATA_KEYS
    assert meta["normalizer_inside"] is True  # the trainer's own normalizer
    assert meta["run"] == {k: record[k] for k in meta["run"]} and meta["run"]["trainer"] == trainer


def test_rsl_rl_resume_continues_the_update_count(tmp_path, capsys):
    """Stopped after 2 of 4 updates and resumed: rsl_rl's runner loads the checkpoint
    and continues at update 3 (not bit for bit: the worlds restart)."""
    folder = tmp_path / "run"
    small = ["--num-envs", "8", "--rollout-steps", "8", "--steps", "256", "--save-every", "2"]
    code, out = main("train", TASK, "--out", folder, "--trainer", "rsl_rl", *small,
                     "--stop-after", "2", *ON_ONE_THREAD, capsys=capsys)  # fmt: skip
    assert code == 0 and "2 of 4 updates" in out and "continue: mjxrunner train --resume" in out
    first = (folder / "model_2.pt").read_bytes()
    code, out = main("train", "--resume", folder, "--no-progress", capsys=capsys)
    assert code == 0 and "4 of 4 updates, 256 env steps" in out
    record = run_dir.load_record(folder)
    assert record["updates_done"] == 4 and record["checkpoint"] == "model_4.pt"
    assert torch.load(folder / "model_4.pt", weights_only=False)["iter"] == 4
    assert (folder / "model_2.pt").read_bytes() == first  # the old checkpoint is kept
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [x["update"] for x in lines] == [1, 2, 3, 4]


def test_brax_resume_and_stop_after_are_refused_writing_nothing(runs, tmp_path, capsys):
    folder, _, _ = runs("brax")
    before = files_of(folder)
    code, out = main("train", "--resume", folder, "--no-progress", capsys=capsys)
    assert code == 2 and "Brax's ppo.train cannot continue a run" in out and "--resume" in out
    assert files_of(folder) == before
    code, out = main("train", TASK, "--out", tmp_path / "new", "--trainer", "brax",
                     "--stop-after", "1", *ON_ONE_THREAD, capsys=capsys)  # fmt: skip
    assert code == 2 and "cannot stop early (--stop-after)" in out
    assert list(tmp_path.iterdir()) == []


def test_a_run_of_another_trainer_is_refused(runs, tmp_path, capsys):
    rsl, _, _ = runs("rsl_rl")
    brax, _, _ = runs("brax")
    code, out = main("train", "--resume", rsl, "--trainer", "brax", capsys=capsys)
    assert code == 2 and "was trained by 'rsl_rl', not 'brax'" in out
    with pytest.raises(run_dir.RunError, match="was trained by 'rsl_rl', not 'brax'"):
        brax_trainer.inference_fn(rsl)
    with pytest.raises(run_dir.RunError, match="was trained by 'brax', not 'rsl_rl'"):
        rsl_rl_trainer.resume(brax)
    # a record naming a trainer this mjxrunner does not know
    other = tmp_path / "other"
    shutil.copytree(rsl, other)
    record = json.loads((other / run_dir.RECORD).read_text())
    (other / run_dir.RECORD).write_text(json.dumps({**record, "trainer": "sb3"}))
    code, out = main("play", other, capsys=capsys)
    assert code == 2 and "trained by 'sb3'; this mjxrunner reads runs of ['ppo', 'rsl_rl'" in out


def test_a_damaged_or_missing_checkpoint_is_refused(runs, tmp_path, capsys):
    rsl, _, _ = runs("rsl_rl")
    copy = tmp_path / "rsl"
    shutil.copytree(rsl, copy)
    data = (copy / "model_80.pt").read_bytes()
    (copy / "model_80.pt").write_bytes(data[: len(data) // 2])
    code, out = main("play", copy, capsys=capsys)
    assert code == 2 and "model_80.pt' is truncated" in out
    brax, _, _ = runs("brax")
    copy = tmp_path / "brax"
    shutil.copytree(brax, copy)
    shutil.rmtree(copy / brax_trainer.CHECKPOINTS)
    code, out = main("export", copy, "--onnx", tmp_path / "p.onnx", capsys=capsys)
    assert code == 2 and "of the run is missing" in out and not (tmp_path / "p.onnx").exists()


def test_bad_input_is_refused_naming_what_was_expected(tmp_path, capsys):
    code, out = main("train", TASK, "--out", tmp_path / "a", "--trainer", "rsl_rl",
                     "--latency", "0", "1", *ON_ONE_THREAD, capsys=capsys)  # fmt: skip
    assert code == 2 and "['--latency'] are options of --trainer ppo" in out
    with pytest.raises(TypeError, match=r"config must be a rsl_rl_trainer\.Config, got PPOConfig"):
        rsl_rl_trainer.train(ppo.PPOConfig(task=TASK), tmp_path / "b")
    with pytest.raises(TypeError, match=r"config must be a brax_trainer\.Config, got PPOConfig"):
        brax_trainer.train(ppo.PPOConfig(task=TASK), tmp_path / "c")
    config = brax_trainer.Config(task="go1_joystick", num_updates=2, num_threads=1)
    with pytest.raises(ValueError, match="one observation vector; 'go1_joystick' observes"):
        brax_trainer.train(config, tmp_path / "d", chunk=1)
    assert list(tmp_path.iterdir()) == []
