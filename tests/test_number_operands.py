"""A Python number beside a tensor: the generated entry points hand the ufunc the number's
same-dtype 0-d array (gputape.core.dispatch, gputape.core.expr.literal) instead of the number, which numpy
converts on every call. These tests hold it to numpy's own result, bit for bit and dtype for
dtype, on the values where a conversion could differ: signed zeros, NaN, infinities, numbers
past float32's range, large integers, subnormals, and integer and bool tensors (where the number
must be passed as itself). Expected values are numpy's ufunc on the raw array and the number.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from bitwise_helpers import same_bits

import gputape as gt
from gputape.core import expr
from gputape.core.primitive import REGISTRY

NUMBERS = [
    1.01,
    0.5,
    0.1,
    -2.5,
    0.0,
    -0.0,
    float("nan"),
    float("inf"),
    -float("inf"),
    1e300,
    -1e-310,
    1e-45,
    3,
    -7,
    0,
    2**24,
    2**24 + 1,
    2**40,
    -(2**63),
    2**70,
]

# the generated two-operand entry points whose forward is a ufunc: those that take the typed path
TYPED = sorted(
    n
    for n, p in REGISTRY.items()
    if p.cpu is not None
    and "LITERALS" in getattr(getattr(p.public, "__code__", None), "co_names", ())
    and n != "matmul"  # (numpy's rule: matmul takes no numbers; test_errors checks its message)
)


def _arrays():
    base = [1.5, -0.0, 0.0, 3.0, -2.25, 1e-40, 7.0, np.nan, np.inf, -np.inf]
    yield np.array(base, np.float32)
    yield np.array(base, np.float64)
    yield np.array([3, -4, 0, 7], np.int64)
    yield np.array([1, 2, 3], np.int32)
    yield np.array([True, False])


def test_the_arithmetic_operators_take_the_typed_path():
    assert {"add", "subtract", "multiply", "divide"} <= set(TYPED)


@pytest.mark.parametrize("name", TYPED)
def test_a_number_operand_gives_numpys_bits_and_dtype(name):
    prim = REGISTRY[name]
    op = prim.public
    with np.errstate(all="ignore"):
        for a in _arrays():
            t = gt.constant(a)
            for v in NUMBERS:
                for left in (False, True):
                    args = (v, a) if left else (a, v)
                    try:
                        want = prim.cpu(*args)
                    except (TypeError, OverflowError, ValueError) as e:  # numpy refuses (e.g. 2**70 with int64)
                        with pytest.raises(type(e), match=f"gt.{name}: cannot apply"):
                            op(v, t) if left else op(t, v)
                        continue
                    got = (op(v, t) if left else op(t, v)).numpy()
                    same_bits(got, np.asarray(want), (name, a.dtype, v, left))


def test_a_number_out_of_the_dtypes_range_says_so():
    with pytest.raises(OverflowError, match=r"gt.add: .*y = 1180591620717411303424 \(a Python int\).*does not fit"):
        gt.constant(np.array([1, 2], np.int64)) + 2**70


@pytest.mark.parametrize(
    "run, op",
    [
        (lambda t: 300 + t, "add"),
        (lambda t: 300 - t, "subtract"),
        (lambda t: 300 * t, "multiply"),
        (lambda t: [1, 2, 3] + t, "add"),
    ],
)
def test_a_reflected_operator_names_the_arguments_as_the_op_does(run, op):
    # `300 + t` runs gt.add(300, t): the message names x and y, as gt.add's would, never the
    # reflected operator's own (other, self) parameters or "input 1"
    t = gt.constant(np.array([1, 2], np.uint8))
    with pytest.raises((OverflowError, ValueError)) as info:
        run(t)
    msg = str(info.value)
    assert msg.startswith(f"gt.{op}: cannot apply to x = ") and ", y of shape (2,) and dtype uint8" in msg, msg
    assert "other" not in msg and "input 1" not in msg, msg


def test_recorded_nodes_and_hooks_see_the_number_itself():
    x = gt.constant(np.array([1.0, 2.0], np.float32))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = x * 1.25
    (node,) = tape._nodes
    r = node.saved[1]  # the number, as the op was called (its ufunc got the typed 0-d array)
    assert type(r) is float and r == 1.25
    g = tape.gradient(y, x)
    same_bits(g.numpy(), np.full(2, np.float32(1.25)))


def test_the_table_is_bounded_and_keeps_zeros_signs(monkeypatch):
    monkeypatch.setattr(expr, "NUMBERS", {})
    monkeypatch.setattr(expr, "NUMBERS_MAX", 3)
    x = gt.constant(np.array([1.0, -1.0], np.float32))
    same_bits((x * -0.0).numpy(), np.array([1.0, -1.0], np.float32) * -0.0)
    same_bits((x * 0.0).numpy(), np.array([1.0, -1.0], np.float32) * 0.0)
    for v in range(1, 10):
        same_bits((x + float(v)).numpy(), np.array([1.0, -1.0], np.float32) + float(v))
    assert len(expr.NUMBERS) <= 3


def test_literal_tables_are_read_only_and_typed():
    t = expr.literal(0.1)
    a = t[np.dtype(np.float32)]
    assert a.dtype == np.float32 and a.shape == () and a == np.float32(0.1)
    with pytest.raises(ValueError):
        a[()] = 2.0
    assert t[np.dtype(np.complex64)] == 0.1 and type(t[np.dtype(np.int64)]) is float
    assert expr.literal(-0.0) is not expr.literal(0.0) and expr.literal(1) is not expr.literal(1.0)


def test_the_shared_literal_tables_are_bounded(monkeypatch):
    # every distinct number gt.function traces as a constant gets a table: past the cap a caller
    # gets a table of its own (as correct, just not shared) and the shared ones stay as they were
    kept = expr.literal(0.375)
    monkeypatch.setattr(expr, "LITERALS_MAX", len(expr._literals))
    n = len(expr._literals)
    fresh = expr.literal(123.0625)
    assert len(expr._literals) == n and expr.literal(123.0625) is not fresh
    assert fresh[np.dtype(np.float32)] == np.float32(123.0625) and fresh[np.dtype(np.float32)].dtype == np.float32
    assert expr.literal(0.375) is kept

    x = gt.constant(np.array([1.0, 2.0], np.float32))

    @gt.function
    def f(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = x * 7.8125
        return tape.gradient(y, x)

    for _ in range(2):
        same_bits(f(x).numpy(), np.full(2, 7.8125, np.float32))
    assert len(expr._literals) == n


@pytest.mark.parametrize("name", TYPED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gt_function_replays_number_operands_as_the_eager_op_computes_them(name, dtype):
    """gt.function's trace records the typed number the eager op handed its ufunc, and its CPU
    replay writes a number residual into the inlined VJP as a typed literal: forward and gradient
    are the eager tape's bits, replay after replay."""
    op = REGISTRY[name].public
    x0 = np.array([1.5, -0.0, 0.25, 3.0, -2.0, 1e-40], dtype)

    def step(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = op(op(x, 1.01), 0.5) + op(2.5, x)
            s = gt.sum(y * y)
        return y, tape.gradient(s, x)

    with np.errstate(all="ignore"):
        want = step(gt.constant(x0))
        f = gt.function(step)
        for _ in range(3):
            got = f(gt.constant(x0))
            for w, g in zip(want, got):
                same_bits(g.numpy(), w.numpy(), name)
    assert f.experimental_get_tracing_count() == 1


def test_gt_function_replay_code_holds_typed_numbers():
    x = gt.constant(np.linspace(-1, 1, 8).astype(np.float32))

    def step(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            s = gt.sum(gt.tanh(x * 1.01))
        return tape.gradient(s, x)

    f = gt.function(step)
    f(x)
    f(x)
    concrete = f._cache[f._keys[-1]]
    ns = concrete.replay.__globals__
    # the constants the replay's arithmetic reads (not a call's arguments such as a VJP's nb)
    operands = re.findall(r"[-+*/] (c[0-9]+)\b|\b(c[0-9]+) [-+*/]", concrete.source)
    forward = re.search(r"= f[0-9]+\(s0, (c[0-9]+)\)", concrete.source).group(1)  # x * 1.01
    # the forward's 1.01 is a float32 0-d array; the VJPs' 1.01 and tanh's 1 are typed lookups
    assert ns[forward].dtype == np.float32 and ns[forward].shape == ()
    assert operands == [] and "(1 - " not in concrete.source, concrete.source


def test_number_subclasses_follow_numpys_rule():
    """An exact Python number is weak beside an array (NEP 50); a subclass of one (an IntEnum, a float
    subclass) is not, in numpy: gputape gives numpy's dtype and values for both."""
    import enum

    class Scale(float):
        pass

    class Level(enum.IntEnum):
        TWO = 2

    x0 = np.array([1.5, -2.0, 0.25], np.float32)
    x = gt.constant(x0)
    for v in (Scale(1.25), Level.TWO, True, 1.25, 2):
        for op, f in ((gt.multiply, np.multiply), (gt.add, np.add), (gt.subtract, np.subtract)):
            same_bits(op(x, v).numpy(), f(x0, v), (op.__name__, type(v).__name__))
            same_bits(op(v, x).numpy(), f(v, x0), (op.__name__, type(v).__name__, "left"))
        same_bits((x * v).numpy(), x0 * v, type(v).__name__)


def test_a_value_error_is_not_blamed_on_shapes():
    with pytest.raises(ValueError, match=r"gt.power: .*Integers to negative integer powers") as e:
        2 ** gt.constant(np.array([-1]))
    assert "broadcastable" not in str(e.value)
    with pytest.raises(ValueError, match=r"shapes must be equal or broadcastable"):
        gt.constant(np.ones(2)) + gt.constant(np.ones(3))
