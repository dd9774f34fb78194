"""Creation ops and non-differentiable comparisons.

Created tensors are constants: nothing to record. Default dtype is float32
(TensorFlow's), and they go to the current device (``gt.device(...)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _state, backend
from .. import tape as _tape
from ..device import current_device
from ..tensor import Tensor, _py_dtype, _wrap, _wrap_op, as_tensor


def _xp(device: str | None) -> Any:
    return backend.xp_for_device(backend.parse_device(device) if device else current_device())


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, Tensor):
        shape = shape.numpy().tolist()
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def zeros(shape: Any, dtype: Any = "float32", device: str | None = None) -> Tensor:
    """A tensor of zeros (float32 by default).

    >>> import gputape as gt
    >>> gt.zeros((2, 3)).shape
    (2, 3)
    """
    return _wrap(_xp(device).zeros(_shape(shape), dtype))


def ones(shape: Any, dtype: Any = "float32", device: str | None = None) -> Tensor:
    """A tensor of ones (float32 by default).

    >>> import gputape as gt
    >>> gt.ones(2).numpy().tolist()
    [1.0, 1.0]
    """
    return _wrap(_xp(device).ones(_shape(shape), dtype))


def full(shape: Any, fill_value: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """A tensor filled with ``fill_value`` (dtype from the value: float -> float32).

    >>> import gputape as gt
    >>> gt.full((2,), 7.0).numpy().tolist()
    [7.0, 7.0]
    """
    if dtype is None:
        dtype = _py_dtype(fill_value) or np.asarray(fill_value).dtype
    return _wrap(_xp(device).full(_shape(shape), fill_value, dtype))


def _like(x: Any) -> Any:
    return as_tensor(x)._data


def zeros_like(x: Any, dtype: Any = None) -> Tensor:
    """Zeros with the shape, dtype and device of ``x``.

    >>> import gputape as gt
    >>> gt.zeros_like(gt.ones((2,))).numpy().tolist()
    [0.0, 0.0]
    """
    d = _like(x)
    return _wrap(backend.xp_of(d).zeros(d.shape, dtype or d.dtype))


def ones_like(x: Any, dtype: Any = None) -> Tensor:
    """Ones with the shape, dtype and device of ``x``.

    >>> import gputape as gt
    >>> gt.ones_like(gt.zeros((2,))).numpy().tolist()
    [1.0, 1.0]
    """
    d = _like(x)
    return _wrap(backend.xp_of(d).ones(d.shape, dtype or d.dtype))


def eye(n: int, m: int | None = None, dtype: Any = "float32", device: str | None = None) -> Tensor:
    """The identity matrix (``n x m``).

    >>> import gputape as gt
    >>> gt.eye(2).numpy().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    return _wrap(_xp(device).eye(n, m, dtype=dtype))


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: str | None = None) -> Tensor:
    """Evenly spaced values in ``[start, stop)``; Python ints give int32, floats float32.

    >>> import gputape as gt
    >>> gt.arange(3).numpy().tolist()
    [0, 1, 2]
    """
    if dtype is None:
        vals = [v for v in (start, stop, step) if v is not None]
        dtype = np.dtype("float32") if any(isinstance(v, float) for v in vals) else np.dtype("int32")
    if stop is None:
        start, stop = 0, start
    return _wrap(_xp(device).arange(start, stop, step, dtype=dtype))


def linspace(start: Any, stop: Any, num: int = 50, dtype: Any = "float32", device: str | None = None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive.

    >>> import gputape as gt
    >>> gt.linspace(0.0, 1.0, 3).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    return _wrap(_xp(device).linspace(start, stop, num, dtype=dtype))


# -- comparisons and other non-differentiable ops: bool/int results, never recorded --


def _nondiff(name: str, nargs: int) -> Any:
    def op(*args: Any) -> Tensor:
        datas = [a._data if isinstance(a, Tensor) else a for a in args]
        xp = np
        for d in datas:
            if hasattr(d, "shape") and backend.xp_of(d) is not np:
                xp = backend.xp_of(d)
        try:
            r = getattr(xp, name)(*datas)
        except (ValueError, TypeError) as exc:
            shapes = [getattr(d, "shape", type(d).__name__) for d in datas]
            raise ValueError(f"gt.{name}: cannot apply to inputs of shapes {shapes}: {exc}") from exc
        res = _wrap_op(np.asarray(r) if isinstance(r, np.generic) else r)
        if _state.tls.obs is not None:
            _tape.traced(_fixed(getattr(xp, name)), tuple(args), res._data, True)
            _tape.note_nondiff(name, args, res)
        return res

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"""Elementwise ``{name}`` (no gradient: the result is {"bool" if name != "sign" else "float"}).

    >>> import gputape as gt
    >>> gt.{name}({", ".join(["gt.constant([1.0, 2.0])"] + ["1.5"] * (nargs - 1))}).numpy().tolist()
    {getattr(np, name)(*([np.array([1.0, 2.0])] + [1.5] * (nargs - 1))).tolist()}
    """
    return op


equal = _nondiff("equal", 2)
not_equal = _nondiff("not_equal", 2)
less = _nondiff("less", 2)
less_equal = _nondiff("less_equal", 2)
greater = _nondiff("greater", 2)
greater_equal = _nondiff("greater_equal", 2)
logical_and = _nondiff("logical_and", 2)
logical_or = _nondiff("logical_or", 2)
logical_xor = _nondiff("logical_xor", 2)
logical_not = _nondiff("logical_not", 1)
isfinite = _nondiff("isfinite", 1)
isnan = _nondiff("isnan", 1)
isinf = _nondiff("isinf", 1)


def argmax(x: Any, axis: Any = None) -> Tensor:
    """Index of the maximum along ``axis`` (no gradient).

    >>> import gputape as gt
    >>> gt.argmax(gt.constant([[1.0, 3.0], [4.0, 2.0]]), axis=1).numpy().tolist()
    [1, 0]
    """
    return _index_result("argmax", x, axis, backend.xp_of(_like(x)).argmax(_like(x), axis=axis))


def argmin(x: Any, axis: Any = None) -> Tensor:
    """Index of the minimum along ``axis`` (no gradient).

    >>> import gputape as gt
    >>> gt.argmin(gt.constant([[1.0, 3.0], [4.0, 2.0]]), axis=1).numpy().tolist()
    [0, 1]
    """
    return _index_result("argmin", x, axis, backend.xp_of(_like(x)).argmin(_like(x), axis=axis))


def _index_result(name: str, x: Any, axis: Any, r: Any) -> Tensor:
    res = _wrap_op(np.asarray(r) if isinstance(r, np.generic) else r)
    if _state.tls.obs is not None and isinstance(x, Tensor):
        _tape.traced(_fixed(getattr(backend.xp_of(res._data), name)), (x, axis), res._data, True)
        _tape.note_nondiff(name, (x,), res)
    return res


def _fixed(fn: Any) -> Any:
    """``fn`` with numpy scalar results made 0-d arrays, as tensors hold (for gt.function replays)."""

    def call(*args: Any) -> Any:
        r = fn(*args)
        return np.asarray(r) if isinstance(r, np.generic) else r

    return call
