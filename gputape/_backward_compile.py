"""A tape that compiles its own backward: the sweep of a structure seen before, as straight-line code.

An eager training loop records the same ops on the same shapes every step, and the sweep
(``gputape.tape._sweep``) then pays its Python bookkeeping per node every step: the dict of
gradients, the relevance and "needed" tests, the VJP call, the shape test. Here
:func:`gradients` computes a cheap **structural key** of the tape (one pass over its nodes) and,
the second time it sees a key, generates Python source for that structure, ``exec``'d once, that
runs exactly the operations the sweep would run, in the same order, with every decision the sweep
takes from the structure already taken:

* each node, last to first, that the sweep would visit: its residuals read from the node, its
  VJP (a primitive declared in :mod:`gputape.expr` has its derivative expression written inline,
  the very text its generated VJP evaluates; any other VJP is called as the sweep calls it), the
  reduction of broadcast dimensions (``F.sum_to``; where the key fixes the cotangent's shape, as
  for an elementwise node's, the steps of :func:`~gputape.backward.sum_to_plan` written out: the
  same numpy calls) and the cast back to the input's dtype, then the accumulation ``prev + gi``
  in the sweep's order. So the result is bitwise equal to the sweep's on the CPU.
* gradients live in local variables instead of a dict; those the structure alone cannot decide
  (a VJP other than a declared one may return None: ``custom_gradient``'s grad_fn, say) are
  tested at run time exactly as the sweep tests them.
* a non-persistent tape's nodes are replaced by their residual-free skeletons as the sweep
  replaces them (the residuals are freed at the same points, and ``explain()`` after
  ``gradient()`` walks the same skeleton); a persistent tape's nodes are only read.

The key holds exactly what the generated text depends on: each node's VJP function (so the
profiler's timing wrappers, or a complex node's VJP, give another key), input shapes (baked into
the ``sum_to`` tests), casts (the dtypes cotangents are converted to), the wiring as positions
(each tensor id replaced by the order of its first appearance) with each position's relevance
(does a cotangent flow to it: the sweep's ``rel``), the seeds' and sources' positions, the array
module (device kind) and ``persistent``. Nothing else is: the generated code reads parameters
from the node at run time, as the VJPs do (so ``custom_gradient``'s per-call ``grad_fn`` does not
defeat the cache); it holds no dtype but the casts' (a float32 and a float64 run of one structure
run the same text, as they run the same VJPs); and each node's own residuals are passed to its
VJP, whatever they alias (the same array saved by two nodes, or two equal arrays). A CUDA-graph
form would have to add dtypes and the residuals' addresses.

Falls back to the sweep whenever the compiled form is not known to be identical, counted by
reason in :func:`backward_cache_report`: a tape records the gradient computation (higher order),
a ``gt.function`` trace or ``check_numerics`` observes the sweep, the tape or the process opted
out, the tape was already swept, no source was recorded, a tape of over :data:`MAX_NODES` nodes.
``jacobian``/``batch_jacobian`` always use the sweep.

>>> import gputape as gt
>>> was = gt.config.get_backward_compilation(); gt.config.set_backward_compilation(True)
>>> gt.debug.clear_backward_cache()
>>> x = gt.constant([1.0, 2.0])
>>> for _ in range(3):
...     with gt.GradientTape() as tape:
...         tape.watch(x)
...         y = gt.sum(gt.tanh(x) * x)
...     g = tape.gradient(y, x)
>>> r = gt.debug.backward_cache_report()
>>> r["misses"], r["compiles"], r["hits"]
(2, 1, 1)
>>> gt.config.set_backward_compilation(was)
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _backward_graph, _state, config
from . import expr as _expr
from ._state import tls as _tls
from .backward import _sweep
from .backward import sum_to_plan as _sum_to_plan
from .primitive import Node

_log = logging.getLogger("gputape")

CACHE_SIZE = 64  # compiled structures kept (least recently used evicted); read at each insertion
MAX_NODES = 20_000  # larger tapes stay on the sweep: generating and compiling their source costs more

_ABSENT, _YES, _MAYBE = 0, 1, 2  # what the code generator knows of a gradient variable

_cache: dict[tuple, Callable[..., tuple]] = {}  # each function's ``used`` stamp orders the LRU eviction
_uses = itertools.count()  # the stamps (a hit that moved its key in an OrderedDict hashed the key again)
_seen: OrderedDict[tuple, None] = OrderedDict()  # keys seen once: compiled at the second sight
_last: tuple[Any, Any] = (None, None)  # (key, function) of the latest hit or compile, compared before _cache is asked
_lock = threading.Lock()
_counts = {"hits": 0, "misses": 0, "compiles": 0, "evictions": 0}
_fallbacks: dict[str, int] = {}


def gradients(tape: Any, seeds: dict[int, Any], source_ids: list[int], diff: bool, F: Any) -> list | tuple:
    """The sweep's result (:func:`gputape.backward._sweep`), from compiled code when the structure was seen before:
    the gradient (or None) of each of ``source_ids``, in their order (what the compiled code returns, so a hit
    builds no dict).

    ``F`` is the VJPs' namespace, as for the sweep (the tape, above the ops, passes it).
    """
    if not (tape._compile and config._compile_backward):
        return _fallback("opted_out", tape, seeds, source_ids, diff, F)
    if diff:
        return _fallback("recording_gradient", tape, seeds, source_ids, diff, F)
    obs = _tls.obs
    if obs is not None and (obs.trace is not None or obs.numerics):
        why = "gt.function_trace" if obs.trace is not None else "check_numerics"
        return _fallback(why, tape, seeds, source_ids, diff, F)
    if _state.profiler is not None:  # the sweep times each VJP for it
        return _fallback("profiler", tape, seeds, source_ids, diff, F)
    xp = F.xp
    found = _structure(tape, seeds, source_ids, xp)
    if type(found) is str:
        return _fallback(found, tape, seeds, source_ids, diff, F)
    global _last
    key = found[0]
    last = _last
    fn = last[1] if key == last[0] else _cache.get(key)  # (a loop's tapes: one compare, no hash of the key)
    if fn is not None:
        if fn is not last[1]:
            _last = (key, fn)
        _counts["hits"] += 1
        fn.used = next(_uses)  # type: ignore[attr-defined]
        # on a GPU, from one CUDA graph of fn where the tape may replay it (gputape._backward_graph)
        return _backward_graph.run(fn, tape, list(seeds.values()))
    _counts["misses"] += 1
    if key not in _seen:
        _remember(_seen, key, None)
        return _swept(tape, seeds, source_ids, diff, F)
    slot, rel = found[1], found[2]
    try:
        fn = _generate(tape, seeds, source_ids, F, slot, rel)
    except Exception:  # a generator bug must not cost the user a gradient: the sweep answers
        _log.exception("gputape: compiling a backward failed; the sweep computes this gradient")
        return _fallback("compile_error", tape, seeds, source_ids, diff, F)
    _counts["compiles"] += 1
    _seen.pop(key, None)
    fn.used = next(_uses)  # type: ignore[attr-defined]
    _remember(_cache, key, fn)
    if _cache.get(key) is fn:  # (kept: a cache of size 0 keeps nothing)
        _last = (key, fn)
    return fn(tape._nodes, list(seeds.values()))


def _fallback(why: str, tape: Any, seeds: dict, source_ids: list, diff: bool, F: Any) -> list:
    _fallbacks[why] = _fallbacks.get(why, 0) + 1
    return _swept(tape, seeds, source_ids, diff, F)


def _swept(tape: Any, seeds: dict, source_ids: list, diff: bool, F: Any) -> list:
    grads = _sweep(tape, seeds, source_ids, diff, F)
    return [grads.get(i) for i in source_ids]


def _remember(table: dict, key: tuple, value: Any) -> None:
    global _last
    with _lock:
        table[key] = value
        while len(table) > max(int(CACHE_SIZE), 0):
            if table is _cache:  # the least recently used function
                k = min(table, key=lambda k: table[k].used)
                if _last[1] is table.pop(k):
                    _last = (None, None)
                _counts["evictions"] += 1
            else:  # the oldest sight
                table.popitem(last=False)  # type: ignore[call-arg]


def _structure(tape: Any, seeds: dict, source_ids: list, xp: Any) -> tuple | str:
    """(key, position of each id, the ids a cotangent flows to), or why there is none.

    The relevance is the sweep's ``rel``, computed the way the sweep computes it.
    """
    nodes = tape._nodes
    if len(nodes) > MAX_NODES:
        return "too_many_nodes"
    tt = tape._tensors
    keep = set(source_ids)
    if tape._leaves <= keep:
        rel = tt
        forward = False
    else:
        rel = {i for i in source_ids if i in tt}
        if not rel:
            return "no_source_recorded"  # (the sweep answers with the seeds alone)
        forward = True
    slot: dict[int, int] = {}
    get = slot.get
    key: list[Any] = [xp, tape._persistent, forward]
    ap = key.append
    nxt = 0  # positions in order of first appearance; ~position: no cotangent flows there
    for n in nodes:
        if type(n) is not Node:  # a swept record: its residuals are gone
            return "already_swept"
        hit = False
        for i in n.ids:
            s = get(i)
            if s is None:
                s = slot[i] = nxt
                nxt += 1
            if i in rel:
                hit = True
            else:
                s = ~s
            ap(s)
        out = n.out
        if type(out) is int:
            slot[out] = nxt
            if forward and hit:
                rel.add(out)
            ap(nxt if out in rel else ~nxt)
            nxt += 1
        else:
            outs = []
            for o in out:
                slot[o] = nxt
                if forward and hit:
                    rel.add(o)
                outs.append(nxt if o in rel else ~nxt)
                nxt += 1
            ap(tuple(outs))
        ap(n.prim.vjp)
        ap(n.shapes)  # (its length delimits the next node's entries)
        c = n.casts
        if c is not None:
            ap(tuple(c))  # (a tuple where the next node starts with an int)
    for marker, ids in (("seeds", seeds), ("sources", source_ids)):
        ap(marker)
        for i in ids:
            s = get(i)
            if s is None:
                s = slot[i] = nxt
                nxt += 1
            ap(s)
    return tuple(key), slot, rel




class _Writer:
    """The generated function's lines, indentation, constants and gradient variables' states."""

    def __init__(self) -> None:
        self.lines = ["def backward(N, S):"]
        self.ns: dict[str, Any] = {}
        self.state: dict[int, int] = {}
        self.depth = 1

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def const(self, name: str, value: Any) -> str:
        self.ns[name] = value
        return name

    def literal(self, table: Any) -> str:
        """The name of a literal's dtype table (:func:`gputape.expr.literal`) in the generated code."""
        return self.const(table.name, table)

    def accumulate(self, s: int, t: str) -> None:
        """``grads[i] = gi if prev is None else prev + gi``, with what is known of prev."""
        st = self.state.get(s, _ABSENT)
        if st == _YES:
            self.emit(f"g{s} = g{s} + {t}")
        elif st == _MAYBE:
            self.emit(f"g{s} = {t} if g{s} is None else g{s} + {t}")
        else:
            self.emit(f"g{s} = {t}")
            self.state[s] = _YES


