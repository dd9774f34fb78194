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
  ``DataLoader(..., drop_last=True)``).
* **Python runs once per trace.** Side effects (prints, appends) happen at
  trace time only; numpy code on host values is frozen as a constant, as in
  TensorFlow. gputape's own stateful pieces are replayed: optimizer updates
  (learning-rate schedules and step counts advance), ``Variable.assign*``,
  ``gt.random`` draws and ``Dropout`` masks.
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

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from . import backend
from . import tape as _tape
from .tape import GputapeWarning, Node, _where
from .tensor import Tensor, Variable, _new, _wrap

__all__ = ["Function", "TracingError", "function"]

_RETRACE_WARN_AT = 5


class TracingError(TypeError):
    """A traced function needed a tensor's value in Python (raised at trace time by ``gt.function``)."""


# -- the record ------------------------------------------------------------------------------


class _Trace:
    """The record of one traced call: steps over numbered slots, each slot one array value.

    Arrays are recognised by identity; every array the record refers to is kept
    alive until the record is compiled, so no id is reused while tracing.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.thread = threading.get_ident()
        self.slot_of: dict[int, int] = {}
        self.keep: list[Any] = []
        self.steps: list[tuple[Any, Any, Any]] = []  # (fn | Variable, refs, outs)
        self.nslots = 0
        self.consts: list[Any] = []
        self.paused = 0

    def owned(self) -> bool:
        return self.paused == 0 and threading.get_ident() == self.thread

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

    def _step(self, fn: Any, refs: list, out: Any) -> None:
        self.steps.append((fn, refs, self.outs(out)))

    # hooks called by the tape, tensors, optimizers and random draws
    def read_variable(self, var: Variable) -> int:
        if not self.owned():
            return -1
        k = self._slot(var._data)
        self.steps.append((var, None, k))
        return k

    def forward(self, prim: Any, args: tuple, params: dict, datas: list | None, res: Any) -> None:
        if not self.owned():
            return
        first = next(a._data for a in args if isinstance(a, Tensor))
        xp = np if type(first) is np.ndarray else backend.xp_of(first)
        fn: Any = functools.partial(prim.fwd, xp, **params)
        consts = datas if datas is not None else args
        refs = []
        for a, c in zip(args, consts):
            if isinstance(a, Tensor) or c is a:
                refs.append(self.ref(a))  # raw arrays too: an argument's array is a slot
            elif id(a) in self.slot_of:  # a traced host array the op moved to its GPU
                dev = backend.device_of(c)
                self._step(functools.partial(_to_device, dev=dev), [self.ref(a)], c)
                refs.append(self.ref(c))
            else:
                refs.append(self.const(c))
        if prim.nout == 1:
            if res._data.ndim == 0:
                fn = _fixed(fn)
        else:
            fn = _fixed_multi(fn)
        self._step(fn, refs, res)

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
        self._step(fn, [self.ref(a) if isinstance(a, Tensor) else self.const(a) for a in args], res)

    def vjp(self, F: Any, node: Node, needs: Any, lead: tuple, g: Any, saved: Any, in_grads: list) -> None:
        if not self.owned():
            return
        static = _new(Node)  # the node without its residuals: the replay passes its own
        for name in Node.__slots__:
            setattr(static, name, getattr(node, name, None))
        static.saved = None
        fn = functools.partial(_tape._node_grads, F, static, needs, lead)
        self._step(fn, [self.ref(g)] + [self.ref(s) for s in saved], list(in_grads))

    def call(self, fn: Callable[..., Any], args: tuple, out: Any) -> None:
        if not self.owned():
            return
        self._step(fn, [self.ref(a) for a in args], out)

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

    def python_step(self, fn: Callable[..., Any], args: tuple) -> None:
        """Run host-side Python ``fn(*args)`` now and again on every replay with that call's values.

        For stateful Python that reads tensor values (running metrics): arrays
        reach ``fn`` as tensors, other arguments as they were.
        """
        self.paused += 1
        try:
            fn(*args)
        finally:
            self.paused -= 1
        self._step(_PythonStep(fn), [self.ref(a) for a in args], None)

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
        for i, (_fn, refs, _) in enumerate(self.steps):
            if refs is not None:
                for k in _slots_in(refs):
                    last[k] = i
        returned = set(_slots_in(out_refs))
        ns: dict[str, Any] = {}
        lines = [f"def replay({', '.join(f's{k}' for k in arg_slots)}):"]
        dead_args = [k for k in arg_slots if k not in last and k not in returned]
        if dead_args:
            lines.append(f"    del {', '.join(f's{k}' for k in dead_args)}")
        for i, (fn, refs, outs) in enumerate(self.steps):
            if isinstance(fn, Variable):
                ns[f"V{i}"] = fn
                lines.append(f"    s{outs} = V{i}._data")
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
        src = "\n".join(lines) + "\n"
        exec(compile(src, f"<gt.function {self.name}>", "exec"), ns)
        return ns["replay"], src


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
        self.opt._apply_live([(_wrap(g), v) for g, v in zip(grads, variables)])
        return [v._data for v in variables]


# -- the decorator ---------------------------------------------------------------------------


def _leaves(x: Any, out: list) -> Any:
    """Flatten args into ``out``; return a hashable spec of the structure."""
    if isinstance(x, (list, tuple)) and not isinstance(x, Tensor):
        return (type(x).__name__, tuple(_leaves(e, out) for e in x))
    if isinstance(x, dict):
        keys = sorted(x, key=repr)
        return ("dict", tuple(keys), tuple(_leaves(x[k], out) for k in keys))
    out.append(x)
    return None


def _rebuild(spec: Any, it: Any) -> Any:
    if spec is None:
        return next(it)
    kind = spec[0]
    if kind == "dict":
        return {k: _rebuild(s, it) for k, s in zip(spec[1], spec[2])}
    items = [_rebuild(s, it) for s in spec[1]]
    return tuple(items) if kind == "tuple" else items


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
    """One traced signature: the compiled replay and how to map arguments and results."""

    def __init__(self, replay: Callable[..., Any], source: str, positions: list[int], out_spec: Any, n_out: int):
        self.replay = replay
        self.source = source
        self.positions = positions  # which flat argument leaves are tensors, in replay order
        self.out_spec = out_spec
        self.n_out = n_out

    def __call__(self, leaves: list) -> Any:
        arrays = []
        for i in self.positions:
            x = leaves[i]
            arrays.append(x._data if isinstance(x, Tensor) else x)
        res = self.replay(*arrays)
        return _rebuild(self.out_spec, iter([_wrap(r) if _is_array(r) else r for r in res]))


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

    def __init__(self, python_function: Callable[..., Any], name: str | None = None) -> None:
        self.python_function = python_function
        self.name = name or getattr(python_function, "__name__", "function")
        self._cache: dict[Any, _Concrete] = {}
        self._keys: list[Any] = []
        self._lock = threading.Lock()
        self._warned = False
        functools.update_wrapper(self, python_function)

    @property
    def tracing_count(self) -> int:
        return len(self._keys)

    def experimental_get_tracing_count(self) -> int:
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
            bound = Function(self.python_function.__get__(obj, objtype), self.name)
            obj.__dict__[f"__gt_function_{self.name}"] = bound
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _tape._TRACE is not None or _tape._tls.recording or _tape._NUMERICS:
            return self.python_function(*args, **kwargs)
        leaves: list[Any] = []
        spec = _leaves((args, kwargs), leaves)
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
        with self._lock:
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
        args, kwargs = _rebuild(spec, iter(call_leaves))
        _tape._bump(1)
        prev, _tape._TRACE = _tape._TRACE, tr
        try:
            out = self.python_function(*args, **kwargs)
        finally:
            _tape._TRACE = prev
            _tape._bump(-1)
        out_leaves: list[Any] = []
        out_spec = _leaves(out, out_leaves)
        out_refs = []
        for x in out_leaves:
            if isinstance(x, Tensor):
                out_refs.append(tr.ref(x))
            else:
                out_refs.append(tr.const(x))
        replay, src = tr.compile(arg_slots, out_refs)
        tr.keep.clear()
        tr.slot_of.clear()
        self._cache[key] = _Concrete(replay, src, positions, out_spec, len(out_refs))
        self._keys.append(key)
        if len(self._keys) >= _RETRACE_WARN_AT and not self._warned:
            self._warned = True
            warnings.warn(
                f"gt.function({self.name}) has been traced {len(self._keys)} times: each new input "
                f"signature runs the Python function again and records it anew, which is slower than "
                f"eager execution. Latest signature: {_describe(self._keys[-1])}; previous: "
                f"{_describe(self._keys[-2])}. Pass tensors rather than Python numbers for values that "
                "change, and keep shapes fixed (e.g. DataLoader(..., drop_last=True)).",
                GputapeWarning,
                stacklevel=3,
            )
        return out


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
    ``tf.function`` (``input_signature``, ``jit_compile``, ``reduce_retracing``,
    ``autograph``) are accepted and have no effect.

    >>> import gputape as gt
    >>> @gt.function
    ... def f(x, scale):
    ...     return gt.sum(x * scale)
    >>> float(f(gt.constant([1.0, 2.0]), 3.0)), float(f(gt.constant([1.0, 2.0]), 3.0)), f.tracing_count
    (9.0, 9.0, 1)
    >>> float(f(gt.constant([1.0, 2.0]), 4.0)), f.tracing_count  # a new Python value: a new trace
    (12.0, 2)
    """
    if func is None:
        return lambda f: Function(f)
    return Function(func)
