"""Elementwise transcendental functions: exp and log (and their 2, 10, 1p and m1 forms), the trigonometric,
hyperbolic and inverse functions, sinc, erf, and the binary hypot, arctan2, logaddexp and logaddexp2.

Each is one declaration (:func:`gputape.ops.arithmetic.declared`): the forward and its derivative as
one expression. Derivatives that are singular somewhere multiply the cotangent with
``multiply_no_nan``, as :mod:`gputape.ops.arithmetic` explains.

>>> import gputape as gt
>>> gt.log(gt.exp(gt.constant([0.5], "float64"))).numpy().tolist()
[0.5]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core import expr as _x
from ..core.dispatch import binary_op
from ..core.expr import multiply_no_nan as _mnn
from ..core.primitive import refused
from .arithmetic import _doc, _doctests, _unary, declared

_LN2 = math.log(2.0)


_LN10 = math.log(10.0)


# d/dx sqrt(x*x + y*y) = x / out. At (0, 0) that is 0 / 0: NaN, as PyTorch gives (TensorFlow
# has no hypot); 0 where the cotangent is 0 (a where() that masks the point), as for log.
_hypot = declared("hypot", np.hypot, lambda x, y, out, g: (_mnn(x / out, g), _mnn(y / out, g)), complex="real")
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
    complex="real",
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
    complex="real",
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


# d/dx log2(2**x + 2**y) = 2**x / (2**x + 2**y) = sigmoid((x - y) ln 2), finite as logaddexp's.
_logaddexp2 = declared(
    "logaddexp2",
    np.logaddexp2,
    lambda x, y, g: (g * _x.sigmoid((x - y) * _LN2), g * _x.sigmoid((y - x) * _LN2)),
    complex="real",
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


# -- unary ---------------------------------------------------------------------------


sqrt = _unary(
    "sqrt",
    np.sqrt,
    lambda x, out, g: _mnn(0.5 / out, g),
    _doc("sqrt", "Elementwise square root (gradient inf at 0, not NaN).", "[4.0, 9.0]", "[2.0, 3.0]"),
    complex="holomorphic",
)
exp = _unary(
    "exp",
    np.exp,
    lambda x, out, g: g * out,
    _doc("exp", "Elementwise ``e ** x``.", "[0.0, 1.0]", "[1.0, 2.7183]"),
    complex="holomorphic",
)
expm1 = _unary(
    "expm1",
    np.expm1,
    lambda x, out, g: g * (out + 1),
    _doc("expm1", "Elementwise ``exp(x) - 1``, accurate near 0.", "[0.0, 1e-5]", "[0.0, 0.0]"),
    complex="holomorphic",
)
log = _unary(
    "log",
    np.log,
    lambda x, g: _mnn(1 / x, g),
    _doc("log", "Elementwise natural logarithm.", "[1.0, 2.0]", "[0.0, 0.6931]"),
    complex="holomorphic",
)
log1p = _unary(
    "log1p",
    np.log1p,
    lambda x, g: _mnn(1 / (1 + x), g),
    _doc("log1p", "Elementwise ``log(1 + x)``, accurate near 0.", "[0.0, 1.0]", "[0.0, 0.6931]"),
    complex="holomorphic",
)
sin = _unary(
    "sin",
    np.sin,
    lambda x, g: g * _x.cos(x),
    _doc("sin", "Elementwise sine.", "[0.0, 1.0]", "[0.0, 0.8415]"),
    complex="holomorphic",
)
cos = _unary(
    "cos",
    np.cos,
    lambda x, g: -g * _x.sin(x),
    _doc("cos", "Elementwise cosine.", "[0.0, 1.0]", "[1.0, 0.5403]"),
    complex="holomorphic",
)
tan = _unary(
    "tan",
    np.tan,
    lambda x, out, g: g * (1 + out * out),
    _doc("tan", "Elementwise tangent.", "[0.0, 1.0]", "[0.0, 1.5574]"),
    complex="holomorphic",
)
tanh = _unary(
    "tanh",
    np.tanh,
    lambda x, out, g: g * (1 - out * out),
    _doc("tanh", "Elementwise hyperbolic tangent.", "[0.0, 1.0]", "[0.0, 0.7616]"),
    complex="holomorphic",
)
sinh = _unary(
    "sinh",
    np.sinh,
    lambda x, g: g * _x.cosh(x),
    _doc("sinh", "Elementwise hyperbolic sine.", "[0.0, 1.0]", "[0.0, 1.1752]"),
    complex="holomorphic",
)
cosh = _unary(
    "cosh",
    np.cosh,
    lambda x, g: g * _x.sinh(x),
    _doc("cosh", "Elementwise hyperbolic cosine.", "[0.0, 1.0]", "[1.0, 1.5431]"),
    complex="holomorphic",
)
arctan = _unary(
    "arctan",
    np.arctan,
    lambda x, g: g / (1 + x * x),
    _doc("arctan", "Elementwise inverse tangent.", "[0.0, 1.0]", "[0.0, 0.7854]"),
    complex="holomorphic",
)
arcsinh = _unary(
    "arcsinh",
    np.arcsinh,
    lambda x, g: g / _x.sqrt(x * x + 1),
    _doc("arcsinh", "Elementwise inverse hyperbolic sine.", "[0.0, 1.0]", "[0.0, 0.8814]"),
    complex="holomorphic",
)
log2 = _unary(
    "log2",
    np.log2,
    lambda x, g: _mnn(1 / (x * _LN2), g),  # guarded as log
    _doc("log2", "Elementwise base-2 logarithm.", "[1.0, 8.0]", "[0.0, 3.0]"),
    complex="holomorphic",
)
log10 = _unary(
    "log10",
    np.log10,
    lambda x, g: _mnn(1 / (x * _LN10), g),  # guarded as log
    _doc("log10", "Elementwise base-10 logarithm.", "[1.0, 100.0]", "[0.0, 2.0]"),
    complex="holomorphic",
)
exp2 = _unary(
    "exp2",
    np.exp2,
    lambda x, out, g: g * (out * _LN2),
    _doc("exp2", "Elementwise ``2 ** x``.", "[0.0, 3.0]", "[1.0, 8.0]"),
    complex="holomorphic",
)
_DEG = math.pi / 180.0
deg2rad = _unary(
    "deg2rad",
    np.deg2rad,
    lambda x, g: g * _DEG,
    _doc("deg2rad", "Elementwise degrees to radians.", "[0.0, 180.0]", "[0.0, 3.1416]"),
    complex="real",
)
rad2deg = _unary(
    "rad2deg",
    np.rad2deg,
    lambda x, g: g * (1.0 / _DEG),
    _doc("rad2deg", "Elementwise radians to degrees.", "[0.0, 3.141592653589793]", "[0.0, 180.0]"),
    complex="real",
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
    complex="holomorphic",
)
arcsin = _unary(
    "arcsin",
    np.arcsin,
    lambda x, g: _mnn(1 / _x.sqrt(1 - x * x), g),  # inf at +-1, as in PyTorch and TensorFlow
    _doc("arcsin", "Elementwise inverse sine (gradient inf at -1 and 1).", "[0.0, 1.0]", "[0.0, 1.5708]"),
    complex="holomorphic",
)
arccos = _unary(
    "arccos",
    np.arccos,
    lambda x, g: _mnn(-1 / _x.sqrt(1 - x * x), g),  # -inf at +-1, as in PyTorch and TensorFlow
    _doc("arccos", "Elementwise inverse cosine (gradient -inf at -1 and 1).", "[1.0, 0.0]", "[0.0, 1.5708]"),
    complex="holomorphic",
)
arctanh = _unary(
    "arctanh",
    np.arctanh,
    lambda x, g: _mnn(1 / (1 - x * x), g),  # inf at +-1, as in PyTorch and TensorFlow
    _doc("arctanh", "Elementwise inverse hyperbolic tangent (gradient inf at +-1).", "[0.0, 0.5]", "[0.0, 0.5493]"),
    complex="holomorphic",
)
arccosh = _unary(
    "arccosh",
    np.arccosh,
    # sqrt(x - 1) * sqrt(x + 1), not sqrt(x * x - 1): accurate near 1, and the branch of arccosh
    # itself for complex x (sqrt(z * z - 1) has the wrong sign left of the imaginary axis); at
    # x == 1 the gradient is inf, as in PyTorch and TensorFlow
    lambda x, g: _mnn(1 / (_x.sqrt(x - 1) * _x.sqrt(x + 1)), g),
    _doc("arccosh", "Elementwise inverse hyperbolic cosine (gradient inf at 1).", "[1.0, 2.0]", "[0.0, 1.317]"),
    complex="holomorphic",
)


def _erf_numpy(xp: Any, x: Any) -> Any:
    if xp.__name__ != "numpy":
        from ..devices import backend

        return backend.gpu_special("erf")(x)
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:  # numpy alone: exact but slower, one math.erf per element
        import math

        import numpy as np

        return np.vectorize(math.erf, otypes=[x.dtype])(x)
    return scipy_erf(x)


# numpy has no erf; scipy's takes complex values but math.erf (numpy alone) does not, so a
# complex forward would depend on what is installed
_COMPLEX_ERF = refused("numpy has no erf, and gt.erf is defined for real values only; take real values first")
erf = _unary(
    "erf",
    _erf_numpy,
    lambda x, g: g * (1.1283791670955126 * _x.exp(-(x * x))),  # 2 / sqrt(pi)
    _doc("erf", "Elementwise error function (scipy's when installed, else math.erf).", "[0.0, 1.0]", "[0.0, 0.8427]"),
    complex=_COMPLEX_ERF,
)


__test__ = _doctests(globals())
