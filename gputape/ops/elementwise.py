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

The primitives live in three modules by concern: :mod:`gputape.ops.arithmetic`
(with ``declared``, the helper every elementwise declaration uses),
:mod:`gputape.ops.transcendental` and :mod:`gputape.ops.selection`. This
module gathers them, so ``gputape.ops.elementwise.<name>`` keeps working.

>>> import gputape as gt
>>> gt.ops.elementwise.tanh is gt.tanh
True
"""

# declared is the helper gputape.nn.functional's declarations import from here; the two private forwards
# are the raw namespace's multiply_no_nan and erf (gputape.ops builds it).
from .arithmetic import (
    _mul_no_nan_fwd,  # noqa: F401
    abs,
    add,
    cast,
    declared,
    divide,
    floor_divide,
    identity,
    mod,
    multiply,
    multiply_no_nan,
    negative,
    power,
    reciprocal,
    square,
    subtract,
)
from .selection import (
    angle,
    ceil,
    clip,
    conj,
    conjugate,
    floor,
    fmax,
    fmin,
    imag,
    maximum,
    minimum,
    real,
    round,
    sign,
    where,
)
from .transcendental import (
    _erf_numpy,  # noqa: F401
    arccos,
    arccosh,
    arcsin,
    arcsinh,
    arctan,
    arctan2,
    arctanh,
    cos,
    cosh,
    deg2rad,
    erf,
    exp,
    exp2,
    expm1,
    hypot,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logaddexp2,
    rad2deg,
    sin,
    sinc,
    sinh,
    sqrt,
    tan,
    tanh,
)

__all__ = [
    "abs",
    "add",
    "angle",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "cast",
    "ceil",
    "clip",
    "conj",
    "conjugate",
    "cos",
    "cosh",
    "declared",
    "deg2rad",
    "divide",
    "erf",
    "exp",
    "exp2",
    "expm1",
    "floor",
    "floor_divide",
    "fmax",
    "fmin",
    "hypot",
    "identity",
    "imag",
    "log",
    "log1p",
    "log2",
    "log10",
    "logaddexp",
    "logaddexp2",
    "maximum",
    "minimum",
    "mod",
    "multiply",
    "multiply_no_nan",
    "negative",
    "power",
    "rad2deg",
    "real",
    "reciprocal",
    "round",
    "sign",
    "sin",
    "sinc",
    "sinh",
    "sqrt",
    "square",
    "subtract",
    "tan",
    "tanh",
    "where",
]
