"""Per-thread state and the tools that keep it consistent: the bottom layer of gputape.

This module imports nothing from gputape. Everything that pushes and pops state which
must stay consistent when an exception or a Ctrl-C arrives (tape enter/exit, optimizer
commits, tracing) builds on the pieces here.

**The observer stack.** Each thread has one stack of observers: recording tapes, tapes
paused by ``stop_recording``, ``custom_gradient`` forwards (which hide the tapes below them
and watch variable reads), ``gt.function`` traces, ``check_numerics`` and
``record_locations`` blocks. It is the only state the op path reads: ``tls.obs`` is
``None`` while nothing observes this thread, else an immutable :class:`Observers` snapshot
holding the stack and the views derived from it (which tapes record, which are paused, the
watchers, the trace, the debug switches). Nothing is counted: every view is recomputed from
the stack, so no counter can drift. The ops' fast path first reads ``anywhere`` (false
while no thread has anything on its stack: one module-attribute read per op outside every
tape), then this thread's ``tls.obs``.

**Why it survives Ctrl-C.** A push or pop builds the new snapshot first and then installs
it with a single attribute store, so an interrupt arriving anywhere leaves either the old
state or the new one, never a mix. Entries are removed by identity (any position: a
non-persistent tape leaves its stack inside ``gradient()``), and a removal interrupted
before its store is retried before the interrupt propagates. Callers place the commit as
the last step of ``__enter__`` and the first of ``__exit__``; Python itself can still
deliver an interrupt on the first bytecode of an ``__exit__``, before any of its code runs,
which no library can intercept.

>>> from gputape.core import state as _state
>>> class Marker:
...     observes = "numerics"
>>> m = Marker()
>>> _state.push(m); _state.tls.obs.numerics is m
True
>>> _state.pop(m); _state.tls.obs is None
True

``defer_interrupts`` holds a KeyboardInterrupt (SIGINT) that arrives during a short
critical section and raises it when the section ends, so a commit of several
assignments is either not started or finished, never half done:

>>> from gputape.core.state import defer_interrupts
>>> done = []
>>> with defer_interrupts():
...     done.append("a"); done.append("b")   # a Ctrl-C here is raised after the block
>>> done
['a', 'b']
"""

from __future__ import annotations

import signal
import threading

# the C functions themselves: signal.signal/getsignal wrap them in enum conversions costing ~3 us a call
from _signal import getsignal as _getsignal
from _signal import signal as _setsignal
from typing import Any

__all__ = ["Observers", "Scope", "current_trace", "defer_interrupts", "pop", "push", "tls"]

_MAIN = threading.main_thread()
_MAIN_IDENT = _MAIN.ident
_get_ident = threading.get_ident
# plain ints for the C functions (the enum members cost an attribute read and a conversion each call)
_SIGINT = int(signal.SIGINT)
_SIG_IGN = int(signal.SIG_IGN)


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

    Costs two ``signal.signal`` calls (a fraction of a microsecond each): meant for commits that run
    once per step, not for every op.

    >>> with defer_interrupts():
    ...     x = 1 + 1
    >>> x
    2
    """

    __slots__ = ("_held", "_old")

    def __enter__(self) -> defer_interrupts:
        self._held = None
        if _get_ident() != _MAIN_IDENT:
            return self
        old = _getsignal(_SIGINT)
        if type(old) is _Held:  # an outer block already holds interrupts
            return self
        # One handler object for every block: only the main thread's outermost block installs
        # it, so no two blocks use it at once (an optimizer step enters one; this saves making one)
        held = _HELD
        held.received = False
        held.frame = None
        _setsignal(_SIGINT, held)
        self._old, self._held = old, held
        return self

    def __exit__(self, *exc: Any) -> None:
        held = self._held
        if held is None:
            return
        self._held = None
        _setsignal(_SIGINT, self._old)
        if held.received:
            frame, held.frame = held.frame, None  # (the shared object must not keep a frame alive)
            _deliver(self._old, frame)


_HELD = _Held()


def _deliver(handler: Any, frame: Any) -> None:
    """Do what SIGINT's ``handler`` does (``default_int_handler`` raises KeyboardInterrupt)."""
    if callable(handler):
        handler(signal.SIGINT, frame)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)


# -- the observer stack ---------------------------------------------------------------------


