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
or a source, it replaces those nodes by ONE node of the cross-entropy primitive
(``sparse_softmax_cross_entropy_with_logits`` / ``softmax_cross_entropy_with_logits``, declared in
:mod:`gputape.nn.functional`) with the parameter ``fused``: its residual is the log-softmax already
computed and its output the gather's (or the sum's). The sweep and the compiled backward then run
that primitive's VJP (the one declaration, :func:`gputape.nn.functional.head_grad`), and so does a
``gt.function`` replay, which records the VJP the sweep calls. Recording the fused primitive
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

from typing import Any

import numpy as np

from ._state import tls as _tls
from .ops.shape import UNIQUE, _arange_like
from .primitive import REGISTRY, Node

WINDOW = 32  # nodes from the tape's end searched for a log_softmax: a loss head; a constant cost per gradient

_prims: tuple | None = None  # (log_softmax, getitem, multiply, sum, sparse head, dense head), once registered


def _lookup() -> tuple | None:
    global _prims
    if _prims is None:
        names = (
            "log_softmax",
            "getitem",
            "multiply",
            "sum",
            "sparse_softmax_cross_entropy_with_logits",
            "softmax_cross_entropy_with_logits",
        )
        found = tuple(REGISTRY.get(n) for n in names)
        if None in found:  # gputape.nn not imported yet: no log_softmax can be on a tape
            return None
        _prims = found
    return _prims


def fuse(tape: Any, seeds: dict, source_ids: list) -> list | None:
    """Replace each fusable loss head among the last :data:`WINDOW` nodes of a non-persistent ``tape``
    by one cross-entropy node. Returns the tape's node list as recorded (for :func:`restore`), or
    None when nothing was fused. The caller checks the tape-wide conditions (not persistent, no tape
    recording the gradient, no check_numerics)."""
    prims = _lookup()
    if prims is None:
        return None
    ls = prims[0]
    nodes = tape._nodes
    n = len(nodes)
    lo = n - WINDOW if n > WINDOW else 0
    found = None
    for pos in range(n - 2, lo - 1, -1):
        node = nodes[pos]
        if type(node) is Node and node.prim is ls:
            plan = _plan(tape, nodes, pos, seeds, source_ids, prims)
            if plan is not None:
                if found is None:
                    found = []
                found.append(plan)
    if found is None:
        return None
    original = list(nodes)
    drop = set()
    lasts = set()
    for last, fused, parts in found:
        nodes[last] = fused
        lasts.add(last)
        drop.update(parts)
    nodes[:] = [x for p, x in enumerate(nodes) if p not in drop]
    return [original, drop, lasts]


def restore(tape: Any, fused: list) -> None:
    """After the backward: the records of the nodes as recorded, residual-free, in their places
    (where the backward left a fused node, or the nodes it replaced). ``fused`` is :func:`fuse`'s answer."""
    nodes = tape._nodes
    if nodes is None:
        return
    original, drop, lasts = fused
    now = iter(list(nodes))
    out = []
    for p, node in enumerate(original):
        if p in drop:
            out.append((node.prim, node.ids, node.out, node.info))
        elif p in lasts:
            next(now)  # the fused node, or its record
            out.append((node.prim, node.ids, node.out, node.info))
        else:
            out.append(next(now))
    out.extend(now)
    nodes[:] = out


def _consumers(nodes: list, start: int, tid: int) -> list:
    """Positions after ``start`` of the nodes that read ``tid`` (each counted once per read)."""
    hits = []
    for p in range(start + 1, len(nodes)):
        x = nodes[p]
        ids = x.ids if type(x) is Node else x[1]
        for i in ids:
            if i == tid:
                hits.append(p)
    return hits


def _plan(tape: Any, nodes: list, pos: int, seeds: dict, source_ids: list, prims: tuple) -> tuple | None:
    """(position of the fused node, the fused node, positions it replaces) for the head whose
    log_softmax is at ``pos``, or None when a condition fails."""
    _, getitem, multiply, sum_, sparse, dense = prims
    node = nodes[pos]
    logp_id = node.out
    if node.casts is not None or node.params["axis"] != -1 or logp_id in seeds or logp_id in source_ids:
        return None
    (logp,) = node.saved
    zshape = node.shapes[0]
    if not zshape:
        return None
    users = _consumers(nodes, pos, logp_id)
    if len(users) != 1:
        return None
    cpos = users[0]
    c = nodes[cpos]
    if type(c) is not Node or c.prim.vjp is None:
        return None
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
        if type(rows) is not np.ndarray or rows.ndim != 1 or rows.dtype.kind not in "iu":
            return None
        if rows_id and _tls.obs is not None and _tls.obs.trace is not None:
            return None  # a traced tensor's rows may differ on a replay; a host constant does not
        if rows.shape[0] != zshape[0] or _arange_like(rows) is None:
            return None
        if getattr(labels, "ndim", None) != 1 or labels.shape[0] != zshape[0] or labels.dtype.kind not in "iu":
            return None
        return cpos, _node(sparse, (lab_id, node.ids[0]), (labels.shape, zshape), [labels, logp], c), (pos,)
    if c.prim is multiply:
        k = 0 if c.ids[0] == logp_id else 1
        other = c.ids[1 - k]
        q = c.saved[1 - k]
        if other == logp_id or (other and other in tt) or getattr(q, "shape", None) != zshape or c.casts is not None:
            return None  # (no broadcasting of the labels, no promotion)
        prod_id = c.out
        if prod_id in seeds or prod_id in source_ids:
            return None
        users = _consumers(nodes, cpos, prod_id)
        if len(users) != 1:
            return None
        spos = users[0]
        s = nodes[spos]
        if type(s) is not Node or s.prim is not sum_ or s.casts is not None:
            return None
        if s.params["axis"] != (len(zshape) - 1,) or s.params["keepdims"]:
            return None
        return spos, _node(dense, (other, node.ids[0]), (zshape, zshape), [q, logp], s), (pos, cpos)
    return None


def _node(prim: Any, ids: tuple, shapes: tuple, saved: list, last: Node) -> Node:
    """The fused head's node: ``prim``'s VJP on the log-softmax, standing where ``last`` (the gather
    or the sum) stood and writing its output."""
    from .tensor import _new

    f = _new(Node)
    f.prim = prim
    f.params = _FUSED
    f.ids = ids
    f.shapes = shapes
    f.casts = None
    f.saved = saved
    f.out = last.out
    f.meta = last.meta
    f.info = last.info
    return f


_FUSED = {"fused": True}  # a fused node's parameters (the cross-entropy VJPs read the flag)
