"""``tf.errors``: TensorFlow's exception classes (defined in :mod:`gputape.ops.errors`, which the ops raise).

>>> import gputape.tf as tf
>>> issubclass(tf.errors.InvalidArgumentError, tf.errors.OpError)
True
"""

from ..ops.errors import *  # noqa: F403
from ..ops.errors import __all__  # noqa: F401
from ._util import missing_name as _missing_name

__getattr__ = _missing_name(__name__)
