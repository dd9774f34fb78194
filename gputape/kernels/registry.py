"""Fused GPU kernels and their numpy references (the CPU path, same math).

Every fused kernel is reachable here by name, with the numpy function that
defines it. On cupy arrays the public functions launch the kernel (compiled by
NVRTC on first use, memoized per device: :mod:`gputape.kernels.build`); on numpy
arrays they run the reference, which is the CPU path's own code. The
hand-written CUDA sources live in the top-level ``kernels/`` folder (shipped
inside the wheel as ``gputape/_kernels``) and are declared next to what they
serve; this module re-exports them:

* the activations' forward math ``gt_<name>_fwd`` is generated, not kept here:
  one expression per activation (:data:`gputape.core.expr.forward.FORWARDS`, declared beside
  the activations in :mod:`gputape.nn.functional`) renders the CUDA functions of
  :func:`preamble`, the CPU forward and :func:`ref_activation_forward`.
* ``softmax_xent.cu``: sparse softmax cross-entropy, loss and gradient in one
  row-wise pass (:func:`sparse_softmax_xent`), declared beside its primitive in
  :mod:`gputape.nn.functional`; its reference is that primitive's CPU forward and VJP.
* ``optimizers.cu``: SGD with momentum, Adam and AdamW over all parameters in
  one launch, step and learning rate on the device (:class:`FusedOptimizer`,
  :mod:`gputape.optim.fused`); its reference runs gt.optim's own update rules.

ElementwiseKernels (where cupy's broadcasting and indexing are worth having):
the activation backward fused with the incoming gradient
(:func:`activation_backward`; the bodies are generated from each activation's
derivative expression in :mod:`gputape.core.expr`, and the numpy reference is that
primitive's own generated VJP on numpy), bias-add + activation forward
(:func:`bias_activation`) and in-place gradient accumulation
(:func:`accumulate_`).

Kernels run in the arrays' own dtype, float32 or float64; float16 inputs run
in float32 and are cast back. ``tests/test_kernels_reference.py`` checks every
reference against plain numpy math on the CPU, ``tests/test_kernels_nvrtc.py``
compiles every source and ElementwiseKernel body for sm_80 and sm_90 without a
GPU, and ``tests/test_gpu.py`` compares each kernel with its reference on a GPU.

This module never imports cupy: it asks :mod:`gputape.devices.backend` for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import expr
from ..core.expr import forward as expr_forward
from ..devices import backend
from ..nn.functional import SOFTMAX_XENT, ref_sparse_softmax_xent, sparse_softmax_xent
from ..ops import raw_namespace
from ..optim.fused import KINDS, OPTIMIZERS, FusedOptimizer, ref_optimizer_update
from . import build as _kb
from .build import CudaModule, harness, kernel_dir, source

# -- the hand-written modules (kernels/<name>.cu), each declared beside what it serves ---------

_CUDA_MODULES: dict[str, CudaModule] = {m.name: m for m in (SOFTMAX_XENT, OPTIMIZERS)}
MODULES = tuple(_CUDA_MODULES)  # kernels/<name>.cu, loaded with cupy.RawModule
# Every extern "C" kernel each module must define (the loader and the NVRTC test use it).
MODULE_FUNCTIONS = {name: m.functions for name, m in _CUDA_MODULES.items()}


def module_source(name: str) -> str:
    """The full translation unit cupy.RawModule compiles for module ``name``: the expression
    language's functions followed by ``kernels/<name>.cu`` (NVRTC has no include path to it).

    >>> "gt_sparse_xent_warp_f32_i64" in module_source("softmax_xent")
    True
    """
    if name not in _CUDA_MODULES:
        raise KeyError(f"unknown kernel module {name!r}; known: {MODULES}")
    return _CUDA_MODULES[name].source()


def raw_function(module: str, fn: str, device_id: int = 0) -> Any:
    """Kernel ``fn`` of ``kernels/<module>.cu`` compiled for GPU ``device_id``, built once."""
    if module not in _CUDA_MODULES:
        raise KeyError(f"unknown kernel module {module!r}; known: {MODULES}")
    return _CUDA_MODULES[module].function(fn, device_id)


# -- the ElementwiseKernels --------------------------------------------------------------------

ACTIVATIONS = ("relu", "leaky_relu", "elu", "gelu", "gelu_tanh", "sigmoid", "tanh", "softplus")
# Residual each activation's backward reads: the forward output ("y") or input ("x"),
# as its derivative expression says.
BACKWARD_SAVES = {a: "y" if expr.DERIVATIVES[a].save_out else "x" for a in ACTIVATIONS}
_HAS_ALPHA = frozenset(a for a in ACTIVATIONS if expr.DERIVATIVES[a].params)
FORWARD_ACTIVATIONS = ("identity", *ACTIVATIONS)


def _elementwise_specs() -> dict[str, tuple[str, str, str]]:
    """name -> (in_params, out_params, body) of every ElementwiseKernel, all with
    :func:`preamble` as preamble. The activation backward bodies are generated."""
    specs: dict[str, tuple[str, str, str]] = {}
    for act in ACTIVATIONS:
        d = expr.DERIVATIVES[act]
        specs[d.kernel_name(0)] = d.kernel(0)
    for act in FORWARD_ACTIVATIONS:
        params = expr_forward.FORWARDS[act].params  # the generated gt_<act>_fwd(x, *params)
        args = ", ".join(("z", *params))
        extra = "".join(f", T {p}" for p in params)
        specs[f"gt_bias_{act}"] = (f"T x, T b{extra}", "T y", f"T z = x + b; y = gt_{act}_fwd({args})")
        specs[f"gt_bias_{act}_z"] = (f"T x, T b{extra}", "T z, T y", f"z = x + b; y = gt_{act}_fwd({args})")
    specs["gt_accumulate"] = ("T g, T scale", "T acc", "acc = acc + g * scale")
    return specs


ELEMENTWISE: dict[str, tuple[str, str, str]] = _elementwise_specs()


def preamble() -> str:
    """What every ElementwiseKernel starts with: the expression language's functions
    (:data:`gputape.core.expr.CUDA_PRELUDE`), then the activations' forward functions
    ``gt_<name>_fwd``, generated from their expressions (:data:`gputape.core.expr.forward.FORWARDS`).

    >>> "gt_exp" in preamble() and "gt_relu_fwd" in preamble()
    True
    """
    global _preamble
    if _preamble is None:
        _preamble = expr.CUDA_PRELUDE + "".join(expr_forward.FORWARDS[a].cuda() for a in FORWARD_ACTIVATIONS)
    return _preamble


_preamble: str | None = None


def elementwise_harness(name: str, ctype: str) -> str:
    """ElementwiseKernel ``name``'s body as a stand-alone CUDA translation unit with ``T`` =
    ``ctype``, after :func:`preamble`, as cupy compiles it (:func:`harness`). NVRTC compiles it in CI.

    >>> "out = g * (a0 > T(0))" in elementwise_harness("gt_relu_bwd", "float")
    True
    """
    ins, outs, body = ELEMENTWISE[name]
    return harness(name, ins, outs, body, ctype, preamble())


def elementwise_kernel(name: str, device_id: int = 0) -> Any:
    """The ``cupy.ElementwiseKernel`` ``name`` for GPU ``device_id``, built once."""
    ins, outs, body = ELEMENTWISE[name]
    return _kb.elementwise(name, ins, outs, body, preamble(), device_id)


def compile_all(device_id: int = 0) -> list[str]:
    """Build every ElementwiseKernel (float32 and float64) and RawModule function on a GPU.

    Returns the names built. Raises with the reason when no GPU works. A warm-up
    for benchmarks and the check that a driver accepts every kernel.
    """
    cp = _kb.cupy_or_raise()
    built = []
    with cp.cuda.Device(device_id):
        for dt in (cp.float32, cp.float64):
            for name, (ins, outs, _) in ELEMENTWISE.items():
                args = [cp.ones(4, dt) for _ in _kb.parse_params(ins)]
                outs_ = [cp.zeros(4, dt) for _ in _kb.parse_params(outs)]
                elementwise_kernel(name, device_id)(*args, *outs_)
                built.append(f"{name}<{np.dtype(dt).name}>")
        for module, fns in MODULE_FUNCTIONS.items():
            for fn in fns:
                raw_function(module, fn, device_id)
                built.append(f"{module}.{fn}")
        cp.cuda.Device(device_id).synchronize()
    return built


# -- numpy references (the CPU path) -----------------------------------------------------------


def _c(v: Any, like: np.ndarray) -> Any:
    """A coefficient in the array's dtype: the kernel computes in T, so must the reference."""
    return like.dtype.type(v)


