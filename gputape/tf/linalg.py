"""``tf.linalg``: TensorFlow's names, argument orders and result orders over ``gt.linalg``.

Real float32/float64 only (``adjoint`` means transpose). ``name=`` is accepted and ignored.
The differences from numpy's spellings that matter: ``svd`` returns ``(s, u, v)`` with ``v``
*not* transposed (``a = u @ diag(s) @ transpose(v)``) and ``full_matrices=False`` by default;
``qr`` takes ``full_matrices`` instead of ``mode``; ``solve`` always takes a matrix
right-hand side; ``slogdet`` returns ``(sign, log_abs_determinant)``; ``norm`` follows
TensorFlow's ``ord``/``axis`` rules (below), not numpy's.

>>> import gputape.tf as tf
>>> s, u, v = tf.linalg.svd(tf.constant([[3.0, 0.0], [0.0, -4.0]]))
>>> s.numpy().tolist()
[4.0, 3.0]
"""

from __future__ import annotations

import math as _math
from typing import Any as _Any

import numpy as _np

from .. import linalg as _la
from .. import ops as _ops
from ..core import _errors
from ..core.tensor import Tensor as _Tensor
from ..core.tensor import as_tensor as _as_tensor
from ..devices import backend as _backend
from ..ops._util import norm_flag as _norm_flag
from ..ops._util import norm_real as _norm_real
from ..ops._util import norm_size as _norm_size

__all__ = [
    "adjoint",
    "band_part",
    "cholesky",
    "det",
    "diag",
    "diag_part",
    "eigh",
    "eigvalsh",
    "einsum",
    "eye",
    "inv",
    "logdet",
    "lstsq",
    "matmul",
    "matrix_transpose",
    "matvec",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "trace",
    "triangular_solve",
]

eye = _ops.eye
einsum = _ops.einsum


def _t(x: _Any) -> _Tensor:
    return _ops.swapaxes(x, -1, -2)


def matrix_transpose(a: _Any, name: str | None = None, conjugate: bool = False) -> _Tensor:
    """Transpose of the last two axes; with ``conjugate=True`` of a complex tensor, the conjugate transpose.

    >>> import gputape.tf as tf
    >>> tf.linalg.matrix_transpose(tf.ones((2, 3, 4))).shape
    (2, 4, 3)
    """
    return _adjoint(a) if conjugate else _t(a)


def _adjoint(x: _Any) -> _Tensor:
    """The conjugate transpose (the transpose for real dtypes)."""
    t = _t(x)
    return _ops.conj(t) if t.dtype.kind == "c" else t


def adjoint(matrix: _Any, name: str | None = None) -> _Tensor:
    """The conjugate transpose of the last two axes (``tf.linalg.adjoint``).

    >>> import gputape.tf as tf, numpy as np
    >>> tf.linalg.adjoint(tf.constant(np.array([[1 + 1j, 2j]]))).numpy().tolist()
    [[(1-1j)], [-2j]]
    """
    return _adjoint(matrix)


def matmul(
    a: _Any,
    b: _Any,
    transpose_a: bool = False,
    transpose_b: bool = False,
    adjoint_a: bool = False,
    adjoint_b: bool = False,
    name: str | None = None,
) -> _Tensor:
    """``tf.linalg.matmul`` (= ``tf.matmul``): matrix product, optionally transposing (``transpose_*``) or
    conjugate-transposing (``adjoint_*``) either operand.

    >>> import gputape.tf as tf
    >>> tf.linalg.matmul(tf.ones((2, 3)), tf.ones((2, 3)), transpose_b=True).numpy().tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """
    if adjoint_a:
        a = _adjoint(a)
    elif transpose_a:
        a = _t(a)
    if adjoint_b:
        b = _adjoint(b)
    elif transpose_b:
        b = _t(b)
    return _ops.matmul(a, b)


def matvec(a: _Any, b: _Any, transpose_a: bool = False, adjoint_a: bool = False, name: str | None = None) -> _Tensor:
    """Matrix times vector over the last axes: ``a @ b[..., None]`` without the trailing 1.

    >>> import gputape.tf as tf
    >>> tf.linalg.matvec(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([1.0, 1.0])).numpy().tolist()
    [3.0, 7.0]
    """
    a = _t(a) if transpose_a or adjoint_a else a
    return _ops.squeeze(_ops.matmul(a, _ops.expand_dims(b, -1)), -1)


def inv(input: _Any, adjoint: bool = False, name: str | None = None) -> _Tensor:
    """Inverse of each square matrix (of its transpose with ``adjoint=True``).

    >>> import gputape.tf as tf
    >>> tf.linalg.inv(tf.constant([[2.0, 0.0], [0.0, 4.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    return _la.inv(_t(input) if adjoint else input)


def solve(matrix: _Any, rhs: _Any, adjoint: bool = False, name: str | None = None) -> _Tensor:
    """Solve ``matrix @ x = rhs`` (``rhs`` is ``(..., M, K)``; ``adjoint=True`` solves with the transpose).

    >>> import gputape.tf as tf
    >>> tf.linalg.solve(tf.constant([[2.0, 0.0], [0.0, 4.0]]), tf.constant([[1.0], [1.0]])).numpy().tolist()
    [[0.5], [0.25]]
    """
    r = _as_tensor(rhs)
    if r.ndim < 2:
        raise ValueError(f"tf.linalg.solve: rhs must be a matrix (..., M, K), got shape {r.shape}; use rhs[:, None]")
    return _la.solve(_t(matrix) if adjoint else matrix, r)


def triangular_solve(matrix: _Any, rhs: _Any, lower: bool = True, adjoint: bool = False, name: str | None = None):
    """Solve ``matrix @ x = rhs`` reading only the lower (or upper) triangle of ``matrix``.

    A composition: ``solve(band_part(matrix), rhs)`` (the ignored triangle gets gradient 0).

    >>> import gputape.tf as tf
    >>> m = tf.constant([[2.0, 9.0], [1.0, 1.0]])
    >>> tf.linalg.triangular_solve(m, tf.constant([[2.0], [2.0]])).numpy().tolist()
    [[1.0], [1.0]]
    """
    tri = _la.band_part(matrix, None, 0) if lower else _la.band_part(matrix, 0, None)
    return solve(tri, rhs, adjoint=adjoint)


def band_part(input: _Any, num_lower: int, num_upper: int, name: str | None = None) -> _Tensor:
    """Keep ``num_lower`` subdiagonals and ``num_upper`` superdiagonals (negative: the whole triangle).

    >>> import gputape.tf as tf
    >>> tf.linalg.band_part(tf.ones((3, 3)), 0, -1).numpy().tolist()
    [[1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    """
    lo, up = (_norm_size(v, "band_part", "a number of diagonals", None) for v in (num_lower, num_upper))
    return _la.band_part(input, None if lo < 0 else lo, None if up < 0 else up)


def _eye_for(x: _Tensor, m: int, n: int) -> _Tensor:
    """An identity constant on ``x``'s device, in its dtype."""
    return _as_tensor(_backend.xp_of(x._data).eye(m, n, dtype=x.dtype))


def diag_part(input: _Any, name: str | None = None, k: int = 0, padding_value: _Any = 0, align: str = "RIGHT_LEFT"):
    """The main diagonal of each matrix, shape ``(..., min(M, N))`` (only ``k=0``).

    >>> import gputape.tf as tf
    >>> tf.linalg.diag_part(tf.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().tolist()
    [1.0, 4.0]
    """
    if k != 0:
        raise NotImplementedError("tf.linalg.diag_part: only k=0 (the main diagonal) is supported")
    x = _as_tensor(input)
    m, n = x.shape[-2:]
    d = min(m, n)
    sq = x[..., :d, :d] if (m, n) != (d, d) else x
    return _ops.sum(sq * _eye_for(x, d, d), -1)


def diag(diagonal: _Any, name: str | None = None, k: int = 0, num_rows: int = -1, num_cols: int = -1, **kwargs: _Any):
    """Square matrices with ``diagonal`` (shape ``(..., N)``) on the main diagonal (only ``k=0``).

    >>> import gputape.tf as tf
    >>> tf.linalg.diag(tf.constant([1.0, 2.0])).numpy().tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    if k != 0 or num_rows != -1 or num_cols != -1:
        raise NotImplementedError("tf.linalg.diag: only k=0 and square results are supported")
    d = _as_tensor(diagonal)
    n = d.shape[-1]
    return _ops.expand_dims(d, -1) * _eye_for(d, n, n)


def trace(x: _Any, name: str | None = None) -> _Tensor:
    """Sum of each matrix's main diagonal.

    >>> import gputape.tf as tf
    >>> float(tf.linalg.trace(tf.constant([[1.0, 2.0], [3.0, 4.0]])))
    5.0
    """
    return _ops.sum(diag_part(x), -1)


def det(input: _Any, name: str | None = None) -> _Tensor:
    """Determinant of each square matrix.

    >>> import gputape.tf as tf
    >>> float(tf.linalg.det(tf.constant([[2.0, 0.0], [0.0, 3.0]])))
    6.0
    """
    return _la.det(input)


def slogdet(input: _Any, name: str | None = None) -> tuple[_Tensor, _Tensor]:
    """``(sign, log_abs_determinant)`` of each square matrix.

    >>> import gputape.tf as tf
    >>> s, l = tf.linalg.slogdet(tf.constant([[-2.0, 0.0], [0.0, 1.0]], tf.float64))
    >>> float(s), round(float(l), 6)
    (-1.0, 0.693147)
    """
    sign, logabs = _la.slogdet(input)
    return sign, logabs


def logdet(matrix: _Any, name: str | None = None) -> _Tensor:
    """Log determinant of a symmetric positive-definite matrix: ``2 * sum(log(diag(cholesky(matrix))))``.

    >>> import gputape.tf as tf
    >>> round(float(tf.linalg.logdet(tf.constant([[4.0, 0.0], [0.0, 1.0]], tf.float64))), 6)
    1.386294
    """
    # (TensorFlow's: the log of the real part of the diagonal, so a Hermitian matrix gives a real result)
    return 2.0 * _ops.sum(_ops.log(_ops.real(diag_part(_la.cholesky(matrix)))), -1)


def cholesky(input: _Any, name: str | None = None) -> _Tensor:
    """Lower Cholesky factor of each symmetric positive-definite matrix (see ``gt.linalg.cholesky``).

    >>> import gputape.tf as tf
    >>> tf.linalg.cholesky(tf.constant([[4.0, 2.0], [2.0, 2.0]])).numpy().tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    """
    return _la.cholesky(input)


def eigh(tensor: _Any, name: str | None = None) -> tuple[_Tensor, _Tensor]:
    """``(e, v)``: ascending eigenvalues and eigenvectors (columns) of symmetric matrices.

    >>> import gputape.tf as tf
    >>> e, v = tf.linalg.eigh(tf.constant([[2.0, 1.0], [1.0, 2.0]]))
    >>> e.numpy().tolist()
    [1.0, 3.0]
    """
    e, v = _la.eigh(tensor)
    return e, v


def eigvalsh(tensor: _Any, name: str | None = None) -> _Tensor:
    """Ascending eigenvalues of symmetric matrices.

    >>> import gputape.tf as tf
    >>> tf.linalg.eigvalsh(tf.constant([[2.0, 0.0], [0.0, 1.0]])).numpy().tolist()
    [1.0, 2.0]
    """
    return _la.eigvalsh(tensor)


def svd(tensor: _Any, full_matrices: bool = False, compute_uv: bool = True, name: str | None = None) -> _Any:
    """TensorFlow's SVD: ``s`` alone, or ``(s, u, v)`` with ``tensor = u @ diag(s) @ transpose(v)``.

    ``v`` is numpy's ``Vh`` transposed. Gradients as ``gt.linalg.svd``.

    >>> import gputape.tf as tf
    >>> s, u, v = tf.linalg.svd(tf.constant([[0.0, 2.0], [1.0, 0.0]]))
    >>> s.numpy().tolist(), abs(v.numpy()).tolist()
    ([2.0, 1.0], [[0.0, 1.0], [1.0, 0.0]])
    """
    if not _norm_flag(compute_uv, "svd"):
        return _la.svd(tensor, compute_uv=False)
    u, s, vh = _la.svd(tensor, full_matrices=_norm_flag(full_matrices, "svd"))
    return s, u, _t(vh)


def qr(input: _Any, full_matrices: bool = False, name: str | None = None) -> tuple[_Tensor, _Tensor]:
    """``(q, r)``; ``full_matrices=True`` is numpy's ``mode='complete'``.

    >>> import gputape.tf as tf
    >>> q, r = tf.linalg.qr(tf.ones((3, 2)))
    >>> q.shape, r.shape
    ((3, 2), (2, 2))
    """
    q, r = _la.qr(input, mode="complete" if _norm_flag(full_matrices, "qr") else "reduced")
    return q, r


def pinv(a: _Any, rcond: float | None = None, validate_args: bool = False, name: str | None = None) -> _Tensor:
    """Pseudo-inverse; TensorFlow's default cutoff ``rcond = 10 * max(M, N) * eps``.

    >>> import gputape.tf as tf
    >>> tf.linalg.pinv(tf.constant([[2.0, 0.0], [0.0, 0.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    t = _as_tensor(a)
    return _la.pinv(t, rcond=_default_rcond(t) if rcond is None else rcond)


def _default_rcond(t: _Tensor) -> float:
    """TensorFlow's pinv cutoff: ``10 * max(M, N) * eps``."""
    return 10.0 * max(t.shape[-2:]) * float(_np.finfo(t.dtype).eps)


def lstsq(matrix: _Any, rhs: _Any, l2_regularizer: float = 0.0, fast: bool = True, name: str | None = None):
    """Least squares for each matrix: ``argmin ||matrix @ x - rhs||^2 + l2_regularizer ||x||^2``.

    A composition: ``pinv(matrix) @ rhs`` without regularisation; with it, the regularised
    normal equations (TensorFlow's ``fast`` path). ``rhs`` is ``(..., M, K)``;
    ``l2_regularizer`` must be a finite number >= 0.

    >>> import gputape.tf as tf
    >>> a = tf.constant([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], tf.float64)
    >>> tf.linalg.lstsq(a, tf.constant([[1.0], [1.0], [3.0]], tf.float64)).numpy().round(6).tolist()
    [[1.333333], [1.333333]]
    """
    a, b = _as_tensor(matrix), _as_tensor(rhs)
    if b.ndim < 2:
        raise ValueError(f"tf.linalg.lstsq: rhs must be a matrix (..., M, K), got shape {b.shape}")
    lam = _norm_real(l2_regularizer, "lstsq", "l2_regularizer", finite=True)
    if lam < 0:
        raise _errors.argument_error(l2_regularizer, "must not be negative", arg="l2_regularizer", cls=ValueError)
    if lam == 0.0:
        return _ops.matmul(_la.pinv(a, rcond=_default_rcond(a)), b)
    m, n = a.shape[-2:]
    if m >= n:
        return _la.solve(_ops.matmul(_t(a), a) + lam * _eye_for(a, n, n), _ops.matmul(_t(a), b))
    return _ops.matmul(_t(a), _la.solve(_ops.matmul(a, _t(a)) + lam * _eye_for(a, m, m), b))


_VECTOR = {"euclidean": 2, 1: 1, 2: 2, _math.inf: _math.inf}
_MATRIX = {"euclidean": "fro", "fro": "fro", 1: 1, 2: 2, _math.inf: _math.inf}


def norm(tensor: _Any, ord: _Any = "euclidean", axis: _Any = None, keepdims: _Any = None, name: str | None = None):
    """TensorFlow's ``norm``: ``axis=None`` is a vector norm of all entries (any rank); an int
    axis a vector norm (``'euclidean'``, ``1``, ``2``, ``inf`` or any ``p > 0``); a pair of
    axes a matrix norm (``'euclidean'``/``'fro'``, ``1``, ``2`` (spectral), ``inf``).

    The gradient at 0 is 0. Other orders raise ``ValueError``, as in TensorFlow.

    >>> import gputape.tf as tf
    >>> float(tf.linalg.norm(tf.constant([[3.0, 0.0], [0.0, 4.0]])))
    5.0
    >>> float(tf.linalg.norm(tf.constant([[3.0, 0.0], [0.0, 4.0]]), ord=2, axis=[0, 1]))
    4.0
    """
    x = _as_tensor(tensor)
    keep = _norm_flag(keepdims, "norm")
    if isinstance(axis, _Tensor):
        axis = axis.numpy().tolist()
    if isinstance(axis, (list, tuple)) and len(axis) == 2:
        ax = tuple(axis)
        if ord not in _MATRIX or isinstance(ord, bool):
            raise ValueError(
                f"tf.linalg.norm: ord must be one of 'euclidean', 'fro', 1, 2, inf for matrices, got {ord!r}"
            )
        return _la.norm(x, _MATRIX[ord], axis=ax, keepdims=keep)
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise ValueError(f"tf.linalg.norm: axis must be None, an int or a pair of ints, got {axis!r}")
        axis = axis[0]
    if ord in _VECTOR and not isinstance(ord, bool):
        p = _VECTOR[ord]
    elif isinstance(ord, (int, float)) and not isinstance(ord, bool) and ord > 0:
        p = float(ord)
    else:
        raise ValueError(f"tf.linalg.norm: ord must be 'euclidean', 1, 2, inf or a number > 0 for vectors, got {ord!r}")
    if axis is None:
        out = _la.norm(_ops.reshape(x, (-1,)), p)
        return _ops.reshape(out, (1,) * x.ndim) if keep else out
    return _la.norm(x, p, axis=axis, keepdims=keep)


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
