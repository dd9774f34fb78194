"""Keras 3's losses (``gt.nn.losses``): per-example functions and loss objects that reduce them.

Every loss first reconciles the ranks of ``y_true`` and ``y_pred`` with Keras'
rule (:func:`squeeze_or_expand_to_same_rank`: a trailing dimension of 1 is
squeezed, or a rank-1 tensor expanded, when the ranks differ by exactly one),
so ``MeanSquaredError()(y_true (3,), y_pred (3, 1))`` compares element with
element, as Keras does, instead of broadcasting to a ``(3, 3)`` table. Shapes
that still cannot be reconciled raise a ``ValueError`` naming the loss and both
shapes: the elementwise losses (MSE, MAE, Huber) need shapes that broadcast,
the cross-entropies need equal shapes (Keras' backends require that too).

The losses compute in ``y_pred``'s floating dtype (float32 for integer or
Python inputs), or in ``dtype`` when a loss object is given one; ``y_true`` is
cast to it. With ``from_logits=False`` probabilities are clipped to
``[1e-7, 1 - 1e-7]`` (Keras' ``epsilon()``), and categorical ones renormalised.

>>> import gputape as gt
>>> float(gt.nn.losses.MeanSquaredError()([1.0, 0.0, 1.0], gt.constant([[1.0], [0.0], [1.0]])))
0.0
>>> loss_fn = gt.nn.losses.SparseCategoricalCrossentropy(from_logits=True)
>>> round(float(loss_fn([0, 1], gt.constant([[0.0, 0.0], [0.0, 0.0]]))), 4)
0.6931
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.tensor import FLOAT_DTYPES, Tensor, constant
from ..ops import abs as _abs
from ..ops import broadcast_to, cast, clip, expand_dims, log, mean, squeeze, where
from ..ops import sum as _sum
from . import functional as fn

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Huber",
    "Loss",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "binary_crossentropy",
    "categorical_crossentropy",
    "get",
    "huber",
    "mean_absolute_error",
    "mean_squared_error",
    "sparse_categorical_crossentropy",
    "squeeze_or_expand_to_same_rank",
]

_EPS = 1e-7  # Keras' backend.epsilon()
_REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight", "none", None)


def squeeze_or_expand_to_same_rank(x1: Any, x2: Any, expand_rank_1: bool = True) -> tuple[Any, Any]:
    """Keras' rank rule: when ranks differ by one and the longer ends in 1, squeeze it (or expand a rank-1 one).

    Anything else is returned unchanged (the caller decides whether the shapes fit).

    >>> import gputape as gt
    >>> a, b = gt.nn.losses.squeeze_or_expand_to_same_rank(gt.zeros((3, 2, 1)), gt.zeros((3, 2)))
    >>> a.shape, b.shape
    ((3, 2), (3, 2))
    >>> a, b = gt.nn.losses.squeeze_or_expand_to_same_rank(gt.zeros((3, 1)), gt.zeros(3))
    >>> a.shape, b.shape
    ((3, 1), (3, 1))
    """
    r1, r2 = len(x1.shape), len(x2.shape)
    if r1 == r2:
        return x1, x2
    if r1 == r2 + 1 and x1.shape[-1] == 1:
        if r2 == 1 and expand_rank_1:
            x2 = expand_dims(x2, -1)
        else:
            x1 = squeeze(x1, -1)
    if r2 == r1 + 1 and x2.shape[-1] == 1:
        if r1 == 1 and expand_rank_1:
            x1 = expand_dims(x1, -1)
        else:
            x2 = squeeze(x2, -1)
    return x1, x2


def _float_dtype(y_pred: Any, dtype: Any) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    d = y_pred.dtype if isinstance(y_pred, Tensor) else np.asarray(y_pred).dtype
    return d if d in FLOAT_DTYPES else np.dtype(np.float32)


def _as(x: Any, dtype: np.dtype, device: str | None) -> Tensor:
    if isinstance(x, Tensor):
        return x if x.dtype == dtype else cast(x, dtype)
    return constant(np.asarray(x), dtype=dtype, device=device)


def _prepare(who: str, y_true: Any, y_pred: Any, dtype: Any = None, same_shape: bool = False) -> tuple[Any, Any]:
    """Both as tensors of one float dtype, ranks reconciled, shapes checked; errors name ``who``."""
    dt = _float_dtype(y_pred, dtype)
    y_pred = _as(y_pred, dt, None)
    y_true = _as(y_true, dt, y_pred.device)
    t, p = squeeze_or_expand_to_same_rank(y_true, y_pred)
    if same_shape:
        ok = t.shape == p.shape
    else:
        try:
            np.broadcast_shapes(t.shape, p.shape)
            ok = True
        except ValueError:
            ok = False
    if not ok:
        need = "equal shapes" if same_shape else "shapes that broadcast"
        raise ValueError(
            f"{who}: y_true of shape {tuple(y_true.shape)} and y_pred of shape {tuple(y_pred.shape)} cannot be "
            f"reconciled (after Keras' squeeze of a trailing 1: {tuple(t.shape)} and {tuple(p.shape)}); it needs "
            f"{need}. Reshape y_true to y_pred's shape, e.g. (batch, outputs)"
        )
    return t, p


# -- per-example functions ----------------------------------------------------------------


def mean_squared_error(y_true: Any, y_pred: Any, _who: str = "mean_squared_error") -> Any:
    """``mean((y_true - y_pred) ** 2, axis=-1)``, after Keras' rank rule.

    >>> import gputape as gt
    >>> gt.nn.losses.mean_squared_error([[0.0, 1.0]], gt.constant([[1.0, 1.0]])).numpy().tolist()
    [0.5]
    """
    t, p = _prepare(_who, y_true, y_pred)
    d = p - t
    return mean(d * d, axis=-1)


def mean_absolute_error(y_true: Any, y_pred: Any, _who: str = "mean_absolute_error") -> Any:
    """``mean(abs(y_true - y_pred), axis=-1)``, after Keras' rank rule.

    >>> import gputape as gt
    >>> gt.nn.losses.mean_absolute_error([[0.0, 1.0]], gt.constant([[1.0, 3.0]])).numpy().tolist()
    [1.5]
    """
    t, p = _prepare(_who, y_true, y_pred)
    return mean(_abs(p - t), axis=-1)


def huber(y_true: Any, y_pred: Any, delta: float = 1.0, _who: str = "huber") -> Any:
    """Huber loss: ``0.5 e**2`` where ``|e| <= delta``, else ``delta * |e| - 0.5 delta**2``; mean over the last axis.

    >>> import gputape as gt
    >>> per = gt.nn.losses.huber([[0.0, 1.0], [0.0, 0.0]], gt.constant([[0.6, 0.4], [0.4, 0.6]]))
    >>> round(float(per.numpy().mean()), 3)
    0.155
    """
    t, p = _prepare(_who, y_true, y_pred)
    err = p - t
    a = _abs(err)
    return mean(where(a <= delta, 0.5 * err * err, delta * a - 0.5 * delta * delta), axis=-1)


def binary_crossentropy(
    y_true: Any,
    y_pred: Any,
    from_logits: bool = False,
    label_smoothing: float = 0.0,
    axis: int = -1,
    _who: str = "binary_crossentropy",
) -> Any:
    """Binary cross-entropy of labels in [0, 1], averaged over ``axis``; ``label_smoothing`` pulls labels to 0.5.

    >>> import gputape as gt
    >>> loss = gt.nn.losses.binary_crossentropy([[0.0, 1.0], [0.0, 0.0]], gt.constant([[0.6, 0.4], [0.4, 0.6]]))
    >>> loss.numpy().astype(float).round(3).tolist()
    [0.916, 0.714]
    """
    t, p = _prepare(_who, y_true, y_pred, same_shape=True)
    if label_smoothing:
        t = t * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        per = fn.sigmoid_cross_entropy_with_logits(t, p)
    else:
        q = clip(p, _EPS, 1.0 - _EPS)
        per = -(t * log(q) + (1.0 - t) * log(1.0 - q))
    return mean(per, axis=axis)


def _log_probs(p: Any, axis: int) -> Any:
    # Keras renormalises and clips probabilities before the log.
    return log(clip(p / _sum(p, axis=axis, keepdims=True), _EPS, 1.0 - _EPS))


def categorical_crossentropy(
    y_true: Any,
    y_pred: Any,
    from_logits: bool = False,
    label_smoothing: float = 0.0,
    axis: int = -1,
    _who: str = "categorical_crossentropy",
) -> Any:
    """Cross-entropy of one-hot (or probability) labels; ``label_smoothing`` mixes in ``1 / classes``.

    >>> import gputape as gt
    >>> y_pred = gt.constant([[0.05, 0.95, 0], [0.1, 0.8, 0.1]])
    >>> loss = gt.nn.losses.categorical_crossentropy([[0, 1, 0], [0, 0, 1]], y_pred)
    >>> loss.numpy().astype(float).round(4).tolist()
    [0.0513, 2.3026]
    """
    t, p = _prepare(_who, y_true, y_pred, same_shape=True)
    if t.ndim < 1:
        raise ValueError(f"{_who}: y_true and y_pred must be at least rank 1, got shape {tuple(t.shape)}")
    if label_smoothing:
        t = t * (1.0 - label_smoothing) + label_smoothing / p.shape[axis]
    if from_logits:
        return fn.softmax_cross_entropy_with_logits(t, p, axis=axis)
    return -_sum(t * _log_probs(p, axis), axis=axis)


def sparse_categorical_crossentropy(
    y_true: Any,
    y_pred: Any,
    from_logits: bool = False,
    axis: int = -1,
    _who: str = "sparse_categorical_crossentropy",
) -> Any:
    """Cross-entropy of integer class ids (shape ``y_pred.shape[:-1]``, or with a trailing 1).

    >>> import gputape as gt
    >>> loss = gt.nn.losses.sparse_categorical_crossentropy([1, 2], gt.constant([[0.05, 0.95, 0], [0.1, 0.8, 0.1]]))
    >>> loss.numpy().astype(float).round(4).tolist()
    [0.0513, 2.3026]
    """
    p = _as(y_pred, _float_dtype(y_pred, None), None)
    if axis not in (-1, p.ndim - 1):
        raise NotImplementedError(f"{_who}: only the last axis can hold the classes (axis=-1), got axis={axis}")
    # gputape ops on a tensor's labels, not numpy on its array: a gt.function trace records them, so a
    # replay casts and reshapes each call's labels instead of reusing the first call's
    labels = y_true if isinstance(y_true, Tensor) else np.asarray(y_true)
    if labels.dtype.kind == "f":  # Keras accepts float-typed class ids
        labels = cast(labels, np.int64) if isinstance(labels, Tensor) else labels.astype(np.int64)
    if labels.ndim == p.ndim and labels.shape[-1:] == (1,):  # (batch, 1) labels, as Keras allows
        labels = squeeze(labels, -1) if isinstance(labels, Tensor) else labels.reshape(labels.shape[:-1])
    if p.ndim < 1 or labels.shape != p.shape[:-1]:
        raise ValueError(
            f"{_who}: y_true of shape {tuple(labels.shape)} does not fit y_pred of shape {tuple(p.shape)}; class ids "
            f"need shape y_pred.shape[:-1] = {tuple(p.shape[:-1])} (or that with a trailing 1)"
        )
    logits = p if from_logits else _log_probs(p, -1)
    return fn.sparse_softmax_cross_entropy_with_logits(labels, logits)


# -- loss objects -------------------------------------------------------------------------


class Loss:
    """Base class: ``call(y_true, y_pred)`` gives per-example losses, ``__call__`` weights and reduces them.

    ``reduction`` is Keras 3's: ``'sum_over_batch_size'`` (default) and
    ``'mean'`` divide the sum by the number of loss values,
    ``'mean_with_sample_weight'`` by the sum of the sample weights, ``'sum'``
    sums, ``'none'``/``None`` returns the per-example values. ``sample_weight``
    is matched to the losses' rank by the same rule as the labels, then
    broadcast. A loss that is already a scalar is returned as it is.

    >>> import gputape as gt
    >>> class L1(gt.nn.losses.Loss):
    ...     def call(self, y_true, y_pred):
    ...         return gt.mean(abs(y_pred - y_true), axis=-1)
    >>> float(L1()(gt.constant([[1.0], [2.0]]), gt.constant([[0.0], [0.0]])))
    1.5
    >>> L1()
    L1(reduction='sum_over_batch_size', name='l1')
    """

    def __init__(self, name: str | None = None, reduction: str | None = "sum_over_batch_size", dtype: Any = None):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        from ..core.module import _snake

        self.reduction = reduction
        self.name = name or _snake(type(self).__name__)
        self.dtype = np.dtype(dtype) if dtype is not None else None

    def call(self, y_true: Any, y_pred: Any) -> Any:
        """Per-example losses (before the reduction); subclasses define it.

        >>> import gputape as gt
        >>> gt.nn.losses.MeanSquaredError().call([[1.0], [0.0]], gt.constant([[0.0], [0.0]])).numpy().tolist()
        [1.0, 0.0]
        """
        raise NotImplementedError(f"{type(self).__name__} must define call(self, y_true, y_pred)")

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        if self.dtype is not None:  # Keras computes the loss in the loss' dtype (a differentiable cast)
            y_pred = _as(y_pred, self.dtype, None)
        values = self.call(y_true, y_pred)
        values = values if isinstance(values, Tensor) else constant(values)
        if sample_weight is not None:
            sw = _as(sample_weight, values.dtype, values.device)
            values, sw = squeeze_or_expand_to_same_rank(values, sw)
            values = values * sw
        if self.reduction in ("none", None) or values.shape in ((), (0,)):
            return values
        total = _sum(values)
        if self.reduction == "sum":
            return total
        if self.reduction == "mean_with_sample_weight" and sample_weight is not None:
            count = _sum(broadcast_to(sw, values.shape))
            return where(count == 0, 0.0, total / where(count == 0, 1.0, count))  # Keras' divide_no_nan
        return total / values.size if values.size else total * 0.0

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as Keras' ``get_config``.

        >>> import gputape as gt
        >>> gt.nn.losses.Huber(delta=2.0).get_config()
        {'name': 'huber_loss', 'reduction': 'sum_over_batch_size', 'delta': 2.0}
        """
        return {"name": self.name, "reduction": self.reduction, **self._options()}

    def _options(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        args = {"reduction": self.reduction, "name": self.name, **self._options()}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


class _FunctionLoss(Loss):
    # A loss object over one of the functions above: the function and its options.
    _fn: Callable[..., Any]
    _default_name: str
    _option_names: tuple[str, ...] = ()

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None, dtype: Any = None):
        super().__init__(name or self._default_name, reduction, dtype)

    def _options(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._option_names}

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return type(self)._fn(y_true, y_pred, **self._options(), _who=type(self).__name__)


class MeanSquaredError(_FunctionLoss):
    """Mean squared error over the last axis, then over the batch (Keras' example gives 0.02).

    >>> import gputape as gt
    >>> round(float(gt.nn.losses.MeanSquaredError()([1.0, 0.0, 1.0], gt.constant([0.9, 0.1, 0.8]))), 4)
    0.02
    """

    _fn = staticmethod(mean_squared_error)
    _default_name = "mean_squared_error"


class MeanAbsoluteError(_FunctionLoss):
    """Mean absolute error over the last axis, then over the batch.

    >>> import gputape as gt
    >>> round(float(gt.nn.losses.MeanAbsoluteError()([1.0, 0.3, 1.0], gt.constant([1.9, 0.3, 1.8]))), 7)
    0.5666667
    """

    _fn = staticmethod(mean_absolute_error)
    _default_name = "mean_absolute_error"


class Huber(_FunctionLoss):
    """Huber loss (quadratic within ``delta``, linear outside), mean over the last axis, then the batch.

    >>> import gputape as gt
    >>> round(float(gt.nn.losses.Huber()([[0.0, 1.0], [0.0, 0.0]], gt.constant([[0.6, 0.4], [0.4, 0.6]]))), 3)
    0.155
    """

    _fn = staticmethod(huber)
    _default_name = "huber_loss"
    _option_names = ("delta",)

    def __init__(
        self,
        delta: float = 1.0,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
        dtype: Any = None,
    ):
        super().__init__(reduction, name, dtype)
        self.delta = float(delta)


