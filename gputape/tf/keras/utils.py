"""``tf.keras.utils``: ``set_random_seed``.

>>> import gputape.tf as tf
>>> tf.keras.utils.set_random_seed(0)
"""

from __future__ import annotations

import random as _py_random

import numpy as np

from ... import random as _random

__all__ = ["set_random_seed"]


def set_random_seed(seed: int) -> None:
    """Seed Python's ``random``, numpy's global RNG and gputape's global seed, as Keras does.

    After it, initializers, Dropout, shuffles and the random ops are the same in every process.

    >>> import gputape.tf as tf, numpy as np, random
    >>> tf.keras.utils.set_random_seed(3); a = (random.random(), np.random.rand(), float(tf.random.normal([])))
    >>> tf.keras.utils.set_random_seed(3); a == (random.random(), np.random.rand(), float(tf.random.normal([])))
    True
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ValueError(f"tf.keras.utils.set_random_seed: seed must be an integer, got {seed!r}")
    _py_random.seed(seed)
    np.random.seed(seed)
    _random.seed(seed)


# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
