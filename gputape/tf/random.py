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
from ..core import _errors
from ..core.recording import traced as _traced
from ..core.tensor import Tensor as _Tensor
from ..core.tensor import constant as _constant
from ..devices import backend as _backend
from ..devices.placement import current_device as _current_device
from ..nn.initializers import _truncated_normal
from ..ops._util import is_index as _is_index
from ..ops.errors import invalid_argument as _invalid_argument

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


def _shape(shape: _Any, op: str = "tf.random") -> tuple[int, ...]:
    """A shape as TensorFlow takes it: an int32/int64 vector (or one integer); floats and negative
    sizes are refused (int() would truncate 2.5 to 2: a silent wrong shape)."""
    try:
        dims = shape.numpy().tolist() if isinstance(shape, _Tensor) else shape
        dims = [dims] if _is_index(dims) else dims
        if any(isinstance(d, bool) for d in dims):
            raise TypeError("a bool is not a size")
        out = tuple(_operator.index(d) for d in dims)
    except _errors.NEVER_WRAP:
        raise
    except Exception as e:
        raise _invalid_argument(
            f"{op}: argument shape ({shape!r}) must be a list of integers (TensorFlow: Value for attr 'T' is "
            "not in the list of allowed values: int32, int64)"
        ) from e
    if any(d < 0 for d in out):
        raise _invalid_argument(f"{op}: argument shape {list(out)} has a negative size")
    return out


def _dtype(dtype: _Any, op: str, ints: bool = False) -> _np.dtype:
    """The draw's dtype: floats (and int32/int64 for uniform), as TensorFlow's random kernels take."""
    try:
        dt = _np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{op}: argument dtype ({dtype!r}) is not a dtype; pass e.g. tf.float32") from e
    if dt.kind == "f" or (ints and dt in (_np.int32, _np.int64)):
        return dt
    allowed = "half, bfloat16, float, double" + (", int32, int64" if ints else "")
    raise _invalid_argument(
        f"{op}: argument dtype ({dt}) is not one it draws (TensorFlow: Value for attr 'dtype' of {dt} is not in "
        f"the list of allowed values: {allowed})"
    )


def _param(v: _Any, op: str, arg: str) -> _Any:
    """A distribution parameter (mean, stddev, minval, maxval): a real number or array, as TensorFlow
    converts it to the draw's dtype (NaN and inf pass through to the values, as there)."""
    try:
        a = v.numpy() if isinstance(v, _Tensor) else _np.asarray(v)
    except _errors.NEVER_WRAP:
        raise
    except Exception as e:
        what = f"{op}: argument {arg} ({_errors.describe(v)})"
        raise TypeError(f"{what} is not a number [{type(e).__name__}: {e}]") from e
    if a.dtype.kind not in "biuf":
        raise TypeError(
            f"{op}: argument {arg} ({_errors.describe(v)}) is not a real number (dtype {a.dtype}); pass a float"
        )
    return a


def _out(a: _np.ndarray) -> _Tensor:
    return _constant(a, device=_current_device())


class _Redraw:
    """A stateful draw as a ``gt.function`` replay step: every replay draws the next numbers from
    the stream ``rng_of()`` gives then (the op counter's next stream, a Generator's state), as the
    eager call would, instead of replaying the traced numbers."""

    def __init__(self, rng_of: _Any, draw: _Any, device: str) -> None:
        self.rng_of, self.draw, self.device = rng_of, draw, device

    def __call__(self, *args: _Any) -> _Any:
        a = self.draw(self.rng_of(), *args)
        return a if self.device == "cpu" else _backend.asarray_on(a, self.device)


def _op_stream(seed: int | None, op: str) -> _Any:
    # each call takes the op's next stream (the op counter, or the op seed's continuing stream)
    return lambda: _random._op_generator(seed, op)


def _drawn(rng_of: _Any, draw: _Any, *args: _Any) -> _Tensor:
    """``draw(rng_of(), *args)`` as a tensor, recorded so that a ``gt.function`` replay draws anew.

    A tensor among ``args`` (categorical's logits) reaches ``draw`` as its array, so a replay
    reads that call's values instead of guarding on the traced ones.
    """
    a = draw(rng_of(), *[x._data if isinstance(x, _Tensor) else x for x in args])
    t = _out(a)
    _traced(_Redraw(rng_of, draw, t.device), args, t._data)
    return t


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