class _CrossentropyLoss(_FunctionLoss):
    _option_names = ("from_logits", "label_smoothing", "axis")

    def __init__(
        self,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
        dtype: Any = None,
    ):
        super().__init__(reduction, name, dtype)
        if not 0.0 <= float(label_smoothing) <= 1.0:
            raise ValueError(f"{type(self).__name__}: label_smoothing must be in [0, 1], got {label_smoothing!r}")
        self.from_logits = bool(from_logits)
        self.label_smoothing = float(label_smoothing)
        self.axis = int(axis)


class BinaryCrossentropy(_CrossentropyLoss):
    """Binary cross-entropy of labels in [0, 1] against logits (``from_logits=True``) or probabilities.

    Keras' documented example:

    >>> import gputape as gt
    >>> bce = gt.nn.losses.BinaryCrossentropy(from_logits=True)
    >>> y_true, y_pred = [[0.0, 1.0], [0.0, 0.0]], gt.constant([[-18.6, 0.51], [2.94, -12.8]])
    >>> round(float(bce(y_true, y_pred)), 4), round(float(bce(y_true, y_pred, sample_weight=[0.8, 0.2])), 3)
    (0.8655, 0.244)
    """

    _fn = staticmethod(binary_crossentropy)
    _default_name = "binary_crossentropy"


