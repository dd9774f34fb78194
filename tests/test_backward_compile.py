"""The compiled backward (gputape.core.backward.compiled) equals the sweep, bit for bit, and is really taken.

Every comparison runs the same recording twice: with ``GradientTape(compile=False)`` (the sweep)
and with compilation on, three times (first sight: the sweep; second: compile and run; third: a
cache hit), and asserts through the counters that the compiled code produced the compared result.
"""

from __future__ import annotations

import subprocess
import sys
import types
import weakref

import numpy as np
import pytest
from bitwise_helpers import same_bits
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from test_grad_registry import ALL, COMPOSITES, _flat

import gputape as gt
from gputape.core import expr
from gputape.core.backward import compiled as bc
from gputape.core.primitive import Swept, records
from gputape.core.tensor import _wrap

report = gt.debug.backward_cache_report


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.setattr(gt.config, "_compile_backward", True)  # whatever GPUTAPE_COMPILE_BACKWARD says
    gt.debug.clear_backward_cache()
    yield
    gt.debug.clear_backward_cache()


def numpy_of(gs):
    return [None if g is None else g.numpy() for g in gs]


def run(record, comp, n=1, **kw):
    """Record with ``record(tape)`` (returns (target, sources)) ``n`` times; the last gradients."""
    out = None
    for _ in range(n):
        with gt.GradientTape(compile=comp, **{k: v for k, v in kw.items() if k == "persistent"}) as tape:
            target, sources = record(tape)
        out = tape.gradient(target, sources, **{k: v for k, v in kw.items() if k != "persistent"})
    return out


def check_compiled(record, **kw):
    """The sweep's gradients, then three compiled-enabled runs: the third must be a hit, all equal."""
    want = numpy_of(run(record, False, **kw))
    h0, c0 = report()["hits"], report()["compiles"]
    got = [numpy_of(run(record, True, **kw)) for _ in range(3)]
    r = report()
    # the second run compiled and ran the code, the third hit the cache
    assert (r["compiles"] - c0, r["hits"] - h0) == (1, 1), r
    assert "compile_error" not in r["fallbacks"], r
    for g in got:
        for k, (a, b) in enumerate(zip(g, want)):
            same_bits(a, b, f"source {k}")
    return want


# -- every primitive ---------------------------------------------------------------------------

_RNG = np.random.default_rng(7)


def _case_record(f, args, dtype):
    xs = [gt.constant(np.asarray(a, dtype)) for a in args]
    with gt.GradientTape(compile=False) as probe:
        probe.watch(xs)
        y0 = _flat(f(*xs))
    w = _RNG.standard_normal(y0.shape).astype(dtype if y0.dtype.kind != "c" else y0.dtype)

    def record(tape):
        tape.watch(xs)
        y = _flat(f(*xs))
        return gt.sum(y * w), xs

    return record


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("name", "i", "f", "args"), ALL, ids=[f"{n}-{i}" for n, i, _, _ in ALL])
def test_every_primitive_compiled_equals_sweep(name, i, f, args, dtype):
    check_compiled(_case_record(f, args, dtype), unconnected_gradients="zero")


@pytest.mark.parametrize(("name", "f", "args"), COMPOSITES, ids=[c[0] for c in COMPOSITES])
def test_composites_compiled_equal_sweep(name, f, args):
    check_compiled(_case_record(f, args, "float64"), unconnected_gradients="zero")


def test_the_cases_cover_the_registry():
    assert set(gt.REGISTRY) <= {n for n, _, _, _ in ALL}


@pytest.mark.parametrize("name", sorted(expr.DERIVATIVES))
def test_typed_literals_are_bitwise_the_python_numbers(name):
    """Each declared cotangent with its literals typed (the compiled backward's text) gives the
    bits and dtype the VJP's own text gives, on values that stress the conversion (signed zeros,
    infinities, NaN, subnormals), in float32 and float64, also with a constant operand that is a
    Python number (no dtype: its literals stay as written)."""
    d = expr.DERIVATIVES[name]
    rename = {"g": "g", "F": "F", "node": "node", **{f"a{j}": f"a{j}" for j in range(len(d.operands))}}
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-40, 3.7, -2.2]
    rng = np.random.default_rng(0)
    node = types.SimpleNamespace(params={p: 0.3 for p in d.params})
    tables: dict[str, object] = {}

    def name_of(table):
        for n, t in tables.items():
            if t is table:
                return n
        tables[f"K{len(tables)}"] = table
        return f"K{len(tables) - 1}"

    # a constant operand: only beside a tensor (a one-input op's input is always a tensor on a tape)
    last_constant = tuple(i != len(d.inputs) - 1 for i in range(len(d.inputs))) if len(d.inputs) > 1 else None
    for dt in (np.float32, np.float64):
        vals = {n: np.array(rng.permutation(special), dt) for n in (*d.inputs, "out", "g")}
        if name == "where":
            vals["cond"] = vals["cond"] > 0
        for tensors in {(True,) * len(d.inputs), last_constant} - {None}:
            env = {"F": gt.ops.raw_namespace(np), "node": node, "g": vals["g"]}
            for j, op in enumerate(d.operands):
                k = d.inputs.index(op) if op in d.inputs else None
                env[f"a{j}"] = vals[op] if k is None or tensors[k] else 0.75  # a constant operand: a number
            for k in range(len(d.inputs)):
                plain = d.python(k, rename)
                if plain is None:
                    continue
                typed = d.python_typed(k, rename, tensors, name_of)
                with np.errstate(all="ignore"):
                    want = eval(plain, dict(env))
                    got = eval(typed, {**env, **tables})
                same_bits(got, want, (name, k, dt, typed))


