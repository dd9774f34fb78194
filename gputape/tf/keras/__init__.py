"""``tf.keras``: the parts of Keras a custom GradientTape loop uses.

Layers, ``Sequential``, subclassed ``Model``, optimizers, losses, metrics,
initializers and activations. ``compile``/``fit``/``evaluate`` are not
provided: gputape is for custom training loops.

>>> import gputape.tf as tf
>>> model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(2)])
>>> model(tf.ones((3, 5))).shape
(3, 2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backend import to_host
from ...nn import layers as _layers
from ...tensor import Tensor
from . import activations, initializers, layers, losses, metrics, optimizers
from .layers import Input, InputLayer

# The Keras 3 release whose sources the layers, losses, metrics and their documented examples were
# checked against (keras/src/...); gputape.tf.__version__ is the TensorFlow API level.
__version__ = "3.16.0"

__all__ = [
    "Input",
    "Model",
    "Sequential",
    "activations",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "optimizers",
]

_NO_FIT = (
    "gputape.tf.keras models have no {0}(): gputape is for custom GradientTape training loops "
    "(compute the loss inside `with tf.GradientTape() as tape:`, then optimizer.apply_gradients)"
)


class _ModelMixin:
    def predict(self, x: Any, batch_size: int = 32, verbose: Any = 0) -> np.ndarray:
        """Run the model on ``x`` in batches with ``training=False``; returns a numpy array.

        >>> import gputape.tf as tf
        >>> tf.keras.Sequential([tf.keras.layers.Dense(2)]).predict(tf.ones((5, 3))).shape
        (5, 2)
        """
        n = len(x)
        outs = [self(x[i : i + batch_size], training=False) for i in range(0, n, batch_size)]
        return np.concatenate([to_host(o._data) if isinstance(o, Tensor) else np.asarray(o) for o in outs])

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Not provided: raises ``NotImplementedError`` pointing to a GradientTape loop.

        >>> import gputape.tf as tf
        >>> tf.keras.Sequential().compile()
        Traceback (most recent call last):
        NotImplementedError: gputape.tf.keras models have no compile(): ...
        """
        raise NotImplementedError(_NO_FIT.format("compile"))

    def fit(self, *args: Any, **kwargs: Any) -> None:
        """Not provided: raises ``NotImplementedError`` pointing to a GradientTape loop.

        >>> import gputape.tf as tf
        >>> tf.keras.Sequential().fit()
        Traceback (most recent call last):
        NotImplementedError: gputape.tf.keras models have no fit(): ...
        """
        raise NotImplementedError(_NO_FIT.format("fit"))

    def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """Not provided: raises ``NotImplementedError`` pointing to a GradientTape loop.

        >>> import gputape.tf as tf
        >>> tf.keras.Sequential().evaluate()
        Traceback (most recent call last):
        NotImplementedError: gputape.tf.keras models have no evaluate(): ...
        """
        raise NotImplementedError(_NO_FIT.format("evaluate"))


class Model(_ModelMixin, _layers.Layer):
    """Subclass it, create layers in ``__init__`` and define ``call(self, inputs, training=None)``.

    The functional form ``Model(inputs, outputs)`` is not supported.

    >>> import gputape.tf as tf
    >>> class MLP(tf.keras.Model):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.hidden = tf.keras.layers.Dense(8, activation="relu")
    ...         self.out = tf.keras.layers.Dense(2)
    ...     def call(self, x, training=False):
    ...         return self.out(self.hidden(x))
    >>> model = MLP()
    >>> model(tf.ones((1, 4))).shape, len(model.trainable_variables)
    ((1, 2), 4)
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or "inputs" in kwargs or "outputs" in kwargs:
            raise NotImplementedError(
                "gputape.tf.keras.Model: the functional API Model(inputs, outputs) is not supported; subclass "
                "Model and define call(), or use Sequential"
            )
        super().__init__(**kwargs)

    def _build_once(self, input_shape: tuple[int | None, ...], device: str) -> None:
        # A subclassed model's layers build themselves on the first call.
        self._device = device
        self.built = True


class Sequential(_ModelMixin, _layers.Sequential):
    """``gt.nn.Sequential`` with Keras extras: a leading ``keras.Input(shape=...)`` builds it at once.

    >>> import gputape.tf as tf
    >>> m = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(3)])
    >>> [v.shape for v in m.trainable_variables]
    [(4, 3), (3,)]
    """

    def __init__(self, layers: Any = None, name: str | None = None, **kwargs: Any) -> None:
        layers = list(layers or ())
        spec = layers.pop(0) if layers and isinstance(layers[0], InputLayer) else None
        super().__init__(layers, name=name, **kwargs)
        if spec is not None:
            self.build(spec.shape)
