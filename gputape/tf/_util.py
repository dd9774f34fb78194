"""Helpers shared by the ``gputape.tf`` modules: TensorFlow's axis spellings."""

from __future__ import annotations

from typing import Any


def axis_arg(axis: Any) -> Any:
    """TensorFlow accepts lists and tensors for ``axis``; gputape takes an int or a tuple.

    >>> axis_arg([0, 1]), axis_arg(None), axis_arg(2)
    ((0, 1), None, 2)
    """
    if axis is None:
        return None
    if hasattr(axis, "numpy"):
        axis = axis.numpy().tolist()
    if isinstance(axis, (list, tuple)):
        return tuple(int(a) for a in axis)
    return int(axis)
