"""Reductions: sum mean max min prod logsumexp (primitives) and var std (composed).

Every reduction records the input shape with the reduced axes kept as 1
(``kept``) so its VJP can reshape the cotangent, leading batch dims included,
and broadcast it back.

Each public reduction also takes numpy's keyword-only ``out=`` (None only: tensors are
immutable) and, where numpy has it (sum mean prod var std), ``dtype=``: the input is cast to
it first, which is numpy's accumulate-in-dtype result.
"""

from __future__ import annotations

import builtins
import math
import warnings
from typing import Any

import numpy as np

from ..core.dispatch import apply, primitive
from ..core.primitive import UNORDERED
from ..core.tensor import Tensor, as_tensor
from ..devices import backend
from ._compat import check_out
from ._util import norm_axes, norm_flag, norm_real


def _reduction_params(x: Any, axis: Any, keepdims: bool, op: str) -> tuple[Any, dict]:
    if not isinstance(x, Tensor):
        x = as_tensor(x)
    shape = x._data.shape
    if axis is None:  # a loss's full reduction: every axis, every one kept as 1
        n = len(shape)
        axes = _ALL_AXES[n] if n < len(_ALL_AXES) else tuple(range(n))
        kept = (1,) * n
    else:
        axes = norm_axes(axis, len(shape), op)
        kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
    return x, {"axis": axes, "keepdims": keepdims if type(keepdims) is bool else norm_flag(keepdims, op), "kept": kept}


_ALL_AXES = tuple(tuple(range(n)) for n in range(9))  # norm_axes(None, n) for the common ranks


def _empty_mean(xp: Any, x: Any, axis: tuple, keepdims: bool) -> Any:
    """numpy's mean over zero elements: NaN, with numpy's RuntimeWarning."""
    warnings.warn("Mean of empty slice", RuntimeWarning, stacklevel=5)
    shape = tuple(1 if i in axis else s for i, s in enumerate(x.shape) if keepdims or i not in axis)
    return xp.full(shape, np.nan, x.dtype if x.dtype.kind in "fc" else np.float64)


def _numpy_args(x: Any, dtype: Any, out: Any, op: str) -> Any:
    """numpy's ``dtype=`` (the input is cast first: numpy accumulates in it) and ``out=`` (None only)."""
    check_out(op, out)
    if dtype is None:
        return x
    from .elementwise import cast

    return cast(x, dtype)


def _expand(F: Any, g: Any, nb: int, node: Any) -> Any:
    """Reshape a reduction's cotangent to the kept-dims shape (batch dims first)."""
    # the method, not F.reshape: the same reshape without numpy's Python-level wrapper
    return g.reshape(g.shape[:nb] + node.params["kept"])


_NP_FLOAT_SCALARS = frozenset((np.float16, np.float32, np.float64))


def _widen(F: Any, g: Any, shape: tuple) -> Any:
    """``F.broadcast_to(g, shape)``: a reduction's cotangent back over the reduced axes.

    On numpy, a one-element ``g`` (a full reduction's: a loss's mean) gets the very view
    ``np.broadcast_to`` makes (every stride 0, read-only, reading ``g``'s one element) from the
    array constructor, without np.broadcast_to's Python-level setup (an nditer: 1.7 us, half of
    this VJP's time in a small training step). A numpy scalar (the cotangent of a 0-d result after
    ``negative``: numpy's ufuncs return scalars for 0-d operands) is read the same way; its
    buffer is read-only, and so is the view without setting the flag (0.4 us of 1).
    """
    tg = type(g)
    if tg in _NP_FLOAT_SCALARS and F.xp is np:
        return np.ndarray(shape, g.dtype, g, 0, (0,) * len(shape))
    if tg is np.ndarray and g.size == 1 and g.ndim <= len(shape) and F.xp is np:
        v = np.ndarray(shape, g.dtype, g, 0, (0,) * len(shape))
        v.flags.writeable = False
        return v
    return F.broadcast_to(g, shape)


@primitive("sum", complex="holomorphic")
def _sum(xp, x, axis, keepdims, kept):
    if xp is np and x.dtype.kind == "f":  # the ufunc method: no Python-level wrapper
        return np.add.reduce(x, axis=axis, keepdims=keepdims)
    return xp.sum(x, axis=axis, keepdims=keepdims)


