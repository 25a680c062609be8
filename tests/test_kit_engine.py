"""The engine half of the sim-to-real kit: action latency, random pushes, MuJoCo
state vectors in and out, forward kinematics on reset, contacts switched off.

Compiles are the cost, so one module-scoped runner, ``kit``, serves most tests: a
motor-driven slider beside a box on a free joint above a floor, with every term on
(random latency, pushes on the box, damping and the box geom's offset randomized
on reset). Each test starts from a reset and leaves the runner as it found it. The
kit's terms act outside the physics, so ``kit`` steps on impl "c", which compiles no
physics; ``kit_jax`` is the same runner on impl "jax" for what only that impl has
(MJX's state vectors, worlds sharded over devices).
"""

import jax
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import CompileCounter, MultiEnvRunner, engine, tasks
from mjxrunner.engine import core
from mjxrunner.engine.events import Latency, Pushes
from mjxrunner.engine.params import Term
from mjxrunner.rl import env as E

N = 4
SEED = 1  # gives the four worlds different delays (checked below)

PHYSICS = mujoco.mjtState.mjSTATE_PHYSICS
FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION

# A slider pushed by a motor (the latency's subject, kept off the floor) and a box
# on a free joint above a floor (the pushes' and contacts' subject). The box geom
# sits off its body frame, with the inertia at the body frame, so that MuJoCo C
# reads its randomized offset (a geom compiled at its body's frame keeps that frame).
KIT_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="cart" pos="1 0 0.5">
      <joint name="slider" type="slide" axis="1 0 0" damping="0.1"/>
      <geom type="sphere" size="0.05" mass="1" contype="0" conaffinity="0"/>
    </body>
    <body name="box" pos="0 0 0.3">
      <freejoint name="root"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.0067 0.0067 0.0067"/>
      <geom name="box" type="box" size="0.1 0.1 0.1" pos="0 0 0.01"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slider" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
BOX_GEOM = 2
LATENCY = Latency(0, 3)
PUSHES = Pushes(interval=(2, 5), velocity=((-1.0, 1.0), (-1.0, 1.0)))  # the box's x, y
TERMS = [
    Term("dof_damping", 0.5, 2.0),
    Term("geom_pos", -0.05, 0.05, operation="add", index=(BOX_GEOM, 2)),
]
CART_PUSHES = Pushes(interval=(3, 6), velocity=((-0.5, 0.5),), joint="slider")


def kit_runner(impl: str = "c", **options) -> MultiEnvRunner:
    m = mujoco.MjModel.from_xml_string(KIT_XML)
    r = MultiEnvRunner(m, N, impl=impl, seed=SEED, latency=LATENCY, pushes=PUSHES, **options)
    r.set_randomization(TERMS, at_startup=False)
    return r


@pytest.fixture(scope="module")
def kit():
    return kit_runner()


@pytest.fixture(scope="module")
def kit_jax():
    return kit_runner("jax")


def with_rng(r: MultiEnvRunner, key: int) -> None:
    """Gives every world of ``r`` the stream ``split(key(key), N)[i]`` (tests only)."""
    keys = np.asarray(core.init_keys(jax.random.key(key), r.num_envs))
    r._eng = r._eng.replace(state=r.state.replace(rng=r._put(keys)))


def commands(t: int) -> np.ndarray:
    """Distinct ``(N, 1)`` commands at step ``t``, within the motors' ctrlrange."""
    return (((t + 1) * 0.05 + 0.01 * np.arange(N)) * (-1) ** t)[:, None].astype(np.float32)


# --- action latency --------------------------------------------------------------------


def test_a_delayed_command_reaches_the_physics_exactly_k_steps_late(kit):
    kit.reset_all()
    delay = np.asarray(kit.state.latency.delay)
    assert len(set(delay.tolist())) > 1 and set(delay.tolist()) <= {0, 1, 2, 3}
    start = np.asarray(kit.control).copy()  # the start's ctrl fills a fresh queue
    queue = np.asarray(kit.state.latency.queue)
    assert queue.shape == (N, LATENCY.high + 1, 1)
    np.testing.assert_array_equal(queue, np.broadcast_to(start[:, None], queue.shape))
    sent = []
    for t in range(8):
        kit.set_actions(commands(t))
        kit.step()
        sent.append(commands(t))
        applied = np.asarray(kit.data.ctrl)
        for i in range(N):
            k = t - delay[i]
            expected = sent[k][i] if k >= 0 else start[i]
            np.testing.assert_array_equal(applied[i], expected, err_msg=f"world {i}, step {t}")
    # the command is what the runner holds; the physics got the delayed one
    np.testing.assert_array_equal(np.asarray(kit.control), commands(7))


