"""The throughput harness: report layout, ratios, the measuring protocol, bad input.

Speed is never asserted here (timings belong to benchmarks/); one tiny sweep runs
every variant once to check what the report holds.
"""

import copy
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import jax
import mujoco
import numpy as np
import pytest
from conftest import load_benchmark, slider_xml

from mjxrunner import backend_info
from mjxrunner.engine import backend, cpu_fusion, native
from mjxrunner.tools import bench

ROOT = Path(__file__).resolve().parents[1]
N, STEPS, REPEATS = 3, 2, 2


@pytest.fixture(scope="module")
def report():
    # The slider scene of test_runner: same shapes, so compiled steps are shared.
    return bench.run(slider_xml(4), [N], STEPS, repeats=REPEATS, progress=False)


def _by_variant(report):
    return {r["variant"]: r for r in report["results"]}


def test_report_layout_survives_json(report):
    bench.validate(report)
    loaded = json.loads(bench.to_json(report))
    bench.validate(loaded)
    assert loaded["schema"] == bench.SCHEMA
    assert loaded["config"]["num_envs"] == [N] and loaded["config"]["repeats"] == REPEATS
    assert list(loaded["variants"]) == list(bench.VARIANTS)
    assert len(loaded["results"]) == len(bench.VARIANTS)


def test_report_carries_the_backend_identity(report):
    assert report["backend"] == backend_info("jax", report_device(report))
    assert report["host"]["native_threads"] >= 1
    info = report["model_info"]
    assert (info["nq"], info["nv"], info["nu"], info["timestep"]) == (3, 3, 3, 0.01)
    assert info["source_sha256"] == hashlib.sha256(slider_xml(4).encode()).hexdigest()


def report_device(report):
    return next(d for d in jax.devices() if str(d) == report["config"]["device"])


def test_ratios_are_ratios_of_medians(report):
    rows = _by_variant(report)
    raw, native = rows["raw"]["steps_per_s"], rows["native"]["steps_per_s"]
    for name in ("raw", "rollout", "raw_loop", "step_loop", "native"):
        r = rows[name]
        assert r["status"] == "ok", r
        assert r["ratio_to_raw"] == pytest.approx(r["steps_per_s"] / raw, rel=1e-12)
        assert r["ratio_to_native"] == pytest.approx(r["steps_per_s"] / native, rel=1e-12)
    assert rows["raw"]["ratio_to_raw"] == 1.0 and rows["native"]["ratio_to_native"] == 1.0


def test_rates_come_from_the_timed_calls(report):
    for r in report["results"]:
        if r["status"] != "ok":
            continue
        assert len(r["run_s"]) == REPEATS and min(r["run_s"]) > 0
        rates = [N * STEPS / s for s in r["run_s"]]
        assert r["steps_per_s"] == pytest.approx(statistics.median(rates))
        assert r["steps_per_s_min"] <= r["steps_per_s"] <= r["steps_per_s_max"]
        assert r["compile_s"] >= 0 and r["first_call_s"] >= r["compile_s"]
        assert r["peak_rss_bytes"] is None or r["peak_rss_bytes"] > 2**20


def test_records_name_what_stepped_their_worlds(report):
    impls = {r["variant"]: r["impl"] for r in report["results"] if r["status"] == "ok"}
    assert impls == {
        "raw": "jax",
        "rollout": "jax",
        "raw_loop": "jax",
        "step_loop": "jax",
        "native": "mujoco",
        "native_loop": "mujoco",
    }
    assert report["config"]["num_threads"] == report["host"]["native_threads"] >= 1


@pytest.fixture(scope="module")
def report_c():
    return bench.run(
        slider_xml(4), [N], STEPS, repeats=REPEATS, impl="cpp", num_threads=1, progress=False
    )


