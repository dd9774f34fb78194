"""``gt.fft``: numpy's discrete Fourier transforms, differentiable, on numpy and CuPy.

Each transform runs the ``fft`` module of its data's array module (``numpy.fft`` on the CPU,
``cupy.fft`` on a GPU) with numpy's signatures: ``n``/``s`` pad with zeros or crop, ``axis``/``axes``
pick the dimensions, ``norm`` is ``"backward"`` (the default: no scaling forward, ``1/n`` inverse),
``"ortho"`` (``1/sqrt(n)`` both ways) or ``"forward"``. Three primitives carry them all:

* ``fft.c2c`` (fft, ifft, fft2, ifft2, fftn, ifftn): complex-linear, its VJP is the adjoint, the
  inverse transform with the norm swapped (``backward`` <-> ``forward``), then the crop or zero
  padding of ``n``/``s`` undone;
* ``fft.rfftn`` (rfft, rfft2, rfftn) of real input: the adjoint of keeping the first ``n//2 + 1``
  frequencies is zero-extending the cotangent to ``n`` before the inverse transform; a real input
  takes the real part;
* ``fft.irfftn`` (irfft, irfft2, irfftn): the half spectrum stands for the full Hermitian one, so
  each frequency but 0 and ``n/2`` counts twice: the VJP is the forward ``rfftn`` of the cotangent
  (norm swapped) weighted ``[1, 2, ..., 2, 1]`` along the last axis (the trailing 1 only for even
  ``n``; numpy ignores the imaginary parts at 0 and ``n/2``, and their gradient is 0).

Gradients follow gputape's (TensorFlow's) complex convention (README, "Complex numbers").
``fftshift``/``ifftshift`` are compositions of ``roll``; ``fftfreq``/``rfftfreq`` are constants.

>>> import gputape as gt
>>> gt.fft.fft(gt.constant([1.0, 0.0, 0.0, 0.0])).numpy().tolist()
[(1+0j), (1+0j), (1+0j), (1+0j)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.dispatch import apply, primitive
from ..core.tensor import Tensor, as_tensor
from ..core.tensor import constant as _constant
from ..devices import backend
from . import pad, roll
from ._util import norm_axis_seq, norm_ints, norm_real, norm_size

__all__ = [
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
]

_SWAP = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


# -- argument normalisation (numpy's rules) ---------------------------------------


def _norm(norm: Any, op: str) -> str:
    if norm is None:
        return "backward"
    if norm not in _SWAP:
        raise ValueError(f'gt.fft.{op}: norm={norm!r} is not one of "backward", "ortho", "forward" (or None)')
    return norm


def _axes_and_sizes(x: Tensor, s: Any, axes: Any, op: str) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """numpy's ``_cook_nd_args``: axes as negative ints, ``s`` as ints (None: the input's sizes)."""
    if s is not None:
        s = norm_ints(s, f"fft.{op}", "a size or sizes (n, s)")
    if axes is None:
        axes = tuple(range(-len(s), 0)) if s is not None else tuple(range(-x.ndim, 0))
    axes = tuple(a - x.ndim for a in norm_axis_seq(axes, x.ndim, f"fft.{op}"))
    if len(set(axes)) != len(axes):
        raise ValueError(f"gt.fft.{op}: repeated axes {axes} (each axis is transformed once)")
    if s is not None:
        if len(s) != len(axes):
            raise ValueError(f"gt.fft.{op}: s has {len(s)} entries for {len(axes)} axes {axes}; give one per axis")
        if any(n < 1 for n in s):
            raise ValueError(f"gt.fft.{op}: invalid number of data points {s}; each must be at least 1")
    return axes, s


def _xp(g: Any) -> Any:
    d = g._data if isinstance(g, Tensor) else g
    return np if type(d) is np.ndarray else backend.xp_of(d)


def _fit(F: Any, g: Any, axes: tuple[int, ...], sizes: Sequence[int]) -> Any:
    """Crop ``g`` along ``axes`` to ``sizes``, or pad it with zeros: the adjoint of numpy's ``n``/``s``."""
    for ax, n in zip(axes, sizes):
        m = g.shape[ax]
        if m > n:
            idx = [slice(None)] * g.ndim
            idx[ax] = slice(0, n)
            g = g[tuple(idx)]
        elif m < n:
            widths = [(0, 0)] * g.ndim
            widths[ax] = (0, n - m)
            g = pad(g, widths) if F.xp is None else F.xp.pad(g, widths)
    return g