def test_delays_are_drawn_on_each_reset_from_each_world_stream(kit):
    kit.reset_all()
    seen = set()
    for _ in range(10):
        rng, delay = np.asarray(kit.state.rng), np.asarray(kit.state.latency.delay)
        kit.reset_envs([1, 3])
        new_rng, new_delay = np.asarray(kit.state.rng), np.asarray(kit.state.latency.delay)
        # worlds not reset keep their stream and delay; the reset ones advance
        np.testing.assert_array_equal(new_rng[[0, 2]], rng[[0, 2]])
        np.testing.assert_array_equal(new_delay[[0, 2]], delay[[0, 2]])
        assert (new_rng[[1, 3]] != rng[[1, 3]]).any(axis=1).all()
        seen |= set(new_delay[[1, 3]].tolist())
    assert seen == {0, 1, 2, 3}  # every delay of the range turns up
    # A draw depends on the world's own stream only: two worlds given the same
    # stream draw the same delay and push time, whatever their index.
    rng = np.asarray(kit.state.rng).copy()
    rng[3] = rng[1]
    kit._eng = kit._eng.replace(state=kit.state.replace(rng=kit._put(rng)))
    kit.reset_envs([1, 3])
    s = kit.state
    assert s.latency.delay[1] == s.latency.delay[3]
    assert s.pushes.countdown[1] == s.pushes.countdown[3]
    np.testing.assert_array_equal(np.asarray(s.rng[1]), np.asarray(s.rng[3]))


def test_a_fixed_delay_draws_nothing_and_zero_is_off(slider3):
    fixed = MultiEnvRunner(slider3, 2, impl="c", latency=2)
    assert fixed.latency == Latency(2, 2) and fixed.state.pushes is None
    np.testing.assert_array_equal(np.asarray(fixed.state.latency.delay), [2, 2])
    plain = MultiEnvRunner(slider3, 2, impl="c", latency=0)
    assert plain.state.latency is None and plain.latency is None  # no queue at all
    # a fixed delay leaves the streams as a runner without latency has them
    rng = np.asarray(plain.state.rng)
    np.testing.assert_array_equal(np.asarray(fixed.state.rng), rng)


def test_latency_and_pushes_set_later_reshape_the_state(slider3):
    r = MultiEnvRunner(slider3, 2, impl="c")
    rng = np.asarray(r.state.rng)
    with pytest.raises(TypeError, match="Latency"):
        r.set_latency("soon")
    assert r.state.latency is None and r.latency is None  # the refused call changed nothing
    r.set_latency(Latency(1, 3))
    for s in (r.state, r._default):  # the snapshot that resets restore has the queue too
        assert s.latency.queue.shape == (2, 4, 3)
    assert set(np.asarray(r.state.latency.delay).tolist()) <= {1, 2, 3}
    assert (np.asarray(r.state.rng) != rng).any(axis=1).all()  # drawn from each stream
    r.set_pushes(Pushes(2, ((-1, 1),), joint="j0"))
    np.testing.assert_array_equal(np.asarray(r.state.pushes.countdown), [2, 2])
    assert r.latency == Latency(1, 3)  # kept
    r.set_latency(None)
    assert r.state.latency is None and r._default.latency is None
    assert r.pushes == Pushes(2, ((-1, 1),), joint="j0")


# --- pushes ------------------------------------------------------------------------------


def test_pushes_happen_at_the_drawn_steps_only(kit):
    kit.reset_all()
    lo, hi = PUSHES.interval
    countdown = np.asarray(kit.state.pushes.countdown)
    assert ((countdown >= lo) & (countdown <= hi)).all()
    pushes = [[] for _ in range(N)]
    for t in range(1, 26):
        due = np.asarray(kit.state.pushes.countdown) == 1
        before = np.asarray(kit.data.qvel)
        kit.step(collide=False)  # free flight: only pushes change horizontal velocity
        after = np.asarray(kit.data.qvel)
        np.testing.assert_array_equal(np.asarray(kit.state.pushes.pushed), due)
        kick = after[:, 1:3] - before[:, 1:3]  # the box's dofs follow the slider's
        assert (np.abs(kick[due]) > 0).all() and (np.abs(kick) <= 1 + 1e-6).all()
        np.testing.assert_allclose(kick[~due], 0, atol=1e-6)
        np.testing.assert_allclose(after[:, 4:], 0, atol=1e-5)  # no spin kicked
        for i in np.flatnonzero(due):
            pushes[i].append(t)
    for i in range(N):
        gaps = np.diff([0, *pushes[i]])
        assert len(gaps) >= 4 and ((gaps >= lo) & (gaps <= hi)).all(), pushes[i]
    assert len({tuple(p) for p in pushes}) > 1  # the worlds keep their own clocks


# --- reproducibility, sharding, rollouts, recompiles --------------------------------------


def script(r: MultiEnvRunner) -> list:
    """Steps and resets that use every term; host copies of what they produce."""
    with_rng(r, 99)
    r.reset_all()
    out = []
    for t in range(10):
        r.set_actions(commands(t))
        r.step()
        if t == 4:
            r.reset_envs([1, 2])
        s = r.state
        out.append(
            r.to_numpy((s.data.qpos, s.data.qvel, s.data.ctrl, s.rng, s.latency, s.pushes, r.model))
        )
    r.step(collide=np.array([True, False, True, False]))
    vec = r.get_state(INTEGRATION)
    r.set_state(vec[[1, 0]], env_ids=[0, 1], spec=INTEGRATION)
    out.append((vec, r.get_state(INTEGRATION), r.to_numpy(r.data.xpos)))
    return out


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_same_seed_reproduces_bit_for_bit_sharded_or_not(kit, kit_jax):
    assert_same(script(kit), script(kit))
    assert jax.device_count() >= 2
    first = script(kit_jax)
    assert_same(first, script(kit_jax))
    sharded = kit_runner("jax", devices=2)
    assert sharded.state.latency.queue.sharding.spec[0] == "worlds"
    assert_same(first, script(sharded))


def test_rollout_applies_latency_and_pushes_like_steps(kit):
    actions = np.stack([commands(t) for t in range(6)])
    with_rng(kit, 5)
    kit.reset_all()
    kit.rollout(actions, 6)
    rolled = kit.to_numpy((kit.data.qpos, kit.data.ctrl, kit.state.latency, kit.state.pushes))
    with_rng(kit, 5)
    kit.reset_all()
    for u in actions:
        kit.set_actions(u)
        kit.step()
    stepped = kit.to_numpy((kit.data.qpos, kit.data.ctrl, kit.state.latency, kit.state.pushes))
    assert_same(rolled, stepped)


def test_no_recompiles_after_warm_up_with_every_term_on(kit):
    def everything(t):
        kit.set_actions(commands(t))
        kit.step()
        kit.step(collide=np.array([True, False, True, False]))
        kit.reset_envs([t % N])
        kit.reset_all()
        kit.set_state(kit.get_state(INTEGRATION), spec=INTEGRATION)

    everything(0)
    with CompileCounter() as c:
        for t in range(1, 3):
            everything(t)
    assert c.count == 0


# --- MuJoCo state vectors ------------------------------------------------------------------


def test_get_state_matches_native_mj_getState(kit_jax):
    kit = kit_jax
    kit.reset_all()
    for t in range(5):
        kit.set_actions(commands(t))
        kit.step()
    m = kit.mj_model
    natives = mjx.get_data(m, kit.data)
    for spec in (FULL, INTEGRATION):
        ours = kit.get_state(spec)
        assert ours.shape == (N, mujoco.mj_stateSize(m, spec))
        for i, d in enumerate(natives):
            d.ctrl[:] = np.asarray(kit.control)[i]  # the command, not the delayed one
            native = np.empty(mujoco.mj_stateSize(m, spec))
            mujoco.mj_getState(m, d, native, spec)
            np.testing.assert_array_equal(ours[i], native.astype(ours.dtype), err_msg=f"{i}")
        np.testing.assert_array_equal(kit.get_state(spec, env_ids=[3, 1]), ours[[3, 1]])


