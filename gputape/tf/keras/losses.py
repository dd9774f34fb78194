"""``tf.keras.losses``: Keras 3's loss classes (reduced over the batch) and functions (per example).

>>> import gputape.tf as tf
>>> y_pred = tf.constant([[0.0, 0.0]])
>>> float(tf.keras.losses.MeanSquaredError()([[1.0, 1.0]], y_pred))
1.0
>>> tf.keras.losses.sparse_categorical_crossentropy([0], y_pred, from_logits=True).shape
(1,)
"""

from __future__ import annotations

from ...nn.losses import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    Huber,
    Loss,
    MeanAbsoluteError,
    MeanSquaredError,
    SparseCategoricalCrossentropy,
    binary_crossentropy,
    categorical_crossentropy,
    huber,
    mean_absolute_error,
    mean_squared_error,
    sparse_categorical_crossentropy,
)

MSE = mse = mean_squared_error
MAE = mae = mean_absolute_error

__all__ = [
    "MAE",
    "MSE",
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Huber",
    "Loss",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "binary_crossentropy",
    "categorical_crossentropy",
    "huber",
    "mae",
    "mean_absolute_error",
    "mean_squared_error",
    "mse",
    "sparse_categorical_crossentropy",
]

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
