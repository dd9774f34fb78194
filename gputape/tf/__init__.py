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
from . import data, keras, linalg, math, nn, optimizers, profiler, random

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


# -- versions and tf.dtypes ---------------------------------------------------------------

# The TensorFlow release whose API and semantics ``gputape.tf`` follows: TensorFlow 2.16 is the first
# whose ``tf.keras`` is Keras 3, which is the Keras that ``tf.keras`` here imitates (see
# ``tf.keras.__version__``). It is not gputape's own version (``gputape.__version__``), and code
# that branches on ``tf.__version__`` takes TensorFlow 2's paths.
__version__ = "2.16.0"
version = _types.SimpleNamespace(VERSION=__version__, GIT_VERSION="gputape", COMPILER_VERSION="n/a")

DType = _np.dtype


def as_dtype(type_value: _Any) -> _np.dtype:
    """TensorFlow's ``tf.as_dtype``: the dtype for a name, a numpy type or a dtype.

    >>> import gputape.tf as tf
    >>> tf.as_dtype("float32") == tf.float32, tf.dtypes.as_dtype(bool) == tf.bool
    (True, True)
    """
    try:
        return _np.dtype(type_value)
    except TypeError as e:
        raise TypeError(f"tf.as_dtype: cannot convert {type_value!r} to a dtype") from e


dtypes = _types.SimpleNamespace(
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


debugging = _types.SimpleNamespace(set_log_device_placement=_set_log_device_placement)

# tf.signal: the Fourier transforms over the innermost dimensions (gputape.fft)
from ..ops.fft import TF_SIGNAL as _TF_SIGNAL  # noqa: E402

signal = _types.SimpleNamespace(**_TF_SIGNAL)
__all__ += ["config", "debugging", "device"]

# -- Python control flow in tf.function: tf.autograph, tf.TensorShape ------------------------
from ..function import do_not_convert as _do_not_convert  # noqa: E402
from ._shape import TensorShape  # noqa: E402

autograph = _types.SimpleNamespace(experimental=_types.SimpleNamespace(do_not_convert=_do_not_convert))
__all__ += ["TensorShape", "autograph"]

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations
