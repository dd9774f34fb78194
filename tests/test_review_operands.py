"""Adversarial review (issue 15) of the entry points, the reflected operators and the MLP-path changes.

A failed forward under a tape, entry points in threads while others open and close tapes, typed
numbers that share a table by equality, SGD's typed rate, the one-tape Observers fast path and
softmax's finite-max test. Expected values come from numpy, never from gputape itself.
"""

from __future__ import annotations

import gc
import sys
import threading
import warnings

import numpy as np
import pytest

import gputape as gt
from gputape.core import state as _state

BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "floor_divide", "mod", "arctan2"]
UNARY = ["tanh", "log", "sqrt", "negative", "square", "reciprocal", "abs"]
REFLECTED = ["__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rfloordiv__", "__rmod__", "__rpow__"]
NUMBERS = [2.0, 2, -0.0, 0, float("nan"), float("inf"), 1e300, 2**40, 10**30, -3, 0.1, True, 16777217, 16777217.0]


def _arrays() -> dict[str, np.ndarray]:
    ro = np.array([1.5, -2.0, 3.0], np.float32)
    ro.flags.writeable = False
    return {
        "f32": np.array([1.5, -2.0, 0.0], np.float32),
        "f16": np.array([1.5, -2.0, 0.0], np.float16),
        ">f4": np.array([1.5, -2.0, 0.0], ">f4"),
        ">f8": np.array([1.5, -2.0, 0.0], ">f8"),
        "read-only": ro,
        "strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
        "0-d": np.array(2.5, np.float32),
        "i32": np.array([1, -2, 3], np.int32),
        "bool": np.array([True, False, True]),
        "c64": np.array([1 + 2j, -1j, 0], np.complex64),
    }


def _outcome(fn, *args, mode="ignore"):
    """What fn(*args) gives: the result's type, dtype, shape and bits, or the error's class, message, cause."""
    with warnings.catch_warnings(), np.errstate(all="raise" if mode == "raise" else "warn"):
        warnings.simplefilter("error" if mode == "error" else "ignore")
        try:
            r = fn(*args)
        except Exception as e:  # (the error is the outcome compared)
            return ("error", type(e).__name__, str(e), type(e.__cause__).__name__)
    return ("ok", type(r).__name__, r.dtype.str, r.shape, r.numpy().tobytes())


def test_a_failed_forward_under_a_tape_leaves_it_recording_and_the_gradient_right():
    x = gt.constant(np.array([1.0, 0.0], np.float32))
    b = gt.constant(np.array([True, False]))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = x * 3.0
        for bad in (lambda: b - b, lambda: 1.0 / x, lambda: gt.log(x), lambda: gt.Tensor.__rsub__(b, True)):
            with warnings.catch_warnings(), np.errstate(all="raise"):
                warnings.simplefilter("error")
                with pytest.raises((TypeError, FloatingPointError, RuntimeWarning)):
                    bad()
        z = y * x
        assert _state.tls.obs.tapes == (tape,)
    np.testing.assert_array_equal(tape.gradient(z, x).numpy(), 6.0 * x.numpy())
    assert _state.tls.obs is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_numbers_that_share_a_table_by_equality_give_numpys_bits(dtype):
    # 16777217 == 16777217.0 and 3 == 3.0 share one dict entry of the literal table: whichever
    # is seen first, the other must still get numpy's conversion of itself
    a = np.array([1.5, -2.25, 0.0, 3.1, 1e-30, 7.0], dtype)
    x = gt.constant(a)
    values = [16777217.0, 16777217, 3, 3.0, 2.0**60, 2**60, 1e38, 3.5e38, 1e-46, -0.0, 0, 65504.0, 1e-310, 1 / 3]
    ops = {
        "x*n": (lambda t, n: t * n, lambda a, n: a * n),
        "n*x": (lambda t, n: n * t, lambda a, n: n * a),
        "x/n": (lambda t, n: t / n, lambda a, n: a / n),
        "n/x": (lambda t, n: n / t, lambda a, n: n / a),
        "n-x": (lambda t, n: n - t, lambda a, n: n - a),
        "x**n": (lambda t, n: t**n, lambda a, n: a**n),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in values + values[::-1]:
            for label, (f, ref) in ops.items():
                got, want = f(x, n).numpy(), np.asarray(ref(a, n))
                assert (got.dtype, got.tobytes()) == (want.dtype, want.tobytes()), (label, n)
            with gt.GradientTape(persistent=True) as tape:
                tape.watch(x)
                ys = (x * n, n * x, x / n)
            ones = np.ones_like(a)
            for y, want in zip(ys, (ones * n, n * ones, ones / n)):
                assert tape.gradient(y, x).numpy().tobytes() == np.asarray(want, dtype).tobytes(), n


def _blocks_after(fn, n):
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(n):
        fn()
    gc.collect()
    return sys.getallocatedblocks() - before


def test_entries_in_threads_while_other_threads_open_and_close_tapes():
    stop = threading.Event()
    errors: list = []

    def churn():
        while not stop.is_set():
            with gt.GradientTape():
                pass

    def work():
        a = np.array([1.0, 2.0, -0.5], np.float32)
        x = gt.constant(a)
        want = 4 * a - 0.25 + (1 - np.tanh(a) ** 2)
        for k in range(400):
            with gt.GradientTape() as tape:
                tape.watch(x)
                y = 2.0 * x * x - x / 4.0 + gt.tanh(x)
            g = tape.gradient(y, x)
            if g is None or not np.allclose(g.numpy(), want, rtol=1e-6):
                errors.append((k, g))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=churn) for _ in range(2)]
        workers = [threading.Thread(target=work) for _ in range(2)]
        for t in threads + workers:
            t.start()
        for w in workers:
            w.join()
        stop.set()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


