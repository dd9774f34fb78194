"""tf.function semantics, as TensorFlow's tf.function guide writes them (issue 13 item 6).

The programs are written against ``gputape.tf`` exactly as they would be against
TensorFlow; expected values come from TensorFlow's documented behaviour and
closed forms (each call's arithmetic done by hand), never from gputape.
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape.tf as tf

DTYPES = ["float32", "float64"]


# -- scalar Variables updated by a compiled step --------------------------------------------


def _scalar_steps(dtype: str):
    """(name, update, closed form of v after n calls with x = 2) for v = Variable(1.0)."""
    return [
        ("assign", lambda v, x: v.assign(v * x), lambda n: 2.0**n),
        ("assign_add", lambda v, x: v.assign_add(x), lambda n: 1.0 + 2.0 * n),
        ("assign_sub", lambda v, x: v.assign_sub(x * 0.25), lambda n: 1.0 - 0.5 * n),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(3))
def test_scalar_variable_update_every_call(dtype, which):
    # the guide's counter: a scalar Variable updated by a compiled step (used to crash on call 2)
    name, update, expected = _scalar_steps(dtype)[which]
    v = tf.Variable(1.0, dtype=dtype)

    @tf.function
    def step(x):
        update(v, x)
        return v.read_value()

    for n in range(1, 5):
        out = step(tf.constant(2.0, dtype=dtype))
        assert out.numpy() == pytest.approx(expected(n)), (name, n)
        assert v.numpy() == pytest.approx(expected(n)) and v.dtype == np.dtype(dtype)
        assert np.ndim(v.numpy()) == 0
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(3))
def test_scalar_variable_update_with_a_tape_inside(dtype, which):
    # a tape inside the step holds the variable's value while it is updated (copy-on-write)
    name, update, expected = _scalar_steps(dtype)[which]
    v = tf.Variable(1.0, dtype=dtype)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = v * v * x  # dy/dv = 2 v x
        g = tape.gradient(y, v)
        update(v, x)
        return y, g

    for n in range(1, 5):
        before = expected(n - 1)
        y, g = step(tf.constant(2.0, dtype=dtype))
        assert y.numpy() == pytest.approx(before * before * 2.0), (name, n)
        assert g.numpy() == pytest.approx(4.0 * before), (name, n)
        assert v.numpy() == pytest.approx(expected(n))
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(3))
def test_scalar_variable_update_called_under_an_outer_tape(dtype, which):
    # called while a tape records, the step runs eagerly (the tape sees its ops)
    name, update, expected = _scalar_steps(dtype)[which]
    v = tf.Variable(1.0, dtype=dtype)

    @tf.function
    def step(x):
        y = v * x
        update(v, x)
        return y

    for n in range(1, 4):
        with tf.GradientTape() as tape:
            y = step(tf.constant(2.0, dtype=dtype))
            y2 = step(tf.constant(2.0, dtype=dtype))
        assert y.numpy() == pytest.approx(2.0 * expected(2 * n - 2)), name
        assert y2.numpy() == pytest.approx(2.0 * expected(2 * n - 1)), name
        assert tape.gradient(y, v).numpy() == pytest.approx(2.0)
        assert v.numpy() == pytest.approx(expected(2 * n))


def test_eager_scalar_update_while_a_tape_holds_the_value():
    v = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = v * 3.0
        v.assign_sub(0.5)
        v.assign_add(0.25)
        v.assign_add(tf.constant(1.0))
    assert v.numpy() == pytest.approx(1.75) and v.dtype == np.float32
    assert isinstance(v.numpy(), np.ndarray) or np.ndim(v.numpy()) == 0
    assert tape.gradient(y, v).numpy() == pytest.approx(3.0)
