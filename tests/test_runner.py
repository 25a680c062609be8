"""MultiEnvRunner: construction, validation, double buffering, resets, layout.

What is checked here is the runner's own, the same for every impl, so the runners run
on impl "c" (:data:`IMPL`: MuJoCo's C step, no physics compiled). The model features
MJX cannot run are checked on impl "jax", and runners of one model sharing compiled
functions, and packed steps, on both."""

import functools

import jax
import mujoco
import numpy as np
import pytest

from mjxrunner import CompileCounter, MultiEnvRunner
from mjxrunner.engine import models

IMPL = "c"  # the impl of the runners here but the checks named above
N = 4


@pytest.fixture(scope="module")
def runner():
    return MultiEnvRunner("cartpole", N, seed=3, impl=IMPL)


@pytest.fixture
def fresh(runner):
    """The shared runner, reset to its construction state."""
    runner.reset_all()
    runner.clear_actions()
    return runner


def snapshot(r):
    """Host copies of every buffer the runner owns."""
    leaves = jax.tree.leaves((r.state, r._scratch, r.engine.default, r.model))
    return [np.array(x) for x in leaves] + [r.env_origins, r.layout]


def assert_unchanged(before, r):
    after = snapshot(r)
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


# --- construction -------------------------------------------------------------------


def test_model_sources_agree(tmp_path):
    path = models.path("pendulum")
    text = path.read_text()
    (tmp_path / "p.xml").write_text(text)
    for source in ("pendulum", path, str(tmp_path / "p.xml"), text, models.load("pendulum")):
        r = MultiEnvRunner(source, 2, impl=IMPL)
        assert r.mj_model.nq == 1 and r.action_dim() == 1
        assert r.data.qpos.shape == (2, 1)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"model": "no_such_model"}, ValueError, "known models: .*cartpole"),
        ({"model": 3}, TypeError, "MjModel, an MjSpec, a name"),
        ({"model": "<mujoco><bad/></mujoco>"}, ValueError, "could not load"),
        ({"num_envs": 0}, ValueError, "num_envs must be >= 1"),
        ({"num_envs": 2.0}, TypeError, "num_envs must be an int"),
        ({"num_envs": True}, TypeError, "num_envs must be an int"),
        ({"impl": "cuda"}, ValueError, "'jax', 'warp' or 'c'"),
        ({"impl": "c", "num_threads": 0}, ValueError, "num_threads"),
        ({"impl": None}, TypeError, "impl must be"),
        ({"seed": -1}, ValueError, "seed"),
        ({"device": "tpu"}, ValueError, "no 'tpu' devices"),
        ({"device": 0}, TypeError, "device must be"),
        ({"keyframe": "nope"}, ValueError, "keyframes: \\['upright', 'hanging'\\]"),
        ({"keyframe": 5}, ValueError, "out of range"),
    ],
)
def test_constructor_rejects_bad_input(kwargs, error, match):
    args = {"model": "cartpole", "num_envs": 2, **kwargs}
    with pytest.raises(error, match=match):
        MultiEnvRunner(args.pop("model"), args.pop("num_envs"), **args)


def test_bad_warp_options_are_refused():
    with pytest.raises(ValueError, match="overflow_policy"):
        MultiEnvRunner("cartpole", 2, overflow_policy="ignore")
    with pytest.raises(ValueError, match="graph_mode"):
        MultiEnvRunner("cartpole", 2, impl="warp", graph_mode="cuda")
    with pytest.raises(ValueError, match="naccdmax"):
        MultiEnvRunner("cartpole", 2, impl="warp", naconmax=8, naccdmax=16)
    with pytest.raises(ValueError, match="nvmax"):
        MultiEnvRunner("cartpole", 2, impl="warp", nvmax=3)
    with pytest.raises(TypeError, match="njmax"):
        MultiEnvRunner("cartpole", 2, impl="warp", njmax=1.5)


def test_unsupported_model_features_are_named():
    m = models.load("pendulum")
    m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    with pytest.raises(ValueError, match="energy"):
        MultiEnvRunner(m, 2, impl="jax")


def test_keyframe_start(fresh):
    r = MultiEnvRunner("cartpole", 2, keyframe="hanging", impl=IMPL)
    np.testing.assert_allclose(np.asarray(r.data.qpos), [[0, np.pi]] * 2, atol=1e-6)
    # the initial data is complete (forward kinematics ran): the pole tip is below the cart
    assert float(r.data.site_xpos[0, 0, 2]) < 0.5


