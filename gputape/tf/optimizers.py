"""``tf.optimizers``: the same optimizers as ``tf.keras.optimizers``.

>>> import gputape.tf as tf
>>> tf.optimizers.Adam is tf.keras.optimizers.Adam
True
"""

from .keras.optimizers import SGD, Adam, AdamW, Optimizer, RMSprop, schedules

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "schedules"]

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name

__getattr__ = _missing_name(__name__)
