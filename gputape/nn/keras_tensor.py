"""The functional API's symbolic tensors: ``KerasTensor`` and the layer-call graph they record.

Calling a layer on a ``KerasTensor`` (``tf.keras.Input``) builds it and returns
symbolic outputs; ``tf.keras.Model(inputs, outputs)`` (:mod:`gputape.tf.keras`)
replays the recorded ``_Node`` graph on real tensors.

>>> import gputape.tf as tf
>>> tf.keras.layers.Dense(2)(tf.keras.Input(shape=(3,))).shape
(None, 2)
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..core.tensor import TensorShape, constant
from ..devices.placement import current_device
from .training import _flatten, _map


def _shape_of(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


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


_SERIALS = itertools.count()


class _Node:
    """One layer call in a functional graph: the layer, its symbolic inputs (a structure) and outputs."""

    __slots__ = ("args", "inputs", "kwargs", "layer", "outputs", "serial")

    def __init__(self, layer: Any, inputs: Any, args: tuple, kwargs: dict) -> None:
        self.layer, self.inputs, self.args, self.kwargs = layer, inputs, args, kwargs
        self.outputs: Any = None
        # creation order: a saved functional model numbers each layer's calls (Keras' node_index) by it
        self.serial = next(_SERIALS)


def _is_symbolic(x: Any) -> bool:
    if isinstance(x, KerasTensor):
        return True
    if isinstance(x, (list, tuple)):
        return any(_is_symbolic(i) for i in x)
    if isinstance(x, dict):
        return any(_is_symbolic(i) for i in x.values())
    return False


def _symbolic_call(layer: Any, inputs: Any, args: tuple, kwargs: dict) -> Any:
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
        runs.append(layer(xs, *args, training=False, **kwargs))
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
