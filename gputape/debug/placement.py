"""Where values live and what crosses the bus: the placement log and the transfer counters.

``log_device_placement(True)`` (TensorFlow's ``tf.debugging.set_log_device_placement``)
logs, through the ``logging`` module (logger ``gputape.devices.placement``, level INFO), the device
of each op the first time it runs at a call site: once per (op, file:line, device), so a
training loop logs its first step and then stays quiet. It is an entry on this thread's
observer stack, like ``check_numerics``: it sees this thread's ops only, and costs nothing
once switched off. While nothing else handles the logger, turning the log on attaches one
handler that prints to stderr, so the lines show as TensorFlow's do.

``transfer_stats()`` counts the host->device and device->host copies gputape made (and
their bytes) since ``reset_transfer_stats()``, in every thread; ``gt.memory_info()``
reports the same numbers under ``"transfers"``. Every copy goes through
``gputape.devices.backend``, which counts it (two integer adds on a per-thread list).

>>> import gputape as gt
>>> gt.debug.reset_transfer_stats()
>>> _ = gt.constant([1.0, 2.0], device="cpu") * 2   # the CPU: nothing to copy
>>> gt.debug.transfer_stats()["host_to_device"]
0
"""

from __future__ import annotations

import logging
from typing import Any

from ..core import state as _state
from ..core.tape import _where
from ..devices import backend

__all__ = ["log_device_placement", "reset_transfer_stats", "transfer_stats"]

log = logging.getLogger("gputape.devices.placement")
_handler: logging.Handler | None = None


def transfer_stats() -> dict[str, int]:
    """Host->device and device->host copies and bytes since the last :func:`reset_transfer_stats`.

    Keys: ``host_to_device``, ``host_to_device_bytes``, ``device_to_host``,
    ``device_to_host_bytes``. GPU-to-GPU (peer) copies are neither and are not counted.

    >>> import gputape as gt
    >>> sorted(gt.debug.transfer_stats())
    ['device_to_host', 'device_to_host_bytes', 'host_to_device', 'host_to_device_bytes']
    """
    return backend.transfer_stats()


def reset_transfer_stats() -> None:
    """Start counting transfers from zero (every thread's counters).

    >>> import gputape as gt
    >>> gt.debug.reset_transfer_stats(); gt.debug.transfer_stats()["device_to_host"]
    0
    """
    backend.reset_transfer_stats()


class _Log:
    """The observer entry: remembers the (op, call site, device) triples already logged."""

    observes = "placement"

    def __init__(self) -> None:
        self.seen: set[tuple[str, str | None, str]] = set()

    def op(self, name: str, res: Any) -> None:
        first = res if not isinstance(res, (list, tuple)) else (res[0] if res else None)
        if first is None:
            return
        dev = backend.device_of(first._data)
        where = _where()  # the user's file:line (the first frame outside gputape)
        key = (name, where, dev)
        if key not in self.seen:
            self.seen.add(key)
            log.info("gt.%s on %s (%s)", name, dev, where or "?")


class _Restore:
    """What :func:`log_device_placement` returns: ``with`` it, the previous setting comes back."""

    __slots__ = ("_was",)

    def __init__(self, was: bool) -> None:
        self._was = was

    def __enter__(self) -> _Restore:
        return self

    def __exit__(self, *exc: Any) -> None:
        log_device_placement(self._was)


def _current() -> _Log | None:
    obs = _state.tls.obs
    return None if obs is None else obs.placement


def log_device_placement(enabled: bool = True) -> _Restore:
    """Log each op's device once per (op, call site) in this thread (False: stop).

    A call switches the log for the calling thread until the next call; used in a
    ``with`` block it is switched back when the block ends. The lines go to the logger
    ``gputape.devices.placement`` at INFO: ``gt.matmul on cuda:0 (train.py:12)``.

    >>> import gputape as gt, logging
    >>> with gt.debug.log_device_placement(True):
    ...     y = gt.constant([1.0], device="cpu") * 2          # logs "gt.multiply on cpu (...)"
    >>> gt.debug.log_device_placement(False) is not None
    True
    """
    global _handler
    entry = _current()
    was = entry is not None
    if enabled and entry is None:
        if log.level == logging.NOTSET:
            log.setLevel(logging.INFO)
        if not log.hasHandlers() and _handler is None:
            _handler = logging.StreamHandler()
            _handler.setFormatter(logging.Formatter("%(message)s"))
            log.addHandler(_handler)
        _state.push(_Log())
    elif not enabled:
        while entry is not None:  # every switch of this thread: off means off
            _state.pop(entry)
            entry = _current()
    return _Restore(was)
