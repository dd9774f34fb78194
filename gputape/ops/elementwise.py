"""Elementwise primitives: forward and derivative side by side.

Most derivatives are one expression in :mod:`gputape.expr`'s language (``grad=``
below: a function of the inputs, ``out`` and the cotangent ``g``); the VJP the
sweep calls, gt.function's inline CPU replay, the fused CUDA kernels and their
numpy reference are all generated from it. The rest (power, mod, clip, cast,
the zero-gradient ops) keep hand-written VJPs.

VJPs are written against ``F`` (numpy/cupy in the fast sweep, gputape's own ops
when the gradient is itself being recorded), return cotangents that may still
carry broadcast dimensions (the sweep sums them away), and never index axes
from the left, so a leading batch of cotangents passes through unchanged.

Ops whose derivative is singular somewhere (log, sqrt, divide, reciprocal,
power) multiply the incoming cotangent with ``multiply_no_nan``: the result
stays exactly 0 where the incoming one is 0. That keeps ``where(x > 0,
log(x), 0)`` from leaking NaN into the gradient at ``x == 0`` (0 * inf), at
every order (multiply_no_nan's own VJP is guarded the same way), while
``sqrt`` at 0 with a non-zero incoming gradient still gives inf.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .. import expr as _x
from .. import tensor as _tensor
from ..dispatch import apply, binary_op, primitive, unary_op
from ..expr import multiply_no_nan as _mnn
from ..primitive import COMPLEX_DIRECT, REGISTRY, Primitive
from ..tensor import as_tensor
from ._util import NOPARAMS

_E = NOPARAMS


def _tape_complex(name: str) -> Any:
    """Register the decorated function as primitive ``name``'s VJP for complex values (gputape.tape)."""

    def register(vjp: Any) -> Any:
        COMPLEX_DIRECT[name] = vjp
        return vjp

    return register


def declared(name: str, fwd: Any, grad: Any, params: tuple[str, ...] = ()) -> Primitive:
    """Primitive ``name`` with forward ``fwd(xp, *arrays)`` and its derivative declared in :mod:`gputape.expr`.

    ``grad`` names the inputs, then optionally ``out`` and ``g``, then ``params``,
    and returns each input's cotangent expression. The residuals saved are the
    ones the expressions read; the VJP is generated. ``fwd`` may be a numpy ufunc
    (``np.arcsinh``): the forward is then the array module's function of that name,
    and on numpy arrays the ufunc itself (one Python frame less per op).
    """
    d = _x.derivative(name, grad, params)
    prim = primitive(name, save=d.save, save_out=d.save_out)(_forward(fwd))
    prim.defvjp(d.vjp)
    if isinstance(fwd, np.ufunc):
        prim.cpu = fwd
    return prim


def _forward(fwd: Any) -> Any:
    """``fwd(xp, *arrays)``; a numpy ufunc stands for the function of that name in each array module."""
    if not isinstance(fwd, np.ufunc):
        return fwd
    name = fwd.__name__

    def ufunc_fwd(xp: Any, *arrays: Any) -> Any:
        return getattr(xp, name)(*arrays)

    ufunc_fwd.__name__ = ufunc_fwd.__qualname__ = f"_{name}"
    return ufunc_fwd


def _mul_no_nan_fwd(xp, x, y):
    if xp is np:  # inf * 0 in the discarded branch is the point, not a warning
        with np.errstate(invalid="ignore"):
            return np.where(y == 0, 0, x * y)
    return xp.where(y == 0, 0, x * y)


# TensorFlow's MulNoNan gradient: both products guarded, so second derivatives stay
# NaN-free where the guard was active.
_mul_no_nan = declared("multiply_no_nan", _mul_no_nan_fwd, lambda x, y, g: (_mnn(g, y), _mnn(x, g)))


multiply_no_nan = binary_op(
    _mul_no_nan,
    "multiply_no_nan",
    """``x * y``, but 0 where ``y == 0`` even if ``x`` is inf or NaN (``tf.math.multiply_no_nan``).

    >>> import gputape as gt
    >>> gt.multiply_no_nan(gt.constant([float("inf"), 2.0]), gt.constant([0.0, 3.0])).numpy().tolist()
    [0.0, 6.0]
    """,
)


# -- binary arithmetic -------------------------------------------------------------


_add = declared("add", lambda xp, x, y: x + y, lambda x, y, g: (g, g))


add = binary_op(
    _add,
    "add",
    """Elementwise ``x + y`` with broadcasting.

    >>> import gputape as gt
    >>> gt.add(gt.constant([1.0, 2.0]), 1.0).numpy().tolist()
    [2.0, 3.0]
    """,
)


_sub = declared("subtract", lambda xp, x, y: x - y, lambda x, y, g: (g, -g))


subtract = binary_op(
    _sub,
    "subtract",
    """Elementwise ``x - y`` with broadcasting.

    >>> import gputape as gt
    >>> gt.subtract(gt.constant([1.0, 2.0]), 1.0).numpy().tolist()
    [0.0, 1.0]
    """,
)


_mul = declared("multiply", lambda xp, x, y: x * y, lambda x, y, g: (g * y, g * x))


_MULTIPLY_DOC = """Elementwise ``x * y`` with broadcasting.

    >>> import gputape as gt
    >>> gt.multiply(gt.constant([1.0, 2.0]), 3.0).numpy().tolist()
    [3.0, 6.0]
    """


_div = declared("divide", lambda xp, x, y: x / y, lambda x, y, out, g: (_mnn(1 / y, g), _mnn(-out / y, g)))


divide = binary_op(
    _div,
    "divide",
    """Elementwise true division ``x / y``.

    >>> import gputape as gt
    >>> gt.divide(gt.constant([1.0, 3.0]), 2.0).numpy().tolist()
    [0.5, 1.5]
    """,
)


_neg = declared("negative", lambda xp, x: -x, lambda x, g: -g)


negative = unary_op(
    _neg,
    "negative",
    """Elementwise ``-x``.

    >>> import gputape as gt
    >>> gt.negative(gt.constant([1.0, -2.0])).numpy().tolist()
    [-1.0, 2.0]
    """,
)


@primitive("power", save=True, save_out=True)
def _pow(xp, x, y):
    return x**y


@_pow.defvjp
def _(F, g, needs, nb, node, x, y, out):
    if not needs[0]:
        gx = None
    elif isinstance(y, (int, float)):  # a Python exponent (x ** 2): no guard needed unless it is 0
        gx = F.multiply_no_nan(y * x ** (y - 1), g) if y != 0 else F.zeros_like(x)
    else:
        # y * x**(y-1) is 0 * inf at x == 0, y == 0; the derivative of the constant x**0 is 0 (as in
        # autograd, PyTorch and TensorFlow), so y's zeros win. multiply_no_nan's VJP is guarded the same
        # way: d/dx stays 0 at every order, while d/dy keeps its true value x**(y-1) (1/x at y == 0;
        # PyTorch's where(y == 0, 0, ...) gives 0 there, and NaN at x == 0).
        gx = F.multiply_no_nan(F.multiply_no_nan(x ** (y - 1), y), g)
    if needs[1]:
        # d/dy x**y = x**y log x; TensorFlow's convention: 0 where x <= 0.
        if isinstance(x, (int, float)):  # a Python base: keep it weakly typed
            gy = g * (out * (math.log(x) if x > 0 else 0.0))
        else:
            pos = x > 0
            gy = g * F.where(pos, out * F.log(F.where(pos, x, 1)), 0)
    else:
        gy = None
    return (gx, gy)


power = binary_op(
    _pow,
    "power",
    """Elementwise ``x ** y``.

    >>> import gputape as gt
    >>> gt.power(gt.constant([2.0, 3.0]), 2.0).numpy().tolist()
    [4.0, 9.0]
    """,
)


# ties send the gradient to x, as in TensorFlow
_maximum = declared("maximum", np.maximum, lambda x, y, g: (_x.where(x >= y, g, 0), _x.where(x >= y, 0, g)))


maximum = binary_op(
    _maximum,
    "maximum",
    """Elementwise maximum (ties send the gradient to ``x``, as in TensorFlow).

    >>> import gputape as gt
    >>> gt.maximum(gt.constant([1.0, 5.0]), 2.0).numpy().tolist()
    [2.0, 5.0]
    """,
)


_minimum = declared("minimum", np.minimum, lambda x, y, g: (_x.where(x <= y, g, 0), _x.where(x <= y, 0, g)))


minimum = binary_op(
    _minimum,
    "minimum",
    """Elementwise minimum (ties send the gradient to ``x``, as in TensorFlow).

    >>> import gputape as gt
    >>> gt.minimum(gt.constant([1.0, 5.0]), 2.0).numpy().tolist()
    [1.0, 2.0]
    """,
)


