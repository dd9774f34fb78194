"""Keras' training conveniences: the learning-rate Variable, regularizers and constraints, Embedding and
tf.nn.embedding_lookup, fit's sample/class weights and steps, the callbacks (ReduceLROnPlateau,
LearningRateScheduler, CSVLogger, BackupAndRestore, TensorBoard) and tf.summary.

Expected values are computed by hand in each test (Keras 3's formulas, written out with numpy)."""

from __future__ import annotations

import glob
import os
import struct
import sys

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf
from gputape.core.tape import GputapeWarning

# -- optimizer.learning_rate ---------------------------------------------------------------------


def test_learning_rate_is_a_variable_that_assign_changes_in_place():
    opt = tf.keras.optimizers.SGD(0.5)
    lr = opt.learning_rate
    assert isinstance(lr, gt.Variable) and lr.shape == () and not lr.trainable and float(lr) == 0.5
    lr.assign(0.25)
    w = tf.Variable([1.0])
    opt.apply_gradients([(tf.constant([2.0]), w)])
    assert w.numpy().tolist() == [0.5]  # 1 - 0.25 * 2
    opt.learning_rate = 0.125  # Keras: the same Variable is assigned
    assert opt.learning_rate is lr and float(lr) == 0.125
    lr.assign(-1.0)  # checked where it is used, before anything changes
    with pytest.raises(ValueError, match="learning rate must be a number in"):
        opt.apply_gradients([(tf.constant([2.0]), w)])
    assert w.numpy().tolist() == [0.5] and int(opt.iterations) == 1


def test_a_compiled_step_reads_the_assigned_rate_without_retracing():
    w = tf.Variable([1.0, 1.0])
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    x = tf.constant([1.0, 2.0])
    step(x)
    np.testing.assert_allclose(w.numpy(), [0.9, 0.8], rtol=1e-6)
    opt.learning_rate.assign(0.5)
    step(x)
    np.testing.assert_allclose(w.numpy(), [0.4, -0.2], rtol=1e-6)  # the new rate: 0.9 - 0.5, 0.8 - 1.0
    opt.learning_rate = 0.0
    step(x)
    np.testing.assert_allclose(w.numpy(), [0.4, -0.2], rtol=1e-6)
    assert step.experimental_get_tracing_count() == 1


def test_a_schedule_is_still_a_float_and_a_number_set_later_goes_back_to_the_variable():
    opt = gt.optim.SGD(gt.optim.StepDecay(0.1, step_size=1, gamma=0.5))
    assert opt.learning_rate == 0.1
    opt.apply_gradients([(gt.constant([1.0]), gt.Variable([1.0]))])
    assert opt.learning_rate == 0.05
    opt.learning_rate = 0.3
    assert isinstance(opt.learning_rate, gt.Variable) and float(opt.learning_rate) == 0.3


# -- regularizers ----------------------------------------------------------------------------------


def _dense_model(**kw):
    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(2, **kw)])
    k = np.array([[0.5, -1.0], [2.0, 0.25], [-0.5, 1.5]], "float32")
    b = np.array([0.1, -0.2], "float32")
    model.layers[0].set_weights([k, b])
    return model, k, b


def test_a_regularized_dense_loss_is_data_loss_plus_the_penalties():
    model, k, b = _dense_model(
        kernel_regularizer=tf.keras.regularizers.l2(0.1), bias_regularizer=tf.keras.regularizers.L1(0.2)
    )
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], "float32")
    y = np.array([[1.0, 0.0], [0.0, 1.0]], "float32")
    penalty = 0.1 * np.sum(k.astype(np.float64) ** 2) + 0.2 * np.sum(np.abs(b))
    assert [round(float(v), 5) for v in model.losses] == [round(0.1 * np.sum(k**2), 5), round(0.2 * 0.3, 5)]
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    data = np.mean((x @ k + b - y) ** 2)
    assert model.evaluate(x, y, verbose=0) == pytest.approx(data + penalty, rel=1e-6)
    # one step: the penalties' gradients (2 * 0.1 * k, 0.2 * sign(b)) join the data's
    model.train_on_batch(x, y)
    err = x @ k + b - y
    gk = 2 * x.T @ err / err.size + 0.2 * k
    gb = 2 * err.sum(0) / err.size + 0.2 * np.sign(b)
    new_k, new_b = model.layers[0].get_weights()
    np.testing.assert_allclose(new_k, k - 0.05 * gk, rtol=1e-5)
    np.testing.assert_allclose(new_b, b - 0.05 * gb, rtol=1e-5)


