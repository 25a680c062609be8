"""The runner's controls on impl "c", each against native MuJoCo in float64.

``tests/test_native.py`` holds the runner's step and resets to native ``mj_step`` on
every scene. Here the rest of the runner's surface: MuJoCo state vectors in and out
(float64, exact), per-step collision switches, substeps and ``dt``, ``rollout``,
model updates, the ``(num_envs + 1,)`` reset mask, kinematics after a write, and
pictures. One hopper runner walks through the checks in order, its reference one
``MjData`` per world stepped beside it.
"""

import copy

import jax
import mujoco
import numpy as np
import pytest
from test_hostile import refused

from mjxrunner import MultiEnvRunner
from mjxrunner.engine import native

N = 4
INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION
FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS


def state_of(m, d, spec=INTEGRATION) -> np.ndarray:
    out = np.empty(mujoco.mj_stateSize(m, spec))
    mujoco.mj_getState(m, d, out, spec)
    return out


class Pair:
    """A runner and its reference, started from the same float64 states."""

    def __init__(self):
        self.runner = r = MultiEnvRunner("hopper", N, impl="c", seed=0)
        self.m = m = r.mj_model
        self.ds = [mujoco.MjData(m) for _ in range(N)]
        rng = np.random.default_rng(0)
        for d in self.ds:
            d.qpos[:] = m.qpos0 + rng.normal(0, 0.1, m.nq)
            d.qvel[:] = rng.normal(0, 0.5, m.nv)
        self.rng = rng

    def actions(self) -> np.ndarray:
        return self.rng.uniform(-1, 1, (N, self.m.nu)).astype(np.float32)

    def step_reference(self, u, model=None, nstep=1, models=None) -> None:
        for i, d in enumerate(self.ds):
            d.ctrl[:] = u[i]
            mujoco.mj_step(models[i] if models else (model or self.m), d, nstep)

    def assert_equal(self) -> None:
        exact = native.from_bits(np.asarray(self.runner.data._impl.state))
        for i, d in enumerate(self.ds):
            np.testing.assert_array_equal(exact[i], state_of(self.m, d), err_msg=f"world {i}")


@pytest.fixture(scope="module")
def pair():
    p = Pair()
    p.runner.set_state(np.stack([state_of(p.m, d, FULL) for d in p.ds]))
    return p


def test_state_vectors_go_in_and_out_exactly_as_float64(pair):
    r, m = pair.runner, pair.m
    got = r.get_state()
    assert got.dtype == np.float64  # MuJoCo's own state, not its float32 rounding
    np.testing.assert_array_equal(got, np.stack([state_of(m, d, FULL) for d in pair.ds]))
    qpos = r.get_state(mujoco.mjtState.mjSTATE_QPOS, env_ids=[2, 0])
    np.testing.assert_array_equal(qpos, [pair.ds[2].qpos, pair.ds[0].qpos])
    # the public data holds the rounding, and the kinematics of the new positions
    np.testing.assert_array_equal(np.asarray(r.data.qpos)[1], pair.ds[1].qpos.astype(np.float32))
    d = copy.copy(pair.ds[1])
    mujoco.mj_kinematics(m, d)
    np.testing.assert_allclose(np.asarray(r.data.xpos)[1], d.xpos, rtol=0, atol=1e-6)
    pair.assert_equal()


def test_a_step_without_contacts_in_chosen_worlds(pair):
    u = pair.actions()
    pair.runner.set_actions(u)
    pair.runner.step(collide=np.array([True, False, True, True]))
    free = copy.copy(pair.m)
    free.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    pair.step_reference(u, models=[pair.m, free, pair.m, pair.m])
    pair.assert_equal()


def test_waiting_for_the_steps_reads_nothing_and_changes_nothing(pair):
    r = pair.runner
    for _ in range(3):
        u = pair.actions()
        r.set_actions(u)
        r.step()
        pair.step_reference(u)
    assert r.block_until_ready() is r
    # every packed buffer is done, and the state was not unpacked to get there
    assert all(x.is_ready() for x in jax.tree.leaves(r._state.buffers))
    assert r._state.peek is None  # packed only: nothing unpacked it
    pair.assert_equal()