def test_properties(fresh):
    r = fresh
    assert r.num_envs == N and r.impl == IMPL and r.action_dim() == 1
    assert r.control.shape == (N, 1)
    assert r.episode_length.dtype == np.int32 and r.terminated.dtype == bool
    info = r.backend_info
    assert info["impl"] == IMPL and info["qpos_dtype"] == "float32"
    assert set(info["versions"]) == {"mujoco", "mujoco-mjx", "jax", "jaxlib", "warp-lang"}
    # NumPy copies never write back
    r.terminated[:] = True
    r.env_origins[:] = 5.0
    r.episode_length[:] = 9
    assert not r.terminated.any() and not r.env_origins.any() and not r.episode_length.any()
    assert "num_envs=4" in repr(r)


# --- actions and flags ----------------------------------------------------------------


def test_set_actions_all_and_some(fresh):
    r = fresh
    r.set_actions(np.arange(N, dtype=float)[:, None] / 10)
    np.testing.assert_allclose(r.control[:, 0], [0, 0.1, 0.2, 0.3], atol=1e-7)
    r.set_actions([[0.9], [-0.9]], env_ids=[3, 0])
    np.testing.assert_allclose(r.control[:, 0], [-0.9, 0.1, 0.2, 0.9], atol=1e-7)
    r.set_actions(np.array([[0.5]], np.float32), env_ids=np.int64(1))
    np.testing.assert_allclose(r.control[:, 0], [-0.9, 0.5, 0.2, 0.9], atol=1e-7)
    r.clear_actions(env_ids=[0])
    np.testing.assert_allclose(r.control[:, 0], [0, 0.5, 0.2, 0.9], atol=1e-7)
    r.clear_actions()
    assert not np.asarray(r.control).any()


BAD_ACTIONS = [
    (np.zeros((N, 2)), None, ValueError, r"shape \(4, 1\)"),
    (np.zeros(N), None, ValueError, "shape"),
    (np.full((N, 1), np.nan), None, ValueError, "finite"),
    (np.full((N, 1), np.inf), None, ValueError, "finite"),
    (np.full((N, 1), 1e300), None, ValueError, "overflows float32"),
    (np.zeros((N, 1), bool), None, TypeError, "real numbers"),
    (np.zeros((N, 1), complex), None, TypeError, "real numbers"),
    ([["a"]] * N, None, TypeError, "real numbers"),
    ([[0.0], [1.0, 2.0]], [0, 1], TypeError, "array-like"),
    (np.zeros((2, 1)), [0, 0], ValueError, "unique"),
    (np.zeros((2, 1)), [0, N], ValueError, r"in \[0, 4\)"),
    (np.zeros((1, 1)), [-1], ValueError, r"in \[0, 4\)"),
    (np.zeros((1, 1)), [1.0], TypeError, "integers"),
    (np.zeros((1, 1)), True, TypeError, "bool"),
    (np.zeros((1, 1)), [[1]], ValueError, "1-D"),
    (np.zeros((3, 1)), [0, 1], ValueError, r"shape \(2, 1\)"),
]


@pytest.mark.parametrize("actions, env_ids, error, match", BAD_ACTIONS)
def test_bad_actions_are_rejected_and_change_nothing(fresh, actions, env_ids, error, match):
    fresh.set_actions(np.full((N, 1), 0.25))
    before = snapshot(fresh)
    with pytest.raises(error, match=match):
        fresh.set_actions(actions, env_ids=env_ids)
    assert_unchanged(before, fresh)


def test_done_flags(fresh):
    r = fresh
    r.set_done_flags(np.array([True, False, False, True]), np.array([False, True, False, False]))
    np.testing.assert_array_equal(r.terminated, [True, False, False, True])
    np.testing.assert_array_equal(r.truncated, [False, True, False, False])
    r.reset_envs([0, 1])
    np.testing.assert_array_equal(r.terminated, [False, False, False, True])
    np.testing.assert_array_equal(r.truncated, [False, False, False, False])


