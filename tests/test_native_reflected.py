"""The reflected operators in C (gputape/_native.c's Swapped) against the Python functions they wrap.

``2 * x`` is ``Tensor.__rmul__(x, 2)``: gputape.ops makes it ``rop(self, other) = multiply(other,
self)``; where ``multiply`` is a C Entry, ``Swapped(rop)`` runs the entry's C path on the swapped
operands and hands every other call to rop. Each reflected operator is called through both, on
numbers, bools, arrays, lists, numpy scalars, strings and tensors on the left, in every observer
state: the results (bits), the recorded nodes (field by field), the errors (class, message,
cause) and the warnings must be the same; then through the interpreter's operator slots, and in a
process without the extension (GPUTAPE_NATIVE=0). Skipped where the extension is not in use.
"""

from __future__ import annotations

import inspect
import operator
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from test_native_entry import MODES, SPECIAL, _bits, _outcome, _t, references_come_back

import gputape as gt
from gputape import config

native = pytest.mark.skipif(not config.native_enabled(), reason=f"gputape._native: {config._native_why}")

REFLECTED = {
    "__radd__": operator.add,
    "__rsub__": operator.sub,
    "__rmul__": operator.mul,
    "__rtruediv__": operator.truediv,
    "__rfloordiv__": operator.floordiv,
    "__rmod__": operator.mod,
    "__rpow__": operator.pow,
    "__rmatmul__": operator.matmul,
    "__rand__": operator.and_,
    "__ror__": operator.or_,
}

# the ones over a C Entry (logical_and and logical_or are not generated entry points)
SWAPPED = sorted(
    n for n in REFLECTED if config.native_enabled() and type(getattr(gt.Tensor, n)) is config._native.Swapped
)


def _lefts():
    """(label, other) for ``other <op> x``: every kind the interpreter may hand a reflected operator."""
    return [
        ("float", 0.5), ("int", 2), ("neg int", -3), ("zero", 0.0), ("neg zero", -0.0), ("nan", float("nan")),
        ("inf", float("inf")), ("huge", 1e300), ("bigint", 2**70), ("true", True), ("false", False),
        ("np f64", np.float64(0.25)), ("np f32", np.float32(3.0)), ("array", np.ones(12, np.float32)),
        ("list", [1.0] * 12), ("str", "a"), ("none", None), ("tensor", gt.constant(np.arange(12, dtype=np.float32))),
    ]  # fmt: skip


def _rights():
    """(label, x) for the tensor the reflected operator belongs to."""
    return [
        ("f32", _t(np.float32)),
        ("f64", _t(np.float64)),
        ("var", _t(np.float32, var=True)),
        ("int", gt.constant(np.arange(-6, 6, dtype=np.int64))),
        ("bool", gt.constant(np.array([True, False] * 6))),
        ("matrix", gt.constant(np.array(SPECIAL, np.float32).reshape(12, 1))),
    ]


def test_each_reflected_operator_is_a_c_object_exactly_where_its_entry_is():
    for name in REFLECTED:
        op = getattr(gt.Tensor, name)
        forward = op.__wrapped__ if type(op).__name__ == "Swapped" else op
        (cell,) = forward.__closure__  # rop's entry
        if config.native_enabled() and type(cell.cell_contents) is config._native.Entry:
            assert type(op) is config._native.Swapped and op.entry is cell.cell_contents, name
        else:
            assert inspect.isfunction(op), name


@native
@pytest.mark.parametrize("name", SWAPPED)
def test_the_c_reflected_operator_is_its_python_function(name):
    sw = getattr(gt.Tensor, name)
    for rlabel, x in _rights():
        for llabel, other in _lefts():
            for mode in MODES:
                c = _outcome(sw, (x, other), mode)
                p = _outcome(sw.__wrapped__, (x, other), mode)
                assert c == p, f"{llabel} {name} {rlabel} under {mode}"


@native
@pytest.mark.parametrize("name", SWAPPED)
def test_the_operator_syntax_is_as_with_the_python_function(name, monkeypatch):
    sw, op = getattr(gt.Tensor, name), REFLECTED[name]
    cases = [(other, x) for _, x in _rights() for _, other in _lefts()]
    got = [_outcome(op, args, mode) for args in cases for mode in ("none", "tape")]
    monkeypatch.setattr(gt.Tensor, name, sw.__wrapped__)
    want = [_outcome(op, args, mode) for args in cases for mode in ("none", "tape")]
    assert got == want


@native
def test_the_fast_path_is_the_entrys_and_every_other_call_is_the_functions():
    x = gt.constant(np.ones(3, np.float32))
    m = gt.multiply
    cases = [  # (call, entry's fast, entry's slow)
        (lambda: 2 * x, 1, 0),
        (lambda: 0.5 * x, 1, 0),
        (lambda: x.__rmul__(2.0), 1, 0),
        (lambda: gt.Tensor.__rmul__(x, 2.0), 1, 0),
        (lambda: [1.0, 2.0, 3.0] * x, 0, 1),
        (lambda: True * x, 0, 1),
        (lambda: x.__rmul__(x), 0, 0),  # square's
    ]
    for call, fast, slow in cases:
        f0, s0 = m.fast, m.slow
        call()
        assert (m.fast - f0, m.slow - s0) == (fast, slow)
    rop = gt.Tensor.__rmul__.__wrapped__
    for args, kwargs in [((x,), {}), ((x, 2.0, 3.0), {}), ((x,), {"other": 2.0}), ((), {"self": x, "other": 2.0})]:
        want = got = None
        try:
            want = _bits(rop(*args, **kwargs)._data)
        except TypeError as exc:
            want = str(exc)
        try:
            got = _bits(gt.Tensor.__rmul__(*args, **kwargs)._data)
        except TypeError as exc:
            got = str(exc)
        assert got == want


