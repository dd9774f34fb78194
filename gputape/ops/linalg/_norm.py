"""``norm`` (numpy's ``ord``/``axis``/``keepdims`` rules) and ``matrix_power``.

Vector p-norms (``ord`` finite and nonzero, and the Frobenius norm) are one primitive whose
gradient is 0 where the norm is 0 (the subgradient TensorFlow and PyTorch pick; the
composition ``sqrt(sum(x**2))`` would give NaN there). Everything else is a composition:
``inf``/``-inf`` of ``max``/``min`` of ``abs`` (ties share the gradient as ``gt.max`` does,
``abs`` has gradient 0 at 0), ``ord=0`` a count with no gradient, the matrix 1/inf norms of
sums and maxima, and the spectral (``2``/``-2``) and nuclear norms of singular values (whose
gradient stays finite at repeated singular values).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import ops
from ...core import _errors
from ...core.dispatch import primitive
from ...core.tensor import Tensor, constant
from ...devices import backend
from .._util import norm_axis_seq, norm_flag, norm_size
from ._core import _inv, matrix_arg, number_arg, run
from ._spectral import svd


@primitive("linalg.vector_norm", complex="direct", save=(0,), save_out=True)
def _vector_norm(xp, x, p, axis, keepdims):
    if x.dtype.kind == "c":
        x = xp.abs(x)  # (the norm of complex entries is the norm of their moduli)
    if p == 2:
        return xp.sqrt(xp.sum(x * x, axis=axis, keepdims=keepdims))
    if p == 1:
        return xp.sum(xp.abs(x), axis=axis, keepdims=keepdims)
    return xp.sum(xp.abs(x) ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


@_vector_norm.defvjp
def _(F, g, needs, nb, node, x, y):
    p, axis, keepdims = node.params["p"], node.params["axis"], node.params["keepdims"]
    kept = tuple(1 if i in axis else s for i, s in enumerate(x.shape))
    if not keepdims:  # put the reduced axes back (after any jacobian batch axes in front)
        g = F.reshape(g, g.shape[:nb] + kept)
        y = F.reshape(y, kept)
    if x.dtype.kind == "c":
        # d|z| is Re(conj(z/|z|) dz): the sign of a complex entry is z/|z| (0 at 0)
        ax = abs(x)
        sgn = x / F.where(ax == 0, 1, ax)
    else:
        sgn = F.sign(x)
    if p == 1:
        return (g * sgn,)
    safe = F.where(y == 0, 1, y)  # the norm is 0 only where x is 0: gradient 0 there
    if p == 2:
        return (g * x / safe,)
    return (g * sgn * abs(x) ** (p - 1) / safe ** (p - 1),)


def _vector_p(x: Tensor, p: float, axis: tuple[int, ...], keepdims: bool) -> Tensor:
    return run(_vector_norm, "norm", (x,), {"p": p, "axis": axis, "keepdims": keepdims})


def _restore(ret: Tensor, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Tensor:
    if not keepdims:
        return ret
    return ops.reshape(ret, tuple(1 if i in axes else s for i, s in enumerate(shape)))


def _svals(x: Tensor, row: int, col: int) -> Tensor:
    perm = [i for i in range(x.ndim) if i not in (row, col)] + [row, col]
    return svd(ops.transpose(x, perm), compute_uv=False)


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Vector or matrix norm with numpy's ``linalg.norm`` rules for ``ord``, ``axis``, ``keepdims``.

    Vector norms (``axis`` an int, or a 1-D input): ``None``/``2``, any real ``p``, ``inf``,
    ``-inf``, ``0`` (the count of nonzeros, no gradient). Matrix norms (``axis`` a pair, or a
    2-D input with ``ord`` given): ``'fro'``, ``'nuc'``, ``1``, ``-1``, ``2``, ``-2``,
    ``inf``, ``-inf``. ``ord=None, axis=None`` is the 2-norm of all entries of any rank.
    The gradient of a p-norm at 0 is 0 (TensorFlow's and PyTorch's choice); for ``p < 1``
    it exists only where no entry is 0. Integer input is converted to float64, as numpy does.
    Complex input gives the (real) norm of the entries' moduli, with numpy's real dtype; its
    gradient is TensorFlow's complex one (``z / |z|`` times the real factor, 0 at 0).

    >>> import gputape as gt
    >>> float(gt.linalg.norm(gt.constant([3.0, 4.0]))), float(gt.linalg.norm(gt.constant([[1.0, -2.0]]), 1))
    (5.0, 2.0)
    """
    t = number_arg(x, "norm")
    keepdims = norm_flag(keepdims, "linalg.norm")
    if t.dtype.kind not in "fc":
        t = ops.cast(t, np.float64)
    nd = t.ndim
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            return _vector_p(t, 2, tuple(range(nd)), keepdims)
        axes = tuple(range(nd))
    else:
        if not isinstance(axis, tuple) and not hasattr(axis, "__index__"):
            raise _errors.argument_error(
                axis, "is not an axis", op="linalg.norm", cls=TypeError, hint="pass None, an int or a tuple of ints"
            )
        axes = norm_axis_seq(axis, nd, "linalg.norm")
    if len(axes) == 1:
        return _vector_norm_ord(t, ord, axes, keepdims)
    if len(axes) == 2:
        if axes[0] == axes[1]:
            raise _errors.argument_error(axis, "repeats an axis (duplicate axes)", op="linalg.norm", cls=ValueError)
        return _restore(_matrix_norm_ord(t, ord, axes), t.shape, axes, keepdims)
    raise ValueError(
        f"gt.linalg.norm: a norm over {len(axes)} axes (input of shape {t.shape}) is not defined for ord={ord!r}; "
        "pass axis=int (vector norm), a pair (matrix norm), or ord=None for the norm of all entries"
    )


