"""gt.linalg's rows for the registry-walking gradient test (tests/test_grad_registry.py merges ``CASES``).

Inputs are well conditioned: SPD matrices as ``A A^T + n I``, symmetric matrices with
well-separated eigenvalues, matrices with well-separated singular values. Functions of
``cholesky``/``eigh`` symmetrise their argument first, because those primitives read one
triangle and return the gradient along symmetric perturbations. Losses of eigenvectors and
singular vectors are gauge invariant (products such as ``V diag(w) V^T`` or ``U U^T``, or
squared entries), because LAPACK's sign choices are arbitrary.
"""

from __future__ import annotations

import numpy as np

import gputape as gt

rng = np.random.default_rng(4321)


def mat(*shape):
    return rng.standard_normal(shape)


def well(*shape):
    """Square matrices with singular values well away from 0 (a shifted identity plus noise)."""
    n = shape[-1]
    return 0.3 * rng.standard_normal(shape) + 2.0 * np.eye(n)


def spd(*shape):
    a = rng.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) / shape[-1] + np.eye(shape[-1])


def separated(*shape, gap=1.0):
    """Symmetric matrices with eigenvalues 1, 1 + gap, 1 + 2 gap, ... in a random basis."""
    n = shape[-1]
    q, _ = np.linalg.qr(rng.standard_normal(shape))
    w = 1.0 + gap * np.arange(n)
    return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)


def distinct_svals(m, n, batch=()):
    """An m x n matrix with singular values 1, 2, 3, ... (distinct and nonzero)."""
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal(batch + (m, k)))
    v, _ = np.linalg.qr(rng.standard_normal(batch + (n, k)))
    return (u * (1.0 + np.arange(k))) @ np.swapaxes(v, -1, -2)


def sym(x):
    return (x + gt.swapaxes(x, -1, -2)) * 0.5


def gauge_free_svd(x, full_matrices=False):
    u, s, vh = gt.linalg.svd(x, full_matrices=full_matrices)
    k = s.shape[-1]
    u, vh = u[..., :, :k], vh[..., :k, :]
    return [gt.matmul(u * s[..., None, :], vh), gt.matmul(u, gt.swapaxes(u, -1, -2)), vh * vh, s]


def gauge_free_eigh(x):
    w, v = gt.linalg.eigh(sym(x))
    return [w, v * v, gt.matmul(v * gt.exp(w)[..., None, :], gt.swapaxes(v, -1, -2))]


def gauge_free_qr(x):
    # Q and R are unique once the signs of R's diagonal are fixed: make it positive.
    q, r = gt.linalg.qr(x)
    s = gt.sign(gt.sum(r * gt.eye(r.shape[-1], dtype=r.dtype), axis=-1))
    return [q * s[..., None, :], r * s[..., :, None]]


def _sign_free_qr_wide(x):
    q, r = gt.linalg.qr(x)
    s = gt.sign(gt.sum(r[..., :, : r.shape[-2]] * gt.eye(r.shape[-2], dtype=r.dtype), axis=-1))
    return [q * s[..., None, :], r * s[..., :, None]]


def real_spectrum(n, batch=()):
    """Non-symmetric matrices with eigenvalues 1, 2, ..., n (real and distinct) in a random basis."""
    p = well(*batch, n, n)
    return (p * (1.0 + np.arange(n))[..., None, :]) @ np.linalg.inv(p)


def eig_function(x):
    # V diag(exp(w)) V^-1 = expm(x): independent of each eigenvector's scale and phase
    w, v = gt.linalg.eig(x)
    return gt.matmul(v * gt.exp(w)[..., None, :], gt.linalg.inv(v))


def eig_parts(x):
    # a rotation-like real matrix has complex-conjugate eigenvalues: real losses of them
    w, v = gt.linalg.eig(x)
    return [gt.real(w), gt.imag(w) ** 2, gt.abs(v), gt.real(eig_function(x))]


