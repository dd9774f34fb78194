"""``tf.raw_ops``: TensorFlow's op-level names for the ops gputape has, keyword arguments only.

Each raw op calls the ``tf`` function with the same meaning (``AddV2(x=, y=)`` is ``tf.add``,
``MatMul(a=, b=, transpose_a=, transpose_b=)`` is ``tf.linalg.matmul``), so values, gradients and
errors are that function's. As in TensorFlow, a raw op refuses positional arguments. An op that
gputape does not have raises an AttributeError that says so.

>>> import gputape.tf as tf
>>> tf.raw_ops.AddV2(x=tf.constant([1.0]), y=tf.constant([2.0])).numpy().tolist()
[3.0]
>>> tf.raw_ops.Sum(input=tf.ones((2, 3)), axis=1, keep_dims=True).shape
(2, 1)
"""

from __future__ import annotations

import inspect as _inspect
from collections.abc import Callable as _Callable
from typing import Any as _Any

from .. import ops as _ops
from . import _array_ops as _a
from . import _creation as _c
from . import image as _image
from . import linalg as _la
from . import math as _m
from . import nn as _nn
from ._util import missing_name as _missing_name


class _RawOp:
    """One raw op: ``fn`` called with its parameters renamed from TensorFlow's op attributes."""

    def __init__(self, name: str, fn: _Callable[..., _Any], params: list[tuple[str, str, _Any]]) -> None:
        # params: (raw op argument, fn's argument, default or _REQUIRED)
        self.__name__ = self.__qualname__ = name
        self._fn = fn
        self._params = params
        self._keys = [p for p, _, _ in params] + ["name"]  # (for the errors; the accepted set below)
        self._accepted = frozenset(self._keys)
        self.__doc__ = f"TensorFlow's raw op ``{name}``: ``{getattr(fn, '__name__', fn)}`` with keyword arguments."
        P = _inspect.Parameter
        self.__signature__ = _inspect.Signature(
            [P(p, P.KEYWORD_ONLY, default=P.empty if d is _REQUIRED else d) for p, _, d in params]
            + [P("name", P.KEYWORD_ONLY, default=None)]
        )

    def __call__(self, *args: _Any, **kwargs: _Any) -> _Any:
        keys = self._keys
        if args:
            raise TypeError(
                f"tf.raw_ops.{self.__name__} only takes keyword args (possible keys: {keys}). "
                "Please pass these args as kwargs instead."
            )
        unknown = sorted(set(kwargs) - self._accepted)
        if unknown:
            raise TypeError(f"tf.raw_ops.{self.__name__} got unexpected keyword arguments {unknown}; it takes {keys}")
        call = {}
        for raw, mine, default in self._params:
            if raw in kwargs:
                call[mine] = kwargs[raw]
            elif default is _REQUIRED:
                raise TypeError(f"tf.raw_ops.{self.__name__} missing required argument {raw!r}; it takes {keys}")
            else:
                call[mine] = default
        return self._fn(**call)

    def __repr__(self) -> str:
        return f"<tf.raw_ops.{self.__name__}>"


_REQUIRED = object()
_OPS: dict[str, _RawOp] = {}


def _squeeze(input: _Any, axis: _Any) -> _Any:
    return _a.squeeze(input, list(axis) or None)  # (the raw op's empty axis list: every size-1 dimension)


def _cast(x: _Any, dtype: _Any, truncate: bool) -> _Any:
    return _a.cast(x, dtype)  # (float to int casts truncate toward zero either way)


def _einsum(inputs: _Any, equation: str) -> _Any:
    return _a.einsum(equation, *inputs)


def _op(name: str, fn: _Callable[..., _Any], *params: _Any) -> None:
    """``params``: raw names, ``(raw, mine)`` when the tf function names it differently, or
    ``(raw, mine, default)`` for an optional attribute."""
    spec = []
    for p in params:
        if isinstance(p, str):
            spec.append((p, p, _REQUIRED))
        elif len(p) == 2:
            spec.append((p[0], p[1], _REQUIRED))
        else:
            spec.append(tuple(p))
    _OPS[name] = _RawOp(name, fn, spec)


_fn: _Any  # (the tables below hold functions of every signature)
for _name, _fn in {
    "Abs": _m.abs, "Acos": _m.acos, "Acosh": _m.acosh, "Asin": _m.asin, "Asinh": _m.asinh, "Atan": _m.atan,
    "Atanh": _m.atanh, "Ceil": _m.ceil, "Cos": _m.cos, "Cosh": _m.cosh, "Erf": _m.erf, "Exp": _m.exp,
    "Expm1": _m.expm1, "Floor": _m.floor, "IsFinite": _m.is_finite, "IsInf": _m.is_inf, "IsNan": _m.is_nan,
    "Log": _m.log, "Log1p": _m.log1p, "LogicalNot": _m.logical_not, "Neg": _m.negative,
    "Reciprocal": _m.reciprocal, "Round": _m.round, "Rsqrt": _m.rsqrt, "Sigmoid": _m.sigmoid, "Sign": _m.sign,
    "Sin": _m.sin, "Sinh": _m.sinh, "Sqrt": _m.sqrt, "Square": _m.square, "Tan": _m.tan, "Tanh": _m.tanh,
}.items():  # fmt: skip
    _op(_name, _fn, "x")
