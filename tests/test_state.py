"""gputape.core.state: interrupt deferral, the per-thread observer stack, and state that survives Ctrl-C."""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time

import pytest
from _signals import SigintAfter

from gputape.core.state import defer_interrupts


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
                signal.raise_signal(signal.SIGINT)  # (this thread, at once: os.kill may reach another thread later)
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
            signal.raise_signal(signal.SIGINT)
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


# -- the observer stack ----------------------------------------------------------------------

import numpy as np  # noqa: E402

import gputape as gt  # noqa: E402
from gputape.core import state as _state  # noqa: E402


def test_views_are_derived_from_the_stack():
    x = gt.constant(2.0)
    assert _state.tls.obs is None
    with gt.GradientTape() as outer, gt.GradientTape() as inner:
        assert _state.tls.obs.tapes == (outer, inner)
        with outer.stop_recording():
            assert _state.tls.obs.tapes == (inner,) and _state.tls.obs.paused == (outer,)
            assert _state.tls.obs.debug and not outer._recording and inner._recording
        assert _state.tls.obs.tapes == (outer, inner) and not _state.tls.obs.debug
        with gt.debug.record_locations():
            assert _state.tls.obs.locations and not _state.tls.obs.numerics
        with gt.debug.check_numerics():
            assert _state.tls.obs.numerics and _state.tls.obs.locations and _state.tls.obs.debug
    assert _state.tls.obs is None
    del x


def test_entries_leave_by_identity_in_any_order():
    a, b = gt.GradientTape(), gt.GradientTape()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)  # not the innermost: removed all the same
    assert _state.tls.obs.tapes == (b,)
    a.__exit__(None, None, None)  # twice: nothing left to remove
    b.__exit__(None, None, None)
    assert _state.tls.obs is None


def test_custom_gradient_hides_the_tapes_and_collects_variable_reads():
    v = gt.Variable(3.0)
    seen = {}

    @gt.custom_gradient
    def f(x):
        seen["tapes"] = _state.tls.obs.tapes
        seen["watchers"] = len(_state.tls.obs.watchers)
        return x * v, lambda dy, variables=None: ([dy * v], [dy * x])

    x = gt.constant(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x)
    assert seen == {"tapes": (), "watchers": 1}
    gx, gv = t.gradient(y, [x, v])
    assert float(gx) == 3.0 and float(gv) == 2.0


def test_each_thread_has_its_own_stack_and_device_scope():
    seen = []

    def worker():
        seen.append((_state.tls.obs, _state.tls.device))

    with gt.GradientTape(), gt.device("cpu"):
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        assert _state.tls.obs is not None and _state.tls.device == "cpu"
    assert seen == [(None, None)]


def test_check_numerics_switch_is_per_thread():
    errors = []

    def worker():
        with np.errstate(invalid="ignore"):
            errors.append(np.isnan(gt.sqrt(gt.constant(-1.0)).numpy()))  # off in this thread

    gt.debug.enable_check_numerics()
    try:
        th = threading.Thread(target=worker)
        th.start()
        th.join()
    finally:
        gt.debug.disable_check_numerics()
    assert errors == [True]


# -- Ctrl-C at any moment ----------------------------------------------------------------------

_X = gt.constant(2.0)


@gt.custom_gradient
def _double(v):
    return v * 2.0, lambda dy: dy * 2.0


def _tape_enter_exit(outer):
    with gt.GradientTape() as t:
        t.watch(_X)
        _X * _X


def _stop_recording(outer):
    with outer.stop_recording():
        _X * _X


def _custom_forward(outer):
    _double(_X)


def _tracing(outer):
    gt.function(lambda a: a * 2.0 + 1.0)(_X)


def _numerics(outer):
    with gt.debug.check_numerics():
        _X * _X


_OPERATIONS = {
    "tape": _tape_enter_exit,
    "stop_recording": _stop_recording,
    "custom_gradient": _custom_forward,
    "gt.function tracing": _tracing,
    "check_numerics": _numerics,
}


