"""``tf.optimizers``: the same optimizers as ``tf.keras.optimizers``.

>>> import gputape.tf as tf
>>> tf.optimizers.Adam is tf.keras.optimizers.Adam
True
"""

from .keras.optimizers import SGD, Adam, AdamW, Optimizer, RMSprop, schedules

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "schedules"]
