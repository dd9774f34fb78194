"""Recording: what the dispatch tells the observers after an op ran.

An op is recorded on a tape when one of its inputs is tracked by that tape (watched, or
produced by an op it recorded), exactly TensorFlow's rule, so nested tapes each record only
what they watch. A tape is a set of tracked ids plus its node list in recording order;
tensors know nothing of tapes, so ``del tape`` frees everything it saved. Besides the tapes,
the observers of this thread (:class:`gputape.core.state.Observers`) get their hooks here: the
gt.function trace, check_numerics, the stop_recording markers, the variable-read watchers.

Tapes are reached through their fields (``_tensors``, ``_nodes``, ``_edges``, ``_broken``,
``_auto``, ``_watch_variable``): this layer sits below :mod:`gputape.core.tape`, which defines them.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

from . import state as _state
from ._generate import generate
from .primitive import _NOPARAMS, _NOSAVED, DIFF_DTYPES, Node, Primitive, _complex_node
from .state import tls as _tls
from .tensor import FLOAT_DTYPES, Tensor, Variable, _new

_ndarray = np.ndarray

def _where() -> str | None:
    """The user's ``file:line`` that called into gputape (the first frame outside it)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        if name != "gputape" and not name.startswith("gputape."):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return None


def _note_edge(tape: Any, name: str, args: tuple, res: Any) -> None:
    """An op ran inside the tape on values it does not track: keep the edge for explain()."""
    ids = tuple(a._id for a in args if isinstance(a, Tensor))
    for o in (res,) if isinstance(res, Tensor) else res:
        tape._edges[o._id] = (name, ids)


def _note_untracked(tapes: tuple, name: str, args: tuple, res: Any) -> None:
    """An op with an integer/bool result (comparison, argmax, cast to int) ran inside tapes.

    Nothing is recorded (no gradient flows through it), but its inputs were read: a trainable
    Variable among them is watched (TensorFlow watches on every read, whatever the op), and
    the cut is marked so that explain() names this op instead of saying "not watched".
    """
    where = None
    ids = tuple(a._id for a in args if isinstance(a, Tensor))
    for tape in tapes:
        tt = tape._tensors
        hit = False
        for a in args:  # no short-circuit: every trainable Variable read here is watched
            if isinstance(a, Tensor) and (a._id in tt or _watch_on_read(tape, a)):
                hit = True
        if hit:
            if where is None:
                where = _where()
            for o in (res,) if isinstance(res, Tensor) else res:
                tape._broken[o._id] = ("non_differentiable_op", name, where, ids)
        else:
            _note_edge(tape, name, args, res)


def traced(fn: Callable[..., Any], args: tuple, out: Any, pure: bool = False) -> None:
    """Tell a running ``gt.function`` trace that ``out = fn(*args)`` just ran on arrays.

    Code that computes arrays outside the primitives (comparisons, random draws,
    the gradient's final reshapes) calls this so that replays recompute ``out``
    instead of freezing the traced value. ``pure``: ``fn`` is device array work
    only (a CUDA graph may capture it). A no-op when nothing is being traced.
    """
    obs = _tls.obs
    if obs is not None and obs.trace is not None:
        obs.trace.call(fn, args, out, pure)


def note_nondiff(name: str, args: tuple, res: Tensor) -> None:
    """Hook for ops outside the registry that return integer/bool results (comparisons, argmax)."""
    obs = _tls.obs
    if obs is None:
        return
    if obs.debug:
        _debug_hook(obs, None, args, res)
    if obs.watchers:  # a custom_gradient forward collects every variable read, as an op's would be
        _note_reads(obs, args)
    if obs.tapes:
        _note_untracked(obs.tapes, name, args, res)


