"""Code generation for ``gt.function``: the CPU replay's Python source and the fused backward kernels.

A record's steps become one straight-line function (VJPs of primitives declared in
:mod:`gputape.core.expr` written inline); chains of such VJPs become one expression that
the CUDA-graph runner turns into a generated kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any, NamedTuple

import numpy as np

from ..core import expr as _expr
from ..core.backward.compiled import _inline_sum_to
from ..core.backward.sweep import sum_to_plan
from ..core.primitive import Node
from ..core.tensor import Variable


class _Slot:
    """A step's argument that is slot ``k``: an array value of the record (``s<k>`` in a replay)."""

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k


class _Const:
    """A step's argument that is the record's constant ``k`` (``c<k>`` in a replay)."""

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k


class _Fit(functools.partial):
    """A VJP result's reduction to its input's shape: ``partial(backward._fit, F, shape=, nb=, cast=)``
    that knows ``traced``, the cotangent's shape in the trace.

    The CPU replay writes the reduction of that shape inline (:func:`_inline_fit`), behind a test
    of the shape, with this call for any other (a relaxed-shape replay); the CUDA-graph runner
    sees the partial of ``_fit`` it always saw.
    """

    traced: tuple | None = None


class _List:
    """A step's argument that is a Python list of arguments (``None`` entries kept)."""

    __slots__ = ("items",)

    def __init__(self, items: list) -> None:
        self.items = items


class _Step(NamedTuple):
    """One recorded step, ``outs = fn(*refs)``.

    Each ref is a :class:`_Slot`, :class:`_Const` or :class:`_List`; ``outs``
    is a slot, a list of slots (``None`` where a result is unused) or ``None``.
    ``kind``: ``"device"`` when a CUDA graph may capture the step, ``"host"`` or
    ``"host:<primitive>"`` when not, ``"var"`` for a variable read (``fn`` is the
    Variable, ``refs`` None, ``outs`` the slot its value goes to).
    """

    fn: Any
    refs: list | None
    outs: Any
    kind: str


def _made(outs: Any) -> list[int]:
    """The slots a step's ``outs`` writes."""
    if isinstance(outs, int):
        return [outs]
    return [o for o in outs or () if o is not None]


def _last_reads(steps: list[_Step]) -> dict[int, int]:
    """Each slot's last reader: slot -> step index."""
    last: dict[int, int] = {}
    for i, st in enumerate(steps):
        if st.refs is not None:
            for k in _slots_in(st.refs):
                last[k] = i
    return last


class _DeclaredVjp(NamedTuple):
    """A recorded VJP step of a primitive declared in gputape.core.expr, unbatched: its call is
    ``vjp(F, g, needs, 0, node, *saved)`` (the layout ``_Trace._vjp`` records), decoded once here."""

    decl: Any  # the primitive's gputape.core.expr declaration
    node: Node  # the node, without its residuals
    F: Any  # refs: the VJP's namespace, the cotangent, needs, the node, the residuals
    g: Any
    needs: Any
    node_ref: Any
    saved: list


def _declared_vjp(step: _Step, consts: list) -> _DeclaredVjp | None:
    """The step as a :class:`_DeclaredVjp`, or None when it is anything else."""
    fn, refs, outs, _kind = step
    if refs is None or not isinstance(outs, list) or len(refs) < 5:
        return None
    F, g, needs, nb, node_ref, *saved = refs
    if type(node_ref) is not _Const or type(nb) is not _Const:
        return None
    node = consts[node_ref.k]
    if not isinstance(node, Node) or fn is not node.prim.vjp or consts[nb.k] != 0:
        return None
    decl = _expr.DERIVATIVES.get(node.prim.name)
    if decl is None or decl.vjp is not fn:
        return None
    return _DeclaredVjp(decl, node, F, g, needs, node_ref, saved)


