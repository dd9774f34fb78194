"""``input_signature`` for ``gt.function``: TensorSpec, binding calls to it, and the keys that pick a trace."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core._nest import flatten, unflatten
from ..core.tensor import Tensor, Variable, constant
from ..devices import backend
from ..devices.placement import current_device
from ._trace import _is_array


def _tf_dtype(dt: np.dtype) -> str:
    return f"tf.{np.dtype(dt).name}"


class TensorSpec:
    """The shape and dtype a ``gt.function`` input must have (TensorFlow's ``tf.TensorSpec``).

    ``None`` in ``shape`` accepts any size along that dimension; ``shape=None``
    any rank. Used in ``input_signature``: every call is checked against it.

    >>> import gputape.tf as tf
    >>> spec = tf.TensorSpec(shape=[None, 3], dtype=tf.float32)
    >>> spec, spec.shape
    (TensorSpec(shape=(None, 3), dtype=tf.float32, name=None), (None, 3))
    >>> spec.is_compatible_with(tf.zeros((5, 3))), spec.is_compatible_with(tf.zeros((5, 4)))
    (True, False)
    """

    __module__ = "gputape.function"  # its public home (reprs, tracebacks, pickles)

    def __init__(self, shape: Any, dtype: Any = "float32", name: str | None = None) -> None:
        if shape is not None:
            dims = tuple(shape)
            bad = [d for d in dims if d is not None and not (isinstance(d, (int, np.integer)) and d >= 0)]
            if bad:
                raise TypeError(f"TensorSpec: shape entries must be non-negative ints or None, got {shape!r}")
            shape = tuple(None if d is None else int(d) for d in dims)
        self.shape: tuple | None = shape
        self.dtype = np.dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, tensor: Any, name: str | None = None) -> TensorSpec:
        """The spec of a tensor or array (its exact shape and dtype)."""
        d = tensor._data if isinstance(tensor, Tensor) else np.asarray(tensor)
        return cls(d.shape, d.dtype, name)

    def is_compatible_with(self, other: Any) -> bool:
        """Whether ``other`` (a spec, tensor or array) has this dtype and fits this shape."""
        if not isinstance(other, TensorSpec):
            other = TensorSpec.from_tensor(other)
        if other.dtype != self.dtype:
            return False
        if self.shape is None or other.shape is None:
            return True
        return len(self.shape) == len(other.shape) and all(
            a is None or b is None or a == b for a, b in zip(self.shape, other.shape)
        )

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={_tf_dtype(self.dtype)}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and (self.shape, self.dtype, self.name) == (
            other.shape,
            other.dtype,
            other.name,
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.str, self.name))


class InputSignatureError(TypeError, ValueError):
    """A call's inputs do not match a ``gt.function``'s ``input_signature``.

    Both a TypeError (what TensorFlow 2.13+ raises) and a ValueError (what earlier
    TensorFlow raised), so code written for either catches it.
    """

    __module__ = "gputape.function"  # its public home (reprs, tracebacks, pickles)


# Python values TensorFlow converts to a signature's dtype: ints to any number, floats to floats
_PY_CASTS = {"i": "iufc", "u": "iufc", "f": "fc", "c": "c", "b": "b"}


def _spec_of_value(x: Any) -> str:
    if isinstance(x, Tensor) or _is_array(x):
        return repr(TensorSpec.from_tensor(x))
    return f"{type(x).__name__} {x!r}"


def _bind_leaf(fname: str, where: str, spec: TensorSpec, x: Any) -> Any:
    """``x`` as a value that matches ``spec`` (Python values become tensors of its dtype), else raise."""

    def fail(why: str) -> InputSignatureError:
        return InputSignatureError(
            f"gt.function({fname}): argument {where} does not match its input_signature: can not cast "
            f"{_spec_of_value(x)} to {spec!r} ({why}). Pass a {_tf_dtype(spec.dtype)} value of a matching "
            "shape, or widen the signature (None in a TensorSpec's shape accepts any size there)."
        )

    if isinstance(x, np.generic):  # a numpy scalar has its dtype, as an array does
        x = np.asarray(x)
    if isinstance(x, Tensor) or _is_array(x):
        d = x._data if isinstance(x, Tensor) else x
    else:
        try:
            host = np.asarray(x)
        except Exception as e:
            raise fail("not convertible to a tensor") from e
        if host.dtype != spec.dtype and spec.dtype.kind not in _PY_CASTS.get(host.dtype.kind, ""):
            raise fail(f"a Python {type(x).__name__} of {host.dtype.kind!r} kind does not convert to {spec.dtype.name}")
        cast = host.astype(spec.dtype)
        if host.dtype.kind in "iu" and not np.array_equal(cast, host):
            raise fail(f"the value does not fit in {spec.dtype.name}")
        x = constant(cast, device=current_device())
        d = x._data
    if d.dtype != spec.dtype:
        raise fail(f"dtype {d.dtype.name}, the signature's {spec.dtype.name}")
    if spec.shape is not None:
        if d.ndim != len(spec.shape):
            raise fail(f"rank {d.ndim}, the signature's rank {len(spec.shape)}")
        for i, (a, b) in enumerate(zip(d.shape, spec.shape)):
            if b is not None and a != b:
                raise fail(f"dimension {i} is {a}, the signature's {b}")
    return x


def _bind_signature(fname: str, names: list[str], signature: tuple, args: tuple, kwargs: dict) -> tuple:
    """The call's arguments, positionally, each checked against (and converted to) its spec."""
    n = len(signature)
    if len(args) > n:
        raise InputSignatureError(
            f"gt.function({fname}): called with {len(args)} positional arguments, but its input_signature "
            f"has {n} ({signature!r}); with an input_signature every argument is a tensor the signature describes"
        )
    values = list(args)
    rest = dict(kwargs)
    for name in names[len(args) : n]:
        if name not in rest:
            raise InputSignatureError(
                f"gt.function({fname}): missing argument {name!r} of input_signature {signature!r}"
            )
        values.append(rest.pop(name))
    if rest or len(values) < n:
        extra = ", ".join(map(repr, rest)) if rest else f"{n - len(values)} missing"
        raise InputSignatureError(
            f"gt.function({fname}): arguments ({extra}) do not fit input_signature {signature!r} "
            f"(parameters {names[:n]})"
        )
    bound = []
    for k, (spec, value) in enumerate(zip(signature, values)):
        where = f"{names[k]!r} (input_signature[{k}])" if k < len(names) else f"input_signature[{k}]"
        pairs = _pair_up(fname, where, spec, value)
        bound.append(
            unflatten(
                flatten(spec)[1],
                [
                    x if isinstance(x, Variable) and sp.is_compatible_with(x) else _bind_leaf(fname, where, sp, x)
                    for sp, x in pairs
                ],
            )
        )
    return tuple(bound)


def _pair_up(fname: str, where: str, spec: Any, value: Any) -> list[tuple[TensorSpec, Any]]:
    """(spec, value) per TensorSpec of a nested signature entry, in flatten's order (a value's lists
    inside a TensorSpec's place are one tensor's data, not structure)."""
    if isinstance(spec, TensorSpec):
        return [(spec, value)]
    same = (
        isinstance(value, dict) and set(value) == set(spec)
        if isinstance(spec, dict)
        else isinstance(value, (list, tuple)) and len(value) == len(spec)
    )
    if not same:
        raise InputSignatureError(
            f"gt.function({fname}): argument {where} has the structure of {value!r}, but its "
            f"input_signature is {spec!r}: pass the same nesting of tensors"
        )
    if isinstance(spec, dict):
        keys = flatten(spec)[1][2]
        return [p for k, _, _ in keys for p in _pair_up(fname, where, spec[k], value[k])]
    return [p for sp, v in zip(spec, value) for p in _pair_up(fname, where, sp, v)]


def _check_signature(fname: str, signature: Any) -> tuple:
    if not isinstance(signature, (list, tuple)):
        raise TypeError(
            f"gt.function({fname}): input_signature must be a list or tuple of TensorSpecs, got {signature!r}"
        )
    for leaf in flatten(list(signature))[0]:
        if not isinstance(leaf, TensorSpec):
            raise TypeError(
                f"gt.function({fname}): input_signature entries must be TensorSpecs (or nests of them), got {leaf!r}"
            )
    return tuple(signature)


def _param_names(fn: Callable[..., Any]) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _relaxed(pattern: tuple, shape: tuple) -> tuple:
    return tuple(a if a == b else None for a, b in zip(pattern, shape))


def _fits(pattern: tuple, shape: tuple) -> bool:
    return all(a is None or a == b for a, b in zip(pattern, shape))


def _leaf_key(x: Any) -> Any:
    if isinstance(x, Variable):
        return ("V", id(x))
    if isinstance(x, Tensor):
        d = x._data
        return ("T", d.shape, d.dtype.str, backend.device_of(d))
    if _is_array(x):
        return ("T", x.shape, x.dtype.str, backend.device_of(x))
    try:
        hash(x)
    except TypeError:
        return ("O", id(x))
    return ("P", type(x).__name__, x)


def _describe(key: Any) -> str:
    parts = []
    for k in key[1]:
        if k[0] == "T":
            parts.append(f"tensor{tuple(k[1])}:{np.dtype(k[2]).name}@{k[3]}")
        elif k[0] == "P":
            parts.append(repr(k[2]))
        elif k[0] == "V":
            parts.append("variable")
        else:
            parts.append(k[0])
    return "(" + ", ".join(parts) + ")"