@primitive("mod", save=True)
def _mod(xp, x, y):
    return xp.mod(x, y)


@_mod.defvjp
def _(F, g, needs, nb, node, x, y):
    return (g if needs[0] else None, -g * F.floor_divide(x, y) if needs[1] else None)


mod = binary_op(
    _mod,
    "mod",
    """Elementwise remainder with the sign of ``y`` (numpy's ``%``).

    >>> import gputape as gt
    >>> gt.mod(gt.constant([5.0, -1.0]), 3.0).numpy().tolist()
    [2.0, 2.0]
    """,
)


@primitive("floor_divide")
def _floordiv(xp, x, y):
    return xp.floor_divide(x, y)


@_floordiv.defvjp
def _(F, g, needs, nb, node):
    z = F.zeros_like(g)
    return (z if needs[0] else None, z if needs[1] else None)


floor_divide = binary_op(
    _floordiv,
    "floor_divide",
    """Elementwise ``x // y`` (zero gradient: piecewise constant).

    >>> import gputape as gt
    >>> gt.floor_divide(gt.constant([5.0, -1.0]), 3.0).numpy().tolist()
    [1.0, -1.0]
    """,
)


# d/dx sqrt(x*x + y*y) = x / out. At (0, 0) that is 0 / 0: NaN, as PyTorch gives (TensorFlow
# has no hypot); 0 where the cotangent is 0 (a where() that masks the point), as for log.
_hypot = declared("hypot", np.hypot, lambda x, y, out, g: (_mnn(x / out, g), _mnn(y / out, g)))
hypot = binary_op(
    _hypot,
    "hypot",
    """Elementwise ``sqrt(x**2 + y**2)``, without overflow (gradient NaN at (0, 0), as in PyTorch).

    >>> import gputape as gt
    >>> gt.hypot(gt.constant([3.0, 5.0], "float64"), 4.0).numpy().round(4).tolist()
    [5.0, 6.4031]
    """,
)


def _inv_r2(x: Any, y: Any) -> Any:
    """``1 / (x*x + y*y)``, but 0 where that is 1 / 0 (PyTorch's atan2 gradient at the origin).

    The divisor is made 1 there first, so no inf appears at any order of differentiation."""
    r2 = x * x + y * y
    return _x.where(_x.eq(r2, 0), 0, 1 / _x.where(_x.eq(r2, 0), 1, r2))


# arctan2(x1, x2) = angle of the point (x2, x1): d/dx1 = x2 / r2, d/dx2 = -x1 / r2. At (0, 0)
# PyTorch gives (0, 0) (TensorFlow NaN); so does gputape, and a masked cotangent gives 0 too.
_arctan2 = declared(
    "arctan2",
    np.arctan2,
    lambda x, y, g: (g * y * _inv_r2(x, y), g * -x * _inv_r2(x, y)),
)
arctan2 = binary_op(
    _arctan2,
    "arctan2",
    """Elementwise angle of the point ``(x2, x1)``, numpy's ``arctan2(x1, x2)`` (gradient 0 at (0, 0), as PyTorch's).

    >>> import gputape as gt
    >>> gt.arctan2(gt.constant([1.0, -1.0], "float64"), -1.0).numpy().round(4).tolist()
    [2.3562, -2.3562]
    """,
)


# d/dx log(exp(x) + exp(y)) = sigmoid(x - y): finite for every finite input and for one infinite
# one (exp(x - out) would give NaN at x = inf); NaN at x = y = +-inf, as in PyTorch.
_logaddexp = declared(
    "logaddexp",
    np.logaddexp,
    lambda x, y, g: (g * _x.sigmoid(x - y), g * _x.sigmoid(y - x)),
)
logaddexp = binary_op(
    _logaddexp,
    "logaddexp",
    """Elementwise ``log(exp(x) + exp(y))``, without overflow.

    >>> import gputape as gt
    >>> gt.logaddexp(gt.constant([0.0, 1000.0], "float64"), 0.0).numpy().round(4).tolist()
    [0.6931, 1000.0]
    """,
)


_LN2 = math.log(2.0)