def _literal(shape: Any) -> str | None:
    if type(shape) is tuple and all(type(d) is int for d in shape):
        return repr(shape)
    return None


def _generate(tape: Any, seeds: dict, source_ids: list, F: Any, slot: dict, rel: Any) -> Callable[..., tuple]:
    """Compile the sweep of this tape's structure (the sweep's loop, its decisions taken here)."""
    nodes = tape._nodes
    persistent = tape._persistent
    keep = {slot[i] for i in source_ids}
    w = _Writer()
    for j, i in enumerate(seeds):
        w.emit(f"g{slot[i]} = S[{j}]")
        w.state[slot[i]] = _YES
    inline_ok = getattr(F, "xp", None) is np
    for p in range(len(nodes) - 1, -1, -1):
        n = nodes[p]
        out = n.out
        outs = [out] if type(out) is int else list(out)
        oslots = [slot[o] for o in outs]
        states = [w.state.get(s, _ABSENT) for s in oslots]
        if all(st == _ABSENT for st in states):
            continue  # no cotangent reaches the node
        dead = [s for s in oslots if s not in keep and w.state.get(s, _ABSENT) != _ABSENT]
        if any(o in rel for o in outs):
            _node(w, p, n, outs, oslots, states, rel, slot, persistent, inline_ok)
        for s in dead:  # the sweep pops the cotangents it consumed (those of sources it keeps)
            w.emit(f"del g{s}")
            w.state[s] = _ABSENT
    rets = []
    for i in source_ids:
        s = slot[i]
        rets.append("None" if w.state.get(s, _ABSENT) == _ABSENT else f"g{s}")
    w.emit(f"return ({''.join(r + ', ' for r in rets)})")
    w.ns["F"] = F
    src = "\n".join(w.lines) + "\n"
    exec(compile(src, f"<gputape compiled backward of {len(nodes)} nodes>", "exec"), w.ns)
    fn = w.ns["backward"]
    fn.source = src  # type: ignore[attr-defined]
    return fn


