"""The array-module seam: the only module in gputape that may import cupy.

Everything else asks this module which array module (``numpy`` or ``cupy``) an
array or a device belongs to, so ops are written once against ``xp`` and run on
both. CuPy is optional: with numpy alone installed every function here works
and the only device is ``"cpu"``.

The default device is the GPU when cupy imports *and* a GPU answers a smoke
kernel (an allocation, an elementwise kernel compiled by NVRTC, a copy back);
otherwise the CPU. Falling back is said aloud when it is a surprise: with cupy
installed (someone meant to use a GPU) the first default-device decision warns
once (:class:`CpuFallbackWarning`) with the reason and the fix; without cupy it
is silent. The
``GPUTAPE_DEVICE`` environment variable (``cpu``, ``cuda``, ``cuda:N``)
overrides the choice, and asking for a GPU that does not work raises with the
reason (no cupy, no driver, no device).

The CPU fast path matters: :func:`xp_of` is called on every op, so it tests
``type(a) is numpy.ndarray`` before anything else and never touches cupy for
numpy arrays.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from typing import Any

import numpy as np

from ..core import _errors
from ..core._errors import GputapeWarning

_log = logging.getLogger("gputape")

ndarray = np.ndarray

_cupy: Any = None  # the cupy module once imported, False when unavailable
_cupy_error: str | None = None
_cupy_installed = False  # cupy is installed, even if importing it failed (a broken CUDA install)
_probe_lock = threading.Lock()
_probed: dict[int, str | None] = {}  # device index -> why it is unusable (None: it works)

INSTALL_HINT = "pip install 'gputape[cuda12]' or 'gputape[cuda13]'"

# DLPack device types (dlpack.h): the ones gputape can hold.
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13


def _load_cupy() -> Any:
    """Import cupy once; remember why it failed so errors can say so."""
    global _cupy, _cupy_error, _cupy_installed
    if _cupy is None:
        try:
            import cupy

            _cupy, _cupy_installed = cupy, True
        except Exception as exc:  # ImportError, or a broken CUDA install
            _cupy = False
            # "No module named 'cupy'" is a CPU-only install; anything else (cupy itself fails to
            # load its CUDA libraries) is a GPU install that does not work, which the fallback says
            _cupy_installed = not (isinstance(exc, ModuleNotFoundError) and exc.name == "cupy")
            _cupy_error = f"cupy is not importable ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
    return _cupy


def cupy_module() -> Any:
    """The cupy module, or None when it is not importable (no exception).

    >>> cupy_module() is None or cupy_module().__name__ == "cupy"
    True
    """
    cp = _load_cupy()
    return cp or None


_nccl: Any = None  # cupy.cuda.nccl once imported, False when unavailable
_nccl_error: str | None = None


def nccl_module() -> Any:
    """``cupy.cuda.nccl`` when cupy and an NCCL library are installed, else None (no exception).

    ``gt.distributed`` reduces GPU arrays with it. ``nccl_unavailable_reason()``
    says why it is None.

    >>> nccl_module() is None or hasattr(nccl_module(), "NcclCommunicator")
    True
    """
    global _nccl, _nccl_error
    if _nccl is None:
        cp = _load_cupy()
        if not cp:
            _nccl, _nccl_error = False, _cupy_error or f"cupy is not installed ({INSTALL_HINT})"
        else:
            try:
                from cupy.cuda import nccl

                # cupy ships a stand-in module with available=False when libnccl is missing
                if getattr(nccl, "available", True):
                    _nccl = nccl
                else:
                    _nccl, _nccl_error = False, "cupy was built without NCCL (cupy.cuda.nccl.available is False)"
            except Exception as exc:  # ImportError: libnccl is not installed (pip install nvidia-nccl-cu12/cu13)
                _nccl, _nccl_error = False, f"cupy.cuda.nccl is not importable ({type(exc).__name__}: {exc})"
    return _nccl or None


def nccl_unavailable_reason() -> str | None:
    """Why ``nccl_module()`` is None, or None when NCCL is usable.

    >>> nccl_unavailable_reason() is None or isinstance(nccl_unavailable_reason(), str)
    True
    """
    return None if nccl_module() is not None else _nccl_error


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


def is_gpu_array(a: Any) -> bool:
    """True when ``a`` is a cupy array (without importing cupy for numpy arrays).

    >>> import numpy as np
    >>> is_gpu_array(np.zeros(2))
    False
    """
    return type(a) is not ndarray and xp_of(a) is not np


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
    """Normalise a device name (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"gpu"``; TensorFlow's ``"/device:GPU:N"``).

    >>> parse_device("CPU"), parse_device("cuda")
    ('cpu', 'cuda:0')
    """
    if not isinstance(name, str):
        raise TypeError(f"device must be a string like 'cpu' or 'cuda:0', got {name!r}")
    n = name.strip().lower()
    if n in ("cpu", "/cpu:0", "cpu:0", "/device:cpu:0"):
        return "cpu"
    if n in ("cuda", "gpu"):
        return "cuda:0"
    for prefix in ("cuda:", "gpu:", "/gpu:", "/device:gpu:"):
        if n.startswith(prefix) and n[len(prefix) :].isdigit():
            return f"cuda:{int(n[len(prefix) :])}"
    raise ValueError(f"unknown device {name!r}: use 'cpu', 'cuda' or 'cuda:N'")


def device_index(device: str) -> int:
    """The GPU ordinal of a ``"cuda:N"`` device name.

    >>> device_index("cuda:1")
    1
    """
    dev = parse_device(device)
    if dev == "cpu":
        raise ValueError("device_index: 'cpu' has no GPU ordinal")
    return int(dev.split(":")[1])


def _smoke(cp: Any, index: int) -> None:
    """Allocate, run one NVRTC-compiled elementwise kernel and copy back: the whole path."""
    with cp.cuda.Device(index):
        a = cp.arange(8, dtype=cp.float32)
        got = float((a * 2 + 1).sum())
    if got != 64.0:
        raise RuntimeError(f"the smoke kernel computed {got}, expected 64.0")


def _probe(index: int) -> str | None:
    """Why GPU ``index`` is unusable, or None when it runs the smoke kernel. Never raises."""
    cp = _load_cupy()
    if not cp:
        return _cupy_error or f"cupy is not installed ({INSTALL_HINT})"
    try:
        drv = cp.cuda.runtime.driverGetVersion()
    except Exception as exc:
        return f"no CUDA driver ({type(exc).__name__}: {exc})"
    if drv == 0:
        return "no CUDA driver is installed (cudaDriverGetVersion reports 0)"
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        # cudaErrorInsufficientDriver, cudaErrorNoDevice, ...: say which
        return f"the CUDA driver did not answer ({type(exc).__name__}: {exc})"
    if n == 0:
        return "CUDA reports no devices"
    if index >= n:
        return f"there is no GPU {index} (CUDA reports {n} device{'s' if n > 1 else ''}: cuda:0..cuda:{n - 1})"
    try:
        _smoke(cp, index)
    except Exception as exc:
        return f"GPU {index} failed the smoke kernel ({type(exc).__name__}: {exc})"
    return None


def cuda_unavailable_reason(device: str | int = 0) -> str | None:
    """Say why a CUDA device cannot be used, or return None when it works.

    The answer (a smoke kernel on the device) is computed once per device and
    remembered: a GPU does not appear during a process.

    >>> isinstance(cuda_unavailable_reason(), (str, type(None)))
    True
    """
    index = device if isinstance(device, int) else device_index(device)
    why = _probed.get(index, "?")
    if why == "?":
        with _probe_lock:
            if index not in _probed:
                _probed[index] = _probe(index)
            why = _probed[index]
    return why


def gpu_available(device: str | int = 0) -> bool:
    """True when cupy is installed and ``device`` answers a smoke kernel.

    >>> isinstance(gpu_available(), bool)
    True
    """
    return cuda_unavailable_reason(device) is None


_default: str | None = None


class CpuFallbackWarning(GputapeWarning):
    """gputape runs on the CPU although CuPy is installed: no GPU answered (the message says why and what to do).

    Issued once per process, at the first default-device decision. ``GPUTAPE_DEVICE=cpu`` (the
    CPU on purpose) silences it; so does ``warnings.simplefilter("ignore", gt.CpuFallbackWarning)``.
    """


# What to do about a GPU that did not answer, by the reason's wording in _probe. The drivers are
# NVIDIA's minimum per CUDA major release (CUDA Compatibility guide: 12.x >= 525, 13.x >= 580).
_DRIVERS = "the cuda12 extra needs an NVIDIA driver >= 525, the cuda13 extra >= 580 (nvidia-smi shows yours)"


def _fallback_fix(why: str) -> str:
    if why.startswith("cupy is not importable"):
        return f"reinstall cupy for your CUDA ({INSTALL_HINT}); {_DRIVERS}"
    if "driver" in why.lower():
        return f"install or update the NVIDIA driver: {_DRIVERS}; or pick the extra that matches your driver"
    if "smoke kernel" in why:
        return "nvidia-smi shows whether the GPU is busy or out of memory; CUDA may not support a GPU this old"
    return "check that nvidia-smi lists a GPU and that CUDA_VISIBLE_DEVICES does not hide it"


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside gputape (for a warning issued from here).

    The first decision happens wherever a value is first placed (a constant, a layer's build,
    ``gt.random``), some frames deep: the warning points at the user's line instead.
    """
    f, level = sys._getframe(1), 1  # the function that calls warnings.warn is level 1
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_errors._PKG):
        f, level = f.f_back, level + 1
    return level


