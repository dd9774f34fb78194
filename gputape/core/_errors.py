"""Errors at gputape's boundary: one helper that names the public function and the argument.

Arguments are converted in a few places (operands to arrays, axes, shapes and sizes, dtypes)
and ops run numpy's or cupy's forward in one place (``tape._op_error``). Each wraps what
already happens in ``try``/``except`` and, only when it fails, asks :func:`argument_error` for
an exception that says which public function the user called (``gt.nn.softmax``, even when
the failure is two calls deeper, in ``gt.exp``), which argument (by parameter name) and what
to do, with the original exception chained as its ``__cause__``. Nothing here runs while
arguments are fine, so the hot path pays nothing.

Never wrapped: ``KeyboardInterrupt``, ``SystemExit`` (not ``Exception`` subclasses, so no
``except Exception`` sees them) and ``MemoryError`` (re-raised as it is: callers that handle
running out of memory must still see it), nor ``FloatingPointError`` under
``np.errstate(all="raise")``, which the user asked for by name.

This module imports nothing from gputape: the public names are looked up lazily, through
``sys.modules``, on the error path.
"""

from __future__ import annotations

import os
import reprlib
import sys
import types
from typing import Any, TypeVar

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

class GputapeWarning(UserWarning):
    """Warnings raised by gputape itself (integer sources, ignored arguments, a CPU fallback).

    It lives in this leaf module, below the device layer, so that every gputape warning
    (:class:`gputape.CpuFallbackWarning` included) can subclass it; ``gputape.GputapeWarning`` and
    ``gputape.core.tape.GputapeWarning`` are this class.

    >>> import gputape as gt
    >>> issubclass(gt.CpuFallbackWarning, gt.GputapeWarning)
    True
    """


#: exceptions passed through untouched wherever gputape wraps errors
NEVER_WRAP = (MemoryError, FloatingPointError)

_names: dict[types.CodeType, str] = {}
_names_key = -1

#: frames that hand their arguments on to a public function unchanged, in another order
#: (the reflected operators: ``300 + t`` runs ``gt.add(300, t)``): never the entry, so an error
#: names the arguments as that function's parameters (x, y), not as the wrapper's (other, self)
_FORWARDERS: set[types.CodeType] = set()


def forwarder(fn: Any) -> Any:
    """Mark ``fn`` as a forwarder (see :data:`_FORWARDERS`); returns it."""
    _FORWARDERS.add(fn.__code__)
    return fn


def _public_names() -> dict[types.CodeType, str]:
    """code object -> public name (``gt.sum``, ``gt.nn.relu``, ``gt.Variable.assign``).

    Rebuilt when another gputape module was imported since (``gputape.tf`` loads on demand).
    """
    global _names, _names_key
    key = sum(1 for n in list(sys.modules) if n.startswith("gputape"))
    if key == _names_key:
        return _names
    gt = sys.modules.get("gputape")
    found: dict[types.CodeType, dict[int, list[str]]] = {}
    if gt is not None:
        spaces = [("gt.", gt)]
        for n in sorted(getattr(gt, "__all__", ())):
            m = getattr(gt, n, None)
            if isinstance(m, types.ModuleType) and m.__name__.startswith("gputape."):
                spaces.append((f"gt.{n}.", m))
        # the TensorFlow-compatible layer goes by the names its users import it as (tf.math.reduce_sum)
        for n, m in sorted(sys.modules.items()):
            if (n == "gputape.tf" or n.startswith("gputape.tf.")) and isinstance(m, types.ModuleType):
                spaces.append((n[len("gputape.") :] + ".", m))
        for prefix, ns in spaces:
            # a submodule's own functions, not the helpers it imported (gt.shape.apply)
            home = "gputape" if ns is gt else ns.__name__
            # gt.linalg's and gt.fft's functions live in their ops counterparts (gputape.ops.linalg, ...)
            homes = (home, "gputape.ops." + home[len("gputape.") :]) if home.count(".") == 1 else (home,)
            for n in sorted(dir(ns)):
                if n.startswith("_"):
                    continue
                try:
                    obj = getattr(ns, n, None)
                except Exception:  # a lazy module attribute that fails to load: not ours to report here
                    continue
                if not (getattr(obj, "__module__", None) or "").startswith(homes):
                    continue
                if isinstance(obj, type):
                    for m, f in vars(obj).items():
                        if m == "__init__" or not m.startswith("_"):
                            _add(found, f, f"{prefix}{n}" if m == "__init__" else f"{prefix}{n}.{m}")
                elif callable(obj):
                    _add(found, obj, f"{prefix}{n}")
    # A code object shared by several public functions (the generated elementwise ops)
    # names none of them: the caller's own op name is used instead. One function under
    # several names (gt.sum, gt.reduce.sum) goes by its shortest.
    _names = {
        c: min(next(iter(by_fn.values())), key=lambda s: (s.count("."), len(s), s))
        for c, by_fn in found.items()
        if len(by_fn) == 1
    }
    _names_key = key
    return _names


def _add(found: dict[types.CodeType, dict[int, list[str]]], f: Any, name: str) -> None:
    f = getattr(f, "__func__", f)
    f = getattr(f, "fget", f)
    code = getattr(f, "__code__", None)
    if code is not None:
        found.setdefault(code, {}).setdefault(id(f), []).append(name)


def _entry_frame() -> types.FrameType | None:
    """The outermost gputape frame of the current call: the public function the user called."""
    f: types.FrameType | None = sys._getframe(2)
    entry = None
    while f is not None:
        if f.f_code.co_filename.startswith(_PKG):
            if f.f_code not in _FORWARDERS:
                entry = f
        elif entry is not None:
            break
        f = f.f_back
    return entry


