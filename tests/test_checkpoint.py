"""Checkpoints of runners and envs: exact continuation, atomic writes, corrupt files,
mismatches, old formats.

What a checkpoint holds and how it is checked is the same for every impl, so the
stepped runner here runs on impl "c" (:data:`IMPL`: MuJoCo's C step, no physics
compiled). Two parts stay on impl "jax" (and so save and read back MJX's data): the
runner split over two devices (impl "c" spreads worlds over threads), and the envs,
whose checks restart worlds on NaN actions (MuJoCo C zeroes a NaN control instead of
stepping it)."""

import dataclasses
import json
import os
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from mjxrunner import MultiEnvRunner, checkpoint, pytree_dataclass, world_field
from mjxrunner.checkpoint import CheckpointError
from mjxrunner.engine import archive
from mjxrunner.engine.params import Term
from mjxrunner.rl import env as env_

IMPL = "c"  # the impl of the stepped runner here (see above)
N = 4


@pytree_dataclass
class Tally:
    """A custom per-world user leaf: needs a template to load."""

    hits: jax.Array = world_field(0)


def actions(t: int, nu: int) -> np.ndarray:
    """Deterministic controls for step ``t``."""
    return np.sin(np.arange(N * nu, dtype=np.float32).reshape(N, nu) + 0.3 * t)


def drive(r: MultiEnvRunner, start: int, steps: int) -> None:
    """Steps with controls, resets and a rollout: the same calls give the same run."""
    for t in range(start, start + steps):
        r.set_actions(actions(t, r.action_dim()))
        r.step()
        if t % 3 == 2:
            r.reset_envs([t % N])  # redraws that world's randomized parameters
    r.rollout(np.stack([actions(t, r.action_dim()) for t in range(2)]), 2)


def everything(r: MultiEnvRunner) -> list:
    eng = r.engine
    trees = (eng.state, eng.default, r.model, eng.default_model)
    return [np.asarray(x) for x in jax.tree.leaves(trees)] + [r.env_origins, r.layout]


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def configured(r: MultiEnvRunner) -> MultiEnvRunner:
    """``r`` with something in every part of its state but the physics'."""
    r.set_param("body_mass", [0.0, 1.0, 2.0, 3.0], env_ids=[2])  # per world, derived rebuilt
    r.set_gravity([0, 0, -3.0], world=1)
    r.set_randomization(
        [Term("dof_damping", 0.5, 2.0, operation="set", index=(1,))], every_n_steps=4
    )
    r.set_user_state({"goal": jnp.arange(3.0), "seen": [jnp.zeros(2, jnp.int32)]})
    r.set_grid_layout(2.5, columns=2)
    return r


@pytest.fixture(scope="module")
def runner(slider3):
    """A runner with something in every part of its state."""
    r = configured(MultiEnvRunner(slider3, N, seed=5, max_qvel=1e6, impl=IMPL))
    drive(r, 0, 5)
    return r


def test_restored_runner_continues_bit_for_bit(runner, tmp_path):
    path = tmp_path / "run.ckpt"
    runner.save(path)
    saved = everything(runner)
    header, _ = checkpoint.read(path)
    assert header["num_envs"] == N and header["backend"]["impl"] == IMPL
    assert header["randomization"]["every_n_steps"] == 4

    loaded = MultiEnvRunner.load(path)
    assert_same(saved, everything(loaded))
    np.testing.assert_array_equal(loaded.health.reset_count, runner.health.reset_count)
    # the runner was built with the default policy, "reset" before it was renamed
    assert loaded.max_qvel == 1e6 and loaded.instability_policy == "truncate"
    assert loaded.model.signature == runner.model.signature != 0  # binary bytes drop it

    drive(runner, 5, 7)
    drive(loaded, 5, 7)
    assert_same(everything(runner), everything(loaded))
    assert loaded.param("dof_damping").shape == (N, 3)  # randomized per world, kept so
    assert loaded.user_state["goal"].shape == (3,)


