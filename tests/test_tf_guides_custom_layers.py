"""TensorFlow/Keras guides' programs, run with only ``import gputape.tf as tf`` (Keras is ``tf.keras``).

Each test follows one guide's code ("Making new layers and models via subclassing", "Transfer learning
& fine-tuning", "Writing a training loop from scratch") and asserts the outputs the guide prints or a
closed form; nothing is compared with gputape's own earlier output.
"""

import os

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape.tf as tf

keras = tf.keras


# "Making new layers and models via subclassing" ---------------------------------------------------------


class Linear(keras.layers.Layer):
    def __init__(self, units=32, input_dim=32):
        super().__init__()
        self.w = self.add_weight(shape=(input_dim, units), initializer="random_normal", trainable=True)
        self.b = self.add_weight(shape=(units,), initializer="zeros", trainable=True)

    def call(self, inputs):
        return tf.matmul(inputs, self.w) + self.b


def test_guide_linear_layer_weights_are_listed_in_creation_order():
    x = tf.ones((2, 2))
    linear_layer = Linear(4, 2)
    y = linear_layer(x)
    assert y.shape == (2, 4)
    assert_allclose(y.numpy(), np.ones((2, 2)) @ linear_layer.w.numpy() + linear_layer.b.numpy(), rtol=1e-6)
    assert linear_layer.weights == [linear_layer.w, linear_layer.b]
    assert abs(float(tf.math.reduce_std(linear_layer.w))) < 0.2  # random_normal: stddev 0.05


class ComputeSum(keras.layers.Layer):
    def __init__(self, input_dim):
        super().__init__()
        self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

    def call(self, inputs):
        self.total.assign_add(tf.reduce_sum(inputs, axis=0))
        return self.total


def test_guide_non_trainable_weight():
    x = tf.ones((2, 2))
    my_sum = ComputeSum(2)
    assert my_sum(x).numpy().tolist() == [2.0, 2.0]
    assert my_sum(x).numpy().tolist() == [4.0, 4.0]
    assert len(my_sum.weights) == 1
    assert len(my_sum.non_trainable_weights) == 1
    assert my_sum.trainable_weights == []


