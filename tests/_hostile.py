"""The hostile-input table: every public gputape function called with bad arguments.

Each public callable of ``gt``, ``gt.nn`` (functional), ``gt.random``, ``gt.linalg``,
``gt.testing`` and of the TensorFlow layer (``tf``, ``tf.math``, ``tf.linalg``: the functions of
its own, not its aliases of gputape's) gets one valid baseline call; then each of its parameters in turn is
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


def _operand_bads(base: np.ndarray) -> list[Bad]:
    """Bad operands; the benign ones (read-only, non-contiguous, a tuple, float64) are twins of ``base``."""
    ro = base.copy()
    ro.flags.writeable = False
    wide = np.zeros((base.shape[0], 2 * base.shape[1]), base.dtype)
    wide[:, ::2] = base
    return [
        Bad("None", None),
        Bad("str", "abc"),
        Bad("ragged", [[1.0, 2.0], [3.0]]),
        Bad("complex", base + 1j * np.eye(*base.shape)),
        Bad("object", np.array([[1.0, "a"], [None, 4.0]], dtype=object)),
        Bad("structured", np.zeros((2, 2), dtype=[("a", "f4"), ("b", "i4")])),
        Bad("dict", {"a": 1}),
        Bad("hostile", Hostile()),
        Bad("readonly", ro, base),
        Bad("noncontig", wide[:, ::2], base),
        Bad("tuple", tuple(map(tuple, base.tolist())), base),
        Bad("float64", base.astype(np.float64), base),
    ]


_BASE = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
_SPD = np.array([[4.0, 1.0], [1.0, 3.0]], dtype=np.float32)  # symmetric positive definite: cholesky, eigh

BAD: dict[str, list[Bad]] = {
    "operand": _operand_bads(_BASE),
    "spd": _operand_bads(_SPD),
    # check_grads takes complex arguments (real and imaginary directions): like its real twin, it passes
    "grad_operand": [Bad(b.label, b.value, _BASE) if b.label == "complex" else b for b in _operand_bads(_BASE)],
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
    # a count TensorFlow converts to an int64 tensor (Dataset.take, repeat, skip): -1 means "all"/"forever"
    "count": [
        Bad("negative-one", -1),
        Bad("float", 2.5),
        Bad("str", "3"),
        Bad("bool", True),
        Bad("hostile", Hostile()),
        Bad("np.int64", np.int64(2), 2),
    ],
    # tf.data.Dataset.from_tensor_slices: a tuple is a structure of components there, not one operand
    "slices": [b for b in _operand_bads(_BASE) if b.label != "tuple"],
    "pairs": [
        Bad("None", None),
        Bad("int", 5),
        Bad("no-variable", [(gt.constant(1.0), 1.0)]),
        Bad("hostile", Hostile()),
    ],
    "callable": [Bad("None", None), Bad("int", 5)],
    # control flow: a predicate, (pred, fn) pairs, branch functions
    "predicate": [
        Bad("float", gt.constant(1.0)),
        Bad("vector", gt.constant([True, False])),
        Bad("str", "yes"),
        Bad("hostile", Hostile()),
        Bad("np.bool_", np.bool_(True), True),
    ],
    # an operand to iterate: a tuple is a nested structure of elements (TensorFlow's nest), not an array
    "elems": [b for b in _operand_bads(_BASE) if b.label != "tuple"],
    # tf.nn.embedding_lookup's params: a list or tuple is a list of shards (TensorFlow's partitions)
    "table": [b for b in _operand_bads(_BASE) if b.label not in ("tuple", "ragged")],
    "pred_fn_pairs": [
        Bad("None", None),
        Bad("int", 5),
        Bad("not-pairs", [1, 2]),
        Bad("python-bool", [(True, lambda: 1.0)]),
    ],
    "branches": [Bad("None", None), Bad("empty", []), Bad("int", 5), Bad("not-callable", [1, 2])],
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
    "sinh sqrt square tan tanh arcsinh arccosh arctanh arcsin arccos log2 log10 exp2 conj conjugate "
    "deg2rad rad2deg sinc"
).split()
_BINARY = (
    "add divide floor_divide maximum minimum mod multiply multiply_no_nan power subtract true_divide "
    "hypot arctan2 logaddexp logaddexp2 fmax fmin"
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
        gt.random.seed(0)  # the first op after seed(0) draws from the seed's first op stream
        return getattr(gt.random.generator(), kind)(a, b, shape).astype(dtype)

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
    for n, p in (("real", "val"), ("imag", "val"), ("angle", "z")):  # numpy's argument names
        add(Spec(n, getattr(gt, n), {p: t()}, {p: "operand"}, _np(n)))
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
    generic(
        "linspace",
        {"start": 0.0, "stop": 1.0, "num": 3, "endpoint": True, "retstep": False, "dtype": "float32", "axis": 0},
        np.linspace,
        endpoint="flag",
        retstep="flag",
    )
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
    generic("testing.check_grads", {"f": gt.sin, "x": gt.constant(np.array([0.5, 1.0]))}, x="grad_operand")
    out.extend(_method_specs())
    out.extend(_surface_specs())
    out.extend(_linalg_specs())
    out.extend(_fft_specs())
    out.extend(_tf_specs())
    out.extend(_control_flow_specs())
    return out


def _control_flow_specs() -> list[Spec]:
    """TensorFlow's control flow (gt.cond is tf.cond): its callables and the arguments it converts."""
    x = t()
    twice = lambda r: r * 2.0
    add = lambda a, r: a + r
    fns = [lambda: x, lambda: x * 2.0]
    pick = lambda branch_index, branch_fns: np.asarray(branch_fns[branch_index if 0 <= branch_index < 2 else -1]())
    cf = {"fn": "callable", "elems": "elems"}
    rows = [
        Spec(
            "cond",
            gt.cond,
            {"pred": gt.constant(True), "true_fn": fns[0], "false_fn": fns[1]},
            {"pred": "predicate", "true_fn": "callable", "false_fn": "callable"},
            also=("tf.cond",),
        ),
        Spec(
            "case",
            gt.case,
            {"pred_fn_pairs": [(gt.constant(False), fns[0])], "default": fns[1]},
            {"pred_fn_pairs": "pred_fn_pairs"},
            also=("tf.case",),
        ),
        Spec(
            "switch_case",
            gt.switch_case,
            {"branch_index": 1, "branch_fns": fns},
            {"branch_index": "index", "branch_fns": "branches"},
            pick,
            also=("tf.switch_case",),
        ),
        Spec(
            "while_loop",
            gt.while_loop,
            {"cond": lambda i: i < 2, "body": lambda i: i + 1, "loop_vars": [0]},
            {"cond": "callable", "body": "callable"},
            also=("tf.while_loop",),
        ),
        Spec(
            "map_fn",
            gt.map_fn,
            {"fn": twice, "elems": x},
            cf,
            lambda fn, elems: np.asarray(elems) * 2.0,
            also=("tf.map_fn",),
        ),
        Spec(
            "vectorized_map",
            gt.vectorized_map,
            {"fn": twice, "elems": x},
            cf,
            lambda fn, elems: np.asarray(elems) * 2.0,
            also=("tf.vectorized_map",),
        ),
        Spec(
            "scan", gt.scan, {"fn": add, "elems": x}, cf, lambda fn, elems: np.cumsum(elems, axis=0), also=("tf.scan",)
        ),
        Spec(
            "foldl", gt.foldl, {"fn": add, "elems": x}, cf, lambda fn, elems: np.sum(elems, axis=0), also=("tf.foldl",)
        ),
        Spec(
            "foldr", gt.foldr, {"fn": add, "elems": x}, cf, lambda fn, elems: np.sum(elems, axis=0), also=("tf.foldr",)
        ),
    ]
    return rows


def _spec(name: str, args: dict[str, Any], ref: Any = None, ref_pos: int = 99, **kinds: str) -> Spec:
    """A row whose parameters are varied by the kinds given (the others keep their valid value)."""
    return Spec(name, _resolve(name), args, kinds, ref, ref_pos=ref_pos)


def _surface_specs() -> list[Spec]:
    """numpy's array functions beyond the core set (gputape/ops/scan, reorder, products, joining, aliases)."""
    x, v = t(), gt.constant([1.0, 2.0, 3.0])
    vec = np.array([1.0, 2.0, 3.0], np.float32)
    op = {"a": "operand"}
    out = [
        _spec("amax", {"x": x, "axis": 0, "keepdims": False}, np.amax, 1, x="operand", axis="axis", keepdims="flag"),
        _spec("amin", {"x": x, "axis": 0, "keepdims": False}, np.amin, 1, x="operand", axis="axis", keepdims="flag"),
        _spec("remainder", {"x": x, "y": gt.constant(_BASE + 0.5)}, np.remainder, x="operand", y="operand"),
        _spec("fabs", {"x": x}, np.fabs, x="operand"),
        _spec("nan_to_num", {"x": x}, np.nan_to_num, x="operand"),
        _spec("around", {"a": x, "decimals": 1}, np.around, **op, decimals="index"),
        _spec("ravel", {"a": x}, np.ravel, **op),
        _spec("cumsum", {"a": x, "axis": 0, "dtype": "float32"}, np.cumsum, **op, axis="axis", dtype="dtype"),
        _spec("cumprod", {"a": x, "axis": 0, "dtype": "float32"}, np.cumprod, **op, axis="axis", dtype="dtype"),
        _spec("diff", {"a": x, "n": 1, "axis": -1}, np.diff, **op, n="index", axis="axis"),
        _spec("flip", {"m": x, "axis": 0}, np.flip, m="operand", axis="axis"),
        _spec("flipud", {"m": x}, np.flipud, m="operand"),
        _spec("fliplr", {"m": x}, np.fliplr, m="operand"),
        _spec("rot90", {"m": x, "k": 1, "axes": (0, 1)}, np.rot90, m="operand", k="index", axes="axis"),
        _spec("roll", {"a": x, "shift": 1, "axis": 0}, np.roll, **op, shift="index", axis="axis"),
        _spec("repeat", {"a": x, "repeats": 2, "axis": 0}, np.repeat, **op, repeats="index", axis="axis"),
        _spec("tile", {"A": x, "reps": (2, 1)}, np.tile, A="operand", reps="shape"),
        _spec("sort", {"a": x, "axis": -1}, np.sort, **op, axis="axis"),
        _spec("argsort", {"a": x, "axis": -1}, np.argsort, **op, axis="axis"),
        _spec("partition", {"a": v, "kth": 1}, np.partition, **op, kth="index"),
        _spec("argpartition", {"a": v, "kth": 1}, np.argpartition, **op, kth="index"),
        _spec(
            "take_along_axis",
            {"arr": x, "indices": np.array([[1, 0], [0, 1]]), "axis": 1},
            np.take_along_axis,
            arr="operand",
            indices="index",
            axis="axis",
        ),
        _spec("outer", {"a": v, "b": v}, np.outer, **op, b="operand"),
        _spec("inner", {"a": x, "b": x}, np.inner, **op, b="operand"),
        _spec("kron", {"a": x, "b": x}, np.kron, **op, b="operand"),
        _spec("tensordot", {"a": x, "b": x, "axes": 1}, np.tensordot, **op, b="operand", axes="size"),
        _spec("cross", {"a": v, "b": v[::-1], "axis": -1}, np.cross, 2, **op, b="operand", axis="axis"),
        _spec(
            "diagonal",
            {"a": x, "offset": 0, "axis1": 0, "axis2": 1},
            np.diagonal,
            **op,
            offset="index",
            axis1="axis",
            axis2="axis",
        ),
        _spec("trace", {"a": x, "offset": 0, "dtype": "float32"}, np.trace, 2, **op, offset="index", dtype="dtype"),
        _spec("diag", {"v": x, "k": 0}, np.diag, v="operand", k="index"),
        _spec("triu", {"m": x, "k": 0}, np.triu, m="operand", k="index"),
        _spec("tril", {"m": x, "k": 0}, np.tril, m="operand", k="index"),
        _spec("vstack", {"tup": [x, x]}, np.vstack, tup="operands"),
        _spec("hstack", {"tup": [x, x]}, np.hstack, tup="operands"),
        _spec("dstack", {"tup": [x, x]}, np.dstack, tup="operands"),
        _spec("column_stack", {"tup": [v, v]}, np.column_stack, tup="operands"),
        _spec("append", {"arr": x, "values": x, "axis": 0}, np.append, arr="operand", values="operand", axis="axis"),
        _spec(
            "array_split",
            {"ary": x, "indices_or_sections": 2, "axis": 0},
            np.array_split,
            ary="operand",
            indices_or_sections="size",
            axis="axis",
        ),
        _spec("hsplit", {"ary": x, "indices_or_sections": 2}, np.hsplit, ary="operand", indices_or_sections="size"),
        _spec("vsplit", {"ary": x, "indices_or_sections": 2}, np.vsplit, ary="operand", indices_or_sections="size"),
        _spec(
            "dsplit",
            {"ary": gt.constant(_BASE[:, :, None] * np.ones(2, np.float32)), "indices_or_sections": 2},
            np.dsplit,
            ary="operand",
            indices_or_sections="size",
        ),
        _spec(
            "select",
            {"condlist": [gt.constant(vec > 1.5)], "choicelist": [v], "default": 0.0},
            np.select,
            condlist="operands",
            choicelist="operands",
            default="number",
        ),
    ]
    for n in ("atleast_1d", "atleast_2d", "atleast_3d"):
        out.append(Spec(n, getattr(gt, n), {"arys": [x, v]}, {}, getattr(np, n), star="arys"))
        out.append(Spec(n, getattr(gt, n), {"a": x}, {"a": "operand"}, getattr(np, n)))
    return out