def _warn_fallback(why: str) -> None:
    if not (_cupy or _cupy_installed):
        return  # no cupy at all: a CPU install, the CPU is what was asked for
    warnings.warn(
        f"gputape: no GPU answered, so gputape runs on the CPU: {why}. To use the GPU: {_fallback_fix(why)}; "
        "`python -m gputape info` shows what was found. To use the CPU on purpose, set GPUTAPE_DEVICE=cpu "
        "(which also silences this warning).",
        CpuFallbackWarning,
        stacklevel=_user_stacklevel(),
    )


def default_device() -> str:
    """The device new tensors go to when nothing else says: ``GPUTAPE_DEVICE``, else
    the first GPU when one works, else ``"cpu"``.

    ``GPUTAPE_DEVICE=cuda`` (or ``cuda:N``) where no GPU works raises
    ``RuntimeError`` saying why; without the variable, a missing GPU falls back
    to the CPU, with one :class:`CpuFallbackWarning` when cupy is installed.

    >>> default_device() in ("cpu", "cuda:0")
    True
    """
    global _default
    env = os.environ.get("GPUTAPE_DEVICE", "").strip()
    if env:
        dev = parse_device(env)
        if dev != "cpu":
            why = cuda_unavailable_reason(dev)
            if why is not None:
                raise RuntimeError(
                    f"GPUTAPE_DEVICE={env!r} asks for a GPU but {why}; unset GPUTAPE_DEVICE or set it to 'cpu'"
                )
        return dev
    if _default is None:
        why = cuda_unavailable_reason(0)
        if why is None:
            _default = "cuda:0"
        else:
            _default = "cpu"  # decided once: the warning below is issued once
            _log.debug("gputape: using the CPU: %s", why)
            _warn_fallback(why)
    return _default


