"""gt.linalg on complex matrices, and the general eigendecomposition gt.linalg.eig / eigvals.

Forward values against numpy (complex64 and complex128); gradients to second order with
``check_grads`` in complex128 (it checks along a real and an imaginary direction) and, for
eig, in float64; gradients derived by hand for small cases; the phase (gauge) rule for complex
eigenvectors and singular vectors; HIPS autograd's complex linalg tests ported; and PyTorch's
gradients in tests/test_linalg_complex_vs_torch.py.

gputape's convention (TensorFlow's, and PyTorch's numbers): the gradient of a real loss L of
``z = x + iy`` is ``dL/dx + i dL/dy``. Functions of eigh and cholesky make their argument
Hermitian the way numpy reads it (the lower triangle, the real part of the diagonal), so that
finite differences see the same function as numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt
from gputape.testing import check_grads

rng = np.random.default_rng(2027)


def cplx(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def cwell(*shape):
    """Complex square matrices with singular values well away from 0."""
    return 0.3 * cplx(*shape) + 2.0 * np.eye(shape[-1])


def hpd(*shape):
    """Hermitian positive-definite matrices."""
    a = cplx(*shape)
    return a @ np.conj(np.swapaxes(a, -1, -2)) / shape[-1] + np.eye(shape[-1])


def herm_l(x, UPLO="L"):
    """The Hermitian matrix numpy's eigh/cholesky read from ``x``: one triangle and the real diagonal."""
    n = x.shape[-1]
    strict = gt.linalg.band_part(x, None, -1) if UPLO == "L" else gt.linalg.band_part(x, -1, None)
    diag = gt.real(x) * np.eye(n)
    return strict + gt.conj(gt.swapaxes(strict, -1, -2)) + diag


def grad_of(f, *args):
    ts = [gt.constant(a) for a in args]
    with gt.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        y = f(*ts)
    gs = tape.gradient(y, ts)
    return [g.numpy() for g in gs]