def _lstsq_ref(a: Any, b: Any, rcond: Any = None) -> Any:
    return np.linalg.lstsq(a, b, rcond=rcond)


def _fft_specs() -> list[Spec]:
    x = t()
    out = []
    for n in ("fft", "ifft", "rfft", "irfft"):
        args = {"a": x, "n": 2, "axis": -1, "norm": "ortho"}
        out.append(_spec(f"fft.{n}", args, getattr(np.fft, n), a="operand", n="size", axis="axis", norm="string"))
    for n in ("fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"):
        args = {"a": x, "s": (2, 2), "axes": (0, 1), "norm": "forward"}
        out.append(_spec(f"fft.{n}", args, getattr(np.fft, n), a="operand", s="shape", axes="axis", norm="string"))
    for n in ("fftshift", "ifftshift"):
        out.append(_spec(f"fft.{n}", {"x": x, "axes": 0}, getattr(np.fft, n), x="operand", axes="axis"))
    for n in ("fftfreq", "rfftfreq"):
        out.append(_spec(f"fft.{n}", {"n": 4, "d": 0.5}, getattr(np.fft, n), n="size", d="number"))
    return out


def _linalg_specs() -> list[Spec]:
    x, spd = t(), gt.constant(_SPD)
    la = np.linalg
    return [
        _spec("linalg.inv", {"a": x}, la.inv, a="operand"),
        _spec("linalg.det", {"a": x}, la.det, a="operand"),
        _spec("linalg.slogdet", {"a": x}, la.slogdet, a="operand"),
        _spec("linalg.solve", {"a": x, "b": gt.constant([1.0, 2.0])}, la.solve, a="operand", b="operand"),
        _spec("linalg.cholesky", {"a": spd}, la.cholesky, a="spd"),
        _spec("linalg.eigh", {"a": spd, "UPLO": "L"}, la.eigh, a="spd", UPLO="string"),
        _spec("linalg.eigvalsh", {"a": spd, "UPLO": "L"}, la.eigvalsh, a="spd", UPLO="string"),
        _spec("linalg.eig", {"a": x}, la.eig, a="operand"),
        _spec("linalg.eigvals", {"a": x}, la.eigvals, a="operand"),
        _spec(
            "linalg.svd",
            {"a": x, "full_matrices": True, "compute_uv": True},
            la.svd,
            a="operand",
            full_matrices="flag",
            compute_uv="flag",
        ),
        _spec("linalg.qr", {"a": x, "mode": "reduced"}, la.qr, a="operand", mode="string"),
        _spec("linalg.pinv", {"a": x, "rcond": 1e-6}, la.pinv, a="operand", rcond="number"),
        _spec(
            "linalg.lstsq",
            {"a": x, "b": gt.constant([1.0, 2.0]), "rcond": None},
            _lstsq_ref,
            a="operand",
            b="operand",
            rcond="number",
        ),
        _spec("linalg.matrix_power", {"a": x, "n": 2}, la.matrix_power, a="operand", n="index"),
        _spec(
            "linalg.norm",
            {"x": x, "ord": None, "axis": 0, "keepdims": False},
            la.norm,
            x="operand",
            ord="string",
            axis="axis",
            keepdims="flag",
        ),
        _spec(
            "linalg.band_part",
            {"x": x, "lower": 0, "upper": 1},
            lambda x, lower, upper: np.triu(np.tril(x, upper), -lower),
            x="operand",
            lower="index",
            upper="index",
        ),
    ]


def _tf_reduce(fn: Any) -> Any:
    def ref(input_tensor: Any, axis: Any = None, keepdims: bool = False) -> Any:
        ax = tuple(axis) if isinstance(axis, list) else axis
        return fn(np.asarray(input_tensor), axis=ax, keepdims=keepdims)

    return ref


def _tf_scan(fn: Any) -> Any:
    def ref(x: Any, axis: Any = 0) -> Any:
        return fn(x, axis=axis)

    return ref


def _tf_arg(fn: Any) -> Any:
    def ref(a: Any, axis: Any, output_type: Any) -> Any:
        return fn(a, axis=axis).astype(output_type)

    return ref


def _divide_no_nan(x: Any, y: Any) -> Any:
    y = np.asarray(y)
    return np.where(y == 0, 0, np.asarray(x) / np.where(y == 0, 1, y))


def _tf_lstsq(matrix: Any, rhs: Any, l2_regularizer: Any) -> Any:
    a, b = np.asarray(matrix), np.asarray(rhs)
    return np.linalg.solve(a.T @ a + l2_regularizer * np.eye(a.shape[1]), a.T @ b)


def _tf_norm(tensor: Any, order: Any, axis: Any = None) -> Any:
    if isinstance(order, str) and order != "euclidean":
        raise ValueError(f"ord={order!r} is no vector norm")  # TensorFlow's rule (numpy's 'fro' needs a matrix)
    ax = tuple(axis) if isinstance(axis, list) else axis
    return np.linalg.norm(tensor, None if order == "euclidean" else order, ax)


