"""gt.linalg against numpy.linalg (forward, float32 and float64, batched), closed-form
gradients, the conventions at repeated eigenvalues, the error contract, and cupy vs numpy.

The registry-walking test (tests/grad_cases_linalg.py rows in tests/test_grad_registry.py)
checks every primitive's gradient to second order against finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from grad_cases_linalg import distinct_svals, separated, spd, sym, well

import gputape as gt
from gputape.testing import check_grads

LinAlgError = np.linalg.LinAlgError
DTYPES = ["float32", "float64"]
TOL = {"float32": {"rtol": 2e-4, "atol": 2e-5}, "float64": {"rtol": 1e-10, "atol": 1e-12}}
rng = np.random.default_rng(7)


def c(a, dtype="float64"):
    return gt.constant(np.asarray(a, dtype))


def close(actual, expected, dtype):
    got = actual.numpy() if isinstance(actual, gt.Tensor) else np.asarray(actual)
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype}, expected {dtype}"
    np.testing.assert_allclose(got, np.asarray(expected, np.float64), **TOL[dtype])


def grad(f, *xs):
    ts = [c(x) for x in xs]
    with gt.GradientTape() as tape:
        tape.watch(ts)
        y = f(*ts)
    out = tape.gradient(y, ts)
    return [g.numpy() if g is not None else None for g in out]


# -- forward against numpy ------------------------------------------------------------------

SHAPES = [(3, 3), (2, 4, 4), (2, 1, 3, 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_inv_det_slogdet_match_numpy(dtype, shape):
    a = well(*shape).astype(dtype)
    close(gt.linalg.inv(c(a, dtype)), np.linalg.inv(a.astype(np.float64)), dtype)
    close(gt.linalg.det(c(a, dtype)), np.linalg.det(a.astype(np.float64)), dtype)
    s, logabs = gt.linalg.slogdet(c(a, dtype))
    es, el = np.linalg.slogdet(a.astype(np.float64))
    close(s, es, dtype)
    close(logabs, el, dtype)
    assert gt.linalg.slogdet(c(a, dtype)).logabsdet is not None  # numpy's field names


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("ashape", "bshape"),
    [
        ((3, 3), (3,)),
        ((3, 3), (3, 2)),
        ((2, 3, 3), (3,)),
        ((2, 3, 3), (3, 1)),
        ((3, 3), (4, 3, 2)),
        ((2, 1, 3, 3), (5, 3, 2)),
    ],
)
def test_solve_matches_numpy_with_broadcast_batches(dtype, ashape, bshape):
    a = well(*ashape).astype(dtype)
    b = rng.standard_normal(bshape).astype(dtype)
    expect = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
    got = gt.linalg.solve(c(a, dtype), c(b, dtype))
    assert got.shape == expect.shape
    close(got, expect, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_cholesky_eigh_eigvalsh_match_numpy(dtype, shape):
    a = spd(*shape)
    a32 = a.astype(dtype).astype(np.float64)  # the value the float32 run sees
    close(gt.linalg.cholesky(c(a, dtype)), np.linalg.cholesky(a32), dtype)
    w, v = gt.linalg.eigh(c(a, dtype))
    ew = np.linalg.eigvalsh(a32)
    close(w, ew, dtype)
    close(gt.linalg.eigvalsh(c(a, dtype)), ew, dtype)
    # eigenvector signs are LAPACK's choice: compare the gauge-free reconstruction and projectors
    vn = v.numpy().astype(np.float64)
    close(gt.constant((vn * ew[..., None, :]) @ np.swapaxes(vn, -1, -2)).astype(dtype), a32, dtype)
    close(gt.linalg.eigh(c(a, dtype)).eigenvectors ** 2, np.linalg.eigh(a32)[1] ** 2, dtype)


def test_eigh_and_cholesky_read_one_triangle_like_numpy():
    a = spd(3, 3)
    junk = np.triu(rng.standard_normal((3, 3)), 1)  # the upper triangle is ignored
    for uplo in ("L", "U"):
        bad = a + (junk if uplo == "L" else junk.T)
        np.testing.assert_allclose(gt.linalg.eigvalsh(c(bad), UPLO=uplo).numpy(), np.linalg.eigvalsh(a), rtol=1e-12)
    np.testing.assert_allclose(gt.linalg.cholesky(c(a + junk)).numpy(), np.linalg.cholesky(a), rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3), (2, 3, 4)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_matches_numpy(dtype, shape, full):
    a = rng.standard_normal(shape).astype(dtype)
    u, s, vh = gt.linalg.svd(c(a, dtype), full_matrices=full)
    eu, es, evh = np.linalg.svd(a.astype(np.float64), full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (eu.shape, es.shape, evh.shape)
    close(s, es, dtype)
    close(gt.linalg.svd(c(a, dtype), compute_uv=False), es, dtype)
    k = min(shape[-2:])
    un, vhn = u.numpy().astype(np.float64), vh.numpy().astype(np.float64)
    close(gt.constant((un[..., :k] * es[..., None, :]) @ vhn[..., :k, :]).astype(dtype), a, dtype)
    close(gt.constant(np.abs(un[..., :k])).astype(dtype), np.abs(eu[..., :k]), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3), (2, 3, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_numpy(dtype, shape, mode):
    a = rng.standard_normal(shape).astype(dtype)
    expect = np.linalg.qr(a.astype(np.float64), mode=mode)
    got = gt.linalg.qr(c(a, dtype), mode=mode)
    if mode == "r":
        assert got.shape == expect.shape
        close(abs(got), np.abs(expect), dtype)
        return
    q, r = got
    assert (q.shape, r.shape) == (expect.Q.shape, expect.R.shape)
    close(abs(r), np.abs(expect.R), dtype)
    close(gt.matmul(q, r), a, dtype)
    assert np.all(np.tril(r.numpy(), -1) == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 3, 3)])
def test_pinv_matches_numpy(dtype, shape):
    a = rng.standard_normal(shape).astype(dtype)
    close(gt.linalg.pinv(c(a, dtype)), np.linalg.pinv(a.astype(np.float64)), dtype)
    low_rank = np.outer([1.0, 2.0, 3.0], [1.0, -1.0])  # rank 1: the cutoff drops the zero singular value
    np.testing.assert_allclose(gt.linalg.pinv(c(low_rank)).numpy(), np.linalg.pinv(low_rank), rtol=1e-12)
    np.testing.assert_allclose(
        gt.linalg.pinv(c(low_rank), rcond=0.5).numpy(), np.linalg.pinv(low_rank, rcond=0.5), rtol=1e-12
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 5])
def test_matrix_power_matches_numpy(dtype, n):
    a = well(2, 3, 3).astype(dtype)
    got = gt.linalg.matrix_power(c(a, dtype), n)
    close(got, np.linalg.matrix_power(a.astype(np.float64), n), dtype)


VECTOR_ORDS = [None, 2, 1, 3, 0.5, -1, 0, math.inf, -math.inf]
MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_norm_matches_numpy_for_every_order_and_axis(dtype, keepdims):
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    x[0, 1, 2] = 0.0  # ord=0 counts it
    x64 = x.astype(np.float64)
    cases = [(o, ax) for o in VECTOR_ORDS for ax in (0, 1, -1, 2)]
    cases += [(o, ax) for o in MATRIX_ORDS for ax in ((0, 1), (1, 2), (2, 0), (-1, -2))]
    cases += [(None, None)]
    for o, ax in cases:
        with np.errstate(divide="ignore"):  # negative orders meet the zero entry, in numpy too
            expect = np.linalg.norm(x64, ord=o, axis=ax, keepdims=keepdims)
            got = gt.linalg.norm(c(x, dtype), ord=o, axis=ax, keepdims=keepdims)
        assert got.shape == expect.shape, (o, ax)
        close(got, expect, dtype)
    for v, o in [(x[0, 0], o) for o in VECTOR_ORDS] + [(x[1], o) for o in MATRIX_ORDS]:
        close(
            gt.linalg.norm(c(v, dtype), o, keepdims=keepdims),
            np.linalg.norm(v.astype(np.float64), o, keepdims=keepdims),
            dtype,
        )


def test_norm_of_integers_is_float64_like_numpy():
    got = gt.linalg.norm(gt.constant(np.array([3, 4])))
    assert got.dtype == np.float64 and float(got) == 5.0


# -- gradients: closed forms and conventions --------------------------------------------------


def test_inverse_determinant_gradients_have_their_closed_forms():
    a = well(3, 3)
    inv_t = np.linalg.inv(a).T
    (g,) = grad(lambda x: gt.linalg.slogdet(x).logabsdet, a)
    np.testing.assert_allclose(g, inv_t, rtol=1e-12)
    (g,) = grad(gt.linalg.det, a)
    np.testing.assert_allclose(g, np.linalg.det(a) * inv_t, rtol=1e-12)
    w = rng.standard_normal((3, 3))
    (g,) = grad(lambda x: gt.sum(gt.linalg.inv(x) * w), a)
    np.testing.assert_allclose(g, -inv_t @ w @ inv_t, rtol=1e-12)
    b = rng.standard_normal(3)
    ga, gb = grad(lambda x, y: gt.sum(gt.linalg.solve(x, y) * w[0]), a, b)
    np.testing.assert_allclose(gb, np.linalg.solve(a.T, w[0]), rtol=1e-12)
    np.testing.assert_allclose(ga, -np.outer(gb, np.linalg.solve(a, b)), rtol=1e-12)


def test_cholesky_gradient_is_the_symmetric_one():
    """log det A = 2 sum log diag(L): through cholesky the gradient is inv(A), symmetric."""
    a = spd(4, 4)
    (g,) = grad(
        lambda x: 2.0 * gt.sum(gt.log(gt.linalg.band_part(gt.linalg.cholesky(x), 0, 0) @ gt.ones(4, dtype="float64"))),
        a,
    )
    np.testing.assert_allclose(g, np.linalg.inv(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g, g.T, atol=1e-14)


def test_eigh_gradient_is_symmetric_and_matches_the_eigenvalue_formula():
    a = separated(4, 4)
    _, v = np.linalg.eigh(a)
    wts = rng.standard_normal(4)
    (g,) = grad(lambda x: gt.sum(gt.linalg.eigvalsh(x) * wts), a)
    np.testing.assert_allclose(g, (v * wts) @ v.T, rtol=1e-10, atol=1e-12)  # dw_i = v_i^T dA v_i


DEGENERATE = np.diag([2.0, 2.0, 5.0])  # LAPACK returns the repeated eigenvalue exactly twice


def test_eigenvalue_losses_are_finite_and_correct_at_repeated_eigenvalues():
    assert np.linalg.eigvalsh(DEGENERATE)[0] == np.linalg.eigvalsh(DEGENERATE)[1]
    # sum(w^2) = ||A||_F^2 for symmetric A: the gradient is 2A, ties or not.
    for f in (lambda x: gt.sum(gt.linalg.eigvalsh(x) ** 2), lambda x: gt.sum(gt.linalg.eigh(x)[0] ** 2)):
        (g,) = grad(f, DEGENERATE)
        np.testing.assert_allclose(g, 2 * DEGENERATE, atol=1e-12)
    # also along random symmetric perturbations, by finite differences (first order: at a tie the
    # eigenvalues are not differentiable a second time)
    check_grads(lambda x: gt.sum(gt.linalg.eigvalsh(sym(x)) ** 2), DEGENERATE, order=1)
    (g,) = grad(lambda x: gt.linalg.norm(x, "nuc"), np.diag([3.0, 3.0, 1.0]))
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)  # d||A||_* = U V^T


def test_eigenvector_losses_at_repeated_eigenvalues_are_nan_not_a_guess():
    """The documented caveat: a loss of eigenvectors at an exact tie gets NaN (PyTorch and JAX
    do the same), because a finite value would be silently wrong for some losses."""
    wts = rng.standard_normal((3, 3))
    (g,) = grad(lambda x: gt.sum(gt.linalg.eigh(x)[1] ** 2 * wts), DEGENERATE)
    assert np.isnan(g).any()
    # separated eigenvalues: the same loss has a finite gradient that finite differences confirm
    check_grads(lambda x: gt.sum(gt.linalg.eigh(sym(x))[1] ** 2 * wts), separated(3, 3), order=2)


def test_svd_full_matrices_gradient_ignores_the_complement():
    a = distinct_svals(4, 2)
    w = rng.standard_normal((4, 4))
    # the first k columns of the full U are the reduced U: same gradient through them
    (g_full,) = grad(lambda x: gt.sum(gt.linalg.svd(x, full_matrices=True)[0][:, :2] ** 2 * w[:, :2]), a)
    (g_red,) = grad(lambda x: gt.sum(gt.linalg.svd(x, full_matrices=False)[0] ** 2 * w[:, :2]), a)
    np.testing.assert_allclose(g_full, g_red, rtol=1e-10, atol=1e-12)
    # a loss of the complement columns alone gets a zero gradient (they are an arbitrary basis)
    (g_c,) = grad(lambda x: gt.sum(gt.linalg.svd(x, full_matrices=True)[0][:, 2:] ** 2 * w[:, 2:]), a)
    np.testing.assert_array_equal(g_c, np.zeros_like(a))


def test_norm_gradient_at_zero_is_zero():
    for o, ax in [(None, None), (2, 0), (3, 0), (1, 0), ("fro", (0, 1)), (math.inf, 0)]:
        (g,) = grad(lambda x, o=o, ax=ax: gt.sum(gt.linalg.norm(x, o, axis=ax)), np.zeros((3, 2)))
        assert np.array_equal(g, np.zeros((3, 2))), (o, ax, g)
    x = np.array([[0.0, 0.0], [3.0, -4.0]])
    (g,) = grad(lambda t: gt.sum(gt.linalg.norm(t, axis=1)), x)  # a zero row next to a nonzero one
    np.testing.assert_allclose(g, [[0.0, 0.0], [0.6, -0.8]])


@pytest.mark.parametrize(
    "ordax",
    [
        ("nuc", None),
        (2, None),
        (-2, None),
        (1, None),
        (-1, None),
        (math.inf, None),
        (-math.inf, None),
        (math.inf, 1),
        (4, 0),
    ],
)
def test_norm_compositions_match_finite_differences(ordax):
    o, ax = ordax
    check_grads(
        lambda x: gt.linalg.norm(x, o, axis=ax), distinct_svals(3, 4) + 0.01 * np.arange(12).reshape(3, 4), order=2
    )


def test_matrix_power_gradient_to_second_order():
    check_grads(lambda x: gt.linalg.matrix_power(x, 3), well(3, 3), order=2)
    check_grads(lambda x: gt.linalg.matrix_power(x, -2), well(2, 3, 3), order=2)


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["inv", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "matrix_power"])
def test_non_square_input_raises_linalgerror_naming_function_and_shape(fn):
    f = getattr(gt.linalg, fn)
    args = (2,) if fn == "matrix_power" else ()
    with pytest.raises(LinAlgError, match=rf"gt\.linalg\.{fn}: .*square.*\(2, 3\)"):
        f(c(np.ones((2, 3))), *args)
    with pytest.raises(ValueError, match=rf"gt\.linalg\.{fn}: .*rank >= 2.*\(3,\)"):
        f(c(np.ones(3)), *args)


def test_singular_and_indefinite_matrices_keep_numpys_error_class():
    with pytest.raises(LinAlgError, match=r"gt\.linalg\.inv: Singular matrix.*\(2, 2\).*float64"):
        gt.linalg.inv(c(np.ones((2, 2))))
    with pytest.raises(LinAlgError, match=r"gt\.linalg\.solve: Singular matrix"):
        gt.linalg.solve(c(np.ones((2, 2))), c(np.ones(2)))
    with pytest.raises(LinAlgError, match=r"gt\.linalg\.cholesky: .*not positive definite"):
        gt.linalg.cholesky(c(-np.eye(2)))


def test_bad_arguments_raise_clear_errors():
    a = c(np.eye(3))
    with pytest.raises(ValueError, match=r"gt\.linalg\.solve: b of shape \(2,\) does not fit a of shape \(3, 3\)"):
        gt.linalg.solve(a, c(np.ones(2)))
    with pytest.raises(ValueError, match=r"gt\.linalg\.norm: invalid norm order 'nuc' for vectors"):
        gt.linalg.norm(c(np.ones(3)), "nuc")
    with pytest.raises(ValueError, match=r"gt\.linalg\.norm: invalid norm order 3 for matrices"):
        gt.linalg.norm(a, 3)
    with pytest.raises(ValueError, match=r"gt\.linalg\.norm: a norm over 3 axes"):
        gt.linalg.norm(c(np.ones((2, 2, 2))), 2)
    with pytest.raises(ValueError, match=r"gt\.linalg\.norm: argument axis \(3\) is out of range"):
        gt.linalg.norm(a, axis=3)
    with pytest.raises(ValueError, match=r"gt\.linalg\.eigh: UPLO must be 'L' or 'U'"):
        gt.linalg.eigh(a, UPLO="X")
    with pytest.raises(ValueError, match=r"gt\.linalg\.qr: mode must be"):
        gt.linalg.qr(a, mode="raw")
    with pytest.raises(TypeError, match=r"gt\.linalg\.matrix_power: the exponent must be an integer"):
        gt.linalg.matrix_power(a, 1.5)
    with pytest.raises(NotImplementedError, match=r"gt\.linalg\.svd: hermitian=True"):
        gt.linalg.svd(a, hermitian=True)
    x = c(rng.standard_normal((4, 2)))
    with gt.GradientTape() as tape:
        tape.watch(x)
        q, _ = gt.linalg.qr(x, mode="complete")
    with pytest.raises(NotImplementedError, match=r"gt\.linalg\.qr: no gradient for mode='complete'"):
        tape.gradient(q, x)


def test_compiled_step_through_linalg_equals_eager_bitwise():
    """gt.function traces and replays the linalg primitives (multi-output ones included)."""
    a = gt.Variable(spd(4, 4))
    b = c(rng.standard_normal(4))

    def step(rhs):
        with gt.GradientTape() as tape:
            w, _ = gt.linalg.eigh(a)
            _, s, _ = gt.linalg.svd(a, full_matrices=False)
            loss = gt.sum(gt.linalg.solve(a, rhs)) + gt.sum(gt.linalg.cholesky(a)) + gt.sum(w) + gt.sum(s)
            loss = loss + gt.linalg.slogdet(a).logabsdet + gt.sum(gt.abs(gt.linalg.qr(a).R))
        return loss, tape.gradient(loss, a)

    eager = step(b)
    compiled = gt.function(step)
    for _ in range(3):
        got = compiled(b)
    assert float(got[0]) == float(eager[0])
    np.testing.assert_array_equal(got[1].numpy(), eager[1].numpy())


def test_per_matrix_fallback_equals_the_batched_routine():
    """The loop used where cupy.linalg.qr takes one matrix at a time gives numpy's batched result."""
    from gputape.ops.linalg._core import per_matrix

    a = rng.standard_normal((2, 3, 5, 4))
    q, r = per_matrix(np, np.linalg.qr, a, mode="reduced")
    eq, er = np.linalg.qr(a)
    np.testing.assert_array_equal(q, eq)
    np.testing.assert_array_equal(r, er)


