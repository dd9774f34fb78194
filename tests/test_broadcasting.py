"""Broadcasting, property-tested: gradients come back in exactly the inputs' shapes.

For ``op`` in add/subtract/multiply/divide/maximum/where and any mutually
broadcastable input shapes, the gradient of ``sum(op(x, y) * w)`` w.r.t. each
input must have that input's shape and dtype and equal the broadcast
cotangent (computed by hand in numpy) summed back over the broadcast axes.
Shapes that do not broadcast raise ValueError naming the op and both shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import gputape as gt

SETTINGS = settings(max_examples=40, deadline=None, database=None)

DTYPES = st.sampled_from([np.float32, np.float64])
SEEDS = st.integers(0, 2**32 - 1)


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` (of the broadcast result's shape) back to ``shape``, independently of gputape."""
    g = np.asarray(g)
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    assert g.shape == tuple(shape)
    return g


def arr(rng, shape, dtype, kind="normal"):
    if kind == "nonzero":  # |y| in [0.5, 2]: a safe denominator
        a = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        a = rng.standard_normal(shape)
    return np.asarray(a, dtype=dtype)


# name -> (gt op, cotangents of op(xb, yb) w.r.t. xb and yb given w, on broadcast float64 arrays, y kind)
BINARY = {
    "add": (gt.add, lambda x, y, w: (w, w), "normal"),
    "subtract": (gt.subtract, lambda x, y, w: (w, -w), "normal"),
    "multiply": (gt.multiply, lambda x, y, w: (w * y, w * x), "normal"),
    "divide": (gt.divide, lambda x, y, w: (w / y, -w * x / (y * y)), "nonzero"),
    "maximum": (gt.maximum, lambda x, y, w: (w * (x >= y), w * (x < y)), "normal"),
    "minimum": (gt.minimum, lambda x, y, w: (w * (x <= y), w * (x > y)), "normal"),
    "operator_add": (lambda x, y: x + y, lambda x, y, w: (w, w), "normal"),
    "operator_mul": (lambda x, y: x * y, lambda x, y, w: (w * y, w * x), "normal"),
}


def _tol(dtype):
    return {"rtol": 2e-5, "atol": 2e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def _check_grad(g, expected, src, dtype):
    assert g is not None
    assert g.shape == src.shape, (g.shape, src.shape)
    assert g.dtype == np.dtype(dtype), (g.dtype, dtype)
    np.testing.assert_allclose(g.numpy(), expected, **_tol(dtype))


@pytest.mark.parametrize("name", list(BINARY))
@SETTINGS
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4), dtype=DTYPES, seed=SEEDS)
def test_binary_gradient_shapes_and_values(name, shapes, dtype, seed):
    op, cotangents, ykind = BINARY[name]
    (sx, sy), out_shape = shapes
    rng = np.random.default_rng(seed)
    x, y = arr(rng, sx, dtype), arr(rng, sy, dtype, ykind)
    w = arr(rng, out_shape, dtype)
    xt, yt = gt.constant(x), gt.constant(y)
    with gt.GradientTape() as tape:
        tape.watch([xt, yt])
        out = op(xt, yt)
        loss = gt.sum(out * gt.constant(w))
    assert out.shape == out_shape
    gx, gy = tape.gradient(loss, [xt, yt])
    f64 = np.float64
    xb, yb = np.broadcast_to(x.astype(f64), out_shape), np.broadcast_to(y.astype(f64), out_shape)
    cx, cy = cotangents(xb, yb, w.astype(f64))
    _check_grad(gx, unbroadcast(cx, sx), xt, dtype)
    _check_grad(gy, unbroadcast(cy, sy), yt, dtype)


@SETTINGS
@given(shapes=mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, max_side=4), dtype=DTYPES, seed=SEEDS)
def test_where_gradient_shapes_and_values(shapes, dtype, seed):
    (sc, sx, sy), out_shape = shapes
    rng = np.random.default_rng(seed)
    cond = np.asarray(rng.random(sc) > 0.5)
    x, y, w = arr(rng, sx, dtype), arr(rng, sy, dtype), arr(rng, out_shape, dtype)
    xt, yt = gt.constant(x), gt.constant(y)
    with gt.GradientTape() as tape:
        tape.watch([xt, yt])
        out = gt.where(gt.constant(cond), xt, yt)
        loss = gt.sum(out * gt.constant(w))
    assert out.shape == out_shape
    np.testing.assert_array_equal(out.numpy(), np.where(cond, x, y))
    gx, gy = tape.gradient(loss, [xt, yt])
    cb = np.broadcast_to(cond, out_shape)
    w64 = w.astype(np.float64)
    _check_grad(gx, unbroadcast(np.where(cb, w64, 0.0), sx), xt, dtype)
    _check_grad(gy, unbroadcast(np.where(cb, 0.0, w64), sy), yt, dtype)


