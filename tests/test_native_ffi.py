"""Impl "c"'s host call through the C++ FFI handler equals the pure_callback path.

Both paths step the same worlds (one runner each, the path chosen by
``MJXRUNNER_HOST_CALL`` when the runner is built): their
exact states and every data field must agree bit for bit, through masked resets,
per-world parameters (one of them an input of ``mj_setConst``), and with native
``mj_step`` on float64 state. A compiler that fails leaves the pure_callback path.
"""

import os
import subprocess
import sys
import textwrap

import jax
import mujoco
import numpy as np
import pytest
from test_native import DIVERGING, Reference, controls, exact

from mjxrunner import MultiEnvRunner, models
from mjxrunner.engine import native, native_ffi, packing

N = 6

pytestmark = pytest.mark.skipif(
    not native_ffi.available(), reason=f"the FFI handler did not build: {native_ffi.failure()}"
)


def runner(scene, path: str, monkeypatch, n: int = N) -> MultiEnvRunner:
    monkeypatch.setenv(native_ffi.MODE_ENV, path)
    r = MultiEnvRunner(scene, n, impl="c", seed=3)
    r.start = exact(r.data)  # where a reset takes a world
    r.step()
    assert host_of(r).ffi == (path == "ffi")
    assert r.backend_info["host_call"] == path
    return r


def host_of(r: MultiEnvRunner) -> native.Host:
    return r._eng.default_model.tree._impl.host


def assert_same(a: MultiEnvRunner, b: MultiEnvRunner, where: str) -> None:
    np.testing.assert_array_equal(exact(a.data), exact(b.data), err_msg=where)
    for path, x in jax.tree_util.tree_leaves_with_path(a.data):
        y = b.data
        for k in path:
            y = getattr(y, k.name)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{where}: {path}")


@pytest.mark.parametrize("scene", ["hopper", "cartpole"])
def test_ffi_equals_pure_callback_and_native_step(scene, monkeypatch):
    """200 steps with masked resets and per-world masses and frictions: the FFI
    path's data equals the pure_callback path's, field by field, and its float64
    state equals native ``mj_step``'s."""
    m = models.load(scene)
    ffi = runner(scene, "ffi", monkeypatch)
    py = runner(scene, "pure_callback", monkeypatch)
    assert_same(ffi, py, "start")
    ref = Reference(m, ffi.start)
    ref.step(np.zeros((N, m.nu)))
    rng = np.random.default_rng(0)
    for k in range(200):
        if k == 60:  # world 0's frictions halved, world 4's masses 1.25x (mj_setConst)
            friction = np.asarray(ffi.param("geom_friction")) * np.float32(0.5)
            mass = np.asarray(ffi.param("body_mass")) * np.float32(1.25)
            for r in (ffi, py):
                r.set_param("geom_friction", friction, env_ids=[0])
                r.set_param("body_mass", mass, env_ids=[4])
            ref.models[0].geom_friction[:] = friction.astype(np.float64)
            changed = mass != m.body_mass.astype(np.float32)
            ref.models[4].body_mass[:] = np.where(changed, mass, m.body_mass)
            mujoco.mj_setConst(ref.models[4], mujoco.MjData(ref.models[4]))
        if k in (40, 120):
            mask = np.zeros(N, bool)
            mask[[1, 2] if k == 40 else [0, 4, 5]] = True
            for r in (ffi, py):
                r.reset(mask)
            for i in np.flatnonzero(mask):
                ref.reset(i, params=True)
        u = controls(m, rng, N)
        for r in (ffi, py):
            r.set_actions(u)
            r.step()
        ref.step(u)
        if k % 50 == 49:
            assert_same(ffi, py, f"step {k}")
            np.testing.assert_array_equal(exact(ffi.data), ref.states(), err_msg=f"step {k}")
    expanded = native_ffi.expanded(host_of(ffi), N)
    assert expanded == host_of(py).sim(N).expanded == {"geom_friction", "body_mass"}


