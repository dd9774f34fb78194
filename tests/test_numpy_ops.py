"""The numpy surface (scans, reorders, products, diagonals, stacking, aliases) against numpy itself.

Forward values and dtypes are compared with numpy over many axis/keyword
combinations and float32/float64/int inputs; the compositions' gradients are
checked to second order in float64 (the primitives are in the registry walk via
``tests/grad_cases_numpy.py``), through the vectorised jacobian and in float32.
``gpu``-marked tests run every function on cupy against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_grad_registry as registry_walk

import gputape as gt
from gputape.testing import check_grads

rng = np.random.default_rng(77)


def r(*shape):
    return rng.standard_normal(shape)


def apart(*shape):
    n = int(np.prod(shape)) if shape else 1
    return (rng.permutation(n) * 0.37 + 0.1).reshape(shape)


def as_np(y):
    if isinstance(y, (list, tuple)):
        return [as_np(v) for v in y]
    return y.numpy() if isinstance(y, gt.Tensor) else np.asarray(y)


def same(got, want, exact_dtype=True):
    """``got`` (gputape) equals ``want`` (numpy) in shape, dtype and value."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, exact_dtype)
        return
    g = as_np(got)
    w = np.asarray(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    if exact_dtype:
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
    tol = 1e-5 if g.dtype == np.float32 else 1e-12
    if g.dtype.kind in "fc":
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(g, w)


DTYPES = ["float32", "float64", "int64", "int32"]


def data(shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-5, 6, shape).astype(dtype)


# -- forward: name -> (function of numpy module-like namespace, input shapes, keyword sets) ----------

# Each entry calls the function by the same name on gputape and numpy with the same arguments.
UNARY_CALLS = [
    ("cumsum", (3, 4), [{}, {"axis": 0}, {"axis": 1}, {"axis": -1}, {"axis": 1, "dtype": "float64"}]),
    ("cumprod", (3, 4), [{}, {"axis": 0}, {"axis": -1}, {"axis": 0, "dtype": "float64"}]),
    ("cumsum", (2, 3, 4), [{"axis": 1}, {"axis": 2}]),
    ("diff", (4, 5), [{}, {"axis": 0}, {"n": 2}, {"n": 0}, {"n": 3, "axis": 1}, {"prepend": 0}, {"append": 1}]),
    ("diagonal", (3, 4), [{}, {"offset": 1}, {"offset": -1}, {"offset": 5}, {"offset": -2}]),
    (
        "diagonal",
        (2, 3, 4),
        [{"axis1": 1, "axis2": 2}, {"offset": 1, "axis1": 2, "axis2": 0}, {"axis1": -1, "axis2": 0}],
    ),
    ("trace", (3, 4), [{}, {"offset": 1}, {"offset": -2}]),
    ("trace", (2, 3, 4), [{"axis1": 1, "axis2": 2}, {"axis1": 2, "axis2": 0}]),
    ("diag", (4,), [{}, {"k": 1}, {"k": -2}]),
    ("diag", (3, 4), [{}, {"k": 1}, {"k": -1}]),
    ("triu", (4, 5), [{}, {"k": 1}, {"k": -1}, {"k": 7}]),
    ("tril", (4, 5), [{}, {"k": 1}, {"k": -2}]),
    ("triu", (2, 3, 4), [{}, {"k": 1}]),
    ("tril", (5,), [{}]),
    ("flip", (3, 4), [{}, {"axis": 0}, {"axis": 1}, {"axis": (0, 1)}, {"axis": -1}]),
    ("flip", (2, 3, 4), [{"axis": (0, 2)}]),
    ("flipud", (3, 4), [{}]),
    ("fliplr", (3, 4), [{}]),
    ("rot90", (3, 4), [{}, {"k": 2}, {"k": 3}, {"k": -1}, {"k": 4}, {"axes": (1, 0)}]),
    ("rot90", (2, 3, 4), [{"axes": (1, 2)}, {"k": 3, "axes": (0, 2)}]),
    ("roll", (3, 4), [{"shift": 1}, {"shift": -2}, {"shift": 1, "axis": 0}, {"shift": 5, "axis": 1}]),
    ("roll", (3, 4), [{"shift": (1, 2), "axis": (0, 1)}, {"shift": (1, 1), "axis": (1, 1)}, {"shift": 0, "axis": 0}]),
    ("repeat", (2, 3), [{"repeats": 2}, {"repeats": 3, "axis": 0}, {"repeats": [1, 0, 2], "axis": 1}]),
    ("repeat", (2, 3), [{"repeats": 0, "axis": 1}, {"repeats": [2, 1], "axis": 0}]),
    ("tile", (2, 3), [{"reps": 2}, {"reps": (2, 1)}, {"reps": (2, 1, 3)}, {"reps": (1,)}, {"reps": 0}]),
    ("tile", (3,), [{"reps": (2, 2)}]),
    ("sort", (3, 5), [{}, {"axis": 0}, {"axis": None}, {"kind": "stable"}, {"stable": True}]),
    ("argsort", (3, 5), [{}, {"axis": 0}, {"axis": None}, {"kind": "stable"}]),
    ("ravel", (2, 3), [{}, {"order": "F"}]),
    ("amax", (3, 4), [{}, {"axis": 1}, {"axis": 0, "keepdims": True}]),
    ("amin", (3, 4), [{}, {"axis": (0, 1)}]),
    ("atleast_1d", (), [{}]),
    ("atleast_2d", (3,), [{}]),
    ("atleast_3d", (3,), [{}]),
    ("atleast_3d", (2, 3), [{}]),
    ("atleast_1d", (2, 3), [{}]),
    ("array_split", (7, 2), [{"indices_or_sections": 3}, {"indices_or_sections": [2, 5]}, {"indices_or_sections": 9}]),
    ("array_split", (2, 7), [{"indices_or_sections": 4, "axis": 1}, {"indices_or_sections": [3, 1], "axis": 1}]),
    ("hsplit", (2, 6), [{"indices_or_sections": 3}, {"indices_or_sections": [1, 4]}]),
    ("hsplit", (6,), [{"indices_or_sections": 2}]),
    ("vsplit", (4, 3), [{"indices_or_sections": 2}]),
    ("dsplit", (2, 2, 6), [{"indices_or_sections": [2]}]),
]

UNARY_IDS = [f"{n}-{s}-{i}" for n, s, kws in UNARY_CALLS for i in range(len(kws))]
UNARY_FLAT = [(n, s, kw) for n, s, kws in UNARY_CALLS for kw in kws]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "shape", "kw"), UNARY_FLAT, ids=UNARY_IDS)
def test_unary_forward_matches_numpy(name, shape, kw, dtype):
    a = data(shape, dtype)
    if name in ("sort", "argsort"):
        a = np.asarray(rng.permutation(a.size).reshape(shape)).astype(dtype)  # no ties: one answer
    want = getattr(np, name)(a, **kw)
    if name == "diff" and ("prepend" in kw or "append" in kw):
        # gputape's choice: a Python number joined to the input takes its dtype (numpy makes it int64/float64)
        want = want.astype(np.result_type(a.dtype, kw.get("prepend", kw.get("append"))))
    got = getattr(gt, name)(gt.constant(a), **kw)
    same(got, want)


