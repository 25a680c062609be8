"""Impl "c": the runner and the env step MuJoCo C, bit for bit with native ``mj_step``.

The reference is a plain loop of ``mujoco.mj_step`` over one ``MjData`` (and one
``MjModel`` copy) per world, in float64. The runner's exact state
(``data._impl.state``, the bits of each world's ``mjSTATE_INTEGRATION`` vector) must
equal the reference's, bit for bit, through masked resets and per-world parameters.
"""

import copy

import jax
import mujoco
import numpy as np
import pytest

from mjxrunner import CompileCounter, MultiEnvRunner, models
from mjxrunner import env as mjxenv
from mjxrunner.engine import native

INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION
N = 4


def exact(data) -> np.ndarray:
    """``(n, nstate)`` float64: the runner's exact states."""
    return native.from_bits(np.asarray(data._impl.state))


def state_of(m: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
    out = np.empty(mujoco.mj_stateSize(m, INTEGRATION))
    mujoco.mj_getState(m, d, out, INTEGRATION)
    return out


class Reference:
    """One native MjModel copy and MjData per world, started like the runner."""

    def __init__(self, m: mujoco.MjModel, start: np.ndarray):
        self.model = m
        self.models = [copy.copy(m) for _ in range(len(start))]
        self.datas = [mujoco.MjData(mi) for mi in self.models]
        self.start = start.copy()
        for i in range(len(start)):
            self.reset(i)

    def reset(self, i: int, params: bool = False) -> None:
        if params:  # as the runner's reset: the world's parameters back to the default
            self.models[i] = copy.copy(self.model)
        mujoco.mj_setState(self.models[i], self.datas[i], self.start[i], INTEGRATION)

    def step(self, ctrl: np.ndarray, nstep: int = 1) -> None:
        for mi, d, u in zip(self.models, self.datas, ctrl, strict=True):
            d.ctrl[:] = u
            mujoco.mj_step(mi, d, nstep)

    def states(self) -> np.ndarray:
        return np.stack([state_of(mi, d) for mi, d in zip(self.models, self.datas, strict=True)])


def controls(m: mujoco.MjModel, rng: np.random.Generator, n: int) -> np.ndarray:
    lo, hi = m.actuator_ctrlrange.T if m.nu else (np.zeros(0), np.zeros(0))
    lo = np.where(m.actuator_ctrllimited, lo, -1.0)
    hi = np.where(m.actuator_ctrllimited, hi, 1.0)
    return rng.uniform(lo, hi, (n, m.nu)).astype(np.float32)


@pytest.mark.parametrize("scene", models.list())
def test_runner_equals_native_step_bit_for_bit(scene):
    """1,000 steps of every scene with masked resets and per-world masses and
    frictions changed on the way: the float64 state equals native ``mj_step``'s."""
    m = models.load(scene)
    r = MultiEnvRunner(m, N, impl="c", seed=0)
    ref = Reference(m, exact(r.data))
    rng = np.random.default_rng(0)
    for k in range(1000):
        if k == 300:
            # per-world parameters: world 0's frictions halved, world 3's masses 1.25x
            friction = np.asarray(r.param("geom_friction")) * np.float32(0.5)
            r.set_param("geom_friction", friction, env_ids=[0])
            mass = np.asarray(r.param("body_mass")) * np.float32(1.25)
            r.set_param("body_mass", mass, env_ids=[3])
            ref.models[0].geom_friction[:] = friction.astype(np.float64)
            changed = mass != m.body_mass.astype(np.float32)
            ref.models[3].body_mass[:] = np.where(changed, mass, m.body_mass)
            mujoco.mj_setConst(ref.models[3], mujoco.MjData(ref.models[3]))  # scratch data
        if k in (250, 600):
            mask = np.zeros(N, bool)
            mask[[1, 2] if k == 250 else [0, 3]] = True
            r.reset(mask)
            for i in np.flatnonzero(mask):
                ref.reset(i, params=True)
        u = controls(m, rng, N)
        r.set_actions(u)
        r.step()
        ref.step(u)
        if k % 100 == 99:
            np.testing.assert_array_equal(exact(r.data), ref.states(), err_msg=f"step {k}")
    np.testing.assert_array_equal(exact(r.data), ref.states())
    # what tasks read comes from the same native step, rounded once
    xpos = np.stack([d.xpos for d in ref.datas]).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(r.data.xpos), xpos)
    sensors = np.stack([d.sensordata for d in ref.datas]).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(r.data.sensordata), sensors)
    np.testing.assert_array_equal(r.contact_count(), [d.ncon for d in ref.datas])


