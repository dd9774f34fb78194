"""pytest-benchmark suite: gputape eager and compiled (``gt.function``) beside hand-written numpy
(and PyTorch eager / HIPS autograd / JAX jit when installed), one benchmark group per workload:
the MLP SGD step at batch 32, 128 and 1024, the 100-link chain, the Jacobian of a 64->64 tanh
layer; and the peak memory of an MLP step (tracemalloc, not a timing).

The project's pytest config passes ``--benchmark-disable``, so a normal run calls each
benchmark once as a smoke test; every test first checks the system's results against numpy's
(three calls: for ``gt.function`` the trace and two replays). Measure for real with::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
        python -m pytest benchmarks -p no:cacheprovider --benchmark-enable

pytest-benchmark times one benchmark after the other; for a round-robin interleaved
comparison with ratios (more robust on a noisy 2-core machine) use ``python -m benchmarks.compare``.
"""

import math

import numpy as np
import pytest

from benchmarks import workloads as wk

# gputape and numpy alternate, so the two that are compared run next to each other.
ORDER = ("numpy", "gputape", "compiled", "torch", "autograd", "jax")
CHECK_CALLS = 3  # results compared with numpy's: a compiled step's trace and two replays


def _step(workload: str, system: str, size: int | None = None) -> wk.Step:
    """A fresh step whose first calls agree with numpy's; skips a system that cannot run here."""
    data = wk.make_data(workload, size)
    try:
        step = wk.build(workload, system, data, strict=True)
    except wk.UnavailableError as e:
        pytest.skip(str(e))
    assert step is not None
    ref = wk.build(workload, "numpy", data)
    assert ref is not None
    for i in range(CHECK_CALLS):  # also the warm-up: imports, caches, BLAS thread start, the trace
        got, want = wk.to_numpy(step.fn()), wk.to_numpy(ref.fn())
        assert got.shape == want.shape, f"call {i}"
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5 * max(1.0, np.abs(want).max()), err_msg=f"call {i}")
    return step


def _run(benchmark, step: wk.Step) -> None:
    benchmark.extra_info["system"] = step.system
    benchmark.extra_info["version"] = wk.version_of(step.system)
    out = wk.to_numpy(benchmark(step.fn))
    assert np.all(np.isfinite(out))
    if step.workload == "mlp":
        assert math.isfinite(float(out))


@pytest.mark.benchmark(warmup=True, warmup_iterations=5, min_rounds=20)
@pytest.mark.parametrize("batch", wk.BATCHES)
@pytest.mark.parametrize("system", ORDER)
def test_mlp_step(benchmark, system, batch):
    benchmark.group = f"mlp-sgd-step-B{batch}"
    _run(benchmark, _step("mlp", system, batch))


@pytest.mark.benchmark(group=f"chain-{wk.K}-links-N{wk.N_DEFAULT}", warmup=True, warmup_iterations=5, min_rounds=20)
@pytest.mark.parametrize("system", ORDER)
def test_chain_fwd_bwd(benchmark, system):
    _run(benchmark, _step("chain", system))


@pytest.mark.benchmark(group=f"jacobian-{wk.JAC_N}-tanh", warmup=True, warmup_iterations=5, min_rounds=20)
@pytest.mark.parametrize("system", ORDER)
def test_tanh_jacobian(benchmark, system):
    _run(benchmark, _step("jacobian", system))


@pytest.fixture(scope="module")
def numpy_memory():
    return wk.measure_memory("mlp", "numpy", wk.make_data("mlp", wk.B_DEFAULT))


@pytest.mark.parametrize("system", [s for s in ORDER if s != "jax"])
def test_mlp_step_peak_memory(system, numpy_memory):
    """One MLP step's peak memory is measured, plausible, and gputape's stays near numpy's."""
    data = wk.make_data("mlp", wk.B_DEFAULT)
    try:
        m = wk.measure_memory("mlp", system, data)
    except wk.UnavailableError as e:
        pytest.skip(str(e))
    grads = sum(a.nbytes for a in data.init)
    # Every system has all six gradients alive at once at some point of its step (numpy's
    # update temporaries add ``lr * g``), so the peak cannot be below their size.
    assert m.step_peak >= grads, m
    if m.total_peak is not None:
        assert m.total_peak >= m.step_peak
    if system in ("gputape", "compiled"):
        # tracemalloc counts bytes deterministically: a regression here is real, not noise.
        assert m.step_peak <= 1.5 * numpy_memory.step_peak, (m, numpy_memory)
