"""Walk the whole primitive registry: every primitive's gradient is checked to second order.

A primitive registered without a case here fails ``test_every_primitive_has_a_case``.
Each case is also run through ``tape.jacobian``, whose single vectorised sweep
sends a batch of cotangents through every VJP: it must equal the Jacobian
assembled row by row from ordinary gradients.
"""

from __future__ import annotations

import grad_cases_complex
import grad_cases_fft
import grad_cases_linalg
import grad_cases_numpy
import numpy as np
import pytest

import gputape as gt
from gputape.testing import check_grads

rng = np.random.default_rng(1234)


def r(*shape, lo=None, hi=None):
    """Random float64 values; in [lo, hi] when given (domains away from kinks and poles)."""
    if lo is not None:
        return rng.uniform(lo, hi, shape)
    return rng.standard_normal(shape)


def apart(*shape):
    """Distinct values (no ties, no value near another): safe for max/min/sort-like ops."""
    n = int(np.prod(shape)) if shape else 1
    return (rng.permutation(n) * 0.37 + 0.1).reshape(shape)


IDX = np.array([2, 0, 2, 1])  # repeated index: gradients must accumulate
MASK = np.array([[True, False, True], [False, True, True]])

# name -> list of (function of tensors, args)
CASES: dict[str, list] = {
    "add": [(gt.add, (r(3, 4), r(4))), (lambda x, y: x + y, (r(2, 1), r(1, 3)))],
    "subtract": [(gt.subtract, (r(3, 4), r(3, 1)))],
    "multiply": [(gt.multiply, (r(3, 4), r(4))), (lambda x: x * x, (r(5),))],
    "multiply_no_nan": [
        (gt.multiply_no_nan, (r(3, 4), r(4))),
        (gt.multiply_no_nan, (r(3), np.array([0.0, 1.5, 0.0]))),
    ],
    "divide": [(gt.divide, (r(3, 4), r(4, lo=0.5, hi=2.0)))],
    "negative": [(gt.negative, (r(3, 2),))],
    "power": [
        (gt.power, (r(3, lo=0.5, hi=2.0), r(3, lo=-1.5, hi=2.5))),
        (lambda x: x**3.0, (r(4),)),
        (lambda y: 2.0**y, (r(4),)),
    ],
    "maximum": [(gt.maximum, (apart(3, 4), apart(4) + 0.05))],
    "minimum": [(gt.minimum, (apart(3, 4), apart(4) + 0.05))],
    "mod": [(gt.mod, (r(6, lo=0.1, hi=0.9) + np.arange(6), np.full(6, 1.0) + 0.5))],
    "floor_divide": [(gt.floor_divide, (r(5, lo=0.1, hi=0.9) + np.arange(5), np.full(5, 2.0)))],
    "square": [(gt.square, (r(3, 3),))],
    "sqrt": [(gt.sqrt, (r(3, 3, lo=0.5, hi=3.0),))],
    "exp": [(gt.exp, (r(3, 3),))],
    "expm1": [(gt.expm1, (r(3, 3),))],
    "log": [(gt.log, (r(3, 3, lo=0.5, hi=3.0),))],
    "log1p": [(gt.log1p, (r(3, 3, lo=-0.5, hi=3.0),))],
    "sin": [(gt.sin, (r(3, 3),))],
    "cos": [(gt.cos, (r(3, 3),))],
    "tan": [(gt.tan, (r(3, 3, lo=-1.0, hi=1.0),))],
    "tanh": [(gt.tanh, (r(3, 3),))],
    "sinh": [(gt.sinh, (r(3, 3),))],
    "cosh": [(gt.cosh, (r(3, 3),))],
    "arctan": [(gt.arctan, (r(3, 3),))],
    "arcsinh": [(gt.arcsinh, (r(3, 3) * 2,))],
    "log2": [(gt.log2, (r(3, 3, lo=0.5, hi=3.0),))],
    "log10": [(gt.log10, (r(3, 3, lo=0.5, hi=3.0),))],
    "exp2": [(gt.exp2, (r(3, 3),))],
    "deg2rad": [(gt.deg2rad, (r(3, 3),))],
    "rad2deg": [(gt.rad2deg, (r(3, 3),))],
    "sinc": [(gt.sinc, (r(3, 3) * 2,)), (gt.sinc, (np.array([0.0, 1.0, -2.5]),))],  # 0: the series branch
    "arcsin": [(gt.arcsin, (r(3, 3, lo=-0.8, hi=0.8),))],
    "arccos": [(gt.arccos, (r(3, 3, lo=-0.8, hi=0.8),))],
    "arctanh": [(gt.arctanh, (r(3, 3, lo=-0.8, hi=0.8),))],
    "arccosh": [(gt.arccosh, (r(3, 3, lo=1.2, hi=3.0),))],
    "hypot": [(gt.hypot, (r(3, 4), r(4)))],
    "arctan2": [(gt.arctan2, (r(3, 4), r(4)))],
    "logaddexp": [(gt.logaddexp, (r(3, 4), r(4)))],
    "logaddexp2": [(gt.logaddexp2, (r(3, 4), r(4)))],
    "fmax": [(gt.fmax, (apart(3, 4), apart(4) + 0.05))],
    "fmin": [(gt.fmin, (apart(3, 4), apart(4) + 0.05))],
    "abs": [(gt.abs, (apart(3, 3) - 4.0,))],
    "reciprocal": [(gt.reciprocal, (r(3, 3, lo=0.5, hi=2.0),))],
    "sign": [(lambda x: gt.sign(x) * x, (apart(4) - 1.0,))],
    "floor": [(lambda x: gt.floor(x) + x, (r(4, lo=0.1, hi=0.9),))],
    "ceil": [(lambda x: gt.ceil(x) + x, (r(4, lo=0.1, hi=0.9),))],
    "round": [(lambda x: gt.round(x) + x, (r(4, lo=0.1, hi=0.4),))],
    "identity": [(gt.identity, (r(3),))],
    "erf": [(gt.erf, (r(3, 2),))],
    "where": [(lambda x, y: gt.where(MASK, x, y), (r(2, 3), r(3)))],
    "clip": [
        (lambda x: gt.clip(x, -0.5, 0.5), (r(6, lo=-1, hi=1),)),
        (lambda x, lo, hi: gt.clip(x, lo, hi), (np.array([-2.0, 0.0, 2.0]), np.full(3, -1.0), np.full(3, 1.0))),
    ],
    "cast": [(lambda x: gt.cast(x, "float64") * x, (r(3),))],
    "sum": [
        (lambda x: gt.sum(x, axis=1), (r(3, 4),)),
        (lambda x: gt.sum(x, axis=(0, 2), keepdims=True), (r(2, 3, 4),)),
        (gt.sum, (r(3, 2),)),
    ],
    "mean": [(lambda x: gt.mean(x, axis=0), (r(3, 4),)), (gt.mean, (r(2, 3),))],
    "max": [(lambda x: gt.max(x, axis=1), (apart(3, 4),)), (gt.max, (apart(2, 3),))],
    "min": [(lambda x: gt.min(x, axis=(0, 1)), (apart(3, 4),))],
    "prod": [(lambda x: gt.prod(x, axis=1), (r(3, 4, lo=0.5, hi=1.5),)), (gt.prod, (r(2, 3, lo=0.5, hi=1.5),))],
    "logsumexp": [(lambda x: gt.logsumexp(x, axis=-1), (r(3, 4),)), (gt.logsumexp, (r(5),))],
    "matmul": [
        (gt.matmul, (r(3, 4), r(4, 2))),
        (gt.matmul, (r(4), r(4, 2))),
        (gt.matmul, (r(3, 4), r(4))),
        (gt.matmul, (r(4), r(4))),
        (gt.matmul, (r(2, 3, 4), r(4, 2))),
    ],
    "einsum": [
        (lambda a, b: gt.einsum("ij,jk->ik", a, b), (r(3, 4), r(4, 2))),
        (lambda a, b: gt.einsum("bij,j->bi", a, b), (r(2, 3, 4), r(4))),
        (lambda a: gt.einsum("ij->", a), (r(3, 4),)),
        (lambda a, b: gt.einsum("...i,i", a, b), (r(2, 3), r(3))),
    ],
    "reshape": [(lambda x: gt.reshape(x, (4, -1)), (r(2, 6),))],
    "expand_dims": [(lambda x: gt.expand_dims(x, 1), (r(3, 2),))],
    "squeeze": [(lambda x: gt.squeeze(x, 1), (r(3, 1, 2),))],
    "transpose": [(lambda x: gt.transpose(x, (2, 0, 1)), (r(2, 3, 4),)), (lambda x: x.T, (r(2, 3),))],
    "swapaxes": [(lambda x: gt.swapaxes(x, 0, 2), (r(2, 3, 4),))],
    "broadcast_to": [(lambda x: gt.broadcast_to(x, (3, 2, 4)), (r(2, 1),))],
    "concatenate": [(lambda x, y: gt.concatenate([x, y], axis=1), (r(2, 3), r(2, 2)))],
    "stack": [(lambda x, y: gt.stack([x, y], axis=1), (r(2, 3), r(2, 3)))],
    "split": [
        (lambda x: gt.split(x, 2, axis=1)[1] * 2.0, (r(3, 4),)),
        (lambda x: gt.split(x, [1, 3])[0] + gt.split(x, [1, 3])[2].sum(), (r(5, 2),)),
    ],
    "pad": [(lambda x: gt.pad(x, ((1, 0), (2, 1))), (r(2, 3),))],
    "getitem": [
        (lambda x: x[1:, ::2], (r(3, 4),)),
        (lambda x: x[IDX], (r(3, 2),)),
        (lambda x: x[MASK], (r(2, 3),)),
        (lambda x: x[None, ..., 0], (r(3, 2),)),
        (lambda x: gt.take(x, IDX, axis=1), (r(2, 3),)),
    ],
    "scatter": [(lambda g: gt.scatter(g, (IDX,), (3, 2)), (r(4, 2),))],
    # gputape.nn
    "relu": [(gt.nn.relu, (apart(3, 4) - 6.0,))],
    "leaky_relu": [(gt.nn.leaky_relu, (apart(3, 4) - 6.0,))],
    "elu": [(gt.nn.elu, (apart(3, 4) - 6.0,))],
    "sigmoid": [(gt.nn.sigmoid, (r(3, 4) * 3,))],
    "softplus": [(gt.nn.softplus, (r(3, 4) * 3,))],
    "softmax": [(gt.nn.softmax, (r(3, 4),)), (lambda x: gt.nn.softmax(x, axis=0), (r(3, 4),))],
    "log_softmax": [(gt.nn.log_softmax, (r(3, 4),)), (lambda x: gt.nn.log_softmax(x, axis=0), (r(3, 4),))],
    "sparse_softmax_cross_entropy_with_logits": [
        (lambda z: gt.nn.sparse_softmax_cross_entropy_with_logits(np.array([2, 0, 1]), z), (r(3, 4),)),
        (lambda z: gt.nn.sparse_softmax_cross_entropy_with_logits(np.array([[2, 0], [1, 3]]), z), (r(2, 2, 4),)),
    ],
    "softmax_cross_entropy_with_logits": [
        (lambda z: gt.nn.softmax_cross_entropy_with_logits(np.eye(4, dtype=z.dtype)[[1, 3, 0]], z), (r(3, 4),)),
        # probability labels the tape differentiates too (TensorFlow's v2 gradient: -log_softmax)
        (lambda q, z: gt.nn.softmax_cross_entropy_with_logits(q, z), (r(3, 4, lo=0.0, hi=1.0), r(3, 4))),
    ],
}
CASES.update(grad_cases_numpy.CASES)  # cumsum, cumprod, take_along_axis and its adjoint
CASES.update(grad_cases_linalg.CASES)
CASES.update(grad_cases_complex.CASES)  # real, imag, conj, angle on real input
CASES.update(grad_cases_fft.CASES)  # gt.fft's transforms, complex values made real