def test_partition_matches_numpy():
    for dtype in DTYPES:
        a = rng.permutation(15).reshape(3, 5).astype(dtype)
        for kth, axis in [(2, -1), (0, 0), ([1, 3], 1), (4, None)]:
            got = gt.partition(gt.constant(a), kth, axis=axis).numpy()
            want = np.partition(a, kth, axis=axis)
            ks = np.atleast_1d(kth)
            np.testing.assert_array_equal(
                np.take(got, ks, axis=-1 if axis is None else axis),
                np.take(want, ks, axis=-1 if axis is None else axis),
            )
            # every value stays in its slice; the kth splits smaller from larger
            np.testing.assert_array_equal(np.sort(got, axis=axis), np.sort(want, axis=axis))
            assert got.dtype == want.dtype
        idx = gt.argpartition(gt.constant(a), 2).numpy()
        np.testing.assert_array_equal(np.take_along_axis(a, idx, -1)[:, 2], np.partition(a, 2)[:, 2])


BINARY_CALLS = [
    ("outer", (3,), (4,), [{}]),
    ("outer", (2, 2), (3,), [{}]),
    ("tensordot", (2, 3, 4), (3, 4, 5), [{}, {"axes": 2}]),
    ("tensordot", (2, 3), (3, 2), [{"axes": 1}, {"axes": 0}, {"axes": ([0, 1], [1, 0])}, {"axes": (1, 0)}]),
    ("tensordot", (4, 2, 3), (3, 4), [{"axes": ([0, 2], [1, 0])}, {"axes": ([-1], [0])}]),
    ("inner", (4,), (4,), [{}]),
    ("inner", (2, 4), (3, 4), [{}]),
    ("inner", (), (3, 4), [{}]),
    ("kron", (2, 3), (3, 2), [{}]),
    ("kron", (3,), (2, 2), [{}]),
    ("kron", (2, 2), (), [{}]),
    ("kron", (), (3,), [{}]),
    ("kron", (2, 1, 2), (2, 3), [{}]),
    ("cross", (3,), (3,), [{}]),
    ("cross", (4, 3), (3,), [{}]),
    ("cross", (3, 4), (4, 3), [{"axisa": 0}]),
    ("cross", (3, 5), (3, 5), [{"axis": 0}, {"axisa": 0, "axisb": 0, "axisc": 0}]),
    ("cross", (2, 3), (2, 3), [{"axisc": 0}]),
    ("append", (2, 3), (2, 3), [{}, {"axis": 0}, {"axis": 1}]),
    ("append", (3,), (), [{}]),
]
BINARY_FLAT = [(n, s, t, kw) for n, s, t, kws in BINARY_CALLS for kw in kws]
BINARY_IDS = [f"{n}-{s}-{t}-{i}" for n, s, t, kws in BINARY_CALLS for i in range(len(kws))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "sa", "sb", "kw"), BINARY_FLAT, ids=BINARY_IDS)
def test_binary_forward_matches_numpy(name, sa, sb, kw, dtype):
    a, b = data(sa, dtype), data(sb, dtype)
    want = getattr(np, name)(a, b, **kw)
    got = getattr(gt, name)(gt.constant(a), gt.constant(b), **kw)
    same(got, want)


