"""GradientTape: recording ops and the backward sweep.

How it works, in four pieces:

* **Primitives** (:class:`Primitive`) pair a forward function with its VJP and
  declare which values the VJP needs (``save``/``save_out``). ``gputape.ops``
  registers every primitive in :data:`REGISTRY`.
* **apply** runs a primitive's forward on raw arrays and, only when something
  observes this thread (a tape, a watcher, a trace, a debug mode: the flag
  ``gputape._state.anywhere``, then this thread's ``gputape._state.tls.obs``
  tell), hands the result to ``_record`` with that thread's
  :class:`~gputape._state.Observers`.
* **Recording**: a tape is a dict ``tensor id -> Node`` plus the node list in
  recording order. An op is recorded on a tape when one of its inputs is
  tracked by that tape (watched, or produced by an op it recorded), exactly
  TensorFlow's rule, so nested tapes each record only what they watch.
  Tensors know nothing of tapes: ``del tape`` frees everything it saved.
* **The sweep** walks the node list backwards. The VJPs are written against a
  namespace ``F`` that is either the raw array module (fast path: no tape is
  recording) or gputape's own ops (a tape is recording the gradient
  computation, so higher-order derivatives come for free). Broadcasting is
  undone in one place, here, not in the VJPs. A leading batch of cotangents
  (``lead``) lets ``jacobian`` run one vectorised sweep instead of one per
  output element; every VJP is written to carry such leading dimensions.
"""

from __future__ import annotations

import enum
import inspect
import logging
import operator
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _errors, _state, backend
from . import tensor as _tensor_mod
from ._backward_compile import gradients as _compiled_gradients
from ._nest import flatten as _flatten
from ._nest import unflatten as _unflatten
from ._state import tls as _tls
from .device import gpu_operands as _gpu_operands
from .tensor import FLOAT_DTYPES, Tensor, Variable, _new, _next_id, _wrap, _wrap_op

_log = logging.getLogger("gputape")
_ndarray = np.ndarray
_NOPARAMS: dict[str, Any] = {}

# What observes ops (tapes, watchers, gt.function traces, check_numerics) is this
# thread's observer stack, gputape._state.tls.obs: None when nothing does. The ops test
# gputape._state.anywhere first (false while no thread observes anything), so code
# outside every tape pays one module-attribute read per op.
# Every tape that was entered and is still alive, for the memory report
# (gt.memory_info(): bytes held by live tapes).
_live_tapes: weakref.WeakSet = weakref.WeakSet()


