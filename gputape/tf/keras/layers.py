"""``tf.keras.layers``: gputape's layers under Keras' names.

>>> import gputape.tf as tf
>>> layer = tf.keras.layers.Dense(4, activation="relu")
>>> layer(tf.ones((2, 3))).shape
(2, 4)
"""

from __future__ import annotations

from typing import Any

from ...nn.layers import (
    Activation,
    Add,
    BatchNormalization,
    Concatenate,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    Layer,
    LayerNormalization,
    Reshape,
)
from ...ops import identity

__all__ = [
    "Activation",
    "Add",
    "BatchNormalization",
    "Concatenate",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Input",
    "InputLayer",
    "Layer",
    "LayerNormalization",
    "Reshape",
]


class InputLayer(Layer):
    """Declares the input's shape (without the batch); passes inputs through unchanged.

    As the first entry of a ``Sequential``, it makes the model build its
    variables at once, as Keras does.

    >>> import gputape.tf as tf
    >>> tf.keras.Input(shape=(3,)).shape
    (None, 3)
    """

    def __init__(self, shape: Any = None, dtype: Any = None, name: str | None = None, **kwargs: Any) -> None:
        if shape is None:
            shape = kwargs.pop("input_shape", None)
        if shape is None:
            raise ValueError("Input: pass shape=(features, ...) without the batch dimension")
        self.shape = (None, *(int(s) if s is not None else None for s in shape))
        super().__init__(name=name, dtype=dtype, **kwargs)

    def call(self, inputs: Any) -> Any:
        return identity(inputs)


def Input(shape: Any = None, dtype: Any = None, name: str | None = None, **kwargs: Any) -> InputLayer:
    """Keras' ``Input(shape=...)``: only meaningful as the first entry of a ``Sequential`` here.

    >>> import gputape.tf as tf
    >>> model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(2)])
    >>> len(model.trainable_variables)
    2
    """
    return InputLayer(shape=shape, dtype=dtype, name=name, **kwargs)