@pytest.mark.filterwarnings("ignore:Arrays of 2-dimensional vectors:DeprecationWarning")
def test_cross_of_2_vectors_matches_numpy():
    for sa, sb in [((2,), (2,)), ((4, 2), (2,)), ((2,), (3,)), ((3, 3), (3, 2))]:
        a, b = r(*sa), r(*sb)
        same(gt.cross(gt.constant(a), gt.constant(b)), np.cross(a, b))


STACKERS = ["vstack", "hstack", "dstack", "column_stack"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", STACKERS)
@pytest.mark.parametrize("shapes", [[(3,), (3,)], [(2, 3), (4, 3)], [(), ()], [(2, 3, 1), (2, 3, 2)], [(3,)]], ids=str)
def test_stacking_matches_numpy(name, shapes, dtype):
    arrs = [data(s, dtype) for s in shapes]
    try:
        want = getattr(np, name)(arrs)
    except ValueError:
        with pytest.raises(ValueError):
            getattr(gt, name)([gt.constant(a) for a in arrs])
        return
    same(getattr(gt, name)([gt.constant(a) for a in arrs]), want)


def test_stacking_dtype_and_casting_keywords():
    a, b = np.ones(2, np.float32), np.zeros(2, np.float64)
    same(gt.vstack([gt.constant(a), gt.constant(b)]), np.vstack([a, b]))
    same(gt.vstack([gt.constant(a), gt.constant(b)], dtype="float32"), np.vstack([a, b], dtype="float32"))
    same(gt.hstack([gt.constant(a)], dtype="float64"), np.hstack([a], dtype="float64"))
    with pytest.raises(TypeError, match=r"gt\.vstack: cannot cast float64 to int32"):
        gt.vstack([gt.constant(b)], dtype="int32")
    same(gt.vstack(gt.constant(a)), np.vstack(a))  # one array: numpy iterates its first axis
    with pytest.raises(TypeError, match=r"gt\.vstack: argument tup .* is a 0-d array.*pass a list"):
        gt.vstack(gt.constant(1.0))


def test_select_matches_numpy():
    x = r(3, 4)
    conds = [x < -0.5, x > 0.5]
    for default in (0, 0.5, np.float64(2.0)):
        for dtype in ("float32", "float64", "int64"):
            xs = x.astype(dtype) if dtype != "int64" else (x * 10).astype(dtype)
            choices = [xs, xs * 2]
            want = np.select(conds, choices, default)
            got = gt.select([gt.constant(c) for c in conds], [gt.constant(c) for c in choices], default)
            same(got, want)
    # conditions as raw arrays, scalar choices, broadcasting to the conditions' shape
    same(gt.select(conds, [gt.constant(1.0, "float64"), gt.constant(2.0, "float64")]), np.select(conds, [1.0, 2.0]))
    with pytest.raises(TypeError, match="condition 0 has dtype float64"):
        gt.select([gt.constant(x)], [gt.constant(x)])
    with pytest.raises(ValueError, match="2 conditions for 1 choices"):
        gt.select(conds, [gt.constant(x)])


def test_select_first_true_condition_wins_and_gradient_reaches_only_it():
    x = gt.constant([-2.0, 0.5, 3.0], "float64")
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.select([x < 1, x > -5], [x * 2.0, x * 3.0], default=0.0)
    assert y.numpy().tolist() == [-4.0, 1.0, 9.0]
    assert tape.gradient(y, x).numpy().tolist() == [2.0, 2.0, 3.0]


def test_diff_of_bool_prepend_append_and_dtypes():
    b = np.array([True, False, False, True])
    same(gt.diff(gt.constant(b)), np.diff(b))
    a = r(3, 4).astype("float32")
    # Python numbers joined by prepend/append take the input's dtype (numpy would promote to float64)
    got = gt.diff(gt.constant(a), prepend=0.0, append=1.0)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), np.diff(a, prepend=0.0, append=1.0), rtol=1e-6)
    p = r(3, 1)
    same(
        gt.diff(gt.constant(a.astype("float64")), axis=1, prepend=gt.constant(p)),
        np.diff(a.astype("float64"), axis=1, prepend=p),
    )
    with pytest.raises(ValueError, match="non-negative"):
        gt.diff(gt.constant(a), n=-1)
    with pytest.raises(ValueError, match="at least one dimension"):
        gt.diff(gt.constant(1.0))


def test_cumsum_dtype_rules_match_numpy():
    for dt in ("bool", "int8", "int32", "int64", "uint8", "float32", "float64"):
        a = (rng.integers(0, 3, (2, 3)) > 0) if dt == "bool" else rng.integers(0, 3, (2, 3)).astype(dt)
        same(gt.cumsum(gt.constant(a), axis=1), np.cumsum(a, axis=1))
        same(gt.cumprod(gt.constant(a), axis=0), np.cumprod(a, axis=0))
    same(gt.cumsum(gt.constant(2.5, "float64")), np.cumsum(np.float64(2.5)))
    same(gt.cumsum(gt.constant(np.int32(3)), dtype="float32"), np.cumsum(np.int32(3), dtype="float32"))