def integer_result(name: str, fn: Callable[..., Any], args: tuple, res: Tensor, operands: tuple | None = None) -> None:
    """An op outside the registry made ``res`` (integer or bool: no gradient) with ``fn(*args)``.

    A running gt.function trace is told (``pure``: replays recompute it from each call's values),
    and so are the tapes and debug observers (:func:`note_nondiff`, with ``operands``, the inputs
    that are tensors, defaulting to ``args``). Costs one attribute read outside every tape.
    """
    if _state.anywhere:
        obs = _tls.obs
        if obs is not None:
            if obs.trace is not None:
                obs.trace.call(fn, args, res._data, True)
            note_nondiff(name, args if operands is None else operands, res)


def _debug_hook(obs: _state.Observers, prim: Primitive | None, args: tuple, res: Any) -> None:
    """check_numerics' forward check and stop_recording's markers (only while they are on)."""
    if obs.numerics and prim is not None:
        obs.numerics.check_forward(prim, args, res)
    if obs.placement is not None and prim is not None:
        obs.placement.op(prim.name, res)
    paused = obs.paused
    if paused:
        where = None
        for tape in paused:
            tt = tape._tensors
            ids = tuple(a._id for a in args if isinstance(a, Tensor))
            if any(i in tt or i in tape._broken for i in ids):
                if where is None:
                    where = _where()
                for o in (res,) if isinstance(res, Tensor) else res:
                    tape._broken[o._id] = ("stop_recording", prim.name if prim else "op", where, ids)


def _watch_on_read(tape: Any, t: Tensor) -> bool:
    """A trainable Variable read while ``tape`` records is watched by it (TensorFlow's rule)."""
    return type(t) is Variable and tape._auto and t._trainable and tape._watch_variable(t)


# Watching a Variable: its id tracked, a leaf, and listed (watched_variables() sorts the list into
# creation order when asked, so a read does no more work). GradientTape's
# _watch_variable (watch(), reads outside ops) is generated from these statements, and the
# recorders write them out for an operand {v} read while ``tape`` records (TensorFlow's rule:
# a trainable Variable is watched on its first read), with ``tt``, the tape's set, in scope.
_WATCH = """\
tt.add({v}._id)
tape._leaves.add({v}._id)
tape._watched_vars.setdefault({v}._id, {v})
"""
_WATCH_ON_READ = """\
if type({v}) is Variable and {v}._id not in tt and tape._auto and {v}._trainable and {v}._data.dtype in DIFF_DTYPES:
{watch}"""

watch_variable = generate(
    "watch_variable",
    f"""
def watch_variable(tape, var):
    if var._data.dtype not in DIFF_DTYPES:
        return False
    tt = tape._tensors
    if tt is None:  # (watch() before the tape was entered)
        tt = tape._store()
    if var._id not in tt:
{textwrap.indent(_WATCH.format(v="var"), " " * 8)}    return True
""",
    {"DIFF_DTYPES": DIFF_DTYPES},
)


def _watch_text(v: str, indent: int) -> str:
    """The recorders' :data:`_WATCH_ON_READ` for operand ``v``, indented ``indent`` spaces."""
    text = _WATCH_ON_READ.format(v=v, watch=textwrap.indent(_WATCH.format(v=v), "    "))
    return textwrap.indent(text, " " * indent)


def _hooks(obs: _state.Observers, prim: Primitive, args: tuple, res: Tensor) -> None:
    """The observers besides the tapes, for the generated recorders (only while one is on)."""
    if obs.trace is not None:
        obs.trace.forward1(prim, args, res)
    if obs.debug:
        _debug_hook(obs, prim, args, res)
    if obs.watchers:
        _note_reads(obs, args)


# The recorders, generated per primitive from one head and one tail with its saved residuals
# baked in: for any operands (recorder_n: apply() and custom_gradient call it), and written out
# inside the generated entry points of one or two operands without parameters (recorder1,
# recorder2). One node layout (Node) for all of them.