def test_the_activity_regularizer_is_divided_by_the_batch_size_as_keras_3():
    model, k, b = _dense_model(activity_regularizer=tf.keras.regularizers.L2(0.5))
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0], [0.0, 0.0, 1.0]], "float32")
    out = model(x)
    (act,) = model.losses
    assert float(act) == pytest.approx(0.5 * np.sum((x @ k + b) ** 2) / 3, rel=1e-6)
    model(x[:1])  # the outermost call clears the last call's terms
    assert float(model.losses[0]) == pytest.approx(0.5 * np.sum(out.numpy()[:1] ** 2), rel=1e-6)


def test_a_frozen_layers_regularizer_drops_out_and_add_loss_terms_come_first():
    class Penalised(tf.keras.layers.Layer):
        def call(self, x):
            self.add_loss(tf.reduce_sum(x) * 0.0 + 7.0)
            return x

    dense = tf.keras.layers.Dense(1, kernel_initializer="ones", kernel_regularizer="l2")
    model = tf.keras.Sequential([Penalised(), dense])
    model(np.ones((1, 2), "float32"))
    assert [round(float(v), 6) for v in model.losses] == [7.0, 0.02]  # 'l2': Keras' default 0.01 * 2
    dense.trainable = False  # Keras regularizes trainable weights only
    assert [float(v) for v in model.losses] == [7.0]


@pytest.mark.parametrize(
    "reg, expected",
    [
        (gt.nn.regularizers.L1(0.3), lambda x: 0.3 * np.abs(x).sum()),
        (gt.nn.regularizers.L2(0.3), lambda x: 0.3 * (x**2).sum()),
        (gt.nn.regularizers.L1L2(l1=0.2, l2=0.7), lambda x: 0.2 * np.abs(x).sum() + 0.7 * (x**2).sum()),
    ],
)
def test_regularizer_values_and_gradients(reg, expected):
    x = np.array([[0.7, -1.3], [2.0, -0.4]])
    assert float(reg(gt.constant(x))) == pytest.approx(expected(x), rel=1e-12)
    gt.testing.check_grads(reg, x, order=2)  # away from the kink of |x|


def test_regularizer_arguments_are_checked():
    with pytest.raises(ValueError, match=r"l2.*non-negative"):
        tf.keras.regularizers.l2(-0.1)
    with pytest.raises(ValueError, match="unknown regularizer"):
        tf.keras.layers.Dense(1, kernel_regularizer="l3")
    with pytest.raises(TypeError, match=r"regularizers\.get"):
        tf.keras.layers.Dense(1, kernel_regularizer=3)
    assert tf.keras.regularizers.l1_l2 is tf.keras.regularizers.L1L2
    assert tf.keras.regularizers.L1L2().get_config() == {"l1": 0.0, "l2": 0.0}  # Keras 3's defaults


# -- constraints ---------------------------------------------------------------------------------------


def _keras_max_norm(w, m, axis=0):
    n = np.sqrt((w**2).sum(axis=axis, keepdims=True))
    return w * (np.clip(n, 0, m) / (1e-7 + n))


def test_constraint_values_as_keras_computes_them():
    w = np.array([[3.0, -0.1], [4.0, 0.2], [0.0, -0.3]])
    c = tf.keras.constraints
    np.testing.assert_allclose(c.MaxNorm(2.0)(gt.constant(w)).numpy(), _keras_max_norm(w, 2.0), rtol=1e-12)
    np.testing.assert_allclose(c.MaxNorm(1.0, axis=1)(gt.constant(w)).numpy(), _keras_max_norm(w, 1.0, 1))
    n = np.sqrt((w**2).sum(0, keepdims=True))
    np.testing.assert_allclose(c.UnitNorm()(gt.constant(w)).numpy(), w / (1e-7 + n), rtol=1e-12)
    desired = 0.5 * np.clip(n, 0.5, 1.0) + 0.5 * n
    np.testing.assert_allclose(c.MinMaxNorm(0.5, 1.0, rate=0.5)(gt.constant(w)).numpy(), w * desired / (1e-7 + n))
    np.testing.assert_array_equal(c.NonNeg()(gt.constant(w)).numpy(), np.where(w >= 0, w, 0.0))
    gt.testing.check_grads(c.MaxNorm(2.0), w, order=2)


