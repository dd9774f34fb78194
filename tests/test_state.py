"""gputape._state: the bottom layer's interrupt deferral."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from gputape._state import defer_interrupts


def _sigint_soon(delay: float) -> threading.Timer:
    t = threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_interrupt_during_block_is_raised_after_it():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with defer_interrupts():
            _sigint_soon(0.01).join()
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:  # the signal arrives during this loop, held
                pass
            done.append("committed")
    assert done == ["committed"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nested_blocks_hold_until_the_outermost_ends():
    order = []
    with pytest.raises(KeyboardInterrupt):
        with defer_interrupts():
            with defer_interrupts():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.01)
                order.append("inner")
            order.append("outer")
    assert order == ["inner", "outer"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_user_handler_is_called_after_the_block():
    calls = []
    old = signal.signal(signal.SIGINT, lambda s, f: calls.append(s))
    try:
        with defer_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            assert calls == []
        assert calls == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, old)


def test_no_interrupt_no_effect_and_other_threads_are_untouched():
    with defer_interrupts():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    seen = []

    def worker():
        with defer_interrupts():  # signal handlers cannot be set outside the main thread
            seen.append(signal.getsignal(signal.SIGINT))

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert seen == [signal.default_int_handler]
