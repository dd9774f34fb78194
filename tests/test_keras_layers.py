"""Keras 3's layers (BatchNormalization, LayerNormalization, Embedding, Reshape, Concatenate, Add,
Activation) against numpy closed forms in float64, their gradients, gt.function, and the GPU."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt
import gputape.tf as tf

rng = np.random.default_rng(7)


def _bn_ref(x, gamma, beta, eps, axis=-1):
    red = tuple(i for i in range(x.ndim) if i != axis % x.ndim)
    mean, var = x.mean(red, keepdims=True), x.var(red, keepdims=True)
    shape = [1] * x.ndim
    shape[axis] = -1
    return gamma.reshape(shape) * (x - mean) / np.sqrt(var + eps) + beta.reshape(shape), mean.ravel(), var.ravel()


def test_batchnorm_training_output_and_moving_statistics_follow_keras():
    x = rng.normal(2.0, 3.0, size=(16, 5))
    bn = tf.keras.layers.BatchNormalization(dtype="float64", gamma_initializer="random_normal")
    y = bn(x, training=True)
    gamma, beta = bn.gamma.numpy(), bn.beta.numpy()
    ref, mean, var = _bn_ref(x, gamma, beta, 1e-3)
    assert_allclose(y.numpy(), ref, rtol=1e-10)
    # moving = moving * 0.99 + batch * 0.01, from zeros and ones; the variance is the biased one
    assert_allclose(bn.moving_mean.numpy(), 0.01 * mean, rtol=1e-10)
    assert_allclose(bn.moving_variance.numpy(), 0.99 + 0.01 * var, rtol=1e-10)
    x2 = rng.normal(size=(16, 5))
    bn(x2, training=True)
    assert_allclose(bn.moving_mean.numpy(), 0.99 * 0.01 * mean + 0.01 * x2.mean(0), rtol=1e-10)


def test_batchnorm_inference_uses_moving_statistics_and_axis_1_on_images():
    x = rng.normal(size=(4, 3, 2, 2))  # channels first: axis=1
    bn = tf.keras.layers.BatchNormalization(axis=1, momentum=0.5, dtype="float64")
    bn(x, training=True)
    mm, mv = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    assert_allclose(mm, 0.5 * x.mean((0, 2, 3)), rtol=1e-10)
    assert_allclose(mv, 0.5 + 0.5 * x.var((0, 2, 3)), rtol=1e-10)
    y = bn(x)  # training=None: inference
    ref = (x - mm.reshape(1, 3, 1, 1)) / np.sqrt(mv.reshape(1, 3, 1, 1) + 1e-3)
    assert_allclose(y.numpy(), ref, rtol=1e-10)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), mm)  # inference changes nothing


def test_batchnorm_gradient_and_statistics_outside_the_gradient():
    bn = tf.keras.layers.BatchNormalization(dtype="float64")
    x0 = rng.normal(size=(6, 3))
    bn(x0, training=True)
    gt.testing.check_grads(lambda x: gt.sum(gt.sin(bn(x, training=True))), x0, order=1)
    x = gt.Variable(x0)
    with gt.GradientTape() as tape:
        loss = gt.sum(bn(x, training=True) * np.arange(18.0).reshape(6, 3))
    gx, gg, gb = tape.gradient(loss, [x, bn.gamma, bn.beta])
    # closed form of batch-norm's input gradient: (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var + eps) * gamma
    g = np.arange(18.0).reshape(6, 3)
    mean, var = x0.mean(0), x0.var(0)
    xhat = (x0 - mean) / np.sqrt(var + 1e-3)
    expected = (g - g.mean(0) - xhat * (g * xhat).mean(0)) / np.sqrt(var + 1e-3)
    assert_allclose(gx.numpy(), expected, rtol=1e-8)
    assert_allclose(gg.numpy(), (g * xhat).sum(0), rtol=1e-8)
    assert_allclose(gb.numpy(), g.sum(0), rtol=1e-10)


def test_batchnorm_in_a_compiled_step_equals_eager():
    def make():
        gt.random.seed(0)
        model = gt.nn.Sequential([gt.nn.Dense(4), gt.nn.BatchNormalization(), gt.nn.Dense(1)])
        model.build((None, 3))  # the same initial weights for both
        return model

    eager, compiled = make(), make()
    xs = [rng.normal(size=(8, 3)).astype("float32") for _ in range(3)]

    def step(model, x):
        return model(x, training=True)

    f = gt.function(lambda x: step(compiled, x))
    for x in xs:
        np.testing.assert_array_equal(step(eager, x).numpy(), f(x).numpy())
    for a, b in zip(eager.weights, compiled.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # the moving statistics replay too
    assert f.tracing_count == 1


def test_layer_normalization_matches_closed_form_and_its_gradient():
    x = rng.normal(size=(3, 4, 5))
    ln = tf.keras.layers.LayerNormalization(dtype="float64", gamma_initializer="random_normal")
    y = ln(x)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    assert_allclose(y.numpy(), ln.gamma.numpy() * (x - mean) / np.sqrt(var + 1e-3) + ln.beta.numpy(), rtol=1e-10)
    ln2 = tf.keras.layers.LayerNormalization(axis=[1, 2], epsilon=1e-5, dtype="float64")
    y2 = ln2(x)
    assert ln2.gamma.shape == (4, 5)
    m2, v2 = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    assert_allclose(y2.numpy(), (x - m2) / np.sqrt(v2 + 1e-5), rtol=1e-10)
    gt.testing.check_grads(lambda t: gt.sum(gt.sin(ln(t))), x, order=1)


def test_embedding_lookup_gradient_and_errors():
    emb = tf.keras.layers.Embedding(6, 3, dtype="float64")
    ids = np.array([[0, 5, 5], [2, 0, 1]])
    table = emb(np.zeros(1, int)) is not None and emb.embeddings.numpy()
    assert np.abs(table).max() <= 0.05  # Keras' 'uniform': [-0.05, 0.05]
    out = emb(ids)
    assert_allclose(out.numpy(), table[ids])
    w = np.arange(18.0).reshape(2, 3, 3)
    with gt.GradientTape() as tape:
        loss = gt.sum(emb(ids) * w)
    g = tape.gradient(loss, emb.embeddings)
    expected = np.zeros((6, 3))
    np.add.at(expected, ids, w)  # each row gets the sum of the rows that looked it up
    assert_allclose(g.numpy(), expected)
    with pytest.raises(ValueError, match=r"ids must be in \[0, 6\)"):
        emb(np.array([6]))
    with pytest.raises(TypeError, match="ids must be integers"):
        emb(np.array([0.5]))
    assert emb.count_params() == 18


def test_reshape_concatenate_add_activation():
    x = rng.normal(size=(2, 12))
    r = tf.keras.layers.Reshape((3, 4))(x)
    assert_allclose(r.numpy(), x.reshape(2, 3, 4))
    assert tf.keras.layers.Reshape((-1, 2))(x).shape == (2, 6, 2)
    with pytest.raises(ValueError, match="cannot reshape examples of shape"):
        tf.keras.layers.Reshape((5,))(x)
    with pytest.raises(ValueError, match="at most one -1"):
        tf.keras.layers.Reshape((-1, -1))
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(2, 1))
    assert_allclose(tf.keras.layers.Concatenate()([a, b]).numpy(), np.concatenate([a, b], -1))
    assert_allclose(tf.keras.layers.Concatenate(axis=0)([a, a]).numpy(), np.concatenate([a, a], 0))
    with pytest.raises(ValueError, match="equal shapes except along axis 0"):
        tf.keras.layers.Concatenate(axis=0)([a, b])
    with pytest.raises(ValueError, match="list of tensors"):
        tf.keras.layers.Concatenate()(a)
    assert_allclose(tf.keras.layers.Add()([a, a, b]).numpy(), 2 * a + b)
    with pytest.raises(ValueError, match="do not broadcast"):
        tf.keras.layers.Add()([a, rng.normal(size=(3, 2))])
    assert_allclose(tf.keras.layers.Activation("tanh")(a).numpy(), np.tanh(a))
    # merge layers are differentiable in each input
    va, vb = gt.Variable(a), gt.Variable(b)
    with gt.GradientTape() as tape:
        loss = gt.sum(tf.keras.layers.Concatenate()([va, vb]) * 2.0) + gt.sum(tf.keras.layers.Add()([va, vb]))
    ga, gb = tape.gradient(loss, [va, vb])
    assert_allclose(ga.numpy(), np.full((2, 3), 3.0))
    assert_allclose(gb.numpy(), np.full((2, 1), 2.0 + 3.0))


def test_new_initializer_names():
    gt.random.seed(0)
    for name, check in [
        ("random_normal", lambda w: abs(w.std() - 0.05) < 0.005),
        ("random_uniform", lambda w: w.min() >= -0.05 and w.max() <= 0.05),
        ("truncated_normal", lambda w: np.abs(w).max() <= 0.1 and abs(w.std() - 0.05 * 0.88) < 0.005),
        ("lecun_normal", lambda w: abs(w.std() - (1 / 50) ** 0.5) < 0.01),
        ("glorot_uniform", lambda w: np.abs(w).max() <= (6 / 90) ** 0.5),
        ("he_normal", lambda w: abs(w.std() - (2 / 50) ** 0.5) < 0.01),
        ("zeros", lambda w: not w.any()),
    ]:
        w = tf.keras.layers.Dense(40, kernel_initializer=name)(np.ones((1, 50), "float32")) is not None
        layer = tf.keras.layers.Dense(40, kernel_initializer=name, input_shape=(50,))
        w = layer.kernel.numpy()
        assert check(w), name


@pytest.mark.gpu
def test_new_layers_on_the_gpu_match_the_cpu():
    from gputape.devices import backend

    cp = backend.cupy_module()
    x = rng.normal(size=(8, 4)).astype("float32")
    ids = np.array([[1, 2], [3, 0]])
    for make, inp in [
        (lambda: gt.nn.BatchNormalization(), x),
        (lambda: gt.nn.LayerNormalization(), x),
        (lambda: gt.nn.Embedding(5, 3), ids),
        (lambda: gt.nn.Reshape((2, 2)), x),
    ]:
        gt.random.seed(1)
        cpu_layer = make()
        with gt.device("cpu"):
            ref = cpu_layer(gt.constant(inp, device="cpu"), training=True).numpy()
        gt.random.seed(1)
        gpu_layer = make()
        got = gpu_layer(gt.constant(cp.asarray(inp)), training=True)
        assert got.device.startswith("cuda")
        assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-6)
