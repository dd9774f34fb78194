"""The training conveniences against Keras 3 itself: the same model, data and callbacks trained by both.

Skips without keras (or without a working Keras backend); with keras installed (any backend that
trains: jax, tensorflow, torch) the histories, weights, learning rates and CSV logs must agree."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import gputape.tf as tf

# the backend test_keras_saving.py picks too (the first import of keras in a process fixes it)
os.environ.setdefault("KERAS_BACKEND", "jax" if importlib.util.find_spec("jax") else "numpy")
keras = pytest.importorskip("keras")
if keras.backend.backend() == "numpy":
    pytest.skip("Keras' numpy backend cannot train: install jax (or set KERAS_BACKEND)", allow_module_level=True)

_RNG = np.random.default_rng(11)
_X = _RNG.normal(size=(24, 3)).astype("float32")
_Y = (_X @ np.array([[1.5], [-2.0], [0.5]], "float32") + 0.3).astype("float32")
_SW = np.linspace(0.2, 2.0, 24).astype("float32")
_K = np.array([[0.4, -0.3], [0.2, 0.9], [-0.7, 0.1]], "float32")
_K2 = np.array([[0.5], [-1.0]], "float32")


def _build(lib, regularized: bool):
    layers = lib.layers
    kw = {}
    if regularized:
        # (no L1 on the NonNeg bias: it pins entries at exactly 0, where |x|'s subgradient is the
        # backend's choice: 0 in TensorFlow, PyTorch and gputape, 1 in JAX)
        kw = dict(
            kernel_regularizer=lib.regularizers.l1_l2(l1=0.01, l2=0.05),
            bias_regularizer=lib.regularizers.L2(0.1),
            activity_regularizer=lib.regularizers.L2(0.01),
            kernel_constraint=lib.constraints.MaxNorm(1.0),
            bias_constraint=lib.constraints.NonNeg(),
        )
    model = lib.Sequential([lib.Input(shape=(3,)), layers.Dense(2, activation="tanh", **kw), layers.Dense(1)])
    model.layers[0].set_weights([_K, np.array([0.1, -0.1], "float32")])
    model.layers[1].set_weights([_K2, np.zeros(1, "float32")])
    model.compile(optimizer=lib.optimizers.SGD(0.05), loss="mse")
    return model


def _train(lib, tmp_path, name):
    model = _build(lib, regularized=True)
    callbacks = [
        lib.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_delta=10.0),
        lib.callbacks.CSVLogger(str(tmp_path / f"{name}.csv")),
    ]
    h = model.fit(_X, _Y, sample_weight=_SW, validation_split=0.25, batch_size=4, epochs=4, shuffle=False,
                  verbose=0, callbacks=callbacks)  # fmt: skip
    lr = float(np.asarray(model.optimizer.learning_rate))
    return h.history, [np.asarray(w) for w in model.get_weights()], lr, (tmp_path / f"{name}.csv").read_text()


def test_regularized_constrained_weighted_fit_with_callbacks_matches_keras(tmp_path):
    ours = _train(tf.keras, tmp_path, "ours")
    theirs = _train(keras, tmp_path, "keras")
    assert sorted(ours[0]) == sorted(theirs[0])
    for key in theirs[0]:
        np.testing.assert_allclose(ours[0][key], theirs[0][key], rtol=2e-5, err_msg=key)
    for a, b in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    assert ours[2] == pytest.approx(theirs[2])
    ours_rows = [r.split(",") for r in ours[3].splitlines()]
    theirs_rows = [r.split(",") for r in theirs[3].splitlines()]
    assert ours_rows[0] == theirs_rows[0] and len(ours_rows) == len(theirs_rows)
    for a, b in zip(ours_rows[1:], theirs_rows[1:]):
        np.testing.assert_allclose([float(v) for v in a], [float(v) for v in b], rtol=2e-5)


def test_class_weight_and_learning_rate_scheduler_match_keras():
    y = np.array([0, 1, 2, 1] * 6)
    results = []
    for lib in (tf.keras, keras):
        model = lib.Sequential([lib.Input(shape=(3,)), lib.layers.Dense(3)])
        model.layers[0].set_weights([np.arange(9, dtype="float32").reshape(3, 3) / 10, np.zeros(3, "float32")])
        model.compile(optimizer=lib.optimizers.SGD(0.1),
                      loss=lib.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
        sched = lib.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5 if epoch else lr)
        h = model.fit(_X, y, class_weight={0: 2.0, 2: 0.25}, batch_size=6, epochs=3, shuffle=False, verbose=0,
                      callbacks=[sched])  # fmt: skip
        results.append((h.history, [np.asarray(w) for w in model.get_weights()]))
    (ours, ow), (theirs, tw) = results
    np.testing.assert_allclose(ours["loss"], theirs["loss"], rtol=2e-5)
    np.testing.assert_allclose(ours["learning_rate"], theirs["learning_rate"], rtol=1e-7)
    for a, b in zip(ow, tw):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)


def test_steps_per_epoch_consumes_batches_as_keras():
    counts = []
    for lib in (tf.keras, keras):

        class Count(lib.callbacks.Callback):
            seen: list[int] = []

            def on_epoch_begin(self, epoch, logs=None):
                self.seen.append(0)

            def on_train_batch_end(self, batch, logs=None):
                self.seen[-1] += 1

        model = lib.Sequential([lib.Input(shape=(3,)), lib.layers.Dense(1)])
        model.compile(optimizer=lib.optimizers.SGD(0.0), loss="mse")
        with pytest.warns(UserWarning, match="ran out of data"):
            model.fit(_X[:5], _Y[:5], batch_size=2, steps_per_epoch=2, epochs=4, verbose=0, callbacks=[Count()])
        counts.append(Count.seen)
    assert counts[0] == counts[1]
