"""Train an MLP on handwritten digits with a custom GradientTape loop: the README's main job.

It classifies scikit-learn's bundled 8x8 digits (1,797 images, no download)
with a 64-256-10 MLP built from gt.nn layers, trained by Adam on a cosine
learning-rate schedule from a shuffled gt.data.DataLoader. Each epoch prints
the loss, train and test accuracy and the gradients' mean global norm; at the
end it checks the output layer's gradient against finite differences, saves
a checkpoint (model and optimizer) and reloads it into a fresh model.

With --fit, the same model trains through Keras' built-in loop instead:
model.compile(optimizer, loss, metrics=["accuracy"]) and model.fit(...), which
runs a gt.function-compiled step and prints Keras' progress bar and per-epoch
line (loss, accuracy, val_loss, val_accuracy); model.evaluate gives the test
accuracy:

    python examples/train_mlp.py --fit

With --distributed, under an MPI launcher, every process (rank) trains the
same model on its half (third, ...) of each batch and the ranks average their
gradients before each step (gt.distributed); rank 0 prints and saves:

    pip install -e ".[examples]"
    python examples/train_mlp.py --epochs 20 --seed 0 --device cpu
    pip install -e ".[examples,mpi]"
    mpirun -n 2 python examples/train_mlp.py --distributed
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
    ap.add_argument(
        "--distributed",
        action="store_true",
        help="data-parallel over the ranks of `mpirun -n N` (--batch-size is global)",
    )
    ap.add_argument("--fit", action="store_true", help="train with model.compile() and model.fit() (Keras' loop)")
    args = ap.parse_args()
    if args.fit and args.distributed:
        raise SystemExit("--fit and --distributed do not combine: model.fit runs on one process")
    if args.distributed:
        gt.distributed.init()  # also makes an uncaught error on any rank end the whole job
    rank, ranks = gt.distributed.rank(), gt.distributed.world_size()
    lead = rank == 0

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixel intensities are 0..16
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=args.seed)

    device = args.device or gt.current_device()
    if args.distributed and device.lower() != "cpu":
        device = f"cuda:{gt.distributed.local_rank()}"  # NCCL needs one GPU per rank
    with gt.device(device) as dev:
        gt.random.seed(args.seed)  # initial weights and dropout masks
        model = make_model(args.hidden)
        if args.distributed:
            model.build((None, x.shape[1]))
            gt.distributed.broadcast_variables(model.variables)  # every rank starts from rank 0's weights
            gt.random.seed(args.seed + 1 + rank)  # each rank its own dropout masks
        # the same seed everywhere: with shard=True the ranks cut the same shuffled batches
        loader = gt.data.DataLoader(
            x_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed, shard=args.distributed
        )
        steps = args.epochs * len(loader)
        schedule = gt.optim.CosineDecay(args.lr, decay_steps=steps, alpha=0.05)
        opt = gt.optim.Adam(learning_rate=schedule)
        x_test_t = gt.constant(x_test, device=dev)
        if args.fit:
            return fit(args, model, opt, (x_train, y_train), (x_test, y_test), dev)
        if lead:
            print(
                f"gputape {gt.__version__} on {dev}: digits, {len(y_train)} train / {len(y_test)} test images, "
                f"{args.epochs} epochs of {len(loader)} batches"
            )
            if args.distributed:
                print(
                    f"distributed: {ranks} ranks ({gt.distributed.backend(dev)}), each taking "
                    f"{args.batch_size // ranks} rows of every batch of {args.batch_size}"
                )

        start = time.perf_counter()
        bar = tqdm(total=steps, unit="step", disable=None if lead else True, leave=False)
        for epoch in range(1, args.epochs + 1):
            losses, norms, correct, seen = [], [], 0, 0
            for xb, yb in loader:
                with gt.GradientTape() as tape:
                    logits = model(xb, training=True)
                    loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
                grads = tape.gradient(loss, model.trainable_variables)
                if args.distributed:
                    grads = gt.distributed.average_gradients(grads)  # the whole batch's gradient, on every rank
                norms.append(float(gt.global_norm(grads)))
                opt.apply_gradients(zip(grads, model.trainable_variables))
                losses.append(float(loss))
                correct += int(gt.sum(gt.argmax(logits, axis=1) == yb))
                seen += len(yb)
                bar.update(1)
            # each rank saw its own rows: add up the epoch's figures (one small reduction per epoch)
            loss_sum, correct, seen = gt.distributed.all_reduce([np.array([np.sum(losses), correct, seen])], "sum")[0]
            mean_loss = loss_sum / (len(losses) * ranks)
            bar.set_postfix(loss=f"{mean_loss:.3f}")
            if lead:
                tqdm.write(
                    f"epoch {epoch:3d}  loss {mean_loss:.4f}  train acc {correct / seen:.3f}  "
                    f"test acc {accuracy(model, x_test_t, y_test):.3f}  grad norm {np.mean(norms):.3f}  "
                    f"lr {opt.learning_rate:.2e}"
                )
        bar.close()
        elapsed = time.perf_counter() - start
        if not lead:
            return accuracy(model, x_test_t, y_test)  # rank 0 checks, saves and reports

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


def fit(args: argparse.Namespace, model: gt.nn.Sequential, opt: gt.optim.Optimizer,
        train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], dev: str) -> float:  # fmt: skip
    """The same training through Keras' compile/fit/evaluate (a compiled step, Keras' progress output)."""
    print(f"gputape {gt.__version__} on {dev}: digits with model.fit, {args.epochs} epochs of batch {args.batch_size}")
    model.compile(
        optimizer=opt,
        loss=gt.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    history = model.fit(*train, batch_size=args.batch_size, epochs=args.epochs, validation_data=test, verbose=1)
    elapsed = time.perf_counter() - start
    loss, acc = model.evaluate(*test, verbose=0)
    assert acc == history.history["val_accuracy"][-1], "evaluate and fit's last validation disagree"
    took = f"after {args.epochs} epochs in {elapsed:.1f} s (model.fit)"
    print(f"final test accuracy {acc:.3f} (test loss {loss:.4f}) {took}")
    return acc


if __name__ == "__main__":
    main()