def test_constraints_apply_after_each_step_in_fit_compiled_and_in_a_custom_loop():
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    y = -5.0 * x[:, :1]  # pulls the kernel negative, which NonNeg forbids
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(1, kernel_constraint=tf.keras.constraints.NonNeg())]
    )
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, epochs=3, batch_size=4, verbose=0)
    assert model.layers[0].kernel.numpy().min() >= 0.0
    assert int(model.optimizer.iterations) == 12
    # a custom GradientTape loop gets them too: the optimizer applies them, as Keras' does
    dense = tf.keras.layers.Dense(2, kernel_initializer="ones", kernel_constraint=tf.keras.constraints.MaxNorm(1.0))
    dense(x[:1])
    opt = tf.keras.optimizers.SGD(0.01)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(dense(x) ** 2)
    grads = tape.gradient(loss, dense.trainable_variables)
    expected = dense.kernel.numpy() - 0.01 * grads[0].numpy()
    opt.apply_gradients(zip(grads, dense.trainable_variables))
    np.testing.assert_allclose(dense.kernel.numpy(), _keras_max_norm(expected, 1.0), rtol=1e-6)


def test_tf_variable_takes_a_constraint_that_optimizers_apply():
    v = tf.Variable([-1.0, 3.0], constraint=lambda w: tf.clip_by_value(w, 0.0, 2.0))
    tf.keras.optimizers.SGD(1.0).apply_gradients([(tf.constant([-0.5, 0.5]), v)])
    assert v.numpy().tolist() == [0.0, 2.0]  # -0.5 and 2.5, clipped after the step


def test_a_variable_constraint_must_be_callable():
    v = gt.Variable([1.0])
    with pytest.raises(TypeError, match="constraint must be a callable"):
        v.constraint = "non_neg"
    v.constraint = None
    assert v.constraint is None


# -- Embedding, tf.nn.embedding_lookup --------------------------------------------------------------------


def test_embedding_lookup_values_gradient_and_errors():
    table = np.arange(12.0).reshape(4, 3)
    ids = np.array([[3, 0], [3, 1]])
    out = tf.nn.embedding_lookup(tf.constant(table), ids)
    np.testing.assert_array_equal(out.numpy(), table[ids])
    v = tf.Variable(table)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.embedding_lookup(v, ids) * tf.constant([1.0, 2.0, 3.0], tf.float64))
    counts = np.bincount(ids.ravel(), minlength=4)[:, None]  # each row gets [1, 2, 3] once per use
    np.testing.assert_array_equal(tape.gradient(loss, v).numpy(), counts * np.array([1.0, 2.0, 3.0]))
    gt.testing.check_grads(lambda t: tf.nn.embedding_lookup(t, ids) ** 2, table + 0.5, order=2)
    # shards, as TensorFlow's "div" strategy: the rows in order
    shards = [tf.constant(table[:2]), tf.constant(table[2:])]
    np.testing.assert_array_equal(tf.nn.embedding_lookup(shards, ids).numpy(), table[ids])
    clipped = tf.nn.embedding_lookup(tf.constant(table), [3], max_norm=1.0).numpy()
    np.testing.assert_allclose(clipped, table[[3]] / np.linalg.norm(table[3]), rtol=1e-12)
    with pytest.raises(ValueError, match=r"embedding_lookup: ids must be in \[0, 4\)"):
        tf.nn.embedding_lookup(tf.constant(table), [4])
    with pytest.raises(TypeError, match="embedding_lookup: ids must be integers"):
        tf.nn.embedding_lookup(tf.constant(table), [1.0])


