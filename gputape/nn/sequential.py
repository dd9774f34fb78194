"""``Sequential``: layers applied in order, a Keras model (``compile``/``fit``/``evaluate``/``predict``).

>>> import gputape as gt, numpy as np
>>> gt.nn.Sequential([gt.nn.Dense(2), gt.nn.Dense(1)])(np.ones((3, 4), "float32")).shape
(3, 1)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..core.module import Module
from ..core.tensor import _wrap
from ..devices import backend
from ..devices.placement import current_device
from ._config import constructor_kwargs
from .base_layer import Layer, _call_layer, _remember_build_shape
from .saving import deserialize, register_keras_class, serialize
from .summary import _fn_name
from .training import Trainer

__all__ = ["Sequential"]


class Sequential(Trainer, Layer):
    """Layers applied in order; ``training`` is passed to each layer that takes it.

    Entries may be layers, modules or plain callables (``gt.nn.relu``). It is a
    Keras model: ``compile``/``fit``/``evaluate``/``predict`` (:mod:`gputape.nn.training`).

    >>> import gputape as gt, numpy as np
    >>> model = gt.nn.Sequential([gt.nn.Dense(4, activation="tanh"), gt.nn.Dense(1)], name="mlp")
    >>> model.add(gt.nn.sigmoid)
    >>> model(np.zeros((3, 2))).shape, len(model.layers), len(model.trainable_variables)
    ((3, 1), 3, 4)
    """

    def __init__(self, layers: Iterable[Any] | None = None, name: str | None = None, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.layers: list[Any] = []
        for layer in layers or ():
            self.add(layer)

    def _build_once(self, input_shape: tuple[int | None, ...], device: str) -> None:
        # Each layer builds itself on its first call; nothing to do for the container.
        self._device = device
        _remember_build_shape(self, (None, *tuple(input_shape)[1:]))
        self.built = True

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        """Create every layer's Variables now (Keras' ``model.build((None, features))``).

        It runs one sample of zeros through the layers (``training=False``).

        >>> import gputape as gt
        >>> m = gt.nn.Sequential([gt.nn.Dense(3), gt.nn.Dense(1)])
        >>> m.build((None, 5)); [v.shape for v in m.trainable_variables]
        [(5, 3), (3,), (3, 1), (1,)]
        """
        dims = tuple(input_shape)[1:]
        if any(d is None for d in dims):
            raise ValueError(f"Sequential.build: every dimension but the batch must be known, got {input_shape}")
        xp = backend.xp_for_device(getattr(self, "_device", None) or current_device())
        self.call(_wrap(xp.zeros((1, *dims), self.dtype or np.float32)), training=False)
        self.built = True

    def get_config(self) -> dict[str, Any]:
        """Keras' Sequential config: each layer serialized (class name and config), and the build input shape.

        >>> import gputape as gt
        >>> m = gt.nn.Sequential([gt.nn.Dense(2)], name="m"); m.build((None, 3))
        >>> c = m.get_config(); [l["class_name"] for l in c["layers"]], c["build_input_shape"]
        (['Dense'], [None, 3])
        """
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": str(self.dtype or np.dtype("float32")),
            "layers": [serialize(layer) for layer in self.layers],
            "build_input_shape": self.__dict__.get("_build_input_shape"),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Sequential:
        """A model from ``get_config()``'s dict or a Keras 3 Sequential config (layers rebuilt by class name).

        >>> import gputape as gt
        >>> m = gt.nn.Sequential([gt.nn.Dense(2)]); m.build((None, 3))
        >>> [v.shape for v in gt.nn.Sequential.from_config(m.get_config()).weights]
        [(3, 2), (2,)]
        """
        config = dict(config)
        layers = [deserialize(c, custom_objects) for c in config.pop("layers", [])]
        shape = config.pop("build_input_shape", None)
        model = cls(layers, **constructor_kwargs(cls, config, cls.__name__))
        if not model.built and shape is not None:
            model.build(tuple(shape))
        return model

    def add(self, layer: Any) -> None:
        """Append a layer (or callable) to the end.

        >>> import gputape as gt
        >>> m = gt.nn.Sequential(); m.add(gt.nn.Dense(2)); len(m.layers)
        1
        """
        if not callable(layer):
            raise TypeError(f"Sequential.add: expected a layer or callable, got {type(layer).__name__}")
        self.layers.append(layer)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        x = inputs
        for layer in self.layers:
            x = _call_layer(layer, x, training)
        return x

    def __repr__(self) -> str:
        """The layer tree, one layer a line (nested models indented).

        >>> import gputape as gt
        >>> gt.nn.Sequential([gt.nn.Dense(2, name="fc", input_shape=(3,)), gt.nn.relu], name="mlp")
        <Sequential 'mlp'; 8 params>
          (0): <Dense 'fc', units=2, activation='linear', use_bias=True; 8 params>
          (1): relu (function)
        """
        params = sum(v.size for v in self.weights)
        lines = [f"<{type(self).__name__} {self.name!r}; {params:,} params>"]
        for i, layer in enumerate(self.layers):
            text = repr(layer) if isinstance(layer, Module) else f"{_fn_name(layer)} (function)"
            lines.append(f"  ({i}): " + text.replace("\n", "\n  "))
        return "\n".join(lines)


register_keras_class(Sequential, "keras")