# d/dx log2(2**x + 2**y) = 2**x / (2**x + 2**y) = sigmoid((x - y) ln 2), finite as logaddexp's.
_logaddexp2 = declared(
    "logaddexp2",
    np.logaddexp2,
    lambda x, y, g: (g * _x.sigmoid((x - y) * _LN2), g * _x.sigmoid((y - x) * _LN2)),
)
logaddexp2 = binary_op(
    _logaddexp2,
    "logaddexp2",
    """Elementwise ``log2(2**x + 2**y)``, without overflow.

    >>> import gputape as gt
    >>> gt.logaddexp2(gt.constant([0.0, 1000.0], "float64"), 0.0).numpy().round(4).tolist()
    [1.0, 1000.0]
    """,
)


def _to_chosen(x: Any, y: Any, out: Any, g: Any) -> tuple:
    """fmax/fmin ignore a NaN operand (numpy's rule): the gradient goes to the operand the result
    is, x on ties (as maximum/minimum) and when both are NaN to y."""
    return (_x.where(_x.eq(out, x), g, 0), _x.where(_x.eq(out, x), 0, g))


_fmax = declared("fmax", np.fmax, _to_chosen)
fmax = binary_op(
    _fmax,
    "fmax",
    """Elementwise maximum that ignores NaN (``fmax(1, nan)`` is 1); the gradient goes to the operand chosen.

    >>> import gputape as gt, numpy as np
    >>> gt.fmax(gt.constant([1.0, np.nan]), gt.constant([np.nan, 2.0])).numpy().tolist()
    [1.0, 2.0]
    """,
)
_fmin = declared("fmin", np.fmin, _to_chosen)
fmin = binary_op(
    _fmin,
    "fmin",
    """Elementwise minimum that ignores NaN (``fmin(1, nan)`` is 1); the gradient goes to the operand chosen.

    >>> import gputape as gt, numpy as np
    >>> gt.fmin(gt.constant([1.0, np.nan]), gt.constant([np.nan, 2.0])).numpy().tolist()
    [1.0, 2.0]
    """,
)


# -- unary math --------------------------------------------------------------------


def _unary(name: str, fwd: Any, grad: Any, doc: str, vjp: Any = None) -> Any:
    """The public function of unary primitive ``name``: ``fwd(xp, x)`` and its derivative
    expression ``grad`` (or, for the few without one, a hand-written ``vjp``)."""
    if vjp is None:
        prim = declared(name, fwd, grad)
    else:
        prim = primitive(name)(_forward(fwd))
        prim.defvjp(vjp)
        if isinstance(fwd, np.ufunc):
            prim.cpu = fwd
    prim.doc = doc
    return unary_op(prim, name, doc)


_LN10 = math.log(10.0)


def _doc(name: str, what: str, arg: str, result: str) -> str:
    return f"""{what}

    >>> import gputape as gt
    >>> gt.{name}(gt.constant({arg}, "float64")).numpy().round(4).tolist()
    {result}
    """


