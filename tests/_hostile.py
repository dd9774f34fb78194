"""The hostile-input table: every public gputape function called with bad arguments.

Each public callable of ``gt``, ``gt.nn`` (functional), ``gt.random``, ``gt.linalg`` and
``gt.testing`` gets one valid baseline call; then each of its parameters in turn is
replaced by every bad value of that parameter's kind (operand, axis, shape, size, dtype,
number, ...). Each outcome is put in one category:

* ``clear``: a TypeError/ValueError whose message names the function called (any of its
  public aliases, e.g. ``gt.sum``) and the argument (its parameter name, or the bad
  value's repr/type/dtype);
* ``result``: it returned, and the result equals numpy's on the same arguments (or, for a
  benign value such as a read-only array, the result on its ordinary twin);
* ``accepted``: it returned where numpy refuses, or a result nothing checks;
* ``wrong``: it returned something different from numpy's result;
* ``refused``: it raised for a valid-but-unusual value (a read-only array, a numpy integer)
  whose ordinary twin works;
* ``gputape-other``: a gputape-named error that does not name this function or argument;
* ``numpy``: an error with numpy's message and no gputape name;
* ``python``: a Python-internal error (AttributeError, IndexError, ``'NoneType' object``...);
* ``hostile``: the hostile object's own exception passed through unexplained.

``PYTHONPATH=. python tests/_hostile.py`` prints the counts and the non-clear cases.
"""

from __future__ import annotations

import inspect
import os
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import gputape as gt


class HostileError(Exception):
    """Raised by every conversion hook of :class:`Hostile`."""


class Hostile:
    """An object whose ``__array__``, ``__float__``, ``__index__``, ``__len__`` ... all raise."""

    def _boom(self, *args: Any, **kwargs: Any) -> Any:
        raise HostileError("hostile conversion")

    __array__ = __float__ = __int__ = __index__ = __len__ = __iter__ = __getitem__ = __bool__ = _boom
    __complex__ = _boom

    def __repr__(self) -> str:
        return "<Hostile>"


@dataclass(frozen=True)
class Bad:
    label: str
    value: Any
    benign: Any = None  # for a valid-but-unusual value: its ordinary twin (same result expected)


def _ro() -> np.ndarray:
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    a.flags.writeable = False
    return a


def _noncontig() -> np.ndarray:
    return np.array([[1.0, 9.0, 2.0], [3.0, 9.0, 4.0]], dtype=np.float32)[:, ::2]


_BASE = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)

