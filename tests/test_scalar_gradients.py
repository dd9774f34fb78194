"""A 0-d gradient is a Tensor around a 0-d array (numpy's 0-d results are scalars), on every path.

``np.asarray(t)`` of a Tensor holding a numpy scalar raised ``ValueError: object __array__ method
not producing an array`` (issue 24): on the sweep, the compiled backward and gt.function alike.
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt

report = gt.debug.backward_cache_report


@pytest.fixture(autouse=True)
def compiling(monkeypatch):
    monkeypatch.setattr(gt.config, "_compile_backward", True)
    gt.debug.clear_backward_cache()
    yield
    gt.debug.clear_backward_cache()


def usable(g, want, dtype):
    """Everything a user does with a 0-d gradient."""
    assert type(g._data) is np.ndarray and g.shape == () and g.dtype == dtype
    a = np.asarray(g)
    assert type(a) is np.ndarray and a.shape == () and a.dtype == dtype and a == want
    assert type(g.numpy()) is np.ndarray and g.numpy() == want
    assert g.item() == want
    if np.dtype(dtype).kind != "c":
        assert float(g) == want
    assert np.asarray(g) + 1 == want + 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_sweep_and_compiled_backward(dtype):
    x = gt.constant(np.array(3.0, dtype))
    for comp in (False, True, True, True):  # the sweep; then seen, compiled, hit
        with gt.GradientTape(compile=comp) as t:
            t.watch(x)
            y = x * x
        usable(t.gradient(y, x), 6.0, dtype)
    assert report()["compiles"] == 1 and report()["hits"] == 1


def test_variable_sources_and_several_of_them():
    v, w = gt.Variable(2.0), gt.Variable(np.array(0.5))
    for _ in range(3):
        with gt.GradientTape() as t:
            y = v * v * w
        gv, gw = t.gradient(y, [v, w])
        usable(gv, 2.0, np.float32)
        usable(gw, 4.0, np.float64)


def test_persistent_tape_and_unconnected_zero():
    x, z = gt.constant(3.0), gt.constant(1.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch([x, z])
        y = gt.exp(x * 0.0)
    for _ in range(3):
        gx, gz = t.gradient(y, [x, z], unconnected_gradients="zero")
        usable(gx, 0.0, np.float32)
        usable(gz, 0.0, np.float32)


def test_gt_function_trace_and_replay():
    @gt.function
    def grad(x):
        with gt.GradientTape() as t:
            t.watch(x)
            y = x * x
        return t.gradient(y, x)

    x = gt.constant(3.0)
    for _ in range(3):  # the trace, then replays
        usable(grad(x), 6.0, np.float32)


def test_jacobian_of_0d():
    x = gt.constant(3.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = y * gt.constant([1.0, 2.0])
    usable(t.jacobian(y, x), 6.0, np.float32)
    j = t.jacobian(z, x)
    assert j.shape == (2,) and np.asarray(j).tolist() == [6.0, 12.0]