def test_written_state_and_divergence_agree(monkeypatch):
    """A state field written in the data is taken by both paths alike, and a world
    MuJoCo resets because it diverged is flagged at every step it happens, not
    only the first."""
    ffi = runner("hopper", "ffi", monkeypatch, 3)
    py = runner("hopper", "pure_callback", monkeypatch, 3)
    for r in (ffi, py):
        qpos = np.asarray(r.data.qpos).copy()
        qpos[1, 1] = 0.25
        r.engine = r.engine.replace(state=r.engine.state.replace(data=r.data.replace(qpos=qpos)))
        r.step()
    assert_same(ffi, py, "written qpos")
    m = mujoco.MjModel.from_xml_string(DIVERGING)
    flags = {}
    for path in ("ffi", "pure_callback"):
        monkeypatch.setenv(native_ffi.MODE_ENV, path)
        r = MultiEnvRunner(m, 3, impl="c")
        seen = []
        for _ in range(3):
            r.set_actions(np.array([[0.0], [1.0], [0.0]], np.float32))
            r.step()
            seen.append(np.asarray(r.data._impl.diverged).tolist())
        assert r.backend_info["host_call"] == path
        flags[path] = seen
    assert flags["ffi"] == flags["pure_callback"] == [[False, True, False]] * 3