def xp_for_device(device: str) -> Any:
    """The array module that allocates on ``device``.

    >>> import numpy as np
    >>> xp_for_device("cpu") is np
    True
    """
    if device == "cpu":
        return np
    why = cuda_unavailable_reason(device)
    if why is not None:
        raise RuntimeError(f"device {device!r} is not usable: {why}")
    return _cupy


def asarray_on(value: Any, device: str, dtype: Any = None) -> Any:
    """Convert ``value`` to an array of the module that owns ``device`` (a counted copy when it moves).

    >>> asarray_on([1, 2], "cpu", "float32")
    array([1., 2.], dtype=float32)
    """
    if device == "cpu":
        if type(value) is not ndarray and xp_of(value) is not np:
            value = _get(value)  # cupy -> host
        return np.asarray(value, dtype=dtype)
    xp = xp_for_device(device)
    with xp.cuda.Device(device_index(device)):
        if type(value) is not ndarray and xp_of(value) is xp:
            return xp.asarray(value, dtype=dtype)  # already a device array: GPU to GPU, no host copy
        out = xp.asarray(value, dtype=dtype)
    _count(_H2D, out.nbytes)
    return out


def to_host(a: Any) -> np.ndarray:
    """Copy an array to host numpy (no copy for numpy arrays; a counted copy for device arrays).

    >>> import numpy as np
    >>> a = np.zeros(2); to_host(a) is a
    True
    """
    if type(a) is ndarray:
        return a
    if xp_of(a) is np:
        return np.asarray(a)
    return _get(a)


def to_device(a: Any, device: str) -> Any:
    """Copy array ``a`` to ``device`` (no copy when it is already there): ``Tensor.to``'s core.

    GPU to GPU copies go peer to peer through cupy, never through the host; host
    <-> device copies are counted (:func:`transfer_stats`).

    >>> import numpy as np
    >>> a = np.ones(2); to_device(a, "cpu") is a
    True
    """
    dev = parse_device(device)
    here = device_of(a)
    if dev == here:
        return a
    if dev == "cpu":
        return _get(a)
    xp = xp_for_device(dev)
    with xp.cuda.Device(device_index(dev)):
        if here != "cpu":
            return xp.array(a, copy=True)
        out = xp.asarray(a)
    _count(_H2D, out.nbytes)
    return out