CASES: dict[str, list] = {
    "linalg.band": [
        (lambda x: gt.linalg.band_part(x, 0, 1), (mat(3, 4),)),
        (lambda x: gt.linalg.band_part(x, None, -1), (mat(2, 3, 3),)),
    ],
    "linalg.inv": [(gt.linalg.inv, (well(3, 3),)), (gt.linalg.inv, (well(2, 3, 3),))],
    "linalg.solve": [
        (gt.linalg.solve, (well(3, 3), mat(3, 2))),
        (gt.linalg.solve, (well(3, 3), mat(3))),
        (gt.linalg.solve, (well(2, 3, 3), mat(3, 1))),  # b's batch broadcasts against a's
        (gt.linalg.solve, (well(3, 3), mat(2, 3, 2))),  # a broadcasts against b's batch
        (gt.linalg.solve, (well(2, 3, 3), mat(3))),  # one vector for a batch of matrices
    ],
    "linalg.det": [(gt.linalg.det, (well(3, 3),)), (gt.linalg.det, (well(2, 3, 3),))],
    "linalg.slogdet": [
        (lambda x: gt.linalg.slogdet(x).logabsdet, (well(3, 3),)),
        (lambda x: list(gt.linalg.slogdet(x)), (well(2, 3, 3),)),
    ],
    "linalg.cholesky": [
        (lambda x: gt.linalg.cholesky(sym(x)), (spd(3, 3),)),
        (lambda x: gt.linalg.cholesky(sym(x)), (spd(2, 4, 4),)),
    ],
    "linalg.eigh": [
        (gauge_free_eigh, (separated(3, 3),)),
        (gauge_free_eigh, (separated(2, 3, 3),)),
        (lambda x: gt.linalg.eigvalsh(sym(x)), (separated(4, 4),)),
    ],
    "linalg.eig": [
        (eig_function, (real_spectrum(3),)),
        (lambda x: gt.linalg.eigvals(x), (real_spectrum(3, batch=(2,)),)),
        (lambda x: gt.linalg.eig(x).eigenvectors ** 2, (real_spectrum(3),)),  # real V: a sign gauge only
        (eig_parts, (np.array([[0.3, -1.2, 0.1], [1.0, 0.2, 0.4], [0.1, 0.3, 2.0]]),)),
    ],
    "linalg.svd": [
        (gauge_free_svd, (distinct_svals(3, 3),)),
        (gauge_free_svd, (distinct_svals(4, 2),)),
        (gauge_free_svd, (distinct_svals(2, 4, batch=(2,)),)),
        (lambda x: gt.linalg.svd(x, compute_uv=False), (distinct_svals(3, 4),)),
        (lambda x: gauge_free_svd(x, full_matrices=True), (distinct_svals(4, 3),)),
    ],
    "linalg.qr": [
        (gauge_free_qr, (well(3, 3),)),
        (gauge_free_qr, (mat(5, 3),)),
        (gauge_free_qr, (mat(2, 4, 2),)),
        (_sign_free_qr_wide, (mat(2, 4),)),
        (lambda x: gauge_free_qr(x)[1], (mat(4, 3),)),  # R alone: Q's cotangent is None
    ],
    "linalg.pinv": [
        (gt.linalg.pinv, (mat(4, 3),)),
        (gt.linalg.pinv, (mat(2, 3, 5),)),
    ],
    "linalg.vector_norm": [
        (gt.linalg.norm, (mat(3, 4),)),
        (lambda x: gt.linalg.norm(x, axis=1, keepdims=True), (mat(3, 4),)),
        (lambda x: gt.linalg.norm(x, 3, axis=0), (mat(3, 4),)),
        (lambda x: gt.linalg.norm(x, 1.5, axis=-1), (mat(2, 3, 4),)),
        (lambda x: gt.linalg.norm(x, "fro", axis=(0, 2)), (mat(2, 3, 4),)),
    ],
}