square = _unary(
    "square",
    lambda xp, x: x * x,
    lambda x, g: g * (2 * x),
    _doc("square", "Elementwise ``x * x``.", "[1.0, -3.0]", "[1.0, 9.0]"),
)
multiply = binary_op(_mul, "multiply", _MULTIPLY_DOC, same=REGISTRY["square"])
sqrt = _unary(
    "sqrt",
    np.sqrt,
    lambda x, out, g: _mnn(0.5 / out, g),
    _doc("sqrt", "Elementwise square root (gradient inf at 0, not NaN).", "[4.0, 9.0]", "[2.0, 3.0]"),
)
exp = _unary(
    "exp",
    np.exp,
    lambda x, out, g: g * out,
    _doc("exp", "Elementwise ``e ** x``.", "[0.0, 1.0]", "[1.0, 2.7183]"),
)
expm1 = _unary(
    "expm1",
    np.expm1,
    lambda x, out, g: g * (out + 1),
    _doc("expm1", "Elementwise ``exp(x) - 1``, accurate near 0.", "[0.0, 1e-5]", "[0.0, 0.0]"),
)
log = _unary(
    "log",
    np.log,
    lambda x, g: _mnn(1 / x, g),
    _doc("log", "Elementwise natural logarithm.", "[1.0, 2.0]", "[0.0, 0.6931]"),
)
log1p = _unary(
    "log1p",
    np.log1p,
    lambda x, g: _mnn(1 / (1 + x), g),
    _doc("log1p", "Elementwise ``log(1 + x)``, accurate near 0.", "[0.0, 1.0]", "[0.0, 0.6931]"),
)
sin = _unary(
    "sin",
    np.sin,
    lambda x, g: g * _x.cos(x),
    _doc("sin", "Elementwise sine.", "[0.0, 1.0]", "[0.0, 0.8415]"),
)
cos = _unary(
    "cos",
    np.cos,
    lambda x, g: -g * _x.sin(x),
    _doc("cos", "Elementwise cosine.", "[0.0, 1.0]", "[1.0, 0.5403]"),
)
tan = _unary(
    "tan",
    np.tan,
    lambda x, out, g: g * (1 + out * out),
    _doc("tan", "Elementwise tangent.", "[0.0, 1.0]", "[0.0, 1.5574]"),
)
tanh = _unary(
    "tanh",
    np.tanh,
    lambda x, out, g: g * (1 - out * out),
    _doc("tanh", "Elementwise hyperbolic tangent.", "[0.0, 1.0]", "[0.0, 0.7616]"),
)
sinh = _unary(
    "sinh",
    np.sinh,
    lambda x, g: g * _x.cosh(x),
    _doc("sinh", "Elementwise hyperbolic sine.", "[0.0, 1.0]", "[0.0, 1.1752]"),
)
cosh = _unary(
    "cosh",
    np.cosh,
    lambda x, g: g * _x.sinh(x),
    _doc("cosh", "Elementwise hyperbolic cosine.", "[0.0, 1.0]", "[1.0, 1.5431]"),
)
arctan = _unary(
    "arctan",
    np.arctan,
    lambda x, g: g / (1 + x * x),
    _doc("arctan", "Elementwise inverse tangent.", "[0.0, 1.0]", "[0.0, 0.7854]"),
)
arcsinh = _unary(
    "arcsinh",
    np.arcsinh,
    lambda x, g: g / _x.sqrt(x * x + 1),
    _doc("arcsinh", "Elementwise inverse hyperbolic sine.", "[0.0, 1.0]", "[0.0, 0.8814]"),
)
log2 = _unary(
    "log2",
    np.log2,
    lambda x, g: _mnn(1 / (x * _LN2), g),  # guarded as log
    _doc("log2", "Elementwise base-2 logarithm.", "[1.0, 8.0]", "[0.0, 3.0]"),
)
log10 = _unary(
    "log10",
    np.log10,
    lambda x, g: _mnn(1 / (x * _LN10), g),  # guarded as log
    _doc("log10", "Elementwise base-10 logarithm.", "[1.0, 100.0]", "[0.0, 2.0]"),
)
exp2 = _unary(
    "exp2",
    np.exp2,
    lambda x, out, g: g * (out * _LN2),
    _doc("exp2", "Elementwise ``2 ** x``.", "[0.0, 3.0]", "[1.0, 8.0]"),
)
_DEG = math.pi / 180.0
deg2rad = _unary(
    "deg2rad",
    np.deg2rad,
    lambda x, g: g * _DEG,
    _doc("deg2rad", "Elementwise degrees to radians.", "[0.0, 180.0]", "[0.0, 3.1416]"),
)
rad2deg = _unary(
    "rad2deg",
    np.rad2deg,
    lambda x, g: g * (1.0 / _DEG),
    _doc("rad2deg", "Elementwise radians to degrees.", "[0.0, 3.141592653589793]", "[0.0, 180.0]"),
)
# d/dx sin(pi x) / (pi x) = (cos(pi x) - sinc(x)) / x, with the 0/0 at x = 0 replaced by the
# series -(pi**2 / 3) x: 0 there, and its own derivative is sinc's second derivative at 0, so
# second (and third) order stay right (the divisor is made 1 first: no 0/0 at any order).
sinc = _unary(
    "sinc",
    lambda xp, x: xp.sinc(x),
    lambda x, out, g: (
        g
        * _x.where(_x.eq(x, 0), (-math.pi * math.pi / 3) * x, (_x.cos(math.pi * x) - out) / _x.where(_x.eq(x, 0), 1, x))
    ),
    _doc(
        "sinc", "Elementwise normalised sinc, ``sin(pi x) / (pi x)`` (1 at 0, numpy's).", "[0.0, 0.5]", "[1.0, 0.6366]"
    ),
)
arcsin = _unary(
    "arcsin",
    np.arcsin,
    lambda x, g: _mnn(1 / _x.sqrt(1 - x * x), g),  # inf at +-1, as in PyTorch and TensorFlow
    _doc("arcsin", "Elementwise inverse sine (gradient inf at -1 and 1).", "[0.0, 1.0]", "[0.0, 1.5708]"),
)
arccos = _unary(
    "arccos",
    np.arccos,
    lambda x, g: _mnn(-1 / _x.sqrt(1 - x * x), g),  # -inf at +-1, as in PyTorch and TensorFlow
    _doc("arccos", "Elementwise inverse cosine (gradient -inf at -1 and 1).", "[1.0, 0.0]", "[0.0, 1.5708]"),
)
arctanh = _unary(
    "arctanh",
    np.arctanh,
    lambda x, g: _mnn(1 / (1 - x * x), g),  # inf at +-1, as in PyTorch and TensorFlow
    _doc("arctanh", "Elementwise inverse hyperbolic tangent (gradient inf at +-1).", "[0.0, 0.5]", "[0.0, 0.5493]"),
)
arccosh = _unary(
    "arccosh",
    np.arccosh,
    # (x - 1) * (x + 1): accurate near 1; at x == 1 the gradient is inf, as in PyTorch and TensorFlow
    lambda x, g: _mnn(1 / _x.sqrt((x - 1) * (x + 1)), g),
    _doc("arccosh", "Elementwise inverse hyperbolic cosine (gradient inf at 1).", "[1.0, 2.0]", "[0.0, 1.317]"),
)
abs = _unary(
    "abs",
    np.abs,
    lambda x, g: g * _x.sign(x),
    _doc("abs", "Elementwise absolute value (gradient 0 at 0, as in TensorFlow).", "[-2.0, 0.0]", "[2.0, 0.0]"),
)