# -- cupy against numpy ---------------------------------------------------------------------------


GPU_CASES = {
    "inv": (gt.linalg.inv, (well(2, 3, 3),)),
    "solve": (gt.linalg.solve, (well(2, 3, 3), rng.standard_normal((3, 2)))),
    "det": (gt.linalg.det, (well(2, 3, 3),)),
    "slogdet": (lambda x: gt.linalg.slogdet(x).logabsdet, (well(2, 3, 3),)),
    "cholesky": (lambda x: gt.linalg.cholesky(sym(x)), (spd(2, 4, 4),)),
    "eigh": (lambda x: gt.linalg.eigh(sym(x))[1] ** 2, (separated(2, 3, 3),)),
    "svd": (lambda x: gt.linalg.svd(x, full_matrices=False)[2] ** 2, (distinct_svals(3, 4, batch=(2,)),)),
    "qr": (lambda x: abs(gt.linalg.qr(x)[1]), (rng.standard_normal((2, 4, 3)),)),
    "pinv": (gt.linalg.pinv, (rng.standard_normal((4, 3)),)),
    "norm-nuc": (lambda x: gt.linalg.norm(x, "nuc", axis=(-2, -1)), (rng.standard_normal((2, 3, 4)),)),
    "norm-p": (lambda x: gt.linalg.norm(x, 3, axis=-1), (rng.standard_normal((2, 3, 4)),)),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_CASES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_cupy_matches_numpy_forward_and_gradient(name, dtype):
    from gputape.devices import backend

    cp = backend.cupy_module()
    f, args = GPU_CASES[name]
    out = {}
    for where in ("cpu", "gpu"):
        xs = [gt.constant(cp.asarray(a, dtype) if where == "gpu" else np.asarray(a, dtype)) for a in args]
        with gt.GradientTape() as tape:
            tape.watch(xs)
            y = f(*xs)
            loss = gt.sum(y * y)
        gs = tape.gradient(loss, xs)
        assert all(g.device.startswith("cuda" if where == "gpu" else "cpu") for g in gs)
        out[where] = (y.numpy(), [g.numpy() for g in gs])
    tol = TOL[dtype] if dtype == "float64" else {"rtol": 2e-3, "atol": 2e-4}
    np.testing.assert_allclose(out["gpu"][0], out["cpu"][0], **tol)
    for g_gpu, g_cpu in zip(out["gpu"][1], out["cpu"][1]):
        np.testing.assert_allclose(g_gpu, g_cpu, **tol)


# -- tf.linalg spellings ----------------------------------------------------------------------


def test_tf_linalg_result_orders_and_options():
    import gputape.tf as tf

    a = rng.standard_normal((2, 4, 3))
    s, u, v = tf.linalg.svd(c(a))
    assert (s.shape, u.shape, v.shape) == ((2, 3), (2, 4, 3), (2, 3, 3))  # full_matrices=False by default
    np.testing.assert_allclose((u.numpy() * s.numpy()[..., None, :]) @ np.swapaxes(v.numpy(), -1, -2), a, atol=1e-12)
    np.testing.assert_allclose(tf.linalg.svd(c(a), compute_uv=False).numpy(), np.linalg.svd(a, compute_uv=False))
    q, r = tf.linalg.qr(c(a), full_matrices=True)
    assert (q.shape, r.shape) == ((2, 4, 4), (2, 4, 3))
    p3 = spd(3, 3)
    e, vecs = tf.linalg.eigh(c(p3))
    np.testing.assert_allclose(e.numpy(), np.linalg.eigvalsh(p3), rtol=1e-12)
    np.testing.assert_allclose((vecs.numpy() * e.numpy()) @ vecs.numpy().T, p3, rtol=1e-12)
    m = well(3, 3)
    b = rng.standard_normal((3, 2))
    np.testing.assert_allclose(tf.linalg.solve(c(m), c(b), adjoint=True).numpy(), np.linalg.solve(m.T, b), rtol=1e-12)
    np.testing.assert_allclose(tf.linalg.inv(c(m), adjoint=True).numpy(), np.linalg.inv(m.T), rtol=1e-12)
    np.testing.assert_allclose(tf.linalg.matvec(c(m), c(b[:, 0])).numpy(), m @ b[:, 0], rtol=1e-12)
    np.testing.assert_allclose(tf.linalg.matmul(c(m), c(m), transpose_a=True).numpy(), m.T @ m, rtol=1e-12)
    np.testing.assert_allclose(tf.linalg.matrix_transpose(c(a)).numpy(), np.swapaxes(a, -1, -2))
    np.testing.assert_allclose(tf.linalg.pinv(c(a)).numpy(), np.linalg.pinv(a), rtol=1e-10, atol=1e-12)
    sign, logabs = tf.linalg.slogdet(c(m))
    np.testing.assert_allclose([float(sign), float(logabs)], np.linalg.slogdet(m), rtol=1e-12)
    p = spd(2, 3, 3)
    np.testing.assert_allclose(tf.linalg.logdet(c(p)).numpy(), np.linalg.slogdet(p)[1], rtol=1e-12)
    with pytest.raises(ValueError, match=r"tf\.linalg\.solve: rhs must be a matrix"):
        tf.linalg.solve(c(m), c(b[:, 0]))


def test_tf_linalg_triangles_and_diagonals():
    import gputape.tf as tf

    m = well(2, 3, 3)
    b = rng.standard_normal((2, 3, 2))
    for lower in (True, False):
        tri = np.tril(m) if lower else np.triu(m)
        got = tf.linalg.triangular_solve(c(m), c(b), lower=lower)
        np.testing.assert_allclose(got.numpy(), np.linalg.solve(tri, b), rtol=1e-12)
        (g,) = grad(lambda x, lower=lower: gt.sum(tf.linalg.triangular_solve(x, c(b), lower=lower)), m)
        ignored = np.triu(np.ones((3, 3)), 1) if lower else np.tril(np.ones((3, 3)), -1)
        assert np.all(g[:, ignored == 1] == 0)  # the triangle never read gets no gradient
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(tf.linalg.band_part(c(x), 1, -1).numpy(), np.triu(x, -1))
    np.testing.assert_array_equal(tf.linalg.band_part(c(x), -1, 0).numpy(), np.tril(x))
    np.testing.assert_array_equal(tf.linalg.band_part(c(x), 0, 0).numpy(), x * np.eye(3, 4))
    np.testing.assert_array_equal(tf.linalg.diag_part(c(x)).numpy(), np.diagonal(x, axis1=-2, axis2=-1))
    np.testing.assert_array_equal(tf.linalg.trace(c(x)).numpy(), np.trace(x, axis1=-2, axis2=-1))
    d = rng.standard_normal((2, 3))
    np.testing.assert_array_equal(tf.linalg.diag(c(d)).numpy(), d[..., None] * np.eye(3))
    check_grads(lambda t: tf.linalg.diag_part(t) ** 2, x, order=2)
    check_grads(lambda t: tf.linalg.diag(t) ** 2, d, order=2)
    check_grads(lambda t: tf.linalg.logdet(sym(t)), spd(3, 3), order=2)


def test_tf_linalg_norm_follows_tensorflows_rules():
    import gputape.tf as tf

    x = rng.standard_normal((2, 3, 4))
    flat = x.reshape(-1)
    # axis=None: a vector norm of all entries, whatever the rank (numpy would refuse ord=1 here)
    np.testing.assert_allclose(float(tf.linalg.norm(c(x))), np.linalg.norm(flat), rtol=1e-12)
    np.testing.assert_allclose(float(tf.linalg.norm(c(x), ord=1)), np.linalg.norm(flat, 1), rtol=1e-12)
    np.testing.assert_allclose(float(tf.linalg.norm(c(x), ord=3.5)), np.linalg.norm(flat, 3.5), rtol=1e-12)
    assert tf.linalg.norm(c(x), keepdims=True).shape == (1, 1, 1)
    np.testing.assert_allclose(tf.linalg.norm(c(x), ord=np.inf, axis=-1).numpy(), np.linalg.norm(x, np.inf, -1))
    for o, npo in [("euclidean", "fro"), ("fro", "fro"), (1, 1), (2, 2), (np.inf, np.inf)]:
        got = tf.linalg.norm(c(x), ord=o, axis=[-2, -1], keepdims=True)
        np.testing.assert_allclose(got.numpy(), np.linalg.norm(x, npo, axis=(-2, -1), keepdims=True), rtol=1e-12)
    for bad, ax in [("nuc", (0, 1)), (-2, (0, 1)), (0, None), (-1, 1), ("fro", 1)]:
        with pytest.raises(ValueError, match=r"tf\.linalg\.norm: ord must be"):
            tf.linalg.norm(c(x), ord=bad, axis=ax)


# -- lstsq --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("ashape", "bshape"), [((5, 3), (5,)), ((5, 3), (5, 2)), ((3, 5), (3, 2)), ((4, 4), (4,))])
def test_lstsq_matches_numpy(dtype, ashape, bshape):
    a = rng.standard_normal(ashape).astype(dtype)
    b = rng.standard_normal(bshape).astype(dtype)
    ex, eres, erank, es = np.linalg.lstsq(a.astype(np.float64), b.astype(np.float64))
    x, res, rank, s = gt.linalg.lstsq(c(a, dtype), c(b, dtype))
    assert x.shape == ex.shape and res.shape == eres.shape and rank == erank
    close(x, ex, dtype)
    close(s, es, dtype)
    if eres.size:
        np.testing.assert_allclose(res.numpy(), eres, rtol=1e-3 if dtype == "float32" else 1e-9)


def test_lstsq_rank_deficient_and_rcond_like_numpy():
    a = np.outer(np.arange(1.0, 5.0), [1.0, 2.0, 3.0])  # rank 1
    b = rng.standard_normal(4)
    ex, eres, erank, _ = np.linalg.lstsq(a, b)
    x, res, rank, _ = gt.linalg.lstsq(c(a), c(b))
    assert rank == erank == 1 and res.shape == eres.shape == (0,)
    np.testing.assert_allclose(x.numpy(), ex, rtol=1e-10)
    a2 = np.diag([1.0, 1e-3, 1.0])
    assert gt.linalg.lstsq(c(a2), c(np.ones(3)), rcond=1e-2).rank == np.linalg.lstsq(a2, np.ones(3), rcond=1e-2)[2] == 2
    with pytest.raises(LinAlgError, match=r"gt\.linalg\.lstsq: incompatible dimensions"):
        gt.linalg.lstsq(c(a), c(np.ones(3)))


def test_lstsq_gradients_to_second_order():
    b = rng.standard_normal((5, 2))
    check_grads(lambda a, y: gt.linalg.lstsq(a, y).x, rng.standard_normal((5, 3)), b, order=2)
    check_grads(lambda a, y: gt.linalg.lstsq(a, y).residuals, rng.standard_normal((5, 3)), b, order=2)
    check_grads(lambda a: gt.linalg.lstsq(a, b[:3]).x, rng.standard_normal((3, 4)), order=2)


def test_tf_linalg_lstsq():
    import gputape.tf as tf

    a = rng.standard_normal((2, 5, 3))
    b = rng.standard_normal((2, 5, 2))
    expect = np.linalg.pinv(a) @ b
    np.testing.assert_allclose(tf.linalg.lstsq(c(a), c(b)).numpy(), expect, rtol=1e-10, atol=1e-12)
    lam = 0.5
    ridge = np.linalg.solve(np.swapaxes(a, -1, -2) @ a + lam * np.eye(3), np.swapaxes(a, -1, -2) @ b)
    np.testing.assert_allclose(tf.linalg.lstsq(c(a), c(b), l2_regularizer=lam).numpy(), ridge, rtol=1e-10)
    w = rng.standard_normal((3, 5))  # wide: the minimum-norm ridge solution
    bw = rng.standard_normal((3, 1))
    ridge_w = w.T @ np.linalg.solve(w @ w.T + lam * np.eye(3), bw)
    np.testing.assert_allclose(tf.linalg.lstsq(c(w), c(bw), l2_regularizer=lam).numpy(), ridge_w, rtol=1e-10)
