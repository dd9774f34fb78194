"""The loss head fused at gradient time (gputape.core.loss_head) and the cross-entropy primitives.

What a user writes -- ``log_softmax`` then a one-per-row gather, or a product with one-hot labels and
a class-axis sum -- becomes one node of the cross-entropy primitive when ``tape.gradient`` runs. These
tests pin that the fused gradient is the unfused sweep's, bit for bit; that it equals the hand-derived
``softmax - onehot``; that it is used (the fused VJP runs) by the sweep, the compiled backward and a
gt.function replay; and that every condition that fails falls back to the unfused nodes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from bitwise_helpers import same_bits

import gputape as gt
from gputape.core import loss_head as _loss_head
from gputape.nn import functional as fn

N, C = 12, 5
RNG = np.random.default_rng(7)
Z = RNG.standard_normal((N, C)) * 3
Y = RNG.integers(0, C, N)


@pytest.fixture
def spy(monkeypatch):
    """Counts the fused VJP's runs (the sparse and the dense declaration)."""
    calls = {"sparse": 0, "dense": 0}
    sparse, dense = fn.head_grad, fn.dense_head_grad

    def s(*a, **k):
        calls["sparse"] += k.get("picked", False)
        return sparse(*a, **k)

    def d(*a, **k):
        calls["dense"] += k.get("picked", False)
        return dense(*a, **k)

    monkeypatch.setattr(fn, "head_grad", s)
    monkeypatch.setattr(fn, "dense_head_grad", d)
    return calls


def _unfused(monkeypatch):
    monkeypatch.setattr(_loss_head, "WINDOW", 0)