def test_declared_vjps_are_written_inline():
    """Elementwise primitives declared in gputape.core.expr do not call their VJP: their text is inline."""
    x = gt.constant(np.linspace(-1, 1, 5))

    def record(tape):
        tape.watch(x)
        return gt.sum(gt.tanh(x) * gt.exp(x)), [x]

    check_compiled(record)
    (fn,) = bc._cache.values()
    # tanh's derivative, over its saved output (its literal typed by the partner's dtype)
    assert "[(_k1 := a0 * a0).dtype] - _k1)" in fn.source
    assert "V" not in fn.source.split("V", 1)[0] and " = V" in fn.source  # sum's VJP is called
    assert fn.source.count(" = V") == 1


# -- the training-loop shapes: MLP step, a chain -----------------------------------------------


def test_mlp_step_with_variables():
    rng = np.random.default_rng(0)
    w1 = gt.Variable(rng.standard_normal((6, 5)).astype(np.float32))
    b1 = gt.Variable(np.zeros(5, np.float32))
    w2 = gt.Variable(rng.standard_normal((5, 3)).astype(np.float32))
    x = gt.constant(rng.standard_normal((4, 6)).astype(np.float32))
    labels = np.array([0, 2, 1, 2])

    def record(tape):
        h = gt.nn.relu(x @ w1 + b1)
        logp = gt.nn.log_softmax(h @ w2)
        return -gt.mean(logp[np.arange(4), labels]), [w1, b1, w2]

    check_compiled(record)


def test_long_chain():
    x = gt.constant(np.linspace(-1, 1, 16).astype(np.float32))

    def record(tape):
        tape.watch(x)
        y = x
        for i in range(40):
            y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        return gt.sum(y), [x]

    check_compiled(record)


# -- persistent and nested tapes -----------------------------------------------------------------


def test_persistent_tape_repeated_gradients_keep_residuals():
    x = gt.constant(np.array([0.5, -1.0, 2.0]))
    b = gt.constant(np.array(0.25))
    with gt.GradientTape(persistent=True, compile=False) as ref:
        ref.watch([x, b])
        y = gt.sum(gt.sin(x) * x + b)
    want = numpy_of(ref.gradient(y, [x, b]))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch([x, b])
        y = gt.sum(gt.sin(x) * x + b)
    held = tape.saved_bytes
    nodes = list(tape._nodes)
    for _ in range(4):  # the same tape: seen, compiled, hit, hit
        for a, w in zip(numpy_of(tape.gradient(y, [x, b])), want):
            same_bits(a, w)
        assert tape.saved_bytes == held  # nothing freed, nothing swapped for a skeleton
        assert tape._nodes == nodes
    assert report()["hits"] == 2 and report()["compiles"] == 1


def test_nested_tapes_first_and_second_order():
    x = gt.constant(np.array([0.3, -0.7]))

    def grads(comp):
        with gt.GradientTape(compile=comp) as outer:
            outer.watch(x)
            with gt.GradientTape(compile=comp) as inner:
                inner.watch(x)
                y = gt.sum(gt.tanh(x) * x)
            g1 = inner.gradient(y, x)  # outer records this: higher order, the sweep's job
        return g1.numpy(), outer.gradient(g1, x).numpy()

    want = grads(False)
    for _ in range(3):
        got = grads(True)
        same_bits(got[0], want[0])
        same_bits(got[1], want[1])
    r = report()
    assert r["fallbacks"]["recording_gradient"] == 3  # the inner gradients, recorded by the outer tape
    assert r["hits"] == 1 and r["compiles"] == 1  # the outer (second-order) gradients: seen, compiled, hit


def test_nested_tapes_sharing_nodes():
    """Two tapes that recorded the same nodes: the inner one's skeleton must not touch the outer's list."""
    x = gt.constant(np.array([0.3, -0.7, 1.1]))

    def grads(comp):
        with gt.GradientTape(compile=comp) as outer:
            outer.watch(x)
            with gt.GradientTape(compile=comp) as inner:
                inner.watch(x)
                y = gt.sum(gt.exp(x) * x)
            z = y * y
        return inner.gradient(y, x).numpy(), outer.gradient(z, x).numpy()

    want = grads(False)
    for _ in range(3):
        for a, w in zip(grads(True), want):
            same_bits(a, w)
    assert report()["hits"] == 2 and report()["compiles"] == 2


# -- structures that change ----------------------------------------------------------------------


def test_changing_shapes_compile_again_and_stay_right():
    xs = {n: gt.constant(np.linspace(-2, 2, n)) for n in (4, 7)}
    b = gt.constant(np.array([0.5]))

    def record_for(n):
        def record(tape):
            tape.watch([xs[n], b])
            return gt.sum(gt.tanh(xs[n] * 2.0 + b)), [xs[n], b]

        return record

    want = {n: numpy_of(run(record_for(n), False)) for n in xs}
    for _ in range(3):
        for n in xs:  # alternate: each shape is its own key
            for a, w in zip(numpy_of(run(record_for(n), True)), want[n]):
                same_bits(a, w)
    r = report()
    assert r["compiles"] == 2 and r["hits"] == 2 and r["misses"] == 4 and r["cached"] == 2


