"""The raw (numpy) fast paths inside VJPs give what the general path gives, down to the view.

The sweep and the compiled backward run the same VJPs; these tests pin each shortcut a VJP
takes on numpy arrays to the numpy call it stands for.
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt
from gputape.ops import raw_namespace
from gputape.ops.reduce import _widen

F = raw_namespace(np)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize(
    ("gshape", "shape"),
    [((1,), (4,)), ((1, 1), (2, 3)), ((), (3,)), ((1,), (0,)), ((1, 1, 1), (2, 1, 5)), ((), ()), ((1,), (2, 3))],
)
def test_widen_is_np_broadcast_to(gshape, shape, dtype):
    g = (np.arange(1, 2, dtype=dtype) * 2.5).reshape(gshape)
    want = np.broadcast_to(g, shape)
    got = _widen(F, g, shape)
    assert got.shape == want.shape and got.dtype == want.dtype and got.strides == want.strides
    assert got.tobytes() == want.tobytes()
    assert not got.flags.writeable and got.flags.c_contiguous == want.flags.c_contiguous
    with pytest.raises(ValueError):
        got[...] = 0  # read-only, as np.broadcast_to's view


def test_widen_takes_the_general_path_otherwise():
    g = np.arange(3.0).reshape(3, 1)  # more than one element: np.broadcast_to itself
    np.testing.assert_array_equal(_widen(F, g, (3, 2)), np.broadcast_to(g, (3, 2)))
    with pytest.raises(ValueError):
        _widen(F, np.ones((1, 1)), (4,))  # a shape np.broadcast_to refuses stays refused


def test_mean_and_sum_gradients_through_the_fast_path():
    x = gt.constant(np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]]))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        m = gt.mean(x)
        s = gt.sum(x * x)
    np.testing.assert_array_equal(tape.gradient(m, x).numpy(), np.full((2, 3), 1 / 6))
    np.testing.assert_array_equal(tape.gradient(s, x).numpy(), 2 * x.numpy())
