"""Gradients through complex values against PyTorch's autograd, in complex128.

For a real loss L, PyTorch's ``z.grad`` and gputape's (TensorFlow's) gradient are the same number,
dL/dx + i dL/dy = 2 dL/d(conj z): PyTorch documents it as the conjugate Wirtinger derivative
(times 2, which it folds into the chain rule), TensorFlow as the conjugate of the complex-step
gradient. The functions differ in how each library spells them; the values must agree.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from test_complex import LOSSES, Z4

import gputape as gt

torch = pytest.importorskip("torch", reason="PyTorch is not installed; these tests compare gradients with it")
pytestmark = pytest.mark.torch

# name -> the LOSSES function written with torch
TORCH = {
    "abs-squared": lambda z: (z * z.conj()).real.sum(),
    "abs": lambda z: z.abs().sum(),
    "real-times-imag": lambda z: (z.real * z.imag).sum(),
    "z-squared": lambda z: ((z**2).real + 2 * (z * z).imag).sum(),
    "exp": lambda z: (z.exp().abs() ** 2).sum(),
    "angle": lambda z: (z.angle() * z.abs()).sum(),
    "log-divide": lambda z: (z.log() / (z + 2)).imag.sum(),
    "sin-cos-tanh": lambda z: (z.sin() * z.cos() + z.tanh()).real.sum(),
    "sqrt-reciprocal": lambda z: (z.sqrt() + z.reciprocal()).imag.sum(),
    "matmul": lambda z: (z.reshape(2, 2) @ z.reshape(2, 2).T).imag.sum(),
    "var": lambda z: z.var(unbiased=False),
    "mean-prod": lambda z: (z.mean() * z.prod()).real,
    "conj-where": lambda z: torch.where(torch.tensor([True, False, True, False]), z.conj(), z * z).imag.sum(),
}


def test_every_loss_has_a_torch_twin():
    assert sorted(TORCH) == sorted(LOSSES)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_gradient_matches_pytorch(name):
    zt = torch.tensor(Z4, dtype=torch.complex128, requires_grad=True)
    TORCH[name](zt).backward()
    z = gt.constant(Z4)
    with gt.GradientTape() as tape:
        tape.watch(z)
        y = LOSSES[name][0](z)
    assert_allclose(tape.gradient(y, z).numpy(), zt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["exp", "angle", "log-divide", "matmul", "abs-squared"])
def test_hessian_vector_product_matches_pytorch(name):
    v = np.array([0.3 - 0.2j, 0.5 + 0.1j, -0.4 + 0.6j, 0.2 + 0.3j])
    zt = torch.tensor(Z4, dtype=torch.complex128, requires_grad=True)
    (gt_,) = torch.autograd.grad(TORCH[name](zt), zt, create_graph=True)
    (hv_t,) = torch.autograd.grad((gt_ * torch.tensor(v).conj()).real.sum(), zt)
    z = gt.constant(Z4)
    with gt.GradientTape() as outer:
        outer.watch(z)
        with gt.GradientTape() as inner:
            inner.watch(z)
            y = LOSSES[name][0](z)
        g = inner.gradient(y, z)
        s = gt.sum(gt.real(g * np.conj(v)))
    assert_allclose(outer.gradient(s, z).numpy(), hv_t.numpy(), rtol=1e-9, atol=1e-11)