@SETTINGS
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3), seed=SEEDS)
def test_gradient_w_r_t_a_broadcast_result_used_twice(shapes, seed):
    """x broadcast twice along different paths: the two unbroadcast cotangents add up."""
    (sx, sy), out_shape = shapes
    rng = np.random.default_rng(seed)
    x, y, w = arr(rng, sx, np.float64), arr(rng, sy, np.float64), arr(rng, out_shape, np.float64)
    xt, yt = gt.constant(x), gt.constant(y)
    with gt.GradientTape() as tape:
        tape.watch(xt)
        loss = gt.sum((xt * yt + xt) * gt.constant(w))
    gx = tape.gradient(loss, xt)
    yb = np.broadcast_to(y, out_shape)
    _check_grad(gx, unbroadcast(w * yb + w, sx), xt, np.float64)


JACOBIAN_OPS = ["add", "subtract", "multiply", "divide", "maximum"]


@pytest.mark.parametrize("name", JACOBIAN_OPS)
@settings(max_examples=20, deadline=None, database=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3), seed=SEEDS)
def test_jacobian_through_broadcasting(name, shapes, seed):
    """tape.jacobian (one batched sweep) equals the Jacobian assembled one output element at a time."""
    op, cotangents, ykind = BINARY[name]
    (sx, sy), out_shape = shapes
    rng = np.random.default_rng(seed)
    x, y = arr(rng, sx, np.float64), arr(rng, sy, np.float64, ykind)
    xt, yt = gt.constant(x), gt.constant(y)
    with gt.GradientTape() as tape:
        tape.watch([xt, yt])
        out = op(xt, yt)
    jx, jy = tape.jacobian(out, [xt, yt])
    assert jx.shape == out_shape + sx and jy.shape == out_shape + sy
    xb, yb = np.broadcast_to(x, out_shape), np.broadcast_to(y, out_shape)
    n = int(np.prod(out_shape))
    ex = np.zeros((n, *sx))
    ey = np.zeros((n, *sy))
    for k in range(n):
        onehot = np.zeros(n)
        onehot[k] = 1.0
        cx, cy = cotangents(xb, yb, onehot.reshape(out_shape))
        ex[k], ey[k] = unbroadcast(cx, sx), unbroadcast(cy, sy)
    np.testing.assert_allclose(jx.numpy(), ex.reshape(out_shape + sx), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jy.numpy(), ey.reshape(out_shape + sy), rtol=1e-12, atol=1e-12)


# -- shapes that do not broadcast ------------------------------------------------------


@st.composite
def incompatible_shapes(draw):
    """Two shapes that clash in one aligned axis (neither size is 1 there)."""
    a = list(draw(array_shapes(min_dims=1, max_dims=4, min_side=2, max_side=4)))
    i = draw(st.integers(0, len(a) - 1))
    b = list(a)
    b[i] = a[i] + draw(st.integers(1, 3))
    for j in range(len(b)):  # other axes may be 1 on one side: still broadcastable there
        if j != i and draw(st.booleans()):
            b[j] = 1
    b = b[draw(st.integers(0, i)) :]  # drop some leading axes, keeping the clashing one
    a, b = tuple(a), tuple(b)
    return (b, a) if draw(st.booleans()) else (a, b)


ERROR_OPS = {
    "add": gt.add,
    "subtract": gt.subtract,
    "multiply": gt.multiply,
    "divide": gt.divide,
    "maximum": gt.maximum,
    "minimum": gt.minimum,
    "power": gt.power,
}


@pytest.mark.parametrize("name", list(ERROR_OPS))
@settings(max_examples=15, deadline=None, database=None)
@given(shapes=incompatible_shapes(), record=st.booleans())
def test_non_broadcastable_shapes_raise_value_error(name, shapes, record):
    sa, sb = shapes
    a, b = gt.constant(np.ones(sa, np.float32)), gt.constant(np.ones(sb, np.float32))
    with gt.GradientTape() as tape:
        if record:
            tape.watch([a, b])
        with pytest.raises(ValueError) as info:
            ERROR_OPS[name](a, b)
    msg = str(info.value)
    assert f"gt.{name}" in msg, msg
    assert str(sa) in msg and str(sb) in msg, msg


@settings(max_examples=15, deadline=None, database=None)
@given(shapes=incompatible_shapes(), cond_scalar=st.booleans())
def test_where_non_broadcastable_shapes_raise_value_error(shapes, cond_scalar):
    sa, sb = shapes
    cond = np.array(True) if cond_scalar else np.ones(sa, bool)
    with pytest.raises(ValueError) as info:
        gt.where(cond, gt.constant(np.ones(sa)), gt.constant(np.ones(sb)))
    msg = str(info.value)
    assert "gt.where" in msg, msg
    assert str(sa) in msg and str(sb) in msg, msg


@settings(max_examples=15, deadline=None, database=None)
@given(shapes=incompatible_shapes())
def test_operators_non_broadcastable_shapes_raise_value_error(shapes):
    sa, sb = shapes
    a, b = gt.constant(np.ones(sa)), gt.constant(np.ones(sb))
    for expr, name in ((lambda: a + b, "add"), (lambda: a - b, "subtract"), (lambda: a * b, "multiply")):
        with pytest.raises(ValueError) as info:
            expr()
        msg = str(info.value)
        assert f"gt.{name}" in msg and str(sa) in msg and str(sb) in msg, msg


def test_non_broadcastable_example_message():
    with pytest.raises(ValueError, match=r"gt\.add.*\(2, 3\).*\(4,\)"):
        gt.add(gt.zeros((2, 3)), gt.zeros((4,)))
