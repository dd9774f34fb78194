"""``tf.nn``: activations and losses with TensorFlow's argument names.

>>> import gputape.tf as tf
>>> logits = tf.constant([[0.0, 0.0]])
>>> tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[1], logits=logits).numpy().astype(float).round(4).tolist()
[0.6931]
"""

from __future__ import annotations

from typing import Any as _Any

from .. import ops as _ops
from .. import random as _random
from ..core.tensor import as_tensor as _as_tensor
from ..core.tensor import constant as _constant
from ..nn import functional as _fn
from ..nn.activations import silu as _silu
from ..nn.core import _lookup
from ..ops._util import norm_real as _norm_real
from ..ops._util import norm_shape as _norm_shape
from ..optim.clip import clip_by_norm as _clip_by_norm
from ._util import axis_arg as _axis_arg

__all__ = [
    "bias_add",
    "dropout",
    "elu",
    "embedding_lookup",
    "gelu",
    "l2_loss",
    "l2_normalize",
    "leaky_relu",
    "log_softmax",
    "moments",
    "relu",
    "relu6",
    "sigmoid",
    "sigmoid_cross_entropy_with_logits",
    "silu",
    "softmax",
    "softmax_cross_entropy_with_logits",
    "softplus",
    "sparse_softmax_cross_entropy_with_logits",
    "swish",
    "tanh",
]

from .math import l2_normalize  # TensorFlow exposes it in both namespaces

sigmoid = _fn.sigmoid
tanh = _ops.tanh
softplus = _fn.softplus


def relu(features: _Any, name: str | None = None) -> _Any:
    """``max(features, 0)``.

    >>> import gputape.tf as tf
    >>> tf.nn.relu(tf.constant([-1.0, 2.0])).numpy().tolist()
    [0.0, 2.0]
    """
    return _fn.relu(features)


def relu6(features: _Any, name: str | None = None) -> _Any:
    """``min(max(features, 0), 6)``.

    >>> import gputape.tf as tf
    >>> tf.nn.relu6(tf.constant([-1.0, 8.0])).numpy().tolist()
    [0.0, 6.0]
    """
    return _ops.minimum(_fn.relu(features), 6.0)


def leaky_relu(features: _Any, alpha: float = 0.2, name: str | None = None) -> _Any:
    """``features`` where positive, ``alpha * features`` elsewhere.

    >>> import gputape.tf as tf
    >>> tf.nn.leaky_relu(tf.constant([-1.0, 2.0], tf.float64)).numpy().tolist()
    [-0.2, 2.0]
    """
    return _fn.leaky_relu(features, alpha)


def elu(features: _Any, name: str | None = None) -> _Any:
    """Exponential linear unit.

    >>> import gputape.tf as tf
    >>> tf.nn.elu(tf.constant([0.0, 1.0])).numpy().tolist()
    [0.0, 1.0]
    """
    return _fn.elu(features)


def gelu(features: _Any, approximate: bool = False, name: str | None = None) -> _Any:
    """Gaussian error linear unit (exact unless ``approximate``).

    >>> import gputape.tf as tf
    >>> round(float(tf.nn.gelu(tf.constant(1.0))), 4)
    0.8413
    """
    return _fn.gelu(features, approximate)


def silu(features: _Any, beta: float = 1.0) -> _Any:
    """``features * sigmoid(beta * features)`` (also ``tf.nn.swish``).

    >>> import gputape.tf as tf
    >>> tf.nn.silu(tf.constant([0.0])).numpy().tolist()
    [0.0]
    """
    if beta == 1.0:
        return _silu(features)
    return features * _fn.sigmoid(beta * _as_tensor(features))


swish = silu


def softmax(logits: _Any, axis: int | None = None, name: str | None = None) -> _Any:
    """Softmax along ``axis`` (the last by default).

    >>> import gputape.tf as tf
    >>> tf.nn.softmax(tf.constant([0.0, 0.0])).numpy().tolist()
    [0.5, 0.5]
    """
    return _fn.softmax(logits, -1 if axis is None else axis)


def log_softmax(logits: _Any, axis: int | None = None, name: str | None = None) -> _Any:
    """Log-softmax along ``axis`` (the last by default).

    >>> import gputape.tf as tf
    >>> tf.nn.log_softmax(tf.constant([0.0, 0.0], tf.float64)).numpy().astype(float).round(4).tolist()
    [-0.6931, -0.6931]
    """
    return _fn.log_softmax(logits, -1 if axis is None else axis)


def sparse_softmax_cross_entropy_with_logits(labels: _Any = None, logits: _Any = None, name: str | None = None) -> _Any:
    """Per-example cross-entropy of integer ``labels`` against ``logits`` (call it with keywords, as in TF).

    >>> import gputape.tf as tf
    >>> loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[0], logits=tf.constant([[0.0, 0.0]]))
    >>> loss.shape
    (1,)
    """
    if labels is None or logits is None:
        raise ValueError(
            f"tf.nn.sparse_softmax_cross_entropy_with_logits: argument {'labels' if labels is None else 'logits'} "
            "is None; pass both labels= and logits="
        )
    return _fn.sparse_softmax_cross_entropy_with_logits(labels, logits)


def softmax_cross_entropy_with_logits(labels: _Any, logits: _Any, axis: int = -1, name: str | None = None) -> _Any:
    """Per-example cross-entropy of probability ``labels`` against ``logits``.

    >>> import gputape.tf as tf
    >>> loss = tf.nn.softmax_cross_entropy_with_logits(labels=[[0.5, 0.5]], logits=tf.constant([[0.0, 0.0]]))
    >>> round(float(loss[0]), 4)
    0.6931
    """
    return _fn.softmax_cross_entropy_with_logits(labels, logits, axis)


