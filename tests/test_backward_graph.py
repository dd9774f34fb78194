"""The compiled backward replayed as one CUDA graph (gputape.core.backward.cuda_graph).

On the CPU the graph backend is :class:`gputape.core.backward.cuda_graph.EmulatedGraphs`: numpy tapes take
the GPU path, an array's pointer is its numpy address, a capture poisons its outputs (a result no
launch wrote is NaN) and a launch asserts that every array it reads sits where it sat at capture,
then runs the function into the captured buffers. Every result is compared, bit for bit, with
the sweep's (``GradientTape(compile=False)``), and the counters say which path produced it.
The ``gpu`` tests run the real CUDA graphs.
"""

from __future__ import annotations

import subprocess
import sys
import types
import weakref

import numpy as np
import pytest
from bitwise_helpers import same_bits
from test_backward_compile import _case_record, numpy_of, run
from test_grad_registry import ALL, COMPOSITES

import gputape as gt
from gputape.core.backward import cuda_graph as bg
from gputape.core.primitive import records
from gputape.core.tensor import _wrap
from gputape.devices import cublas

report = gt.debug.backward_cache_report


def graphs():
    return report()["graphs"]


@pytest.fixture(autouse=True)
def emulated(monkeypatch):
    monkeypatch.setattr(gt.config, "_compile_backward", True)  # whatever the environment says
    monkeypatch.setattr(gt.config, "_backward_graphs", True)
    e = bg.EmulatedGraphs()
    was = bg.emulate(e)
    gt.debug.clear_backward_cache()
    yield e
    bg.emulate(was)
    gt.debug.clear_backward_cache()


def grads(record, comp=True, persistent=False, **kw):
    with gt.GradientTape(compile=comp, persistent=persistent) as tape:
        target, sources = record(tape)
    return [None if g is None else g.numpy() for g in tape.gradient(target, sources, **kw)]


def mlp():
    rng = np.random.default_rng(0)
    w1 = gt.Variable(rng.standard_normal((6, 5)))
    b1 = gt.Variable(np.zeros(5))
    w2 = gt.Variable(rng.standard_normal((5, 3)))
    x = gt.constant(rng.standard_normal((4, 6)))
    labels = np.array([0, 2, 1, 2])

    def record(tape):
        h = gt.nn.relu(x @ w1 + b1)
        logp = gt.nn.log_softmax(h @ w2)
        return -gt.mean(logp[np.arange(4), labels]), [w1, b1, w2]

    return record


def chain(n=100):
    x = gt.constant(np.linspace(-1, 1, 16))

    def record(tape):
        tape.watch(x)
        y = x
        for i in range(n):
            y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        return gt.sum(y), [x]

    return record


# -- the graph path --------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [mlp, chain], ids=["mlp", "chain"])
def test_the_graph_replays_and_equals_the_sweep(make, emulated, monkeypatch):
    monkeypatch.setattr(bg, "RECAPTURE_AFTER", 1)  # numpy's allocator moves arrays at will
    record = make()
    want = grads(record, comp=False)
    for step in range(12):
        for a, w in zip(grads(record), want):
            same_bits(a, w, f"step {step}")
    g = graphs()
    # seen, compiled, warm-up, then a launch on every call (a replay, or a recapture at new
    # addresses) but for the calls where numpy's allocator moved an array a graph was not yet
    # copying in once the captures were spent
    assert set(g["eager"]) <= {"warmup", "address"} and g["eager"]["warmup"] == 1, g
    assert g["replays"] >= 12 - 3 - 3 and 1 <= g["captures"] <= bg.MAX_CAPTURES, g
    assert emulated.launches == g["replays"] and g["refused"] == {}


def test_arrays_at_the_captured_addresses_are_read_in_place(emulated):
    """A persistent tape's residuals and a held seed stay where they were: no copies, only launches."""
    x = gt.constant(np.linspace(-1, 1, 7))
    w = gt.constant(np.linspace(0.5, 1.5, 7))
    og = gt.constant(np.array(2.0))
    with gt.GradientTape(persistent=True, compile=False) as ref:
        ref.watch([x, w])
        y = gt.sum(gt.exp(x * w) * x)
    want = [g.numpy() for g in ref.gradient(y, [x, w], output_gradients=og)]
    with gt.GradientTape(persistent=True) as tape:
        tape.watch([x, w])
        y = gt.sum(gt.exp(x * w) * x)
    held, nodes = tape.saved_bytes, list(tape._nodes)
    for _ in range(8):  # seen, compiled, warm-up, capture, replays
        for a, b in zip(tape.gradient(y, [x, w], output_gradients=og), want):
            same_bits(a.numpy(), b)
        assert tape.saved_bytes == held and tape._nodes == nodes  # nothing freed, nothing swapped
    g = graphs()
    assert (g["captures"], g["recaptures"], g["replays"]) == (1, 0, 5) and g["eager"] == {"warmup": 1}, g
    (entry,) = bg._entries.values()
    assert entry.graph.copied == {}  # every read in place
    assert emulated.launches == 5


