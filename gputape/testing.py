"""Gradient checking: ``check_grads`` compares a function's VJP with finite differences.

It runs in float64 (complex128 for complex arguments), along one random direction per input (a
dot-product test), so it checks every entry of the gradient at the cost of two extra function
evaluations. ``order=2`` repeats the check on the gradient function itself, which exercises
nested tapes (a tape recording a gradient computation).

Complex values are pairs of reals: the dot product of two complex arrays is ``Re(sum(conj(a) b))``,
which is what TensorFlow's convention makes of a VJP (the gradient of the real loss
``Re(sum(conj(v) f(z)))`` is ``dL/dx + i dL/dy``). With a complex argument each order is checked
twice: along a real direction and along an imaginary one, so that a VJP right in one and wrong
in the other (a missing conjugate) fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .core.tape import GradientTape
from .core.tensor import Tensor, _wrap


def _flat_out(y: Any) -> Tensor:
    from .ops import concatenate, reshape

    if isinstance(y, (list, tuple)):
        parts = [reshape(o, (-1,)) for o in y if o is not None]
        return concatenate(parts) if parts else _wrap(np.zeros(0))
    return y


def _vdot(a: np.ndarray, b: np.ndarray) -> float:
    """The real dot product (complex values as pairs of reals)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        return float(np.sum(np.real(np.conj(a.astype(np.complex128)) * b.astype(np.complex128))))
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


def _vjp(f: Callable[..., Any], xs: list[Tensor], v: Tensor) -> list[Tensor]:
    with GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = _flat_out(f(*xs))
    return tape.gradient(y, xs, output_gradients=v, unconnected_gradients="zero")


def _as64(a: Any) -> np.ndarray:
    """An argument as float64, or complex128 when it is complex (gputape's conversion rules and errors)."""
    from .core.tensor import _to_array

    arr = a._data if isinstance(a, Tensor) else _to_array(a)
    return np.array(arr, dtype=np.complex128 if arr.dtype.kind == "c" else np.float64)


def _random_like(rng: np.random.Generator, x: Any) -> np.ndarray:
    d = rng.standard_normal(x.shape)
    return d + 1j * rng.standard_normal(x.shape) if x.dtype.kind == "c" else d


__all__ = ["check_grads"]


def check_grads(
    f: Callable[..., Any],
    *args: Any,
    order: int = 2,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    seed: int = 0,
) -> None:
    """Check the gradients of ``f`` at ``args`` against central differences, up to ``order``.

    Every argument is converted to a float64 tensor (complex128 if it is complex) and treated as
    an input; close over anything that should stay fixed. ``f`` returns a tensor (or a list of
    them). Complex arguments are checked along a real and an imaginary direction (TensorFlow's
    convention for complex gradients). Raises ``AssertionError`` naming the order and both values.

    >>> import gputape as gt
    >>> gt.testing.check_grads(lambda x: gt.sin(x) * x, [0.3, 1.2], order=2)
    >>> gt.testing.check_grads(lambda z: gt.exp(z) * gt.conj(z), [0.3 + 0.5j, -1.2j], order=2)
    """
    if order < 1:
        raise ValueError("check_grads: order must be at least 1")
    rng = np.random.default_rng(seed)
    if not callable(f):
        raise TypeError(f"gt.testing.check_grads: argument f ({type(f).__name__}) is not callable; pass the function")
    xs = [_wrap(_as64(a)) for a in args]
    cplx = any(x.dtype.kind == "c" for x in xs)
    y0 = _flat_out(f(*xs))
    if not isinstance(y0, Tensor):
        raise TypeError(f"check_grads: f must return a gt.Tensor (or a list of them), got {type(y0).__name__}")
    if y0.dtype != np.float64 and y0.dtype != np.complex128:
        raise AssertionError(f"check_grads: f returned {y0.dtype} for float64/complex128 inputs; ops must keep them")
    v = _wrap(_random_like(rng, y0))
    us = [_random_like(rng, x) for x in xs]
    grads = _vjp(f, xs, v)
    # a complex argument: the real and the imaginary parts of its direction, one check each
    directions = (
        [("", us)]
        if not cplx
        else [
            (" (real direction)", [u.real for u in us]),
            (" (imaginary direction)", [1j * u.imag if u.dtype.kind == "c" else 0 * u for u in us]),
        ]
    )
    for which, ds in directions:
        analytic = sum(_vdot(g._data, u) for g, u in zip(grads, ds))

        def at(t: float, ds: list) -> float:
            shifted = [_wrap(x._data + t * u) for x, u in zip(xs, ds)]
            return _vdot(v._data, _flat_out(f(*shifted))._data)

        numeric = (at(eps, ds) - at(-eps, ds)) / (2 * eps)
        scale = max(abs(numeric), abs(analytic), 1.0)
        if not abs(numeric - analytic) <= atol + rtol * scale:
            raise AssertionError(
                f"check_grads: order-1 gradient mismatch{which}: reverse mode gives {analytic!r}, "
                f"finite differences give {numeric!r} (difference {numeric - analytic:.3e})"
            )
    if order > 1:

        def grad_fn(*xs_and_v: Tensor) -> list[Tensor]:
            return _vjp(f, list(xs_and_v[:-1]), xs_and_v[-1])

        check_grads(grad_fn, *xs, v, order=order - 1, eps=eps, rtol=rtol, atol=atol, seed=seed + 1)
