"""The record of a ``gt.function`` trace: every array computation of one call, as numbered slots and steps."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import state as _state
from ..core.backward.sweep import _fit, _fit_all, _unbatched_vjp, _vjp_raw
from ..core.custom_gradient import _custom_fwd
from ..core.dispatch import typed_path
from ..core.expr import typed_number
from ..core.primitive import Node
from ..core.recording import _where
from ..core.tensor import Tensor, Variable, _new, _wrap
from ..devices import backend
from ._codegen import _Const, _Fit, _List, _Slot, _Step, compile_replay


class TracingError(TypeError):
    """A traced function needed a tensor's value in Python (raised at trace time by ``gt.function``)."""

    __module__ = "gputape.function"  # its public home (reprs, tracebacks, pickles)


class OperatorNotAllowedInGraphError(TracingError):
    """TensorFlow's error for a tensor's value used in Python where conversion is off.

    Raised while tracing a function made with ``autograph=False`` (or code under
    ``tf.autograph.experimental.do_not_convert``): there a value read into Python is
    refused rather than guarded. A :class:`TracingError`, so a ``TypeError`` too, as in
    TensorFlow.
    """

    __module__ = "gputape.function"


class _GuardFailedError(Exception):
    """A replay's guard saw another value than its trace did: the replay is abandoned and undone.

    Never escapes ``gt.function``: the caller rolls the state back and replays another trace,
    traces anew, or runs the function eagerly.
    """

    def __init__(self, guard: _Guard) -> None:
        super().__init__(guard.where)
        self.guard = guard


def _same(a: Any, b: Any) -> bool:
    """Whether two values read into Python are the same: arrays bit for bit (shape and dtype too),
    Python values by type and repr (exact for floats: -0.0 and nan included)."""
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return type(a) is type(b) and repr(a) == repr(b)


class _Guard:
    """A guard step: the value read into Python while tracing, read again the same way at replay.

    ``convert`` (a function of the host array, see ``gputape.core.tensor.read_value``) is
    called on the replay's array; another value than ``value`` raises :class:`_GuardFailedError`.
    """

    def __init__(self, convert: Callable[[Any], Any], value: Any, where: str | None) -> None:
        self.convert = convert
        self.value = value
        self.where = where

    def __call__(self, arr: Any) -> None:
        if not _same(self.convert(backend.to_host(arr)), self.value):
            raise _GuardFailedError(self)


