"""gt.function's compiled MLP step with and without gradient donation, in one process, interleaved.

``python -m benchmarks.donation_ab``: the 784-256-256-10 MLP step of :mod:`benchmarks.workloads`
(SGD and Adam, B=32/128/1024) compiled twice, once with the replay's donation analysis turned off
(``gputape.function._codegen.donations`` returning no masks), timed in alternating blocks with BLAS
at one thread; prints the paired median ratio donated/undonated per case and its IQR.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import gputape as gt
from benchmarks import workloads as wk
from gputape.function import _codegen

_real = _codegen.donations


def _make(B: int, donate: bool, opt_name: str) -> Callable[[], Any]:
    _codegen.donations = _real if donate else (lambda *a: {})
    try:
        data = wk.mlp_data(B)
        params = [gt.Variable(a.copy()) for a in data.init]
        opt = gt.optim.SGD(0.01) if opt_name == "sgd" else gt.optim.Adam(1e-4)
        f = gt.function(wk.gputape_mlp_train_step(params, opt))
        x, y = gt.constant(data.X), gt.constant(data.Y)
        for _ in range(3):  # trace, then replays (the replay is compiled with the analysis as set)
            f(x, y)
    finally:
        _codegen.donations = _real
    assert ("donating(" in f.code) == donate
    return lambda: f(x, y)


def _block(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def main(rounds: int = 15, block_s: float = 0.1) -> None:
    with threadpool_limits(1):
        for opt_name in ("sgd", "adam"):
            for B in (32, 128, 1024):
                off, on = _make(B, False, opt_name), _make(B, True, opt_name)
                n = max(3, int(block_s / _block(off, 3)))
                ratios = []
                for r in range(rounds):  # (the order alternates: neither side always runs second)
                    if r % 2:
                        t_on, t_off = _block(on, n), _block(off, n)
                    else:
                        t_off, t_on = _block(off, n), _block(on, n)
                    ratios.append(t_on / t_off)
                q1, q3 = np.percentile(ratios, [25, 75])
                print(f"{opt_name} B={B}: donated/undonated {statistics.median(ratios):.3f} (IQR {q1:.3f}-{q3:.3f})")


if __name__ == "__main__":
    main()
