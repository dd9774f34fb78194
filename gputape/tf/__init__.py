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

import types as _types
from typing import Any as _Any

import numpy as _np

from ..core.custom_gradient import custom_gradient
from ..core.module import Module
from ..core.tape import GradientTape, UnconnectedGradients
from ..core.tensor import (
    Tensor,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from ..core.tensor import bool_ as bool
from ..function import TensorSpec
from ..optim.clip import clip_by_global_norm, clip_by_norm
from . import data, keras, linalg, math, nn, optimizers, profiler, random, train

# tf's own top-level functions, by concern (creation, array ops, tf.print, tf.function)
from ._array_ops import (
    argsort,
    cast,
    clip_by_value,
    concat,
    einsum,
    expand_dims,
    gather,
    identity,
    rank,
    repeat,
    reshape,
    reverse,
    roll,
    shape,
    size,
    sort,
    split,
    squeeze,
    stack,
    stop_gradient,
    tensordot,
    tile,
    transpose,
    unstack,
    where,
)
from ._creation import (
    constant,
    convert_to_tensor,
    eye,
    fill,
    linspace,
    one_hot,
    ones,
    ones_like,
    range,
    zeros,
    zeros_like,
)
from ._function import function
from ._print import print
from ._util import Namespace as _Namespace
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
    "summary",
    "tan",
    "tanh",
    "tensordot",
    "tile",
    "train",
    "transpose",
    "truediv",
    "uint8",
    "unstack",
    "where",
    "zeros",
    "zeros_like",
]


# -- versions and tf.dtypes ---------------------------------------------------------------

# The TensorFlow release whose API and semantics ``gputape.tf`` follows: TensorFlow 2.16 is the first
# whose ``tf.keras`` is Keras 3, which is the Keras that ``tf.keras`` here imitates (see
# ``tf.keras.__version__``). It is not gputape's own version (``gputape.__version__``), and code
# that branches on ``tf.__version__`` takes TensorFlow 2's paths.
__version__ = "2.16.0"
version = _types.SimpleNamespace(VERSION=__version__, GIT_VERSION="gputape", COMPILER_VERSION="n/a")


class DType:
    """TensorFlow's dtype object over a numpy dtype: ``tf.float32.as_numpy_dtype`` is ``np.float32``.

    It equals (and hashes as) its numpy dtype, and numpy and gputape take it wherever they take a
    dtype (numpy reads its ``dtype`` attribute), so ``x.dtype == tf.float32`` holds for a tensor
    whose ``dtype`` is numpy's; a tensor's own ``.dtype`` stays numpy's. numpy's attributes
    (``kind``, ``itemsize``, ``type`` ...) are forwarded.

    >>> import gputape.tf as tf, numpy as np
    >>> tf.float64.as_numpy_dtype is np.float64, tf.float32.name, tf.float32.is_floating
    (True, 'float32', True)
    >>> tf.constant([1.0]).dtype == tf.float32, np.zeros(2, dtype=tf.int32).dtype
    (True, dtype('int32'))
    """

    __slots__ = ("dtype",)

    def __init__(self, type_value: _Any) -> None:
        object.__setattr__(self, "dtype", _np.dtype(type_value))

    def __getattr__(self, name: str) -> _Any:
        if name == "dtype":  # (only while unpickling, before __init__ ran)
            raise AttributeError(name)
        return getattr(self.dtype, name)

    def __setattr__(self, name: str, value: _Any) -> None:
        raise AttributeError(f"tf.DType is immutable (cannot set {name!r})")

    def __reduce__(self) -> tuple:
        return (DType, (self.dtype.str,))

    def __eq__(self, other: _Any) -> bool:
        if other is None:  # (numpy reads None as float64)
            return False
        try:
            return self.dtype == _np.dtype(other)
        except TypeError:
            return False

    def __ne__(self, other: _Any) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.dtype)

    def __repr__(self) -> str:
        return f"tf.{self.name}"

    @property
    def name(self) -> str:
        return self.dtype.name

    @property
    def as_numpy_dtype(self) -> type:
        return self.dtype.type

    @property
    def base_dtype(self) -> DType:
        return self

    @property
    def real_dtype(self) -> DType:
        return DType(_np.finfo(self.dtype).dtype) if self.dtype.kind == "c" else self

    @property
    def is_floating(self) -> bool:
        return self.dtype.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.dtype.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.dtype.kind in "ub"

    @property
    def is_complex(self) -> bool:
        return self.dtype.kind == "c"

    @property
    def is_bool(self) -> bool:
        return self.dtype.kind == "b"

    @property
    def size(self) -> int:
        return self.dtype.itemsize

    @property
    def min(self) -> _Any:
        d = self.dtype
        return False if d.kind == "b" else (_np.iinfo(d).min if d.kind in "iu" else _np.finfo(d).min)

    @property
    def max(self) -> _Any:
        d = self.dtype
        return True if d.kind == "b" else (_np.iinfo(d).max if d.kind in "iu" else _np.finfo(d).max)

    def is_compatible_with(self, other: _Any) -> bool:
        return self == other


