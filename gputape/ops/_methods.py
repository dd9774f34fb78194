"""Tensor methods with numpy's ``ndarray`` signatures (``t.sum(axis, dtype, out, keepdims)``), installed by ``ops``.

They are the methods numpy arrays have for which gputape has an op; each forwards to the public
function, so gradients and errors are the function's. ``out=`` is accepted when None and refused
otherwise (tensors are immutable). ndarray's in-place methods (``sort``, ``partition``, ``fill``,
``resize``) have no tensor counterpart: use ``gt.sort(t)`` and friends.
"""

from __future__ import annotations

from typing import Any

from ..core.tensor import Tensor, _tolist, read_value
from . import aliases as _aliases
from . import creation as _creation
from . import elementwise as _elementwise
from . import matmul as _matmul
from . import reduce as _reduce
from . import scan as _scan
from . import shape as _shape
from ._compat import check_out

_sum, _mean, _max, _min = _reduce.sum, _reduce.mean, _reduce.max, _reduce.min  # the hot ones: no lookup


def sum(self: Tensor, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Tensor:
    """numpy's ``ndarray.sum``.

    >>> import gputape as gt
    >>> gt.constant([[1, 2], [3, 4]]).sum(0, "float64").numpy().tolist()
    [4.0, 6.0]
    """
    return _sum(self, axis, keepdims, dtype=dtype, out=out)


def mean(self: Tensor, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Tensor:
    """numpy's ``ndarray.mean``.

    >>> import gputape as gt
    >>> gt.constant([[1.0, 2.0], [3.0, 4.0]]).mean(axis=1, keepdims=True).shape
    (2, 1)
    """
    return _mean(self, axis, keepdims, dtype=dtype, out=out)


def prod(self: Tensor, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Tensor:
    """numpy's ``ndarray.prod``.

    >>> import gputape as gt
    >>> gt.constant([1.0, 2.0, 3.0]).prod().numpy().item()
    6.0
    """
    return _reduce.prod(self, axis, keepdims, dtype=dtype, out=out)


def max(self: Tensor, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor:
    """numpy's ``ndarray.max``.

    >>> import gputape as gt
    >>> gt.constant([[1.0, 5.0], [3.0, 4.0]]).max(1).numpy().tolist()
    [5.0, 4.0]
    """
    return _max(self, axis, keepdims, out=out)


def min(self: Tensor, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor:
    """numpy's ``ndarray.min``.

    >>> import gputape as gt
    >>> gt.constant([[1.0, 5.0], [3.0, 4.0]]).min(1).numpy().tolist()
    [1.0, 3.0]
    """
    return _min(self, axis, keepdims, out=out)


def std(
    self: Tensor, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0, keepdims: bool = False
) -> Tensor:
    """numpy's ``ndarray.std``.

    >>> import gputape as gt
    >>> gt.constant([1.0, 3.0]).std().numpy().item()
    1.0
    """
    return _reduce.std(self, axis, keepdims, ddof, dtype=dtype, out=out)


def var(
    self: Tensor, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0, keepdims: bool = False
) -> Tensor:
    """numpy's ``ndarray.var``.

    >>> import gputape as gt
    >>> gt.constant([1.0, 3.0]).var(ddof=1).numpy().item()
    2.0
    """
    return _reduce.var(self, axis, keepdims, ddof, dtype=dtype, out=out)


def _arg(op: str, self: Tensor, axis: Any, out: Any, keepdims: bool) -> Tensor:
    check_out(op, out)
    i = getattr(_creation, op)(self, axis)
    if not keepdims:
        return i
    if axis is None:
        return _shape.reshape(i, (1,) * self.ndim)
    return _shape.expand_dims(i, axis)


def argmax(self: Tensor, axis: Any = None, out: None = None, *, keepdims: bool = False) -> Tensor:
    """numpy's ``ndarray.argmax`` (no gradient).

    >>> import gputape as gt
    >>> gt.constant([[1.0, 5.0], [3.0, 4.0]]).argmax(1, keepdims=True).numpy().tolist()
    [[1], [1]]
    """
    return _arg("argmax", self, axis, out, keepdims)


def argmin(self: Tensor, axis: Any = None, out: None = None, *, keepdims: bool = False) -> Tensor:
    """numpy's ``ndarray.argmin`` (no gradient).

    >>> import gputape as gt
    >>> gt.constant([[1.0, 5.0], [3.0, 4.0]]).argmin().numpy().item()
    0
    """
    return _arg("argmin", self, axis, out, keepdims)


def cumsum(self: Tensor, axis: Any = None, dtype: Any = None, out: None = None) -> Tensor:
    """numpy's ``ndarray.cumsum``.

    >>> import gputape as gt
    >>> gt.constant([1.0, 2.0, 3.0]).cumsum().numpy().tolist()
    [1.0, 3.0, 6.0]
    """
    return _scan.cumsum(self, axis, dtype, out)


def cumprod(self: Tensor, axis: Any = None, dtype: Any = None, out: None = None) -> Tensor:
    """numpy's ``ndarray.cumprod``.

    >>> import gputape as gt
    >>> gt.constant([1.0, 2.0, 3.0]).cumprod().numpy().tolist()
    [1.0, 2.0, 6.0]
    """
    return _scan.cumprod(self, axis, dtype, out)


def clip(
    self: Tensor, min: Any = None, max: Any = None, out: None = None, *, a_min: Any = None, a_max: Any = None
) -> Tensor:
    """numpy's ``ndarray.clip`` (bounds as ``min``/``max`` or numpy 1's ``a_min``/``a_max``).

    >>> import gputape as gt
    >>> gt.constant([-2.0, 0.5, 3.0]).clip(-1.0, 1.0).numpy().tolist()
    [-1.0, 0.5, 1.0]
    """
    return _elementwise.clip(self, a_min, a_max, out, min=min, max=max)


def round(self: Tensor, decimals: int = 0, out: None = None) -> Tensor:
    """numpy's ``ndarray.round``: :func:`gputape.around` (zero gradient).

    >>> import gputape as gt
    >>> gt.constant([1.25, 2.5], "float64").round(1).numpy().tolist()
    [1.2, 2.5]
    """
    return _aliases.around(self, decimals, out)


def dot(self: Tensor, b: Any, out: None = None) -> Tensor:
    """numpy's ``ndarray.dot``.

    >>> import gputape as gt
    >>> gt.constant([1.0, 2.0]).dot(gt.constant([3.0, 4.0])).numpy().item()
    11.0
    """
    check_out("dot", out)
    return _matmul.dot(self, b)


def take(self: Tensor, indices: Any, axis: Any = None, out: None = None, mode: str = "raise") -> Tensor:
    """numpy's ``ndarray.take`` (``mode='raise'`` only: an index out of range is an error).

    >>> import gputape as gt
    >>> gt.constant([5.0, 6.0, 7.0]).take([2, 0]).numpy().tolist()
    [7.0, 5.0]
    """
    check_out("take", out)
    if mode != "raise":
        raise ValueError(f"Tensor.take: mode={mode!r} is not supported; only 'raise' (clip or wrap the indices first)")
    return _shape.take(self, indices, axis)


def ravel(self: Tensor, order: str = "C") -> Tensor:
    """numpy's ``ndarray.ravel``.

    >>> import gputape as gt
    >>> gt.constant([[1.0, 2.0], [3.0, 4.0]]).ravel("F").numpy().tolist()
    [1.0, 3.0, 2.0, 4.0]
    """
    return _shape.ravel(self, order)


flatten = ravel  # a tensor is immutable: a copy and a view are the same thing


def copy(self: Tensor, order: str = "K") -> Tensor:
    """numpy's ``ndarray.copy``: a new tensor with the same value, on the tape (gradient passes through).

    >>> import gputape as gt
    >>> gt.constant([1.0, 2.0]).copy().numpy().tolist()
    [1.0, 2.0]
    """
    return _elementwise.identity(self)


def tolist(self: Tensor) -> Any:
    """numpy's ``ndarray.tolist``: the value as nested Python numbers (it leaves the tape, like ``.numpy()``).

    >>> import gputape as gt
    >>> gt.constant([[1, 2], [3, 4]]).tolist()
    [[1, 2], [3, 4]]
    """
    return read_value(self, _tolist)


def abs(self: Tensor) -> Tensor:
    """``gt.abs(t)`` (PyTorch's ``Tensor.abs``; numpy arrays have only ``abs(a)``).

    >>> import gputape as gt
    >>> gt.constant([-1.0, 2.0]).abs().numpy().tolist()
    [1.0, 2.0]
    """
    return _elementwise.abs(self)


def mT(self: Tensor) -> Tensor:
    """numpy's ``ndarray.mT``: the last two axes swapped.

    >>> import gputape as gt
    >>> gt.zeros((2, 3, 4)).mT.shape
    (2, 4, 3)
    """
    if self.ndim < 2:
        raise ValueError(f"Tensor.mT: the tensor has rank {self.ndim}; matrix transpose needs at least 2 dimensions")
    return _shape.swapaxes(self, -1, -2)


def conj(self: Tensor) -> Tensor:
    """numpy's ``ndarray.conj``: the complex conjugate (the value itself for real tensors).

    >>> import gputape as gt, numpy as np
    >>> gt.constant(np.array([1 + 2j])).conj().numpy().tolist()
    [(1-2j)]
    """
    return _elementwise.conj(self)


def real(self: Tensor) -> Tensor:
    """numpy's ``ndarray.real``: the real part, differentiable.

    >>> import gputape as gt, numpy as np
    >>> gt.constant(np.array([1 + 2j])).real.numpy().tolist()
    [1.0]
    """
    return _elementwise.real(self)


def imag(self: Tensor) -> Tensor:
    """numpy's ``ndarray.imag``: the imaginary part, differentiable (zeros for real tensors).

    >>> import gputape as gt, numpy as np
    >>> gt.constant(np.array([1 + 2j])).imag.numpy().tolist()
    [2.0]
    """
    return _elementwise.imag(self)


# numpy's ndarray method name -> the function above or the public op it is
METHODS = {
    "sum": sum,
    "mean": mean,
    "prod": prod,
    "max": max,
    "min": min,
    "std": std,
    "var": var,
    "argmax": argmax,
    "argmin": argmin,
    "cumsum": cumsum,
    "cumprod": cumprod,
    "clip": clip,
    "round": round,
    "dot": dot,
    "take": take,
    "ravel": ravel,
    "flatten": flatten,
    "copy": copy,
    "tolist": tolist,
    "abs": abs,
    "conj": conj,
    "conjugate": conj,
}
