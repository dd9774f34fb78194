"""The collectives: ``all_reduce`` (and ``average_gradients``) and ``broadcast_variables``, each one packed
buffer per dtype and device, over NCCL for GPU arrays and MPI otherwise, after checking that the ranks agree.

>>> import gputape as gt
>>> gt.distributed.all_reduce([gt.constant([1.0])], op="max")[0].numpy().tolist()
[1.0]
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..core import state as _thread_state
from ..core.module import Module
from ..core.tensor import Tensor, Variable, _wrap
from ..devices import backend as _backend
from . import world as _world
from .world import _NCCL_OPS, _NCCL_TYPES, _OPS, _ensure, _nccl_enabled

# -- checking that the ranks agree ---------------------------------------------------------


def _describe(entry: Any) -> str:
    if entry is None:
        return "None (no gradient)"
    shape, dtype, kind = entry
    return f"{np.dtype(dtype).name} of shape {tuple(shape)} on the {kind.upper()}"


def _mismatch_message(fn: str, sigs: list[tuple[str, list[Any]]]) -> str:
    """The same text on every rank: the first rank that differs from rank 0, and how."""
    op0, entries0 = sigs[0]
    hint = ""
    detail = "their signatures differ"
    for r, (op, entries) in enumerate(sigs):
        if (op, entries) == (op0, entries0):
            continue
        if op != op0:
            detail = f"rank 0 called it with {op0} but rank {r} with {op}"
        elif len(entries) != len(entries0):
            detail = f"rank 0 passed {len(entries0)} tensors but rank {r} passed {len(entries)}"
        else:
            i = next(i for i, (a, b) in enumerate(zip(entries0, entries)) if a != b)
            detail = (
                f"tensor {i} of the list is {_describe(entries0[i])} on rank 0 but {_describe(entries[i])} on rank {r}"
            )
            if entries0[i] is None or entries[i] is None:
                hint = (
                    " A gradient that is None on some ranks only (a branch one rank's data did not reach) cannot be "
                    "reduced: compute gradients with tape.gradient(..., unconnected_gradients='zero')."
                )
            elif entries0[i][2] != entries[i][2]:
                hint = " Put the model on the same kind of device on every rank."
        break
    return (
        f"gt.distributed.{fn}: the ranks passed lists that do not match, so they cannot be combined: {detail}. "
        "Every rank must pass the same list in the same order, with the same shapes, dtypes and kind of device: "
        "build the same model the same way on every rank (call it on a sample batch before broadcast_variables "
        f"so that lazily built layers exist everywhere), and keep the variable order.{hint} "
        "(This error is raised on every rank.)"
    )


def _check_same_everywhere(fn: str, what: str, entries: list[Any]) -> None:
    """Compare a hash of ``(what, entries)`` across ranks; on a difference, every rank raises the same ValueError."""
    MPI, comm = _world._state.MPI, _world._state.comm
    text = repr((what, entries)).encode()
    h = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") & ((1 << 62) - 1)
    # max of (h, -h) gives max(h) and -min(h): equal exactly when every rank sent the same hash
    both = np.array([h, -h], np.int64)
    comm.Allreduce(MPI.IN_PLACE, both, op=MPI.MAX)
    if both[0] == -both[1]:
        return
    sigs = comm.allgather((what, entries))
    raise ValueError(_mismatch_message(fn, sigs))


# -- packing ------------------------------------------------------------------------------


def _raw(x: Any, fn: str, i: int) -> Any:
    if isinstance(x, Tensor):  # Variables included
        return x._data
    if isinstance(x, np.ndarray) or _backend.is_gpu_array(x):
        return x
    if isinstance(x, (np.generic, int, float, bool, list, tuple)):
        return np.asarray(x)
    raise TypeError(
        f"gt.distributed.{fn}: entry {i} is a {type(x).__name__}; pass gt.Tensors, Variables, numpy or cupy arrays "
        "(or None)"
    )


def _kind(a: Any) -> str:
    return "gpu" if _backend.is_gpu_array(a) else "cpu"


def _entry(a: Any) -> tuple[tuple[int, ...], str, str]:
    return (tuple(int(d) for d in a.shape), a.dtype.str, _kind(a))


def _groups(raws: list[Any]) -> list[list[int]]:
    """Indices of the non-None arrays, grouped by (dtype, device) in order of first appearance."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, a in enumerate(raws):
        if a is not None:
            groups.setdefault((a.dtype.str, _backend.device_of(a)), []).append(i)
    return list(groups.values())


