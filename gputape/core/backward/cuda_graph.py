"""The compiled backward of a GPU tape, replayed as one CUDA graph (issue 15, deliverable 1 on a GPU).

On a GPU an eager step is launch-bound: each elementwise launch costs CuPy 8-13 us of host
time, each matrix product about 20, and the backward is about half of a step's launches. So
when :mod:`gputape.core.backward.compiled` has a compiled backward for a tape on CuPy arrays, this
module captures that function, once, into a CUDA graph (its matrix products through
:mod:`gputape.devices.cublas`, which a capture can hold) and replays the graph on later tapes of the same
structure: one launch instead of dozens.

A graph reads and writes fixed device addresses, so what it may be replayed on is checked on
every call, never assumed:

* **Reads from outside.** The capture records every array the function reads that it did not
  make (each visited node's saved residuals and array parameters, and the seeds) as (device
  pointer, shape, strides, dtype), and every other value it reads (a node's parameters, a saved
  Python number) by value. A later tape replays the graph only when every record matches: the
  same pointer, shape, strides and dtype on a live array mean that the memory the graph reads is
  that tape's data. Anything else runs the compiled function eagerly (counted by reason:
  ``address``, ``layout``, ``value``).
* **Recapture.** After :data:`RECAPTURE_AFTER` mismatching calls since its capture (consecutive
  or not: a residual that alternates between two blocks mismatches every other call) the
  structure is captured again at the new addresses, at most :data:`MAX_CAPTURES` times in all.
  The first recapture reads in place (the pool may have settled after its first steps); from
  the second on, every array whose address ever changed while its layout did not (a batch
  sliced from a device-resident data set, a residual that is also the user's variable) is read
  from a buffer of the graph's own, copied in before each launch (one device copy each), so
  that the usual causes of a mismatch stop being mismatches.
* **Outputs.** The gradients the graph writes live in its private memory pool; each replay
  copies them out into fresh arrays (the next replay overwrites the graph's). A gradient that
  is a view of an input (a seed passed through) is copied inside the graph.
* **Never held.** The capture keeps no reference to the arrays it read (holding them would stop
  the memory pool from handing their blocks to the next step's forward, and so any match).

On the host, a replay does what the generated code does there: a non-persistent tape's visited
nodes become their residual-free skeletons (``explain()`` after ``gradient()`` keeps working),
all at once after the launch rather than node by node (the graph's temporaries live in its own
pool, allocated at capture).

It applies exactly where a compiled backward runs (higher order, ``check_numerics``, a
``gt.function`` trace or the profiler take the sweep before it) and is refused for good, by
reason (logged at debug), for a structure whose capture fails (a host synchronisation, a call
cuBLAS or CuPy cannot capture), that holds a ``custom_gradient`` node (its grad_fn is Python run
at capture time, reading what it likes) or a value it cannot compare. The first hit runs the
capture's own form of the function eagerly (kernels compiled, cuBLAS warmed); the second
captures and launches. Switch, off by default until a GPU run has checked this module:
``gt.config.set_backward_graphs`` (``GPUTAPE_BACKWARD_GRAPHS=1``); ``GradientTape(compile=False)``
opts a tape out with the compiled backward itself. Counters:
``gt.debug.backward_cache_report()["graphs"]``.

CPU tests install :class:`EmulatedGraphs` (see :func:`emulate`): numpy tapes then take this path,
an array's "pointer" is its numpy address, a capture runs the function and poisons its outputs,
and a launch runs it again into the captured output buffers after asserting that every array it
reads sits where it sat at capture (where a real graph would read stale memory).

>>> import gputape as gt
>>> sorted(gt.debug.backward_cache_report()["graphs"])
['captures', 'eager', 'enabled', 'held', 'recaptures', 'refused', 'replays']
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ... import config
from ...devices import backend
from ..primitive import Node

_log = logging.getLogger("gputape")
_ndarray = np.ndarray

CACHE_SIZE = 16  # structures with a graph entry kept (least recently used dropped: each holds a memory pool)
RECAPTURE_AFTER = 3  # mismatching calls since the capture before a structure is captured at the new addresses
MAX_CAPTURES = 6  # captures per structure, the first included; past it, mismatches stay eager

_counts = {"captures": 0, "recaptures": 0, "replays": 0}
_eager: dict[str, int] = {}  # calls on this path that ran the compiled function eagerly, by reason
_refused: dict[str, int] = {}  # structures marked graph-less for good, by reason
_entries: OrderedDict[Callable[..., tuple], _Entry] = OrderedDict()  # by compiled backward
_lock = threading.Lock()
_emulation: Any = None  # tests: the backend numpy tapes replay on (see emulate())
_backends: dict[int, Any] = {}  # device index -> _CudaGraphs


class _RefusedError(Exception):
    """This structure cannot be replayed as a graph (the message is the counted reason)."""


class _Copied:
    """The record of an input read from the graph's own buffer: only its shape and dtype must match."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype

    def __eq__(self, other: object) -> bool:
        return type(other) is _Copied and other.shape == self.shape and other.dtype == self.dtype

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))