def test_impl_c_measures_the_floor_under_its_own_timer_setting():
    native.set_timers(True)  # as `import mujoco` leaves them
    try:
        report = bench.run(
            slider_xml(4),
            [N],
            STEPS,
            repeats=1,
            impl="c",
            num_threads=1,
            variants=["native"],
            progress=False,
        )
        # No runner was made, yet mujoco.rollout ran as beside impl c's worlds.
        assert report["backend"]["mujoco_timers"] == "off" and not native.timers_on()
        assert _by_variant(report)["native"]["status"] == "ok"
    finally:
        native.default_timers()


def test_impl_c_beside_mjx_and_mujoco_rollout(report_c):
    bench.validate(report_c)
    assert report_c["config"]["impl"] == "c" and report_c["config"]["num_threads"] == 1
    info = report_c["backend"]
    assert (info["impl"], info["num_threads"], info["physics_dtype"]) == ("c", 1, "float64")
    assert report_c["host"]["native_threads"] == 1  # the floor runs on as many threads
    rows = _by_variant(report_c)
    impls = {name: r.get("impl") for name, r in rows.items() if r["status"] == "ok"}
    # raw stays MJX (impl jax): the report sets impl c beside it and beside the floor.
    assert impls == {
        "raw": "jax",
        "rollout": "c",
        "raw_loop": "jax",
        "step_loop": "c",
        "native": "mujoco",
        "native_loop": "mujoco",
    }
    assert rows["sharded"]["status"] == "unavailable" and "threads" in rows["sharded"]["reason"]
    for name in ("rollout", "step_loop"):
        r = rows[name]
        assert r["ratio_to_native"] == pytest.approx(
            r["steps_per_s"] / rows["native"]["steps_per_s"], rel=1e-12
        )
    text = bench.table(report_c)
    assert "impl=c" in text and "1 threads for native and impl c" in text
    assert any(line.split()[1:3] == ["rollout", "c"] for line in text.splitlines()[5:])


def test_missing_variants_are_reported_with_a_reason(report):
    rows = _by_variant(report)
    assert rows["env"]["status"] == "unavailable" and "no task" in rows["env"]["reason"]
    text = bench.table(report)
    for r in report["results"]:
        if r["status"] != "ok":  # sharded, too, while this process sees one device
            assert r["reason"] and r["ratio_to_raw"] is None and r["ratio_to_native"] is None
            assert f"unavailable: {r['reason']}" in text
    for name in bench.VARIANTS:
        assert f" {name} " in text


def test_plot_writes_a_png(report, tmp_path):
    path = bench.plot(report, tmp_path / "sub" / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.update(schema="other/1"), "schema"),
        (lambda r: r["backend"].pop("versions"), "versions"),
        (lambda r: r["results"][1].update(ratio_to_raw=2.5), "ratio_to_raw"),
        (lambda r: r["results"][0].pop("steps_per_s"), "steps_per_s"),
        (lambda r: r["results"][0].update(status="fine"), "status"),
        (lambda r: r["results"][0].update(variant="warp9"), "variant"),
    ],
)
def test_validate_rejects_broken_reports(report, change, message):
    broken = copy.deepcopy(report)
    change(broken)
    with pytest.raises(ValueError, match=message):
        bench.validate(broken)


# --- the measuring protocol, with a fake variant (no JAX) ---------------------------


def _workload(num_envs=4, n_steps=5):
    m = mujoco.MjModel.from_xml_string(slider_xml(2))
    return bench.Workload(
        name="fake",
        mj_model=m,
        mj_data=mujoco.MjData(m),
        num_envs=num_envs,
        n_steps=n_steps,
        substeps=1,
        impl="jax",
        device=jax.devices()[0],
        seed=0,
        actions=np.zeros((n_steps, num_envs, m.nu), np.float32),
    )


class _Log:
    """A fake variant that logs what the harness calls, in order."""

    def __init__(self, name="fake", fail_on_run=None, calls=None):
        self.name, self.fail_on_run, self.runs = name, fail_on_run, 0
        self.calls = [] if calls is None else calls

    def variant(self):
        return bench.Variant(self.name, self.name, self.prepare)

    def prepare(self, w):
        self.calls.append(f"prepare {self.name}")

        def run():
            self.runs += 1
            self.calls.append(f"run {self.name}")
            if self.runs == self.fail_on_run:
                raise RuntimeError("boom")

        return bench.Trial(
            run=run,
            restore=lambda: self.calls.append(f"restore {self.name}"),
            close=lambda: self.calls.append(f"close {self.name}"),
        )


