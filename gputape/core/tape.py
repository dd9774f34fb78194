"""GradientTape: TensorFlow's tape, ``stop_gradient`` and ``custom_gradient``.

The pieces below it, bottom up: :mod:`gputape.core.primitive` (the registry and the node),
:mod:`gputape.core.recording` (what an op tells the observers: a node on every tape that tracks an
input), :mod:`gputape.core.dispatch` (each primitive's entry point), :mod:`gputape.core.backward.sweep` (the
sweep) and :mod:`gputape.ops` (the primitives). A tape is an entry on its thread's observer
stack (:mod:`gputape.core.state`) while it records; ``gradient()`` seeds the targets and runs the
sweep with the namespace its VJPs need: gputape's own ops when another tape records the
gradient computation (higher-order derivatives), the raw array module otherwise.
"""

from __future__ import annotations

import enum
import functools
import logging
import operator
import warnings
import weakref
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import numpy as np

from ..devices import backend
from ..ops import DIFF_NAMESPACE as _DIFF_F
from ..ops import raw_namespace as _raw_namespace
from . import _errors
from . import state as _state
from . import tensor as _tensor_mod
from ._errors import GputapeWarning
from ._nest import flatten as _flatten
from ._nest import unflatten as _unflatten
from .backward.compiled import gradients as _compiled_gradients
from .backward.sweep import _sweep
from .explain import explain as _explain
from .explain import summary as _summary
from .explain import to_dot as _to_dot
from .loss_head import fuse as _fuse_head
from .loss_head import restore as _restore_head
from .primitive import DIFF_DTYPES, Node
from .recording import _nbytes_saved, _where, traced
from .recording import watch_variable as _watch_variable
from .state import tls as _tls
from .tensor import Tensor, Variable, _new, _next_const_id, _to_array, _wrap

_log = logging.getLogger("gputape")
_ndarray = np.ndarray
_NP_F = _raw_namespace(np)  # the sweep's namespace on host arrays
_id_of = operator.attrgetter("_id")


_weakref = weakref.ref


class _LiveTapes:
    """Every tape that was entered and is still alive, for the memory report (gt.memory_info():
    bytes held by live tapes), iterated as a WeakSet is.

    Plain weak references keyed by ``id``, without the callback a WeakSet gives each (a tape per
    step paid ~1.5 us for it, most of it in the callback run when the tape dies): a dead tape's
    entry is overwritten by the next tape at its address, or dropped when the table has doubled
    since it was last swept, so it stays within twice the live tapes (plus a constant).

    >>> t = object.__new__(GradientTape); live = _LiveTapes(); live.add(t); live.add(t)
    >>> list(live) == [t] and len(live) == 1 and t in live
    True
    >>> del t; list(live), len(live)
    ([], 0)
    """

    __slots__ = ("_bound", "_refs")

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}
        self._bound = 64

    def add(self, tape: Any) -> None:
        refs = self._refs
        refs[id(tape)] = _weakref(tape)  # (no callback: CPython hands out the tape's one such ref)
        if len(refs) > self._bound:
            for k, r in list(refs.items()):
                if r() is None and refs.get(k) is r:  # (not an entry another thread just stored there)
                    refs.pop(k, None)  # (another thread sweeping may have dropped it already)
            self._bound = max(64, 2 * len(refs))

    def _alive(self) -> list:
        return [t for t in (r() for r in list(self._refs.values())) if t is not None]

    def __iter__(self) -> Any:
        return iter(self._alive())

    def __len__(self) -> int:
        return len(self._alive())

    def __contains__(self, tape: Any) -> bool:
        r = self._refs.get(id(tape))
        return r is not None and r() is tape


_live_tapes = _LiveTapes()


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, GputapeWarning, stacklevel=3)


class UnconnectedGradients(str, enum.Enum):
    """What ``gradient`` returns for a source the target does not depend on.

    ``RAISE`` (gputape's addition) raises :class:`UnconnectedGradientError`
    carrying :meth:`GradientTape.explain`'s answer.
    """

    NONE = "none"
    ZERO = "zero"
    RAISE = "raise"


class UnconnectedGradientError(ValueError):
    """A gradient is None under ``unconnected_gradients='raise'``; ``.explanation`` says why."""

    def __init__(self, message: str, explanation: Any = None) -> None:
        super().__init__(message)
        self.explanation = explanation


