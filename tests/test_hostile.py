"""Hostile input: each public call either behaves or refuses with a clear
ValueError/TypeError before changing anything; never an error from inside JAX or
MuJoCo, never a corrupted runner. One runner for the module; no example compiles.
Runners are on impl "c" (MuJoCo's C engine: the physics does not compile), since what
is checked here happens before and around the physics."""

import contextlib
import os

import hypothesis.extra.numpy as hnp
import jax
import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjxrunner import MultiEnvRunner
from mjxrunner.engine import models

N, NU = 4, 3
F32_MAX = float(np.finfo(np.float32).max)
IMPL = "c"  # the checks, not the physics: see the module docstring

# Example counts and the rest come from the hypothesis profile (tests/conftest.py).
SETTINGS = settings()


@pytest.fixture(scope="module")
def runner(slider3):
    r = MultiEnvRunner(slider3, N, seed=1, impl=IMPL)
    r.step()  # compile the plain step once, outside the examples
    r.step(dt=0.02)
    r.reset(np.ones(N, bool))
    return r


def snapshot(r):
    trees = (r.state, r._scratch, r.engine.default, r.model, r.engine.default_model)
    return [np.array(x) for x in jax.tree.leaves(trees)] + [r.env_origins, r.layout]


def assert_unchanged(before, r):
    assert_same(before, snapshot(r))


def assert_same(before, after):
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def refused_by(state_of, call, *names):
    """Runs ``call``; if it raises, it must be a ValueError/TypeError naming one of
    ``names`` and leaving every array of ``state_of()`` as it was. Returns whether
    the call was accepted."""
    before = state_of()
    try:
        call()
    except (ValueError, TypeError) as e:
        assert any(n in str(e) for n in names), f"unclear message: {e}"
        assert_same(before, state_of())
        return False
    return True


def refused(r, call, *names):
    """:func:`refused_by` over every buffer of the runner ``r``."""
    return refused_by(lambda: snapshot(r), call, *names)


# --- strategies ---------------------------------------------------------------------

ANY_DTYPE = st.one_of(
    hnp.scalar_dtypes(), hnp.floating_dtypes(sizes=(16, 32, 64)), hnp.integer_dtypes()
)
SHAPES = st.one_of(
    st.just((N, NU)),
    st.just((2, NU)),
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
)


def arrays(dtypes=ANY_DTYPE, shapes=SHAPES):
    """Arrays of any dtype and shape; float elements include NaN, Inf and extremes."""
    return hnp.arrays(dtypes, shapes)


NOT_ARRAYS = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.booleans(),
    st.floats(),
    st.lists(st.lists(st.floats(), max_size=4), max_size=5),  # ragged
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(object),
)

IDS = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70),
    st.integers(-2, N + 1),
    st.lists(st.integers(-2, N + 1), max_size=6),  # negative, duplicated, out of range
    st.lists(st.floats(-2, N + 1), max_size=3),
    st.lists(st.booleans(), min_size=0, max_size=N + 2),  # bools of the wrong length
    hnp.arrays(ANY_DTYPE, hnp.array_shapes(min_dims=0, max_dims=2, max_side=N + 1)),
    st.text(max_size=3),
)


def valid_ids(ids):
    """The worlds ``ids`` names, or None where the runner must refuse them."""
    if ids is None:
        return np.arange(N)
    if isinstance(ids, (bool, np.bool_)):
        return None
    if isinstance(ids, np.ndarray) and ids.size and ids.dtype.kind not in "iu":
        # e.g. timedelta64, whose object view is Python ints: the fuzz run found it
        return None
    arr = np.asarray([ids] if isinstance(ids, int) else ids, dtype=object)
    flat = list(arr.ravel())
    if arr.ndim != 1 or any(isinstance(i, (bool, np.bool_, float, np.floating)) for i in flat):
        return None if arr.size else np.zeros(0, int)
    if not all(isinstance(i, (int, np.integer)) for i in flat):
        return None
    ints = [int(i) for i in flat]
    if len(set(ints)) != len(ints) or any(not 0 <= i < N for i in ints):
        return None
    return np.array(ints, int)


