"""tape.explain(): one program per reason code; 'raise'; check_numerics with the reported line;
tape.summary() and tape.to_dot()."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import gputape as gt


def line_of(marker: str) -> int:
    """The line number in this file of the line containing ``marker`` (a comment tag)."""
    src = inspect.getsource(inspect.getmodule(line_of)).splitlines()
    hits = [i + 1 for i, text in enumerate(src) if f"# {marker}" in text]
    assert len(hits) == 1, marker
    return hits[0]


def here(marker: str) -> str:
    return f"{__file__}:{line_of(marker)}"


x0 = np.array([1.0, 2.0, 3.0])


def test_connected():
    w = gt.Variable(x0)
    with gt.GradientTape() as tape:
        y = gt.sum(w * w)
    e = tape.explain(y, w)
    assert e.reason == "connected"
    assert tape.gradient(y, w) is not None


def test_not_watched_constant():
    x = gt.constant(x0)
    with gt.GradientTape() as tape:
        y = gt.sum(x * 2.0)
    assert tape.gradient(y, x) is None
    e = tape.explain(y, x)  # after gradient() on a non-persistent tape
    assert e.reason == "not_watched"
    assert "tape.watch" in e.message


def test_not_watched_with_watch_accessed_variables_false():
    w = gt.Variable(x0)
    with gt.GradientTape(watch_accessed_variables=False) as tape:
        y = gt.sum(w * 2.0)
    e = tape.explain(y, w)
    assert e.reason == "not_watched"
    assert "watch_accessed_variables=False" in e.message


def test_not_trainable():
    w = gt.Variable(x0, trainable=False, name="frozen")
    with gt.GradientTape() as tape:
        y = gt.sum(w * 2.0)
    e = tape.explain(y, w)
    assert e.reason == "not_trainable"
    assert "frozen" in e.message


def test_unused():
    w = gt.Variable(x0)
    v = gt.Variable(x0)
    with gt.GradientTape() as tape:
        a = gt.sum(w * 2.0)
        b = gt.sum(v * 3.0)  # noqa: F841 - v is read, but y does not use it
    assert tape.explain(a, v).reason == "unused"


def test_not_recorded_before_entering():
    w = gt.Variable(x0)
    h = w * 2.0  # computed before the tape exists
    with gt.GradientTape() as tape:
        y = gt.sum(h * h)
    assert tape.gradient(y, w) is None
    e = tape.explain(y, w)
    assert e.reason == "not_recorded"
    assert "outside this tape" in e.message


def test_stop_gradient_with_location():
    x = gt.constant(x0)
    with gt.GradientTape() as tape:
        tape.watch(x)
        h = gt.stop_gradient(x * 2.0)  # <stop-here>
        y = gt.sum(h * 3.0)
    e = tape.explain(y, x)
    assert e.reason == "stop_gradient"
    assert e.where == here("<stop-here>")


def test_stop_recording_with_location():
    x = gt.constant(x0)
    with gt.GradientTape() as tape:
        tape.watch(x)
        with tape.stop_recording():
            h = gt.exp(x)  # <paused-here>
        y = gt.sum(h * 3.0)
    e = tape.explain(y, x)
    assert e.reason == "stop_recording"
    assert e.where == here("<paused-here>")


def test_integer_dtype_source_and_target():
    n = gt.constant([1, 2, 3])
    x = gt.constant(x0)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(x * 2.0)
    assert tape.explain(y, n).reason == "integer_dtype"
    with gt.GradientTape() as tape:
        tape.watch(x)
        k = gt.argmax(x)  # <argmax-here>
    e = tape.explain(k, x)
    assert e.reason == "non_differentiable_op"
    assert e.where == here("<argmax-here>")


@pytest.mark.parametrize("kind", ["comparison", "cast_to_int", "round"])
def test_non_differentiable_op(kind):
    x = gt.constant(x0)
    with gt.GradientTape() as tape:
        tape.watch(x)
        if kind == "comparison":
            m = x > 1.5  # <cmp-here>
            y = gt.sum(gt.cast(m, "float64"))
        elif kind == "cast_to_int":
            m = gt.cast(x, "int32")  # <cast-here>
            y = gt.sum(gt.cast(m, "float64"))
        else:
            y = gt.sum(gt.round(x))
    e = tape.explain(y, x)
    assert e.reason == "non_differentiable_op", e
    if kind == "comparison":
        assert e.where == here("<cmp-here>")
        assert "greater" in e.message
    elif kind == "cast_to_int":
        assert e.where == here("<cast-here>")
    else:
        assert "round" in e.message


@pytest.mark.parametrize("how", ["numpy", "asarray"])
def test_left_tape(how):
    x = gt.constant(x0)
    with gt.GradientTape() as tape:
        tape.watch(x)
        h = x * 2.0
        raw = h.numpy() if how == "numpy" else np.asarray(h)  # <export-here>
        y = gt.sum(gt.constant(raw) * 3.0)
    assert tape.gradient(y, x) is None
    e = tape.explain(y, x)
    assert e.reason == "left_tape"
    assert e.where == here("<export-here>")


@pytest.mark.parametrize("how", ["numpy", "asarray"])
def test_left_tape_as_raw_operand(how):
    x = gt.constant(x0)
    w = gt.Variable(np.ones((3, 2)))
    with gt.GradientTape() as tape:
        tape.watch(x)
        h = x * 2.0
        raw = h.numpy() if how == "numpy" else np.asarray(h)  # <raw-export-here>
        y = gt.sum(raw @ w)
    assert tape.gradient(y, [x, w])[0] is None
    e = tape.explain(y, x)
    assert e.reason == "left_tape"
    assert e.where == here("<raw-export-here>")


def test_explain_on_persistent_tape_after_gradient():
    x = gt.constant(x0)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = gt.sum(gt.stop_gradient(x) * x)
    tape.gradient(y, x)
    assert tape.explain(y, x).reason == "connected"


def test_unconnected_raise_carries_the_explanation():
    x = gt.constant(x0)
    with gt.GradientTape() as tape:
        y = gt.sum(x * 2.0)
    with pytest.raises(gt.UnconnectedGradientError) as info:
        tape.gradient(y, x, unconnected_gradients="raise")
    assert isinstance(info.value, ValueError)
    assert info.value.explanation.reason == "not_watched"
    assert "not_watched" in str(info.value)
    w = gt.Variable(x0)
    with gt.GradientTape() as tape:
        y = gt.sum(w * w)
    g = tape.gradient(y, w, unconnected_gradients=gt.UnconnectedGradients.RAISE)
    np.testing.assert_allclose(g.numpy(), 2 * x0)


def test_explain_cost_is_free_for_tracked_ops():
    """Tracked ops record no explain() metadata: only untracked ones leave edges."""
    w = gt.Variable(x0)
    with gt.GradientTape() as tape:
        y = gt.sum(gt.exp(w) * w)
    assert tape._edges == {} and tape._broken == {}
    assert tape.explain(y, w).reason == "connected"


# -- check_numerics ------------------------------------------------------------------


def test_check_numerics_forward_created_with_line():
    x = gt.constant([1.0, 0.0])
    with gt.debug.check_numerics(), pytest.raises(FloatingPointError) as info:
        gt.log(x)  # <log0-here>
    msg = str(info.value)
    assert "gt.log created a non-finite value in the forward pass" in msg
    assert here("<log0-here>") in msg


def test_check_numerics_forward_propagated():
    x = gt.constant([np.inf, 1.0])
    with gt.debug.check_numerics(), pytest.raises(FloatingPointError, match="propagated"):
        gt.exp(x)


def test_check_numerics_backward_names_the_forward_line():
    x = gt.constant([4.0, 0.0])
    with gt.debug.check_numerics():
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.sqrt(x))  # <sqrt-here>
        with pytest.raises(FloatingPointError) as info:
            tape.gradient(y, x)
    msg = str(info.value)
    assert "gradient of gt.sqrt" in msg and "backward pass" in msg and "created" in msg
    assert here("<sqrt-here>") in msg


def test_check_numerics_off_costs_nothing_and_restores_state():
    from gputape.core import state as _state

    assert _state.tls.obs is None
    with gt.debug.check_numerics():
        assert _state.tls.obs.numerics and _state.tls.obs.locations
    assert _state.tls.obs is None
    # with the check off, a NaN passes silently, as in numpy
    with np.errstate(invalid="ignore", divide="ignore"):
        assert np.isnan(gt.log(gt.constant(-1.0)).numpy())


def test_global_switch():
    gt.debug.enable_check_numerics()
    try:
        with np.errstate(invalid="ignore"), pytest.raises(FloatingPointError):
            gt.sqrt(gt.constant(-1.0))
    finally:
        gt.debug.disable_check_numerics()
    with pytest.raises(RuntimeError):
        gt.debug.disable_check_numerics()


# -- summary and DOT ---------------------------------------------------------------


def test_summary_lists_ops_with_shapes_bytes_and_lines():
    x = gt.constant(np.ones((2, 3)))
    with gt.debug.record_locations(), gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.exp(x)  # <exp-here>
        z = gt.sum(y, axis=1)
    text = tape.summary()
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["#", "op"]
    exp_row = next(r for r in lines if " exp " in f" {r} ")
    assert "(2, 3)" in exp_row and "48" in exp_row and here("<exp-here>") in exp_row
    assert any(" sum " in f" {r} " and "(2,) float64" in r for r in lines)
    assert f"{tape.saved_bytes:,} bytes saved" in lines[-1]
    del z


def test_to_dot_has_every_op_and_edge():
    x = gt.constant(1.0)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sin(x) * gt.cos(x)
    dot = tape.to_dot()
    assert dot.startswith("digraph gputape {") and dot.rstrip().endswith("}")
    for op in ("sin", "cos", "multiply"):
        assert f'label="{op}"' in dot
    assert dot.count("->") == 7  # x->sin->t, x->cos->t, two edges into multiply, one out
    del y


# -- a trainable Variable that reaches the target only through an integer/bool op ------------
# TensorFlow watches a trainable Variable on every read, whatever the op; so the Variable is
# watched and the answer is the op that cut the path, not "not_watched".


def _through_nondiff(kind, w):
    table = gt.constant([10.0, 20.0, 30.0])
    if kind == "comparison":
        return (w > 1.0).astype("float32") * 3.0  # <nd-comparison>
    if kind == "where_condition":
        return gt.where(w > 1.0, 1.0, 2.0)  # <nd-where_condition>
    if kind == "int_and_back":
        return w.astype("int32").astype("float32") * 2.0  # <nd-int_and_back>
    if kind == "argmax_index":
        return table[gt.argmax(w)] * 2.0  # <nd-argmax_index>
    if kind == "argmax_take":
        return gt.take(table, gt.argmax(w)) * 2.0  # <nd-argmax_take>
    if kind == "isnan":
        return gt.sum(gt.isnan(w).astype("float64"))  # <nd-isnan>
    raise AssertionError(kind)


NONDIFF_OP = {
    "comparison": "greater",
    "where_condition": "greater",
    "int_and_back": "cast",
    "argmax_index": "argmax",
    "argmax_take": "argmax",
    "isnan": "isnan",
}


@pytest.mark.parametrize("kind", sorted(NONDIFF_OP))
@pytest.mark.parametrize("after_gradient", [False, True])
def test_variable_only_through_a_nondifferentiable_op(kind, after_gradient):
    w = gt.Variable(np.array([2.0, 0.5, 1.5]), name="w")
    with gt.GradientTape() as tape:
        y = _through_nondiff(kind, w)
    assert tape.watched_variables() == (w,)  # watched on read, as TensorFlow does
    if after_gradient:
        assert tape.gradient(y, w) is None
    e = tape.explain(y, w)
    assert e.reason == "non_differentiable_op", e
    assert e.where == here(f"<nd-{kind}>")
    assert f"gt.{NONDIFF_OP[kind]}" in e.message
    assert e.details["op"] == NONDIFF_OP[kind]
    if kind == "where_condition":
        assert "the condition of gt.where" in e.message


def test_where_condition_and_a_differentiable_branch_is_connected():
    w = gt.Variable(np.array([2.0, 0.5]))
    with gt.GradientTape() as tape:
        y = gt.sum(gt.where(w > 1.0, w * 3.0, 0.0))
    assert tape.explain(y, w).reason == "connected"
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), [3.0, 0.0])


def test_floor_of_a_variable_is_a_zero_gradient_not_none():
    w = gt.Variable(np.array([2.5, -0.5]))
    with gt.GradientTape() as tape:
        y = gt.sum(gt.floor(w) * 2.0)
    e = tape.explain(y, w)
    assert e.reason == "non_differentiable_op" and "gt.floor" in e.message and "zero" in e.message
    np.testing.assert_array_equal(tape.gradient(y, w).numpy(), [0.0, 0.0])


def test_through_a_comparison_the_watch_rules_still_apply():
    frozen = gt.Variable(np.array([2.0, 0.5]), trainable=False, name="frozen")
    with gt.GradientTape() as tape:
        y = gt.where(frozen > 1.0, 1.0, 2.0)
    assert tape.watched_variables() == ()
    assert tape.explain(y, frozen).reason == "not_trainable"
    w = gt.Variable(np.array([2.0, 0.5]))
    with gt.GradientTape(watch_accessed_variables=False) as tape:
        y = gt.where(w > 1.0, 1.0, 2.0)
    assert tape.watched_variables() == ()
    assert tape.explain(y, w).reason == "not_watched"


def test_custom_gradient_collects_a_variable_read_by_a_comparison():
    w = gt.Variable(np.array([2.0, 0.5]), name="w")
    seen = []

    @gt.custom_gradient
    def gate(x):
        m = (w > 1.0).astype("float64")

        def grad(dy, variables=None):
            seen.append([v.name for v in variables])
            return dy * m, [gt.zeros_like(w)]

        return x * m, grad

    x = gt.constant(np.array([1.0, 1.0]))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(gate(x))
    gx, gw = tape.gradient(y, [x, w])
    assert seen == [["w"]]
    np.testing.assert_array_equal(gx.numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(gw.numpy(), [0.0, 0.0])


def test_comparisons_outside_every_tape_do_not_reach_the_tape(monkeypatch):
    from gputape.core import recording

    def boom(*args):
        raise RuntimeError("note_nondiff called")

    monkeypatch.setattr(recording, "note_nondiff", boom)
    w = gt.Variable(np.array([2.0, 0.5]))
    assert (w > 1.0).numpy().tolist() == [True, False]
    assert gt.isnan(w).numpy().tolist() == [False, False]
    with gt.GradientTape(), pytest.raises(RuntimeError, match="note_nondiff called"):
        _ = w > 1.0  # the control: inside a tape the comparison is reported


def test_summary_shows_output_shapes_and_dtypes_without_record_locations():
    x = gt.constant(np.ones((2, 3), "float32"))
    w = gt.Variable(np.ones((3, 4)), name="w")  # float64: matmul promotes
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        h = x @ w
        a, b = gt.split(h, 2, axis=1)
        y = gt.sum(a)
    rows = {r.split()[1]: r for r in tape.summary().splitlines()[2:-2]}
    assert "(2, 4) float64" in rows["matmul"]
    assert "(2, 2) float64, (2, 2) float64" in rows["split"]
    assert "() float64" in rows["sum"]
    assert all(r.rstrip().endswith("-") for r in rows.values())  # no file:line outside record_locations
    assert "record_locations" in tape.summary().splitlines()[-1]
    tape.gradient(y, w)  # a persistent tape keeps its nodes: the table is unchanged
    assert "(2, 4) float64" in tape.summary()
    del b


def test_summary_of_a_custom_gradient_op():
    @gt.custom_gradient
    def double(x):
        return x * 2.0, lambda dy: dy * 2.0

    x = gt.constant(np.ones(3, "float32"))
    with gt.GradientTape() as tape:
        tape.watch(x)
        double(x)
    row = next(r for r in tape.summary().splitlines() if "custom_gradient" in r)
    assert "(3,) float32" in row