def _parse_unconnected(value: Any) -> UnconnectedGradients:
    if type(value) is UnconnectedGradients:
        return value
    try:
        return UnconnectedGradients(value.value if isinstance(value, UnconnectedGradients) else value)
    except ValueError:
        raise ValueError(
            f"Unknown value for unconnected_gradients: {value!r}; use 'none', 'zero', 'raise' "
            "or gt.UnconnectedGradients.NONE / .ZERO / .RAISE"
        ) from None


# ---------------------------------------------------------------------------------
# GradientTape


def _any_tape() -> bool:
    """Whether a tape records in this thread (a gradient computed now is then recorded too)."""
    obs = _tls.obs
    return obs is not None and bool(obs.tapes)


def _namespace(diff: bool, seeds: dict[int, Any]) -> Any:
    """The sweep's VJP namespace: gputape's ops under a recording tape, else the seeds' raw arrays'."""
    if diff:
        return _DIFF_F
    first = next(iter(seeds.values()))
    return _NP_F if type(first) is _ndarray else _raw_namespace(backend.xp_of(first))


def _flag(value: Any, name: str) -> bool:
    """A constructor switch: True/False (numpy bools, 0/1 and None as TensorFlow's truthiness
    takes them); a string or an array is refused rather than read as True.

    >>> _flag(np.True_, "persistent"), _flag(None, "persistent")
    (True, False)
    """
    if value is None or isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value)
    raise TypeError(
        f"GradientTape: {name} must be True or False, got {_errors.describe(value)}; "
        f"pass GradientTape({name}=True) or GradientTape({name}=False)"
    )


