"""Neural networks (``gt.nn``): activations and losses as functions, and Keras-style layers.

>>> import gputape as gt
>>> gt.nn.relu(gt.constant([-1.0, 1.0])).numpy().tolist()
[0.0, 1.0]
"""

from . import activations, constraints, initializers, losses, regularizers
from .base_layer import Layer
from .core import Activation, Add, Concatenate, Dense, Dropout, Embedding, Flatten, Lambda, Reshape
from .functional import (
    elu,
    gelu,
    leaky_relu,
    log_softmax,
    mean_squared_error,
    relu,
    sigmoid,
    sigmoid_cross_entropy_with_logits,
    softmax,
    softmax_cross_entropy_with_logits,
    softplus,
    sparse_softmax_cross_entropy_with_logits,
)
from .keras_tensor import KerasTensor
from .normalization import BatchNormalization, LayerNormalization
from .sequential import Sequential

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
    "activations",
    "constraints",
    "elu",
    "gelu",
    "initializers",
    "leaky_relu",
    "log_softmax",
    "losses",
    "mean_squared_error",
    "regularizers",
    "relu",
    "sigmoid",
    "sigmoid_cross_entropy_with_logits",
    "softmax",
    "softmax_cross_entropy_with_logits",
    "softplus",
    "sparse_softmax_cross_entropy_with_logits",
]
