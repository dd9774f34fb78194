"""Activations by name (``gt.nn.activations.get('relu')``), as Keras layers accept them.

>>> import gputape as gt
>>> gt.nn.activations.get("relu")(gt.constant([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ops import identity, tanh
from . import functional as fn

__all__ = ["get", "linear", "silu"]


def linear(x: Any) -> Any:
    """The identity (Keras' ``'linear'``, what ``activation=None`` means).

    >>> import gputape as gt
    >>> gt.nn.activations.linear(gt.constant([-1.0])).numpy().tolist()
    [-1.0]
    """
    return identity(x)


def silu(x: Any) -> Any:
    """``x * sigmoid(x)`` (also called swish).

    >>> import gputape as gt
    >>> gt.nn.activations.silu(gt.constant([0.0])).numpy().tolist()
    [0.0]
    """
    return x * fn.sigmoid(x)


_BY_NAME: dict[str, Callable[[Any], Any]] = {
    "linear": linear,
    "relu": fn.relu,
    "leaky_relu": fn.leaky_relu,
    "elu": fn.elu,
    "gelu": fn.gelu,
    "sigmoid": fn.sigmoid,
    "softplus": fn.softplus,
    "softmax": fn.softmax,
    "log_softmax": fn.log_softmax,
    "tanh": tanh,
    "silu": silu,
    "swish": silu,
}


def get(identifier: str | Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """The activation function for a name, a callable (returned as is), or None (linear).

    >>> import gputape as gt
    >>> gt.nn.activations.get(None) is gt.nn.activations.linear
    True
    """
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    if isinstance(identifier, str):
        fn = _BY_NAME.get(identifier.lower())
        if fn is None:
            raise ValueError(f"unknown activation {identifier!r}; use one of {sorted(_BY_NAME)} or a callable")
        return fn
    raise TypeError(f"activation must be a name, a callable or None, got {identifier!r}")
