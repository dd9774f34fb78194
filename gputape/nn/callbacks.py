"""Keras callbacks for ``model.fit``: ``Callback``, ``History``, ``EarlyStopping``, ``ModelCheckpoint``,
``ReduceLROnPlateau``, ``LearningRateScheduler``, ``CSVLogger``, ``BackupAndRestore``, ``TensorBoard``
and ``LambdaCallback``, with Keras 3's arguments, defaults and behaviour.

``fit`` calls each callback's hooks with Keras 3's arguments: ``on_train_begin(logs)``,
``on_epoch_begin(epoch, logs)``, ``on_train_batch_begin(batch, logs)``,
``on_train_batch_end(batch, logs)`` (also called as ``on_batch_end``),
``on_epoch_end(epoch, logs)`` and ``on_train_end(logs)``; ``evaluate`` calls the
``on_test_*`` ones and ``predict`` the ``on_predict_*`` ones. Epochs and batches
count from 0; ``logs`` holds the running means (``loss``, the metrics, and at the
end of an epoch ``val_*``). ``self.model`` is the model being trained; setting
``self.model.stop_training = True`` ends ``fit`` after the current batch.

>>> import gputape.tf as tf, numpy as np
>>> class Losses(tf.keras.callbacks.Callback):
...     def on_epoch_end(self, epoch, logs=None):
...         print(epoch, sorted(logs))
>>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), epochs=2, verbose=0, callbacks=[Losses()])
0 ['loss']
1 ['loss']
"""

from __future__ import annotations

import csv
import inspect
import json
import math
import os
import shutil
import time
import warnings
from typing import Any

import numpy as np

from ..core.tape import GputapeWarning
from ..core.tensor import Tensor, Variable

__all__ = [
    "BackupAndRestore",
    "CSVLogger",
    "Callback",
    "EarlyStopping",
    "History",
    "LambdaCallback",
    "LearningRateScheduler",
    "ModelCheckpoint",
    "ReduceLROnPlateau",
    "TensorBoard",
]


class Callback:
    """Base class: override the hooks you need (each receives ``logs``, a dict of floats, or None).

    >>> import gputape.tf as tf
    >>> tf.keras.callbacks.Callback().on_epoch_end(0, {"loss": 1.0}) is None
    True
    """

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def on_train_begin(self, logs: dict | None = None) -> None: ...
    def on_train_end(self, logs: dict | None = None) -> None: ...
    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None: ...
    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None: ...
    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self.on_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.on_batch_end(batch, logs)

    def on_batch_begin(self, batch: int, logs: dict | None = None) -> None: ...
    def on_batch_end(self, batch: int, logs: dict | None = None) -> None: ...
    def on_test_begin(self, logs: dict | None = None) -> None: ...
    def on_test_end(self, logs: dict | None = None) -> None: ...
    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None: ...
    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None: ...
    def on_predict_begin(self, logs: dict | None = None) -> None: ...
    def on_predict_end(self, logs: dict | None = None) -> None: ...
    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None: ...
    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class LambdaCallback(Callback):
    """A callback from functions: ``LambdaCallback(on_epoch_end=lambda epoch, logs: ...)`` and the other hooks.

    >>> import gputape.tf as tf
    >>> seen = []; cb = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(e))
    >>> cb.on_epoch_end(3, {}); seen
    [3]
    """

    def __init__(self, **hooks: Any) -> None:
        super().__init__()
        for name, fn in hooks.items():
            if not (name.startswith("on_") and hasattr(Callback, name)):
                raise TypeError(f"LambdaCallback: unknown hook {name!r}")
            setattr(self, name, fn)


