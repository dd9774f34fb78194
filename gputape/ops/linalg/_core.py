"""Shared machinery of ``gt.linalg`` and the primitives built on LU and triangles:
``inv``, ``solve``, ``det``, ``slogdet``, ``cholesky`` and the band mask their VJPs use.

Forward passes call the array module's ``linalg`` (``numpy.linalg`` or ``cupy.linalg``,
whichever holds the data). VJPs are written against the namespace ``F`` the sweep hands
them, so that a tape recording the backward pass gets higher-order gradients; where a VJP
needs one of this package's own primitives, :func:`call` runs it as a recorded op (``F``
is gputape's op namespace) or as its raw forward (``F`` is the array namespace).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...core import _errors
from ...core.dispatch import apply, primitive
from ...core.primitive import Primitive
from ...core.tensor import Tensor, as_tensor
from ...devices import backend
from .. import _util

NOPARAMS = _util.NOPARAMS
LinAlgError = np.linalg.LinAlgError


# -- helpers ------------------------------------------------------------------------


def call(F: Any, prim: Primitive, args: tuple, params: dict = NOPARAMS) -> Any:
    """Run ``prim`` inside a VJP: recorded when ``F`` is gputape's namespace, raw otherwise."""
    if F.xp is None:
        return apply(prim, args, params)
    return prim.fwd(F.xp, *args, **params)


def xp_in_vjp(F: Any, ref: Any) -> Any:
    """The array module of a VJP's operands (for constants such as identity masks)."""
    if F.xp is not None:
        return F.xp
    return backend.xp_of(ref._data if isinstance(ref, Tensor) else ref)


def mT(F: Any, x: Any) -> Any:
    """Transpose of the last two axes."""
    return F.swapaxes(x, -1, -2)


def conj(F: Any, x: Any) -> Any:
    """The complex conjugate of complex values; real values as they are (no copy, no op recorded)."""
    return F.conj(x) if x.dtype.kind == "c" else x


def mH(F: Any, x: Any) -> Any:
    """Conjugate transpose of the last two axes (the transpose of real values).

    The VJPs use it wherever the real formula has a transpose: written so, one formula gives
    TensorFlow's complex gradient (``dL/dx + i dL/dy`` of a real loss) and the real one.
    """
    return conj(F, F.swapaxes(x, -1, -2))


def number_arg(a: Any, fn: str) -> Tensor:
    """``a`` as a tensor of numbers: floats, complex, or integers that the op converts."""
    t = as_tensor(a)
    dt = t.dtype
    if dt.kind not in "fciu":
        raise _errors.argument_error(
            a, f"has dtype {dt}: needs a floating-point or complex tensor", op=f"linalg.{fn}", cls=TypeError
        )
    return t


def matrix_arg(a: Any, fn: str, square: bool = True) -> Tensor:
    """Validate a matrix operand: a floating, complex (or integer) tensor of rank >= 2, square if asked."""
    t = number_arg(a, fn)
    if t.ndim < 2:
        raise _errors.argument_error(
            a,
            f"needs a matrix (or a batch of matrices) of rank >= 2, got shape {t.shape}",
            op=f"linalg.{fn}",
            cls=LinAlgError,
        )
    if square and t.shape[-1] != t.shape[-2]:
        hint = "for a non-square matrix use gt.linalg.pinv or gt.linalg.lstsq" if fn in ("inv", "solve") else ""
        raise _errors.argument_error(
            a,
            f"is not square: the last two dimensions of shape {t.shape} must be equal",
            op=f"linalg.{fn}",
            cls=LinAlgError,
            hint=hint,
        )
    return t