def test_the_graph_holds_none_of_the_arrays_it_read():
    x = gt.constant(np.linspace(-1, 1, 5))
    refs = []
    for _ in range(4):
        with gt.GradientTape() as tape:
            tape.watch(x)
            h = gt.tanh(x * 2.0)
            refs.append(weakref.ref(h._data))
            y = gt.sum(h * h)
        del h
        tape.gradient(y, x)
        del y, tape
    assert graphs()["captures"] == 1
    assert all(r() is None for r in refs)  # the capture's residuals too: the pool may hand them out again


def held_tapes(n):
    """``n`` gradients of one structure from persistent tapes kept alive: each new tape's residuals
    (and seed) sit at new addresses. Each gradient is checked against the sweep's bits."""
    x = gt.constant(np.linspace(-1, 1, 9))

    def record(tape):
        tape.watch(x)
        return gt.sum(gt.sin(x * 3.0) * gt.exp(x)), [x]

    want = grads(record, comp=False)
    keep = []
    for _ in range(n):
        with gt.GradientTape(persistent=True) as tape:
            target, sources = record(tape)
        same_bits(tape.gradient(target, sources)[0].numpy(), want[0])
        keep.append(tape)


def test_an_address_mismatch_runs_the_compiled_function_and_is_right(emulated, monkeypatch):
    monkeypatch.setattr(bg, "RECAPTURE_AFTER", 10**9)
    held_tapes(8)
    g = graphs()
    assert g["captures"] == 1 and g["replays"] == 1, g  # the capture's own call launches it
    assert g["eager"]["address"] == 8 - 2 - 1 - 1 and g["recaptures"] == 0, g


def test_recapture_reads_moved_arrays_from_buffers_of_its_own(emulated, monkeypatch):
    monkeypatch.setattr(bg, "RECAPTURE_AFTER", 2)
    held_tapes(10)
    g = graphs()
    # seen, compiled, warm-up, capture; a mismatch, a recapture in place at the new addresses (a pool
    # that settled would match from now on); a mismatch again, a recapture that copies in what
    # moved twice; then replays (each capture launches for its own call)
    assert (g["captures"], g["recaptures"], g["eager"]) == (3, 2, {"warmup": 1, "address": 2}), g
    assert g["replays"] == 10 - 3 - 2, g
    (entry,) = bg._entries.values()
    moved = set(entry.graph.copied)
    assert moved and ("S", 0) in moved  # each seed is a new array: copied in
    assert emulated.released == 2  # the earlier graphs were dropped at the recaptures


def test_arrays_alternating_between_two_addresses_are_copied_in_after_the_recapture():
    """A residual that is also the user's variable alternates between two blocks (the previous
    step's is alive while the next one is made): mismatches need not be consecutive to count."""
    rng = np.random.default_rng(3)
    pairs = [tuple(gt.constant(rng.standard_normal(5)) for _ in range(2)) for _ in range(2)]
    og = gt.constant(np.array(1.5))

    def record_for(a, b):
        def record(tape):
            tape.watch([a, b])
            return gt.sum(a * b), [a, b]  # (multiply saves both inputs: the caller's arrays)

        return record

    want = [grads(record_for(*p), comp=False, output_gradients=og) for p in pairs]
    for step in range(18):
        got = grads(record_for(*pairs[step % 2]), output_gradients=og)
        for a, w in zip(got, want[step % 2]):
            same_bits(a, w, f"step {step}")
    g = graphs()
    # seen, compiled, warm-up, capture (pair 1); pair 0 mismatches on calls 5, 7, 9: the third
    # recaptures in place (pair 0); pair 1 mismatches on calls 10, 12, 14: the third recaptures
    # with both residuals copied in (they moved again); every later call replays
    assert (g["captures"], g["recaptures"], g["eager"]) == (3, 2, {"warmup": 1, "address": 4}), g
    assert g["replays"] == 18 - 3 - 4, g
    (entry,) = bg._entries.values()
    assert {p for p in entry.graph.copied if p[0] != "S"} == {(0, 0), (0, 1)}  # multiply's two residuals


