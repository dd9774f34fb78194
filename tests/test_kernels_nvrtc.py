"""Every CUDA kernel compiles under NVRTC for sm_80 and sm_90, on a machine without a GPU.

NVRTC is a compiler library: it needs no driver and no device. The test loads
``libnvrtc`` from the PyPI wheel ``nvidia-cuda-nvrtc`` (in the ``test`` and
``dev`` extras; CUDA 13, as cupy-cuda13x uses) with ctypes, so CI needs neither
cupy nor a CUDA toolkit, and compiles exactly the translation units that
``gputape.kernels.registry`` hands to cupy: each ``.cu`` module (after the generated
prelude of :mod:`gputape.core.expr`) and each ElementwiseKernel body wrapped in a harness
that declares its parameters the way cupy does, after the generated preamble (which
holds every activation's ``gt_<name>_fwd``, generated from its forward expression). A compile error, a warning, or a
kernel missing from the compiled module fails the test.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from pathlib import Path

import pytest

from gputape.kernels import registry as kernels

ARCHS = ("sm_80", "sm_90")
CTYPES = ("float", "double")


def _candidates() -> list[str]:
    """libnvrtc from the pip wheels first (what CI installs), then GPUTAPE_NVRTC."""
    out = []
    env = os.environ.get("GPUTAPE_NVRTC")
    if env:
        out.append(env)
    for base in sys.path:
        for pkg in ("nvidia/cu13", "nvidia/cuda_nvrtc"):  # nvidia-cuda-nvrtc (13), nvidia-cuda-nvrtc-cu12
            out += sorted(glob.glob(os.path.join(base, pkg, "lib", "libnvrtc.so.*")))  # Linux
            out += sorted(glob.glob(os.path.join(base, pkg, "bin", "**", "nvrtc64_*.dll"), recursive=True))
    return [p for p in out if "builtins" not in p and ".alt." not in p]


class NVRTC:
    """The five NVRTC calls the check needs, through ctypes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = lib = ctypes.CDLL(path)
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(status).decode()}")

    def compile(self, src: str, name: str, arch: str, options: tuple[str, ...] = ()) -> tuple[bool, str, list[str]]:
        """Compile ``src`` for ``arch``; return (ok, log, lowered names of ``expect``)."""
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(
            lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
            arr = (ctypes.c_char_p * len(opts))(*opts)
            status = lib.nvrtcCompileProgram(prog, len(opts), arr)
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace").strip()
            cubin = b""
            if status == 0:
                n = ctypes.c_size_t()
                self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "nvrtcGetCUBINSize")
                out = ctypes.create_string_buffer(n.value)
                self._check(lib.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
                cubin = out.raw
            return status == 0, log, cubin
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


@pytest.fixture(scope="module")
def nvrtc() -> NVRTC:
    if sys.platform == "darwin":
        pytest.skip("NVRTC has no macOS build; the compile check runs on Linux (CI) and Windows")
    errors = []
    for path in _candidates():
        try:
            return NVRTC(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    pytest.fail(
        "NVRTC not found: install the test extra (pip install -e '.[test]'), which brings the wheel "
        "nvidia-cuda-nvrtc, or point GPUTAPE_NVRTC at a libnvrtc.so. The kernel compile check must "
        "not be skipped silently. " + "; ".join(errors)
    )


def _assert_clean(ok: bool, log: str, what: str) -> None:
    assert ok, f"{what} does not compile:\n{log}"
    assert "warning" not in log.lower(), f"{what} compiles with warnings:\n{log}"


MODULE_CASES = [(m, a) for m in kernels.MODULES for a in ARCHS]


@pytest.mark.parametrize(("module", "arch"), MODULE_CASES, ids=[f"{m}-{a}" for m, a in MODULE_CASES])
def test_module_compiles(nvrtc, module, arch):
    ok, log, cubin = nvrtc.compile(kernels.module_source(module), f"{module}.cu", arch)
    _assert_clean(ok, log, f"kernels/{module}.cu for {arch}")
    for fn in kernels.MODULE_FUNCTIONS[module]:
        # extern "C" names appear verbatim in the cubin's symbol table
        assert fn.encode() in cubin, f"kernels/{module}.cu compiled for {arch} but has no kernel {fn}"


EW_CASES = [(n, t, a) for n in kernels.ELEMENTWISE for t in CTYPES for a in ARCHS]


@pytest.mark.parametrize(("name", "ctype", "arch"), EW_CASES, ids=[f"{n}-{t}-{a}" for n, t, a in EW_CASES])
def test_elementwise_body_compiles(nvrtc, name, ctype, arch):
    src = kernels.elementwise_harness(name, ctype)
    ok, log, cubin = nvrtc.compile(src, f"{name}.cu", arch)
    _assert_clean(ok, log, f"ElementwiseKernel {name} (T={ctype}) for {arch}")
    assert f"{name}_harness".encode() in cubin


def test_the_bias_activation_kernels_compile_the_generated_forwards():
    """The forward functions the gt_bias_* bodies above call are the ones generated from the
    activations' expressions (gputape.core.expr.forward.FORWARDS), each in its harness's preamble."""
    from gputape.core.expr.forward import FORWARDS

    for act in kernels.FORWARD_ACTIVATIONS:
        src = kernels.elementwise_harness(f"gt_bias_{act}", "float")
        assert FORWARDS[act].cuda() in src and f"gt_{act}_fwd(" in src.rsplit("typedef", 1)[1], act


def test_a_broken_kernel_fails_the_check(nvrtc):
    """The check can fail: a type error in a body is reported with NVRTC's log."""
    bad = 'extern "C" __global__ void k(float* x) { x[0] = undefined_fn(x[0]); }'
    ok, log, _ = nvrtc.compile(bad, "bad.cu", "sm_80")
    assert not ok
    assert "undefined_fn" in log


def test_every_cu_file_is_checked():
    """A new .cu file in kernels/ must be listed in gputape.kernels.registry.MODULES (and so compiled above)."""
    on_disk = {p.stem for p in Path(kernels.kernel_dir()).glob("*.cu")}
    assert on_disk == set(kernels.MODULES), f"kernels/*.cu {sorted(on_disk)} != MODULES {sorted(kernels.MODULES)}"


def test_nvrtc_is_the_pip_wheel(nvrtc):
    """CI must use the PyPI wheel, not a CUDA toolkit that happens to be on the machine."""
    if os.environ.get("GPUTAPE_NVRTC"):
        pytest.skip("GPUTAPE_NVRTC points at a chosen libnvrtc")
    assert "site-packages" in nvrtc.path or "dist-packages" in nvrtc.path, nvrtc.path
    assert nvrtc.version[0] >= 12


# The backward kernels generated from the registry's derivative expressions (gputape.core.expr):
# every primitive's standalone kernel (what its VJP launches on a GPU), all in one
# translation unit per type and architecture, as cupy compiles each with the same prelude.
def _declared_kernels():
    from gputape.core.expr import DERIVATIVES

    return [
        (d.kernel_name(k), *d.kernel(k))
        for d in DERIVATIVES.values()
        for k in range(len(d.inputs))
        if d.grads[k] is not None
    ]


DECL_CASES = [(t, a) for t in CTYPES for a in ARCHS]


@pytest.mark.parametrize(("ctype", "arch"), DECL_CASES, ids=[f"{t}-{a}" for t, a in DECL_CASES])
def test_every_declared_backward_kernel_compiles(nvrtc, ctype, arch):
    from gputape.core.expr import CUDA_PRELUDE, DERIVATIVES

    specs = _declared_kernels()
    assert len(specs) >= len(DERIVATIVES)
    src = CUDA_PRELUDE + "".join(kernels.harness(n, i, o, b, ctype) for n, i, o, b in specs)
    ok, log, cubin = nvrtc.compile(src, "declared_backward.cu", arch)
    _assert_clean(ok, log, f"the declared backward kernels (T={ctype}) for {arch}")
    for name, *_ in specs:
        assert f"{name}_harness".encode() in cubin, name


# gt.function's generated backward kernels: each fusable VJP expression alone, and all of
# them composed into one chain (the longest expression a fused kernel can hold), in one
# translation unit per type and architecture.
def _fused_cases():
    from gputape.core.expr import DERIVATIVES
    from gputape.function import compose

    out, chain = [], []
    for name, d in sorted(DERIVATIVES.items()):
        for k in range(len(d.inputs)):
            t = d.fusable(k)
            if t is not None:
                out.append((f"{name}{k}", *compose([t])))
                chain.append(t)
    out.append(("chain_of_all", *compose(chain)))
    return out


@pytest.mark.parametrize(("ctype", "arch"), DECL_CASES, ids=[f"{t}-{a}" for t, a in DECL_CASES])
def test_generated_backward_kernels_compile(nvrtc, ctype, arch):
    from gputape.core.expr import CUDA_PRELUDE
    from gputape.function import fused_kernel_source

    cases = _fused_cases()
    assert len(cases) > 30
    names, parts = [], [CUDA_PRELUDE]
    for serial, (_name, expr, nparams) in enumerate(cases):
        ins, outs, body, kname = fused_kernel_source(expr, nparams, serial)
        names.append(kname)
        parts.append(kernels.harness(kname, ins, outs, body, ctype))
    ok, log, cubin = nvrtc.compile("".join(parts), "fused_backward.cu", arch)
    _assert_clean(ok, log, f"generated backward kernels (T={ctype}) for {arch}")
    for (name, *_), kname in zip(cases, names):
        assert f"{kname}_harness".encode() in cubin, name


# The vectorised form of the backward kernels a VJP launches on a GPU (gt.config.set_vector_kernels):
# all in one translation unit per type and architecture (the prelude is include-guarded).
@pytest.mark.parametrize(("ctype", "arch"), DECL_CASES, ids=[f"{t}-{a}" for t, a in DECL_CASES])
def test_vectorised_backward_kernels_compile(nvrtc, ctype, arch):
    from gputape.core.expr import DERIVATIVES

    ds = [d for d in DERIVATIVES.values() if d.gpu_kernel]
    assert len(ds) >= 20  # every activation and most unary math functions
    ok, log, cubin = nvrtc.compile("".join(d.vector_source(ctype) for d in ds), "vector_backward.cu", arch)
    _assert_clean(ok, log, f"the vectorised backward kernels (T={ctype}) for {arch}")
    for d in ds:
        assert d.vector_name(ctype).encode() in cubin, d.name