def recorded_states(m: mujoco.MjModel, spec, n: int) -> np.ndarray:
    """``n`` native states of the slider under a changing force and the box landing."""
    d = mujoco.MjData(m)
    out = []
    for t in range(n * 9):
        d.ctrl[:] = 0.8 * np.sin(0.3 * t)
        mujoco.mj_step(m, d)
        if t % 9 == 8:
            state = np.empty(mujoco.mj_stateSize(m, spec))
            mujoco.mj_getState(m, d, state, spec)
            out.append(state)
    return np.stack(out)


def test_set_state_round_trips_native_states(kit_jax):
    kit = kit_jax
    kit.reset_all()
    m = kit.mj_model
    states = recorded_states(m, INTEGRATION, N)
    order = [2, 0, 3, 1]
    kit.set_state(states, env_ids=order, spec=INTEGRATION)
    back = kit.get_state(INTEGRATION, env_ids=order)
    quat = slice(1 + 4, 1 + 8)  # time, then the slider's qpos, the box's position, its quat
    exact = np.ones(states.shape[1], bool)
    exact[quat] = False
    np.testing.assert_array_equal(back[:, exact], states[:, exact].astype(back.dtype))
    # update_fk normalizes the quaternion in the runner's float type
    np.testing.assert_allclose(back[:, quat], states[:, quat], rtol=0, atol=2e-7)
    # the kinematics follow the new qpos, as a native forward pass; ctrl was set too
    for row, i in enumerate(order):
        d = mujoco.MjData(m)
        mujoco.mj_setState(m, d, states[row], INTEGRATION)
        mujoco.mj_forward(m, d)
        np.testing.assert_allclose(np.asarray(kit.data.xpos)[i], d.xpos, atol=1e-5)
        np.testing.assert_allclose(np.asarray(kit.control)[i], d.ctrl, atol=1e-7)


def test_bad_state_input_is_refused_and_changes_nothing(kit):
    kit.reset_all()
    size = mujoco.mj_stateSize(kit.mj_model, PHYSICS)
    before = kit.get_state(INTEGRATION)
    good = np.zeros((2, size))
    bad = [
        (dict(states=good[:1], env_ids=[0, 1], spec=PHYSICS), ValueError, "shape"),
        (dict(states=good, env_ids=[0, 0], spec=PHYSICS), ValueError, "unique"),
        (dict(states=good, env_ids=[0, N], spec=PHYSICS), ValueError, "lie in"),
        (dict(states=good + np.nan, env_ids=[0, 1], spec=PHYSICS), ValueError, "finite"),
        (dict(states=good, env_ids=[0, 1], spec=0), ValueError, "nonzero"),
        (dict(states=good, env_ids=[0, 1], spec=1 << 20), ValueError, "bitmask"),
        (dict(states=good, env_ids=[0, 1], spec="qpos"), TypeError, "mjtState"),
        (dict(states=good, env_ids=[0, 1], spec=PHYSICS, update_fk=1), TypeError, "bool"),
        (dict(states=good, spec=PHYSICS), ValueError, "shape"),  # all worlds: (N, size)
    ]
    for kwargs, error, match in bad:
        with pytest.raises(error, match=match):
            kit.set_state(**kwargs)
    with pytest.raises(TypeError, match="mjtState"):
        kit.get_state(True)
    with pytest.raises(ValueError, match="lie in"):
        kit.get_state(PHYSICS, env_ids=[7])
    np.testing.assert_array_equal(kit.get_state(INTEGRATION), before)


def test_bad_event_options_are_refused():
    bad = [
        (dict(latency=-1), ValueError, "low"),
        (dict(latency=1.5), TypeError, "Latency"),
        (dict(pushes=Pushes((1, 2), ((0, 1),), joint="nope")), ValueError, "not in the model"),
        (dict(pushes=Pushes((1, 2), ((0, 1),))), ValueError, "no free joint|has none"),
        (dict(pushes=Pushes((1, 2), ((0, 1), (0, 1)), "slider")), ValueError, "dof"),
        (dict(pushes="often"), TypeError, "Pushes"),
        (dict(collision_enabled=0), TypeError, "bool"),
    ]
    for kwargs, error, match in bad:
        with pytest.raises(error, match=match):
            MultiEnvRunner("cartpole", 2, **kwargs)
    with pytest.raises(ValueError, match="fewest"):
        Pushes((5, 2), ((0, 1),))
    with pytest.raises(ValueError, match=r"in \[1, "):
        Pushes(0, ((0, 1),))
    with pytest.raises(ValueError, match="low > high"):
        Pushes(3, ((1, 0),))
    with pytest.raises(TypeError, match="finite"):
        Pushes(3, ((0, float("inf")),))
    with pytest.raises(ValueError, match="high"):
        Latency(3, 1)
    with pytest.raises(ValueError, match="low must be in"):
        Latency(-1)
    with pytest.raises(ValueError, match="<= 1024"):
        Latency(1, 2000)


