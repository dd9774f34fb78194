"""The benchmark workloads compute the right thing: gputape's MLP gradients and SGD step equal
the hand-written numpy ones, and every system's chain gradient agrees (float32 tolerance)."""

import sys
from pathlib import Path

import numpy as np
import pytest

try:
    from benchmarks import workloads as wk
except ImportError:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import workloads as wk

import gputape as gt

RTOL, ATOL = 2e-4, 1e-6


@pytest.fixture(scope="module")
def data():
    return wk.mlp_data(B=32, seed=1)


def test_mlp_gradients_match_handwritten_numpy(data):
    params = [gt.Variable(a, name=n) for a, n in zip(data.init, wk.PARAM_NAMES)]
    loss, grads = wk.gputape_mlp_loss_and_grads(gt.constant(data.X), data.Y, params)
    ref_loss, ref_grads = wk.numpy_mlp_loss_and_grads(data.X, data.Y, data.Yoh, list(data.init))

    assert loss.shape == () and loss.dtype == np.float32
    np.testing.assert_allclose(loss.numpy(), ref_loss, rtol=1e-5)
    assert len(grads) == 6
    for name, g, ref in zip(wk.PARAM_NAMES, grads, ref_grads):
        assert g is not None, name
        assert g.shape == ref.shape and g.dtype == np.float32, name
        np.testing.assert_allclose(g.numpy(), ref, rtol=RTOL, atol=ATOL, err_msg=name)
        assert np.abs(ref).max() > 0, f"{name}: a zero gradient would make this check vacuous"


def test_mlp_steps_update_the_same_way(data):
    """A few full steps (gradient + assign_sub) of each system land on the same weights and losses."""
    gts, nps = wk.make_gputape_mlp(data), wk.make_numpy_mlp(data)
    for _ in range(3):
        np.testing.assert_allclose(float(gts.fn()), float(nps.fn()), rtol=1e-5)
    for name, a, b, a0 in zip(wk.PARAM_NAMES, gts.params(), nps.params(), data.init):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=name)
        assert not np.array_equal(a, a0), f"{name} did not move"


def test_onehot_variant_steps_like_numpy(data):
    """The one-hot + assign_sub form of the step lands on numpy's weights; it is an MLP variant only."""
    oh, nps = wk.make_onehot_mlp(data), wk.make_numpy_mlp(data)
    for _ in range(3):
        np.testing.assert_allclose(float(oh.fn()), float(nps.fn()), rtol=1e-5)
    for name, a, b in zip(wk.PARAM_NAMES, oh.params(), nps.params()):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=name)
    assert wk.build("chain", "onehot") is None
    with pytest.raises(wk.UnavailableError, match="variant of the mlp workload"):
        wk.build("chain", "onehot", strict=True)


def test_chain_gradient_matches_handwritten_numpy():
    x0 = wk.chain_data(seed=2)
    g = wk.gputape_chain_grad(gt.constant(x0))
    ref = wk.numpy_chain_grad(x0)
    assert g.shape == ref.shape and g.dtype == np.float32
    np.testing.assert_allclose(g.numpy(), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("system", ["compiled", "torch", "autograd", "jax"])
def test_peers_agree_with_numpy(system, data):
    try:
        peer = wk.build("mlp", system, data, strict=True)
    except wk.UnavailableError as e:
        pytest.skip(str(e))
    ref = wk.make_numpy_mlp(data)
    np.testing.assert_allclose(float(peer.fn()), float(ref.fn()), rtol=1e-5)
    for name, a, b in zip(wk.PARAM_NAMES, peer.params(), ref.params()):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=name)

    x0 = wk.chain_data(seed=2)
    got = wk.build("chain", system, x0).fn()
    np.testing.assert_allclose(wk.to_numpy(got), wk.numpy_chain_grad(x0), rtol=RTOL, atol=ATOL)

    d = wk.jac_data(seed=3)
    got = wk.build("jacobian", system, d).fn()
    np.testing.assert_allclose(wk.to_numpy(got), wk.numpy_tanh_jacobian(d.x, d.W, d.b), rtol=RTOL, atol=ATOL)


def test_jacobian_by_hand_is_the_jacobian():
    """The numpy baseline is right: its J matches central differences of the layer (float64)."""
    d = wk.jac_data(n=8, seed=4)
    x, W, b = (a.astype(np.float64) for a in (d.x, d.W, d.b))
    J = wk.numpy_tanh_jacobian(x, W, b)
    eps = 1e-6
    fd = np.stack([(np.tanh((x + e) @ W + b) - np.tanh((x - e) @ W + b)) / (2 * eps) for e in np.eye(8) * eps], 1)
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-8)
    assert np.abs(J).max() > 0.1  # the layer is not saturated: the check is not vacuous


def test_gputape_jacobian_matches_by_hand():
    d = wk.jac_data(seed=5)
    J = wk.gputape_tanh_jacobian(gt.constant(d.x), gt.constant(d.W), gt.constant(d.b))
    assert J.shape == (wk.JAC_N, wk.JAC_N) and J.dtype == np.float32
    np.testing.assert_allclose(J.numpy(), wk.numpy_tanh_jacobian(d.x, d.W, d.b), rtol=RTOL, atol=ATOL)


def test_compiled_skipped_without_gt_function(monkeypatch):
    monkeypatch.delattr(gt, "function", raising=False)
    assert wk.build("mlp", "compiled", wk.mlp_data(B=8)) is None
    with pytest.raises(wk.UnavailableError, match="does not exist"):
        wk.build("jacobian", "compiled", strict=True)