def test_restore_in_place_and_its_refusals(tmp_path, slider3):
    runner = configured(MultiEnvRunner(slider3, N, seed=5, max_qvel=1e6, impl=IMPL))
    path = tmp_path / "a.ckpt"
    runner.save(path)
    saved = everything(runner)
    other = MultiEnvRunner(slider3, N, seed=99, impl=IMPL)
    other.restore(path)
    assert_same(saved, everything(other))

    small = MultiEnvRunner(slider3, 2, impl=IMPL)
    before = everything(small)
    with pytest.raises(CheckpointError, match="num_envs=4, expected num_envs=2"):
        small.restore(path)
    assert_same(before, everything(small))
    with pytest.raises(CheckpointError, match="num_envs=4, expected num_envs=8"):
        MultiEnvRunner.load(path, num_envs=8)
    with pytest.raises(CheckpointError, match=r"structurally different.*nq 3 != 1"):
        MultiEnvRunner.load(path, model="pendulum")
    pendulum = MultiEnvRunner("pendulum", N, impl=IMPL)
    before = everything(pendulum)
    with pytest.raises(CheckpointError, match="structurally different"):
        pendulum.restore(path)
    assert_same(before, everything(pendulum))


def test_custom_user_state_needs_a_template(slider3, tmp_path):
    r = MultiEnvRunner(slider3, N, impl=IMPL)
    r.set_user_state(Tally(hits=jnp.arange(N)))
    r.save(tmp_path / "t.ckpt")
    with pytest.raises(CheckpointError, match="user_template"):
        MultiEnvRunner.load(tmp_path / "t.ckpt")
    loaded = MultiEnvRunner.load(tmp_path / "t.ckpt", user_template=Tally(jnp.zeros(N, int)))
    assert isinstance(loaded.user_state, Tally)
    np.testing.assert_array_equal(loaded.user_state.hits, np.arange(N))
    with pytest.raises(
        CheckpointError, match=r"user\.hits is int32\[4\], this runner needs int32\[3\]"
    ):
        MultiEnvRunner.load(tmp_path / "t.ckpt", user_template=Tally(jnp.zeros(3, int)))


# --- bad files ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good(runner, tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "good.ckpt"
    runner.save(path)
    return path