def _tf_specs() -> list[Spec]:
    """TensorFlow's spellings that are functions of their own (not aliases of a gt function)."""
    x = t()
    red = {"input_tensor": "operand", "axis": "axis", "keepdims": "flag"}
    lse = lambda a, axis=None, keepdims=False: np.log(np.sum(np.exp(a), axis=axis, keepdims=keepdims))
    out = []
    for n, fn in (
        ("sum", np.sum),
        ("mean", np.mean),
        ("max", np.max),
        ("min", np.min),
        ("prod", np.prod),
        ("logsumexp", lse),
        ("variance", np.var),
        ("std", np.std),
        ("all", lambda a, **k: np.all(a.astype(bool), **k)),
        ("any", lambda a, **k: np.any(a.astype(bool), **k)),
    ):
        out.append(
            _spec(f"tf.math.reduce_{n}", {"input_tensor": x, "axis": 0, "keepdims": False}, _tf_reduce(fn), **red)
        )
    arg = {"input": "operand", "axis": "axis", "output_type": "dtype"}
    out += [
        _spec("tf.math.argmax", {"input": x, "axis": 0, "output_type": "int64"}, _tf_arg(np.argmax), **arg),
        _spec("tf.math.argmin", {"input": x, "axis": 0, "output_type": "int64"}, _tf_arg(np.argmin), **arg),
        _spec("tf.math.add_n", {"inputs": [x, x]}, lambda inputs: np.sum(inputs, axis=0), inputs="operands"),
        _spec("tf.math.rsqrt", {"x": x}, lambda x: 1 / np.sqrt(x), x="operand"),
        _spec(
            "tf.math.squared_difference",
            {"x": x, "y": x},
            lambda x, y: np.square(np.subtract(x, y)),
            x="operand",
            y="operand",
        ),
        _spec("tf.math.divide_no_nan", {"x": x, "y": x}, _divide_no_nan, x="operand", y="operand"),
        _spec("tf.math.log_sigmoid", {"x": x}, lambda x: -np.logaddexp(0, -np.asarray(x)), x="operand"),
        _spec(
            "tf.math.l2_normalize",
            {"x": x, "axis": 0, "epsilon": 1e-12},
            lambda x, axis, epsilon: (
                np.asarray(x) / np.sqrt(np.maximum(np.sum(np.square(x), axis=axis, keepdims=True), epsilon))
            ),
            x="operand",
            axis="axis",
            epsilon="number",
        ),
        _spec("tf.math.cumsum", {"x": x, "axis": 0}, _tf_scan(np.cumsum), x="operand", axis="axis"),
        _spec("tf.math.cumprod", {"x": x, "axis": 0}, _tf_scan(np.cumprod), x="operand", axis="axis"),
    ]
    la = np.linalg
    mT = lambda a: np.swapaxes(a, -1, -2)
    out += [
        _spec("tf.linalg.matrix_transpose", {"a": x}, mT, a="operand"),
        _spec("tf.linalg.adjoint", {"matrix": x}, lambda matrix: np.conj(mT(matrix)), matrix="operand"),
        _spec(
            "tf.linalg.matmul",
            {"a": x, "b": x, "transpose_a": False},
            lambda a, b, transpose_a: np.matmul(a, b),
            a="operand",
            b="operand",
        ),
        _spec(
            "tf.linalg.matvec",
            {"a": x, "b": gt.constant([1.0, 2.0])},
            lambda a, b: np.matmul(a, np.asarray(b)[..., None])[..., 0],
            a="operand",
            b="operand",
        ),
        _spec("tf.linalg.inv", {"input": x, "adjoint": False}, lambda a, adjoint: la.inv(a), input="operand"),
        _spec("tf.linalg.solve", {"matrix": x, "rhs": gt.constant(_BASE)}, la.solve, matrix="operand", rhs="operand"),
        _spec(
            "tf.linalg.triangular_solve",
            {"matrix": gt.constant(np.tril(_SPD)), "rhs": x, "lower": True},
            lambda matrix, rhs, lower: la.solve(np.tril(matrix), rhs),
            matrix="operand",
            rhs="operand",
        ),
        _spec(
            "tf.linalg.band_part",
            {"input": x, "num_lower": 0, "num_upper": -1},
            lambda a, num_lower, num_upper: np.triu(a, -num_lower),
            input="operand",
            num_lower="index",
            num_upper="index",
        ),
        _spec("tf.linalg.diag_part", {"input": x}, lambda a: np.diagonal(a, axis1=-2, axis2=-1), input="operand"),
        _spec(
            "tf.linalg.diag",
            {"diagonal": gt.constant([1.0, 2.0])},
            lambda diagonal: np.asarray(diagonal)[..., None] * np.eye(np.shape(diagonal)[-1]),
            diagonal="operand",
        ),
        _spec("tf.linalg.trace", {"x": x}, lambda x: np.trace(x, axis1=-2, axis2=-1), x="operand"),
        _spec("tf.linalg.det", {"input": x}, la.det, input="operand"),
        _spec("tf.linalg.slogdet", {"input": x}, lambda a: tuple(la.slogdet(a)), input="operand"),
        # TensorFlow's definition (through cholesky: it reads one triangle and the diagonal's real part)
        _spec(
            "tf.linalg.logdet",
            {"matrix": gt.constant(_SPD)},
            lambda matrix: 2 * np.log(np.diagonal(la.cholesky(matrix), 0, -2, -1).real).sum(-1),
            matrix="spd",
        ),
        _spec("tf.linalg.cholesky", {"input": gt.constant(_SPD)}, la.cholesky, input="spd"),
        _spec("tf.linalg.eigh", {"tensor": gt.constant(_SPD)}, la.eigh, tensor="spd"),
        _spec("tf.linalg.eigvalsh", {"tensor": gt.constant(_SPD)}, la.eigvalsh, tensor="spd"),
        _spec(
            "tf.linalg.svd",
            {"tensor": x, "compute_uv": False},
            lambda tensor, compute_uv: la.svd(tensor, compute_uv=False),
            tensor="operand",
            compute_uv="flag",
        ),
        _spec("tf.linalg.qr", {"input": x}, lambda a: tuple(la.qr(a)), input="operand"),
        _spec(
            "tf.linalg.pinv",
            {"a": x, "rcond": 1e-6},
            lambda a, rcond: la.pinv(a, 1e-6 if rcond is None else rcond),
            a="operand",
            rcond="number",
        ),
        _spec(
            "tf.linalg.lstsq",
            {"matrix": x, "rhs": gt.constant(_BASE), "l2_regularizer": 0.0},
            _tf_lstsq,
            matrix="operand",
            rhs="operand",
            l2_regularizer="number",
        ),
        _spec(
            "tf.linalg.norm",
            {"tensor": x, "ord": "euclidean", "axis": 0},
            _tf_norm,
            tensor="operand",
            ord="string",
            axis="axis",
        ),
    ]
    return out + _tf_top_specs() + _tf_names_specs() + _tf_random_specs() + _tf_nn_specs() + _data_specs()