def test_the_generated_check_agrees_with_the_records(monkeypatch):
    """The per-call test is generated straight-line code; the slow comparison of records (which
    also names the reason) must agree with it on a match, a moved array and a changed value."""
    x = gt.constant(np.linspace(-1, 1, 6))
    og = gt.constant(np.array(1.0))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = gt.sum(gt.exp(x) * gt.sum(x * x, axis=0, keepdims=True))
    for _ in range(4):
        tape.gradient(y, x, output_gradients=og)
    (entry,) = bg._entries.values()
    g = entry.graph
    seeds = [og._data]
    b = bg._emulation

    def agree(nodes):
        quick = g.check(nodes, seeds)
        assert quick == (bg._records(g.places, g.copied, b, nodes, seeds) == g.expect)
        return quick

    assert agree(tape._nodes)
    moved = list(tape._nodes)
    n = moved[0]
    moved[0] = bg._clone(n, tuple(np.array(a, copy=True) for a in n.saved))  # same values elsewhere
    assert not agree(moved)
    for p, n in enumerate(tape._nodes):
        if n.params:
            changed = list(tape._nodes)
            changed[p] = bg._clone(n, n.saved)
            changed[p].params = {**n.params, "keepdims": object()}  # (and beyond comparison)
            assert not agree(changed)
            assert bg._mismatch(g, b, changed, seeds, set()) == "value"
            break
    else:
        raise AssertionError("no node with parameters")


def test_captures_per_structure_are_bounded(monkeypatch):
    """The same structure on a contiguous and on a strided array (one compiled backward: dtypes are
    in its key, strides are not): a layout mismatch each time."""
    monkeypatch.setattr(bg, "RECAPTURE_AFTER", 1)
    xs = [gt.constant(np.linspace(-1, 1, 6)), _wrap(np.linspace(-1, 1, 12)[::2])]  # (constant() would copy)
    assert xs[0]._data.strides != xs[1]._data.strides

    def record_for(x):
        def record(tape):
            tape.watch(x)
            return gt.sum(gt.tanh(x) * x), [x]

        return record

    want = [grads(record_for(x), comp=False) for x in xs]
    for _ in range(8):
        for x, w in zip(xs, want):
            same_bits(grads(record_for(x))[0], w[0])
    g = graphs()
    assert report()["cached"] == 1 and g["captures"] == bg.MAX_CAPTURES, (report(), g)
    assert g["eager"]["layout"] > 0, g


def test_a_parameter_that_differs_is_a_value_mismatch():
    """sum over axis 0 and over axis 1 of a square matrix: one compiled backward (it reads the axis
    from the node), but a graph bakes the axis in, so the other axis runs eagerly."""
    x = gt.constant(np.arange(9.0).reshape(3, 3) / 7)

    def record_for(axis):
        def record(tape):
            tape.watch(x)
            return gt.sum(gt.sin(gt.sum(gt.exp(x), axis=axis)) * np.array([1.0, 2.0, 3.0])), [x]

        return record

    want = {a: grads(record_for(a), comp=False) for a in (0, 1)}
    for a in (0, 0, 0, 0, 1, 0, 1):
        same_bits(grads(record_for(a))[0], want[a][0], f"axis {a}")
    assert report()["cached"] == 1
    assert graphs()["eager"].get("value", 0) >= 1, graphs()


def test_a_shape_change_is_a_new_structure(monkeypatch):
    monkeypatch.setattr(bg, "RECAPTURE_AFTER", 1)
    xs = {n: gt.constant(np.linspace(-2, 2, n)) for n in (4, 7)}

    def record_for(n):
        def record(tape):
            tape.watch(xs[n])
            return gt.sum(gt.tanh(xs[n] * 2.0)), [xs[n]]

        return record

    want = {n: grads(record_for(n), comp=False) for n in xs}
    for _ in range(8):
        for n in xs:
            same_bits(grads(record_for(n))[0], want[n][0])
    g = graphs()
    assert g["held"] == 2 and report()["cached"] == 2 and g["captures"] >= 2 and g["replays"] >= 6, g
    assert "layout" not in g["eager"], g  # each shape has its own graph