def test_broadcasting_and_casts():
    x = gt.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 10)
    b = gt.constant(np.array([0.5, -0.5, 1.0, 2.0]))  # float64: x's cotangent is cast back to float32
    c = gt.constant(np.array([[1.5], [0.5], [-1.0]], np.float32))

    def record(tape):
        tape.watch([x, b, c])
        y = gt.exp(x * c) + b
        return gt.sum(y * y), [x, b, c]

    g = check_compiled(record)
    assert g[0].dtype == np.float32 and g[1].dtype == np.float64 and g[2].shape == (3, 1)
    (fn,) = bc._cache.values()
    assert ".astype(" in fn.source and "F.sum_to(" in fn.source


def test_known_broadcasts_are_reduced_inline():
    """An elementwise node's cotangent has its output's shape, so the reductions back to each
    input's shape are written out (sum_to's own steps); the bits stay the sweep's."""
    rng = np.random.default_rng(3)
    x = gt.constant(rng.standard_normal((2, 3, 4)))
    b = gt.constant(rng.standard_normal(4))  # leading axes summed, then reshaped
    c = gt.constant(rng.standard_normal((3, 1)))  # a size-1 axis kept, a leading one dropped
    d = gt.constant(rng.standard_normal((1, 1, 4)))  # d * s has its shape; y - d * s: summed, ranks agree
    s = gt.constant(np.array(0.5))  # a scalar: every axis summed

    def record(tape):
        tape.watch([x, b, c, d, s])
        y = (x + b) * c - d * s
        return gt.sum(gt.tanh(y)), [x, b, c, d, s]

    g = check_compiled(record)
    assert [a.shape for a in g] == [(2, 3, 4), (4,), (3, 1), (1, 1, 4), ()]
    (fn,) = bc._cache.values()
    assert fn.source.count("ADD_REDUCE(") == 4, fn.source  # b, c, d * s (to d's shape), s
    assert "ADD_REDUCE(t1, axis=(0, 1), keepdims=True).reshape((4,))" in fn.source
    assert "ADD_REDUCE(t1, axis=(0, 1, 2), keepdims=True).reshape(())" in fn.source


@settings(max_examples=60, deadline=None)
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
    batch=st.sampled_from([(), (2,)]),
)
def test_sum_to_and_its_plan_undo_broadcasting(shapes, batch):
    """sum_to (the sweep's and, through its plan, the compiled code's reduction) sums a cotangent
    over exactly the axes broadcasting added, for any shapes and a jacobian's batch of cotangents."""
    from gputape.core.backward.sweep import sum_to
    from gputape.ops import raw_namespace

    small, big = shapes.input_shapes[0], shapes.result_shape
    g = np.random.default_rng(len(big)).standard_normal(batch + big)
    want = np.stack([_unbroadcast(r, small) for r in g]) if batch else _unbroadcast(g, small)
    got = sum_to(raw_namespace(np), g, batch + small, len(batch))
    assert got.shape == batch + small
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _unbroadcast(g, shape):
    """``g`` summed to ``shape`` element by element (independent of gputape): every element of the
    broadcast result adds into the one input element it was read from."""
    out = np.zeros(shape)
    for idx in np.ndindex(g.shape):
        src = tuple(i if d != 1 else 0 for i, d in zip(idx[g.ndim - len(shape) :], shape))
        out[src] += g[idx]
    return out


def test_repeated_and_intermediate_sources():
    x = gt.constant(np.array([1.0, 2.0, -0.5]))
    holder = {}

    def record(tape):
        tape.watch(x)
        h = gt.sin(x)
        holder["h"] = h
        return gt.sum(h * x), [x, h, x, h]

    g = check_compiled(record)
    same_bits(g[0], g[2])
    np.testing.assert_allclose(g[1], holder["h"].numpy() * 0 + np.array([1.0, 2.0, -0.5]))


@pytest.mark.parametrize("mode", ["none", "zero"])
def test_unconnected_sources(mode):
    x = gt.constant(np.array([1.0, 2.0]))
    u = gt.constant(np.array([3.0]))
    v = gt.Variable(np.array([4.0, 5.0]))  # read by no op

    def record(tape):
        tape.watch([x, u])
        return gt.sum(x * x), [x, u, v]

    g = check_compiled(record, unconnected_gradients=mode)
    if mode == "none":
        assert g[1] is None and g[2] is None
    else:
        same_bits(g[1], np.zeros(1))
        same_bits(g[2], np.zeros(2))


def test_a_target_that_is_a_source_and_output_gradients():
    x = gt.constant(np.array([1.0, 2.0]))
    og = np.array([0.5, -2.0])

    def record(tape):
        tape.watch(x)
        y = gt.cos(x)
        return [y, x], [x, y]

    check_compiled(record, output_gradients=[og, og])


def test_relevance_is_part_of_the_structure():
    """Same ops and wiring, but a cotangent flows to different places: different code, each right."""
    x = gt.constant(np.array([0.5, 1.5]))
    c = gt.constant(np.array([2.0, -1.0]))

    def leaf_watched(watch_c):  # c a watched leaf, or an untracked constant
        def record(tape):
            tape.watch([x, c] if watch_c else x)
            return gt.sum(gt.sin(x) * c), [x, c]

        return record

    def intermediate_unwatched(unwatch):  # an op output dropped from the tape by unwatch()
        def record(tape):
            tape.watch(x)
            h = gt.sin(x)
            y = gt.sum(h * x)
            if unwatch:
                tape.unwatch(h)
            return y, [x]

        return record

    def target_unwatched(unwatch):  # the target itself dropped
        def record(tape):
            tape.watch(x)
            y = gt.sum(gt.sin(x))
            if unwatch:
                tape.unwatch(y)
            return y, [x]

        return record

    for make in (leaf_watched, intermediate_unwatched, target_unwatched):
        want = {k: numpy_of(run(make(k), False)) for k in (False, True)}
        assert not all(
            a is not None and b is not None and np.array_equal(a, b) for a, b in zip(want[False], want[True])
        )
        for _ in range(3):
            for k in (False, True):
                for a, w in zip(numpy_of(run(make(k), True)), want[k]):
                    same_bits(a, w)
    assert report()["compiles"] == 6


def test_a_watched_leaf_that_is_not_a_source():
    """The sweep's other relevance rule: a forward pass from the sources (not every watched value is one)."""
    x = gt.constant(np.array([0.5, 1.5]))
    c = gt.constant(np.array([2.0, -1.0]))

    def record(tape):
        tape.watch([x, c])
        h = gt.exp(c) * 3.0  # depends on c only: its VJP never runs
        return gt.sum(gt.sin(x) * h + x), [x]

    check_compiled(record)
    (fn,) = bc._cache.values()
    assert fn.source.count("n = N[") == 4  # sum, add, multiply, sin: not exp or the multiply by 3


def test_primitives_targets_and_persistence_are_part_of_the_structure():
    x = gt.constant(np.array([0.5, 1.5]))
    recs = {
        "sin": lambda tape: (tape.watch(x), gt.sum(gt.sin(x)))[1:] + ([x],),
        "cos": lambda tape: (tape.watch(x), gt.sum(gt.cos(x)))[1:] + ([x],),
    }

    def two_targets(first):
        def record(tape):
            tape.watch(x)
            a, b = gt.sum(gt.exp(x)), gt.sum(gt.sin(x))
            return (a if first else b), [x]

        return record

    recs["exp"] = two_targets(True)
    recs["sin-of-two"] = two_targets(False)
    want = {k: numpy_of(run(r, False)) for k, r in recs.items()}
    for _ in range(3):
        for k, r in recs.items():
            same_bits(numpy_of(run(r, True))[0], want[k][0], k)
    assert report()["compiles"] == 4
    # a persistent and a non-persistent tape of one structure: a persistent one is never skeletonized
    for _ in range(3):
        for persistent in (False, True):
            with gt.GradientTape(persistent=persistent) as tape:
                tape.watch(x)
                y = gt.sum(gt.tanh(x))
            for _ in range(2 if persistent else 1):
                same_bits(tape.gradient(y, x).numpy(), 1 - np.tanh(x.numpy()) ** 2)
    assert report()["compiles"] == 6


def test_consumed_cotangents_are_freed_during_the_backward():
    x = gt.constant(np.linspace(0, 1, 10))
    state = {}

    @gt.custom_gradient
    def late(a):
        def grad(dy):
            state["late"] = weakref.ref(dy._data)
            return dy * 2.0

        return a * 1.0, grad

    @gt.custom_gradient
    def early(a):
        def grad(dy):
            state["dead"].append(state["late"]() is None)  # the sweep popped it after late's VJP
            return dy * 1.0

        return a * 1.0, grad

    state["dead"] = []
    for comp in (False, True, True, True):
        with gt.GradientTape(compile=comp) as tape:
            tape.watch(x)
            y = gt.sum(late(gt.exp(early(x))))
        tape.gradient(y, x)
    assert state["dead"] == [True] * 4 and report()["hits"] == 1


def test_on_a_fake_gpu_the_vjps_are_called_not_inlined(monkeypatch):
    from fake_gpu import FakeArray, FakeCupy

    from gputape.core import expr
    from gputape.devices import backend

    def record_on(x):
        def record(tape):
            tape.watch(x)
            return gt.sum(gt.tanh(x) * x), [x]

        return record

    check_compiled(record_on(gt.constant(np.linspace(-1, 1, 5))))  # the same structure on the CPU first
    monkeypatch.setattr(backend, "_cupy", FakeCupy())
    monkeypatch.setattr(backend, "_probed", {})
    monkeypatch.setattr(expr, "launch_dtype", lambda dt: None)  # the fake runs no kernels
    x = gt.constant(FakeCupy().asarray(np.linspace(-1, 1, 5)))
    assert type(x._data) is FakeArray
    check_compiled(record_on(x))
    cpu, gpu = bc._cache.values()  # one structure, two devices: two keys
    assert "a0 * a0" in cpu.source and cpu.source.count(" = V") == 1
    assert "a0 * a0" not in gpu.source and gpu.source.count(" = V") == 3


# -- residuals -------------------------------------------------------------------------------------