# the start of every recorder: the other observers, then only floating and complex results
_HEAD = """\
    if obs.hooks:
        {hooks}
    tapes = obs.tapes
    if not tapes:
        return{ret}
    d = {first}._data
    dt = d.dtype
    cplx = dt not in FLOAT_DTYPES  # (one set lookup; complex is the rare case)
    if cplx and dt.kind != "c":
        note_untracked(tapes, NAME, {args}, res)  # integer and bool results carry no gradient
        return{ret}
"""

# the end of every recorder: the node's residuals, output and location, then on the tape
_TAIL = """\
            node.casts = casts
            node.saved = {saved}
            node.out = {out}
            node.meta = {meta}
            node.info = (where(), {shape}, dt) if obs.locations else None
            if casts is not None or cplx:
                complex_node(node, dt)
        tape._nodes.append(node)
        {track}
"""
# a primitive's outputs as the tail records them: one Tensor, or a list of them (nout > 1)
_ONE_OUT = {"first": "res", "out": "res._id", "meta": "({shape}, dt)", "track": "tt.add(res._id)"}
_OUTS = {
    "first": "res[0]",
    "out": "tuple([o._id for o in res])",
    "meta": "tuple([(o._data.shape, o._data.dtype) for o in res])",
    "track": "tt.update([o._id for o in res])",
}

_RECORD1 = """
def record(obs, x, res):
{head}    node = None
    xid = x._id
    for tape in tapes:
        tt = tape._tensors
{watch_x}        if xid not in tt:
            tape._edges[res._id] = (NAME, (xid,))
            continue
        if node is None:
            xd = x._data
            node = new(Node)
            node.prim = prim
            node.params = NOPARAMS
            node.ids = (xid,)
            shape = xd.shape  # an elementwise primitive: the output has this shape too
            node.shapes = (shape,)
            casts = None if xd.dtype is dt else (xd.dtype,)
{tail}"""

_RECORD2 = """
def record(obs, x, y, res):
{head}    xt = isinstance(x, Tensor)
    yt = isinstance(y, Tensor)
    node = None
    for tape in tapes:
        tt = tape._tensors
        # (a trainable Variable on either side is watched, whatever the other side)
{watch_x}{watch_y}        hx = xt and x._id in tt
        hy = yt and y._id in tt
        if not (hx or hy):
            note_edge(tape, NAME, (x, y), res)
            continue
        if node is None:
            node = new(Node)
            node.prim = prim
            node.params = NOPARAMS
            casts = None
            if xt:
                xd = x._data
                if xd.dtype is not dt:
                    casts = [xd.dtype, None]
                if yt:
                    yd = y._data
                    if yd.dtype is not dt:
                        casts = [casts[0] if casts else None, yd.dtype]
                    node.ids = (x._id, y._id)
                    node.shapes = (xd.shape, yd.shape)
                else:
                    yd = y
                    node.ids = (x._id, 0)
                    node.shapes = (xd.shape, None)
            else:
                yd = y._data
                xd = x
                if yd.dtype is not dt:
                    casts = [None, yd.dtype]
                node.ids = (0, y._id)
                node.shapes = (None, yd.shape)
{tail}"""


_RECORDN = """
def record(obs, args, params, res, datas):
{head}    node = None
    for tape in tapes:
        tt = tape._tensors
        hit = False
        for a in args:  # no short-circuit: every trainable Variable read here is watched
{watch_a}            if isinstance(a, Tensor) and a._id in tt:
                hit = True
        if tape._exports:
            note_exported_operands(tape, args, res)
        if not hit:
            note_edge(tape, NAME, args, res)
            continue
        if node is None:
            node = new(Node)
            node.prim = prim
            node.params = params
            casts = None
            ids = []
            shapes = []
            consts = datas if datas is not None else args
{saved0}            k = 0
            for a in args:
                if isinstance(a, Tensor):
                    x = a._data
                    ids.append(a._id)
                    shapes.append(x.shape)
                    if x.dtype is not dt:
                        if casts is None:
                            casts = [None] * len(args)
                        casts[k] = x.dtype{save_t}
                else:
                    ids.append(0)  # ids start at 1: 0 is never tracked
                    shapes.append(None){save_c}
                k += 1
            node.ids = tuple(ids)
            node.shapes = tuple(shapes)
{tail}"""


