"""numpy's argument rules where gputape once differed: a single array given to the stacking
functions is iterated along its first axis, and lists of numpy scalars keep numpy's dtype.

The cases marked "autograd" are ported from HIPS autograd's own test suite (tests/test_systematic.py:
``combo_check(np.vstack, [0])([R(2), R(3)])`` and its siblings pass one array, which numpy iterates;
``np.append`` of a list of float64 scalars keeps float64).
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf
from gputape.testing import check_grads

rng = np.random.default_rng(27)
STACKERS = ["vstack", "hstack", "row_stack", "column_stack", "dstack", "stack", "concatenate"]


def _np(name):
    return np.vstack if name == "row_stack" else getattr(np, name)  # (np.row_stack warns: deprecated there)


@pytest.mark.parametrize("name", STACKERS)
@pytest.mark.parametrize("shape", [(2,), (3,), (2, 3), (2, 3, 4), (1, 4)])
def test_a_single_array_is_iterated_along_its_first_axis_autograd(name, shape):
    a = rng.standard_normal(shape)
    try:
        want = _np(name)(a)
    except ValueError:  # concatenate of a 1-d array: numpy's rows are 0-d, which do not join
        with pytest.raises(ValueError, match=rf"gt\.{name}"):
            getattr(gt, name)(gt.constant(a))
        return
    for arg in (gt.constant(a), a):  # a tensor and a raw array
        got = getattr(gt, name)(arg)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)
    # the rows are the tensor's own (x[i]): the gradient flows back through them, to second order
    check_grads(lambda x: getattr(gt, name)(x) * getattr(gt, name)(x), a, order=2)


@pytest.mark.parametrize("name", STACKERS)
def test_a_single_array_gives_the_gradient_numpy_would(name):
    a = rng.standard_normal((3, 2))
    w = rng.standard_normal(_np(name)(a).shape)
    x = gt.constant(a)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(getattr(gt, name)(x) * w)
    # every element of a appears once in the result: its gradient is the weight it lands on
    want = np.zeros_like(a)
    idx = _np(name)(np.arange(a.size).reshape(a.shape)).ravel()
    np.add.at(want.reshape(-1), idx, w.ravel())
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), want)


@pytest.mark.parametrize("name", STACKERS)
def test_a_0d_array_and_a_generator_are_refused_by_name(name):
    said = "vstack" if name == "row_stack" else name  # (row_stack is vstack, numpy's older name)
    with pytest.raises(TypeError, match=rf"gt\.{said}: argument \w+ .*0-d array.*pass a list"):
        getattr(gt, name)(gt.constant(1.0))
    with pytest.raises(TypeError, match=rf"gt\.{said}: argument \w+ .*not a list or tuple"):
        getattr(gt, name)(x for x in [gt.ones(2)])


def test_numpy_functions_on_a_single_tensor_run_gputapes_op():
    a = rng.standard_normal((2, 3))
    x = gt.constant(a)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = np.vstack(x)
        s = gt.sum(y * y)
    assert isinstance(y, gt.Tensor) and y.shape == (2, 3)
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), 2 * a)


# value -> (numpy's dtype, TensorFlow's dtype, gputape's dtype). TensorFlow takes the dtype of the
# first element (tensorflow/python/lib/core/py_seq_tensor.cc: InferShapeAndType samples element 0)
# and Python floats are float32 there; numpy promotes every element, Python floats as float64.
# gputape: numpy scalars and arrays promote by numpy's rules, Python numbers beside them weak.
LISTS = [
    ([np.float64(1.1), np.float64(2.2)], "float64", "float64", "float64"),
    ([np.float64(1.1), 2.2], "float64", "float64", "float64"),
    ([2.2, np.float64(1.1)], "float64", "float32", "float64"),
    ([np.float32(1.0), 2.2], "float64", "float32", "float32"),
    ([np.float32(1.0), np.float64(2.0)], "float64", "float32", "float64"),
    ([[np.float64(1.0)], [2.0]], "float64", "float64", "float64"),
    ([np.int64(1), 2], "int64", "int64", "int64"),
    ([np.int64(1), 2.5], "float64", None, "float64"),  # TensorFlow: an error (a float in an int list)
    ([np.float16(1.0), 3], "float64", "float16", "float16"),
    ([np.complex64(1j), 2.0], "complex128", "complex64", "complex64"),
    ([np.array([1.0, 2.0]), [3.0, 4.0]], "float64", "float64", "float64"),
    ([1.0, 2.0], "float64", "float32", "float32"),  # Python numbers alone: TensorFlow's rule
    ([1, 2], "int64", "int32", "int32"),
]


@pytest.mark.parametrize(("value", "np_dt", "tf_dt", "gt_dt"), LISTS, ids=[str(v[0]) for v in LISTS])
def test_lists_of_numpy_scalars_keep_numpys_dtype(value, np_dt, tf_dt, gt_dt):
    assert np.array(value).dtype == np_dt  # the table's numpy column is numpy's own answer
    for make in (gt.constant, tf.constant, tf.convert_to_tensor, gt.as_tensor):
        t = make(value)
        assert t.dtype == np.dtype(gt_dt), (make, value, t.dtype)
        np.testing.assert_array_equal(t.numpy(), np.array(value).astype(gt_dt))


def test_append_of_float64_scalars_keeps_float64_autograd():
    x = gt.constant(np.array([1.0, 2.0]))
    y = gt.append(x, [np.float64(1.1), np.float64(2.2)])
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0, 1.1, 2.2])  # no float32 round trip
    assert gt.constant([np.float64(0.1)]).numpy()[0] == 0.1