BAD: dict[str, list[Bad]] = {
    "operand": [
        Bad("None", None),
        Bad("str", "abc"),
        Bad("ragged", [[1.0, 2.0], [3.0]]),
        Bad("complex", np.array([[1 + 2j, 2.0], [3.0, 4.0]])),
        Bad("object", np.array([[1.0, "a"], [None, 4.0]], dtype=object)),
        Bad("structured", np.zeros((2, 2), dtype=[("a", "f4"), ("b", "i4")])),
        Bad("dict", {"a": 1}),
        Bad("hostile", Hostile()),
        Bad("readonly", _ro(), _BASE),
        Bad("noncontig", _noncontig(), _BASE),
        Bad("tuple", ((1.0, 2.0), (3.0, 4.0)), _BASE),
        Bad("float64", _BASE.astype(np.float64), _BASE),
    ],
    "axis": [
        Bad("str", "a"),
        Bad("float", 1.5),
        Bad("out-of-range", 5),
        Bad("negative-out-of-range", -5),
        Bad("repeated", (0, 0)),
        Bad("None-in-tuple", (0, None)),
        Bad("hostile", Hostile()),
        Bad("np.int64", np.int64(1), 1),
        Bad("0-d tensor", gt.constant(1), 1),
    ],
    "shape": [
        Bad("negative", (-2, 3)),
        Bad("float", (2.5, 2)),
        Bad("str", "ab"),
        Bad("None", None),
        Bad("nan", (float("nan"),)),
        Bad("nested", ((2,), 2)),
        Bad("hostile", Hostile()),
        Bad("ndarray", np.array([2, 2]), (2, 2)),
        Bad("tensor", gt.constant([2, 2]), (2, 2)),
        Bad("np.int64s", (np.int64(2), np.int32(2)), (2, 2)),
    ],
    "size": [
        Bad("negative", -1),
        Bad("float", 2.5),
        Bad("nan", float("nan")),
        Bad("inf", float("inf")),
        Bad("str", "3"),
        Bad("hostile", Hostile()),
        Bad("np.int64", np.int64(2), 2),
    ],
    "dtype": [
        Bad("unknown", "floaty"),
        Bad("object", object),
        Bad("int", 5),
        Bad("structured", np.dtype([("a", "f4")])),
        Bad("hostile", Hostile()),
    ],
    "number": [
        Bad("nan", float("nan")),
        Bad("inf", float("inf")),
        Bad("str", "0.1"),
        Bad("None", None),
        Bad("complex", 1 + 1j),
        Bad("hostile", Hostile()),
        Bad("np.float32", np.float32(0.5), 0.5),
    ],
    "flag": [Bad("hostile", Hostile())],
    # (a GPU that is absent is an environment RuntimeError, tested in tests/test_backend_device.py)
    "device": [Bad("unknown", "tpu"), Bad("int", 5)],
    "index": [
        Bad("str", "a"),
        Bad("float", 1.5),
        Bad("out-of-range", 9),
        Bad("hostile", Hostile()),
        Bad("np.int64", np.int64(1), 1),
    ],
    "operands": [
        Bad("None", None),
        Bad("empty", []),
        Bad("with-None", [_BASE, None]),
        Bad("ragged", [[1.0, 2.0], [3.0]]),
        Bad("hostile", Hostile()),
    ],
    "string": [Bad("int", 5), Bad("None", None), Bad("bogus", "bogus")],
    "callable": [Bad("None", None), Bad("int", 5)],
}


def t() -> gt.Tensor:
    return gt.constant(_BASE)


@dataclass
class Spec:
    """One public function: a valid call, each parameter's kind, and numpy's equivalent."""

    name: str
    fn: Callable[..., Any]
    args: dict[str, Any]  # parameter -> valid value (in call order)
    kinds: dict[str, str]  # parameter -> kind (a key of BAD); parameters not listed are not varied
    ref: Callable[..., Any] | None = None  # numpy's function with the same meaning
    star: str | None = None  # the name of a *args parameter: its value is a list of positional args
    ref_pos: int = 99  # how many leading arguments numpy takes positionally (the rest by keyword)
    also: tuple[str, ...] = ()  # other names its errors may go by (x[key] is gt.getitem)


# Parameter names -> kinds, for the generic rows; overridden per function below.
_KIND_OF = {
    "x": "operand",
    "y": "operand",
    "g": "operand",
    "value": "operand",
    "condition": "operand",
    "labels": "operand",
    "logits": "operand",
    "y_true": "operand",
    "y_pred": "operand",
    "t": "operand",
    "xs": "operands",
    "t_list": "operands",
    "axis": "axis",
    "axes": "axis",
    "axis1": "axis",
    "axis2": "axis",
    "source": "axis",
    "destination": "axis",
    "shape": "shape",
    "pad_width": "shape",
    "n": "size",
    "m": "size",
    "num": "size",
    "indices_or_sections": "size",
    "dtype": "dtype",
    "device": "device",
    "mean": "number",
    "stddev": "number",
    "minval": "number",
    "maxval": "number",
    "alpha": "number",
    "clip_norm": "number",
    "fill_value": "number",
    "start": "number",
    "stop": "number",
    "step": "number",
    "constant_values": "number",
    "min": "number",
    "max": "number",
    "ddof": "size",
    "keepdims": "flag",
    "approximate": "flag",
    "key": "index",
    "indices": "index",
    "mode": "string",
    "subscripts": "string",
    "f": "callable",
}

_UNARY = (
    "abs absolute arctan ceil cos cosh erf exp expm1 floor identity log log1p negative reciprocal round sign sin "
    "sinh sqrt square tan tanh arcsinh arccosh arctanh arcsin arccos log2 log10 exp2"
).split()
_BINARY = (
    "add divide floor_divide maximum minimum mod multiply multiply_no_nan power subtract true_divide "
    "hypot arctan2 logaddexp"
).split()
_COMPARE = "equal not_equal less less_equal greater greater_equal logical_and logical_or logical_xor".split()
_PRED = "isfinite isinf isnan logical_not".split()
_REDUCE = "sum mean max min prod logsumexp var std".split()


