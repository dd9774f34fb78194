"""gt.function replays index by each call's own masks and index arrays (they were baked in at trace time)."""

from __future__ import annotations

import numpy as np

import gputape as gt


def test_boolean_mask_computed_inside_the_function():
    @gt.function
    def f(x):
        return gt.sum(x[x > 0])

    assert float(f(np.array([1.0, -1.0, 1.0]))) == 2.0
    assert float(f(np.array([3.0, 5.0, -1.0]))) == 8.0  # the trace's mask gave 2.0
    assert f.tracing_count == 1


def test_index_array_passed_as_an_argument():
    @gt.function
    def f(x, i):
        return gt.sum(x[i])

    x = np.array([1.0, 2.0, 3.0])
    assert float(f(x, np.array([0, 0]))) == 2.0
    assert float(f(x, np.array([2, 2]))) == 6.0
    assert float(f(x, np.array([1, 2]))) == 5.0


def test_index_tensor_from_argmax():
    @gt.function
    def f(x):
        return x[gt.argmax(x)]

    assert float(f(np.array([1.0, 5.0, 3.0]))) == 5.0
    assert float(f(np.array([9.0, 2.0, 3.0]))) == 9.0


def test_gradient_scatters_by_each_calls_indices():
    w = gt.Variable(np.array([1.0, 2.0, 3.0]))

    @gt.function
    def grad(i):
        with gt.GradientTape() as tape:
            y = gt.sum(w[i] ** 2)
        return tape.gradient(y, w)

    for i in (np.array([0, 0]), np.array([2, 1]), np.array([1, 1])):
        with gt.GradientTape() as tape:
            y = gt.sum(w[i] ** 2)
        want = tape.gradient(y, w).numpy()
        np.testing.assert_array_equal(grad(i).numpy(), want)


def test_mixed_key_slices_ints_and_arrays_match_numpy():
    x = np.arange(60.0).reshape(3, 4, 5)

    @gt.function
    def f(x, i, j):
        return x[i, 1:, j] * 1.0

    for i, j in ((np.array([0, 2]), np.array([4, 0])), (np.array([1, 1]), np.array([3, 3]))):
        np.testing.assert_array_equal(f(x, i, j).numpy(), x[i, 1:, j])
