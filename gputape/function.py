"""``gt.function``: trace a Python function once per input signature, then replay it.

A training step run eagerly pays, for every op, the tape's bookkeeping: tensor
ids, node records, the backward sweep's ordering and needs analysis. None of
that changes from one step to the next when the shapes do not, so
``gt.function`` runs the function once eagerly while recording every array
computation it makes (forward primitives, each node's backward step, gradient
accumulation, variable assignments, optimizer updates, random draws), and
turns the record into one straight-line Python function: a call per step, no
tape, no dictionaries, dead intermediates dropped as soon as they are last
used. Later calls with the same signature run that function.

What a user of ``tf.function`` should know:

* **Signature.** Tensor and array arguments are keyed by shape, dtype and
  device; Variables by identity; Python values (numbers, strings, None, tuples)
  by value; other objects by identity. A new signature traces again: that is
  counted (``tracing_count``) and warned about from the fifth trace on, because
  a function retraced on every call is slower than eager (pass tensors rather
  than Python numbers for values that change; keep batch shapes fixed, e.g.
  ``DataLoader(..., drop_remainder=True)``).
* **Python runs once per trace.** Side effects (prints, appends) happen at
  trace time only (``tf.print`` is a step of the replay: it prints at every
  call); numpy code on host values is frozen as a constant, as in TensorFlow.
  gputape's own stateful pieces are replayed: optimizer updates (learning-rate
  schedules and step counts advance), ``Variable.assign*``, ``gt.random``
  draws, ``Dropout`` masks, ``tf.keras.metrics`` updates and
  ``gt.distributed`` all-reduces.
* **input_signature** (:class:`TensorSpec`): every call is checked (and Python
  values converted); one trace is counted for all sizes along ``None`` dims,
  while the replay, specialised to shapes, is re-recorded for each new size
  (``recording_count``; the Python function runs again). We chose that over a
  shape-polymorphic replay because the record bakes shapes in (reshape
  targets, ``mean``'s divisor, the backward pass's ``sum_to`` shapes):
  re-recording keeps every size bitwise equal to eager. ``reduce_retracing``
  counts traces as TensorFlow's shape generalisation would.
* **Value-dependent Python is an error at trace time.** ``bool()``, ``float()``,
  ``int()``, ``.numpy()``, ``np.asarray`` or ``.item()`` of a traced tensor (an
  argument, anything computed from one, or a Variable's value) raises
  :class:`TracingError` naming the line, instead of freezing the first call's
  branch. Use tensor ops (``gt.where``, ``gt.maximum``) or move the decision
  out of the function.
* **Results equal eager execution**, bitwise on the CPU: a replay calls the
  same array functions on the same values in the same order as the eager run.
  Returned tensors are new constants each call.
* **Not compiled, run eagerly instead**: a call made while a GradientTape is
  recording (so the outer tape sees the ops), inside another function's trace,
  or under ``gt.debug.check_numerics`` (whose checks are per-op).
* **Variables created inside the function** are created at trace time only
  (TensorFlow allows it on the first call only, for the same reason).

>>> import gputape as gt, numpy as np
>>> w = gt.Variable(np.ones((3, 1), np.float32))
>>> opt = gt.optim.SGD(0.1)
>>> @gt.function
... def step(x, y):
...     with gt.GradientTape() as tape:
...         loss = gt.mean(gt.square(x @ w - y))
...     opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
...     return loss
>>> x, y = np.ones((4, 3), np.float32), np.zeros((4, 1), np.float32)
>>> [round(float(step(x, y)), 4) for _ in range(3)]
[9.0, 1.44, 0.2304]
>>> step.tracing_count
1
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import re
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _state, backend
from . import expr as _expr
from . import tape as _tape
from ._nest import flatten, unflatten
from .device import current_device
from .tape import GputapeWarning, Node, _where
from .tensor import Tensor, Variable, _new, _wrap, constant

__all__ = ["Function", "InputSignatureError", "TensorSpec", "TracingError", "function"]

_RETRACE_WARN_AT = 5
# Matrix products inside the CUDA graphs through gputape.cublas (direct cuBLAS) by default;
# gt.function(..., capture_gemm=False), or GPUTAPE_CAPTURE_GEMM=0 in the environment, keeps
# them as ordinary launches between graphs.
CAPTURE_GEMM = os.environ.get("GPUTAPE_CAPTURE_GEMM", "1") != "0"
_log = logging.getLogger("gputape")


class TracingError(TypeError):
    """A traced function needed a tensor's value in Python (raised at trace time by ``gt.function``)."""


# -- the record ------------------------------------------------------------------------------


