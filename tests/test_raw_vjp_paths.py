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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4,), (128,), (3, 7), (5, 1, 3), (1,)])
def test_a_scalar_cotangent_of_a_full_mean_or_sum_gives_the_arrays_bits(shape, dtype):
    # after `negative` a loss's cotangent is a numpy scalar: mean's VJP divides it as a scalar and
    # sum's widens it without the reshape; the bits are those of the one-element-array path
    from gputape.ops.reduce import _expand

    x = gt.constant(np.ones(shape, dtype))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        gt.mean(x)
        gt.sum(x)
    mean_node, sum_node = tape._nodes
    count = int(np.prod(shape))
    for v in np.random.default_rng(3).standard_normal(40).astype(dtype):
        g = -np.array(v, dtype)
        assert type(g) is dtype  # a scalar, as the compiled backward and the sweep hand it on
        want = np.broadcast_to(_expand(F, np.array(g), 0, mean_node) / count, shape)
        got = mean_node.prim.vjp(F, g, (True,), 0, mean_node)[0]
        assert got.dtype == want.dtype and got.shape == shape and got.tobytes() == want.tobytes()
        got = sum_node.prim.vjp(F, g, (True,), 0, sum_node)[0]
        assert got.dtype == dtype and got.shape == shape and np.all(got == g) and not got.flags.writeable


def test_the_loss_mean_gradient_is_exact_through_negative():
    # -mean(x): the scalar path end to end, the sweep and the compiled backward alike
    x = gt.constant(np.arange(1.0, 8.0, dtype=np.float32))
    for compile_ in (False, True, True, True):
        with gt.GradientTape(compile=compile_) as tape:
            tape.watch(x)
            loss = -gt.mean(x * 2.0)
        g = tape.gradient(loss, x).numpy()
        assert g.dtype == np.float32 and g.flags.c_contiguous
        np.testing.assert_array_equal(g, np.full(7, np.float32(-1 / 7) * np.float32(2.0)))
