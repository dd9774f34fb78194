"""TensorFlow's spellings over gputape: ``import gputape.tf as tf`` runs GradientTape programs.

It covers what a custom training loop uses: ``GradientTape``, ``Variable``,
``constant``, ``Module``, ``function``, ``stop_gradient``,
``custom_gradient``, the ``reduce_*`` family and elementwise math (also under
``tf.math``), ``tf.nn``, ``tf.random``, ``tf.data.Dataset``, ``tf.keras``
(layers, ``Sequential``, subclassed ``Model``, optimizers, losses, metrics),
``tf.optimizers`` and ``tf.profiler.experimental``. Arguments keep
TensorFlow's names and order (``reduce_sum(input_tensor, axis, keepdims)``,
``argmax``'s default ``axis=0``); ``name=`` is accepted and ignored.

Differences that remain: tensors' ``.shape`` is a plain tuple (no
``as_list()``); ``tf.function`` is ``gt.function`` (traced once, replayed); Keras'
``compile``/``fit`` cover one loss for one output (see :mod:`gputape.nn.training`).

>>> import gputape.tf as tf
>>> w = tf.Variable([[1.0], [2.0]])
>>> x = tf.constant([[3.0, 4.0]])
>>> with tf.GradientTape() as tape:
...     loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
>>> tape.gradient(loss, w).numpy().tolist()
[[66.0], [88.0]]
"""

from __future__ import annotations