# Public composites built from primitives: checked the same way.
COMPOSITES = [
    ("nan_to_num", gt.nan_to_num, (r(3, 4),)),
    ("var", lambda x: gt.var(x, axis=1), (r(3, 4),)),
    ("std", lambda x: gt.std(x), (r(3, 4),)),
    ("dot-nd", lambda a, b: gt.dot(a, b), (r(2, 3), r(4, 3, 2))),
    ("dot-scalar", lambda a: gt.dot(a, 2.0), (r(3),)),
    ("gelu", gt.nn.gelu, (r(3, 4),)),
    ("gelu-tanh", lambda x: gt.nn.gelu(x, approximate=True), (r(3, 4),)),
    ("softmax_xent-axis0", lambda z: gt.nn.softmax_cross_entropy_with_logits(np.eye(4)[[1, 3, 0]].T, z, 0), (r(4, 3),)),
    # the loss heads gputape.core.loss_head fuses at gradient time (first order fused, second order unfused)
    ("head-gather", lambda z: -gt.mean(gt.nn.log_softmax(z)[np.arange(3), np.array([2, 0, 1])]), (r(3, 4),)),
    ("head-gt-arange", lambda z: -gt.mean(gt.nn.log_softmax(z)[gt.arange(3), np.array([2, -1, 1])]), (r(3, 4),)),
    ("head-onehot", lambda z: -gt.mean(gt.sum(np.eye(4)[[1, 3, 0]] * gt.nn.log_softmax(z), axis=1)), (r(3, 4),)),
    ("sigmoid_xent", lambda z: gt.nn.sigmoid_cross_entropy_with_logits(np.array([1.0, 0.0, 1.0]), z), (r(3),)),
    ("mse", lambda a, b: gt.nn.mean_squared_error(a, b), (r(2, 3), r(2, 3))),
    ("moveaxis", lambda x: gt.moveaxis(x, 0, -1), (r(2, 3, 4),)),
    ("flatten", gt.flatten, (r(2, 3),)),
    ("take-flat", lambda x: gt.take(x, [5, 0, 5]), (r(2, 3),)),
]