def ref_activation_forward(name: str, z: np.ndarray, alpha: float | None = None) -> np.ndarray:
    """Activation ``name`` of ``z`` (numpy): the forward the CPU runs, generated from the same
    expression as ``gt_<name>_fwd`` (:data:`gputape.core.expr.forward.FORWARDS`).

    For the primitives (relu, sigmoid, ...) this is the primitive's own forward on numpy; gelu
    is composed, and runs its expression on the raw numpy namespace of gputape's ops.

    >>> import numpy as np
    >>> ref_activation_forward("relu", np.array([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    if name not in FORWARD_ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {FORWARD_ACTIVATIONS}")
    f = expr_forward.FORWARDS[name]
    params = {"alpha": _alpha(name, alpha)} if name in _HAS_ALPHA else {}
    return f.fn(np if f.array_native else raw_namespace(np), z, **params)


def _alpha(name: str, alpha: float | None) -> float:
    if alpha is None:
        return 0.2 if name == "leaky_relu" else 1.0  # TensorFlow's defaults
    return float(alpha)


def ref_activation_backward(name: str, saved: np.ndarray, g: np.ndarray, alpha: float | None = None) -> np.ndarray:
    """The cotangent of activation ``name``'s input, fused with the incoming ``g`` (numpy).

    ``saved`` is the forward output for relu/sigmoid/tanh and the forward input
    for the others (:data:`BACKWARD_SAVES`), as the primitives save them. This is
    the primitive's generated VJP itself, run on numpy: the CPU path.

    >>> import numpy as np
    >>> ref_activation_backward("relu", np.array([0.0, 3.0]), np.array([5.0, 5.0])).tolist()
    [0.0, 5.0]
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {ACTIVATIONS}")
    d = expr.DERIVATIVES[name]
    node = _ParamsOnly({"alpha": _alpha(name, alpha)} if name in _HAS_ALPHA else {})
    (out,) = d.vjp(raw_namespace(np), g, (True,), 0, node, saved)
    return out


