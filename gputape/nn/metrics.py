"""``tf.keras.metrics``: Keras 3's running metrics (``update_state`` / ``result`` / ``reset_state``).

They accumulate on the host in float64 and are not Modules: a model that
holds one does not list its totals among its variables. Inside a
``tf.function`` an update is recorded as a host step, so it runs again, with
that call's values, on every replay.

Sample weights follow Keras' ``reduce_to_samplewise_values``: per-sample
values are the mean over the non-batch axes, weights are matched to their
rank by Keras' trailing-1 rule, and ``count`` adds the weights (or the number
of samples).

>>> import gputape.tf as tf
>>> acc = tf.keras.metrics.SparseCategoricalAccuracy()
>>> acc.update_state([0, 1], tf.constant([[0.9, 0.1], [0.8, 0.2]]))
>>> float(acc.result())
0.5
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..core import _errors
from ..core import state as _state
from ..core.module import _snake
from ..core.recording import traced
from ..core.tensor import Tensor, constant
from ..devices.backend import to_host

__all__ = [
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "Mean",
    "MeanAbsoluteError",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "Precision",
    "Recall",
    "SparseCategoricalAccuracy",
    "Sum",
    "get",
]


def _np(x: Any) -> np.ndarray:
    return to_host(x._data) if isinstance(x, Tensor) else np.asarray(x)


def _same_rank(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Keras' squeeze_or_expand_to_same_rank, on host arrays.
    if a.ndim == b.ndim + 1 and a.shape[-1:] == (1,):
        a, b = (a, b[..., None]) if b.ndim == 1 else (a[..., 0], b)
    elif b.ndim == a.ndim + 1 and b.shape[-1:] == (1,):
        a, b = (a[..., None], b) if a.ndim == 1 else (a, b[..., 0])
    return a, b


def _paired(metric: Any, y_true: Any, y_pred: Any, true_dtype: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``y_true`` and ``y_pred`` brought to one rank (Keras' rule) for an elementwise comparison; shapes
    that do not broadcast are refused naming the metric and both shapes (Keras: Incompatible shapes)."""
    t, p = _same_rank(np.asarray(y_true, true_dtype), np.asarray(y_pred, np.float64 if true_dtype else None))
    try:
        np.broadcast_shapes(t.shape, p.shape)
    except ValueError as e:
        raise ValueError(
            f"{type(metric).__name__}.update_state: y_true of shape {np.shape(y_true)} and y_pred of shape "
            f"{np.shape(y_pred)} are incompatible shapes (they do not broadcast); pass one prediction per label"
        ) from e
    return t, p


def _replayed_reset(fn: Any) -> Any:
    @functools.wraps(fn)
    def reset_state(self: Any) -> None:
        tr = _state.current_trace()
        if tr is not None and tr.owned():
            tr.python_step(functools.partial(fn, self), (), wrap=False)  # now, and on every replay
            return
        fn(self)

    reset_state._replayed = True  # type: ignore[attr-defined]
    return reset_state


class _ResultStep:
    """A metric's ``result()`` as a replay step: the value of the state at that point of the call."""

    def __init__(self, fn: Any, metric: Any) -> None:
        self.fn, self.metric = fn, metric

    def __call__(self) -> Any:
        return self.fn(self.metric)._data


def _replayed_result(fn: Any) -> Any:
    @functools.wraps(fn)
    def result(self: Any) -> Any:
        out = fn(self)
        tr = _state.current_trace()
        # (a result built from recorded tensor ops is already replayed: only a host-made one is added)
        if tr is not None and tr.owned() and isinstance(out, Tensor) and id(out._data) not in tr.slot_of:
            traced(_ResultStep(fn, self), (), out._data)
        return out

    result._replayed = True  # type: ignore[attr-defined]
    return result


