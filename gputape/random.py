"""Random tensors (``gt.random``), from one seeded numpy Generator.

>>> import gputape as gt
>>> gt.random.seed(0)
>>> a = gt.random.normal((2,)).numpy()
>>> gt.random.seed(0)
>>> bool((a == gt.random.normal((2,)).numpy()).all())
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import backend
from .device import current_device
from .tensor import Tensor, _wrap

_rng = np.random.default_rng()


def seed(n: int) -> None:
    """Reseed the generator behind ``normal`` and ``uniform`` (reproducible runs).

    >>> import gputape as gt
    >>> gt.random.seed(42)
    """
    global _rng
    _rng = np.random.default_rng(n)


def generator() -> np.random.Generator:
    """The numpy Generator behind ``normal``/``uniform`` (initializers and dropout draw from it too).

    >>> import gputape as gt
    >>> gt.random.seed(0)
    >>> a = gt.random.generator().integers(100)
    >>> gt.random.seed(0)
    >>> bool(a == gt.random.generator().integers(100))
    True
    """
    return _rng


def _place(a: np.ndarray, device: str | None) -> Tensor:
    dev = backend.parse_device(device) if device else current_device()
    return _wrap(a if dev == "cpu" else backend.asarray_on(a, dev))


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def normal(
    shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = "float32", device: str | None = None
) -> Tensor:
    """Samples from N(mean, stddev**2), float32 by default.

    >>> import gputape as gt
    >>> gt.random.normal((2, 3)).shape
    (2, 3)
    """
    t = _place(_rng.normal(mean, stddev, _shape(shape)).astype(dtype), device)
    _traced(_draw, ("normal", (mean, stddev, _shape(shape)), dtype, t.device), t)
    return t


def uniform(
    shape: Any, minval: float = 0.0, maxval: float = 1.0, dtype: Any = "float32", device: str | None = None
) -> Tensor:
    """Samples from U[minval, maxval), float32 by default.

    >>> import gputape as gt
    >>> bool((gt.random.uniform((100,)).numpy() < 1).all())
    True
    """
    t = _place(_rng.uniform(minval, maxval, _shape(shape)).astype(dtype), device)
    _traced(_draw, ("uniform", (minval, maxval, _shape(shape)), dtype, t.device), t)
    return t


def _traced(fn: Any, args: tuple, t: Tensor) -> None:
    from . import tape

    tape.traced(fn, args, t._data)  # a gt.function replay draws fresh numbers each call


def _draw(kind: str, args: tuple, dtype: Any, device: str) -> Any:
    a = getattr(_rng, kind)(*args).astype(dtype)
    return a if device == "cpu" else backend.asarray_on(a, device)
