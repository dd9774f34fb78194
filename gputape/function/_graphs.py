"""CUDA-graph replay of a ``gt.function`` record (and its CPU emulation for tests)."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import backend
from .. import expr as _expr
from ..ops import raw_namespace
from ..tensor import Variable
from ._codegen import (
    _Const,
    _fusable,
    _last_reads,
    _Link,
    _made,
    _Slot,
    _slots_in,
    _Step,
    compose,
    fused_kernel_source,
)
from ._trace import _Trace

_log = logging.getLogger("gputape")
_FUSE_MAX = 16  # steps per kernel: each array operand is a kernel parameter
_FUSED_KERNELS: dict[tuple[str, int], Any] = {}


class _Segment:
    __slots__ = ("capture", "end", "graph", "ins", "live_outs", "start", "var_reads")

    def __init__(self, start: int, end: int, capture: bool) -> None:
        self.start, self.end, self.capture = start, end, capture
        self.graph: Any = None
        self.var_reads: list[tuple[int, Variable]] = []  # done on the host before the launch
        self.ins: list[int] = []  # slots read in the segment, made before it
        self.live_outs: list[int] = []  # slots made in the segment and read after it


class _GraphRunner:
    """Replays a record on the GPU as CUDA graphs between the steps a graph cannot hold.

    CuPy refuses cuBLAS calls during stream capture, and host work (optimizer
    bookkeeping, random draws, variable reads) cannot be captured, so the record
    is cut into segments: runs of device-only steps become one graph each; the
    rest run as ordinary launches in between. A graph reads and writes fixed
    addresses, so every value that crosses into a graph lives in a buffer this
    runner owns ("static"): arguments and host-step results are copied into it
    on each call, graph results are read from it, and returned values are
    copied out. Call 1 after the trace runs eagerly (kernels compile, pools
    fill); call 2 captures; later calls launch. A step that fails to capture
    is moved out of the graphs and the segments are captured anew.
    """

    def __init__(self, trace: _Trace, arg_slots: list[int], out_refs: list[Any], backend_: Any) -> None:
        self.backend = backend_
        self.steps = list(trace.steps)
        self.consts = list(trace.consts)
        gemm = getattr(backend_, "gemm", None)
        if gemm is not None:
            self._capturable_gemms(gemm)
        self.fused_chains: list[list[tuple]] = []  # the templates of each fused chain
        if getattr(backend_, "fuse", False):
            self._fuse_backward(arg_slots, out_refs)
        self.nslots = trace.nslots
        self.arg_slots = arg_slots
        self.out_refs = out_refs
        self.calls = 0
        self.transfers: list[int] | None = None  # host<->device copies of the latest call
        self.host_only: set[int] = {i for i, st in enumerate(self.steps) if st.kind != "device"}
        self.returned = set(_slots_in(out_refs))
        n = len(self.steps)
        self.last = _last_reads(self.steps)
        for k in self.returned:
            self.last[k] = n
        self.dead_after: list[list[int]] = [[] for _ in range(n)]
        for i, st in enumerate(self.steps):
            for k in _made(st.outs):
                if k not in self.last:
                    self.dead_after[i].append(k)
        for k, i in self.last.items():
            if i < n:
                self.dead_after[i].append(k)
        self.dead_args = [k for k in arg_slots if k not in self.last]
        self.captures = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._plan()

    def _capturable_gemms(self, gemm: Any) -> None:
        """Matrix products through a capturable GEMM (gputape.cublas): they join the graphs."""
        from ..ops.linalg import _matmul

        F_gemm: dict[int, Any] = {}
        for i, (fn, refs, outs, kind) in enumerate(self.steps):
            if kind != "host:matmul":
                continue
            if isinstance(fn, functools.partial) and fn.func is _matmul.fwd:
                self.steps[i] = _Step(gemm.matmul, refs, outs, "device")
            elif fn is _matmul.vjp and type(refs[0]) is _Const:  # refs[0]: the VJP's F (see _Trace._vjp)
                F = self.consts[refs[0].k]
                if id(F) not in F_gemm:
                    ns = types.SimpleNamespace(**vars(F))
                    ns.matmul = gemm.matmul
                    self.consts.append(ns)
                    F_gemm[id(F)] = _Const(len(self.consts) - 1)
                self.steps[i] = _Step(fn, [F_gemm[id(F)], *refs[1:]], outs, "device")

    def _fuse_backward(self, arg_slots: list[int], out_refs: list[Any]) -> None:
        """Chains of elementwise VJP steps, each feeding only the next, become one generated kernel.

        A chain is cut where a cotangent has a second reader, where a reduction or
        cast to an input's shape follows, or at a primitive without a derivative
        expression (gputape.expr). The fused step sits where the chain's last step was; every
        input it reads is made earlier, so moving the first steps later is safe.
        """
        steps = self.steps
        readers: dict[int, list[int]] = {}
        for i, st in enumerate(steps):
            for k in _slots_in(st.refs or ()):
                readers.setdefault(k, []).append(i)
        for k in _slots_in(out_refs):
            readers.setdefault(k, []).append(len(steps))
        links: dict[int, _Link] = {}
        for i, st in enumerate(steps):
            link = _fusable(st, self.consts)
            if link is not None:
                links[i] = link
        nxt: dict[int, int] = {}  # link -> the link that alone reads its cotangent
        for i, link in links.items():
            r = readers.get(link.out, [])
            if len(r) == 1 and r[0] in links and links[r[0]].g == link.out:
                nxt[i] = r[0]
        heads = sorted(set(nxt) - set(nxt.values()))
        drop: set[int] = set()
        for h in heads:
            chain = [h]
            while chain[-1] in nxt:
                chain.append(nxt[chain[-1]])
            for start in range(0, len(chain), _FUSE_MAX):
                part = chain[start : start + _FUSE_MAX]
                if len(part) < 2:
                    continue
                fn, refs, names = self._fused_step([links[i] for i in part])
                steps[part[-1]] = _Step(fn, refs, links[part[-1]].out, "device")
                drop.update(part[:-1])
                self.fused_chains.append(names)
        if drop:
            self.steps = [st for i, st in enumerate(steps) if i not in drop]

    def _fused_step(self, links: list[_Link]) -> tuple[Any, list, list[tuple]]:
        expr, nparams = compose([link.template for link in links])
        params = [r for link in links for r in link.operands]  # the kernel's inputs after g
        kernel = self.backend.elementwise(expr, nparams)
        return kernel, [_Slot(links[0].g), *params], [link.template for link in links]

    # planning
    def _plan(self) -> None:
        segs: list[_Segment] = []
        for i, st in enumerate(self.steps):
            # A variable read launches nothing and no device step changes a variable, so a
            # read inside a run of device steps is done before that run's graph: it does not
            # cut the graph in two.
            cap = i not in self.host_only or (st.kind == "var" and bool(segs) and segs[-1].capture)
            if segs and segs[-1].capture == cap:
                segs[-1].end = i + 1
            else:
                segs.append(_Segment(i, i + 1, cap))
            if cap and st.kind == "var":
                segs[-1].var_reads.append((st.outs, st.fn))
        made_in: dict[int, int] = {k: -1 for k in self.arg_slots}
        for si, seg in enumerate(segs):
            for i in range(seg.start, seg.end):
                st = self.steps[i]
                for k in _made(st.outs):
                    made_in[k] = -1 if st.kind == "var" and seg.capture else si
        for si, seg in enumerate(segs):
            if not seg.capture:
                continue
            ins: set[int] = set()
            for i in range(seg.start, seg.end):
                for k in _slots_in(self.steps[i].refs or ()):
                    if made_in.get(k, -1) != si:
                        ins.add(k)
            seg.ins = sorted(ins)
            seg.live_outs = sorted(k for k, where in made_in.items() if where == si and self.last.get(k, -1) >= seg.end)
        self.segments = segs
        self.static: dict[int, Any] = {}

    # running
    def _resolve(self, r: Any, env: list) -> Any:
        t = type(r)
        if t is _Slot:
            return env[r.k]
        if t is _Const:
            return self.consts[r.k]
        if r is None:
            return None
        return [self._resolve(e, env) for e in r.items]

    def _exec(self, seg: _Segment, env: list, capturing: bool = False, graph: bool = False) -> None:
        """Run the segment's steps; ``graph``: as a graph does (variables were read before it)."""
        steps = self.steps
        for i in range(seg.start, seg.end):
            fn, refs, outs, kind = steps[i]
            if kind == "var":
                if not graph:
                    env[outs] = fn._data
            else:
                if capturing:
                    self._current = i
                    self.backend.before_capture_step(i, fn)
                res = fn(*[self._resolve(r, env) for r in refs])
                if isinstance(outs, int):
                    env[outs] = res
                elif outs is not None:
                    for k, o in zip(outs, res):
                        if k is not None:
                            env[k] = o
            for k in self.dead_after[i]:
                env[k] = None

    def __call__(self, *arrays: Any) -> tuple:
        with self._lock:  # one call at a time: the graphs share their buffers
            before = backend.thread_transfers()  # this thread's copies: the call's own, exactly
            out = self._call(arrays)
            self.transfers = [n - m for n, m in zip(backend.thread_transfers(), before)]
            return out

    def _call(self, arrays: tuple) -> tuple:
        b = self.backend
        env: list[Any] = [None] * self.nslots
        for k, a in zip(self.arg_slots, arrays):
            env[k] = a
        for k in self.dead_args:
            env[k] = None
        eager = self.calls == 0  # the first replay compiles kernels and fills the pools
        self.calls += 1
        replan = False
        static = self.static
        with b.on_stream():
            for seg in self.segments:
                if not seg.capture or eager:
                    self._exec(seg, env)
                    continue
                for k, var in seg.var_reads:
                    env[k] = var._data
                for k in seg.ins:
                    st = static.get(k)
                    v = env[k]
                    if st is None:
                        # buffers of our own: the caller's arrays, variables' arrays (which
                        # others may share) and host results are copied in on every call
                        st = static[k] = b.own(v)
                    elif v is not st:
                        b.copy(st, v)
                    env[k] = st
                if seg.graph is None and not self._capture(seg, env):
                    eager = replan = True  # the segment ran without a graph; so does the rest of this call
                    continue
                b.launch(seg.graph)
                for k in seg.live_outs:
                    env[k] = static[k]
                end = seg.end
                for k in seg.ins:
                    if self.last.get(k, -1) < end:
                        env[k] = None
            out = []
            for r in self.out_refs:
                v = self._resolve(r, env)
                if type(r) is _Slot and static.get(r.k) is v:
                    v = b.own(v)  # the next call overwrites the graph's buffer
                out.append(v)
        if replan:
            self._plan()  # without the refused step; the next call captures anew
        return tuple(out)

    def _capture(self, seg: _Segment, env: list) -> bool:
        b = self.backend
        self._current = seg.start
        ins = [(k, env[k]) for k in seg.ins]
        try:
            seg.graph = b.capture(lambda: self._exec(seg, env, capturing=True, graph=True), self, seg)
        except Exception as exc:
            bad = self._current
            self.failures.append(f"step {bad} ({_step_name(self.steps[bad].fn)}): {type(exc).__name__}: {exc}")
            _log.debug("gt.function: CUDA graph capture refused %s", self.failures[-1])
            self.host_only.add(bad)
            for k, v in ins:
                env[k] = v
            self._exec(seg, env)  # nothing of the segment ran: run it now
            return False
        self.captures += 1
        for k in seg.live_outs:
            self.static[k] = env[k]
        return True

    def emulated_launch(self, seg: _Segment) -> None:
        """CPU tests: a "graph" recomputes its segment from the captured buffers into them."""
        env: list[Any] = [None] * self.nslots
        for k in seg.ins:
            env[k] = self.static[k]
        self._exec(seg, env, graph=True)
        for k in seg.live_outs:
            np.copyto(self.static[k], env[k])


