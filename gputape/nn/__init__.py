"""Neural-network functions: activations and losses (``gt.nn``).

>>> import gputape as gt
>>> gt.nn.relu(gt.constant([-1.0, 1.0])).numpy().tolist()
[0.0, 1.0]
"""

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

__all__ = [
    "elu",
    "gelu",
    "leaky_relu",
    "log_softmax",
    "mean_squared_error",
    "relu",
    "sigmoid",
    "sigmoid_cross_entropy_with_logits",
    "softmax",
    "softmax_cross_entropy_with_logits",
    "softplus",
    "sparse_softmax_cross_entropy_with_logits",
]
