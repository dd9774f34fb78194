"""Forward values, dtypes and operator overloads of every public op, against numpy.

Each op runs in float32 and float64 and must (a) match numpy or a hand-written
reference and (b) keep the input dtype: float32 in, float32 out, and Python
float constants never upcast. The last sections pin the gradient edge cases the
contract promises: TensorFlow's tie rule for max/min, zero gradients at kinks,
no NaN leaking through ``where``, stable softmax-family ops, exact ``prod``
gradients with zeros, zero (not None) gradients of piecewise-constant ops, and
accumulation for repeated integer indices.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gputape as gt

DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["float32", "float64"]


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if np.dtype(dtype) == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def close(actual, expected, dtype=np.float64, **kw):
    t = {**tol(dtype), **kw}
    a = actual.numpy() if isinstance(actual, gt.Tensor) else np.asarray(actual)
    np.testing.assert_allclose(a, np.asarray(expected, dtype=np.float64), **t)


def check(out, expected, dtype):
    """``out`` is a gt.Tensor of ``dtype`` whose value is ``expected`` (within the dtype's tolerance)."""
    assert isinstance(out, gt.Tensor), type(out)
    assert out.dtype == np.dtype(dtype), (out.dtype, dtype)
    expected = np.asarray(expected)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    close(out, expected, dtype)


def rand(shape, dtype=np.float64, lo=None, hi=None, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) if lo is None else rng.uniform(lo, hi, shape)
    return a.astype(dtype)


def grad(f, *xs):
    """Gradients of ``sum(f(*xs))`` w.r.t. every ``x`` (each made a tensor and watched)."""
    ts = [x if isinstance(x, gt.Tensor) else gt.constant(np.asarray(x)) for x in xs]
    with gt.GradientTape() as tape:
        tape.watch(ts)
        y = f(*ts)
    gs = tape.gradient(y, ts)
    return gs[0] if len(gs) == 1 else gs


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


# -- elementwise unary ---------------------------------------------------------------

# name -> (gt op, numpy reference, input domain (lo, hi) or None for standard normal)
UNARY = {
    "negative": (gt.negative, np.negative, None),
    "square": (gt.square, np.square, None),
    "sqrt": (gt.sqrt, np.sqrt, (0.1, 4.0)),
    "exp": (gt.exp, np.exp, None),
    "expm1": (gt.expm1, np.expm1, (-1e-3, 1e-3)),
    "log": (gt.log, np.log, (0.1, 4.0)),
    "log1p": (gt.log1p, np.log1p, (-0.5, 1e-3)),
    "sin": (gt.sin, np.sin, None),
    "cos": (gt.cos, np.cos, None),
    "tan": (gt.tan, np.tan, (-1.2, 1.2)),
    "tanh": (gt.tanh, np.tanh, None),
    "sinh": (gt.sinh, np.sinh, None),
    "cosh": (gt.cosh, np.cosh, None),
    "arctan": (gt.arctan, np.arctan, None),
    "arcsinh": (gt.arcsinh, np.arcsinh, (-4.0, 4.0)),
    "log2": (gt.log2, np.log2, (0.1, 4.0)),
    "log10": (gt.log10, np.log10, (0.1, 4.0)),
    "exp2": (gt.exp2, np.exp2, None),
    "deg2rad": (gt.deg2rad, np.deg2rad, None),
    "rad2deg": (gt.rad2deg, np.rad2deg, None),
    "sinc": (gt.sinc, np.sinc, None),
    "arcsin": (gt.arcsin, np.arcsin, (-0.9, 0.9)),
    "arccos": (gt.arccos, np.arccos, (-0.9, 0.9)),
    "arctanh": (gt.arctanh, np.arctanh, (-0.9, 0.9)),
    "arccosh": (gt.arccosh, np.arccosh, (1.1, 4.0)),
    "abs": (gt.abs, np.abs, None),
    "absolute": (gt.absolute, np.abs, None),
    "sign": (gt.sign, np.sign, None),
    "floor": (gt.floor, np.floor, (-3.0, 3.0)),
    "ceil": (gt.ceil, np.ceil, (-3.0, 3.0)),
    "round": (gt.round, np.round, (-3.0, 3.0)),
    "reciprocal": (gt.reciprocal, np.reciprocal, (0.5, 2.0)),
    "erf": (gt.erf, _erf, None),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy(name, dtype):
    op, ref, dom = UNARY[name]
    x = rand((3, 4), dtype, *(dom or (None, None)))
    check(op(gt.constant(x)), ref(x.astype(np.float64)), dtype)


def test_round_is_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7], np.float32)
    check(gt.round(gt.constant(x)), np.round(x), np.float32)


def test_sign_of_zero_is_zero():
    check(gt.sign(gt.constant([-2.0, 0.0, 3.0])), [-1.0, 0.0, 1.0], np.float32)


# -- elementwise binary --------------------------------------------------------------

BINARY = {
    "add": (gt.add, np.add),
    "subtract": (gt.subtract, np.subtract),
    "multiply": (gt.multiply, np.multiply),
    "divide": (gt.divide, np.divide),
    "true_divide": (gt.true_divide, np.divide),
    "power": (gt.power, np.power),
    "maximum": (gt.maximum, np.maximum),
    "minimum": (gt.minimum, np.minimum),
    "mod": (gt.mod, np.mod),
    "floor_divide": (gt.floor_divide, np.floor_divide),
    "logaddexp": (gt.logaddexp, np.logaddexp),
    "arctan2": (gt.arctan2, np.arctan2),
    "hypot": (gt.hypot, np.hypot),
    "logaddexp2": (gt.logaddexp2, np.logaddexp2),
    "fmax": (gt.fmax, np.fmax),
    "fmin": (gt.fmin, np.fmin),
}


