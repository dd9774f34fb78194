"""The op library: numpy-named functions over gputape tensors.

Importing this package registers every primitive in ``gputape.core.tape.REGISTRY``,
attaches the operators and methods to :class:`~gputape.Tensor`, and builds
the two namespaces the backward sweep hands to VJPs: the raw array module
(numpy or cupy, plus a few helpers) and gputape's own differentiable ops.
Because gputape uses numpy's names and signatures, one VJP serves both.
"""

from __future__ import annotations

import sys as _sys
import types
from functools import partial
from typing import Any

import numpy as np

from .. import config
from ..core import _errors
from ..core.primitive import REGISTRY
from ..core.tensor import Tensor, Variable, _wrap
from ..devices import backend as _backend
from . import _methods, _protocols, creation, elementwise, reduce, shape
from ._util import norm_dtype as _norm_dtype
from ._util import sum_to as _sum_to_impl
from .aliases import around, fabs, nan_to_num

# TensorFlow's control flow (tf.cond, tf.while_loop, ...), composed of the recorded ops above
from .control_flow import (
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
from .creation import (
    arange,
    argmax,
    argmin,
    equal,
    eye,
    full,
    greater,
    greater_equal,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    linspace,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    not_equal,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .elementwise import (
    abs,
    add,
    angle,
    arccos,
    arccosh,
    arcsin,
    arcsinh,
    arctan,
    arctan2,
    arctanh,
    cast,
    ceil,
    clip,
    conj,
    conjugate,
    cos,
    cosh,
    deg2rad,
    divide,
    erf,
    exp,
    exp2,
    expm1,
    floor,
    floor_divide,
    fmax,
    fmin,
    hypot,
    identity,
    imag,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logaddexp2,
    maximum,
    minimum,
    mod,
    multiply,
    multiply_no_nan,
    negative,
    power,
    rad2deg,
    real,
    reciprocal,
    round,
    sign,
    sin,
    sinc,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    where,
)
from .joining import (
    append,
    array_split,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    column_stack,
    dsplit,
    dstack,
    hsplit,
    hstack,
    select,
    vsplit,
    vstack,
)
from .matmul import dot, einsum, matmul
from .products import cross, diag, diagonal, inner, kron, outer, tensordot, trace, tril, triu
from .reduce import logsumexp, max, mean, min, prod, std, sum, var
from .reorder import (
    argpartition,
    argsort,
    flip,
    fliplr,
    flipud,
    partition,
    repeat,
    roll,
    rot90,
    sort,
    take_along_axis,
    tile,
)
from .scan import cumprod, cumsum, diff
from .shape import (
    broadcast_to,
    concatenate,
    expand_dims,
    flatten,
    getitem,
    moveaxis,
    pad,
    ravel,
    reshape,
    scatter,
    split,
    squeeze,
    stack,
    swapaxes,
    take,
    transpose,
)

true_divide = divide
absolute = abs
remainder = mod  # numpy's remainder is its mod (one ufunc, two names)
amax = max
amin = min
row_stack = vstack  # numpy's older name for vstack (deprecated there, same function)

# The ops' own names: not the modules, and not what the ops import from core (gt.Tensor, gt.REGISTRY
# are gputape's: each name has one public path). Written out, because type checkers read a star
# import's names only from a literal __all__; tests/test_typing.py checks it lists every op defined above.
__all__ = [
    "TensorArray",
    "abs",
    "absolute",
    "add",
    "amax",
    "amin",
    "angle",
    "append",
    "arange",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "argmax",
    "argmin",
    "argpartition",
    "argsort",
    "around",
    "array_split",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_to",
    "case",
    "cast",
    "ceil",
    "clip",
    "column_stack",
    "concatenate",
    "cond",
    "conj",
    "conjugate",
    "cos",
    "cosh",
    "cross",
    "cumprod",
    "cumsum",
    "deg2rad",
    "diag",
    "diagonal",
    "diff",
    "divide",
    "dot",
    "dsplit",
    "dstack",
    "einsum",
    "equal",
    "erf",
    "exp",
    "exp2",
    "expand_dims",
    "expm1",
    "eye",
    "fabs",
    "flatten",
    "flip",
    "fliplr",
    "flipud",
    "floor",
    "floor_divide",
    "fmax",
    "fmin",
    "foldl",
    "foldr",
    "full",
    "getitem",
    "greater",
    "greater_equal",
    "hsplit",
    "hstack",
    "hypot",
    "identity",
    "imag",
    "inner",
    "isfinite",
    "isinf",
    "isnan",
    "kron",
    "less",
    "less_equal",
    "linspace",
    "log",
    "log1p",
    "log2",
    "log10",
    "logaddexp",
    "logaddexp2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logsumexp",
    "map_fn",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mod",
    "moveaxis",
    "multiply",
    "multiply_no_nan",
    "nan_to_num",
    "negative",
    "not_equal",
    "ones",
    "ones_like",
    "outer",
    "pad",
    "partition",
    "power",
    "prod",
    "rad2deg",
    "ravel",
    "real",
    "reciprocal",
    "remainder",
    "repeat",
    "reshape",
    "roll",
    "rot90",
    "round",
    "row_stack",
    "scan",
    "scatter",
    "select",
    "sign",
    "sin",
    "sinc",
    "sinh",
    "sort",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "subtract",
    "sum",
    "swapaxes",
    "switch_case",
    "take",
    "take_along_axis",
    "tan",
    "tanh",
    "tensordot",
    "tile",
    "trace",
    "transpose",
    "tril",
    "triu",
    "true_divide",
    "var",
    "vectorized_map",
    "vsplit",
    "vstack",
    "where",
    "while_loop",
    "zeros",
    "zeros_like",
]


# -- the two namespaces VJPs are written against --------------------------------------

# Names VJPs may call on F. Each exists in numpy/cupy and in gputape with the
# same meaning; sum_to/scatter/getitem are gputape's own and get raw versions.
_F_NAMES = (
    "broadcast_to concatenate cos cosh einsum exp expand_dims floor_divide log matmul moveaxis "
    "multiply_no_nan "
    "prod reshape sign sin sinh split squeeze stack sum swapaxes transpose where zeros zeros_like "
    "abs expm1 log1p maximum minimum sqrt tan tanh"  # (functions derivative expressions call: gputape.core.expr)
    " conj real imag"  # (complex VJPs: gputape.core.tape's complex nodes, the linalg VJPs)
).split()


def _raw_getitem(g: Any, idx: tuple, nlead: int, adv: bool) -> Any:
    return g[(slice(None),) * nlead + idx]


def _np_sum(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    if x.dtype.kind == "b":
        return np.sum(x, axis=axis, keepdims=keepdims)  # add.reduce would give a bool
    return np.add.reduce(x, axis=axis, keepdims=keepdims)


class _Namespace(types.SimpleNamespace):
    """A VJP namespace ``F``: array functions by name, and every registered primitive by its name.

    A name the namespace was not built with (``F.sigmoid``, ``F.softmax``, ``F.erf``: primitives
    declared elsewhere, also above this layer) is looked up in the registry on first use and
    kept: in the raw namespace of array module ``xp`` it is the primitive's forward on ``xp``'s
    arrays, in :data:`DIFF_NAMESPACE` the public function the primitive declares
    (``Primitive.public``), so a recording tape records it. Nothing is pushed into the
    namespaces from outside.
    """

    def __getattr__(self, name: str) -> Any:
        prim = REGISTRY.get(name)
        fn = None if prim is None else self._resolve(prim)
        if fn is None:
            why = (
                "neither an array function nor a primitive"
                if prim is None
                else "the primitive declares no public function (set Primitive.public) for VJPs on tensors"
            )
            raise AttributeError(f"the VJP namespace has no {name!r}: {why}")
        setattr(self, name, fn)
        return fn

    def _resolve(self, prim: Any) -> Any:
        xp = self.__dict__.get("xp")
        if xp is None:
            return prim.public
        return partial(prim.fwd, xp)


_raw_cache: dict[Any, Any] = {}


def raw_namespace(xp: Any) -> Any:
    """The namespace VJPs see in the fast (unrecorded) sweep: ``xp`` plus gputape's helpers."""
    ns = _raw_cache.get(xp)
    if ns is None:
        ns = _Namespace(**{n: getattr(xp, n) for n in _F_NAMES if hasattr(xp, n)})
        if xp is np:
            ns.sum = _np_sum  # VJPs sum floats: the ufunc method, without np.sum's wrappers
        ns.multiply_no_nan = partial(elementwise._mul_no_nan_fwd, xp)
        ns.sum_to = partial(_sum_to_impl, ns)
        ns.scatter = partial(shape._raw_scatter, xp)
        ns.getitem = _raw_getitem
        ns.xp = xp
        ns.gpu = xp is not np  # generated VJPs launch one fused kernel on a GPU
        _raw_cache[xp] = ns
    return ns


_g = globals()
DIFF_NAMESPACE = _Namespace(**{n: _g[n] for n in _F_NAMES})
DIFF_NAMESPACE.sum_to = partial(_sum_to_impl, DIFF_NAMESPACE)
DIFF_NAMESPACE.scatter = scatter
DIFF_NAMESPACE.getitem = getitem
DIFF_NAMESPACE.xp = None
DIFF_NAMESPACE.gpu = False


# -- operators and methods on Tensor ---------------------------------------------------


def _r(f: Any, name: str) -> Any:
    """``Tensor.<name>``, the reflected operator of ``f``: ``other <op> self`` as ``f(other, self)``."""

    @_errors.forwarder  # an error names f's parameters: `300 + t` reports x = 300, y = t
    def rop(self: Any, other: Any) -> Any:
        return f(other, self)

    rop.__name__ = name
    rop.__qualname__ = f"Tensor.{name}"
    return rop


def _reshape_m(self, *shape):
    return reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)


def _transpose_m(self, *axes):
    return transpose(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None))


def _same(self):
    # A Variable is mutable: hand out a snapshot of its value, never the variable.
    return self.value() if type(self) is Variable else self


def _astype_m(self, dtype):
    if self._data.dtype == _norm_dtype(dtype, "cast"):
        return _same(self)
    return cast(self, dtype)


def tensor_to(t: Any, device: str) -> Any:
    """``Tensor.to(device)``: the same tensor when it is already there, else a constant copy.

    >>> import gputape as gt
    >>> x = gt.constant([1.0], device="cpu")
    >>> tensor_to(x, "cpu") is x
    True
    """
    dev = _backend.parse_device(device)
    if _backend.device_of(t._data) == dev:
        # a Variable is mutable: hand out a snapshot of its value, never the variable
        return t.value() if type(t) is Variable else t
    return _wrap(_backend.to_device(t._data, dev))


def _to_m(self, device):
    """A copy on ``device`` (GPU to GPU peer to peer); the same value when already there."""
    try:
        _backend.parse_device(device)
    except (TypeError, ValueError) as exc:
        raise _errors.argument_error(device, f"is not a device: {exc}", arg="device", cls=type(exc)) from exc
    return tensor_to(self, device)


_T = Tensor
_T.__add__ = add
_T.__radd__ = _r(add, "__radd__")
_T.__sub__ = subtract
_T.__rsub__ = _r(subtract, "__rsub__")
_T.__mul__ = multiply
_T.__rmul__ = _r(multiply, "__rmul__")
_T.__truediv__ = divide
_T.__rtruediv__ = _r(divide, "__rtruediv__")
_T.__floordiv__ = floor_divide
_T.__rfloordiv__ = _r(floor_divide, "__rfloordiv__")
_T.__mod__ = mod
_T.__rmod__ = _r(mod, "__rmod__")
_T.__pow__ = power
_T.__rpow__ = _r(power, "__rpow__")
_T.__matmul__ = matmul
_T.__rmatmul__ = _r(matmul, "__rmatmul__")
_T.__neg__ = negative
_T.__pos__ = _same
_T.__abs__ = abs
_T.__getitem__ = getitem
_T.T = property(transpose, doc="The tensor with its axes reversed (``transpose(x)``).")
_T.__eq__ = equal
_T.__ne__ = not_equal
_T.__lt__ = less
_T.__le__ = less_equal
_T.__gt__ = greater
_T.__ge__ = greater_equal
_T.__and__ = logical_and
_T.__rand__ = _r(logical_and, "__rand__")
_T.__or__ = logical_or
_T.__ror__ = _r(logical_or, "__ror__")
_T.__xor__ = logical_xor
_T.__invert__ = logical_not
_T.reshape = _reshape_m
_T.transpose = _transpose_m
_T.astype = _astype_m
_T.squeeze = squeeze
_T.swapaxes = swapaxes
_T.repeat = repeat
_T.diagonal = diagonal
_T.trace = trace
_T.argsort = argsort
_T.mT = property(_methods.mT)
_T.real = property(_methods.real)
_T.imag = property(_methods.imag)
for _name, _m in _methods.METHODS.items():  # numpy's ndarray signatures (axis, dtype, out, keepdims)
    setattr(_T, _name, _m)
_T.to = _to_m
# numpy's protocols: np.exp(t), np.sum(t), np.linalg.norm(t) run these ops on the tape (see _protocols)
_T.__array_ufunc__ = _protocols.array_ufunc
_T.__array_function__ = _protocols.array_function
Variable.__hash__ = None  # type: ignore[assignment]

_protocols.install(_sys.modules[__name__])  # the numpy protocol tables look ops up by name
