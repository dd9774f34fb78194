"""``tf.random``: the random ops, ``set_seed``, ``Generator`` and the stateless ops.

TensorFlow's seed model (see :mod:`gputape.random`): ``set_seed(n)`` sets the global seed
and resets the op counter, so every unseeded draw after it (these ops, initializers,
Dropout, ``Dataset.shuffle``) is reproducible across processes; an op's ``seed=``
picks a stream from the global seed and the op seed, which later calls with that seed
continue until the next ``set_seed``. ``Generator`` holds a stream of its own; the
``stateless_*`` ops are pure functions of their ``seed`` (a pair of ints).

All streams are numpy's Philox: deterministic, but not bit-identical to TensorFlow's.

>>> import gputape.tf as tf
>>> tf.random.set_seed(0)
>>> tf.random.normal((2, 3)).shape
(2, 3)
"""

from __future__ import annotations

import operator as _operator
import types as _types
from typing import Any as _Any

import numpy as _np

from .. import random as _random
from ..core.tensor import Tensor as _Tensor
from ..core.tensor import constant as _constant
from ..devices.placement import current_device as _current_device
from ..nn.initializers import _truncated_normal

__all__ = [
    "Generator",
    "categorical",
    "experimental",
    "get_global_generator",
    "normal",
    "set_seed",
    "stateless_categorical",
    "stateless_normal",
    "stateless_truncated_normal",
    "stateless_uniform",
    "truncated_normal",
    "uniform",
]


def _shape(shape: _Any) -> tuple[int, ...]:
    if hasattr(shape, "numpy"):
        shape = shape.numpy().tolist()
    return (int(shape),) if isinstance(shape, (int, _np.integer)) else tuple(int(s) for s in shape)


def _out(a: _np.ndarray) -> _Tensor:
    return _constant(a, device=_current_device())


def set_seed(seed: int | None) -> None:
    """Set the global seed (``None`` clears it) and reset the op counter, as TensorFlow does.

    >>> import gputape.tf as tf
    >>> tf.random.set_seed(1)
    >>> a = tf.random.uniform([2]).numpy()
    >>> tf.random.set_seed(1)
    >>> bool((a == tf.random.uniform([2]).numpy()).all())
    True
    """
    _random.seed(seed)


# -- the draws, shared by the stateful ops, Generator and the stateless ops -------------------


def _normal(rng: _np.random.Generator, shape: _Any, mean: _Any, stddev: _Any, dtype: _Any) -> _np.ndarray:
    return rng.normal(mean, stddev, _shape(shape)).astype(dtype)


def _truncated(rng: _np.random.Generator, shape: _Any, mean: _Any, stddev: _Any, dtype: _Any) -> _np.ndarray:
    return (_truncated_normal(rng, stddev, _shape(shape)) + mean).astype(dtype)


def _uniform(rng: _np.random.Generator, shape: _Any, minval: _Any, maxval: _Any, dtype: _Any, op: str) -> _np.ndarray:
    dt = _np.dtype(dtype)
    if dt.kind in "iu":
        if maxval is None:
            raise ValueError(f"{op}: maxval must be given for integer dtypes")
        return rng.integers(int(minval), int(maxval), _shape(shape)).astype(dt)
    return rng.uniform(minval, 1.0 if maxval is None else maxval, _shape(shape)).astype(dt)


def _categorical(rng: _np.random.Generator, logits: _Any, num_samples: int, dtype: _Any) -> _np.ndarray:
    # Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits), row by row.
    lg = _np.asarray(logits.numpy() if isinstance(logits, _Tensor) else logits, dtype=_np.float64)
    if lg.ndim != 2:
        raise ValueError(f"categorical: logits must be 2-D [batch_size, num_classes], got shape {lg.shape}")
    g = rng.gumbel(size=(lg.shape[0], int(num_samples), lg.shape[1]))
    return _np.argmax(lg[:, None, :] + g, axis=-1).astype(dtype)


# -- stateful ops ---------------------------------------------------------------------------


def normal(
    shape: _Any,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: _Any = "float32",
    seed: int | None = None,
    name: _Any = None,
) -> _Any:
    """Samples from N(mean, stddev²).

    >>> import gputape.tf as tf
    >>> str(tf.random.normal([2], dtype=tf.float64).dtype)
    'float64'
    """
    return _out(_normal(_random._op_generator(seed, "normal"), shape, mean, stddev, dtype))


