"""Keras 3's losses under ``import gputape.tf as tf``: documented examples, closed forms, shape rules, errors.

Expected numbers are the ones printed in Keras 3's docstrings (keras/src/losses/losses.py) or
closed forms computed here with numpy in float64.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape.tf as tf


def _np_sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# -- Keras' documented examples ------------------------------------------------------------------


def test_mse_and_mae_docstring_examples():
    assert_allclose(float(tf.keras.losses.MeanSquaredError()([1.0, 0.0, 1.0], [0.9, 0.1, 0.8])), 0.02, rtol=1e-5)
    assert_allclose(float(tf.keras.losses.MeanAbsoluteError()([1.0, 0.3, 1.0], [1.9, 0.3, 1.8])), 0.5666667, rtol=1e-6)


def test_huber_docstring_example_and_closed_form_with_delta():
    y_true, y_pred = [[0, 1], [0, 0]], [[0.6, 0.4], [0.4, 0.6]]
    assert_allclose(float(tf.keras.losses.Huber()(y_true, y_pred)), 0.155, atol=5e-4)
    e = np.array(y_pred, float) - np.array(y_true, float)
    d = 0.5
    per = np.where(np.abs(e) <= d, 0.5 * e**2, d * np.abs(e) - 0.5 * d**2).mean(-1)
    assert_allclose(tf.keras.losses.Huber(delta=d, reduction=None)(y_true, y_pred).numpy(), per, rtol=1e-6)
    assert_allclose(tf.keras.losses.huber(y_true, y_pred, delta=d).numpy(), per, rtol=1e-6)


def test_binary_crossentropy_docstring_examples():
    y_true = np.array([[0, 1], [0, 0]])
    y_pred = np.array([[-18.6, 0.51], [2.94, -12.8]])
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    assert_allclose(float(bce([0, 1, 0, 0], [-18.6, 0.51, 2.94, -12.8])), 0.8654, atol=1e-4)
    assert_allclose(float(bce(y_true, y_pred)), 0.8654, atol=1e-4)
    assert_allclose(float(bce(y_true, y_pred, sample_weight=[0.8, 0.2])), 0.243, atol=1e-3)
    assert_allclose(
        float(tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction="sum")(y_true, y_pred)), 1.730, atol=1e-3
    )
    none = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)(y_true, y_pred)
    assert_allclose(none.numpy(), [0.235, 1.496], atol=1e-3)
    # from probabilities (Keras' binary_crossentropy example)
    loss = tf.keras.losses.binary_crossentropy([[0, 1], [0, 0]], [[0.6, 0.4], [0.4, 0.6]])
    assert_allclose(loss.numpy(), [0.916, 0.714], atol=1e-3)


@pytest.mark.parametrize("cls_name", ["CategoricalCrossentropy", "SparseCategoricalCrossentropy"])
def test_categorical_crossentropies_docstring_examples(cls_name):
    y_true = [[0, 1, 0], [0, 0, 1]] if cls_name.startswith("Categorical") else [1, 2]
    y_pred = np.array([[0.05, 0.95, 0], [0.1, 0.8, 0.1]])
    cls = getattr(tf.keras.losses, cls_name)
    assert_allclose(float(cls()(y_true, y_pred)), 1.177, atol=1e-3)
    assert_allclose(float(cls()(y_true, y_pred, sample_weight=np.array([0.3, 0.7]))), 0.814, atol=1e-3)
    assert_allclose(float(cls(reduction="sum")(y_true, y_pred)), 2.354, atol=1e-3)
    assert_allclose(cls(reduction=None)(y_true, y_pred).numpy(), [0.0513, 2.303], atol=1e-3)


# -- closed forms: from_logits, label_smoothing, reductions ------------------------------------------


def test_categorical_label_smoothing_and_logits_match_closed_form():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(5, 4))
    y = np.eye(4)[rng.integers(0, 4, 5)]
    ls = 0.2
    ys = y * (1 - ls) + ls / 4
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    expected = -(ys * logp).sum(-1)
    got = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=ls, reduction="none")(
        y, tf.constant(z)
    )
    assert_allclose(got.numpy(), expected, rtol=1e-10)
    probs = np.exp(logp)
    got_p = tf.keras.losses.categorical_crossentropy(y, tf.constant(probs), label_smoothing=ls)
    assert_allclose(got_p.numpy(), expected, rtol=1e-6)


def test_binary_label_smoothing_pulls_labels_towards_one_half():
    z = np.array([[2.0, -1.0, 0.5]])
    y = np.array([[1.0, 0.0, 1.0]])
    ls = 0.1
    ys = y * (1 - ls) + 0.5 * ls
    p = _np_sigmoid(z)
    expected = -(ys * np.log(p) + (1 - ys) * np.log(1 - p)).mean()
    got = tf.keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=ls)(y, tf.constant(z))
    assert_allclose(float(got), expected, rtol=1e-10)
    got_p = tf.keras.losses.BinaryCrossentropy(label_smoothing=ls)(y, tf.constant(p))
    assert_allclose(float(got_p), expected, rtol=1e-6)


def test_reductions_sum_over_batch_size_sum_none_and_mean_with_sample_weight():
    y_true, y_pred = np.array([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0]]), np.array([[0.0, 2.0], [1.0, 4.0], [3.0, 1.0]])
    per = ((y_true - y_pred) ** 2).mean(-1)
    w = np.array([1.0, 0.5, 0.0])
    mse = tf.keras.losses.MeanSquaredError
    assert_allclose(float(mse()(y_true, y_pred)), per.mean())
    assert_allclose(float(mse(reduction="mean")(y_true, y_pred)), per.mean())
    assert_allclose(float(mse(reduction="sum")(y_true, y_pred)), per.sum())
    assert_allclose(mse(reduction="none")(y_true, y_pred).numpy(), per)
    assert_allclose(mse(reduction=None)(y_true, y_pred).numpy(), per)
    assert_allclose(float(mse()(y_true, y_pred, sample_weight=w)), (per * w).sum() / 3)
    assert_allclose(
        float(mse(reduction="mean_with_sample_weight")(y_true, y_pred, sample_weight=w)), (per * w).sum() / 1.5
    )
    zero = mse(reduction="mean_with_sample_weight")(y_true, y_pred, sample_weight=np.zeros(3))
    assert float(zero) == 0.0  # Keras' divide_no_nan
    with pytest.raises(ValueError, match="reduction must be one of"):
        mse(reduction="avg")


def test_losses_are_differentiable_with_the_closed_form_gradient():
    z = tf.Variable(np.array([[0.3, -1.2], [2.0, 0.1]]))
    y = np.array([[1.0, 0.0], [0.0, 1.0]])
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.BinaryCrossentropy(from_logits=True)(y, z)
    # d/dz mean(softplus(z) - y z) = (sigmoid(z) - y) / n
    assert_allclose(tape.gradient(loss, z).numpy(), (_np_sigmoid(z.numpy()) - y) / 4, rtol=1e-10)
    w = tf.Variable(np.array([0.5, 3.0, -2.0]))
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.Huber(delta=1.0)(np.zeros(3), w)
    # Huber's derivative: e inside delta, delta * sign(e) outside; the mean over 3 values
    assert_allclose(tape.gradient(loss, w).numpy(), np.array([0.5, 1.0, -1.0]) / 3)


# -- Keras' shape rules (issue 11) --------------------------------------------------------------------


def test_trailing_one_is_squeezed_as_keras_does():
    y_true = np.array([1.0, 2.0, 3.0])
    y_pred = np.array([[1.0], [2.0], [3.0]])
    assert float(tf.keras.losses.MeanSquaredError()(y_true, y_pred)) == 0.0  # was 1.333 (a (3, 3) broadcast)
    assert float(tf.keras.losses.MeanSquaredError()(y_pred, y_true)) == 0.0
    assert float(tf.keras.losses.MeanAbsoluteError()(y_true, y_pred)) == 0.0
    assert float(tf.keras.losses.Huber()(y_true, y_pred)) == 0.0
    assert tf.keras.losses.mean_squared_error(y_true, y_pred).shape == (3,)
    # (batch, n, 1) against (batch, n): the trailing 1 is squeezed, not broadcast
    a = np.arange(6.0).reshape(2, 3)
    assert float(tf.keras.losses.MeanSquaredError()(a[..., None], a)) == 0.0
    # binary labels of shape (batch,) against (batch, 1) predictions
    p = np.array([[0.9], [0.2]])
    expected = -(np.log(0.9) + np.log(0.8)) / 2
    assert_allclose(float(tf.keras.losses.BinaryCrossentropy()([1.0, 0.0], p)), expected, rtol=1e-6)
    # sparse labels of shape (batch, 1)
    probs = np.array([[0.2, 0.8], [0.6, 0.4]])
    assert_allclose(
        float(tf.keras.losses.SparseCategoricalCrossentropy()(np.array([[1], [0]]), probs)),
        -(np.log(0.8) + np.log(0.6)) / 2,
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    ("loss", "y_true", "y_pred"),
    [
        (tf.keras.losses.MeanSquaredError(), np.zeros(3), np.zeros(4)),
        (tf.keras.losses.MeanAbsoluteError(), np.zeros((3, 2)), np.zeros((3, 4))),
        (tf.keras.losses.Huber(), np.zeros((2, 3)), np.zeros((3, 2))),
        (tf.keras.losses.BinaryCrossentropy(), np.zeros((4, 2)), np.full((4, 3), 0.5)),
        (tf.keras.losses.CategoricalCrossentropy(), np.zeros((4, 3)), np.full((4, 2), 0.5)),
        (tf.keras.losses.SparseCategoricalCrossentropy(), np.zeros(5, int), np.full((4, 2), 0.5)),
    ],
)
def test_shapes_that_cannot_be_reconciled_raise_naming_the_loss_and_both_shapes(loss, y_true, y_pred):
    with pytest.raises(ValueError) as err:
        loss(y_true, y_pred)
    msg = str(err.value)
    assert type(loss).__name__ in msg
    assert str(y_true.shape) in msg and str(y_pred.shape) in msg


def test_functions_name_themselves_in_shape_errors():
    with pytest.raises(ValueError, match=r"mean_squared_error: y_true of shape \(3,\) and y_pred of shape \(4,\)"):
        tf.keras.losses.mean_squared_error(np.zeros(3), np.zeros(4))


def test_loss_objects_have_keras_names_config_and_repr():
    assert tf.keras.losses.MeanSquaredError().name == "mean_squared_error"
    assert tf.keras.losses.Huber().name == "huber_loss"
    cfg = tf.keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1).get_config()
    assert cfg == {
        "name": "binary_crossentropy",
        "reduction": "sum_over_batch_size",
        "from_logits": True,
        "label_smoothing": 0.1,
        "axis": -1,
    }
    r = repr(tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert r.startswith("SparseCategoricalCrossentropy(") and "from_logits=True" in r and "0x" not in r


def test_loss_dtype_follows_y_pred_or_the_loss_dtype():
    assert tf.keras.losses.MeanSquaredError()([1.0], np.array([0.0])).dtype == np.float64
    assert tf.keras.losses.MeanSquaredError()([1, 2], [0, 0]).dtype == np.float32  # integers compute in float32
    assert tf.keras.losses.MeanSquaredError(dtype="float32")([1.0], np.array([0.0])).dtype == np.float32
    w = tf.Variable(np.array([0.5, 1.0]))  # float64
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.MeanSquaredError(dtype="float32")([0.0, 0.0], w)
    g = tape.gradient(loss, w)
    assert loss.dtype == np.float32 and g.dtype == np.float64  # cast back for the variable
    assert_allclose(g.numpy(), [0.5, 1.0])
