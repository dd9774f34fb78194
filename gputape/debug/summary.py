"""TensorBoard summaries in TensorFlow 2's shape: ``tf.summary`` (its public path is :mod:`gputape.tf.summary`).

``create_file_writer(logdir)`` makes a writer of TensorBoard event files
(tensorboardX writes them: ``pip install "gputape[tensorboard]"``); inside
``with writer.as_default():`` the functions ``scalar``, ``histogram`` and
``text`` write to it and return True (outside any default writer they write
nothing and return False, as TensorFlow's do). Each takes ``step=``, or uses
the step set by ``tf.summary.experimental.set_step`` (a number, or a Variable
such as ``optimizer.iterations``, read at each write). The default writer and
the step are per thread, as in TensorFlow. Inside ``gt.function`` (``tf.function``)
a write is a step of the compiled function: it happens at every call, with that
call's values and step. Keras' ``TensorBoard`` callback writes through these.

>>> import gputape.tf as tf, tempfile, os
>>> logdir = tempfile.mkdtemp()
>>> writer = tf.summary.create_file_writer(logdir)  # doctest: +SKIP
>>> with writer.as_default(step=3):  # doctest: +SKIP
...     tf.summary.scalar("loss", 0.25)
True
>>> tf.summary.scalar("loss", 0.25, step=0)  # no default writer: nothing written
False
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core import state as _state
from ..core.tensor import Tensor
from ..devices.backend import to_host

__all__ = [
    "SummaryWriter",
    "create_file_writer",
    "flush",
    "get_step",
    "histogram",
    "scalar",
    "set_step",
    "text",
]


class _State(threading.local):
    def __init__(self) -> None:
        self.writers: list[SummaryWriter] = []
        self.step: Any = None


_STATE = _State()


def _install_hint(what: str) -> ImportError:
    return ImportError(
        f"{what} needs tensorboardX to write TensorBoard event files, and it is not installed: pip install "
        '"gputape[tensorboard]" (or pip install tensorboardX)'
    )


class SummaryWriter:
    """A writer of TensorBoard event files in ``logdir`` (``tf.summary.create_file_writer`` makes one).

    ``as_default(step=None)`` makes it the thread's default writer inside a
    ``with`` block (and sets the default step there, when given);
    ``set_as_default()`` does so until another is set; ``flush()`` writes what
    is queued; ``close()`` flushes and closes the file.

    >>> import gputape.tf as tf
    >>> tf.summary.SummaryWriter  # doctest: +ELLIPSIS
    <class '...SummaryWriter'>
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        max_queue: int | None = None,
        flush_millis: int | None = None,
        filename_suffix: str | None = None,
        name: str | None = None,
    ) -> None:
        try:
            from tensorboardX import SummaryWriter as _Writer
        except ImportError:
            raise _install_hint("tf.summary.create_file_writer") from None
        if not isinstance(logdir, (str, os.PathLike)) or not str(logdir):
            raise ValueError(f"tf.summary.create_file_writer: logdir must be a non-empty path, got {logdir!r}")
        self.logdir = os.fspath(logdir)
        self.name = name
        self._writer = _Writer(
            logdir=self.logdir,
            max_queue=10 if max_queue is None else int(max_queue),
            flush_secs=120 if flush_millis is None else max(1, int(flush_millis) // 1000),
            filename_suffix=".v2" if filename_suffix is None else str(filename_suffix),
        )
        self._closed = False

    @contextlib.contextmanager
    def as_default(self, step: Any = None) -> Iterator[SummaryWriter]:
        """Make this the default writer (and ``step`` the default step, if given) inside the ``with`` block.

        >>> import gputape.tf as tf
        >>> tf.summary.SummaryWriter.as_default  # doctest: +ELLIPSIS
        <function SummaryWriter.as_default at ...>
        """
        state = _STATE
        state.writers.append(self)
        old_step = state.step
        if step is not None:
            state.step = step
        try:
            yield self
        finally:
            state.writers.pop()
            if step is not None:
                state.step = old_step
            self.flush()  # as TensorFlow's: leaving the block flushes

    def set_as_default(self, step: Any = None) -> None:
        """Make this the thread's default writer from now on (replacing any set the same way)."""
        state = _STATE
        if state.writers:
            state.writers[0] = self
        else:
            state.writers.append(self)
        if step is not None:
            state.step = step

    def init(self) -> None:
        """Nothing to do: the file is open from the start (TensorFlow's writers need it in graphs)."""

    def flush(self) -> None:
        if not self._closed:
            self._writer.flush()

    def close(self) -> None:
        if not self._closed:
            self._writer.close()
            self._closed = True

    def _emit(self, who: str, name: Any, step: Any, write: Any, data: Any) -> None:
        """``write(out, tag, step, data)`` now, and inside ``gt.function`` at every replay with that call's
        values (the step, a Variable such as ``iterations``, is read at each write)."""
        if self._closed:
            raise RuntimeError(f"tf.summary.{who}: the writer for {self.logdir!r} is closed")
        tag = _tag(who, name)
        _step(who, step if step is not None else _STATE.step)  # checked now, read again at each write
        emit = functools.partial(_write_now, self, who, tag, step if step is not None else _STATE.step, write)
        tr = _state.current_trace()
        if tr is not None and tr.owned() and isinstance(data, Tensor):
            tr.python_step(emit, (data,), wrap=False)
            return
        emit(data)

    def __repr__(self) -> str:
        return f"<SummaryWriter logdir={self.logdir!r}{' closed' if self._closed else ''}>"


def create_file_writer(
    logdir: str | os.PathLike,
    max_queue: int | None = None,
    flush_millis: int | None = None,
    filename_suffix: str | None = None,
    name: str | None = None,
    experimental_trackable: bool = False,
    experimental_mesh: Any = None,
) -> SummaryWriter:
    """A :class:`SummaryWriter` of event files in ``logdir`` (made if missing), as TensorFlow's.

    Needs tensorboardX (``pip install "gputape[tensorboard]"``); without it this
    raises ImportError saying so.

    >>> import gputape.tf as tf, tempfile
    >>> w = tf.summary.create_file_writer(tempfile.mkdtemp())  # doctest: +SKIP
    """
    return SummaryWriter(logdir, max_queue, flush_millis, filename_suffix, name)


def _write_now(writer: SummaryWriter, who: str, tag: str, step: Any, write: Any, data: Any) -> None:
    if writer._closed:
        raise RuntimeError(f"tf.summary.{who}: the writer for {writer.logdir!r} is closed")
    write(writer._writer, tag, _step(who, step), data)


def _default() -> SummaryWriter | None:
    writers = _STATE.writers
    return writers[-1] if writers else None


def _tag(who: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"tf.summary.{who}: name must be a non-empty string, got {name!r}")
    return name


def _step(who: str, step: Any) -> int:
    if step is None:
        step = _STATE.step
    if step is None:
        raise ValueError(
            f"tf.summary.{who}: no step set. Please specify one either through the `step` argument or through "
            "tf.summary.experimental.set_step()"
        )
    value = to_host(step._data) if isinstance(step, Tensor) else np.asarray(step)
    integral = value.dtype.kind in "iu" or (value.dtype.kind == "f" and bool(np.isfinite(value) & (value % 1 == 0)))
    if value.shape != () or not integral:
        raise ValueError(f"tf.summary.{who}: step must be a scalar integer, got {step!r}")
    return int(value)


def _values(who: str, data: Any) -> np.ndarray:
    arr = to_host(data._data if isinstance(data, Tensor) else data)
    arr = np.asarray(arr)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"tf.summary.{who}: data must be real numbers, got dtype {arr.dtype}")
    return arr


