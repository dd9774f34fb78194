"""Backend choice, DLPack exchange and the device manager, on the CPU.

The GPU halves of these live in ``tests/test_gpu.py``. Here a fake cupy module
stands in for the failure modes a CPU machine cannot show (no driver, no
device, a failing smoke kernel), so every reason message is exercised.
"""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import tracemalloc
import types
from pathlib import Path

import numpy as np
import pytest

import gputape as gt
import gputape.devices.memory as dm
import gputape.devices.placement as pl
from gputape.devices import backend

ROOT = Path(__file__).resolve().parents[1]


# -- choosing the device -----------------------------------------------------------------


class _FakeCudaError(Exception):
    pass


def fake_cupy(driver=13000, count=1, count_error=None, smoke_result=64.0):
    """A stand-in for cupy with just what backend._probe touches."""

    class Device:
        def __init__(self, i=0):
            self.id = i

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    class Arr:
        def __init__(self, v):
            self.v = v

        def __mul__(self, k):
            return self

        def __add__(self, k):
            return self

        def sum(self):
            return smoke_result

    def get_count():
        if count_error:
            raise _FakeCudaError(count_error)
        return count

    runtime = types.SimpleNamespace(driverGetVersion=lambda: driver, getDeviceCount=get_count)
    cuda = types.SimpleNamespace(runtime=runtime, Device=Device)
    return types.SimpleNamespace(cuda=cuda, arange=lambda n, dtype=None: Arr(n), float32="float32", ndarray=type(None))


