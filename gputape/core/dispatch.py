"""Dispatch: the entry point of every primitive, from arguments to a recorded result.

:func:`apply` runs a primitive's forward on raw arrays (converting constants, placing host
operands on the op's GPU) and, only when something observes this thread (the flag
``gputape.core.state.anywhere``, then this thread's ``gputape.core.state.tls.obs``), hands the result to
the recorders of :mod:`gputape.core.recording`. The per-primitive public functions of elementwise
ops are generated from their declaration (:func:`unary_op`, :func:`binary_op`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..devices import backend
from ..devices.placement import gpu_operands as _gpu_operands
from . import _errors
from . import expr as _expr
from . import state as _state
from . import tensor as _tensor_mod
from ._generate import generate
from .expr.forward import FORWARDS as _FORWARDS
from .expr.forward import expand as _expand
from .primitive import _NOPARAMS, REGISTRY, Primitive
from .recording import recorder1, recorder2, recorder_n
from .state import tls as _tls
from .tensor import Tensor, _new, _next_id, _wrap_op

_ndarray = np.ndarray


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
    if isinstance(exc, OverflowError):  # numpy's class, which a numpy user catches (a subclass of neither)
        cls = OverflowError
        hint = (
            "; a Python number does not fit the tensor's dtype (NumPy refuses it rather than wrap it): "
            "pass a number in range, or cast the tensor first (gt.cast)"
        )
    elif prim.name == "matmul" and any(not isinstance(s, tuple) or s == () for s in shapes):  # (a number: type name)
        hint = "; matmul takes no scalars (numpy's rule): use * to multiply by a number"
    elif prim.name in ("matmul", "dot", "einsum"):
        hint = "; the inner dimensions must agree (x.shape[-1] == y.shape[-2])"
    elif len(shapes) > 1 and "broadcast" in str(exc):  # (not for a value error: 2 ** negative ints)
        hint = "; shapes must be equal or broadcastable (numpy rules)"
    names = _errors.argument_names(args)
    what = ", ".join(
        f"{n} = {a!r:.40} (a Python {s})"
        if isinstance(a, (int, float, complex, list, tuple))
        else f"{n} of shape {s} and dtype {d}"
        for n, s, d, a in zip(names, shapes, dtypes, args)
    )
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
    # numbers as they are, subclasses too (an IntEnum, a float subclass): numpy's own rule then
    # gives their dtype (an exact Python number is weak, a subclass strong, as in numpy)
    if type(a) is float or type(a) is int or type(a) is _ndarray or isinstance(a, (np.generic, int, float, complex)):
        return a
    if a is None and prim is not None and prim.name == "clip":
        return a  # clip's missing bound
    if isinstance(a, (list, tuple)):
        p = _tensor_mod.packed(a)  # a list holding tensors is packed on the tape; apply then runs again with it
        if p is not None:
            return p
    if isinstance(a, _ndarray):
        # an ndarray subclass: its plain array, as a tensor holds (a np.matrix result would change
        # what * means; a masked array's mask would be dropped silently: _to_array refuses one with
        # masked elements)
        return _tensor_mod._to_array(a)
    if hasattr(a, "__cuda_array_interface__"):
        if getattr(getattr(a, "dtype", None), "kind", None) in _tensor_mod.NUMERIC_KINDS:
            return a  # a device array
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
        elif type(a) is _ndarray or type(a) is float or type(a) is int:
            d = a  # (_const_array's first case, the usual constant: a label array, a number)
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
    prof = obs = None
    if _state.anywhere:  # (read once: the forward changes no observer)
        prof = _state.profiler
        obs = _tls.obs
    try:
        if prof is None:
            out = prim.fwd(xp, *datas, **params)
        else:
            out = prof.call(prim.name, "forward", prim.fwd, (xp, *datas), params)
    except Exception as exc:
        raise _op_error(prim, args, params, exc) from exc
    if prim.nout == 1:
        if type(out) is not _ndarray and isinstance(out, np.generic):
            out = np.asarray(out)  # (as _fix_output: a full reduction's numpy scalar)
        res = _new(Tensor)
        res._data = out
        res._id = _next_id()
    else:
        res = [_wrap_op(o if type(o) is _ndarray else _fix_output(o)) for o in out]
    if obs is not None:
        prim.record(obs, args, params, res, datas)
    return res


# -- generated entry points -------------------------------------------------------
# The public functions of the elementwise primitives without parameters (the operators among
# them) are apply() specialised to one or two operands and written out as straight-line code
# when the primitive is declared, with what the declaration fixes baked in: the C-level CPU
# forward when there is one, the saved residuals, the name. Per-op overhead is what small
# models pay for, and a generic function re-deciding those per call costs ~0.2 us an op.
# Anything off the fast shape (a list, an array, two numbers, a host and a GPU tensor) takes
# apply(), so the semantics are apply()'s.

# the end of both entry points: the result wrapped as a Tensor, then, when observed, the
# recording (gputape.core.recording.recorder1/recorder2) written out: forward and record in one frame
_RESULT = """\
    if type(out) is not ndarray:
        out = fix_output(out)
    res = new(Tensor)
    res._data = out
    res._id = next_id()
    if obs is None:
        return res
{record}    return res
"""

_UNARY = """
def {name}(x):
    if not isinstance(x, Tensor):
        return apply(prim, (x,), NOPARAMS)
    obs = None
    if state.anywhere:
        if state.profiler is not None:
            return apply(prim, (x,), NOPARAMS)  # (the profiled path)
        obs = tls.obs
    d = x._data
    try:
        {forward}
    except Exception as exc:
        raise op_error(prim, (x,), NOPARAMS, exc) from exc
{result}"""

_BINARY = """
def {name}(x, y):
    if isinstance(x, Tensor):
        a = d = x._data
        if isinstance(y, Tensor):{same}
            b = y._data
        elif type(y) is float or type(y) is int:
            b = y{typed_b}
        else:
            return apply(prim, (x, y), NOPARAMS)
    elif isinstance(y, Tensor) and (type(x) is float or type(x) is int):
        a = x
        b = d = y._data{typed_a}
    else:
        return apply(prim, (x, y), NOPARAMS)
    obs = None
    if state.anywhere:
        if state.profiler is not None:
            return apply(prim, (x, y), NOPARAMS)  # (the profiled path)
        obs = tls.obs
    try:
        {forward}
    except Exception as exc:
        if type(a) is not type(b) and isinstance(x, Tensor) and isinstance(y, Tensor):
            return apply(prim, (x, y), NOPARAMS)  # a host and a GPU tensor: apply's placement rule
        raise op_error(prim, (x, y), NOPARAMS, exc) from exc
{result}"""


_TYPED = """
{i}if type(d) is ndarray:
{i}    t = LITERALS.get({n})
{i}    {v} = (literal_miss({n}) if t is None else t).get(d.dtype, {n})"""

def typed_path(prim: Primitive) -> bool:
    """Whether ``prim``'s generated entry point hands its ufunc typed numbers (:func:`typed_number`)."""
    return "LITERALS" in getattr(getattr(prim.public, "__code__", None), "co_names", ())


