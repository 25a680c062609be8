"""Small Cholesky factorizations and triangular solves on CPU, without LAPACK.

Why this exists: MJX factors the mass matrix and the Newton solver's Hessian with
``jax.scipy.linalg.cho_factor``/``cho_solve``. On CPU, jaxlib 0.10 lowers those to
LAPACK custom calls (``potrf``, ``trsm``) that split a batch into chunks on XLA's
intra-op thread pool and block until the chunks are done. When XLA runs as many
independent such calls at once as the pool has threads (two on a 2-core machine:
e.g. the mass-matrix and the Hessian factorizations of one step), every pool
thread waits for chunks that no thread is left to run, and the program hangs
with all threads idle. We saw it on the 27-dof humanoid at 256 worlds on every
first call; gdb puts both pool threads in ``ParallelBatchMap`` under
``lapack_spotrf_ffi``. jaxlib 0.11.2 compiles that parallel path out; until the
pins move, :func:`install` lowers small matrices (``n <= MAX_N``, real dtypes)
to plain XLA ops instead: a column-by-column Cholesky and row-by-row
substitution in ``fori_loop`` loops, each step vectorized over the batch. Larger or complex
matrices keep jaxlib's LAPACK lowering. Other platforms are untouched.

The rules replace jaxlib's CPU lowering for the whole process (JAX keeps one rule
per primitive and platform), so they also serve the caller's own small
factorizations; results agree with LAPACK to rounding (tested). Set the
environment variable ``MJXRUNNER_CPU_LAPACK=1`` before importing mjxrunner to keep
jaxlib's rules.
"""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.interpreters import mlir
from jax._src.lax import linalg as lax_linalg

MAX_N = 64
"""Largest matrix side lowered without LAPACK (MJX keeps mass matrices dense below
nv = 60); larger ones are rarer and cost a loop step per row."""

OPT_OUT = "MJXRUNNER_CPU_LAPACK"

_LAPACK_RULES = {
    lax_linalg.cholesky_p: lax_linalg._cholesky_cpu_lowering,
    lax_linalg.triangular_solve_p: lax_linalg._triangular_solve_cpu_lower,
}
_installed = False


def cholesky(a: jnp.ndarray) -> jnp.ndarray:
    """Lower Cholesky factor of ``(..., n, n)`` SPD matrices; reads the lower triangle.

    Like jaxlib's rule, a matrix that is not positive definite comes back all NaN.
    """
    n = a.shape[-1]
    rows = jnp.arange(n)

    def column(j, factor):
        # Columns >= j of ``factor`` are still zero, so the full product is the
        # partial sum over k < j.
        row_j = lax.dynamic_index_in_dim(factor, j, axis=-2, keepdims=False)
        v = lax.dynamic_index_in_dim(a, j, axis=-1, keepdims=False)
        v = v - jnp.einsum("...ik,...k->...i", factor, row_j)
        pivot = jnp.sqrt(lax.dynamic_index_in_dim(v, j, axis=-1))
        col = jnp.where(rows > j, v / pivot, jnp.where(rows == j, pivot, 0.0))
        return lax.dynamic_update_index_in_dim(factor, col[..., None], j, axis=-1)

    # A loop, not an unrolled sequence: compile time stays flat in n.
    factor = lax.fori_loop(0, n, column, jnp.zeros_like(a))
    ok = jnp.all(jnp.diagonal(factor, axis1=-2, axis2=-1) > 0, axis=-1)
    return jnp.where(ok[..., None, None], factor, jnp.nan)


def triangular_solve(
    a: jnp.ndarray,
    b: jnp.ndarray,
    *,
    left_side: bool,
    lower: bool,
    transpose_a: bool,
    conjugate_a: bool,
    unit_diagonal: bool,
) -> jnp.ndarray:
    """``op(a) x = b`` (``left_side``) or ``x op(a) = b`` for real triangular ``a``.

    Reads only the triangle of ``a`` that ``lower`` names, as LAPACK does.
    """
    del conjugate_a  # real dtypes only
    if not left_side:  # x op(a) = b  <=>  op(a)^T x^T = b^T
        xt = triangular_solve(
            a,
            jnp.swapaxes(b, -1, -2),
            left_side=True,
            lower=lower,
            transpose_a=not transpose_a,
            conjugate_a=False,
            unit_diagonal=unit_diagonal,
        )
        return jnp.swapaxes(xt, -1, -2)
    if transpose_a:  # the transpose of a lower triangle is an upper one
        a, lower = jnp.swapaxes(a, -1, -2), not lower
    n = a.shape[-1]
    cols = jnp.arange(n)
    shape = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:]

    def row(step, x):
        i = step if lower else n - 1 - step
        a_i = lax.dynamic_index_in_dim(a, i, axis=-2, keepdims=False)
        # ``where``, not a product: the other triangle may hold anything, NaN too.
        a_i = jnp.where(cols < i if lower else cols > i, a_i, 0.0)
        rhs = lax.dynamic_index_in_dim(b, i, axis=-2, keepdims=False)
        rhs = rhs - jnp.einsum("...k,...kj->...j", a_i, x)
        if not unit_diagonal:
            rhs = rhs / lax.dynamic_index_in_dim(
                lax.dynamic_index_in_dim(a, i, axis=-2, keepdims=False), i, axis=-1
            )
        return lax.dynamic_update_index_in_dim(x, rhs[..., None, :], i, axis=-2)

    return lax.fori_loop(0, n, row, jnp.zeros(shape, b.dtype))


def _small_real(aval) -> bool:
    return aval.shape[-1] <= MAX_N and np.issubdtype(aval.dtype, np.floating)


def _cholesky_rule(ctx, operand):
    if not _small_real(ctx.avals_in[0]):
        return _LAPACK_RULES[lax_linalg.cholesky_p](ctx, operand)
    return mlir.lower_fun(cholesky, multiple_results=False)(ctx, operand)


def _triangular_solve_rule(ctx, a, b, **params):
    if not _small_real(ctx.avals_in[0]):
        return _LAPACK_RULES[lax_linalg.triangular_solve_p](ctx, a, b, **params)
    return mlir.lower_fun(lambda a, b: triangular_solve(a, b, **params), False)(ctx, a, b)


def install() -> bool:
    """Lowers small CPU Cholesky factorizations and triangular solves without LAPACK.

    Idempotent. Functions compiled before the call keep the rule they were
    lowered with. Returns whether the rules are in place (False when the
    ``MJXRUNNER_CPU_LAPACK`` environment variable asks to keep jaxlib's).
    """
    global _installed
    if os.environ.get(OPT_OUT, "") not in ("", "0"):
        return False
    if not _installed:
        mlir.register_lowering(lax_linalg.cholesky_p, _cholesky_rule, platform="cpu")
        mlir.register_lowering(
            lax_linalg.triangular_solve_p, _triangular_solve_rule, platform="cpu"
        )
        _installed = True
    return True


def uninstall() -> None:
    """Puts jaxlib's LAPACK rules back (for comparisons and tests)."""
    global _installed
    for primitive, rule in _LAPACK_RULES.items():
        mlir.register_lowering(primitive, rule, platform="cpu")
    _installed = False


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _installed
