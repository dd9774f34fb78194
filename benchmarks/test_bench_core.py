"""pytest-benchmark suite: gputape beside hand-written numpy (and PyTorch eager / HIPS autograd
when installed) on the two core workloads, one benchmark group per workload.

The project's pytest config passes ``--benchmark-disable``, so a normal run calls each
benchmark once as a smoke test. Measure for real with::

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
ORDER = ("numpy", "gputape", "torch", "autograd")


def _step(workload: str, system: str) -> wk.Step:
    if not wk.peer_available(system):
        pytest.skip(f"{system} is not installed")
    step = wk.build(workload, system)
    assert step is not None
    step.fn()  # first call outside the timing: imports, caches, BLAS thread start
    return step


def _run(benchmark, step: wk.Step, workload: str) -> None:
    benchmark.extra_info["system"] = step.system
    benchmark.extra_info["version"] = wk.version_of(step.system)
    out = benchmark(step.fn)
    if workload == "mlp":
        assert math.isfinite(float(out))
    else:
        assert np.all(np.isfinite(np.asarray(out)))


@pytest.mark.benchmark(group=f"mlp-sgd-step-B{wk.B_DEFAULT}", warmup=True, warmup_iterations=5, min_rounds=20)
@pytest.mark.parametrize("system", ORDER)
def test_mlp_step(benchmark, system):
    _run(benchmark, _step("mlp", system), "mlp")


@pytest.mark.benchmark(group=f"chain-{wk.K}-links-N{wk.N_DEFAULT}", warmup=True, warmup_iterations=5, min_rounds=20)
@pytest.mark.parametrize("system", ORDER)
def test_chain_fwd_bwd(benchmark, system):
    _run(benchmark, _step("chain", system), "chain")