def _np(name: str) -> Callable[..., Any] | None:
    alias = {"abs": "absolute", "round": "round", "identity": None, "erf": None, "multiply_no_nan": None}
    n = alias.get(name, name)
    if name == "multiply_no_nan":
        return lambda x, y: np.where(np.asarray(y) == 0, 0, np.multiply(x, y))
    if name == "erf":
        try:
            from scipy.special import erf  # gt.erf is scipy's when scipy is installed
        except ImportError:  # pragma: no cover - then gt.erf is math.erf's, real only
            import math

            return np.vectorize(math.erf)
        return erf
    if name == "logsumexp":
        return lambda x, axis=None, keepdims=False: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    if name == "identity":
        return lambda x: np.array(x, copy=True)
    return getattr(np, n, None) if n else None


def _draw(kind: str) -> Callable[..., Any]:
    """gt.random's documented reference: numpy's Generator, seeded as _call seeds gt.random."""

    def ref(shape: Any, a: Any, b: Any, dtype: Any) -> Any:
        if kind == "uniform" and b is None:
            b = 1.0  # gt.random.uniform's (and TensorFlow's) default maxval for floats
        return getattr(np.random.default_rng(0), kind)(a, b, shape).astype(dtype)

    return ref


# TensorFlow's formulas (tf.linalg.global_norm ignores None entries; tf.clip_by_norm), in numpy
def _global_norm(t_list: Any) -> Any:
    return np.sqrt(sum(np.sum(np.square(np.asarray(x))) for x in t_list if x is not None))


def _clip_by_norm(t: Any, clip_norm: Any) -> Any:
    t = np.asarray(t)
    return t * clip_norm / np.maximum(np.sqrt(np.sum(t * t)), clip_norm)


def _clip_by_global_norm(t_list: Any, clip_norm: Any) -> Any:
    g = _global_norm(t_list)
    scale = clip_norm / np.maximum(g, clip_norm)
    return [None if x is None else np.asarray(x) * scale for x in t_list], g


