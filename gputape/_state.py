"""Per-thread state and the tools that keep it consistent: the bottom layer of gputape.

This module imports nothing from gputape. Everything that pushes and pops state which
must stay consistent when an exception or a Ctrl-C arrives (tape enter/exit, optimizer
commits, tracing) builds on the pieces here.

``defer_interrupts`` holds a KeyboardInterrupt (SIGINT) that arrives during a short
critical section and raises it when the section ends, so a commit of several
assignments is either not started or finished, never half done:

>>> from gputape._state import defer_interrupts
>>> done = []
>>> with defer_interrupts():
...     done.append("a"); done.append("b")   # a Ctrl-C here is raised after the block
>>> done
['a', 'b']
"""

from __future__ import annotations

import signal
import threading
from typing import Any

try:  # the C module behind ``signal``: its functions skip the enum wrapping, 5x faster per call
    import _signal as _sig
except ImportError:  # pragma: no cover - Python implementations without it
    _sig = signal  # type: ignore[assignment]

__all__ = ["defer_interrupts"]

_MAIN = threading.main_thread()


class _Held:
    """The SIGINT handler installed while interrupts are deferred: it only remembers."""

    __slots__ = ("frame", "received")

    def __init__(self) -> None:
        self.received = False
        self.frame: Any = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.received = True
        self.frame = frame


class defer_interrupts:  # noqa: N801 - used like a function, as contextlib.suppress
    """Context manager: a SIGINT during the block is delivered when the block ends.

    Python runs signal handlers only in the main thread, so elsewhere this does nothing
    (no KeyboardInterrupt can arrive there). Nested uses defer to the outermost one. If the
    block raises, that exception propagates and a held interrupt is still delivered
    (the KeyboardInterrupt then carries the block's exception as its context).

    Costs two ``signal.signal`` calls (about half a microsecond each): meant for commits that
    run once per step, not for every op.

    >>> with defer_interrupts():
    ...     x = 1 + 1
    >>> x
    2
    """

    __slots__ = ("_held", "_old")

    def __enter__(self) -> defer_interrupts:
        self._held = None
        if threading.current_thread() is not _MAIN:
            return self
        old = _sig.getsignal(signal.SIGINT)
        if isinstance(old, _Held):  # an outer block already holds interrupts
            return self
        held = _Held()
        _sig.signal(signal.SIGINT, held)
        self._old, self._held = old, held
        return self

    def __exit__(self, *exc: Any) -> None:
        held = self._held
        if held is None:
            return
        self._held = None
        _sig.signal(signal.SIGINT, self._old)
        if held.received:
            old = self._old
            if callable(old):
                old(signal.SIGINT, held.frame)  # default_int_handler raises KeyboardInterrupt here
            elif old == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