def test_runners_of_one_model_share_a_host_and_never_mix_worlds():
    """Two runners of equal models share one host (so one compiled step), and
    stepping them in turn, one with per-world masses and its own resets, leaves each
    equal to its own native reference."""
    m = models.load("hopper")
    a = MultiEnvRunner(m, N, impl="c", seed=0)
    b = MultiEnvRunner(models.load("hopper"), N, impl="c", seed=1)
    host = lambda r: r._eng.default_model.tree._impl.host  # noqa: E731
    assert host(a) is host(b)
    refs = {id(r): Reference(m, exact(r.data)) for r in (a, b)}
    mass = np.asarray(a.param("body_mass")) * np.float32(1.5)
    a.set_param("body_mass", mass, env_ids=[1])
    changed = mass != m.body_mass.astype(np.float32)
    ref = refs[id(a)].models[1]
    ref.body_mass[:] = np.where(changed, mass, m.body_mass)
    mujoco.mj_setConst(ref, mujoco.MjData(ref))
    rng = np.random.default_rng(2)
    for k in range(150):
        for r in (a, b) if k % 3 else (b, a):
            if k == 70 and r is b:
                r.reset(np.arange(N) == 1)
                refs[id(r)].reset(1, params=True)
            u = controls(m, rng, N)
            r.set_actions(u)
            r.step()
            refs[id(r)].step(u)
    for r in (a, b):
        np.testing.assert_array_equal(exact(r.data), refs[id(r)].states())


@pytest.fixture(scope="module")
def hopper():
    return MultiEnvRunner("hopper", N, impl="c", seed=1)


def test_writing_a_state_field_takes_the_written_value(hopper):
    """``set_state``-style writes of the public data reach the physics (widened),
    and unwritten fields keep their exact values."""
    r = hopper
    r.reset()
    before = exact(r.data)
    qpos = np.asarray(r.data.qpos).copy()
    qpos[2, 1] = 0.25
    r.engine = r.engine.replace(state=r.engine.state.replace(data=r.data.replace(qpos=qpos)))
    m = models.load("hopper")
    ref = Reference(m, before)
    ref.datas[2].qpos[1] = 0.25
    r.step()
    ref.step(np.zeros((N, m.nu)))
    np.testing.assert_array_equal(exact(r.data), ref.states())


def test_checkpoint_continues_bit_for_bit(hopper, tmp_path):
    r = hopper
    r.set_actions(np.full((N, r.action_dim()), 0.4, np.float32))
    for _ in range(20):
        r.step()
    r.save(tmp_path / "c.ckpt")
    back = MultiEnvRunner.load(tmp_path / "c.ckpt")
    assert back.impl == "c"
    np.testing.assert_array_equal(exact(back.data), exact(r.data))
    for _ in range(30):
        r.step()
        back.step()
    np.testing.assert_array_equal(exact(back.data), exact(r.data))


def test_no_recompiles_across_steps_resets_and_parameter_values(hopper):
    r = hopper
    for path in ("geom_friction", "body_mass"):  # per world from now on: one compile
        r.set_param(path, np.repeat(np.asarray(r.param(path))[None], N, axis=0))
    for _ in range(2):  # warm-up: the signatures of every call below
        r.set_actions(np.zeros((N, r.action_dim()), np.float32))
        r.step()
        r.reset(np.array([True, False, True, False]))
        r.set_param("geom_friction", np.asarray(r.param("geom_friction")[1]), env_ids=[1])
        r.set_param("body_mass", np.asarray(r.param("body_mass")[1]), env_ids=[1])
    with CompileCounter() as c:
        for k in range(5):
            r.set_actions(np.full((N, r.action_dim()), 0.1 * k, np.float32))
            r.step()
            r.reset(np.array([k % 2 == 0, False, True, False]))
            r.set_param("geom_friction", np.asarray(r.param("geom_friction")[1]) * 0.9, [1])
            r.set_param("body_mass", np.asarray(r.param("body_mass")[1]) * 1.01, [1])
    assert c.count == 0


DIVERGING = """<mujoco><option timestep="0.01"/>
  <worldbody><body><joint name="j" type="hinge"/><geom size=".1" mass="1e-9"/></body></worldbody>
  <actuator><motor joint="j" gear="1e30"/></actuator></mujoco>"""


def test_a_world_mujoco_resets_is_truncated_and_counted():
    """MuJoCo resets a diverging world by itself (mjWARN_BADQACC): the runner's
    unstable guard sees it, the world is truncated and counted, never silently reset."""
    m = mujoco.MjModel.from_xml_string(DIVERGING)
    d = mujoco.MjData(m)
    d.ctrl[:] = 1
    mujoco.mj_step(m, d)
    assert d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number == 1  # native resets it
    r = MultiEnvRunner(m, 3, impl="c")
    r.set_actions(np.array([[0.0], [1.0], [0.0]], np.float32))
    r.step()
    np.testing.assert_array_equal(np.asarray(r.data._impl.diverged), [False, True, False])
    np.testing.assert_array_equal(r.truncated, [False, True, False])
    np.testing.assert_array_equal(r.health.counts["unstable"], [0, 1, 0])
    with pytest.raises(Exception, match=r"unstable|instab"):
        strict = MultiEnvRunner(m, 3, impl="c", instability_policy="raise")
        strict.set_actions(np.array([[0.0], [1.0], [0.0]], np.float32))
        strict.step()