def as_dtype(type_value: _Any) -> DType:
    """TensorFlow's ``tf.as_dtype``: the dtype for a name, a numpy type or a dtype.

    >>> import gputape.tf as tf
    >>> tf.as_dtype("float32") == tf.float32, tf.dtypes.as_dtype(bool) == tf.bool
    (True, True)
    """
    if isinstance(type_value, DType):
        return type_value
    try:
        return DType(type_value)
    except TypeError as e:
        raise TypeError(f"tf.as_dtype: cannot convert {type_value!r} to a dtype") from e


# tf's dtype objects (gputape's own, gt.float32 ..., are numpy's dtypes)
bool, float16, float32, float64 = DType(bool), DType(float16), DType(float32), DType(float64)  # type: ignore[assignment]
int8, int16, int32, int64, uint8 = DType(int8), DType(int16), DType(int32), DType(int64), DType(uint8)  # type: ignore[assignment]


dtypes = _Namespace(
    "dtypes",
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
from ..devices.placement import device  # noqa: E402 - tf.device("/GPU:0") places new values there


def _set_log_device_placement(enabled: bool) -> None:
    """TensorFlow's ``tf.debugging.set_log_device_placement`` (for the calling thread).

    >>> import gputape.tf as tf
    >>> tf.debugging.set_log_device_placement(False)
    """
    _placement.log_device_placement(enabled)


# tf.signal: the Fourier transforms over the innermost dimensions (gputape.fft)
from ..ops.fft import TF_SIGNAL as _TF_SIGNAL  # noqa: E402

signal = _Namespace("signal", **_TF_SIGNAL)
__all__ += ["config", "debugging", "device"]

# -- control flow: tf.cond, tf.while_loop, tf.map_fn, tf.TensorArray, ... --------------------

from ..ops.control_flow import (  # noqa: E402
    TensorArray,
    case,
    cond,
    foldl,
    foldr,
    map_fn,
    scan,
    switch_case,
    vectorized_map,
    while_loop,
)

__all__ += [
    "TensorArray",
    "case",
    "cond",
    "foldl",
    "foldr",
    "map_fn",
    "scan",
    "switch_case",
    "vectorized_map",
    "while_loop",
]

# -- the names TensorFlow's tests and guides use: array ops, tf.errors, tf.raw_ops, numerics checks ------

from ..debug import numerics as _numerics  # noqa: E402
from . import errors, image, raw_ops  # noqa: E402
from ._array_ops import (  # noqa: E402
    boolean_mask,
    broadcast_to,
    executing_eagerly,
    get_static_value,
    is_tensor,
    pad,
    slice,
)
from ._util import missing_name as _missing_name  # noqa: E402


def _enable_check_numerics(stack_height_limit: int = 30, path_length_limit: int = 50) -> None:
    """TensorFlow's ``tf.debugging.enable_check_numerics``: every op (forward and backward) that makes
    an inf or NaN raises, naming the op (gputape's :func:`gputape.debug.enable_check_numerics`, for the
    calling thread; it raises ``FloatingPointError`` where TensorFlow raises ``InvalidArgumentError``).

    >>> import gputape.tf as tf
    >>> tf.debugging.enable_check_numerics()
    >>> tf.math.log(tf.constant([1.0])).numpy().tolist()
    [0.0]
    >>> tf.debugging.disable_check_numerics()
    """
    _numerics.enable_check_numerics()


def _disable_check_numerics() -> None:
    """TensorFlow's ``tf.debugging.disable_check_numerics`` (a no-op when the check is off, as there).

    >>> import gputape.tf as tf
    >>> tf.debugging.disable_check_numerics()
    """
    try:
        _numerics.disable_check_numerics()
    except RuntimeError:
        pass


def _check_numerics(tensor: _Any, message: str, name: str | None = None) -> Tensor:
    """TensorFlow's ``tf.debugging.check_numerics``: ``tensor`` itself (a differentiable identity), or
    ``InvalidArgumentError`` with ``message`` when it holds an inf or NaN.

    >>> import gputape.tf as tf
    >>> tf.debugging.check_numerics(tf.constant([1.0]), "x").numpy().tolist()
    [1.0]
    """
    t = identity(tensor)
    host = t.numpy()
    if t.dtype.kind in "fc" and not _np.isfinite(host).all():
        what = "NaN" if _np.isnan(host).any() else "Inf"
        raise errors.InvalidArgumentError(None, None, f"{message} : Tensor had {what} values")
    return t


debugging = _Namespace(
    "debugging",
    set_log_device_placement=_set_log_device_placement,
    enable_check_numerics=_enable_check_numerics,
    disable_check_numerics=_disable_check_numerics,
    check_numerics=_check_numerics,
)
__all__ += [
    "boolean_mask",
    "broadcast_to",
    "errors",
    "executing_eagerly",
    "get_static_value",
    "image",
    "is_tensor",
    "pad",
    "raw_ops",
    "slice",
]
# tf.float64 ... are tf.DType objects (above); tf.dtypes holds the same ones
__getattr__ = _missing_name(__name__)

# -- Python control flow in tf.function: tf.autograph, tf.TensorShape ------------------------
from ..function import do_not_convert as _do_not_convert  # noqa: E402
from ._shape import TensorShape  # noqa: E402

autograph = _types.SimpleNamespace(experimental=_types.SimpleNamespace(do_not_convert=_do_not_convert))
__all__ += ["TensorShape", "autograph"]

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# tf.summary: TensorBoard event files (tensorboardX writes them; an optional extra)
from . import summary  # noqa: E402
