"""Keras' "Training & evaluation with the built-in methods" guide, run with ``import gputape.tf as tf``.

The guide's functional model, compile/fit/evaluate/predict, string names, custom losses,
validation_split, tf.data input, callbacks (EarlyStopping, ModelCheckpoint, a custom one) are
written as in the guide; the data are scikit-learn's bundled 8x8 digits (no download) instead of
MNIST, so the input has 64 features. Where the guide prints, the values are asserted against
closed forms computed here with numpy.
"""

import itertools
import re
import sys

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf
from gputape.function import Function

keras = tf.keras
layers = tf.keras.layers
datasets = pytest.importorskip("sklearn.datasets")


def _digits():
    d = datasets.load_digits()
    x = (d.data / 16.0).astype("float32")
    y = d.target.astype("float32")  # the guide's y_train.astype("float32")
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def get_uncompiled_model():
    inputs = keras.Input(shape=(64,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    return keras.Model(inputs=inputs, outputs=outputs)


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"])
    return model


def _cross_entropy(probs, labels):
    # Keras' sparse categorical cross-entropy of probabilities: clip to [eps, 1 - eps], -log p[label]
    p = np.clip(probs.astype(np.float64), 1e-7, 1 - 1e-7)
    p = p / p.sum(axis=-1, keepdims=True)
    return float(np.mean(-np.log(p[np.arange(len(labels)), labels.astype(int)])))


def test_guide_end_to_end_fit_evaluate_predict():
    tf.random.set_seed(0)
    (x_train, y_train), (x_test, y_test) = _digits()
    x_val, y_val = x_train[-300:], y_train[-300:]
    x_train, y_train = x_train[:-300], y_train[:-300]
    model = get_uncompiled_model()
    model.compile(
        optimizer=keras.optimizers.RMSprop(),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    history = model.fit(x_train, y_train, batch_size=64, epochs=8, validation_data=(x_val, y_val), verbose=0)
    keys = ["loss", "sparse_categorical_accuracy", "val_loss", "val_sparse_categorical_accuracy"]
    assert list(history.history) == keys
    assert all(len(v) == 8 for v in history.history.values()) and history.epoch == list(range(8))
    losses = history.history["loss"]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert history.history["val_sparse_categorical_accuracy"][-1] > 0.9
    assert model.history is history
    steps = int(np.ceil(len(x_train) / 64))
    assert int(model.optimizer.iterations) == 8 * steps
    assert model._steps[("train", 64)].tracing_count == 2  # the full batches, and the last, smaller one

    # evaluate is the loss and accuracy over the whole test set, computed here from the model's outputs
    results = model.evaluate(x_test, y_test, batch_size=128, verbose=0)
    probs = model(x_test).numpy()
    assert results[0] == pytest.approx(_cross_entropy(probs, y_test), rel=1e-5)
    assert results[1] == pytest.approx(float(np.mean(probs.argmax(1) == y_test)), abs=1e-7)
    assert model.evaluate(x_test, y_test, verbose=0, return_dict=True) == pytest.approx(
        {"loss": results[0], "sparse_categorical_accuracy": results[1]}
    )
    assert model.metrics_names == ["loss", "sparse_categorical_accuracy"]

    predictions = model.predict(x_test[:3], verbose=0)
    assert predictions.shape == (3, 10) and isinstance(predictions, np.ndarray)
    np.testing.assert_allclose(model.predict(x_test, batch_size=50, verbose=0), probs, rtol=1e-6, atol=1e-7)


def test_compiled_steps_equal_eager_steps():
    (x_train, y_train), _ = _digits()
    runs = []
    for eager in (False, True):
        tf.random.set_seed(1)  # same initial weights and the same shuffles
        model = get_uncompiled_model()
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"], run_eagerly=eager)
        h = model.fit(x_train, y_train, batch_size=100, epochs=2, validation_split=0.1, verbose=0)
        runs.append((h.history, model.get_weights(), model))
    (h1, w1, compiled), (h2, w2, eager) = runs
    assert not isinstance(eager._steps[("train", 100)], Function)
    assert isinstance(compiled._steps[("train", 100)], Function)
    assert h1 == h2  # bitwise on the CPU
    for a, b in zip(w1, w2):
        np.testing.assert_array_equal(a, b)
    jit_off = get_uncompiled_model()
    jit_off.compile(optimizer="sgd", loss="mse", jit_compile=False)
    assert jit_off._eager()


def test_string_names_custom_losses_validation_split_and_datasets():
    tf.random.set_seed(2)
    (x_train, y_train), (x_test, y_test) = _digits()
    model = get_compiled_model()
    assert type(model.optimizer).__name__ == "RMSprop" and float(model.optimizer.learning_rate) == pytest.approx(0.001)
    h = model.fit(x_train, y_train, batch_size=64, validation_split=0.2, epochs=1, verbose=0)
    assert sorted(h.history) == sorted(
        ["loss", "sparse_categorical_accuracy", "val_loss", "val_sparse_categorical_accuracy"]
    )

    def custom_mean_squared_error(y_true, y_pred):
        return tf.reduce_mean(tf.square(y_true - y_pred), axis=-1)

    model = get_uncompiled_model()
    model.compile(optimizer=keras.optimizers.Adam(), loss=custom_mean_squared_error)
    y_train_one_hot = tf.one_hot(y_train.astype("int64"), 10).numpy()
    h = model.fit(x_train, y_train_one_hot, batch_size=64, epochs=3, verbose=0)
    assert h.history["loss"][-1] < h.history["loss"][0]
    probs = model.predict(x_train, verbose=0)
    expected = float(np.mean(np.mean((y_train_one_hot - probs) ** 2, axis=-1)))
    assert model.evaluate(x_train, y_train_one_hot, verbose=0) == pytest.approx(expected, rel=1e-5)

    class CustomMSE(keras.losses.Loss):
        def __init__(self, regularization_factor=0.1, name="custom_mse"):
            super().__init__(name=name)
            self.regularization_factor = regularization_factor

        def call(self, y_true, y_pred):
            mse = tf.reduce_mean(tf.square(y_true - y_pred), axis=-1)
            reg = tf.reduce_mean(tf.square(0.5 - y_pred), axis=-1)
            return mse + reg * self.regularization_factor

    model = get_uncompiled_model()
    model.compile(optimizer=keras.optimizers.Adam(), loss=CustomMSE())
    model.fit(x_train, y_train_one_hot, batch_size=64, epochs=1, verbose=0)
    probs = model.predict(x_train, verbose=0)
    want = np.mean(np.mean((y_train_one_hot - probs) ** 2, -1) + 0.1 * np.mean((0.5 - probs) ** 2, -1))
    assert model.evaluate(x_train, y_train_one_hot, verbose=0) == pytest.approx(float(want), rel=1e-5)

    # tf.data: fit on a dataset of batches, evaluate returns a dict with return_dict
    model = get_compiled_model()
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(buffer_size=1024, seed=0).batch(64)
    test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(64)
    h = model.fit(train_dataset, epochs=3, verbose=0)
    assert len(h.history["loss"]) == 3 and h.history["loss"][-1] < h.history["loss"][0]
    result = model.evaluate(test_dataset, verbose=0)
    assert dict(zip(model.metrics_names, result)) == model.evaluate(test_dataset, verbose=0, return_dict=True)
    assert result[0] == pytest.approx(_cross_entropy(model(x_test).numpy(), y_test), rel=1e-5)
    # a DataLoader works the same way
    loader = gt.data.DataLoader(x_train, y_train, batch_size=128, shuffle=True, seed=0)
    assert len(model.fit(loader, epochs=1, verbose=0).history["loss"]) == 1


class _Curve(keras.callbacks.Callback):
    """Replaces val_loss with a constructed curve, and records the weights at each epoch's end."""

    def __init__(self, curve):
        super().__init__()
        self.curve, self.weights = curve, []

    def on_epoch_end(self, epoch, logs=None):
        logs["val_loss"] = self.curve[epoch]
        self.weights.append(self.model.get_weights())


def test_early_stopping_stops_at_the_epoch_the_curve_says():
    (x_train, y_train), _ = _digits()
    # min_delta 0.05: epoch 1 improves on 1.0; 0.79 and 0.78 do not improve on 0.8 by more than 0.05
    curve = [1.0, 0.8, 0.79, 0.78, 0.5, 0.4]
    model = get_compiled_model()
    record = _Curve(curve)
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0.05, patience=2, restore_best_weights=True)
    h = model.fit(x_train, y_train, epochs=6, batch_size=200, validation_split=0.2, callbacks=[record, stop], verbose=0)
    assert h.epoch == [0, 1, 2, 3] and h.history["val_loss"] == curve[:4]
    assert stop.stopped_epoch == 3 and stop.best_epoch == 1 and stop.best == 0.8
    for got, best in zip(model.get_weights(), record.weights[1]):  # the best epoch's weights are back
        np.testing.assert_array_equal(got, best)
    assert not all(np.array_equal(a, b) for a, b in zip(record.weights[3], record.weights[1]))

    # mode='max' on an accuracy curve, patience 0: stops at the first epoch that does not improve
    curve_acc = [0.5, 0.6, 0.55, 0.9]

    class Acc(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["val_acc"] = curve_acc[epoch]

    stop = keras.callbacks.EarlyStopping(monitor="val_acc", patience=0)
    assert stop.mode == "max"
    h = get_compiled_model().fit(x_train[:200], y_train[:200], epochs=4, callbacks=[Acc(), stop], verbose=0)
    assert h.epoch == [0, 1, 2] and stop.stopped_epoch == 2


def test_early_stopping_from_the_guide_prints_and_stops(capsys):
    (x_train, y_train), _ = _digits()
    tf.random.set_seed(3)
    model = get_compiled_model()
    callbacks = [keras.callbacks.EarlyStopping(monitor="loss", min_delta=10.0, patience=2, verbose=1)]
    h = model.fit(x_train, y_train, epochs=20, batch_size=64, callbacks=callbacks, verbose=0)
    # no epoch lowers the loss by 10: the first sets the best, the next two wait, the third stops
    assert h.epoch == [0, 1, 2]
    assert capsys.readouterr().out.strip() == "Epoch 3: early stopping"


def test_model_checkpoint_writes_files_that_restore(tmp_path):
    (x_train, y_train), (x_test, _) = _digits()
    model = get_compiled_model()

    class Predictions(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seen = []

        def on_epoch_end(self, epoch, logs=None):
            self.seen.append(self.model.predict(x_test, verbose=0))

    preds = Predictions()
    every = keras.callbacks.ModelCheckpoint(tmp_path / "mymodel_{epoch}.weights.npz", save_weights_only=True)
    model.fit(x_train, y_train, epochs=3, batch_size=128, callbacks=[preds, every], verbose=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"mymodel_{e}.weights.npz" for e in (1, 2, 3)]
    for epoch in (1, 3):
        twin = get_uncompiled_model()
        twin.load_weights(tmp_path / f"mymodel_{epoch}.weights.npz")
        np.testing.assert_array_equal(twin.predict(x_test, verbose=0), preds.seen[epoch - 1])

    # save_best_only on a constructed val_loss curve: only the improving epochs are written
    best_dir = tmp_path / "best"
    best_dir.mkdir()
    best = keras.callbacks.ModelCheckpoint(
        str(best_dir / "e{epoch:02d}-{val_loss:.2f}.npz"), save_best_only=True, monitor="val_loss", verbose=1
    )
    model = get_compiled_model()
    model.fit(
        x_train, y_train, epochs=4, batch_size=200, validation_split=0.2, verbose=0,
        callbacks=[_Curve([0.9, 0.95, 0.5, 0.7]), best],
    )  # fmt: skip
    assert sorted(p.name for p in best_dir.iterdir()) == ["e01-0.90.npz", "e03-0.50.npz"]
    # the whole training state (save_weights_only=False): weights and the optimizer's step count
    state = gt.load(best_dir / "e03-0.50.npz")
    assert int(state["opt:optimizer:iterations"]) == 3 * int(np.ceil(1120 / 200))
    twin = get_compiled_model()
    twin.build((None, 64))
    gt.load(best_dir / "e03-0.50.npz", into={"model": twin, "optimizer": twin.optimizer})
    assert int(twin.optimizer.iterations) == int(state["opt:optimizer:iterations"])


def test_custom_callback_sees_every_batch():
    (x_train, y_train), _ = _digits()

    class LossHistory(keras.callbacks.Callback):
        def on_train_begin(self, logs):
            self.per_batch_losses = []

        def on_batch_end(self, batch, logs):
            self.per_batch_losses.append(logs.get("loss"))

    cb = LossHistory()
    h = get_compiled_model().fit(x_train, y_train, epochs=2, batch_size=100, callbacks=[cb], verbose=0)
    assert len(cb.per_batch_losses) == 2 * 14
    assert cb.per_batch_losses[13] == h.history["loss"][0]  # the epoch's loss is the last batch's running mean
    assert cb.params["epochs"] == 2 and cb.params["steps"] == 14


def test_progress_output_in_keras_format(capsys, monkeypatch):
    (x_train, y_train), _ = _digits()
    model = get_uncompiled_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train[:640], y_train[:640], batch_size=64, epochs=2, validation_split=0.25, verbose=0)
    assert capsys.readouterr().out == ""
    model.fit(x_train[:640], y_train[:640], batch_size=64, epochs=2, validation_split=0.25, verbose=2)
    lines = capsys.readouterr().out.splitlines()
    number = r"\d+\.\d{4}"
    logs = rf"loss: {number} - accuracy: {number} - val_loss: {number} - val_accuracy: {number}"
    line = rf"8/8 - \d+s - \d+(us|ms|s)/step - {logs}"
    assert lines[0::2] == ["Epoch 1/2", "Epoch 2/2"] and len(lines) == 4
    assert all(re.fullmatch(line, text) for text in lines[1::2]), lines
    monkeypatch.setitem(sys.modules, "tqdm", None)  # Keras' own text bar
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)  # a terminal: bars are drawn
    model.fit(x_train[:640], y_train[:640], batch_size=64, epochs=1, verbose=1)
    out = capsys.readouterr().out
    final = out.splitlines()[-1].split("\r")[-1]
    assert out.startswith("Epoch 1/1\n")
    assert re.fullmatch(rf"10/10 ━{{20}} \d+s \d+(us|ms|s)/step - loss: {number} - accuracy: {number} *", final), final


def test_progress_bar_with_tqdm(capsys, monkeypatch):
    pytest.importorskip("tqdm")
    (x_train, y_train), _ = _digits()
    model = get_compiled_model()
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)  # a terminal: bars are drawn
    model.fit(x_train[:256], y_train[:256], batch_size=64, epochs=1, verbose=1)
    out = capsys.readouterr().out
    final = out.replace("\r", "\n").strip().splitlines()[-1]
    assert out.startswith("Epoch 1/1\n") and final.startswith("4/4 ") and " - loss: " in final, out
    assert "\r" in out  # tqdm redraws in place


@pytest.mark.parametrize("tqdm", ["installed", "absent"])
def test_output_that_is_no_terminal_gets_one_line_per_epoch_and_no_carriage_return(capsys, monkeypatch, tqdm):
    """Piped into a log, fit prints Keras' per-epoch line (verbose=2's) for verbose=1 and 'auto' too."""
    if tqdm == "installed":
        pytest.importorskip("tqdm")
    else:
        monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    (x_train, y_train), _ = _digits()
    model = get_compiled_model()
    number = r"\d+\.\d{4}"
    logs = rf"loss: {number} - (val_)?sparse_categorical_accuracy: {number}"
    line = rf"4/4 - \d+s - \d+(us|ms|s)/step - {logs} - val_{logs}"
    for verbose in ("auto", 1, 2):
        model.fit(x_train[:320], y_train[:320], batch_size=64, epochs=2, validation_split=0.2, verbose=verbose)
        out = capsys.readouterr().out
        assert "\r" not in out and "\b" not in out, repr(out)
        lines = out.splitlines()
        assert lines[0::2] == ["Epoch 1/2", "Epoch 2/2"] and len(lines) == 4, (verbose, lines)
        assert all(re.fullmatch(line, text) for text in lines[1::2]), (verbose, lines)
    model.evaluate(x_train[:128], y_train[:128], batch_size=64, verbose=1)
    model.predict(x_train[:128], batch_size=64)
    out = capsys.readouterr().out
    assert "\r" not in out and len(out.splitlines()) == 2, repr(out)  # one line each


def test_train_and_test_on_batch_and_errors():
    x = np.ones((4, 2), "float32")
    model = keras.Sequential([layers.Dense(1, kernel_initializer="zeros")])
    with pytest.raises(RuntimeError, match="compile"):
        model.fit(x, x[:, :1])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    # predictions 0, targets 2: mse 4, mae 2; the gradient step moves the kernel by 0.1 * 2 * 2 * 1 per weight
    assert model.test_on_batch(x, np.full((4, 1), 2.0)) == [4.0, 2.0]
    model.reset_metrics()
    assert model.train_on_batch(x, np.full((4, 1), 2.0), return_dict=True) == {"loss": 4.0, "mae": 2.0}
    np.testing.assert_allclose(model.layers[0].kernel.numpy(), [[0.4], [0.4]], rtol=1e-6)
    assert int(model.optimizer.iterations) == 1
    with pytest.raises(ValueError, match="unknown loss 'msee'"):
        model.compile(optimizer="sgd", loss="msee")
    with pytest.raises(ValueError, match="unknown optimizer"):
        model.compile(optimizer="adamax", loss="mse")
    with pytest.raises(NotImplementedError, match="one loss"):
        model.compile(optimizer="sgd", loss=["mse", "mae"])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="x has 4 samples but y has 3"):
        model.fit(x, np.ones((3, 1)), verbose=0)
    with pytest.raises(ValueError, match="one weight per sample"):
        model.fit(x, np.ones((4, 1)), sample_weight=np.ones(3), verbose=0)
    with pytest.raises(ValueError, match="verbose"):
        model.fit(x, np.ones((4, 1)), verbose=3)
    with pytest.raises(ValueError, match="validation_split"):
        model.fit(x, np.ones((4, 1)), validation_split=1.5, verbose=0)


def test_gt_nn_sequential_fits_too():
    gt.random.seed(4)
    x = np.random.default_rng(4).normal(size=(200, 3)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5]], "float32")
    model = gt.nn.Sequential([gt.nn.Dense(1)])
    model.compile(optimizer=gt.optim.Adam(0.05), loss="mse")
    h = model.fit(x, y, epochs=30, batch_size=20, verbose=0, shuffle=True)
    assert h.history["loss"][-1] < 0.01 * h.history["loss"][0]
    np.testing.assert_allclose(model.predict(x, verbose=0), model(x).numpy(), rtol=1e-6)
    # initial_epoch: the History counts epochs from there
    h = model.fit(x, y, epochs=3, initial_epoch=1, verbose=0)
    assert h.epoch == [1, 2]


@pytest.mark.parametrize("labels_shape", ["flat", "column"])
def test_float_labels_are_read_at_every_call_of_a_compiled_loss(labels_shape):
    # the loss once cast float class ids with numpy on the traced array: replays reused the first labels
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    logits = tf.constant([[2.0, 0.0], [0.0, 2.0]])
    step = tf.function(lambda y: loss_fn(y, logits))
    shape = (2,) if labels_shape == "flat" else (2, 1)
    right, wrong = np.array([0.0, 1.0]).reshape(shape), np.array([1.0, 0.0]).reshape(shape)
    small, large = np.log1p(np.exp(-2.0)), np.log1p(np.exp(2.0))  # -log softmax of the right / wrong class
    assert float(step(tf.constant(right, "float32"))) == pytest.approx(small, rel=1e-6)
    assert float(step(tf.constant(wrong, "float32"))) == pytest.approx(large, rel=1e-6)
    assert step.tracing_count == 1


