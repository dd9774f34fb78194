"""Helpers shared by the numpy-surface op modules (scan, reorder, products, joining).

Kept apart from ``_util`` (axis handling, ``sum_to``) because they serve only
numpy's signatures: the ``out=`` argument tensors cannot honour, index tuples
that name an axis from the right (so they stay right under a VJP's leading
batch dimensions), and calling a primitive from inside a VJP in both sweeps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dispatch import apply
from ..core.primitive import Primitive
from ..core.tensor import Tensor, Variable, _to_array, _wrap
from ..devices import backend

NOVALUE: Any = np._NoValue  # numpy's own "argument not given" marker (diff's prepend/append)


def check_out(op: str, out: Any) -> None:
    """numpy's ``out=``: accepted when None, refused clearly otherwise (tensors are immutable)."""
    if out is not None:
        raise TypeError(f"gt.{op}: out= is not supported (tensors are immutable); use the returned tensor instead")


def axis_index(axis: int, item: Any) -> tuple:
    """An index applying ``item`` to ``axis`` (negative: counted from the right) and keeping every other axis."""
    if axis >= 0:
        return (slice(None),) * axis + (item,)
    return (Ellipsis, item) + (slice(None),) * (-axis - 1)


def run(F: Any, prim: Primitive, *args: Any, **params: Any) -> Any:
    """Primitive ``prim`` called from inside a VJP: its raw forward in the fast sweep
    (``F.xp`` is numpy or cupy), a recorded op when a tape records the gradient
    (``F.xp`` is None), which is what makes the VJP itself differentiable."""
    if F.xp is not None:
        return prim.fwd(F.xp, *args, **params)
    return apply(prim, args, params)


def xp_of(x: Tensor) -> Any:
    """The array module (numpy or cupy) of a tensor's device."""
    return backend.xp_of(x._data)


def on_device(x: Tensor, host: Any) -> Any:
    """A host (numpy) index array moved to ``x``'s device, so indexing never mixes devices."""
    d = x._data
    return host if type(d) is np.ndarray else backend.to_device(host, backend.device_of(d))


def const_like(value: Any, x: Tensor, dtype: Any = None) -> Tensor:
    """A non-tensor operand as a constant on ``x``'s device (mixing devices would fail the op).

    Without ``dtype``, a Python number takes the dtype it would have beside ``x``
    (numpy's weak scalars: ``2.0`` beside float32 stays float32) and anything else
    gputape's rule (Python floats float32, arrays their own dtype).
    """
    if isinstance(value, Tensor):
        return value if dtype is None or value.dtype == np.dtype(dtype) else value.astype(dtype)
    if dtype is None and isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic):
        dtype = np.result_type(x.dtype, value)
    if hasattr(value, "__array_namespace__"):  # a numpy or cupy array
        arr = value if dtype is None else value.astype(dtype)
    else:
        arr = _to_array(value, dtype, "cpu")
    return _wrap(on_device(x, arr))


def snapshot(x: Tensor) -> Tensor:
    """``x`` itself, or for a Variable (mutable) a tensor of its current value, never the variable."""
    if isinstance(x, Variable):
        from .elementwise import identity

        return identity(x)
    return x