def _normal(rng: _np.random.Generator, shape: _Any, mean: _Any, stddev: _Any, dtype: _Any, op: str) -> _np.ndarray:
    dt, dims = _dtype(dtype, op), _shape(shape, op)
    # TensorFlow's formula, mean + stddev * N(0, 1): a negative stddev is allowed there (numpy's normal
    # refuses it); numpy's normal computes the same sum, so a seed draws the same numbers
    m, s = _param(mean, op, "mean"), _param(stddev, op, "stddev")
    return (m + s * rng.standard_normal(dims)).astype(dt)


def _truncated(rng: _np.random.Generator, shape: _Any, mean: _Any, stddev: _Any, dtype: _Any, op: str) -> _np.ndarray:
    dt, dims = _dtype(dtype, op), _shape(shape, op)
    m, s = _param(mean, op, "mean"), _param(stddev, op, "stddev")
    return (_truncated_normal(rng, s, dims) + m).astype(dt)


def _uniform(rng: _np.random.Generator, shape: _Any, minval: _Any, maxval: _Any, dtype: _Any, op: str) -> _np.ndarray:
    dt, dims = _dtype(dtype, op, ints=True), _shape(shape, op)
    if dt.kind in "iu":
        if maxval is None:
            raise ValueError(f"{op}: argument maxval must be given for integer dtypes")
        lo, hi = (_count_int(_param(v, op, n), op, n) for v, n in ((minval, "minval"), (maxval, "maxval")))
        if lo >= hi:
            raise _invalid_argument(f"{op}: Need minval < maxval: {lo} >= {hi}")
        return rng.integers(lo, hi, dims).astype(dt)
    flo, fhi = _param(minval, op, "minval"), 1.0 if maxval is None else _param(maxval, op, "maxval")
    # TensorFlow's formula, minval + (maxval - minval) * U[0, 1): maxval < minval is allowed there
    return (flo + (_np.subtract(fhi, flo)) * rng.random(dims)).astype(dt)


def _categorical(rng: _np.random.Generator, logits: _Any, num_samples: int, dtype: _Any, op: str) -> _np.ndarray:
    try:
        lg = _backend.to_host(logits) if hasattr(logits, "__array_namespace__") else _constant(logits).numpy()
    except _errors.NEVER_WRAP:
        raise
    except Exception as e:
        raise _errors.unconvertible(op, "logits", logits, "a 2-D array of numbers", e) from e
    if lg.dtype.kind not in "iuf" or lg.ndim != 2:
        raise _invalid_argument(
            f"{op}: argument logits must be a 2-D [batch_size, num_classes] real tensor, got {lg.dtype} of shape "
            f"{lg.shape}"
        )
    n = _count(num_samples, op, "num_samples")
    # Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits), row by row.
    g = rng.gumbel(size=(lg.shape[0], n, lg.shape[1]))
    return _np.argmax(lg.astype(_np.float64)[:, None, :] + g, axis=-1).astype(_dtype_any(dtype, op))


def _count(value: _Any, op: str, arg: str) -> int:
    try:
        if isinstance(value, bool) or not _is_index(value):
            raise TypeError(f"{value!r} is not an integer")
        n = _operator.index(value)
    except _errors.NEVER_WRAP:
        raise
    except Exception as e:
        raise TypeError(f"{op}: argument {arg} ({_errors.describe(value)}) must be an integer [{e}]") from e
    if n < 0:
        raise _invalid_argument(f"{op}: argument {arg} must be nonnegative, got {n}")
    return n


def _count_int(a: _Any, op: str, arg: str) -> int:
    if a.ndim or a.dtype.kind not in "iu":
        raise TypeError(f"{op}: argument {arg} ({a!r}) must be one integer for an integer dtype")
    return int(a)


def _dtype_any(dtype: _Any, op: str) -> _np.dtype:
    try:
        return _np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{op}: argument dtype ({dtype!r}) is not a dtype; pass e.g. tf.int64") from e


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
    return _drawn(_op_stream(seed, "normal"), _normal, shape, mean, stddev, dtype, "tf.random.normal")


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
    return _drawn(
        _op_stream(seed, "truncated_normal"), _truncated, shape, mean, stddev, dtype, "tf.random.truncated_normal"
    )


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
    return _drawn(_op_stream(seed, "uniform"), _uniform, shape, minval, maxval, dtype, "tf.random.uniform")


def categorical(
    logits: _Any, num_samples: int, dtype: _Any = "int64", seed: int | None = None, name: _Any = None
) -> _Any:
    """``num_samples`` class indices per row of ``logits`` ([batch, classes]), drawn from its softmax.

    >>> import gputape.tf as tf
    >>> tf.random.categorical([[0.0, -1e9], [-1e9, 0.0]], 3).numpy().tolist()
    [[0, 0, 0], [1, 1, 1]]
    """
    return _drawn(_op_stream(seed, "categorical"), _categorical, logits, num_samples, dtype, "tf.random.categorical")


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
    return _out(_normal(_stateless(seed, "stateless_normal"), shape, mean, stddev, dtype, "tf.random.stateless_normal"))


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
    rng = _stateless(seed, "stateless_truncated_normal")
    return _out(_truncated(rng, shape, mean, stddev, dtype, "tf.random.stateless_truncated_normal"))


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
    return _out(
        _categorical(
            _stateless(seed, "stateless_categorical"), logits, num_samples, dtype, "tf.random.stateless_categorical"
        )
    )


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


def _full_int(rng: _np.random.Generator, shape: _Any, dtype: _Any) -> _np.ndarray:
    info = _np.iinfo(_np.dtype(dtype))
    return rng.integers(info.min, info.max, _shape(shape), dtype=_np.dtype(dtype), endpoint=True)


def _seed_pairs(rng: _np.random.Generator, count: int) -> _np.ndarray:
    return rng.integers(0, 2**63, (2, int(count)), dtype=_np.int64)


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

    def _stream(self) -> _np.random.Generator:
        return self._rng  # read when drawn: reset_from_seed replaces it

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
        return _drawn(self._stream, _normal, shape, mean, stddev, dtype, "Generator.normal")

    def truncated_normal(
        self, shape: _Any, mean: float = 0.0, stddev: float = 1.0, dtype: _Any = "float32", name: _Any = None
    ) -> _Any:
        """Truncated normal draws (within two standard deviations) from this generator.

        >>> import gputape.tf as tf
        >>> bool((abs(tf.random.Generator.from_seed(0).truncated_normal([50]).numpy()) <= 2).all())
        True
        """
        return _drawn(self._stream, _truncated, shape, mean, stddev, dtype, "Generator.truncated_normal")

    def uniform(
        self, shape: _Any, minval: float = 0, maxval: float | None = None, dtype: _Any = "float32", name: _Any = None
    ) -> _Any:
        """U[minval, maxval) draws from this generator (integers need ``maxval``).

        >>> import gputape.tf as tf
        >>> bool((tf.random.Generator.from_seed(0).uniform([9], 1, 2).numpy() >= 1).all())
        True
        """
        return _drawn(self._stream, _uniform, shape, minval, maxval, dtype, "Generator.uniform")

    def uniform_full_int(self, shape: _Any, dtype: _Any = "int64", name: _Any = None) -> _Any:
        """Integers over the dtype's whole range.

        >>> import gputape.tf as tf
        >>> str(tf.random.Generator.from_seed(0).uniform_full_int([2]).dtype)
        'int64'
        """
        return _drawn(self._stream, _full_int, shape, dtype)

    def make_seeds(self, count: int = 1) -> _Any:
        """``count`` seed pairs for the stateless ops, shape [2, count] (advances this generator).

        >>> import gputape.tf as tf
        >>> tf.random.Generator.from_seed(0).make_seeds(3).shape
        (2, 3)
        """
        return _drawn(self._stream, _seed_pairs, count)

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

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
