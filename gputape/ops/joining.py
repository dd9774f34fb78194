"""Joining, splitting and choosing: vstack hstack dstack column_stack append, atleast_1d/2d/3d,
array_split hsplit vsplit dsplit, select, and the packing of lists that hold tensors.

All compositions of ``reshape``, ``concatenate``, ``split``, ``stack``, ``where`` and
``cast``, so their gradients come from those primitives.

Packing: a list (or tuple, nested) that holds tensors, given where a tensor is
expected (``gt.mean([x, x + 2])``, ``gt.add([x, y], 1.0)``), becomes one tensor by
``stack``, differentiably, as TensorFlow packs it with ``tf.stack``. Elements are
promoted together by numpy's rules, Python numbers being weak (``[x32, 2.0]`` stays
float32); elements of different shapes raise the ``stack`` error naming them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import _errors
from ..core.tensor import Tensor, _py_dtype, as_tensor, register_list_packer
from ._compat import const_like, snapshot
from ._util import array_sequence, is_index, norm_axis, norm_dtype, norm_ints, norm_list, norm_size
from .elementwise import cast, where
from .shape import concatenate, reshape, split, stack

_SCALARS = (bool, int, float, complex)


def _holds_tensor(value: Any) -> bool:
    return any(isinstance(v, Tensor) or (isinstance(v, (list, tuple)) and _holds_tensor(v)) for v in value)


def pack(value: Any) -> Tensor | None:
    """``value`` (a list or tuple, nested) as one tensor by ``stack`` if it holds a tensor, else None.

    >>> import gputape as gt
    >>> x = gt.constant(3.0)
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = gt.mean([x, x * 2.0])      # packed, as tf.reduce_mean([x, 2 * x]) is
    >>> float(y), float(tape.gradient(y, x))
    (4.5, 1.5)
    """
    if not _holds_tensor(value):
        return None
    items = [pack(v) if isinstance(v, (list, tuple)) and _holds_tensor(v) else v for v in value]
    first = next(v for v in items if isinstance(v, Tensor))
    items = [v if isinstance(v, (Tensor, *_SCALARS)) else const_like(v, first) for v in items]
    dtype = np.result_type(*(v.dtype if isinstance(v, Tensor) else v for v in items))
    return stack([v if isinstance(v, Tensor) else const_like(v, first, dtype) for v in items], axis=0)


register_list_packer(pack)


def _atleast(a: Any, n: int) -> Tensor:
    x = as_tensor(a)
    if x.ndim >= n:
        return snapshot(x)
    s = tuple(x.shape)
    if n == 1:
        return reshape(x, (1,))
    if n == 2:
        return reshape(x, (1,) * (2 - x.ndim) + s)
    return reshape(x, {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[x.ndim])


def _each(n: int, arys: tuple) -> Any:
    out = tuple(_atleast(a, n) for a in arys)
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys: Any) -> Any:
    """Each input with at least one dimension (a scalar becomes shape ``(1,)``); a tuple for several.

    >>> import gputape as gt
    >>> gt.atleast_1d(gt.constant(2.0)).shape
    (1,)
    """
    return _each(1, arys)


def atleast_2d(*arys: Any) -> Any:
    """Each input with at least two dimensions (``(n,)`` becomes ``(1, n)``); a tuple for several.

    >>> import gputape as gt
    >>> gt.atleast_2d(gt.ones(3)).shape
    (1, 3)
    """
    return _each(2, arys)


def atleast_3d(*arys: Any) -> Any:
    """Each input with at least three dimensions (``(n,)`` -> ``(1, n, 1)``, ``(m, n)`` -> ``(m, n, 1)``).

    >>> import gputape as gt
    >>> gt.atleast_3d(gt.ones(3)).shape, gt.atleast_3d(gt.ones((2, 3))).shape
    ((1, 3, 1), (2, 3, 1))
    """
    return _each(3, arys)


def _join(op: str, arrs: Any, axis: int, dtype: Any = None, casting: str = "same_kind") -> Tensor:
    arrs = list(arrs)
    if not arrs:
        raise _errors.argument_error(
            arrs, "is empty: need at least one tensor to join", op=op, arg="tup", cls=ValueError
        )
    if dtype is not None:
        dt = norm_dtype(dtype, op)
        for x in arrs:
            if not np.can_cast(x.dtype, dt, casting):
                raise TypeError(f"gt.{op}: cannot cast {x.dtype} to {dt} with casting={casting!r}")
        arrs = [x if x.dtype == dt else cast(x, dt) for x in arrs]
    return concatenate(arrs, axis=axis)


def _sequence(op: str, tup: Any) -> list[Any]:
    return array_sequence(tup, op)


def vstack(tup: Any, *, dtype: Any = None, casting: str = "same_kind") -> Tensor:
    """Join along the first axis after making each input at least 2-d (rows).

    >>> import gputape as gt
    >>> gt.vstack([gt.ones(2), gt.zeros(2)]).numpy().tolist()
    [[1.0, 1.0], [0.0, 0.0]]
    """
    return _join("vstack", [_atleast(x, 2) for x in _sequence("vstack", tup)], 0, dtype, casting)


def hstack(tup: Any, *, dtype: Any = None, casting: str = "same_kind") -> Tensor:
    """Join along the second axis (the first for 1-d inputs), inputs made at least 1-d.

    >>> import gputape as gt
    >>> gt.hstack([gt.ones(2), gt.zeros(1)]).numpy().tolist()
    [1.0, 1.0, 0.0]
    """
    arrs = [_atleast(x, 1) for x in _sequence("hstack", tup)]
    return _join("hstack", arrs, 0 if arrs and arrs[0].ndim == 1 else 1, dtype, casting)


def dstack(tup: Any) -> Tensor:
    """Join along the third axis after making each input at least 3-d.

    >>> import gputape as gt
    >>> gt.dstack([gt.ones((2, 2)), gt.zeros((2, 2))]).shape
    (2, 2, 2)
    """
    return _join("dstack", [_atleast(x, 3) for x in _sequence("dstack", tup)], 2)


def column_stack(tup: Any) -> Tensor:
    """Join 1-d inputs as columns (and 2-d ones as they are) along the second axis.

    >>> import gputape as gt
    >>> gt.column_stack([gt.constant([1.0, 2.0]), gt.constant([3.0, 4.0])]).numpy().tolist()
    [[1.0, 3.0], [2.0, 4.0]]
    """
    cols = []
    for v in _sequence("column_stack", tup):
        x = as_tensor(v)
        cols.append(reshape(x, (-1, 1)) if x.ndim < 2 else x)
    return _join("column_stack", cols, 1)


def append(arr: Any, values: Any, axis: Any = None) -> Tensor:
    """``arr`` with ``values`` joined at the end of ``axis`` (both flattened when None).

    >>> import gputape as gt
    >>> gt.append(gt.constant([[1.0, 2.0]]), gt.constant([3.0])).numpy().tolist()
    [1.0, 2.0, 3.0]
    """
    x, v = as_tensor(arr), as_tensor(values)
    if axis is None:
        return concatenate([reshape(x, (-1,)), reshape(v, (-1,))], axis=0)
    return concatenate([x, v], axis=axis)


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """Split into ``n`` nearly equal parts (the first ``len % n`` one longer) or at the given indices.

    >>> import gputape as gt
    >>> [p.shape for p in gt.array_split(gt.zeros(5), 3)]
    [(2,), (2,), (1,)]
    """
    x = as_tensor(ary)
    ax = norm_axis(axis, x.ndim, "array_split")
    if is_index(indices_or_sections) or not hasattr(indices_or_sections, "__iter__"):
        n = norm_size(indices_or_sections, "array_split", "a number of sections: must be positive", 1)
        each, extra = divmod(x.shape[ax], n)
        sizes = [each + 1] * extra + [each] * (n - extra)
        points = np.cumsum(sizes)[:-1].tolist()
    else:
        points = list(norm_ints(indices_or_sections, "array_split", "a list of split indices"))
    return split(x, points, axis=ax)


def _split_at_least(op: str, ary: Any, ios: Any, ndim: int, axis: int) -> list[Tensor]:
    x = as_tensor(ary)
    if x.ndim < ndim:
        raise _errors.argument_error(ary, f"needs an input of at least {ndim} dimensions", op=op, cls=ValueError)
    return split(x, ios, axis=axis)


def hsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    """``split`` along the second axis (the first for 1-d inputs).

    >>> import gputape as gt
    >>> [p.shape for p in gt.hsplit(gt.zeros((2, 4)), 2)]
    [(2, 2), (2, 2)]
    """
    x = as_tensor(ary)
    return _split_at_least("hsplit", x, indices_or_sections, 1, 1 if x.ndim > 1 else 0)


def vsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    """``split`` along the first axis of an input of at least 2 dimensions.

    >>> import gputape as gt
    >>> [p.shape for p in gt.vsplit(gt.zeros((4, 2)), [1])]
    [(1, 2), (3, 2)]
    """
    return _split_at_least("vsplit", ary, indices_or_sections, 2, 0)


def dsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    """``split`` along the third axis of an input of at least 3 dimensions.

    >>> import gputape as gt
    >>> [p.shape for p in gt.dsplit(gt.zeros((1, 1, 4)), 2)]
    [(1, 1, 2), (1, 1, 2)]
    """
    return _split_at_least("dsplit", ary, indices_or_sections, 3, 2)


def select(condlist: Any, choicelist: Any, default: Any = 0) -> Tensor:
    """Per element, the choice of the first true condition, else ``default`` (numpy's ``select``).

    A composition: nested ``where`` (the gradient reaches the chosen entry only).

    >>> import gputape as gt
    >>> x = gt.constant([-2.0, 0.5, 3.0])
    >>> gt.select([x < 0, x > 1], [-x, x * 10.0], default=0.0).numpy().tolist()
    [2.0, 0.0, 30.0]
    """
    conds = norm_list(condlist, "select", "a list of conditions")
    choices = norm_list(choicelist, "select", "a list of choices")
    if len(conds) != len(choices):
        raise _errors.argument_error(
            choicelist,
            f"does not match condlist: {len(conds)} conditions for {len(choices)} choices; "
            "give one choice per condition",
            op="select",
            cls=ValueError,
        )
    if not conds:
        raise ValueError("gt.select: needs at least one condition")
    first = next((v for v in conds + choices if isinstance(v, Tensor)), None)
    if first is None:
        first = as_tensor(choices[0])

    def operand(v: Any) -> Tensor:  # (Python numbers by gputape's rule: floats are float32)
        if isinstance(v, Tensor):
            return v
        return const_like(v, first, _py_dtype(v) if isinstance(v, _SCALARS) else None)

    masks = [operand(c) for c in conds]
    for i, m in enumerate(masks):
        if m.dtype != np.bool_:
            raise TypeError(f"gt.select: condition {i} has dtype {m.dtype}; conditions must be boolean")
    vals = [operand(c) for c in choices]
    weak = default if isinstance(default, _SCALARS) else operand(default).dtype
    dtype = np.result_type(*(v.dtype for v in vals), weak)
    out = const_like(default, first, dtype)
    for m, v in zip(reversed(masks), reversed(vals)):
        out = where(m, v if v.dtype == dtype else cast(v, dtype), out)
    return out