def _where() -> str | None:
    """The user's ``file:line`` that called into gputape (the first frame outside it)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        if name != "gputape" and not name.startswith("gputape."):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return None


class GputapeWarning(UserWarning):
    """Warnings raised by gputape itself (integer sources, ignored arguments)."""


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, GputapeWarning, stacklevel=3)


class UnconnectedGradients(str, enum.Enum):
    """What ``gradient`` returns for a source the target does not depend on.

    ``RAISE`` (gputape's addition) raises :class:`UnconnectedGradientError`
    carrying :meth:`GradientTape.explain`'s answer.
    """

    NONE = "none"
    ZERO = "zero"
    RAISE = "raise"


class UnconnectedGradientError(ValueError):
    """A gradient is None under ``unconnected_gradients='raise'``; ``.explanation`` says why."""

    def __init__(self, message: str, explanation: Any = None) -> None:
        super().__init__(message)
        self.explanation = explanation


def _parse_unconnected(value: Any) -> UnconnectedGradients:
    try:
        return UnconnectedGradients(value.value if isinstance(value, UnconnectedGradients) else value)
    except ValueError:
        raise ValueError(
            f"Unknown value for unconnected_gradients: {value!r}; use 'none', 'zero', 'raise' "
            "or gt.UnconnectedGradients.NONE / .ZERO / .RAISE"
        ) from None


# ---------------------------------------------------------------------------------
# Primitives and their registry


class Primitive:
    """A differentiable operation: forward on raw arrays, VJP beside it.

    ``fwd(xp, *arrays, **params)`` computes the output with array module
    ``xp``. ``vjp(F, g, needs, nb, node, *saved)`` returns one cotangent per
    positional input (``None`` where ``needs[i]`` is False or the input is not
    differentiable). ``saved`` holds the inputs listed in ``save`` (``True``
    for all, a ``slice`` for those from a position on) followed by the output when
    ``save_out`` is set. ``g`` may carry
    ``nb`` extra leading (batch) dimensions; VJPs use negative axes so that
    they stay correct under them.
    """

    __slots__ = ("batchable", "cpu", "doc", "fwd", "name", "nout", "save", "save_out", "vjp")

    def __init__(
        self,
        name: str,
        fwd: Callable[..., Any],
        save: bool | tuple[int, ...] | slice = (),
        save_out: bool = False,
        nout: int = 1,
        batchable: bool = True,
    ) -> None:
        self.name = name
        self.fwd = fwd
        self.vjp: Callable[..., Any] | None = None
        self.save = save
        self.save_out = save_out
        self.nout = nout
        self.batchable = batchable
        self.doc = fwd.__doc__
        # Optional C-level callable equal to fwd for numpy inputs (np.tanh,
        # operator.mul): saves a Python frame per op on the CPU fast paths.
        self.cpu: Callable[..., Any] | None = None

    def defvjp(self, vjp: Callable[..., Any]) -> Callable[..., Any]:
        """Register ``vjp`` as this primitive's vector-Jacobian product."""
        self.vjp = vjp
        return vjp

    def __call__(self, *args: Any, **params: Any) -> Any:
        return apply(self, args, params)

    def __repr__(self) -> str:
        return f"<gt primitive {self.name}>"


REGISTRY: dict[str, Primitive] = {}


def primitive(
    name: str,
    *,
    save: bool | tuple[int, ...] | slice = (),
    save_out: bool = False,
    nout: int = 1,
    batchable: bool = True,
) -> Callable[[Callable[..., Any]], Primitive]:
    """Decorator: register ``fwd`` as primitive ``name``; add its VJP with ``.defvjp``.

    >>> from gputape.tape import primitive
    >>> @primitive("demo_cube", save=True)
    ... def cube(xp, x):
    ...     return x * x * x
    >>> @cube.defvjp
    ... def _(F, g, needs, nb, node, x):
    ...     return (g * 3 * x * x,)
    >>> import gputape as gt
    >>> x = gt.constant(2.0)
    >>> with gt.GradientTape() as t:
    ...     t.watch(x); y = cube(x)
    >>> float(t.gradient(y, x))
    12.0
    >>> del REGISTRY["demo_cube"]  # keep the doctest out of the real registry
    """

    def deco(fwd: Callable[..., Any]) -> Primitive:
        if name in REGISTRY:
            raise ValueError(f"primitive {name!r} is already registered")
        prim = Primitive(name, fwd, save, save_out, nout, batchable)
        REGISTRY[name] = prim
        return prim

    return deco


class Node:
    """One recorded op: what the sweep needs to call its VJP, and nothing else.

    ``ids``/``shapes`` describe the positional inputs (id 0 for constants),
    ``casts`` the dtype to cast each input's cotangent back to when the op
    promoted it (None when nothing was promoted), ``saved`` the raw residual
    arrays the primitive declared, ``out`` the output id (a tuple of ids for
    multi-output ops). Tapes hold nodes; a node's residuals are freed when the
    last tape that recorded it drops it. ``meta`` is the output's ``(shape, dtype)``
    (a tuple of those for multi-output ops), for ``tape.summary()``: two references,
    known when the op ran. ``info`` (user file:line, output shape and dtype) is set
    only while locations are recorded (``gt.debug``).
    """

    __slots__ = ("casts", "ids", "info", "meta", "out", "params", "prim", "saved", "shapes")

    def __repr__(self) -> str:
        return f"<Node {self.prim.name} in={self.shapes} out={self.out}>"

    def saved_ids(self) -> tuple[int, ...]:
        """The tensor id behind each saved residual (0 for constants)."""
        s = self.prim.save
        if s is True or type(s) is slice:
            sids = self.ids if s is True else self.ids[s]
        else:
            sids = tuple(self.ids[i] for i in s) if s else ()
        if self.prim.save_out:
            sids = sids + (self.out if type(self.out) is tuple else (self.out,))
        return sids


def _op_error(prim: Primitive, args: tuple, params: dict, exc: Exception) -> Exception:
    """Turn an array library's error into one that names the function, op, shapes, dtypes, devices.

    The forward's own exception stays the cause (``raise _op_error(...) from exc``); one
    gputape already explained is re-raised as it is, and so are MemoryError and
    FloatingPointError (``_errors.NEVER_WRAP``), which callers catch by class, and runtime
    failures (RuntimeError, NotImplementedError, a CUDA error): they are not about the arguments.
    """
    if isinstance(exc, (*_errors.NEVER_WRAP, RuntimeError)) or _errors.is_clear(exc):
        raise exc
    shapes, dtypes, devices = [], [], []
    for a in args:
        if isinstance(a, Tensor):
            shapes.append(a._data.shape)
            dtypes.append(str(a._data.dtype))
            devices.append(backend.device_of(a._data))
        elif isinstance(a, (np.ndarray, np.generic)):
            shapes.append(a.shape)
            dtypes.append(str(a.dtype))
            devices.append("cpu")
        else:
            shapes.append(type(a).__name__)
            dtypes.append("-")
            devices.append(backend.device_of(a) if hasattr(a, "shape") else "-")
    name = _errors.where(prim.name)
    real = sorted({d for d in devices if d != "-"})
    if len(real) > 1:
        return _errors.mark(
            ValueError(
                f"{name}: inputs are on different devices ({' and '.join(real)}); "
                "move them to one device with .to(...) first"
            )
        )
    extra = f" with {_errors.describe(params)}" if params else ""
    # numpy says TypeError for dtypes an op does not take (ufunc 'floor' on complex, a string
    # operand) and ValueError/IndexError for values and shapes; anything else (an operand's own
    # exception) means the argument could not be used at all: a TypeError
    cls = ValueError if isinstance(exc, (ValueError, IndexError)) else TypeError
    hint = ""
    if prim.name in ("matmul", "dot", "einsum"):
        hint = "; the inner dimensions must agree (x.shape[-1] == y.shape[-2])"
    elif len(shapes) > 1:
        hint = "; shapes must be equal or broadcastable (numpy rules)"
    names = _errors.argument_names(args)
    what = ", ".join(f"{n} of shape {s} and dtype {d}" for n, s, d in zip(names, shapes, dtypes))
    return _errors.mark(cls(f"{name}: cannot apply to {what}{extra}{hint}. ({type(exc).__name__}: {exc})"))


def _fix_output(out: Any) -> Any:
    # numpy returns scalars for 0-d results; tensors always hold real arrays.
    if isinstance(out, np.generic):
        return np.asarray(out)
    return out


def _const_array(a: Any, prim: Primitive | None) -> Any:
    """A non-tensor argument: Python numbers and arrays pass through, lists of tensors are packed,
    anything else is converted.

    Conversion (``tensor._to_array``) refuses None, ragged lists, strings, object arrays and
    objects whose ``__array__`` raises, naming the function and the argument.
    """
    if type(a) is float or type(a) is int or type(a) is _ndarray or isinstance(a, (np.generic, bool, complex)):
        return a
    if a is None and prim is not None and prim.name == "clip":
        return a  # clip's missing bound
    if isinstance(a, (list, tuple)):
        p = _tensor_mod.packed(a)  # a list holding tensors is packed on the tape; apply then runs again with it
        if p is not None:
            return p
    if isinstance(a, _ndarray) or hasattr(a, "__cuda_array_interface__"):
        if getattr(getattr(a, "dtype", None), "kind", None) in _tensor_mod.NUMERIC_KINDS:
            return a  # an ndarray subclass or a device array
    return _tensor_mod._to_array(a)


def apply(prim: Primitive, args: tuple, params: dict) -> Any:
    """Run primitive ``prim`` on ``args`` and record it on every tape that tracks an input."""
    datas = []
    xp = None
    for a in args:
        if isinstance(a, Tensor):
            d = a._data
            if xp is None:
                xp = np if type(d) is _ndarray else backend.xp_of(d)
            elif xp is np and type(d) is not _ndarray:
                xp = backend.xp_of(d)  # a GPU tensor after a host one: the op runs on the GPU
        else:
            d = _const_array(a, prim)
            if type(d) is Tensor:  # a list holding tensors, packed
                return apply(prim, tuple(d if b is a else b for b in args), params)
        datas.append(d)
    if xp is None:
        # No tensor among the inputs. Beside an array, Python numbers stay weak (numpy's rule:
        # ndarray64 * 0.1 is float64 with 0.1 exact, as beside a tensor); numbers alone follow the
        # dtype rule (float -> float32), as gt.constant would convert them.
        arr = next((d for d in datas if hasattr(d, "dtype")), None)
        if arr is None:
            from .tensor import _to_array

            datas = [_to_array(d) if isinstance(d, (int, float)) else d for d in datas]
            arr = datas[0] if datas else None
        xp = backend.xp_of(arr) if arr is not None else np
    elif xp is not np:
        # Host arrays mixed into a GPU op act as constants on that GPU (copied, counted); a host
        # Tensor is refused unless soft placement is on (device.gpu_operands); tensors on
        # two GPUs still fail in the forward and are reported by _op_error.
        for d in datas:
            if type(d) is _ndarray:
                datas = _gpu_operands(prim.name, args, datas)
                break
    try:
        out = prim.fwd(xp, *datas, **params)
    except Exception as exc:
        raise _op_error(prim, args, params, exc) from exc
    if prim.nout == 1:
        if type(out) is not _ndarray:
            out = _fix_output(out)
        res = _new(Tensor)
        res._data = out
        res._id = _next_id()
    else:
        res = [_wrap_op(o if type(o) is _ndarray else _fix_output(o)) for o in out]
    if _state.anywhere:
        obs = _tls.obs
        if obs is not None:
            _record(obs, prim, args, params, res, datas)
    return res


# The two fast paths below are apply() specialised to one and two arguments
# without parameters (elementwise ops, the operators): same semantics, fewer
# Python operations, because per-op overhead is what small models pay for.


def unary_op(prim: Primitive, name: str, doc: str) -> Callable[[Any], Tensor]:
    """The public function of an elementwise one-argument primitive without parameters
    (its output has its input's shape: the recorder relies on it).

    Its body is ``apply`` specialised to one tensor argument and inlined, one
    Python frame per op less: on small arrays per-op overhead is the cost.
    """

    def op(x: Any) -> Tensor:
        if not isinstance(x, Tensor):
            return apply(prim, (x,), _NOPARAMS)
        d = x._data
        try:
            if type(d) is _ndarray and prim.cpu is not None:
                out = prim.cpu(d)
            else:
                out = prim.fwd(np if type(d) is _ndarray else backend.xp_of(d), d)
        except Exception as exc:
            raise _op_error(prim, (x,), _NOPARAMS, exc) from exc
        if type(out) is not _ndarray:
            out = _fix_output(out)
        res = _new(Tensor)
        res._data = out
        res._id = _next_id()
        if _state.anywhere:
            obs = _tls.obs
            if obs is not None:
                _record1(obs, prim, x, res)
        return res

    _errors.own_code(op, name)
    op.__doc__ = doc
    op.__module__ = "gputape.tape"
    return op


def binary_op(prim: Primitive, name: str, doc: str, same: Primitive | None = None) -> Callable[[Any, Any], Tensor]:
    """The public function of a two-argument primitive without parameters.

    ``apply`` specialised to a tensor and a tensor-or-Python-number, inlined;
    anything else (lists, arrays, two numbers) takes the general path. With
    ``same``, ``op(x, x)`` runs that one-argument primitive instead (x * x as
    square: one VJP term instead of two summed).
    """

    def op(x: Any, y: Any) -> Tensor:
        if isinstance(x, Tensor):
            a = d = x._data
            if isinstance(y, Tensor):
                if x is y and same is not None:
                    return _same_ops[same](x)
                b = y._data
            elif type(y) is float or type(y) is int:
                b = y
            else:
                return apply(prim, (x, y), _NOPARAMS)
        elif isinstance(y, Tensor) and (type(x) is float or type(x) is int):
            a = x
            b = d = y._data
        else:
            return apply(prim, (x, y), _NOPARAMS)
        try:
            if type(d) is _ndarray and prim.cpu is not None:
                out = prim.cpu(a, b)
            else:
                out = prim.fwd(np if type(d) is _ndarray else backend.xp_of(d), a, b)
        except Exception as exc:
            if type(a) is not type(b) and isinstance(x, Tensor) and isinstance(y, Tensor):
                return apply(prim, (x, y), _NOPARAMS)  # a host and a GPU tensor: apply's placement rule
            raise _op_error(prim, (x, y), _NOPARAMS, exc) from exc
        if type(out) is not _ndarray:
            out = _fix_output(out)
        res = _new(Tensor)
        res._data = out
        res._id = _next_id()
        if _state.anywhere:
            obs = _tls.obs
            if obs is not None:
                _record2(obs, prim, x, y, res)
        return res

    if same is not None and same not in _same_ops:
        _same_ops[same] = unary_op(same, same.name, "")
    _errors.own_code(op, name)
    op.__doc__ = doc
    return op


_same_ops: dict[Primitive, Callable[[Any], Tensor]] = {}


def _record(
    obs: _state.Observers, prim: Primitive, args: tuple, params: dict, res: Any, datas: list | None = None
) -> None:
    if obs.hooks:
        if obs.trace is not None:
            obs.trace.forward(prim, args, params, datas, res)
        if obs.debug:
            _debug_hook(obs, prim, args, res)
        if obs.watchers:
            _note_reads(obs, args)
    tapes = obs.tapes
    if not tapes:
        return
    single = prim.nout == 1
    odt = res._data.dtype if single else res[0]._data.dtype
    cplx = False
    if odt not in FLOAT_DTYPES:
        if odt.kind != "c":
            _note_untracked(tapes, prim.name, args, res)  # integer and bool results carry no gradient
            return
        cplx = True
    node = None
    for tape in tapes:
        tt = tape._tensors
        hit = False
        for a in args:
            if isinstance(a, Tensor) and (a._id in tt or _watch_on_read(tape, a)):
                hit = True
        if tape._exports:
            _note_exported_operands(tape, args, res)
        if hit:
            if node is None:
                node = _make_node(prim, args, params, res, datas, obs)
                if cplx or node.casts is not None:
                    _complex_node(node, odt)
            tape._nodes.append(node)
            if single:
                tt.add(res._id)
            else:
                tt.update(o._id for o in res)
        else:
            _note_edge(tape, prim.name, args, res)


def _note_edge(tape: GradientTape, name: str, args: tuple, res: Any) -> None:
    """An op ran inside the tape on values it does not track: keep the edge for explain()."""
    ids = tuple(a._id for a in args if isinstance(a, Tensor))
    for o in (res,) if isinstance(res, Tensor) else res:
        tape._edges[o._id] = (name, ids)


def _note_untracked(tapes: tuple, name: str, args: tuple, res: Any) -> None:
    """An op with an integer/bool result (comparison, argmax, cast to int) ran inside tapes.

    Nothing is recorded (no gradient flows through it), but its inputs were read: a trainable
    Variable among them is watched (TensorFlow watches on every read, whatever the op), and
    the cut is marked so that explain() names this op instead of saying "not watched".
    """
    where = None
    ids = tuple(a._id for a in args if isinstance(a, Tensor))
    for tape in tapes:
        tt = tape._tensors
        hit = False
        for a in args:  # no short-circuit: every trainable Variable read here is watched
            if isinstance(a, Tensor) and (a._id in tt or _watch_on_read(tape, a)):
                hit = True
        if hit:
            if where is None:
                where = _where()
            for o in (res,) if isinstance(res, Tensor) else res:
                tape._broken[o._id] = ("non_differentiable_op", name, where, ids)
        else:
            _note_edge(tape, name, args, res)


def traced(fn: Callable[..., Any], args: tuple, out: Any, pure: bool = False) -> None:
    """Tell a running ``gt.function`` trace that ``out = fn(*args)`` just ran on arrays.

    Code that computes arrays outside the primitives (comparisons, random draws,
    the gradient's final reshapes) calls this so that replays recompute ``out``
    instead of freezing the traced value. ``pure``: ``fn`` is device array work
    only (a CUDA graph may capture it). A no-op when nothing is being traced.
    """
    obs = _tls.obs
    if obs is not None and obs.trace is not None:
        obs.trace.call(fn, args, out, pure)


def note_nondiff(name: str, args: tuple, res: Tensor) -> None:
    """Hook for ops outside the registry that return integer/bool results (comparisons, argmax)."""
    obs = _tls.obs
    if obs is None:
        return
    if obs.debug:
        _debug_hook(obs, None, args, res)
    if obs.watchers:  # a custom_gradient forward collects every variable read, as an op's would be
        _note_reads(obs, args)
    if obs.tapes:
        _note_untracked(obs.tapes, name, args, res)


def _debug_hook(obs: _state.Observers, prim: Primitive | None, args: tuple, res: Any) -> None:
    """check_numerics' forward check and stop_recording's markers (only while they are on)."""
    if obs.numerics and prim is not None:
        _numerics().check_forward(prim, args, res)
    if obs.placement is not None and prim is not None:
        obs.placement.op(prim.name, res)
    paused = obs.paused
    if paused:
        where = None
        for tape in paused:
            tt = tape._tensors
            ids = tuple(a._id for a in args if isinstance(a, Tensor))
            if any(i in tt or i in tape._broken for i in ids):
                if where is None:
                    where = _where()
                for o in (res,) if isinstance(res, Tensor) else res:
                    tape._broken[o._id] = ("stop_recording", prim.name if prim else "op", where, ids)


def _watch_on_read(tape: GradientTape, t: Tensor) -> bool:
    """A trainable Variable read while ``tape`` records is watched by it (TensorFlow's rule)."""
    return type(t) is Variable and tape._auto and t._trainable and tape._watch_variable(t)


def _record1(obs: _state.Observers, prim: Primitive, x: Tensor, res: Tensor) -> None:
    """``_record`` for apply1: one tensor input, no parameters, one output."""
    if obs.hooks:
        if obs.trace is not None:
            obs.trace.forward1(prim, (x,), res)
        if obs.debug:
            _debug_hook(obs, prim, (x,), res)
        if obs.watchers:
            _note_reads(obs, (x,))
    tapes = obs.tapes
    if not tapes:
        return
    d = res._data
    dt = d.dtype
    cplx = False
    if dt not in FLOAT_DTYPES:
        if dt.kind != "c":
            _note_untracked(tapes, prim.name, (x,), res)
            return
        cplx = True
    node = None
    xid = x._id
    for tape in tapes:
        tt = tape._tensors
        if xid not in tt and not _watch_on_read(tape, x):
            tape._edges[res._id] = (prim.name, (xid,))
            continue
        if node is None:
            xd = x._data
            node = _new(Node)
            node.prim = prim
            node.params = _NOPARAMS
            node.ids = (xid,)
            shape = xd.shape  # unary_op's primitives are elementwise: the output has this shape too
            node.shapes = (shape,)
            node.casts = None if xd.dtype is dt else (xd.dtype,)
            if prim.save:
                node.saved = [xd, d] if prim.save_out else [xd]
            else:
                node.saved = [d] if prim.save_out else _NOSAVED
            node.out = res._id
            node.meta = (shape, dt)
            if obs.locations:
                node.info = (_where(), shape, dt)
            if cplx or node.casts is not None:
                _complex_node(node, dt)
        tape._nodes.append(node)
        tt.add(res._id)


def _record2(obs: _state.Observers, prim: Primitive, x: Any, y: Any, res: Tensor) -> None:
    """``_record`` for apply2: two inputs (a tensor and a tensor or Python scalar)."""
    if obs.hooks:
        if obs.trace is not None:
            obs.trace.forward1(prim, (x, y), res)
        if obs.debug:
            _debug_hook(obs, prim, (x, y), res)
        if obs.watchers:
            _note_reads(obs, (x, y))
    tapes = obs.tapes
    if not tapes:
        return
    d = res._data
    dt = d.dtype
    cplx = False
    if dt not in FLOAT_DTYPES:
        if dt.kind != "c":
            _note_untracked(tapes, prim.name, (x, y), res)
            return
        cplx = True
    xt = isinstance(x, Tensor)
    yt = isinstance(y, Tensor)
    node = None
    for tape in tapes:
        tt = tape._tensors
        # no short-circuit between x and y: a trainable Variable on either side is watched
        hx = xt and (x._id in tt or _watch_on_read(tape, x))
        hy = yt and (y._id in tt or _watch_on_read(tape, y))
        if not (hx or hy):
            _note_edge(tape, prim.name, (x, y), res)
            continue
        if node is None:
            node = _new(Node)
            node.prim = prim
            node.params = _NOPARAMS
            casts = None
            if xt:
                xd = x._data
                if xd.dtype is not dt:
                    casts = [xd.dtype, None]
                if yt:
                    yd = y._data
                    if yd.dtype is not dt:
                        casts = [casts[0] if casts else None, yd.dtype]
                    node.ids = (x._id, y._id)
                    node.shapes = (xd.shape, yd.shape)
                else:
                    yd = y
                    node.ids = (x._id, 0)
                    node.shapes = (xd.shape, None)
            else:
                xd = x
                yd = y._data
                if yd.dtype is not dt:
                    casts = [None, yd.dtype]
                node.ids = (0, y._id)
                node.shapes = (None, yd.shape)
            node.casts = casts
            save = prim.save
            if save is True:
                saved = [xd, yd]
            elif save:
                saved = [(xd, yd)[i] for i in save]
            else:
                saved = []
            if prim.save_out:
                saved.append(d)
            node.saved = saved
            node.out = res._id
            node.meta = (d.shape, dt)
            if obs.locations:
                node.info = (_where(), d.shape, dt)
            if cplx or node.casts is not None:
                _complex_node(node, dt)
        tape._nodes.append(node)
        tt.add(res._id)


_NOSAVED: list = []  # shared by nodes that save nothing; never mutated

# -- complex values on the tape --------------------------------------------------
# gputape follows TensorFlow's convention (README, "Complex numbers"): the gradient of a real
# loss L with respect to z = x + iy is dL/dx + i dL/dy, and a VJP maps the cotangent g of
# f(z) to g * conj(f'(z)) where f is holomorphic. The real VJPs of the holomorphic primitives
# below are written as g * f'(z) with analytic expressions, so conj(vjp(conj(g))) is that
# complex VJP: a node with complex values runs a clone of its primitive whose VJP is wrapped
# so (the float path is untouched, and gt.function, which inlines only the declared VJPs,
# calls the wrapped one as it is). COMPLEX_DIRECT primitives' VJPs are complex-correct as
# written (TensorFlow's _RealGrad, _AbsGrad, ...); any other primitive refuses complex
# values on a tape, since its VJP would be silently wrong.
HOLOMORPHIC = frozenset(
    "add subtract negative multiply multiply_no_nan divide reciprocal square sqrt exp expm1 exp2 log log1p "
    "log2 log10 sin cos tan sinh cosh tanh arcsin arccos arctan arcsinh arctanh power matmul einsum "
    "sum mean prod cumsum cumprod reshape transpose swapaxes expand_dims squeeze broadcast_to getitem "
    "concatenate stack pad take_along_axis scatter scatter_along_axis identity where cast".split()
)
# name -> the VJP for complex values (None: the primitive's own VJP is complex-correct)
COMPLEX_DIRECT: dict[str, Callable[..., Any] | None] = dict.fromkeys(
    ("real", "imag", "conj", "angle", "split", "custom_gradient")
)
_COMPLEX_PRIMS: dict[Primitive, Primitive] = {}
DIFF_DTYPES = FLOAT_DTYPES | {np.dtype(np.complex64), np.dtype(np.complex128)}


def _complex_node(node: Node, odt: Any) -> None:
    """Give a node that has complex values the complex form of its primitive, or refuse it."""
    casts = node.casts
    if odt.kind != "c" and not any(c is not None and c.kind == "c" for c in casts):
        return  # real values of several float dtypes
    prim = node.prim
    name = prim.name
    if name not in HOLOMORPHIC and name not in COMPLEX_DIRECT:
        raise TypeError(
            f"gt.{name}: gradients through complex values ({odt} result) are not supported for this op; "
            "take real values first (gt.real, gt.imag, gt.abs), or compute it outside the tape "
            "(tape.stop_recording())"
        )
    if prim.nout != 1 and name not in HOLOMORPHIC:
        return
    c = _COMPLEX_PRIMS.get(prim)
    if c is None:
        c = _COMPLEX_PRIMS[prim] = _complex_prim(prim, name in HOLOMORPHIC)
    node.prim = c


def _complex_prim(prim: Primitive, holomorphic: bool) -> Primitive:
    """A clone of ``prim`` whose VJP takes complex cotangents (TensorFlow's convention)."""
    inner = COMPLEX_DIRECT.get(prim.name) or prim.vjp

    def complex_vjp(F: Any, g: Any, needs: Any, nb: int, node: Node, *saved: Any) -> Any:
        if holomorphic:
            if prim.name == "power" and needs[1]:
                raise TypeError(
                    "gt.power: the gradient with respect to an exponent is not supported for complex values"
                )
            g = F.conj(g)
        out = list(inner(F, g, needs, nb, node, *saved))
        casts = node.casts
        for k, o in enumerate(out):
            if o is None:
                continue
            if holomorphic:
                o = F.conj(o)
            # a real input of a complex result: its gradient is the real part (TensorFlow's Cast rule)
            if casts is not None and casts[k] is not None and casts[k].kind != "c" and np.iscomplexobj(o):
                o = F.real(o)
            out[k] = o
        return out

    c = Primitive(prim.name, prim.fwd, prim.save, prim.save_out, prim.nout, prim.batchable)
    c.vjp = complex_vjp
    c.cpu = prim.cpu
    c.doc = prim.doc
    return c


def _numerics() -> Any:
    # gputape.debug imports this module, so it is imported on first use, then kept (an import
    # statement costs ~0.2 us even for a loaded module, per op under check_numerics)
    global _numerics_module
    if _numerics_module is None:
        from .debug import numerics

        _numerics_module = numerics
    return _numerics_module


_numerics_module: Any = None


def _note_exported_operands(tape: GradientTape, args: tuple, res: Any) -> None:
    """An op took an exported array as a raw operand: the path through it left the tape."""
    for a in args:
        if a is not None and not isinstance(a, (Tensor, int, float)):
            for tid, where, _, arr in tape._exports:
                if a is arr:
                    for o in (res,) if isinstance(res, Tensor) else res:
                        tape._broken[o._id] = ("left_tape", "numpy", where, (tid,))


def _note_reads(obs: _state.Observers, args: tuple) -> None:
    for a in args:
        if type(a) is Variable:
            for w in obs.watchers:
                w.setdefault(a._id, a)


def _own(a: Any) -> Any:
    """A raw array operand is copied when saved: the caller may refill its buffer
    before gradient() runs, and the gradient must use the value the op saw."""
    if type(a) is _ndarray or (hasattr(a, "copy") and hasattr(a, "shape") and not isinstance(a, np.generic)):
        b = a.copy()
        traced(_copy, (a,), b, True)
        return b
    return a


def _copy(a: Any) -> Any:
    return a.copy()


def _make_node(prim: Primitive, args: tuple, params: dict, res: Any, datas: list | None, obs: _state.Observers) -> Node:
    node = _new(Node)
    node.prim = prim
    node.params = params
    single = prim.nout == 1
    odt = res._data.dtype if single else res[0]._data.dtype
    casts = None
    ids = []
    shapes = []
    for a in args:
        if isinstance(a, Tensor):
            d = a._data
            ids.append(a._id)
            shapes.append(d.shape)
            if d.dtype is not odt:
                if casts is None:
                    casts = [None] * len(args)
                casts[len(ids) - 1] = d.dtype
        else:
            ids.append(0)  # ids start at 1: 0 is never tracked
            shapes.append(None)
    node.ids = tuple(ids)
    node.shapes = tuple(shapes)
    node.casts = casts
    # Residuals are raw arrays (for a Variable, the array it holds now: a later
    # assign swaps or copies it, never mutates what is saved here).
    # Constants are saved as the forward used them (lists as arrays, host arrays
    # moved to the op's GPU), so the VJP sees the same operands.
    consts = datas if datas is not None else args
    s = prim.save
    if s is True:
        saved = [a._data if isinstance(a, Tensor) else _own(c) for a, c in zip(args, consts)]
    elif s:
        # a slice: the operands from some position on (getitem's variable number of index arrays)
        for_i = range(len(args))[s] if type(s) is slice else s
        saved = [args[i]._data if isinstance(args[i], Tensor) else _own(consts[i]) for i in for_i]
    else:
        saved = []
    if single:
        node.out = res._id
        d = res._data
        node.meta = (d.shape, odt)
        if prim.save_out:
            saved.append(d)
    else:
        node.out = tuple(o._id for o in res)
        node.meta = tuple((o._data.shape, o._data.dtype) for o in res)
        if prim.save_out:
            saved.extend(o._data for o in res)
    node.saved = saved
    if obs.locations:
        first = res if single else res[0]
        node.info = (_where(), first._data.shape, first._data.dtype)
    return node


def _nbytes_saved(nodes: list[Node]) -> int:
    seen: set[int] = set()
    total = 0
    for node in nodes:
        if type(node) is not Node:
            continue
        for d in node.saved or ():
            if hasattr(d, "nbytes") and id(d) not in seen:
                seen.add(id(d))
                total += int(d.nbytes)
    return total


# ---------------------------------------------------------------------------------
# The backward sweep

_DIFF_F: Any = None  # gputape's own ops namespace, set by gputape.ops
_RAW_F: Callable[[Any], Any] | None = None  # xp -> raw namespace, set by gputape.ops


def _sweep(
    tape: GradientTape,
    seeds: dict[int, Any],
    source_ids: list[int],
    diff: bool,
    lead: tuple[int, ...] = (),
) -> dict[int, Any]:
    """Propagate ``seeds`` (id -> cotangent) back through ``tape``; return id -> gradient."""
    release = not tape._persistent
    # A persistent tape may be recording this very sweep: walk a snapshot. A
    # non-persistent one is not (gradient() stopped it), so walk its own list
    # and drop each node as soon as its VJP ran: that frees the residuals.
    nodes = tape._nodes if release else list(tape._nodes)
    tt = tape._tensors
    keep = set(source_ids)
    if tape._leaves <= keep:
        # Every watched value is a source, so every recorded op depends on one:
        # the tape's own id table already says which inputs need a cotangent.
        rel = tt
    else:
        # Forward pass over ids: which tensors depend on a source? Only those
        # nodes' VJPs run, and only for inputs that lead to a source.
        rel = {i for i in source_ids if i in tt}
        if not rel:
            # no source was recorded; a source that is also a target (an unread Variable, say)
            # still has its seed as gradient: d target / d target is one, as in TensorFlow
            return {i: seeds[i] for i in source_ids if i in seeds}
        for node in nodes:
            if type(node) is Node:
                for i in node.ids:
                    if i in rel:
                        if type(node.out) is int:
                            rel.add(node.out)
                        else:
                            rel.update(node.out)
                        break
    grads = dict(seeds)
    nb = len(lead)
    obs = _tls.obs
    trace = obs.trace if obs is not None else None
    numerics = obs is not None and obs.numerics
    if numerics:
        _numerics().flush()  # the forward ended: read its deferred (device) checks
    if diff:
        F = _DIFF_F
    else:
        first = next(iter(seeds.values()))
        F = _RAW_F(np if type(first) is _ndarray else backend.xp_of(first))
    for pos in range(len(nodes) - 1, -1, -1):
        node = nodes[pos]
        if type(node) is not Node:
            continue
        oid = node.out
        if type(oid) is int:
            g = grads.get(oid) if oid in keep else grads.pop(oid, None)
            if g is None or oid not in rel:
                continue
        else:
            g = [grads.get(o) if o in keep else grads.pop(o, None) for o in oid]
            if all(x is None for x in g) or not any(o in rel for o in oid):
                continue
        if release:
            # drop the node (and with it its residuals) for a residual-free
            # skeleton that explain() can still walk
            nodes[pos] = (node.prim, node.ids, node.out)
        ids = node.ids
        if len(ids) == 1:
            if ids[0] not in rel:
                continue
            needs = _NEED1
        elif len(ids) == 2:
            needs = _NEED2[ids[0] in rel][ids[1] in rel]
            if needs is None:
                continue
        else:
            needs = [i in rel for i in ids]
            if True not in needs:
                continue
        saved = node.saved
        if diff:  # rebuild tensors with their original ids so outer tapes track them
            saved = [_wrap_id(v, i) if i else v for v, i in zip(saved, node.saved_ids())]
        if trace is not None and not diff:
            # (in diff mode the VJP's own ops are traced one by one)
            for i, gi in zip(ids, trace.node_grads(F, node, needs, lead, g, saved)):
                if gi is not None:
                    prev = grads.get(i)
                    if prev is None:
                        grads[i] = gi
                    else:
                        grads[i] = acc = prev + gi
                        trace.call(_add, (prev, gi), acc, True)
            continue
        # _vjp_raw and _fit_all written out (keep the three in step): this loop is the eager
        # backward's per-op cost, and the two calls per node cost ~10% of the 100-op chain
        if nb and not node.prim.batchable:
            in_grads = _unbatched_vjp(F, g, needs, node, saved, lead)
        else:
            in_grads = node.prim.vjp(F, g, needs, nb, node, *saved)
        if numerics:
            _numerics().check_backward(node, g, saved, [gi if n else None for gi, n in zip(in_grads, needs)])
        shapes = node.shapes
        casts = node.casts
        for k in range(len(ids)):
            gi = in_grads[k]
            if gi is None or not needs[k]:
                continue
            shp = shapes[k] if not nb else lead + shapes[k]
            if gi.shape != shp:
                gi = F.sum_to(gi, shp, nb)
            if casts is not None and casts[k] is not None:
                gi = gi.astype(casts[k])
            i = ids[k]
            prev = grads.get(i)
            grads[i] = gi if prev is None else prev + gi
    if numerics:
        _numerics().flush()  # the backward ended
    return grads


_add = operator.add


def _vjp_raw(F: Any, node: Node, needs: Any, lead: tuple, g: Any, saved: Any) -> Any:
    """A node's VJP as the sweep calls it (gt.function's trace records it as one step)."""
    nb = len(lead)
    if nb and not node.prim.batchable:
        raw = _unbatched_vjp(F, g, needs, node, saved, lead)
    else:
        raw = node.prim.vjp(F, g, needs, nb, node, *saved)
    obs = _tls.obs
    if obs is not None and obs.numerics:
        _numerics().check_backward(node, g, saved, [gi if n else None for gi, n in zip(raw, needs)])
    return raw


def _fit_all(F: Any, node: Node, needs: Any, lead: tuple, raw: Any) -> list:
    """The VJP's cotangents reduced to the input shapes and cast to the input dtypes (None: not needed)."""
    nb = len(lead)
    shapes = node.shapes
    casts = node.casts
    out = []
    for k in range(len(needs)):
        gi = raw[k]
        if gi is None or not needs[k]:
            out.append(None)
            continue
        out.append(_fit(F, gi, shapes[k] if not nb else lead + shapes[k], nb, None if casts is None else casts[k]))
    return out


def _fit(F: Any, gi: Any, shape: tuple, nb: int, cast: Any) -> Any:
    """A cotangent reduced over broadcast dimensions to ``shape`` and cast to the input's dtype."""
    if gi.shape != shape:
        gi = F.sum_to(gi, shape, nb)
    if cast is not None:
        gi = gi.astype(cast)
    return gi


def _any_tape() -> bool:
    """Whether a tape records in this thread (a gradient computed now is then recorded too)."""
    obs = _tls.obs
    return obs is not None and bool(obs.tapes)


_NEED1 = (True,)
_NEED2 = ((None, (False, True)), ((True, False), (True, True)))


def _wrap_id(data: Any, tid: int) -> Tensor:
    t = _new(Tensor)
    t._data = data
    t._id = tid
    return t


def _unbatched_vjp(F: Any, g: Any, needs: Any, node: Node, saved: list, lead: tuple) -> list:
    """Run a VJP that cannot take leading batch dims once per batch row, then stack."""
    n = lead[0]
    rows = []
    for r in range(n):
        gr = [x[r] if x is not None else None for x in g] if isinstance(g, list) else g[r]
        rows.append(node.prim.vjp(F, gr, needs, 0, node, *saved))
    out = []
    for k in range(len(needs)):
        col = [row[k] for row in rows]
        if not needs[k] or any(c is None for c in col):
            out.append(None)
        else:
            out.append(F.stack(col, axis=0))
    return out


# ---------------------------------------------------------------------------------
# GradientTape


class GradientTape(_state.Scope):
    """Record operations for automatic differentiation (TensorFlow's tape).

    Ops run inside ``with tape:`` are recorded when one of their inputs is
    watched: trainable Variables are watched as soon as they are read (unless
    ``watch_accessed_variables=False``), other tensors with :meth:`watch`.

    >>> import gputape as gt
    >>> x = gt.constant(3.0)
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = x * x
    >>> tape.gradient(y, x).numpy()
    array(6., dtype=float32)

    A non-persistent tape computes one set of gradients and frees each op's
    saved values as soon as its VJP has run; ``persistent=True`` keeps them
    until :meth:`release` or ``del tape``. ``compile=False`` keeps :meth:`gradient` on the
    per-node sweep even for a structure seen before (README, "Compiled backward").
    """

    observes = "tape"  # its role on the thread's observer stack (gputape._state)
    _compile = True

    def __init__(
        self,
        persistent: bool = False,
        watch_accessed_variables: bool = True,
        compile: bool = True,  # noqa: A002 (the option's name: GradientTape(compile=False))
    ) -> None:
        self._compile = bool(compile)
        self._persistent = bool(persistent)
        self._auto = bool(watch_accessed_variables)
        self._tensors: set[int] | None = None  # ids this tape tracks (watched or recorded)
        self._watched_vars: dict[int, Variable] = {}
        self._fresh()
        self._tensors = None
        self._used = False  # a non-persistent tape that already computed its gradients

    def _fresh(self) -> None:
        """Start an empty recording (first entry, reset, or re-entry after gradient())."""
        self._tensors = set()
        self._nodes: list[Any] = []  # Nodes, or (prim, ids, out) skeletons once swept
        self._watched_vars = {}
        self._leaves: set[int] = set()  # ids watched directly (not produced by a recorded op)
        # For explain(): edges of ops that ran inside the tape on untracked values,
        # markers where a path was cut (stop_gradient, stop_recording, integer
        # results, values that left through .numpy()), and those exports.
        self._edges: dict[int, tuple[str, tuple[int, ...]]] = {}
        self._broken: dict[int, tuple[str, str, str | None, tuple[int, ...]]] = {}
        self._exports: list[tuple[int, str | None, int, Any]] = []
        self._retired: GradientTape | None = None

    # -- context ------------------------------------------------------------------
    # Entering pushes the tape on this thread's observer stack and leaving pops it
    # (gputape._state.Scope: one store each way, safe against Ctrl-C); whether it records
    # is read from that stack, never kept in a flag that could disagree with it.
    def __enter__(self) -> GradientTape:
        obs = _tls.obs
        if obs is not None and self in obs.stack:
            raise ValueError("Tape is still recording. This can happen if you try to re-enter an already-active tape.")
        if self._tensors is None:
            self._fresh()
            self._used = False
        _live_tapes.add(self)
        return super().__enter__()

    @property
    def _recording(self) -> bool:
        """Whether this tape records in this thread now (entered, not paused, not hidden)."""
        obs = _tls.obs
        return obs is not None and self in obs.tapes

    def _note_export(self, t: Tensor, array: Any) -> None:
        """A value this tape may track left as host data (.numpy(), np.asarray, float())."""
        if t._id in self._tensors:
            # constants made after this point have larger odd ids than the mark;
            # the array itself is kept to recognise it if it comes back as an operand
            self._exports.append((t._id, _where(), _tensor_mod._next_const_id(), array))

    # -- watching -----------------------------------------------------------------
    def _store(self) -> set[int]:
        if self._tensors is None:
            self._fresh()
        return self._tensors

    def _watch_variable(self, var: Variable) -> bool:
        if var._data.dtype not in DIFF_DTYPES:
            return False
        tt = self._store()
        if var._id not in tt:
            tt.add(var._id)
            self._leaves.add(var._id)
        self._watched_vars.setdefault(var._id, var)
        return True

    def watch(self, tensor: Any) -> None:
        """Ensure ``tensor`` (a Tensor, Variable, or nested list/tuple/dict of them) is traced.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape() as t:
        ...     t.watch([x])
        ...     y = gt.sum(x * x)
        >>> t.gradient(y, x).numpy().tolist()
        [2.0, 4.0]
        """
        flat, _ = _flatten(tensor)
        for t in flat:
            if not isinstance(t, Tensor):
                raise ValueError(
                    f"GradientTape.watch: passed in object of type {type(t).__name__}, not a gt.Tensor or "
                    "gt.Variable (or a nested list/tuple/dict of them); wrap arrays with gt.constant first"
                )
        tt = self._store()
        for t in flat:
            if t._data.dtype not in DIFF_DTYPES:
                _warn_once(
                    f"watch-{t._data.dtype}",
                    f"GradientTape.watch: the dtype of the watched tensor must be floating or complex (got "
                    f"{t._data.dtype}); its gradient will be None. Cast it with .astype('float32').",
                )
                continue
            if type(t) is Variable:
                self._watch_variable(t)
            elif t._id not in tt:
                tt.add(t._id)
                self._leaves.add(t._id)

    def unwatch(self, tensor: Any) -> None:
        """Stop tracing ``tensor`` (same argument forms as :meth:`watch`).

        Ops recorded before the call stay recorded; later ops that read only
        unwatched values are not recorded.

        >>> import gputape as gt
        >>> x = gt.constant(2.0)
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); t.unwatch(x)
        ...     y = x * x
        >>> t.gradient(y, x) is None
        True
        """
        flat, _ = _flatten(tensor)
        tt = self._store()
        for t in flat:
            if not isinstance(t, Tensor):
                raise ValueError(
                    f"GradientTape.unwatch: passed in object of type {type(t).__name__}, not a gt.Tensor or gt.Variable"
                )
            tt.discard(t._id)
            self._leaves.discard(t._id)
            self._watched_vars.pop(t._id, None)

    def watched_variables(self) -> tuple[Variable, ...]:
        """The Variables this tape watches, in the order they were first watched.

        >>> import gputape as gt
        >>> v = gt.Variable(1.0, name="v")
        >>> with gt.GradientTape() as t:
        ...     y = v * 2
        >>> [w.name for w in t.watched_variables()]
        ['v']
        """
        return tuple(self._watched_vars.values())

    def stop_recording(self) -> _StopRecording:
        """Temporarily stop recording on this tape (other tapes keep recording).

        >>> import gputape as gt
        >>> x = gt.constant(2.0)
        >>> with gt.GradientTape() as t:
        ...     t.watch(x)
        ...     with t.stop_recording():
        ...         y = x * x
        >>> t.gradient(y, x) is None
        True
        """
        return _StopRecording(self)

    def reset(self) -> None:
        """Forget everything recorded and watched so far; keep recording if recording.

        >>> import gputape as gt
        >>> x = gt.constant(2.0)
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); y = x * x
        ...     t.reset()
        ...     t.watch(x); z = x * x * x
        >>> t.gradient(z, x).numpy()
        array(12., dtype=float32)
        """
        self._drop()
        self._fresh()

    # -- memory -------------------------------------------------------------------
    def _drop(self) -> None:
        # Dropping the references frees the residuals, unless another tape
        # (nested, recording the same ops) still holds the node.
        self._nodes = []

    def release(self) -> None:
        """Free every value this tape saved; it cannot compute gradients afterwards.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape(persistent=True) as t:
        ...     t.watch(x); y = gt.exp(x)
        >>> t.saved_bytes > 0
        True
        >>> t.release(); t.saved_bytes
        0
        """
        self._drop()
        self._fresh()
        self._tensors = None

    @property
    def saved_bytes(self) -> int:
        """Bytes of the arrays this tape's recorded ops saved for their VJPs."""
        return _nbytes_saved(self._nodes)

    # -- debugging ----------------------------------------------------------------
    def explain(self, target: Tensor, source: Tensor) -> Any:
        """Why is ``gradient(target, source)`` None? Returns a ``gt.debug.Explanation``.

        ``reason`` is one of ``connected``, ``not_watched``, ``not_trainable``,
        ``unused``, ``not_recorded``, ``stop_gradient``, ``stop_recording``,
        ``integer_dtype``, ``non_differentiable_op``, ``left_tape``; ``where`` is
        the user's file:line of the op that broke the path when known. Works
        before and after ``gradient()``, on persistent and non-persistent tapes.

        >>> import gputape as gt
        >>> w = gt.Variable(1.0, trainable=False, name="w")
        >>> with gt.GradientTape() as tape:
        ...     y = w * 3.0
        >>> tape.explain(y, w).reason
        'not_trainable'
        """
        from .debug.explain import explain

        return explain(self, target, source)

    def summary(self) -> str:
        """A table of the recorded ops: input shapes, output shape and dtype, bytes saved, and the
        user's file:line for ops recorded inside ``gt.debug.record_locations()``.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape() as tape:
        ...     tape.watch(x); y = gt.exp(x)
        >>> print(tape.summary().splitlines()[2].split()[:5])
        ['0', 'exp', '(2,)', '(2,)', 'float32']
        """
        from .debug.explain import summary

        return summary(self)

    def to_dot(self) -> str:
        """The recorded graph as Graphviz DOT text (render with ``dot -Tpng``).

        >>> import gputape as gt
        >>> x = gt.constant(1.0)
        >>> with gt.GradientTape() as tape:
        ...     tape.watch(x); y = gt.sin(x)
        >>> tape.to_dot().splitlines()[0]
        'digraph gputape {'
        """
        from .debug.explain import to_dot

        return to_dot(self)

    # -- gradients ----------------------------------------------------------------
    def _begin_backprop(self, what: str) -> None:
        if self._tensors is None:
            if self._used:
                raise RuntimeError(
                    f"A non-persistent GradientTape can only be used to compute one set of gradients "
                    f"(or jacobians); this one already ran. Use GradientTape(persistent=True) to call "
                    f"{what}() more than once."
                )
            raise RuntimeError(
                f"GradientTape.{what}: this tape has nothing recorded (it was never entered, or it was "
                "released); record ops inside `with tape:` first"
            )
        obs = _tls.obs
        if not self._persistent and obs is not None and self in obs.stack:
            # As TensorFlow does: a non-persistent tape stops recording here, so
            # the gradient computation is not recorded on it.
            _state.pop(self)

    def _finish_backprop(self) -> None:
        if not self._persistent:
            # Keep what explain() needs (ids and edges, no arrays); drop the rest.
            retired = _new(GradientTape)
            retired.__dict__.update(self.__dict__)
            retired._nodes = [n if type(n) is tuple else (n.prim, n.ids, n.out) for n in self._nodes]
            self._drop()
            self._tensors = None  # watched_variables() still answers, as in TensorFlow
            self._retired = retired
            self._used = True

    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        unconnected_gradients: Any = UnconnectedGradients.NONE,
    ) -> Any:
        """Gradients of ``target`` (the sum of it, for a non-scalar or nested target) w.r.t. ``sources``.

        ``sources`` may be a tensor, a variable or any nested list/tuple/dict of
        them; the result has the same structure. ``output_gradients`` weights
        each target (one per target, same shapes). Unconnected sources give
        ``None``, or zeros with ``unconnected_gradients='zero'``.

        >>> import gputape as gt
        >>> w = gt.Variable([1.0, 2.0]); b = gt.Variable(0.5)
        >>> with gt.GradientTape() as tape:
        ...     y = gt.sum(w * w) + b
        >>> g = tape.gradient(y, {"w": w, "b": b})
        >>> g["w"].numpy().tolist(), float(g["b"])
        ([2.0, 4.0], 1.0)
        """
        if target is None:
            raise TypeError(
                "GradientTape.gradient: target is None; pass the tensor (or nested structure of "
                "tensors) to differentiate"
            )
        unconnected = _parse_unconnected(unconnected_gradients)
        self._begin_backprop("gradient")
        # Argument errors leave the tape usable (as in TensorFlow): only a sweep consumes it.
        flat_t, _ = _flatten(target)
        flat_s, s_spec = _flatten(sources)
        _check_sources(flat_s, "gradient")
        if output_gradients is None:
            flat_og = [None] * len(flat_t)
        else:
            flat_og, _ = _flatten(output_gradients)
            if len(flat_og) != len(flat_t):
                raise ValueError(
                    f"GradientTape.gradient: got {len(flat_og)} output_gradients for {len(flat_t)} "
                    "targets; pass one per target (None for the default of ones)"
                )
        diff = _any_tape()
        seeds = _seeds(flat_t, flat_og, diff, lead=None)
        try:
            with _quiet():
                # the sweep, or code compiled for a structure seen before (gputape._backward_compile)
                grads = _compiled_gradients(self, seeds, [s._id for s in flat_s], diff, _sweep, _RAW_F) if seeds else {}
            out = [_result(grads.get(s._id), s, unconnected, diff, None) for s in flat_s]
            if unconnected is UnconnectedGradients.RAISE:
                self._raise_unconnected(flat_t, flat_s, out)
        finally:
            self._finish_backprop()
        return _unflatten(s_spec, out)

    def _raise_unconnected(self, flat_t: list, flat_s: list, out: list) -> None:
        for s, g in zip(flat_s, out):
            if g is None:
                from .debug.explain import explain

                # the first target that is a tensor explains it (a nested target is their sum)
                e = explain(self, next(t for t in flat_t if isinstance(t, Tensor)), s)
                raise UnconnectedGradientError(f"GradientTape.gradient: the gradient is None: {e}", e)

    def jacobian(
        self,
        target: Any,
        sources: Any,
        unconnected_gradients: Any = UnconnectedGradients.NONE,
        parallel_iterations: Any = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """Full Jacobian: ``result[i].shape == target.shape + sources[i].shape``.

        Computed in one vectorised backward sweep (the identity as a batch of
        cotangents), not one sweep per output element. ``parallel_iterations``
        and ``experimental_use_pfor`` are accepted for TensorFlow compatibility
        and have no effect.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); y = x * x
        >>> t.jacobian(y, x).numpy().tolist()
        [[2.0, 0.0], [0.0, 4.0]]
        """
        unconnected = _parse_unconnected(unconnected_gradients)
        if not isinstance(target, Tensor):
            raise TypeError(f"GradientTape.jacobian: target must be a gt.Tensor, got {type(target).__name__}")
        self._begin_backprop("jacobian")
        flat_s, s_spec = _flatten(sources)
        _check_sources(flat_s, "jacobian")
        diff = _any_tape()
        tshape = target.shape
        n = target.size
        seeds = _seeds([target], [None], diff, lead=("jacobian", n))
        try:
            with _quiet():
                grads = _sweep(self, seeds, [s._id for s in flat_s], diff, lead=(n,)) if seeds else {}
            out = []
            for s in flat_s:
                g = grads.get(s._id)
                if g is not None:
                    if diff:
                        g = _DIFF_F.reshape(g, tshape + s.shape)
                    else:
                        g0, g = g, g.reshape(tshape + s.shape)
                        traced(_reshape, (g0, tshape + s.shape), g, True)
                out.append(_result(g, s, unconnected, diff, tshape))
        finally:
            self._finish_backprop()
        return _unflatten(s_spec, out)

    def batch_jacobian(
        self,
        target: Tensor,
        source: Tensor,
        unconnected_gradients: Any = UnconnectedGradients.NONE,
        parallel_iterations: Any = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """Per-example Jacobian: ``target[b, *y]`` w.r.t. ``source[b, *x]`` -> ``[b, *y, *x]``.

        Assumes ``target[i]`` depends only on ``source[i]`` (as TensorFlow does).
        One vectorised sweep with ``prod(y)`` cotangents.

        >>> import gputape as gt
        >>> x = gt.constant([[1.0, 2.0], [3.0, 4.0]])
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); y = x * x
        >>> t.batch_jacobian(y, x).numpy().tolist()
        [[[2.0, 0.0], [0.0, 4.0]], [[6.0, 0.0], [0.0, 8.0]]]
        """
        unconnected = _parse_unconnected(unconnected_gradients)
        if not isinstance(target, Tensor) or not isinstance(source, Tensor):
            raise TypeError("GradientTape.batch_jacobian: target and source must be gt.Tensors")
        ts, ss = target.shape, source.shape
        if len(ts) < 2 or len(ss) < 2 or ts[0] != ss[0]:
            raise ValueError(
                f"GradientTape.batch_jacobian: need target and source of rank >= 2 with the same first "
                f"(batch) dimension; got target shape {ts} and source shape {ss}"
            )
        self._begin_backprop("batch_jacobian")
        _check_sources([source], "batch_jacobian")
        diff = _any_tape()
        b = ts[0]
        ny = int(np.prod(ts[1:]))
        seeds = _seeds([target], [None], diff, lead=("batch", ny))
        try:
            with _quiet():
                grads = _sweep(self, seeds, [source._id], diff, lead=(ny,)) if seeds else {}
            g = grads.get(source._id)
            if g is not None:
                if diff:
                    g = _DIFF_F.reshape(_DIFF_F.moveaxis(g, 0, 1), (b,) + ts[1:] + ss[1:])
                else:
                    g0, g = g, _batch_jacobian_layout(g, (b,) + ts[1:] + ss[1:])
                    traced(_batch_jacobian_layout, (g0, (b,) + ts[1:] + ss[1:]), g, True)
            out = _result(g, source, unconnected, diff, ts[1:], batch=True)
        finally:
            self._finish_backprop()
        return out


def _quiet() -> Any:
    # Infinite and NaN gradients are results (sqrt at 0 is inf), not numpy warnings.
    return np.errstate(divide="ignore", invalid="ignore", over="ignore")


def _check_sources(flat_s: list, what: str) -> None:
    for s in flat_s:
        if not isinstance(s, Tensor):
            raise ValueError(
                f"GradientTape.{what}: sources must be gt.Tensors or gt.Variables (or nested "
                f"lists/tuples/dicts of them), got {type(s).__name__}"
            )


def _seeds(flat_t: list, flat_og: list, diff: bool, lead: Any) -> dict[int, Any]:
    """Initial cotangents: ones (or output_gradients) for each floating target."""
    from .tensor import _to_array

    seeds: dict[int, Any] = {}
    for t, og in zip(flat_t, flat_og):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"GradientTape: target must be a gt.Tensor or a nested structure of them, got {type(t).__name__}"
            )
        d = t._data
        if d.dtype not in DIFF_DTYPES:
            _warn_once(
                f"target-{d.dtype}",
                f"GradientTape: the dtype of the target must be floating or complex (got {d.dtype}); its gradients are "
                "None. Cast it with .astype('float32').",
            )
            continue
        xp = np if type(d) is _ndarray else backend.xp_of(d)
        if lead is None:
            if og is None:
                g = xp.ones(d.shape, d.dtype)
            else:
                g = og._data if isinstance(og, Tensor) else _to_array(og, d.dtype)
                if g.shape != d.shape:
                    raise ValueError(
                        f"GradientTape.gradient: output_gradients shape {g.shape} does not match target shape {d.shape}"
                    )
                if g.dtype != d.dtype:
                    g0, g = g, g.astype(d.dtype)
                    traced(_astype, (g0, d.dtype), g, True)
                if diff and isinstance(og, Tensor):
                    g = og if og._data.dtype == d.dtype else og.astype(d.dtype)
        elif lead[0] == "jacobian":
            n = lead[1]
            g = xp.eye(n, dtype=d.dtype).reshape((n,) + d.shape)
        else:  # batch jacobian: cotangent k selects element k of every example
            ny = lead[1]
            b = d.shape[0]
            g = xp.ascontiguousarray(xp.broadcast_to(xp.eye(ny, dtype=d.dtype)[:, None, :], (ny, b, ny))).reshape(
                (ny,) + d.shape
            )
        if diff and not isinstance(g, Tensor):
            g = _wrap(g)
        prev = seeds.get(t._id)
        seeds[t._id] = g if prev is None else prev + g
    return seeds


def _result(g: Any, s: Tensor, unconnected: UnconnectedGradients, diff: bool, tshape: Any, batch: bool = False) -> Any:
    """Wrap a raw gradient as a Tensor; None or zeros for unconnected / integer sources."""
    d = s._data
    if d.dtype not in DIFF_DTYPES:
        _warn_once(
            f"source-{d.dtype}",
            f"GradientTape: the dtype of a source must be floating or complex (got {d.dtype}); its gradient is None. "
            "Cast it with .astype('float32').",
        )
        g = None
    if g is None:
        if unconnected is UnconnectedGradients.ZERO:
            xp = np if type(d) is _ndarray else backend.xp_of(d)
            if tshape is None:
                shape = d.shape
            elif batch:
                shape = d.shape[:1] + tuple(tshape) + d.shape[1:]
            else:
                shape = tuple(tshape) + d.shape
            return _wrap(xp.zeros(shape, d.dtype))
        return None
    if diff:
        return g
    if not g.flags.c_contiguous:  # broadcast views and transposes: hand out a real array
        g0, g = g, (np if type(g) is _ndarray else backend.xp_of(g)).ascontiguousarray(g)
        traced(_contiguous, (g0,), g, True)
    return _wrap(g)


def _astype(a: Any, dtype: Any) -> Any:
    return a.astype(dtype)


def _contiguous(a: Any) -> Any:
    return (np if type(a) is _ndarray else backend.xp_of(a)).ascontiguousarray(a)


def _reshape(a: Any, shape: tuple) -> Any:
    return a.reshape(shape)


def _batch_jacobian_layout(g: Any, shape: tuple) -> Any:
    F = np if type(g) is _ndarray else backend.xp_of(g)
    return F.reshape(F.moveaxis(g, 0, 1), shape)


class _StopRecording(_state.Scope):
    """``tape.stop_recording()``: while on the stack, the tape below it does not record
    (ops on values it tracks are marked for explain() instead)."""

    observes = "pause"

    def __init__(self, tape: GradientTape) -> None:
        self.tape = tape

    def __enter__(self) -> None:
        if self.tape._tensors is None:
            raise RuntimeError(
                "GradientTape.stop_recording() can only be used in a recording context: enter the tape first"
            )
        super().__enter__()


# ---------------------------------------------------------------------------------
# stop_gradient and custom_gradient


def stop_gradient(x: Any) -> Tensor:
    """Return ``x`` as a new tensor through which no gradient flows.

    >>> import gputape as gt
    >>> x = gt.constant(2.0)
    >>> with gt.GradientTape() as t:
    ...     t.watch(x)
    ...     y = x * gt.stop_gradient(x)
    >>> float(t.gradient(y, x))
    2.0
    """
    from .tensor import as_tensor

    x = as_tensor(x)
    res = _wrap_op(x._data)
    obs = _tls.obs
    if obs is not None:
        tapes = obs.tapes
        if tapes:
            where = None
            for tape in tapes:
                if x._id in tape._tensors or x._id in tape._broken:
                    where = where or _where()
                    tape._broken[res._id] = ("stop_gradient", "stop_gradient", where, (x._id,))
                else:
                    tape._edges[res._id] = ("stop_gradient", (x._id,))
    return res


def _custom_fwd(xp: Any, *arrays: Any, **params: Any) -> Any:  # pragma: no cover - never run
    raise RuntimeError("custom_gradient nodes are recorded directly")


_CUSTOM = Primitive("custom_gradient", _custom_fwd, nout=1, batchable=False)


def _custom_vjp(F: Any, g: Any, needs: list[bool], nb: int, node: Node, *saved: Any) -> list:
    info = node.params
    grad_fn = info["grad_fn"]
    variables = info["variables"]
    gs = g if isinstance(g, list) else [g]
    diff = F is _DIFF_F
    dys = []
    for x, (shape, dtype) in zip(gs, info["out_meta"]):
        if x is None:  # an output the target does not use: its cotangent is zero
            x = F.zeros(shape, dtype)
        dys.append(x if diff else _wrap(x))
    if variables:
        res = grad_fn(*dys, variables=variables)
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise ValueError(
                f"custom_gradient {info['name']!r}: grad_fn uses variables, so it must return "
                "(input_gradients, variable_gradients)"
            )
        input_grads, var_grads = res
        var_grads = list(var_grads) if isinstance(var_grads, (list, tuple)) else [var_grads]
        if len(var_grads) != len(variables):
            raise ValueError(
                f"custom_gradient {info['name']!r}: grad_fn returned {len(var_grads)} variable gradients "
                f"for {len(variables)} variables; return one per variable"
            )
    else:
        input_grads = grad_fn(*dys)
        var_grads = []
    flat_in = list(input_grads) if isinstance(input_grads, (list, tuple)) else [input_grads]
    if len(flat_in) != info["nargs"]:
        raise ValueError(
            f"custom_gradient {info['name']!r}: grad_fn returned {len(flat_in)} gradients for "
            f"{info['nargs']} inputs; return exactly one gradient (or None) per input"
        )
    out = []
    for i, x in enumerate(flat_in + var_grads):
        if x is not None and not isinstance(x, Tensor):
            x = _wrap(_custom_grad_array(x, i, info))
        if x is None:
            out.append(None)
        else:
            out.append(x if diff else x._data)
    return out


def _custom_grad_array(x: Any, i: int, info: dict) -> Any:
    """A gradient grad_fn returned as a number, list or array; anything else is the user's bug, named.

    Python numbers and lists take the dtype of the function's (first) output, so that a
    float64 function's ``lambda dy: 2.0`` is a float64 gradient, not float32.
    """
    out_dtype = info["out_meta"][0][1]
    dtype = out_dtype if not hasattr(x, "dtype") and out_dtype in FLOAT_DTYPES else None
    try:
        return _tensor_mod._to_array(x, dtype)
    except (TypeError, ValueError) as exc:
        what = f"input {i}" if i < info["nargs"] else f"variable {info['variables'][i - info['nargs']].name!r}"
        raise TypeError(
            f"custom_gradient {info['name']!r}: grad_fn returned {_errors.describe(x)} as the gradient for {what}; "
            "return a tensor (or an array, a number, or None for no gradient) per input"
        ) from exc


_CUSTOM.vjp = _custom_vjp


def custom_gradient(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator to define a function's gradient yourself (``tf.custom_gradient``).

    ``f(*args)`` returns ``(y, grad_fn)``; ``grad_fn(*dys)`` returns one gradient
    per argument of ``f``. If ``f`` reads Variables, ``grad_fn`` must accept
    ``variables=None`` and return ``(input_grads, variable_grads)``.

    >>> import gputape as gt
    >>> @gt.custom_gradient
    ... def clip_grad_identity(x):
    ...     def grad(dy):
    ...         return gt.clip(dy, -1.0, 1.0)
    ...     return gt.identity(x), grad
    >>> x = gt.constant([1.0, 2.0])
    >>> with gt.GradientTape() as t:
    ...     t.watch(x); y = gt.sum(clip_grad_identity(x) * 10.0)
    >>> t.gradient(y, x).numpy().tolist()
    [1.0, 1.0]
    """
    name = getattr(f, "__name__", "custom_gradient")

    def wrapped(*args: Any) -> Any:
        from .tensor import as_tensor

        forward = _CustomForward()
        try:
            with forward:  # the tapes do not record f's own ops; its variable reads are collected
                result, grad_fn = _custom_forward(f, args)
        finally:
            if forward._undo is not None:  # a Ctrl-C on __exit__'s first bytecode skipped its pop
                _state.pop(forward)
        variables = list(forward.watched.values())
        obs = _tls.obs
        for w in obs.watchers if obs is not None else ():  # an enclosing custom_gradient sees these reads too
            for v in variables:
                w.setdefault(v._id, v)
        if variables:
            try:
                sig = inspect.signature(grad_fn)
                takes = "variables" in sig.parameters or any(
                    p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()
                )
            except (TypeError, ValueError):
                takes = True
            if not takes:
                raise TypeError(
                    f"custom_gradient {name!r}: the function reads variables "
                    f"{[v.name for v in variables]}, so grad_fn must accept a keyword argument "
                    "'variables' and return (input_gradients, variable_gradients)"
                )
        flat_r, r_spec = _flatten(result)
        outs = [_wrap_op(as_tensor(r)._data) for r in flat_r]  # op outputs: even ids (explain)
        inputs = [a if isinstance(a, Tensor) else None for a in args]
        tensor_args = tuple(a if a is not None else 0.0 for a in inputs) + tuple(variables)
        params = {
            "grad_fn": grad_fn,
            "variables": variables,
            "nargs": len(args),
            "name": name,
            "out_meta": [(o.shape, o.dtype) for o in outs],
        }
        if obs is not None and obs.tapes:
            for tape in obs.tapes:
                if tape._auto:
                    for v in variables:
                        if v._trainable:
                            tape._watch_variable(v)
            prim = _CUSTOM if len(outs) == 1 else _custom_multi(len(outs))
            _record(obs, prim, tensor_args, params, outs[0] if len(outs) == 1 else outs)
        return _unflatten(r_spec, outs)

    wrapped.__name__ = name
    wrapped.__doc__ = f.__doc__
    wrapped.__wrapped__ = f  # type: ignore[attr-defined]
    return wrapped


def _custom_forward(f: Callable[..., Any], args: tuple) -> Any:
    """A ``custom_gradient`` function's forward: one call, which ``gt.profiler`` times as the op."""
    return f(*args)


_custom_multis: dict[int, Primitive] = {}


def _custom_multi(n: int) -> Primitive:
    if n not in _custom_multis:
        p = Primitive(f"custom_gradient[{n}]", _custom_fwd, nout=n, batchable=False)
        p.vjp = _custom_vjp
        _custom_multis[n] = p
    return _custom_multis[n]


class _CustomForward(_state.Scope):
    """A ``custom_gradient`` forward on the observer stack: hides the tapes, collects variable reads."""

    observes = "custom"
    _guarded = False  # custom_gradient guards its pop with try/finally (and runs per call)

    def __init__(self) -> None:
        self.watched: dict[int, Variable] = {}
