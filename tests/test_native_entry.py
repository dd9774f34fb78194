"""The C entry points (gputape/_native.c's Entry) against the generated Python functions they wrap.

Every generated one- and two-operand entry point is called through its C object and through
its Python function (``__wrapped__``) on the same operands of every kind, in every observer
state: the results (bits, dtypes), the recorded nodes (field by field, ids by role), the tapes'
tracked sets and edges, the errors (class, message, cause) and the warnings must be the same.
Then the multiply and divide residuals: a number operand saved as the typed 0-d array its ufunc got gives
the bits of the Python number's gradient. Skipped where the extension is not in use.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
from fake_gpu import FakeCupy

import gputape as gt
from gputape import backend, config, dispatch, expr
from gputape.primitive import REGISTRY, Node

native = pytest.mark.skipif(not config.native_enabled(), reason=f"gputape._native: {config._native_why}")


def _entries() -> list[tuple[str, object, int]]:
    if not config.native_enabled():
        return []
    found = []
    for name, prim in sorted(REGISTRY.items()):
        if type(prim.public) is config._native.Entry:
            found.append((name, prim.public, prim.public.__wrapped__.__code__.co_argcount))
    return found


ENTRIES = _entries()
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-40, 3.0, -2.5]


def _t(dtype, n=12, var=False):
    a = np.array(SPECIAL[:n], dtype=dtype)
    return gt.Variable(a) if var else gt.constant(a)


def _operands(nargs):
    """(label, operands) of every kind an entry point may be handed."""
    f32, f64 = _t(np.float32), _t(np.float64)
    v32 = _t(np.float32, var=True)
    i64 = gt.constant(np.arange(-6, 6, dtype=np.int64))
    b = gt.constant(np.array([True, False] * 6))
    if nargs == 1:
        return [("f32", (f32,)), ("f64", (f64,)), ("var", (v32,)), ("int", (i64,)), ("bool", (b,)),
                ("number", (0.5,)), ("list", ([0.5, 2.0],)), ("array", (np.array(SPECIAL, np.float32),))]  # fmt: skip
    row = gt.constant(np.array(SPECIAL[:12], np.float32).reshape(3, 4)[0])
    m = gt.constant(np.array(SPECIAL, np.float32).reshape(3, 4))
    return [
        ("t,t", (f32, gt.constant(np.array(SPECIAL[::-1], np.float32)))),
        ("t,t same", (f32, f32)),
        ("t,var", (f32, v32)),
        ("var,number", (v32, 1.5)),
        ("m,row", (m, row)),
        ("t,float", (f32, 0.1)),
        ("float,t", (0.1, f32)),
        ("t64,float", (f64, 0.1)),
        ("t,int", (f32, 3)),
        ("int,t", (-2, f64)),
        ("t,zero", (f32, -0.0)),
        ("t,nan", (f32, float("nan"))),
        ("t,huge", (f32, 1e300)),
        ("t,bigint", (f32, 2**70)),
        ("int t,float", (i64, 0.5)),
        ("int t,int", (i64, 2)),
        ("int t,bigint", (i64, 2**70)),
        ("bool,bool", (b, b)),
        ("bool,t", (b, f32)),
        ("t,bool", (f32, True)),
        ("f32,f64", (f32, f64)),
        ("t,list", (f32, [1.0] * 12)),
        ("array,t", (np.ones(12, np.float32), f32)),
        ("t,array", (f32, np.ones(12, np.float32))),
        ("numbers", (2.0, 3.0)),
        ("t,np scalar", (f32, np.float64(0.25))),
        ("t,str", (f32, "a")),
        ("shapes", (f32, gt.constant(np.ones(5, np.float32)))),
    ]


def _bits(a):
    a = np.asarray(a)
    return (type(a).__name__, a.dtype.str, a.shape, a.tobytes())


def _role(ids, args, res):
    """An id by its role: the operand it belongs to, the result, 0, or another tensor's."""
    names = {}
    for k, a in enumerate(args):
        if isinstance(a, gt.Tensor):
            names.setdefault(a._id, f"arg{k}")
    if isinstance(res, gt.Tensor):
        names[res._id] = "res"

    def one(i):
        if i == 0:
            return 0
        return names.get(i, "other")

    return tuple(one(i) for i in ids)


