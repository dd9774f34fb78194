"""The base of every layer: :class:`Layer` (Keras 3's lazy ``build``, weights order, ``trainable``, losses).

A layer creates its Variables on the first call, when it knows the input's
size (``build``), on the input's device. Every layer's ``__call__`` accepts
``training=``; it is passed on to ``call`` when ``call`` takes it.

>>> import gputape as gt
>>> dense = gt.nn.Dense(2)
>>> dense.built, dense(gt.zeros((1, 3))).shape, dense.built, [v.shape for v in dense.weights]
(False, (1, 2), True, [(3, 2), (2,)])
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..core.module import _SKIP as _SKIP_ATTRS
from ..core.module import Module, _leaves, _snake
from ..core.tensor import FLOAT_DTYPES, Tensor, Variable, constant
from ..devices import backend
from ..devices.placement import current_device
from ..ops import cast
from . import constraints, initializers, regularizers
from ._config import constructor_kwargs
from .keras_tensor import _is_symbolic, _shape_of, _symbolic_call
from .summary import _fn_name, _summary_text

__all__ = ["Layer"]

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


def _weights_kind(path: str) -> str:
    # "h5": Keras 3's weights file; "keras": a name Keras gives its own formats (.keras, other .h5), which
    # never holds a gputape checkpoint; "npz": gputape's checkpoint (gt.save picks .npz or .safetensors)
    low = path.lower()
    if low.endswith(".weights.h5"):
        return "h5"
    return "keras" if low.endswith((".h5", ".hdf5", ".keras")) else "npz"


def _remember_build_shape(layer: Any, shape: Any) -> None:
    # Keras' build_config: the shape a saved model is rebuilt with before its weights load
    if "_build_input_shape" not in layer.__dict__:
        layer._build_input_shape = _nest_list(shape)


def _nest_list(shape: Any) -> Any:
    if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (list, tuple)):
        return [_nest_list(s) for s in shape]  # a merge layer's list of input shapes
    return None if shape is None else [None if d is None else int(d) for d in shape]


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
        self.activity_regularizer: Any = regularizers.get(kwargs.pop("activity_regularizer", None))
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
                if args:
                    _remember_build_shape(self, args[0])
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
        _remember_build_shape(self, input_shape)
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
        ``regularizer`` (see :mod:`gputape.nn.regularizers`) adds its penalty of the
        weight to ``losses`` while the weight is trainable; ``constraint`` (see
        :mod:`gputape.nn.constraints`) becomes the Variable's ``constraint``, which
        optimizers apply after each step.
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
        regularizer = regularizers.get(kwargs.get("regularizer"))
        constraint = constraints.get(kwargs.get("constraint"))
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
        if regularizer is not None:
            self.__dict__.setdefault("_weight_regularizers", []).append((v, regularizer))
        if constraint is not None:
            v.constraint = constraint
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

    def _own_weights(self, seen: set[int] | None = None) -> tuple[list[Variable], list[Module]]:
        """This layer's own weights in Keras' order (created trainable first), and its direct sub-modules."""
        own, subs = self._parts(seen)
        frozen = self.__dict__.get("_frozen")
        first = [v for v in own if v.trainable or id(v) in frozen] if frozen else [v for v in own if v.trainable]
        if len(first) != len(own):  # created trainable first, then the rest, as Keras lists them
            ids = {id(v) for v in first}
            first += [v for v in own if id(v) not in ids]
        return first, subs

    def _collect(self, seen: set[int]) -> list[Variable]:
        """Keras' order; ``seen`` holds the ids of the variables and layers already listed (cycles end)."""
        first, subs = self._own_weights(seen)
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
        """Keras 3's list: the ``add_loss`` terms of the last call (this layer's, then its sub-layers'), then
        each trainable weight's regularizer penalty, computed now from the weight's current value.

        Read it inside a GradientTape (as ``fit`` does) to differentiate the penalties.

        >>> import gputape as gt
        >>> gt.nn.Dense(1).losses
        []
        >>> d = gt.nn.Dense(1, kernel_initializer="ones", kernel_regularizer=gt.nn.regularizers.L1(0.1))
        >>> _ = d(gt.ones((2, 3))); [round(float(v), 6) for v in d.losses]
        [0.3]
        """
        out = list(getattr(self, "_losses", ()))
        regularized = list(self.__dict__.get("_weight_regularizers", ()))
        for layer in self._sublayers():
            out += getattr(layer, "_losses", ())
            regularized += layer.__dict__.get("_weight_regularizers", ())
        if regularized:
            penalties = {id(v): reg for v, reg in regularized}
            out += [penalties[id(v)](v) for v in self.trainable_weights if id(v) in penalties]
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
        return {**cfg, **self._config(), **self._keras_config()}

    def _config(self) -> dict[str, Any]:
        return {}

    def _keras_config(self) -> dict[str, Any]:
        # get_config's keys beyond _config's (which __repr__ shows too): initializers as Keras serializes them
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        """A new layer from ``get_config()``'s dict (``cls(**config)``, as Keras), or from a Keras 3 config.

        Keras' keys for features gputape lacks are dropped when they are off
        (``kernel_regularizer=None``); set to anything else they raise ``ValueError``.

        >>> import gputape as gt
        >>> gt.nn.Dense.from_config(gt.nn.Dense(5, name="d5").get_config()).units
        5
        >>> gt.nn.Dense.from_config({"units": 2, "kernel_regularizer": None, "bias_constraint": None}).units
        2
        """
        return cls(**constructor_kwargs(cls, config, cls.__name__))

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
        (print_fn or print)(_summary_text(self, _summary_rows(self), line_length))

    def save_weights(self, filepath: Any, overwrite: bool = True) -> None:
        """Write every weight to ``filepath``: Keras 3's HDF5 layout for ``.weights.h5``, else gputape's checkpoint.

        A name ending in ``.weights.h5`` gets Keras 3's weights file (``keras.Model.load_weights``
        reads it; writing needs ``pip install "gputape[h5]"``); other ``.h5``/``.hdf5``/``.keras``
        names are refused, as Keras refuses them; any other name gets ``gt.save``'s pickle-free
        checkpoint (``.npz``, or ``.safetensors`` by the suffix).

        >>> import gputape as gt, numpy as np, tempfile, os
        >>> a, b = gt.nn.Dense(2, input_shape=(3,)), gt.nn.Dense(2, input_shape=(3,))
        >>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
        >>> a.save_weights(path); b.load_weights(path)
        >>> bool(np.array_equal(a.kernel.numpy(), b.kernel.numpy()))
        True
        """
        path = os.fspath(filepath)
        kind = _weights_kind(path)
        if not overwrite and os.path.exists(path):
            raise FileExistsError(f"save_weights: {path!r} exists and overwrite=False")
        if kind == "h5":
            from .saving import save_weights_h5

            save_weights_h5(self, path)
        elif kind == "keras":
            raise ValueError(
                f"save_weights: the filename must end in `.weights.h5` (Keras 3's weights file), or be a gputape "
                f"checkpoint such as `.npz`; got {path!r} (a `.keras` file holds a whole model: model.save)"
            )
        else:
            from ..checkpoint import save

            save(path, self)

    def load_weights(self, filepath: Any, skip_mismatch: bool = False) -> None:
        """Read weights ``save_weights`` (or Keras 3's ``save_weights``/``save``) wrote; the layer must be built.

        ``.weights.h5`` and ``.keras`` files are read in Keras 3's layout (checked whole
        before anything is assigned), other names as gputape checkpoints (``gt.load``).

        >>> import gputape as gt
        >>> gt.nn.Dense(1).load_weights  # doctest: +ELLIPSIS
        <bound method Layer.load_weights of ...>
        """
        if skip_mismatch:
            raise NotImplementedError("load_weights: skip_mismatch=True is not supported; every weight must match")
        path = os.fspath(filepath)
        kind = _weights_kind(path)
        if kind == "keras" and not path.lower().endswith(".keras"):
            # another .h5 name: Keras' layout when it is HDF5, a gputape checkpoint (zip) as written before
            with open(path, "rb") as f:
                kind = "h5" if f.read(8) == b"\x89HDF\r\n\x1a\n" else "npz"
        if kind in ("h5", "keras"):
            from .saving import load_weights_h5

            load_weights_h5(self, path)
        else:
            from ..checkpoint import load

            load(path, into=self)

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
        if self.__dict__.get("activity_regularizer") is not None:
            self._add_activity_losses(out)
        if "_output_shape" not in self.__dict__:  # for summary(); the first call's shape is enough
            self._output_shape = tuple(out.shape) if hasattr(out, "shape") else None
        return out

    def _add_activity_losses(self, out: Any) -> None:
        # Keras 3: the penalty of each output tensor, divided by its batch size (an empty batch adds 0)
        for t in out if isinstance(out, (list, tuple)) else out.values() if isinstance(out, dict) else (out,):
            if isinstance(t, Tensor):
                loss = self.activity_regularizer(t)
                if t.ndim:
                    loss = loss / t.shape[0] if t.shape[0] else loss * 0.0
                self.add_loss(loss)

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


def _penalty_config(layer: Layer, *weights: str) -> dict[str, Any]:
    """The regularizers and constraints a layer was given, in Keras' serialized form (only those set)."""
    out = {}
    for name in [f"{w}_regularizer" for w in weights] + ["activity_regularizer"]:
        if layer.__dict__.get(name) is not None:
            out[name] = regularizers._serialize(layer.__dict__[name])
    for name in [f"{w}_constraint" for w in weights]:
        if layer.__dict__.get(name) is not None:
            out[name] = constraints._serialize(layer.__dict__[name])
    return out