class Metric:
    """Base class: ``update_state(*args, sample_weight=None)``, ``result()``, ``reset_state()``.

    Subclasses define ``_update(*args, sample_weight)`` (host arrays in) and
    ``result()``; a plain running mean of per-sample values only needs
    :class:`MeanMetricWrapper`'s ``_values``.

    >>> import gputape.tf as tf, numpy as np
    >>> class MaxSoFar(tf.keras.metrics.Metric):
    ...     def reset_state(self):
    ...         self.best = -np.inf
    ...     def _update(self, values, sample_weight=None):
    ...         self.best = max(self.best, float(np.max(values)))
    ...     def result(self):
    ...         return tf.constant(self.best)
    >>> m = MaxSoFar(); m.update_state([1.0, 5.0]); m.update_state([2.0]); float(m.result())
    5.0
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A metric's state lives on the host, outside the record: inside a tf.function trace its
        # reset and its result are replay steps too (as update_state's update is), so each call
        # resets and reads the state that call's updates left, not the values seen while tracing.
        super().__init_subclass__(**kwargs)
        for name, wrap in (("reset_state", _replayed_reset), ("result", _replayed_result)):
            fn = cls.__dict__.get(name)
            if fn is not None and not getattr(fn, "_replayed", False):
                setattr(cls, name, wrap(fn))

    def __init__(self, name: str | None = None, dtype: Any = "float32") -> None:
        self.name = name or _snake(type(self).__name__)
        self.dtype = np.dtype(dtype or "float32")
        self.reset_state()

    def reset_state(self) -> None:
        """Forget everything accumulated (call it at the start of each epoch).

        >>> import gputape.tf as tf
        >>> m = tf.keras.metrics.Mean(); m.update_state(3.0); m.reset_state(); float(m.result())
        0.0
        """

    def reset_states(self) -> None:
        """Keras 2's spelling of :meth:`reset_state`.

        >>> import gputape.tf as tf
        >>> m = tf.keras.metrics.Sum(); m.update_state(3.0); m.reset_states(); float(m.result())
        0.0
        """
        self.reset_state()

    def _update(self, *args: Any, sample_weight: Any = None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define _update(*args, sample_weight=None)")

    def update_state(self, *args: Any, sample_weight: Any = None) -> None:
        """Add a batch (optionally weighted per sample).

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
        arrays = [self._host(a, i) for i, a in enumerate(args)]
        weight = None if sample_weight is None else self._host(sample_weight, "sample_weight")
        self._update(*arrays, sample_weight=weight)

    def _host(self, value: Any, which: Any) -> np.ndarray:
        """An argument as a host array of numbers, or an error naming the metric and the argument."""
        arg = which if isinstance(which, str) else f"{which} (of update_state)"
        what = f"argument {arg}"
        try:
            a = _np(value)
        except _errors.NEVER_WRAP:
            raise
        except Exception as e:
            name = f"{type(self).__name__}.update_state"
            raise _errors.unconvertible(name, arg, value, "an array of numbers", e) from e
        if a.dtype.kind not in "biuf":
            raise _errors.mark(
                TypeError(
                    f"{type(self).__name__}.update_state: {what} ({_errors.describe(value)}) has dtype {a.dtype}; "
                    "metrics take real numbers (bool, integer or float)"
                )
            )
        return a

    def result(self) -> Tensor:
        """The metric's current value as a tensor.

        >>> import gputape.tf as tf
        >>> float(tf.keras.metrics.Mean().result())
        0.0
        """
        raise NotImplementedError(f"{type(self).__name__} must define result()")

    def __call__(self, *args: Any, sample_weight: Any = None) -> Tensor:
        self.update_state(*args, sample_weight=sample_weight)
        return self.result()

    def get_config(self) -> dict[str, Any]:
        """``{'name': ..., 'dtype': ...}`` and the metric's options, as Keras' ``get_config``.

        >>> import gputape.tf as tf
        >>> tf.keras.metrics.BinaryAccuracy(threshold=0.7).get_config()
        {'name': 'binary_accuracy', 'dtype': 'float32', 'threshold': 0.7}
        """
        return {"name": self.name, "dtype": str(self.dtype), **self._options()}

    def _options(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        try:
            value = np.round(_np(self.result()).astype(float), 6).tolist()
        except Exception:  # a half-defined subclass still prints
            value = "?"
        opts = "".join(f", {k}={v!r}" for k, v in self._options().items())
        return f"<{type(self).__name__} name={self.name!r}{opts} result={value}>"


class Mean(Metric):
    """Weighted running mean of the values passed to ``update_state`` (e.g. the loss).

    Keras' documented example:

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.Mean()
    >>> m.update_state([1, 3, 5, 7]); float(m.result())
    4.0
    >>> m.reset_state(); m.update_state([1, 3, 5, 7], sample_weight=[1, 1, 0, 0]); float(m.result())
    2.0
    """

    def reset_state(self) -> None:
        self.total = 0.0
        self.count = 0.0

    def _update(self, values: Any, sample_weight: Any = None) -> None:
        v = np.asarray(values, np.float64)
        if sample_weight is not None:
            w = np.asarray(sample_weight, np.float64)
            v, w = _same_rank(v, w)
            if v.ndim > w.ndim:  # reduce the values to the weights' rank
                v = v.mean(axis=tuple(range(w.ndim, v.ndim)))
            w = np.broadcast_to(w, v.shape)
            v = v * w
            if w.ndim > 1:
                w = w.mean(axis=tuple(range(1, w.ndim)))
            self.count += float(np.sum(w))
        else:
            self.count += float(v.shape[0]) if v.ndim >= 1 else 1.0
        if v.ndim > 1:
            v = v.mean(axis=tuple(range(1, v.ndim)))
        self.total += float(np.sum(v))

    def result(self) -> Tensor:
        return constant(np.asarray(self.total / self.count if self.count else 0.0, self.dtype))


class Sum(Metric):
    """Weighted running sum.

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.Sum(); m.update_state([1, 3, 5, 7], sample_weight=[1, 1, 0, 0]); float(m.result())
    4.0
    """

    def reset_state(self) -> None:
        self.total = 0.0

    def _update(self, values: Any, sample_weight: Any = None) -> None:
        v = np.asarray(values, np.float64)
        if sample_weight is not None:
            v, w = _same_rank(v, np.asarray(sample_weight, np.float64))
            v = v * w
        self.total += float(np.sum(v))

    def result(self) -> Tensor:
        return constant(np.asarray(self.total, self.dtype))


class MeanMetricWrapper(Mean):
    """A :class:`Mean` of per-sample values ``fn(y_true, y_pred, **kwargs)`` (host numpy arrays in and out).

    >>> import gputape.tf as tf, numpy as np
    >>> mae = tf.keras.metrics.MeanMetricWrapper(lambda t, p: np.abs(t - p), name="mae")
    >>> float(mae([[1.0, 2.0]], [[0.0, 0.0]]))
    1.5
    """

    def __init__(self, fn: Any = None, name: str | None = None, dtype: Any = "float32", **kwargs: Any) -> None:
        if fn is not None:
            self._values = fn
        self._fn_kwargs = kwargs
        super().__init__(name=name, dtype=dtype)

    def _values(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must define _values(y_true, y_pred)")

    def _update(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        super()._update(self._values(y_true, y_pred, **self._fn_kwargs), sample_weight)


class MeanSquaredError(MeanMetricWrapper):
    """Running mean of ``mean((y_true - y_pred)**2, axis=-1)`` (Keras' metric; its example gives 0.25).

    >>> import gputape.tf as tf
    >>> float(tf.keras.metrics.MeanSquaredError()([[0, 1], [0, 0]], [[1, 1], [0, 0]]))
    0.25
    """

    def _values(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        t, p = _paired(self, y_true, y_pred, np.float64)
        return np.mean(np.square(t - p), axis=-1)


class MeanAbsoluteError(MeanMetricWrapper):
    """Running mean of ``mean(abs(y_true - y_pred), axis=-1)`` (Keras' metric; its example gives 0.25).

    >>> import gputape.tf as tf
    >>> float(tf.keras.metrics.MeanAbsoluteError()([[0, 1], [0, 0]], [[1, 1], [0, 0]]))
    0.25
    """

    def _values(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        t, p = _paired(self, y_true, y_pred, np.float64)
        return np.mean(np.abs(t - p), axis=-1)


class Accuracy(MeanMetricWrapper):
    """Fraction of entries where ``y_true == y_pred`` (Keras' example: 0.75, weighted 0.5).

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.Accuracy()
    >>> float(m([[1], [2], [3], [4]], [[0], [2], [3], [4]]))
    0.75
    """

    def _values(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        t, p = _paired(self, y_true, y_pred)
        return (t == p).astype(np.float64)


class BinaryAccuracy(MeanMetricWrapper):
    """Fraction of predictions on the right side of ``threshold`` (``y_pred > threshold`` means 1).

    Keras' documented example:

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.BinaryAccuracy()
    >>> m.update_state([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]]); float(m.result())
    0.75
    >>> m.reset_state()
    >>> m.update_state([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]], sample_weight=[1, 0, 0, 1])
    >>> float(m.result())
    0.5
    """

    def __init__(self, name: str | None = None, dtype: Any = "float32", threshold: float = 0.5) -> None:
        self.threshold = float(threshold)
        super().__init__(name=name, dtype=dtype)

    def _options(self) -> dict[str, Any]:
        return {"threshold": self.threshold}

    def _values(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        t, p = _paired(self, y_true, y_pred)
        return (t == (p > self.threshold).astype(t.dtype)).astype(np.float64)


class CategoricalAccuracy(MeanMetricWrapper):
    """Fraction of examples whose one-hot label's argmax is the prediction's argmax.

    Keras' documented example:

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.CategoricalAccuracy()
    >>> y_true, y_pred = [[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]]
    >>> m.update_state(y_true, y_pred); float(m.result())
    0.5
    >>> m.reset_state(); m.update_state(y_true, y_pred, sample_weight=[0.7, 0.3]); round(float(m.result()), 6)
    0.3
    """

    def _values(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        return (np.argmax(y_pred, axis=-1) == np.argmax(y_true, axis=-1)).astype(np.float64)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """Fraction of examples whose integer label is the argmax of the prediction.

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.SparseCategoricalAccuracy()
    >>> float(m([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]]))
    0.5
    """

    def _values(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
        t = y_true
        if t.ndim == y_pred.ndim and t.shape[-1:] == (1,):
            t = t[..., 0]
        return (np.argmax(y_pred, axis=-1) == t).astype(np.float64)


class _Confusion(Metric):
    # Precision and Recall: true positives and one kind of error, per threshold.
    _error: str

    def __init__(
        self,
        thresholds: float | list[float] | None = None,
        top_k: int | None = None,
        class_id: int | None = None,
        name: str | None = None,
        dtype: Any = "float32",
    ) -> None:
        if top_k is not None or class_id is not None:
            raise NotImplementedError(
                f"{type(self).__name__}: top_k and class_id are not supported; slice y_true/y_pred to the class first"
            )
        self.init_thresholds = thresholds
        thr = np.atleast_1d(np.asarray(0.5 if thresholds is None else thresholds, np.float64))
        if thr.ndim != 1 or not np.all((thr >= 0.0) & (thr <= 1.0)):
            raise ValueError(f"{type(self).__name__}: thresholds must be in [0, 1], got {thresholds!r}")
        self.thresholds = thr
        super().__init__(name=name, dtype=dtype)

    def _options(self) -> dict[str, Any]:
        return {"thresholds": self.init_thresholds}

    def reset_state(self) -> None:
        self.true_positives = np.zeros(len(self.thresholds))
        self.false = np.zeros(len(self.thresholds))

    def _update(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        t, p = _same_rank(np.asarray(y_true), np.asarray(y_pred, np.float64))
        if t.shape != p.shape:
            raise ValueError(
                f"{type(self).__name__}.update_state: y_true of shape {t.shape} and y_pred of shape {p.shape} "
                "must have the same shape"
            )
        label = t.astype(bool)
        w = np.ones(p.shape) if sample_weight is None else np.broadcast_to(_same_rank(p, sample_weight)[1], p.shape)
        pred = p[None] > self.thresholds.reshape((-1,) + (1,) * p.ndim)  # (thresholds, *shape)
        axes = tuple(range(1, pred.ndim))
        self.true_positives += np.sum(w * (pred & label), axis=axes)
        wrong = pred & ~label if self._error == "false_positives" else ~pred & label
        self.false += np.sum(w * wrong, axis=axes)

    def result(self) -> Tensor:
        denom = self.true_positives + self.false
        r = np.divide(self.true_positives, denom, out=np.zeros_like(denom), where=denom > 0)  # divide_no_nan
        return constant(np.asarray(r[0] if len(r) == 1 else r, self.dtype))


class Precision(_Confusion):
    """Precision ``tp / (tp + fp)``, where ``y_pred > threshold`` (0.5 by default) predicts positive.

    Keras' documented example:

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.Precision()
    >>> m.update_state([0, 1, 1, 1], [1, 0, 1, 1]); round(float(m.result()), 7)
    0.6666667
    >>> m.reset_state(); m.update_state([0, 1, 1, 1], [1, 0, 1, 1], sample_weight=[0, 0, 1, 0]); float(m.result())
    1.0
    """

    _error = "false_positives"


class Recall(_Confusion):
    """Recall ``tp / (tp + fn)``, where ``y_pred > threshold`` (0.5 by default) predicts positive.

    Keras' documented example:

    >>> import gputape.tf as tf
    >>> m = tf.keras.metrics.Recall()
    >>> m.update_state([0, 1, 1, 1], [1, 0, 1, 1]); round(float(m.result()), 7)
    0.6666667
    >>> m.reset_state(); m.update_state([0, 1, 1, 1], [1, 0, 1, 1], sample_weight=[0, 0, 1, 0]); float(m.result())
    1.0
    """

    _error = "false_negatives"


_BY_NAME: dict[str, Any] = {
    "binary_accuracy": BinaryAccuracy,
    "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
    "precision": Precision,
    "recall": Recall,
}


def get(identifier: Any, y_true: Any = None, y_pred: Any = None) -> Metric:
    """A metric from a Keras name, a :class:`Metric` (returned as it is) or a function ``fn(y_true, y_pred)``.

    ``'accuracy'``/``'acc'`` become Keras 3's choice for the labels and
    predictions of the first batch: :class:`BinaryAccuracy` when ``y_pred``
    has one column, :class:`SparseCategoricalAccuracy` when ``y_true`` has
    lower rank than ``y_pred`` (or one column against several), else
    :class:`CategoricalAccuracy`. A metric made from a name keeps that name
    (``'acc'`` is logged as ``acc``); a function is averaged per sample.

    >>> import numpy as np
    >>> from gputape.nn import metrics
    >>> type(metrics.get("accuracy", np.zeros(4), np.zeros((4, 3)))).__name__, metrics.get("mse").name
    ('SparseCategoricalAccuracy', 'mse')
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in ("accuracy", "acc"):
            t_shape, p_shape = np.shape(y_true), np.shape(y_pred)
            if not p_shape or p_shape[-1] == 1:
                return BinaryAccuracy(name=identifier)
            if len(t_shape) < len(p_shape) or (t_shape and t_shape[-1] == 1):
                return SparseCategoricalAccuracy(name=identifier)
            return CategoricalAccuracy(name=identifier)
        if key in _BY_NAME:
            return _BY_NAME[key](name=identifier)
        raise ValueError(
            f"metrics.get: unknown metric {identifier!r}; use one of {sorted(['accuracy', 'acc', *_BY_NAME])}, "
            "a tf.keras.metrics.Metric or a function fn(y_true, y_pred)"
        )
    if callable(identifier):
        return MeanMetricWrapper(lambda t, p: np.asarray(_np(identifier(t, p)), np.float64), name=_fn_name(identifier))
    raise TypeError(f"metrics.get: expected a metric name, a Metric or a function, got {type(identifier).__name__}")


def _fn_name(fn: Any) -> str:
    return getattr(fn, "name", None) or getattr(fn, "__name__", None) or _snake(type(fn).__name__)
