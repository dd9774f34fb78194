"""Helpers shared by the ``gputape.tf`` modules: TensorFlow's axis spellings."""

from __future__ import annotations

from typing import Any

from ..core.tensor import Tensor


def axis_arg(axis: Any) -> Any:
    """TensorFlow accepts lists and tensors for ``axis``; gputape takes an int or a tuple.

    Only the container is converted: the ops check each entry (``axis="a"`` or ``1.5`` raises
    a TypeError naming the ``tf`` function and the argument, as ``int()`` here would not).

    >>> axis_arg([0, 1]), axis_arg(None), axis_arg(2)
    ((0, 1), None, 2)
    """
    if axis is None:
        return None
    if isinstance(axis, Tensor):
        axis = axis.numpy().tolist()
    if isinstance(axis, list):
        return tuple(axis)
    return axis
