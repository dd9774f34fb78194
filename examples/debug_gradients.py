"""Debugging gradients with gputape: vanishing layers, a NaN's birthplace, a None gradient.

Three short stories, each a bug people meet with GradientTape, and the tool
that finds it:

  (a) a 12-layer sigmoid MLP whose first layers barely learn:
      ``gt.debug.grad_report`` shows the gradient norm falling layer by layer and
      flags the vanishing ones (a ``GradientMonitor`` tracks it over steps);
  (b) a hand-written cross-entropy whose loss turns NaN:
      ``gt.debug.check_numerics()`` names the op (``log`` of 0) and its line;
  (c) a gradient that comes back None:
      ``tape.explain(loss, w)`` says why (the value left the tape through
      ``.numpy()``) and where.

Runs on numpy alone in a second or two:

    python examples/debug_gradients.py [--plot norms.png]
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

import gputape as gt


def mlp(sizes: list[int], rng: np.random.Generator, gain: float) -> list[gt.Variable]:
    """Weights ``N(0, gain^2 / fan_in)`` and zero biases for a plain MLP."""
    params = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        w = rng.normal(0, gain / np.sqrt(n_in), (n_in, n_out)).astype(np.float32)
        params += [gt.Variable(w, name=f"w{i}"), gt.Variable(np.zeros(n_out, np.float32), name=f"b{i}")]
    return params


def forward(params: list[gt.Variable], x, act) -> gt.Tensor:
    h = x
    for i in range(0, len(params) - 2, 2):
        h = act(h @ params[i] + params[i + 1])
    return h @ params[-2] + params[-1]


def part_a_vanishing(rng: np.random.Generator, plot: str | None) -> None:
    print("=" * 100)
    print("(a) A 12-layer sigmoid MLP: which layers still learn?\n")
    x = rng.normal(size=(64, 16)).astype(np.float32)
    y = (x[:, :1] * x[:, 1:2] > 0).astype(np.float32)  # an XOR-like target
    sizes = [16] + [32] * 11 + [1]
    params = mlp(sizes, rng, gain=1.0)
    weights = params[0::2]

    lr = 0.05
    monitor = gt.debug.GradientMonitor(learning_rate=lr)
    for step in range(20):
        with gt.GradientTape() as tape:
            logits = forward(params, x, gt.nn.sigmoid)
            loss = gt.mean(gt.nn.sigmoid_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, weights)
        report = monitor.record(step, grads, weights)
        if step == 0:
            # sigmoid' <= 1/4: each layer scales the gradient down by ~4x, so
            # after 11 layers the first one gets ~1e-8 of the last one's.
            print(report)
        for w, g in zip(weights, grads):
            w.assign_sub(lr * g)

    norms = monitor.array("norm")  # [steps, variables]
    ratio = norms[:, 0] / norms[:, -1]
    print(
        f"\nover {len(monitor.steps)} steps, |grad w0| / |grad w11| stayed in [{ratio.min():.1e}, {ratio.max():.1e}]; "
        f"w0 moved by at most {np.nanmax(monitor.array('update_ratio')[:, 0]):.1e} of its size per step"
    )
    print(f"flagged at some step: {sorted({name for _, name, _ in monitor.flags()}, key=lambda n: int(n[1:]))}")
    if plot:
        try:
            print(f"plot of the norms over steps: {monitor.plot(plot)}")
        except ImportError as exc:
            print(f"(no plot: {exc})")

    # The usual fix: ReLU with He initialisation keeps the gradient scale per layer.
    params = mlp(sizes, rng, gain=np.sqrt(2.0))
    weights = params[0::2]
    with gt.GradientTape() as tape:
        loss = gt.mean(gt.nn.sigmoid_cross_entropy_with_logits(y, forward(params, x, gt.nn.relu)))
    fixed = gt.debug.grad_report(tape.gradient(loss, weights), weights, learning_rate=lr)
    print(f"\nwith ReLU + He init instead: flagged = {[row.name for row in fixed.flagged]}")
    fixed_norms = [row.norm for row in fixed]
    print(f"gradient norms from w0 to w11 now span {min(fixed_norms):.2e} .. {max(fixed_norms):.2e}")


def part_b_nan(rng: np.random.Generator) -> None:
    print("\n" + "=" * 100)
    print("(b) The loss is NaN. Which op made it?\n")
    w = gt.Variable(rng.normal(size=(4, 1)).astype(np.float32) * 30.0, name="w")
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (rng.random((32, 1)) > 0.5).astype(np.float32)

    def loss_fn() -> gt.Tensor:
        p = gt.nn.sigmoid(x @ w)  # saturates to exactly 0.0 or 1.0 in float32 for |z| > ~17
        bce = -(y * gt.log(p) + (1 - y) * gt.log(1 - p))  # <- log(0): the bug
        return gt.mean(bce)

    with np.errstate(divide="ignore", invalid="ignore"), gt.GradientTape() as tape:
        loss = loss_fn()
        grad = tape.gradient(loss, w)
    print(f"without the check: loss = {float(loss)}, gradient has NaN: {bool(np.isnan(grad.numpy()).any())}")

    try:
        with gt.debug.check_numerics(), gt.GradientTape() as tape:
            loss = loss_fn()
    except FloatingPointError as exc:
        print(f"with gt.debug.check_numerics():\n  FloatingPointError: {exc}")

    # A backward-only NaN: sqrt is finite at 0 but its derivative is not.
    v = gt.Variable(np.zeros(3, np.float32), name="v")
    try:
        with gt.debug.check_numerics():
            with gt.GradientTape() as tape:
                norm = gt.sqrt(gt.sum(v * v))  # <- d sqrt(u)/du at u = 0 is inf
            tape.gradient(norm, v)
    except FloatingPointError as exc:
        print(f"\na forward-finite op whose gradient is not:\n  FloatingPointError: {exc}")
    print("\nfix: compute the loss from the logits, gt.nn.sigmoid_cross_entropy_with_logits(y, x @ w)")
    with gt.debug.check_numerics(), gt.GradientTape() as tape:
        loss = gt.mean(gt.nn.sigmoid_cross_entropy_with_logits(y, x @ w))
    print(f"loss = {float(loss):.4f}, gradient finite: {bool(np.isfinite(tape.gradient(loss, w).numpy()).all())}")


def part_c_none(rng: np.random.Generator) -> None:
    print("\n" + "=" * 100)
    print("(c) Why is this gradient None?\n")
    w1 = gt.Variable(rng.normal(size=(4, 8)).astype(np.float32), name="w1")
    w2 = gt.Variable(rng.normal(size=(8, 1)).astype(np.float32), name="w2")
    x = rng.normal(size=(16, 4)).astype(np.float32)

    with gt.GradientTape(persistent=True) as tape:
        h = gt.tanh(x @ w1)
        h = gt.constant(np.clip(h.numpy(), -0.9, 0.9))  # <- leaves the tape: a new constant, no history
        loss = gt.mean((h @ w2) ** 2)
    g1, g2 = tape.gradient(loss, [w1, w2])
    print(f"gradient for w1: {g1}; for w2: {'a tensor' if g2 is not None else None}")
    print(f"tape.explain(loss, w1):\n  {tape.explain(loss, w1)}")
    print(f"tape.explain(loss, w2).reason: {tape.explain(loss, w2).reason!r}")
    try:
        tape.gradient(loss, [w1, w2], unconnected_gradients="raise")
    except gt.UnconnectedGradientError as exc:
        print(f"\nunconnected_gradients='raise' fails loudly instead:\n  {type(exc).__name__}: {exc}")
    print("\nfix: stay in gputape ops, h = gt.clip(gt.tanh(x @ w1), -0.9, 0.9)")
    with gt.GradientTape() as tape:
        loss = gt.mean((gt.clip(gt.tanh(x @ w1), -0.9, 0.9) @ w2) ** 2)
    print(f"gradient for w1 now has shape {tape.gradient(loss, w1).shape}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default=None, help="write the gradient-norm plot here (needs matplotlib)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    part_a_vanishing(rng, args.plot)
    part_b_nan(rng)
    part_c_none(rng)


if __name__ == "__main__":
    main()
