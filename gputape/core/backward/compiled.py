"""A tape that compiles its own backward: the sweep of a structure seen before, as straight-line code.

An eager training loop records the same ops on the same shapes every step, and the sweep
(``gputape.core.tape._sweep``) then pays its Python bookkeeping per node every step: the dict of
gradients, the relevance and "needed" tests, the VJP call, the shape test. Here
:func:`gradients` computes a cheap **structural key** of the tape (one pass over its nodes) and,
the second time it sees a key, generates Python source for that structure, ``exec``'d once, that
runs exactly the operations the sweep would run, in the same order, with every decision the sweep
takes from the structure already taken:

* each node, last to first, that the sweep would visit: its residuals read from the node, its
  VJP (a primitive declared in :mod:`gputape.core.expr` has its derivative expression written inline,
  the very text its generated VJP evaluates; any other VJP is called as the sweep calls it), the
  reduction of broadcast dimensions (``F.sum_to``; where the key fixes the cotangent's shape, as
  for an elementwise node's, the steps of :func:`~gputape.core.backward.sweep.sum_to_plan` written out: the
  same numpy calls) and the cast back to the input's dtype, then the accumulation ``prev + gi``
  in the sweep's order. So the result is bitwise equal to the sweep's on the CPU.
* gradients live in local variables instead of a dict; those the structure alone cannot decide
  (a VJP other than a declared one may return None: ``custom_gradient``'s grad_fn, say) are
  tested at run time exactly as the sweep tests them.
* a non-persistent tape's nodes are replaced by their residual-free skeletons as the sweep
  replaces them (the residuals are freed at the same points, and ``explain()`` after
  ``gradient()`` walks the same skeleton); a persistent tape's nodes are only read.

The key is the generator's only input (:func:`_structure` writes it, :func:`_generate` compiles
from it and reads no tape), so what the generated text specialises on is in the key by
construction; it also holds what the sweep's result depends on that the text does not bake in:
the dtypes every VJP meets (the casts', each array residual's, the seeds') and the seeds' array
types, shapes and devices. What stays out is read at run time by the same VJPs on both paths
(parameters, residual values: ``custom_gradient``'s per-call ``grad_fn`` does not defeat the
cache) or applied after both (``unconnected_gradients``). Each node's own residuals are passed to
its VJP, whatever they alias (the same array saved by two nodes, or two equal arrays).
``tests/test_backward_compile_property.py`` runs random programs through both.

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

from ... import config
from ...devices import backend as _backend
from .. import expr as _expr
from .. import state as _state
from ..primitive import Node
from ..state import tls as _tls
from . import cuda_graph as _backward_graph
from .sweep import _sweep
from .sweep import sum_to_plan as _sum_to_plan

_ndarray = np.ndarray

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
    """The sweep's result (:func:`gputape.core.backward.sweep._sweep`), from compiled code when the
    structure was seen before: the gradient (or None) of each of ``source_ids``, in their order
    (what the compiled code returns, so a hit builds no dict).

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
    found = _structure(tape, seeds, source_ids, F)
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
        # on a GPU, from one CUDA graph of fn where the tape may replay it (gputape.core.backward.cuda_graph)
        return _backward_graph.run(fn, tape, list(seeds.values()))
    _counts["misses"] += 1
    if key not in _seen:
        _remember(_seen, key, None)
        return _swept(tape, seeds, source_ids, diff, F)
    try:
        fn = _generate(key, F)
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