def _pack(arrays: list[Any]) -> Any:
    xp = _backend.xp_of(arrays[0])
    if xp is np:
        return np.concatenate([a.reshape(-1) for a in arrays])
    with xp.cuda.Device(arrays[0].device.id):
        return xp.concatenate([a.reshape(-1) for a in arrays])


def _unpack(buf: Any, arrays: list[Any]) -> list[Any]:
    out, offset = [], 0
    for a in arrays:
        out.append(buf[offset : offset + a.size].reshape(a.shape))
        offset += a.size
    return out


def _mpi_allreduce(buf: np.ndarray, op: str) -> np.ndarray:
    """Reduce a host buffer in place over MPI; returns it (float16 travels as float32, bool as uint8)."""
    MPI = _world._state.MPI
    wire = buf
    if buf.dtype == np.float16:
        wire = buf.astype(np.float32)  # MPI has no standard half type
    elif buf.dtype == np.bool_:
        wire = buf.view(np.uint8)  # MPI's logical types do not take MAX/MIN
    mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    _world._state.comm.Allreduce(MPI.IN_PLACE, wire, op=mpi_op)
    if op == "mean":
        wire /= _world._state.size
    if wire is not buf and wire.dtype != np.uint8:
        buf[...] = wire
    return buf


def _nccl_comm(device_index: int) -> Any:
    """The NCCL communicator of this rank's GPU ``device_index``, made collectively on first use."""
    comm = _world._state.nccl.get(device_index)
    if comm is None:
        comm = _make_nccl_comm(
            device_index,
            _world._state.size,
            _world._state.rank,
            _world._state.comm.bcast if _world._state.comm else None,
        )
        _world._state.nccl[device_index] = comm
    return comm


def _make_nccl_comm(device_index: int, size: int, rank_: int, bcast: Callable[..., Any] | None) -> Any:
    nccl = _backend.nccl_module()
    cp = _backend.cupy_module()
    # rank 0 draws the unique id; MPI carries it to the others (NCCL has no rendezvous of its own)
    uid = nccl.get_unique_id() if rank_ == 0 else None
    if bcast is not None:
        uid = bcast(uid, root=0)
    try:
        with cp.cuda.Device(device_index):
            return nccl.NcclCommunicator(size, uid, rank_)
    except Exception as exc:  # NcclError; most often two ranks on one GPU (ncclInvalidUsage)
        raise RuntimeError(
            f"gt.distributed: rank {rank_} could not join an NCCL communicator on cuda:{device_index} "
            f"({type(exc).__name__}: {exc}). NCCL needs one GPU per rank: put each rank on its own, "
            "with gt.device(f'cuda:{gt.distributed.local_rank()}'); or set GPUTAPE_NCCL=0 to reduce GPU "
            "arrays through MPI (host copies)"
        ) from exc


def _nccl_allreduce(buf: Any, op: str, comm: Any, size: int) -> Any:
    """Reduce a contiguous cupy buffer in place with NCCL on the current stream; returns it."""
    nccl = _backend.nccl_module()
    cp = _backend.cupy_module()
    wire = buf.view(np.uint8) if buf.dtype == np.bool_ else buf
    dtype = getattr(nccl, _NCCL_TYPES[wire.dtype.name])
    with cp.cuda.Device(buf.device.id):
        stream = cp.cuda.get_current_stream()
        comm.allReduce(wire.data.ptr, wire.data.ptr, wire.size, dtype, getattr(nccl, _NCCL_OPS[op]), stream.ptr)
        if op == "mean":
            buf /= size
    return buf