class Observers:
    """One thread's observer stack at one moment, with the views the op path reads (immutable).

    Each entry names its role in a class attribute ``observes``:

    * ``"tape"``: a recording GradientTape;
    * ``"pause"``: ``tape.stop_recording()``; the entry's ``tape``, if it is below, stops
      recording and is listed in ``paused`` (ops on values it tracks are marked for explain);
    * ``"custom"``: a ``custom_gradient`` forward: tapes below it do not record until it
      ends, and its ``watched`` dict collects the variables read meanwhile;
    * ``"trace"``: a ``gt.function`` trace (the innermost one is ``trace``);
    * ``"numerics"``: ``check_numerics`` (implies ``locations``): the innermost one is
      ``numerics``, whose ``check_forward(prim, args, res)``, ``check_backward(node, g, saved,
      grads)`` and ``flush()`` the op path and the sweep call; ``"locations"``: ``record_locations``;
    * ``"placement"``: ``gt.debug.log_device_placement`` (the innermost one is ``placement``;
      its ``op(name, result)`` is called for every op).

    ``debug`` is true when the op path must call the debug hook (numerics, a paused tape, the
    placement log); ``hooks`` when it must call anything besides recording on the tapes (a
    trace, the debug hook, watchers): one test per op for all three in the usual case, where
    none is on.
    """

    __slots__ = (
        "debug",
        "hooks",
        "locations",
        "numerics",
        "paused",
        "placement",
        "stack",
        "tapes",
        "trace",
        "watchers",
    )

    def __init__(self, stack: tuple) -> None:
        if len(stack) == 1 and stack[0].observes == "tape":  # one tape entered (each eager step): the loop's result
            self.stack = self.tapes = stack
            self.paused = self.watchers = ()
            self.trace = self.numerics = self.placement = None
            self.locations = self.debug = self.hooks = False
            return
        tapes: list[Any] = []
        paused: list[Any] = []
        watchers: list[dict] = []
        trace = placement = numerics = None
        locations = False
        for e in stack:
            role = e.observes
            if role == "tape":
                tapes.append(e)
            elif role == "pause":
                t = e.tape
                for k in range(len(tapes)):
                    if tapes[k] is t:
                        del tapes[k]
                        paused.append(t)
                        break
            elif role == "custom":
                tapes = []
                watchers.append(e.watched)
            elif role == "trace":
                trace = e
            elif role == "numerics":
                numerics = e
                locations = True
            elif role == "locations":
                locations = True
            elif role == "placement":
                placement = e
            else:
                raise ValueError(f"gputape.core.state: unknown observer role {role!r} of {e!r}")
        self.stack = stack
        self.tapes = tuple(tapes)
        self.paused = tuple(paused)
        self.watchers = tuple(watchers)
        self.trace = trace
        self.numerics = numerics
        self.locations = locations
        self.placement = placement
        self.debug = numerics is not None or bool(paused) or placement is not None
        self.hooks = self.debug or trace is not None or bool(watchers)

    def __repr__(self) -> str:
        return f"<Observers {[type(e).__name__ for e in self.stack]}>"

    # Rare events (values leaving as host data, variable reads and assignments outside ops),
    # sent to the entries whose role cares; the per-op hooks are inlined in gputape.core.tape.
    def exported(self, t: Any, array: Any, convert: Any = None, value: Any = None) -> None:
        """A tensor's value left as a host array or number (``.numpy()``, ``float()``): ``value``,
        made by ``convert`` from the host array (see ``gputape.core.tensor.read_value``)."""
        if self.trace is not None:
            self.trace.exported(t, convert, value)
        for tape in self.tapes:
            tape._note_export(t, array)

    def variable_read(self, var: Any) -> None:
        """A Variable was read outside an op (``.value()``)."""
        if self.trace is not None:
            self.trace.read_variable(var)
        for w in self.watchers:
            w.setdefault(var._id, var)
        if var._trainable:
            for tape in self.tapes:
                if tape._auto and var._id not in tape._tensors:
                    tape._watch_variable(var)

    def assigned(self, var: Any, op: str, array: Any) -> None:
        """``var.assign*(array)`` ran (a trace replays it)."""
        if self.trace is not None:
            self.trace.assign(var, op, array)


