"""Complex numbers: real, imag, conj, angle and var/std of complex tensors against numpy.

The tape does not yet carry complex values (a complex source or target has gradient None,
warned); the gradients tested here are those of these ops on real input, and the real
results (var/std) that numpy gives for complex input.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt

rng = np.random.default_rng(5)
Z = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
Z[0, 0] = 0  # angle(0) is 0, as in numpy


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, np.float32, np.float64])
@pytest.mark.parametrize("name", ["real", "imag", "conj", "conjugate", "angle"])
def test_parts_match_numpy(name, dtype):
    z = (Z if np.dtype(dtype).kind == "c" else Z.real).astype(dtype)
    got = getattr(gt, name)(gt.constant(z)).numpy()
    want = getattr(np, name)(z)
    assert got.dtype == want.dtype
    assert_allclose(got, want, rtol=1e-6)


def test_angle_in_degrees_and_of_integers_match_numpy():
    assert_allclose(gt.angle(gt.constant(Z), deg=True).numpy(), np.angle(Z, deg=True))
    k = np.array([-2, 0, 3])
    assert gt.angle(gt.constant(k)).numpy().tolist() == np.angle(k).tolist()
    assert gt.imag(gt.constant(k)).numpy().tolist() == np.imag(k).tolist()


@pytest.mark.parametrize("fn", ["var", "std"])
@pytest.mark.parametrize("kw", [{}, {"axis": 0}, {"axis": 1, "ddof": 1, "keepdims": True}])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_var_and_std_of_complex_are_real_as_in_numpy(fn, kw, dtype):
    z = Z.astype(dtype)
    got = getattr(gt, fn)(gt.constant(z), **kw).numpy()
    want = getattr(np, fn)(z, **kw)
    assert got.dtype == want.dtype and got.dtype.kind == "f"
    assert_allclose(got, want, rtol=1e-5)


def test_parts_of_a_real_input_have_the_real_derivatives():
    x = gt.constant(rng.standard_normal(5))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ys = {n: gt.sum(getattr(gt, n)(x) * x) for n in ("real", "imag", "conj", "angle")}
    xv = x.numpy()
    assert_allclose(tape.gradient(ys["real"], x).numpy(), 2 * xv)  # d(x^2)
    assert_allclose(tape.gradient(ys["conj"], x).numpy(), 2 * xv)
    assert_allclose(tape.gradient(ys["imag"], x).numpy(), 0 * xv)  # imag(x) * x == 0
    assert_allclose(tape.gradient(ys["angle"], x).numpy(), np.angle(xv))  # angle is piecewise constant


def test_np_functions_dispatch_to_the_parts():
    t = gt.constant(Z)
    assert isinstance(np.real(t), gt.Tensor) and isinstance(np.angle(t), gt.Tensor)
    assert_allclose(np.imag(t).numpy(), Z.imag)
    assert_allclose(np.conj(t).numpy(), Z.conj())
