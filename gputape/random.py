"""Random tensors (``gt.random``), and the seeds behind every random thing in gputape.

TensorFlow's model: a global seed plus op seeds. With no global seed, draws come from a
generator seeded from the OS (different in every process). ``gt.random.seed(n)`` (also
``tf.random.set_seed`` and ``tf.keras.utils.set_random_seed``) sets the global seed and
resets an op counter: from then on each random op (a draw here, an initializer, a Dropout
mask, a shuffle order) gets a stream of its own, derived from the global seed and the
counter, so a program that makes the same random calls in the same order draws the same
numbers in every process, and one op's size does not shift another's numbers. An op seed
(``tf.random.normal(..., seed=s)``) picks a stream from the global seed and ``s``
(TensorFlow's default global seed when none is set); repeated calls with one op seed
continue that stream until the next ``seed()``, as TensorFlow's kernels do.

The streams are numpy's Philox: deterministic, but not bit-identical to TensorFlow's.

>>> import gputape as gt
>>> gt.random.seed(0)
>>> a = gt.random.normal((2,)).numpy()
>>> gt.random.seed(0)
>>> bool((a == gt.random.normal((2,)).numpy()).all())
True
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import Any

import numpy as np

from .core import _errors
from .core.recording import traced
from .core.tensor import Tensor, _wrap
from .devices import backend
from .devices.placement import current_device
from .ops._util import is_index as _is_index
from .ops._util import norm_dtype as _norm_dtype
from .ops._util import norm_real as _norm_real
from .ops._util import norm_shape as _norm_shape

# TensorFlow's DEFAULT_GRAPH_SEED: an op seed without a global seed is still deterministic.
DEFAULT_GLOBAL_SEED = 87654321

_unseeded = np.random.default_rng()  # no global seed: the process's own entropy
_global: Any = None  # the global seed as given; None when unset
_key = 0  # the Philox key derived from the global seed
_counter = itertools.count()  # random ops since seed(); next() is atomic under the GIL
_kernels: dict[tuple, np.random.Generator] = {}  # (op, op seed) -> its continuing stream

__all__ = ["generator", "get_seed", "get_state", "normal", "seed", "set_state", "uniform"]


def _philox_key(*entropy: Any) -> int:
    # SeedSequence hashes any non-negative int (or sequence of them) into well-mixed bits;
    # it also refuses negative seeds and floats with numpy's own message.
    words = np.random.SeedSequence([*entropy]).generate_state(2, np.uint64)
    return int(words[0]) | (int(words[1]) << 64)


def _norm_seed(n: Any, arg: str) -> Any:
    try:
        if _is_index(n) or isinstance(n, (float, str, bytes)):
            n = operator.index(n)
            if n < 0:
                raise ValueError(f"{n} is negative")
            return n
        n = tuple(operator.index(x) for x in n)
        if any(x < 0 for x in n):
            raise ValueError(f"{n} has a negative entry")
        return n
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(
            n, "is not a seed", exc, arg=arg, hint="pass a non-negative int (or a sequence of them)"
        ) from exc


def _entropy(n: Any) -> tuple:
    return n if isinstance(n, tuple) else (n,)


def seed(n: Any) -> None:
    """Set the global seed (``None`` clears it): every random op after it is reproducible.

    Resets the op counter and the op-seeded streams, as ``tf.random.set_seed`` does.

    >>> import gputape as gt
    >>> gt.random.seed(42)
    >>> a = gt.random.uniform((3,)).numpy()
    >>> gt.random.seed(42)
    >>> bool((a == gt.random.uniform((3,)).numpy()).all())
    True
    """
    global _global, _key, _counter
    if n is None:
        _global, _key = None, 0
    else:
        n = _norm_seed(n, "n")
        _global, _key = n, _philox_key(*_entropy(n))
    _counter = itertools.count()
    _kernels.clear()


def _snapshot() -> tuple:
    """The state every reproducible draw advances: the op counter and the op-seeded streams.

    ``gt.function`` takes it before a replay that has guards and hands it to :func:`_restore`
    when a guard abandons the replay, so the call's draws come out as in an eager run. The
    unseeded generator is left out: its draws are not reproducible anyway, and reading its
    state was most of the cost (~35 us a call).
    """
    global _counter
    n = next(_counter)
    _counter = itertools.count(n)
    if not _kernels:
        return n, None, None
    kernels = dict(_kernels)
    return n, kernels, {k: g.bit_generator.state for k, g in kernels.items()}


def _restore(snap: tuple) -> None:
    """Put back what :func:`_snapshot` took."""
    global _counter
    n, kernels, states = snap
    _kernels.clear()
    if kernels is not None:
        for k, g in kernels.items():
            g.bit_generator.state = states[k]
        _kernels.update(kernels)
    _counter = itertools.count(n)


def get_seed() -> Any:
    """The global seed last set (``None`` when unset).

    >>> import gputape as gt
    >>> gt.random.seed(3); gt.random.get_seed()
    3
    """
    return _global


def _stream(key: int, index: int) -> np.random.Generator:
    # Philox is counter-based: the top counter word selects the stream, the draws advance
    # the low words, so streams of one key never overlap.
    return np.random.Generator(np.random.Philox(key=key, counter=np.array([0, 0, 0, index], np.uint64)))


def generator(seed: int | None = None) -> np.random.Generator:
    """The generator for one random op (initializers, dropout and shuffles draw from it too).

    Given an op ``seed`` (an initializer's or a loader's own): ``np.random.default_rng(seed)``.
    Otherwise, with a global seed: a fresh stream, the next one the seed and the op counter
    give; without one: the process's unseeded generator.

    >>> import gputape as gt
    >>> gt.random.seed(0)
    >>> a = gt.random.generator().integers(100)
    >>> gt.random.seed(0)
    >>> bool(a == gt.random.generator().integers(100))
    True
    """
    if seed is not None:
        return np.random.default_rng(seed)
    if _global is None:
        return _unseeded
    return _stream(_key, next(_counter))


def _op_generator(op_seed: Any, op: str) -> np.random.Generator:
    """The generator for a call of ``op`` with op seed ``op_seed`` (``None``: :func:`generator`).

    Calls of one op with one op seed continue one stream, reset by :func:`seed`; the stream
    depends on the global seed too (TensorFlow's default one when none is set).

    >>> import gputape as gt
    >>> gt.random.seed(1)
    >>> a = gt.random._op_generator(5, "demo").random()
    >>> b = gt.random._op_generator(5, "demo").random()
    >>> gt.random.seed(1)
    >>> (a != b, a == gt.random._op_generator(5, "demo").random())
    (True, True)
    """
    if op_seed is None:
        return generator()
    op_seed = _norm_seed(op_seed, "seed")
    k = (op, op_seed)
    g = _kernels.get(k)
    if g is None:
        glob = _entropy(_global) if _global is not None else (DEFAULT_GLOBAL_SEED,)
        g = _kernels[k] = _stream(_philox_key(*glob, *_entropy(op_seed)), 0)
    return g


def _place(a: np.ndarray, device: str | None) -> Tensor:
    dev = backend.parse_device(device) if device else current_device()
    return _wrap(a if dev == "cpu" else backend.asarray_on(a, dev))


def _float_dtype(dtype: Any, op: str, dt: np.dtype | None = None) -> np.dtype:
    dt = _norm_dtype(dtype, f"random.{op}") if dt is None else dt
    if dt.kind != "f":
        raise _errors.argument_error(
            dtype,
            f"is {dt}, but gt.random.{op} draws real numbers",
            arg="dtype",
            cls=ValueError,
            hint="pass a float dtype ('float16', 'float32', 'float64')"
            + (", or give maxval for integers in [minval, maxval)" if op == "uniform" and dt.kind in "iu" else ""),
        )
    return dt


def _bound(v: Any, what: str) -> Any:
    """A distribution parameter: a real number (NaN and inf pass, as in numpy and TensorFlow)."""
    return _norm_real(v, None, arg=what)  # named after the public function the user called


def _sample(kind: str, a: Any, b: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    rng = generator()  # one op: one stream (a gt.function replay asks again, as a new op)
    try:
        if kind == "integers":
            return rng.integers(a, b, shape, dtype=dtype)
        return getattr(rng, kind)(a, b, shape).astype(dtype)
    except _errors.NEVER_WRAP:
        raise
    except (ValueError, OverflowError) as exc:  # numpy's own checks, after ours (maxval=nan for integers)
        raise _errors.argument_error(b, "is not a valid parameter of the distribution", exc, cls=ValueError) from exc


def _check_order(ok: bool, v: Any, arg: str, problem: str) -> None:
    if not ok:
        raise _errors.argument_error(v, problem, arg=arg, cls=ValueError)


def normal(
    shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = "float32", device: str | None = None
) -> Tensor:
    """Samples from N(mean, stddev**2), float32 by default.

    ``dtype`` must be a float dtype (a ValueError otherwise, as in TensorFlow); ``stddev``
    must not be negative.

    >>> import gputape as gt
    >>> gt.random.normal((2, 3)).shape
    (2, 3)
    """
    shape = _norm_shape(shape, "random.normal")
    dt = _float_dtype(dtype, "normal")
    mean, stddev = _bound(mean, "mean"), _bound(stddev, "stddev")
    _check_order(not stddev < 0, stddev, "stddev", "must not be negative")
    t = _place(_sample("normal", mean, stddev, shape, dt), device)
    _traced(_draw, ("normal", (mean, stddev, shape), dt, t.device), t)
    return t


def uniform(
    shape: Any, minval: float = 0.0, maxval: float | None = None, dtype: Any = "float32", device: str | None = None
) -> Tensor:
    """Samples from U[minval, maxval), float32 by default (``maxval`` defaults to 1 for floats).

    TensorFlow's rule for integers: an integer ``dtype`` draws integers in
    ``[minval, maxval)`` and needs ``maxval``; bool is no dtype to draw from.

    >>> import gputape as gt
    >>> bool((gt.random.uniform((100,)).numpy() < 1).all())
    True
    >>> sorted(set(gt.random.uniform((100,), 2, 5, dtype="int32").numpy().tolist()))
    [2, 3, 4]
    """
    shape = _norm_shape(shape, "random.uniform")
    dt = _norm_dtype(dtype, "random.uniform")
    if dt.kind in "iu":
        if maxval is None:
            raise _errors.argument_error(
                maxval,
                f"must be given for an integer dtype ({dt}): integers are drawn from [minval, maxval)",
                arg="maxval",
                cls=ValueError,
            )
        lo, hi = _int_bound(minval, "minval"), _int_bound(maxval, "maxval")
        _check_order(hi > lo, maxval, "maxval", f"must be greater than minval ({lo}) to draw integers")
        kind: str = "integers"
    else:
        dt = _float_dtype(dtype, "uniform", dt)
        lo, hi, kind = _bound(minval, "minval"), _bound(1.0 if maxval is None else maxval, "maxval"), "uniform"
        _check_order(math.isfinite(lo), minval, "minval", "must be finite (numpy draws nothing from an infinite range)")
        _check_order(math.isfinite(hi), maxval, "maxval", "must be finite (numpy draws nothing from an infinite range)")
    t = _place(_sample(kind, lo, hi, shape, dt), device)
    _traced(_draw, (kind, (lo, hi, shape), dt, t.device), t)
    return t


def _int_bound(v: Any, what: str) -> int:
    try:
        return operator.index(v)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(v, "is not an integer (the dtype is an integer dtype)", exc, arg=what) from exc


def _traced(fn: Any, args: tuple, t: Tensor) -> None:
    traced(fn, args, t._data)  # a gt.function replay draws fresh numbers each call


def _draw(kind: str, args: tuple, dtype: Any, device: str) -> Any:
    a = _sample(kind, *args, dtype)
    return a if device == "cpu" else backend.asarray_on(a, device)


# -- the global seed's state, for checkpoints ------------------------------------------------------------


def get_state() -> dict[str, Any]:
    """Where the global seed's streams stand: the seed, the op counter and each op-seeded stream (JSON-able).

    :func:`_snapshot`'s state with the seed, in plain values: a checkpoint keeps it, so that a
    restored run draws what the uninterrupted run would have drawn next (``tf.train.Checkpoint``
    does). The unseeded generator is not part of it (the process's own entropy: not reproducible).

    >>> import gputape as gt
    >>> gt.random.seed(5); _ = gt.random.normal((2,)); state = gt.random.get_state()
    >>> a = gt.random.normal((2,)).numpy()
    >>> gt.random.seed(9); gt.random.set_state(state)
    >>> bool((a == gt.random.normal((2,)).numpy()).all())
    True
    """
    position, kernels, states = _snapshot()
    streams = [[op, list(s) if isinstance(s, tuple) else s, _jsonable(states[(op, s)])] for op, s in kernels or ()]
    return {"seed": list(_global) if isinstance(_global, tuple) else _global, "counter": position, "streams": streams}


def set_state(state: dict[str, Any]) -> None:
    """Put back what :func:`get_state` returned (it replaces the global seed, as :func:`seed` does).

    >>> import gputape as gt
    >>> gt.random.set_state({"seed": None, "counter": 0, "streams": []}); gt.random.get_seed() is None
    True
    """
    try:
        seed_, position, kernels, states = state["seed"], int(state["counter"]), {}, {}
        for op, s, bit_state in state["streams"]:
            key = (op, tuple(s) if isinstance(s, list) else s)
            kernels[key] = np.random.Generator(np.random.Philox())
            states[key] = _from_jsonable(bit_state)
            kernels[key].bit_generator.state = states[key]  # checks the state before anything changes
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"gt.random.set_state: not a state gt.random.get_state() returned ({exc})") from None
    seed(tuple(seed_) if isinstance(seed_, list) else seed_)
    _restore((position, kernels or None, states or None))


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return {"__array__": v.dtype.str, "values": [int(x) for x in v.ravel()]}
    return int(v) if isinstance(v, np.integer) else v


def _from_jsonable(v: Any) -> Any:
    if isinstance(v, dict) and "__array__" in v:
        return np.array(v["values"], dtype=np.dtype(v["__array__"]))
    if isinstance(v, dict):
        return {k: _from_jsonable(x) for k, x in v.items()}
    return v
