"""The MLP's loss head on the CPU: ``-mean(log_softmax(z)[arange(n), labels])``.

Indexing by ``np.arange(n)`` and labels is recorded as picking each position once (``adv=UNIQUE``:
its adjoint is one assignment instead of ``np.add.at``); these tests pin that the gradient bits are
add.at's (and so fab10a0's) whatever the cotangent holds (-0.0, NaN, inf), that anything not proven
still accumulates, that gt.function replays (which scatter by each call's own indices) and the
compiled backward equal the sweep bit for bit, and that mean's and log_softmax's VJPs keep their bits.
"""

from __future__ import annotations

import numpy as np
import pytest
from bitwise_helpers import same_bits

import gputape as gt
from gputape.ops import shape as shape_ops

UNIQUE = shape_ops.UNIQUE
one_to_one = shape_ops._one_to_one

_FLOATS = (np.float16, np.float32, np.float64, np.complex64, np.complex128)


def _awkward(rng, n, dtype):
    """A cotangent with every sign-of-zero and non-finite case add.at treats specially."""
    g = rng.standard_normal(n)
    g[::5] = -0.0
    g[1::7] = 0.0
    g[3], g[4], g[7] = np.nan, np.inf, -np.inf
    g = g.astype(dtype)
    if np.dtype(dtype).kind == "c":
        g = g + 1j * np.where(rng.random(n) < 0.4, -0.0, rng.standard_normal(n)).astype(dtype)
    return g


def _add_at(g, key, shape, nlead=0):
    z = np.zeros(g.shape[:nlead] + shape, g.dtype)
    np.add.at(z, (slice(None),) * nlead + key, g)
    return z


@pytest.mark.parametrize("dtype", _FLOATS)
def test_unique_scatter_is_add_at_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    g = _awkward(rng, 64, dtype)
    key = (np.arange(64), rng.integers(-3, 3, 64))  # negative labels too: numpy's wrap-around
    same_bits(shape_ops._raw_scatter(np, g, key, (64, 3), 0, shape_ops.UNIQUE), _add_at(g, key, (64, 3)))
    # behind leading (batch) axes, and with a broadcast cotangent (a mean's VJP hands one over)
    gb = np.stack([g, g[::-1]])
    same_bits(shape_ops._raw_scatter(np, gb, key, (64, 3), 1, shape_ops.UNIQUE), _add_at(gb, key, (64, 3), 1))
    v = np.broadcast_to(g[:1], (64,))
    same_bits(shape_ops._raw_scatter(np, v, key, (64, 3), 0, shape_ops.UNIQUE), _add_at(v, key, (64, 3)))


def test_one_to_one_proofs():
    ar = np.arange(5)
    y = np.array([1, 1, 0, 2, 1])
    assert one_to_one((ar, y)) and one_to_one((y, ar)) and one_to_one((ar,))
    assert one_to_one((slice(None), ar, 2, None)) and one_to_one((ar.astype(np.int32), y, Ellipsis))
    assert one_to_one((np.arange(1), ar))  # the longest arange spans the broadcast
    assert not one_to_one((y,))  # repeats
    assert not one_to_one((ar[::-1].copy(), y))  # a permutation, but not proven by an arange
    assert not one_to_one((np.arange(1), y))  # the arange is broadcast: row 0 picked five times
    assert not one_to_one((ar[:, None], y[None, :]))  # n-d arrays
    assert not one_to_one((ar, ar > 2))  # a boolean array among them
    assert not one_to_one((ar, True))  # a Python bool is a 0-d mask
    assert not one_to_one((np.arange(shape_ops._ARANGE_MAX + 1),))  # too long to compare: add.at


def _node(f, *xs):
    with gt.GradientTape() as tape:
        tape.watch(list(xs))
        f(*xs)
    return tape._nodes[-1]