class _Graph:
    """One capture: the backend's handle, what it reads, its output buffers, the nodes it visits."""

    __slots__ = ("alias", "backend", "check", "copied", "expect", "handle", "outs", "places", "visited")

    def __init__(self) -> None:
        self.backend: Any = None
        self.handle: Any = None
        self.places: list[tuple] = []  # where each read is: ("S", j), (p, k) for n.saved[k], (p, "params")
        self.expect: list[Any] = []  # the record of each place at capture
        self.check: Callable[[list, list], bool] = lambda N, S: False  # expect, as generated straight-line tests
        self.copied: dict[tuple, Any] = {}  # place -> the graph's own buffer it is read from
        self.outs: list[Any] = []  # the graph's output buffers (None: no gradient)
        self.alias: set[int] = set()  # outputs that were views of inputs: copied inside the graph
        self.visited: tuple[int, ...] = ()  # node positions the function reads, last first


class _Entry:
    __slots__ = ("captures", "fn", "graph", "lock", "misses", "moved", "pending", "refused", "visited")

    def __init__(self, fn: Callable[..., tuple]) -> None:
        self.fn = fn
        self.lock = threading.Lock()
        self.visited: tuple[int, ...] | None = None  # set by the first (eager) run: the nodes it reads
        self.graph: _Graph | None = None
        self.refused = False
        self.misses = 0  # mismatching calls since the capture
        self.pending: set[tuple] = set()  # places whose address (not layout) changed since the capture
        self.moved: set[tuple] = set()  # places that ever moved: copied in from the second recapture on
        self.captures = 0


def run(fn: Callable[..., tuple], tape: Any, seeds: list) -> tuple:
    """``fn(tape._nodes, seeds)``, from a CUDA graph of ``fn`` when the tape is on a GPU and may replay it.

    ``fn`` is the compiled backward of the tape's structure: one function per structure, so it
    keys the graph (hashing it is free, where the structural key is a long tuple).
    """
    s0 = seeds[0] if seeds else None
    if type(s0) is _ndarray:  # (the CPU's hot path: one test)
        if _emulation is None:
            return fn(tape._nodes, seeds)
        b = _emulation
    elif backend.is_gpu_array(s0):
        b = _backend_for(s0)
    else:
        return fn(tape._nodes, seeds)
    if not config._backward_graphs:
        return _eager_run("disabled", fn, tape, seeds)
    if b is None:
        return _eager_run("graphless", fn, tape, seeds)
    entry = _entries.get(fn)
    if entry is None:
        entry = _Entry(fn)
        _remember(fn, entry)
    else:
        with contextlib.suppress(KeyError):  # another thread dropped it meanwhile
            _entries.move_to_end(fn)
    if entry.refused:
        return _eager_run("graphless", fn, tape, seeds)
    if not entry.lock.acquire(blocking=False):  # another thread replays this graph (its buffers are shared)
        return _eager_run("busy", fn, tape, seeds)
    try:
        return _run(entry, b, fn, tape, seeds)
    finally:
        entry.lock.release()


def _eager_run(why: str, fn: Callable[..., tuple], tape: Any, seeds: list) -> tuple:
    _eager[why] = _eager.get(why, 0) + 1
    return fn(tape._nodes, seeds)


