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


def test_chain_gradient_matches_handwritten_numpy():
    x0 = wk.chain_data(seed=2)
    g = wk.gputape_chain_grad(gt.constant(x0))
    ref = wk.numpy_chain_grad(x0)
    assert g.shape == ref.shape and g.dtype == np.float32
    np.testing.assert_allclose(g.numpy(), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("system", ["torch", "autograd"])
def test_peers_agree_with_numpy(system, data):
    if not wk.peer_available(system):
        pytest.skip(f"{system} is not installed")
    peer, ref = wk.build("mlp", system, data), wk.make_numpy_mlp(data)
    np.testing.assert_allclose(float(peer.fn()), float(ref.fn()), rtol=1e-5)
    for name, a, b in zip(wk.PARAM_NAMES, peer.params(), ref.params()):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=name)

    x0 = wk.chain_data(seed=2)
    got = wk.build("chain", system, x0).fn()
    np.testing.assert_allclose(np.asarray(got), wk.numpy_chain_grad(x0), rtol=RTOL, atol=ATOL)


def test_build_skips_missing_peer(monkeypatch):
    monkeypatch.setitem(wk.PEER_MODULES, "torch", "no_such_module_for_gputape_tests")
    assert wk.build("chain", "torch") is None
    assert wk.build("chain", "numpy") is not None