def _hooks_n(obs: _state.Observers, prim: Primitive, args: tuple, params: dict, res: Any, datas: Any) -> None:
    """The observers besides the tapes, for the recorders of :func:`recorder_n`."""
    if obs.trace is not None:
        obs.trace.forward(prim, args, params, datas, res)
    if obs.debug:
        _debug_hook(obs, prim, args, res)
    if obs.watchers:
        _note_reads(obs, args)


def _saved_n(prim: Primitive) -> dict[str, str]:
    """The residual list ``prim`` declares, as source (Tensor data; constants owned; ``outs``: the
    outputs' arrays).

    Every operand (``save=True``) is collected in the loop over the operands, without a second
    pass; a slice or positions are picked after it.
    """
    s = prim.save
    out = ("[d]" if prim.nout == 1 else "[o._data for o in res]") if prim.save_out else None
    if s is True:
        parts = {
            "saved0": "            saved = []\n",
            "save_t": "\n                    saved.append(x)",
            "save_c": "\n                    saved.append(own(consts[k]))",
        }
        parts["saved"] = f"saved + {out}" if out else "saved"
        return parts
    parts = {"saved0": "", "save_t": "", "save_c": ""}
    if type(s) is slice:
        picked = "[args[i]._data if isinstance(args[i], Tensor) else own(consts[i]) for i in range(len(args))[SAVE]]"
    elif s:
        picked = "[" + ", ".join(f"args[{i}]._data if isinstance(args[{i}], Tensor) else own(consts[{i}])" for i in s)
        picked += "]"
    else:
        picked = None
    if picked is None:
        parts["saved"] = out or "NOSAVED"
    else:
        parts["saved"] = f"{picked} + {out}" if out else picked
    return parts


def recorder_n(prim: Primitive) -> Callable[..., None]:
    """``record(obs, args, params, res, datas)`` for :func:`gputape.core.dispatch.apply` of ``prim`` (``res``:
    its output, or the list of its outputs), with the declared residuals baked in; ``datas``: the
    operands as the forward took them (None: ``args``)."""
    parts = _saved_n(prim)
    hooks = "hooks(obs, prim, args, params, res, datas)"
    return _generate(prim, _RECORDN, "args", "d.shape", hooks, _hooks_n, parts.pop("saved"), **parts)


def _saved_text(prim: Primitive, operands: tuple[str, ...]) -> str:
    """The residual list a primitive declares, as source over the operand names and ``d`` (the output)."""
    s = prim.save
    if s is True:
        names = list(operands)
    elif type(s) is slice:
        names = list(operands[s])
    else:
        names = [operands[i] for i in s]
    if prim.save_out:
        names.append("d")
    return f"[{', '.join(names)}]" if names else "NOSAVED"