@pytest.mark.parametrize(
    "terminated, truncated, error",
    [
        (np.zeros(N, int), np.zeros(N, bool), TypeError),
        (np.zeros(N + 1, bool), np.zeros(N, bool), ValueError),
        (np.zeros(N, bool), np.zeros((N, 1), bool), ValueError),
        (np.zeros(N, bool), None, TypeError),
    ],
)
def test_bad_flags_change_nothing(fresh, terminated, truncated, error):
    before = snapshot(fresh)
    with pytest.raises(error, match=r"terminated|truncated"):
        fresh.set_done_flags(terminated, truncated)
    assert_unchanged(before, fresh)


# --- stepping and double buffering ----------------------------------------------------


def test_step_double_buffers_by_donation(fresh):
    r = fresh
    r.set_actions(np.ones((N, 1)))
    r.step()
    before = np.array(r.data.qpos)
    old_scratch = r.next_data
    old_buffers = r._spare.buffers  # the packed state the next step writes into
    r.step()
    # the previous state stays readable in next_data...
    np.testing.assert_array_equal(np.asarray(r.next_data.qpos), before)
    # ...the old scratch buffers were donated to the new state, not copied...
    assert all(b.is_deleted() for b in old_buffers)
    # ...and no array handed out was donated
    assert not old_scratch.qpos.is_deleted() and not r.next_data.qpos.is_deleted()
    assert not r.data.qpos.is_deleted()
    assert not np.array_equal(np.asarray(r.data.qpos), before)
    np.testing.assert_array_equal(r.episode_length, [2] * N)
    # current, scratch and default never share a buffer
    ptrs = [
        {x.unsafe_buffer_pointer() for x in jax.tree.leaves(t)}
        for t in (r.state, r._scratch, r.engine.default)
    ]
    assert not (ptrs[0] & ptrs[1]) and not (ptrs[0] & ptrs[2]) and not (ptrs[1] & ptrs[2])


@pytest.mark.parametrize("impl", ["c", "jax"])
def test_packed_steps_equal_steps_over_the_pytree(monkeypatch, impl):
    """The packed step and the pytree step (a host guard, or a state over the
    physics' packing limit) give the same states, reads between steps included."""
    from mjxrunner.engine import backends

    physics = type(backends.of(impl))
    actions = np.linspace(-1, 1, 3 * N).reshape(3, N, 1)
    states = []
    for limit, policy, packs in (
        (physics.pack_limit, "truncate", True),  # the physics' own: N cartpoles pack
        (lambda *_: 0, "truncate", False),
        (lambda *_: None, "truncate", True),  # any size
        (lambda *_: None, "warn", False),
    ):
        monkeypatch.setattr(physics, "pack_limit", limit)
        r = MultiEnvRunner("cartpole", N, seed=3, impl=impl, instability_policy=policy)
        assert r._packs == packs
        for a in actions:
            r.set_actions(a)
            # Packed, controls wait for the step: a second call merges with the first.
            r.set_actions(a[:2] * 0.5, env_ids=[3, 0])
            r.step()
            r.step()  # none set: the controls stay
            r.reset_envs([1])
            r.set_actions(a[::-1], env_ids=[0, 2, 1, 3])
            r.step(substeps=2)
        states.append(jax.tree.map(np.asarray, (r.state, r.next_data)))
    # Impl "c" runs the same host code either way; impl "jax" compiles the packed
    # step as another program, whose fusions may round differently.
    same = (
        np.testing.assert_array_equal
        if impl == "c"
        else functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-6)
    )
    for other in states[1:]:
        jax.tree.map(same, states[0], other)


def test_pack_limits_of_each_impl(fresh):
    """XLA's impls pack on a CPU up to their limit and at any size elsewhere; impl
    "c" packs at any size where its host call writes the buffers in place (one
    device), and up to a limit where its results are copied (sharded)."""
    from mjxrunner.engine import backends
    from mjxrunner.engine.backends import base, c

    model = fresh.engine.default_model.tree  # impl "c"; XLA's impls ignore the model
    for name in ("jax", "warp"):
        assert backends.of(name).pack_limit(model, "cpu", False) == base.XLA_CPU_PACK_LIMIT
        assert backends.of(name).pack_limit(model, "gpu", False) is None
    assert backends.of("c").pack_limit(model, "cpu", False) is None
    assert backends.of("c").pack_limit(model, "cpu", True) == c.COPIED_PACK_LIMIT
    # 128 cartpoles' state is under the XLA limit, 512's over it
    assert MultiEnvRunner("cartpole", 128, impl="jax")._packs
    assert not MultiEnvRunner("cartpole", 512, impl="jax")._packs


