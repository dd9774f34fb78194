"""TensorFlow's explicit control flow (tf.cond, tf.case, tf.switch_case, tf.while_loop, tf.map_fn,
tf.scan, tf.foldl/foldr, tf.vectorized_map, tf.TensorArray): values and gradients against
hand-derived results and central differences to second order, through every kind of tape, and
TensorFlow's exception kinds for its error cases."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf
from gputape.testing import check_grads

Pair = collections.namedtuple("Pair", "h c")
# tf.TensorShape (dimensions may be None) where gputape.tf has it, else gputape's tuple-like shape
TensorShape = getattr(tf, "TensorShape", gt.TensorShape)


def c64(x):
    return gt.constant(np.asarray(x, dtype=np.float64))


# -- cond ---------------------------------------------------------------------------------


@pytest.mark.parametrize("x0", [1.5, -0.7])
def test_cond_value_and_gradient_follow_the_taken_branch(x0):
    x = c64(x0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = tf.cond(x > 0, lambda: x * x * x, lambda: gt.sin(x))
    if x0 > 0:
        assert float(y) == pytest.approx(x0**3) and float(t.gradient(y, x)) == pytest.approx(3 * x0**2)
    else:
        assert float(y) == pytest.approx(np.sin(x0)) and float(t.gradient(y, x)) == pytest.approx(np.cos(x0))


@pytest.mark.parametrize("x0", [[0.4, 1.1], [-0.9, 0.2]])
def test_cond_check_grads_second_order(x0):
    check_grads(lambda x: tf.cond(gt.sum(x) > 0, lambda: gt.sin(x) * x, lambda: x**3 + x), x0, order=2)


def test_cond_second_derivative_with_nested_tapes_and_a_captured_variable():
    w = gt.Variable(np.float64(2.0))
    x = c64(0.5)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = tf.cond(x < 1.0, lambda: w * x**3, lambda: x)
        dy = inner.gradient(y, x)  # 3 w x^2
    assert float(dy) == pytest.approx(3 * 2.0 * 0.25)
    assert float(outer.gradient(dy, x)) == pytest.approx(6 * 2.0 * 0.5)  # 6 w x
    with gt.GradientTape() as t:
        y = tf.cond(x < 1.0, lambda: w * x**3, lambda: x)
    assert float(t.gradient(y, w)) == pytest.approx(0.125)  # x^3


def test_cond_returns_nested_structures_and_jacobian_through_it():
    x = c64([1.0, 2.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        out = tf.cond(tf.constant(True), lambda: {"a": x * x, "b": Pair(x + 1, 2 * x)}, lambda: None)
    assert isinstance(out["b"], Pair)
    np.testing.assert_allclose(t.jacobian(out["a"], x).numpy(), np.diag([2.0, 4.0]))
    np.testing.assert_allclose(t.jacobian(out["b"].c, x).numpy(), 2 * np.eye(2))


def test_cond_predicate_must_be_a_boolean_scalar():
    x = tf.constant([1.0, 2.0])
    with pytest.raises(TypeError, match=r"tf.cond: the predicate must be a boolean scalar, got a float32"):
        tf.cond(x[0], lambda: x, lambda: x)
    with pytest.raises(ValueError, match=r"tf.cond: the predicate must be a scalar.*\(2,\).*reduce_all"):
        tf.cond(x > 0, lambda: x, lambda: x)
    with pytest.raises(TypeError, match="'true_fn' must be callable"):
        tf.cond(True, x, lambda: x)
    # a one-element predicate is a scalar (TensorFlow squeezes it)
    assert float(tf.cond(tf.constant([True]), lambda: x[0], lambda: x[1])) == 1.0


def test_cond_runs_only_the_taken_branch():
    ran = []
    tf.cond(tf.constant(False), lambda: ran.append("true"), lambda: ran.append("false"))
    assert ran == ["false"]


# -- case, switch_case ----------------------------------------------------------------------


def test_case_picks_the_first_true_predicate_and_differentiates():
    x = c64(2.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = tf.case([(x < 0, lambda: -x), (x < 3, lambda: x * x), (x < 5, lambda: x)], default=lambda: 0 * x)
    assert float(y) == 4.0 and float(t.gradient(y, x)) == 4.0
    assert float(tf.case([(x > 5, lambda: x)], default=lambda: x + 1)) == 3.0
    # without a default the last pair is the default: one predicate must hold
    assert float(tf.case([(x < 0, lambda: x), (x > 1, lambda: 2 * x)])) == 4.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="None of conditions evaluated as True"):
        tf.case([(x < 0, lambda: x), (x > 3, lambda: 2 * x)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="exclusive=True"):
        tf.case([(x > 0, lambda: x), (x > 1, lambda: 2 * x)], exclusive=True)
    with pytest.raises(ValueError, match="Unordered dictionaries"):
        tf.case({True: lambda: x}, default=lambda: x)
    with pytest.raises(TypeError, match="2-tuple"):
        tf.case([x > 0], default=lambda: x)
    with pytest.raises(TypeError, match="pred must be a Tensor, got: True"):
        tf.case([(True, lambda: x)], default=lambda: x)
    with pytest.raises(TypeError, match="pred must be Tensor of type bool"):
        tf.case([(x, lambda: x)], default=lambda: x)


def test_switch_case_index_default_and_errors():
    x = c64(3.0)
    fns = [lambda: x, lambda: x * x, lambda: x * x * x]
    with gt.GradientTape() as t:
        t.watch(x)
        y = tf.switch_case(tf.constant(2), fns)
    assert float(y) == 27.0 and float(t.gradient(y, x)) == 27.0  # 3 x^2
    assert float(tf.switch_case(1, {0: fns[0], 1: fns[1]})) == 9.0
    assert float(tf.switch_case(9, fns, default=lambda: -x)) == -3.0
    assert float(tf.switch_case(-1, fns)) == 27.0  # out of range, no default: the last branch
    with pytest.raises(TypeError, match="branch_index must be an integer"):
        tf.switch_case(tf.constant(1.0), fns)
    with pytest.raises(ValueError, match="branch_index must be a scalar"):
        tf.switch_case(tf.constant([1]), fns)


@pytest.mark.parametrize("x0", [[-0.8, 0.3], [0.4, 0.9], [1.5, 2.0]])
def test_case_and_switch_case_check_grads_second_order(x0):
    def by_case(x):
        s = gt.sum(x)
        return tf.case([(s < 0, lambda: gt.sin(x) * x), (s < 2, lambda: x**3)], default=lambda: gt.exp(x) * s)

    def by_switch(x):
        i = int(np.clip(np.floor(float(gt.sum(x))), -1, 3))  # -1 (out of range: the default) .. 3
        return tf.switch_case(i, [lambda: gt.tanh(x) * x, lambda: x**3, lambda: gt.sin(x)], default=lambda: x * x)

    check_grads(by_case, x0, order=2)
    check_grads(by_switch, x0, order=2)


# -- while_loop ----------------------------------------------------------------------------


def _power_loop(x, n=3):
    _, y = tf.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x), (0, gt.ones_like(x)))
    return y


def test_while_loop_value_gradient_and_second_derivative():
    x = c64(1.5)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = _power_loop(x)
        dy = inner.gradient(y, x)
    assert float(y) == pytest.approx(1.5**3)
    assert float(dy) == pytest.approx(3 * 1.5**2)
    assert float(outer.gradient(dy, x)) == pytest.approx(6 * 1.5)
    check_grads(_power_loop, [0.3, -1.2, 2.0], order=2)


def test_while_loop_trip_count_from_a_tensor_and_check_grads():
    def f(x):  # x <- sin(x) * 1.5 while the sum stays above 0.5, at most 6 times
        return tf.while_loop(lambda v: gt.sum(gt.abs(v)) > 0.5, lambda v: gt.sin(v) * 1.5, [x], maximum_iterations=6)[0]

    check_grads(f, [0.7, -0.4], order=2)
    x = c64([0.7, -0.4])
    ref = x
    for _ in range(6):
        if float(gt.sum(gt.abs(ref))) <= 0.5:
            break
        ref = gt.sin(ref) * 1.5
    np.testing.assert_allclose(f(x).numpy(), ref.numpy())


def test_while_loop_maximum_iterations():
    n, s = tf.while_loop(
        lambda i, s: True,
        lambda i, s: (i + 1, s + 2.0),
        (tf.constant(0), tf.constant(0.0)),
        maximum_iterations=tf.constant(4),
    )
    assert int(n) == 4 and float(s) == 8.0
    # the limit is checked before cond: a false cond stops it sooner
    n = tf.while_loop(lambda i: i < 2, lambda i: i + 1, [tf.constant(0)], maximum_iterations=10)
    assert int(n[0]) == 2
    with pytest.raises(ValueError, match="'maximum_iterations' must be a scalar"):
        tf.while_loop(lambda i: i < 2, lambda i: i + 1, [0], maximum_iterations=[1, 2])


def test_while_loop_nested_loop_vars_keep_their_types():
    x = c64([1.0, 2.0])

    def body(s):
        return {"p": Pair(s["p"].h + s["p"].c, s["p"].c), "k": [s["k"][0] + 1]}

    with gt.GradientTape() as t:
        t.watch(x)
        state = {"p": Pair(x, 2 * x), "k": [tf.constant(0)]}
        out = tf.while_loop(lambda s: s["k"][0] < 3, body, state)
        loss = gt.sum(out["p"].h)
    assert isinstance(out, dict) and isinstance(out["p"], Pair) and isinstance(out["k"], list)
    np.testing.assert_allclose(out["p"].h.numpy(), [7.0, 14.0])  # h + 3 * c = 7 x
    np.testing.assert_allclose(t.gradient(loss, x).numpy(), [7.0, 7.0])
    nt = tf.while_loop(lambda h, c: gt.sum(h) < 10, lambda h, c: (h * 2, c), Pair(x, x))
    assert isinstance(nt, Pair) and nt.h.numpy().tolist() == [4.0, 8.0]


def test_while_loop_gradients_reach_captured_variables_and_tensors():
    w = gt.Variable(np.float64(0.5))
    b = c64(0.1)
    x = c64(1.0)
    with gt.GradientTape(persistent=True) as t:
        t.watch(b)
        _, y = tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, w * y + b), (0, x))
    # y = w (w x + b) + b = w^2 x + w b + b
    assert float(y) == pytest.approx(0.25 + 0.05 + 0.1)
    assert float(t.gradient(y, w)) == pytest.approx(2 * 0.5 * 1.0 + 0.1)
    assert float(t.gradient(y, b)) == pytest.approx(0.5 + 1.0)


def test_while_loop_variables_as_loop_vars_enter_as_values():
    v = gt.Variable(np.float64(3.0))
    with gt.GradientTape() as t:
        (y,) = tf.while_loop(lambda y: y < 20, lambda y: (y * y,), (v,))
    assert float(y) == 81.0 and float(t.gradient(y, v)) == pytest.approx(4 * 27.0)  # v^4


def test_while_loop_jacobian_and_batch_jacobian():
    x = c64([[0.3, -0.2], [0.5, 0.1]])
    wm = c64([[0.9, -0.4], [0.2, 1.1]])

    def layers(h):  # three tanh layers, as a loop
        return tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, gt.tanh(h @ wm)), (0, h))[1]

    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = layers(x)
        ref = x
        for _ in range(3):
            ref = gt.tanh(ref @ wm)
    np.testing.assert_allclose(y.numpy(), ref.numpy())
    np.testing.assert_allclose(t.batch_jacobian(y, x).numpy(), t.batch_jacobian(ref, x).numpy())
    np.testing.assert_allclose(t.jacobian(y, x).numpy(), t.jacobian(ref, x).numpy())
    # hand-derived: one layer's batch Jacobian is diag(1 - y^2) @ W^T per example
    with gt.GradientTape() as t1:
        t1.watch(x)
        y1 = gt.tanh(x @ wm)
    expect = np.einsum("bj,ij->bji", 1 - y1.numpy() ** 2, wm.numpy())
    np.testing.assert_allclose(t1.batch_jacobian(y1, x).numpy(), expect)


def test_newton_iteration_for_a_square_root_and_its_gradient():
    def sqrt_newton(a):
        def body(y):
            return 0.5 * (y + a / y)

        return tf.while_loop(lambda y: gt.abs(y * y - a) > 1e-12, body, [gt.ones_like(a)], maximum_iterations=50)[0]

    a = c64(7.0)
    with gt.GradientTape() as t:
        t.watch(a)
        r = sqrt_newton(a)
    assert float(r) == pytest.approx(np.sqrt(7.0), rel=1e-12)
    # differentiating through the iterations converges to d sqrt(a)/da = 1 / (2 sqrt a)
    assert float(t.gradient(r, a)) == pytest.approx(0.5 / np.sqrt(7.0), rel=1e-6)


def test_while_loop_structure_errors_take_tensorflows_kinds():
    x = tf.constant(1.0)
    with pytest.raises(ValueError, match="changed the loop variables' structure"):
        tf.while_loop(lambda a, b: a < 3, lambda a, b: (a + 1, b, b), (x, x))
    with pytest.raises(TypeError, match="sequence types"):
        tf.while_loop(lambda a: a[0] < 3, lambda a: ((a[0] + 1, a[1]),), ([x, x],))
    with pytest.raises(ValueError, match="structure"):
        tf.while_loop(lambda s: s["a"] < 3, lambda s: {"a": s["a"] + 1, "b": x}, {"a": x})
    with pytest.raises(TypeError, match="cond: the predicate must be a boolean scalar, got a float32"):
        tf.while_loop(lambda a: a, lambda a: a - 1, [x])
    with pytest.raises(ValueError, match="cond: the predicate must be a scalar"):
        tf.while_loop(lambda a: a > 0, lambda a: a - 1, [tf.constant([1.0, 2.0])])
    with pytest.raises(TypeError, match="'body' must be callable"):
        tf.while_loop(lambda a: a > 0, None, [x])
    # eagerly, as in TensorFlow, a loop variable may change shape
    (y,) = tf.while_loop(lambda y: y.shape[0] < 4, lambda y: (tf.concat([y, y], 0),), [tf.constant([1.0])])
    assert y.shape == (4,)


def test_in_a_trace_loop_variables_keep_their_dtype_and_shape_unless_invariants_allow():
    @gt.function
    def grows(x):
        return tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, tf.concat([y, y], 0)), (0, x))[1]

    with pytest.raises(
        ValueError,
        match=r"loop_vars\[1\] enters the loop with shape \(3,\), but has shape \(6,\).*"
        "shape_invariants",
    ):
        grows(tf.constant([1.0, 2.0, 3.0]))

    @gt.function
    def grows_ok(x):
        return tf.while_loop(
            lambda i, y: i < 2,
            lambda i, y: (i + 1, tf.concat([y, y], 0)),
            (0, x),
            shape_invariants=(TensorShape([]), TensorShape([None])),
        )[1]

    np.testing.assert_allclose(grows_ok(tf.constant([1.0, 2.0])).numpy(), [1.0, 2.0] * 4)

    @gt.function
    def any_rank(x):  # a list with None is an invariant too; None there: any shape at all
        return tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y[None]), [0, x], shape_invariants=[[], None])[1]

    assert any_rank(tf.constant([1.0])).shape == (1, 1, 1)

    @gt.function
    def one_var(x):  # one loop variable, any shape; a dict of them named by key
        y = tf.while_loop(lambda y: y.shape[0] < 4, lambda y: [tf.concat([y, y], 0)], [x], shape_invariants=[None])
        d = tf.while_loop(
            lambda d: d["n"] < 2,
            lambda d: {"n": d["n"] + 1, "v": tf.concat([d["v"], d["v"]], 0)},
            {"n": 0, "v": x},
            shape_invariants={"n": [], "v": TensorShape([None])},
        )
        return y[0], d["v"]

    assert [r.shape for r in one_var(tf.constant([1.0]))] == [(4,), (4,)]

    @gt.function
    def dict_var(x):
        return tf.while_loop(lambda d: d["n"] < 2, lambda d: {"n": d["n"] + 1, "v": d["v"][:1]}, {"n": 0, "v": x})

    with pytest.raises(ValueError, match=r"Input tensor loop_vars\['v'\] enters the loop with shape \(2,\)"):
        dict_var(tf.constant([1.0, 2.0]))

    @gt.function
    def wrong_structure(x):
        return tf.while_loop(lambda i, y: i < 1, lambda i, y: (i + 1, y), (0, x), shape_invariants=[None])

    with pytest.raises(ValueError, match=r"shape_invariants .* must have the structure of loop_vars"):
        wrong_structure(tf.constant([1.0]))

    @gt.function
    def bad_invariant(x):
        return tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y), (0, x), shape_invariants=(None, [None, 3]))

    with pytest.raises(ValueError, match=r"shape invariant specified for loop_vars\[1\] is not compatible.*\(2,\)"):
        bad_invariant(tf.constant([1.0, 2.0]))

    @gt.function
    def retypes(x):
        return tf.while_loop(lambda i, y: i < 1, lambda i, y: (i + 1, tf.cast(y, tf.float64)), (0, x))[1]

    with pytest.raises(
        TypeError,
        match=r"Loop var loop_vars\[1\] enters the loop with type float32, but has type "
        "float64",
    ):
        retypes(tf.constant([1.0]))


# -- map_fn, scan, foldl, foldr, vectorized_map ---------------------------------------------


def test_map_fn_values_nested_elems_signature_and_gradient():
    x = c64([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with gt.GradientTape() as t:
        t.watch(x)
        y = tf.map_fn(lambda r: gt.sum(r * r), x)
    np.testing.assert_allclose(y.numpy(), [5.0, 25.0, 61.0])
    np.testing.assert_allclose(t.gradient(y, x).numpy(), 2 * x.numpy())
    a, b = c64([1.0, 2.0]), tf.constant([3, 4])
    out = tf.map_fn(
        lambda e: (e[0] * 2, {"n": e[1] + 1}),
        (a, b),
        fn_output_signature=(tf.float64, {"n": tf.TensorSpec((), tf.int32)}),
    )
    assert out[0].numpy().tolist() == [2.0, 4.0] and out[1]["n"].numpy().tolist() == [4, 5]
    check_grads(lambda m: tf.map_fn(lambda r: gt.sin(r) * r[0], m), [[0.3, 1.1], [-0.5, 0.8]], order=2)


def test_map_fn_batch_jacobian_against_the_hand_derived_one():
    x = c64([[0.3, -0.5, 1.2], [0.7, 0.1, -0.4]])
    with gt.GradientTape() as t:
        t.watch(x)
        y = tf.map_fn(lambda r: gt.sin(r) * gt.sum(r), x)
    # d y_i / d x_j = cos(x_i) S [i == j] + sin(x_i), per row, with S the row's sum
    xn = x.numpy()
    expect = np.stack([np.diag(np.cos(r) * r.sum()) + np.sin(r)[:, None] * np.ones((1, 3)) for r in xn])
    np.testing.assert_allclose(t.batch_jacobian(y, x).numpy(), expect)


def test_map_fn_signature_errors():
    xs = tf.constant([1, 2, 3])
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="TensorArray dtype is int32 but Op is trying to write dtype float32"
    ):
        tf.map_fn(lambda x: tf.cast(x, tf.float32) / 2, xs)  # TensorFlow's default signature: elems' own
    with pytest.raises(ValueError, match="structure"):
        tf.map_fn(lambda x: (x, x), xs)
    with pytest.raises(ValueError, match="same first dimension"):
        tf.map_fn(lambda e: e[0], (tf.zeros(2), tf.zeros(3)))
    empty = tf.map_fn(lambda x: x * 2, tf.zeros((0, 2)))
    assert empty.shape == (0, 2)


def test_scan_forward_reverse_initializer_and_gradients():
    x = c64([1.0, 2.0, 3.0])
    np.testing.assert_allclose(tf.scan(lambda a, v: a + v, x).numpy(), [1.0, 3.0, 6.0])
    np.testing.assert_allclose(tf.scan(lambda a, v: a + v, x, reverse=True).numpy(), [6.0, 5.0, 3.0])
    with gt.GradientTape() as t:
        t.watch(x)
        p = tf.scan(lambda a, v: a * v, x, initializer=c64(2.0))
        loss = gt.sum(p)
    np.testing.assert_allclose(p.numpy(), [2.0, 4.0, 12.0])
    # loss = 2 x0 + 2 x0 x1 + 2 x0 x1 x2
    np.testing.assert_allclose(t.gradient(loss, x).numpy(), [2 + 2 * 2 + 2 * 6, 2 * 1 + 2 * 3, 2 * 2])
    fib = tf.scan(lambda a, _: (a[1], a[0] + a[1]), tf.zeros(6), initializer=(tf.constant(0.0), tf.constant(1.0)))
    assert fib[0].numpy().tolist() == [1.0, 1.0, 2.0, 3.0, 5.0, 8.0]
    check_grads(lambda v: tf.scan(lambda a, e: gt.tanh(a * e + e), v), [0.3, -0.6, 0.9], order=2)


def test_scan_rnn_matches_an_unrolled_loop_to_second_order():
    wx, wh = c64([[0.5, -0.3]]), c64([[0.8, 0.1], [-0.2, 0.7]])

    def rnn(xs):  # xs: (time, 1)
        return tf.scan(lambda h, x: gt.tanh(x[None] @ wx + h @ wh), xs, initializer=gt.zeros((1, 2), gt.float64))

    def unrolled(xs):
        h, out = gt.zeros((1, 2), gt.float64), []
        for k in range(xs.shape[0]):
            h = gt.tanh(xs[k][None] @ wx + h @ wh)
            out.append(h)
        return gt.stack(out)

    xs = c64([[0.2], [-0.4], [0.9]])
    np.testing.assert_allclose(rnn(xs).numpy(), unrolled(xs).numpy())
    check_grads(rnn, xs.numpy(), order=2)


def test_foldl_foldr_values_and_hand_derived_gradients():
    x = c64([1.0, 2.0, 3.0])
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        left = tf.foldl(lambda a, v: a * 10 + v, x)
        right = tf.foldr(lambda a, v: a * 10 + v, x)
        init = tf.foldl(lambda a, v: a * v, x, initializer=c64(2.0))
    assert float(left) == 123.0 and float(right) == 321.0 and float(init) == 12.0
    np.testing.assert_allclose(t.gradient(left, x).numpy(), [100.0, 10.0, 1.0])
    np.testing.assert_allclose(t.gradient(right, x).numpy(), [1.0, 10.0, 100.0])
    check_grads(lambda v: tf.foldr(lambda a, e: gt.sin(a) + e * a, v, initializer=c64(0.5)), [0.2, 0.7], order=2)
    check_grads(lambda v: tf.foldl(lambda a, e: gt.cos(a) * e + a, v), [0.2, 0.7, -0.4], order=2)
    with pytest.raises(ValueError, match="no initializer"):
        tf.foldl(lambda a, v: a, tf.zeros(0))


def test_vectorized_map_per_example_gradient_norms():
    w = c64([1.0, -2.0, 0.5])
    xs = c64([[1.0, 1.0, 2.0], [2.0, 0.0, -1.0], [0.5, 0.5, 0.5]])

    def grad_norm(x):
        with gt.GradientTape() as t:
            t.watch(w)
            loss = gt.sum(w * x) ** 2
        return gt.sqrt(gt.sum(t.gradient(loss, w) ** 2))

    norms = tf.vectorized_map(grad_norm, xs)
    # d/dw (w.x)^2 = 2 (w.x) x, whose norm is 2 |w.x| |x|
    wx = xs.numpy() @ w.numpy()
    np.testing.assert_allclose(norms.numpy(), 2 * np.abs(wx) * np.linalg.norm(xs.numpy(), axis=1))
    np.testing.assert_allclose(norms.numpy(), tf.map_fn(grad_norm, xs, fn_output_signature=tf.float64).numpy())
    # an outer tape differentiates through the per-example gradients (second order)
    with gt.GradientTape() as outer:
        outer.watch(xs)
        total = gt.sum(tf.vectorized_map(lambda x: gt.sum(x * x) * x, xs))
    np.testing.assert_allclose(
        outer.gradient(total, xs).numpy(),
        (2 * xs.numpy() * xs.numpy().sum(axis=1, keepdims=True)) + (xs.numpy() ** 2).sum(axis=1, keepdims=True),
    )
    check_grads(lambda m: tf.vectorized_map(lambda r: gt.sum(gt.sin(r)) * r, m), [[0.1, 0.4], [0.9, -0.3]], order=2)


# -- TensorArray ----------------------------------------------------------------------------


def test_tensor_array_operations():
    ta = tf.TensorArray(tf.float32, size=3, clear_after_read=False)
    for i in range(3):
        ta = ta.write(i, tf.constant([float(i), float(i * i)]))
    assert ta.stack().numpy().tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 4.0]]
    assert ta.read(2).numpy().tolist() == [2.0, 4.0] and ta.read(2).numpy().tolist() == [2.0, 4.0]
    assert ta.gather([2, 0]).numpy().tolist() == [[2.0, 4.0], [0.0, 0.0]]
    assert ta.concat().numpy().tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 4.0]
    assert int(ta.size()) == 3 and ta.element_shape == (2,) and ta.dtype == np.float32
    un = tf.TensorArray(tf.float32, size=2).unstack(tf.constant([[1.0], [2.0]]))
    assert un.read(1).numpy().tolist() == [2.0]
    sc = tf.TensorArray(tf.int32, size=4).scatter([3, 1], tf.constant([30, 10]))
    assert sc.gather(tf.constant([1, 3])).numpy().tolist() == [10, 30]
    grow = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    for i in range(4):
        grow = grow.write(i, 1.5 * i)  # Python numbers take the array's dtype
    assert grow.stack().numpy().tolist() == [0.0, 1.5, 3.0, 4.5] and int(grow.size()) == 4
    assert tf.TensorArray(tf.float32, size=0, element_shape=[2]).stack().shape == (0, 2)


def test_tensor_array_reads_gathers_and_concats_differentiate_to_second_order():
    def f(m):  # m: (3, 2)
        ta = tf.TensorArray(tf.float64, size=3, clear_after_read=False).unstack(m)
        sc = tf.TensorArray(tf.float64, size=3).scatter([2, 0, 1], m * m)
        return ta.read(1) * ta.gather([2, 0])[0] + sc.concat()[:2] + gt.sum(sc.stack(), axis=0)

    check_grads(f, [[0.3, -0.7], [1.1, 0.4], [-0.5, 0.9]], order=2)
    m = c64([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with gt.GradientTape() as t:
        t.watch(m)
        y = gt.sum(tf.TensorArray(tf.float64, size=3).unstack(m).gather([0, 0, 2]))
    np.testing.assert_allclose(t.gradient(y, m).numpy(), [[2.0, 2.0], [0.0, 0.0], [1.0, 1.0]])


def test_tensor_array_errors_are_tensorflows():
    ta = tf.TensorArray(tf.float32, size=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="index 1 because it has not yet been written to"):
        ta.read(1)
    ta = ta.write(0, 1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="index 0 because it has already been written to"):
        ta.write(0, 2.0)
    with pytest.raises(tf.errors.OutOfRangeError, match=r"array is not resizeable and size is: 2.*dynamic_size"):
        ta.write(2, 2.0)
    with pytest.raises(tf.errors.OutOfRangeError, match="Tried to read from index 5"):
        ta.read(5)
    ta.read(0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Could not read index 0 twice.*clear_after_read"):
        ta.read(0)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="TensorArray dtype is float32 but Op is trying to write dtype float64"
    ):
        ta.write(1, gt.constant(np.float64(1.0)))
    shaped = tf.TensorArray(tf.float32, size=2, element_shape=gt.TensorShape([2]))
    with pytest.raises(ValueError, match=r"Incompatible shape for value \(3,\), expected \(2,\)"):
        shaped.write(0, tf.zeros(3))
    with pytest.raises(tf.errors.InvalidArgumentError, match="not yet been written"):
        shaped.stack()
    with pytest.raises(ValueError, match="Cannot unstack 3 tensors into a TensorArray of static size 2"):
        tf.TensorArray(tf.float32, size=2).unstack(tf.zeros(3))
    assert issubclass(tf.errors.InvalidArgumentError, tf.errors.OpError)


def test_rnn_loop_with_tensor_array_gradients_to_second_order():
    wh = c64([[0.6, -0.1], [0.3, 0.9]])

    def rnn(xs):  # xs: (time, 2); h_t = tanh(x_t + h_{t-1} @ wh), outputs gathered in a TensorArray
        n = xs.shape[0]
        ta = tf.TensorArray(tf.float64, size=n)

        def body(t, h, ta):
            h = gt.tanh(xs[t] + h @ wh)
            return t + 1, h, ta.write(t, h)

        _, _, ta = tf.while_loop(lambda t, h, ta: t < n, body, (0, gt.zeros(2, gt.float64), ta))
        return ta.stack()

    xs = c64([[0.1, 0.2], [-0.3, 0.5], [0.7, -0.4]])
    h, ref = gt.zeros(2, gt.float64), []
    for t in range(3):
        h = gt.tanh(xs[t] + h @ wh)
        ref.append(h.numpy())
    np.testing.assert_allclose(rnn(xs).numpy(), np.stack(ref))
    check_grads(rnn, xs.numpy(), order=2)


# -- inside gt.function (where no traced value decides a branch) ----------------------------


def test_ops_in_a_compiled_function_equal_eager_for_new_values():
    def program(x):
        _, p = tf.while_loop(
            lambda i, p: i < 3, lambda i, p: (i + 1, p * x), (0, gt.ones_like(x)), maximum_iterations=5
        )
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        for k in range(3):
            ta = ta.write(k, x * float(k))
        s = tf.scan(lambda a, r: a + r, x)
        m = tf.map_fn(lambda r: r * 2.0, x)
        f = tf.foldr(lambda a, r: a * 0.5 + r, x)
        v = tf.vectorized_map(lambda r: r * r, x)
        c = tf.switch_case(1, [lambda: x, lambda: -x])
        return p, ta.stack(), s, m, f, v, c

    compiled = gt.function(program)
    for values in ([1.0, 2.0, 3.0], [0.5, -1.0, 4.0], [2.0, 2.0, -2.0]):
        x = tf.constant(values)
        for a, b in zip(compiled(x), program(x)):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert compiled.tracing_count == 1


def test_compiled_gradient_step_through_a_loop_equals_eager():
    w = gt.Variable(np.float64(0.7))

    def step(x):
        with gt.GradientTape() as t:
            _, y = tf.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, gt.sin(w * y) + x), (0, x))
        return t.gradient(y, w)

    compiled = gt.function(step)
    for v in (0.3, -0.8, 1.4):
        x = c64(v)
        np.testing.assert_allclose(compiled(x).numpy(), step(x).numpy(), rtol=0, atol=0)


# -- inside gt.function with tensor predicates and trip counts: guarded traces ----------------
# A traced tensor's value read in Python (a predicate, a trip count) is guarded: a call whose
# values take another branch or trip count runs another trace, never the first one's path.


def _newton_sqrt(a):
    return tf.while_loop(
        lambda y: tf.abs(y * y - a) > 1e-6 * a, lambda y: (0.5 * (y + a / y),), [tf.ones_like(a)], maximum_iterations=40
    )[0]


def _relu_steps(x):
    return tf.foldl(lambda acc, v: tf.cond(v > 0, lambda: acc + v, lambda: acc * 0.5), x, initializer=tf.constant(1.0))


def _ta_squares(x, n):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    _, ta = tf.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, x * tf.cast(i, tf.float32))), (0, ta))
    return ta.stack() if int(ta.size()) else tf.zeros((0,))


PROGRAMS = {
    "cond on a sum": (
        lambda x: tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: -x),
        [([1.0, 2.0],), ([-3.0, 1.0],), ([0.5, 0.5],)],
    ),
    "while below a tensor bound": (
        lambda x, n: tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * x), (tf.constant(0), x))[1],
        [(1.5, 3), (1.5, 0), (2.0, 5), (1.5, 3)],
    ),
    "Newton's square root": (_newton_sqrt, [(7.0,), (2.0,), (1000.0,)]),
    "case": (
        lambda x: tf.case([(x < 0, lambda: -x), (x < 1, lambda: x * x)], default=lambda: x + 10.0),
        [(-2.0,), (0.5,), (3.0,)],
    ),
    "switch_case": (
        lambda i, x: tf.switch_case(i, [lambda: x, lambda: x * x, lambda: -x]),
        [(0, 3.0), (2, 3.0), (1, 3.0), (7, 3.0)],
    ),
    "map_fn with a cond per row": (
        lambda m: tf.map_fn(lambda r: tf.cond(r[0] > r[1], lambda: r[0], lambda: r[1] * 2.0), m),
        [([[1.0, 2.0], [4.0, 3.0]],), ([[5.0, 2.0], [0.0, 3.0]],)],
    ),
    "scan with a cond per step": (
        lambda x: tf.scan(lambda a, v: tf.cond(v > a, lambda: v, lambda: a - 1.0), x),
        [([1.0, 3.0, 2.0],), ([3.0, 1.0, 5.0],)],
    ),
    "foldl with a cond per step": (_relu_steps, [([1.0, -2.0, 3.0],), ([-1.0, 2.0, -3.0],)]),
    "vectorized_map with a cond per row": (
        lambda m: tf.vectorized_map(lambda r: tf.cond(tf.reduce_sum(r) > 0, lambda: r, lambda: r * 0.0), m),
        [([[1.0, -2.0], [3.0, 1.0]],), ([[-1.0, 2.0], [-3.0, 1.0]],)],
    ),
    "TensorArray filled to a tensor length": (_ta_squares, [(2.0, 3), (2.0, 1), (3.0, 4)]),
    "maximum_iterations from a tensor": (
        lambda x, m: tf.while_loop(lambda v: True, lambda v: (v * x,), [x], maximum_iterations=m)[0],
        [(2.0, 2), (2.0, 4), (3.0, 0)],
    ),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_compiled_control_flow_equals_eager_for_other_branches_and_trip_counts(name):
    fn, calls = PROGRAMS[name]
    compiled = tf.function(fn)
    for args in calls:
        targs = [tf.constant(a) for a in args]
        got, want = compiled(*targs), fn(*targs)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=f"{name} at {args}")


def test_compiled_gradients_through_tensor_trip_counts_equal_eager():
    w = gt.Variable(np.float64(0.8))

    def step(x, n):
        with tf.GradientTape() as t:
            _, y = tf.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tf.sin(w * y) + x), (0, x))
            z = tf.cond(y > 0.5, lambda: y * y, lambda: -y)
        return t.gradient(z, w)

    compiled = tf.function(step)
    for x, n in [(0.3, 2), (0.3, 5), (-0.9, 1), (0.3, 2)]:
        args = (c64(x), tf.constant(n))
        np.testing.assert_array_equal(compiled(*args).numpy(), step(*args).numpy())