def truncated_normal(
    shape: _Any,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: _Any = "float32",
    seed: int | None = None,
    name: _Any = None,
) -> _Any:
    """Samples from N(mean, stddev²) redrawn until within two standard deviations of the mean.

    >>> import gputape.tf as tf
    >>> bool((abs(tf.random.truncated_normal([1000]).numpy()) <= 2).all())
    True
    """
    return _out(_truncated(_random._op_generator(seed, "truncated_normal"), shape, mean, stddev, dtype))


def uniform(
    shape: _Any,
    minval: float = 0,
    maxval: float | None = None,
    dtype: _Any = "float32",
    seed: int | None = None,
    name: _Any = None,
) -> _Any:
    """Samples from U[minval, maxval) (maxval defaults to 1 for floats and is required for integers).

    >>> import gputape.tf as tf
    >>> x = tf.random.uniform([100], minval=2, maxval=5, dtype=tf.int32)
    >>> bool(((x.numpy() >= 2) & (x.numpy() < 5)).all()), str(x.dtype)
    (True, 'int32')
    """
    return _out(_uniform(_random._op_generator(seed, "uniform"), shape, minval, maxval, dtype, "tf.random.uniform"))


def categorical(
    logits: _Any, num_samples: int, dtype: _Any = "int64", seed: int | None = None, name: _Any = None
) -> _Any:
    """``num_samples`` class indices per row of ``logits`` ([batch, classes]), drawn from its softmax.

    >>> import gputape.tf as tf
    >>> tf.random.categorical([[0.0, -1e9], [-1e9, 0.0]], 3).numpy().tolist()
    [[0, 0, 0], [1, 1, 1]]
    """
    return _out(_categorical(_random._op_generator(seed, "categorical"), logits, num_samples, dtype))


# -- stateless ops: pure functions of a seed pair ------------------------------------------------


def _seed_pair(seed: _Any, op: str) -> tuple[int, int]:
    a = _np.asarray(seed.numpy() if isinstance(seed, _Tensor) else seed)
    if a.shape != (2,) or a.dtype.kind not in "iu":
        raise ValueError(f"{op}: seed must be a shape [2] integer tensor, got {a.dtype} of shape {a.shape}")
    return int(a[0]) % 2**64, int(a[1]) % 2**64  # TensorFlow's seeds are int64: wrap negatives


def _stateless(seed: _Any, op: str) -> _np.random.Generator:
    # a tag keeps stateless streams apart from the global ones; the same seed gives the same
    # numbers whatever the op (TensorFlow's stateless ops share their seed-to-key rule too)
    return _random._stream(_random._philox_key(0x57A7E1E55, *_seed_pair(seed, op)), 0)


def stateless_normal(
    shape: _Any,
    seed: _Any,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: _Any = "float32",
    name: _Any = None,
    alg: _Any = None,
) -> _Any:
    """N(mean, stddev²) draws that depend only on ``seed`` (a pair of ints) and the arguments.

    >>> import gputape.tf as tf
    >>> a = tf.random.stateless_normal([3], seed=[1, 2])
    >>> bool((a.numpy() == tf.random.stateless_normal([3], seed=[1, 2]).numpy()).all())
    True
    """
    return _out(_normal(_stateless(seed, "stateless_normal"), shape, mean, stddev, dtype))


def stateless_truncated_normal(
    shape: _Any,
    seed: _Any,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: _Any = "float32",
    name: _Any = None,
    alg: _Any = None,
) -> _Any:
    """Truncated normal draws (within two standard deviations) that depend only on ``seed``.

    >>> import gputape.tf as tf
    >>> bool((abs(tf.random.stateless_truncated_normal([100], seed=[0, 0]).numpy()) <= 2).all())
    True
    """
    return _out(_truncated(_stateless(seed, "stateless_truncated_normal"), shape, mean, stddev, dtype))


