"""Keras' "The Functional API" guide, run with only ``import gputape.tf as tf``.

The guide's models (an MNIST MLP, an encoder/decoder built from nested models, a multi-input
multi-output ticket classifier, a toy ResNet with shared and residual connections) are built as
written, with the guide's numbers (parameter counts, output shapes) asserted; where the guide calls
``fit``, a GradientTape loop trains instead, and outputs are compared with the same layers called by hand.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape.tf as tf

keras = tf.keras
layers = tf.keras.layers


def test_guide_mnist_model_and_its_summary():
    inputs = keras.Input(shape=(784,))
    assert inputs.shape == (None, 784) and inputs.dtype == np.float32
    dense = layers.Dense(64, activation="relu")
    x = dense(inputs)
    assert x.shape == (None, 64)
    x = layers.Dense(64, activation="relu")(x)
    outputs = layers.Dense(10)(x)
    model = keras.Model(inputs=inputs, outputs=outputs, name="mnist_model")
    lines = []
    model.summary(print_fn=lines.append)
    text = lines[0]
    assert text.startswith('Model: "mnist_model"')
    params = [line.split("│")[3].strip() for line in text.splitlines() if line.startswith("│")]
    shapes = [line.split("│")[2].strip() for line in text.splitlines() if line.startswith("│")]
    assert params == ["0", "50,240", "4,160", "650"]  # the guide's table
    assert shapes == ["(None, 784)", "(None, 64)", "(None, 64)", "(None, 10)"]
    assert " Total params: 55,050 (215.04 KB)" in text  # the guide's total
    assert [type(lay).__name__ for lay in model.layers] == ["InputLayer", "Dense", "Dense", "Dense"]
    x_batch = np.random.default_rng(0).random((3, 784)).astype("float32")
    by_hand = model.layers[3](model.layers[2](model.layers[1](x_batch)))
    np.testing.assert_array_equal(model(x_batch).numpy(), by_hand.numpy())


def test_guide_models_as_layers_encoder_decoder():
    encoder_input = keras.Input(shape=(28, 28, 1), name="img")
    x = layers.Flatten()(encoder_input)
    x = layers.Dense(32, activation="relu")(x)
    encoder_output = layers.Dense(16, activation="relu")(x)
    encoder = keras.Model(encoder_input, encoder_output, name="encoder")
    decoder_input = keras.Input(shape=(16,), name="encoded_img")
    x = layers.Dense(784, activation="relu")(decoder_input)
    decoder_output = layers.Reshape((28, 28, 1))(x)
    decoder = keras.Model(decoder_input, decoder_output, name="decoder")
    autoencoder_input = keras.Input(shape=(28, 28, 1), name="img")
    encoded_img = encoder(autoencoder_input)
    decoded_img = decoder(encoded_img)
    assert encoded_img.shape == (None, 16) and decoded_img.shape == (None, 28, 28, 1)
    autoencoder = keras.Model(autoencoder_input, decoded_img, name="autoencoder")
    assert len(autoencoder.weights) == len(encoder.weights) + len(decoder.weights) == 6
    assert autoencoder.count_params() == (784 * 32 + 32) + (32 * 16 + 16) + (16 * 784 + 784)
    imgs = np.random.default_rng(1).random((2, 28, 28, 1)).astype("float32")
    np.testing.assert_array_equal(autoencoder(imgs).numpy(), decoder(encoder(imgs)).numpy())


def test_guide_multi_input_multi_output_ticket_model_trains():
    num_tags, num_words, num_departments = 12, 100, 4
    title_input = keras.Input(shape=(None,), name="title", dtype="int32")
    body_input = keras.Input(shape=(None,), name="body", dtype="int32")
    tags_input = keras.Input(shape=(num_tags,), name="tags")
    title_features = layers.Embedding(num_words, 16)(title_input)
    body_features = layers.Embedding(num_words, 16)(body_input)
    assert title_features.shape == (None, None, 16)  # sequence length unknown until called
    # the guide's LSTMs, replaced by a mean over the sequence (gputape has no recurrent layers)
    title_features = layers.Lambda(lambda t: tf.reduce_mean(t, axis=1))(title_features)
    body_features = layers.Lambda(lambda t: tf.reduce_mean(t, axis=1))(body_features)
    x = layers.Concatenate()([title_features, body_features, tags_input])
    assert x.shape == (None, 16 + 16 + num_tags)
    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(num_departments, name="department")(x)
    model = keras.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )
    rng = np.random.default_rng(2)
    title_data = rng.integers(num_words, size=(64, 10))
    body_data = rng.integers(num_words, size=(64, 20))
    tags_data = rng.integers(2, size=(64, num_tags)).astype("float32")
    priority_targets = (tags_data[:, :1] > 0).astype("float32")  # learnable from the tags
    dept_targets = np.eye(num_departments)[(tags_data[:, 1:3] @ np.array([1.0, 2.0])).astype(int)]
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    cce = keras.losses.CategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(0.05)
    losses = []
    for _ in range(40):
        with tf.GradientTape() as tape:
            out = model([title_data, body_data, tags_data], training=True)
            loss = bce(priority_targets, out["priority"]) + 0.2 * cce(dept_targets, out["department"])
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    assert set(out) == {"priority", "department"} and out["department"].shape == (64, num_departments)
    assert losses[-1] < 0.3 * losses[0]
    assert len(model.trainable_variables) == 2 + 4  # two embeddings, two dense layers


def test_guide_toy_resnet_with_add_and_shared_layers():
    inputs = keras.Input(shape=(8,), name="x")
    block_1_output = layers.Dense(8, activation="relu")(inputs)
    x = layers.Dense(8, activation="relu")(block_1_output)
    block_2_output = layers.Add()([x, block_1_output])
    shared = layers.Dense(4)
    a, b = shared(block_2_output), shared(block_1_output)  # one layer, two calls, one set of weights
    outputs = layers.Concatenate()([a, b])
    model = keras.Model(inputs, outputs, name="toy_resnet")
    assert len(model.weights) == 6
    xb = np.random.default_rng(3).random((5, 8)).astype("float32")
    d1, d2 = model.layers[1], model.layers[2]
    h1 = d1(xb)
    h2 = d2(h1) + h1
    expected = np.concatenate([shared(h2).numpy(), shared(h1).numpy()], axis=-1)
    assert_allclose(model(xb).numpy(), expected, rtol=1e-6)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(xb))
    grads = tape.gradient(loss, model.trainable_weights)
    assert all(g is not None for g in grads)


def test_functional_errors_are_clear():
    x = keras.Input(shape=(3,), name="x")
    y = keras.Input(shape=(3,), name="y")
    out = layers.Add()([x, y])
    with pytest.raises(ValueError, match=r"graph disconnected.*'y'"):
        keras.Model(x, out)
    model = keras.Model([x, y], out)
    with pytest.raises(ValueError, match=r"input 1 \('y'\) expects shape \(None, 3\), got \(2, 4\)"):
        model([np.zeros((2, 3)), np.zeros((2, 4))])
    with pytest.raises(ValueError, match="expects 2 input"):
        model(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="symbolic"):
        _ = x + 1.0  # arithmetic on a symbolic tensor: use a layer
    with pytest.raises(TypeError, match="symbolic tensors"):
        keras.Model(x, np.zeros(3))


def test_sequential_starting_with_input_of_unknown_length():
    model = keras.Sequential([keras.Input(shape=(None,), dtype="int32"), layers.Embedding(20, 4), layers.Dense(2)])
    assert model.built and len(model.weights) == 3
    assert model(np.array([[1, 2, 3]])).shape == (1, 3, 2)
    assert model(np.array([[1, 2, 3, 4, 5]])).shape == (1, 5, 2)


def test_building_on_symbolic_inputs_leaves_layer_state_untouched():
    bn = layers.BatchNormalization()
    x = keras.Input(shape=(3,))
    _ = bn(x)
    assert bn.moving_mean.numpy().tolist() == [0.0, 0.0, 0.0]
    assert bn.moving_variance.numpy().tolist() == [1.0, 1.0, 1.0]


def test_predict_batches_several_inputs_and_outputs():
    a, b = keras.Input(shape=(2,), name="a"), keras.Input(shape=(1,), name="b")
    s = layers.Concatenate()([a, b])
    model = keras.Model({"a": a, "b": b}, [layers.Dense(1)(s), s])
    xa, xb = np.arange(10.0).reshape(5, 2).astype("float32"), np.ones((5, 1), "float32")
    out, cat = model.predict({"a": xa, "b": xb}, batch_size=2)
    assert out.shape == (5, 1) and isinstance(out, np.ndarray)
    np.testing.assert_array_equal(cat, np.concatenate([xa, xb], -1))
    np.testing.assert_allclose(out, model({"a": xa, "b": xb})[0].numpy(), rtol=1e-6)