_TRANSFER_KEYS = ("host_to_device", "host_to_device_bytes", "device_to_host", "device_to_host_bytes")


def _step_name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


class _CudaGraphs:
    """The real backend: a private non-blocking stream and memory pool per compiled signature."""

    def __init__(self, device: str, capture_gemm: bool, fuse: bool) -> None:
        cp = backend.cupy_module()
        self.cp = cp
        with cp.cuda.Device(backend.device_index(device)):
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.pool = cp.cuda.MemoryPool()  # graph buffers: nothing else allocates from it
        self.device = device
        self.gemm = None
        if capture_gemm:
            from .. import cublas

            self.gemm = cublas.gemm_for(backend.device_index(device))
        self.fuse = fuse

    def elementwise(self, expr: _expr.Expr, nparams: int) -> Any:
        """The generated kernel ``out = expr`` (cached by expression; CuPy specialises it per
        dtype and broadcast layout and caches that too)."""
        key = (_expr.cuda(expr), nparams)
        k = _FUSED_KERNELS.get(key)
        if k is None:
            k = self.cp.ElementwiseKernel(
                *fused_kernel_source(expr, nparams, len(_FUSED_KERNELS)), preamble=_expr.CUDA_PRELUDE
            )
            _FUSED_KERNELS[key] = k
        return k

    @contextlib.contextmanager
    def on_stream(self) -> Any:
        cp = self.cp
        caller = cp.cuda.get_current_stream()
        self.stream.wait_event(caller.record())  # the caller's writes to the inputs come first
        try:
            with self.stream:
                yield
        finally:
            caller.wait_event(self.stream.record())  # and the caller sees the results

    def before_capture_step(self, i: int, fn: Any) -> None:
        pass

    def capture(self, run: Callable[[], None], runner: _GraphRunner, seg: _Segment) -> Any:
        cp = self.cp
        with cp.cuda.using_allocator(self.pool.malloc):
            self.stream.begin_capture()
            try:
                run()
            except BaseException:
                try:
                    self.stream.end_capture()
                except Exception:
                    pass
                raise
            return self.stream.end_capture()

    def launch(self, graph: Any) -> None:
        graph.launch(stream=self.stream)

    def copy(self, dst: Any, src: Any) -> None:
        self.cp.copyto(dst, src)

    def own(self, a: Any) -> Any:
        return a.copy()


