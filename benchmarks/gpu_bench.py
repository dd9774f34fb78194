"""GPU benchmarks, peers side by side in one run (called by ``benchmarks/gpu_check.sh``).

1. Bandwidth: the device-to-device copy (the ceiling), then cupy's elementwise
   multiply, every fused kernel of ``gputape.kernels.registry`` and, beside each, the
   unfused cupy expressions it replaces, at 2**25 (32M) float32 elements. Each
   is reported in GB/s (bytes that must move, read + written) and as a fraction
   of the copy's bandwidth.
2. The 784-256-256-10 MLP training step, batch 1024, Adam: gputape on the GPU
   (with ``gt.optim.Adam``, its eager tape's backward replayed as one CUDA graph and,
   beside it, as ordinary launches, and with the fused one-launch optimizer) against
   numpy by hand on the CPU, gputape on the CPU and PyTorch CUDA eager (default
   and fused Adam), PyTorch's whole step captured in one CUDA graph (capturable
   Adam, static buffers) and ``torch.compile(mode="reduce-overhead")`` (skipped, with
   the reason in ``skipped_peers``, where it cannot compile: no triton, offline, over
   its time budget) when torch is importable; ms per step, and every system's
   loss after the same steps from the same weights, so a wrong step shows.

Without a GPU it exits with status 2 and says why: it never reports CPU numbers
as GPU results. ``python benchmarks/gpu_bench.py --json OUT.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gputape as gt  # noqa: E402
from benchmarks.workloads import numpy_mlp_loss_and_grads  # noqa: E402 - the hand-written numpy step, shared
from gputape.devices import backend  # noqa: E402
from gputape.kernels import registry as K  # noqa: E402, N812

D, H, C = 784, 256, 10
LR = 1e-3


# -- timing ----------------------------------------------------------------------------------


def time_gpu(cp: Any, fn: Callable[[], Any], reps: int = 20, batches: int = 5, warmup: int = 3) -> float:
    """Median seconds per call over ``batches`` batches of ``reps`` calls, timed with CUDA events."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(batches):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / reps)
    return statistics.median(out)


def time_wall(fn: Callable[[], Any], sync: Callable[[], None], reps: int, batches: int = 3, warmup: int = 3) -> float:
    """Median wall seconds per call (host-bound work: the MLP step), synchronising around each batch."""
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        out.append((time.perf_counter() - t0) / reps)
    return statistics.median(out)


# -- 1. bandwidth -----------------------------------------------------------------------------


