"""``tf.keras.metrics``: running metrics for custom training loops (``update_state``/``result``/``reset_state``).

They accumulate on the host in float64 and are not Modules: a model that
holds one does not list its totals among its variables.

>>> import gputape.tf as tf
>>> acc = tf.keras.metrics.SparseCategoricalAccuracy()
>>> acc.update_state([0, 1], tf.constant([[0.9, 0.1], [0.8, 0.2]]))
>>> float(acc.result())
0.5
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _state
from ...backend import to_host
from ...tensor import Tensor, constant

__all__ = ["Accuracy", "CategoricalAccuracy", "Mean", "Metric", "SparseCategoricalAccuracy"]


def _np(x: Any) -> np.ndarray:
    return to_host(x._data) if isinstance(x, Tensor) else np.asarray(x)


class Metric:
    """Base class: a weighted running mean of per-example values from ``_values(*args)``.

    >>> import gputape.tf as tf, numpy as np
    >>> class MeanAbsoluteError(tf.keras.metrics.Metric):
    ...     def _values(self, y_true, y_pred):
    ...         return np.abs(np.asarray(y_true) - np.asarray(y_pred))
    >>> float(MeanAbsoluteError()([1.0, 2.0], [0.0, 0.0]))
    1.5
    """

    def __init__(self, name: str | None = None, dtype: Any = "float32") -> None:
        self.name = name or type(self).__name__
        self.dtype = dtype
        self.reset_state()

    def reset_state(self) -> None:
        """Forget everything accumulated (call it at the start of each epoch).

        >>> import gputape.tf as tf
        >>> m = tf.keras.metrics.Mean(); m.update_state(3.0); m.reset_state(); float(m.result())
        0.0
        """
        self.total = 0.0
        self.count = 0.0

    reset_states = reset_state

    def _values(self, *args: Any) -> np.ndarray:
        raise NotImplementedError

    def update_state(self, *args: Any, sample_weight: Any = None) -> None:
        """Add a batch of values (optionally weighted).

        >>> import gputape.tf as tf
        >>> m = tf.keras.metrics.Mean(); m.update_state([1.0, 3.0], sample_weight=[3.0, 1.0]); float(m.result())
        1.5
        """
        tr = _state.current_trace()
        if tr is not None and tr.owned():
            # inside a tf.function trace: update now and again on every replay, with that call's values
            tr.python_step(self._update_raw, (*args, sample_weight))
            return
        self._update_raw(*args, sample_weight)

    def _update_raw(self, *args: Any) -> None:
        *args, sample_weight = args
        v = np.asarray(self._values(*args), np.float64)
        w = np.broadcast_to(_np(sample_weight).astype(np.float64), v.shape) if sample_weight is not None else None
        self.total += float(np.sum(v * w)) if w is not None else float(np.sum(v))
        self.count += float(np.sum(w)) if w is not None else float(v.size)

    def result(self) -> Tensor:
        """The running mean as a scalar tensor (0 before any update).

        >>> import gputape.tf as tf
        >>> float(tf.keras.metrics.Mean().result())
        0.0
        """
        return constant(np.asarray(self.total / self.count if self.count else 0.0, self.dtype))

    def __call__(self, *args: Any, sample_weight: Any = None) -> Tensor:
        self.update_state(*args, sample_weight=sample_weight)
        return self.result()


class Mean(Metric):
    """Running mean of the values passed to ``update_state`` (e.g. the loss).

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.Mean()
    >>> m.update_state(1.0); m.update_state(tf.constant([2.0, 3.0]))
    >>> float(m.result())
    2.0
    """

    def _values(self, values: Any) -> np.ndarray:
        return _np(values)


class SparseCategoricalAccuracy(Metric):
    """Fraction of examples whose integer label is the argmax of the prediction.

    >>> import gputape.tf as tf
    >>> float(tf.keras.metrics.SparseCategoricalAccuracy()([1], tf.constant([[0.2, 0.8]])))
    1.0
    """

    def _values(self, y_true: Any, y_pred: Any) -> np.ndarray:
        t = _np(y_true)
        p = _np(y_pred)
        if t.ndim == p.ndim:
            t = t.reshape(t.shape[:-1])
        return (np.argmax(p, axis=-1) == t).astype(np.float64)


class CategoricalAccuracy(Metric):
    """Fraction of examples whose one-hot label's argmax is the prediction's argmax.

    >>> import gputape.tf as tf
    >>> float(tf.keras.metrics.CategoricalAccuracy()([[0.0, 1.0]], tf.constant([[0.2, 0.8]])))
    1.0
    """

    def _values(self, y_true: Any, y_pred: Any) -> np.ndarray:
        return (np.argmax(_np(y_pred), axis=-1) == np.argmax(_np(y_true), axis=-1)).astype(np.float64)


class Accuracy(Metric):
    """Fraction of entries where ``y_true == y_pred``.

    >>> import gputape.tf as tf
    >>> float(tf.keras.metrics.Accuracy()([1, 2], [1, 3]))
    0.5
    """

    def _values(self, y_true: Any, y_pred: Any) -> np.ndarray:
        return (_np(y_true) == _np(y_pred)).astype(np.float64)