class _EmulatedGraphs:
    """CPU stand-in for tests: same buffers and copies; a "graph" recomputes into the captured buffers."""

    def __init__(self, refuse: Callable[[Any], bool] | None = None, gemm: bool = False, fuse: bool = False) -> None:
        self.refuse = refuse
        self.launches = 0
        self.gemm = types.SimpleNamespace(matmul=np.matmul) if gemm else None
        self.fuse = fuse  # (off by default: the fused numpy evaluation is not bitwise eager's)

    def elementwise(self, expr: _expr.Expr, nparams: int) -> Any:
        # the same expression the CUDA kernel computes, evaluated with numpy
        code = compile(_expr.python(expr), "<fused vjp>", "eval")
        F = raw_namespace(np)

        def run(g: Any, *ps: Any) -> Any:
            env = {"F": F, "g": g, **{f"p{i}": p for i, p in enumerate(ps)}}
            return np.asarray(eval(code, env), dtype=g.dtype)

        return run

    def on_stream(self) -> Any:
        return contextlib.nullcontext()

    def before_capture_step(self, i: int, fn: Any) -> None:
        if self.refuse is not None and self.refuse(fn):
            raise RuntimeError("emulated capture refusal")

    def capture(self, run: Callable[[], None], runner: _GraphRunner, seg: _Segment) -> Any:
        run()  # (a real capture runs nothing: the launch that follows does the work)
        return functools.partial(runner.emulated_launch, seg)

    def launch(self, graph: Any) -> None:
        self.launches += 1
        graph()

    def copy(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    def own(self, a: Any) -> Any:
        return np.array(a, copy=True)
