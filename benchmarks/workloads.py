"""The benchmark workloads, as plain functions shared by the pytest-benchmark suite
(``test_bench_core.py``), the side-by-side script (``compare.py``), the profiler
(``profile_gputape.py``) and the correctness tests (``tests/test_benchmark_workloads.py``).

* ``mlp``: one SGD step of a 784-256-256-10 float32 MLP on a batch of ``B`` (default 128)
  with softmax cross-entropy, written with gputape exactly as a user would (a GradientTape
  forward, ``tape.gradient``, ``gt.optim.SGD.apply_gradients``), beside the hand-written
  numpy step (the reference every system is checked and timed against).
* ``chain``: a 100-link chain of small elementwise ops on 16 float32 values, forward and
  backward, beside a hand-written numpy version.
* ``jacobian``: the full Jacobian of one 64->64 tanh layer ``y = tanh(x @ W + b)`` with
  respect to its input vector ``x`` (by hand, beside PyTorch's ``torch.func.jacrev`` and
  JAX's jitted ``jax.jacrev``). By hand, ``J = diag(1 - y**2) @ W.T``, written as the broadcast
  ``(1 - y * y)[:, None] * W.T``. Every system computes the forward too.

Systems: ``numpy`` (by hand, the baseline), ``gputape`` (eager), ``onehot`` (eager, the MLP step's
other user form: ``-mean(sum(onehot * log_softmax(z), axis=1))`` and ``v.assign_sub(lr * g)`` per
variable; the MLP workload only), ``compiled`` (the same
gputape function wrapped in ``gt.function``: traced on the first call, replayed after),
``torch`` (PyTorch eager; ``torch.func.jacrev`` for the Jacobian), ``autograd`` (HIPS) and
``jax`` (``jax.jit`` of the whole step).

Every system is built by a factory ``make_<system>_<workload>(data)`` that returns a
:class:`Step`: ``step.fn()`` runs one unit of work (one SGD step; one forward+backward of
the chain; one Jacobian) and returns the loss (mlp), the gradient (chain) or the Jacobian
in the system's own type. The peers are imported only inside their factories;
:func:`build` returns None for a system that cannot run here (a peer that is not
installed, or ``gt.function`` missing or raising NotImplementedError), or raises
:class:`UnavailableError` with the reason when asked to.
"""

from __future__ import annotations

import importlib.util
import os
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import gputape as gt

D, H, C = 784, 256, 10  # MLP layer widths
LR = 0.01  # SGD learning rate
B_DEFAULT = 128  # MLP batch
BATCHES = (32, 128, 1024)  # the MLP batches of the side-by-side suite
K = 100  # chain links
N_DEFAULT = 16  # chain vector length
JAC_N = 64  # Jacobian layer width (64 -> 64)

SYSTEMS = ("numpy", "gputape", "onehot", "compiled", "torch", "autograd", "jax")
# ``onehot`` is an MLP-only variant of ``gputape``: the other way users write the step
VARIANTS = {"onehot": "mlp"}
WORKLOADS = ("mlp", "chain", "jacobian")
PARAM_NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")
THREADS: int | None = None  # torch threads for peers built from now on; None: all cores, torch's default


class UnavailableError(Exception):
    """A system cannot run here; the message says why (shown in the reports and test skips)."""


