"""numpy.linalg's functions, differentiable (``gt.linalg``); implemented in :mod:`gputape.ops.linalg`."""

from .ops.linalg import *  # noqa: F403
from .ops.linalg import __all__  # noqa: F401