class _Trace(_state.Scope):
    """The record of one traced call: steps over numbered slots, each slot one array value.

    Arrays are recognised by identity; every array the record refers to is kept
    alive until the record is compiled, so no id is reused while tracing. While the
    traced function runs, the trace is on its thread's observer stack (``with trace:``),
    so it sees that thread's ops only.
    """

    observes = "trace"
    _guarded = False  # Function._trace guards the pop with try/finally

    def __init__(self, name: str) -> None:
        self.name = name
        self.slot_of: dict[int, int] = {}
        self.keep: list[Any] = []
        # (fn | Variable, refs, outs, kind): kind says whether a CUDA graph may capture the step
        self.steps: list[tuple[Any, Any, Any, str]] = []
        self.nslots = 0
        self.consts: list[Any] = []
        self.paused = 0

    def owned(self) -> bool:
        return self.paused == 0

    # references
    def _slot(self, arr: Any) -> int:
        k = self.nslots
        self.nslots += 1
        self.slot_of[id(arr)] = k
        self.keep.append(arr)
        return k

    def const(self, obj: Any) -> tuple[str, int]:
        self.consts.append(obj)
        return ("c", len(self.consts) - 1)

    def ref(self, x: Any) -> Any:
        if isinstance(x, Variable):
            return ("s", self.read_variable(x))
        if isinstance(x, Tensor):
            x = x._data
        k = self.slot_of.get(id(x))
        if k is not None:
            return ("s", k)
        if type(x) is list:
            return ("l", [None if e is None else self.ref(e) for e in x])
        return self.const(x)

    def outs(self, out: Any) -> Any:
        if out is None:
            return None
        if isinstance(out, (list, tuple)):
            return [None if o is None else self._slot(o._data if isinstance(o, Tensor) else o) for o in out]
        return self._slot(out._data if isinstance(out, Tensor) else out)

    def _step(self, fn: Any, refs: list, out: Any, kind: str = "host") -> None:
        self.steps.append((fn, refs, self.outs(out), kind))

    # hooks called by the tape, tensors, optimizers and random draws
    def read_variable(self, var: Variable) -> int:
        if not self.owned():
            return -1
        k = self._slot(var._data)
        self.steps.append((var, None, k, "var"))
        return k

    def forward(self, prim: Any, args: tuple, params: dict, datas: list | None, res: Any) -> None:
        if not self.owned() or prim.fwd is _tape._custom_fwd:  # (custom: its inner ops were recorded)
            return
        first = next(a._data for a in args if isinstance(a, Tensor))
        xp = np if type(first) is np.ndarray else backend.xp_of(first)
        fn: Any = functools.partial(prim.fwd, xp, **params)
        consts = datas if datas is not None else args
        refs = []
        for a, c in zip(args, consts):
            if c is a or (isinstance(a, Tensor) and c is a._data):
                refs.append(self.ref(a))  # raw arrays too: an argument's array is a slot
            elif isinstance(a, Tensor) or id(a) in self.slot_of:  # a host tensor or array moved to the GPU
                dev = backend.device_of(c)
                self._step(functools.partial(_to_device, dev=dev), [self.ref(a)], c, "host")
                refs.append(self.ref(c))
            else:
                refs.append(self.const(c))
        if prim.nout == 1:
            if res._data.ndim == 0:
                fn = _fixed(fn)
        else:
            fn = _fixed_multi(fn)
        self._step(fn, refs, res, _kind(prim))

    def forward1(self, prim: Any, args: tuple, res: Tensor) -> None:
        """The ops' fast paths: one or two operands, no parameters, ``prim.cpu`` on host arrays."""
        if not self.owned():
            return
        d = next(a._data for a in args if isinstance(a, Tensor))
        fn: Any
        if type(d) is np.ndarray and prim.cpu is not None:
            fn = prim.cpu
        else:
            fn = functools.partial(prim.fwd, np if type(d) is np.ndarray else backend.xp_of(d))
        if res._data.ndim == 0:
            fn = _fixed(fn)
        self._step(fn, [self.ref(a) if isinstance(a, Tensor) else self.const(a) for a in args], res, _kind(prim))

    def node_grads(self, F: Any, node: Node, needs: Any, lead: tuple, g: Any, saved: Any) -> list:
        """A node's backward step, run now and recorded: the VJP as one call, then a reduce/cast per input."""
        own = self.owned()
        self.paused += 1  # a custom gradient's own ops are inside this one step
        try:
            raw = _tape._vjp_raw(F, node, needs, lead, g, saved)
            out = _tape._fit_all(F, node, needs, lead, raw)
        finally:
            self.paused -= 1
        if own:
            self._vjp(F, node, needs, lead, g, saved, raw, out)
        return out

    def _vjp(self, F: Any, node: Node, needs: Any, lead: tuple, g: Any, saved: Any, raw: Any, out: list) -> None:
        static = _new(Node)  # the node without its residuals: the replay passes its own
        for name in Node.__slots__:
            setattr(static, name, getattr(node, name, None))
        static.saved = None
        nb = len(lead)
        # vjp(F, g, needs, nb, node, *saved), called from the replay's code with no wrapper
        fn = _unbatched if nb and not node.prim.batchable else node.prim.vjp
        refs = [self.const(F), self.ref(g), self.const(needs), self.const(nb if fn is not _unbatched else lead)]
        refs += [self.const(static)] + [self.ref(s) for s in saved]
        # unused results are bound to nothing, so their arrays die at once
        kept = [r if (n and r is not None) else None for r, n in zip(raw, needs)]
        self._step(fn, refs, kept, _kind(node.prim))
        casts = node.casts
        for k, (r, o) in enumerate(zip(kept, out)):
            if r is not None and o is not r:
                shape = node.shapes[k] if not nb else lead + node.shapes[k]
                fit = functools.partial(_tape._fit, F, shape=shape, nb=nb, cast=None if casts is None else casts[k])
                self._step(fit, [self.ref(r)], o, "device")

    def call(self, fn: Callable[..., Any], args: tuple, out: Any, pure: bool = False) -> None:
        """``out = fn(*args)`` ran; ``pure``: array work only (no host state, no transfers)."""
        if not self.owned():
            return
        self._step(fn, [self.ref(a) for a in args], out, "device" if pure else "host")

    def assign(self, var: Variable, op: str, arr: Any) -> None:
        if not self.owned():
            return
        self._step(functools.partial(_replay_assign, var, op), [self.ref(arr)], var._data)

    def optimizer_step(self, opt: Any, live: list) -> int:
        self.paused += 1
        try:
            n = opt._apply_live(live)
        finally:
            self.paused -= 1
        variables = [v for _, v in live]
        self._step(_OptimizerStep(opt, variables), [self.ref(g) for g, _ in live], [v._data for v in variables])
        return n

    def python_step(self, fn: Callable[..., Any], args: tuple, wrap: bool = True) -> None:
        """Run host-side Python ``fn(*args)`` now and again on every replay with that call's values.

        For stateful Python that reads tensor values (running metrics): arrays
        reach ``fn`` as tensors (raw arrays with ``wrap=False``), other arguments
        as they were.
        """
        self.paused += 1
        try:
            fn(*args)
        finally:
            self.paused -= 1
        self._step(_PythonStep(fn) if wrap else fn, [self.ref(a) for a in args], None)

    def exported(self, t: Tensor) -> None:
        if not self.owned():
            return
        if isinstance(t, Variable) or id(t._data) in self.slot_of:
            where = _where()
            raise TracingError(
                f"gt.function({self.name}): a traced tensor's value was needed in Python "
                f"(bool(), float(), int(), .numpy(), np.asarray() or .item()){f' at {where}' if where else ''}. "
                "While tracing, a tensor stands for the value of every future call, so a Python branch or "
                "number taken from it would be frozen at the first call's value. Use tensor ops instead "
                "(gt.where, gt.maximum, gt.cast), return the value and inspect it outside the function, or "
                "call the function without gt.function."
            )

    # compile
    def compile(self, arg_slots: list[int], out_refs: list[Any]) -> tuple[Callable[..., Any], str]:
        """Straight-line Python source for the record; each slot deleted after its last use."""
        last: dict[int, int] = {}
        for i, (_fn, refs, _, _kind) in enumerate(self.steps):
            if refs is not None:
                for k in _slots_in(refs):
                    last[k] = i
        returned = set(_slots_in(out_refs))
        ns: dict[str, Any] = {}
        lines = [f"def replay({', '.join(f's{k}' for k in arg_slots)}):"]
        dead_args = [k for k in arg_slots if k not in last and k not in returned]
        if dead_args:
            lines.append(f"    del {', '.join(f's{k}' for k in dead_args)}")
        for i, (fn, refs, outs, _kind) in enumerate(self.steps):
            inline = _inline_vjp(fn, refs, outs, self.consts)
            if isinstance(fn, Variable):
                ns[f"V{i}"] = fn
                lines.append(f"    s{outs} = V{i}._data")
            elif inline is not None:
                lines.extend(f"    {line}" for line in inline)
            else:
                ns[f"f{i}"] = fn
                lhs = _lhs(outs)
                lines.append(f"    {lhs}f{i}({', '.join(_render(r) for r in refs)})")
            produced = [outs] if isinstance(outs, int) else [o for o in outs or () if o is not None]
            dead = [k for k in produced if k not in last and k not in returned]
            if refs is not None:
                dead += sorted({k for k in _slots_in(refs) if last.get(k) == i and k not in returned})
            if dead:
                lines.append(f"    del {', '.join(f's{k}' for k in dead)}")
        lines.append(f"    return ({''.join(_render(r) + ', ' for r in out_refs)})")
        for j, c in enumerate(self.consts):
            ns[f"c{j}"] = c
        ns["np"] = np
        src = "\n".join(lines) + "\n"
        exec(compile(src, f"<gt.function {self.name}>", "exec"), ns)
        return ns["replay"], src


