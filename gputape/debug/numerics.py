"""Where was the NaN born? ``gt.debug.check_numerics()``.

While on, every op's output (forward) and every cotangent a VJP produces
(backward) is checked; the first non-finite value raises ``FloatingPointError``
naming the op, the phase, whether the op created the value from finite inputs
or propagated it, the user's file:line of the forward op, and its inputs.

It is an entry on the thread's observer stack (:mod:`gputape.core.state`), so it
rides the recording slow path: with it off ops pay nothing, and it checks the
ops of the thread that turned it on (as TensorFlow's).

**Two ways to check.** Host arrays are checked at once, each with one reduction (exact
test only when it is not finite), and the error is raised by the op itself. Device (CuPy)
arrays are checked *deferred*: each op output and VJP output gets one flag, computed on the
device into a small flag buffer (no host sync per op); the flags are read once, when the
forward ends (``tape.gradient`` starts), when the backward ends, and when the block ends
(or :func:`disable_check_numerics`). On a hit, the first flagged op in execution order is
named, with its phase, created-vs-propagated (its inputs' flags: every tensor input is
flagged, op outputs once when made, other inputs when first read) and the user's line.
The deferred path is written against the array module, so ``check_numerics(deferred=True)``
runs the very same code on numpy: its CPU reference, and a way to check a host step at the
cost of one read per phase. Deferred checks do not keep the arrays, so the message gives
shapes and dtypes, not value ranges. ``gt.function`` runs its function eagerly under the
check, so the replays have no boundary of their own to check at.
"""

from __future__ import annotations

import threading
from math import isfinite as _isfinite
from typing import Any

import numpy as np

from ..core import state as _state
from ..core import tape
from ..core.tensor import Tensor
from ..devices import backend


def _finite(a: Any) -> bool:
    # One reduction, no temporary: a NaN or inf anywhere makes the reduction non-finite.
    # For contiguous float32/float64 it is v . v, a BLAS dot (3-4x faster than the pairwise
    # sum numpy does); either may overflow for finite values, so a non-finite result is
    # confirmed by the exact elementwise test. (check_numerics() silences numpy's warnings.)
    if type(a) is np.ndarray:
        dt = a.dtype
        if dt.kind != "f":  # complex: both parts must be finite (math.isfinite takes no complex)
            return dt.kind != "c" or bool(np.isfinite(a).all())
        if dt.char in "fd" and a.flags.c_contiguous:
            v = a.reshape(-1)
            if _isfinite(_dot(v, v)):
                return True
        elif _isfinite(np.add.reduce(a, axis=None)):
            return True
        return bool(np.isfinite(a).all())
    if not hasattr(a, "dtype") or backend.xp_of(a) is np:
        return _finite(np.asarray(a))
    if a.dtype.kind not in "fc":
        return True
    xp = backend.xp_of(a)
    return bool(xp.isfinite(a.sum())) or bool(xp.isfinite(a).all())


_dot = np.dot


def _summary(vals: list[Any]) -> str:
    parts = []
    for v in vals:
        a = v._data if isinstance(v, Tensor) else v
        if hasattr(a, "shape") and getattr(a, "dtype", None) is not None and a.size:
            h = backend.to_host(a)
            bad = int(np.size(h) - np.count_nonzero(np.isfinite(h))) if h.dtype.kind == "f" else 0
            fin = h[np.isfinite(h)] if h.dtype.kind == "f" else h
            rng = f"min {fin.min():.4g} max {fin.max():.4g}" if fin.size else "no finite values"
            parts.append(f"{h.dtype}{tuple(h.shape)} {rng}, {bad} non-finite")
        else:
            parts.append(repr(a))
    return "; ".join(parts)


def check_forward(prim: Any, args: tuple, res: Any) -> None:
    """Raise FloatingPointError if ``prim``'s output is not finite (called by the tape's hook)."""
    outs = (res,) if isinstance(res, Tensor) else res
    if type(outs[0]._data) is not np.ndarray or _local.defer_all:
        _pending().forward(prim.name, args, outs)
        return
    if all(_finite(o._data) for o in outs):
        return
    inputs = [a._data if isinstance(a, Tensor) else a for a in args]
    created = all(_finite(a) for a in inputs if hasattr(a, "dtype"))
    raise FloatingPointError(
        f"gt.{prim.name} {'created' if created else 'propagated'} a non-finite value in the forward pass "
        f"at {tape._where() or '?'}; inputs: {_summary(list(args))}"
        + (". Its inputs were finite: check the op's domain (log of 0, division by 0, overflow)" if created else "")
    )


