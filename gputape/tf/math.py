"""``tf.math``: TensorFlow's names and argument orders over gputape's ops.

Every function is differentiable where TensorFlow's is. ``name=`` arguments
are accepted and ignored (gputape names no ops).

>>> import gputape.tf as tf
>>> x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
>>> tf.math.reduce_sum(x, axis=1).numpy().tolist(), tf.math.reduce_max(x).numpy().tolist()
([3.0, 7.0], 4.0)
"""

from __future__ import annotations

from typing import Any as _Any

import numpy as _np

from .. import ops as _ops
from ..core import _errors
from ..core.recording import traced as _traced
from ..core.tensor import as_tensor as _as_tensor
from ..core.tensor import constant as _constant
from ..devices.backend import xp_of as _xp_of
from ..nn import functional as _fn
from ..ops._util import norm_axis as _norm_axis
from ..ops._util import norm_list as _norm_list
from ..ops.errors import invalid_argument as _invalid_argument
from ._util import axis_arg as _axis_arg

__all__ = [
    "abs",
    "acos",
    "acosh",
    "add",
    "add_n",
    "argmax",
    "argmin",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "ceil",
    "cos",
    "cosh",
    "count_nonzero",
    "cumprod",
    "cumsum",
    "divide",
    "divide_no_nan",
    "equal",
    "erf",
    "exp",
    "expm1",
    "floor",
    "floordiv",
    "floormod",
    "greater",
    "greater_equal",
    "is_finite",
    "is_inf",
    "is_nan",
    "l2_normalize",
    "less",
    "less_equal",
    "log",
    "log1p",
    "log_sigmoid",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "mod",
    "multiply",
    "multiply_no_nan",
    "negative",
    "nextafter",
    "not_equal",
    "pow",
    "reciprocal",
    "reduce_all",
    "reduce_any",
    "reduce_euclidean_norm",
    "reduce_logsumexp",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_std",
    "reduce_sum",
    "reduce_variance",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "softplus",
    "sqrt",
    "square",
    "squared_difference",
    "subtract",
    "tan",
    "tanh",
    "truediv",
]

# Elementwise functions whose TensorFlow signature is numpy's (x) or (x, y).
abs = _ops.abs
add = _ops.add
asinh = _ops.arcsinh


def atan2(y: _Any, x: _Any, name: str | None = None) -> _Any:
    """The angle of the point ``(x, y)``, elementwise: TensorFlow's argument names and order
    (``atan2(y=..., x=...)``; numpy's ``arctan2(x1, x2)`` names them the other way round).

    >>> import gputape.tf as tf
    >>> float(tf.math.atan2(y=1.0, x=0.0)) == float(tf.math.atan2(1.0, 0.0)) > 1.57
    True
    """
    return _ops.arctan2(y, x)


acosh = _ops.arccosh
atanh = _ops.arctanh
acos = _ops.arccos
asin = _ops.arcsin
atan = _ops.arctan
ceil = _ops.ceil
cos = _ops.cos
cosh = _ops.cosh
divide = _ops.divide
truediv = _ops.divide
equal = _ops.equal
erf = _ops.erf
exp = _ops.exp
expm1 = _ops.expm1
floor = _ops.floor
greater = _ops.greater
greater_equal = _ops.greater_equal
is_finite = _ops.isfinite
is_inf = _ops.isinf
is_nan = _ops.isnan
less = _ops.less
less_equal = _ops.less_equal
log = _ops.log
log1p = _ops.log1p
logical_and = _ops.logical_and
logical_not = _ops.logical_not
logical_or = _ops.logical_or
logical_xor = _ops.logical_xor
floordiv = _ops.floor_divide
floormod = mod = _ops.mod  # numpy's mod is the floored one, as TensorFlow's floormod
maximum = _ops.maximum
minimum = _ops.minimum
multiply = _ops.multiply
multiply_no_nan = _ops.multiply_no_nan
negative = _ops.negative
not_equal = _ops.not_equal
pow = _ops.power
reciprocal = _ops.reciprocal
round = _ops.round
sign = _ops.sign
sin = _ops.sin
sinh = _ops.sinh
sqrt = _ops.sqrt
square = _ops.square
subtract = _ops.subtract
tan = _ops.tan
tanh = _ops.tanh
sigmoid = _fn.sigmoid
softplus = _fn.softplus