class _Deferred:
    """A host Python step that only emits (``tf.print``): in a replay with guards it runs once
    every guard has passed, so an abandoned replay prints nothing."""

    def __init__(self, fn: Callable[..., Any], pending: list) -> None:
        self.fn = fn
        self.pending = pending

    def __call__(self, *args: Any) -> None:
        self.pending.append((self.fn, args))


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
        self.steps: list[_Step] = []
        self.nslots = 0
        self.consts: list[Any] = []
        self.paused = 0
        # steps whose results are memory they allocated (a forward declared fresh_forward, on host
        # arrays): gt.function's replay may donate such a result to an optimizer step
        self.fresh_steps: set[int] = set()
        # values read into Python (gt.function's control flow): the guard steps' indices
        self.guards: list[int] = []
        # host Python steps (python_step): index -> whether it only emits (tf.print)
        self.python_steps: dict[int, bool] = {}
        self.autograph = True  # False: a value read into Python is refused (tf.function(autograph=False))
        self.unconverted = 0  # depth of tf.autograph.experimental.do_not_convert calls running

    def owned(self) -> bool:
        return self.paused == 0

    # references
    def _slot(self, arr: Any) -> int:
        k = self.nslots
        self.nslots += 1
        self.slot_of[id(arr)] = k
        self.keep.append(arr)
        return k

    def const(self, obj: Any) -> _Const:
        self.consts.append(obj)
        return _Const(len(self.consts) - 1)

    def ref(self, x: Any) -> Any:
        if isinstance(x, Variable):
            return _Slot(self.read_variable(x))
        if isinstance(x, Tensor):
            x = x._data
        k = self.slot_of.get(id(x))
        if k is not None:
            return _Slot(k)
        if type(x) is list:
            return _List([None if e is None else self.ref(e) for e in x])
        return self.const(x)

    def outs(self, out: Any) -> Any:
        if out is None:
            return None
        if isinstance(out, (list, tuple)):
            return [None if o is None else self._slot(o._data if isinstance(o, Tensor) else o) for o in out]
        return self._slot(out._data if isinstance(out, Tensor) else out)

    def _step(self, fn: Any, refs: list, out: Any, kind: str = "host") -> None:
        self.steps.append(_Step(fn, refs, self.outs(out), kind))

    # hooks called by the tape, tensors, optimizers and random draws
    def read_variable(self, var: Variable) -> int:
        if not self.owned():
            return -1
        k = self._slot(var._data)
        self.steps.append(_Step(var, None, k, "var"))
        return k

    def forward(self, prim: Any, args: tuple, params: dict, datas: list | None, res: Any) -> None:
        if not self.owned() or prim.fwd is _custom_fwd:  # (custom: its inner ops were recorded)
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
        if prim.fresh_forward and xp is np:
            self.fresh_steps.add(len(self.steps) - 1)
        if prim.name == "getitem":
            self._mask_guards(args)

    def _mask_guards(self, args: tuple) -> None:
        """``x[mask]``'s shape is the mask's count of True: Python that reads the result's shape
        (or code shaped by it, as the backward's) holds only for that count, so it is guarded."""
        for a in args[1:]:
            d = a._data if isinstance(a, Tensor) else a
            if getattr(d, "dtype", None) == np.bool_ and d.ndim and id(d) in self.slot_of:
                self._guard(_Slot(self.slot_of[id(d)]), _count_true, _count_true(backend.to_host(d)))

    def _guard(self, ref: Any, convert: Callable[[Any], Any], value: Any, where: str | None = None) -> None:
        self.guards.append(len(self.steps))
        self.steps.append(_Step(_Guard(convert, value, where or _where()), [ref], None, "guard"))

    def forward1(self, prim: Any, args: tuple, res: Tensor) -> None:
        """The ops' fast paths: one or two operands, no parameters, ``prim.cpu`` on host arrays."""
        if not self.owned():
            return
        d = next(a._data for a in args if isinstance(a, Tensor))
        fn: Any
        typed = False
        if type(d) is np.ndarray and prim.cpu is not None:
            fn = prim.cpu
            typed = typed_path(prim)  # the eager op handed its ufunc a typed number: the replay does too
        else:
            fn = functools.partial(prim.fwd, np if type(d) is np.ndarray else backend.xp_of(d))
        if res._data.ndim == 0:
            fn = _fixed(fn)
        refs = [self.ref(a) if isinstance(a, Tensor) else self.const(typed_number(a, d) if typed else a) for a in args]
        self._step(fn, refs, res, _kind(prim))
        if prim.fresh_forward and type(d) is np.ndarray:
            self.fresh_steps.add(len(self.steps) - 1)

    def node_grads(self, F: Any, node: Node, needs: Any, lead: tuple, g: Any, saved: Any) -> list:
        """A node's backward step, run now and recorded: the VJP as one call, then a reduce/cast per input."""
        own = self.owned()
        self.paused += 1  # a custom gradient's own ops are inside this one step
        try:
            raw = _vjp_raw(F, node, needs, lead, g, saved)
            out = _fit_all(F, node, needs, lead, raw)
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
        # (the layout _codegen._declared_vjp decodes)
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
                fit = _Fit(_fit, F, shape=shape, nb=nb, cast=None if casts is None else casts[k])
                fit.traced = r.shape
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

    def python_step(self, fn: Callable[..., Any], args: tuple, wrap: bool = True, emits_only: bool = False) -> None:
        """Run host-side Python ``fn(*args)`` now and again on every replay with that call's values.

        For stateful Python that reads tensor values (running metrics): arrays
        reach ``fn`` as tensors (raw arrays with ``wrap=False``), other arguments
        as they were. ``emits_only``: ``fn`` changes nothing a later step reads
        (``tf.print``), so a replay with guards may run it after its last guard.
        """
        self.paused += 1
        try:
            fn(*args)
        finally:
            self.paused -= 1
        self.python_steps[len(self.steps)] = emits_only
        self._step(_PythonStep(fn) if wrap else fn, [self.ref(a) for a in args], None)

    def exported(self, t: Tensor, convert: Callable[[Any], Any] | None, value: Any) -> None:
        """A value was read into Python (``gputape.core.tensor.read_value``): record a guard on it.

        A constant's value is the same at every call and needs none; a traced tensor's (an
        argument, anything computed from one, a Variable's value) may not be, so the replay
        reads it again and compares (:class:`_Guard`).
        """
        if not self.owned():
            return
        if not (isinstance(t, Variable) or id(t._data) in self.slot_of):
            return
        where = _where()
        if convert is None or not self.autograph or self.unconverted:
            why = (
                "AutoGraph is disabled in this function (tf.function(autograph=False)). Try decorating it "
                "directly with @tf.function"
                if not self.autograph
                else "it runs under tf.autograph.experimental.do_not_convert. Remove do_not_convert"
            )
            raise OperatorNotAllowedInGraphError(
                f"gt.function({self.name}): using a traced tensor's value in Python (bool(), float(), int(), "
                f".numpy(), np.asarray(), .item() or an op that takes it as a Python number)"
                f"{f' at {where}' if where else ''} is not allowed: {why}, or use tensor ops instead "
                "(gt.where, gt.maximum, gt.cast)."
            )
        self._guard(self.ref(t), convert, value, where)

    def compile(self, arg_slots: list[int], out_refs: list[Any]) -> tuple[Callable[..., Any], str]:
        """Straight-line Python source for the record; each slot deleted after its last use."""
        return compile_replay(self.name, self.steps, self.consts, arg_slots, out_refs, self.fresh_steps)