def _inline_forward(prim: Primitive) -> str | None:
    """The host forward of a one-operand ``prim`` as an expression over ``d`` when ``prim``'s forward
    is a declared value (gputape.core.expr.forward) that numpy evaluates in one line (``np.maximum(d, 0)``
    for relu): the entry point then computes it in its own frame. None for any other forward."""
    decl = _FORWARDS.get(prim.name)
    if decl is None or decl.fn is not prim.fwd or decl.params or not decl.array_native:
        return None
    defs, res = _expr.hoist(_expand(decl.expr))
    return None if defs else _expr.python(res, {"x": "d"}, "np")


def _entry(prim: Primitive, name: str, template: str, doc: str, **env: Any) -> Callable[..., Tensor]:
    cpu = prim.cpu is not None
    operands = "d" if template is _UNARY else "a, b"
    inline = _inline_forward(prim) if template is _UNARY and not cpu else None
    if cpu:
        forward = f"out = cpu({operands}) if type(d) is ndarray else fwd(backend.xp_of(d), {operands})"
    elif inline is not None:
        forward = f"out = {inline} if type(d) is ndarray else fwd(backend.xp_of(d), d)"
    else:
        forward = f"out = fwd(np if type(d) is ndarray else backend.xp_of(d), {operands})"
    same = env.pop("same_src", "")
    record, record_ns = env.pop("recorder")
    result = _RESULT.format(record=record)
    typed = {"typed_a": "", "typed_b": ""}
    if cpu and template is _BINARY:
        # A Python number beside a host array: its same-dtype 0-d array (gputape.core.expr.literal), which
        # the ufunc takes in half the time it takes to convert the number, to the same bits (NEP 50).
        # Only the ufunc sees it: the recorder, the hooks and any error see the number.
        for side, v in (("typed_a", "a"), ("typed_b", "b")):
            typed[side] = _TYPED.format(v=v, n="x" if v == "a" else "y", i=" " * (8 if v == "a" else 12))
    src = template.format(name=name, forward=forward, same=same, result=result, **typed)
    ns = {
        **record_ns,
        "__name__": __name__,
        "Tensor": Tensor,
        "ndarray": _ndarray,
        "np": np,
        "backend": backend,
        "state": _state,
        "tls": _tls,
        "new": _new,
        "next_id": _next_id,
        "fix_output": _fix_output,
        "op_error": _op_error,
        "apply": apply,
        "NOPARAMS": _NOPARAMS,
        "prim": prim,
        "fwd": prim.fwd,
        "cpu": prim.cpu,
        "LITERALS": _expr.NUMBERS,
        "literal_miss": _expr.number_miss,
        **env,
    }
    fn = generate(name, src, ns)
    fn.__doc__ = doc
    # the module whose top level declares the op, which binds its name: pickle finds the function
    # there by name (gputape.core.dispatch has no attribute of that name)
    f = sys._getframe(1)
    while f is not None and f.f_code.co_name != "<module>":
        f = f.f_back
    fn.__module__ = f.f_globals.get("__name__", __name__) if f is not None else __name__
    if prim.public is None:
        prim.public = fn  # F.<name> on tensors (gputape.ops' VJP namespace)
    return fn


