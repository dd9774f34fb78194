"""Keras-style loss objects (``gt.nn.losses``): ``loss_fn(y_true, y_pred) -> scalar``.

The math lives in :mod:`gputape.nn.functional` (stable, fused softmax
cross-entropy); these classes add Keras' argument order ``(y_true, y_pred)``,
``from_logits`` and the reduction over the batch. With ``from_logits=False``
the predictions are probabilities, clipped to ``[eps, 1 - eps]`` as Keras does.

>>> import gputape as gt
>>> loss_fn = gt.nn.losses.SparseCategoricalCrossentropy(from_logits=True)
>>> round(float(loss_fn([0, 1], gt.constant([[0.0, 0.0], [0.0, 0.0]]))), 4)
0.6931
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ops import clip, log, mean
from ..ops import sum as _sum
from ..tensor import Tensor, as_tensor
from . import functional as fn

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Loss",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "mean_squared_error",
]

mean_squared_error = fn.mean_squared_error

_EPS = 1e-7  # Keras' backend.epsilon()
_REDUCTIONS = ("sum_over_batch_size", "sum", "none", None)


class Loss:
    """Base class: ``call(y_true, y_pred)`` gives per-example losses, ``__call__`` reduces them.

    ``reduction`` is ``'sum_over_batch_size'`` (the mean, Keras' default),
    ``'sum'`` or ``'none'``. ``sample_weight`` scales each example's loss.

    >>> import gputape as gt
    >>> class L1(gt.nn.losses.Loss):
    ...     def call(self, y_true, y_pred):
    ...         return gt.mean(abs(y_pred - y_true), axis=-1)
    >>> float(L1()(gt.constant([[1.0], [2.0]]), gt.constant([[0.0], [0.0]])))
    1.5
    """

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction
        self.name = name or type(self).__name__

    def call(self, y_true: Any, y_pred: Any) -> Any:
        """Per-example losses (before the reduction); subclasses define it.

        >>> import gputape as gt
        >>> gt.nn.losses.MeanSquaredError().call([[1.0], [0.0]], gt.constant([[0.0], [0.0]])).numpy().tolist()
        [1.0, 0.0]
        """
        raise NotImplementedError

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        losses = self.call(y_true, y_pred)
        if sample_weight is not None:
            losses = losses * sample_weight
        if self.reduction in ("none", None):
            return losses
        total = _sum(losses)
        return total if self.reduction == "sum" else total / max(1, int(np.prod(as_tensor(losses).shape)))


def _log_probs(y_pred: Any, axis: int) -> Any:
    # Keras renormalises and clips probabilities before the log; log of the
    # renormalised probabilities is exactly what log_softmax expects as logits.
    p = as_tensor(y_pred)
    p = p / _sum(p, axis=axis, keepdims=True)
    return log(clip(p, _EPS, 1.0 - _EPS))


class SparseCategoricalCrossentropy(Loss):
    """Cross-entropy of integer labels against logits (``from_logits=True``) or probabilities.

    >>> import gputape as gt
    >>> loss = gt.nn.losses.SparseCategoricalCrossentropy()([1], gt.constant([[0.25, 0.75]]))
    >>> round(float(loss), 4)
    0.2877
    """

    def __init__(
        self, from_logits: bool = False, reduction: str | None = "sum_over_batch_size", name: str | None = None
    ):
        super().__init__(reduction, name)
        self.from_logits = from_logits

    def call(self, y_true: Any, y_pred: Any) -> Any:
        labels = y_true._data if isinstance(y_true, Tensor) else np.asarray(y_true)
        if labels.dtype.kind == "f":  # Keras accepts float-typed class ids
            labels = labels.astype(np.int64)
        if labels.ndim == as_tensor(y_pred).ndim:  # (batch, 1) labels, as Keras allows
            labels = labels.reshape(labels.shape[:-1])
        logits = y_pred if self.from_logits else _log_probs(y_pred, -1)
        return fn.sparse_softmax_cross_entropy_with_logits(labels, logits)


class CategoricalCrossentropy(Loss):
    """Cross-entropy of one-hot (or probability) labels against logits or probabilities.

    >>> import gputape as gt
    >>> loss_fn = gt.nn.losses.CategoricalCrossentropy(from_logits=True)
    >>> round(float(loss_fn([[0.0, 1.0]], gt.constant([[0.0, 0.0]]))), 4)
    0.6931
    """

    def __init__(
        self,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
    ):
        super().__init__(reduction, name)
        self.from_logits = from_logits
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        y = as_tensor(y_true)
        if self.label_smoothing:
            k = y.shape[-1]
            y = y * (1.0 - self.label_smoothing) + self.label_smoothing / k
        if self.from_logits:
            return fn.softmax_cross_entropy_with_logits(y, y_pred)
        return -_sum(y * _log_probs(y_pred, -1), axis=-1)


class BinaryCrossentropy(Loss):
    """Binary cross-entropy of labels in [0, 1] against logits or probabilities, averaged over the last axis.

    >>> import gputape as gt
    >>> round(float(gt.nn.losses.BinaryCrossentropy(from_logits=True)([[1.0]], gt.constant([[0.0]]))), 4)
    0.6931
    """

    def __init__(
        self, from_logits: bool = False, reduction: str | None = "sum_over_batch_size", name: str | None = None
    ):
        super().__init__(reduction, name)
        self.from_logits = from_logits

    def call(self, y_true: Any, y_pred: Any) -> Any:
        if self.from_logits:
            per = fn.sigmoid_cross_entropy_with_logits(y_true, y_pred)
        else:
            p = clip(as_tensor(y_pred), _EPS, 1.0 - _EPS)
            per = -(y_true * log(p) + (1.0 - as_tensor(y_true)) * log(1.0 - p))
        return mean(per, axis=-1)


class MeanSquaredError(Loss):
    """Mean squared error over the last axis, then over the batch.

    >>> import gputape as gt
    >>> float(gt.nn.losses.MeanSquaredError()(gt.constant([[0.0, 0.0]]), gt.constant([[1.0, 3.0]])))
    5.0
    """

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return fn.mean_squared_error(y_true, y_pred)
