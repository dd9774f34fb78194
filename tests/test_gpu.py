"""GPU tests: every op and gradient on cupy against float64 numpy, every fused kernel
against its numpy reference, memory release, placement and DLPack.

All tests here carry the ``gpu`` marker; ``tests/conftest.py`` skips them with the
reason (no cupy, no driver, no device) when no GPU answers. Run them with
``python -m pytest -m gpu tests`` or ``benchmarks/gpu_check.sh``.
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gputape as gt
import gputape.devices.placement as pl
from gputape.devices import backend
from gputape.kernels import registry as K  # noqa: N812

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cp():
    mod = backend.cupy_module()
    assert mod is not None  # the conftest hook skips this module without a GPU
    return mod


def on_gpu(a, cp):
    return gt.constant(cp.asarray(a))


rng = np.random.default_rng(3)


# -- placement ------------------------------------------------------------------------------


def test_default_device_is_the_gpu(monkeypatch):
    monkeypatch.delenv("GPUTAPE_DEVICE", raising=False)
    monkeypatch.setattr(backend, "_default", None)
    assert backend.default_device() == "cuda:0"


def test_placement_and_copies(cp):
    x = gt.constant(cp.arange(3.0))
    assert x.device == "cuda:0"
    assert isinstance(x.numpy(), np.ndarray) and x.numpy().tolist() == [0.0, 1.0, 2.0]
    with gt.device("cuda"):
        assert gt.constant([1.0, 2.0]).device == "cuda:0"
    with gt.device("cpu"):
        assert gt.constant([1.0, 2.0]).device == "cpu"
    c = gt.ops.tensor_to(x, "cpu")
    assert c.device == "cpu" and isinstance(c._data, np.ndarray)
    g = gt.ops.tensor_to(c, "cuda")
    assert g.device == "cuda:0" and float(gt.sum(g)) == 3.0
    assert gt.ops.tensor_to(g, "cuda:0") is g


def test_mixing_devices_raises_naming_both(cp):
    a = gt.constant(cp.ones(3))
    b = gt.constant(np.ones(3))
    with pytest.raises(ValueError, match=r"cpu and cuda:0|cuda:0 and cpu"):
        gt.add(a, b)
    with pytest.raises(ValueError, match=r"cpu.*cuda:0|cuda:0.*cpu"):
        pl.check_same_device("add", [a._data, b._data])


# -- every op and gradient on cupy against float64 numpy -------------------------------------


def _cases():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_grad_registry import CASES

    return [(name, i, f, args) for name, cases in CASES.items() for i, (f, args) in enumerate(cases)]


ALL = _cases()


def _flat(y):
    if isinstance(y, (list, tuple)):
        return gt.concatenate([gt.reshape(o, (-1,)) for o in y])
    return y


def _run(f, args, v, place):
    xs = [place(a) for a in args]
    with gt.GradientTape() as tape:
        tape.watch(xs)
        y = _flat(f(*xs))
    grads = tape.gradient(y, xs, output_gradients=place(v), unconnected_gradients="zero")
    return y, grads


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("name", "i", "f", "args"), ALL, ids=[f"{n}-{i}" for n, i, _, _ in ALL])
def test_op_forward_and_gradient_match_numpy(cp, name, i, f, args, dtype):
    args64 = [np.asarray(a, np.float64) for a in args]
    shape = _flat(f(*[gt.constant(a) for a in args64])).shape
    v = rng.standard_normal(shape)
    y_ref, g_ref = _run(f, args64, v, lambda a: gt.constant(np.asarray(a, np.float64)))
    y, grads = _run(f, args64, v, lambda a: gt.constant(cp.asarray(np.asarray(a, dtype))))
    assert y.device == "cuda:0", f"{name}: the output left the GPU"
    # float32 on the GPU against float64 on the CPU: the registry test's float32 tolerance
    tol = dict(rtol=1e-9, atol=1e-12) if dtype == "float64" else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), **tol, err_msg=f"{name} forward ({dtype})")
    for k, (g, gr) in enumerate(zip(grads, g_ref)):
        assert g.device == "cuda:0"
        assert g.dtype == np.dtype(dtype) or name == "cast"
        np.testing.assert_allclose(g.numpy(), gr.numpy(), **tol, err_msg=f"{name} gradient {k} ({dtype})")


def test_second_order_on_the_gpu(cp):
    x = gt.constant(cp.asarray([0.3, -1.2, 2.0]))
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.sum(gt.sin(x) * x)
        dy = inner.gradient(y, x)
    d2 = outer.gradient(dy, x)
    xn = np.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(d2.numpy(), 2 * np.cos(xn) - xn * np.sin(xn), rtol=1e-12)


# -- fused kernels against their references ---------------------------------------------------

DTYPES = ["float32", "float64"]
TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-13)}


def test_every_kernel_compiles_and_loads(cp):
    built = K.compile_all(0)
    assert len(built) == 2 * len(K.ELEMENTWISE) + sum(len(v) for v in K.MODULE_FUNCTIONS.values())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", K.ACTIVATIONS)
def test_activation_backward_kernel(cp, name, dtype):
    x = (rng.standard_normal((257, 129)) * 3).astype(dtype)
    g = rng.standard_normal((257, 129)).astype(dtype)
    saved = K.ref_activation_forward(name, x) if K.BACKWARD_SAVES[name] == "y" else x
    got = K.activation_backward(name, cp.asarray(saved), cp.asarray(g))
    assert isinstance(got, cp.ndarray) and got.dtype == np.dtype(dtype)
    # float32: derivatives such as gelu_tanh's cancel to ~0 near their roots, where the GPU's
    # tanhf and numpy's tanh differ by a few ulps of the O(1) terms (seen on an H200: 3.6e-6)
    tol = dict(TOL[dtype], atol=1e-5) if dtype == "float32" else TOL[dtype]
    np.testing.assert_allclose(got.get(), K.ref_activation_backward(name, saved, g), **tol)
    gb = rng.standard_normal((3, 257, 129)).astype(dtype)  # a batch of cotangents (jacobian)
    got = K.activation_backward(name, cp.asarray(saved), cp.asarray(gb))
    np.testing.assert_allclose(got.get(), K.ref_activation_backward(name, saved, gb), **tol)


def test_alpha_and_float16_in_activation_backward(cp):
    x = rng.standard_normal(1000)
    for name in ("leaky_relu", "elu"):
        got = K.activation_backward(name, cp.asarray(x), cp.ones(1000), alpha=0.7)
        np.testing.assert_allclose(got.get(), K.ref_activation_backward(name, x, np.ones(1000), 0.7), rtol=1e-12)
    h = x.astype("float16")
    got = K.activation_backward("tanh", cp.asarray(h), cp.asarray(h))
    assert got.dtype == np.float16  # computed in float32, rounded once to float16
    want = K.ref_activation_backward("tanh", h.astype("float32"), h.astype("float32")).astype("float16")
    np.testing.assert_allclose(got.get().astype("float32"), want.astype("float32"), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", K.FORWARD_ACTIVATIONS)
def test_bias_activation_kernel(cp, name, dtype):
    x = (rng.standard_normal((300, 70)) * 3).astype(dtype)
    b = rng.standard_normal(70).astype(dtype)
    z, y = K.bias_activation(cp.asarray(x), cp.asarray(b), name, return_preactivation=True)
    rz, ry = K.ref_bias_activation(x, b, name)
    np.testing.assert_allclose(z.get(), rz, **TOL[dtype])
    np.testing.assert_allclose(y.get(), ry, **TOL[dtype])
    y2 = K.bias_activation(cp.asarray(x), cp.asarray(b), name)
    np.testing.assert_allclose(y2.get(), ry, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1024, 10), (7, 3), (3, 5000), (20000, 2048), (2, 3, 33), (5, 1)])
@pytest.mark.parametrize("ldt", ["int32", "int64"])
def test_softmax_xent_kernel(cp, shape, dtype, ldt):
    z = (rng.standard_normal(shape) * 5).astype(dtype)
    lab = rng.integers(0, shape[-1], shape[:-1]).astype(ldt)
    g = rng.standard_normal(shape[:-1]).astype(dtype)
    lo, d = K.sparse_softmax_xent(cp.asarray(z), cp.asarray(lab), cp.asarray(g))
    rlo, rd = K.ref_sparse_softmax_xent(z, lab, g)
    np.testing.assert_allclose(lo.get(), rlo, **TOL[dtype])
    np.testing.assert_allclose(d.get(), rd, **TOL[dtype])
    lo1, d1 = K.sparse_softmax_xent(cp.asarray(z), cp.asarray(lab))
    rlo1, rd1 = K.ref_sparse_softmax_xent(z, lab)
    np.testing.assert_allclose(lo1.get(), rlo1, **TOL[dtype])
    np.testing.assert_allclose(d1.get(), rd1, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_head_vjps_on_the_gpu_match_their_numpy_reference(cp, dtype):
    """The loss head's one VJP (gt.nn.functional.head_grad / dense_head_grad) on cupy arrays, fused
    (picked: the cotangent of the log-probability, negative labels wrapped) and not, against numpy."""
    from gputape.nn import functional as fn

    z = (rng.standard_normal((300, 10)) * 4).astype(dtype)
    logp = z - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)) - z.max(1, keepdims=True)
    lab = rng.integers(-10, 10, 300)
    g = rng.standard_normal(300).astype(dtype)
    oh = np.eye(10, dtype=dtype)[lab]
    for picked in (False, True):
        d = fn.head_grad(cp.asarray(g), cp.asarray(logp), cp.asarray(lab), picked=picked)
        np.testing.assert_allclose(d.get(), fn.head_grad(g, logp, lab, picked=picked), **TOL[dtype])
        d = fn.dense_head_grad(cp.asarray(g), cp.asarray(logp), cp.asarray(oh), picked=picked)
        np.testing.assert_allclose(d.get(), fn.dense_head_grad(g, logp, oh, picked=picked), **TOL[dtype])


def test_loss_head_forms_on_the_gpu_match_the_cpu(cp):
    """Each user form of the loss head: the same gradient on the GPU as on the CPU."""
    z0 = rng.standard_normal((64, 10))
    y = rng.integers(0, 10, 64)
    oh = np.eye(10)[y]
    forms = [
        lambda z: gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y, z)),
        lambda z: gt.mean(gt.nn.softmax_cross_entropy_with_logits(oh, z)),
        lambda z: -gt.mean(gt.nn.log_softmax(z)[np.arange(64), y]),
        lambda z: -gt.mean(gt.sum(oh * gt.nn.log_softmax(z), axis=1)),
    ]
    for f in forms:
        got = []
        for dev in ("cuda", "cpu"):
            with gt.device(dev):
                z = gt.Variable(z0)
                with gt.GradientTape() as tape:
                    loss = f(z)
                got.append(backend.to_host(tape.gradient(loss, z)._data))
        np.testing.assert_allclose(got[0], got[1], rtol=1e-10, atol=1e-12)


def test_softmax_xent_kernel_edge_cases(cp):
    z = np.array([[1000.0, -1000.0, 999.0], [-1e30, 0.0, 1e30], [0.0, 0.0, 0.0]], np.float32)
    lab = np.array([0, 2, 3])  # the last label is out of range: NaN row
    lo, d = K.sparse_softmax_xent(cp.asarray(z), cp.asarray(lab))
    rlo, rd = K.ref_sparse_softmax_xent(z, lab)
    np.testing.assert_allclose(lo.get(), rlo, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d.get(), rd, rtol=1e-6, atol=1e-6)
    assert np.isnan(lo.get()[2]) and np.isnan(d.get()[2]).all()
    lo, d = K.sparse_softmax_xent(cp.asarray(z[:2]), cp.asarray(lab[:2]), loss=False)
    assert lo is None and d.shape == (2, 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulate_kernel(cp, dtype):
    acc = rng.standard_normal((64, 33)).astype(dtype)
    g = rng.standard_normal(33).astype(dtype)
    acc_d = cp.asarray(acc)
    out = K.accumulate_(acc_d, cp.asarray(g), 0.5)
    assert out is acc_d
    np.testing.assert_allclose(acc_d.get(), K.ref_accumulate_(acc.copy(), g, 0.5), **TOL[dtype])


OPT_CASES = [
    ("sgd", {}),
    ("sgd", {"momentum": 0.9}),
    ("sgd", {"momentum": 0.9, "nesterov": True}),
    ("adam", {}),
    ("adamw", {}),
    ("adam", {"weight_decay": 0.01}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("kind", "kw"), OPT_CASES, ids=[f"{k}-{'-'.join(kw) or 'plain'}" for k, kw in OPT_CASES])
def test_fused_optimizer_kernel(cp, kind, kw, dtype):
    shapes = [(784, 256), (256,), (256, 256), (256,), (256, 10), (10,), (1,)]
    host = [rng.standard_normal(s).astype(dtype) for s in shapes]
    dev = [cp.asarray(p) for p in host]
    ref = K.FusedOptimizer(kind, 0.01, **kw)
    fused = K.FusedOptimizer(kind, 0.01, **kw)
    for step in range(5):
        grads = [rng.standard_normal(s).astype(dtype) for s in shapes]
        if step == 3:
            ref.learning_rate = fused.learning_rate = 0.002
        ref.update(host, grads)
        fused.update(dev, [cp.asarray(g) for g in grads])
    for p, h in zip(dev, host):
        np.testing.assert_allclose(p.get(), h, **TOL[dtype])
    assert fused.iterations == ref.iterations == 5
    assert isinstance(fused._step, cp.ndarray) and isinstance(fused._lr, cp.ndarray)  # state on the device


def test_fused_optimizer_mixed_dtypes_and_variables(cp):
    host = [rng.standard_normal((5, 3)).astype("float32"), rng.standard_normal(7)]
    vs = [gt.Variable(cp.asarray(h)) for h in host]
    ref = K.FusedOptimizer("adam", 0.01)
    fused = K.FusedOptimizer("adam", 0.01)
    for _ in range(3):
        grads = [rng.standard_normal(h.shape).astype(h.dtype) for h in host]
        ref.update(host, grads)
        fused.update(vs, [gt.constant(cp.asarray(g)) for g in grads])
    for v, h in zip(vs, host):
        np.testing.assert_allclose(v.numpy(), h, rtol=2e-5, atol=2e-6)
    assert fused.iterations == 3


def test_fused_optimizer_never_changes_a_value_a_tape_saved(cp):
    w = gt.Variable(cp.asarray([2.0, 3.0]))
    with gt.GradientTape(persistent=True) as tape:
        y = gt.sum(w * w)
    K.FusedOptimizer("sgd", 0.5).update([w], [cp.ones(2)])
    np.testing.assert_allclose(w.numpy(), [1.5, 2.5])
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), [4.0, 6.0])


# -- memory ---------------------------------------------------------------------------------------


def _mlp_step(x, ws):
    with gt.GradientTape(persistent=True) as tape:
        h = x
        for w in ws[:-1]:
            h = gt.nn.relu(h @ w)
        loss = gt.mean(gt.square(h @ ws[-1]))
    g1 = tape.gradient(loss, ws)
    g2 = tape.gradient(loss, ws)
    return tape, loss, g1, g2


def test_a_thousand_persistent_tape_steps_return_the_pool_to_its_baseline(cp):
    pool = cp.get_default_memory_pool()
    x = gt.constant(cp.asarray(rng.standard_normal((64, 128)).astype("float32")))
    ws = [gt.Variable(cp.asarray(rng.standard_normal(s).astype("float32") * 0.05)) for s in ((128, 128), (128, 64))]
    for _ in range(3):  # warm up every kernel and buffer the loop below uses (the update too)
        tape, loss, g1, g2 = _mlp_step(x, ws)
        for w, g in zip(ws, g1):
            w.assign_sub(0.001 * g)
        del tape, loss, g1, g2
    gc.collect()
    cp.cuda.Device().synchronize()
    base = pool.used_bytes()
    held0 = gt.memory_info("cuda:0")["held_by_tapes"]  # tapes other tests left alive, if any
    tape, loss, g1, g2 = _mlp_step(x, ws)
    info = gt.memory_info("cuda:0")
    assert info["held_by_tapes"] - held0 == tape.saved_bytes > 0
    assert info["in_use"] > base
    tape.release()
    assert gt.memory_info("cuda:0")["held_by_tapes"] == held0
    del tape, loss, g1, g2
    for _ in range(1000):
        tape, loss, g1, g2 = _mlp_step(x, ws)
        for w, g in zip(ws, g1):
            w.assign_sub(0.001 * g)
        del tape, loss, g1, g2
    gc.collect()
    cp.cuda.Device().synchronize()
    assert gt.memory_info("cuda:0")["held_by_tapes"] == held0
    assert pool.used_bytes() == base, f"the pool holds {pool.used_bytes() - base} more bytes after 1,000 steps"


def test_peak_limit_and_empty_cache(cp):
    gt.empty_cache("cuda:0")
    gt.reset_peak_memory("cuda:0")
    try:
        a = cp.empty(64 << 20, cp.uint8)
        assert gt.memory_info("cuda:0")["peak"] >= 64 << 20
        del a
    finally:
        gt.reset_peak_memory("cuda:0", track=False)
    assert gt.memory_info("cuda:0")["peak"] is None
    assert gt.empty_cache("cuda:0") >= 64 << 20  # the freed block was cached by the pool
    # cupy's limit caps what the pool holds (in use + cached), so start from an empty cache
    reserved = gt.memory_info("cuda:0")["pool_reserved"]
    gt.set_memory_limit(reserved + (16 << 20), device="cuda:0")
    try:
        assert gt.memory_info("cuda:0")["limit"] == reserved + (16 << 20)
        with pytest.raises(cp.cuda.memory.OutOfMemoryError):
            cp.empty(256 << 20, cp.uint8)
    finally:
        gt.set_memory_limit(device="cuda:0")
    assert gt.memory_info("cuda:0")["limit"] is None
    info = gt.memory_info("cuda:0")
    assert info["pool_reserved"] >= info["in_use"] and info["total_device"] > 0


# -- DLPack ----------------------------------------------------------------------------------------


class View:
    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kw):
        return pl.tensor_dlpack(self.t, **kw)

    def __dlpack_device__(self):
        return pl.tensor_dlpack_device(self.t)


def test_dlpack_with_cupy_is_zero_copy(cp):
    a = cp.arange(6.0)
    t = gt.from_dlpack(a)
    assert t.device == "cuda:0" and t._data.data.ptr == a.data.ptr
    b = cp.from_dlpack(View(t))
    assert b.data.ptr == a.data.ptr
    assert pl.tensor_dlpack_device(t) == (2, 0)


def test_dlpack_with_torch_cuda_is_zero_copy(cp):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    src = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
    t = gt.from_dlpack(src)
    assert t.device == "cuda:0" and t._data.data.ptr == src.data_ptr()
    y = gt.sum(t * 2.0)
    torch.cuda.synchronize()
    assert float(y) == 30.0
    back = torch.from_dlpack(View(t))
    assert back.data_ptr() == src.data_ptr() and back.device.type == "cuda"


def test_python_m_gputape_info_on_the_gpu():
    out = subprocess.run(
        [sys.executable, "-m", "gputape", "info"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert "cuda:0" in out and "available" in out and "compute capability" in out


# -- gt.function on the GPU: replay with and without CUDA graphs against eager -----------------------


def _gpu_train(cp, compiled, steps=6, optimizer="adam", capture_gemm=None):
    r = np.random.default_rng(11)
    sizes = (20, 32, 32, 4)
    params = []
    for a, b in itertools.pairwise(sizes):
        params += [
            gt.Variable(cp.asarray((r.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32))),
            gt.Variable(cp.asarray(np.zeros(b, np.float32))),
        ]
    opt = gt.optim.Adam(gt.optim.ExponentialDecay(0.01, 2, 0.5)) if optimizer == "adam" else gt.optim.RMSprop(0.01)

    def step(x, y):
        with gt.GradientTape() as tape:
            h = gt.nn.relu(x @ params[0] + params[1])
            h = gt.tanh(h @ params[2] + params[3])
            loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y, h @ params[4] + params[5]))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    f = step if compiled is None else gt.function(step, graphs=compiled, capture_gemm=capture_gemm)
    losses = []
    for _ in range(steps):
        x = gt.constant(cp.asarray(r.standard_normal((16, 20)).astype(np.float32)))
        y = gt.constant(cp.asarray(r.integers(0, 4, 16)))
        losses.append(float(f(x, y)))
    return losses, [cp.asnumpy(p._data) for p in params], f


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_compiled_step_on_the_gpu_with_and_without_graphs_equals_eager(cp, optimizer):
    e_l, e_p, _ = _gpu_train(cp, None, optimizer=optimizer)
    for graphs, capture_gemm in ((False, False), (True, False), (True, True)):
        c_l, c_p, f = _gpu_train(cp, graphs, optimizer=optimizer, capture_gemm=capture_gemm)
        np.testing.assert_allclose(c_l, e_l, rtol=1e-5, atol=1e-6)
        for a, b in zip(c_p, e_p):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        if graphs:
            rep = f.graph_report
            assert rep["captures"] == rep["graphs"] >= 1 and not rep["refused"], rep
            # with the matrix products captured (direct cuBLAS) forward and backward are one graph
            assert rep["graphs"] == 1 if capture_gemm else rep["graphs"] >= 2, rep


def test_compiled_gpu_graphs_follow_variables_and_fresh_inputs(cp):
    w = gt.Variable(cp.ones(8, dtype=cp.float32))
    f = gt.function(lambda x: gt.tanh(x * w) + gt.sum(x), graphs=True)
    outs = []
    for k in range(5):
        w.assign(cp.full(8, k, dtype=cp.float32))
        x = gt.constant(cp.asarray(rng.standard_normal(8).astype(np.float32)))
        outs.append((cp.asnumpy(f(x)._data), np.tanh(cp.asnumpy(x._data) * k) + cp.asnumpy(x._data).sum()))
    for got, want in outs:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    first = outs[0][0]
    assert not np.allclose(first, outs[-1][0])  # results of earlier calls were not overwritten


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layouts", [("C", "C"), ("F", "C"), ("C", "F"), ("F", "F"), ("S", "C")])
def test_direct_cublas_gemm_eager_and_captured_matches_cupy(cp, dtype, layouts):
    from gputape.devices import cublas

    gemm = cublas.gemm_for(0)
    assert gemm is not None, "direct cuBLAS is unavailable here (see the gputape debug log)"

    def make(rows, cols, layout):
        if layout == "C":
            return cp.asarray(rng.standard_normal((rows, cols)).astype(dtype))
        if layout == "F":
            return cp.asarray(rng.standard_normal((cols, rows)).astype(dtype)).T
        return cp.asarray(rng.standard_normal((rows, 2 * cols)).astype(dtype))[:, ::2]

    a, b = make(65, 33, layouts[0]), make(33, 17, layouts[1])
    want = cp.asnumpy(cp.matmul(a, b))
    tol = TOL[dtype] if dtype == "float64" else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cp.asnumpy(gemm.matmul(a, b)), want, **tol)
    np.testing.assert_allclose(cp.asnumpy(cublas.captured_matmul(gemm, a, b)), want, **tol)


def test_fused_backward_chain_on_the_gpu_matches_eager(cp):
    from benchmarks.workloads import chain_data, gputape_chain_grad

    x = gt.constant(cp.asarray(chain_data(64)))
    want = cp.asnumpy(gputape_chain_grad(x)._data)
    for fuse in (False, True):
        f = gt.function(gputape_chain_grad, fuse=fuse)
        for _ in range(3):
            got = cp.asnumpy(f(x)._data)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        rep = f.graph_report
        assert rep["graphs"] == 1 and not rep["refused"], rep
        assert (sum(rep["fused_chains"]) == 250) if fuse else not rep["fused_chains"], rep


# -- the backward kernels generated from the derivative declarations (gputape.core.expr) -------------


def _domain(name):
    # inside every declared op's domain (log, sqrt, arcsin, arctanh, ...); arccosh needs x > 1;
    # activations on both sides of their kink
    if name in K.ACTIVATIONS:
        return (-2.0, 2.0)
    return (1.2, 3.0) if name == "arccosh" else (0.2, 0.9)


def _operands(d, x):
    """The residuals a declared derivative reads, from input x (the output by the primitive's forward)."""
    return [gt.REGISTRY[d.name].fwd(np, x) if n == "out" else x for n in d.operands]


def _declared(unary):
    from gputape.core.expr import DERIVATIVES

    return sorted(n for n, d in DERIVATIVES.items() if (len(d.inputs) == 1) == unary)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", _declared(True))
def test_declared_backward_kernel_matches_its_numpy_vjp(cp, name, dtype):
    """Each unary primitive's generated kernel (what its VJP launches on cupy) against the same VJP on numpy."""
    import types

    from gputape.core.expr import DERIVATIVES
    from gputape.ops import raw_namespace

    d = DERIVATIVES[name]
    x = rng.uniform(*_domain(name), (64, 33)).astype(dtype)
    ops = _operands(d, x) if name in gt.REGISTRY else [x]
    g = rng.standard_normal((5, 64, 33)).astype(dtype)  # a batch of cotangents broadcasts too
    node = types.SimpleNamespace(params={p: 0.3 for p in d.params})
    (want,) = d.vjp(raw_namespace(np), g, (True,), 0, node, *ops)
    got = d._gpu(cp.asarray(g), *[cp.asarray(o) for o in ops], *node.params.values())
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(cp.asnumpy(got), want, **TOL[dtype], err_msg=name)
    (via_vjp,) = d.vjp(raw_namespace(cp), cp.asarray(g), (True,), 0, node, *[cp.asarray(o) for o in ops])
    np.testing.assert_allclose(cp.asnumpy(via_vjp), want, **TOL[dtype], err_msg=name)


def _fusable_cases():
    from gputape.core.expr import DERIVATIVES

    return [(n, k) for n, d in sorted(DERIVATIVES.items()) for k in range(len(d.inputs)) if d.fusable(k)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "k"), _fusable_cases())