# Primitives whose forward or VJP calls cuBLAS/cuSOLVER: CuPy refuses those during stream
# capture (measured: "calling cuBLAS API during stream capture is currently unsupported").
_HOST_PRIMS = {"matmul", "einsum", "tensordot", "dot", "inner", "solve", "inv", "det", "cholesky", "svd", "qr"}


def _kind(prim: Any) -> str:
    """'device' when a CUDA graph may capture the primitive's work; 'host...' otherwise."""
    if prim.fwd is _custom_fwd:
        return "host"  # custom gradients run user Python
    if prim.name in _HOST_PRIMS:
        return f"host:{prim.name}"  # (matmul: capturable through gputape.devices.cublas, see _GraphRunner)
    return "device"


def _count_true(host: Any) -> int:
    return int(np.count_nonzero(host))


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
    return _unbatched_vjp(F, g, needs, node, list(saved), lead)


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

    # the CPU replay may hand it gradients that are its own to overwrite (_codegen.donations)
    takes_donations = True

    def __init__(self, opt: Any, variables: list[Variable]) -> None:
        self.opt = opt
        self.variables = variables

    def __call__(self, *grads: Any) -> list[Any]:
        return self.donating(None, *grads)

    def donating(self, donated: tuple[bool, ...] | None, *grads: Any) -> list[Any]:
        """The step; ``donated[k]``: the replay proved gradient ``k`` an array nothing else can see."""
        variables = self.variables
        # host arrays as they are (_apply_live takes them as it takes a tensor's); others wrapped,
        # so a device array keeps the tensor's device check
        self.opt._apply_live(
            [
                (g if type(g) is np.ndarray else _wrap(np.asarray(g) if isinstance(g, np.generic) else g), v)
                for g, v in zip(grads, variables)
            ],
            donated,
        )
        return [v._data for v in variables]


def _is_array(x: Any) -> bool:
    return type(x) is np.ndarray or backend.is_gpu_array(x)
