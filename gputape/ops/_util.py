"""Helpers shared by the op modules (axis handling, the no-params dict)."""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor

NOPARAMS: dict[str, Any] = {}  # shared, never mutated: most ops take no parameters


def norm_axes(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    """Normalise ``axis`` (None, int or tuple) to a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, Tensor):
        axis = axis.numpy().tolist()
    axes = (axis,) if isinstance(axis, (int,)) or hasattr(axis, "__index__") else tuple(axis)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"gt.{op}: axis {a} is out of range for a tensor of rank {ndim}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"gt.{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def norm_axis(axis: int, ndim: int, op: str) -> int:
    """Normalise a single axis to a non-negative int."""
    a = int(axis)
    if not -ndim <= a < ndim:
        raise ValueError(f"gt.{op}: axis {a} is out of range for a tensor of rank {ndim}")
    return a % ndim


def sum_to(F: Any, x: Any, shape: tuple[int, ...], nb: int = 0) -> Any:
    """Reduce (or broadcast) a cotangent ``x`` to ``shape``: undoing broadcasting, in one place.

    The first ``nb`` axes of both are a batch of cotangents (``jacobian``) and
    are kept: broadcasting inserted its axes after them.
    """
    xs = x.shape
    if xs == shape:
        return x
    extra = len(xs) - len(shape)
    if extra < 0:
        if nb and len(xs) >= nb and xs[:nb] == shape[:nb]:
            x = F.reshape(x, xs[:nb] + (1,) * (-extra) + xs[nb:])
        else:
            return F.broadcast_to(x, shape)
        xs = x.shape
        extra = 0
    axes = tuple(range(nb, nb + extra)) + tuple(
        nb + extra + i for i, s in enumerate(shape[nb:]) if s == 1 and xs[nb + extra + i] != 1
    )
    if axes:
        x = F.sum(x, axis=axes, keepdims=True)
        if extra:
            x = F.reshape(x, xs[:nb] + x.shape[nb + extra :])
    if x.shape != shape:
        x = F.broadcast_to(x, shape)
    return x
