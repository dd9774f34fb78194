"""gt.linalg's gradients and Hessian-vector products against PyTorch's torch.linalg, in float64.

Each case differentiates the same function in both libraries (``compare`` from
tests/test_vs_torch.py: first derivatives and Hessian-vector products must agree).
Decompositions whose factors carry arbitrary signs are compared through gauge-invariant
functions of them; cholesky/eigh inputs are symmetrised first, so that both libraries'
symmetric-gradient conventions apply to the same function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from grad_cases_linalg import distinct_svals, separated, spd, well

import gputape as gt

torch = pytest.importorskip("torch", reason="PyTorch is not installed; these tests compare gradients with it")
from test_vs_torch import compare  # noqa: E402  (after the skip: it imports torch too)

pytestmark = pytest.mark.torch
TL = torch.linalg
rng = np.random.default_rng(99)


def gsym(x):
    return (x + gt.swapaxes(x, -1, -2)) * 0.5


def tsym(x):
    return (x + x.transpose(-1, -2)) * 0.5


def gcat(*ys):
    return gt.concatenate([gt.reshape(y, (-1,)) for y in ys])


def tcat(*ys):
    return torch.cat([y.reshape(-1) for y in ys])


def g_svd(x):
    u, s, vh = gt.linalg.svd(x, full_matrices=False)
    return gcat(gt.matmul(u, gt.swapaxes(u, -1, -2)), vh * vh, s, gt.matmul(u * s[..., None, :] ** 2, vh))


def t_svd(x):
    u, s, vh = TL.svd(x, full_matrices=False)
    return tcat(u @ u.transpose(-1, -2), vh * vh, s, (u * s[..., None, :] ** 2) @ vh)


def g_eigh(x):
    w, v = gt.linalg.eigh(gsym(x))
    return gcat(w, v * v, gt.matmul(v * gt.sin(w)[..., None, :], gt.swapaxes(v, -1, -2)))


def t_eigh(x):
    w, v = TL.eigh(tsym(x))
    return tcat(w, v * v, (v * torch.sin(w)[..., None, :]) @ v.transpose(-1, -2))


def g_qr(x):
    q, r = gt.linalg.qr(x)
    k = r.shape[-2]
    s = gt.sign(gt.sum(r[..., :, :k] * gt.eye(k, dtype="float64"), axis=-1))
    return gcat(q * s[..., None, :], r * s[..., :, None])


def t_qr(x):
    q, r = TL.qr(x)
    s = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    return tcat(q * s[..., None, :], r * s[..., :, None])


B = rng.standard_normal((3, 2))
V3 = rng.standard_normal(3)
B2 = rng.standard_normal((5, 2))

CASES = {
    "inv": (gt.linalg.inv, TL.inv, (well(2, 3, 3),)),
    "solve-matrix": (gt.linalg.solve, TL.solve, (well(2, 3, 3), rng.standard_normal((2, 3, 2)))),
    "solve-vector": (lambda a: gt.linalg.solve(a, V3), lambda a: TL.solve(a, torch.tensor(V3)), (well(3, 3),)),
    "solve-broadcast": (lambda a: gt.linalg.solve(a, B), lambda a: TL.solve(a, torch.tensor(B)), (well(2, 3, 3),)),
    "det": (gt.linalg.det, TL.det, (well(2, 3, 3),)),
    "slogdet": (lambda a: gt.linalg.slogdet(a)[1], lambda a: TL.slogdet(a)[1], (well(2, 3, 3),)),
    "cholesky": (lambda a: gt.linalg.cholesky(gsym(a)), lambda a: TL.cholesky(tsym(a)), (spd(2, 4, 4),)),
    "eigh": (g_eigh, t_eigh, (separated(2, 3, 3),)),
    "eigvalsh": (lambda a: gt.linalg.eigvalsh(gsym(a)), lambda a: TL.eigvalsh(tsym(a)), (separated(4, 4),)),
    "svd-square": (g_svd, t_svd, (distinct_svals(3, 3),)),
    "svd-tall": (g_svd, t_svd, (distinct_svals(5, 3, batch=(2,)),)),
    "svd-wide": (g_svd, t_svd, (distinct_svals(2, 4),)),
    "svdvals": (lambda a: gt.linalg.svd(a, compute_uv=False), TL.svdvals, (distinct_svals(3, 4),)),
    "qr-square": (g_qr, t_qr, (well(3, 3),)),
    "qr-tall": (g_qr, t_qr, (rng.standard_normal((2, 5, 3)),)),
    "qr-wide": (g_qr, t_qr, (rng.standard_normal((3, 5)),)),
    "pinv-tall": (gt.linalg.pinv, TL.pinv, (rng.standard_normal((5, 3)),)),
    "pinv-wide": (gt.linalg.pinv, TL.pinv, (rng.standard_normal((2, 3, 4)),)),
    "lstsq-tall": (
        lambda a: gt.linalg.lstsq(a, B2).x,
        lambda a: TL.lstsq(a, torch.tensor(B2)).solution,
        (rng.standard_normal((5, 3)),),
    ),
    "matrix_power": (lambda a: gt.linalg.matrix_power(a, 3), lambda a: TL.matrix_power(a, 3), (well(3, 3),)),
    "matrix_power-neg": (lambda a: gt.linalg.matrix_power(a, -2), lambda a: TL.matrix_power(a, -2), (well(3, 3),)),
}

X = distinct_svals(3, 4, batch=(2,)) + 0.01 * np.arange(24).reshape(2, 3, 4)  # no ties, no zeros
NORMS = {
    "vector-2": ((None, -1), lambda t: TL.vector_norm(t, 2, dim=-1)),
    "vector-all": ((None, None), lambda t: TL.vector_norm(t)),
    "vector-1": ((1, 0), lambda t: TL.vector_norm(t, 1, dim=0)),
    "vector-3": ((3, 1), lambda t: TL.vector_norm(t, 3, dim=1)),
    "vector-inf": ((math.inf, -1), lambda t: TL.vector_norm(t, math.inf, dim=-1)),
    "vector--inf": ((-math.inf, -1), lambda t: TL.vector_norm(t, -math.inf, dim=-1)),
    "fro": (("fro", (1, 2)), lambda t: TL.matrix_norm(t, "fro")),
    "nuc": (("nuc", (1, 2)), lambda t: TL.matrix_norm(t, "nuc")),
    "spectral": ((2, (1, 2)), lambda t: TL.matrix_norm(t, 2)),
    "spectral-min": ((-2, (1, 2)), lambda t: TL.matrix_norm(t, -2)),
    "matrix-1": ((1, (1, 2)), lambda t: TL.matrix_norm(t, 1)),
    "matrix--1": ((-1, (1, 2)), lambda t: TL.matrix_norm(t, -1)),
    "matrix-inf": ((math.inf, (1, 2)), lambda t: TL.matrix_norm(t, math.inf)),
    "matrix--inf": ((-math.inf, (1, 2)), lambda t: TL.matrix_norm(t, -math.inf)),
    "matrix-swapped": ((1, (2, 1)), lambda t: TL.matrix_norm(t, 1, dim=(2, 1))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_linalg_gradient_and_hvp_match_torch(name):
    gt_f, torch_f, arrays = CASES[name]
    compare(gt_f, torch_f, *arrays)


@pytest.mark.parametrize("name", list(NORMS))
def test_norm_gradient_and_hvp_match_torch(name):
    (o, ax), torch_f = NORMS[name]
    compare(lambda t: gt.linalg.norm(t, o, axis=ax), torch_f, X)


def test_norm_gradient_at_zero_matches_torch():
    z = np.zeros((2, 3))
    compare(lambda t: gt.linalg.norm(t, axis=1), lambda t: TL.vector_norm(t, dim=1), z, second_order=False)
    compare(lambda t: gt.linalg.norm(t), lambda t: TL.vector_norm(t), z, second_order=False)