@_sum.defvjp
def _(F, g, needs, nb, node):
    if type(g) in _NP_FLOAT_SCALARS and not nb:  # a 0-d result's cotangent: no reshape to widen it
        return (_widen(F, g, node.shapes[0]),)
    g = _expand(F, g, nb, node)
    return (_widen(F, g, g.shape[:nb] + node.shapes[0]),)


def sum(x: Any, axis: Any = None, keepdims: bool = False, *, dtype: Any = None, out: None = None) -> Any:
    """Sum over ``axis`` (None: all axes).

    >>> import gputape as gt
    >>> gt.sum(gt.constant([[1.0, 2.0], [3.0, 4.0]]), axis=0).numpy().tolist()
    [4.0, 6.0]
    """
    if dtype is not None or out is not None:
        x = _numpy_args(x, dtype, out, "sum")
    x, p = _reduction_params(x, axis, keepdims, "sum")
    return apply(_sum, (x,), p)


@primitive("mean", complex="holomorphic")
def _mean(xp, x, axis, keepdims, kept):
    n = 1
    for a in axis:
        n *= x.shape[a]
    if not n:
        return _empty_mean(xp, x, axis, keepdims)
    if xp is np and x.dtype.kind == "f":
        if x.dtype.itemsize == 2:
            # np.mean of float16 sums and divides in float32 and rounds once (a float16 sum of
            # 5000 values in [0, 10) ends 0.006 off): the same, as np.mean computes it
            return (np.add.reduce(x, axis=axis, dtype=np.float32, keepdims=keepdims) / n).astype(np.float16)
        # np.mean is a Python function (~6 us on small arrays); a float sum over a
        # Python-int count keeps the dtype and costs a fifth of that
        return np.add.reduce(x, axis=axis, keepdims=keepdims) / n
    return xp.mean(x, axis=axis, keepdims=keepdims)


@_mean.defvjp
def _(F, g, needs, nb, node):
    shape = node.shapes[0]
    count = 1
    for a in node.params["axis"]:
        count *= shape[a]
    if not nb and (type(g) in _NP_FLOAT_SCALARS or (type(g) is np.ndarray and g.ndim == 0)):
        # a loss's mean: its scalar (or 0-d: gradient()'s seed) cotangent divided as a scalar (the
        # same IEEE division as on the one-element array _expand makes), then widened
        return (_widen(F, g / (count or 1), shape),)
    g = _expand(F, g, nb, node) / (count or 1)
    return (_widen(F, g, g.shape[:nb] + shape),)


def mean(x: Any, axis: Any = None, keepdims: bool = False, *, dtype: Any = None, out: None = None) -> Any:
    """Arithmetic mean over ``axis`` (None: all axes).

    Over zero elements it is NaN, with numpy's ``RuntimeWarning: Mean of empty slice``
    (TensorFlow gives NaN too); its gradient is then empty, like the input. A float16 mean
    sums in float32 and rounds once, as np.mean's does (so also with ``dtype='float16'``,
    for which numpy would sum in float16).

    >>> import gputape as gt
    >>> gt.mean(gt.constant([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy().tolist()
    [1.5, 3.5]
    """
    if dtype is not None or out is not None:
        x = _numpy_args(x, dtype, out, "mean")
    x, p = _reduction_params(x, axis, keepdims, "mean")
    return apply(_mean, (x,), p)


def _extreme_vjp(F, g, needs, nb, node, x, out):
    # TensorFlow's rule: the gradient is shared equally among tied extremes.
    sel = x == F.reshape(out, node.params["kept"])
    w = sel.astype(x.dtype)
    w = w / F.sum(w, axis=node.params["axis"], keepdims=True)
    return (_expand(F, g, nb, node) * w,)


@primitive("max", complex=UNORDERED, save=True, save_out=True)
def _max(xp, x, axis, keepdims, kept):
    if xp is np:
        return np.maximum.reduce(x, axis=axis, keepdims=keepdims)
    return xp.max(x, axis=axis, keepdims=keepdims)


_max.defvjp(_extreme_vjp)


