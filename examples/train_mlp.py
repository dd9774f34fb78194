"""Train a small MLP with a custom GradientTape loop: the README's main job.

It classifies points of three interleaved spirals (made here with numpy, no
download) with a 2-64-64-3 MLP, printing loss and accuracy per epoch, and
checks a gradient against finite differences on the way. Runs on numpy alone.

    python examples/train_mlp.py --epochs 30 --seed 0
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

import gputape as gt


def spirals(n_per_class: int, classes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Points on ``classes`` interleaved spiral arms, with a little noise."""
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        t = np.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + rng.normal(0, 0.15, n_per_class)
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        ys.append(np.full(n_per_class, c))
    x = np.concatenate(xs).astype(np.float32)
    y = np.concatenate(ys).astype(np.int64)
    perm = rng.permutation(len(y))
    return x[perm], y[perm]


def init_params(sizes: list[int], rng: np.random.Generator) -> list[gt.Variable]:
    """He-initialised weights and zero biases, as gt.Variables."""
    params = []
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        w = rng.normal(0, np.sqrt(2.0 / fan_in), (fan_in, fan_out)).astype(np.float32)
        params += [gt.Variable(w, name=f"w{i}"), gt.Variable(np.zeros(fan_out, np.float32), name=f"b{i}")]
    return params


def hidden(params: list[gt.Variable], x) -> gt.Tensor:
    """The activations feeding the output layer."""
    h = x
    for i in range(0, len(params) - 2, 2):
        h = gt.nn.relu(h @ params[i] + params[i + 1])
    return h


def forward(params: list[gt.Variable], x) -> gt.Tensor:
    return hidden(params, x) @ params[-2] + params[-1]


def main() -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    x, y = spirals(400, 3, rng)
    n_train = int(0.8 * len(y))
    x_train, y_train, x_test, y_test = x[:n_train], y[:n_train], x[n_train:], y[n_train:]
    params = init_params([2, 64, 64, 3], rng)
    print(f"gputape {gt.__version__} on {gt.current_device()}: {n_train} train / {len(y_test)} test points")

    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(n_train)
        losses = []
        for i in range(0, n_train, args.batch_size):
            idx = perm[i : i + args.batch_size]
            with gt.GradientTape() as tape:
                logits = forward(params, x_train[idx])
                loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y_train[idx], logits))
            grads = tape.gradient(loss, params)
            for p, g in zip(params, grads):
                p.assign_sub(args.lr * g)
            losses.append(float(loss))
        if epoch % 5 == 0 or epoch == 1:
            acc = float(np.mean(gt.argmax(forward(params, x_test), axis=1).numpy() == y_test))
            print(f"epoch {epoch:3d}  loss {np.mean(losses):.4f}  test accuracy {acc:.3f}")
    elapsed = time.perf_counter() - start

    # The output layer's gradient, as the loop computes it, against finite
    # differences in float64, to second order.
    feats = gt.constant(hidden(params, x_test[:16]).numpy().astype(np.float64))
    gt.testing.check_grads(
        lambda w, b: gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y_test[:16], feats @ w + b)),
        params[-2].numpy(),
        params[-1].numpy(),
        order=2,
    )
    acc = float(np.mean(gt.argmax(forward(params, x_test), axis=1).numpy() == y_test))
    print(f"final test accuracy {acc:.3f} after {args.epochs} epochs in {elapsed:.1f} s; gradient check passed")
    return acc


if __name__ == "__main__":
    main()
