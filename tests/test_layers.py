"""gt.nn layers, initializers, activations and Keras-style losses."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import gputape as gt
from gputape.nn import functional


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# -- Dense --------------------------------------------------------------------------------


def test_dense_builds_lazily_on_the_first_call():
    layer = gt.nn.Dense(3, name="fc")
    assert not layer.built and layer.variables == []
    out = layer(np.ones((2, 5), np.float32))
    assert layer.built and out.shape == (2, 3)
    assert [(v.name, v.shape) for v in layer.trainable_variables] == [("fc/kernel", (5, 3)), ("fc/bias", (3,))]
    kernel = layer.kernel
    layer(np.ones((4, 5), np.float32))
    assert layer.kernel is kernel  # built once


def test_dense_computes_activation_of_affine_map():
    layer = gt.nn.Dense(2, activation="relu", dtype="float64")
    x = np.array([[1.0, -2.0, 0.5], [0.0, 1.0, -1.0]])
    out = layer(x).numpy()
    w, b = layer.kernel.numpy(), layer.bias.numpy()
    assert_allclose(out, np.maximum(x @ w + b, 0))


def test_dense_gradients_match_hand_derivation():
    layer = gt.nn.Dense(2, dtype="float64", bias_initializer="ones")
    x = np.array([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]])
    with gt.GradientTape() as tape:
        y = layer(x)
        loss = gt.sum(y * y)
    dk, db = tape.gradient(loss, [layer.kernel, layer.bias])
    yv = x @ layer.kernel.numpy() + 1.0
    assert_allclose(dk.numpy(), x.T @ (2 * yv))
    assert_allclose(db.numpy(), 2 * yv.sum(0))


def test_dense_gradient_check_in_float64():
    layer = gt.nn.Dense(3, activation="tanh", dtype="float64")
    x = np.random.default_rng(0).normal(size=(4, 2))
    layer(x)

    def f(k, b):
        return gt.tanh(gt.matmul(x, k) + b)

    gt.testing.check_grads(f, layer.kernel.numpy(), layer.bias.numpy(), order=2)


def test_dense_options():
    no_bias = gt.nn.Dense(2, use_bias=False, kernel_initializer="ones")
    assert_allclose(no_bias(np.ones((1, 3), np.float32)).numpy(), [[3.0, 3.0]])
    assert len(no_bias.trainable_variables) == 1 and no_bias.bias is None
    custom = gt.nn.Dense(1, activation=lambda t: t * 10, kernel_initializer=lambda s, d: np.full(s, 0.5, d))
    assert_allclose(custom(np.ones((1, 2), np.float32)).numpy(), [[10.0]])
    built = gt.nn.Dense(4, input_shape=(7,))
    assert built.built and built.kernel.shape == (7, 4)


def test_dense_casts_floating_inputs_to_its_dtype():
    layer = gt.nn.Dense(2)
    assert layer(np.ones((1, 3))).dtype == np.float32  # float64 numpy input, float32 layer
    assert layer(gt.constant(np.ones((1, 3)))).dtype == np.float32
    wide = gt.nn.Dense(2, dtype="float64")
    assert wide(np.ones((1, 3), np.float32)).dtype == np.float64


def test_dense_errors():
    with pytest.raises(ValueError, match="units"):
        gt.nn.Dense(0)
    with pytest.raises(ValueError, match="unknown activation"):
        gt.nn.Dense(2, activation="nope")
    with pytest.raises(ValueError, match="unknown initializer"):
        gt.nn.Dense(2, kernel_initializer="nope")
    layer = gt.nn.Dense(2)
    layer(np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match="last dimension 3"):
        layer(np.ones((1, 4), np.float32))
    with pytest.raises(TypeError, match="unexpected keyword"):
        gt.nn.Dense(2, bogus=1)


def test_dense_layers_get_unique_names():
    a, b = gt.nn.Dense(1), gt.nn.Dense(1)
    assert a.name != b.name and a.name.startswith("dense") and b.name.startswith("dense")


# -- activations and initializers -------------------------------------------------------------


@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "softmax", "elu", "gelu", "softplus", "silu", "linear"])
def test_activations_by_name(name):
    x = np.array([[-1.5, 0.0, 2.0]])
    expected = {
        "relu": np.maximum(x, 0),
        "sigmoid": 1 / (1 + np.exp(-x)),
        "tanh": np.tanh(x),
        "softmax": softmax(x),
        "elu": np.where(x > 0, x, np.expm1(x)),
        "softplus": np.log1p(np.exp(x)),
        "silu": x / (1 + np.exp(-x)),
        "linear": x,
    }
    out = gt.nn.activations.get(name)(gt.constant(x)).numpy()
    if name == "gelu":
        assert_allclose(out, [[-1.5 * 0.0668072, 0.0, 2.0 * 0.9772499]], rtol=1e-5)
    else:
        assert_allclose(out, expected[name], rtol=1e-12)


def test_initializer_statistics():
    shape = (400, 300)
    glorot = gt.nn.initializers.GlorotUniform(seed=0)(shape)
    limit = np.sqrt(6 / (400 + 300))
    assert glorot.dtype == np.float32 and np.abs(glorot).max() <= limit and np.abs(glorot).max() > 0.99 * limit
    he = gt.nn.initializers.HeNormal(seed=0)(shape, "float64")
    assert he.dtype == np.float64 and abs(he.std() - np.sqrt(2 / 400)) < 0.002
    assert np.abs(he).max() <= 2 * np.sqrt(2 / 400) / 0.87962566103423978 + 1e-12  # truncated at 2 sd
    he_u = gt.nn.initializers.HeUniform(seed=0)(shape)
    assert np.abs(he_u).max() <= np.sqrt(6 / 400)
    glorot_n = gt.nn.initializers.GlorotNormal(seed=0)(shape)
    assert abs(glorot_n.std() - np.sqrt(2 / 700)) < 0.002
    assert_array_equal(gt.nn.initializers.get("zeros")((2,)), [0, 0])
    assert_array_equal(gt.nn.initializers.get("ones")((2,)), [1, 1])


def test_initializers_follow_the_global_seed():
    gt.random.seed(5)
    a = gt.nn.Dense(3)
    a.build((None, 4))
    gt.random.seed(5)
    b = gt.nn.Dense(3)
    b.build((None, 4))
    assert_array_equal(a.kernel.numpy(), b.kernel.numpy())


# -- Dropout ------------------------------------------------------------------------------------


def test_dropout_is_identity_unless_training():
    drop = gt.nn.Dropout(0.5)
    x = np.arange(6.0).reshape(2, 3)
    assert_array_equal(drop(x).numpy(), x)
    assert_array_equal(drop(x, training=False).numpy(), x)


def test_dropout_when_training_zeroes_a_fraction_and_rescales():
    drop = gt.nn.Dropout(0.25, seed=0)
    x = np.ones((200, 100), np.float32)
    y = drop(x, training=True).numpy()
    kept = y != 0
    assert 0.72 < kept.mean() < 0.78
    assert_allclose(y[kept], 1 / 0.75)
    assert abs(y.mean() - 1.0) < 0.03  # the expectation is preserved


def test_dropout_gradient_is_the_mask():
    drop = gt.nn.Dropout(0.5, seed=1)
    x = gt.constant(np.ones((4, 8)))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = drop(x, training=True)
        s = gt.sum(y)
    g = tape.gradient(s, x).numpy()
    assert_allclose(g, y.numpy())  # x is all ones, so y is exactly the scaled mask


def test_dropout_validates_rate():
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ValueError, match="rate"):
            gt.nn.Dropout(bad)


# -- Sequential and Flatten ---------------------------------------------------------------------


def test_sequential_passes_training_to_layers_that_take_it():
    seen = []

    class Probe(gt.nn.Layer):
        def call(self, x, training=None):
            seen.append(training)
            return x

    model = gt.nn.Sequential([Probe(), gt.nn.relu, Probe()])
    model(np.ones((1, 2)), training=True)
    model(np.ones((1, 2)))
    assert seen == [True, True, None, None]


def test_sequential_with_dropout_differs_between_modes():
    gt.random.seed(0)
    model = gt.nn.Sequential([gt.nn.Dense(16), gt.nn.Dropout(0.5), gt.nn.Dense(2)])
    x = np.ones((3, 4), np.float32)
    assert_array_equal(model(x).numpy(), model(x, training=False).numpy())
    assert not np.allclose(model(x, training=True).numpy(), model(x).numpy())


def test_sequential_build_add_and_nesting():
    inner = gt.nn.Sequential([gt.nn.Dense(3)])
    model = gt.nn.Sequential([gt.nn.Flatten(), inner])
    model.add(gt.nn.Dense(2))
    model.build((None, 2, 2))
    assert [p for p, _ in model.named_variables()] == [
        "layers/1/layers/0/kernel",
        "layers/1/layers/0/bias",
        "layers/2/kernel",
        "layers/2/bias",
    ]
    assert model(np.ones((5, 2, 2), np.float32)).shape == (5, 2)
    with pytest.raises(TypeError, match="layer or callable"):
        model.add(3)
    with pytest.raises(ValueError, match="must be known"):
        gt.nn.Sequential([gt.nn.Dense(1)]).build((None, None))


def test_flatten():
    assert gt.nn.Flatten()(np.zeros((2, 3, 4))).shape == (2, 12)


def test_custom_layer_with_add_weight():
    class Scale(gt.nn.Layer):
        def build(self, input_shape):
            self.s = self.add_weight("s", (input_shape[-1],), "ones")
            self.count = self.add_weight("count", (), "zeros", trainable=False)

        def call(self, x):
            return x * self.s

    layer = Scale(name="scale")
    layer(np.ones((2, 3), np.float32))
    assert [v.name for v in layer.trainable_variables] == ["scale/s"]
    assert [v.name for v in layer.non_trainable_variables] == ["scale/count"]


# -- losses ------------------------------------------------------------------------------------


def test_sparse_categorical_crossentropy_logits_and_probabilities():
    z = np.array([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0]])
    labels = np.array([1, 2])
    expected = -np.log(softmax(z)[np.arange(2), labels]).mean()
    from_logits = gt.nn.losses.SparseCategoricalCrossentropy(from_logits=True)
    from_probs = gt.nn.losses.SparseCategoricalCrossentropy()
    assert_allclose(float(from_logits(labels, gt.constant(z))), expected, rtol=1e-12)
    assert_allclose(float(from_probs(labels, gt.constant(softmax(z)))), expected, rtol=1e-9)
    assert_allclose(float(from_logits(labels[:, None], gt.constant(z))), expected, rtol=1e-12)  # (batch, 1) labels


def test_loss_reductions_and_sample_weight():
    z = gt.constant(np.array([[0.0, 0.0], [0.0, 0.0]]))
    per = np.log(2.0)
    assert_allclose(gt.nn.losses.SparseCategoricalCrossentropy(True, reduction="none")([0, 1], z).numpy(), [per, per])
    assert_allclose(float(gt.nn.losses.SparseCategoricalCrossentropy(True, reduction="sum")([0, 1], z)), 2 * per)
    weighted = gt.nn.losses.SparseCategoricalCrossentropy(True)([0, 1], z, sample_weight=np.array([1.0, 0.0]))
    assert_allclose(float(weighted), per / 2)
    with pytest.raises(ValueError, match="reduction"):
        gt.nn.losses.MeanSquaredError(reduction="avg")


def test_categorical_binary_and_mse_losses():
    z = np.array([[1.0, -1.0, 0.0]])
    y = np.array([[0.2, 0.3, 0.5]])
    expected = -(y * np.log(softmax(z))).sum()
    assert_allclose(float(gt.nn.losses.CategoricalCrossentropy(True)(y, gt.constant(z))), expected, rtol=1e-12)
    assert_allclose(float(gt.nn.losses.CategoricalCrossentropy()(y, gt.constant(softmax(z)))), expected, rtol=1e-9)
    smoothed = gt.nn.losses.CategoricalCrossentropy(True, label_smoothing=0.3)
    smooth = smoothed(np.array([[1.0, 0.0, 0.0]]), gt.constant(z))
    ys = np.array([[0.8, 0.1, 0.1]])
    assert_allclose(float(smooth), -(ys * np.log(softmax(z))).sum(), rtol=1e-12)

    logits = np.array([[2.0, -1.0], [0.5, 0.0]])
    labels = np.array([[1.0, 0.0], [0.0, 1.0]])
    p = 1 / (1 + np.exp(-logits))
    bce = -(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean()
    assert_allclose(float(gt.nn.losses.BinaryCrossentropy(True)(labels, gt.constant(logits))), bce, rtol=1e-12)
    assert_allclose(float(gt.nn.losses.BinaryCrossentropy()(labels, gt.constant(p))), bce, rtol=1e-6)

    a, b = np.array([[1.0, 2.0], [3.0, 5.0]]), np.array([[0.0, 2.0], [1.0, 1.0]])
    assert_allclose(float(gt.nn.losses.MeanSquaredError()(a, gt.constant(b))), ((a - b) ** 2).mean())


def test_loss_objects_reuse_the_functional_math():
    z = gt.constant(np.random.default_rng(1).normal(size=(5, 4)))
    labels = np.array([0, 3, 1, 2, 0])
    obj = gt.nn.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    assert_array_equal(obj(labels, z).numpy(), functional.sparse_softmax_cross_entropy_with_logits(labels, z).numpy())
