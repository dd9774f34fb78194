"""``tf.keras.models``: ``load_model`` and ``save_model`` in Keras 3's ``.keras`` format.

The format and what moves between gputape and Keras 3: :mod:`gputape.nn.saving`.
(``Model`` and ``Sequential`` are ``tf.keras.Model`` and ``tf.keras.Sequential``.)

>>> import gputape.tf as tf
>>> tf.keras.models.load_model.__name__
'load_model'
"""

from __future__ import annotations

from typing import Any as _Any

from ...nn.saving import load_model

__all__ = ["load_model", "save_model"]


def save_model(model: _Any, filepath: _Any, overwrite: bool = True, **kwargs: _Any) -> None:
    """``model.save(filepath)``: Keras 3's ``.keras`` archive.

    >>> import gputape.tf as tf, os, tempfile
    >>> _ = __import__("pytest").importorskip("h5py")
    >>> m = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    >>> tf.keras.models.save_model(m, os.path.join(tempfile.mkdtemp(), "m.keras"))
    """
    model.save(filepath, overwrite=overwrite, **kwargs)


del annotations
