"""``tf.keras.activations``: activation functions by Keras' names.

>>> import gputape.tf as tf
>>> tf.keras.activations.get("relu")(tf.constant([-1.0])).numpy().tolist()
[0.0]
"""

from ...nn.activations import get, linear, silu
from ...nn.functional import elu, gelu, leaky_relu, log_softmax, relu, sigmoid, softmax, softplus
from ...ops import tanh

swish = silu

__all__ = [
    "elu",
    "gelu",
    "get",
    "leaky_relu",
    "linear",
    "log_softmax",
    "relu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "swish",
    "tanh",
]

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