def test_trace_dtype_keyword():
    a = rng.integers(0, 5, (3, 3)).astype("int32")
    same(gt.trace(gt.constant(a)), np.trace(a))
    same(gt.trace(gt.constant(a), dtype="float64"), np.trace(a, dtype="float64"))


def test_around_and_fabs_match_numpy():
    x = np.array([1.25, -2.675, 12.5, 0.05, 1234.5678, -0.5])
    for dtype in ("float32", "float64"):
        for d in (0, 1, 2, -1, -2):
            same(gt.around(gt.constant(x.astype(dtype)), d), np.around(x.astype(dtype), d))
    i = np.array([1234, -1250, 1350, 7])
    for dtype in ("int32", "int64"):
        for d in (0, 2, -1, -2):
            same(gt.around(gt.constant(i.astype(dtype)), d), np.around(i.astype(dtype), d))
    for dtype in ("int8", "int32", "int64", "float32", "float64", "bool"):
        v = np.array([-3, 0, 2]).astype(dtype)
        same(gt.fabs(gt.constant(v)), np.fabs(v))
    with pytest.raises(TypeError, match=r"gt\.fabs"):
        gt.fabs(np.array([1j]))


def test_aliases_are_the_same_functions():
    assert gt.remainder is gt.mod and gt.amax is gt.max and gt.amin is gt.min
    same(gt.remainder(gt.constant([5.0, -1.0], "float64"), 3.0), np.remainder([5.0, -1.0], 3.0))


def test_atleast_with_several_inputs_returns_a_tuple():
    out = gt.atleast_2d(gt.constant(1.0), gt.ones(3), gt.ones((2, 2)))
    want = np.atleast_2d(np.float32(1.0), np.ones(3), np.ones((2, 2)))
    assert isinstance(out, tuple) and [o.shape for o in out] == [w.shape for w in want]
    v = gt.Variable([1.0, 2.0])
    snap = gt.atleast_1d(v)
    v.assign([5.0, 6.0])
    assert snap.numpy().tolist() == [1.0, 2.0]  # a Variable is never handed out: its value then


def test_take_along_axis_matches_numpy_and_checks_its_indices():
    a = r(3, 4)
    idx = rng.integers(0, 4, (3, 2))
    same(gt.take_along_axis(gt.constant(a), idx, axis=1), np.take_along_axis(a, idx, axis=1))
    rows = rng.integers(0, 3, (2, 4))
    same(gt.take_along_axis(gt.constant(a), rows, axis=0), np.take_along_axis(a, rows, axis=0))
    same(gt.take_along_axis(gt.constant(a), rows[:1, :1], axis=0), np.take_along_axis(a, rows[:1, :1], axis=0))
    same(gt.take_along_axis(gt.constant(a), np.array([3, 0]), axis=None), np.take_along_axis(a, np.array([3, 0]), None))
    with pytest.raises(TypeError, match="integers"):
        gt.take_along_axis(gt.constant(a), np.zeros((3, 1)), axis=1)
    with pytest.raises(ValueError, match="rank 1 for an input of rank 2"):
        gt.take_along_axis(gt.constant(a), np.array([0]), axis=1)


