"""GradientTape's ``with`` in C (gputape._native scope()) against the Python methods (the reference).

The C enter/exit must leave exactly the state the Python ``Scope.__enter__``/``__exit__`` leave: the
same observer stacks and views at every step, ``_undo``, ``anywhere``/``_observing``, the live-tape
registry, the same errors; the one intended difference is that no SIGINT guard is installed. Each
scenario below runs in a subprocess with the accelerator and with ``GPUTAPE_NATIVE=0``, and the two
transcripts must be equal.
"""

from __future__ import annotations

import dis
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import gputape as gt
from gputape import _state
from gputape import tape as tape_mod

native = pytest.mark.skipif(not gt.config.native_enabled(), reason="the C accelerator is not built or turned off")

_SCENARIOS = textwrap.dedent(
    r"""
    import signal, sys, threading
    import gputape as gt
    from gputape import _state
    from gputape import tape as tape_mod

    names = {}
    out = []

    def label(e):
        return names.get(id(e), type(e).__name__)

    def snap(o):
        if o is None:
            return None
        return (
            [label(e) for e in o.stack], [label(e) for e in o.tapes], [label(e) for e in o.paused],
            len(o.watchers), o.trace is None, o.numerics is None, o.placement is None,
            o.locations, o.debug, o.hooks, o.stack is o.tapes,
        )

    def note(what, *tapes):
        undo = [(snap(t._undo[0]), snap(t._undo[1])) if t._undo is not None else None for t in tapes]
        out.append((what, snap(_state.tls.obs), _state.anywhere, len(_state._observing), undo,
                    [(t._tensors is None, t._used, t in tape_mod._live_tapes) for t in tapes]))

    def mk(name, **kw):
        t = gt.GradientTape(**kw)
        names[id(t)] = name
        return t

    x = gt.constant(3.0)
    v = gt.Variable(2.0)

    # simple, and the gradient after it
    a = mk("a")
    note("a made", a)
    with a as got:
        out.append(("enter returns the tape", got is a))
        y = x * v
        note("in a", a)
    note("after a", a)
    out.append(("grad", float(a.gradient(y, v))))
    note("after grad", a)

    # nested, re-entry error, out-of-order exits
    a, b = mk("a"), mk("b")
    with a:
        with b:
            note("a, b", a, b)
            try:
                a.__enter__()
            except ValueError as e:
                out.append(("re-enter", str(e)))
            note("after re-enter", a, b)
        note("b left", a, b)
    note("both left", a, b)
    a.__enter__(); b.__enter__()
    a.__exit__(None, None, None)
    note("a left first", a, b)
    b.__exit__(None, None, None)
    note("then b", a, b)

    # gradient() inside the block (a non-persistent tape leaves its stack there)
    a = mk("a")
    with a:
        y = v * v
        out.append(("grad inside", float(a.gradient(y, v))))
        note("after grad inside", a)
    note("left", a)
    with a:  # re-entered after gradient(): a fresh recording
        note("re-entered", a)
        y = v * x
    out.append(("grad again", float(a.gradient(y, v))))

    # persistent, stop_recording, custom_gradient, check_numerics inside
    p = mk("p", persistent=True)
    with p:
        y = v * v
        with p.stop_recording():
            note("paused", p)
            z = v * 3.0
        note("resumed", p)
        with gt.debug.check_numerics():
            note("numerics", p)
    note("p left", p)
    with p:
        note("p again", p)
    out.append(("p grads", float(p.gradient(y, v))))

    # an exception inside the block
    a = mk("a")
    try:
        with a:
            y = v * v
            raise KeyError("boom")
    except KeyError:
        note("after exception", a)
    out.append(("grad after exception", float(a.gradient(y, v))))

    # a generator suspended inside `with tape:`
    def gen(t):
        with t:
            yield 1
            yield 2

    a = mk("a")
    g = gen(a)
    next(g)
    note("suspended", a)
    b = mk("b")
    with b:
        note("b over suspended", a, b)
        next(g)
    note("b left, a suspended", a, b)
    g.close()
    note("generator closed", a, b)

    # another thread
    def worker():
        t = mk("w")
        with t:
            note("thread in", t)
        note("thread out", t)

    a = mk("a")
    with a:
        th = threading.Thread(target=worker); th.start(); th.join()
        note("main after thread", a)
    note("main out", a)

    # the errors of a stop_recording on a tape never entered, and of the subclass path
    class Sub(gt.GradientTape):
        pass

    s = Sub(); names[id(s)] = "s"
    with s:
        with mk("a") as a:
            note("sub and a", s, a)
    note("sub out", s, a)
    try:
        mk("n").stop_recording().__enter__()
    except RuntimeError as e:
        out.append(("stop_recording", str(e)))

    print(repr(out))
    """
)


