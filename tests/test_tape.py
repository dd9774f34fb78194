"""GradientTape behaviour: the "Tape" section of the design contract (TensorFlow semantics)."""

import gc
import sys
import threading
import warnings
import weakref

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt


def c(v, dtype=np.float64):
    return gt.constant(np.asarray(v, dtype=dtype))


# --------------------------------------------------------------------------------------
# persistent / non-persistent, re-entering


def test_nonpersistent_gradient_once():
    x = c(3.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
    assert_allclose(t.gradient(y, x).numpy(), 6.0)
    with pytest.raises(RuntimeError):
        t.gradient(y, x)


def test_persistent_gradient_repeatedly():
    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = gt.exp(x)
    for _ in range(3):
        assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0, 6.0])
    assert_allclose(t.gradient(z, x).numpy(), np.exp([1.0, 2.0, 3.0]))
    assert_allclose(t.jacobian(y, x).numpy(), np.diag([2.0, 4.0, 6.0]))
    assert_allclose(t.gradient([y, z], x).numpy(), [2.0, 4.0, 6.0] + np.exp([1.0, 2.0, 3.0]))
    t.release()


@pytest.mark.parametrize("first", ["gradient", "jacobian", "batch_jacobian"])
@pytest.mark.parametrize("second", ["gradient", "jacobian", "batch_jacobian"])
def test_jacobian_counts_as_the_one_use(first, second):
    x = c([[1.0, 2.0]])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
    getattr(t, first)(y, x)
    with pytest.raises(RuntimeError):
        getattr(t, second)(y, x)


def test_reenter_after_exit_continues_recording():
    x = c(2.0)
    t = gt.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * x
    z = y * x  # outside the context: not recorded
    with t:
        w = y * x * x  # y is tracked by t, so this is recorded
    assert t.gradient(z, x) is None
    assert_allclose(t.gradient(w, x).numpy(), 4 * 2.0**3)  # d(x^4)
    assert_allclose(t.gradient(y, x).numpy(), 4.0)


def test_reenter_after_exit_keeps_watched_tensors():
    x = c(3.0)
    t = gt.GradientTape()
    with t:
        t.watch(x)
    with t:
        y = x * x
    assert_allclose(t.gradient(y, x).numpy(), 6.0)


def test_entering_active_tape_raises_and_keeps_recording():
    x = c(3.0)
    with gt.GradientTape() as t:
        t.watch(x)
        with pytest.raises(ValueError):
            with t:
                pass
        y = x * x  # still recording after the failed re-entry
    assert_allclose(t.gradient(y, x).numpy(), 6.0)


# --------------------------------------------------------------------------------------
# watching


def test_trainable_variable_watched_automatically():
    v = gt.Variable(np.array([1.0, -2.0]))
    with gt.GradientTape() as t:
        y = gt.sum(v * v * v)
    watched = t.watched_variables()
    assert len(watched) == 1 and watched[0] is v
    assert_allclose(t.gradient(y, v).numpy(), 3 * np.array([1.0, 4.0]))


def test_variable_read_with_value_is_watched():
    v = gt.Variable(2.0)
    with gt.GradientTape() as t:
        r = v.value()
        y = r * r
    assert len(t.watched_variables()) == 1 and t.watched_variables()[0] is v
    assert_allclose(t.gradient(y, v).numpy(), 4.0)


def test_variable_outside_context_not_watched():
    v = gt.Variable(2.0)
    y0 = v * v
    with gt.GradientTape() as t:
        y = y0 * 3.0
    assert t.watched_variables() == ()
    assert t.gradient(y, v) is None


def test_nontrainable_variable_not_watched():
    v = gt.Variable(2.0, trainable=False)
    w = gt.Variable(5.0)
    with gt.GradientTape() as t:
        y = v * w
    watched = t.watched_variables()
    assert len(watched) == 1 and watched[0] is w
    g = t.gradient(y, [v, w])
    assert g[0] is None
    assert_allclose(g[1].numpy(), 2.0)


def test_nontrainable_variable_explicit_watch():
    v = gt.Variable(2.0, trainable=False)
    with gt.GradientTape() as t:
        t.watch(v)
        y = v * v * v
    assert_allclose(t.gradient(y, v).numpy(), 12.0)


def test_watch_accessed_variables_false():
    a = gt.Variable(2.0)
    b = gt.Variable(3.0)
    with gt.GradientTape(watch_accessed_variables=False) as t:
        t.watch(a)
        y = a * a * b
    watched = t.watched_variables()
    assert isinstance(watched, tuple)
    assert len(watched) == 1 and watched[0] is a
    ga, gb = t.gradient(y, [a, b])
    assert_allclose(ga.numpy(), 2 * 2.0 * 3.0)
    assert gb is None


def test_watch_accessed_variables_false_nothing_watched():
    a = gt.Variable(2.0)
    with gt.GradientTape(watch_accessed_variables=False) as t:
        y = a * a
    assert t.watched_variables() == ()
    assert t.gradient(y, a) is None


def test_watched_variables_creation_order():
    # TensorFlow's order: creation, not first watch (issue 26).
    a = gt.Variable(1.0, name="a")
    b = gt.Variable(2.0, name="b")
    cc = gt.Variable(3.0, name="c")
    x = c(1.0)
    with gt.GradientTape() as t:
        t.watch(x)  # tensors are not variables
        t.watch(b)
        y = a * b  # a auto-watched after b
        t.watch(a)  # already watched
        y = y + cc * b
        t.watch(cc)
    watched = t.watched_variables()
    assert type(watched) is tuple
    assert [v.name for v in watched] == ["a", "b", "c"]
    assert all(w is v for w, v in zip(watched, (a, b, cc)))


def test_watched_variables_after_gradient():
    v = gt.Variable(2.0, name="v")
    with gt.GradientTape() as t:
        y = v * v
    t.gradient(y, v)
    assert [w.name for w in t.watched_variables()] == ["v"]


def test_watch_nested_structures():
    x, y, z, w = c(1.0), c(2.0), c(3.0), c(4.0)
    with gt.GradientTape() as t:
        t.watch({"a": [x, (y,)], "b": {"c": z}})
        t.watch([[w]])
        out = x * y * z * w
    g = t.gradient(out, [x, y, z, w])
    assert_allclose([gi.numpy() for gi in g], [24.0, 12.0, 8.0, 6.0])


