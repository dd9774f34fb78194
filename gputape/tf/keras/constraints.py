"""``tf.keras.constraints``: Keras 3's ``MaxNorm``, ``NonNeg``, ``UnitNorm``, ``MinMaxNorm`` (and their
snake_case names); see :mod:`gputape.nn.constraints`.

>>> import gputape.tf as tf
>>> tf.keras.constraints.NonNeg()(tf.constant([-1.0, 2.0])).numpy().tolist() == [0.0, 2.0]
True
"""

from __future__ import annotations

from ...nn.constraints import (
    Constraint,
    MaxNorm,
    MinMaxNorm,
    NonNeg,
    UnitNorm,
    get,
    max_norm,
    min_max_norm,
    non_neg,
    unit_norm,
)

__all__ = [
    "Constraint",
    "MaxNorm",
    "MinMaxNorm",
    "NonNeg",
    "UnitNorm",
    "get",
    "max_norm",
    "min_max_norm",
    "non_neg",
    "unit_norm",
]

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations
