"""Code generation for ``gt.function``: the CPU replay's Python source and the fused backward kernels.

A record's steps become one straight-line function (VJPs of primitives declared in
:mod:`gputape.expr` written inline); chains of such VJPs become one expression that
the CUDA-graph runner turns into a generated kernel.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import expr as _expr
from ..tape import Node
from ..tensor import Variable

# The CPU replay writes the VJPs of primitives declared in gputape.expr as expressions in its
# own code instead of calling them: per output, the very text the generated VJP evaluates on
# numpy arrays (same operations in the same order, so the same bits), over g the cotangent,
# a0/a1 the saved operands, F the VJP's namespace and node its node. A Python call per
# backward op is most of what a compiled elementwise chain pays over numpy.
_TOKEN = re.compile(r"\b(g|a[0-9]+|F|node)\b")


def _inline_vjp(fn: Any, refs: Any, outs: Any, consts: list) -> list[str] | None:
    """Source lines for a VJP step of a primitive declared in gputape.expr on numpy arrays, else None."""
    if refs is None or not isinstance(outs, list) or len(refs) < 5 or refs[4][0] != "c":
        return None
    node = consts[refs[4][1]]
    if not isinstance(node, Node) or fn is not node.prim.vjp:
        return None
    decl = _expr.DERIVATIVES.get(node.prim.name)
    F = consts[refs[0][1]] if refs[0][0] == "c" else None
    if decl is None or decl.vjp is not fn or getattr(F, "xp", None) is not np or consts[refs[3][1]] != 0:
        return None
    names = {"g": _render(refs[1]), "F": _render(refs[0]), "node": _render(refs[4])}
    names |= {f"a{j}": _render(r) for j, r in enumerate(refs[5:])}
    lines = []
    for k, o in enumerate(outs):
        if o is not None:
            lines.append(f"s{o} = " + _TOKEN.sub(lambda m: names[m.group(1)], decl.python(k)))
    return lines


def _slots_in(refs: Any) -> list[int]:
    out = []
    for r in refs:
        if r is None:
            continue
        if r[0] == "s":
            out.append(r[1])
        elif r[0] == "l":
            out.extend(_slots_in(r[1]))
    return out


def _render(r: Any) -> str:
    if r is None:
        return "None"
    if r[0] == "s":
        return f"s{r[1]}"
    if r[0] == "c":
        return f"c{r[1]}"
    return "[" + ", ".join(_render(e) for e in r[1]) + "]"


def _lhs(outs: Any) -> str:
    if outs is None:
        return ""
    if isinstance(outs, int):
        return f"s{outs} = "
    names = ["_" if o is None else f"s{o}" for o in outs]
    return ", ".join(names) + (", = " if len(names) == 1 else " = ")


def compile_replay(
    name: str, steps: list, consts: list, arg_slots: list[int], out_refs: list[Any]
) -> tuple[Callable[..., Any], str]:
    """Straight-line Python source for the record; each slot deleted after its last use."""
    last: dict[int, int] = {}
    for i, (_fn, refs, _, _kind) in enumerate(steps):
        if refs is not None:
            for k in _slots_in(refs):
                last[k] = i
    returned = set(_slots_in(out_refs))
    ns: dict[str, Any] = {}
    lines = [f"def replay({', '.join(f's{k}' for k in arg_slots)}):"]
    dead_args = [k for k in arg_slots if k not in last and k not in returned]
    if dead_args:
        lines.append(f"    del {', '.join(f's{k}' for k in dead_args)}")
    for i, (fn, refs, outs, _kind) in enumerate(steps):
        inline = _inline_vjp(fn, refs, outs, consts)
        if isinstance(fn, Variable):
            ns[f"V{i}"] = fn
            lines.append(f"    s{outs} = V{i}._data")
        elif inline is not None:
            lines.extend(f"    {line}" for line in inline)
        else:
            ns[f"f{i}"] = fn
            lhs = _lhs(outs)
            lines.append(f"    {lhs}f{i}({', '.join(_render(r) for r in refs)})")
        produced = [outs] if isinstance(outs, int) else [o for o in outs or () if o is not None]
        dead = [k for k in produced if k not in last and k not in returned]
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
    (with :data:`gputape.expr.CUDA_PRELUDE` as the preamble)."""
    return _expr.kernel_source(expr, nparams, f"gputape_fused_vjp_{serial}")


def _template(name: str, needs: Any) -> tuple | None:
    """(expression over g and a0.., operand names) of the one cotangent a VJP step computes, else None."""
    decl = _expr.DERIVATIVES.get(name)
    if decl is None or needs is None or list(needs).count(True) != 1:
        return None
    return decl.fusable(list(needs).index(True))


def _fusable(step: tuple, consts: list) -> tuple | None:
    """(template, g slot, operand refs, out slot) for a fusable VJP step (gputape.expr), else None."""
    fn, refs, outs, kind = step
    if kind != "device" or not isinstance(outs, list) or len(refs) < 5:
        return None
    node = consts[refs[4][1]] if refs[4][0] == "c" else None
    if not isinstance(node, Node) or fn is not node.prim.vjp or refs[3] != ("c", refs[3][1]):
        return None
    needs = tuple(consts[refs[2][1]]) if refs[2][0] == "c" else None
    nb = consts[refs[3][1]]
    template = _template(node.prim.name, needs)
    if template is None or nb != 0 or refs[1][0] != "s" or fn is not _expr.DERIVATIVES[node.prim.name].vjp:
        return None
    done = [o for o in outs if o is not None]
    if len(done) != 1:
        return None
    saved = refs[5:]
    operands = []
    for name in template[1]:
        r = saved[int(name[1:])]
        if r[0] == "c" and not isinstance(consts[r[1]], (int, float)):
            return None  # an array constant: keep kernels to slots and Python numbers
        operands.append(r)
    return template, refs[1][1], operands, done[0]


def compose(templates: list[tuple]) -> tuple[_expr.Expr, int]:
    """One expression for a chain of VJP templates, first applied first: (expr, parameter count).

    Each template's operands become the next free ``p{i}``, in the order the chain
    passes them; ``g`` is the chain's incoming cotangent.

    >>> e, n = compose([_template("tanh", (True,)), _template("multiply", (True, False))])
    >>> _expr.python(e), n
    ('g * (1 - p0 * p0) * p1', 2)
    """
    return _expr.compose(templates)
