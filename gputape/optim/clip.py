"""Gradient clipping by norm (``gt.clip_by_norm``, ``gt.clip_by_global_norm``, ``gt.global_norm``).

TensorFlow's functions, differentiable (written with gputape's ops). Re-exported by
:mod:`gputape.optim`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..core.tensor import Tensor, as_tensor, constant
from ..ops import maximum, sqrt, square, where
from ..ops import sum as _sum
from ..ops._util import norm_list
from .schedules import _real

# -- clipping -------------------------------------------------------------------------


def global_norm(t_list: Iterable[Any]) -> Tensor:
    """``sqrt(sum of squares of every entry of every tensor)``; None entries are skipped.

    >>> import gputape as gt
    >>> float(gt.global_norm([gt.constant([3.0]), None, gt.constant([[4.0]])]))
    5.0
    """
    total = None
    for t in norm_list(t_list, "global_norm", "a list of tensors"):
        if t is None:
            continue
        s = _sum(square(as_tensor(t)))
        total = s if total is None else total + s
    return sqrt(total) if total is not None else constant(0.0)


def clip_by_global_norm(t_list: Iterable[Any], clip_norm: float, use_norm: Any = None) -> tuple[list[Any], Tensor]:
    """Scale all tensors by ``clip_norm / max(global_norm, clip_norm)``; returns ``(clipped, global_norm)``.

    TensorFlow's function: None entries stay None; the returned norm is the
    norm before clipping; a non-finite norm makes every entry NaN, so a
    diverged step is visible rather than silently zeroed.

    >>> import gputape as gt
    >>> clipped, norm = gt.clip_by_global_norm([gt.constant([3.0]), gt.constant([4.0])], 1.0)
    >>> [round(float(c[0]), 2) for c in clipped], float(norm)
    ([0.6, 0.8], 5.0)
    """
    t_list = norm_list(t_list, "clip_by_global_norm", "a list of tensors")
    clip = _real("gt.clip_by_global_norm", "clip_norm", clip_norm, low_open=True)
    norm = global_norm(t_list) if use_norm is None else as_tensor(use_norm)
    with np.errstate(invalid="ignore"):
        # norm - norm is 0 for a finite norm and NaN otherwise (TensorFlow's trick).
        scale = clip / maximum(norm, clip) + (norm - norm)
        out = [None if t is None else as_tensor(t) * scale.astype(as_tensor(t).dtype) for t in t_list]
    return out, norm


def clip_by_norm(t: Any, clip_norm: float, axes: Any = None) -> Tensor:
    """Scale ``t`` so that its L2 norm (over ``axes``, all by default) is at most ``clip_norm``.

    Differentiable everywhere, including at ``t == 0``. A number ``clip_norm``
    must be in (0, inf) (checked; a tensor or array is used as given).

    >>> import gputape as gt
    >>> gt.clip_by_norm(gt.constant([3.0, 4.0], "float64"), 1.0).numpy().round(2).tolist()
    [0.6, 0.8]
    >>> gt.clip_by_norm(gt.constant([[3.0, 0.1], [4.0, 0.0]], "float64"), 1.0, axes=0).numpy().round(2).tolist()
    [[0.6, 0.1], [0.8, 0.0]]
    """
    if not hasattr(clip_norm, "shape"):  # tensors and arrays are used as given
        clip_norm = _real("gt.clip_by_norm", "clip_norm", clip_norm, low_open=True)
    t = as_tensor(t)
    l2sum = _sum(t * t, axis=axes, keepdims=True)
    pos = l2sum > 0
    # sqrt only where positive: its derivative at 0 is infinite (TensorFlow's guard).
    norm = where(pos, sqrt(where(pos, l2sum, 1.0)), l2sum)
    return t * clip_norm / maximum(norm, clip_norm)


__all__ = ["clip_by_global_norm", "clip_by_norm", "global_norm"]
