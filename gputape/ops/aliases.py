"""numpy names that are an existing op plus numpy's argument or dtype rule: ``around``, ``fabs``,
``nan_to_num``.

(The names that are exactly an existing op, ``amax amin remainder``, are plain
aliases in ``gputape.ops``.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.tensor import Tensor, as_tensor
from ._compat import check_out
from ._util import norm_real, norm_size
from .elementwise import abs, cast, identity, round


def around(a: Any, decimals: int = 0, out: None = None) -> Tensor:
    """Round half to even to ``decimals`` decimal places (negative: to tens, hundreds, ...), numpy's method:
    ``round(x * 10**decimals) / 10**decimals``. Zero gradient, as ``round``; integers stay integers.

    >>> import gputape as gt
    >>> gt.around(gt.constant([1.25, 2.675, 12.5], "float64"), 1).numpy().tolist()
    [1.2, 2.7, 12.5]
    >>> gt.around(gt.constant([1234, 1250]), -2).numpy().tolist()
    [1200, 1200]
    """
    check_out("around", out)
    x = as_tensor(a)
    d = norm_size(decimals, "around", "a number of decimals", None)
    if x.dtype.kind in "biu":
        if d >= 0:
            return identity(x)  # numpy: integers are already rounded
        f = 10 ** (-d)
        return cast(round(cast(x, "float64") / f) * f, x.dtype)
    if d == 0:
        return round(x)
    if d > 0:
        f = 10.0**d
        return round(x * f) / f
    f = 10.0 ** (-d)
    return round(x / f) * f


def fabs(x: Any, /) -> Tensor:
    """Absolute value as a float: numpy's ``fabs`` (integers become the float type numpy picks).

    ``abs`` after a cast to that type; complex input is refused, as numpy does.

    >>> import gputape as gt
    >>> gt.fabs(gt.constant([-1, 2])).numpy().tolist(), str(gt.fabs(gt.constant([-1, 2])).dtype)
    ([1.0, 2.0], 'float64')
    """
    t = as_tensor(x)
    try:
        dt = np.fabs(np.zeros((), t.dtype)).dtype
    except TypeError:
        raise TypeError(f"gt.fabs: not defined for dtype {t.dtype}; use gt.abs for complex values") from None
    return abs(t if t.dtype == dt else cast(t, dt))


def nan_to_num(x: Any, copy: bool = True, nan: Any = 0.0, posinf: Any = None, neginf: Any = None) -> Tensor:
    """NaN replaced by ``nan``, +/-inf by ``posinf``/``neginf`` (default: the dtype's largest and
    smallest finite values), numpy's ``nan_to_num``. A composition of ``where``: the gradient is
    the incoming one where ``x`` is finite and 0 where a value was replaced. ``copy`` is accepted
    (tensors are never changed in place).

    >>> import gputape as gt, numpy as np
    >>> gt.nan_to_num(gt.constant([1.0, np.nan, np.inf, -np.inf], "float64"), posinf=9.0).numpy().tolist()
    [1.0, 0.0, 9.0, -1.7976931348623157e+308]
    """
    from .creation import isfinite, isnan
    from .elementwise import where

    t = as_tensor(x)
    if t.dtype.kind not in "fc":
        return identity(t)  # integers and bools have no NaN or inf
    if t.dtype.kind == "c":
        raise TypeError("gt.nan_to_num: complex tensors are not supported yet; apply it to gt.real(x) and gt.imag(x)")
    info = np.finfo(t.dtype)
    big = info.max if posinf is None else norm_real(posinf, "nan_to_num", "posinf")
    small = info.min if neginf is None else norm_real(neginf, "nan_to_num", "neginf")
    fill = norm_real(nan, "nan_to_num", "nan")
    bound = where(t > 0, np.asarray(big, t.dtype), np.asarray(small, t.dtype))
    return where(isfinite(t), t, where(isnan(t), np.asarray(fill, t.dtype), bound))
