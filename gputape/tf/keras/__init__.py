"""``tf.keras``: the parts of Keras a custom GradientTape loop uses.

Layers, ``Sequential``, functional and subclassed ``Model``, optimizers,
losses, metrics, callbacks, initializers and activations. Models have Keras'
``compile``/``fit``/``evaluate``/``predict`` for the common case (one loss;
see :mod:`gputape.nn.training`), and custom GradientTape loops work as well.

>>> import gputape.tf as tf
>>> model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(2)])
>>> model(tf.ones((3, 5))).shape
(3, 2)
"""

from __future__ import annotations

from typing import Any as _Any

from ...nn import Layer as _Layer
from ...nn import Sequential as _Sequential
from ...nn.base_layer import _call_layer
from ...nn.keras_tensor import _shape_of
from ...nn.training import Trainer as _Trainer
from ...nn.training import _flatten, _map
from . import (
    activations,
    callbacks,
    constraints,
    initializers,
    layers,
    losses,
    metrics,
    optimizers,
    regularizers,
    utils,
)
from .layers import Input, KerasTensor
from .layers import InputLayer as _InputLayer

# The Keras 3 release whose sources the layers, losses, metrics and their documented examples were
# checked against (keras/src/...); gputape.tf.__version__ is the TensorFlow API level.
__version__ = "3.16.0"

__all__ = [
    "Functional",
    "Input",
    "Model",
    "Sequential",
    "activations",
    "callbacks",
    "constraints",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "optimizers",
    "regularizers",
    "utils",
]


class Model(_Trainer, _Layer):
    """A Keras model: ``Model(inputs, outputs)`` (the functional API), or a subclass that defines ``call``.

    Subclassed: create layers in ``__init__`` and define ``call(self, inputs, training=None)``.

    >>> import gputape.tf as tf
    >>> class MLP(tf.keras.Model):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.hidden = tf.keras.layers.Dense(8, activation="relu")
    ...         self.out = tf.keras.layers.Dense(2)
    ...     def call(self, x, training=False):
    ...         return self.out(self.hidden(x))
    >>> model = MLP()
    >>> model(tf.ones((1, 4))).shape, len(model.trainable_variables), [type(lay).__name__ for lay in model.layers]
    ((1, 2), 4, ['Dense', 'Dense'])

    Functional: see :class:`Functional`.
    """

    def __new__(cls, *args: _Any, **kwargs: _Any) -> _Any:
        if cls is Model and (args or "inputs" in kwargs or "outputs" in kwargs):
            return super().__new__(Functional)  # Python then runs Functional.__init__
        return super().__new__(cls)

    def __init__(self, *args: _Any, **kwargs: _Any) -> None:
        if args or "inputs" in kwargs or "outputs" in kwargs:
            raise NotImplementedError(
                f"{type(self).__name__}: a subclassed Model cannot also take inputs/outputs here; build the "
                "functional model with tf.keras.Model(inputs, outputs), or define call()"
            )
        super().__init__(**kwargs)

    def _build_once(self, input_shape: tuple[int | None, ...], device: str) -> None:
        # A subclassed model's layers build themselves on the first call.
        self._device = device
        self.built = True

    @property
    def layers(self) -> list[_Any]:
        """The model's direct layers (a functional model's in graph order, its InputLayers first).

        >>> import gputape.tf as tf
        >>> x = tf.keras.Input(shape=(2,), name="x")
        >>> [type(l).__name__ for l in tf.keras.Model(x, tf.keras.layers.Dense(1)(x)).layers]
        ['InputLayer', 'Dense']
        """
        found = getattr(self, "_layer_list", None)
        if found is not None:
            return list(found)
        return [m for m in self._parts()[1] if isinstance(m, _Layer)]