def test_embedding_layer_takes_keras_regularizer_and_constraint():
    emb = tf.keras.layers.Embedding(
        5,
        2,
        embeddings_initializer="ones",
        embeddings_regularizer=tf.keras.regularizers.L2(0.5),
        embeddings_constraint=tf.keras.constraints.UnitNorm(axis=1),
    )
    emb(np.array([[0, 4]]))
    assert [float(v) for v in emb.losses] == [5.0]  # 0.5 * 10 ones
    tf.keras.optimizers.SGD(0.0).apply_gradients([(tf.zeros((5, 2)), emb.embeddings)])
    np.testing.assert_allclose(emb.embeddings.numpy(), np.full((5, 2), 1 / np.sqrt(2)), rtol=1e-6)


# -- fit: sample_weight, class_weight, steps ----------------------------------------------------------------


def _linear(lr=0.1):
    model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    model.layers[0].set_weights([np.array([[0.5], [-0.25]], "float32"), np.array([0.1], "float32")])
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    return model


_X = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [-2.0, 1.0]], "float32")
_Y = np.array([[1.0], [0.0], [2.0], [-1.0]], "float32")
_W = np.array([1.0, 3.0, 0.5, 0.0], "float32")


def _weighted_step(k, b, x, y, w, lr):
    """One SGD step on Keras 3's weighted mse: sum(w * err**2) / batch."""
    err = (x @ k + b - y)[:, 0]
    gk = (2 * w * err) @ x / len(x)
    gb = np.sum(2 * w * err) / len(x)
    return k - lr * gk[:, None], b - lr * gb


def test_fit_with_sample_weight_equals_a_hand_weighted_loss():
    model = _linear()
    k, b = (w.astype(np.float64) for w in model.layers[0].get_weights())
    err = (_X @ k + b - _Y)[:, 0]
    assert model.evaluate(_X, _Y, sample_weight=_W, verbose=0) == pytest.approx(np.sum(_W * err**2) / 4, rel=1e-6)
    model.fit(_X, _Y, sample_weight=_W, batch_size=4, epochs=1, shuffle=False, verbose=0)
    k1, b1 = _weighted_step(k, b, _X, _Y, _W, 0.1)
    np.testing.assert_allclose(model.layers[0].get_weights()[0], k1, rtol=1e-5)
    np.testing.assert_allclose(model.layers[0].get_weights()[1], b1, rtol=1e-5)


def test_class_weight_is_the_sample_weight_of_each_label_and_works_with_a_loss_function():
    y = np.array([0, 1, 1, 2])
    weights = {0: 2.0, 1: 0.5}  # class 2: 1.0, as Keras
    runs = []
    for kw in ({"class_weight": weights}, {"sample_weight": np.array([2.0, 0.5, 0.5, 1.0])}):
        tf.keras.utils.set_random_seed(1)
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(3)])
        model.compile(
            optimizer="sgd", loss=lambda t, p: tf.keras.losses.sparse_categorical_crossentropy(t, p, from_logits=True)
        )
        h = model.fit(_X, y, batch_size=2, epochs=2, shuffle=False, verbose=0, **kw)
        runs.append((h.history["loss"], model.get_weights()))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)
    # one-hot labels: the argmax is the class
    model = _linear()
    with pytest.raises(ValueError, match="both sample_weight and class_weight"):
        model.fit(_X, _Y, sample_weight=_W, class_weight={0: 1.0}, verbose=0)
    with pytest.raises(ValueError, match="class_weight must be a dict"):
        model.fit(_X, _Y, class_weight=[1.0, 2.0], verbose=0)


def test_validation_split_takes_the_last_samples_and_their_weights():
    model = _linear(lr=0.0)
    k, b = (w.astype(np.float64) for w in model.layers[0].get_weights())
    h = model.fit(_X, _Y, sample_weight=_W, validation_split=0.5, epochs=1, verbose=0)
    err = (_X @ k + b - _Y)[:, 0]
    assert h.history["val_loss"][0] == pytest.approx(np.sum((_W * err**2)[2:]) / 2, rel=1e-6)
    assert h.history["loss"][0] == pytest.approx(np.sum((_W * err**2)[:2]) / 2, rel=1e-6)