def _run(entry: _Entry, b: Any, fn: Callable[..., tuple], tape: Any, seeds: list) -> tuple:
    nodes = tape._nodes
    g = entry.graph
    if g is None:
        if entry.visited is None:  # kernels compiled, cuBLAS loaded, before anything is captured
            return _warmup(entry, b.graph_form(fn), tape, seeds)
        return _capture(entry, b, fn, tape, seeds)
    why = _mismatch(g, b, nodes, seeds, entry.pending)
    if why is None:
        return _replay(g, b, tape, seeds)
    entry.misses += 1
    if entry.misses >= RECAPTURE_AFTER and entry.captures < MAX_CAPTURES:
        _counts["recaptures"] += 1
        return _capture(entry, b, fn, tape, seeds)
    return _eager_run(why, fn, tape, seeds)


def _warmup(entry: _Entry, form: Callable[..., tuple], tape: Any, seeds: list) -> tuple:
    """Run the capture's form eagerly, on the tape's nodes moved into a list that records which it reads.

    Which nodes a compiled backward visits is fixed by its structure, except behind the tests
    of VJPs that may return None at run time (``custom_gradient``'s: refused here, before it runs).
    """
    nodes = tape._nodes
    if any(n.prim.name.startswith("custom_gradient") for n in nodes):
        return _refuse(entry, "custom_gradient", entry.fn, tape, seeds)
    _eager["warmup"] = _eager.get("warmup", 0) + 1
    seen = _Visits(nodes)
    nodes.clear()  # (the moved list holds the only references: residuals are freed as the function drops them)
    try:
        out = form(seen, seeds)
    finally:
        nodes.extend(list.__iter__(seen))  # with the skeletons the function left, on a non-persistent tape
    entry.visited = tuple(sorted(seen.read, reverse=True))
    return out


def _mismatch(g: _Graph, b: Any, nodes: list, seeds: list, pending: set) -> str | None:
    """None when the graph reads exactly this tape's data, else why not (places that moved go to ``pending``)."""
    if g.check(nodes, seeds):
        return None
    cur = _records(g.places, g.copied, b, nodes, seeds)
    if cur == g.expect:
        return None
    why = None
    for place, c, e in zip(g.places, cur, g.expect):
        if c == e:
            continue
        if type(c) is tuple and type(e) is tuple and len(c) == len(e) == 5 and c[0] is _ARRAY and e[0] is _ARRAY:
            if c[2:] == e[2:]:
                pending.add(place)  # same layout elsewhere: read from a buffer of the graph's at the recapture
                why = why or "address"
                continue
            why = "layout"
        elif why != "layout":
            why = "value"
    return why or "value"


_ARRAY = "array"


def _records(places: list, copied: dict, b: Any, nodes: list, seeds: list) -> list:
    out = []
    for place in places:
        p, k = place
        try:
            if p == "S":
                v = seeds[k]
            else:
                n = nodes[p]
                v = n.params if k == "params" else n.saved[k]
        except (IndexError, AttributeError):  # not the structure it was: no record can match
            out.append(_MISSING)
            continue
        try:
            out.append(_Copied(v.shape, v.dtype) if place in copied and b.is_array(v) else _record(b, v))
        except _RefusedError:  # (this tape's value is beyond comparison: not the capture's)
            out.append(_MISSING)
    return out


_MISSING = ("missing",)
_SCALARS = (int, str, bool, type(None), type(Ellipsis))


def _record(b: Any, v: Any) -> Any:
    """What a read of ``v`` depends on: an array's pointer and layout, any other value itself."""
    if b.is_array(v):
        return (_ARRAY, b.pointer(v), v.shape, v.strides, v.dtype)
    t = type(v)
    if t in _SCALARS or isinstance(v, (np.dtype, type)):
        return (t, v)
    if t is float or t is complex or isinstance(v, np.generic):
        return (t, repr(v))  # (repr: -0.0 is not 0.0 and nan is nan, for a product's bits)
    if isinstance(v, (tuple, list)):  # (TensorShape included)
        return (t, tuple(_record(b, e) for e in v))
    if t is dict:
        return (t, tuple((k, _record(b, e)) for k, e in v.items()))
    if t is slice:
        return (t, _record(b, v.start), _record(b, v.stop), _record(b, v.step))
    if isinstance(v, np.ndarray):
        raise _RefusedError("host_array")  # read from host memory by a GPU graph: a copy a capture cannot hold
    slots = getattr(t, "__slots__", None)
    if slots is not None and not hasattr(v, "__dict__"):  # a small value object (getitem's index operand)
        return (t, tuple(_record(b, getattr(v, s, None)) for s in ((slots,) if type(slots) is str else slots)))
    raise _RefusedError(f"unsupported_value:{t.__name__}")


