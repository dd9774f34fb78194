"""Where gputape's time goes on the benchmark workloads.

    python -m benchmarks.profile_gputape [--workload mlp|chain|both] [--steps N] [--top K]

Three views per workload:

1. **Phases**, timed without a profiler (medians over steps): the forward under the tape
   (the ops and their recording), ``tape.gradient`` (the backward sweep) and, for the MLP,
   the optimizer update (``gt.optim.SGD.apply_gradients``); beside the same phases of the
   hand-written numpy version, so the difference is gputape's overhead per phase.
2. **Primitives**: time inside each primitive's forward and VJP (the array work), and what
   is left outside them (gputape's own Python), from timers wrapped around every
   ``gt.REGISTRY`` entry while measuring.
3. **cProfile**, top functions by own time (``tottime``) with their share of the profiled
   total. cProfile adds a roughly constant cost per Python call, so it exaggerates the share
   of small, frequently called functions; use it to rank, and the phases for absolute times.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import gputape as gt
from benchmarks import workloads as wk
from benchmarks.compare import cpu_busy

PROFILED = ("mlp", "chain")  # the workloads with phase breakdowns below

# -- phase timing ---------------------------------------------------------------------------


def _phases_gputape_mlp(data: wk.MLPData) -> Callable[[], dict[str, float]]:
    x = gt.constant(data.X)
    y = data.Y
    params = [gt.Variable(a, name=n) for a, n in zip(data.init, wk.PARAM_NAMES)]
    opt = gt.optim.SGD(wk.LR)
    w1, b1, w2, b2, w3, b3 = params
    B = data.B
    pc = time.perf_counter

    def step() -> dict[str, float]:
        t0 = pc()
        with gt.GradientTape() as tape:
            h = gt.nn.relu(x @ w1 + b1)
            h = gt.nn.relu(h @ w2 + b2)
            logp = gt.nn.log_softmax(h @ w3 + b3)
            loss = -gt.mean(logp[np.arange(B), y])
        t1 = pc()
        grads = tape.gradient(loss, params)
        t2 = pc()
        opt.apply_gradients(zip(grads, params))  # as workloads.gputape_mlp_train_step
        t3 = pc()
        return {"forward (+ recording)": t1 - t0, "gradient (backward sweep)": t2 - t1, "update": t3 - t2}

    return step


def _phases_numpy_mlp(data: wk.MLPData) -> Callable[[], dict[str, float]]:
    X, Y, Yoh = data.X, data.Y, data.Yoh
    p = [a.copy() for a in data.init]
    pc = time.perf_counter

    def step() -> dict[str, float]:
        t0 = pc()
        _, cache = wk.numpy_mlp_forward(X, Y, p)
        t1 = pc()
        grads = wk.numpy_mlp_backward(Yoh, cache)
        t2 = pc()
        for a, g in zip(p, grads):
            a -= wk.LR * g
        t3 = pc()
        return {"forward (+ recording)": t1 - t0, "gradient (backward sweep)": t2 - t1, "update": t3 - t2}

    return step


def _phases_gputape_chain(x0: np.ndarray) -> Callable[[], dict[str, float]]:
    x = gt.constant(x0)
    pc = time.perf_counter

    def step() -> dict[str, float]:
        t0 = pc()
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = x
            for i in range(wk.K):
                y = gt.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
            s = gt.sum(y)
        t1 = pc()
        tape.gradient(s, x)
        t2 = pc()
        return {"forward (+ recording)": t1 - t0, "gradient (backward sweep)": t2 - t1}

    return step


def _phases_numpy_chain(x0: np.ndarray) -> Callable[[], dict[str, float]]:
    pc = time.perf_counter

    def step() -> dict[str, float]:
        t0 = pc()
        y = x0
        saved = []
        for i in range(wk.K):
            saved.append(y)
            y = np.tanh(y) * 1.01 if i % 2 else y * y * 0.5 + 0.1
        t1 = pc()
        g = np.ones_like(y)
        for i in reversed(range(wk.K)):
            s = saved[i]
            g = g * (1 - np.tanh(s) ** 2) * 1.01 if i % 2 else g * s
        t2 = pc()
        return {"forward (+ recording)": t1 - t0, "gradient (backward sweep)": t2 - t1}

    return step


def phase_table(workload: str, steps: int, rounds: int = 5) -> str:
    data = wk.make_data(workload)
    makers = {
        "mlp": (_phases_numpy_mlp, _phases_gputape_mlp),
        "chain": (_phases_numpy_chain, _phases_gputape_chain),
    }[workload]
    fns = {"numpy": makers[0](data), "gputape": makers[1](data)}
    samples: dict[str, dict[str, list[float]]] = {s: {} for s in fns}
    for f in fns.values():
        for _ in range(5):
            f()
    per_round = max(1, steps // rounds)
    for _ in range(rounds):  # interleave the two systems in blocks
        for s, f in fns.items():
            for _ in range(per_round):
                for k, v in f().items():
                    samples[s].setdefault(k, []).append(v)
    rows = [
        "| phase | numpy by hand | gputape | gputape - numpy |",
        "| --- | ---: | ---: | ---: |",
    ]
    tot = {"numpy": 0.0, "gputape": 0.0}
    for k in samples["gputape"]:
        m = {s: statistics.median(samples[s][k]) for s in fns}
        for s in fns:
            tot[s] += m[s]
        rows.append(f"| {k} | {_us(m['numpy'])} | {_us(m['gputape'])} | {_us(m['gputape'] - m['numpy'])} |")
    rows.append(
        f"| sum of medians | {_us(tot['numpy'])} | {_us(tot['gputape'])} | {_us(tot['gputape'] - tot['numpy'])} |"
    )
    return "\n".join(rows)


def _us(t: float) -> str:
    return f"{t * 1e6:,.0f} µs"


# -- per primitive ------------------------------------------------------------------------------


def primitive_table(workload: str, steps: int) -> str:
    """Time inside each primitive's forward and VJP (the array work) against the whole step.

    Wraps every ``gt.REGISTRY`` primitive's ``fwd``/``cpu``/``vjp`` with a timer for the
    duration of the measurement (restored afterwards); what is not inside a primitive is
    gputape's own Python: ``apply``/recording, the sweep's bookkeeping, wrapping, the
    optimizer update. The timers add about a microsecond per call, counted as "inside".
    """
    step = wk.build(workload, "gputape")
    assert step is not None
    fn = step.fn
    for _ in range(5):
        fn()
    pc = time.perf_counter
    acc: dict[tuple[str, str], list[float]] = {}

    def timed(name: str, kind: str, f: Callable[..., Any]) -> Callable[..., Any]:
        cell = acc.setdefault((name, kind), [0, 0.0])

        def w(*a: Any, **k: Any) -> Any:
            t = pc()
            try:
                return f(*a, **k)
            finally:
                cell[0] += 1
                cell[1] += pc() - t

        return w

    # ``cpu`` (where a version has it) is a C-level forward that the CPU fast path calls instead of fwd.
    originals = [(prim, prim.fwd, prim.vjp, getattr(prim, "cpu", None)) for prim in gt.REGISTRY.values()]
    try:
        for prim, fwd, vjp, cpu in originals:
            prim.fwd = timed(prim.name, "fwd", fwd)
            if vjp is not None:
                prim.vjp = timed(prim.name, "vjp", vjp)
            if cpu is not None:
                prim.cpu = timed(prim.name, "fwd", cpu)
        fn()
        for cell in acc.values():
            cell[:] = [0, 0.0]
        t0 = pc()
        for _ in range(steps):
            fn()
        total = (pc() - t0) / steps
    finally:
        for prim, fwd, vjp, cpu in originals:
            prim.fwd, prim.vjp = fwd, vjp
            if cpu is not None:
                prim.cpu = cpu

    def spent(n: str) -> float:
        return acc.get((n, "fwd"), [0, 0.0])[1] + acc.get((n, "vjp"), [0, 0.0])[1]

    names = sorted({n for n, _ in acc}, key=spent, reverse=True)
    rows = ["| primitive | calls/step | forward | VJP |", "| --- | ---: | ---: | ---: |"]
    inside = 0.0
    for n in names:
        f = acc.get((n, "fwd"), [0, 0.0])
        v = acc.get((n, "vjp"), [0, 0.0])
        if not f[0] and not v[0]:
            continue
        inside += f[1] + v[1]
        rows.append(f"| {n} | {f[0] / steps:g} | {_us(f[1] / steps)} | {_us(v[1] / steps)} |")
    inside /= steps
    rows.append(f"| **inside primitives (array work)** | | {_us(inside)} ({inside / total:.0%}) | |")
    rows.append(
        f"| **outside (gputape's Python, updates)** | | {_us(total - inside)} ({(total - inside) / total:.0%}) | |"
    )
    rows.append(f"| **step (timers on)** | | {_us(total)} | |")
    return "\n".join(rows)


# -- cProfile ---------------------------------------------------------------------------------


def _where(fn: tuple[str, int, str]) -> str:
    file, line, name = fn
    if file == "~":  # a builtin or C function
        return name.strip("<>")
    p = Path(file)
    parts = p.parts
    if "gputape" in parts:
        rel = "/".join(parts[parts.index("gputape") :])
    elif "benchmarks" in parts:
        rel = "/".join(parts[parts.index("benchmarks") :])
    else:
        rel = p.name
    return f"{rel}:{line}({name})"


def profile_table(workload: str, steps: int, top: int) -> str:
    step = wk.build(workload, "gputape")
    assert step is not None
    fn = step.fn
    for _ in range(5):
        fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        fn()
    prof.disable()
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    entries: list[tuple[float, int, float, Any]] = []
    for func, (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        entries.append((tt, nc, ct, func))
    entries.sort(key=lambda e: e[0], reverse=True)
    rows = [
        f"profiled {steps} steps: {total / steps * 1e3:.3f} ms/step under cProfile",
        "",
        "| function | calls/step | tottime/step | share | cumtime/step |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for tt, nc, ct, func in entries[:top]:
        rows.append(f"| `{_where(func)}` | {nc / steps:g} | {_us(tt / steps)} | {tt / total:.1%} | {_us(ct / steps)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_gputape", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=[*PROFILED, "both"], default="both")
    ap.add_argument("--steps", type=int, default=200, help="steps per view (default 200)")
    ap.add_argument("--top", type=int, default=15, help="rows of the cProfile table (default 15)")
    args = ap.parse_args(argv)
    for wl in PROFILED if args.workload == "both" else [args.workload]:
        cpu0, t0 = cpu_busy(), time.perf_counter()
        phases = phase_table(wl, args.steps)
        prims = primitive_table(wl, args.steps)
        cpu1, wall = cpu_busy(), time.perf_counter() - t0
        noise = ""
        if cpu0 and cpu1:
            share = max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / (wall * (os.cpu_count() or 1))
            noise = f" (other processes kept {share:.0%} of the cores busy meanwhile)"
        print(f"### {wl}: phases (medians, interleaved with numpy){noise}\n")
        print(phases)
        print(f"\n### {wl}: time inside gputape's primitives (timers on each fwd/VJP)\n")
        print(prims)
        print(f"\n### {wl}: gputape under cProfile, top {args.top} by own time\n")
        print(profile_table(wl, args.steps, args.top))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