class Functional(Model):
    """``tf.keras.Model(inputs, outputs)``: the layers between symbolic ``Input``s and outputs, run in order.

    ``inputs`` and ``outputs`` are a symbolic tensor, a list/tuple or a dict of
    them; calling the model takes (and returns) the same structure. Layers
    shared between branches share their weights.

    >>> import gputape.tf as tf
    >>> a, b = tf.keras.Input(shape=(2,), name="a"), tf.keras.Input(shape=(3,), name="b")
    >>> h = tf.keras.layers.Concatenate()([a, tf.keras.layers.Dense(4)(b)])
    >>> model = tf.keras.Model(inputs=[a, b], outputs=[tf.keras.layers.Dense(1)(h), h])
    >>> [o.shape for o in model([tf.ones((5, 2)), tf.ones((5, 3))])]
    [(5, 1), (5, 6)]
    """

    def __init__(
        self, inputs: _Any, outputs: _Any, name: str | None = None, trainable: bool = True, **kw: _Any
    ) -> None:
        _Layer.__init__(self, name=name, trainable=trainable, **kw)
        flat_in, flat_out = _flatten(inputs), _flatten(outputs)
        for what, flat in (("inputs", flat_in), ("outputs", flat_out)):
            bad = [type(t).__name__ for t in flat if not isinstance(t, KerasTensor)]
            if bad or not flat:
                raise TypeError(
                    f"Model: {what} must be symbolic tensors from tf.keras.Input and layer calls, got {bad or 'none'}"
                )
        for t in flat_in:
            if not isinstance(t._node.layer, _InputLayer):
                raise ValueError(f"Model: every input must come from tf.keras.Input, got {t!r} made by a layer")
        self._inputs_struct, self._outputs_struct = inputs, outputs
        self.inputs, self.outputs = flat_in, flat_out
        nodes: list[_Any] = []
        done: set[int] = set()

        def visit(t: KerasTensor) -> None:
            node = t._node
            if id(node) in done:
                return
            if isinstance(node.layer, _InputLayer):
                if not any(t is i for i in flat_in):
                    raise ValueError(
                        f"Model: graph disconnected: the outputs depend on {t!r}, which is not among the inputs "
                        f"{[i.name for i in flat_in]}"
                    )
            else:
                for parent in _flatten(node.inputs):
                    visit(parent)
                nodes.append(node)
            done.add(id(node))

        for t in flat_out:
            visit(t)
        self._nodes = nodes
        order = [t._node.layer for t in flat_in] + [n.layer for n in nodes]
        self._layer_list = list({id(layer): layer for layer in order}.values())
        self.built = True

    def call(self, inputs: _Any, training: bool | None = None) -> _Any:
        given = _flatten(inputs)
        if len(given) != len(self.inputs):
            raise ValueError(
                f"Model {self.name!r}: expects {len(self.inputs)} input(s) shaped like {self._inputs_struct!r}, "
                f"got {len(given)}"
            )
        values: dict[int, _Any] = {}
        for k, (spec, value) in enumerate(zip(self.inputs, given)):
            shape = _shape_of(value)
            if len(shape) != len(spec.shape) or any(d is not None and d != g for d, g in zip(spec.shape, shape)):
                raise ValueError(
                    f"Model {self.name!r}: input {k} ({spec.name!r}) expects shape {tuple(spec.shape)}, got {shape}"
                )
            values[id(spec)] = value
        for node in self._nodes:
            x = _map(lambda t: values[id(t)], node.inputs)
            out = _call_layer(node.layer, x, training, node.args, node.kwargs)
            for t, v in zip(_flatten(node.outputs), _flatten(out)):
                values[id(t)] = v
        return _map(lambda t: values[id(t)], self._outputs_struct)


class Sequential(_Sequential):
    """``gt.nn.Sequential`` with Keras extras: a leading ``keras.Input(shape=...)`` builds it at once.

    >>> import gputape.tf as tf
    >>> m = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(3)])
    >>> [v.shape for v in m.trainable_variables]
    [(4, 3), (3,)]
    """

    def __init__(self, layers: _Any = None, name: str | None = None, **kwargs: _Any) -> None:
        layers = list(layers or ())
        if layers and isinstance(layers[0], KerasTensor) and isinstance(layers[0]._node.layer, _InputLayer):
            layers[0] = layers[0]._node.layer
        spec = layers.pop(0) if layers and isinstance(layers[0], _InputLayer) else None
        super().__init__(layers, name=name, **kwargs)
        if spec is not None:
            if any(d is None for d in spec.shape[1:]):
                x = spec.output  # sizes known only at call time: build each layer on the symbolic tensor
                for layer in self.layers:
                    x = layer(x)
                self.built = True
            else:
                self.build(spec.shape)


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations
