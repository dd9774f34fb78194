"""The optimizer's fixed cost: plain SGD's one-loop path, and defer_interrupts' one handler object.

Plain SGD (no momentum, weight decay or clipping) takes a step generated per variable count
(``optim_base._plain_steps``) instead of the general step's per-variable calls; these tests check
it gives the general path's bits and errors, and hands every case it does not take to the general
path.
"""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

import gputape as gt
import gputape.optim.base as optim_base
from gputape.core import state as _state
from gputape.core.state import defer_interrupts


def _params(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [gt.Variable(rng.standard_normal(s).astype(dtype)) for s in ((7, 5), (5,), ())]


def _grads(dtype=np.float32, seed=1):
    rng = np.random.default_rng(seed)
    return [gt.constant(rng.standard_normal(s).astype(dtype)) for s in ((7, 5), (5,), ())]


@pytest.fixture
def paths(monkeypatch):
    """Counts the steps each host path took: the generated plain step (with or without its parse) or the general one."""
    taken = {"plain": 0, "general": 0}
    steps, general = optim_base._plain_steps, optim_base.Optimizer._apply_host

    def counted(n):
        parse, raw = steps(n)

        def count_parse(self, pairs):
            done = parse(self, pairs)
            taken["plain"] += done is not None
            return done

        def count_raw(self, *a):
            taken["plain"] += 1
            return raw(self, *a)

        pair = optim_base._PLAIN_STEPS[n] = (count_parse, count_raw)
        return pair

    def count_general(self, *a):
        taken["general"] += 1
        return general(self, *a)

    monkeypatch.setattr(optim_base, "_PLAIN_STEPS", {})
    monkeypatch.setattr(optim_base, "_plain_steps", counted)
    monkeypatch.setattr(optim_base.Optimizer, "_apply_host", count_general)
    return taken


@pytest.mark.parametrize("grad_dtype", [np.float32, np.float64])
def test_plain_sgd_gives_numpy_s_bits_and_the_general_path_s(grad_dtype, paths, monkeypatch):
    fast, slow = _params(), _params()
    opt, ref = gt.optim.SGD(0.05), gt.optim.SGD(0.05)
    expect = [p.numpy().copy() for p in fast]
    for k in range(3):
        grads = _grads(grad_dtype, seed=k)
        assert opt.apply_gradients(zip(grads, fast)) == k + 1
        with monkeypatch.context() as m:
            m.setattr(type(ref), "_plain", lambda self: False)
            ref.apply_gradients(zip(grads, slow))
        # numpy's w -= lr * g, in the variable's dtype (a float64 gradient is cast first)
        expect = [e - np.float32(0.05) * g.numpy().astype(np.float32) for e, g in zip(expect, grads)]
    for a, b, e in zip(fast, slow, expect):
        assert a.numpy().tobytes() == b.numpy().tobytes() == np.asarray(e, np.float32).tobytes()
    # a float64 gradient for a float32 variable is cast by the general path
    assert paths["plain"] == (3 if grad_dtype is np.float32 else 0)
    assert paths["general"] == 3 + (0 if grad_dtype is np.float32 else 3)
    assert int(opt.iterations) == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: gt.optim.SGD(0.1, momentum=0.5),
        lambda: gt.optim.SGD(0.1, weight_decay=0.01),
        lambda: gt.optim.SGD(0.1, clipnorm=0.5),
        lambda: gt.optim.SGD(0.1, global_clipnorm=0.5),
    ],
    ids=["momentum", "weight-decay", "clipnorm", "global-clipnorm"],
)
def test_sgd_with_anything_more_takes_the_general_path(make, paths):
    make().apply_gradients(zip(_grads(), _params()))
    assert paths == {"plain": 0, "general": 1}


def test_a_subclass_with_its_own_rule_keeps_it(paths):
    class Halved(gt.optim.SGD):
        def _compute(self, g, lr, slots, out, step):
            return g * (lr / 2), False

    w = gt.Variable(np.ones(3, np.float32))
    Halved(0.5).apply_gradients([(gt.constant(np.ones(3, np.float32)), w)])
    assert w.numpy().tolist() == [0.75] * 3
    assert paths == {"plain": 0, "general": 1}


def test_bad_gradients_still_get_the_general_path_s_errors_and_change_nothing():
    params = _params()
    before = [p.numpy().copy() for p in params]
    opt = gt.optim.SGD(0.1)
    grads = _grads()
    bad = grads[:2] + [gt.constant(np.zeros(2, np.float32))]  # wrong shape for the 0-d variable
    with pytest.raises(ValueError, match=r"SGD.apply_gradients: gradient of shape \(2,\)"):
        opt.apply_gradients(zip(bad, params))
    with pytest.raises(TypeError, match=r"SGD\.apply_gradients"):
        opt.apply_gradients(zip(grads[:2] + [gt.constant(np.complex64(1j))], params))
    assert all(p.numpy().tobytes() == b.tobytes() for p, b in zip(params, before))
    assert int(opt.iterations) == 0


def test_a_schedule_s_bad_rate_raises_before_anything_changes():
    params = _params()
    before = [p.numpy().copy() for p in params]
    opt = gt.optim.SGD(lambda step: float("nan"))
    with pytest.raises(ValueError, match="learning rate"):
        opt.apply_gradients(zip(_grads(), params))
    assert all(p.numpy().tobytes() == b.tobytes() for p, b in zip(params, before))


def test_a_tape_holding_a_variable_s_value_keeps_it(paths):
    # copy-on-write through the plain path's commit: the value the tape recorded stays
    w = gt.Variable(np.full(3, 2.0, np.float32))
    with gt.GradientTape(persistent=True) as tape:
        y = gt.sum(w * w)
    gt.optim.SGD(0.5).apply_gradients([(gt.constant(np.ones(3, np.float32)), w)])
    assert w.numpy().tolist() == [1.5] * 3
    assert tape.gradient(y, w).numpy().tolist() == [4.0] * 3
    assert paths["plain"] == 1


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_defer_interrupts_one_handler_object_forgets_each_block_s_interrupt():
    # the one handler object is reset by each outermost block: an interrupt held by one block
    # is delivered at its end and not again by the next
    with pytest.raises(KeyboardInterrupt):
        with defer_interrupts():
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)
    assert _state._HELD.frame is None  # (the frame it saw is not kept alive)
    with defer_interrupts():
        time.sleep(0.01)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        with defer_interrupts():
            with defer_interrupts():
                signal.raise_signal(signal.SIGINT)
                time.sleep(0.01)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