def _nccl_bcast(buf: Any, root: int, comm: Any) -> Any:
    nccl = _backend.nccl_module()
    cp = _backend.cupy_module()
    wire = buf.view(np.uint8) if buf.dtype == np.bool_ else buf
    dtype = getattr(nccl, _NCCL_TYPES[wire.dtype.name])
    with cp.cuda.Device(buf.device.id):
        comm.bcast(wire.data.ptr, wire.size, dtype, root, cp.cuda.get_current_stream().ptr)
    return buf


def _nccl_takes(buf: Any) -> bool:
    return _backend.is_gpu_array(buf) and _nccl_enabled() and (buf.dtype == np.bool_ or buf.dtype.name in _NCCL_TYPES)


def _reduce_buffer(buf: Any, op: str) -> Any:
    if _nccl_takes(buf):
        return _nccl_allreduce(buf, op, _nccl_comm(buf.device.id), _world._state.size)
    if _backend.is_gpu_array(buf):  # no NCCL: through the host
        host = _mpi_allreduce(_backend.to_host(buf), op)
        return _backend.asarray_on(host, _backend.device_of(buf))
    return _mpi_allreduce(buf, op)


# -- collectives ----------------------------------------------------------------------------


def all_reduce(tensors: Iterable[Any], op: str = "mean") -> list[Any]:
    """Reduce each tensor elementwise across all ranks (``'mean'``, ``'sum'``, ``'max'``, ``'min'``); returns a list.

    ``tensors`` is a list of gt.Tensors (or Variables), numpy or cupy arrays,
    and Nones (passed through, as for variables without a gradient). The
    arrays are packed into one contiguous buffer per dtype and device, each
    buffer is reduced with one collective (NCCL for GPU arrays when
    available, MPI otherwise) and unpacked, so the result has the input's
    types (a Variable gives a Tensor), shapes and dtypes; the inputs are not
    changed. Every rank must pass the same list of shapes and dtypes: a
    mismatch raises ``ValueError`` on every rank, naming the entry. ``'mean'``
    needs floating or complex dtypes. In a single process the inputs come
    back as they are (Variables as Tensors of their current value). Inside a
    ``gt.function`` the collective is recorded as a step of its own, so every
    replay reduces that call's values.

    >>> import gputape as gt, numpy as np
    >>> g = gt.distributed.all_reduce([gt.constant([1.0, 2.0]), None, np.arange(3)], op="sum")
    >>> [type(x).__name__ for x in g], g[0].numpy().tolist(), g[2].tolist()
    (['Tensor', 'NoneType', 'ndarray'], [1.0, 2.0], [0, 1, 2])
    """
    if op not in _OPS:
        raise ValueError(f"gt.distributed.all_reduce: op must be one of {_OPS}, got {op!r}")
    items = list(tensors)
    raws = [None if x is None else _raw(x, "all_reduce", i) for i, x in enumerate(items)]
    for i, a in enumerate(raws):
        if a is None:
            continue
        kind = a.dtype.kind
        if op in ("mean", "sum") and kind == "b":
            raise TypeError(
                f"gt.distributed.all_reduce: entry {i} is bool; op={op!r} needs numbers (bool takes max/min)"
            )
        if op == "mean" and kind not in "fc":
            raise TypeError(
                f"gt.distributed.all_reduce: entry {i} has dtype {a.dtype}; op='mean' would truncate integers: "
                "use op='sum' and divide by gt.distributed.world_size() in a float dtype"
            )
        if op in ("max", "min") and kind == "c":
            raise TypeError(f"gt.distributed.all_reduce: entry {i} is complex, which has no order for op={op!r}")
    _ensure()
    if _world._state.size == 1:
        # a new tensor, as the reduction of several ranks is, not one sharing the variable's array
        return [_wrap(a.copy()) if isinstance(x, Variable) else x for x, a in zip(items, raws)]
    present = [i for i, a in enumerate(raws) if a is not None]
    reduced = _all_reduce_arrays(op, *[raws[i] for i in present])
    trace = _thread_state.current_trace()
    if trace is not None and trace.owned():
        # inside gt.function's trace: every replay communicates again, with that call's values
        trace.call(functools.partial(_all_reduce_arrays, op), tuple(items[i] for i in present), reduced)
    out: list[Any] = [None] * len(items)
    for i, r in zip(present, reduced):
        out[i] = _wrap(r) if isinstance(items[i], Tensor) else r
    return out