ALL = [(name, i, f, args) for name, cases in CASES.items() for i, (f, args) in enumerate(cases)]


def test_every_primitive_has_a_case():
    missing = sorted(set(gt.REGISTRY) - set(CASES))
    assert not missing, f"primitives without a gradient test case: {missing}"


def test_no_stale_cases():
    assert not sorted(set(CASES) - set(gt.REGISTRY))


@pytest.mark.parametrize(("name", "i", "f", "args"), ALL, ids=[f"{n}-{i}" for n, i, _, _ in ALL])
def test_primitive_grads_second_order(name, i, f, args):
    check_grads(f, *args, order=2)


@pytest.mark.parametrize(("name", "f", "args"), COMPOSITES, ids=[c[0] for c in COMPOSITES])
def test_composite_grads_second_order(name, f, args):
    check_grads(f, *args, order=2)


def _flat(y):
    if isinstance(y, (list, tuple)):
        return gt.concatenate([gt.reshape(o, (-1,)) for o in y])
    return y


@pytest.mark.parametrize(("name", "i", "f", "args"), ALL, ids=[f"{n}-{i}" for n, i, _, _ in ALL])
def test_vectorised_jacobian_matches_row_by_row(name, i, f, args):
    xs = [gt.constant(np.asarray(a, np.float64)) for a in args]
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(xs)
        y = _flat(f(*xs))
    jac = tape.jacobian(y, xs, unconnected_gradients="zero")
    n = y.size
    for k, x in enumerate(xs):
        assert jac[k].shape == y.shape + x.shape
        rows = []
        for j in range(n):
            seed = np.zeros(n)
            seed[j] = 1.0
            g = tape.gradient(y, x, output_gradients=seed.reshape(y.shape), unconnected_gradients="zero")
            rows.append(g.numpy())
        expect = np.stack(rows).reshape(y.shape + x.shape)
        np.testing.assert_allclose(jac[k].numpy(), expect, rtol=1e-10, atol=1e-12)