def specs() -> list[Spec]:
    out: list[Spec] = []
    add = out.append
    for n in _UNARY:
        add(Spec(n, getattr(gt, n), {"x": t()}, {"x": "operand"}, _np(n)))
    for n in _BINARY:
        add(Spec(n, getattr(gt, n), {"x": t(), "y": t()}, {"x": "operand", "y": "operand"}, _np(n)))
    for n in _COMPARE:
        add(Spec(n, getattr(gt, n), {"args": [t(), t()]}, {}, _np(n), star="args"))
    for n in _PRED:
        add(Spec(n, getattr(gt, n), {"args": [t()]}, {}, _np(n), star="args"))
    for n in _REDUCE:
        args: dict[str, Any] = {"x": t(), "axis": 0, "keepdims": False}
        if n in ("var", "std"):
            args["ddof"] = 0
        add(Spec(n, getattr(gt, n), args, {k: _KIND_OF[k] for k in args}, _np(n), ref_pos=1))

    def generic(name: str, args: dict[str, Any], ref: Any = None, ref_pos: int = 99, **kinds: str) -> None:
        k = {p: kinds.get(p, _KIND_OF.get(p)) for p in args}
        add(Spec(name, _resolve(name), args, {p: v for p, v in k.items() if v}, ref, ref_pos=ref_pos))

    generic("argmax", {"x": t(), "axis": 0}, np.argmax)
    generic("argmin", {"x": t(), "axis": 0}, np.argmin)
    generic("arange", {"start": 0, "stop": 4, "step": 1, "dtype": "float32"}, np.arange)
    generic("linspace", {"start": 0.0, "stop": 1.0, "num": 3, "dtype": "float32"}, np.linspace, 3)
    generic("zeros", {"shape": (2, 2), "dtype": "float32"}, np.zeros)
    generic("ones", {"shape": (2, 2), "dtype": "float32"}, np.ones)
    generic("full", {"shape": (2, 2), "fill_value": 3.0, "dtype": "float32"}, np.full)
    generic("eye", {"n": 2, "m": 3, "dtype": "float32"}, np.eye, 2)
    generic("zeros_like", {"x": t(), "dtype": "float32"}, np.zeros_like)
    generic("ones_like", {"x": t(), "dtype": "float32"}, np.ones_like)
    generic("constant", {"value": _BASE, "dtype": "float32"}, np.asarray)
    generic("as_tensor", {"value": _BASE}, np.asarray)
    generic("cast", {"x": t(), "dtype": "float64"}, lambda x, dtype: np.asarray(x).astype(dtype))
    generic("clip", {"x": t(), "min": 1.5, "max": 3.0}, np.clip)
    generic("where", {"condition": gt.constant([[True, False], [False, True]]), "x": t(), "y": t()}, np.where)
    generic("matmul", {"x": t(), "y": t()}, np.matmul)
    generic("dot", {"x": t(), "y": t()}, np.dot)
    add(
        Spec(
            "einsum",
            gt.einsum,
            {"subscripts": "ij,jk->ik", "operands": [t(), t()]},
            {"subscripts": "string"},
            np.einsum,
            star="operands",
        )
    )
    generic("reshape", {"x": t(), "shape": (4,)}, np.reshape)
    generic("flatten", {"x": t()}, np.ravel)
    generic("expand_dims", {"x": t(), "axis": 0}, np.expand_dims)
    generic("squeeze", {"x": gt.constant(_BASE[None]), "axis": 0}, np.squeeze)
    generic("transpose", {"x": t(), "axes": (1, 0)}, np.transpose)
    generic("swapaxes", {"x": t(), "axis1": 0, "axis2": 1}, np.swapaxes)
    generic("moveaxis", {"x": t(), "source": 0, "destination": 1}, np.moveaxis)
    generic("broadcast_to", {"x": t(), "shape": (3, 2, 2)}, np.broadcast_to)
    generic("concatenate", {"xs": [t(), t()], "axis": 0}, np.concatenate)
    generic("stack", {"xs": [t(), t()], "axis": 0}, np.stack)
    generic("split", {"x": t(), "indices_or_sections": 2, "axis": 0}, np.split)
    generic("pad", {"x": t(), "pad_width": 1, "mode": "constant", "constant_values": 0.0}, np.pad, 2)
    generic("take", {"x": t(), "indices": [1, 0], "axis": 0}, np.take)
    generic("getitem", {"x": t(), "key": 1}, lambda x, key: np.asarray(x)[key])
    generic("stop_gradient", {"x": t()}, lambda x: np.array(x, copy=True))
    generic("global_norm", {"t_list": [t(), t()]}, _global_norm)
    generic("clip_by_norm", {"t": t(), "clip_norm": 1.0}, _clip_by_norm)
    generic("clip_by_global_norm", {"t_list": [t(), t()], "clip_norm": 1.0}, _clip_by_global_norm)
    for n in ("relu", "sigmoid", "softplus"):
        generic(f"nn.{n}", {"x": t()})
    generic("nn.elu", {"x": t(), "alpha": 1.0})
    generic("nn.leaky_relu", {"x": t(), "alpha": 0.2})
    generic("nn.gelu", {"x": t(), "approximate": False})
    generic("nn.softmax", {"x": t(), "axis": -1})
    generic("nn.log_softmax", {"x": t(), "axis": -1})
    generic("nn.mean_squared_error", {"y_true": t(), "y_pred": t()})
    generic("nn.sigmoid_cross_entropy_with_logits", {"labels": gt.constant(_BASE / 4), "logits": t()})
    generic("nn.softmax_cross_entropy_with_logits", {"labels": gt.constant(_BASE / 10), "logits": t(), "axis": -1})
    generic(
        "nn.sparse_softmax_cross_entropy_with_logits", {"labels": gt.constant([0, 1]), "logits": t()}, labels="operand"
    )
    generic("random.normal", {"shape": (2, 2), "mean": 0.0, "stddev": 1.0, "dtype": "float32"}, _draw("normal"))
    generic("random.uniform", {"shape": (2, 2), "minval": 0.0, "maxval": 1.0, "dtype": "float32"}, _draw("uniform"))
    generic("random.seed", {"n": 0}, n="size")
    generic("testing.check_grads", {"f": gt.sin, "x": gt.constant(np.array([0.5, 1.0]))})
    out.extend(_method_specs())
    return out


