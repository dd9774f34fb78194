"""Keras 3's metrics under ``import gputape.tf as tf``: documented examples, closed forms, tf.function replays."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape.tf as tf


def test_mean_docstring_example_and_accumulation_over_batches():
    m = tf.keras.metrics.Mean()
    m.update_state([1, 3, 5, 7])
    assert float(m.result()) == 4.0
    m.reset_state()
    m.update_state([1, 3, 5, 7], sample_weight=[1, 1, 0, 0])
    assert float(m.result()) == 2.0
    m.reset_state()
    for batch in ([1.0, 2.0], [3.0], [4.0, 5.0, 6.0]):
        m.update_state(tf.constant(batch))
    assert float(m.result()) == 3.5
    assert m.name == "mean" and tf.keras.metrics.Mean(name="train_loss").name == "train_loss"


def test_binary_and_categorical_accuracy_docstring_examples():
    b = tf.keras.metrics.BinaryAccuracy()
    b.update_state([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]])
    assert float(b.result()) == 0.75
    b.reset_state()
    b.update_state([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]], sample_weight=[1, 0, 0, 1])
    assert float(b.result()) == 0.5
    c = tf.keras.metrics.CategoricalAccuracy()
    c.update_state([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    assert float(c.result()) == 0.5
    c.reset_state()
    c.update_state([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]], sample_weight=[0.7, 0.3])
    assert_allclose(float(c.result()), 0.3, rtol=1e-6)


def test_binary_accuracy_threshold_and_rank_rule():
    y_true = np.array([1, 0, 1, 0])
    y_pred = np.array([[0.8], [0.65], [0.6], [0.1]])  # (4, 1) against (4,): Keras expands the labels
    assert float(tf.keras.metrics.BinaryAccuracy()(y_true, y_pred)) == 0.75
    assert float(tf.keras.metrics.BinaryAccuracy(threshold=0.7)(y_true, y_pred)) == 0.75
    assert float(tf.keras.metrics.BinaryAccuracy(threshold=0.61)(y_true, y_pred)) == 0.5


@pytest.mark.parametrize("cls", ["Precision", "Recall"])
def test_precision_recall_docstring_examples(cls):
    m = getattr(tf.keras.metrics, cls)()
    m.update_state([0, 1, 1, 1], [1, 0, 1, 1])
    assert_allclose(float(m.result()), 2 / 3, rtol=1e-6)
    m.reset_state()
    m.update_state([0, 1, 1, 1], [1, 0, 1, 1], sample_weight=[0, 0, 1, 0])
    assert float(m.result()) == 1.0


def test_precision_recall_against_counts_over_several_batches_and_thresholds():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    p = rng.random(200)
    thresholds = [0.3, 0.5, 0.8]
    prec = tf.keras.metrics.Precision(thresholds=thresholds)
    rec = tf.keras.metrics.Recall(thresholds=thresholds)
    for i in range(0, 200, 64):
        prec.update_state(y[i : i + 64], p[i : i + 64])
        rec.update_state(y[i : i + 64], p[i : i + 64])
    for k, t in enumerate(thresholds):
        pred = p > t
        tp = np.sum(pred & (y == 1))
        assert_allclose(prec.result().numpy()[k], tp / pred.sum(), rtol=1e-6)
        assert_allclose(rec.result().numpy()[k], tp / (y == 1).sum(), rtol=1e-6)
    assert float(tf.keras.metrics.Precision().result()) == 0.0  # nothing predicted positive yet: no NaN


def test_metric_updates_replay_inside_tf_function():
    acc = tf.keras.metrics.BinaryAccuracy()
    mean = tf.keras.metrics.Mean()

    @tf.function
    def step(y, logits):
        acc.update_state(y, tf.sigmoid(logits))
        mean.update_state(logits)
        return logits

    batches = [(np.array([1.0, 0.0]), np.array([2.0, 1.0])), (np.array([1.0, 1.0]), np.array([3.0, -1.0]))]
    for y, z in batches:
        step(y, z)
    assert float(acc.result()) == 0.5  # batch 1: 1 of 2 right, batch 2: 1 of 2 right
    assert float(mean.result()) == 1.25


def test_metrics_print_their_name_and_value():
    m = tf.keras.metrics.Mean(name="loss")
    m.update_state([1.0, 2.0])
    assert repr(m) == "<Mean name='loss' result=1.5>"
    assert "threshold=0.5" in repr(tf.keras.metrics.BinaryAccuracy())


def test_unsupported_options_and_bad_shapes_raise_clearly():
    with pytest.raises(NotImplementedError, match="top_k"):
        tf.keras.metrics.Precision(top_k=2)
    with pytest.raises(ValueError, match="thresholds"):
        tf.keras.metrics.Recall(thresholds=1.5)
    with pytest.raises(ValueError, match=r"Precision.update_state: y_true of shape \(3,\)"):
        tf.keras.metrics.Precision().update_state([0, 1, 1], [0.2, 0.4])


def test_a_metric_inside_tf_function_updates_resets_and_reads_on_every_call():
    # result() and reset_state() read and write host state outside the record: both were frozen
    # at the trace's values (every call returned the first call's result)
    m = tf.keras.metrics.Mean()

    @tf.function
    def running(x):
        m.update_state(x)
        return m.result()

    assert [float(running(tf.constant(v))) for v in (1.0, 3.0, 5.0)] == [1.0, 2.0, 3.0]

    @tf.function
    def fresh(x):
        m.reset_state()
        m.update_state(x)
        return m.result()

    assert [float(fresh(tf.constant(v))) for v in (1.0, 3.0, 5.0)] == [1.0, 3.0, 5.0]
    assert running.experimental_get_tracing_count() == fresh.experimental_get_tracing_count() == 1