# Primitives whose forward or VJP calls cuBLAS/cuSOLVER: CuPy refuses those during stream
# capture (measured: "calling cuBLAS API during stream capture is currently unsupported").
_HOST_PRIMS = {"matmul", "einsum", "tensordot", "dot", "inner", "solve", "inv", "det", "cholesky", "svd", "qr"}


def _kind(prim: Any) -> str:
    """'device' when a CUDA graph may capture the primitive's work; 'host...' otherwise."""
    if prim.fwd is _tape._custom_fwd:
        return "host"  # custom gradients run user Python
    if prim.name in _HOST_PRIMS:
        return f"host:{prim.name}"  # (matmul: capturable through gputape.cublas, see _GraphRunner)
    return "device"


# The CPU replay writes the VJPs of primitives declared in gputape.expr as expressions in its
# own code instead of calling them: per output, the very text the generated VJP evaluates on
# numpy arrays (same operations in the same order, so the same bits), over g the cotangent,
# a0/a1 the saved operands, F the VJP's namespace and node its node. A Python call per
# backward op is most of what a compiled elementwise chain pays over numpy.
_TOKEN = re.compile(r"\b(g|a[0-9]+|F|node)\b")


def _inline_vjp(fn: Any, refs: Any, outs: Any, consts: list) -> list[str] | None:
    """Source lines for a VJP step of a primitive declared in gputape.expr on numpy arrays, else None."""
    if refs is None or not isinstance(outs, list) or len(refs) < 5 or refs[4][0] != "c":
        return None
    node = consts[refs[4][1]]
    if not isinstance(node, Node) or fn is not node.prim.vjp:
        return None
    decl = _expr.DERIVATIVES.get(node.prim.name)
    F = consts[refs[0][1]] if refs[0][0] == "c" else None
    if decl is None or decl.vjp is not fn or getattr(F, "xp", None) is not np or consts[refs[3][1]] != 0:
        return None
    names = {"g": _render(refs[1]), "F": _render(refs[0]), "node": _render(refs[4])}
    names |= {f"a{j}": _render(r) for j, r in enumerate(refs[5:])}
    lines = []
    for k, o in enumerate(outs):
        if o is not None:
            lines.append(f"s{o} = " + _TOKEN.sub(lambda m: names[m.group(1)], decl.python(k)))
    return lines


def _slots_in(refs: Any) -> list[int]:
    out = []
    for r in refs:
        if r is None:
            continue
        if r[0] == "s":
            out.append(r[1])
        elif r[0] == "l":
            out.extend(_slots_in(r[1]))
    return out


def _render(r: Any) -> str:
    if r is None:
        return "None"
    if r[0] == "s":
        return f"s{r[1]}"
    if r[0] == "c":
        return f"c{r[1]}"
    return "[" + ", ".join(_render(e) for e in r[1]) + "]"


def _lhs(outs: Any) -> str:
    if outs is None:
        return ""
    if isinstance(outs, int):
        return f"s{outs} = "
    names = ["_" if o is None else f"s{o}" for o in outs]
    return ", ".join(names) + (", = " if len(names) == 1 else " = ")


def _fixed(fn: Callable[..., Any]) -> Callable[..., Any]:
    # numpy hands back scalars for 0-d results; a replay keeps arrays, as eager tensors do
    def call(*args: Any) -> Any:
        r = fn(*args)
        return np.asarray(r) if isinstance(r, np.generic) else r

    return call