def test_measure_restores_before_every_call_and_closes():
    log, ticks = _Log(), []
    (r,) = bench.measure([log.variant()], _workload(), 3, lambda: ticks.append(1))
    assert log.calls == ["prepare fake"] + ["restore fake", "run fake"] * 4 + ["close fake"]
    assert len(ticks) == 4  # the first, compiling call and 3 timed ones
    assert r["status"] == "ok" and len(r["run_s"]) == 3
    assert r["steps_per_s"] == pytest.approx(statistics.median([20 / s for s in r["run_s"]]))


def test_measure_interleaves_variants_after_all_first_calls():
    calls = []
    a, b = _Log("a", calls=calls), _Log("b", calls=calls)
    bench.measure([a.variant(), b.variant()], _workload(), 2)
    runs = [c for c in calls if c.startswith(("prepare", "run"))]
    assert runs == ["prepare a", "run a", "prepare b", "run b"] + ["run a", "run b"] * 2


def test_measure_records_failures_and_still_closes():
    calls = []
    bad, good = _Log("bad", fail_on_run=2, calls=calls), _Log("good", calls=calls)
    rows = bench.measure([bad.variant(), good.variant()], _workload(), 3)
    assert rows[0]["status"] == "failed" and rows[0]["reason"] == "RuntimeError: boom"
    assert rows[1]["status"] == "ok" and len(rows[1]["run_s"]) == 3
    assert calls.count("run bad") == 2 and calls.count("close bad") == 1
    assert calls[-1] == "close good"


def test_measure_reports_unavailable_variants():
    def prepare(w):
        raise bench.Unavailable("needs two GPUs")

    (r,) = bench.measure([bench.Variant("fake", "fake", prepare)], _workload(), 3)
    assert r == {
        "variant": "fake",
        "num_envs": 4,
        "status": "unavailable",
        "reason": "needs two GPUs",
    }


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_envs": []}, ValueError, "at least one"),
        ({"num_envs": [0]}, ValueError, "num_envs"),
        ({"num_envs": [4, 4]}, ValueError, "repeat"),
        ({"num_envs": 4}, TypeError, "sequence"),
        ({"n_steps": 0}, ValueError, "n_steps"),
        ({"repeats": 1.5}, TypeError, "repeats"),
        ({"impl": "c++"}, ValueError, "impl"),
        ({"num_threads": 0}, ValueError, "num_threads"),
        ({"impl": "c", "device": "tpu"}, ValueError, "tpu"),
        ({"variants": ["raw", "fastest"]}, ValueError, "variants"),
        ({"variants": "raw"}, TypeError, "variants"),
        ({"device": "tpu"}, ValueError, "tpu"),
        ({"model": "no_such_scene"}, ValueError, "known models"),
    ],
)
def test_bad_arguments_are_refused_before_running(kwargs, error, message):
    args = {"model": "pendulum", "num_envs": [2], "n_steps": 2, "progress": False, **kwargs}
    with pytest.raises(error, match=message):
        bench.run(**args)


def test_random_actions_stay_in_ctrlrange():
    m = mujoco.MjModel.from_xml_string(slider_xml(3))
    m.actuator_ctrllimited[0] = 1
    m.actuator_ctrlrange[0] = (0.5, 0.75)
    a = bench.random_actions(m, 50, 8, seed=1)
    assert a.shape == (50, 8, 2) and a.dtype == np.float32
    assert a[..., 0].min() >= 0.5 and a[..., 0].max() <= 0.75
    assert a[..., 1].min() < -0.5 and a[..., 1].max() > 0.5  # unlimited: [-1, 1]
    np.testing.assert_array_equal(a, bench.random_actions(m, 50, 8, seed=1))
    # The same draws as ever, so recorded results stay comparable.
    rng = np.random.default_rng(1)
    expected = rng.uniform([0.5, -1.0], [0.75, 1.0], (50, 8, 2)).astype(np.float32)
    np.testing.assert_array_equal(a, expected)


