"""Decompositions: ``eigh``/``eigvalsh``, ``svd``, ``qr`` and ``pinv``.

Eigenvector and singular-vector gradients divide by eigenvalue (or squared singular
value) gaps ``1 / (w_j - w_i)``, masked on the diagonal. Where two values are exactly
equal, the vectors are only defined up to a rotation within their subspace, and the
gradient of a loss that uses them is NaN there (PyTorch and JAX give NaN or inf): gputape does not
guess, because a zero coupling term would be right for some losses (a projector onto a
simple eigenvector) and silently wrong for others (a matrix function ``V h(w) V^T`` at the
identity). Losses that use only eigenvalues or singular values (``eigvalsh``,
``svd(compute_uv=False)``, ``norm(ord='nuc')``, or ``eigh``'s ``w`` alone) never reach that
term and are finite and correct at repeated values. Nearly equal values give large,
ill-conditioned gradients, as in every implementation.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ... import ops
from ...core.dispatch import primitive
from ...core.tensor import Tensor, as_tensor
from .._util import norm_flag, norm_real
from ._core import LinAlgError, _solve, call, matrix_arg, mT, per_matrix, run, tril, xp_in_vjp


def _gap_divide(F: Any, num: Any, gap: Any, ref: Any) -> Any:
    """``num / gap`` off the diagonal (0 on it; ``num`` is antisymmetric), NaN at exact ties."""
    tie = gap == 0
    q = num / F.where(tie, 1, gap)
    off = ~xp_in_vjp(F, ref).eye(num.shape[-1], dtype=bool)
    # NaN enters as a constant of where(), never as num * nan: where's VJP sends an exact 0
    # to the unselected branch, and 0 * nan would still be NaN in every gradient.
    return F.where(tie & off, float("nan"), q)


def _diag_embed_right(x: Any, d: Any) -> Any:
    """``x @ diag(d)``: scale the columns of ``x`` (no identity matrix needed)."""
    return x * d[..., None, :]


# -- eigh -------------------------------------------------------------------------------


class EighResult(NamedTuple):
    """numpy's result of ``eigh``: ascending eigenvalues and the eigenvectors as columns."""

    eigenvalues: Any
    eigenvectors: Any


@primitive("linalg.eigh", complex="real", save_out=True, nout=2)
def _eigh(xp, a, UPLO):
    w, v = xp.linalg.eigh(a, UPLO=UPLO)
    return (w, v)


@_eigh.defvjp
def _(F, g, needs, nb, node, w, V):
    gw, gV = g
    # A = V diag(w) V^T: gA = V (diag(gw) + skew(V^T gV) / (w_j - w_i)) V^T, symmetric.
    inner = None
    if gV is not None:
        M = F.matmul(mT(F, V), gV)
        inner = _gap_divide(F, (M - mT(F, M)) * 0.5, F.expand_dims(w, -2) - F.expand_dims(w, -1), w)
    if gw is not None:
        vg = _diag_embed_right(V, gw)
        if inner is None:
            return (F.matmul(vg, mT(F, V)),)
        return (F.matmul(vg + F.matmul(V, inner), mT(F, V)),)
    return (F.matmul(V, F.matmul(inner, mT(F, V))),)


