"""Keras' built-in training loop: ``compile``, ``fit``, ``evaluate``, ``predict``, ``train_on_batch``...

:class:`Trainer` is mixed into ``gt.nn.Sequential`` and ``tf.keras.Model``/``Sequential``.
It covers the common case of Keras 3's ``Model`` methods, with these choices:

* **One output, one loss.** ``loss`` is a Keras name (``"mse"``,
  ``"sparse_categorical_crossentropy"``, ...), a :class:`~gputape.nn.losses.Loss`
  or a function ``fn(y_true, y_pred)`` of per-example values (averaged over the
  batch). ``model.losses`` (``add_loss`` terms and the weights' regularizer
  penalties) are added to it. Lists or dicts of losses for several outputs and
  ``loss_weights`` are refused with a NotImplementedError.
* **Sample and class weights**, as Keras 3 weights a loss: each example's loss
  times its weight, summed, divided by the number of examples in the batch
  (``'sum_over_batch_size'``; a :class:`~gputape.nn.losses.Loss` with another
  reduction reduces as it says). ``class_weight`` (a dict ``{class: weight}``)
  becomes each example's weight from its label (the argmax of a one-hot row).
  The compiled metrics stay unweighted (Keras weights only ``weighted_metrics``).
* **Steps.** ``steps_per_epoch`` runs that many batches per epoch, continuing
  from where the last epoch stopped (a ``Dataset.repeat()`` never ends; arrays
  and finite datasets start over once used up, and an epoch that runs out of
  data ends early with a warning, as in Keras). ``validation_steps`` and
  ``evaluate``/``predict``'s ``steps`` take at most that many batches from the
  start.
* **Compiled steps.** The train, test and predict steps run through
  :func:`gputape.function` (one trace per batch shape; the last, smaller batch
  traces once more). ``compile(..., run_eagerly=True)`` or ``jit_compile=False``
  runs them eagerly instead, e.g. to debug with prints. A step is traced again
  at the start of each ``fit``, so a ``layer.trainable`` change between two
  ``fit`` calls is honoured (Keras asks for a new ``compile``).
* **Running means.** ``loss`` (and each metric) in the logs is the mean over
  the samples seen so far in the epoch, as Keras reports it; ``evaluate``'s loss
  is the mean of the per-batch losses weighted by the batch sizes, so with the
  default ``'sum_over_batch_size'`` reduction it is the loss over the whole data.
* **Data.** ``x``/``y`` are numpy arrays, lists or gt tensors (a functional model
  takes a list or dict of them), or ``x`` is an iterable of ``(x, y)`` batches
  (``tf.data.Dataset``, ``gt.data.DataLoader``) with ``y=None``.
  ``validation_split`` takes the last fraction of the samples before shuffling,
  as Keras does; ``shuffle`` draws from ``gt.random``'s generator, so
  ``gt.random.seed`` makes ``fit`` reproducible.
* **Progress.** ``verbose=0`` prints nothing; ``1`` (and ``"auto"``) a
  progress bar per epoch (tqdm when it is installed, else Keras' own text bar),
  ending in Keras' line ``N/N ... - loss: 0.1234 - accuracy: 0.9000 - val_loss:
  ...``; ``2`` only that line, once per epoch, each after ``Epoch e/E``. A bar
  redraws itself with carriage returns, which a log file or a pipe keeps as
  ``^M`` garbage, so it is drawn only where it can be redrawn (stdout is a
  terminal, or a notebook); elsewhere ``1`` and ``"auto"`` print ``2``'s line,
  the one clean line per epoch Keras recommends for logs.

>>> import gputape.tf as tf, numpy as np
>>> tf.random.set_seed(0)
>>> x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
>>> y = (x[:, 0] > 0).astype("int64")
>>> model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(2)])
>>> model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
...               metrics=["accuracy"])
>>> history = model.fit(x, y, batch_size=32, epochs=20, verbose=0)
>>> history.history["loss"][-1] < history.history["loss"][0], history.history["accuracy"][-1] > 0.9
(True, True)
>>> loss, acc = model.evaluate(x, y, verbose=0); acc > 0.9
True
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import optim as _optim
from .. import random as _random
from ..core.tape import GputapeWarning, GradientTape
from ..core.tensor import Tensor, constant
from ..devices.backend import to_host
from ..devices.placement import current_device
from ..ops import mean as _mean
from . import callbacks as _callbacks
from . import losses as _losses
from . import metrics as _metrics

__all__ = ["Trainer"]

_OPTIMIZERS: dict[str, Callable[[], _optim.Optimizer]] = {
    "adam": _optim.Adam,
    "adamw": _optim.AdamW,
    "sgd": _optim.SGD,
    "rmsprop": _optim.RMSprop,
}


def _get_optimizer(identifier: Any) -> _optim.Optimizer:
    if isinstance(identifier, str):
        make = _OPTIMIZERS.get(identifier.lower())
        if make is None:
            raise ValueError(
                f"compile: unknown optimizer {identifier!r}; use one of {sorted(_OPTIMIZERS)} or an optimizer object "
                "(tf.keras.optimizers.Adam(learning_rate=...))"
            )
        return make()  # Keras' defaults for each
    if isinstance(identifier, _optim.Optimizer):
        return identifier
    raise TypeError(f"compile: optimizer must be a name or a gt.optim optimizer, got {type(identifier).__name__}")


# -- nested data ---------------------------------------------------------------------------------


# (the functional API's too: gputape.tf.keras.Model imports these two)
def _flatten(s: Any) -> list[Any]:
    if isinstance(s, dict):
        return [leaf for k in sorted(s) for leaf in _flatten(s[k])]
    if isinstance(s, (list, tuple)):
        return [leaf for v in s for leaf in _flatten(v)]
    return [s]


def _map(fn: Callable[[Any], Any], s: Any) -> Any:
    if isinstance(s, dict):
        return {k: _map(fn, v) for k, v in s.items()}
    if isinstance(s, (list, tuple)):
        return type(s)(_map(fn, v) for v in s)
    return fn(s)


def _host(a: Any) -> np.ndarray:
    return to_host(a._data) if isinstance(a, Tensor) else np.asarray(a)


def _is_batches(x: Any) -> bool:
    """An iterable of batches (a Dataset, a DataLoader, a generator) rather than arrays."""
    if x is None or isinstance(x, (np.ndarray, Tensor, list, tuple, dict)) or hasattr(x, "__array__"):
        return False
    return hasattr(x, "__iter__")


def _num_samples(x: Any, who: str) -> int:
    sizes = {int(np.shape(a)[0]) if np.ndim(a) else 1 for a in _flatten(x)}  # shapes only: no device copy
    if len(sizes) != 1:
        raise ValueError(f"{who}: every input must have the same number of samples, got sizes {sorted(sizes)}")
    return sizes.pop()


def _arrays(x: Any) -> Any:
    if isinstance(x, (list, tuple)) and not any(isinstance(a, (np.ndarray, Tensor)) for a in _flatten(x)):
        return np.asarray(x)  # nested lists of numbers are one array (labels [0, 1, 1]), not several inputs
    return _map(lambda a: a if isinstance(a, Tensor) else np.asarray(a), x)


def _take(x: Any, index: Any) -> Any:
    return _map(lambda a: a[index], x)


class _Batches:
    """The batches of ``x``/``y`` (and sample weights): arrays sliced by ``batch_size``, or an iterable as it is.

    Each item is ``(x, y, sample_weight)`` (``y``, ``sample_weight`` None where absent). :meth:`epoch`
    gives one epoch's batches: all of them, or ``steps`` of them; with ``carry_on`` (fit's
    ``steps_per_epoch``) an epoch continues the iterator the last one left, as Keras' EpochIterator.
    """

    def __init__(
        self,
        who: str,
        x: Any,
        y: Any,
        batch_size: int | None,
        shuffle: bool = False,
        sample_weight: Any = None,
        class_weight: Any = None,
        steps: int | None = None,
        carry_on: bool = False,
    ) -> None:
        self.who = who
        self.class_weight = _check_class_weight(who, class_weight, sample_weight)
        self.steps_limit = _check_steps(who, "steps_per_epoch" if carry_on else "steps", steps)
        self.carry_on = carry_on
        self._it: Any = None
        self._seen = 0
        if _is_batches(x):
            if y is not None or sample_weight is not None:
                raise ValueError(
                    f"{who}: y and sample_weight must be None when x is a dataset of (x, y[, sample_weight]) batches"
                )
            self.source, self.n, self.num_batches, self.size = x, None, _len_or_none(x), None
            self.steps = self.steps_limit or self.num_batches
            return
        if x is None:
            raise ValueError(f"{who}: x is None; pass the input data (arrays, tensors, or a dataset)")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"{who}: batch_size must be a positive integer or None (32), got {batch_size!r}")
        self.source = None
        self.x, self.y = _arrays(x), None if y is None else _arrays(y)
        self.n = _num_samples(self.x, who)
        if self.y is not None and _num_samples(self.y, who) != self.n:
            raise ValueError(f"{who}: x has {self.n} samples but y has {_num_samples(self.y, who)}; they must match")
        self.sw = None if sample_weight is None else _host(sample_weight)
        if self.sw is not None and (self.sw.ndim == 0 or self.sw.shape[0] != self.n):
            raise ValueError(
                f"{who}: sample_weight must have one weight per sample ({self.n}), got shape {self.sw.shape}"
            )
        self.batch_size = self.size = batch_size or 32
        self.shuffle = shuffle
        self.num_batches = math.ceil(self.n / self.batch_size)
        self.steps = self.steps_limit or self.num_batches

    def _all(self) -> Any:
        """One pass over the data: ``(x, y, sample_weight)`` per batch, class weights applied."""
        if self.source is not None:
            for item in self.source:
                if isinstance(item, (tuple, list)) and len(item) in (2, 3):
                    x, y, sw = item[0], item[1], item[2] if len(item) == 3 else None
                else:
                    x, y, sw = item, None, None
                yield x, y, self._weighted(y, sw)
            return
        order = _random.generator().permutation(self.n) if self.shuffle else None
        for start in range(0, self.n, self.batch_size):
            index = slice(start, start + self.batch_size) if order is None else order[start : start + self.batch_size]
            y = None if self.y is None else _take(self.y, index)
            sw = None if self.sw is None else self.sw[index]
            yield _take(self.x, index), y, self._weighted(y, sw)

    def _weighted(self, y: Any, sw: Any) -> Any:
        if self.class_weight is None or y is None:
            return sw
        if sw is not None:
            raise ValueError(f"{self.who}: the dataset gives sample weights and class_weight is set; pass one of them")
        return _class_weights(_host(y), self.class_weight)

    def __iter__(self) -> Any:
        return self.epoch()

    def epoch(self) -> Any:
        if self.steps_limit is None:
            yield from self._all()
            return
        if self._it is None or not self.carry_on:
            self._it, self._seen = iter(self._all()), 0
        for _ in range(self.steps_limit):
            if self.num_batches is not None and self._seen >= self.num_batches:
                self._ran_out()
                break
            try:
                item = next(self._it)
            except StopIteration:
                if self.num_batches is None:
                    self.num_batches = self._seen
                self._it = None
                self._ran_out()
                return
            self._seen += 1
            yield item
        if self.num_batches is not None and self._seen >= self.num_batches:
            self._it = None  # used up: the next epoch starts over (and reshuffles)

    def _ran_out(self) -> None:
        warnings.warn(
            f"{self.who}: your input ran out of data; interrupting the epoch after {self._seen} batches. Make sure "
            f"that your dataset or generator can generate at least steps * epochs batches "
            f"({self.steps_limit} per epoch here); you may need .repeat() when building your dataset.",
            GputapeWarning,
            stacklevel=4,
        )


def _check_steps(who: str, name: str, steps: Any) -> int | None:
    if steps is None or steps == -1:  # Keras: -1 (or None) is "until the data runs out"
        return None
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"{who}: {name} must be a positive integer, -1 or None, got {steps!r}")
    return int(steps)


def _check_class_weight(who: str, class_weight: Any, sample_weight: Any) -> dict[int, float] | None:
    if class_weight is None:
        return None
    if sample_weight is not None:
        raise ValueError(f"{who}: you cannot pass both sample_weight and class_weight; pass one of them")
    if not isinstance(class_weight, dict) or not all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in class_weight
    ):
        raise ValueError(
            f"{who}: class_weight must be a dict {{class index (int): weight}}, got {class_weight!r:.100}"
        )
    return {int(k): float(v) for k, v in class_weight.items()}


def _class_weights(y: np.ndarray, class_weight: dict[int, float]) -> np.ndarray:
    """Keras 3's class_weight_to_sample_weights: each label's weight (1 where the dict has none)."""
    if y.ndim > 1:
        y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else np.squeeze(y, axis=-1)
    labels = np.round(y).astype(np.int64).reshape(-1)
    return np.array([class_weight.get(int(c), 1.0) for c in labels], np.float32)


def _len_or_none(x: Any) -> int | None:
    try:
        return len(x)
    except TypeError:
        return None


# -- progress ------------------------------------------------------------------------------------


def _fmt_logs(logs: dict[str, float]) -> str:
    return "".join(f" - {k}: {v:.4f}" for k, v in logs.items())


def _time_per_step(seconds: float, steps: int) -> str:
    per = seconds / max(steps, 1)
    return f"{per:.0f}s/step" if per >= 1 else f"{per * 1e3:.0f}ms/step" if per >= 1e-3 else f"{per * 1e6:.0f}us/step"


def _interactive() -> bool:
    """Whether stdout can show a redrawn bar: a terminal, or a notebook (whose stdout is no tty but renders ``\\r``)."""
    try:
        if sys.stdout.isatty():
            return True
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False
    return "ipykernel" in sys.modules


class _Progress:
    """Keras' output for one pass: a bar (verbose=1) or one line at the end (verbose=2); nothing for 0."""

    _WIDTH = 20

    def __init__(self, verbose: int, steps: int | None) -> None:
        if verbose == 1 and not _interactive():
            verbose = 2  # a log, not a screen: one line per pass, no carriage returns
        self.verbose, self.steps, self.start, self.shown = verbose, steps, time.perf_counter(), 0.0
        self.drawn = 0  # length of the text bar's last drawing, which the next one must cover
        self.bar = None
        if verbose == 1:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(
                    total=steps,
                    file=sys.stdout,
                    bar_format="{n_fmt}/{total_fmt} {bar:20} {elapsed}{desc}",
                    leave=True,
                    dynamic_ncols=False,
                )

    def update(self, step: int, logs: dict[str, float]) -> None:
        if self.verbose != 1:
            return
        if self.bar is not None:
            self.bar.set_description_str(_fmt_logs(logs), refresh=False)
            self.bar.update(step - self.bar.n)
            return
        now = time.perf_counter()
        if now - self.shown >= 0.1:  # redraw at most ten times a second
            self.shown = now
            self._draw(self._line(step, logs, final=False), "")

    def _line(self, step: int, logs: dict[str, float], final: bool) -> str:
        elapsed = time.perf_counter() - self.start
        total = self.steps if self.steps is not None else step
        timing = f"{elapsed:.0f}s {_time_per_step(elapsed, step)}"
        if self.verbose == 2:
            return f"{total}/{total} - {elapsed:.0f}s - {_time_per_step(elapsed, step)}{_fmt_logs(logs)}"
        done = self._WIDTH if final or not total else int(self._WIDTH * step / total)
        bar = "━" * done + "─" * (self._WIDTH - done)
        return f"{step:>{len(str(total))}}/{total} {bar} {timing}{_fmt_logs(logs)}"

    def finish(self, step: int, logs: dict[str, float]) -> None:
        if self.verbose == 0:
            return
        if self.bar is not None:
            self.bar.set_description_str(_fmt_logs(logs), refresh=False)
            self.bar.total = self.bar.n = step  # no update(): close() draws the final line, once
            self.bar.close()
            return
        self._draw(self._line(step, logs, final=True), "\n")

    def _draw(self, line: str, end: str) -> None:
        prefix = "\r" if self.verbose == 1 else ""
        sys.stdout.write(prefix + line.ljust(self.drawn) + end)
        sys.stdout.flush()
        self.drawn = len(line)