def test_step_dt_and_substeps(fresh):
    r = fresh
    r.step(substeps=2)
    np.testing.assert_allclose(np.asarray(r.data.time), 0.02, rtol=1e-6)
    r.step(dt=0.005)
    np.testing.assert_allclose(np.asarray(r.data.time), 0.025, rtol=1e-6)
    np.testing.assert_array_equal(r.episode_length, [2] * N)
    for bad, error in [(0.0, ValueError), (np.nan, ValueError), ("0.1", TypeError)]:
        before = snapshot(r)
        with pytest.raises(error, match="dt"):
            r.step(dt=bad)
        assert_unchanged(before, r)
    with pytest.raises(ValueError, match="substeps"):
        r.step(substeps=0)


def test_rollout_on_device(fresh):
    r = fresh
    actions = np.ones((5, N, 1)) * np.linspace(-1, 1, N)[None, :, None]
    qpos, qvel = r.rollout(actions, 5)
    assert qpos.shape == (5, N, 2) and qvel.shape == (5, N, 2)
    np.testing.assert_array_equal(np.asarray(r.data.qpos), np.asarray(qpos[-1]))
    np.testing.assert_array_equal(r.episode_length, [5] * N)
    with pytest.raises(ValueError, match="actions"):
        r.rollout(np.zeros((4, N, 1)), 5)


def test_zero_recompiles_after_warmup(fresh):
    r = fresh
    rng = np.random.default_rng(0)

    def loop():
        for i in range(6):
            ids = rng.choice(N, size=1 + i % N, replace=False)
            r.set_actions(rng.uniform(-1, 1, (len(ids), 1)), env_ids=ids)
            r.step()
            r.reset_envs(ids[: i % 3])
            r.reset(rng.random(N + 1) < 0.5)
            r.set_done_flags(rng.random(N) < 0.5, rng.random(N) < 0.5)
            r.step(dt=0.01 * (1 + i), substeps=2)
            r.clear_actions(ids)
        r.reset_all()
        r.build_default()

    loop()  # warm-up compiles each function once
    with CompileCounter() as c:
        loop()
        jax.block_until_ready(r.data)
    assert c.count == 0


@pytest.mark.parametrize("impl", ["jax", "c"])
def test_runners_of_one_model_share_compiled_steps(impl):
    # The runner passes its model as leaves plus an interned treedef (see
    # runner._Treedef); a second runner of an equal model must still hit the
    # compiled step and reset of the first. On impl "c" the host model is static:
    # runners of equal models (not the same object) must share it.
    first = MultiEnvRunner(models.load("cartpole"), N, seed=3, impl=impl)
    first.step()
    first.reset(np.arange(N) < 2)
    other = MultiEnvRunner(models.load("cartpole"), N, seed=4, impl=impl)
    with CompileCounter() as c:
        other.step()
        other.reset(np.arange(N) < 2)
        jax.block_until_ready(other.data)
    assert c.count == 0


def test_step_sees_every_model_change(fresh):
    # The step reads the runner's flat copy of the model: after set_param it must
    # step with the new values, after a full reset with the default ones again.
    r = fresh
    r.set_actions(np.zeros((N, 1)))
    r.step()
    baseline = np.array(r.data.qvel)
    r.reset_all()
    r.set_param("opt.gravity", [9.81, 0.0, 0.0])  # sideways: pushes the cart along x
    r.step()
    assert np.abs(np.array(r.data.qvel)[:, 0] - baseline[:, 0]).min() > 0.05
    r.reset_all()
    r.step()
    np.testing.assert_array_equal(np.array(r.data.qvel), baseline)


# --- resets ---------------------------------------------------------------------------


def test_reset_envs_restores_only_those_worlds(fresh):
    r = fresh
    r.set_actions(np.ones((N, 1)))
    for _ in range(3):
        r.step()
    moved = np.array(r.data.qpos)
    r.reset_envs([1, 2])
    qpos = np.asarray(r.data.qpos)
    np.testing.assert_array_equal(qpos[[0, 3]], moved[[0, 3]])
    np.testing.assert_array_equal(qpos[[1, 2]], 0.0)
    np.testing.assert_array_equal(r.episode_length, [3, 0, 0, 3])
    np.testing.assert_array_equal(np.asarray(r.control)[:, 0], [1, 0, 0, 1])
    r.reset_envs([])  # nothing selected: nothing changes
    np.testing.assert_array_equal(r.episode_length, [3, 0, 0, 3])