def stateless_uniform(
    shape: _Any,
    seed: _Any,
    minval: float = 0,
    maxval: float | None = None,
    dtype: _Any = "float32",
    name: _Any = None,
    alg: _Any = None,
) -> _Any:
    """U[minval, maxval) draws that depend only on ``seed`` (integers need ``maxval``).

    >>> import gputape.tf as tf
    >>> tf.random.stateless_uniform([4], seed=[3, 4], minval=0, maxval=10, dtype=tf.int32).numpy().tolist() == \\
    ...     tf.random.stateless_uniform([4], seed=[3, 4], minval=0, maxval=10, dtype=tf.int32).numpy().tolist()
    True
    """
    rng = _stateless(seed, "stateless_uniform")
    return _out(_uniform(rng, shape, minval, maxval, dtype, "tf.random.stateless_uniform"))


def stateless_categorical(logits: _Any, num_samples: int, seed: _Any, dtype: _Any = "int64", name: _Any = None) -> _Any:
    """``num_samples`` class indices per row of ``logits``, depending only on ``seed``.

    >>> import gputape.tf as tf
    >>> tf.random.stateless_categorical([[0.0, -1e9]], 2, seed=[7, 7]).numpy().tolist()
    [[0, 0]]
    """
    return _out(_categorical(_stateless(seed, "stateless_categorical"), logits, num_samples, dtype))


def _stateless_split(seed: _Any, num: int = 2) -> _Tensor:
    """``num`` new seed pairs from one (``tf.random.experimental.stateless_split``), shape [num, 2].

    >>> import gputape.tf as tf
    >>> tf.random.experimental.stateless_split([1, 2], num=3).shape
    (3, 2)
    """
    return _out(_stateless(seed, "stateless_split").integers(0, 2**63, (int(num), 2), dtype=_np.int64))


def _stateless_fold_in(seed: _Any, data: int) -> _Tensor:
    """A new seed pair from ``seed`` and an integer (``tf.random.experimental.stateless_fold_in``).

    >>> import gputape.tf as tf
    >>> tf.random.experimental.stateless_fold_in([1, 2], 5).shape
    (2,)
    """
    a, b = _seed_pair(seed, "stateless_fold_in")
    rng = _random._stream(_random._philox_key(0xF01D, a, b, _operator.index(data) % 2**64), 0)
    return _out(rng.integers(0, 2**63, 2, dtype=_np.int64))


experimental = _types.SimpleNamespace(stateless_split=_stateless_split, stateless_fold_in=_stateless_fold_in)


# -- Generator ---------------------------------------------------------------------------------


