"""``tf.train.Checkpoint`` / ``CheckpointManager`` / ``latest_checkpoint`` on gputape's checkpoint files.

The main promise: a seeded program that saves, stops, and is restored in a new process trains on
to bitwise the losses and weights of the run that was never interrupted (optimizer slots, step
count, the global seed's streams: Dropout masks and shuffles included).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf

PROGRAM = textwrap.dedent(
    """
    import sys
    import numpy as np
    import gputape as gt
    import gputape.tf as tf

    mode, folder = sys.argv[1], sys.argv[2]
    tf.random.set_seed(7 if mode != "resume" else 999)  # a resumed run must get its state from the file
    x = np.random.default_rng(0).normal(size=(96, 5)).astype("float32")
    y = (np.arange(96) % 3).astype("int64")
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dropout(0.3), tf.keras.layers.BatchNormalization(),
                                 tf.keras.layers.Dense(3)])
    opt = tf.keras.optimizers.Adam(learning_rate=gt.optim.CosineDecay(0.05, decay_steps=40))
    step = tf.Variable(np.int64(0), trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt, step=step)
    manager = tf.train.CheckpointManager(ckpt, folder, max_to_keep=2)
    if mode == "resume":
        ckpt.restore(manager.latest_checkpoint).assert_consumed()
    epochs = {"full": range(4), "first": range(2), "resume": range(2, 4)}[mode]
    losses = []
    for epoch in epochs:
        for xb, yb in gt.data.DataLoader(x, y, batch_size=32, shuffle=True):  # no seed: the global one's stream
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            step.assign_add(1)
            losses.append(loss.numpy().tobytes().hex())
        if mode == "first" and epoch == 1:
            manager.save()
    print(" ".join(losses))
    print(b"".join(w.numpy().tobytes() for w in model.weights).hex())
    print(int(opt.iterations), int(step.numpy()))
    """
)


def _run(mode, folder):
    r = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode, str(folder)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "GPUTAPE_DEVICE": "cpu"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    losses, weights, counts = r.stdout.split("\n")[:3]
    return losses.split(), weights, counts


def test_restore_and_continue_gives_bitwise_the_uninterrupted_losses(tmp_path):
    full_losses, full_weights, full_counts = _run("full", tmp_path / "full")
    first_losses, _, first_counts = _run("first", tmp_path / "run")
    resumed_losses, resumed_weights, resumed_counts = _run("resume", tmp_path / "run")
    assert len(full_losses) == 12 and first_counts == "6 6"
    assert first_losses == full_losses[:6]
    assert resumed_losses == full_losses[6:]  # the bytes of every float32 loss
    assert resumed_weights == full_weights and resumed_counts == full_counts == "12 12"


def test_restore_without_the_random_state_would_differ(tmp_path):
    """The check above can fail: losing the global seed's state changes the Dropout masks and shuffles."""
    gt.random.seed(3)
    before = gt.random.get_state()
    a = [gt.random.uniform((3,)).numpy().tobytes() for _ in range(2)]
    gt.random.seed(3)
    gt.random.set_state(before)
    assert [gt.random.uniform((3,)).numpy().tobytes() for _ in range(2)] == a
    gt.random.seed(3)
    _ = gt.random.uniform((3,))  # one op further along: everything after it differs
    assert gt.random.uniform((3,)).numpy().tobytes() != a[0]


def test_random_state_keeps_op_seeded_streams():
    gt.random.seed(11)
    first = tf.random.normal((2,), seed=5).numpy()
    state = gt.random.get_state()
    nxt = tf.random.normal((2,), seed=5).numpy()
    gt.random.seed(11)
    gt.random.set_state(state)
    assert np.array_equal(tf.random.normal((2,), seed=5).numpy(), nxt) and not np.array_equal(first, nxt)
    with pytest.raises(ValueError, match="set_state"):
        gt.random.set_state({"seed": 1})


