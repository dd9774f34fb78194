"""The array-module seam: the only module in gputape that may import cupy.

Everything else asks this module which array module (``numpy`` or ``cupy``) an
array or a device belongs to, so ops are written once against ``xp`` and run on
both. CuPy is optional: with numpy alone installed every function here works
and the only device is ``"cpu"``.

The CPU fast path matters: :func:`xp_of` is called on every op, so it tests
``type(a) is numpy.ndarray`` before anything else and never touches cupy for
numpy arrays.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

_log = logging.getLogger("gputape")

ndarray = np.ndarray

_cupy: Any = None  # the cupy module once imported, False when unavailable
_cupy_error: str | None = None


def _load_cupy() -> Any:
    """Import cupy once; remember why it failed so errors can say so."""
    global _cupy, _cupy_error
    if _cupy is None:
        try:
            import cupy

            _cupy = cupy
        except Exception as exc:  # ImportError, or a broken CUDA install
            _cupy = False
            _cupy_error = f"cupy is not importable ({type(exc).__name__}: {exc})"
            _log.debug("gputape: %s; using the CPU", _cupy_error)
    return _cupy


def xp_of(a: Any) -> Any:
    """Return the array module (numpy or cupy) that owns array ``a``.

    >>> import numpy as np
    >>> xp_of(np.zeros(2)) is np
    True
    """
    if type(a) is ndarray or isinstance(a, (np.generic, float, int, bool)):
        return np
    cp = _cupy if _cupy is not None else _load_cupy()
    if cp and isinstance(a, cp.ndarray):
        return cp
    return np


def device_of(a: Any) -> str:
    """Name the device that holds array ``a``: ``"cpu"`` or ``"cuda:N"``.

    >>> import numpy as np
    >>> device_of(np.zeros(2))
    'cpu'
    """
    if type(a) is ndarray:
        return "cpu"
    cp = _cupy if _cupy is not None else _load_cupy()
    if cp and isinstance(a, cp.ndarray):
        return f"cuda:{a.device.id}"
    return "cpu"


def parse_device(name: str) -> str:
    """Normalise a device name (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"gpu"``).

    >>> parse_device("CPU"), parse_device("cuda")
    ('cpu', 'cuda:0')
    """
    if not isinstance(name, str):
        raise TypeError(f"device must be a string like 'cpu' or 'cuda:0', got {name!r}")
    n = name.strip().lower()
    if n in ("cpu", "/cpu:0", "cpu:0"):
        return "cpu"
    if n in ("cuda", "gpu"):
        return "cuda:0"
    for prefix in ("cuda:", "gpu:", "/gpu:"):
        if n.startswith(prefix) and n[len(prefix) :].isdigit():
            return f"cuda:{int(n[len(prefix) :])}"
    raise ValueError(f"unknown device {name!r}: use 'cpu', 'cuda' or 'cuda:N'")


def cuda_unavailable_reason() -> str | None:
    """Say why no CUDA device can be used, or return None when one works."""
    cp = _load_cupy()
    if not cp:
        return _cupy_error or "cupy is not installed (pip install 'gputape[cuda12]' or '[cuda13]')"
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"the CUDA driver did not answer ({type(exc).__name__}: {exc})"
    if n == 0:
        return "CUDA reports no devices"
    return None


def default_device() -> str:
    """The device new tensors go to: ``GPUTAPE_DEVICE`` if set, else ``"cpu"``.

    The GPU backend (a separate piece of work) turns the default to the GPU
    when one answers; until then an explicit ``GPUTAPE_DEVICE=cuda`` is honoured
    only if cupy and a device are present, and otherwise raises with the reason.

    >>> default_device() in ("cpu", "cuda:0")
    True
    """
    env = os.environ.get("GPUTAPE_DEVICE")
    if not env:
        return "cpu"
    dev = parse_device(env)
    if dev != "cpu":
        why = cuda_unavailable_reason()
        if why is not None:
            raise RuntimeError(f"GPUTAPE_DEVICE={env!r} asks for a GPU but {why}; unset it or use 'cpu'")
    return dev


def xp_for_device(device: str) -> Any:
    """The array module that allocates on ``device``.

    >>> import numpy as np
    >>> xp_for_device("cpu") is np
    True
    """
    if device == "cpu":
        return np
    why = cuda_unavailable_reason()
    if why is not None:
        raise RuntimeError(f"device {device!r} is not usable: {why}")
    return _cupy


def asarray_on(value: Any, device: str, dtype: Any = None) -> Any:
    """Convert ``value`` to an array of the module that owns ``device``."""
    if device == "cpu":
        if type(value) is not ndarray and xp_of(value) is not np:
            value = value.get()  # cupy -> host
        return np.asarray(value, dtype=dtype)
    xp = xp_for_device(device)
    with xp.cuda.Device(int(device.split(":")[1])):
        return xp.asarray(value, dtype=dtype)


def to_host(a: Any) -> np.ndarray:
    """Copy an array to host numpy (no copy for numpy arrays)."""
    if type(a) is ndarray:
        return a
    if xp_of(a) is np:
        return np.asarray(a)
    return a.get()