# --- contacts and kinematics --------------------------------------------------------------


def test_collisions_off_lets_the_box_fall_through_the_floor(kit):
    kit.reset_all()
    with pytest.raises(ValueError, match="shape"):
        kit.step(collide=np.ones(N + 1, bool))
    with pytest.raises(TypeError, match="bool"):
        kit.step(collide=np.ones(N))
    for _ in range(60):
        kit.step(collide=np.array([True, False, True, False]))
    z = np.asarray(kit.data.qpos)[:, 3]  # the box's height
    assert (z[[0, 2]] > 0.05).all() and (z[[1, 3]] < -0.5).all(), z
    # deep in the floor, yet no contact is active in the worlds that do not collide
    assert (kit.contact_count()[[1, 3]] == 0).all()
    # the env's switch is static config, turned into the same flags
    config = kit.engine.config
    off = config.replace(options=config.options.replace(collision_enabled=False))
    np.testing.assert_array_equal(engine.collide_flags(off, None, N), np.zeros(N, bool))
    with pytest.warns(DeprecationWarning, match="they are options"):
        assert config.replace(collisions=False) == off  # its spelling when it was a field
    assert engine.collide_flags(kit.engine.config, None, N) is None  # the plain step
    # the runner's setting holds across resets, until switched back
    kit.set_collision_enabled(False)
    kit.reset_all()
    assert not kit.collision_enabled
    for _ in range(60):
        kit.step()
    assert (np.asarray(kit.data.qpos)[:, 3] < -0.5).all()
    kit.set_collision_enabled(True)
    kit.reset_all()
    for _ in range(60):
        kit.step()
    assert (np.asarray(kit.data.qpos)[:, 3] > 0.05).all()


def native_forward(model, world: int, qpos: np.ndarray) -> mujoco.MjData:
    """A native forward pass of ``world`` with its box geom offset."""
    m = mujoco.MjModel.from_xml_string(KIT_XML)
    m.geom_pos[BOX_GEOM] = np.asarray(model.geom_pos)[world, BOX_GEOM]
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_forward(m, d)
    return d


def test_resets_recompute_kinematics_with_the_redrawn_parameters(kit):
    with_rng(kit, 7)  # draws that move every box geom by more than a millimetre
    kit.reset_all()
    for ids in ([1], None):  # reset_envs, then reset_all
        before = np.asarray(kit.data.geom_xpos).copy()
        kit.reset_all() if ids is None else kit.reset_envs(ids)
        offset = np.asarray(kit.model.geom_pos)[:, BOX_GEOM, 2]
        moved = np.abs(offset - kit.mj_model.geom_pos[BOX_GEOM, 2])
        assert (moved > 1e-3).all() and len(set(offset.tolist())) == N  # redrawn
        qpos, geom_xpos, xpos = (
            np.asarray(x) for x in (kit.data.qpos, kit.data.geom_xpos, kit.data.xpos)
        )
        for i in range(N) if ids is None else ids:
            native = native_forward(kit.model, i, qpos[i])
            np.testing.assert_allclose(geom_xpos[i], native.geom_xpos, atol=1e-5, err_msg=f"{i}")
            np.testing.assert_allclose(xpos[i], native.xpos, atol=1e-5)
        if ids is not None:  # worlds not reset keep their frames
            np.testing.assert_array_equal(geom_xpos[[0, 2, 3]], before[[0, 2, 3]])
    with pytest.raises(TypeError, match="update_fk"):
        kit.reset_envs([0], update_fk="yes")


# --- checkpoints ---------------------------------------------------------------------------


