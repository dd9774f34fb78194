"""check_numerics' deferred path (device flags read once per phase), against the immediate host path.

The deferred path is written against the array module: ``check_numerics(deferred=True)`` runs
it on numpy, which is its reference here; the gpu-marked test runs it on CuPy, where it is the
default, and compares the messages with the host's.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import gputape as gt
from gputape.debug import numerics


def _program(kind, xp=np):
    """(op that should be named, phase, created?, run) for one way to make a NaN."""
    if kind == "log0":  # created in the forward, and more ops run after it
        x = gt.constant(xp.asarray([1.0, 0.0]))

        def run():
            with gt.GradientTape() as tape:
                tape.watch(x)
                h = gt.log(x)  # <log0>
                y = gt.sum(gt.sqrt(gt.constant(xp.asarray([-1.0]))) + h)  # a second NaN, later
            tape.gradient(y, x)

        return "log", "forward", True, run
    if kind == "inf_input":  # propagated: a constant that is already inf
        x = gt.constant(xp.asarray([np.inf, 1.0]))

        def run():
            with gt.GradientTape() as tape:
                tape.watch(x)
                y = gt.sum(gt.exp(x))  # <inf_input>
            tape.gradient(y, x)

        return "exp", "forward", False, run
    if kind == "sqrt_backward":  # finite forward, inf gradient at 0
        x = gt.constant(xp.asarray([4.0, 0.0]))

        def run():
            with gt.GradientTape() as tape:
                tape.watch(x)
                y = gt.sum(gt.sqrt(x))  # <sqrt_backward>
            tape.gradient(y, x)

        return "sqrt", "backward", True, run
    raise AssertionError(kind)


KINDS = ["log0", "inf_input", "sqrt_backward"]


def _facts(msg):
    """What both paths must agree on: the op, the phase, created/propagated, the user's line."""
    m = re.search(r"gt\.(\w+)", msg)
    line = re.search(r"(test_numerics_deferred\.py:\d+)", msg)
    return (
        m.group(1),
        "backward" if "backward pass" in msg else "forward",
        "created" if "created" in msg else "propagated",
        line.group(1) if line else None,
    )


def _message(run, **kw):
    with pytest.raises(FloatingPointError) as info, gt.debug.check_numerics(**kw):
        run()
    return str(info.value)


@pytest.mark.parametrize("kind", KINDS)
def test_deferred_names_the_same_op_phase_and_line_as_the_immediate_check(kind):
    op, phase, created, run = _program(kind)
    immediate = _message(run)
    deferred = _message(run, deferred=True)
    assert (
        _facts(deferred)
        == _facts(immediate)
        == (op, phase, "created" if created else "propagated", _facts(immediate)[3])
    )
    assert _facts(deferred)[3] is not None
    assert "deferred check" in deferred and "deferred check" not in immediate


def test_deferred_check_raises_at_the_end_of_the_forward_not_at_the_op():
    x = gt.constant(np.array([1.0, 0.0]))
    ran = []
    with gt.debug.check_numerics(deferred=True):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.log(x))
            ran.append("after the log")  # the op did not raise
        with pytest.raises(FloatingPointError, match="end of the forward"):
            tape.gradient(y, x)
    assert ran == ["after the log"]
    assert numerics._local.pending is None or not numerics._local.pending.notes  # read and forgotten


def test_forward_only_code_is_checked_when_the_block_ends():
    with pytest.raises(FloatingPointError, match=r"gt\.log created"), gt.debug.check_numerics(deferred=True):
        gt.log(gt.constant([0.0]))
    with gt.debug.check_numerics(deferred=True):  # the flags of the failed block are gone
        gt.exp(gt.constant([1.0]))


def test_finite_step_passes_and_gradients_are_unchanged():
    rng = np.random.default_rng(0)
    w = gt.Variable(rng.normal(size=(4, 3)), name="w")
    x = rng.normal(size=(5, 4))

    def step():
        with gt.GradientTape() as tape:
            loss = gt.mean(gt.nn.softplus(x @ w))
        return tape.gradient(loss, w).numpy()

    ref = step()
    with gt.debug.check_numerics(deferred=True):
        got = step()
    np.testing.assert_array_equal(got, ref)


def test_buffers_roll_over_and_the_first_hit_is_still_named(monkeypatch):
    monkeypatch.setattr(numerics._Pending, "CAP", 3)
    x = gt.constant(np.array([1.0, 2.0]))
    with pytest.raises(FloatingPointError) as info, gt.debug.check_numerics(deferred=True):
        h = x
        for _ in range(7):  # 7 ops, 3 slots per buffer: three buffers
            h = gt.tanh(h * 0.5)
        h = gt.log(h - h)  # <first-nan>: log(0) = -inf
        gt.sqrt(h)  # a NaN after it
    assert "gt.log created" in str(info.value) and "output 0, float64(2,)" in str(info.value)


def test_a_long_forward_without_gradient_is_read_now_and_then(monkeypatch):
    monkeypatch.setattr(numerics, "_MAX_PENDING", 5)
    x = gt.constant(np.array([1.0]))
    with gt.debug.check_numerics(deferred=True):
        for _ in range(12):
            x = x * 1.0
        assert len(numerics._local.pending.notes) < 6


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_gpu_deferred_check_agrees_with_the_host(kind):
    from gputape.devices import backend

    cp = backend.cupy_module()
    _, _, _, run_gpu = _program(kind, cp)
    _, _, _, run_host = _program(kind, np)
    on_gpu = _message(run_gpu)  # device arrays: deferred by default
    assert "deferred check" in on_gpu
    assert _facts(on_gpu) == _facts(_message(run_host))