def sigmoid_cross_entropy_with_logits(labels: _Any = None, logits: _Any = None, name: str | None = None) -> _Any:
    """Elementwise binary cross-entropy of ``labels`` against ``logits``, stable.

    >>> import gputape.tf as tf
    >>> round(float(tf.nn.sigmoid_cross_entropy_with_logits(labels=[1.0], logits=tf.constant([0.0]))[0]), 4)
    0.6931
    """
    if labels is None or logits is None:
        raise ValueError(
            f"tf.nn.sigmoid_cross_entropy_with_logits: argument {'labels' if labels is None else 'logits'} is None; "
            "pass both labels= and logits="
        )
    return _fn.sigmoid_cross_entropy_with_logits(labels, logits)


def l2_loss(t: _Any, name: str | None = None) -> _Any:
    """``sum(t ** 2) / 2``.

    >>> import gputape.tf as tf
    >>> tf.nn.l2_loss(tf.constant([1.0, 2.0])).numpy().tolist()
    2.5
    """
    return _ops.sum(_ops.square(t)) * 0.5


def bias_add(value: _Any, bias: _Any, data_format: str | None = None, name: str | None = None) -> _Any:
    """``value + bias`` along the last axis.

    >>> import gputape.tf as tf
    >>> tf.nn.bias_add(tf.zeros((1, 2)), tf.constant([1.0, 2.0])).numpy().tolist()
    [[1.0, 2.0]]
    """
    if data_format not in (None, "NHWC", "N...C"):
        raise NotImplementedError(f"bias_add: data_format {data_format!r} is not supported; only channels-last")
    return _ops.add(value, bias)


def moments(
    x: _Any, axes: _Any, shift: _Any = None, keepdims: bool = False, name: str | None = None
) -> tuple[_Any, _Any]:
    """``(mean, variance)`` over ``axes``.

    >>> import gputape.tf as tf
    >>> m, v = tf.nn.moments(tf.constant([1.0, 3.0]), axes=[0])
    >>> float(m), float(v)
    (2.0, 1.0)
    """
    ax = _axis_arg(axes)
    return _ops.mean(x, ax, keepdims), _ops.var(x, ax, keepdims)


def dropout(x: _Any, rate: float, noise_shape: _Any = None, seed: int | None = None, name: str | None = None) -> _Any:
    """Zero each entry with probability ``rate`` and scale the rest by ``1 / (1 - rate)`` (always; TF's ``nn.dropout``).

    The mask comes from ``gt.random``'s op streams: TensorFlow's global seed plus op
    seed (``tf.random.set_seed``).

    >>> import gputape.tf as tf
    >>> sorted(set(tf.nn.dropout(tf.ones((1, 8)), 0.5, seed=0).numpy().ravel().tolist()))
    [0.0, 2.0]
    """
    rate = _norm_real(rate, "dropout", "rate")
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"tf.nn.dropout: argument rate must be in [0, 1), got {rate!r}")
    x = _as_tensor(x)
    if x.dtype.kind != "f":
        raise ValueError(
            f"tf.nn.dropout: argument x has to be a floating point tensor since it is scaled; got {x.dtype} "
            "(TensorFlow's rule)"
        )
    rng = _random._op_generator(seed, "dropout")
    # (int() would truncate a float size: a silent wrong mask shape)
    shape = x.shape if noise_shape is None else _norm_shape(noise_shape, "dropout")
    mask = (rng.random(shape) >= rate).astype(x.dtype) / x.dtype.type(1.0 - rate)
    return x * _constant(mask, device=x.device)


def embedding_lookup(params: _Any, ids: _Any, max_norm: float | None = None, name: str | None = None) -> _Any:
    """Rows of the table ``params`` at integer ``ids``: shape ``ids.shape + params.shape[1:]``.

    Differentiable in ``params`` (its gradient sums the incoming rows at each
    id; the ``Embedding`` layer uses the same lookup). ``params`` may be a list
    of shards, as TensorFlow's "div" partition: their rows concatenated in
    order. ``max_norm`` clips each looked-up row to that L2 norm. Ids out of
    ``[0, rows)`` raise ValueError on the CPU.

    >>> import gputape.tf as tf
    >>> table = tf.Variable([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    >>> with tf.GradientTape() as tape:
    ...     rows = tf.nn.embedding_lookup(table, [[2, 0], [2, 2]])
    ...     loss = tf.reduce_sum(rows)
    >>> rows.shape, tape.gradient(loss, table).numpy().tolist()
    ((2, 2, 2), [[1.0, 1.0], [0.0, 0.0], [3.0, 3.0]])
    """
    if isinstance(params, (list, tuple)):
        if not params:
            raise ValueError("tf.nn.embedding_lookup: params is an empty list; pass a table or a list of shards")
        params = params[0] if len(params) == 1 else _ops.concatenate(list(params), axis=0)
    table = _as_tensor(params)
    if table.ndim < 1:
        raise ValueError(f"tf.nn.embedding_lookup: params must have at least one dimension, got shape {table.shape}")
    out = _lookup(table, ids, "tf.nn.embedding_lookup", float_ids=False)
    if max_norm is not None:
        out = _clip_by_norm(out, max_norm, axes=list(range(out.ndim - table.ndim + 1, out.ndim)))
    return out


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