def test_a_gradient_that_is_a_view_of_an_input_is_copied_inside_the_graph():
    """d y / d y is the seed itself: the graph's output would be the capture-time seed's memory."""
    x = gt.constant(np.array([0.5, -1.0, 2.0]))
    og = gt.constant(np.array([3.0, 4.0, 5.0]))

    def record(tape):
        tape.watch(x)
        y = gt.exp(x) * x
        return y, [y, x]

    want = grads(record, comp=False, output_gradients=og)
    for _ in range(7):
        got = grads(record, output_gradients=og)
        same_bits(got[0], want[0])
        same_bits(got[1], want[1])
    (entry,) = bg._entries.values()
    assert entry.graph.alias == {0} and graphs()["replays"] >= 1


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    ("name", "i", "f", "args"),
    ALL + [(n, 0, f, a) for n, f, a in COMPOSITES],
    ids=[f"{n}-{i}" for n, i, _, _ in ALL] + [c[0] for c in COMPOSITES],
)
def test_every_primitive_replays_bitwise_equal_to_the_sweep(name, i, f, args, dtype, monkeypatch):
    """No primitive's node holds a value the check cannot compare: each replays, the sweep's bits."""
    monkeypatch.setattr(bg, "RECAPTURE_AFTER", 1)
    record = _case_record(f, args, dtype)
    want = numpy_of(run(record, False, unconnected_gradients="zero"))
    for _ in range(6):
        for k, (a, b) in enumerate(zip(numpy_of(run(record, True, unconnected_gradients="zero")), want)):
            same_bits(a, b, f"source {k}")
    g = graphs()
    assert g["refused"] == {} and g["replays"] == 3, g


# -- non-persistent tapes: skeletons, explain ------------------------------------------------------


def test_a_replay_frees_residuals_and_leaves_the_sweeps_skeletons():
    x = gt.constant(np.linspace(0, 1, 1000))
    c = gt.constant(np.linspace(1, 2, 1000))
    skeletons, answers = {}, {}
    for comp in (False, True, True, True, True, True):
        with gt.GradientTape(compile=comp) as tape:
            tape.watch(x)
            h = gt.exp(x)
            ref = weakref.ref(h._data)
            y = gt.sum(gt.sin(h) * gt.stop_gradient(h * c))
        del h
        tape.gradient(y, [x, c])
        assert ref() is None and tape.saved_bytes == 0  # freed with their nodes
        skeletons[comp] = [(n.prim.name, n.ids, n.out) for n in records(tape._retired._nodes)]
        e1, e2 = tape.explain(y, x), tape.explain(y, c)
        answers.setdefault(comp, []).append((e1.reason, e2.reason, str(e1), str(e2)))
    assert graphs()["replays"] >= 1, graphs()
    assert [(p, len(i), type(o)) for p, i, o in skeletons[True]] == [
        (p, len(i), type(o)) for p, i, o in skeletons[False]
    ]
    assert all(a == answers[False][0] for a in answers[True])


# -- refusals, switches, counters ------------------------------------------------------------------


def test_a_capture_that_fails_marks_the_structure_graphless(emulated, caplog):
    emulated.refuse = lambda nodes: True
    record = chain(6)
    want = grads(record, comp=False)
    with caplog.at_level("DEBUG", logger="gputape"):
        for _ in range(7):
            same_bits(grads(record)[0], want[0])
    g = graphs()
    assert g["refused"] == {"capture_failed:RuntimeError": 1} and g["captures"] == 0, g
    assert g["eager"] == {"warmup": 1, "graphless": 7 - 3}, g
    assert "emulated capture refusal" in caplog.text


def test_custom_gradient_is_refused():
    x = gt.constant(np.array([1.0, 2.0]))

    @gt.custom_gradient
    def f(a):
        return a * 2.0, lambda dy: dy * 3.0

    def record(tape):
        tape.watch(x)
        return gt.sum(f(x) * x), [x]

    want = grads(record, comp=False)
    for _ in range(5):
        same_bits(grads(record)[0], want[0])
    assert graphs()["refused"] == {"custom_gradient": 1}, graphs()


