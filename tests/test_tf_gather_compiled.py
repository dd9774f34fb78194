"""tf.gather inside tf.function: each call's indices are read, and checked, at replay.

Before, int32 indices were copied to int64 outside the record, so the first call's indices
were frozen into the trace (later calls gathered the same rows), and a replay never checked
the range (a negative index would have wrapped)."""

import numpy as np
import pytest

import gputape.tf as tf

X = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_each_call_gathers_its_own_indices(dtype):
    f = tf.function(lambda x, i: tf.gather(x, i, axis=1) * 2.0)
    for idx in ([0, 2], [2, 1], [1, 1]):
        i = tf.constant(np.array(idx, dtype))
        np.testing.assert_array_equal(f(X, i).numpy(), 2.0 * X.numpy()[:, idx])
    assert f.experimental_get_tracing_count() == 1


def test_batch_dims_gathers_each_calls_indices():
    f = tf.function(lambda x, i: tf.gather(x, i, batch_dims=1))
    for idx in ([[0], [2]], [[2], [1]]):
        want = np.take_along_axis(X.numpy(), np.array(idx), axis=1)
        np.testing.assert_array_equal(f(X, tf.constant(idx)).numpy(), want)
    assert f.experimental_get_tracing_count() == 1


def test_a_replay_refuses_an_index_out_of_range():
    f = tf.function(lambda x, i: tf.gather(x, i))
    f(X, tf.constant([0, 1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[0\] = -1 is not in \[0, 2\)"):
        f(X, tf.constant([-1, 0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1\] = 2 is not in \[0, 2\)"):
        f(X, tf.constant([0, 2]))


def test_the_gradient_reaches_params_through_a_compiled_gather():
    w = tf.Variable(np.arange(6.0).reshape(3, 2))

    @tf.function
    def grad(i):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(tf.gather(w, i))
        return tape.gradient(y, w)

    for idx in ([0, 0], [2, 1]):
        want = np.zeros((3, 2))
        np.add.at(want, idx, 1.0)
        np.testing.assert_array_equal(grad(tf.constant(idx)).numpy(), want)


def test_embedding_lookup_and_the_embedding_layer_read_each_calls_ids():
    table = tf.Variable(np.arange(8.0).reshape(4, 2))
    look = tf.function(lambda i: tf.nn.embedding_lookup(table, i))
    layer = tf.keras.layers.Embedding(4, 2)
    layer.build(None)
    embed = tf.function(lambda i: layer(i))
    for idx in ([0, 3], [2, 1]):
        np.testing.assert_array_equal(look(tf.constant(idx)).numpy(), table.numpy()[idx])
        # float ids (Keras casts whole-number floats): the cast is recorded, not frozen
        np.testing.assert_array_equal(
            embed(tf.constant(np.array(idx, "float32"))).numpy(), layer.embeddings.numpy()[idx]
        )
    with pytest.raises(ValueError, match=r"ids must be in \[0, 4\)"):
        look(tf.constant([-1, 0]))
