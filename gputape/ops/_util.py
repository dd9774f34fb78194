"""Helpers shared by the op modules: argument normalisation (axes, shapes, sizes, dtypes); sum_to
(gputape.core.backward.sweep).

The normalisers are the boundary where arguments enter the ops: each runs what it always
ran and only when that fails builds, through ``gputape.core._errors``, an error that names the
public function and the argument.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..core import _errors
from ..core.backward.sweep import sum_to  # noqa: F401 (the ops' name for it; broadcasting is undone in the sweep's module)
from ..core.tensor import NUMERIC_KINDS, Tensor, _tolist, read_value

NOPARAMS: dict[str, Any] = {}  # shared, never mutated: most ops take no parameters


def is_index(v: Any) -> bool:
    """One integer (an int, a numpy integer, a 0-d array or tensor), not a sequence of them.

    ``hasattr(v, "__index__")`` alone would take a 1-d numpy array for one: ndarray defines it.
    """
    return hasattr(v, "__index__") and not getattr(v, "ndim", 0)


def norm_axes(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    """Normalise ``axis`` (None, int or tuple) to a sorted tuple of non-negative ints.

    An axis that is not an integer (a string, a float, None inside a tuple), out of range or
    repeated raises a TypeError/ValueError naming the function and the argument.
    """
    if axis is None:
        return tuple(range(ndim))
    top = ndim if ndim else 1  # a 0-d tensor takes axis 0 (or -1), as numpy's reductions do
    out = []
    try:
        a0 = axis.numpy().tolist() if isinstance(axis, Tensor) else axis
        for a in (a0,) if isinstance(a0, int) or is_index(a0) else tuple(a0):
            a = _index(a)
            if not -ndim <= a < top:
                raise _out_of_range(axis, ndim, op)
            out.append(a % ndim if ndim else 0)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _axis_error(axis, exc, op) from exc
    if len(set(out)) != len(out):
        raise _errors.argument_error(axis, "repeats an axis (repeated axis)", op=op, cls=ValueError)
    return tuple(sorted(out))


def norm_axis(axis: Any, ndim: int, op: str) -> int:
    """Normalise a single axis to a non-negative int (errors as in :func:`norm_axes`)."""
    try:
        a = _index(axis)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _axis_error(axis, exc, op) from exc
    if not -ndim <= a < ndim:
        raise _out_of_range(axis, ndim, op)
    return a % ndim


_index = operator.index  # numpy's rule: 1.5 or "1" is no axis (int() would take both)


def _out_of_range(axis: Any, ndim: int, op: str) -> Exception:
    return _errors.argument_error(
        axis, f"is out of range for a tensor of rank {ndim} (axes go from {-ndim} to {ndim - 1})", op=op, cls=ValueError
    )


def _axis_error(axis: Any, exc: Exception, op: str) -> Exception:
    if _errors.is_clear(exc):
        return exc
    return _errors.argument_error(
        axis, "is not an axis", exc, op=op, cls=TypeError, hint="pass an int, a tuple of ints or None"
    )


def norm_shape(shape: Any, op: str, allow_unknown: bool = False, signed: bool = False) -> tuple[int, ...]:
    """A shape argument (an int, a sequence of ints, a 1-d integer tensor or array) as a tuple.

    Sizes must be integers (numpy refuses ``2.5``; ``int()`` would truncate it) and
    non-negative; with ``allow_unknown`` one ``-1`` is allowed (reshape); ``signed`` takes
    any integers (split's indices).
    """
    dims = norm_ints(shape, op, "a shape")
    for d in dims:
        if d < 0 and not signed and not (allow_unknown and d == -1 and dims.count(-1) == 1):
            raise _errors.argument_error(
                shape,
                "has a negative size" + (" (only one -1 is allowed)" if allow_unknown else ""),
                op=op,
                cls=ValueError,
            )
    return dims


def norm_ints(v: Any, op: str, what: str = "integers") -> tuple[int, ...]:
    """An int or a sequence of ints (a 1-d integer tensor or array too) as a tuple, of any sign."""
    try:
        if isinstance(v, Tensor):
            v = read_value(v, _tolist)
        return (operator.index(v),) if is_index(v) else tuple(operator.index(s) for s in v)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(
            v, f"is not {what}", exc, op=op, cls=TypeError, hint="pass an int or a sequence of ints"
        ) from exc


def norm_axis_seq(axes: Any, ndim: int, op: str) -> tuple[int, ...]:
    """An axis or a sequence of axes, normalised to non-negative ints in the order given (repeats kept:
    the caller knows whether they are allowed)."""
    try:
        raw = (axes,) if is_index(axes) else tuple(axes)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _axis_error(axes, exc, op) from exc
    return tuple(norm_axis(a, ndim, op) for a in raw)


def array_sequence(value: Any, op: str | None, arg: str = "tup") -> list[Any]:
    """numpy's sequence-of-arrays argument (``stack``, ``concatenate``, ``vstack``...) as a list.

    A list or tuple is taken as it is; a single tensor or array is iterated along its first
    axis, as numpy iterates it (``np.vstack(a)`` is ``np.vstack(list(a))``), and a tensor's
    rows are its differentiable ``x[i]``. Anything else is refused, as numpy refuses a
    generator.

    >>> import gputape as gt
    >>> gt.vstack(gt.zeros((2, 3))).shape, gt.stack(gt.zeros((2, 3))).shape
    ((2, 3), (2, 3))
    """
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Tensor) or (hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "ndim")):
        if value.ndim == 0:
            raise _errors.argument_error(
                value,
                "is a 0-d array: numpy iterates an array argument along its first axis, and it has none",
                op=op,
                arg=arg,
                cls=TypeError,
                hint="pass a list of tensors, e.g. [x]",
            )
        return list(value)
    raise _errors.argument_error(
        value,
        "is not a list or tuple of tensors (or one tensor or array, iterated along its first axis)",
        op=op,
        arg=arg,
        cls=TypeError,
    )


def norm_list(value: Any, op: str, what: str = "a list or tuple") -> list[Any]:
    """A sequence argument (a list of tensors, of conditions) as a list."""
    try:
        if value is None or isinstance(value, (str, bytes, dict)):
            raise TypeError(f"{type(value).__name__} is not {what}")
        return list(value)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(value, f"is not {what}", exc, op=op, cls=TypeError) from exc


def norm_size(n: Any, op: str, what: str = "a size", minimum: int | None = 0) -> int:
    """An integer argument (a count, a number of sections, an offset) that must be at least
    ``minimum`` (any integer when None). ``True``/``False`` are ints to Python and pass, as in numpy."""
    try:
        k = operator.index(n)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(n, f"is not an integer ({what})", exc, op=op, cls=TypeError) from exc
    if minimum is not None and k < minimum:
        raise _errors.argument_error(n, f"must be at least {minimum} ({what})", op=op, cls=ValueError)
    return k


def norm_dtype(dtype: Any, op: str) -> np.dtype:
    """A dtype argument as a numpy dtype; only numbers (bool, int, uint, float, complex) are tensors' dtypes."""
    try:
        dt = np.dtype(dtype)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(
            dtype, "is not a dtype", exc, op=op, cls=TypeError, hint="pass e.g. 'float32', gt.float32 or np.int64"
        ) from exc
    if dt.kind not in NUMERIC_KINDS:
        raise _errors.argument_error(
            dtype,
            f"is dtype {dt}, which no gputape op computes with",
            op=op,
            cls=TypeError,
            hint="tensors hold bool, integer, float or complex numbers",
        )
    return dt


def norm_real(v: Any, op: str | None, arg: str | None = None, *, finite: bool = False) -> Any:
    """A real-number argument (ddof, a distribution's mean): NaN and inf pass, as in numpy,
    unless ``finite`` (a cutoff, a regulariser: a non-finite one only makes a meaningless result)."""
    if (type(v) is float or type(v) is int) and not finite:
        return v
    try:
        if isinstance(v, (str, bytes, complex, np.complexfloating)) or v is None:
            raise TypeError(f"{type(v).__name__} is not a real number")
        x = float(v)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(v, "is not a real number", exc, op=op, arg=arg, cls=TypeError) from exc
    if finite and not np.isfinite(x):
        raise _errors.argument_error(v, "must be a finite number", op=op, arg=arg, cls=ValueError)
    return x


def norm_flag(flag: Any, op: str) -> bool:
    """A boolean argument (``keepdims``): anything Python can take the truth of."""
    try:
        return bool(flag)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(flag, "has no truth value", exc, op=op, cls=TypeError) from exc
