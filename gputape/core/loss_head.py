"""The loss head fused at gradient time: what a user writes by hand becomes one cross-entropy node.

A user writes the softmax cross-entropy as ``logp = gt.nn.log_softmax(z)`` followed by either a
gather that picks one element per row (``logp[np.arange(n), labels]``, ``gt.arange`` too) or a
product with one-hot (or probability) labels summed over the classes (``gt.sum(onehot * logp, -1)``;
``gt.nn.softmax_cross_entropy_with_logits`` with labels it cannot take as its primitive records the
same). Unfused, the backward scatters the cotangent into zeros, sums each row of it again and runs
log_softmax's general VJP: three or four nodes for what is ``g * (onehot - softmax)``.

When the op runs, eager code cannot know what will consume ``logp``; when ``tape.gradient`` is
called, every consumer is on the tape. So :func:`fuse` looks at the tape then (the last
:data:`WINDOW` nodes: the head of a loss), and where ``logp`` has exactly one consumer, that
consumer is the gather or the product-and-sum, and neither ``logp`` nor the product is a target
or a source, it replaces that consumer (the gather, or the sum) by ONE node of the cross-entropy
primitive (``sparse_softmax_cross_entropy_with_logits`` / ``softmax_cross_entropy_with_logits``,
declared in :mod:`gputape.nn.functional`) with the parameter ``fused``: its residual is the
log-softmax already computed and its output the gather's (or the sum's). The log_softmax node (and
the product) stay where they are: no cotangent reaches them any more, so the backward passes them
by. The sweep and the compiled backward then run that primitive's VJP (the one declaration,
:func:`gputape.nn.functional.head_grad`), and so does a ``gt.function`` replay, which records the
VJP the sweep calls. Recording the fused primitive
directly when the op runs was not chosen: whether ``logp`` has another consumer (a metric, an
entropy term) is not known then, and undoing a fused record would need the values it skipped.

Every condition that fails keeps the nodes as recorded (the unfused sweep): a tape recording the
gradient (higher order: the fused VJP is for raw arrays), a persistent tape (a later call may ask
for ``logp``'s gradient), ``check_numerics`` (it names the op where a value went bad), a ``logp``
read twice, a gather that is not provably one per row (its row index must equal ``arange(n)``; under
a ``gt.function`` trace it must be a host constant, so every replay picks the same rows), labels or
a product operand a tape could differentiate, promoted dtypes, broadcasting, classes not on the last
axis. After the backward, :func:`restore` puts the residual-free records of the nodes as recorded
back in their places, so ``explain()``, ``summary()`` and ``to_dot()`` show the ops the user wrote.

The fused VJP computes what the unfused VJPs compute, operation for operation, without the
scatter into zeros and the row sums of a one-hot cotangent: the same bits on the CPU.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..ops.shape import UNIQUE, _arange_like, _aranges
from .primitive import REGISTRY, Node
from .state import tls as _tls
from .tensor import _new

WINDOW = 32  # nodes from the tape's end searched for a log_softmax: a loss head; a constant cost per gradient

_prims: tuple | None = None  # (log_softmax, getitem, multiply, sum, mean, sparse head, dense head), once registered
_prim_of = operator.attrgetter("prim")


def _lookup() -> tuple | None:
    global _prims
    if _prims is None:
        names = (
            "log_softmax",
            "getitem",
            "multiply",
            "sum",
            "mean",
            "sparse_softmax_cross_entropy_with_logits",
            "softmax_cross_entropy_with_logits",
        )
        found = tuple(REGISTRY.get(n) for n in names)
        if None in found:  # gputape.nn not imported yet: no log_softmax can be on a tape
            return None
        _prims = found
    return _prims


def fuse(tape: Any, seeds: dict, source_ids: list) -> list | None:
    """Replace the consumer of each fusable loss head's log-softmax among the last :data:`WINDOW` nodes
    of a non-persistent ``tape`` by one cross-entropy node, in place. Returns ``[(position, node as
    recorded), ...]`` for :func:`restore`, or None when nothing was fused. The caller checks the
    tape-wide conditions (not persistent, no tape recording the gradient, no check_numerics).

    The log_softmax node (and the product of the one-hot form) stay where they are: no cotangent
    reaches their outputs any more, so the sweep and the compiled backward pass them by, as they
    pass by any node whose output leads nowhere."""
    prims = _prims or _lookup()
    if prims is None:
        return None
    ls = prims[0]
    nodes = tape._nodes
    n = len(nodes)
    lo = n - WINDOW if n > WINDOW else 0
    # (a non-persistent tape holds only Nodes until its backward: the search for a log_softmax is a
    # C-level scan, so a tape without one, a chain of elementwise ops, pays next to nothing)
    if ls not in map(_prim_of, nodes[lo:] if lo else nodes):
        return None
    found = None
    for pos in range(n - 2, lo - 1, -1):
        node = nodes[pos]
        if type(node) is Node and node.prim is ls:
            plan = _plan(tape, nodes, pos, seeds, source_ids, prims)
            if plan is not None:
                at, fused, parts = plan
                if found is None:
                    found = []
                found.append((at, nodes[at]))
                for p in parts:  # (their records too, once the backward is done)
                    found.append((p, nodes[p]))
                nodes[at] = fused
    return found


def restore(tape: Any, fused: list) -> None:
    """After the backward: the residual-free record of each node of a fused head in its place (where the
    backward left the fused node or its record, and the log_softmax it passed by). ``fused`` is
    :func:`fuse`'s answer."""
    nodes = tape._nodes
    if nodes is not None:
        for pos, node in fused:
            nodes[pos] = (node.prim, node.ids, node.out, node.info)


