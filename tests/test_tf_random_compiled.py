"""tf.random's stateful ops inside tf.function: a replay draws the next numbers, as an eager call does.

They were drawn once at trace time and replayed as constants (every call of a compiled step saw
the same "random" numbers); each case below fails that way.
"""

import numpy as np
import pytest

import gputape.tf as tf

OPS = {
    "normal": lambda lg, g: tf.random.normal([3]),
    "normal_op_seed": lambda lg, g: tf.random.normal([3], seed=5),
    "uniform": lambda lg, g: tf.random.uniform([4], minval=-1.0, maxval=2.0),
    "uniform_int": lambda lg, g: tf.random.uniform([6], minval=0, maxval=1000, dtype=tf.int32),
    "truncated_normal": lambda lg, g: tf.random.truncated_normal([3]),
    "categorical": lambda lg, g: tf.random.categorical(lg, 50),
    "Generator.normal": lambda lg, g: g.normal([3]),
    "Generator.uniform": lambda lg, g: g.uniform([3]),
    "Generator.truncated_normal": lambda lg, g: g.truncated_normal([3]),
    "Generator.uniform_full_int": lambda lg, g: g.uniform_full_int([3]),
    "Generator.make_seeds": lambda lg, g: g.make_seeds(2),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_compiled_draw_is_new_each_call_and_equals_the_eager_draws(op):
    draw = OPS[op]
    logits = tf.constant(np.zeros((2, 5), "float32"))

    def body(lg, g):
        return draw(lg, g) * 1  # an op after the draw, so the replay must feed it the new numbers

    f = tf.function(body)
    tf.random.set_seed(11)
    g = tf.random.Generator.from_seed(4)
    compiled = [f(logits, g).numpy() for _ in range(4)]
    tf.random.set_seed(11)
    g = tf.random.Generator.from_seed(4)
    eager = [body(logits, g).numpy() for _ in range(4)]
    assert f.experimental_get_tracing_count() == 1
    for c, e in zip(compiled, eager):
        np.testing.assert_array_equal(c, e)
    assert not all((compiled[0] == c).all() for c in compiled[1:]), f"{op}: every compiled call drew the same numbers"


def test_categorical_follows_new_logits_without_a_retrace():
    f = tf.function(lambda lg: tf.random.categorical(lg, 20))
    assert (f(tf.constant([[0.0, -1e9, -1e9]])).numpy() == 0).all()
    assert (f(tf.constant([[-1e9, -1e9, 0.0]])).numpy() == 2).all()
    assert (f(tf.constant([[-1e9, 0.0, -1e9]])).numpy() == 1).all()
    assert f.experimental_get_tracing_count() == 1