def check_backward(node: Any, g: Any, saved: list[Any], grads: Any) -> None:
    """Raise FloatingPointError if a VJP produced a non-finite cotangent (called by the sweep)."""
    first = next((gi for gi in grads if gi is not None), None)
    if first is None:
        return
    if type(first._data if isinstance(first, Tensor) else first) is not np.ndarray or _local.defer_all:
        _pending().backward(node, grads)
        return
    for k, gi in enumerate(grads):
        if gi is None:
            continue
        a = gi._data if isinstance(gi, Tensor) else gi
        if _finite(a):
            continue
        gs = g if isinstance(g, list) else [g]
        incoming_ok = all(_finite(x._data if isinstance(x, Tensor) else x) for x in gs if x is not None)
        info = getattr(node, "info", None)
        where = info[0] if info and info[0] else "?"
        raise FloatingPointError(
            f"the gradient of gt.{node.prim.name} (input {k}) "
            f"{'created' if incoming_ok else 'propagated'} a non-finite value in the backward pass; "
            f"the forward op ran at {where}; incoming gradient: {_summary(gs)}; saved values: {_summary(saved)}"
        )


# -- deferred checks: flags on the device, read once per phase --------------------------------


class _Local(threading.local):
    def __init__(self) -> None:
        self.pending: _Pending | None = None  # this thread's deferred checks not yet read
        self.defer_all = False  # check_numerics(deferred=True): host arrays deferred too


_local = _Local()


def _pending() -> _Pending:
    p = _local.pending
    if p is None:
        p = _local.pending = _Pending()
    return p


def _device_flag(xp: Any, a: Any) -> Any:
    """A 0-d bool array on ``a``'s device: whether ``a`` holds an inf or NaN (nothing read back)."""
    return xp.logical_not(xp.isfinite(a).all())


class _Pending:
    """One thread's deferred checks: flag buffers on the devices, and what each slot means.

    Slot ``k`` of the flags is the ``k``-th check in execution order; ``notes[k]`` says what
    it checked: ``("forward", op, where, input slots, output index)``, ``("backward", op, where,
    (), input index)``, or ``None`` for an input that no checked op produced (a constant or a
    Variable, flagged when first read, so that an op fed a non-finite one is "propagated").
    """

    CAP = 1024  # slots per buffer; a new buffer (no sync) when one is full

    def __init__(self) -> None:
        self.bufs: list[tuple[int, int, Any]] = []  # (first slot, slots used, device buffer)
        self.notes: list[Any] = []
        self.slot_of: dict[int, int] = {}  # tensor id -> the slot of its flag
        self._dev: str | None = None

    def add(self, a: Any, note: Any) -> int:
        k = len(self.notes)
        dev = backend.device_of(a)
        if not self.bufs or self.bufs[-1][1] == self.CAP or dev != self._dev:
            self.bufs.append((k, 0, backend.asarray_on(np.zeros(self.CAP, bool), dev)))
            self._dev = dev
        base, used, buf = self.bufs[-1]
        buf[used] = _device_flag(backend.xp_of(a), a)
        self.bufs[-1] = (base, used + 1, buf)
        self.notes.append(note)
        return k

    def _input(self, t: Tensor) -> int:
        s = self.slot_of.get(t._id)
        if s is None and getattr(getattr(t._data, "dtype", None), "kind", "") in ("f", "c"):
            s = self.slot_of[t._id] = self.add(t._data, None)
        return -1 if s is None else s

    def forward(self, name: str, args: tuple, outs: Any) -> None:
        ins = tuple(self._input(a) for a in args if isinstance(a, Tensor))
        where = tape._where()
        for j, o in enumerate(outs):
            if o._data.dtype.kind in "fc":
                self.slot_of[o._id] = self.add(o._data, ("forward", name, where, ins, j, _shape(o._data)))
        if len(self.notes) >= _MAX_PENDING:  # a long forward with no gradient: read now and then
            flush()

    def backward(self, node: Any, grads: Any) -> None:
        info = getattr(node, "info", None)
        where = info[0] if info and info[0] else None
        for k, gi in enumerate(grads):
            if gi is not None:
                a = gi._data if isinstance(gi, Tensor) else gi
                self.add(a, ("backward", node.prim.name, where, (), k, _shape(a)))

    def read(self) -> Any:
        """Read every flag (one copy per buffer: the sync), forget them; the first hit's note or None."""
        if not self.notes:
            return None
        flags = np.concatenate([backend.to_host(buf)[:used] for _, used, buf in self.bufs])
        notes = self.notes
        self.bufs, self.notes, self.slot_of, self._dev = [], [], {}, None
        for k in np.flatnonzero(flags):
            note = notes[k]
            if note is not None:
                created = not any(s >= 0 and flags[s] for s in note[3])
                return note, created
        return None  # only inputs no checked op used were non-finite


