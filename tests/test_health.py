"""Unstable worlds: detection inside the step, isolation, policies, counters."""

import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import CompileCounter, MultiEnvRunner
from mjxrunner.engine import core, guards, health

N = 4
BAD = 1  # the world driven to NaN

# Four sliders on limited joints: the limits give the constraint solver work, so a
# world that never converges (NaN) makes the batched solver loop run longest.
# A strong motor: an absurd control becomes an infinite force in float32.
XML = """
<mujoco>
  <option timestep="0.01"><flag contact="disable"/></option>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint name="a" type="slide" axis="0 0 1" limited="true" range="-0.5 0.5"/>
      <geom type="sphere" size="0.1" mass="1"/>
    </body>
    <body name="b" pos="1 0 1">
      <joint name="b" type="hinge" axis="0 1 0" limited="true" range="-1 1"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="a" gear="100"/><motor joint="b"/></actuator>
</mujoco>
"""


def actions(bad: bool) -> np.ndarray:
    """Mild controls for every world; with ``bad``, an absurd one for world BAD."""
    u = np.tile(np.array([[0.5, -0.2]], np.float32), (N, 1)) * np.arange(1, N + 1)[:, None]
    if bad:
        u[BAD, 0] = 1e38  # finite, accepted; times the gear it overflows float32
    return u


@pytest.fixture(scope="module")
def pair():
    """Two runners of the same model and seed: one gets the absurd control."""
    return MultiEnvRunner(XML, N, seed=7), MultiEnvRunner(XML, N, seed=7)


@pytest.fixture
def fresh(pair):
    for r in pair:
        r.reset_all()
        r.clear_actions()
    return pair


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


# --- detection, pure ------------------------------------------------------------------


@pytest.fixture(scope="module")
def batched():
    m = mujoco.MjModel.from_xml_string(XML)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    data = mjx.put_data(m, d, impl="jax")
    return mjx.put_model(m, impl="jax"), core.init(data, 6, jax.random.key(0), m.nu)


