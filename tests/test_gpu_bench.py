"""The GPU benchmark script computes the right thing and refuses to run without a GPU.

The benchmark's MLP systems (numpy by hand, gputape, PyTorch) are built by the same
functions on the CPU here as on the GPU there: every system's loss must agree, step
after step, from the same data and weights, or a timing would compare different work.
"""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gputape.devices import backend

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_mlp_system_takes_the_same_steps(bench):
    losses = bench.losses_after(bench.mlp_systems("cpu", 64), 4)
    ref = losses.pop("numpy by hand (CPU)")
    assert "gputape (CPU)" in losses
    assert all(a > b for a, b in itertools.pairwise(ref)), f"the loss should fall: {ref}"
    for name, got in losses.items():
        # torch adds Adam's epsilon after the bias correction, Keras (gputape, the numpy
        # baseline) before it: an effective epsilon 30x larger in the first steps, which
        # shows in the third decimal on weights with tiny gradients
        rtol = 3e-3 if name.startswith("torch") else 1e-5
        np.testing.assert_allclose(got, ref, rtol=rtol, err_msg=name)


def test_the_graphed_torch_peer_restarts_from_the_shared_start(bench):
    """The CUDA-graphed PyTorch step is warmed up before it is timed; restart_torch_training must
    put weights and Adam's state back so its steps are the fresh run's (checked on the CPU)."""
    torch = pytest.importorskip("torch")
    X, Y, init = bench.mlp_data(32)

    def losses(warm: bool) -> list[float]:
        ps = [torch.tensor(a, requires_grad=True) for a in init]
        opt = torch.optim.Adam(ps, lr=bench.LR, eps=1e-7)
        x, y = torch.tensor(X), torch.tensor(Y)

        def step() -> float:
            h = torch.relu(x @ ps[0] + ps[1])
            h = torch.relu(h @ ps[2] + ps[3])
            loss = torch.nn.functional.cross_entropy(h @ ps[4] + ps[5], y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return float(loss.detach())

        if warm:
            for _ in range(3):
                step()
            bench.restart_torch_training(ps, opt, init)
        return [step() for _ in range(4)]

    fresh, restarted = losses(False), losses(True)
    assert fresh == restarted  # bit for bit: the same start, the same steps
    assert fresh[0] > fresh[-1]


def test_fused_optimizer_variant_matches_on_the_cpu(bench):
    X, Y, init = bench.mlp_data(32)
    a = bench.gputape_mlp(X, Y, init, "cpu", fused=False)
    b = bench.gputape_mlp(X, Y, init, "cpu", fused=True)
    np.testing.assert_allclose([float(b()) for _ in range(4)], [float(a()) for _ in range(4)], rtol=1e-5)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # (torch's own import)
def test_the_torch_compile_peer_takes_the_same_steps_and_restarts(bench):
    """torch_compiled_mlp's code path on the CPU (torch.compile's "eager" backend: dynamo without
    Inductor, which the GPU run uses): the nn.Linear model holds the shared start (transposed)
    and a second build is the first one restarted, from the same start."""
    torch = pytest.importorskip("torch")
    X, Y, init = bench.mlp_data(32)
    ref = bench.torch_mlp(X, Y, init, "cpu", fused=False)
    want = [float(ref()) for _ in range(4)]
    bench._COMPILED.clear()
    first = bench.torch_compiled_mlp(X, Y, init, "cpu", backend="eager")
    got = [float(first()) for _ in range(4)]
    # (nn.Linear computes x @ W.T + b in one addmm: rounding apart, the same step)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < got[0] / 10
    again = bench.torch_compiled_mlp(X, Y, init, "cpu", backend="eager")
    assert again is first  # compiled once per process
    assert [float(again()) for _ in range(4)] == got  # restarted: the same start, the same steps
    assert torch.is_tensor(again())


def test_a_peer_that_cannot_be_built_is_skipped_with_the_reason(bench, monkeypatch):
    import time

    monkeypatch.setattr(bench, "SKIPPED", {})
    systems = {}

    def broken():
        raise RuntimeError("Cannot find a working triton installation\nmore text")

    def slow():
        time.sleep(5)
        return lambda: 0.0

    bench.add_peer(systems, "broken", broken)
    t0 = time.perf_counter()
    bench.add_peer(systems, "slow", slow, budget_s=0.2)
    assert time.perf_counter() - t0 < 3
    bench.add_peer(systems, "fine", lambda: lambda: 1.0)
    assert list(systems) == ["fine"]
    assert bench.SKIPPED == {
        "broken": "RuntimeError: Cannot find a working triton installation",
        "slow": "TimeoutError: not built within 0.2 s",
    }


@pytest.mark.skipif(backend.gpu_available(), reason="this machine has a GPU")
def test_bench_fails_loudly_without_a_gpu(bench, capsys):
    assert bench.main(["--elements", "1024"]) == 2
    err = capsys.readouterr().err
    assert "FAILED: no usable GPU" in err and "nothing was measured" in err


@pytest.mark.skipif(backend.gpu_available(), reason="this machine has a GPU")
def test_gpu_check_script_fails_loudly_without_a_gpu(tmp_path):
    r = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode != 0
    assert "FAILED" in r.stdout + r.stderr
    results = (tmp_path / "gpu_check.txt").read_text()
    assert "FAILED" in results and "no usable GPU" in results
