"""Weight and activity regularizers (``tf.keras.regularizers``), Keras 3's classes and math.

A regularizer is a callable ``reg(x) -> scalar tensor`` added to the loss. Give one
to a layer as ``kernel_regularizer``, ``bias_regularizer`` (a penalty on the weight,
listed in ``layer.losses`` and recomputed from the current weight each time they are
read) or ``activity_regularizer`` (a penalty on the layer's output, divided by the
batch size as Keras 3 does, recorded at each call like ``add_loss``). ``fit`` adds
``sum(model.losses)`` to the compiled loss. ``l1``, ``l2`` and ``l1_l2`` are the
same classes as ``L1``, ``L2`` and ``L1L2`` (Keras 3 exports them under both names).

>>> import gputape.tf as tf, numpy as np
>>> dense = tf.keras.layers.Dense(2, kernel_initializer="ones", kernel_regularizer=tf.keras.regularizers.l2(0.5))
>>> _ = dense(np.ones((1, 3), "float32"))
>>> [float(v) for v in dense.losses]  # 0.5 * sum(ones(3, 2) ** 2)
[3.0]
"""

from __future__ import annotations

import math
from typing import Any

from ..ops import abs as _abs
from ..ops import sum as _sum

__all__ = ["L1", "L1L2", "L2", "Regularizer", "get", "l1", "l1_l2", "l2"]


def _factor(owner: str, name: str, value: Any) -> float:
    # Keras 3's validate_float_arg: a finite number >= 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(
            f"{owner}: invalid value for argument {name}: expected a non-negative float, received {name}={value!r}"
        )
    return float(value)


class Regularizer:
    """Base class: ``__call__(x)`` returns the penalty, a scalar tensor; ``get_config``/``from_config``.

    >>> import gputape as gt
    >>> class Sum(gt.nn.regularizers.Regularizer):
    ...     def __call__(self, x):
    ...         return gt.sum(x)
    >>> float(Sum()(gt.constant([1.0, 2.0])))
    3.0
    """

    def __call__(self, x: Any) -> Any:
        return 0.0

    def get_config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Regularizer:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class L1(Regularizer):
    """``l1 * sum(abs(x))`` (Keras' default ``l1=0.01``).

    >>> import gputape as gt
    >>> float(gt.nn.regularizers.L1(0.5)(gt.constant([1.0, -3.0])))
    2.0
    """

    def __init__(self, l1: float = 0.01) -> None:
        self.l1 = _factor("L1", "l1", l1)

    def __call__(self, x: Any) -> Any:
        return self.l1 * _sum(_abs(x))

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1}


class L2(Regularizer):
    """``l2 * sum(x ** 2)`` (Keras' default ``l2=0.01``; no 1/2 factor).

    >>> import gputape as gt
    >>> float(gt.nn.regularizers.L2(0.5)(gt.constant([1.0, -3.0])))
    5.0
    """

    def __init__(self, l2: float = 0.01) -> None:
        self.l2 = _factor("L2", "l2", l2)

    def __call__(self, x: Any) -> Any:
        return self.l2 * _sum(x * x)

    def get_config(self) -> dict[str, Any]:
        return {"l2": self.l2}


class L1L2(Regularizer):
    """``l1 * sum(abs(x)) + l2 * sum(x ** 2)`` (Keras 3's defaults: both 0.0).

    >>> import gputape as gt
    >>> float(gt.nn.regularizers.L1L2(l1=1.0, l2=0.5)(gt.constant([1.0, -3.0])))
    9.0
    """

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:
        self.l1 = _factor("L1L2", "l1", l1)
        self.l2 = _factor("L1L2", "l2", l2)

    def __call__(self, x: Any) -> Any:
        out: Any = 0.0
        if self.l1:
            out = self.l1 * _sum(_abs(x))
        if self.l2:
            out = out + self.l2 * _sum(x * x)
        return out

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1, "l2": self.l2}


# Keras 3 exports each class under its lower-case name as well: tf.keras.regularizers.l2(0.01) is an L2.
l1, l2, l1_l2 = L1, L2, L1L2

_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": L1L2, "l1l2": L1L2}


def get(identifier: Any) -> Regularizer | Any | None:
    """A regularizer from None, a name (``'l1'``, ``'l2'``, ``'l1_l2'``), a Keras config dict or a callable.

    >>> import gputape as gt
    >>> gt.nn.regularizers.get("l2"), gt.nn.regularizers.get(None)
    (L2(l2=0.01), None)
    >>> gt.nn.regularizers.get({"class_name": "L1", "config": {"l1": 0.1}})
    L1(l1=0.1)
    """
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(f"regularizers.get: unknown regularizer {identifier!r}; use one of {sorted(_BY_NAME)}")
        return cls()
    if isinstance(identifier, dict) and "class_name" in identifier:
        cls = _BY_NAME.get(str(identifier["class_name"]).lower())
        if cls is None:
            raise ValueError(f"regularizers.get: unknown regularizer class {identifier['class_name']!r}")
        return cls.from_config(dict(identifier.get("config") or {}))
    if callable(identifier):
        return identifier
    raise TypeError(
        f"regularizers.get: expected None, a name, a config dict or a callable x -> penalty, got "
        f"{type(identifier).__name__}"
    )


def _serialize(obj: Any) -> Any:
    """Keras 3's serialized form (``keras.regularizers.serialize``) for a layer's ``get_config``; a callable
    that is no regularizer class is named by its function name."""
    if obj is None:
        return None
    if hasattr(obj, "get_config") and type(obj).__name__ in {c.__name__ for c in _BY_NAME.values()}:
        return {
            "module": "keras.regularizers",
            "class_name": type(obj).__name__,
            "config": obj.get_config(),
            "registered_name": None,
        }
    return getattr(obj, "__name__", type(obj).__name__)
