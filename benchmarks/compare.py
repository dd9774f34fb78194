"""Side-by-side timing of gputape (eager and ``gt.function``), hand-written numpy and the installed
peers (PyTorch eager, HIPS autograd, JAX jit), interleaved in one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.compare [--quick]

Workloads (``benchmarks/workloads.py``): the MLP SGD step at batch 32, 128 and 1024, the
100-link elementwise chain, the Jacobian of a 64->64 tanh layer, and the peak memory of an
MLP step. Each round runs every (workload, system) pair for a block of ``n`` calls (``n``
calibrated once so a block takes about ``--block-ms``), systems in a rotating order, so slow
drifts of a noisy machine hit all systems alike. Per pair we report the median over rounds
of the per-call time; a ratio between two systems is the median over rounds of the paired
ratio ``t_a[r] / t_b[r]``. Before timing, every system's first result is checked against
numpy's. Prints markdown tables (medians and ratios, gputape's CPU targets, peak memory) with
the machine and the versions; ``--markdown FILE`` also writes them to a file.
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
import traceback
from collections.abc import Iterator
from pathlib import Path
from resource import RUSAGE_CHILDREN, RUSAGE_SELF
from typing import Any

import numpy as np

from benchmarks import workloads as wk

# A case is one timed row: (workload, size); size is the MLP batch, None for the others.
Case = tuple[str, int | None]

LABELS = {
    "numpy": "numpy (by hand)",
    "gputape": "gputape eager",
    "onehot": "gputape eager, one-hot + assign_sub",
    "compiled": "gputape gt.function",
    "torch": "PyTorch eager",
    "autograd": "HIPS autograd",
    "jax": "JAX jit",
}


def case_label(case: Case) -> str:
    wl, size = case
    if wl == "mlp":
        return f"MLP SGD step, B={size}"
    if wl == "chain":
        return f"chain {wk.K} links, N={wk.N_DEFAULT}"
    return f"jacobian {wk.JAC_N}->{wk.JAC_N} tanh"


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
    """The BLAS numpy was built with (``numpy.show_config``) and, from threadpoolctl, the one running."""
    parts = []
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # numpy >= 2
        parts.append(f"numpy built with {cfg.get('name')} {cfg.get('version')}")
    except Exception:  # older numpy prints its config instead of returning it; the runtime line suffices
        pass
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "; ".join(parts + ["threadpoolctl not installed (no runtime BLAS line)"])
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            parts.append(
                f"running {info.get('internal_api')} {info.get('version')} kernel={info.get('architecture')} "
                f"threads={info.get('num_threads')}"
            )
    return "; ".join(parts) or "no BLAS found"


def versions(systems: list[str]) -> str:
    out = []
    for s in systems:
        if s == "compiled":
            continue  # gputape's
        v = wk.version_of(s)
        if v:
            out.append(f"{s} {v}")
        if s == "jax" and v:
            from importlib.metadata import PackageNotFoundError, version

            with contextlib.suppress(PackageNotFoundError):
                out.append(f"jaxlib {version('jaxlib')}")
    return ", ".join(out)


def environment(systems: list[str], peer_info: dict[str, str]) -> list[str]:
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count()
    lines = [
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores ({ncpu} usable), {platform.system()} "
        f"{platform.machine()}",
        f"- python {platform.python_version()}, {versions(systems)}",
        f"- gputape from {gputape_source()}",
        f"- BLAS: {blas_info()}",
        *(f"- {s}: {info}" for s, info in peer_info.items()),
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
# 2 cores, PyTorch's OpenMP workers next to OpenBLAS's made numpy's 2 ms step take 20-90 ms;
# XLA keeps an Eigen pool of its own). Each runs all its workloads in one worker process of
# its own; numpy, gputape and autograd share the main one, as a user's would.
ISOLATED = frozenset({"torch", "jax"})

# OpenBLAS's idle threads busy-wait for about 0.1 s after the last BLAS call (2**28 cycles,
# its default thread timeout) before they sleep. A worker's block that starts right after a
# block in this process shares the cores with that spinning thread: measured here, torch's
# B=128 step took 3.2 ms right after a numpy block and 2.0 ms after a 0.2 s pause (jax's
# 2.8 vs 2.4 ms); the other way round (numpy after torch or jax) there was no difference.
# So the rounds pause this long before handing over from this process to a worker.
SETTLE_S = 0.2


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

    def first(self) -> list[np.ndarray]:
        return [wk.to_numpy(self.fn()) for _ in range(CHECKED_CALLS)]

    def calibrate(self, block_s: float, warm: int) -> None:
        self.n = calibrate(self.fn, block_s, warm)

    def block(self) -> float:
        return timed_block(self.fn, self.n)


def _peer_info(system: str) -> str:
    """How a peer runs here (threads, backend), reported from inside its worker."""
    if system == "torch":
        import torch

        return f"{torch.get_num_threads()} intra-op threads, in a worker process"
    if system == "jax":
        import jax

        return f"backend {jax.default_backend()}, devices {jax.devices()}, in a worker process"
    return ""


def _worker(conn: Any, system: str, threads: int | None) -> None:
    """One isolated system, all its cases: answers the Host's messages until told to stop."""
    if system == "jax" and threads == 1:
        # XLA's CPU client reads this at startup: no Eigen pool for single-threaded runs.
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        )
    with limit_threads(threads):
        steps: dict[Case, wk.Step] = {}
        n: dict[Case, int] = {}
        while True:
            msg = conn.recv()
            try:
                if msg[0] == "build":
                    case = msg[1]
                    steps[case] = wk.build(case[0], system, wk.make_data(*case), strict=True)
                    conn.send(("ok", [wk.to_numpy(steps[case].fn()) for _ in range(CHECKED_CALLS)]))
                elif msg[0] == "calibrate":
                    n[msg[1]] = calibrate(steps[msg[1]].fn, msg[2], msg[3])
                    conn.send(("ok", n[msg[1]]))
                elif msg[0] == "block":
                    conn.send(("ok", timed_block(steps[msg[1]].fn, n[msg[1]])))
                elif msg[0] == "memory":
                    case = msg[1]
                    conn.send(("ok", wk.measure_memory(case[0], system, wk.make_data(*case))))
                elif msg[0] == "info":
                    conn.send(("ok", _peer_info(system)))
                else:
                    return
            except wk.UnavailableError as e:
                conn.send(("unavailable", str(e)))
            except Exception as e:  # report it in the table rather than kill a long run
                conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class Host:
    """A worker process (spawned: no thread pools inherited) for one system; it times its own blocks."""

    def __init__(self, system: str, threads: int | None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, system, threads), daemon=True)
        self.proc.start()

    def ask(self, *msg: Any) -> Any:
        try:
            self.conn.send(msg)
            kind, val = self.conn.recv()
        except (EOFError, OSError) as e:  # it died (a broken install can crash at import)
            raise wk.UnavailableError(f"its worker process died ({type(e).__name__}: {e})") from None
        if kind == "unavailable":
            raise wk.UnavailableError(val)
        if kind == "error":
            raise RuntimeError(val)
        return val

    def close(self) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(("stop",))
            self.proc.join(timeout=10)


