"""What the checkpoint tests share: a small built MLP, its values, and a few training steps."""

import numpy as np
from numpy.testing import assert_array_equal

import gputape as gt


def make_model(seed=0):
    gt.random.seed(seed)
    model = gt.nn.Sequential([gt.nn.Dense(8, activation="relu"), gt.nn.Dense(3)])
    model.build((None, 4))
    return model


def snapshot(model):
    return [v.numpy() for v in model.variables]  # numpy() copies


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert_array_equal(x, y)


def train(model, opt, steps, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = rng.normal(size=(16, 4)).astype(np.float32)
        y = rng.integers(0, 3, 16)
        with gt.GradientTape() as tape:
            loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y, model(x)))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