class Step:
    """One system's unit of work on one workload: call ``fn()``; ``params()`` reads the MLP weights.

    ``release()``, where set, frees what the system keeps alive between steps besides its
    weights (PyTorch's ``.grad`` tensors), so a memory measurement can start every system
    from the same state.
    """

    __slots__ = ("fn", "params", "release", "system", "workload")

    def __init__(
        self,
        workload: str,
        system: str,
        fn: Callable[[], Any],
        params: Callable[[], list[np.ndarray]] | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.workload = workload
        self.system = system
        self.fn = fn
        self.params = params
        self.release = release

    def __call__(self) -> Any:
        return self.fn()

    def __repr__(self) -> str:
        return f"<Step {self.workload}/{self.system}>"


def to_numpy(out: Any) -> np.ndarray:
    """A step's result (numpy, gt.Tensor, torch or jax array) as a numpy array, for comparisons."""
    if isinstance(out, gt.Tensor):
        return out.numpy()
    if hasattr(out, "detach"):  # torch
        return out.detach().cpu().numpy()
    return np.asarray(out)


# -- gt.function, guarded --------------------------------------------------------------------
#
# gt.function (issue 6) is written concurrently with this suite. The compiled variants are
# written against its TensorFlow-like API -- ``step = gt.function(f)``, first call traces,
# later calls replay -- and are skipped, with the reason, while it is missing or refuses.


def compiled_reason() -> str | None:
    """Why the ``compiled`` system cannot run (None when ``gt.function`` exists)."""
    if not hasattr(gt, "function"):
        return "gt.function does not exist in this gputape"
    return None


def _compiled(make: Callable[[], tuple[Callable[..., Any], tuple]], workload: str) -> Callable[[], Any]:
    """``gt.function`` of the function that ``make()`` returns, called on the arguments it returns.

    ``make`` is called twice: once to probe (wrap, trace, replay once: NotImplementedError
    at any of these -> :class:`UnavailableError`), then for the step that is returned, untouched,
    so its first call is the trace, from the same initial weights as every other system.
    Any other exception is a bug in gt.function or in this suite, and propagates.
    """
    reason = compiled_reason()
    if reason:
        raise UnavailableError(reason)
    fn, args = make()
    try:
        probe = gt.function(fn)
        probe(*args)
        probe(*args)
    except NotImplementedError as e:
        raise UnavailableError(f"gt.function raised NotImplementedError on the {workload} step: {e}") from None
    fn, args = make()
    compiled = gt.function(fn)
    return lambda: compiled(*args)


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


def gputape_mlp_loss_and_grads(x: gt.Tensor, y: Any, params: list[gt.Variable]) -> tuple[gt.Tensor, list]:
    """Forward under a tape and ``tape.gradient``: the loss and one gradient per parameter.

    ``y`` (the integer labels) may be a numpy array or a gt.Tensor: ``gt.function`` hands
    its traced function tensors.
    """
    w1, b1, w2, b2, w3, b3 = params
    B = x.shape[0]
    with gt.GradientTape() as tape:
        h = gt.nn.relu(x @ w1 + b1)
        h = gt.nn.relu(h @ w2 + b2)
        logp = gt.nn.log_softmax(h @ w3 + b3)
        loss = -gt.mean(logp[np.arange(B), y])
    return loss, tape.gradient(loss, params)


def gputape_mlp_train_step(params: list[gt.Variable], opt: Any) -> Callable[[Any, Any], gt.Tensor]:
    """The training step a TensorFlow user writes: ``train_step(x, y)`` -> loss.

    Forward under a GradientTape, ``tape.gradient``, ``opt.apply_gradients``. The eager
    column calls it as is and the compiled column through ``gt.function``, so the two
    measure the same code.
    """

    def train_step(x: Any, y: Any) -> gt.Tensor:
        loss, grads = gputape_mlp_loss_and_grads(x, y, params)
        opt.apply_gradients(zip(grads, params))
        return loss

    return train_step


def _gputape_mlp_parts(data: MLPData, lr: float) -> tuple[Callable[..., Any], tuple, list[gt.Variable]]:
    params = [gt.Variable(a, name=n) for a, n in zip(data.init, PARAM_NAMES)]
    step = gputape_mlp_train_step(params, gt.optim.SGD(lr))
    return step, (gt.constant(data.X), gt.constant(data.Y)), params


def make_gputape_mlp(data: MLPData, lr: float = LR) -> Step:
    train_step, (x, y), params = _gputape_mlp_parts(data, lr)
    return Step("mlp", "gputape", lambda: train_step(x, y), lambda: [p.numpy() for p in params])


def gputape_mlp_onehot_step(params: list[gt.Variable], lr: float) -> Callable[[Any, Any], gt.Tensor]:
    """The step as many users write it without an optimizer: a one-hot product for the loss and
    ``v.assign_sub(lr * g)`` per variable. ``train_step(x, yoh)`` -> loss."""

    def train_step(x: Any, yoh: Any) -> gt.Tensor:
        w1, b1, w2, b2, w3, b3 = params
        with gt.GradientTape() as tape:
            h = gt.nn.relu(x @ w1 + b1)
            h = gt.nn.relu(h @ w2 + b2)
            logp = gt.nn.log_softmax(h @ w3 + b3)
            loss = -gt.mean(gt.sum(yoh * logp, axis=1))
        for v, g in zip(params, tape.gradient(loss, params)):
            v.assign_sub(lr * g)
        return loss

    return train_step


def make_onehot_mlp(data: MLPData, lr: float = LR) -> Step:
    params = [gt.Variable(a, name=n) for a, n in zip(data.init, PARAM_NAMES)]
    train_step = gputape_mlp_onehot_step(params, lr)
    x, yoh = gt.constant(data.X), data.Yoh
    return Step("mlp", "onehot", lambda: train_step(x, yoh), lambda: [p.numpy() for p in params])


def make_compiled_mlp(data: MLPData, lr: float = LR) -> Step:
    box: dict[str, list[gt.Variable]] = {}

    def make() -> tuple[Callable[..., Any], tuple]:
        fn, args, box["params"] = _gputape_mlp_parts(data, lr)
        return fn, args

    fn = _compiled(make, "MLP")
    params = box["params"]  # those of the second make(): the step that is timed
    return Step("mlp", "compiled", fn, lambda: [p.numpy() for p in params])


# -- numpy by hand (the anchor's step) ---------------------------------------------------


def numpy_mlp_forward(X: np.ndarray, Y: np.ndarray, p: list[np.ndarray]) -> tuple[np.floating, tuple]:
    """The reference's hand-written forward: the loss and what its backward needs."""
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
    """The reference's hand-written backward: (gw1, gb1, gw2, gb2, gw3, gb3)."""
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
    """The reference's hand-written forward and backward: loss and (gw1, gb1, gw2, gb2, gw3, gb3)."""
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

    def release() -> None:
        opt.zero_grad(set_to_none=True)

    return Step("mlp", "torch", step, lambda: [q.detach().numpy().copy() for q in ps], release)


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


def make_jax_mlp(data: MLPData, lr: float = LR) -> Step:
    """The reference's JAX step (``jax.jit`` of gradient + update); it also returns the loss, to check it."""
    import jax
    import jax.numpy as jnp

    xs, ys, B = jnp.asarray(data.X), jnp.asarray(data.Y), data.B

    def loss_fn(p: list) -> Any:
        w1, c1, w2, c2, w3, c3 = p
        h = jax.nn.relu(xs @ w1 + c1)
        h = jax.nn.relu(h @ w2 + c2)
        z = h @ w3 + c3
        return -jnp.mean(jax.nn.log_softmax(z)[jnp.arange(B), ys])

    @jax.jit
    def upd(p: list) -> tuple[Any, list]:
        loss, g = jax.value_and_grad(loss_fn)(p)
        return loss, [a - lr * gg for a, gg in zip(p, g)]

    st = {"p": [jnp.asarray(a) for a in data.init]}

    def step() -> Any:
        loss, st["p"] = upd(st["p"])
        return jax.block_until_ready(loss)  # jax dispatches asynchronously: time the work, not the dispatch

    return Step("mlp", "jax", step, lambda: [np.asarray(a) for a in st["p"]])


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


def make_compiled_chain(x0: np.ndarray) -> Step:
    return Step("chain", "compiled", _compiled(lambda: (gputape_chain_grad, (gt.constant(x0),)), "chain"))


def numpy_chain_grad(x0: np.ndarray) -> np.ndarray:
    """The reference's hand-written forward (saving each link's input) and backward."""
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


def make_torch_chain(x0: np.ndarray, device: str = "cpu") -> Step:
    """PyTorch eager: the chain's forward and ``backward()`` on ``device`` (gpu_bench.py: ``"cuda:0"``)."""
    import torch

    torch.set_num_threads(THREADS or os.cpu_count() or 1)
    xt = torch.from_numpy(x0).to(device)

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


def make_jax_chain(x0: np.ndarray) -> Step:
    """``jax.jit(jax.grad(chain))``: XLA fuses the whole chain, forward and backward, into one program."""
    import jax
    import jax.numpy as jnp

    def fn(x: Any) -> Any:
        y = x
        for i in range(K):
            y = jnp.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        return jnp.sum(y)

    g = jax.jit(jax.grad(fn))
    xj = jnp.asarray(x0)
    return Step("chain", "jax", lambda: jax.block_until_ready(g(xj)))


# =====================================================================================
# (c) Jacobian of a 64 -> 64 tanh layer


@dataclass(frozen=True)
class JacData:
    """The layer ``y = tanh(x @ W + b)`` and the input vector ``x``."""

    x: np.ndarray  # (n,) float32
    W: np.ndarray  # (n, n) float32
    b: np.ndarray  # (n,) float32


def jac_data(n: int = JAC_N, seed: int = 0) -> JacData:
    rng = np.random.default_rng(seed)
    # Weights scaled by 1/sqrt(n) so that tanh is not saturated (a near-zero J checks nothing).
    W = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    return JacData(x, W, b)


def numpy_tanh_jacobian(x: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """By hand: ``J[i, j] = dy_i / dx_j = (1 - y_i**2) W[j, i]``, i.e. ``diag(1 - y**2) @ W.T``."""
    y = np.tanh(x @ W + b)
    return (1 - y * y)[:, None] * W.T


def gputape_tanh_jacobian(x: gt.Tensor, W: gt.Tensor, b: gt.Tensor) -> gt.Tensor:
    """``tape.jacobian`` of the layer w.r.t. its input, as a user writes it."""
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.tanh(x @ W + b)
    return tape.jacobian(y, x)


def make_numpy_jacobian(d: JacData) -> Step:
    return Step("jacobian", "numpy", lambda: numpy_tanh_jacobian(d.x, d.W, d.b))


def make_gputape_jacobian(d: JacData) -> Step:
    x, W, b = gt.constant(d.x), gt.constant(d.W), gt.constant(d.b)
    return Step("jacobian", "gputape", lambda: gputape_tanh_jacobian(x, W, b))


def make_compiled_jacobian(d: JacData) -> Step:
    def make() -> tuple[Callable[..., Any], tuple]:
        return gputape_tanh_jacobian, (gt.constant(d.x), gt.constant(d.W), gt.constant(d.b))

    return Step("jacobian", "compiled", _compiled(make, "jacobian"))


def make_torch_jacobian(d: JacData) -> Step:
    import torch

    torch.set_num_threads(THREADS or os.cpu_count() or 1)
    x, W, b = (torch.from_numpy(a) for a in (d.x, d.W, d.b))
    jac = torch.func.jacrev(lambda x: torch.tanh(x @ W + b))
    return Step("jacobian", "torch", lambda: jac(x))


def make_autograd_jacobian(d: JacData) -> Step:
    import autograd.numpy as anp
    from autograd import jacobian

    jac = jacobian(lambda x: anp.tanh(anp.dot(x, d.W) + d.b))
    return Step("jacobian", "autograd", lambda: jac(d.x))


def make_jax_jacobian(d: JacData) -> Step:
    import jax
    import jax.numpy as jnp

    x, W, b = (jnp.asarray(a) for a in (d.x, d.W, d.b))
    jac = jax.jit(jax.jacrev(lambda x: jnp.tanh(x @ W + b)))
    return Step("jacobian", "jax", lambda: jax.block_until_ready(jac(x)))


# =====================================================================================
# peak memory of a step


@dataclass(frozen=True)
class Memory:
    """Peak memory of one step (bytes), and how it was measured.

    ``step_peak``: the high-water mark of live bytes during one step, above what was live
    when the step began (so the parameters, data and optimizer state, which are live
    already, do not count; a compiled step's buffers allocated at trace time do not
    either). ``total_peak``: the same high-water mark counted from before the system was
    built, so it includes the system's own copies of the weights and data, its optimizer
    state and anything a compiled step keeps between calls; None where not measurable.
    """

    step_peak: int
    total_peak: int | None
    method: str


TRACEMALLOC = "tracemalloc (numpy buffers and Python objects)"
TORCH_PROFILER = "torch.profiler CPU allocator events (tensor storage only; .grad freed before the step)"


def measure_memory(workload: str, system: str, data: Any, warm: int = 2) -> Memory:
    """Build a fresh ``system`` step on ``data`` and measure one step's peak memory.

    numpy-based systems (numpy, gputape eager and compiled, autograd): ``tracemalloc``,
    which sees numpy's buffers (numpy reports them to it) and Python objects. Tracing
    starts before the build, and ``warm`` steps run first so the measured step is a
    steady-state one (caches filled, the compiled step traced). torch: its profiler's
    allocator events over two steps (the first makes the second's frees of blocks it
    allocated visible; the ``.grad`` tensors torch keeps between steps are released before
    the measured step, which then re-creates them); they count tensor storage, not Python
    objects. jax:
    :class:`UnavailableError` (XLA's CPU allocator is invisible to tracemalloc and jax reports
    no ``memory_stats()`` on the CPU).
    """
    if system == "jax":
        raise UnavailableError("XLA allocates outside tracemalloc and jax's CPU device reports no memory_stats()")
    if system == "torch":
        return _torch_memory(workload, data, warm)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        step = build(workload, system, data, strict=True)
        assert step is not None
        for _ in range(max(1, warm)):
            step.fn()
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        step.fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return Memory(peak - before, peak - base, TRACEMALLOC)


def _torch_memory(workload: str, data: Any, warm: int) -> Memory:
    # build() first: without torch it raises the UnavailableError callers skip on, where an
    # import at the top would raise ModuleNotFoundError (issue 11).
    step = build(workload, "torch", data, strict=True)
    assert step is not None
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(max(1, warm)):
        step.fn()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step.fn()  # its allocations make the measured step's frees of them visible
        if step.release is not None:
            # Drop the .grad tensors torch keeps between steps, so the measured step starts,
            # like numpy's and gputape's, with only weights and data alive.
            step.release()
        with record_function("gputape_bench_step"):
            step.fn()
    events = list(prof.profiler.kineto_results.events())
    mark = [e for e in events if e.name() == "gputape_bench_step"]
    if not mark:
        raise UnavailableError(f"torch {torch.__version__}: the profiler recorded no step marker")
    t0, t1 = mark[0].start_ns(), mark[0].end_ns()
    live = peak = at_start = 0
    for t, n in sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"):
        if t > t1:
            break
        live += n
        if t < t0:
            at_start = peak = live
        else:
            peak = max(peak, live)
    return Memory(peak - at_start, None, TORCH_PROFILER)


# =====================================================================================
# registry

FACTORIES: dict[str, dict[str, Callable[..., Step]]] = {
    "mlp": {
        "numpy": make_numpy_mlp,
        "gputape": make_gputape_mlp,
        "onehot": make_onehot_mlp,
        "compiled": make_compiled_mlp,
        "torch": make_torch_mlp,
        "autograd": make_autograd_mlp,
        "jax": make_jax_mlp,
    },
    "chain": {
        "numpy": make_numpy_chain,
        "gputape": make_gputape_chain,
        "compiled": make_compiled_chain,
        "torch": make_torch_chain,
        "autograd": make_autograd_chain,
        "jax": make_jax_chain,
    },
    "jacobian": {
        "numpy": make_numpy_jacobian,
        "gputape": make_gputape_jacobian,
        "compiled": make_compiled_jacobian,
        "torch": make_torch_jacobian,
        "autograd": make_autograd_jacobian,
        "jax": make_jax_jacobian,
    },
}

PEER_MODULES = {"torch": "torch", "autograd": "autograd", "jax": "jax"}


def make_data(workload: str, size: int | None = None, seed: int = 0) -> Any:
    """The workload's inputs: :class:`MLPData` for ``mlp`` (``size`` = batch), the x0 vector for
    ``chain`` (``size`` = its length), :class:`JacData` for ``jacobian`` (``size`` = layer width)."""
    if workload == "mlp":
        return mlp_data(size or B_DEFAULT, seed)
    if workload == "chain":
        return chain_data(size or N_DEFAULT, seed)
    if workload == "jacobian":
        return jac_data(size or JAC_N, seed)
    raise ValueError(f"unknown workload {workload!r}; choose from {WORKLOADS}")


def peer_available(system: str) -> bool:
    """True for numpy, gputape and compiled, and for a peer whose package imports.

    (``compiled`` may still be unavailable: see :func:`compiled_reason`.)
    """
    mod = PEER_MODULES.get(system)
    if mod is None:
        return True
    try:
        __import__(mod)
    except ImportError:
        return False
    return True


def peer_installed(system: str) -> bool:
    """Like :func:`peer_available` without importing the peer (``compare.py`` keeps torch and jax,
    and their thread pools, out of the process that times numpy)."""
    mod = PEER_MODULES.get(system)
    return mod is None or importlib.util.find_spec(mod) is not None


def build(workload: str, system: str, data: Any = None, strict: bool = False) -> Step | None:
    """The :class:`Step` for ``system`` on ``workload``.

    When the system cannot run here (a peer that is not installed; ``gt.function`` missing
    or raising NotImplementedError) it returns None, or with ``strict=True`` raises
    :class:`UnavailableError` with the reason.
    """
    if workload not in FACTORIES:
        raise ValueError(f"unknown workload {workload!r}; choose from {WORKLOADS}")
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose from {SYSTEMS}")
    try:
        if system not in FACTORIES[workload]:
            raise UnavailableError(f"{system} is a variant of the {VARIANTS[system]} workload only")
        if not peer_available(system):
            raise UnavailableError(f"{PEER_MODULES[system]} is not installed")
        return FACTORIES[workload][system](make_data(workload) if data is None else data)
    except UnavailableError:
        if strict:
            raise
        return None


def version_of(system: str) -> str | None:
    """The installed version of a system's package (without importing it), or None."""
    if system == "numpy":
        return np.__version__
    if system in ("gputape", "compiled") or system in VARIANTS:
        return gt.__version__
    if not peer_installed(system):
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PEER_MODULES[system])
    except PackageNotFoundError:
        return None
