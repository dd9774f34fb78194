"""Gradients at singular points and dtype rules a numpy/autograd user relies on (issue 14, item 5).

Expected values are closed forms; the ``torch`` tests compare with PyTorch where it has the op.
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt
from gputape.testing import check_grads


def _grads(f, x, order=2):
    """First and second derivative of sum(f(x)) with respect to x (second: of the sum of the first)."""
    x = gt.constant(x)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.sum(f(x))
        g = inner.gradient(y, x)
    h = outer.gradient(g, x)
    return g.numpy(), (None if h is None else h.numpy())


@pytest.mark.parametrize("p, g1, g2", [(0.0, 0.0, 0.0), (1.0, 1.0, 0.0), (2.0, 0.0, 2.0), (3.0, 0.0, 0.0)])
def test_power_at_zero_has_the_limits_gradients_to_second_order(p, g1, g2):
    x = np.zeros(3)
    for f in (lambda t: t**p, lambda t: gt.power(t, gt.constant(np.full(3, p)))):
        g, h = _grads(f, x)
        np.testing.assert_array_equal(g, np.full(3, g1))
        assert (h is None and g2 == 0) or np.array_equal(h, np.full(3, g2)), (p, h)  # None: unconnected, 0


def test_power_exponent_gradients_stay_exact_near_zero_exponent():
    # the guard at y == 0 must not cost the mixed partial d/dy (y x**(y-1)) = x**(y-1) (1 + y log x)
    x = gt.constant([0.5, 2.0], "float64")
    y = gt.constant([0.0, 0.0], "float64")
    with gt.GradientTape() as outer:
        outer.watch(y)
        with gt.GradientTape() as inner:
            inner.watch(x)
            z = gt.sum(gt.power(x, y))
        gx = inner.gradient(z, x)
    np.testing.assert_allclose(outer.gradient(gx, y).numpy(), 1 / x.numpy())
    check_grads(gt.power, np.array([0.5, 1.5]), np.array([0.0, 1e-3]), order=2)


def test_power_at_zero_matches_torch():
    torch = pytest.importorskip("torch")
    for p in (0.0, 1.0, 2.0):
        xt = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad((xt**p).sum(), xt, create_graph=True)
        mine, mine2 = _grads(lambda t, p=p: t**p, np.zeros(3))
        np.testing.assert_array_equal(mine, g.detach().numpy())
        if g.requires_grad:  # x**0: torch's first derivative is a constant, ours is unconnected
            (h,) = torch.autograd.grad(g.sum(), xt)
            np.testing.assert_array_equal(mine2, h.numpy())
        else:
            assert mine2 is None


def test_std_of_one_element_axis_and_constant_slices_has_zero_gradient():
    x = np.array([[1.0], [2.0], [-3.0]])
    g, _ = _grads(lambda t: gt.std(t, axis=1), x)
    np.testing.assert_array_equal(g, np.zeros_like(x))
    g, _ = _grads(lambda t: gt.std(t, axis=0), np.ones((3, 2)))
    np.testing.assert_array_equal(g, np.zeros((3, 2)))
    # elsewhere the closed form, and the value (NaN without degrees of freedom) is numpy's
    a = np.array([1.0, 2.0, 4.0])
    g, _ = _grads(gt.std, a)
    np.testing.assert_allclose(g, (a - a.mean()) / (a.size * a.std()))
    check_grads(lambda t: gt.std(t, axis=1), np.random.default_rng(0).standard_normal((3, 4)), order=2)
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"):
        assert np.isnan(float(gt.std(gt.constant([]), ddof=0)))
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"):
        assert np.isinf(float(gt.std(gt.constant([1.0, 2.0]), ddof=2)))


def test_std_one_element_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[1.0], [2.0]])
    xt = torch.tensor(x, requires_grad=True)
    torch.std(xt, dim=1, correction=0).sum().backward()
    g, _ = _grads(lambda t: gt.std(t, axis=1), x)
    np.testing.assert_array_equal(g, xt.grad.numpy())


def test_python_floats_are_weak_beside_arrays_and_tensors():
    a64 = np.array([1.0, 3.0])
    t64 = gt.constant(a64)
    for got, want in [
        (gt.dot(t64, 0.1), np.dot(a64, 0.1)),
        (gt.dot(0.1, t64), np.dot(0.1, a64)),
        (gt.multiply(a64, 0.1), a64 * 0.1),
        (gt.add(0.1, a64), 0.1 + a64),
        (gt.multiply(t64, 0.1), a64 * 0.1),
        (gt.add(np.ones(2, np.float32), 0.1), np.ones(2, np.float32) + 0.1),
        (gt.add(np.ones(2, np.int64), 1), np.ones(2, np.int64) + 1),
    ]:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)  # exact: 0.1 is not rounded to float32 first
    # numbers alone follow gputape's rule (gt.constant's): floats float32, ints int32
    assert gt.multiply(2.0, 0.1).dtype == np.float32 and gt.add(1, 2).dtype == np.int32


def test_where_of_python_numbers_follows_gt_constant():
    assert gt.where(True, 1, 2).dtype == gt.constant(1).dtype == np.int32  # TensorFlow's rule (numpy: int64)
    assert gt.where(True, 1, 2.0).dtype == np.float32  # jointly, as gt.constant([1, 2.0]); not float64
    assert gt.where([True, False], 1, 2).numpy().tolist() == [1, 2]
    assert gt.where(True, gt.constant(np.arange(2)), 1).dtype == np.int64  # beside a tensor: numpy's rule


def test_lists_of_tensors_are_packed_differentiably():
    x = gt.constant([1.0, 2.0, 3.0], "float64")
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.mean([x, x + 2])
    assert float(y) == pytest.approx(3.0)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.full(3, 1 / 3))


def test_reduction_dtype_and_out_arguments():
    x = gt.constant([1, 2, 3])
    assert gt.sum(x, dtype="float64").dtype == np.float64 and gt.mean(x, dtype="float32").dtype == np.float32
    assert gt.std(gt.constant([1.0, 3.0]), dtype="float64").dtype == np.float64
    with pytest.raises(TypeError, match="out="):
        gt.max(x, out=np.zeros(()))


def test_clip_takes_numpy_1_and_2_names():
    x = gt.constant([-2.0, 0.5, 3.0])
    for got in (gt.clip(x, -1, 1), gt.clip(x, a_min=-1, a_max=1), gt.clip(x, min=-1, max=1), np.clip(x, -1, 1)):
        assert got.numpy().tolist() == [-1.0, 0.5, 1.0]
    assert np.clip(x, a_max=1).numpy().tolist() == [-2.0, 0.5, 1.0]
    with pytest.raises(TypeError, match="not both"):
        gt.clip(x, a_min=0, min=0)
    with pytest.raises(TypeError, match="out="):
        gt.clip(x, 0, 1, np.zeros(3))
