"""Every row of the design contract's "Error contract" table, plus the errors the tape API documents."""

import re

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt
from gputape.devices import backend


def c(v, dtype=np.float64):
    return gt.constant(np.asarray(v, dtype=dtype))


def _recorded(persistent=False):
    x = c([1.0, 2.0])
    t = gt.GradientTape(persistent=persistent)
    with t:
        t.watch(x)
        y = x * x
    return t, x, y


# --------------------------------------------------------------------------------------
# second gradient / jacobian on a non-persistent tape -> RuntimeError


def test_second_gradient_nonpersistent():
    t, x, y = _recorded()
    assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="persistent"):
        t.gradient(y, x)


def test_jacobian_then_gradient_nonpersistent():
    t, x, y = _recorded()
    assert_allclose(t.jacobian(y, x).numpy(), np.diag([2.0, 4.0]))
    with pytest.raises(RuntimeError):
        t.gradient(y, x)
    with pytest.raises(RuntimeError):
        t.jacobian(y, x)


def test_gradient_then_jacobian_nonpersistent():
    t, x, y = _recorded()
    t.gradient(y, x)
    with pytest.raises(RuntimeError):
        t.jacobian(y, x)


def test_second_gradient_persistent_is_fine():
    t, x, y = _recorded(persistent=True)
    for _ in range(2):
        assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0])
        assert_allclose(t.jacobian(y, x).numpy(), np.diag([2.0, 4.0]))


def test_gradient_after_release_raises():
    t, x, y = _recorded(persistent=True)
    t.release()
    with pytest.raises(RuntimeError):
        t.gradient(y, x)


def test_gradient_on_never_entered_tape_raises():
    t = gt.GradientTape()
    x = c(1.0)
    with pytest.raises(RuntimeError):
        t.gradient(x, x)


# --------------------------------------------------------------------------------------
# entering a tape that is already active -> ValueError


def test_enter_active_tape():
    t = gt.GradientTape()
    with t:
        with pytest.raises(ValueError, match=r"(?i)already|recording"):
            t.__enter__()


def test_enter_active_tape_nested_in_other_tape():
    outer = gt.GradientTape()
    inner = gt.GradientTape()
    with outer:
        with inner:
            with pytest.raises(ValueError):
                with outer:
                    pass


# --------------------------------------------------------------------------------------
# gradient(None, ...) -> TypeError


def test_gradient_of_none():
    t, x, _y = _recorded()
    with pytest.raises(TypeError):
        t.gradient(None, x)


def test_gradient_of_none_does_not_consume_tape():
    t, x, y = _recorded()
    with pytest.raises(TypeError):
        t.gradient(None, x)
    assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0])


# --------------------------------------------------------------------------------------
# unknown unconnected_gradients value -> ValueError


@pytest.mark.parametrize("bad", ["zeros", "raise_please", "NONE_", 0, None])
def test_unknown_unconnected_gradients(bad):
    t, x, y = _recorded(persistent=True)
    with pytest.raises(ValueError, match="unconnected_gradients"):
        t.gradient(y, x, unconnected_gradients=bad)
    with pytest.raises(ValueError, match="unconnected_gradients"):
        t.jacobian(y, x, unconnected_gradients=bad)


def test_unknown_unconnected_gradients_batch_jacobian():
    x = c([[1.0, 2.0]])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
    with pytest.raises(ValueError, match="unconnected_gradients"):
        t.batch_jacobian(y, x, unconnected_gradients="bogus")


# --------------------------------------------------------------------------------------
# watch() of something that is not a Tensor/Variable/nested structure -> ValueError


@pytest.mark.parametrize(
    "bad",
    [1, 1.5, np.array([1.0, 2.0]), "x", None, [1.0], {"a": np.ones(2)}],
    ids=["int", "float", "ndarray", "str", "None", "list-of-float", "dict-of-array"],
)
def test_watch_non_tensor(bad):
    with gt.GradientTape() as t:
        with pytest.raises(ValueError, match="watch"):
            t.watch(bad)


def test_watch_mixed_structure_rejected_whole():
    x = c(1.0)
    with gt.GradientTape() as t:
        with pytest.raises(ValueError):
            t.watch([x, 3])
        y = x * x
    # the valid element was not watched either: the call failed as a whole
    assert t.gradient(y, x) is None


def test_unwatch_non_tensor():
    with gt.GradientTape() as t:
        with pytest.raises(ValueError):
            t.unwatch(np.ones(2))


# --------------------------------------------------------------------------------------
# batch_jacobian with different first dimensions, or rank < 2 -> ValueError


def test_batch_jacobian_mismatched_batch():
    x = c(np.ones((3, 2)))
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(x, axis=0, keepdims=True)  # (1, 2)
    with pytest.raises(ValueError, match=r"\(1, 2\).*\(3, 2\)|\(3, 2\).*\(1, 2\)"):
        t.batch_jacobian(y, x)


def test_batch_jacobian_rank1_target():
    x = c(np.ones((3, 2)))
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(x, axis=1)  # (3,)
    with pytest.raises(ValueError):
        t.batch_jacobian(y, x)


def test_batch_jacobian_rank1_source():
    x = c(np.ones(3))
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.reshape(x, (3, 1)) * 2.0
    with pytest.raises(ValueError):
        t.batch_jacobian(y, x)


def test_batch_jacobian_error_does_not_consume_tape():
    x = c(np.ones((3, 2)))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * 2.0
    with pytest.raises(ValueError):
        t.batch_jacobian(gt.sum(y, axis=1), x)
    assert t.batch_jacobian(y, x).shape == (3, 2, 2)


# --------------------------------------------------------------------------------------
# shapes that do not broadcast / matmul inner-dimension mismatch -> ValueError naming op and shapes


@pytest.mark.parametrize(
    ("op", "name"),
    [
        (gt.add, "add"),
        (gt.subtract, "subtract"),
        (gt.multiply, "multiply"),
        (gt.divide, "divide"),
        (gt.maximum, "maximum"),
        (gt.power, "power"),
    ],
)
def test_broadcast_error_names_op_and_shapes(op, name):
    a = gt.constant(np.ones((2, 3), np.float32))
    b = gt.constant(np.ones((4,), np.float32))
    with pytest.raises(ValueError) as ei:
        op(a, b)
    msg = str(ei.value)
    assert f"gt.{name}" in msg
    assert "(2, 3)" in msg and "(4,)" in msg


def test_broadcast_error_from_operator():
    a = gt.constant(np.ones((2, 3), np.float32))
    b = gt.constant(np.ones((3, 2), np.float32))
    with pytest.raises(ValueError) as ei:
        a + b
    assert "gt.add" in str(ei.value)
    assert "(2, 3)" in str(ei.value) and "(3, 2)" in str(ei.value)


def test_broadcast_error_inside_tape_leaves_tape_usable():
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        with pytest.raises(ValueError, match=r"gt\.multiply"):
            x * c([1.0, 2.0, 3.0])
        y = x * x
    assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0])


def test_broadcast_error_with_numpy_operand():
    a = gt.constant(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError) as ei:
        gt.add(a, np.ones((5,), np.float32))
    assert "gt.add" in str(ei.value) and "(2, 3)" in str(ei.value) and "(5,)" in str(ei.value)


def test_matmul_inner_dimension_mismatch():
    a = gt.constant(np.ones((2, 3), np.float32))
    b = gt.constant(np.ones((4, 5), np.float32))
    with pytest.raises(ValueError) as ei:
        a @ b
    msg = str(ei.value)
    assert "matmul" in msg
    assert "(2, 3)" in msg and "(4, 5)" in msg


def test_matmul_function_mismatch():
    with pytest.raises(ValueError, match=r"matmul.*\(3,\).*\(2, 2\)"):
        gt.matmul(gt.constant(np.ones(3)), gt.constant(np.ones((2, 2))))


def test_batched_matmul_batch_mismatch():
    a = gt.constant(np.ones((2, 3, 4)))
    b = gt.constant(np.ones((5, 4, 6)))
    with pytest.raises(ValueError) as ei:
        gt.matmul(a, b)
    msg = str(ei.value)
    assert "matmul" in msg and "(2, 3, 4)" in msg and "(5, 4, 6)" in msg


# --------------------------------------------------------------------------------------
# tensors on two devices in one op -> ValueError naming both devices (needs a GPU)


@pytest.mark.gpu
@pytest.mark.skipif(backend.cuda_unavailable_reason() is not None, reason="needs a CUDA GPU and cupy")
def test_two_devices_in_one_op():
    a = gt.constant(np.ones(3, np.float32), device="cpu")
    b = gt.constant(np.ones(3, np.float32), device="cuda:0")
    with pytest.raises(ValueError) as ei:
        a + b
    msg = str(ei.value)
    assert "cpu" in msg and "cuda:0" in msg


# --------------------------------------------------------------------------------------
# custom_gradient grad_fn returning the wrong number of gradients -> ValueError


def test_custom_gradient_too_many_gradients():
    @gt.custom_gradient
    def f(x):
        def grad(dy):
            return dy, dy

        return x * 2.0, grad

    x = c(1.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x)
    with pytest.raises(ValueError, match="grad_fn"):
        t.gradient(y, x)