def test_step_profile_reads_one_host_call_per_runner_step():
    # benchmarks/step_profile.py reads XLA's own profile: a runner's step on impl "c"
    # is one host call per step, and the profile finds it with its time.
    from mjxrunner import MultiEnvRunner

    profile = load_benchmark("step_profile")
    runner = MultiEnvRunner(slider_xml(4), N, impl="c", num_threads=1)
    actions = bench.random_actions(runner.mj_model, 4, N, seed=0)

    class Case:
        def restore(self):
            runner.reset()

        def run(self):
            for a in actions:
                runner.set_actions(a)
                runner.step()
            runner.block_until_ready()

    Case().run()  # compiled outside the profile
    thunks = profile.thunk_times(Case(), len(actions))
    host = {name: v for name, v in thunks.items() if name.startswith("ffi_call")}
    assert len(host) == 1, sorted(thunks)
    ((us, calls),) = host.values()
    assert calls == 1.0 and us > 0


def test_the_pack_limit_sweep_times_both_steps_and_restores_the_limit(capsys):
    # benchmarks/pack_limit.py times one runner forced packed and one forced
    # unpacked; forcing must reach the runner and be undone after it.
    from mjxrunner import MultiEnvRunner
    from mjxrunner.engine import backends

    sweep = load_benchmark("pack_limit")
    own = type(backends.of("c")).pack_limit
    with sweep.limit_forced("c", 0):
        assert not MultiEnvRunner("cartpole", 2, impl="c")._packs
    assert type(backends.of("c")).pack_limit is own
    sweep.main(["--impl", "c", "--num-envs", "2", "--steps", "2", "--repeats", "1"])
    row = capsys.readouterr().out.splitlines()[-1].split()
    assert row[0] == "2" and row[-1] == "any"  # impl "c" on one device: any size
    assert float(row[2]) > 0 and float(row[3]) > 0


@pytest.mark.parametrize("mode", ["step", "gym"])
def test_the_soak_runs_on_impl_c_without_compiling_after_warm_up(mode, tmp_path):
    # benchmarks/soak.py watches a long run's memory and compiles; on impl "c" a leak
    # of the host call would show there. A short soak: what it reports holds up.
    soak = load_benchmark("soak")
    out = tmp_path / "soak.json"
    argv = ["--impl", "c", "--num-threads", "1", "--mode", mode, "--num-envs", "8"]
    argv += ["--steps", "60", "--warmup-chunks", "2", "--skip-check-cost", "--out", str(out)]
    assert soak.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["backend"]["impl"] == "c"
    s = result["soak"]
    assert (s["mode"], s["impl"], s["world_steps"]) == (mode, "c", 60 * 8)
    assert s["compiles_after_warmup"] == 0
    # random controls topple cartpoles: worlds restart (the task's or the host's resets)
    assert s["health"]["resets"] > 0 and s["health"]["unstable_events"] == 0


def test_results_summary_has_a_row_per_size_with_ratios(report):
    runner = load_benchmark("run")
    text = runner.summary([report])
    assert "## cpu" in text and backend.describe_backend(report["backend"]) in text
    assert "| sharded/rollout |" in text and "linalg=xla" in text
    rows = [line for line in text.splitlines() if line.startswith("| mjcf |")]
    assert len(rows) == 1
    by_variant = _by_variant(report)
    assert f"| {by_variant['rollout']['ratio_to_raw']:.2f} |" in rows[0]
    to_loop = by_variant["step_loop"]["steps_per_s"] / by_variant["raw_loop"]["steps_per_s"]
    assert "| step loop/raw loop |" in text and f"| {to_loop:.2f} |" in rows[0]
    assert f"env: {_by_variant(report)['env']['reason']}" in text


