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

from ..core import expr as _expr
from ..core.state import defer_interrupts
from ..core.tensor import Variable
from ..devices import backend
from ..ops import raw_namespace
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
from ._trace import _OptimizerStep, _Trace

_log = logging.getLogger("gputape")
_FUSE_MAX = 16  # steps per kernel: each array operand is a kernel parameter
_FUSED_KERNELS: dict[tuple[str, int], Any] = {}


class _Segment:
    __slots__ = (
        "arg_ins",
        "capture",
        "end",
        "graph",
        "ins",
        "live_outs",
        "loose_reads",
        "opts",
        "start",
        "var_reads",
        "variables",
    )

    def __init__(self, start: int, end: int, capture: bool) -> None:
        self.start, self.end, self.capture = start, end, capture
        self.graph: Any = None
        self.var_reads: list[tuple[int, Variable]] = []  # done on the host before the launch
        self.ins: list[int] = []  # slots read in the segment, made before it
        self.arg_ins: list[int] = []  # those of them that are not variables (copied into buffers)
        self.live_outs: list[int] = []  # slots made in the segment and read after it
        # (variable, updated in the graph, its slots): read and updated in the runner's buffer for it
        self.variables: list[tuple[Variable, bool, list[int]]] = []
        self.opts: list[int] = []  # the optimizer steps it holds (their host halves run before the launch)
        self.loose_reads: list[tuple[int, Variable]] = []  # variable reads only later segments use


class _GraphOptimizer:
    """An optimizer step a CUDA graph holds: the one fused launch, reading step count and rate on the device.

    Outside a graph (a call that runs eagerly, a refused capture) it is the recorded
    step, unchanged: ``Optimizer._apply_live``, all or nothing. In a graph it is split:

    * the host half, before each launch: :meth:`prepare` computes the step number and
      its learning rate (a schedule's error raises here, before anything changed), then
      :meth:`commit`, with Ctrl-C held through the launch that follows, advances
      ``iterations``, writes the rate to the device only when it changed and the device
      step count only when it is not the host's (both asynchronous);
    * the device half, captured: FusedOptimizer's kernel at a frozen parity plus the
      one-thread sync that leaves the count in both ping-pong slots (``capture_update``).

    A Ctrl-C during the host half is held until the launch has been issued and the
    updated variables' new arrays stored, so the step is taken whole (count, slots and
    variables) or, when it arrives before, not at all; a launch itself is all or nothing.
    Its arguments are the gradients, then the variables' slots (``"param"`` steps: the
    runner's buffers for the variables, see ``_GraphRunner._bind_variables``).
    """

    def __init__(self, step: _OptimizerStep) -> None:
        self.step = step
        self.opt = step.opt
        self.kind = step.opt._graph_kind()
        self.variables = step.variables
        self.n = len(step.variables)
        self.fused: Any = None
        self.parity = 0
        self.slots: list[tuple[Any, Any]] = []
        self.keep: list[Any] = []  # what the captured launch reads besides its arguments
        self.ids: list[int] = []  # the variables' arrays captured (emulation: a replay must be given these)

    def __call__(self, *arrays: Any) -> list[Any]:
        return self.step(*arrays[: self.n])

    def _grads(self, arrays: tuple) -> tuple[list[Any], list[Any]]:
        n = self.n
        return list(arrays[:n]), list(arrays[n:])

    def before_capture(self) -> None:
        # before the capture begins: state made now (a fresh fused optimizer's step counter,
        # zero slots) must not be made by kernels the graph would record and rerun
        self.fused, self.slots = self.opt._graph_state(self.variables)
        self.parity = self.fused._parity

    def capture(self, backend_: Any, *arrays: Any) -> list[Any]:
        grads, params = self._grads(arrays)
        self.ids = [id(a) for a in params]
        self.keep = backend_.capture_optimizer(self.fused, params, grads, self.slots)
        return params

    def finish_capture(self, backend_: Any) -> None:
        backend_.finish_optimizer(self.fused, self.keep)

    def replay(self, *arrays: Any) -> list[Any]:
        """Emulated graphs: what the captured launch does, on the buffers it captured."""
        grads, params = self._grads(arrays)
        if [id(a) for a in params] != self.ids:  # (its gradients are made inside the graph: new each time here)
            raise AssertionError("emulated graph: the optimizer step was replayed on variables it did not capture")
        self.fused.replay_update_ref(params, grads, self.slots)
        return params

    def still_fits(self) -> bool:
        """False once the optimizer was changed so that the kernel cannot do its update (clipping set)."""
        return self.opt._graph_kind() == self.kind

    def prepare(self) -> tuple[int, float]:
        return self.opt._graph_prepare()

    def commit(self, prepared: tuple[int, float], copy: Callable[[Any, Any], None]) -> int:
        return self.opt._graph_commit(self.fused, self.parity, prepared, self.variables, self.slots, copy)