def _closed_form(z, labels, scale):
    z = z.astype(np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return (p - np.eye(z.shape[1])[labels]) * scale


FORMS = {
    "gather-np-arange": lambda logp, y, oh: -gt.mean(logp[np.arange(N), y]),
    "gather-gt-arange": lambda logp, y, oh: -gt.mean(logp[gt.arange(N), y]),
    "gather-tensor-labels": lambda logp, y, oh: -gt.mean(logp[np.arange(N), gt.constant(y)]),
    "gather-negative-labels": lambda logp, y, oh: -gt.mean(logp[np.arange(N), y - C]),
    "gather-sum-weighted": lambda logp, y, oh: -gt.sum(logp[np.arange(N), y] * np.linspace(0.5, 2, N)),
    "gather-sum": lambda logp, y, oh: -gt.sum(logp[np.arange(N), y]) / N,
    "gather-mean-of-negative": lambda logp, y, oh: gt.mean(-logp[np.arange(N), y]),
    "onehot-left": lambda logp, y, oh: -gt.mean(gt.sum(oh * logp, axis=1)),
    "onehot-right": lambda logp, y, oh: -gt.mean(gt.sum(logp * oh, axis=-1)),
    "onehot-multiply": lambda logp, y, oh: -gt.mean(gt.sum(gt.multiply(gt.constant(oh), logp), axis=1)),
}


def _grad(form, dtype, compile_=False):
    z = gt.Variable(Z.astype(dtype))
    oh = np.eye(C, dtype=dtype)[Y]
    with gt.GradientTape(compile=compile_) as tape:
        logp = gt.nn.log_softmax(z * 1.0)
        loss = FORMS[form](logp, Y, oh)
    return tape.gradient(loss, z).numpy(), tape


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("form", list(FORMS))
def test_fused_forms_are_the_unfused_sweep_bit_for_bit(monkeypatch, spy, form, dtype):
    fused, tape = _grad(form, dtype)
    kind = "dense" if form.startswith("onehot") else "sparse"
    assert spy[kind] == 1, spy
    scale = np.linspace(0.5, 2, N)[:, None] if form == "gather-sum-weighted" else 1 / N
    tol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(fused, _closed_form(Z.astype(dtype), Y, scale), rtol=tol, atol=tol)
    # summary()'s view after the backward: the ops as recorded, not the fused node
    assert "log_softmax" in tape.summary() and "cross_entropy" not in tape.summary()
    _unfused(monkeypatch)
    unfused, _ = _grad(form, dtype)
    assert spy[kind] == 1  # (the unfused run did not call it)
    same_bits(fused, unfused, form)


@pytest.mark.parametrize(
    ("loss", "params", "replaced"),
    [
        (lambda logp, oh: -gt.mean(logp[np.arange(N), Y]), {"fused": True, "mean": N}, "mean"),
        (lambda logp, oh: -gt.sum(logp[np.arange(N), Y]), {"fused": True, "sum": True}, "sum"),
        (lambda logp, oh: -gt.mean(logp[np.arange(N), Y], keepdims=True), {"fused": True}, "getitem"),
        (lambda logp, oh: -gt.mean(gt.sum(oh * logp, axis=1)), {"fused": True, "mean": N}, "mean"),
        (lambda logp, oh: gt.sum(oh * logp, axis=1), {"fused": True}, "sum"),
    ],
)
def test_what_the_fused_node_replaces(loss, params, replaced):
    """The fused node stands where the last op of the head stood (a full mean or sum joins it); the
    other nodes stay; restore() puts the records of the ops as recorded back."""
    z = gt.Variable(Z)
    with gt.GradientTape() as tape:
        out = loss(gt.nn.log_softmax(z * 1.0), np.eye(C)[Y])
    nodes = tape._nodes
    before = [n.prim.name for n in nodes]
    fused = _loss_head.fuse(tape, {out._id: None}, [z._id])
    (at,) = [p for p, n in enumerate(nodes) if n.params is not None and n.params.get("fused")]
    assert nodes[at].params == params and before[at] == replaced
    assert [n.prim.name for p, n in enumerate(nodes) if p != at] == [b for p, b in enumerate(before) if p != at]
    _loss_head.restore(tape, fused)
    assert at in {p for p, _ in fused}
    for p, _ in fused:  # each node of the head, as recorded, residual-free
        assert type(nodes[p]) is tuple and nodes[p][0].name == before[p]


@pytest.mark.parametrize("form", ["gather-np-arange", "onehot-left"])
def test_explain_summary_and_dot_after_a_fused_backward_are_the_unfused_ones(monkeypatch, spy, form):
    def views():
        z = gt.Variable(Z)
        other = gt.Variable(Z[:1])  # read by nothing: explain says why
        with gt.GradientTape() as tape:
            logp = gt.nn.log_softmax(z * 1.0)
            loss = FORMS[form](logp, Y, np.eye(C)[Y])
        tape.gradient(loss, [z, other])
        views = (str(tape.explain(loss, z)), str(tape.explain(loss, other)), tape.summary(), tape.to_dot())
        ids: dict[str, str] = {}  # tensor ids differ from run to run: number them by first appearance
        return tuple(re.sub(r"\bt\d+\b", lambda m: ids.setdefault(m.group(), f"t{len(ids)}"), v) for v in views)

    fused = views()
    assert spy["sparse"] + spy["dense"] == 1
    _unfused(monkeypatch)
    assert views() == fused
    assert "[connected]" in fused[0] and "log_softmax" in fused[2] and "cross_entropy" not in fused[3]


def test_awkward_cotangents_keep_the_unfused_bits(monkeypatch, spy):
    """-0.0, NaN and inf cotangents of the picked values: the same bits as the scatter and row sums."""
    g = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, 1.5, -2.0, 1e-300, -0.0, 3.0, 0.25, -1.0])
    z = gt.constant(np.concatenate([Z[:, :4], np.full((N, 1), -800.0)], 1))  # exp underflows to 0 there

    def grads():
        with gt.GradientTape() as tape:
            tape.watch(z)
            picked = gt.nn.log_softmax(z)[np.arange(N), Y]
        return tape.gradient(picked, z, output_gradients=g).numpy()

    fused = grads()
    assert spy["sparse"] == 1
    _unfused(monkeypatch)
    same_bits(fused, grads())


def test_compiled_backward_runs_the_fused_vjp(monkeypatch, spy):
    monkeypatch.setattr(gt.config, "_compile_backward", True)
    gt.debug.clear_backward_cache()
    for form in ("gather-np-arange", "onehot-left"):
        sweep, _ = _grad(form, np.float32)
        for _ in range(3):
            compiled, _ = _grad(form, np.float32, compile_=True)
        same_bits(compiled, sweep, form)
    assert gt.debug.backward_cache_report()["hits"] >= 2
    assert spy["sparse"] == 4 and spy["dense"] == 4


def test_gt_function_replays_the_fused_vjp_with_each_calls_labels(spy):
    """The trace records the fused node's VJP; each replay runs it on that call's labels and one-hot."""
    w = gt.Variable(Z)

    def step(labels, onehot):
        with gt.GradientTape() as tape:
            logp = gt.nn.log_softmax(w * 1.0)
            loss = -gt.mean(logp[np.arange(N), labels]) - gt.mean(gt.sum(onehot * gt.nn.log_softmax(w * 2.0), 1))
        return tape.gradient(loss, w)

    f = gt.function(step)
    for seed in range(3):
        y = np.random.default_rng(seed).integers(0, C, N)
        oh = gt.constant(np.eye(C)[y])
        before = dict(spy)
        eager = step(gt.constant(y), oh).numpy()
        assert spy["sparse"] == before["sparse"] + 1 and spy["dense"] == before["dense"] + 1
        mid = dict(spy)
        same_bits(f(gt.constant(y), oh).numpy(), eager)
        # the trace (first call) and each replay run the fused VJPs, with this call's labels
        assert spy["sparse"] == mid["sparse"] + 1 and spy["dense"] == mid["dense"] + 1, (seed, spy, mid)
        want = _closed_form(Z, y, 1 / N) + 2 * _closed_form(2 * Z, y, 1 / N)
        np.testing.assert_allclose(eager, want, rtol=1e-12, atol=1e-14)


def _loss(logp, rows=None, labels=None, onehot=None):
    if onehot is not None:
        return -gt.mean(gt.sum(onehot * logp, axis=1))
    return -gt.mean(logp[np.arange(N) if rows is None else rows, Y if labels is None else labels])


def _plain(**kw):
    z = gt.Variable(Z)
    with gt.GradientTape() as tape:
        loss = _loss(gt.nn.log_softmax(z * 1.0), **kw)
    return tape.gradient(loss, z).numpy()


def _second_consumer():
    z = gt.Variable(Z)
    with gt.GradientTape() as tape:
        logp = gt.nn.log_softmax(z * 1.0)
        loss = _loss(logp) + 0.1 * gt.sum(gt.exp(logp) * logp)  # an entropy term reads logp too
    return tape.gradient(loss, z).numpy()


def _logp_source():
    z = gt.Variable(Z)
    with gt.GradientTape(persistent=True) as tape:
        logp = gt.nn.log_softmax(z * 1.0)
        loss = _loss(logp)
    gz, gl = tape.gradient(loss, [z, logp])
    return np.concatenate([gz.numpy().ravel(), gl.numpy().ravel(), tape.gradient(loss, z).numpy().ravel()])


def _logp_target():
    z = gt.Variable(Z)
    with gt.GradientTape() as tape:
        logp = gt.nn.log_softmax(z * 1.0)
        loss = _loss(logp)
    return tape.gradient([loss, logp], z).numpy()


def _watched():
    z = gt.Variable(Z)
    w = gt.constant(np.eye(C)[Y])
    with gt.GradientTape() as tape:
        tape.watch(w)  # on the tape: a cotangent could be asked of it, so no fusion
        loss = _loss(gt.nn.log_softmax(z * 1.0), onehot=w)
    return tape.gradient(loss, z).numpy()


def _higher_order():
    z = gt.Variable(Z)
    with gt.GradientTape() as outer:
        with gt.GradientTape() as inner:
            loss = _loss(gt.nn.log_softmax(z * 1.0))
        g = inner.gradient(loss, z)  # recorded by outer: the unfused VJPs, written with gputape's ops
        s = gt.sum(g * g)
    return np.concatenate([g.numpy().ravel(), outer.gradient(s, z).numpy().ravel()])


def _numerics():
    with gt.debug.check_numerics():
        return _plain()