def test_a_value_it_cannot_compare_is_refused(monkeypatch):
    x = gt.constant(np.array([1.0, 2.0]))

    def record(tape):
        tape.watch(x)
        return gt.sum(gt.exp(x)), [x]

    for _ in range(3):
        grads(record)
    (entry,) = bg._entries.values()
    monkeypatch.setattr(bg, "_SCALARS", ())  # an int parameter (sum's) is now beyond comparison
    want = grads(record, comp=False)
    same_bits(grads(record)[0], want[0])
    assert graphs()["refused"] == {"unsupported_value:int": 1}, graphs()
    assert entry.refused and entry.graph is None


def test_the_switch_and_the_tapes_opt_out():
    record = chain(4)
    want = grads(record, comp=False)
    gt.config.set_backward_graphs(False)
    try:
        assert graphs()["enabled"] is False
        for _ in range(5):
            same_bits(grads(record)[0], want[0])
    finally:
        gt.config.set_backward_graphs(True)
    g = graphs()
    assert g["eager"] == {"disabled": 3} and g["captures"] == 0, g
    for _ in range(3):
        same_bits(grads(record, comp=False)[0], want[0])  # compile=False: the sweep, no graph path
    assert graphs()["eager"] == {"disabled": 3}
    with pytest.raises(TypeError, match="set_backward_graphs"):
        gt.config.set_backward_graphs("no")