import builtins
import functools
import pprint
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _state
from .. import ops as _ops
from .._nest import flatten, unflatten
from ..backend import to_host
from ..device import current_device
from ..function import TensorSpec
from ..module import Module
from ..ops._util import is_index, norm_axis, norm_dtype, norm_ints, norm_list, norm_shape, norm_size
from ..optim import clip_by_global_norm, clip_by_norm
from ..tape import GradientTape, UnconnectedGradients, custom_gradient
from ..tape import stop_gradient as _stop_gradient
from ..tensor import (
    Tensor,
    _to_array,
    as_tensor,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from ..tensor import bool_ as bool
from ..tensor import constant as _constant
from . import data, keras, linalg, math, nn, optimizers, profiler, random
from ._util import axis_arg
from ._variable import Variable
from .linalg import matmul, norm  # tf.matmul is tf.linalg.matmul, tf.norm is tf.linalg.norm
from .math import (
    abs,
    add,
    add_n,
    argmax,
    argmin,
    cos,
    cosh,
    cumsum,
    divide,
    equal,
    exp,
    floor,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    pow,
    reduce_all,
    reduce_any,
    reduce_logsumexp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    round,
    sigmoid,
    sign,
    sin,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    truediv,
)

newaxis = None

__all__ = [
    "GradientTape",
    "Module",
    "Tensor",
    "TensorSpec",
    "UnconnectedGradients",
    "Variable",
    "abs",
    "add",
    "add_n",
    "argmax",
    "argmin",
    "argsort",
    "bool",
    "cast",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
    "concat",
    "constant",
    "convert_to_tensor",
    "cos",
    "cosh",
    "cumsum",
    "custom_gradient",
    "data",
    "divide",
    "einsum",
    "equal",
    "exp",
    "expand_dims",
    "eye",
    "fill",
    "float16",
    "float32",
    "float64",
    "floor",
    "function",
    "gather",
    "greater",
    "greater_equal",
    "identity",
    "int8",
    "int16",
    "int32",
    "int64",
    "keras",
    "less",
    "less_equal",
    "linalg",
    "linspace",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "math",
    "matmul",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "newaxis",
    "nn",
    "norm",
    "not_equal",
    "one_hot",
    "ones",
    "ones_like",
    "optimizers",
    "pow",
    "print",
    "profiler",
    "random",
    "range",
    "rank",
    "reduce_all",
    "reduce_any",
    "reduce_logsumexp",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
    "repeat",
    "reshape",
    "reverse",
    "roll",
    "round",
    "shape",
    "sigmoid",
    "sign",
    "signal",
    "sin",
    "sinh",
    "size",
    "sort",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "stop_gradient",
    "subtract",
    "tan",
    "tanh",
    "tensordot",
    "tile",
    "transpose",
    "truediv",
    "uint8",
    "unstack",
    "where",
    "zeros",
    "zeros_like",
]


# -- tf.function ------------------------------------------------------------------------


def function(
    func: Callable[..., Any] | None = None,
    input_signature: Any = None,
    autograph: bool = True,
    jit_compile: bool | None = None,
    reduce_retracing: bool = False,
    **kwargs: Any,
) -> Any:
    """``@tf.function`` and ``@tf.function(...)``: :func:`gputape.function` under TensorFlow's name.

    The function is traced once per input signature and replayed afterwards
    (see :mod:`gputape.function` for the rules: Python side effects run at
    trace time only, ``tf.print`` at every call, a tensor's value used in a
    Python ``if`` raises ``gt.TracingError``).

    * ``input_signature``: a list of :class:`TensorSpec` (or nests of them).
      Every call is checked against it (a wrong rank, dtype or fixed size
      raises ``gputape.function.InputSignatureError``, both a TypeError and a
      ValueError, naming the argument and both specs; Python numbers and lists
      are converted to the spec's dtype), and the function counts one trace
      for all sizes along ``None`` dimensions. (The replay itself is
      specialised to shapes: a new size re-records it, see ``recording_count``.)
    * ``reduce_retracing=True``: a second shape of a tensor argument counts as
      one more trace whose shape has ``None`` where the two differ, and later
      shapes that fit it count as no new trace, as TensorFlow generalises.
    * ``autograph`` and ``jit_compile`` are accepted and have no effect.

    The original function is at ``.python_function``.

    >>> import gputape.tf as tf
    >>> @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.float32)])
    ... def total(x):
    ...     return tf.reduce_sum(x)
    >>> float(total(tf.constant([1.0, 2.0]))), float(total([1.0, 2.0, 3.0])), total.experimental_get_tracing_count()
    (3.0, 6.0, 1)
    >>> @tf.function(jit_compile=True)
    ... def g(x):
    ...     return x + 1
    >>> g(tf.constant(2.0)).numpy().tolist(), g.python_function(3)
    (3.0, 4)
    """
    from ..function import Function

    def make(f: Callable[..., Any]) -> Function:
        return Function(f, input_signature=input_signature, reduce_retracing=reduce_retracing)

    return make if func is None else make(func)


# -- creation -----------------------------------------------------------------------------


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

    A Variable is read (as TensorFlow does), so a recording tape watches it
    and the returned tensor's gradient flows to the variable.

    >>> import gputape.tf as tf
    >>> str(tf.convert_to_tensor([1.0, 2.0]).dtype), type(tf.convert_to_tensor(tf.Variable(1.0))).__name__
    ('float32', 'Tensor')
    """
    if isinstance(value, Variable):
        value = value.value()
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


# -- shapes -------------------------------------------------------------------------------


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


# -- math with TensorFlow's signatures ------------------------------------------------------


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
        c = to_host(condition._data) if isinstance(condition, Tensor) else np.asarray(condition)
        return _constant(np.argwhere(c).astype(np.int64), device=current_device())
    if x is None or y is None:
        raise ValueError("tf.where: pass both x and y, or neither")
    return _ops.where(condition, x, y)


_DEFAULT_STREAM = object()  # tf.print's default: sys.stderr, looked up when the text is written


def print(
    *inputs: Any,
    output_stream: Any = _DEFAULT_STREAM,
    sep: str = " ",
    end: str = "\n",
    summarize: int | None = 3,
    name: str | None = None,
) -> None:
    """Print values, tensors in TensorFlow's layout (``tf.print``).

    As TensorFlow: the default stream is ``sys.stderr``; ``output_stream`` may be
    ``sys.stdout``, ``sys.stderr`` (the stream current when the text is written),
    a logging function (``logging.info``, ``absl.logging.warning`` ...) or
    ``"file://path"`` (appended to). Tensors show the first and last
    ``summarize`` elements of each dimension (``-1``: all), integers and bools
    as numbers, floats with six significant digits; Python structures are
    pretty-printed with their tensors formatted the same way. Inside a
    ``tf.function`` the print is a step of the compiled function: it prints at
    every call, with that call's values (Python's ``print`` prints at trace
    time only).

    >>> import sys
    >>> import gputape.tf as tf
    >>> tf.print("loss:", tf.constant(0.5), tf.range(10), output_stream=sys.stdout)
    loss: 0.5 [0 1 2 ... 7 8 9]
    >>> tf.print(tf.range(2), tf.range(2) * 2, {2: tf.range(3)}, sep=",", output_stream=sys.stdout)
    [0 1],[0 2],{2: [0 1 2]}
    """
    stream = _print_stream(output_stream)
    if summarize is not None and (not is_index(summarize) or (summarize < 0 and summarize != -1)):
        raise ValueError(f"tf.print: summarize must be a non-negative int or -1 (all elements), got {summarize!r}")
    leaves, spec = flatten(list(inputs))
    tensors = tuple(isinstance(v, Tensor) for v in leaves)  # (a replay hands every value over as an array)
    emit = functools.partial(_print_leaves, spec, tensors, stream, sep, end, 3 if summarize is None else summarize)
    tr = _state.current_trace()
    if tr is not None and tr.owned():
        # a step of the compiled function: printed now and at every replay, with that call's values
        tr.python_step(emit, tuple(v._data if t else v for v, t in zip(leaves, tensors)), wrap=False)
        return
    emit(*[v._data if t else v for v, t in zip(leaves, tensors)])


class _Stream:
    """A print destination resolved when the text is written (pytest and notebooks swap sys.stdout)."""

    def __init__(self, kind: str, target: Any = None) -> None:
        self.kind, self.target = kind, target

    def write(self, text: str) -> None:
        if self.kind == "stdout":
            sys.stdout.write(text)
        elif self.kind == "stderr":
            sys.stderr.write(text)
        elif self.kind == "file":
            with open(self.target, "a", encoding="utf-8") as f:
                f.write(text)
        else:  # a logging function: one record, without the line end (as TensorFlow logs it)
            self.target(text[:-1] if text.endswith("\n") else text)


def _print_stream(output_stream: Any) -> _Stream:
    if output_stream is _DEFAULT_STREAM or output_stream is sys.stderr or output_stream is sys.__stderr__:
        return _Stream("stderr")
    if output_stream is sys.stdout or output_stream is sys.__stdout__:
        return _Stream("stdout")
    if isinstance(output_stream, str) and output_stream.startswith("file://"):
        return _Stream("file", output_stream[len("file://") :])
    if callable(output_stream) and getattr(output_stream, "__name__", "") in _LOG_LEVELS:
        return _Stream("log", output_stream)
    raise ValueError(
        f"tf.print: unsupported output_stream {output_stream!r}. Supported: sys.stdout, sys.stderr, a logging "
        'function (logging.info, logging.warning, logging.error, absl.logging.*) or "file://<path>"'
    )


_LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "fatal", "critical"}


class _Formatted:
    """A formatted tensor inside a pretty-printed structure (its repr is the text)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _print_leaves(spec: Any, tensors: tuple, stream: _Stream, sep: str, end: str, summarize: int, *leaves: Any) -> None:
    parts = []
    for x in unflatten(spec, [_Formatted(_format_tensor(v, summarize)) if t else v for v, t in zip(leaves, tensors)]):
        if isinstance(x, (_Formatted, str)):
            parts.append(str(x))
        else:
            parts.append(pprint.pformat(x))
    stream.write(sep.join(parts) + end)


