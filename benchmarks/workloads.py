"""The two benchmark workloads, as plain functions shared by the pytest-benchmark suite
(``test_bench_core.py``), the side-by-side script (``compare.py``), the profiler
(``profile.py``) and the correctness test (``tests/test_benchmark_workloads.py``).

* ``mlp``: one SGD step of a 784-256-256-10 float32 MLP on a batch of ``B`` (default 128)
  with softmax cross-entropy, written with gputape exactly as a user would, beside the
  hand-written numpy step of ``shared/anchors/mlp_peers.py``.
* ``chain``: a 100-link chain of small elementwise ops on 16 float32 values, forward and
  backward, beside the hand-written numpy version of ``shared/anchors/op_overhead.py``.

Every system is built by a factory ``make_<system>_<workload>(data)`` that returns a
:class:`Step`: ``step.fn()`` runs one unit of work (one SGD step; one forward+backward of
the chain) and returns the loss (mlp) or the gradient (chain) in the system's own type.
The peers (PyTorch eager, HIPS autograd) are imported only inside their factories;
:func:`build` returns None for a peer that is not installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import gputape as gt

D, H, C = 784, 256, 10  # MLP layer widths
LR = 0.01  # SGD learning rate
B_DEFAULT = 128  # MLP batch
K = 100  # chain links
N_DEFAULT = 16  # chain vector length

SYSTEMS = ("numpy", "gputape", "torch", "autograd")
WORKLOADS = ("mlp", "chain")
PARAM_NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")
THREADS: int | None = None  # torch threads for peers built from now on; None: all cores, as the anchors


class Step:
    """One system's unit of work on one workload: call ``fn()``; ``params()`` reads the MLP weights."""

    __slots__ = ("fn", "params", "system", "workload")

    def __init__(
        self,
        workload: str,
        system: str,
        fn: Callable[[], Any],
        params: Callable[[], list[np.ndarray]] | None = None,
    ) -> None:
        self.workload = workload
        self.system = system
        self.fn = fn
        self.params = params

    def __call__(self) -> Any:
        return self.fn()

    def __repr__(self) -> str:
        return f"<Step {self.workload}/{self.system}>"


# =====================================================================================
# (a) MLP SGD step


@dataclass(frozen=True)
class MLPData:
    """Inputs, labels and initial weights, drawn as ``mlp_peers.py`` draws them."""

    X: np.ndarray  # (B, D) float32
    Y: np.ndarray  # (B,) int64 labels
    Yoh: np.ndarray  # (B, C) float32 one-hot labels
    init: tuple[np.ndarray, ...]  # w1, b1, w2, b2, w3, b3

    @property
    def B(self) -> int:
        return self.X.shape[0]


def mlp_data(B: int = B_DEFAULT, seed: int = 0) -> MLPData:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, D)).astype(np.float32)
    Y = rng.integers(0, C, B)
    Yoh = np.eye(C, dtype=np.float32)[Y]
    W1 = (rng.standard_normal((D, H)) * 0.05).astype(np.float32)
    W2 = (rng.standard_normal((H, H)) * 0.05).astype(np.float32)
    W3 = (rng.standard_normal((H, C)) * 0.05).astype(np.float32)
    init = (W1, np.zeros(H, np.float32), W2, np.zeros(H, np.float32), W3, np.zeros(C, np.float32))
    return MLPData(X, Y, Yoh, init)


# -- gputape, as a user writes it ------------------------------------------------------


def gputape_mlp_loss_and_grads(x: gt.Tensor, y: np.ndarray, params: list[gt.Variable]) -> tuple[gt.Tensor, list]:
    """Forward under a tape and ``tape.gradient``: the loss and one gradient per parameter."""
    w1, b1, w2, b2, w3, b3 = params
    B = x.shape[0]
    with gt.GradientTape() as tape:
        h = gt.nn.relu(x @ w1 + b1)
        h = gt.nn.relu(h @ w2 + b2)
        logp = gt.nn.log_softmax(h @ w3 + b3)
        loss = -gt.mean(logp[np.arange(B), y])
    return loss, tape.gradient(loss, params)


