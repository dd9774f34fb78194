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
* **Python control flow on tensor values gives the eager result.** ``if``,
  ``while``, ``for v in tensor``, ``for i in tf.range(n)``, ``range(int(t))``,
  ``break``/``continue``/``return``: every read of a traced tensor's value into
  Python (``bool()``, ``float()``, ``int()``, ``.numpy()``, ``np.asarray``,
  ``.item()``, an op taking a tensor as a shape, count or bound, a boolean
  mask's count) is a **guard** step of the record (see :mod:`gputape.function._guards`
  for why guards rather than AutoGraph's source conversion). A replay reads the
  value again: the same value replays on; another one abandons the replay,
  undoes what it changed (variables, optimizer state, random state; ``tf.print``
  output waits for the last guard), and replays another trace of the signature
  made for that path, or traces anew. After ``MAX_TRACES`` (5) traces for one
  signature, a new path makes that signature run eagerly from then on (exact,
  uncompiled), with one warning naming the guard's line. A function without
  guards replays exactly as before (CUDA graphs included); one with guards
  replays without CUDA graphs. ``autograph=False`` (and code under
  ``do_not_convert``) refuses such reads with ``OperatorNotAllowedInGraphError``
  (a :class:`TracingError`), as TensorFlow does.
* **Results come back as tensors**: a Python number, bool or numpy array the
  function returns is a tensor (nested in the same lists, tuples, dicts and
  namedtuples), as ``tf.function`` converts its outputs; ``None`` stays ``None``.
* **Results equal eager execution**, bitwise on the CPU: a replay calls the
  same array functions on the same values in the same order as the eager run.
  Returned tensors are new constants each call.
* **Not compiled, run eagerly instead**: a call made while a GradientTape is
  recording (so the outer tape sees the ops), inside another function's trace,
  under ``gt.debug.check_numerics`` (whose checks are per-op), a signature past
  the trace bound, or one whose host Python step (a metric update) comes before
  a guard (it could not be undone if the guard failed).
* **Variables created inside the function** are created at trace time only
  (TensorFlow allows it on the first call only, for the same reason).
* **Variables are updated as eagerly**: every update computes the new value into a
  new array and swaps it in; a variable's published array is never written, so a
  value a tape, a tensor or another thread holds never changes.
* **Gradients are donated to the optimizer** on the CPU (XLA's buffer donation),
  proven from the record, not at run time: a gradient that a VJP or forward declared
  fresh made (memory it allocated: matmul's or a ufunc's result, e.g. a gradient scaled
  or clipped with gputape's ops), that the function does not
  return, that the step reads once and last, and that no other step could have viewed
  or kept, is the step's to write: SGD and Adam write ``lr * g`` (Adam: its step) and
  then the new value into it, which changes no bits and saves a weight-sized array. A
  gradient that is the seed, an argument's, a constant's or a variable's array, a view
  or pass-through (reshape, transpose, add's ``g``), returned, read later or shared by
  two variables is left intact.
* **On a GPU, with** ``optimizer_in_graph=True`` (off by default until a GPU run has
  checked it), the optimizer update is inside the CUDA graph for SGD, Adam and AdamW
  without clipping (the one-launch fused kernel; its step count and learning rate live
  on the device): before each launch the host advances ``iterations`` and writes the
  schedule's rate to the device when it changed, with Ctrl-C held until the launch is
  issued, so a step is taken whole or not at all. Other optimizers (and clipping, which
  needs host norms), and every update by default, run between graphs. A graph bakes in
  the addresses it reads and writes, so it reads and updates each variable in a buffer
  of its own: a variable's value is copied in when its array changed since the last call
  (``assign``, ``set_state``, an update between graphs), and a variable the graph updates
  gets a copy of its buffer after each launch (one device copy per variable per call:
  the price of never writing a published array).

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
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import config
from ..core import state as _state
from ..core._nest import flatten, unflatten
from ..core.tape import GputapeWarning
from ..core.tensor import Tensor, Variable, _wrap, constant
from ..devices import backend

# Every name of the former single module stays reachable as gputape.function.<name> (tests and
# other modules use private ones too). The switches Function reads (FUSE_BACKWARD, CAPTURE_GEMM)
# live below, so monkeypatching them here takes effect.
from ._codegen import (
    _fusable,
    _inline_vjp,
    _lhs,
    _render,
    _Slot,
    _slots_in,
    _template,
    compose,
    fused_kernel_source,
)
from ._graphs import (
    _COPY_KEYS,
    _FUSE_MAX,
    _FUSED_KERNELS,
    _TRANSFER_KEYS,
    _CudaGraphs,
    _EmulatedGraphs,
    _GraphRunner,
    _log,
    _Segment,
    _step_name,
)
from ._guards import MAX_TRACES, _Signature, defer_output, do_not_convert, guarded_replay, missed_warning, undo_set
from ._signature import (
    _PY_CASTS,
    InputSignatureError,
    TensorSpec,
    _bind_leaf,
    _bind_signature,
    _check_signature,
    _describe,
    _fits,
    _leaf_key,
    _pair_up,
    _param_names,
    _relaxed,
    _spec_of_value,
    _tf_dtype,
)
from ._trace import (
    _HOST_PRIMS,
    OperatorNotAllowedInGraphError,
    TracingError,
    _fixed,
    _fixed_multi,
    _is_array,
    _kind,
    _OptimizerStep,
    _PythonStep,
    _replay_assign,
    _to_device,
    _Trace,
    _unbatched,
)

__all__ = [
    "Function",
    "InputSignatureError",
    "OperatorNotAllowedInGraphError",
    "TensorSpec",
    "TracingError",
    "do_not_convert",
    "function",
]

_RETRACE_WARN_AT = 5
# Matrix products inside the CUDA graphs through gputape.devices.cublas (direct cuBLAS) by default;
# gt.function(..., capture_gemm=False), or GPUTAPE_CAPTURE_GEMM=0 in the environment, keeps
# them as ordinary launches between graphs.
CAPTURE_GEMM = os.environ.get("GPUTAPE_CAPTURE_GEMM", "1") != "0"
# Fuse elementwise VJP chains into generated kernels in CUDA-graph replays (GPUTAPE_FUSE=0: off).
FUSE_BACKWARD = os.environ.get("GPUTAPE_FUSE", "1") != "0"
# The fused optimizer update inside the CUDA graphs (GPUTAPE_GRAPH_OPTIMIZER=1: on). Off by default
# until a GPU run has checked it (tested on the CPU through the emulated graphs only); off, the
# update runs as a host step between graphs, as before.
OPTIMIZER_IN_GRAPH = config._env_switch("GPUTAPE_GRAPH_OPTIMIZER", False)


_PLAIN = frozenset((int, float, bool, str, type(None)))


def _fast_key(args: tuple) -> tuple | None:
    """A key for ``args`` that decides what :meth:`Function.__call__`'s full key decides, or None.

    Only for calls whose arguments are all leaves: host tensors (their shape and dtype), host
    arrays, Variables (their identity, as the full key) and plain Python values (type and
    value), no array passed twice. Anything else (containers, GPU arrays, other objects,
    aliasing) takes the full key. The full key flattens the arguments and builds a key per
    leaf (~8 us for a two-argument step); this one is a loop over them.
    """
    key = []
    ids = []
    for x in args:
        t = type(x)
        if t is Tensor:
            d = x._data
            if type(d) is not np.ndarray:
                return None
            key.append((d.shape, d.dtype))
            ids.append(id(d))
        elif t is Variable:
            key.append(("V", id(x)))
        elif t is np.ndarray:
            key.append(("A", x.shape, x.dtype))
            ids.append(id(x))
        elif t in _PLAIN:
            key.append((t, x))
        else:
            return None
    if len(ids) > 1 and len(set(ids)) < len(ids):
        return None  # an array passed twice is another dataflow (the full key says "alias")
    return tuple(key)


class _Concrete:
    """One traced signature: the compiled replay and how to map arguments and results.

    Replays of one signature run one at a time (``lock``): a replay reuses its buffers
    (the CUDA graphs' inputs and outputs, the variables' buffers) and the optimizer's
    slots in place, so two threads interleaving one would mix their steps.
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
        # (the per-call cost of every replay: tests in the order of the common case, host arrays)
        arrays = []
        for i in self.positions:
            x = leaves[i]
            arrays.append(x._data if isinstance(x, Tensor) else x)
        with self.lock:
            res = self.replay(*arrays)
        out = [_wrap(r) if type(r) is np.ndarray or _is_array(r) else r for r in res]
        for i in self.scalar_outs:  # a replay's inlined 0-d VJPs make numpy scalars where eager has arrays
            if isinstance(res[i], np.generic):
                out[i] = _wrap(np.asarray(res[i]))
        if self.out_spec is None:  # one result, not in a container (unflatten's first case)
            return out[0]
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
        optimizer_in_graph: Any = None,
        autograph: bool = True,
    ) -> None:
        self.python_function = python_function
        # False: a tensor's value read into Python is refused (TensorFlow's autograph=False), not guarded
        self.autograph = bool(autograph)
        self._guard_traces = 0  # traces made because a guard failed (counted in tracing_count)
        self._warned_guards = False
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
        self.optimizer_in_graph = OPTIMIZER_IN_GRAPH if optimizer_in_graph is None else bool(optimizer_in_graph)
        self._cache: dict[Any, _Concrete] = {}
        # The same recordings under a cheaper key for the common call: positional tensors,
        # arrays, variables and plain Python values (see _fast_key); filled on a _cache hit.
        self._fast: dict[tuple, _Concrete] = {}
        self._keys: list[Any] = []
        self._lock = threading.RLock()  # (re-entered: a guard miss found under it traces again)
        self._warned = False
        functools.update_wrapper(self, python_function)

    @property
    def tracing_count(self) -> int:
        return len(self._counted) + self._guard_traces

    def experimental_get_tracing_count(self) -> int:
        return self.tracing_count

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
                self.optimizer_in_graph,
                self.autograph,
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
            return _outputs(self.python_function(*args, **kwargs))
        fast = None if kwargs else _fast_key(args)
        if fast is not None:
            conc = self._fast.get(fast)
            if conc is not None:
                return conc(args)  # (positional leaves only: flatten would give these leaves)
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
            if fast is not None:
                self._fast[fast] = conc
            return conc(leaves)
        with self._lock:  # one trace at a time; a thread that waited finds the other's trace
            conc = self._cache.get(key)
            if conc is not None:
                return conc(leaves)
            return self._trace(key, spec, leaves)

    def _missed(self, sig: _Signature, leaves: list, guard: Any) -> Any:
        """No trace of ``sig`` took this call's path: trace it, or past the bound run eagerly."""
        with self._lock:
            if not sig.eager and len(sig.traces) < MAX_TRACES:
                return self._trace(sig.key, sig.spec, leaves)
            if not sig.eager:
                sig.eager = True
                self._warn_eager(len(sig.traces), guard, f"{len(sig.traces) + 1} paths through its Python control flow")
        # arrays as tensors, as a trace passes them
        args, kwargs = unflatten(sig.spec, [_wrap(x) if _is_array(x) else x for x in leaves])
        return _outputs(self.python_function(*args, **kwargs))

    def _warn_eager(self, n: int, guard: Any, why: str) -> None:
        if not self._warned_guards:
            self._warned_guards = True
            missed_warning(self.name, n, None if guard is None else guard.where, why)

    def _trace(self, key: Any, spec: Any, leaves: list) -> Any:
        tr = _Trace(self.name)
        tr.autograph = self.autograph
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
        out_leaves = [_output(x) for x in out_leaves]
        out = out_leaves[0] if out_spec is None else unflatten(out_spec, out_leaves)
        out_refs = []
        for x in out_leaves:
            if isinstance(x, Tensor):
                out_refs.append(tr.ref(x))
            else:
                out_refs.append(tr.const(x))
        undo = None
        if tr.guards:
            pending: list = []
            defer_output(tr, pending)
            undo = undo_set(tr)
        replay, src = tr.compile(arg_slots, out_refs)
        if undo is not None:
            # no CUDA graphs: a graph cannot stop at a guard (a trace without guards keeps them)
            replay = guarded_replay(replay, undo[0], undo[1], pending)
        else:
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
            if type(r) is _Slot and isinstance(x, Tensor) and x.ndim == 0
        )
        conc = _Concrete(replay, src, positions, out_spec, scalar_outs)
        sig = self._cache.get(key)
        if undo is None and not isinstance(sig, _Signature):
            self._cache[key] = conc
        else:
            if not isinstance(sig, _Signature):
                sig = self._cache[key] = _Signature(self, key, spec)
                self._fast.clear()  # (a fast key may name the signature's former entry)
            if sig.traces:  # a path its traces had not seen: a trace counted beyond the signature's
                self._guard_traces += 1
            sig.traces.insert(0, conc)
            if undo is not None and not undo[2]:
                sig.eager = True
                self._warn_eager(
                    len(sig.traces),
                    tr.steps[tr.guards[0]].fn,
                    "a host Python step that changes state (a metric update) comes before a value read into "
                    "Python, and a replay could not take it back if that value changed",
                )
            if sig.traces[1:]:
                return out
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
        graphs = _CudaGraphs(backend.device_of(gpu), self.capture_gemm, self.fuse, self.optimizer_in_graph)
        return _GraphRunner(tr, arg_slots, out_refs, graphs)

    _refuse: Callable[[Any], bool] | None = None  # tests: steps the emulated capture refuses
    _fuse_emulated = False  # tests: fuse backward chains in the emulated graphs

    @property
    def graph_report(self) -> dict[str, Any]:
        """For the latest trace: graph segments, captures, host steps, refused steps (empty on the CPU).

        ``transfers``: the host->device and device->host copies (and bytes) the latest call of
        the compiled step made; a step whose inputs and variables live on its GPU makes none.
        ``copies``: its device-to-device copies: into the graphs' argument buffers (one per
        argument), of variables (into the graphs' buffer for a variable whose array changed
        since the last call; out of it, into a new array, for each variable the graphs
        update), into an optimizer's captured slots (after ``set_state``), and results copied
        out. ``optimizers_in_graphs``:
        optimizer updates the graphs hold (the others run as host steps between them).
        """
        conc = self._cache[self._keys[-1]] if self._keys else None
        r = conc.replay if conc is not None else None
        if not isinstance(r, _GraphRunner):
            return {}
        return {
            "graphs": sum(1 for s in r.segments if s.capture),
            # steps run between the graphs (variable reads are done before a graph: not counted)
            "host_steps": sum(1 for i in r.host_only if r.steps[i].kind not in ("var", "param")),
            "steps": len(r.steps),
            "captures": r.captures,
            "refused": list(r.failures),
            "fused_chains": [len(c) for c in r.fused_chains],
            # host<->device copies the latest call made (None before the first call)
            "transfers": None if r.transfers is None else dict(zip(_TRANSFER_KEYS, r.transfers)),
            "copies": None if r.transfers is None else dict(zip(_COPY_KEYS, r.copies)),
            "optimizers_in_graphs": sum(1 for i, st in enumerate(r.steps) if st.kind == "opt" and i not in r.host_only),
        }


def _output(x: Any) -> Any:
    """A traced function's result leaf as ``tf.function`` returns it: Python numbers, numpy
    scalars and arrays become tensors (TensorFlow converts a function's outputs); tensors,
    None and other objects stay as they are."""
    if isinstance(x, (bool, int, float, np.generic, np.ndarray)):
        return constant(x)
    return x


def _outputs(out: Any) -> Any:
    """:func:`_output` for every leaf of a structure (the function's result run eagerly)."""
    if isinstance(out, Tensor) or out is None:
        return out
    leaves, spec = flatten(out)
    if all(isinstance(x, Tensor) or x is None for x in leaves):
        return out
    leaves = [_output(x) for x in leaves]
    return leaves[0] if spec is None else unflatten(spec, leaves)


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
      (:mod:`gputape.devices.cublas`) instead of running between them.
    * ``fuse`` (default on, ``GPUTAPE_FUSE=0``): chains of elementwise VJPs in
      the backward pass become one generated kernel each (up to 16 ops).
    * ``optimizer_in_graph`` (default off, ``GPUTAPE_GRAPH_OPTIMIZER=1`` turns it
      on): an SGD/Adam/AdamW update (no clipping) runs inside the graph as the
      fused kernel, the step count and learning rate on the device, instead of as
      a host step between graphs. Off until a GPU run has checked it: it is
      tested on the CPU through the emulated graphs only.

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
    opts = {k: kwargs.get(k) for k in ("graphs", "capture_gemm", "fuse", "input_signature", "optimizer_in_graph")}
    opts["reduce_retracing"] = bool(kwargs.get("reduce_retracing", False))
    opts["autograph"] = bool(kwargs.get("autograph", True))
    if func is None:
        return lambda f: Function(f, **opts)
    return Function(func, **opts)