# Methods and operators: each called on a fresh tensor/variable by a function of this module
# (so the public entry is the method itself, as when a user calls it).
def _astype(dtype: Any) -> Any:
    return t().astype(dtype)


def _reshape_m(shape: Any) -> Any:
    return t().reshape(shape)


def _sum_m(axis: Any, keepdims: Any) -> Any:
    return t().sum(axis, keepdims=keepdims)  # numpy's order: sum(axis, dtype, out, keepdims)


def _transpose_m(axes: Any) -> Any:
    return t().transpose(axes)


def _index(key: Any) -> Any:
    return t()[key]


def _to(device: Any) -> Any:
    return t().to(device)


def _plus(y: Any) -> Any:
    return t() + y


def _assign(value: Any) -> Any:
    return gt.Variable(_BASE, name="w").assign(value).numpy()


def _assign_add(value: Any) -> Any:
    return gt.Variable(_BASE, name="w").assign_add(value).numpy()


def _variable(initial_value: Any, dtype: Any) -> Any:
    return gt.Variable(initial_value, dtype=dtype)


def _method_specs() -> list[Spec]:
    f32 = np.float32
    return [
        Spec("Tensor.astype", _astype, {"dtype": "float64"}, {"dtype": "dtype"}, lambda dtype: _BASE.astype(dtype)),
        Spec("Tensor.reshape", _reshape_m, {"shape": (4,)}, {"shape": "shape"}, lambda shape: _BASE.reshape(shape)),
        Spec(
            "Tensor.sum",
            _sum_m,
            {"axis": 0, "keepdims": False},
            {"axis": "axis", "keepdims": "flag"},
            lambda axis, keepdims: _BASE.sum(axis=axis, keepdims=keepdims),
            also=("gt.sum",),
        ),
        Spec(
            "Tensor.transpose",
            _transpose_m,
            {"axes": (1, 0)},
            {"axes": "axis"},
            lambda axes: _BASE.transpose(axes),
            also=("gt.transpose",),
        ),
        Spec("Tensor.__getitem__", _index, {"key": 1}, {"key": "index"}, lambda key: _BASE[key], also=("gt.getitem",)),
        Spec("Tensor.to", _to, {"device": "cpu"}, {"device": "device"}, lambda device: _BASE),
        Spec("Tensor.__add__", _plus, {"y": t()}, {"y": "operand"}, lambda y: _BASE + y, also=("gt.add",)),
        Spec(
            "Variable.assign",
            _assign,
            {"value": _BASE * 2},
            {"value": "operand"},
            lambda value: np.asarray(value).astype(f32),
            also=("Variable.assign",),
        ),
        Spec(
            "Variable.assign_add",
            _assign_add,
            {"value": _BASE * 2},
            {"value": "operand"},
            lambda value: _BASE + np.asarray(value).astype(f32),
            also=("Variable.assign_add",),
        ),
        Spec(
            "Variable",
            _variable,
            {"initial_value": _BASE, "dtype": None},
            {"initial_value": "operand", "dtype": "dtype"},
            lambda initial_value, dtype: np.asarray(initial_value, dtype=dtype),
        ),
    ]


# Public callables the table does not call, and why (the test checks this list is complete).
SKIPPED = {
    "custom_gradient": "a decorator: its errors are tested in tests/test_hostile_input.py",
    "function": "a decorator (gt.function owns its own tests)",
    "primitive": "a registration decorator for extension authors",
    "device": "a context manager; tested for an unknown device in tests/test_backend_device.py",
    "current_device": "takes no arguments",
    "memory_info": "device management (tests/test_backend_device.py)",
    "empty_cache": "device management (tests/test_backend_device.py)",
    "reset_peak_memory": "device management (tests/test_backend_device.py)",
    "set_memory_limit": "device management (tests/test_backend_device.py)",
    "from_dlpack": "DLPack interop (tests/test_backend_device.py)",
    "load": "checkpoints have their own hostile-file suite (tests/test_checkpoint.py)",
    "save": "checkpoints have their own hostile-file suite (tests/test_checkpoint.py)",
    "scatter": "the adjoint of getitem, called by VJPs with trusted arguments",
    "random.generator": "takes no arguments",
}


