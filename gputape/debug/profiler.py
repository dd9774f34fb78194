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

Zero cost when off beyond what every op pays already: the session is the process-wide entry
of :mod:`gputape.core.state` (``_state.profiler``, set by :func:`start`), read by the op path
(:mod:`gputape.core.dispatch`) only once ``_state.anywhere`` said something observes, and by the
sweep and ``GradientTape.gradient``/``jacobian``/``batch_jacobian`` once per call. Nothing is
swapped: every primitive is profiled, also those registered after :func:`start`, and forward
calls (``forward``), VJPs (``backward``), ``custom_gradient`` forwards and VJPs (events named
``custom_gradient:<function name>``) and whole ``gradient`` calls (``tape``) are timed where
they run. A session sees every thread (each thread's events carry its own ``tid``); it is
process-wide, not on a thread's observer stack, because a profile covers all threads.
A ``gt.function`` replay runs generated code, not the ops: it is timed as a whole only.

**Device time.** On a GPU the host clock measures kernel *launches*. With
device timing on (the default when a CUDA GPU answers; ``device_timing=`` of
:func:`start`), each op call that touches a GPU array is bracketed by a pair of
CUDA events recorded on the current stream: no synchronisation per op; at
:func:`stop` they are synchronized and resolved. The summary then adds device
columns (self time, like the host ones) and the trace a ``device`` timeline
beside the host threads, placed by each event's offset from one event recorded
at :func:`start`. Kernel counts per op are not reported: CuPy has no public
per-launch hook to count them without a driver-level profiler.

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

import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import state as _obs
from ..core.state import defer_interrupts
from ..core.tensor import Tensor
from ..devices import backend

__all__ = ["CudaEvents", "ProfileResult", "is_active", "profile", "start", "stop"]

_lock = threading.Lock()
_state: _Session | None = None


class CudaEvents:
    """Device clock: CUDA events on the current stream (cupy through gputape.devices.backend).

    ``applies(args)`` says whether a call touches a GPU array (only those are bracketed);
    ``record()`` records one event now, in stream order; ``elapsed_ns(a, b)`` is the device
    time between two recorded events, valid once ``synchronize(b)`` returned. The profiler
    synchronizes on every end event, at :func:`stop` only. Any object with these four methods can stand in
    (the tests run the whole device path on the CPU with a fake one).
    """

    def __init__(self) -> None:
        cp = backend.cupy_module()
        if cp is None:
            raise RuntimeError("gt.profiler: device timing needs CuPy, which is not installed")
        self._event = cp.cuda.Event
        self._elapsed = cp.cuda.get_elapsed_time

    def applies(self, args: tuple) -> bool:
        for a in args[:3]:  # fwd(xp, x, ...), cpu(x, y), vjp(F, g, needs, ...): the arrays come first
            if isinstance(a, (list, tuple)):  # a multi-output cotangent, or custom_gradient's (f, args)
                a = next((b for b in a if b is not None), None)
            if isinstance(a, Tensor):
                a = a._data
            if a is not None and hasattr(a, "__cuda_array_interface__"):
                return True
        return False

    def record(self) -> Any:
        e = self._event()
        e.record()
        return e

    def synchronize(self, event: Any) -> None:
        event.synchronize()

    def elapsed_ns(self, a: Any, b: Any) -> int:
        return round(self._elapsed(a, b) * 1e6)  # CuPy answers in milliseconds


def _device_clock(device_timing: Any) -> Any:
    """The device clock a session uses: None (host only), CUDA events, or a clock passed in."""
    if device_timing is None:
        return CudaEvents() if backend.cupy_module() is not None and backend.gpu_available() else None
    if device_timing is False:
        return None
    if device_timing is True:
        reason = backend.cuda_unavailable_reason()
        if reason is not None:
            raise RuntimeError(
                f"gt.profiler.start(device_timing=True): no CUDA device to time ({reason}); "
                "pass device_timing=None (on when a GPU answers) or False"
            )
        return CudaEvents()
    for m in ("applies", "record", "synchronize", "elapsed_ns"):
        if not callable(getattr(device_timing, m, None)):
            raise TypeError(
                f"gt.profiler.start: device_timing must be None, True, False or a clock with "
                f"applies/record/synchronize/elapsed_ns methods (like gt.profiler.CudaEvents); got "
                f"{type(device_timing).__name__} without {m}()"
            )
    return device_timing


class _Frame(threading.local):
    def __init__(self) -> None:
        self.child_ns: list[int] = []  # per open event: time spent in nested events
        self.open: list[int] = []  # the ids of this thread's open events (the last is the parent)


class _Session:
    """One profiling run: the events recorded so far (the op path calls :meth:`call`)."""

    def __init__(self, logdir: str | None, device: Any = None) -> None:
        self.logdir = logdir
        self.device = device
        self.t0 = time.perf_counter_ns()
        self.start_wall = time.time()
        self.device_t0 = device.record() if device is not None else None  # the device timeline's zero
        # (name, cat, start_ns, dur_ns, self_ns, tid, event id, parent id or 0) per event
        self.events: list[tuple[str, str, int, int, int, int, int, int]] = []
        self.device_pairs: dict[int, tuple[Any, Any]] = {}  # event id -> (start event, end event)
        self.frames = _Frame()
        self.ids = itertools.count(1)

    def call(self, name: str, cat: str, fn: Callable[..., Any], args: tuple, kwargs: dict | None = None) -> Any:
        """``fn(*args, **kwargs)``, timed as event ``name`` of category ``cat``."""
        frames = self.frames
        stack = frames.child_ns
        stack.append(0)
        opened = frames.open
        eid = self.ids.__next__()
        parent = opened[-1] if opened else 0
        opened.append(eid)
        device = self.device
        start = device.record() if device is not None and device.applies(args) else None
        clock = time.perf_counter_ns
        t = clock()
        try:
            return fn(*args, **kwargs) if kwargs else fn(*args)
        finally:
            dur = clock() - t
            if start is not None:
                self.device_pairs[eid] = (start, device.record())
            opened.pop()
            inner = stack.pop()
            if stack:
                stack[-1] += dur
            self.events.append((name, cat, t, dur, dur - inner, threading.get_native_id(), eid, parent))

    def device_times(self) -> tuple[dict[int, int], dict[int, int]]:
        """Resolve the CUDA event pairs (synchronized here): event id -> offset from start, and -> duration, in ns."""
        pairs = self.device_pairs
        if not pairs:
            return {}, {}
        dev = self.device
        # every end event, not just the latest id: an outer event (a gradient() span) ends after
        # its children, and other threads may record on other streams; once the first wait is
        # over the others return at once
        for _, end in pairs.values():
            dev.synchronize(end)
        offset = {eid: dev.elapsed_ns(self.device_t0, a) for eid, (a, b) in pairs.items()}
        dur = {eid: dev.elapsed_ns(a, b) for eid, (a, b) in pairs.items()}
        return offset, dur


class ProfileResult:
    """What :func:`stop` returns: file paths, per-op statistics and the summary text.

    ``stats[op]`` has ``forward_calls``, ``forward_ns``, ``backward_calls``,
    ``backward_ns`` (host self times, nanoseconds) and, for calls that were device
    timed, ``forward_device_calls``, ``forward_device_ns``, ``backward_device_calls``,
    ``backward_device_ns`` (device self times; 0 without device timing).
    ``device_timed`` says whether any call was. ``str(result)`` is the summary.
    """

    def __init__(
        self,
        trace_path: str | None,
        summary_path: str | None,
        stats: dict,
        summary: str,
        n_events: int,
        device_timed: bool = False,
    ):
        self.trace_path = trace_path
        self.summary_path = summary_path
        self.stats = stats
        self.summary = summary
        self.n_events = n_events
        self.device_timed = device_timed

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


def start(logdir: str | os.PathLike | None, device_timing: Any = None) -> None:
    """Start profiling every registered op; results go to ``logdir`` at :func:`stop`.

    ``logdir`` is created if needed; ``None`` keeps the results in memory
    only (:func:`stop` still returns them). One session at a time: a second
    ``start`` raises ``RuntimeError``. ``device_timing``: ``None`` (default)
    times GPU work with CUDA events when a CUDA GPU answers, ``True`` requires
    it (``RuntimeError`` without one), ``False`` keeps to the host clock; a
    clock object like :class:`CudaEvents` is used as given.

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
        session = _Session(d, _device_clock(device_timing))
        # the session and the op path's entry change together, or neither: a Ctrl-C is held
        # until both are stored, and then undoes them (start() raised: nothing is profiling)
        try:
            with defer_interrupts():
                _state = session
                _obs.set_profiler(session)
        except BaseException:
            with defer_interrupts():
                _obs.set_profiler(None)
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
        with defer_interrupts():
            _obs.set_profiler(None)
            _state = None
    events = list(session.events)
    offsets, device = session.device_times()
    stats, spans = _aggregate(events, device)
    summary = _summary_text(stats, spans, events, session, bool(device))
    trace_path = summary_path = None
    if session.logdir is not None:
        trace_path = os.path.join(session.logdir, "trace.json")
        summary_path = os.path.join(session.logdir, "summary.txt")
        with open(trace_path, "w") as f:
            json.dump(_chrome_trace(events, session, offsets, device), f)
        with open(summary_path, "w") as f:
            f.write(summary + "\n")
    result = ProfileResult(trace_path, summary_path, stats, summary, len(events), bool(device))
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

    def __init__(
        self, logdir: str | os.PathLike | None, print_summary: bool = False, device_timing: Any = None
    ) -> None:
        self.logdir = logdir
        self.print_summary = print_summary
        self.device_timing = device_timing
        self.result: ProfileResult | None = None

    def __enter__(self) -> profile:
        start(self.logdir, self.device_timing)
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


def _device_self(events: list, device: dict[int, int]) -> dict[int, int]:
    """Device self time per timed event: its duration less its device-timed children's."""
    own = dict(device)
    for e in events:
        eid, parent = e[6], e[7]
        if eid in device and parent in own:
            own[parent] -= device[eid]
    return own


def _aggregate(events: list, device: dict[int, int] | None = None) -> tuple[dict[str, dict[str, int]], dict]:
    ops: dict[str, dict[str, int]] = {}
    spans: dict[str, dict[str, int]] = {}
    own = _device_self(events, device) if device else {}
    for name, cat, _t, dur, self_ns, _tid, eid, _parent in events:
        if cat == "tape":
            s = spans.setdefault(name, {"calls": 0, "total_ns": 0})
            s["calls"] += 1
            s["total_ns"] += dur
            continue
        s = ops.get(name)
        if s is None:
            s = ops[name] = {k: 0 for k in _STAT_KEYS}
        s[f"{cat}_calls"] += 1
        s[f"{cat}_ns"] += self_ns
        if eid in own:
            s[f"{cat}_device_calls"] += 1
            s[f"{cat}_device_ns"] += own[eid]
    return ops, spans


_STAT_KEYS = tuple(
    f"{cat}_{what}" for cat in ("forward", "backward") for what in ("calls", "ns", "device_calls", "device_ns")
)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f}"