# -- transfer counters -----------------------------------------------------------------
#
# Every host <-> device copy gputape makes goes through asarray_on, to_host or to_device
# above (``_get`` is the one device -> host copy), and each adds to the counters of the
# thread that made it. Per-thread lists, so that counting is two list-item adds with no lock
# and no lost increment: a thread only ever writes its own list. Reading sums every
# thread's list (threads that ended still count). A reset zeroes every list; a copy made by
# another thread at the very moment of the reset may be counted before or after it.

_H2D, _D2H = 0, 2  # offsets into a thread's [h2d copies, h2d bytes, d2h copies, d2h bytes]
_all_counts: list[list[int]] = []


class _Counts(threading.local):
    def __init__(self) -> None:
        self.c = [0, 0, 0, 0]
        _all_counts.append(self.c)  # list.append is atomic under the GIL


_counts = _Counts()


def _count(kind: int, nbytes: int) -> None:
    c = _counts.c
    c[kind] += 1
    c[kind + 1] += nbytes


def _get(a: Any) -> np.ndarray:
    """The device -> host copy (cupy's ``.get()``), counted."""
    out = a.get()
    _count(_D2H, out.nbytes)
    return out


def thread_transfers() -> tuple[int, int, int, int]:
    """This thread's counters: host->device copies and bytes, device->host copies and bytes.

    >>> a = thread_transfers(); len(a)
    4
    """
    return tuple(_counts.c)  # type: ignore[return-value]


def transfer_stats() -> dict[str, int]:
    """Host <-> device copies and bytes made by gputape in every thread since the last reset.

    >>> sorted(transfer_stats())
    ['device_to_host', 'device_to_host_bytes', 'host_to_device', 'host_to_device_bytes']
    """
    tot = [0, 0, 0, 0]
    for c in list(_all_counts):
        for k in range(4):
            tot[k] += c[k]
    return {
        "host_to_device": tot[0],
        "host_to_device_bytes": tot[1],
        "device_to_host": tot[2],
        "device_to_host_bytes": tot[3],
    }


def reset_transfer_stats() -> None:
    """Set every thread's transfer counters to zero.

    >>> reset_transfer_stats(); transfer_stats()["host_to_device"]
    0
    """
    for c in list(_all_counts):
        c[:] = [0, 0, 0, 0]


def synchronize(device: str | None = None) -> None:
    """Wait for all work queued on ``device`` (every GPU when None; nothing on the CPU).

    >>> synchronize("cpu")
    """
    if device is not None and parse_device(device) == "cpu":
        return
    cp = _cupy if _cupy is not None else _load_cupy()
    if not cp:
        return
    if device is None:
        if cuda_unavailable_reason(0) is None:
            cp.cuda.Device().synchronize()
        return
    with cp.cuda.Device(device_index(device)) as d:
        d.synchronize()


# -- DLPack --------------------------------------------------------------------------


def dlpack_device(a: Any) -> tuple[int, int]:
    """``__dlpack_device__`` of a numpy or cupy array: ``(device_type, device_id)``.

    >>> import numpy as np
    >>> dlpack_device(np.zeros(2))
    (1, 0)
    """
    return tuple(int(v) for v in a.__dlpack_device__())  # type: ignore[return-value]


