"""gputape's gradients against PyTorch's on the CPU, in float64.

For every case, both libraries differentiate ``sum(f(*xs) * w)`` for a fixed
random cotangent ``w``: the first derivatives must agree, and so must the
Hessian-vector products (a gputape tape recording the inner tape's gradient
against ``torch.autograd.grad(..., create_graph=True)``). Inputs stay away
from kinks, poles and ties, except where torch and TensorFlow agree on the
convention (``amax``/``amin`` share ties equally, like ``gt.max``/``gt.min``).
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt

torch = pytest.importorskip("torch", reason="PyTorch is not installed; these tests compare gradients with it")
tnn = torch.nn.functional

pytestmark = pytest.mark.torch

RTOL, ATOL = 1e-9, 1e-11


def _rng(seed):
    return np.random.default_rng(seed)


def normal(*shape, seed=0):
    return _rng(seed).standard_normal(shape)


def uniform(lo, hi, *shape, seed=0):
    return _rng(seed).uniform(lo, hi, shape)


def away(*shape, seed=0, gap=0.3):
    """Normal values with |x| >= gap: away from kinks at 0."""
    x = normal(*shape, seed=seed)
    return np.where(x >= 0, x + gap, x - gap)


def distinct(*shape, seed=0):
    """Well-separated values (no ties): safe for max/min/maximum."""
    n = int(np.prod(shape)) if shape else 1
    return (_rng(seed).permutation(n) * 0.37 - 0.3 * n * 0.37).reshape(shape)


# ------------------------------------------------------------------------------------
# Running one case in both libraries


def _gt_grads(f, arrays, w, vs):
    xs = [gt.constant(a) for a in arrays]
    wt = gt.constant(w)
    with gt.GradientTape() as outer:
        outer.watch(xs)
        with gt.GradientTape() as inner:
            inner.watch(xs)
            y = gt.sum(f(*xs) * wt)
        gs = inner.gradient(y, xs, unconnected_gradients="zero")
        s = gt.sum(gt.stack([gt.sum(g * gt.constant(v)) for g, v in zip(gs, vs)]))
    hv = outer.gradient(s, xs, unconnected_gradients="zero")
    return y.numpy(), [g.numpy() for g in gs], [h.numpy() for h in hv]


def _torch_grads(f, arrays, w, vs):
    xs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    y = (f(*xs) * torch.tensor(w)).sum()
    gs = torch.autograd.grad(y, xs, create_graph=True, allow_unused=True)
    gs = [torch.zeros_like(x) if g is None else g for x, g in zip(xs, gs)]
    s = sum((g * torch.tensor(v)).sum() for g, v in zip(gs, vs))
    if s.requires_grad:
        hv = torch.autograd.grad(s, xs, allow_unused=True)
        hv = [torch.zeros_like(x) if h is None else h for x, h in zip(xs, hv)]
    else:  # f is linear in xs: the Hessian is zero
        hv = [torch.zeros_like(x) for x in xs]
    # force=True: torch hands back "ZeroTensor"s for some zero second derivatives (abs)
    return y.detach().numpy(), [g.detach().numpy() for g in gs], [h.detach().numpy(force=True) for h in hv]


def compare(gt_f, torch_f, *arrays, seed=0, second_order=True):
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    out_shape = tuple(torch_f(*[torch.tensor(a) for a in arrays]).shape)
    rng = _rng(1000 + seed)
    w = rng.standard_normal(out_shape)
    vs = [rng.standard_normal(a.shape) for a in arrays]
    y_gt, g_gt, h_gt = _gt_grads(gt_f, arrays, w, vs)
    y_t, g_t, h_t = _torch_grads(torch_f, arrays, w, vs)
    np.testing.assert_allclose(y_gt, y_t, rtol=RTOL, atol=ATOL, err_msg="forward value")
    for k, (a, b) in enumerate(zip(g_gt, g_t)):
        assert a.shape == arrays[k].shape, (k, a.shape, arrays[k].shape)
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"gradient of input {k}")
    if second_order:
        for k, (a, b) in enumerate(zip(h_gt, h_t)):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10, err_msg=f"Hessian-vector product, input {k}")


# ------------------------------------------------------------------------------------
# Cases: name -> (gputape function, torch function, inputs)

T = torch
IDX = np.array([2, 0, 2, 1])  # repeated: gradients accumulate
MASK = np.array([[True, False, True, False], [False, True, True, True], [True, True, False, False]])
LABELS = np.array([0, 2, 1, 2])

UNARY = {
    "negative": (gt.negative, T.neg, (normal(3, 4),)),
    "square": (gt.square, T.square, (normal(3, 4),)),
    "sqrt": (gt.sqrt, T.sqrt, (uniform(0.2, 3.0, 3, 4),)),
    "exp": (gt.exp, T.exp, (normal(3, 4),)),
    "expm1": (gt.expm1, T.expm1, (normal(3, 4),)),
    "log": (gt.log, T.log, (uniform(0.2, 3.0, 3, 4),)),
    "log1p": (gt.log1p, T.log1p, (uniform(-0.7, 3.0, 3, 4),)),
    "sin": (gt.sin, T.sin, (normal(3, 4),)),
    "cos": (gt.cos, T.cos, (normal(3, 4),)),
    "tan": (gt.tan, T.tan, (uniform(-1.2, 1.2, 3, 4),)),
    "tanh": (gt.tanh, T.tanh, (normal(3, 4),)),
    "sinh": (gt.sinh, T.sinh, (normal(3, 4),)),
    "cosh": (gt.cosh, T.cosh, (normal(3, 4),)),
    "arctan": (gt.arctan, T.arctan, (normal(3, 4),)),
    "arcsinh": (gt.arcsinh, T.asinh, (normal(3, 4) * 2,)),
    "log2": (gt.log2, T.log2, (uniform(0.2, 3.0, 3, 4),)),
    "log10": (gt.log10, T.log10, (uniform(0.2, 3.0, 3, 4),)),
    "exp2": (gt.exp2, T.exp2, (normal(3, 4),)),
    "deg2rad": (gt.deg2rad, T.deg2rad, (normal(3, 4),)),
    "rad2deg": (gt.rad2deg, T.rad2deg, (normal(3, 4),)),
    "sinc": (gt.sinc, T.sinc, (normal(3, 4),)),
    "arcsin": (gt.arcsin, T.asin, (uniform(-0.8, 0.8, 3, 4),)),
    "arccos": (gt.arccos, T.acos, (uniform(-0.8, 0.8, 3, 4),)),
    "arctanh": (gt.arctanh, T.atanh, (uniform(-0.8, 0.8, 3, 4),)),
    "arccosh": (gt.arccosh, T.acosh, (uniform(1.2, 3.0, 3, 4),)),
    "abs": (gt.abs, T.abs, (away(3, 4),)),
    "reciprocal": (gt.reciprocal, T.reciprocal, (away(3, 4),)),
    "erf": (gt.erf, T.erf, (normal(3, 4),)),
    "sign": (gt.sign, T.sign, (away(3, 4),)),
    "floor": (gt.floor, T.floor, (normal(3, 4) + 0.5,)),
    "ceil": (gt.ceil, T.ceil, (normal(3, 4) + 0.5,)),
    "round": (gt.round, T.round, (normal(3, 4) * 3 + 0.2,)),
    "abs_operator": (lambda x: abs(x), T.abs, (away(5),)),
    "pow_scalar": (lambda x: x**3.0, lambda x: x**3.0, (normal(5),)),
    "pow_half": (lambda x: x**0.5, lambda x: x**0.5, (uniform(0.2, 3.0, 5),)),
    "rpow": (lambda x: 2.0**x, lambda x: 2.0**x, (normal(5),)),
    "rsub_rdiv": (lambda x: 2.0 - 3.0 / x, lambda x: 2.0 - 3.0 / x, (away(5),)),
    "clip": (lambda x: gt.clip(x, -0.5, 0.7), lambda x: T.clamp(x, -0.5, 0.7), (distinct(3, 4) / 3 + 0.01,)),
}

BINARY = {
    "add": (gt.add, T.add, (normal(3, 4, seed=1), normal(4, seed=2))),
    "subtract": (gt.subtract, T.sub, (normal(3, 1, seed=1), normal(1, 4, seed=2))),
    "multiply": (gt.multiply, T.mul, (normal(2, 3, 4, seed=1), normal(3, 1, seed=2))),
    "divide": (gt.divide, T.div, (normal(3, 4, seed=1), away(4, seed=2))),
    "power": (gt.power, T.pow, (uniform(0.3, 2.0, 3, 4, seed=1), uniform(-1.5, 2.5, 4, seed=2))),
    "maximum": (gt.maximum, T.maximum, (distinct(3, 4, seed=1), distinct(4, seed=2) + 0.05)),
    "minimum": (gt.minimum, T.minimum, (distinct(3, 4, seed=1), distinct(4, seed=2) + 0.05)),
    "mod": (gt.mod, T.remainder, (uniform(0.1, 0.9, 6, seed=1) + np.arange(6), np.full(6, 1.5))),
    "where": (
        lambda x, y: gt.where(MASK, x, y),
        lambda x, y: T.where(T.tensor(MASK), x, y),
        (normal(3, 4, seed=1), normal(4, seed=2)),
    ),
    "hypot": (gt.hypot, T.hypot, (normal(3, 4, seed=1), normal(4, seed=2))),
    "arctan2": (gt.arctan2, T.atan2, (normal(3, 4, seed=1), normal(4, seed=2))),
    "logaddexp": (gt.logaddexp, T.logaddexp, (normal(3, 4, seed=1), normal(4, seed=2))),
    "logaddexp2": (gt.logaddexp2, T.logaddexp2, (normal(3, 4, seed=1), normal(4, seed=2))),
    "fmax": (gt.fmax, T.fmax, (normal(3, 4, seed=1), normal(4, seed=2))),
    "fmin": (gt.fmin, T.fmin, (normal(3, 4, seed=1), normal(4, seed=2))),
    "nan_to_num": (gt.nan_to_num, T.nan_to_num, (normal(3, 4, seed=1),)),
    "x_times_x": (lambda x: x * x, lambda x: x * x, (normal(5, seed=3),)),
    "operators": (
        lambda x, y: (x + y) * (x - y) / (y * y + 1.0) - x**2.0,
        lambda x, y: (x + y) * (x - y) / (y * y + 1.0) - x**2.0,
        (normal(3, 4, seed=1), normal(4, seed=2)),
    ),
}


def _t_prod(x, axis=None, keepdim=False):
    """torch.prod over several axes: move them to the end, flatten them, reduce once."""
    nd = x.ndim
    axes = tuple(range(nd)) if axis is None else tuple(a % nd for a in ((axis,) if isinstance(axis, int) else axis))
    rest = [i for i in range(nd) if i not in axes]
    out = T.prod(x.permute(*rest, *axes).reshape(*[x.shape[i] for i in rest], -1), dim=-1)
    if keepdim:
        out = out.reshape([1 if i in axes else x.shape[i] for i in range(nd)])
    return out


def _dims(axis, ndim):
    return tuple(range(ndim)) if axis is None else axis


REDUCTIONS = {
    "sum": (gt.sum, lambda x, a, k: T.sum(x, dim=_dims(a, x.ndim), keepdim=k)),
    "mean": (gt.mean, lambda x, a, k: T.mean(x, dim=_dims(a, x.ndim), keepdim=k)),
    "max": (gt.max, lambda x, a, k: T.amax(x, dim=_dims(a, x.ndim), keepdim=k)),
    "min": (gt.min, lambda x, a, k: T.amin(x, dim=_dims(a, x.ndim), keepdim=k)),
    "prod": (gt.prod, lambda x, a, k: _t_prod(x, a, k)),
    "var": (gt.var, lambda x, a, k: T.var(x, dim=_dims(a, x.ndim), keepdim=k, correction=0)),
    "std": (gt.std, lambda x, a, k: T.std(x, dim=_dims(a, x.ndim), keepdim=k, correction=0)),
    "logsumexp": (gt.logsumexp, lambda x, a, k: T.logsumexp(x, dim=_dims(a, x.ndim), keepdim=k)),
}

LINALG = {
    "matmul_1d_1d": (gt.matmul, T.matmul, (normal(3, seed=1), normal(3, seed=2))),
    "matmul_2d_1d": (gt.matmul, T.matmul, (normal(2, 3, seed=1), normal(3, seed=2))),
    "matmul_1d_2d": (gt.matmul, T.matmul, (normal(3, seed=1), normal(3, 4, seed=2))),
    "matmul_2d_2d": (gt.matmul, T.matmul, (normal(2, 3, seed=1), normal(3, 4, seed=2))),
    "matmul_batched": (gt.matmul, T.matmul, (normal(5, 2, 3, seed=1), normal(5, 3, 4, seed=2))),
    "matmul_broadcast_batch": (gt.matmul, T.matmul, (normal(2, 1, 2, 3, seed=1), normal(5, 3, 4, seed=2))),
    "matmul_batch_with_2d": (gt.matmul, T.matmul, (normal(5, 2, 3, seed=1), normal(3, 4, seed=2))),
    "matmul_1d_3d": (gt.matmul, T.matmul, (normal(3, seed=1), normal(5, 3, 4, seed=2))),
    "matmul_3d_1d": (gt.matmul, T.matmul, (normal(5, 2, 3, seed=1), normal(3, seed=2))),
    "matmul_operator": (lambda a, b: a @ b, lambda a, b: a @ b, (normal(2, 3, seed=1), normal(3, 2, seed=2))),
    "dot_nd": (
        gt.dot,
        lambda a, b: T.tensordot(a, b, dims=([-1], [-2])),
        (normal(2, 3, 4, seed=1), normal(5, 4, 2, seed=2)),
    ),
    "dot_2d": (gt.dot, T.matmul, (normal(2, 3, seed=1), normal(3, 4, seed=2))),
    "einsum_bmm": (
        lambda a, b: gt.einsum("bij,bjk->bik", a, b),
        lambda a, b: T.einsum("bij,bjk->bik", a, b),
        (normal(5, 2, 3, seed=1), normal(5, 3, 4, seed=2)),
    ),
    "einsum_outer": (
        lambda a, b: gt.einsum("i,j->ij", a, b),
        lambda a, b: T.einsum("i,j->ij", a, b),
        (normal(3, seed=1), normal(4, seed=2)),
    ),
    "einsum_sum_out": (
        lambda a, b: gt.einsum("ijk,ik->j", a, b),
        lambda a, b: T.einsum("ijk,ik->j", a, b),
        (normal(2, 3, 4, seed=1), normal(2, 4, seed=2)),
    ),
    "einsum_ellipsis_broadcast": (
        lambda a, b: gt.einsum("...ij,jk->...ik", a, b),
        lambda a, b: T.einsum("...ij,jk->...ik", a, b),
        (normal(2, 5, 2, 3, seed=1), normal(3, 4, seed=2)),
    ),
    "einsum_three": (
        lambda a, b, c: gt.einsum("ij,jk,k->i", a, b, c),
        lambda a, b, c: T.einsum("ij,jk,k->i", a, b, c),
        (normal(2, 3, seed=1), normal(3, 4, seed=2), normal(4, seed=3)),
    ),
    "einsum_reduce_only": (
        lambda a: gt.einsum("ij->i", a),
        lambda a: T.einsum("ij->i", a),
        (normal(2, 3, seed=1),),
    ),
}

SHAPE = {
    "reshape": (lambda x: gt.reshape(x, (4, -1)), lambda x: x.reshape(4, -1), (normal(2, 3, 4),)),
    "transpose": (lambda x: gt.transpose(x, (2, 0, 1)), lambda x: x.permute(2, 0, 1), (normal(2, 3, 4),)),
    "T": (lambda x: x.T, lambda x: x.permute(2, 1, 0), (normal(2, 3, 4),)),
    "swapaxes": (lambda x: gt.swapaxes(x, 0, -1), lambda x: x.transpose(0, -1), (normal(2, 3, 4),)),
    "moveaxis": (lambda x: gt.moveaxis(x, 0, -1), lambda x: T.movedim(x, 0, -1), (normal(2, 3, 4),)),
    "expand_dims": (lambda x: gt.expand_dims(x, 1), lambda x: x.unsqueeze(1), (normal(2, 3),)),
    "squeeze": (lambda x: gt.squeeze(x), lambda x: x.squeeze(), (normal(1, 3, 1),)),
    "squeeze_axis": (lambda x: gt.squeeze(x, 2), lambda x: x.squeeze(2), (normal(1, 3, 1),)),
    "broadcast_to": (
        lambda x: gt.broadcast_to(x, (4, 2, 3)),
        lambda x: T.broadcast_to(x, (4, 2, 3)),
        (normal(2, 1),),
    ),
    "flatten": (gt.flatten, T.flatten, (normal(2, 3, 4),)),
    "concatenate": (
        lambda a, b: gt.concatenate([a, b, a], axis=1),
        lambda a, b: T.cat([a, b, a], dim=1),
        (normal(2, 3, seed=1), normal(2, 2, seed=2)),
    ),
    "stack": (
        lambda a, b: gt.stack([a, b, a], axis=-1),
        lambda a, b: T.stack([a, b, a], dim=-1),
        (normal(2, 3, seed=1), normal(2, 3, seed=2)),
    ),
    "split": (
        lambda x: gt.concatenate([p * (i + 1.0) for i, p in enumerate(gt.split(x, [1, 4], axis=1))], axis=1),
        lambda x: T.cat([p * (i + 1.0) for i, p in enumerate(T.split(x, [1, 3, 1], dim=1))], dim=1),
        (normal(2, 5),),
    ),
    "split_unused_piece": (
        lambda x: gt.split(x, 3, axis=0)[1],
        lambda x: T.split(x, 2, dim=0)[1],
        (normal(6, 2),),
    ),
    "pad": (
        lambda x: gt.pad(x, ((1, 0), (2, 1))),
        lambda x: tnn.pad(x, (2, 1, 1, 0)),
        (normal(2, 3),),
    ),
    "take_flat": (lambda x: gt.take(x, IDX), lambda x: T.take(x, T.tensor(IDX)), (normal(2, 3),)),
    "take_axis": (
        lambda x: gt.take(x, IDX, axis=1),
        lambda x: T.index_select(x, 1, T.tensor(IDX)),
        (normal(2, 3),),
    ),
    "getitem_slices": (lambda x: x[1:, ::2], lambda x: x[1:, ::2], (normal(3, 4),)),
    "getitem_int": (lambda x: x[1], lambda x: x[1], (normal(3, 4),)),
    "getitem_repeated_ints": (lambda x: x[IDX], lambda x: x[T.tensor(IDX)], (normal(3, 4),)),
    "getitem_two_arrays": (
        lambda x: x[IDX, np.array([0, 3, 0, 1])],
        lambda x: x[T.tensor(IDX), T.tensor([0, 3, 0, 1])],
        (normal(3, 4),),
    ),
    "getitem_mask": (lambda x: x[MASK], lambda x: x[T.tensor(MASK)], (normal(3, 4),)),
    "getitem_none_ellipsis": (lambda x: x[..., None, 1], lambda x: x[..., None, 1], (normal(2, 3, 4),)),
    "getitem_negative_step": (lambda x: x[::-1], lambda x: T.flip(x, (0,)), (normal(4, 2),)),
}

_GELU_C = np.sqrt(2 / np.pi)

NN = {
    "relu": (gt.nn.relu, tnn.relu, (away(3, 4),)),
    "leaky_relu": (gt.nn.leaky_relu, lambda x: tnn.leaky_relu(x, 0.2), (away(3, 4),)),
    "leaky_relu_alpha": (lambda x: gt.nn.leaky_relu(x, 0.05), lambda x: tnn.leaky_relu(x, 0.05), (away(3, 4),)),
    "elu": (gt.nn.elu, tnn.elu, (away(3, 4),)),
    "elu_alpha": (lambda x: gt.nn.elu(x, 1.7), lambda x: tnn.elu(x, 1.7), (away(3, 4),)),
    "gelu": (gt.nn.gelu, tnn.gelu, (normal(3, 4) * 2,)),
    "gelu_tanh": (
        lambda x: gt.nn.gelu(x, approximate=True),
        lambda x: tnn.gelu(x, approximate="tanh"),
        (normal(3, 4) * 2,),
    ),
    "sigmoid": (gt.nn.sigmoid, T.sigmoid, (normal(3, 4) * 3,)),
    "softplus": (gt.nn.softplus, tnn.softplus, (normal(3, 4) * 3,)),
    "softmax": (gt.nn.softmax, lambda x: T.softmax(x, -1), (normal(3, 4) * 2,)),
    "softmax_axis0": (lambda x: gt.nn.softmax(x, axis=0), lambda x: T.softmax(x, 0), (normal(3, 4) * 2,)),
    "log_softmax": (gt.nn.log_softmax, lambda x: T.log_softmax(x, -1), (normal(3, 4) * 2,)),
    "log_softmax_axis0": (
        lambda x: gt.nn.log_softmax(x, axis=0),
        lambda x: T.log_softmax(x, 0),
        (normal(3, 4) * 2,),
    ),
    "log_softmax_large": (
        gt.nn.log_softmax,
        lambda x: T.log_softmax(x, -1),
        (np.array([[1000.0, 0.0, -1000.0], [50.0, 51.0, 49.0]]),),
    ),
    "sparse_xent": (
        lambda x: gt.nn.sparse_softmax_cross_entropy_with_logits(LABELS, x),
        lambda x: tnn.cross_entropy(x, T.tensor(LABELS), reduction="none"),
        (normal(4, 3) * 2,),
    ),
    "sparse_xent_large": (
        lambda x: gt.nn.sparse_softmax_cross_entropy_with_logits(LABELS[:2], x),
        lambda x: tnn.cross_entropy(x, T.tensor(LABELS[:2]), reduction="none"),
        (np.array([[1000.0, 0.0, -1000.0], [-1000.0, 0.0, 1000.0]]),),
    ),
    "softmax_xent": (
        lambda p, x: gt.nn.softmax_cross_entropy_with_logits(p, x),
        lambda p, x: tnn.cross_entropy(x, p, reduction="none"),
        (uniform(0.1, 1.0, 4, 3, seed=5) / 2, normal(4, 3) * 2),
    ),
    "sigmoid_xent": (
        lambda z, x: gt.nn.sigmoid_cross_entropy_with_logits(z, x),
        lambda z, x: tnn.binary_cross_entropy_with_logits(x, z, reduction="none"),
        (uniform(0.0, 1.0, 3, 4, seed=5), normal(3, 4) * 3),
    ),
    "mse": (
        gt.nn.mean_squared_error,
        lambda a, b: tnn.mse_loss(b, a, reduction="none").mean(-1),
        (normal(3, 4, seed=1), normal(3, 4, seed=2)),
    ),
}

ALL = {**UNARY, **BINARY, **LINALG, **SHAPE, **NN}


@pytest.mark.parametrize("name", list(ALL))
def test_gradient_and_hvp_match_torch(name):
    gt_f, torch_f, arrays = ALL[name]
    compare(gt_f, torch_f, *arrays)


@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keep"])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_matches_torch(name, axis, keepdims):
    gt_op, t_op = REDUCTIONS[name]
    x = distinct(2, 3, 4) / 10 + 0.05 if name in ("max", "min") else uniform(0.5, 1.5, 2, 3, 4)
    compare(lambda t: gt_op(t, axis=axis, keepdims=keepdims), lambda t: t_op(t, axis, keepdims), x)


@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_min_ties_match_torch_amax_amin(fn):
    # torch.amax/amin share the gradient among ties exactly like TensorFlow and gputape
    x = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 2.0], [-5.0, 0.0, -5.0, 4.0]])
    gt_op, t_op = REDUCTIONS[fn]
    for axis in (None, 0, 1):
        compare(lambda t, a=axis: gt_op(t, axis=a), lambda t, a=axis: t_op(t, a, False), x)


PROD_ZEROS = {"one_zero": [2.0, 0.0, 3.0, 4.0], "two_zeros": [2.0, 0.0, 0.0, 3.0], "ends": [0.0, 1.5, -2.0, 0.0]}


@pytest.mark.parametrize("values", list(PROD_ZEROS.values()), ids=list(PROD_ZEROS))
def test_prod_gradient_with_zeros_matches_torch(values):
    x = np.array([values, [1.0, 2.0, 3.0, 4.0]])
    compare(gt.prod, T.prod, x[0], second_order=False)
    compare(lambda t: gt.prod(t, axis=1), lambda t: T.prod(t, dim=1), x, second_order=False)


@pytest.mark.parametrize("values", list(PROD_ZEROS.values()), ids=list(PROD_ZEROS))
def test_prod_hvp_with_zeros_matches_torch(values):
    compare(gt.prod, T.prod, np.array(values))


def test_prod_hessian_with_one_zero():
    """Hessian of prod([2, 0, 3]): entry (i, j) is the product of the third element."""
    x = gt.constant(np.array([2.0, 0.0, 3.0]))
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.prod(x)
        g = inner.gradient(y, x)
    np.testing.assert_array_equal(g.numpy(), [0.0, 6.0, 0.0])
    expected = np.array([[0.0, 3.0, 0.0], [3.0, 0.0, 2.0], [0.0, 2.0, 0.0]])
    np.testing.assert_array_equal(outer.jacobian(g, x).numpy(), expected)


def test_var_std_ddof_match_torch():
    x = normal(4, 5)
    compare(lambda t: gt.var(t, axis=1, ddof=1), lambda t: T.var(t, dim=1, correction=1), x)
    compare(lambda t: gt.std(t, axis=0, ddof=1), lambda t: T.std(t, dim=0, correction=1), x)


# ------------------------------------------------------------------------------------
# A small MLP: matmul + bias + relu/tanh + log_softmax + gather + mean


def _mlp_params(seed=7):
    rng = _rng(seed)
    return [
        rng.standard_normal((5, 16)) * 0.5,
        rng.standard_normal(16) * 0.1,
        rng.standard_normal((16, 3)) * 0.5,
        rng.standard_normal(3) * 0.1,
    ]


X = _rng(8).standard_normal((8, 5))
Y = np.array([0, 1, 2, 1, 0, 2, 2, 1])


def _gt_mlp(act):
    def loss(w1, b1, w2, b2):
        h = act(gt.constant(X) @ w1 + b1)
        logp = gt.nn.log_softmax(h @ w2 + b2)
        return -gt.mean(logp[np.arange(len(Y)), Y])

    return loss


def _torch_mlp(act):
    def loss(w1, b1, w2, b2):
        h = act(T.tensor(X) @ w1 + b1)
        logp = T.log_softmax(h @ w2 + b2, dim=-1)
        return -T.gather(logp, 1, T.tensor(Y)[:, None]).mean()

    return loss


@pytest.mark.parametrize(
    ("gt_act", "torch_act"),
    [(gt.nn.relu, tnn.relu), (gt.tanh, T.tanh), (gt.nn.gelu, tnn.gelu)],
    ids=["relu", "tanh", "gelu"],
)
def test_mlp_loss_gradient_and_hvp_match_torch(gt_act, torch_act):
    compare(_gt_mlp(gt_act), _torch_mlp(torch_act), *_mlp_params())


def test_mlp_with_variables_and_sparse_xent_matches_torch():
    params = _mlp_params(seed=9)
    vs = [gt.Variable(p) for p in params]
    with gt.GradientTape() as tape:
        logits = gt.nn.relu(gt.constant(X) @ vs[0] + vs[1]) @ vs[2] + vs[3]
        loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(Y, logits))
    grads = tape.gradient(loss, vs)
    ts = [T.tensor(p, requires_grad=True) for p in params]
    t_loss = tnn.cross_entropy(tnn.relu(T.tensor(X) @ ts[0] + ts[1]) @ ts[2] + ts[3], T.tensor(Y))
    t_loss.backward()
    np.testing.assert_allclose(float(loss), t_loss.item(), rtol=RTOL)
    for g, t in zip(grads, ts):
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=RTOL, atol=ATOL)


def test_full_hessian_of_mlp_loss_matches_torch():
    """The whole Hessian w.r.t. the last layer, via tape.jacobian of a gradient inside an outer tape."""
    w1, b1, w2, b2 = _mlp_params(seed=11)
    f_gt = _gt_mlp(gt.tanh)
    f_t = _torch_mlp(T.tanh)
    x = gt.constant(w2)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            loss = f_gt(gt.constant(w1), gt.constant(b1), x, gt.constant(b2))
        g = inner.gradient(loss, x)
    hess = outer.jacobian(g, x).numpy()
    t_hess = torch.autograd.functional.hessian(
        lambda w: f_t(T.tensor(w1), T.tensor(b1), w, T.tensor(b2)), T.tensor(w2)
    ).numpy()
    assert hess.shape == (16, 3, 16, 3)
    np.testing.assert_allclose(hess, t_hess, rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------------------------
# Jacobians (one vectorised sweep) against torch.autograd.functional.jacobian

JACOBIAN_CASES = {
    "add_broadcast": (gt.add, T.add, (normal(3, 1, seed=1), normal(4, seed=2))),
    "multiply_broadcast": (gt.multiply, T.mul, (normal(2, 3, seed=1), normal(3, seed=2))),
    "matmul_broadcast_batch": (gt.matmul, T.matmul, (normal(2, 1, 2, 3, seed=1), normal(3, 3, 2, seed=2))),
    "softmax": (gt.nn.softmax, lambda x: T.softmax(x, -1), (normal(2, 3),)),
    "getitem_repeated": (lambda x: x[IDX] * 2.0, lambda x: x[T.tensor(IDX)] * 2.0, (normal(3, 2),)),
    "sum_axis": (lambda x: gt.sum(x, axis=0), lambda x: T.sum(x, dim=0), (normal(3, 2),)),
    "max_axis_ties": (
        lambda x: gt.max(x, axis=1),
        lambda x: T.amax(x, dim=1),
        (np.array([[1.0, 3.0, 3.0], [0.0, -1.0, -2.0]]),),
    ),
    "where_broadcast": (
        lambda x, y: gt.where(MASK, x, y),
        lambda x, y: T.where(T.tensor(MASK), x, y),
        (normal(3, 1, seed=1), normal(4, seed=2)),
    ),
}


@pytest.mark.parametrize("name", list(JACOBIAN_CASES))
def test_jacobian_matches_torch(name):
    gt_f, torch_f, arrays = JACOBIAN_CASES[name]
    xs = [gt.constant(np.asarray(a, np.float64)) for a in arrays]
    with gt.GradientTape() as tape:
        tape.watch(xs)
        y = gt_f(*xs)
    jac = tape.jacobian(y, xs)
    t_jac = torch.autograd.functional.jacobian(torch_f, tuple(T.tensor(a) for a in arrays))
    for k, (j, tj) in enumerate(zip(jac, t_jac)):
        assert j.shape == y.shape + xs[k].shape, (k, j.shape)
        np.testing.assert_allclose(j.numpy(), tj.numpy(), rtol=RTOL, atol=ATOL, err_msg=f"input {k}")


# ------------------------------------------------------------------------------------
# Third order through three nested tapes, on a smooth scalar function


def test_third_derivative_matches_torch():
    x0 = np.array([0.3, -0.7, 1.1])

    def f_gt(x):
        return gt.sum(gt.sin(x) * gt.exp(x) + gt.tanh(x) ** 3.0)

    x = gt.constant(x0)
    with gt.GradientTape() as t3:
        t3.watch(x)
        with gt.GradientTape() as t2:
            t2.watch(x)
            with gt.GradientTape() as t1:
                t1.watch(x)
                y = f_gt(x)
            g1 = t1.gradient(y, x)
            s1 = gt.sum(g1)  # recorded on t2 (and t3): it happens inside t2's block
        g2 = t2.gradient(s1, x)
        s2 = gt.sum(g2)
    g3 = t3.gradient(s2, x)

    xt = T.tensor(x0, requires_grad=True)
    yt = (T.sin(xt) * T.exp(xt) + T.tanh(xt) ** 3).sum()
    (g1t,) = torch.autograd.grad(yt, xt, create_graph=True)
    (g2t,) = torch.autograd.grad(g1t.sum(), xt, create_graph=True)
    (g3t,) = torch.autograd.grad(g2t.sum(), xt)
    for a, b in ((g1, g1t), (g2, g2t), (g3, g3t)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------------------------
# Gradients at the domain edges (arccosh at 1, hypot and arctan2 at (0, 0), ...): the table
# tests/test_expr.py holds gputape to is what PyTorch gives there.

EDGE_OPS = {
    "arccosh": T.acosh,
    "arctanh": T.atanh,
    "arcsin": T.asin,
    "arccos": T.acos,
    "log": T.log,
    "log2": T.log2,
    "log10": T.log10,
    "sqrt": T.sqrt,
    "hypot": T.hypot,
    "arctan2": T.atan2,
    "logaddexp": T.logaddexp,
}


@pytest.mark.parametrize("name", sorted(EDGE_OPS))
def test_gradients_at_domain_edges_are_torchs(name):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_expr import EDGES

    _, xs, want = EDGES[name]
    ts = [T.tensor(np.asarray(x, np.float64), requires_grad=True) for x in xs]
    gs = torch.autograd.grad(EDGE_OPS[name](*ts).sum(), ts)
    for k, (gk, wk) in enumerate(zip(gs, want)):
        np.testing.assert_array_equal(gk.numpy(), wk, err_msg=f"{name} input {k}")