def _run(native_on: bool) -> str:
    env = {**os.environ, "GPUTAPE_NATIVE": "1" if native_on else "0"}
    r = subprocess.run(
        [sys.executable, "-c", _SCENARIOS],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(tape_mod.__file__))),
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@native
def test_native_with_leaves_the_python_paths_state_at_every_step():
    c, py = _run(True), _run(False)
    assert "re-enter" in c and "grad inside" in c  # (the scenarios ran to their end)
    assert c == py


def _python_calls(fn) -> list[str]:
    """The Python functions that ``fn()`` calls (by qualified name), ``fn`` itself left out."""
    seen = []
    old = sys.gettrace()

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is not fn.__code__:
            seen.append(frame.f_code.co_qualname)
        return None

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(old)
    return seen


@native
def test_the_methods_are_c_and_a_subclass_takes_the_python_ones():
    assert type(gt.GradientTape.__dict__["__enter__"]).__name__ == "method_descriptor"
    assert type(gt.GradientTape.__dict__["__exit__"]).__name__ == "method_descriptor"

    class Sub(gt.GradientTape):
        pass

    t = Sub()

    def block():
        with t:
            pass

    seen = _python_calls(block)
    assert "GradientTape.__enter__" in seen and "Scope.__exit__" in seen
    assert _state.tls.obs is None and not _state.anywhere


@native
def test_no_python_frame_runs_in_enter_or_exit():
    """What makes the C commit atomic: a tape already recording (no _fresh) is entered and left
    without any Python frame, so no signal can land between the with statement and the commit."""
    t = gt.GradientTape(persistent=True)
    with t:
        pass
    inside = []

    def block():
        with t:
            inside.append(_state.tls.obs.tapes == (t,))

    seen = _python_calls(block)
    assert inside == [True]
    assert seen == [], seen
    assert _state.tls.obs is None and not _state.anywhere


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals go to the main thread")
def test_no_guard_is_installed_in_the_c_path_and_a_real_sigint_inside_unwinds_cleanly():
    x = gt.constant(2.0)
    handlers = []
    t = gt.GradientTape()
    with pytest.raises(KeyboardInterrupt):
        with t:
            handlers.append(signal.getsignal(signal.SIGINT))
            t.watch(x)
            y = x * x
            signal.raise_signal(signal.SIGINT)  # delivered at once, inside the block
    assert _state.tls.obs is None and not _state.anywhere
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if gt.config.native_enabled():
        assert handlers == [signal.default_int_handler]  # the C path installs no guard
    assert float(t.gradient(y, x)) == 4.0


def _interrupt_points(make_tape):
    """Raise KeyboardInterrupt at each point where CPython 3.11 may run a SIGINT handler, in turn: the
    start of every Python frame (RESUME) and the end of every call (CALL's eval-breaker check) in a
    function holding ``with tape:``; return the states left wrong and the number of points."""
    x = gt.constant(2.0)

    def body(t):
        with t:
            t.watch(x)
            y = x * x
        return y

    problems = []
    k = 0
    while True:
        count = [0]

        def point(count=count, k=k):
            count[0] += 1
            if count[0] == k + 1:
                raise KeyboardInterrupt

        def local(frame, event, arg):
            if event == "opcode":
                prev = local.prev
                local.prev = dis.opname[frame.f_code.co_code[frame.f_lasti]]
                if prev == "CALL":  # the check at the end of the call just made
                    point()
            return local

        local.prev = None

        def tracer(frame, event, arg):
            point()  # a frame's first instruction checks the eval breaker
            if frame.f_code is body.__code__:
                frame.f_trace_opcodes = True
                return local
            return None

        t = make_tape()
        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            body(t)
            done = True
        except KeyboardInterrupt:
            done = False
        finally:
            sys.settrace(old)
        if _state.tls.obs is not None or _state.anywhere:
            problems.append(f"point {k}: stack {_state.tls.obs}, anywhere {_state.anywhere}")
            _state.tls.obs = None
            _state._sync()
        with t:  # usable again (re-entry allowed: it left its stack)
            t.watch(x)
            y = x * x * x
        if float(t.gradient(y, x)) != 12.0:
            problems.append(f"point {k}: tape unusable afterwards")
        if done:
            return problems, k
        k += 1


@native
@pytest.mark.parametrize("persistent", [False, True])
def test_an_interrupt_at_every_check_point_around_with_tape_leaves_a_clean_state(persistent):
    """(The Python path is not tested here: its guard holds a real SIGINT that lands on its
    ``__exit__``'s first bytecode, which an exception raised by a trace function bypasses.)"""
    problems, n = _interrupt_points(lambda: gt.GradientTape(persistent=persistent))
    assert n >= 4  # (body's start, _fresh, watch, the with's exit call at least)
    assert problems == []

    class Sub(gt.GradientTape):  # the Python methods: a trace-raised exception on Scope.__exit__'s
        pass  # first bytecode leaves the tape pushed (a real SIGINT there is held by the guard)

    assert _interrupt_points(Sub)[0], "the harness reaches inside a Python __exit__"