class Remote:
    """One case of a :class:`Host`'s system, with the same interface as :class:`Local`."""

    def __init__(self, host: Host, case: Case) -> None:
        self.host, self.case = host, case
        self._first = host.ask("build", case)

    def first(self) -> list[np.ndarray]:
        return self._first

    def calibrate(self, block_s: float, warm: int) -> None:
        self.host.ask("calibrate", self.case, block_s, warm)

    def block(self) -> float:
        return self.host.ask("block", self.case)


# Results compared with numpy's before timing: the first two calls, so that for gt.function
# both the trace and a replay are checked (MLP steps: the losses before and after one update).
CHECKED_CALLS = 2


def _agrees(out: np.ndarray, ref: np.ndarray) -> str | None:
    """None when a system's result equals numpy's to float32 tolerance, else what differs."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        return f"result shape {out.shape}, numpy's {ref.shape}"
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    if not np.allclose(out, ref, rtol=2e-4, atol=1e-5 * scale):
        return f"result differs from numpy's (max abs diff {float(np.abs(out - ref).max()):.3g})"
    return None


class Results:
    """Everything a run measured: per-round times, memory, and notes on what could not run."""

    def __init__(self) -> None:
        self.times: dict[tuple[Case, str], list[float]] = {}
        self.memory: dict[tuple[Case, str], wk.Memory] = {}
        self.notes: dict[tuple[Case | None, str], str] = {}  # (case or None for all cases, system) -> why
        self.mem_notes: dict[tuple[Case, str], str] = {}  # (MLP case, system) -> why memory is missing
        self.wrong: dict[tuple[Case, str], str] = {}  # result check failures
        self.peer_info: dict[str, str] = {}


def _note(res: Results, case: Case | None, system: str, why: str) -> None:
    res.notes[case, system] = why
    print(f"# {system}, {case_label(case) if case else 'all workloads'}: {why}", file=sys.stderr, flush=True)


def run(
    cases: list[Case],
    systems: list[str],
    rounds: int,
    block_s: float,
    warm: int,
    threads: int | None = None,
    isolate: frozenset[str] = ISOLATED,
    memory_cases: list[Case] | None = None,
    settle_s: float = SETTLE_S,
) -> Results:
    """Build, check, calibrate and time every (case, system) in interleaved rounds, then measure memory."""
    res = Results()
    runners: dict[tuple[Case, str], Local | Remote] = {}
    hosts: dict[str, Host] = {}
    live = []
    for s in systems:
        if not wk.peer_installed(s):
            _note(res, None, s, f"not measured: {wk.PEER_MODULES[s]} is not installed")
        elif s == "compiled" and wk.compiled_reason():
            _note(res, None, s, f"not measured: {wk.compiled_reason()}")
        else:
            live.append(s)
    try:
        for s in live:
            if s in isolate:
                hosts[s] = Host(s, threads)
                with contextlib.suppress(wk.UnavailableError, RuntimeError):
                    res.peer_info[s] = hosts[s].ask("info")
        for case in cases:
            data = wk.make_data(*case)
            ref = None
            for s in live:
                try:
                    if s in hosts:
                        r: Local | Remote = Remote(hosts[s], case)
                    else:
                        step = wk.build(case[0], s, data, strict=True)
                        assert step is not None
                        r = Local(step)
                    first = r.first()  # the first calls: from the initial weights, as numpy's
                except wk.UnavailableError as e:
                    _note(res, case, s, f"not measured: {e}")
                    continue
                if s == "numpy":
                    ref = first
                elif ref is not None:
                    for i, (a, b) in enumerate(zip(first, ref)):
                        if why := _agrees(a, b):
                            res.wrong[case, s] = f"call {i + 1}: {why}"
                            print(f"# {s}, {case_label(case)}: WRONG RESULT: {why}", file=sys.stderr, flush=True)
                            break
                runners[case, s] = r
        for r in runners.values():
            r.calibrate(block_s, warm)
        res.times = {key: [] for key in runners}
        # This process's systems first, then the workers': rotating keeps them contiguous, so
        # each round and case hands over from this process to the workers only once or twice.
        order = [s for s in live if s not in hosts] + [s for s in live if s in hosts]
        in_worker = False
        for i in range(rounds):
            for case in cases:
                present = [s for s in order if (case, s) in runners]
                if not present:
                    continue
                k = i % len(present)
                for s in present[k:] + present[:k]:  # rotate who goes first each round
                    if s in hosts and not in_worker:
                        time.sleep(settle_s)  # let OpenBLAS's spinning threads go to sleep (see SETTLE_S)
                    in_worker = s in hosts
                    res.times[case, s].append(runners[case, s].block())
            print(f"# round {i + 1}/{rounds} done", file=sys.stderr, flush=True)
        # Memory after timing: tracemalloc slows Python allocation for as long as it traces.
        for case in memory_cases or []:
            data = wk.make_data(*case)
            for s in live:
                try:
                    if s in hosts:
                        res.memory[case, s] = hosts[s].ask("memory", case)
                    else:
                        res.memory[case, s] = wk.measure_memory(case[0], s, data)
                except wk.UnavailableError as e:
                    res.mem_notes[case, s] = f"not measured: {e}"
                except Exception as e:  # keep the timings of a long run; say what failed
                    res.mem_notes[case, s] = f"measurement FAILED: {type(e).__name__}: {e}"
                    traceback.print_exc()
    finally:
        for h in hosts.values():
            h.close()
    return res


# -- report ----------------------------------------------------------------------------------


def _fmt(t: float) -> str:
    return f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} µs"


def _mib(b: int) -> str:
    return f"{b / 2**20:.2f} MiB"


def paired(res: Results, case: Case, a: str, b: str) -> float | None:
    """Median over rounds of ``t_a[r] / t_b[r]``; None when either was not timed."""
    ta, tb = res.times.get((case, a)), res.times.get((case, b))
    if not ta or not tb:
        return None
    return statistics.median(x / y for x, y in zip(ta, tb))


def wide_table(res: Results, cases: list[Case], systems: list[str]) -> str:
    """One row per workload, one column per system: median per call (ratio to numpy, paired)."""
    cols = [s for s in systems if any((c, s) in res.times for c in cases)]
    rows = [
        "| workload | " + " | ".join(LABELS[s] for s in cols) + " |",
        "| --- | " + " | ".join("---:" for _ in cols) + " |",
    ]
    for case in cases:
        cells = []
        for s in cols:
            ts = res.times.get((case, s))
            if not ts:
                cells.append("—")
                continue
            rr = paired(res, case, s, "numpy")
            bad = " ✗" if (case, s) in res.wrong else ""
            cells.append(f"{_fmt(statistics.median(ts))} ({rr:.2f}x){bad}" if rr is not None else _fmt(ts[0]))
        rows.append(f"| {case_label(case)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def long_table(res: Results, cases: list[Case], systems: list[str]) -> str:
    rows = [
        "| workload | system | median per call | IQR | ratio to numpy (paired median) |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for case in cases:
        for s in systems:
            ts = res.times.get((case, s))
            if not ts:
                continue
            q = np.percentile(ts, [25, 75])
            extra = f" ({statistics.median(ts) / wk.K * 1e6:.1f} µs/link)" if case[0] == "chain" else ""
            rr = paired(res, case, s, "numpy")
            ratio = f"{rr:.2f}x" if rr is not None else ""
            rows.append(
                f"| {case_label(case)} | {LABELS[s]} | {_fmt(statistics.median(ts))}{extra} | "
                f"{_fmt(q[1] - q[0])} | {ratio} |"
            )
    return "\n".join(rows)


# gputape's CPU speed targets: (description, case, system, baseline system, bound); met when the
# paired median ratio system/baseline is <= bound (strictly below for "faster than").
TARGETS: list[tuple[str, Case, str, str, float, bool]] = [
    ("eager MLP step (B=128) <= 1.05x numpy", ("mlp", 128), "gputape", "numpy", 1.05, False),
    ("eager MLP step, one-hot + assign_sub (B=128) <= 1.10x numpy", ("mlp", 128), "onehot", "numpy", 1.1, False),
    ("eager MLP step (B=128) faster than PyTorch eager", ("mlp", 128), "gputape", "torch", 1.0, True),
    ("compiled MLP step (B=128) <= 1.0x numpy", ("mlp", 128), "compiled", "numpy", 1.0, False),
    ("eager 100-link chain <= 2.0x numpy", ("chain", None), "gputape", "numpy", 2.0, False),
    ("compiled 100-link chain <= 1.2x numpy", ("chain", None), "compiled", "numpy", 1.2, False),
    ("jacobian (eager) faster than torch.func.jacrev", ("jacobian", None), "gputape", "torch", 1.0, True),
    ("jacobian (gt.function) faster than torch.func.jacrev", ("jacobian", None), "compiled", "torch", 1.0, True),
]


def _why_missing(res: Results, case: Case, *systems: str) -> str:
    for s in systems:
        for key in ((case, s), (None, s)):
            if key in res.notes:
                return res.notes[key]
    return "not in this run (see --workloads/--batches/--systems)"


def targets_table(res: Results) -> str:
    rows = ["| target (CPU) | measured (paired median) | status |", "| --- | ---: | --- |"]
    for desc, case, s, base, bound, strict in TARGETS:
        rr = paired(res, case, s, base)
        if rr is None:
            rows.append(f"| {desc} | — | not measured: {_why_missing(res, case, s, base)} |")
            continue
        ok = rr < bound if strict else rr <= bound
        wrong = " (but its result differs from numpy's)" if (case, s) in res.wrong else ""
        rows.append(f"| {desc} | {s}/{base} = {rr:.2f}x | {'met' if ok else '**NOT met**'}{wrong} |")
    return "\n".join(rows)


def memory_table(res: Results, memory_cases: list[Case], systems: list[str]) -> str:
    rows = [
        "| MLP SGD step | system | step peak | ratio to numpy | total peak (with weights, data, state) | measured by |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for case in memory_cases:
        base = res.memory.get((case, "numpy"))
        for s in systems:
            m = res.memory.get((case, s))
            if m is None:
                why = res.mem_notes.get((case, s)) or res.notes.get((None, s))
                if why:
                    rows.append(f"| B={case[1]} | {LABELS[s]} | — | | | {why} |")
                continue
            ratio = f"{m.step_peak / base.step_peak:.2f}x" if base and base.step_peak else ""
            total = _mib(m.total_peak) if m.total_peak is not None else "n/a"
            rows.append(f"| B={case[1]} | {LABELS[s]} | {_mib(m.step_peak)} | {ratio} | {total} | {m.method} |")
    return "\n".join(rows)


def notes(res: Results) -> list[str]:
    """One line per system and reason (a reason shared by several workloads is said once)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for (case, s), why in res.notes.items():
        grouped.setdefault((s, why), []).append(case_label(case) if case else "all workloads")
    out = [f"- {LABELS[s]}, {'; '.join(where)}: {why}" for (s, why), where in grouped.items()]
    for (case, s), why in res.wrong.items():
        out.append(f"- ✗ {LABELS[s]}, {case_label(case)}: {why}")
    return out


