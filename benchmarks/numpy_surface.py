"""The numpy surface a Tensor answers to, as a generated table: ``python -m benchmarks.numpy_surface``.

Every numpy function and ufunc that dispatches to a gputape op (``gputape.ops._protocols``) is called
once here on tensors (``SAMPLES``); the primitives it recorded say whether it is a primitive or a
composition, and its gradient whether it is differentiable. ``tests/test_numpy_protocols.py`` checks
that every dispatched name has a sample, that each sample matches numpy on the values, and that the
README's table is this script's output (``--write`` rewrites it). Its "complex" column, and the
README's table of every primitive by what it does with complex values (``complex_table``), are
the primitives' own declarations (``complex=``, gputape.core.primitive).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import gputape as gt
from gputape.ops._protocols import dispatch_table, ufunc_table

_rng = np.random.default_rng(0)
_M = _rng.standard_normal((3, 3))
A = _M @ _M.T + 3 * np.eye(3)  # symmetric positive definite: every linalg function takes it
B = _rng.standard_normal((3, 3))
V = np.array([0.3, -1.2, 2.5])
PERM = np.argsort(A, axis=1)
Z = B + 1j * V  # complex: real, imag and angle take it

# name -> T -> (args, kwargs); T makes a tensor (or, for numpy's reference, leaves the array)
Sample = Callable[[Callable[[Any], Any]], tuple[tuple, dict]]
SAMPLES: dict[str, Sample] = {
    "angle": lambda T: ((T(Z),), {"deg": True}),
    "amax": lambda T: ((T(A),), {"axis": 0}),
    "amin": lambda T: ((T(A),), {"axis": 1, "keepdims": True}),
    "append": lambda T: ((T(A), T(B)), {"axis": 0}),
    "argmax": lambda T: ((T(B),), {"axis": 1}),
    "argmin": lambda T: ((T(B),), {}),
    "argpartition": lambda T: ((T(V), 1), {}),
    "argsort": lambda T: ((T(B),), {"axis": 0}),
    "around": lambda T: ((T(B), 1), {}),
    "array_split": lambda T: ((T(A), 2), {"axis": 1}),
    "atleast_1d": lambda T: ((T(V), T(A)), {}),
    "atleast_2d": lambda T: ((T(V),), {}),
    "atleast_3d": lambda T: ((T(A),), {}),
    "broadcast_to": lambda T: ((T(V), (2, 3)), {}),
    "clip": lambda T: ((T(B), -0.5, 0.5), {}),
    "column_stack": lambda T: (([T(V), T(V)],), {}),
    "concatenate": lambda T: (([T(A), T(B)],), {"axis": 1}),
    "cross": lambda T: ((T(A), T(B)), {}),
    "cumprod": lambda T: ((T(B),), {"axis": 0}),
    "cumsum": lambda T: ((T(B),), {"axis": 1}),
    "diag": lambda T: ((T(A),), {"k": 1}),
    "diagonal": lambda T: ((T(A),), {"offset": 1}),
    "diff": lambda T: ((T(B),), {"axis": 0}),
    "dot": lambda T: ((T(A), T(B)), {}),
    "dsplit": lambda T: ((T(A[None]), 3), {}),
    "dstack": lambda T: (([T(A), T(B)],), {}),
    "einsum": lambda T: (("ij,jk->ik", T(A), T(B)), {}),
    "imag": lambda T: ((T(Z),), {}),
    "expand_dims": lambda T: ((T(A), 0), {}),
    "fft.fft": lambda T: ((T(Z),), {"n": 4}),
    "fft.fft2": lambda T: ((T(Z),), {"norm": "ortho"}),
    "fft.fftn": lambda T: ((T(B),), {"axes": (0,)}),
    "fft.fftshift": lambda T: ((T(B),), {"axes": 1}),
    "fft.ifft": lambda T: ((T(Z),), {"axis": 0}),
    "fft.ifft2": lambda T: ((T(Z),), {"s": (2, 4)}),
    "fft.ifftn": lambda T: ((T(Z),), {"norm": "forward"}),
    "fft.ifftshift": lambda T: ((T(Z),), {}),
    "fft.irfft": lambda T: ((T(Z),), {"n": 5}),
    "fft.irfft2": lambda T: ((T(Z),), {}),
    "fft.irfftn": lambda T: ((T(Z),), {"s": (3, 4), "axes": (0, 1)}),
    "fft.rfft": lambda T: ((T(B),), {"axis": 0}),
    "fft.rfft2": lambda T: ((T(B),), {"s": (4, 4)}),
    "fft.rfftn": lambda T: ((T(B),), {}),
    "flip": lambda T: ((T(B),), {"axis": 0}),
    "fliplr": lambda T: ((T(B),), {}),
    "flipud": lambda T: ((T(B),), {}),
    "hsplit": lambda T: ((T(B), 3), {}),
    "hstack": lambda T: (([T(A), T(B)],), {}),
    "inner": lambda T: ((T(A), T(B)), {}),
    "kron": lambda T: ((T(A), T(V)), {}),
    "linalg.cholesky": lambda T: ((T(A),), {}),
    "linalg.det": lambda T: ((T(A),), {}),
    "linalg.eig": lambda T: ((T(A),), {}),
    "linalg.eigh": lambda T: ((T(A),), {}),
    "linalg.eigvals": lambda T: ((T(A),), {}),
    "linalg.eigvalsh": lambda T: ((T(A),), {}),
    "linalg.inv": lambda T: ((T(A),), {}),
    "linalg.lstsq": lambda T: ((T(A), T(B)), {"rcond": None}),
    "linalg.matrix_power": lambda T: ((T(A), 2), {}),
    "linalg.norm": lambda T: ((T(A),), {"ord": "fro"}),
    "linalg.pinv": lambda T: ((T(A),), {}),
    "linalg.qr": lambda T: ((T(A),), {}),
    "linalg.slogdet": lambda T: ((T(A),), {}),
    "linalg.solve": lambda T: ((T(A), T(B)), {}),
    "linalg.svd": lambda T: ((T(A),), {}),
    "linspace": lambda T: ((T(np.array(0.0)), T(np.array(2.0))), {"num": 5}),
    "max": lambda T: ((T(B),), {"axis": 0}),
    "mean": lambda T: ((T(B),), {"axis": 1, "keepdims": True}),
    "nan_to_num": lambda T: ((T(np.array([1.0, np.nan, np.inf, -np.inf])),), {"posinf": 5.0}),
    "sinc": lambda T: ((T(B),), {}),
    "min": lambda T: ((T(B),), {}),
    "moveaxis": lambda T: ((T(B), 0, 1), {}),
    "ones_like": lambda T: ((T(B),), {}),
    "outer": lambda T: ((T(V), T(V)), {}),
    "pad": lambda T: ((T(B), 1), {"mode": "constant", "constant_values": 2.0}),
    "partition": lambda T: ((T(V), 1), {}),
    "prod": lambda T: ((T(B),), {"axis": 0}),
    "ravel": lambda T: ((T(B),), {"order": "F"}),
    "repeat": lambda T: ((T(B), 2), {"axis": 1}),
    "reshape": lambda T: ((T(B), (9,)), {}),
    "roll": lambda T: ((T(B), 1), {"axis": 0}),
    "rot90": lambda T: ((T(B),), {}),
    "round": lambda T: ((T(B), 2), {}),
    "select": lambda T: (([T(B) > 0.5, T(B) < -0.5], [T(A), T(B)]), {"default": 0.0}),
    "sort": lambda T: ((T(B),), {"axis": 0}),
    "split": lambda T: ((T(B), 3), {"axis": 1}),
    "squeeze": lambda T: ((T(B[None]),), {}),
    "real": lambda T: ((T(Z),), {}),
    "stack": lambda T: (([T(A), T(B)],), {"axis": 1}),
    "std": lambda T: ((T(B),), {"axis": 0, "ddof": 1}),
    "sum": lambda T: ((T(B),), {"axis": 0, "keepdims": True}),
    "swapaxes": lambda T: ((T(B), 0, 1), {}),
    "take": lambda T: ((T(B), [0, 2]), {"axis": 1}),
    "take_along_axis": lambda T: ((T(A), PERM), {"axis": 1}),
    "tensordot": lambda T: ((T(A), T(B)), {"axes": 1}),
    "tile": lambda T: ((T(B), (2, 1)), {}),
    "trace": lambda T: ((T(A),), {"offset": 1}),
    "transpose": lambda T: ((T(B),), {"axes": (1, 0)}),
    "tril": lambda T: ((T(A),), {"k": -1}),
    "triu": lambda T: ((T(A),), {}),
    "var": lambda T: ((T(B),), {"axis": 1}),
    "vsplit": lambda T: ((T(B), 3), {}),
    "vstack": lambda T: (([T(A), T(B)],), {}),
    "where": lambda T: ((T(B) > 0, T(A), T(B)), {}),
    "zeros_like": lambda T: ((T(B),), {}),
}

# A ufunc's inputs, inside its domain (arccosh takes x >= 1, the inverse trig functions |x| < 1).
_DOMAIN = {"arccosh": (1.2, 2.5), "arcsin": (-0.8, 0.8), "arccos": (-0.8, 0.8), "arctanh": (-0.8, 0.8)}


def ufunc_inputs(u: Any) -> list[np.ndarray]:
    lo, hi = _DOMAIN.get(u.__name__, (0.3, 1.7))
    r = np.random.default_rng(len(u.__name__))
    shapes = [(2, 3), (3, 2)] if u.signature else [(2, 3)] * u.nin  # matmul's core dimensions
    return [r.uniform(lo, hi, shapes[i]) for i in range(u.nin)]


def numpy_name(func: Any) -> str:
    """``np.sum`` -> ``"sum"``, ``np.linalg.inv`` -> ``"linalg.inv"``: the keys of ``SAMPLES``."""
    mod = func.__module__
    return func.__name__ if mod == "numpy" else f"{mod.removeprefix('numpy.')}.{func.__name__}"


def _leaves(out: Any) -> list:
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


def run_on_tensors(func: Any, args: tuple, kwargs: dict) -> tuple[Any, list[str], bool]:
    """``func(*args, **kwargs)`` under a tape: (result, primitives recorded, whether a gradient flows)."""
    sources = [a for a in _leaves(list(args)) if isinstance(a, gt.Tensor) and a.dtype.kind in "fc"]
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(sources)
        out = func(*args, **kwargs)
        prims = sorted({n.prim.name for n in tape._nodes})  # what the function recorded, before the loss
        floats = [o for o in _leaves(out) if isinstance(o, gt.Tensor) and o.dtype.kind in "fc"]
        total = sum((gt.sum(gt.real(o)) for o in floats), gt.constant(0.0, "float64"))  # complex: its real part
    grads = [g for g in (tape.gradient(total, sources) if floats and sources else []) if g is not None]
    grad = "no" if not grads else "yes" if any(np.any(g.numpy() != 0) for g in grads) else "zero"
    return out, prims, grad


def rows() -> list[tuple[str, str, str, str, str]]:
    """(numpy name, how, gradient, complex, GPU path) for every dispatched numpy function and ufunc."""
    out = []
    for func, g in sorted(dispatch_table().items(), key=lambda kv: numpy_name(kv[0])):
        name = numpy_name(func)
        args, kwargs = SAMPLES[name](gt.constant)
        _, prims, grad = run_on_tensors(func, args, kwargs)
        out.append((f"np.{name}", _how(g, prims, grad), grad, _complex(prims, grad), _gpu(name)))
    for u, g in sorted(ufunc_table().items(), key=lambda kv: kv[0].__name__):
        _, prims, grad = run_on_tensors(u, tuple(gt.constant(a) for a in ufunc_inputs(u)), {})
        out.append((f"np.{u.__name__} (ufunc)", _how(g, prims, grad), grad, _complex(prims, grad), "cupy"))
    return out


def status(prim: Any) -> str:
    """A primitive's declared complex status, its refusal's reason dropped."""
    return "refused" if prim.complex.startswith("refused: ") else prim.complex


def _complex(prims: list[str], grad: str) -> str:
    """What the recorded primitives' declarations make of complex values: the strictest one wins."""
    if grad == "no":
        return "-"
    found = {status(gt.REGISTRY[p]) for p in prims} or {"holomorphic"}  # (its input, unchanged)
    for s, said in (("real", "real only"), ("refused", "refused"), ("direct", "yes")):
        if s in found:
            return said
    return "holomorphic"


def _how(g: Any, prims: list[str], grad: str) -> str:
    if not prims:
        if grad == "no":
            return f"`{g.__name__}`, no gradient (an index, bool or constant result)"
        return "its input, unchanged"
    if len(prims) == 1 and prims[0].split(".")[-1] == g.__name__:
        return f"primitive `{prims[0]}`"
    return "composition: " + " ".join(f"`{p}`" for p in prims)


def _gpu(name: str) -> str:
    return "cupy.linalg" if name.startswith("linalg.") else "cupy.fft" if name.startswith("fft.") else "cupy"


BEGIN, END = "<!-- numpy-surface:begin (generated by benchmarks/numpy_surface.py) -->", "<!-- numpy-surface:end -->"


def table() -> str:
    lines = [
        "| numpy | how in gputape (primitives recorded) | gradient | complex | GPU |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| `{n}` | {how} | {grad} | {cx} | {gpu} |" for n, how, grad, cx, gpu in rows()]
    return "\n".join(lines)


_SAID = {
    "holomorphic": "holomorphic: the VJP is TensorFlow's `g * conj(f'(z))`",
    "direct": "differentiable, VJP complex-correct as written: TensorFlow's non-holomorphic ones (`real imag conj "
    "angle abs`), zero gradients (`round`), real-linear maps (`split`, `gt.fft`)",
    "real": "real only: the forward refuses complex input, as numpy's (or, for now, `gt.linalg`'s) does",
}


