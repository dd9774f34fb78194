"""Python control flow on tensor values inside ``gt.function``: guards, undoing a replay, the bound.

Why guards and not AutoGraph. TensorFlow rewrites a function's source (AutoGraph) so that
``if``/``for``/``while`` on tensors become ``tf.cond``/``tf.while_loop`` in the graph. gputape's
trace is not a graph: it runs the Python function concretely, so each Python decision is taken
with real values, and the record is straight-line. Rewriting source would need a second
implementation of Python's statement semantics (``break``/``continue``/``return`` inside loops,
closures, generators) and would still refuse what it cannot convert. A guard needs nothing of
the source: every place a value is read into Python goes through one function
(``gputape.core.tensor.read_value``), the trace records a guard step there, and a replay reads
the value again and compares. Equal: the Python code would have taken the same path, so the
rest of the record is what an eager run computes. Different: the replay is abandoned, what it
changed is undone, and another trace of the same signature (specialised on other outcomes) is
tried, or the function is traced anew, which is an eager run. The price is a trace per path
seen; the bound below keeps it finite.

Undoing is cheap because published arrays are never written: a replay's variable updates are
new arrays swapped in, so remembering each variable's array (one reference) undoes them. The
optimizer's slots are double-buffered in place, so an optimizer's state is copied
(``get_state``/``set_state``); the random state (op counter, op-seeded streams) is saved too.
Host Python steps cannot be undone: ``tf.print`` is only output, so a replay with guards emits
it after the last guard passed; any other host step (a metric update) before a guard makes the
signature run eagerly, warned once.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from .. import random as _random
from ..core import state as _state
from ..core.state import defer_interrupts
from ..core.tape import GputapeWarning
from ._trace import _Deferred, _GuardFailedError, _OptimizerStep, _replay_assign, _Trace

# Traces kept per input signature for value-dependent control flow; one more path than this
# runs eagerly. TensorFlow warns after five retraces, so this is its threshold.
MAX_TRACES = 5


class _Signature:
    """The traces of one input signature that have guards, most recently matched first.

    A call replays them in turn: a guard that fails abandons that replay (undone by
    :func:`guarded_replay`) and the next is tried. When none matches, the function traces
    anew (up to :data:`MAX_TRACES`) or, past the bound or when a trace cannot be undone, runs
    the Python function eagerly for this signature from then on.
    """

    def __init__(self, function: Any, key: Any, spec: Any) -> None:
        self.function = function
        self.key = key
        self.spec = spec
        self.traces: list[Any] = []
        self.eager = False

    @property
    def source(self) -> str:
        return self.traces[0].source if self.traces else ""

    @property
    def replay(self) -> Any:
        return self.traces[0].replay if self.traces else None

    def __call__(self, leaves: Any) -> Any:
        missed = None
        if not self.eager:
            traces = self.traces
            for i, conc in enumerate(traces):
                try:
                    out = conc(leaves)
                except _GuardFailedError as exc:
                    missed = exc.guard
                    continue
                if i:  # the path this call took is likely the next call's too
                    traces.insert(0, traces.pop(i))
                return out
        return self.function._missed(self, leaves, missed)


def undo_set(tr: _Trace) -> tuple[list, list, bool]:
    """What a replay of ``tr`` may change before its last guard, to undo it: (variables, optimizers, undoable).

    ``undoable`` is False when a host Python step that changes state (not ``tf.print``)
    comes before a guard: a failing guard could not take it back.
    """
    variables: dict[int, Any] = {}
    optimizers: dict[int, Any] = {}
    last = tr.guards[-1]
    # A failing guard stops the straight-line replay there: steps after the last guard never need
    # undoing (the usual step: guards in the forward pass, the optimizer last, so nothing to save).
    for st in tr.steps[:last]:
        fn = st.fn
        if type(fn) is functools.partial and fn.func is _replay_assign:
            variables[id(fn.args[0])] = fn.args[0]
        elif type(fn) is _OptimizerStep:
            optimizers[id(fn.opt)] = fn.opt
            for v in fn.variables:
                variables[id(v)] = v
    undoable = all(emits or i > last for i, emits in tr.python_steps.items())
    return list(variables.values()), list(optimizers.values()), undoable


def defer_output(tr: _Trace, pending: list) -> None:
    """Make every ``tf.print`` step of ``tr`` emit into ``pending`` (flushed after the last guard)."""
    for i, emits in tr.python_steps.items():
        if emits:
            tr.steps[i] = tr.steps[i]._replace(fn=_Deferred(tr.steps[i].fn, pending))


def guarded_replay(replay: Callable[..., Any], variables: list, optimizers: list, pending: list) -> Callable[..., Any]:
    """``replay`` that, when a guard fails, puts back the variables, optimizer and random state it
    changed and re-raises; when every guard passed, emits the deferred output."""

    def run(*arrays: Any) -> Any:
        saved = [(v, v._data) for v in variables]
        states = [o.get_state() for o in optimizers]
        rnd = _random._snapshot()
        pending.clear()
        try:
            res = replay(*arrays)
        except _GuardFailedError:
            pending.clear()
            with defer_interrupts():
                for v, a in saved:
                    v._data = a
                for o, s in zip(optimizers, states):
                    o.set_state(s)
                _random._restore(rnd)
            raise
        out = list(pending)
        pending.clear()
        for fn, args in out:
            fn(*args)
        return res

    return run


def missed_warning(name: str, n: int, where: str | None, why: str) -> None:
    """The one warning of a signature that runs eagerly from now on (TensorFlow's retracing warning's role)."""
    warnings.warn(
        f"gt.function({name}): {why} (the branch taken from a tensor's value"
        f"{f' at {where}' if where else ''}). This input signature now runs eagerly: results stay "
        f"exact, but nothing is compiled ({n} traces were made for it; tracing is expensive). To compile "
        "it, compute the decision with tensor ops (gt.where, tf.cond, tf.while_loop), keep trip counts "
        "fixed, or pass the deciding value as a Python argument (each value is then a signature of its own).",
        GputapeWarning,
        stacklevel=4,
    )


def do_not_convert(func: Callable[..., Any] | None = None) -> Any:
    """``tf.autograph.experimental.do_not_convert``: inside a traced function, ``func``'s Python
    control flow on tensor values is refused (``OperatorNotAllowedInGraphError``) instead of guarded,
    as TensorFlow refuses it in code AutoGraph did not convert. Eagerly, ``func`` runs as it is.

    >>> import gputape as gt
    >>> from gputape.function import TracingError, do_not_convert
    >>> @do_not_convert
    ... def positive(v):
    ...     return bool(v > 0)
    >>> f = gt.function(lambda x: x * 2.0 if positive(x) else x)
    >>> positive(gt.constant(3.0))
    True
    >>> try:
    ...     f(gt.constant(3.0))
    ... except TracingError as e:
    ...     print(type(e).__name__)
    OperatorNotAllowedInGraphError
    """
    if func is None:
        return do_not_convert

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tr = _state.current_trace()
        if tr is None:
            return func(*args, **kwargs)
        tr.unconverted += 1
        try:
            return func(*args, **kwargs)
        finally:
            tr.unconverted -= 1

    return wrapper