for _name, _fn in {"Relu": _nn.relu, "Relu6": _nn.relu6, "Elu": _nn.elu, "Softplus": _nn.softplus}.items():
    _op(_name, _fn, "features")
for _name, _fn in {
    "Add": _m.add, "AddV2": _m.add, "Sub": _m.subtract, "Mul": _m.multiply, "RealDiv": _m.divide,
    "Maximum": _m.maximum, "Minimum": _m.minimum, "Pow": _m.pow, "SquaredDifference": _m.squared_difference,
    "DivNoNan": _m.divide_no_nan, "MulNoNan": _m.multiply_no_nan, "FloorDiv": _ops.floor_divide,
    "FloorMod": _ops.mod, "Equal": _m.equal, "NotEqual": _m.not_equal, "Less": _m.less,
    "LessEqual": _m.less_equal, "Greater": _m.greater, "GreaterEqual": _m.greater_equal,
    "LogicalAnd": _m.logical_and, "LogicalOr": _m.logical_or,
}.items():  # fmt: skip
    _op(_name, _fn, "x", "y")
_op("Atan2", _m.atan2, "y", "x")
_op("NextAfter", _m.nextafter, "x1", "x2")
_op("LeakyRelu", _nn.leaky_relu, "features", ("alpha", "alpha", 0.2))
for _name, _fn in {
    "Sum": _m.reduce_sum, "Mean": _m.reduce_mean, "Max": _m.reduce_max, "Min": _m.reduce_min,
    "Prod": _m.reduce_prod, "All": _m.reduce_all, "Any": _m.reduce_any, "EuclideanNorm": _m.reduce_euclidean_norm,
}.items():  # fmt: skip
    _op(_name, _fn, ("input", "input_tensor"), "axis", ("keep_dims", "keepdims", False))
for _name, _fn in {"ArgMax": _m.argmax, "ArgMin": _m.argmin}.items():
    _op(_name, _fn, "input", ("dimension", "axis"), ("output_type", "output_type", "int64"))
_op("MatMul", _la.matmul, "a", "b", ("transpose_a", "transpose_a", False), ("transpose_b", "transpose_b", False))
_op("BatchMatMulV2", _la.matmul, ("x", "a"), ("y", "b"), ("adj_x", "adjoint_a", False), ("adj_y", "adjoint_b", False))
_op("Einsum", _einsum, "inputs", "equation")
_op("AddN", _m.add_n, "inputs")
_op("Cumsum", _m.cumsum, "x", "axis", ("exclusive", "exclusive", False), ("reverse", "reverse", False))
_op("Cumprod", _m.cumprod, "x", "axis", ("exclusive", "exclusive", False), ("reverse", "reverse", False))
_op("Reshape", _a.reshape, "tensor", "shape")
_op("Transpose", _a.transpose, ("x", "a"), "perm")
_op("ConcatV2", _a.concat, "values", "axis")
_op("Pack", _a.stack, "values", ("axis", "axis", 0))
_op("Unpack", _a.unstack, "value", "num", ("axis", "axis", 0))
_op("Squeeze", _squeeze, "input", ("axis", "axis", ()))
_op("ExpandDims", _a.expand_dims, "input", "axis")
_op("Cast", _cast, "x", ("DstT", "dtype"), ("Truncate", "truncate", False))
_op("Identity", _a.identity, "input")
_op("StopGradient", _a.stop_gradient, "input")
_op("Fill", _c.fill, "dims", "value")
_op("ZerosLike", _c.zeros_like, ("x", "input"))
_op("OnesLike", _c.ones_like, ("x", "input"))
_op("Tile", _a.tile, "input", "multiples")
_op("GatherV2", _a.gather, "params", "indices", "axis", ("batch_dims", "batch_dims", 0))
_op("SelectV2", _a.where, "condition", ("t", "x"), ("e", "y"))
_op("Slice", _a.slice, ("input", "input_"), "begin", "size")
_op("BroadcastTo", _a.broadcast_to, "input", "shape")
_op("Pad", _a.pad, ("input", "tensor"), "paddings")
_op("PadV2", _a.pad, ("input", "tensor"), "paddings", "constant_values")
_op("ReverseV2", _a.reverse, "tensor", "axis")
_op("Roll", _a.roll, "input", "shift", "axis")
_op("ClipByValue", _a.clip_by_value, "t", "clip_value_min", "clip_value_max")
_op("Softmax", _nn.softmax, "logits")
_op("LogSoftmax", _nn.log_softmax, "logits")
_op("BiasAdd", _nn.bias_add, "value", "bias", ("data_format", "data_format", None))
_op("L2Loss", _nn.l2_loss, "t")
_op("Range", _c.range, "start", "limit", "delta")
_op("OneHot", _c.one_hot, "indices", "depth", "on_value", "off_value", ("axis", "axis", -1))
_op("Shape", _a.shape, "input", ("out_type", "out_type", "int32"))
_op("Size", _a.size, "input", ("out_type", "out_type", "int32"))
_op("Rank", _a.rank, "input")
_op("MatrixInverse", _la.inv, "input", ("adjoint", "adjoint", False))
_op("MatrixDeterminant", _la.det, "input")
_op("Cholesky", _la.cholesky, "input")
_op("AdjustContrastv2", _image.adjust_contrast, "images", "contrast_factor")

globals().update(_OPS)
__all__ = sorted(_OPS)
__getattr__ = _missing_name(__name__)

del annotations
