"""``tf.keras.initializers``: Keras' initializer classes and ``get``.

>>> import gputape.tf as tf
>>> tf.keras.initializers.Zeros()((2,)).tolist()
[0.0, 0.0]
"""

from ...nn.initializers import (
    Constant,
    GlorotNormal,
    GlorotUniform,
    HeNormal,
    HeUniform,
    Initializer,
    LecunNormal,
    LecunUniform,
    Ones,
    RandomNormal,
    RandomUniform,
    TruncatedNormal,
    VarianceScaling,
    Zeros,
    get,
)

__all__ = [
    "Constant",
    "GlorotNormal",
    "GlorotUniform",
    "HeNormal",
    "HeUniform",
    "Initializer",
    "LecunNormal",
    "LecunUniform",
    "Ones",
    "RandomNormal",
    "RandomUniform",
    "TruncatedNormal",
    "VarianceScaling",
    "Zeros",
    "get",
]

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name

__getattr__ = _missing_name(__name__)
