"""``tf.summary``: TensorBoard event files (``create_file_writer``, ``scalar``, ``histogram``, ``text``, ...).

The writers and functions live in :mod:`gputape.debug.summary`; tensorboardX
writes the files (``pip install "gputape[tensorboard]"``).

>>> import gputape.tf as tf
>>> tf.summary.scalar("x", 1.0, step=0)  # no default writer here
False
"""

from __future__ import annotations

import types as _types

from ..debug.summary import SummaryWriter, create_file_writer, flush, histogram, scalar, text
from ..debug.summary import get_step as _get_step
from ..debug.summary import set_step as _set_step

__all__ = ["SummaryWriter", "create_file_writer", "experimental", "flush", "histogram", "scalar", "text"]

experimental = _types.SimpleNamespace(get_step=_get_step, set_step=_set_step)

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations
