"""Reordering and repeating: flip, rot90, roll, repeat, tile, sort, partition.

All are compositions except one pair of primitives: ``take_along_axis`` and its
adjoint ``scatter_along_axis`` (each the other's VJP, so every order of derivative
exists). ``sort`` and ``partition`` take their input along the axis by the indices
``argsort``/``argpartition`` give; those indices are a positional (integer) input
of ``take_along_axis``, not a parameter, so a ``gt.function`` replay recomputes
them from the new values instead of reusing the traced permutation. The VJP
scatters the cotangent back by the same indices; for a permutation it assigns
instead of accumulating. Ties get the gradient at the position the sort chose.

flip/rot90/roll are slices, transposes and concatenations (their VJPs scatter or
split); ``repeat`` with one count and ``tile`` are a broadcast between two reshapes,
so their gradients are sums, not scatters.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..core import _errors
from ..core.dispatch import primitive
from ..core.recording import integer_result
from ..core.tensor import Tensor, _to_array, _wrap, _wrap_op, as_tensor
from ._compat import axis_index, on_device, run, xp_of
from ._util import is_index, norm_axes, norm_axis, norm_axis_seq, norm_ints, norm_shape, norm_size
from .elementwise import identity
from .shape import broadcast_to, concatenate, expand_dims, flatten, getitem, reshape, take, transpose


def flip(m: Any, axis: Any = None) -> Any:
    """Reverse the order of elements along ``axis`` (all axes when None). A composition: a slice.

    >>> import gputape as gt
    >>> gt.flip(gt.constant([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy().tolist()
    [[2.0, 1.0], [4.0, 3.0]]
    """
    x = as_tensor(m)
    axes = norm_axes(axis, x.ndim, "flip") if x.ndim else ()
    return getitem(x, tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim)))


def flipud(m: Any) -> Any:
    """Reverse along axis 0 (``flip(m, 0)``).

    >>> import gputape as gt
    >>> gt.flipud(gt.constant([1.0, 2.0, 3.0])).numpy().tolist()
    [3.0, 2.0, 1.0]
    """
    x = as_tensor(m)
    if x.ndim < 1:
        raise ValueError("gt.flipud: input must be at least 1-d, got a scalar")
    return flip(x, 0)


def fliplr(m: Any) -> Any:
    """Reverse along axis 1 (``flip(m, 1)``).

    >>> import gputape as gt
    >>> gt.fliplr(gt.constant([[1.0, 2.0, 3.0]])).numpy().tolist()
    [[3.0, 2.0, 1.0]]
    """
    x = as_tensor(m)
    if x.ndim < 2:
        raise ValueError(f"gt.fliplr: input must be at least 2-d, got shape {x.shape}")
    return flip(x, 1)


def rot90(m: Any, k: int = 1, axes: Any = (0, 1)) -> Any:
    """Rotate by 90 degrees ``k`` times in the plane of ``axes``, from the first axis towards the second.

    numpy's algorithm: flips and a transpose.

    >>> import gputape as gt
    >>> gt.rot90(gt.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().tolist()
    [[2.0, 4.0], [1.0, 3.0]]
    """
    x = as_tensor(m)
    k = norm_size(k, "rot90", "a number of quarter turns", None) % 4
    n = x.ndim
    pair = norm_axis_seq(axes, n, "rot90")
    if len(pair) != 2:
        raise _errors.argument_error(axes, "must name two axes", op="rot90", cls=ValueError)
    a0, a1 = pair
    if a0 == a1:
        raise _errors.argument_error(
            axes, "must name two different axes (the two axes must be different)", op="rot90", cls=ValueError
        )
    if k == 0:
        return identity(x)
    if k == 2:
        return flip(flip(x, a0), a1)
    perm = list(range(n))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return transpose(flip(x, a1), perm)
    return flip(transpose(x, perm), a1)


def roll(a: Any, shift: Any, axis: Any = None) -> Any:
    """Shift elements cyclically by ``shift`` along ``axis`` (of the flattened input when None).

    ``shift`` and ``axis`` may be matching sequences. A composition: two slices joined.

    >>> import gputape as gt
    >>> gt.roll(gt.constant([1.0, 2.0, 3.0, 4.0]), 1).numpy().tolist()
    [4.0, 1.0, 2.0, 3.0]
    """
    x = as_tensor(a)
    if axis is None:
        return reshape(roll(flatten(x), shift, 0), x.shape)
    shifts = norm_ints(shift, "roll", "a shift (an int or a sequence of ints)")
    axes = norm_axis_seq(axis, x.ndim, "roll")
    if len(axes) == 1:  # numpy broadcasts one against the other
        axes *= len(shifts)
    elif len(shifts) == 1:
        shifts *= len(axes)
    elif len(shifts) != len(axes):
        raise _errors.argument_error(
            shift, f"and axis {axis!r} must be scalars or sequences of one length", op="roll", cls=ValueError
        )
    offsets = [0] * x.ndim
    for ax, sh in zip(axes, shifts):
        offsets[ax] += sh  # repeated axes add up, as in numpy
    out = x
    for ax, off in enumerate(offsets):
        n = x.shape[ax]
        if n == 0 or off % n == 0:
            continue
        cut = n - off % n
        out = concatenate([out[axis_index(ax, slice(cut, None))], out[axis_index(ax, slice(None, cut))]], axis=ax)
    return identity(out) if out is x else out


def repeat(a: Any, repeats: Any, axis: Any = None) -> Any:
    """Repeat each element ``repeats`` times along ``axis`` (of the flattened input when None).

    One count: a broadcast between two reshapes (gradient: a sum). Per-element
    counts: ``take`` with the repeated indices (gradient: a scatter-add).

    >>> import gputape as gt
    >>> gt.repeat(gt.constant([1.0, 2.0]), 2).numpy().tolist()
    [1.0, 1.0, 2.0, 2.0]
    >>> gt.repeat(gt.constant([[1.0, 2.0]]), [1, 3], axis=1).numpy().tolist()
    [[1.0, 2.0, 2.0, 2.0]]
    """
    x = as_tensor(a)
    if axis is None:
        x, ax = flatten(x), 0
    else:
        ax = norm_axis(axis, x.ndim, "repeat")
    r = repeats.numpy() if isinstance(repeats, Tensor) else _to_array(repeats, device="cpu")
    if r.dtype.kind not in "biu":
        raise _errors.argument_error(
            repeats, f"has dtype {r.dtype}: repeats must be integers", op="repeat", cls=TypeError
        )
    if r.ndim > 1 or (r.size > 1 and r.shape != (x.shape[ax],)):
        raise _errors.argument_error(
            repeats,
            f"gives {r.size} repeat counts for axis {ax} of length {x.shape[ax]} (shape {x.shape})",
            op="repeat",
            cls=ValueError,
        )
    if (r < 0).any():
        raise _errors.argument_error(
            repeats, "has negative counts: repeat counts must be non-negative", op="repeat", cls=ValueError
        )
    if r.size == 1:
        k = int(r.reshape(()))
        s = x.shape
        wide = broadcast_to(expand_dims(x, ax + 1), s[: ax + 1] + (k,) + s[ax + 1 :])
        return reshape(wide, s[:ax] + (s[ax] * k,) + s[ax + 1 :])
    return take(x, _wrap(on_device(x, np.repeat(np.arange(x.shape[ax]), r))), axis=ax)


def tile(A: Any, reps: Any) -> Any:
    """Repeat the whole of ``A`` ``reps`` times along each axis (numpy's rules for unequal ranks).

    A composition: a broadcast between two reshapes, so the gradient is a sum.

    >>> import gputape as gt
    >>> gt.tile(gt.constant([1.0, 2.0]), (2, 2)).numpy().tolist()
    [[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]]
    """
    x = as_tensor(A)
    reps = norm_shape(reps, "tile")  # non-negative ints
    d = max(len(reps), x.ndim)
    shape = (1,) * (d - x.ndim) + tuple(x.shape)
    reps = (1,) * (d - len(reps)) + reps
    spread = reshape(x, tuple(v for s in shape for v in (1, s)))
    wide = broadcast_to(spread, tuple(v for r, s in zip(reps, shape) for v in (r, s)))
    return reshape(wide, tuple(r * s for r, s in zip(reps, shape)))


# -- sorting: indices by argsort/argpartition, values by take_along_axis ---------------


def _full_key(xp: Any, indices: Any, axis: int, shape: tuple) -> tuple:
    """The advanced index that picks ``indices`` along ``axis`` and every position along the others."""
    n = len(shape)
    ax = axis % n
    key = []
    for i, s in enumerate(shape):
        if i == ax:
            key.append(indices.reshape((1,) * (n - indices.ndim) + indices.shape))
        else:
            key.append(xp.arange(s).reshape((1,) * i + (s,) + (1,) * (n - i - 1)))
    return tuple(key)


@primitive("take_along_axis", complex="holomorphic", save=(1,))
def _take_along_axis(xp, x, indices, axis, unique):
    return xp.take_along_axis(x, indices.reshape((1,) * (x.ndim - indices.ndim) + indices.shape), axis=axis)


@_take_along_axis.defvjp
def _(F, g, needs, nb, node, indices):
    p = node.params
    return (run(F, _scatter_along_axis, g, indices, axis=p["axis"], shape=node.shapes[0], unique=p["unique"]), None)


@primitive("scatter_along_axis", complex="holomorphic", save=(1,))
def _scatter_along_axis(xp, g, indices, axis, shape, unique):
    lead = g.shape[: g.ndim - len(shape)]
    z = xp.zeros(lead + tuple(shape), g.dtype)
    key = _full_key(xp, indices, axis, z.shape)
    if unique:
        z[key] = g  # a permutation: every target once
    else:
        xp.add.at(z, key, g)  # repeated indices accumulate
    return z


@_scatter_along_axis.defvjp
def _(F, g, needs, nb, node, indices):
    return (run(F, _take_along_axis, g, indices, axis=node.params["axis"], unique=node.params["unique"]), None)


def take_along_axis(arr: Any, indices: Any, axis: Any = -1) -> Any:
    """Pick values along ``axis`` by an integer index array of the same rank (numpy's ``take_along_axis``).

    A primitive; its VJP scatters (adds) the cotangent back by ``indices``.

    >>> import gputape as gt, numpy as np
    >>> x = gt.constant([[10.0, 30.0, 20.0]])
    >>> gt.take_along_axis(x, np.array([[2, 0]]), axis=1).numpy().tolist()
    [[20.0, 10.0]]
    """
    return _take_along(arr, indices, axis, unique=False, op="take_along_axis")


def _take_along(arr: Any, indices: Any, axis: Any, unique: bool, op: str) -> Any:
    x = as_tensor(arr)
    if isinstance(indices, Tensor):
        ind = indices
    else:
        ind = _wrap(on_device(x, indices if hasattr(indices, "__array_namespace__") else _to_array(indices)))
    if ind.dtype.kind not in "iu":
        raise TypeError(f"gt.{op}: indices must be integers, got dtype {ind.dtype}")
    if axis is None:
        x = flatten(x)
        axis = 0
    if ind.ndim != x.ndim:
        raise ValueError(f"gt.{op}: indices of rank {ind.ndim} for an input of rank {x.ndim} (shape {x.shape})")
    ax = norm_axis(axis, x.ndim, op) - x.ndim  # negative: right under a VJP's batch dims
    return _take_along_axis(x, ind, axis=ax, unique=unique)


def _index_op(name: str, x: Tensor, fn: Any) -> Tensor:
    """Integer indices computed from ``x`` (no gradient), told to a running trace so replays recompute them."""
    try:
        res = _wrap_op(fn(x._data))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"gt.{name}: cannot apply to an input of shape {x.shape}: {exc}") from exc
    integer_result(name, fn, (x,), res)
    return res


def _sort_input(op: str, a: Any, axis: Any, order: Any) -> tuple[Tensor, int]:
    if order is not None:
        raise ValueError(f"gt.{op}: order= names fields of structured arrays, which tensors are not")
    x = as_tensor(a)
    if axis is None:
        return flatten(x), 0
    if x.ndim == 0:
        raise ValueError(f"gt.{op}: cannot sort a scalar along axis {axis}; use axis=None")
    return x, norm_axis(axis, x.ndim, op)


def _kth(kth: Any, n: int) -> Any:
    """numpy's ``kth``: an int or a sequence of ints, each in ``[-n, n)`` for an axis of length ``n``."""
    ks = norm_ints(kth, "argpartition", "an index (an int or a sequence of ints)")
    for k in ks:
        if not -n <= k < n:
            raise _errors.argument_error(
                kth, f"is out of range for an axis of length {n} (kth={k})", op="argpartition", cls=ValueError
            )
    return ks[0] if is_index(kth) else list(ks)


def argsort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Tensor:
    """Indices that sort ``a`` along ``axis`` (no gradient). On a GPU the sort is always stable (CuPy's).

    >>> import gputape as gt
    >>> gt.argsort(gt.constant([3.0, 1.0, 2.0])).numpy().tolist()
    [1, 2, 0]
    """
    x, ax = _sort_input("argsort", a, axis, order)
    xp = xp_of(x)
    if xp is np:
        fn = functools.partial(np.argsort, axis=ax, kind=kind, stable=stable)
    else:
        fn = functools.partial(xp.argsort, axis=ax)
    return _index_op("argsort", x, fn)


def argpartition(a: Any, kth: Any, axis: Any = -1, kind: str = "introselect", order: Any = None) -> Tensor:
    """Indices that partition ``a`` around the ``kth`` element(s) along ``axis`` (no gradient).

    >>> import gputape as gt
    >>> int(gt.argpartition(gt.constant([3.0, 1.0, 2.0]), 0)[0])
    1
    """
    x, ax = _sort_input("argpartition", a, axis, order)
    kth = _kth(kth, x.shape[ax])
    xp = xp_of(x)
    if xp is np:
        fn = functools.partial(np.argpartition, kth=kth, axis=ax, kind=kind)
    else:
        fn = functools.partial(xp.argpartition, kth=kth, axis=ax)
    return _index_op("argpartition", x, fn)


def sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Any:
    """A sorted copy along ``axis`` (flattened when None); NaNs go last, as in numpy.

    A composition: ``take_along_axis(a, argsort(a))``; the gradient of each output
    goes to the input it came from.

    >>> import gputape as gt
    >>> x = gt.constant([3.0, 1.0, 2.0])
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = gt.sort(x)
    ...     loss = gt.sum(y * gt.constant([1.0, 2.0, 3.0]))
    >>> y.numpy().tolist(), tape.gradient(loss, x).numpy().tolist()
    ([1.0, 2.0, 3.0], [3.0, 1.0, 2.0])
    """
    x, ax = _sort_input("sort", a, axis, order)
    idx = argsort(x, ax, kind=kind, stable=stable)
    return _take_along(x, idx, ax, unique=True, op="sort")


def partition(a: Any, kth: Any, axis: Any = -1, kind: str = "introselect", order: Any = None) -> Any:
    """A copy with the ``kth`` element in its sorted place, smaller ones before it, larger after.

    A composition: ``take_along_axis(a, argpartition(a, kth))`` (gradient as for ``sort``).

    >>> import gputape as gt
    >>> float(gt.partition(gt.constant([5.0, 1.0, 4.0, 2.0]), 1)[1])
    2.0
    """
    x, ax = _sort_input("partition", a, axis, order)
    idx = argpartition(x, kth, ax, kind=kind)
    return _take_along(x, idx, ax, unique=True, op="partition")
