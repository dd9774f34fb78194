"""``optimizer.iterations`` is a Variable, as in Keras: int64, non-trainable, read with ``int()``/``.numpy()``."""

import numpy as np
import pytest
from checkpoint_helpers import make_model, train

import gputape as gt
import gputape.tf as tf


def _step(opt, w):
    with gt.GradientTape() as tape:
        loss = gt.sum(w * w)
    return opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))


def test_iterations_is_an_int64_non_trainable_variable_that_counts_steps():
    w = gt.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.Adam(0.1)
    it = opt.iterations
    assert isinstance(it, tf.Variable) and isinstance(it, gt.Variable)
    assert it.dtype == np.int64 and it.shape == () and not it.trainable
    assert int(it) == 0 and it.numpy() == 0 and it.numpy().dtype == np.int64
    for k in range(1, 4):
        assert _step(opt, w) == k
    assert opt.iterations is it  # one Variable for the optimizer's life: a reference held earlier sees the count
    assert int(it) == 3 and it.numpy().tolist() == 3 and it == 3
    assert "iterations=3" in repr(opt)


def test_a_value_read_before_a_step_keeps_its_count():
    w = gt.Variable([1.0])
    opt = gt.optim.SGD(0.1)
    before = opt.iterations.value()
    _step(opt, w)
    assert int(before) == 0 and int(opt.iterations) == 1


@pytest.mark.parametrize("how", ["attribute", "assign"])
def test_setting_iterations_moves_the_schedule(how):
    sched = gt.optim.PiecewiseConstantDecay([9], [1.0, 0.5])  # 1.0 for steps 0..9, then 0.5
    opt = gt.optim.SGD(sched)
    if how == "attribute":
        opt.iterations = 10
    else:
        opt.iterations.assign(10)
    assert opt.learning_rate == 0.5
    w = gt.Variable([1.0])
    assert opt.apply_gradients([(gt.constant([1.0]), w)]) == 11
    assert w.numpy().tolist() == [0.5] and int(opt.iterations) == 11


def test_bad_iteration_counts_are_refused_and_change_nothing():
    opt = gt.optim.SGD(0.1)
    opt.iterations = 4
    for bad, err in [(-1, ValueError), (2**63, ValueError), (1.5, TypeError), ("3", TypeError)]:
        with pytest.raises(err, match="SGD: iterations must be an integer"):
            opt.iterations = bad
    assert int(opt.iterations) == 4
    opt.iterations = np.int64(6)
    opt.iterations = gt.constant(7)
    assert int(opt.iterations) == 7


def test_compiled_steps_advance_iterations_and_read_it_at_every_call():
    w = gt.Variable([1.0, -1.0])
    opt = gt.optim.SGD(gt.optim.StepDecay(0.1, step_size=1, gamma=0.5))

    @gt.function
    def step():
        with gt.GradientTape() as tape:
            loss = gt.sum(w * w)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return gt.cast(opt.iterations, "float32") * 1.0  # a tensor computed from the count, each call

    seen = [float(step()) for _ in range(4)]
    assert seen == [1.0, 2.0, 3.0, 4.0] and step.tracing_count == 1
    assert int(opt.iterations) == 4
    # the rate halves each step: w *= (1 - 2 * 0.1 * 0.5**k)
    expected = np.prod([1 - 0.2 * 0.5**k for k in range(4)])
    np.testing.assert_allclose(w.numpy(), [expected, -expected], rtol=1e-6)


def test_checkpoints_keep_the_iterations_key_and_old_files_load(tmp_path):
    model, opt = make_model(), gt.optim.Adam(0.01)
    train(model, opt, 3)
    path = tmp_path / "new.npz"
    gt.save(path, {"model": model, "optimizer": opt})
    with np.load(path) as f:
        assert f["opt:optimizer:iterations"].dtype == np.int64 and int(f["opt:optimizer:iterations"]) == 3
    # a file in the layout written before iterations was a Variable (numpy only, no gputape)
    old = tmp_path / "old.npz"
    with np.load(path) as f:
        entries = {k: f[k] for k in f.files}
    entries["opt:optimizer:iterations"] = np.array(7, np.int64)
    np.savez(old, **entries)
    twin, twin_opt = make_model(seed=1), gt.optim.Adam(0.01)
    gt.load(old, into={"model": twin, "optimizer": twin_opt})
    assert int(twin_opt.iterations) == 7 and twin_opt.get_state()["iterations"] == 7
