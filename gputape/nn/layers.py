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
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import backend
from .. import random as _random
from .. import tape as _tape
from ..device import current_device
from ..module import Module, _snake
from ..ops import cast, matmul, reshape
from ..tensor import FLOAT_DTYPES, Tensor, Variable, _wrap, as_tensor, constant
from . import activations, initializers

__all__ = ["Dense", "Dropout", "Flatten", "Layer", "Sequential"]

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


def _call_layer(layer: Any, x: Any, training: bool | None) -> Any:
    if isinstance(layer, Layer):
        return layer(x, training=training)
    fn = layer.__call__ if isinstance(layer, Module) else layer
    target = getattr(fn, "__func__", fn)
    return fn(x, training=training) if _takes_training(target) else fn(x)


def _shape_of(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


class Layer(Module):
    """Base class for layers: lazy ``build(input_shape)``, then ``call(inputs, training=...)``.

    Subclass it and define ``call`` (and ``build`` when the layer has
    weights that depend on the input's size). A layer with a ``dtype`` casts
    floating inputs to it, as Keras does, so float64 numpy data meets float32
    weights without silently promoting the whole model to float64.

    >>> import gputape as gt
    >>> class Scale(gt.nn.Layer):
    ...     def build(self, input_shape):
    ...         self.s = self.add_weight("s", (input_shape[-1],), "ones")
    ...     def call(self, x, training=None):
    ...         return x * self.s if training else x
    >>> layer = Scale()
    >>> layer(gt.constant([[2.0, 3.0]]), training=True).numpy().tolist(), layer.built
    ([[2.0, 3.0]], True)
    """

    def __init__(self, name: str | None = None, dtype: Any = None, trainable: bool = True, **kwargs: Any) -> None:
        input_shape = kwargs.pop("input_shape", None)
        input_dim = kwargs.pop("input_dim", None)
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unexpected keyword arguments {sorted(kwargs)}")
        super().__init__(name if name is not None else _unique_name(_snake(type(self).__name__)))
        self.dtype = np.dtype(dtype) if dtype is not None else None
        self.trainable = trainable
        self.built = False
        if input_dim is not None:
            input_shape = (input_dim,)
        if input_shape is not None:  # Keras' first-layer spelling: build now
            self._build_once((None, *tuple(input_shape)), current_device())

    # -- building ------------------------------------------------------------------
    def build(self, input_shape: tuple[int | None, ...]) -> None:
        """Create the layer's Variables for inputs of ``input_shape`` (default: none).

        >>> import gputape as gt
        >>> d = gt.nn.Dense(2)
        >>> d.build((None, 3)); d.kernel.shape
        (3, 2)
        """

    def _build_once(self, input_shape: tuple[int | None, ...], device: str) -> None:
        self._device = device
        self.build(input_shape)
        self.built = True

    def add_weight(
        self,
        name: str,
        shape: Any,
        initializer: Any = "glorot_uniform",
        trainable: bool = True,
        dtype: Any = None,
    ) -> Variable:
        """Make a Variable named ``'<layer>/<name>'`` on the layer's device (used in ``build``).

        >>> import gputape as gt
        >>> v = gt.nn.Layer(name="l").add_weight("w", (2,), "zeros")
        >>> v.name, v.numpy().tolist()
        ('l/w', [0.0, 0.0])
        """
        dt = dtype or self.dtype or np.float32
        value = initializers.get(initializer)(shape, dt)
        device = getattr(self, "_device", None) or current_device()
        value = np.asarray(value, dt) if device == "cpu" else backend.asarray_on(np.asarray(value, dt), device)
        return Variable(value, trainable=trainable and self.trainable, name=f"{self.name}/{name}")

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
        if isinstance(inputs, np.ndarray):
            # Host data meets weights on the layer's device (a GPU needs device arrays).
            dev = getattr(self, "_device", None) or current_device()
            cast_to = self.dtype if self.dtype is not None and inputs.dtype.kind == "f" else None
            inputs = constant(inputs, dtype=cast_to, device=dev)
        if not self.built:
            device = inputs.device if isinstance(inputs, Tensor) else current_device()
            self._build_once(_shape_of(inputs), device)
        if self.dtype is not None:
            inputs = self._autocast(inputs)
        if _takes_training(type(self).call):
            kwargs["training"] = training
        return self.call(inputs, *args, **kwargs)

    def _autocast(self, x: Any) -> Any:
        if isinstance(x, Tensor):
            return cast(x, self.dtype) if x.dtype in FLOAT_DTYPES and x.dtype != self.dtype else x
        if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype != self.dtype:
            return x.astype(self.dtype)
        return x


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
        self._rng = np.random.default_rng(seed) if seed is not None else None
        super().__init__(name=name, **kwargs)

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


class Sequential(Layer):
    """Layers applied in order; ``training`` is passed to each layer that takes it.

    Entries may be layers, modules or plain callables (``gt.nn.relu``).

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
