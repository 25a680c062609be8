"""The CPU Cholesky and triangular-solve lowering that avoids jaxlib's LAPACK calls.

Against NumPy/SciPy on random batches, through ``jax.scipy``/``jax.lax.linalg`` as
MJX calls them, and on a whole MJX step: the humanoid's compiled step must hold no
LAPACK call (they deadlock XLA's 2-thread CPU pool; see mjxrunner.cpu_linalg).
"""

import itertools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import scipy.linalg
from mujoco import mjx

from mjxrunner.engine import cpu_linalg, models

RNG = np.random.default_rng(0)


def _spd(batch, n, dtype=np.float32):
    x = RNG.normal(size=(*batch, n, n))
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dtype)


def _lapack_calls(fn, *args):
    text = jax.jit(fn).lower(*args).as_text()
    return sum(text.count(f"lapack_{p}") for p in ("spotrf", "dpotrf", "strsm", "dtrsm"))


def test_installed_on_import():
    assert cpu_linalg.installed()
    a = jnp.asarray(_spd((3,), 5))
    assert _lapack_calls(jnp.linalg.cholesky, a) == 0


@pytest.mark.parametrize(("batch", "n"), [((), 1), ((7,), 6), ((2, 3), 27)])
def test_cholesky_matches_numpy(batch, n):
    a = _spd(batch, n)
    got = np.asarray(jax.jit(jnp.linalg.cholesky)(a))
    want = np.linalg.cholesky(a.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    assert np.all(np.triu(got, 1) == 0)


def test_cholesky_reads_only_the_lower_triangle_and_fails_with_nan():
    a = _spd((4,), 5)
    junk = a.copy()
    junk[:, 0, 3] = np.nan  # upper triangle: must not be read
    junk[:, 1, 4] = 1e30
    factor = jax.jit(lambda x: jax.lax.linalg.cholesky(x, symmetrize_input=False))
    np.testing.assert_array_equal(np.asarray(factor(junk)), np.asarray(factor(a)))
    bad = a.copy()
    bad[2] = -np.eye(5)  # not positive definite: that factor, and only it, is NaN
    out = np.asarray(factor(bad))  # (lax.linalg.cholesky zeroes the upper triangle)
    assert np.isnan(out[2][np.tril_indices(5)]).all()
    assert np.isfinite(np.delete(out, 2, axis=0)).all()


@pytest.mark.parametrize(
    ("left_side", "lower", "transpose_a", "unit_diagonal"),
    list(itertools.product([True, False], repeat=4)),
)
def test_triangular_solve_matches_scipy(left_side, lower, transpose_a, unit_diagonal):
    n, k = 6, 3
    a = RNG.normal(size=(2, n, n)) + 4 * np.eye(n)
    rows, cols = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    a[:, rows, cols] = np.nan  # the other triangle: never read
    b = RNG.normal(size=(2, n, k) if left_side else (2, k, n))
    solve = jax.jit(
        lambda a, b: jax.lax.linalg.triangular_solve(
            a,
            b,
            left_side=left_side,
            lower=lower,
            transpose_a=transpose_a,
            unit_diagonal=unit_diagonal,
        )
    )
    got = np.asarray(solve(a.astype(np.float32), b.astype(np.float32)))
    for i in range(2):
        tri = np.nan_to_num(a[i])
        if unit_diagonal:
            np.fill_diagonal(tri, 1.0)
        op = tri.T if transpose_a else tri
        want = np.linalg.solve(op, b[i]) if left_side else np.linalg.solve(op.T, b[i].T).T
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-4)


def test_cho_solve_as_mjx_calls_it_matches_scipy_without_lapack():
    a, b = _spd((16,), 14), RNG.normal(size=(16, 14)).astype(np.float32)

    def solve(a, b):
        factor = jax.scipy.linalg.cho_factor(a)
        return jax.vmap(lambda c, x: jax.scipy.linalg.cho_solve((c, False), x))(factor[0], b)

    assert _lapack_calls(solve, a, b) == 0
    got = np.asarray(jax.jit(solve)(a, b))
    want = np.stack([scipy.linalg.solve(a[i].astype(np.float64), b[i]) for i in range(16)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_large_matrices_keep_lapack():
    n = cpu_linalg.MAX_N + 1
    assert _lapack_calls(jnp.linalg.cholesky, jnp.asarray(_spd((2,), n))) == 1


def test_uninstall_restores_lapack_and_install_is_idempotent():
    a = jnp.asarray(_spd((2,), 4))
    try:
        cpu_linalg.uninstall()
        assert not cpu_linalg.installed()
        assert _lapack_calls(lambda x: jnp.linalg.cholesky(x) + 0, a) == 1
    finally:
        assert cpu_linalg.install() and cpu_linalg.install()
    assert _lapack_calls(lambda x: jnp.linalg.cholesky(x) * 1, a) == 0


def test_humanoid_step_holds_no_lapack_call():
    m = mujoco.MjModel.from_xml_path(str(models.path("humanoid")))
    assert m.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON and m.nv == 27
    model = mjx.put_model(m, impl="jax")
    data = jax.vmap(lambda _: mjx.make_data(m, impl="jax"))(jnp.arange(4))
    step = jax.vmap(mjx.step, in_axes=(None, 0))
    text = jax.jit(step).lower(model, data).as_text()
    assert "lapack" not in text
    assert text.count("stablehlo.while") > 0  # the factorizations are there, as loops
