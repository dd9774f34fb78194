"""Device placement and the device manager: which device new tensors go to, and memory.

This module owns the current-device state (thread-local, like the tape stack)
and the memory report. On a GPU it wraps cupy's device memory pool (and the
pinned host pool used for transfers): :func:`memory_info` reports the bytes
in use, the bytes held by live tapes, what the pool has reserved and the peak
since :func:`reset_peak_memory`; :func:`set_memory_limit` caps the pool and
:func:`empty_cache` hands its unused blocks back to the driver. On the CPU the
same functions report the numpy bytes that live tapes hold.

Why tapes are counted separately: a persistent tape keeps every residual its
ops declared until ``release()``/``del``; "held by tapes" is the number that
tells a user whether a leak is theirs or gputape's.
"""

from __future__ import annotations

import threading
from typing import Any

from ..core import tape as _tape
from ..core.tensor import Tensor, _wrap
from . import backend
from .placement import current_device

# -- memory ----------------------------------------------------------------------------

# Per device: the limit asked for on the CPU (advisory there: numpy has no pool to cap)
# and the peak tracker's state.
_cpu_limit: int | None = None
_peak: dict[str, int] = {}  # device -> peak bytes since reset_peak_memory()
_tracking: dict[str, bool] = {}
_prev_allocator: Any = None
_lock = threading.Lock()


def _resolve(dev: str | None) -> str:
    return backend.parse_device(dev) if dev is not None else current_device()


def tape_bytes(dev: str | None = None) -> int:
    """Bytes of the residuals that live tapes hold on ``dev`` (every device when None).

    Each array is counted once, however many tapes (nested tapes record the
    same ops) or nodes hold it. Tapes are found through
    ``gputape.core.tape._live_tapes`` (every tape entered and alive, iterated as a WeakSet is).

    >>> import gputape as gt
    >>> x = gt.constant([1.0, 2.0])
    >>> with gt.GradientTape(persistent=True) as t:
    ...     t.watch(x); y = gt.exp(x)
    >>> tape_bytes("cpu") >= 8
    True
    >>> t.release(); del t
    """
    want = backend.parse_device(dev) if dev is not None else None
    seen: set[int] = set()
    total = 0
    for tp in list(getattr(_tape, "_live_tapes", ())):
        for node in list(getattr(tp, "_nodes", ()) or ()):
            for a in getattr(node, "saved", None) or ():
                nb = getattr(a, "nbytes", None)
                if nb is None or id(a) in seen:
                    continue
                if want is not None and backend.device_of(a) != want:
                    continue
                seen.add(id(a))
                total += int(nb)
    return total


def memory_info(device: str | None = None) -> dict[str, Any]:
    """Memory of ``device`` (the current one when None), in bytes.

    Keys: ``device``; ``in_use`` (GPU: bytes of live arrays in the pool; CPU:
    the bytes live tapes hold, the numpy memory gputape accounts for);
    ``held_by_tapes``; ``transfers`` (host<->device copies and bytes in every thread since
    ``gt.debug.reset_transfer_stats()``, as ``gt.debug.transfer_stats()``); ``pool_reserved``
    (GPU: bytes the pool has taken from the driver, in use or cached; CPU: 0); ``peak``
    (the most ``in_use`` seen since :func:`reset_peak_memory`, None before it is first called: on the
    GPU it is measured at every allocation, on the CPU at every call of this
    function); ``limit`` (None: unlimited); on a GPU also ``pinned_free_blocks``
    and ``free_device``/``total_device`` (the driver's view).

    >>> import gputape as gt
    >>> info = gt.memory_info("cpu")
    >>> sorted(info)
    ['device', 'held_by_tapes', 'in_use', 'limit', 'peak', 'pool_reserved', 'transfers']
    >>> info["pool_reserved"]
    0
    """
    dev = _resolve(device)
    held = tape_bytes(dev)
    if dev == "cpu":
        in_use = held
        if _tracking.get(dev):
            with _lock:
                _peak[dev] = max(_peak.get(dev, 0), in_use)
        return {
            "device": dev,
            "in_use": in_use,
            "held_by_tapes": held,
            "pool_reserved": 0,
            "peak": _peak.get(dev) if _tracking.get(dev) else None,
            "limit": _cpu_limit,
            "transfers": backend.transfer_stats(),
        }
    cp = backend.xp_for_device(dev)
    idx = backend.device_index(dev)
    with cp.cuda.Device(idx):
        pool = cp.get_default_memory_pool()
        used = int(pool.used_bytes())
        reserved = int(pool.total_bytes())
        limit = int(pool.get_limit())
        free, total = cp.cuda.runtime.memGetInfo()
    pinned = cp.get_default_pinned_memory_pool()
    peak = None
    if _tracking.get(dev):
        with _lock:
            peak = _peak[dev] = max(_peak.get(dev, 0), used)
    return {
        "device": dev,
        "in_use": used,
        "held_by_tapes": held,
        "pool_reserved": reserved,
        "peak": peak,
        "limit": limit or None,
        "pinned_free_blocks": int(pinned.n_free_blocks()),
        "free_device": int(free),
        "total_device": int(total),
        "transfers": backend.transfer_stats(),
    }