class LazyLinear(keras.layers.Layer):
    def __init__(self, units=32, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal", trainable=True)
        self.b = self.add_weight(shape=(self.units,), initializer="random_normal", trainable=True)

    def call(self, inputs):
        return tf.matmul(inputs, self.w) + self.b

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config


def test_guide_deferred_build_and_get_config_round_trip():
    layer = LazyLinear(32)
    assert not layer.built
    y = layer(tf.ones((2, 2)))
    assert layer.built and y.shape == (2, 32) and layer.w.shape == (2, 32)
    config = layer.get_config()
    assert config["units"] == 32 and config["trainable"] is True and config["dtype"] == "float32"
    assert set(config) == {"name", "trainable", "dtype", "units"}
    new_layer = LazyLinear.from_config(config)
    assert new_layer.units == 32 and not new_layer.built
    # build() called directly also marks the layer built (Keras' build wrapper), so a call does not rebuild
    other = LazyLinear(3)
    other.build((None, 5))
    w = other.w
    other(tf.ones((1, 5)))
    assert other.built and other.w is w


class ActivityRegularizationLayer(keras.layers.Layer):
    def __init__(self, rate=1e-2):
        super().__init__()
        self.rate = rate

    def call(self, inputs):
        self.add_loss(self.rate * tf.reduce_mean(inputs))
        return inputs


class OuterLayer(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.activity_reg = ActivityRegularizationLayer(1e-2)

    def call(self, inputs):
        return self.activity_reg(inputs)


def test_guide_add_loss_resets_at_each_outer_call():
    layer = OuterLayer()
    assert len(layer.losses) == 0  # No losses yet since the layer has never been called
    _ = layer(tf.zeros((1, 1)))
    assert len(layer.losses) == 1  # We created one loss value
    _ = layer(tf.ones((1, 1)) * 3.0)
    assert len(layer.losses) == 1  # `layer.losses` gets reset at the start of each __call__
    assert_allclose(float(layer.losses[0]), 0.03, rtol=1e-6)


def test_guide_losses_in_a_training_loop_are_differentiable():
    class Reg(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)

        def call(self, inputs):
            out = self.dense(inputs)
            self.add_loss(tf.reduce_sum(tf.square(self.dense.kernel)))
            return out

    layer = Reg()
    x = np.ones((1, 2), "float32")
    with tf.GradientTape() as tape:
        out = layer(x)
        loss = tf.reduce_sum(out) + sum(layer.losses)
    (g,) = tape.gradient(loss, layer.trainable_weights)
    assert_allclose(g.numpy(), np.full((2, 1), 1.0 + 2.0))  # d(sum(xW))/dW = x^T, d(sum W^2)/dW = 2W


class MLPBlock(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.linear_1 = LazyLinear(32)
        self.linear_2 = LazyLinear(32)
        self.linear_3 = LazyLinear(1)

    def call(self, inputs):
        x = self.linear_1(inputs)
        x = tf.nn.relu(x)
        x = self.linear_2(x)
        x = tf.nn.relu(x)
        return self.linear_3(x)


def test_guide_nested_layers_weights():
    mlp = MLPBlock()
    y = mlp(tf.ones(shape=(3, 64)))  # The first call to the `mlp` will create the weights
    assert y.shape == (3, 1)
    assert len(mlp.weights) == 6
    assert len(mlp.trainable_weights) == 6
    assert [v.shape for v in mlp.weights] == [(64, 32), (32,), (32, 32), (32,), (32, 1), (1,)]
    assert mlp.count_params() == 64 * 32 + 32 + 32 * 32 + 32 + 32 + 1


def test_keras_order_own_weights_first_trainable_before_non_trainable_then_sublayers():
    class M(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2, input_shape=(3,))
            self.scale = self.add_weight(shape=(), initializer="ones", name="scale")
            self.count = self.add_weight(shape=(), initializer="zeros", trainable=False, name="count")
            self.shift = self.add_weight(shape=(2,), initializer="zeros", name="shift")

        def call(self, x):
            return self.dense(x) * self.scale + self.shift

    m = M()
    names = [v.name.split("/")[-1] for v in m.weights]
    assert names == ["scale", "shift", "count", "kernel", "bias"]
    assert isinstance(m.weights, list) and isinstance(m.trainable_variables, list)
    assert [v.name.split("/")[-1] for v in m.trainable_weights] == ["scale", "shift", "kernel", "bias"]


# "Transfer learning & fine-tuning" -------------------------------------------------------------------------


def test_guide_trainable_attribute_on_dense_and_batchnorm():
    layer = keras.layers.Dense(3)
    layer.build((None, 4))  # Create the weights
    layer.trainable = False
    assert len(layer.weights) == 2
    assert len(layer.trainable_weights) == 0
    assert len(layer.non_trainable_weights) == 2
    bn = keras.layers.BatchNormalization()
    bn.build((None, 4))
    assert len(bn.weights) == 4 and len(bn.trainable_weights) == 2 and len(bn.non_trainable_weights) == 2


def test_guide_trainable_is_recursive():
    inner_model = keras.Sequential(
        [keras.Input(shape=(3,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(3, activation="relu")]
    )
    model = keras.Sequential([keras.Input(shape=(3,)), inner_model, keras.layers.Dense(3, activation="sigmoid")])
    model.trainable = False  # Freeze the outer model
    assert inner_model.trainable is False  # All layers in `model` are now frozen
    assert inner_model.layers[0].trainable is False  # `trainable` is propagated recursively
    assert model.trainable_weights == [] and len(model.non_trainable_weights) == 6
    model.trainable = True
    assert len(model.trainable_weights) == 6


def test_guide_frozen_layer_does_not_change_while_training():
    layer1 = keras.layers.Dense(3, activation="relu")
    layer2 = keras.layers.Dense(3, activation="sigmoid")
    model = keras.Sequential([keras.Input(shape=(3,)), layer1, layer2])
    layer1.trainable = False  # Freeze the first layer
    initial_layer1_weights_values = layer1.get_weights()
    initial_layer2_weights_values = layer2.get_weights()
    opt = keras.optimizers.Adam()
    loss_fn = keras.losses.MeanSquaredError()
    rng = np.random.default_rng(0)
    x, y = rng.random((2, 3)).astype("float32"), rng.random((2, 3)).astype("float32")
    for _ in range(3):  # the guide's model.fit, as a custom loop
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(grads, model.trainable_weights))
        # a frozen layer's variables are not even watched by the tape
        assert not any(v is layer1.kernel for v in tape.watched_variables())
    for a, b in zip(initial_layer1_weights_values, layer1.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(initial_layer2_weights_values[0], layer2.get_weights()[0])


def test_frozen_batchnorm_runs_in_inference_mode_and_keeps_its_statistics():
    bn = keras.layers.BatchNormalization()
    x = np.array([[1.0, 2.0], [3.0, 6.0]], "float32")
    bn(x, training=True)
    mm = bn.moving_mean.numpy()
    bn.trainable = False
    y = bn(x, training=True)  # Keras: training and self.trainable
    np.testing.assert_array_equal(bn.moving_mean.numpy(), mm)
    expected = (x - mm) / np.sqrt(bn.moving_variance.numpy() + 1e-3)
    assert_allclose(y.numpy(), expected, rtol=1e-6)
    bn.trainable = True
    assert len(bn.trainable_weights) == 2 and bn.moving_mean.trainable is False  # the statistics stay frozen


def test_add_weight_in_a_frozen_layer_is_restored_on_unfreeze():
    d = keras.layers.Dense(2)
    d.trainable = False
    d(np.ones((1, 3), "float32"))  # built while frozen
    assert d.trainable_weights == [] and d.kernel.trainable is False
    d.trainable = True
    assert d.trainable_weights == [d.kernel, d.bias]


# summary, count_params, save_weights / load_weights -------------------------------------------------------


def test_summary_table_with_output_shapes_and_parameter_counts():
    model = keras.Sequential(
        [
            keras.Input(shape=(8,)),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.Dense(4, name="logits"),
        ],
        name="classifier",
    )
    lines = []
    model.summary(print_fn=lines.append)
    text = lines[0]
    assert text.splitlines()[0] == 'Model: "classifier"'
    assert "hidden (Dense)" in text and "(None, 16)" in text and "bn (BatchNormalization)" in text
    rows = {line.split("│")[1].strip(): line.split("│")[3].strip() for line in text.splitlines() if "│" in line}
    assert rows == {"hidden (Dense)": "144", "bn (BatchNormalization)": "64", "logits (Dense)": "68"}
    total = 8 * 16 + 16 + 4 * 16 + 16 * 4 + 4
    assert total == 276 and f" Total params: 276 ({276 * 4 / 1024:.2f} KB)" in text  # Keras' 1024-based units
    assert " Trainable params: 244 (976.00 B)" in text
    assert " Non-trainable params: 32 (128.00 B)" in text
    assert model.count_params() == total


def test_count_params_of_an_unbuilt_layer_says_what_to_do():
    with pytest.raises(ValueError, match="build"):
        keras.layers.Dense(3).count_params()


def test_save_weights_and_load_weights_round_trip(tmp_path):
    def make():
        return keras.Sequential(
            [keras.Input(shape=(3,)), keras.layers.Dense(4), keras.layers.BatchNormalization(), keras.layers.Dense(1)]
        )

    a, b = make(), make()
    a(np.random.default_rng(0).random((5, 3)).astype("float32"), training=True)  # moving statistics change
    path = os.fspath(tmp_path / "model.npz")
    a.save_weights(path)
    b.load_weights(path)
    for va, vb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
    x = np.ones((2, 3), "float32")
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())


def test_sequential_prints_its_layer_tree():
    model = keras.Sequential(
        [keras.Input(shape=(3,)), keras.layers.Dense(4, name="d1"), keras.Sequential([keras.layers.Dense(2)])],
        name="outer",
    )
    text = repr(model)
    assert text.splitlines()[0] == "<Sequential 'outer'; 26 params>"
    assert "  (0): <Dense 'd1', units=4" in text
    assert "\n  (1): <Sequential " in text and "\n    (0): <Dense " in text  # nested models indent
    assert "0x" not in text


def test_shared_weights_and_back_references_are_listed_once_without_looping():
    class Tied(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.enc = keras.layers.Dense(3, input_shape=(4,))
            self.also = self.enc.kernel  # the same variable under two attributes
            self.pair = [self.enc, self.enc]
            self.enc.parent = self  # a back-reference from the sub-layer

        def call(self, x):
            return self.enc(x)

    t = Tied()
    assert [id(v) for v in t.weights] == [id(t.enc.kernel), id(t.enc.bias)]
    t.trainable = False
    assert t.trainable_weights == [] and t.enc.trainable is False
