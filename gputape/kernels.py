"""Fused GPU kernels and their numpy references (the CPU path, same math).

Each fused kernel is declared once here, by name, with the numpy function that
defines it. On cupy arrays the public functions launch the kernel (compiled by
NVRTC on first use, memoized per device); on numpy arrays they run the
reference. The CUDA sources live in the top-level ``kernels/`` folder (shipped
inside the wheel as ``gputape/_kernels``):

* the activations' forward math ``gt_<name>_fwd`` is generated, not kept here:
  one expression per activation (:data:`gputape.expr.FORWARDS`, declared beside
  the activations in :mod:`gputape.nn.functional`) renders the CUDA functions of
  :func:`preamble`, the CPU forward and :func:`ref_activation_forward`.
* ``softmax_xent.cu``: sparse softmax cross-entropy, loss and gradient in one
  row-wise pass (:func:`sparse_softmax_xent`).
* ``optimizers.cu``: SGD with momentum, Adam and AdamW over all parameters in
  one launch, step and learning rate on the device (:class:`FusedOptimizer`).

ElementwiseKernels (where cupy's broadcasting and indexing are worth having):
the activation backward fused with the incoming gradient
(:func:`activation_backward`; the bodies are generated from each activation's
derivative expression in :mod:`gputape.expr`, and the numpy reference is that
primitive's own generated VJP on numpy), bias-add + activation forward
(:func:`bias_activation`) and in-place gradient accumulation
(:func:`accumulate_`).

Kernels run in the arrays' own dtype, float32 or float64; float16 inputs run
in float32 and are cast back. ``tests/test_kernels_reference.py`` checks every
reference against plain numpy math on the CPU, ``tests/test_kernels_nvrtc.py``
compiles every source and ElementwiseKernel body for sm_80 and sm_90 without a
GPU, and ``tests/test_gpu.py`` compares each kernel with its reference on a GPU.

This module never imports cupy: it asks :mod:`gputape.backend` for it.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from . import backend, expr
from .ops import raw_namespace

# -- sources -----------------------------------------------------------------------------

_HERE = Path(__file__).resolve().parent
_CANDIDATE_DIRS = (_HERE / "_kernels", _HERE.parent / "kernels")


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


MODULES = ("softmax_xent", "optimizers")  # kernels/<name>.cu, loaded with cupy.RawModule

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


def preamble() -> str:
    """What every ElementwiseKernel starts with: the expression language's functions
    (:data:`gputape.expr.CUDA_PRELUDE`), then the activations' forward functions
    ``gt_<name>_fwd``, generated from their expressions (:data:`gputape.expr.FORWARDS`).

    >>> "gt_exp" in preamble() and "gt_relu_fwd" in preamble()
    True
    """
    global _preamble
    if _preamble is None:
        _preamble = expr.CUDA_PRELUDE + "".join(expr.FORWARDS[a].cuda() for a in FORWARD_ACTIVATIONS)
    return _preamble


_preamble: str | None = None


def module_source(name: str) -> str:
    """The full translation unit cupy.RawModule compiles for module ``name``: the shared
    math (:func:`preamble`) followed by ``kernels/<name>.cu`` (NVRTC has no include path to it).

    >>> "gt_sparse_xent_warp_f32_i64" in module_source("softmax_xent")
    True
    """
    if name not in MODULES:
        raise KeyError(f"unknown kernel module {name!r}; known: {MODULES}")
    return preamble() + "\n" + source(f"{name}.cu")


# Every extern "C" kernel each module must define (the loader and the NVRTC test use it).
MODULE_FUNCTIONS = {
    "softmax_xent": tuple(
        f"gt_sparse_xent_{g}_{t}_{i}" for g in ("warp", "block") for t in ("f32", "f64") for i in ("i32", "i64")
    ),
    "optimizers": ("gt_optimizer_update_f32", "gt_optimizer_update_f64"),
}

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
        args = "z, alpha" if act in _HAS_ALPHA else "z"
        extra = ", T alpha" if act in _HAS_ALPHA else ""
        specs[f"gt_bias_{act}"] = (f"T x, T b{extra}", "T y", f"T z = x + b; y = gt_{act}_fwd({args})")
        specs[f"gt_bias_{act}_z"] = (f"T x, T b{extra}", "T z, T y", f"z = x + b; y = gt_{act}_fwd({args})")
    specs["gt_accumulate"] = ("T g, T scale", "T acc", "acc = acc + g * scale")
    return specs


ELEMENTWISE: dict[str, tuple[str, str, str]] = _elementwise_specs()

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


def _params(spec: str) -> list[tuple[str, str]]:
    out = []
    for part in spec.split(","):
        toks = part.split()
        if len(toks) != 2:  # 'raw T x' is not used by gputape's kernels
            raise ValueError(f"unsupported ElementwiseKernel parameter {part.strip()!r}")
        out.append((_CTYPES[toks[0]], toks[1]))
    return out


def elementwise_harness(name: str, ctype: str) -> str:
    """A stand-alone CUDA translation unit wrapping ElementwiseKernel ``name``'s body,
    with ``T`` = ``ctype``, the way cupy wraps it: inputs as ``const T`` values, outputs
    as ``T&`` references, ``typedef`` inside the kernel. NVRTC compiles it in CI.

    >>> "out = g * (a0 > T(0))" in elementwise_harness("gt_relu_bwd", "float")
    True
    """
    ins, outs, body = ELEMENTWISE[name]
    return harness(name, ins, outs, body, ctype, preamble())


def harness(name: str, ins: str, outs: str, body: str, ctype: str, prelude: str = "") -> str:
    """The translation unit of :func:`elementwise_harness` for any ElementwiseKernel spec
    (``gt.function``'s generated backward kernels are checked with it too).

    >>> "out = g * 2;" in harness("k", "T g", "T out", "out = g * 2", "float")
    True
    """
    lines = [prelude, f'extern "C" __global__ void {name}_harness(void* const* args, long long n) {{']
    lines.append(f"  typedef {ctype} T;")
    lines.append("  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
    lines.append("  if (i >= n) return;")
    k = 0
    for ct, pname in _params(ins):
        lines.append(f"  const {ct} {pname} = static_cast<const {ct}*>(args[{k}])[i];")
        k += 1
    for ct, pname in _params(outs):
        lines.append(f"  {ct}& {pname} = static_cast<{ct}*>(args[{k}])[i];")
        k += 1
    lines.append(f"  {body};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- loading, memoized per device ------------------------------------------------------------

_lock = threading.Lock()
_ew_cache: dict[tuple[int, str], Any] = {}
_fn_cache: dict[tuple[int, str], Any] = {}
_mod_cache: dict[tuple[int, str], Any] = {}
_sm_cache: dict[int, int] = {}


def _cp() -> Any:
    cp = backend.cupy_module()
    if cp is None:
        raise RuntimeError(f"gputape.kernels: {backend.cuda_unavailable_reason()}")
    return cp


def elementwise_kernel(name: str, device_id: int = 0) -> Any:
    """The ``cupy.ElementwiseKernel`` ``name`` for GPU ``device_id``, built once."""
    key = (device_id, name)
    k = _ew_cache.get(key)
    if k is None:
        cp = _cp()
        ins, outs, body = ELEMENTWISE[name]
        with _lock:
            k = _ew_cache.get(key)
            if k is None:
                with cp.cuda.Device(device_id):
                    k = cp.ElementwiseKernel(ins, outs, body, name, preamble=preamble())
                _ew_cache[key] = k
    return k


def raw_function(module: str, fn: str, device_id: int = 0) -> Any:
    """Kernel ``fn`` of ``kernels/<module>.cu`` compiled for GPU ``device_id``, built once."""
    key = (device_id, fn)
    f = _fn_cache.get(key)
    if f is None:
        cp = _cp()
        with _lock:
            f = _fn_cache.get(key)
            if f is None:
                with cp.cuda.Device(device_id):
                    mod = _mod_cache.get((device_id, module))
                    if mod is None:
                        mod = _mod_cache[(device_id, module)] = cp.RawModule(code=module_source(module))
                    f = _fn_cache[key] = mod.get_function(fn)
    return f


def _sm_count(device_id: int) -> int:
    n = _sm_cache.get(device_id)
    if n is None:
        cp = _cp()
        n = _sm_cache[device_id] = int(cp.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"])
    return n


def compile_all(device_id: int = 0) -> list[str]:
    """Build every ElementwiseKernel (float32 and float64) and RawModule function on a GPU.

    Returns the names built. Raises with the reason when no GPU works. A warm-up
    for benchmarks and the check that a driver accepts every kernel.
    """
    cp = _cp()
    built = []
    with cp.cuda.Device(device_id):
        for dt in (cp.float32, cp.float64):
            for name, (ins, outs, _) in ELEMENTWISE.items():
                args = [cp.ones(4, dt) for _ in _params(ins)]
                outs_ = [cp.zeros(4, dt) for _ in _params(outs)]
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
    expression as ``gt_<name>_fwd`` (:data:`gputape.expr.FORWARDS`).

    For the primitives (relu, sigmoid, ...) this is the primitive's own forward on numpy; gelu
    is composed, and runs its expression on the raw numpy namespace of gputape's ops.

    >>> import numpy as np
    >>> ref_activation_forward("relu", np.array([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    if name not in FORWARD_ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {FORWARD_ACTIVATIONS}")
    f = expr.FORWARDS[name]
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


def ref_sparse_softmax_xent(
    logits: np.ndarray, labels: np.ndarray, g: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row loss ``logsumexp(x) - x[label]`` and gradient ``(softmax(x) - onehot) * g`` (numpy).

    The row max is subtracted first (nothing overflows); a label outside
    ``[0, C)`` gives NaN in that row's loss and gradient, as the kernel does.

    >>> import numpy as np
    >>> loss, d = ref_sparse_softmax_xent(np.zeros((1, 2)), np.array([0]))
    >>> loss.round(4).tolist(), d.tolist()
    ([0.6931], [[-0.5, 0.5]])
    """
    c = logits.shape[-1]
    if c == 0:
        raise ValueError("sparse_softmax_xent: logits have no classes (last axis of size 0)")
    lab = np.asarray(labels).astype(np.intp)
    m = logits.max(axis=-1, keepdims=True)
    e = np.exp(logits - m)
    s = e.sum(axis=-1, keepdims=True)
    valid = (lab >= 0) & (lab < c)
    safe = np.where(valid, lab, 0)[..., None]
    picked = np.take_along_axis(logits, safe, axis=-1)[..., 0]
    loss = np.log(s[..., 0]) - (picked - m[..., 0])
    d = e * (1 / s)
    np.put_along_axis(d, safe, np.take_along_axis(d, safe, axis=-1) - 1, axis=-1)
    if g is not None:
        d = d * np.asarray(g, logits.dtype)[..., None]
    if not valid.all():
        loss = np.where(valid, loss, np.nan).astype(logits.dtype)
        d = np.where(valid[..., None], d, np.nan).astype(logits.dtype)
    return loss.astype(logits.dtype, copy=False), d.astype(logits.dtype, copy=False)


def ref_accumulate_(acc: np.ndarray, g: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """``acc += g * scale`` in place (numpy); returns ``acc``.

    >>> import numpy as np
    >>> ref_accumulate_(np.ones(2), np.array([1.0, 2.0]), 0.5).tolist()
    [1.5, 2.0]
    """
    np.add(acc, g * _c(scale, acc), out=acc)
    return acc


KINDS = {"sgd": 0, "adam": 1, "adamw": 1}


def ref_optimizer_update(
    kind: str,
    params: list[np.ndarray],
    grads: list[np.ndarray],
    slot1: list[np.ndarray | None],
    slot2: list[np.ndarray | None],
    step: np.ndarray,
    parity: int,
    lr: np.ndarray,
    momentum: float = 0.0,
    nesterov: bool = False,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-7,
    weight_decay: float = 0.0,
) -> None:
    """One optimizer update of every parameter, in place (numpy): ``optimizers.cu``'s math.

    ``step`` holds the ping-pong counter (reads ``step[parity]``, writes
    ``step[parity ^ 1] = step[parity] + 1``), ``lr`` a one-element float64
    array. The update runs in each parameter's dtype with coefficients cast to
    it, as ``gputape.optim`` computes it (Keras' forms; decoupled weight decay).

    >>> import numpy as np
    >>> p = [np.array([1.0])]; st = np.zeros(2, np.int64)
    >>> ref_optimizer_update("adam", p, [np.array([5.0])], [np.zeros(1)], [np.zeros(1)], st, 0, np.array([0.1]))
    >>> round(float(p[0][0]), 4), st.tolist()
    (0.9, [0, 1])
    """
    k = KINDS[kind]
    t = int(step[parity]) + 1
    step[parity ^ 1] = t
    lr_ = float(lr[0])
    for i, (p, g) in enumerate(zip(params, grads)):
        T = p.dtype.type
        if weight_decay:
            p -= p * T(lr_ * weight_decay)
        if k == 0:
            if momentum == 0.0:
                p -= g * T(lr_)
            else:
                m = slot1[i]
                m *= T(momentum)
                m -= g * T(lr_)
                if nesterov:
                    p += m * T(momentum) - g * T(lr_)
                else:
                    p += m
        else:
            m, v = slot1[i], slot2[i]
            alpha = T(lr_ * math.sqrt(1.0 - beta_2**t) / (1.0 - beta_1**t))
            m += (g - m) * T(1.0 - beta_1)
            v += (g * g - v) * T(1.0 - beta_2)
            p -= (m * alpha) / (np.sqrt(v) + T(epsilon))


# -- dispatch: kernel on cupy, reference on numpy ------------------------------------------------

_KERNEL_DTYPES = expr.KERNEL_DTYPES
_launch_dtype = expr.launch_dtype  # one rule for every kernel: float32/float64, float16 in float32
# A null pointer kernel argument: cupy marshals arguments by value without checking the
# signature, and a 64-bit zero is what a T* parameter reads as nullptr.
_NULL = np.uint64(0)


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
    dt = _launch_dtype(out_dt)
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
    if acc.dtype not in _KERNEL_DTYPES:
        acc += g * scale  # float16: cupy's own kernels
        return acc
    gg = g if getattr(g, "dtype", None) == acc.dtype else backend.xp_of(acc).asarray(g, acc.dtype)
    with acc.device:
        elementwise_kernel("gt_accumulate", acc.device.id)(gg, scale, acc)
    return acc


def sparse_softmax_xent(logits: Any, labels: Any, g: Any = None, loss: bool = True, grad: bool = True) -> tuple:
    """Sparse softmax cross-entropy, loss and gradient in ONE row-wise pass.

    ``logits`` is ``(..., C)``, ``labels`` integers of shape ``logits.shape[:-1]``,
    ``g`` None (cotangent 1) or the per-example cotangent of that shape. Returns
    ``(loss, dlogits)``, each None when not asked for; ``dlogits = (softmax -
    onehot) * g[..., None]``.

    >>> import numpy as np
    >>> l, d = sparse_softmax_xent(np.zeros((1, 2)), np.array([1]))
    >>> l.round(4).tolist(), d.tolist()
    ([0.6931], [[0.5, -0.5]])
    """
    if type(logits) is np.ndarray or not backend.is_gpu_array(logits):
        lo, d = ref_sparse_softmax_xent(logits, backend.to_host(labels), None if g is None else backend.to_host(g))
        return (lo if loss else None, d if grad else None)
    cp = _cp()
    shape = logits.shape
    if not shape or shape[-1] == 0:
        raise ValueError(f"sparse_softmax_xent: logits must have a non-empty last axis, got shape {shape}")
    out_dt = logits.dtype
    dt = _launch_dtype(out_dt)
    if dt is None:
        raise TypeError(f"sparse_softmax_xent: no kernel for logits of dtype {out_dt}")
    c = shape[-1]
    n = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    dev = logits.device.id
    with logits.device:
        x = cp.ascontiguousarray(logits, dtype=dt).reshape(n, c)
        lab = labels if backend.is_gpu_array(labels) else backend.asarray_on(labels, f"cuda:{dev}")  # counted
        if lab.shape != shape[:-1]:
            raise ValueError(f"sparse_softmax_xent: labels shape {lab.shape} must equal logits.shape[:-1] {shape[:-1]}")
        if lab.dtype not in (np.int32, np.int64):
            lab = lab.astype(np.int64)
        lab = cp.ascontiguousarray(lab).reshape(n)
        gg = None
        if g is not None:
            g = g if backend.is_gpu_array(g) else backend.asarray_on(g, f"cuda:{dev}", dt)  # counted
            gg = cp.ascontiguousarray(cp.broadcast_to(g.astype(dt, copy=False), shape[:-1])).reshape(n)
        lo = cp.empty(n, dt) if loss else None
        d = cp.empty((n, c), dt) if grad else None
        sms = _sm_count(dev)
        block = c > 1024 and n < 16 * sms  # few long rows: a whole block per row
        name = "gt_sparse_xent_{}_{}_{}".format(
            "block" if block else "warp",
            "f32" if dt == np.float32 else "f64",
            "i32" if lab.dtype == np.int32 else "i64",
        )
        rows_per_block = 1 if block else 8
        grid = max(1, min((n + rows_per_block - 1) // rows_per_block, sms * 32))
        f = raw_function("softmax_xent", name, dev)
        args = [_NULL if a is None else a for a in (x, lab, gg, lo, d)]
        f((grid,), (256,), (*args, np.int64(n), np.int64(c)))
    lo = None if lo is None else lo.reshape(shape[:-1])
    d = None if d is None else d.reshape(shape)
    if dt != out_dt:
        lo = None if lo is None else lo.astype(out_dt)
        d = None if d is None else d.astype(out_dt)
    return lo, d


# -- the multi-tensor optimizer -----------------------------------------------------------


class _Tables:
    """Device copies of (pointer table + prefix sums), cached by their content.

    cupy's pool hands the same blocks back step after step, so gradient
    pointers recur and most steps find their table here with no upload. A miss
    copies from page-locked host memory on the current stream: asynchronous,
    never a device synchronisation.
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._entries: OrderedDict[tuple, tuple[Any, Any, Any]] = OrderedDict()

    def get(self, cp: Any, key: tuple, ptrs: list[int], offsets: list[int]) -> Any:
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit[0]
        host = backend.pinned_empty(len(ptrs) + len(offsets), np.int64)
        host[: len(ptrs)] = np.array(ptrs, np.uint64).view(np.int64)
        host[len(ptrs) :] = offsets
        dev = cp.empty(host.shape, cp.int64)
        stream = cp.cuda.get_current_stream()
        dev.set(host, stream=stream)
        ev = stream.record()
        self._entries[key] = (dev, host, ev)
        if len(self._entries) > self._size:
            _, (_, _, old_ev) = self._entries.popitem(last=False)
            old_ev.synchronize()  # its pinned buffer may be reused only once its copy is done
        return dev


class FusedOptimizer:
    """SGD (with momentum), Adam or AdamW updating every parameter in ONE launch per dtype.

    The step counter and the learning rate live on the parameters' device, so a
    training loop never waits for the host. :meth:`update` takes parameter
    arrays (or Variables: those a live tape still holds are copied first, so a
    saved value never changes) and gradient arrays; slots (momentum/velocity)
    are kept here unless passed in. On numpy arrays the same object runs the
    reference (:func:`ref_optimizer_update`), step and learning rate in numpy.

    >>> import numpy as np
    >>> opt = FusedOptimizer("adam", 0.1)
    >>> w = np.array([1.0])
    >>> opt.update([w], [np.array([5.0])])
    >>> round(float(w[0]), 4), opt.iterations
    (0.9, 1)
    """

    def __init__(
        self,
        kind: str,
        learning_rate: float = 0.001,
        *,
        momentum: float = 0.0,
        nesterov: bool = False,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        weight_decay: float | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"FusedOptimizer: kind must be one of {sorted(KINDS)}, got {kind!r}")
        self.kind = kind
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        if weight_decay is None:
            weight_decay = 0.004 if kind == "adamw" else 0.0  # Keras' AdamW default
        self.weight_decay = float(weight_decay)
        self._lr0 = float(learning_rate)
        self._xp: Any = None
        self._step: Any = None  # int64[2], ping-pong (see optimizers.cu)
        self._lr: Any = None  # float64[1]
        self._parity = 0
        self._slots: list[tuple[Any, Any]] | None = None
        self._tables = _Tables()

    # -- device state ------------------------------------------------------------------
    def _init_state(self, like: Any) -> None:
        xp = backend.xp_of(like)
        self._xp = xp
        if xp is np:
            self._step = np.zeros(2, np.int64)
            self._lr = np.full(1, self._lr0, np.float64)
        else:
            with like.device:
                self._step = xp.zeros(2, xp.int64)
                self._lr = xp.full(1, self._lr0, xp.float64)

    @property
    def learning_rate(self) -> float:
        """The learning rate (reading it from a GPU waits for the device)."""
        return self._lr0 if self._lr is None else float(self._lr[0])

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._lr0 = float(value)
        if self._lr is not None:
            self._lr.fill(self._lr0)  # a device-side fill: no synchronisation

    @property
    def iterations(self) -> int:
        """Updates applied so far (reading it from a GPU waits for the device)."""
        return 0 if self._step is None else int(self._step[self._parity])

    @iterations.setter
    def iterations(self, value: int) -> None:
        if self._step is None:
            raise RuntimeError("FusedOptimizer.iterations: set it after the first update (the device is not known yet)")
        self._step.fill(int(value))

    def slots(self) -> list[tuple[Any, Any]]:
        """``(momentum, velocity)`` per parameter (None where the kind keeps none)."""
        return list(self._slots or ())

    # -- the update --------------------------------------------------------------------
    def _arrays(self, params: list[Any]) -> list[Any]:
        from .tensor import Variable

        out = []
        for p in params:
            if isinstance(p, Variable):
                # Copy-on-write, before taking a reference of our own (which would make
                # every variable look shared): a value a live tape saved never changes.
                if not p._exclusive():
                    p._data = p._data.copy()
                out.append(p._data)
            elif hasattr(p, "_data"):
                raise TypeError("FusedOptimizer.update: parameters must be Variables or arrays, not constant Tensors")
            else:
                out.append(p)
        return out

    def _make_slots(self, arrays: list[Any]) -> list[tuple[Any, Any]]:
        xp = self._xp
        need_m = self.kind != "sgd" or self.momentum != 0.0
        need_v = self.kind != "sgd"
        return [(xp.zeros_like(a) if need_m else None, xp.zeros_like(a) if need_v else None) for a in arrays]

    def update(self, params: list[Any], grads: list[Any], slots: list[tuple[Any, Any]] | None = None) -> None:
        """Apply one update to ``params`` (in place) from ``grads``; ``slots`` overrides the kept ones."""
        from ._state import current_trace

        tr = current_trace()
        if tr is not None and tr.owned():  # inside gt.function's trace: every replay updates too
            tr.python_step(functools.partial(self._update_raw, list(params), slots=slots), tuple(grads), wrap=False)
            return
        self._update_raw(params, *grads, slots=slots)

    def _update_raw(self, params: list[Any], *grads: Any, slots: list[tuple[Any, Any]] | None = None) -> None:
        params = list(params)
        arrays = self._arrays(params)
        gs = [g._data if hasattr(g, "_data") else g for g in grads]
        if len(gs) != len(arrays):
            raise ValueError(f"FusedOptimizer.update: {len(arrays)} parameters but {len(gs)} gradients")
        if not arrays:
            return
        if self._step is None:
            self._init_state(arrays[0])
        if slots is None:
            if self._slots is None:
                self._slots = self._make_slots(arrays)
            slots = self._slots
        if len(slots) != len(arrays):
            raise ValueError(f"FusedOptimizer.update: {len(arrays)} parameters but {len(slots)} slot pairs")
        for p, g in zip(arrays, gs):
            if p.shape != g.shape:
                raise ValueError(f"FusedOptimizer.update: gradient shape {g.shape} != parameter shape {p.shape}")
        hyper = {
            "momentum": self.momentum,
            "nesterov": self.nesterov,
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay": self.weight_decay,
        }
        if self._xp is np:
            gs = [g if g.dtype == p.dtype else g.astype(p.dtype) for p, g in zip(arrays, gs)]
            m = [s[0] for s in slots]
            v = [s[1] for s in slots]
            ref_optimizer_update(self.kind, arrays, gs, m, v, self._step, self._parity, self._lr, **hyper)
        else:
            self._launch(arrays, gs, slots, hyper)
        self._parity ^= 1

    def _launch(self, arrays: list[Any], gs: list[Any], slots: list[tuple[Any, Any]], hyper: dict) -> None:
        cp = self._xp
        dev = self._step.device
        # One launch per dtype: the kernel is templated on T (mixed-precision models
        # are rare, and each group is still one launch).
        groups: dict[np.dtype, list[int]] = {}
        for i, p in enumerate(arrays):
            if p.dtype not in _KERNEL_DTYPES:
                raise TypeError(f"FusedOptimizer: no kernel for parameters of dtype {p.dtype}; use float32/float64")
            if not p.flags.c_contiguous:
                raise ValueError("FusedOptimizer: parameters must be C-contiguous (they are updated in place)")
            if p.device.id != dev.id:
                raise ValueError(
                    f"FusedOptimizer: parameter {i} is on cuda:{p.device.id}, the optimizer on cuda:{dev.id}"
                )
            groups.setdefault(p.dtype, []).append(i)
        with dev:
            for dt, idx in groups.items():
                ptrs: list[int] = []
                offsets = [0]
                keep = []
                for i in idx:
                    p = arrays[i]
                    g = gs[i]
                    if g.dtype != dt or not g.flags.c_contiguous:
                        g = cp.ascontiguousarray(g, dtype=dt)
                        keep.append(g)
                    m, v = slots[i]
                    ptrs += [
                        p.data.ptr,
                        g.data.ptr,
                        m.data.ptr if m is not None else 0,
                        v.data.ptr if v is not None else 0,
                    ]
                    offsets.append(offsets[-1] + p.size)
                total = offsets[-1]
                if total == 0:
                    continue
                table = self._tables.get(cp, (dt.char, *ptrs, *offsets), ptrs, offsets)
                n = len(idx)
                fn = raw_function(
                    "optimizers", "gt_optimizer_update_f32" if dt == np.float32 else "gt_optimizer_update_f64", dev.id
                )
                grid = max(1, min((total + 255) // 256, _sm_count(dev.id) * 16))
                # Every dtype group reads the same slot (step[parity]) and writes the same
                # t to the other one, so all groups use one step number per update.
                parity = self._parity
                fn(
                    (grid,),
                    (256,),
                    (
                        table[: 4 * n].view(cp.uint64),
                        table[4 * n :],
                        np.int32(n),
                        self._step,
                        np.int32(parity),
                        self._lr,
                        np.int32(KINDS[self.kind]),
                        np.float64(hyper["momentum"]),
                        np.int32(hyper["nesterov"]),
                        np.float64(hyper["beta_1"]),
                        np.float64(hyper["beta_2"]),
                        np.float64(hyper["epsilon"]),
                        np.float64(hyper["weight_decay"]),
                    ),
                )
                del keep  # the pool reuses these only after the kernel (stream order)


__all__ = [
    "ACTIVATIONS",
    "BACKWARD_SAVES",
    "ELEMENTWISE",
    "FORWARD_ACTIVATIONS",
    "MODULES",
    "MODULE_FUNCTIONS",
    "FusedOptimizer",
    "accumulate_",
    "activation_backward",
    "bias_activation",
    "compile_all",
    "elementwise_harness",
    "elementwise_kernel",
    "kernel_dir",
    "module_source",
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
