"""``tf.data.Dataset``: ``from_tensor_slices``, ``shuffle``, ``batch``, ``repeat``, ``take``, ``map``.

A small eager pipeline over in-memory arrays, in TensorFlow's order of
operations (``ds.shuffle(n).batch(b)`` shuffles examples, ``ds.batch(b).shuffle(n)``
shuffles batches). Elements are gt tensors on the current device, in the
structure that was sliced (a tensor, a tuple or a dict). ``shuffle`` uses
TensorFlow's buffer algorithm, so a buffer at least as large as the dataset
gives a uniform shuffle; by default each iteration reshuffles. Without a
``seed`` its orders follow the global seed (``tf.random.set_seed``).

>>> import gputape.tf as tf, numpy as np
>>> ds = tf.data.Dataset.from_tensor_slices((np.arange(6.0), np.arange(6))).shuffle(6, seed=0).batch(4)
>>> [(x.shape, y.shape) for x, y in ds]
[((4,), (4,)), ((2,), (2,))]
"""

from __future__ import annotations

import operator as _operator
from collections.abc import Callable as _Callable
from collections.abc import Iterator as _Iterator
from typing import Any as _Any

import numpy as _np

from .. import random as _random
from ..core import _errors
from ..core.tensor import Tensor as _Tensor
from ..core.tensor import constant as _constant
from ..devices.backend import to_host as _to_host
from ..devices.placement import current_device as _current_device
from ..ops._util import is_index as _is_index
from ..ops._util import norm_flag as _norm_flag
from ..ops.errors import invalid_argument as _invalid

__all__ = ["AUTOTUNE", "Dataset"]

AUTOTUNE = -1


def _count(value: _Any, op: str, arg: str) -> int:
    """An integer argument as TensorFlow takes it (it converts to an int64 tensor: no floats, no bools)."""
    try:
        if isinstance(value, bool) or not _is_index(value):
            raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype int64")
        return _operator.index(value)
    except _errors.NEVER_WRAP:
        raise
    except Exception as e:
        raise TypeError(
            f"Dataset.{op}: argument {arg} ({_errors.describe(value)}) must be an integer, not "
            f"{type(value).__name__} (TensorFlow: {e})"
        ) from e


def _host(x: _Any) -> _np.ndarray:
    if isinstance(x, _Tensor):
        return _np.asarray(_to_host(x._data))
    if isinstance(x, (list, float, int)):
        return _constant(x).numpy()  # TensorFlow's Python-value dtypes: float32, int32
    return _np.asarray(x)


def _to_device(a: _np.ndarray) -> _Tensor:
    return _constant(a, device=_current_device())


def _map_structure(fn: _Callable[[_Any], _Any], s: _Any) -> _Any:
    if isinstance(s, dict):
        return {k: _map_structure(fn, v) for k, v in s.items()}
    if isinstance(s, tuple):
        return tuple(_map_structure(fn, v) for v in s)
    return fn(s)


def _leaves(s: _Any) -> list[_Any]:
    if isinstance(s, dict):
        return [leaf for v in s.values() for leaf in _leaves(v)]
    if isinstance(s, tuple):
        return [leaf for v in s for leaf in _leaves(v)]
    return [s]


def _spec_text(s: _Any, batched: bool) -> str:
    if isinstance(s, dict):
        return "{" + ", ".join(f"{k!r}: {_spec_text(v, batched)}" for k, v in s.items()) + "}"
    if isinstance(s, tuple):
        return "(" + ", ".join(_spec_text(v, batched) for v in s) + ")"
    a = _np.asarray(s)
    shape = (None, *a.shape[1:]) if batched and a.ndim else a.shape  # a batch's first dimension varies
    return f"TensorSpec(shape={shape}, dtype={a.dtype})"


