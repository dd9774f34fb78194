"""Side-by-side timing of gputape, hand-written numpy and the installed peers, interleaved.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.compare [--quick]

Each round runs every (workload, system) pair for a block of ``n`` calls (``n`` calibrated
once so a block takes about ``--block-ms``), systems in a rotating order, so slow drifts of
a noisy machine hit all systems alike. Per pair we report the median over rounds of the
per-call time; the ratio to numpy is the median over rounds of the paired ratio
``t_system[r] / t_numpy[r]``. Prints a markdown table with the machine and the versions.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from resource import RUSAGE_CHILDREN, RUSAGE_SELF
from typing import Any

import numpy as np

from benchmarks import workloads as wk

TARGETS = {"mlp": 1.15, "chain": 2.0}  # gputape / numpy, upper bounds


# -- machine and versions ------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gputape_source() -> str:
    """Where gputape was imported from, with its git commit (and '+dirty') when in a checkout."""
    import gputape

    pkg = Path(gputape.__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(pkg), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return str(pkg)
        dirty = subprocess.run(
            ["git", "-C", str(pkg), "status", "--porcelain", "--", "."], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        return f"{pkg} @ {rev.stdout.strip()}{' +uncommitted changes' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return str(pkg)


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    parts = []
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            parts.append(
                f"{info.get('internal_api')} {info.get('version')} kernel={info.get('architecture')} "
                f"threads={info.get('num_threads')}"
            )
    return "; ".join(parts) or "no BLAS found"


def environment(systems: list[str]) -> list[str]:
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count()
    lines = [
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores ({ncpu} usable), {platform.system()} "
        f"{platform.machine()}",
        f"- python {platform.python_version()}, "
        + ", ".join(f"{s} {wk.version_of(s)}" for s in systems if wk.version_of(s)),
        f"- gputape from {gputape_source()}",
        f"- BLAS: {blas_info()}",
    ]
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    lines.append(
        f"- OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE: {env if env else 'unset'}"
        + (" (they slow current numpy: unset both for this command to measure)" if env else "")
    )
    return lines


@contextlib.contextmanager
def limit_threads(n: int | None) -> Iterator[None]:
    """Run with at most ``n`` BLAS/OpenMP threads (and ``n`` torch threads); no-op for None."""
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    wk.THREADS = n  # peers built from now on take it (torch.set_num_threads)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        wk.THREADS = None


def cpu_busy() -> tuple[float, float] | None:
    """(seconds all cores were busy, seconds this process and its reaped children ran), for a noise estimate."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        vals = [int(v) for v in fields[:8]]
        busy = (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait
    except (OSError, ValueError):
        return None
    own = sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime for w in (RUSAGE_SELF, RUSAGE_CHILDREN))
    return busy, own


# -- timing ----------------------------------------------------------------------------------

# Peers whose own thread pool fights numpy's OpenBLAS pool when both live in one process (on
# 2 cores, PyTorch's OpenMP workers next to OpenBLAS's made numpy's 2 ms step take 20-90 ms).
# They run in a worker process of their own; numpy, gputape and autograd share the main one.
ISOLATED = frozenset({"torch"})


def calibrate(fn: Any, block_s: float, warm: int) -> int:
    """Warm up, then the number of calls that takes about ``block_s``."""
    for _ in range(warm):
        fn()
    reps, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - t0
        if t >= block_s / 4 or reps >= 4096:
            break
        reps *= 2
    return max(1, min(4096, round(block_s * reps / t)))