def _interrupted_trials(name: str, trials: int, seed: int) -> list[str]:
    """Run ``trials`` loops of one operation, each cut by a real SIGINT at a random moment;
    return what was wrong afterwards (empty: every trial left a clean state)."""
    operation = _OPERATIONS[name]
    rng = random.Random(seed)
    problems = []
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the timer thread gets the GIL soon: delays spread over the operation
    try:
        for trial in range(trials):
            timer = SigintAfter(rng.uniform(0.0, 2e-4))
            outer = None
            try:
                if name in ("stop_recording", "custom_gradient"):  # these run inside a tape
                    outer = gt.GradientTape()
                    outer.__enter__()
                    outer.watch(_X)
                timer.arm()
                deadline = time.monotonic() + 0.05  # a signal lost in a __del__ ends the trial too
                while time.monotonic() < deadline:
                    operation(outer)
            except KeyboardInterrupt:
                pass
            try:
                timer.join()
                time.sleep(0.0005)  # a signal still pending arrives here, not in the checks
            except KeyboardInterrupt:
                pass
            if outer is not None:
                outer.__exit__(None, None, None)
            state = _state.tls.obs
            handler = signal.getsignal(signal.SIGINT)
            with gt.GradientTape() as t:
                t.watch(_X)
                y = _X * _X * _X
            g = t.gradient(y, _X)
            # (a flag left up by an interrupt would only slow ops down; the next pop mends it)
            stale = _state.anywhere
            if state is not None or handler is not signal.default_int_handler or g is None or float(g) != 12.0 or stale:
                problems.append(f"trial {trial}: stack {state}, SIGINT {handler}, gradient {g}, anywhere {stale}")
                _state.tls.obs = None  # start the next trial clean
                signal.signal(signal.SIGINT, signal.default_int_handler)
    finally:
        sys.setswitchinterval(old_interval)
    return problems


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Ctrl-C inside a __del__
@pytest.mark.parametrize("name", list(_OPERATIONS))
def test_interrupt_at_any_moment_leaves_a_clean_state(name):
    problems = _interrupted_trials(name, 600, seed=sorted(_OPERATIONS).index(name))
    assert problems == [], f"{len(problems)} of 600 interrupted trials left the state corrupt: {problems[:3]}"


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("GPUTAPE_SLOW_TESTS"), reason="20000 trials (~1 min): set GPUTAPE_SLOW_TESTS=1")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("name", list(_OPERATIONS))
def test_interrupt_at_any_moment_many_trials(name):
    problems = _interrupted_trials(name, 4000, seed=100 + sorted(_OPERATIONS).index(name))
    assert problems == [], f"{len(problems)} of 4000 interrupted trials left the state corrupt: {problems[:3]}"


def test_observers_of_one_tape_are_the_general_loops_views():
    # Observers((tape,)) takes a shortcut; every view must be what the loop computes for that stack
    # (here computed from a two-entry stack whose second entry the loop ignores but for "locations")
    from gputape.core.state import Observers

    class Role:
        def __init__(self, observes):
            self.observes = observes

    tape = Role("tape")
    one = Observers((tape,))
    loop = Observers((tape, Role("locations")))
    for name in Observers.__slots__:
        if name in ("stack", "locations"):
            continue
        assert getattr(one, name) == getattr(loop, name), name
    assert one.stack == (tape,) and one.tapes == (tape,) and one.locations is False and loop.locations is True
    assert Observers((Role("numerics"),)).debug is True  # other single entries take the loop
    with pytest.raises(ValueError, match="unknown observer role"):
        Observers((Role("nonsense"),))


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
def test_a_ctrl_c_on_the_first_bytecode_of_a_tapes_exit_waits_for_the_pop():
    # The moment no code of __exit__ can defend: the interrupt is handled at the exit's first
    # bytecode (here raised from a profile hook as the exit's frame starts). The guard holds it until
    # the tape has left the stack; without the guard the tape would stay on it, recording forever.
    exit_code = _state.Scope.__exit__.__code__
    fired = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code is exit_code and not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGINT)

    try:
        with pytest.raises(KeyboardInterrupt):
            with gt.GradientTape():
                sys.setprofile(hook)
    finally:
        sys.setprofile(None)
    assert fired
    assert _state.tls.obs is None and not _state.anywhere
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_private_signal_functions_are_signals_own():
    # the guards call _signal's getsignal/signal directly (signal.signal wraps them in enum
    # conversions that cost several percent of a small step); they must stay what signal calls
    import _signal

    assert _state._getsignal is _signal.getsignal and _state._setsignal is _signal.signal
    old = signal.getsignal(signal.SIGINT)
    try:
        for h in (int(signal.SIG_IGN), int(signal.SIG_DFL), signal.default_int_handler):  # (ints: as _state passes)
            _state._setsignal(_state._SIGINT, h)
            assert signal.getsignal(signal.SIGINT) == h and _state._getsignal(_state._SIGINT) == h
    finally:
        signal.signal(signal.SIGINT, old)