HFIELD_CYLINDER = """<mujoco>
  <asset><hfield name="h" nrow="8" ncol="8" size="2 2 .2 .1"/></asset>
  <worldbody><geom type="hfield" hfield="h"/>
    <body pos="0 0 .5"><freejoint/><geom type="cylinder" size=".1 .1"/></body>
  </worldbody></mujoco>"""


def test_a_model_mjx_refuses_runs_on_c():
    """Heightfield against cylinder (as dm_control's quadruped has) is refused by
    impl "jax"; MuJoCo C runs it, equal to native."""
    m = mujoco.MjModel.from_xml_string(HFIELD_CYLINDER)
    with pytest.raises((ValueError, NotImplementedError)):
        MultiEnvRunner(m, 2, impl="jax").step()
    r = MultiEnvRunner(m, 2, impl="c")
    ref = Reference(m, exact(r.data))
    for _ in range(200):
        r.step()
        ref.step(np.zeros((2, 0)))
    np.testing.assert_array_equal(exact(r.data), ref.states())
    assert (r.contact_count() > 0).all()  # it came to rest on the heightfield


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
def test_env_trajectory_equals_native(autoreset):
    """The functional env (task, autoreset) steps the same physics: native
    ``mj_step`` with the controls the env sent gives the env's states, world by
    world; a world the env restarts is followed from its new start."""
    env = mjxenv.make("hopper_hop", num_envs=N, impl="c", autoreset=autoreset)
    state = mjxenv.jit_reset(env, jax.random.key(0))
    m = models.load("hopper")
    ref = Reference(m, exact(state.runner.data))
    rng = np.random.default_rng(2)
    compared = restarted = 0
    for _ in range(60):
        action = rng.uniform(-1, 1, (N, env.action_size)).astype(np.float32)
        state = mjxenv.jit_step(env, state, action)
        # the controls the env sent, held for the task's substeps
        ref.step(np.asarray(state.runner.data.ctrl), env.task.substeps)
        now = exact(state.runner.data)
        fresh = np.asarray(state.runner.episode_length) == 0  # a new start, no step yet
        np.testing.assert_array_equal(now[~fresh], ref.states()[~fresh])
        compared += int((~fresh).sum())
        restarted += int(fresh.sum())
        for i in np.flatnonzero(fresh):
            mujoco.mj_setState(ref.models[i], ref.datas[i], now[i], INTEGRATION)
    assert compared > 100 and restarted > 0  # both paths were exercised


def _timed_step(m: mujoco.MjModel) -> float:
    """Seconds MuJoCo's timer measured for one mj_step of a user's own data."""
    d = mujoco.MjData(m)
    mujoco.mj_step(m, d)
    return d.timer[mujoco.mjtTimer.mjTIMER_STEP].duration


def test_mujoco_timers_are_off_under_impl_c(monkeypatch):
    action = np.full((2, 1), 0.3, np.float32)
    r = MultiEnvRunner("cartpole", 2, impl="c", num_threads=1)
    m = models.load("cartpole")
    assert not native.timers_on() and r.backend_info["mujoco_timers"] == "off"
    assert _timed_step(m) == 0.0  # MuJoCo C's own default: no clock
    r.set_actions(action)
    r.step()
    try:
        native.set_timers(True)
        assert native.timers_on() and r.backend_info["mujoco_timers"] == "on"
        assert _timed_step(m) > 0.0
        timed = MultiEnvRunner("cartpole", 2, impl="c", num_threads=1)  # the same host
        assert native.timers_on()
        timed.set_actions(action)
        timed.step()  # the same physics with the clock read
        np.testing.assert_array_equal(exact(timed.state.data), exact(r.state.data))
        monkeypatch.setenv(native.TIMERS_ENV, "1")
        native.Host(m, 1, False)  # a host made now keeps them
        assert native.timers_on()
        monkeypatch.delenv(native.TIMERS_ENV)
        native.Host(m, 1, False)
        assert not native.timers_on()
    finally:
        native.set_timers(False)


def test_impl_spellings_and_threads():
    r = MultiEnvRunner("cartpole", 2, impl="cpp", num_threads=1)
    assert r.impl == "c"
    info = r.backend_info
    assert info["impl"] == "c" and info["num_threads"] == 1
    assert info["physics_dtype"] == "float64" and "arena" in info["contacts"]
    with pytest.raises(TypeError, match="num_threads must be an int"):
        MultiEnvRunner("cartpole", 2, impl="c", num_threads=1.5)
