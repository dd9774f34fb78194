"""Keras' "Writing a training loop from scratch" guide (TensorFlow backend), run with ``import gputape.tf as tf``.

The guide's functional MNIST model, compiled train/test steps, metrics and the ``add_loss`` variant
are written as in the guide; the data are scikit-learn's bundled 8x8 digits (no download) instead of
MNIST, so the input has 64 features. The guide prints accuracies; here they are asserted.
"""

import re

import numpy as np
import pytest

import gputape.tf as tf

keras = tf.keras
datasets = pytest.importorskip("sklearn.datasets")


def _digits():
    d = datasets.load_digits()
    x = (d.data / 16.0).astype("float32")
    y = d.target.astype("int64")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


class ActivityRegularizationLayer(keras.layers.Layer):
    def call(self, inputs):
        # the guide's rate is 1e-2 on MNIST's 784 inputs; on the small digits data that penalty
        # swamps the cross-entropy (the activations die), so a smaller one keeps the test meaningful
        self.add_loss(1e-4 * tf.reduce_sum(inputs))
        return inputs


@pytest.mark.parametrize("with_add_loss", [False, True])
def test_guide_training_loop_with_tf_function_and_metrics(with_add_loss):
    (x_train, y_train), (x_val, y_val) = _digits()
    inputs = keras.Input(shape=(64,), name="digits")
    x1 = keras.layers.Dense(64, activation="relu")(inputs)
    if with_add_loss:
        x1 = ActivityRegularizationLayer()(x1)
    x2 = keras.layers.Dense(64, activation="relu")(x1)
    outputs = keras.layers.Dense(10, name="predictions")(x2)
    model = keras.Model(inputs=inputs, outputs=outputs)

    optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    train_acc_metric = keras.metrics.SparseCategoricalAccuracy()
    val_acc_metric = keras.metrics.SparseCategoricalAccuracy()
    batch_size = 64
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    train_dataset = train_dataset.shuffle(buffer_size=1024, seed=0).batch(batch_size)
    val_dataset = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch_size)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss_value = loss_fn(y, logits)
            if with_add_loss:
                loss_value += sum(model.losses)  # the regularisation the layer added in this call
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        train_acc_metric.update_state(y, logits)
        return loss_value

    @tf.function
    def test_step(x, y):
        val_logits = model(x, training=False)
        val_acc_metric.update_state(y, val_logits)

    train_accs, val_accs, lines = [], [], []
    for _epoch in range(6):
        for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
            loss_value = train_step(x_batch_train, y_batch_train)
            if step % 10 == 0:
                lines.append(f"Training loss (for one batch) at step {step}: {float(loss_value):.4f}")
        train_accs.append(float(train_acc_metric.result()))
        train_acc_metric.reset_state()
        for x_batch_val, y_batch_val in val_dataset:
            test_step(x_batch_val, y_batch_val)
        val_accs.append(float(val_acc_metric.result()))
        val_acc_metric.reset_state()

    assert re.fullmatch(r"Training loss \(for one batch\) at step 0: \d+\.\d{4}", lines[0])  # f"{loss:.4f}" works
    assert train_accs[-1] > train_accs[0] and train_accs[-1] > 0.9
    assert val_accs[-1] > 0.9
    assert train_step.tracing_count <= 2  # full batches and the last, smaller one
    # the compiled steps' accuracy is the eager model's on the same data
    eager_acc = np.mean(np.argmax(model(x_val).numpy(), -1) == y_val)
    assert abs(eager_acc - val_accs[-1]) < 1e-6
    if with_add_loss:  # the penalty is in the compiled step's loss: recompute one batch eagerly
        xb, yb = x_train[:batch_size], y_train[:batch_size]
        logits = model(xb)
        expected = float(loss_fn(yb, logits) + sum(model.losses))
        before = [v.numpy() for v in model.weights]
        got = float(train_step(xb, yb))
        assert abs(got - expected) < 1e-5 and len(model.losses) == 1
        assert any(not np.array_equal(a, v.numpy()) for a, v in zip(before, model.weights))
