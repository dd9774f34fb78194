"""Keras callbacks for ``model.fit``: ``Callback``, ``History``, ``EarlyStopping``, ``ModelCheckpoint``.

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

import math
import warnings
from typing import Any

import numpy as np

from ..core.tape import GputapeWarning

__all__ = ["Callback", "EarlyStopping", "History", "LambdaCallback", "ModelCheckpoint"]


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