def test_bad_arguments_raise_clear_errors():
    m = gt.ones((2, 3))
    cases = [
        (lambda: gt.fliplr(gt.ones(3)), ValueError, "gt.fliplr: input must be at least 2-d"),
        (lambda: gt.flipud(gt.constant(1.0)), ValueError, "gt.flipud"),
        (lambda: gt.rot90(m, axes=(0, 0)), ValueError, "must be different"),
        (lambda: gt.rot90(m, axes=(0,)), ValueError, "two axes"),
        (lambda: gt.roll(m, (1, 2), axis=(0, 1, 1)), ValueError, "gt.roll"),
        (lambda: gt.repeat(m, [1, 2], axis=1), ValueError, r"gt.repeat: argument repeats .* 2 repeat counts"),
        (lambda: gt.repeat(m, -1), ValueError, "non-negative"),
        (lambda: gt.repeat(m, 1.5), TypeError, "integers"),
        (lambda: gt.tile(m, -1), ValueError, "gt.tile"),
        (lambda: gt.tensordot(m, m, axes=1), ValueError, "gt.tensordot: shape mismatch"),
        (lambda: gt.tensordot(m, m, axes=([0], [0, 1])), ValueError, "1 axes of a summed against 2"),
        (lambda: gt.inner(m, gt.ones((2, 2))), ValueError, "gt.inner: last dimensions differ"),
        (lambda: gt.cross(gt.ones(4), gt.ones(3)), ValueError, "gt.cross: the vector axes"),
        (lambda: gt.diagonal(gt.ones(3)), ValueError, "at least 2 dimensions"),
        (lambda: gt.diagonal(m, axis1=1, axis2=-1), ValueError, "cannot be the same axis"),
        (lambda: gt.diag(gt.ones((2, 2, 2))), ValueError, "1-d or 2-d"),
        (lambda: gt.triu(gt.constant(1.0)), ValueError, "gt.triu"),
        (lambda: gt.sort(m, order="x"), ValueError, "structured"),
        (lambda: gt.sort(gt.constant(1.0)), ValueError, "axis=None"),
        (lambda: gt.partition(gt.ones(3), 5), ValueError, "gt.argpartition"),
        (lambda: gt.ravel(m, order="K"), ValueError, "order must be 'C' or 'F'"),
        (lambda: gt.array_split(m, 0), ValueError, "must be positive"),
        (lambda: gt.hsplit(gt.constant(1.0), 2), ValueError, "gt.hsplit"),
        (lambda: gt.vsplit(gt.ones(4), 2), ValueError, r"gt.vsplit: argument ary .* needs an input of at least 2"),
        (lambda: gt.dsplit(m, 2), ValueError, "gt.dsplit"),
        (lambda: gt.select([], []), ValueError, "at least one condition"),
        (lambda: gt.cumsum(m, axis=2), ValueError, r"gt.cumsum: argument axis \(2\) is out of range"),
        (lambda: gt.cumsum(m, out=np.zeros(6)), TypeError, "gt.cumsum: out= is not supported"),
        (lambda: gt.trace(m, out=np.zeros(())), TypeError, "gt.trace: out="),
        (lambda: gt.linspace(0.0, 1.0, -1), ValueError, "gt.linspace"),
    ]
    for f, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            f()


# -- gradients of the compositions (the primitives are in the registry walk) ---------------

COMPOSITES = [
    ("diff", lambda x: gt.diff(x), (r(3, 5),)),
    ("diff-n2-axis0", lambda x: gt.diff(x, n=2, axis=0), (r(4, 3),)),
    ("diff-prepend-append", lambda x, p: gt.diff(x, axis=1, prepend=p, append=0.5), (r(3, 4), r(3, 1))),
    ("diagonal", lambda x: gt.diagonal(x, 1), (r(3, 4),)),
    ("diagonal-3d", lambda x: gt.diagonal(x, -1, 2, 0), (r(3, 2, 4),)),
    ("trace", lambda x: gt.trace(x), (r(3, 3),)),
    ("trace-offset", lambda x: gt.trace(x * x, offset=1, axis1=1, axis2=2), (r(2, 3, 4),)),
    ("diag-vector", lambda v: gt.diag(v, 1), (r(3),)),
    ("diag-matrix", lambda m: gt.diag(m, -1), (r(3, 3),)),
    ("triu", lambda m: gt.triu(m, 1), (r(3, 4),)),
    ("tril", lambda m: gt.tril(m * m), (r(2, 3, 3),)),
    ("outer", lambda a, b: gt.outer(a, b), (r(3), r(2, 2))),
    ("tensordot", lambda a, b: gt.tensordot(a, b), (r(2, 3, 4), r(3, 4, 2))),
    ("tensordot-axes", lambda a, b: gt.tensordot(a, b, ([0, 2], [1, 0])), (r(4, 2, 3), r(3, 4))),
    ("inner", lambda a, b: gt.inner(a, b), (r(2, 4), r(3, 4))),
    ("kron", lambda a, b: gt.kron(a, b), (r(2, 3), r(3, 2))),
    ("kron-ranks", lambda a, b: gt.kron(a, b), (r(3), r(2, 2))),
    ("cross", lambda a, b: gt.cross(a, b), (r(4, 3), r(3))),
    ("cross-axis", lambda a, b: gt.cross(a, b, axis=0), (r(3, 2), r(3, 2))),
    ("flip", lambda x: gt.flip(x, 1) * x, (r(3, 4),)),
    ("flip-all", lambda x: gt.flip(x), (r(2, 3),)),
    ("flipud-fliplr", lambda x: gt.flipud(x) + gt.fliplr(x), (r(3, 3),)),
    ("rot90", lambda x: gt.rot90(x) * gt.rot90(x, 3).T, (r(3, 3),)),
    ("rot90-k2-axes", lambda x: gt.rot90(x, 2, axes=(1, 2)), (r(2, 3, 4),)),
    ("roll", lambda x: gt.roll(x, 2) * x, (r(3, 4),)),
    ("roll-axes", lambda x: gt.roll(x, (1, -1), axis=(0, 1)), (r(3, 4),)),
    ("repeat", lambda x: gt.repeat(x, 2, axis=1), (r(2, 3),)),
    ("repeat-counts", lambda x: gt.repeat(x, [2, 0, 1]), (r(3),)),
    ("repeat-flat", lambda x: gt.repeat(x * x, 3), (r(2, 2),)),
    ("tile", lambda x: gt.tile(x, (2, 1, 3)) ** 2.0, (r(2, 3),)),
    ("sort-squared", lambda x: gt.sort(x) ** 2.0, (apart(3, 4) - 2.0,)),
    ("sort-flat", lambda x: gt.sort(x, axis=None) * gt.arange(6.0), (apart(2, 3),)),
    ("partition", lambda x: gt.partition(x, [1, 3], axis=0), (apart(5, 2),)),
    ("vstack", lambda a, b: gt.vstack([a, b]), (r(3), r(2, 3))),
    ("hstack", lambda a, b: gt.hstack([a, b * b]), (r(2, 1), r(2, 3))),
    ("dstack", lambda a, b: gt.dstack([a, b]), (r(2, 2), r(2, 2, 2))),
    ("column_stack", lambda a, b: gt.column_stack([a, b]), (r(3), r(3, 2))),
    ("append", lambda a, b: gt.append(a, b * a.sum()), (r(2, 2), r(3))),
    ("append-axis", lambda a, b: gt.append(a, b, axis=0), (r(2, 2), r(1, 2))),
    ("array_split", lambda x: gt.array_split(x, 3)[0] * 2.0 + gt.array_split(x, 3)[2].sum(), (r(5, 2),)),
    (
        "hsplit-vsplit-dsplit",
        lambda x: gt.hsplit(x, 2)[1] * gt.vsplit(x, [1])[0] + gt.dsplit(x, 2)[0].sum(),
        (r(2, 2, 2),),
    ),
    ("atleast", lambda x: gt.atleast_3d(x) * gt.atleast_2d(x)[..., None], (r(3),)),
    ("ravel-F", lambda x: gt.ravel(x, order="F") ** 2.0, (r(2, 3),)),
    ("select", lambda x: gt.select([x < -0.3, x > 0.3], [x * x, -x], 0.5), (apart(3, 3) - 1.5,)),
    ("packed-list", lambda x, y: gt.mean([x, x * y, 2.0]) * gt.sum([[x, y], [y, x]], axis=0), (r(), r())),
    ("packed-rows", lambda x, y: gt.sum([x, x * y, y], axis=1), (r(3), r(3))),
    ("packed-operand", lambda x, y: gt.add([x, y], 1.0) * gt.multiply((y, x), x), (r(2), r(2))),
    ("linspace", lambda a, b: gt.linspace(a, b, 5) ** 2.0, (r(), r())),
    ("linspace-arrays-axis", lambda a, b: gt.linspace(a, b, 4, axis=-1, endpoint=False), (r(2, 3), r(3))),
    ("cumsum-of-cumprod", lambda x: gt.cumsum(gt.cumprod(x, axis=1), axis=0), (r(3, 3) * 0.5 + 1.0,)),
    ("amax-amin", lambda x: gt.amax(x, axis=1) - gt.amin(x), (apart(3, 4),)),
]
COMPOSITE_IDS = [c[0] for c in COMPOSITES]