def _plan(tape: Any, nodes: list, pos: int, seeds: dict, source_ids: list, prims: tuple) -> tuple | None:
    """(position of the node the fused one replaces, the fused node, positions of the other nodes of
    the head, which stay) for the head whose log_softmax is at ``pos``, or None when a condition fails."""
    _, getitem, multiply, sum_, mean, sparse, dense = prims
    node = nodes[pos]
    logp_id = node.out
    if node.casts is not None or node.params["axis"] != -1 or logp_id in seeds or logp_id in source_ids:
        return None
    (logp,) = node.saved
    zshape = node.shapes[0]
    if not zshape:
        return None
    readers = _readers(nodes, pos)
    # (the one reader of each value down the head, written out: this runs at every gradient())
    hit = readers.get(logp_id)
    if hit is None or len(hit) != 1:
        return None
    cpos = hit[0]
    c = nodes[cpos]
    tt = tape._tensors
    if c.prim is getitem:
        p = c.params
        if (
            len(zshape) != 2
            or p["idx"] is not None
            or p["nlead"]
            or (p["adv"] is not True and p["adv"] is not UNIQUE)
            or len(c.ids) != 3
        ):
            return None
        rows, labels = c.saved
        rows_id, lab_id = c.ids[1], c.ids[2]
        if lab_id in tt or rows_id in tt:
            return None
        if rows_id and _tls.obs is not None and _tls.obs.trace is not None:
            return None  # a traced tensor's rows may differ on a replay; a host constant does not
        if type(rows) is np.ndarray:
            if rows.ndim != 1 or rows.dtype.kind not in "iu" or rows.shape[0] != zshape[0]:
                return None
            shared = _aranges.get(zshape[0])  # (the recorder saved a host arange as the shared one)
            if not (shared and rows is shared[0]) and _arange_like(rows) is None:
                return None
        elif not p.get("rows") or rows.shape != (zshape[0],):
            return None  # device rows: proven only where the recorder saw the host arange they came from
        if getattr(labels, "ndim", None) != 1 or labels.shape[0] != zshape[0] or labels.dtype.kind not in "iu":
            return None
        prim, ids, saved, parts, last, lastpos = sparse, (lab_id, node.ids[0]), [labels, logp], [pos], c, cpos
        shapes = (labels.shape, zshape)
    elif c.prim is multiply:
        k = 0 if c.ids[0] == logp_id else 1
        other = c.ids[1 - k]
        q = c.saved[1 - k]
        if other == logp_id or (other and other in tt) or getattr(q, "shape", None) != zshape or c.casts is not None:
            return None  # (no broadcasting of the labels, no promotion)
        hit = readers.get(c.out)
        if hit is None or len(hit) != 1 or c.out in seeds or c.out in source_ids:
            return None
        spos = hit[0]
        s = nodes[spos]
        if s.prim is not sum_ or s.casts is not None or s.params["axis"] != (len(zshape) - 1,) or s.params["keepdims"]:
            return None
        prim, ids, saved, parts, last, lastpos = dense, (other, node.ids[0]), [q, logp], [pos, cpos], s, spos
        shapes = (zshape, zshape)
    else:
        return None
    params = _FUSED
    # a full mean or sum of the per-row values (the loss) joins the head: its VJP is the head's first step
    hit = readers.get(last.out)
    if hit is not None and len(hit) == 1 and last.out not in seeds and last.out not in source_ids:
        rpos = hit[0]
        r = nodes[rpos]
        rows_shape = zshape[:-1]
        if (
            (r.prim is mean or r.prim is sum_)
            and r.casts is None
            and r.params["axis"] == tuple(range(len(rows_shape)))
            and not r.params["keepdims"]
        ):
            count = 1
            for d in rows_shape:
                count *= d
            params = {"fused": True, "mean": count} if r.prim is mean else _FUSED_SUM
            parts.append(lastpos)
            last, lastpos = r, rpos
    # the fused node: prim's VJP on the log-softmax, standing where the head's last op stood
    f = _new(Node)
    f.prim = prim
    f.params = params
    f.ids = ids
    f.shapes = shapes
    f.casts = None
    f.saved = saved
    f.out = last.out
    f.meta = last.meta
    f.info = last.info
    return lastpos, f, parts


def _readers(nodes: list, pos: int) -> dict[int, list[int]]:
    """Tensor id -> positions of the nodes after ``pos`` that read it (a position once per read)."""
    readers: dict[int, list[int]] = {}
    for p in range(pos + 1, len(nodes)):
        for i in nodes[p].ids:
            if i in readers:
                readers[i].append(p)
            else:
                readers[i] = [p]
    return readers


# A fused node's parameters, which the cross-entropy VJPs read: ``fused`` (the residual is the
# log-softmax, the output minus the loss per row), and, where a full reduction joined the head,
# ``mean`` (the count it divides by) or ``sum``.
_FUSED = {"fused": True}
_FUSED_SUM = {"fused": True, "sum": True}
