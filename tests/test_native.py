"""The optional C accelerator gputape._native against the Python code it replaces.

Each C object keeps its Python reference (``.fallback``): the recorders' nodes are compared
field by field with the nodes the Python recorders build for the same op on the same tapes,
every unusual case is seen to take the Python path, the compiled backward's structural key
and relevance set are compared over every primitive and a seeded generator of random programs
(the C twin keeps the slot positions to itself), and gradient()'s C results with the Python
ones. Skipped (with the reason) where the extension is not in use; a machine with a C compiler
and Python's headers must have built it (a broken build fails here, not silently).
"""

from __future__ import annotations

import os
import shutil
import sysconfig

import numpy as np
import pytest
from test_grad_registry import ALL, _flat

import gputape as gt
from gputape import _backward_compile as bc
from gputape import config
from gputape.primitive import _NOPARAMS, _NOSAVED, Node

native = pytest.mark.skipif(not config.native_enabled(), reason=f"gputape._native: {config._native_why}")


def _can_build() -> bool:
    include = sysconfig.get_paths().get("include") or ""
    return bool(shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")) and os.path.exists(
        os.path.join(include, "Python.h")
    )


def test_the_extension_is_built_where_it_can_be():
    if not config._native_switch:
        pytest.skip("GPUTAPE_NATIVE=0: the Python recorders and key are tested alone")
    if not _can_build():
        pytest.skip("no C compiler or no Python.h here: gputape runs on its Python code")
    assert config.native_enabled(), (
        f"a C compiler and Python.h are here but {config._native_why}; "
        "pip install -e . (or python setup.py build_ext --inplace) builds gputape/_native.c: read its errors"
    )