# The CPU replay writes the VJPs of primitives declared in gputape.core.expr as expressions in its
# own code instead of calling them: per output, the very text the generated VJP evaluates on
# numpy arrays (same operations in the same order, so the same bits), over g the cotangent,
# a0/a1 the saved operands, F the VJP's namespace and node its node. A Python call per
# backward op is most of what a compiled elementwise chain pays over numpy.


def _inline_vjp(step: _Step, consts: list, ns: dict[str, Any]) -> list[str] | None:
    """Source lines for a VJP step of a primitive declared in gputape.core.expr on numpy arrays, else None.

    On numpy 2 the literals are typed by their partner's dtype (:func:`gputape.core.expr.python_typed`,
    tables put in ``ns``), and a constant operand that is a Python number (``y * 1.01``'s 1.01)
    is written as such a literal: the same bits as the VJP's text, without numpy converting the
    number on every call.
    """
    v = _declared_vjp(step, consts)
    if v is None or type(v.F) is not _Const or getattr(consts[v.F.k], "xp", None) is not np:
        return None
    names = {"g": _render(v.g), "F": _render(v.F), "node": _render(v.node_ref)}
    names |= {f"a{j}": _render(r) for j, r in enumerate(v.saved)}
    decl = v.decl
    numbers: dict[str, int | float] = {}
    arrays = set()
    for op, r in zip(decl.operands, v.saved):
        value = consts[r.k] if type(r) is _Const else None
        if type(value) is float or type(value) is int:
            numbers[op] = value
        elif type(r) is _Slot or isinstance(value, np.ndarray):
            arrays.add(op)
    tensors = tuple(n in arrays for n in decl.inputs)
    lines = []
    for k, o in enumerate(step.outs):
        if o is not None:
            text = decl.python_typed(k, names, tensors, lambda t: _literal_name(ns, t), numbers)
            lines.append(f"s{o} = " + text)
            temps = sorted(set(_expr.TEMPORARIES.findall(text)))
            if temps:
                lines.append(f"del {', '.join(temps)}")
    return lines


def _literal_name(ns: dict[str, Any], table: Any) -> str:
    ns[table.name] = table
    return table.name


def _slots_in(refs: Any) -> list[int]:
    out = []
    for r in refs:
        if type(r) is _Slot:
            out.append(r.k)
        elif type(r) is _List:
            out.extend(_slots_in(r.items))
    return out


def _render(r: Any) -> str:
    if r is None:
        return "None"
    if type(r) is _Slot:
        return f"s{r.k}"
    if type(r) is _Const:
        return f"c{r.k}"
    return "[" + ", ".join(_render(e) for e in r.items) + "]"


def _lhs(outs: Any) -> str:
    if outs is None:
        return ""
    if isinstance(outs, int):
        return f"s{outs} = "
    names = ["_" if o is None else f"s{o}" for o in outs]
    return ", ".join(names) + (", = " if len(names) == 1 else " = ")


class _Consts:
    """``_backward_compile._inline_sum_to``'s writer: its constants become the replay's globals."""

    def __init__(self, ns: dict[str, Any]) -> None:
        self.ns = ns

    def const(self, name: str, value: Any) -> str:
        self.ns[name] = value
        return name


def _inline_fit(step: _Step, i: int, ns: dict[str, Any]) -> str | None:
    """``s<out> = ...``: a :class:`_Fit` step on numpy arrays as the numpy calls ``F.sum_to`` makes for
    the traced shape, behind a test of that shape (else the call, as recorded), or None.

    The same steps as the call (:func:`~gputape.core.backward.sweep.sum_to_plan`'s, written out as the compiled
    backward writes them), so the same bits; a cast or a broadcast back keeps the call.
    """
    fn, refs, outs, _kind = step
    kw = fn.keywords
    xs = fn.traced
    if type(fn) is not _Fit or xs is None or kw["nb"] or kw["cast"] is not None:
        return None
    if getattr(fn.args[0], "xp", None) is not np or type(outs) is not int or type(refs[0]) is not _Slot:
        return None
    shape = kw["shape"]
    if sum_to_plan(xs, shape, 0)[3]:
        return None
    x = f"s{refs[0].k}"
    ns[f"f{i}"] = fn
    return f"s{outs} = {_inline_sum_to(_Consts(ns), x, xs, shape)} if {x}.shape == {xs!r} else f{i}({x})"