def complex_table() -> str:
    """Every registered primitive by its declared complex status (refused ones with their reason)."""
    groups: dict[str, list[str]] = {}
    for name in sorted(gt.REGISTRY):
        c = gt.REGISTRY[name].complex
        key = _SAID.get(c) or "refused on a tape: " + c.removeprefix("refused: ")
        groups.setdefault(key, []).append(name)
    order = [_SAID["holomorphic"], _SAID["direct"], _SAID["real"]]
    keys = [k for k in order if k in groups] + sorted(k for k in groups if k not in order)
    lines = ["| complex values | primitives |", "| --- | --- |"]
    lines += [f"| {k} | {' '.join(f'`{n}`' for n in groups[k])} |" for k in keys]
    return "\n".join(lines)


CBEGIN, CEND = "<!-- complex-status:begin (generated by benchmarks/numpy_surface.py) -->", "<!-- complex-status:end -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), re.S)
_CBLOCK = re.compile(re.escape(CBEGIN) + r"\n(.*?)" + re.escape(CEND), re.S)


def readme_block(readme: str, block: re.Pattern = _BLOCK) -> str | None:
    """The generated table in ``readme`` (None when it has no such block); ``block=_CBLOCK``: the complex one."""
    m = block.search(readme)
    return m.group(1).rstrip("\n") if m else None


def main(argv: list[str]) -> int:
    text, ctext = table(), complex_table()
    if "--write" not in argv:
        print(text + "\n\n" + ctext)
        return 0
    path = Path(__file__).resolve().parents[1] / "README.md"
    readme = path.read_text()
    for block, begin, end in ((_BLOCK, BEGIN, END), (_CBLOCK, CBEGIN, CEND)):
        if readme_block(readme, block) is None:
            print(f"README.md has no {begin} ... {end} block", file=sys.stderr)
            return 1
    readme = _BLOCK.sub(lambda m: BEGIN + "\n" + text + "\n" + END, readme)
    path.write_text(_CBLOCK.sub(lambda m: CBEGIN + "\n" + ctext + "\n" + CEND, readme))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
