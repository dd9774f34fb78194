"""Activations and losses (``gt.nn.relu``, ``gt.nn.log_softmax``, ...).

Activations with a cheap closed-form VJP are primitives; the rest are composed
from primitives. Softmax-family ops subtract the row max first, so large logits
never overflow.
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np

from ..core import _errors
from ..core import expr as _x
from ..core.dispatch import apply, primitive, unary_op
from ..core.expr import forward as _xf
from ..core.tensor import Tensor, _to_array, as_tensor
from ..devices import backend
from ..kernels import build as _kb
from ..ops import _util, erf, log1p, maximum, mean, multiply, negative, tanh
from ..ops import abs as _abs
from ..ops import elementwise as _el
from ..ops import sum as _sum
from ..ops.elementwise import declared


def _real(x: Any, op: str, labels: bool = False) -> Tensor:
    """``x`` as a tensor, refused if complex: the activations and losses are real functions
    (numpy would compare complex numbers lexicographically and give a meaningless result).

    A bool ``x`` is refused too, unless it holds ``labels`` (one-hot labels may be bool): numpy
    would make relu's result int64, elu's float64, and fail in sigmoid with a message about its
    ``-`` operator. TensorFlow's activations take no bool either.
    """
    t = as_tensor(x)
    kind = t._data.dtype.kind
    if kind == "c":
        raise _errors.argument_error(
            x,
            "is complex; this is a function of real numbers",
            op=f"nn.{op}",
            cls=TypeError,
            hint="pass gt.abs(x) or the real part",
        )
    if kind == "b" and not labels:
        raise _errors.argument_error(
            x,
            "is bool; this is a function of numbers",
            op=f"nn.{op}",
            cls=TypeError,
            hint="cast it first, e.g. gt.cast(x, 'float32')",
        )
    return t


_E = _util.NOPARAMS


def _gpu(F: Any) -> bool:
    """True in the raw sweep on cupy arrays: use the fused kernels there."""
    return F.xp is not None and F.xp is not np


# Each activation's value is one expression (gputape.core.expr.forward.forward): the numpy/cupy forward
# below, the CUDA gt_<name>_fwd the fused bias+activation kernels call and the numpy
# reference of those kernels (gputape.kernels.registry.ref_activation_forward) are all generated from it.
_relu_fwd = _xf.forward("relu", lambda x: _x.maximum(x, 0)).fn
_relu = declared("relu", _relu_fwd, lambda x, out, g: g * (out > 0), complex="real")  # 0 at x == 0, as in TensorFlow


def relu(x: Any) -> Any:
    """``max(x, 0)``; the gradient at 0 is 0 (TensorFlow's convention).

    >>> import gputape as gt
    >>> gt.nn.relu(gt.constant([-1.0, 0.0, 2.0])).numpy().tolist()
    [0.0, 0.0, 2.0]
    """
    if isinstance(x, Tensor) and x._data.dtype.kind not in "cb":
        return _relu_entry(x)
    return apply(_relu, (_real(x, "relu"),), _E)


# relu's generated entry point (gputape.core.dispatch.unary_op: apply() written out for one tensor),
# behind the complex test above: cheaper than apply() on the MLP's activations.
# What F.relu is in a VJP stays the checked function.
_relu_entry = unary_op(_relu, "relu", relu.__doc__ or "")
_relu.public = relu


_leaky_relu_fwd = _xf.forward("leaky_relu", lambda x, alpha: _x.where(x > 0, x, x * alpha), ("alpha",)).fn
_leaky_relu = declared(
    "leaky_relu", _leaky_relu_fwd, lambda x, g, alpha: _x.where(x > 0, g, g * alpha), ("alpha",), complex="real"
)


def leaky_relu(x: Any, alpha: float = 0.2) -> Any:
    """``x`` for ``x > 0``, else ``alpha * x`` (TensorFlow's default ``alpha=0.2``).

    >>> import gputape as gt
    >>> gt.nn.leaky_relu(gt.constant([-1.0, 2.0], "float64")).numpy().tolist()
    [-0.2, 2.0]
    """
    alpha = _util.norm_real(alpha, "nn.leaky_relu", "alpha", finite=True)
    return apply(_leaky_relu, (_real(x, "leaky_relu"),), {"alpha": alpha})


_elu_fwd = _xf.forward("elu", lambda x, alpha: _x.where(x > 0, x, alpha * _x.expm1(_x.minimum(x, 0))), ("alpha",)).fn
# d/dx alpha * (exp(x) - 1) = alpha * exp(x), from x alone (no output kept); min(x, 0)
# keeps exp from overflowing in the branch not taken
_elu = declared(
    "elu",
    _elu_fwd,
    lambda x, g, alpha: _x.where(x > 0, g, g * alpha * _x.exp(_x.minimum(x, 0))),
    ("alpha",),
    complex="real",
)


def elu(x: Any, alpha: float = 1.0) -> Any:
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``.

    >>> import gputape as gt
    >>> gt.nn.elu(gt.constant([0.0, 2.0])).numpy().tolist()
    [0.0, 2.0]
    """
    alpha = _util.norm_real(alpha, "nn.elu", "alpha", finite=True)
    return apply(_elu, (_real(x, "elu"),), {"alpha": alpha})


_sigmoid_fwd = _xf.forward("sigmoid", _x.sigmoid).fn  # the language's stable sigmoid (gputape.core.expr)
_sigmoid = declared("sigmoid", _sigmoid_fwd, lambda x, out, g: g * (out * (1 - out)), complex="real")


def sigmoid(x: Any) -> Any:
    """The logistic function ``1 / (1 + exp(-x))``, stable for large ``|x|``.

    >>> import gputape as gt
    >>> gt.nn.sigmoid(gt.constant([0.0])).numpy().tolist()
    [0.5]
    """
    return apply(_sigmoid, (_real(x, "sigmoid"),), _E)


_softplus_fwd = _xf.forward("softplus", lambda x: _x.log1p(_x.exp(-_x.absolute(x))) + _x.maximum(x, 0)).fn
_softplus = declared("softplus", _softplus_fwd, lambda x, g: g * _x.sigmoid(x), complex="real")


def softplus(x: Any) -> Any:
    """``log(1 + exp(x))``, stable for large ``|x|``.

    >>> import gputape as gt
    >>> round(float(gt.nn.softplus(gt.constant(0.0))), 4)
    0.6931
    """
    return apply(_softplus, (_real(x, "softplus"),), _E)


# gelu is composed from primitives (its gradient is theirs): its forward expression runs
# on gputape's ops (_OPS_F); the derivatives declare only the fused GPU backward kernels
# gputape.kernels.registry offers for it (activation_backward).
_SQRT1_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu_tanh_grad(x: Any, g: Any) -> Any:
    t = _x.tanh(_SQRT_2_PI * (x + _GELU_A * (x * x) * x))
    du = _SQRT_2_PI * (1 + 3.0 * _GELU_A * (x * x))
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du)


_x.derivative(
    "gelu", lambda x, g: g * (0.5 * (1 + _x.erf(x * _SQRT1_2)) + x * (_INV_SQRT_2PI * _x.exp(-0.5 * x * x)))
)  # Phi(x) + x phi(x)
_x.derivative("gelu_tanh", _gelu_tanh_grad)
_gelu_fwd = _xf.forward("gelu", lambda x: 0.5 * x * (1 + _x.erf(x * _SQRT1_2))).fn
_gelu_tanh_fwd = _xf.forward("gelu_tanh", lambda x: 0.5 * x * (1 + _x.tanh(_SQRT_2_PI * (x + _GELU_A * x * x * x)))).fn
_OPS_F = types.SimpleNamespace(erf=erf, tanh=tanh)
# tanh is gt.tanh (gputape.ops); identity is Dense's linear activation. Declared here for
# the fused bias+activation kernels, with the others.
_xf.forward("tanh", _x.tanh)
_xf.forward("identity", lambda x: x)


def gelu(x: Any, approximate: bool = False) -> Any:
    """Gaussian error linear unit; exact (erf) by default, tanh form with ``approximate=True``.

    >>> import gputape as gt
    >>> round(float(gt.nn.gelu(gt.constant(1.0))), 4)
    0.8413
    """
    x = _real(x, "gelu")
    return (_gelu_tanh_fwd if _util.norm_flag(approximate, "nn.gelu") else _gelu_fwd)(_OPS_F, x)


def _row_max(xp, x, axis):
    # the shift that keeps exp() finite; rows whose max is inf/nan are left unshifted
    if xp is np:
        return _np_shift(x, axis)
    m = xp.max(x, axis=axis, keepdims=True)
    return xp.where(xp.isfinite(m), m, 0)


def _np_row_max(x: np.ndarray, axis: int) -> np.ndarray:
    """``np.maximum.reduce(x, axis=axis, keepdims=True)``, fast for many short rows.

    numpy reduces a short contiguous last axis row by row: 41 us for the logits of 1024 examples
    of 10 classes, 5.9 us for 128 (where the whole cross-entropy VJP takes 5). Over the first axis
    of the transposed copy it runs one vector loop per class instead: 4.4 and 1.7 us. A maximum is
    exact, so the values are the same (where a row's maximum is a zero that appears as both -0.0
    and 0.0, either zero may come back, as from numpy's own SIMD loops). Measured on this
    machine's numpy 2.4: faster from 32 rows of up to 64 classes, slower for few rows or long ones.
    """
    if x.size >= 64 and x.ndim >= 2:  # (small arrays, the per-op overhead's case, pay one test)
        n = x.shape[-1]
        if 0 < n <= 64 and (axis == -1 or axis == x.ndim - 1) and x.size >= 32 * n and x.flags.c_contiguous:
            columns = np.ascontiguousarray(x.reshape(-1, n).T)
            return np.maximum.reduce(columns, axis=0).reshape(x.shape[:-1] + (1,))
    return np.maximum.reduce(x, axis=axis, keepdims=True)


def _row_sum(xp, x, axis):
    return np.add.reduce(x, axis=axis, keepdims=True) if xp is np else xp.sum(x, axis=axis, keepdims=True)


_max_reduce = np.maximum.reduce
_add_reduce = np.add.reduce


def _np_shift(x: np.ndarray, axis: int) -> np.ndarray:
    """``_row_max(np, x, axis)`` with its calls written out: small arrays (the per-op overhead's case)
    take ``np.maximum.reduce`` itself, positional (its keywords cost ~0.1 us), no frame between."""
    m = _max_reduce(x, axis, None, None, True) if x.size < 64 else _np_row_max(x, axis)
    # one sum of squares (np.vdot: 0.3 us less than a reduce) tells whether every row's max is finite
    # (math.isfinite of that numpy scalar: the ufunc on a scalar costs 0.4 us more); one that
    # overflows takes the where(), which keeps finite maxima as they are: the same values
    return m if math.isfinite(np.vdot(m, m)) else np.where(np.isfinite(m), m, 0)


# On numpy the softmax family's forwards and VJPs write each step after the first into a temporary
# of their own (numpy's out=, positional): the same operations in the same order, so the same bits,
# with one or two fewer arrays allocated per call. (Never into g or out: a cotangent may be a
# read-only broadcast view, and out is the tensor's value.) The CuPy path is left as it was.
_exp, _log, _subtract, _multiply, _divide = np.exp, np.log, np.subtract, np.multiply, np.divide


def _softmax_fwd(xp, x, axis=-1):
    if xp is np:  # (the same reductions as below, two frames fewer)
        e = _exp(x - _np_shift(x, axis))
        return _divide(e, _add_reduce(e, axis, None, None, True), e)
    e = xp.exp(x - _row_max(xp, x, axis))
    return e / _row_sum(xp, e, axis)


def _log_softmax_fwd(xp, x, axis=-1):
    if xp is np:
        s = x - _np_shift(x, axis)
        r = _add_reduce(_exp(s), axis, None, None, True)
        _log(r, r)
        return _subtract(s, r, s) if s.dtype is r.dtype else s - r  # (integer logits: a float result)
    s = x - _row_max(xp, x, axis)
    return s - xp.log(_row_sum(xp, xp.exp(s), axis))


_softmax = primitive("softmax", complex="real", save_out=True)(_softmax_fwd)
_log_softmax = primitive("log_softmax", complex="real", save_out=True)(_log_softmax_fwd)


@_softmax.defvjp
def _(F, g, needs, nb, node, out):
    ax = node.params["axis"]
    if F.xp is np:  # the raw sweep on host arrays: F.sum's np.add.reduce of a float cotangent, called here
        t = g * out
        t = _subtract(g, _add_reduce(t, ax, None, None, True), t)
        return (_multiply(out, t, t),)
    return (out * (g - F.sum(g * out, axis=ax, keepdims=True)),)


@_log_softmax.defvjp
def _(F, g, needs, nb, node, out):
    ax = node.params["axis"]
    if F.xp is np:
        r = _add_reduce(g, ax, None, None, True)
        e = _exp(out)
        if g.dtype is not out.dtype or g.shape != out.shape:  # batched or promoted: a new array
            return (g - e * r,)
        return (_subtract(g, _multiply(e, r, e), e),)
    return (g - F.exp(out) * F.sum(g, axis=ax, keepdims=True),)


def _neg_axis(x: Tensor, axis: int, op: str) -> int:
    n = x._data.ndim
    if type(axis) is int and -n <= axis < 0:
        return axis  # (the default -1) already what norm_axis(axis) - n gives
    return _util.norm_axis(axis, n, op) - n  # negative: right under batched cotangents


def softmax(x: Any, axis: int = -1) -> Any:
    """``exp(x) / sum(exp(x))`` along ``axis``, stable for large logits.

    >>> import gputape as gt
    >>> gt.nn.softmax(gt.constant([0.0, 0.0])).numpy().tolist()
    [0.5, 0.5]
    """
    x = _real(x, "softmax")
    return apply(_softmax, (x,), {"axis": _neg_axis(x, axis, "softmax")})


def log_softmax(x: Any, axis: int = -1) -> Any:
    """``x - logsumexp(x)`` along ``axis``, stable for large logits.

    >>> import gputape as gt
    >>> gt.nn.log_softmax(gt.constant([1000.0, 1000.0], "float64")).numpy().round(4).tolist()
    [-0.6931, -0.6931]
    """
    x = _real(x, "log_softmax")
    return apply(_log_softmax, (x,), {"axis": _neg_axis(x, axis, "log_softmax")})


_sigmoid.public = sigmoid  # what F.sigmoid / F.softmax are when a tape records a VJP (gputape.ops)
_softmax.public = softmax


# -- losses ------------------------------------------------------------------------


# kernels/softmax_xent.cu computes the primitive below, loss and gradient in one row-wise
# pass, on a GPU. Its numpy reference (ref_sparse_softmax_xent) is the CPU path itself:
# the primitive's forward (_xent_loss) and VJP (_xent_grad) on numpy.
SOFTMAX_XENT = _kb.CudaModule(
    "softmax_xent",
    tuple(f"gt_sparse_xent_{g}_{t}_{i}" for g in ("warp", "block") for t in ("f32", "f64") for i in ("i32", "i64")),
)


def _xent_loss(xp, labels, logits):
    m = _np_row_max(logits, -1) if xp is np else xp.max(logits, axis=-1, keepdims=True)
    s = logits - m
    lse = xp.log(xp.sum(xp.exp(s), axis=-1))
    picked = xp.take_along_axis(s, labels[..., None].astype(np.intp), axis=-1)[..., 0]
    return lse - picked


def _xent_grad(F, g, labels, logits):
    # softmax - onehot, scaled by each example's cotangent, written with F's ops: the form a recording
    # tape differentiates again (second order) and the one that carries a jacobian's batch of cotangents
    xp = backend.xp_of(labels)
    c = logits.shape[-1]
    onehot = (labels[..., None] == xp.arange(c)).astype(logits.dtype)
    return F.expand_dims(g, -1) * (F.softmax(logits, -1) - onehot)


# -- the loss head's one VJP -----------------------------------------------------------------------
#
# The cross-entropy's VJP is declared once, here, on raw arrays: ``head_grad`` (integer labels) and
# ``dense_head_grad`` (probability or one-hot labels). The two primitives below run it, and so do the
# nodes gputape.core.loss_head fuses at gradient time out of what a user writes by hand
# (``log_softmax(z)[arange(n), y]``, ``sum(onehot * log_softmax(z), -1)``): such a node is a node of the
# same primitive, with ``fused`` set in its parameters, whose residual is the log-softmax the user's
# log_softmax already computed and whose output is the picked log-probability, minus the loss. The
# fused form does, operation for operation, what the unfused sweep's VJPs do (without the scatter, the
# zeros and the row sums of a one-hot cotangent), so its bits are the unfused sweep's; the sweep, the
# compiled backward and gt.function's replay all call the primitive's VJP, so they share it. On a GPU
# the sparse head is one launch of kernels/softmax_xent.cu.


def head_grad(g: Any, logp: Any, labels: Any, picked: bool = False) -> Any:
    """The cotangent of the logits of the sparse cross-entropy: ``g[..., None] * (softmax - onehot)``.

    ``logp`` is the log-softmax of the logits (``softmax = exp(logp)``), ``labels`` integer class ids of
    shape ``logp.shape[:-1]`` (negative ones count from the end, as numpy indexing does), ``g`` the
    cotangent per row. With ``picked=True``, ``g`` is the cotangent of ``logp[rows, labels]`` (minus the
    loss) instead, and the result is ``g[..., None] * (onehot - softmax)``, computed as the unfused sweep
    computes it: ``(0 - softmax * g) + g`` at the label, ``0 - softmax * g`` elsewhere. numpy or cupy.

    >>> import numpy as np
    >>> logp = np.log(np.array([[0.25, 0.75]]))
    >>> head_grad(np.array([2.0]), logp, np.array([1])).tolist()
    [[0.5, -0.5]]
    """
    c = logp.shape[-1]
    if type(logp) is not np.ndarray:  # one row-wise kernel: softmax of the log-softmax is the softmax
        g = backend.xp_of(logp).asarray(g)
        lab = backend.xp_of(labels).where(labels < 0, labels + c, labels)  # (numpy's wrap-around)
        return sparse_softmax_xent(logp, lab, -g if picked else g, loss=False)[1]
    if type(g) is not np.ndarray:
        g = np.asarray(g)
    e = _exp(logp)
    gc = g[..., None]
    t = _multiply(e, gc, e) if gc.dtype is e.dtype else e * gc
    if picked:
        _subtract(0, t, t)  # the unfused sweep's zeros minus softmax * g (+0.0 where that is 0)
    if t.ndim == 2 and g.ndim <= 1:  # (the common case: rows of classes, no reshape)
        rows = _row_cache.get(t.shape[0])
        at = (rows if rows is not None else _rows(t.shape[0]), labels)
    else:
        t2 = t.reshape(-1, c)
        at = (_rows(t2.shape[0]), labels.reshape(-1))
        if g.ndim:
            g = np.broadcast_to(g, logp.shape[:-1]).reshape(-1)
        t2[at] = t2[at] + g if picked else t2[at] - g
        return t
    if picked:
        t[at] += g
    else:
        t[at] -= g
    return t


def _rows(n: int) -> np.ndarray:
    r = _row_cache.get(n)
    if r is None:
        if len(_row_cache) >= 16:
            _row_cache.clear()
        r = _row_cache[n] = np.arange(n)
        r.flags.writeable = False
    return r


_row_cache: dict[int, np.ndarray] = {}


def dense_head_grad(g: Any, logp: Any, labels: Any, picked: bool = False) -> Any:
    """The cotangent of the logits of the cross-entropy ``-sum(labels * logp, -1)`` of probability (or
    one-hot) ``labels``: ``g[..., None] * (softmax * sum(labels) - labels)``.

    With ``picked=True``, ``g`` is the cotangent of ``sum(labels * logp, -1)`` (minus the loss), computed
    as the unfused sweep computes it: ``gq - softmax * sum(gq)`` with ``gq = g * labels``. numpy or cupy.

    >>> import numpy as np
    >>> logp = np.log(np.array([[0.25, 0.75]]))
    >>> dense_head_grad(np.array([1.0]), logp, np.array([[0.0, 1.0]])).tolist()
    [[0.25, -0.25]]
    """
    xp = backend.xp_of(logp)
    g = xp.asarray(g)
    if not picked:
        g = -g
    gq = g[..., None] * labels
    r = _row_sum(xp, gq, -1)
    if xp is not np:
        return gq - xp.exp(logp) * r
    e = _exp(logp)
    if gq.dtype is not e.dtype:
        return gq - e * r
    return _subtract(gq, _multiply(e, r, e), e)


@primitive("sparse_softmax_cross_entropy_with_logits", complex="real", save=True)
def _sparse_xent(xp, labels, logits):
    if xp is not np:  # one row-wise kernel on the GPU
        return sparse_softmax_xent(logits, labels, grad=False)[0]
    return _xent_loss(xp, labels, logits)


@_sparse_xent.defvjp
def _(F, g, needs, nb, node, labels, logits):
    lab = labels._data if isinstance(labels, Tensor) else labels
    xp = F.xp
    if xp is None or nb:  # a recording tape (second order) or a jacobian's batch
        return (None, _xent_grad(F, g, lab, logits))
    p = node.params
    if p:  # a fused head (gputape.core.loss_head): the residual is the user's log_softmax
        if "mean" in p:  # a full mean joined the head: divided as mean's VJP divides (the same bits)
            g = g / (p["mean"] or 1)
        return (None, head_grad(g, logits, lab, picked=True))
    if xp is not np:  # softmax - onehot, scaled, in the same fused kernel as the forward
        return (None, sparse_softmax_xent(logits, lab, g, loss=False)[1])
    return (None, head_grad(g, _log_softmax_fwd(np, logits), lab))


def _dense_xent_fwd(xp, labels, logits):
    return -xp.sum(labels * _log_softmax_fwd(xp, logits), axis=-1)


_dense_xent = primitive("softmax_cross_entropy_with_logits", complex="real", save=True)(_dense_xent_fwd)


@_dense_xent.defvjp
def _(F, g, needs, nb, node, labels, logits):
    if F.xp is None or nb:  # a recording tape (second order) or a jacobian's batch: F's ops
        ge = F.expand_dims(g, -1)
        dz = ge * (F.softmax(logits, -1) * F.sum(labels, axis=-1, keepdims=True) - labels) if needs[1] else None
        dq = None
        if needs[0]:
            dq = -ge * (log_softmax(logits) if F.xp is None else _log_softmax_fwd(F.xp, logits))
        return (dq, dz)
    p = node.params
    if p:  # a fused head: the residual is the user's log_softmax
        if "mean" in p:
            g = g / (p["mean"] or 1)
        return (None, dense_head_grad(g, logits, labels, picked=True))
    logp = _log_softmax_fwd(F.xp, logits)
    dq = -(g[..., None] * logp) if needs[0] else None
    return (dq, dense_head_grad(g, logp, labels) if needs[1] else None)


def ref_sparse_softmax_xent(
    logits: np.ndarray, labels: np.ndarray, g: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row loss ``logsumexp(x) - x[label]`` and gradient ``(softmax(x) - onehot) * g`` (numpy).

    The CPU path of :func:`sparse_softmax_cross_entropy_with_logits`: its forward and its
    VJP, run on numpy (so the kernel's reference cannot drift from it). The row max is
    subtracted first (nothing overflows); a label outside ``[0, C)``, which the public
    function refuses, gives NaN in that row's loss and gradient, as the kernel does.

    >>> import numpy as np
    >>> loss, d = ref_sparse_softmax_xent(np.zeros((1, 2)), np.array([0]))
    >>> loss.round(4).tolist(), d.tolist()
    ([0.6931], [[-0.5, 0.5]])
    """
    c = logits.shape[-1]
    if c == 0:
        raise ValueError("sparse_softmax_xent: logits have no classes (last axis of size 0)")
    lab = np.asarray(labels)
    valid = (lab >= 0) & (lab < c)
    safe = np.where(valid, lab, 0)
    rows = logits.shape[:-1]
    g = np.ones(rows, logits.dtype) if g is None else np.broadcast_to(np.asarray(g, logits.dtype), rows)
    loss = _xent_loss(np, safe, logits)
    d = head_grad(g, _log_softmax_fwd(np, logits), safe)
    if not valid.all():
        loss = np.where(valid, loss, np.nan)
        d = np.where(valid[..., None], d, np.nan)
    return loss.astype(logits.dtype, copy=False), d.astype(logits.dtype, copy=False)


def sparse_softmax_xent(logits: Any, labels: Any, g: Any = None, loss: bool = True, grad: bool = True) -> tuple:
    """Sparse softmax cross-entropy, loss and gradient in ONE row-wise pass.

    ``logits`` is ``(..., C)``, ``labels`` integers of shape ``logits.shape[:-1]``,
    ``g`` None (cotangent 1) or the per-example cotangent of that shape. Returns
    ``(loss, dlogits)``, each None when not asked for; ``dlogits = (softmax -
    onehot) * g[..., None]``.

    >>> import numpy as np
    >>> l, d = sparse_softmax_xent(np.zeros((1, 2)), np.array([1]))
    >>> l.round(4).tolist(), d.tolist()
    ([0.6931], [[0.5, -0.5]])
    """
    if type(logits) is np.ndarray or not backend.is_gpu_array(logits):
        lo, d = ref_sparse_softmax_xent(logits, backend.to_host(labels), None if g is None else backend.to_host(g))
        return (lo if loss else None, d if grad else None)
    cp = _kb.cupy_or_raise()
    shape = logits.shape
    if not shape or shape[-1] == 0:
        raise ValueError(f"sparse_softmax_xent: logits must have a non-empty last axis, got shape {shape}")
    out_dt = logits.dtype
    dt = _kb.launch_dtype(out_dt)
    if dt is None:
        raise TypeError(f"sparse_softmax_xent: no kernel for logits of dtype {out_dt}")
    c = shape[-1]
    n = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    dev = logits.device.id
    with logits.device:
        x = cp.ascontiguousarray(logits, dtype=dt).reshape(n, c)
        lab = labels if backend.is_gpu_array(labels) else backend.asarray_on(labels, f"cuda:{dev}")  # counted
        if lab.shape != shape[:-1]:
            raise ValueError(f"sparse_softmax_xent: labels shape {lab.shape} must equal logits.shape[:-1] {shape[:-1]}")
        if lab.dtype not in (np.int32, np.int64):
            lab = lab.astype(np.int64)
        lab = cp.ascontiguousarray(lab).reshape(n)
        gg = None
        if g is not None:
            g = g if backend.is_gpu_array(g) else backend.asarray_on(g, f"cuda:{dev}", dt)  # counted
            gg = cp.ascontiguousarray(cp.broadcast_to(g.astype(dt, copy=False), shape[:-1])).reshape(n)
        lo = cp.empty(n, dt) if loss else None
        d = cp.empty((n, c), dt) if grad else None
        sms = _kb.sm_count(dev)
        block = c > 1024 and n < 16 * sms  # few long rows: a whole block per row
        name = "gt_sparse_xent_{}_{}_{}".format(
            "block" if block else "warp",
            "f32" if dt == np.float32 else "f64",
            "i32" if lab.dtype == np.int32 else "i64",
        )
        rows_per_block = 1 if block else 8
        grid = max(1, min((n + rows_per_block - 1) // rows_per_block, sms * 32))
        f = SOFTMAX_XENT.function(name, dev)
        args = [_kb.NULL if a is None else a for a in (x, lab, gg, lo, d)]
        f((grid,), (256,), (*args, np.int64(n), np.int64(c)))
    lo = None if lo is None else lo.reshape(shape[:-1])
    d = None if d is None else d.reshape(shape)
    if dt != out_dt:
        lo = None if lo is None else lo.astype(out_dt)
        d = None if d is None else d.astype(out_dt)
    return lo, d


def sparse_softmax_cross_entropy_with_logits(labels: Any, logits: Any) -> Any:
    """Per-example cross-entropy of integer ``labels`` against unnormalised ``logits``.

    ``labels`` has shape ``logits.shape[:-1]`` and values in ``[0, classes)``.

    >>> import gputape as gt
    >>> loss = gt.nn.sparse_softmax_cross_entropy_with_logits([0], gt.constant([[0.0, 0.0]], "float64"))
    >>> loss.numpy().round(4).tolist()
    [0.6931]
    """
    logits = _real(logits, "sparse_softmax_cross_entropy_with_logits")
    # an array passes as it is: a gt.function trace knows an argument's labels by their identity
    lab = labels._data if isinstance(labels, Tensor) else labels if hasattr(labels, "dtype") else _to_array(labels)
    if lab.dtype.kind not in "iu":
        raise TypeError(
            f"gt.nn.sparse_softmax_cross_entropy_with_logits: labels must be integers, got {lab.dtype}; "
            "for one-hot or probability labels use softmax_cross_entropy_with_logits"
        )
    shape = logits._data.shape  # (the array's: Tensor.shape is a property call per read)
    if lab.shape != shape[:-1]:
        raise ValueError(
            f"gt.nn.sparse_softmax_cross_entropy_with_logits: labels shape {lab.shape} must equal "
            f"logits.shape[:-1] = {shape[:-1]}"
        )
    c = shape[-1]
    if lab.size and (int(lab.min()) < 0 or int(lab.max()) >= c):
        raise ValueError(
            f"gt.nn.sparse_softmax_cross_entropy_with_logits: labels must be in [0, {c}); got values "
            f"from {int(lab.min())} to {int(lab.max())}"
        )
    return apply(_sparse_xent, (lab, logits), _E)


def softmax_cross_entropy_with_logits(labels: Any, logits: Any, axis: int = -1) -> Any:
    """Per-example cross-entropy of probability (or one-hot) ``labels`` against ``logits``.

    One primitive (VJP ``g * (softmax * sum(labels) - labels)``, and ``-g * log_softmax`` for labels
    a tape watches) when the classes are the last axis and labels and logits share shape and dtype;
    otherwise composed from log_softmax, a product and a sum (numpy's promotion and broadcasting).

    >>> import gputape as gt
    >>> z = gt.constant([[0.0, 0.0]], "float64")
    >>> gt.nn.softmax_cross_entropy_with_logits([[0.5, 0.5]], z).numpy().round(4).tolist()
    [0.6931]
    """
    logits = _real(logits, "softmax_cross_entropy_with_logits")
    labels = _real(labels, "softmax_cross_entropy_with_logits", labels=True)
    zd, qd = logits._data, labels._data
    if zd.ndim and qd.shape == zd.shape and qd.dtype == zd.dtype and zd.dtype.kind == "f":
        if _neg_axis(logits, axis, "softmax_cross_entropy_with_logits") == -1:
            return apply(_dense_xent, (labels, logits), _E)
    return negative(_sum(multiply(labels, log_softmax(logits, axis)), axis=axis))


def sigmoid_cross_entropy_with_logits(labels: Any, logits: Any) -> Any:
    """Elementwise binary cross-entropy of ``labels`` in [0, 1] against ``logits``, stable.

    >>> import gputape as gt
    >>> gt.nn.sigmoid_cross_entropy_with_logits([1.0], gt.constant([0.0], "float64")).numpy().round(4).tolist()
    [0.6931]
    """
    x = _real(logits, "sigmoid_cross_entropy_with_logits")
    labels = _real(labels, "sigmoid_cross_entropy_with_logits", labels=True)
    # max(x, 0) - x * z + log(1 + exp(-|x|)), TensorFlow's stable form
    return maximum(x, 0.0) - x * labels + log1p(_el.exp(-_abs(x)))


def mean_squared_error(y_true: Any, y_pred: Any) -> Any:
    """Mean over the last axis of ``(y_true - y_pred) ** 2`` (Keras' definition).

    >>> import gputape as gt
    >>> gt.nn.mean_squared_error(gt.constant([[1.0, 2.0]]), gt.constant([[1.0, 4.0]])).numpy().tolist()
    [2.0]
    """
    d = _real(y_pred, "mean_squared_error") - _real(y_true, "mean_squared_error", labels=True)
    return mean(d * d, axis=-1)


__all__ = [
    "elu",
    "gelu",
    "leaky_relu",
    "log_softmax",
    "mean_squared_error",
    "relu",
    "sigmoid",
    "sigmoid_cross_entropy_with_logits",
    "softmax",
    "softmax_cross_entropy_with_logits",
    "softplus",
    "sparse_softmax_cross_entropy_with_logits",
]
