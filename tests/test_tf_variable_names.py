"""TensorFlow's ``:0`` variable names, and the gradient of an unread Variable target with respect to itself."""

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf


def test_tf_variables_are_named_like_tensorflow():
    # TensorFlow's "Introduction to gradients" guide prints ['x0:0'] for this
    x0 = tf.Variable(3.0, name="x0")
    x1 = tf.Variable(3.0, name="x1", trainable=False)
    x2 = tf.Variable(2.0, name="x2") + 1.0
    x3 = tf.constant(3.0, name="x3")
    with tf.GradientTape() as tape:
        y = (x0**2) + (x1**2) + (x2**2)
    grad = tape.gradient(y, [x0, x1, x2, x3])
    assert [None if g is None else float(g) for g in grad] == [6.0, None, None, None]
    assert [var.name for var in tape.watched_variables()] == ["x0:0"]
    assert tf.Variable(1.0).name == "Variable:0"
    assert repr(tf.Variable(1.0, name="w")) == "<gt.Variable 'w:0' shape=() dtype=float32, numpy=1.0>"


def test_tf_variable_is_a_gt_variable_in_every_respect():
    v = tf.Variable(np.ones(2, np.float64), trainable=False, dtype="float32", shape=(2,))
    assert type(v) is gt.Variable and isinstance(v, tf.Variable) and not v.trainable and v.dtype == np.float32
    assert isinstance(gt.Variable(1.0), tf.Variable) and issubclass(gt.Variable, tf.Variable)
    assert not isinstance(tf.constant(1.0), tf.Variable)
    assert gt.Variable(1.0, name="w").name == "w"  # gputape's own API keeps the name it is given
    w = tf.Variable(lambda: tf.ones((2,)), name="w", validate_shape=True, synchronization=None)
    assert w.numpy().tolist() == [1.0, 1.0]


def test_tf_variable_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"tf\.Variable: name must be a string without ':'"):
        tf.Variable(1.0, name="w:0")
    with pytest.raises(ValueError, match=r"shape=\(3,\) does not match"):
        tf.Variable([1.0, 2.0], shape=(3,))
    with pytest.raises(ValueError, match="`constraint` argument must be a callable"):
        tf.Variable(1.0, constraint="non_neg")
    with pytest.raises(NotImplementedError, match="variable_def"):
        tf.Variable(1.0, variable_def={})
    with pytest.raises(ValueError, match="initial_value"):
        tf.Variable()
    with pytest.raises(TypeError, match="unexpected keyword"):
        tf.Variable(1.0, colour="red")


def test_checkpoint_keys_drop_the_suffix(tmp_path):
    w = tf.Variable([1.0, 2.0], name="w")
    gt.save(tmp_path / "w.npz", w)
    with np.load(tmp_path / "w.npz") as f:
        assert "var:w" in f.files
    twin = tf.Variable([0.0, 0.0], name="w")
    gt.load(tmp_path / "w.npz", into=twin)
    assert twin.numpy().tolist() == [1.0, 2.0]


def test_gradient_of_an_unread_variable_target_with_respect_to_itself_is_one():
    v = tf.Variable(2.0)
    x = tf.constant(3.0)
    for watch_other in (False, True):
        with tf.GradientTape() as tape:
            if watch_other:
                tape.watch(x)
                _ = x * x
        g = tape.gradient(v, v)
        assert g is not None and float(g) == 1.0  # TensorFlow: 1.0, whatever else the tape watched
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
    np.testing.assert_array_equal(tape.jacobian(w, w).numpy(), np.eye(2))
    assert tape.gradient(w, w, output_gradients=tf.constant([3.0, 4.0])).numpy().tolist() == [3.0, 4.0]
    gw, gx = tape.gradient([w, y], [w, x])
    assert gw.numpy().tolist() == [1.0, 1.0] and float(gx) == 6.0
    assert tape.gradient(w, x) is None  # and nothing leaks to an unrelated source