def bandwidth(cp: Any, n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    f32 = cp.float32
    cp.random.seed(0)
    rng = cp.random  # the legacy API: standard_normal(dtype=) and randint exist in every cupy
    a = rng.standard_normal(n, dtype=f32)
    b = rng.standard_normal(n, dtype=f32)
    c = cp.empty_like(a)
    nb = a.nbytes
    stream = cp.cuda.get_current_stream()

    def memcpy() -> None:
        cp.cuda.runtime.memcpyAsync(c.data.ptr, a.data.ptr, nb, cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr)

    t_memcpy = time_gpu(cp, memcpy)
    t_copy = time_gpu(cp, lambda: cp.copyto(c, a))
    copy_bw = 2 * nb / min(t_memcpy, t_copy)

    def row(name: str, t: float, nbytes: int, group: str, baseline: str | None = None) -> None:
        bw = nbytes / t
        rows.append({
            "group": group, "name": name, "ms": t * 1e3, "GB/s": bw / 1e9,
            "fraction_of_copy": bw / copy_bw, "baseline_of": baseline,
        })  # fmt: skip

    row("cudaMemcpy device-to-device", t_memcpy, 2 * nb, "copy")
    row("cupy.copyto (elementwise copy)", t_copy, 2 * nb, "copy")
    row("cupy.multiply(a, b, out=c)", time_gpu(cp, lambda: cp.multiply(a, b, out=c)), 3 * nb, "elementwise")
    ta, tb = gt.constant(a), gt.constant(b)
    row("gt.multiply (allocates its output)", time_gpu(cp, lambda: gt.multiply(ta, tb)), 3 * nb, "elementwise")

    # activation backward fused with the incoming gradient: read residual + g, write gx
    x = rng.standard_normal(n, dtype=f32) * 3
    g = rng.standard_normal(n, dtype=f32)
    for act in K.ACTIVATIONS:
        saved = K.bias_activation(x, cp.zeros(1, f32), act) if K.BACKWARD_SAVES[act] == "y" else x
        t = time_gpu(cp, lambda act=act, saved=saved: K.activation_backward(act, saved, g))
        row(f"fused {act} backward", t, 3 * nb, "fused backward")
        # the same body with float4 loads (gt.config.set_vector_kernels, off by default until measured here)
        gt.config.set_vector_kernels(True)
        try:
            t = time_gpu(cp, lambda act=act, saved=saved: K.activation_backward(act, saved, g))
        finally:
            gt.config.set_vector_kernels(False)
        row(f"  fused {act} backward, float4 loads", t, 3 * nb, "fused backward")
        unfused = _unfused_backward(cp, act, saved, g)
        if unfused is not None:
            t = time_gpu(cp, unfused)
            row(f"  unfused cupy {act} backward", t, 3 * nb, "fused backward", f"fused {act} backward")

    # bias + activation forward: read x, write y (the bias row is negligible)
    cols = 1024
    xm = x.reshape(-1, cols)
    bias = rng.standard_normal(cols, dtype=f32)
    for act in ("relu", "gelu", "sigmoid"):
        t = time_gpu(cp, lambda act=act: K.bias_activation(xm, bias, act))
        row(f"fused bias+{act} forward", t, 2 * nb, "fused forward")
    t = time_gpu(cp, lambda: cp.maximum(xm + bias, 0))
    row("  unfused cupy bias+relu", t, 2 * nb, "fused forward", "fused bias+relu forward")

    # softmax cross-entropy, loss and gradient in one pass: read logits, write dlogits (+ labels, loss)
    for classes in (10, 1024, 32768):
        rows_ = n // classes
        z = x[: rows_ * classes].reshape(rows_, classes)
        lab = rng.randint(0, classes, rows_).astype(cp.int64)
        nbytes = 2 * z.nbytes + lab.nbytes + rows_ * 4
        fused = f"fused softmax xent fwd+bwd, C={classes}"
        row(fused, time_gpu(cp, lambda z=z, lab=lab: K.sparse_softmax_xent(z, lab)), nbytes, "fused xent")
        t = time_gpu(cp, lambda z=z, lab=lab: _unfused_xent(cp, z, lab))
        row(f"  unfused cupy softmax xent, C={classes}", t, nbytes, "fused xent", fused)

    # in-place gradient accumulation: read acc + g, write acc
    acc = cp.zeros_like(a)
    row("fused accumulate (acc += g)", time_gpu(cp, lambda: K.accumulate_(acc, g)), 3 * nb, "accumulate")
    row(
        "  unfused cupy acc = acc + g",
        time_gpu(cp, lambda: acc + g),
        3 * nb,
        "accumulate",
        "fused accumulate (acc += g)",
    )

    # optimizers over many tensors in one launch: Adam reads p, g, m, v and writes p, m, v
    sizes = [n // 2, n // 4, n // 8, n // 16, n // 32]
    sizes.append(n - sum(sizes))
    params = [rng.standard_normal(s, dtype=f32) for s in sizes]
    grads = [rng.standard_normal(s, dtype=f32) * 1e-3 for s in sizes]
    for kind, kw, streams in (("adam", {}, 7), ("adamw", {}, 7), ("sgd", {"momentum": 0.9}, 5)):
        opt = K.FusedOptimizer(kind, LR, **kw)
        t = time_gpu(cp, lambda opt=opt: opt.update(params, grads))
        row(f"fused {kind} over {len(sizes)} tensors (1 launch)", t, streams * nb, "optimizer")
    slots = [(cp.zeros_like(p), cp.zeros_like(p)) for p in params]
    t = time_gpu(cp, lambda: _unfused_adam(cp, params, grads, slots))
    row(
        "  unfused cupy adam (per tensor, Keras form)",
        t,
        7 * nb,
        "optimizer",
        f"fused adam over {len(sizes)} tensors (1 launch)",
    )
    return rows


def _unfused_backward(cp: Any, act: str, saved: Any, g: Any) -> Callable[[], Any] | None:
    """The backward as the primitives' VJPs compute it today: one cupy kernel per operator."""
    forms = {
        "relu": lambda: g * (saved > 0),
        "leaky_relu": lambda: cp.where(saved > 0, g, g * 0.2),
        "elu": lambda: cp.where(saved > 0, g, g * (cp.expm1(cp.minimum(saved, 0)) + 1.0)),
        "sigmoid": lambda: g * (saved * (1 - saved)),
        "tanh": lambda: g * (1 - saved * saved),
        "softplus": lambda: g * (1 / (1 + cp.exp(-saved))),
    }
    return forms.get(act)


def _unfused_xent(cp: Any, z: Any, lab: Any) -> Any:
    m = z.max(axis=-1, keepdims=True)
    s = z - m
    e = cp.exp(s)
    tot = e.sum(axis=-1, keepdims=True)
    loss = cp.log(tot[:, 0]) - cp.take_along_axis(s, lab[:, None], axis=-1)[:, 0]
    onehot = lab[:, None] == cp.arange(z.shape[-1])
    return loss, e / tot - onehot


def _unfused_adam(cp: Any, params: list, grads: list, slots: list, b1: float = 0.9, b2: float = 0.999) -> None:
    alpha = LR * math.sqrt(1 - b2) / (1 - b1)
    for p, g, (m, v) in zip(params, grads, slots):
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        p -= (m * alpha) / (cp.sqrt(v) + 1e-7)


# -- 2. the MLP step ------------------------------------------------------------------------------


def mlp_data(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch, D)).astype(np.float32)
    Y = rng.integers(0, C, batch).astype(np.int64)
    init = []
    for fan_in, fan_out in ((D, H), (H, H), (H, C)):
        init.append((rng.standard_normal((fan_in, fan_out)) * math.sqrt(2.0 / fan_in)).astype(np.float32))
        init.append(np.zeros(fan_out, np.float32))
    return X, Y, init


def numpy_mlp(X: np.ndarray, Y: np.ndarray, init: list[np.ndarray]) -> Callable[[], float]:
    """Forward, backward and Keras-form Adam by hand in numpy (the CPU baseline)."""
    p = [a.copy() for a in init]
    m = [np.zeros_like(a) for a in p]
    v = [np.zeros_like(a) for a in p]
    onehot = np.eye(C, dtype=np.float32)[Y]
    t = [0]

    def step() -> float:
        loss, grads = numpy_mlp_loss_and_grads(X, Y, onehot, p)
        loss = float(loss)
        t[0] += 1
        alpha = LR * math.sqrt(1 - 0.999 ** t[0]) / (1 - 0.9 ** t[0])
        for a, g, mm, vv in zip(p, grads, m, v):
            mm += (g - mm) * np.float32(0.1)
            vv += (g * g - vv) * np.float32(0.001)
            a -= (mm * np.float32(alpha)) / (np.sqrt(vv) + np.float32(1e-7))
        return loss

    return step


def gputape_mlp(
    X: np.ndarray,
    Y: np.ndarray,
    init: list[np.ndarray],
    device: str,
    fused: bool,
    compiled: Any = None,
    capture_gemm: Any = None,
    optimizer_in_graph: Any = None,
) -> Callable[[], Any]:
    """The step as a user writes it: a tape, sparse softmax cross-entropy, an optimizer.

    ``compiled``: None for eager; else ``gt.function(step, graphs=compiled)`` (True: CUDA
    graphs between the cuBLAS calls; False: the replay without graphs); ``optimizer_in_graph``
    is gt.function's option of that name (None: its default).
    """
    params = [gt.Variable(backend.to_device(a, device), name=f"p{i}") for i, a in enumerate(init)]
    x0 = gt.constant(backend.to_device(X, device))
    y0 = gt.constant(backend.to_device(Y, device))
    opt: Any = K.FusedOptimizer("adam", LR) if fused else gt.optim.Adam(LR)
    w1, b1, w2, b2, w3, b3 = params

    def train(x: Any, y: Any) -> Any:
        with gt.GradientTape() as tape:
            h = gt.nn.relu(x @ w1 + b1)
            h = gt.nn.relu(h @ w2 + b2)
            loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(y, h @ w3 + b3))
        grads = tape.gradient(loss, params)
        if fused:
            opt.update(params, grads)
        else:
            opt.apply_gradients(zip(grads, params))
        return loss

    f = (
        train
        if compiled is None
        else gt.function(train, graphs=compiled, capture_gemm=capture_gemm, optimizer_in_graph=optimizer_in_graph)
    )
    FUNCTIONS.append(f)

    def step() -> Any:
        return f(x0, y0)

    return step