class CategoricalCrossentropy(_CrossentropyLoss):
    """Cross-entropy of one-hot (or probability) labels against logits or probabilities.

    Keras' documented example:

    >>> import gputape as gt
    >>> cce = gt.nn.losses.CategoricalCrossentropy()
    >>> y_true, y_pred = [[0, 1, 0], [0, 0, 1]], gt.constant([[0.05, 0.95, 0], [0.1, 0.8, 0.1]])
    >>> round(float(cce(y_true, y_pred)), 3), round(float(cce(y_true, y_pred, sample_weight=[0.3, 0.7])), 3)
    (1.177, 0.814)
    """

    _fn = staticmethod(categorical_crossentropy)
    _default_name = "categorical_crossentropy"


class SparseCategoricalCrossentropy(_FunctionLoss):
    """Cross-entropy of integer labels against logits (``from_logits=True``) or probabilities.

    >>> import gputape as gt
    >>> scce = gt.nn.losses.SparseCategoricalCrossentropy(reduction="sum")
    >>> round(float(scce([1, 2], gt.constant([[0.05, 0.95, 0], [0.1, 0.8, 0.1]]))), 3)
    2.354
    """

    _fn = staticmethod(sparse_categorical_crossentropy)
    _default_name = "sparse_categorical_crossentropy"
    _option_names = ("from_logits", "axis")

    def __init__(
        self,
        from_logits: bool = False,
        ignore_class: int | None = None,
        reduction: str | None = "sum_over_batch_size",
        axis: int = -1,
        name: str | None = None,
        dtype: Any = None,
    ):
        if ignore_class is not None:
            raise NotImplementedError(
                "SparseCategoricalCrossentropy: ignore_class is not supported; pass sample_weight=(y_true != c) "
                "with reduction='mean_with_sample_weight' instead"
            )
        super().__init__(reduction, name, dtype)
        self.from_logits = bool(from_logits)
        self.axis = int(axis)