@native
def test_a_failed_forward_names_the_python_functions_parameters():
    x = gt.constant(np.array([-1, 2], np.int64))
    with pytest.raises(ValueError, match=r"gt\.power: .*x = 2 .*y of shape \(2,\)") as c:
        2**x
    with pytest.raises(ValueError) as p:
        gt.Tensor.__rpow__.__wrapped__(x, 2)
    assert str(c.value) == str(p.value) and type(c.value.__cause__) is type(p.value.__cause__)
    b = gt.constant(np.array([True, False]))
    with pytest.raises(TypeError) as c:
        b.__rsub__(b)  # (square's path is not subtract's: the same-operand case of a failing op)
    with pytest.raises(TypeError) as p:
        gt.Tensor.__rsub__.__wrapped__(b, b)
    assert str(c.value) == str(p.value)


@native
def test_introspection_and_binding_are_the_functions():
    assert {"__radd__", "__rsub__", "__rmul__", "__rtruediv__"} <= set(SWAPPED)
    for name in SWAPPED:
        sw = getattr(gt.Tensor, name)
        rop = sw.__wrapped__
        for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__code__", "__globals__", "__closure__"):
            assert getattr(sw, attr) is getattr(rop, attr), (name, attr)
        assert sw.__name__ == name and inspect.signature(sw) == inspect.signature(rop)  # named as installed
    x = gt.constant([1.0, 2.0])
    bound = x.__rtruediv__
    assert bound.__self__ is x and bound.__func__ is gt.Tensor.__rtruediv__
    assert bound(1.0).numpy().tolist() == [1.0, 0.5]
    assert "__radd__" in repr(gt.Tensor.__radd__)
    with pytest.raises(ValueError, match="Swapped"):
        config._native.Swapped(lambda self, other: other)  # (no entry in a closure cell)


@native
def test_references_come_back():
    x = gt.constant(np.ones(4, np.float32))
    b = gt.constant(np.array([True, False, True, True]))
    calls = [lambda: 0.5 * x, lambda: 2 - x, lambda: 1 / x, lambda: [1.0] * 4 + x, lambda: "a" - x,
             lambda: b.__rsub__(b), lambda: 2**b]  # fmt: skip
    references_come_back(calls, (x, x._data, 0.5, b, b._data))


@native
def test_a_floating_point_warning_points_at_the_caller():
    """As the entry's (test_native_entry): numpy's warning from the C path names the calling line;
    the Python function's names its own line in gputape.ops."""
    x = gt.constant(np.array([0.0, 1.0], np.float32))
    with warnings.catch_warnings(record=True) as caught, np.errstate(divide="warn"):
        warnings.simplefilter("always")
        1 / x
        gt.Tensor.__rtruediv__.__wrapped__(x, 1)
    assert [os.path.basename(w.filename) for w in caught] == [os.path.basename(__file__), "__init__.py"]
    assert caught[0].message.args == caught[1].message.args and caught[0].category is caught[1].category


_PROGRAM = """
import numpy as np, gputape as gt
x = gt.constant(np.array([0.5, -2.0, 3.0, 0.0], np.float32))
n = gt.constant(np.array([1, -2, 3, 4], np.int64))
b = gt.constant(np.array([True, False, True, False]))
print(type(gt.Tensor.__radd__).__name__)
for expr in ["2 * x", "0.5 - x", "1 / x", "3 + x", "2 ** x", "7 // x", "7 % x", "[1.0] * 4 - x", "True + x",
             "np.float64(2) * x", "2 * n", "1 / n", "2 ** n", "1.5 - b", "True & b", "False | b", "'a' - x",
             "np.ones((1, 4), np.float32) @ x"]:
    with np.errstate(all="ignore"), gt.GradientTape(persistent=True) as t:
        t.watch(x)
        try:
            y = eval(expr)
            got = (y.dtype.str, y.numpy().tobytes().hex())
        except Exception as exc:
            got = (type(exc).__name__, str(exc))
    rows = [(k.prim.name, k.shapes, k.casts, [getattr(s, "tobytes", lambda: s)() for s in k.saved]) for k in t._nodes]
    print(expr, got, rows)
"""


def test_with_and_without_the_extension_the_operators_compute_and_record_the_same():
    runs = {}
    for switch in ("0", "1"):
        env = {**os.environ, "GPUTAPE_NATIVE": switch}
        out = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, check=True)
        kind, _, rest = out.stdout.partition("\n")
        runs[switch] = (kind, rest)
    assert runs["0"][0] == "function"
    # (this process may run with GPUTAPE_NATIVE=0: the child's switch on finds the extension where it is built)
    assert runs["1"][0] == "Swapped" if config.native_enabled() else runs["1"][0] in ("Swapped", "function")
    assert runs["0"][1] == runs["1"][1] and runs["0"][1].count("\n") == 18