def _checker(g: _Graph, b: Any, nodes: list) -> Callable[[list, list], bool]:
    """``g.expect == _records(...)`` as generated straight-line tests (the check runs on every call).

    True only when every record matches; False sends the call to the slow comparison, which
    also says why. A value it has no quick test for is compared through its record.
    """
    ns: dict[str, Any] = {"REC": functools.partial(_record, b), "ARR": b.array_type, "PTR": b.pointer}
    lines = ["def check(N, S):", "    try:"]
    emit = lambda text: lines.append("        " + text)
    empty = _record(b, {})
    node = None
    for i, (place, e) in enumerate(zip(g.places, g.expect)):
        p, k = place
        if p == "S":
            emit(f"v = S[{k}]")
        else:
            if p != node:
                node = p
                emit(f"n = N[{p}]")
                emit("s = n.saved")
                emit(f"if len(s) != {len(nodes[p].saved)}: return False")
            emit("v = n.params" if k == "params" else f"v = s[{k}]")
        if type(e) is _Copied:
            ns[f"D{i}"] = e.dtype  # (dtype: `is` first, numpy's dtypes being shared instances)
            emit(
                f"if type(v) is not ARR or v.shape != {e.shape!r} or (v.dtype is not D{i} and v.dtype != D{i}):"
                " return False"
            )
        elif type(e) is tuple and len(e) == 5 and e[0] is _ARRAY:
            ns[f"D{i}"] = e[4]
            emit(
                f"if type(v) is not ARR or {b.pointer_source('v')} != {e[1]} or v.shape != {e[2]!r}"
                f" or v.strides != {e[3]!r} or (v.dtype is not D{i} and v.dtype != D{i}): return False"
            )
        elif e == empty:
            emit("if type(v) is not dict or v: return False")
        else:
            ns[f"E{i}"] = e
            emit(f"if REC(v) != E{i}: return False")
    emit("return True")
    lines += ["    except Exception:", "        return False"]
    exec(compile("\n".join(lines) + "\n", "<gputape graph check>", "exec"), ns)
    return ns["check"]


def _remember(fn: Callable[..., tuple], entry: _Entry) -> None:
    with _lock:
        _entries[fn] = entry
        while len(_entries) > max(int(CACHE_SIZE), 0):
            _, old = _entries.popitem(last=False)
            _drop(old)


def _drop(entry: _Entry) -> None:
    g = entry.graph
    entry.graph = None
    if g is not None:
        g.backend.release(g.handle)


# -- capture and replay ---------------------------------------------------------------------------


class _Visits(list):
    """The node list the first run reads: records which positions the function reads."""

    def __init__(self, nodes: list) -> None:
        super().__init__(nodes)
        self.read: set[int] = set()

    def __getitem__(self, p: Any) -> Any:
        if type(p) is int:
            self.read.add(p % len(self))
        else:  # (a slice, or whatever the generated code may do: every node it could reach)
            self.read.update(range(len(self)))
        return list.__getitem__(self, p)

    def __iter__(self) -> Iterator[Any]:
        self.read.update(range(len(self)))
        return list.__iter__(self)


def _clone(n: Node, saved: tuple) -> Node:
    """``n`` reading ``saved`` (the graph's own buffers in place of some residuals)."""
    c = Node.__new__(Node)
    for s in Node.__slots__:
        with contextlib.suppress(AttributeError):  # (a slot a recorder left unset)
            setattr(c, s, getattr(n, s))
    c.saved = saved
    return c


def _substitute(nodes: list, seeds: list, copied: dict) -> tuple[list, list]:
    """The nodes and seeds with each copied place replaced by the graph's buffer."""
    if not copied:
        return nodes, seeds
    nodes, seeds = list(nodes), list(seeds)
    per: dict[int, dict[int, Any]] = {}
    for (p, k), buf in copied.items():
        if p == "S":
            seeds[k] = buf
        else:
            per.setdefault(p, {})[k] = buf
    for p, bufs in per.items():
        n = nodes[p]
        nodes[p] = _clone(n, tuple(bufs.get(k, v) for k, v in enumerate(n.saved)))
    return nodes, seeds


