"""The backward alone: ``tape.gradient`` by the per-node sweep against the compiled backward, per node.

Interleaved in one process: each round records one tape per call (the forward, not timed) and
times only ``tape.gradient``, once with ``GradientTape(compile=False)`` (the sweep) and once with
the compiled backward (a cache hit: the structure is warmed first), in an order that alternates
between rounds. Reported: medians per gradient and per recorded node, the key's own cost per
node, and the median of the paired per-round ratios compiled/sweep. Workloads: the 100-link
chain of ``workloads.py`` (elementwise, per-node overhead bound) and the MLP step's gradient.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.compiled_backward
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import gputape as gt
from benchmarks import workloads
from gputape.core.backward import compiled as _backward_compile


def chain_recorder() -> Callable[[bool], tuple]:
    x = gt.constant(workloads.chain_data())

    def record(comp: bool) -> tuple:
        with gt.GradientTape(compile=comp) as tape:
            tape.watch(x)
            y = x
            for i in range(workloads.K):
                y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
            s = gt.sum(y)
        return tape, s, x

    return record


def mlp_recorder(batch: int) -> Callable[[bool], tuple]:
    data = workloads.mlp_data(batch)
    params = [gt.Variable(p) for p in data.init]
    w1, b1, w2, b2, w3, b3 = params
    x, y = gt.constant(data.X), data.Y

    def record(comp: bool) -> tuple:
        with gt.GradientTape(compile=comp) as tape:  # workloads.gputape_mlp_loss_and_grads' forward
            h = gt.nn.relu(x @ w1 + b1)
            h = gt.nn.relu(h @ w2 + b2)
            logp = gt.nn.log_softmax(h @ w3 + b3)
            loss = -gt.mean(logp[np.arange(batch), y])
        return tape, loss, params

    return record


def measure(record: Callable[[bool], tuple], rounds: int, block: int) -> dict[str, float]:
    for comp in (True, True, True, False):  # warm: seen, compiled, hit; and the sweep
        tape, target, src = record(comp)
        tape.gradient(target, src)
    nodes = len(record(False)[0]._nodes)
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(rounds):
        for comp in (False, True) if r % 2 == 0 else (True, False):
            total = 0.0
            for _ in range(block):
                tape, target, src = record(comp)
                t0 = time.perf_counter()
                tape.gradient(target, src)
                total += time.perf_counter() - t0
            times[comp].append(total / block * 1e6)
    tape, target, src = record(True)
    seeds = {target._id: np.ones(target.shape, target.dtype)}
    ids = [s._id for s in (src if isinstance(src, list) else [src])]
    F = gt.ops.raw_namespace(np)
    t0 = time.perf_counter()
    for _ in range(block):
        _backward_compile._structure(tape, seeds, ids, F)
    key_us = (time.perf_counter() - t0) / block * 1e6
    sweep, comp = np.array(times[False]), np.array(times[True])
    return {
        "nodes": nodes,
        "sweep_us": float(np.median(sweep)),
        "compiled_us": float(np.median(comp)),
        "key_us": key_us,
        "ratio": float(np.median(comp / sweep)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=40)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    for name, rec in (("chain 100 links, N=16", chain_recorder()), (f"MLP B={args.batch}", mlp_recorder(args.batch))):
        m = measure(rec, args.rounds, args.block)
        n = m["nodes"]
        print(
            f"{name:22s} {n:4d} nodes  sweep {m['sweep_us']:8.1f} us ({m['sweep_us'] / n:.2f} us/node)  "
            f"compiled {m['compiled_us']:8.1f} us ({m['compiled_us'] / n:.2f} us/node, key {m['key_us'] / n:.2f})"
            f"  compiled/sweep {m['ratio']:.3f}x"
        )


if __name__ == "__main__":
    main()
