"""Checkpoints of earlier versions still load and continue their runs: files made by
tests/data/make_old_checkpoints.py before the move into layers (``v2``, format version
2) and before the backend redesign (``v3``, format version 3)."""

from pathlib import Path

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjxrunner import MultiEnvRunner
from mjxrunner import env as mjxenv
from mjxrunner.checkpoint import CheckpointError
from mjxrunner.engine import models

DATA = Path(__file__).parent / "data"
ACTIONS = np.linspace(-1, 1, 4, dtype=np.float32)[:, None]
VERSIONS = ("v2", "v3")


def expected(version):
    return dict(np.load(DATA / f"{version}_expected.npz"))


@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_runner_file_continues_its_run(version):
    r = MultiEnvRunner.load(DATA / f"{version}_runner.npz")
    assert r.num_envs == 4 and r.max_qvel == 1e6
    # v2 was written with the old default instability_policy, "reset": now "truncate"
    assert r.instability_policy == "truncate"
    assert r.param("dof_damping").shape == (4, 2)  # the per-world value came along
    for _ in range(5):
        r.set_actions(ACTIONS)
        r.step()
    want = expected(version)
    np.testing.assert_array_equal(np.asarray(r.data.qpos), want["runner_qpos"])
    np.testing.assert_array_equal(np.asarray(r.data.qvel), want["runner_qvel"])


@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_env_file_continues_its_run(version):
    env, state = mjxenv.load(DATA / f"{version}_env.npz")
    assert env.autoreset == "same_step" and env.task.name == "cartpole_balance"
    for _ in range(5):
        state = mjxenv.jit_step(env, state, jnp.asarray(ACTIONS))
    want = expected(version)
    np.testing.assert_array_equal(np.asarray(state.obs), want["env_obs"])
    np.testing.assert_array_equal(np.asarray(state.reward), want["env_reward"])


def test_an_old_file_of_the_wrong_kind_names_the_door_to_use():
    with pytest.raises(CheckpointError, match=r"holds an env, not a runner.*mjxrunner\.env\.load"):
        MultiEnvRunner.load(DATA / "v2_env.npz")


def _mjb(version_delta=0, nint_delta=0):
    m = mujoco.MjModel.from_xml_path(str(models.path("cartpole")))
    raw = models.mjb_bytes(m).copy()
    header = raw[:20].view(np.int32)
    header[3] += version_delta
    header[2] += nint_delta
    return m, raw


def test_a_binary_model_of_another_release_with_this_layout_loads_with_a_warning():
    m, raw = _mjb(version_delta=-1)
    with pytest.warns(UserWarning, match="written by MuJoCo version"):
        loaded = models.from_mjb(raw)
    np.testing.assert_array_equal(loaded.body_mass, m.body_mass)
    assert loaded.nq == m.nq and loaded.opt.timestep == m.opt.timestep


def test_a_binary_model_of_another_layout_is_refused():
    _, raw = _mjb(version_delta=-1, nint_delta=1)
    with pytest.raises(ValueError, match="another layout"):
        models.from_mjb(raw)
