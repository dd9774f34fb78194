"""``tf.keras.callbacks``: the callbacks ``model.fit`` takes; they live in :mod:`gputape.nn.callbacks`.

>>> import gputape.tf as tf
>>> tf.keras.callbacks.EarlyStopping(monitor="val_accuracy", patience=2).mode
'max'
"""

from __future__ import annotations

from ...nn.callbacks import (
    BackupAndRestore,
    Callback,
    CSVLogger,
    EarlyStopping,
    History,
    LambdaCallback,
    LearningRateScheduler,
    ModelCheckpoint,
    ReduceLROnPlateau,
    TensorBoard,
)

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

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from .._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
