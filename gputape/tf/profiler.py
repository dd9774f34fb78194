"""``tf.profiler.experimental``: ``start(logdir)``, ``stop()`` and the ``Profile`` context manager.

When gputape's own profiler (``gputape.debug.profiler``) is present these run it:
``stop()`` writes its Chrome trace (``trace.json``) and a per-op summary
(``summary.txt``) into ``logdir``, not TensorBoard's format. Without it,
``start`` warns (:class:`~gputape.GputapeWarning`) that nothing is recorded.

>>> import tempfile, gputape.tf as tf
>>> tf.profiler.experimental.start(tempfile.mkdtemp())  # doctest: +SKIP
>>> tf.profiler.experimental.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import importlib as _importlib
import os as _os
import types as _types
import warnings as _warnings
from typing import Any as _Any

from ..core.tape import GputapeWarning as _GputapeWarning

__all__ = ["experimental"]

_unprofiled: str | None = None  # logdir of a start() that had no profiler to run


def _backend() -> _Any:
    try:
        mod = _importlib.import_module("gputape.debug.profiler")
    except ImportError:
        return None
    return mod if hasattr(mod, "start") and hasattr(mod, "stop") else None


def _start(logdir: str | _os.PathLike[str], options: _Any = None) -> None:
    """Start profiling; the trace goes to ``logdir`` when :func:`stop` is called.

    ``options`` (TensorFlow's ``ProfilerOptions``) is accepted and ignored.

    >>> import gputape.tf as tf
    >>> callable(tf.profiler.experimental.start)
    True
    """
    global _unprofiled
    prof = _backend()
    if prof is not None:
        prof.start(logdir)
        return
    if _unprofiled is not None:
        raise RuntimeError("tf.profiler.experimental.start: a profiling session is already running; call stop() first")
    _unprofiled = _os.fspath(logdir)
    _warnings.warn(
        "tf.profiler.experimental.start: gputape's profiler is not implemented yet in this installation; "
        f"nothing is recorded and nothing will be written to {_unprofiled!r}",
        _GputapeWarning,
        stacklevel=2,
    )


def _stop(save: bool = True) -> None:
    """Stop profiling and write the results (see the module docstring).

    >>> import gputape.tf as tf
    >>> callable(tf.profiler.experimental.stop)
    True
    """
    global _unprofiled
    prof = _backend()
    if prof is not None:
        prof.stop()
        return
    if _unprofiled is None:
        raise RuntimeError("tf.profiler.experimental.stop: no profiling session is running; call start(logdir) first")
    _unprofiled = None


class _Profile:
    """``with tf.profiler.experimental.Profile(logdir):`` runs :func:`start` and :func:`stop` around a block.

    >>> import gputape.tf as tf
    >>> tf.profiler.experimental.Profile("logs").logdir
    'logs'
    """

    def __init__(self, logdir: str | _os.PathLike[str], options: _Any = None) -> None:
        self.logdir = logdir
        self.options = options

    def __enter__(self) -> _Profile:
        _start(self.logdir, self.options)
        return self

    def __exit__(self, *exc: _Any) -> None:
        _stop()


experimental = _types.SimpleNamespace(start=_start, stop=_stop, Profile=_Profile)

# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