def _verbosity(verbose: Any, who: str) -> int:
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2) or isinstance(verbose, bool):
        raise ValueError(f"{who}: verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    return int(verbose)


class _CallbackList:
    def __init__(self, callbacks: Iterable[Any] | None, model: Any, params: dict[str, Any]) -> None:
        self.items = list(callbacks or ())
        for cb in self.items:
            if not isinstance(cb, _callbacks.Callback):
                raise TypeError(f"callbacks: expected tf.keras.callbacks.Callback objects, got {type(cb).__name__}")
            cb.set_model(model)
            cb.set_params(params)

    def __call__(self, hook: str, *args: Any) -> None:
        for cb in self.items:
            getattr(cb, hook)(*args)


# -- the mixin -----------------------------------------------------------------------------------


class Trainer:
    """``compile``/``fit``/``evaluate``/``predict`` for a layer that is a model (see the module's notes)."""

    def save(self, filepath: Any, overwrite: bool = True, zipped: Any = None, **kwargs: Any) -> None:
        """Save the whole model as Keras 3's ``.keras`` archive (config, metadata, weights); ``load_model`` reads it.

        Keras 3 reads the file too (``keras.models.load_model``), and gputape reads Keras' own.
        Needs ``pip install "gputape[h5]"``. Other suffixes are refused, as in Keras 3
        (``.h5`` is Keras 2's format, not written here).

        >>> import gputape.tf as tf, os, tempfile
        >>> _ = __import__("pytest").importorskip("h5py")
        >>> m = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
        >>> m.save(os.path.join(tempfile.mkdtemp(), "m.keras"))
        """
        import os

        from .saving import save_model

        path = os.fspath(filepath)
        if kwargs or zipped not in (None, True):
            raise TypeError(f"save: unsupported arguments {sorted(kwargs) or ['zipped=False']}")
        if not path.lower().endswith(".keras"):
            raise ValueError(
                "Invalid filepath extension for saving. Please add a `.keras` extension (Keras 3's model archive); "
                f"Keras 2's .h5 and TensorFlow's SavedModel are not written by gputape. Received: filepath={path}"
            )
        if not overwrite and os.path.exists(path):
            raise FileExistsError(f"save: {path!r} exists and overwrite=False")
        save_model(self, path)

    def compile(
        self,
        optimizer: Any = "rmsprop",
        loss: Any = None,
        loss_weights: Any = None,
        metrics: Any = None,
        weighted_metrics: Any = None,
        run_eagerly: bool = False,
        steps_per_execution: int = 1,
        jit_compile: Any = "auto",
        **kwargs: Any,
    ) -> None:
        """Set the optimizer, loss and metrics for ``fit``/``evaluate`` (by object or by Keras name).

        >>> import gputape.tf as tf
        >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        >>> model.compile(optimizer="adam", loss="mse", metrics=["mae"])
        >>> type(model.optimizer).__name__, model.loss, model.metrics_names
        ('Adam', 'mse', ['loss', 'mae'])
        """
        if kwargs:
            raise TypeError(f"compile: unexpected keyword arguments {sorted(kwargs)}")
        if loss_weights is not None or weighted_metrics is not None:
            raise NotImplementedError("compile: loss_weights and weighted_metrics are not supported")
        if isinstance(loss, (list, tuple, dict)):
            raise NotImplementedError(
                "compile: one loss for the model's one output is supported; for several outputs compute the "
                "combined loss in a custom GradientTape loop"
            )
        if not isinstance(steps_per_execution, int) or steps_per_execution < 1:
            raise ValueError(f"compile: steps_per_execution must be an integer >= 1, got {steps_per_execution!r}")
        self.optimizer = _get_optimizer(optimizer)
        self.loss = loss
        self._loss_fn = None if loss is None else _losses.get(loss)
        if isinstance(metrics, dict):
            raise NotImplementedError("compile: metrics for named outputs (a dict) are not supported; pass a list")
        listed = isinstance(metrics, (list, tuple))
        self._metric_specs = [] if metrics is None else list(metrics) if listed else [metrics]
        self._metric_objs: list[_metrics.Metric] | None = None  # made on the first batch ('accuracy' needs shapes)
        self._loss_tracker = _LossTracker(name="loss")
        self.run_eagerly = bool(run_eagerly)
        self.jit_compile = jit_compile
        self.stop_training = False
        self._compiled = True
        self._steps: dict[str, Any] = {}

    # -- what compile set ---------------------------------------------------------------------------
    def _need_compiled(self, who: str) -> None:
        if not getattr(self, "_compiled", False):
            raise RuntimeError(
                f"{type(self).__name__}.{who}: call model.compile(optimizer=..., loss=...) before {who}()"
            )
        if who != "predict" and self._loss_fn is None:
            raise ValueError(f"{type(self).__name__}.{who}: compile() was given no loss; pass loss=")

    @property
    def metrics(self) -> list[Any]:
        """The loss tracker and the compiled metrics (those made so far: ``'accuracy'`` appears on the first batch)."""
        if not getattr(self, "_compiled", False):
            return []
        return [self._loss_tracker, *(self._metric_objs or [])]

    @property
    def metrics_names(self) -> list[str]:
        """``['loss', *metric names]`` in the order ``evaluate`` returns them."""
        if not getattr(self, "_compiled", False):
            return []
        if self._metric_objs is not None:
            return [m.name for m in self.metrics]
        return ["loss", *(_metric_name(m) for m in self._metric_specs)]

    def reset_metrics(self) -> None:
        """Reset the loss tracker and every compiled metric (``fit`` does it each epoch, ``evaluate`` at its start)."""
        for m in self.metrics:
            m.reset_state()

    def _eager(self) -> bool:
        return self.run_eagerly or self.jit_compile is False

    def _step(self, kind: str, size: int | None = None) -> Callable[..., Any]:
        # One compiled function per kind and batch size: each traces its full batches and the last,
        # smaller one, instead of one function retraced (and warning) for every size fit, evaluate
        # and predict are called with.
        fn = self._steps.get((kind, size))
        if fn is None:
            body = {"train": self._train_body, "test": self._test_body, "predict": self._predict_body}[kind]
            if self._eager():
                fn = body
            else:
                from ..function import function

                fn = function(body)
            self._steps[(kind, size)] = fn
        return fn

    # -- the step bodies (run eagerly or traced by gt.function) ------------------------------------------
    def _total_loss(self, y: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        if sample_weight is None:
            loss = self._loss_fn(y, y_pred)
        elif isinstance(self._loss_fn, _losses.Loss):
            loss = self._loss_fn(y, y_pred, sample_weight=sample_weight)
        else:  # a function of per-example values: weighted and reduced as a Loss would (Keras wraps it in one)
            loss = _FunctionLoss(self._loss_fn)(y, y_pred, sample_weight=sample_weight)
        if getattr(loss, "ndim", 0):  # a function's per-example values, or reduction='none': their mean
            loss = _mean(loss)
        for extra in self.losses:
            loss = loss + extra
        return loss

    def _train_body(self, x: Any, y: Any, sample_weight: Any = None) -> Any:
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self._total_loss(y, y_pred, sample_weight)
        weights = self.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
        return loss, y_pred

    def _test_body(self, x: Any, y: Any, sample_weight: Any = None) -> Any:
        y_pred = self(x, training=False)
        return self._total_loss(y, y_pred, sample_weight), y_pred

    def _predict_body(self, x: Any) -> Any:
        return self(x, training=False)

    # -- one batch ---------------------------------------------------------------------------------------
    def _to_device(self, data: Any) -> Any:
        dev = self.__dict__.get("_device") or current_device()
        return _map(lambda a: a if isinstance(a, Tensor) else constant(np.asarray(a), device=dev), data)

    def _prepare(self, x: Any) -> Any:
        x = self._to_device(x)
        if not self.built:  # build eagerly, so that no Variable is created while a step is traced
            self(_map(lambda a: a[:1], x), training=False)
        return x

    def _run_batch(self, kind: str, x: Any, y: Any, size: int | None = None, sample_weight: Any = None) -> None:
        if y is None:
            raise ValueError(f"{type(self).__name__}.fit/evaluate: the data has no targets y")
        x, y = self._prepare(x), self._to_device(y)
        if sample_weight is None:
            loss, y_pred = self._step(kind, size)(x, y)
        else:
            loss, y_pred = self._step(kind, size)(x, y, self._to_device(sample_weight))
        n = len(_flatten(x)[0])
        self._loss_tracker.add(float(loss), n)
        if self._metric_objs is None:
            self._metric_objs = [_metrics.get(m, _host(y), _host(y_pred)) for m in self._metric_specs]
        if self._metric_objs:
            t, p = _host(y), _host(y_pred)
            for m in self._metric_objs:
                m.update_state(t, p)

    def _logs(self, prefix: str = "") -> dict[str, float]:
        return {prefix + m.name: float(m.result()) for m in self.metrics}

    def train_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None, class_weight: Any = None,
                       return_dict: bool = False) -> Any:  # fmt: skip
        """One training step on one batch; returns the running loss (and metrics) since the last reset.

        >>> import gputape.tf as tf, numpy as np
        >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="zeros")])
        >>> model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        >>> float(model.train_on_batch(np.ones((4, 2)), np.ones((4, 1))))
        1.0
        """
        self._need_compiled("train_on_batch")
        who = f"{type(self).__name__}.train_on_batch"
        class_weight = _check_class_weight(who, class_weight, sample_weight)
        if class_weight is not None and y is not None:
            sample_weight = _class_weights(_host(_arrays(y)), class_weight)
        self._run_batch("train", x, y, None, sample_weight)
        return self._result(return_dict)

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None, return_dict: bool = False) -> Any:
        """The loss (and metrics) on one batch, with ``training=False``; the running values since the last reset.

        >>> import gputape.tf as tf, numpy as np
        >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="zeros")])
        >>> model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        >>> model.test_on_batch(np.ones((4, 2)), np.full((4, 1), 2.0))
        [4.0, 2.0]
        """
        self._need_compiled("test_on_batch")
        self._run_batch("test", x, y, None, sample_weight)
        return self._result(return_dict)

    def _result(self, return_dict: bool) -> Any:
        logs = self._logs()
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    # -- fit -----------------------------------------------------------------------------------------------
    def fit(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose: Any = "auto",
        callbacks: Iterable[Any] | None = None,
        validation_split: float = 0.0,
        validation_data: Any = None,
        shuffle: bool = True,
        class_weight: Any = None,
        sample_weight: Any = None,
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        validation_steps: int | None = None,
        validation_batch_size: int | None = None,
        validation_freq: int = 1,
    ) -> _callbacks.History:
        """Train for ``epochs`` epochs (from ``initial_epoch``); returns a :class:`History` of the per-epoch logs.

        ``validation_data`` is ``(x_val, y_val[, sample_weight_val])`` or a
        dataset of batches; ``validation_split`` holds out the last fraction of
        ``x``/``y`` (and ``sample_weight``) instead, before any shuffling.
        Validation runs after each epoch (every ``validation_freq`` epochs,
        at most ``validation_steps`` batches) and adds ``val_loss`` and
        ``val_<metric>`` to the logs. ``sample_weight`` (one weight per sample)
        or ``class_weight`` (``{class: weight}``) weight the loss as Keras 3
        does; ``steps_per_epoch`` makes each epoch that many batches, the next
        epoch continuing where the last stopped (see the module's notes).

        >>> import gputape.tf as tf, numpy as np
        >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        >>> model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        >>> h = model.fit(np.ones((64, 3)), np.ones((64, 1)), epochs=3, verbose=2)  # doctest: +ELLIPSIS
        Epoch 1/3
        2/2 - ...s - ...s/step - loss: ...
        Epoch 2/3
        ...
        >>> len(h.history["loss"]), h.history["loss"][-1] < h.history["loss"][0]
        (3, True)
        """
        who = f"{type(self).__name__}.fit"
        self._need_compiled("fit")
        if not (isinstance(epochs, int) and isinstance(initial_epoch, int) and initial_epoch >= 0):
            raise ValueError(f"{who}: epochs and initial_epoch must be ints >= 0, got {epochs!r}, {initial_epoch!r}")
        if not isinstance(validation_freq, int) or validation_freq < 1:
            raise ValueError(f"{who}: validation_freq must be an integer >= 1, got {validation_freq!r}")
        level = _verbosity(verbose, who)
        if not 0.0 <= float(validation_split) < 1.0:
            raise ValueError(f"{who}: validation_split must be in [0, 1), got {validation_split!r}")
        if validation_split and validation_data is None:
            if _is_batches(x):
                raise ValueError(f"{who}: validation_split needs arrays; with a dataset pass validation_data")
            x, y = _arrays(x), _arrays(y)
            n = _num_samples(x, who)
            cut = int(n * (1.0 - validation_split))  # Keras: the last samples, before any shuffling
            if cut in (0, n):
                raise ValueError(f"{who}: validation_split={validation_split} of {n} samples leaves a split empty")
            sw = None if sample_weight is None else _host(sample_weight)
            validation_data = (
                _take(x, slice(cut, None)),
                _take(y, slice(cut, None)),
                None if sw is None else sw[cut:],
            )
            x, y = _take(x, slice(0, cut)), _take(y, slice(0, cut))
            sample_weight = None if sw is None else sw[:cut]
        train = _Batches(
            who,
            x,
            y,
            batch_size,
            shuffle=bool(shuffle),
            sample_weight=sample_weight,
            class_weight=class_weight,
            steps=steps_per_epoch,
            carry_on=True,
        )
        val = None
        if validation_data is not None:
            if _is_batches(validation_data):
                val = _Batches(who, validation_data, None, None, steps=validation_steps)
            elif isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3):
                val_sw = validation_data[2] if len(validation_data) == 3 else None
                val = _Batches(
                    who,
                    validation_data[0],
                    validation_data[1],
                    validation_batch_size or batch_size,
                    sample_weight=val_sw,
                    steps=validation_steps,
                )
            else:
                raise ValueError(
                    f"{who}: validation_data must be (x_val, y_val), (x_val, y_val, sample_weight_val) or a dataset "
                    "of (x, y) batches"
                )

        self._steps = {}  # trace afresh: trainable flags may have changed since the last fit
        history = _callbacks.History()
        cbs = _CallbackList(
            [*(callbacks or ()), history], self, {"verbose": level, "epochs": epochs, "steps": train.steps}
        )
        self.history = history
        self.stop_training = False
        self._initial_epoch = None  # a callback (BackupAndRestore) may set it in on_train_begin, as in Keras
        batch_hooks = bool(callbacks)  # History needs only the epochs' logs
        cbs("on_train_begin", None)
        initial_epoch = self._initial_epoch or initial_epoch
        logs: dict[str, float] = {}
        for epoch in range(initial_epoch, epochs):
            self.reset_metrics()
            cbs("on_epoch_begin", epoch, None)
            if level:
                print(f"Epoch {epoch + 1}/{epochs}")
            bar = _Progress(level, train.steps)
            step = 0
            for step, (xb, yb, swb) in enumerate(train.epoch(), 1):
                if batch_hooks:
                    cbs("on_train_batch_begin", step - 1, None)
                self._run_batch("train", xb, yb, train.size, swb)
                if batch_hooks or bar.verbose == 1:  # the running means cost a conversion per metric: only when shown
                    logs = self._logs()
                    cbs("on_train_batch_end", step - 1, logs)
                    bar.update(step, logs)
                if self.stop_training:
                    break
            if step == 0 and train.steps_limit is None:
                raise ValueError(f"{who}: the training data has no batches")
            logs = self._logs()
            if val is not None and (epoch + 1 - initial_epoch) % validation_freq == 0:
                cbs("on_test_begin", None)
                val_logs = self._evaluate(val, prefix="", cbs=cbs if batch_hooks else None)
                cbs("on_test_end", val_logs)
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
            bar.finish(step, logs)
            cbs("on_epoch_end", epoch, logs)
            if self.stop_training:
                break
        cbs("on_train_end", logs)
        return history

    # -- evaluate / predict ------------------------------------------------------------------------------
    def _evaluate(self, batches: _Batches, prefix: str, cbs: _CallbackList | None, level: int = 0) -> dict:
        self.reset_metrics()
        bar = _Progress(level, batches.steps)
        step = 0
        for step, (xb, yb, swb) in enumerate(batches.epoch(), 1):
            if cbs is not None:
                cbs("on_test_batch_begin", step - 1, None)
            self._run_batch("test", xb, yb, batches.size, swb)
            if cbs is not None:
                cbs("on_test_batch_end", step - 1, self._logs())
            bar.update(step, self._logs())
        if step == 0:
            if batches.steps_limit is not None:  # ran out at once (warned): nothing to report
                return {}
            raise ValueError(f"{type(self).__name__}.evaluate: the data has no batches")
        bar.finish(step, self._logs())
        return self._logs(prefix)

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        verbose: Any = "auto",
        sample_weight: Any = None,
        steps: int | None = None,
        callbacks: Iterable[Any] | None = None,
        return_dict: bool = False,
    ) -> Any:
        """The loss (and metrics) over the data with ``training=False``: a float, ``[loss, *metrics]`` or a dict.

        >>> import gputape.tf as tf, numpy as np
        >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="zeros")])
        >>> model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        >>> model.evaluate(np.ones((5, 2)), np.full((5, 1), 3.0), verbose=0, return_dict=True)
        {'loss': 9.0, 'mae': 3.0}
        """
        who = f"{type(self).__name__}.evaluate"
        self._need_compiled("evaluate")
        level = _verbosity(verbose, who)
        batches = _Batches(who, x, y, batch_size, sample_weight=sample_weight, steps=steps)
        cbs = _CallbackList(callbacks, self, {"verbose": level, "steps": batches.steps})
        cbs("on_test_begin", None)
        logs = self._evaluate(batches, "", cbs, level)
        cbs("on_test_end", logs)
        return self._result(return_dict)

    def predict(self, x: Any, batch_size: int | None = None, verbose: Any = "auto", steps: Any = None,
                callbacks: Iterable[Any] | None = None) -> Any:  # fmt: skip
        """Run the model on ``x`` in batches with ``training=False``; numpy arrays, concatenated over the batches.

        Works before ``compile`` too (eagerly then). A model with several
        outputs gives the same structure of arrays.

        >>> import gputape.tf as tf
        >>> tf.keras.Sequential([tf.keras.layers.Dense(2)]).predict(tf.ones((5, 3)), verbose=0).shape
        (5, 2)
        """
        who = f"{type(self).__name__}.predict"
        level = _verbosity(verbose, who)
        batches = _Batches(who, x, None, batch_size, steps=steps)
        cbs = _CallbackList(callbacks, self, {"verbose": level, "steps": batches.steps})
        step_fn = self._step("predict", batches.size) if getattr(self, "_compiled", False) else self._predict_body
        cbs("on_predict_begin", None)
        bar = _Progress(level, batches.steps)
        outs = []
        for step, (xb, _, _) in enumerate(batches.epoch(), 1):
            cbs("on_predict_batch_begin", step - 1, None)
            out = step_fn(self._prepare(xb))
            outs.append(_map(_host, out))
            cbs("on_predict_batch_end", step - 1, {"outputs": outs[-1]})
            bar.update(step, {})
        if not outs:
            raise ValueError(f"{who}: the data has no batches")
        bar.finish(len(outs), {})
        cbs("on_predict_end", None)
        flat = [_flatten(o) for o in outs]
        joined = iter([np.concatenate([f[k] for f in flat]) for k in range(len(flat[0]))])
        return _map(lambda _: next(joined), outs[0])


class _LossTracker(_metrics.Mean):
    """The running mean of the batches' losses, weighted by batch size (Keras' loss tracker), without
    the per-sample bookkeeping of ``update_state``: one float per batch."""

    def add(self, value: float, n: int) -> None:
        self.total += value * n
        self.count += n


def _metric_name(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    return getattr(spec, "name", None) or getattr(spec, "__name__", type(spec).__name__)


class _FunctionLoss(_losses.Loss):
    """A loss function ``fn(y_true, y_pred)`` as a Loss, so sample weights weight and reduce it as Keras'
    LossFunctionWrapper does (the one implementation in ``Loss.__call__``)."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name=getattr(fn, "__name__", None))
        self.fn = fn

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return self.fn(y_true, y_pred)
