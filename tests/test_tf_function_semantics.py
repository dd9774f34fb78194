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


def _scalar_steps(dtype: str):
    """(name, update, closed form of v after n calls with x = 2) for v = Variable(1.0)."""
    return [
        ("assign", lambda v, x: v.assign(v * x), lambda n: 2.0**n),
        ("assign_add", lambda v, x: v.assign_add(x), lambda n: 1.0 + 2.0 * n),
        ("assign_sub", lambda v, x: v.assign_sub(x * 0.25), lambda n: 1.0 - 0.5 * n),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(3))
def test_scalar_variable_update_every_call(dtype, which):
    # the guide's counter: a scalar Variable updated by a compiled step (used to crash on call 2)
    name, update, expected = _scalar_steps(dtype)[which]
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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(3))
def test_scalar_variable_update_with_a_tape_inside(dtype, which):
    # a tape inside the step holds the variable's value while it is updated (copy-on-write)
    name, update, expected = _scalar_steps(dtype)[which]
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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(3))
def test_scalar_variable_update_called_under_an_outer_tape(dtype, which):
    # called while a tape records, the step runs eagerly (the tape sees its ops)
    name, update, expected = _scalar_steps(dtype)[which]
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
