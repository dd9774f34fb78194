"""Helpers shared by the ``gputape.tf`` modules: TensorFlow's axis spellings."""

from __future__ import annotations

import difflib
import sys
import types
from collections.abc import Callable
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


# Where a user finds the names gputape.tf has (the README's list is generated from the code).
NAMES_HELP = "README.md, section 'TensorFlow names gputape has' (or run: python -m gputape names)"


def missing_name(module: str, names: Callable[[], Any] | None = None) -> Any:
    """A module-level ``__getattr__`` for ``module``: a name it lacks is an AttributeError that says
    the name is not in gputape and where the supported names are listed.

    >>> getattr_ = missing_name("gputape.tf.math")
    >>> try:
    ...     getattr_("reduce_sun")
    ... except AttributeError as e:
    ...     print(str(e).split(";")[0])
    tf.math.reduce_sun is not in gputape (did you mean reduce_sum?)
    """
    shown = "tf" + module[len("gputape.tf") :]

    def missing(name: str) -> Any:
        if name.startswith("__"):  # Python's own probes (__path__, __wrapped__ ...): the plain error
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        have = [n for n in (names() if names else dir(sys.modules[module])) if not n.startswith("_")]
        close = difflib.get_close_matches(name, have, n=1)
        guess = f" (did you mean {close[0]}?)" if close else ""
        raise AttributeError(f"{shown}.{name} is not in gputape{guess}; the names gputape.tf has are in {NAMES_HELP}")

    return missing


class Namespace(types.SimpleNamespace):
    """A ``tf.*`` namespace that is not a module (``tf.debugging``, ``tf.dtypes``): a name it lacks
    is the same AttributeError as a module's (:func:`missing_name`)."""

    def __init__(self, path: str, **names: Any) -> None:
        super().__init__(**names)
        object.__setattr__(self, "_missing", missing_name(f"gputape.tf.{path}", lambda: vars(self)))

    def __getattr__(self, name: str) -> Any:
        if name == "_missing":
            raise AttributeError(name)
        return self._missing(name)
