"""Building gputape's CUDA kernels: the sources, their NVRTC check harness, and compiling once per device.

The lowest layer of the kernel code: it knows where the ``.cu`` files are, how a
hand-written module is declared (:class:`CudaModule`, next to the primitive or
optimizer it serves), how cupy wraps an ElementwiseKernel body (:func:`harness`,
for the compile check) and keeps every compiled kernel per device. What the
kernels compute is declared elsewhere: :mod:`gputape.kernels.registry` (activations,
accumulation), :mod:`gputape.nn.functional` (sparse softmax cross-entropy),
:mod:`gputape.optim.fused` (the multi-tensor optimizer).

This module never imports cupy: it asks :mod:`gputape.devices.backend` for it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..core import expr
from ..devices import backend

_HERE = Path(__file__).resolve().parent
_CANDIDATE_DIRS = (_HERE.parent / "_kernels", _HERE.parent.parent / "kernels")


def kernel_dir() -> Path:
    """The folder holding the ``.cu`` sources (inside the wheel, or the repository's ``kernels/``).

    >>> (kernel_dir() / "softmax_xent.cu").is_file()
    True
    """
    for d in _CANDIDATE_DIRS:
        if (d / "softmax_xent.cu").is_file():
            return d
    raise FileNotFoundError(
        "gputape: the CUDA kernel sources (*.cu) were not found in "
        f"{' or '.join(str(d) for d in _CANDIDATE_DIRS)}; reinstall gputape"
    )


_text_cache: dict[str, str] = {}


def source(name: str) -> str:
    """The text of ``kernels/<name>`` (``"softmax_xent.cu"``, ...).

    >>> "gt_sparse_xent" in source("softmax_xent.cu")
    True
    """
    text = _text_cache.get(name)
    if text is None:
        text = _text_cache[name] = (kernel_dir() / name).read_text()
    return text


# -- compiling, memoized per device -----------------------------------------------------------

_lock = threading.Lock()
_ew_cache: dict[tuple[int, str], Any] = {}
_sm_cache: dict[int, int] = {}

KERNEL_DTYPES = expr.KERNEL_DTYPES
launch_dtype = expr.launch_dtype  # one rule for every kernel: float32/float64, float16 in float32
# A null pointer kernel argument: cupy marshals arguments by value without checking the
# signature, and a 64-bit zero is what a T* parameter reads as nullptr.
NULL = np.uint64(0)


def cupy_or_raise() -> Any:
    """cupy, or a RuntimeError that says why no GPU works."""
    cp = backend.cupy_module()
    if cp is None:
        raise RuntimeError(f"gputape.kernels.registry: {backend.cuda_unavailable_reason()}")
    return cp


def sm_count(device_id: int) -> int:
    """The number of streaming multiprocessors of GPU ``device_id`` (grid sizes scale with it)."""
    n = _sm_cache.get(device_id)
    if n is None:
        cp = cupy_or_raise()
        n = _sm_cache[device_id] = int(cp.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"])
    return n


def elementwise(name: str, ins: str, outs: str, body: str, preamble: str, device_id: int = 0) -> Any:
    """The ``cupy.ElementwiseKernel`` ``name`` (parameters, body, preamble) for GPU ``device_id``, built once."""
    key = (device_id, name)
    k = _ew_cache.get(key)
    if k is None:
        cp = cupy_or_raise()
        with _lock:
            k = _ew_cache.get(key)
            if k is None:
                with cp.cuda.Device(device_id):
                    k = cp.ElementwiseKernel(ins, outs, body, name, preamble=preamble)
                _ew_cache[key] = k
    return k


class CudaModule:
    """A hand-written ``kernels/<name>.cu`` and the ``extern "C"`` kernels it must define.

    Declared next to what it serves (the primitive or optimizer whose numpy code is its
    reference); compiled with cupy.RawModule once per device, after the expression
    language's functions (:data:`gputape.core.expr.CUDA_PRELUDE`: NVRTC has no include path).

    >>> m = CudaModule("softmax_xent", ("gt_sparse_xent_warp_f32_i32",))
    >>> "gt_exp" in m.source() and "gt_sparse_xent" in m.source()
    True
    """

    __slots__ = ("_fns", "_mods", "functions", "name")

    def __init__(self, name: str, functions: tuple[str, ...]) -> None:
        self.name = name
        self.functions = functions
        self._mods: dict[int, Any] = {}
        self._fns: dict[tuple[int, str], Any] = {}

    def source(self) -> str:
        """The translation unit cupy.RawModule compiles: the prelude, then ``kernels/<name>.cu``."""
        return expr.CUDA_PRELUDE + "\n" + source(f"{self.name}.cu")

    def function(self, fn: str, device_id: int = 0) -> Any:
        """Kernel ``fn`` compiled for GPU ``device_id``, built once."""
        key = (device_id, fn)
        f = self._fns.get(key)
        if f is None:
            if fn not in self.functions:
                raise KeyError(f"kernels/{self.name}.cu declares no kernel {fn!r}; known: {self.functions}")
            cp = cupy_or_raise()
            with _lock:
                f = self._fns.get(key)
                if f is None:
                    with cp.cuda.Device(device_id):
                        mod = self._mods.get(device_id)
                        if mod is None:
                            mod = self._mods[device_id] = cp.RawModule(code=self.source())
                        f = self._fns[key] = mod.get_function(fn)
        return f

    def __repr__(self) -> str:
        return f"<CudaModule kernels/{self.name}.cu: {len(self.functions)} kernels>"


# -- the compile check's harness ----------------------------------------------------------------

_CTYPES = {
    "T": "T",
    "float32": "float",
    "float64": "double",
    "float16": "half",
    "int32": "int",
    "int64": "long long",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
    "bool": "bool",
}


def parse_params(spec: str) -> list[tuple[str, str]]:
    out = []
    for part in spec.split(","):
        toks = part.split()
        if len(toks) != 2:  # 'raw T x' is not used by gputape's kernels
            raise ValueError(f"unsupported ElementwiseKernel parameter {part.strip()!r}")
        out.append((_CTYPES[toks[0]], toks[1]))
    return out


def harness(name: str, ins: str, outs: str, body: str, ctype: str, prelude: str = "") -> str:
    """A stand-alone CUDA translation unit wrapping an ElementwiseKernel body, with ``T`` =
    ``ctype``, the way cupy wraps it: inputs as ``const T`` values, outputs as ``T&``
    references, ``typedef`` inside the kernel. NVRTC compiles it in CI (every
    ElementwiseKernel of :mod:`gputape.kernels.registry`, and gt.function's generated backward kernels).

    >>> "out = g * 2;" in harness("k", "T g", "T out", "out = g * 2", "float")
    True
    """
    lines = [prelude, f'extern "C" __global__ void {name}_harness(void* const* args, long long n) {{']
    lines.append(f"  typedef {ctype} T;")
    lines.append("  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
    lines.append("  if (i >= n) return;")
    k = 0
    for ct, pname in parse_params(ins):
        lines.append(f"  const {ct} {pname} = static_cast<const {ct}*>(args[{k}])[i];")
        k += 1
    for ct, pname in parse_params(outs):
        lines.append(f"  {ct}& {pname} = static_cast<{ct}*>(args[{k}])[i];")
        k += 1
    lines.append(f"  {body};")
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__ = [
    "KERNEL_DTYPES",
    "NULL",
    "CudaModule",
    "cupy_or_raise",
    "elementwise",
    "harness",
    "kernel_dir",
    "launch_dtype",
    "parse_params",
    "sm_count",
    "source",
]