def test_the_switch_reads_the_environment():
    import subprocess
    import sys

    code = "import gputape as gt; print(gt.config.native_enabled(), gt.config._native_why)"
    env = {**os.environ, "GPUTAPE_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("False turned off by GPUTAPE_NATIVE=0"), out
    if config.native_enabled():
        env["GPUTAPE_NATIVE"] = "1"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
        assert out.startswith("True in use"), out


# -- the recorders ------------------------------------------------------------------------------


def _entry_points() -> list[tuple[str, object, int]]:
    """(name, public function, operands) of every generated entry point with a C recorder."""
    found = {}
    for name, prim in gt.REGISTRY.items():
        fn = prim.public
        rec = getattr(fn, "__globals__", {}).get("record")
        if rec is not None and type(rec).__name__ == "Recorder":
            found[name] = (name, fn, rec.fallback.__code__.co_argcount - 2)
    return sorted(found.values())


ENTRIES = _entry_points() if config.native_enabled() else []


def _recorder(fn):
    return fn.__globals__["record"]


def _same_node(c: Node, p: Node, c_res, p_res) -> None:
    """Two nodes of one op on the same operands: equal field by field (the outputs are each their own)."""
    assert type(c) is Node and type(p) is Node
    assert c.prim is p.prim
    assert c.params is p.params is _NOPARAMS
    assert type(c.ids) is tuple and c.ids == p.ids
    assert type(c.shapes) is tuple and c.shapes == p.shapes
    assert c.casts is None and p.casts is None
    assert c.info is None and p.info is None
    assert c.out == c_res._id and p.out == p_res._id and type(c.out) is int
    assert type(c.meta) is tuple and c.meta == p.meta and c.meta[1] is p.meta[1]
    assert type(c.saved) is type(p.saved) is list and len(c.saved) == len(p.saved)
    if not p.saved:
        assert c.saved is _NOSAVED and p.saved is _NOSAVED
    for a, b in zip(c.saved, p.saved):
        if b is p_res._data:
            assert a is c_res._data
        else:
            assert a is b  # the operand's array (or the raw number) itself, not a copy


def _operands(nargs, dtype):
    rng = np.random.default_rng(3)
    x = gt.constant(rng.uniform(0.2, 0.8, (3, 4)).astype(dtype))
    if nargs == 1:
        return [(x,)]
    xt = gt.constant(rng.uniform(0.2, 0.8, (4, 3)).astype(dtype))
    y = gt.constant(rng.uniform(0.2, 0.8, (3, 4)).astype(dtype))
    row = gt.constant(rng.uniform(0.2, 0.8, (4,)).astype(dtype))
    return [(x, y), (x, row), (row, x), (x, 0.5), (0.5, x), (x, 2), (x, x), (x, xt)]


def _both(fn, args):
    """The op once through the C recorder, once through its Python fallback, on the same tapes."""
    rec = _recorder(fn)
    ns = fn.__globals__
    with np.errstate(all="ignore"):
        f0, s0 = rec.fast, rec.slow
        c_res = fn(*args)
        took = (rec.fast - f0, rec.slow - s0)
        ns["record"] = rec.fallback
        try:
            # (a C Entry holds the C recorder it was made with: its Python function reads ``record``)
            p_res = getattr(fn, "__wrapped__", fn)(*args)
        finally:
            ns["record"] = rec
    return c_res, p_res, took


@native
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize(("name", "fn", "nargs"), ENTRIES, ids=[e[0] for e in ENTRIES])
def test_c_and_python_recorders_build_the_same_node(name, fn, nargs, dtype):
    ran = 0
    for args in _operands(nargs, dtype):
        if nargs == 2 and args[0] is args[1] and fn.__globals__.get("same_op") is not None:
            continue  # x op x is the one-operand primitive (its own entry point)
        tensors = [a for a in args if isinstance(a, gt.Tensor)]
        with gt.GradientTape() as outer, gt.GradientTape() as inner:
            outer.watch(tensors)
            inner.watch(tensors)
            try:
                c_res, p_res, took = _both(fn, args)
            except (ValueError, TypeError):
                continue  # operands this op refuses (matmul of (3, 4) and (3, 4)), on both paths alike
        ran += 1
        if any(t.dtype != c_res.dtype for t in tensors):  # a promotion (erf of float16): a cast, the Python path
            assert took == (0, 1), f"{name}{[type(a).__name__ for a in args]}: the Python path expected, {took}"
            continue
        assert took == (1, 0), f"{name}{[type(a).__name__ for a in args]}: fast path expected, {took}"
        for tape in (outer, inner):
            c, p = tape._nodes[-2:]
            _same_node(c, p, c_res, p_res)
            assert c_res._id in tape._tensors and p_res._id in tape._tensors
        assert outer._nodes[-1] is inner._nodes[-1]  # one node on both tapes, as the Python path does
        np.testing.assert_array_equal(c_res.numpy(), p_res.numpy())
    assert ran, f"{name}: no operands it accepts"


def _fallback_cases():
    """(why, build) pairs: build() runs gt.multiply/gt.tanh in a setting the C recorder leaves to Python."""
    x32 = gt.constant(np.array([0.5, 0.25], np.float32))
    x64 = gt.constant(np.array([0.5, 0.25], np.float64))
    v = gt.Variable(np.array([0.5, 0.25], np.float32))
    z = gt.constant(np.array([0.5 + 1j, 0.25], np.complex64))
    i = gt.constant(np.array([1, 2], np.int32))
    j = gt.constant(np.array([3, 4], np.int32))

    def watched(*ts):
        def run(f):
            with gt.GradientTape() as t:
                t.watch(list(ts))
                f()
            return t

        return run

    def cast():
        return watched(x32, x64)(lambda: gt.multiply(x32, x64))

    def subclass():  # a Variable read under a tape class of the user's: its _watch_variable is Python's
        class Tape(gt.GradientTape):
            pass

        with Tape() as t:
            gt.multiply(v, x32)
        assert t.watched_variables() == (v,)
        return t

    def complex_():
        return watched(z)(lambda: gt.tanh(z))

    def integer():  # an integer result inside a tape
        return watched(x32)(lambda: gt.multiply(i, j))

    def untracked():
        with gt.GradientTape() as t1:
            t1.watch(x32)
            with gt.GradientTape() as t2:  # watches nothing: the op's edge is noted for explain
                gt.tanh(x32)
        assert t2._edges and not t2._nodes
        return t1

    def paused():
        with gt.GradientTape() as t1:
            t1.watch(x32)
            with gt.GradientTape() as t2:
                t2.watch(x32)
                with t2.stop_recording():  # a paused tape: the debug hook marks the cut
                    gt.tanh(x32)
        return t1

    def locations():
        with gt.debug.record_locations(), gt.GradientTape() as t:
            t.watch(x32)
            gt.tanh(x32)
        assert t._nodes[-1].info is not None
        return t

    def numerics():
        with gt.debug.check_numerics(), gt.GradientTape() as t:
            t.watch(x32)
            gt.tanh(x32)
        return t

    def watchers():
        @gt.custom_gradient
        def f(a):
            return gt.tanh(a), lambda g: g

        return watched(x32)(lambda: f(x32))

    def traced():
        fn = gt.function(lambda a: gt.tanh(a))
        fn(x32)
        return None

    return [
        ("cast", cast),
        ("tape_subclass", subclass),
        ("complex", complex_),
        ("integer", integer),
        ("untracked", untracked),
        ("paused", paused),
        ("locations", locations),
        ("numerics", numerics),
        ("watchers", watchers),
        ("trace", traced),
    ]


@native
@pytest.mark.parametrize(("why", "build"), _fallback_cases(), ids=[c[0] for c in _fallback_cases()])
def test_every_unusual_case_takes_the_python_recorder(why, build):
    recs = [_recorder(gt.multiply), _recorder(gt.tanh)]
    before = [(r.fast, r.slow) for r in recs]
    build()
    after = [(r.fast, r.slow) for r in recs]
    fast = sum(a[0] - b[0] for a, b in zip(after, before))
    slow = sum(a[1] - b[1] for a, b in zip(after, before))
    assert fast == 0 and slow >= 1, (why, before, after)


@native
def test_without_tapes_nothing_is_recorded_and_gradients_agree():
    x = gt.constant(np.array([0.3, 0.7]))
    assert gt.tanh(x * 2.0).shape == (2,)  # no observer: the recorder is not even called
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.sum(gt.tanh(x * x + 1.0) * (3.0 - x))
    g = t.gradient(y, x).numpy()
    a = x.numpy()
    th = np.tanh(a * a + 1.0)
    want = (1 - th**2) * 2 * a * (3.0 - a) - th
    np.testing.assert_allclose(g, want, rtol=1e-12)


@native
def test_a_bad_recorder_construction_is_refused():
    prim = gt.REGISTRY["multiply"]
    with pytest.raises(ValueError, match="nargs must be 1 or 2"):
        config._native.Recorder(prim, 3, (), False, print)
    with pytest.raises(ValueError, match="saved position 2 of 2 operands"):
        config._native.Recorder(prim, 2, (2,), False, print)
    with pytest.raises(TypeError, match="fallback must be callable"):
        config._native.Recorder(prim, 2, (), False, None)


# -- the structural key -------------------------------------------------------------------------


@pytest.fixture
def compare_structures(monkeypatch):
    """Every _structure call of the compiled backward also runs the Python reference: all equal."""
    if not config.native_enabled():
        pytest.skip(f"gputape._native: {config._native_why}")
    monkeypatch.setattr(config, "_compile_backward", True)
    c_fn = bc._structure
    py_fn = c_fn.fallback
    calls = []

    def both(tape, seeds, source_ids, xp):
        want = py_fn(tape, seeds, source_ids, xp)
        got = c_fn(tape, seeds, source_ids, xp)
        assert type(got) is type(want)
        if type(want) is str:
            assert got == want
        else:
            assert got[0] == want[0], "the keys differ"
            assert hash(got[0]) == hash(want[0])
            assert got[1] is None and type(want[1]) is dict  # (the C twin keeps its positions in a table)
            assert got[2] == want[2], "the relevance sets differ"
            assert (got[2] is tape._tensors) == (want[2] is tape._tensors)
        calls.append(want if type(want) is str else "key")
        return got

    monkeypatch.setattr(bc, "_structure", both)
    gt.debug.clear_backward_cache()
    yield calls
    gt.debug.clear_backward_cache()


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize(("name", "i", "f", "args"), ALL, ids=[f"{n}-{i}" for n, i, _, _ in ALL])
def test_structure_of_every_primitive(compare_structures, name, i, f, args, persistent):
    xs = [gt.constant(np.asarray(a, np.float64)) for a in args]
    for sources in (xs, xs[:1]):  # a source subset: relevance flows forward from the sources
        with gt.GradientTape(persistent=persistent) as tape:
            tape.watch(xs)
            y = gt.sum(_flat(f(*xs)))
        tape.gradient(y, sources, unconnected_gradients="zero")
        if persistent:
            tape.gradient(y, sources, unconnected_gradients="zero")
    assert "key" in compare_structures


def _program(rng: np.random.Generator, tape_kw: dict):
    """A random straight-line program over float32/float64/complex values, Variables and constants."""
    unary = [gt.tanh, gt.exp, gt.sin, gt.negative, gt.square, gt.abs, gt.nn.sigmoid]
    binary = [gt.add, gt.subtract, gt.multiply, gt.maximum]
    n_leaves = int(rng.integers(1, 4))
    shape = (int(rng.integers(1, 4)), 3)
    dts = [np.float32, np.float64]
    leaves = [gt.constant(rng.standard_normal(shape).astype(dts[int(rng.integers(2))])) for _ in range(n_leaves)]
    var = gt.Variable(rng.standard_normal(shape).astype(np.float32))
    watched = [t for t in leaves if rng.random() < 0.7] or leaves[:1]
    with gt.GradientTape(**tape_kw) as tape:
        tape.watch(watched)
        pool = list(leaves) + [var]
        for _ in range(int(rng.integers(1, 12))):
            k = rng.random()
            a = pool[int(rng.integers(len(pool)))]
            if k < 0.35:
                out = unary[int(rng.integers(len(unary)))](a)
            elif k < 0.7:
                b = pool[int(rng.integers(len(pool)))] if rng.random() < 0.8 else float(rng.standard_normal())
                out = binary[int(rng.integers(len(binary)))](a, b)
            elif k < 0.8:  # a multi-output node
                out = gt.split(a, [1], axis=-1)[0]  # (rows, 1): broadcasts with the rest
            elif k < 0.88:  # a cast node
                out = gt.cast(a, np.float64 if a.dtype == np.float32 else np.float32)
            elif k < 0.94:  # complex through the middle
                z = gt.cast(a, np.complex128 if a.dtype == np.float64 else np.complex64)
                out = gt.real(z * z + 1.0)
            else:  # a broadcast against a row
                out = a * gt.constant(rng.standard_normal((shape[1],)).astype(np.float64))
            pool.append(out)
        y = gt.sum(pool[-1]) + gt.sum(gt.cast(pool[int(rng.integers(len(pool)))], pool[-1].dtype))
    k = int(rng.integers(3))
    sources = [watched, watched[:1], [var] + watched][k]
    return tape, y, sources


def test_structure_of_random_programs(compare_structures):
    rng = np.random.default_rng(20261201)
    for trial in range(150):
        persistent = bool(trial % 2)
        tape, y, sources = _program(rng, {"persistent": persistent})
        for _ in range(3 if persistent else 1):
            tape.gradient(y, sources, unconnected_gradients="zero")
    assert compare_structures.count("key") >= 150


def test_structure_of_a_long_chain_and_ids_past_a_c_integer(compare_structures):
    """Hundreds of ids (the C table grows several times), outputs that rebind a position, multi-output
    nodes; an id no C integer holds: the Python reference answers for the C twin."""
    x = gt.constant(np.array([0.5, 1.5, -0.25, 2.0]))

    def grad(persistent, compiled):
        with gt.GradientTape(persistent=persistent, compile=compiled) as tape:
            tape.watch(x)
            y = x
            for k in range(300):
                y = gt.tanh(y) * 0.9 if k % 3 else gt.concatenate(gt.split(y, 2), 0) + y
            s = gt.sum(y)
        return tape.gradient(s, x).numpy()

    for persistent in (False, True):
        want = grad(persistent, compiled=False)
        for _ in range(3):
            np.testing.assert_array_equal(grad(persistent, compiled=True), want)
    assert compare_structures.count("key") == 6 and bc.backward_cache_report()["hits"] == 2
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        w = gt.sum(gt.exp(x))
    args = (t, {w._id: np.ones(())}, [x._id], np)
    c_fn = config._native.Structure(bc._structure_py)  # (bc._structure: the fixture's comparison)
    assert c_fn(*args)[1] is None
    for big in (2**63, 2**70):
        t._nodes[0].ids = (big,)  # (no tensor has such an id: the C twin hands such a tape to Python)
        got = c_fn(*args)
        assert got == bc._structure_py(*args) and big in got[1]


def test_structure_reasons_and_nested_tapes(compare_structures):
    x = gt.constant(np.array([0.5, 1.5]))
    c = gt.constant(np.array([2.0, 3.0]))
    with gt.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with gt.GradientTape(persistent=True) as inner:
            inner.watch(x)
            y = gt.sum(gt.tanh(x) * x)
        g = inner.gradient(y, x)  # recorded by the outer tape (higher order): the sweep
        z = gt.sum(g * g)
    outer.gradient(z, x)
    outer.gradient(z, x)
    with gt.GradientTape() as t:
        t.watch(x)
        w = gt.sum(x * c)
    assert t.gradient(w, c) is None  # no source recorded
    # a tape holding Swept records
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        w = gt.sum(gt.exp(x))
    seeds = {w._id: np.ones(())}
    t._nodes = [n.swept() for n in t._nodes]  # as a sweep leaves a non-persistent tape's list
    assert bc._structure(t, seeds, [x._id], np) == "already_swept"
    assert "no_source_recorded" in compare_structures


@native
def test_structure_too_many_nodes_reads_max_nodes(monkeypatch):
    c_fn = bc._structure
    x = gt.constant(np.array([0.5]))
    with gt.GradientTape() as t:
        t.watch(x)
        y = gt.tanh(gt.tanh(gt.tanh(x)))
    args = (t, {y._id: np.ones(1)}, [x._id], np)
    monkeypatch.setattr(bc, "MAX_NODES", 2)
    assert c_fn(*args) == c_fn.fallback(*args) == "too_many_nodes"
    monkeypatch.setattr(bc, "MAX_NODES", 3)
    got, want = c_fn(*args), c_fn.fallback(*args)
    assert type(got) is tuple and (got[0], got[2]) == (want[0], want[2]) and got[1] is None
    with pytest.raises(TypeError, match=r"takes \(tape, seeds, source_ids, xp\)"):
        c_fn(t)


@native
def test_no_reference_is_leaked_or_lost():
    """Reference counts of everything the C code touches come back after many records and keys."""
    import gc
    import sys

    from gputape import tape as tp

    x = gt.constant(np.array([0.5, 0.25], np.float32))
    x64 = gt.constant(np.array([0.5, 0.25], np.float64))
    v = gt.Variable(np.array([0.5, 0.25], np.float32))
    prim = gt.REGISTRY["multiply"]
    watched = [x._data, x._id, x, prim, _NOPARAMS, _NOSAVED, x._data.dtype, x64._data, v._data]

    def work():
        for _ in range(200):
            with gt.GradientTape(persistent=True) as t:
                t.watch([x, x64])
                y = gt.tanh(x) * 2.0
                y = (3.0 - y) * x + y  # fast paths, with numbers on either side
                z = gt.multiply(x, x64) + gt.multiply(v, x)  # a cast (the Python path) and a Variable watched on read
                parts = gt.split(y, 2)  # a multi-output node
                s = gt.sum(parts[0]) + gt.sum(z)
            seeds = {s._id: np.ones(())}
            for sources in ([x._id], [x._id, x64._id], [123456789]):
                bc._structure(t, seeds, sources, np)
            t._nodes.append(t._nodes[0].swept())
            assert bc._structure(t, seeds, [x._id], np) == "already_swept"
            with pytest.raises(TypeError):
                bc._structure(t, seeds, [[1]], np)  # an unhashable source id: the error, nothing held
            tp._results([x._data, None, x._data.T], [x, x64, x], tp.UnconnectedGradients.ZERO, False)
            with pytest.raises(TypeError):
                tp._results(3, [x], tp.UnconnectedGradients.NONE, False)

    work()
    # the cyclic garbage work() leaves (pytest.raises' tracebacks hold its frames, and so tapes of float32
    # arrays: references to the dtype) is collected first, or the counts depend on when gc happens to run
    gc.collect()
    before = [sys.getrefcount(o) for o in watched]
    work()
    gc.collect()
    after = [sys.getrefcount(o) for o in watched]
    assert after == before


@native
def test_the_chain_benchmark_records_every_elementwise_op_in_c():
    """The eager chain of benchmarks/workloads.py: no op of it falls back (a guard on the fast path's conditions)."""
    from benchmarks import workloads

    x = gt.constant(workloads.chain_data())
    recs = {id(r): r for r in (_recorder(f) for f in (gt.tanh, gt.multiply, gt.add, gt.square))}.values()
    before = [(r.fast, r.slow) for r in recs]
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = x
        for i in range(workloads.K):
            y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
    fast = sum(r.fast - b[0] for r, b in zip(recs, before))
    slow = sum(r.slow - b[1] for r, b in zip(recs, before))
    assert (fast, slow) == (5 * workloads.K // 2, 0)
    assert len(tape._nodes) == fast


@native
def test_a_node_reuses_the_last_nodes_shape_tuples_only_where_they_are_its_own():
    """The recorder keeps the last node's shapes and meta tuples (per operand pattern) while the
    shape and dtype repeat: every node still equals the Python recorder's, across changes of shape
    (same size, other rank, 0-d, empty, broadcast), dtype and which operand is a number."""
    rng = np.random.default_rng(5)
    shapes = [(3, 4), (3, 4), (12,), (4, 3), (1, 12), (12, 1), (), (), (0, 4), (3, 4), (2, 3, 4), (3, 4)]
    seq = []
    for dtype in ("float32", "float64", "float32"):
        for shape in shapes:
            x = gt.constant(rng.uniform(0.2, 0.8, shape).astype(dtype))
            y = gt.constant(rng.uniform(0.2, 0.8, shape).astype(dtype))
            row = gt.constant(rng.uniform(0.2, 0.8, shape[-1:]).astype(dtype))
            seq += [(gt.tanh, (x,)), (gt.multiply, (x, y)), (gt.multiply, (x, 0.5)), (gt.multiply, (2.0, x))]
            seq += [(gt.subtract, (x, row)), (gt.subtract, (row, x)), (gt.multiply, (x, y))]
    last, reused = {}, 0
    for fn, args in seq:
        tensors = [a for a in args if isinstance(a, gt.Tensor)]
        with gt.GradientTape() as tape:
            tape.watch(tensors)
            c_res, p_res, took = _both(fn, args)
        assert took == (1, 0)
        c, p = tape._nodes
        _same_node(c, p, c_res, p_res)
        assert c.meta == (c_res.shape, c_res.dtype) and c.shapes == tuple(getattr(a, "shape", None) for a in args)
        key = (fn, tuple(isinstance(a, gt.Tensor) for a in args))
        own = all(t.shape == c_res.shape for t in tensors)  # (no broadcast: the tuples are kept)
        if key in last and own and last[key][:2] == (c_res.shape, c_res.dtype):
            assert c.meta is last[key][2] and c.shapes is last[key][3]
            reused += 1
        elif key in last:
            assert c.meta is not last[key][2]
        if own:
            last[key] = (c_res.shape, c_res.dtype, c.meta, c.shapes)
    assert reused >= 3 * 5  # (each dtype: multiply(x, y) twice a shape, and the repeated shapes)


def _variable_scenario(use_c: bool):
    """Variables read by multiply and tanh on nested tapes, tracked or not; what the tapes hold."""
    rec = {f: _recorder(f) for f in (gt.multiply, gt.tanh)}
    fns = {f: f if use_c else f.__wrapped__ for f in rec}
    mul, tanh = fns[gt.multiply], fns[gt.tanh]
    x = gt.constant(np.array([0.5, 0.25, 2.0], np.float32))
    v = gt.Variable(np.array([1.5, -0.5, 0.75], np.float32), name="v")
    w = gt.Variable(np.array([0.1, 0.2, 0.3], np.float32), name="w")
    frozen = gt.Variable(np.array([3.0, 4.0, 5.0], np.float32), trainable=False)
    u = gt.Variable(np.array([0.4, 0.5, 0.6], np.float32), name="u")
    saved = {f: f.__globals__["record"] for f in rec}
    counts = []
    try:
        if not use_c:
            for f, r in rec.items():
                f.__globals__["record"] = r.fallback
        with gt.GradientTape(persistent=True) as outer:
            with gt.GradientTape(persistent=True, watch_accessed_variables=False) as inner:
                inner.watch(v)
                before = sum(r.fast for r in rec.values())
                outs = [mul(v, x)]  # outer watches v on this read
                counts.append(sum(r.fast for r in rec.values()) - before)
                outs += [mul(v, x), mul(x, v), tanh(v), mul(v, 2.0), mul(3.0, v)]  # v tracked by both
                outs += [mul(v, w)]  # w: outer watches it, inner does not track it (nor watches it)
                counts.append(sum(r.fast for r in rec.values()) - before)
                outs += [mul(frozen, x), mul(x, frozen), tanh(frozen)]  # not trainable: never watched
                outs += [mul(outs[-1], v), mul(w, v), tanh(u), mul(u, x)]  # u: watched by outer on its read
                outs += [mul(frozen, v)]  # never watched, beside a value both tapes track: recorded in C
                counts.append(sum(r.fast for r in rec.values()) - before)
        grads = [[None if g is None else g.numpy().tobytes() for g in t.gradient(gt.sum(outs[k]), [v, w])]
                 for t in (outer, inner) for k in range(len(outs))]  # fmt: skip
    finally:
        for f in rec:
            f.__globals__["record"] = saved[f]
    ids = {x._id: "x", v._id: "v", w._id: "w", frozen._id: "frozen", u._id: "u"}
    ids.update({o._id: f"out{k}" for k, o in enumerate(outs)})

    def node(n):
        return (n.prim.name, tuple(ids.get(i, i) for i in n.ids), n.shapes, n.meta, ids[n.out],
                [s.tobytes() if hasattr(s, "tobytes") else s for s in n.saved], n.casts, n.params)  # fmt: skip

    tapes = [([node(n) for n in t._nodes], sorted(ids.get(i, "?") for i in t._tensors),
              [u.name for u in t.watched_variables()], sorted(ids.get(i, "?") for i in t._leaves))
             for t in (outer, inner)]  # fmt: skip
    return tapes, grads, counts


@native
def test_a_variable_is_recorded_and_watched_on_read_in_c_as_the_python_recorder_does():
    c_tapes, c_grads, c_counts = _variable_scenario(use_c=True)
    p_tapes, p_grads, p_counts = _variable_scenario(use_c=False)
    assert c_tapes == p_tapes and c_grads == p_grads
    # the first read (outer watches v) and every read of v and w in C; frozen's reads on values outer
    # does not track, and u's (outer watches it, inner neither tracks nor watches it): the Python
    # path, which notes the edge for explain
    assert c_counts == [1, 7, 10] and p_counts == [0, 0, 0]
    assert c_tapes[0][2] == ["v", "w", "u"] and c_tapes[1][2] == ["v"]  # outer: watched on read; inner: as told
    assert c_tapes[0][3] == ["u", "v", "w"] and c_tapes[1][3] == ["v"]  # the leaves


def _result_cases():
    """(grads, sources, diff) for tape._results: every branch of its common case and of _result."""
    rng = np.random.default_rng(7)
    a32 = rng.standard_normal((3, 4)).astype(np.float32)
    srcs = [gt.constant(a32), gt.Variable(a32.astype(np.float64)), gt.constant(a32.astype(np.float16)),
            gt.constant(a32.T), gt.constant(a32.astype(np.complex64)), gt.constant(np.arange(3)),
            gt.Variable(a32), gt.constant(a32)]  # fmt: skip
    grads = [a32.copy(), a32.astype(np.float64), a32.astype(np.float16), a32.T,  # a transposed view
             a32.astype(np.complex64), None, None, a32[:, :2]]  # fmt: skip
    return [(grads, srcs, False), (tuple(grads), srcs, False), ([gt.constant(g) if g is not None else None
            for g in grads], srcs, True), ([], [], False)]  # fmt: skip


@native
@pytest.mark.parametrize("unconnected", ["none", "zero"])
@pytest.mark.parametrize("case", range(4))
def test_c_results_wrap_gradients_as_the_python_reference_does(case, unconnected):
    import warnings

    from gputape import tape as tp

    grads, srcs, diff = _result_cases()[case]
    u = tp.UnconnectedGradients(unconnected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gt.GputapeWarning)  # (the integer source's, once per process)
        got = tp._results(grads, srcs, u, diff)
        want = tp._results_py(grads, srcs, u, diff)
    assert type(tp._results) is config._native.Results and type(got) is list and len(got) == len(want) == len(srcs)
    for g, w, raw in zip(got, want, grads):
        assert type(g) is type(w)
        if w is None:
            continue
        if diff and raw is not None:
            assert g is w is raw  # a tape records the gradient: its tensors themselves
            continue
        if raw is not None and w._data is raw:
            assert g._data is raw  # wrapped, not copied
        else:
            assert g._data is not raw  # a view made contiguous, or zeros
        np.testing.assert_array_equal(g.numpy(), w.numpy())
        assert g.dtype == w.dtype and g._id % 2 == w._id % 2 == 1  # constants' ids
    if not diff:
        assert len({t._id for t in got + want if t is not None}) == sum(t is not None for t in got + want)
