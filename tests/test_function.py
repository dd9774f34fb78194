"""gt.function: compiled steps equal eager ones (bitwise on the CPU), retracing, trace-time errors.

Every equivalence test feeds NEW data on every call, so a value frozen at trace
time (a computation the trace failed to record) would show as a difference.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf
from gputape.core.tape import GputapeWarning
from gputape.function import OperatorNotAllowedInGraphError


def _mlp_params(seed: int, sizes=(12, 16, 16, 5), dtype=np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a, b in itertools.pairwise(sizes):
        out += [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(dtype), (0.1 * rng.standard_normal(b)).astype(dtype)]
    return out


def _batches(n: int, batch: int = 8, d: int = 12, classes: int = 5, seed: int = 1, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((batch, d)).astype(dtype), rng.integers(0, classes, batch).astype(np.int64))
        for _ in range(n)
    ]


def _loss(params, x, y):
    w1, b1, w2, b2, w3, b3 = params
    h = gt.nn.relu(x @ w1 + b1)
    h = gt.tanh(h @ w2 + b2)
    logits = h @ w3 + b3
    return gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


OPTIMIZERS = {
    "sgd": lambda: gt.optim.SGD(0.1),
    "momentum-nesterov": lambda: gt.optim.SGD(0.05, momentum=0.9, nesterov=True),
    "adam-schedule": lambda: gt.optim.Adam(gt.optim.ExponentialDecay(0.01, 2, 0.5)),
    "adamw-clip": lambda: gt.optim.AdamW(0.01, global_clipnorm=0.5),
    "rmsprop": lambda: gt.optim.RMSprop(0.01),
}


def _train(compiled: bool, make_opt, steps: int = 6, dtype=np.float32):
    params = [gt.Variable(a) for a in _mlp_params(0, dtype=dtype)]
    opt = make_opt()

    def step(x, y):
        with gt.GradientTape() as tape:
            loss = _loss(params, x, y)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        return loss

    f = gt.function(step) if compiled else step
    losses = [f(x, y).numpy() for x, y in _batches(steps, dtype=dtype)]
    return losses, [p.numpy() for p in params], (f.tracing_count if compiled else None)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_compiled_training_steps_equal_eager_bitwise(opt):
    eager_losses, eager_params, _ = _train(False, OPTIMIZERS[opt])
    comp_losses, comp_params, traces = _train(True, OPTIMIZERS[opt])
    assert traces == 1
    for a, b in zip(eager_losses, comp_losses):
        assert np.array_equal(a, b)
    for a, b in zip(eager_params, comp_params):
        assert np.array_equal(a, b), "compiled parameters differ from eager ones"
    assert not np.array_equal(eager_params[0], _mlp_params(0)[0]), "the steps must have changed the weights"


def test_compiled_float64_training_equals_eager():
    e, ep, _ = _train(False, OPTIMIZERS["adam-schedule"], dtype=np.float64)
    c, cp, _ = _train(True, OPTIMIZERS["adam-schedule"], dtype=np.float64)
    assert all(np.array_equal(a, b) for a, b in zip(e + ep, c + cp))


def _module_run(compiled: bool):
    gt.random.seed(3)
    model = gt.nn.Sequential(
        [gt.nn.Dense(16, activation="relu"), gt.nn.Dropout(0.3), gt.nn.Dense(5)],
    )
    model(gt.constant(np.zeros((1, 12), np.float32)))  # build
    for v, a in zip(model.trainable_variables, _mlp_params(5, sizes=(12, 16, 5))):
        v.assign(a)
    opt = gt.optim.Adam(0.01)
    lossf = gt.nn.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(x, y):
        with gt.GradientTape() as tape:
            loss = lossf(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        acc = gt.mean(gt.cast(gt.equal(gt.argmax(model(x), axis=1), y), "float32"))
        return {"loss": loss, "acc": acc}

    f = gt.function(step) if compiled else step
    outs = [f(x, y) for x, y in _batches(5)]
    return [(o["loss"].numpy(), o["acc"].numpy()) for o in outs], [v.numpy() for v in model.trainable_variables]


def test_module_with_dropout_and_accuracy_equals_eager():
    """Dropout masks are drawn anew by each replay, from the same generator, in the same order."""
    e_out, e_params = _module_run(False)
    c_out, c_params = _module_run(True)
    for (el, ea), (cl, ca) in zip(e_out, c_out):
        assert np.array_equal(el, cl) and np.array_equal(ea, ca)
    for a, b in zip(e_params, c_params):
        assert np.array_equal(a, b)
    assert len({float(a) for _, a in c_out}) > 1 or len({float(lo) for lo, _ in c_out}) > 1


def test_random_draws_are_not_frozen():
    f = gt.function(lambda x: x + gt.random.normal((3,)))
    x = gt.constant(np.zeros(3, np.float32))
    a, b = f(x).numpy(), f(x).numpy()
    assert not np.array_equal(a, b)


def test_jacobian_and_batch_jacobian_compiled_equal_eager():
    rng = np.random.default_rng(0)
    W = gt.constant(rng.standard_normal((6, 6)).astype(np.float32))

    def jac(x):
        with gt.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = gt.tanh(x @ W)
        return tape.jacobian(y, x), tape.batch_jacobian(y, x)

    f = gt.function(jac)
    for _ in range(3):
        x = gt.constant(rng.standard_normal((4, 6)).astype(np.float32))
        (j1, b1), (j2, b2) = jac(x), f(x)
        assert np.array_equal(j1.numpy(), j2.numpy()) and np.array_equal(b1.numpy(), b2.numpy())
    assert f.tracing_count == 1


def test_second_order_inside_a_compiled_function():
    def hvp(x, v):
        with gt.GradientTape() as outer:
            outer.watch(x)
            with gt.GradientTape() as inner:
                inner.watch(x)
                y = gt.sum(gt.sin(x) * x * x)
            g = inner.gradient(y, x)
            gv = gt.sum(g * v)
        return outer.gradient(gv, x)

    f = gt.function(hvp)
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = gt.constant(rng.standard_normal(5))
        v = gt.constant(rng.standard_normal(5))
        assert np.array_equal(hvp(x, v).numpy(), f(x, v).numpy())


def test_variable_assignments_replay():
    counter = gt.Variable(0.0)
    total = gt.Variable(np.zeros(2, np.float32))

    @gt.function
    def f(x):
        counter.assign_add(1.0)
        total.assign(total * 0.5 + x)
        return total.value() * 1.0

    for i in range(4):
        out = f(gt.constant(np.full(2, i, np.float32)))
    assert float(counter.numpy()) == 4.0
    assert np.allclose(out.numpy(), [0.25 * 0 + 0.5 * 1 * 0.5 + 0.5 * 2 + 3] * 2)
    assert f.tracing_count == 1


def test_python_side_effects_run_at_trace_time_only():
    calls = []

    @tf.function
    def f(x):
        calls.append(1)
        return x * 2.0

    for _ in range(3):
        f(tf.constant([1.0]))
    assert len(calls) == 1 and f.experimental_get_tracing_count() == 1


def test_retracing_on_new_signatures_is_counted_and_warned():
    f = gt.function(lambda x, k: x * k)
    f(gt.constant([1.0]), 2.0)
    f(gt.constant([5.0]), 2.0)  # same signature: replay
    assert f.tracing_count == 1
    assert float(f(gt.constant([5.0]), 3.0)[0]) == 15.0  # a new Python value
    f(gt.constant([1.0, 2.0]), 3.0)  # a new shape
    f(gt.constant([1.0, 2.0], dtype="float64"), 3.0)  # a new dtype
    assert f.tracing_count == 4
    with pytest.warns(GputapeWarning, match=r"traced 5 times.*tensor\(3,\):float32"):
        f(gt.constant([1.0, 2.0, 3.0]), 3.0)
    assert f.tracing_count == 5
    f(gt.constant([1.0, 2.0, 3.0]), 3.0)
    assert f.tracing_count == 5


def test_aliased_arguments_are_a_different_signature():
    f = gt.function(lambda a, b: a * b)
    x, y = gt.constant([2.0]), gt.constant([3.0])
    assert float(f(x, x)[0]) == 4.0
    assert float(f(x, y)[0]) == 6.0
    assert f.tracing_count == 2


@pytest.mark.parametrize(
    "body, what",
    [
        ("if gt.sum(x) > 0:\n        x = x * 2.0", "bool"),
        ("x = x * float(gt.sum(x))", "float"),
        ("x = x + x.numpy()", "numpy"),
        ("x = x * float(w.numpy()[0])", "variable"),
    ],
)
def test_value_dependent_python_without_autograph_is_a_clear_trace_time_error(body, what):
    # with autograph=False a value read into Python is refused, as TensorFlow refuses it
    # (the default guards it: tests/test_function_guards.py)
    w = gt.Variable([1.0])
    ns = {"gt": gt, "w": w}
    src = f"def f(x):\n    {body}\n    return x\n"
    exec(compile(src, "user_step.py", "exec"), ns)
    f = gt.function(ns["f"], autograph=False)
    msg = r"gt.function\(f\).*user_step.py:2.*autograph=False.*gt.where"
    with pytest.raises(OperatorNotAllowedInGraphError, match=msg):
        f(gt.constant([1.0, 2.0]))
    assert f.tracing_count == 0  # nothing cached: the next call traces again
    assert isinstance(gt.TracingError("x"), TypeError)
    # guarded by default: the same body gives the eager result
    g = gt.function(ns["f"])
    x = gt.constant([1.0, 2.0])
    np.testing.assert_array_equal(g(x).numpy(), ns["f"](x).numpy())


def test_shape_dependent_python_is_fine():
    @gt.function
    def f(x):
        if x.shape[0] > 2:
            return x * 2.0
        return x

    assert f(gt.constant([1.0, 2.0, 3.0])).numpy().tolist() == [2.0, 4.0, 6.0]
    assert f(gt.constant([1.0])).numpy().tolist() == [1.0]


def test_called_under_an_outer_tape_runs_eagerly_and_is_differentiable():
    f = gt.function(lambda x: gt.sin(x) * x)
    x = gt.constant([0.5, 1.0])
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(f(x))
    g = tape.gradient(y, x).numpy()
    assert np.allclose(g, np.cos([0.5, 1.0]) * [0.5, 1.0] + np.sin([0.5, 1.0]))
    assert f.tracing_count == 0


def test_results_of_earlier_calls_are_not_overwritten():
    f = gt.function(lambda x: x * 2.0)
    a = f(gt.constant([1.0]))
    b = f(gt.constant([5.0]))
    assert a.numpy().tolist() == [2.0] and b.numpy().tolist() == [10.0]


def test_nested_arguments_kwargs_and_python_outputs():
    @gt.function
    def f(batch, *, scale=1.0):
        return {"sum": (batch["a"] + batch["b"][0]) * scale, "tag": "ok", "n": None}

    for k in range(3):
        out = f({"a": gt.constant([1.0 * k]), "b": [np.array([2.0], np.float32)]}, scale=2.0)
        assert out["sum"].numpy().tolist() == [2.0 * (k + 2)] and out["tag"] == "ok" and out["n"] is None
    assert f.tracing_count == 1


def test_an_error_while_tracing_propagates_and_caches_nothing():
    state = {"fail": True}

    @gt.function
    def f(x):
        if state["fail"]:
            raise RuntimeError("boom")
        return x + 1.0

    with pytest.raises(RuntimeError, match="boom"):
        f(gt.constant([1.0]))
    state["fail"] = False
    assert f(gt.constant([1.0])).numpy().tolist() == [2.0]
    assert gt.core.state.tls.obs is None  # the failed trace left this thread's observer stack


def test_methods_trace_per_instance():
    class Model(gt.Module):
        def __init__(self, k):
            super().__init__()
            self.w = gt.Variable([k])

        @gt.function
        def __call__(self, x):
            return x * self.w

    m1, m2 = Model(2.0), Model(3.0)
    x = gt.constant([1.0])
    assert float(m1(x)[0]) == 2.0 and float(m2(x)[0]) == 3.0
    m1.w.assign([4.0])
    assert float(m1(x)[0]) == 4.0


def test_the_replay_source_is_readable():
    f = gt.function(lambda x: gt.exp(x) + 1.0)
    f(gt.constant([0.0]))
    assert f.code.startswith("def replay(s0):") and "return" in f.code


def test_custom_gradient_inside_a_compiled_function():
    @gt.custom_gradient
    def scaled_identity(x):
        def grad(dy):
            return dy * 3.0

        return x * 1.0, grad

    def f(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = gt.sum(gt.exp(scaled_identity(x)))
        return tape.gradient(y, x)

    cf = gt.function(f)
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = gt.constant(rng.standard_normal(4))
        assert np.array_equal(f(x).numpy(), cf(x).numpy())
    assert np.allclose(cf(x).numpy(), 3.0 * np.exp(x.numpy()))


# -- the CUDA-graph replay's logic, on the CPU: an emulated "graph" recomputes its segment from the
# buffers captured at capture time into them, so a value the runner failed to refresh shows.


def _train_graphs(make_opt, refuse=None, steps=7, capture_gemm=True):
    params = [gt.Variable(a) for a in _mlp_params(0)]
    opt = make_opt()

    def step(x, y):
        with gt.GradientTape() as tape:
            loss = _loss(params, x, y)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss, tape  # (the tape is a Python value: returned as it was)

    f = gt.Function(step, graphs="emulate", capture_gemm=capture_gemm)
    f._refuse = refuse
    losses = [f(x, y)[0].numpy() for x, y in _batches(steps)]
    return losses, [p.numpy() for p in params], f


@pytest.mark.parametrize("capture_gemm", [False, True])
@pytest.mark.parametrize("opt", ["sgd", "adam-schedule", "rmsprop"])
def test_graph_replay_logic_equals_eager(opt, capture_gemm):
    e_losses, e_params, _ = _train(False, OPTIMIZERS[opt], steps=7)
    g_losses, g_params, f = _train_graphs(OPTIMIZERS[opt], capture_gemm=capture_gemm)
    rep = f.graph_report
    # matrix products outside the graphs cut the step into several; captured, it is one graph:
    # forward, backward and (SGD, Adam: the fused kernel's kinds) the optimizer update; RMSprop's
    # update is a host step after it
    assert rep["graphs"] == 1 if capture_gemm else rep["graphs"] >= 3
    in_graph = opt != "rmsprop"
    assert rep["optimizers_in_graphs"] == in_graph
    assert rep["captures"] == rep["graphs"] and (rep["host_steps"] > 0) == (not in_graph or not capture_gemm)
    assert f._cache[f._keys[-1]].replay.backend.launches >= 4 * rep["graphs"]
    for a, b in zip(e_losses + e_params, g_losses + g_params):
        assert np.array_equal(a, b)


def test_the_optimizer_stays_a_host_step_when_the_backend_says_no(monkeypatch):
    """gt.function(optimizer_in_graph=False), the default on a GPU: the update runs between graphs."""
    gfn = sys.modules["gputape.function"]

    class NoOptimizer(gfn._EmulatedGraphs):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.optimizer = False  # what _CudaGraphs holds with optimizer_in_graph off

    monkeypatch.setattr(gfn, "_EmulatedGraphs", NoOptimizer)
    e_losses, e_params, _ = _train(False, OPTIMIZERS["adam-schedule"], steps=7)
    g_losses, g_params, f = _train_graphs(OPTIMIZERS["adam-schedule"])
    rep = f.graph_report
    assert rep["optimizers_in_graphs"] == 0 and rep["host_steps"] > 0
    for a, b in zip(e_losses + e_params, g_losses + g_params):
        assert np.array_equal(a, b)
    assert gt.function(lambda x: x).optimizer_in_graph is gfn.OPTIMIZER_IN_GRAPH
    assert gt.function(lambda x: x, optimizer_in_graph=True).optimizer_in_graph is True


def test_graph_replay_moves_a_refused_step_out_and_recaptures():
    refused = []

    def refuse(fn):
        name = _step_name(fn)
        if "relu" in name and not refused:
            refused.append(name)
            return True
        return False

    from gputape.function import _step_name

    e_losses, e_params, _ = _train(False, OPTIMIZERS["sgd"], steps=7)
    g_losses, g_params, f = _train_graphs(OPTIMIZERS["sgd"], refuse=refuse)
    assert refused and len(f.graph_report["refused"]) == 1
    for a, b in zip(e_losses + e_params, g_losses + g_params):
        assert np.array_equal(a, b)


def test_graph_replay_sees_variables_assigned_outside_the_function():
    w = gt.Variable(np.ones(3, np.float32))
    f = gt.Function(lambda x: gt.tanh(x * w) + 1.0, graphs="emulate")
    x = gt.constant(np.full(3, 0.5, np.float32))
    for k in range(4):
        w.assign(np.full(3, k, np.float32))
        assert np.array_equal(f(x).numpy(), (np.tanh(np.float32(0.5) * np.float32(k)) + np.float32(1.0)) * np.ones(3))
    held = w.value()  # a reference of the user's: the next assign copies, and the graphs must follow
    w.assign(np.full(3, 7, np.float32))
    assert np.allclose(f(x).numpy(), np.tanh(3.5) + 1.0) and held.numpy().tolist() == [3.0] * 3


def test_fused_optimizer_updates_replay():
    from gputape.kernels import registry as kernels

    w = gt.Variable(np.ones(3, np.float32))
    opt = kernels.FusedOptimizer("adam", 0.1)

    def step(x):
        with gt.GradientTape() as tape:
            loss = gt.sum(w * x * x)
        opt.update([w], tape.gradient(loss, [w]))
        return loss

    f = gt.function(step)
    for k in range(4):
        f(gt.constant(np.full(3, k + 1.0, np.float32)))
    w2 = gt.Variable(np.ones(3, np.float32))
    ref = kernels.FusedOptimizer("adam", 0.1)
    for k in range(4):
        ref.update([w2], [np.full(3, (k + 1.0) ** 2, np.float32)])
    assert np.array_equal(w.numpy(), w2.numpy()) and f.tracing_count == 1


@pytest.mark.parametrize("layout_a", ["C", "F", "strided"])
@pytest.mark.parametrize("layout_b", ["C", "F", "strided"])
@pytest.mark.parametrize("shape", [(5, 3, 4), (1, 7, 2), (6, 1, 5), (4, 4, 1)])
def test_direct_cublas_plan_matches_a_column_major_gemm(layout_a, layout_b, shape):
    """The layout logic of gputape.devices.cublas (what a wrong leading dimension would break), on the CPU."""
    from gputape.devices import cublas

    m, k, n = shape
    r = np.random.default_rng(m * 100 + k * 10 + n)

    def make(rows, cols, layout):
        if layout == "C":
            return r.standard_normal((rows, cols))
        if layout == "F":
            return r.standard_normal((cols, rows)).T
        return r.standard_normal((rows, 2 * cols))[:, ::2]

    a, b = make(m, k, layout_a), make(k, n, layout_b)
    p = cublas.plan(a, b)
    assert p.first.flags.c_contiguous or p.first.flags.f_contiguous
    np.testing.assert_allclose(cublas.reference_gemm(p), a @ b, rtol=1e-12)


def test_graph_replay_captures_matrix_products_when_a_capturable_gemm_exists():
    plans = {}
    for capture in (False, True):
        params = [gt.Variable(a) for a in _mlp_params(0)]
        opt = gt.optim.SGD(0.1)

        def step(x, y, params=params, opt=opt):
            with gt.GradientTape() as tape:
                loss = _loss(params, x, y)
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss

        f = gt.Function(step, graphs="emulate", capture_gemm=capture)
        plans[capture] = ([float(f(x, y)) for x, y in _batches(5)], f.graph_report)
    assert plans[True][0] == plans[False][0]
    assert plans[True][1]["host_steps"] < plans[False][1]["host_steps"]
    assert plans[True][1]["graphs"] < plans[False][1]["graphs"]


def test_backward_fusion_turns_elementwise_chains_into_generated_kernels():
    """The 100-link chain's backward: one kernel per run of up to 16 fusable VJPs (emulated on
    the CPU by evaluating the same expression with numpy; the CUDA source is NVRTC-checked)."""
    from benchmarks.workloads import chain_data, gputape_chain_grad

    x0 = chain_data()
    want = gputape_chain_grad(gt.constant(x0)).numpy()
    f = gt.Function(gputape_chain_grad, graphs="emulate")
    f._fuse_emulated = True
    for _ in range(3):
        got = f(gt.constant(x0)).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-5)
    rep = f.graph_report
    assert rep["fused_chains"] and max(rep["fused_chains"]) == 16
    assert sum(rep["fused_chains"]) == 250  # every elementwise VJP of the chain's 250 ops
    assert rep["steps"] == 502 - 250 + 16  # 16 kernels in place of 250 backward steps


def test_backward_fusion_respects_cotangents_with_two_readers():
    def f(x):
        with gt.GradientTape() as tape:
            tape.watch(x)
            a = gt.tanh(x)
            y = gt.sum(gt.exp(a) + gt.sin(a))  # a's cotangent is the sum of two VJPs
        return tape.gradient(y, x)

    x = gt.constant(np.linspace(-1, 1, 7))
    cf = gt.Function(f, graphs="emulate")
    cf._fuse_emulated = True
    for _ in range(3):
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-12)


# Where a primitive's domain is not all of R (the inputs are 0.9 * standard normal, or these).
_INLINE_DOMAIN = {"arccosh": lambda a: 1.1 + np.abs(a)}


def _inline_cases():
    """Every primitive whose derivative is declared in gputape.core.expr (the replay inlines them all)."""
    from gputape.core.expr import DERIVATIVES

    cases = []
    for name in sorted(n for n in DERIVATIVES if n in gt.REGISTRY):
        if name == "where":
            cases.append((name, lambda x, y: gt.where(np.arange(12).reshape(3, 4) % 3 == 0, x, y), ((3, 4), (4,))))
            continue
        op = getattr(gt, name) if hasattr(gt, name) else getattr(gt.nn, name)
        if len(DERIVATIVES[name].inputs) == 2:
            for shapes in (((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 4), None)):
                cases.append((name, op, shapes))
        else:
            cases.append((name, op, ((3, 4),)))
    return cases


@pytest.mark.parametrize(
    ("name", "op", "shapes"), _inline_cases(), ids=lambda v: str(v) if isinstance(v, tuple) else None
)
def test_inlined_vjps_are_bitwise_the_eager_ones(name, op, shapes):
    """Every VJP the CPU replay writes inline, against eager: both inputs, broadcasting, a Python scalar."""
    rng = np.random.default_rng(len(name))

    def grad(*xs):
        with gt.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            args = list(xs) + ([1.7] if len(shapes) == 2 and shapes[1] is None else [])
            y = gt.sum(op(*args) * gt.constant(np.linspace(0.5, 1.5, 12).reshape(3, 4).astype(np.float32)))
        return tape.gradient(y, list(xs))

    f = gt.function(grad)
    for _ in range(3):
        dom = _INLINE_DOMAIN.get(name, lambda a: a)
        xs = [gt.constant(dom(rng.standard_normal(s) * 0.9).astype(np.float32)) for s in shapes if s is not None]
        with np.errstate(all="ignore"):  # (log of a negative: NaN in both, bit for bit)
            for a, b in zip(grad(*xs), f(*xs)):
                assert np.array_equal(a.numpy(), b.numpy(), equal_nan=True), name
    # and it was inlined: the replay's code does not call that primitive's VJP function
    vjp = gt.REGISTRY[name].vjp
    called = f._cache[f._keys[-1]].replay.__globals__.values()
    assert all(fn is not vjp for fn in called), f"{name}'s VJP is still called by the replay"


# -- nested structures: one nest implementation (gputape.core._nest) for the tape and gt.function


def test_namedtuple_results_and_arguments_survive_replays():
    import collections

    Out = collections.namedtuple("Out", "loss scaled")
    In = collections.namedtuple("In", "x scale")

    @gt.function
    def f(inp):
        y = gt.sum(inp.x * inp.scale)
        return Out(loss=y, scaled={"twice": y * 2.0, "list": [y + 1.0]})

    for k in range(3):  # the trace, then replays
        x = gt.constant([1.0, 2.0 + k])
        r = f(In(x, gt.constant(3.0)))
        assert type(r) is Out and type(r.scaled) is dict and type(r.scaled["list"]) is list
        want = 3.0 * (3.0 + k)
        assert float(r.loss) == want and float(r.scaled["twice"]) == 2 * want and float(r.scaled["list"][0]) == want + 1
    assert f.tracing_count == 1


def test_fused_backward_keeps_the_nan_guard_of_log():
    """Regression: the fused replay's log template was ``g / a0`` while eager's VJP is guarded
    (``multiply_no_nan(1 / x, g)``), so under a where() that masks ``log(3 w)`` at ``w = 0`` the
    eager gradient was 0 and the fused one NaN. Both now come from one declaration."""

    def f(w):
        with gt.GradientTape() as tape:
            tape.watch(w)
            y = gt.sum(gt.where(w > 0.5, gt.log(3 * w), 0.0))
        return tape.gradient(y, w)

    w = gt.constant(np.array([0.0, 0.25, 1.0, 2.0]))
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) in the branch not taken
        eager = f(w).numpy()
        assert eager.tolist() == [0.0, 0.0, 1.0, 0.5]
        cf = gt.Function(f, graphs="emulate")
        cf._fuse_emulated = True
        for _ in range(3):
            np.testing.assert_array_equal(cf(w).numpy(), eager)
    assert cf.graph_report["fused_chains"] == [2]  # log's VJP and 3 * w's, in one kernel


# -- the positional fast key (Function.__call__ skips flattening for plain positional calls) --


@pytest.mark.filterwarnings("ignore:gt.function.*has been traced:gputape.core.tape.GputapeWarning")
def test_fast_key_keeps_every_distinction_of_the_full_key():
    calls = []

    @gt.function
    def f(a, b, k):
        calls.append(1)  # Python runs once per trace
        return a * b + k

    x32 = gt.constant(np.arange(3, dtype=np.float32))
    y32 = gt.constant(np.ones(3, np.float32))
    x64 = gt.constant(np.arange(3, dtype=np.float64))
    cases = [
        ((x32, y32, 1.0), 1),  # first trace
        ((x32, y32, 1.0), 1),  # replay (the fast key)
        ((gt.constant(np.full(3, 2.0, np.float32)), y32, 1.0), 1),  # same signature, new values
        ((x32, y32, 2.0), 2),  # a Python value is part of the key
        ((x32, y32, 2), 3),  # ... and so is its type (int is not float)
        ((x64, y32, 1.0), 4),  # a dtype
        ((x32[:2], y32[:2], 1.0), 5),  # a shape
        ((x32, x32, 1.0), 6),  # the same array twice: another dataflow
        ((x32.numpy(), y32, 1.0), 6),  # a host array keys as a tensor of its shape (the full key's rule)
        ((x32.numpy(), y32, 1.0), 6),
    ]
    for args, traces in cases:
        a, b, k = args
        expect = np.asarray(a) * np.asarray(b) + k
        np.testing.assert_array_equal(f(*args).numpy(), expect)
        assert f.tracing_count == traces, args
    assert len(calls) == 6


def test_fast_key_tells_variables_apart_and_reads_their_current_value():
    @gt.function
    def f(v, x):
        return v * x

    v1, v2 = gt.Variable([1.0, 2.0]), gt.Variable([10.0, 20.0])
    x = gt.constant([1.0, 1.0])
    assert f(v1, x).numpy().tolist() == [1.0, 2.0]
    assert f(v2, x).numpy().tolist() == [10.0, 20.0]
    assert f(v1, x).numpy().tolist() == [1.0, 2.0]
    v1.assign([3.0, 4.0])
    assert f(v1, x).numpy().tolist() == [3.0, 4.0]
    assert f.tracing_count == 2


def test_bias_gradients_are_reduced_inline_in_the_replay_and_equal_eager_bitwise():
    # the replay writes sum_to's numpy calls for the traced shape (no call per bias), and they
    # give the bits of the eager sweep's F.sum_to
    rng = np.random.default_rng(4)
    x = gt.constant(rng.standard_normal((5, 3)).astype(np.float32))
    w = gt.Variable(rng.standard_normal((3, 2)).astype(np.float32))
    b = gt.Variable(rng.standard_normal(2).astype(np.float32))

    def grads(x):
        with gt.GradientTape() as tape:
            y = gt.sum(gt.tanh(x @ w + b) * 1.5)
        return tape.gradient(y, [w, b])

    f = gt.function(grads)
    compiled = [g.numpy() for g in f(x)]
    assert "ADD_REDUCE(" in f.code and "if s" in f.code
    eager = [g.numpy() for g in grads(x)]
    for a, e in zip(compiled, eager):
        assert a.dtype == e.dtype and np.array_equal(a, e)


def test_an_inlined_reduction_takes_the_recorded_call_for_another_shape():
    # the inline form is guarded by the traced shape; any other shape runs backward._fit as recorded
    from gputape.core.backward.sweep import _fit, sum_to
    from gputape.function._codegen import _Fit, _Slot, _Step, compile_replay
    from gputape.ops import raw_namespace

    F = raw_namespace(np)
    fit = _Fit(_fit, F, shape=(1, 3), nb=0, cast=None)
    fit.traced = (4, 3)
    replay, src = compile_replay("t", [_Step(fit, [_Slot(0)], 1, "device")], [], [0], [_Slot(1)])
    assert "ADD_REDUCE" in src
    rng = np.random.default_rng(5)
    for shape in [(4, 3), (2, 5, 3), (1, 3)]:
        g = rng.standard_normal(shape).astype(np.float32)
        (out,) = replay(g)
        assert out.shape == (1, 3) and np.array_equal(out, sum_to(F, g, (1, 3)))
