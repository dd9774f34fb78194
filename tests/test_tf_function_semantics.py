"""tf.function semantics, as TensorFlow's tf.function guide writes them (issue 13 item 6).

The programs are written against ``gputape.tf`` exactly as they would be against
TensorFlow; expected values come from TensorFlow's documented behaviour and
closed forms (each call's arithmetic done by hand), never from gputape.
"""

from __future__ import annotations

import functools
import logging
import sys

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf

DTYPES = ["float32", "float64"]


# -- scalar Variables updated by a compiled step --------------------------------------------


# (name, update, closed form of v after n calls with x = 2) for v = Variable(1.0)
SCALAR_UPDATES = [
    ("assign", lambda v, x: v.assign(v * x), lambda n: 2.0**n),
    ("assign_add", lambda v, x: v.assign_add(x), lambda n: 1.0 + 2.0 * n),
    ("assign_sub", lambda v, x: v.assign_sub(x * 0.25), lambda n: 1.0 - 0.5 * n),
]
scalar_cases = pytest.mark.parametrize(
    ("dtype", "case"), [(d, c) for d in DTYPES for c in SCALAR_UPDATES], ids=lambda p: p if isinstance(p, str) else p[0]
)


@scalar_cases
def test_scalar_variable_update_every_call(dtype, case):
    # the guide's counter: a scalar Variable updated by a compiled step (used to crash on call 2)
    name, update, expected = case
    v = tf.Variable(1.0, dtype=dtype)

    @tf.function
    def step(x):
        update(v, x)
        return v.read_value()

    for n in range(1, 5):
        out = step(tf.constant(2.0, dtype=dtype))
        assert out.numpy() == pytest.approx(expected(n)), (name, n)
        assert v.numpy() == pytest.approx(expected(n)) and v.dtype == np.dtype(dtype)
        assert np.ndim(v.numpy()) == 0
    assert step.experimental_get_tracing_count() == 1


@scalar_cases
def test_scalar_variable_update_with_a_tape_inside(dtype, case):
    # a tape inside the step holds the variable's value while it is updated (copy-on-write)
    name, update, expected = case
    v = tf.Variable(1.0, dtype=dtype)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = v * v * x  # dy/dv = 2 v x
        g = tape.gradient(y, v)
        update(v, x)
        return y, g

    for n in range(1, 5):
        before = expected(n - 1)
        y, g = step(tf.constant(2.0, dtype=dtype))
        assert y.numpy() == pytest.approx(before * before * 2.0), (name, n)
        assert g.numpy() == pytest.approx(4.0 * before), (name, n)
        assert v.numpy() == pytest.approx(expected(n))
    assert step.experimental_get_tracing_count() == 1


@scalar_cases
def test_scalar_variable_update_called_under_an_outer_tape(dtype, case):
    # called while a tape records, the step runs eagerly (the tape sees its ops)
    name, update, expected = case
    v = tf.Variable(1.0, dtype=dtype)

    @tf.function
    def step(x):
        y = v * x
        update(v, x)
        return y

    for n in range(1, 4):
        with tf.GradientTape() as tape:
            y = step(tf.constant(2.0, dtype=dtype))
            y2 = step(tf.constant(2.0, dtype=dtype))
        assert y.numpy() == pytest.approx(2.0 * expected(2 * n - 2)), name
        assert y2.numpy() == pytest.approx(2.0 * expected(2 * n - 1)), name
        assert tape.gradient(y, v).numpy() == pytest.approx(2.0)
        assert v.numpy() == pytest.approx(expected(2 * n))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_scalar_variable_trained_by_an_optimizer(dtype, opt_name):
    # loss = v^2 x with x = 2: grad 4 v. SGD(0.1): v_n = 0.6^n; Adam(0.01): Keras' recurrence in numpy
    v = tf.Variable(1.0, dtype=dtype)
    opt = tf.keras.optimizers.SGD(0.1) if opt_name == "sgd" else tf.keras.optimizers.Adam(0.01)
    ref, m, s2 = [1.0], 0.0, 0.0
    for t in range(1, 5):
        g = 4.0 * ref[-1]
        if opt_name == "sgd":
            ref.append(ref[-1] - 0.1 * g)
        else:
            m, s2 = 0.9 * m + 0.1 * g, 0.999 * s2 + 0.001 * g * g
            lr_t = 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
            ref.append(ref[-1] - lr_t * m / (np.sqrt(s2) + 1e-7))
    expected = ref.__getitem__

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = v * v * x
        opt.apply_gradients([(tape.gradient(loss, v), v)])
        return loss

    for n in range(1, 5):
        loss = step(tf.constant(2.0, dtype=dtype))
        assert loss.numpy() == pytest.approx(2.0 * expected(n - 1) ** 2, rel=1e-5)
        assert v.numpy() == pytest.approx(expected(n), rel=1e-5) and np.ndim(v.numpy()) == 0
    assert step.experimental_get_tracing_count() == 1


