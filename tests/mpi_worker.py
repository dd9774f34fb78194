"""The program tests/test_distributed.py runs under ``mpirun -n 2`` (and in one process for reference).

    mpirun -n 2 python tests/mpi_worker.py MODE [OUTDIR]

Modes: ``train`` (a few SGD and Adam steps of a small float64 MLP on sharded
batches, parameters saved per rank), ``collectives`` (all_reduce,
broadcast_variables and sharding checked on every rank), ``raise`` (rank 1
raises while rank 0 waits in a collective), ``mismatch`` (the ranks pass
different shapes), ``gpu`` (cupy arrays reduced and broadcast, then ``train`` on
the GPU). Importing it does nothing.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import gputape as gt

STEPS = 5
GLOBAL_BATCH = 16


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.normal(size=(48, 6)), rng.integers(0, 3, size=48)


def _model(seed: int, device: str = "cpu") -> list[gt.Variable]:
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=(6, 10)) * 0.5, np.zeros(10), rng.normal(size=(10, 3)) * 0.5, np.zeros(3)]
    return [gt.Variable(gt.constant(a, device=device), name=n) for a, n in zip(arrays, ("w1", "b1", "w2", "b2"))]


def train(outdir: str, device: str = "cpu", compiled: bool = False) -> dict[str, list[np.ndarray]]:
    """SGD (momentum) and Adam for STEPS steps; each rank gets its block of every global batch.

    ``compiled``: the step is a gt.function, whose replays must communicate on every call."""
    gt.distributed.init()
    r, w = gt.distributed.rank(), gt.distributed.world_size()
    x, y = _data()
    results = {}
    for name, make in (("sgd", lambda: gt.optim.SGD(0.1, momentum=0.9)), ("adam", lambda: gt.optim.Adam(0.01))):
        params = _model(100 + r, device)  # different on every rank until broadcast
        gt.distributed.broadcast_variables(params, root=0)
        opt = gt.distributed.DistributedOptimizer(make())
        loader = gt.data.DataLoader(x, y, batch_size=GLOBAL_BATCH, shuffle=True, seed=7, shard=True, device=device)
        assert len(loader) == len(x) // GLOBAL_BATCH

        def train_step(xb: gt.Tensor, yb: gt.Tensor, params: list = params, opt: object = opt) -> gt.Tensor:
            with gt.GradientTape() as tape:
                h = gt.nn.relu(xb @ params[0] + params[1])
                logits = h @ params[2] + params[3]
                loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss

        run = gt.function(train_step) if compiled else train_step
        step = 0
        while step < STEPS:  # crosses an epoch boundary: a new shuffle, the same on every rank
            for xb, yb in loader:
                assert xb.shape == (GLOBAL_BATCH // w, 6), xb.shape
                run(xb, yb)
                step += 1
                if step == STEPS:
                    break
        assert opt.iterations == STEPS
        if compiled:
            assert run.tracing_count == 1, run.tracing_count
        results[name] = [p.numpy() for p in params]
        if outdir:
            tag = "_compiled" if compiled else ""
            np.savez(os.path.join(outdir, f"{name}{tag}_rank{r}_of{w}.npz"), *results[name])
    return results


def gpu(outdir: str) -> None:
    """cupy arrays through whichever backend gt.distributed picks for the GPU, then training on it."""
    gt.distributed.init()
    r, w = gt.distributed.rank(), gt.distributed.world_size()
    cp = gt.devices.backend.cupy_module()
    with gt.device("cuda:0"):
        expected = "nccl" if os.environ.get("GPUTAPE_NCCL") != "0" and gt.devices.backend.nccl_module() else "mpi"
        assert gt.distributed.backend() == expected, gt.distributed.backend()
        a = cp.arange(6, dtype=cp.float32).reshape(2, 3) * (r + 1)
        t = gt.constant(np.full(4, float(r)), device="cuda:0")
        got = gt.distributed.all_reduce([a, None, t, cp.asarray([r, 2 * r], cp.int64)], op="sum")
        assert isinstance(got[0], cp.ndarray) and got[0].dtype == cp.float32 and got[0].shape == (2, 3)
        cp.testing.assert_allclose(got[0], cp.arange(6, dtype=cp.float32).reshape(2, 3) * 3)
        assert got[2].device.startswith("cuda") and got[2].numpy().tolist() == [1.0] * 4
        assert got[3].tolist() == [1, 2]
        got = gt.distributed.all_reduce([a], op="max")
        cp.testing.assert_allclose(got[0], cp.arange(6, dtype=cp.float32).reshape(2, 3) * 2)
        v = gt.Variable(gt.constant(np.full(3, float(r)), device="cuda:0"))
        gt.distributed.broadcast_variables([v], root=1)
        assert v.device.startswith("cuda") and v.numpy().tolist() == [1.0, 1.0, 1.0]
        train(outdir, "cuda:0")
    print(f"gpu OK on rank {r} of {w} ({expected})", flush=True)


def collectives() -> None:
    gt.distributed.init()
    r, w = gt.distributed.rank(), gt.distributed.world_size()
    assert w == 2 and gt.distributed.backend("cpu") == "mpi", (w, gt.distributed.backend("cpu"))
    f32 = gt.constant(np.array([[1.0, -2.0], [3.0, 4.0]], np.float32) * (r + 1))
    f64 = np.arange(5, dtype=np.float64) + 10 * r
    i64 = np.array([r, 5 - r, 7], np.int64)
    var = gt.Variable(np.full(3, r + 0.5, np.float32))
    f16 = np.array([0.5, 1.5], np.float16) * (r + 1)

    got = gt.distributed.all_reduce([f32, None, f64, var, f16], op="mean")
    assert [type(g).__name__ for g in got] == ["Tensor", "NoneType", "ndarray", "Tensor", "ndarray"], got
    assert got[0].dtype == np.float32 and got[0].shape == (2, 2)
    np.testing.assert_allclose(got[0].numpy(), np.array([[1.0, -2.0], [3.0, 4.0]]) * 1.5)
    np.testing.assert_allclose(got[2], np.arange(5) + 5.0)
    np.testing.assert_allclose(got[3].numpy(), np.full(3, 1.0))
    assert got[4].dtype == np.float16
    np.testing.assert_allclose(got[4], [0.75, 2.25])
    assert f64[0] == 10 * r, "all_reduce must not change its inputs"

    got = gt.distributed.all_reduce([None, i64, f64], op="sum")
    assert got[0] is None and got[1].dtype == np.int64
    np.testing.assert_array_equal(got[1], [1, 9, 14])
    np.testing.assert_allclose(got[2], 2 * np.arange(5) + 10.0)

    got = gt.distributed.all_reduce([i64, f32, np.array([r == 0, r == 1, False])], op="max")
    np.testing.assert_array_equal(got[0], [1, 5, 7])
    np.testing.assert_allclose(got[1].numpy(), [[2.0, -2.0], [6.0, 8.0]])
    np.testing.assert_array_equal(got[2], [True, True, False])
    got = gt.distributed.all_reduce([i64], op="min")
    np.testing.assert_array_equal(got[0], [0, 4, 7])
    assert gt.distributed.all_reduce([], op="sum") == []

    # broadcast_variables: root's values everywhere, dtypes kept, from rank 1 too
    vs = [gt.Variable(np.full((2, 3), float(r), np.float32)), gt.Variable(np.array([r, r + 1], np.int32))]
    gt.distributed.broadcast_variables(vs, root=1)
    np.testing.assert_array_equal(vs[0].numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(vs[1].numpy(), [1, 2])
    assert vs[1].dtype == np.int32

    # DataLoader(shard=True) without a seed: rank 0's seed is shared, so the ranks see disjoint rows
    loader = gt.data.DataLoader(np.arange(40), batch_size=8, shuffle=True, shard=True)
    seen = [int(v) for b in loader for v in b.numpy()]
    everyone = gt.distributed._state.comm.allgather(seen)
    assert sorted(everyone[0] + everyone[1]) == list(range(40)), everyone
    print(f"collectives OK on rank {r} of {w}", flush=True)


def fail() -> None:
    gt.distributed.init()
    if gt.distributed.rank() == 1:
        time.sleep(0.2)
        raise RuntimeError("rank 1 failed on purpose")
    gt.distributed.all_reduce([np.ones(3)], op="sum")  # rank 0 waits here for a rank that is gone
    time.sleep(60)


def mismatch() -> None:
    gt.distributed.init()
    r = gt.distributed.rank()
    grads = [np.ones(4), np.ones((3 + r, 2), np.float32), None]
    try:
        gt.distributed.all_reduce(grads)
    except ValueError as exc:
        print(f"MISMATCH on rank {r}: {exc}", flush=True)
        gt.distributed.barrier()  # both ranks print before the abort hook ends the job
        raise
    print(f"rank {r}: no error", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "train":
        train(sys.argv[2])
        train(sys.argv[2], compiled=True)
    elif mode == "collectives":
        collectives()
    elif mode == "raise":
        fail()
    elif mode == "mismatch":
        mismatch()
    elif mode == "gpu":
        gpu(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
