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
from ...nn.base_layer import _call_layer, _remember_build_shape
from ...nn.keras_tensor import _shape_of
from ...nn.saving import register_keras_class as _register
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
    models,
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
    "models",
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

    @classmethod
    def from_config(cls, config: dict[str, _Any], custom_objects: dict[str, _Any] | None = None) -> _Any:
        """A model from its config: a functional one's (``layers``, ``input_layers``) rebuilds the graph, as in Keras.

        >>> import gputape.tf as tf
        >>> x = tf.keras.Input(shape=(2,))
        >>> type(tf.keras.Model.from_config(tf.keras.Model(x, x).get_config())).__name__
        'Functional'
        """
        if cls in (Model, Functional) and "layers" in config and "input_layers" in config:
            return Functional._from_graph_config(config, custom_objects)
        return super().from_config(config)

    def _build_once(self, input_shape: tuple[int | None, ...], device: str) -> None:
        # A subclassed model's layers build themselves on the first call.
        self._device = device
        _remember_build_shape(self, input_shape)
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

    # -- Keras 3's config and weights layout --------------------------------------------------------
    def _keras_layer_order(self) -> list[_Any]:
        """The layers in Keras' order (``map_graph``: deepest first, ties by first visit from the outputs).

        Keras rebuilds a saved functional model in this order and names the weights' groups by it
        (``layers/dense``, ``layers/dense_1`` ...), so a saved file must follow it too.
        """
        index: dict[int, int] = {}
        finished: set[int] = set()
        ordered: list[_Any] = []  # nodes, inputs first

        def visit(t: KerasTensor) -> None:
            node = t._node
            if id(node) in finished:
                return
            index.setdefault(id(node.layer), len(index))
            if node.inputs is not None:
                for parent in _flatten(node.inputs):
                    visit(parent)
            finished.add(id(node))
            ordered.append(node)

        for t in self.outputs:
            visit(t)
        node_depth: dict[int, int] = {}
        layer_depth: dict[int, int] = {}
        layers: dict[int, _Any] = {}
        for node in reversed(ordered):
            depth = max(node_depth.setdefault(id(node), 0), layer_depth.get(id(node.layer), 0))
            layer_depth[id(node.layer)] = node_depth[id(node)] = depth
            layers[id(node.layer)] = node.layer
            for parent in _flatten(node.inputs) if node.inputs is not None else ():
                node_depth[id(parent._node)] = max(depth + 1, node_depth.get(id(parent._node), 0))
        for t in self.inputs:  # an input no output depends on
            if id(t._node.layer) not in layer_depth:
                layer_depth[id(t._node.layer)], index[id(t._node.layer)] = 0, -1
                layers[id(t._node.layer)] = t._node.layer
        return sorted(layers.values(), key=lambda lay: (-layer_depth[id(lay)], index[id(lay)]))

    def get_config(self) -> dict[str, _Any]:
        """Keras 3's functional config: every layer serialized with the calls (``inbound_nodes``) that wire it.

        >>> import gputape.tf as tf
        >>> x = tf.keras.Input(shape=(2,), name="x")
        >>> c = tf.keras.Model(x, tf.keras.layers.Dense(1, name="d")(x)).get_config()
        >>> [l["name"] for l in c["layers"]], c["input_layers"], c["output_layers"]
        (['x', 'd'], [['x', 0, 0]], [['d', 0, 0]])
        """
        from ...nn.saving import serialize

        mine = {id(t._node): t._node for t in self.inputs} | {id(n): n for n in self._nodes}
        per_layer: dict[int, list[_Any]] = {}
        for node in sorted(mine.values(), key=lambda n: n.serial):
            per_layer.setdefault(id(node.layer), []).append(node)
        node_index = {id(n): i for nodes in per_layer.values() for i, n in enumerate(nodes)}

        def history(t: KerasTensor) -> list[_Any]:
            node = t._node
            return [
                node.layer.name,
                node_index[id(node)],
                next(i for i, o in enumerate(_flatten(node.outputs)) if o is t),
            ]

        def tensor(t: _Any) -> _Any:
            if not isinstance(t, KerasTensor):
                return t
            shape = [None if d is None else int(d) for d in t.shape]
            return {
                "class_name": "__keras_tensor__",
                "config": {"shape": shape, "dtype": str(t.dtype), "keras_history": history(t)},
            }

        layers = []
        for layer in self._keras_layer_order():
            entry = serialize(layer)
            entry["name"] = layer.name
            entry["inbound_nodes"] = [
                {"args": [_map(tensor, n.inputs), *_map(tensor, list(n.args))], "kwargs": _map(tensor, dict(n.kwargs))}
                for n in per_layer.get(id(layer), [])
                if n.inputs is not None
            ]
            layers.append(entry)

        def ends(struct: _Any) -> _Any:
            return [history(struct)] if isinstance(struct, KerasTensor) else _map(history, struct)

        return {
            "name": self.name,
            "trainable": self.trainable,
            "layers": layers,
            "input_layers": ends(self._inputs_struct),
            "output_layers": ends(self._outputs_struct),
        }

    @classmethod
    def _from_graph_config(cls, config: dict[str, _Any], custom_objects: dict[str, _Any] | None = None) -> Functional:
        """A functional model from :meth:`get_config`'s dict (or Keras 3's): layers by class, calls by inbound_nodes.

        >>> import gputape.tf as tf
        >>> x = tf.keras.Input(shape=(2,), name="x")
        >>> m = tf.keras.Model(x, tf.keras.layers.Dense(3)(x))
        >>> tf.keras.Model.from_config(m.get_config())(tf.ones((4, 2))).shape
        (4, 3)
        """
        from ...nn.saving import deserialize

        made: dict[str, _Any] = {}  # layer name -> layer
        outputs: dict[tuple[str, int], list[_Any]] = {}  # (layer name, node index) -> its flat outputs
        pending: list[tuple[str, list[_Any]]] = []
        for entry in config["layers"]:
            layer = deserialize(entry, custom_objects)
            name = entry.get("name", layer.name)
            made[name] = layer
            if isinstance(layer, _InputLayer):
                outputs[(name, 0)] = [layer.output]
            pending.append((name, list(entry.get("inbound_nodes", []))))

        def is_history(h: _Any) -> bool:
            return isinstance(h, list) and len(h) == 3 and isinstance(h[0], str) and isinstance(h[1], int)

        def resolve(h: list[_Any]) -> _Any:
            found = outputs.get((h[0], h[1]))
            if found is None:
                raise LookupError(h)
            return found[h[2]]

        def value(v: _Any) -> _Any:
            if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
                return resolve(v["config"]["keras_history"])
            if isinstance(v, dict):
                return {k: value(i) for k, i in v.items()}
            if isinstance(v, list):
                return [value(i) for i in v]
            return v

        done_nodes: dict[str, int] = {}
        while any(nodes for _, nodes in pending):
            progress = False
            for name, nodes in pending:
                while nodes:
                    try:
                        args = value(nodes[0].get("args", []))
                        kwargs = value(nodes[0].get("kwargs", {}))
                    except LookupError:
                        break  # an input of this call is made later: come back to it
                    out = made[name](*args, **_call_kwargs(made[name], kwargs))
                    k = done_nodes.get(name, 0)
                    outputs[(name, k)] = _flatten(out)
                    done_nodes[name] = k + 1
                    nodes.pop(0)
                    progress = True
            if not progress:
                stuck = [n for n, left in pending if left]
                raise ValueError(
                    f"load_model: the functional config's calls of {stuck} wait for tensors no layer makes (a cycle "
                    "or a missing layer); the config is damaged"
                )

        def ends(struct: _Any) -> _Any:
            if is_history(struct):
                return resolve(struct)
            if isinstance(struct, dict):
                return {k: ends(v) for k, v in struct.items()}
            got = [ends(v) for v in struct]
            return got[0] if len(got) == 1 else got

        extra = {k: v for k, v in config.items() if k in ("name", "trainable")}
        return cls(ends(config["input_layers"]), ends(config["output_layers"]), **extra)


def _call_kwargs(layer: _Any, kwargs: dict[str, _Any]) -> dict[str, _Any]:
    # Keras records the arguments its layers take implicitly (mask=None); a layer here without them ignores them
    import inspect

    params = inspect.signature(layer.call).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params or v is not None}


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

_register(_InputLayer)
_register(Functional, "keras.src.models.functional", registered="Functional")
_register(Sequential, "keras")

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