def _run(F: Any, prim: Any, g: Any, **params: Any) -> Any:
    """A transform inside a VJP: recorded when the gradient is (higher order), raw otherwise."""
    return apply(prim, (g,), params) if F.xp is None else prim.fwd(F.xp, g, **params)


# -- the three primitives ----------------------------------------------------------
# ("direct": their VJPs are adjoints already in TensorFlow's convention, no conjugation around them)


@primitive("fft.c2c", complex="direct")
def _c2c(xp, x, s, axes, norm, inverse):
    return (xp.fft.ifftn if inverse else xp.fft.fftn)(x, s, axes, norm)


@_c2c.defvjp
def _(F, g, needs, nb, node):
    p = node.params
    axes = p["axes"]
    shape = node.shapes[0]
    gx = _run(F, _c2c, g, s=None, axes=axes, norm=_SWAP[p["norm"]], inverse=not p["inverse"])
    return (_fit(F, gx, axes, [shape[a] for a in axes]),)


@primitive("fft.rfftn", complex="direct")
def _r2c(xp, x, s, axes, norm):
    return xp.fft.rfftn(x, s, axes, norm)


@_r2c.defvjp
def _(F, g, needs, nb, node):
    p = node.params
    axes, s = p["axes"], p["s"]
    shape = node.shapes[0]
    g = _fit(F, g, axes[-1:], s[-1:])  # the dropped upper half of the spectrum: zero cotangent
    gx = _run(F, _c2c, g, s=None, axes=axes, norm=_SWAP[p["norm"]], inverse=True)
    return (_fit(F, F.real(gx), axes, [shape[a] for a in axes]),)


@primitive("fft.irfftn", complex="direct")
def _c2r(xp, x, s, axes, norm):
    return xp.fft.irfftn(x, s, axes, norm)


@_c2r.defvjp
def _(F, g, needs, nb, node):
    p = node.params
    axes, s = p["axes"], p["s"]
    shape = node.shapes[0]
    gz = _run(F, _r2c, g, s=s, axes=axes, norm=_SWAP[p["norm"]])
    n = s[-1]
    m = n // 2 + 1
    # made where g lives: no host-to-device copy per backward (and nothing a CUDA graph cannot capture)
    w = _xp(g).full(m, 2.0, dtype=np.finfo(gz.dtype).dtype)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0  # the Nyquist frequency stands for itself only
    w = w.reshape((m,) + (1,) * (-axes[-1] - 1))
    sizes = [shape[a] for a in axes]
    return (_fit(F, gz * w, axes, sizes),)


# -- numpy's functions ---------------------------------------------------------------


def _complex_transform(a: Any, s: Any, axes: Any, norm: Any, inverse: bool, op: str) -> Tensor:
    x = as_tensor(a)
    axes, s = _axes_and_sizes(x, s, axes, op)
    return apply(_c2c, (x,), {"s": s, "axes": axes, "norm": _norm(norm, op), "inverse": inverse})


def _real_input(a: Any, s: Any, axes: Any, norm: Any, op: str) -> Tensor:
    x = as_tensor(a)
    if x.dtype.kind == "c":
        raise TypeError(
            f"gt.fft.{op}: the input is complex ({x.dtype}); {op} transforms real input "
            "(use gt.fft.fft/fftn for complex input, or gt.real(x) to drop the imaginary part)"
        )
    axes, s = _axes_and_sizes(x, s, axes, op)
    if s is None:
        s = tuple(x.shape[ax] for ax in axes)
    return apply(_r2c, (x,), {"s": s, "axes": axes, "norm": _norm(norm, op)})


def _hermitian_input(a: Any, s: Any, axes: Any, norm: Any, op: str) -> Tensor:
    x = as_tensor(a)
    axes, s = _axes_and_sizes(x, s, axes, op)
    if s is None:
        s = tuple(x.shape[ax] for ax in axes[:-1]) + (2 * (x.shape[axes[-1]] - 1),)
        if s[-1] < 1:
            raise ValueError(
                f"gt.fft.{op}: invalid number of data points {s[-1]} from an input of length "
                f"{x.shape[axes[-1]]} along axis {axes[-1]}; give n (or s)"
            )
    return apply(_c2r, (x,), {"s": s, "axes": axes, "norm": _norm(norm, op)})


def _one(n: Any, axis: Any, op: str) -> tuple[Any, tuple[int]]:
    """A one-dimensional transform's ``n`` and ``axis`` as ``s`` and ``axes``."""
    return (None if n is None else (norm_size(n, f"fft.{op}", "n", None),)), (
        norm_size(axis, f"fft.{op}", "axis", None),
    )


def fft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """One-dimensional discrete Fourier transform along ``axis`` (``numpy.fft.fft``).

    >>> import gputape as gt
    >>> gt.fft.fft(gt.constant([0.0, 1.0, 0.0, -1.0])).numpy().round(6).tolist()
    [0j, -2j, 0j, 2j]
    """
    s, axes = _one(n, axis, "fft")
    return _complex_transform(a, s, axes, norm, False, "fft")


def ifft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """One-dimensional inverse discrete Fourier transform (``numpy.fft.ifft``).

    >>> import gputape as gt
    >>> gt.fft.ifft(gt.fft.fft(gt.constant([1.0, 2.0, 3.0]))).numpy().real.round(6).tolist()
    [1.0, 2.0, 3.0]
    """
    s, axes = _one(n, axis, "ifft")
    return _complex_transform(a, s, axes, norm, True, "ifft")