_MAX_PENDING = 1 << 16  # checks held before a read is forced (one sync per 65536 ops at most)


def _shape(a: Any) -> str:
    return f"{a.dtype}{tuple(a.shape)}"


def flush() -> None:
    """Read this thread's deferred flags; raise FloatingPointError naming the first op that hit.

    Called by the sweep when the forward ends and when the backward ends, and when a
    ``check_numerics`` block ends. Nothing pending (the host path, or nothing ran): no cost.
    """
    p = _local.pending
    if p is None or not p.notes:
        return
    hit = p.read()
    if hit is None:
        return
    (phase, name, where, _ins, k, shape), created = hit
    how = "created" if created else "propagated"
    if phase == "forward":
        msg = (
            f"gt.{name} {how} a non-finite value in the forward pass at {where or '?'} (output {k}, {shape}; "
            "found by the deferred check at the end of the forward)"
        )
        if created:
            msg += ". Its inputs were finite: check the op's domain (log of 0, division by 0, overflow)"
    else:
        msg = (
            f"the gradient of gt.{name} (input {k}) {how} a non-finite value in the backward pass; "
            f"the forward op ran at {where or '?'} (cotangent {shape}; found by the deferred check at the end "
            "of the backward)"
        )
    raise FloatingPointError(msg)


class _Checks:
    """What an observer of role ``"numerics"`` offers the op path and the sweep (gputape.core.state)."""

    observes = "numerics"
    check_forward = staticmethod(check_forward)
    check_backward = staticmethod(check_backward)
    flush = staticmethod(flush)


class _Switch(_Checks):
    """The entry :func:`enable_check_numerics` puts on the thread's observer stack."""


def enable_check_numerics() -> None:
    """Turn the check on for this thread (until :func:`disable_check_numerics`).

    Each call adds one switch and each :func:`disable_check_numerics` removes the latest, so
    a library that turns the check on and off again leaves a caller's switch on.

    >>> import gputape as gt
    >>> gt.debug.enable_check_numerics(); gt.debug.disable_check_numerics()
    """
    _state.push(_Switch())


def disable_check_numerics() -> None:
    """Undo the latest :func:`enable_check_numerics` of this thread."""
    obs = _state.tls.obs
    switch = next((e for e in reversed(obs.stack) if type(e) is _Switch), None) if obs is not None else None
    if switch is None:
        raise RuntimeError("gt.debug.disable_check_numerics(): the check is not enabled in this thread")
    _state.pop(switch)
    flush()


class check_numerics(_Checks, _state.Scope):  # noqa: N801 - used like a function, as contextlib's managers
    """Raise ``FloatingPointError`` at the first op (forward or backward) that yields inf or NaN.

    >>> import gputape as gt
    >>> x = gt.constant([1.0, 0.0])
    >>> with gt.debug.check_numerics():
    ...     try:
    ...         gt.log(x)
    ...     except FloatingPointError as e:
    ...         print(str(e).split(" at ")[0])
    gt.log created a non-finite value in the forward pass

    ``deferred=True`` checks host arrays the way device arrays are always checked: one flag
    per op output, read at the end of the forward, of the backward and of the block (see the
    module's docstring); the error then comes from there, not from the op.

    >>> with gt.debug.check_numerics(deferred=True):
    ...     try:
    ...         with gt.GradientTape() as tape:
    ...             tape.watch(x); y = gt.sum(gt.log(x))
    ...         tape.gradient(y, x)
    ...     except FloatingPointError as e:
    ...         print(str(e).split(" at ")[0])
    gt.log created a non-finite value in the forward pass
    """

    def __init__(self, deferred: bool = False) -> None:
        self.deferred = bool(deferred)

    def _opening(self) -> None:
        # numpy's own warnings are silenced: the check reports the op instead
        self._errstate = np.errstate(divide="ignore", invalid="ignore", over="ignore")
        self._errstate.__enter__()
        self._defer_before = _local.defer_all
        _local.defer_all = self.deferred or self._defer_before

    def _closed(self) -> None:
        _local.defer_all = self._defer_before
        self._errstate.__exit__(None, None, None)

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if exc[0] is None:
            flush()  # what the last phase left unread
        elif _local.pending is not None:
            _local.pending.read()  # an error is on its way already: forget the flags


class record_locations(_state.Scope):  # noqa: N801 - used like a function, as contextlib's managers
    """Record the user's file:line, output shape and dtype of every op taped inside the block
    (``tape.summary()`` shows them; ``explain`` uses them). Costs a stack walk per recorded op.

    >>> import gputape as gt
    >>> with gt.debug.record_locations():
    ...     pass
    """

    observes = "locations"