def _like(fn: Any) -> Any:
    return lambda a, dtype: fn(a, dtype)


def _counted(fn: Any) -> Any:
    return lambda a, out_type: np.array(fn(a), out_type)


def _tf_top_specs() -> list[Spec]:
    """``tf.*`` functions of gputape.tf's own (TensorFlow's argument names and orders)."""
    x = t()
    mask = gt.constant([[True, False], [False, True]])
    copy = lambda a: np.array(a, copy=True)

    def sorted_(values: Any, axis: Any, direction: Any) -> Any:
        v = np.asarray(values)
        return -np.sort(-v, axis) if direction == "DESCENDING" else np.sort(v, axis)

    def argsorted(values: Any, axis: Any, direction: Any) -> Any:
        v = np.asarray(values)
        return np.argsort(-v if direction == "DESCENDING" else v, axis, kind="stable")

    def constant(value: Any, dtype: Any, shape: Any) -> Any:
        v = np.asarray(value, dtype)
        return v if shape is None else v.reshape(shape)

    srt = {"values": "operand", "axis": "axis", "direction": "string"}
    return [
        _spec("tf.sort", {"values": x, "axis": -1, "direction": "ASCENDING"}, sorted_, **srt),
        _spec("tf.argsort", {"values": x, "axis": -1, "direction": "ASCENDING"}, argsorted, **srt),
        _spec(
            "tf.cast",
            {"x": x, "dtype": "float64"},
            lambda x, dtype: np.asarray(x).astype(dtype),
            x="operand",
            dtype="dtype",
        ),
        _spec(
            "tf.clip_by_value",
            {"t": x, "clip_value_min": 1.5, "clip_value_max": 3.0},
            np.clip,
            t="operand",
            clip_value_min="number",
            clip_value_max="number",
        ),
        _spec("tf.concat", {"values": [x, x], "axis": 0}, np.concatenate, values="operands", axis="axis"),
        _spec("tf.stack", {"values": [x, x], "axis": 0}, np.stack, values="operands", axis="axis"),
        _spec(
            "tf.constant",
            {"value": _BASE, "dtype": "float32", "shape": (4,)},
            constant,
            value="operand",
            dtype="dtype",
            shape="shape",
        ),
        _spec(
            "tf.convert_to_tensor",
            {"value": _BASE, "dtype": None},
            lambda value, dtype: np.asarray(value, dtype),
            value="operand",
            dtype="dtype",
        ),
        Spec(
            "tf.einsum",
            _resolve("tf.einsum"),
            {"equation": "ij,jk->ik", "inputs": [x, x]},
            {"equation": "string"},
            np.einsum,
            star="inputs",
        ),
        _spec("tf.expand_dims", {"input": x, "axis": 0}, np.expand_dims, input="operand", axis="axis"),
        _spec(
            "tf.eye",
            {"num_rows": 2, "num_columns": 3, "dtype": "float32"},
            lambda num_rows, num_columns, dtype: np.eye(num_rows, num_columns, dtype=dtype),
            num_rows="size",
            num_columns="size",
            dtype="dtype",
        ),
        _spec("tf.fill", {"dims": (2, 2), "value": 3.0}, np.full, dims="shape", value="number"),
        _spec(
            "tf.gather",
            {"params": x, "indices": [1, 0], "axis": 0},
            lambda params, indices, axis: np.take(params, indices, axis),
            params="operand",
            indices="index",
            axis="axis",
        ),
        _spec("tf.identity", {"input": x}, copy, input="operand"),
        _spec("tf.stop_gradient", {"input": x}, copy, input="operand"),
        _spec(
            "tf.linspace", {"start": 0.0, "stop": 1.0, "num": 3}, np.linspace, start="number", stop="number", num="size"
        ),
        _spec("tf.matmul", {"a": x, "b": x}, np.matmul, a="operand", b="operand"),
        _spec(
            "tf.norm",
            {"tensor": x, "ord": "euclidean", "axis": 0},
            _tf_norm,
            tensor="operand",
            ord="string",
            axis="axis",
        ),
        _spec(
            "tf.one_hot",
            {"indices": gt.constant([0, 2]), "depth": 3},
            lambda indices, depth: (np.arange(depth) == np.asarray(indices)[..., None]).astype(np.float32),
            indices="index",
            depth="size",
        ),
        *(
            _spec(f"tf.{n}", {"shape": (2, 2), "dtype": "float32"}, getattr(np, n), shape="shape", dtype="dtype")
            for n in ("ones", "zeros")
        ),
        *(
            _spec(
                f"tf.{n}_like",
                {"input": x, "dtype": None},
                _like(getattr(np, f"{n}_like")),
                input="operand",
                dtype="dtype",
            )
            for n in ("ones", "zeros")
        ),
        _spec(
            "tf.range",
            {"start": 0, "limit": 4, "delta": 1, "dtype": "float32"},
            np.arange,
            start="number",
            limit="number",
            delta="number",
            dtype="dtype",
        ),
        _spec("tf.rank", {"input": x}, np.ndim, input="operand"),
        *(
            _spec(
                f"tf.{n}",
                {"input": x, "out_type": "int32"},
                _counted(getattr(np, n)),
                input="operand",
                out_type="dtype",
            )
            for n in ("shape", "size")
        ),
        _spec(
            "tf.repeat", {"input": x, "repeats": 2, "axis": 0}, np.repeat, input="operand", repeats="index", axis="axis"
        ),
        _spec("tf.reshape", {"tensor": x, "shape": (4,)}, np.reshape, tensor="operand", shape="shape"),
        _spec(
            "tf.reverse",
            {"tensor": x, "axis": [1]},
            lambda tensor, axis: np.flip(tensor, tuple(axis) if isinstance(axis, list) else axis),
            tensor="operand",
            axis="axis",
        ),
        _spec("tf.roll", {"input": x, "shift": 1, "axis": 0}, np.roll, input="operand", shift="index", axis="axis"),
        _spec(
            "tf.split",
            {"value": x, "num_or_size_splits": 2, "axis": 0},
            np.split,
            value="operand",
            num_or_size_splits="size",
            axis="axis",
        ),
        _spec("tf.squeeze", {"input": gt.constant(_BASE[None]), "axis": 0}, np.squeeze, input="operand", axis="axis"),
        _spec("tf.tensordot", {"a": x, "b": x, "axes": 1}, np.tensordot, a="operand", b="operand", axes="size"),
        _spec("tf.tile", {"input": x, "multiples": [2, 1]}, np.tile, input="operand", multiples="shape"),
        _spec("tf.transpose", {"a": x, "perm": (1, 0)}, np.transpose, a="operand", perm="axis"),
        _spec(
            "tf.unstack",
            {"value": x, "axis": 0},
            lambda value, axis: list(np.moveaxis(np.asarray(value), axis, 0)),
            value="operand",
            axis="axis",
        ),
        _spec("tf.where", {"condition": mask, "x": x, "y": x}, np.where, condition="operand", x="operand", y="operand"),
        _spec("tf.as_dtype", {"type_value": "float32"}, np.dtype, type_value="dtype"),
    ]


