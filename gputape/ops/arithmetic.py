"""Elementwise arithmetic, and the machinery every elementwise primitive is declared with (``declared``).

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

The family is split by concern: this module (``+ - * /``, power, mod,
square, reciprocal, abs, identity, cast), :mod:`gputape.ops.transcendental`
(exp, log, the trigonometric and hyperbolic functions, erf, hypot,
logaddexp) and :mod:`gputape.ops.selection` (maximum and minimum, rounding,
where, clip, complex parts); :mod:`gputape.ops.elementwise` gathers them.

>>> import gputape as gt
>>> (gt.constant([1.0, 2.0]) * 3.0 - 1.0).numpy().tolist()
[2.0, 5.0]
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .. import expr as _x
from .. import tape as _tape
from ..expr import multiply_no_nan as _mnn
from ..tape import COMPLEX_DIRECT, REGISTRY, Primitive, apply, binary_op, primitive, unary_op
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


def _doc(name: str, what: str, arg: str, result: str) -> str:
    return f"""{what}

    >>> import gputape as gt
    >>> gt.{name}(gt.constant({arg}, "float64")).numpy().round(4).tolist()
    {result}
    """


def _doctests(namespace: dict[str, Any]) -> dict[str, str]:
    """The examples of a module's public functions built by unary_op/binary_op, for its ``__test__``.

    Those functions are made in gputape.tape, so doctest would not find their examples by itself;
    gputape.tape's own functions a module imports (``primitive``) are left to gputape.tape's doctests.
    """
    return {
        n: f.__doc__
        for n, f in list(namespace.items())
        if callable(f)
        and getattr(f, "__module__", "") == "gputape.tape"
        and getattr(_tape, n, None) is not f
        and f.__doc__
        and ">>>" in f.__doc__
    }


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


# -- unary arithmetic --------------------------------------------------------------


square = _unary(
    "square",
    lambda xp, x: x * x,
    lambda x, g: g * (2 * x),
    _doc("square", "Elementwise ``x * x``.", "[1.0, -3.0]", "[1.0, 9.0]"),
)
multiply = binary_op(_mul, "multiply", _MULTIPLY_DOC, same=REGISTRY["square"])


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


identity = _unary(
    "identity",
    lambda xp, x: x,
    lambda x, g: g,
    _doc("identity", "Return the value as a new tensor (gradient passes through).", "[1.0]", "[1.0]"),
)


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
}
for _name, _f in _CPU.items():
    if _f is not None:
        REGISTRY[_name].cpu = _f

__test__ = _doctests(globals())
