"""Sharding the data: this rank's contiguous block of rows of a batch (``shard_range``, ``shard_batch``) or of
every batch of an iterable (``shard``).

>>> import gputape as gt
>>> gt.distributed.shard_range(10, 1, 2)
range(5, 10)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..core.tensor import Tensor, _wrap
from ..devices import backend as _backend
from . import world as _world
from .world import _UNEVEN


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
    r = _world.rank() if rank_ is None else int(rank_)
    w = _world.world_size() if world is None else int(world)
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
        # A gt.data.DataLoader tells its batches' bounds without iterating (gt.data sits above this package:
        # it asks, rather than this module importing it), so the batches "drop" skips are not counted.
        bounds = getattr(self.data, "_bounds", None)
        if bounds is not None and self.uneven == "drop":
            return sum(1 for lo, hi in bounds() if hi - lo >= self.world_size)
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