_LOSSES_BY_NAME: dict[str, Any] = {
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
    "huber": Huber,
    "huber_loss": Huber,
    "binary_crossentropy": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
}


def get(identifier: Any) -> Any:
    """A loss from a Keras name (``'mse'``, ``'sparse_categorical_crossentropy'``, ...), a Loss or a function.

    Names give the loss class with its defaults (so ``from_logits=False``: pass
    ``SparseCategoricalCrossentropy(from_logits=True)`` for logits). A
    :class:`Loss` or a function ``fn(y_true, y_pred)`` (per-example values,
    averaged over the batch by the caller) is returned as it is.

    >>> import gputape as gt
    >>> gt.nn.losses.get("mse"), gt.nn.losses.get("sparse_categorical_crossentropy").from_logits
    (MeanSquaredError(reduction='sum_over_batch_size', name='mean_squared_error'), False)
    """
    if isinstance(identifier, str):
        cls = _LOSSES_BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(
                f"losses.get: unknown loss {identifier!r}; use one of {sorted(_LOSSES_BY_NAME)}, a "
                "tf.keras.losses.Loss or a function fn(y_true, y_pred)"
            )
        return cls()
    if isinstance(identifier, Loss) or callable(identifier):
        return identifier
    raise TypeError(f"losses.get: expected a loss name, a Loss or a function, got {type(identifier).__name__}")