def _fixed_multi(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return [np.asarray(r) if isinstance(r, np.generic) else r for r in fn(*args)]

    return call


def _unbatched(F: Any, g: Any, needs: Any, lead: tuple, node: Node, *saved: Any) -> list:
    return _tape._unbatched_vjp(F, g, needs, node, list(saved), lead)


def _to_device(a: Any, dev: str) -> Any:
    return backend.to_device(a, dev)


def _replay_assign(var: Variable, op: str, arr: Any) -> Any:
    getattr(var, op)(arr)
    return var._data


class _PythonStep:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> None:
        self.fn(*[_wrap(a) if _is_array(a) else a for a in args])


class _OptimizerStep:
    """An optimizer update as one replay step: the schedule and step count run at replay time."""

    def __init__(self, opt: Any, variables: list[Variable]) -> None:
        self.opt = opt
        self.variables = variables

    def __call__(self, *grads: Any) -> list[Any]:
        variables = self.variables
        self.opt._apply_live(
            [(_wrap(np.asarray(g) if isinstance(g, np.generic) else g), v) for g, v in zip(grads, variables)]
        )
        return [v._data for v in variables]


# -- CUDA-graph replay ------------------------------------------------------------------------


_FUSE_MAX = 16  # steps per kernel: each array operand is a kernel parameter
# Fuse elementwise VJP chains into generated kernels in CUDA-graph replays (GPUTAPE_FUSE=0: off).
FUSE_BACKWARD = os.environ.get("GPUTAPE_FUSE", "1") != "0"
_FUSED_KERNELS: dict[tuple[str, int], Any] = {}


def fused_kernel_source(expr: _expr.Expr, nparams: int, serial: int = 0) -> tuple[str, str, str, str]:
    """``cupy.ElementwiseKernel`` arguments for ``out = expr`` over ``g`` and ``p0..p{n-1}``
    (with :data:`gputape.expr.CUDA_PRELUDE` as the preamble)."""
    return _expr.kernel_source(expr, nparams, f"gputape_fused_vjp_{serial}")


def _template(name: str, needs: Any) -> tuple | None:
    """(expression over g and a0.., operand names) of the one cotangent a VJP step computes, else None."""
    decl = _expr.DERIVATIVES.get(name)
    if decl is None or needs is None or list(needs).count(True) != 1:
        return None
    return decl.fusable(list(needs).index(True))


def _fusable(step: tuple, consts: list) -> tuple | None:
    """(template, g slot, operand refs, out slot) for a fusable VJP step (gputape.expr), else None."""
    fn, refs, outs, kind = step
    if kind != "device" or not isinstance(outs, list) or len(refs) < 5:
        return None
    node = consts[refs[4][1]] if refs[4][0] == "c" else None
    if not isinstance(node, Node) or fn is not node.prim.vjp or refs[3] != ("c", refs[3][1]):
        return None
    needs = tuple(consts[refs[2][1]]) if refs[2][0] == "c" else None
    nb = consts[refs[3][1]]
    template = _template(node.prim.name, needs)
    if template is None or nb != 0 or refs[1][0] != "s" or fn is not _expr.DERIVATIVES[node.prim.name].vjp:
        return None
    done = [o for o in outs if o is not None]
    if len(done) != 1:
        return None
    saved = refs[5:]
    operands = []
    for name in template[1]:
        r = saved[int(name[1:])]
        if r[0] == "c" and not isinstance(consts[r[1]], (int, float)):
            return None  # an array constant: keep kernels to slots and Python numbers
        operands.append(r)
    return template, refs[1][1], operands, done[0]


def compose(templates: list[tuple]) -> tuple[_expr.Expr, int]:
    """One expression for a chain of VJP templates, first applied first: (expr, parameter count).

    Each template's operands become the next free ``p{i}``, in the order the chain
    passes them; ``g`` is the chain's incoming cotangent.

    >>> e, n = compose([_template("tanh", (True,)), _template("multiply", (True, False))])
    >>> _expr.python(e), n
    ('g * (1 - p0 * p0) * p1', 2)
    """
    return _expr.compose(templates)


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
        self.fused_chains: list[list[str]] = []
        if getattr(backend_, "fuse", False):
            self._fuse_backward(arg_slots, out_refs)
        self.nslots = trace.nslots
        self.arg_slots = arg_slots
        self.out_refs = out_refs
        self.calls = 0
        self.transfers: list[int] | None = None  # host<->device copies of the latest call
        self.host_only: set[int] = {i for i, st in enumerate(self.steps) if st[3] != "device"}
        self.returned = set(_slots_in(out_refs))
        n = len(self.steps)
        self.last: dict[int, int] = {}
        for i, st in enumerate(self.steps):
            if st[1] is not None:
                for k in _slots_in(st[1]):
                    self.last[k] = i
        for k in self.returned:
            self.last[k] = n
        self.dead_after: list[list[int]] = [[] for _ in range(n)]
        for i, st in enumerate(self.steps):
            made = [st[2]] if isinstance(st[2], int) else [o for o in st[2] or () if o is not None]
            for k in made:
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
        from .ops.linalg import _matmul

        F_gemm: dict[int, Any] = {}
        for i, (fn, refs, outs, kind) in enumerate(self.steps):
            if kind != "host:matmul":
                continue
            if isinstance(fn, functools.partial) and fn.func is _matmul.fwd:
                self.steps[i] = (gemm.matmul, refs, outs, "device")
            elif fn is _matmul.vjp and refs[0][0] == "c":
                F = self.consts[refs[0][1]]
                if id(F) not in F_gemm:
                    ns = types.SimpleNamespace(**vars(F))
                    ns.matmul = gemm.matmul
                    self.consts.append(ns)
                    F_gemm[id(F)] = ("c", len(self.consts) - 1)
                self.steps[i] = (fn, [F_gemm[id(F)], *refs[1:]], outs, "device")

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
            for k in _slots_in(st[1] or ()):
                readers.setdefault(k, []).append(i)
        for k in _slots_in(out_refs):
            readers.setdefault(k, []).append(len(steps))
        links: dict[int, tuple] = {}  # step -> (template, g slot, operands, out slot)
        for i, st in enumerate(steps):
            link = _fusable(st, self.consts)
            if link is not None:
                links[i] = link
        nxt: dict[int, int] = {}  # link -> the link that alone reads its cotangent
        for i, (_t, _g, _ops, out) in links.items():
            r = readers.get(out, [])
            if len(r) == 1 and r[0] in links and links[r[0]][1] == out:
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
                fn, refs, names = self._fused_step(part)
                steps[part[-1]] = (fn, refs, links[part[-1]][3], "device")
                drop.update(part[:-1])
                self.fused_chains.append(names)
        if drop:
            self.steps = [st for i, st in enumerate(steps) if i not in drop]

    def _fused_step(self, part: list[int]) -> tuple[Any, list, list[str]]:
        links = [_fusable(self.steps[i], self.consts) for i in part]
        expr, nparams = compose([t for t, _g, _ops, _out in links])
        params = [r for _t, _g, ops, _out in links for r in ops]  # the kernel's inputs after g
        kernel = self.backend.elementwise(expr, nparams)
        return kernel, [("s", links[0][1]), *params], [t for t, *_ in links]

    # planning
    def _plan(self) -> None:
        segs: list[_Segment] = []
        for i, st in enumerate(self.steps):
            # A variable read launches nothing and no device step changes a variable, so a
            # read inside a run of device steps is done before that run's graph: it does not
            # cut the graph in two.
            cap = i not in self.host_only or (st[3] == "var" and bool(segs) and segs[-1].capture)
            if segs and segs[-1].capture == cap:
                segs[-1].end = i + 1
            else:
                segs.append(_Segment(i, i + 1, cap))
            if cap and st[3] == "var":
                segs[-1].var_reads.append((st[2], st[0]))
        made_in: dict[int, int] = {k: -1 for k in self.arg_slots}
        for si, seg in enumerate(segs):
            for i in range(seg.start, seg.end):
                st = self.steps[i]
                made = [st[2]] if isinstance(st[2], int) else [o for o in st[2] or () if o is not None]
                for k in made:
                    made_in[k] = -1 if st[3] == "var" and seg.capture else si
        for si, seg in enumerate(segs):
            if not seg.capture:
                continue
            ins: set[int] = set()
            for i in range(seg.start, seg.end):
                refs = self.steps[i][1]
                for k in _slots_in(refs or ()):
                    if made_in.get(k, -1) != si:
                        ins.add(k)
            seg.ins = sorted(ins)
            seg.live_outs = sorted(k for k, where in made_in.items() if where == si and self.last.get(k, -1) >= seg.end)
        self.segments = segs
        self.static: dict[int, Any] = {}

    # running
    def _resolve(self, r: Any, env: list) -> Any:
        if r is None:
            return None
        if r[0] == "s":
            return env[r[1]]
        if r[0] == "c":
            return self.consts[r[1]]
        return [self._resolve(e, env) for e in r[1]]

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
                if r is not None and r[0] == "s" and static.get(r[1]) is v:
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
            self.failures.append(f"step {bad} ({_step_name(self.steps[bad][0])}): {type(exc).__name__}: {exc}")
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
            from . import cublas

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
        F = _tape._RAW_F(np)

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


# -- the decorator ---------------------------------------------------------------------------


def _tf_dtype(dt: np.dtype) -> str:
    return f"tf.{np.dtype(dt).name}"


class TensorSpec:
    """The shape and dtype a ``gt.function`` input must have (TensorFlow's ``tf.TensorSpec``).

    ``None`` in ``shape`` accepts any size along that dimension; ``shape=None``
    any rank. Used in ``input_signature``: every call is checked against it.

    >>> import gputape.tf as tf
    >>> spec = tf.TensorSpec(shape=[None, 3], dtype=tf.float32)
    >>> spec, spec.shape
    (TensorSpec(shape=(None, 3), dtype=tf.float32, name=None), (None, 3))
    >>> spec.is_compatible_with(tf.zeros((5, 3))), spec.is_compatible_with(tf.zeros((5, 4)))
    (True, False)
    """

    def __init__(self, shape: Any, dtype: Any = "float32", name: str | None = None) -> None:
        if shape is not None:
            dims = tuple(shape)
            bad = [d for d in dims if d is not None and not (isinstance(d, (int, np.integer)) and d >= 0)]
            if bad:
                raise TypeError(f"TensorSpec: shape entries must be non-negative ints or None, got {shape!r}")
            shape = tuple(None if d is None else int(d) for d in dims)
        self.shape: tuple | None = shape
        self.dtype = np.dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, tensor: Any, name: str | None = None) -> TensorSpec:
        """The spec of a tensor or array (its exact shape and dtype)."""
        d = tensor._data if isinstance(tensor, Tensor) else np.asarray(tensor)
        return cls(d.shape, d.dtype, name)

    def is_compatible_with(self, other: Any) -> bool:
        """Whether ``other`` (a spec, tensor or array) has this dtype and fits this shape."""
        if not isinstance(other, TensorSpec):
            other = TensorSpec.from_tensor(other)
        if other.dtype != self.dtype:
            return False
        if self.shape is None or other.shape is None:
            return True
        return len(self.shape) == len(other.shape) and all(
            a is None or b is None or a == b for a, b in zip(self.shape, other.shape)
        )

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={_tf_dtype(self.dtype)}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and (self.shape, self.dtype, self.name) == (
            other.shape,
            other.dtype,
            other.name,
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.str, self.name))