def test_recorded_as_unique_only_when_proven():
    x = gt.constant(np.random.default_rng(1).standard_normal((5, 3)))
    y = gt.constant(np.array([0, 2, 1, 1, 0]))
    ar = np.arange(5)
    assert _node(lambda x: x[ar, y], x).params["adv"] is UNIQUE
    assert _node(lambda x: x[ar, np.array([0, 2, 1, 1, 0])], x).params["adv"] is UNIQUE
    assert _node(lambda x: x[ar, :], x).params == {
        "idx": (shape_ops._Operand(0), slice(None)),
        "nlead": 0,
        "adv": UNIQUE,
    }
    assert _node(lambda x: x[np.array([0, 0, 1]), np.array([0, 1, 1])], x).params["adv"] is True
    assert _node(lambda x: x[np.array([0, 0, 1]), np.array([0, 1, 2])], x).params["adv"] is UNIQUE  # (the columns)
    assert _node(lambda x: x[np.arange(1), y], x).params["adv"] is True
    assert _node(lambda x: x[gt.constant(ar), y], x).params["adv"] is True  # (a tensor is not compared)
    assert _node(lambda x: x[1:, ::2], x).params["adv"] is False
    xf = gt.constant(np.zeros((5, 3), np.float32))
    assert _node(lambda x: x[ar, y], xf).params["adv"] is UNIQUE


def test_a_raw_arange_is_saved_shared_and_any_other_raw_index_copied():
    x = gt.constant(np.arange(15.0).reshape(5, 3))
    rows = np.arange(5)
    cols = np.array([0, 2, 1, 1, 0])
    with gt.GradientTape() as tape:
        tape.watch(x)
        q = x[rows, cols]
    saved = tape._nodes[-1].saved
    assert saved[0] is not rows and not saved[0].flags.writeable and saved[0].tolist() == rows.tolist()
    assert saved[1] is not cols
    rows[:] = 0  # the caller refills both buffers before gradient(): the gradient uses what the op saw
    cols[:] = 0
    want = np.zeros((5, 3))
    want[np.arange(5), [0, 2, 1, 1, 0]] = [1, 2, 3, 4, 5]
    np.testing.assert_array_equal(tape.gradient(q, x, output_gradients=gt.constant(np.arange(1.0, 6.0))), want)


def test_repeated_indices_still_accumulate():
    x = gt.constant(np.zeros((3, 2)))
    rows = np.array([0, 0, 2, 0])
    with gt.GradientTape() as tape:
        tape.watch(x)
        q = x[rows, np.array([1, 1, 0, 1])]
    np.testing.assert_array_equal(tape.gradient(q, x).numpy(), [[0.0, 3.0], [0.0, 0.0], [1.0, 0.0]])


def _loss_grads(z, labels, w, compile_=False):
    with gt.GradientTape(compile=compile_) as tape:
        tape.watch(z)
        logp = gt.nn.log_softmax(z)
        loss = -gt.mean(logp[np.arange(z.shape[0]), labels] * w)
    return tape.gradient(loss, z)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loss_head_gradient_against_closed_form_and_across_paths(monkeypatch, dtype):
    monkeypatch.setattr(gt.config, "_compile_backward", True)
    rng = np.random.default_rng(2)
    n, c = 16, 5
    z = gt.constant(rng.standard_normal((n, c)).astype(dtype))
    labels = gt.constant(rng.integers(0, c, n))
    w = rng.standard_normal(n).astype(dtype)
    w[::3] = -0.0  # picked cotangents of -0.0 (x * -0.0 for x > 0): add.at's +0.0 in the scatter
    sweep = _loss_grads(z, labels, w).numpy()
    # closed form: d/dz_i of -mean_i(w_i * log_softmax(z_i)[y_i]) = -w_i * (onehot(y_i) - softmax(z_i)) / n
    zz = z.numpy().astype(np.float64)
    p = np.exp(zz - zz.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(c)[labels.numpy()]
    want = -(onehot - p) * w.astype(np.float64)[:, None] / n
    np.testing.assert_allclose(sweep, want, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-7)
    gt.debug.clear_backward_cache()
    for _ in range(3):  # the third is a cache hit of the compiled backward
        compiled = _loss_grads(z, labels, w, compile_=True).numpy()
    assert gt.debug.backward_cache_report()["hits"] >= 1
    same_bits(compiled, sweep)

    @gt.function
    def step(z, labels):
        return _loss_grads(z, labels, w)

    for _ in range(2):
        same_bits(step(z, labels).numpy(), sweep)


def test_unique_scatter_matches_the_gt_function_replay_bitwise():
    """A replay scatters with add.at (the trace records no proof): the bits agree, -0.0 included."""
    z = gt.constant(np.linspace(-1, 1, 12).reshape(4, 3))
    ar = np.arange(4)

    def grads(z, labels, g):
        with gt.GradientTape() as tape:
            tape.watch(z)
            q = z[ar, labels]
        return tape.gradient(q, z, output_gradients=g)

    f = gt.function(grads)
    labels = np.array([2, 0, 0, 1])
    g = gt.constant(np.array([-0.0, 1.5, -0.0, -2.0]))
    eager = grads(z, labels, g).numpy()
    assert np.signbit(eager).sum() == 1  # only the -2.0: the -0.0s were added to +0.0
    same_bits(f(z, labels, g).numpy(), eager)


def test_gt_function_replay_with_repeated_rows_after_an_arange():
    """Rows passed as an argument: an arange when traced, repeating later; the replay accumulates."""
    z = gt.Variable(np.zeros((4, 3)))
    labels = np.array([2, 0, 0, 1])
    weights = np.array([1.0, 2.0, 4.0, 8.0])

    @gt.function
    def step(rows):
        with gt.GradientTape() as tape:
            loss = gt.sum(z[rows, labels] * weights)
        return tape.gradient(loss, z)

    for rows in (np.arange(4), np.array([0, 0, 3, 0]), np.arange(4)):
        want = np.zeros((4, 3))
        np.add.at(want, (rows, labels), weights)
        np.testing.assert_array_equal(step(rows).numpy(), want)


def test_second_order_through_a_unique_index():
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((4, 3))
    labels = np.array([2, 0, 0, 1])
    gt.testing.check_grads(lambda x: gt.sum(x[np.arange(4), labels] ** 3), x0, order=2)
    x = gt.constant(x0)
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.sum(x[np.arange(4), labels] ** 3)
        g = inner.gradient(y, x)
        s = gt.sum(g * g)
    want = np.zeros_like(x0)
    picked = x0[np.arange(4), labels]
    want[np.arange(4), labels] = 2 * (3 * picked**2) * 6 * picked  # d/dx sum((3x^2)^2) = 36 x^3
    np.testing.assert_allclose(outer.gradient(s, x).numpy(), want, rtol=1e-12)


# -- mean and the softmax family: the same bits as their plain numpy expressions ----------------------


def _shift(x):
    m = np.max(x, axis=-1, keepdims=True)
    return np.where(np.isfinite(m), m, 0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64])
def test_softmax_family_forwards_are_the_plain_expressions_bitwise(dtype):
    from gputape.nn import functional as fn

    rng = np.random.default_rng(4)
    for shape in [(128, 10), (3, 70), (2, 4, 9), (5,)]:
        x = (rng.standard_normal(shape) * 4).astype(dtype)
        s = x - _shift(x)
        same_bits(fn._log_softmax_fwd(np, x), s - np.log(np.sum(np.exp(s), axis=-1, keepdims=True)))
        e = np.exp(s)
        same_bits(fn._softmax_fwd(np, x), e / np.sum(e, axis=-1, keepdims=True))
    x = np.array([[1.0, np.inf, 0.0], [np.nan, 1.0, 2.0], [-np.inf, -np.inf, 0.0]])
    with np.errstate(invalid="ignore"):
        s = x - _shift(x)
        same_bits(fn._log_softmax_fwd(np, x), s - np.log(np.sum(np.exp(s), axis=-1, keepdims=True)))


def _raw_vjp(prim, g, node):
    from gputape.ops import raw_namespace

    return prim.vjp(raw_namespace(np), g, (True,), g.ndim - len(node.shapes[0]), node, *node.saved)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_family_vjps_are_the_plain_expressions_bitwise(dtype):
    rng = np.random.default_rng(5)
    z = gt.constant(rng.standard_normal((16, 7)).astype(dtype))
    for f in (gt.nn.log_softmax, gt.nn.softmax):
        node = _node(f, z)
        out = node.saved[0]
        other = np.float64 if dtype == np.float32 else np.float32
        for g in (
            rng.standard_normal((16, 7)).astype(dtype),
            np.broadcast_to(rng.standard_normal(7).astype(dtype), (16, 7)),  # a read-only view: never written
            rng.standard_normal((3, 16, 7)).astype(dtype),  # batched (jacobian)
            rng.standard_normal((16, 7)).astype(other),  # another dtype than the output's
        ):
            keep = g.copy()
            if f is gt.nn.log_softmax:
                want = g - np.exp(out) * np.sum(g, axis=-1, keepdims=True)
            else:
                want = out * (g - np.sum(g * out, axis=-1, keepdims=True))
            same_bits(_raw_vjp(node.prim, g, node), want)
            same_bits(g, keep)


