"""numpy names that are an existing op plus numpy's argument or dtype rule: ``around``, ``fabs``.

(The names that are exactly an existing op, ``amax amin remainder``, are plain
aliases in ``gputape.ops``.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import as_tensor
from ._compat import check_out
from ._util import norm_size
from .elementwise import abs, cast, identity, round


def around(a: Any, decimals: int = 0, out: None = None) -> Any:
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


def fabs(x: Any, /) -> Any:
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