def unary_op(prim: Primitive, name: str, doc: str) -> Callable[[Any], Tensor]:
    """The public function of an elementwise one-argument primitive without parameters
    (its output has its input's shape: the recorder relies on it), generated from ``prim``.

    >>> import gputape as gt
    >>> gt.tanh.__code__.co_filename.endswith("<generated tanh>")
    True
    """
    return _entry(prim, name, _UNARY, doc, recorder=recorder1(prim))


def binary_op(prim: Primitive, name: str, doc: str, same: Primitive | None = None) -> Callable[[Any, Any], Tensor]:
    """The public function of a two-argument primitive without parameters, generated from ``prim``.

    A tensor and a tensor-or-Python-number take the generated fast path; anything else
    (lists, arrays, two numbers) takes :func:`apply`. With ``same``, ``op(x, x)`` runs that
    one-argument primitive instead (x * x as square: one VJP term instead of two summed).
    """
    env: dict[str, Any] = {"recorder": recorder2(prim)}
    if same is not None:
        if same.public is None:  # (declared after this op: its entry point is made here)
            unary_op(same, same.name, "")
        env["same_op"] = same.public
        env["same_src"] = "\n            if x is y:\n                return same_op(x)"
    return _entry(prim, name, _BINARY, doc, **env)


def primitive(
    name: str,
    *,
    complex: str,  # noqa: A002 (what it does with complex values; the builtin is unused here)
    save: bool | tuple[int, ...] | slice = (),
    save_out: bool = False,
    nout: int = 1,
    batchable: bool = True,
) -> Callable[[Callable[..., Any]], Primitive]:
    """Decorator: register ``fwd`` as primitive ``name``; add its VJP with ``.defvjp``.

    ``complex`` (no default: every primitive says it) is what it does with complex values on a
    tape: ``"holomorphic"``, ``"direct"``, ``"real"`` or ``refused(why)``
    (:class:`gputape.core.primitive.Primitive`).

    >>> from gputape.core.dispatch import primitive
    >>> @primitive("demo_cube", complex="holomorphic", save=True)
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
    >>> from gputape.core.primitive import REGISTRY
    >>> del REGISTRY["demo_cube"]  # keep the doctest out of the real registry
    """

    def deco(fwd: Callable[..., Any]) -> Primitive:
        if name in REGISTRY:
            raise ValueError(f"primitive {name!r} is already registered")
        prim = Primitive(name, fwd, save, save_out, nout, batchable, complex=complex)
        prim.call = functools.partial(apply, prim)
        prim.record = recorder_n(prim)
        REGISTRY[name] = prim
        return prim

    return deco