def _capture(entry: _Entry, b: Any, fn: Callable[..., tuple], tape: Any, seeds: list) -> tuple:
    nodes = tape._nodes
    old = entry.graph
    # The first recapture reads in place at the new addresses (the pool may have settled after
    # its first steps); from the second on, every place that ever moved is copied in.
    entry.moved |= entry.pending
    moved = set(entry.moved) if entry.captures >= 2 else set()
    if old is not None:
        moved |= set(old.copied)
    _drop(entry)
    entry.misses = 0
    entry.pending.clear()
    entry.captures += 1
    g = _Graph()
    g.backend = b
    try:
        g.visited = visited = entry.visited
        g.places = [("S", j) for j in range(len(seeds))]
        for p in sorted(visited):
            n = nodes[p]
            g.places.extend((p, k) for k in range(len(n.saved)))
            if n.params is not None:
                g.places.append((p, "params"))
        for place in g.places:  # refuses what it cannot compare, before anything is captured
            _record(b, _at(place, nodes, seeds))
        form = b.graph_form(fn)
        with b.capturing() as cap:
            for place in g.places:
                v = _at(place, nodes, seeds)
                if place in moved and b.is_array(v):
                    g.copied[place] = b.own(v)  # (from the graph's pool, filled before the capture)
            run_nodes, run_seeds = _substitute(nodes, seeds, g.copied)
            g.expect = _records(g.places, g.copied, b, run_nodes, run_seeds)
            g.check = _checker(g, b, nodes)
            extents = [_extent(b, _at(place, run_nodes, run_seeds)) for place in g.places]

            def body(N: list, S: list) -> list:
                outs = list(form(list(N), S))  # (a copy: the tape's list keeps its nodes until the launch ran)
                if body.alias is None:
                    body.alias = {i for i, o in enumerate(outs) if o is not None and _overlaps(b, o, extents)}
                for i in body.alias:
                    outs[i] = b.copy_of(outs[i])
                return outs

            body.alias = None  # type: ignore[attr-defined]
            g.outs = cap.run(body, run_nodes, run_seeds, g.places)
        g.alias = body.alias  # type: ignore[attr-defined]
        g.handle = cap.handle
    except _RefusedError as exc:
        return _refuse(entry, str(exc), fn, tape, seeds)
    except Exception as exc:  # a host synchronisation, a call a capture cannot hold: never this structure again
        _log.debug("gputape: the compiled backward's CUDA graph capture failed: %s: %s", type(exc).__name__, exc)
        return _refuse(entry, f"capture_failed:{type(exc).__name__}", fn, tape, seeds)
    entry.graph = g
    _counts["captures"] += 1
    return _replay(g, b, tape, seeds)


def _refuse(entry: _Entry, why: str, fn: Callable[..., tuple], tape: Any, seeds: list) -> tuple:
    entry.refused = True
    _drop(entry)
    _refused[why] = _refused.get(why, 0) + 1
    return _eager_run("graphless", fn, tape, seeds)


def _at(place: tuple, nodes: list, seeds: list) -> Any:
    p, k = place
    if p == "S":
        return seeds[k]
    n = nodes[p]
    return n.params if k == "params" else n.saved[k]


def _extent(b: Any, v: Any) -> tuple[int, int] | None:
    """The byte range an array spans (strides may be negative or zero)."""
    if not b.is_array(v) or v.size == 0:
        return None
    lo = hi = b.pointer(v)
    for d, s in zip(v.shape, v.strides):
        if s < 0:
            lo += (d - 1) * s
        else:
            hi += (d - 1) * s
    return lo, hi + v.itemsize


def _overlaps(b: Any, o: Any, extents: list) -> bool:
    e = _extent(b, o)
    if e is None:
        return False
    return any(x is not None and x[0] < e[1] and e[0] < x[1] for x in extents)


def _replay(g: _Graph, b: Any, tape: Any, seeds: list) -> tuple:
    nodes = tape._nodes
    copies = [(buf, _at(place, nodes, seeds)) for place, buf in g.copied.items()]
    out = b.replay(g.handle, copies, g.outs, lambda: _substitute(nodes, seeds, g.copied))
    _counts["replays"] += 1
    if not tape._persistent:  # the generated code's host work: skeletons (the residuals are freed with them)
        for p in g.visited:
            nodes[p] = nodes[p].swept()
    return out


# -- backends --------------------------------------------------------------------------------------