def _argument_name(frame: types.FrameType | None, value: Any) -> str | None:
    """The parameter of ``frame`` that holds ``value`` (``operands[1]`` inside a ``*args``)."""
    if frame is None:
        return None
    code = frame.f_code
    nparams = code.co_argcount + code.co_kwonlyargcount
    nparams += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    local = frame.f_locals
    params = [p for p in code.co_varnames[:nparams] if p != "self"]
    for p in params:
        if local.get(p, _MISSING) is value:
            return p
    for p in params:
        held = local.get(p)
        if isinstance(held, (tuple, list)):
            for i, v in enumerate(held):
                if v is value:
                    return f"{p}[{i}]"
        elif isinstance(held, dict):
            for k, v in held.items():
                if v is value:
                    return f"{p}[{k!r}]"
    return None


_MISSING = object()


def argument_names(args: tuple) -> list[str]:
    """A name for each of an op's inputs, as the public function's caller passed them.

    By identity on the public function's frame (``x``, ``y``, ``operands[1]``); inputs it
    converted first (a list in ``xs``) are matched by position to the one list parameter
    of the same length (``xs[0]``, ``xs[1]``); else ``input i``.
    """
    entry = _entry_frame()
    names = [_argument_name(entry, a) for a in args]
    if entry is not None and None in names:
        local = entry.f_locals
        code = entry.f_code
        lists = [p for p in code.co_varnames[: code.co_argcount] if isinstance(local.get(p), (list, tuple))]
        if len(lists) == 1 and len(local[lists[0]]) == len(args):
            names = [n or f"{lists[0]}[{i}]" for i, n in enumerate(names)]
    return [n or f"input {i}" for i, n in enumerate(names)]


def where(op: str | None = None) -> str:
    """``gt.<public function>`` the user called, and ``(in gt.<op>)`` when ``op`` is a different one."""
    entry = _entry_frame()
    name = _public_names().get(entry.f_code) if entry is not None else None
    inner = f"gt.{op}" if op else None
    if name is None:
        return inner or "gputape"
    if inner and inner != name and not name.endswith("." + op):  # type: ignore[operator]
        return f"{name} (in {inner})"
    return name


_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxtuple, _repr.maxdict, _repr.maxstring, _repr.maxother = 3, 6, 6, 4, 40, 60


def describe(value: Any) -> str:
    """A short, safe description of an argument: arrays by shape and dtype, anything else by a
    bounded repr (a ten-million-element list is not printed), whatever its hooks raise."""
    try:
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape is not None and dtype is not None and not callable(shape):
            return f"{type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    except Exception:  # a hostile shape or dtype attribute
        pass
    try:
        return _repr.repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def is_clear(exc: BaseException) -> bool:
    """True for an error gputape already explained (raised here, or a message naming ``gt.``)."""
    return getattr(exc, "_gputape", False) or str(exc).startswith(("gt.", "Variable.", "custom_gradient"))


def argument_error(
    value: Any,
    problem: str,
    exc: BaseException | None = None,
    *,
    op: str | None = None,
    arg: str | None = None,
    hint: str = "",
    cls: type[Exception] | None = None,
) -> Exception:
    """The exception to raise (``raise argument_error(...) from exc``) for a bad argument.

    ``problem`` says what is wrong with ``value``; ``arg`` is the parameter name when the
    caller knows it (otherwise it is found on the public function's frame). The class is
    ``cls``, else ValueError for a ValueError/IndexError and TypeError for anything else
    (the value could not be converted at all: a hostile ``__array__``, an attribute error).
    """
    entry = _entry_frame()
    name = where(op)
    found = arg or _argument_name(entry, value)
    who = f"argument {found} ({describe(value)})" if found else f"argument {describe(value)}"
    cause = f" [{type(exc).__name__}: {exc}]" if exc is not None else ""
    msg = f"{name}: {who} {problem}{cause}"
    if hint:
        msg += f"; {hint}"
    if cls is None:
        cls = ValueError if isinstance(exc, (ValueError, IndexError)) else TypeError
    err = cls(msg)
    err._gputape = True  # type: ignore[attr-defined]
    return err


def unconvertible(name: str, arg: str, value: Any, expected: str, exc: BaseException) -> Exception:
    """The exception for ``value`` (argument ``arg`` of ``name``) that could not be converted to
    ``expected``: a ValueError when the conversion raised one (ragged lists), else a TypeError; marked.

    >>> unconvertible("f", "x", [[1], [2, 3]], "an array of numbers", ValueError("inhomogeneous"))
    ValueError('f: argument x ([[1], [2, 3]]) is not an array of numbers [ValueError: inhomogeneous]')
    """
    cls = ValueError if isinstance(exc, ValueError) else TypeError
    return mark(cls(f"{name}: argument {arg} ({describe(value)}) is not {expected} [{type(exc).__name__}: {exc}]"))


_E = TypeVar("_E", bound=BaseException)


def mark(err: _E) -> _E:
    """Flag ``err`` as already explained, so an outer boundary passes it through unchanged."""
    err._gputape = True  # type: ignore[attr-defined]
    return err


def own_code(fn: Any, name: str) -> Any:
    """Give a generated function (one closure per op) a code object of its own, named ``name``.

    Tracebacks and profiles then say ``exp``, not ``op``, and :func:`where` can tell which
    public function a failing call entered through. The code is unchanged, so is its speed.
    """
    code = fn.__code__.replace(co_name=name)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    fn.__code__ = code
    fn.__name__ = fn.__qualname__ = name
    return fn