def _format_tensor(data: Any, summarize: int) -> str:
    """TensorFlow's print layout of a tensor's array: ``[0 1 2 ... 7 8 9]``, a matrix's rows on new lines."""
    a = np.asarray(to_host(data))
    if a.dtype.kind == "f" or a.dtype.kind == "c":
        fmt = _format_float
    elif a.dtype.kind == "b":
        fmt = lambda v: "1" if v else "0"  # (C++ streams print bools as 1 and 0)
    else:
        fmt = str
    return _format_dims(a, summarize, fmt, 0)


def _format_float(v: Any) -> str:
    if np.iscomplexobj(v):
        return f"({_format_float(v.real)},{_format_float(v.imag)})"
    v = float(v)
    if np.isnan(v):
        return "nan" if not np.signbit(v) else "-nan"
    return "inf" if v == np.inf else "-inf" if v == -np.inf else f"{v:.6g}"


def _format_dims(a: np.ndarray, summarize: int, fmt: Callable[[Any], str], depth: int) -> str:
    if a.ndim == 0:
        return fmt(a[()])
    n = a.shape[0]
    if summarize != -1 and n > 2 * summarize:
        idx: list[int | None] = [*builtins.range(summarize), None, *builtins.range(n - summarize, n)]
    else:
        idx = list(builtins.range(n))
    items = ["..." if i is None else _format_dims(a[i], summarize, fmt, depth + 1) for i in idx]
    joiner = " " if a.ndim == 1 else "\n" + " " * (depth + 1)
    return "[" + joiner.join(items) + "]"