def reduce_sum(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Sum over ``axis`` (all axes when None).

    >>> import gputape.tf as tf
    >>> tf.reduce_sum(tf.ones((2, 3)), axis=[0, 1]).numpy().tolist()
    6.0
    """
    return _ops.sum(input_tensor, _axis_arg(axis), keepdims)


def reduce_mean(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Mean over ``axis``.

    >>> import gputape.tf as tf
    >>> tf.reduce_mean(tf.constant([1.0, 2.0])).numpy().tolist()
    1.5
    """
    return _ops.mean(input_tensor, _axis_arg(axis), keepdims)


def reduce_max(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Maximum over ``axis``.

    >>> import gputape.tf as tf
    >>> tf.reduce_max(tf.constant([[1.0, 5.0]]), axis=1).numpy().tolist()
    [5.0]
    """
    return _ops.max(input_tensor, _axis_arg(axis), keepdims)


def reduce_min(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Minimum over ``axis``.

    >>> import gputape.tf as tf
    >>> tf.reduce_min(tf.constant([1.0, 5.0])).numpy().tolist()
    1.0
    """
    return _ops.min(input_tensor, _axis_arg(axis), keepdims)


def reduce_prod(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Product over ``axis``.

    >>> import gputape.tf as tf
    >>> tf.math.reduce_prod(tf.constant([2.0, 3.0])).numpy().tolist()
    6.0
    """
    return _ops.prod(input_tensor, _axis_arg(axis), keepdims)


def reduce_logsumexp(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """``log(sum(exp(x)))`` over ``axis``, computed stably.

    >>> import gputape.tf as tf
    >>> print(f"{float(tf.reduce_logsumexp(tf.constant([0.0, 0.0]))):.4f}")
    0.6931
    """
    return _ops.logsumexp(input_tensor, _axis_arg(axis), keepdims)


def reduce_variance(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Population variance over ``axis``.

    >>> import gputape.tf as tf
    >>> tf.math.reduce_variance(tf.constant([1.0, 3.0])).numpy().tolist()
    1.0
    """
    return _ops.var(input_tensor, _axis_arg(axis), keepdims)


def reduce_std(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Population standard deviation over ``axis``.

    >>> import gputape.tf as tf
    >>> tf.math.reduce_std(tf.constant([1.0, 3.0])).numpy().tolist()
    1.0
    """
    return _ops.std(input_tensor, _axis_arg(axis), keepdims)


def reduce_all(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Logical AND over ``axis`` (no gradient).

    >>> import gputape.tf as tf
    >>> bool(tf.reduce_all(tf.constant([True, False])))
    False
    """
    return _ops.min(_ops.cast(input_tensor, "bool"), _axis_arg(axis), keepdims)


def reduce_any(input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None) -> _Any:
    """Logical OR over ``axis`` (no gradient).

    >>> import gputape.tf as tf
    >>> bool(tf.reduce_any(tf.constant([True, False])))
    True
    """
    return _ops.max(_ops.cast(input_tensor, "bool"), _axis_arg(axis), keepdims)


def argmax(input: _Any, axis: _Any = None, output_type: _Any = "int64", name: str | None = None) -> _Any:
    """Index of the largest entry along ``axis`` (TensorFlow's default axis is 0, not all).

    >>> import gputape.tf as tf
    >>> tf.argmax(tf.constant([[1.0, 9.0], [5.0, 2.0]])).numpy().tolist()
    [1, 0]
    """
    return _ops.cast(_ops.argmax(input, 0 if axis is None else _axis_arg(axis)), output_type)


def argmin(input: _Any, axis: _Any = None, output_type: _Any = "int64", name: str | None = None) -> _Any:
    """Index of the smallest entry along ``axis`` (default 0).

    >>> import gputape.tf as tf
    >>> tf.argmin(tf.constant([3.0, 1.0])).numpy().tolist()
    1
    """
    return _ops.cast(_ops.argmin(input, 0 if axis is None else _axis_arg(axis)), output_type)


def add_n(inputs: list[_Any], name: str | None = None) -> _Any:
    """Elementwise sum of a non-empty list of tensors of one shape (TensorFlow's rule: no broadcasting).

    >>> import gputape.tf as tf
    >>> tf.add_n([tf.constant([1.0]), tf.constant([2.0])]).numpy().tolist()
    [3.0]
    """
    items = _norm_list(inputs, "add_n", "a list of tensors")
    if not items:
        raise _errors.argument_error(inputs, "is empty: add_n needs at least one tensor", cls=ValueError)
    ts = [_as_tensor(t) for t in items]
    for i, t in enumerate(ts[1:], 1):
        if t.shape != ts[0].shape:  # TensorFlow's rule: no broadcasting in add_n
            raise _errors.argument_error(
                items[i],
                f"has shape {t.shape}, inputs[0] has {ts[0].shape}: add_n needs equal shapes",
                arg=f"inputs[{i}]",
                cls=ValueError,
            )
    total = ts[0]
    for t in ts[1:]:
        total = total + t
    return total


def rsqrt(x: _Any, name: str | None = None) -> _Any:
    """``1 / sqrt(x)``.

    >>> import gputape.tf as tf
    >>> tf.math.rsqrt(tf.constant([4.0])).numpy().tolist()
    [0.5]
    """
    return _ops.reciprocal(_ops.sqrt(x))


def squared_difference(x: _Any, y: _Any, name: str | None = None) -> _Any:
    """``(x - y) ** 2``.

    >>> import gputape.tf as tf
    >>> tf.math.squared_difference(tf.constant([3.0]), 1.0).numpy().tolist()
    [4.0]
    """
    return _ops.square(_ops.subtract(x, y))


def divide_no_nan(x: _Any, y: _Any, name: str | None = None) -> _Any:
    """``x / y``, and 0 where ``y == 0`` (with a zero gradient there).

    >>> import gputape.tf as tf
    >>> tf.math.divide_no_nan(tf.constant([1.0, 1.0]), tf.constant([2.0, 0.0])).numpy().tolist()
    [0.5, 0.0]
    """
    y = _as_tensor(y)
    nz = _ops.not_equal(y, 0)
    safe = _ops.where(nz, y, _ops.ones_like(y))
    return _ops.where(nz, _ops.divide(x, safe), _ops.zeros_like(safe))


def log_sigmoid(x: _Any, name: str | None = None) -> _Any:
    """``log(sigmoid(x)) = -softplus(-x)``, stable for large ``|x|``.

    >>> import gputape.tf as tf
    >>> print(f"{float(tf.math.log_sigmoid(tf.constant(0.0))):.4f}")
    -0.6931
    """
    return _ops.negative(_fn.softplus(_ops.negative(x)))


def l2_normalize(x: _Any, axis: _Any = None, epsilon: float = 1e-12, name: str | None = None) -> _Any:
    """``x / sqrt(max(sum(x**2, axis), epsilon))``.

    >>> import gputape.tf as tf
    >>> tf.math.l2_normalize(tf.constant([3.0, 4.0], tf.float64)).numpy().round(2).tolist()
    [0.6, 0.8]
    """
    x = _as_tensor(x)
    ss = _ops.sum(_ops.square(x), _axis_arg(axis), True)
    return x * rsqrt(_ops.maximum(ss, epsilon))


def _cumulative(op: _Any, x: _Any, axis: int, exclusive: bool, reverse: bool, start: float) -> _Any:
    x = _as_tensor(x)
    ax = _norm_axis(axis, max(x.ndim, 1), op.__name__)
    if reverse:
        x = _ops.flip(x, ax)
    if exclusive:  # the scan of everything before each entry: shift by one, the identity first
        y = op(x[(slice(None),) * ax + (slice(None, -1),)], axis=ax)
        y = _ops.pad(y, [(1, 0) if i == ax else (0, 0) for i in range(x.ndim)], constant_values=start)
    else:
        y = op(x, axis=ax)
    return _ops.flip(y, ax) if reverse else y


def cumsum(x: _Any, axis: int = 0, exclusive: bool = False, reverse: bool = False, name: str | None = None) -> _Any:
    """Cumulative sum along ``axis``; ``exclusive`` leaves each entry out, ``reverse`` runs from the end.

    >>> import gputape.tf as tf
    >>> x = tf.constant([1.0, 2.0, 3.0])
    >>> tf.math.cumsum(x).numpy().tolist(), tf.math.cumsum(x, exclusive=True, reverse=True).numpy().tolist()
    ([1.0, 3.0, 6.0], [5.0, 3.0, 0.0])
    """
    return _cumulative(_ops.cumsum, x, axis, exclusive, reverse, 0)


def cumprod(x: _Any, axis: int = 0, exclusive: bool = False, reverse: bool = False, name: str | None = None) -> _Any:
    """Cumulative product along ``axis`` (``exclusive``/``reverse`` as for ``cumsum``).

    >>> import gputape.tf as tf
    >>> tf.math.cumprod(tf.constant([1.0, 2.0, 3.0]), exclusive=True).numpy().tolist()
    [1.0, 1.0, 2.0]
    """
    return _cumulative(_ops.cumprod, x, axis, exclusive, reverse, 1)


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations


def reduce_euclidean_norm(
    input_tensor: _Any, axis: _Any = None, keepdims: bool = False, name: str | None = None
) -> _Any:
    """The 2-norm over ``axis`` (all axes when None): ``sqrt(reduce_sum(|x|**2))``.

    The gradient is ``x / norm``, NaN where the norm is 0, as TensorFlow's.

    >>> import gputape.tf as tf
    >>> tf.math.reduce_euclidean_norm(tf.constant([[3.0, 4.0], [6.0, 8.0]]), axis=1).numpy().tolist()
    [5.0, 10.0]
    """
    x = _as_tensor(input_tensor)
    sq = _ops.square(_ops.abs(x)) if x.dtype.kind == "c" else _ops.square(x)
    return _ops.sqrt(_ops.sum(sq, _axis_arg(axis), keepdims))


def count_nonzero(
    input: _Any, axis: _Any = None, keepdims: _Any = None, dtype: _Any = "int64", name: str | None = None
) -> _Any:
    """How many entries over ``axis`` are not zero (not False, for bool), as ``dtype`` (no gradient).

    >>> import gputape.tf as tf
    >>> tf.math.count_nonzero(tf.constant([[0.0, 1.5], [2.0, 0.0]]), axis=0).numpy().tolist()
    [1, 1]
    """
    x = _as_tensor(input)
    nonzero = _ops.not_equal(x, False if x.dtype.kind == "b" else 0)
    return _ops.sum(_ops.cast(nonzero, dtype), _axis_arg(axis), bool(keepdims))


def nextafter(x1: _Any, x2: _Any, name: str | None = None) -> _Any:
    """The next representable value after ``x1`` towards ``x2``, elementwise (float32/float64).

    It has no gradient (a step function of its inputs; TensorFlow registers none either).

    >>> import gputape.tf as tf, numpy as np
    >>> float(tf.math.nextafter(tf.constant(1.0, tf.float64), 2.0)) == float(np.nextafter(1.0, 2.0))
    True
    """
    a, b = _as_tensor(x1), _as_tensor(x2)
    # mixed dtypes follow numpy's promotion, as gputape's other binary ops (TensorFlow wants one dtype)
    dt = _np.result_type(a.dtype, b.dtype) if a.dtype != b.dtype else a.dtype
    if dt not in (_np.float32, _np.float64):
        raise _invalid_argument(
            f"tf.math.nextafter: arguments x1 ({a.dtype}) and x2 ({b.dtype}) must be float32 or float64 "
            "tensors; tf.cast them"
        )
    a, b = _ops.cast(a, dt), _ops.cast(b, dt)
    out = _constant(_nextafter(a._data, b._data), device=a.device)
    _traced(_nextafter, (a, b), out._data)  # a gt.function replay computes it from that call's values
    return out


def _nextafter(x1: _Any, x2: _Any) -> _Any:
    return _xp_of(x1).nextafter(x1, x2)


# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
