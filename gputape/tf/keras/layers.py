"""``tf.keras.layers``: gputape's layers under Keras' names.

>>> import gputape.tf as tf
>>> layer = tf.keras.layers.Dense(4, activation="relu")
>>> layer(tf.ones((2, 3))).shape
(2, 4)
"""

from __future__ import annotations

from typing import Any as _Any

from ...nn import (
    Activation,
    Add,
    BatchNormalization,
    Concatenate,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    KerasTensor,
    Lambda,
    Layer,
    LayerNormalization,
    Reshape,
)
from ...nn.keras_tensor import _Node
from ...ops import identity as _identity

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
    "KerasTensor",
    "Lambda",
    "Layer",
    "LayerNormalization",
    "Reshape",
]


class InputLayer(Layer):
    """Declares the input's shape (without the batch); passes inputs through unchanged.

    ``tf.keras.Input`` makes one and returns its symbolic output. As the
    first entry of a ``Sequential`` it makes the model build its variables at
    once, as Keras does.

    >>> import gputape.tf as tf
    >>> tf.keras.layers.InputLayer(shape=(3,)).shape
    (None, 3)
    """

    def __init__(
        self,
        shape: _Any = None,
        dtype: _Any = None,
        name: str | None = None,
        batch_size: int | None = None,
        batch_shape: _Any = None,
        **kwargs: _Any,
    ) -> None:
        if shape is None:
            shape = kwargs.pop("input_shape", None)
        if batch_shape is not None:
            batch_size, shape = batch_shape[0], batch_shape[1:]
        if shape is None:
            raise ValueError("Input: pass shape=(features, ...) without the batch dimension")
        self.shape = (batch_size, *(int(s) if s is not None else None for s in shape))
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.built = True
        self._output_shape = self.shape
        self.output = KerasTensor(self.shape, self.dtype or "float32", name=self.name)
        self.output._node = _Node(self, None, (), {})
        self.output._node.outputs = self.output

    def get_config(self) -> dict[str, _Any]:
        """Keras 3's InputLayer config (``batch_shape``, ``dtype``, ``name``).

        >>> import gputape.tf as tf
        >>> tf.keras.layers.InputLayer(shape=(3,), name="x").get_config()["batch_shape"]
        [None, 3]
        """
        return {"batch_shape": list(self.shape), "dtype": str(self.dtype or "float32"), "name": self.name}

    def call(self, inputs: _Any) -> _Any:
        return _identity(inputs)


def Input(
    shape: _Any = None,
    batch_size: int | None = None,
    dtype: _Any = None,
    name: str | None = None,
    **kwargs: _Any,
) -> KerasTensor:
    """Keras' ``Input``: a symbolic tensor to build a functional ``Model`` from (or to start a ``Sequential``).

    ``shape`` excludes the batch; ``None`` marks a size known only at call time.

    >>> import gputape.tf as tf
    >>> x = tf.keras.Input(shape=(3,))
    >>> model = tf.keras.Model(x, tf.keras.layers.Dense(2)(x))
    >>> model(tf.ones((4, 3))).shape, len(model.trainable_variables)
    ((4, 2), 2)
    """
    return InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, name=name, **kwargs).output


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