def make_gputape_mlp(data: MLPData, lr: float = LR) -> Step:
    x = gt.constant(data.X)
    y = data.Y
    params = [gt.Variable(a, name=n) for a, n in zip(data.init, PARAM_NAMES)]

    def step() -> gt.Tensor:
        loss, grads = gputape_mlp_loss_and_grads(x, y, params)
        for p, g in zip(params, grads):
            p.assign_sub(lr * g)
        return loss

    return Step("mlp", "gputape", step, lambda: [p.numpy() for p in params])


# -- numpy by hand (the anchor's step) ---------------------------------------------------


def numpy_mlp_forward(X: np.ndarray, Y: np.ndarray, p: list[np.ndarray]) -> tuple[np.floating, tuple]:
    """The anchor's hand-written forward: the loss and what its backward needs."""
    B = X.shape[0]
    w1, c1, w2, c2, w3, c3 = p
    z1 = X @ w1 + c1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w2 + c2
    h2 = np.maximum(z2, 0)
    z3 = h2 @ w3 + c3
    z3 = z3 - z3.max(1, keepdims=True)
    e = np.exp(z3)
    s = e / e.sum(1, keepdims=True)
    loss = -np.log(s[np.arange(B), Y]).mean()
    return loss, (X, z1, h1, z2, h2, s, w2, w3)


def numpy_mlp_backward(Yoh: np.ndarray, cache: tuple) -> tuple[np.ndarray, ...]:
    """The anchor's hand-written backward: (gw1, gb1, gw2, gb2, gw3, gb3)."""
    X, z1, h1, z2, h2, s, w2, w3 = cache
    g3 = (s - Yoh) / X.shape[0]
    gw3 = h2.T @ g3
    gc3 = g3.sum(0)
    g2 = (g3 @ w3.T) * (z2 > 0)
    gw2 = h1.T @ g2
    gc2 = g2.sum(0)
    g1 = (g2 @ w2.T) * (z1 > 0)
    gw1 = X.T @ g1
    gc1 = g1.sum(0)
    return gw1, gc1, gw2, gc2, gw3, gc3


def numpy_mlp_loss_and_grads(
    X: np.ndarray, Y: np.ndarray, Yoh: np.ndarray, p: list[np.ndarray]
) -> tuple[np.floating, tuple[np.ndarray, ...]]:
    """The anchor's hand-written forward and backward: loss and (gw1, gb1, gw2, gb2, gw3, gb3)."""
    loss, cache = numpy_mlp_forward(X, Y, p)
    return loss, numpy_mlp_backward(Yoh, cache)


def make_numpy_mlp(data: MLPData, lr: float = LR) -> Step:
    X, Y, Yoh = data.X, data.Y, data.Yoh
    p = [a.copy() for a in data.init]

    def step() -> np.floating:
        loss, grads = numpy_mlp_loss_and_grads(X, Y, Yoh, p)
        for a, g in zip(p, grads):
            a -= lr * g
        return loss

    return Step("mlp", "numpy", step, lambda: [a.copy() for a in p])


# -- peers -----------------------------------------------------------------------------