class _GraphRunner:
    """Replays a record on the GPU as CUDA graphs between the steps a graph cannot hold.

    CuPy refuses cuBLAS calls during stream capture (matrix products join the
    graphs through gputape.devices.cublas), and host work (random draws, Python steps)
    cannot be captured, so the record is cut into segments: runs of device-only
    steps become one graph each; the rest run as ordinary launches in between.
    Variable reads and the host half of an optimizer update the fused kernel can
    do (``_GraphOptimizer``) run before their graph's launch and do not cut it.
    A graph reads and writes fixed addresses: arguments and host-step results are
    copied into buffers this runner owns ("static") on each call, variables are
    read and updated in buffers of the runner's too (``_bind_variables``; a variable
    an optimizer updates in the graph gets a new array, a copy of its buffer, after
    each launch: ``_publish_variables``), graph results are read from the buffers,
    and returned values are copied out. Call 1 after the
    trace runs eagerly (kernels compile, pools fill); call 2 captures; later calls
    launch. A step that fails to capture is moved out of the graphs and the
    segments are captured anew.
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
        self.returned = set(_slots_in(out_refs))
        self._optimizers_in_graphs()
        self.arg_slots = arg_slots
        self.out_refs = out_refs
        self.calls = 0
        self.transfers: list[int] | None = None  # host<->device copies of the latest call
        self.copies = [0, 0, 0, 0]  # the latest call's device copies: _COPY_KEYS
        self.var_buf: dict[int, Any] = {}  # id(variable) -> the runner's buffer the graphs read and update
        # id(variable) -> the variable's array whose value its buffer holds. Held, so identity means
        # the same value: a published array is never written (a new one is another object).
        self.var_src: dict[int, Any] = {}
        self.host_only: set[int] = {i for i, st in enumerate(self.steps) if st.kind not in ("device", "opt")}
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

    def _optimizers_in_graphs(self) -> None:
        """Optimizer steps whose update the fused kernel can do become graph steps (``_GraphOptimizer``).

        Each is preceded by one ``"param"`` step per variable: the variable's value, read
        as the graphs read variables (before the launch, into the runner's buffer for it),
        which the captured kernel updates in place; the variable then gets a copy of it.
        Left as host steps: optimizers without a fused kind (or clipping, which needs host
        norms), variables not on the graphs' kind of device, an optimizer
        recorded twice in one call (each launch would need its own host half), a variable
        updated by two of them, and steps whose results are read later.
        """
        if not getattr(self.backend, "optimizer", False):
            return  # gt.function(optimizer_in_graph=False), the default on a GPU until a GPU run checks it
        steps = self.steps
        seen_opts: dict[int, int] = {}
        for st in steps:
            if type(st.fn) is _OptimizerStep:
                seen_opts[id(st.fn.opt)] = seen_opts.get(id(st.fn.opt), 0) + 1
        last = _last_reads(steps)
        for k in self.returned:
            last[k] = len(steps)
        reads: dict[int, list[tuple[int, int]]] = {}  # id(variable) -> (step, slot) of its reads
        for j, st in enumerate(steps):
            if st.kind == "var":
                reads.setdefault(id(st.fn), []).append((j, st.outs))
        on_gpu = not isinstance(self.backend, _EmulatedGraphs)
        updated: set[int] = set()
        out: list[_Step] = []
        for i, st in enumerate(steps):
            fn = st.fn
            graph_kind = getattr(fn.opt, "_graph_kind", None) if type(fn) is _OptimizerStep else None
            if (
                graph_kind is None
                or graph_kind() is None
                or seen_opts[id(fn.opt)] != 1
                or any(id(v) in updated for v in fn.variables)
                or any(k in last for k in _made(st.outs))
                # a value read before the update and used after it: the in-place update would change it
                or any(j < i < last.get(k, -1) for v in fn.variables for j, k in reads.get(id(v), ()))
                or any(backend.is_gpu_array(v._data) != on_gpu for v in fn.variables)
            ):
                out.append(st)
                continue
            updated.update(id(v) for v in fn.variables)
            ks = []
            for v in fn.variables:
                k = self.nslots
                self.nslots += 1
                out.append(_Step(v, None, k, "param"))
                ks.append(_Slot(k))
            out.append(_Step(_GraphOptimizer(fn), [*st.refs, *ks], None, "opt"))
        self.steps = out

    def _capturable_gemms(self, gemm: Any) -> None:
        """Matrix products through a capturable GEMM (gputape.devices.cublas): they join the graphs."""
        from ..ops.matmul import _matmul

        F_gemm: dict[int, Any] = {}
        for i, (fn, refs, outs, kind) in enumerate(self.steps):
            if kind != "host:matmul":
                continue
            if fn is _matmul.cpu or (isinstance(fn, functools.partial) and fn.func is _matmul.fwd):
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
        expression (gputape.core.expr). The fused step sits where the chain's last step was; every
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
        steps = self.steps
        segs: list[_Segment] = []
        updated: set[int] = set()  # variables an optimizer step of the open capture segment updates
        for i, st in enumerate(steps):
            kind = st.kind
            # A variable read launches nothing and no device step changes a variable, so a
            # read inside a run of device steps is done before that run's graph: it does not
            # cut the graph in two. Except after an optimizer step in the graph updated it:
            # the read must see the new value, so it waits for the launch.
            # A read just before a graph joins it too, when only reads come in between.
            if kind == "var" and id(st.fn) in updated and segs[-1].capture:
                cap = False
            elif kind == "var" or kind == "param":  # (a "param" comes just before its optimizer step)
                j = i
                while j < len(steps) and steps[j].kind in ("var", "param"):
                    j += 1
                cap = (kind == "var" and bool(segs) and segs[-1].capture) or (
                    j < len(steps) and j not in self.host_only
                )
            else:
                cap = i not in self.host_only
            if segs and segs[-1].capture == cap:
                segs[-1].end = i + 1
            else:
                segs.append(_Segment(i, i + 1, cap))
                updated = set()
            if cap and kind in ("var", "param"):
                segs[-1].var_reads.append((st.outs, st.fn))
            if cap and kind == "opt":
                segs[-1].opts.append(i)
                updated.update(id(v) for v in st.fn.variables)
        made_in: dict[int, int] = {k: -1 for k in self.arg_slots}
        for si, seg in enumerate(segs):
            for i in range(seg.start, seg.end):
                st = steps[i]
                for k in _made(st.outs):
                    made_in[k] = -1 if st.kind in ("var", "param") and seg.capture else si
        # a variable's slot: the array the graphs read it at, in every segment that reads the slot
        var_slots = {k: var for seg in segs if seg.capture for k, var in seg.var_reads}
        for si, seg in enumerate(segs):
            if not seg.capture:
                continue
            ins: set[int] = set()
            for i in range(seg.start, seg.end):
                for k in _slots_in(steps[i].refs or ()):
                    if made_in.get(k, -1) != si:
                        ins.add(k)
            seg.ins = sorted(ins)
            seg.live_outs = sorted(k for k, where in made_in.items() if where == si and self.last.get(k, -1) >= seg.end)
            by_var: dict[int, tuple[Variable, bool, list[int]]] = {}
            written = {id(v) for i in seg.opts for v in steps[i].fn.variables}
            for k in seg.ins:
                var = var_slots.get(k)
                if var is not None:
                    by_var.setdefault(id(var), (var, id(var) in written, []))[2].append(k)
            seg.variables = list(by_var.values())
            seg.arg_ins = [k for k in seg.ins if k not in var_slots]
            seg.loose_reads = [(k, v) for k, v in seg.var_reads if k not in ins and self.last.get(k, -1) >= seg.end]
        self.var_slots = var_slots
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
            if kind == "var" or kind == "param":
                if not graph and kind == "var":  # (a "param" feeds only its "opt" step's graph form)
                    env[outs] = fn._data
            else:
                if capturing:
                    self._current = i
                    self.backend.before_capture_step(i, fn)
                args = [self._resolve(r, env) for r in refs]
                if kind == "opt" and graph:
                    res = fn.capture(self.backend, *args) if capturing else fn.replay(*args)
                else:
                    res = fn(*args)
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
        copies = self.copies = [0, 0, 0, 0]
        with b.on_stream():
            for seg in self.segments:
                if not seg.capture or eager:
                    self._exec(seg, env)
                    continue
                self._bind_variables(seg, env)
                for k, var in seg.loose_reads:
                    env[k] = var._data
                for k in seg.arg_ins:
                    st = static.get(k)
                    v = env[k]
                    if st is None:
                        # buffers of our own: the caller's arrays and host results are copied
                        # in on every call (once each)
                        st = static[k] = b.own(v)
                        copies[0] += 1
                    elif v is not st:
                        b.copy(st, v)
                        copies[0] += 1
                    env[k] = st
                opts = [self.steps[i].fn for i in seg.opts]
                if not all(o.still_fits() for o in opts):  # the update moves out of the graphs
                    self.host_only.update(i for i, o in zip(seg.opts, opts) if not o.still_fits())
                    self._exec(seg, env)
                    eager = replan = True
                    continue
                if seg.graph is None and not self._capture(seg, env):
                    eager = replan = True  # the segment ran without a graph; so does the rest of this call
                    continue
                if opts:
                    prepared = [o.prepare() for o in opts]  # raises before anything changed
                    news = [(var, b.empty_like(self.var_buf[id(var)])) for var, updated, _ in seg.variables if updated]
                    # the optimizers' host halves, the launch and the variables' new values: all or none
                    with defer_interrupts():
                        for o, p in zip(opts, prepared):
                            copies[2] += o.commit(p, b.copy)
                        b.launch(seg.graph)
                        self._publish_variables(news)
                else:
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
                if type(r) is _Slot and v is not None and (static.get(r.k) is v or r.k in self.var_slots):
                    v = b.own(v)  # the next call overwrites the graph's buffer (or updates the variable)
                    copies[3] += 1
                out.append(v)
        if replan:
            self._plan()  # without the refused step; the next call captures anew
        return tuple(out)

    def _bind_variables(self, seg: _Segment, env: list) -> None:
        """Before a launch: each variable's value in the runner's buffer for it, copied in when it changed.

        The graphs bake in addresses, and a variable's published array is never written (a
        tape, a tensor or another thread may hold it: gputape's rule for every update), so
        the graphs read and update variables in buffers of the runner's own, never published.
        A buffer is copied into (one device copy) only when the variable's array is not the
        one whose value it holds: after an assign, ``set_state``, an update outside the graphs.
        After the graphs' own update the variable holds a copy of the buffer
        (:meth:`_publish_variables`): no copy in on the next call.
        """
        b = self.backend
        vb, src = self.var_buf, self.var_src
        for var, _updated, ks in seg.variables:
            key = id(var)
            now = var._data
            buf = vb.get(key)
            if buf is None:
                buf = vb[key] = b.own(now)
                src[key] = now
                self.copies[1] += 1
            elif src[key] is not now:
                b.copy(buf, now)
                src[key] = now
                self.copies[1] += 1
            for k in ks:
                env[k] = buf

    def _publish_variables(self, news: list[tuple[Variable, Any]]) -> None:
        """After a launch that updated variables: each gets a new array, a copy of its buffer.

        ``news`` holds the new arrays, allocated before the launch (so nothing here can fail):
        the copies are enqueued after the launch on the graphs' stream and each variable's
        array is one reference store. The cost of the rule: one device copy of each variable
        the graphs update, per call.
        """
        b = self.backend
        for var, new in news:
            key = id(var)
            b.copy(new, self.var_buf[key])
            var._data = new
            self.var_src[key] = new
            self.copies[1] += 1

    def _capture(self, seg: _Segment, env: list) -> bool:
        b = self.backend
        self._current = seg.start
        ins = [(k, env[k]) for k in seg.ins]
        for i in seg.opts:
            self.steps[i].fn.before_capture()
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
        for i in seg.opts:
            self.steps[i].fn.finish_capture(b)
        for k in seg.live_outs:
            self.static[k] = env[k]
        return True

    def emulated_launch(self, seg: _Segment) -> None:
        """CPU tests: a "graph" recomputes its segment from the captured buffers into them."""
        env: list[Any] = [None] * self.nslots
        var_slots, vb = self.var_slots, self.var_buf
        for k in seg.ins:
            var = var_slots.get(k)
            env[k] = self.static[k] if var is None else vb[id(var)]
        self._exec(seg, env, graph=True)
        for k in seg.live_outs:
            np.copyto(self.static[k], env[k])


_TRANSFER_KEYS = ("host_to_device", "host_to_device_bytes", "device_to_host", "device_to_host_bytes")
# device-to-device copies of a call: into argument buffers, of variables (into their buffers when
# their arrays changed, out into new arrays after an update), into an optimizer's captured slot
# arrays, and results copied out of the graphs
_COPY_KEYS = ("arguments", "variables", "optimizer_slots", "results")


def _step_name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


class _CudaGraphs:
    """The real backend: a private non-blocking stream and memory pool per compiled signature."""

    def __init__(self, device: str, capture_gemm: bool, fuse: bool, optimizer: bool = False) -> None:
        cp = backend.cupy_module()
        self.cp = cp
        self.optimizer = optimizer  # the fused optimizer update inside the graphs (_GraphOptimizer)
        with cp.cuda.Device(backend.device_index(device)):
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.pool = cp.cuda.MemoryPool()  # graph buffers: nothing else allocates from it
        self.device = device
        self.gemm = None
        if capture_gemm:
            from ..devices import cublas

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

    def capture_optimizer(self, fused: Any, params: list, grads: list, slots: list) -> list:
        return fused.capture_update(params, grads, slots)

    def finish_optimizer(self, fused: Any, keep: list) -> None:
        fused.finish_capture(keep)

    def copy(self, dst: Any, src: Any) -> None:
        self.cp.copyto(dst, src)

    def own(self, a: Any) -> Any:
        return a.copy()

    def empty_like(self, a: Any) -> Any:
        return self.cp.empty_like(a)  # (CuPy's default pool: a variable's array outlives the graphs)


class _EmulatedGraphs:
    """CPU stand-in for tests: same buffers and copies; a "graph" recomputes into the captured buffers."""

    def __init__(self, refuse: Callable[[Any], bool] | None = None, gemm: bool = False, fuse: bool = False) -> None:
        self.refuse = refuse
        self.launches = 0
        self.gemm = types.SimpleNamespace(matmul=np.matmul) if gemm else None
        self.fuse = fuse  # (off by default: the fused numpy evaluation is not bitwise eager's)
        self.optimizer = True  # the logic of the optimizer inside the graphs, tested here

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

    def capture_optimizer(self, fused: Any, params: list, grads: list, slots: list) -> list:
        return []  # (a real capture records the launch; the emulated launch runs _GraphOptimizer.replay)

    def finish_optimizer(self, fused: Any, keep: list) -> None:
        pass

    def copy(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    def own(self, a: Any) -> Any:
        return np.array(a, copy=True)

    def empty_like(self, a: Any) -> Any:
        return np.empty_like(a)
