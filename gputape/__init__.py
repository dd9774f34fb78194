"""gputape: tape-based reverse-mode autodiff with TensorFlow's GradientTape semantics,
on CuPy arrays on NVIDIA GPUs and numpy arrays everywhere else.

>>> import gputape as gt
>>> w = gt.Variable([1.0, 2.0])
>>> with gt.GradientTape() as tape:
...     loss = gt.sum(w * w)
>>> tape.gradient(loss, w).numpy().tolist()
[2.0, 4.0]
"""

# gt.linalg and gt.fft are the public modules gputape/linalg.py and gputape/fft.py (numpy.linalg's and
# numpy.fft's names), which re-export gputape.ops.linalg and gputape.ops.fft (gt.fft.fft is the
# transform, as np.fft.fft). Plain imports, so type checkers see the modules.
from . import config, data, debug, distributed, fft, linalg, nn, optim, random, testing
from . import ops as _ops
from .checkpoint import load, save
from .core.custom_gradient import custom_gradient, stop_gradient
from .core.dispatch import primitive
from .core.module import Module
from .core.primitive import REGISTRY
from .core.tape import GputapeWarning, GradientTape, UnconnectedGradientError, UnconnectedGradients
from .core.tensor import (
    Tensor,
    TensorShape,
    Variable,
    as_tensor,
    bool_,
    constant,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from .debug import profiler
from .devices.backend import CpuFallbackWarning
from .devices.memory import (
    empty_cache,
    from_dlpack,
    memory_info,
    reset_peak_memory,
    set_memory_limit,
)
from .devices.placement import current_device, device
from .function import Function, TracingError, function
from .ops import *  # the op library is the public namespace
from .optim.clip import clip_by_global_norm, clip_by_norm, global_norm

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022 (in the order the names were added, which keeps merges small)
    "REGISTRY",
    "GradientTape",
    "GputapeWarning",
    "CpuFallbackWarning",
    "Module",
    "Tensor",
    "TensorShape",
    "UnconnectedGradientError",
    "UnconnectedGradients",
    "Variable",
    "as_tensor",
    "bool_",
    "clip_by_global_norm",
    "clip_by_norm",
    "config",
    "constant",
    "current_device",
    "custom_gradient",
    "data",
    "debug",
    "device",
    "distributed",
    "empty_cache",
    "float16",
    "fft",
    "function",
    "Function",
    "TracingError",
    "float32",
    "float64",
    "from_dlpack",
    "global_norm",
    "int8",
    "int16",
    "int32",
    "int64",
    "linalg",
    "load",
    "memory_info",
    "nn",
    "optim",
    "primitive",
    "profiler",
    "random",
    "reset_peak_memory",
    "save",
    "set_memory_limit",
    "stop_gradient",
    "testing",
    "uint8",
]
# (a separate statement: the form of __all__ that type checkers read through, pyright's included)
__all__ += _ops.__all__
