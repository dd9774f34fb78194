"""Data-parallel scaling on the CPU: the MLP training step on 1 and 2 ranks, and the share spent communicating.

The workload is the benchmarks' ``mlp`` (a 784-256-256-10 float32 MLP, softmax
cross-entropy, SGD) with a global batch of 128: one process takes all 128 rows;
under ``mpirun -n 2`` each rank takes 64 and the gradients (six arrays, 270,346
float32 values, one packed buffer) are averaged with ``gt.distributed.all_reduce``
before the update. Every process runs with one BLAS/OpenMP thread
(``OMP_NUM_THREADS=1`` and friends, set here for the children), so 1 rank uses one
core and 2 ranks use two: the comparison is per core, not one process using all cores
against two.

Per step it times the whole step (forward, backward, all_reduce, update) and the
all_reduce inside it, on every rank, after a warm-up, and takes medians over the steps
(rank 0; the slower rank's step is printed too). That all_reduce time includes waiting
for the other rank, so load imbalance shows up there; the ``alone`` column times the
same all_reduce back to back with no compute around it: the communication proper.
The configurations alternate for ``--rounds`` rounds and the table gives, per column,
the median over rounds and the lowest round (the least disturbed by other work on
the machine; the load average is printed before and after).

    python benchmarks/distributed_scaling.py [--steps 300] [--rounds 5] [--batch 128] [--json out.json]

Needs the ``mpi`` extra (``pip install -e ".[mpi]"``): mpirun is taken from next to
this Python, else from PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
D, H, C, GLOBAL_BATCH, LR = 784, 256, 10, 128, 0.01


def worker(steps: int, warmup: int, batch: int) -> None:
    """One rank: time ``steps`` training steps on this rank's rows of each global batch; rank 0 prints JSON."""
    import numpy as np

    import gputape as gt

    gt.distributed.init()
    r, w = gt.distributed.rank(), gt.distributed.world_size()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, D)).astype(np.float32)
    y = rng.integers(0, C, batch)
    init = [
        (rng.standard_normal((D, H)) * 0.05).astype(np.float32),
        np.zeros(H, np.float32),
        (rng.standard_normal((H, H)) * 0.05).astype(np.float32),
        np.zeros(H, np.float32),
        (rng.standard_normal((H, C)) * 0.05).astype(np.float32),
        np.zeros(C, np.float32),
    ]
    params = [gt.Variable(a) for a in init]
    opt = gt.optim.SGD(LR)
    xb, yb = gt.distributed.shard_batch((gt.constant(x), y))
    rows = np.arange(xb.shape[0])

    step_t, comm_t = [], []
    for i in range(warmup + steps):
        gt.distributed.barrier()  # start every step together, so one rank's lag is not carried over
        t0 = time.perf_counter()
        w1, b1, w2, b2, w3, b3 = params
        with gt.GradientTape() as tape:
            h = gt.nn.relu(xb @ w1 + b1)
            h = gt.nn.relu(h @ w2 + b2)
            loss = -gt.mean(gt.nn.log_softmax(h @ w3 + b3)[rows, yb])
        grads = tape.gradient(loss, params)
        t1 = time.perf_counter()
        grads = gt.distributed.all_reduce(grads, op="mean")
        t2 = time.perf_counter()
        opt.apply_gradients(zip(grads, params))
        t3 = time.perf_counter()
        if i >= warmup:
            step_t.append(t3 - t0)
            comm_t.append(t2 - t1)
    alone = []
    for _ in range(steps // 2):
        gt.distributed.barrier()
        t0 = time.perf_counter()
        gt.distributed.all_reduce(grads, op="mean")
        alone.append(time.perf_counter() - t0)
    mine = {
        "step_ms": statistics.median(step_t) * 1e3,
        "comm_ms": statistics.median(comm_t) * 1e3,
        "alone_ms": statistics.median(alone) * 1e3,
    }
    every = gt.distributed._state.comm.gather(mine, root=0) if w > 1 else [mine]
    if r == 0:
        out = {"ranks": w, "rows_per_rank": int(xb.shape[0]), "backend": gt.distributed.backend("cpu"), **mine}
        out["slowest_step_ms"] = max(e["step_ms"] for e in every)
        out["comm_share"] = mine["comm_ms"] / mine["step_ms"]
        print("RESULT " + json.dumps(out), flush=True)


def _mpirun() -> str:
    for name in ("mpirun", "mpiexec"):
        here = Path(sys.executable).parent / name
        if here.exists():
            return str(here)
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if found is None:
        raise SystemExit('no mpirun next to this Python or on PATH: pip install -e ".[mpi]"')
    return found


def run(ranks: int, steps: int, warmup: int, batch: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.update({v: "1" for v in THREAD_VARS})
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", "--steps", str(steps), "--warmup", str(warmup)]
    me += ["--batch", str(batch)]
    if ranks == 1:
        cmd = me  # a plain process: world size 1, no communication at all
    else:
        exe = _mpirun()
        cmd = [exe, "-n", str(ranks)]
        version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        if "Open MPI" in version:
            # as root (CI, containers); no pinning: other work on the machine may take either core
            cmd += ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
        cmd += me
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=GLOBAL_BATCH, help="global batch (split over the ranks)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.steps, args.warmup, args.batch)
        return
    load_before = os.getloadavg()
    rounds: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for n in (1, 2):
            rounds[n].append(run(n, args.steps, args.warmup, args.batch))
    load_after = os.getloadavg()
    print(
        f"MLP 784-256-256-10 float32, SGD, global batch {args.batch}, 1 thread per rank; per round the median "
        f"of {args.steps} steps; {args.rounds} rounds: median over rounds [lowest round]"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} cores)")
    heads = ("ranks", "rows/rank", "step ms", "allreduce in step ms", "allreduce alone ms", "comm share", "speedup")
    print(" | ".join(heads))
    summary = {}
    for n, res in rounds.items():
        col = {k: [r[k] for r in res] for k in ("step_ms", "comm_ms", "alone_ms")}
        med = {k: statistics.median(v) for k, v in col.items()}
        best = {k: min(v) for k, v in col.items()}
        summary[n] = {"median": med, "best": best, "rounds": res}
    base = summary[1]
    for n, sm in summary.items():
        med, best = sm["median"], sm["best"]
        print(
            f"{n} | {args.batch // n} | {med['step_ms']:.2f} [{best['step_ms']:.2f}] | "
            f"{med['comm_ms']:.3f} [{best['comm_ms']:.3f}] | {med['alone_ms']:.3f} [{best['alone_ms']:.3f}] | "
            f"{med['comm_ms'] / med['step_ms']:.0%} [{best['comm_ms'] / best['step_ms']:.0%}] | "
            f"{base['median']['step_ms'] / med['step_ms']:.2f}x [{base['best']['step_ms'] / best['step_ms']:.2f}x]"
        )
    if args.json:
        out = {"load_before": load_before, "load_after": load_after, "summary": summary}
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
