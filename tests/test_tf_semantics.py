"""TensorFlow's semantics where gputape used to differ (issue 26, deliverable 5).

Each test states TensorFlow's documented behaviour, mostly as TensorFlow's own unit tests
(backprop_test.py, custom_gradient_test.py) expect it.
"""

import pytest

import gputape.tf as tf


def test_watched_variables_are_in_creation_order():
    # TensorFlow lists a tape's variables in creation order, whatever order they were read in.
    a, b, c = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b"), tf.Variable(3.0, name="c")
    with tf.GradientTape() as t:
        y = c * b
        y = y * a
    assert t.watched_variables() == (a, b, c)
    with tf.GradientTape(watch_accessed_variables=False) as t:
        t.watch(c)
        t.watch(a)
    assert t.watched_variables() == (a, c)


def test_watched_variables_after_unwatch_keep_creation_order():
    a, b, c = tf.Variable(1.0), tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape() as t:
        y = c + b + a
        t.unwatch(b)
    assert t.watched_variables() == (a, c)
    del y


def test_custom_gradient_with_a_variable_argument_treats_it_as_an_input():
    # TensorFlow's custom_gradient_test: sq(v) with grad dr * 2 * x + 1 at 3.0 gives 7.0.
    @tf.custom_gradient
    def sq(x):
        def grad(dr):
            return dr * 2 * x + 1

        return x * x, grad

    v = tf.Variable(3.0)
    with tf.GradientTape() as t:
        y = sq(v)
    assert float(t.gradient(y, v)) == 7.0


def test_custom_gradient_variable_argument_and_a_captured_variable():
    # The argument is an input; a variable read from outside still comes through `variables`.
    w = tf.Variable(2.0, name="w")

    @tf.custom_gradient
    def f(x):
        def grad(dy, variables=None):
            assert [v.name for v in variables] == ["w:0"]
            return dy * w, [dy * x]

        return x * w, grad

    v = tf.Variable(3.0)
    with tf.GradientTape() as t:
        y = f(v)
    gv, gw = t.gradient(y, [v, w])
    assert (float(gv), float(gw)) == (2.0, 3.0)


def test_two_reads_of_a_variable_are_two_tensors():
    # TensorFlow's backprop_test: two convert_to_tensor reads, both watched, z = a * b -> [1.0, 1.0].
    x = tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as t:
        a, b = tf.convert_to_tensor(x), tf.convert_to_tensor(x)
        t.watch(a)
        t.watch(b)
        z = a * b
    assert [float(g) for g in t.gradient(z, [a, b])] == [1.0, 1.0]
    assert float(t.gradient(z, x)) == 2.0  # both reads lead back to the variable


def test_a_read_outside_the_tape_is_a_tensor_of_its_own():
    x = tf.Variable(3.0)
    a = tf.convert_to_tensor(x)
    with tf.GradientTape() as t:
        t.watch(a)
        z = a * x
    assert float(t.gradient(z, a)) == 3.0
    assert a.numpy() == 3.0 and type(a).__name__ == "Tensor"


def test_batch_jacobian_first_dimensions_must_match():
    # TensorFlow's backprop_test testBatchJacobianBadShapes.
    x = tf.random.uniform([2, 3])
    with tf.GradientTape(persistent=True) as g:
        g.watch(x)
        y = tf.concat([x, x], axis=0)
    text = r"Need first dimension of target shape \(4, 3\) and source shape \(2, 3\) to match"
    with pytest.raises(ValueError, match=text):
        g.batch_jacobian(y, x)


@pytest.mark.parametrize(("xs", "ys"), [([2], [2, 2]), ([2, 2], [2])])
def test_batch_jacobian_rank_below_two(xs, ys):
    # TensorFlow's backprop_test testBatchJacobianBadInputRank / BadOutputRank.
    x = tf.random.uniform(xs)
    with tf.GradientTape(persistent=True) as g:
        g.watch(x)
        y = tf.random.uniform(ys) * tf.reduce_sum(x)
    with pytest.raises(ValueError, match=r"Shape \(2,\) must have rank at least 2"):
        g.batch_jacobian(y, x)