@pytest.mark.parametrize(("name", "f", "args"), COMPOSITES, ids=COMPOSITE_IDS)
def test_composition_grads_second_order(name, f, args):
    check_grads(f, *args, order=2)


@pytest.mark.parametrize(("name", "f", "args"), COMPOSITES, ids=COMPOSITE_IDS)
def test_composition_jacobian_matches_row_by_row(name, f, args):
    registry_walk.test_vectorised_jacobian_matches_row_by_row(name, 0, f, args)


@pytest.mark.parametrize(("name", "f", "args"), COMPOSITES, ids=COMPOSITE_IDS)
def test_composition_float32_keeps_dtype(name, f, args):
    registry_walk.test_float32_gradients_keep_dtype_and_agree_with_float64(name, 0, f, args)


def test_cumsum_gradient_is_the_reversed_cumsum():
    x = gt.constant(r(4), "float64")
    w = r(4)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(gt.cumsum(x) * w)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.cumsum(w[::-1])[::-1], rtol=1e-12)


@pytest.mark.parametrize(
    "values",
    [[2.0, 0.0, 3.0, 4.0], [0.0, 2.0, 3.0], [2.0, 3.0, 0.0], [0.0, 0.0, 5.0], [1.5, 0.0, 2.0, 0.0, 3.0], [0.0]],
    ids=str,
)
def test_cumprod_gradient_with_zeros_is_exact(values):
    """Against the closed form d/dx_i sum_j w_j prod_{k<=j} x_k = sum_{j>=i} w_j prod_{k<=j, k!=i} x_k."""
    v = np.array(values)
    w = np.arange(1.0, len(v) + 1)
    expect = np.array(
        [sum(w[j] * np.prod([v[k] for k in range(j + 1) if k != i]) for j in range(i, len(v))) for i in range(len(v))]
    )
    x = gt.constant(v)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.cumprod(x) * w)
        g = tape.gradient(y, x)  # recorded: the exact (n, n) form
        gs = gt.sum(g * gt.constant(w[::-1].copy()))
    np.testing.assert_allclose(g.numpy(), expect, rtol=1e-12, atol=1e-12)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(gt.cumprod(x) * w)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), expect, rtol=1e-12, atol=1e-12)  # the fast form
    # second order against the closed form of the Hessian-vector product
    u = w[::-1]
    n = len(v)
    hess = np.zeros((n, n))
    for i in range(n):
        for m in range(n):
            if m != i:
                hess[i, m] = sum(
                    w[j] * np.prod([v[k] for k in range(j + 1) if k not in (i, m)]) for j in range(max(i, m), n)
                )
    np.testing.assert_allclose(outer.gradient(gs, x).numpy(), hess @ u, rtol=1e-12, atol=1e-12)