def _backend_for(a: Any) -> Any:
    i = a.device.id
    b = _backends.get(i)
    if b is None:
        try:
            b = _CudaGraphs(i)
        except Exception as exc:  # (no CUDA graphs in this CuPy: every structure stays eager)
            _log.debug("gputape: CUDA graphs for the compiled backward unavailable: %s", exc)
            b = False
        _backends[i] = b
    return b or None


class _CudaGraphs:
    """One device's capture stream and the capturable GEMM; each graph gets a memory pool of its own."""

    def __init__(self, device_index: int) -> None:
        from ...devices import cublas

        cp = backend.cupy_module()
        self.cp = cp
        self.index = device_index
        with cp.cuda.Device(device_index):
            self.stream = cp.cuda.Stream(non_blocking=True)
        self.gemm = cublas.gemm_for(device_index)
        self.array_type = cp.ndarray

    def is_array(self, v: Any) -> bool:
        return isinstance(v, self.cp.ndarray)

    @staticmethod
    def pointer(v: Any) -> int:
        return v.data.ptr

    @staticmethod
    def pointer_source(name: str) -> str:
        return f"{name}.data.ptr"

    def graph_form(self, fn: Callable[..., tuple]) -> Callable[..., tuple]:
        """``fn`` with its matrix products through the capturable GEMM (its VJP namespace ``F`` rebound).

        Without the GEMM (or an ``F`` to rebind) it is ``fn``: CuPy's matmul then refuses the capture.
        """
        F = getattr(fn, "__globals__", {}).get("F")
        if self.gemm is None or F is None:
            return fn
        ns = types.SimpleNamespace(**vars(F))
        ns.matmul = self.gemm.matmul
        return types.FunctionType(
            fn.__code__, {**fn.__globals__, "F": ns}, fn.__name__, fn.__defaults__, fn.__closure__
        )

    @contextlib.contextmanager
    def capturing(self) -> Iterator[Any]:
        cp = self.cp
        cap = _CudaCapture(self, cp.cuda.MemoryPool())
        with cp.cuda.Device(self.index), self._on_stream(), cp.cuda.using_allocator(cap.pool.malloc):
            yield cap

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        caller = self.cp.cuda.get_current_stream()
        self.stream.wait_event(caller.record())  # the forward's writes to what the graph reads come first
        try:
            with self.stream:
                yield
        finally:
            caller.wait_event(self.stream.record())  # and the caller's next kernels (and frees) after the graph

    def replay(self, handle: Any, copies: list, outs: list, memory: Callable[[], Any]) -> tuple:
        """Copy the moved inputs in, launch, and copy the outputs out (on the caller's stream, its pool)."""
        cp = self.cp
        with cp.cuda.Device(self.index):
            with self._on_stream():
                for buf, src in copies:
                    cp.copyto(buf, src)
                handle[0].launch(stream=self.stream)
            return tuple(None if o is None else o.copy() for o in outs)

    def release(self, handle: Any) -> None:
        if handle is not None:
            self.stream.synchronize()  # (a launch in flight still writes the pool's memory)

    def own(self, v: Any) -> Any:
        return v.copy()

    def copy_of(self, v: Any) -> Any:
        return v.copy()


class _CudaCapture:
    __slots__ = ("b", "handle", "pool")

    def __init__(self, b: _CudaGraphs, pool: Any) -> None:
        self.b, self.pool, self.handle = b, pool, None

    def run(self, body: Callable[..., list], nodes: list, seeds: list, places: list) -> list:
        s = self.b.stream
        s.begin_capture()
        try:
            outs = body(nodes, seeds)
        except BaseException:
            with contextlib.suppress(Exception):
                s.end_capture()
            raise
        self.handle = (s.end_capture(), self.pool)  # the pool lives as long as the graph that writes it
        return outs


