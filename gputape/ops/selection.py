"""Elementwise ops that select: the larger or smaller operand (maximum, minimum, fmax, fmin), the sign and the
rounding ops (zero gradient), a branch (``where``), a range (``clip``) and a part of a complex number (real,
imag, conj, angle).

maximum, minimum, fmax, fmin, where and clip send the gradient to the operand, branch or bound chosen
and an exact 0 elsewhere (``where(mask, g, 0)``, never ``g * mask``), so a NaN or inf in the part not
chosen does not leak into the gradient.

>>> import gputape as gt
>>> gt.clip(gt.constant([-2.0, 0.5, 3.0]), -1.0, 1.0).numpy().tolist()
[-1.0, 0.5, 1.0]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core import expr as _x
from ..core import tensor as _tensor
from ..core.dispatch import apply, binary_op, primitive
from ..core.primitive import REGISTRY, UNORDERED, Primitive, refused
from ..core.tensor import Tensor, as_tensor
from ._util import NOPARAMS
from .arithmetic import _doc, _doctests, _unary, declared

_E = NOPARAMS


# ties send the gradient to x, as in TensorFlow
_maximum = declared(
    "maximum", np.maximum, lambda x, y, g: (_x.where(x >= y, g, 0), _x.where(x >= y, 0, g)), complex=UNORDERED
)


maximum = binary_op(
    _maximum,
    "maximum",
    """Elementwise maximum (ties send the gradient to ``x``, as in TensorFlow).

    >>> import gputape as gt
    >>> gt.maximum(gt.constant([1.0, 5.0]), 2.0).numpy().tolist()
    [2.0, 5.0]
    """,
)


_minimum = declared(
    "minimum", np.minimum, lambda x, y, g: (_x.where(x <= y, g, 0), _x.where(x <= y, 0, g)), complex=UNORDERED
)


minimum = binary_op(
    _minimum,
    "minimum",
    """Elementwise minimum (ties send the gradient to ``x``, as in TensorFlow).

    >>> import gputape as gt
    >>> gt.minimum(gt.constant([1.0, 5.0]), 2.0).numpy().tolist()
    [1.0, 2.0]
    """,
)


def _to_chosen(x: Any, y: Any, out: Any, g: Any) -> tuple:
    """fmax/fmin ignore a NaN operand (numpy's rule): the gradient goes to the operand the result
    is, x on ties (as maximum/minimum) and when both are NaN to y."""
    return (_x.where(_x.eq(out, x), g, 0), _x.where(_x.eq(out, x), 0, g))


_fmax = declared("fmax", np.fmax, _to_chosen, complex=UNORDERED)
fmax = binary_op(
    _fmax,
    "fmax",
    """Elementwise maximum that ignores NaN (``fmax(1, nan)`` is 1); the gradient goes to the operand chosen.

    >>> import gputape as gt, numpy as np
    >>> gt.fmax(gt.constant([1.0, np.nan]), gt.constant([np.nan, 2.0])).numpy().tolist()
    [1.0, 2.0]
    """,
)
_fmin = declared("fmin", np.fmin, _to_chosen, complex=UNORDERED)
fmin = binary_op(
    _fmin,
    "fmin",
    """Elementwise minimum that ignores NaN (``fmin(1, nan)`` is 1); the gradient goes to the operand chosen.

    >>> import gputape as gt, numpy as np
    >>> gt.fmin(gt.constant([1.0, np.nan]), gt.constant([np.nan, 2.0])).numpy().tolist()
    [1.0, 2.0]
    """,
)


# -- sign and rounding (zero gradient) ---------------------------------------------


# numpy's sign of a complex z is z / |z|: not piecewise constant, so the zero VJP would be wrong
_COMPLEX_SIGN = refused(
    "the complex sign z / abs(z) is not holomorphic and its gradient is not implemented; "
    "write z / gt.abs(z), which is differentiable (0 at 0 needs a gt.where)"
)


def _zero_grad(F: Any, g: Any, needs: Any, nb: int, node: Any) -> Any:
    return (F.zeros_like(g),)


sign = _unary(
    "sign",
    np.sign,
    None,
    _doc("sign", "Elementwise sign (zero gradient).", "[-2.0, 0.0, 3.0]", "[-1.0, 0.0, 1.0]"),
    _zero_grad,
    complex=_COMPLEX_SIGN,
)
floor = _unary(
    "floor",
    np.floor,
    None,
    _doc("floor", "Elementwise floor (zero gradient).", "[1.5, -1.5]", "[1.0, -2.0]"),
    _zero_grad,
    complex="real",
)
ceil = _unary(
    "ceil",
    np.ceil,
    None,
    _doc("ceil", "Elementwise ceiling (zero gradient).", "[1.5, -1.5]", "[2.0, -1.0]"),
    _zero_grad,
    complex="real",
)
round = _unary(
    "round",
    lambda xp, x: xp.round(x),
    None,
    _doc(
        "round", "Round half to even, like numpy and TensorFlow (zero gradient).", "[0.5, 1.5, 2.4]", "[0.0, 2.0, 2.0]"
    ),
    _zero_grad,
    complex="direct",
)


# -- selection ---------------------------------------------------------------------


# The unselected branch gets an exact 0, never g * something: no NaN leaks.
_where = declared(
    "where",
    lambda xp, cond, x, y: xp.where(cond, x, y),
    lambda cond, x, y, g: (None, _x.where(cond, g, 0), _x.where(cond, 0, g)),
    complex="holomorphic",
)


def where(condition: Any, x: Any, y: Any) -> Tensor:
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


@primitive("real", complex="direct")
def _real(xp, x, complex):
    return xp.real(x)


@_real.defvjp
def _(F, g, needs, nb, node):
    return (g,)  # a real cotangent: the sweep casts it back to a complex input's dtype (imaginary part 0)


@primitive("imag", complex="direct")
def _imag(xp, x, complex):
    return xp.imag(x) if complex else xp.zeros_like(x)


@_imag.defvjp
def _(F, g, needs, nb, node):
    return (g * 1j if _complex_in(node) else g * 0,)


@primitive("conj", complex="direct")
def _conj(xp, x, complex):
    return xp.conj(x) if complex else x


@_conj.defvjp
def _(F, g, needs, nb, node):
    return (_conj_of(F, g) if _complex_in(node) else g,)


@primitive("angle", complex="direct", save=True)
def _angle(xp, x, complex):
    return xp.angle(x)


@_angle.defvjp
def _(F, g, needs, nb, node, x):
    if not _complex_in(node):
        return (g * 0,)  # angle of a real number is 0 or pi: piecewise constant
    # TensorFlow's _AngleGrad, -g / (imag(z) + i real(z)) = g (-y + i x) / |z|^2, and 0 at z == 0
    # (where the angle is not differentiable; numpy's angle(0) is 0).
    re, im = F.real(x), F.imag(x)
    r2 = re * re + im * im
    nz = r2 != 0
    return (F.where(nz, g * (im * -1 + re * 1j) / F.where(nz, r2, 1), 0),)


def _part(prim: Primitive, x: Any) -> Any:
    x = as_tensor(x)
    return apply(prim, (x,), {"complex": x.dtype.kind == "c"})


def real(val: Any) -> Tensor:
    """The real part (``numpy.real``); the identity on real tensors.

    >>> import gputape as gt
    >>> gt.real(gt.constant([1 + 2j, 4 - 3j])).numpy().tolist()
    [1.0, 4.0]
    """
    return _part(_real, val)


def imag(val: Any) -> Tensor:
    """The imaginary part (``numpy.imag``); zeros on real tensors.

    >>> import gputape as gt
    >>> gt.imag(gt.constant([1 + 2j, -3j])).numpy().tolist()
    [2.0, -3.0]
    """
    return _part(_imag, val)


def conj(x: Any) -> Tensor:
    """The complex conjugate (``numpy.conj``); the identity on real tensors.

    >>> import gputape as gt
    >>> gt.conj(gt.constant([1 + 2j])).numpy().tolist()
    [(1-2j)]
    """
    return _part(_conj, x)


conjugate = conj


def angle(z: Any, deg: bool = False) -> Tensor:
    """The argument of each element in radians (degrees with ``deg=True``), as ``numpy.angle``.

    Its gradient follows TensorFlow's ``_AngleGrad``; it is 0 at ``z == 0``, where the angle jumps.

    >>> import gputape as gt
    >>> gt.angle(gt.constant([1j, -1.0 + 0j]), deg=True).numpy().tolist()
    [90.0, 180.0]
    """
    out = _part(_angle, z)
    return out * (180.0 / math.pi) if deg else out


@primitive("clip", complex=UNORDERED, save=True)
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


def clip(x: Any, a_min: Any = None, a_max: Any = None, out: None = None, *, min: Any = None, max: Any = None) -> Tensor:
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


# (as in gputape.ops.arithmetic: numpy's rint is round's C-level forward on numpy inputs)
REGISTRY["round"].cpu = np.rint

__test__ = _doctests(globals())
