"""Train an MLP on handwritten digits with a custom GradientTape loop: the README's main job.

It classifies scikit-learn's bundled 8x8 digits (1,797 images, no download)
with a 64-256-10 MLP built from gt.nn layers, trained by Adam on a cosine
learning-rate schedule from a shuffled gt.data.DataLoader. Each epoch prints
the loss, train and test accuracy and the gradients' mean global norm; at the
end it checks the output layer's gradient against finite differences, saves
a checkpoint (model and optimizer) and reloads it into a fresh model.

    pip install -e ".[examples]"
    python examples/train_mlp.py --epochs 20 --seed 0 --device cpu
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import gputape as gt

try:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from tqdm import tqdm
except ImportError as exc:  # the example's extra, not a gputape dependency
    raise SystemExit(f'{exc.name} is missing: pip install -e ".[examples]"') from None

DEFAULT_CHECKPOINT = os.path.join(tempfile.gettempdir(), "gputape-examples", "train_mlp_digits.npz")


def make_model(hidden: int) -> gt.nn.Sequential:
    return gt.nn.Sequential(
        [
            gt.nn.Dense(hidden, activation="relu", kernel_initializer="he_normal"),
            gt.nn.Dropout(0.1),
            gt.nn.Dense(10),
        ],
        name="mlp",
    )


def accuracy(model: gt.nn.Sequential, x: gt.Tensor, y: np.ndarray) -> float:
    logits = model(x, training=False)
    return float(np.mean(gt.argmax(logits, axis=1).numpy() == y))


def main() -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: gputape's default device)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (cosine decay to 5%% of it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT, help="where to save the model and optimizer")
    args = ap.parse_args()

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixel intensities are 0..16
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=args.seed)

    with gt.device(args.device or gt.current_device()) as dev:
        gt.random.seed(args.seed)  # initial weights and dropout masks
        model = make_model(args.hidden)
        loader = gt.data.DataLoader(x_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed)
        steps = args.epochs * len(loader)
        schedule = gt.optim.CosineDecay(args.lr, decay_steps=steps, alpha=0.05)
        opt = gt.optim.Adam(learning_rate=schedule)
        x_test_t = gt.constant(x_test, device=dev)
        print(
            f"gputape {gt.__version__} on {dev}: digits, {len(y_train)} train / {len(y_test)} test images, "
            f"{args.epochs} epochs of {len(loader)} batches"
        )

        start = time.perf_counter()
        bar = tqdm(total=steps, unit="step", disable=None, leave=False)
        for epoch in range(1, args.epochs + 1):
            losses, norms, correct = [], [], 0
            for xb, yb in loader:
                with gt.GradientTape() as tape:
                    logits = model(xb, training=True)
                    loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
                grads = tape.gradient(loss, model.trainable_variables)
                norms.append(float(gt.global_norm(grads)))
                opt.apply_gradients(zip(grads, model.trainable_variables))
                losses.append(float(loss))
                correct += int(gt.sum(gt.argmax(logits, axis=1) == yb))
                bar.update(1)
            bar.set_postfix(loss=f"{np.mean(losses):.3f}")
            tqdm.write(
                f"epoch {epoch:3d}  loss {np.mean(losses):.4f}  train acc {correct / len(y_train):.3f}  "
                f"test acc {accuracy(model, x_test_t, y_test):.3f}  grad norm {np.mean(norms):.3f}  "
                f"lr {opt.learning_rate:.2e}"
            )
        bar.close()
        elapsed = time.perf_counter() - start

        # The output layer's gradient, as the loop computes it, against finite
        # differences in float64, to second order.
        head = model.layers[-1]
        feats = gt.constant(model.layers[0](x_test[:16]).numpy().astype(np.float64))
        gt.testing.check_grads(
            lambda w, b: gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y_test[:16], feats @ w + b)),
            head.kernel.numpy().astype(np.float64),
            head.bias.numpy().astype(np.float64),
            order=2,
        )

        acc = accuracy(model, x_test_t, y_test)
        gt.save(args.checkpoint, {"model": model, "optimizer": opt, "epoch": args.epochs})
        twin = make_model(args.hidden)
        twin.build((None, x.shape[1]))  # create the lazily built variables before loading into them
        gt.load(args.checkpoint, into={"model": twin, "optimizer": gt.optim.Adam(learning_rate=schedule)})
        assert accuracy(twin, x_test_t, y_test) == acc, "the reloaded model disagrees with the trained one"
        print(f"checkpoint saved to {args.checkpoint} and reloaded (same test accuracy)")

    print(f"final test accuracy {acc:.3f} after {args.epochs} epochs in {elapsed:.1f} s; gradient check passed")
    return acc


if __name__ == "__main__":
    main()