def max(x: Any, axis: Any = None, keepdims: bool = False, *, out: None = None) -> Any:
    """Maximum over ``axis``; ties share the gradient equally (TensorFlow's rule).

    >>> import gputape as gt
    >>> gt.max(gt.constant([[1.0, 5.0], [3.0, 4.0]]), axis=1).numpy().tolist()
    [5.0, 4.0]
    """
    if out is not None:
        check_out("max", out)
    x, p = _reduction_params(x, axis, keepdims, "max")
    if x.size == 0:
        raise ValueError("gt.max: cannot reduce an empty tensor (it has no maximum)")
    return apply(_max, (x,), p)


@primitive("min", complex=UNORDERED, save=True, save_out=True)
def _min(xp, x, axis, keepdims, kept):
    if xp is np:
        return np.minimum.reduce(x, axis=axis, keepdims=keepdims)
    return xp.min(x, axis=axis, keepdims=keepdims)


_min.defvjp(_extreme_vjp)


def min(x: Any, axis: Any = None, keepdims: bool = False, *, out: None = None) -> Any:
    """Minimum over ``axis``; ties share the gradient equally (TensorFlow's rule).

    >>> import gputape as gt
    >>> gt.min(gt.constant([[1.0, 5.0], [3.0, 4.0]]), axis=1).numpy().tolist()
    [1.0, 3.0]
    """
    if out is not None:
        check_out("min", out)
    x, p = _reduction_params(x, axis, keepdims, "min")
    if x.size == 0:
        raise ValueError("gt.min: cannot reduce an empty tensor (it has no minimum)")
    return apply(_min, (x,), p)


@primitive("prod", complex="holomorphic", save=True)
def _prod(xp, x, axis, keepdims, kept):
    return xp.prod(x, axis=axis, keepdims=keepdims)


@_prod.defvjp
def _(F, g, needs, nb, node, x):
    ax = node.params["axis"]
    if F.xp is None and bool((x._data == 0).any()):
        others = _others_exact(F, x, ax)  # recorded for a higher derivative: exact form
    else:
        # d prod / d x_i = product of the others. Dividing out/x_i fails at zeros,
        # so count zeros per reduced slice: none -> p/x_i; one -> p (of the nonzero
        # ones) at the zero, 0 elsewhere; two or more -> 0. Exact, but constant in
        # the zero entries, so only first derivatives may use it when zeros exist.
        z = x == 0
        nzero = F.sum(z.astype(x.dtype), axis=ax, keepdims=True)
        xs = F.where(z, 1, x)
        p = F.prod(xs, axis=ax, keepdims=True)
        others = F.where(nzero == 0, p / xs, F.where(z & (nzero == 1), p, 0))
    return (_expand(F, g, nb, node) * others,)


def _others_exact(F: Any, x: Any, ax: tuple[int, ...]) -> Any:
    """For each element, the product of the others in its reduced slice, as a product
    over a (k, k) arrangement with a unit diagonal: no division, differentiable to any order."""
    n = x.ndim
    perm = [i for i in range(n) if i not in ax] + list(ax)
    xt = F.transpose(x, tuple(perm))
    kept = xt.shape[: n - len(ax)]
    k = int(np.prod(xt.shape[n - len(ax) :]))
    if x.size * k > 20_000_000:
        raise NotImplementedError(
            f"gt.prod: a higher-order gradient through a product over {k} elements that include zeros "
            "would need a k-by-k expansion; reduce over fewer elements or avoid exact zeros"
        )
    eye = backend.xp_of(x._data).eye(k, dtype=bool)
    m = F.where(eye, 1, F.expand_dims(F.reshape(xt, kept + (k,)), -2))
    others = F.reshape(F.prod(m, axis=-1), xt.shape)
    inv = [0] * n
    for i, p in enumerate(perm):
        inv[p] = i
    return F.transpose(others, tuple(inv))


def prod(x: Any, axis: Any = None, keepdims: bool = False, *, dtype: Any = None, out: None = None) -> Any:
    """Product over ``axis``; the gradient is exact with zeros present.

    >>> import gputape as gt
    >>> gt.prod(gt.constant([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy().tolist()
    [2.0, 12.0]
    """
    if dtype is not None or out is not None:
        x = _numpy_args(x, dtype, out, "prod")
    x, p = _reduction_params(x, axis, keepdims, "prod")
    return apply(_prod, (x,), p)


@primitive("logsumexp", complex="holomorphic", save=True, save_out=True)
def _logsumexp(xp, x, axis, keepdims, kept):
    # Shift by the max so large logits do not overflow; of complex values, by the max of the real
    # parts: a real shift keeps log's principal branch, so the result is log(sum(exp(z))) exactly
    m = xp.max(x.real, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axis))