def test_checkpoints_keep_the_events(slider3, tmp_path):
    r = MultiEnvRunner(
        slider3, 2, impl="c", latency=Latency(1, 3), pushes=Pushes(2, ((-1, 1),), joint="j0")
    )
    r.set_collision_enabled(False)
    for t in range(3):
        r.set_actions(np.full((2, 3), 0.1 * t))
        r.step()
    r.save(tmp_path / "kit.npz")
    loaded = MultiEnvRunner.load(tmp_path / "kit.npz")
    assert loaded.latency == r.latency and loaded.pushes == r.pushes
    assert not loaded.collision_enabled
    assert_same((r.state.latency, r.state.pushes), (loaded.state.latency, loaded.state.pushes))
    for runner in (r, loaded):
        for t in range(4):
            runner.set_actions(np.full((2, 3), -0.1 * t))
            runner.step()
    assert_same((r.data.qpos, r.state), (loaded.data.qpos, loaded.state))


# --- the functional env --------------------------------------------------------------------


def test_the_env_delays_actions_and_pushes_through_the_engine(tmp_path):
    task = tasks.get("cartpole_balance")
    env = E.make(task, N, impl="c", latency=Latency(1, 3), pushes=CART_PUSHES)
    s = E.jit_reset(env, jax.random.key(4))
    delay = np.asarray(s.runner.latency.delay)
    assert set(delay.tolist()) <= {1, 2, 3} and len(set(delay.tolist())) > 1
    start = np.asarray(s.runner.ctrl).copy()
    sent = []
    for t in range(6):
        due = np.asarray(s.runner.pushes.countdown) == 1
        s = E.jit_step(env, s, commands(t))
        sent.append(commands(t))
        np.testing.assert_array_equal(np.asarray(s.runner.pushes.pushed), due)
        for i in range(N):
            k = t - delay[i]
            expected = sent[k][i] if k >= 0 else start[i]
            np.testing.assert_array_equal(np.asarray(s.runner.data.ctrl)[i], expected)
    # a restart draws a new delay from the world's stream and refills its queue
    rng = np.asarray(s.runner.rng)
    s = E.jit_reset_worlds(env, s, np.array([False, True, False, False]))
    assert (np.asarray(s.runner.rng)[1] != rng[1]).any()
    np.testing.assert_array_equal(np.asarray(s.runner.rng)[[0, 2, 3]], rng[[0, 2, 3]])
    np.testing.assert_array_equal(np.asarray(s.runner.latency.queue)[1], 0)
    # the state vector of an env state, through the engine's pure function
    spec = engine.state_spec(env.host.mj_model, PHYSICS)
    vec = engine.get_state(env.config, env.model, s.runner, spec)
    np.testing.assert_array_equal(
        np.asarray(vec), np.concatenate([s.runner.data.qpos, s.runner.data.qvel], axis=1)
    )
    # checkpoints keep the events
    E.save(tmp_path / "env.npz", env, s)
    env2, s2 = E.load(tmp_path / "env.npz")
    assert env2.config.latency == env.config.latency and env2.config.pushes == env.config.pushes
    assert_same(E.jit_step(env, s, commands(0)), E.jit_step(env2, s2, commands(0)))


# --- impl warp -------------------------------------------------------------------------------


def test_warp_delays_pushes_and_state_vectors():
    r = MultiEnvRunner("cartpole", N, impl="warp", seed=SEED, latency=2, pushes=CART_PUSHES)
    sent = []
    for t in range(4):
        due = np.asarray(r.state.pushes.countdown) == 1
        r.set_actions(commands(t))
        r.step()
        sent.append(commands(t))
        np.testing.assert_array_equal(np.asarray(r.state.pushes.pushed), due)
        np.testing.assert_array_equal(np.asarray(r.data.ctrl), sent[t - 2] if t >= 2 else 0)
    states = r.get_state(FULL)
    np.testing.assert_array_equal(
        states, np.concatenate([np.asarray(r.data.time)[:, None], r.data.qpos, r.data.qvel], 1)
    )
    r.set_state(states[[3, 2]], env_ids=[0, 1], spec=FULL)
    np.testing.assert_array_equal(r.get_state(FULL, env_ids=[0, 1]), states[[3, 2]])
    # the kinematics follow (a step leaves them at the state before its integration)
    cart = np.asarray(r.data.xpos)[:, 1]
    np.testing.assert_allclose(cart[:2], [[x, 0, 1] for x in states[[3, 2], 1]], atol=1e-6)
    r.reset_envs([2])  # from the snapshot, kinematics recomputed by Warp
    np.testing.assert_array_equal(r.get_state(FULL, env_ids=[2])[0, 1:], 0)
    np.testing.assert_array_equal(np.asarray(r.data.xpos)[2, 1], [0, 0, 1])
