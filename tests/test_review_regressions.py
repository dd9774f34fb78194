"""Regressions found reviewing the recording/typed-number/native changes (issue 15): each test
failed before its fix, or is marked xfail(strict=True) where the fix belongs to another file."""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt


@pytest.mark.parametrize("bad", [3.0, np.ones(2, np.float32), None, "w"], ids=["float", "ndarray", "None", "str"])
@pytest.mark.parametrize("persistent", [False, True])
def test_a_bad_single_source_is_a_clear_error_and_leaves_the_tape_usable(bad, persistent):
    x = gt.Variable(np.array([1.0, 2.0], np.float32))
    with gt.GradientTape(persistent=persistent) as t:
        loss = gt.sum(x * x)
    with pytest.raises(ValueError, match=r"GradientTape\.gradient: sources must be gt\.Tensors"):
        t.gradient(loss, bad)
    # an argument error consumes nothing (TensorFlow's rule): the one gradient still comes
    np.testing.assert_array_equal(t.gradient(loss, x).numpy(), np.array([2.0, 4.0], np.float32))
