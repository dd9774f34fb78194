"""Keras-style layers on :class:`gt.Module`: ``Dense``, ``Dropout``, ``Flatten``, ``Sequential``.

A layer creates its Variables on the first call, when it knows the input's
size (``build``), on the input's device. Every layer's ``__call__`` accepts
``training=``; it is passed on to ``call`` when ``call`` takes it.

>>> import gputape as gt, numpy as np
>>> gt.random.seed(0)
>>> model = gt.nn.Sequential([gt.nn.Dense(8, activation="relu"), gt.nn.Dropout(0.5), gt.nn.Dense(3)])
>>> x = np.ones((4, 5), "float32")
>>> model(x, training=True).shape
(4, 3)
>>> [path for path, v in model.named_variables()]
['layers/0/kernel', 'layers/0/bias', 'layers/2/kernel', 'layers/2/bias']
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import backend
from .. import random as _random
from .. import tape as _tape
from ..device import current_device
from ..module import _SKIP as _SKIP_ATTRS
from ..module import Module, _leaves, _snake
from ..ops import cast, concatenate, matmul, reshape, sqrt, square, take
from ..ops import mean as _mean
from ..tensor import FLOAT_DTYPES, Tensor, TensorShape, Variable, _wrap, as_tensor, constant
from . import activations, initializers
from .training import Trainer, _flatten, _map

__all__ = [
    "Activation",
    "Add",
    "BatchNormalization",
    "Concatenate",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "KerasTensor",
    "Lambda",
    "Layer",
    "LayerNormalization",
    "Reshape",
    "Sequential",
]

_name_counts: dict[str, itertools.count] = {}


def _unique_name(base: str) -> str:
    # Keras' scheme: 'dense', 'dense_1', 'dense_2', ... per process.
    n = next(_name_counts.setdefault(base, itertools.count()))
    return base if n == 0 else f"{base}_{n}"


@functools.cache
def _takes_training(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "training" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _call_layer(layer: Any, x: Any, training: bool | None, args: tuple = (), kwargs: dict | None = None) -> Any:
    if isinstance(layer, Layer):
        return layer(x, *args, training=training, **kwargs) if args or kwargs else layer(x, training=training)
    kwargs = kwargs or {}
    fn = layer.__call__ if isinstance(layer, Module) else layer
    target = getattr(fn, "__func__", fn)
    return fn(x, *args, training=training, **kwargs) if _takes_training(target) else fn(x, *args, **kwargs)


def _shape_of(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def _input_shape(x: Any) -> Any:
    # a merge layer (Concatenate, Add) builds from the list of its inputs' shapes
    return [_shape_of(i) for i in x] if isinstance(x, (list, tuple)) else _shape_of(x)


def _set_trainable(v: Variable, flag: bool) -> None:
    # Keras 3 flips its variables' `trainable` when a layer is frozen; gt.Variable keeps the flag
    # in a slot that only layers change (it decides what a tape watches automatically).
    v._trainable = flag


def _first(v: Variable, seen: set[int]) -> bool:
    if id(v) in seen:
        return False
    seen.add(id(v))
    return True


class _CallDepth(threading.local):
    depth = 0  # > 0 while a layer's call runs: only the outermost call clears add_loss terms
    losses_used = False  # no add_loss yet in this thread: nothing to clear, skip the model walk


_CALLS = _CallDepth()


class Layer(Module):
    """Base class for layers in Keras 3's shape: lazy ``build(input_shape)``, then ``call(inputs, training=...)``.

    Subclass it and define ``call`` (and ``build`` when the layer has weights
    that depend on the input's size; ``built`` turns true after it, however
    it is called). A layer with a ``dtype`` casts floating inputs to it, as
    Keras does, so float64 numpy data meets float32 weights without silently
    promoting the whole model to float64.

    Unlike a plain :class:`gt.Module` (``tf.Module``: tuples, attributes
    sorted by name), a layer lists its weights as Keras does: lists, its own
    weights first (trainable ones, then the others, each in creation order),
    then each sub-layer's in the order they were assigned. ``trainable`` is
    settable and recursive: ``layer.trainable = False`` makes the weights of
    the layer and of every sub-layer non-trainable (so tapes stop watching
    them and ``trainable_weights`` leaves them out) until it is set back.

    >>> import gputape as gt
    >>> class Scale(gt.nn.Layer):
    ...     def build(self, input_shape):
    ...         self.s = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="s")
    ...     def call(self, x, training=None):
    ...         return x * self.s if training else x
    >>> layer = Scale()
    >>> layer(gt.constant([[2.0, 3.0]]), training=True).numpy().tolist(), layer.built
    ([[2.0, 3.0]], True)
    >>> layer.trainable = False
    >>> len(layer.trainable_weights), len(layer.non_trainable_weights), layer.s.trainable
    (0, 1, False)
    """

    _sorted_walk = False  # Keras tracks attributes in assignment order

    def __init__(self, name: str | None = None, dtype: Any = None, trainable: bool = True, **kwargs: Any) -> None:
        input_shape = kwargs.pop("input_shape", None)
        input_dim = kwargs.pop("input_dim", None)
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unexpected keyword arguments {sorted(kwargs)}")
        super().__init__(name if name is not None else _unique_name(_snake(type(self).__name__)))
        self.dtype = np.dtype(dtype) if dtype is not None else None
        self._trainable = bool(trainable)
        self._frozen: set[int] = set()  # ids of own weights this layer made non-trainable
        self._losses: list[Any] = []
        self.built = False
        if input_dim is not None:
            input_shape = (input_dim,)
        if input_shape is not None:  # Keras' first-layer spelling: build now
            self._build_once((None, *tuple(input_shape)), current_device())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # As Keras' build wrapper: a layer is built once its build() returned, whoever called it.
        super().__init_subclass__(**kwargs)
        build = cls.__dict__.get("build")
        if build is not None and not getattr(build, "_sets_built", False):

            @functools.wraps(build)
            def wrapped(self: Layer, *args: Any, **kw: Any) -> Any:
                out = build(self, *args, **kw)
                self.built = True
                return out

            wrapped._sets_built = True  # type: ignore[attr-defined]
            cls.build = wrapped  # type: ignore[method-assign]

    # -- building ------------------------------------------------------------------
    def build(self, input_shape: tuple[int | None, ...]) -> None:
        """Create the layer's Variables for inputs of ``input_shape`` (default: none).

        >>> import gputape as gt
        >>> d = gt.nn.Dense(2)
        >>> d.build((None, 3)); d.kernel.shape, d.built
        ((3, 2), True)
        """
        self.built = True

    def _build_once(self, input_shape: tuple[int | None, ...], device: str) -> None:
        self._device = device
        self.build(input_shape)
        self.built = True

    def add_weight(
        self,
        *args: Any,
        shape: Any = None,
        initializer: Any = None,
        dtype: Any = None,
        trainable: bool = True,
        name: str | None = None,
        **kwargs: Any,
    ) -> Variable:
        """Make a Variable on the layer's device (used in ``build``), named ``'<layer>/<name>'``.

        Keras 3's call ``add_weight(shape, initializer, dtype, trainable=..., name=...)``;
        TensorFlow 2's ``add_weight(name, shape, ...)`` with the name first works too.
        ``initializer`` is a Keras name (``'glorot_uniform'`` for floats by
        default, ``'zeros'`` otherwise) or a callable ``(shape, dtype)``.

        >>> import gputape as gt
        >>> v = gt.nn.Layer(name="l").add_weight(shape=(2,), initializer="zeros", name="w")
        >>> v.name, v.numpy().tolist(), gt.nn.Layer(name="l2").add_weight((1,)).name
        ('l/w', [0.0, 0.0], 'l2/variable')
        """
        if args and isinstance(args[0], str):  # TensorFlow 2's add_weight(name, shape, ...)
            if name is not None:
                raise TypeError("add_weight: name given both positionally and as name=")
            name, args = args[0], args[1:]
        if len(args) > 3:
            raise TypeError(f"add_weight: at most shape, initializer and dtype go by position, got {len(args)}")
        given = dict(zip(("shape", "initializer", "dtype"), args))
        keywords = {"shape": shape, "initializer": initializer, "dtype": dtype}
        for k in given:
            if keywords[k] is not None:
                raise TypeError(f"add_weight: {k} given both positionally and as {k}=")
        shape = given.get("shape", shape)
        initializer = given.get("initializer", initializer)
        dtype = given.get("dtype", dtype)
        unknown = set(kwargs) - {"regularizer", "constraint", "autocast", "aggregation", "synchronization"}
        if unknown:
            raise TypeError(f"add_weight: unexpected keyword arguments {sorted(unknown)}")
        for k in ("regularizer", "constraint"):
            if kwargs.get(k) is not None:
                raise NotImplementedError(f"add_weight: {k}= is not supported; add the penalty with self.add_loss()")
        dt = np.dtype(dtype or self.dtype or np.float32)
        if initializer is None:
            initializer = "glorot_uniform" if dt.kind == "f" else "zeros"
        shape = () if shape is None else shape
        value = np.asarray(initializers.get(initializer)(shape, dt), dt)
        device = getattr(self, "_device", None) or current_device()
        if device != "cpu":
            value = backend.asarray_on(value, device)
        v = Variable(value, trainable=trainable, name=f"{self.name}/{name or 'variable'}")
        if trainable and not self.trainable:
            _set_trainable(v, False)
            self._frozen.add(id(v))
        return v

    # -- weights, in Keras' order ----------------------------------------------------------
    def _parts(self, seen: set[int] | None = None) -> tuple[list[Variable], list[Module]]:
        """This layer's own Variables and its direct sub-modules, in assignment order, none in ``seen``."""
        own: list[Variable] = []
        subs: list[Module] = []
        seen = {id(self)} if seen is None else seen  # each object once, whatever holds it twice
        for key, value in vars(self).items():
            if type(value) is Variable:  # the common case first: this runs on every trainable_variables read
                if id(value) not in seen:
                    seen.add(id(value))
                    own.append(value)
            elif isinstance(value, (Module, list, tuple, dict)) and key not in _SKIP_ATTRS:
                for _, leaf in _leaves(value, key, seen, False):
                    (own if isinstance(leaf, Variable) else subs).append(leaf)
        return own, subs

    def _collect(self, seen: set[int]) -> list[Variable]:
        """Keras' order; ``seen`` holds the ids of the variables and layers already listed (cycles end)."""
        own, subs = self._parts(seen)
        frozen = self.__dict__.get("_frozen")
        first = [v for v in own if v.trainable or id(v) in frozen] if frozen else [v for v in own if v.trainable]
        if len(first) != len(own):  # created trainable first, then the rest, as Keras lists them
            ids = {id(v) for v in first}
            first += [v for v in own if id(v) not in ids]
        for sub in subs:
            first += sub._collect(seen) if isinstance(sub, Layer) else [v for v in sub.variables if _first(v, seen)]
        return first

    @property
    def weights(self) -> list[Variable]:
        """All weights: own (trainable first, in creation order), then each sub-layer's; each once.

        >>> import gputape as gt
        >>> bn = gt.nn.BatchNormalization(); bn.build((None, 2))
        >>> [v.name.split("/")[-1] for v in bn.weights]
        ['gamma', 'beta', 'moving_mean', 'moving_variance']
        """
        return self._collect({id(self)})

    @property
    def variables(self) -> list[Variable]:  # type: ignore[override]
        """The same list as ``weights`` (Keras adds only seed and metric state here; gputape has none).

        >>> import gputape as gt
        >>> len(gt.nn.Dense(2, input_shape=(3,)).variables)
        2
        """
        return self.weights

    @property
    def trainable_weights(self) -> list[Variable]:
        """The weights an optimizer should update: none when the layer is frozen.

        >>> import gputape as gt
        >>> d = gt.nn.Dense(2, input_shape=(3,)); d.trainable = False; d.trainable_weights
        []
        """
        return [v for v in self.weights if v.trainable] if self.trainable else []

    @property
    def non_trainable_weights(self) -> list[Variable]:
        """Statistics, counters and the weights of frozen layers.

        >>> import gputape as gt
        >>> bn = gt.nn.BatchNormalization(); bn.build((None, 2)); len(bn.non_trainable_weights)
        2
        """
        return [v for v in self.weights if not v.trainable] if self.trainable else self.weights

    @property
    def trainable_variables(self) -> list[Variable]:  # type: ignore[override]
        """Same as ``trainable_weights``.

        >>> import gputape as gt
        >>> [v.shape for v in gt.nn.Dense(2, input_shape=(3,)).trainable_variables]
        [(3, 2), (2,)]
        """
        return self.trainable_weights

    @property
    def non_trainable_variables(self) -> list[Variable]:  # type: ignore[override]
        """Same as ``non_trainable_weights``.

        >>> import gputape as gt
        >>> gt.nn.Dense(2, input_shape=(3,)).non_trainable_variables
        []
        """
        return self.non_trainable_weights

    @property
    def submodules(self) -> tuple[Module, ...]:
        """Every module reachable from this layer, direct ones first.

        >>> import gputape as gt
        >>> [m.name for m in gt.nn.Sequential([gt.nn.Dense(1, name="a"), gt.nn.Dense(1, name="b")]).submodules]
        ['a', 'b']
        """
        return super().submodules

    def _sublayers(self) -> list[Layer]:
        return [m for m in self.submodules if isinstance(m, Layer)]

    @property
    def trainable(self) -> bool:
        """Whether the optimizer should update this layer; setting it applies to every sub-layer too.

        >>> import gputape as gt
        >>> m = gt.nn.Sequential([gt.nn.Dense(2), gt.nn.Dense(1)]); m.build((None, 3))
        >>> m.layers[0].trainable = False
        >>> len(m.trainable_weights), len(m.non_trainable_weights)
        (2, 2)
        >>> m.trainable = False; m.trainable = True; len(m.trainable_weights)
        4
        """
        return getattr(self, "_trainable", True)

    @trainable.setter
    def trainable(self, value: bool) -> None:
        value = bool(value)
        for layer in (self, *self._sublayers()):
            layer._set_own_trainable(value)

    def _set_own_trainable(self, value: bool) -> None:
        self._trainable = value
        frozen = self.__dict__.setdefault("_frozen", set())
        own, subs = self._parts()
        own += [v for m in subs if not isinstance(m, Layer) for v in m.variables]
        for v in own:
            if not value and v.trainable:
                _set_trainable(v, False)
                frozen.add(id(v))
            elif value and id(v) in frozen:
                _set_trainable(v, True)
        if value:
            frozen.clear()

    def count_params(self) -> int:
        """The number of scalars in all weights (the layer must be built).

        >>> import gputape as gt
        >>> gt.nn.Dense(4, input_shape=(3,)).count_params()
        16
        """
        if not self.built:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: count_params() needs a built layer; call it on a batch "
                "or call layer.build((None, features)) first"
            )
        return int(sum(v.size for v in self.weights))

    # -- losses --------------------------------------------------------------------------
    def add_loss(self, loss: Any) -> None:
        """Record an extra loss term (a regularisation penalty) computed in ``call``; see ``losses``.

        The list is cleared when the outermost layer is called again, as in Keras.

        >>> import gputape as gt
        >>> class Penalised(gt.nn.Layer):
        ...     def call(self, x):
        ...         self.add_loss(0.5 * gt.sum(x * x))
        ...         return x
        >>> layer = Penalised(); _ = layer(gt.constant([1.0, 2.0]))
        >>> [float(v) for v in layer.losses]
        [2.5]
        """
        self.__dict__.setdefault("_losses", []).append(loss)
        _CALLS.losses_used = True

    @property
    def losses(self) -> list[Any]:
        """The terms ``add_loss`` recorded during the last call, this layer's first, then its sub-layers'.

        >>> import gputape as gt
        >>> gt.nn.Dense(1).losses
        []
        """
        out = list(getattr(self, "_losses", ()))
        for layer in self._sublayers():
            out += getattr(layer, "_losses", ())
        return out

    def _clear_losses(self) -> None:
        for layer in (self, *self._sublayers()):
            layer.__dict__["_losses"] = []

    # -- config, summary, weights files -----------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The layer's constructor arguments, as Keras' ``get_config`` (``name``, ``trainable``, ``dtype`` and its own).

        >>> import gputape as gt
        >>> gt.nn.Dense(3, activation="relu", name="fc").get_config()["units"]
        3
        """
        cfg = {"name": self.name, "trainable": self.trainable, "dtype": str(self.dtype or np.dtype("float32"))}
        return {**cfg, **self._config()}

    def _config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        """A new layer from ``get_config()``'s dict (``cls(**config)``, as Keras).

        >>> import gputape as gt
        >>> gt.nn.Dense.from_config(gt.nn.Dense(5, name="d5").get_config()).units
        5
        """
        return cls(**config)

    def get_weights(self) -> list[np.ndarray]:
        """The weights' values as host numpy arrays, in ``weights`` order.

        >>> import gputape as gt
        >>> [w.shape for w in gt.nn.Dense(2, input_shape=(3,)).get_weights()]
        [(3, 2), (2,)]
        """
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights: Iterable[Any]) -> None:
        """Assign values to the weights, in ``weights`` order (count and shapes must match).

        >>> import gputape as gt, numpy as np
        >>> d = gt.nn.Dense(1, input_shape=(1,)); d.set_weights([np.full((1, 1), 2.0), np.zeros(1)])
        >>> d(np.array([[3.0]])).numpy().tolist()
        [[6.0]]
        """
        values = list(weights)
        mine = self.weights
        if len(values) != len(mine):
            raise ValueError(
                f"{type(self).__name__} {self.name!r}.set_weights: the layer has {len(mine)} weights, got {len(values)}"
            )
        for v, value in zip(mine, values):
            if tuple(np.shape(value)) != tuple(v.shape):
                raise ValueError(
                    f"{type(self).__name__} {self.name!r}.set_weights: weight {v.name!r} has shape {v.shape}, "
                    f"got {np.shape(value)}"
                )
        for v, value in zip(mine, values):
            v.assign(np.asarray(value))

    def summary(self, line_length: int | None = None, print_fn: Callable[[str], Any] | None = None) -> None:
        """Print Keras 3's table: each layer with its type, output shape and parameter count, then the totals.

        Output shapes are those of the last call (``?`` before the first one),
        with the batch dimension shown as ``None``.

        >>> import gputape as gt, numpy as np
        >>> m = gt.nn.Sequential([gt.nn.Dense(4, name="hidden"), gt.nn.Dense(1, name="out")], name="mlp")
        >>> _ = m(np.zeros((2, 3), "float32"))
        >>> m.summary()
        Model: "mlp"
        ┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┓
        ┃ Layer (type)                    ┃ Output Shape           ┃       Param # ┃
        ┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━┩
        │ hidden (Dense)                  │ (None, 4)              │            16 │
        ├─────────────────────────────────┼────────────────────────┼───────────────┤
        │ out (Dense)                     │ (None, 1)              │             5 │
        └─────────────────────────────────┴────────────────────────┴───────────────┘
         Total params: 21 (84.00 B)
         Trainable params: 21 (84.00 B)
         Non-trainable params: 0 (0.00 B)
        """
        (print_fn or print)(_summary_text(self, line_length))

    def save_weights(self, filepath: Any) -> None:
        """Write every weight to ``filepath`` in gputape's checkpoint format (``gt.save``: a pickle-free ``.npz``).

        >>> import gputape as gt, numpy as np, tempfile, os
        >>> a, b = gt.nn.Dense(2, input_shape=(3,)), gt.nn.Dense(2, input_shape=(3,))
        >>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
        >>> a.save_weights(path); b.load_weights(path)
        >>> bool(np.array_equal(a.kernel.numpy(), b.kernel.numpy()))
        True
        """
        from ..checkpoint import save

        save(filepath, self)

    def load_weights(self, filepath: Any) -> None:
        """Read weights that ``save_weights`` wrote (the layer must be built with the same shapes).

        >>> import gputape as gt
        >>> gt.nn.Dense(1).load_weights  # doctest: +ELLIPSIS
        <bound method Layer.load_weights of ...>
        """
        from ..checkpoint import load

        load(filepath, into=self)

    # -- calling ---------------------------------------------------------------------
    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """The layer's computation; subclasses override it (``__call__`` builds first, then calls it).

        >>> import gputape as gt
        >>> class Double(gt.nn.Layer):
        ...     def call(self, x):
        ...         return x * 2
        >>> Double()(gt.constant([1.0])).numpy().tolist()
        [2.0]
        """
        raise NotImplementedError(f"{type(self).__name__} must define call(self, inputs, training=None)")

    def __call__(self, inputs: Any, *args: Any, training: bool | None = None, **kwargs: Any) -> Any:
        if not isinstance(inputs, Tensor) and _is_symbolic(inputs):  # functional API: build, return symbolic
            return _symbolic_call(self, inputs, args, kwargs)
        if isinstance(inputs, np.ndarray):
            # Host data meets weights on the layer's device (a GPU needs device arrays).
            dev = getattr(self, "_device", None) or current_device()
            cast_to = self.dtype if self.dtype is not None and inputs.dtype.kind == "f" else None
            inputs = constant(inputs, dtype=cast_to, device=dev)
        if not self.built:
            device = inputs.device if isinstance(inputs, Tensor) else current_device()
            self._build_once(_input_shape(inputs), device)
        if self.dtype is not None:
            inputs = self._autocast(inputs)
        if _takes_training(type(self).call):
            kwargs["training"] = training
        calls = _CALLS
        if calls.losses_used:  # some layer uses add_loss: the outermost call clears the last call's terms
            if not calls.depth:
                self._clear_losses()
            calls.depth += 1
            try:
                out = self.call(inputs, *args, **kwargs)
            finally:
                calls.depth -= 1
        else:
            out = self.call(inputs, *args, **kwargs)
        if "_output_shape" not in self.__dict__:  # for summary(); the first call's shape is enough
            self._output_shape = tuple(out.shape) if hasattr(out, "shape") else None
        return out

    def _autocast(self, x: Any) -> Any:
        if isinstance(x, Tensor):
            return cast(x, self.dtype) if x.dtype in FLOAT_DTYPES and x.dtype != self.dtype else x
        if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype != self.dtype:
            return x.astype(self.dtype)
        if isinstance(x, (list, tuple)):  # a merge layer's inputs
            return type(x)(self._autocast(i) for i in x)
        return x

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        built = f"{self.count_params():,} params" if self.built else "not built"
        return f"<{type(self).__name__} {self.name!r}{', ' + cfg if cfg else ''}; {built}>"


class Dense(Layer):
    """A fully connected layer: ``activation(inputs @ kernel + bias)``.

    The kernel, of shape ``(inputs.shape[-1], units)``, is created on the first
    call. ``activation`` is a name (``'relu'``, ``'softmax'`` ...), a callable or
    None; initializers are names (``'glorot_uniform'``, ``'he_normal'``,
    ``'zeros'`` ...) or callables ``(shape, dtype) -> array``. ``dtype`` is the
    weights' dtype (float32 by default); floating inputs are cast to it.

    >>> import gputape as gt, numpy as np
    >>> layer = gt.nn.Dense(2, activation="relu", kernel_initializer="ones", name="fc")
    >>> layer(np.array([[1.0, -2.0, 4.0]])).numpy().tolist()
    [[3.0, 3.0]]
    >>> [(p, v.name, v.shape) for p, v in layer.named_variables()]
    [('kernel', 'fc/kernel', (3, 2)), ('bias', 'fc/bias', (2,))]
    """

    def __init__(
        self,
        units: int,
        activation: str | Callable[[Any], Any] | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        name: str | None = None,
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        if int(units) <= 0:
            raise ValueError(f"Dense: units must be a positive integer, got {units!r}")
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        super().__init__(name=name, dtype=dtype, **kwargs)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        if not input_shape or input_shape[-1] is None:
            raise ValueError(f"Dense {self.name!r}: the last input dimension must be known, got shape {input_shape}")
        self.kernel = self.add_weight("kernel", (int(input_shape[-1]), self.units), self.kernel_initializer)
        self.bias = self.add_weight("bias", (self.units,), self.bias_initializer) if self.use_bias else None

    def _config(self) -> dict[str, Any]:
        return {"units": self.units, "activation": _fn_name(self.activation), "use_bias": self.use_bias}

    def call(self, inputs: Any) -> Any:
        if _shape_of(inputs)[-1:] != self.kernel.shape[:1]:
            raise ValueError(
                f"Dense {self.name!r}: built for inputs with last dimension {self.kernel.shape[0]}, "
                f"got shape {_shape_of(inputs)}"
            )
        y = matmul(inputs, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)


class Dropout(Layer):
    """Zero a fraction ``rate`` of the inputs and scale the rest by ``1 / (1 - rate)``, when training.

    With ``training`` false or None (the default, as outside Keras' ``fit``)
    the input passes through unchanged. The mask comes from ``gt.random``'s
    generator, or from a generator of the layer's own when ``seed`` is given.

    >>> import gputape as gt, numpy as np
    >>> drop = gt.nn.Dropout(0.5, seed=0)
    >>> x = np.ones((1, 6), "float32")
    >>> drop(x).numpy().tolist() == x.tolist()
    True
    >>> sorted(set(drop(x, training=True).numpy().ravel().tolist()))
    [0.0, 2.0]
    """

    def __init__(self, rate: float, seed: int | None = None, name: str | None = None, **kwargs: Any) -> None:
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"Dropout: rate must be in [0, 1), got {rate!r}")
        self.rate = float(rate)
        self._seed = seed
        self._rng = np.random.default_rng(seed) if seed is not None else None
        super().__init__(name=name, **kwargs)

    def _config(self) -> dict[str, Any]:
        return {"rate": self.rate, "seed": self._seed}

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        x = as_tensor(inputs)
        if not training or self.rate == 0.0:
            return x
        dtype = x.dtype if x.dtype in FLOAT_DTYPES else np.dtype(np.float32)
        mask = self._mask(x.shape, dtype, x.device)
        # a gt.function replay draws a fresh mask every call
        _tape.traced(self._mask, (x.shape, dtype, x.device), mask)
        return x * _wrap(mask)

    def _mask(self, shape: tuple, dtype: Any, device: str) -> Any:
        rng = self._rng if self._rng is not None else _random.generator()
        mask = (rng.random(shape) >= self.rate).astype(dtype) * dtype.type(1.0 / (1.0 - self.rate))
        return mask if device == "cpu" else backend.asarray_on(mask, device)


class Flatten(Layer):
    """Reshape ``(batch, d1, d2, ...)`` inputs to ``(batch, d1 * d2 * ...)``.

    >>> import gputape as gt, numpy as np
    >>> gt.nn.Flatten()(np.zeros((2, 3, 4))).shape
    (2, 12)
    """

    def call(self, inputs: Any) -> Any:
        shape = _shape_of(inputs)
        return reshape(inputs, (shape[0], -1) if shape else (1, -1))


class Lambda(Layer):
    """Wrap a function of tensors as a layer (so the functional API can use it).

    >>> import gputape as gt
    >>> gt.nn.Lambda(lambda x: x * 2)(gt.constant([1.0])).numpy().tolist()
    [2.0]
    """

    def __init__(self, function: Callable[..., Any], **kwargs: Any) -> None:
        if not callable(function):
            raise TypeError(f"{type(self).__name__}: function must be callable, got {type(function).__name__}")
        self.function = function
        super().__init__(**kwargs)

    def _config(self) -> dict[str, Any]:
        return {"function": _fn_name(self.function)}

    def call(self, inputs: Any) -> Any:
        return self.function(inputs)


class Activation(Lambda):
    """Apply an activation (a Keras name or a callable) as a layer.

    >>> import gputape as gt
    >>> gt.nn.Activation("relu")(gt.constant([-1.0, 1.0])).numpy().tolist()
    [0.0, 1.0]
    """

    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(activations.get(activation), **kwargs)

    @property
    def activation(self) -> Callable[[Any], Any]:
        return self.function

    def _config(self) -> dict[str, Any]:
        return {"activation": _fn_name(self.function)}


class Reshape(Layer):
    """Reshape each example to ``target_shape`` (the batch dimension is kept; one ``-1`` is allowed).

    >>> import gputape as gt, numpy as np
    >>> gt.nn.Reshape((3, -1))(np.zeros((2, 12), "float32")).shape
    (2, 3, 4)
    """

    def __init__(self, target_shape: Any, **kwargs: Any) -> None:
        self.target_shape = tuple(int(d) for d in target_shape)
        if sum(d == -1 for d in self.target_shape) > 1 or any(d < -1 or d == 0 for d in self.target_shape):
            raise ValueError(f"Reshape: target_shape must be positive sizes and at most one -1, got {target_shape!r}")
        super().__init__(**kwargs)

    def _config(self) -> dict[str, Any]:
        return {"target_shape": self.target_shape}

    def call(self, inputs: Any) -> Any:
        shape = _shape_of(inputs)
        per, known = int(np.prod(shape[1:])), int(np.prod([d for d in self.target_shape if d != -1]))
        if (per % known if -1 in self.target_shape else per != known) if known else True:
            raise ValueError(
                f"Reshape {self.name!r}: cannot reshape examples of shape {tuple(shape[1:])} ({per} values) to "
                f"{self.target_shape}"
            )
        return reshape(inputs, (shape[0], *self.target_shape))


def _check_merge_inputs(layer: Layer, inputs: Any) -> list[Any]:
    if not isinstance(inputs, (list, tuple)) or len(inputs) < 1:
        raise ValueError(
            f"{type(layer).__name__} {layer.name!r}: call it on a list of tensors, got {type(inputs).__name__}"
        )
    return list(inputs)


class Concatenate(Layer):
    """Join a list of inputs along ``axis`` (default: the last one).

    >>> import gputape as gt
    >>> gt.nn.Concatenate()([gt.zeros((2, 1)), gt.ones((2, 3))]).shape
    (2, 4)
    """

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        self.axis = int(axis)
        super().__init__(**kwargs)

    def _config(self) -> dict[str, Any]:
        return {"axis": self.axis}

    def call(self, inputs: Any) -> Any:
        xs = _check_merge_inputs(self, inputs)
        shapes = [_shape_of(x) for x in xs]
        rank = len(shapes[0])
        ax = self.axis % rank if rank else 0
        if any(len(s) != rank or s[:ax] + s[ax + 1 :] != shapes[0][:ax] + shapes[0][ax + 1 :] for s in shapes):
            raise ValueError(
                f"Concatenate {self.name!r}: inputs must have equal shapes except along axis {self.axis}, got {shapes}"
            )
        return concatenate(xs, axis=ax)


class Add(Layer):
    """Sum a list of inputs elementwise (shapes that broadcast, as Keras' merge layers allow).

    >>> import gputape as gt
    >>> gt.nn.Add()([gt.ones((2, 2)), gt.ones((2, 2)), gt.ones((2, 2))]).numpy().tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """

    def call(self, inputs: Any) -> Any:
        xs = _check_merge_inputs(self, inputs)
        try:
            np.broadcast_shapes(*(_shape_of(x) for x in xs))
        except ValueError:
            raise ValueError(
                f"Add {self.name!r}: input shapes {[_shape_of(x) for x in xs]} do not broadcast together"
            ) from None
        out = as_tensor(xs[0])
        for x in xs[1:]:
            out = out + x
        return out


class Embedding(Layer):
    """Look up rows of an ``(input_dim, output_dim)`` table by integer ids (Keras' ``Embedding``).

    The table starts uniform in ``[-0.05, 0.05]`` (Keras' ``'uniform'``); its
    gradient is the sum of the incoming rows at each id. Ids must lie in
    ``[0, input_dim)``: checked on the CPU (a GPU, as TensorFlow's, does not check).

    >>> import gputape as gt, numpy as np
    >>> emb = gt.nn.Embedding(10, 3, embeddings_initializer="ones")
    >>> emb(np.array([[1, 2], [3, 9]])).shape
    (2, 2, 3)
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        embeddings_initializer: Any = "uniform",
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        if int(input_dim) <= 0 or int(output_dim) <= 0:
            raise ValueError(f"Embedding: input_dim and output_dim must be positive, got {input_dim}, {output_dim}")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = initializers.get(embeddings_initializer)
        super().__init__(dtype=dtype, **kwargs)

    def _config(self) -> dict[str, Any]:
        return {"input_dim": self.input_dim, "output_dim": self.output_dim}

    def build(self, input_shape: Any = None) -> None:
        self.embeddings = self.add_weight(
            shape=(self.input_dim, self.output_dim), initializer=self.embeddings_initializer, name="embeddings"
        )

    def _autocast(self, x: Any) -> Any:
        return x  # ids stay integers

    def call(self, inputs: Any) -> Any:
        ids = inputs._data if isinstance(inputs, Tensor) else np.asarray(inputs)
        if ids.dtype.kind not in "iu":
            if ids.dtype.kind == "f" and backend.xp_of(ids) is np and np.array_equal(ids, np.round(ids)):
                ids = ids.astype(np.int64)  # Keras casts float-typed ids
            else:
                raise TypeError(f"Embedding {self.name!r}: ids must be integers, got dtype {ids.dtype}")
        if backend.xp_of(ids) is np and ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.input_dim):
            raise ValueError(
                f"Embedding {self.name!r}: ids must be in [0, {self.input_dim}), got values from {int(ids.min())} "
                f"to {int(ids.max())}"
            )
        return take(self.embeddings, ids, axis=0)


def _moments_axes(layer: Layer, shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    rank = len(shape)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if not rank or any(not -rank <= a < rank for a in axes):
        raise ValueError(
            f"{type(layer).__name__} {layer.name!r}: axis {axis} is out of range for inputs of shape {shape}"
        )
    return tuple(sorted(a % rank for a in axes))


def _add_gamma_beta(layer: Any, shape: tuple[int, ...]) -> None:
    # the normalisation layers' learned scale and offset (absent with scale=False / center=False)
    layer.gamma = layer.add_weight(shape=shape, initializer=layer._inits[0], name="gamma") if layer.scale else None
    layer.beta = layer.add_weight(shape=shape, initializer=layer._inits[1], name="beta") if layer.center else None


def _scale_shift(layer: Any, y: Any, bshape: tuple[int, ...]) -> Any:
    if layer.gamma is not None:
        y = y * reshape(layer.gamma, bshape)
    if layer.beta is not None:
        y = y + reshape(layer.beta, bshape)
    return y


class BatchNormalization(Layer):
    """Normalise each feature over the batch (Keras 3's ``BatchNormalization``).

    With ``training=True`` (and the layer trainable) it uses the batch's mean
    and (biased) variance and updates the non-trainable moving statistics as
    Keras does: ``moving = moving * momentum + batch * (1 - momentum)``
    (``momentum=0.99``); otherwise it uses the moving statistics. The output is
    ``gamma * (x - mean) / sqrt(var + epsilon) + beta`` (``epsilon=1e-3``).
    A frozen layer (``trainable = False``) always runs in inference mode, as in Keras.

    >>> import gputape as gt, numpy as np
    >>> bn = gt.nn.BatchNormalization(momentum=0.5)
    >>> y = bn(np.array([[0.0], [2.0]], "float32"), training=True)
    >>> y.numpy().astype(float).round(4).ravel().tolist()
    [-0.9995, 0.9995]
    >>> bn.moving_mean.numpy().tolist(), bn.moving_variance.numpy().tolist()
    ([0.5], [1.0])
    """

    def __init__(
        self,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        moving_mean_initializer: Any = "zeros",
        moving_variance_initializer: Any = "ones",
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= float(momentum) <= 1.0 or not float(epsilon) > 0.0:
            raise ValueError(f"BatchNormalization: need 0 <= momentum <= 1 and epsilon > 0, got {momentum}, {epsilon}")
        self.axis, self.momentum, self.epsilon = int(axis), float(momentum), float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self._inits = [initializers.get(i) for i in (gamma_initializer, beta_initializer)]
        self._stat_inits = [initializers.get(i) for i in (moving_mean_initializer, moving_variance_initializer)]
        super().__init__(dtype=dtype, **kwargs)

    def _config(self) -> dict[str, Any]:
        return {"axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon}

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        (ax,) = _moments_axes(self, tuple(input_shape), self.axis)
        if input_shape[ax] is None:
            raise ValueError(f"BatchNormalization {self.name!r}: the size of axis {self.axis} must be known")
        shape = (int(input_shape[ax]),)
        _add_gamma_beta(self, shape)
        self.moving_mean = self.add_weight(
            shape=shape, initializer=self._stat_inits[0], trainable=False, name="moving_mean"
        )
        self.moving_variance = self.add_weight(
            shape=shape, initializer=self._stat_inits[1], trainable=False, name="moving_variance"
        )

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        x = as_tensor(inputs)
        (ax,) = _moments_axes(self, x.shape, self.axis)
        if x.shape[ax] != self.moving_mean.shape[0]:
            raise ValueError(
                f"BatchNormalization {self.name!r}: built for {self.moving_mean.shape[0]} features on axis "
                f"{self.axis}, got inputs of shape {x.shape}"
            )
        red = tuple(i for i in range(x.ndim) if i != ax)
        bshape = tuple(x.shape[ax] if i == ax else 1 for i in range(x.ndim))
        if training and self.trainable:
            mean = _mean(x, axis=red, keepdims=True)
            var = _mean(square(x - mean), axis=red, keepdims=True)
            m = self.momentum
            # the statistics are running averages, not part of the gradient
            self.moving_mean.assign(self.moving_mean * m + reshape(_tape.stop_gradient(mean), (-1,)) * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + reshape(_tape.stop_gradient(var), (-1,)) * (1.0 - m))
        else:
            mean = reshape(self.moving_mean.value(), bshape)
            var = reshape(self.moving_variance.value(), bshape)
        y = (x - mean) / sqrt(var + self.epsilon)
        return _scale_shift(self, y, bshape)


class LayerNormalization(Layer):
    """Normalise each example over ``axis`` (default the last): ``gamma * (x - mean) / sqrt(var + epsilon) + beta``.

    Keras 3's defaults: ``epsilon=1e-3``, ``gamma`` ones and ``beta`` zeros of
    the normalised axes' shape; the variance is the biased one.

    >>> import gputape as gt, numpy as np
    >>> y = gt.nn.LayerNormalization()(np.array([[1.0, 3.0]], "float32"))
    >>> y.numpy().astype(float).round(4).tolist()
    [[-0.9995, 0.9995]]
    """

    def __init__(
        self,
        axis: Any = -1,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        if not float(epsilon) > 0.0:
            raise ValueError(f"LayerNormalization: epsilon must be > 0, got {epsilon}")
        self.axis = axis if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)
        self.epsilon, self.center, self.scale = float(epsilon), bool(center), bool(scale)
        self._inits = [initializers.get(i) for i in (gamma_initializer, beta_initializer)]
        super().__init__(dtype=dtype, **kwargs)

    def _config(self) -> dict[str, Any]:
        return {"axis": self.axis, "epsilon": self.epsilon}

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        axes = _moments_axes(self, tuple(input_shape), self.axis)
        shape = tuple(int(input_shape[a]) for a in axes)
        _add_gamma_beta(self, shape)

    def call(self, inputs: Any) -> Any:
        x = as_tensor(inputs)
        axes = _moments_axes(self, x.shape, self.axis)
        bshape = tuple(x.shape[i] if i in axes else 1 for i in range(x.ndim))
        mean = _mean(x, axis=axes, keepdims=True)
        y = (x - mean) / sqrt(_mean(square(x - mean), axis=axes, keepdims=True) + self.epsilon)
        return _scale_shift(self, y, bshape)


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _readable_bytes(n: float) -> str:
    # Keras' summary_utils.readable_memory_size
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TB"  # unreachable


def _summary_rows(model: Layer) -> list[tuple[str, str, str]]:
    layers = getattr(model, "layers", None)
    entries = list(layers) if isinstance(layers, (list, tuple)) else list(model._parts()[1])
    if not entries:
        entries = [model]
    rows = []
    for e in entries:
        if isinstance(e, Layer):
            shape = getattr(e, "_output_shape", None)
            shown = "?" if shape is None else str((None, *tuple(shape)[1:])) if len(shape) else "()"
            params = f"{e.count_params():,}" if e.built else "0 (unbuilt)"
            rows.append((f"{e.name} ({type(e).__name__})", shown, params))
        elif isinstance(e, Module):
            rows.append((f"{e.name} ({type(e).__name__})", "?", f"{sum(v.size for v in e.variables):,}"))
        else:
            rows.append((f"{_fn_name(e)} (function)", "?", "0"))
    return rows


def _summary_text(model: Layer, line_length: int | None) -> str:
    total = line_length or 76
    widths = [max(14, int(total * 0.44)), max(14, int(total * 0.32))]
    widths.append(max(9, total - 4 - sum(widths)))
    rows = _summary_rows(model)

    def line(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * w for w in widths) + right

    def cells(edge: str, vals: tuple[str, str, str]) -> str:
        parts = [f" {vals[0]:<{widths[0] - 2}} ", f" {vals[1]:<{widths[1] - 2}} ", f" {vals[2]:>{widths[2] - 2}} "]
        return edge + edge.join(parts) + edge

    out = [f'Model: "{model.name}"', line("┏", "┳", "┓", "━"), cells("┃", ("Layer (type)", "Output Shape", "Param #"))]
    out.append(line("┡", "╇", "┩", "━"))
    for i, r in enumerate(rows):
        if i:
            out.append(line("├", "┼", "┤", "─"))
        out.append(cells("│", r))
    out.append(line("└", "┴", "┘", "─"))
    weights = model.weights
    tw = {id(v) for v in model.trainable_weights}

    def count(vs: list[Variable]) -> str:
        return f"{sum(v.size for v in vs):,} ({_readable_bytes(sum(v.nbytes for v in vs))})"

    out.append(f" Total params: {count(weights)}")
    out.append(f" Trainable params: {count([v for v in weights if id(v) in tw])}")
    out.append(f" Non-trainable params: {count([v for v in weights if id(v) not in tw])}")
    return "\n".join(out)


# -- the functional API: symbolic tensors ---------------------------------------------------------


class KerasTensor:
    """A symbolic input or output of the functional API: a shape (``None`` for unknown sizes) and a dtype.

    ``tf.keras.Input(shape=...)`` makes one; calling a layer on it builds the
    layer and returns the symbolic output; ``tf.keras.Model(inputs, outputs)``
    then runs those layers in order on real tensors. It holds no value: gputape
    ops refuse it (wrap the computation in a layer, e.g. ``Lambda``).

    >>> import gputape.tf as tf
    >>> x = tf.keras.Input(shape=(None, 3), name="seq")
    >>> y = tf.keras.layers.Dense(5)(x)
    >>> x, y.shape
    (<KerasTensor shape=(None, None, 3), dtype=float32, name='seq'>, (None, None, 5))
    """

    __array_priority__ = 2000  # numpy hands `array <op> KerasTensor` to __array_ufunc__, which refuses

    def __init__(self, shape: Any, dtype: Any = "float32", name: str | None = None, node: Any = None) -> None:
        self.shape = TensorShape(None if d is None else int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        self._node = node  # the _Node that produced it

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        return f"<KerasTensor shape={tuple(self.shape)}, dtype={self.dtype}{name}>"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"{self!r} is symbolic (functional API): it has no value for gputape ops; compute inside a layer "
            "(tf.keras.layers.Lambda(fn), Add, Concatenate ...) so that the model runs it on real tensors"
        )

    __array__ = __array_ufunc__ = __bool__ = __float__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __matmul__ = _refuse


class _Node:
    """One layer call in a functional graph: the layer, its symbolic inputs (a structure) and outputs."""

    __slots__ = ("args", "inputs", "kwargs", "layer", "outputs")

    def __init__(self, layer: Any, inputs: Any, args: tuple, kwargs: dict) -> None:
        self.layer, self.inputs, self.args, self.kwargs = layer, inputs, args, kwargs
        self.outputs: Any = None


def _is_symbolic(x: Any) -> bool:
    if isinstance(x, KerasTensor):
        return True
    if isinstance(x, (list, tuple)):
        return any(_is_symbolic(i) for i in x)
    if isinstance(x, dict):
        return any(_is_symbolic(i) for i in x.values())
    return False


def _symbolic_call(layer: Layer, inputs: Any, args: tuple, kwargs: dict) -> Any:
    """Build ``layer`` for symbolic ``inputs`` and return symbolic outputs (shapes found by running it)."""
    if _is_symbolic((args, kwargs)):
        raise NotImplementedError(f"{layer.name!r}: symbolic tensors go in the first argument (a list for several)")
    if not layer.built:
        layer._build_once(_map(lambda kt: tuple(kt.shape), inputs), current_device())
    # The output's shape and dtype come from running the layer on zeros twice, with every unknown size
    # set to 2 and then to 3: sizes that follow the input's come out unknown (None). The layer's state
    # (a running statistic, a counter) is put back afterwards, and losses it added are dropped.
    saved = [(v, v.numpy()) for v in layer.weights]
    runs = []
    for fill in (2, 3):
        xs = _map(lambda kt, f=fill: constant(np.zeros([f if d is None else d for d in kt.shape], kt.dtype)), inputs)
        runs.append(_call_layer(layer, xs, False, args, kwargs))
    for v, value in saved:
        v.assign(value)
    layer._clear_losses()
    node = _Node(layer, inputs, args, kwargs)

    def spec(a: Any, b: Any) -> KerasTensor:
        sa, sb = _shape_of(a), _shape_of(b)
        shape = [da if da == db else None for da, db in zip(sa, sb)] if len(sa) == len(sb) else sa
        return KerasTensor(shape, getattr(a, "dtype", np.float32), node=node)

    flat_a, flat_b = _flatten(runs[0]), _flatten(runs[1])
    outs = iter([spec(a, b) for a, b in zip(flat_a, flat_b)])
    node.outputs = _map(lambda _: next(outs), runs[0])
    first = _flatten(node.outputs)[0]
    layer._output_shape = first.shape
    return node.outputs


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