def test_manager_keeps_max_to_keep_and_records_the_state_file(tmp_path):
    v = tf.Variable(0.0)
    ckpt = tf.train.Checkpoint(v=v)
    manager = tf.train.CheckpointManager(ckpt, tmp_path, max_to_keep=2)
    assert manager.latest_checkpoint is None and tf.train.latest_checkpoint(tmp_path) is None
    for i in range(4):
        v.assign(float(i))
        manager.save()
    names = [os.path.basename(p) for p in manager.checkpoints]
    assert names == ["ckpt-3", "ckpt-4"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-3", "ckpt-4"]  # the others deleted
    state = (tmp_path / "checkpoint").read_text()
    assert state.splitlines() == [
        'model_checkpoint_path: "ckpt-4"',
        'all_model_checkpoint_paths: "ckpt-3"',
        'all_model_checkpoint_paths: "ckpt-4"',
    ]
    assert tf.train.latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-4")
    # a new manager (a restarted program) picks up the list and goes on numbering from the restored counter
    v2 = tf.Variable(-1.0)
    ckpt2 = tf.train.Checkpoint(v=v2)
    again = tf.train.CheckpointManager(ckpt2, tmp_path, max_to_keep=2)
    assert again.checkpoints == manager.checkpoints
    again.restore_or_initialize()
    assert float(v2.numpy()) == 3.0 and int(ckpt2.save_counter.numpy()) == 4
    assert os.path.basename(again.save()) == "ckpt-5"
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-4", "ckpt-5"]
    assert os.path.basename(again.save(checkpoint_number=100)) == "ckpt-100"
    os.remove(tmp_path / "ckpt-100")
    assert tf.train.latest_checkpoint(tmp_path) is None  # the state file names a file that is gone
    keep_all = tf.train.CheckpointManager(tf.train.Checkpoint(v=v), tmp_path / "all", max_to_keep=None)
    for _ in range(3):
        keep_all.save()
    assert len(keep_all.checkpoints) == 3


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_manager_refuses_a_bad_max_to_keep(bad, tmp_path):
    with pytest.raises(ValueError, match="max_to_keep must be a positive integer or None"):
        tf.train.CheckpointManager(tf.train.Checkpoint(), tmp_path, max_to_keep=bad)


def test_checkpoint_save_write_read_restore(tmp_path):
    v, w = tf.Variable([1.0, 2.0]), tf.Variable(np.int64(5), trainable=False)
    ckpt = tf.train.Checkpoint(v=v, step=w)
    assert ckpt.v is v and ckpt.step is w
    path = ckpt.write(tmp_path / "exact")
    assert path == str(tmp_path / "exact") and os.listdir(tmp_path) == ["exact"]  # no state file
    assert int(ckpt.save_counter.numpy()) == 0
    saved = ckpt.save(tmp_path / "c")
    assert os.path.basename(saved) == "c-1" and tf.train.latest_checkpoint(tmp_path) == saved
    v.assign([9.0, 9.0])
    w.assign(np.int64(0))
    ckpt.save_counter.assign(np.int64(7))
    status = ckpt.restore(saved)
    assert status.assert_consumed() is status and status.expect_partial() is status
    assert v.numpy().tolist() == [1.0, 2.0] and int(w.numpy()) == 5 and int(ckpt.save_counter.numpy()) == 1
    assert tf.train.Checkpoint(v=v).restore(None).path is None  # a first run: nothing to restore


def test_checkpoint_mismatch_changes_nothing(tmp_path):
    a = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    path = tf.train.Checkpoint(model=a).write(tmp_path / "a")
    b = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    before = [x.numpy().copy() for x in b.weights]
    ckpt = tf.train.Checkpoint(model=b)
    with pytest.raises(ValueError, match=r"shape \(3, 2\), expected \(4, 2\)"):
        ckpt.restore(path)
    assert all(np.array_equal(x, y.numpy()) for x, y in zip(before, b.weights))
    assert int(ckpt.save_counter.numpy()) == 0
    with pytest.raises(FileNotFoundError):
        ckpt.restore(tmp_path / "missing")


def test_checkpoint_refuses_what_it_cannot_save():
    with pytest.raises(TypeError, match=r"epoch=int cannot be saved.*tf.Variable"):
        tf.train.Checkpoint(epoch=3)
    with pytest.raises(ValueError, match="'save_counter' is reserved"):
        tf.train.Checkpoint(save_counter=tf.Variable(1))
    with pytest.raises(AttributeError, match="holds"):
        _ = tf.train.Checkpoint(v=tf.Variable(1.0)).model
    with pytest.raises(TypeError, match=r"must be a tf\.train\.Checkpoint"):
        tf.train.CheckpointManager(object(), "/tmp", max_to_keep=1)
