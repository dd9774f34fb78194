"""Per-op profiler: forward and backward time and counts, a Chrome trace and a text summary.

>>> import tempfile, gputape as gt
>>> x = gt.constant([1.0, 2.0])
>>> with gt.profiler.profile(tempfile.mkdtemp()) as prof:
...     with gt.GradientTape() as tape:
...         tape.watch(x)
...         y = gt.sum(gt.exp(x))
...     _ = tape.gradient(y, x)
>>> prof.result.stats["exp"]["forward_calls"], prof.result.stats["exp"]["backward_calls"]
(1, 1)

Zero cost when off: nothing in the op path tests a flag. :func:`start` swaps
every registered :class:`~gputape.tape.Primitive`'s ``fwd``, ``cpu`` (the
C-level CPU fast path, when it has one) and ``vjp`` for timing wrappers, and
``GradientTape.gradient``/``jacobian``/``batch_jacobian`` for span wrappers;
:func:`stop` puts the original objects back. Only primitives registered when
:func:`start` runs are profiled.

Times are host wall-clock (``time.perf_counter_ns``). Nested events (a VJP
that calls gputape ops when a tape records the gradient computation) appear
nested in the trace; the summary's times are *self* times (children
subtracted), so shares add up to 100%.

:func:`stop` writes two files into ``logdir``:

* ``trace.json``: Chrome trace format (``{"traceEvents": [...]}``, complete
  ``"X"`` events, microseconds); open it in https://ui.perfetto.dev or
  ``chrome://tracing``. Categories: ``forward``, ``backward`` (a VJP) and
  ``tape`` (a whole ``gradient``/``jacobian`` call).
* ``summary.txt``: one line per op: calls, total and mean forward and
  backward time, share of the profiled op time.

Both are overwritten by the next run into the same ``logdir``.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import tape as _tape
from ._state import defer_interrupts

__all__ = ["ProfileResult", "is_active", "profile", "start", "stop"]

# TODO(gpu): on CuPy arrays these host timers measure kernel *launch* time,
# not execution. The GPU path should bracket each wrapped call with a pair of
# cupy.cuda.Event records (created through gputape.backend, the only module
# that may import cupy) on the current stream, keep the event pairs in the
# event list, and resolve them with cupy.cuda.get_elapsed_time at stop(), after
# one stream synchronize, so that profiling adds no sync per op. Not done yet:
# no GPU backend exists to test it on, and a host-timer number labelled as GPU
# time would be wrong.

_lock = threading.Lock()
_state: _Session | None = None


class _Frame(threading.local):
    def __init__(self) -> None:
        self.child_ns: list[int] = []  # per open event: time spent in nested events


class _Session:
    """One profiling run: the swapped attributes and the events recorded so far."""

    def __init__(self, logdir: str | None) -> None:
        self.logdir = logdir
        self.t0 = time.perf_counter_ns()
        self.start_wall = time.time()
        # (name, cat, start_ns, dur_ns, self_ns, tid) per event
        self.events: list[tuple[str, str, int, int, int, int]] = []
        self.swapped: list[tuple[Any, str, Any, Any]] = []  # (obj, attr, original, wrapper)
        self.frames = _Frame()

    def wrap(self, name: str, cat: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        events = self.events
        frames = self.frames
        clock = time.perf_counter_ns
        get_tid = threading.get_native_id

        def timed(*args: Any, **kwargs: Any) -> Any:
            stack = frames.child_ns
            stack.append(0)
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                dur = clock() - t
                inner = stack.pop()
                if stack:
                    stack[-1] += dur
                events.append((name, cat, t, dur, dur - inner, get_tid()))

        if hasattr(fn, "__name__"):
            functools.update_wrapper(timed, fn)
        else:  # functools.partial and other callables without metadata
            timed.__name__ = name
        timed.__gputape_profiled__ = True  # type: ignore[attr-defined]
        return timed

    def swap(self, obj: Any, attr: str, name: str, cat: str) -> None:
        original = getattr(obj, attr)
        if original is None:
            return  # no C-level fast path, or no VJP (non-differentiable op)
        wrapper = self.wrap(name, cat, original)
        setattr(obj, attr, wrapper)
        self.swapped.append((obj, attr, original, wrapper))

    def install(self) -> None:
        # The fast sweep's raw namespace captures some forwards (scatter) when
        # it is first built; build numpy's now, so it never captures a wrapper.
        if _tape._RAW_F is not None:
            _tape._RAW_F(np)
        for prim in list(_tape.REGISTRY.values()):
            self.swap(prim, "fwd", prim.name, "forward")
            self.swap(prim, "cpu", prim.name, "forward")
            self.swap(prim, "vjp", prim.name, "backward")
        cls = _tape.GradientTape
        for meth in ("gradient", "jacobian", "batch_jacobian"):
            original = cls.__dict__[meth]
            wrapper = self.wrap(meth, "tape", original)
            setattr(cls, meth, wrapper)
            self.swapped.append((cls, meth, original, wrapper))

    def uninstall(self) -> None:
        # Reverse order; an attribute someone replaced while we profiled (and
        # that is no longer our wrapper) is theirs and stays.
        for obj, attr, original, wrapper in reversed(self.swapped):
            current = obj.__dict__.get(attr) if isinstance(obj, type) else getattr(obj, attr)
            if current is wrapper:
                setattr(obj, attr, original)
        self.swapped = []


class ProfileResult:
    """What :func:`stop` returns: file paths, per-op statistics and the summary text.

    ``stats[op]`` has ``forward_calls``, ``forward_ns``, ``backward_calls``,
    ``backward_ns`` (self times, nanoseconds). ``str(result)`` is the summary.
    """

    def __init__(self, trace_path: str | None, summary_path: str | None, stats: dict, summary: str, n_events: int):
        self.trace_path = trace_path
        self.summary_path = summary_path
        self.stats = stats
        self.summary = summary
        self.n_events = n_events

    def __str__(self) -> str:
        return self.summary

    def __repr__(self) -> str:
        return f"<ProfileResult {self.n_events} events, trace={self.trace_path!r}>"


def is_active() -> bool:
    """Whether a profiling session is running.

    >>> import gputape as gt
    >>> gt.profiler.is_active()
    False
    """
    return _state is not None


def start(logdir: str | os.PathLike | None) -> None:
    """Start profiling every registered op; results go to ``logdir`` at :func:`stop`.

    ``logdir`` is created if needed; ``None`` keeps the results in memory
    only (:func:`stop` still returns them). One session at a time: a second
    ``start`` raises ``RuntimeError``.

    >>> import tempfile, gputape as gt
    >>> gt.profiler.start(tempfile.mkdtemp())
    >>> _ = gt.exp(gt.constant([0.0]))
    >>> result = gt.profiler.stop()
    >>> result.stats["exp"]["forward_calls"]
    1
    """
    global _state
    with _lock:
        if _state is not None:
            raise RuntimeError(
                "gt.profiler.start: a profiling session is already running "
                f"(logdir {_state.logdir!r}); call gt.profiler.stop() first. Sessions do not nest."
            )
        d = os.fspath(logdir) if logdir is not None else None
        if d is not None:
            os.makedirs(d, exist_ok=True)
        session = _Session(d)
        # All of the ops swapped or none: a Ctrl-C in the middle of the swapping would leave
        # wrappers recording into a session nobody can stop. It is held until the swap is
        # done, and then undoes it (start() raised: nothing is profiling).
        try:
            with defer_interrupts():
                session.install()
                _state = session
        except BaseException:
            with defer_interrupts():
                session.uninstall()
                _state = None
            raise


def stop(print_summary: bool = False) -> ProfileResult:
    """Stop profiling, restore the ops, write ``trace.json`` and ``summary.txt``; return a :class:`ProfileResult`.

    With ``print_summary=True`` the summary is also printed.

    >>> import gputape as gt
    >>> gt.profiler.start(None)
    >>> _ = gt.constant([1.0]) * 2.0
    >>> print(gt.profiler.stop().summary.splitlines()[0].split()[:3])
    ['op', 'fwd', 'calls']
    """
    global _state
    with _lock:
        session = _state
        if session is None:
            raise RuntimeError(
                "gt.profiler.stop: no profiling session is running; call gt.profiler.start(logdir) first"
            )
        with defer_interrupts():  # every original back, or (not started) none
            session.uninstall()
            _state = None
    events = list(session.events)
    stats, spans = _aggregate(events)
    summary = _summary_text(stats, spans, events, session)
    trace_path = summary_path = None
    if session.logdir is not None:
        trace_path = os.path.join(session.logdir, "trace.json")
        summary_path = os.path.join(session.logdir, "summary.txt")
        with open(trace_path, "w") as f:
            json.dump(_chrome_trace(events, session), f)
        with open(summary_path, "w") as f:
            f.write(summary + "\n")
    result = ProfileResult(trace_path, summary_path, stats, summary, len(events))
    if print_summary:
        print(summary)
    return result


class profile:  # noqa: N801 - lower case like contextlib's context managers and tf.profiler
    """Context manager: ``with gt.profiler.profile(logdir) as prof: ...``; then ``prof.result``.

    >>> import gputape as gt
    >>> with gt.profiler.profile(None) as prof:
    ...     _ = gt.tanh(gt.constant([0.5]))
    >>> prof.result.stats["tanh"]["forward_calls"]
    1
    """

    def __init__(self, logdir: str | os.PathLike | None, print_summary: bool = False) -> None:
        self.logdir = logdir
        self.print_summary = print_summary
        self.result: ProfileResult | None = None

    def __enter__(self) -> profile:
        start(self.logdir)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.result = stop(print_summary=self.print_summary)

    @property
    def trace_path(self) -> str | None:
        """Path of the Chrome trace written at exit."""
        return self.result.trace_path if self.result else None

    @property
    def summary_path(self) -> str | None:
        """Path of the text summary written at exit."""
        return self.result.summary_path if self.result else None


def _aggregate(events: list) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    ops: dict[str, dict[str, int]] = {}
    spans: dict[str, dict[str, int]] = {}
    for name, cat, _t, dur, self_ns, _tid in events:
        if cat == "tape":
            s = spans.setdefault(name, {"calls": 0, "total_ns": 0})
            s["calls"] += 1
            s["total_ns"] += dur
            continue
        s = ops.setdefault(name, {"forward_calls": 0, "forward_ns": 0, "backward_calls": 0, "backward_ns": 0})
        s[f"{cat}_calls"] += 1
        s[f"{cat}_ns"] += self_ns
    return ops, spans


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f}"


def _summary_text(stats: dict, spans: dict, events: list, session: _Session) -> str:
    total = sum(s["forward_ns"] + s["backward_ns"] for s in stats.values())
    head = ["op", "fwd calls", "fwd total ms", "fwd mean us", "bwd calls", "bwd total ms", "bwd mean us", "share %"]
    rows = []
    order = sorted(stats.items(), key=lambda kv: -(kv[1]["forward_ns"] + kv[1]["backward_ns"]))
    for name, s in order:
        fc, bc = s["forward_calls"], s["backward_calls"]
        rows.append(
            [
                name,
                str(fc),
                _ms(s["forward_ns"]),
                _us(s["forward_ns"] / fc) if fc else "-",
                str(bc),
                _ms(s["backward_ns"]),
                _us(s["backward_ns"] / bc) if bc else "-",
                f"{100 * (s['forward_ns'] + s['backward_ns']) / total:.1f}" if total else "-",
            ]
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    wall = (time.perf_counter_ns() - session.t0) / 1e6
    out.append(f"op time (self, host clock): {_ms(total)} ms over {len(stats)} ops; session wall time {wall:.3f} ms")
    for name, s in spans.items():
        out.append(f"{name}: {s['calls']} call(s), {_ms(s['total_ns'])} ms total")
    if not events:
        out.append("no ops ran while profiling")
    return "\n".join(out)


def _chrome_trace(events: list, session: _Session) -> dict[str, Any]:
    pid = os.getpid()
    t0 = session.t0
    trace: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "gputape"}},
    ]
    for tid in sorted({e[5] for e in events}):
        trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}})
    for name, cat, t, dur, self_ns, tid in events:
        trace.append(
            {
                "name": name,
                "cat": cat,
                "ph": "X",
                "ts": (t - t0) / 1e3,
                "dur": dur / 1e3,
                "pid": pid,
                "tid": tid,
                "args": {"self_us": self_ns / 1e3},
            }
        )
    return {
        "traceEvents": trace,
        "displayTimeUnit": "ms",
        "otherData": {"producer": "gputape.profiler", "start_unix_time": session.start_wall},
    }
