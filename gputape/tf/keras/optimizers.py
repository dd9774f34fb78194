"""``tf.keras.optimizers`` (and ``tf.optimizers``): Keras' optimizers and schedules.

The update rules are Keras 3's; see :mod:`gputape.optim`.

>>> import gputape.tf as tf
>>> w = tf.Variable([1.0])
>>> opt = tf.keras.optimizers.SGD(learning_rate=0.5)
>>> _ = opt.apply_gradients([(tf.constant([1.0]), w)])
>>> w.numpy().tolist()
[0.5]
"""

from __future__ import annotations

import types as _types

from ...optim import (
    SGD,
    Adam,
    AdamW,
    CosineDecay,
    ExponentialDecay,
    LearningRateSchedule,
    Optimizer,
    PiecewiseConstantDecay,
    RMSprop,
)

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "schedules"]

schedules = _types.SimpleNamespace(
    CosineDecay=CosineDecay,
    ExponentialDecay=ExponentialDecay,
    LearningRateSchedule=LearningRateSchedule,
    PiecewiseConstantDecay=PiecewiseConstantDecay,
)

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