def _node(n, args, res):
    if type(n) is not Node:
        return type(n).__name__
    saved = [_bits(s) if hasattr(s, "dtype") else (type(s).__name__, s if s == s else "nan") for s in n.saved]
    return (n.prim.name, n.params, _role(n.ids, args, res), n.shapes, n.casts, _role((n.out,), args, res),
            n.meta, saved, None if n.info is None else n.info[1:])  # fmt: skip


def _outcome(fn, args, mode):
    """What one call did: its result, the tapes' records, its error, its warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tapes = []
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(np.errstate(all="raise" if mode == "raise" else "warn"))
                if mode == "error":
                    warnings.simplefilter("error", RuntimeWarning)
                if mode == "profiler":
                    stack.enter_context(gt.profiler.profile(None))
                if mode in ("tape", "nested", "profiler", "raise", "error", "locations", "numerics"):
                    for _ in range(2 if mode == "nested" else 1):
                        t = stack.enter_context(gt.GradientTape(persistent=True))
                        for a in args[:1]:
                            if isinstance(a, gt.Tensor) and a.dtype.kind == "f":
                                t.watch(a)
                        tapes.append(t)
                if mode == "locations":
                    stack.enter_context(gt.debug.record_locations())
                if mode == "numerics":
                    gt.debug.enable_check_numerics()
                    stack.callback(gt.debug.disable_check_numerics)
                res = fn(*args)
            got = ("ok", type(res).__name__, _bits(res._data), type(res._id).__name__)
        except Exception as exc:  # the error itself is what is compared
            res = None
            cause = exc.__cause__
            got = ("error", type(exc), str(exc), type(cause), str(cause), exc.__context__ is cause)
    records = [
        ([_node(n, args, res) for n in t._nodes], sorted(_role(t._tensors, args, res), key=str),
         sorted((_role((k,), args, res), v[0], _role(v[1], args, res)) for k, v in t._edges.items()))
        for t in tapes
    ]  # fmt: skip
    return got, records, [(w.category, str(w.message)) for w in caught]


MODES = ["none", "tape", "nested", "profiler", "raise", "error", "locations", "numerics"]


@native
@pytest.mark.parametrize(("name", "fn", "nargs"), ENTRIES, ids=[e[0] for e in ENTRIES])
def test_the_c_entry_is_its_python_function(name, fn, nargs):
    assert fn.prim.public is fn and fn.__wrapped__.__code__.co_argcount == nargs
    for label, args in _operands(nargs):
        for mode in MODES:
            c = _outcome(fn, args, mode)
            p = _outcome(fn.__wrapped__, args, mode)
            assert c == p, f"gt.{name}({label}) under {mode}"


@native
def test_the_fast_path_is_taken_and_every_other_case_is_the_functions():
    x = gt.constant(np.ones(3, np.float32))
    cases = [  # (call, fast, slow)
        (lambda: gt.tanh(x), 1, 0),
        (lambda: x * 2.0, 1, 0),
        (lambda: 2 * x, 1, 0),
        (lambda: x * x, 0, 0),  # square's
        (lambda: gt.multiply(x, [1.0, 2.0, 3.0]), 0, 1),
        (lambda: gt.multiply(x, True), 0, 1),
        (lambda: gt.multiply(x, np.float32(2)), 0, 1),
        (lambda: gt.multiply(x, y=2.0), 0, 1),
        (lambda: gt.tanh([1.0]), 0, 1),
    ]
    m = gt.multiply
    for call, fast, slow in cases:
        f0, s0 = m.fast + gt.tanh.fast, m.slow + gt.tanh.slow
        call()
        assert (m.fast + gt.tanh.fast - f0, m.slow + gt.tanh.slow - s0) == (fast, slow)
    with gt.profiler.profile(None):
        s0 = m.slow
        x * 2.0
        assert m.slow == s0 + 1  # the profiled path is apply's
    with gt.GradientTape() as tape:
        tape.watch(x)
        f0 = m.fast
        x * 2.0
        assert m.fast == f0 + 1
        with gt.debug.record_locations():
            x * 2.0
        assert m.fast == f0 + 2  # (locations are the recorder's business)
        gt.debug.enable_check_numerics()
        try:
            s0 = m.slow
            x * 2.0
            assert m.slow == s0 + 1  # hooks run from the generated function
        finally:
            gt.debug.disable_check_numerics()


@native
def test_a_gt_function_trace_and_a_fake_gpu_take_the_python_function(monkeypatch):
    x0 = np.linspace(-1, 1, 5)

    def f(fn, x):
        return gt.sum(fn(gt.tanh(x), 0.5))

    for fn in (gt.multiply, gt.multiply.__wrapped__):
        traced = gt.function(lambda x, fn=fn: f(fn, x))
        got = [traced(gt.constant(x0)).numpy() for _ in range(3)]
        assert all(_bits(g) == _bits(np.sum(np.tanh(x0) * 0.5)) for g in got)
    monkeypatch.setattr(backend, "_cupy", FakeCupy())
    monkeypatch.setattr(backend, "_probed", {})
    monkeypatch.setattr(expr, "launch_dtype", lambda dt: None)
    x = gt.constant(FakeCupy().asarray(x0))
    h = gt.constant(x0)
    for args in [(x, 0.5), (0.5, x), (x, x), (x, h), (h, x)]:
        for mode in ("none", "tape"):
            s0 = gt.multiply.slow
            c = _outcome(gt.multiply, args, mode)
            assert gt.multiply.slow == s0 + 1  # (x * x too: square's fast path refuses a GPU array first)
            assert c == _outcome(gt.multiply.__wrapped__, args, mode)


@native
def test_introspection_is_the_functions():
    for name, fn, _ in ENTRIES:
        py = fn.__wrapped__
        for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__code__", "__globals__", "__defaults__"):
            assert getattr(fn, attr) is getattr(py, attr), (name, attr)
        assert inspect.signature(fn) == inspect.signature(py)
        assert fn.__code__.co_filename.endswith(f"<generated {py.__name__}>")
    assert dispatch.typed_path(REGISTRY["multiply"]) is expr.TYPED_LITERALS
    x = gt.constant([1.0, 2.0])
    bound = x.__mul__
    assert bound.__self__ is x and bound.__func__ is gt.multiply and bound(3.0).numpy().tolist() == [3.0, 6.0]
    assert gt.Tensor.__mul__ is gt.multiply  # unbound through the class, as a function is
    assert "multiply" in repr(gt.multiply)
    with pytest.raises(AttributeError):
        _ = gt.multiply.no_such_attribute


@native
def test_pickling_is_by_name():
    # the public entry pickles by module and name; its Python function is not what that name holds
    for fn in (gt.tanh, gt.multiply):
        assert pickle.loads(pickle.dumps(fn)) is fn
        with pytest.raises(pickle.PicklingError, match="not the same object"):
            pickle.dumps(fn.__wrapped__)


@native
def test_references_come_back():
    x = gt.constant(np.ones(4, np.float32))
    v = gt.Variable(np.ones(4, np.float32))
    b = gt.constant(np.array([True, False, True, True]))
    calls = [lambda: gt.tanh(x), lambda: x * 0.5, lambda: 0.5 * x, lambda: x * v, lambda: x * x,
             lambda: gt.multiply(x, "a"), lambda: b - b, lambda: gt.subtract(b, x > 0)]  # fmt: skip
    references_come_back(calls, (x, x._data, v, 0.5, b, b._data))


def references_come_back(calls, objects):
    """Each call (a TypeError allowed), 50 times with and without a tape, leaves the objects' counts as they were."""
    for call in calls:
        for tape_on in (False, True):
            gc.collect()  # (a wrapped error's traceback holds its frames' operands in a cycle, on both paths)
            before = [sys.getrefcount(o) for o in objects]
            for _ in range(50):
                with gt.GradientTape() if tape_on else contextlib.nullcontext():
                    try:
                        call()
                    except TypeError:
                        pass
            gc.collect()
            assert [sys.getrefcount(o) for o in objects] == before


# -- the typed number residuals (multiply, divide) --------------------------------------------------


def _mul_x(x, n):
    return x * n


def _mul_n(x, n):
    return n * x


def _div_x(x, n):
    return x / n


# (the op, which residual is the number, d/dx of op(x) given g, as numpy computes it)
RESIDUAL_CASES = {
    "x*n": (_mul_x, 1, lambda g, n: g * n),
    "n*x": (_mul_n, 0, lambda g, n: g * n),
    "x/n": (_div_x, 0, lambda g, n: np.where(g == 0, 0, g / n)),  # divide's VJP: g / y, 0 where g == 0
}


@pytest.mark.skipif(not expr.TYPED_LITERALS, reason="literals are typed on numpy 2 only (NEP 50)")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("number", [0.1, 1.01, -0.0, 0.0, 3, -7, 1e-300, 1e300, 2**30, float("inf"), float("nan")])
@pytest.mark.parametrize("case", sorted(RESIDUAL_CASES))
def test_a_typed_number_residual_gives_the_python_numbers_bits(dtype, number, case):
    op, k, want = RESIDUAL_CASES[case]
    x0 = np.array(SPECIAL + [np.finfo(dtype).max, np.finfo(dtype).tiny], dtype)
    x = gt.constant(x0)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        with gt.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = op(x, number)
        (node,) = tape._nodes
        r = node.saved[k]
        assert r is expr.typed_number(number, x0)  # the very operand the ufunc got
        g0 = x0[::-1].copy()
        g = tape.gradient(y, x, output_gradients=gt.constant(g0))
        assert _bits(g.numpy()) == _bits(want(g0, number))  # numpy's own, the number converted by NEP 50
        saved = list(node.saved)
        node.saved[k] = number  # the Python-number residual it replaces: the same bits
        g_py = tape.gradient(y, x, output_gradients=gt.constant(g0))
        node.saved[:] = saved
        assert _bits(g_py.numpy()) == _bits(g.numpy())
        assert _bits(y.numpy()) == _bits(op(x0, number))