def test_environment_variable_sets_the_default():
    code = "import gputape as gt; print(gt.config.get_backward_graphs())"
    for value, expect in (("0", "False"), ("off", "False"), ("", "False"), ("1", "True"), ("on", "True")):
        env = {"GPUTAPE_BACKWARD_GRAPHS": value, "PATH": "", "GPUTAPE_DEVICE": "cpu"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expect


def test_higher_order_and_check_numerics_never_reach_a_graph():
    x = gt.constant(np.array([0.3, -0.7]))
    for _ in range(4):
        with gt.GradientTape() as outer:
            outer.watch(x)
            with gt.GradientTape() as inner:
                inner.watch(x)
                y = gt.sum(gt.tanh(x) * x)
            g1 = inner.gradient(y, x)
        outer.gradient(g1, x)
    assert report()["fallbacks"]["recording_gradient"] == 4
    with gt.debug.check_numerics():
        for _ in range(4):
            grads(chain(3))
    assert report()["fallbacks"]["check_numerics"] == 4
    g = graphs()
    assert g["captures"] == 1 and g["held"] == 1, g  # the outer tape's gradient only


def test_a_busy_graph_runs_eagerly():
    record = chain(4)
    want = grads(record, comp=False)
    for _ in range(5):
        grads(record)
    (entry,) = bg._entries.values()
    with entry.lock:  # another thread is replaying it
        same_bits(grads(record)[0], want[0])
    assert graphs()["eager"]["busy"] == 1


def test_entries_are_bounded_and_dropped_graphs_released(emulated, monkeypatch):
    monkeypatch.setattr(bg, "CACHE_SIZE", 1)
    for n in (3, 4, 3):
        x = gt.constant(np.linspace(0, 1, n))
        for _ in range(4):
            with gt.GradientTape() as tape:
                tape.watch(x)
                y = gt.sum(gt.sin(x))
            tape.gradient(y, x)
    assert graphs()["held"] == 1 and emulated.released == 2 and graphs()["captures"] == 3


def test_the_emulation_catches_a_launch_on_memory_it_was_not_captured_on(monkeypatch):
    """The stand-in is strict where a real graph would silently read stale memory."""
    monkeypatch.setattr(bg, "_mismatch", lambda *a: None)  # a runner that forgot to check
    with pytest.raises(AssertionError, match="not where it was captured"):
        held_tapes(6)


def test_counters_are_cleared_with_the_cache():
    for _ in range(4):
        grads(chain(3))
    assert graphs()["captures"] == 1
    gt.debug.clear_backward_cache()
    g = graphs()
    assert (g["captures"], g["replays"], g["held"], g["eager"], g["refused"]) == (0, 0, 0, {}, {})


def test_numpy_tapes_without_the_emulation_never_take_the_path():
    bg.emulate(None)
    for _ in range(5):
        grads(chain(3))
    g = graphs()
    assert report()["hits"] == 3 and (g["captures"], g["eager"], g["held"]) == (0, {}, 0)


def test_the_graph_form_routes_matrix_products_through_the_capturable_gemm():
    """On a GPU the capture runs the compiled function with ``F.matmul`` rebound to gputape.devices.cublas's
    GEMM (CuPy's matmul refuses a capture); checked here with a counting stand-in for the GEMM."""
    record = mlp()
    want = grads(record, comp=False)
    for _ in range(2):
        grads(record)
    (fn,) = gt.core.backward.compiled._cache.values()
    calls = []
    cuda = bg._CudaGraphs.__new__(bg._CudaGraphs)
    cuda.gemm = types.SimpleNamespace(matmul=lambda a, b: calls.append(a.shape) or np.matmul(a, b))
    form = cuda.graph_form(fn)
    assert form is not fn and form.__globals__["F"].matmul is cuda.gemm.matmul
    assert fn.__globals__["F"].matmul is np.matmul  # the compiled function itself is untouched
    with gt.GradientTape() as tape:
        target, sources = record(tape)
    seeds = [np.ones((), target.dtype)]
    # the nodes as gradient() hands them to the compiled code: with the loss head fused (gputape.core.loss_head)
    assert gt.core.loss_head.fuse(tape, {target._id: seeds[0]}, [s._id for s in sources]) is not None
    got = form(tape._nodes, seeds)
    assert len(calls) == 3  # dW1 = x^T g, dh = g W2^T, dW2 = h^T g (x needs no gradient)
    for a, w in zip(got, want):
        same_bits(a, w)
    cuda.gemm = None
    assert cuda.graph_form(fn) is fn


class _Log(list):
    def ctx(self, name):
        log = self

        class Ctx:
            def __enter__(self):
                log.append(f"enter {name}")

            def __exit__(self, *exc):
                log.append(f"exit {name}")

        return Ctx()


def _mock_cupy(log):
    """CuPy's stream, event, pool and graph calls as gt.function's graph runner makes them, logged."""

    class Stream:
        def __init__(self, name):
            self.name = name

        def record(self):
            log.append(f"record {self.name}")
            return f"event of {self.name}"

        def wait_event(self, ev):
            log.append(f"{self.name} waits for {ev}")

        def __enter__(self):
            log.append(f"current {self.name}")

        def __exit__(self, *exc):
            log.append(f"current back from {self.name}")

        def begin_capture(self):
            log.append(f"begin capture on {self.name}")

        def end_capture(self):
            log.append(f"end capture on {self.name}")
            return types.SimpleNamespace(launch=lambda stream: log.append(f"launch on {stream.name}"))

        def synchronize(self):
            log.append(f"synchronize {self.name}")

    caller = Stream("caller")
    pool = types.SimpleNamespace(malloc="pool.malloc")
    cuda = types.SimpleNamespace(
        Device=lambda i: log.ctx(f"device {i}"),
        Stream=lambda non_blocking: Stream("private"),
        get_current_stream=lambda: caller,
        MemoryPool=lambda: pool,
        using_allocator=lambda malloc: log.ctx(f"allocator {malloc}"),
    )
    return types.SimpleNamespace(
        cuda=cuda, ndarray=np.ndarray, copyto=lambda d, s: (log.append("copy in"), np.copyto(d, s))
    )


def test_the_cuda_backend_fences_streams_around_capture_and_launch(monkeypatch):
    """No GPU here: the real backend's CuPy calls, in order, against a logging stand-in of the calls
    gt.function's (H200-tested) graph runner makes: the private stream waits for the caller before
    it reads, the caller waits for it before the outputs are copied out, capture under the pool."""
    log = _Log()
    cp = _mock_cupy(log)
    monkeypatch.setattr(gt.devices.backend, "cupy_module", lambda: cp)
    monkeypatch.setattr(cublas, "gemm_for", lambda i: None)
    b = bg._CudaGraphs(0)
    assert log == ["enter device 0", "exit device 0"]  # (the private stream made on the device)
    log.clear()
    buf, src = np.zeros(3), np.arange(3.0)
    with b.capturing() as cap:
        outs = cap.run(lambda N, S: [np.asarray(S[0]) * 2.0], [], [src], [])
    assert log == [
        "enter device 0",
        "record caller",
        "private waits for event of caller",
        "current private",
        "enter allocator pool.malloc",
        "begin capture on private",
        "end capture on private",
        "exit allocator pool.malloc",
        "current back from private",
        "record private",
        "caller waits for event of private",
        "exit device 0",
    ]
    log.clear()
    got = b.replay(cap.handle, [(buf, src)], outs + [None], lambda: None)
    assert log == [
        "enter device 0",
        "record caller",
        "private waits for event of caller",
        "current private",
        "copy in",
        "launch on private",
        "current back from private",
        "record private",
        "caller waits for event of private",
        "exit device 0",
    ]
    assert got[1] is None and got[0] is not outs[0] and (got[0] == outs[0]).all()  # copied out
    assert (buf == src).all()
    log.clear()
    b.release(cap.handle)
    assert log == ["synchronize private"]


def test_the_two_backends_offer_the_same_calls():
    calls = {"capturing", "replay", "release", "own", "copy_of", "is_array", "pointer", "pointer_source", "graph_form"}
    for cls in (bg._CudaGraphs, bg.EmulatedGraphs):
        assert calls <= {n for n in vars(cls) if not n.startswith("_")}, cls


def test_the_benchmark_row_turns_graphs_on_for_its_call_only(monkeypatch):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_bench.py"
    spec = importlib.util.spec_from_file_location("gpu_bench_rows", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(gt.config, "_backward_graphs", False)  # the default
    seen = []
    step = mod.with_backward_graphs(lambda: seen.append(gt.config.get_backward_graphs()) or 7)
    assert step() == 7 and seen == [True] and gt.config.get_backward_graphs() is False
    off = mod.with_backward_graphs(lambda: seen.append(gt.config.get_backward_graphs()), enabled=False)
    monkeypatch.setattr(gt.config, "_backward_graphs", True)
    off()
    assert seen == [True, False] and gt.config.get_backward_graphs() is True


# -- on a GPU ------------------------------------------------------------------------------------


def grads_raw(record, comp, persistent=False):
    with gt.GradientTape(compile=comp, persistent=persistent) as tape:
        target, sources = record(tape)
    return [g._data for g in tape.gradient(target, sources)]


def _gpu_mlp():
    rng = np.random.default_rng(0)
    dev = "cuda"
    ps = [
        gt.Variable(gt.constant(rng.standard_normal(s).astype(np.float32) * 0.1).to(dev)._data)
        for s in ((784, 256), (256,), (256, 10), (10,))
    ]
    x = gt.constant(rng.standard_normal((1024, 784)).astype(np.float32)).to(dev)
    y = gt.constant(rng.integers(0, 10, 1024)).to(dev)
    w1, b1, w2, b2 = ps

    def record(tape):
        h = gt.nn.relu(x @ w1 + b1)
        return gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y, h @ w2 + b2)), ps

    return record


