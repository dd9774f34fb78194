"""What the debugging tools cost on the CPU MLP step: ``check_numerics()`` and its deferred path.

Interleaved in one process: each round runs a block of steps with the check off, on, and
``deferred=True``, in an order that alternates between rounds; reported are the median per-step
times and the median of the paired per-round ratios to "off" (a slow patch of a shared machine
hits both sides of a ratio).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.debug_overhead --batch 32
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import gputape as gt
from benchmarks import workloads


def measure(batch: int, rounds: int = 15, block: int = 30) -> dict[str, tuple[float, float]]:
    """name -> (median us per step, median paired ratio to the unchecked step)."""
    step = workloads.make_gputape_mlp(workloads.mlp_data(batch))

    def off() -> None:
        step.fn()

    def on() -> None:
        with gt.debug.check_numerics():
            step.fn()

    def deferred() -> None:
        with gt.debug.check_numerics(deferred=True):
            step.fn()

    fs: list[tuple[str, Callable[[], None]]] = [("off", off), ("check_numerics", on), ("deferred", deferred)]
    for _, f in fs:
        for _ in range(10):
            f()
    times: dict[str, list[float]] = {name: [] for name, _ in fs}
    for r in range(rounds):
        for name, f in fs if r % 2 == 0 else fs[::-1]:
            t0 = time.perf_counter()
            for _ in range(block):
                f()
            times[name].append((time.perf_counter() - t0) / block * 1e6)
    base = np.array(times["off"])
    return {name: (float(np.median(t)), float(np.median(np.array(t) / base))) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    for b in args.batch:
        for name, (us, ratio) in measure(b, args.rounds).items():
            print(f"MLP B={b:<5d} {name:15s} {us:9.0f} us/step  {ratio:.3f}x")


if __name__ == "__main__":
    main()