def test_mean_vjp_is_a_read_only_view_of_g_over_n():
    q = gt.constant(np.random.default_rng(6).standard_normal(128).astype(np.float32))
    node = _node(lambda q: gt.mean(q), q)
    for g in (np.float32(-1.0), np.asarray(np.float32(-1.0)), np.float32(-0.0)):
        d = _raw_vjp(node.prim, g, node)
        assert d.shape == (128,) and not d.flags.writeable
        same_bits(d, np.full(128, np.float32(g) / np.float32(128)))
    node = _node(lambda q: gt.sum(q), q)
    same_bits(_raw_vjp(node.prim, np.float32(3.0), node), np.full(128, 3.0, np.float32))


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 1, 3, 1, 1, 1, 1, 1, 2, 1)])
def test_full_reductions_normalise_axis_none_as_every_axis(shape):
    from gputape.ops import reduce as red

    _, p = red._reduction_params(np.zeros(shape), None, False, "sum")
    assert p["axis"] == tuple(range(len(shape))) and p["kept"] == (1,) * len(shape)
    _, q = red._reduction_params(np.zeros(shape), tuple(range(len(shape))), False, "sum")
    assert p == q


def test_jacobian_and_persistent_tape_through_a_unique_index():
    x = gt.constant(np.random.default_rng(7).random((4, 3)))
    labels = np.array([2, 0, 0, 1])
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        q = x[np.arange(4), labels] * 2.0
    assert tape._nodes[0].params["adv"] is UNIQUE
    want = np.zeros((4, 4, 3))
    want[np.arange(4), np.arange(4), labels] = 2.0  # batched cotangents: the scatter behind a leading axis
    np.testing.assert_array_equal(tape.jacobian(q, x).numpy(), want)
    for _ in range(2):
        np.testing.assert_array_equal(tape.gradient(q, x).numpy(), want.sum(0))


def test_loss_head_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    z0 = rng.standard_normal((16, 5))
    labels = rng.integers(0, 5, 16)
    w = rng.standard_normal(16)
    w[::3] = -0.0
    got = _loss_grads(gt.constant(z0), labels, w).numpy()
    zt = torch.tensor(z0, requires_grad=True)
    loss = -(torch.log_softmax(zt, -1)[torch.arange(16), torch.tensor(labels)] * torch.tensor(w)).mean()
    loss.backward()
    np.testing.assert_allclose(got, zt.grad.numpy(), rtol=1e-12, atol=1e-15)
    # the index's adjoint alone: -0.0 cotangents scattered as +0.0, as PyTorch's index backward does
    xt = torch.zeros(4, 3, dtype=torch.float64, requires_grad=True)
    g = np.array([-0.0, 2.0, -0.0, -1.0])
    xt[torch.arange(4), torch.tensor([1, 0, 1, 2])].backward(torch.tensor(g))
    x = gt.constant(np.zeros((4, 3)))
    with gt.GradientTape() as tape:
        tape.watch(x)
        q = x[np.arange(4), np.array([1, 0, 1, 2])]
    same_bits(tape.gradient(q, x, output_gradients=gt.constant(g)).numpy(), xt.grad.numpy())


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), -1])
def test_float16_and_float32_means_are_numpys(axis):
    """np.mean accumulates float16 in float32 and rounds once; gt.mean gives numpy's bits for both."""
    rng = np.random.default_rng(9)
    for dtype in (np.float16, np.float32):
        x = (rng.random((40, 30, 7)) * 10).astype(dtype)
        for keepdims in (False, True):
            got = gt.mean(gt.constant(x), axis=axis, keepdims=keepdims).numpy()
            same_bits(got, np.mean(x, axis=axis, keepdims=keepdims))
