"""``tf.keras.regularizers``: Keras 3's ``L1``, ``L2``, ``L1L2`` (also as ``l1``, ``l2``, ``l1_l2``); see
:mod:`gputape.nn.regularizers`.

>>> import gputape.tf as tf
>>> float(tf.keras.regularizers.l2(0.1)(tf.constant([1.0, 2.0])))
0.5
"""

from __future__ import annotations

from ...nn.regularizers import L1, L1L2, L2, Regularizer, get, l1, l1_l2, l2

__all__ = ["L1", "L1L2", "L2", "Regularizer", "get", "l1", "l1_l2", "l2"]

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations
