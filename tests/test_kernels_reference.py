"""The numpy references of the fused kernels (the CPU path) against straightforward math.

Each reference must equal what gputape's primitives and their VJPs compute (the
kernels replace those on a GPU) and hand-written numpy. ``tests/test_gpu.py``
then holds every kernel to its reference on a GPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gputape as gt
from gputape.kernels import registry as K  # noqa: N812  (short: it is on every line)

rng = np.random.default_rng(7)

ACT_FNS = {
    "relu": gt.nn.relu,
    "leaky_relu": lambda x: gt.nn.leaky_relu(x, 0.2),
    "elu": lambda x: gt.nn.elu(x, 1.0),
    "gelu": gt.nn.gelu,
    "gelu_tanh": lambda x: gt.nn.gelu(x, approximate=True),
    "sigmoid": gt.nn.sigmoid,
    "tanh": gt.tanh,
    "softplus": gt.nn.softplus,
}


def _x(shape, dtype="float64"):
    # away from the kinks at 0 (relu-likes) where the one-sided derivative is a convention
    x = rng.standard_normal(shape) * 3
    x[np.abs(x) < 1e-3] = 0.5
    return x.astype(dtype)


def test_every_activation_has_a_case():
    assert set(ACT_FNS) == set(K.ACTIVATIONS)


@pytest.mark.parametrize("name", K.ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_forward_reference_matches_the_op(name, dtype):
    x = _x((5, 7), dtype)
    want = ACT_FNS[name](gt.constant(x)).numpy()
    got = K.ref_activation_forward(name, x)
    assert got.dtype == np.dtype(dtype)
    tol = 1e-12 if dtype == "float64" else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", K.ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_backward_reference_matches_the_vjp(name, dtype):
    x = _x((4, 6), dtype)
    g = rng.standard_normal((4, 6)).astype(dtype)
    xt = gt.constant(x)
    with gt.GradientTape() as tape:
        tape.watch(xt)
        y = ACT_FNS[name](xt)
    want = tape.gradient(y, xt, output_gradients=gt.constant(g)).numpy()
    saved = y.numpy() if K.BACKWARD_SAVES[name] == "y" else x
    got = K.ref_activation_backward(name, saved, g)
    assert got.dtype == np.dtype(dtype)
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _erf(x):
    return np.vectorize(math.erf)(x)


HAND_FORWARD = {  # each activation written out by hand (closed forms, float64)
    "identity": lambda x: x,
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.2 * x),
    "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1),
    "gelu": lambda x: x * 0.5 * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": lambda x: (np.exp(2 * x) - 1) / (np.exp(2 * x) + 1),
    "softplus": lambda x: np.log(1 + np.exp(x)),
}


@pytest.mark.parametrize("name", K.FORWARD_ACTIVATIONS)
def test_forward_reference_matches_closed_forms(name):
    x = _x((60,))
    np.testing.assert_allclose(K.ref_activation_forward(name, x), HAND_FORWARD[name](x), rtol=1e-12, atol=1e-14)


def test_forward_is_one_declaration():
    """The CPU forward, the numpy reference and the CUDA gt_<name>_fwd are all generated from
    one expression per activation: the primitives' forwards ARE the generated functions, and
    the kernels' preamble is the generated CUDA (no hand-kept .cuh copy left)."""
    from gputape import REGISTRY
    from gputape.core.expr import forward as expr

    for name in ("relu", "leaky_relu", "elu", "sigmoid", "softplus"):
        f = expr.FORWARDS[name]
        assert REGISTRY[name].fwd is f.fn and f.array_native, name
    for name in K.FORWARD_ACTIVATIONS:
        assert expr.FORWARDS[name].cuda() in K.preamble(), name
    assert not list(K.kernel_dir().glob("*.cuh"))
    z = _x((7,))
    np.testing.assert_array_equal(K.ref_activation_forward("elu", z, 0.7), REGISTRY["elu"].fwd(np, z, alpha=0.7))


def test_forward_expression_refuses_what_it_cannot_render():
    from gputape.core import expr
    from gputape.core.expr import forward as expr_forward

    with pytest.raises(ValueError, match="unknown variables"):
        expr_forward.forward("bad_forward", lambda x: x * expr.var("y"))
    with pytest.raises(ValueError, match="already declared"):
        expr_forward.forward("relu", lambda x: x)
    assert "bad_forward" not in expr_forward.FORWARDS
    assert not expr_forward.FORWARDS["gelu"].array_native  # erf: numpy has none, so gelu runs on a namespace


HAND_DERIV = {  # d act / dx written out by hand, from x
    "relu": lambda x: (x > 0) * 1.0,
    "leaky_relu": lambda x: np.where(x > 0, 1.0, 0.2),
    "elu": lambda x: np.where(x > 0, 1.0, np.exp(np.minimum(x, 0))),
    "gelu": lambda x: (
        0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    ),
    "sigmoid": lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2,
    "tanh": lambda x: 1 / np.cosh(x) ** 2,
    "softplus": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("name", sorted(HAND_DERIV))
def test_backward_reference_matches_hand_derivatives(name):
    x = _x((50,))
    g = rng.standard_normal(50)
    saved = K.ref_activation_forward(name, x) if K.BACKWARD_SAVES[name] == "y" else x
    got = K.ref_activation_backward(name, saved, g)
    np.testing.assert_allclose(got, g * HAND_DERIV[name](x), rtol=1e-10, atol=1e-12)


def test_gelu_tanh_backward_matches_finite_differences():
    x = _x((40,))
    eps = 1e-6
    fd = (K.ref_activation_forward("gelu_tanh", x + eps) - K.ref_activation_forward("gelu_tanh", x - eps)) / (2 * eps)
    np.testing.assert_allclose(K.ref_activation_backward("gelu_tanh", x, np.ones(40)), fd, rtol=1e-7, atol=1e-8)


def test_alpha_parameters_are_used():
    x = np.array([-2.0, 3.0])
    np.testing.assert_allclose(K.ref_activation_backward("leaky_relu", x, np.ones(2), alpha=0.5), [0.5, 1.0])
    np.testing.assert_allclose(K.ref_activation_backward("elu", x, np.ones(2), alpha=2.0), [2 * np.exp(-2.0), 1.0])
    np.testing.assert_allclose(K.ref_activation_forward("elu", x, alpha=2.0), [2 * np.expm1(-2.0), 3.0])


def test_backward_takes_a_batch_of_cotangents():
    """jacobian() sends cotangents with leading batch axes: they broadcast against the residual."""
    x = _x((3, 4))
    g = rng.standard_normal((5, 3, 4))
    got = K.activation_backward("softplus", x, g)
    np.testing.assert_allclose(got, g / (1 + np.exp(-x)), rtol=1e-12)


def test_relu_backward_keeps_nan_cotangents():
    g = np.array([np.nan, np.nan])
    out = K.ref_activation_backward("relu", np.array([0.0, 1.0]), g)
    assert np.isnan(out).all()  # g * (y > 0), as the VJP: NaN * 0 is NaN


def test_stable_for_extreme_inputs():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is fine
        for name in ("sigmoid", "softplus", "elu"):
            assert np.isfinite(K.ref_activation_forward(name, x)).all()
            saved = K.ref_activation_forward(name, x) if K.BACKWARD_SAVES[name] == "y" else x
            assert np.isfinite(K.ref_activation_backward(name, saved, np.ones(5))).all()


@pytest.mark.parametrize("name", K.FORWARD_ACTIVATIONS)
def test_bias_activation(name):
    x = _x((6, 5))
    b = rng.standard_normal(5)
    z, y = K.bias_activation(x, b, name, return_preactivation=True)
    np.testing.assert_allclose(z, x + b, rtol=0, atol=0)
    want = (x + b) if name == "identity" else ACT_FNS[name](gt.constant(x + b)).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(K.bias_activation(x, b, name), y)


def test_bias_activation_keeps_float32():
    x = _x((3, 4), "float32")
    assert K.bias_activation(x, np.zeros(4, "float32"), "gelu").dtype == np.float32


# -- softmax cross-entropy -----------------------------------------------------------


def _xent_by_hand(z, labels):
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    loss = -np.log(np.take_along_axis(p, labels[..., None], -1)[..., 0])
    onehot = np.eye(z.shape[-1])[labels]
    return loss, p - onehot


@pytest.mark.parametrize("shape", [(7, 10), (3, 1), (2, 3, 5), (1, 4096)])
def test_xent_reference_matches_hand_math(shape):
    z = rng.standard_normal(shape) * 4
    labels = rng.integers(0, shape[-1], shape[:-1])
    g = rng.standard_normal(shape[:-1])
    loss, d = K.sparse_softmax_xent(z, labels, g)
    want_loss, want_d = _xent_by_hand(z, labels)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d, want_d * g[..., None], rtol=1e-12, atol=1e-12)


def test_xent_reference_matches_the_op_and_its_vjp():
    z = rng.standard_normal((6, 9))
    labels = rng.integers(0, 9, 6)
    g = rng.standard_normal(6)
    zt = gt.constant(z)
    with gt.GradientTape() as tape:
        tape.watch(zt)
        loss = gt.nn.sparse_softmax_cross_entropy_with_logits(labels, zt)
    dz = tape.gradient(loss, zt, output_gradients=gt.constant(g)).numpy()
    ref_loss, ref_d = K.ref_sparse_softmax_xent(z, labels, g)
    # the reference IS the CPU path (the primitive's forward and VJP on numpy): bitwise
    np.testing.assert_array_equal(ref_loss, loss.numpy())
    np.testing.assert_array_equal(ref_d, dz)


def test_xent_kernel_is_declared_beside_its_primitive():
    from gputape.nn import functional

    assert K.ref_sparse_softmax_xent is functional.ref_sparse_softmax_xent
    assert K.sparse_softmax_xent is functional.sparse_softmax_xent
    assert K.MODULE_FUNCTIONS["softmax_xent"] == functional.SOFTMAX_XENT.functions


def test_xent_is_stable_for_huge_logits_and_keeps_dtype():
    z = np.array([[1000.0, -1000.0, 999.0], [-1e30, 0.0, 1e30]], np.float32)
    with np.errstate(over="raise", invalid="raise"):
        loss, d = K.ref_sparse_softmax_xent(z, np.array([0, 2]))
    assert loss.dtype == d.dtype == np.float32
    np.testing.assert_allclose(loss, [math.log1p(math.exp(-1.0)), 0.0], rtol=1e-6, atol=1e-6)
    assert np.isfinite(d).all()
    np.testing.assert_allclose(d.sum(-1), 0.0, atol=1e-6)


def test_xent_outputs_can_be_skipped_and_bad_labels_are_nan():
    z = rng.standard_normal((3, 4))
    lo, d = K.sparse_softmax_xent(z, np.array([0, 4, -1]), loss=True, grad=False)
    assert d is None
    assert np.isfinite(lo[0]) and np.isnan(lo[1:]).all()
    lo, d = K.sparse_softmax_xent(z, np.array([1, 1, 1]), loss=False)
    assert lo is None and d.shape == (3, 4)


def test_xent_int32_labels_and_scalar_cotangent():
    z = rng.standard_normal((4, 3))
    lab = np.array([0, 1, 2, 1], np.int32)
    _, d = K.sparse_softmax_xent(z, lab, 0.25)
    np.testing.assert_allclose(d, _xent_by_hand(z, lab)[1] * 0.25, rtol=1e-12)


# -- accumulation ----------------------------------------------------------------------


def test_accumulate_in_place():
    acc = rng.standard_normal((3, 4))
    before = acc.copy()
    g = rng.standard_normal(4)  # broadcasts over rows
    out = K.accumulate_(acc, g, 0.5)
    assert out is acc
    np.testing.assert_allclose(acc, before + 0.5 * g, rtol=1e-15)
    K.accumulate_(acc, g)
    np.testing.assert_allclose(acc, before + 1.5 * g, rtol=1e-15)


# -- optimizers ------------------------------------------------------------------------


def _params(dtype):
    return [rng.standard_normal(s).astype(dtype) for s in ((4, 3), (3,), (2, 2, 2))]


def _grads_seq(params, n):
    return [[rng.standard_normal(p.shape).astype(p.dtype) for p in params] for _ in range(n)]


def _by_hand(kind, params, grads_seq, lr, momentum=0.0, nesterov=False, b1=0.9, b2=0.999, eps=1e-7, wd=0.0):
    """Textbook loops in float64 (Keras' forms), one tensor and one step at a time."""
    ps = [p.astype(np.float64) for p in params]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    for t, grads in enumerate(grads_seq, start=1):
        for i, g in enumerate(grads):
            g = g.astype(np.float64)
            ps[i] = ps[i] - lr * wd * ps[i]
            if kind == "sgd":
                if momentum:
                    m[i] = momentum * m[i] - lr * g
                    ps[i] = ps[i] + (momentum * m[i] - lr * g if nesterov else m[i])
                else:
                    ps[i] = ps[i] - lr * g
            else:
                m[i] = b1 * m[i] + (1 - b1) * g
                v[i] = b2 * v[i] + (1 - b2) * g * g
                a = lr * math.sqrt(1 - b2**t) / (1 - b1**t)
                ps[i] = ps[i] - a * m[i] / (np.sqrt(v[i]) + eps)
    return ps


OPT_CASES = [
    ("sgd", {}),
    ("sgd", {"momentum": 0.9}),
    ("sgd", {"momentum": 0.9, "nesterov": True}),
    ("adam", {}),
    ("adamw", {"weight_decay": 0.05}),
    ("adam", {"weight_decay": 0.01}),
]


@pytest.mark.parametrize(("kind", "kw"), OPT_CASES, ids=[f"{k}-{'-'.join(kw) or 'plain'}" for k, kw in OPT_CASES])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_optimizer_reference_matches_hand_math(kind, kw, dtype):
    params = _params(dtype)
    start = [p.copy() for p in params]
    seq = _grads_seq(params, 5)
    opt = K.FusedOptimizer(kind, 0.05, **kw)
    for grads in seq:
        opt.update(params, grads)
    hand = dict(kw)
    want = _by_hand(
        kind, start, seq, 0.05, hand.get("momentum", 0.0), hand.get("nesterov", False),
        wd=hand.get("weight_decay", 0.004 if kind == "adamw" else 0.0),
    )  # fmt: skip
    tol = 1e-12 if dtype == "float64" else 2e-5
    for p, w in zip(params, want):
        assert p.dtype == np.dtype(dtype)
        np.testing.assert_allclose(p, w, rtol=tol, atol=tol)
    assert opt.iterations == 5


def test_fused_optimizer_matches_gputape_optim():
    optim = pytest.importorskip("gputape.optim")
    if not hasattr(optim, "Adam"):
        pytest.skip("gputape.optim has no Adam yet")
    params = _params("float32")
    seq = _grads_seq(params, 4)
    for kind, make in (("adam", lambda: optim.Adam(0.01)), ("sgd", lambda: optim.SGD(0.01, momentum=0.9))):
        vs = [gt.Variable(p.copy()) for p in params]
        ref = make()
        fused = K.FusedOptimizer(kind, 0.01, momentum=0.9 if kind == "sgd" else 0.0)
        mine = [p.copy() for p in params]
        for grads in seq:
            ref.apply_gradients([(gt.constant(g), v) for g, v in zip(grads, vs)])
            fused.update(mine, grads)
        for v, p in zip(vs, mine):
            np.testing.assert_allclose(p, v.numpy(), rtol=1e-6, atol=1e-7)


def test_fused_optimizer_step_counter_is_ping_pong():
    st = np.zeros(2, np.int64)
    p, g = [np.zeros(2)], [np.ones(2)]
    for k in range(4):
        K.ref_optimizer_update("sgd", p, g, [None], [None], st, k & 1, np.array([1.0]))
    assert st.tolist() == [4, 3]  # the slot read by the next update (parity 0) holds 4


def test_fused_optimizer_learning_rate_and_iterations():
    opt = K.FusedOptimizer("sgd", 0.5)
    w = np.array([1.0])
    opt.update([w], [np.array([1.0])])
    opt.learning_rate = 0.25
    opt.update([w], [np.array([1.0])])
    assert w.tolist() == [0.25] and opt.learning_rate == 0.25 and opt.iterations == 2
    opt.iterations = 10
    assert opt.iterations == 10


def test_fused_optimizer_never_changes_a_value_a_tape_saved():
    """A Variable gets a new array each update; the one a tape saved is never written (TensorFlow semantics)."""
    w = gt.Variable(np.array([2.0, 3.0]))
    with gt.GradientTape(persistent=True) as tape:
        y = gt.sum(w * w)
    opt = K.FusedOptimizer("sgd", 0.5)
    opt.update([w], [np.array([1.0, 1.0])])
    np.testing.assert_allclose(w.numpy(), [1.5, 2.5])
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), [4.0, 6.0])  # the value the op saw
    tape.release()
    old = w._data  # (held by nobody else now: still not written)
    opt.update([w], [np.array([1.0, 1.0])])
    assert w._data is not old and old.tolist() == [1.5, 2.5]
    np.testing.assert_allclose(w.numpy(), [1.0, 2.0])


def test_fused_optimizer_checks_its_inputs():
    opt = K.FusedOptimizer("adam", 0.1)
    with pytest.raises(ValueError, match="gradient shape"):
        opt.update([np.zeros(3)], [np.zeros(2)])
    with pytest.raises(ValueError, match="2 parameters but 1 gradients"):
        opt.update([np.zeros(3), np.zeros(1)], [np.zeros(3)])
    with pytest.raises(ValueError, match="kind"):
        K.FusedOptimizer("lamb")
    with pytest.raises(TypeError, match="Variables or arrays"):
        opt.update([gt.constant([1.0])], [np.zeros(1)])


def test_unknown_activation_names_are_refused():
    with pytest.raises(ValueError, match="unknown activation"):
        K.ref_activation_backward("swish", np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="unknown activation"):
        K.bias_activation(np.zeros(1), np.zeros(1), "swish")


def test_sources_are_found_and_complete():
    for name in (f"{m}.cu" for m in K.MODULES):
        assert K.source(name)
    for module, fns in K.MODULE_FUNCTIONS.items():
        src = K.module_source(module)
        for fn in fns:
            assert fn[: fn.rfind("_")] in src or fn in src
    for name in K.ELEMENTWISE:
        assert "_harness" in K.elementwise_harness(name, "double")


def test_kernel_and_optimizer_modules_import_one_way():
    """No function-local imports in the kernel and optimizer modules, and nn.functional (which
    declares softmax_xent.cu) never imports gputape.kernels.registry, which re-exports it."""
    import ast
    from pathlib import Path

    root = Path(gt.__file__).parent
    files = ["kernels/registry.py", "kernels/build.py", "nn/functional.py"]
    files += [p.relative_to(root).as_posix() for p in sorted((root / "optim").glob("*.py"))]
    for name in files:
        tree = ast.parse((root / name).read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local = [n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
                assert not local, f"{name}: {fn.name} imports inside the function (line {local[0].lineno})"
        if name != "kernels/registry.py":
            for n in ast.walk(tree):
                if isinstance(n, ast.ImportFrom):
                    names = [a.name for a in n.names]
                    assert not (n.module or "").endswith("registry") and "registry" not in names, (
                        f"{name} imports gputape.kernels.registry"
                    )