def _spanned(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A tape method that ``gt.profiler`` times as one ``tape`` event (the whole backward)."""
    name = fn.__name__

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _state.anywhere and _state.profiler is not None:
            return _state.profiler.call(name, "tape", fn, (self, *args), kwargs)
        return fn(self, *args, **kwargs)

    return method


class GradientTape(_state.Scope):
    """Record operations for automatic differentiation (TensorFlow's tape).

    Ops run inside ``with tape:`` are recorded when one of their inputs is
    watched: trainable Variables are watched as soon as they are read (unless
    ``watch_accessed_variables=False``), other tensors with :meth:`watch`.

    >>> import gputape as gt
    >>> x = gt.constant(3.0)
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = x * x
    >>> tape.gradient(y, x).numpy()
    array(6., dtype=float32)

    A non-persistent tape computes one set of gradients and frees each op's
    saved values as soon as its VJP has run; ``persistent=True`` keeps them
    until :meth:`release` or ``del tape``. ``compile=False`` keeps :meth:`gradient` on the
    per-node sweep even for a structure seen before (README, "Compiled backward").
    """

    observes = "tape"  # its role on the thread's observer stack (gputape.core.state)
    _compile = True

    def __init__(
        self,
        persistent: bool = False,
        watch_accessed_variables: bool = True,
        compile: bool = True,  # noqa: A002 (the option's name: GradientTape(compile=False))
    ) -> None:
        # (the defaults, True/False, are taken as they are: a tape per step)
        self._compile = compile if compile is True or compile is False else _flag(compile, "compile")
        self._persistent = persistent if persistent is False or persistent is True else _flag(persistent, "persistent")
        auto = watch_accessed_variables
        self._auto = auto if auto is True or auto is False else _flag(auto, "watch_accessed_variables")
        self._tensors: set[int] | None = None  # ids this tape tracks (watched or recorded); None: not entered
        self._used = False  # a non-persistent tape that already computed its gradients

    # A tape never entered reads these (empty, and immutable: nothing records on it); entering it,
    # watch() or reset() give it its own (_fresh), so a training step builds its containers once.
    _nodes: Any = ()
    _watched_vars: Any = MappingProxyType({})
    _leaves: Any = frozenset()
    _edges: Any = MappingProxyType({})
    _broken: Any = MappingProxyType({})
    _exports: Any = ()
    _retired: GradientTape | None = None

    def _fresh(self) -> None:
        """Start an empty recording (first entry, reset, or re-entry after gradient())."""
        self._tensors = set()
        self._nodes: list[Any] = []  # Nodes, or Swept records once their VJP ran
        self._watched_vars = {}
        self._leaves: set[int] = set()  # ids watched directly (not produced by a recorded op)
        # For explain(): edges of ops that ran inside the tape on untracked values,
        # markers where a path was cut (stop_gradient, stop_recording, integer
        # results, values that left through .numpy()), and those exports.
        self._edges: dict[int, tuple[str, tuple[int, ...]]] = {}
        self._broken: dict[int, tuple[str, str, str | None, tuple[int, ...]]] = {}
        self._exports: list[tuple[int, str | None, int, Any]] = []
        self._retired: GradientTape | None = None

    # -- context ------------------------------------------------------------------
    # Entering pushes the tape on this thread's observer stack and leaving pops it
    # (gputape.core.state.Scope: one store each way, safe against Ctrl-C); whether it records
    # is read from that stack, never kept in a flag that could disagree with it.
    def __enter__(self) -> GradientTape:
        obs = _tls.obs
        if obs is not None and self in obs.stack:
            raise ValueError("Tape is still recording. This can happen if you try to re-enter an already-active tape.")
        if self._tensors is None:
            self._fresh()
            self._used = False
        _live_tapes.add(self)
        return super().__enter__()

    @property
    def _recording(self) -> bool:
        """Whether this tape records in this thread now (entered, not paused, not hidden)."""
        obs = _tls.obs
        return obs is not None and self in obs.tapes

    def _note_export(self, t: Tensor, array: Any) -> None:
        """A value this tape may track left as host data (.numpy(), np.asarray, float())."""
        if t._id in self._tensors:
            # constants made after this point have larger odd ids than the mark;
            # the array itself is kept to recognise it if it comes back as an operand
            self._exports.append((t._id, _where(), _tensor_mod._next_const_id(), array))

    # -- watching -----------------------------------------------------------------
    def _store(self) -> set[int]:
        if self._tensors is None:
            self._fresh()
        return self._tensors

    # (var) -> whether it is watched now (False for a dtype without gradients); generated from the
    # statements the recorders write out for a variable read (gputape.core.recording._WATCH)
    _watch_variable = _watch_variable

    def watch(self, tensor: Any) -> None:
        """Ensure ``tensor`` (a Tensor, Variable, or nested list/tuple/dict of them) is traced.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape() as t:
        ...     t.watch([x])
        ...     y = gt.sum(x * x)
        >>> t.gradient(y, x).numpy().tolist()
        [2.0, 4.0]
        """
        flat, _ = _flatten(tensor)
        for t in flat:
            if not isinstance(t, Tensor):
                raise ValueError(
                    f"GradientTape.watch: passed in object of type {type(t).__name__}, not a gt.Tensor or "
                    "gt.Variable (or a nested list/tuple/dict of them); wrap arrays with gt.constant first"
                )
        tt = self._store()
        for t in flat:
            if t._data.dtype not in DIFF_DTYPES:
                _warn_once(
                    f"watch-{t._data.dtype}",
                    f"GradientTape.watch: the dtype of the watched tensor must be floating or complex (got "
                    f"{t._data.dtype}); its gradient will be None. Cast it with .astype('float32').",
                )
                continue
            if type(t) is Variable:
                self._watch_variable(t)
            elif t._id not in tt:
                tt.add(t._id)
                self._leaves.add(t._id)

    def unwatch(self, tensor: Any) -> None:
        """Stop tracing ``tensor`` (same argument forms as :meth:`watch`).

        Ops recorded before the call stay recorded; later ops that read only
        unwatched values are not recorded.

        >>> import gputape as gt
        >>> x = gt.constant(2.0)
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); t.unwatch(x)
        ...     y = x * x
        >>> t.gradient(y, x) is None
        True
        """
        flat, _ = _flatten(tensor)
        tt = self._store()
        for t in flat:
            if not isinstance(t, Tensor):
                raise ValueError(
                    f"GradientTape.unwatch: passed in object of type {type(t).__name__}, not a gt.Tensor or gt.Variable"
                )
            tt.discard(t._id)
            self._leaves.discard(t._id)
            self._watched_vars.pop(t._id, None)

    def watched_variables(self) -> tuple[Variable, ...]:
        """The Variables this tape watches, in the order they were created (TensorFlow's order).

        >>> import gputape as gt
        >>> a, b = gt.Variable(1.0, name="a"), gt.Variable(2.0, name="b")
        >>> with gt.GradientTape() as t:
        ...     y = b * a
        >>> [w.name for w in t.watched_variables()]
        ['a', 'b']
        """
        # A variable's id comes from a counter at its creation, so sorting by id is creation
        # order; sorting here (not on each read) keeps the recording hot path as it is.
        return tuple(sorted(self._watched_vars.values(), key=_var_id))

    def stop_recording(self) -> _StopRecording:
        """Temporarily stop recording on this tape (other tapes keep recording).

        >>> import gputape as gt
        >>> x = gt.constant(2.0)
        >>> with gt.GradientTape() as t:
        ...     t.watch(x)
        ...     with t.stop_recording():
        ...         y = x * x
        >>> t.gradient(y, x) is None
        True
        """
        return _StopRecording(self)

    def reset(self) -> None:
        """Forget everything recorded and watched so far; keep recording if recording.

        >>> import gputape as gt
        >>> x = gt.constant(2.0)
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); y = x * x
        ...     t.reset()
        ...     t.watch(x); z = x * x * x
        >>> t.gradient(z, x).numpy()
        array(12., dtype=float32)
        """
        self._drop()
        self._fresh()

    # -- memory -------------------------------------------------------------------
    def _drop(self) -> None:
        # Dropping the references frees the residuals, unless another tape
        # (nested, recording the same ops) still holds the node.
        self._nodes = []

    def release(self) -> None:
        """Free every value this tape saved; it cannot compute gradients afterwards.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape(persistent=True) as t:
        ...     t.watch(x); y = gt.exp(x)
        >>> t.saved_bytes > 0
        True
        >>> t.release(); t.saved_bytes
        0

        Inside its own ``with`` block the tape also stops recording there: the ops after it run
        unrecorded (``.numpy()`` and all), as after a non-persistent tape's ``gradient()``.
        """
        obs = _tls.obs
        if obs is not None and self in obs.stack:
            # a released tape has no set of tracked tensors to record into; left on the observer
            # stack it would make every later op (even .numpy()) fail on the missing set
            _state.pop(self)
        self._drop()
        self._fresh()
        self._tensors = None

    @property
    def saved_bytes(self) -> int:
        """Bytes of the arrays this tape's recorded ops saved for their VJPs."""
        return _nbytes_saved(self._nodes)

    # -- debugging ----------------------------------------------------------------
    def explain(self, target: Tensor, source: Tensor) -> Any:
        """Why is ``gradient(target, source)`` None? Returns a ``gt.debug.Explanation``.

        ``reason`` is one of ``connected``, ``not_watched``, ``not_trainable``,
        ``unused``, ``not_recorded``, ``stop_gradient``, ``stop_recording``,
        ``integer_dtype``, ``non_differentiable_op``, ``left_tape``; ``where`` is
        the user's file:line of the op that broke the path when known. Works
        before and after ``gradient()``, on persistent and non-persistent tapes.

        >>> import gputape as gt
        >>> w = gt.Variable(1.0, trainable=False, name="w")
        >>> with gt.GradientTape() as tape:
        ...     y = w * 3.0
        >>> tape.explain(y, w).reason
        'not_trainable'
        """
        return _explain(self, target, source)

    def summary(self) -> str:
        """A table of the recorded ops: input shapes, output shape and dtype, bytes saved, and the
        user's file:line for ops recorded inside ``gt.debug.record_locations()``.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape() as tape:
        ...     tape.watch(x); y = gt.exp(x)
        >>> print(tape.summary().splitlines()[2].split()[:5])
        ['0', 'exp', '(2,)', '(2,)', 'float32']
        """
        return _summary(self)

    def to_dot(self) -> str:
        """The recorded graph as Graphviz DOT text (render with ``dot -Tpng``).

        >>> import gputape as gt
        >>> x = gt.constant(1.0)
        >>> with gt.GradientTape() as tape:
        ...     tape.watch(x); y = gt.sin(x)
        >>> tape.to_dot().splitlines()[0]
        'digraph gputape {'
        """
        return _to_dot(self)

    # -- gradients ----------------------------------------------------------------
    def _begin_backprop(self, what: str) -> None:
        if self._tensors is None:
            if self._used:
                raise RuntimeError(
                    f"A non-persistent GradientTape can only be used to compute one set of gradients "
                    f"(or jacobians); this one already ran. Use GradientTape(persistent=True) to call "
                    f"{what}() more than once."
                )
            raise RuntimeError(
                f"GradientTape.{what}: this tape has nothing recorded (it was never entered, or it was "
                "released); record ops inside `with tape:` first"
            )
        obs = _tls.obs
        if not self._persistent and obs is not None and self in obs.stack:
            # As TensorFlow does: a non-persistent tape stops recording here, so
            # the gradient computation is not recorded on it.
            _state.pop(self)

    def _finish_backprop(self) -> None:
        if not self._persistent:
            # Keep what explain() needs (ids and edges, no arrays); drop the rest.
            # Field by field (copying __dict__ cost four times as much): the recording's state as
            # __init__ and _fresh() make it, with the node list itself (_drop() starts a new one).
            retired = _new(GradientTape)
            retired._compile = self._compile
            retired._persistent = False
            retired._auto = self._auto
            retired._tensors = self._tensors
            retired._watched_vars = self._watched_vars
            retired._nodes = nodes = self._nodes
            retired._leaves = self._leaves
            retired._edges = self._edges
            retired._broken = self._broken
            retired._exports = self._exports
            retired._retired = None
            retired._used = self._used
            if Node in map(type, nodes):  # the backward left some (a compiled or swept one visits most)
                for p, n in enumerate(nodes):
                    if type(n) is Node:
                        nodes[p] = n.swept()
            self._nodes = []  # (as _drop)
            self._tensors = None  # watched_variables() still answers, as in TensorFlow
            self._retired = retired
            self._used = True

    @_spanned
    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        unconnected_gradients: Any = UnconnectedGradients.NONE,
    ) -> Any:
        """Gradients of ``target`` (the sum of it, for a non-scalar or nested target) w.r.t. ``sources``.

        ``sources`` may be a tensor, a variable or any nested list/tuple/dict of
        them; the result has the same structure. ``output_gradients`` weights
        each target (one per target, its shape, or None for ones). Unconnected
        sources give ``None``, or zeros with ``unconnected_gradients='zero'``.

        An output gradient with a dtype of its own (a Tensor, a numpy or CuPy array, a numpy
        scalar) must have its target's dtype, or a TypeError names both dtypes and shapes:
        TensorFlow refuses another dtype too (its gradient ops do not mix dtypes), and a cast
        would silently change the value (complex to real drops the imaginary part). A Python
        number has no dtype of its own and becomes the target's (a complex number for a real
        target is refused), as TensorFlow converts Python values to a tensor.

        >>> import gputape as gt
        >>> w = gt.Variable([1.0, 2.0]); b = gt.Variable(0.5)
        >>> with gt.GradientTape() as tape:
        ...     y = gt.sum(w * w) + b
        >>> g = tape.gradient(y, {"w": w, "b": b})
        >>> g["w"].numpy().tolist(), float(g["b"])
        ([2.0, 4.0], 1.0)
        """
        if target is None:
            raise TypeError(
                "GradientTape.gradient: target is None; pass the tensor (or nested structure of "
                "tensors) to differentiate"
            )
        unconnected = unconnected_gradients
        if type(unconnected) is not UnconnectedGradients:
            unconnected = _parse_unconnected(unconnected)
        obs = _tls.obs
        if self._tensors is None or (obs is not None and not self._persistent and self in obs.stack):
            self._begin_backprop("gradient")  # (refuses a spent tape; a non-persistent one stops recording)
            obs = _tls.obs
        # Argument errors leave the tape usable (as in TensorFlow): only a sweep consumes it.
        flat_t = [target] if isinstance(target, Tensor) else _leaves(target)[0]
        flat_s, s_spec = _leaves(sources)
        # (_leaves checked a tensor and a flat list or tuple of them; None is also the spec of any other leaf)
        if not (s_spec is list or s_spec is tuple or (s_spec is None and isinstance(sources, Tensor))):
            _check_sources(flat_s, "gradient")
        if output_gradients is None:
            flat_og = [None] * len(flat_t)
        else:
            flat_og, _ = _flatten(output_gradients)
            if len(flat_og) != len(flat_t):
                raise ValueError(
                    f"GradientTape.gradient: got {len(flat_og)} output_gradients for {len(flat_t)} "
                    "targets; pass one per target (None for the default of ones)"
                )
        diff = obs is not None and bool(obs.tapes)  # (a tape records the gradient computation too)
        seeds = _seeds(flat_t, flat_og, diff, lead=None)
        try:
            # (np.errstate as _quiet() makes it, without the call: once per step)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                # the sweep, or code compiled for a structure seen before (gputape.core.backward.compiled):
                # a gradient or None per source
                if seeds:
                    sids = list(map(_id_of, flat_s))
                    if diff:
                        F = _DIFF_F
                    else:
                        first = next(iter(seeds.values()))
                        F = _NP_F if type(first) is _ndarray else _raw_namespace(backend.xp_of(first))
                    # the loss head a user wrote, fused into one cross-entropy node (gputape.core.loss_head); not
                    # while check_numerics observes the sweep (it names the op where a value went bad)
                    numerics = obs is not None and obs.numerics is not None
                    fused = None if (diff or self._persistent or numerics) else _fuse_head(self, seeds, sids)
                    try:
                        grads = _compiled_gradients(self, seeds, sids, diff, F)
                    finally:
                        if fused is not None:
                            _restore_head(self, fused)
                else:
                    grads = [None] * len(flat_s)
            # gradient()'s _result per source, its common case (a contiguous host gradient of a
            # floating source, no tape recording the gradient) written out: once per parameter per step
            out = []
            for s, g in zip(flat_s, grads):
                if type(g) is _ndarray and not diff and g.flags.c_contiguous and s._data.dtype in DIFF_DTYPES:
                    t = _new(Tensor)  # (as _wrap)
                    t._data = g
                    t._id = _next_const_id()
                    out.append(t)
                else:
                    out.append(_result(g, s, unconnected, diff, None))
            if unconnected is UnconnectedGradients.RAISE:
                self._raise_unconnected(flat_t, flat_s, out)
        finally:
            self._finish_backprop()
        if s_spec is list:
            return out
        return tuple(out) if s_spec is tuple else _unflatten(s_spec, out)

    def _raise_unconnected(self, flat_t: list, flat_s: list, out: list) -> None:
        for s, g in zip(flat_s, out):
            if g is None:
                # the first target that is a tensor explains it (a nested target is their sum)
                e = _explain(self, next(t for t in flat_t if isinstance(t, Tensor)), s)
                raise UnconnectedGradientError(f"GradientTape.gradient: the gradient is None: {e}", e)

    @_spanned
    def jacobian(
        self,
        target: Any,
        sources: Any,
        unconnected_gradients: Any = UnconnectedGradients.NONE,
        parallel_iterations: Any = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """Full Jacobian: ``result[i].shape == target.shape + sources[i].shape``.

        Computed in one vectorised backward sweep (the identity as a batch of
        cotangents), not one sweep per output element. ``parallel_iterations``
        and ``experimental_use_pfor`` are accepted for TensorFlow compatibility
        and have no effect.

        >>> import gputape as gt
        >>> x = gt.constant([1.0, 2.0])
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); y = x * x
        >>> t.jacobian(y, x).numpy().tolist()
        [[2.0, 0.0], [0.0, 4.0]]
        """
        unconnected = _parse_unconnected(unconnected_gradients)
        if not isinstance(target, Tensor):
            raise TypeError(f"GradientTape.jacobian: target must be a gt.Tensor, got {type(target).__name__}")
        self._begin_backprop("jacobian")
        flat_s, s_spec = _leaves(sources)
        _check_sources(flat_s, "jacobian")
        diff = _any_tape()
        tshape = target.shape
        n = target.size
        seeds = _seeds([target], [None], diff, lead=("jacobian", n))
        try:
            with _quiet():
                ids = [s._id for s in flat_s]
                grads = _sweep(self, seeds, ids, diff, _namespace(diff, seeds), (n,)) if seeds else {}
            out = []
            for s in flat_s:
                g = grads.get(s._id)
                if g is not None:
                    if diff:
                        g = _DIFF_F.reshape(g, tshape + s.shape)
                    else:
                        g0, g = g, g.reshape(tshape + s.shape)
                        traced(_reshape, (g0, tshape + s.shape), g, True)
                out.append(_result(g, s, unconnected, diff, tshape))
        finally:
            self._finish_backprop()
        return _rebuild(s_spec, out)

    @_spanned
    def batch_jacobian(
        self,
        target: Tensor,
        source: Tensor,
        unconnected_gradients: Any = UnconnectedGradients.NONE,
        parallel_iterations: Any = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """Per-example Jacobian: ``target[b, *y]`` w.r.t. ``source[b, *x]`` -> ``[b, *y, *x]``.

        Assumes ``target[i]`` depends only on ``source[i]`` (as TensorFlow does).
        One vectorised sweep with ``prod(y)`` cotangents.

        >>> import gputape as gt
        >>> x = gt.constant([[1.0, 2.0], [3.0, 4.0]])
        >>> with gt.GradientTape() as t:
        ...     t.watch(x); y = x * x
        >>> t.batch_jacobian(y, x).numpy().tolist()
        [[[2.0, 0.0], [0.0, 4.0]], [[6.0, 0.0], [0.0, 8.0]]]
        """
        unconnected = _parse_unconnected(unconnected_gradients)
        if not isinstance(target, Tensor) or not isinstance(source, Tensor):
            raise TypeError("GradientTape.batch_jacobian: target and source must be gt.Tensors")
        ts, ss = target.shape, source.shape
        # TensorFlow's texts, in TensorFlow's order (target's rank, source's rank, then the batch
        # dimension): its own tests match them, so programs that catch them keep working.
        for shape in (ts, ss):
            if len(shape) < 2:
                raise ValueError(f"Shape {shape} must have rank at least 2 (GradientTape.batch_jacobian)")
        if ts[0] != ss[0]:
            raise ValueError(
                f"Need first dimension of target shape {ts} and source shape {ss} to match. "
                "(GradientTape.batch_jacobian: target[i] must depend on source[i] alone)"
            )
        self._begin_backprop("batch_jacobian")
        _check_sources([source], "batch_jacobian")
        diff = _any_tape()
        b = ts[0]
        ny = int(np.prod(ts[1:]))
        seeds = _seeds([target], [None], diff, lead=("batch", ny))
        try:
            with _quiet():
                grads = _sweep(self, seeds, [source._id], diff, _namespace(diff, seeds), (ny,)) if seeds else {}
            g = grads.get(source._id)
            if g is not None:
                if diff:
                    g = _DIFF_F.reshape(_DIFF_F.moveaxis(g, 0, 1), (b,) + ts[1:] + ss[1:])
                else:
                    g0, g = g, _batch_jacobian_layout(g, (b,) + ts[1:] + ss[1:])
                    traced(_batch_jacobian_layout, (g0, (b,) + ts[1:] + ss[1:]), g, True)
            out = _result(g, source, unconnected, diff, ts[1:], batch=True)
        finally:
            self._finish_backprop()
        return out


def _leaves(x: Any) -> tuple[list, Any]:
    """``_nest.flatten(x)``, without its recursion for a tensor or a flat list or tuple of them
    (the forms a training loop passes); :func:`_rebuild` takes the spec back."""
    if isinstance(x, Tensor):
        return [x], None
    tx = type(x)
    if tx is list or tx is tuple:
        for t in x:  # (a loop: all() over a generator costs a frame per element)
            if not isinstance(t, Tensor):
                return _flatten(x)
        return list(x), tx
    return _flatten(x)


def _rebuild(spec: Any, flat: list) -> Any:
    """``_nest.unflatten`` for the specs :func:`_leaves` makes."""
    if spec is list:
        return flat
    if spec is tuple:
        return tuple(flat)
    return _unflatten(spec, flat)


def _quiet() -> Any:
    """``np.errstate(divide="ignore", invalid="ignore", over="ignore")``: infinite and NaN gradients
    are results (sqrt at 0 is inf), not numpy warnings; the caller's other settings are kept."""
    return np.errstate(divide="ignore", invalid="ignore", over="ignore")


def _check_sources(flat_s: list, what: str) -> None:
    for s in flat_s:
        if not isinstance(s, Tensor):
            raise ValueError(
                f"GradientTape.{what}: sources must be gt.Tensors or gt.Variables (or nested "
                f"lists/tuples/dicts of them), got {type(s).__name__}"
            )


def _seeds(flat_t: list, flat_og: list, diff: bool, lead: Any) -> dict[int, Any]:
    """Initial cotangents: ones (or output_gradients) for each floating target."""
    seeds: dict[int, Any] = {}
    for k, (t, og) in enumerate(zip(flat_t, flat_og)):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"GradientTape: target must be a gt.Tensor or a nested structure of them, got {type(t).__name__}"
            )
        d = t._data
        if d.dtype not in DIFF_DTYPES:
            _warn_once(
                f"target-{d.dtype}",
                f"GradientTape: the dtype of the target must be floating or complex (got {d.dtype}); its gradients are "
                "None. Cast it with .astype('float32').",
            )
            continue
        xp = np if type(d) is _ndarray else backend.xp_of(d)
        if lead is None:
            if og is None:
                g = xp.empty(d.shape, d.dtype)
                g.fill(1)  # xp.ones, without numpy's Python-level wrapper around these two steps
            else:
                own = _own_dtype(og)
                if own is not None and own != d.dtype:  # (not `in (None, d.dtype)`: a numpy dtype equals None)
                    raise _og_dtype_error(og, d, k if len(flat_t) > 1 else None)
                g = og._data if isinstance(og, Tensor) else _to_array(og, d.dtype)
                if g.shape != d.shape:
                    raise ValueError(
                        f"GradientTape.gradient: output_gradients shape {g.shape} does not match target shape {d.shape}"
                    )
                if diff and isinstance(og, Tensor):
                    g = og
        elif lead[0] == "jacobian":
            n = lead[1]
            g = xp.eye(n, dtype=d.dtype).reshape((n,) + d.shape)
        else:  # batch jacobian: cotangent k selects element k of every example
            ny = lead[1]
            b = d.shape[0]
            g = xp.ascontiguousarray(xp.broadcast_to(xp.eye(ny, dtype=d.dtype)[:, None, :], (ny, b, ny))).reshape(
                (ny,) + d.shape
            )
        if diff and not isinstance(g, Tensor):
            g = _wrap(g)
        prev = seeds.get(t._id)
        seeds[t._id] = g if prev is None else prev + g
    return seeds


def _own_dtype(value: Any) -> Any:
    """The numpy dtype ``value`` carries (a Tensor's, an array's, a numpy scalar's), or None (a Python number)."""
    dt = getattr(value, "dtype", None)
    if dt is None:
        return None
    try:
        return np.dtype(dt)
    except TypeError:  # another library's dtype: the conversion to the target's dtype judges the value
        return None


def _og_dtype_error(og: Any, d: Any, k: int | None) -> TypeError:
    """An ``output_gradients`` entry of another dtype than its target: refused, as TensorFlow refuses it."""
    dt = np.dtype(og.dtype)
    which = "output_gradients" if k is None else f"output_gradients[{k}] (in flattened order)"
    if dt.kind == "c" and d.dtype.kind != "c":
        fix = "np.real(og) if the real part is what you mean (casting would drop the imaginary part)"
    else:
        fix = f"og.astype({d.dtype.name!r}) (or gt.cast(og, target.dtype)) if that cast is what you mean"
    return TypeError(
        f"GradientTape.gradient: {which} has dtype {dt} and shape {tuple(og.shape)}, but its target has dtype "
        f"{d.dtype} and shape {d.shape}; an output gradient must have its target's dtype (TensorFlow refuses "
        f"another: its gradient ops do not mix dtypes). Pass {fix}"
    )


def _result(g: Any, s: Tensor, unconnected: UnconnectedGradients, diff: bool, tshape: Any, batch: bool = False) -> Any:
    """Wrap a raw gradient as a Tensor; None or zeros for unconnected / integer sources."""
    d = s._data
    if d.dtype not in DIFF_DTYPES:
        _warn_once(
            f"source-{d.dtype}",
            f"GradientTape: the dtype of a source must be floating or complex (got {d.dtype}); its gradient is None. "
            "Cast it with .astype('float32').",
        )
        g = None
    if g is None:
        if unconnected is UnconnectedGradients.ZERO:
            xp = np if type(d) is _ndarray else backend.xp_of(d)
            if tshape is None:
                shape = d.shape
            elif batch:
                shape = d.shape[:1] + tuple(tshape) + d.shape[1:]
            else:
                shape = tuple(tshape) + d.shape
            return _wrap(xp.zeros(shape, d.dtype))
        return None
    if diff:
        return g
    if isinstance(g, np.generic):  # numpy's 0-d results are scalars; a Tensor holds an array (np.asarray(t) needs one)
        g0, g = g, np.asarray(g)
        traced(_as_array, (g0,), g, True)
    elif not g.flags.c_contiguous:  # broadcast views and transposes: hand out a real array
        g0, g = g, (np if type(g) is _ndarray else backend.xp_of(g)).ascontiguousarray(g)
        traced(_contiguous, (g0,), g, True)
    return _wrap(g)




def _as_array(a: Any) -> Any:
    return np.asarray(a)


def _contiguous(a: Any) -> Any:
    return (np if type(a) is _ndarray else backend.xp_of(a)).ascontiguousarray(a)


def _reshape(a: Any, shape: tuple) -> Any:
    return a.reshape(shape)


def _var_id(v: Variable) -> int:
    return v._id


def _batch_jacobian_layout(g: Any, shape: tuple) -> Any:
    F = np if type(g) is _ndarray else backend.xp_of(g)
    return F.reshape(F.moveaxis(g, 0, 1), shape)


class _StopRecording(_state.Scope):
    """``tape.stop_recording()``: while on the stack, the tape below it does not record
    (ops on values it tracks are marked for explain() instead)."""

    observes = "pause"

    def __init__(self, tape: GradientTape) -> None:
        self.tape = tape

    def __enter__(self) -> None:
        if self.tape._tensors is None:
            raise RuntimeError(
                "GradientTape.stop_recording() can only be used in a recording context: enter the tape first"
            )
        super().__enter__()