def _tracking_malloc(size: int) -> Any:
    """cupy allocator: the default pool's malloc, noting the pool's in-use bytes after it."""
    cp = backend.cupy_module()
    pool = cp.get_default_memory_pool()
    mem = pool.malloc(size)
    dev = f"cuda:{mem.device_id}"
    used = pool.used_bytes()
    if used > _peak.get(dev, 0):
        _peak[dev] = used
    return mem


def reset_peak_memory(device: str | None = None, track: bool = True) -> None:
    """Start (or restart) measuring the peak of ``memory_info()['in_use']`` on ``device``.

    On a GPU this installs an allocator that notes the pool's in-use bytes after
    each allocation (a few microseconds per allocation, hence opt-in);
    ``track=False`` stops it. On the CPU the peak is sampled at each
    :func:`memory_info` call.

    >>> import gputape as gt
    >>> gt.reset_peak_memory("cpu")
    >>> gt.memory_info("cpu")["peak"] >= 0
    True
    >>> gt.reset_peak_memory("cpu", track=False)
    """
    global _prev_allocator
    dev = _resolve(device)
    with _lock:
        _tracking[dev] = bool(track)
        _peak[dev] = 0
    if dev == "cpu":
        if track:
            _peak[dev] = tape_bytes("cpu")
        return
    cp = backend.xp_for_device(dev)
    with cp.cuda.Device(backend.device_index(dev)):
        used = int(cp.get_default_memory_pool().used_bytes())
    with _lock:
        _peak[dev] = used
        gpu_tracking = any(v for d, v in _tracking.items() if d != "cpu")
        current = cp.cuda.get_allocator()
        if gpu_tracking and current is not _tracking_malloc:
            _prev_allocator = current
            cp.cuda.set_allocator(_tracking_malloc)
        elif not gpu_tracking and current is _tracking_malloc:
            cp.cuda.set_allocator(_prev_allocator)
            _prev_allocator = None


def set_memory_limit(size: int | None = None, fraction: float | None = None, device: str | None = None) -> None:
    """Cap the memory pool of ``device`` at ``size`` bytes or a ``fraction`` of the GPU's memory.

    ``set_memory_limit()`` (neither given) removes the limit. On a GPU an
    allocation beyond the limit raises ``cupy.cuda.memory.OutOfMemoryError``.
    On the CPU the limit is recorded and reported by :func:`memory_info` but
    not enforced: numpy allocates through the C library, not a pool.

    >>> import gputape as gt
    >>> gt.set_memory_limit(1 << 30, device="cpu"); gt.memory_info("cpu")["limit"]
    1073741824
    >>> gt.set_memory_limit(device="cpu")
    """
    global _cpu_limit
    if size is not None and fraction is not None:
        raise ValueError("set_memory_limit: give size or fraction, not both")
    if size is not None and size < 0:
        raise ValueError(f"set_memory_limit: size must be >= 0 bytes, got {size}")
    if fraction is not None and not 0.0 <= fraction <= 1.0:
        raise ValueError(f"set_memory_limit: fraction must be in [0, 1], got {fraction}")
    dev = _resolve(device)
    if dev == "cpu":
        if fraction is not None:
            import os

            pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
            _cpu_limit = int(pages * fraction) if pages else None
        else:
            _cpu_limit = int(size) if size is not None else None
        return
    cp = backend.xp_for_device(dev)
    with cp.cuda.Device(backend.device_index(dev)):
        pool = cp.get_default_memory_pool()
        if size is None and fraction is None:
            pool.set_limit(size=0)  # cupy: 0 means no limit
        elif fraction is not None:
            pool.set_limit(fraction=fraction)
        else:
            pool.set_limit(size=int(size))


def empty_cache(device: str | None = None) -> int:
    """Return the pool's unused blocks (and the pinned host pool's) to the driver.

    Returns the number of bytes the pool gave back. Live arrays are not
    touched. On the CPU there is no pool: returns 0.

    >>> import gputape as gt
    >>> gt.empty_cache("cpu")
    0
    """
    dev = _resolve(device)
    if dev == "cpu":
        return 0
    cp = backend.xp_for_device(dev)
    with cp.cuda.Device(backend.device_index(dev)):
        pool = cp.get_default_memory_pool()
        before = int(pool.total_bytes())
        pool.free_all_blocks()
        after = int(pool.total_bytes())
    cp.get_default_pinned_memory_pool().free_all_blocks()
    return before - after


def from_dlpack(obj: Any) -> Any:
    """A constant Tensor sharing ``obj``'s memory through DLPack (no copy).

    ``obj`` is a PyTorch, JAX, cupy or numpy array (anything with
    ``__dlpack__``). CPU memory becomes a numpy-backed tensor, CUDA memory a
    cupy-backed one on the same GPU. As with ``torch.from_dlpack``, the tensor
    aliases the producer's buffer: writing to the producer changes it.

    >>> import gputape as gt, numpy as np
    >>> a = np.arange(3.0)
    >>> t = gt.from_dlpack(a)
    >>> t.numpy().tolist(), t.device
    ([0.0, 1.0, 2.0], 'cpu')
    """
    if isinstance(obj, Tensor):
        return obj
    return _wrap(backend.from_dlpack_array(obj))


__all__ = [
    "empty_cache",
    "from_dlpack",
    "memory_info",
    "reset_peak_memory",
    "set_memory_limit",
    "tape_bytes",
]
