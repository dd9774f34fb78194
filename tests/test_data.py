"""gt.data.DataLoader: batching, seeded shuffling, drop_remainder, devices."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import gputape as gt


def collect(loader):
    return [tuple(t.numpy() for t in batch) if isinstance(batch, tuple) else batch.numpy() for batch in loader]


def test_batches_in_order_without_shuffle():
    x, y = np.arange(10).reshape(5, 2).astype(np.float32), np.arange(5)
    loader = gt.data.DataLoader(x, y, batch_size=2)
    batches = collect(loader)
    assert len(loader) == 3 == len(batches)
    assert_array_equal(batches[0][0], x[:2])
    assert_array_equal(batches[2][1], y[4:])
    assert batches[0][0].dtype == np.float32 and batches[0][1].dtype == y.dtype


def test_drop_remainder():
    loader = gt.data.DataLoader(np.arange(7), batch_size=3, drop_remainder=True)
    assert len(loader) == 2
    assert [b.tolist() for b in collect(loader)] == [[0, 1, 2], [3, 4, 5]]
    exact = gt.data.DataLoader(np.arange(6), batch_size=3, drop_remainder=False)
    assert len(exact) == 2


def test_shuffle_covers_every_example_once_per_epoch_and_pairs_stay_aligned():
    x = np.arange(50)
    loader = gt.data.DataLoader(x, x * 10, batch_size=8, shuffle=True, seed=3)
    for _ in range(2):
        xs, ys = zip(*collect(loader))
        order = np.concatenate(xs)
        assert sorted(order.tolist()) == list(range(50))
        assert_array_equal(np.concatenate(ys), order * 10)
        assert order.tolist() != list(range(50))


def test_shuffle_is_reproducible_with_a_seed_and_differs_between_epochs():
    def epochs(seed):
        loader = gt.data.DataLoader(np.arange(20), batch_size=20, shuffle=True, seed=seed)
        return [collect(loader)[0].tolist() for _ in range(3)]

    a, b = epochs(7), epochs(7)
    assert a == b
    assert a[0] != a[1]
    assert epochs(8) != a


def test_yields_tensors_on_the_current_device():
    loader = gt.data.DataLoader(np.ones((4, 2)), batch_size=2)
    batch = next(iter(loader))
    assert isinstance(batch, gt.Tensor) and batch.device == gt.current_device()
    assert gt.data.DataLoader(np.ones(2), device="cpu").device == "cpu"


def test_accepts_tensors_and_lists():
    loader = gt.data.DataLoader(gt.constant([[1.0], [2.0], [3.0]]), [0, 1, 2], batch_size=2)
    (x0, _), (_, y1) = collect(loader)
    assert x0.tolist() == [[1.0], [2.0]] and y1.tolist() == [2]


def test_batches_feed_a_training_step():
    x = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    y = np.arange(16) % 2
    model = gt.nn.Dense(2)
    for xb, yb in gt.data.DataLoader(x, y, batch_size=4, shuffle=True, seed=0):
        with gt.GradientTape() as tape:
            loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(yb, model(xb)))
        grads = tape.gradient(loss, model.trainable_variables)
        assert all(g is not None for g in grads)


def test_errors():
    with pytest.raises(ValueError, match="same first dimension"):
        gt.data.DataLoader(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="batch_size"):
        gt.data.DataLoader(np.ones(3), batch_size=0)
    with pytest.raises(ValueError, match="at least one"):
        gt.data.DataLoader()
    with pytest.raises(ValueError, match="same first dimension"):
        gt.data.DataLoader(np.float32(1.0))
