"""TensorFlow's argument rules where gputape used to coerce silently or fail cryptically.

Each case gives TensorFlow's result where TensorFlow accepts the input, otherwise TensorFlow's kind
of exception (``tf.errors.InvalidArgumentError`` where its kernels refuse; TypeError where it cannot
convert the value; Keras' ValueError) with a message naming the function and the argument. The
table-driven sweep over every public function is ``tests/test_hostile_input.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import gputape as gt
import gputape.tf as tf

InvalidArgumentError = tf.errors.InvalidArgumentError


@pytest.fixture(autouse=True)
def _unseeded_afterwards():
    # the tests here seed the global generator; the tests after them get the unseeded state they expect
    yield
    tf.random.set_seed(None)


# -- array ops --------------------------------------------------------------------------------------


def test_split_sizes_must_add_up_to_the_dimension():
    x = tf.reshape(tf.range(6.0), [2, 3])
    with pytest.raises(InvalidArgumentError, match=r"tf\.split: argument num_or_size_splits \[1, 1\] .*size 3"):
        tf.split(x, [1, 1], axis=1)
    with pytest.raises(InvalidArgumentError, match=r"tf\.split: argument num_or_size_splits"):
        tf.split(x, [2, 2], axis=1)
    with pytest.raises(InvalidArgumentError, match="evenly divide"):
        tf.split(x, 2, axis=1)
    with pytest.raises(InvalidArgumentError, match=r"one of them be -1"):
        tf.split(x, [-1, -1], axis=1)
    a, b = tf.split(x, [1, -1], axis=1)  # one -1 takes the rest, as in TensorFlow
    assert a.shape == (2, 1) and b.shape == (2, 2)
    assert [p.shape for p in tf.split(x, [1, 2], axis=1)] == [(2, 1), (2, 2)]


def test_concat_of_one_tensor_returns_it_unchanged():
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    out = tf.concat(x, 0)  # TensorFlow wraps it in a list: its degenerate one-tensor case
    assert out.shape == (2, 2)
    assert_array_equal(out.numpy(), x.numpy())
    assert tf.concat([x], 1).shape == (2, 2)
    with pytest.raises(InvalidArgumentError, match=r"tf\.concat: argument axis"):
        tf.concat(x, [0, 1])


def test_gather_refuses_negative_and_out_of_range_indices():
    p = tf.constant([10.0, 20.0, 30.0])
    with pytest.raises(InvalidArgumentError, match=r"tf\.gather: indices\[1\] = -1 is not in \[0, 3\)"):
        tf.gather(p, [0, -1])
    with pytest.raises(InvalidArgumentError, match=r"indices\[0,1\] = 3 is not in \[0, 3\)"):
        tf.gather(p, [[0, 3]])
    assert tf.gather(p, [2, 0]).numpy().tolist() == [30.0, 10.0]


def test_gather_refuses_bool_and_float_indices():
    p = tf.constant([10.0, 20.0])
    with pytest.raises(InvalidArgumentError, match=r"tf\.gather: argument indices has dtype bool.*tf\.boolean_mask"):
        tf.gather(p, tf.constant([True, False]))
    with pytest.raises(InvalidArgumentError, match="dtype float"):
        tf.gather(p, [0.0, 1.0])
    assert tf.gather(p, np.array([], np.int64)).shape == (0,)


def test_one_hot_refuses_float_indices():
    with pytest.raises(InvalidArgumentError, match=r"tf\.one_hot: argument indices has dtype float32"):
        tf.one_hot([0.5, 1.7], 3)
    assert tf.one_hot(np.array([0, 2], np.uint8), 3).numpy().tolist() == [[1, 0, 0], [0, 0, 1]]


# -- Keras -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("units", [2.5, "relu", 0, -3, True, None])
def test_dense_units_must_be_a_positive_integer(units):
    with pytest.raises(ValueError, match=r"Dense: Received an invalid value for `units`.*units="):
        tf.keras.layers.Dense(units)


def test_dense_takes_numpy_integers():
    assert tf.keras.layers.Dense(np.int64(3)).units == 3


def test_apply_gradients_of_none_names_the_argument():
    with pytest.raises(TypeError, match=r"SGD\.apply_gradients: argument grads_and_vars \(None\) is not an iterable"):
        tf.keras.optimizers.SGD(0.1).apply_gradients(None)
    w = tf.Variable([1.0])
    assert tf.keras.optimizers.SGD(0.5).apply_gradients(iter([(tf.constant([2.0]), w)])) == 1
    assert w.numpy().tolist() == [0.0]


def test_accuracy_on_shapes_that_do_not_broadcast():
    m = tf.keras.metrics.Accuracy()
    with pytest.raises(ValueError, match=r"Accuracy\.update_state: y_true of shape \(3,\) and y_pred of shape \(2,\)"):
        m.update_state([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="MeanSquaredError"):
        tf.keras.metrics.MeanSquaredError().update_state([[1.0, 2.0, 3.0]], [[1.0, 2.0]])
    m.update_state([[1], [2]], [1, 3])  # Keras' rank rule still squeezes the trailing 1
    assert float(m.result()) == 0.5


def test_a_metric_refuses_values_that_are_not_numbers():
    with pytest.raises(TypeError, match=r"Accuracy\.update_state: argument 1 .* has dtype <U1"):
        tf.keras.metrics.Accuracy().update_state([1, 2], ["a", "b"])


# -- tf.random ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int32", "bool", "complex64", tf.int64])
def test_normal_refuses_dtypes_it_does_not_draw(dtype):
    with pytest.raises(InvalidArgumentError, match=r"tf\.random\.normal: argument dtype .*allowed values: half"):
        tf.random.normal([2], dtype=dtype)


@pytest.mark.parametrize("shape", [[2.5], [2, -1], ["2"], [True]])
def test_random_shape_must_hold_integers(shape):
    with pytest.raises(InvalidArgumentError, match=r"tf\.random\.uniform: argument shape"):
        tf.random.uniform(shape)


def test_normal_with_a_negative_stddev_is_tensorflows_formula():
    tf.random.set_seed(3)
    a = tf.random.normal([5], mean=1.0, stddev=2.0)
    tf.random.set_seed(3)
    b = tf.random.normal([5], mean=1.0, stddev=-2.0)
    assert_allclose(b.numpy() - 1.0, -(a.numpy() - 1.0), rtol=1e-6)  # mean + stddev * z


def test_uniform_with_minval_above_maxval_is_tensorflows_formula():
    tf.random.set_seed(4)
    u = tf.random.uniform([100])
    tf.random.set_seed(4)
    r = tf.random.uniform([100], minval=1.0, maxval=0.0)
    assert_allclose(r.numpy(), 1.0 - u.numpy(), atol=1e-7)  # minval + (maxval - minval) * u
    assert ((r.numpy() > 0) & (r.numpy() <= 1)).all()
    with pytest.raises(InvalidArgumentError, match="Need minval < maxval: 1 >= 0"):
        tf.random.uniform([2], minval=1, maxval=0, dtype=tf.int32)


def test_seeded_draws_are_unchanged_by_the_formulas():
    gt.random.seed(9)
    expected = gt.random.generator().normal(0.5, 2.0, (4,)).astype(np.float32)
    tf.random.set_seed(9)
    assert_array_equal(tf.random.normal([4], 0.5, 2.0).numpy(), expected)


def test_categorical_checks_its_arguments():
    with pytest.raises(InvalidArgumentError, match=r"tf\.random\.categorical: argument logits must be a 2-D"):
        tf.random.categorical([0.0, 1.0], 2)
    with pytest.raises(TypeError, match=r"tf\.random\.categorical: argument num_samples \(2\.5\)"):
        tf.random.categorical([[0.0, 1.0]], 2.5)
    with pytest.raises(InvalidArgumentError, match="num_samples must be nonnegative"):
        tf.random.categorical([[0.0, 1.0]], -1)


def test_dropout_checks_rate_noise_shape_and_dtype():
    with pytest.raises(ValueError, match=r"tf\.nn\.dropout: argument rate must be in \[0, 1\)"):
        tf.nn.dropout(tf.ones(3), 1.5)
    with pytest.raises(TypeError, match="rate"):
        tf.nn.dropout(tf.ones(3), "0.5")
    with pytest.raises(TypeError, match="noise_shape"):
        tf.nn.dropout(tf.ones((2, 2)), 0.5, noise_shape=[2.5, 1])
    with pytest.raises(ValueError, match="floating point"):
        tf.nn.dropout(tf.constant([1, 2]), 0.5)


# -- tf.data and gt.data -----------------------------------------------------------------------------


def _ds(n=3):
    return tf.data.Dataset.from_tensor_slices(np.arange(n))


def test_take_minus_one_takes_everything():
    assert [int(x) for x in _ds().take(-1)] == [0, 1, 2]
    assert len(_ds().take(-1)) == 3 and len(_ds().take(0)) == 0 and list(_ds().take(0)) == []


def test_repeat_forever_then_take():
    ds = _ds().repeat(-1).take(7)
    assert [int(x) for x in ds] == [0, 1, 2, 0, 1, 2, 0]
    assert len(ds) == 7 and ds.cardinality() == 7
    assert _ds().repeat(-1).cardinality() == -1 and _ds().repeat(0).cardinality() == 0
    with pytest.raises(TypeError, match="The dataset is infinite"):
        len(_ds().repeat())


def test_batch_size_zero_and_floats():
    with pytest.raises(InvalidArgumentError, match=r"Dataset\.batch: argument batch_size must be greater than zero"):
        _ds().batch(0)
    with pytest.raises(TypeError, match=r"Dataset\.batch: argument batch_size \(2\.5\) must be an integer"):
        _ds().batch(2.5)
    with pytest.raises(TypeError, match=r"Dataset\.shuffle: argument buffer_size \(2\.5\) must be an integer"):
        _ds().shuffle(2.5)
    with pytest.raises(InvalidArgumentError, match="buffer_size must be greater than zero"):
        _ds().shuffle(0)
    assert [b.shape for b in _ds().batch(np.int64(2))] == [(2,), (1,)]


def test_from_tensor_slices_of_a_scalar_or_strings():
    with pytest.raises(ValueError, match=r"Dataset\.from_tensor_slices: argument tensors .* a scalar"):
        tf.data.Dataset.from_tensor_slices(3.0)
    with pytest.raises(TypeError, match="dtype <U1"):
        tf.data.Dataset.from_tensor_slices(np.array(["a", "b"]))


def test_dataloader_batch_size_must_be_an_integer():
    x = np.arange(5.0)
    with pytest.raises(TypeError, match=r"gt\.data\.DataLoader: argument batch_size \(2\.5\) is not an integer"):
        gt.data.DataLoader(x, batch_size=2.5)
    with pytest.raises(ValueError, match="batch_size"):
        gt.data.DataLoader(x, batch_size=0)
    assert [len(b) for b in gt.data.DataLoader(x, batch_size=np.int64(2))] == [2, 2, 1]


# -- the tape ----------------------------------------------------------------------------------------


def test_ops_after_release_inside_the_tapes_own_block_run_unrecorded():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        tape.release()
        z = x * 3.0  # used to raise TypeError: argument of type 'NoneType' is not iterable
        assert z.numpy().tolist() == [3.0, 6.0]
        assert float(tf.reduce_sum(y)) == 5.0
    with pytest.raises(RuntimeError, match="released"):
        tape.gradient(z, x)
    with tape:  # the tape can be used again
        tape.watch(x)
        w = x * x
    assert tape.gradient(w, x).numpy().tolist() == [2.0, 4.0]


def test_release_inside_a_nested_block_leaves_the_outer_tape_recording():
    x = tf.constant(2.0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape(persistent=True) as inner:
            inner.watch(x)
            inner.release()
            y = x * x
    assert float(outer.gradient(y, x)) == 4.0
