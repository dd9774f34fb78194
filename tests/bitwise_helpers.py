"""Test helper: two results are the same bits (dtype, shape and bytes), or both None."""

from __future__ import annotations

import numpy as np


def same_bits(a, b, what=""):
    if a is None or b is None:
        assert a is None and b is None, what
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    assert a.tobytes() == b.tobytes(), (what, a, b)
