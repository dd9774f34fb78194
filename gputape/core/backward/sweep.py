"""The backward sweep: cotangents from the targets back to the sources, one VJP per node.

The sweep walks a tape's node list backwards. The VJPs are written against a namespace ``F``
that is either the raw array module (fast path: no tape is recording) or gputape's own ops (a
tape is recording the gradient computation, so higher-order derivatives come for free); the
caller (:mod:`gputape.core.tape`, above the ops) passes the one to use. Broadcasting is undone in
one place, here (``F.sum_to``), not in the VJPs. A leading batch of cotangents (``lead``)
lets ``jacobian`` run one vectorised sweep instead of one per output element; every VJP is
written to carry such leading dimensions.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import state as _state
from ..primitive import Node
from ..state import tls as _tls
from ..tensor import Tensor, _new

_ndarray = np.ndarray


def _sweep(
    tape: Any,
    seeds: dict[int, Any],
    source_ids: list[int],
    diff: bool,
    F: Any,
    lead: tuple[int, ...] = (),
) -> dict[int, Any]:
    """Propagate ``seeds`` (id -> cotangent) back through ``tape``; return id -> gradient.

    ``F`` is the VJPs' namespace: gputape's ops when ``diff`` (a tape records this sweep),
    else the raw namespace of the seeds' array module.
    """
    release = not tape._persistent
    # A persistent tape may be recording this very sweep: walk a snapshot. A
    # non-persistent one is not (gradient() stopped it), so walk its own list
    # and drop each node as soon as its VJP ran: that frees the residuals.
    nodes = tape._nodes if release else list(tape._nodes)
    tt = tape._tensors
    keep = set(source_ids)
    if tape._leaves <= keep:
        # Every watched value is a source, so every recorded op depends on one:
        # the tape's own id table already says which inputs need a cotangent.
        rel = tt
    else:
        # Forward pass over ids: which tensors depend on a source? Only those
        # nodes' VJPs run, and only for inputs that lead to a source.
        rel = {i for i in source_ids if i in tt}
        if not rel:
            # no source was recorded; a source that is also a target (an unread Variable, say)
            # still has its seed as gradient: d target / d target is one, as in TensorFlow
            return {i: seeds[i] for i in source_ids if i in seeds}
        for node in nodes:
            if type(node) is Node:
                for i in node.ids:
                    if i in rel:
                        if type(node.out) is int:
                            rel.add(node.out)
                        else:
                            rel.update(node.out)
                        break
    grads = dict(seeds)
    nb = len(lead)
    obs = _tls.obs
    trace = obs.trace if obs is not None else None
    numerics = obs.numerics if obs is not None else None
    profiler = _state.profiler if _state.anywhere else None
    if numerics is not None:
        numerics.flush()  # the forward ended: read its deferred (device) checks
    for pos in range(len(nodes) - 1, -1, -1):
        node = nodes[pos]
        if type(node) is not Node:
            continue
        oid = node.out
        if type(oid) is int:
            g = grads.get(oid) if oid in keep else grads.pop(oid, None)
            if g is None or oid not in rel:
                continue
        else:
            g = [grads.get(o) if o in keep else grads.pop(o, None) for o in oid]
            if all(x is None for x in g) or not any(o in rel for o in oid):
                continue
        if release:
            # drop the node (and with it its residuals) for a residual-free
            # skeleton that explain() can still walk
            nodes[pos] = (node.prim, node.ids, node.out, node.info)  # a record (primitive.records)
        ids = node.ids
        if len(ids) == 1:
            if ids[0] not in rel:
                continue
            needs = _NEED1
        elif len(ids) == 2:
            needs = _NEED2[ids[0] in rel][ids[1] in rel]
            if needs is None:
                continue
        else:
            needs = [i in rel for i in ids]
            if True not in needs:
                continue
        saved = node.saved
        if diff:  # rebuild tensors with their original ids so outer tapes track them
            saved = [_wrap_id(v, i) if i else v for v, i in zip(saved, node.saved_ids())]
        if trace is not None and not diff:
            # (in diff mode the VJP's own ops are traced one by one)
            for i, gi in zip(ids, trace.node_grads(F, node, needs, lead, g, saved)):
                if gi is not None:
                    prev = grads.get(i)
                    if prev is None:
                        grads[i] = gi
                    else:
                        grads[i] = acc = prev + gi
                        trace.call(_add, (prev, gi), acc, True)
            continue
        # _vjp_raw and _fit_all written out (keep the three in step): this loop is the eager
        # backward's per-op cost, and the two calls per node cost ~10% of the 100-op chain
        if profiler is not None:
            in_grads = _timed_vjp(profiler, F, node, needs, lead, g, saved)
        elif nb and not node.prim.batchable:
            in_grads = _unbatched_vjp(F, g, needs, node, saved, lead)
        else:
            in_grads = node.prim.vjp(F, g, needs, nb, node, *saved)
        if numerics is not None:
            numerics.check_backward(node, g, saved, [gi if n else None for gi, n in zip(in_grads, needs)])
        shapes = node.shapes
        casts = node.casts
        for k in range(len(ids)):
            gi = in_grads[k]
            if gi is None or not needs[k]:
                continue
            shp = shapes[k] if not nb else lead + shapes[k]
            if gi.shape != shp:
                gi = F.sum_to(gi, shp, nb)
            if casts is not None and casts[k] is not None:
                gi = gi.astype(casts[k])
            i = ids[k]
            prev = grads.get(i)
            grads[i] = gi if prev is None else prev + gi
    if numerics is not None:
        numerics.flush()  # the backward ended
    return grads


_add = operator.add


def _vjp_raw(F: Any, node: Node, needs: Any, lead: tuple, g: Any, saved: Any) -> Any:
    """A node's VJP as the sweep calls it (gt.function's trace records it as one step)."""
    nb = len(lead)
    if _state.anywhere and _state.profiler is not None:
        raw = _timed_vjp(_state.profiler, F, node, needs, lead, g, saved)
    elif nb and not node.prim.batchable:
        raw = _unbatched_vjp(F, g, needs, node, saved, lead)
    else:
        raw = node.prim.vjp(F, g, needs, nb, node, *saved)
    obs = _tls.obs
    if obs is not None and obs.numerics is not None:
        obs.numerics.check_backward(node, g, saved, [gi if n else None for gi, n in zip(raw, needs)])
    return raw


def _timed_vjp(profiler: Any, F: Any, node: Node, needs: Any, lead: tuple, g: Any, saved: Any) -> Any:
    """A node's VJP under gt.profiler: one ``backward`` event (``custom_gradient:<function>`` for custom ones)."""
    prim = node.prim
    name = f"custom_gradient:{node.params['name']}" if prim.name.startswith("custom_gradient") else prim.name
    if lead and not prim.batchable:
        return profiler.call(name, "backward", _unbatched_vjp, (F, g, needs, node, saved, lead))
    return profiler.call(name, "backward", prim.vjp, (F, g, needs, len(lead), node, *saved))


