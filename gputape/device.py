"""Device placement: which device new tensors go to.

This module owns the current-device state (thread-local, like the tape stack).
The GPU memory manager (pools, limits, release statistics) will live here too;
on the CPU the only device is ``"cpu"``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from . import backend

_tls = threading.local()


def current_device() -> str:
    """The device that new tensors are placed on in this thread.

    >>> import gputape as gt
    >>> gt.current_device()
    'cpu'
    """
    dev = getattr(_tls, "device", None)
    if dev is None:
        dev = backend.default_device()
        _tls.device = dev
    return dev


@contextlib.contextmanager
def device(name: str) -> Iterator[str]:
    """Place tensors created inside the block on ``name`` (``'cpu'``, ``'cuda:N'``).

    >>> import gputape as gt
    >>> with gt.device("cpu"):
    ...     gt.constant(1.0).device
    'cpu'
    """
    dev = backend.parse_device(name)
    if dev != "cpu":
        backend.xp_for_device(dev)  # raises with the reason when no GPU works
    prev = current_device()
    _tls.device = dev
    try:
        yield dev
    finally:
        _tls.device = prev
