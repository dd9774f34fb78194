"""numpy.fft's transforms, differentiable (``gt.fft``); implemented in :mod:`gputape.ops.fft`."""

from .ops.fft import *  # noqa: F403
from .ops.fft import __all__  # noqa: F401
