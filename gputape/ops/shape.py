"""Shape ops and indexing.

View-like ops (reshape, expand_dims, squeeze, flatten) share one VJP: reshape
the cotangent back to the input's shape behind any leading batch dims.
Indexing records the index; its VJP scatters the cotangent into zeros
(``scatter``, itself a primitive so that indexing has second derivatives).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..core import _errors
from ..core import expr as _expr
from ..core.dispatch import apply, primitive
from ..core.primitive import Node
from ..core.recording import _note_edge, _note_exported_operands, _own, _watch_on_read, _where
from ..core.tensor import FLOAT_DTYPES, Tensor, _new, _to_array, as_tensor
from ._util import array_sequence, is_index, norm_axis, norm_shape, norm_size

_ndarray = np.ndarray

_NUMPY_PAD_MODES = (
    "edge",
    "linear_ramp",
    "maximum",
    "mean",
    "median",
    "minimum",
    "reflect",
    "symmetric",
    "wrap",
    "empty",
)


def _tensors(xs: Any, op: str) -> list[Any]:
    """The list-of-tensors argument of concatenate/stack: a non-empty sequence (or one tensor,
    iterated along its first axis: numpy's rule), each converted."""
    xs = array_sequence(xs, None, "xs")  # (the public function is found on the caller's frame)
    if not xs:
        raise _errors.argument_error(xs, "is empty; need at least one tensor", arg="xs", cls=ValueError)
    return [as_tensor(x) for x in xs]


def _axes_tuple(axes: Any, n: int) -> tuple[int, ...]:
    if is_index(axes) or isinstance(axes, (str, float)) or not hasattr(axes, "__iter__"):
        raise _errors.argument_error(
            axes,
            f"is not a permutation of the {n} axes",
            arg="axes",
            cls=TypeError,
            hint="pass a tuple such as (1, 0), or None to reverse the axes",
        )
    try:
        seq = list(axes)
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(axes, "is not a sequence of axes", exc, arg="axes") from exc
    return tuple(norm_axis(a, n, "transpose") for a in seq)


def _pad_width(pad_width: Any, ndim: int) -> list[list[int]]:
    """numpy's pad_width forms (n, (before, after), one pair per axis) as one integer pair per axis."""
    try:
        a = np.asarray(pad_width)
        if a.dtype.kind not in "iu" or (a < 0).any():
            raise ValueError(f"pad widths must be non-negative integers, got dtype {a.dtype}")
        return np.broadcast_to(a, (ndim, 2)).tolist()
    except _errors.NEVER_WRAP:
        raise
    except Exception as exc:
        raise _errors.argument_error(
            pad_width,
            f"is not a padding width for a tensor of rank {ndim}",
            exc,
            arg="pad_width",
            cls=ValueError,
            hint="pass an int, a (before, after) pair, or one pair per axis",
        ) from exc


def _reshape_back(F, g, needs, nb, node):
    return (F.reshape(g, g.shape[:nb] + node.shapes[0]),)


@primitive("reshape", complex="holomorphic")
def _reshape(xp, x, shape):
    return x.reshape(shape)


_reshape.defvjp(_reshape_back)


def reshape(x: Any, shape: Any) -> Any:
    """Give ``x`` a new shape with the same number of elements (one ``-1`` allowed).

    >>> import gputape as gt
    >>> gt.reshape(gt.constant([1.0, 2.0, 3.0, 4.0]), (2, -1)).shape
    (2, 2)
    """
    return apply(_reshape, (x,), {"shape": norm_shape(shape, "reshape", allow_unknown=True)})


def flatten(x: Any) -> Any:
    """Collapse to one dimension.

    >>> import gputape as gt
    >>> gt.flatten(gt.constant([[1.0, 2.0], [3.0, 4.0]])).shape
    (4,)
    """
    return reshape(x, (-1,))


@primitive("expand_dims", complex="holomorphic")
def _expand_dims(xp, x, axis):
    return xp.expand_dims(x, axis)


_expand_dims.defvjp(_reshape_back)


def expand_dims(x: Any, axis: Any) -> Any:
    """Insert a size-1 axis at ``axis``.

    >>> import gputape as gt
    >>> gt.expand_dims(gt.constant([1.0, 2.0]), 0).shape
    (1, 2)
    """
    return apply(_expand_dims, (x,), {"axis": axis})


@primitive("squeeze", complex="holomorphic")
def _squeeze(xp, x, axis):
    return xp.squeeze(x, axis)


_squeeze.defvjp(_reshape_back)


def squeeze(x: Any, axis: Any = None) -> Any:
    """Remove size-1 axes (all of them, or those in ``axis``).

    >>> import gputape as gt
    >>> gt.squeeze(gt.constant([[1.0], [2.0]])).shape
    (2,)
    """
    return apply(_squeeze, (x,), {"axis": axis})


@primitive("transpose", complex="holomorphic")
def _transpose(xp, x, axes):
    return xp.transpose(x, axes)


@_transpose.defvjp
def _(F, g, needs, nb, node):
    axes = node.params["axes"]
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return (F.transpose(g, tuple(range(nb)) + tuple(nb + i for i in inv)),)


def transpose(x: Any, axes: Any = None) -> Any:
    """Permute axes (reverse them when ``axes`` is None).

    >>> import gputape as gt
    >>> gt.transpose(gt.constant([[1.0, 2.0, 3.0]])).shape
    (3, 1)
    """
    x = as_tensor(x)
    n = x.ndim
    given = axes
    axes = tuple(range(n - 1, -1, -1)) if axes is None else _axes_tuple(axes, n)
    if sorted(axes) != list(range(n)):
        raise _errors.argument_error(
            given,
            f"is not a permutation of the {n} axes of shape {x.shape} (axes {axes})",
            op="transpose",
            cls=ValueError,
        )
    return apply(_transpose, (x,), {"axes": axes})


@primitive("swapaxes", complex="holomorphic")
def _swapaxes(xp, x, a, b):
    return xp.swapaxes(x, a, b)


@_swapaxes.defvjp
def _(F, g, needs, nb, node):
    return (F.swapaxes(g, node.params["a"], node.params["b"]),)


def swapaxes(x: Any, axis1: int, axis2: int) -> Any:
    """Exchange two axes.

    >>> import gputape as gt
    >>> gt.swapaxes(gt.zeros((2, 3, 4)), 0, 2).shape
    (4, 3, 2)
    """
    x = as_tensor(x)
    n = x.ndim
    # Negative axes keep the VJP right when cotangents carry leading batch dims.
    a = norm_axis(axis1, n, "swapaxes") - n
    b = norm_axis(axis2, n, "swapaxes") - n
    return apply(_swapaxes, (x,), {"a": a, "b": b})


def moveaxis(x: Any, source: int, destination: int) -> Any:
    """Move one axis to a new position (a transpose).

    >>> import gputape as gt
    >>> gt.moveaxis(gt.zeros((2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    x = as_tensor(x)
    n = x.ndim
    s, d = norm_axis(source, n, "moveaxis"), norm_axis(destination, n, "moveaxis")
    order = [i for i in range(n) if i != s]
    order.insert(d, s)
    return transpose(x, order)


@primitive("broadcast_to", complex="holomorphic")
def _broadcast_to(xp, x, shape):
    return xp.broadcast_to(x, shape)


@_broadcast_to.defvjp
def _(F, g, needs, nb, node):
    return (g,)  # the sweep sums the broadcast dims away


def broadcast_to(x: Any, shape: Any) -> Any:
    """Broadcast ``x`` to ``shape`` (numpy rules).

    >>> import gputape as gt
    >>> gt.broadcast_to(gt.constant([1.0, 2.0]), (3, 2)).shape
    (3, 2)
    """
    return apply(_broadcast_to, (x,), {"shape": norm_shape(shape, "broadcast_to")})


@primitive("concatenate", complex="holomorphic")
def _concatenate(xp, *xs, axis, shapes):
    return xp.concatenate(xs, axis=axis)


@_concatenate.defvjp
def _(F, g, needs, nb, node):
    ax = node.params["axis"]
    sizes = [s[ax] for s in node.params["shapes"]]
    bounds = np.cumsum(sizes)[:-1].tolist()
    # axis is negative, so it still names the right axis under batch dims
    return tuple(F.split(g, bounds, axis=ax))


def concatenate(xs: Any, axis: int = 0) -> Any:
    """Join tensors along an existing axis.

    >>> import gputape as gt
    >>> gt.concatenate([gt.ones((2, 2)), gt.zeros((1, 2))], axis=0).shape
    (3, 2)
    """
    xs = _tensors(xs, "concatenate")
    n = xs[0].ndim
    ax = norm_axis(axis, n, "concatenate") - n
    return apply(_concatenate, tuple(xs), {"axis": ax, "shapes": [x.shape for x in xs]})


@primitive("stack", complex="holomorphic")
def _stack(xp, *xs, axis):
    return xp.stack(xs, axis=axis)


@_stack.defvjp
def _(F, g, needs, nb, node):
    ax = node.params["axis"]
    parts = F.split(g, len(node.shapes), axis=ax)
    return tuple(F.squeeze(p, ax) for p in parts)


def stack(xs: Any, axis: int = 0) -> Any:
    """Join tensors along a new axis.

    >>> import gputape as gt
    >>> gt.stack([gt.ones(2), gt.zeros(2)], axis=1).shape
    (2, 2)
    """
    xs = _tensors(xs, "stack")
    n = xs[0].ndim + 1
    ax = norm_axis(axis, n, "stack") - n
    return apply(_stack, tuple(xs), {"axis": ax})


@primitive("split", complex="direct", nout=-1)
def _split(xp, x, sections, axis, sizes):
    return xp.split(x, sections, axis=axis)


@_split.defvjp
def _(F, g, needs, nb, node):
    ax = node.params["axis"]
    shape = node.shapes[0]
    parts = []
    lead = None
    for gi in g:
        if gi is not None:
            lead = gi.shape[:nb]
            dtype = gi.dtype
            break
    sizes = node.params["sizes"]
    for gi, size in zip(g, sizes):
        if gi is None:  # an unused piece contributes zeros
            s = list(shape)
            s[ax] = size
            gi = F.zeros(lead + tuple(s), dtype)
        parts.append(gi)
    return (F.concatenate(parts, axis=ax),)


def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """Split into equal sections (an int) or at the given indices, like numpy.

    >>> import gputape as gt
    >>> [p.shape for p in gt.split(gt.zeros((4, 2)), 2)]
    [(2, 2), (2, 2)]
    """
    x = as_tensor(x)
    n = x.ndim
    ax = norm_axis(axis, n, "split")
    length = x.shape[ax]
    if is_index(indices_or_sections):
        k = norm_size(indices_or_sections, "split", "a number of sections")
        if k <= 0 or length % k:
            raise ValueError(f"gt.split: axis {axis} of length {length} does not split into {k} equal sections")
        bounds = [length // k * i for i in range(1, k)]
        sections: Any = k
    else:
        bounds = list(norm_shape(indices_or_sections, "split", signed=True))
        sections = bounds
    edges = [0] + [builtins.min(builtins.max(b, 0), length) for b in bounds] + [length]
    sizes = [builtins.max(edges[i + 1] - edges[i], 0) for i in range(len(edges) - 1)]
    return apply(_split, (x,), {"sections": sections, "axis": ax - n, "sizes": sizes})


@primitive("pad", complex="holomorphic")
def _pad(xp, x, pad_width, constant_values):
    return xp.pad(x, pad_width, mode="constant", constant_values=constant_values)


@_pad.defvjp
def _(F, g, needs, nb, node):
    pw = node.params["pad_width"]
    idx = (slice(None),) * nb + tuple(slice(lo, g.shape[nb + i] - hi) for i, (lo, hi) in enumerate(pw))
    return (g[idx],)


def pad(x: Any, pad_width: Any, mode: str = "constant", constant_values: float = 0) -> Any:
    """Pad with a constant (numpy's ``pad`` with ``mode='constant'``).

    >>> import gputape as gt
    >>> gt.pad(gt.ones((2,)), 1).numpy().tolist()
    [0.0, 1.0, 1.0, 0.0]
    """
    if mode != "constant":
        if mode in _NUMPY_PAD_MODES:
            raise NotImplementedError(f"gt.pad: mode {mode!r} is not supported; only mode='constant' is")
        raise _errors.argument_error(
            mode, "is not a padding mode", arg="mode", cls=ValueError, hint="gt.pad supports mode='constant'"
        )
    x = as_tensor(x)
    pw = _pad_width(pad_width, x.ndim)
    return apply(_pad, (x,), {"pad_width": [tuple(p) for p in pw], "constant_values": constant_values})


# -- indexing ----------------------------------------------------------------------


class _Operand:
    """Where an index array sits in a ``getitem``/``scatter`` key: the op's ``k``-th index operand.

    Index arrays are operands of the op, not parameters: a parameter is a constant of the
    op, so ``gt.function`` would replay the trace's mask or indices on every later call
    (``x[x > 0]``, ``x[i]`` with ``i`` an argument or ``argmax``'s result). As operands they
    are values the replay recomputes or takes from the call's arguments.
    """

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k

    def __repr__(self) -> str:
        return f"<index operand {self.k}>"

    def __eq__(self, other: object) -> bool:
        return type(other) is _Operand and other.k == self.k

    def __hash__(self) -> int:
        return hash(("gputape-index-operand", self.k))


_NOT_ARRAYS = (slice, int, bool, type(None), type(Ellipsis))


def _norm_index(key: Any) -> tuple[tuple[Any, ...] | None, list[Any], bool]:
    """Split an index into its template and its array operands; say whether it holds integer
    arrays (whose duplicates must accumulate in the adjoint). The template is None when the
    key is its operands alone (``x[mask]``, ``x[rows, cols]``): the common case, made in one pass
    that reads a tensor's array directly (its ``ndim``/``dtype`` properties cost a call each)."""
    if type(key) is not tuple:
        key = (key,)
    arrays: list[Any] = []
    has_int_array = False
    others: dict[int, Any] | None = None  # the key's entries that are not operands, by position
    i = -1
    for k in key:
        i += 1
        tk = type(k)
        if tk is Tensor:
            d = k._data
        elif tk is np.ndarray:
            d = k
        elif tk is list:
            k = d = np.asarray(k)
        elif tk not in _NOT_ARRAYS and _is_array(k):
            d = k._data if isinstance(k, Tensor) else k
        else:
            if others is None:
                others = {}
            others[i] = k
            continue
        if not has_int_array and d.ndim > 0 and d.dtype.kind in "iu":
            has_int_array = True
        arrays.append(k)
    if others is None:
        return None, arrays, has_int_array
    # the operands' places numbered only for a mixed key (the operands alone need no template)
    template = []
    n = 0
    for i in range(len(key)):
        if i in others:
            template.append(others[i])
        else:
            template.append(_Operand(n))
            n += 1
    return tuple(template), arrays, has_int_array


def _is_array(k: Any) -> bool:
    """A tensor or a device/host array (not a numpy scalar): an operand of the index."""
    return isinstance(k, Tensor) or (hasattr(k, "ndim") and hasattr(k, "dtype") and not isinstance(k, np.generic))


def _fill(idx: tuple | None, arrays: tuple) -> tuple:
    """The key ``idx`` with its operand places filled by ``arrays`` (None: the operands are the key)."""
    if idx is None:
        return arrays
    return tuple(arrays[k.k] if type(k) is _Operand else k for k in idx)


UNIQUE = "unique"
"""``adv`` of a getitem/scatter whose integer index arrays pick each position once (its recorder
proved it): the adjoint is np.add.at's sum from zeros, computed as one assignment of ``g + 0``."""


def _raw_scatter(xp: Any, g: Any, key: tuple, shape: tuple, nlead: int, adv: Any) -> Any:
    if nlead:
        z = xp.zeros(g.shape[:nlead] + tuple(shape), g.dtype)
        full = (slice(None),) * nlead + key
    else:
        z = xp.zeros(shape, g.dtype)
        full = key
    if not adv:
        z[full] = g
    elif adv is UNIQUE and xp is np:
        # Each position is picked once, so add.at's sums from zeros are 0 + g: one assignment of
        # g + 0 computes them bit for bit (-0.0 made +0.0 as add.at makes it, so a gt.function
        # replay, which scatters with add.at, stays bitwise equal to the sweep) in about half
        # add.at's time on a loss's 128 rows. (On a GPU add.at is one kernel: the same result.)
        z[full] = g + _ZERO[g.dtype]
    else:
        xp.add.at(z, full, g)  # repeated integer indices accumulate
    return z


_ARANGE_MAX = 1 << 16  # longer index arrays are not compared with an arange (add.at answers)
_aranges: dict[int, tuple[np.ndarray, bytes]] = {}  # n -> (read-only arange of n, its bytes), one dtype per n
_ZERO = _expr.literal(0.0)  # +0.0 as a 0-d array of float32/float64 (the number itself for other dtypes)


def _arange_like(k: np.ndarray) -> np.ndarray | None:
    """The shared read-only ``np.arange(len(k))`` of ``k``'s dtype when the 1-D host integer array ``k``
    holds exactly those values, else None: one byte comparison (keyed by length alone: a tuple key's
    dtype hash cost as much as the comparison)."""
    hit = _aranges.get(k.shape[0])
    if hit is None or hit[0].dtype is not k.dtype:
        n = k.shape[0]
        if n > _ARANGE_MAX:
            return None
        a = np.arange(n, dtype=k.dtype)
        a.flags.writeable = False
        if len(_aranges) >= 32:
            _aranges.clear()
        hit = _aranges[n] = (a, a.tobytes())
    a = hit[0]
    return a if k is a or k.tobytes() == hit[1] else None


def _one_to_one(key: tuple) -> bool:
    """Whether the host index ``key`` provably picks each position at most once.

    Proven cheaply in the case of a loss head's ``x[np.arange(n), labels]``: every array in the key
    is an integer array of at most one dimension, and one of them is ``arange(n)`` of the longest
    length ``n`` (so it is not broadcast): each picked position then has its own coordinate there,
    whatever the other arrays hold (slices, integers and None pick no position twice). Anything
    else (boolean arrays, n-d or device arrays, no such arange) is not proven: add.at.
    """
    longest = 0
    spans = -1  # the length of the longest arange met
    for k in key:
        if type(k) is np.ndarray:
            if k.dtype.kind not in "iu" or k.ndim > 1:
                return False
            if k.ndim:
                m = k.shape[0]
                if m > longest:
                    longest = m
                if m > spans and _arange_like(k) is not None:
                    spans = m
        elif not (k is None or type(k) is slice or type(k) is int or k is Ellipsis):
            return False  # a Python bool (a 0-d mask), a device array, a numpy integer: not proven here
    return spans >= 0 and spans == longest


@primitive("getitem", complex="holomorphic", save=slice(1, None))
def _getitem(xp, x, *arrays, idx, nlead, adv):
    key = arrays if idx is None else _fill(idx, arrays)  # (None: the operands are the key, no call)
    return x[(slice(None),) * nlead + key] if nlead else x[key]


@_getitem.defvjp
def _(F, g, needs, nb, node, *arrays):
    p = node.params
    nlead = p["nlead"]
    shape = node.shapes[0][nlead:] if nlead else node.shapes[0]
    idx = p["idx"]
    key = arrays if idx is None else _fill(idx, arrays)
    return (F.scatter(g, key, shape, nb + nlead, p["adv"]),) + (None,) * len(arrays)


# getitem's recorder: the generated one's rules (gputape.core.recording.recorder_n) written for this op,
# deciding at record time what its VJP needs (the proof costs about what the copy of a raw arange did)
_record_any = _getitem.record
_UNIQUE_PARAMS = {"idx": None, "nlead": 0, "adv": UNIQUE}  # (node parameters are never mutated)


def _record_getitem(obs: Any, args: tuple, params: dict, res: Tensor, datas: list) -> None:
    """Record ``x[key]`` on the tapes that track an operand, as the generated recorder does, where only
    tapes observe and ``x`` is a host float tensor (anything else takes the generated recorder):

    * a raw index operand is saved as the shared read-only arange it equals (no copy), else copied;
    * integer arrays that pick each position once (:func:`_one_to_one`) record ``adv=UNIQUE``: the
      VJP then scatters by one assignment, the same bits as add.at's.

    Not while a gt.function trace (or any hook) observes: a trace replays the VJP on each later
    call's indices, which this record's proof does not cover, and copies operands its own way.
    """
    x = args[0]
    d = res._data
    if obs.hooks or type(d) is not _ndarray or d.dtype not in FLOAT_DTYPES or not isinstance(x, Tensor):
        _record_any(obs, args, params, res, datas)
        if len(args) == 3 and type(args[1]) is _ndarray and type(d) is not _ndarray and obs.tapes:
            _mark_rows(obs, args[1], res)
        return
    node = None
    n = len(args)
    for tape in obs.tapes:
        tt = tape._tensors
        hit = x._id in tt or _watch_on_read(tape, x)
        for i in range(1, n):  # no short-circuit: every trainable Variable read here is watched
            a = args[i]
            if isinstance(a, Tensor) and (a._id in tt or _watch_on_read(tape, a)):
                hit = True
        if tape._exports:
            _note_exported_operands(tape, args, res)
        if not hit:
            _note_edge(tape, "getitem", args, res)
            continue
        if node is None:
            node = _getitem_node(obs, args, params, d, datas)
            node.out = res._id
        tape._nodes.append(node)
        tt.add(res._id)


def _mark_rows(obs: Any, rows: np.ndarray, res: Tensor) -> None:
    """A device gather ``x[rows, labels]`` whose row index was a host arange (copied to the device
    for the op): its node says so (``rows=True``), since the device copy it saved can only be
    compared with an arange at the cost of a synchronisation. gputape.core.loss_head reads it; the
    device scatter does not (it accumulates, as without the mark)."""
    if rows.ndim == 1 and rows.dtype.kind in "iu" and _arange_like(rows) is not None:
        for tape in obs.tapes:
            nodes = tape._nodes
            if nodes and type(nodes[-1]) is Node and nodes[-1].out == res._id:
                node = nodes[-1]  # (one node, shared by every tape that recorded it)
                if not node.params.get("rows"):
                    node.params = dict(node.params, rows=True)


def _getitem_node(obs: Any, args: tuple, params: dict, d: np.ndarray, datas: list) -> Node:
    """The node of ``x[key]``: the index operands saved (a raw host arange as the shared one, any other raw
    operand copied) and, for integer arrays, whether they pick each position once (:func:`_one_to_one`,
    proven in the same pass over the operands where the key is its operands alone)."""
    x = args[0]
    ids = [x._id]
    shapes = [x._data.shape]
    saved = []
    idx = params["idx"]
    proof = params["adv"] is True and idx is None  # (a key with a template: _one_to_one below)
    longest = 0
    spans = -1  # the length of the longest arange among the operands
    for i in range(1, len(args)):
        a = args[i]
        if isinstance(a, Tensor):
            k = a._data
            ids.append(a._id)
            shapes.append(k.shape)
            arange = False
        else:
            k = datas[i]
            ids.append(0)  # ids start at 1: 0 is never tracked
            shapes.append(None)
            r = _arange_like(k) if type(k) is _ndarray and k.ndim == 1 and k.dtype.kind in "iu" else None
            arange = r is not None
            # (no trace observes: a host array's copy is all recording._own would do)
            k = r if arange else k.copy() if type(k) is _ndarray else _own(k)
        saved.append(k)
        if proof:
            if arange:
                m = k.shape[0]
                if m > spans:
                    spans = m
            elif type(k) is not _ndarray or k.dtype.kind not in "iu":
                proof = False
                continue
            else:
                nd = k.ndim
                if nd > 1:
                    proof = False
                    continue
                m = k.shape[0] if nd else 0
            if m > longest:
                longest = m
    if proof:
        if spans >= 0 and spans == longest:
            params = _UNIQUE_PARAMS if not params["nlead"] else dict(params, adv=UNIQUE)
    elif params["adv"] is True and idx is not None and _one_to_one(_fill(idx, saved)):
        params = dict(params, adv=UNIQUE)
    node = _new(Node)
    node.prim = _getitem
    node.params = params
    node.ids = tuple(ids)
    node.shapes = tuple(shapes)
    node.casts = None  # (x has the result's dtype; the integer index operands get no cotangent)
    node.saved = saved
    node.meta = (d.shape, d.dtype)
    node.info = (_where(), d.shape, d.dtype) if obs.locations else None
    return node


_getitem.record = _record_getitem


@primitive("scatter", complex="holomorphic", save=slice(1, None))
def _scatter(xp, g, *arrays, idx, shape, nlead, adv):
    return _raw_scatter(xp, g, _fill(idx, arrays), shape, nlead, adv)


@_scatter.defvjp
def _(F, g, needs, nb, node, *arrays):
    p = node.params
    key = _fill(p["idx"], arrays)
    return (F.getitem(g, key, nb + p["nlead"], p["adv"]),) + (None,) * len(arrays)


def getitem(x: Any, key: Any, nlead: int = 0, adv: Any = None) -> Any:
    """``x[key]``: slices, integers, None, Ellipsis, integer arrays and boolean masks.

    ``nlead`` leading axes are skipped (used by VJPs under batched cotangents). Index
    arrays and tensors are the op's operands, so a compiled function indexes by each
    call's own mask or indices. ``adv`` says how the gradient scatters back (see
    :func:`scatter`); None: by the key (integer arrays accumulate). Recorded on a tape,
    ``x[np.arange(n), labels]`` is known to pick each position once: its gradient is then
    one assignment, with np.add.at's bits (-0.0 cotangents become +0.0, as any scatter-add
    into zeros makes them).

    >>> import gputape as gt
    >>> x = gt.constant([[1.0, 2.0], [3.0, 4.0]])
    >>> gt.getitem(x, (slice(None), 0)).numpy().tolist()
    [1.0, 3.0]
    """
    idx, arrays, has_int = _norm_index(key)
    return apply(_getitem, (x, *arrays), {"idx": idx, "nlead": nlead, "adv": has_int if adv is None else adv})


def scatter(g: Any, idx: Any, shape: Any, nlead: int = 0, adv: bool | str = True) -> Any:
    """Zeros of ``shape`` (behind ``nlead`` leading axes of ``g``) with ``g`` added at ``idx``.

    The adjoint of :func:`getitem`. ``adv``: True, repeated integer indices accumulate
    (np.add.at into zeros); ``"unique"`` (:data:`UNIQUE`), the integer arrays pick each
    position once, so the same sums are one assignment of ``g + 0``; False, a plain
    assignment (slices and masks, whose selections never repeat: -0.0 stays -0.0).

    >>> import gputape as gt, numpy as np
    >>> gt.scatter(gt.constant([1.0, 2.0]), (np.array([0, 0]),), (3,)).numpy().tolist()
    [3.0, 0.0, 0.0]
    """
    template, arrays, _ = _norm_index(idx)
    return apply(_scatter, (g, *arrays), {"idx": template, "shape": tuple(shape), "nlead": nlead, "adv": adv})


def take(x: Any, indices: Any, axis: Any = None) -> Any:
    """Take elements along ``axis`` (flattened when None), like numpy.

    >>> import gputape as gt
    >>> gt.take(gt.constant([10.0, 20.0, 30.0]), [2, 0]).numpy().tolist()
    [30.0, 10.0]
    """
    x = as_tensor(x)
    ind = indices if isinstance(indices, Tensor) else _to_array(indices)  # a tensor stays an operand (explain)
    if axis is None:
        return getitem(flatten(x), (ind,))
    ax = norm_axis(axis, x.ndim, "take")
    return getitem(x, (slice(None),) * ax + (ind,))


def ravel(a: Any, order: str = "C") -> Any:
    """The elements as one dimension, in row-major (``'C'``) or column-major (``'F'``) order.

    A composition (a reshape; a transpose first for ``'F'``). ``'A'`` and ``'K'`` name a
    memory layout, which tensors do not expose, and are refused.

    >>> import gputape as gt
    >>> gt.ravel(gt.constant([[1.0, 2.0], [3.0, 4.0]]), order="F").numpy().tolist()
    [1.0, 3.0, 2.0, 4.0]
    """
    if order not in ("C", "F"):
        raise ValueError(f"gt.ravel: order must be 'C' or 'F' (tensors have no memory layout), got {order!r}")
    x = as_tensor(a)
    return reshape(transpose(x) if order == "F" else x, (-1,))