class Dataset:
    """An iterable pipeline; build one with :meth:`from_tensor_slices`.

    >>> import gputape.tf as tf
    >>> [int(x) for x in tf.data.Dataset.from_tensor_slices([1, 2, 3]).repeat(2).take(4)]
    [1, 2, 3, 1]
    """

    _batched = False  # set on datasets made by batch(): their first dimension prints as None

    def __init__(self, make: _Callable[[], _Iterator[_Any]], length: int | None) -> None:
        self._make = make  # a fresh iterator of host-array elements per pass
        self._length = length

    @staticmethod
    def from_tensor_slices(tensors: _Any) -> Dataset:
        """One element per entry of the first dimension of ``tensors`` (an array, or a tuple/dict of them).

        >>> import gputape.tf as tf
        >>> len(tf.data.Dataset.from_tensor_slices({"x": [[1.0], [2.0]], "y": [0, 1]}))
        2
        """
        try:
            data = _map_structure(_host, tensors)
        except _errors.NEVER_WRAP:
            raise
        except Exception as e:
            raise _errors.unconvertible(
                "Dataset.from_tensor_slices", "tensors", tensors, "an array, or a tuple/dict of arrays", e
            ) from e
        flat = _leaves(data)
        for a in flat:
            if a.dtype.kind not in "biufc":
                raise _errors.mark(
                    TypeError(
                        f"Dataset.from_tensor_slices: argument tensors ({_errors.describe(tensors)}) holds a value of "
                        f"dtype {a.dtype}; pass arrays of numbers (or a tuple/dict of them)"
                    )
                )
            if a.ndim == 0:
                raise _errors.mark(
                    ValueError(
                        f"Dataset.from_tensor_slices: argument tensors ({_errors.describe(tensors)}) holds a scalar, "
                        "which has no first dimension to slice (TensorFlow: Unbatching a tensor is only supported "
                        "for rank >= 1)"
                    )
                )
        lengths = {len(a) for a in flat}
        if len(lengths) != 1:
            raise ValueError(f"from_tensor_slices: all components need the same first dimension, got {lengths}")
        n = lengths.pop()

        def make() -> _Iterator[_Any]:
            for i in range(n):
                yield _map_structure(lambda a, i=i: a[i], data)

        return Dataset(make, n)

    def shuffle(self, buffer_size: int, seed: int | None = None, reshuffle_each_iteration: bool = True) -> Dataset:
        """Shuffle through a buffer of ``buffer_size`` elements (TensorFlow's algorithm).

        >>> import gputape.tf as tf
        >>> sorted(int(x) for x in tf.data.Dataset.from_tensor_slices([1, 2, 3]).shuffle(3, seed=1))
        [1, 2, 3]
        """
        buffer_size = _count(buffer_size, "shuffle", "buffer_size")
        if buffer_size < 1:
            raise _invalid(f"Dataset.shuffle: argument buffer_size must be greater than zero, got {buffer_size}")
        # Without an op seed the order comes from gt.random's global seed and op counter, so
        # tf.random.set_seed makes it the same in every process (TensorFlow's rule).
        master = _random.generator(seed)
        fixed = master.integers(2**63)
        parent = self._make

        def make() -> _Iterator[_Any]:
            rng = _np.random.default_rng(master.integers(2**63) if reshuffle_each_iteration else fixed)
            buf: list[_Any] = []
            for item in parent():
                if len(buf) < buffer_size:
                    buf.append(item)
                    continue
                j = int(rng.integers(len(buf)))
                yield buf[j]
                buf[j] = item
            while buf:
                yield buf.pop(int(rng.integers(len(buf))))

        return Dataset(make, self._length)

    def batch(self, batch_size: int, drop_remainder: bool = False, **kwargs: _Any) -> Dataset:
        """Stack ``batch_size`` consecutive elements (``num_parallel_calls`` etc. are ignored).

        >>> import gputape.tf as tf
        >>> [b.shape for b in tf.data.Dataset.from_tensor_slices([1, 2, 3]).batch(2, drop_remainder=True)]
        [(2,)]
        """
        batch_size = _count(batch_size, "batch", "batch_size")
        drop_remainder = _norm_flag(drop_remainder, "Dataset.batch")
        if batch_size < 1:
            raise _invalid(f"Dataset.batch: argument batch_size must be greater than zero, got {batch_size}")
        parent = self._make

        def stack(items: list[_Any]) -> _Any:
            first = items[0]
            if isinstance(first, dict):
                return {k: stack([it[k] for it in items]) for k in first}
            if isinstance(first, tuple):
                return tuple(stack([it[i] for it in items]) for i in range(len(first)))
            return _np.stack(items)

        def make() -> _Iterator[_Any]:
            items: list[_Any] = []
            for item in parent():
                items.append(item)
                if len(items) == batch_size:
                    yield stack(items)
                    items = []
            if items and not drop_remainder:
                yield stack(items)

        n = self._length
        length = None if n is None else (n // batch_size if drop_remainder else -(-n // batch_size))
        out = Dataset(make, length)
        out._batched = not drop_remainder  # TensorFlow: the batch dimension is known only when dropping the rest
        return out

    def repeat(self, count: int | None = None) -> Dataset:
        """Repeat the dataset ``count`` times (forever when None or negative, as in TensorFlow).

        >>> import gputape.tf as tf
        >>> len(tf.data.Dataset.from_tensor_slices([1, 2]).repeat(3))
        6
        """
        n = -1 if count is None else _count(count, "repeat", "count")
        parent = self._make

        def make() -> _Iterator[_Any]:
            i = 0
            while n < 0 or i < n:
                yield from parent()
                i += 1

        if n == 0 or self._length == 0:
            return Dataset(make, 0)
        return Dataset(make, None if n < 0 or self._length is None else self._length * n)

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all of them when ``count`` is -1, as in TensorFlow).

        >>> import gputape.tf as tf
        >>> len(tf.data.Dataset.from_tensor_slices([1, 2, 3]).take(2)), len(tf.data.Dataset.range(3).take(-1))
        (2, 3)
        """
        n = _count(count, "take", "count")
        if n < 0:  # TensorFlow's TakeDataset: a negative count takes everything
            return self
        parent = self._make

        def make() -> _Iterator[_Any]:
            if n == 0:
                return
            for i, item in enumerate(parent()):
                yield item
                if i + 1 >= n:
                    return

        return Dataset(make, n if self._length is None else min(n, self._length))

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (nothing when ``count`` is -1, as in TensorFlow).

        >>> import gputape.tf as tf
        >>> [int(x) for x in tf.data.Dataset.range(4).skip(1)]
        [1, 2, 3]
        """
        n = _count(count, "skip", "count")
        parent = self._make

        def make() -> _Iterator[_Any]:
            if n < 0:
                return
            for i, item in enumerate(parent()):
                if i >= n:
                    yield item

        if n < 0:
            return Dataset(make, 0)
        return Dataset(make, None if self._length is None else max(self._length - n, 0))

    def enumerate(self, start: int = 0) -> Dataset:
        """Pairs ``(i, element)`` with an int64 counter ``i`` from ``start``.

        >>> import gputape.tf as tf
        >>> [(int(i), int(x)) for i, x in tf.data.Dataset.from_tensor_slices([7, 8]).enumerate(start=1)]
        [(1, 7), (2, 8)]
        """
        first = _count(start, "enumerate", "start")
        parent = self._make

        def make() -> _Iterator[_Any]:
            for i, item in enumerate(parent(), first):
                yield _np.int64(i), item

        out = Dataset(make, self._length)
        out._batched = self._batched
        return out

    @staticmethod
    def range(*args: _Any, output_type: _Any = "int64") -> Dataset:
        """``range(stop)``, ``range(start, stop[, step])`` as a dataset of ``output_type`` scalars.

        >>> import gputape.tf as tf
        >>> [int(x) for x in tf.data.Dataset.range(1, 7, 2)]
        [1, 3, 5]
        """
        if not 1 <= len(args) <= 3:
            raise TypeError(f"Dataset.range: takes 1 to 3 integers (stop, or start, stop[, step]), got {len(args)}")
        names = ("stop",) if len(args) == 1 else ("start", "stop", "step")[: len(args)]
        ints = [_count(a, "range", n) for a, n in zip(args, names)]
        if len(ints) == 3 and ints[2] == 0:
            raise _invalid("Dataset.range: argument step must not be 0")
        r = range(*ints)
        dt = _np.dtype(output_type)
        return Dataset(lambda: (dt.type(i) for i in r), len(r))

    def map(self, fn: _Callable[..., _Any], num_parallel_calls: _Any = None) -> Dataset:
        """Apply ``fn`` to each element (a tuple element is passed as separate arguments, as in TF).

        >>> import gputape.tf as tf
        >>> [float(x) for x in tf.data.Dataset.from_tensor_slices([1.0, 2.0]).map(lambda x: x * 2)]
        [2.0, 4.0]
        """
        parent = self._make

        def make() -> _Iterator[_Any]:
            for item in parent():
                t = _map_structure(_to_device, item)
                out = fn(*t) if isinstance(t, tuple) else fn(t)
                yield _map_structure(_host, out)

        return Dataset(make, self._length)

    def prefetch(self, buffer_size: _Any = None) -> Dataset:
        """Returns the dataset unchanged (eager iteration has nothing to overlap).

        >>> import gputape.tf as tf
        >>> len(tf.data.Dataset.from_tensor_slices([1]).prefetch(tf.data.AUTOTUNE))
        1
        """
        return self

    cache = prefetch

    def __iter__(self) -> _Iterator[_Any]:
        for item in self._make():
            yield _map_structure(_to_device, item)

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("The dataset is infinite (len() of Dataset.repeat() without a count); use take(n)")
        return self._length

    def __repr__(self) -> str:
        """TensorFlow's ``<... element_spec=...>``, from the first element (so a ``map`` function runs once).

        >>> import gputape.tf as tf
        >>> tf.data.Dataset.from_tensor_slices(([[1.0, 2.0]], [0])).batch(1)  # doctest: +NORMALIZE_WHITESPACE
        <Dataset element_spec=(TensorSpec(shape=(None, 2), dtype=float32),
                               TensorSpec(shape=(None,), dtype=int32)), cardinality=1>
        """
        try:
            first = next(iter(self._make()), None)
            spec = "?" if first is None else _spec_text(first, batched=self._batched)
        except Exception:  # a pipeline that fails on its first element still prints
            spec = "?"
        return f"<Dataset element_spec={spec}, cardinality={self.cardinality()}>"

    def cardinality(self) -> int:
        """Number of elements, ``-1`` when infinite (TensorFlow's INFINITE), as a Python int.

        >>> import gputape.tf as tf
        >>> tf.data.Dataset.from_tensor_slices([1, 2]).repeat().cardinality()
        -1
        """
        return -1 if self._length is None else self._length


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