def fd_grad(f, z, h=1e-6):
    """dL/dx + i dL/dy of a real numpy function ``f`` of a complex array, by central differences."""
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = h
        g[i] = (f(z + e) - f(z - e)) / (2 * h) + 1j * (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
    return g


# -- forward values and dtypes: numpy's ------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_forward_values_and_dtypes_match_numpy(dtype):
    a = cwell(3, 3).astype(dtype)
    b = cplx(3, 2).astype(dtype)
    h = hpd(3, 3).astype(dtype)
    tall = cplx(4, 3).astype(dtype)
    tol = {"rtol": 2e-4, "atol": 1e-5} if dtype == np.complex64 else {"rtol": 1e-10, "atol": 1e-12}
    L = gt.linalg

    def same(got, want):
        got = got.numpy() if isinstance(got, gt.Tensor) else got
        assert np.asarray(got).dtype == np.asarray(want).dtype, (np.asarray(got).dtype, np.asarray(want).dtype)
        assert_allclose(got, want, **tol)

    same(L.inv(a), np.linalg.inv(a))
    same(L.solve(a, b), np.linalg.solve(a, b))
    same(L.solve(a, b[:, 0]), np.linalg.solve(a, b[:, 0]))
    same(L.det(a), np.linalg.det(a))
    for got, want in zip(L.slogdet(a), np.linalg.slogdet(a)):
        same(got, want)
    same(L.cholesky(h), np.linalg.cholesky(h))
    same(L.eigvalsh(h), np.linalg.eigvalsh(h))
    same(L.eigvalsh(h, UPLO="U"), np.linalg.eigvalsh(h, UPLO="U"))
    w, v = L.eigh(h, UPLO="U")
    same(w, np.linalg.eigh(h, UPLO="U")[0])
    assert_allclose(h @ v.numpy(), v.numpy() * w.numpy()[None, :], **tol)
    same(L.svd(tall, compute_uv=False), np.linalg.svd(tall, compute_uv=False))
    for fm in (True, False):
        u, s, vh = L.svd(tall, full_matrices=fm)
        assert u.shape == np.linalg.svd(tall, full_matrices=fm)[0].shape and u.dtype == dtype
        k = s.shape[-1]
        assert_allclose((u.numpy()[:, :k] * s.numpy()) @ vh.numpy()[:k], tall, **tol)
    for mode in ("reduced", "complete"):
        q, r = L.qr(tall, mode=mode)
        assert q.dtype == dtype and q.shape == np.linalg.qr(tall, mode=mode)[0].shape
        assert_allclose(q.numpy() @ r.numpy(), tall, **tol)
    same(L.qr(tall, mode="r"), np.linalg.qr(tall, mode="r"))
    same(L.pinv(tall), np.linalg.pinv(tall))
    same(L.matrix_power(a, 3), np.linalg.matrix_power(a, 3))
    same(L.matrix_power(a, -2), np.linalg.matrix_power(a, -2))
    same(L.matrix_power(a, 0), np.linalg.matrix_power(a, 0))
    bb = cplx(4, 2).astype(dtype)
    got, want = L.lstsq(tall, bb), np.linalg.lstsq(tall, bb, rcond=None)
    same(got.x, want[0])
    same(got.residuals, want[1])
    assert got.rank == want[2]
    same(got.s, want[3])
    ww, vv = L.eig(a)
    assert ww.dtype == dtype and vv.dtype == dtype
    assert_allclose(np.sort_complex(ww.numpy()), np.sort_complex(np.linalg.eigvals(a)), **tol)
    assert_allclose(a @ vv.numpy(), vv.numpy() * ww.numpy()[None, :], **tol)
    assert_allclose(np.linalg.norm(vv.numpy(), axis=0), 1, **tol)
    same(L.eigvals(a), np.linalg.eigvals(a))


NORM_ORDS_VECTOR = [None, 1, 2, 3, 0.5, -1, np.inf, -np.inf, 0]
NORM_ORDS_MATRIX = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_norm_of_complex_input_matches_numpy_for_every_ord(dtype):
    x = cplx(5).astype(dtype)
    m = cplx(3, 4).astype(dtype)
    tol = {"rtol": 1e-5} if dtype == np.complex64 else {"rtol": 1e-12}
    for o in NORM_ORDS_VECTOR:
        got, want = gt.linalg.norm(x, o).numpy(), np.linalg.norm(x, o)
        assert got.dtype == want.dtype, (o, got.dtype, want.dtype)
        assert_allclose(got, want, **tol, err_msg=f"ord={o}")
    for o in NORM_ORDS_MATRIX:
        got, want = gt.linalg.norm(m, o).numpy(), np.linalg.norm(m, o)
        assert got.dtype == want.dtype, (o, got.dtype, want.dtype)
        assert_allclose(got, want, **tol, err_msg=f"ord={o}")
    t = cplx(2, 3, 4).astype(dtype)
    assert_allclose(gt.linalg.norm(t, axis=1, keepdims=True).numpy(), np.linalg.norm(t, axis=1, keepdims=True), **tol)
    assert_allclose(gt.linalg.norm(t, "nuc", axis=(2, 0)).numpy(), np.linalg.norm(t, "nuc", axis=(2, 0)), **tol)


def test_eig_of_real_input_follows_numpys_result_dtype():
    # numpy: real results when every eigenvalue is real, complex (conjugate pairs) otherwise
    tri = np.array([[2.0, 1.0], [0.0, 3.0]])
    rot = np.array([[0.0, -1.0], [1.0, 0.0]])
    for a in (tri, rot):
        w, v = gt.linalg.eig(a)
        nw, nv = np.linalg.eig(a)
        assert w.dtype == nw.dtype and v.dtype == nv.dtype
        assert_allclose(w.numpy(), nw)
    assert gt.linalg.eig(np.array([[1, 2], [3, 4]])).eigenvalues.dtype == np.float64  # integers: float64, as numpy
    assert gt.linalg.eigvals(np.ones((2, 3, 3), np.float32)).shape == (2, 3)


# -- gradients: check_grads to second order (real and imaginary directions) ------------------


def _svd_gauge_free(x, full_matrices=False):
    u, s, vh = gt.linalg.svd(x, full_matrices=full_matrices)
    k = s.shape[-1]
    u, vh = u[..., :, :k], vh[..., :k, :]
    return [
        s,
        gt.abs(u),
        gt.abs(vh),
        gt.matmul(u * s[..., None, :] ** 2, vh),
        gt.matmul(u, gt.conj(gt.swapaxes(u, -1, -2))),
    ]


def _eig_function(x):
    w, v = gt.linalg.eig(x)
    return gt.matmul(v * gt.exp(w)[..., None, :], gt.linalg.inv(v))  # expm(x): gauge free


def _qr_gauge_free(x):
    # complex QR: R's diagonal is real in LAPACK's convention (any sign); fix the signs
    q, r = gt.linalg.qr(x)
    k = min(x.shape[-2:])
    d = gt.sign(gt.real(gt.sum(r[..., :, :k] * np.eye(k), axis=-1)))
    return [q * d[..., None, :], r * d[..., :, None]]


GRAD_CASES = {
    "inv": (gt.linalg.inv, (cwell(3, 3),)),
    "inv-batch": (gt.linalg.inv, (cwell(2, 3, 3),)),
    "solve": (gt.linalg.solve, (cwell(3, 3), cplx(3, 2))),
    "solve-vector": (gt.linalg.solve, (cwell(2, 3, 3), cplx(3))),
    "solve-real-a": (gt.linalg.solve, (cwell(3, 3).real, cplx(3, 2))),
    "solve-real-b": (gt.linalg.solve, (cwell(3, 3), cplx(3, 2).real)),
    "det": (gt.linalg.det, (cwell(3, 3),)),
    "det-batch": (gt.linalg.det, (cwell(2, 3, 3),)),
    "slogdet": (lambda a: list(gt.linalg.slogdet(a)), (cwell(3, 3),)),
    "slogdet-sign": (lambda a: gt.linalg.slogdet(a).sign, (cwell(2, 3, 3),)),
    "cholesky": (lambda a: gt.linalg.cholesky(herm_l(a)), (hpd(3, 3),)),
    "cholesky-batch": (lambda a: gt.linalg.cholesky(herm_l(a)), (hpd(2, 3, 3),)),
    "eigh": (lambda a: (lambda w, v: [w, gt.abs(v)])(*gt.linalg.eigh(herm_l(a))), (hpd(4, 4),)),
    "eigh-U": (lambda a: (lambda w, v: [w, gt.abs(v) ** 2])(*gt.linalg.eigh(herm_l(a, "U"), "U")), (hpd(3, 3),)),
    "eigh-projector": (
        lambda a: (lambda w, v: gt.matmul(v[..., :, :1], gt.conj(gt.swapaxes(v[..., :, :1], -1, -2))))(
            *gt.linalg.eigh(herm_l(a))
        ),
        (hpd(2, 3, 3),),
    ),
    "eigvalsh": (lambda a: gt.linalg.eigvalsh(herm_l(a)), (hpd(4, 4),)),
    "svd-square": (_svd_gauge_free, (cplx(3, 3),)),
    "svd-tall": (_svd_gauge_free, (cplx(4, 2),)),
    "svd-wide-batch": (_svd_gauge_free, (cplx(2, 2, 4),)),
    "svd-full": (lambda a: _svd_gauge_free(a, True), (cplx(4, 3),)),
    "svd-S": (lambda a: gt.linalg.svd(a, compute_uv=False), (cplx(3, 4),)),
    "svd-U-only": (lambda a: gt.abs(gt.linalg.svd(a, full_matrices=False)[0]), (cplx(3, 3),)),
    "svd-Vh-only": (lambda a: gt.abs(gt.linalg.svd(a, full_matrices=False)[2]), (cplx(3, 3),)),
    "qr-square": (_qr_gauge_free, (cplx(3, 3),)),
    "qr-tall": (_qr_gauge_free, (cplx(4, 3),)),
    "qr-wide": (_qr_gauge_free, (cplx(2, 4),)),
    "qr-batch": (_qr_gauge_free, (cplx(2, 4, 2),)),
    "pinv": (gt.linalg.pinv, (cplx(4, 3),)),
    "pinv-wide": (gt.linalg.pinv, (cplx(2, 3, 5),)),
    "matrix_power": (lambda a: gt.linalg.matrix_power(a, 3), (cwell(3, 3),)),
    "matrix_power-negative": (lambda a: gt.linalg.matrix_power(a, -2), (cwell(3, 3),)),
    "lstsq": (lambda a, b: (lambda r: [r.x, r.residuals, r.s])(gt.linalg.lstsq(a, b)), (cplx(5, 3), cplx(5, 2))),
    "lstsq-vector": (lambda a, b: gt.linalg.lstsq(a, b).x, (cplx(4, 2), cplx(4))),
    "eig": (lambda a: [gt.linalg.eig(a)[0], gt.abs(gt.linalg.eig(a)[1])], (cplx(3, 3),)),
    "eig-function": (_eig_function, (cplx(2, 3, 3),)),
    "eigvals": (gt.linalg.eigvals, (cplx(4, 4),)),
    "eig-real-input": (lambda a: [gt.linalg.eig(a)[0], gt.abs(gt.linalg.eig(a)[1])], (rng.standard_normal((4, 4)),)),
    "eigvals-real-input": (gt.linalg.eigvals, (rng.standard_normal((2, 3, 3)),)),
}
for _o in NORM_ORDS_VECTOR:
    if _o != 0:  # (a count: no gradient)
        GRAD_CASES[f"norm-vector-{_o}"] = (lambda x, o=_o: gt.linalg.norm(x, o, axis=-1), (cplx(2, 5),))
for _o in NORM_ORDS_MATRIX:
    GRAD_CASES[f"norm-matrix-{_o}"] = (lambda x, o=_o: gt.linalg.norm(x, o, axis=(0, 1)), (cplx(3, 4, 2),))


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_check_grads_to_second_order(name):
    f, args = GRAD_CASES[name]
    check_grads(f, *args, order=2, rtol=1e-5, atol=1e-6)


def test_every_complex_linalg_primitive_has_a_complex_case():
    from gputape.core.primitive import REGISTRY

    linalg = {n for n in REGISTRY if n.startswith("linalg.")}
    # each VJP is written with conjugate transposes ("direct"); band is a real-linear mask
    assert {n: REGISTRY[n].complex for n in linalg} == {
        n: "holomorphic" if n == "linalg.band" else "direct" for n in linalg
    }
    covered = {n.split("-")[0] for n in GRAD_CASES} | {"band", "vector_norm"}  # (band: through herm_l, norm)
    assert {n.removeprefix("linalg.") for n in linalg} <= covered


# -- hand-derived values ----------------------------------------------------------------------


def test_hand_derived_gradients():
    z = 3.0 + 4.0j
    # inv of a 1x1 matrix is 1/z: the gradient of Re(1/z) is conj(d(1/z)/dz) = conj(-1/z^2)
    (g,) = grad_of(lambda a: gt.real(gt.linalg.inv(a)), np.array([[z]]))
    assert_allclose(g, [[np.conj(-1 / z**2)]])
    # |z| = 5: the gradient of the norm is z / |z|
    (g,) = grad_of(lambda x: gt.linalg.norm(x), np.array([z]))
    assert_allclose(g, [0.6 + 0.8j])
    (g,) = grad_of(lambda x: gt.linalg.norm(x, 1), np.array([z, 0j]))
    assert_allclose(g, [0.6 + 0.8j, 0])  # 0 at 0
    # slogdet of [z]: logabsdet = log|z| has gradient z / |z|^2; Re(sign) = x / r has (y^2 - i x y) / r^3
    (g,) = grad_of(lambda a: gt.linalg.slogdet(a).logabsdet, np.array([[z]]))
    assert_allclose(g, [[z / 25]])
    (g,) = grad_of(lambda a: gt.real(gt.linalg.slogdet(a).sign), np.array([[z]]))
    assert_allclose(g, [[(16 - 12j) / 125]])
    # det(diag(a, b)) = a b: the gradient of Re(det) is conj of the cofactors, diag(conj(b), conj(a))
    a, b = 1 + 2j, -0.5 + 1j
    (g,) = grad_of(lambda m: gt.real(gt.linalg.det(m)), np.diag([a, b]))
    assert_allclose(g, np.diag([np.conj(b), np.conj(a)]), atol=1e-15)
    # cholesky of [[h]] (h > 0) is sqrt(h): d sqrt(h) / dh = 1 / (2 sqrt(h)), real
    (g,) = grad_of(lambda m: gt.real(gt.linalg.cholesky(m)), np.array([[4.0 + 0j]]))
    assert_allclose(g, [[0.25]])


def test_hand_derived_eigenvalue_gradients_of_a_triangular_matrix():
    # A = [[1, c], [0, 2]]: eigenvalue 1 has right vector (1, 0) and left vector (1, -c), so
    # d(lambda_1)/dA = u v^T / (u . v) = [[1, 0], [-c, 0]]; lambda_2 = 2 has [[0, 0], [c, 1]].
    # The gradient of Re(lambda) is the conjugate (lambda is holomorphic in A).
    c = 0.5 + 1j
    A = np.array([[1.0, c], [0.0, 2.0]])
    w = np.linalg.eigvals(A)
    i1, i2 = int(np.argmin(abs(w - 1))), int(np.argmin(abs(w - 2)))
    (g1,) = grad_of(lambda m: gt.real(gt.linalg.eigvals(m)[i1]), A)
    (g2,) = grad_of(lambda m: gt.real(gt.linalg.eigvals(m)[i2]), A)
    assert_allclose(g1, [[1, 0], [-np.conj(c), 0]], atol=1e-12)
    assert_allclose(g2, [[0, 0], [np.conj(c), 1]], atol=1e-12)
    # Im(lambda) is 0 to first order for every perturbation of a real direction, not a complex one
    (gi,) = grad_of(lambda m: gt.imag(gt.linalg.eigvals(m)[i1]), A)
    assert_allclose(gi, 1j * np.array([[1, 0], [-np.conj(c), 0]]), atol=1e-12)
    # and a real matrix: the gradient is real (the real part of the complex one)
    (gr,) = grad_of(lambda m: gt.sum(gt.linalg.eigvals(m) * np.array([1.0, 3.0])), A.real)
    assert gr.dtype == np.float64


def test_eig_gradient_of_a_real_matrix_with_complex_eigenvalues_against_finite_differences():
    a = np.array([[0.3, -1.2, 0.1], [1.0, 0.2, 0.4], [0.1, 0.3, 2.0]])

    def loss_np(m):
        w, v = np.linalg.eig(m)
        return float(np.sum(np.abs(w) ** 3) + np.sum(np.abs(v) ** 2 * np.arange(9).reshape(3, 3)))

    def loss_gt(m):
        w, v = gt.linalg.eig(m)
        return gt.sum(gt.abs(w) ** 3) + gt.sum(gt.abs(v) ** 2 * np.arange(9.0).reshape(3, 3))

    (g,) = grad_of(loss_gt, a)
    want = np.zeros_like(a)
    h = 1e-6
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        want[i] = (loss_np(a + e) - loss_np(a - e)) / (2 * h)
    # numpy orders the eigenvalues the same way at a +- h (no crossing here); |v| is phase free
    assert g.dtype == np.float64
    assert_allclose(g, want, rtol=1e-6, atol=1e-7)


def test_complex_gradients_against_finite_differences_entry_by_entry():
    a = cwell(3, 3)
    W = cplx(3, 3)
    cases = [
        (
            lambda m: gt.sum(gt.real(gt.linalg.inv(m) * np.conj(W))),
            lambda m: np.sum((np.linalg.inv(m) * W.conj()).real),
        ),
        (lambda m: gt.real(gt.linalg.det(m) * (1 - 2j)), lambda m: (np.linalg.det(m) * (1 - 2j)).real),
        (lambda m: gt.linalg.norm(m, "nuc"), lambda m: np.linalg.norm(m, "nuc")),
        (lambda m: gt.sum(gt.abs(gt.linalg.pinv(m)) ** 2), lambda m: np.sum(np.abs(np.linalg.pinv(m)) ** 2)),
        (
            lambda m: gt.sum(gt.imag(gt.linalg.eigvals(m) ** 2)),
            lambda m: np.sum((np.linalg.eigvals(m) ** 2).imag),
        ),
    ]
    for f, nf in cases:
        (g,) = grad_of(f, a)
        assert_allclose(g, fd_grad(nf, a), rtol=1e-6, atol=1e-7)


# -- the phase (gauge) of complex eigenvectors and singular vectors ------------------------


@pytest.mark.parametrize(
    "name, loss",
    [
        ("eig", lambda a: gt.sum(gt.real(gt.linalg.eig(a)[1]))),
        ("eigh", lambda a: gt.sum(gt.imag(gt.linalg.eigh(herm_l(a))[1]))),
        ("svd", lambda a: gt.sum(gt.real(gt.linalg.svd(a)[0]))),
        ("svd", lambda a: gt.sum(gt.real(gt.linalg.svd(a)[2]))),
        ("svd", lambda a: gt.sum(gt.real(gt.linalg.svd(a)[0])) + gt.sum(gt.real(gt.linalg.svd(a)[2]))),
    ],
)
def test_a_loss_that_depends_on_a_complex_vectors_phase_raises(name, loss):
    a = gt.constant(hpd(3, 3) + 0.5 * cplx(3, 3))
    with gt.GradientTape() as tape:
        tape.watch(a)
        y = loss(a)
    with pytest.raises(ValueError, match=rf"gt\.linalg\.{name}: the loss depends on the phases"):
        tape.gradient(y, a)


def test_phase_invariant_losses_of_the_vectors_do_not_raise_and_are_invariant():
    # u_i conj(v_i) (a rank-one piece of A) does not depend on the common phase of the pair
    a = cplx(3, 3)

    def piece(m):
        u, _, vh = gt.linalg.svd(m)
        return gt.sum(gt.real(gt.matmul(u[:, :1], vh[:1, :]) * np.arange(9.0).reshape(3, 3)))

    def piece_np(m):
        u, _, vh = np.linalg.svd(m)
        return np.sum((u[:, :1] @ vh[:1]).real * np.arange(9.0).reshape(3, 3))

    (g,) = grad_of(piece, a)
    assert_allclose(g, fd_grad(piece_np, a), rtol=1e-6, atol=1e-7)


def test_repeated_eigenvalues_give_nan_through_the_eigenvectors_and_finite_through_the_eigenvalues():
    a = np.diag([2.0, 2.0, 3.0]) + 0j
    (g,) = grad_of(lambda m: gt.sum(gt.abs(gt.linalg.eig(m)[1]) ** 2 * np.arange(9.0).reshape(3, 3)), a)
    assert np.isnan(g).any()
    (g,) = grad_of(lambda m: gt.sum(gt.real(gt.linalg.eigvals(m))), a)
    assert_allclose(g, np.eye(3))  # d trace / dA = I


# -- CuPy without cupy.linalg.eig, and bad input ---------------------------------------------


def test_an_array_module_without_eig_gets_an_error_naming_cupy_linalg_eig():
    from types import SimpleNamespace

    from gputape.ops.linalg._spectral import _eig

    fake = SimpleNamespace(linalg=SimpleNamespace(), __version__="13.6.0")
    with pytest.raises(
        NotImplementedError, match=r"gt\.linalg\.eig: this CuPy has no cupy\.linalg\.eig \(CuPy 13\.6\.0\)"
    ):
        _eig.fwd(fake, np.eye(2))

    def eig_without_geev(a):
        raise RuntimeError("geev is not available")

    fake.linalg.eig = eig_without_geev
    with pytest.raises(NotImplementedError, match=r"cupy\.linalg\.eig is unavailable here \(geev is not available\)"):
        _eig.fwd(fake, np.eye(2))


def test_bad_input_raises_with_the_function_named():
    with pytest.raises(np.linalg.LinAlgError, match=r"gt\.linalg\.eig: .*square.*\(2, 3\)"):
        gt.linalg.eig(np.ones((2, 3)) + 0j)
    with pytest.raises(np.linalg.LinAlgError, match=r"gt\.linalg\.eigvals: .*rank >= 2"):
        gt.linalg.eigvals(np.ones(3))
    with pytest.raises(TypeError, match=r"gt\.linalg\.inv: .*dtype bool"):
        gt.linalg.inv(np.eye(2, dtype=bool))
    with pytest.raises(TypeError, match=r"gt\.linalg\.solve: .*dtype bool"):
        gt.linalg.solve(np.eye(2), np.ones(2, dtype=bool))
    with pytest.raises(np.linalg.LinAlgError, match=r"gt\.linalg\.inv: Singular matrix.*complex128"):
        gt.linalg.inv(np.ones((2, 2)) + 1j)


# -- check_grads with complex values: it must catch a wrong real or imaginary part -----------


def test_check_grads_catches_a_gradient_missing_its_conjugate():
    @gt.custom_gradient
    def square_without_conj(z):
        return z * z, lambda g: g * 2 * z  # right: g * conj(2 z)

    @gt.custom_gradient
    def square_right(z):
        return z * z, lambda g: g * gt.conj(2 * z)

    @gt.custom_gradient
    def real_part_wrong_imag(z):
        return gt.real(z), lambda g: g * (1 + 1j)  # right: g (Re z does not move with Im z)

    z = np.array([0.3 + 0.7j, -1.1 + 0.2j])
    check_grads(square_right, z, order=1)
    with pytest.raises(AssertionError, match=r"gradient mismatch \(real direction\)"):
        check_grads(square_without_conj, z, order=1)
    with pytest.raises(AssertionError, match=r"gradient mismatch \(imaginary direction\)"):
        check_grads(real_part_wrong_imag, z, order=1)


def test_check_grads_on_real_functions_is_unchanged_and_refuses_single_precision_outputs():
    check_grads(lambda x: gt.linalg.norm(x) * x, np.array([0.3, -1.2, 2.0]))
    with pytest.raises(AssertionError, match="complex64 for float64/complex128 inputs"):
        check_grads(lambda z: gt.cast(z, np.complex64), np.array([1j]))


# -- HIPS autograd's complex linalg tests (tests/test_linalg.py), ported ---------------------
# autograd checks to second order in reverse mode with random directions, as check_grads does.
# Its eigh tests feed a non-Hermitian matrix to eigh, whose gradient in autograd is the
# derivative with respect to the triangle eigh reads; gputape's is the Hermitian one, so the
# port makes the argument Hermitian the way numpy reads it first (herm_l) — the same function.

npr = np.random.default_rng(1)


def _c(*shape):
    return npr.standard_normal(shape) + 1j * npr.standard_normal(shape)


@pytest.mark.parametrize("shape", [(6,), (6, 5), (6, 5, 4)])
def test_autograd_2norm_and_frobenius_complex(shape):
    axis = (0, 1) if len(shape) == 3 else None
    check_grads(lambda x: gt.linalg.norm(x, axis=axis), _c(*shape))


@pytest.mark.parametrize("p", range(2, 5))
def test_autograd_vector_norm_ord_complex(p):
    check_grads(lambda x: gt.linalg.norm(x, ord=p), _c(6))


@pytest.mark.parametrize("axis", range(3))
def test_autograd_norm_axis_complex(axis):
    check_grads(lambda x: gt.linalg.norm(x, axis=axis), _c(6, 5, 4))


@pytest.mark.parametrize("axis", [None, (0, 1)])
def test_autograd_norm_nuclear_complex(axis):
    shape = (6, 5) if axis is None else (6, 5, 4)
    check_grads(lambda x: gt.linalg.norm(x, ord="nuc", axis=axis), _c(*shape))


@pytest.mark.parametrize("UPLO", ["L", "U"])
def test_autograd_eigvalh_complex(UPLO):
    def fun(x):
        w, v = gt.linalg.eigh(herm_l(x, UPLO), UPLO)
        return [w, gt.abs(v)]

    check_grads(fun, _c(6, 6))


def test_autograd_eig_real():
    check_grads(lambda x: (lambda w, v: [gt.abs(w), gt.abs(v)])(*gt.linalg.eig(x)), npr.standard_normal((8, 8)))


@pytest.mark.parametrize("shape", [(8, 8), (5, 8, 8)])
def test_autograd_eig_complex_and_batched(shape):
    check_grads(lambda x: (lambda w, v: [w, gt.abs(v)])(*gt.linalg.eig(x)), _c(*shape))


@pytest.mark.parametrize("shape", [(3, 5), (4, 3, 5), (4, 4), (3, 4, 4), (5, 3), (4, 5, 3)])
def test_autograd_svd_complex(shape):
    def fun(x):
        u, s, v = gt.linalg.svd(x, full_matrices=False)
        return [gt.abs(u), s, gt.abs(v)]

    check_grads(fun, _c(*shape))


@pytest.mark.parametrize("shape", [(5, 3), (4, 5, 3)])
def test_autograd_svd_only_s_complex(shape):
    check_grads(lambda x: gt.linalg.svd(x, full_matrices=False, compute_uv=False), _c(*shape))


def test_autograd_inv_solve_det_slogdet_pinv_complex():
    d = 5
    m = _c(d, d) + 3 * np.eye(d)
    check_grads(gt.linalg.inv, m)
    b = _c(d, d - 1)
    check_grads(lambda a: gt.linalg.solve(a, b), m)
    check_grads(gt.linalg.det, m)
    check_grads(lambda a: gt.linalg.slogdet(a)[1], m)
    check_grads(gt.linalg.pinv, _c(4, 3))


# -- CuPy: the same functions on a GPU ----------------------------------------------------------

GPU_CASES = [
    "inv",
    "solve",
    "det-batch",
    "slogdet",
    "pinv",
    "matrix_power-negative",
    "svd-square",
    "svd-tall",
    "svd-S",
    "norm-vector-None",
    "norm-vector-1",
    "norm-matrix-nuc",
    "norm-matrix-2",
    "eigvals",
    "eig",
]
GPU_EXTRA = {
    "cholesky": (gt.linalg.cholesky, (hpd(3, 3),)),  # (already Hermitian: the same function on both devices)
    "eigh": (lambda a: (lambda w, v: [w, gt.abs(v)])(*gt.linalg.eigh(a)), (hpd(3, 3),)),
    "qr": (lambda a: gt.abs(gt.linalg.qr(a)[1]), (cplx(4, 3),)),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_CASES + sorted(GPU_EXTRA))
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_cupy_matches_numpy_forward_and_gradient_on_complex_input(name, dtype):
    from gputape.devices import backend

    cp = backend.cupy_module()
    f, args = GPU_EXTRA[name] if name in GPU_EXTRA else GRAD_CASES[name]
    if name in ("eig", "eigvals") and not hasattr(cp.linalg, "eig"):
        with pytest.raises(NotImplementedError, match=r"cupy\.linalg\.eig"):
            f(*[gt.constant(cp.asarray(a, dtype)) for a in args])
        return
    out = {}
    for where in ("cpu", "gpu"):
        xs = [gt.constant(cp.asarray(a, dtype) if where == "gpu" else np.asarray(a, dtype)) for a in args]
        with gt.GradientTape() as tape:
            tape.watch(xs)
            ys = f(*xs)
            ys = ys if isinstance(ys, list) else [ys]
            loss = sum(gt.sum(gt.abs(y) ** 2) for y in ys)
        gs = tape.gradient(loss, xs)
        assert all(g.device.startswith("cuda" if where == "gpu" else "cpu") for g in gs)
        # cupy's eig orders the eigenvalues its own way (its docs say so): compare them sorted,
        # and the gradients of the order-free loss
        general = name in ("eig", "eigvals")
        vals = [np.sort_complex(ys[0].numpy().ravel())] if general else [y.numpy() for y in ys]
        out[where] = (vals, [g.numpy() for g in gs])
    tol = {"rtol": 2e-3, "atol": 2e-4} if dtype == np.complex64 else {"rtol": 1e-8, "atol": 1e-10}
    for a, b in zip(out["gpu"][0] + out["gpu"][1], out["cpu"][0] + out["cpu"][1]):
        assert_allclose(a, b, **tol)