def test_watch_intermediate_reconnects_graph():
    x = c(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
        t.watch(y)  # already tracked: watching again does not cut x off
        z = y * 3.0
    assert_allclose(t.gradient(z, x).numpy(), 12.0)


def test_unwatch_tensor():
    x = c(2.0)
    y = c(5.0)
    with gt.GradientTape() as t:
        t.watch([x, y])
        t.unwatch(x)
        z = x * y
    gx, gy = t.gradient(z, [x, y])
    assert gx is None
    assert_allclose(gy.numpy(), 2.0)


def test_unwatch_variable():
    a = gt.Variable(1.0, name="a")
    b = gt.Variable(2.0, name="b")
    with gt.GradientTape(watch_accessed_variables=False) as t:
        t.watch([a, b])
        t.unwatch(a)
        y = a * b
    assert [v.name for v in t.watched_variables()] == ["b"]
    ga, gb = t.gradient(y, [a, b])
    assert ga is None
    assert_allclose(gb.numpy(), 1.0)


# --------------------------------------------------------------------------------------
# stop_recording, reset


def test_stop_recording():
    x = c(3.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        with t.stop_recording():
            y = x * x
        z = x * x * x
    assert t.gradient(y, x) is None
    assert_allclose(t.gradient(z, x).numpy(), 27.0)


def test_stop_recording_outer_tape_still_records():
    x = c(3.0)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            with inner.stop_recording():
                y = x * x
        assert inner.gradient(y, x) is None
    assert_allclose(outer.gradient(y, x).numpy(), 6.0)


def test_reset():
    x = c(2.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = gt.exp(x)
        assert t.saved_bytes > 0
        t.reset()
        assert t.saved_bytes == 0
        z1 = x * x  # x is no longer watched after reset
        t.watch(x)
        z2 = x * x * x
    assert t.gradient(y, x) is None
    assert t.gradient(z1, x) is None
    assert_allclose(t.gradient(z2, x).numpy(), 12.0)


def test_reset_nonpersistent_keeps_recording():
    x = c(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
        t.reset()
        t.watch(x)
        z = x * x * x
    del y
    assert_allclose(t.gradient(z, x).numpy(), 12.0)


def test_reset_forgets_auto_watched_variables():
    v = gt.Variable(2.0, name="v")
    w = gt.Variable(3.0, name="w")
    with gt.GradientTape() as t:
        y = v * v
        t.reset()
        z = w * w
    assert [u.name for u in t.watched_variables()] == ["w"]
    assert_allclose(t.gradient(z, w).numpy(), 6.0)
    del y


# --------------------------------------------------------------------------------------
# nested tapes and higher order


def test_nested_tapes_record_only_what_they_watch():
    x = c(2.0)
    y = c(5.0)
    with gt.GradientTape(persistent=True) as outer:
        outer.watch(y)
        with gt.GradientTape(persistent=True) as inner:
            inner.watch(x)
            z = x * y
    assert inner.gradient(z, y) is None
    assert_allclose(inner.gradient(z, x).numpy(), 5.0)
    assert outer.gradient(z, x) is None
    assert_allclose(outer.gradient(z, y).numpy(), 2.0)


def test_second_derivative_nested():
    x = c(1.5)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = x**3
        dy = inner.gradient(y, x)
    d2 = outer.gradient(dy, x)
    assert_allclose(dy.numpy(), 3 * 1.5**2)
    assert_allclose(d2.numpy(), 6 * 1.5)


def test_third_derivative_nested():
    x = c([0.3, -1.2])
    with gt.GradientTape() as t3:
        t3.watch(x)
        with gt.GradientTape() as t2:
            t2.watch(x)
            with gt.GradientTape() as t1:
                t1.watch(x)
                y = gt.sin(x)
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x)
    xv = np.array([0.3, -1.2])
    assert_allclose(d1.numpy(), np.cos(xv))
    assert_allclose(d2.numpy(), -np.sin(xv))
    assert_allclose(d3.numpy(), -np.cos(xv))


def test_second_derivative_of_variable():
    v = gt.Variable(np.array([1.0, 2.0]))
    with gt.GradientTape() as outer:
        with gt.GradientTape() as inner:
            y = gt.sum(gt.exp(2.0 * v))
        g = inner.gradient(y, v)
    h = outer.gradient(g, v)
    assert_allclose(g.numpy(), 2 * np.exp([2.0, 4.0]))
    assert_allclose(h.numpy(), 4 * np.exp([2.0, 4.0]))


def test_persistent_tape_records_its_own_gradient():
    x = c(1.5)
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x**3
        dy = t.gradient(y, x)
    d2 = t.gradient(dy, x)
    assert_allclose(dy.numpy(), 3 * 1.5**2)
    assert_allclose(d2.numpy(), 6 * 1.5)
    # and again: a persistent tape keeps everything, including the gradient graph
    assert_allclose(t.gradient(dy, x).numpy(), 6 * 1.5)
    t.release()


def test_gradient_outside_any_tape_returns_plain_values():
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(x * x)
    g = t.gradient(y, x)
    assert isinstance(g, gt.Tensor)
    assert g.shape == (2,) and g.dtype == np.float64
    # the result is not tracked by anything: using it under a new tape is fine
    with gt.GradientTape() as t2:
        t2.watch(g)
        h = gt.sum(g * g)
    assert_allclose(t2.gradient(h, g).numpy(), [4.0, 8.0])


# --------------------------------------------------------------------------------------
# gradient(): targets, sources, output_gradients, unconnected


def test_nonscalar_target_is_summed():
    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x  # gradient of sum(y)
    assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0, 6.0])


def test_nested_targets_are_summed():
    x = c([1.0, 2.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y1 = x * x
        y2 = gt.sin(x)
        y3 = 3.0 * x
    xv = np.array([1.0, 2.0])
    assert_allclose(t.gradient([y1, y2], x).numpy(), 2 * xv + np.cos(xv))
    assert_allclose(t.gradient({"a": y1, "b": (y2, [y3])}, x).numpy(), 2 * xv + np.cos(xv) + 3.0)
    # the same target twice counts twice
    assert_allclose(t.gradient([y1, y1], x).numpy(), 4 * xv)


def test_nested_sources_structure_preserved():
    x, y, z = c(1.0), c(2.0), c(3.0)
    with gt.GradientTape() as t:
        t.watch([x, y, z])
        out = x * y + y * z * z
    g = t.gradient(out, {"x": x, "rest": [y, (z,)]})
    assert set(g) == {"x", "rest"}
    assert isinstance(g["rest"], list) and isinstance(g["rest"][1], tuple)
    assert_allclose(g["x"].numpy(), 2.0)
    assert_allclose(g["rest"][0].numpy(), 1.0 + 9.0)
    assert_allclose(g["rest"][1][0].numpy(), 2 * 2.0 * 3.0)


def test_tuple_and_single_sources():
    x, y = c(2.0), c(3.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch([x, y])
        out = x * y
    g = t.gradient(out, (x, y))
    assert isinstance(g, tuple) and len(g) == 2
    assert_allclose([g[0].numpy(), g[1].numpy()], [3.0, 2.0])
    single = t.gradient(out, x)
    assert isinstance(single, gt.Tensor)
    lst = t.gradient(out, [x])
    assert isinstance(lst, list) and len(lst) == 1


def test_repeated_sources():
    x = c(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x * x
    g = t.gradient(y, [x, x, {"again": x}])
    assert_allclose(g[0].numpy(), 12.0)
    assert_allclose(g[1].numpy(), 12.0)
    assert_allclose(g[2]["again"].numpy(), 12.0)


def test_intermediate_tensor_as_source():
    x = c([0.5, 1.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
        z = gt.sum(gt.exp(y) + 2.0 * y)
    gy, gx = t.gradient(z, [y, x])
    xv = np.array([0.5, 1.0])
    assert_allclose(gy.numpy(), np.exp(xv**2) + 2.0)
    assert_allclose(gx.numpy(), (np.exp(xv**2) + 2.0) * 2 * xv)


def test_target_equals_source():
    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * 2.0
    assert_allclose(t.gradient(x, x).numpy(), [1.0, 1.0, 1.0])
    assert_allclose(t.gradient(y, y).numpy(), [1.0, 1.0, 1.0])
    assert_allclose(t.gradient([x, y], x).numpy(), [3.0, 3.0, 3.0])


def test_variable_target_equals_source():
    v = gt.Variable(np.array([1.0, 2.0]))
    with gt.GradientTape() as t:
        y = v * 1.0
    del y
    assert_allclose(t.gradient(v, v).numpy(), [1.0, 1.0])


def test_output_gradients_weights():
    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = gt.exp(x)
    w = np.array([1.0, -2.0, 0.5])
    xv = np.array([1.0, 2.0, 3.0])
    assert_allclose(t.gradient(y, x, output_gradients=c(w)).numpy(), 2 * xv * w)
    assert_allclose(t.gradient(y, x, output_gradients=w).numpy(), 2 * xv * w)
    # one per target, None meaning ones
    assert_allclose(t.gradient([y, z], x, output_gradients=[c(w), None]).numpy(), 2 * xv * w + np.exp(xv))


def test_output_gradients_tensor_under_outer_tape_is_differentiable():
    x = c(2.0)
    w = c(3.0)
    with gt.GradientTape() as outer:
        outer.watch(w)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = x * x
        g = inner.gradient(y, x, output_gradients=w)  # 2 x w
    assert_allclose(g.numpy(), 12.0)
    assert_allclose(outer.gradient(g, w).numpy(), 4.0)


@pytest.mark.parametrize("mode", ["zero", gt.UnconnectedGradients.ZERO])
def test_unconnected_zero(mode):
    x = c([1.0, 2.0])
    u = gt.constant(np.ones((2, 3), np.float32))
    v = gt.Variable(np.ones(4, np.float32))
    with gt.GradientTape() as t:
        t.watch([x, u])
        y = gt.sum(x * x)
    gx, gu, gv = t.gradient(y, [x, u, v], unconnected_gradients=mode)
    assert_allclose(gx.numpy(), [2.0, 4.0])
    assert gu.shape == (2, 3) and gu.dtype == np.float32
    assert_allclose(gu.numpy(), np.zeros((2, 3)))
    assert gv.shape == (4,) and gv.dtype == np.float32
    assert_allclose(gv.numpy(), np.zeros(4))


@pytest.mark.parametrize("mode", ["none", gt.UnconnectedGradients.NONE])
def test_unconnected_none(mode):
    x = c(1.0)
    u = c(2.0)
    with gt.GradientTape() as t:
        t.watch([x, u])
        y = x * 3.0
    gx, gu = t.gradient(y, [x, u], unconnected_gradients=mode)
    assert_allclose(gx.numpy(), 3.0)
    assert gu is None


def test_unconnected_default_none_for_unwatched():
    x = c(1.0)
    with gt.GradientTape() as t:
        y = x * 3.0
    assert t.gradient(y, x) is None


def test_gradient_through_dead_branch_is_zero_not_none():
    # x is connected (through a multiply by 0), so the result is a tensor of zeros
    x = c(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * 0.0 + 1.0
    assert_allclose(t.gradient(y, x).numpy(), 0.0)


def test_gradient_inside_context_nonpersistent():
    x = c(3.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
        g = t.gradient(y, x)
        z = y * x  # the tape stopped recording at gradient()
    assert_allclose(g.numpy(), 6.0)
    with pytest.raises(RuntimeError):
        t.gradient(z, x)
    # nothing is left on this thread's stack: a new tape nested in nothing works
    with gt.GradientTape() as t2:
        t2.watch(x)
        w = x * 2.0
    assert_allclose(t2.gradient(w, x).numpy(), 2.0)


def test_gradient_inside_nonpersistent_context_not_recorded_on_it_but_on_outer():
    x = c(2.0)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = x**3
            g = inner.gradient(y, x)  # inside inner's context
    assert_allclose(g.numpy(), 12.0)
    assert_allclose(outer.gradient(g, x).numpy(), 12.0)


def test_accumulation_of_fanout():
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        a = gt.sin(x)
        y = gt.sum(a * a + a * x)
    xv = np.array([1.0, 2.0])
    expect = 2 * np.sin(xv) * np.cos(xv) + np.cos(xv) * xv + np.sin(xv)
    assert_allclose(t.gradient(y, x).numpy(), expect)


def test_broadcasting_gradients_summed_back():
    x = c([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = c([10.0, 20.0, 30.0])
    s = c(2.0)
    with gt.GradientTape() as t:
        t.watch([x, b, s])
        y = gt.sum((x + b) * s)
    gx, gb, gs = t.gradient(y, [x, b, s])
    assert gx.shape == (2, 3) and gb.shape == (3,) and gs.shape == ()
    assert_allclose(gx.numpy(), np.full((2, 3), 2.0))
    assert_allclose(gb.numpy(), [4.0, 4.0, 4.0])
    assert_allclose(gs.numpy(), 21.0 + 120.0)


def test_gradient_dtype_matches_source():
    x32 = gt.constant(np.array([1.0, 2.0], np.float32))
    x64 = gt.constant(np.array([1.0, 2.0], np.float64))
    with gt.GradientTape() as t:
        t.watch([x32, x64])
        y = gt.sum(x32 * x64)
    g32, g64 = t.gradient(y, [x32, x64])
    assert g32.dtype == np.float32
    assert g64.dtype == np.float64
    assert_allclose(g32.numpy(), [1.0, 2.0])


# --------------------------------------------------------------------------------------
# integer / bool sources and targets


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_integer_source_gradient_is_none_and_warns(fresh_warnings, dtype):
    x = c(2.0)
    k = gt.constant(np.array([1, 0, 1], dtype=dtype))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * 3.0
    with pytest.warns(gt.GputapeWarning):
        gx, gk = t.gradient(y, [x, k])
    assert_allclose(gx.numpy(), 3.0)
    assert gk is None


def test_integer_source_zero_mode(fresh_warnings):
    x = c(2.0)
    k = gt.constant(np.array([1, 2, 3], dtype=np.int32))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * 3.0
    with pytest.warns(gt.GputapeWarning):
        _gx, gk = t.gradient(y, [x, k], unconnected_gradients="zero")
    assert gk is not None and gk.shape == (3,)
    assert_allclose(gk.numpy(), np.zeros(3))


@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
def test_integer_target_gradient_is_none_and_warns(fresh_warnings, dtype):
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.constant(np.array([1, 0], dtype=dtype))
    with pytest.warns(gt.GputapeWarning):
        g = t.gradient(y, x)
    assert g is None


def test_integer_target_zero_mode(fresh_warnings):
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = (x * 2.0).astype(np.int32)
    with pytest.warns(gt.GputapeWarning):
        g = t.gradient(y, x, unconnected_gradients="zero")
    assert_allclose(g.numpy(), [0.0, 0.0])


def test_integer_variable_not_watched_gradient_none(fresh_warnings):
    k = gt.Variable(3)  # int32
    x = gt.Variable(2.0)
    with gt.GradientTape() as t:
        y = x * k.astype(np.float32)
    assert [v for v in t.watched_variables() if v is k] == []
    with pytest.warns(gt.GputapeWarning):
        gx, gk = t.gradient(y, [x, k])
    assert_allclose(gx.numpy(), 3.0)
    assert gk is None


def test_watch_integer_tensor_warns(fresh_warnings):
    k = gt.constant([1, 2])
    with gt.GradientTape() as t:
        with pytest.warns(gt.GputapeWarning):
            t.watch(k)
        y = k * 2
    del y


def test_integer_warning_emitted_once(fresh_warnings):
    x = c(2.0)
    k = gt.constant(np.array([1, 2], dtype=np.int16))
    for i in range(2):
        with gt.GradientTape() as t:
            t.watch(x)
            y = x * 3.0
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            assert t.gradient(y, [x, k])[1] is None
        n = sum(issubclass(w.category, gt.GputapeWarning) for w in rec)
        assert n == (1 if i == 0 else 0)


def test_mixed_int_float_op_gradient_reaches_float_input():
    x = c([1.0, 2.0])
    k = gt.constant(np.array([3, 4], np.int32))
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(x * k)
    g = t.gradient(y, x)
    assert_allclose(g.numpy(), [3.0, 4.0])


# --------------------------------------------------------------------------------------
# jacobian and batch_jacobian


def test_jacobian_elementwise():
    xv = np.array([1.0, 2.0, 3.0])
    x = c(xv)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x**2
    j = t.jacobian(y, x)
    assert j.shape == (3, 3)
    assert_allclose(j.numpy(), np.diag(2 * xv))


def test_jacobian_matrix_target_and_list_of_sources():
    A = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    xv = np.array([0.5, -1.0, 2.0])
    a = c(A)
    x = c(xv)
    s = c(2.0)
    with gt.GradientTape() as t:
        t.watch([a, x, s])
        y = (a * x) * s  # (2, 3): y[i, j] = A[i, j] x[j] s
    ja, jx, js = t.jacobian(y, [a, x, s])
    assert ja.shape == (2, 3, 2, 3)
    assert jx.shape == (2, 3, 3)
    assert js.shape == (2, 3)
    eja = np.zeros((2, 3, 2, 3))
    ejx = np.zeros((2, 3, 3))
    for i in range(2):
        for j in range(3):
            eja[i, j, i, j] = xv[j] * 2.0
            ejx[i, j, j] = A[i, j] * 2.0
    assert_allclose(ja.numpy(), eja)
    assert_allclose(jx.numpy(), ejx)
    assert_allclose(js.numpy(), A * xv)


def test_jacobian_scalar_target():
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(x * x)
    j = t.jacobian(y, x)
    assert j.shape == (2,)
    assert_allclose(j.numpy(), [2.0, 4.0])


def test_jacobian_unconnected():
    x = c([1.0, 2.0])
    u = c(np.ones((4, 5)))
    with gt.GradientTape(persistent=True) as t:
        t.watch([x, u])
        y = x * 3.0
    assert t.jacobian(y, u) is None
    assert t.jacobian(y, [x, u])[1] is None
    jx, ju = t.jacobian(y, [x, u], unconnected_gradients="zero")
    assert_allclose(jx.numpy(), 3 * np.eye(2))
    assert ju.shape == (2, 4, 5)
    assert_allclose(ju.numpy(), np.zeros((2, 4, 5)))
    ju2 = t.jacobian(y, u, unconnected_gradients=gt.UnconnectedGradients.ZERO)
    assert ju2.shape == (2, 4, 5)


def _mlp(x, W, b):
    return gt.sum(gt.tanh(x @ W + b), axis=1)


def test_jacobian_matches_stacked_gradients_mlp():
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(4, 3))
    Wv = rng.normal(size=(3, 5))
    bv = rng.normal(size=(5,))
    x, W, b = c(xv), c(Wv), c(bv)
    with gt.GradientTape(persistent=True) as t:
        t.watch([x, W, b])
        y = _mlp(x, W, b)  # shape (4,)
    jW, jb, jx = t.jacobian(y, [W, b, x])
    assert jW.shape == (4, 3, 5) and jb.shape == (4, 5) and jx.shape == (4, 4, 3)
    for i in range(4):
        onehot = np.zeros(4)
        onehot[i] = 1.0
        gW, gb, gx = t.gradient(y, [W, b, x], output_gradients=c(onehot))
        assert_allclose(jW.numpy()[i], gW.numpy(), rtol=1e-12)
        assert_allclose(jb.numpy()[i], gb.numpy(), rtol=1e-12)
        assert_allclose(jx.numpy()[i], gx.numpy(), rtol=1e-12)
    # and against the hand-derived Jacobian: dy_i/dW[j,k] = x[i,j] (1 - tanh(h[i,k])^2)
    d = 1 - np.tanh(xv @ Wv + bv) ** 2  # (4, 5)
    assert_allclose(jW.numpy(), xv[:, :, None] * d[:, None, :])
    assert_allclose(jb.numpy(), d)
    ejx = np.zeros((4, 4, 3))
    for i in range(4):
        ejx[i, i] = Wv @ d[i]
    assert_allclose(jx.numpy(), ejx)
    t.release()


def test_jacobian_of_variable():
    v = gt.Variable(np.array([1.0, 2.0]))
    with gt.GradientTape() as t:
        y = gt.stack([v[0] * v[1], v[0] + v[1], v[1] ** 2])
    j = t.jacobian(y, v)
    assert_allclose(j.numpy(), [[2.0, 1.0], [1.0, 1.0], [0.0, 4.0]])


def test_jacobian_second_order_under_outer_tape():
    x = c([1.0, 2.0])
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = x**3
        j = inner.jacobian(y, x)  # diag(3 x^2)
    h = outer.gradient(j, x)  # d/dx sum(diag(3x^2)) = 6x
    assert_allclose(j.numpy(), np.diag([3.0, 12.0]))
    assert_allclose(h.numpy(), [6.0, 12.0])


def test_batch_jacobian_shape_and_values():
    rng = np.random.default_rng(1)
    xv = rng.normal(size=(3, 2))
    Wv = rng.normal(size=(2, 4))
    x, W = c(xv), c(Wv)
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.tanh(x @ W)  # (3, 4)
    bj = t.batch_jacobian(y, x)
    assert bj.shape == (3, 4, 2)
    d = 1 - np.tanh(xv @ Wv) ** 2
    expect = d[:, :, None] * Wv.T[None, :, :]
    assert_allclose(bj.numpy(), expect)


def test_batch_jacobian_higher_rank():
    xv = np.arange(12.0).reshape(2, 3, 2) / 10
    x = c(xv)
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(x * x, axis=2)  # (2, 3)
    bj = t.batch_jacobian(y, x)
    assert bj.shape == (2, 3, 3, 2)
    expect = np.zeros((2, 3, 3, 2))
    for b in range(2):
        for i in range(3):
            expect[b, i, i, :] = 2 * xv[b, i, :]
    assert_allclose(bj.numpy(), expect)


def test_batch_jacobian_unconnected():
    x = c(np.ones((2, 3)))
    u = c(np.ones((2, 5)))
    with gt.GradientTape(persistent=True) as t:
        t.watch([x, u])
        y = x * 2.0
    assert t.batch_jacobian(y, u) is None
    z = t.batch_jacobian(y, u, unconnected_gradients="zero")
    assert z.shape == (2, 3, 5)
    assert_allclose(z.numpy(), np.zeros((2, 3, 5)))


# --------------------------------------------------------------------------------------
# stop_gradient and custom_gradient


def test_stop_gradient():
    x = c(3.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * gt.stop_gradient(x * x)
    assert_allclose(t.gradient(y, x).numpy(), 9.0)


def test_stop_gradient_variable():
    v = gt.Variable(3.0)
    with gt.GradientTape() as t:
        y = gt.stop_gradient(v) * 2.0
    assert t.gradient(y, v, unconnected_gradients="zero").numpy() == 0.0


def test_custom_gradient_values_used():
    @gt.custom_gradient
    def f(x):
        def grad(dy):
            return dy * 100.0

        return x * x, grad

    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(f(x) * c([1.0, 3.0]))
    assert_allclose(t.gradient(y, x).numpy(), [100.0, 300.0])
    assert_allclose(f(x).numpy(), [1.0, 4.0])


def test_custom_gradient_two_inputs():
    @gt.custom_gradient
    def f(a, b):
        def grad(dy):
            return dy * 2.0, dy * -1.0

        return a * b, grad

    a, b = c(2.0), c(5.0)
    with gt.GradientTape() as t:
        t.watch([a, b])
        y = f(a, b) * 3.0
    ga, gb = t.gradient(y, [a, b])
    assert_allclose(ga.numpy(), 6.0)
    assert_allclose(gb.numpy(), -3.0)


def test_custom_gradient_none_for_input():
    @gt.custom_gradient
    def f(a, b):
        def grad(dy):
            return dy, None

        return a + b, grad

    a, b = c(2.0), c(5.0)
    with gt.GradientTape() as t:
        t.watch([a, b])
        y = f(a, b)
    ga, gb = t.gradient(y, [a, b])
    assert_allclose(ga.numpy(), 1.0)
    assert gb is None


def test_custom_gradient_with_variables():
    v = gt.Variable(3.0, name="v")

    @gt.custom_gradient
    def f(x):
        y = x * v

        def grad(dy, variables=None):
            assert variables is not None and len(variables) == 1 and variables[0] is v
            return dy * 10.0, [dy * 20.0]

        return y, grad

    x = c(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x) * 2.0
    assert any(w is v for w in t.watched_variables())
    gx, gv = t.gradient(y, [x, v])
    assert_allclose(gx.numpy(), 20.0)
    assert_allclose(gv.numpy(), 40.0)


def test_custom_gradient_higher_order():
    @gt.custom_gradient
    def cube(x):
        def grad(dy):
            return dy * 3.0 * x * x

        return x * x * x, grad

    x = c(1.5)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = cube(x)
        g = inner.gradient(y, x)
    assert_allclose(g.numpy(), 3 * 1.5**2)
    assert_allclose(outer.gradient(g, x).numpy(), 6 * 1.5)


def test_custom_gradient_ops_inside_f_not_recorded():
    # only the custom node is recorded: the true derivative of sin is not used
    @gt.custom_gradient
    def f(x):
        def grad(dy):
            return dy * 0.5

        return gt.sin(x), grad

    x = c(0.7)
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x)
    assert_allclose(y.numpy(), np.sin(0.7))
    assert_allclose(t.gradient(y, x).numpy(), 0.5)


# --------------------------------------------------------------------------------------
# thread-locality


def test_tape_does_not_record_other_threads():
    x = c(3.0)
    out = {}

    def work():
        out["y"] = x * x

    with gt.GradientTape() as t:
        t.watch(x)
        th = threading.Thread(target=work)
        th.start()
        th.join()
        z = x * 2.0
    g = t.gradient([out["y"], z], x)
    assert_allclose(g.numpy(), 2.0)  # only z was recorded


def test_tape_in_other_thread_independent():
    x = c(3.0)
    ready = threading.Event()
    done = threading.Event()
    res = {}

    def work():
        with gt.GradientTape() as t:
            t.watch(x)
            ready.set()
            done.wait(5)
            y = x * x * x
        res["g"] = t.gradient(y, x).numpy()

    th = threading.Thread(target=work)
    th.start()
    assert ready.wait(5)
    # the other thread's tape is active now; ops here are not recorded on it
    with gt.GradientTape() as mine:
        mine.watch(x)
        z = x * x
    done.set()
    th.join()
    assert_allclose(mine.gradient(z, x).numpy(), 6.0)
    assert_allclose(res["g"], 27.0)


# --------------------------------------------------------------------------------------
# memory


def test_nonpersistent_frees_residuals_after_gradient():
    x = c(np.ones(1000))
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(gt.exp(x))
    assert t.saved_bytes >= 8000
    t.gradient(y, x)
    assert t.saved_bytes == 0


def test_persistent_keeps_residuals_until_release():
    x = c(np.ones(1000))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = gt.sum(gt.exp(x))
    before = t.saved_bytes
    assert before >= 8000
    g = t.gradient(y, x)
    assert_allclose(g.numpy(), np.exp(np.ones(1000)))
    assert t.saved_bytes == before
    t.release()
    assert t.saved_bytes == 0
    with pytest.raises(RuntimeError):
        t.gradient(y, x)


def _saved_exp(persistent):
    x = c(np.ones(100))
    with gt.GradientTape(persistent=persistent) as t:
        t.watch(x)
        e = gt.exp(x)  # exp saves its output for the VJP
        y = gt.sum(e)
    return t, x, y, e


def test_del_persistent_tape_frees_saved_tensors():
    t, _x, y, e = _saved_exp(persistent=True)
    arr = e._data
    ref = weakref.ref(e)
    del e
    gc.collect()
    held = sys.getrefcount(arr)
    assert t.saved_bytes >= arr.nbytes
    del t
    gc.collect()
    assert ref() is None
    assert sys.getrefcount(arr) < held  # the tape's reference to the saved output is gone
    del y


def test_nonpersistent_gradient_frees_saved_tensors():
    t, x, y, e = _saved_exp(persistent=False)
    arr = e._data
    ref = weakref.ref(e)
    del e
    gc.collect()
    held = sys.getrefcount(arr)
    t.gradient(y, x)
    gc.collect()
    assert ref() is None
    assert sys.getrefcount(arr) < held  # the tape object is alive, the residual is not


def test_release_frees_saved_tensors():
    t, _x, _y, e = _saved_exp(persistent=True)
    arr = e._data
    ref = weakref.ref(e)
    del e
    gc.collect()
    held = sys.getrefcount(arr)
    t.release()
    gc.collect()
    assert ref() is None
    assert sys.getrefcount(arr) < held


def test_saved_output_not_freed_while_persistent_tape_lives():
    t, x, y, e = _saved_exp(persistent=True)
    arr = e._data
    del e
    gc.collect()
    held = sys.getrefcount(arr)
    t.gradient(y, x)
    gc.collect()
    assert sys.getrefcount(arr) == held
    t.release()


def test_untracked_ops_save_nothing():
    x = c(np.ones(1000))
    with gt.GradientTape() as t:
        y = gt.exp(x)  # x is not watched
    assert t.saved_bytes == 0
    del y


# --------------------------------------------------------------------------------------
# more nesting, higher order and structure cases


@pytest.mark.parametrize("inner_first", [True, False])
def test_nested_tapes_share_recorded_nodes(inner_first):
    xv = np.array([1.0, 2.0])
    x = c(xv)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.sum(gt.exp(x) * x)
    expect = np.exp(xv) * (1 + xv)
    first, second = (inner, outer) if inner_first else (outer, inner)
    assert first.saved_bytes > 0 and second.saved_bytes > 0
    assert_allclose(first.gradient(y, x).numpy(), expect)
    assert first.saved_bytes == 0
    assert second.saved_bytes > 0  # the other tape still needs the shared residuals
    assert_allclose(second.gradient(y, x).numpy(), expect)
    assert second.saved_bytes == 0


def test_inner_gradient_under_outer_tape_frees_nothing_outer_needs():
    x = c(np.linspace(0.1, 1.0, 10))
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.sum(gt.exp(x))
        held = outer.saved_bytes
        g = inner.gradient(y, x)  # recorded on outer (higher order)
        assert outer.saved_bytes >= held
        assert inner.saved_bytes == 0
    h = outer.gradient([y, g], x)
    xv = np.linspace(0.1, 1.0, 10)
    assert_allclose(h.numpy(), 2 * np.exp(xv))


@pytest.mark.parametrize(
    ("fn", "d1", "d2"),
    [
        (gt.exp, np.exp, np.exp),
        (gt.tanh, lambda v: 1 - np.tanh(v) ** 2, lambda v: -2 * np.tanh(v) * (1 - np.tanh(v) ** 2)),
        (gt.sqrt, lambda v: 0.5 / np.sqrt(v), lambda v: -0.25 * v**-1.5),
        (gt.log, lambda v: 1 / v, lambda v: -1 / v**2),
        (lambda x: 1.0 / x, lambda v: -1 / v**2, lambda v: 2 / v**3),
        (gt.sin, np.cos, lambda v: -np.sin(v)),
    ],
    ids=["exp", "tanh", "sqrt", "log", "reciprocal", "sin"],
)
def test_second_derivative_elementwise(fn, d1, d2):
    xv = np.array([0.3, 1.7])
    x = c(xv)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = fn(x)
        g = inner.gradient(y, x)
    assert_allclose(g.numpy(), d1(xv), rtol=1e-12)
    assert_allclose(outer.gradient(g, x).numpy(), d2(xv), rtol=1e-12)


def test_second_derivative_mlp_hessian_vector_product():
    rng = np.random.default_rng(3)
    Wv = rng.normal(size=(3, 2))
    xv = rng.normal(size=(4, 3))
    vv = rng.normal(size=(3, 2))
    W = c(Wv)
    with gt.GradientTape() as outer:
        outer.watch(W)
        with gt.GradientTape() as inner:
            inner.watch(W)
            loss = gt.sum(gt.tanh(c(xv) @ W) ** 2)
        g = inner.gradient(loss, W)
        gv = gt.sum(g * c(vv))
    hvp = outer.gradient(gv, W).numpy()

    # finite-difference check of the Hessian-vector product through the analytic gradient
    def grad(Wm):
        t = np.tanh(xv @ Wm)
        return xv.T @ (2 * t * (1 - t**2))

    eps = 1e-6
    fd = (grad(Wv + eps * vv) - grad(Wv - eps * vv)) / (2 * eps)
    assert_allclose(g.numpy(), grad(Wv), rtol=1e-10)
    assert_allclose(hvp, fd, rtol=1e-6, atol=1e-8)


def test_jacobian_recorded_by_persistent_tape():
    x = c([1.0, 2.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x**3
        j = t.jacobian(y, x)
    assert_allclose(j.numpy(), np.diag([3.0, 12.0]))
    assert_allclose(t.gradient(j, x).numpy(), [6.0, 12.0])
    t.release()


def test_batch_jacobian_under_outer_tape():
    xv = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = c(xv)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = x**3
        bj = inner.batch_jacobian(y, x)
    expect = np.zeros((2, 2, 2))
    for b in range(2):
        expect[b] = np.diag(3 * xv[b] ** 2)
    assert_allclose(bj.numpy(), expect)
    assert_allclose(outer.gradient(bj, x).numpy(), 6 * xv)


def test_stop_recording_outer_while_inner_active():
    x = c(2.0)
    with gt.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with gt.GradientTape(persistent=True) as inner:
            inner.watch(x)
            with outer.stop_recording():
                y = x * x
            z = x * x * x
        w = x * 5.0  # outer records again after its stop_recording block
    assert outer.gradient(y, x) is None
    assert_allclose(outer.gradient(z, x).numpy(), 12.0)
    assert_allclose(outer.gradient(w, x).numpy(), 5.0)
    assert_allclose(inner.gradient(y, x).numpy(), 4.0)
    assert_allclose(inner.gradient(z, x).numpy(), 12.0)
    assert inner.gradient(w, x) is None


def test_variable_read_in_stop_recording_not_watched():
    v = gt.Variable(2.0)
    with gt.GradientTape() as t:
        with t.stop_recording():
            y = v * v
    assert t.watched_variables() == ()
    assert t.gradient(y, v) is None


def test_exception_inside_context_exits_tape():
    x = c(2.0)
    t = gt.GradientTape()
    with pytest.raises(KeyError):
        with t:
            t.watch(x)
            y = x * x
            raise KeyError("boom")
    z = y * x  # not recorded: the tape is no longer active
    with t:  # and it can be entered again
        w = y * 2.0
    assert_allclose(t.gradient([w, z], x).numpy(), 8.0)


def test_reenter_used_nonpersistent_tape_starts_fresh():
    x = c(2.0)
    t = gt.GradientTape()
    with t:
        t.watch(x)
        y = x * x
    assert_allclose(t.gradient(y, x).numpy(), 4.0)
    with t:
        t.watch(x)
        z = x * x * x
    assert_allclose(t.gradient(z, x).numpy(), 12.0)


def test_namedtuple_and_nonstring_dict_sources():
    import collections

    P = collections.namedtuple("P", "w b")
    w, b = c(2.0), c(3.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch([w, b])
        y = w * b * b
    g = t.gradient(y, P(w, b))
    assert type(g) is P
    assert_allclose([g.w.numpy(), g.b.numpy()], [9.0, 12.0])
    g2 = t.gradient(y, {1: w, 0: b})
    assert_allclose([g2[1].numpy(), g2[0].numpy()], [9.0, 12.0])
    t.release()


def test_nested_output_gradients():
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        a = x * x
        b = x * 3.0
    g = t.gradient({"a": a, "b": b}, x, output_gradients={"a": c([1.0, 0.0]), "b": c([0.0, 1.0])})
    assert_allclose(g.numpy(), [2.0, 3.0])


@pytest.mark.parametrize(
    ("og_dtype", "target_dtype"),
    [
        ("complex64", "float32"),  # issue 24: the imaginary part was dropped silently
        ("complex128", "float64"),
        ("float64", "float32"),  # TensorFlow refuses these too: its gradient ops do not mix dtypes
        ("float32", "float64"),
        ("int64", "float32"),
        ("float32", "complex64"),
    ],
)
@pytest.mark.parametrize("wrap", [np.asarray, gt.constant], ids=["ndarray", "Tensor"])
def test_output_gradients_of_another_dtype_are_refused(og_dtype, target_dtype, wrap):
    x = gt.constant(np.array([1.0, 2.0], target_dtype))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
    og = wrap(np.array([1.0, 3.0]).astype(og_dtype))
    with pytest.raises(
        TypeError,
        match=rf"output_gradients has dtype {og_dtype} and shape \(2,\), but its target has "
        rf"dtype {target_dtype} and shape \(2,\).*TensorFlow.*Pass",
    ):
        t.gradient(y, x, output_gradients=og)
    g = t.gradient(y, x, output_gradients=wrap(np.array([1.0, 3.0]).astype(target_dtype)))  # the tape is still usable
    assert g.dtype == target_dtype and g.numpy().tolist() == [2.0, 12.0]


def test_output_gradients_refusal_names_the_entry_and_numbers_take_the_target_dtype():
    x = gt.constant(np.array([1.0, 2.0], np.float32))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = gt.sum(x * x)
        z = gt.sum(x)
    with pytest.raises(
        TypeError, match=r"output_gradients\[1\] .*dtype float64 and shape \(\).*og.astype\('float32'\)"
    ):
        t.gradient([y, z], x, output_gradients=[None, np.float64(2.0)])
    with pytest.raises(TypeError, match="complex"):
        t.gradient(y, x, output_gradients=1j)  # a Python complex for a real target: the imaginary part would go
    g = t.gradient([y, z], x, output_gradients=[3, 2.0])  # Python numbers have no dtype: the target's
    assert g.dtype == np.float32 and g.numpy().tolist() == [8.0, 14.0]


def test_unconnected_intermediate_source_zero():
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x  # recorded but not on the path to z
        z = x * 3.0
    gx, gy = t.gradient(z, [x, y], unconnected_gradients="zero")
    assert_allclose(gx.numpy(), [3.0, 3.0])
    assert_allclose(gy.numpy(), [0.0, 0.0])


def test_float16_gradient_dtype():
    x = gt.constant(np.array([1.0, 2.0], np.float16))
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(x * x)
    g = t.gradient(y, x)
    assert g.dtype == np.float16
    assert_allclose(g.numpy(), [2.0, 4.0])


def test_numpy_operands_act_as_constants():
    xv = np.array([1.0, 2.0])
    x = c(xv)
    a = np.array([3.0, 4.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = a * x + np.exp(x) + x * a  # ndarray on either side, numpy ufunc on a tensor
    assert isinstance(y, gt.Tensor)
    assert_allclose(t.gradient(y, x).numpy(), 2 * a + np.exp(xv))


def test_integer_target_jacobian_is_none(fresh_warnings):
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = (x * 2.0).astype(np.int32)
    with pytest.warns(gt.GputapeWarning):
        assert t.jacobian(y, x) is None


# --------------------------------------------------------------------------------------
# more custom_gradient


def test_custom_gradient_jacobian():
    @gt.custom_gradient
    def f(x):
        def grad(dy):
            return dy * 2.0 * x

        return x * x, grad

    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x)
    assert_allclose(t.jacobian(y, x).numpy(), np.diag([2.0, 4.0, 6.0]))


def test_custom_gradient_multiple_outputs():
    @gt.custom_gradient
    def f(a, b):
        def grad(d1, d2):
            return d1 * b + d2, d1 * a + d2 * 10.0

        return (a * b, a + b), grad

    a, b = c(2.0), c(3.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch([a, b])
        p, s = f(a, b)
    assert_allclose([g.numpy() for g in t.gradient([p, s], [a, b])], [4.0, 12.0])
    # an output the target does not use gets a zero cotangent
    assert_allclose([g.numpy() for g in t.gradient(p, [a, b])], [3.0, 2.0])
    assert_allclose([g.numpy() for g in t.gradient(s, [a, b])], [1.0, 10.0])
    t.release()


def test_custom_gradient_non_tensor_argument():
    @gt.custom_gradient
    def f(x, k):
        def grad(dy):
            return dy * k, None

        return x * k, grad

    x = c(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x, 3.0)
    assert_allclose(t.gradient(y, x).numpy(), 3.0)


def test_custom_gradient_variable_read_with_value():
    v = gt.Variable(3.0)

    @gt.custom_gradient
    def f(x):
        def grad(dy, variables=None):
            return dy * 2.0, [dy * 5.0]

        return x * v.value(), grad

    x = c(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x)
    gx, gv = t.gradient(y, [x, v])
    assert_allclose(gx.numpy(), 2.0)
    assert_allclose(gv.numpy(), 5.0)


def test_custom_gradient_higher_order_persistent():
    @gt.custom_gradient
    def cube(x):
        def grad(dy):
            return dy * 3.0 * x * x

        return x * x * x, grad

    x = c(1.5)
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = cube(x)
        g = t.gradient(y, x)
    assert_allclose(g.numpy(), 6.75)
    assert_allclose(t.gradient(g, x).numpy(), 9.0)
    t.release()


def test_multi_output_op_partial_use():
    x = c([1.0, 2.0, 3.0, 4.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        a, _b = gt.split(x, 2)
        y = gt.sum(a * 2.0)
    assert_allclose(t.gradient(y, x).numpy(), [2.0, 2.0, 0.0, 0.0])
    assert_allclose(t.jacobian(a, x).numpy(), [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    t.release()


def test_gradient_does_not_mutate_inputs():
    xv = np.array([1.0, 2.0])
    x = c(xv)
    og_np = np.array([1.0, -1.0])
    og_t = c([2.0, 3.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x + x * 1.0 + x  # fan-out: three cotangents accumulate into x
        z = y + 0.0
    g1 = t.gradient(z, x, output_gradients=og_np)
    g2 = t.gradient(z, x, output_gradients=og_t)
    g3 = t.gradient([z, y], [x, x, y])
    assert_allclose(og_np, [1.0, -1.0])
    assert_allclose(og_t.numpy(), [2.0, 3.0])
    assert_allclose(x.numpy(), xv)
    assert_allclose(g1.numpy(), [3.0, -3.0])
    assert_allclose(g2.numpy(), [6.0, 9.0])
    assert_allclose([g.numpy() for g in g3], [[6.0, 6.0], [6.0, 6.0], [2.0, 2.0]])
    t.release()


def test_tape_state_clean_after_custom_gradient_error():
    v = gt.Variable(1.0)

    @gt.custom_gradient
    def f(x):
        def grad(dy):
            return dy

        return x * v, grad

    x = c(1.0)
    with gt.GradientTape() as t:
        t.watch(x)
        with pytest.raises(TypeError):
            f(x)
        y = x * 2.0  # the tape still records after the failed custom_gradient call
    assert_allclose(t.gradient(y, x).numpy(), 2.0)


def test_tape_state_clean_after_exception_in_custom_forward():
    @gt.custom_gradient
    def f(x):
        raise ZeroDivisionError

    x = c(1.0)
    with gt.GradientTape() as t:
        t.watch(x)
        with pytest.raises(ZeroDivisionError):
            f(x)
        y = x * 2.0
    assert_allclose(t.gradient(y, x).numpy(), 2.0)


def test_gradients_are_freed_without_the_garbage_collector():
    """No reference cycle may keep a step's gradients (or residuals) alive: with the
    cyclic GC off, deleting the results must free them at once."""
    import gc
    import weakref

    w = gt.Variable(np.ones((4, 3)))
    gc.disable()
    try:
        with gt.GradientTape() as tape:
            y = gt.sum(gt.exp(w) * w)
        grads = tape.gradient(y, {"w": [w]})
        ref = weakref.ref(grads["w"][0])
        del grads, tape, y
        assert ref() is None, "a reference cycle keeps the gradient alive"
    finally:
        gc.enable()


@pytest.mark.parametrize("name", ["persistent", "watch_accessed_variables", "compile"])
def test_tape_switches_refuse_strings_and_arrays_instead_of_reading_them_as_true(name):
    for bad in ("no", "False", np.array([True, False]), [0]):
        with pytest.raises(TypeError, match=f"GradientTape: {name} must be True or False"):
            gt.GradientTape(**{name: bad})
    for ok, want in ((True, True), (0, False), (np.bool_(True), True), (None, False)):
        tape = gt.GradientTape(**{name: ok})
        got = {"persistent": tape._persistent, "watch_accessed_variables": tape._auto, "compile": tape._compile}[name]
        assert got is want


def test_gradient_quiets_floating_point_errors_and_restores_the_callers_state():
    # sqrt's VJP at 0 divides by zero: an inf gradient, never a warning or an error, whatever
    # np.errstate the caller set (including one set after an earlier gradient), and afterwards the
    # caller's state is back whole (under= and call= untouched inside, as np.errstate leaves them)
    x = gt.constant([0.0, 4.0])
    calls = []

    def grad():
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.sqrt(x))
        return tape.gradient(y, x).numpy()

    before = np.geterr()
    for state in ({"all": "raise"}, {"all": "warn", "under": "raise"}, {"all": "call"}, {}):
        with np.errstate(**state, call=calls.append if state.get("all") == "call" else None):
            outer, outer_call = np.geterr(), np.geterrcall()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for _ in range(3):  # (the second sight runs the compiled backward)
                    np.testing.assert_array_equal(grad(), [np.inf, 0.25])
            assert np.geterr() == outer and np.geterrcall() is outer_call
    assert np.geterr() == before and calls == []


def test_a_tape_never_entered_answers_from_empty_defaults_and_entering_gives_it_its_own():
    x = gt.constant([1.0, 2.0])
    v = gt.Variable([3.0])
    a, b = gt.GradientTape(), gt.GradientTape()
    assert a.watched_variables() == () and a.saved_bytes == 0
    with pytest.raises(RuntimeError, match="nothing recorded"):
        a.gradient(x, x)
    b.watch(x)  # watch() before entering: b's own containers, a's untouched
    assert b._leaves == {x._id} and a._leaves == frozenset() and type(a)._leaves == frozenset()
    with a:
        y = v * 2.0
    assert a.watched_variables() == (v,) and b.watched_variables() == () and type(a)._watched_vars == {}
    assert a.gradient(y, v).numpy().tolist() == [2.0]
    with b:
        z = x * x
    assert b.gradient(z, x).numpy().tolist() == [2.0, 4.0]
    assert len(type(a)._nodes) == 0 and not type(a)._edges and not type(a)._broken and type(a)._exports == ()


def test_the_live_tape_registry_finds_live_tapes_and_stays_bounded():
    from gputape.core import tape as tp

    x = gt.constant([1.0, 2.0])
    kept = []
    for k in range(2000):  # a training loop's tapes, every tenth kept alive
        with gt.GradientTape(persistent=True) as t:
            t.watch(x)
            gt.exp(x)
        if k % 10 == 0:
            kept.append(t)
    live = list(tp._live_tapes)
    assert all(t in tp._live_tapes for t in kept) and all(any(t is u for u in live) for t in kept)
    assert len(tp._live_tapes._refs) <= 2 * len(live) + 64  # dead entries overwritten or swept
    n = len(tp._live_tapes)
    del live, t
    kept.clear()
    assert len(tp._live_tapes) <= n - 200


def test_a_gradient_that_raises_leaves_the_callers_error_state_whole():
    @gt.custom_gradient
    def f(a):
        def grad(g):
            assert np.geterr()["divide"] == "ignore" and np.geterr()["under"] == "raise"  # quiet inside
            raise ArithmeticError("from the grad_fn")

        return a * 2.0, grad

    x = gt.constant([1.0])
    with np.errstate(all="raise"):
        for _ in range(3):  # the sweep, the second sight's compile, the compiled backward
            with gt.GradientTape() as tape:
                tape.watch(x)
                y = gt.sum(f(x))
            with pytest.raises(ArithmeticError, match="grad_fn"):
                tape.gradient(y, x)
            assert np.geterr() == {"divide": "raise", "over": "raise", "under": "raise", "invalid": "raise"}


def test_the_live_tape_sweep_tolerates_an_entry_another_thread_dropped():
    # two threads entering tapes may sweep the live-tape table at once: the entry one found dead
    # can be gone when it deletes it (a KeyError out of `with GradientTape()` in a user's thread)
    from gputape.core.tape import _LiveTapes

    class Racy(dict):
        def get(self, k, default=None):
            r = dict.get(self, k, default)
            dict.pop(self, k, None)  # the other thread's sweep, between this one's test and its delete
            return r

    live = _LiveTapes()
    live._refs = Racy()
    keep, dead = gt.GradientTape(), gt.GradientTape()
    live.add(keep)
    live.add(dead)
    del dead
    live._bound = 0  # the next add sweeps
    live.add(keep)
    assert list(live) == [keep]