class InputSignatureError(TypeError, ValueError):
    """A call's inputs do not match a ``gt.function``'s ``input_signature``.

    Both a TypeError (what TensorFlow 2.13+ raises) and a ValueError (what earlier
    TensorFlow raised), so code written for either catches it.
    """


# Python values TensorFlow converts to a signature's dtype: ints to any number, floats to floats
_PY_CASTS = {"i": "iufc", "u": "iufc", "f": "fc", "c": "c", "b": "b"}


def _spec_of_value(x: Any) -> str:
    if isinstance(x, Tensor) or _is_array(x):
        return repr(TensorSpec.from_tensor(x))
    return f"{type(x).__name__} {x!r}"


def _bind_leaf(fname: str, where: str, spec: TensorSpec, x: Any) -> Any:
    """``x`` as a value that matches ``spec`` (Python values become tensors of its dtype), else raise."""

    def fail(why: str) -> InputSignatureError:
        return InputSignatureError(
            f"gt.function({fname}): argument {where} does not match its input_signature: can not cast "
            f"{_spec_of_value(x)} to {spec!r} ({why}). Pass a {_tf_dtype(spec.dtype)} value of a matching "
            "shape, or widen the signature (None in a TensorSpec's shape accepts any size there)."
        )

    if isinstance(x, np.generic):  # a numpy scalar has its dtype, as an array does
        x = np.asarray(x)
    if isinstance(x, Tensor) or _is_array(x):
        d = x._data if isinstance(x, Tensor) else x
    else:
        try:
            host = np.asarray(x)
        except Exception as e:
            raise fail("not convertible to a tensor") from e
        if host.dtype != spec.dtype and spec.dtype.kind not in _PY_CASTS.get(host.dtype.kind, ""):
            raise fail(f"a Python {type(x).__name__} of {host.dtype.kind!r} kind does not convert to {spec.dtype.name}")
        cast = host.astype(spec.dtype)
        if host.dtype.kind in "iu" and not np.array_equal(cast, host):
            raise fail(f"the value does not fit in {spec.dtype.name}")
        x = constant(cast, device=current_device())
        d = x._data
    if d.dtype != spec.dtype:
        raise fail(f"dtype {d.dtype.name}, the signature's {spec.dtype.name}")
    if spec.shape is not None:
        if d.ndim != len(spec.shape):
            raise fail(f"rank {d.ndim}, the signature's rank {len(spec.shape)}")
        for i, (a, b) in enumerate(zip(d.shape, spec.shape)):
            if b is not None and a != b:
                raise fail(f"dimension {i} is {a}, the signature's {b}")
    return x