def _gpu_chain():
    x = gt.constant(np.linspace(-1, 1, 1 << 16).astype(np.float32)).to("cuda")

    def record(tape):
        tape.watch(x)
        y = x
        for i in range(100):
            y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        return gt.sum(y), [x]

    return record


@pytest.mark.gpu
@pytest.mark.parametrize("make", [_gpu_mlp, _gpu_chain], ids=["mlp", "chain"])
def test_gpu_graph_replay_equals_the_sweep(make, monkeypatch):
    bg.emulate(None)
    monkeypatch.setattr(bg, "RECAPTURE_AFTER", 1)  # (the pool may move a residual once or twice)
    record = make()
    want = [g.get() for g in grads_raw(record, False)]
    for _ in range(16):
        for a, w in zip(grads_raw(record, True), want):
            np.testing.assert_allclose(a.get(), w, rtol=1e-4, atol=1e-5)
    g = graphs()
    assert g["refused"] == {} and g["captures"] >= 1, g
    assert g["replays"] >= 16 - 3 - 2, g  # every call after the warm-up launches a graph, bar a mismatch or two


@pytest.mark.gpu
def test_gpu_mismatch_path_is_right():
    bg.emulate(None)
    record = _gpu_chain()
    want = [g.get() for g in grads_raw(record, False)]
    keep = []
    for _ in range(12):  # persistent tapes held: every tape's residuals at new addresses
        with gt.GradientTape(persistent=True) as tape:
            target, sources = record(tape)
        np.testing.assert_allclose(tape.gradient(target, sources)[0]._data.get(), want[0], rtol=1e-4, atol=1e-5)
        keep.append(tape)
    g = graphs()
    # seen, compiled, warm-up, capture, 2 mismatches, recapture in place, 2 mismatches, recapture
    # copying in what moved twice, replays
    assert g["refused"] == {} and g["eager"].get("address") == 4 and g["recaptures"] == 2, g
    assert g["replays"] == 12 - 3 - 4, g