def test_substeps_and_dt(pair):
    r = pair.runner
    r.step(substeps=3)  # the controls of the last set_actions stay
    pair.step_reference([d.ctrl.copy() for d in pair.ds], nstep=3)
    pair.assert_equal()
    r.step(dt=0.004, substeps=2)
    short = copy.copy(pair.m)
    short.opt.timestep = float(np.float32(0.004) / np.float32(2))  # dt is a float32 scalar
    pair.step_reference([d.ctrl.copy() for d in pair.ds], model=short, nstep=2)
    pair.assert_equal()


def test_rollout_is_the_same_steps(pair):
    actions = pair.rng.uniform(-1, 1, (5, N, pair.m.nu)).astype(np.float32)
    pair.runner.rollout(actions, 5)
    for u in actions:
        pair.step_reference(u)
    pair.assert_equal()


def test_a_model_update_reaches_every_world(pair):
    r = pair.runner
    r.update_model(fields={"opt.gravity": np.array([0.0, 0.0, -5.0])})
    u = pair.actions()
    r.set_actions(u)
    r.step()
    light = copy.copy(pair.m)
    light.opt.gravity[:] = [0, 0, -5.0]
    pair.step_reference(u, model=light)
    pair.assert_equal()
    r.update_model(fields={"opt.gravity": pair.m.opt.gravity.copy()})
    r.step()
    pair.step_reference(u)
    pair.assert_equal()  # the exact value is back, not its float32 rounding


def test_bad_state_vectors_are_refused_and_change_nothing(pair):
    r = pair.runner
    width = mujoco.mj_stateSize(pair.m, FULL)
    calls = {
        "states": lambda: r.set_state(np.zeros((N, width + 1))),
        "finite": lambda: r.set_state(np.full((N, width), np.nan)),
        "env_ids": lambda: r.set_state(np.zeros((1, width)), env_ids=[N]),
        "spec": lambda: r.set_state(np.zeros((N, width)), spec=0),
    }
    for name, call in calls.items():
        assert not refused(r, call, name), name  # refused, naming it, nothing changed
    pair.assert_equal()


def test_the_longer_reset_mask_and_the_counters(pair):
    r = pair.runner
    u = pair.actions()
    r.set_actions(u)
    r.step()
    pair.step_reference(u)
    lengths = r.episode_length.copy()
    assert (lengths > 0).all()
    r.reset(np.array([False, True, False, False, True]))  # world 1 and the shared leaves
    np.testing.assert_array_equal(r.episode_length, np.where(np.arange(N) == 1, 0, lengths))
    default = MultiEnvRunner("hopper", 1, impl="c", seed=0).get_state()[0]
    np.testing.assert_array_equal(r.get_state(env_ids=[1])[0], default)
    for i in (0, 2, 3):  # the others kept their exact state
        expected = state_of(pair.m, pair.ds[i], FULL)
        np.testing.assert_array_equal(r.get_state(env_ids=[i])[0], expected)
    r.set_done_flags(np.array([True, False, False, False]), np.array([False, False, True, False]))
    assert r.terminated.tolist() == [True, False, False, False]
    assert r.truncated.tolist() == [False, False, True, False]


def test_a_picture_is_mujocos_own_of_that_world(pair):
    world, m = 2, pair.m
    d = copy.copy(pair.ds[world])
    mujoco.mj_forward(m, d)
    renderer = mujoco.Renderer(m, 120, 160)
    renderer.update_scene(d, 0 if m.ncam else -1)  # the runner's default camera
    expected = renderer.render().copy()
    renderer.close()
    frame = pair.runner.render(world, width=160, height=120)
    assert frame.shape == expected.shape and frame.dtype == np.uint8 and frame.std() > 5
    assert np.abs(frame.astype(int) - expected).mean() < 1.0
