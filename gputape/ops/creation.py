"""Creation ops and non-differentiable comparisons.

Created tensors are constants: nothing to record. Default dtype is float32
(TensorFlow's), and they go to the current device (``gt.device(...)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import _errors
from ..core.dispatch import _const_array
from ..core.recording import integer_result
from ..core.tensor import Tensor, _py_dtype, _to_array, _wrap, _wrap_op, as_tensor, read_value
from ..devices import backend
from ..devices.placement import current_device
from ._util import norm_axis, norm_dtype, norm_flag, norm_shape, norm_size


def _xp(device: str | None) -> Any:
    return backend.xp_for_device(backend.parse_device(device) if device else current_device())


def _create(op: str, names: str, make: Any, *args: Any, **kwargs: Any) -> Tensor:
    """Run numpy's/cupy's constructor on arguments already checked one by one; what it still
    refuses in combination (an arange whose bounds give no length) names the arguments."""
    try:
        return _wrap(make(*args, **kwargs))
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(
            args, "cannot make a tensor together", exc, op=op, arg=names, cls=ValueError
        ) from exc


def _dtype(dtype: Any, op: str) -> Any:
    return None if dtype is None else norm_dtype(dtype, op)


def _number(v: Any, op: str) -> Any:
    """A scalar argument (a fill value, a bound): numbers pass, anything else must convert to one."""
    if type(v) is float or type(v) is int or isinstance(v, (np.number, np.bool_, bool, complex)):
        return v
    if isinstance(v, Tensor):  # a traced tensor's value: gt.function guards on it
        return read_value(v, _scalar_or_array)
    a = _to_array(v)  # refuses None, strings, hostile objects, naming the function and argument
    return a if a.ndim else a[()]


def _scalar_or_array(a: Any) -> Any:
    return a if a.ndim else a[()]


def _any_zero(a: Any) -> bool:
    return bool((a == 0).any())


def zeros(shape: Any, dtype: Any = "float32", device: str | None = None) -> Tensor:
    """A tensor of zeros (float32 by default).

    >>> import gputape as gt
    >>> gt.zeros((2, 3)).shape
    (2, 3)
    """
    return _create("zeros", "shape, dtype", _xp(device).zeros, norm_shape(shape, "zeros"), norm_dtype(dtype, "zeros"))


def ones(shape: Any, dtype: Any = "float32", device: str | None = None) -> Tensor:
    """A tensor of ones (float32 by default).

    >>> import gputape as gt
    >>> gt.ones(2).numpy().tolist()
    [1.0, 1.0]
    """
    return _create("ones", "shape, dtype", _xp(device).ones, norm_shape(shape, "ones"), norm_dtype(dtype, "ones"))


def full(shape: Any, fill_value: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """A tensor filled with ``fill_value`` (dtype from the value: float -> float32).

    >>> import gputape as gt
    >>> gt.full((2,), 7.0).numpy().tolist()
    [7.0, 7.0]
    """
    shape = norm_shape(shape, "full")
    fill_value = _number(fill_value, "full")
    if dtype is None:
        dtype = _py_dtype(fill_value) or np.asarray(fill_value).dtype
    return _create("full", "shape, fill_value, dtype", _xp(device).full, shape, fill_value, norm_dtype(dtype, "full"))


def _like(x: Any) -> Any:
    return as_tensor(x)._data


def zeros_like(x: Any, dtype: Any = None) -> Tensor:
    """Zeros with the shape, dtype and device of ``x``.

    >>> import gputape as gt
    >>> gt.zeros_like(gt.ones((2,))).numpy().tolist()
    [0.0, 0.0]
    """
    d = _like(x)
    return _wrap(backend.xp_of(d).zeros(d.shape, _dtype(dtype, "zeros_like") or d.dtype))


def ones_like(x: Any, dtype: Any = None) -> Tensor:
    """Ones with the shape, dtype and device of ``x``.

    >>> import gputape as gt
    >>> gt.ones_like(gt.zeros((2,))).numpy().tolist()
    [1.0, 1.0]
    """
    d = _like(x)
    return _wrap(backend.xp_of(d).ones(d.shape, _dtype(dtype, "ones_like") or d.dtype))


def eye(n: int, m: int | None = None, dtype: Any = "float32", device: str | None = None) -> Tensor:
    """The identity matrix (``n x m``).

    >>> import gputape as gt
    >>> gt.eye(2).numpy().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    n = norm_size(n, "eye", "a number of rows")
    m = None if m is None else norm_size(m, "eye", "a number of columns")
    return _create("eye", "n, m", _xp(device).eye, n, m, dtype=norm_dtype(dtype, "eye"))


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: str | None = None) -> Tensor:
    """Evenly spaced values in ``[start, stop)``; Python ints give int32, floats float32.

    >>> import gputape as gt
    >>> gt.arange(3).numpy().tolist()
    [0, 1, 2]
    """
    start, step = _number(start, "arange"), _number(step, "arange")
    stop = None if stop is None else _number(stop, "arange")
    if dtype is None:
        vals = [v for v in (start, stop, step) if v is not None]
        dtype = np.dtype("float32") if any(isinstance(v, float) for v in vals) else np.dtype("int32")
    if stop is None:
        start, stop = 0, start
    return _create(
        "arange", "start, stop, step", _xp(device).arange, start, stop, step, dtype=norm_dtype(dtype, "arange")
    )


def linspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: Any = None,
    axis: int = 0,
    *,
    device: str | None = None,
) -> Any:
    """``num`` evenly spaced values from ``start`` to ``stop`` (inclusive unless ``endpoint=False``).

    numpy's signature and method (``start + arange(num) * step``, the last value set to
    ``stop``); array endpoints give one sequence per element along ``axis``. The
    dtype defaults to the endpoints' float dtype (float64 tensors or arrays give
    float64; Python numbers float32, gputape's rule). Tensor endpoints are
    differentiable: the result is composed of ``arange``, ``multiply`` and ``add``.
    Complex endpoints with a real ``dtype`` are refused (``TypeError``), as ``gt.constant``
    refuses them, where numpy drops the imaginary part with a warning.

    >>> import gputape as gt
    >>> gt.linspace(0.0, 1.0, 3).numpy().tolist()
    [0.0, 0.5, 1.0]
    >>> a = gt.constant(1.0, "float64")
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(a)
    ...     y = gt.linspace(a, 2.0, 5)
    >>> str(y.dtype), tape.gradient(y, a).numpy().item()
    ('float64', 2.5)
    """
    num = norm_size(num, "linspace", "a number of samples")
    endpoint, retstep = norm_flag(endpoint, "linspace"), norm_flag(retstep, "linspace")
    ends = [
        v if isinstance(v, Tensor) else np.asarray(v, _py_dtype(v)) if type(v) in (float, int) else _to_array(v)
        for v in (start, stop)
    ]  # (Python numbers, the common case, skip the general conversion and its checks)
    dt = np.result_type(*(e.dtype for e in ends))
    if dt.kind not in "fc":
        dt = np.dtype("float32")
    dtype = dt if dtype is None else norm_dtype(dtype, "linspace")
    if dt.kind == "c" and dtype.kind != "c":  # numpy drops the imaginary part with a warning; constant() refuses
        bad = start if ends[0].dtype.kind == "c" else stop
        raise _errors.argument_error(
            bad, f"is complex and cannot be converted to {dtype} without dropping its imaginary part", cls=TypeError
        )
    axis = norm_axis(axis, max(e.ndim for e in ends) + 1, "linspace")
    if not any(isinstance(e, Tensor) for e in ends):
        out = _xp(device).linspace(
            _like_host(ends[0], device), _like_host(ends[1], device), num, endpoint, retstep, dt, axis
        )
        y, step = out if retstep else (out, None)
        y = _wrap(y.astype(dtype, copy=False) if dtype.kind in "fc" else _xp(device).floor(y).astype(dtype))
        return (y, step) if retstep else y
    return _linspace_diff(ends, num, endpoint, retstep, dt, dtype, axis)


def _like_host(e: Any, device: str | None) -> Any:
    """An endpoint array on the device the result goes to (numpy endpoints stay as they are on the CPU)."""
    if _xp(device) is np:
        return e
    return backend.asarray_on(e, backend.parse_device(device) if device else current_device())  # counted


