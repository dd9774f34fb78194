"""Shapes, reordering, selection and casts with TensorFlow's signatures (``tf.reshape``, ``tf.split``,
``tf.gather``, ``tf.where``, ``tf.sort``, ``tf.cast`` ...)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .. import ops as _ops
from ..core.custom_gradient import stop_gradient as _stop_gradient
from ..core.recording import traced
from ..core.state import current_trace
from ..core.tensor import Tensor, Variable, _to_array, as_tensor
from ..core.tensor import constant as _constant
from ..devices.backend import to_host, xp_of
from ..devices.placement import current_device
from ..ops._util import is_index, norm_axis, norm_dtype, norm_ints, norm_list, norm_size
from ..ops.errors import invalid_argument as _invalid
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
    if not isinstance(values, (list, tuple)):
        # TensorFlow wraps a lone tensor in a list and returns it unchanged (its degenerate case),
        # after checking that axis is one integer; flattening its rows would be a silent reshape.
        if not is_index(axis):
            raise _invalid(f"tf.concat: argument axis ({axis!r}) must be one integer")
        return identity(values)
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
    x = as_tensor(value)
    if is_index(num_or_size_splits):
        n = norm_size(num_or_size_splits, "split", "a number of splits", minimum=None)
        total = x.shape[norm_axis(axis, x.ndim, "split")] if x.ndim else 0
        if n < 1 or total % n:
            raise _invalid(
                f"tf.split: argument num_or_size_splits ({n}) must evenly divide the split dimension "
                f"(axis {axis} of shape {x.shape}, size {total}); pass a list of sizes for unequal parts"
            )
        return _ops.split(x, n, axis)
    sizes = list(norm_ints(num_or_size_splits, "split", "a number of splits or a list of sizes"))
    total = x.shape[norm_axis(axis, x.ndim, "split")]
    unknown = sizes.count(-1)
    known = builtins.sum(s for s in sizes if s != -1)
    # TensorFlow's rule: sizes add up to the dimension exactly, or one of them is -1 and the rest fit.
    if unknown > 1 or builtins.any(s < -1 for s in sizes) or (known != total if not unknown else known > total):
        raise _invalid(
            f"tf.split: argument num_or_size_splits {sizes} does not split axis {axis} of shape {x.shape} "
            f"(size {total}): the sizes must add up to {total}, or one of them be -1 and the rest add up to "
            f"at most {total}"
        )
    if unknown:
        sizes[sizes.index(-1)] = total - known
    return _ops.split(x, list(np.cumsum(sizes)[:-1].tolist()), axis)


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
    p = as_tensor(params)
    idx = indices._data if isinstance(indices, Tensor) else _to_array(indices)
    if idx.dtype.kind not in "iu" and not (idx.size == 0 and idx.dtype.kind == "f"):  # [] is float64 to numpy
        raise _invalid(
            f"tf.gather: argument indices has dtype {idx.dtype}, not an integer dtype (TensorFlow: Value for "
            f"attr 'Tindices' of {idx.dtype} is not in the list of allowed values: int16, int32, int64); "
            "for a boolean mask use tf.boolean_mask, for float indices tf.cast them"
        )
    # the indices as the take will read them: a tensor stays a recorded input (a gt.function replay
    # takes each call's indices; an int64 copy of its array would be frozen into the trace)
    if isinstance(indices, Tensor):
        it: Any = indices if idx.dtype == np.int64 else _ops.cast(indices, "int64")
    else:
        it = idx = idx.astype(np.int64, copy=False)
    b = norm_size(batch_dims, "gather", "batch_dims", minimum=None)
    if b < 0:
        b += idx.ndim
    if not 0 <= b <= idx.ndim or b > p.ndim:
        raise _invalid(
            f"tf.gather: argument batch_dims ({batch_dims}) must be in [-{idx.ndim}, {idx.ndim}] for indices of "
            f"shape {tuple(idx.shape)} and at most the rank of params ({p.ndim})"
        )
    ax = b if axis is None else norm_axis(axis_arg(axis), p.ndim, "gather")
    if ax < b:
        raise _invalid(f"tf.gather: argument batch_dims ({b}) must be less than or equal to axis ({ax})")
    if tuple(idx.shape[:b]) != tuple(p.shape[:b]):
        raise _invalid(
            f"tf.gather: the first batch_dims={b} dimensions of params {p.shape} and indices {tuple(idx.shape)} "
            "must be equal"
        )
    n = p.shape[ax]
    _check_gather_indices(idx, n)
    # a gt.function replay checks each call's indices too (its take would wrap -1 silently)
    traced(_check_gather_indices, (indices if isinstance(indices, Tensor) else idx, n), None)
    if b == 0:
        return _ops.take(p, it, ax)
    return _batched_gather(p, it, ax, b)


def _check_gather_indices(idx: Any, n: int) -> None:
    bad = (idx < 0) | (idx >= n)
    if idx.size and bool(bad.any()):
        # TensorFlow's CPU kernel refuses these (numpy would wrap -1 to the last entry: a silent wrong row)
        pos = tuple(int(i) for i in np.argwhere(to_host(bad))[0])
        at = ",".join(map(str, pos))
        raise _invalid(
            f"tf.gather: indices[{at}] = {int(to_host(idx)[pos])} is not in [0, {n}) (argument indices); "
            "TensorFlow does not wrap negative or out-of-range indices"
        )


def _batched_gather(p: Tensor, idx: Any, ax: int, b: int) -> Tensor:
    """``gather`` with ``batch_dims=b``: one take over the batch flattened into the gathered axis
    (offsets keep each batch element's rows apart), so the gradient is take's."""
    batch, pre, post, irest = p.shape[:b], p.shape[b:ax], p.shape[ax + 1 :], tuple(idx.shape[b:])
    nb, n = int(np.prod(batch, dtype=np.int64)), p.shape[ax]
    flat = _ops.reshape(_ops.moveaxis(_ops.reshape(p, (nb, *p.shape[b:])), 1 + len(pre), 1), (nb * n, *pre, *post))
    xp = xp_of(idx._data if isinstance(idx, Tensor) else idx)
    offsets = (xp.arange(nb, dtype=np.int64) * n).reshape((nb,) + (1,) * len(irest))
    fi = _ops.reshape(idx, (nb, *irest)) + offsets  # recorded: a replay offsets that call's indices
    out = _ops.take(flat, fi, 0)  # (nb, *irest, *pre, *post)
    ni, npre = len(irest), len(pre)
    perm = (0, *range(1 + ni, 1 + ni + npre), *range(1, 1 + ni), *range(1 + ni + npre, out.ndim))
    return _ops.reshape(_ops.transpose(out, perm), (*batch, *pre, *irest, *post))


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


def boolean_mask(tensor: Any, mask: Any, axis: Any = None, name: str | None = None) -> Tensor:
    """The entries of ``tensor`` where the boolean ``mask`` (covering dimensions ``axis`` onward) is True.

    Differentiable in ``tensor`` (the gradient scatters back to the kept entries).

    >>> import gputape.tf as tf
    >>> tf.boolean_mask(tf.constant([[1, 2], [3, 4], [5, 6]]), [True, False, True]).numpy().tolist()
    [[1, 2], [5, 6]]
    """
    t = as_tensor(tensor)
    m = mask._data if isinstance(mask, Tensor) else _to_array(mask)
    if m.dtype != np.bool_:
        raise _invalid(f"tf.boolean_mask: argument mask has dtype {m.dtype}; it must be bool (tf.cast it)")
    ax = 0 if axis is None else norm_axis(axis, t.ndim, "boolean_mask")
    if m.ndim == 0 or tuple(t.shape[ax : ax + m.ndim]) != tuple(m.shape):
        raise _invalid(
            f"tf.boolean_mask: argument mask of shape {tuple(m.shape)} must match the dimensions {ax} onward of "
            f"tensor's shape {t.shape}"
        )
    return t[(builtins.slice(None),) * ax + (m,)]


def broadcast_to(input: Any, shape: Any, name: str | None = None) -> Tensor:
    """``input`` broadcast to ``shape`` (numpy's rules); the gradient sums back over the new dimensions.

    >>> import gputape.tf as tf
    >>> tf.broadcast_to(tf.constant([1.0, 2.0]), [2, 2]).numpy().tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """
    return _ops.broadcast_to(input, axis_arg(shape) if isinstance(shape, Tensor) else shape)


def slice(input_: Any, begin: Any, size: Any, name: str | None = None) -> Tensor:
    """The block of ``input_`` that starts at ``begin`` with extent ``size`` (-1: to the end).

    >>> import gputape.tf as tf
    >>> tf.slice(tf.reshape(tf.range(6), [2, 3]), [0, 1], [2, -1]).numpy().tolist()
    [[1, 2], [4, 5]]
    """
    t = as_tensor(input_)
    b = norm_ints(begin, "slice", "a list of start offsets")  # (a tensor is read, guarded when traced)
    s = norm_ints(size, "slice", "a list of sizes")
    if len(b) != t.ndim or len(s) != t.ndim:
        raise _invalid(
            f"tf.slice: arguments begin {list(b)} and size {list(s)} must each have one entry per dimension "
            f"of input_ (shape {t.shape})"
        )
    key = []
    for i, (lo, n, dim) in enumerate(zip(b, s, t.shape)):
        if not 0 <= lo <= dim:
            raise _invalid(f"tf.slice: argument begin: expected begin[{i}] in [0, {dim}], but got {lo}")
        if n == -1:
            n = dim - lo
        if not 0 <= n <= dim - lo:
            raise _invalid(
                f"tf.slice: argument size: expected size[{i}] in [0, {dim - lo}] (dimension {dim} from begin[{i}] = "
                f"{lo}), but got {n}"
            )
        key.append(builtins.slice(lo, lo + n))
    return t[tuple(key)]


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", constant_values: Any = 0, name: str | None = None):
    """Pad each dimension by ``paddings[d] = [before, after]`` with ``constant_values`` (mode CONSTANT).

    >>> import gputape.tf as tf
    >>> tf.pad(tf.constant([[1.0]]), [[1, 0], [0, 1]]).numpy().tolist()
    [[0.0, 0.0], [1.0, 0.0]]
    """
    if not isinstance(mode, str) or mode.upper() not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise ValueError(f"tf.pad: argument mode ({mode!r}) must be one of 'CONSTANT', 'REFLECT', 'SYMMETRIC'")
    if mode.upper() != "CONSTANT":
        raise NotImplementedError(f"tf.pad: mode {mode!r} is not in gputape; only mode='CONSTANT' is")
    pw = paddings.numpy().tolist() if isinstance(paddings, Tensor) else paddings
    return _ops.pad(tensor, pw, constant_values=constant_values)


def get_static_value(tensor: Any, partial: bool = False) -> Any:
    """The value of ``tensor`` as a numpy array (eager tensors are always known); None for a Variable,
    whose value can change; other values are returned as they are.

    >>> import gputape.tf as tf
    >>> tf.get_static_value(tf.constant([1, 2])).tolist(), tf.get_static_value(3)
    ([1, 2], 3)
    """
    if isinstance(tensor, Variable):
        return None
    if isinstance(tensor, Tensor):
        return tensor.numpy()
    return tensor


def executing_eagerly() -> bool:
    """False while ``tf.function`` traces (ops are being recorded for replay), else True.

    >>> import gputape.tf as tf
    >>> tf.executing_eagerly()
    True
    """
    return current_trace() is None


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a gputape Tensor or Variable (not a numpy array or a Python number).

    >>> import gputape.tf as tf
    >>> tf.is_tensor(tf.constant(1.0)), tf.is_tensor(1.0)
    (True, False)
    """
    return isinstance(x, Tensor)