class EmulatedGraphs:
    """CPU stand-in for CUDA graphs, for tests: numpy tapes replay through it (see :func:`emulate`).

    An array's pointer is its numpy address. A capture runs the function (a real one runs nothing)
    and fills its float outputs with NaN, so a result that no launch wrote shows. A launch
    asserts that every array it reads sits where it sat at capture, with the same layout (a
    real graph would read whatever is there now), runs the function again and copies its
    results into the captured output buffers. ``refuse(nodes)`` true makes a capture fail.

    >>> from gputape.core.backward import cuda_graph as bg
    >>> a = np.zeros(3)
    >>> bg.EmulatedGraphs.pointer(a[1:]) - bg.EmulatedGraphs.pointer(a) == a.itemsize
    True
    """

    def __init__(self, refuse: Callable[[list], bool] | None = None) -> None:
        self.refuse = refuse
        self.launches = 0
        self.captures = 0
        self.released = 0

    array_type = np.ndarray

    def is_array(self, v: Any) -> bool:
        return isinstance(v, np.ndarray)

    @staticmethod
    def pointer(v: Any) -> int:
        return v.__array_interface__["data"][0]

    @staticmethod
    def pointer_source(name: str) -> str:
        return f"PTR({name})"

    def graph_form(self, fn: Callable[..., tuple]) -> Callable[..., tuple]:
        return fn

    @contextlib.contextmanager
    def capturing(self) -> Iterator[Any]:
        yield _EmulatedCapture(self)

    def replay(self, handle: Any, copies: list, outs: list, memory: Callable[[], tuple[list, list]]) -> tuple:
        body, places, reads, bufs = handle
        for buf, src in copies:
            np.copyto(buf, src)
        nodes, seeds = memory()
        for place, want in zip(places, reads):
            v = _at(place, nodes, seeds)
            if want is not None:
                got = (self.pointer(v), v.shape, v.strides, v.dtype)
                assert got == want, f"emulated graph: {place} is not where it was captured: {got} != {want}"
        for buf, r in zip(bufs, body(nodes, seeds)):
            if buf is not None:
                np.copyto(buf, r)
        self.launches += 1
        return tuple(None if o is None else np.array(o, copy=True) for o in outs)

    def release(self, handle: Any) -> None:
        self.released += 1

    def own(self, v: Any) -> Any:
        return np.array(v, copy=True)

    def copy_of(self, v: Any) -> Any:
        return np.array(v, copy=True)


class _EmulatedCapture:
    def __init__(self, b: EmulatedGraphs) -> None:
        self.b, self.handle = b, None

    def run(self, body: Callable[..., list], nodes: list, seeds: list, places: list) -> list:
        b = self.b
        if b.refuse is not None and b.refuse(nodes):
            raise RuntimeError("emulated capture refusal")
        reads = []
        for place in places:
            v = _at(place, nodes, seeds)
            reads.append((b.pointer(v), v.shape, v.strides, v.dtype) if b.is_array(v) else None)
        outs = [None if o is None else np.array(o, copy=True) for o in body(nodes, seeds)]
        for o in outs:
            if o is not None and o.dtype.kind in "fc":
                o.fill(np.nan)  # written by the launch, or wrong
        self.handle = (body, places, reads, outs)
        b.captures += 1
        return outs


def emulate(graphs: EmulatedGraphs | None) -> EmulatedGraphs | None:
    """Tests: replay numpy tapes' compiled backwards through ``graphs`` (None: stop); the previous one.

    >>> from gputape.core.backward import cuda_graph as bg
    >>> was = bg.emulate(bg.EmulatedGraphs()); bg.emulate(was) is not None
    True
    """
    global _emulation
    was, _emulation = _emulation, graphs
    clear()
    return was


# -- the user's view -------------------------------------------------------------------------------


def report() -> dict[str, Any]:
    """The graph replay's counters (``backward_cache_report()["graphs"]``).

    ``captures`` (recaptures included), ``recaptures`` (captures at new addresses after
    :data:`RECAPTURE_AFTER` mismatching calls), ``replays`` (gradients a graph computed),
    ``eager``: calls on a GPU that ran the compiled function without a graph, by reason
    (``warmup``, the first hit; ``address``/``layout``/``value``, a mismatch; ``graphless``, a
    refused structure; ``busy``, another thread was replaying it; ``disabled``, the switch is off),
    ``refused``: structures marked graph-less, by reason; ``held``: structures with an entry;
    ``enabled``: the switch.
    """
    return {
        **_counts,
        "eager": dict(_eager),
        "refused": dict(_refused),
        "held": len(_entries),
        "enabled": config._backward_graphs,
    }


def clear() -> None:
    """Drop every graph and zero the counters (``gt.debug.clear_backward_cache`` calls it)."""
    with _lock:
        for e in _entries.values():
            _drop(e)
        _entries.clear()
        for k in _counts:
            _counts[k] = 0
        _eager.clear()
        _refused.clear()