def to_dlpack(a: Any, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
    """A DLPack capsule for array ``a`` (``Tensor.__dlpack__``'s core; no copy unless asked).

    Only the keywords the caller gave are passed on, so older numpy and cupy
    versions that know just ``stream`` still work.

    >>> import numpy as np
    >>> type(to_dlpack(np.zeros(2))).__name__
    'PyCapsule'
    """
    kw = {}
    if stream is not None:
        kw["stream"] = stream
    if max_version is not None:
        kw["max_version"] = max_version
    if dl_device is not None:
        kw["dl_device"] = dl_device
    if copy is not None:
        kw["copy"] = copy
    try:
        return a.__dlpack__(**kw)
    except TypeError:
        if "max_version" not in kw or set(kw) - {"max_version", "stream"}:
            raise
        # a consumer offering the versioned protocol to an older producer
        kw.pop("max_version")
        return a.__dlpack__(**kw)


def from_dlpack_array(obj: Any) -> Any:
    """The numpy or cupy array viewing ``obj``'s memory through DLPack (no copy).

    ``obj`` is anything with ``__dlpack__``/``__dlpack_device__`` (a PyTorch,
    JAX, cupy or numpy array). A CPU producer gives a numpy array, a CUDA one
    a cupy array on the same GPU. A bare legacy capsule is handed to cupy.

    >>> import numpy as np
    >>> from_dlpack_array(np.arange(3.0)).tolist()
    [0.0, 1.0, 2.0]
    """
    if type(obj) is ndarray:
        return obj
    if not hasattr(obj, "__dlpack_device__"):
        if type(obj).__name__ == "PyCapsule":
            cp = _load_cupy()
            if not cp:
                raise TypeError(
                    "gt.from_dlpack: a bare DLPack capsule can only be read by cupy, which is not available "
                    f"({_cupy_error}); pass the tensor itself (an object with __dlpack__)"
                )
            return cp.from_dlpack(obj)
        raise TypeError(
            f"gt.from_dlpack: {type(obj).__name__} does not support DLPack (no __dlpack__/__dlpack_device__); "
            "pass a PyTorch, JAX, cupy or numpy array"
        )
    kind, dev_id = dlpack_device(obj)
    if kind == KDL_CPU:
        return np.from_dlpack(obj)
    if kind in (KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED):
        why = cuda_unavailable_reason(int(dev_id) if kind == KDL_CUDA else 0)
        if why is not None:
            raise RuntimeError(f"gt.from_dlpack: the producer's memory is on a CUDA device but {why}")
        return _cupy.from_dlpack(obj)
    raise ValueError(
        f"gt.from_dlpack: DLPack device type {kind} (device {dev_id}) is neither the CPU (1) nor CUDA (2); "
        "move the tensor to the CPU or a CUDA GPU first"
    )


# -- pinned host memory ----------------------------------------------------------------


def pinned_empty(shape: Any, dtype: Any) -> np.ndarray:
    """A numpy array in page-locked host memory (cupy's pinned pool); plain numpy without cupy.

    Copies between pinned host memory and a GPU can run asynchronously.

    >>> pinned_empty((2,), "int64").shape
    (2,)
    """
    dt = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = int(np.prod(shape)) if shape else 1
    cp = _cupy if _cupy is not None else _load_cupy()
    if not cp or cuda_unavailable_reason(0) is not None:
        return np.empty(shape, dt)
    mem = cp.cuda.alloc_pinned_memory(max(n * dt.itemsize, 1))
    return np.frombuffer(mem, dt, n).reshape(shape)


def versions() -> dict[str, Any]:
    """Versions of numpy, cupy, the CUDA runtime, driver and NVRTC (None where absent).

    >>> versions()["numpy"] == np.__version__
    True
    """
    out: dict[str, Any] = {"numpy": np.__version__, "cupy": None, "cuda_runtime": None, "cuda_driver": None}
    out["nvrtc"] = None
    cp = _load_cupy()
    if not cp:
        return out
    out["cupy"] = cp.__version__

    def fmt(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    for key, fn in (("cuda_runtime", "runtimeGetVersion"), ("cuda_driver", "driverGetVersion")):
        try:
            v = getattr(cp.cuda.runtime, fn)()
            out[key] = fmt(v) if v else None
        except Exception:
            pass
    try:
        major, minor = cp.cuda.nvrtc.getVersion()
        out["nvrtc"] = f"{major}.{minor}"
    except Exception:
        pass
    return out


def device_properties(index: int = 0) -> dict[str, Any] | None:
    """Name, compute capability, multiprocessor count and memory of GPU ``index`` (None without one).

    >>> device_properties(0) is None or "name" in device_properties(0)
    True
    """
    if cuda_unavailable_reason(index) is not None:
        return None
    cp = _cupy
    p = cp.cuda.runtime.getDeviceProperties(index)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    with cp.cuda.Device(index):
        free, total = cp.cuda.runtime.memGetInfo()
    return {
        "name": name,
        "compute_capability": f"{p['major']}.{p['minor']}",
        "multiprocessors": int(p["multiProcessorCount"]),
        "total_memory": int(total),
        "free_memory": int(free),
    }


def gpu_special(name: str) -> Any:
    """A ``cupyx.scipy.special`` function (e.g. ``"erf"``) for cupy arrays.

    >>> gpu_special.__name__
    'gpu_special'
    """
    cp = _load_cupy()
    if not cp:
        raise RuntimeError(f"gpu_special({name!r}): {cuda_unavailable_reason()}")
    import cupyx.scipy.special as special  # optional dependency, only with cupy

    return getattr(special, name)