@pytest.fixture
def fresh_backend(monkeypatch):
    """Forget the probe results and the cached default, and restore them afterwards."""
    monkeypatch.setattr(backend, "_probed", {})
    monkeypatch.setattr(backend, "_default", None)
    monkeypatch.setattr(backend, "_cupy_installed", backend._cupy_installed)
    monkeypatch.setattr(backend, "_cupy_error", backend._cupy_error)
    monkeypatch.delenv("GPUTAPE_DEVICE", raising=False)
    yield monkeypatch


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"driver": 0}, "no CUDA driver is installed"),
        ({"count_error": "cudaErrorInsufficientDriver"}, "the CUDA driver did not answer"),
        ({"count": 0}, "CUDA reports no devices"),
        ({"smoke_result": 1.0}, "failed the smoke kernel"),
    ],
)
def test_reasons_say_what_is_missing(fresh_backend, kw, reason):
    fresh_backend.setattr(backend, "_cupy", fake_cupy(**kw))
    assert reason in backend.cuda_unavailable_reason(0)
    with pytest.warns(backend.CpuFallbackWarning, match=reason):
        assert backend.default_device() == "cpu"
    fresh_backend.setenv("GPUTAPE_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match=reason):
        backend.default_device()


def test_no_cupy_reason(fresh_backend):
    fresh_backend.setattr(backend, "_cupy", False)
    fresh_backend.setattr(backend, "_cupy_error", "cupy is not importable (ImportError: No module named 'cupy')")
    fresh_backend.setenv("GPUTAPE_DEVICE", "cuda:0")
    with pytest.raises(RuntimeError, match=r"GPUTAPE_DEVICE='cuda:0' asks for a GPU but cupy is not importable"):
        backend.default_device()


def test_gpu_is_the_default_when_one_answers(fresh_backend):
    fresh_backend.setattr(backend, "_cupy", fake_cupy(count=2))
    assert backend.default_device() == "cuda:0"
    fresh_backend.setenv("GPUTAPE_DEVICE", "cuda:1")
    assert backend.default_device() == "cuda:1"
    fresh_backend.setenv("GPUTAPE_DEVICE", "cuda:2")
    with pytest.raises(RuntimeError, match="there is no GPU 2"):
        backend.default_device()
    fresh_backend.setenv("GPUTAPE_DEVICE", "cpu")
    assert backend.default_device() == "cpu"
    fresh_backend.setenv("GPUTAPE_DEVICE", "tpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        backend.default_device()


def test_cpu_fallback_with_cupy_installed_warns_once_with_the_reason_and_the_fix(fresh_backend, caplog):
    import gputape as gt

    # cupy imports but the driver is older than its CUDA: the case that used to run on the CPU silently
    fresh_backend.setattr(backend, "_cupy", fake_cupy(count_error="cudaErrorInsufficientDriver: driver too old"))
    with caplog.at_level(logging.DEBUG, logger="gputape"):
        with pytest.warns(backend.CpuFallbackWarning) as got:
            assert gt.constant(1.0).device == "cpu"  # the first placement decides, some frames deep
            for _ in range(3):
                assert backend.default_device() == "cpu"
    assert len(got) == 1, [str(w.message) for w in got]
    msg = str(got[0].message)
    assert "cudaErrorInsufficientDriver" in msg  # the reason
    assert "NVIDIA driver" in msg and ">= 525" in msg and ">= 580" in msg  # the fix
    assert "GPUTAPE_DEVICE=cpu" in msg and "python -m gputape info" in msg
    assert got[0].filename == __file__  # it points at the caller's line, not into gputape
    lines = [r for r in caplog.records if "using the CPU" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.DEBUG


def test_cpu_fallback_warning_is_public_and_names_each_fix(fresh_backend):
    import gputape as gt

    assert gt.CpuFallbackWarning is backend.CpuFallbackWarning
    # one filter for every gputape warning catches it too (the base lives below the device layer)
    assert issubclass(gt.CpuFallbackWarning, gt.GputapeWarning)
    assert gt.GputapeWarning is gt.core.tape.GputapeWarning is gt.core._errors.GputapeWarning
    fresh_backend.setattr(backend, "_cupy", fake_cupy(count=0))
    with pytest.warns(gt.CpuFallbackWarning, match="CUDA reports no devices.*CUDA_VISIBLE_DEVICES"):
        backend.default_device()
    fresh_backend.setattr(backend, "_probed", {})
    fresh_backend.setattr(backend, "_default", None)
    fresh_backend.setattr(backend, "_cupy", fake_cupy(driver=0))
    with pytest.warns(gt.CpuFallbackWarning, match="no CUDA driver is installed.*install or update the NVIDIA driver"):
        backend.default_device()


def test_gputape_device_cpu_silences_the_fallback(fresh_backend, recwarn):
    fresh_backend.setattr(backend, "_cupy", fake_cupy(driver=0))
    fresh_backend.setenv("GPUTAPE_DEVICE", "cpu")
    for _ in range(2):
        assert backend.default_device() == "cpu"
    assert not recwarn.list


def test_no_cupy_installed_falls_back_silently(fresh_backend, recwarn, caplog):
    # a CPU-only install: cupy's import fails with "No module named 'cupy'"
    import builtins

    real_import = builtins.__import__

    def no_cupy(name, *a, **kw):
        if name == "cupy" or name.startswith("cupy."):
            raise ModuleNotFoundError("No module named 'cupy'", name="cupy")
        return real_import(name, *a, **kw)

    fresh_backend.setattr(backend, "_cupy", None)
    fresh_backend.setattr(builtins, "__import__", no_cupy)
    with caplog.at_level(logging.DEBUG, logger="gputape"):
        assert backend.default_device() == "cpu"
    assert backend._cupy is False and not backend._cupy_installed
    assert not recwarn.list
    assert any("using the CPU" in r.getMessage() for r in caplog.records)


def test_a_broken_cupy_install_warns(fresh_backend):
    # cupy is installed but cannot load its CUDA libraries: a GPU install that does not work
    import builtins

    real_import = builtins.__import__

    def broken_cupy(name, *a, **kw):
        if name == "cupy":
            raise ImportError("libcudart.so.13: cannot open shared object file", name="cupy_backends.cuda")
        return real_import(name, *a, **kw)

    fresh_backend.setattr(backend, "_cupy", None)
    fresh_backend.setattr(builtins, "__import__", broken_cupy)
    with pytest.warns(backend.CpuFallbackWarning, match="libcudart.so.13.*reinstall cupy"):
        assert backend.default_device() == "cpu"


def test_probe_runs_once_per_device(fresh_backend):
    calls = []
    fresh_backend.setattr(backend, "_probe", lambda i: calls.append(i))
    for _ in range(3):
        backend.cuda_unavailable_reason(0)
    backend.cuda_unavailable_reason("cuda:1")
    assert calls == [0, 1]


def test_this_machine_without_a_gpu_uses_the_cpu():
    if backend.gpu_available():
        pytest.skip("this machine has a GPU")
    assert gt.current_device() == "cpu"
    with pytest.raises(RuntimeError, match="not usable"):
        with gt.device("cuda"):
            pass
    with pytest.raises(RuntimeError, match="not usable"):
        gt.ops.tensor_to(gt.constant([1.0], device="cpu"), "cuda")


# -- DLPack -----------------------------------------------------------------------------


class View:
    """What Tensor.__dlpack__/__dlpack_device__ delegate to (see the wiring in device.py)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kw):
        return pl.tensor_dlpack(self.t, **kw)

    def __dlpack_device__(self):
        return pl.tensor_dlpack_device(self.t)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_dlpack_round_trip_with_numpy_shares_memory(dtype):
    a = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    t = gt.from_dlpack(a)
    assert t.device == "cpu" and t.dtype == a.dtype and t.shape == (2, 3)
    assert np.shares_memory(t._data, a)
    b = np.from_dlpack(View(t))
    assert np.shares_memory(b, a)
    np.testing.assert_array_equal(b, a)


def test_dlpack_tensor_is_usable_in_ops_and_gradients():
    a = np.array([1.0, 2.0])
    x = gt.from_dlpack(a)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(x * x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 4.0])


def test_dlpack_with_torch_cpu_is_zero_copy():
    torch = pytest.importorskip("torch")
    src = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = gt.from_dlpack(src)
    assert t._data.ctypes.data == src.data_ptr()
    src[0, 0] = 42.0  # aliasing, as torch.from_dlpack documents
    assert float(t._data[0, 0]) == 42.0
    back = torch.from_dlpack(View(gt.constant(np.array([[1.0, 2.0]]))))
    assert back.tolist() == [[1.0, 2.0]]
    x = gt.constant(np.arange(4.0))
    assert torch.from_dlpack(View(x)).data_ptr() == x._data.ctypes.data


def test_from_dlpack_refuses_what_it_cannot_hold():
    with pytest.raises(TypeError, match="does not support DLPack"):
        gt.from_dlpack([1.0, 2.0])

    class OnGpu:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):  # pragma: no cover - never reached without a GPU
            raise AssertionError

    if not backend.gpu_available():
        with pytest.raises(RuntimeError, match="CUDA device but"):
            gt.from_dlpack(OnGpu())

    class OnTpu:
        def __dlpack_device__(self):
            return (4, 0)

    with pytest.raises(ValueError, match="neither the CPU"):
        gt.from_dlpack(OnTpu())


def test_from_dlpack_of_a_tensor_is_the_tensor():
    t = gt.constant([1.0])
    assert gt.from_dlpack(t) is t


# -- memory ---------------------------------------------------------------------------------


def _small_step(x, w, persistent=True):
    with gt.GradientTape(persistent=persistent) as tape:
        h = gt.tanh(x @ w)
        loss = gt.sum(h * h)
    return tape, loss


def test_memory_info_counts_what_live_tapes_hold():
    x = gt.constant(np.ones((8, 16)))
    w = gt.Variable(np.ones((16, 4)) * 0.01)
    base = gt.memory_info("cpu")["held_by_tapes"]
    tape, loss = _small_step(x, w)
    held = gt.memory_info("cpu")["held_by_tapes"] - base
    assert held == tape.saved_bytes > 0
    tape.gradient(loss, w)
    tape.gradient(loss, w)  # persistent: still held
    assert gt.memory_info("cpu")["held_by_tapes"] - base == held
    tape.release()
    assert gt.memory_info("cpu")["held_by_tapes"] == base
    tape2, _ = _small_step(x, w)
    assert gt.memory_info("cpu")["held_by_tapes"] > base
    del tape2
    gc.collect()
    assert gt.memory_info("cpu")["held_by_tapes"] == base


def test_nested_tapes_count_shared_residuals_once():
    x = gt.constant(np.ones(1000))
    with gt.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with gt.GradientTape(persistent=True) as inner:
            inner.watch(x)
            gt.exp(x)
    both = dm.tape_bytes("cpu")
    assert both == max(outer.saved_bytes, inner.saved_bytes) > 0
    outer.release()
    inner.release()


def test_a_thousand_persistent_tape_steps_return_memory_to_the_baseline():
    """No residual outlives its tape: after 1,000 persistent-tape steps (two gradients
    each, then ``del``), numpy's traced bytes and the tape-held bytes are back where
    they started."""
    rng = np.random.default_rng(0)
    x = gt.constant(rng.standard_normal((16, 32)).astype("float32"))
    w = gt.Variable(rng.standard_normal((32, 8)).astype("float32") * 0.1)
    domain = np.lib.tracemalloc_domain

    def numpy_bytes():
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, domain)])
        return sum(s.size for s in snap.statistics("filename"))

    def step():
        tape, loss = _small_step(x, w)
        assert tape.saved_bytes > 0
        g1 = tape.gradient(loss, w)
        g2 = tape.gradient(loss, w)
        w.assign_sub(0.001 * g1)
        del tape, loss, g1, g2

    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        # Warm up under tracing: each step's assign_sub replaces w's array (the tape still
        # holds the old one then), so the baseline must already count a traced w.
        for _ in range(5):
            step()
        gc.collect()
        base = numpy_bytes()
        for _ in range(1000):
            step()
        gc.collect()
        after = numpy_bytes()
    finally:
        if not started:
            tracemalloc.stop()
    assert gt.memory_info("cpu")["held_by_tapes"] == 0
    assert after <= base, f"numpy memory grew by {after - base} bytes over 1,000 steps"


def test_peak_limit_and_cache_on_the_cpu():
    x = gt.constant(np.ones(4096))
    gt.reset_peak_memory("cpu")
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        gt.exp(x)
    info = gt.memory_info("cpu")
    assert info["peak"] >= 4096 * 8
    tape.release()
    after = gt.memory_info("cpu")
    assert after["in_use"] == 0 and after["peak"] >= 4096 * 8  # a peak stays until reset
    gt.reset_peak_memory("cpu")
    assert gt.memory_info("cpu")["peak"] == 0
    gt.reset_peak_memory("cpu", track=False)
    assert gt.memory_info("cpu")["peak"] is None
    gt.set_memory_limit(fraction=0.5, device="cpu")
    assert gt.memory_info("cpu")["limit"] > 0
    gt.set_memory_limit(device="cpu")
    assert gt.memory_info("cpu")["limit"] is None
    with pytest.raises(ValueError, match="not both"):
        gt.set_memory_limit(1, 0.5, device="cpu")
    with pytest.raises(ValueError, match="fraction"):
        gt.set_memory_limit(fraction=2.0, device="cpu")
    assert gt.empty_cache("cpu") == 0


def test_memory_api_on_a_missing_gpu_says_why():
    if backend.gpu_available():
        pytest.skip("this machine has a GPU")
    calls = (
        lambda: gt.memory_info("cuda"),
        lambda: gt.empty_cache("cuda"),
        lambda: gt.set_memory_limit(1, device="cuda"),
    )
    for fn in calls:
        with pytest.raises(RuntimeError, match="not usable"):
            fn()


# -- arrays and devices ---------------------------------------------------------------------


def test_tensor_to_and_device_checks_on_the_cpu():
    x = gt.constant([1.0, 2.0], device="cpu")
    assert gt.ops.tensor_to(x, "CPU") is x
    assert pl.check_same_device("add", [x._data, np.ones(2)]) == "cpu"
    assert backend.to_device(x._data, "cpu") is x._data
    assert backend.device_index("gpu:3") == 3
    with pytest.raises(ValueError, match="no GPU ordinal"):
        backend.device_index("cpu")


def test_versions_and_pinned_memory_without_a_gpu():
    v = backend.versions()
    assert v["numpy"] == np.__version__
    a = backend.pinned_empty((3, 2), "float32")
    assert a.shape == (3, 2) and a.dtype == np.float32
    backend.synchronize("cpu")


def test_python_m_gputape_info_runs():
    out = subprocess.run(
        [sys.executable, "-m", "gputape", "info"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "gputape" in out and "default device" in out and "numpy" in out
    if not backend.gpu_available():
        assert "cpu" in out and "unavailable" in out
    assert "accelerator" not in out  # (pure Python: no C extension to report)


def test_training_steps_reuse_memory():
    """A training step frees what it allocated, so the next step reuses the same pages:
    a reference cycle that kept each step's gradients alive until the garbage collector
    ran once cost ~190 page faults (the 784x256 gradient) and ~1 MB of heap per step."""
    import resource

    import gputape as gt

    rng = np.random.default_rng(0)
    x = gt.constant(rng.standard_normal((128, 784)).astype(np.float32))
    ws = [gt.Variable(rng.standard_normal(s).astype(np.float32) * 0.05) for s in [(784, 256), (256, 10)]]

    def step():
        with gt.GradientTape() as tape:
            loss = gt.mean(gt.nn.log_softmax(gt.nn.relu(x @ ws[0]) @ ws[1]))
        for w, g in zip(ws, tape.gradient(loss, ws)):
            w.assign_sub(0.01 * g)

    for _ in range(20):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(30):
        step()
    per_step = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 30
    assert per_step < 20, per_step


def test_info_prints_the_reason_instead_of_warning(fresh_backend, recwarn):
    # `python -m gputape info` shows the reason on its GPU line; the warning would say it twice
    from gputape.__main__ import info

    cp = fake_cupy(count=0)
    cp.__version__ = "0.fake"
    fresh_backend.setattr(backend, "_cupy", cp)
    d = info()
    assert d["gpu"] == "unavailable: CUDA reports no devices" and d["default_device"] == "cpu"
    assert not [w for w in recwarn.list if issubclass(w.category, backend.CpuFallbackWarning)]
