"""gt.fft against numpy.fft (values, dtypes) and its gradients against finite differences.

Each gradient check differentiates L = Re(sum(transform(z) * conj(w))) for a random w; for a
complex z the gradient is dL/dx + i dL/dy (gputape's convention), compared with central
differences of the real and imaginary parts. tests/test_fft_vs_torch.py compares with PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt
import gputape.tf as tf

rng = np.random.default_rng(31)
X = rng.standard_normal((3, 6))
Z = X + 1j * rng.standard_normal((3, 6))

# name -> keyword variants (n/s crop and pad, axes, each norm)
VARIANTS = {
    "fft": [{}, {"n": 4}, {"n": 9}, {"norm": "ortho"}, {"norm": "forward", "axis": 0}],
    "ifft": [{}, {"n": 4}, {"n": 9, "norm": "ortho"}, {"axis": -2, "norm": "forward"}],
    "fft2": [{}, {"s": (2, 8)}, {"axes": (1, 0), "norm": "ortho"}],
    "ifft2": [{}, {"s": (4, 3), "norm": "forward"}],
    "fftn": [{}, {"s": (2, 8), "axes": (0, 1)}, {"axes": (0,), "norm": "forward"}],
    "ifftn": [{}, {"axes": (-1,)}, {"s": (5,), "axes": (0,), "norm": "ortho"}],
    "rfft": [{}, {"n": 4}, {"n": 9}, {"n": 7, "norm": "ortho"}, {"norm": "forward", "axis": 0}],
    "rfft2": [{}, {"s": (4, 5)}],
    "rfftn": [{}, {"s": (4, 5), "axes": (0, 1)}, {"s": (2, 8), "axes": (0, 1), "norm": "ortho"}],
    "irfft": [{}, {"n": 4}, {"n": 9}, {"n": 7, "norm": "ortho"}, {"norm": "forward", "n": 5}, {"axis": 0}],
    "irfft2": [{}, {"s": (3, 7)}],
    "irfftn": [{}, {"s": (4, 5), "axes": (0, 1)}, {"s": (2, 7), "axes": (0, 1), "norm": "ortho"}],
}
REAL_INPUT = {"rfft", "rfft2", "rfftn"}
CASES = [(name, kw) for name, kws in VARIANTS.items() for kw in kws]


def _input(name, dtype=np.float64):
    if name in REAL_INPUT:
        return X.astype(dtype)
    return Z.astype(np.result_type(dtype, np.complex64))


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{sorted(k.items())}" for n, k in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_numpy(name, kw, dtype):
    a = _input(name, dtype)
    got = getattr(gt.fft, name)(gt.constant(a), **kw)
    want = getattr(np.fft, name)(a, **kw)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_allclose(got.numpy(), want, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-5)


def fd_grad(f, z, h=1e-6):
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = h
        g[i] = (f(z + e) - f(z - e)) / (2 * h)
        if np.iscomplexobj(z):
            g[i] += 1j * (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
    return g


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{sorted(k.items())}" for n, k in CASES])
def test_gradient_matches_finite_differences(name, kw):
    z0 = _input(name)
    ref = getattr(np.fft, name)(z0, **kw)
    w = rng.standard_normal(ref.shape) + (1j * rng.standard_normal(ref.shape) if np.iscomplexobj(ref) else 0)

    def loss(z):
        return np.sum((getattr(np.fft, name)(z, **kw) * np.conj(w)).real)

    z = gt.constant(z0)
    with gt.GradientTape() as tape:
        tape.watch(z)
        y = gt.sum(gt.real(getattr(gt.fft, name)(z, **kw) * np.conj(w)))
    g = tape.gradient(y, z)
    assert g.dtype == z0.dtype
    assert_allclose(g.numpy(), fd_grad(loss, z0), rtol=1e-6, atol=1e-7)


def test_real_input_to_a_complex_transform_gets_a_real_gradient():
    x = gt.constant(X)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(abs(gt.fft.fft(x)) ** 2)  # Parseval: n * sum(x**2)
    g = tape.gradient(y, x)
    assert g.dtype == np.float64
    assert_allclose(g.numpy(), 2 * 6 * X)


def test_round_trips_and_second_order():
    x = gt.constant(X)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.sum(gt.fft.irfft(gt.fft.rfft(x) * np.array([1.0, 2.0, 0.5, 0.5])) ** 2)
        g = inner.gradient(y, x)
        s = gt.sum(g * X)
    # y = sum((A x)^2) with A linear: grad = 2 A^T A x, and the gradient of <grad, X> is 2 A^T A X
    assert_allclose(outer.gradient(s, x).numpy(), g.numpy(), rtol=1e-10)
    assert_allclose(gt.fft.irfft(gt.fft.rfft(x), n=6).numpy(), X, atol=1e-12)
    assert_allclose(gt.fft.ifftn(gt.fft.fftn(gt.constant(Z))).numpy(), Z, atol=1e-12)


@pytest.mark.parametrize("axes", [None, 0, (1,), (0, 1)])
def test_shifts_and_frequencies_match_numpy(axes):
    assert_allclose(gt.fft.fftshift(gt.constant(X), axes).numpy(), np.fft.fftshift(X, axes))
    assert_allclose(gt.fft.ifftshift(gt.constant(Z), axes).numpy(), np.fft.ifftshift(Z, axes))
    for n, d in ((5, 1.0), (6, 0.25)):
        assert_allclose(gt.fft.fftfreq(n, d).numpy(), np.fft.fftfreq(n, d))
        assert_allclose(gt.fft.rfftfreq(n, d).numpy(), np.fft.rfftfreq(n, d))


def test_fftshift_is_differentiable():
    x = gt.constant(X)
    w = rng.standard_normal(X.shape)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(gt.fft.fftshift(x) * w)
    assert_allclose(tape.gradient(y, x).numpy(), np.fft.ifftshift(w))


def test_bad_arguments_name_the_function():
    z = gt.constant(Z)
    with pytest.raises(ValueError, match=r"gt\.fft\.fft: norm='unit'"):
        gt.fft.fft(z, norm="unit")
    with pytest.raises(TypeError, match=r"gt\.fft\.rfft: the input is complex"):
        gt.fft.rfft(z)
    with pytest.raises(ValueError, match=r"gt\.fft\.fftn: s has 1 entries for 2 axes"):
        gt.fft.fftn(z, s=(3,), axes=(0, 1))
    with pytest.raises(ValueError, match=r"gt\.fft\.fft: invalid number of data points"):
        gt.fft.fft(z, n=0)
    with pytest.raises(TypeError, match=r"gt\.fft\.fft: argument n \(2\.5\) is not an integer"):
        gt.fft.fft(z, n=2.5)
    with pytest.raises(ValueError, match=r"gt\.fft\.irfft: invalid number of data points"):
        gt.fft.irfft(gt.constant(np.array([1.0 + 0j])))
    with pytest.raises(ValueError, match=r"gt\.fft\.fft2: repeated axes"):
        gt.fft.fft2(z, axes=(0, 0))


def test_tf_signal_spellings_transform_the_innermost_dimensions():
    z3 = rng.standard_normal((2, 3, 4)) + 1j * rng.standard_normal((2, 3, 4))
    x3 = z3.real
    t = tf.constant(z3)
    assert_allclose(tf.signal.fft(t).numpy(), np.fft.fft(z3))
    assert_allclose(tf.signal.ifft(t).numpy(), np.fft.ifft(z3))
    assert_allclose(tf.signal.fft2d(t).numpy(), np.fft.fft2(z3))
    assert_allclose(tf.signal.ifft2d(t).numpy(), np.fft.ifft2(z3))
    assert_allclose(tf.signal.fft3d(t).numpy(), np.fft.fftn(z3))
    assert_allclose(tf.signal.ifft3d(t).numpy(), np.fft.ifftn(z3))
    assert_allclose(tf.signal.rfft(tf.constant(x3), fft_length=[6]).numpy(), np.fft.rfft(x3, 6))
    assert_allclose(tf.signal.irfft(t, fft_length=[5]).numpy(), np.fft.irfft(z3, 5))
    assert_allclose(tf.signal.rfft2d(tf.constant(x3)).numpy(), np.fft.rfft2(x3))
    assert_allclose(tf.signal.irfft2d(t).numpy(), np.fft.irfft2(z3))
    assert_allclose(tf.signal.rfft3d(tf.constant(x3)).numpy(), np.fft.rfftn(x3))
    assert_allclose(tf.signal.irfft3d(t, fft_length=[2, 3, 6]).numpy(), np.fft.irfftn(z3, (2, 3, 6), axes=(0, 1, 2)))
    assert_allclose(tf.signal.fftshift(tf.constant(x3), axes=1).numpy(), np.fft.fftshift(x3, 1))
    assert_allclose(tf.signal.ifftshift(tf.constant(x3)).numpy(), np.fft.ifftshift(x3))
    with pytest.raises(ValueError, match=r"tf\.signal\.rfft2d: fft_length must have 2 entries"):
        tf.signal.rfft2d(tf.constant(x3), fft_length=[4])


GPU_CASES = [("fft", {"n": 8}), ("ifft2", {"norm": "ortho"}), ("rfftn", {"s": (4, 5), "axes": (0, 1)}), ("irfft", {})]


@pytest.mark.gpu
@pytest.mark.parametrize("name,kw", GPU_CASES)
def test_cupy_matches_numpy_forward_and_gradient(name, kw):
    from gputape.devices import backend

    cp = backend.cupy_module()
    z0 = _input(name)
    out = {}
    for where in ("cpu", "gpu"):
        z = gt.constant(cp.asarray(z0) if where == "gpu" else z0)
        with gt.GradientTape() as tape:
            tape.watch(z)
            y = getattr(gt.fft, name)(z, **kw)
            loss = gt.sum(abs(y) ** 2)
        g = tape.gradient(loss, z)
        assert g.device.startswith("cuda" if where == "gpu" else "cpu")
        out[where] = (y.numpy(), g.numpy())
    assert_allclose(out["gpu"][0], out["cpu"][0], rtol=1e-10, atol=1e-12)
    assert_allclose(out["gpu"][1], out["cpu"][1], rtol=1e-10, atol=1e-12)