def test_aliased_and_equal_residuals_share_the_structure():
    """The same array saved by two nodes, or two equal arrays: the same key, and each right."""
    arr = np.array([0.5, 1.5, -2.0])
    x = gt.constant(np.array([1.0, -1.0, 0.5]))
    one = _wrap(arr)
    shared = (one, _wrap(arr))  # two tensors, one array: saved by two nodes, aliased
    copies = (_wrap(arr.copy()), _wrap(arr.copy()))

    def record_with(w):
        def record(tape):
            tape.watch(x)
            return gt.sum(gt.exp(x * w[0]) * w[1]), [x]

        return record

    assert shared[0]._data is shared[1]._data and copies[0]._data is not copies[1]._data
    want = numpy_of(run(record_with(shared), False))
    for w in (shared, copies, shared, copies):
        same_bits(numpy_of(run(record_with(w), True))[0], want[0])
    r = report()
    assert r["compiles"] == 1 and r["hits"] == 2 and r["cached"] == 1


def test_non_persistent_tape_frees_residuals_and_keeps_the_skeleton():
    x = gt.constant(np.linspace(0, 1, 1000))

    def record(tape):
        tape.watch(x)
        return gt.sum(gt.exp(gt.sin(x))), x

    skeletons = {}
    for comp in (False, True, True, True):
        with gt.GradientTape(compile=comp) as tape:
            tape.watch(x)
            h = gt.exp(x)
            ref = weakref.ref(h._data)
            y = gt.sum(gt.sin(h))
        del h
        assert ref() is not None  # saved by exp (its output) and sin (its input)
        tape.gradient(y, x)
        assert ref() is None  # freed with their nodes
        assert tape.saved_bytes == 0
        skeletons[comp] = [(n.prim.name, len(n.ids), type(n.out)) for n in records(tape._retired._nodes)]
        assert tape.explain(y, x).reason == "connected"
    assert skeletons[True] == skeletons[False]
    assert report()["hits"] == 1 and report()["compiles"] == 1


def test_residuals_are_freed_during_the_backward_as_the_sweep_frees_them():
    """When an early op's VJP runs, the later ops' residuals are gone already (peak memory)."""
    x = gt.constant(np.linspace(0, 1, 100))
    seen = []

    @gt.custom_gradient
    def first(a):
        def grad(dy):
            seen.append(ref() is None)  # exp's node, swept before this one, dropped its residual
            return dy

        return a * 1.0, grad

    for comp in (False, True, True, True):
        with gt.GradientTape(compile=comp) as tape:
            tape.watch(x)
            h = gt.exp(first(x))
            ref = weakref.ref(h._data)
            y = gt.sum(h)
        del h
        tape.gradient(y, x)
    assert seen == [True] * 4
    assert report()["hits"] == 1 and report()["compiles"] == 1


def test_explain_after_gradient_matches_the_sweep():
    x = gt.constant(np.array([1.0, 2.0]))
    c = gt.constant(np.array([3.0, 4.0]))
    answers = {}
    for comp in (False, True, True, True):
        with gt.GradientTape(compile=comp) as tape:
            tape.watch(x)
            y = gt.sum(x * gt.stop_gradient(x * c))
        tape.gradient(y, [x, c])
        e1, e2 = tape.explain(y, x), tape.explain(y, c)
        answers.setdefault(comp, []).append((e1.reason, e2.reason, str(e1), str(e2)))
    assert all(a == answers[False][0] for a in answers[True])
    assert report()["hits"] == 1 and report()["compiles"] == 1


@pytest.mark.parametrize("comp", [False, True])
def test_the_retired_snapshot_keeps_the_whole_recording(comp):
    """After gradient() a non-persistent tape keeps an id-only snapshot for explain(): every field
    of the recording (a field added to the tape later must be added to the snapshot too)."""
    x = gt.constant(np.array([1.0, 2.0]))
    for _ in range(3):  # seen, compiled, hit
        with gt.GradientTape(compile=comp) as tape:
            tape.watch(x)
            y = gt.sum(gt.exp(x) * gt.stop_gradient(x))
        fields = dict(vars(tape))
        tape.gradient(y, x)
        kept = vars(tape._retired)
        assert set(fields) - {"_undo"} == set(kept), set(fields) ^ set(kept)
        for k, v in fields.items():
            if k not in ("_undo", "_retired"):
                assert kept[k] is v or kept[k] == v, k
        assert kept["_retired"] is None
        # no residuals kept (plain records, made Swept for the readers: gputape.core.primitive.records)
        assert [type(n).__name__ for n in tape._retired._nodes] == ["tuple"] * 3
        assert [n.prim.name for n in records(tape._retired._nodes)] == ["exp", "multiply", "sum"]
        assert {type(n) for n in tape._retired._nodes} == {Swept}
        assert tape._nodes == [] and tape._tensors is None and tape._used
    assert report()["hits"] == (1 if comp else 0)


# -- dynamic None: custom gradients ----------------------------------------------------------------