def as_array(value):
    """``np.asarray(value)``, or None where NumPy cannot make one (ragged lists)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError):
        return None


def valid_reals(values, shape):
    """Whether ``values`` are finite reals of exactly ``shape`` that fit float32."""
    arr = as_array(values)
    if arr is None or arr.dtype == bool or arr.dtype.kind not in "iuf" or arr.shape != shape:
        return False
    with np.errstate(all="ignore"):
        return bool(np.isfinite(arr).all() and (arr.size == 0 or np.abs(arr).max() <= F32_MAX))


def valid_mask(value, sizes):
    arr = as_array(value)
    return arr is not None and arr.dtype == bool and arr.ndim == 1 and arr.shape[0] in sizes


# --- actions ------------------------------------------------------------------------


@SETTINGS
@given(values=st.one_of(arrays(), NOT_ARRAYS), ids=IDS)
def test_set_actions(runner, values, ids):
    before = np.array(runner.control)
    accepted = refused(runner, lambda: runner.set_actions(values, ids), "actions", "env_ids")
    expected_ids = valid_ids(ids)
    valid = expected_ids is not None and valid_reals(values, (len(expected_ids), NU))
    assert accepted == valid
    if accepted:
        want = before.copy()
        want[expected_ids] = np.asarray(values).astype(np.float32)
        np.testing.assert_array_equal(runner.control, want)


@SETTINGS
@given(values=st.one_of(arrays(shapes=st.just((2, N, NU))), arrays(), NOT_ARRAYS))
def test_rollout_actions(runner, values):
    length = runner.episode_length
    accepted = refused(runner, lambda: runner.rollout(values, 2), "actions")
    assert accepted == valid_reals(values, (2, N, NU))
    if accepted:  # huge controls may blow worlds up: then they are flagged, not hidden
        np.testing.assert_array_equal(runner.episode_length, length + 2)
        finite = np.isfinite(np.asarray(runner.data.qvel)).all(axis=1)
        assert (finite | runner.health.unstable).all()


@SETTINGS
@given(n_steps=st.one_of(st.integers(-3, 0), st.floats(), st.booleans(), st.text(max_size=2)))
def test_rollout_refuses_bad_step_counts(runner, n_steps):
    assert not refused(runner, lambda: runner.rollout(np.zeros((1, N, NU)), n_steps), "n_steps")


def valid_dt(dt):
    if isinstance(dt, (bool, str)) or not np.isfinite(float(dt)) or dt <= 0:
        return False
    with np.errstate(all="ignore"):
        as_f32 = np.float32(dt)
    return bool(np.isfinite(as_f32) and as_f32 > 0)


@SETTINGS
@given(
    dt=st.one_of(st.floats(), st.integers(-(2**80), 2**80), st.booleans(), st.text(max_size=2)),
    substeps=st.one_of(st.just(1), st.integers(-3, 0), st.floats(), st.booleans()),
)
def test_step_arguments(runner, dt, substeps):
    length = runner.episode_length
    accepted = refused(runner, lambda: runner.step(dt, substeps), "dt", "substeps")
    assert accepted == (type(substeps) is int and substeps == 1 and valid_dt(dt))
    if accepted:
        np.testing.assert_array_equal(runner.episode_length, length + 1)


# --- worlds: ids and masks ------------------------------------------------------------


@SETTINGS
@given(mask=st.one_of(arrays(shapes=hnp.array_shapes(min_dims=0, max_dims=2)), NOT_ARRAYS))
def test_reset_masks(runner, mask):
    runner.step()
    length = runner.episode_length
    accepted = refused(runner, lambda: runner.reset(mask), "mask")
    assert accepted == (mask is None or valid_mask(mask, (N, N + 1)))
    if accepted:
        selected = np.ones(N, bool) if mask is None else np.asarray(mask)[:N]
        np.testing.assert_array_equal(runner.episode_length, np.where(selected, 0, length))


@SETTINGS
@given(ids=IDS)
def test_reset_envs(runner, ids):
    runner.step()
    length = runner.episode_length
    accepted = refused(runner, lambda: runner.reset_envs(ids), "env_ids")
    expected = valid_ids(ids)  # None selects every world, as everywhere
    assert accepted == (expected is not None)
    if accepted:
        want = length.copy()
        want[expected] = 0
        np.testing.assert_array_equal(runner.episode_length, want)


@SETTINGS
@given(a=st.one_of(arrays(shapes=st.just((N,))), arrays(), NOT_ARRAYS), b=arrays())
def test_done_flags(runner, a, b):
    accepted = refused(runner, lambda: runner.set_done_flags(a, b), "terminated", "truncated")
    assert accepted == (valid_mask(a, (N,)) and valid_mask(b, (N,)))
    if accepted:
        np.testing.assert_array_equal(runner.terminated, a)
        np.testing.assert_array_equal(runner.truncated, b)


# --- layout ---------------------------------------------------------------------------

REALS = st.one_of(
    st.floats(), st.integers(-(2**1100), 2**1100), st.booleans(), st.none(), st.text(max_size=2)
)


def valid_spacing(spacing):
    if isinstance(spacing, bool) or not isinstance(spacing, (int, float)):
        return False
    try:
        return bool(np.isfinite(float(spacing) * (N - 1)))
    except OverflowError:
        return False


@SETTINGS
@given(spacing=REALS, columns=st.one_of(st.integers(-2, 9), REALS))
def test_layouts(runner, spacing, columns):
    accepted = refused(runner, lambda: runner.set_linear_layout(spacing), "spacing")
    assert accepted == valid_spacing(spacing)
    if accepted:
        assert runner.layout == "linear" and np.isfinite(runner.env_origins).all()
        assert runner.env_origin(N - 1)[0] == pytest.approx((N - 1) * float(spacing))
    accepted = refused(
        runner, lambda: runner.set_grid_layout(spacing, columns), "spacing", "columns"
    )
    assert accepted == (valid_spacing(spacing) and type(columns) is int and columns >= 0)
    if accepted:
        assert runner.layout == "grid" and np.isfinite(runner.env_origins).all()


@SETTINGS
@given(origins=st.one_of(arrays(shapes=st.just((N, 3))), arrays(), NOT_ARRAYS), i=IDS)
def test_custom_origins(runner, origins, i):
    accepted = refused(runner, lambda: runner.set_env_origins(origins), "origins")
    arr = as_array(origins)
    valid = arr is not None and arr.dtype != bool and arr.dtype.kind in "iuf"
    valid = valid and arr.shape == (N, 3) and bool(np.isfinite(arr).all())
    assert accepted == valid
    if accepted:
        assert runner.layout == "custom"
        np.testing.assert_array_equal(runner.env_origins, arr.astype(np.float64))
    one = refused(runner, lambda: runner.env_origin(i), "env_id")
    assert one == (type(i) is int and 0 <= i < N)


# --- model sources ----------------------------------------------------------------------


@SETTINGS
@given(name=st.text(max_size=300))
def test_model_names_that_are_not_models(name):
    if name in models.list():
        return
    try:
        m = models.load_any(name)
    except (ValueError, TypeError):
        return
    # Text that is MJCF is a model: the fuzz run found "<mujoco/>".
    assert isinstance(m, mujoco.MjModel) and name.lstrip().startswith("<")


@settings(max_examples=max(1, settings.default.max_examples * 5 // 8))  # file writes
@given(content=st.binary(max_size=2000), suffix=st.sampled_from([".xml", ".mjb", ".txt", ""]))
def test_files_that_are_not_mjcf(content, suffix, tmp_path_factory):
    folder = tmp_path_factory.mktemp("junk")
    path = folder / f"model{suffix}"
    path.write_bytes(content)
    with in_dir(folder), pytest.raises(ValueError, match="could not load"):
        models.load_any(path)


@contextlib.contextmanager
def in_dir(path):
    """MuJoCo appends its warnings (bad binary headers) to MUJOCO_LOG.TXT in the
    working directory: keep that file out of the project."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.mark.parametrize(
    "source, error, match",
    [
        ("no/such/file.xml", ValueError, "neither a file nor a known name"),
        ("x" * 5000, ValueError, "neither a file"),  # a name too long for the OS
        ("a\0b", ValueError, "neither a file"),
        (b"cartpole", TypeError, "MjModel, an MjSpec, a name"),
        ("<mujoco><worldbody><bad/></worldbody></mujoco>", ValueError, "could not load"),
        ("<html/>", ValueError, "could not load"),
    ],
)
def test_constructor_refuses_bad_model_sources(source, error, match):
    with pytest.raises(error, match=match):
        MultiEnvRunner(source, 2, impl=IMPL)