# --- the committed results ------------------------------------------------------------


def test_committed_results_are_complete_reports():
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert files, "benchmarks/results holds no recorded report"
    for file in files:
        report = json.loads(file.read_text())
        bench.validate(report)
        assert file.with_suffix(".png").is_file(), f"{file.name} has no plot beside it"
        assert any(r["status"] == "ok" for r in report["results"])
        assert report["host"]["load_avg_start"] is not None  # the load is part of the record


# --- forced host devices (the sharded variant on one CPU) ------------------------------


def test_force_host_devices_before_jax_starts(tmp_path):
    # A fresh process: the flag must be in XLA_FLAGS before JAX starts, other
    # flags kept, an earlier device count replaced.
    code = (
        "import os; from mjxrunner import backend; backend.force_host_devices(3); "
        "import jax; print(len(jax.devices('cpu')), os.environ['XLA_FLAGS'])"
    )
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=2",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [
        "3",
        "--xla_cpu_enable_fast_math=false",
        cpu_fusion.FLAG,  # added by ``import mjxrunner``
        "--xla_force_host_platform_device_count=3",
    ]


def test_force_host_devices_after_jax_started_only_checks():
    before = os.environ.get("XLA_FLAGS")
    backend.force_host_devices(len(jax.devices("cpu")))  # what JAX has: fine
    with pytest.raises(ValueError, match="before JAX starts"):
        backend.force_host_devices(len(jax.devices("cpu")) + 1)
    assert os.environ.get("XLA_FLAGS") == before
    with pytest.raises(ValueError, match="host devices"):
        backend.force_host_devices(0)


# --- the Go1 walking check and the training loop against the physics --------------------


def test_the_walking_check_fails_what_misses_a_target():
    walk = load_benchmark("walk")

    def tracking(task, *achieved):
        commands = walk.TARGETS[task][0]
        return [{"command": c, "achieved": a} for c, a in zip(commands, achieved, strict=True)]

    good = tracking("go1_joystick", [0.9, 0, 0], [0.55, 0, 0], [0, 0, 0.8], [0.05, 0.05, 0])
    assert all(walk.checks("go1_joystick", good, 0.0, 500.0).values())
    bad = tracking("go1_joystick", [0.7, 0, 0], [0.3, 0, 0], [0, 0, 0.7], [0.1, 0.1, 0])
    bad = walk.checks("go1_joystick", bad, 0.1, 700)
    assert not any(bad.values()) and len(bad) == 6
    assert "<= 10 minutes on the CPU" not in walk.checks("go1_joystick", good, 0.0, None)
    # the G1: forward 0.5 and standing checked, its turn only printed; an hour allowed
    g1 = tracking("g1_joystick", [0.42, 0, 0], [0, 0, 0.0], [0.05, 0, 0])
    assert walk.checks("g1_joystick", g1, 0.03, 3000.0) == {
        "forward 0.5 m/s: within 0.15": True,
        "standing: < 0.1 m/s": True,
        "falls < 5 %": True,
        "<= 60 minutes on the CPU": True,
    }
    slow = tracking("g1_joystick", [0.3, 0, 0], [0, 0, 0.5], [0.2, 0, 0])
    assert not any(walk.checks("g1_joystick", slow, 0.05, 3700.0).values())


def test_the_training_throughput_script_prints_both_rates(capsys):
    import benchmarks.train_throughput as tt

    args = ["--task", "cartpole_balance", "--num-envs", "8", "--rollout-steps", "4",
            "--hidden", "8", "--chunk", "1", "--rounds", "1", "--json"]  # fmt: skip
    assert tt.main(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["physics_env_steps_per_s"] > 0 and result["training_env_steps_per_s"] > 0
    assert result["ratio"] == pytest.approx(  # printed to 3 decimals
        result["training_env_steps_per_s"] / result["physics_env_steps_per_s"], abs=5e-4
    )
    assert result["backend"]["impl"] == "c" and result["substeps"] == 1