def test_a_dataset_of_x_y_weight_batches_is_weighted():
    model = _linear(lr=0.0)
    k, b = (w.astype(np.float64) for w in model.layers[0].get_weights())
    ds = tf.data.Dataset.from_tensor_slices((_X, _Y, _W)).batch(4)
    err = (_X @ k + b - _Y)[:, 0]
    assert model.evaluate(ds, verbose=0) == pytest.approx(np.sum(_W * err**2) / 4, rel=1e-6)


class _Batches(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.per_epoch = []

    def on_epoch_begin(self, epoch, logs=None):
        self.per_epoch.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.per_epoch[-1] += 1


def test_steps_per_epoch_with_a_repeating_dataset_continues_across_epochs():
    seen = []
    x = np.arange(6, dtype="float32").reshape(6, 1)
    ds = tf.data.Dataset.from_tensor_slices((x, x)).batch(2).repeat()

    class Record(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(int(self.model.optimizer.iterations))

    model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.0), loss="mse")
    counter = _Batches()
    val = tf.data.Dataset.from_tensor_slices((x, x)).batch(3).repeat()  # endless: validation_steps bounds it
    h = model.fit(ds, epochs=3, steps_per_epoch=4, validation_data=val, validation_steps=2, verbose=0,
                  callbacks=[counter, Record()])  # fmt: skip
    assert counter.per_epoch == [4, 4, 4] and int(model.optimizer.iterations) == 12 and len(h.history["val_loss"]) == 3
    assert seen == list(range(12))


def test_steps_per_epoch_with_arrays_restarts_them_when_used_up_and_warns_as_keras():
    model = _linear(lr=0.0)
    counter = _Batches()
    with pytest.warns(GputapeWarning, match="ran out of data"):
        model.fit(_X[:3], _Y[:3], batch_size=1, epochs=3, steps_per_epoch=2, verbose=0, callbacks=[counter])
    # Keras' EpochIterator: 2 batches, then the third and the end of the data, then a fresh pass
    assert counter.per_epoch == [2, 1, 2]
    with pytest.raises(ValueError, match="steps_per_epoch must be a positive integer"):
        model.fit(_X, _Y, steps_per_epoch=0, verbose=0)


def test_evaluate_and_predict_take_steps():
    model = _linear(lr=0.0)
    assert model.predict(_X, batch_size=1, steps=2, verbose=0).shape == (2, 1)
    k, b = (w.astype(np.float64) for w in model.layers[0].get_weights())
    err = (_X @ k + b - _Y)[:, 0]
    assert model.evaluate(_X, _Y, batch_size=2, steps=1, verbose=0) == pytest.approx(np.mean(err[:2] ** 2), rel=1e-6)


# -- callbacks ---------------------------------------------------------------------------------------------


def _plateau_model(lr=0.1):
    # no input reaches the kernel (x = 0) and there is no bias: the loss stays 1.0 whatever the rate
    model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1, use_bias=False)])
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    return model, np.zeros((4, 2), "float32"), np.ones((4, 1), "float32")


def test_reduce_lr_on_plateau_lowers_the_optimizers_variable():
    model, x, y = _plateau_model()
    var = model.optimizer.learning_rate
    cb = tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1)
    h = model.fit(x, y, epochs=4, verbose=0, callbacks=[cb])
    assert h.history["loss"] == [1.0] * 4
    # epoch 0 sets the best value; each later epoch waits 1 (patience) and halves the rate after it is
    # logged, as Keras logs it
    assert h.history["learning_rate"] == [0.1, 0.1, 0.05, 0.025]
    assert model.optimizer.learning_rate is var and float(var) == 0.0125