class _Local(threading.local):
    def __init__(self) -> None:
        self.obs: Observers | None = None  # this thread's observers; None: nothing observes
        self.device: str | None = None  # the ``gt.device`` scope; None: the default device


tls = _Local()

# ``anywhere`` is false only while no thread has anything on its stack, so that ops outside
# every tape pay one module-attribute read (a thread-local read costs ~60 ns more per op);
# when it is true the op reads its own thread's ``tls.obs``. It is derived, not counted:
# ``_observing`` holds the threads whose stack may be non-empty (marked before a push is
# committed, cleared after a pop found the stack empty), and ``anywhere`` is recomputed from
# it. An interrupt between the steps can only leave it true when it could be false: ops
# then take the thread-local read, and the thread's next push or pop mends it.
anywhere = False
_observing: set[int] = set()

# The process-wide gt.profiler session (None: nothing profiles). A profile sees every thread,
# so it is not on a thread's stack; it keeps ``anywhere`` true while it runs, and the op path,
# the sweep and the tape read it only once ``anywhere`` said something observes.
profiler: Any = None


def set_profiler(session: Any) -> None:
    """Install (or, with None, remove) the process-wide profiling session: one store each."""
    global profiler, anywhere
    profiler = session
    anywhere = True if (_observing or session is not None) else False


def _mark() -> None:
    """Before a push: this thread may observe."""
    global anywhere
    _observing.add(threading.get_ident())
    anywhere = True


def _sync() -> None:
    """After a pop: forget this thread if its stack is empty now."""
    global anywhere
    if tls.obs is None:
        _observing.discard(threading.get_ident())
        # No call between reading the set and storing the flag, so no other thread runs in
        # between (CPython switches threads only at calls and backward jumps): a thread that
        # marked itself is either in the set read here or stores True after this store.
        anywhere = True if (_observing or profiler is not None) else False


def push(entry: Any) -> None:
    """Put ``entry`` on top of this thread's observer stack (one store: all or nothing)."""
    o = tls.obs
    new = Observers((o.stack if o is not None else ()) + (entry,))
    _mark()
    tls.obs = new


def _without(entry: Any) -> None:
    o = tls.obs
    if o is not None:
        st = o.stack
        for k in range(len(st) - 1, -1, -1):
            if st[k] is entry:
                rest = st[:k] + st[k + 1 :]
                tls.obs = Observers(rest) if rest else None
                break
    _sync()


def pop(entry: Any) -> None:
    """Remove ``entry`` (its latest occurrence) from this thread's stack; absent: nothing to do.

    Removal by identity is idempotent, so when an interrupt arrives before the new snapshot
    is stored, the removal is simply made again before the interrupt goes on.
    """
    try:
        _without(entry)
    except BaseException:
        _without(entry)
        raise


def current_trace() -> Any:
    """The ``gt.function`` trace recording in this thread, or None."""
    o = tls.obs
    return None if o is None else o.trace


_EXIT_CODES: set[Any] = set()  # Scope.__exit__ and the subclasses' own __exit__ (see _Guard)


