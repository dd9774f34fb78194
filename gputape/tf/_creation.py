"""Tensor creation with TensorFlow's signatures: ``tf.constant``, ``tf.zeros``, ``tf.range``, ``tf.one_hot`` ..."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .. import ops as _ops
from ..core.tensor import Tensor, as_tensor
from ..core.tensor import constant as _constant
from ..ops._util import norm_shape, norm_size
from ..ops.errors import invalid_argument as _invalid_argument
from ._variable import Variable


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str | None = None) -> Tensor:
    """A tensor from a value; with ``shape``, a scalar is filled and an array reshaped (TensorFlow's rule).

    >>> import gputape.tf as tf
    >>> tf.constant(0.5, shape=(2,)).numpy().tolist(), str(tf.constant([1, 2]).dtype)
    ([0.5, 0.5], 'int32')
    """
    t = _constant(value, dtype)
    if shape is None:
        return t
    shape = norm_shape(shape, "constant")
    if t.size == 1:
        return _ops.broadcast_to(_ops.reshape(t, ()), shape)
    return _ops.reshape(t, shape)


def convert_to_tensor(value: Any, dtype: Any = None, dtype_hint: Any = None, name: str | None = None) -> Tensor:
    """``value`` if it is already a tensor (cast to ``dtype`` if given), a Variable's value, else a constant.

    A Variable is read (as TensorFlow does): each call returns a new tensor, which a
    recording tape links to the variable, so gradients flow to it.

    >>> import gputape.tf as tf
    >>> str(tf.convert_to_tensor([1.0, 2.0]).dtype), type(tf.convert_to_tensor(tf.Variable(1.0))).__name__
    ('float32', 'Tensor')
    """
    if isinstance(value, Variable):
        # A read is a new tensor, as in TensorFlow: two reads of one variable are two tensors
        # (each its own gradient), and a gradient through either still reaches the variable.
        value = _ops.identity(value)
    if isinstance(value, Tensor):
        return value if dtype is None or value.dtype == np.dtype(dtype) else _ops.cast(value, dtype)
    if dtype is None and dtype_hint is not None:
        dtype = dtype_hint
    return _constant(value, dtype)


def zeros(shape: Any, dtype: Any = "float32", name: str | None = None) -> Tensor:
    """All zeros of ``shape`` (float32 by default).

    >>> import gputape.tf as tf
    >>> tf.zeros([2]).numpy().tolist()
    [0.0, 0.0]
    """
    return _ops.zeros(shape, dtype)


def ones(shape: Any, dtype: Any = "float32", name: str | None = None) -> Tensor:
    """All ones of ``shape`` (float32 by default).

    >>> import gputape.tf as tf
    >>> tf.ones([2]).numpy().tolist()
    [1.0, 1.0]
    """
    return _ops.ones(shape, dtype)


def zeros_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """Zeros with ``input``'s shape (and dtype unless given).

    >>> import gputape.tf as tf
    >>> tf.zeros_like(tf.ones((1, 2))).numpy().tolist()
    [[0.0, 0.0]]
    """
    return _ops.zeros_like(input, dtype)


def ones_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """Ones with ``input``'s shape (and dtype unless given).

    >>> import gputape.tf as tf
    >>> tf.ones_like(tf.zeros((2,))).numpy().tolist()
    [1.0, 1.0]
    """
    return _ops.ones_like(input, dtype)


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape ``dims`` filled with ``value`` (its dtype follows TensorFlow's Python rules).

    >>> import gputape.tf as tf
    >>> tf.fill([2], 7).numpy().tolist()
    [7, 7]
    """
    v = _constant(value)
    return _ops.full(dims, v.numpy().item(), v.dtype)


def eye(num_rows: int, num_columns: int | None = None, dtype: Any = "float32", name: str | None = None) -> Tensor:
    """The identity matrix.

    >>> import gputape.tf as tf
    >>> tf.eye(2).numpy().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    return _ops.eye(num_rows, num_columns, dtype)


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None, name: str | None = None) -> Tensor:
    """``tf.range``: like Python's range; int32 for integer arguments, float32 for floats.

    >>> import gputape.tf as tf
    >>> tf.range(3).numpy().tolist(), str(tf.range(3).dtype)
    ([0, 1, 2], 'int32')
    """
    if limit is None:
        start, limit = 0, start
    if dtype is None:
        is_float = builtins.any(isinstance(v, float) for v in (start, limit, delta))
        dtype = "float32" if is_float else "int32"
    return _ops.arange(start, limit, delta, dtype)


def linspace(start: Any, stop: Any, num: int, name: str | None = None, axis: int = 0) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive.

    >>> import gputape.tf as tf
    >>> tf.linspace(0.0, 1.0, 3).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    return _ops.linspace(start, stop, num, axis=axis)


def one_hot(
    indices: Any,
    depth: int,
    on_value: Any = None,
    off_value: Any = None,
    axis: int | None = None,
    dtype: Any = "float32",
    name: str | None = None,
) -> Tensor:
    """One-hot rows for integer ``indices`` (out-of-range indices give all-``off_value`` rows, as in TF).

    >>> import gputape.tf as tf
    >>> tf.one_hot([0, 2], 3).numpy().tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    idx = as_tensor(indices)
    if idx.dtype.kind not in "iu":
        # TensorFlow's OneHot takes integer indices only; comparing floats to 0..depth-1 gave rows of zeros
        raise _invalid_argument(
            f"tf.one_hot: argument indices has dtype {idx.dtype}, not an integer dtype (TensorFlow: Value for "
            f"attr 'TI' of {idx.dtype} is not in the list of allowed values: uint8, int8, int32, int64); "
            "tf.cast the indices to int32 first"
        )
    hot = _ops.equal(
        _ops.expand_dims(idx, -1),
        _ops.arange(norm_size(depth, "one_hot", "a depth"), dtype=idx.dtype, device=idx.device),
    )
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value
    out = _ops.cast(_ops.where(hot, on, off), dtype)
    if axis is not None and axis != -1:
        out = _ops.moveaxis(out, -1, axis)
    return out