def _bind_signature(fname: str, names: list[str], signature: tuple, args: tuple, kwargs: dict) -> tuple:
    """The call's arguments, positionally, each checked against (and converted to) its spec."""
    n = len(signature)
    if len(args) > n:
        raise InputSignatureError(
            f"gt.function({fname}): called with {len(args)} positional arguments, but its input_signature "
            f"has {n} ({signature!r}); with an input_signature every argument is a tensor the signature describes"
        )
    values = list(args)
    rest = dict(kwargs)
    for name in names[len(args) : n]:
        if name not in rest:
            raise InputSignatureError(
                f"gt.function({fname}): missing argument {name!r} of input_signature {signature!r}"
            )
        values.append(rest.pop(name))
    if rest or len(values) < n:
        extra = ", ".join(map(repr, rest)) if rest else f"{n - len(values)} missing"
        raise InputSignatureError(
            f"gt.function({fname}): arguments ({extra}) do not fit input_signature {signature!r} "
            f"(parameters {names[:n]})"
        )
    bound = []
    for k, (spec, value) in enumerate(zip(signature, values)):
        where = f"{names[k]!r} (input_signature[{k}])" if k < len(names) else f"input_signature[{k}]"
        pairs = _pair_up(fname, where, spec, value)
        bound.append(
            unflatten(
                flatten(spec)[1],
                [
                    x if isinstance(x, Variable) and sp.is_compatible_with(x) else _bind_leaf(fname, where, sp, x)
                    for sp, x in pairs
                ],
            )
        )
    return tuple(bound)


def _pair_up(fname: str, where: str, spec: Any, value: Any) -> list[tuple[TensorSpec, Any]]:
    """(spec, value) per TensorSpec of a nested signature entry, in flatten's order (a value's lists
    inside a TensorSpec's place are one tensor's data, not structure)."""
    if isinstance(spec, TensorSpec):
        return [(spec, value)]
    same = (
        isinstance(value, dict) and set(value) == set(spec)
        if isinstance(spec, dict)
        else isinstance(value, (list, tuple)) and len(value) == len(spec)
    )
    if not same:
        raise InputSignatureError(
            f"gt.function({fname}): argument {where} has the structure of {value!r}, but its "
            f"input_signature is {spec!r}: pass the same nesting of tensors"
        )
    if isinstance(spec, dict):
        keys = flatten(spec)[1][2]
        return [p for k, _, _ in keys for p in _pair_up(fname, where, spec[k], value[k])]
    return [p for sp, v in zip(spec, value) for p in _pair_up(fname, where, sp, v)]


def _check_signature(fname: str, signature: Any) -> tuple:
    if not isinstance(signature, (list, tuple)):
        raise TypeError(
            f"gt.function({fname}): input_signature must be a list or tuple of TensorSpecs, got {signature!r}"
        )
    for leaf in flatten(list(signature))[0]:
        if not isinstance(leaf, TensorSpec):
            raise TypeError(
                f"gt.function({fname}): input_signature entries must be TensorSpecs (or nests of them), got {leaf!r}"
            )
    return tuple(signature)


def _param_names(fn: Callable[..., Any]) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _relaxed(pattern: tuple, shape: tuple) -> tuple:
    return tuple(a if a == b else None for a, b in zip(pattern, shape))


def _fits(pattern: tuple, shape: tuple) -> bool:
    return all(a is None or a == b for a, b in zip(pattern, shape))


def _is_array(x: Any) -> bool:
    return type(x) is np.ndarray or backend.is_gpu_array(x)


def _leaf_key(x: Any) -> Any:
    if isinstance(x, Variable):
        return ("V", id(x))
    if isinstance(x, Tensor):
        d = x._data
        return ("T", d.shape, d.dtype.str, backend.device_of(d))
    if _is_array(x):
        return ("T", x.shape, x.dtype.str, backend.device_of(x))
    try:
        hash(x)
    except TypeError:
        return ("O", id(x))
    return ("P", type(x).__name__, x)


class _Concrete:
    """One traced signature: the compiled replay and how to map arguments and results.

    Replays of one signature run one at a time (``lock``): a replay reuses its buffers
    (the CUDA graphs' inputs and outputs) and updates the function's variables and
    optimizer state in place, so two threads interleaving one would mix their steps.
    """

    def __init__(
        self, replay: Callable[..., Any], source: str, positions: list[int], out_spec: Any, scalar_outs: tuple = ()
    ):
        self.replay = replay
        self.source = source
        self.positions = positions  # which flat argument leaves are tensors, in replay order
        self.out_spec = out_spec
        self.scalar_outs = scalar_outs  # results that are 0-d tensors (slots, not Python constants)
        self.lock = threading.Lock()

    def __call__(self, leaves: list) -> Any:
        arrays = []
        for i in self.positions:
            x = leaves[i]
            arrays.append(x._data if isinstance(x, Tensor) else x)
        with self.lock:
            res = self.replay(*arrays)
        out = [_wrap(r) if _is_array(r) else r for r in res]
        for i in self.scalar_outs:  # a replay's inlined 0-d VJPs make numpy scalars where eager has arrays
            if isinstance(res[i], np.generic):
                out[i] = _wrap(np.asarray(res[i]))
        return unflatten(self.out_spec, out)