def _structure(tape: Any, seeds: dict, source_ids: list, F: Any) -> tuple | str:
    """(key, position of each id, the ids a cotangent flows to), or why there is none.

    The key is the **description** the generator compiles (:func:`_generate` reads nothing else,
    through :func:`_entries`, so whatever the generated code specialises on is in the key by
    construction) and everything else the sweep's result depends on: the dtypes its VJPs meet and
    the seeds. One flat tuple (a tuple per node made the key cost about twice as much):

    * ``xp, persistent, forward``: the array module of the VJPs' namespace ``F`` (it decides
      inlining; the device kind), and whether relevance needed the forward pass over ids;
    * per node, in tape order: its VJP function (so the profiler's wrappers, or a complex node's
      VJP, give another key), its inputs' shapes (None: a constant operand), its inputs' and
      outputs' positions (each id replaced by the order of its first appearance; ``~position``
      where no cotangent flows: the sweep's relevance), its casts where it has any (a tuple of
      ``(input, dtype)`` pairs), then one entry per residual: its dtype for an array (the device's,
      or numpy's), else ``(its type,)``;
    * ``_SEEDS``, then per seed its position, array type, shape, dtype and device (None on the
      host): ``output_gradients`` arrive here, checked and cast against their target by ``gradient``;
    * ``_SOURCES``, then the sources' positions (repeated and intermediate sources included).

    Each entry's role follows from the entries before it and its own form (:func:`_entries` reads
    them back so), so two keys compare entries of one role while they agree, and the first entries
    that differ in role differ in form too; a dtype is never compared with what numpy would take
    for one (a numpy dtype equals ``None``, ``float`` and ``'float64'``: the casts ``(None, f8)``
    and ``(f8, None)`` once compared equal and let a structure compiled for other casts answer).

    Not in the key, because neither the sweep nor the generated code decides anything from them:
    parameters and residual values (read from the node at run time by the same VJPs on both
    paths), ``unconnected_gradients`` (applied to the result by ``gradient``, after either),
    nesting (a tape recording the gradient takes the sweep).
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
    arr = type(next(iter(seeds.values())))  # the device's array type: its residuals have a dtype
    slot: dict[int, int] = {}
    get = slot.get
    key: list[Any] = [F.xp, tape._persistent, forward]
    ap = key.append
    nxt = 0  # positions in order of first appearance; ~position: no cotangent flows there
    for n in nodes:
        if type(n) is not Node:  # a swept record: its residuals are gone
            return "already_swept"
        ap(n.prim.vjp)
        ap(n.shapes)  # (its length is the number of inputs that follow)
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
        c = n.casts
        if c is not None:  # (no entry without casts: most nodes)
            ap(tuple([(k, d) for k, d in enumerate(c) if d is not None]))
        for v in n.saved:
            ap(v.dtype if type(v) is arr else _residual(v))
    ap(_SEEDS)
    for i, g in seeds.items():
        s = get(i)
        if s is None:
            s = slot[i] = nxt
            nxt += 1
        ap(s)
        ap(type(g))
        ap(g.shape)
        ap(g.dtype)
        ap(None if type(g) is _ndarray else _backend.device_of(g))
    ap(_SOURCES)
    for i in source_ids:
        s = get(i)
        if s is None:
            s = slot[i] = nxt
            nxt += 1
        ap(s)
    return tuple(key), slot, rel


def _residual(v: Any) -> Any:
    """A residual's entry in the key where it is not an array of the seeds' type: a host array's dtype
    (an index beside device arrays), else ``(its type,)`` (a tuple: never equal to a dtype)."""
    return v.dtype if type(v) is _ndarray else (type(v),)


_SEEDS, _SOURCES = "seeds", "sources"  # the key's section markers (strings: never a node's first entry, a VJP)


def _is_casts(entry: Any) -> bool:
    """Whether a node's entry after its outputs is its casts (a tuple of ``(input, dtype)`` pairs, maybe
    empty) rather than its first residual's (a dtype, or a 1-tuple holding a type)."""
    return type(entry) is tuple and (not entry or type(entry[0]) is tuple)


def _entries(key: tuple) -> tuple[Any, bool, list[tuple], list[int], list[int]]:
    """:func:`_structure`'s key read back: ``(xp, persistent, nodes, seed positions, source positions)``,
    each node as ``(inputs, outputs, vjp, shapes, casts as {input: dtype})``."""
    xp, persistent = key[0], key[1]
    nodes = []
    i = 3
    while key[i] is not _SEEDS:
        vjp, shapes = key[i], key[i + 1]
        m = len(shapes)
        ins = key[i + 2 : i + 2 + m]
        out = key[i + 2 + m]
        i += 3 + m
        casts: Any = ()
        if _is_casts(key[i]):
            casts = key[i]
            i += 1
        while type(key[i]) is tuple or isinstance(key[i], np.dtype):  # the residuals' entries
            i += 1
        nodes.append((ins, out, vjp, shapes, dict(casts)))
    seeds = []
    i += 1
    while key[i] is not _SOURCES:
        seeds.append(key[i])
        i += 5
    return xp, persistent, nodes, seeds, list(key[i + 1 :])


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
        """The name of a literal's dtype table (:func:`gputape.core.expr.literal`) in the generated code."""
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


