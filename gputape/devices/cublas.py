"""Matrix products through cuBLAS called directly, so that a CUDA graph can capture them.

CuPy refuses every cuBLAS call while a stream is being captured ("calling cuBLAS
API during stream capture is currently unsupported", measured with CuPy 14.2 on an
H200, for ``cupy.matmul`` and for its low-level ``cublas.sgemm`` alike), although
cuBLAS itself supports stream capture once its handle has a workspace of its own
(so that it allocates nothing while capturing). ``gt.function``'s graph replay
therefore calls ``cublasSgemm_v2``/``cublasDgemm_v2`` through ctypes, on a handle
of its own, for 2-D float32/float64 products; anything else goes to
``cupy.matmul`` (and, under capture, to the ordinary launches between graphs).

The layout logic is :func:`plan`: a row-major product ``C = A @ B`` is the
column-major product ``C^T = B^T A^T``, and a C-contiguous matrix is, read as
column-major memory, its own transpose; an F-contiguous one (a transposed view)
needs the transpose flag. It is pure Python and tested on the CPU against a
column-major reference; the calls themselves run only on a GPU.

>>> import numpy as np
>>> p = plan(np.ones((2, 3), np.float32), np.ones((4, 3), np.float32).T)
>>> (p.transa, p.transb, p.m, p.n, p.k, p.lda, p.ldb, p.ldc)
(1, 0, 4, 2, 3, 3, 3, 4)
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

import numpy as np

from . import backend

OP_N, OP_T = 0, 1  # cublasOperation_t
WORKSPACE_BYTES = 32 << 20  # cuBLAS asks for up to 32 MiB on Hopper


class Plan(NamedTuple):
    """Arguments of one column-major ``gemm`` computing the row-major ``a @ b``."""

    transa: int  # op on the first operand of the call (the memory of b)
    transb: int  # op on the second (the memory of a)
    m: int
    n: int
    k: int
    first: Any  # b, made C- or F-contiguous
    lda: int
    second: Any  # a, likewise
    ldb: int
    ldc: int


def _operand(x: Any, xp: Any) -> tuple[int, int, Any]:
    """(op, leading dimension, array) for a row-major r x c operand."""
    r, c = x.shape
    if x.flags.c_contiguous:
        return OP_N, max(c, 1), x  # column-major memory of x^T, which the product wants
    if x.flags.f_contiguous:
        return OP_T, max(r, 1), x  # column-major memory of x itself: transpose it
    x = xp.ascontiguousarray(x)
    return OP_N, max(c, 1), x


def plan(a: Any, b: Any) -> Plan:
    """The gemm call for ``a @ b`` (2-D, same dtype): ``C^T (n x m) = op(b_mem) op(a_mem)``."""
    xp = np if type(a) is np.ndarray else backend.xp_of(a)
    m, k = a.shape
    n = b.shape[1]
    opa, lda, a = _operand(a, xp)
    opb, ldb, b = _operand(b, xp)
    return Plan(opb, opa, n, m, k, b, ldb, a, lda, max(n, 1))


def reference_gemm(p: Plan) -> np.ndarray:
    """What cuBLAS computes for ``p``, by column-major rules on the operands' memory (tests)."""

    def colmajor(x: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
        flat = x.ravel(order="K")  # the memory, in address order
        return np.array([[flat[i + j * ld] for j in range(cols)] for i in range(rows)])

    # op(first) is m x k, op(second) is k x n: stored (before op) as m x k / k x m and k x n / n x k
    f = colmajor(p.first, *((p.m, p.k) if p.transa == OP_N else (p.k, p.m)), p.lda)
    s = colmajor(p.second, *((p.k, p.n) if p.transb == OP_N else (p.n, p.k)), p.ldb)
    f = f if p.transa == OP_N else f.T
    s = s if p.transb == OP_N else s.T
    ct = f @ s  # m x n column-major = the row-major result's transpose
    return ct.T


def _library_path() -> str:
    """The libcublas that CuPy loaded (so both use one library)."""
    cp = backend.cupy_module()
    cp.cuda.cublas  # noqa: B018 - make CuPy load cuBLAS if it has not yet
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.rsplit(None, 1)[-1]
            if "/libcublas.so" in path:
                return path
    raise OSError("libcublas is not loaded in this process (CuPy did not load cuBLAS)")


class Gemm:
    """cuBLAS sgemm/dgemm on a handle of our own with its own workspace (capturable)."""

    def __init__(self, device_index: int) -> None:
        cp = backend.cupy_module()
        lib = ctypes.CDLL(_library_path())
        vp, i = ctypes.c_void_p, ctypes.c_int
        lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
        lib.cublasSetStream_v2.argtypes = [vp, vp]
        lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
        gemm_args = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
        for name in (
            "cublasSgemm_v2",
            "cublasDgemm_v2",
            "cublasCreate_v2",
            "cublasSetStream_v2",
            "cublasSetWorkspace_v2",
        ):
            getattr(lib, name).restype = i
        lib.cublasSgemm_v2.argtypes = gemm_args
        lib.cublasDgemm_v2.argtypes = gemm_args
        self.lib = lib
        self.cp = cp
        self.device_index = device_index
        with cp.cuda.Device(device_index):
            self.handle = vp()
            self._check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
            self.workspace = cp.empty(WORKSPACE_BYTES, dtype=cp.uint8)
            self._check(
                lib.cublasSetWorkspace_v2(self.handle, self.workspace.data.ptr, WORKSPACE_BYTES), "cublasSetWorkspace"
            )
        self._scalars = {
            np.dtype(np.float32): (ctypes.c_float(1.0), ctypes.c_float(0.0), lib.cublasSgemm_v2),
            np.dtype(np.float64): (ctypes.c_double(1.0), ctypes.c_double(0.0), lib.cublasDgemm_v2),
        }
        self._stream = None

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"gputape.devices.cublas: {what} failed with cuBLAS status {status}")

    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b``: direct cuBLAS for 2-D float32/float64 operands of one dtype, else ``cupy.matmul``."""
        cp = self.cp
        if not (a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype and a.dtype in self._scalars) or (
            a.shape[1] != b.shape[0]
        ):
            return cp.matmul(a, b)
        p = plan(a, b)
        out = cp.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        if out.size == 0:
            return out
        if p.k == 0:
            out.fill(0)
            return out
        one, zero, gemm = self._scalars[a.dtype]
        stream = cp.cuda.get_current_stream().ptr
        if stream != self._stream:
            self._check(self.lib.cublasSetStream_v2(self.handle, stream), "cublasSetStream")
            self._stream = stream
        self._check(
            gemm(
                self.handle, p.transa, p.transb, p.m, p.n, p.k, ctypes.byref(one),
                p.first.data.ptr, p.lda, p.second.data.ptr, p.ldb, ctypes.byref(zero), out.data.ptr, p.ldc,
            ),
            "gemm",
        )  # fmt: skip
        return out


_gemms: dict[int, Any] = {}


def gemm_for(device_index: int) -> Gemm | None:
    """The device's :class:`Gemm`, or None when cuBLAS cannot be reached this way (logged once)."""
    g = _gemms.get(device_index)
    if g is None:
        try:
            g = Gemm(device_index)
        except (OSError, AttributeError, RuntimeError) as exc:
            import logging

            logging.getLogger("gputape").debug("gputape.devices.cublas: direct cuBLAS unavailable: %s", exc)
            g = False
        _gemms[device_index] = g
    return g or None


def captured_matmul(gemm: Gemm, a: Any, b: Any) -> Any:
    """``gemm.matmul(a, b)`` captured in a CUDA graph, its output poisoned, then the graph launched.

    The check that capture works (the GPU tests and ``benchmarks/gpu_cublas_smoke.py``):
    every element of the result must come from the graph's launch.
    """
    cp = gemm.cp
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        out = gemm.matmul(a, b)
        graph = s.end_capture()
        out.fill(np.nan)
        graph.launch(stream=s)
        s.synchronize()
    return out