class History(Callback):
    """What ``fit`` returns: ``history`` maps each logged name to its per-epoch values; ``epoch`` the epochs run.

    >>> import gputape.tf as tf, numpy as np
    >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    >>> h = model.fit(np.ones((8, 2)), np.ones((8, 1)), epochs=3, validation_split=0.25, verbose=0)
    >>> sorted(h.history), [len(v) for v in h.history.values()], h.epoch
    (['loss', 'mae', 'val_loss', 'val_mae'], [3, 3, 3, 3], [0, 1, 2])
    """

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.epoch = []  # a second fit() with the same History starts over, as in Keras

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)

    def __repr__(self) -> str:
        return f"<History epochs={len(self.epoch)} keys={sorted(self.history)}>"


def _mode(owner: str, mode: str, monitor: str) -> str:
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"{owner}: mode must be 'auto', 'min' or 'max', got {mode!r}")
    if mode != "auto":
        return mode
    # Keras' 'auto': losses and errors go down; accuracies, AUC, precision and recall go up
    name = monitor.removeprefix("val_")
    return "max" if any(k in name for k in ("acc", "auc", "precision", "recall")) else "min"


class _Monitor(Callback):
    """What EarlyStopping and ModelCheckpoint share: the monitored value and when it improves."""

    def __init__(self, owner: str, monitor: str, mode: str, min_delta: float) -> None:
        super().__init__()
        self.monitor = monitor
        self.mode = _mode(owner, mode, monitor)
        if not (isinstance(min_delta, (int, float)) and math.isfinite(min_delta)):
            raise ValueError(f"{owner}: min_delta must be a finite number, got {min_delta!r}")
        self.min_delta = abs(float(min_delta))
        self._owner = owner

    def _worst(self) -> float:
        return math.inf if self.mode == "min" else -math.inf

    def _improves(self, value: float, reference: float | None) -> bool:
        if reference is None:
            return True
        if self.mode == "min":
            return value + self.min_delta < reference
        return value - self.min_delta > reference

    def _value(self, logs: dict | None) -> float | None:
        value = (logs or {}).get(self.monitor)
        if value is None:
            warnings.warn(
                f"{self._owner}: the monitored value {self.monitor!r} is not in the logs {sorted(logs or {})}; "
                "nothing is done this epoch (pass validation_data for 'val_*' values)",
                GputapeWarning,
                stacklevel=3,
            )
            return None
        return float(value)


class EarlyStopping(_Monitor):
    """Stop ``fit`` when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` epochs (Keras 3).

    Each epoch that does not improve on the best value so far adds one to a
    wait count; an improvement resets it (and, with ``baseline``, only an
    improvement on the baseline too). When the count reaches ``patience``
    training stops after that epoch (``stopped_epoch``, counted from 0), and
    with ``restore_best_weights=True`` the weights of the best epoch are put
    back (Keras 3 restores them only when it stops early). ``mode`` is
    ``'min'``, ``'max'`` or ``'auto'`` (``'max'`` for accuracies, AUC,
    precision and recall, ``'min'`` otherwise). Epochs before
    ``start_from_epoch`` are not watched.

    >>> import gputape.tf as tf
    >>> stop = tf.keras.callbacks.EarlyStopping(monitor="loss", patience=1)
    >>> class Fake:
    ...     stop_training = False
    >>> stop.set_model(Fake()); stop.on_train_begin()
    >>> for epoch, loss in enumerate([1.0, 0.5, 0.6, 0.4]):
    ...     stop.on_epoch_end(epoch, {"loss": loss})
    ...     if stop.model.stop_training:
    ...         break
    >>> stop.stopped_epoch, stop.best, stop.best_epoch
    (2, 0.5, 1)
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        min_delta: float = 0.0,
        patience: int = 0,
        verbose: int = 0,
        mode: str = "auto",
        baseline: float | None = None,
        restore_best_weights: bool = False,
        start_from_epoch: int = 0,
    ) -> None:
        super().__init__("EarlyStopping", monitor, mode, min_delta)
        if not isinstance(patience, int) or patience < 0:
            raise ValueError(f"EarlyStopping: patience must be an integer >= 0, got {patience!r}")
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = bool(restore_best_weights)
        self.start_from_epoch = int(start_from_epoch)
        self.on_train_begin()

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.wait = 0
        self.stopped_epoch = 0
        self.best: float = self._worst()
        self.best_weights: list[np.ndarray] | None = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if epoch < self.start_from_epoch:
            return
        current = self._value(logs)
        if current is None:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()  # no epoch may ever improve: keep the first
        self.wait += 1
        if self._improves(current, self.best):
            self.best, self.best_epoch = current, epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._improves(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                if self.verbose > 0:
                    print(f"Restoring model weights from the end of the best epoch: {self.best_epoch + 1}.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")

    def __repr__(self) -> str:
        return f"<EarlyStopping monitor={self.monitor!r} mode={self.mode!r} patience={self.patience}>"


class ModelCheckpoint(_Monitor):
    """Save the model after each epoch to ``filepath`` (formatted with ``epoch`` (from 1) and the logs).

    ``filepath`` may hold ``{epoch:02d}``, ``{val_loss:.2f}`` and so on. A ``.keras``
    path gets the whole model in Keras 3's archive (``model.save``), and with
    ``save_weights_only=True`` a ``.weights.h5`` path Keras 3's weights file
    (both need ``pip install "gputape[h5]"``). Other paths get gputape checkpoints
    (``gt.save``: a pickle-free ``.npz``, or ``.safetensors`` by the suffix): with
    ``save_weights_only=True`` the model's weights (``model.save_weights``; read
    back with ``model.load_weights``), otherwise the weights and the optimizer's
    state (``{'model': model, 'optimizer': model.optimizer}``; read back with
    ``gt.load(path, into=...)``). ``save_best_only=True``
    writes only when ``monitor`` improves (by ``mode``, as
    :class:`EarlyStopping`), starting from ``initial_value_threshold`` if given.

    >>> import gputape.tf as tf, numpy as np, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> ckpt = tf.keras.callbacks.ModelCheckpoint(os.path.join(folder, "w{epoch:02d}.npz"), save_weights_only=True)
    >>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), epochs=2, verbose=0, callbacks=[ckpt])
    >>> sorted(os.listdir(folder))
    ['w01.npz', 'w02.npz']
    """

    def __init__(
        self,
        filepath: Any,
        monitor: str = "val_loss",
        verbose: int = 0,
        save_best_only: bool = False,
        save_weights_only: bool = False,
        mode: str = "auto",
        save_freq: Any = "epoch",
        initial_value_threshold: float | None = None,
    ) -> None:
        super().__init__("ModelCheckpoint", monitor, mode, 0.0)
        if save_freq != "epoch":
            raise NotImplementedError("ModelCheckpoint: only save_freq='epoch' is supported")
        self.filepath = str(filepath)
        self.verbose = verbose
        self.save_best_only = bool(save_best_only)
        self.save_weights_only = bool(save_weights_only)
        self.best = initial_value_threshold if initial_value_threshold is not None else self._worst()

    def _path(self, epoch: int, logs: dict | None) -> str:
        try:
            return self.filepath.format(epoch=epoch + 1, **(logs or {}))
        except KeyError as exc:
            raise KeyError(
                f"ModelCheckpoint: filepath {self.filepath!r} names {exc.args[0]!r}, which is not 'epoch' or one of "
                f"the logs {sorted(logs or {})}"
            ) from None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        path = self._path(epoch, logs)
        if self.save_best_only:
            current = self._value(logs)
            if current is None:
                return
            if not self._improves(current, self.best):
                if self.verbose > 0:
                    print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {self.best:.5f}")
                return
            if self.verbose > 0:
                print(
                    f"\nEpoch {epoch + 1}: {self.monitor} improved from {self.best:.5f} to {current:.5f}, "
                    f"saving model to {path}"
                )
            self.best = current
        elif self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: saving model to {path}")
        if self.save_weights_only:
            self.model.save_weights(path)  # .weights.h5: Keras 3's file; other .h5 names are refused there
        elif path.lower().endswith((".keras", ".h5", ".hdf5")):
            self.model.save(path)  # Keras 3's archive (.h5, Keras 2's format, is refused there, never a zip)
        else:
            from ..checkpoint import save

            save(path, {"model": self.model, "optimizer": self.model.optimizer})

    def __repr__(self) -> str:
        return f"<ModelCheckpoint filepath={self.filepath!r} monitor={self.monitor!r} best_only={self.save_best_only}>"


def _optimizer(owner: str, model: Any) -> Any:
    opt = getattr(model, "optimizer", None)
    if opt is None or not hasattr(opt, "learning_rate"):
        raise ValueError(f"{owner}: the model's optimizer must have a learning_rate; compile the model first")
    return opt


def _current_lr(owner: str, model: Any) -> float:
    return float(_optimizer(owner, model).learning_rate)


class ReduceLROnPlateau(_Monitor):
    """Multiply the learning rate by ``factor`` when ``monitor`` has not improved for ``patience`` epochs (Keras 3).

    An epoch improves when the value beats the best so far by more than
    ``min_delta`` (by ``mode``, as :class:`EarlyStopping`). After ``patience``
    epochs without one the rate becomes ``max(lr * factor, min_lr)`` (only
    while it is above ``min_lr``), then ``cooldown`` epochs pass before the
    count starts again. The optimizer's ``learning_rate`` Variable is assigned,
    so a compiled step sees the new rate at once. Each epoch's logs get
    ``learning_rate``, as in Keras.

    >>> import gputape.tf as tf, numpy as np
    >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    >>> model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    >>> cb = tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1)
    >>> cb.set_model(model); cb.on_train_begin()
    >>> for epoch, loss in enumerate([1.0, 1.0, 1.0]):
    ...     cb.on_epoch_end(epoch, {"loss": loss})
    >>> float(model.optimizer.learning_rate)
    0.025
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        factor: float = 0.1,
        patience: int = 10,
        verbose: int = 0,
        mode: str = "auto",
        min_delta: float = 1e-4,
        cooldown: int = 0,
        min_lr: float = 0.0,
    ) -> None:
        super().__init__("ReduceLROnPlateau", monitor, mode, min_delta)
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not 0.0 <= factor < 1.0:
            raise ValueError(f"ReduceLROnPlateau does not support a factor >= 1.0 (or < 0). Received factor={factor!r}")
        for name, value in (("patience", patience), ("cooldown", cooldown)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ReduceLROnPlateau: {name} must be an integer >= 0, got {value!r}")
        if not isinstance(min_lr, (int, float)) or isinstance(min_lr, bool) or not 0.0 <= min_lr < math.inf:
            raise ValueError(f"ReduceLROnPlateau: min_lr must be a number >= 0, got {min_lr!r}")
        self.factor = float(factor)
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.min_lr = float(min_lr)
        self._reset()

    def _reset(self) -> None:
        self.best: float | None = None
        self.cooldown_counter = 0
        self.wait = 0

    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._reset()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs if logs is not None else {}
        logs["learning_rate"] = _current_lr("ReduceLROnPlateau", self.model)
        current = self._value(logs)
        if current is None:
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self._improves(current, self.best):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                opt = _optimizer("ReduceLROnPlateau", self.model)
                old = float(opt.learning_rate)
                if old > np.float32(self.min_lr):  # (Keras compares in float32)
                    new = max(old * self.factor, self.min_lr)
                    opt.learning_rate = new
                    if self.verbose > 0:
                        print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to {new}.")
                    self.cooldown_counter = self.cooldown
                    self.wait = 0

    def __repr__(self) -> str:
        return f"<ReduceLROnPlateau monitor={self.monitor!r} factor={self.factor} patience={self.patience}>"


class LearningRateScheduler(Callback):
    """Set the learning rate at the start of each epoch to ``schedule(epoch, lr)`` (or ``schedule(epoch)``).

    ``epoch`` counts from 0 and ``lr`` is the current rate; the result must be
    a float (Keras 3's rule; a Python int is refused as Keras refuses it). The
    rate goes into the optimizer's ``learning_rate`` Variable, and each epoch's
    logs get ``learning_rate``.

    >>> import gputape.tf as tf, numpy as np
    >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    >>> model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    >>> halve = tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr if epoch < 1 else lr * 0.5)
    >>> h = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=3, verbose=0, callbacks=[halve])
    >>> h.history["learning_rate"]
    [0.1, 0.05, 0.025]
    """

    def __init__(self, schedule: Any, verbose: int = 0) -> None:
        super().__init__()
        if not callable(schedule):
            raise TypeError(f"LearningRateScheduler: schedule must be a callable (epoch, lr) -> lr, got {schedule!r}")
        self.schedule = schedule
        self.verbose = verbose
        self._with_lr = _takes_two(schedule)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        opt = _optimizer("LearningRateScheduler", self.model)
        lr = self.schedule(epoch, float(opt.learning_rate)) if self._with_lr else self.schedule(epoch)
        if isinstance(lr, Tensor) and lr.ndim == 0 and lr.dtype.kind == "f":
            lr = float(lr)
        if not isinstance(lr, (float, np.floating)):
            raise ValueError(f"The output of the `schedule` function should be a float. Got: {lr!r}")
        opt.learning_rate = float(lr)
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {float(lr)}.")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is not None:
            logs["learning_rate"] = _current_lr("LearningRateScheduler", self.model)


def _takes_two(fn: Any) -> bool:
    """Whether ``fn`` can be called with two positional arguments (Keras tries and falls back on TypeError,
    which would also swallow a TypeError raised inside a two-argument schedule)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        sig.bind(0, 0.0)
    except TypeError:
        return False
    return True


class CSVLogger(Callback):
    """Stream each epoch's logs to a CSV file: a header ``epoch,<sorted keys>``, then one row per epoch (Keras 3).

    ``separator`` separates the fields; ``append=True`` adds to an existing
    file (its header is written only if the file is empty). When the first
    epoch's logs have no ``val_*`` keys, ``val_<key>`` columns are added anyway
    and hold ``NA``, as Keras writes them. Rows end with ``\\r\\n`` (the csv
    module's excel dialect, as Keras).

    >>> import gputape.tf as tf, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "log.csv")
    >>> logger = tf.keras.callbacks.CSVLogger(path)
    >>> logger.on_train_begin()
    >>> logger.on_epoch_end(0, {"loss": 0.5}); logger.on_epoch_end(1, {"loss": 0.25}); logger.on_train_end()
    >>> open(path, newline="").read()
    'epoch,loss,val_loss\\r\\n0,0.5,NA\\r\\n1,0.25,NA\\r\\n'
    """

    def __init__(self, filename: str | os.PathLike, separator: str = ",", append: bool = False) -> None:
        super().__init__()
        if not isinstance(separator, str) or len(separator) != 1:
            raise ValueError(f"CSVLogger: separator must be a one-character string, got {separator!r}")
        self.sep = separator
        self.filename = os.fspath(filename)
        self.append = bool(append)
        self.writer: Any = None
        self.keys: list[str] | None = None
        self.append_header = True
        self.csv_file: Any = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.append:
            if os.path.exists(self.filename):
                with open(self.filename) as f:
                    self.append_header = not bool(len(f.readline()))
            mode = "a"
        else:
            mode = "w"
        if self.csv_file is not None and not self.csv_file.closed:
            self.csv_file.close()
        self.csv_file = open(self.filename, mode, newline="")  # open across the epochs, as Keras
        self.writer = None
        self.keys = None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs or {}
        if self.csv_file is None or self.csv_file.closed:
            raise RuntimeError("CSVLogger: on_epoch_end before on_train_begin opened the file")
        if self.keys is None:
            self.keys = sorted(logs)
            if self.keys and not any(k.startswith("val_") for k in self.keys):
                self.keys += [f"val_{k}" for k in self.keys]
        if self.writer is None:
            sep = self.sep

            class _Dialect(csv.excel):
                delimiter = sep

            self.writer = csv.DictWriter(self.csv_file, fieldnames=["epoch", *self.keys], dialect=_Dialect)
            if self.append_header:
                self.writer.writeheader()
        row = {"epoch": epoch}
        row.update((k, _csv_value(logs.get(k, "NA"))) for k in self.keys)
        self.writer.writerow(row)
        self.csv_file.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.csv_file is not None and not self.csv_file.closed:
            self.csv_file.close()
        self.writer = None


def _csv_value(v: Any) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return v.item()
    if hasattr(v, "__iter__"):
        return f'"[{", ".join(map(str, v))}]"'
    return v


class BackupAndRestore(Callback):
    """Back up the training state to ``backup_dir`` and resume from it when ``fit`` is run again (Keras 3).

    At the end of each epoch (or every ``save_freq`` batches, an int) the
    model's weights and the optimizer's state (slots, ``iterations``) go to
    ``backup_dir/latest.weights.npz`` (gputape's checkpoint format, ``gt.save``)
    and the epoch reached, with the learning rate, to
    ``training_metadata.json``. When ``fit`` starts and a backup exists, it is
    loaded and training resumes at the epoch after the last one backed up
    (a batch-level backup resumes at the start of its epoch). Training that
    ends normally deletes the folder (``delete_checkpoint=True``); an
    interrupted one leaves it for the next run. ``double_checkpoint=True``
    keeps the previous backup (``*.bkp``) and falls back to it when the latest
    cannot be read.

    >>> import gputape.tf as tf, numpy as np, tempfile, os
    >>> folder = os.path.join(tempfile.mkdtemp(), "backup")
    >>> model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> h = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, verbose=0,
    ...               callbacks=[tf.keras.callbacks.BackupAndRestore(folder)])
    >>> h.epoch, os.path.exists(folder)
    ([0, 1], False)
    """

    def __init__(
        self,
        backup_dir: str | os.PathLike,
        save_freq: Any = "epoch",
        double_checkpoint: bool = False,
        delete_checkpoint: bool = True,
    ) -> None:
        super().__init__()
        if not backup_dir:
            raise ValueError("BackupAndRestore: empty `backup_dir` argument passed")
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(
                f"BackupAndRestore: invalid value for argument `save_freq`. Received: save_freq={save_freq!r}. "
                "Expected either 'epoch' or a positive integer."
            )
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.double_checkpoint = bool(double_checkpoint)
        self.delete_checkpoint = bool(delete_checkpoint)
        self._weights_path = os.path.join(self.backup_dir, "latest.weights.npz")
        self._training_metadata_path = os.path.join(self.backup_dir, "training_metadata.json")
        self._prev_weights_path = self._weights_path + ".bkp"
        self._prev_training_metadata_path = self._training_metadata_path + ".bkp"
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = 0
        self._current_epoch = 0

    def _state(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.model.optimizer}

    def on_train_begin(self, logs: dict | None = None) -> None:
        try:
            self._load_model()
        except (OSError, ValueError) as exc:
            if not os.path.exists(self._prev_weights_path):
                raise ValueError(
                    f"BackupAndRestore: the backup in {self.backup_dir!r} cannot be read ({exc}); delete the folder "
                    "to start over"
                ) from exc
            shutil.copyfile(self._prev_weights_path, self._weights_path)
            if os.path.exists(self._prev_training_metadata_path):
                shutil.copyfile(self._prev_training_metadata_path, self._training_metadata_path)
            elif os.path.exists(self._training_metadata_path):
                os.remove(self._training_metadata_path)
            self._load_model()

    def _load_model(self) -> None:
        if not os.path.exists(self._weights_path):
            return
        if not self.model.built:
            raise ValueError(
                "BackupAndRestore: the model must be built before fit() restores it; call it on a batch of data "
                "first"
            )
        from ..checkpoint import load

        opt = self.model.optimizer
        opt.build(self.model.trainable_variables)  # the slots the backup fills
        load(self._weights_path, into=self._state())
        if os.path.exists(self._training_metadata_path):
            with open(self._training_metadata_path) as f:
                meta = json.loads(f.read())
            self.model._initial_epoch = int(meta["epoch"])
            lr = meta.get("learning_rate")
            if lr is not None and isinstance(opt.learning_rate, Variable):
                opt.learning_rate = float(lr)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._current_epoch = epoch + 1
        self._last_batch_seen = 0
        if self.save_freq == "epoch":
            self._save_model()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.save_freq == "epoch":
            return
        added = batch + 1 if batch <= self._last_batch_seen else batch - self._last_batch_seen
        self._batches_seen_since_last_saving += added
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            self._save_model()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._current_epoch = epoch  # a batch-level backup resumes this epoch from its start

    def _save_model(self) -> None:
        from ..checkpoint import save
        from ..checkpoint.write import atomic_write

        os.makedirs(self.backup_dir, exist_ok=True)
        if self.double_checkpoint and os.path.exists(self._weights_path):
            shutil.copyfile(self._weights_path, self._prev_weights_path)
        if self.double_checkpoint and os.path.exists(self._training_metadata_path):
            shutil.copyfile(self._training_metadata_path, self._prev_training_metadata_path)
        save(self._weights_path, self._state())
        lr = self.model.optimizer.learning_rate
        meta = {
            "epoch": self._current_epoch,
            "batch": self._last_batch_seen,
            "learning_rate": float(lr) if isinstance(lr, Variable) else None,
        }
        # atomically, as the weights beside it: a kill mid-write must not leave a truncated file to resume from
        atomic_write(self._training_metadata_path, lambda f: f.write(json.dumps(meta).encode()))

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.delete_checkpoint and os.path.exists(self.backup_dir):
            shutil.rmtree(self.backup_dir)


class TensorBoard(Callback):
    """Write the logs as TensorBoard scalars (and weight histograms) to ``log_dir`` (Keras 3's layout).

    Training values go to ``log_dir/train``, validation ones to
    ``log_dir/validation``: ``epoch_<name>`` at step ``epoch`` (the
    ``val_`` prefix dropped in ``validation``; ``epoch_learning_rate`` too),
    and with ``update_freq='batch'`` or ``N`` also ``batch_<name>`` every N
    batches (step: the batch count since training began).
    ``evaluation_<name>_vs_iterations`` is written to ``validation`` after each
    evaluation, at the optimizer's step. ``histogram_freq=N`` writes each
    layer weight's histogram (``<weight name>/histogram``) every N epochs,
    ``write_steps_per_second`` the training speed. The files are written through
    ``tf.summary`` (:mod:`gputape.debug.summary`), which needs tensorboardX
    (``pip install "gputape[tensorboard]"``). There is no graph to write
    (``write_graph`` does nothing); ``write_images``, ``embeddings_freq`` and
    ``profile_batch`` are refused.

    >>> import gputape.tf as tf
    >>> tf.keras.callbacks.TensorBoard(log_dir="logs", update_freq="batch").update_freq
    1
    """

    def __init__(
        self,
        log_dir: str | os.PathLike = "logs",
        histogram_freq: int = 0,
        write_graph: bool = True,
        write_images: bool = False,
        write_steps_per_second: bool = False,
        update_freq: Any = "epoch",
        profile_batch: Any = 0,
        embeddings_freq: int = 0,
        embeddings_metadata: Any = None,
    ) -> None:
        super().__init__()
        if profile_batch:
            raise ValueError(
                f"TensorBoard: profiling is not available in gputape (use gt.debug's profiler). Received: "
                f"profile_batch={profile_batch!r} (must be 0)"
            )
        if write_images or embeddings_freq:
            raise NotImplementedError("TensorBoard: write_images and embeddings_freq are not supported")
        if isinstance(histogram_freq, bool) or not isinstance(histogram_freq, int) or histogram_freq < 0:
            raise ValueError(f"TensorBoard: histogram_freq must be an integer >= 0, got {histogram_freq!r}")
        freq = 1 if update_freq == "batch" else update_freq
        if freq != "epoch" and (isinstance(freq, bool) or not isinstance(freq, int) or freq < 1):
            raise ValueError(
                f"TensorBoard: update_freq must be 'epoch', 'batch' or an integer >= 1, got {update_freq!r}"
            )
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq = histogram_freq
        self.write_graph = write_graph
        self.write_images = write_images
        self.write_steps_per_second = bool(write_steps_per_second)
        self.update_freq = freq
        self.embeddings_freq = embeddings_freq
        self.embeddings_metadata = embeddings_metadata
        self._train_dir = os.path.join(self.log_dir, "train")
        self._val_dir = os.path.join(self.log_dir, "validation")
        self._writers: dict[str, Any] = {}
        self._global_train_batch = 0
        self._batch_start_time = 0.0
        self._epoch_start_time = 0.0
        self._epoch_start_step = 0

    def _writer(self, which: str) -> Any:
        writer = self._writers.get(which)
        if writer is None:  # made on first use, so that no empty event file appears
            from ..debug.summary import create_file_writer

            writer = self._writers[which] = create_file_writer(self._train_dir if which == "train" else self._val_dir)
        return writer

    def _scalars(self, which: str, values: dict[str, Any], prefix: str, step: int) -> None:
        from ..debug.summary import scalar

        with self._writer(which).as_default():
            for name, value in values.items():
                scalar(f"{prefix}{name}", float(value), step=step)

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._global_train_batch = 0

    def on_train_end(self, logs: dict | None = None) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self.write_steps_per_second:
            self._epoch_start_time = time.time()
            self._epoch_start_step = int(self.model.optimizer.iterations)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._global_train_batch += 1
        if self.write_steps_per_second:
            self._batch_start_time = time.time()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.update_freq == "epoch" or self._global_train_batch % self.update_freq:
            return
        values = dict(logs or {})
        if self.write_steps_per_second:
            values["steps_per_second"] = 1.0 / max(time.time() - self._batch_start_time, 1e-9)
        self._scalars("train", values, "batch_", self._global_train_batch)

    def on_test_end(self, logs: dict | None = None) -> None:
        opt = getattr(self.model, "optimizer", None)
        if opt is not None and logs:
            step = int(opt.iterations)
            self._scalars("val", {f"evaluation_{k}_vs_iterations": v for k, v in logs.items()}, "", step)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs or {}
        train = {k: v for k, v in logs.items() if not k.startswith("val_")}
        val = {k[4:]: v for k, v in logs.items() if k.startswith("val_")}
        if logs and getattr(self.model, "optimizer", None) is not None:
            train["learning_rate"] = float(self.model.optimizer.learning_rate)
        if logs and self.write_steps_per_second:
            steps = int(self.model.optimizer.iterations) - self._epoch_start_step
            train["steps_per_second"] = steps / max(time.time() - self._epoch_start_time, 1e-9)
        if train:
            self._scalars("train", train, "epoch_", epoch)
        if val:
            self._scalars("val", val, "epoch_", epoch)
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            self._log_weights(epoch)

    def _log_weights(self, epoch: int) -> None:
        from ..debug.summary import histogram

        layers = getattr(self.model, "layers", None) or [self.model]
        with self._writer("train").as_default():
            for layer in layers:
                for weight in getattr(layer, "weights", ()):
                    histogram(f"{weight.name.replace(':', '_')}/histogram", weight, step=epoch)

    def __repr__(self) -> str:
        return f"<TensorBoard log_dir={self.log_dir!r} update_freq={self.update_freq!r}>"