def test_eager_scalar_update_while_a_tape_holds_the_value():
    v = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = v * 3.0
        v.assign_sub(0.5)
        v.assign_add(0.25)
        v.assign_add(tf.constant(1.0))
    assert v.numpy() == pytest.approx(1.75) and v.dtype == np.float32
    assert isinstance(v.numpy(), np.ndarray) or np.ndim(v.numpy()) == 0
    assert tape.gradient(y, v).numpy() == pytest.approx(3.0)


# -- tf.print inside a compiled function ----------------------------------------------------


def test_guide_print_traces_once_tf_print_every_call(capsys):
    # the tf.function guide: Python's print runs when tracing, tf.print at every execution
    @tf.function
    def f(x):
        print("Traced with", x)
        tf.print("Executed with", x)

    f(1)
    f(1)
    f(2)
    captured = capsys.readouterr()
    assert captured.out == "Traced with 1\nTraced with 2\n"
    assert captured.err == "Executed with 1\nExecuted with 1\nExecuted with 2\n"  # tf.print's default: stderr


def test_tf_print_shows_each_calls_tensor_values(capsys):
    v = tf.Variable(0)

    @tf.function
    def step(x):
        v.assign_add(1)
        y = x * 2.0
        tf.print("step", v, "y:", y, {"sum": tf.reduce_sum(y)}, output_stream=sys.stdout)
        return y

    for k in range(1, 4):
        step(tf.constant([float(k), 0.5]))
    assert step.experimental_get_tracing_count() == 1
    assert capsys.readouterr().out == (
        "step 1 y: [2 1] {'sum': 3}\nstep 2 y: [4 1] {'sum': 5}\nstep 3 y: [6 1] {'sum': 7}\n"
    )


def test_tf_print_documented_layouts(capsys):
    # the outputs tf.print's documentation shows
    tensor = tf.range(10)
    tf.print(tensor, output_stream=sys.stderr)
    tf.print("tensors:", tensor, {2: tensor * 2}, output_stream=sys.stdout)
    tensor_a = tf.range(2)
    tf.print(tensor_a, tensor_a * 2, output_stream=sys.stderr, sep=",")
    out = capsys.readouterr()
    assert out.err == "[0 1 2 ... 7 8 9]\n[0 1],[0 2]\n"
    assert out.out == "tensors: [0 1 2 ... 7 8 9] {2: [0 2 4 ... 14 16 18]}\n"


def test_tf_print_formats(capsys):
    p = functools.partial(tf.print, output_stream=sys.stdout)
    p(tf.constant(1.0), tf.constant(1 / 3), tf.constant([True, False]), end="|")
    p(tf.reshape(tf.range(4), (2, 2)), end="|")
    p(tf.range(10), summarize=-1, end="|")
    p(tf.range(10), summarize=1, end="|")
    p("a", 1.5, [1, 2], (3,), None, sep="-")
    assert capsys.readouterr().out == (
        "1 0.333333 [1 0]|[[0 1]\n [2 3]]|[0 1 2 3 4 5 6 7 8 9]|[0 ... 9]|a-1.5-[1, 2]-(3,)-None\n"
    )


def test_tf_print_streams_in_a_compiled_function(capsys, tmp_path, caplog):
    path = tmp_path / "log.txt"

    @tf.function
    def f(x):
        tf.print("out", x, output_stream=sys.stdout, end="!\n")
        tf.print("err", x, output_stream=sys.stderr, sep=":")
        tf.print("file", x, output_stream=f"file://{path}")
        tf.print("log", x, output_stream=logging.warning)
        return x + 1

    with caplog.at_level(logging.WARNING):
        for k in range(3):
            f(tf.constant(k))
    out = capsys.readouterr()
    assert out.out == "out 0!\nout 1!\nout 2!\n"
    assert out.err == "err:0\nerr:1\nerr:2\n"
    assert path.read_text() == "file 0\nfile 1\nfile 2\n"
    assert [r.getMessage() for r in caplog.records] == ["log 0", "log 1", "log 2"]
    assert f.experimental_get_tracing_count() == 1


def test_tf_print_in_emulated_graph_replay(capsys):
    # the GPU replay's host steps (emulated on the CPU): the print still runs every call, in order
    w = tf.Variable([1.0, 2.0])

    def step(x):
        y = x * w
        tf.print("y", y, output_stream=sys.stdout)
        w.assign_add(y)
        return tf.reduce_sum(w)

    f = gt.function(step, graphs="emulate")
    for _ in range(3):
        f(tf.constant([1.0, 1.0]))
    # w: [1 2] -> y [1 2], w [2 4] -> y [2 4], w [4 8] -> y [4 8]
    assert capsys.readouterr().out == "y [1 2]\ny [2 4]\ny [4 8]\n"


def test_tf_print_bad_arguments():
    with pytest.raises(ValueError, match="output_stream"):
        tf.print("x", output_stream=object())
    with pytest.raises(ValueError, match="summarize"):
        tf.print("x", summarize=-2)


# -- input_signature and reduce_retracing ---------------------------------------------------


def _collatz(a):
    return np.where(a % 2 == 0, a // 2, 3 * a + 1)


def test_guide_next_collatz_input_signature():
    @tf.function(input_signature=(tf.TensorSpec(shape=[None], dtype=tf.int32),))
    def next_collatz(x):
        return tf.where(x % 2 == 0, x // 2, 3 * x + 1)

    for values in ([1, 2], [1, 2, 3, 4, 5], [7], [], [6, 9, 10]):
        out = next_collatz(tf.constant(values, dtype=tf.int32))
        assert out.numpy().tolist() == _collatz(np.array(values, np.int32)).tolist()
        assert out.dtype == np.int32
    assert next_collatz.experimental_get_tracing_count() == 1  # one trace for every length
    # "You specified a 1-D tensor in the input signature, so this should fail."
    with pytest.raises(TypeError):
        next_collatz(tf.constant([[1, 2], [3, 4]]))
    # "You specified an int32 dtype in the input signature, so this should fail."
    with pytest.raises(TypeError):
        next_collatz(tf.constant([1.0, 2.0]))
    assert next_collatz.experimental_get_tracing_count() == 1


def test_signature_mismatch_messages_name_argument_and_specs():
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([], tf.int64)])
    def f(x, k):
        return x * tf.cast(k, tf.float32)

    cases = [
        ((np.zeros((2, 4), np.float32), np.int64(1)), "'x'", "dimension 1 is 4", "TensorSpec(shape=(2, 4)"),
        ((np.zeros((3,), np.float32), np.int64(1)), "'x'", "rank 1", "TensorSpec(shape=(3,)"),
        ((np.zeros((2, 3), np.float64), np.int64(1)), "'x'", "dtype float64", "dtype=tf.float64"),
        ((np.zeros((2, 3), np.float32), np.int32(1)), "'k'", "dtype int32", "dtype=tf.int32"),
        ((np.zeros((2, 3), np.float32), 1.5), "'k'", "float", "float 1.5"),
    ]
    for args, name, why, got in cases:
        with pytest.raises(TypeError) as e:
            f(*args)
        assert isinstance(e.value, ValueError)  # TensorFlow before 2.13 raised ValueError
        msg = str(e.value)
        assert name in msg and why in msg and got in msg, msg
        assert "TensorSpec(shape=(None, 3), dtype=tf.float32, name=None)" in msg or "shape=()" in msg, msg
    with pytest.raises(TypeError, match="positional arguments"):
        f(np.zeros((1, 3), np.float32), 1, 2)
    with pytest.raises(TypeError, match="missing argument 'k'"):
        f(np.zeros((1, 3), np.float32))
    assert f.experimental_get_tracing_count() == 0  # nothing was traced for bad calls


def test_signature_converts_python_values_and_accepts_keywords():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32)])
    def scaled(x, k):
        return x * tf.cast(k, tf.float32)

    assert scaled([1.0, 2.0], 3).numpy().tolist() == [3.0, 6.0]
    assert scaled(x=np.array([1.0], np.float32), k=2).numpy().tolist() == [2.0]
    assert scaled([1, 2, 3], k=tf.constant(1)).numpy().tolist() == [1.0, 2.0, 3.0]  # Python ints to float32
    assert scaled.experimental_get_tracing_count() == 1
    with pytest.raises(TypeError, match="does not fit in int32"):
        scaled([1.0], 2**40)


def test_signature_none_dims_replay_matches_eager_for_every_batch_size():
    # mean, reshape and the backward pass's reductions all depend on the batch size:
    # a replay specialised to the first size would give wrong numbers for the others
    rng = np.random.default_rng(0)
    w_init = rng.standard_normal((3, 2)).astype(np.float32)
    results = {}
    for compiled in (False, True):
        w = tf.Variable(w_init)
        opt = tf.keras.optimizers.SGD(0.1)

        def train_step(x, y, w=w, opt=opt):
            with tf.GradientTape() as tape:
                pred = tf.reshape(x @ w, [-1])
                loss = tf.reduce_mean(tf.square(pred - y))
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
            return loss

        sig = [tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None], tf.float32)]
        step = tf.function(train_step, input_signature=sig) if compiled else train_step
        data = np.random.default_rng(1)
        out = []
        for n in (4, 7, 4, 1, 7, 9):
            x = data.standard_normal((n, 3)).astype(np.float32)
            y = data.standard_normal(2 * n).astype(np.float32)
            out.append((step(x, y).numpy(), w.numpy().copy()))
        results[compiled] = out
        if compiled:
            assert step.experimental_get_tracing_count() == 1
            assert step.recording_count == 4  # sizes 4, 7, 1, 9 each recorded once (documented)
    for (l0, w0), (l1, w1) in zip(results[False], results[True]):
        assert l0.tobytes() == l1.tobytes() and w0.tobytes() == w1.tobytes()