def _resolve(name: str) -> Any:
    obj: Any = gt
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def public_callables() -> dict[str, Any]:
    """Every public function of the namespaces the table covers (classes and modules excluded)."""
    out = {}
    for prefix, ns in (
        ("", gt),
        ("nn.", gt.nn),
        ("random.", gt.random),
        ("linalg.", gt.linalg),
        ("testing.", gt.testing),
    ):
        names = getattr(ns, "__all__", None) or [n for n in dir(ns) if not n.startswith("_")]
        for n in names:
            f = getattr(ns, n)
            if inspect.isclass(f) or inspect.ismodule(f) or not callable(f):
                continue
            mod = getattr(f, "__module__", "") or ""
            if not mod.startswith("gputape" if ns is gt else ns.__name__):
                continue  # helpers a submodule imported for itself (typing, numpy, gputape's own)
            if prefix == "linalg.":
                continue  # gt.linalg's functions are gt.matmul/dot/einsum, covered under those names
            if prefix and mod.endswith("tape") and n in ("apply", "primitive"):
                continue
            if prefix and getattr(gt, n, None) is f:
                continue  # a re-export of a top-level function (gt.random.current_device)
            out[prefix + n] = f
    return out


# -- running and classifying -----------------------------------------------------------------------


def _host(v: Any) -> Any:
    if isinstance(v, gt.Tensor):
        return v.numpy()
    if isinstance(v, list):
        return [_host(i) for i in v]
    return v


def _call(spec: Spec, args: dict[str, Any]) -> Any:
    gt.random.seed(0)  # a benign twin's draw must equal the original's
    pos = []
    kw = {}
    positional, star = _positional(spec)
    for p, v in args.items():
        if p == spec.star:
            pos.extend(v)
        elif not kw and (p in positional or star):
            pos.append(v)
        else:
            kw[p] = v
    return spec.fn(*pos, **kw)


def _positional(spec: Spec) -> tuple[set[str], bool]:
    """The parameters passed by position, and whether the rest go into a ``*args`` (check_grads)."""
    params = inspect.signature(spec.fn).parameters
    pos = {p for p, v in params.items() if v.kind in (v.POSITIONAL_ONLY, v.POSITIONAL_OR_KEYWORD)}
    return pos, any(v.kind == v.VAR_POSITIONAL for v in params.values())


def _call_ref(spec: Spec, args: dict[str, Any]) -> Any:
    pos = []
    kw = {}
    for i, (p, v) in enumerate(args.items()):
        if p == spec.star:
            pos.extend(_host(v))
        elif i < spec.ref_pos:
            pos.append(_host(v))
        else:
            kw[p] = _host(v)
    return spec.ref(*pos, **kw)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, gt.Tensor):
        if not isinstance(a._data, np.ndarray):
            return False
        a = a.numpy()
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "OUSV" or b.dtype.kind in "OUSV":
        return a.dtype == b.dtype and bool(np.all(a == b))
    try:
        return bool(np.allclose(a.astype(np.complex128), b.astype(np.complex128), rtol=1e-5, atol=1e-6, equal_nan=True))
    except (TypeError, ValueError):
        return False


@dataclass
class Outcome:
    spec: str
    param: str
    bad: str
    category: str
    detail: str


def _public_names(spec: Spec) -> list[str]:
    names = {f"gt.{spec.name}", *spec.also}
    for n, f in public_callables().items():
        if f is spec.fn:
            names.add(f"gt.{n}")
    return sorted(names)


_PY_INTERNAL = (AttributeError, IndexError, KeyError, ZeroDivisionError, OverflowError, RecursionError, AssertionError)