def _tf_slice(input_: Any, begin: Any, size: Any) -> Any:
    a = np.asarray(input_)
    return a[tuple(slice(b, a.shape[i] if n == -1 else b + n) for i, (b, n) in enumerate(zip(begin, size)))]


def _tf_names_specs() -> list[Spec]:
    """The names TensorFlow's tests and guides use (tf.broadcast_to, tf.slice, tf.math.count_nonzero ...)."""
    x = t()
    red = {"input_tensor": "operand", "axis": "axis", "keepdims": "flag"}
    return [
        _spec("tf.broadcast_to", {"input": x, "shape": (3, 2, 2)}, np.broadcast_to, input="operand", shape="shape"),
        _spec(
            "tf.slice",
            {"input_": x, "begin": (0, 1), "size": (2, -1)},
            _tf_slice,
            input_="operand",
            begin="shape",
            size="shape",
        ),
        _spec(
            "tf.pad",
            {"tensor": x, "paddings": [[1, 0], [0, 1]], "mode": "CONSTANT", "constant_values": 0.0},
            lambda tensor, paddings, mode, constant_values: np.pad(tensor, paddings, constant_values=constant_values),
            tensor="operand",
            paddings="shape",
            mode="string",
            constant_values="number",
        ),
        _spec(
            "tf.boolean_mask",
            {"tensor": x, "mask": gt.constant([True, False]), "axis": 0},
            lambda tensor, mask, axis: np.compress(np.asarray(mask), tensor, axis),
            tensor="operand",
            mask="operand",
            axis="axis",
        ),
        _spec(
            "tf.math.count_nonzero",
            {"input": x, "axis": 0, "keepdims": False, "dtype": "int64"},
            lambda a, axis, keepdims, dtype: np.count_nonzero(a, axis, keepdims=keepdims).astype(dtype),
            input="operand",
            axis="axis",
            dtype="dtype",
        ),
        _spec(
            "tf.math.reduce_euclidean_norm",
            {"input_tensor": x, "axis": 0, "keepdims": False},
            _tf_reduce(lambda a, axis, keepdims: np.sqrt(np.sum(np.abs(a) ** 2, axis=axis, keepdims=keepdims))),
            **red,
        ),
        _spec("tf.math.atan2", {"y": x, "x": gt.constant(_BASE + 1)}, np.arctan2, y="operand", x="operand"),
        _spec("tf.math.nextafter", {"x1": x, "x2": gt.constant(_BASE + 1)}, np.nextafter, x1="operand", x2="operand"),
    ]


def _tf_draw(kind: str) -> Any:
    """TensorFlow's formulas (mean + stddev * N(0, 1), minval + (maxval - minval) * U[0, 1)) on the
    stream the first op after ``gt.random.seed(0)`` draws from (as _call seeds it)."""
    from gputape.nn.initializers import _truncated_normal

    def ref(shape: Any, a: Any, b: Any, dtype: Any) -> Any:
        b = 1.0 if b is None else b  # uniform's default maxval
        gt.random.seed(0)
        rng = gt.random.generator()
        if kind == "normal":
            return (a + b * rng.standard_normal(shape)).astype(dtype)
        if kind == "truncated_normal":
            return (_truncated_normal(rng, b, shape) + a).astype(dtype)
        return (a + (b - a) * rng.random(shape)).astype(dtype)

    return ref


def _tf_random_specs() -> list[Spec]:
    """tf.random's draws: shapes, dtypes and parameters checked as TensorFlow checks them."""
    shape = {"shape": "shape", "dtype": "dtype"}
    seed = gt.constant(np.array([1, 2]))
    normal = {"shape": (2, 2), "mean": 0.0, "stddev": 1.0, "dtype": "float32"}
    return [
        _spec("tf.random.normal", normal, _tf_draw("normal"), mean="number", stddev="number", **shape),
        _spec(
            "tf.random.truncated_normal", normal, _tf_draw("truncated_normal"), mean="number", stddev="number", **shape
        ),
        _spec(
            "tf.random.uniform",
            {"shape": (2, 2), "minval": 0.0, "maxval": 1.0, "dtype": "float32"},
            _tf_draw("uniform"),
            minval="number",
            maxval="number",
            **shape,
        ),
        _spec("tf.random.stateless_normal", {"shape": (2, 2), "seed": seed, "dtype": "float32"}, **shape),
        _spec("tf.random.stateless_truncated_normal", {"shape": (2, 2), "seed": seed, "dtype": "float32"}, **shape),
        _spec("tf.random.stateless_uniform", {"shape": (2, 2), "seed": seed, "dtype": "float32"}, **shape),
        _spec("tf.random.categorical", {"logits": x_logits(), "num_samples": 3}, logits="operand", num_samples="size"),
        _spec(
            "tf.random.stateless_categorical",
            {"logits": x_logits(), "num_samples": 3, "seed": seed},
            logits="operand",
            num_samples="size",
        ),
        _spec("tf.random.set_seed", {"seed": 0}, seed="size"),
    ]