def test_reduce_lr_on_plateau_cooldown_min_lr_and_improvement():
    model, _, _ = _plateau_model(lr=1.0)
    cb = tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2, cooldown=1, min_lr=0.3,
                                              min_delta=0.1, verbose=1)  # fmt: skip
    cb.set_model(model)
    cb.on_train_begin()
    rates = []
    # improves, then 1.0 - 0.95 < min_delta is no improvement
    for epoch, loss in enumerate([1.0, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.5]):
        cb.on_epoch_end(epoch, {"val_loss": loss})
        rates.append(float(model.optimizer.learning_rate))
    # epochs 1-2 wait -> 0.5; epoch 3 ends the cooldown and (as in Keras) waits again; epoch 4 -> 0.3 (min_lr,
    # not 0.25); at min_lr nothing changes
    assert rates == [1.0, 1.0, 0.5, 0.5, 0.3, 0.3, 0.3, 0.3, 0.3]
    with pytest.raises(ValueError, match=r"factor >= 1\.0"):
        tf.keras.callbacks.ReduceLROnPlateau(factor=1.0)


def test_learning_rate_scheduler_sets_the_rate_each_epoch():
    model, x, y = _plateau_model()
    cb = tf.keras.callbacks.LearningRateScheduler(lambda epoch: 0.1 / (epoch + 1))  # the one-argument form
    h = model.fit(x, y, epochs=3, verbose=0, callbacks=[cb])
    np.testing.assert_allclose(h.history["learning_rate"], [0.1, 0.05, 0.1 / 3])
    bad = tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: 1)
    with pytest.raises(ValueError, match="should be a float"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[bad])


def test_csv_logger_writes_keras_rows(tmp_path):
    model = _linear(lr=0.0)  # constant losses, so the file's content is known
    k, b = (w.astype(np.float64) for w in model.layers[0].get_weights())
    loss = float(np.mean((_X @ k + b - _Y) ** 2, dtype=np.float32))
    val = float(np.mean((_X[:2] @ k + b - 1.0) ** 2, dtype=np.float32))
    path = tmp_path / "log.csv"
    model.fit(_X, _Y, epochs=2, batch_size=4, validation_data=(_X[:2], np.ones((2, 1), "float32")), verbose=0,
              callbacks=[tf.keras.callbacks.CSVLogger(path)])  # fmt: skip
    rows = path.read_bytes().decode().split("\r\n")
    assert rows[0] == "epoch,loss,val_loss" and rows[-1] == ""
    for epoch, row in enumerate(rows[1:3]):
        e, got_loss, got_val = row.split(",")
        assert int(e) == epoch
        assert float(got_loss) == pytest.approx(loss, rel=1e-6) and float(got_val) == pytest.approx(val, rel=1e-6)
    # append: no second header; no validation: NA in the val_ column, ';' as separator
    model.fit(_X, _Y, epochs=1, verbose=0, callbacks=[tf.keras.callbacks.CSVLogger(path, append=True)])
    assert path.read_text().count("epoch,") == 1 and len(path.read_text().splitlines()) == 4
    other = tmp_path / "semi.csv"
    model.fit(_X, _Y, epochs=1, verbose=0, callbacks=[tf.keras.callbacks.CSVLogger(other, separator=";")])
    header, row = other.read_text().splitlines()
    assert header == "epoch;loss;val_loss" and row.startswith("0;") and row.endswith(";NA")