def run(prim: Primitive, fn: str, args: tuple, params: dict = NOPARAMS) -> Any:
    """``apply`` that keeps numpy's ``LinAlgError`` (a ValueError) and names the gputape function."""
    try:
        return apply(prim, args, params)
    except ValueError as exc:
        cause = exc.__cause__
        if isinstance(cause, LinAlgError):
            shapes = [tuple(a.shape) for a in args if hasattr(a, "shape")]
            dtypes = [str(a.dtype) for a in args if hasattr(a, "dtype")]
            name = _errors.where(f"linalg.{fn}")
            raise LinAlgError(f"{name}: {cause} (inputs of shapes {shapes}, dtypes {dtypes})") from cause
        raise


def broadcast_batch(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """Broadcast the batch (leading) dimensions of a matrix ``a`` and a matrix ``b`` to each other.

    numpy.linalg broadcasts them itself; cupy.linalg.solve wants equal batch shapes (and
    gets contiguous copies, not stride-0 views).
    """
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if a.shape[:-2] != batch:
        a = xp.ascontiguousarray(xp.broadcast_to(a, batch + a.shape[-2:]))
    if b.shape[:-2] != batch:
        b = xp.ascontiguousarray(xp.broadcast_to(b, batch + b.shape[-2:]))
    return a, b


def per_matrix(xp: Any, fn: Any, a: Any, **kw: Any) -> tuple[Any, ...]:
    """``fn`` (returning a tuple of arrays) applied to each matrix of a batch, results stacked.

    For array modules whose routine takes one matrix at a time (cupy's ``qr`` before
    batched support).
    """
    outs = [fn(m, **kw) for m in a.reshape((-1,) + a.shape[-2:])]
    return tuple(xp.stack([o[i] for o in outs]).reshape(a.shape[:-2] + outs[0][i].shape) for i in range(len(outs[0])))


# -- band: the triangle masks (tril / triu) the VJPs need --------------------------


@primitive("linalg.band", complex="holomorphic")
def _band(xp, x, lower, upper):
    n, m = x.shape[-2:]
    d = xp.arange(m)[None, :] - xp.arange(n)[:, None]  # column - row: 0 on the diagonal
    keep = xp.ones((n, m), dtype=bool)
    if lower is not None:
        keep &= d >= -lower
    if upper is not None:
        keep &= d <= upper
    return xp.where(keep, x, xp.zeros((), x.dtype))


@_band.defvjp
def _(F, g, needs, nb, node):
    return (call(F, _band, (g,), node.params),)


def band_part(x: Any, lower: int | None, upper: int | None) -> Tensor:
    """Keep the entries within ``lower`` diagonals below and ``upper`` above the main one.

    ``None`` means no limit; negative limits move the band's edge past the diagonal
    (``band_part(x, None, -1)`` is the strictly lower triangle). Differentiable (a mask).

    >>> import gputape as gt
    >>> gt.linalg.band_part(gt.ones((3, 3)), 0, 1).numpy().tolist()
    [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    """
    t = as_tensor(x)
    if t.ndim < 2:
        raise _errors.argument_error(x, f"needs rank >= 2, got shape {t.shape}", op="linalg.band_part", cls=ValueError)
    lower, upper = (
        None if v is None else _util.norm_size(v, "linalg.band_part", "a number of diagonals", None)
        for v in (lower, upper)
    )
    return apply(_band, (t,), {"lower": lower, "upper": upper})


def tril(F: Any, x: Any, k: int = 0) -> Any:
    """numpy's ``tril`` (the lower triangle, diagonals up to ``k``) inside a VJP."""
    return call(F, _band, (x,), {"lower": None, "upper": k})


# -- inv ---------------------------------------------------------------------------


@primitive("linalg.inv", complex="direct", save_out=True)
def _inv(xp, a):
    return xp.linalg.inv(a)


@_inv.defvjp
def _(F, g, needs, nb, node, ainv):
    # d(A^-1) = -A^-1 dA A^-1, so the cotangent is -A^-H g A^-H.
    at = mH(F, ainv)
    return (-F.matmul(at, F.matmul(g, at)),)


def inv(a: Any) -> Tensor:
    """Inverse of a square matrix (or of each matrix in a batch), numpy's ``linalg.inv``.

    Primitive; gradient ``-A^-H g A^-H`` (``A^-T`` for real ``a``). A singular matrix raises
    ``numpy.linalg.LinAlgError`` on the CPU (cupy returns non-finite values instead, as cupy.linalg does).

    >>> import gputape as gt
    >>> gt.linalg.inv(gt.constant([[2.0, 0.0], [0.0, 4.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    return run(_inv, "inv", (matrix_arg(a, "inv"),))


# -- solve -------------------------------------------------------------------------


@primitive("linalg.solve", complex="direct", save=(0,), save_out=True)
def _solve(xp, a, b, vector):
    if vector:  # numpy 2: a 1-D b is one right-hand side (the batch dims come from a)
        a, bm = broadcast_batch(xp, a, b[..., :, None])
        return xp.linalg.solve(a, bm)[..., 0]
    a, b = broadcast_batch(xp, a, b)
    return xp.linalg.solve(a, b)


@_solve.defvjp
def _(F, g, needs, nb, node, a, x):
    # x = A^-1 b: gb = A^-H g (the adjoint solve), gA = -gb x^H.
    vector = node.params["vector"]
    gm = F.expand_dims(g, -1) if vector else g
    xm = F.expand_dims(x, -1) if vector else x
    gb = call(F, _solve, (mH(F, a), gm), {"vector": False})
    ga = -F.matmul(gb, mH(F, xm)) if needs[0] else None
    if vector and needs[1]:
        gb = F.squeeze(gb, -1)
    return (ga, gb if needs[1] else None)


def solve(a: Any, b: Any) -> Tensor:
    """Solve ``a @ x = b`` for ``x`` (numpy's ``linalg.solve``; batch dimensions broadcast).

    ``b`` of rank 1 is one right-hand side vector (numpy 2's rule); otherwise ``b`` is
    ``(..., M, K)``. Primitive; the gradient solves the adjoint system once:
    ``gb = solve(a^H, g)``, ``ga = -gb @ x^H`` (``^H``: the conjugate transpose, the
    transpose of real values).

    >>> import gputape as gt
    >>> gt.linalg.solve(gt.constant([[2.0, 0.0], [0.0, 4.0]]), gt.constant([1.0, 1.0])).numpy().tolist()
    [0.5, 0.25]
    """
    at = matrix_arg(a, "solve")
    bt = number_arg(b, "solve")
    vector = bt.ndim == 1
    n = at.shape[-1]
    if bt.ndim == 0 or bt.shape[-2 if not vector else -1] != n:
        raise ValueError(
            f"gt.linalg.solve: b of shape {bt.shape} does not fit a of shape {at.shape}; b must be (M,) or "
            f"(..., M, K) with M = {n}"
        )
    return run(_solve, "solve", (at, bt), {"vector": vector})


# -- det, slogdet --------------------------------------------------------------------


@primitive("linalg.det", complex="direct", save=(0,), save_out=True)
def _det(xp, a):
    return xp.linalg.det(a)


@_det.defvjp
def _(F, g, needs, nb, node, a, d):
    # d det = det * tr(A^-1 dA): the cotangent is g * conj(det) * A^-H.
    ainv = call(F, _inv, (a,))
    return (F.expand_dims(F.expand_dims(g * conj(F, d), -1), -1) * mH(F, ainv),)


def det(a: Any) -> Tensor:
    """Determinant of a square matrix or of each matrix in a batch (numpy's ``linalg.det``).

    Primitive; gradient ``g * conj(det(a)) * inv(a)^H``, which needs an invertible ``a`` (the
    gradient at a singular matrix raises ``LinAlgError``; use ``slogdet`` for large or tiny
    determinants).

    >>> import gputape as gt
    >>> round(float(gt.linalg.det(gt.constant([[1.0, 2.0], [3.0, 4.0]]))), 5)
    -2.0
    """
    return run(_det, "det", (matrix_arg(a, "det"),))


class SlogdetResult(NamedTuple):
    """numpy's result of ``slogdet``: the sign and the log of the absolute determinant."""

    sign: Any
    logabsdet: Any


@primitive("linalg.slogdet", complex="direct", save=(0,), save_out=True, nout=2)
def _slogdet(xp, a):
    sign, logabs = xp.linalg.slogdet(a)
    return (sign, logabs)


@_slogdet.defvjp
def _(F, g, needs, nb, node, a, sign, logabs):
    gsign, glog = g
    # log det = logabsdet + i theta with sign = e^(i theta); d log det = tr(A^-1 dA). A real
    # sign is piecewise constant (no gradient); a complex one moves with theta, whose real
    # cotangent is Im(gsign conj(sign)). Both reach A as c * A^-H with c = glog + i * that.
    if gsign is not None and sign.dtype.kind == "c":
        c = F.imag(gsign * F.conj(sign)) * 1j
        c = c if glog is None else c + glog
    elif glog is None:
        return (None,)
    else:
        c = glog
    ainv = call(F, _inv, (a,))
    return (F.expand_dims(F.expand_dims(c, -1), -1) * mH(F, ainv),)


def slogdet(a: Any) -> SlogdetResult:
    """Sign and natural log of the absolute determinant, ``(sign, logabsdet)`` (numpy's ``slogdet``).

    Primitive; ``logabsdet``'s gradient is ``inv(a)^H``; a real sign's is zero, a complex
    sign ``e^(i theta)`` (``theta = Im(log det a)``) has one.

    >>> import gputape as gt
    >>> s, l = gt.linalg.slogdet(gt.constant([[1.0, 2.0], [3.0, 4.0]]))
    >>> float(s), round(float(l), 5)
    (-1.0, 0.69315)
    """
    sign, logabs = run(_slogdet, "slogdet", (matrix_arg(a, "slogdet"),))
    return SlogdetResult(sign, logabs)


# -- cholesky ------------------------------------------------------------------------


@primitive("linalg.cholesky", complex="direct", save_out=True)
def _cholesky(xp, a):
    return xp.linalg.cholesky(a)


@_cholesky.defvjp
def _(F, g, needs, nb, node, L):
    # Murray (arXiv:1602.07527), as PyTorch writes it: with P = tril(L^H gL),
    # gA = L^-H (P + P^H - diag(P)) L^-1 / 2, a symmetric (Hermitian off the diagonal) matrix.
    # Only tril(gL) matters: L^H triu(gL, 1) is strictly upper, so tril() drops it.
    P = tril(F, F.matmul(mH(F, L), g))
    S = (P + mH(F, tril(F, P, -1))) * 0.5
    linv = call(F, _inv, (L,))
    return (F.matmul(mH(F, linv), F.matmul(S, linv)),)


def cholesky(a: Any) -> Tensor:
    """Lower Cholesky factor ``L`` with ``a = L @ L^H`` of a symmetric (Hermitian) positive-definite matrix.

    As numpy, only the lower triangle of ``a`` is read. Primitive; the gradient (Murray's
    formula) is the symmetric matrix ``G`` with ``sum(G * dA) = dL`` for every symmetric
    perturbation ``dA``, as in PyTorch and TensorFlow (Hermitian for complex ``a``, whose
    diagonal's imaginary part is ignored as numpy ignores it): it is the gradient with respect to a
    symmetric input, not with respect to the (ignored) upper triangle. A matrix that is not
    positive definite raises ``numpy.linalg.LinAlgError`` on the CPU.

    >>> import gputape as gt
    >>> gt.linalg.cholesky(gt.constant([[4.0, 2.0], [2.0, 2.0]])).numpy().tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    """
    return run(_cholesky, "cholesky", (matrix_arg(a, "cholesky"),))