def _vector_norm_ord(t: Tensor, ord: Any, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    ax = axes[0]
    if isinstance(ord, str):
        raise ValueError(f"gt.linalg.norm: invalid norm order {ord!r} for vectors")
    if ord is None or ord == 2:
        return _vector_p(t, 2, axes, keepdims)
    if ord == math.inf:
        return ops.max(ops.abs(t), ax, keepdims)
    if ord == -math.inf:
        return ops.min(ops.abs(t), ax, keepdims)
    if ord == 0:
        return ops.sum(ops.cast(ops.not_equal(t, 0), np.finfo(t.dtype).dtype), ax, keepdims)
    return _vector_p(t, float(ord), axes, keepdims)


def _matrix_norm_ord(t: Tensor, ord: Any, axes: tuple[int, ...]) -> Tensor:
    row, col = axes
    if ord in (None, "fro", "f"):
        return _vector_p(t, 2, tuple(sorted(axes)), False)
    if ord == "nuc":
        return ops.sum(_svals(t, row, col), -1)
    if ord in (2, -2):
        return (ops.max if ord == 2 else ops.min)(_svals(t, row, col), -1)
    if ord in (1, -1):  # largest / smallest column sum
        red = ops.max if ord == 1 else ops.min
        return red(ops.sum(ops.abs(t), row), col - 1 if col > row else col)
    if ord in (math.inf, -math.inf):  # largest / smallest row sum
        red = ops.max if ord == math.inf else ops.min
        return red(ops.sum(ops.abs(t), col), row - 1 if row > col else row)
    raise ValueError(
        f"gt.linalg.norm: invalid norm order {ord!r} for matrices; use 'fro', 'nuc', 1, -1, 2, -2, inf or -inf"
    )


def matrix_power(a: Any, n: int) -> Tensor:
    """``a`` raised to the integer power ``n`` by repeated squaring (numpy's ``matrix_power``).

    A composition of ``matmul`` (and ``inv`` for ``n < 0``); ``n = 0`` gives the identity,
    a constant (no gradient).

    >>> import gputape as gt
    >>> gt.linalg.matrix_power(gt.constant([[1.0, 1.0], [0.0, 1.0]]), 3).numpy().tolist()
    [[1.0, 3.0], [0.0, 1.0]]
    """
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"gt.linalg.matrix_power: the exponent must be an integer, got {n!r}")
    n = norm_size(n, "linalg.matrix_power", "the exponent", None)
    t = matrix_arg(a, "matrix_power")
    if n == 0:
        xp = backend.xp_of(t._data)
        return constant(xp.broadcast_to(xp.eye(t.shape[-1], dtype=t.dtype), t.shape).copy())
    if n < 0:
        t = run(_inv, "matrix_power", (t,))
        n = -n
    result = None
    z = t
    while True:
        if n & 1:
            result = z if result is None else ops.matmul(result, z)
        n >>= 1
        if not n:
            return result
        z = ops.matmul(z, z)
