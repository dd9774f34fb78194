"""Process-wide configuration, named as TensorFlow's ``tf.config``.

**Soft device placement.** gputape runs an op on the device of its tensor inputs. A host
(CPU) *Tensor or Variable* mixed into an op on a GPU is refused with the device-mismatch
ValueError by default, because copying it silently would cost one host->device transfer
per op per step. ``set_soft_device_placement(True)`` copies it instead (each copy is
counted in ``gt.debug.transfer_stats()``). Raw numpy arrays and Python numbers mixed into
an op are constants and are always copied to its device (also counted). TensorFlow's flag
of the same name lets ops without a GPU kernel fall back to the CPU; gputape has a kernel
for every op on both, so the flag governs the one implicit copy there is.

The flag is one process-wide bool, as in TensorFlow (set it before starting threads that
depend on it: it is read without a lock).

>>> import gputape as gt
>>> gt.config.get_soft_device_placement()
False
>>> gt.config.set_soft_device_placement(True); gt.config.get_soft_device_placement()
True
>>> gt.config.set_soft_device_placement(False)
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from .devices import backend

__all__ = [
    "LogicalDevice",
    "PhysicalDevice",
    "get_backward_compilation",
    "get_backward_graphs",
    "get_soft_device_placement",
    "get_vector_kernels",
    "list_logical_devices",
    "list_physical_devices",
    "set_backward_compilation",
    "set_backward_graphs",
    "set_soft_device_placement",
    "set_vector_kernels",
]

_soft_placement = False


def _env_switch(name: str, default: bool) -> bool:
    """A switch's default from the environment: 1/true/on/yes or 0/false/off/no; unset or anything else: ``default``."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    return default


def _enabled(value: Any, setter: str) -> bool:
    """A setter's ``enabled`` argument as a bool (a bool or an int; anything else is refused by name)."""
    if not isinstance(value, (bool, int)):
        raise TypeError(f"gt.config.{setter}: enabled must be a bool, got {value!r}")
    return bool(value)


def set_soft_device_placement(enabled: bool) -> None:
    """Copy host tensors mixed into GPU ops to the GPU (True) instead of raising (False, the default).

    >>> import gputape as gt
    >>> gt.config.set_soft_device_placement(False)
    """
    global _soft_placement
    _soft_placement = _enabled(enabled, "set_soft_device_placement")


def get_soft_device_placement() -> bool:
    """Whether host tensors mixed into GPU ops are copied (True) or refused (False).

    >>> import gputape as gt
    >>> gt.config.get_soft_device_placement()
    False
    """
    return _soft_placement


# The compiled backward (gputape.core.backward.compiled): GradientTape.gradient on a tape whose structure
# was seen before runs generated straight-line code instead of the per-node sweep (same bits).
_compile_backward = _env_switch("GPUTAPE_COMPILE_BACKWARD", True)


def set_backward_compilation(enabled: bool) -> None:
    """Turn the compiled backward on (the default) or off for every tape in the process.

    On, ``GradientTape.gradient`` on a tape whose structure (ops, shapes, dtypes, casts, wiring) it has
    seen before runs code generated for that structure instead of the per-node sweep, with the
    same result bit for bit; ``GradientTape(compile=False)`` opts one tape out, and the
    environment variable ``GPUTAPE_COMPILE_BACKWARD=0`` sets the default to off. Counters:
    ``gt.debug.backward_cache_report()``.

    >>> import gputape as gt
    >>> was = gt.config.get_backward_compilation()
    >>> gt.config.set_backward_compilation(False); gt.config.get_backward_compilation()
    False
    >>> gt.config.set_backward_compilation(was)
    """
    global _compile_backward
    _compile_backward = _enabled(enabled, "set_backward_compilation")


def get_backward_compilation() -> bool:
    """Whether ``GradientTape.gradient`` may run compiled backwards (see :func:`set_backward_compilation`).

    >>> import gputape as gt
    >>> isinstance(gt.config.get_backward_compilation(), bool)
    True
    """
    return _compile_backward


# The compiled backward of a GPU tape replayed as one CUDA graph (gputape.core.backward.cuda_graph): off
# by default until a GPU run has checked it (its tests and benchmarks run it on explicitly).
_backward_graphs = _env_switch("GPUTAPE_BACKWARD_GRAPHS", False)


