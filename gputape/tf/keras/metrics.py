"""``tf.keras.metrics``: Keras 3's running metrics; they live in :mod:`gputape.nn.metrics`.

>>> import gputape.tf as tf
>>> float(tf.keras.metrics.SparseCategoricalAccuracy()([0, 1], tf.constant([[0.9, 0.1], [0.8, 0.2]])))
0.5
"""

from __future__ import annotations

from ...nn.metrics import (
    Accuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    Mean,
    MeanAbsoluteError,
    MeanMetricWrapper,
    MeanSquaredError,
    Metric,
    Precision,
    Recall,
    SparseCategoricalAccuracy,
    Sum,
    get,
)

__all__ = [
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "Mean",
    "MeanAbsoluteError",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "Precision",
    "Recall",
    "SparseCategoricalAccuracy",
    "Sum",
    "get",
]

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