def fft2(a: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Tensor:
    """Two-dimensional discrete Fourier transform over ``axes`` (``numpy.fft.fft2``).

    >>> import gputape as gt
    >>> gt.fft.fft2(gt.constant([[1.0, 1.0], [1.0, 1.0]])).numpy().real.tolist()
    [[4.0, 0.0], [0.0, 0.0]]
    """
    return _complex_transform(a, s, axes, norm, False, "fft2")


def ifft2(a: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Tensor:
    """Two-dimensional inverse discrete Fourier transform (``numpy.fft.ifft2``).

    >>> import gputape as gt
    >>> gt.fft.ifft2(gt.constant([[4.0, 0.0], [0.0, 0.0]])).numpy().real.tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """
    return _complex_transform(a, s, axes, norm, True, "ifft2")


def fftn(a: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Tensor:
    """N-dimensional discrete Fourier transform (``numpy.fft.fftn``; all axes by default).

    >>> import gputape as gt
    >>> gt.fft.fftn(gt.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().real.tolist()
    [[10.0, -2.0], [-4.0, 0.0]]
    """
    return _complex_transform(a, s, axes, norm, False, "fftn")


def ifftn(a: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Tensor:
    """N-dimensional inverse discrete Fourier transform (``numpy.fft.ifftn``).

    >>> import gputape as gt
    >>> gt.fft.ifftn(gt.constant([[10.0, -2.0], [-4.0, 0.0]])).numpy().real.tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    return _complex_transform(a, s, axes, norm, True, "ifftn")


def rfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """Transform of real input: the ``n // 2 + 1`` non-negative frequencies (``numpy.fft.rfft``).

    >>> import gputape as gt
    >>> gt.fft.rfft(gt.constant([1.0, 2.0, 3.0, 4.0])).numpy().tolist()
    [(10+0j), (-2+2j), (-2+0j)]
    """
    s, axes = _one(n, axis, "rfft")
    return _real_input(a, s, axes, norm, "rfft")


def irfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """Inverse of :func:`rfft`: a real signal of length ``n`` (default ``2 * (m - 1)``) (``numpy.fft.irfft``).

    >>> import gputape as gt
    >>> gt.fft.irfft(gt.fft.rfft(gt.constant([1.0, 2.0, 3.0, 4.0]))).numpy().tolist()
    [1.0, 2.0, 3.0, 4.0]
    """
    s, axes = _one(n, axis, "irfft")
    return _hermitian_input(a, s, axes, norm, "irfft")


def rfft2(a: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Tensor:
    """Two-dimensional transform of real input (``numpy.fft.rfft2``).

    >>> import gputape as gt
    >>> gt.fft.rfft2(gt.constant([[1.0, 1.0], [1.0, 1.0]])).numpy().real.tolist()
    [[4.0, 0.0], [0.0, 0.0]]
    """
    return _real_input(a, s, axes, norm, "rfft2")


def irfft2(a: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Tensor:
    """Inverse of :func:`rfft2` (``numpy.fft.irfft2``).

    >>> import gputape as gt
    >>> gt.fft.irfft2(gt.fft.rfft2(gt.constant([[1.0, 2.0], [3.0, 4.0]]))).numpy().tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    return _hermitian_input(a, s, axes, norm, "irfft2")


def rfftn(a: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Tensor:
    """N-dimensional transform of real input; the last axis keeps ``n // 2 + 1`` frequencies (``numpy.fft.rfftn``).

    >>> import gputape as gt
    >>> gt.fft.rfftn(gt.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().real.tolist()
    [[10.0, -2.0], [-4.0, 0.0]]
    """
    return _real_input(a, s, axes, norm, "rfftn")


def irfftn(a: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Tensor:
    """Inverse of :func:`rfftn` (``numpy.fft.irfftn``).

    >>> import gputape as gt
    >>> gt.fft.irfftn(gt.fft.rfftn(gt.constant([[1.0, 2.0], [3.0, 4.0]]))).numpy().tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    return _hermitian_input(a, s, axes, norm, "irfftn")


def _shift(x: Any, axes: Any, sign: int, op: str) -> Tensor:
    x = as_tensor(x)
    axes = tuple(range(x.ndim)) if axes is None else norm_axis_seq(axes, x.ndim, f"fft.{op}")
    if not axes:
        return x
    # numpy: fftshift rolls by n // 2, ifftshift by -(n // 2)
    return roll(x, [sign * (x.shape[a] // 2) for a in axes], axes)


def fftshift(x: Any, axes: Any = None) -> Tensor:
    """Move the zero frequency to the centre (``numpy.fft.fftshift``; a ``roll``).

    >>> import gputape as gt
    >>> gt.fft.fftshift(gt.constant([0.0, 1.0, 2.0, -2.0, -1.0])).numpy().tolist()
    [-2.0, -1.0, 0.0, 1.0, 2.0]
    """
    return _shift(x, axes, 1, "fftshift")


def ifftshift(x: Any, axes: Any = None) -> Tensor:
    """The inverse of :func:`fftshift` (``numpy.fft.ifftshift``).

    >>> import gputape as gt
    >>> gt.fft.ifftshift(gt.constant([-2.0, -1.0, 0.0, 1.0, 2.0])).numpy().tolist()
    [0.0, 1.0, 2.0, -2.0, -1.0]
    """
    return _shift(x, axes, -1, "ifftshift")


def _freq_args(n: Any, d: Any, op: str) -> tuple[int, float]:
    return norm_size(n, f"fft.{op}", "n", 1), norm_real(d, f"fft.{op}")


def fftfreq(n: int, d: float = 1.0, device: Any = None) -> Tensor:
    """The sample frequencies of an ``n``-point :func:`fft` with spacing ``d`` (``numpy.fft.fftfreq``), float64.

    >>> import gputape as gt
    >>> gt.fft.fftfreq(4, d=0.5).numpy().tolist()
    [0.0, 0.5, -1.0, -0.5]
    """
    n, d = _freq_args(n, d, "fftfreq")
    return _constant(np.fft.fftfreq(n, d), device=device)


def rfftfreq(n: int, d: float = 1.0, device: Any = None) -> Tensor:
    """The sample frequencies of an ``n``-point :func:`rfft` (``numpy.fft.rfftfreq``), float64.

    >>> import gputape as gt
    >>> gt.fft.rfftfreq(4, d=0.5).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    n, d = _freq_args(n, d, "rfftfreq")
    return _constant(np.fft.rfftfreq(n, d), device=device)


# -- TensorFlow's spellings (gputape.tf.signal): transforms over the innermost dimensions ----


def _tf_lengths(fft_length: Any, k: int, op: str) -> tuple[int, ...] | None:
    if fft_length is None:
        return None
    lengths = tuple(np.asarray(fft_length.numpy() if isinstance(fft_length, Tensor) else fft_length).reshape(-1))
    if len(lengths) != k:
        raise ValueError(f"tf.signal.{op}: fft_length must have {k} entries, got {lengths}")
    return tuple(int(v) for v in lengths)


def _tf_complex(k: int, inverse: bool, op: str) -> Any:
    def transform(input: Any, name: str | None = None) -> Tensor:
        return _complex_transform(input, None, tuple(range(-k, 0)), None, inverse, op)

    transform.__name__ = transform.__qualname__ = op
    what = "inverse transform" if inverse else "transform"
    transform.__doc__ = f"""``tf.signal.{op}``: the {what} over the innermost {k} dimension(s).

    >>> import gputape.tf as tf
    >>> tf.signal.{op}(tf.ones([1, 2, 4])).shape
    (1, 2, 4)
    """
    return transform


def _tf_real(k: int, inverse: bool, op: str) -> Any:
    def transform(input_tensor: Any, fft_length: Any = None, name: str | None = None) -> Tensor:
        s = _tf_lengths(fft_length, k, op)
        axes = tuple(range(-k, 0))
        if inverse:
            return _hermitian_input(input_tensor, s, axes, None, op)
        return _real_input(input_tensor, s, axes, None, op)

    transform.__name__ = transform.__qualname__ = op
    transform.__doc__ = f"""``tf.signal.{op}`` over the innermost {k} dimension(s); ``fft_length`` as in TensorFlow.

    >>> import gputape.tf as tf
    >>> tf.signal.{op}(tf.ones([1, 2, 4])).shape[:2]
    (1, 2)
    """
    return transform


def _tf_shift(shift: Any, op: str, example: str) -> Any:
    def transform(x: Any, axes: Any = None, name: str | None = None) -> Tensor:
        return shift(x, axes)

    transform.__name__ = transform.__qualname__ = op
    transform.__doc__ = f"""``tf.signal.{op}`` (numpy's ``{op}``).

    >>> import gputape.tf as tf
    >>> tf.signal.{op}(tf.constant([0.0, 1.0, -1.0])).numpy().tolist()
    {example}
    """
    return transform


TF_SIGNAL: dict[str, Any] = {
    "fft": _tf_complex(1, False, "fft"),
    "ifft": _tf_complex(1, True, "ifft"),
    "fft2d": _tf_complex(2, False, "fft2d"),
    "ifft2d": _tf_complex(2, True, "ifft2d"),
    "fft3d": _tf_complex(3, False, "fft3d"),
    "ifft3d": _tf_complex(3, True, "ifft3d"),
    "rfft": _tf_real(1, False, "rfft"),
    "irfft": _tf_real(1, True, "irfft"),
    "rfft2d": _tf_real(2, False, "rfft2d"),
    "irfft2d": _tf_real(2, True, "irfft2d"),
    "rfft3d": _tf_real(3, False, "rfft3d"),
    "irfft3d": _tf_real(3, True, "irfft3d"),
    "fftshift": _tf_shift(fftshift, "fftshift", "[-1.0, 0.0, 1.0]"),
    "ifftshift": _tf_shift(ifftshift, "ifftshift", "[1.0, -1.0, 0.0]"),
}
__test__ = {f"tf.signal.{k}": v.__doc__ for k, v in TF_SIGNAL.items()}
