"""Weight constraints (``tf.keras.constraints``), Keras 3's classes and math.

A constraint is a callable ``c(w) -> w'`` given to a layer as ``kernel_constraint``
or ``bias_constraint`` (or to ``add_weight(constraint=...)``, or ``gt.Variable``'s
``constraint`` attribute). As in Keras, the optimizer applies it to the variable after
each step that updates it (``v.assign(c(v))``), in ``fit`` and in custom loops alike,
and inside ``gt.function`` too (the assignment is part of the compiled step). Norms
are taken along ``axis`` (0 by default: each column of a Dense kernel, one per output
unit), with Keras' ``epsilon = 1e-7`` in the denominators.

>>> import gputape as gt
>>> w = gt.Variable([[3.0, -1.0], [4.0, 2.0]])
>>> w.constraint = gt.nn.constraints.MaxNorm(1.0)
>>> _ = gt.optim.SGD(0.0).apply_gradients([(gt.zeros((2, 2)), w)])
>>> w.numpy().astype(float).round(4).tolist()  # the first column had norm 5, the second sqrt(5)
[[0.6, -0.4472], [0.8, 0.8944]]
"""

from __future__ import annotations

import math
from typing import Any

from ..ops import cast as _cast
from ..ops import clip as _clip
from ..ops import sqrt as _sqrt
from ..ops import sum as _sum

__all__ = [
    "Constraint",
    "MaxNorm",
    "MinMaxNorm",
    "NonNeg",
    "UnitNorm",
    "get",
    "max_norm",
    "min_max_norm",
    "non_neg",
    "unit_norm",
]

_EPSILON = 1e-7  # keras.backend.epsilon()


def _norms(w: Any, axis: Any) -> Any:
    return _sqrt(_sum(w * w, axis=axis, keepdims=True))


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")
    return float(value)


def _axis(owner: str, axis: Any) -> Any:
    if isinstance(axis, (list, tuple)):
        return tuple(int(a) for a in axis)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{owner}: axis must be an int or a list of ints, got {axis!r}")
    return axis


class Constraint:
    """Base class: ``__call__(w)`` returns the projected weight (the identity here); ``get_config``.

    >>> import gputape as gt
    >>> class Clip(gt.nn.constraints.Constraint):
    ...     def __call__(self, w):
    ...         return gt.clip(w, -1.0, 1.0)
    >>> Clip()(gt.constant([-3.0, 0.5])).numpy().tolist()
    [-1.0, 0.5]
    """

    def __call__(self, w: Any) -> Any:
        return w

    def get_config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Constraint:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class MaxNorm(Constraint):
    """Scale each slice along ``axis`` whose norm ``n`` exceeds ``max_value`` down: ``w * clip(n, 0, m) / (eps + n)``.

    >>> import gputape as gt
    >>> gt.nn.constraints.MaxNorm(2.0)(gt.constant([[6.0], [8.0]])).numpy().astype(float).round(5).tolist()
    [[1.2], [1.6]]
    """

    def __init__(self, max_value: float = 2, axis: Any = 0) -> None:
        self.max_value = _number("MaxNorm", "max_value", max_value)
        self.axis = _axis("MaxNorm", axis)

    def __call__(self, w: Any) -> Any:
        norms = _norms(w, self.axis)
        return w * (_clip(norms, 0.0, self.max_value) / (_EPSILON + norms))

    def get_config(self) -> dict[str, Any]:
        return {"max_value": self.max_value, "axis": self.axis}


class NonNeg(Constraint):
    """Zero the negative entries: ``w * (w >= 0)``.

    >>> import gputape as gt
    >>> gt.nn.constraints.NonNeg()(gt.constant([-1.0, 2.0])).numpy().tolist() == [0.0, 2.0]  # (-0.0, as Keras)
    True
    """

    def __call__(self, w: Any) -> Any:
        return w * _cast(w >= 0.0, w.dtype)


