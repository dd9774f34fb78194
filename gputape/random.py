"""Random tensors (``gt.random``), from one seeded numpy Generator.

>>> import gputape as gt
>>> gt.random.seed(0)
>>> a = gt.random.normal((2,)).numpy()
>>> gt.random.seed(0)
>>> bool((a == gt.random.normal((2,)).numpy()).all())
True
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .core import _errors
from .core.recording import traced
from .core.tensor import Tensor, _wrap
from .devices import backend
from .devices.placement import current_device
from .ops._util import is_index as _is_index
from .ops._util import norm_dtype as _norm_dtype
from .ops._util import norm_real as _norm_real
from .ops._util import norm_shape as _norm_shape

_rng = np.random.default_rng()

__all__ = ["generator", "normal", "seed", "uniform"]


def seed(n: int) -> None:
    """Reseed the generator behind ``normal`` and ``uniform`` (reproducible runs).

    >>> import gputape as gt
    >>> gt.random.seed(42)
    """
    global _rng
    try:
        if _is_index(n) or isinstance(n, (float, str, bytes)):
            n = operator.index(n)
        _rng = np.random.default_rng(n)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(
            n, "is not a seed", exc, arg="n", hint="pass a non-negative int (or a sequence of them)"
        ) from exc


def generator() -> np.random.Generator:
    """The numpy Generator behind ``normal``/``uniform`` (initializers and dropout draw from it too).

    >>> import gputape as gt
    >>> gt.random.seed(0)
    >>> a = gt.random.generator().integers(100)
    >>> gt.random.seed(0)
    >>> bool(a == gt.random.generator().integers(100))
    True
    """
    return _rng


def _place(a: np.ndarray, device: str | None) -> Tensor:
    dev = backend.parse_device(device) if device else current_device()
    return _wrap(a if dev == "cpu" else backend.asarray_on(a, dev))


def _float_dtype(dtype: Any, op: str, dt: np.dtype | None = None) -> np.dtype:
    dt = _norm_dtype(dtype, f"random.{op}") if dt is None else dt
    if dt.kind != "f":
        raise _errors.argument_error(
            dtype,
            f"is {dt}, but gt.random.{op} draws real numbers",
            arg="dtype",
            cls=ValueError,
            hint="pass a float dtype ('float16', 'float32', 'float64')"
            + (", or give maxval for integers in [minval, maxval)" if op == "uniform" and dt.kind in "iu" else ""),
        )
    return dt


def _bound(v: Any, what: str) -> Any:
    """A distribution parameter: a real number (NaN and inf pass, as in numpy and TensorFlow)."""
    return _norm_real(v, None, arg=what)  # named after the public function the user called


def _sample(kind: str, a: Any, b: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    try:
        if kind == "integers":
            return _rng.integers(a, b, shape, dtype=dtype)
        return getattr(_rng, kind)(a, b, shape).astype(dtype)
    except _errors.NEVER_WRAP:
        raise
    except (ValueError, OverflowError) as exc:  # numpy's own checks, after ours (maxval=nan for integers)
        raise _errors.argument_error(b, "is not a valid parameter of the distribution", exc, cls=ValueError) from exc


def _check_order(ok: bool, v: Any, arg: str, problem: str) -> None:
    if not ok:
        raise _errors.argument_error(v, problem, arg=arg, cls=ValueError)


def normal(
    shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = "float32", device: str | None = None
) -> Tensor:
    """Samples from N(mean, stddev**2), float32 by default.

    ``dtype`` must be a float dtype (a ValueError otherwise, as in TensorFlow); ``stddev``
    must not be negative.

    >>> import gputape as gt
    >>> gt.random.normal((2, 3)).shape
    (2, 3)
    """
    shape = _norm_shape(shape, "random.normal")
    dt = _float_dtype(dtype, "normal")
    mean, stddev = _bound(mean, "mean"), _bound(stddev, "stddev")
    _check_order(not stddev < 0, stddev, "stddev", "must not be negative")
    t = _place(_sample("normal", mean, stddev, shape, dt), device)
    _traced(_draw, ("normal", (mean, stddev, shape), dt, t.device), t)
    return t


def uniform(
    shape: Any, minval: float = 0.0, maxval: float | None = None, dtype: Any = "float32", device: str | None = None
) -> Tensor:
    """Samples from U[minval, maxval), float32 by default (``maxval`` defaults to 1 for floats).

    TensorFlow's rule for integers: an integer ``dtype`` draws integers in
    ``[minval, maxval)`` and needs ``maxval``; bool is no dtype to draw from.

    >>> import gputape as gt
    >>> bool((gt.random.uniform((100,)).numpy() < 1).all())
    True
    >>> sorted(set(gt.random.uniform((100,), 2, 5, dtype="int32").numpy().tolist()))
    [2, 3, 4]
    """
    shape = _norm_shape(shape, "random.uniform")
    dt = _norm_dtype(dtype, "random.uniform")
    if dt.kind in "iu":
        if maxval is None:
            raise _errors.argument_error(
                maxval,
                f"must be given for an integer dtype ({dt}): integers are drawn from [minval, maxval)",
                arg="maxval",
                cls=ValueError,
            )
        lo, hi = _int_bound(minval, "minval"), _int_bound(maxval, "maxval")
        _check_order(hi > lo, maxval, "maxval", f"must be greater than minval ({lo}) to draw integers")
        kind: str = "integers"
    else:
        dt = _float_dtype(dtype, "uniform", dt)
        lo, hi, kind = _bound(minval, "minval"), _bound(1.0 if maxval is None else maxval, "maxval"), "uniform"
        _check_order(math.isfinite(lo), minval, "minval", "must be finite (numpy draws nothing from an infinite range)")
        _check_order(math.isfinite(hi), maxval, "maxval", "must be finite (numpy draws nothing from an infinite range)")
    t = _place(_sample(kind, lo, hi, shape, dt), device)
    _traced(_draw, (kind, (lo, hi, shape), dt, t.device), t)
    return t


def _int_bound(v: Any, what: str) -> int:
    try:
        return operator.index(v)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(v, "is not an integer (the dtype is an integer dtype)", exc, arg=what) from exc


def _traced(fn: Any, args: tuple, t: Tensor) -> None:
    traced(fn, args, t._data)  # a gt.function replay draws fresh numbers each call


def _draw(kind: str, args: tuple, dtype: Any, device: str) -> Any:
    a = _sample(kind, *args, dtype)
    return a if device == "cpu" else backend.asarray_on(a, device)
