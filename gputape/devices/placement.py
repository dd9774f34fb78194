"""Device placement: which device an op runs on and where new tensors go.

The current device is thread-local state (``gt.device`` scopes, like the tape stack); the
rule for a new value (:func:`placement`), the rule for host operands of a GPU op
(:func:`gpu_operands`) and the DLPack views of a tensor's buffer live here, below
:mod:`gputape.core.tensor`, which uses them. The device *manager* (memory pools, the memory
report) is :mod:`gputape.devices.memory`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import config
from ..core import _errors
from ..core.state import tls as _tls
from . import backend


def current_device() -> str:
    """The device that new values made from host data are placed on in this thread.

    The innermost ``with gt.device(...)`` scope, else the default device
    (``GPUTAPE_DEVICE``, else the GPU when one works, else the CPU).

    >>> import gputape as gt
    >>> gt.current_device() in ("cpu", "cuda:0")
    True
    """
    dev = _tls.device
    return dev if dev is not None else backend.default_device()


def scope_device() -> str | None:
    """The device of this thread's innermost ``with gt.device(...)`` scope, or None outside every scope.

    >>> import gputape as gt
    >>> with gt.device("cpu"):
    ...     scope_device()
    'cpu'
    """
    return _tls.device


def placement(value: Any, device: str | None = None, *, variable: bool = False) -> str:
    """The device a new tensor made from ``value`` goes to: TensorFlow's placement rule, in one place.

    1. ``device=`` when given;
    2. a value already on a GPU (a cupy array, or a Tensor there) stays on its GPU, except
       that a Variable (``variable=True``) created inside ``with gt.device(...)`` goes to
       the scope's device, as TensorFlow creates variables on the scope's device;
    3. everything else (Python numbers, lists, numpy arrays, host tensors for a Variable)
       goes to :func:`current_device`: the innermost scope, else the default device.

    ``gt.constant(t)`` of a Tensor ``t`` is ``t``'s value wherever it is (TensorFlow's
    ``tf.constant`` returns an eager tensor unchanged), so constant() does not ask.

    >>> import numpy as np
    >>> with device("cpu"):
    ...     placement(np.zeros(2)), placement([1.0], "cpu"), placement(2.0, variable=True)
    ('cpu', 'cpu', 'cpu')
    """
    if device is not None:
        return backend.parse_device(device)
    data = getattr(value, "_data", value)  # a Tensor's array (this module sits below tensor.py)
    if type(data) is not np.ndarray and backend.is_gpu_array(data):
        if not variable or _tls.device is None:
            return backend.device_of(data)
    return current_device()


class device:  # noqa: N801 - used like a function, as tf.device
    """Place values made from host data inside the block on ``name`` (``'cpu'``, ``'cuda:N'``).

    Inside the block, ``gt.constant``, ``gt.Variable``, creation ops (``gt.zeros`` ...),
    ``gt.random`` draws and layer weights built there go to ``name`` (see :func:`placement`).
    The scope is per thread; entering and leaving are one store each (the device outside
    is restored even when an exception or Ctrl-C ends the block).

    >>> import gputape as gt
    >>> with gt.device("cpu"):
    ...     gt.constant(1.0).device, gt.Variable(2.0).device
    ('cpu', 'cpu')
    """

    __slots__ = ("_dev", "_prev")

    def __init__(self, name: str) -> None:
        dev = backend.parse_device(name)
        if dev != "cpu":
            backend.xp_for_device(dev)  # raises with the reason when no GPU works
        self._dev = dev

    def __enter__(self) -> str:
        self._prev = _tls.device
        _tls.device = self._dev
        return self._dev

    def __exit__(self, *exc: Any) -> None:
        _tls.device = self._prev


def gpu_operands(op: str, args: tuple, datas: list) -> list:
    """An op on a GPU got host arrays among its operands: the arrays it runs on, all on that GPU.

    Raw numpy arrays (and numbers) are constants of the op and are copied to its GPU, counted
    in ``gt.debug.transfer_stats()``. A host *Tensor or Variable* is refused with the
    device-mismatch ValueError, because copying it on every op silently costs a transfer per
    op per step; with ``gt.config.set_soft_device_placement(True)`` it is copied (and counted).

    >>> gpu_operands("add", (1.0,), [1.0])
    [1.0]
    """
    dev = None
    for a in args:
        d = getattr(a, "_data", None)
        if d is not None and type(d) is not np.ndarray and backend.is_gpu_array(d):
            dev = backend.device_of(d)
            break
    if dev is None:
        return datas
    out = []
    for k, (a, d) in enumerate(zip(args, datas)):
        if type(d) is np.ndarray:
            if hasattr(a, "_data") and not config.get_soft_device_placement():
                kind = "variable" if hasattr(a, "assign") else "tensor"
                raise _errors.mark(
                    ValueError(
                        f"{_errors.where(op)}: input {k} is a {kind} on cpu but the op runs on {dev}, where its "
                        f"other inputs are; gputape does not copy tensors between devices on every op. Create it "
                        f"on {dev} (inside `with gt.device({dev!r})`, or with device={dev!r}), move it once with "
                        f".to({dev!r}), or call gt.config.set_soft_device_placement(True) to have it copied "
                        "(each copy is counted in gt.debug.transfer_stats())"
                    )
                )
            d = backend.to_device(d, dev)
        out.append(d)
    return out


def tensor_dlpack(t: Any, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
    """``Tensor.__dlpack__``: a DLPack capsule of the tensor's buffer (no copy).

    >>> import gputape as gt, numpy as np
    >>> class View:  # what Tensor.__dlpack__/__dlpack_device__ will delegate to
    ...     def __init__(self, t): self.t = t
    ...     def __dlpack__(self, **kw): return tensor_dlpack(self.t, **kw)
    ...     def __dlpack_device__(self): return tensor_dlpack_device(self.t)
    >>> np.from_dlpack(View(gt.constant([1.0, 2.0]))).tolist()
    [1.0, 2.0]
    """
    return backend.to_dlpack(t._data, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)


def tensor_dlpack_device(t: Any) -> tuple[int, int]:
    """``Tensor.__dlpack_device__``: ``(1, 0)`` on the CPU, ``(2, N)`` on GPU N.

    >>> import gputape as gt
    >>> tensor_dlpack_device(gt.constant(1.0, device="cpu"))
    (1, 0)
    """
    return backend.dlpack_device(t._data)


def check_same_device(op: str, arrays: Any) -> str:
    """The one device that every array in ``arrays`` is on; ValueError naming both otherwise.

    Raw Python numbers and host numpy *constants* mixed into a GPU op are not
    arrays on a device in this sense: pass only tensor data here.

    >>> import numpy as np
    >>> check_same_device("add", [np.zeros(2), np.ones(2)])
    'cpu'
    """
    found: str | None = None
    for a in arrays:
        d = backend.device_of(a)
        if found is None:
            found = d
        elif d != found:
            raise ValueError(
                f"gt.{op}: inputs are on different devices ({found} and {d}); "
                f"move them to one device with .to({found!r}) or .to({d!r}) first"
            )
    return found or "cpu"