def _binary_inputs(name, dtype):
    x = rand((3, 4), dtype, seed=1)
    y = rand((4,), dtype, seed=2)
    if name in ("divide", "true_divide", "mod", "floor_divide"):
        y = (np.abs(y) + 0.5).astype(dtype) * np.array([1, -1, 1, -1], dtype)
    if name == "power":
        x = np.abs(x) + np.asarray(0.5, dtype)
    return x, y


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_numpy_with_broadcasting(name, dtype):
    op, ref = BINARY[name]
    x, y = _binary_inputs(name, dtype)
    expected = ref(x.astype(np.float64), y.astype(np.float64))
    out = op(gt.constant(x), gt.constant(y))
    if name in ("mod", "floor_divide") and dtype == np.float32:
        # floor/mod can legitimately land on the other side of an integer in float32
        expected = ref(x, y)
    check(out, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_python_scalar_keeps_dtype(name, dtype):
    op, ref = BINARY[name]
    x = (np.abs(rand((5,), dtype)) + 0.5).astype(dtype)
    for s in (1.5, 2):
        check(op(gt.constant(x), s), ref(x, np.asarray(s, dtype)), dtype)
        check(op(s, gt.constant(x)), ref(np.asarray(s, dtype), x), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_clip(dtype):
    x = np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0], dtype)
    check(gt.clip(gt.constant(x), -1.0, 1.0), np.clip(x, -1.0, 1.0), dtype)
    check(gt.clip(gt.constant(x), 0.0), np.maximum(x, 0.0), dtype)
    check(gt.clip(gt.constant(x), max=0.5), np.minimum(x, 0.5), dtype)
    check(gt.clip(gt.constant(x), gt.constant(np.full(6, -0.5, dtype)), 2.0), np.clip(x, -0.5, 2.0), dtype)
    with pytest.raises(ValueError, match="clip"):
        gt.clip(gt.constant(x))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_where(dtype):
    x = rand((3, 4), dtype, seed=3)
    y = rand((4,), dtype, seed=4)
    cond = x > 0
    check(gt.where(gt.constant(x) > 0, gt.constant(x), gt.constant(y)), np.where(cond, x, y), dtype)
    check(gt.where(cond, gt.constant(x), 0.0), np.where(cond, x, 0.0), dtype)
    check(gt.where(cond.tolist(), 1.0, gt.constant(x)), np.where(cond, 1.0, x), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cast(dtype):
    x = gt.constant(np.array([1.5, -2.5], dtype))
    other = np.float64 if dtype == np.float32 else np.float32
    check(gt.cast(x, other), [1.5, -2.5], other)
    assert x.astype(dtype) is x
    assert gt.cast(x, "int32").dtype == np.int32


# -- reductions ----------------------------------------------------------------------


def _np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


REDUCTIONS = {
    "sum": (gt.sum, np.sum),
    "mean": (gt.mean, np.mean),
    "max": (gt.max, np.max),
    "min": (gt.min, np.min),
    "prod": (gt.prod, np.prod),
    "var": (gt.var, np.var),
    "std": (gt.std, np.std),
    "logsumexp": (gt.logsumexp, _np_logsumexp),
}
AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keep"])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_matches_numpy(name, axis, keepdims, dtype):
    op, ref = REDUCTIONS[name]
    x = rand((2, 3, 4), dtype, 0.5, 1.5, seed=5)
    expected = ref(x.astype(np.float64), axis=axis, keepdims=keepdims)
    check(op(gt.constant(x), axis=axis, keepdims=keepdims), expected, dtype)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_reduction_methods(name):
    x = rand((2, 3), np.float32, seed=6)
    t = gt.constant(x)
    check(getattr(t, name)(), getattr(np, name)(x), np.float32)
    check(getattr(t, name)(axis=1, keepdims=True), getattr(np, name)(x, axis=1, keepdims=True), np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_var_std_ddof(dtype):
    x = rand((4, 5), dtype, seed=7)
    check(gt.var(gt.constant(x), axis=1, ddof=1), np.var(x.astype(np.float64), axis=1, ddof=1), dtype)
    check(gt.std(gt.constant(x), axis=0, ddof=1), np.std(x.astype(np.float64), axis=0, ddof=1), dtype)


def test_reduction_bad_axis_raises():
    x = gt.zeros((2, 3))
    with pytest.raises(ValueError, match="sum"):
        gt.sum(x, axis=2)
    with pytest.raises(ValueError, match="mean"):
        gt.mean(x, axis=(0, 0))


def test_max_of_empty_raises():
    with pytest.raises(ValueError, match="max"):
        gt.max(gt.zeros((0,)))


# -- linear algebra ------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3,), (3,)),  # inner product -> scalar
    ((2, 3), (3,)),  # matrix-vector
    ((3,), (3, 4)),  # vector-matrix
    ((2, 3), (3, 4)),
    ((5, 2, 3), (5, 3, 4)),  # batched
    ((2, 1, 2, 3), (5, 3, 4)),  # broadcast batch dims
    ((3,), (5, 3, 4)),  # 1-D against a batch
    ((5, 2, 3), (3,)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_matches_numpy(shapes, dtype):
    a = rand(shapes[0], dtype, seed=8)
    b = rand(shapes[1], dtype, seed=9)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    check(gt.matmul(gt.constant(a), gt.constant(b)), expected, dtype)
    check(gt.constant(a) @ gt.constant(b), expected, dtype)


def test_matmul_inner_mismatch_raises():
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        gt.matmul(gt.zeros((2, 3)), gt.zeros((4, 5)))


DOT_SHAPES = [
    ((), (3,)),
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((2, 3, 4), (5, 4, 2)),
    ((2, 3), (5, 3, 2)),
    ((3,), (5, 3, 2)),
    ((2, 3, 4), (4,)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shapes", DOT_SHAPES, ids=str)
def test_dot_matches_numpy(shapes, dtype):
    a = rand(shapes[0], dtype, seed=10)
    b = rand(shapes[1], dtype, seed=11)
    check(gt.dot(gt.constant(a), gt.constant(b)), np.dot(a.astype(np.float64), b.astype(np.float64)), dtype)


EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("...ij,...jk->...ik", [(2, 5, 2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit output
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("ijk,ik->j", [(2, 3, 4), (2, 4)]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("spec", "shapes"), EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_matches_numpy(spec, shapes, dtype):
    ops = [rand(s, dtype, seed=12 + i) for i, s in enumerate(shapes)]
    expected = np.einsum(spec, *[o.astype(np.float64) for o in ops])
    check(gt.einsum(spec, *[gt.constant(o) for o in ops]), expected, dtype)


# -- shape ops -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_shape_ops_match_numpy(dtype):
    x = rand((2, 3, 4), dtype, seed=20)
    t = gt.constant(x)
    check(gt.reshape(t, (4, -1)), x.reshape(4, -1), dtype)
    check(gt.reshape(t, 24), x.reshape(24), dtype)
    check(t.reshape(6, 4), x.reshape(6, 4), dtype)
    check(t.reshape((3, 8)), x.reshape(3, 8), dtype)
    check(gt.transpose(t), x.transpose(), dtype)
    check(gt.transpose(t, (1, 2, 0)), x.transpose(1, 2, 0), dtype)
    check(t.transpose(2, 0, 1), x.transpose(2, 0, 1), dtype)
    check(t.T, x.T, dtype)
    check(gt.swapaxes(t, 0, -1), np.swapaxes(x, 0, -1), dtype)
    check(gt.moveaxis(t, 0, -1), np.moveaxis(x, 0, -1), dtype)
    check(gt.expand_dims(t, 1), np.expand_dims(x, 1), dtype)
    check(gt.expand_dims(t, -1), np.expand_dims(x, -1), dtype)
    y = x.reshape(1, 2, 1, 12)
    check(gt.squeeze(gt.constant(y)), np.squeeze(y), dtype)
    check(gt.squeeze(gt.constant(y), 2), np.squeeze(y, 2), dtype)
    check(gt.squeeze(gt.constant(y), (0, 2)), np.squeeze(y, (0, 2)), dtype)
    check(gt.broadcast_to(gt.constant(x[:, :1, :]), (5, 2, 3, 4)), np.broadcast_to(x[:, :1, :], (5, 2, 3, 4)), dtype)
    check(gt.flatten(t), x.ravel(), dtype)
    check(t.flatten(), x.ravel(), dtype)
    check(gt.pad(t, 1), np.pad(x, 1), dtype)
    check(
        gt.pad(t, ((0, 1), (2, 0), (1, 1)), constant_values=3.0),
        np.pad(x, ((0, 1), (2, 0), (1, 1)), constant_values=3),
        dtype,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_concatenate_stack_split(dtype):
    a, b = rand((2, 3), dtype, seed=21), rand((2, 3), dtype, seed=22)
    ta, tb = gt.constant(a), gt.constant(b)
    for axis in (0, 1, -1):
        check(gt.concatenate([ta, tb], axis=axis), np.concatenate([a, b], axis=axis), dtype)
    for axis in (0, 1, 2, -1):
        check(gt.stack([ta, tb], axis=axis), np.stack([a, b], axis=axis), dtype)
    x = rand((6, 4), dtype, seed=23)
    for sections, axis in ((3, 0), (2, 1), ([1, 4], 0), ([1, 3], -1)):
        parts = gt.split(gt.constant(x), sections, axis=axis)
        ref = np.split(x, sections, axis=axis)
        assert len(parts) == len(ref)
        for p, r in zip(parts, ref):
            check(p, r, dtype)
    with pytest.raises(ValueError, match="split"):
        gt.split(gt.constant(x), 4)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_take_and_getitem(dtype):
    x = rand((3, 4), dtype, seed=24)
    t = gt.constant(x)
    idx = np.array([2, 0, 2])
    check(gt.take(t, idx), np.take(x, idx), dtype)
    check(gt.take(t, idx, axis=0), np.take(x, idx, axis=0), dtype)
    check(gt.take(t, [3, 1], axis=1), np.take(x, [3, 1], axis=1), dtype)
    check(gt.take(t, [[0, 5], [11, 1]]), np.take(x, [[0, 5], [11, 1]]), dtype)
    check(t[1], x[1], dtype)
    check(t[:, 1:3], x[:, 1:3], dtype)
    check(t[::-1, ::2], x[::-1, ::2], dtype)
    check(t[..., None, 0], x[..., None, 0], dtype)
    check(t[idx], x[idx], dtype)
    check(t[idx, np.array([0, 1, 3])], x[idx, np.array([0, 1, 3])], dtype)
    check(t[gt.constant([1, 1])], x[[1, 1]], dtype)
    check(t[x > 0], x[x > 0], dtype)
    check(t[t > 0], x[x > 0], dtype)
    check(gt.getitem(t, (slice(None), 0)), x[:, 0], dtype)


# -- creation ------------------------------------------------------------------------


def test_creation_default_dtypes_and_values():
    check(gt.zeros((2, 3)), np.zeros((2, 3)), np.float32)
    check(gt.zeros(3, dtype="float64"), np.zeros(3), np.float64)
    check(gt.ones(2), np.ones(2), np.float32)
    check(gt.ones((2, 2), dtype=gt.float64), np.ones((2, 2)), np.float64)
    check(gt.full((2,), 7.0), [7.0, 7.0], np.float32)
    check(gt.full((2, 1), 3.0, dtype="float64"), np.full((2, 1), 3.0), np.float64)
    assert gt.full((2,), 3).dtype == np.int32
    check(gt.eye(3), np.eye(3), np.float32)
    check(gt.eye(2, 3), np.eye(2, 3), np.float32)
    check(gt.eye(2, dtype="float64"), np.eye(2), np.float64)
    check(gt.linspace(0.0, 1.0, 5), np.linspace(0, 1, 5), np.float32)
    check(gt.linspace(0, 2, 3, dtype="float64"), [0.0, 1.0, 2.0], np.float64)


def test_arange_dtypes():
    a = gt.arange(5)
    assert a.dtype == np.int32 and a.numpy().tolist() == [0, 1, 2, 3, 4]
    a = gt.arange(1, 10, 3)
    assert a.dtype == np.int32 and a.numpy().tolist() == [1, 4, 7]
    a = gt.arange(5, 0, -2)
    assert a.dtype == np.int32 and a.numpy().tolist() == [5, 3, 1]
    check(gt.arange(0.0, 1.0, 0.25), [0.0, 0.25, 0.5, 0.75], np.float32)
    check(gt.arange(0, 2, 0.5), [0.0, 0.5, 1.0, 1.5], np.float32)
    check(gt.arange(3, dtype="float64"), [0.0, 1.0, 2.0], np.float64)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_like_ops_keep_dtype(dtype):
    x = gt.constant(np.ones((2, 3), dtype))
    check(gt.zeros_like(x), np.zeros((2, 3)), dtype)
    check(gt.ones_like(x), np.ones((2, 3)), dtype)
    check(gt.zeros_like(np.ones(2, dtype)), np.zeros(2), dtype)
    assert gt.ones_like(x, dtype="int32").dtype == np.int32


def test_constant_dtype_rules():
    assert gt.constant(1.5).dtype == np.float32
    assert gt.constant([1.0, 2.0]).dtype == np.float32
    assert gt.constant([1, 2]).dtype == np.int32
    assert gt.constant(3).dtype == np.int32
    assert gt.constant(True).dtype == np.bool_
    assert gt.constant(np.zeros(2)).dtype == np.float64
    assert gt.constant(np.zeros(2, np.float32)).dtype == np.float32
    assert gt.constant([1.0], dtype="float64").dtype == np.float64


def test_random_default_dtypes_and_seed():
    gt.random.seed(3)
    a = gt.random.normal((2, 3))
    b = gt.random.uniform((4,), 2.0, 3.0)
    gt.random.seed(3)
    assert a.dtype == np.float32 and a.shape == (2, 3)
    assert b.dtype == np.float32 and b.shape == (4,)
    assert np.all((b.numpy() >= 2.0) & (b.numpy() < 3.0))
    np.testing.assert_array_equal(gt.random.normal((2, 3)).numpy(), a.numpy())


# -- gt.nn ---------------------------------------------------------------------------


def _np_log_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    "relu": (gt.nn.relu, lambda x: np.maximum(x, 0)),
    "leaky_relu": (gt.nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x)),
    "leaky_relu_0.1": (lambda x: gt.nn.leaky_relu(x, alpha=0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "elu": (gt.nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "elu_2": (lambda x: gt.nn.elu(x, alpha=2.0), lambda x: np.where(x > 0, x, 2.0 * np.expm1(x))),
    "gelu": (gt.nn.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "gelu_tanh": (lambda x: gt.nn.gelu(x, approximate=True), _gelu_tanh),
    "sigmoid": (gt.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "softplus": (gt.nn.softplus, lambda x: np.log1p(np.exp(x))),
    "softmax": (gt.nn.softmax, lambda x: np.exp(_np_log_softmax(x))),
    "softmax_axis0": (lambda x: gt.nn.softmax(x, axis=0), lambda x: np.exp(_np_log_softmax(x, 0))),
    "log_softmax": (gt.nn.log_softmax, _np_log_softmax),
    "log_softmax_axis0": (lambda x: gt.nn.log_softmax(x, axis=0), lambda x: _np_log_softmax(x, 0)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_reference(name, dtype):
    op, ref = ACTIVATIONS[name]
    x = (rand((4, 5), dtype, seed=30) * 3).astype(dtype)
    check(op(gt.constant(x)), ref(x.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_activations_stable_for_large_inputs(dtype):
    x = gt.constant(np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype))
    check(gt.nn.sigmoid(x), [0.0, 1 / (1 + np.exp(50.0)), 0.5, 1 / (1 + np.exp(-50.0)), 1.0], dtype)
    check(gt.nn.softplus(x), [0.0, np.log1p(np.exp(-50.0)), np.log(2.0), 50.0, 1000.0], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_losses_match_reference(dtype):
    logits = (rand((4, 3), dtype, seed=31) * 2).astype(dtype)
    labels = np.array([0, 2, 1, 2])
    lsm = _np_log_softmax(logits.astype(np.float64))
    check(
        gt.nn.sparse_softmax_cross_entropy_with_logits(labels, gt.constant(logits)),
        -lsm[np.arange(4), labels],
        dtype,
    )
    probs = np.abs(rand((4, 3), np.float64, seed=32))
    probs /= probs.sum(-1, keepdims=True)
    check(
        gt.nn.softmax_cross_entropy_with_logits(probs.astype(dtype), gt.constant(logits)),
        -(probs.astype(dtype).astype(np.float64) * lsm).sum(-1),
        dtype,
    )
    z = rand((4, 3), np.float64, 0.0, 1.0, seed=33).astype(dtype)
    x64, z64 = logits.astype(np.float64), z.astype(np.float64)
    sig = 1 / (1 + np.exp(-x64))
    check(
        gt.nn.sigmoid_cross_entropy_with_logits(z, gt.constant(logits)),
        -(z64 * np.log(sig) + (1 - z64) * np.log(1 - sig)),
        dtype,
    )
    y_true = rand((4, 3), dtype, seed=34)
    check(
        gt.nn.mean_squared_error(gt.constant(y_true), gt.constant(logits)),
        np.mean((y_true.astype(np.float64) - x64) ** 2, axis=-1),
        dtype,
    )


def test_sparse_xent_rejects_bad_labels():
    logits = gt.zeros((2, 3))
    with pytest.raises(TypeError, match="integers"):
        gt.nn.sparse_softmax_cross_entropy_with_logits(np.array([0.0, 1.0]), logits)
    with pytest.raises(ValueError, match="shape"):
        gt.nn.sparse_softmax_cross_entropy_with_logits(np.array([0, 1, 2]), logits)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        gt.nn.sparse_softmax_cross_entropy_with_logits(np.array([0, 3]), logits)


# -- comparisons ---------------------------------------------------------------------

COMPARISONS = {
    "equal": (gt.equal, np.equal),
    "not_equal": (gt.not_equal, np.not_equal),
    "less": (gt.less, np.less),
    "less_equal": (gt.less_equal, np.less_equal),
    "greater": (gt.greater, np.greater),
    "greater_equal": (gt.greater_equal, np.greater_equal),
}


def _bool(out, expected):
    assert isinstance(out, gt.Tensor), type(out)
    assert out.dtype == np.bool_, out.dtype
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparison_functions_return_bool(name, dtype):
    op, ref = COMPARISONS[name]
    x = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], dtype)
    y = np.array([2.0, 2.0, 2.0], dtype)
    _bool(op(gt.constant(x), gt.constant(y)), ref(x, y))
    _bool(op(gt.constant(x), 2.0), ref(x, 2.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_comparison_operators(dtype):
    x = np.array([1.0, 2.0, 3.0], dtype)
    y = np.array([3.0, 2.0, 1.0], dtype)
    t, u = gt.constant(x), gt.constant(y)
    _bool(t == u, x == y)
    _bool(t != u, x != y)
    _bool(t < u, x < y)
    _bool(t <= u, x <= y)
    _bool(t > u, x > y)
    _bool(t >= u, x >= y)
    _bool(t > 2.0, x > 2.0)
    _bool(2.0 < t, x > 2.0)  # reflected
    _bool(2 >= t, x <= 2)
    _bool(y < t, y < x)  # numpy array on the left
    _bool(t == 2.0, x == 2.0)
    _bool((t > 1.0) & (t < 3.0), (x > 1) & (x < 3))
    _bool((t < 2.0) | (t > 2.0), x != 2)
    _bool(~(t > 2.0), ~(x > 2))


def test_comparisons_carry_no_gradient():
    x = gt.constant([1.0, -2.0, 3.0])
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(gt.cast(x > 0, "float32") * 2.0)
    assert tape.gradient(y, x) is None


# -- operators on tensors ------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_arithmetic_operators(dtype):
    x = np.array([1.5, -2.0, 3.25], dtype)
    y = np.array([0.5, 4.0, -1.5], dtype)
    t, u = gt.constant(x), gt.constant(y)
    check(t + u, x + y, dtype)
    check(t - u, x - y, dtype)
    check(t * u, x * y, dtype)
    check(t / u, x / y, dtype)
    check(t // u, x // y, dtype)
    check(t % u, x % y, dtype)
    check(abs(t) ** u, np.abs(x) ** y, dtype)
    check(-t, -x, dtype)
    check(+t, x, dtype)
    check(abs(t), np.abs(x), dtype)
    m = rand((3, 2), dtype, seed=40)
    check(t @ gt.constant(m), x @ m, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_python_scalars_and_reflected_operators_keep_dtype(dtype):
    x = np.array([1.5, 2.0, 3.25], dtype)
    t = gt.constant(x)
    d = dtype
    check(t + 2.0, x + d(2.0), dtype)
    check(2.0 + t, d(2.0) + x, dtype)
    check(t - 0.5, x - d(0.5), dtype)
    check(2.0 - t, d(2.0) - x, dtype)
    check(3 * t, d(3) * x, dtype)
    check(t * 0.1, x * d(0.1), dtype)
    check(t / 3.0, x / d(3.0), dtype)
    check(2.0 / t, d(2.0) / x, dtype)
    check(t // 1.5, x // d(1.5), dtype)
    check(7.0 // t, d(7.0) // x, dtype)
    check(t % 1.5, x % d(1.5), dtype)
    check(7.0 % t, d(7.0) % x, dtype)
    check(t**2, x**2, dtype)
    check(t**0.5, x ** d(0.5), dtype)
    check(2.0**t, d(2.0) ** x, dtype)
    check(np.float32(2.0) * t, d(2.0) * x, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_numpy_array_on_the_left_gives_a_differentiable_tensor(dtype):
    a = np.array([1.0, 2.0, 3.0], dtype)
    x = gt.constant(np.array([0.5, -1.0, 2.0], dtype))
    m = rand((2, 3), dtype, seed=41)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        prod_ = a * x
        diff = a - x
        quot = a / x
        mm = m @ x
    for out, expected in ((prod_, a * x.numpy()), (diff, a - x.numpy()), (quot, a / x.numpy()), (mm, m @ x.numpy())):
        check(out, expected, dtype)
    close(tape.gradient(prod_, x), a, dtype)
    close(tape.gradient(diff, x), -np.ones(3), dtype)
    close(tape.gradient(quot, x), -a / x.numpy() ** 2, dtype)
    close(tape.gradient(mm, x), m.sum(0), dtype)
    del tape


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_reflected_operator_gradients(dtype):
    x = np.array([0.5, 1.5, 2.0], dtype)
    cases = [
        (lambda t: 2.0 - t, -np.ones(3)),
        (lambda t: 2.0 / t, -2.0 / x.astype(np.float64) ** 2),
        (lambda t: 2.0**t, np.log(2.0) * 2.0 ** x.astype(np.float64)),
        (lambda t: 3.0 * t + 1.0, 3.0 * np.ones(3)),
        (lambda t: -t, -np.ones(3)),
        (lambda t: abs(-t), np.ones(3)),
    ]
    for f, expected in cases:
        close(grad(f, x), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_gradient_dtype_with_python_scalar_operand(name, dtype):
    op = BINARY[name][0]
    x = np.array([0.5, 1.5, 2.0], dtype)
    fs = [lambda t: op(t, 2.0), lambda t: op(t, 3)]
    if name != "power":  # a Python base for power: see test_python_base_power_gradient_keeps_float32
        fs += [lambda t: op(2.0, t), lambda t: op(3, t)]
    for f in fs:
        assert grad(f, x).dtype == np.dtype(dtype), name


def test_python_base_power_gradient_keeps_float32():
    x = np.array([0.5, 1.5, 2.0], np.float32)
    assert grad(lambda t: 2.0**t, x).dtype == np.float32
    assert grad(lambda t: gt.power(3, t), x).dtype == np.float32


def test_tensor_protocol():
    t = gt.constant(np.arange(6.0).reshape(2, 3))
    assert len(t) == 2
    assert t.ndim == 2 and t.size == 6 and t.shape == (2, 3)
    assert float(gt.constant(2.5)) == 2.5
    assert gt.constant(3.0).item() == 3.0
    np.testing.assert_array_equal(np.asarray(t), np.arange(6.0).reshape(2, 3))
    assert isinstance(t.numpy(), np.ndarray)


# -- Python scalars alone: TensorFlow's rule says floats are float32 -------------------


def test_op_on_python_scalars_only_gives_float32_tensor():
    out = gt.add(1.0, 2.0)
    assert out.shape == () and out.dtype == np.float32 and float(out) == 3.0


def test_python_float_operands_are_float32():
    assert gt.exp(1.0).dtype == np.float32
    assert gt.where(np.array([True, False]), 1.0, 0.0).dtype == np.float32


def test_none_is_not_a_tensor_value():
    with pytest.raises((TypeError, ValueError)):
        gt.constant(None)
    with pytest.raises((TypeError, ValueError)):
        gt.sum(None)


# -- gradient edge cases -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_max_min_ties_split_gradient_equally(dtype):
    close(grad(gt.max, np.array([1.0, 3.0, 3.0], dtype)), [0.0, 0.5, 0.5], dtype)
    close(grad(gt.min, np.array([1.0, 1.0, 3.0], dtype)), [0.5, 0.5, 0.0], dtype)
    close(grad(gt.max, np.full(4, 2.0, dtype)), np.full(4, 0.25), dtype)
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [5.0, 0.0, 1.0]], dtype)
    close(grad(lambda t: gt.max(t, axis=1), x), [[0, 0.5, 0.5], [1 / 3] * 3, [1, 0, 0]], dtype)
    close(grad(lambda t: gt.min(t, axis=0, keepdims=True), x), [[1, 0, 0], [0, 0, 0], [0, 1, 1]], dtype)
    close(grad(lambda t: t.max(), x), (x == 5.0).astype(np.float64), dtype)


def test_max_ties_with_axis_tuple_split_per_slice():
    x = np.array([[[1.0, 3.0], [3.0, 1.0]], [[2.0, 3.0], [0.0, 3.0]]])
    # reducing axes (0, 1) leaves one slice per last index: column 0 has max 3 once, column 1 three times
    expected = np.zeros_like(x)
    expected[0, 1, 0] = 1.0
    expected[0, 0, 1] = expected[1, 0, 1] = expected[1, 1, 1] = 1 / 3
    close(grad(lambda t: gt.max(t, axis=(0, 1)), x), expected)


def test_maximum_minimum_ties_go_to_first_argument():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])
    ga, gb = grad(gt.maximum, a, b)
    close(ga, [1, 0, 1])
    close(gb, [0, 1, 0])
    ga, gb = grad(gt.minimum, a, b)
    close(ga, [1, 1, 0])
    close(gb, [0, 0, 1])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_abs_and_relu_gradient_at_zero_is_zero(dtype):
    x = np.array([-2.0, 0.0, 3.0], dtype)
    close(grad(gt.abs, x), [-1.0, 0.0, 1.0], dtype)
    close(grad(lambda t: abs(t), x), [-1.0, 0.0, 1.0], dtype)
    close(grad(gt.nn.relu, x), [0.0, 0.0, 1.0], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_sqrt_gradient_at_zero_is_inf(dtype):
    g = grad(gt.sqrt, np.array([0.0, 4.0], dtype)).numpy()
    assert g[0] == np.inf, g
    assert g[1] == pytest.approx(0.25)
    assert g.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("fn", [gt.log, gt.sqrt], ids=["log", "sqrt"])
def test_where_guard_gives_zero_gradient_not_nan(fn, dtype):
    x = np.array([0.0, 4.0], dtype)
    with np.errstate(divide="ignore"):
        g = grad(lambda t: gt.where(t > 0, fn(t), 0.0), x)
    expected = 1 / x[1] if fn is gt.log else 0.5 / np.sqrt(x[1])
    close(g, [0.0, expected], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_where_guard_for_division_and_reciprocal(dtype):
    x = np.array([0.0, 2.0], dtype)
    with np.errstate(divide="ignore"):
        close(grad(lambda t: gt.where(t > 0, gt.reciprocal(t), 0.0), x), [0.0, -0.25], dtype)
        close(grad(lambda t: gt.where(t > 0, gt.log1p(t - 1.0), 0.0), x), [0.0, 0.5], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_where_guard_for_division_by_the_source(dtype):
    x = np.array([0.0, 2.0], dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        close(grad(lambda t: gt.where(t > 0, 1.0 / t, 0.0), x), [0.0, -0.25], dtype)
        close(grad(lambda t: gt.where(t > 0, t / gt.sqrt(t), 0.0), x), [0.0, 0.5 / np.sqrt(2.0)], dtype)


def _hvp_ones(f, x):
    """Hessian-vector product of sum(f(x)) with a vector of ones, by nested tapes."""
    t = gt.constant(x)
    with gt.GradientTape() as outer:
        outer.watch(t)
        with gt.GradientTape() as inner:
            inner.watch(t)
            y = gt.sum(f(t))
        g = inner.gradient(y, t)
        s = gt.sum(g)
    return outer.gradient(s, t)


@pytest.mark.parametrize("fn", [gt.log, gt.sqrt, gt.reciprocal], ids=["log", "sqrt", "reciprocal"])
def test_where_guard_second_derivative_is_zero_not_nan(fn):
    x = np.array([0.0, 2.0])
    expected = {gt.log: -1 / 4.0, gt.sqrt: -0.25 * 2.0**-1.5, gt.reciprocal: 2 / 8.0}[fn]
    with np.errstate(divide="ignore"):
        hv = _hvp_ones(lambda t: gt.where(t > 0, fn(t), 0.0), x)
    close(hv, [0.0, expected])


BIG = np.array([1000.0, 0.0, -1000.0])


def _softmax64(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_softmax_family_with_huge_logits(dtype):
    x = BIG.astype(dtype)
    w = np.array([1.0, 2.0, 3.0], dtype)
    sm = _softmax64(BIG)
    # log_softmax
    out = gt.nn.log_softmax(gt.constant(x))
    check(out, [0.0, -1000.0, -2000.0], dtype)
    g = grad(lambda t: gt.nn.log_softmax(t) * w, x)
    assert np.all(np.isfinite(g.numpy()))
    close(g, w - sm * w.sum(), dtype)
    # softmax
    check(gt.nn.softmax(gt.constant(x)), sm, dtype)
    g = grad(lambda t: gt.nn.softmax(t) * w, x)
    assert np.all(np.isfinite(g.numpy()))
    close(g, sm * (w - np.sum(w * sm)), dtype)
    # logsumexp
    check(gt.logsumexp(gt.constant(x)), 1000.0, dtype)
    g = grad(gt.logsumexp, x)
    assert np.all(np.isfinite(g.numpy()))
    close(g, sm, dtype)
    # sparse cross-entropy, against every label
    for label in range(3):
        loss = gt.nn.sparse_softmax_cross_entropy_with_logits([label], gt.constant(x[None]))
        check(loss, [-(_np_log_softmax(BIG)[label])], dtype)
        g = grad(lambda t, label=label: gt.nn.sparse_softmax_cross_entropy_with_logits([label], t), x[None])
        assert np.all(np.isfinite(g.numpy()))
        close(g, sm[None] - np.eye(3)[label], dtype)


def test_logsumexp_huge_logits_along_axis():
    x = np.stack([BIG, -BIG, np.array([1000.0, 1000.0, 0.0])])
    check(gt.logsumexp(gt.constant(x), axis=1), [1000.0, 1000.0, 1000.0 + np.log(2.0)], np.float64)
    close(grad(lambda t: gt.logsumexp(t, axis=1), x), _softmax64(x))


def _prod_grad_reference(x):
    """d prod(x) / d x_i = product of every other element, by brute force."""
    return np.array([np.prod(np.delete(x, i)) for i in range(len(x))])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "values",
    [[2.0, 3.0, 4.0], [2.0, 0.0, 3.0], [0.0, 5.0, 7.0], [2.0, 0.0, 0.0, 3.0], [0.0, 0.0], [0.0, 2.0, 0.0], [-1.5, 2.0]],
    ids=str,
)
def test_prod_gradient_exact_with_zeros(values, dtype):
    x = np.array(values, dtype)
    g = grad(gt.prod, x)
    assert np.all(np.isfinite(g.numpy()))
    np.testing.assert_array_equal(g.numpy(), _prod_grad_reference(x).astype(dtype))


def test_prod_gradient_with_zeros_along_axis():
    x = np.array([[2.0, 0.0, 0.0, 3.0], [1.0, 2.0, 3.0, 4.0], [0.0, 5.0, 6.0, 7.0]])
    g = grad(lambda t: gt.prod(t, axis=1), x)
    np.testing.assert_array_equal(g.numpy(), np.stack([_prod_grad_reference(r) for r in x]))
    g = grad(lambda t: gt.prod(t, axis=0, keepdims=True), x.T)
    np.testing.assert_array_equal(g.numpy(), np.stack([_prod_grad_reference(r) for r in x]).T)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("fn", [gt.floor, gt.ceil, gt.round, gt.sign], ids=["floor", "ceil", "round", "sign"])
def test_piecewise_constant_ops_have_zero_gradient(fn, dtype):
    x = np.array([-1.5, -0.2, 0.0, 0.5, 2.7], dtype)
    g = grad(fn, x)
    assert g is not None
    assert g.dtype == np.dtype(dtype) and g.shape == x.shape
    np.testing.assert_array_equal(g.numpy(), np.zeros(5))
    # and they are zeros when combined with a differentiable path, too
    close(grad(lambda t: fn(t) * t, x), fn(gt.constant(x)).numpy(), dtype)


def test_floor_divide_and_mod_gradients():
    x, y = np.array([5.5, -1.0, 7.0]), np.array([2.0, 3.0, 2.5])
    gx, gy = grad(gt.floor_divide, x, y)
    np.testing.assert_array_equal(gx.numpy(), np.zeros(3))
    np.testing.assert_array_equal(gy.numpy(), np.zeros(3))
    gx, gy = grad(gt.mod, x, y)
    close(gx, np.ones(3))
    close(gy, -np.floor_divide(x, y))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_getitem_repeated_indices_accumulate(dtype):
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype)
    w = np.array([1.0, 10.0, 100.0, 1000.0], dtype)
    idx = np.array([0, 2, 0, 0])
    expected = np.zeros(4)
    np.add.at(expected, idx, w)
    close(grad(lambda t: t[idx] * w, x), expected, dtype)
    close(grad(lambda t: t[idx.tolist()] * w, x), expected, dtype)
    close(grad(lambda t: t[gt.constant(idx)] * w, x), expected, dtype)
    close(grad(lambda t: gt.take(t, idx) * w, x), expected, dtype)
    # two advanced indices together
    m = np.arange(6.0).reshape(2, 3).astype(dtype)
    rows, cols = np.array([1, 1, 0, 1]), np.array([2, 2, 0, 2])
    exp2 = np.zeros((2, 3))
    np.add.at(exp2, (rows, cols), w)
    close(grad(lambda t: t[rows, cols] * w, m), exp2, dtype)
    # along an axis, with repeats
    exp3 = np.zeros((2, 3))
    np.add.at(exp3, (slice(None), np.array([2, 2, 1])), np.ones((2, 3)))
    close(grad(lambda t: gt.take(t, [2, 2, 1], axis=1), m), exp3, dtype)


def test_getitem_slice_and_mask_gradients():
    x = np.arange(12.0).reshape(3, 4)
    expected = np.zeros_like(x)
    expected[::2, 1:3] = 1
    close(grad(lambda t: t[::2, 1:3], x), expected)
    mask = x % 3 == 0
    close(grad(lambda t: t[mask] * 2.0, x), 2.0 * mask)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gradients_keep_float32(dtype):
    x = np.array([0.5, 1.0, 2.0], dtype)
    for f in (
        lambda t: gt.exp(t) * 1.5,
        lambda t: gt.sum(t * t) / 3.0,
        lambda t: gt.nn.log_softmax(t),
        lambda t: gt.matmul(gt.reshape(t, (1, 3)), gt.ones((3, 2), dtype=dtype)),
        lambda t: t[np.array([0, 0])],
    ):
        assert grad(f, x).dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(4, 4), (32, 10), (128, 10), (6, 16, 3), (40, 64), (40, 65), (5, 200)])
def test_softmax_family_row_max_over_many_short_rows_is_numpys(shape, dtype):
    # many short rows take the transposed reduction (gputape.nn.functional._np_row_max): the same
    # maximum as numpy's, so log_softmax/softmax/sparse xent give the bits of numpy's formulas,
    # with non-finite rows (left unshifted) and a -inf entry included
    from gputape.nn.functional import _np_row_max

    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 30).astype(dtype)
    x.reshape(-1, shape[-1])[1, 0] = np.inf
    x.reshape(-1, shape[-1])[2, :] = np.nan
    x.reshape(-1, shape[-1])[3, 1] = -np.inf
    m = np.maximum.reduce(x, axis=-1, keepdims=True)
    assert np.array_equal(_np_row_max(x, -1), m, equal_nan=True)
    assert np.array_equal(_np_row_max(x, x.ndim - 1), m, equal_nan=True)
    shift = np.where(np.isfinite(m), m, 0)
    with np.errstate(invalid="ignore"):
        s = x - shift
        want = s - np.log(np.add.reduce(np.exp(s), axis=-1, keepdims=True))
        got = gt.nn.log_softmax(gt.constant(x)).numpy()
    assert got.dtype == x.dtype and np.array_equal(got, want, equal_nan=True)
    y = x[np.isfinite(x).all(-1)]  # finite rows: the sparse cross-entropy against numpy's formula
    labels = rng.integers(0, shape[-1], y.shape[:-1])
    s = y - np.maximum.reduce(y, axis=-1, keepdims=True)
    lse = np.log(np.add.reduce(np.exp(s), axis=-1))
    want = lse - np.take_along_axis(s, labels[..., None], axis=-1)[..., 0]
    got = gt.nn.sparse_softmax_cross_entropy_with_logits(labels, gt.constant(y)).numpy()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("n", [4, 40], ids=["small", "row_max_path"])  # below and above _np_row_max's size test
def test_softmax_family_rows_whose_max_is_not_finite(n):
    # rows whose max is inf or nan are left unshifted (documented in _row_max); a finite max whose square
    # overflows float32 (1e20) is still subtracted: bitwise numpy's formula with that shift rule
    x = np.random.default_rng(3).standard_normal((n, 5)).astype(np.float32)
    x[0, 2], x[1, :], x[2, 1], x[3, 0] = np.inf, -np.inf, np.nan, 1e20
    with np.errstate(all="ignore"):
        m = x.max(-1, keepdims=True)
        m = np.where(np.isfinite(m), m, np.float32(0))
        s = x - m
        lsm = s - np.log(np.exp(s).sum(-1, keepdims=True))
        e = np.exp(s)
        sm = e / e.sum(-1, keepdims=True)
        np.testing.assert_array_equal(gt.nn.log_softmax(gt.constant(x)).numpy(), lsm)
        np.testing.assert_array_equal(gt.nn.softmax(gt.constant(x)).numpy(), sm)
    assert np.isnan(lsm[0]).any() and np.isfinite(lsm[3]).all() and np.isfinite(lsm[4:]).all()
