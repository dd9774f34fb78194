"""``tf.keras.losses``: loss classes (reduced over the batch) and functions (per example).

>>> import gputape.tf as tf
>>> y_pred = tf.constant([[0.0, 0.0]])
>>> float(tf.keras.losses.MeanSquaredError()([[1.0, 1.0]], y_pred))
1.0
>>> tf.keras.losses.sparse_categorical_crossentropy([0], y_pred, from_logits=True).shape
(1,)
"""

from __future__ import annotations

from typing import Any

from ...nn.losses import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    Loss,
    MeanSquaredError,
    SparseCategoricalCrossentropy,
    mean_squared_error,
)

__all__ = [
    "MSE",
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Loss",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "binary_crossentropy",
    "categorical_crossentropy",
    "mean_squared_error",
    "mse",
    "sparse_categorical_crossentropy",
]

MSE = mse = mean_squared_error


def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False, axis: int = -1) -> Any:
    """Per-example cross-entropy of integer labels.

    >>> import gputape.tf as tf
    >>> loss = tf.keras.losses.sparse_categorical_crossentropy([1], tf.constant([[0.5, 0.5]]))
    >>> loss.numpy().astype(float).round(4).tolist()
    [0.6931]
    """
    if axis != -1:
        raise NotImplementedError("sparse_categorical_crossentropy: only axis=-1 is supported")
    return SparseCategoricalCrossentropy(from_logits, reduction="none")(y_true, y_pred)


def categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1
) -> Any:
    """Per-example cross-entropy of one-hot or probability labels.

    >>> import gputape.tf as tf
    >>> loss = tf.keras.losses.categorical_crossentropy([[0.0, 1.0]], tf.constant([[0.5, 0.5]]))
    >>> loss.numpy().astype(float).round(4).tolist()
    [0.6931]
    """
    if axis != -1:
        raise NotImplementedError("categorical_crossentropy: only axis=-1 is supported")
    return CategoricalCrossentropy(from_logits, label_smoothing, reduction="none")(y_true, y_pred)


def binary_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False) -> Any:
    """Per-example binary cross-entropy, averaged over the last axis.

    >>> import gputape.tf as tf
    >>> loss = tf.keras.losses.binary_crossentropy([[1.0]], tf.constant([[0.0]]), from_logits=True)
    >>> loss.numpy().astype(float).round(4).tolist()
    [0.6931]
    """
    return BinaryCrossentropy(from_logits, reduction="none")(y_true, y_pred)