def test_fused_backward_kernel_matches_numpy(cp, name, k, dtype):
    """gt.function's fused kernel of each declared VJP (tanh's after it, to make a chain) on cupy
    against the emulated replay's numpy evaluation of the same expression."""
    from gputape.core.expr import DERIVATIVES
    from gputape.function import _CudaGraphs, _EmulatedGraphs, compose

    expr, n = compose([DERIVATIVES[name].fusable(k), DERIVATIVES["tanh"].fusable(0)])
    ps = [rng.uniform(*_domain(name), (32, 7)).astype(dtype) for _ in range(n)]
    g = rng.standard_normal((32, 7)).astype(dtype)
    want = _EmulatedGraphs().elementwise(expr, n)(g, *ps)
    got = _CudaGraphs("cuda:0", False, True).elementwise(expr, n)(cp.asarray(g), *[cp.asarray(p) for p in ps])
    np.testing.assert_allclose(cp.asnumpy(got), want, **TOL[dtype], err_msg=f"{name} input {k}")


def _vector_kernel_names():
    from gputape.core.expr import DERIVATIVES

    return sorted(n for n, d in DERIVATIVES.items() if d.gpu_kernel)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", _vector_kernel_names())
def test_vectorised_backward_kernel_matches_the_elementwise_kernel(cp, name, dtype, monkeypatch):
    """gt.config.set_vector_kernels(True): the float4/double2 kernel against the ElementwiseKernel and
    the numpy VJP, on an odd length (the scalar tail runs), and a misaligned view (which must
    take the ElementwiseKernel and still be right)."""
    import types

    from gputape import config
    from gputape.core.expr import DERIVATIVES, VECTOR_MIN, Derivative
    from gputape.ops import raw_namespace

    launches = []
    real = Derivative._vector_launch

    def counted(self, *a):
        launches.append(self.name)
        return real(self, *a)

    monkeypatch.setattr(Derivative, "_vector_launch", counted)
    d = DERIVATIVES[name]
    n = 4 * VECTOR_MIN + 3
    x = rng.uniform(*_domain(name), n).astype(dtype)
    ops = _operands(d, x) if name in gt.REGISTRY else [x]
    g = rng.standard_normal(n).astype(dtype)
    node = types.SimpleNamespace(params={p: 0.3 for p in d.params})
    (want,) = d.vjp(raw_namespace(np), g, (True,), 0, node, *ops)
    dg, dops = cp.asarray(g), [cp.asarray(o) for o in ops]
    monkeypatch.setattr(config, "_vector_kernels", False)
    plain = d._gpu(dg, *dops, *node.params.values())
    assert launches == []
    monkeypatch.setattr(config, "_vector_kernels", True)
    vec = d._gpu(dg, *dops, *node.params.values())
    assert launches == [name]
    np.testing.assert_allclose(cp.asnumpy(vec), want, **TOL[dtype], err_msg=name)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(cp.asnumpy(vec), cp.asnumpy(plain), rtol=4 * eps, atol=4 * eps, err_msg=name)
    # a view one element in is not 16-byte aligned: the ElementwiseKernel computes it
    shifted = d._gpu(dg[1:], *(o[1:] for o in dops), *node.params.values())
    assert launches == [name]
    np.testing.assert_allclose(cp.asnumpy(shifted), want[1:], **TOL[dtype], err_msg=name)
