"""gt.fft's gradients against torch.fft's, in complex128/float64 (first order and Hessian-vector products).

The losses are real, so PyTorch's ``.grad`` and gputape's gradient are the same number (README,
"Complex numbers"); irfft's Hermitian weighting and rfft's zero-extension are what is compared.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt

torch = pytest.importorskip("torch", reason="PyTorch is not installed; these tests compare gradients with it")
pytestmark = pytest.mark.torch

rng = np.random.default_rng(8)
X = rng.standard_normal((3, 6))
Z = X + 1j * rng.standard_normal((3, 6))

# name -> (keywords for numpy/gputape, the same keywords for torch.fft, real input?)
CASES = {
    "fft": ({"n": 8, "norm": "ortho"}, {"n": 8, "norm": "ortho"}, False),
    "ifft": ({"n": 4}, {"n": 4}, False),
    "fft2": ({"s": (2, 8)}, {"s": (2, 8)}, False),
    "ifftn": ({"axes": (0, 1), "norm": "forward"}, {"dim": (0, 1), "norm": "forward"}, False),
    "rfft": ({"n": 9}, {"n": 9}, True),
    "rfftn": ({"s": (4, 5), "axes": (0, 1)}, {"s": (4, 5), "dim": (0, 1)}, True),
    "irfft": ({}, {}, False),
    "irfft-odd": ({"n": 7, "norm": "ortho"}, {"n": 7, "norm": "ortho"}, False),
    "irfftn": ({"s": (4, 6), "axes": (0, 1)}, {"s": (4, 6), "dim": (0, 1)}, False),
}


def _losses(name):
    kw, tkw, real_input = CASES[name]
    fn = name.split("-")[0]
    z0 = X if real_input else Z
    out = getattr(np.fft, fn)(z0, **kw)
    w = rng.standard_normal(out.shape) + (1j * rng.standard_normal(out.shape) if np.iscomplexobj(out) else 0)

    def g_loss(z):
        return gt.sum(gt.real(getattr(gt.fft, fn)(z, **kw) * np.conj(w)) ** 2)

    def t_loss(z):
        return ((getattr(torch.fft, fn)(z, **tkw) * torch.tensor(w).conj()).real ** 2).sum()

    return z0, g_loss, t_loss


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_and_hessian_vector_product_match_pytorch(name):
    z0, g_loss, t_loss = _losses(name)
    v = rng.standard_normal(z0.shape) + (1j * rng.standard_normal(z0.shape) if np.iscomplexobj(z0) else 0)
    zt = torch.tensor(z0, requires_grad=True)
    (gt_t,) = torch.autograd.grad(t_loss(zt), zt, create_graph=True)
    (hv_t,) = torch.autograd.grad((gt_t * torch.tensor(v).conj()).real.sum(), zt)
    z = gt.constant(z0)
    with gt.GradientTape() as outer:
        outer.watch(z)
        with gt.GradientTape() as inner:
            inner.watch(z)
            y = g_loss(z)
        g = inner.gradient(y, z)
        s = gt.sum(gt.real(g * np.conj(v)))
    assert_allclose(g.numpy(), gt_t.detach().numpy(), rtol=1e-10, atol=1e-10)
    assert_allclose(outer.gradient(s, z).numpy(), hv_t.numpy(), rtol=1e-10, atol=1e-10)