def test_check_grads_catches_a_wrong_vjp():
    """The checker must fail on a primitive whose VJP is wrong (a check that can fail)."""
    from gputape import REGISTRY, primitive

    @primitive("test_bad_square", complex="holomorphic", save=True)
    def bad(xp, x):
        return x * x

    @bad.defvjp
    def _(F, g, needs, nb, node, x):
        return (g * 3 * x,)  # wrong: should be 2x

    try:
        with pytest.raises(AssertionError, match="order-1"):
            check_grads(lambda x: bad(x), np.array([0.5, 1.5]), order=1)
    finally:
        del REGISTRY["test_bad_square"]


def test_check_grads_catches_a_wrong_second_order():
    """A VJP right at first order but written with raw (non-differentiable) math fails order 2."""
    from gputape import REGISTRY, primitive

    @primitive("test_flat_sin", complex="holomorphic", save=True)
    def fsin(xp, x):
        return xp.sin(x)

    @fsin.defvjp
    def _(F, g, needs, nb, node, x):
        c = np.cos(x._data) if isinstance(x, gt.Tensor) else np.cos(x)  # detached: no 2nd derivative
        return (g * c,)

    try:
        check_grads(lambda x: fsin(x), np.array([0.5, 1.5]), order=1)
        with pytest.raises(AssertionError):
            check_grads(lambda x: fsin(x), np.array([0.5, 1.5]), order=2)
    finally:
        del REGISTRY["test_flat_sin"]


@pytest.mark.parametrize(("name", "i", "f", "args"), ALL, ids=[f"{n}-{i}" for n, i, _, _ in ALL])
def test_float32_gradients_keep_dtype_and_agree_with_float64(name, i, f, args):
    """Cotangents never silently promote: float32 inputs get float32 gradients."""
    grads = {}
    for dt in ("float32", "float64"):
        xs = [gt.constant(np.asarray(a, dt)) for a in args]
        with gt.GradientTape() as tape:
            tape.watch(xs)
            y = _flat(f(*xs))
        if name != "cast":  # the cast case converts to float64 on purpose
            assert y.dtype == np.dtype(dt), f"{name}: output dtype {y.dtype} for {dt} inputs"
        grads[dt] = tape.gradient(gt.sum(y * y), xs, unconnected_gradients="zero")
    for g32, g64 in zip(grads["float32"], grads["float64"]):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32.numpy(), g64.numpy(), rtol=2e-3, atol=2e-3)