def test_forward_and_kinematics_agree(monkeypatch):
    """The other two calls (mj_forward, the position stage) agree too."""
    outs = {}
    for path in ("ffi", "pure_callback"):
        monkeypatch.setenv(native_ffi.MODE_ENV, path)
        r = MultiEnvRunner("hopper", 3, impl="c", seed=5)
        model = r._eng.default_model.tree
        data = r.data
        fwd = jax.jit(jax.vmap(native.forward, in_axes=(None, 0)))(model, data)
        kin = jax.jit(jax.vmap(native.kinematics, in_axes=(None, 0)))(model, data)
        outs[path] = (fwd, kin)
    for a, b in zip(
        jax.tree.leaves(outs["ffi"]), jax.tree.leaves(outs["pure_callback"]), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_repeated_worlds_each_get_their_own_results(monkeypatch):
    """A forward pass over worlds that repeat the one before them ([a, a, b, b, b,
    c], as a restart's padding slots do; the FFI path computes each run once and
    copies it) gives every world its own results: the same as the pure_callback
    path, field by field, and as native ``mj_forward`` of each world."""
    m = models.load("hopper")
    outs, states = {}, {}
    for path in ("ffi", "pure_callback"):
        monkeypatch.setenv(native_ffi.MODE_ENV, path)
        r = MultiEnvRunner(m, N, impl="c", seed=5)
        qpos, qvel = np.asarray(r.data.qpos).copy(), np.asarray(r.data.qvel).copy()
        qpos[0:2, 1] += np.float32(0.1)
        qpos[2:5, 2] -= np.float32(0.3)
        qvel[5, 0] = np.float32(0.7)
        data = r.data.replace(qpos=qpos, qvel=qvel)
        model = r._eng.default_model.tree
        fwd = jax.jit(jax.vmap(native.forward, in_axes=(None, 0)))(model, data)
        kin = jax.jit(jax.vmap(native.kinematics, in_axes=(None, 0)))(model, data)
        outs[path], states[path] = (fwd, kin), exact(fwd)
    for a, b in zip(
        jax.tree.leaves(outs["ffi"]), jax.tree.leaves(outs["pure_callback"]), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    fwd = outs["ffi"][0]
    d = mujoco.MjData(m)
    for i in range(N):
        mujoco.mj_setState(m, d, states["ffi"][i], mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(m, d)
        for name in ("xpos", "qacc", "cvel"):
            np.testing.assert_array_equal(
                np.asarray(getattr(fwd, name)[i]),
                getattr(d, name).astype(np.float32),
                err_msg=f"world {i}: {name}",
            )
    xpos = np.asarray(fwd.xpos)
    assert not np.array_equal(xpos[1], xpos[2]) and not np.array_equal(xpos[4], xpos[5])


# Every kind of state component the row reader copies: a filter actuator's
# activation, an equality's switch (bool in the data: packed apart from the floats),
# a mocap body and user data.
COMPONENTS = """
<mujoco>
  <size nuserdata="2"/>
  <worldbody>
    <body name="a" pos="0 0 1"><freejoint/><geom size="0.1"/></body>
    <body name="b" pos="0.3 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0"/><geom size="0.1"/>
    </body>
    <body name="target" mocap="true" pos="0 1 0">
      <geom size="0.05" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <equality><connect body1="a" body2="b" anchor="0.15 0 1"/></equality>
  <actuator><general joint="hinge" dyntype="filter" dynprm="0.05"/></actuator>
</mujoco>
"""


def placed_step(r: MultiEnvRunner):
    """``(layout, buffers of r's state, jit of one physics step on packed buffers)``:
    the step writes into the scratch buffers in place where ``place`` is True (as
    the runner's packed step does; ``"views"``: it also reads the state fields from
    the input buffers in place), and records how many leaves it placed."""
    from mjxrunner.engine import core
    from mjxrunner.engine.packing import Layout

    state, model = r._eng.state, r._eng.model
    layout = Layout.of(state, apart=native.written_leaves(state))
    placed = {}

    def step(buffers, scratch, place):
        st = layout.unflatten(buffers)
        inputs = (buffers, st) if place == "views" else ()
        placement = native.Placement.of(layout, scratch, st, inputs) if place else None
        with native.placing(placement) as p:
            data, _ = core.physics_step(model, st.data, st.ctrl, None, 1)
        if p is None:
            return layout.pack(jax.tree.leaves(st.replace(data=data)))
        placed["leaves"] = len(p.values)
        return layout.pack(jax.tree.leaves(st.replace(data=data)), p.out, p.values)

    return layout, layout.pack(jax.tree.leaves(state)), jax.jit(step, static_argnums=2), placed


def test_a_packed_step_writes_its_results_in_place(monkeypatch):
    """On packed buffers the host call writes every leaf it computes straight into
    the state's buffers (leaves of other dtypes aside), and the buffers equal those
    that packing the step's separate results gives, bit for bit."""
    r = runner(COMPONENTS, "ffi", monkeypatch, 4)
    r.set_actions(np.full((4, 1), 0.5, np.float32))
    r.step()
    layout, buffers, step, placed = placed_step(r)
    assert native_ffi.PLACED_TARGET in step.lower(buffers, buffers, True).as_text()
    written = [layout.leaves[i][0] for i in native.written_leaves(r._eng.state)]
    expected = sum(1 for b in written if np.dtype(layout.buffers[b][1]) in (np.float32, np.uint32))
    assert placed["leaves"] == expected > 40
    scratch = jax.tree.map(jax.numpy.zeros_like, buffers)
    for a, b in zip(step(buffers, scratch, True), step(buffers, buffers, False), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def placed_calls(monkeypatch) -> list:
    """The ``(views, keyword arguments)`` of every placed host call traced from now
    on (``native_ffi.call(..., placed, views, shared_offset=...)``)."""
    seen, call = [], native_ffi.call

    def spy(*args, **kwargs):
        if len(args) > 9:  # a placed call
            seen.append((args[9], kwargs))
        return call(*args, **kwargs)

    monkeypatch.setattr(native_ffi, "call", spy)
    return seen


def test_a_packed_step_reads_its_state_fields_in_place(monkeypatch):
    """Given the buffers the state came from, the host call reads each state field
    that is still as unpacked at its place there (a view), not from a slice copied
    into an operand of its own, with the same results bit for bit; a field the
    step changed first (the controls here) goes as an operand of its own."""
    r = runner(COMPONENTS, "ffi", monkeypatch, 4)
    r.set_actions(np.full((4, 1), 0.5, np.float32))
    r.step()
    _, buffers, step, _ = placed_step(r)
    seen = placed_calls(monkeypatch)
    scratch = jax.tree.map(jax.numpy.zeros_like, buffers)
    viewed = step(buffers, scratch, "views")
    ((views, _),) = seen
    names = [name for name, _ in host_of(r).fields]
    assert len(views) == len(names)
    own = {names[k] for k, (operand, _, _) in enumerate(views) if operand != 0}
    # The controls, which the step sets from the runner's own, and what the data
    # holds in another dtype (eq_active, a bool): each converted into an operand.
    other = {name for name in names if getattr(r.data, name).dtype != np.float32}
    assert own == {"ctrl"} | other and "eq_active" in other
    scratch = jax.tree.map(jax.numpy.zeros_like, buffers)
    for a, b in zip(viewed, step(buffers, scratch, True), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_runners_step_reads_state_and_model_in_place(monkeypatch):
    """The runner's own packed step passes its packed state and model to the host
    call whole: every state field it did not change is a view, and the shared
    model fields lie side by side in the packed model (an offset, not a copy)."""
    seen = placed_calls(monkeypatch)
    monkeypatch.setattr(packing, "_COMPILED", {})  # traced here, whatever ran before
    monkeypatch.setenv(native_ffi.MODE_ENV, "ffi")
    r = MultiEnvRunner("hopper", 3, impl="c", seed=5)
    r.set_actions(np.full((3, 3), 0.25, np.float32))
    r.step()
    views, kwargs = seen[-1]
    assert views and kwargs["shared_offset"] >= 0
    assert sum(operand != 0 for operand, _, size in views if size) == 1  # the controls


def test_a_view_beyond_its_operand_is_refused(monkeypatch):
    """The handler checks each view against its operand: a field said to lie past
    the end of the buffer fails the call with a message that says so, instead of
    reading beyond it."""
    r = runner("cartpole", "ffi", monkeypatch, 2)
    _, buffers, step, _ = placed_step(r)
    views = native._views

    def beyond(*args):
        operands, where = views(*args)
        (operand, _, size), *rest = where
        return operands, ((operand, 10**6, size), *rest)

    monkeypatch.setattr(native, "_views", beyond)
    with pytest.raises(Exception, match="view beyond its operand"):
        jax.block_until_ready(step(buffers, jax.tree.map(jax.numpy.copy, buffers), "views"))


def test_a_place_that_does_not_fit_is_refused(monkeypatch):
    """The handler checks each place against its buffer: a float field sent to the
    buffer of the exact (uint32) rows fails the call with a message that says so,
    instead of writing floats there."""
    r = runner("cartpole", "ffi", monkeypatch, 2)
    _, buffers, step, _ = placed_step(r)
    places = native._places

    def misplaced(*args):
        order, where, spill = places(*args)
        return order, (where[0], (where[0][0], where[1][1]), *where[2:]), spill

    monkeypatch.setattr(native, "_places", misplaced)
    with pytest.raises(Exception, match="does not fit its buffer"):
        jax.block_until_ready(step(buffers, jax.tree.map(jax.numpy.copy, buffers), True))


FALLBACK = textwrap.dedent(
    """
    import warnings
    import numpy as np
    from mjxrunner import MultiEnvRunner
    from mjxrunner.engine import native_ffi
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = MultiEnvRunner("cartpole", 2, impl="c")
        r.step()
    assert not native_ffi.available()
    assert "failed" in native_ffi.failure() or "could not run" in native_ffi.failure()
    assert r.backend_info["host_call"] == "pure_callback", r.backend_info
    assert any("pure_callback" in str(w.message) for w in caught)
    assert np.isfinite(np.asarray(r.data.qpos)).all()
    print("FELL BACK")
    """
)


def without_compiler(cxx: str, folder, mode: str) -> dict[str, str]:
    return {
        **os.environ,
        native_ffi.CXX_ENV: cxx,
        native_ffi.CACHE_ENV: str(folder),
        native_ffi.MODE_ENV: mode,
        "JAX_PLATFORMS": "cpu",
    }


@pytest.mark.parametrize("cxx", ["false", "no-such-compiler-here"])
def test_a_failed_build_falls_back_to_pure_callback(cxx, tmp_path):
    """A compiler that fails (or none): a warning, and impl "c" steps through
    jax.pure_callback."""
    env = without_compiler(cxx, tmp_path, "auto")
    done = subprocess.run(
        [sys.executable, "-c", FALLBACK], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "FELL BACK" in done.stdout, done.stderr[-3000:]
    assert not list(tmp_path.rglob("*.so")) and not list(tmp_path.rglob("*.tmp"))


def test_a_failed_build_with_ffi_forced_refuses_to_run(tmp_path):
    """``MJXRUNNER_HOST_CALL=ffi`` and no library: an error, not the fallback."""
    env = without_compiler("false", tmp_path, "ffi")
    forced = "from mjxrunner import MultiEnvRunner\nMultiEnvRunner('cartpole', 2, impl='c').step()"
    done = subprocess.run(
        [sys.executable, "-c", forced], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0 and "FFI handler is unavailable" in done.stderr, done.stderr[-3000:]


def test_build_is_cached_by_source_and_versions(tmp_path, monkeypatch):
    """The library's name hashes the source, the versions and the command; a build
    writes under a temporary name and renames it."""
    monkeypatch.setenv(native_ffi.CACHE_ENV, str(tmp_path))
    path = native_ffi.library_path()
    assert path.parent == tmp_path / "native" and path.suffix == ".so"
    monkeypatch.setenv(native_ffi.CXX_ENV, "c++ -DMJXR_OTHER")
    assert native_ffi.library_path() != path