@pytest.mark.skipif(not expr.TYPED_LITERALS, reason="literals are typed on numpy 2 only (NEP 50)")
def test_only_multiply_and_divide_on_floats_save_a_typed_number_and_a_trace_sees_the_number():
    x32 = gt.constant(np.array([1.0, 2.0], np.float32))
    x16 = gt.constant(np.array([1.0, 2.0], np.float16))
    with gt.GradientTape() as tape:
        tape.watch([x32, x16])
        a = x32 * 0.1
        b = x32 / 0.1  # divide's VJPs pair the number with arrays alone (g / y, -out / y): typed too
        c = x16 * 0.1  # float16: the number
        d = gt.maximum(x32, 0.5)  # maximum: the number
    m32, div, m16, mx = tape._nodes
    for saved in (m32.saved[1], div.saved[0]):
        assert type(saved) is np.ndarray and saved.dtype == np.float32 and saved.shape == ()
    assert type(m16.saved[1]) is float and type(mx.saved[1]) is float
    rows = tape.summary().splitlines()
    assert "array(" not in "".join(rows)
    assert rows[2].split()[:2] == ["0", "multiply"] and rows[2].split()[-2] == "8"  # x's 8 bytes: the literal is shared
    assert a is not None and b is not None and c is not None and d is not None
    saved = []

    @gt.function
    def step(x):
        with gt.GradientTape() as t:
            t.watch(x)
            y = gt.sum(x * 0.1)
        saved.append(t._nodes[0].saved[1])  # (traced once)
        return t.gradient(y, x)

    for _ in range(3):
        assert _bits(step(x32).numpy()) == _bits(np.full(2, np.float32(0.1)))
    assert [type(s) for s in saved] == [float]  # a gt.function trace keeps the number (its replay types it)


def test_without_the_extension_the_python_recorder_saves_the_same():
    code = (
        "import numpy as np, gputape as gt\n"
        "from gputape import dispatch, expr\n"
        "x = gt.constant(np.array([1.0, 2.0], np.float32))\n"
        "with gt.GradientTape() as t:\n"
        "    t.watch(x); y = x * 0.1\n"
        "r = t._nodes[0].saved[1]\n"
        "print(type(gt.multiply).__name__, r is expr.typed_number(0.1, x._data),"
        " expr.TYPED_LITERALS, type(r).__name__)\n"
    )
    env = {**os.environ, "GPUTAPE_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    fn, same, typed, kind = out.split()
    assert fn == "function" and same == "True" and kind == ("ndarray" if typed == "True" else "float")


@native
def test_a_floating_point_warning_points_at_the_caller():
    """The one designed difference: numpy's warning from the C entry's ufunc names the calling line
    (as numpy's own operators do); the Python function's names its generated line."""
    x = gt.constant(np.array([-1.0, 1.0], np.float32))
    with warnings.catch_warnings(record=True) as caught, np.errstate(invalid="warn"):
        warnings.simplefilter("always")
        gt.sqrt(x)
        gt.sqrt.__wrapped__(x)
    assert [os.path.basename(w.filename) for w in caught] == [os.path.basename(__file__), "<generated sqrt>"]
    assert caught[0].message.args == caught[1].message.args and caught[0].category is caught[1].category