def test_truncated_and_corrupt_files_are_refused(good, tmp_path):
    raw = good.read_bytes()
    for cut in (0, 20, len(raw) // 3, len(raw) - 10):
        (tmp_path / "cut").write_bytes(raw[:cut])
        with pytest.raises(CheckpointError, match="truncated or corrupt"):
            MultiEnvRunner.load(tmp_path / "cut")
    rng = np.random.default_rng(0)
    header, arrays = checkpoint.read(good)
    caught = 0
    for _ in range(8):  # a flipped byte: zip CRC, header or checksum catches it
        bad = bytearray(raw)
        bad[int(rng.integers(len(raw)))] ^= 0x55
        (tmp_path / "flip").write_bytes(bytes(bad))
        try:
            h, a = checkpoint.read(tmp_path / "flip")
        except CheckpointError:
            caught += 1
            with pytest.raises(CheckpointError):
                MultiEnvRunner.load(tmp_path / "flip")
            continue
        # Or it hit zip metadata that readers ignore (a zip64 size field of a
        # local header, a timestamp): then nothing read differs.
        assert h == header and a.keys() == arrays.keys()
        assert all(bits(a[k]) == bits(arrays[k]) for k in a)
    assert caught >= 6
    (tmp_path / "junk").write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        MultiEnvRunner.load(tmp_path / "junk")
    np.savez(tmp_path / "plain.npz", x=np.zeros(3))
    with pytest.raises(CheckpointError, match="no checkpoint header"):
        MultiEnvRunner.load(tmp_path / "plain.npz")
    with pytest.raises(FileNotFoundError, match="no checkpoint file"):
        MultiEnvRunner.load(tmp_path / "missing.ckpt")


def rewrite(src, dst, change):
    """A copy of checkpoint ``src`` with ``change(header, arrays)`` applied and a
    valid checksum: a well-formed file whose content is wrong."""
    header, arrays = checkpoint.read(src)
    change(header, arrays)
    header["arrays"] = {
        n: {"dtype": a.dtype.str, "shape": list(a.shape)} for n, a in arrays.items()
    }
    header["sha256"] = checkpoint._checksum(arrays, header)
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    dst.write_bytes(archive.pack(arrays))


def test_well_formed_but_wrong_content_is_refused(good, tmp_path):
    def tamper(header, arrays):
        arrays["state/.data.qpos"] = arrays["state/.data.qpos"] + 1  # checksum not updated

    header, arrays = checkpoint.read(good)
    tamper(header, arrays)
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    (tmp_path / "t").write_bytes(archive.pack(arrays))
    with pytest.raises(CheckpointError, match="checksum"):
        MultiEnvRunner.load(tmp_path / "t")

    def to_f64(header, arrays):
        arrays["state/.data.qvel"] = arrays["state/.data.qvel"].astype(np.float64)

    rewrite(good, tmp_path / "f64", to_f64)
    with pytest.raises(CheckpointError, match=r"qvel is float64.*jax_enable_x64"):
        MultiEnvRunner.load(tmp_path / "f64")

    def drop(header, arrays):
        del arrays["default/.data.qacc"]

    rewrite(good, tmp_path / "drop", drop)
    with pytest.raises(CheckpointError, match=r"default does not fit.*missing \['.data.qacc'\]"):
        MultiEnvRunner.load(tmp_path / "drop")
    header, arrays = checkpoint.read(good)
    del arrays["state/.ctrl"]  # the index still lists it
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    (tmp_path / "short").write_bytes(archive.pack(arrays))
    with pytest.raises(CheckpointError, match="checksum"):
        MultiEnvRunner.load(tmp_path / "short")

    header, arrays = checkpoint.read(good)
    header["num_envs"] = 8  # the header is under the checksum too
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    (tmp_path / "h").write_bytes(archive.pack(arrays))
    with pytest.raises(CheckpointError, match="checksum"):
        MultiEnvRunner.load(tmp_path / "h")

    def no_layout(header, arrays):
        del header["layout"]

    rewrite(good, tmp_path / "nolayout", no_layout)
    with pytest.raises(CheckpointError, match=r"incomplete header: no \['layout'\]"):
        MultiEnvRunner.load(tmp_path / "nolayout")

    def version(header, arrays):
        header["version"] = 99

    rewrite(good, tmp_path / "v99", version)
    with pytest.raises(CheckpointError, match="version 99"):
        MultiEnvRunner.load(tmp_path / "v99")

    def other_versions(header, arrays):
        header["backend"]["versions"]["mujoco"] = "0.0.1"

    rewrite(good, tmp_path / "old", other_versions)
    with pytest.warns(checkpoint.CheckpointWarning, match="mujoco 0.0.1"):
        MultiEnvRunner.load(tmp_path / "old")


def test_old_format_version_is_refused(good, tmp_path):
    def version_1(header, arrays):  # the header mjxrunner wrote before the engine
        for key in ("kind", "options", "guards", "ref", "parts"):
            del header[key]
        header.update(version=1, impl="jax", graph_mode=None, capacities=None)

    rewrite(good, tmp_path / "v1", version_1)
    old = r"written by an older mjxrunner \(checkpoint format version 1\) and cannot be read"
    with pytest.raises(CheckpointError, match=old):
        MultiEnvRunner.load(tmp_path / "v1")
    with pytest.raises(CheckpointError, match=old):
        env_.load(tmp_path / "v1")


def test_kinds(good):
    with pytest.raises(CheckpointError, match=r"holds a runner, not an env.*MultiEnvRunner\.load"):
        env_.load(good)
    with pytest.raises(CheckpointError, match="expected num_envs=8"):
        MultiEnvRunner.load(good, num_envs=8)


def test_save_is_atomic(runner, good, tmp_path, monkeypatch):
    target = tmp_path / "keep.ckpt"
    target.write_bytes(good.read_bytes())

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(archive.np, "savez", fail)  # the file format writes with it
    with pytest.raises(OSError, match="disk full"):
        runner.save(target)
    monkeypatch.undo()
    assert target.read_bytes() == good.read_bytes()  # the old file is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.ckpt"]  # no temp left
    with zipfile.ZipFile(target) as z:
        assert "__header__.npy" in z.namelist()
    with pytest.raises(ValueError, match="directory"):
        runner.save(tmp_path / "no" / "such" / "dir.ckpt")


def test_sharded_runner_round_trip(slider3, tmp_path):
    r = MultiEnvRunner(slider3, N, seed=2, devices=2)  # impl "jax" (see above)
    r.set_actions(actions(0, 3))
    r.set_param("dof_damping", np.ones((N, 3)))  # a per-world parameter, split too
    r.save(tmp_path / "s.ckpt")
    single = MultiEnvRunner.load(tmp_path / "s.ckpt")  # the file does not know the mesh
    assert single.mesh is None
    assert_same(everything(r), everything(single))
    again = MultiEnvRunner.load(tmp_path / "s.ckpt", devices=2)
    assert again.data.qpos.sharding.spec == PartitionSpec("worlds")
    assert again.model.dof_damping.sharding.spec == PartitionSpec("worlds")
    assert_same(everything(r), everything(again))


# --- envs ----------------------------------------------------------------------------


def env_actions(t: int) -> np.ndarray:
    """Fixed actions for env step ``t``; a NaN trips the action guard, so that world
    restarts in the step (before the save at t=3, after it at t=12)."""
    a = np.sin(np.arange(N, dtype=np.float32)[:, None] + 0.3 * t)
    if t in (3, 12):
        a[t % N] = np.nan
    return a


def bits(x) -> tuple:
    x = np.ascontiguousarray(x)
    return x.dtype, x.shape, x.tobytes()


def assert_bit_identical(a, b) -> None:
    """Every leaf equal bit for bit (NaNs of the same pattern included)."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert bits(x) == bits(y)


@pytest.fixture(scope="module")
def envs():
    # On impl "jax" (see the module docstring).
    plain = env_.make("cartpole_balance", N, autoreset="same_step", impl="jax")
    gravity = np.array([[0, 0, -9.81 * k] for k in (1.0, 1.5, 2.0, 0.5)], np.float32)
    varied = plain.with_param("opt.gravity", gravity)  # per world
    varied = varied.with_randomization([Term("dof_damping", 0.5, 2.0)])
    pooled = plain.with_reset_pool(8, jax.random.key(4))
    return {"plain": plain, "varied": varied, "pooled": pooled}


@pytest.mark.parametrize("which", ["plain", "varied", "pooled"])
def test_env_continues_bit_for_bit(envs, which, tmp_path):
    env = envs[which]
    state = env_.jit_reset(env, jax.random.key(3))
    for t in range(7):
        state = env_.jit_step(env, state, env_actions(t))
    path = tmp_path / "env.ckpt"
    env_.save(path, env, state)
    header, _ = checkpoint.read(path)
    assert header["kind"] == "env" and header["task"] == "cartpole_balance"
    assert header["autoreset"] == "same_step" and header["pool_size"] == env.pool_size

    loaded, again = env_.load(path)
    assert loaded.task is env.task and loaded.autoreset == "same_step"
    assert loaded.pool_size == env.pool_size
    assert (loaded.config.randomization is None) == (which != "varied")
    assert_bit_identical((env.model, env.pool, state), (loaded.model, loaded.pool, again))
    for t in range(7, 17):
        state = env_.jit_step(env, state, env_actions(t))
        again = env_.jit_step(loaded, again, env_actions(t))
    assert int(state.stats.completed.sum()) == 2  # the two NaN restarts
    assert_bit_identical(state, again)
    if which == "varied":
        assert loaded.model.opt.gravity.shape == (N, 3)
        assert again.model.dof_damping.shape == (N, 2)  # redrawn per world


def test_env_checkpoint_refusals(envs, tmp_path):
    env = envs["plain"]
    state = env_.jit_reset(env, jax.random.key(0))
    path = tmp_path / "env.ckpt"
    env_.save(path, env, state)
    with pytest.raises(CheckpointError, match=r"holds an env, not a runner.*mjxrunner\.env\.load"):
        MultiEnvRunner.load(path)

    def unknown_task(header, arrays):
        header["task"] = "no_such_task"

    rewrite(path, tmp_path / "task", unknown_task)
    with pytest.raises(CheckpointError, match=r"task 'no_such_task', which is not registered"):
        env_.load(tmp_path / "task")
    # a Task that is not registered, under the saved name
    unregistered = dataclasses.replace(env.task, name="no_such_task")
    _, again = env_.load(tmp_path / "task", task=unregistered)
    assert_bit_identical(state, again)
    # another task than the saved one: refused unless asked for (issue 29, defect 8)
    with pytest.raises(
        CheckpointError,
        match=r"task 'cartpole_balance', not 'cartpole_swingup'.*allow_other_task=True",
    ):
        env_.load(path, task="cartpole_swingup")
    with pytest.raises(CheckpointError, match=r"not 'cartpole_balance'.*allow_other_task"):
        env_.load(tmp_path / "task", task="cartpole_balance")
    other, again = env_.load(path, task="cartpole_swingup", allow_other_task=True)
    assert other.task.name == "cartpole_swingup"
    assert_bit_identical(state.runner.data, again.runner.data)
    _, again = env_.load(path, task="cartpole_balance")  # the saved task, by name
    assert_bit_identical(state, again)
    with pytest.raises(ValueError, match="num_envs"):
        env_.save(path, env_.make("cartpole_balance", 2, impl="jax"), state)
