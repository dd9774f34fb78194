"""Python control flow on tensor values inside ``gt.function`` / ``tf.function``: guards.

Every program here runs twice from the same starting state, once eagerly and once compiled,
and is called repeatedly with values that take other branches and trip counts: results and
the state left behind (variables, optimizer slots, step counts) must be equal bit for bit.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gputape as gt
import gputape.tf as tf
from gputape.core._nest import flatten
from gputape.core.tape import GputapeWarning
from gputape.devices import backend
from gputape.function import MAX_TRACES, OperatorNotAllowedInGraphError, do_not_convert

# -- the frozen-value cases: each returned the first call's value before guards -------


def test_for_over_tf_range_of_an_argument_follows_n():
    @tf.function
    def geo(x, n):
        s, p = tf.constant(0.0), tf.constant(1.0)
        for _ in tf.range(n):
            s += p
            p *= x
        return s

    x = tf.constant(1.5)
    assert [float(geo(x, tf.constant(n))) for n in (3, 1, 5, 3)] == [4.75, 1.0, 13.1875, 4.75]
    assert geo.tracing_count == 3  # one trace per trip count seen; the fourth call replayed


def test_relu_sum_branches_per_element():
    @tf.function
    def relu_sum(x):
        total = tf.constant(0.0)
        for v in x:
            if v > 0:
                total += v
        return total

    got = [float(relu_sum(tf.constant(v))) for v in ([1.0, -2.0, 3.0], [-1.0, 2.0, 3.0], [1.0, -2.0, 3.0])]
    assert got == [4.0, 5.0, 4.0]


def test_while_below_a_tensor_bound():
    @tf.function
    def count(n):
        i = tf.constant(0)
        while i < n:
            i += 1
        return i

    assert [int(count(tf.constant(k))) for k in (3, 0, 4, 3)] == [3, 0, 4, 3]


def test_python_range_of_int_of_a_tensor():
    @gt.function
    def f(x, n):
        acc = x
        for _ in range(int(n)):
            acc = acc * 2.0
        return acc

    assert [float(f(gt.constant(1.0), gt.constant(k))) for k in (2, 0, 3)] == [4.0, 1.0, 8.0]


def test_iteration_over_a_variable_and_gt_arange_of_a_tensor():
    v = gt.Variable([1.0, -1.0])

    @gt.function
    def f(n):
        s = gt.constant(0.0)
        for k in gt.arange(n):
            s = s + gt.cast(k, "float32")
        for e in v:
            s = s + gt.maximum(e, 0.0)
        return s

    assert float(f(gt.constant(3))) == 4.0
    assert float(f(gt.constant(1))) == 1.0
    v.assign([5.0, 2.0])
    assert float(f(gt.constant(1))) == 7.0  # the variable's values were never guarded on: not needed


def test_shape_from_a_tensor_value():
    @tf.function
    def f(shape_t, k):
        z = tf.zeros(shape_t)
        return tf.reduce_sum(z + 1.0) + tf.cast(tf.reshape(tf.range(k), [-1]).shape[0], tf.float32)

    assert float(f(tf.constant([2, 3]), tf.constant(2))) == 8.0
    assert float(f(tf.constant([1, 4]), tf.constant(5))) == 9.0


def test_shape_dependent_loop_retraces_by_signature():
    @gt.function
    def f(x):
        s = gt.constant(0.0)
        for i in range(x.shape[0]):
            if x[i] > 0:
                s = s + x[i]
        return s

    assert float(f(gt.constant([1.0, 2.0]))) == 3.0
    assert float(f(gt.constant([1.0, -2.0, 4.0]))) == 5.0
    assert float(f(gt.constant([-1.0, 2.0]))) == 2.0


def test_a_boolean_mask_guards_the_result_shape():
    # x[mask]'s size is the mask's count: code shaped by it (here y.shape[0]) held only for that count
    @gt.function
    def f(x):
        y = x[x > 0]
        return gt.sum(y) * y.shape[0]

    vals = ([1.0, -1.0, 2.0], [1.0, 2.0, 3.0], [-1.0, -1.0, 2.0])
    assert [float(f(gt.constant(v))) for v in vals] == [6.0, 18.0, 2.0]


def test_tf_where_of_a_condition_alone_follows_the_values():
    @tf.function
    def f(c):
        return tf.where(c)

    assert f(tf.constant([True, False])).numpy().tolist() == [[0]]
    assert f(tf.constant([False, True])).numpy().tolist() == [[1]]


# -- TensorFlow-style programs, compiled vs eager ---------------------------------------------


def _state_bytes(objs):
    out = []
    for o in objs:
        if isinstance(o, gt.Variable):
            out.append(("var", o.numpy().tobytes(), str(o.dtype)))
        else:  # an optimizer
            s = o.get_state()
            out.append(
                ("opt", s["iterations"], [sorted((k, a.tobytes()) for k, a in d.items()) for _, d in s["slots"]])
            )
    return out


def _flat_bytes(out):
    # an eager run returns Python numbers as they are; the compiled one as tensors (TensorFlow's rule)
    leaves = [x if x is None or isinstance(x, gt.Tensor) else gt.constant(x) for x in flatten(out)[0]]
    return [None if x is None else (x.numpy().tobytes(), str(x.dtype)) for x in leaves]


def _p_geo():
    def f(x, n):
        s, p = tf.constant(0.0), tf.constant(1.0)
        for _ in tf.range(n):
            s += p
            p *= x
        return s

    return f, [], [(tf.constant(1.5), tf.constant(n)) for n in (3, 1, 5, 0, 3, 1)]


def _p_relu_sum():
    def f(x):
        total = tf.constant(0.0)
        for v in x:
            if v > 0:
                total += v
        return total

    vals = ([1.0, -2.0, 3.0], [-1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1.0, -2.0, 3.0])
    return f, [], [(tf.constant(v),) for v in vals]


def _p_if_elif_else():
    def f(x):
        m = tf.reduce_mean(x)
        if m > 1.0:
            y = x * 2.0
        elif m > 0.0:
            y = x + 10.0
        else:
            y = -x
        return y, 3  # a Python number comes back as a tensor

    return f, [], [(tf.constant(v),) for v in ([2.0, 3.0], [0.5, 0.1], [-1.0, -2.0], [2.0, 3.0])]


def _p_break():
    def f(x, limit):
        s = tf.constant(0.0)
        for i in tf.range(10):
            s += x * tf.cast(i, tf.float32)
            if s > limit:
                break
        return s

    return f, [], [(tf.constant(1.0), tf.constant(v)) for v in (5.0, 100.0, 0.5, 5.0)]


def _p_continue():
    def f(x):
        s = tf.constant(0.0)
        n = 0
        for v in x:
            if v < 0:
                continue
            s += v * v
            n += 1
        return s, n

    return f, [], [(tf.constant(v),) for v in ([1.0, -1.0, 2.0], [-1.0, -1.0, 2.0], [3.0, 1.0, 2.0])]


def _p_early_return():
    def f(x):
        for i in tf.range(tf.size(x)):
            if x[i] < 0:
                return tf.cast(i, tf.float32)
        return tf.constant(-1.0)

    return f, [], [(tf.constant(v),) for v in ([1.0, -1.0, 2.0], [1.0, 1.0, 2.0], [-1.0, 1.0, 2.0])]


def _p_while_newton():
    def f(a):
        x = a
        while tf.abs(x * x - a) > 1e-6:
            x = 0.5 * (x + a / x)
        return x

    return f, [], [(tf.constant(v, tf.float64),) for v in (2.0, 9.0, 1.0, 2.0, 1e4)]


def _p_collatz():
    def f(n):
        steps = tf.constant(0)
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            steps += 1
        return steps

    return f, [], [(tf.constant(k),) for k in (6, 1, 7, 6)]


def _p_nested_loops():
    def f(n, m):
        s = tf.constant(0)
        for i in tf.range(n):
            for j in tf.range(m):
                if (i + j) % 2 == 0:
                    s += i * j
        return s

    return f, [], [(tf.constant(a), tf.constant(b)) for a, b in ((2, 3), (3, 1), (0, 2), (2, 3))]


def _p_conditional_assign():
    v = tf.Variable(0.0)

    def f(x):
        if v < 3.0:
            v.assign_add(x)
        else:
            v.assign(0.0)
        return v.read_value() * 2.0

    return f, [v], [(tf.constant(1.5),)] * 6


def _p_variable_while():
    v = tf.Variable(1.0)

    def f(limit):
        n = 0
        while v < limit:
            v.assign(v * 2.0)
            n += 1
        return n

    return f, [v], [(tf.constant(x),) for x in (5.0, 5.0, 40.0, 1.0)]


def _p_data_dependent_optimizer_steps():
    w = tf.Variable([1.0, -2.0])
    opt = tf.keras.optimizers.Adam(0.1)

    def f(x, k):
        for _ in tf.range(k):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(w * x - 1.0))
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss if k > 0 else None

    calls = [(tf.constant([1.0, 2.0]), tf.constant(k)) for k in (1, 3, 0, 2, 1)]
    return f, [w, opt], calls


def _p_train_until_small():
    w = tf.Variable([3.0])
    opt = tf.keras.optimizers.SGD(0.2, momentum=0.5)

    def f(target):
        steps = 0
        while tf.reduce_sum(tf.abs(w - target)) > 0.5 and steps < 8:
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(w - target))
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            steps += 1
        return steps

    return f, [w, opt], [(tf.constant([0.0]),), (tf.constant([0.0]),), (tf.constant([5.0]),)]


def _p_gradient_on_branch():
    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(x * x) if tf.reduce_sum(x) > 0 else tf.reduce_sum(tf.sin(x))
        return tape.gradient(y, x)

    return f, [], [(tf.constant(v),) for v in ([1.0, 2.0], [-1.0, -2.0], [1.0, 2.0])]


def _p_clip_on_condition():
    w = tf.Variable([3.0, 4.0])
    opt = tf.keras.optimizers.SGD(0.1)

    def f(x, c):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x)
        (g,) = tape.gradient(loss, [w])
        norm = tf.norm(g)
        if norm > c:
            g = g * (c / norm)
        opt.apply_gradients([(g, w)])
        return norm

    return f, [w, opt], [(tf.constant([3.0, 4.0]), tf.constant(c)) for c in (1.0, 10.0, 1.0, 10.0)]


def _p_random_branch():
    def f(x):
        r = gt.random.uniform((3,))  # (tf.random.uniform is drawn once at trace time: a separate defect)
        if tf.reduce_sum(x) > 0:
            return r + gt.random.normal((3,))
        return r * 0.0 + tf.reduce_sum(x)

    return f, [], [(tf.constant(v),) for v in ([1.0], [-1.0], [2.0], [-3.0])]


def _p_python_max_min():
    def f(a, b):
        hi = max(a, b)  # Python's max compares tensors: bool() of a traced tensor
        lo = min(a, b)
        return hi - lo

    return f, [], [(tf.constant(x), tf.constant(y)) for x, y in ((1.0, 2.0), (3.0, 1.0), (1.0, 2.0))]


def _p_dict_of_rows():
    def f(x):
        out = {"pos": tf.constant(0.0), "neg": tf.constant(0.0)}
        for row in x:
            key = "pos" if tf.reduce_sum(row) >= 0 else "neg"
            out[key] += tf.reduce_sum(row)
        return out

    return f, [], [(tf.constant(v),) for v in ([[1.0, 2.0], [-3.0, 1.0]], [[1.0, 2.0], [3.0, 1.0]])]


def _p_item_and_numpy():
    def f(x):
        k = x.numpy().argmax()  # numpy on a traced value: guarded as a whole array
        scale = x[0].item()
        return x * float(k) + scale

    return f, [], [(tf.constant(v),) for v in ([1.0, 3.0, 2.0], [5.0, 3.0, 2.0], [1.0, 3.0, 2.0])]


def _p_metric_after_branch():
    m = tf.keras.metrics.Mean()

    def f(x):
        y = x * 2.0 if tf.reduce_sum(x) > 0 else x * -1.0
        m.update_state(y)  # a host step after the last guard runs in place
        return y

    def result():
        return m.result()

    return f, [], [(tf.constant(v),) for v in ([1.0], [-2.0], [3.0])], result


def _p_do_not_convert_helper_without_values():
    @do_not_convert
    def helper(x):
        return x * 3.0

    def f(x):
        return helper(x) if x > 0 else helper(-x)

    return f, [], [(tf.constant(v),) for v in (1.0, -2.0, 3.0)]


def _p_keras_layer_branch():
    layer = tf.keras.layers.Dense(2, kernel_initializer="ones")
    layer.build((None, 2))

    def f(x):
        h = layer(x)
        if tf.reduce_max(h) > 3.0:
            h = tf.nn.relu(h - 3.0)
        return h

    return f, [], [(tf.constant(v),) for v in ([[1.0, 1.0]], [[2.0, 2.0]], [[1.0, 1.0]])]


PROGRAMS = [
    _p_geo,
    _p_relu_sum,
    _p_if_elif_else,
    _p_break,
    _p_continue,
    _p_early_return,
    _p_while_newton,
    _p_collatz,
    _p_nested_loops,
    _p_conditional_assign,
    _p_variable_while,
    _p_data_dependent_optimizer_steps,
    _p_train_until_small,
    _p_gradient_on_branch,
    _p_clip_on_condition,
    _p_random_branch,
    _p_python_max_min,
    _p_dict_of_rows,
    _p_item_and_numpy,
    _p_metric_after_branch,
    _p_do_not_convert_helper_without_values,
    _p_keras_layer_branch,
]


def _run(make, compiled, outer_tape=None):
    gt.random.seed(7)
    f, state, calls, *extra = make()
    g = tf.function(f) if compiled else f
    results = []
    for args in calls:
        if outer_tape is None:
            results.append(_flat_bytes(g(*args)))
        else:  # a tape around the call: the compiled function runs eagerly so the tape sees its ops
            with tf.GradientTape(persistent=outer_tape == "persistent") as t1:
                with tf.GradientTape() as t2:
                    for a in args:
                        if a.dtype.kind == "f":
                            t1.watch(a)
                            t2.watch(a)
                    out = g(*args)
                    target = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float64)) for o in flatten(out)[0] if o is not None])
                srcs = [a for a in args if a.dtype.kind == "f"]
                inner = t2.gradient(target, srcs)
            outer = t1.gradient([x for x in inner if x is not None], srcs) if any(x is not None for x in inner) else []
            results.append(_flat_bytes(out) + _flat_bytes(inner) + _flat_bytes(outer))
    if extra:
        results.append(_flat_bytes(extra[0]()))
    return results, _state_bytes(state), g


@pytest.mark.parametrize("make", PROGRAMS, ids=lambda m: m.__name__[3:])
def test_program_compiled_equals_eager(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error", GputapeWarning)  # none of these reaches the bound
        eager, eager_state, _ = _run(make, False)
        got, got_state, g = _run(make, True)
    assert got == eager
    assert got_state == eager_state
    assert g.tracing_count >= 1


def test_there_are_at_least_twenty_programs():
    assert len(PROGRAMS) >= 20


@pytest.mark.parametrize("tape", ["persistent", "nested"])
@pytest.mark.parametrize(
    "make", [_p_geo, _p_while_newton, _p_if_elif_else, _p_gradient_on_branch], ids=lambda m: getattr(m, "__name__", m)
)
def test_tapes_around_the_call_see_the_eager_result(make, tape):
    assert _run(make, True, tape)[:2] == _run(make, False, tape)[:2]


def test_programs_replay_the_paths_they_saw():
    # after one call per path, further calls replay: no new trace
    f, _, calls = _p_relu_sum()
    g = tf.function(f)
    for args in calls:
        g(*args)
    n = g.tracing_count
    for args in calls * 3:
        g(*args)
    assert g.tracing_count == n


def test_guards_with_an_input_signature_and_on_methods():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def f(x):
        return tf.reduce_sum(x) if tf.reduce_sum(x) > 0 else tf.constant(0.0)

    assert [float(f(v)) for v in ([1.0, 2.0], [-3.0], [4.0], [-1.0, -1.0, -1.0])] == [3.0, 0.0, 4.0, 0.0]

    class Counter(tf.Module):
        def __init__(self):
            self.v = tf.Variable(0)

        @tf.function
        def bump(self, limit):
            while self.v < limit:
                self.v.assign_add(1)
            return self.v.read_value()

    a, b = Counter(), Counter()
    assert [int(a.bump(tf.constant(3))), int(b.bump(tf.constant(1))), int(a.bump(tf.constant(5)))] == [3, 1, 5]


# -- rollback: an abandoned replay leaves the state an eager run leaves ------------------------


def _rollback_program():
    v = tf.Variable([0.0, 0.0])
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.Adam(0.05)

    def step(x):
        v.assign_add(x)  # an assignment before the guard
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(w * x))
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))  # an optimizer step before the guard
        noise = gt.random.uniform((2,))  # a draw before the guard
        if tf.reduce_sum(v) > 2.0:  # the guard
            w.assign(w * 0.5)
            v.assign(tf.zeros([2]))
        return loss + noise

    return step, [v, w, opt]


def test_a_failed_guard_after_an_assign_and_an_optimizer_step_leaves_the_eager_state():
    xs = [tf.constant([0.5, 0.25]), tf.constant([1.0, 1.0]), tf.constant([0.1, 0.1]), tf.constant([2.0, 0.0])]

    def run(compiled):
        gt.random.seed(3)
        step, state = _rollback_program()
        f = tf.function(step) if compiled else step
        outs = [f(x).numpy().tobytes() for x in xs]
        return outs, _state_bytes(state), f

    eager_outs, eager_state, _ = run(False)
    outs, state, f = run(True)
    assert outs == eager_outs
    assert state == eager_state  # variables, Adam's slots and iterations: the same bytes
    assert f.tracing_count == 2  # the second call's guard failed, rolled back, traced the other branch


def test_an_abandoned_replay_prints_nothing(capsys):
    @tf.function
    def f(x):
        tf.print("before", x, output_stream=sys.stdout)
        if x > 0:
            tf.print("pos", output_stream=sys.stdout)
        return x

    for v in (1.0, -1.0, 2.0, -2.0, 3.0):
        f(tf.constant(v))
    lines = capsys.readouterr().out.split("\n")
    assert lines == ["before 1", "pos", "before -1", "before 2", "pos", "before -2", "before 3", "pos", ""]


def test_a_host_step_before_a_guard_makes_the_signature_eager():
    m = tf.keras.metrics.Sum()

    @tf.function
    def f(x):
        m.update_state(x)
        return x * 2.0 if x > 0 else x

    with pytest.warns(GputapeWarning, match=r"gt.function\(f\).*metric update.*runs eagerly"):
        f(tf.constant(1.0))
    assert [float(f(tf.constant(v))) for v in (-1.0, 3.0)] == [-1.0, 6.0]
    assert float(m.result()) == 3.0  # each update ran once per call


# -- the bound ------------------------------------------------------------------------------------


def test_after_the_bound_the_signature_runs_eagerly_and_warns_once():
    @gt.function
    def f(x, n):
        for _ in range(int(n)):
            x = x + 1.0
        return x

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = [float(f(gt.constant(0.0), gt.constant(k))) for k in range(12)]
        got += [float(f(gt.constant(0.0), gt.constant(k))) for k in range(3)]
    assert got == [float(k) for k in range(12)] + [0.0, 1.0, 2.0]
    ours = [w for w in rec if issubclass(w.category, GputapeWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    msg = str(ours[0].message)
    assert "gt.function(f)" in msg and "test_function_guards.py" in msg and "runs eagerly" in msg and "gt.where" in msg
    assert f.tracing_count == MAX_TRACES
    # other signatures still compile
    assert float(f(gt.constant([0.0]), gt.constant(2))[0]) == 2.0
    assert f.tracing_count == MAX_TRACES + 1


# -- guard-free functions are untouched ---------------------------------------------------------


def test_a_function_without_guards_has_no_guard_machinery():
    from gputape.function import _Concrete

    f = gt.function(lambda x: gt.tanh(x) * 2.0)
    f(gt.constant([1.0]))
    (entry,) = f._cache.values()
    assert type(entry) is _Concrete  # the replay itself: no signature wrapper, no undo
    assert "guard" not in f.code


def test_guarded_functions_skip_cuda_graphs_and_guard_free_ones_keep_them():
    def body(x):
        return x * 2.0 if gt.sum(x) > 0 else x

    guarded = gt.function(body, graphs="emulate")
    plain = gt.function(lambda x: gt.exp(x) * 2.0, graphs="emulate")
    x = gt.constant([1.0, 2.0])
    for _ in range(2):
        guarded(x), plain(x)
    assert guarded.graph_report == {}
    assert plain.graph_report["graphs"] >= 1
    assert float(guarded(gt.constant([-1.0, -2.0]))[0]) == -1.0


# -- autograph=False and do_not_convert --------------------------------------------------------


def test_autograph_false_refuses_as_tensorflow_does():
    def f(x):
        if x > 0:
            return x
        return -x

    g = tf.function(f, autograph=False)
    with pytest.raises(OperatorNotAllowedInGraphError, match=r"autograph=False") as info:
        g(tf.constant(1.0))
    assert isinstance(info.value, TypeError)
    assert float(tf.function(f)(tf.constant(-2.0))) == 2.0


def test_do_not_convert_refuses_inside_a_trace_only():
    @tf.autograph.experimental.do_not_convert
    def sign(x):
        return 1.0 if x > 0 else -1.0

    assert sign(tf.constant(2.0)) == 1.0  # eagerly it is plain Python
    g = tf.function(lambda x: x * sign(x))
    with pytest.raises(OperatorNotAllowedInGraphError, match=r"do_not_convert"):
        g(tf.constant(2.0))


# -- what a traced function returns --------------------------------------------------------------


def test_python_numbers_and_arrays_come_back_as_tensors():
    @tf.function
    def f(x):
        return {"n": 3, "f": 0.5, "b": True, "a": np.arange(2), "none": None, "t": x + 1.0}, (x, 2)

    for _ in range(2):  # the trace and a replay return the same kinds
        d, (_, two) = f(tf.constant(1.0))
        assert isinstance(d["n"], gt.Tensor) and d["n"].dtype == tf.int32 and int(d["n"]) == 3
        assert d["f"].dtype == tf.float32 and d["b"].dtype == tf.bool and bool(d["b"])
        assert isinstance(d["a"], gt.Tensor) and d["a"].numpy().tolist() == [0, 1]
        assert d["none"] is None and float(d["t"]) == 2.0
        assert isinstance(two, gt.Tensor) and int(two) == 2
    r1, r2 = f(tf.constant(1.0))[1][1], f(tf.constant(1.0))[1][1]
    assert r1 is not r2  # a new tensor each call


def test_a_branch_returning_a_number_or_a_tensor_returns_tensors():
    @tf.function
    def f(x):
        if x > 0:
            return 1
        return x

    assert [type(f(tf.constant(v))) for v in (1.0, -1.0, 1.0)] == [gt.Tensor] * 3


# -- the fake GPU and a real one ------------------------------------------------------------------


@pytest.fixture
def fake_gpu(monkeypatch):
    from fake_gpu import FakeCupy

    from gputape import config
    from gputape.core import expr

    if backend.gpu_available():
        pytest.skip("a real GPU answers here: test_guards_on_a_gpu_match_numpy checks it")
    monkeypatch.setattr(backend, "_cupy", FakeCupy())
    monkeypatch.setattr(backend, "_probed", {})
    monkeypatch.setattr(backend, "_default", None)
    monkeypatch.delenv("GPUTAPE_DEVICE", raising=False)
    monkeypatch.setattr(expr, "launch_dtype", lambda dt: None)
    monkeypatch.setattr(config, "_soft_placement", False)
    yield monkeypatch


def _gpu_geo(x, n):
    s, p = gt.zeros((), "float32"), gt.ones((), "float32")
    for _ in gt.arange(n):
        s = s + p
        p = p * x
    return s if gt.sum(s) < 100.0 else s * 0.0


def _numpy_geo(x, n):
    s = np.float32(sum(np.float32(x) ** k for k in range(n)))
    return s if s < 100.0 else np.float32(0.0)


def test_guards_on_the_fake_gpu(fake_gpu):
    f = gt.function(_gpu_geo)
    for n in (3, 1, 12, 3):
        x = gt.constant(1.5, device="cuda")
        out = f(x, gt.constant(n, device="cuda"))
        assert out.device == "cuda:0"
        np.testing.assert_allclose(out.numpy(), _numpy_geo(1.5, n), rtol=1e-6)
    assert f.graph_report == {}  # a function with guards replays without CUDA graphs


@pytest.mark.gpu
def test_guards_on_a_gpu_match_numpy():
    f = gt.function(_gpu_geo)
    for n in (3, 1, 12, 3, 0):
        out = f(gt.constant(1.5, device="cuda"), gt.constant(n, device="cuda"))
        np.testing.assert_allclose(out.numpy(), _numpy_geo(1.5, n), rtol=1e-6)
    plain = gt.function(lambda x: gt.exp(x) * 2.0)
    x = gt.constant(np.ones(4, np.float32), device="cuda")
    plain(x), plain(x)
    assert plain.graph_report["graphs"] >= 1  # guard-free functions keep their CUDA graphs


# -- random small programs with branches ---------------------------------------------------------

_leaf = st.tuples(st.sampled_from(["add", "mul", "sub"]), st.floats(-2.0, 2.0, width=32))
_instr = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.tuples(
            st.just("if"), st.floats(-3.0, 3.0, width=32), st.lists(inner, max_size=3), st.lists(inner, max_size=3)
        ),
        st.tuples(st.just("loop"), st.integers(0, 3), st.lists(inner, max_size=2)),
        st.tuples(st.just("while"), st.floats(-4.0, 4.0, width=32), st.lists(inner, max_size=2)),
    ),
    max_leaves=8,
)


def _interpret(prog, s, x):
    for ins in prog:
        op = ins[0]
        if op == "add":
            s = s + ins[1] * x
        elif op == "mul":
            s = s * gt.tanh(ins[1] + x)
        elif op == "sub":
            s = s - ins[1]
        elif op == "if":
            s = _interpret(ins[2] if s > ins[1] else ins[3], s, x)
        elif op == "loop":
            for _ in gt.arange(gt.cast(gt.abs(x) * ins[1], "int32")):
                s = _interpret(ins[2], s, x) + 0.5
        else:  # a bounded while on a tensor condition
            k = 0
            while s < ins[1] and k < 3:
                s = _interpret(ins[2], s, x) + 1.0
                k += 1
    return s


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prog=st.lists(_instr, min_size=1, max_size=4),
    xs=st.lists(st.floats(-2.0, 2.0, width=32), min_size=2, max_size=5),
)
def test_random_programs_with_branches_equal_eager(prog, xs):
    def f(x):
        return _interpret(prog, gt.constant(0.0), x)

    g = gt.function(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GputapeWarning)  # many paths may reach the bound: still exact
        for v in xs + xs[:1]:
            x = gt.constant(v)
            assert g(x).numpy().tobytes() == f(x).numpy().tobytes()


# -- tf.TensorShape --------------------------------------------------------------------------------


def test_tensor_shape_known_and_unknown():
    S = tf.TensorShape
    s = S([None, 3])
    assert s.rank == s.ndims == len(s) == 2 and s.as_list() == [None, 3] and s.dims == [None, 3]
    assert s[0] is None and s[1] == 3 and s[-1] == 3 and s[1:] == S([3]) and isinstance(s[:1], S)
    assert s == S([None, 3]) and s == [None, 3] and s != S([2, 3]) and s != (None, 3, 1)
    assert S([2, 3]) == (2, 3) and (2, 3) == S([2, 3]) and tf.zeros([2, 3]).shape == S([2, 3])
    assert hash(S([2, None])) == hash(S((2, None)))
    assert repr(s) == "TensorShape([None, 3])" and str(s) == "(None, 3)" and str(S([4])) == "(4,)"
    assert not s.is_fully_defined() and s.num_elements() is None and S([2, 3]).num_elements() == 6
    u = S(None)
    assert u.rank is None and u.dims is None and not u and repr(u) == "TensorShape(None)" and str(u) == "<unknown>"
    assert u[0] is None and u.is_compatible_with([1, 2, 3]) and u.merge_with([1, None]) == S([1, None])
    with pytest.raises(ValueError, match="unknown TensorShape"):
        u.as_list()
    with pytest.raises(ValueError, match="unknown rank"):
        len(u)
    assert S(3) == S([3]) and S(S([1, 2])) == S([1, 2]) and S(tf.zeros([2]).shape) == S([2])


def test_tensor_shape_compatibility_and_merge():
    S = tf.TensorShape
    assert S([None, 3]).is_compatible_with(S([5, 3])) and S([None, 3]).is_compatible_with((5, None))
    assert not S([None, 3]).is_compatible_with([5, 4]) and not S([None, 3]).is_compatible_with([3])
    assert S([None, 3]).merge_with([5, None]) == S([5, 3])
    with pytest.raises(ValueError, match=r"Shapes \(None, 3\) and \(5, 4\) are not compatible"):
        S([None, 3]).merge_with([5, 4])
    with pytest.raises(ValueError, match="incompatible"):
        S([2]).assert_is_compatible_with([3])
    assert S([2, 3]).most_specific_compatible_shape([2, 4]) == S([2, None])
    assert S([2]).concatenate([None]) == S([2, None]) and (S([1]) + S([2])) == S([1, 2])
    assert S(None).with_rank(2) == S([None, None]) and S([1, 2]).with_rank(2) == S([1, 2])
    with pytest.raises(ValueError, match="rank 3"):
        S([1, 2]).with_rank(3)
    with pytest.raises(ValueError, match=">= 0"):
        S([-1])
    with pytest.raises(TypeError, match="int or None"):
        S(["a"])


def test_an_optimizer_step_after_the_last_guard_is_not_copied_for_undoing():
    # a failing guard stops the replay before it, so its state needs no copy on each call
    w = gt.Variable([1.0, 2.0])
    opt = gt.optim.Adam(0.1)
    copies = []
    get_state = opt.get_state
    opt.get_state = lambda: copies.append(1) or get_state()

    @gt.function
    def step(x):
        with gt.GradientTape() as tape:
            loss = gt.sum(w * x)
        scale = 0.5 if loss > 100.0 else 1.0  # a guard before the update
        opt.apply_gradients([(tape.gradient(loss, w) * scale, w)])
        return loss

    for v in (1.0, 2.0, 3.0):
        step(gt.constant([v, v]))
    assert copies == []
    assert step.experimental_get_tracing_count() == 1
