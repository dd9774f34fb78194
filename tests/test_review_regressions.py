"""Regressions found reviewing the recording/typed-number changes (issue 15): each test
failed before its fix, or is marked xfail(strict=True) where the fix belongs to another file."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gputape as gt


@pytest.mark.parametrize("bad", [3.0, np.ones(2, np.float32), None, "w"], ids=["float", "ndarray", "None", "str"])
@pytest.mark.parametrize("persistent", [False, True])
def test_a_bad_single_source_is_a_clear_error_and_leaves_the_tape_usable(bad, persistent):
    x = gt.Variable(np.array([1.0, 2.0], np.float32))
    with gt.GradientTape(persistent=persistent) as t:
        loss = gt.sum(x * x)
    with pytest.raises(ValueError, match=r"GradientTape\.gradient: sources must be gt\.Tensors"):
        t.gradient(loss, bad)
    # an argument error consumes nothing (TensorFlow's rule): the one gradient still comes
    np.testing.assert_array_equal(t.gradient(loss, x).numpy(), np.array([2.0, 4.0], np.float32))


# -- the recorders' unusual cases --


def test_twenty_nested_tapes_past_the_c_recorders_limit_each_get_every_node():
    import contextlib

    x = gt.Variable(np.array([1.0, 2.0], np.float32))
    with contextlib.ExitStack() as stack:
        tapes = [stack.enter_context(gt.GradientTape(persistent=True)) for _ in range(20)]  # (MAX_TAPES is 16)
        y = x * 2.0
        loss = gt.sum(gt.exp(y) + y * y)
    xd = x.numpy().astype(np.float64)
    want = 2 * np.exp(2 * xd) + 8 * xd  # d/dx of exp(2x) + 4x^2
    counts = {len(t._nodes) for t in tapes}
    assert len(counts) == 1, counts  # every tape recorded the same ops
    for t in tapes:
        np.testing.assert_allclose(t.gradient(loss, x).numpy(), want, rtol=1e-6)


def test_a_finalizer_recording_on_the_active_tape_mid_op_leaves_gradients_right():
    import gc

    x = gt.Variable(np.array([1.0, 2.0]))
    kept = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self  # freed only by a collection, which runs inside some later allocation

        def __del__(self) -> None:
            kept.append(x * 2.0 + x)  # records on the tape being recorded

    old = gc.get_threshold()
    gc.set_threshold(5, 1, 1)
    try:
        for persistent in (False, True):
            with gt.GradientTape(persistent=persistent) as t:
                y = x
                for _ in range(500):
                    Cycle()
                    y = y * 1.0 + 0.0
                loss = gt.sum(y * y)
            np.testing.assert_array_equal(t.gradient(loss, x).numpy(), 2 * x.numpy())
    finally:
        gc.set_threshold(*old)
        gc.collect()
    assert kept  # the finalizers did run inside recording


def test_threads_recording_and_taking_compiled_gradients_match_the_serial_sweep():
    import sys
    import threading

    def run(k: int) -> np.ndarray:
        rng = np.random.default_rng(k)
        dt = np.float32 if k % 2 else np.float64
        v = gt.Variable(rng.standard_normal(3 + k % 5).astype(dt))
        w = gt.constant(rng.standard_normal(3 + k % 5).astype(dt))
        with gt.GradientTape() as t:
            y = v * 1.5 + w
            if k % 3 == 0:
                y = gt.tanh(y) - 0.25 * v
            elif k % 3 == 1:
                y = gt.exp(y * 0.1) / (2.0 + v * v)
            else:
                y = gt.maximum(y, 0.0) * w - 3
            loss = gt.sum(y * y)
        return t.gradient(loss, v).numpy()

    cases = list(range(12))
    gt.config.set_backward_compilation(False)
    try:
        want = {k: run(k) for k in cases}
    finally:
        gt.config.set_backward_compilation(True)
    wrong: list = []

    def work(j: int) -> None:
        try:
            for it in range(60):
                k = cases[(j * 5 + it) % len(cases)]
                got = run(k)
                if got.tobytes() != want[k].tobytes():
                    wrong.append((k, got, want[k]))
                    return
        except Exception as exc:  # (reported below, with the others)
            wrong.append(repr(exc))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside recording and the compiled backward
    try:
        threads = [threading.Thread(target=work, args=(j,)) for j in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert wrong == []


@pytest.mark.parametrize("persistent", [False, True])
def test_explain_summary_and_dot_after_compiled_gradients_on_nested_tapes(persistent):
    x = gt.Variable(np.array([1.0, 2.0], np.float32))
    outs = []
    for _ in range(3):  # the second structure seen compiles, the third replays it
        with gt.GradientTape(persistent=persistent) as outer:
            with gt.GradientTape(persistent=persistent) as inner:
                loss = gt.sum(gt.tanh(x * 2.0) * x)
            g = inner.gradient(loss, x)
            outs.append((inner.explain(loss, x).reason, inner.summary(), inner.to_dot().count("->")))
            outer.gradient(loss, x)
            assert outer.explain(loss, x).reason == "connected"
        np.testing.assert_allclose(
            g.numpy(), np.tanh(2 * x.numpy()) + 2 * x.numpy() * (1 - np.tanh(2 * x.numpy()) ** 2), rtol=1e-6
        )
    assert {o[0] for o in outs} == {"connected"}
    assert len({o[2] for o in outs}) == 1  # the same graph each time, swept, compiled or replayed
    assert all("tanh" in o[1] and "multiply" in o[1] for o in outs)


@pytest.mark.parametrize("zero", [0.0, -0.0, 0], ids=["0.0", "-0.0", "int0"])
def test_the_gradient_of_a_division_by_a_python_zero_is_infinite(zero):
    """d(x / c)/dx = 1 / c in the tensor's dtype, signed, also for c = 0 (divide's VJP is g / y: it
    computed 1 / y in Python before, and a Python zero raised ZeroDivisionError), on the sweep, the
    compiled backward and gt.function's replay."""
    x = gt.Variable(np.array([0.5, 0.25], np.float32))

    def grad(x):
        with gt.GradientTape() as t:
            loss = gt.sum(x / zero)
        return t.gradient(loss, x)

    with np.errstate(divide="ignore"):
        want = np.ones(2, np.float32) / np.float32(zero)
        f = gt.function(grad)
        for g in [grad(x) for _ in range(3)] + [f(x) for _ in range(3)]:
            np.testing.assert_array_equal(g.numpy(), want)
            assert g.dtype == np.float32 and np.signbit(g.numpy()).tolist() == np.signbit(want).tolist()