def timed_block(fn: Any, n: int) -> float:
    """Seconds per call over ``n`` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


class Local:
    """A system timed in this process."""

    def __init__(self, step: wk.Step) -> None:
        self.fn = step.fn
        self.n = 1

    def calibrate(self, block_s: float, warm: int) -> None:
        self.n = calibrate(self.fn, block_s, warm)

    def block(self) -> float:
        return timed_block(self.fn, self.n)

    def close(self) -> None:
        pass


def _worker(conn: Any, workload: str, system: str, size: int | None, threads: int | None) -> None:
    with limit_threads(threads):
        step = wk.build(workload, system, wk.make_data(workload, size))
        conn.send(step is not None)
        if step is None:
            return
        n = 1
        while True:
            msg = conn.recv()
            if msg[0] == "calibrate":
                n = calibrate(step.fn, msg[1], msg[2])
                conn.send(n)
            elif msg[0] == "block":
                conn.send(timed_block(step.fn, n))
            else:
                return


class Remote:
    """A system timed in a worker process (spawned: no thread pools inherited); it times its own blocks."""

    def __init__(self, workload: str, system: str, size: int | None, threads: int | None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, workload, system, size, threads), daemon=True)
        self.proc.start()
        self.ok = bool(self.conn.recv())

    def calibrate(self, block_s: float, warm: int) -> None:
        self.conn.send(("calibrate", block_s, warm))
        self.conn.recv()

    def block(self) -> float:
        self.conn.send(("block",))
        return self.conn.recv()

    def close(self) -> None:
        if self.proc.is_alive():
            if self.ok:
                self.conn.send(("stop",))
            self.proc.join(timeout=10)


def run(
    workloads: list[str],
    systems: list[str],
    rounds: int,
    block_s: float,
    warm: int,
    batch: int | None,
    threads: int | None = None,
    isolate: frozenset[str] = ISOLATED,
) -> dict[tuple[str, str], list[float]]:
    runners: dict[tuple[str, str], Local | Remote] = {}
    try:
        for wl in workloads:
            size = batch if wl == "mlp" else None
            data = wk.make_data(wl, size)
            for s in systems:
                if not wk.peer_available(s):
                    print(f"# skipping {s}: not installed", file=sys.stderr)
                    continue
                if s in isolate:
                    runners[wl, s] = Remote(wl, s, size, threads)
                else:
                    step = wk.build(wl, s, data)
                    assert step is not None
                    runners[wl, s] = Local(step)
        for r in runners.values():
            r.calibrate(block_s, warm)
        times: dict[tuple[str, str], list[float]] = {key: [] for key in runners}
        for r in range(rounds):
            for wl in workloads:
                present = [s for s in systems if (wl, s) in runners]
                k = r % len(present)
                for s in present[k:] + present[:k]:  # rotate who goes first each round
                    times[wl, s].append(runners[wl, s].block())
            print(f"# round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        for runner in runners.values():
            runner.close()
    return times


# -- report ----------------------------------------------------------------------------------


def _fmt(t: float) -> str:
    return f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} µs"


def table(times: dict[tuple[str, str], list[float]], workloads: list[str], systems: list[str], batch: int) -> str:
    rows = [
        "| workload | system | median per call | IQR | ratio to numpy (paired median) | target (gputape/numpy) |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for wl in workloads:
        label = f"MLP SGD step, B={batch}" if wl == "mlp" else f"chain {wk.K} links, N={wk.N_DEFAULT}"
        base = times.get((wl, "numpy"))
        for s in systems:
            ts = times.get((wl, s))
            if not ts:
                continue
            med = statistics.median(ts)
            q = np.percentile(ts, [25, 75])
            extra = f" ({med / wk.K * 1e6:.1f} µs/link)" if wl == "chain" else ""
            ratio, target = "", ""
            if base:
                rr = statistics.median(t / b for t, b in zip(ts, base))
                ratio = f"{rr:.2f}x"
                if s == "gputape":
                    ok = rr <= TARGETS[wl]
                    target = f"<= {TARGETS[wl]:.2f}: {'met' if ok else 'NOT met'}"
            rows.append(f"| {label} | {s} | {_fmt(med)}{extra} | {_fmt(q[1] - q[0])} | {ratio} | {target} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds of ~40 ms blocks (a smoke run, ~10 s)")
    ap.add_argument("--rounds", type=int, help="rounds per (workload, system) (default 15; 5 with --quick)")
    ap.add_argument("--block-ms", type=float, help="target duration of one timed block (default 150; 40 with --quick)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls per system before calibrating")
    ap.add_argument("--batch", type=int, default=wk.B_DEFAULT, help="MLP batch size (default 128)")
    ap.add_argument("--workloads", nargs="+", choices=wk.WORKLOADS, default=list(wk.WORKLOADS))
    ap.add_argument("--systems", nargs="+", choices=wk.SYSTEMS, default=list(wk.SYSTEMS))
    ap.add_argument(
        "--threads",
        type=int,
        help="limit BLAS/OpenMP threads (threadpoolctl) and torch's to N for every system (default: libraries' own)",
    )
    ap.add_argument(
        "--one-process",
        action="store_true",
        help=f"time {', '.join(sorted(ISOLATED))} in this process too (default: in a worker process of its own)",
    )
    ap.add_argument("--out", type=Path, help="also write the markdown report to this file")
    args = ap.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    block_s = (args.block_ms or (40.0 if args.quick else 150.0)) / 1e3
    systems = ["numpy"] + [s for s in args.systems if s != "numpy"]  # numpy is the baseline

    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpu0 = cpu_busy()
    t0 = time.perf_counter()
    isolate = frozenset() if args.one_process else ISOLATED
    with limit_threads(args.threads):
        times = run(args.workloads, systems, rounds, block_s, args.warmup, args.batch, args.threads, isolate)
        env_lines = environment(systems)  # inside the limit, so the BLAS line shows it
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpu1 = cpu_busy()
    others, share = "", 0.0
    if cpu0 and cpu1:
        share = max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / (wall * (os.cpu_count() or 1))
        others = f", other processes kept {share:.0%} of the cores busy"

    report = "\n".join(
        [
            f"## gputape vs hand-written numpy ({rounds} interleaved rounds, ~{block_s * 1e3:.0f} ms blocks)",
            "",
            *env_lines,
            f"- run: {time.strftime('%Y-%m-%d %H:%M')}, {wall:.0f} s, "
            f"1-min load average {load0:.2f} -> {load1:.2f}{others}; "
            + (
                f"{', '.join(sorted(isolate & set(systems)))} timed in a worker process of its own"
                if isolate & set(systems)
                else "all systems in one process"
            ),
            *(
                [
                    f"- WARNING: other processes kept {share:.0%} of the cores busy during the run; with "
                    "multi-threaded BLAS that distorts the MLP timings badly (rerun on a quiet machine, or --threads 1)"
                ]
                if share >= 0.10
                else []
            ),
            "",
            table(times, args.workloads, systems, args.batch),
            "",
        ]
    )
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