def test_backup_and_restore_resumes_bitwise_after_an_interruption(tmp_path):
    x = np.random.default_rng(2).normal(size=(32, 3)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5]], "float32")

    def fresh():
        tf.keras.utils.set_random_seed(5)
        model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                     tf.keras.layers.Dense(1)])  # fmt: skip
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
        return model

    whole = fresh()
    full = whole.fit(x, y, epochs=4, batch_size=8, shuffle=False, verbose=0).history["loss"]

    class Crash(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2:
                raise KeyboardInterrupt

    folder = tmp_path / "backup"
    model = fresh()
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, epochs=4, batch_size=8, shuffle=False, verbose=0,
                  callbacks=[tf.keras.callbacks.BackupAndRestore(folder), Crash()])  # fmt: skip
    assert sorted(os.listdir(folder)) == ["latest.weights.npz", "training_metadata.json"]
    model = fresh()  # a new process would start here
    model(x[:1])
    h = model.fit(x, y, epochs=4, batch_size=8, shuffle=False, verbose=0,
                  callbacks=[tf.keras.callbacks.BackupAndRestore(folder)])  # fmt: skip
    assert h.epoch == [2, 3] and h.history["loss"] == full[2:]
    for a, b in zip(model.get_weights(), whole.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert int(model.optimizer.iterations) == int(whole.optimizer.iterations) == 16
    assert not folder.exists()  # training ended: the backup is deleted


def test_lambda_callback_hooks_and_unknown_names():
    events = []
    cb = tf.keras.callbacks.LambdaCallback(
        on_train_begin=lambda logs: events.append("begin"),
        on_epoch_end=lambda epoch, logs: events.append(("epoch", epoch, sorted(logs))),
        on_train_batch_end=lambda batch, logs: events.append(("batch", batch)),
    )
    model = _linear()
    model.fit(_X, _Y, epochs=1, batch_size=2, verbose=0, callbacks=[cb])
    assert events == ["begin", ("batch", 0), ("batch", 1), ("epoch", 0, ["loss"])]
    with pytest.raises(TypeError, match="unknown hook"):
        tf.keras.callbacks.LambdaCallback(on_epoch_finish=print)


# -- TensorBoard, tf.summary -----------------------------------------------------------------------------------


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _events(folder) -> list:
    """Every event in ``folder``'s event files, checking TFRecord framing and CRCs as TensorBoard's reader does."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        data = open(path, "rb").read()
        i = 0
        while i < len(data):
            header = data[i : i + 8]
            (n,) = struct.unpack("<Q", header)
            (len_crc,) = struct.unpack("<I", data[i + 8 : i + 12])
            body = data[i + 12 : i + 12 + n]
            (body_crc,) = struct.unpack("<I", data[i + 12 + n : i + 16 + n])
            assert len_crc == _masked(_crc32c(header)) and body_crc == _masked(_crc32c(body))
            out.append(event_pb2.Event.FromString(body))
            i += 16 + n
    return out


def _scalars(folder) -> dict:
    found: dict = {}
    for ev in _events(folder):
        for v in ev.summary.value:
            if v.WhichOneof("value") == "simple_value":
                found.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return found


def test_tensorboard_event_files_are_readable(tmp_path):
    pytest.importorskip("tensorboardX")
    model = _linear(lr=0.01)
    cb = tf.keras.callbacks.TensorBoard(log_dir=tmp_path, update_freq="batch", histogram_freq=1)
    h = model.fit(_X, _Y, epochs=2, batch_size=2, validation_data=(_X, _Y), verbose=0, callbacks=[cb])
    train, val = _scalars(tmp_path / "train"), _scalars(tmp_path / "validation")
    assert [s for s, _ in train["epoch_loss"]] == [0, 1]
    np.testing.assert_allclose([v for _, v in train["epoch_loss"]], h.history["loss"], rtol=1e-6)
    np.testing.assert_allclose([v for _, v in val["epoch_loss"]], h.history["val_loss"], rtol=1e-6)
    assert [v for _, v in train["epoch_learning_rate"]] == pytest.approx([0.01, 0.01])
    assert [s for s, _ in train["batch_loss"]] == [1, 2, 3, 4]  # one per batch, counted from the start
    assert [s for s, _ in val["evaluation_loss_vs_iterations"]] == [2, 4]  # at the optimizer's step
    histograms = {v.tag for ev in _events(tmp_path / "train") for v in ev.summary.value if v.HasField("histo")}
    assert histograms == {f"{w.name}/histogram" for w in model.weights}


def test_tf_summary_scalar_histogram_text_and_steps(tmp_path):
    pytest.importorskip("tensorboardX")
    writer = tf.summary.create_file_writer(str(tmp_path))
    assert tf.summary.scalar("loss", 1.0, step=0) is False  # no default writer
    step = tf.Variable(7, dtype=tf.int64)
    with writer.as_default():
        with pytest.raises(ValueError, match="no step set"):
            tf.summary.scalar("loss", 1.0)
        tf.summary.experimental.set_step(step)
        try:
            assert tf.summary.scalar("loss", tf.constant(0.5)) is True
            step.assign(8)
            assert tf.summary.scalar("loss", 0.25)
            assert tf.summary.histogram("w", np.array([1.0, 2.0, 2.0, 3.0]), step=1)
            assert tf.summary.text("note", "**hi**", step=2)
        finally:
            tf.summary.experimental.set_step(None)
        with pytest.raises(ValueError, match="must be a scalar"):
            tf.summary.scalar("v", [1.0, 2.0], step=0)
    writer.close()
    events = _events(tmp_path)
    assert _scalars(tmp_path)["loss"] == [(7, 0.5), (8, 0.25)]
    (histo,) = [(ev.step, v.histo) for ev in events for v in ev.summary.value if v.HasField("histo")]
    assert histo[0] == 1 and (histo[1].num, histo[1].sum, histo[1].min, histo[1].max) == (4, 8.0, 1.0, 3.0)
    (text,) = [v for ev in events for v in ev.summary.value if v.metadata.plugin_data.plugin_name == "text"]
    assert text.tensor.string_val == [b"**hi**"]


def test_tf_summary_inside_a_compiled_function_writes_at_every_call(tmp_path):
    pytest.importorskip("tensorboardX")
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1)
    writer = tf.summary.create_file_writer(str(tmp_path))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        tf.summary.scalar("loss", loss, step=opt.iterations)
        return loss

    with writer.as_default():
        losses = [float(step()) for _ in range(3)]
    writer.close()
    assert step.experimental_get_tracing_count() == 1
    got = _scalars(tmp_path)["loss"]
    assert [s for s, _ in got] == [1, 2, 3]  # the step Variable read at each call
    np.testing.assert_allclose([v for _, v in got], losses, rtol=1e-6)


def test_tf_summary_without_tensorboardx_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=r"gputape\[tensorboard\]"):
        tf.summary.create_file_writer(str(tmp_path))
    model = _linear()
    with pytest.raises(ImportError, match="tensorboardX"):
        model.fit(_X, _Y, epochs=1, verbose=0, callbacks=[tf.keras.callbacks.TensorBoard(tmp_path)])


def test_tensorboard_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="profile_batch"):
        tf.keras.callbacks.TensorBoard(profile_batch=2)
    with pytest.raises(NotImplementedError, match="write_images"):
        tf.keras.callbacks.TensorBoard(write_images=True)
    with pytest.raises(ValueError, match="update_freq"):
        tf.keras.callbacks.TensorBoard(update_freq="sometimes")


def test_get_config_carries_regularizers_and_constraints_in_keras_form():
    dense = tf.keras.layers.Dense(2, kernel_regularizer=tf.keras.regularizers.l2(0.1), bias_constraint="non_neg",
                                  activity_regularizer="l1")  # fmt: skip
    cfg = dense.get_config()
    assert cfg["kernel_regularizer"] == {
        "module": "keras.regularizers", "class_name": "L2", "config": {"l2": 0.1}, "registered_name": None
    }  # fmt: skip
    assert cfg["bias_constraint"]["class_name"] == "NonNeg" and cfg["activity_regularizer"]["config"] == {"l1": 0.01}
    again = tf.keras.layers.Dense.from_config({**cfg, "name": "again"})
    assert (again.kernel_regularizer.l2, type(again.bias_constraint).__name__) == (0.1, "NonNeg")
    assert "kernel_regularizer" not in tf.keras.layers.Dense(2).get_config()  # unset: not listed


@pytest.mark.parametrize("layer", ["BatchNormalization", "LayerNormalization"])
def test_normalization_penalties_are_in_the_config_and_come_back(layer):
    # they were kept apart from the other layers' attributes, so get_config (and a saved model) lost them
    cls = getattr(tf.keras.layers, layer)
    made = cls(gamma_regularizer=tf.keras.regularizers.l2(0.5), beta_constraint=tf.keras.constraints.NonNeg())
    cfg = made.get_config()
    assert cfg["gamma_regularizer"]["config"] == {"l2": 0.5}
    assert cfg["beta_constraint"]["class_name"] == "NonNeg"
    again = cls.from_config(cfg)
    assert type(again.gamma_regularizer).__name__ == "L2" and again.gamma_regularizer.l2 == 0.5
    assert type(again.beta_constraint).__name__ == "NonNeg"