# --- includes -------------------------------------------------------------------------

MAIN = "<mujoco><worldbody><include file='{}'/></worldbody></mujoco>"
BODY = "<mujoco><body name='{}'><joint/><geom size='.1'/></body></mujoco>"


def test_includes_resolve_next_to_the_model_file(tmp_path, monkeypatch):
    model_dir, elsewhere = tmp_path / "model", tmp_path / "elsewhere"
    (model_dir / "parts").mkdir(parents=True)
    elsewhere.mkdir()
    (model_dir / "main.xml").write_text(MAIN.format("parts/arm.xml"))
    # a nested include resolves against the main file's directory too (MuJoCo's rule)
    (model_dir / "parts" / "arm.xml").write_text("<mujoco><include file='hand.xml'/></mujoco>")
    (model_dir / "hand.xml").write_text(BODY.format("sibling"))
    # decoys in the working directory, where a text-relative lookup would look
    (elsewhere / "parts").mkdir()
    (elsewhere / "parts" / "arm.xml").write_text(BODY.format("decoy"))
    (elsewhere / "hand.xml").write_text(BODY.format("decoy"))
    monkeypatch.chdir(elsewhere)
    for source in (model_dir / "main.xml", str(model_dir / "main.xml"), "../model/main.xml"):
        m = models.load_any(source)
        assert m.body(1).name == "sibling"
    r = MultiEnvRunner(model_dir / "main.xml", 2, impl=IMPL)
    assert r.mj_model.body(1).name == "sibling"


def test_mjcf_text_includes_only_absolute_paths(tmp_path, monkeypatch):
    (tmp_path / "hand.xml").write_text(BODY.format("absolute"))
    monkeypatch.chdir(tmp_path)  # a relative include would find hand.xml here
    with pytest.raises(ValueError, match=r"relative path.*working directory"):
        models.load_any(MAIN.format("hand.xml"))
    with pytest.raises(ValueError, match="relative path"):
        MultiEnvRunner(MAIN.format("./hand.xml"), 2, impl=IMPL)
    m = models.load_any(MAIN.format(tmp_path / "hand.xml"))
    assert m.body(1).name == "absolute"
    # an absolute include whose own include is relative is refused too
    (tmp_path / "arm.xml").write_text("<mujoco><include file='hand.xml'/></mujoco>")
    with pytest.raises(ValueError, match=r"'hand\.xml' by a relative path"):
        models.load_any(MAIN.format(tmp_path / "arm.xml"))


def test_checkpoint_of_random_bytes(tmp_path):
    for n in (0, 1, 22, 4096):
        path = tmp_path / f"r{n}"
        path.write_bytes(os.urandom(n))
        with pytest.raises(ValueError, match="checkpoint"):
            MultiEnvRunner.load(path)