def test_custom_gradient_too_few_gradients():
    @gt.custom_gradient
    def f(a, b):
        def grad(dy):
            return (dy,)

        return a * b, grad

    a, b = c(1.0), c(2.0)
    with gt.GradientTape() as t:
        t.watch([a, b])
        y = f(a, b)
    with pytest.raises(ValueError):
        t.gradient(y, [a, b])


def test_custom_gradient_wrong_number_of_variable_gradients():
    v = gt.Variable(2.0)
    w = gt.Variable(3.0)

    @gt.custom_gradient
    def f(x):
        def grad(dy, variables=None):
            return dy, [dy]  # two variables were read

        return x * v * w, grad

    x = c(1.0)
    with gt.GradientTape() as t:
        t.watch(x)
        y = f(x)
    with pytest.raises(ValueError):
        t.gradient(y, [x, v, w])


def test_custom_gradient_variables_without_variables_kwarg():
    v = gt.Variable(2.0, name="v")

    @gt.custom_gradient
    def f(x):
        def grad(dy):
            return dy

        return x * v, grad

    with gt.GradientTape() as t:
        x = c(1.0)
        t.watch(x)
        with pytest.raises(TypeError, match="variables"):
            f(x)


# --------------------------------------------------------------------------------------
# integer/bool source or target -> gradient None (zeros with 'zero'), warned once


def test_int_source_warns_once(fresh_warnings):
    x = c(1.0)
    k = gt.constant(np.array([1, 2], np.int32))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * 2.0
    with pytest.warns(gt.GputapeWarning, match="int32"):
        assert t.gradient(y, k) is None
    # once per process per dtype: a second call is silent (warnings are errors here)
    assert t.gradient(y, k) is None
    gz = t.gradient(y, k, unconnected_gradients="zero")
    assert gz.shape == (2,)
    assert_allclose(gz.numpy(), [0, 0])


def test_bool_target_warns(fresh_warnings):
    x = c([1.0, -1.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x > 0.0
    assert y.dtype == np.bool_
    with pytest.warns(gt.GputapeWarning, match="bool"):
        assert t.gradient(y, x) is None


def test_int_target_in_nested_targets_ignored(fresh_warnings):
    x = c([1.0, 2.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
        k = gt.constant(np.array([1, 2], np.int64))
    with pytest.warns(gt.GputapeWarning):
        g = t.gradient([y, k], x)
    assert_allclose(g.numpy(), [2.0, 4.0])


# --------------------------------------------------------------------------------------
# output_gradients and sources


def test_output_gradients_wrong_shape():
    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
    with pytest.raises(ValueError, match=re.escape("(2,)")):
        t.gradient(y, x, output_gradients=c([1.0, 2.0]))


def test_output_gradients_wrong_count():
    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
        z = x + 1.0
    with pytest.raises(ValueError):
        t.gradient([y, z], x, output_gradients=[c([1.0, 1.0, 1.0])])


def test_bad_output_gradients_do_not_consume_tape():
    x = c([1.0, 2.0, 3.0])
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
    with pytest.raises(ValueError):
        t.gradient(y, x, output_gradients=c([1.0, 2.0]))
    assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0, 6.0])


def test_jacobian_target_must_be_tensor():
    t, x, _y = _recorded()
    with pytest.raises(TypeError):
        t.jacobian(None, x)


def test_non_tensor_source_rejected():
    t, x, y = _recorded(persistent=True)
    with pytest.raises((ValueError, TypeError)):
        t.gradient(y, [x, np.ones(2)])


# --------------------------------------------------------------------------------------
# Variables: shape mismatches


@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
def test_variable_assign_shape_mismatch(method):
    v = gt.Variable(np.zeros((2, 3)), name="w")
    with pytest.raises(ValueError, match=r"\(2, 3\)") as ei:
        getattr(v, method)(np.ones((3, 2)))
    assert "(3, 2)" in str(ei.value)
    assert_allclose(v.numpy(), np.zeros((2, 3)))  # unchanged


def test_tensor_is_immutable():
    t = c([1.0, 2.0])
    with pytest.raises(TypeError):
        t[0] = 3.0


def test_matmul_with_a_number_says_to_multiply_and_shows_the_number():
    a = gt.constant(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"y = 2\.0 \(a Python float\); matmul takes no scalars.*use \*") as e:
        a @ 2.0
    assert "gt.matmul" in str(e.value)
    with pytest.raises(ValueError, match=r"y of shape \(\) and dtype float32; matmul takes no scalars"):
        gt.matmul(a, gt.constant(2.0))
    with pytest.raises(ValueError, match=r"inner dimensions must agree"):
        a @ a  # shapes, not scalars: the other hint