@_logsumexp.defvjp
def _(F, g, needs, nb, node, x, out):
    return (_expand(F, g, nb, node) * F.exp(x - F.reshape(out, node.params["kept"])),)


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``log(sum(exp(x)))`` over ``axis``, stable for large inputs.

    >>> import gputape as gt
    >>> round(float(gt.logsumexp(gt.constant([1000.0, 1000.0], "float64"))), 4)
    1000.6931
    """
    x, p = _reduction_params(x, axis, keepdims, "logsumexp")
    return apply(_logsumexp, (x,), p)


def var(x: Any, axis: Any = None, keepdims: bool = False, ddof: int = 0, *, dtype: Any = None, out: None = None) -> Any:
    """Variance over ``axis`` (``ddof`` as in numpy); composed from mean and square.

    As in numpy, the sum of squares is divided by ``max(n - ddof, 0)``: with no degrees
    of freedom left (an empty tensor, ``ddof >= n``) the result is NaN or inf, with numpy's
    ``RuntimeWarning: Degrees of freedom <= 0 for slice``. Of a complex tensor it is real, as in
    numpy: the mean of ``|x - mean|**2``.

    >>> import gputape as gt
    >>> gt.var(gt.constant([1.0, 2.0, 3.0, 4.0])).numpy().item()
    1.25
    """
    if dtype is not None or out is not None:
        x = _numpy_args(x, dtype, out, "var")
    return _var(x, axis, keepdims, ddof, "var")


def _squared_modulus(d: Any) -> Any:
    from .elementwise import imag, real, square

    return square(real(d)) + square(imag(d))


def _var(x: Any, axis: Any, keepdims: Any, ddof: Any, op: str) -> Any:
    from .elementwise import square

    x = as_tensor(x)
    axes = norm_axes(axis, x.ndim, op)
    keepdims = norm_flag(keepdims, op)
    # complex input: numpy's var is mean(|x - mean|^2), a real number; the squared modulus as
    # real^2 + imag^2 keeps every order smooth (abs(d)**2 has a kink in its gradient at d == 0)
    sq = _squared_modulus if x.dtype.kind == "c" else square
    if type(ddof) is not int:
        ddof = norm_real(ddof, op)  # numpy takes a float ddof too
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    div = n - ddof
    if div > 0:
        d = x - mean(x, axis=axes, keepdims=True)
        s = sum(sq(d), axis=axes, keepdims=keepdims)
        return s / div if ddof else s / n
    if div == div:  # numpy warns for max(n - ddof, 0) == 0; a NaN ddof gives NaN silently
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=3)
    d = x - sum(x, axis=axes, keepdims=True) / builtins.max(n, 1)  # no second warning for an empty mean
    s = sum(sq(d), axis=axes, keepdims=keepdims)
    # numpy's s / 0 (inf, and 0 / 0 = nan) as a product: a Python 0 divisor would make the
    # divide VJP raise ZeroDivisionError
    with np.errstate(invalid="ignore"):
        return s * (math.inf if div == div else math.nan)


def std(x: Any, axis: Any = None, keepdims: bool = False, ddof: int = 0, *, dtype: Any = None, out: None = None) -> Any:
    """Standard deviation over ``axis``: ``sqrt(var(x))`` (NaN/inf without degrees of freedom, as in numpy).

    Where the result is 0 (a one-element axis, a slice of equal values) the gradient is 0, as in
    PyTorch (TensorFlow's ``reduce_std`` and JAX give NaN there: sqrt's derivative at 0).

    >>> import gputape as gt
    >>> gt.std(gt.constant([1.0, 3.0])).numpy().item()
    1.0
    """
    from .creation import not_equal
    from .elementwise import sqrt, where

    if dtype is not None or out is not None:
        x = _numpy_args(x, dtype, out, "std")
    v = _var(x, axis, keepdims, ddof, "std")
    # PyTorch's rule: the gradient is 0 where std is 0 (a one-element axis, a constant slice), where
    # sqrt's would be 0 * inf = NaN. The double where keeps every order finite; v != 0 keeps NaN/inf.
    nz = not_equal(v, 0)
    return where(nz, sqrt(where(nz, v, 1)), 0)
