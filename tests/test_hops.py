"""The Python calls gputape makes in one warm eager MLP step (issue 24, "fewer hops"), counted with
``sys.setprofile`` by ``benchmarks/hops.py``: a count, not a time, so the bound is exact.

On failure the breakdown by phase and function is printed: the calls added are in it.
"""

import sys
from pathlib import Path

import pytest

try:
    from benchmarks import hops
except ImportError:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import hops

# What the step makes today: a ceiling that only comes down. Lower it when a change removes calls.
CEILING = 55
# Issue 24's target (met: plain SGD's apply_gradients is one generated step, optim/base.py's _plain_steps)
TARGET = 60


@pytest.fixture(scope="module")
def calls():
    return hops.count_step()


def test_the_count_is_deterministic(calls):
    assert hops.count_step() == calls


def test_a_warm_eager_mlp_step_stays_under_its_ceiling(calls):
    n = sum(calls.values())
    assert n <= CEILING, f"{n} calls > {CEILING}:\n{hops.report(calls)}"


def test_every_phase_is_counted(calls):
    # the step's parts all ran under the profiler and each made calls inside gputape
    assert {phase for phase, _ in calls} == set(hops.PHASES)


def test_a_warm_eager_mlp_step_meets_the_target(calls):
    n = sum(calls.values())
    assert n <= TARGET, f"{n} calls > {TARGET}:\n{hops.report(calls)}"