def _uplo(UPLO: str, fn: str) -> str:
    if UPLO not in ("L", "U"):
        raise ValueError(f"gt.linalg.{fn}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return UPLO


def eigh(a: Any, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix, numpy's ``linalg.eigh``.

    Only the ``UPLO`` triangle of ``a`` is read. Primitive; the gradient is the symmetric
    matrix that gives the derivative along symmetric perturbations (PyTorch's convention).
    Eigenvector gradients need distinct eigenvalues: see this module's note on ties
    (``gt.linalg`` docs). Eigenvector signs are whatever LAPACK (or cuSOLVER) returns.

    >>> import gputape as gt
    >>> w, v = gt.linalg.eigh(gt.constant([[2.0, 1.0], [1.0, 2.0]]))
    >>> w.numpy().tolist()
    [1.0, 3.0]
    """
    w, v = run(_eigh, "eigh", (matrix_arg(a, "eigh"),), {"UPLO": _uplo(UPLO, "eigh")})
    return EighResult(w, v)


def eigvalsh(a: Any, UPLO: str = "L") -> Tensor:
    """Eigenvalues (ascending) of a symmetric matrix, numpy's ``linalg.eigvalsh``.

    A composition: ``eigh(a)[0]``; its gradient ``V diag(g) V^T`` is finite and correct
    even at repeated eigenvalues.

    >>> import gputape as gt
    >>> gt.linalg.eigvalsh(gt.constant([[2.0, 0.0], [0.0, 1.0]])).numpy().tolist()
    [1.0, 2.0]
    """
    w, _ = run(_eigh, "eigvalsh", (matrix_arg(a, "eigvalsh"),), {"UPLO": _uplo(UPLO, "eigvalsh")})
    return w


# -- svd ----------------------------------------------------------------------------------


class SVDResult(NamedTuple):
    """numpy's result of ``svd``: ``a = U @ diag(S) @ Vh``."""

    U: Any
    S: Any
    Vh: Any


@primitive("linalg.svd", complex="real", save_out=True, nout=3)
def _svd(xp, a, full_matrices):
    u, s, vh = xp.linalg.svd(a, full_matrices=full_matrices)
    return (u, s, vh)


@_svd.defvjp
def _(F, g, needs, nb, node, U, S, Vh):
    gU, gS, gVh = g
    m, n = node.shapes[0][-2:]
    k = min(m, n)
    if node.params["full_matrices"]:
        # The columns past k span a complement chosen arbitrarily: their cotangents are
        # ignored (PyTorch does the same), only the first k vectors carry a gradient.
        if m > k:
            U = U[..., :, :k]
            gU = None if gU is None else gU[..., :, :k]
        if n > k:
            Vh = Vh[..., :k, :]
            gVh = None if gVh is None else gVh[..., :k, :]
    out = None if gS is None else F.matmul(_diag_embed_right(U, gS), Vh)
    if gU is None and gVh is None:
        return (out,)
    # PyTorch's svd_backward (real case): with E_jk = S_k^2 - S_j^2,
    # gA = U [(skew(U^T gU) S + S skew(V^T gV)) / E] V^T + the parts outside span(U), span(V).
    V = mT(F, Vh)
    num = 0
    if gU is not None:
        J = F.matmul(mT(F, U), gU)
        num = (J - mT(F, J)) * F.expand_dims(S, -2)
    if gVh is not None:
        gV = mT(F, gVh)
        K = F.matmul(Vh, gV)
        num = num + F.expand_dims(S, -1) * (K - mT(F, K))
    S2 = S * S
    inner = _gap_divide(F, num, F.expand_dims(S2, -2) - F.expand_dims(S2, -1), S)
    if m > k and gU is not None:
        gUs = gU / F.expand_dims(S, -2)
        left = F.matmul(U, inner) + gUs - F.matmul(U, F.matmul(mT(F, U), gUs))
        ga = F.matmul(left, Vh)
    elif n > k and gVh is not None:
        gVs = mT(F, gV / F.expand_dims(S, -2))
        right = F.matmul(inner, Vh) + gVs - F.matmul(F.matmul(gVs, V), Vh)
        ga = F.matmul(U, right)
    else:
        ga = F.matmul(U, F.matmul(inner, Vh))
    return (ga if out is None else ga + out,)


def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False) -> Any:
    """Singular value decomposition ``a = U @ diag(S) @ Vh``, numpy's ``linalg.svd``.

    Returns ``(U, S, Vh)`` (or ``S`` alone with ``compute_uv=False``), singular values
    descending. Primitive. The gradient through ``S`` alone, ``U diag(g) Vh``, is correct at
    repeated and zero singular values. Gradients through ``U``/``Vh`` need distinct nonzero
    singular values (see the note on ties in the ``gt.linalg`` docs). With
    ``full_matrices=True`` (numpy's default) the extra columns of ``U`` (rows of ``Vh``)
    beyond ``min(M, N)`` are an arbitrary basis of the complement: their cotangents are
    ignored, as in PyTorch; use ``full_matrices=False`` when the loss needs them to be exact.
    ``hermitian=True`` is not supported.

    >>> import gputape as gt
    >>> gt.linalg.svd(gt.constant([[3.0, 0.0], [0.0, -4.0]]), compute_uv=False).numpy().tolist()
    [4.0, 3.0]
    """
    if norm_flag(hermitian, "linalg.svd"):
        raise NotImplementedError("gt.linalg.svd: hermitian=True is not supported; use gt.linalg.eigh")
    full_matrices, compute_uv = norm_flag(full_matrices, "linalg.svd"), norm_flag(compute_uv, "linalg.svd")
    t = matrix_arg(a, "svd", square=False)
    u, s, vh = run(_svd, "svd", (t,), {"full_matrices": full_matrices and compute_uv})
    return SVDResult(u, s, vh) if compute_uv else s


# -- qr ------------------------------------------------------------------------------------


class QRResult(NamedTuple):
    """numpy's result of ``qr``: ``a = Q @ R`` with ``Q`` orthonormal and ``R`` upper triangular."""

    Q: Any
    R: Any


@primitive("linalg.qr", complex="real", save=(0,), save_out=True, nout=2)
def _qr(xp, a, mode):
    if a.ndim > 2 and xp is not np:
        try:
            q, r = xp.linalg.qr(a, mode=mode)
        except LinAlgError:  # a cupy without batched qr: one matrix at a time
            q, r = per_matrix(xp, xp.linalg.qr, a, mode=mode)
        return (q, r)
    q, r = xp.linalg.qr(a, mode=mode)
    return (q, r)


def _times_inv_rt(F: Any, x: Any, r: Any) -> Any:
    """``x @ inv(r).T`` as one solve: ``(r^-1 x^T)^T``."""
    return mT(F, call(F, _solve, (r, mT(F, x)), {"vector": False}))


def _qr_grad_deep(F: Any, q: Any, r: Any, dq: Any, dr: Any) -> Any:
    """TensorFlow's QR gradient for ``M >= N`` (reduced): ``q`` is ``M x N``, ``r`` is ``N x N``."""
    qdq = F.matmul(mT(F, q), dq)
    rdr = F.matmul(r, mT(F, dr))
    low = tril(F, qdq - mT(F, qdq) + rdr - mT(F, rdr))
    return F.matmul(q, dr + _times_inv_rt(F, low, r)) + _times_inv_rt(F, dq - F.matmul(q, qdq), r)


@_qr.defvjp
def _(F, g, needs, nb, node, a, q, r):
    gq, gr = g
    m, n = node.shapes[0][-2:]
    if node.params["mode"] == "complete" and m > n:
        raise NotImplementedError(
            f"gt.linalg.qr: no gradient for mode='complete' with a tall matrix (shape {node.shapes[0]}): the extra "
            "columns of Q are an arbitrary basis; use mode='reduced'"
        )
    # Missing cotangents are zeros, broadcast to the other one's batch (and jacobian) shape.
    if gq is None:
        gq = F.broadcast_to(F.zeros_like(q), gr.shape[:-2] + q.shape[-2:])
    if gr is None:
        gr = F.broadcast_to(F.zeros_like(r), gq.shape[:-2] + r.shape[-2:])
    if m >= n:
        return (_qr_grad_deep(F, q, r, gq, gr),)
    # Wide: a = [x, y], r = [u, v] with u square; reduce to the square case (TensorFlow's way).
    y = a[..., :, m:]
    dv = gr[..., :, m:]
    dx = _qr_grad_deep(F, q, r[..., :, :m], gq + F.matmul(y, mT(F, dv)), gr[..., :, :m])
    return (F.concatenate([dx, F.matmul(q, dv)], axis=-1),)


def qr(a: Any, mode: str = "reduced") -> Any:
    """QR decomposition, numpy's ``linalg.qr``: ``(Q, R)``, or ``R`` alone with ``mode='r'``.

    Primitive; the gradient (TensorFlow's formula, square, tall and wide inputs) needs ``R``
    invertible on its leading square block (``a`` of full rank). ``mode='complete'`` is
    differentiable only when ``M <= N`` (otherwise the extra columns of ``Q`` are arbitrary);
    ``mode='raw'`` is not supported.

    >>> import gputape as gt
    >>> q, r = gt.linalg.qr(gt.constant([[3.0, 1.0], [4.0, 2.0]], dtype="float64"))
    >>> abs(r.numpy()).round(3).tolist()
    [[5.0, 2.2], [0.0, 0.4]]
    """
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"gt.linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    t = matrix_arg(a, "qr", square=False)
    q, r = run(_qr, "qr", (t,), {"mode": "reduced" if mode == "r" else mode})
    return r if mode == "r" else QRResult(q, r)


# -- pinv -------------------------------------------------------------------------------------


@primitive("linalg.pinv", complex="real", save=(0,), save_out=True)
def _pinv(xp, a, rcond):
    return xp.linalg.pinv(a, rcond=rcond)


@_pinv.defvjp
def _(F, g, needs, nb, node, a, x):
    # Golub & Pereyra: dX = -X dA X + X X^T dA^T (I - A X) + (I - X A) dA^T X^T X, so
    # gA = -X^T g X^T + (I - A X) g^T X X^T + X^T X g^T (I - X A); exact while the rank is locally constant.
    xt, gt_ = mT(F, x), mT(F, g)
    t1 = -F.matmul(xt, F.matmul(g, xt))
    t2 = F.matmul(gt_ - F.matmul(a, F.matmul(x, gt_)), F.matmul(x, xt))
    t3 = F.matmul(F.matmul(xt, x), gt_ - F.matmul(F.matmul(gt_, x), a))
    return (t1 + t2 + t3,)


def pinv(a: Any, rcond: float | None = None) -> Tensor:
    """Moore-Penrose pseudo-inverse, numpy's ``linalg.pinv``; singular values below
    ``rcond * max(S)`` are treated as zero (default: numpy's ``max(M, N) * eps``). A
    non-finite ``rcond`` is refused (``ValueError``): numpy accepts it and returns zeros.

    Primitive with its own gradient formula (Golub and Pereyra), which is exact while no
    singular value crosses the cutoff (constant rank), including rank-deficient matrices.

    >>> import gputape as gt
    >>> gt.linalg.pinv(gt.constant([[2.0, 0.0], [0.0, 0.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    t = matrix_arg(a, "pinv", square=False)
    if rcond is None:
        rcond = max(t.shape[-2:]) * float(np.finfo(t.dtype if t.dtype.kind == "f" else np.float64).eps)
    return run(_pinv, "pinv", (t,), {"rcond": norm_real(rcond, "linalg.pinv", "rcond", finite=True)})


# -- lstsq ---------------------------------------------------------------------------------------


class LstsqResult(NamedTuple):
    """numpy's result of ``lstsq``: solution, residual sums of squares, rank, singular values."""

    x: Any
    residuals: Any
    rank: int
    s: Any


def lstsq(a: Any, b: Any, rcond: float | None = None) -> LstsqResult:
    """Least-squares solution of ``a @ x = b`` (numpy's ``linalg.lstsq``, ``a`` of shape ``(M, N)``).

    A composition: ``x = pinv(a, rcond) @ b`` (numpy's cutoff ``rcond * max(S)``, default
    ``max(M, N) * eps``), so its gradient is exact while the rank does not change;
    ``residuals`` (the squared 2-norm of each column of ``b - a @ x``, empty unless ``a``
    has full column rank ``N < M``) and ``s`` are differentiable too; ``rank`` is a Python int.

    >>> import gputape as gt
    >>> a = gt.constant([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype="float64")
    >>> r = gt.linalg.lstsq(a, gt.constant([1.0, 1.0, 3.0], dtype="float64"))
    >>> r.x.numpy().round(6).tolist(), r.residuals.numpy().round(6).tolist(), r.rank
    ([1.333333, 1.333333], [0.333333], 2)
    """
    at = matrix_arg(a, "lstsq", square=False)
    bt = matrix_arg(b, "lstsq", square=False) if as_tensor(b).ndim >= 2 else as_tensor(b)
    if at.ndim != 2 or bt.ndim > 2 or bt.ndim == 0:
        raise LinAlgError(
            f"gt.linalg.lstsq: needs a of shape (M, N) and b of shape (M,) or (M, K), got {at.shape} and {bt.shape}"
        )
    m, n = at.shape
    if bt.shape[0] != m:
        raise LinAlgError(f"gt.linalg.lstsq: incompatible dimensions: a is {at.shape}, b is {bt.shape}")
    if bt.dtype.kind == "c":
        matrix_arg(bt[:, None] if bt.ndim == 1 else bt, "lstsq", square=False)
    eps = float(np.finfo(at.dtype if at.dtype.kind == "f" else np.float64).eps)
    rcond = None if rcond is None else norm_real(rcond, "linalg.lstsq", "rcond", finite=True)
    rc = max(m, n) * eps if rcond is None or rcond < 0 else rcond
    s = svd(at, compute_uv=False)
    sv = s.numpy()
    rank = int(np.sum(sv > rc * sv.max())) if sv.size else 0
    x = ops.matmul(pinv(at, rcond=rc), bt)
    if rank == n and m > n:
        resid = ops.sum((bt - ops.matmul(at, x)) ** 2, axis=0)
        residuals = ops.reshape(resid, (1,)) if bt.ndim == 1 else resid
    else:
        residuals = ops.zeros((0,), dtype=x.dtype)
    return LstsqResult(x, residuals, rank, s)
