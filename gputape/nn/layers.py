"""Keras-style layers on :class:`gt.Module`: ``Dense``, ``Dropout``, ``Flatten``, ``Sequential``.

They live in modules by concern: :mod:`~gputape.nn.base_layer` (``Layer``, lazy
``build`` on the first call), :mod:`~gputape.nn.core`,
:mod:`~gputape.nn.normalization`, :mod:`~gputape.nn.sequential` and the
functional API's :mod:`~gputape.nn.keras_tensor`; this module gathers them.

>>> import gputape as gt, numpy as np
>>> gt.random.seed(0)
>>> model = gt.nn.Sequential([gt.nn.Dense(8, activation="relu"), gt.nn.Dropout(0.5), gt.nn.Dense(3)])
>>> x = np.ones((4, 5), "float32")
>>> model(x, training=True).shape
(4, 3)
>>> [path for path, v in model.named_variables()]
['layers/0/kernel', 'layers/0/bias', 'layers/2/kernel', 'layers/2/bias']
"""

# The layers live in modules by concern; this module keeps the names that gputape.tf.keras and users
# reach as gputape.nn.layers.<name> (the helpers too: tf.keras.Model replays the functional graph with them).
from .base_layer import Layer, _call_layer  # noqa: F401
from .core import Activation, Add, Concatenate, Dense, Dropout, Embedding, Flatten, Lambda, Reshape
from .keras_tensor import KerasTensor, _Node, _shape_of  # noqa: F401
from .normalization import BatchNormalization, LayerNormalization
from .sequential import Sequential
from .training import _flatten, _map  # noqa: F401

__all__ = [
    "Activation",
    "Add",
    "BatchNormalization",
    "Concatenate",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "KerasTensor",
    "Lambda",
    "Layer",
    "LayerNormalization",
    "Reshape",
    "Sequential",
]