def _fit_all(F: Any, node: Node, needs: Any, lead: tuple, raw: Any) -> list:
    """The VJP's cotangents reduced to the input shapes and cast to the input dtypes (None: not needed)."""
    nb = len(lead)
    shapes = node.shapes
    casts = node.casts
    out = []
    for k in range(len(needs)):
        gi = raw[k]
        if gi is None or not needs[k]:
            out.append(None)
            continue
        out.append(_fit(F, gi, shapes[k] if not nb else lead + shapes[k], nb, None if casts is None else casts[k]))
    return out


def _fit(F: Any, gi: Any, shape: tuple, nb: int, cast: Any) -> Any:
    """A cotangent reduced over broadcast dimensions to ``shape`` and cast to the input's dtype."""
    if gi.shape != shape:
        gi = F.sum_to(gi, shape, nb)
    if cast is not None:
        gi = gi.astype(cast)
    return gi


def sum_to(F: Any, x: Any, shape: tuple[int, ...], nb: int = 0) -> Any:
    """Reduce (or broadcast) a cotangent ``x`` to ``shape``: undoing broadcasting, in one place.

    The first ``nb`` axes of both are a batch of cotangents (``jacobian``) and are kept:
    broadcasting inserted its axes after them. The steps depend on the shapes alone
    (:func:`sum_to_plan`, memoized), so the compiled backward, which knows the shapes, writes
    the same steps inline.
    """
    xs = x.shape
    if xs == shape:
        return x
    key = (xs, shape, nb)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= 4096:  # shapes that never repeat: keep the table bounded
            _plans.clear()
        plan = _plans[key] = sum_to_plan(xs, shape, nb)
    first, axes, then, widen = plan
    if first is not None:
        x = F.reshape(x, first)
    if axes:
        x = F.sum(x, axis=axes, keepdims=True)
    if then is not None:
        x = F.reshape(x, then)
    if widen:
        x = F.broadcast_to(x, shape)
    return x


_plans: dict[tuple, tuple] = {}


def sum_to_plan(xs: tuple, shape: tuple, nb: int = 0) -> tuple[tuple | None, tuple, tuple | None, bool]:
    """:func:`sum_to`'s steps from shape ``xs`` to ``shape``, in its order: ``(reshape to this first,
    or None; axes summed with keepdims; reshape to this then, or None; broadcast_to shape last)``.

    >>> sum_to_plan((4, 3), (3,))
    (None, (0,), (3,), False)
    >>> sum_to_plan((4, 3), (4, 1))
    (None, (1,), None, False)
    >>> sum_to_plan((), (2, 2))
    (None, (), None, True)
    >>> sum_to_plan((5, 3), (5, 2, 1), nb=1)  # a jacobian's batch of 5: (5, 1, 3), summed to (5, 1, 1)
    ((5, 1, 3), (2,), None, True)
    """
    first = then = None
    extra = len(xs) - len(shape)
    if extra < 0:
        if not (nb and len(xs) >= nb and xs[:nb] == shape[:nb]):
            return None, (), None, True
        xs = first = xs[:nb] + (1,) * (-extra) + xs[nb:]
        extra = 0
    axes = tuple(range(nb, nb + extra)) + tuple(
        nb + extra + i for i, s in enumerate(shape[nb:]) if s == 1 and xs[nb + extra + i] != 1
    )
    if axes:
        xs = tuple(1 if a in axes else d for a, d in enumerate(xs))
        if extra:
            xs = then = xs[:nb] + xs[nb + extra :]
    return first, axes, then, xs != shape


_NEED1 = (True,)
_NEED2 = ((None, (False, True)), ((True, False), (True, True)))


def _wrap_id(data: Any, tid: int) -> Tensor:
    t = _new(Tensor)
    t._data = data
    t._id = tid
    return t


def _unbatched_vjp(F: Any, g: Any, needs: Any, node: Node, saved: list, lead: tuple) -> list:
    """Run a VJP that cannot take leading batch dims once per batch row, then stack."""
    n = lead[0]
    rows = []
    for r in range(n):
        gr = [x[r] if x is not None else None for x in g] if isinstance(g, list) else g[r]
        rows.append(node.prim.vjp(F, gr, needs, 0, node, *saved))
    out = []
    for k in range(len(needs)):
        col = [row[k] for row in rows]
        if not needs[k] or any(c is None for c in col):
            out.append(None)
        else:
            out.append(F.stack(col, axis=0))
    return out