class _ParamsOnly:
    """What a generated VJP reads of its node: the parameters."""

    __slots__ = ("params",)

    def __init__(self, params: dict) -> None:
        self.params = params


def ref_bias_activation(
    x: np.ndarray, b: np.ndarray, name: str = "identity", alpha: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``z = x + b`` (b broadcast over leading axes) and ``y = act(z)`` (numpy).

    >>> import numpy as np
    >>> z, y = ref_bias_activation(np.array([[-2.0, 1.0]]), np.array([1.0, 1.0]), "relu")
    >>> z.tolist(), y.tolist()
    ([[-1.0, 2.0]], [[0.0, 2.0]])
    """
    z = x + b
    return z, ref_activation_forward(name, z, alpha)


def ref_accumulate_(acc: np.ndarray, g: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """``acc += g * scale`` in place (numpy); returns ``acc``.

    >>> import numpy as np
    >>> ref_accumulate_(np.ones(2), np.array([1.0, 2.0]), 0.5).tolist()
    [1.5, 2.0]
    """
    np.add(acc, g * _c(scale, acc), out=acc)
    return acc


# -- dispatch: kernel on cupy, reference on numpy ------------------------------------------------


def activation_backward(name: str, saved: Any, g: Any, alpha: float | None = None) -> Any:
    """The cotangent of an activation's input, fused with the incoming ``g``, in one pass.

    ``saved`` is what the primitive saved (:data:`BACKWARD_SAVES`: the output for
    relu/sigmoid/tanh, the input otherwise); ``g`` may carry leading batch axes
    (it broadcasts against ``saved``). One generated kernel on a GPU, the numpy
    reference on the CPU.

    >>> import numpy as np
    >>> activation_backward("tanh", np.array([0.5]), np.array([2.0])).tolist()
    [1.5]
    """
    if type(g) is np.ndarray or not backend.is_gpu_array(g):
        return ref_activation_backward(name, np.asarray(saved), g, alpha)
    if name not in BACKWARD_SAVES:
        raise ValueError(f"unknown activation {name!r}; known: {ACTIVATIONS}")
    extra = (_alpha(name, alpha),) if name in _HAS_ALPHA else ()
    out = expr.DERIVATIVES[name]._gpu(g, saved, *extra)
    if out is None:
        raise TypeError(f"activation_backward({name!r}): no kernel for dtypes {saved.dtype} and {g.dtype}")
    return out


def bias_activation(
    x: Any, b: Any, name: str = "identity", alpha: float | None = None, return_preactivation: bool = False
) -> Any:
    """``act(x + b)`` in one pass (``b`` broadcast over the leading axes, as a Dense bias).

    With ``return_preactivation=True`` returns ``(z, y)``, ``z = x + b``, for
    activations whose backward needs the input (gelu, elu, ...).

    >>> import numpy as np
    >>> bias_activation(np.array([[-2.0, 1.0]]), np.array([1.0, 1.0]), "relu").tolist()
    [[0.0, 2.0]]
    """
    if name not in FORWARD_ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {FORWARD_ACTIVATIONS}")
    if type(x) is np.ndarray or not backend.is_gpu_array(x):
        z, y = ref_bias_activation(x, np.asarray(b), name, alpha)
        return (z, y) if return_preactivation else y
    out_dt = np.result_type(x.dtype, b.dtype)
    dt = _kb.launch_dtype(out_dt)
    if dt is None:
        raise TypeError(f"bias_activation({name!r}): no kernel for dtypes {x.dtype} and {b.dtype}")
    xx = x if x.dtype == dt else x.astype(dt)
    bb = b if b.dtype == dt else b.astype(dt)
    k = elementwise_kernel(f"gt_bias_{name}_z" if return_preactivation else f"gt_bias_{name}", x.device.id)
    extra = (_alpha(name, alpha),) if name in _HAS_ALPHA else ()
    with x.device:
        res = k(xx, bb, *extra)
    if return_preactivation:
        z, y = res
        return (z, y) if dt == out_dt else (z.astype(out_dt), y.astype(out_dt))
    return res if dt == out_dt else res.astype(out_dt)


def accumulate_(acc: Any, g: Any, scale: float = 1.0) -> Any:
    """``acc += g * scale`` in place, one pass (gradient accumulation); returns ``acc``.

    ``g`` broadcasts to ``acc``'s shape. ``acc`` must be an array the caller
    owns: nothing else (a tape, a user) may hold it.

    >>> import numpy as np
    >>> a = np.zeros(2); _ = accumulate_(a, np.ones(2)); a.tolist()
    [1.0, 1.0]
    """
    if type(acc) is np.ndarray or not backend.is_gpu_array(acc):
        return ref_accumulate_(acc, g, scale)
    if acc.dtype not in _kb.KERNEL_DTYPES:
        acc += g * scale  # float16: cupy's own kernels
        return acc
    gg = g if getattr(g, "dtype", None) == acc.dtype else backend.xp_of(acc).asarray(g, acc.dtype)
    with acc.device:
        elementwise_kernel("gt_accumulate", acc.device.id)(gg, scale, acc)
    return acc


__all__ = [
    "ACTIVATIONS",
    "BACKWARD_SAVES",
    "ELEMENTWISE",
    "FORWARD_ACTIVATIONS",
    "KINDS",
    "MODULES",
    "MODULE_FUNCTIONS",
    "CudaModule",
    "FusedOptimizer",
    "accumulate_",
    "activation_backward",
    "bias_activation",
    "compile_all",
    "elementwise_harness",
    "elementwise_kernel",
    "harness",
    "kernel_dir",
    "module_source",
    "preamble",
    "raw_function",
    "ref_accumulate_",
    "ref_activation_backward",
    "ref_activation_forward",
    "ref_bias_activation",
    "ref_optimizer_update",
    "ref_sparse_softmax_xent",
    "source",
    "sparse_softmax_xent",
]