def _fresh_outs(step: _Step, consts: list) -> list[int]:
    """The slots a step writes that hold memory it allocated and keeps no reference to.

    Only a VJP step of a primitive whose declaration says so
    (:attr:`~gputape.core.primitive.Primitive.fresh_cotangents`), called as the replay calls it
    on host arrays: ``vjp(F, g, needs, 0, node, *saved)`` with numpy's raw namespace. Anything
    else (a forward, a reduction back to an input's shape, a variable read, user code) may
    return or keep one of its arguments, and is never taken to be fresh.
    """
    fn, refs, outs, _kind = step
    if refs is None or not isinstance(outs, list) or len(refs) < 5:
        return []
    F, _g, _needs, nb, node_ref = refs[:5]
    if type(F) is not _Const or type(nb) is not _Const or type(node_ref) is not _Const:
        return []
    node = consts[node_ref.k]
    if not isinstance(node, Node) or fn is not node.prim.vjp or consts[nb.k] != 0:
        return []
    if getattr(consts[F.k], "xp", None) is not np:
        return []
    fresh = node.prim.fresh_cotangents
    return [o for j, o in enumerate(outs) if o is not None and j < len(fresh) and fresh[j]]


def donations(
    steps: list[_Step], consts: list, returned: set[int], fresh_steps: Collection[int] = ()
) -> dict[int, tuple[bool, ...]]:
    """Per optimizer step (index), which of its gradients it may write its update into.

    Buffer donation, as XLA does it, proven from the record alone: gradient ``k`` of step
    ``i`` is donated when its slot was made by a step that declares it fresh
    (:func:`_fresh_outs`: memory that step allocated; never an argument, a constant, a
    variable's value, a view of one, the seed), the function does not return it, step ``i``
    reads it once (not shared by two variables) and is its last reader, and every other step
    that reads it also declares fresh results (so none made a view of it or kept it). Nothing
    outside this call of the replay can see such an array before the optimizer publishes it.
    ``fresh_steps``: forward steps the trace recorded as declared fresh (``fresh_forward``).
    """
    made_fresh: set[int] = set()
    clean: set[int] = set()  # steps that alias and keep nothing of what they read
    readers: dict[int, list[int]] = {}
    for i, st in enumerate(steps):
        fresh = _made(st.outs) if i in fresh_steps else _fresh_outs(st, consts)
        made_fresh.update(fresh)
        if fresh and len(fresh) == len(_made(st.outs)):
            clean.add(i)
        if st.refs is not None:
            for k in _slots_in(st.refs):
                readers.setdefault(k, []).append(i)
    out = {}
    for i, st in enumerate(steps):
        if not getattr(type(st.fn), "takes_donations", False):
            continue
        mask = []
        for r in st.refs:
            k = r.k if type(r) is _Slot else None
            ok = k is not None and k in made_fresh and k not in returned
            if ok:
                rs = readers[k]
                ok = rs[-1] == i and rs.count(i) == 1 and all(j == i or j in clean for j in rs)
            mask.append(ok)
        if any(mask):
            out[i] = tuple(mask)
    return out


