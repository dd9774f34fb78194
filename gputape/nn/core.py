"""The core layers: ``Dense``, ``Dropout``, ``Flatten``, ``Lambda``, ``Activation``, ``Reshape``, the merge
layers ``Concatenate`` and ``Add``, and ``Embedding``.

>>> import gputape as gt, numpy as np
>>> gt.nn.Dense(3)(np.ones((2, 4), "float32")).shape
(2, 3)
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import random as _random
from ..core import _errors
from ..core.recording import traced
from ..core.tensor import FLOAT_DTYPES, Tensor, _wrap, as_tensor
from ..devices import backend
from ..ops import cast, concatenate, matmul, reshape, take
from ..ops._util import is_index
from . import activations, constraints, initializers, regularizers
from .base_layer import Layer, _penalty_config
from .keras_tensor import _shape_of
from .saving import register_keras_class
from .summary import _fn_name

__all__ = ["Activation", "Add", "Concatenate", "Dense", "Dropout", "Embedding", "Flatten", "Lambda", "Reshape"]


class Dense(Layer):
    """A fully connected layer: ``activation(inputs @ kernel + bias)``.

    The kernel, of shape ``(inputs.shape[-1], units)``, is created on the first
    call. ``activation`` is a name (``'relu'``, ``'softmax'`` ...), a callable or
    None; initializers are names (``'glorot_uniform'``, ``'he_normal'``,
    ``'zeros'`` ...) or callables ``(shape, dtype) -> array``. ``dtype`` is the
    weights' dtype (float32 by default); floating inputs are cast to it.
    ``kernel_regularizer``/``bias_regularizer`` add a penalty to ``losses``
    (:mod:`gputape.nn.regularizers`), ``activity_regularizer`` one on the output,
    and ``kernel_constraint``/``bias_constraint`` project the weights after each
    optimizer step (:mod:`gputape.nn.constraints`), as in Keras.

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
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        name: str | None = None,
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        # Keras 3's rule (a ValueError): int() would build Dense(2.5) with 2 units and fail inside
        # int() for Dense('relu'), a units/activation mix-up
        try:
            n = None if isinstance(units, bool) or not is_index(units) else operator.index(units)
        except _errors.NEVER_WRAP:
            raise
        except Exception:
            n = None  # (a hook of its own that raised: not an integer either)
        if n is None or n <= 0:
            raise ValueError(
                f"Dense: Received an invalid value for `units`, expected a positive integer. Received: "
                f"units={_errors.describe(units)}"
            )
        self.units = n
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        super().__init__(name=name, dtype=dtype, activity_regularizer=activity_regularizer, **kwargs)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        if not input_shape or input_shape[-1] is None:
            raise ValueError(f"Dense {self.name!r}: the last input dimension must be known, got shape {input_shape}")
        self.kernel = self.add_weight(
            "kernel",
            (int(input_shape[-1]), self.units),
            self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = (
            self.add_weight(
                "bias",
                (self.units,),
                self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
            if self.use_bias
            else None
        )

    def _config(self) -> dict[str, Any]:
        cfg = {"units": self.units, "activation": _fn_name(self.activation), "use_bias": self.use_bias}
        return {**cfg, **_penalty_config(self, "kernel", "bias")}

    def _keras_config(self) -> dict[str, Any]:
        return {
            "kernel_initializer": initializers.config_of(self.kernel_initializer),
            "bias_initializer": initializers.config_of(self.bias_initializer),
        }

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
        traced(self._mask, (x.shape, dtype, x.device), mask)
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

    _wraps_code = True  # a .keras config cannot carry it (Keras stores bytecode); Activation names its function

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

    def _keras_config(self) -> dict[str, Any]:
        return {"target_shape": list(self.target_shape)}  # JSON has no tuples

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
    ``embeddings_regularizer``, ``embeddings_constraint`` and
    ``activity_regularizer`` work as Dense's kernel ones.

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
        embeddings_regularizer: Any = None,
        embeddings_constraint: Any = None,
        activity_regularizer: Any = None,
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        if int(input_dim) <= 0 or int(output_dim) <= 0:
            raise ValueError(f"Embedding: input_dim and output_dim must be positive, got {input_dim}, {output_dim}")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = initializers.get(embeddings_initializer)
        self.embeddings_regularizer = regularizers.get(embeddings_regularizer)
        self.embeddings_constraint = constraints.get(embeddings_constraint)
        super().__init__(dtype=dtype, activity_regularizer=activity_regularizer, **kwargs)

    def _config(self) -> dict[str, Any]:
        return {"input_dim": self.input_dim, "output_dim": self.output_dim, **_penalty_config(self, "embeddings")}

    def _keras_config(self) -> dict[str, Any]:
        return {"embeddings_initializer": initializers.config_of(self.embeddings_initializer)}

    def build(self, input_shape: Any = None) -> None:
        self.embeddings = self.add_weight(
            shape=(self.input_dim, self.output_dim),
            initializer=self.embeddings_initializer,
            name="embeddings",
            regularizer=self.embeddings_regularizer,
            constraint=self.embeddings_constraint,
        )

    def _autocast(self, x: Any) -> Any:
        return x  # ids stay integers

    def call(self, inputs: Any) -> Any:
        return _lookup(self.embeddings, inputs, f"Embedding {self.name!r}", float_ids=True)


def _lookup(table: Any, ids: Any, who: str, float_ids: bool = False) -> Any:
    """Rows of ``table`` at integer ``ids`` (a differentiable ``take``: the table's gradient sums the rows
    that reach each id). Ids are checked to lie in ``[0, len(table))`` on the CPU; ``float_ids``
    accepts whole-number floats as Keras' Embedding does (TensorFlow's embedding_lookup does not)."""
    # a tensor stays a recorded input of the take (a gt.function replay reads each call's ids)
    arr = ids._data if isinstance(ids, Tensor) else np.asarray(ids)
    n = table.shape[0]
    if arr.dtype.kind not in "iu":
        if float_ids and arr.dtype.kind == "f" and backend.xp_of(arr) is np and np.array_equal(arr, np.round(arr)):
            ids = cast(ids, "int64")  # Keras casts float-typed ids (recorded: not frozen into a trace)
            arr = ids._data
        else:
            raise TypeError(f"{who}: ids must be integers (int32 or int64), got dtype {arr.dtype}")
    _check_ids(arr, n, who)
    traced(_check_ids, (ids if isinstance(ids, Tensor) else arr, n, who), None)  # and on every replay
    return take(table, ids if isinstance(ids, Tensor) else arr, axis=0)


def _check_ids(ids: Any, n: int, who: str) -> None:
    if backend.xp_of(ids) is np and ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
        raise ValueError(f"{who}: ids must be in [0, {n}), got values from {int(ids.min())} to {int(ids.max())}")


for _layer in (Activation, Add, Concatenate, Dense, Dropout, Embedding, Flatten, Lambda, Reshape):
    register_keras_class(_layer)  # saved under Keras' class name; a Keras config naming it rebuilds it
del _layer
