"""Products and diagonals: outer tensordot inner kron cross, diagonal trace diag triu tril.

All are compositions of existing primitives, so their gradients (to any order)
come from those: products are reshapes, transposes, broadcasts, ``multiply`` and
``matmul``; ``diagonal`` is an integer-array index (its VJP scatters into the
diagonal), ``diag`` of a vector is the matching ``scatter``, ``triu``/``tril`` a
``where`` with a constant mask (exact zeros where masked, even next to inf/NaN).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core import _errors
from ..core.tensor import Tensor, as_tensor
from ._compat import check_out, on_device
from ._util import is_index, norm_axis, norm_axis_seq, norm_dtype, norm_list, norm_size
from .elementwise import cast, multiply, subtract, where
from .matmul import matmul
from .shape import getitem, moveaxis, pad, reshape, scatter, stack, transpose


def outer(a: Any, b: Any, out: None = None) -> Tensor:
    """``out[i, j] = a.ravel()[i] * b.ravel()[j]``.

    >>> import gputape as gt
    >>> gt.outer(gt.constant([1.0, 2.0]), gt.constant([1.0, 10.0])).numpy().tolist()
    [[1.0, 10.0], [2.0, 20.0]]
    """
    check_out("outer", out)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a: Any, b: Any, axes: Any = 2) -> Tensor:
    """Sum products over the last ``axes`` axes of ``a`` and the first of ``b``, or over
    the axis lists ``axes = (axes_a, axes_b)``: numpy's algorithm (transpose, reshape, one matmul).

    >>> import gputape as gt
    >>> gt.tensordot(gt.ones((2, 3, 4)), gt.ones((3, 4, 5)), axes=2).shape
    (2, 5)
    >>> gt.tensordot(gt.ones((2, 3)), gt.ones((2, 4)), axes=([0], [0])).shape
    (3, 4)
    """
    x, y = as_tensor(a), as_tensor(b)
    if is_index(axes):
        n = norm_size(axes, "tensordot", "a number of axes, or a pair of axis lists")
        if n > min(x.ndim, y.ndim):
            raise _errors.argument_error(
                axes, f"sums more axes than inputs of shapes {x.shape} and {y.shape} have", cls=ValueError
            )
        ax_a, ax_b = list(range(x.ndim - n, x.ndim)), list(range(n))
    else:
        pair = norm_list(axes, "tensordot", "an int or a pair of axis lists")
        if len(pair) != 2:
            raise _errors.argument_error(axes, "is not an int or a pair of axis lists", cls=ValueError)
        ax_a = list(norm_axis_seq(pair[0], x.ndim, "tensordot"))
        ax_b = list(norm_axis_seq(pair[1], y.ndim, "tensordot"))
    if len(ax_a) != len(ax_b):
        raise ValueError(f"gt.tensordot: {len(ax_a)} axes of a summed against {len(ax_b)} axes of b")
    for i, j in zip(ax_a, ax_b):
        if x.shape[i] != y.shape[j]:
            raise ValueError(
                f"gt.tensordot: shape mismatch for the sum: axis {i} of a (shape {x.shape}) has length "
                f"{x.shape[i]}, axis {j} of b (shape {y.shape}) has length {y.shape[j]}"
            )
    keep_a = [k for k in range(x.ndim) if k not in ax_a]
    keep_b = [k for k in range(y.ndim) if k not in ax_b]
    k = math.prod(x.shape[i] for i in ax_a)
    xa = reshape(transpose(x, keep_a + ax_a), (math.prod(x.shape[i] for i in keep_a), k))
    yb = reshape(transpose(y, ax_b + keep_b), (k, math.prod(y.shape[i] for i in keep_b)))
    return reshape(matmul(xa, yb), tuple(x.shape[i] for i in keep_a) + tuple(y.shape[i] for i in keep_b))


def inner(a: Any, b: Any, /) -> Tensor:
    """Sum of products over the last axes (``a * b`` when either is a scalar).

    >>> import gputape as gt
    >>> gt.inner(gt.constant([1.0, 2.0]), gt.constant([[3.0, 4.0], [5.0, 6.0]])).numpy().tolist()
    [11.0, 17.0]
    """
    x, y = as_tensor(a), as_tensor(b)
    if x.ndim == 0 or y.ndim == 0:
        return multiply(x, y)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"gt.inner: last dimensions differ: shapes {x.shape} and {y.shape}")
    return tensordot(x, y, ([-1], [-1]))


def kron(a: Any, b: Any) -> Tensor:
    """Kronecker product: blocks ``a[i, j] * b`` (ranks equalised by leading 1s, as numpy).

    >>> import gputape as gt
    >>> gt.kron(gt.constant([1.0, 10.0]), gt.constant([1.0, 2.0])).numpy().tolist()
    [1.0, 2.0, 10.0, 20.0]
    """
    x, y = as_tensor(a), as_tensor(b)
    if y.ndim == 0:  # (a scalar a is raised to b's rank, as numpy does)
        return multiply(x, y)
    nd = max(x.ndim, y.ndim)
    sa = (1,) * (nd - x.ndim) + tuple(x.shape)
    sb = (1,) * (nd - y.ndim) + tuple(y.shape)
    xa = reshape(x, tuple(v for s in sa for v in (s, 1)))
    yb = reshape(y, tuple(v for s in sb for v in (1, s)))
    return reshape(multiply(xa, yb), tuple(p * q for p, q in zip(sa, sb)))


def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: Any = None) -> Tensor:
    """Cross product of 3-vectors along ``axisa``/``axisb`` (``axis`` sets all three), broadcasting
    the others; 2-vectors count as having z = 0 (two 2-vectors give the z component only, as numpy).

    >>> import gputape as gt
    >>> gt.cross(gt.constant([1.0, 0.0, 0.0]), gt.constant([0.0, 1.0, 0.0])).numpy().tolist()
    [0.0, 0.0, 1.0]
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = as_tensor(a), as_tensor(b)
    x = moveaxis(x, norm_axis(axisa, x.ndim, "cross"), -1) if x.ndim else x
    y = moveaxis(y, norm_axis(axisb, y.ndim, "cross"), -1) if y.ndim else y
    da, db = (x.shape[-1] if x.ndim else 0), (y.shape[-1] if y.ndim else 0)
    if da not in (2, 3) or db not in (2, 3):
        raise ValueError(
            f"gt.cross: the vector axes must have length 2 or 3, got {da} and {db} (shapes {x.shape}, {y.shape})"
        )

    def comp(v: Any, i: int) -> Any:
        return v[..., i]

    if da == 2 and db == 2:
        return subtract(multiply(comp(x, 0), comp(y, 1)), multiply(comp(x, 1), comp(y, 0)))
    if da == 2:
        x = pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 1)])
    if db == 2:
        y = pad(y, [(0, 0)] * (y.ndim - 1) + [(0, 1)])
    x0, x1, x2 = (comp(x, i) for i in range(3))
    y0, y1, y2 = (comp(y, i) for i in range(3))
    c = stack([x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0], axis=-1)
    return moveaxis(c, -1, norm_axis(axisc, c.ndim, "cross"))


def _diagonal_index(n1: int, n2: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    if offset >= 0:
        k = max(0, min(n1, n2 - offset))
        return np.arange(k), np.arange(k) + offset
    k = max(0, min(n1 + offset, n2))
    return np.arange(k) - offset, np.arange(k)


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The ``offset`` diagonal of the 2-d slices in ``(axis1, axis2)``, appended as the last axis.

    A composition: an integer-array index (its gradient scatters into the diagonal).

    >>> import gputape as gt
    >>> gt.diagonal(gt.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().tolist()
    [1.0, 4.0]
    >>> gt.diagonal(gt.constant([[1.0, 2.0], [3.0, 4.0]]), offset=1).numpy().tolist()
    [2.0]
    """
    x = as_tensor(a)
    if x.ndim < 2:
        raise ValueError(f"gt.diagonal: needs at least 2 dimensions, got shape {x.shape}")
    a1, a2 = norm_axis(axis1, x.ndim, "diagonal"), norm_axis(axis2, x.ndim, "diagonal")
    if a1 == a2:
        raise ValueError(f"gt.diagonal: axis1 and axis2 cannot be the same axis ({axis1}, {axis2})")
    rest = [i for i in range(x.ndim) if i not in (a1, a2)]
    x = transpose(x, rest + [a1, a2])
    rows, cols = _diagonal_index(x.shape[-2], x.shape[-1], norm_size(offset, "diagonal", "a diagonal offset", None))
    return getitem(x, (Ellipsis, on_device(x, rows), on_device(x, cols)), adv=False)


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: None = None) -> Tensor:
    """Sum along the ``offset`` diagonal (``diagonal(...).sum(-1)``, numpy's dtype rules).

    >>> import gputape as gt
    >>> float(gt.trace(gt.constant([[1.0, 2.0], [3.0, 4.0]])))
    5.0
    """
    from .reduce import sum

    check_out("trace", out)
    d = diagonal(a, offset, axis1, axis2)
    if dtype is not None and d.dtype != norm_dtype(dtype, "trace"):
        d = cast(d, dtype)
    return sum(d, axis=-1)


def diag(v: Any, k: int = 0) -> Tensor:
    """A 1-d input: the square matrix with ``v`` on diagonal ``k``; a 2-d input: its diagonal ``k``.

    A composition: ``scatter`` into zeros, or ``diagonal``.

    >>> import gputape as gt
    >>> gt.diag(gt.constant([1.0, 2.0])).numpy().tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    x = as_tensor(v)
    k = norm_size(k, "diag", "a diagonal offset", None)
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"gt.diag: input must be 1-d or 2-d, got shape {x.shape}")
    n = x.shape[0] + abs(k)
    i = np.arange(x.shape[0])
    rows, cols = (i, i + k) if k >= 0 else (i - k, i)
    return scatter(x, (on_device(x, rows), on_device(x, cols)), (n, n), adv=False)


def _triangle(op: str, m: Any, k: int, lower: bool) -> Any:
    x = as_tensor(m)
    if x.ndim == 0:
        raise ValueError(f"gt.{op}: needs at least 1 dimension, got a scalar")
    n, c = (x.shape[-2], x.shape[-1]) if x.ndim >= 2 else (x.shape[-1], x.shape[-1])
    k = norm_size(k, op, "a diagonal offset", None)
    keep = np.tri(n, c, k, dtype=bool) if lower else ~np.tri(n, c, k - 1, dtype=bool)
    return where(on_device(x, keep), x, on_device(x, np.zeros((), x.dtype)))


def triu(m: Any, k: int = 0) -> Tensor:
    """Zero the entries below diagonal ``k`` of the last two axes (a 1-d input is tiled to a square).

    >>> import gputape as gt
    >>> gt.triu(gt.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().tolist()
    [[1.0, 2.0], [0.0, 4.0]]
    """
    return _triangle("triu", m, k, lower=False)


def tril(m: Any, k: int = 0) -> Tensor:
    """Zero the entries above diagonal ``k`` of the last two axes (a 1-d input is tiled to a square).

    >>> import gputape as gt
    >>> gt.tril(gt.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().tolist()
    [[1.0, 0.0], [3.0, 4.0]]
    """
    return _triangle("tril", m, k, lower=True)