def test_custom_gradient_whose_grad_fn_returns_none_on_some_calls():
    x = gt.constant(np.array([1.0, 2.0]))
    calls = []

    @gt.custom_gradient
    def f(a):
        def grad(dy):
            calls.append(1)
            return None if len(calls) % 2 else dy * 3.0

        return a * 2.0, grad

    for _ in range(4):  # grad_fn alternates None / a gradient, whatever the cache holds
        with gt.GradientTape(compile=False) as t0:
            t0.watch(x)
            y0 = gt.sum(f(x) * x)
        want = t0.gradient(y0, x).numpy()
        with gt.GradientTape() as t1:
            t1.watch(x)
            y1 = gt.sum(f(x) * x)
        del calls[-1]  # the compiled run sees grad_fn in the same state as the sweep did
        same_bits(t1.gradient(y1, x).numpy(), want)
        calls.append(1)
    assert report()["hits"] == 2


def test_custom_gradient_none_as_the_only_path():
    x = gt.constant(np.array([1.0, 2.0]))

    @gt.custom_gradient
    def f(a):
        return a * 2.0, lambda dy: None

    for _ in range(3):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(f(x))
        assert tape.gradient(y, x) is None
    assert report()["hits"] == 1


def test_an_error_in_a_vjp_propagates_and_retires_the_tape():
    x = gt.constant(np.array([1.0]))

    @gt.custom_gradient
    def f(a):
        def grad(dy):
            raise ZeroDivisionError("from grad_fn")

        return a * 1.0, grad

    for _ in range(3):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(f(x))
        with pytest.raises(ZeroDivisionError, match="from grad_fn"):
            tape.gradient(y, x)
        with pytest.raises(RuntimeError, match="only be used to compute one set"):
            tape.gradient(y, x)
    assert report()["hits"] == 1


# -- fallbacks, switches, counters -----------------------------------------------------------------


def _loop(n=3, comp=True, persistent=False):
    x = gt.constant(np.array([0.1, 0.2]))
    for _ in range(n):
        with gt.GradientTape(compile=comp, persistent=persistent) as tape:
            tape.watch(x)
            y = gt.sum(gt.exp(x))
        g = tape.gradient(y, x)
    return g


def test_opt_out_per_tape_and_globally():
    _loop(comp=False)
    assert report()["compiles"] == 0 and report()["fallbacks"] == {"opted_out": 3}
    gt.config.set_backward_compilation(False)
    try:
        assert report()["enabled"] is False
        _loop()
    finally:
        gt.config.set_backward_compilation(True)
    assert report()["compiles"] == 0 and report()["fallbacks"] == {"opted_out": 6}
    _loop()
    assert report()["compiles"] == 1 and report()["hits"] == 1
    with pytest.raises(TypeError, match="set_backward_compilation"):
        gt.config.set_backward_compilation("no")


