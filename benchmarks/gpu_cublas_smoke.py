"""Smoke test of gputape.devices.cublas (direct cuBLAS through ctypes) in a process of its own.

``gpu_check.sh`` runs it before the GPU tests: a wrong ctypes signature would crash
the process rather than fail a test, so it is tried here first; when it fails, the
check runs the rest with ``GPUTAPE_CAPTURE_GEMM=0`` (matrix products outside the CUDA
graphs) and says so. Exit 0 when an eager and a captured product equal cupy.matmul.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from gputape.devices import backend, cublas


def main() -> int:
    cp = backend.cupy_module()
    if cp is None:
        print("gpu_cublas_smoke: no cupy")
        return 2
    gemm = cublas.gemm_for(0)
    if gemm is None:
        print("gpu_cublas_smoke: FAILED: direct cuBLAS unavailable (see GPUTAPE debug log)")
        return 1
    r = np.random.default_rng(0)
    a = cp.asarray(r.standard_normal((300, 200)).astype(np.float32))
    b = cp.asarray(r.standard_normal((100, 200)).astype(np.float32)).T  # a transposed view
    want = cp.asnumpy(a @ b)
    got = cp.asnumpy(gemm.matmul(a, b))
    out = cublas.captured_matmul(gemm, a, b)
    err = max(float(np.max(np.abs(got - want))), float(np.max(np.abs(cp.asnumpy(out) - want))))
    ok = err < 1e-3
    print(
        f"gpu_cublas_smoke: {'ok' if ok else 'FAILED'}: eager and captured sgemm vs cupy.matmul, max |diff| {err:.2e}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