# -- reordering and repeating ------------------------------------------------------------


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


# -- versions and tf.dtypes ---------------------------------------------------------------

# The TensorFlow release whose API and semantics ``gputape.tf`` follows: TensorFlow 2.16 is the first
# whose ``tf.keras`` is Keras 3, which is the Keras that ``tf.keras`` here imitates (see
# ``tf.keras.__version__``). It is not gputape's own version (``gputape.__version__``), and code
# that branches on ``tf.__version__`` takes TensorFlow 2's paths.
__version__ = "2.16.0"
version = types.SimpleNamespace(VERSION=__version__, GIT_VERSION="gputape", COMPILER_VERSION="n/a")

DType = np.dtype


def as_dtype(type_value: Any) -> np.dtype:
    """TensorFlow's ``tf.as_dtype``: the dtype for a name, a numpy type or a dtype.

    >>> import gputape.tf as tf
    >>> tf.as_dtype("float32") == tf.float32, tf.dtypes.as_dtype(bool) == tf.bool
    (True, True)
    """
    try:
        return np.dtype(type_value)
    except TypeError as e:
        raise TypeError(f"tf.as_dtype: cannot convert {type_value!r} to a dtype") from e


dtypes = types.SimpleNamespace(
    DType=DType,
    as_dtype=as_dtype,
    cast=cast,
    bool=bool,
    float16=float16,
    float32=float32,
    float64=float64,
    int8=int8,
    int16=int16,
    int32=int32,
    int64=int64,
    uint8=uint8,
)
__all__ += ["DType", "__version__", "as_dtype", "dtypes", "version"]


# -- devices: tf.device, tf.config, tf.debugging ------------------------------------------

from .. import config  # noqa: E402 - tf.config: set_soft_device_placement, list_physical_devices
from ..debug import placement as _placement  # noqa: E402
from ..device import device  # noqa: E402 - tf.device("/GPU:0") places new values there


def _set_log_device_placement(enabled: bool) -> None:
    """TensorFlow's ``tf.debugging.set_log_device_placement`` (for the calling thread).

    >>> import gputape.tf as tf
    >>> tf.debugging.set_log_device_placement(False)
    """
    _placement.log_device_placement(enabled)


debugging = types.SimpleNamespace(set_log_device_placement=_set_log_device_placement)

# tf.signal: the Fourier transforms over the innermost dimensions (gputape.fft)
from ..fft import TF_SIGNAL as _TF_SIGNAL  # noqa: E402

signal = types.SimpleNamespace(**_TF_SIGNAL)
__all__ += ["config", "debugging", "device"]