def test_masked_arrays_with_masked_elements_are_refused_and_subclasses_become_plain_arrays():
    """A tensor has no mask: a masked array's hidden values would be used silently (np.asarray drops
    the mask), so gt.constant and an op refuse one with masked elements, naming the op and the argument.
    An ndarray subclass without a mask (or a np.matrix) is used as its plain array: a tensor never holds
    a subclass (whose operators could mean something else), and numpy's dtype promotion is kept."""
    m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    x = gt.constant(np.array([1.0, 2.0, 3.0], np.float32))
    with pytest.raises(TypeError, match=r"gt.constant: .*masked array with masked elements.*filled"):
        gt.constant(m)
    with pytest.raises(TypeError, match=r"gt.add: argument y .*masked array with masked elements"):
        x + m
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # (numpy's about np.matrix itself)
        matrix = np.matrix([1.0, 2.0, 3.0])
    for other in (np.ma.masked_array([1.0, 2.0, 3.0]), matrix):
        r = x * other
        want = np.multiply(np.array([1.0, 2.0, 3.0], np.float32), np.asarray(other))
        assert type(r._data) is np.ndarray and r.dtype == want.dtype
        np.testing.assert_array_equal(r.numpy(), want)
    assert type(gt.constant(np.ma.masked_array([1.0, 2.0]))._data) is np.ndarray


def test_the_generated_entry_points_pickle_by_name():
    """pickle finds a function by its module and name: the generated entry points (and their C twins)
    name the module that declares them, not gputape.core.dispatch, which has no such attribute."""
    import pickle

    from gputape.core.primitive import REGISTRY

    entries = [p.public for p in REGISTRY.values() if p.public is not None]
    assert len(entries) >= 50
    for f in entries:
        assert pickle.loads(pickle.dumps(f)) is f, f.__qualname__
    assert pickle.loads(pickle.dumps(gt.Tensor.__rmul__)) is gt.Tensor.__rmul__
