"""``tf.print``: TensorFlow's print layout of tensors and its output streams (a replayed step in ``tf.function``)."""

from __future__ import annotations

import builtins
import functools
import pprint
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import state as _state
from ..core._nest import flatten, unflatten
from ..core.tensor import Tensor
from ..devices.backend import to_host
from ..ops._util import is_index

_DEFAULT_STREAM = object()  # tf.print's default: sys.stderr, looked up when the text is written


def print(
    *inputs: Any,
    output_stream: Any = _DEFAULT_STREAM,
    sep: str = " ",
    end: str = "\n",
    summarize: int | None = 3,
    name: str | None = None,
) -> None:
    """Print values, tensors in TensorFlow's layout (``tf.print``).

    As TensorFlow: the default stream is ``sys.stderr``; ``output_stream`` may be
    ``sys.stdout``, ``sys.stderr`` (the stream current when the text is written),
    a logging function (``logging.info``, ``absl.logging.warning`` ...) or
    ``"file://path"`` (appended to). Tensors show the first and last
    ``summarize`` elements of each dimension (``-1``: all), integers and bools
    as numbers, floats with six significant digits; Python structures are
    pretty-printed with their tensors formatted the same way. Inside a
    ``tf.function`` the print is a step of the compiled function: it prints at
    every call, with that call's values (Python's ``print`` prints at trace
    time only).

    >>> import sys
    >>> import gputape.tf as tf
    >>> tf.print("loss:", tf.constant(0.5), tf.range(10), output_stream=sys.stdout)
    loss: 0.5 [0 1 2 ... 7 8 9]
    >>> tf.print(tf.range(2), tf.range(2) * 2, {2: tf.range(3)}, sep=",", output_stream=sys.stdout)
    [0 1],[0 2],{2: [0 1 2]}
    """
    stream = _print_stream(output_stream)
    if summarize is not None and (not is_index(summarize) or (summarize < 0 and summarize != -1)):
        raise ValueError(f"tf.print: summarize must be a non-negative int or -1 (all elements), got {summarize!r}")
    leaves, spec = flatten(list(inputs))
    tensors = tuple(isinstance(v, Tensor) for v in leaves)  # (a replay hands every value over as an array)
    emit = functools.partial(_print_leaves, spec, tensors, stream, sep, end, 3 if summarize is None else summarize)
    tr = _state.current_trace()
    if tr is not None and tr.owned():
        # a step of the compiled function: printed now and at every replay, with that call's values
        tr.python_step(emit, tuple(v._data if t else v for v, t in zip(leaves, tensors)), wrap=False, emits_only=True)
        return
    emit(*[v._data if t else v for v, t in zip(leaves, tensors)])


class _Stream:
    """A print destination resolved when the text is written (pytest and notebooks swap sys.stdout)."""

    def __init__(self, kind: str, target: Any = None) -> None:
        self.kind, self.target = kind, target

    def write(self, text: str) -> None:
        if self.kind == "stdout":
            sys.stdout.write(text)
        elif self.kind == "stderr":
            sys.stderr.write(text)
        elif self.kind == "file":
            with open(self.target, "a", encoding="utf-8") as f:
                f.write(text)
        else:  # a logging function: one record, without the line end (as TensorFlow logs it)
            self.target(text[:-1] if text.endswith("\n") else text)


def _print_stream(output_stream: Any) -> _Stream:
    if output_stream is _DEFAULT_STREAM or output_stream is sys.stderr or output_stream is sys.__stderr__:
        return _Stream("stderr")
    if output_stream is sys.stdout or output_stream is sys.__stdout__:
        return _Stream("stdout")
    if isinstance(output_stream, str) and output_stream.startswith("file://"):
        return _Stream("file", output_stream[len("file://") :])
    if callable(output_stream) and getattr(output_stream, "__name__", "") in _LOG_LEVELS:
        return _Stream("log", output_stream)
    raise ValueError(
        f"tf.print: unsupported output_stream {output_stream!r}. Supported: sys.stdout, sys.stderr, a logging "
        'function (logging.info, logging.warning, logging.error, absl.logging.*) or "file://<path>"'
    )


_LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "fatal", "critical"}


class _Formatted:
    """A formatted tensor inside a pretty-printed structure (its repr is the text)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _print_leaves(spec: Any, tensors: tuple, stream: _Stream, sep: str, end: str, summarize: int, *leaves: Any) -> None:
    parts = []
    for x in unflatten(spec, [_Formatted(_format_tensor(v, summarize)) if t else v for v, t in zip(leaves, tensors)]):
        if isinstance(x, (_Formatted, str)):
            parts.append(str(x))
        else:
            parts.append(pprint.pformat(x))
    stream.write(sep.join(parts) + end)


def _format_tensor(data: Any, summarize: int) -> str:
    """TensorFlow's print layout of a tensor's array: ``[0 1 2 ... 7 8 9]``, a matrix's rows on new lines."""
    a = np.asarray(to_host(data))
    if a.dtype.kind == "f" or a.dtype.kind == "c":
        fmt = _format_float
    elif a.dtype.kind == "b":
        fmt = lambda v: "1" if v else "0"  # (C++ streams print bools as 1 and 0)
    else:
        fmt = str
    return _format_dims(a, summarize, fmt, 0)


def _format_float(v: Any) -> str:
    if np.iscomplexobj(v):
        return f"({_format_float(v.real)},{_format_float(v.imag)})"
    v = float(v)
    if np.isnan(v):
        return "nan" if not np.signbit(v) else "-nan"
    return "inf" if v == np.inf else "-inf" if v == -np.inf else f"{v:.6g}"


def _format_dims(a: np.ndarray, summarize: int, fmt: Callable[[Any], str], depth: int) -> str:
    if a.ndim == 0:
        return fmt(a[()])
    n = a.shape[0]
    if summarize != -1 and n > 2 * summarize:
        idx: list[int | None] = [*builtins.range(summarize), None, *builtins.range(n - summarize, n)]
    else:
        idx = list(builtins.range(n))
    items = ["..." if i is None else _format_dims(a[i], summarize, fmt, depth + 1) for i in idx]
    joiner = " " if a.ndim == 1 else "\n" + " " * (depth + 1)
    return "[" + joiner.join(items) + "]"