def set_backward_graphs(enabled: bool) -> None:
    """Let a compiled backward on a GPU replay as one CUDA graph (True) or not (False, the default).

    On, a tape on CuPy arrays whose structure has a compiled backward (see
    :func:`set_backward_compilation`) captures it into a CUDA graph and replays the graph while
    the arrays it reads sit at the addresses it was captured on (checked on every call);
    otherwise the compiled backward runs as ordinary launches. CPU tapes are not affected. Off
    by default: it is tested on the CPU through an emulation only, and no GPU run has checked
    it yet (``benchmarks/gpu_check.sh`` runs its GPU tests and times it on and off). The
    environment variable ``GPUTAPE_BACKWARD_GRAPHS=1`` sets the default to on; counters:
    ``gt.debug.backward_cache_report()["graphs"]``.

    >>> import gputape as gt
    >>> was = gt.config.get_backward_graphs()
    >>> gt.config.set_backward_graphs(False); gt.config.get_backward_graphs()
    False
    >>> gt.config.set_backward_graphs(was)
    """
    global _backward_graphs
    _backward_graphs = _enabled(enabled, "set_backward_graphs")


def get_backward_graphs() -> bool:
    """Whether a compiled backward on a GPU may replay as a CUDA graph (see :func:`set_backward_graphs`).

    >>> import gputape as gt
    >>> isinstance(gt.config.get_backward_graphs(), bool)
    True
    """
    return _backward_graphs


class PhysicalDevice(NamedTuple):
    """A device as TensorFlow lists it: ``name`` (``/physical_device:GPU:0``) and ``device_type``."""

    name: str
    device_type: str


class LogicalDevice(NamedTuple):
    """A device as TensorFlow's ``list_logical_devices`` lists it (``/device:GPU:0``)."""

    name: str
    device_type: str


def _gpu_indices() -> list[int]:
    cp = backend.cupy_module()
    if cp is None or backend.cuda_unavailable_reason(0) is not None:
        return []
    try:
        n = int(cp.cuda.runtime.getDeviceCount())
    except Exception:
        return [0]
    return [i for i in range(n) if backend.cuda_unavailable_reason(i) is None]


def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """The CPU and every GPU that answers a smoke kernel (``device_type``: ``"CPU"``/``"GPU"`` filters).

    ``len(gt.config.list_physical_devices("GPU")) > 0`` is TensorFlow's idiom for "is there a GPU".

    >>> import gputape as gt
    >>> gt.config.list_physical_devices("CPU")
    [PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')]
    """
    return _listed(PhysicalDevice, "/physical_device", device_type, "list_physical_devices")


def list_logical_devices(device_type: str | None = None) -> list[LogicalDevice]:
    """As :func:`list_physical_devices`, named as TensorFlow names logical devices.

    >>> import gputape as gt
    >>> gt.config.list_logical_devices("CPU")
    [LogicalDevice(name='/device:CPU:0', device_type='CPU')]
    """
    return _listed(LogicalDevice, "/device", device_type, "list_logical_devices")


def _listed(cls: type, prefix: str, device_type: str | None, fn: str) -> list:
    if device_type is not None and (not isinstance(device_type, str) or device_type.upper() not in ("CPU", "GPU")):
        raise ValueError(f"gt.config.{fn}: device_type must be 'CPU', 'GPU' or None, got {device_type!r}")
    out = [cls(f"{prefix}:CPU:0", "CPU")] + [cls(f"{prefix}:GPU:{i}", "GPU") for i in _gpu_indices()]
    return out if device_type is None else [d for d in out if d.device_type == device_type.upper()]


# The vectorised backward kernels (gputape.core.expr.Derivative.vector_source): off until a GPU run
# has measured them against cupy's ElementwiseKernel (benchmarks/gpu_bench.py shows both).
_vector_kernels = _env_switch("GPUTAPE_VECTOR_KERNELS", False)


def set_vector_kernels(enabled: bool) -> None:
    """Use vector loads (``float4``/``double2``) in the elementwise backward kernels on a GPU.

    Applies to the one-input VJP kernels generated from the derivative expressions (the
    activations' backward, ``exp``, ``tanh``, ...) when every operand has the cotangent's
    shape, is contiguous and 16-byte aligned and holds at least 65,536 elements; anything
    else keeps cupy's ElementwiseKernel. Off by default (``GPUTAPE_VECTOR_KERNELS=1`` turns
    it on): no GPU run has measured it yet. Results are the same expression per element.

    >>> import gputape as gt
    >>> gt.config.set_vector_kernels(True); gt.config.get_vector_kernels()
    True
    >>> gt.config.set_vector_kernels(False)
    """
    global _vector_kernels
    _vector_kernels = _enabled(enabled, "set_vector_kernels")


def get_vector_kernels() -> bool:
    """Whether the elementwise backward kernels use vector loads on a GPU (see :func:`set_vector_kernels`).

    >>> import gputape as gt
    >>> gt.config.get_vector_kernels()
    False
    """
    return _vector_kernels
