"""gputape's own cost per MLP step, apart from the array work: the MLP on tiny arrays.

The MLP step of ``workloads.py`` (the same code: GradientTape forward, ``tape.gradient``,
``SGD.apply_gradients``) on an 8-8-8-4 network and a batch of 4, where every array operation
takes a fraction of a microsecond, so what is left is Python: the per-op dispatch and
recording, ``gradient()``'s bookkeeping and the compiled backward's glue, the optimizer's
checks and commit. The hand-written numpy step on the same arrays is the baseline (its own
Python: ~25 numpy calls). At the benchmark's size (784-256-256-10, B=128) the array work is
the same for both (``profile_gputape.py``), so ``gputape - numpy`` here is about what the
real step pays on top of numpy.

Phases, interleaved round by round (medians): the whole step (eager and ``gt.function``), the
forward under a tape, ``tape.gradient`` alone, the update alone; then the forward op by op
(recorded on a tape, outside any tape, and numpy's own call).

    python -m benchmarks.overhead [--rounds 9]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import gputape as gt
from benchmarks import workloads

SIZES = (8, 8, 8, 4)  # D, H, H, C
BATCH = 4


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    d, h, _, c = SIZES
    X = rng.standard_normal((BATCH, d)).astype(np.float32)
    Y = rng.integers(0, c, BATCH)
    Yoh = np.eye(c, dtype=np.float32)[Y]
    shapes = [(d, h), (h,), (h, h), (h,), (h, c), (c,)]
    init = [(rng.standard_normal(s) * 0.1).astype(np.float32) for s in shapes]
    return X, Y, Yoh, init


def _per_call_us(f: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def phases(rounds: int, n: int = 400) -> dict[str, float]:
    """Median µs per call of each phase (numpy and gputape side by side)."""
    X, Y, Yoh, init = _data()
    p = [a.copy() for a in init]
    params = [gt.Variable(a) for a in init]
    opt = gt.optim.SGD(workloads.LR)
    step = workloads.gputape_mlp_train_step(params, opt)
    compiled = gt.function(workloads.gputape_mlp_train_step([gt.Variable(a) for a in init], gt.optim.SGD(workloads.LR)))
    x, y = gt.constant(X), gt.constant(Y)
    grads = [gt.constant(np.full(a.shape, 1e-6, np.float32)) for a in init]
    np_grads = [g.numpy() for g in grads]

    def np_step() -> None:
        _, gs = workloads.numpy_mlp_loss_and_grads(X, Y, Yoh, p)
        for a, g in zip(p, gs):
            a -= workloads.LR * g

    def np_forward() -> None:
        workloads.numpy_mlp_forward(X, Y, p)

    cache = workloads.numpy_mlp_forward(X, Y, p)[1]

    def np_backward() -> None:
        workloads.numpy_mlp_backward(Yoh, cache)

    def np_update() -> None:
        for a, g in zip(p, np_grads):
            a -= workloads.LR * g

    def forward() -> tuple[Any, Any]:
        w1, b1, w2, b2, w3, b3 = params
        with gt.GradientTape() as tape:
            h = gt.nn.relu(x @ w1 + b1)
            h = gt.nn.relu(h @ w2 + b2)
            logp = gt.nn.log_softmax(h @ w3 + b3)
            loss = -gt.mean(logp[np.arange(BATCH), y])
        return tape, loss

    def forward_gradient() -> None:
        tape, loss = forward()
        tape.gradient(loss, params)

    pairs = list(zip(grads, params))
    runs: dict[str, Callable[[], Any]] = {
        "numpy step": np_step,
        "eager step": lambda: step(x, y),
        "gt.function step": lambda: compiled(x, y),
        "numpy forward": np_forward,
        "forward (tape)": forward,
        "numpy backward": np_backward,
        "forward + gradient": forward_gradient,
        "numpy update": np_update,
        "apply_gradients": lambda: opt.apply_gradients(pairs),
    }
    for f in runs.values():  # warm up: compiled backward and gt.function traced
        for _ in range(5):
            f()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for k, f in runs.items():
            times[k].append(_per_call_us(f, n))
    med = {k: float(np.median(v)) for k, v in times.items()}
    med["gradient"] = med.pop("forward + gradient") - med["forward (tape)"]
    return med


def per_op(rounds: int, n: int = 2000) -> list[tuple[str, float, float, float]]:
    """(op, numpy µs, gputape outside a tape µs, gputape recorded µs) for the MLP forward's ops."""
    X, Y, _, init = _data()
    w1, b1 = gt.Variable(init[0]), gt.Variable(init[1])
    x, y = gt.constant(X), gt.constant(Y)
    rows = np.arange(BATCH)
    z = x @ w1 + b1
    lp = gt.nn.log_softmax(z)
    sel = lp[rows, y]
    Z, LP, S, W1, B1 = z.numpy(), lp.numpy(), sel.numpy(), init[0], init[1]

    def np_log_softmax() -> None:
        s = Z - Z.max(1, keepdims=True)
        s - np.log(np.exp(s).sum(1, keepdims=True))

    ops = [
        ("x @ w", lambda: x @ w1, lambda: X @ W1),
        ("z + b", lambda: z + b1, lambda: Z + B1),
        ("relu", lambda: gt.nn.relu(z), lambda: np.maximum(Z, 0)),
        ("log_softmax", lambda: gt.nn.log_softmax(z), np_log_softmax),
        ("logp[rows, y]", lambda: lp[rows, y], lambda: LP[rows, Y]),
        ("mean", lambda: gt.mean(sel), lambda: S.mean()),
        ("negative", lambda: -sel, lambda: -S),
    ]
    times: dict[str, list[list[float]]] = {name: [[], [], []] for name, _, _ in ops}
    tape = gt.GradientTape()
    for _ in range(rounds):
        for name, g, f in ops:
            times[name][0].append(_per_call_us(f, n))
            times[name][1].append(_per_call_us(g, n))
            with tape:
                tape.watch([x, lp, sel, z])
                times[name][2].append(_per_call_us(g, n))
            tape.reset()
    return [(name, *(float(np.median(t)) for t in times[name])) for name, _, _ in ops]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    m = phases(args.rounds)
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}: µs per call, medians of {args.rounds} interleaved rounds\n")
    print("| phase | numpy by hand | gputape | gputape - numpy |\n| --- | ---: | ---: | ---: |")
    for label, a, b in (
        ("whole step (eager)", "numpy step", "eager step"),
        ("whole step (gt.function)", "numpy step", "gt.function step"),
        ("forward (with the tape)", "numpy forward", "forward (tape)"),
        ("tape.gradient", "numpy backward", "gradient"),
        ("update (SGD)", "numpy update", "apply_gradients"),
    ):
        print(f"| {label} | {m[a]:.1f} | {m[b]:.1f} | {m[b] - m[a]:+.1f} |")
    print("\n| forward op | numpy | gputape, no tape | gputape, recorded | recording adds |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, t_np, t_free, t_rec in per_op(args.rounds):
        print(f"| `{name}` | {t_np:.2f} | {t_free:.2f} | {t_rec:.2f} | {t_rec - t_free:+.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
