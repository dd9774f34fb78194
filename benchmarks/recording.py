"""What one op costs on the eager path: the numpy work, gputape's dispatch, and the recording.

The forward of the 100-link chain of ``workloads.py`` (251 ops on 16 float32 values) three
ways, interleaved round by round: hand-written numpy, gputape outside any tape (dispatch: the
Tensor in and out), and gputape under a ``GradientTape`` that watches the input (recording one
node per op; no gradient taken). Per op: the numpy time, what dispatch adds, what recording
adds (medians over rounds). gputape's target is recording <= 1 us per op.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.recording
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import gputape as gt
from benchmarks import workloads

OPS = 251  # 50 x (tanh, *) + 50 x (square, *, +) + sum


def _numpy(x0: np.ndarray) -> Callable[[], None]:
    def run() -> None:
        y = x0
        for i in range(workloads.K):
            y = np.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        y.sum()

    return run


def _gputape(x0: np.ndarray, tape: bool) -> Callable[[], None]:
    x = gt.constant(x0)

    def forward() -> None:
        y = x
        for i in range(workloads.K):
            y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        gt.sum(y)

    def recorded() -> None:
        with gt.GradientTape() as t:
            t.watch(x)
            forward()

    return recorded if tape else forward


def measure(rounds: int, block: int) -> dict[str, float]:
    x0 = workloads.chain_data()
    runs = {"numpy": _numpy(x0), "dispatch": _gputape(x0, False), "recorded": _gputape(x0, True)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for f in runs.values():
        for _ in range(block):
            f()
    order = list(runs)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            f = runs[name]
            t0 = time.perf_counter()
            for _ in range(block):
                f()
            times[name].append((time.perf_counter() - t0) / block * 1e6)
    med = {k: float(np.median(v)) for k, v in times.items()}
    rec = np.array(times["recorded"]) - np.array(times["dispatch"])
    disp = np.array(times["dispatch"]) - np.array(times["numpy"])
    return {
        "numpy_us_per_op": med["numpy"] / OPS,
        "dispatch_us_per_op": float(np.median(disp)) / OPS,
        "recording_us_per_op": float(np.median(rec)) / OPS,
        "recorded_forward_us": med["recorded"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=50)
    args = ap.parse_args()
    m = measure(args.rounds, args.block)
    print(
        f"chain forward, {OPS} ops: numpy {m['numpy_us_per_op']:.2f} us/op, gputape dispatch adds "
        f"{m['dispatch_us_per_op']:.2f} us/op, recording adds {m['recording_us_per_op']:.2f} us/op "
        f"(recorded forward {m['recorded_forward_us']:.0f} us)"
    )


if __name__ == "__main__":
    main()
