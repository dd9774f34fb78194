"""Buffer donation in gt.function's CPU replay: the optimizer may write its step into dead gradients.

The replay hands the gradients whose last use is the optimizer step over in a list, with its
own names for them deleted; ``Optimizer._apply_donated`` reuses one only when its reference
count shows that nothing else holds it. These tests check the bits (compiled steps equal
eager steps and the replay without donation), that donation really happens where it may,
and that it does not where the gradient is shared, returned, an argument, a variable or a
constant: each of those would be overwritten by ``lr * g`` if the check were missing.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gputape as gt
import gputape._optim_base as optim_base
from gputape.function._trace import _OptimizerStep

SIZES = (12, 16, 8, 3)


def _model(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = []
    for a, b in itertools.pairwise(SIZES):
        params.append(gt.Variable(rng.standard_normal((a, b)).astype(np.float32) * 0.3))
        params.append(gt.Variable(rng.standard_normal(b).astype(np.float32) * 0.1))
    return params


def _batches(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [
        (gt.constant(rng.standard_normal((5, SIZES[0])).astype(np.float32)), gt.constant(rng.integers(0, 3, 5)))
        for _ in range(n)
    ]


def _loss(params, x, y):
    h = x
    for k in range(0, len(params), 2):
        h = gt.matmul(h, params[k]) + params[k + 1]
        if k + 2 < len(params):
            h = gt.nn.relu(h)
    return gt.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h)


def _step_fn(params, opt, loss=_loss):
    def step(x, y):
        with gt.GradientTape() as tape:
            value = gt.mean(loss(params, x, y))
        grads = tape.gradient(value, params)
        opt.apply_gradients(zip(grads, params))
        return value

    return step


@pytest.fixture
def spy(monkeypatch):
    """Records, per optimizer step, which gradients were donated (``None``: none offered)."""
    seen: list = []
    step_plain, apply_host = optim_base.Optimizer._step_plain, optim_base.Optimizer._apply_host

    def plain(self, raw, variables, owned):
        seen.append(None if owned is None else list(owned))
        return step_plain(self, raw, variables, owned)

    def host(self, raw, lr, step, owned):
        seen.append(None if owned is None else list(owned))
        return apply_host(self, raw, lr, step, owned)

    # the two ends of a host step: plain SGD's loops, and the general one
    monkeypatch.setattr(optim_base.Optimizer, "_step_plain", plain)
    monkeypatch.setattr(optim_base.Optimizer, "_apply_host", host)
    return seen


MAKERS = {
    "sgd": lambda: gt.optim.SGD(0.1),
    "sgd-momentum": lambda: gt.optim.SGD(0.1, momentum=0.9),
    "sgd-nesterov": lambda: gt.optim.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: gt.optim.Adam(0.01),
    "adamw-amsgrad": lambda: gt.optim.AdamW(0.01, amsgrad=True),
    "sgd-schedule": lambda: gt.optim.SGD(gt.optim.StepDecay(0.1, 2, 0.5)),
}


def _run(make, mode: str, steps: int = 6):
    params = _model()
    opt = make()
    step = _step_fn(params, opt)
    if mode != "eager":
        step = gt.function(step)
    losses = [step(x, y).numpy() for x, y in _batches(steps)]
    return [p.numpy() for p in params], losses, opt


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_compiled_steps_with_donation_are_bitwise_eager_steps_and_the_undonated_replay(name, spy, monkeypatch):
    make = MAKERS[name]
    eager, eager_losses, eager_opt = _run(make, "eager")
    spy.clear()
    donated, losses, opt = _run(make, "compiled")
    # the first call is the trace (an eager step); every replay offered the weights' gradients
    assert spy[0] is None and len(spy) == 6
    assert all(owned == [True, False, True, False, True, False] for owned in spy[1:]), spy
    monkeypatch.setattr(_OptimizerStep, "donates", False)  # the replay as before donation
    spy.clear()
    plain, plain_losses, _ = _run(make, "compiled")
    assert all(owned is None for owned in spy)
    for a, b, c in zip(donated, eager, plain):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    assert [x.tobytes() for x in losses] == [x.tobytes() for x in eager_losses] == [x.tobytes() for x in plain_losses]
    assert int(opt.iterations) == int(eager_opt.iterations) == 6
    for (_, s), (_, t) in zip(opt.get_state()["slots"], eager_opt.get_state()["slots"]):
        assert all(s[n].tobytes() == t[n].tobytes() for n in s)


def test_the_replay_source_hands_the_gradients_over():
    params = _model()
    f = gt.function(_step_fn(params, gt.optim.SGD(0.1)))
    x, y = _batches(1)[0]
    f(x, y)
    assert ".donate(_g)" in f.code and "_g = [" in f.code


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_a_single_variable_s_gradient_is_donated(name, spy):
    # (the last gradient handed over is as free as the others: nothing on the way holds it)
    w = gt.Variable(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3))
    opt = MAKERS[name]()
    twin = gt.Variable(w.numpy())
    twin_opt = MAKERS[name]()

    def step(w, opt):
        def run(x):
            with gt.GradientTape() as tape:
                loss = gt.sum(gt.matmul(x, w) ** 2)
            (g,) = tape.gradient(loss, [w])
            opt.apply_gradients([(g, w)])
            return loss

        return run

    f, eager = gt.function(step(w, opt)), step(twin, twin_opt)
    for k in range(4):
        x = gt.constant(np.full((2, 4), 0.5 + k, np.float32))
        f(x)
        eager(x)
    assert w.numpy().tobytes() == twin.numpy().tobytes()
    assert [s for s in spy[1:] if s is not None][-3:] == [[True]] * 3


def _sum_step(w1, w2, opt):
    # add's VJP passes its cotangent through: w1 and w2 get one and the same gradient array
    def step(x):
        with gt.GradientTape() as tape:
            loss = gt.sum((w1 + w2) * x)
        g1, g2 = tape.gradient(loss, [w1, w2])
        opt.apply_gradients([(g1, w1), (g2, w2)])
        return loss

    return step


def test_two_variables_sharing_one_gradient_array_are_both_updated_by_it(spy):
    w1, w2 = gt.Variable(np.ones((4, 3), np.float32)), gt.Variable(np.full((4, 3), 2.0, np.float32))
    f = gt.function(_sum_step(w1, w2, gt.optim.SGD(0.5)))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for _ in range(3):
        f(gt.constant(x))
    # d loss / d w = x for both: three steps of w -= 0.5 * x (written into the shared array
    # once, the second update would subtract 0.25 * x)
    s = np.float32(0.5) * x
    assert w1.numpy().tobytes() == (np.float32(1) - s - s - s).tobytes()
    assert w2.numpy().tobytes() == (np.float32(2) - s - s - s).tobytes()
    assert spy[1:] == [[False, False]] * 2


def test_a_gradient_the_function_returns_is_not_overwritten(spy):
    w = gt.Variable(np.ones(5, np.float32))
    opt = gt.optim.SGD(0.5)

    @gt.function
    def step(x):
        with gt.GradientTape() as tape:
            loss = gt.sum(w * x)
        (g,) = tape.gradient(loss, [w])
        opt.apply_gradients([(g, w)])
        return loss, g

    x = np.arange(5, dtype=np.float32) + 1.0
    expect = np.ones(5, np.float32)
    for _ in range(3):
        _, g = step(gt.constant(x))
        expect = expect - np.float32(0.5) * x
        assert g.numpy().tobytes() == x.tobytes()  # d loss / d w = x, not 0.5 * x
        assert w.numpy().tobytes() == expect.tobytes()
    assert spy[1:] == [[False]] * 2


def test_a_gradient_that_is_an_argument_a_variable_or_a_constant_is_left_intact(spy):
    # output_gradients through add (which passes it on): the gradient of w is that very array
    w = gt.Variable(np.zeros(4, np.float32))
    other = gt.Variable(np.full(4, 3.0, np.float32))
    const = gt.constant(np.full(4, 5.0, np.float32))
    opt = gt.optim.SGD(0.5)

    @gt.function
    def step(x, which):
        with gt.GradientTape() as tape:
            y = w + 0.0
        seed = {"arg": x, "var": other, "const": const}[which]
        (g,) = tape.gradient(y, [w], output_gradients=seed)
        opt.apply_gradients([(g, w)])
        return y

    x = gt.constant(np.full(4, 7.0, np.float32))
    expect = np.zeros(4, np.float32)
    for which, value in (("arg", 7.0), ("var", 3.0), ("const", 5.0)):
        for _ in range(3):
            step(x, which)
            expect = expect - np.float32(0.5) * np.float32(value)
        assert w.numpy().tobytes() == expect.tobytes(), which
    assert x.numpy().tolist() == [7.0] * 4
    assert other.numpy().tolist() == [3.0] * 4
    assert const.numpy().tolist() == [5.0] * 4
    assert all(owned in (None, [False]) for owned in spy)


def test_an_interrupt_in_a_donating_step_leaves_the_step_undone(monkeypatch):
    params = _model()
    opt = gt.optim.SGD(0.1)
    f = gt.function(_step_fn(params, opt))
    twin = _model()
    twin_step = _step_fn(twin, gt.optim.SGD(0.1))
    batches = _batches(4)
    for x, y in batches[:2]:
        f(x, y)
        twin_step(x, y)
    before = [p.numpy().copy() for p in params]
    real = optim_base._rules.plain_sgd
    calls = []

    def interrupted(grads, lr, into=None):
        real(grads, lr, into)  # the donated gradients are written ...
        calls.append(into)
        raise KeyboardInterrupt  # ... and then a Ctrl-C comes, before the commit

    monkeypatch.setattr(optim_base._rules, "plain_sgd", interrupted)
    with pytest.raises(KeyboardInterrupt):
        f(*batches[2])
    assert calls == [[True, False, True, False, True, False]]
    assert all(p.numpy().tobytes() == b.tobytes() for p, b in zip(params, before))
    assert int(opt.iterations) == 2
    monkeypatch.setattr(optim_base._rules, "plain_sgd", real)
    for x, y in batches[2:]:
        f(x, y)
        twin_step(x, y)
    assert all(p.numpy().tobytes() == q.numpy().tobytes() for p, q in zip(params, twin))


def test_device_arrays_take_the_ordinary_step():
    # donate() gives anything but host arrays to the undonated call (here numpy scalars)
    w = gt.Variable(np.float32(1.0))
    opt = gt.optim.SGD(0.5)
    f = gt.function(_step_fn_scalar(w, opt))
    for _ in range(3):
        f(gt.constant(np.float32(2.0)))
    assert float(w) == 1.0 - 3 * 0.5 * 2.0


def _step_fn_scalar(w, opt):
    def step(x):
        with gt.GradientTape() as tape:
            loss = w * x
        (g,) = tape.gradient(loss, [w])
        opt.apply_gradients([(g, w)])
        return loss

    return step


def test_the_optimizer_takes_only_what_nothing_else_holds(spy):
    # _apply_donated on its own: each array is one that the check must refuse, but one
    import weakref

    vs = [gt.Variable(np.zeros((2, 3), np.float32)) for _ in range(6)]
    base = np.ones((2, 6), np.float32)
    readonly = np.ones((2, 3), np.float32)
    readonly.flags.writeable = False
    held = np.ones((2, 3), np.float32)
    weak = np.ones((2, 3), np.float32)
    ref = weakref.ref(weak)
    grads = [
        np.ones((2, 3), np.float32),
        base[:, :3],
        readonly,
        held,
        weak,
        np.asfortranarray(np.ones((2, 3), np.float32)),
    ]
    del weak
    gt.optim.SGD(0.5)._apply_donated(grads, vs)
    assert spy == [[True, False, False, False, False, False]]
    assert grads == [None] * 6
    # what was not donated is as it was (the weakly held one was judged, then freed); every
    # variable got -0.5
    assert (
        base.tolist() == [[1.0] * 6] * 2 and held.tolist() == [[1.0] * 3] * 2 and readonly.tolist() == [[1.0] * 3] * 2
    )
    assert ref() is None
    assert all(v.numpy().tolist() == [[-0.5] * 3] * 2 for v in vs)