@_tape_complex("abs")
def _abs_complex(F, g, needs, nb, node, x):
    # TensorFlow's _AbsGrad: g * sign(z) = g z / |z| (0 at 0), written without sign, whose complex
    # derivative is not zero (gt.sign's is)
    r = F.abs(x)
    nz = r != 0
    return (F.where(nz, g * x / F.where(nz, r, 1), 0),)


reciprocal = _unary(
    "reciprocal",
    lambda xp, x: 1 / x,
    # -(g * out) * out, each product guarded: out * out would put 0 * inf into
    # the second derivative where a where() masked the cotangent to 0
    lambda x, out, g: -_mnn(out, _mnn(out, g)),
    _doc("reciprocal", "Elementwise ``1 / x``.", "[2.0, 4.0]", "[0.5, 0.25]"),
)


def _zero_grad(F: Any, g: Any, needs: Any, nb: int, node: Any) -> Any:
    return (F.zeros_like(g),)


sign = _unary(
    "sign",
    np.sign,
    None,
    _doc("sign", "Elementwise sign (zero gradient).", "[-2.0, 0.0, 3.0]", "[-1.0, 0.0, 1.0]"),
    _zero_grad,
)
floor = _unary(
    "floor",
    np.floor,
    None,
    _doc("floor", "Elementwise floor (zero gradient).", "[1.5, -1.5]", "[1.0, -2.0]"),
    _zero_grad,
)
ceil = _unary(
    "ceil",
    np.ceil,
    None,
    _doc("ceil", "Elementwise ceiling (zero gradient).", "[1.5, -1.5]", "[2.0, -1.0]"),
    _zero_grad,
)
round = _unary(
    "round",
    lambda xp, x: xp.round(x),
    None,
    _doc(
        "round", "Round half to even, like numpy and TensorFlow (zero gradient).", "[0.5, 1.5, 2.4]", "[0.0, 2.0, 2.0]"
    ),
    _zero_grad,
)
identity = _unary(
    "identity",
    lambda xp, x: x,
    lambda x, g: g,
    _doc("identity", "Return the value as a new tensor (gradient passes through).", "[1.0]", "[1.0]"),
)


def _erf_numpy(xp: Any, x: Any) -> Any:
    if xp.__name__ != "numpy":
        from .. import backend

        return backend.gpu_special("erf")(x)
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:  # numpy alone: exact but slower, one math.erf per element
        import math

        import numpy as np

        return np.vectorize(math.erf, otypes=[x.dtype])(x)
    return scipy_erf(x)


