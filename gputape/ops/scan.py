"""Scans along an axis: ``cumsum`` and ``cumprod`` (primitives) and ``diff`` (composed).

``cumsum`` is a primitive because composing it (a triangular matmul) costs O(n^2)
and rounds worse; its VJP is the reversed cumulative sum of the cotangent,
written with ``cumsum`` itself so that it is differentiable again.

``cumprod``'s VJP is ``reverse_cumsum(g * y) / x`` where no input is 0. At zeros
that quotient is 0/0, so (as PyTorch does) each slice is split at its first zero
``z``: entries before it keep the quotient, the entry at ``z`` gets
``reverse_cumsum(g * cumprod(x with x[z] = 1))``, and the entries after it get 0.
That rule is exact at first order but constant in the zero entries, so when a tape
records the gradient itself (a higher derivative follows) and zeros are present, the
VJP uses the exact expansion ``prod_{k <= j, k != i} x_k`` over an (n, n) grid
instead: a polynomial, differentiable to any order (as ``gt.prod`` does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dispatch import primitive
from ..core.tensor import as_tensor
from ._compat import NOVALUE, axis_index, check_out, const_like, run, snapshot, xp_of
from ._util import norm_axis, norm_dtype, norm_size


def _reverse_cumsum(F: Any, v: Any, axis: int) -> Any:
    rev = axis_index(axis, slice(None, None, -1))
    return run(F, _cumsum, v[rev], axis=axis)[rev]


@primitive("cumsum", complex="holomorphic")
def _cumsum(xp, x, axis):
    return xp.cumsum(x, axis=axis)


@_cumsum.defvjp
def _(F, g, needs, nb, node):
    return (_reverse_cumsum(F, g, node.params["axis"]),)


def _scan_input(op: str, a: Any, axis: Any, dtype: Any, out: Any) -> tuple[Any, int]:
    check_out(op, out)
    x = as_tensor(a)
    if dtype is not None and x.dtype != norm_dtype(dtype, op):
        from .elementwise import cast

        x = cast(x, dtype)  # numpy accumulates in dtype: the same as casting first
    if axis is None:
        from .shape import reshape

        return reshape(x, (-1,)), -1
    # negative: the axis keeps its meaning under a VJP's leading batch dims
    return x, norm_axis(axis, x.ndim, op) - x.ndim


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: None = None) -> Any:
    """Cumulative sum along ``axis`` (of the flattened input when None), numpy's rules:
    integer and bool inputs accumulate in the platform integer, ``dtype`` sets the accumulator.

    A primitive; its gradient is the reversed cumulative sum of the cotangent.

    >>> import gputape as gt
    >>> gt.cumsum(gt.constant([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy().tolist()
    [[1.0, 3.0], [3.0, 7.0]]
    >>> gt.cumsum(gt.constant([[1, 2], [3, 4]])).numpy().tolist()
    [1, 3, 6, 10]
    """
    x, ax = _scan_input("cumsum", a, axis, dtype, out)
    return _cumsum(x, axis=ax)


@primitive("cumprod", complex="holomorphic", save=True, save_out=True)
def _cumprod(xp, x, axis):
    return xp.cumprod(x, axis=axis)


@_cumprod.defvjp
def _(F, g, needs, nb, node, x, y):
    ax = node.params["axis"]
    if F.xp is None:  # recorded: a higher derivative may follow
        if bool((x._data == 0).any()):
            return (_cumprod_grad_exact(F, g, x, ax),)
        return (_reverse_cumsum(F, g * y, ax) / x,)
    if F.xp is np and not (x == 0).any():
        return (_reverse_cumsum(F, g * y, ax) / x,)
    # (on a GPU always this way: asking whether there are zeros would wait for the device)
    zero = x == 0
    seen = F.xp.cumsum(zero, axis=ax)  # zeros up to and including each entry
    before = seen == 0
    first = zero & (seen == 1)
    y_first = _cumprod.fwd(F.xp, F.where(first, 1, x), axis=ax)
    return (
        F.where(
            before,
            _reverse_cumsum(F, g * y, ax) / F.where(before, x, 1),
            F.where(first, _reverse_cumsum(F, g * y_first, ax), 0),
        ),
    )


def _cumprod_grad_exact(F: Any, g: Any, x: Any, ax: int) -> Any:
    """sum_{j >= i} g_j prod_{k <= j, k != i} x_k, as a cumprod over an (n, n) grid with a unit diagonal."""
    n = x.shape[ax]
    if x.size * n > 20_000_000:
        raise NotImplementedError(
            f"gt.cumprod: a higher-order gradient through a cumulative product of length {n} with exact zeros "
            "needs an n-by-n expansion; use a shorter axis or avoid exact zeros"
        )
    xp = xp_of(x)
    eye = xp.eye(n, dtype=bool)
    grid = F.where(eye, 1, F.expand_dims(F.moveaxis(x, ax, -1), -2))  # [..., i, k]
    others = run(F, _cumprod, grid, axis=-1)  # [..., i, j] = prod_{k <= j, k != i} x_k
    upper = xp.triu(xp.ones((n, n), bool))  # j >= i, made where x lives (no host copy)
    gi = F.sum(F.where(upper, others * F.expand_dims(F.moveaxis(g, ax, -1), -2), 0), axis=-1)
    return F.moveaxis(gi, -1, ax)


def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: None = None) -> Any:
    """Cumulative product along ``axis`` (of the flattened input when None), numpy's dtype rules.

    A primitive. The gradient is exact with zeros present (see the module notes:
    the first zero of each slice gets the product of the others, later entries 0).

    >>> import gputape as gt
    >>> x = gt.constant([2.0, 0.0, 3.0])
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = gt.cumprod(x)
    >>> y.numpy().tolist(), tape.gradient(y, x).numpy().tolist()
    ([2.0, 0.0, 0.0], [1.0, 8.0, 0.0])
    """
    x, ax = _scan_input("cumprod", a, axis, dtype, out)
    return _cumprod(x, axis=ax)


def diff(a: Any, n: int = 1, axis: int = -1, prepend: Any = NOVALUE, append: Any = NOVALUE) -> Any:
    """The ``n``-th discrete difference along ``axis``, ``out[i] = a[i + 1] - a[i]`` (``!=`` for bool).

    Composed of slices and ``subtract``; ``prepend``/``append`` are joined first
    (scalars broadcast to one slice; Python numbers take the input's dtype).

    >>> import gputape as gt
    >>> gt.diff(gt.constant([1.0, 4.0, 9.0, 16.0])).numpy().tolist()
    [3.0, 5.0, 7.0]
    >>> gt.diff(gt.constant([1.0, 4.0, 9.0]), n=2, prepend=0.0).numpy().tolist()
    [2.0, 2.0]
    """
    from .creation import not_equal
    from .shape import broadcast_to, concatenate

    x = as_tensor(a)
    n = norm_size(n, "diff", "the order of the difference: a non-negative integer")
    if x.ndim == 0:
        raise ValueError("gt.diff: needs an input of at least one dimension, got a scalar")
    ax = norm_axis(axis, x.ndim, "diff")
    if n == 0:
        return snapshot(x)
    parts = []
    for extra in (prepend, None, append):
        if extra is None:
            parts.append(x)
        elif extra is not NOVALUE:
            e = const_like(extra, x)
            if e.ndim == 0:
                e = broadcast_to(e, x.shape[:ax] + (1,) + x.shape[ax + 1 :])
            parts.append(e)
    if len(parts) > 1:
        x = concatenate(parts, axis=ax)
    hi, lo = axis_index(ax, slice(1, None)), axis_index(ax, slice(None, -1))
    for _ in range(n):
        x = not_equal(x[hi], x[lo]) if x.dtype == np.bool_ else x[hi] - x[lo]
    return x