def test_sort_ties_send_the_gradient_to_one_input_each():
    x = gt.constant([2.0, 1.0, 2.0, 1.0], "float64")
    w = gt.constant([1.0, 10.0, 100.0, 1000.0], "float64")
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(gt.sort(x, stable=True) * w)
    # stable order: [1 (i=1), 1 (i=3), 2 (i=0), 2 (i=2)]
    assert tape.gradient(y, x).numpy().tolist() == [100.0, 1.0, 1000.0, 10.0]


# -- packing lists of tensors (TensorFlow's autopacking) --------------------------------------------


def test_mean_of_a_list_of_tensors_is_differentiable():
    x = gt.constant(3.0, "float64")
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.mean([x, x + 2])
    assert float(y) == 4.0 and y.dtype == np.float64
    assert float(tape.gradient(y, x)) == 1.0


def test_packing_promotes_like_numpy_with_weak_python_numbers():
    x32 = gt.constant([1.0, 2.0])
    assert gt.stack([x32]).dtype == np.float32
    from gputape.core.tensor import packed

    p = packed([x32, [3.0, 4.0]])
    assert p.dtype == np.float32 and p.numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert packed([gt.constant(1.0), 2.0]).dtype == np.float32
    assert packed([gt.constant(1.0, "float64"), 2.0]).dtype == np.float64
    assert packed([gt.constant(1), 2.5]).dtype == np.float64  # int32 and a Python float: numpy's float64
    assert packed([1.0, 2.0]) is None  # no tensor inside: the usual constant
    assert gt.sum([1.0, 2.0]).dtype == np.float32
    with pytest.raises(ValueError, match=r"gt\.stack"):
        packed([gt.ones(2), gt.ones(3)])


def test_packed_operand_in_an_elementwise_op_records_the_pack():
    x, y = gt.constant(2.0, "float64"), gt.constant(5.0, "float64")
    with gt.GradientTape() as tape:
        tape.watch([x, y])
        z = gt.sum(gt.multiply([x, y], [[1.0], [10.0]]))
    assert float(z) == 2.0 + 5.0 + 20.0 + 50.0
    gx, gy = tape.gradient(z, [x, y])
    assert (float(gx), float(gy)) == (11.0, 11.0)


# -- linspace ------------------------------------------------------------------------------------------


def test_linspace_matches_numpy():
    for kw in [{}, {"endpoint": False}, {"num": 1}, {"num": 0}, {"num": 7, "dtype": "int64"}, {"num": 4, "axis": -1}]:
        kw = {"num": 5, **kw}
        for start, stop in [
            (0.0, 1.0),
            (-2, 3),
            (np.array([0.0, 1.0]), 4.0),
            (np.array([1.0, 2.0]), np.array([[3.0], [5.0]])),
        ]:
            want = np.linspace(start, stop, **kw)
            got = gt.linspace(start, stop, **kw)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
            assert got.shape == want.shape
            # tensor endpoints go through the differentiable composition: the same values
            tgot = gt.linspace(
                gt.constant(np.asarray(start, np.float64)), gt.constant(np.asarray(stop, np.float64)), **kw
            )
            np.testing.assert_allclose(tgot.numpy(), want, rtol=1e-12, atol=1e-12)
            assert tgot.dtype == (want.dtype if "dtype" in kw else np.float64)
    y, step = gt.linspace(gt.constant(0.0, "float64"), 1.0, 5, retstep=True)
    assert float(step) == 0.25 and y.numpy()[-1] == 1.0
    assert gt.linspace(0.0, 1.0, 3).dtype == np.float32  # Python floats: gputape's float32
    assert gt.linspace(np.float64(0.0), 1.0, 3).dtype == np.float64


def test_linspace_gradient_with_tensor_endpoints():
    """d linspace(a, b, n)[i] / da = 1 - i/(n-1), / db = i/(n-1); e.g. -0.25 for [1] - [2] in b with n = 5."""
    a, b = gt.constant(1.0, "float64"), gt.constant(3.0, "float64")
    with gt.GradientTape(persistent=True) as tape:
        tape.watch([a, b])
        y = gt.linspace(a, b, 5)
        d = y[1] - y[2]
    ja, jb = tape.jacobian(y, [a, b])
    np.testing.assert_allclose(ja.numpy(), [1.0, 0.75, 0.5, 0.25, 0.0])
    np.testing.assert_allclose(jb.numpy(), [0.0, 0.25, 0.5, 0.75, 1.0])
    assert float(tape.gradient(d, b)) == -0.25
    assert y.dtype == np.float64


# -- gt.function replays recompute data-dependent permutations ---------------------------------------