def test_unstable_flags_exactly_the_bad_worlds(batched):
    _, state = batched
    d = state.data
    d = d.replace(
        qpos=d.qpos.at[1, 0].set(jnp.nan),
        qvel=d.qvel.at[2, 1].set(jnp.inf).at[3, 0].set(-2e10).at[5, 0].set(9e9),
        qacc=d.qacc.at[4, 1].set(-jnp.inf),
    )
    np.testing.assert_array_equal(health.unstable(d), [0, 1, 1, 1, 1, 0])
    # a lower bound catches world 5's 9e9 too; no bound keeps only non-finite ones
    np.testing.assert_array_equal(health.unstable(d, 1e3), [0, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(health.unstable(d, float("inf")), [0, 1, 1, 0, 1, 0])


def test_the_instability_guard_validates_its_bound():
    bound = lambda g: g.detect.max_qvel  # noqa: E731
    assert bound(guards.instability(5)) == 5.0 and guards.instability(5) == guards.instability(5.0)
    for bad, error in [(0, ValueError), (-1.0, ValueError), (np.nan, ValueError)]:
        with pytest.raises(error, match="max_qvel"):
            guards.instability(bad)
    with pytest.raises(TypeError, match="max_qvel"):
        guards.instability("1e3")
    with pytest.raises(ValueError, match="policy"):
        guards.instability(1.0, policy="sometimes")


def test_nan_injected_in_one_world_leaves_the_others_bit_identical(batched):
    model, state = batched
    run = jax.jit(core.rollout, static_argnums=(3,))
    u = jnp.asarray(np.linspace(-1, 1, 12 * 6 * 2, dtype=np.float32).reshape(12, 6, 2))
    clean, (qpos_c, _) = run(model, state, u, 12)
    poisoned = state.replace(data=state.data.replace(qvel=state.data.qvel.at[3, 1].set(jnp.nan)))
    dirty, (qpos_d, _) = run(model, poisoned, u, 12)
    others = np.array([0, 1, 2, 4, 5])
    for a, b in zip(leaves(clean.data), leaves(dirty.data), strict=True):
        if a.ndim and a.shape[0] == 6:
            np.testing.assert_array_equal(a[others], b[others])
    np.testing.assert_array_equal(qpos_c[:, others], qpos_d[:, others])
    assert np.isnan(np.asarray(dirty.data.qpos[3])).any()
    np.testing.assert_array_equal(dirty.unstable, [0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(dirty.truncated, [0, 0, 0, 1, 0, 0])
    # counted once: it stayed unstable, it did not become unstable 12 times
    np.testing.assert_array_equal(dirty.health.unstable, [0, 0, 0, 1, 0, 0])
    assert not np.asarray(clean.unstable).any() and not np.asarray(clean.truncated).any()


def test_no_instability_guard_skips_detection_and_reset_clears_the_flag(batched):
    model, state = batched
    poisoned = state.replace(data=state.data.replace(qvel=state.data.qvel.at[0, 0].set(jnp.nan)))
    only_overflow = (guards.overflow(),)
    unchecked = jax.jit(core.step, static_argnames="guards")(model, poisoned, guards=only_overflow)
    assert not np.asarray(unchecked.unstable).any()
    np.testing.assert_array_equal(unchecked.health.unstable, 0)
    # a flagged world: reset clears its flag, keeps its count
    counts = unchecked.health
    flagged = unchecked.replace(
        tripped={**unchecked.tripped, "unstable": jnp.arange(6) == 0},
        health=counts.replace(events={**counts.events, "unstable": jnp.arange(6)}),
    )
    out = core.reset(flagged, state, jnp.array([True] + [False] * 5))
    assert not np.asarray(out.unstable).any()
    np.testing.assert_array_equal(out.health.unstable, np.arange(6))
    np.testing.assert_array_equal(out.data.qvel[0], state.data.qvel[0])


# --- the runner ---------------------------------------------------------------------


def test_absurd_control_blows_up_one_world_only(fresh):
    dirty, clean = fresh
    resets = dirty.health.reset_count  # the fixture's reset_all counted once
    dirty.set_actions(actions(bad=True))
    clean.set_actions(actions(bad=False))
    others = np.array([i for i in range(N) if i != BAD])
    for _ in range(15):
        dirty.step()
        clean.step()
        for a, b in zip(leaves(dirty.data), leaves(clean.data), strict=True):
            if a.ndim and a.shape[0] == N:
                np.testing.assert_array_equal(a[others], b[others])
    q = np.asarray(dirty.data.qpos[BAD])
    assert not np.isfinite(q).all()
    report = dirty.health
    np.testing.assert_array_equal(report.unstable, np.arange(N) == BAD)
    np.testing.assert_array_equal(report.unstable_count, np.arange(N) == BAD)
    np.testing.assert_array_equal(dirty.truncated, np.arange(N) == BAD)  # policy "truncate"
    assert not clean.health.unstable.any() and not clean.truncated.any()
    assert report.totals()["unstable_events"] == 1

    # the next reset of truncated worlds replaces it; the counts survive resets
    dirty.reset(dirty.truncated)
    after = dirty.health
    assert np.isfinite(np.asarray(dirty.data.qpos)).all() and not after.unstable.any()
    np.testing.assert_array_equal(after.reset_count - resets, np.arange(N) == BAD)
    np.testing.assert_array_equal(after.unstable_count, np.arange(N) == BAD)
    dirty.reset_all()
    np.testing.assert_array_equal(dirty.health.reset_count - resets, 1 + (np.arange(N) == BAD))
    np.testing.assert_array_equal(dirty.health.unstable_count, np.arange(N) == BAD)


def test_rollout_truncates_and_counts(fresh):
    dirty, _ = fresh
    u = np.repeat(actions(bad=True)[None], 6, axis=0)
    counts = dirty.health.unstable_count
    dirty.rollout(u, 6)  # compiles once
    np.testing.assert_array_equal(dirty.truncated, np.arange(N) == BAD)
    np.testing.assert_array_equal(dirty.health.unstable_count - counts, np.arange(N) == BAD)
    with CompileCounter() as c:
        dirty.reset(dirty.truncated)
        dirty.rollout(u, 6)
        dirty.step()
    assert c.count == 0
    np.testing.assert_array_equal(dirty.health.unstable_count - counts, 2 * (np.arange(N) == BAD))


@pytest.fixture(scope="module")
def strict():
    """Policies that read back; equal checks (truncate=False), so one compiled step."""
    return (
        MultiEnvRunner(XML, N, seed=7, instability_policy="raise", max_qvel=1.0),
        MultiEnvRunner(XML, N, seed=7, instability_policy="warn", max_qvel=1.0),
    )


def only_bad() -> np.ndarray:
    """Zero controls (a few steps stay below max_qvel=1) but the absurd one."""
    u = np.zeros((N, 2), np.float32)
    u[BAD, 0] = 1e38
    return u


def test_raise_rolls_back_the_step(strict):
    r, _ = strict
    r.reset_all()
    r.step()
    r.set_actions(only_bad())
    before = leaves(r.state.data), np.asarray(r.state.episode_length)
    counts = r.health.unstable_count
    with pytest.raises(health.InstabilityError, match=rf"world\(s\) \[{BAD}\].*NaN/Inf"):
        r.step()
    for a, b in zip(before[0], leaves(r.state.data), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(r.episode_length, before[1])
    report = r.health  # the failed step stays readable
    np.testing.assert_array_equal(report.unstable, np.arange(N) == BAD)
    np.testing.assert_array_equal(report.unstable_count - counts, np.arange(N) == BAD)
    assert not r.truncated.any()
    with pytest.raises(health.InstabilityError):
        r.rollout(np.repeat(only_bad()[None], 2, axis=0), 2)
    np.testing.assert_array_equal(r.episode_length, before[1])
    # a sane control goes on from the rolled-back state
    r.clear_actions()
    r.step()
    assert not r.health.unstable.any() and r.episode_length[0] == before[1][0] + 1


def test_warn_warns_once_per_blow_up_and_keeps_going(strict):
    _, r = strict
    r.reset_all()
    counts = r.health.unstable_count
    r.set_actions(only_bad())
    with pytest.warns(health.InstabilityWarning, match=rf"\[{BAD}\]"):
        r.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # still unstable, but no new event: silent
        r.step()
    assert r.episode_length[0] == 2 and not r.truncated.any()
    np.testing.assert_array_equal(r.health.unstable, np.arange(N) == BAD)
    r.reset(np.arange(N) == BAD)
    r.set_actions(only_bad())  # the reset restored its control too
    with pytest.warns(health.InstabilityWarning):
        r.step()  # a new blow-up after the reset is a new event
    np.testing.assert_array_equal(r.health.unstable_count - counts, 2 * (np.arange(N) == BAD))


def test_bound_on_qvel_is_configurable(strict):
    _, r = strict
    assert r.max_qvel == 1.0 and r.instability_policy == "warn"
    r.reset_all()
    u = np.zeros((N, 2), np.float32)
    u[0, 1] = 5.0  # world 0's hinge spins up past 1 rad/s, finite
    r.set_actions(u)
    with pytest.warns(health.InstabilityWarning, match=r"\[0\].*\|qvel\| > 1"):
        for _ in range(3):
            r.step()
    np.testing.assert_array_equal(r.health.unstable, np.arange(N) == 0)
    assert np.isfinite(np.asarray(r.data.qvel)).all()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"instability_policy": "ignore"}, ValueError, "instability_policy"),
        ({"instability_policy": None}, ValueError, "instability_policy"),
        ({"max_qvel": 0.0}, ValueError, "max_qvel"),
        ({"max_qvel": "big"}, TypeError, "max_qvel"),
    ],
)
def test_bad_policy_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiEnvRunner(XML, 2, **kwargs)