class UnitNorm(Constraint):
    """Divide each slice along ``axis`` by its L2 norm: ``w / (eps + n)``.

    >>> import gputape as gt
    >>> gt.nn.constraints.UnitNorm()(gt.constant([[3.0], [4.0]])).numpy().astype(float).round(5).tolist()
    [[0.6], [0.8]]
    """

    def __init__(self, axis: Any = 0) -> None:
        self.axis = _axis("UnitNorm", axis)

    def __call__(self, w: Any) -> Any:
        return w / (_EPSILON + _norms(w, self.axis))

    def get_config(self) -> dict[str, Any]:
        return {"axis": self.axis}


class MinMaxNorm(Constraint):
    """Move each slice's norm ``n`` toward ``[min_value, max_value]``: ``rate * clip(n, lo, hi) + (1 - rate) * n``.

    >>> import gputape as gt
    >>> gt.nn.constraints.MinMaxNorm(1.0, 2.0)(gt.constant([[0.3], [0.4]])).numpy().astype(float).round(5).tolist()
    [[0.6], [0.8]]
    """

    def __init__(self, min_value: float = 0.0, max_value: float = 1.0, rate: float = 1.0, axis: Any = 0) -> None:
        self.min_value = _number("MinMaxNorm", "min_value", min_value)
        self.max_value = _number("MinMaxNorm", "max_value", max_value)
        self.rate = _number("MinMaxNorm", "rate", rate)
        if self.min_value > self.max_value:
            raise ValueError(f"MinMaxNorm: min_value {min_value!r} is greater than max_value {max_value!r}")
        self.axis = _axis("MinMaxNorm", axis)

    def __call__(self, w: Any) -> Any:
        norms = _norms(w, self.axis)
        desired = self.rate * _clip(norms, self.min_value, self.max_value) + (1.0 - self.rate) * norms
        return w * (desired / (_EPSILON + norms))

    def get_config(self) -> dict[str, Any]:
        return {"min_value": self.min_value, "max_value": self.max_value, "rate": self.rate, "axis": self.axis}


# Keras 3 exports each class under a snake_case name as well.
max_norm, non_neg, unit_norm, min_max_norm = MaxNorm, NonNeg, UnitNorm, MinMaxNorm

_BY_NAME = {
    "max_norm": MaxNorm,
    "maxnorm": MaxNorm,
    "non_neg": NonNeg,
    "nonneg": NonNeg,
    "unit_norm": UnitNorm,
    "unitnorm": UnitNorm,
    "min_max_norm": MinMaxNorm,
    "minmaxnorm": MinMaxNorm,
}


def get(identifier: Any) -> Constraint | Any | None:
    """A constraint from None, a name (``'max_norm'``, ``'non_neg'``, ...), a Keras config dict or a callable.

    >>> import gputape as gt
    >>> gt.nn.constraints.get("non_neg"), gt.nn.constraints.get({"class_name": "MaxNorm", "config": {"max_value": 3}})
    (NonNeg(), MaxNorm(max_value=3.0, axis=0))
    """
    if identifier is None or isinstance(identifier, Constraint):
        return identifier
    cls: Any
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(f"constraints.get: unknown constraint {identifier!r}; use one of {sorted(_BY_NAME)}")
        return cls()
    if isinstance(identifier, dict) and "class_name" in identifier:
        cls = _BY_NAME.get(str(identifier["class_name"]).lower())
        if cls is None:
            raise ValueError(f"constraints.get: unknown constraint class {identifier['class_name']!r}")
        return cls.from_config(dict(identifier.get("config") or {}))
    if callable(identifier):
        return identifier
    raise TypeError(
        f"constraints.get: expected None, a name, a config dict or a callable w -> w, got {type(identifier).__name__}"
    )


def _serialize(obj: Any) -> Any:
    """Keras 3's serialized form (``keras.constraints.serialize``) for a layer's ``get_config``; a callable
    that is no constraint class is named by its function name."""
    if obj is None:
        return None
    if hasattr(obj, "get_config") and type(obj).__name__ in {c.__name__ for c in _BY_NAME.values()}:
        return {
            "module": "keras.constraints",
            "class_name": type(obj).__name__,
            "config": obj.get_config(),
            "registered_name": None,
        }
    return getattr(obj, "__name__", type(obj).__name__)