@pytest.mark.gpu
def test_fit_on_the_gpu_matches_the_cpu():
    (x_train, y_train), (x_test, y_test) = _digits()
    results = {}
    for dev in ("cpu", "cuda"):
        with gt.device(dev):
            tf.random.set_seed(5)
            model = get_compiled_model()
            h = model.fit(x_train, y_train, batch_size=64, epochs=3, validation_split=0.2, verbose=0)
            results[dev] = (h.history, model.evaluate(x_test, y_test, verbose=0), model.predict(x_test, verbose=0))
            assert model.layers[-1].kernel.device.startswith(dev)
    (h_cpu, ev_cpu, p_cpu), (h_gpu, ev_gpu, p_gpu) = results["cpu"], results["cuda"]
    for k in h_cpu:
        np.testing.assert_allclose(h_gpu[k], h_cpu[k], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(ev_gpu, ev_cpu, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(p_gpu, p_cpu, rtol=1e-2, atol=1e-3)


def test_python_lists_are_arrays_and_a_functional_model_takes_a_list_of_inputs():
    model = keras.Sequential([layers.Dense(2, kernel_initializer="zeros")])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # zero logits: the cross-entropy of two classes is log 2 whatever the label
    assert model.evaluate([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [0, 1, 1], verbose=0) == pytest.approx(np.log(2))
    a, b = keras.Input(shape=(2,)), keras.Input(shape=(3,))
    out = layers.Dense(1)(layers.Concatenate()([a, b]))
    two = keras.Model([a, b], out)
    two.compile(optimizer="adam", loss="mse")
    xa, xb = np.ones((10, 2), "float32"), np.ones((10, 3), "float32")
    h = two.fit([xa, xb], np.zeros((10, 1)), batch_size=4, epochs=2, verbose=0)
    assert len(h.history["loss"]) == 2
    np.testing.assert_allclose(two.predict([xa, xb], verbose=0), two([xa, xb]).numpy(), rtol=1e-6)


def test_a_loss_without_reduction_is_averaged_over_the_batch():
    x, y = np.ones((6, 2), "float32"), np.full((6, 1), 3.0, "float32")
    model = keras.Sequential([layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer="sgd", loss=keras.losses.MeanSquaredError(reduction="none"))
    assert model.evaluate(x, y, batch_size=4, verbose=0) == pytest.approx(9.0)  # (0 - 3)**2 for every sample