def _sigmoid_xent(labels: Any, logits: Any) -> Any:
    z, x = np.asarray(labels), np.asarray(logits)
    return np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))


def _silu_ref(features: Any, beta: Any) -> Any:
    f = np.asarray(features)
    with np.errstate(all="ignore"):
        return f / (1 + np.exp(-np.multiply(beta, f)))


def _log_softmax(logits: Any, axis: Any = -1) -> Any:
    x = np.asarray(logits)
    ax = -1 if axis is None else axis
    return x - np.log(np.sum(np.exp(x), axis=ax, keepdims=True))


def _tf_nn_specs() -> list[Spec]:
    """tf.nn's functions of its own (TensorFlow's argument names: features, logits, labels)."""
    x = t()
    act = {
        "relu": lambda f: np.maximum(f, 0),
        "relu6": lambda f: np.clip(f, 0, 6),
        "elu": lambda f: np.where(np.asarray(f) > 0, f, np.expm1(np.minimum(f, 0))),
        "l2_loss": None,
    }
    out = [_spec(f"tf.nn.{n}", {"features": x}, ref, features="operand") for n, ref in act.items() if n != "l2_loss"]
    probs = gt.constant(_BASE / _BASE.sum(axis=1, keepdims=True))
    out += [
        _spec("tf.nn.l2_loss", {"t": x}, lambda t: np.sum(np.square(t)) / 2, t="operand"),
        _spec(
            "tf.nn.embedding_lookup",
            {"params": x, "ids": gt.constant([1, 0])},
            lambda params, ids: np.take(np.asarray(params), np.asarray(ids), axis=0),
            params="table",
        ),
        _spec("tf.nn.gelu", {"features": x, "approximate": False}, features="operand", approximate="flag"),
        _spec(
            "tf.nn.leaky_relu",
            {"features": x, "alpha": 0.2},
            lambda f, alpha: np.where(np.asarray(f) > 0, f, np.multiply(alpha, f)),
            features="operand",
            alpha="number",
        ),
        *(
            _spec(f"tf.nn.{n}", {"features": x, "beta": 1.0}, _silu_ref, features="operand", beta="number")
            for n in ("silu", "swish")
        ),
        _spec(
            "tf.nn.softmax",
            {"logits": x, "axis": -1},
            lambda lg, axis: np.exp(_log_softmax(lg, axis)),
            logits="operand",
            axis="axis",
        ),
        _spec("tf.nn.log_softmax", {"logits": x, "axis": -1}, _log_softmax, logits="operand", axis="axis"),
        _spec(
            "tf.nn.bias_add",
            {"value": x, "bias": gt.constant([1.0, 2.0])},
            lambda v, b: np.add(v, b),
            value="operand",
            bias="operand",
        ),
        _spec("tf.nn.dropout", {"x": x, "rate": 0.5}, x="operand", rate="number"),  # a draw: twins compared
        _spec(
            "tf.nn.moments",
            {"x": x, "axes": [0], "keepdims": False},
            lambda x, axes, keepdims: (
                np.mean(x, tuple(axes), keepdims=keepdims),
                np.var(x, tuple(axes), keepdims=keepdims),
            ),
            x="operand",
            axes="axis",
            keepdims="flag",
        ),
        _spec(
            "tf.nn.sigmoid_cross_entropy_with_logits",
            {"labels": gt.constant(_BASE / 4), "logits": x},
            _sigmoid_xent,
            labels="operand",
            logits="operand",
        ),
        _spec(
            "tf.nn.softmax_cross_entropy_with_logits",
            {"labels": probs, "logits": x, "axis": -1},
            lambda labels, logits, axis: -np.sum(np.asarray(labels) * _log_softmax(logits, axis), axis=axis),
            labels="operand",
            logits="operand",
            axis="axis",
        ),
        _spec(
            "tf.nn.sparse_softmax_cross_entropy_with_logits",
            {"labels": gt.constant([0, 1]), "logits": x},
            lambda labels, logits: -np.take_along_axis(_log_softmax(logits), np.asarray(labels)[:, None], 1)[:, 0],
            labels="index",
            logits="operand",
        ),
    ]
    return out


def x_logits() -> gt.Tensor:
    return gt.constant(np.log(_BASE / _BASE.sum(axis=1, keepdims=True)))


# tf.data.Dataset's and gt.data's entry points, called on a fresh pipeline by these functions
def _ds() -> Any:
    import gputape.tf as tf

    return tf.data.Dataset.from_tensor_slices(np.arange(6.0, dtype=np.float32))


def _ds_list(ds: Any) -> list:
    return [np.asarray(e).tolist() for e in ds]


def _ds_batch(batch_size: Any, drop_remainder: Any) -> Any:
    return _ds_list(_ds().batch(batch_size, drop_remainder=drop_remainder))


def _ds_shuffle(buffer_size: Any) -> Any:
    return sorted(_ds_list(_ds().shuffle(buffer_size, seed=0)))


def _ds_take(count: Any) -> Any:
    return _ds_list(_ds().take(count))


def _ds_skip(count: Any) -> Any:
    return _ds_list(_ds().skip(count))


def _ds_repeat_take(count: Any) -> Any:
    return _ds_list(_ds().repeat(count).take(8))


def _ds_enumerate(start: Any) -> Any:
    return [int(i) for i, _ in _ds().enumerate(start)]


def _ds_slices(tensors: Any) -> Any:
    import gputape.tf as tf

    return _ds_list(tf.data.Dataset.from_tensor_slices(tensors))


def _loader(batch_size: Any) -> Any:
    return [len(b) for b in gt.data.DataLoader(np.arange(6.0), batch_size=batch_size)]


def _dense(units: Any) -> Any:
    return gt.nn.Dense(units).units


def _apply_gradients(grads_and_vars: Any) -> Any:
    return gt.optim.SGD(0.1).apply_gradients(grads_and_vars)