def _generate(
    prim: Primitive,
    template: str,
    args: str,
    shape: str,
    hooks: str,
    hooks_fn: Any,
    saved: str,
    inline: bool = False,
    **parts: str,
) -> Any:
    """One recorder of ``prim`` from ``template`` with its head and tail filled in.

    ``args``: the source of the operand tuple; ``shape``: of the output's shape; ``hooks``: the
    call of ``hooks_fn`` for the other observers; ``saved``: of the residual list. With ``inline``,
    the recorder's body and namespace, for an entry point that records where it computed ``res``
    (its early exits return ``res``).
    """
    ns = {
        "prim": prim,
        "NAME": prim.name,
        "Node": Node,
        "Tensor": Tensor,
        "Variable": Variable,
        "FLOAT_DTYPES": FLOAT_DTYPES,
        "DIFF_DTYPES": DIFF_DTYPES,
        "NOPARAMS": _NOPARAMS,
        "NOSAVED": _NOSAVED,
        "SAVE": prim.save,
        "new": _new,
        "own": _own,
        "hooks": hooks_fn,
        "note_untracked": _note_untracked,
        "note_edge": _note_edge,
        "note_exported_operands": _note_exported_operands,
        "where": _where,
        "complex_node": _complex_node,
    }
    outs = _ONE_OUT if prim.nout == 1 else _OUTS
    head = _HEAD.format(hooks=hooks, args=args, ret=" res" if inline else "", first=outs["first"])
    meta = outs["meta"].format(shape=shape)
    tail = _TAIL.format(saved=saved, shape=shape, out=outs["out"], meta=meta, track=outs["track"])
    watched = {"watch_x": _watch_text("x", 8), "watch_y": _watch_text("y", 8), "watch_a": _watch_text("a", 12)}
    src = template.format(head=head, tail=tail, **watched, **parts)
    if inline:
        return src.split("\n", 2)[2], ns  # (after the blank line and the def line)
    return generate("record", src, ns)


def recorder1(prim: Primitive) -> tuple[str, dict[str, Any]]:
    """The recording of a generated one-operand entry point of ``prim``: the body of ``record(obs,
    x, res)`` and its namespace, which the entry point writes out after its forward."""
    hooks = "hooks(obs, prim, (x,), res)"
    return _generate(prim, _RECORD1, "(x,)", "shape", hooks, _hooks, _saved_text(prim, ("xd",)), inline=True)


def recorder2(prim: Primitive) -> tuple[str, dict[str, Any]]:
    """The recording of a generated two-operand entry point of ``prim`` (:func:`recorder1`'s form:
    the body of ``record(obs, x, y, res)`` and its namespace); a Python-number operand is saved
    as the number."""
    saved = _saved_text(prim, ("xd", "yd"))
    hooks = "hooks(obs, prim, (x, y), res)"
    return _generate(prim, _RECORD2, "(x, y)", "d.shape", hooks, _hooks, saved, inline=True)


def _note_exported_operands(tape: Any, args: tuple, res: Any) -> None:
    """An op took an exported array as a raw operand: the path through it left the tape."""
    for a in args:
        if a is not None and not isinstance(a, (Tensor, int, float)):
            for tid, where, _, arr in tape._exports:
                if a is arr:
                    for o in (res,) if isinstance(res, Tensor) else res:
                        tape._broken[o._id] = ("left_tape", "numpy", where, (tid,))


def _note_reads(obs: _state.Observers, args: tuple) -> None:
    for a in args:
        if type(a) is Variable:
            for w in obs.watchers:
                w.setdefault(a._id, a)


def _own(a: Any) -> Any:
    """A raw array operand is copied when saved: the caller may refill its buffer
    before gradient() runs, and the gradient must use the value the op saw."""
    if type(a) is _ndarray or (hasattr(a, "copy") and hasattr(a, "shape") and not isinstance(a, np.generic)):
        b = a.copy()
        obs = _tls.obs
        if obs is not None and obs.trace is not None:  # (as traced(): a replay copies it too)
            obs.trace.call(_copy, (a,), b, True)
        return b
    return a


def _copy(a: Any) -> Any:
    return a.copy()


def saved_nbytes(d: Any) -> int:
    """The bytes a residual keeps alive: an array its nbytes, a number none.

    >>> import numpy as np
    >>> saved_nbytes(np.zeros(3, np.float32)), saved_nbytes(0.5)
    (12, 0)
    """
    return int(getattr(d, "nbytes", 0))


def _nbytes_saved(nodes: list[Node]) -> int:
    seen: set[int] = set()
    total = 0
    for node in nodes:
        if type(node) is not Node:
            continue
        for d in node.saved or ():
            if hasattr(d, "nbytes") and id(d) not in seen:
                seen.add(id(d))
                total += saved_nbytes(d)
    return total