def parse_cases(workloads: list[str], batches: list[int]) -> tuple[list[Case], list[Case]]:
    """The timed cases and the memory cases the command line asks for."""
    cases: list[Case] = []
    for wl in workloads:
        if wl == "mlp":
            cases += [("mlp", b) for b in batches]
        elif wl in ("chain", "jacobian"):
            cases.append((wl, None))
    memory = [("mlp", b) for b in batches] if "memory" in workloads else []
    return cases, memory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds of ~40 ms blocks (a smoke run, under a minute)")
    ap.add_argument("--rounds", type=int, help="rounds per (workload, system) (default 15; 5 with --quick)")
    ap.add_argument("--block-ms", type=float, help="target duration of one timed block (default 150; 40 with --quick)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls per system before calibrating")
    ap.add_argument(
        "--settle-ms",
        type=float,
        default=SETTLE_S * 1e3,
        help="pause before a worker's block that follows one in this process, while OpenBLAS's threads "
        f"stop spinning (default {SETTLE_S * 1e3:.0f})",
    )
    all_workloads = [*wk.WORKLOADS, "memory"]
    ap.add_argument(
        "--workloads",
        nargs="+",
        choices=all_workloads,
        default=all_workloads,
        help="mlp (one row per --batches), chain, jacobian, memory (peak memory of an MLP step per batch)",
    )
    ap.add_argument(
        "--batches", type=int, nargs="+", default=list(wk.BATCHES), help="MLP batch sizes (default 32 128 1024)"
    )
    ap.add_argument("--batch", type=int, help="one MLP batch size (same as --batches B)")
    ap.add_argument("--systems", nargs="+", choices=wk.SYSTEMS, default=list(wk.SYSTEMS))
    ap.add_argument(
        "--threads",
        type=int,
        help="limit BLAS/OpenMP threads (threadpoolctl) and torch's to N for every system (default: libraries' own)",
    )
    ap.add_argument(
        "--one-process",
        action="store_true",
        help=f"time {', '.join(sorted(ISOLATED))} in this process too (default: each in a worker process of its own)",
    )
    ap.add_argument("--markdown", "--out", dest="out", type=Path, help="also write the markdown report to this file")
    args = ap.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    block_s = (args.block_ms or (40.0 if args.quick else 150.0)) / 1e3
    systems = ["numpy"] + [s for s in args.systems if s != "numpy"]  # numpy is the baseline
    batches = [args.batch] if args.batch else args.batches
    cases, memory_cases = parse_cases(args.workloads, batches)

    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpu0 = cpu_busy()
    t0 = time.perf_counter()
    isolate = frozenset() if args.one_process else ISOLATED
    with limit_threads(args.threads):
        res = run(
            cases, systems, rounds, block_s, args.warmup, args.threads, isolate, memory_cases, args.settle_ms / 1e3
        )
        env_lines = environment(systems, res.peer_info)  # inside the limit, so the BLAS line shows it
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpu1 = cpu_busy()
    others, share = "", 0.0
    if cpu0 and cpu1:
        share = max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / (wall * (os.cpu_count() or 1))
        others = f", other processes kept {share:.0%} of the cores busy"

    isolated_here = sorted(isolate & set(systems))
    parts = [
        f"## gputape vs hand-written numpy and peers ({rounds} interleaved rounds, ~{block_s * 1e3:.0f} ms blocks)",
        "",
        *env_lines,
        f"- run: {time.strftime('%Y-%m-%d %H:%M')}, {wall:.0f} s, "
        f"1-min load average {load0:.2f} -> {load1:.2f}{others}; "
        + (
            f"{', '.join(isolated_here)} timed in worker processes of their own"
            if isolated_here
            else "all systems in one process"
        ),
        f"- command: `python -m benchmarks.compare {' '.join(argv if argv is not None else sys.argv[1:])}`",
    ]
    if share >= 0.10:
        parts.append(
            f"- WARNING: other processes kept {share:.0%} of the cores busy during the run; with "
            "multi-threaded BLAS that distorts the MLP timings badly (rerun on a quiet machine, or --threads 1)"
        )
    if cases:
        parts += [
            "",
            "Median time per call (ratio to numpy: median of the per-round paired ratios; ✗: result check failed):",
            "",
            wide_table(res, cases, systems),
            "",
            targets_table(res),
        ]
    if memory_cases:
        parts += [
            "",
            "Peak memory of one MLP step above what was live when it began (weights, data, optimizer state "
            "and buffers kept between steps are live already):",
            "",
            memory_table(res, memory_cases, systems),
        ]
    if cases:
        parts += ["", "Per system, with the spread over rounds:", "", long_table(res, cases, systems)]
    note_lines = notes(res)
    if note_lines:
        parts += ["", "Not measured, or wrong:", "", *note_lines]
    report = "\n".join(parts) + "\n"
    print(report, end="")
    if args.out:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