class Function:
    """A Python function traced once per input signature and replayed (see :mod:`gputape.function`).

    ``python_function`` is the original; ``tracing_count`` counts traces
    (``experimental_get_tracing_count()`` is TensorFlow's spelling); ``code``
    shows the replay source of the latest trace.

    >>> import gputape as gt
    >>> f = gt.function(lambda x: gt.tanh(x) * 2.0)
    >>> [round(v, 4) for v in f(gt.constant([0.0, 1.0])).numpy().tolist()], f.tracing_count
    ([0.0, 1.5232], 1)
    """

    def __init__(
        self,
        python_function: Callable[..., Any],
        name: str | None = None,
        graphs: Any = None,
        capture_gemm: Any = None,
        fuse: Any = None,
        input_signature: Any = None,
        reduce_retracing: bool = False,
    ) -> None:
        self.python_function = python_function
        self.name = name or getattr(python_function, "__name__", "function")
        self.input_signature = None if input_signature is None else _check_signature(self.name, input_signature)
        self.reduce_retracing = bool(reduce_retracing)
        self._names = _param_names(python_function) if input_signature is not None else []
        # what TensorFlow would count as traces ("concrete functions"); _keys are the recordings
        self._counted: list[Any] = []
        self._patterns: dict[Any, list[tuple]] = {}  # reduce_retracing: relaxed shapes per signature
        self._warned_shapes = False
        self.graphs = graphs
        self.capture_gemm = CAPTURE_GEMM if capture_gemm is None else bool(capture_gemm)
        self.fuse = FUSE_BACKWARD if fuse is None else bool(fuse)
        self._cache: dict[Any, _Concrete] = {}
        self._keys: list[Any] = []
        self._lock = threading.Lock()
        self._warned = False
        functools.update_wrapper(self, python_function)

    @property
    def tracing_count(self) -> int:
        return len(self._counted)

    def experimental_get_tracing_count(self) -> int:
        return len(self._counted)

    @property
    def recording_count(self) -> int:
        """Recordings made: ``tracing_count`` plus one per new size along a ``None`` dimension
        (of ``input_signature``, or relaxed by ``reduce_retracing``), whose replay is re-recorded."""
        return len(self._keys)

    @property
    def code(self) -> str:
        """The Python source of the latest trace's replay (for reading, as ``tf.autograph.to_code``)."""
        return self._cache[self._keys[-1]].source if self._keys else ""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # a decorated method: one Function per instance, so each instance traces its own state
        if obj is None:
            return self
        bound = obj.__dict__.get(f"__gt_function_{self.name}")
        if bound is None:
            bound = Function(
                self.python_function.__get__(obj, objtype),
                self.name,
                self.graphs,
                self.capture_gemm,
                self.fuse,
                self.input_signature,
                self.reduce_retracing,
            )
            obj.__dict__[f"__gt_function_{self.name}"] = bound
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.input_signature is not None:  # checked on every call, eager ones too, as TensorFlow does
            args, kwargs = _bind_signature(self.name, self._names, self.input_signature, args, kwargs), {}
        obs = _state.tls.obs
        if obs is not None and (obs.trace is not None or obs.tapes or obs.watchers or obs.numerics):
            # a trace or tape of this thread must see the ops one by one (a custom_gradient
            # forward its variable reads, check_numerics each op): run eagerly
            return self.python_function(*args, **kwargs)
        leaves, spec = flatten((args, kwargs))
        seen: dict[int, int] = {}
        key_parts = []
        for i, x in enumerate(leaves):
            k = _leaf_key(x)
            if k[0] == "T":
                d = x._data if isinstance(x, Tensor) else x
                j = seen.setdefault(id(d), i)
                if j != i:  # the same array passed twice: a different dataflow
                    k = ("alias", j)
            key_parts.append(k)
        key = (spec, tuple(key_parts))
        conc = self._cache.get(key)
        if conc is not None:
            return conc(leaves)
        with self._lock:  # one trace at a time; a thread that waited finds the other's trace
            conc = self._cache.get(key)
            if conc is not None:
                return conc(leaves)
            return self._trace(key, spec, leaves)

    def _trace(self, key: Any, spec: Any, leaves: list) -> Any:
        tr = _Trace(self.name)
        positions = []
        arg_slots = []
        call_leaves = list(leaves)
        for i, x in enumerate(leaves):
            if isinstance(x, Variable):
                continue
            if _is_array(x):
                x = call_leaves[i] = _wrap(x)
            if isinstance(x, Tensor):
                if id(x._data) in tr.slot_of:  # aliased argument: one slot
                    continue
                positions.append(i)
                arg_slots.append(tr._slot(x._data))
        args, kwargs = unflatten(spec, call_leaves)
        try:
            with tr:
                out = self.python_function(*args, **kwargs)
        finally:
            if tr._undo is not None:  # a Ctrl-C on __exit__'s first bytecode skipped its pop
                _state.pop(tr)
        out_leaves, out_spec = flatten(out)
        out_refs = []
        for x in out_leaves:
            if isinstance(x, Tensor):
                out_refs.append(tr.ref(x))
            else:
                out_refs.append(tr.const(x))
        replay, src = tr.compile(arg_slots, out_refs)
        runner = self._graph_runner(tr, arg_slots, out_refs)
        if runner is not None:
            replay = runner
        tr.keep.clear()
        tr.slot_of.clear()
        counted, pattern = self._counted_key(key)
        if pattern is not None:
            self._patterns.setdefault(pattern[0], []).append(pattern[1])
        scalar_outs = tuple(
            i
            for i, (x, r) in enumerate(zip(out_leaves, out_refs))
            if r[0] == "s" and isinstance(x, Tensor) and x.ndim == 0
        )
        self._cache[key] = _Concrete(replay, src, positions, out_spec, scalar_outs)
        self._keys.append(key)
        if counted not in self._counted:
            self._counted.append(counted)
        elif len(self._keys) - len(self._counted) >= _RETRACE_WARN_AT and not self._warned_shapes:
            self._warned_shapes = True
            warnings.warn(
                f"gt.function({self.name}): {len(self._keys) - len(self._counted)} new sizes along None "
                "dimensions re-recorded the replay (gputape's replay is specialised to the shapes it saw; "
                "each new size runs the Python function again, uncounted by tracing_count). Fixed sizes "
                "(e.g. DataLoader(..., drop_remainder=True)) replay without re-recording.",
                GputapeWarning,
                stacklevel=3,
            )
        if len(self._counted) >= _RETRACE_WARN_AT and not self._warned:
            self._warned = True
            warnings.warn(
                f"gt.function({self.name}) has been traced {len(self._counted)} times: each new input "
                f"signature runs the Python function again and records it anew, which is slower than "
                f"eager execution. Latest signature: {_describe(self._keys[-1])}; previous: "
                f"{_describe(self._keys[-2])}. Pass tensors rather than Python numbers for values that "
                "change, and keep shapes fixed (e.g. DataLoader(..., drop_remainder=True)).",
                GputapeWarning,
                stacklevel=3,
            )
        return out

    def _counted_key(self, key: Any) -> tuple[Any, Any]:
        """(what a new recording counts as in ``tracing_count``, a relaxed shape pattern to remember or None).

        With an ``input_signature`` every recording is the signature's one concrete
        function. With ``reduce_retracing`` a tensor's shape counts through a pattern
        (TensorFlow's generalisation): the first shape exactly; a later shape of the same
        ranks that fits no pattern makes a new one with ``None`` where it differs from
        the latest, and shapes that fit a pattern count as it.
        """
        if self.input_signature is not None:
            return ("signature",), None
        if not self.reduce_retracing:
            return key, None
        spec, parts = key
        generic = (spec, tuple(("T", len(p[1]), *p[2:]) if p[0] == "T" else p for p in parts))
        shapes = tuple(p[1] for p in parts if p[0] == "T")
        known = self._patterns.get(generic, [])
        for pat in known:
            if all(_fits(a, b) for a, b in zip(pat, shapes)):
                return (generic, pat), None
        pat = shapes if not known else tuple(_relaxed(a, b) for a, b in zip(known[-1], shapes))
        return (generic, pat), (generic, pat)

    def _graph_runner(self, tr: _Trace, arg_slots: list[int], out_refs: list[Any]) -> _GraphRunner | None:
        if self.graphs is False:
            return None
        if self.graphs == "emulate":  # tests: the graph logic on the CPU
            emu = _EmulatedGraphs(self._refuse, self.capture_gemm, self._fuse_emulated)
            return _GraphRunner(tr, arg_slots, out_refs, emu)
        gpu = next((a for a in tr.keep if backend.is_gpu_array(a)), None)
        if gpu is None:
            return None
        return _GraphRunner(tr, arg_slots, out_refs, _CudaGraphs(backend.device_of(gpu), self.capture_gemm, self.fuse))

    _refuse: Callable[[Any], bool] | None = None  # tests: steps the emulated capture refuses
    _fuse_emulated = False  # tests: fuse backward chains in the emulated graphs

    @property
    def graph_report(self) -> dict[str, Any]:
        """For the latest trace: graph segments, captures, host steps, refused steps (empty on the CPU).

        ``transfers``: the host->device and device->host copies (and bytes) the latest call of
        the compiled step made; a step whose inputs and variables live on its GPU makes none.
        """
        conc = self._cache[self._keys[-1]] if self._keys else None
        r = conc.replay if conc is not None else None
        if not isinstance(r, _GraphRunner):
            return {}
        return {
            "graphs": sum(1 for s in r.segments if s.capture),
            "host_steps": len(r.host_only),
            "steps": len(r.steps),
            "captures": r.captures,
            "refused": list(r.failures),
            "fused_chains": [len(c) for c in r.fused_chains],
            # host<->device copies the latest call made (None before the first call)
            "transfers": None if r.transfers is None else dict(zip(_TRANSFER_KEYS, r.transfers)),
        }


