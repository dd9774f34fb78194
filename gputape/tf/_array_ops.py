"""Shapes, reordering, selection and casts with TensorFlow's signatures (``tf.reshape``, ``tf.split``,
``tf.gather``, ``tf.where``, ``tf.sort``, ``tf.cast`` ...)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .. import ops as _ops
from ..core.custom_gradient import stop_gradient as _stop_gradient
from ..core.tensor import Tensor, _to_array, as_tensor
from ..core.tensor import constant as _constant
from ..devices.placement import current_device
from ..ops._util import is_index, norm_axis, norm_dtype, norm_ints, norm_list
from ._util import axis_arg


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """``tensor`` with a new shape (one dimension may be -1).

    >>> import gputape.tf as tf
    >>> tf.reshape(tf.range(6), [2, -1]).shape
    (2, 3)
    """
    return _ops.reshape(tensor, shape)


def transpose(a: Any, perm: Any = None, conjugate: bool = False, name: str | None = None) -> Tensor:
    """Permute the axes (reverse them by default).

    >>> import gputape.tf as tf
    >>> tf.transpose(tf.zeros((2, 3, 4)), perm=[0, 2, 1]).shape
    (2, 4, 3)
    """
    return _ops.transpose(a, axis_arg(perm))


def concat(values: Any, axis: int, name: str | None = None) -> Tensor:
    """Join tensors along an existing ``axis``.

    >>> import gputape.tf as tf
    >>> tf.concat([tf.zeros((1, 2)), tf.ones((1, 2))], axis=0).shape
    (2, 2)
    """
    return _ops.concatenate(norm_list(values, "concat", "a list of tensors"), axis)


def stack(values: Any, axis: int = 0, name: str | None = None) -> Tensor:
    """Join tensors along a new ``axis``.

    >>> import gputape.tf as tf
    >>> tf.stack([tf.zeros(2), tf.ones(2)], axis=1).shape
    (2, 2)
    """
    return _ops.stack(norm_list(values, "stack", "a list of tensors"), axis)


def unstack(value: Any, num: int | None = None, axis: int = 0, name: str | None = None) -> list[Tensor]:
    """Split along ``axis`` into a list of tensors with that axis removed.

    >>> import gputape.tf as tf
    >>> [t.shape for t in tf.unstack(tf.zeros((2, 3)), axis=1)]
    [(2,), (2,), (2,)]
    """
    value = as_tensor(value)
    axis = norm_axis(axis, value.ndim, "unstack")
    n = value.shape[axis]
    return [_ops.squeeze(p, axis) for p in _ops.split(value, n, axis)]


def split(value: Any, num_or_size_splits: Any, axis: int = 0, num: int | None = None, name: str | None = None) -> list:
    """Split into ``num_or_size_splits`` equal parts, or parts of the given sizes (TensorFlow's meaning).

    >>> import gputape.tf as tf
    >>> [t.shape for t in tf.split(tf.zeros((5, 2)), [2, 3])]
    [(2, 2), (3, 2)]
    """
    if is_index(num_or_size_splits):
        return _ops.split(value, num_or_size_splits, axis)
    sizes = list(norm_ints(num_or_size_splits, "split", "a number of splits or a list of sizes"))
    if -1 in sizes:
        x = as_tensor(value)
        total = x.shape[norm_axis(axis, x.ndim, "split")]
        sizes[sizes.index(-1)] = total - builtins.sum(s for s in sizes if s != -1)
    return _ops.split(value, list(np.cumsum(sizes)[:-1].tolist()), axis)


def expand_dims(input: Any, axis: int, name: str | None = None) -> Tensor:
    """Insert a length-1 axis at ``axis``.

    >>> import gputape.tf as tf
    >>> tf.expand_dims(tf.zeros(3), 0).shape
    (1, 3)
    """
    return _ops.expand_dims(input, axis)


def squeeze(input: Any, axis: Any = None, name: str | None = None) -> Tensor:
    """Remove length-1 axes (all, or those in ``axis``).

    >>> import gputape.tf as tf
    >>> tf.squeeze(tf.zeros((1, 3, 1))).shape
    (3,)
    """
    return _ops.squeeze(input, axis_arg(axis))


def shape(input: Any, out_type: Any = "int32", name: str | None = None) -> Tensor:
    """The shape as an integer tensor.

    >>> import gputape.tf as tf
    >>> tf.shape(tf.zeros((2, 3))).numpy().tolist()
    [2, 3]
    """
    return _constant(np.asarray(as_tensor(input).shape, dtype=norm_dtype(out_type, "shape")))


def size(input: Any, out_type: Any = "int32", name: str | None = None) -> Tensor:
    """The number of elements as an integer tensor.

    >>> import gputape.tf as tf
    >>> int(tf.size(tf.zeros((2, 3))))
    6
    """
    return _constant(np.asarray(as_tensor(input).size, dtype=norm_dtype(out_type, "size")))


def rank(input: Any, name: str | None = None) -> Tensor:
    """The number of dimensions as an int32 tensor.

    >>> import gputape.tf as tf
    >>> int(tf.rank(tf.zeros((2, 3))))
    2
    """
    return _constant(np.asarray(as_tensor(input).ndim, dtype=np.int32))


def cast(x: Any, dtype: Any, name: str | None = None) -> Tensor:
    """``x`` converted to ``dtype`` (differentiable between float dtypes).

    >>> import gputape.tf as tf
    >>> str(tf.cast(tf.constant([1.5]), tf.int32).dtype)
    'int32'
    """
    return _ops.cast(as_tensor(x), dtype)


def identity(input: Any, name: str | None = None) -> Tensor:
    """A tensor with the same value (gradients pass through).

    >>> import gputape.tf as tf
    >>> tf.identity(tf.constant([1.0])).numpy().tolist()
    [1.0]
    """
    return _ops.identity(input)


def stop_gradient(input: Any, name: str | None = None) -> Tensor:
    """The same value, with no gradient flowing back through it.

    >>> import gputape.tf as tf
    >>> x = tf.Variable(2.0)
    >>> with tf.GradientTape() as t:
    ...     y = x * tf.stop_gradient(x)
    >>> float(t.gradient(y, x))
    2.0
    """
    return _stop_gradient(input)


def einsum(equation: str, *inputs: Any, **kwargs: Any) -> Tensor:
    """Einstein summation, as ``numpy.einsum``.

    >>> import gputape.tf as tf
    >>> tf.einsum("ij,j->i", tf.ones((2, 3)), tf.ones(3)).numpy().tolist()
    [3.0, 3.0]
    """
    return _ops.einsum(equation, *inputs)


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any, name: str | None = None) -> Tensor:
    """Clamp entries to ``[clip_value_min, clip_value_max]`` (gradient 0 outside).

    >>> import gputape.tf as tf
    >>> tf.clip_by_value(tf.constant([-2.0, 0.5, 2.0]), -1.0, 1.0).numpy().tolist()
    [-1.0, 0.5, 1.0]
    """
    return _ops.clip(t, clip_value_min, clip_value_max)


def gather(params: Any, indices: Any, validate_indices: Any = None, axis: Any = None, batch_dims: int = 0, name=None):
    """Entries of ``params`` at ``indices`` along ``axis`` (default 0); differentiable in ``params``.

    >>> import gputape.tf as tf
    >>> tf.gather(tf.constant([[1.0], [2.0], [3.0]]), [2, 0]).numpy().tolist()
    [[3.0], [1.0]]
    """
    if batch_dims:
        raise NotImplementedError("tf.gather: batch_dims is not supported")
    idx = indices._data if isinstance(indices, Tensor) else _to_array(indices)
    return _ops.take(params, idx, 0 if axis is None else axis_arg(axis))


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """``x`` where ``condition`` else ``y``; with only ``condition``, the int64 coordinates of true entries.

    >>> import gputape.tf as tf
    >>> tf.where(tf.constant([True, False]), 1.0, 0.0).numpy().tolist(), tf.where([False, True]).numpy().tolist()
    ([1.0, 0.0], [[1]])
    """
    if x is None and y is None:
        c = condition.numpy() if isinstance(condition, Tensor) else np.asarray(condition)  # (guarded when traced)
        return _constant(np.argwhere(c).astype(np.int64), device=current_device())
    if x is None or y is None:
        raise ValueError("tf.where: pass both x and y, or neither")
    return _ops.where(condition, x, y)


def reverse(tensor: Any, axis: Any, name: str | None = None) -> Tensor:
    """Reverse the order along each axis in ``axis`` (a list).

    >>> import gputape.tf as tf
    >>> tf.reverse(tf.constant([[1.0, 2.0], [3.0, 4.0]]), [1]).numpy().tolist()
    [[2.0, 1.0], [4.0, 3.0]]
    """
    return _ops.flip(tensor, axis_arg(axis))


def roll(input: Any, shift: Any, axis: Any, name: str | None = None) -> Tensor:
    """Shift elements cyclically by ``shift`` along ``axis`` (scalars or matching lists).

    >>> import gputape.tf as tf
    >>> tf.roll(tf.constant([1.0, 2.0, 3.0]), shift=1, axis=0).numpy().tolist()
    [3.0, 1.0, 2.0]
    """
    return _ops.roll(input, axis_arg(shift), axis_arg(axis))


def _direction(direction: str, op: str) -> bool:
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"tf.{op}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    return direction == "DESCENDING"


def sort(values: Any, axis: int = -1, direction: str = "ASCENDING", name: str | None = None) -> Tensor:
    """Sorted values along ``axis``, ascending or descending (differentiable, as ``gt.sort``).

    >>> import gputape.tf as tf
    >>> tf.sort(tf.constant([1.0, 3.0, 2.0]), direction="DESCENDING").numpy().tolist()
    [3.0, 2.0, 1.0]
    """
    x = as_tensor(values)
    if _direction(direction, "sort"):
        return -_ops.sort(-x, axis=axis)
    return _ops.sort(x, axis=axis)


def argsort(
    values: Any, axis: int = -1, direction: str = "ASCENDING", stable: bool = False, name: str | None = None
) -> Tensor:
    """Indices (int32) that sort ``values`` along ``axis``; ties keep their order when ``stable``.

    >>> import gputape.tf as tf
    >>> tf.argsort(tf.constant([1.0, 3.0, 2.0]), direction="DESCENDING").numpy().tolist()
    [1, 2, 0]
    """
    x = as_tensor(values)
    if _direction(direction, "argsort"):
        x = -x
    return _ops.argsort(x, axis=axis, stable=True if stable else None).astype("int32")


def tile(input: Any, multiples: Any, name: str | None = None) -> Tensor:
    """Repeat the whole tensor ``multiples[i]`` times along axis ``i`` (one multiple per axis).

    >>> import gputape.tf as tf
    >>> tf.tile(tf.constant([[1.0, 2.0]]), [2, 1]).numpy().tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """
    x = as_tensor(input)
    m = norm_ints(multiples, "tile", "a list of multiples")
    if len(m) != x.ndim:
        raise ValueError(f"tf.tile: {len(m)} multiples for a tensor of rank {x.ndim} (shape {x.shape})")
    return _ops.tile(x, multiples)


def repeat(input: Any, repeats: Any, axis: Any = None, name: str | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (of the flattened tensor when None).

    >>> import gputape.tf as tf
    >>> tf.repeat(tf.constant([1.0, 2.0]), 2).numpy().tolist()
    [1.0, 1.0, 2.0, 2.0]
    """
    return _ops.repeat(input, repeats, axis=axis)


def tensordot(a: Any, b: Any, axes: Any, name: str | None = None) -> Tensor:
    """Sum of products over ``axes`` (an int: the last of ``a`` with the first of ``b``; or two lists).

    >>> import gputape.tf as tf
    >>> tf.tensordot(tf.ones((2, 3)), tf.ones((3, 4)), axes=1).shape
    (2, 4)
    """
    return _ops.tensordot(a, b, axes)
