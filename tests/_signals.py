"""A real Ctrl-C (SIGINT to this process) at a chosen moment, for the interrupt tests.

``threading.Timer(delay, os.kill, ...)`` counts its delay from inside ``Timer.start()``, and
``start()`` then waits on a ``threading.Condition`` for the new thread to run: with a delay near 0
the signal can land in that wait, and a KeyboardInterrupt raised inside threading's own lock
handling leaves the lock in a state its ``__exit__`` cannot release (``RuntimeError: release
unlocked lock`` in a later trial). Here the thread is started and parked first; :meth:`arm` only
sets an Event, which the thread cannot act on until the main thread has released the Event's lock,
so the signal always lands in the code under test (or after it), never inside ``threading``.
"""

from __future__ import annotations

import os
import signal
import threading
import time


class SigintAfter:
    """``SigintAfter(delay)``, then ``arm()`` where the measured part starts; ``join()`` when it is over."""

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._go.wait()
        if self._delay > 0:
            time.sleep(self._delay)
        os.kill(os.getpid(), signal.SIGINT)

    def arm(self) -> None:
        self._go.set()

    def join(self) -> None:
        self._thread.join()