def compile_replay(
    name: str,
    steps: list[_Step],
    consts: list,
    arg_slots: list[int],
    out_refs: list[Any],
    fresh_steps: Collection[int] = (),
) -> tuple[Callable[..., Any], str]:
    """Straight-line Python source for the record; each slot deleted after its last use."""
    last = _last_reads(steps)
    returned = set(_slots_in(out_refs))
    donated = donations(steps, consts, returned, fresh_steps)
    ns: dict[str, Any] = {}
    lines = [f"def replay({', '.join(f's{k}' for k in arg_slots)}):"]
    dead_args = [k for k in arg_slots if k not in last and k not in returned]
    if dead_args:
        lines.append(f"    del {', '.join(f's{k}' for k in dead_args)}")
    for i, step in enumerate(steps):
        fn, refs, outs, _kind = step
        inline = _inline_vjp(step, consts, ns)
        if isinstance(fn, Variable):
            ns[f"V{i}"] = fn
            lines.append(f"    s{outs} = V{i}._data")
        elif inline is not None:
            lines.extend(f"    {line}" for line in inline)
        elif type(fn) is _Fit and (fit := _inline_fit(step, i, ns)) is not None:
            lines.append(f"    {fit}")
        elif i in donated:  # (the mask is static: which gradients are this call's own, see donations())
            ns[f"f{i}"] = fn
            args = "".join(f", {_render(r)}" for r in refs)
            lines.append(f"    {_lhs(outs)}f{i}.donating({donated[i]!r}{args})")
        else:
            ns[f"f{i}"] = fn
            lhs = _lhs(outs)
            lines.append(f"    {lhs}f{i}({', '.join(_render(r) for r in refs)})")
        dead = [k for k in _made(outs) if k not in last and k not in returned]
        if refs is not None:
            dead += sorted({k for k in _slots_in(refs) if last.get(k) == i and k not in returned})
        if dead:
            lines.append(f"    del {', '.join(f's{k}' for k in dead)}")
    lines.append(f"    return ({''.join(_render(r) + ', ' for r in out_refs)})")
    for j, c in enumerate(consts):
        ns[f"c{j}"] = c
    ns["np"] = np
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<gt.function {name}>", "exec"), ns)
    return ns["replay"], src


def fused_kernel_source(expr: _expr.Expr, nparams: int, serial: int = 0) -> tuple[str, str, str, str]:
    """``cupy.ElementwiseKernel`` arguments for ``out = expr`` over ``g`` and ``p0..p{n-1}``
    (with :data:`gputape.core.expr.CUDA_PRELUDE` as the preamble)."""
    return _expr.kernel_source(expr, nparams, f"gputape_fused_vjp_{serial}")


def _template(name: str, needs: Any) -> tuple | None:
    """(expression over g and a0.., operand names) of the one cotangent a VJP step computes, else None."""
    decl = _expr.DERIVATIVES.get(name)
    if decl is None or needs is None or list(needs).count(True) != 1:
        return None
    return decl.fusable(list(needs).index(True))


class _Link(NamedTuple):
    """A VJP step that can join a fused chain: ``out = template(g, *operands)``."""

    template: tuple  # (expression over g and a0.., the operand names it reads), gputape.core.expr's
    g: int  # the cotangent's slot
    operands: list  # refs of the operands, in the template's order
    out: int  # the slot of the one cotangent it computes


def _fusable(step: _Step, consts: list) -> _Link | None:
    """The step as a :class:`_Link` of a fused chain (a VJP declared in gputape.core.expr), else None."""
    v = _declared_vjp(step, consts)
    if v is None or step.kind != "device" or type(v.needs) is not _Const or type(v.g) is not _Slot:
        return None
    template = _template(v.node.prim.name, tuple(consts[v.needs.k]))
    done = _made(step.outs)
    if template is None or len(done) != 1:
        return None
    operands = []
    for name in template[1]:
        r = v.saved[int(name[1:])]
        if type(r) is _Const and not isinstance(consts[r.k], (int, float)):
            return None  # an array constant: keep kernels to slots and Python numbers
        operands.append(r)
    return _Link(template, v.g.k, operands, done[0])


def compose(templates: list[tuple]) -> tuple[_expr.Expr, int]:
    """One expression for a chain of VJP templates, first applied first: (expr, parameter count).

    Each template's operands become the next free ``p{i}``, in the order the chain
    passes them; ``g`` is the chain's incoming cotangent.

    >>> e, n = compose([_template("tanh", (True,)), _template("multiply", (True, False))])
    >>> _expr.python(e), n
    ('g * (1 - p0 * p0) * p1', 2)
    """
    return _expr.compose(templates)