def test_signature_nested_specs_and_variables():
    v = tf.Variable([1.0, 2.0])

    @tf.function(input_signature=[(tf.TensorSpec([2]), tf.TensorSpec([None])), tf.TensorSpec([2])])
    def f(pair, w):
        a, b = pair
        return a * w + tf.reduce_sum(b)

    assert f((tf.constant([1.0, 1.0]), tf.constant([1.0, 2.0, 3.0])), v).numpy().tolist() == [7.0, 8.0]
    assert f(([2.0, 0.0], [1.0]), v).numpy().tolist() == [3.0, 1.0]
    with pytest.raises(TypeError, match="structure"):
        f(tf.constant([1.0, 1.0]), v)
    with pytest.raises(TypeError, match="'w'"):
        f(([1.0, 1.0], [1.0]), tf.Variable([1.0, 2.0, 3.0]))


def test_signature_on_a_method():
    class Scaler(tf.Module):
        def __init__(self):
            super().__init__()
            self.s = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return x * self.s

    m = Scaler()
    assert m(tf.constant([1.0, 2.0])).numpy().tolist() == [2.0, 4.0]
    assert m(tf.constant([3.0])).numpy().tolist() == [6.0]
    with pytest.raises(TypeError, match="rank 2"):
        m(tf.zeros((1, 1)))


def test_bad_input_signatures():
    with pytest.raises(TypeError, match="list or tuple"):
        tf.function(lambda x: x, input_signature=tf.TensorSpec([None]))
    with pytest.raises(TypeError, match="TensorSpecs"):
        tf.function(lambda x: x, input_signature=[3])
    with pytest.raises(TypeError, match="non-negative"):
        tf.TensorSpec([-1])


def test_tensor_spec():
    s = tf.TensorSpec(shape=[None, 2], dtype=tf.int64, name="ids")
    assert repr(s) == "TensorSpec(shape=(None, 2), dtype=tf.int64, name='ids')"
    assert s == tf.TensorSpec((None, 2), "int64", "ids") and s != tf.TensorSpec((None, 2), "int64")
    assert s.is_compatible_with(np.zeros((5, 2), np.int64)) and not s.is_compatible_with(np.zeros((5, 2)))
    assert tf.TensorSpec(None).is_compatible_with(tf.zeros((1, 2, 3)))
    assert tf.TensorSpec.from_tensor(tf.zeros((4,))) == tf.TensorSpec([4], tf.float32)


def test_guide_reduce_retracing():
    traced = []

    @tf.function(reduce_retracing=True)
    def g(x):
        traced.append(tuple(x.shape))
        return x

    assert g(tf.constant([1, 2, 3])).numpy().tolist() == [1, 2, 3]  # traces once
    assert g.experimental_get_tracing_count() == 1
    assert g(tf.constant([1, 2, 3, 4, 5])).numpy().tolist() == [1, 2, 3, 4, 5]  # again, generalised
    assert g.experimental_get_tracing_count() == 2
    for n in (7, 9, 3, 5):  # "No more tracing!"
        assert g(tf.range(n)).numpy().tolist() == list(range(n))
    assert g.experimental_get_tracing_count() == 2
    assert g(tf.zeros((2, 2))).shape == (2, 2)  # another rank: a new trace, as in TensorFlow
    assert g.experimental_get_tracing_count() == 3


def test_without_reduce_retracing_every_shape_counts():
    @tf.function
    def g(x):
        return x + 1

    for n in (1, 2, 3):
        g(tf.range(n))
    assert g.experimental_get_tracing_count() == 3 == g.recording_count


def test_tf_print_of_a_numpy_array_prints_the_same_when_replayed(capsys):
    host = np.array([1, 2])

    @tf.function
    def f(x):
        tf.print(host, x, output_stream=sys.stdout)
        return x

    for k in range(3):
        f(tf.constant(k))
    assert capsys.readouterr().out == "array([1, 2]) 0\narray([1, 2]) 1\narray([1, 2]) 2\n"
