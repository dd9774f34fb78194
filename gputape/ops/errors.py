"""TensorFlow's exception classes (``tf.errors``), raised where TensorFlow raises them.

Defined here, in the ops layer, because ops raise them too (``TensorArray``, ``tf.case``);
``gputape.tf.errors`` is this module under TensorFlow's name.

gputape raises :class:`InvalidArgumentError` where TensorFlow's kernels refuse an argument at
run time (``tf.gather`` of an index out of range, ``tf.split`` sizes that do not add up,
``Dataset.batch(0)``, a dtype an op does not take). It is also a ``ValueError``: gputape raised
ValueError for these before, and code that catches either keeps working. The other classes exist
so that ``except tf.errors.OutOfRangeError`` and the like in TensorFlow programs resolve.

>>> import gputape.tf as tf
>>> try:
...     tf.gather(tf.constant([1.0, 2.0]), [5])
... except tf.errors.InvalidArgumentError as e:
...     print(e.message)
tf.gather: indices[0] = 5 is not in [0, 2) (argument indices); TensorFlow does not wrap negative or out-of-range indices
"""

from __future__ import annotations

from typing import Any as _Any

from ..core import _errors

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "CancelledError",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "OpError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownError",
]


class OpError(Exception):
    """TensorFlow's base class: ``OpError(node_def, op, message)``, or just ``OpError(message)``.

    >>> import gputape.tf as tf
    >>> e = tf.errors.OpError(None, None, "it failed")
    >>> e.message, e.op, str(e)
    ('it failed', None, 'it failed')
    """

    def __init__(self, *args: _Any) -> None:
        if len(args) == 1:
            node_def, op, message = None, None, args[0]
        else:
            node_def, op, message = (list(args) + [None, None, None])[:3]
        super().__init__(message)
        self.node_def = node_def
        self.op = op
        self.message = message

    def __str__(self) -> str:
        return str(self.message)


class InvalidArgumentError(OpError, ValueError):
    """An op received an argument it cannot use (TensorFlow's ``INVALID_ARGUMENT``; also a ValueError)."""


class UnimplementedError(OpError, NotImplementedError):
    """The operation is not implemented (also a NotImplementedError)."""


class AbortedError(OpError):
    """The operation was aborted."""


class AlreadyExistsError(OpError):
    """What it would create already exists."""


class CancelledError(OpError):
    """The operation was cancelled."""


class DataLossError(OpError):
    """Unrecoverable data loss or corruption."""


class DeadlineExceededError(OpError):
    """A deadline expired."""


class FailedPreconditionError(OpError):
    """The system is not in a state the operation needs."""


class InternalError(OpError):
    """An internal invariant broke."""


class NotFoundError(OpError):
    """A requested entity (a file, a device) was not found."""


class OutOfRangeError(OpError):
    """An operation iterated past the valid range (the end of a dataset)."""


class PermissionDeniedError(OpError):
    """The caller may not run the operation."""


class ResourceExhaustedError(OpError):
    """A resource (memory) is exhausted."""


class UnauthenticatedError(OpError):
    """The request has no valid credentials."""


class UnavailableError(OpError):
    """The runtime is unavailable."""


class UnknownError(OpError):
    """An error of no other kind."""


def invalid_argument(message: str) -> InvalidArgumentError:
    """TensorFlow's ``InvalidArgumentError(None, None, message)``, marked as already explained (an outer
    boundary passes it through unchanged): what gputape raises where TensorFlow's kernels refuse an argument.

    >>> invalid_argument("tf.gather: bad").message
    'tf.gather: bad'
    """
    return _errors.mark(InvalidArgumentError(None, None, message))


del annotations