def _node(
    w: _Writer,
    p: int,
    n: Any,
    outs: list,
    oslots: list,
    states: list,
    rel: Any,
    slot: dict,
    persistent: bool,
    inline_ok: bool,
) -> None:
    """One node's step of the sweep: skeleton, needs, VJP, fit and accumulation."""
    ids = n.ids
    needs = [i in rel for i in ids]
    decl = _expr.DERIVATIVES.get(n.prim.name)
    inline = inline_ok and decl is not None and decl.vjp is n.prim.vjp and len(outs) == 1
    single = type(n.out) is int
    if single:
        gexpr = f"g{oslots[0]}"
        test = f"g{oslots[0]} is not None" if states[0] == _MAYBE else None
    else:
        gexpr = "[" + ", ".join("None" if st == _ABSENT else f"g{s}" for s, st in zip(oslots, states)) + "]"
        test = None
        if _YES not in states:
            test = "not (" + " and ".join(f"g{s} is None" for s, st in zip(oslots, states) if st == _MAYBE) + ")"
    conditional = test is not None or not inline
    if conditional:
        # a gradient assigned only on some runs starts as None (the sweep's grads.get(i) is None)
        for k, i in enumerate(ids):
            s = slot[i]
            if needs[k] and w.state.get(s, _ABSENT) == _ABSENT:
                w.emit(f"g{s} = None")
                w.state[s] = _MAYBE
    if test is not None:
        w.emit(f"if {test}:")
        w.depth += 1
    w.emit(f"n = N[{p}]")
    if not persistent:
        w.emit(f"N[{p}] = (n.prim, n.ids, n.out, n.info)")  # the record explain() walks (primitive.records)
    if True not in needs:
        w.emit("pass")
    elif inline:
        names = {"g": gexpr, "F": "F", "node": "n"}
        ops = [f"a{j}" for j in range(len(decl.operands))]
        names.update({a: a for a in ops})
        if ops:
            w.emit(f"{', '.join(ops)}, = n.saved")
        temps = []
        tensors = tuple(sh is not None for sh in n.shapes)
        for k in range(len(ids)):
            if not needs[k]:
                continue
            # literals typed by their partner's dtype (gputape.expr.python_typed): the same bits
            text = decl.python_typed(k, names, tensors, w.literal)
            if text is not None:
                w.emit(f"t{k} = " + text)
                temps.append(k)
                # its temporaries are freed with the residuals, as the sweep frees its own
                ops += [t for t in sorted(set(_expr.TEMPORARIES.findall(text))) if t not in ops]
        if ops:
            w.emit(f"del {', '.join(ops)}")
        # An elementwise primitive whose operands are all tensors has the broadcast of their
        # shapes as its output, and so as its cotangent's shape: where an input has that shape
        # already, no reduction can be needed. (A constant operand's shape is not in the key: a
        # later tape's array constant may broadcast further, so those keep the run-time test.)
        known = None if None in n.shapes else _broadcast(n.shapes)
        for k in temps:
            _fit(w, p, k, n, slot[ids[k]], cotangent=known)
    else:
        vjp = w.const(f"V{p}", n.prim.vjp)
        if len(ids) <= 2:
            nd = repr(tuple(needs))
        else:
            nd = repr(needs)  # a fresh list each run, as the sweep makes one
        w.emit(f"r = {vjp}(F, {gexpr}, {nd}, 0, n, *n.saved)")
        for k in range(len(ids)):
            if needs[k]:
                w.emit(f"t{k} = r[{k}]")
                w.emit(f"if t{k} is not None:")
                w.depth += 1
                _fit(w, p, k, n, slot[ids[k]])
                w.depth -= 1
        w.emit("del r")
    if test is not None:
        w.depth -= 1


def _broadcast(shapes: tuple) -> tuple | None:
    """numpy's broadcast of ``shapes`` (None when they do not broadcast: nothing is assumed then)."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _fit(w: _Writer, p: int, k: int, n: Any, s: int, cotangent: tuple | None = None) -> None:
    """The sweep's reduction to the input's shape, cast to its dtype, and accumulation.

    ``cotangent``: the shape the cotangent has on every run (an elementwise node's output shape).
    Where it is the input's shape the sweep's test would always be false and is left out; where it
    differs, :func:`~gputape.backward.sum_to_plan`'s steps are written inline (the same numpy calls
    ``F.sum_to`` makes), behind a test of that shape which keeps the sweep's general path for any
    other shape.
    """
    shape = n.shapes[k]
    t = f"t{k}"
    if cotangent != shape:
        lit = _literal(shape) or w.const(f"H{p}_{k}", shape)
        general = f"{t} = F.sum_to({t}, {lit}, 0)"
        if cotangent is None or _literal(cotangent) is None:
            w.emit(f"if {t}.shape != {lit}: {general}")
        else:
            w.emit(f"if {t}.shape == {_literal(cotangent)}:")
            w.depth += 1
            w.emit(f"{t} = {_inline_sum_to(w, t, cotangent, shape)}")
            w.depth -= 1
            w.emit(f"elif {t}.shape != {lit}:")
            w.depth += 1
            w.emit(general)
            w.depth -= 1
    casts = n.casts
    if casts is not None and casts[k] is not None:
        w.emit(f"{t} = {t}.astype({w.const(f'C{p}_{k}', casts[k])})")
    w.accumulate(s, t)


def _inline_sum_to(w: _Writer, t: str, xs: tuple, shape: tuple) -> str:
    """``F.sum_to(t, shape, 0)`` for a ``t`` of shape ``xs``, on numpy arrays, as one expression.

    The raw namespace's ``F.sum`` is ``np.add.reduce`` for every dtype but bool (cotangents are
    floating or complex), ``F.reshape`` is ``np.reshape``, which calls the array's ``reshape``.
    """
    first, axes, then, widen = _sum_to_plan(xs, shape, 0)
    if first is not None:
        t = f"{t}.reshape({first!r})"
    if axes:
        t = f"{w.const('ADD_REDUCE', np.add.reduce)}({t}, axis={axes!r}, keepdims=True)"
    if then is not None:
        t = f"{t}.reshape({then!r})"
    if widen:
        t = f"F.broadcast_to({t}, {shape!r})"
    return t


# -- the user's view -------------------------------------------------------------------------------


def backward_cache_report() -> dict[str, Any]:
    """Counters of the compiled backward (``GradientTape.gradient`` on structures seen before).

    ``hits``: gradients computed by compiled code; ``misses``: structures not compiled yet (the
    sweep ran; the second sight compiles); ``compiles``; ``evictions`` (least recently used, past
    ``cached``'s bound ``capacity``); ``fallbacks``: gradients the sweep computed because the
    compiled form was not known to be identical, by reason. ``enabled`` is the process-wide
    switch (``gt.config.set_backward_compilation``, ``GPUTAPE_COMPILE_BACKWARD=0``).

    >>> import gputape as gt
    >>> sorted(gt.debug.backward_cache_report())
    ['cached', 'capacity', 'compiles', 'enabled', 'evictions', 'fallbacks', 'graphs', 'hits', 'misses']

    ``graphs``: the CUDA-graph replay of compiled backwards on a GPU (:func:`gputape._backward_graph.report`).
    """
    return {
        **_counts,
        "fallbacks": dict(_fallbacks),
        "cached": len(_cache),
        "capacity": CACHE_SIZE,
        "enabled": config._compile_backward,
        "graphs": _backward_graph.report(),
    }


def clear_backward_cache() -> None:
    """Forget every compiled backward and seen structure, and zero the counters.

    >>> import gputape as gt
    >>> gt.debug.clear_backward_cache(); gt.debug.backward_cache_report()["cached"]
    0
    """
    global _last
    with _lock:
        _cache.clear()
        _last = (None, None)
        _seen.clear()
        for k in _counts:
            _counts[k] = 0
        _fallbacks.clear()
    _backward_graph.clear()