def _all_reduce_arrays(op: str, *raws: Any) -> list[Any]:
    """The collective itself, on arrays: checked shapes, one reduction per dtype and device."""
    _check_same_everywhere("all_reduce", f"op={op!r}", [_entry(a) for a in raws])
    out: list[Any] = list(raws)
    for idx in _groups(out):
        arrays = [raws[i] for i in idx]
        buf = _reduce_buffer(_pack(arrays), op)
        for i, r in zip(idx, _unpack(buf, arrays)):
            out[i] = r
    return out


def average_gradients(grads: Iterable[Any]) -> list[Any]:
    """``all_reduce(grads, op='mean')``: each gradient averaged over the ranks (Nones stay None).

    With equal per-rank batches and a mean loss, the average of the ranks'
    gradients is the gradient of the whole batch.

    >>> import gputape as gt
    >>> [g.numpy().tolist() for g in gt.distributed.average_gradients([gt.constant([0.5])])]
    [[0.5]]
    """
    return all_reduce(grads, op="mean")


def broadcast_variables(variables: Any, root: int = 0) -> None:
    """Give every rank ``root``'s values of ``variables`` (a list of Variables, or a Module), assigned in place.

    Call it once after building the model (lazily built layers must exist:
    call the model on a sample batch first) so every rank starts from the
    same weights. The values travel packed, one collective per dtype; the
    ranks' lists must match in shapes and dtypes (``ValueError`` on every
    rank otherwise). In a single process nothing changes.

    >>> import gputape as gt
    >>> w = gt.Variable([1.0, 2.0])
    >>> gt.distributed.broadcast_variables([w]); w.numpy().tolist()
    [1.0, 2.0]
    """
    vs = list(variables.variables) if isinstance(variables, Module) else list(variables)
    for i, v in enumerate(vs):
        if not isinstance(v, Variable):
            raise TypeError(
                f"gt.distributed.broadcast_variables: entry {i} is a {type(v).__name__}, not a gt.Variable; "
                "pass model.variables (or the Module itself)"
            )
    _ensure()
    if not 0 <= int(root) < _world._state.size:
        raise ValueError(
            f"gt.distributed.broadcast_variables: root must be a rank in 0..{_world._state.size - 1}, got {root}"
        )
    if _world._state.size == 1:
        return
    raws = [v._data for v in vs]
    _check_same_everywhere("broadcast_variables", f"root={int(root)}", [_entry(a) for a in raws])
    for idx in _groups(raws):
        arrays = [raws[i] for i in idx]
        buf = _pack(arrays)
        if _nccl_takes(buf):
            _nccl_bcast(buf, int(root), _nccl_comm(buf.device.id))
        elif _backend.is_gpu_array(buf):
            host = _backend.to_host(buf)
            _world._state.comm.Bcast(host.view(np.uint8) if host.dtype == np.bool_ else host, root=int(root))
            buf = _backend.asarray_on(host, _backend.device_of(buf))
        else:
            _world._state.comm.Bcast(buf.view(np.uint8) if buf.dtype == np.bool_ else buf, root=int(root))
        if _world._state.rank != int(root):
            for i, value in zip(idx, _unpack(buf, arrays)):
                vs[i].assign(value)