erf = _unary(
    "erf",
    _erf_numpy,
    lambda x, g: g * (1.1283791670955126 * _x.exp(-(x * x))),  # 2 / sqrt(pi)
    _doc("erf", "Elementwise error function (scipy's when installed, else math.erf).", "[0.0, 1.0]", "[0.0, 0.8427]"),
)


# -- selection ---------------------------------------------------------------------


# The unselected branch gets an exact 0, never g * something: no NaN leaks.
_where = declared(
    "where",
    lambda xp, cond, x, y: xp.where(cond, x, y),
    lambda cond, x, y, g: (None, _x.where(cond, g, 0), _x.where(cond, 0, g)),
)


def where(condition: Any, x: Any, y: Any) -> Any:
    """Choose ``x`` where ``condition`` is true, else ``y`` (broadcasting all three).

    >>> import gputape as gt
    >>> x = gt.constant([-1.0, 2.0])
    >>> gt.where(x > 0, x, 0.0).numpy().tolist()
    [0.0, 2.0]
    """
    if not hasattr(condition, "dtype") or str(condition.dtype) != "bool":
        condition = as_tensor(condition).astype("bool")
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        # Python numbers follow gputape's dtype rule (float32, int32: gt.constant's), taken jointly so
        # that where(c, 1, 2.0) is float32 like gt.constant([1, 2.0]), not int32 | float32 = float64
        dt = _tensor._py_dtype([x, y])
        x, y = _tensor.constant(x, dt), _tensor.constant(y, dt)
    return apply(_where, (condition, x, y), _E)


# -- complex parts -----------------------------------------------------------------
# The VJPs follow TensorFlow's convention for complex values (README, "Complex numbers"):
# a real loss L of z = x + iy has the gradient dL/dx + i dL/dy, and these VJPs are TensorFlow's
# _RealGrad, _ImagGrad, _ConjGrad and _AngleGrad. On real input they are the real derivatives
# (real and conj are the identity, imag and angle constants).


def _conj_of(F: Any, g: Any) -> Any:
    """``conj(g)`` on the sweep's arrays or, when the gradient is recorded, as a gputape op."""
    return conj(g) if F.xp is None else F.xp.conj(g)


def _complex_in(node: Any) -> bool:
    """Whether the node's input was complex (the primitives below record its kind as a parameter)."""
    return node.params["complex"]


@primitive("real")
def _real(xp, x, complex):
    return xp.real(x)


@_real.defvjp
def _(F, g, needs, nb, node):
    return (g,)  # a real cotangent: the sweep casts it back to a complex input's dtype (imaginary part 0)


@primitive("imag")
def _imag(xp, x, complex):
    return xp.imag(x) if complex else xp.zeros_like(x)


@_imag.defvjp
def _(F, g, needs, nb, node):
    return (g * 1j if _complex_in(node) else g * 0,)


@primitive("conj")
def _conj(xp, x, complex):
    return xp.conj(x) if complex else x


@_conj.defvjp
def _(F, g, needs, nb, node):
    return (_conj_of(F, g) if _complex_in(node) else g,)


@primitive("angle", save=True)
def _angle(xp, x, complex):
    return xp.angle(x)


@_angle.defvjp
def _(F, g, needs, nb, node, x):
    if not _complex_in(node):
        return (g * 0,)  # angle of a real number is 0 or pi: piecewise constant
    # TensorFlow's _AngleGrad, -g / (imag(z) + i real(z)) = g (-y + i x) / |z|^2, and 0 at z == 0
    # (where the angle is not differentiable; numpy's angle(0) is 0).
    re, im = (real(x), imag(x)) if F.xp is None else (F.xp.real(x), F.xp.imag(x))
    r2 = re * re + im * im
    nz = r2 != 0
    return (F.where(nz, g * (im * -1 + re * 1j) / F.where(nz, r2, 1), 0),)


def _part(prim: Primitive, x: Any) -> Any:
    x = as_tensor(x)
    return apply(prim, (x,), {"complex": x.dtype.kind == "c"})


def real(val: Any) -> Any:
    """The real part (``numpy.real``); the identity on real tensors.

    >>> import gputape as gt
    >>> gt.real(gt.constant([1 + 2j, 4 - 3j])).numpy().tolist()
    [1.0, 4.0]
    """
    return _part(_real, val)


def imag(val: Any) -> Any:
    """The imaginary part (``numpy.imag``); zeros on real tensors.

    >>> import gputape as gt
    >>> gt.imag(gt.constant([1 + 2j, -3j])).numpy().tolist()
    [2.0, -3.0]
    """
    return _part(_imag, val)


