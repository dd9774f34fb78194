"""Why is a gradient None? ``tape.explain(target, source)``, plus ``tape.summary()`` and ``tape.to_dot()``.

The tape already knows every op it recorded. While it records, it also keeps,
at no cost to tracked ops: the edges of ops that ran on values it does not
track, markers where a path was cut (``stop_gradient``, ops under
``stop_recording``, integer/bool results, values exported with ``.numpy()``),
and tensor-id parity (op outputs have even ids, constants odd ones). That is
enough to name the reason a path from source to target is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .primitive import Swept, records
from .recording import saved_nbytes
from .tensor import FLOAT_DTYPES, Tensor, Variable

REASONS = (
    "connected",
    "not_watched",
    "not_trainable",
    "unused",
    "not_recorded",
    "stop_gradient",
    "stop_recording",
    "integer_dtype",
    "non_differentiable_op",
    "left_tape",
)

# Primitives whose gradient is identically zero: a path through them only is
# "connected" to the tape but carries nothing (TensorFlow returns None there).
ZERO_GRAD_OPS = frozenset({"floor", "ceil", "round", "sign", "floor_divide"})


@dataclass
class Explanation:
    """The answer of :meth:`GradientTape.explain`: ``reason`` (one of :data:`REASONS`),
    ``where`` (the user's ``file:line`` of the op that broke the path, when known) and
    ``message`` (what happened and what to do); ``str()`` gives a readable paragraph.

    >>> import gputape as gt
    >>> x = gt.constant([1.0, 2.0])
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = gt.sum(gt.stop_gradient(x * 2.0))
    >>> e = tape.explain(y, x)
    >>> e.reason, e.where is not None
    ('stop_gradient', True)
    """

    reason: str
    message: str
    where: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        at = f" (at {self.where})" if self.where else ""
        return f"[{self.reason}]{at} {self.message}"


def _describe(t: Tensor) -> str:
    kind = f"variable {t.name!r}" if type(t) is Variable else "tensor"
    return f"{kind} of shape {tuple(t.shape)} and dtype {t.dtype}"


def _state(tape: Any) -> Any:
    """The live tape, or the id-only snapshot a non-persistent tape keeps after gradient()."""
    if tape._tensors is not None:
        records(tape._nodes)  # (a persistent tape's list holds Nodes; a nested sweep may have left records)
        return tape
    if tape._retired is not None:
        records(tape._retired._nodes)
        return tape._retired
    raise RuntimeError(
        "GradientTape.explain: this tape holds no record (never entered, or released); "
        "explain() works on a tape that recorded the computation, also after gradient()"
    )


def _producers(st: Any) -> dict[int, tuple[str, tuple[int, ...], str | None]]:
    """out id -> (op name, input ids, where) for every op the tape recorded."""
    prod: dict[int, tuple[str, tuple[int, ...], str | None]] = {}
    for n in st._nodes:
        prim, ids, out = n.prim, n.ids, n.out
        info = getattr(n, "info", None)
        where = info[0] if info else None
        for o in out if type(out) is tuple else (out,):
            prod[o] = (prim.name, ids, where)
    return prod


def _reaches(start: int, goal: int, step: Any) -> Any:
    """Depth-first search from ``start`` for ``goal``; ``step(id)`` yields (next id, break-or-None).
    Returns None if unreachable, else the first break met on the found path (or ``()`` for none)."""
    stack: list[tuple[int, Any]] = [(start, ())]
    seen: set[int] = set()
    found: Any = None
    while stack:
        i, brk = stack.pop()
        if i == goal:
            if brk == ():
                return ()  # a clean path wins over any broken one
            found = found if found is not None else brk
            continue
        if i in seen:
            continue
        seen.add(i)
        for j, b in step(i):
            stack.append((j, brk if brk != () else (b if b is not None else ())))
    return found


def _used_by(cut: int, prod: dict, edges: dict) -> str:
    """Which op took the integer/bool value ``cut`` (" (the condition of gt.where)"), or ""."""
    for table in (prod, edges):
        for rec in table.values():
            if cut in rec[1]:
                op, pos = rec[0], rec[1].index(cut)
                return " (the condition of gt.where)" if op == "where" and pos == 0 else f" (used by gt.{op})"
    return ""


def explain(tape: Any, target: Tensor, source: Tensor) -> Explanation:
    """Explain why ``tape.gradient(target, source)`` is (or is not) None."""
    if not isinstance(target, Tensor) or not isinstance(source, Tensor):
        raise TypeError("GradientTape.explain(target, source): both must be gt.Tensors or gt.Variables")
    st = _state(tape)
    tt = st._tensors
    sid, tid = source._id, target._id
    if source.dtype not in FLOAT_DTYPES and source.dtype.kind != "c":
        return Explanation(
            "integer_dtype",
            f"the source is a {_describe(source)}: gradients flow only to floating-point or complex values; "
            "cast it with .astype('float32') before using it",
        )
    if tid in st._broken and st._broken[tid][0] == "non_differentiable_op":
        _, name, where, _ = st._broken[tid]
        return Explanation(
            "non_differentiable_op",
            f"the target is the integer/bool result of gt.{name}, which has no gradient",
            where,
        )
    if target.dtype not in FLOAT_DTYPES and target.dtype.kind != "c":
        return Explanation(
            "integer_dtype",
            f"the target is a {_describe(target)}: only floating-point or complex targets have gradients",
        )
    if tid == sid:
        return Explanation("connected", "the target is the source itself: its gradient is the output gradient")

    prod = _producers(st)
    edges, broken = st._edges, st._broken

    # 1. Through recorded ops only: connected, unless every such path crosses a
    #    zero-gradient op (then the gradient is zeros, and we say which op).
    def recorded(i: int) -> Any:
        p = prod.get(i)
        if p is not None:
            for j in p[1]:
                if j:
                    yield j, (("non_differentiable_op", p[0], p[2]) if p[0] in ZERO_GRAD_OPS else None)

    hit = _reaches(tid, sid, recorded) if sid in tt else None
    if hit == ():
        return Explanation("connected", f"the target depends on the {_describe(source)} through ops this tape recorded")
    if hit:
        _, name, where = hit
        return Explanation(
            "non_differentiable_op",
            f"every path from the source to the target goes through gt.{name}, whose gradient is zero "
            "(piecewise constant)",
            where,
        )

    # 2. Through everything the tape saw: recorded ops, untracked edges, cut points.
    def anything(i: int) -> Any:
        p = prod.get(i)
        if p is not None:
            for j in p[1]:
                if j:
                    yield j, None
        e = edges.get(i)
        if e is not None:
            for j in e[1]:
                yield j, None
        b = broken.get(i)
        if b is not None:
            for j in b[3]:
                yield j, (b[0], b[1], b[2], i)

    hit = _reaches(tid, sid, anything)
    if hit:
        reason, name, where, cut = hit
        text = {
            "stop_gradient": "the path from the source to the target goes through gt.stop_gradient",
            "stop_recording": f"the path goes through gt.{name}, computed inside tape.stop_recording(), "
            "so this tape did not record it",
            "non_differentiable_op": f"the path goes through gt.{name}{_used_by(cut, prod, edges)}, whose "
            "integer/bool result has no gradient; if the source should get one through it, use a smooth "
            "surrogate (a sigmoid for a step, a softmax for an argmax)",
            "left_tape": "the value left the tape through .numpy() / np.asarray and was used as a raw array, "
            "which has no history: keep the computation in gputape ops",
        }[reason]
        return Explanation(reason, text, where, {"op": name})
    if hit == ():  # reachable only through ops the tape saw but did not record: the source was not tracked
        if type(source) is Variable and not source.trainable:
            return Explanation(
                "not_trainable",
                f"the source is {_describe(source)} created with trainable=False, which the tape does not "
                f"watch automatically: call tape.watch({source.name}) or make it trainable",
            )
        if type(source) is Variable and not st._auto:
            return Explanation(
                "not_watched",
                f"the tape was created with watch_accessed_variables=False and never watched the "
                f"{_describe(source)}: call tape.watch(...) on it inside the `with` block",
            )
        return Explanation(
            "not_watched",
            f"the source is a {_describe(source)} this tape never watched: call tape.watch(...) on it inside "
            "the `with` block before using it (only trainable Variables are watched automatically)",
        )

    # 3. No path at all. What is the target built from, outside the tape's view?
    leaves: list[int] = []
    seen: set[int] = set()
    stack = [tid]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        nxt = [j for j, _ in anything(i)]
        if nxt:
            stack.extend(nxt)
        elif i not in tt:
            leaves.append(i)
    computed_outside = [i for i in leaves if i % 2 == 0]  # op outputs the tape never saw
    constants = [i for i in leaves if i % 2 == 1]
    for tensor_id, where, mark, _ in st._exports:
        if any(c > mark for c in constants) or (tid % 2 == 1 and tid > mark):
            return Explanation(
                "left_tape",
                "the value left the tape through .numpy() / np.asarray / float() and came back as a new "
                "constant, which has no history: keep the computation in gputape ops",
                where,
                {"exported_tensor_id": tensor_id},
            )
    if computed_outside or (tid % 2 == 0 and tid not in tt and tid not in prod and tid not in edges):
        return Explanation(
            "not_recorded",
            "the target depends on values computed by gputape ops outside this tape's recording (before "
            "the `with` block was entered, after it ended, or in another thread); compute them inside "
            "`with tape:` if they depend on the source",
            None,
            {"outside_ids": computed_outside},
        )
    if sid not in tt and type(source) is Variable and not source.trainable:
        reason, msg = "not_trainable", f"the source is {_describe(source)} created with trainable=False, and "
        msg += "the target does not use it in any op this tape saw"
        return Explanation(reason, msg)
    return Explanation(
        "unused",
        f"the target does not depend on the {_describe(source)}: no op this tape saw connects them",
    )


def summary(tape: Any) -> str:
    """A table of the recorded ops: op, input shapes, output shape/dtype, bytes saved, file:line.

    Output shapes and dtypes are always there (each node keeps them, known when the op ran);
    the user's file:line only for ops recorded inside ``gt.debug.record_locations()``, since
    finding it walks the stack.
    """
    st = _state(tape)
    rows = [("#", "op", "inputs", "output", "saved bytes", "where")]
    total = 0
    for k, n in enumerate(st._nodes):
        if type(n) is Swept:
            rows.append((str(k), n.prim.name, "-", "-", "released", n.info[0] if n.info and n.info[0] else "-"))
            continue
        nbytes = sum(saved_nbytes(a) for a in n.saved)
        total += nbytes
        shapes = ", ".join(str(tuple(s)) if s is not None else "const" for s in n.shapes)
        info = getattr(n, "info", None)
        rows.append((str(k), n.prim.name, shapes, _out_text(n), f"{nbytes:,}", info[0] if info and info[0] else "-"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    watched = ", ".join(v.name for v in tape.watched_variables()) or "-"
    lines.append(f"{len(st._nodes)} ops recorded, {tape.saved_bytes:,} bytes saved, watched variables: {watched}")
    if not any(getattr(n, "info", None) for n in st._nodes if type(n) is not tuple):
        lines.append("(file:line is recorded inside gt.debug.record_locations())")
    return "\n".join(lines)


def _out_text(n: Any) -> str:
    """``(2, 3) float32``: the output's shape and dtype, recorded with the node (each output's, for several)."""
    meta = getattr(n, "meta", None)
    if meta is None:  # a node built by hand, without the recorder
        return "?"
    pairs = meta if type(n.out) is tuple else (meta,)
    return ", ".join(f"{tuple(shape)} {dtype}" for shape, dtype in pairs)


def to_dot(tape: Any) -> str:
    """The recorded graph as Graphviz DOT text: ellipses for tensors, boxes for ops."""
    st = _state(tape)
    out = ["digraph gputape {", "  rankdir=LR;", '  node [fontname="monospace"];']
    seen_t: set[int] = set()
    watched = set(st._leaves)
    var_names = {v._id: v.name for v in st._watched_vars.values()}

    def tensor(i: int) -> None:
        if i and i not in seen_t:
            seen_t.add(i)
            label = var_names.get(i, f"t{i}")
            style = ', style=filled, fillcolor="#dde8ff"' if i in watched else ""
            out.append(f'  t{i} [label="{label}", shape=ellipse{style}];')

    for k, n in enumerate(st._nodes):
        prim, ids, o = n.prim, n.ids, n.out
        out.append(f'  op{k} [label="{prim.name}", shape=box];')
        for i in ids:
            if i:
                tensor(i)
                out.append(f"  t{i} -> op{k};")
        for j in o if type(o) is tuple else (o,):
            tensor(j)
            out.append(f"  op{k} -> t{j};")
    out.append("}")
    return "\n".join(out)