FALLBACKS = {
    "second-consumer": _second_consumer,
    "logp-is-a-source": _logp_source,
    "logp-is-a-target": _logp_target,
    "onehot-watched": _watched,
    "rows-permuted": lambda: _plain(rows=np.arange(N)[::-1].copy()),
    "rows-repeat": lambda: _plain(rows=np.zeros(N, int)),
    "onehot-broadcast": lambda: _plain(onehot=np.eye(C)[Y][:1]),
    "higher-order": _higher_order,
    "check-numerics": _numerics,
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_fallbacks_give_the_unfused_gradient(monkeypatch, spy, case):
    got = FALLBACKS[case]()
    assert spy["sparse"] == 0 and spy["dense"] == 0, (case, spy)
    _unfused(monkeypatch)
    same_bits(got, FALLBACKS[case](), case)
    if case in ("onehot-watched", "check-numerics"):
        np.testing.assert_allclose(got, _closed_form(Z, Y, 1 / N), rtol=1e-10, atol=1e-14)


def test_labels_of_another_dtype_fuse_with_the_unfused_bits(monkeypatch, spy):
    """float32 or bool one-hot labels against float64 log-probabilities: numpy promotes both ways alike."""
    labels = (np.eye(C, dtype=np.float32)[Y], np.eye(C, dtype=bool)[Y])
    got = [_plain(onehot=q) for q in labels]
    assert spy["dense"] == 2
    _unfused(monkeypatch)
    for q, g in zip(labels, got):
        same_bits(g, _plain(onehot=q))


def test_gt_function_trace_with_traced_rows_is_not_fused(spy):
    """Rows from a traced tensor may differ on a replay: no fusion under a trace (a host arange is fused)."""
    z = gt.Variable(Z)

    @gt.function
    def step(rows):
        with gt.GradientTape() as tape:
            loss = -gt.mean(gt.nn.log_softmax(z * 1.0)[rows, Y])
        return tape.gradient(loss, z)

    step(gt.constant(np.arange(N)))
    assert spy["sparse"] == 0
    rows = np.zeros(N, int)
    want = np.zeros((N, C))
    with gt.GradientTape() as tape:
        loss = -gt.mean(gt.nn.log_softmax(z * 1.0)[rows, Y])
    want = tape.gradient(loss, z).numpy()
    np.testing.assert_allclose(step(gt.constant(rows)).numpy(), want, rtol=1e-12)


def test_the_window_bounds_the_search(monkeypatch, spy):
    """A loss head followed by more than WINDOW nodes is left unfused (the search costs a constant)."""
    monkeypatch.setattr(_loss_head, "WINDOW", 8)
    z = gt.Variable(Z)
    with gt.GradientTape() as tape:
        loss = -gt.mean(gt.nn.log_softmax(z * 1.0)[np.arange(N), Y])
        for _ in range(8):
            loss = loss * 1.0
    g = tape.gradient(loss, z).numpy()
    assert spy["sparse"] == 0
    np.testing.assert_allclose(g, _closed_form(Z, Y, 1 / N), rtol=1e-12, atol=1e-14)


# -- the primitives ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_primitives_vjps_are_softmax_minus_onehot(dtype):
    z = gt.constant(Z.astype(dtype))
    oh = np.eye(C, dtype=dtype)[Y]
    q = gt.constant((oh * 0.7 + 0.3 / C).astype(dtype))  # smoothed labels: sum 1
    g = np.linspace(-1, 2, N).astype(dtype)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch([z, q])
        sparse = gt.nn.sparse_softmax_cross_entropy_with_logits(Y, z)
        dense = gt.nn.softmax_cross_entropy_with_logits(q, z)
    assert tape._nodes[-1].prim.name == "softmax_cross_entropy_with_logits"
    tol = 1e-5 if dtype == np.float32 else 1e-12
    want = _closed_form(Z.astype(dtype), Y, g[:, None])
    np.testing.assert_allclose(tape.gradient(sparse, z, output_gradients=g).numpy(), want, rtol=tol, atol=tol)
    dz, dq = tape.gradient(dense, [z, q], output_gradients=g)
    p = _closed_form(Z.astype(dtype), Y, 1.0) + np.eye(C)[Y]  # softmax
    np.testing.assert_allclose(dz.numpy(), (p - q.numpy()) * g[:, None], rtol=tol, atol=tol)
    logp = np.log(p)
    np.testing.assert_allclose(dq.numpy(), -logp * g[:, None], rtol=tol * 10, atol=tol * 10)
    assert dz.dtype == dtype and dq.dtype == dtype
    np.testing.assert_allclose(dense.numpy(), -(q.numpy() * logp).sum(1), rtol=tol)


def test_dense_labels_that_do_not_fit_the_primitive_compose_as_before():
    z = gt.constant(Z.astype(np.float32))
    oh64 = np.eye(C)[Y]  # float64 labels: numpy promotes, as before
    assert gt.nn.softmax_cross_entropy_with_logits(oh64, z).dtype == np.float64
    booloh = np.eye(C, dtype=bool)[Y]
    np.testing.assert_allclose(
        gt.nn.softmax_cross_entropy_with_logits(booloh, z).numpy(),
        gt.nn.sparse_softmax_cross_entropy_with_logits(Y, z).numpy(),
        rtol=1e-6,
    )
    zt = gt.constant(Z.T.copy())
    np.testing.assert_allclose(
        gt.nn.softmax_cross_entropy_with_logits(oh64.T.copy(), zt, axis=0).numpy(),
        gt.nn.sparse_softmax_cross_entropy_with_logits(Y, gt.constant(Z)).numpy(),
        rtol=1e-12,
    )


def test_keras_losses_from_logits_are_the_primitives():
    z = gt.constant(Z)
    oh = np.eye(C)[Y]
    with gt.GradientTape() as tape:
        tape.watch(z)
        a = gt.nn.losses.CategoricalCrossentropy(from_logits=True)(oh, z)
        b = gt.nn.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, z)
        names = [n.prim.name for n in tape._nodes]
        total = a + b
    assert "softmax_cross_entropy_with_logits" in names and "sparse_softmax_cross_entropy_with_logits" in names
    assert "log_softmax" not in names
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(total, z).numpy(), _closed_form(Z, Y, 2 / N), rtol=1e-10, atol=1e-14)