def conj(x: Any) -> Any:
    """The complex conjugate (``numpy.conj``); the identity on real tensors.

    >>> import gputape as gt
    >>> gt.conj(gt.constant([1 + 2j])).numpy().tolist()
    [(1-2j)]
    """
    return _part(_conj, x)


conjugate = conj


def angle(z: Any, deg: bool = False) -> Any:
    """The argument of each element in radians (degrees with ``deg=True``), as ``numpy.angle``.

    Its gradient follows TensorFlow's ``_AngleGrad``; it is 0 at ``z == 0``, where the angle jumps.

    >>> import gputape as gt
    >>> gt.angle(gt.constant([1j, -1.0 + 0j]), deg=True).numpy().tolist()
    [90.0, 180.0]
    """
    out = _part(_angle, z)
    return out * (180.0 / math.pi) if deg else out


@primitive("clip", save=True)
def _clip(xp, x, lo, hi):
    return xp.clip(x, lo, hi)


@_clip.defvjp
def _(F, g, needs, nb, node, x, lo, hi):
    # As TensorFlow's clip_by_value: the gradient passes where lo <= x <= hi.
    below = (x < lo) if lo is not None else None
    above = (x > hi) if hi is not None else None
    out = (
        F.where(below | above, 0, g)
        if (below is not None and above is not None)
        else (F.where(below, 0, g) if below is not None else F.where(above, 0, g))
    )
    glo = F.where(below, g, 0) if needs[1] else None
    ghi = F.where(above, g, 0) if needs[2] else None
    return (out if needs[0] else None, glo, ghi)


def clip(x: Any, a_min: Any = None, a_max: Any = None, out: None = None, *, min: Any = None, max: Any = None) -> Any:
    """Clamp ``x`` to ``[min, max]``; the gradient passes where ``min <= x <= max``.

    The bounds go by numpy 2's names (``min``, ``max``) or numpy 1's (``a_min``, ``a_max``, also
    positional); ``out`` must be None (tensors are immutable).

    >>> import gputape as gt
    >>> gt.clip(gt.constant([-2.0, 0.5, 3.0]), -1.0, 1.0).numpy().tolist()
    [-1.0, 0.5, 1.0]
    >>> gt.clip(gt.constant([-2.0, 0.5, 3.0]), max=1.0).numpy().tolist()
    [-2.0, 0.5, 1.0]
    """
    if out is not None:
        raise TypeError("gt.clip: out= is not supported (tensors are immutable); use the returned tensor instead")
    if (a_min is not None and min is not None) or (a_max is not None and max is not None):
        raise TypeError("gt.clip: give each bound once, as a_min/a_max (numpy 1) or min/max (numpy 2), not both")
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    if lo is None and hi is None:
        raise ValueError("gt.clip: give at least one of min and max")
    return apply(_clip, (x, lo, hi), _E)


@primitive("cast")
def _cast(xp, x, dtype):
    return x.astype(dtype)


@_cast.defvjp
def _(F, g, needs, nb, node):
    return (g,)  # the sweep casts the cotangent back to the input's dtype


def cast(x: Any, dtype: Any) -> Any:
    """Convert to ``dtype``; float-to-float casts pass gradients, casts to int stop them.

    >>> import gputape as gt
    >>> str(gt.cast(gt.constant([1.5]), "float64").dtype)
    'float64'
    """
    from ._util import norm_dtype

    return apply(_cast, (x,), {"dtype": norm_dtype(dtype, "cast")})


# C-level forwards for numpy inputs: the same math as each fwd above, one Python
# frame less per op (see Primitive.cpu). Operators keep numpy's promotion rules.
_CPU = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": operator.truediv,
    "power": operator.pow,
    "negative": operator.neg,
    "mod": np.mod,
    "floor_divide": np.floor_divide,
    "square": np.square,
    "round": np.rint,
}
for _name, _f in _CPU.items():
    if _f is not None:
        REGISTRY[_name].cpu = _f

# The public functions above are built by unary_op/binary_op in gputape.dispatch,
# so doctest would not find their examples here by itself.
__test__ = {
    _n: _f.__doc__
    for _n, _f in list(globals().items())
    if callable(_f) and getattr(_f, "__module__", "") == "gputape.dispatch" and _f.__doc__ and ">>>" in _f.__doc__
}