def _accuracy(y_pred: Any) -> Any:
    import gputape.tf as tf

    return float(tf.keras.metrics.Accuracy()(gt.constant([1.0, 2.0]), y_pred))


def _data_specs() -> list[Spec]:
    """tf.data.Dataset's methods, gt.data.DataLoader, Dense(units), apply_gradients and Accuracy: TensorFlow's
    and Keras' rules (their results where they accept the value, else a clear error naming the argument)."""
    data = np.arange(6.0)

    def chunks(batch_size: Any, drop_remainder: Any = False) -> list:
        n = int(batch_size)
        out = [data[i : i + n].tolist() for i in range(0, 6, n)]
        return [c for c in out if len(c) == n] if drop_remainder else out

    def take(count: Any) -> list:
        return data.tolist() if count < 0 else data[:count].tolist()

    def skip(count: Any) -> list:
        return [] if count < 0 else data[count:].tolist()

    def repeat(count: Any) -> list:
        return (data.tolist() * (8 if count is None or count < 0 else count))[:8]

    def accuracy(y_pred: Any) -> float:
        return float(np.mean(np.asarray([1.0, 2.0]) == np.asarray(y_pred)))

    def row(name: str, fn: Any, args: dict[str, Any], kinds: dict[str, str], ref: Any = None) -> Spec:
        return Spec(name, fn, args, kinds, ref, also=(name, name.replace("tf.data.", "")))

    ds = "tf.data.Dataset"
    return [
        row(
            f"{ds}.batch",
            _ds_batch,
            {"batch_size": 4, "drop_remainder": False},
            {"batch_size": "size", "drop_remainder": "flag"},
            chunks,
        ),
        row(
            f"{ds}.shuffle", _ds_shuffle, {"buffer_size": 3}, {"buffer_size": "size"}, lambda buffer_size: data.tolist()
        ),
        row(f"{ds}.take", _ds_take, {"count": 2}, {"count": "count"}, take),
        row(f"{ds}.skip", _ds_skip, {"count": 2}, {"count": "count"}, skip),
        row(f"{ds}.repeat", _ds_repeat_take, {"count": 2}, {"count": "count"}, repeat),
        row(
            f"{ds}.enumerate",
            _ds_enumerate,
            {"start": 1},
            {"start": "count"},
            lambda start: list(range(start, start + 6)),
        ),
        row(
            f"{ds}.from_tensor_slices",
            _ds_slices,
            {"tensors": _BASE},
            {"tensors": "slices"},
            lambda tensors: np.asarray(tensors).tolist(),
        ),
        row(
            "gt.data.DataLoader",
            _loader,
            {"batch_size": 4},
            {"batch_size": "size"},
            lambda batch_size: [len(c) for c in chunks(batch_size)],
        ),
        row("Dense", _dense, {"units": 3}, {"units": "size"}, int),
        row("SGD.apply_gradients", _apply_gradients, {"grads_and_vars": []}, {"grads_and_vars": "pairs"}),
        row("Accuracy", _accuracy, {"y_pred": gt.constant([1.0, 0.0])}, {"y_pred": "operand"}, accuracy),
    ]


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
    "random.get_seed": "takes no arguments",
    "random.get_state": "takes no arguments",
    "random.set_state": "takes get_state()'s dict; a malformed one is tested in tests/test_tf_train_checkpoint.py",
    "tf.function": "a decorator (gt.function's, with TensorFlow's arguments)",
    "tf.print": "writes its arguments out (any object prints)",
    "tf.get_static_value": "takes any object (a non-tensor is returned as it is, as in TensorFlow)",
    "tf.is_tensor": "takes any object and answers whether it is a tensor",
    "tf.executing_eagerly": "takes no arguments",
    "tf.random.get_global_generator": "takes no arguments",
}


def _resolve(name: str) -> Any:
    obj: Any = gt
    if name.startswith("tf."):
        import gputape.tf as obj  # loaded on demand, as its users import it

        name = name[3:]
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def display(name: str) -> str:
    """The name a user calls a function by: ``gt.linalg.inv``, ``tf.math.reduce_sum``."""
    return name if name.startswith("tf.") else f"gt.{name}"


def public_callables() -> dict[str, Any]:
    """Every public function of the namespaces the table covers (classes and modules excluded).

    A TensorFlow namespace's aliases of gputape functions (``tf.math.exp is gt.exp``) are not
    listed: they are called under their gputape name; its own functions are.
    """
    import gputape.tf
    import gputape.tf.linalg
    import gputape.tf.math
    import gputape.tf.nn
    import gputape.tf.random

    out = {}
    for prefix, ns in (
        ("", gt),
        ("nn.", gt.nn),
        ("random.", gt.random),
        ("linalg.", gt.linalg),
        ("fft.", gt.fft),
        ("testing.", gt.testing),
        ("tf.", gputape.tf),
        ("tf.math.", gputape.tf.math),
        ("tf.linalg.", gputape.tf.linalg),
        ("tf.random.", gputape.tf.random),
        ("tf.nn.", gputape.tf.nn),
    ):
        names = getattr(ns, "__all__", None) or [n for n in dir(ns) if not n.startswith("_")]
        for n in names:
            f = getattr(ns, n)
            if inspect.isclass(f) or inspect.ismodule(f) or not callable(f):
                continue
            mod = getattr(f, "__module__", "") or ""
            if not mod.startswith("gputape" if ns is gt else ns.__name__):
                continue  # helpers a submodule imported for itself (typing, numpy, gputape's own)
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
        elif not kw and (star or (len(pos) < len(positional) and positional[len(pos)] == p)):
            pos.append(v)  # by position while the row follows the signature's order, then by keyword
        else:
            kw[p] = v
    return spec.fn(*pos, **kw)


def _positional(spec: Spec) -> tuple[list[str], bool]:
    """The parameters that can be passed by position, in order, and whether the rest go into a
    ``*args`` (check_grads)."""
    params = inspect.signature(spec.fn).parameters
    pos = [p for p, v in params.items() if v.kind in (v.POSITIONAL_ONLY, v.POSITIONAL_OR_KEYWORD)]
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
    names = {display(spec.name), *spec.also}
    for n, f in public_callables().items():
        if f is spec.fn:
            names.add(display(n))
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