FUNCTIONS: list[Any] = []  # the compiled ones report their CUDA-graph plan


def with_backward_graphs(step: Callable[[], Any], enabled: bool = True) -> Callable[[], Any]:
    """``step`` with the eager tape's compiled backward replayed as one CUDA graph (``enabled``,
    ``gt.config.set_backward_graphs`` for the call; off by default), for the row beside the default."""

    def run() -> Any:
        was = gt.config.get_backward_graphs()
        gt.config.set_backward_graphs(enabled)
        try:
            return step()
        finally:
            gt.config.set_backward_graphs(was)

    return run


def torch_mlp(X: np.ndarray, Y: np.ndarray, init: list[np.ndarray], device: str, fused: bool) -> Callable[[], Any]:
    import torch

    dev = torch.device(device)
    ps = [torch.tensor(a, device=dev, requires_grad=True) for a in init]
    x = torch.tensor(X, device=dev)
    y = torch.tensor(Y, device=dev)
    opt = torch.optim.Adam(ps, lr=LR, eps=1e-7, fused=fused or None)
    w1, b1, w2, b2, w3, b3 = ps

    def step() -> Any:
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        loss = torch.nn.functional.cross_entropy(h @ w3 + b3, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def restart_torch_training(params: list[Any], opt: Any, init: list[np.ndarray]) -> None:
    """Put ``params`` back to ``init`` and ``opt`` (Adam) back to step 0, in place.

    A CUDA-graphed step must be warmed up (and captured) before it is timed, which moves the
    weights; writing the start back into the very same tensors (the graph holds their
    addresses) makes its first replay the first step from the shared start, as for every
    other system, so the loss check compares the same trajectory.
    """
    import torch

    with torch.no_grad():
        for p, a in zip(params, init):
            p.copy_(torch.as_tensor(a, device=p.device))
            p.grad = None if p.grad is None else p.grad.zero_()
        for state in opt.state.values():
            for v in state.values():
                if torch.is_tensor(v):
                    v.zero_()


def torch_graphed_mlp(X: np.ndarray, Y: np.ndarray, init: list[np.ndarray], device: str) -> Callable[[], Any]:
    """PyTorch's fastest form of this small step: the whole step (forward, backward, a capturable
    Adam, whose step count lives on the device) captured in one CUDA graph, static input buffers,
    replayed per call: PyTorch's "whole-network capture" recipe (CUDA semantics notes). As there,
    each step copies its batch into the static inputs before the replay (a data loader's batch is
    a new tensor), as gt.function copies its arguments into the graph's buffers."""
    import torch

    dev = torch.device(device)
    ps = [torch.tensor(a, device=dev, requires_grad=True) for a in init]
    batch_x = torch.tensor(X, device=dev)
    batch_y = torch.tensor(Y, device=dev)
    x = batch_x.clone()  # the static inputs the graph reads
    y = batch_y.clone()
    opt = torch.optim.Adam(ps, lr=LR, eps=1e-7, capturable=True)
    w1, b1, w2, b2, w3, b3 = ps

    def body() -> Any:
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        loss = torch.nn.functional.cross_entropy(h @ w3 + b3, y)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream (cuBLAS handles, the optimizer's state)
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = body()
    restart_torch_training(ps, opt, init)

    def step() -> Any:
        x.copy_(batch_x)
        y.copy_(batch_y)
        graph.replay()
        return static_loss.detach()

    return step


def torch_compiled_mlp(
    X: np.ndarray, Y: np.ndarray, init: list[np.ndarray], device: str, backend: str = "inductor"
) -> Callable[[], Any]:
    """``torch.compile(mode="reduce-overhead")``, as a PyTorch user compiles a small training step.

    The model (an ``nn.Sequential`` of ``Linear`` layers holding ``init``) is compiled with
    ``mode="reduce-overhead"``: Inductor's kernels, forward and backward replayed as CUDA
    graphs (cudagraph trees, parameters at static addresses); the Adam step is compiled as
    PyTorch's "compiling the optimizer" tutorial does (``torch.compile(opt.step)``).
    ``torch.compiler.cudagraph_mark_step_begin()`` starts each step. Compiling happens here
    (three warm-up steps, then the start is restored), so a machine where it cannot work
    (no triton, no compiler, offline) raises here and the peer is skipped with that reason.
    ``backend``: the tests' ``"eager"`` runs the same code without Inductor on the CPU.
    """
    import torch

    key = (device, backend, X.shape)
    built = _COMPILED.get(key)
    if built is not None:  # compiled once per process (minutes of the bench's time): restart it
        step, params, opt, start = built
        restart_torch_training(params, opt, start)
        return step
    dev = torch.device(device)
    layers = [torch.nn.Linear(w.shape[0], w.shape[1], device=dev) for w in init[0::2]]
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    start = [a for w, b in zip(init[0::2], init[1::2]) for a in (np.ascontiguousarray(w.T), b)]
    params = list(model.parameters())  # (weight, bias) per layer: start's order
    opt = torch.optim.Adam(params, lr=LR, eps=1e-7)
    restart_torch_training(params, opt, start)
    x = torch.tensor(X, device=dev)
    y = torch.tensor(Y, device=dev)
    if backend == "inductor":
        compiled = torch.compile(model, mode="reduce-overhead")
        opt_step = torch.compile(opt.step)
    else:
        compiled = torch.compile(model, backend=backend)
        opt_step = torch.compile(opt.step, backend=backend)

    def step() -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        opt_step()
        return loss.detach()

    t0 = time.perf_counter()
    for _ in range(3):
        float(step())
    print(f"gpu_bench: torch.compile ({backend}) built in {time.perf_counter() - t0:.1f} s", flush=True)
    restart_torch_training(params, opt, start)
    _COMPILED[key] = (step, params, opt, start)
    return step


_COMPILED: dict[tuple, tuple] = {}
SKIPPED: dict[str, str] = {}  # peers that could not be built here: name -> why
COMPILE_BUDGET_S = 45  # gpu_check.sh gives the whole bench 150 s


def add_peer(
    systems: dict[str, Callable[[], Any]],
    name: str,
    make: Callable[[], Callable[[], Any]],
    budget_s: float | None = None,
) -> None:
    """``systems[name] = make()``; a peer that cannot be built here (or, with ``budget_s``, not
    within that many seconds: a SIGALRM stops it, POSIX main thread only) is skipped with the
    reason, printed and kept in :data:`SKIPPED`, never fatal."""
    timed = (
        budget_s is not None and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )

    def over(signum: int, frame: Any) -> None:
        raise TimeoutError(f"not built within {budget_s} s")

    old = signal.signal(signal.SIGALRM, over) if timed else None
    if timed:
        signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        systems[name] = make()
    except Exception as exc:
        text = str(exc).strip()
        SKIPPED[name] = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        print(f"gpu_bench: skipped {name}: {SKIPPED[name]}", file=sys.stderr, flush=True)
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def mlp_systems(device: str, batch: int) -> dict[str, Callable[[], Any]]:
    """Every system's step from the same data and weights: numpy (CPU) and gputape (CPU)
    always; gputape and PyTorch on ``device`` when it is a GPU; PyTorch on the CPU otherwise."""
    X, Y, init = mlp_data(batch)
    out: dict[str, Callable[[], Any]] = {
        "numpy by hand (CPU)": numpy_mlp(X, Y, init),
        "gputape (CPU)": gputape_mlp(X, Y, init, "cpu", fused=False),
    }
    out["gputape compiled (CPU)"] = gputape_mlp(X, Y, init, "cpu", fused=False, compiled=True)
    if device != "cpu":
        out[f"gputape ({device}, gt.optim.Adam)"] = gputape_mlp(X, Y, init, device, fused=False)
        out[f"gputape ({device}, gt.optim.Adam, backward graph on)"] = with_backward_graphs(
            gputape_mlp(X, Y, init, device, fused=False)
        )
        out[f"gputape compiled ({device}, no graphs)"] = gputape_mlp(X, Y, init, device, fused=False, compiled=False)
        out[f"gputape compiled ({device}, graphs, GEMMs between)"] = gputape_mlp(
            X, Y, init, device, fused=False, compiled=True, capture_gemm=False
        )
        out[f"gputape compiled ({device}, CUDA graphs)"] = gputape_mlp(X, Y, init, device, fused=False, compiled=True)
        out[f"gputape compiled ({device}, CUDA graphs, optimizer in the graph)"] = gputape_mlp(
            X, Y, init, device, fused=False, compiled=True, optimizer_in_graph=True
        )
        out[f"gputape ({device}, fused Adam)"] = gputape_mlp(X, Y, init, device, fused=True)
    try:
        import torch
    except ImportError:
        return out
    if device == "cpu":
        out["torch eager (CPU)"] = torch_mlp(X, Y, init, "cpu", fused=False)
    elif torch.cuda.is_available():
        out[f"torch eager ({device}, Adam foreach)"] = torch_mlp(X, Y, init, device, fused=False)
        out[f"torch eager ({device}, Adam fused)"] = torch_mlp(X, Y, init, device, fused=True)
        add_peer(out, f"torch CUDA graph ({device}, capturable Adam)", lambda: torch_graphed_mlp(X, Y, init, device))
        add_peer(
            out,
            f"torch.compile reduce-overhead ({device}, compiled Adam)",
            lambda: torch_compiled_mlp(X, Y, init, device),
            COMPILE_BUDGET_S,
        )
    return out


def losses_after(systems: dict[str, Callable[[], Any]], steps: int) -> dict[str, list[float]]:
    """Each system's loss at each of the first ``steps`` steps (fresh systems: same start)."""
    return {name: [float(fn()) for _ in range(steps)] for name, fn in systems.items()}


def mlp_bench(cp: Any, device: str, batch: int) -> dict[str, Any]:
    check = losses_after(mlp_systems(device, batch), 5)
    systems = mlp_systems(device, batch)
    torch_sync: Callable[[], None] = lambda: None
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            torch_sync = torch.cuda.synchronize

    def sync() -> None:
        cp.cuda.Device().synchronize()
        torch_sync()

    rows = []
    for name, fn in systems.items():
        reps = 5 if "CPU" in name else 50
        t = time_wall(fn, sync, reps)
        row = {"system": name, "ms_per_step": t * 1e3, "losses_first_5_steps": check[name]}
        if "compiled" in name and "CPU" not in name:
            # host time alone (no synchronisation inside): near the wall time = launch-bound
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            row["host_ms_per_step"] = (time.perf_counter() - t0) / reps * 1e3
            sync()
            print(f"  {name}: host {row['host_ms_per_step']:.3f} ms/step of {t * 1e3:.3f} ms wall", flush=True)
        rows.append(row)
    plans = [f.graph_report for f in FUNCTIONS if isinstance(f, gt.Function) and f.graph_report]
    for p in plans[-1:]:
        print(f"CUDA-graph plan of the compiled step: {p}", flush=True)
    return {
        "batch": batch,
        "layers": [D, H, H, C],
        "optimizer": "Adam",
        "rows": rows,
        "graph_plans": plans,
        "skipped_peers": dict(SKIPPED),
    }


# -- 3. the 100-link elementwise chain's gradient -----------------------------------------------


def chain_bench(cp: Any, device: str, sizes: tuple[int, ...] = (16, 1 << 20)) -> list[dict[str, Any]]:
    """d sum(chain(x)) / dx: eager, compiled (CUDA graphs) with and without the fused backward,
    and PyTorch CUDA eager; ms per gradient and the largest difference from gputape eager."""
    from benchmarks.workloads import chain_data, gputape_chain_grad, make_torch_chain

    rows = []
    for n in sizes:
        x0 = chain_data(n)
        x = gt.constant(backend.to_device(x0, device))
        systems: dict[str, Callable[[], Any]] = {"gputape eager": lambda x=x: gputape_chain_grad(x)}
        systems["gputape eager, backward graph on"] = with_backward_graphs(lambda x=x: gputape_chain_grad(x))
        for fuse in (False, True):
            f = gt.function(gputape_chain_grad, fuse=fuse)
            systems[f"gputape compiled, graphs{', fused backward' if fuse else ''}"] = lambda f=f, x=x: f(x)
        try:
            import torch

            if torch.cuda.is_available():
                systems["torch eager"] = make_torch_chain(x0, device).fn
        except ImportError:
            pass
        want = cp.asnumpy(systems["gputape eager"]()._data)

        def sync() -> None:
            cp.cuda.Device().synchronize()
            with contextlib.suppress(ImportError):
                import torch

                torch.cuda.synchronize()

        for name, fn in systems.items():
            out = fn()
            got = out.detach().cpu().numpy() if hasattr(out, "detach") else cp.asnumpy(out._data)
            t = time_wall(fn, sync, reps=20)
            rows.append({"n": n, "system": name, "ms": t * 1e3, "max_abs_diff": float(np.max(np.abs(got - want)))})
            print(
                f"  chain N={n:<8d} {name:44s} {t * 1e3:8.3f} ms  max|diff| {rows[-1]['max_abs_diff']:.1e}", flush=True
            )
    return rows


# -- main -------------------------------------------------------------------------------------------


def _fmt_table(bw: list[dict[str, Any]], mlp: dict[str, Any]) -> str:
    lines = ["", "== bandwidth (float32; GB/s counts bytes read + written; fraction of the best copy)"]
    by_name = {r["name"]: r for r in bw}
    for r in bw:
        extra = ""
        if r["baseline_of"]:
            fused = by_name[r["baseline_of"]]
            extra = f"   (fused is {r['ms'] / fused['ms']:.2f}x faster)"
        pct = 100 * r["fraction_of_copy"]
        lines.append(f"  {r['name']:48s} {r['ms']:9.3f} ms {r['GB/s']:8.0f} GB/s {pct:6.1f}%{extra}")
    lines.append(f"\n== MLP {'-'.join(map(str, mlp['layers']))} step, batch {mlp['batch']}, {mlp['optimizer']}")
    rows = mlp["rows"]
    ref = next((r for r in rows if "torch" in r["system"] and "foreach" in r["system"]), None)
    for r in rows:
        rel = f"  ({r['ms_per_step'] / ref['ms_per_step']:.2f}x torch foreach)" if ref else ""
        losses = " ".join(f"{v:.5f}" for v in r["losses_first_5_steps"])
        lines.append(f"  {r['system']:40s} {r['ms_per_step']:9.3f} ms/step{rel}   losses {losses}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the results as JSON here")
    ap.add_argument("--elements", type=int, default=1 << 25, help="elements per array (default 2**25)")
    ap.add_argument("--batch", type=int, default=1024, help="MLP batch (default 1024)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--no-bandwidth", action="store_true", help="skip the bandwidth section")
    args = ap.parse_args(argv)
    why = backend.cuda_unavailable_reason(args.device)
    if why is not None:
        print(f"gpu_bench: FAILED: no usable GPU ({args.device}): {why}", file=sys.stderr)
        print("gpu_bench: these benchmarks measure a GPU; nothing was measured.", file=sys.stderr)
        return 2
    cp = backend.cupy_module()
    with cp.cuda.Device(backend.device_index(args.device)):
        props = backend.device_properties(backend.device_index(args.device))
        print(f"gpu_bench on {args.device}: {props}", flush=True)
        t0 = time.perf_counter()
        K.compile_all(backend.device_index(args.device))
        print(f"compiled every kernel in {time.perf_counter() - t0:.1f} s", flush=True)
        bw = [] if args.no_bandwidth else bandwidth(cp, args.elements)
        gt.empty_cache(args.device)
        mlp = mlp_bench(cp, args.device, args.batch)
        print("\n== 100-link elementwise chain, gradient", flush=True)
        chain = chain_bench(cp, args.device)
        graphs = gt.debug.backward_cache_report()["graphs"]
        print(f"\n== eager tapes' backward as CUDA graphs: {graphs}", flush=True)
    result = {
        "device": props,
        "versions": backend.versions(),
        "elements": args.elements,
        "bandwidth": bw,
        "mlp": mlp,
        "chain": chain,
        "backward_graphs": graphs,
    }
    print(_fmt_table(bw, mlp), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
