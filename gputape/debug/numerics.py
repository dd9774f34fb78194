"""Where was the NaN born? ``gt.debug.check_numerics()``.

While on, every op's output (forward) and every cotangent a VJP produces
(backward) is checked; the first non-finite value raises ``FloatingPointError``
naming the op, the phase, whether the op created the value from finite inputs
or propagated it, the user's file:line of the forward op, and its inputs.

It is an entry on the thread's observer stack (:mod:`gputape._state`), so it
rides the recording slow path: with it off ops pay nothing, and it checks the
ops of the thread that turned it on (as TensorFlow's). On the CPU
the check is one reduction per array (a sum, exact check only when the sum is
not finite). The GPU version (one fused flag per op, one sync) comes with the
GPU backend.
"""

from __future__ import annotations

from math import isfinite as _isfinite
from typing import Any

import numpy as np

from .. import _state, backend, tape
from ..tensor import FLOAT_DTYPES, Tensor


def _finite(a: Any) -> bool:
    # One reduction, no temporary: a NaN or inf anywhere makes the reduction non-finite.
    # For contiguous float32/float64 it is v . v, a BLAS dot (3-4x faster than the pairwise
    # sum numpy does); either may overflow for finite values, so a non-finite result is
    # confirmed by the exact elementwise test. (check_numerics() silences numpy's warnings.)
    if type(a) is np.ndarray:
        dt = a.dtype
        if dt.kind != "f":
            return True
        if dt.char in "fd" and a.flags.c_contiguous:
            v = a.reshape(-1)
            if _isfinite(_dot(v, v)):
                return True
        elif _isfinite(np.add.reduce(a, axis=None)):
            return True
        return bool(np.isfinite(a).all())
    if not hasattr(a, "dtype") or backend.xp_of(a) is np:
        return _finite(np.asarray(a))
    if a.dtype not in FLOAT_DTYPES:
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


class _Switch:
    """The entry :func:`enable_check_numerics` puts on the thread's observer stack."""

    observes = "numerics"


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


class check_numerics(_state.Scope):  # noqa: N801 - used like a function, as contextlib's managers
    """Raise ``FloatingPointError`` at the first op (forward or backward) that yields inf or NaN.

    >>> import gputape as gt
    >>> x = gt.constant([1.0, 0.0])
    >>> with gt.debug.check_numerics():
    ...     try:
    ...         gt.log(x)
    ...     except FloatingPointError as e:
    ...         print(str(e).split(" at ")[0])
    gt.log created a non-finite value in the forward pass
    """

    observes = "numerics"

    def _opening(self) -> None:
        # numpy's own warnings are silenced: the check reports the op instead
        self._errstate = np.errstate(divide="ignore", invalid="ignore", over="ignore")
        self._errstate.__enter__()

    def _closed(self) -> None:
        self._errstate.__exit__(None, None, None)


class record_locations(_state.Scope):  # noqa: N801 - used like a function, as contextlib's managers
    """Record the user's file:line, output shape and dtype of every op taped inside the block
    (``tape.summary()`` shows them; ``explain`` uses them). Costs a stack walk per recorded op.

    >>> import gputape as gt
    >>> with gt.debug.record_locations():
    ...     pass
    """

    observes = "locations"