# -- the device path, on the fake GPU ----------------------------------------------------------------


def test_head_grad_on_a_fake_gpu_launches_the_kernel_with_the_signed_cotangent(monkeypatch):
    """On device arrays the sparse head is one launch of kernels/softmax_xent.cu: with -g for a picked
    cotangent and labels wrapped into [0, C); the dense head runs the array module's ops."""
    from fake_gpu import FakeArray, FakeCupy

    from gputape.devices import backend

    fake = FakeCupy()
    monkeypatch.setattr(backend, "_cupy", fake)
    monkeypatch.setattr(backend, "_probed", {})
    seen = []

    def launch(logits, labels, g=None, loss=True, grad=True):
        seen.append((type(logits), np.asarray(labels.get() if hasattr(labels, "get") else labels), g.get()))
        _, d = fn.ref_sparse_softmax_xent(logits.get(), seen[-1][1], g.get())
        return None, fake.asarray(d)

    monkeypatch.setattr(fn, "sparse_softmax_xent", launch)
    logp = Z - np.log(np.exp(Z).sum(1, keepdims=True))
    g = np.linspace(-1, 1, N)
    dev = fake.asarray(logp)
    d = fn.head_grad(fake.asarray(g), dev, fake.asarray(Y - C), picked=True)
    assert type(d) is FakeArray and seen[0][0] is FakeArray
    np.testing.assert_array_equal(seen[0][1], Y)
    np.testing.assert_array_equal(seen[0][2], -g)
    np.testing.assert_allclose(d.get(), fn.head_grad(g, logp, Y, picked=True), rtol=1e-12, atol=1e-15)
    oh = np.eye(C)[Y]
    dd = fn.dense_head_grad(fake.asarray(g), dev, fake.asarray(oh), picked=True)
    assert type(dd) is FakeArray
    np.testing.assert_allclose(dd.get(), fn.dense_head_grad(g, logp, oh, picked=True), rtol=1e-12, atol=1e-15)


def test_the_gather_form_fuses_on_a_fake_gpu(monkeypatch):
    """Rows given as a host arange reach a device op as a device copy: the getitem recorder marks them
    (``rows``), so the head fuses there too, one kernel launch with the picked cotangent negated."""
    from fake_gpu import FakeArray, FakeCupy

    from gputape.core import expr
    from gputape.devices import backend

    fake = FakeCupy()
    monkeypatch.setattr(backend, "_cupy", fake)
    monkeypatch.setattr(backend, "_probed", {})
    monkeypatch.setattr(expr, "launch_dtype", lambda dt: None)  # the fake runs no kernels
    launches = []

    def launch(logits, labels, g=None, loss=True, grad=True):
        launches.append(np.asarray(g.get()))
        _, d = fn.ref_sparse_softmax_xent(logits.get(), labels.get(), g.get())
        return None, fake.asarray(d)

    monkeypatch.setattr(fn, "sparse_softmax_xent", launch)

    def grad(rows):
        z = gt.Variable(fake.asarray(Z))
        with gt.GradientTape() as tape:
            loss = -gt.mean(gt.nn.log_softmax(z * 1.0)[rows, Y])
        getitem = next(n for n in tape._nodes if n.prim.name == "getitem")
        return tape.gradient(loss, z), getitem.params.get("rows", False)

    g, marked = grad(np.arange(N))
    assert marked and type(g._data) is FakeArray and len(launches) == 1
    np.testing.assert_allclose(launches[0], 1 / N)  # -(the picked values' cotangent, -1/N)
    np.testing.assert_allclose(g._data.get(), _closed_form(Z, Y, 1 / N), rtol=1e-12, atol=1e-15)
    g, marked = grad(np.arange(N)[::-1].copy())  # not an arange: unmarked, unfused
    assert not marked and len(launches) == 1