def scalar(name: str, data: Any, step: Any = None, description: str | None = None) -> bool:
    """Write a scalar to the default writer; False (and nothing written) when there is none.

    >>> import gputape.tf as tf
    >>> tf.summary.scalar("loss", 1.5, step=0)
    False
    """
    writer = _default()
    if writer is None:
        return False
    if int(np.prod(np.shape(data))) != 1:
        raise ValueError(f"tf.summary.scalar: data must be a scalar, got shape {np.shape(data)}")
    if not isinstance(data, Tensor):  # (a tensor's dtype is checked where it is written)
        _values("scalar", data)
    writer._emit("scalar", name, step, functools.partial(_add_scalar, description or ""), data)
    return True


def _add_scalar(description: str, out: Any, tag: str, step: int, data: Any) -> None:
    value = _values("scalar", data)
    out.add_scalar(tag, float(value.reshape(())), global_step=step, summary_description=description)


def histogram(
    name: str, data: Any, step: Any = None, buckets: int | None = None, description: str | None = None
) -> bool:
    """Write a histogram of ``data``'s values (``buckets`` equal bins, TensorFlow's default bins when None).

    >>> import gputape.tf as tf
    >>> tf.summary.histogram("weights", [1.0, 2.0], step=0)
    False
    """
    writer = _default()
    if writer is None:
        return False
    if buckets is not None and (isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1):
        raise ValueError(f"tf.summary.histogram: buckets must be a positive integer or None, got {buckets!r}")
    writer._emit("histogram", name, step, functools.partial(_add_histogram, buckets), data)
    return True


def _add_histogram(buckets: int | None, out: Any, tag: str, step: int, data: Any) -> None:
    values = _values("histogram", data).astype(np.float64).ravel()
    out.add_histogram(tag, values, global_step=step, bins="tensorflow" if buckets is None else buckets)


def text(name: str, data: Any, step: Any = None, description: str | None = None) -> bool:
    """Write a string (TensorBoard's Text tab renders it as Markdown).

    >>> import gputape.tf as tf
    >>> tf.summary.text("note", "hello", step=0)
    False
    """
    writer = _default()
    if writer is None:
        return False
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    if not isinstance(data, str):
        raise TypeError(f"tf.summary.text: data must be a string, got {type(data).__name__}")
    writer._emit("text", name, step, _add_text, data)
    return True


def _add_text(out: Any, tag: str, step: int, data: str) -> None:
    out.add_text(tag, data, global_step=step)


def flush(writer: SummaryWriter | None = None, name: str | None = None) -> None:
    """Flush ``writer`` (the default writer when None; nothing when there is none).

    >>> import gputape.tf as tf
    >>> tf.summary.flush()
    """
    writer = writer if writer is not None else _default()
    if writer is not None:
        writer.flush()


def set_step(step: Any) -> None:
    """Set the default step of this thread's summaries (``tf.summary.experimental.set_step``); None unsets it.

    A Variable (``optimizer.iterations``) is read at each write.

    >>> import gputape.tf as tf
    >>> tf.summary.experimental.set_step(5); tf.summary.experimental.get_step()
    5
    >>> tf.summary.experimental.set_step(None)
    """
    _STATE.step = step


def get_step() -> Any:
    """The default step set by :func:`set_step` (None when unset)."""
    return _STATE.step
