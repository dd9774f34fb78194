"""``tf.function``: :func:`gputape.function` under TensorFlow's name and arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def function(
    func: Callable[..., Any] | None = None,
    input_signature: Any = None,
    autograph: bool = True,
    jit_compile: bool | None = None,
    reduce_retracing: bool = False,
    **kwargs: Any,
) -> Any:
    """``@tf.function`` and ``@tf.function(...)``: :func:`gputape.function` under TensorFlow's name.

    The function is traced once per input signature and replayed afterwards
    (see :mod:`gputape.function` for the rules: Python side effects run at
    trace time only, ``tf.print`` at every call; a tensor's value used in a
    Python ``if``/``for``/``while`` is guarded, so each call takes the branch
    and trip count an eager run would).

    * ``input_signature``: a list of :class:`TensorSpec` (or nests of them).
      Every call is checked against it (a wrong rank, dtype or fixed size
      raises ``gputape.function.InputSignatureError``, both a TypeError and a
      ValueError, naming the argument and both specs; Python numbers and lists
      are converted to the spec's dtype), and the function counts one trace
      for all sizes along ``None`` dimensions. (The replay itself is
      specialised to shapes: a new size re-records it, see ``recording_count``.)
    * ``reduce_retracing=True``: a second shape of a tensor argument counts as
      one more trace whose shape has ``None`` where the two differ, and later
      shapes that fit it count as no new trace, as TensorFlow generalises.
    * ``autograph=False``: a tensor's value read into Python while tracing
      (``if tensor:``, ``float(tensor)``) raises
      ``OperatorNotAllowedInGraphError`` instead of being guarded, as in
      TensorFlow. ``jit_compile`` is accepted and has no effect.

    The original function is at ``.python_function``.

    >>> import gputape.tf as tf
    >>> @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.float32)])
    ... def total(x):
    ...     return tf.reduce_sum(x)
    >>> float(total(tf.constant([1.0, 2.0]))), float(total([1.0, 2.0, 3.0])), total.experimental_get_tracing_count()
    (3.0, 6.0, 1)
    >>> @tf.function(jit_compile=True)
    ... def g(x):
    ...     return x + 1
    >>> g(tf.constant(2.0)).numpy().tolist(), g.python_function(3)
    (3.0, 4)
    """
    from ..function import Function

    def make(f: Callable[..., Any]) -> Function:
        return Function(f, input_signature=input_signature, reduce_retracing=reduce_retracing, autograph=autograph)

    return make if func is None else make(func)