class Scope:
    """Base of the observers that are context managers: ``with`` pushes, leaving pops.

    ``__enter__`` ends with the commit (one store); ``__exit__`` begins with it: when the
    stack is still exactly what this scope's entry made it (the usual, nested case) the
    previous snapshot is put back with no call at all, else the entry is removed by
    identity, retried if an interrupt cut the first try short. Subclasses set ``observes``.

    >>> from gputape.core import state as _state
    >>> class Loud(_state.Scope):
    ...     observes = "locations"
    >>> with Loud():
    ...     _state.tls.obs.locations
    True
    >>> _state.tls.obs is None
    True
    """

    observes = ""
    _undo: tuple[Observers, Observers | None] | None = None  # (snapshot made, snapshot before)
    # Scopes that user code opens with ``with`` hold a SIGINT that lands on their __exit__'s
    # first bytecode (see _Guard); the ones gputape opens itself guard with try/finally.
    _guarded = True
    _hooks = False  # set per subclass (__init_subclass__)

    def __enter__(self) -> Any:
        global anywhere
        if self._hooks:
            self._opening()
        guard = self._guarded and _get_ident() == _MAIN_IDENT
        try:
            if guard:  # the guard (see _Guard): the outermost guarded scope installs it
                h = _getsignal(_SIGINT)
                if h is _GUARD:
                    if tls.obs is None:  # the outermost scope: adopt a guard whose owner was cut short
                        h.owner = self
                # (_signal.getsignal gives SIG_DFL and SIG_IGN as plain ints: one type test before the value's)
                elif not (h is None or type(h) is _Held or (type(h) is int and h == _SIG_IGN)):
                    # (not set from Python, ignored, or held by defer_interrupts: nothing to guard)
                    g = _GUARD
                    g.old, g.owner, g.held = h, self, None
                    _setsignal(_SIGINT, g)
            below = tls.obs
            above = Observers((below.stack if below is not None else ()) + (self,))
            self._undo = (above, below)
            _observing.add(_get_ident())  # this thread may observe (as _mark: the flag before the commit)
            anywhere = True
            tls.obs = above  # the commit, last: an interrupt before it leaves nothing pushed
        except BaseException:
            Scope.__exit__(self)  # removes what was pushed, undoes _opening, lets the guard go
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        global anywhere
        try:
            undo = self._undo
            if undo is not None and tls.obs is undo[0]:
                below = tls.obs = undo[1]
                if below is None:  # (as _sync: no call between reading the set and storing the flag)
                    _observing.discard(_get_ident())
                    anywhere = True if (_observing or profiler is not None) else False
            else:
                try:
                    _without(self)
                except BaseException:
                    _without(self)
                    raise
            self._undo = None
        finally:
            if self._hooks:
                self._closed()
            if self._guarded and _get_ident() == _MAIN_IDENT:
                h = _getsignal(_SIGINT)
                if h is _GUARD:  # (else none is on, or the block installed a handler of its own: it stays)
                    if h.owner is self:
                        # signal.signal first runs the handler for a signal pending now: this guard,
                        # which holds it (the frame is this one's) until the old handler is back
                        _setsignal(_SIGINT, h.old)
                        h.owner = None
                    held, h.held = h.held, None
                    if held is not None:  # an interrupt the guard held is delivered now that the pop is done
                        _deliver(h.old, held)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # a subclass that wraps __exit__ (and calls this one) is guarded on its first bytecode too
        super().__init_subclass__(**kwargs)
        # whether _opening/_closed do anything: the scopes that define neither (tapes) skip two calls
        cls._hooks = cls._opening is not Scope._opening or cls._closed is not Scope._closed
        own = cls.__dict__.get("__exit__")
        if own is not None:
            _EXIT_CODES.add(own.__code__)

    def _opening(self) -> None:
        """Subclasses: state to set up before the entry is pushed (undone by ``_closed``)."""

    def _closed(self) -> None:
        """Subclasses: undo ``_opening``; runs after the entry left the stack."""


class _Guard:
    """The SIGINT handler while a user-opened :class:`Scope` is open in the main thread.

    Python runs a signal handler at the next check point of the interpreter, and the first
    bytecode of every function is one: a Ctrl-C can land on the first bytecode of a scope's
    ``__exit__``, before any of its code ran, and would leave the entry on the stack. The
    guard sees the frame the signal landed in: inside a guarded ``Scope.__exit__`` it holds
    the signal (the exit delivers it once its pop and the guard's removal are done), anywhere
    else it hands it on at once to the handler it replaced. Installed by the outermost guarded
    scope (its ``owner``) at the end of ``Scope.__enter__`` and removed by it at the end of
    ``Scope.__exit__``: two ``signal.signal`` calls per step, none per op. Whether a guard is on
    is read from the handler itself, never from a flag that an interrupt could leave stale.
    """

    __slots__ = ("held", "old", "owner")

    def __init__(self) -> None:
        self.old: Any = None
        self.owner: Scope | None = None
        self.held: Any = None

    def __call__(self, signum: int, frame: Any) -> None:
        f = frame
        for _ in range(16):  # inside a guarded scope's exit (or what it calls)? then hold
            if f is None:
                break
            code = f.f_code
            if code in _EXIT_CODES and getattr(f.f_locals.get("self"), "_guarded", False):
                self.held = frame  # (the scopes gputape opens itself mend an interrupted exit with finally)
                return
            f = f.f_back
        _deliver(self.old, frame)


_GUARD = _Guard()  # one object, (re)installed by each outermost guarded scope
_EXIT_CODE = Scope.__exit__.__code__
_EXIT_CODES.add(_EXIT_CODE)