def _summary_text(stats: dict, spans: dict, events: list, session: _Session, device: bool = False) -> str:
    total = sum(s["forward_ns"] + s["backward_ns"] for s in stats.values())
    dev_total = sum(s["forward_device_ns"] + s["backward_device_ns"] for s in stats.values())
    head = ["op", "fwd calls", "fwd total ms", "fwd mean us", "bwd calls", "bwd total ms", "bwd mean us", "share %"]
    if device:
        head += ["fwd device ms", "bwd device ms", "device share %"]
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
        if device:
            dev = s["forward_device_ns"] + s["backward_device_ns"]
            rows[-1] += [
                _ms(s["forward_device_ns"]) if s["forward_device_calls"] else "-",
                _ms(s["backward_device_ns"]) if s["backward_device_calls"] else "-",
                f"{100 * dev / dev_total:.1f}" if dev_total else "-",
            ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    wall = (time.perf_counter_ns() - session.t0) / 1e6
    out.append(f"op time (self, host clock): {_ms(total)} ms over {len(stats)} ops; session wall time {wall:.3f} ms")
    if device:
        out.append(f"op time (self, device clock: CUDA events): {_ms(dev_total)} ms")
    for name, s in spans.items():
        out.append(f"{name}: {s['calls']} call(s), {_ms(s['total_ns'])} ms total")
    if not events:
        out.append("no ops ran while profiling")
    return "\n".join(out)


DEVICE_TID = 0x7FFF0000  # the device timeline's row in the trace (no OS thread has this id)


def _chrome_trace(
    events: list, session: _Session, offsets: dict[int, int] | None = None, device: dict[int, int] | None = None
) -> dict[str, Any]:
    pid = os.getpid()
    t0 = session.t0
    trace: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "gputape"}},
    ]
    for tid in sorted({e[5] for e in events}):
        trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}})
    if device:
        trace.append(
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": DEVICE_TID, "args": {"name": "device (CUDA events)"}}
        )
        own = _device_self(events, device)
        # the device row starts where the host clock stood when the session's first event was recorded
        for name, cat, _t, _dur, _self_ns, tid, eid, _parent in events:
            if eid in device:
                trace.append(
                    {
                        "name": name,
                        "cat": f"{cat}.device",
                        "ph": "X",
                        "ts": offsets[eid] / 1e3,
                        "dur": device[eid] / 1e3,
                        "pid": pid,
                        "tid": DEVICE_TID,
                        "args": {"self_us": own[eid] / 1e3, "host_tid": tid},
                    }
                )
    for name, cat, t, dur, self_ns, tid, _eid, _parent in events:
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
        "otherData": {"producer": "gputape.debug.profiler", "start_unix_time": session.start_wall},
    }
