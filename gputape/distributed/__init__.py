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

# The package's modules by concern, bottom up: world (the job and its state), collectives (all_reduce,
# broadcast_variables), optimizer (DistributedOptimizer), sharding (the data). The private names are
# re-exported for the tests and tools that reach them as gt.distributed._<name>.
from .collectives import (
    _make_nccl_comm,
    _mismatch_message,
    _nccl_allreduce,
    _nccl_bcast,
    all_reduce,
    average_gradients,
    broadcast_variables,
)
from .optimizer import DistributedOptimizer
from .sharding import shard, shard_batch, shard_range
from .world import (
    _RANK_VARS,
    _SIZE_VARS,
    _launcher_size,
    _shared_seed,
    _State,
    _state,
    abort,
    backend,
    barrier,
    init,
    is_initialized,
    local_rank,
    rank,
    world_size,
)

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