def classify(
    spec: Spec, param: str, bad: Bad, exc: BaseException | None, result: Any, names: list[str]
) -> tuple[str, str]:
    if exc is None:
        return _classify_result(spec, param, bad, result)
    msg = f"{type(exc).__name__}: {exc}"
    if bad.benign is not None:
        try:
            _call(spec, {**spec.args, param: bad.benign})
        except Exception:
            pass  # the twin fails too: judge the error as any other
        else:
            return "refused", msg
    if isinstance(exc, HostileError):
        return "hostile", msg
    named = any(n in str(exc) for n in names)
    if isinstance(exc, (TypeError, ValueError)) and named and _names_argument(str(exc), param, bad):
        return "clear", msg
    if "gt." in str(exc) or "gputape" in str(exc) or "Variable." in str(exc):
        return "gputape-other", msg
    if isinstance(exc, _PY_INTERNAL) or "NoneType" in str(exc):
        return "python", msg
    frames = traceback.extract_tb(exc.__traceback__)
    # numpy's C functions leave no frame of their own: the last frame is the line that called them
    if frames and (f"{os.sep}numpy{os.sep}" in frames[-1].filename or _calls_numpy(frames[-1].line or "")):
        return "numpy", msg
    if isinstance(exc, (TypeError, ValueError)):
        return "python", msg
    return "python", msg


def _calls_numpy(line: str) -> bool:
    return any(k in line for k in ("np.", "xp.", "numpy", ".astype(", ".reshape(", "prim.cpu(", "prim.fwd("))


def _names_argument(msg: str, param: str, bad: Bad) -> bool:
    if param in msg:
        return True
    v = bad.value
    idents = [repr(v), type(v).__name__]
    if hasattr(v, "dtype"):
        idents.append(str(v.dtype))
    return any(i in msg for i in idents)


def _classify_result(spec: Spec, param: str, bad: Bad, result: Any) -> tuple[str, str]:
    args = dict(spec.args)
    args[param] = bad.value
    if spec.ref is not None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = _call_ref(spec, args)
        except Exception as e:  # numpy refused where gputape accepted
            if bad.benign is not None:
                pass  # judged against the benign twin below
            else:
                return "accepted", f"numpy refuses ({type(e).__name__}: {e}); gputape returned {_short(result)}"
        else:
            return ("result", "") if _same(result, ref) else ("wrong", f"{_short(result)} != numpy {_short(ref)}")
    if bad.benign is not None:
        twin = dict(spec.args)
        twin[param] = bad.benign
        try:
            expected = _call(spec, twin)
        except Exception as e:  # pragma: no cover - the baseline must work
            return "wrong", f"the benign twin raised {e!r}"
        return ("result", "") if _same(result, expected) else ("wrong", f"{_short(result)} != {_short(expected)}")
    return "accepted", f"returned {_short(result)}; nothing to compare with"


def _short(r: Any) -> str:
    if isinstance(r, gt.Tensor):
        d = r._data
        return f"Tensor{getattr(d, 'shape', '?')} {getattr(d, 'dtype', type(d).__name__)}"
    return repr(r)[:60]


def cases() -> Iterator[tuple[Spec, str, Bad]]:
    for spec in specs():
        for param, kind in spec.kinds.items():
            for bad in BAD[kind]:
                yield spec, param, bad


def run_one(spec: Spec, param: str, bad: Bad, names: list[str]) -> Outcome:
    args = dict(spec.args)
    args[param] = bad.value
    exc: BaseException | None = None
    result = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = _call(spec, args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:
        exc = e
    cat, detail = classify(spec, param, bad, exc, result, names)
    return Outcome(spec.name, param, bad.label, cat, detail)


def run_all() -> list[Outcome]:
    out = []
    for spec in specs():
        names = _public_names(spec)
        for param, kind in spec.kinds.items():
            for bad in BAD[kind]:
                out.append(run_one(spec, param, bad, names))
    return out


def counts(outcomes: list[Outcome]) -> Counter:
    return Counter(o.category for o in outcomes)


if __name__ == "__main__":
    res = run_all()
    funcs = {o.spec for o in res}
    print(f"{len(res)} hostile calls over {len(funcs)} public functions")
    for cat, n in counts(res).most_common():
        print(f"  {cat:14s} {n}")
    for o in res:
        if o.category not in ("clear", "result"):
            print(f"{o.category:14s} {o.spec}({o.param}={o.bad}): {o.detail[:200]}")