def _linspace_diff(ends: list, num: int, endpoint: bool, retstep: bool, dt: Any, dtype: Any, axis: int) -> Any:
    from ._compat import on_device
    from .elementwise import cast, floor
    from .shape import broadcast_to, concatenate, moveaxis, reshape

    first = next(e for e in ends if isinstance(e, Tensor))
    s, e = (cast(v, dt) if isinstance(v, Tensor) and v.dtype != dt else v for v in ends)
    s, e = (v if isinstance(v, Tensor) else _wrap(on_device(first, np.asarray(v, dt))) for v in (s, e))
    delta = e - s
    shape = np.broadcast_shapes(s.shape, e.shape)
    t = _wrap(backend.xp_of(first._data).arange(num, dtype=dt).reshape((-1,) + (1,) * len(shape)))
    div = num - 1 if endpoint else num
    if div > 0:
        step = delta / div
        # numpy's guard for a step that underflows to 0 (denormal endpoints): scale by delta last
        y = (t / div) * delta if read_value(step, _any_zero) else t * step
    else:
        step = _wrap(np.asarray(np.nan, dt))
        y = t * delta
    y = y + s
    if endpoint and num > 1:
        y = concatenate([y[:-1], reshape(broadcast_to(e, shape), (1,) + shape)], axis=0)
    if axis != 0:
        y = moveaxis(y, 0, axis)
    if dtype != dt:
        y = cast(floor(y), dtype) if dtype.kind in "biu" else cast(y, dtype)
    return (y, step) if retstep else y


# -- comparisons and other non-differentiable ops: bool/int results, never recorded --


def _nondiff(name: str, nargs: int) -> Any:
    def op(*args: Any) -> Tensor:
        # None stays None: numpy (and TensorFlow) say t == None is all False, not an error
        datas = [a._data if isinstance(a, Tensor) else a if a is None else _const_array(a, None) for a in args]
        xp = np
        for d in datas:
            if hasattr(d, "shape") and backend.xp_of(d) is not np:
                xp = backend.xp_of(d)
        try:
            r = getattr(xp, name)(*datas)
        except _errors.NEVER_WRAP:
            raise
        except Exception as exc:
            shapes = [getattr(d, "shape", type(d).__name__) for d in datas]
            dtypes = [str(getattr(d, "dtype", type(d).__name__)) for d in datas]
            raise _errors.mark(
                ValueError(f"gt.{name}: cannot apply to inputs of shapes {shapes} and dtypes {dtypes}: {exc}")
            ) from exc
        res = _wrap_op(np.asarray(r) if isinstance(r, np.generic) else r)
        integer_result(name, _fixed(getattr(xp, name)), tuple(args), res)
        return res

    _errors.own_code(op, name)
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
    d = _like(x)
    ax = None if axis is None else norm_axis(axis, d.ndim, "argmax")
    return _index_result("argmax", x, axis, backend.xp_of(d).argmax(d, axis=ax))


def argmin(x: Any, axis: Any = None) -> Tensor:
    """Index of the minimum along ``axis`` (no gradient).

    >>> import gputape as gt
    >>> gt.argmin(gt.constant([[1.0, 3.0], [4.0, 2.0]]), axis=1).numpy().tolist()
    [0, 1]
    """
    d = _like(x)
    ax = None if axis is None else norm_axis(axis, d.ndim, "argmin")
    return _index_result("argmin", x, axis, backend.xp_of(d).argmin(d, axis=ax))


def _index_result(name: str, x: Any, axis: Any, r: Any) -> Tensor:
    res = _wrap_op(np.asarray(r) if isinstance(r, np.generic) else r)
    if isinstance(x, Tensor):
        integer_result(name, _fixed(getattr(backend.xp_of(res._data), name)), (x, axis), res, (x,))
    return res


def _fixed(fn: Any) -> Any:
    """``fn`` with numpy scalar results made 0-d arrays, as tensors hold (for gt.function replays)."""

    def call(*args: Any) -> Any:
        r = fn(*args)
        return np.asarray(r) if isinstance(r, np.generic) else r

    return call