def test_reset_all_keeps_rng_moving(fresh):
    r = fresh
    rng0 = np.array(r.state.rng)
    r.rollout(lambda s, keys: jax.vmap(lambda k: jax.random.uniform(k, (1,)))(keys), 3)
    advanced = np.array(r.state.rng)
    assert not np.array_equal(advanced, rng0)
    r.reset_all()
    np.testing.assert_array_equal(np.asarray(r.state.rng), advanced)  # never rewound
    np.testing.assert_array_equal(np.asarray(r.data.qpos), 0.0)
    np.testing.assert_array_equal(r.episode_length, 0)


def test_build_default_makes_a_new_snapshot(fresh):
    r = fresh
    r.set_actions(np.full((N, 1), 0.5))
    r.step()
    r.set_done_flags(np.ones(N, bool), np.zeros(N, bool))
    r.build_default()
    snap = np.array(r.data.qpos)
    r.step()
    r.reset_all()
    np.testing.assert_array_equal(np.asarray(r.data.qpos), snap)
    np.testing.assert_array_equal(r.episode_length, 0)  # counters are not snapshotted
    assert not r.terminated.any()
    # restore the construction defaults for the other tests
    r2 = MultiEnvRunner("cartpole", N, seed=3, impl=IMPL)
    r._eng = r._eng.replace(default=r2.engine.default)


@pytest.mark.parametrize(
    "mask, error",
    [
        (np.zeros(N - 1, bool), ValueError),
        (np.zeros(N + 2, bool), ValueError),
        (np.zeros((N, 1), bool), ValueError),
        (np.zeros(N, int), TypeError),
        ([True] * N + ["x"], TypeError),
    ],
)
def test_bad_masks_change_nothing(fresh, mask, error):
    fresh.step()
    before = snapshot(fresh)
    with pytest.raises(error, match="mask"):
        fresh.reset(mask)
    assert_unchanged(before, fresh)


@pytest.mark.parametrize(
    "ids, error", [([0, 0], ValueError), ([N], ValueError), ([0.5], TypeError)]
)
def test_bad_env_ids_change_nothing(fresh, ids, error):
    fresh.step()
    before = snapshot(fresh)
    with pytest.raises(error, match="env_ids"):
        fresh.reset_envs(ids)
    assert_unchanged(before, fresh)


# --- layout ---------------------------------------------------------------------------


def test_layouts(fresh):
    r = fresh
    qpos = np.array(r.data.qpos)
    r.set_linear_layout(2.0)
    np.testing.assert_array_equal(r.env_origins[:, 0], [0, 2, 4, 6])
    assert r.layout == "linear"
    r.set_grid_layout(1.5)  # 4 worlds -> 2 columns
    np.testing.assert_array_equal(r.env_origins[:, :2], [[0, 0], [1.5, 0], [0, 1.5], [1.5, 1.5]])
    assert r.layout == "grid"
    r.set_grid_layout(1.0, columns=3)
    np.testing.assert_array_equal(r.env_origin(3), [0, 1, 0])
    r.set_env_origins(np.ones((N, 3)))
    assert r.layout == "custom"
    np.testing.assert_array_equal(np.asarray(r.data.qpos), qpos)  # physics untouched


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda r: r.set_linear_layout(np.nan), ValueError),
        (lambda r: r.set_linear_layout("1"), TypeError),
        (lambda r: r.set_grid_layout(1.0, columns=-1), ValueError),
        (lambda r: r.set_grid_layout(1.0, columns=1.5), TypeError),
        (lambda r: r.set_env_origins(np.ones((N, 2))), ValueError),
        (lambda r: r.set_env_origins(np.full((N, 3), np.inf)), ValueError),
        (lambda r: r.env_origin(N), ValueError),
        (lambda r: r.env_origin(-1), ValueError),
    ],
)
def test_bad_layout_input_changes_nothing(fresh, call, error):
    fresh.set_linear_layout(1.0)
    before = snapshot(fresh)
    with pytest.raises(error):
        call(fresh)
    assert_unchanged(before, fresh)
