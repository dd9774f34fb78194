"""Keras layers and losses against PyTorch (CPU, float64): outputs and gradients. Skips without torch."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt
import gputape.tf as tf

torch = pytest.importorskip("torch")
F = torch.nn.functional
rng = np.random.default_rng(11)


def _grad_of(t):
    return t.grad.detach().numpy()


def test_batchnorm_training_matches_torch_outputs_gradients_and_running_mean():
    x0 = rng.normal(1.0, 2.0, size=(10, 4))
    g = rng.normal(size=(10, 4))
    bn = tf.keras.layers.BatchNormalization(dtype="float64", momentum=0.9, gamma_initializer="random_normal")
    bn.build((None, 4))
    x = gt.Variable(x0)
    with gt.GradientTape() as tape:
        y = bn(x, training=True)
        loss = gt.sum(y * g)
    gx, gg, gb = tape.gradient(loss, [x, bn.gamma, bn.beta])

    xt = torch.tensor(x0, requires_grad=True)
    wt = torch.tensor(bn.gamma.numpy(), requires_grad=True)
    bt = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    # torch's momentum is the weight of the new batch: Keras' 1 - momentum
    yt = F.batch_norm(xt, rm, rv, wt, bt, training=True, momentum=0.1, eps=1e-3)
    (yt * torch.tensor(g)).sum().backward()
    assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-10)
    assert_allclose(gx.numpy(), _grad_of(xt), rtol=1e-8, atol=1e-12)
    assert_allclose(gg.numpy(), _grad_of(wt), rtol=1e-8)
    assert_allclose(gb.numpy(), _grad_of(bt), rtol=1e-10)
    assert_allclose(bn.moving_mean.numpy(), rm.numpy(), rtol=1e-10)
    # torch keeps the unbiased batch variance in running_var, Keras the biased one
    n = x0.shape[0]
    assert_allclose(bn.moving_variance.numpy(), 0.9 + 0.1 * x0.var(0), rtol=1e-10)
    assert_allclose(rv.numpy(), 0.9 + 0.1 * x0.var(0) * n / (n - 1), rtol=1e-10)


def test_layer_normalization_matches_torch():
    x0 = rng.normal(size=(3, 5, 6))
    g = rng.normal(size=(3, 5, 6))
    ln = tf.keras.layers.LayerNormalization(dtype="float64", gamma_initializer="random_normal")
    ln.build((None, 5, 6))
    x = gt.Variable(x0)
    with gt.GradientTape() as tape:
        loss = gt.sum(ln(x) * g)
    gx, gw = tape.gradient(loss, [x, ln.gamma])
    xt = torch.tensor(x0, requires_grad=True)
    wt = torch.tensor(ln.gamma.numpy(), requires_grad=True)
    yt = F.layer_norm(xt, (6,), wt, torch.zeros(6, dtype=torch.float64), eps=1e-3)
    (yt * torch.tensor(g)).sum().backward()
    assert_allclose(ln(x0).numpy(), yt.detach().numpy(), rtol=1e-10)
    assert_allclose(gx.numpy(), _grad_of(xt), rtol=1e-8, atol=1e-12)
    assert_allclose(gw.numpy(), _grad_of(wt), rtol=1e-8)


def test_embedding_gradient_matches_torch():
    emb = tf.keras.layers.Embedding(7, 4, dtype="float64")
    ids = rng.integers(0, 7, size=(5, 3))
    g = rng.normal(size=(5, 3, 4))
    emb.build(None)
    with gt.GradientTape() as tape:
        loss = gt.sum(emb(ids) * g)
    ge = tape.gradient(loss, emb.embeddings)
    wt = torch.tensor(emb.embeddings.numpy(), requires_grad=True)
    (F.embedding(torch.tensor(ids), wt) * torch.tensor(g)).sum().backward()
    assert_allclose(ge.numpy(), _grad_of(wt), rtol=1e-12)


def test_crossentropies_and_huber_match_torch_losses():
    z = rng.normal(size=(6, 4))
    labels = rng.integers(0, 4, 6)
    onehot = np.eye(4)[labels]
    zt = torch.tensor(z)
    cce = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2)
    # torch's label smoothing is Keras': (1 - eps) * onehot + eps / classes
    assert_allclose(float(cce(onehot, z)), F.cross_entropy(zt, torch.tensor(labels), label_smoothing=0.2).item())
    scce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    assert_allclose(float(scce(labels, z)), F.cross_entropy(zt, torch.tensor(labels), reduction="sum").item())
    yb = rng.integers(0, 2, size=(6, 4)).astype(float)
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    assert_allclose(float(bce(yb, z)), F.binary_cross_entropy_with_logits(zt, torch.tensor(yb)).item(), rtol=1e-12)
    target = rng.normal(size=(6, 4)) * 2
    huber = tf.keras.losses.Huber(delta=0.7)
    assert_allclose(float(huber(target, z)), F.huber_loss(zt, torch.tensor(target), delta=0.7).item(), rtol=1e-12)
    mae = tf.keras.losses.MeanAbsoluteError()
    assert_allclose(float(mae(target, z)), F.l1_loss(zt, torch.tensor(target)).item(), rtol=1e-12)