def make_torch_mlp(data: MLPData, lr: float = LR) -> Step:
    import torch

    torch.set_num_threads(THREADS or os.cpu_count() or 1)
    xs = torch.from_numpy(data.X)
    ys = torch.from_numpy(data.Y)
    ps = [torch.tensor(a, requires_grad=True) for a in data.init]
    opt = torch.optim.SGD(ps, lr=lr)

    def step() -> Any:
        w1, c1, w2, c2, w3, c3 = ps
        h = torch.relu(xs @ w1 + c1)
        h = torch.relu(h @ w2 + c2)
        z = h @ w3 + c3
        loss = torch.nn.functional.cross_entropy(z, ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return Step("mlp", "torch", step, lambda: [q.detach().numpy().copy() for q in ps])


def make_autograd_mlp(data: MLPData, lr: float = LR) -> Step:
    import autograd.numpy as anp
    from autograd import value_and_grad

    X, Y, B = data.X, data.Y, data.B
    p = [a.copy() for a in data.init]

    def loss_fn(p: list) -> Any:
        w1, c1, w2, c2, w3, c3 = p
        h = anp.maximum(anp.dot(X, w1) + c1, 0)
        h = anp.maximum(anp.dot(h, w2) + c2, 0)
        z = anp.dot(h, w3) + c3
        z = z - anp.max(z, axis=1, keepdims=True)
        lse = anp.log(anp.sum(anp.exp(z), axis=1))
        return anp.mean(lse - z[anp.arange(B), Y])

    vg = value_and_grad(loss_fn)

    def step() -> Any:
        loss, gs = vg(p)
        for a, g in zip(p, gs):
            a -= lr * g
        return loss

    return Step("mlp", "autograd", step, lambda: [a.copy() for a in p])


# =====================================================================================
# (b) 100-link elementwise chain, forward + backward


def chain_data(N: int = N_DEFAULT, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


def gputape_chain_grad(x: gt.Tensor) -> gt.Tensor:
    """d sum(chain(x)) / dx with gputape, written as a user would."""
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = x
        for i in range(K):
            y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        s = gt.sum(y)
    return tape.gradient(s, x)


def make_gputape_chain(x0: np.ndarray) -> Step:
    x = gt.constant(x0)
    return Step("chain", "gputape", lambda: gputape_chain_grad(x))


def numpy_chain_grad(x0: np.ndarray) -> np.ndarray:
    """The anchor's hand-written forward (saving each link's input) and backward."""
    y = x0
    saved = []
    for i in range(K):
        saved.append(y)
        y = np.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
    g = np.ones_like(y)
    for i in reversed(range(K)):
        s = saved[i]
        g = g * (1 - np.tanh(s) ** 2) * 1.01 if i % 2 else g * s
    return g


def make_numpy_chain(x0: np.ndarray) -> Step:
    return Step("chain", "numpy", lambda: numpy_chain_grad(x0))


def make_torch_chain(x0: np.ndarray) -> Step:
    import torch

    torch.set_num_threads(THREADS or os.cpu_count() or 1)
    xt = torch.from_numpy(x0)

    def f() -> Any:
        x = xt.clone().requires_grad_()
        y = x
        for i in range(K):
            y = torch.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        y.sum().backward()
        return x.grad

    return Step("chain", "torch", f)


def make_autograd_chain(x0: np.ndarray) -> Step:
    import autograd.numpy as anp
    from autograd import grad

    def fn(x: Any) -> Any:
        y = x
        for i in range(K):
            y = anp.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        return anp.sum(y)

    g = grad(fn)
    return Step("chain", "autograd", lambda: g(x0))


# =====================================================================================
# registry

FACTORIES: dict[str, dict[str, Callable[..., Step]]] = {
    "mlp": {
        "numpy": make_numpy_mlp,
        "gputape": make_gputape_mlp,
        "torch": make_torch_mlp,
        "autograd": make_autograd_mlp,
    },
    "chain": {
        "numpy": make_numpy_chain,
        "gputape": make_gputape_chain,
        "torch": make_torch_chain,
        "autograd": make_autograd_chain,
    },
}

PEER_MODULES = {"torch": "torch", "autograd": "autograd"}


def make_data(workload: str, size: int | None = None, seed: int = 0) -> Any:
    """The workload's inputs: :class:`MLPData` for ``mlp`` (``size`` = batch), the x0 vector for ``chain``."""
    if workload == "mlp":
        return mlp_data(size or B_DEFAULT, seed)
    if workload == "chain":
        return chain_data(size or N_DEFAULT, seed)
    raise ValueError(f"unknown workload {workload!r}; choose from {WORKLOADS}")


def peer_available(system: str) -> bool:
    """True for numpy and gputape, and for a peer whose package imports."""
    mod = PEER_MODULES.get(system)
    if mod is None:
        return True
    try:
        __import__(mod)
    except ImportError:
        return False
    return True


def build(workload: str, system: str, data: Any = None) -> Step | None:
    """The :class:`Step` for ``system`` on ``workload``; None when that peer is not installed."""
    if system not in FACTORIES[workload]:
        raise ValueError(f"unknown system {system!r}; choose from {SYSTEMS}")
    if not peer_available(system):
        return None
    return FACTORIES[workload][system](make_data(workload) if data is None else data)


def version_of(system: str) -> str | None:
    """The installed version of a system's package, or None."""
    if system == "numpy":
        return np.__version__
    if system == "gputape":
        return gt.__version__
    if not peer_available(system):
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PEER_MODULES[system])
    except PackageNotFoundError:
        return None