def test_environment_variable_turns_it_off():
    code = "import gputape as gt; print(gt.config.get_backward_compilation())"
    for value, expect in (("0", "False"), ("off", "False"), ("1", "True")):
        env = {"GPUTAPE_COMPILE_BACKWARD": value, "PATH": "", "GPUTAPE_DEVICE": "cpu"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expect


def test_check_numerics_and_traces_use_the_sweep():
    with gt.debug.check_numerics():
        _loop()
    assert report()["fallbacks"] == {"check_numerics": 3} and report()["compiles"] == 0
    x = gt.constant(np.array([0.1, 0.2]))

    @gt.function
    def step(a):
        with gt.GradientTape() as tape:
            tape.watch(a)
            y = gt.sum(gt.exp(a))
        return tape.gradient(y, a)

    for _ in range(3):
        same_bits(step(x).numpy(), np.exp(x.numpy()))
    assert report()["fallbacks"]["gt.function_trace"] == 1  # traced once; replays never call gradient()


def test_jacobians_stay_on_the_sweep():
    x = gt.constant(np.array([0.1, 0.2]))
    for _ in range(3):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.exp(x)
        tape.jacobian(y, x)
    r = report()
    assert r["hits"] == r["misses"] == r["compiles"] == 0


def test_lru_bound_and_evictions(monkeypatch):
    monkeypatch.setattr(bc, "CACHE_SIZE", 2)
    xs = [gt.constant(np.ones(n)) for n in (1, 2, 3)]

    def once(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.sin(x))
        return tape.gradient(y, x).numpy()

    for x in xs:  # each seen twice: compiled
        once(x)
        once(x)
    r = report()
    assert r["compiles"] == 3 and r["cached"] == 2 and r["evictions"] == 1
    once(xs[0])  # evicted, and no longer "seen": a miss
    assert report()["misses"] == r["misses"] + 1 and report()["hits"] == r["hits"]
    once(xs[2])
    assert report()["hits"] == r["hits"] + 1


def test_the_latest_structure_is_found_without_the_dict_and_forgotten_with_it(monkeypatch):
    """A loop's next tape is compared with the latest hit's key first; an evicted or cleared function is
    not found that way either."""
    x, z = gt.constant(np.ones(2)), gt.constant(np.ones(3))

    def once(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.sin(x))
        return tape.gradient(y, x).numpy()

    once(x), once(x)
    h = report()["hits"]
    for _ in range(3):
        np.testing.assert_array_equal(once(x), np.cos(np.ones(2)))
    assert report()["hits"] == h + 3 and bc._last[1] is next(iter(bc._cache.values()))
    monkeypatch.setattr(bc, "CACHE_SIZE", 1)
    once(z), once(z)  # z's structure compiled: x's, the latest until now, is evicted
    assert report()["evictions"] == 1 and bc._last[1] is bc._cache[bc._last[0]]
    m = report()["misses"]
    once(x)
    assert report()["misses"] == m + 1
    gt.debug.clear_backward_cache()
    assert bc._last == (None, None)
    once(z)
    assert report()["misses"] == 1 and report()["hits"] == 0
    monkeypatch.setattr(bc, "CACHE_SIZE", 0)  # nothing kept: nothing found later either
    for _ in range(3):
        once(x)
    assert report()["hits"] == 0 and report()["cached"] == 0 and bc._last == (None, None)


def test_eviction_takes_the_least_recently_used_not_the_oldest(monkeypatch):
    monkeypatch.setattr(bc, "CACHE_SIZE", 2)
    a, b, c = (gt.constant(np.ones(n)) for n in (1, 2, 3))

    def once(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.sin(x))
        tape.gradient(y, x)

    for x in (a, a, b, b):  # a compiled, then b
        once(x)
    once(a)  # a hit: a is now the more recent
    h = report()["hits"]
    once(c)
    once(c)  # c compiled: b goes, not the older a
    assert report()["evictions"] == 1
    once(a)
    assert report()["hits"] == h + 1
    once(b)
    assert report()["hits"] == h + 1 and report()["misses"] >= 5


def test_profiler_sees_every_backward_op_the_sweep_runs_them_while_it_profiles(tmp_path):
    """The profiler times each VJP where the sweep calls it: while it runs, tapes take the sweep."""
    _loop(n=3)  # compiled and hit before the profile
    before = report()
    assert before["hits"] >= 1
    with gt.profiler.profile(str(tmp_path)) as prof:
        _loop(n=4)
    assert prof.result.stats["exp"]["backward_calls"] == 4
    after = report()
    assert after["hits"] == before["hits"]
    assert after["fallbacks"].get("profiler", 0) == before["fallbacks"].get("profiler", 0) + 4
    _loop(n=1)
    assert report()["hits"] == before["hits"] + 1  # and the compiled code again afterwards


def test_generated_code_for_a_multi_output_primitive():
    x = gt.constant(np.arange(6.0).reshape(3, 2))

    def record(tape):
        tape.watch(x)
        a, _, c = gt.split(x, 3, axis=0)
        return gt.sum(a * 2.0 + c), [x]

    check_compiled(record)


@pytest.mark.gpu
def test_compiled_equals_sweep_on_gpu():
    """On a GPU nothing is inlined (the VJPs run their kernels): still the sweep's operations."""
    x = gt.constant(np.linspace(-1, 1, 256).astype(np.float32)).to("cuda")
    w = gt.constant(np.linspace(0, 1, 256).astype(np.float32)).to("cuda")

    def record(tape):
        tape.watch([x, w])
        return gt.sum(gt.tanh(x * w) * gt.exp(x) + w), [x, w]

    want = run(record, False)
    for _ in range(3):
        got = run(record, True)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert report()["hits"] >= 2


def test_the_benchmark_measures_the_compiled_path():
    from benchmarks import compiled_backward

    m = compiled_backward.measure(compiled_backward.chain_recorder(), rounds=2, block=2)
    assert m["nodes"] == 251 and m["sweep_us"] > 0 and m["compiled_us"] > 0 and m["key_us"] > 0
    r = report()
    assert r["compiles"] == 1 and r["hits"] >= 2 * 2 + 1 and r["fallbacks"]["opted_out"] >= 2 * 2 + 1


def test_threads_share_the_cache():
    import threading

    xs = [gt.constant(np.linspace(-1, 1, 8) + k) for k in range(4)]
    want = [numpy_of(run(lambda tape, x=x: (tape.watch(x), gt.sum(gt.tanh(x) * x))[1:] + ([x],), False))[0] for x in xs]
    errors = []

    def work(k):
        x = xs[k]
        try:
            for _ in range(30):
                got = run(lambda tape: (tape.watch(x), gt.sum(gt.tanh(x) * x))[1:] + ([x],), True)
                same_bits(got[0].numpy(), want[k])
        except Exception as exc:  # reported below: an assertion in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert report()["hits"] >= 100 and report()["cached"] == 1


def test_a_tape_holding_swept_records_takes_the_sweep_path():
    x = gt.constant([1.0, 2.0])
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = gt.sum(gt.exp(x))
    y_id = y._id
    tape._nodes = [n.swept() for n in tape._nodes]  # as a sweep leaves a non-persistent tape's list
    assert bc._structure(tape, {y_id: np.ones(())}, [x._id], gt.ops.raw_namespace(np)) == "already_swept"


# -- random graphs ---------------------------------------------------------------------------------

_UNARY_OPS = (gt.tanh, gt.exp, gt.sin, gt.square, gt.negative, lambda t: gt.sum(t, axis=0, keepdims=True))
_BINARY_OPS = (gt.add, gt.multiply, gt.subtract, lambda a, b: a * 0.5 + b)


@settings(max_examples=60, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=14
    ),
    nsrc=st.integers(1, 3),
    shapes=st.lists(st.sampled_from([(3,), (1,), (2, 3), (1, 3)]), min_size=3, max_size=3),
    watch_all=st.booleans(),
    persistent=st.booleans(),
)
def test_random_graphs_compiled_equal_sweep(plan, nsrc, shapes, watch_all, persistent):
    """Fan-out, repeated operands, broadcasting, unconnected branches, unwatched leaves, intermediate
    sources: whatever wiring a program makes, the compiled backward's bits are the sweep's."""
    gt.debug.clear_backward_cache()
    rng = np.random.default_rng(len(plan))
    leaves = [gt.constant(rng.standard_normal(s) * 0.5) for s in shapes]

    def record(tape):
        vals = list(leaves)
        tape.watch(vals if watch_all else vals[:nsrc])
        for binary, op, i, j in plan:
            a, b = vals[i % len(vals)], vals[j % len(vals)]
            vals.append(_BINARY_OPS[op % len(_BINARY_OPS)](a, b) if binary else _UNARY_OPS[op](a))
        target = gt.sum(vals[-1]) + gt.sum(vals[len(vals) // 2])
        sources = leaves[:nsrc] + [vals[len(shapes)]] if len(vals) > len(shapes) else leaves[:nsrc]
        return target, sources

    want = numpy_of(run(record, False, persistent=persistent))
    for _ in range(3):  # seen, compiled, hit
        got = numpy_of(run(record, True, persistent=persistent))
        for k, (a, b) in enumerate(zip(got, want)):
            same_bits(a, b, f"source {k}")
    r = report()
    assert r["hits"] >= 1 and "compile_error" not in r["fallbacks"], r


# -- the key: dtypes ---------------------------------------------------------------------------------


def test_swapped_dtypes_do_not_reuse_a_structure_compiled_for_others():
    """Issue 24's repro: complex * real, then real * complex (compiled), then complex * real again.
    The casts (None, float64) and (float64, None) once compared equal (a numpy dtype equals None)."""

    def ga(a, b, comp=True):
        A, B = gt.constant(a), gt.constant(b)
        with gt.GradientTape(compile=comp) as t:
            t.watch([A, B])
            y = A * B
        return t.gradient(y, [A, B], output_gradients=np.array([1j]))[0].numpy()

    r, c = np.array([2.0]), np.array([2.0 + 0j])
    want = {k: ga(*p, comp=False) for k, p in (("cr", (c, r)), ("rc", (r, c)))}
    same_bits(ga(c, r), want["cr"])
    same_bits(ga(r, c), want["rc"])
    same_bits(ga(r, c), want["rc"])
    same_bits(ga(c, r), want["cr"])
    same_bits(ga(c, r), want["cr"])
    assert want["cr"].dtype == np.complex128 and want["cr"][0] == 2j
    assert report()["compiles"] == 2 and report()["hits"] == 1


def test_dtypes_of_residuals_and_seeds_are_in_the_key():
    """One program in float32 and float64: two structures (the VJPs meet other dtypes), each right."""
    for dt in (np.float32, np.float64):
        x = gt.constant(np.linspace(-1, 1, 5).astype(dt))

        def record(tape, x=x):
            tape.watch(x)
            return gt.sum(gt.tanh(x) * x), [x]

        check_compiled(record)
    assert report()["cached"] == 2


def _key_of(x0, x1, og=None, persistent=False, sources=(0, 1), device=None):
    """The key of ``y = x0 * x1`` (both watched) for the gradient w.r.t. ``sources`` (indices, repeats allowed)."""
    xs = [gt.constant(x0), gt.constant(x1)]
    with gt.GradientTape(persistent=persistent) as tape:
        tape.watch(xs)
        y = xs[0] * xs[1]
    seed = np.ones(y.shape, y.dtype) if og is None else og
    return bc._structure(tape, {y._id: seed}, [xs[k]._id for k in sources], gt.ops.raw_namespace(np))[0]


def test_the_key_tells_apart_what_the_result_depends_on():
    """Keys that must differ do, under == (the fast path compares with ==, and a numpy dtype equals None)."""
    r64, c128 = np.array([2.0, 3.0]), np.array([2.0 + 1j, 3.0])
    base = _key_of(c128, r64)
    assert base == _key_of(c128 + 1, r64 - 2)  # values are not in the key
    different = {
        "swapped casts": _key_of(r64, c128),
        "residual dtype": _key_of(r64.astype(np.float32), r64.astype(np.float32)),
        "seed dtype": _key_of(c128, r64, og=np.ones(2, np.complex64)),  # (gradient() refuses it; the key tells)
        "seed shape": _key_of(c128[:1], r64[:1]),
        "persistent": _key_of(c128, r64, persistent=True),
        "repeated source": _key_of(c128, r64, sources=(0, 0)),
        "one source": _key_of(c128, r64, sources=(0,)),
    }
    for why, key in different.items():
        assert key != base and base != key, why
    assert len({hash(k) for k in different.values()} | {hash(base)}) == len(different) + 1


def test_the_generator_reads_the_key_alone():
    """Two tapes of one key compile to one text, and the text is generated from the key without a tape."""
    k1 = _key_of(np.array([2.0 + 1j, 3.0]), np.array([2.0, 3.0]))
    k2 = _key_of(np.array([-1.0 + 0j, 5.0]), np.array([4.0, 7.0]))
    assert k1 == k2
    F = gt.ops.raw_namespace(np)
    assert bc._generate(k1, F).source == bc._generate(k2, F).source
    with pytest.raises(ValueError, match="namespace"):
        bc._generate(k1, gt.ops.DIFF_NAMESPACE)