class Generator:
    """A random stream of its own (``tf.random.Generator``), on numpy's Philox.

    ``from_seed`` gives the same numbers in every process; ``split`` makes independent
    generators (and advances this one). Not bit-identical to TensorFlow's streams.

    >>> import gputape.tf as tf
    >>> g = tf.random.Generator.from_seed(1)
    >>> a = g.normal([2]).numpy()
    >>> bool((a == tf.random.Generator.from_seed(1).normal([2]).numpy()).all())
    True
    >>> [c.uniform([1]).shape for c in g.split(2)]
    [(1,), (1,)]
    """

    def __init__(self, copy_from: Generator | None = None, state: _Any = None, alg: _Any = None) -> None:
        if copy_from is not None:
            self._rng = _np.random.Generator(_np.random.Philox())
            self._rng.bit_generator.state = copy_from._rng.bit_generator.state
        elif state is not None:
            raise NotImplementedError(
                "tf.random.Generator(state=...): TensorFlow's state layout is not gputape's; "
                "use Generator.from_seed(seed)"
            )
        else:
            self._rng = _np.random.Generator(_np.random.Philox())
        self.algorithm = "philox"

    @classmethod
    def _from_key(cls, key: int) -> Generator:
        g = cls.__new__(cls)
        g._rng, g.algorithm = _random._stream(key, 0), "philox"
        return g

    @classmethod
    def from_seed(cls, seed: int, alg: _Any = None) -> Generator:
        """A generator whose numbers depend only on ``seed`` (not on the global seed).

        >>> import gputape.tf as tf
        >>> tf.random.Generator.from_seed(3).uniform([2]).shape
        (2,)
        """
        return cls._from_key(_random._philox_key(0x6E4, *_seed_entropy(seed)))

    @classmethod
    def from_non_deterministic_state(cls, alg: _Any = None) -> Generator:
        """A generator seeded from the OS: different in every process.

        >>> import gputape.tf as tf
        >>> tf.random.Generator.from_non_deterministic_state().normal([3]).shape
        (3,)
        """
        return cls()

    def reset_from_seed(self, seed: int) -> None:
        """Restart this generator as ``from_seed(seed)`` would make it.

        >>> import gputape.tf as tf
        >>> g = tf.random.Generator.from_seed(5); a = g.normal([2]).numpy()
        >>> g.reset_from_seed(5); bool((a == g.normal([2]).numpy()).all())
        True
        """
        self._rng = Generator.from_seed(seed)._rng

    def normal(
        self, shape: _Any, mean: float = 0.0, stddev: float = 1.0, dtype: _Any = "float32", name: _Any = None
    ) -> _Any:
        """N(mean, stddev²) draws from this generator.

        >>> import gputape.tf as tf
        >>> tf.random.Generator.from_seed(0).normal([2, 2]).shape
        (2, 2)
        """
        return _out(_normal(self._rng, shape, mean, stddev, dtype))

    def truncated_normal(
        self, shape: _Any, mean: float = 0.0, stddev: float = 1.0, dtype: _Any = "float32", name: _Any = None
    ) -> _Any:
        """Truncated normal draws (within two standard deviations) from this generator.

        >>> import gputape.tf as tf
        >>> bool((abs(tf.random.Generator.from_seed(0).truncated_normal([50]).numpy()) <= 2).all())
        True
        """
        return _out(_truncated(self._rng, shape, mean, stddev, dtype))

    def uniform(
        self, shape: _Any, minval: float = 0, maxval: float | None = None, dtype: _Any = "float32", name: _Any = None
    ) -> _Any:
        """U[minval, maxval) draws from this generator (integers need ``maxval``).

        >>> import gputape.tf as tf
        >>> bool((tf.random.Generator.from_seed(0).uniform([9], 1, 2).numpy() >= 1).all())
        True
        """
        return _out(_uniform(self._rng, shape, minval, maxval, dtype, "Generator.uniform"))

    def uniform_full_int(self, shape: _Any, dtype: _Any = "int64", name: _Any = None) -> _Any:
        """Integers over the dtype's whole range.

        >>> import gputape.tf as tf
        >>> str(tf.random.Generator.from_seed(0).uniform_full_int([2]).dtype)
        'int64'
        """
        info = _np.iinfo(_np.dtype(dtype))
        return _out(self._rng.integers(info.min, info.max, _shape(shape), dtype=_np.dtype(dtype), endpoint=True))

    def make_seeds(self, count: int = 1) -> _Any:
        """``count`` seed pairs for the stateless ops, shape [2, count] (advances this generator).

        >>> import gputape.tf as tf
        >>> tf.random.Generator.from_seed(0).make_seeds(3).shape
        (2, 3)
        """
        return _out(self._rng.integers(0, 2**63, (2, int(count)), dtype=_np.int64))

    def split(self, count: int = 1) -> list[Generator]:
        """``count`` new independent generators; their keys are drawn from (and advance) this one.

        >>> import gputape.tf as tf
        >>> a = [g.normal([1]).numpy()[0] for g in tf.random.Generator.from_seed(2).split(2)]
        >>> b = [g.normal([1]).numpy()[0] for g in tf.random.Generator.from_seed(2).split(2)]
        >>> bool(a == b and a[0] != a[1])
        True
        """
        keys = self._rng.integers(0, 2**64, (int(count), 2), dtype=_np.uint64)
        return [Generator._from_key(int(k[0]) | (int(k[1]) << 64)) for k in keys]


def _seed_entropy(seed: _Any) -> tuple:
    if isinstance(seed, _Tensor):
        seed = seed.numpy().tolist()
    flat = [seed] if _np.ndim(seed) == 0 else list(_np.ravel(seed))
    return tuple(_operator.index(s) % 2**64 for s in flat)


_global_generator: Generator | None = None


def get_global_generator() -> Generator:
    """The process's global ``Generator`` (made on first use; seeded from the global seed if set).

    >>> import gputape.tf as tf
    >>> tf.random.get_global_generator().normal([1]).shape
    (1,)
    """
    global _global_generator
    if _global_generator is None:
        s = _random.get_seed()
        _global_generator = Generator() if s is None else Generator.from_seed(s)
    return _global_generator


# The __future__ import binds `annotations` here; it is no TensorFlow name, so not one of this module's.
del annotations