def _generate(key: tuple, F: Any) -> Callable[..., tuple]:
    """Compile the sweep of the structure ``key`` describes (the sweep's loop, its decisions taken here).

    Reads the key alone (:func:`_structure`), never a tape: a decision taken here can only come
    from what the key holds, so two tapes of one key run one text, and that text is the sweep's.
    ``F`` is the VJPs' namespace of the key's array module (one per module: the tape's ``_namespace``).
    """
    xp, persistent, entries, seeds, sources = _entries(key)
    if getattr(F, "xp", None) is not xp:
        raise ValueError(f"compiled backward: a VJP namespace {F!r} for a key of {xp.__name__}'s arrays")
    keep = set(sources)
    w = _Writer()
    for j, s in enumerate(seeds):
        w.emit(f"g{s} = S[{j}]")
        w.state[s] = _YES
    inline_ok = xp is np
    for p in range(len(entries) - 1, -1, -1):
        e = entries[p]
        outs = e[1]
        outs = [outs] if type(outs) is int else list(outs)
        oslots = [_pos(o) for o in outs]
        states = [w.state.get(s, _ABSENT) for s in oslots]
        if all(st == _ABSENT for st in states):
            continue  # no cotangent reaches the node
        dead = [s for s in oslots if s not in keep and w.state.get(s, _ABSENT) != _ABSENT]
        if any(o >= 0 for o in outs):
            _node(w, p, e, oslots, states, persistent, inline_ok)
        for s in dead:  # the sweep pops the cotangents it consumed (those of sources it keeps)
            w.emit(f"del g{s}")
            w.state[s] = _ABSENT
    rets = []
    for s in sources:
        rets.append("None" if w.state.get(s, _ABSENT) == _ABSENT else f"g{s}")
    w.emit(f"return ({''.join(r + ', ' for r in rets)})")
    w.ns["F"] = F
    src = "\n".join(w.lines) + "\n"
    exec(compile(src, f"<gputape compiled backward of {len(entries)} nodes>", "exec"), w.ns)
    fn = w.ns["backward"]
    fn.source = src  # type: ignore[attr-defined]
    return fn


def _pos(s: int) -> int:
    """A key's position, whether or not a cotangent flows there (``~position`` where none does)."""
    return s if s >= 0 else ~s


def _declared(vjp: Any) -> Any:
    """The declared derivative (:data:`gputape.core.expr.DERIVATIVES`) whose generated VJP is ``vjp``, or None."""
    for decl in _expr.DERIVATIVES.values():
        if decl.vjp is vjp:
            return decl
    return None


def _node(w: _Writer, p: int, e: tuple, oslots: list, states: list, persistent: bool, inline_ok: bool) -> None:
    """One node's step of the sweep (its key entry ``e``): skeleton, needs, VJP, fit and accumulation."""
    ins, out, vjp, shapes, casts = e
    needs = [s >= 0 for s in ins]
    slots = [_pos(s) for s in ins]
    decl = _declared(vjp)
    single = type(out) is int
    inline = inline_ok and decl is not None and single
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
        for k, s in enumerate(slots):
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
        tensors = tuple(sh is not None for sh in shapes)
        for k in range(len(ins)):
            if not needs[k]:
                continue
            # literals typed by their partner's dtype (gputape.core.expr.python_typed): the same bits
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
        known = None if None in shapes else _broadcast(shapes)
        for k in temps:
            _fit(w, p, k, shapes[k], casts.get(k), slots[k], cotangent=known)
    else:
        v = w.const(f"V{p}", vjp)
        if len(ins) <= 2:
            nd = repr(tuple(needs))
        else:
            nd = repr(needs)  # a fresh list each run, as the sweep makes one
        w.emit(f"r = {v}(F, {gexpr}, {nd}, 0, n, *n.saved)")
        for k in range(len(ins)):
            if needs[k]:
                w.emit(f"t{k} = r[{k}]")
                w.emit(f"if t{k} is not None:")
                w.depth += 1
                _fit(w, p, k, shapes[k], casts.get(k), slots[k])
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


def _fit(w: _Writer, p: int, k: int, shape: Any, cast: Any, s: int, cotangent: tuple | None = None) -> None:
    """The sweep's reduction to the input's ``shape``, cast to its dtype (``cast``, or None), and accumulation.

    ``cotangent``: the shape the cotangent has on every run (an elementwise node's output shape).
    Where it is the input's shape the sweep's test would always be false and is left out; where it
    differs, :func:`~gputape.core.backward.sweep.sum_to_plan`'s steps are written inline (the same numpy calls
    ``F.sum_to`` makes), behind a test of that shape which keeps the sweep's general path for any
    other shape.
    """
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
    if cast is not None:
        w.emit(f"{t} = {t}.astype({w.const(f'C{p}_{k}', cast)})")
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

    ``graphs``: the CUDA-graph replay of compiled backwards on a GPU (:func:`gputape.core.backward.cuda_graph.report`).
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