def test_sort_inside_gt_function_recomputes_the_order_on_each_call():
    @gt.function
    def step(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.sort(x) * gt.constant(np.arange(1.0, 5.0)))
        return y, tape.gradient(y, x)

    for _ in range(3):
        v = rng.permutation(4).astype(np.float64)
        y, g = step(v)
        assert float(y) == float(np.sum(np.sort(v) * np.arange(1.0, 5.0)))
        np.testing.assert_array_equal(g.numpy(), np.argsort(np.argsort(v)) + 1.0)
    assert step.tracing_count == 1


# -- GPU: every function on cupy against numpy ---------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "shape", "kw"), UNARY_FLAT, ids=UNARY_IDS)
def test_unary_on_gpu_matches_numpy(name, shape, kw):
    from gputape.devices import backend

    cp = backend.cupy_module()
    a = rng.permutation(int(np.prod(shape))).reshape(shape).astype("float64") * 0.5 - 1.0
    kw = {k: v for k, v in kw.items() if k not in ("kind", "stable")}
    want = getattr(np, name)(a, **kw)
    got = getattr(gt, name)(gt.constant(cp.asarray(a)), **kw)
    outs = got if isinstance(got, (list, tuple)) else [got]
    assert all(o.device.startswith("cuda") for o in outs)
    same(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "sa", "sb", "kw"), BINARY_FLAT, ids=BINARY_IDS)
def test_binary_on_gpu_matches_numpy(name, sa, sb, kw):
    from gputape.devices import backend

    cp = backend.cupy_module()
    a, b = r(*sa), r(*sb)
    same(getattr(gt, name)(gt.constant(cp.asarray(a)), gt.constant(cp.asarray(b)), **kw), getattr(np, name)(a, b, **kw))


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "f", "args"), COMPOSITES, ids=COMPOSITE_IDS)
def test_gradients_on_gpu_match_numpy(name, f, args):
    from gputape.devices import backend

    cp = backend.cupy_module()
    w = [None]

    def grads(xs):
        with gt.GradientTape() as tape:
            tape.watch(xs)
            y = registry_walk._flat(f(*xs))
            if w[0] is None:
                w[0] = np.random.default_rng(5).standard_normal(y.shape)
            loss = gt.sum(y * gt.constant(w[0] if y.device == "cpu" else cp.asarray(w[0])))
        return y, tape.gradient(loss, xs, unconnected_gradients="zero")

    y_cpu, g_cpu = grads([gt.constant(np.asarray(a, np.float64)) for a in args])
    y_gpu, g_gpu = grads([gt.constant(cp.asarray(np.asarray(a, np.float64))) for a in args])
    np.testing.assert_allclose(y_gpu.numpy(), y_cpu.numpy(), rtol=1e-10, atol=1e-12)
    for a, b in zip(g_gpu, g_cpu):
        assert a.device.startswith("cuda")
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.gpu
def test_cumprod_zeros_and_sort_on_gpu():
    from gputape.devices import backend

    cp = backend.cupy_module()
    v = np.array([[2.0, 0.0, 3.0, 4.0], [0.0, 1.0, 0.0, 2.0]])
    grads = []
    for data in (v, cp.asarray(v)):
        x = gt.constant(data)
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.cumprod(x, axis=1) * gt.sort(x, axis=0))
        grads.append(tape.gradient(y, x).numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)


# -- TensorFlow spellings ------------------------------------------------------------------------------


def test_tf_spellings_of_the_scans_and_reorders():
    import gputape.tf as tf

    a = r(3, 4)
    x = tf.constant(a)
    same(tf.math.cumsum(x, axis=1), np.cumsum(a, axis=1))
    same(tf.cumsum(x, axis=0, reverse=True), np.cumsum(a[::-1], axis=0)[::-1])
    same(tf.math.cumsum(x, axis=1, exclusive=True), np.cumsum(a, axis=1) - a)
    same(tf.math.cumprod(x, axis=1, exclusive=True, reverse=True), np.cumprod(a[:, ::-1], axis=1)[:, ::-1] / a)
    same(tf.reverse(x, [0, 1]), a[::-1, ::-1])
    same(tf.roll(x, shift=[1, -1], axis=[0, 1]), np.roll(a, (1, -1), (0, 1)))
    same(tf.sort(x, direction="DESCENDING"), -np.sort(-a))
    same(tf.argsort(x, axis=0), np.argsort(a, axis=0).astype("int32"))
    same(tf.tile(x, [1, 2]), np.tile(a, (1, 2)))
    same(tf.repeat(x, 2, axis=0), np.repeat(a, 2, axis=0))
    same(tf.tensordot(x, tf.constant(a.T), axes=1), a @ a.T)
    with pytest.raises(ValueError, match="multiples for a tensor of rank 2"):
        tf.tile(x, [2])
    with pytest.raises(ValueError, match="direction"):
        tf.sort(x, direction="UP")
    check_grads(lambda v: tf.math.cumprod(v, axis=1, exclusive=True, reverse=True), a, order=2)
    check_grads(lambda v: tf.sort(v, direction="DESCENDING") * v, apart(2, 3), order=2)
