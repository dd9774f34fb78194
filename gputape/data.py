"""A minimal batch iterator over arrays (``gt.data.DataLoader``).

The arrays are moved to the device once, when the loader is made, and each
batch is gathered there, so a GPU training loop never copies a batch from
the host. Shuffling uses a seeded generator of the loader's own: every epoch
gets a new order, and the sequence of orders is the same on every run.

>>> import gputape as gt, numpy as np
>>> x, y = np.arange(10.0).reshape(5, 2), np.arange(5)
>>> loader = gt.data.DataLoader(x, y, batch_size=2, shuffle=True, seed=0)
>>> len(loader), [xb.shape for xb, yb in loader]
(3, [(2, 2), (2, 2), (1, 2)])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import distributed as _distributed
from . import random as _random
from .core.tensor import Tensor, _wrap
from .devices import backend
from .devices.placement import current_device
from .ops._util import norm_size

__all__ = ["DataLoader"]


class DataLoader:
    """Batches of ``arrays`` (all with the same first dimension) as gt tensors on ``device``.

    Iterating yields a tuple of tensors per batch (a single tensor when one
    array was given). ``len(loader)`` is the number of batches per epoch.

    - ``shuffle``: a new permutation each epoch, from ``np.random.default_rng(seed)``, or,
      without a ``seed``, from a stream of ``gt.random``'s (the global seed decides).
    - ``drop_remainder``: skip the last batch when it is smaller than ``batch_size``.
    - ``device``: where batches live (default: the current device when the loader is made).
    - ``shard``: in a ``gt.distributed`` job, yield only this rank's contiguous
      block of each global batch of ``batch_size`` rows (``batch_size // world_size``
      rows each; the last ``batch_size % world_size`` rows of a batch, and a batch
      smaller than the world, are skipped on every rank: see
      ``gt.distributed.shard_range``). Every rank must shuffle alike: pass the same
      ``seed`` everywhere; without one, rank 0 draws a seed and sends it to the others.

    >>> import gputape as gt, numpy as np
    >>> loader = gt.data.DataLoader(np.arange(5), batch_size=2, drop_remainder=True)
    >>> [b.numpy().tolist() for b in loader]
    [[0, 1], [2, 3]]
    """

    def __init__(
        self,
        *arrays: Any,
        batch_size: int = 32,
        shuffle: bool = False,
        seed: int | None = None,
        drop_remainder: bool = False,
        device: str | None = None,
        shard: bool = False,
    ) -> None:
        if not arrays:
            raise ValueError("DataLoader: pass at least one array")
        # a float is refused, not truncated (int(2.5) made batches of 2)
        batch_size = norm_size(batch_size, "DataLoader", "batch_size, a positive integer", minimum=1)
        self.device = backend.parse_device(device) if device is not None else current_device()
        self.arrays = [self._place(a) for a in arrays]
        lengths = {a.shape[0] if a.ndim else None for a in self.arrays}
        if len(lengths) != 1 or None in lengths:
            shapes = [tuple(a.shape) for a in self.arrays]
            raise ValueError(f"DataLoader: all arrays need the same first dimension, got shapes {shapes}")
        self.n = lengths.pop()
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_remainder = bool(drop_remainder)
        self.shard = bool(shard)
        if self.shard and seed is None and self.shuffle:
            seed = _distributed._shared_seed()  # a per-rank random seed would give every rank other rows
        # Without a seed, the global seed decides (gt.random's op stream, taken once here), so
        # gt.random.seed makes every epoch's order the same in every process.
        self._rng = _random.generator(seed)

    def _place(self, a: Any) -> Any:
        data = a._data if isinstance(a, Tensor) else a
        if backend.xp_of(data) is np and not isinstance(data, np.ndarray):
            data = np.asarray(data)
        if backend.device_of(data) != self.device:
            data = backend.asarray_on(backend.to_host(data), self.device)
        return data

    def _bounds(self) -> list[tuple[int, int]]:
        """``(lo, hi)`` of each global batch of an epoch, before sharding."""
        full, rest = divmod(self.n, self.batch_size)
        count = full if self.drop_remainder or not rest else full + 1
        return [(i * self.batch_size, min((i + 1) * self.batch_size, self.n)) for i in range(count)]

    def _local_bounds(self) -> list[tuple[int, int]]:
        """This rank's ``(lo, hi)`` in each batch it takes part in."""
        bounds = self._bounds()
        if not self.shard:
            return bounds
        r, w = _distributed.rank(), _distributed.world_size()
        out = []
        for lo, hi in bounds:
            rows = _distributed.shard_range(hi - lo, r, w)
            if len(rows):
                out.append((lo + rows.start, lo + rows.stop))
        return out

    def __repr__(self) -> str:
        """What it batches, how, and where.

        >>> import gputape as gt, numpy as np
        >>> gt.data.DataLoader(np.zeros((10, 3)), np.arange(10), batch_size=4, shuffle=True, seed=0)
        <DataLoader shapes=[(10, 3), (10,)], batch_size=4, batches=3, shuffle=True, drop_remainder=False, device='cpu'>
        """
        shapes = [tuple(a.shape) for a in self.arrays]
        shard = ", shard=True" if self.shard else ""
        return (
            f"<DataLoader shapes={shapes}, batch_size={self.batch_size}, batches={len(self)}, shuffle={self.shuffle}, "
            f"drop_remainder={self.drop_remainder}, device={self.device!r}{shard}>"
        )

    def __len__(self) -> int:
        if not self.shard:
            full, rest = divmod(self.n, self.batch_size)
            return full if self.drop_remainder or not rest else full + 1
        return len(self._local_bounds())

    def __iter__(self) -> Iterator[Any]:
        order = self._rng.permutation(self.n) if self.shuffle else None
        xp = backend.xp_for_device(self.device)
        if order is not None and self.device != "cpu":
            order = backend.asarray_on(order, self.device)
        for lo, hi in self._local_bounds():
            if order is None:
                batch = [_wrap(a[lo:hi].copy()) for a in self.arrays]
            else:
                idx = order[lo:hi]
                batch = [_wrap(xp.take(a, idx, axis=0)) for a in self.arrays]
            yield batch[0] if len(batch) == 1 else tuple(batch)
