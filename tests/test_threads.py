"""Threads: each thread's tapes and gt.function traces are its own; a shared compiled function
serialises its replays. Results are compared bitwise with the same work done serially."""

from __future__ import annotations

import itertools
import sys
import threading

import numpy as np
import pytest

import gputape as gt


def _params(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a, b in itertools.pairwise((12, 16, 5)):
        w = rng.standard_normal((a, b)) / np.sqrt(a)
        out += [w.astype(np.float32), (0.1 * rng.standard_normal(b)).astype(np.float32)]
    return out


def _batches(seed: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1000 + seed)
    return [(rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 5, 8)) for _ in range(n)]


def _loss(ps, x, y):
    w1, b1, w2, b2 = ps
    h = gt.tanh(x @ w1 + b1)
    return gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h @ w2 + b2))


def _trainer(seed: int, compiled: bool, on_trace=None):
    """A model, its optimizer and a train step (``on_trace`` runs in the step's Python body:
    at trace time only when compiled)."""
    ps = [gt.Variable(a) for a in _params(seed)]
    opt = gt.optim.SGD(0.1, momentum=0.5)

    def step(x, y):
        if on_trace is not None:
            on_trace()
        with gt.GradientTape() as tape:
            loss = _loss(ps, x, y)
        opt.apply_gradients(zip(tape.gradient(loss, ps), ps))
        return loss

    return ps, opt, (gt.function(step) if compiled else step)


def _train(seed: int, steps: int, compiled: bool = True, start: threading.Barrier | None = None, on_trace=None):
    ps, opt, step = _trainer(seed, compiled, on_trace)
    data = _batches(seed, steps)
    if start is not None:
        start.wait()
    losses = [step(x, y).numpy() for x, y in data]
    return [p.numpy() for p in ps], losses, opt.iterations


def _in_threads(fn, n: int) -> list:
    results: list = [None] * n
    errors: list = []

    def run(i):
        try:
            results[i] = fn(i)
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def busy_switching():
    """Switch threads every 10 us, so that their ops interleave finely."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def _same(a, b) -> bool:
    wa, la, ia = a
    wb, lb, ib = b
    equal = all(np.array_equal(x, y) for x, y in itertools.chain(zip(wa, wb), zip(la, lb)))
    return ia == ib and equal


def test_four_threads_each_with_its_own_model_equal_the_serial_runs(busy_switching):
    steps = 100
    serial = [_train(s, steps) for s in range(4)]
    assert all(it == steps for _, _, it in serial)
    start = threading.Barrier(4)
    threaded = _in_threads(lambda s: _train(s, steps, start=start), 4)
    assert [_same(a, b) for a, b in zip(serial, threaded)] == [True] * 4


def test_two_functions_traced_at_the_same_time_both_train(busy_switching):
    steps = 8
    eager = [_train(s, steps, compiled=False) for s in range(2)]
    meet = threading.Barrier(2)
    bodies = [0, 0]  # how often each thread's Python step body ran

    def train(seed):
        def on_trace():
            bodies[seed] += 1
            if bodies[seed] == 1:
                meet.wait(timeout=10)  # both first calls are in their Python bodies at once

        ps, opt, step = _trainer(seed, True, on_trace)
        losses = [step(x, y).numpy() for x, y in _batches(seed, steps)]
        return [p.numpy() for p in ps], losses, opt.iterations, step.tracing_count

    threaded = _in_threads(train, 2)
    assert bodies == [1, 1]  # each first call was a trace (not an eager run beside the other's trace)
    for (ew, el, ei), (tw, tl, ti, traces) in zip(eager, threaded):
        assert traces == 1
        assert ti == ei == steps  # the optimizer stepped on every call, not once
        assert [float(v) for v in tl] == [float(v) for v in el]  # replays, not the trace-time loss
        assert all(np.array_equal(a, b) for a, b in zip(ew, tw))
    # and afterwards a brand-new function traces once and replays
    f = gt.function(lambda a: a * 2.0 + 1.0)
    outs = [float(f(gt.constant(float(k)))) for k in range(5)]
    assert outs == [1.0, 3.0, 5.0, 7.0, 9.0] and f.tracing_count == 1
    assert gt.core.state.tls.obs is None


def test_one_compiled_function_called_from_several_threads_serialises_its_replays(busy_switching):
    counter = gt.Variable(0.0)
    w = gt.constant(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4))

    @gt.function
    def f(x):
        counter.assign(counter + 1.0)  # read, add, write: three replay steps that must not interleave
        return gt.tanh(x @ w)

    xs = [np.random.default_rng(k).standard_normal((2, 3)).astype(np.float32) for k in range(4)]
    f(xs[0])  # traced here; the threads only replay
    want = [gt.tanh(gt.constant(x) @ w).numpy() for x in xs]
    calls = 200

    def caller(k):
        return [np.array_equal(f(xs[k]).numpy(), want[k]) for _ in range(calls)]

    results = _in_threads(caller, 4)
    assert all(all(r) for r in results)
    assert f.tracing_count == 1
    assert float(counter.numpy()) == 1.0 + 4 * calls  # no update lost to an interleaved replay


def test_a_tape_in_one_thread_does_not_record_another_threads_ops():
    x = gt.constant(3.0)
    inside = threading.Event()
    done = threading.Event()
    seen = []

    def other():
        inside.wait(timeout=10)
        with gt.GradientTape() as t:
            t.watch(x)
            y = x * x
        seen.append(float(t.gradient(y, x)))
        done.set()

    th = threading.Thread(target=other)
    th.start()
    with gt.GradientTape() as mine:
        mine.watch(x)
        inside.set()
        done.wait(timeout=10)
        z = x + 1.0
    th.join()
    assert seen == [6.0]
    assert len(mine._nodes) == 1  # only this thread's add
    assert float(mine.gradient(z, x)) == 1.0