@pytest.mark.parametrize("lr", [np.float32(0.1), np.float64(0.1), 0.1, 1e39, lambda step: 0.1 / (step + 1)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64])
def test_sgd_rate_of_any_kind_is_numpys_formula_bitwise(dtype, lr):
    w0 = np.array([0.5, -1.25, 3.0], dtype)
    g = np.array([0.3, 0.7, -0.1], dtype)
    v = gt.Variable(w0.copy())
    opt = gt.optim.SGD(learning_rate=lr)
    w = w0.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (1e39 overflows float32 and float16: numpy's inf, as numpy gives it)
        for step in range(3):
            opt.apply_gradients([(gt.constant(g), v)])
            rate = lr(step) if callable(lr) else lr
            w -= g * rate  # (in place: a numpy-scalar rate may promote the step, the variable keeps its dtype)
            assert v.numpy().tobytes() == w.tobytes(), (step, v.numpy(), w)


def test_one_tapes_observers_are_the_loops():
    with gt.GradientTape() as tape:
        one = _state.tls.obs
        with tape.stop_recording():
            paused = _state.tls.obs
            with gt.GradientTape() as inner:
                both = _state.tls.obs
    assert (one.tapes, one.paused, one.watchers, one.stack) == ((tape,), (), (), (tape,))
    assert (one.trace, one.numerics, one.placement, one.locations, one.debug, one.hooks) == (
        None,
        None,
        None,
        False,
        False,
        False,
    )
    assert (paused.tapes, paused.paused, paused.debug, paused.hooks) == ((), (tape,), True, True)
    assert (both.tapes, both.paused) == ((inner,), (tape,))


def test_variables_with_one_tape_stop_recording_nesting_and_no_auto_watch():
    v = gt.Variable(np.array([1.5, -2.0], np.float32))
    w = gt.Variable(np.array([0.5, 4.0], np.float32), trainable=False)
    with gt.GradientTape(watch_accessed_variables=False) as t0:
        y0 = v * 2.0 + w * v
    assert t0.gradient(y0, v) is None and t0.watched_variables() == ()
    with gt.GradientTape() as t1:
        with t1.stop_recording():
            c = v * 3.0  # a constant to t1
        y1 = c * v + w * v
    np.testing.assert_array_equal(t1.gradient(y1, v).numpy(), 3.0 * v.numpy() + w.numpy())
    assert t1.watched_variables() == (v,)
    with gt.GradientTape() as outer:
        with gt.GradientTape() as inner:
            y = v * v * v
        dy = inner.gradient(y, v)
    np.testing.assert_allclose(dy.numpy(), 3 * v.numpy() ** 2)
    np.testing.assert_allclose(outer.gradient(dy, v).numpy(), 6 * v.numpy())


def _softmax_ref(a, axis):
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(a - m)
    return e / np.sum(e, axis=axis, keepdims=True)


@pytest.mark.parametrize("with_inf", [False, True])
@pytest.mark.parametrize("shape", [(2, 3), (40, 10), (3, 70)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_softmax_finite_test_under_large_maxima_and_an_infinite_one(dtype, shape, with_inf):
    # the rows' maxima squared overflow float16 (300 ** 2 > 65504), float32 (1e30 ** 2) and float64
    # (1e200 ** 2): the vdot test then takes the where(), which must keep those finite maxima
    rng = np.random.default_rng(0)
    a = rng.normal(size=shape).astype(dtype)
    a[0, 0] = 300.0 if dtype == np.float16 else 1e30 if dtype == np.float32 else 1e200
    if with_inf:
        a[-1, -1] = np.inf
    for axis in (-1, 0):
        with np.errstate(all="ignore"):
            want = _softmax_ref(a, axis)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = gt.nn.softmax(gt.constant(a), axis=axis).numpy()
            lsm = gt.nn.log_softmax(gt.constant(a), axis=axis).numpy()
        np.testing.assert_array_equal(got, want.astype(dtype))
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(np.exp(lsm.astype(np.float64)), want, rtol=5e-3, atol=1e-6)


def test_variables_the_c_recorder_saved_survive_in_place_optimizer_steps_and_assigns():
    v = gt.Variable(np.array([1.0, 2.0], np.float32))
    v0 = v.numpy().copy()
    opt = gt.optim.SGD(0.5)
    with gt.GradientTape(persistent=True) as tape:
        _ = v * 1.0  # the first read watches v (the Python recorder); the ops below find it tracked
        ys = (v * v, gt.tanh(v) * v, v * 3.0 + v / 2.0)
    want = [2 * v0, (1 - np.tanh(v0) ** 2) * v0 + np.tanh(v0), np.full(2, 3.5, np.float32)]
    opt.apply_gradients([(gt.constant(np.ones(2, np.float32)), v)])
    v.assign_add(np.full(2, 5.0, np.float32))
    assert v.numpy().tolist() == [5.5, 6.5]
    for y, w in zip(ys, want):
        np.testing.assert_allclose(tape.gradient(y, v).numpy(), w, rtol=1e-6)


def test_reused_node_shapes_follow_broadcasting_and_dtype_changes():
    x, r, s = gt.constant(np.ones(3, np.float32)), gt.constant(np.ones(1, np.float32)), gt.constant(np.float32(2))
    c = gt.constant(np.ones(3, np.float64))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch([x, r, s, c])
        ys = [x * x, x * 2.0, x * r, r * x, x * s, s * s, c * c, x * x * 3.0, gt.tanh(s), gt.tanh(x)]
    got = [(n.shapes, n.meta) for n in tape._nodes]
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert got == [
        (((3,),), ((3,), f32)),
        (((3,), None), ((3,), f32)),
        (((3,), (1,)), ((3,), f32)),
        (((1,), (3,)), ((3,), f32)),
        (((3,), ()), ((3,), f32)),
        (((),), ((), f32)),
        (((3,),), ((3,), f64)),
        (((3,),), ((3,), f32)),
        (((3,), None), ((3,), f32)),
        (((),), ((), f32)),
        (((3,),), ((3,), f32)),
    ]
    assert len(ys) == 10
    gx, gr, gs = tape.gradient([ys[2], ys[3], ys[4]], [x, r, s])
    assert (gx.numpy().tolist(), gr.numpy().tolist(), float(gs)) == ([4.0] * 3, [6.0], 3.0)
