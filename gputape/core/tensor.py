"""Tensor, Variable and constant: the values that flow through gputape.

A :class:`Tensor` wraps one device array (numpy on the CPU, cupy on a GPU) and
a process-unique integer id. Tapes never hold tensors by reference to decide
what they track: they hold ids, exactly as TensorFlow does, so a tape keeps
alive only the residuals its ops declared, and ``del tape`` frees them.

A :class:`Variable` is a Tensor whose array is replaced by every update: an
array, once a variable has published it, is never written again (a tape may
have recorded it, another thread may be reading it), so an update computes a
new array and stores it with one reference store. Its id is stable across
assignments, so gradients accumulate to the variable whatever value it held
when each op read it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..devices import backend
from ..devices.placement import placement, tensor_dlpack, tensor_dlpack_device
from . import _errors
from ._generate import generate
from .state import tls as _tls

# Two id streams: outputs of ops get even ids, constants and variables odd ids.
# Ids stay unique, and the parity tells the debugger, for free, whether a value
# the tape never saw was computed by an op (outside the tape) or is a constant.
_next_id = itertools.count(2, 2).__next__  # op outputs
_next_const_id = itertools.count(1, 2).__next__  # constants, variables
_ndarray = np.ndarray
_new = object.__new__

# TensorFlow's dtype spellings, as numpy dtypes.
float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
bool_ = np.dtype("bool")

FLOAT_DTYPES = frozenset((float16, float32, float64))


def read_value(t: Tensor, convert: Any) -> Any:
    """``convert(t's host array)``: the one way a tensor's value becomes a Python value or host array.

    ``float(t)``, ``bool(t)``, ``.numpy()``, ``np.asarray(t)``, ``.tolist()`` and every op
    that turns a tensor argument into a Python constant (a shape, a count, a bound) read
    values through here, so the observers see each read: a recording tape notes it (so
    ``tape.explain()`` can say 'left_tape'), and a ``gt.function`` trace records a guard
    that redoes ``convert`` at every replay and compares (``convert`` must be a plain
    function of the host array: it is called again with later calls' values).
    """
    value = convert(backend.to_host(t._data))
    obs = _tls.obs
    if obs is not None:
        obs.exported(t, value if type(value) is _ndarray else None, convert, value)
    return value


def _copy(host: Any) -> np.ndarray:
    return np.array(host, copy=True)


def _tolist(host: Any) -> Any:
    return host.tolist()


def _float(host: Any) -> float:
    return float(host)


def _int(host: Any) -> int:
    return int(host)


def _bool(host: Any) -> bool:
    return bool(host)


class _Item:
    """``host.item(*args)``, kept with its arguments (a guard calls it again at replay)."""

    __slots__ = ("args",)

    def __init__(self, args: tuple) -> None:
        self.args = args

    def __call__(self, host: Any) -> Any:
        return host.item(*self.args)


class _AsArray:
    """numpy's ``__array__(dtype, copy)`` of a host array."""

    __slots__ = ("copy", "dtype")

    def __init__(self, dtype: Any, copy: Any) -> None:
        self.dtype = dtype
        self.copy = copy

    def __call__(self, host: Any) -> Any:
        if self.dtype is not None and host.dtype != np.dtype(self.dtype):
            if self.copy is False:  # numpy 2's rule: copy=False promises no copy
                raise ValueError(
                    f"Unable to avoid copy while creating an array as requested: the tensor is {host.dtype}, "
                    f"not {np.dtype(self.dtype)} (np.asarray(t, dtype={np.dtype(self.dtype)!s}) converts)"
                )
            return host.astype(self.dtype)
        return np.array(host, copy=True) if self.copy else host


def _note_assign(var: Variable, op: str, array: Any) -> None:
    """``var.<op>(array)`` ran: a gt.function trace being recorded replays it."""
    obs = _tls.obs
    if obs is not None:
        obs.assigned(var, op, array)


def _wrap(data: Any) -> Tensor:
    """Make a constant Tensor around an existing device array without any checks."""
    t = _new(Tensor)
    t._data = data
    t._id = _next_const_id()
    return t


def _wrap_op(data: Any) -> Tensor:
    """Make a Tensor for an op's output (an even id) without any checks."""
    t = _new(Tensor)
    t._data = data
    t._id = _next_id()
    return t


def _py_dtype(value: Any) -> Any:
    """TensorFlow's rule for Python values: floats -> float32, ints -> int32."""
    if isinstance(value, np.generic):  # np.float64 subclasses float: keep its dtype
        return value.dtype
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int32
    if isinstance(value, float):
        return float32
    if isinstance(value, (list, tuple)):
        arr = np.asarray(value)
        if arr.dtype.kind in "iufc":
            typed = _typed_elements(value)
            if typed:
                # numpy scalars and arrays keep their dtype, promoted by numpy's rules with the
                # Python numbers beside them weak (NEP 50), as in gputape's ops: [np.float64(1.1), 2.2]
                # is float64 (numpy and TensorFlow agree), [np.float32(1), 2.2] float32 (numpy: float64)
                return np.result_type(*typed, *_weak_samples(value))
        if arr.dtype.kind == "f":
            return float32
        if arr.dtype.kind in "iu":
            return int32
        return arr.dtype
    return None


def _typed_elements(seq: Any) -> list:
    """The dtypes of the numpy scalars and arrays in a nested list (empty for Python numbers only)."""
    out: list = []
    if set(map(type, seq)) <= _PY_NUMBERS:  # (the common case, at C speed: a long list of floats)
        return out
    for v in seq:
        t = type(v)
        if t is list or t is tuple:
            out += _typed_elements(v)
        elif isinstance(v, (np.generic, np.ndarray)):
            out.append(v.dtype)
    return out


_PY_NUMBERS = frozenset((float, int, bool, complex))


def _weak_samples(seq: Any) -> list:
    """One Python number of each kind in a nested list (the weak operands of its promotion)."""
    kinds: dict = {}
    stack = [seq]
    while stack:
        for v in stack.pop():
            t = type(v)
            if t is list or t is tuple:
                stack.append(v)
            elif t is float or t is int or t is complex:
                kinds[t] = v
    return list(kinds.values())


# The kinds of dtype a tensor may hold: numbers. numpy also makes object, string, structured
# and datetime arrays; no op is defined on them, so they are refused where values come in.
NUMERIC_KINDS = "biufc"


def _to_array(value: Any, dtype: Any = None, device: str | None = None) -> Any:
    """Convert ``value`` to a device array following gputape's dtype rules.

    A value that cannot be converted (``None``, a ragged list, a string, an object whose
    ``__array__`` raises, an unknown dtype or device) raises a TypeError/ValueError naming
    the public function called and the argument, with the original error as its cause.
    """
    try:
        if dtype is not None and getattr(getattr(value, "dtype", None), "kind", None) == "c":
            _no_complex_drop(value, dtype)
        if isinstance(value, Tensor):
            data = value._data
            if device is not None and backend.device_of(data) != backend.parse_device(device):
                data = backend.to_device(data, device)  # GPU to GPU peer to peer, never through the host
            if dtype is not None and data.dtype != np.dtype(dtype):
                data = _checked_kind(data.astype(dtype), value)
            return data
        if value is None:
            raise _errors.argument_error(None, "is None", hint="pass a tensor, a number, a list or an array")
        if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):
            # np.asarray drops the mask: the masked elements' hidden values would be used, silently
            raise _errors.argument_error(
                value,
                "is a masked array with masked elements (a tensor has no mask: their hidden values would be used)",
                hint="fill them first (a.filled(value)), or pass a.data to use the hidden values knowingly",
            )
        if dtype is None:
            dtype = _py_dtype(value)
        dev = backend.parse_device(device) if device is not None else None
        if type(value) is _ndarray or backend.xp_of(value) is np:
            if dev is None or dev == "cpu":
                # A copy, as TensorFlow's convert_to_tensor makes: the caller may
                # mutate its array, and tensors are immutable.
                out = np.array(value, dtype=dtype, copy=True)
            else:
                out = backend.asarray_on(value, dev, dtype)
        # A device (cupy) array stays on its device unless another one is asked for.
        elif dev is None or dev == backend.device_of(value):
            out = value.astype(dtype, copy=False) if dtype is not None else value
        else:
            out = backend.to_device(value, dev)
            out = out.astype(dtype, copy=False) if dtype is not None else out
        return out if out.dtype.kind in NUMERIC_KINDS else _checked_kind(out, value)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        if _errors.is_clear(exc) or _device_failure(exc, device):
            raise
        raise _conversion_error(value, dtype, device, exc) from exc


def _no_complex_drop(value: Any, dtype: Any) -> None:
    """numpy casts complex to real by dropping the imaginary part (with a ComplexWarning);
    TensorFlow refuses. A silent wrong value is worse than an error: refuse."""
    if np.dtype(dtype).kind != "c":
        raise _errors.argument_error(
            value,
            f"is complex and cannot be converted to {np.dtype(dtype)} without dropping its imaginary part",
            cls=TypeError,
            hint="pass np.real(value) (or gt.abs of it), or gt.cast it, if that is what you want",
        )


def _device_failure(exc: Exception, device: Any) -> bool:
    """An error of the device itself (no such GPU, a CUDA error), not of the value: passed through."""
    return type(exc).__module__.startswith("cupy") or (device is not None and isinstance(exc, RuntimeError))


def _checked_kind(out: Any, value: Any) -> Any:
    if out.dtype.kind not in NUMERIC_KINDS:
        raise _errors.argument_error(
            value,
            f"converts to an array of dtype {out.dtype}, which no gputape op computes with",
            hint="tensors hold bool, integer, float or complex numbers; convert the data to numbers first",
            cls=TypeError,
        )
    return out


def _conversion_error(value: Any, dtype: Any, device: Any, exc: Exception) -> Exception:
    """Say which of value, dtype and device made the conversion fail."""
    if device is not None:
        try:
            backend.parse_device(device)
        except Exception as e:
            return _errors.argument_error(device, f"is not a device: {e}", arg="device", cls=type(e))
    if dtype is not None:
        try:
            np.dtype(dtype)
        except Exception:
            return _errors.argument_error(dtype, "is not a dtype", exc, arg="dtype", cls=TypeError)
    if isinstance(exc, ValueError) and "inhomogeneous" in str(exc):
        problem = "is a ragged nested sequence (its rows have different lengths)"
        hint = "pad the rows to one length, or pass them as separate tensors"
    elif isinstance(exc, (TypeError, ValueError)) and dtype is not None:
        problem = f"cannot be converted to a tensor of dtype {np.dtype(dtype)}"
        hint = ""
    else:
        problem = "cannot be converted to a tensor"
        hint = "pass a tensor, a number, a (nested) list of numbers or an array"
    return _errors.argument_error(value, problem, exc, hint=hint)


class TensorShape(tuple):
    """A shape: a plain tuple (compares equal to one) with TensorFlow's ``as_list`` and ``rank``.

    >>> import gputape as gt
    >>> s = gt.zeros((2, 3)).shape
    >>> s == (2, 3), s.as_list(), s.rank
    (True, [2, 3], 2)
    """

    __slots__ = ()

    def as_list(self) -> list[int]:
        return list(self)

    @property
    def rank(self) -> int:
        return len(self)

    @property
    def ndims(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return tuple.__repr__(self)


class Tensor:
    """An immutable n-dimensional value on a device, recorded by tapes.

    Create tensors with :func:`constant`; ops and operators return new ones.

    >>> import gputape as gt
    >>> x = gt.constant([[1.0, 2.0], [3.0, 4.0]])
    >>> (x * 2 + 1).numpy().tolist()
    [[3.0, 5.0], [7.0, 9.0]]
    >>> x.shape, str(x.dtype), x.device
    ((2, 2), 'float32', 'cpu')
    """

    __slots__ = ("__weakref__", "_data", "_id")

    # numpy hands ``ndarray <op> Tensor`` to __array_ufunc__ (installed by gputape.ops), so the
    # result is a (differentiable) Tensor rather than a silently detached ndarray.
    __array_priority__ = 1000

    def __init__(self, value: Any, dtype: Any = None) -> None:
        self._data = _to_array(value, dtype)
        self._id = _next_const_id()

    if TYPE_CHECKING:
        # The operators and methods gputape.ops attaches at import time (its functions, generated
        # per primitive, are the methods), declared for type checkers, which do not run that code.
        # tests/test_typing.py checks each against the attribute it declares (parameter names,
        # kinds and defaults), so the two cannot drift. Operands are Any: a tensor, an array, a
        # number or a nested list. Comparisons return tensors, as numpy's arrays do.
        def __add__(self, y: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, y: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, y: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, y: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, y: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, y: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, y: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, y: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __pos__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __and__(self, y: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, y: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __xor__(self, y: Any) -> Tensor: ...
        def __eq__(self, y: Any) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, y: Any) -> Tensor: ...  # type: ignore[override]
        def __lt__(self, y: Any) -> Tensor: ...
        def __le__(self, y: Any) -> Tensor: ...
        def __gt__(self, y: Any) -> Tensor: ...
        def __ge__(self, y: Any) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...
        @property
        def T(self) -> Tensor: ...
        @property
        def mT(self) -> Tensor: ...
        @property
        def real(self) -> Tensor: ...
        @property
        def imag(self) -> Tensor: ...
        def reshape(self, *shape: Any) -> Tensor: ...
        def transpose(self, *axes: Any) -> Tensor: ...
        def astype(self, dtype: Any) -> Tensor: ...
        def to(self, device: str) -> Tensor: ...
        def squeeze(self, axis: Any = None) -> Tensor: ...
        def swapaxes(self, axis1: int, axis2: int) -> Tensor: ...
        def repeat(self, repeats: Any, axis: Any = None) -> Tensor: ...
        def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor: ...
        def trace(
            self, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: None = None
        ) -> Tensor: ...
        def argsort(self, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Tensor: ...
        def sum(self, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Tensor: ...
        def mean(self, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Tensor: ...
        def prod(self, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False) -> Tensor: ...
        def max(self, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor: ...
        def min(self, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor: ...
        def std(
            self, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0, keepdims: bool = False
        ) -> Tensor: ...
        def var(
            self, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0, keepdims: bool = False
        ) -> Tensor: ...
        def argmax(self, axis: Any = None, out: None = None, *, keepdims: bool = False) -> Tensor: ...
        def argmin(self, axis: Any = None, out: None = None, *, keepdims: bool = False) -> Tensor: ...
        def cumsum(self, axis: Any = None, dtype: Any = None, out: None = None) -> Tensor: ...
        def cumprod(self, axis: Any = None, dtype: Any = None, out: None = None) -> Tensor: ...
        def clip(  # numpy's ndarray.clip(min, max)
            self, min: Any = None, max: Any = None, out: None = None, *, a_min: Any = None, a_max: Any = None  # noqa: A002
        ) -> Tensor: ...
        def round(self, decimals: int = 0, out: None = None) -> Tensor: ...
        def dot(self, b: Any, out: None = None) -> Tensor: ...
        def take(self, indices: Any, axis: Any = None, out: None = None, mode: str = "raise") -> Tensor: ...
        def ravel(self, order: str = "C") -> Tensor: ...
        def flatten(self, order: str = "C") -> Tensor: ...
        def copy(self, order: str = "K") -> Tensor: ...
        def tolist(self) -> Any: ...
        def abs(self) -> Tensor: ...
        def conj(self) -> Tensor: ...
        def conjugate(self) -> Tensor: ...
        def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any: ...
        def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any: ...

    # -- properties ---------------------------------------------------------------
    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return int(self._data.size)

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    @property
    def device(self) -> str:
        return backend.device_of(self._data)

    # -- conversion ---------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """Return a host numpy copy of the value.

        >>> import gputape as gt
        >>> gt.constant([1.0, 2.0]).numpy()
        array([1., 2.], dtype=float32)
        """
        return read_value(self, _copy)

    def item(self, *args: Any) -> Any:
        """The value (or, with numpy's index arguments, one element) as a Python number.

        >>> import gputape as gt
        >>> gt.constant([[1, 2], [3, 4]]).item(1, 0), gt.constant([[1, 2], [3, 4]]).item(3)
        (3, 4)
        """
        return read_value(self, _Item(args))

    def __float__(self) -> float:
        return read_value(self, _float)

    def __int__(self) -> int:
        return read_value(self, _int)

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iub":
            raise TypeError(f"only integer tensors can be used as an index, not {self._data.dtype}")
        return read_value(self, _int)

    def __bool__(self) -> bool:
        return read_value(self, _bool)

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self._data.shape[0]):
            yield self[i]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if backend.xp_of(self._data) is not np:
            raise TypeError(f"tensor is on {self.device}; implicit conversion to numpy is not allowed, use .numpy()")
        return read_value(self, _AsArray(dtype, copy))

    # __array_ufunc__ and __array_function__ (np.exp(t), np.sum(t) run gputape's ops) and the
    # numpy-style methods are installed by gputape.ops, which owns the op functions.

    def __repr__(self) -> str:
        """TensorFlow's layout around numpy's repr (summarised beyond 1000 elements, rows aligned).

        >>> import gputape as gt
        >>> gt.constant([[1.0, 2.0], [3.0, 4.0]])
        <gt.Tensor: shape=(2, 2), dtype=float32, numpy=
        array([[1., 2.],
               [3., 4.]], dtype=float32)>
        >>> gt.constant(0.5)
        <gt.Tensor: shape=(), dtype=float32, numpy=0.5>
        """
        dev = "" if self.device == "cpu" else f", device={self.device!r}"
        return f"<gt.Tensor: shape={self.shape}, dtype={self.dtype}{dev}, numpy={_numpy_text(self._data, repr)}>"

    def __str__(self) -> str:
        """TensorFlow's ``str``: numpy's ``str`` of the value, then shape and dtype.

        >>> import gputape as gt
        >>> print(gt.constant([[1.0, 2.0], [3.0, 4.0]]))
        gt.Tensor(
        [[1. 2.]
         [3. 4.]], shape=(2, 2), dtype=float32)
        """
        dev = "" if self.device == "cpu" else f", device={self.device!r}"
        return f"gt.Tensor({_numpy_text(self._data, str)}, shape={self.shape}, dtype={self.dtype}{dev})"

    def __format__(self, format_spec: str) -> str:
        """``f"{loss:.4f}"`` formats a 0-d tensor's value; other shapes take only an empty spec, as numpy.

        >>> import gputape as gt
        >>> f"{gt.constant(2.0) / 3:.4f}", f"{gt.constant(7):>3d}"
        ('0.6667', '  7')
        """
        if not format_spec:
            return str(self)
        if self._data.ndim != 0:
            raise TypeError(
                f"unsupported format string {format_spec!r} for a gt.Tensor of shape {self.shape}: only 0-d "
                "(scalar) tensors take a format spec, as with numpy arrays; format float(t[i]) or t.numpy() instead"
            )
        return format(self.item(), format_spec)

    # Tensors compare elementwise, so, as in TensorFlow and numpy, they are not hashable.
    __hash__ = None  # type: ignore[assignment]

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError(
            "gt.Tensor is immutable and does not support item assignment; build a new tensor "
            "(gt.where, gt.concatenate) or use a gt.Variable and .assign()"
        )

    def __dlpack__(self, **kwargs: Any) -> Any:
        """DLPack export (no copy): ``np.from_dlpack(t)``, ``torch.from_dlpack(t)``, cupy alike."""
        return tensor_dlpack(self, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return tensor_dlpack_device(self)

    def __reduce__(self):
        return (constant, (backend.to_host(self._data),))

    # Operators and methods (``+``, ``reshape``, ``sum`` ...) are attached by
    # gputape.ops, which owns the op functions; see ops/__init__.py.


class Variable(Tensor):
    """A mutable tensor: model parameters and optimizer state.

    It lives on the device TensorFlow would put it on (``gt.device.placement``): ``device=``
    when given, else the innermost ``with gt.device(...)`` scope, else the device of an
    initial value already on a GPU, else the default device (a GPU when one works), so
    ``gt.Variable(2.0)`` and ``gt.Variable(np_array)`` are GPU variables on a GPU machine.

    Trainable variables read inside a ``GradientTape`` are watched
    automatically. ``assign``/``assign_add``/``assign_sub`` (and the optimizers)
    never write the variable's current array: they compute the new value into a
    new array and swap it in with one reference store. So a value a tape saved
    is never changed (a gradient computed after an assign uses the value the op
    saw, as in TensorFlow), under threads too, and a reader sees the old value
    or the new one, never a mix. This is a rule, not a check: no reference
    count decides it (those prove nothing under threads or free-threaded Python).

    >>> import gputape as gt
    >>> v = gt.Variable([1.0, 2.0], name="w")
    >>> _ = v.assign_sub([0.5, 0.5])
    >>> v.numpy().tolist(), v.name, v.trainable
    ([0.5, 1.5], 'w', True)
    """

    __slots__ = ("_constraint", "_name", "_trainable")

    def __init__(
        self,
        initial_value: Any,
        trainable: bool = True,
        name: str | None = None,
        dtype: Any = None,
        device: str | None = None,
    ) -> None:
        if callable(initial_value):
            initial_value = initial_value()
        dev = placement(initial_value, device, variable=True)
        data = _to_array(initial_value, dtype, dev)
        # A variable owns its buffer: never alias the caller's array (nor a tensor's).
        self._data = data.copy()
        self._id = _next_const_id()
        self._trainable = bool(trainable)
        self._name = name if name is not None else "Variable"
        self._constraint = None

    @property
    def trainable(self) -> bool:
        return self._trainable

    @property
    def initializer(self) -> None:
        """TensorFlow's ``v.initializer``: None, as in eager TensorFlow (a variable is initialised when made;
        TensorFlow's tests run ``self.evaluate(v.initializer)``, which evaluates None to None).

        >>> import gputape as gt
        >>> gt.Variable(1.0).initializer is None
        True
        """
        return None

    @property
    def constraint(self) -> Any:
        """A callable ``w -> w'`` that optimizers apply after each step that updates this variable, or None.

        As Keras' ``variable.constraint`` (a layer's ``kernel_constraint`` sets it):
        ``apply_gradients`` assigns ``constraint(variable)`` once the step is done.

        >>> import gputape as gt
        >>> v = gt.Variable([-1.0, 2.0]); v.constraint = lambda w: gt.maximum(w, 0.0)
        >>> _ = gt.optim.SGD(0.5).apply_gradients([(gt.constant([1.0, 1.0]), v)]); v.numpy().tolist()
        [0.0, 1.5]
        """
        return self._constraint

    @constraint.setter
    def constraint(self, fn: Any) -> None:
        global _constrained
        if fn is not None and not callable(fn):
            raise TypeError(
                f"Variable {self._name!r}: constraint must be a callable w -> w (e.g. tf.keras.constraints.NonNeg()) "
                f"or None, got {type(fn).__name__}"
            )
        self._constraint = fn
        if fn is not None:
            _constrained = True

    @property
    def name(self) -> str:
        return self._name

    def value(self) -> Tensor:
        """The current value as a Tensor (a read: a recording tape watches it).

        >>> import gputape as gt
        >>> gt.Variable(3.0).value().numpy()
        array(3., dtype=float32)
        """
        obs = _tls.obs
        if obs is not None:
            obs.variable_read(self)
        return self._snapshot()

    read_value = value

    def _snapshot(self) -> Tensor:
        # Same id as the variable, so gradients flow to it; same array, so no copy.
        t = _new(Tensor)
        t._data = self._data
        t._id = self._id
        return t

    def numpy(self) -> np.ndarray:
        return read_value(self, _copy)

    def _check(self, op: str, value: Any) -> Any:
        """The array to store: same device and shape, dtype cast only where no value changes kind.

        The rule is numpy's ``same_kind`` casting: a float64 value goes into a float32
        variable (what optimizers do with float64 gradients), ints and bools into floats,
        but complex into float, float into int, and anything non-numeric raise a TypeError.
        Python numbers and lists follow gputape's conversion rule (float -> float32, int ->
        int32) for that test and are then converted exactly to the variable's dtype.
        """
        if isinstance(value, Tensor):
            arr = value._data
        else:
            try:
                # host data assigned to a GPU variable is copied there (once, counted)
                arr = _to_array(value, None, None if backend.is_gpu_array(value) else self.device)
            except (TypeError, ValueError) as exc:
                raise _errors.mark(
                    type(exc)(
                        f"Variable.{op}: variable {self._name!r} of dtype {self._data.dtype} cannot take it: {exc}"
                    )
                ) from exc
            if arr.dtype != self._data.dtype and not hasattr(value, "dtype"):
                if np.can_cast(arr.dtype, self._data.dtype, casting="same_kind"):
                    arr = _to_array(value, self._data.dtype, backend.device_of(arr))  # 0.1 into float64 is 0.1
        xp = backend.xp_of(self._data)
        if backend.xp_of(arr) is not xp:
            raise ValueError(
                f"Variable.{op}: variable {self._name!r} is on {self.device} but the value is on "
                f"{backend.device_of(arr)}; move it with .to({self.device!r}) first"
            )
        if arr.shape != self._data.shape:
            raise ValueError(
                f"Variable.{op}: cannot {op.replace('_', ' ')} a value of shape {arr.shape} to variable "
                f"{self._name!r} of shape {self._data.shape}; shapes must match"
            )
        if arr.dtype != self._data.dtype:
            if not np.can_cast(arr.dtype, self._data.dtype, casting="same_kind"):
                raise TypeError(
                    f"Variable.{op}: a value of dtype {arr.dtype} cannot be stored in variable {self._name!r} "
                    f"of dtype {self._data.dtype} without changing its values (only casts within a kind, such "
                    f"as float64 to float32, are implicit); cast it yourself first, e.g. "
                    f"gt.cast(value, {str(self._data.dtype)!r}), if dropping the imaginary part or the fraction "
                    "is what you want"
                )
            arr = arr.astype(self._data.dtype)
        return arr

    def assign(self, value: Any) -> Variable:
        """Set the value (same shape; dtype cast within its kind, see ``_check``).

        >>> import gputape as gt
        >>> gt.Variable([1.0, 2.0]).assign([3.0, 4.0]).numpy().tolist()
        [3.0, 4.0]
        """
        arr = self._check("assign", value)
        # The new array must be one nobody else writes: a copy of a tensor's (or a device
        # array's) own array; _check's conversion or cast already made a new one otherwise.
        src = value._data if isinstance(value, Tensor) else value
        self._data = arr.copy() if arr is src else arr
        _note_assign(self, "assign", arr)
        return self

    def assign_add(self, delta: Any) -> Variable:
        """Add ``delta``: the sum goes into a new array, swapped in (the old one is never written).

        >>> import gputape as gt
        >>> gt.Variable([1.0]).assign_add([2.0]).numpy().tolist()
        [3.0]
        """
        return self._assign_delta_op("assign_add", delta, True)

    def assign_sub(self, delta: Any) -> Variable:
        """Subtract ``delta``: the difference goes into a new array, swapped in (the old one is never written).

        >>> import gputape as gt
        >>> gt.Variable([1.0]).assign_sub([2.0]).numpy().tolist()
        [-1.0]
        """
        return self._assign_delta_op("assign_sub", delta, False)

    def _assign_delta_op(self, op: str, delta: Any, add: bool) -> Variable:
        arr = delta._data if isinstance(delta, Tensor) else None
        # the checks' common case in one test (an optimizer's update: same array type, shape, dtype)
        if arr is None or not _same_kind(arr, self._data):
            arr = self._check(op, delta)
        try:
            self._data = _combined(self._data, arr, add)
        except _LateReportError as late:
            self._data = late.value  # numpy reported a floating-point error after it wrote the result
            raise late.error from None
        _note_assign(self, op, arr)
        return self

    def __repr__(self) -> str:
        """TensorFlow's layout: ``<gt.Variable 'w' shape=(2,) dtype=float32, numpy=array([...])>``.

        >>> import gputape as gt
        >>> gt.Variable([1.0, 2.0], name="w")
        <gt.Variable 'w' shape=(2,) dtype=float32, numpy=array([1., 2.], dtype=float32)>
        """
        dev = "" if self.device == "cpu" else f" device={self.device!r}"
        body = _numpy_text(self._data, repr)
        return f"<gt.Variable {self.name!r} shape={self.shape} dtype={self.dtype}{dev}, numpy={body}>"

    __str__ = __repr__  # TensorFlow prints a variable the same way either way

    def __reduce__(self):
        return (Variable, (backend.to_host(self._data), self._trainable, self._name))


def _numpy_text(data: Any, how: Any) -> str:
    # numpy's own repr/str (its 1000-element summary threshold, aligned rows); TensorFlow starts a
    # multi-line value on a new line and shows a scalar as its plain value.
    a = backend.to_host(data)
    if a.ndim == 0:
        return str(a[()])  # numpy's shortest round-trip text: 0.1, 1e+20, True
    text = how(a)
    return "\n" + text if "\n" in text else text


# What numpy raises for a floating-point error of a ufunc whose result it already wrote (its
# error state "raise", or a RuntimeWarning that a warning filter turns into an error)
_LATE_REPORTS = (FloatingPointError, Warning)

# True once any Variable was given a constraint: until then an optimizer step looks at none
# (optim/base.py reads the flag; only Variable.constraint's setter sets it).
_constrained = False


class _LateReportError(Exception):
    """A floating-point report numpy raised after writing an update's result: ``value`` is the result."""

    def __init__(self, value: Any, error: BaseException) -> None:
        super().__init__(str(error))
        self.value = value
        self.error = error


# A variable's update, declared once as source: _same_kind and _combined below are compiled from
# these statements, and generated code that updates variables (gputape.optim's plain-SGD step)
# inlines the same text instead of calling them per variable.
# SAME_KIND: ``{a}`` may stand where ``{b}``'s value goes without a conversion (array type, shape, dtype).
SAME_KIND = "type({a}) is type({b}) and {a}.shape == {b}.shape and {a}.dtype == {b}.dtype"
# COMBINE: ``{ufunc}`` (add or subtract) of ``{old}`` and ``{arr}`` into ``{out}``; a floating-point
# report numpy raises after it wrote the result (np.seterr "raise", a warning filter set to "error")
# is handed to ``{report}``, a statement that sees it as ``exc``.
COMBINE = """\
try:
    {ufunc}({old}, {arr}, out={out})
except _LATE_REPORTS as exc:
    {report}
"""


def _indent(src: str, by: str) -> str:
    return "".join(by + line if line.strip() else line for line in src.splitlines(True))


_same_kind = generate(
    "_same_kind",
    f"def _same_kind(a, b):\n    return {SAME_KIND.format(a='a', b='b')}\n",
    globals(),
)

_combined = generate(
    "_combined",
    "def _combined(old, arr, add, out=None):\n"
    '    """``old + arr`` (``add``) or ``old - arr`` into ``out``, a new array of ``old``\'s type, shape and\n'
    "    dtype when not given; ``old`` is only read. The one statement of a variable's update.\n\n"
    "    ``out`` is a temporary of the caller's own that nothing else references (an optimizer's\n"
    "    step ``lr * g``: the update then allocates nothing more). A floating-point report numpy\n"
    "    raises after it wrote the result comes as :class:`_LateReportError`, which carries the result.\n"
    '    """\n'
    "    xp = backend.xp_of(old)\n"
    "    if out is None:  # (out= always: numpy makes a scalar of 0-d + 0-d, and a variable holds an array)\n"
    "        out = xp.empty_like(old)\n"
    + _indent(
        COMBINE.format(
            ufunc="(xp.add if add else xp.subtract)",
            old="old",
            arr="arr",
            out="out",
            report="raise _LateReportError(out, exc) from None",
        ),
        "    ",
    )
    + "    return out\n",
    globals(),
)


def constant(value: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """Make a Tensor from a Python value, a numpy/cupy array or another tensor.

    Python floats (and lists of them) become float32 and Python ints int32, as
    in TensorFlow; arrays keep their dtype.

    Placement (TensorFlow's rule): ``device=`` when given; else host data (Python
    numbers, lists, numpy arrays) goes to the current device (the innermost
    ``with gt.device(...)``, else the default device: a GPU when one works); a cupy
    array stays on its GPU, and a Tensor stays where it is.

    >>> import gputape as gt, numpy as np
    >>> str(gt.constant(1.5).dtype), str(gt.constant(np.zeros(2)).dtype), str(gt.constant([1, 2]).dtype)
    ('float32', 'float64', 'int32')
    >>> with gt.device("cpu"):
    ...     gt.constant(np.zeros(2)).device
    'cpu'
    """
    if device is None and not isinstance(value, Tensor):
        device = placement(value)
    return _wrap(_to_array(value, dtype, device))


# TensorFlow packs a list that holds tensors into one tensor, differentiably (tf.stack).
# Packing is an op and the ops sit above this module, so the op layer registers it.
_list_packer: Any = None


def register_list_packer(fn: Any) -> None:
    """Install ``fn(list_or_tuple) -> Tensor | None`` (None: it holds no tensor), used by ``packed``."""
    global _list_packer
    _list_packer = fn


def packed(value: Any) -> Tensor | None:
    """A list or tuple that holds tensors, packed into one tensor on the tape; None otherwise."""
    if _list_packer is None or not isinstance(value, (list, tuple)):
        return None
    return _list_packer(value)


def as_tensor(value: Any) -> Tensor:
    """Return ``value`` if it is a Tensor (or Variable), a list holding tensors packed, else ``constant(value)``."""
    if isinstance(value, Tensor):
        return value
    p = packed(value)
    return constant(value) if p is None else p
