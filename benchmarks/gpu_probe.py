"""What CuPy allows under CUDA-graph capture, and what a launch costs (called by gpu_check.sh).

``gt.function`` replays GPU steps as CUDA graphs where CuPy allows it, and its way around
cuBLAS was chosen by measurement. This probe answers, on the machine at
hand, with one line per question:

* host cost of one launch: cupy elementwise ufunc, ElementwiseKernel, RawKernel, cupy.matmul;
* whether each of those (plus a cub reduction, a fresh allocation, and a direct cuBLAS sgemm
  through ``cupy_backends.cuda.libs.cublas`` with the handle bound to the capturing stream) can
  be captured into a graph, and the graph's results equal eager ones;
* time of a 100-op elementwise chain eager vs replayed as one graph.

``python benchmarks/gpu_probe.py --json OUT.json``; exit 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from typing import Any


def host_us(fn: Any, sync: Any, reps: int = 2000) -> float:
    """Median host microseconds per call (launch cost: the device is not waited for inside)."""
    for _ in range(50):
        fn()
    sync()
    meds = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        meds.append((time.perf_counter() - t) / reps * 1e6)
        sync()
    return statistics.median(meds)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
        (cp.arange(3) + 1).get()
    except Exception as e:
        print(f"gpu_probe: no usable GPU: {type(e).__name__}: {e}")
        return 2
    out: dict[str, Any] = {"cupy": cp.__version__}
    sync = cp.cuda.Device().synchronize
    n = 1024
    a = cp.random.rand(n, n, dtype=cp.float32)
    b = cp.random.rand(n, n, dtype=cp.float32)
    small = cp.random.rand(128, dtype=cp.float32)
    ek = cp.ElementwiseKernel("T x, T y", "T z", "z = x * y + 1", "probe_ek")
    rk = cp.RawKernel(
        r"""extern "C" __global__ void probe_rk(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * 2.0f; }""",
        "probe_rk",
    )
    ybuf = cp.empty_like(small)

    launches = {
        "ufunc multiply (128 el)": lambda: small * small,
        "ElementwiseKernel (128 el)": lambda: ek(small, small),
        "RawKernel (128 el)": lambda: rk((1,), (128,), (small, ybuf, cp.int32(128))),
        "sum reduction (128 el)": lambda: small.sum(),
        "matmul 1024^2 (cuBLAS)": lambda: a @ b,
    }
    out["launch_host_us"] = {}
    for name, fn in launches.items():
        us = host_us(fn, sync, reps=200 if "matmul" in name else 2000)
        out["launch_host_us"][name] = round(us, 2)
        print(f"launch host cost: {name:32s} {us:8.2f} us")

    # -- what can be captured --------------------------------------------------------------------
    from cupy_backends.cuda.libs import cublas

    def direct_sgemm(x: Any, y: Any, z: Any, stream: Any) -> None:
        # row-major z = x @ y  ==  column-major z^T = y^T x^T
        h = cp.cuda.device.get_cublas_handle()
        cublas.setStream(h, stream.ptr)
        one = cp.array(1.0, dtype=cp.float32)
        zero = cp.array(0.0, dtype=cp.float32)
        cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_DEVICE)
        try:
            m, k = x.shape
            _, nn = y.shape
            cublas.sgemm(h, 0, 0, nn, m, k, one.data.ptr, y.data.ptr, nn, x.data.ptr, k, zero.data.ptr, z.data.ptr, nn)
        finally:
            cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)

    zbuf = cp.empty((n, n), dtype=cp.float32)
    cases = {
        "ufunc into preallocated": lambda s: cp.multiply(a, b, out=zbuf),
        "ufunc allocating": lambda s: a * b,
        "ElementwiseKernel": lambda s: ek(a, b),
        "RawKernel": lambda s: (rk((1,), (128,), (small, ybuf, cp.int32(128))), ybuf)[1],
        "sum reduction (cub/reduction kernel)": lambda s: a.sum(axis=1),
        "cupy.matmul (cuBLAS via cupy)": lambda s: a @ b,
        "direct cublas.sgemm, handle on capture stream": lambda s: direct_sgemm(a, b, zbuf, s),
    }
    out["capture"] = {}
    for name, fn in cases.items():
        s = cp.cuda.Stream(non_blocking=True)
        rec: dict[str, Any] = {}
        try:
            with s:
                ref = fn(s)
                ref = ref.copy() if ref is not None else zbuf.copy()
            s.synchronize()
            with s:
                s.begin_capture()
                try:
                    res = fn(s)
                finally:
                    g = s.end_capture()
            if res is None:
                res = zbuf
            res.fill(float("nan"))  # poison: the replay must write every element
            s.synchronize()
            g.launch(stream=s)
            s.synchronize()
            ok = bool(cp.allclose(res, ref, rtol=1e-4, atol=1e-4))
            rec = {"captured": True, "replay_equals_eager": ok}
        except Exception as e:
            rec = {"captured": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            try:
                s.end_capture()
            except Exception:
                pass
        out["capture"][name] = rec
        print(f"capture: {name:48s} {rec}")

    # -- 100-op chain: eager vs graph ------------------------------------------------------------
    x = cp.random.rand(16, dtype=cp.float32)
    bufs = [cp.empty_like(x) for _ in range(100)]

    def chain() -> Any:
        y = x
        for i in range(100):
            cp.multiply(y, 1.0001, out=bufs[i])
            y = bufs[i]
        return y

    try:
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            chain()
            s.synchronize()
            s.begin_capture()
            chain()
            g = s.end_capture()
            g.launch(stream=s)
            s.synchronize()
        eager = host_us(chain, sync, reps=50)

        def replay() -> None:
            g.launch(stream=s)

        sync_s = s.synchronize
        t_graph = host_us(replay, sync_s, reps=500)

        # wall time including device execution
        def wall(fn: Any, sy: Any) -> float:
            fn()
            sy()
            t = time.perf_counter()
            for _ in range(50):
                fn()
            sy()
            return (time.perf_counter() - t) / 50 * 1e6

        out["chain100"] = {
            "eager_host_us": round(eager, 1),
            "graph_launch_host_us": round(t_graph, 1),
            "eager_wall_us": round(wall(chain, sync), 1),
            "graph_wall_us": round(wall(replay, sync_s), 1),
        }
        print(f"100-op chain: {out['chain100']}")
    except Exception as e:
        out["chain100"] = {"error": f"{type(e).__name__}: {e}"}
        traceback.print_exc()

    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
