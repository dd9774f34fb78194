"""``tf.random``: ``normal``, ``uniform``, ``truncated_normal`` and ``set_seed``.

Draws come from ``gt.random``'s seeded generator; ``set_seed(n)`` reseeds it.
An op-level ``seed=`` draws that call from ``np.random.default_rng(seed)``
(TensorFlow also mixes in the global seed and a per-op counter, so its
numbers differ; the point here is reproducibility).

>>> import gputape.tf as tf
>>> tf.random.set_seed(0)
>>> tf.random.normal((2, 3)).shape
(2, 3)
"""

from __future__ import annotations

from typing import Any as _Any

import numpy as _np

from .. import random as _random
from ..core.tensor import constant as _constant
from ..devices.placement import current_device as _current_device
from ..nn.initializers import _truncated_normal

__all__ = ["normal", "set_seed", "truncated_normal", "uniform"]


def _rng(seed: int | None) -> _np.random.Generator:
    return _np.random.default_rng(seed) if seed is not None else _random.generator()


def _shape(shape: _Any) -> tuple[int, ...]:
    if hasattr(shape, "numpy"):
        shape = shape.numpy().tolist()
    return (int(shape),) if isinstance(shape, (int, _np.integer)) else tuple(int(s) for s in shape)


def set_seed(seed: int) -> None:
    """Reseed the global generator (weights, dropout masks and these functions draw from it).

    >>> import gputape.tf as tf
    >>> tf.random.set_seed(1)
    """
    _random.seed(seed)


def normal(
    shape: _Any,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: _Any = "float32",
    seed: int | None = None,
    name: _Any = None,
) -> _Any:
    """Samples from N(mean, stddev²).

    >>> import gputape.tf as tf
    >>> str(tf.random.normal([2], dtype=tf.float64).dtype)
    'float64'
    """
    return _constant(_rng(seed).normal(mean, stddev, _shape(shape)).astype(dtype), device=_current_device())


def truncated_normal(
    shape: _Any,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: _Any = "float32",
    seed: int | None = None,
    name: _Any = None,
) -> _Any:
    """Samples from N(mean, stddev²) redrawn until within two standard deviations of the mean.

    >>> import gputape.tf as tf
    >>> bool((abs(tf.random.truncated_normal([1000]).numpy()) <= 2).all())
    True
    """
    a = _truncated_normal(_rng(seed), stddev, _shape(shape)) + mean
    return _constant(a.astype(dtype), device=_current_device())


def uniform(
    shape: _Any,
    minval: float = 0,
    maxval: float | None = None,
    dtype: _Any = "float32",
    seed: int | None = None,
    name: _Any = None,
) -> _Any:
    """Samples from U[minval, maxval) (maxval defaults to 1 for floats and is required for integers).

    >>> import gputape.tf as tf
    >>> x = tf.random.uniform([100], minval=2, maxval=5, dtype=tf.int32)
    >>> bool(((x.numpy() >= 2) & (x.numpy() < 5)).all()), str(x.dtype)
    (True, 'int32')
    """
    dt = _np.dtype(dtype)
    rng = _rng(seed)
    if dt.kind in "iu":
        if maxval is None:
            raise ValueError("tf.random.uniform: maxval must be given for integer dtypes")
        a = rng.integers(int(minval), int(maxval), _shape(shape)).astype(dt)
    else:
        a = rng.uniform(minval, 1.0 if maxval is None else maxval, _shape(shape)).astype(dt)
    return _constant(a, device=_current_device())


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations
