"""Linear algebra: matmul (primitive, numpy semantics incl. 1-D and batched), dot, einsum."""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from ..core import _errors
from ..core.dispatch import apply, binary_op, primitive
from ..core.tensor import as_tensor
from .arithmetic import _doctests


@primitive("matmul", complex="holomorphic", save=True)
def _matmul(xp, x, y):
    return xp.matmul(x, y)


_matmul.fresh_forward = True  # (a matmul without out= allocates its result)


# Every branch returns a product or a matmul's result (or a squeeze of one it made): new memory.
@_matmul.defvjp(fresh=(True, True))
def _(F, g, needs, nb, node, x, y):
    # x.swapaxes, not F.swapaxes: the same view (or, on tensors, the same op) without numpy's
    # Python-level wrapper, which cost a third of this VJP in a small MLP's backward
    gx = gy = None
    xd, yd = x.ndim, y.ndim
    if xd == 1 and yd == 1:  # inner product
        if needs[0]:
            gx = F.expand_dims(g, -1) * y
        if needs[1]:
            gy = F.expand_dims(g, -1) * x
    elif yd == 1:  # (..., m, k) @ (k,) -> (..., m)
        if needs[0]:
            gx = F.expand_dims(g, -1) * y
        if needs[1]:
            gy = F.squeeze(F.matmul(F.expand_dims(g, -2), x), -2)
    elif xd == 1:  # (k,) @ (..., k, p) -> (..., p)
        if needs[0]:
            gx = F.squeeze(F.matmul(F.expand_dims(g, -2), y.swapaxes(-1, -2)), -2)
        if needs[1]:
            gy = F.expand_dims(x, -1) * F.expand_dims(g, -2)
    else:  # batch dims broadcast; the sweep sums them back to each input's shape
        if needs[0]:
            gx = F.matmul(g, y.swapaxes(-1, -2))
        if needs[1]:
            gy = F.matmul(x.swapaxes(-1, -2), g)
    return (gx, gy)


_MATMUL_DOC = """Matrix product with numpy's rules (1-D operands, broadcast batch dimensions).

    >>> import gputape as gt
    >>> a = gt.constant([[1.0, 2.0], [3.0, 4.0]])
    >>> gt.matmul(a, gt.constant([1.0, 1.0])).numpy().tolist()
    [3.0, 7.0]
    """

# Generated like the elementwise operators (two operands, no parameters): every MLP layer
# runs it, and the generic apply() costs more per call. On host arrays the forward is numpy's
# matmul itself (a Python frame less per product); gt.function's CUDA-graph runner recognises
# matrix products by either forward.
_matmul.cpu = np.matmul
matmul = binary_op(_matmul, "matmul", _MATMUL_DOC)


def dot(x: Any, y: Any) -> Any:
    """numpy's ``dot``: matmul for 1-D/2-D operands, a product with a scalar, and for N-D
    operands a sum over the last axis of ``x`` and the second-to-last of ``y``.

    >>> import gputape as gt
    >>> gt.dot(gt.constant([1.0, 2.0]), gt.constant([3.0, 4.0])).numpy().item()
    11.0
    """
    from .elementwise import multiply
    from .shape import moveaxis, reshape

    if isinstance(x, (int, float)) or isinstance(y, (int, float)):
        return multiply(x, y)  # a Python number stays weak: dot(float64 tensor, 0.1) is float64's 0.1
    x, y = as_tensor(x), as_tensor(y)
    if x.ndim == 0 or y.ndim == 0:
        return multiply(x, y)
    if (y.ndim <= 2 and x.ndim <= 2) or y.ndim == 1:
        return matmul(x, y)
    # N-D: contract x[..., k] with y[..., k, p] over k, keeping all other axes.
    k = y.shape[-2]
    yt = reshape(moveaxis(y, -2, 0), (k, -1))
    out = matmul(reshape(x, (-1, k)), yt)
    return reshape(out, x.shape[:-1] + y.shape[:-2] + y.shape[-1:])


def _parse_einsum(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    """Split subscripts into per-operand letter strings with '...' expanded."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        lhs, out = subscripts.split("->")
    else:
        lhs, out = subscripts, None
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise _errors.argument_error(
            subscripts, f"has {len(ins)} operand subscripts for {len(shapes)} operands", op="einsum", cls=ValueError
        )
    used = set(c for c in subscripts if c.isalpha())
    free = [c for c in string.ascii_letters if c not in used]
    ell_n = 0
    for s, shp in zip(ins, shapes):
        if "..." in s:
            ell_n = max(ell_n, len(shp) - (len(s) - 3))
    ell = "".join(free[:ell_n])
    exp_ins = []
    for s, shp in zip(ins, shapes):
        if "..." in s:
            n = len(shp) - (len(s) - 3)
            s = s.replace("...", ell[ell_n - n :] if n else "")
        if len(s) != len(shp):
            raise _errors.argument_error(
                subscripts, f"does not fit: {s!r} does not match an operand of shape {shp}", op="einsum", cls=ValueError
            )
        exp_ins.append(s)
    if out is None:
        counts: dict[str, int] = {}
        for s in exp_ins:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return exp_ins, out


@primitive("einsum", complex="holomorphic", save=True)
def _einsum(xp, *ops, ins, out):
    return xp.einsum(",".join(ins) + "->" + out, *ops)


@_einsum.defvjp
def _(F, g, needs, nb, node, *ops):
    ins, out = node.params["ins"], node.params["out"]
    used = set("".join(ins) + out)
    lead = "".join(c for c in string.ascii_letters if c not in used)[:nb]
    gsub = lead + out
    grads = []
    for i, s in enumerate(ins):
        if not needs[i]:
            grads.append(None)
            continue
        if len(set(s)) != len(s):
            raise NotImplementedError(
                f"gt.einsum: the gradient for operand {i} with repeated subscripts {s!r} (a diagonal or "
                "trace) is not implemented; take the diagonal with explicit indexing instead"
            )
        others = [(ins[j], ops[j]) for j in range(len(ins)) if j != i]
        avail = set(gsub).union(*[set(o) for o, _ in others]) if others else set(gsub)
        target = "".join(c for c in s if c in avail)
        expr = ",".join([gsub] + [o for o, _ in others]) + "->" + lead + target
        r = F.einsum(expr, g, *[v for _, v in others])
        if target != s:  # letters summed away in the forward pass: broadcast back
            shape = node.shapes[i] if node.shapes[i] is not None else ops[i].shape
            kept = tuple(shape[k] if c in avail else 1 for k, c in enumerate(s))
            r = F.broadcast_to(F.reshape(r, r.shape[:nb] + kept), r.shape[:nb] + tuple(shape))
        grads.append(r)
    return tuple(grads)


def einsum(subscripts: str, *operands: Any) -> Any:
    """Einstein summation (numpy's ``einsum``), differentiable in every operand.

    numpy's sublist form (``einsum(a, [0, 1], b, [1, 2], [0, 2])``, ``Ellipsis`` for ``...``) is
    taken too. Gradients for an operand with a repeated subscript (``'ii->i'``) are not
    implemented and raise ``NotImplementedError``.

    >>> import gputape as gt
    >>> a = gt.constant([[1.0, 2.0], [3.0, 4.0]])
    >>> gt.einsum("ij,j->i", a, gt.constant([1.0, 1.0])).numpy().tolist()
    [3.0, 7.0]
    >>> gt.einsum(a, [0, 1], [1, 0]).numpy().tolist()
    [[1.0, 3.0], [2.0, 4.0]]
    """
    if not isinstance(subscripts, str):
        if hasattr(subscripts, "shape") and operands:  # numpy's sublist form: einsum(a, [0, 1], b, [1, 2], [0, 2])
            subscripts, operands = _from_sublists((subscripts,) + operands)
        else:
            raise _errors.argument_error(
                subscripts, "is not a subscripts string", arg="subscripts", cls=TypeError, hint="e.g. 'ij,jk->ik'"
            )
    shapes = [tuple(getattr(o, "shape", ())) for o in operands]
    ins, out = _parse_einsum(subscripts, shapes)
    return apply(_einsum, tuple(operands), {"ins": ins, "out": out})


def _from_sublists(args: tuple) -> tuple[str, tuple]:
    """numpy's interleaved form ``(op, sublist, op, sublist, ..., [out sublist])`` as a subscripts string."""
    letters = string.ascii_letters

    def text(sub: Any) -> str:
        try:
            return "".join("..." if s is Ellipsis else letters[s.__index__()] for s in sub)
        except (TypeError, AttributeError, IndexError) as exc:
            raise TypeError(
                f"gt.einsum: sublist {sub!r} must hold integers in [0, 52) or Ellipsis (numpy's sublist form)"
            ) from exc

    ops, subs = args[0::2], args[1::2]
    out = None
    if len(args) % 2:  # an odd count ends with the output sublist
        ops, out = ops[:-1], args[-1]
    spec = ",".join(text(sub) for sub in subs[: len(ops)])
    return (spec + "->" + text(out) if out is not None else spec), tuple(ops)


__test__ = _doctests(globals())  # the generated matmul's example