def _describe(key: Any) -> str:
    parts = []
    for k in key[1]:
        if k[0] == "T":
            parts.append(f"tensor{tuple(k[1])}:{np.dtype(k[2]).name}@{k[3]}")
        elif k[0] == "P":
            parts.append(repr(k[2]))
        elif k[0] == "V":
            parts.append("variable")
        else:
            parts.append(k[0])
    return "(" + ", ".join(parts) + ")"


def function(func: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Decorator: trace ``func`` once per input signature and replay it (see :mod:`gputape.function`).

    ``@gt.function`` and ``@gt.function(...)`` both work. Keyword arguments of
    ``tf.function``: ``input_signature`` (a list of :class:`TensorSpec`) checks
    every call and counts one trace for all sizes along ``None`` dims;
    ``reduce_retracing`` counts traces as TensorFlow generalises shapes (see the
    module docstring; the replay is re-recorded per concrete shape either way).
    On cupy arrays:

    * ``graphs`` (default on): replay as CUDA graphs; ``False`` replays the same
      steps as ordinary launches.
    * ``capture_gemm`` (default on, ``GPUTAPE_CAPTURE_GEMM=0`` turns it off):
      matrix products join the graphs through direct cuBLAS calls
      (:mod:`gputape.cublas`) instead of running between them.
    * ``fuse`` (default on, ``GPUTAPE_FUSE=0``): chains of elementwise VJPs in
      the backward pass become one generated kernel each (up to 16 ops).

    On the CPU a replay is the recorded steps as straight-line Python, bitwise
    equal to eager; nothing is fused there (a fused numpy expression would not
    round identically).

    >>> import gputape as gt
    >>> @gt.function
    ... def f(x, scale):
    ...     return gt.sum(x * scale)
    >>> float(f(gt.constant([1.0, 2.0]), 3.0)), float(f(gt.constant([1.0, 2.0]), 3.0)), f.tracing_count
    (9.0, 9.0, 1)
    >>> float(f(gt.constant([1.0, 2.0]), 4.0)), f.tracing_count  # a new Python value: a new trace
    (12.0, 2)
    """
    opts = {k: kwargs.get(k) for k in ("graphs", "capture_gemm", "fuse", "input_signature")}
    opts["reduce_retracing"] = bool(kwargs.get("reduce_retracing", False))
    if func is None:
        return lambda f: Function(f, **opts)
    return Function(func, **opts)