def test_compiled_skipped_when_gt_function_refuses(monkeypatch):
    """NotImplementedError from gt.function (at wrapping or at the first call) means: skip, with the reason."""

    def refuses_at_call(fn):
        def call(*args):
            raise NotImplementedError("no jacobian in traces yet")

        return call

    def refuses_at_wrap(fn):
        raise NotImplementedError("not built")

    monkeypatch.setattr(gt, "function", refuses_at_call, raising=False)
    with pytest.raises(wk.UnavailableError, match="no jacobian in traces yet"):
        wk.build("jacobian", "compiled", strict=True)
    monkeypatch.setattr(gt, "function", refuses_at_wrap)
    assert wk.build("chain", "compiled") is None


def test_compiled_column_uses_gt_function(monkeypatch):
    """The compiled step goes through gt.function: the probe and the timed step wrap it once each,
    and the timed step starts from the initial weights (its first loss is numpy's first)."""
    wrapped = []

    def eager_function(fn):  # a stand-in gt.function that runs eagerly
        wrapped.append(fn)
        return fn

    monkeypatch.setattr(gt, "function", eager_function, raising=False)
    data = wk.mlp_data(B=16, seed=6)
    step = wk.build("mlp", "compiled", data, strict=True)
    assert len(wrapped) == 2
    np.testing.assert_allclose(float(step.fn()), float(wk.make_numpy_mlp(data).fn()), rtol=1e-5)


def test_compare_quick_run(monkeypatch, tmp_path, capsys):
    """`python -m benchmarks.compare` end to end on tiny settings: tables, targets, memory, skips, --markdown."""
    from benchmarks import compare

    monkeypatch.delattr(gt, "function", raising=False)  # the compiled column must skip cleanly
    out = tmp_path / "report.md"
    argv = ["--rounds", "2", "--block-ms", "2", "--warmup", "1", "--batches", "8", "--one-process"]
    argv += ["--systems", "numpy", "gputape", "onehot", "compiled", "--workloads", "mlp", "jacobian", "memory"]
    argv += ["--markdown", str(out)]
    assert compare.main(argv) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text
    for expected in (
        "| MLP SGD step, B=8 |",
        "| jacobian 64->64 tanh |",
        "| eager MLP step (B=128) <= 1.05x numpy | — | not measured",  # B=128 was not asked for
        "gputape gt.function, all workloads: not measured: gt.function does not exist",
        "| B=8 | gputape eager |",
        "| MLP SGD step, B=8 | gputape eager, one-hot + assign_sub |",
        "gputape eager, one-hot + assign_sub, jacobian 64->64 tanh: not measured: onehot is a variant of the mlp",
        "- machine: ",
        "- BLAS: ",
    ):
        assert expected in text, expected
    assert "x) ✗" not in text and "- ✗" not in text  # no result check failed


def test_compare_flags_wrong_results():
    from benchmarks import compare

    assert compare._agrees(np.float32(1.5), np.float64(1.5)) is None
    assert "differs" in compare._agrees(np.ones(3), np.zeros(3))
    assert "shape" in compare._agrees(np.ones(3), np.ones((3, 1)))


def test_compare_marks_a_wrong_result(monkeypatch):
    """A system whose result differs from numpy's is still timed, and marked."""
    from benchmarks import compare

    def wrong(d):
        return wk.Step("jacobian", "gputape", lambda: np.zeros((wk.JAC_N, wk.JAC_N), np.float32))

    monkeypatch.setitem(wk.FACTORIES["jacobian"], "gputape", wrong)
    case = ("jacobian", None)
    res = compare.run([case], ["numpy", "gputape"], rounds=1, block_s=0.001, warm=0, isolate=frozenset())
    assert "differs" in res.wrong[case, "gputape"] and (case, "numpy") not in res.wrong
    assert len(res.times[case, "gputape"]) == 1
    assert "✗" in compare.wide_table(res, [case], ["numpy", "gputape"])


def test_compare_cases():
    from benchmarks import compare

    cases, memory = compare.parse_cases(["mlp", "chain", "memory"], [32, 1024])
    assert cases == [("mlp", 32), ("mlp", 1024), ("chain", None)]
    assert memory == [("mlp", 32), ("mlp", 1024)]
    assert compare.parse_cases(["jacobian"], [128]) == ([("jacobian", None)], [])


def test_build_skips_missing_peer(monkeypatch):
    monkeypatch.setitem(wk.PEER_MODULES, "torch", "no_such_module_for_gputape_tests")
    assert wk.build("chain", "torch") is None
    assert wk.build("chain", "numpy") is not None


def test_the_recording_benchmark_counts_the_ops_it_divides_by():
    from benchmarks import recording

    x = gt.constant(wk.chain_data())
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = x
        for i in range(wk.K):
            y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        gt.sum(y)
    assert len(tape._nodes) == recording.OPS  # one node per op: the per-op figures divide by the right count
    m = recording.measure(rounds=2, block=2)
    assert m["numpy_us_per_op"] > 0 and m["recorded_forward_us"] > 0


def test_the_overhead_benchmark_times_the_step_it_describes(capsys):
    from benchmarks import overhead

    # its tiny MLP is the workload's code on tiny arrays: the same loss as numpy's by hand
    X, Y, Yoh, init = overhead._data()
    params = [gt.Variable(a) for a in init]
    loss, grads = wk.gputape_mlp_loss_and_grads(gt.constant(X), Y, params)
    ref_loss, ref_grads = wk.numpy_mlp_loss_and_grads(X, Y, Yoh, init)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g.numpy(), r, rtol=RTOL, atol=ATOL)
    assert overhead.main(["--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("whole step (eager)", "tape.gradient", "update (SGD)", "`logp[rows, y]`", "`negative`"):
        assert f"| {row} |" in out
