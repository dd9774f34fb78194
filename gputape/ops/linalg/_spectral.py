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
from ...devices import backend
from .._util import norm_flag, norm_real
from ._core import LinAlgError, _solve, call, conj, matrix_arg, mH, number_arg, per_matrix, run, tril, xp_in_vjp


def _gap_divide(F: Any, num: Any, gap: Any, ref: Any) -> Any:
    """``num / gap`` off the diagonal, 0 on it, NaN at exact ties.

    The diagonal of ``num`` is 0 for real values; for complex ones it holds the phase
    (gauge) terms, which a loss that does not depend on the vectors' phases has as 0: the
    exact projection drops them.
    """
    tie = gap == 0
    q = num / F.where(tie, 1, gap)
    off = ~xp_in_vjp(F, ref).eye(num.shape[-1], dtype=bool)
    # NaN enters as a constant of where(), never as num * nan: where's VJP sends an exact 0
    # to the unselected branch, and 0 * nan would still be NaN in every gradient.
    return F.where(off, F.where(tie, float("nan"), q), 0)


def _diag(F: Any, x: Any) -> Any:
    """The diagonal of each matrix (batch and jacobian axes in front)."""
    return F.sum(x * xp_in_vjp(F, x).eye(x.shape[-1], dtype=np.finfo(x.dtype).dtype), -1)


def _diag_embed(F: Any, d: Any, ref: Any) -> Any:
    """Diagonal matrices with ``d`` on the diagonal."""
    return F.expand_dims(d, -2) * xp_in_vjp(F, ref).eye(d.shape[-1], dtype=ref.dtype)


def _phase_free(F: Any, im_diag: Any, fn: str, what: str) -> None:
    """Refuse a loss that depends on the phases of complex eigen/singular vectors (as PyTorch does).

    Each vector is defined only up to a factor e^(i phi); the derivative of the loss along phi
    is ``im_diag`` (per vector). PyTorch's tolerance: ``allclose(im_diag, 0, 1e-2, 1e-2)``.
    """
    raw = im_diag._data if isinstance(im_diag, Tensor) else im_diag
    xp = backend.xp_of(raw)
    if not bool(xp.allclose(raw, 0, rtol=1e-2, atol=1e-2)):
        worst = float(xp.abs(raw).max())
        raise ValueError(
            f"gt.linalg.{fn}: the loss depends on the phases of the complex {what} (each is defined only up "
            f"to a factor e^(i phi); d loss / d phi is up to {worst:.3g}), so its gradient is not defined. "
            f"Use a loss invariant to those phases (abs() of the vectors' entries, products v v^H, or "
            f"normalise each vector's phase explicitly before using it)"
        )


def _diag_embed_right(x: Any, d: Any) -> Any:
    """``x @ diag(d)``: scale the columns of ``x`` (no identity matrix needed)."""
    return x * d[..., None, :]


# -- eigh -------------------------------------------------------------------------------


class EighResult(NamedTuple):
    """numpy's result of ``eigh``: ascending eigenvalues and the eigenvectors as columns."""

    eigenvalues: Any
    eigenvectors: Any


@primitive("linalg.eigh", complex="direct", save_out=True, nout=2)
def _eigh(xp, a, UPLO):
    w, v = xp.linalg.eigh(a, UPLO=UPLO)
    return (w, v)


@_eigh.defvjp
def _(F, g, needs, nb, node, w, V):
    gw, gV = g
    # A = V diag(w) V^H: gA = V (diag(gw) + skew(V^H gV) / (w_j - w_i)) V^H, Hermitian
    # (PyTorch's linalg_eig_backward for Hermitian input).
    inner = None
    if gV is not None:
        M = F.matmul(mH(F, V), gV)
        if M.dtype.kind == "c":
            _phase_free(F, F.imag(_diag(F, M)), "eigh", "eigenvectors")
        inner = _gap_divide(F, (M - mH(F, M)) * 0.5, F.expand_dims(w, -2) - F.expand_dims(w, -1), w)
    if gw is not None:
        vg = _diag_embed_right(V, gw)
        if inner is None:
            return (F.matmul(vg, mH(F, V)),)
        return (F.matmul(vg + F.matmul(V, inner), mH(F, V)),)
    return (F.matmul(V, F.matmul(inner, mH(F, V))),)


def _uplo(UPLO: str, fn: str) -> str:
    if UPLO not in ("L", "U"):
        raise ValueError(f"gt.linalg.{fn}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return UPLO


def eigh(a: Any, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of a symmetric (Hermitian) matrix, numpy's ``linalg.eigh``.

    Only the ``UPLO`` triangle of ``a`` is read. Primitive; the gradient is the symmetric
    (Hermitian) matrix that gives the derivative along such perturbations (PyTorch's
    convention). Eigenvector gradients need distinct eigenvalues: see this module's note on
    ties (``gt.linalg`` docs). Eigenvector signs (phases, for complex ``a``) are whatever
    LAPACK (or cuSOLVER) returns; a loss that depends on a complex eigenvector's phase has no
    gradient and raises ``ValueError`` in ``tape.gradient``, as PyTorch does.

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


# -- eig (general matrices) ------------------------------------------------------------------


class EigResult(NamedTuple):
    """numpy's result of ``eig``: the eigenvalues and the unit-norm right eigenvectors as columns."""

    eigenvalues: Any
    eigenvectors: Any


def _no_cupy_eig(xp: Any, why: str) -> NotImplementedError:
    return NotImplementedError(
        f"gt.linalg.eig: {why} (CuPy {getattr(xp, '__version__', '?')}): the general eigendecomposition on a GPU "
        "needs cupy.linalg.eig, which recent CuPy versions have where cuSOLVER offers geev; move the matrix to "
        "the CPU with a.to('cpu'), or use gt.linalg.eigh for a symmetric (Hermitian) matrix"
    )


@primitive("linalg.eig", complex="direct", save_out=True, nout=2)
def _eig(xp, a):
    fn = getattr(xp.linalg, "eig", None)
    if fn is None:  # say so instead of copying to the host behind the user's back
        raise _no_cupy_eig(xp, "this CuPy has no cupy.linalg.eig")
    try:
        w, v = fn(a)
    except RuntimeError as exc:  # cupy's "geev is not available": a cuSOLVER without it
        if "geev" in str(exc):
            raise _no_cupy_eig(xp, f"cupy.linalg.eig is unavailable here ({exc})") from exc
        raise
    return (w, v)


@_eig.defvjp
def _(F, g, needs, nb, node, w, V):
    # PyTorch's linalg_eig_backward (JAX's eig JVP transposed): with E_ij = conj(w_j - w_i),
    # gA = V^-H (diag(gw) + (V^H gV - V^H V diag(Re(diag(V^H gV)))) / E) V^H.
    # numpy's V has unit-norm columns: the subtracted term projects gV onto that constraint,
    # and a complex column's phase is free (the gauge), which the loss must not depend on.
    gw, gV = g
    Vh = mH(F, V)
    if gV is None:
        inner = _diag_embed(F, gw, Vh)
    else:
        M = F.matmul(Vh, gV)
        d = _diag(F, M)
        if d.dtype.kind == "c":
            _phase_free(F, F.imag(d), "eig", "eigenvectors")
            d = F.real(d)
        M = M - F.matmul(Vh, V * F.expand_dims(d, -2))
        wc = conj(F, w)
        inner = _gap_divide(F, M, F.expand_dims(wc, -2) - F.expand_dims(wc, -1), M)
        if gw is not None:
            inner = inner + _diag_embed(F, gw, inner)
    ga = call(F, _solve, (Vh, F.matmul(inner, Vh)), {"vector": False})
    casts = node.casts
    if casts is not None and casts[0] is not None and casts[0].kind != "c" and ga.dtype.kind == "c":
        ga = F.real(ga)  # a real matrix with complex eigenvalues: its gradient is the real part
    return (ga,)


def _eig_run(a: Any, fn: str) -> tuple[Tensor, Tensor]:
    t = matrix_arg(a, fn)
    if t.dtype.kind in "iu":
        t = ops.cast(t, np.float64)  # (numpy's rule for integer input)
    return run(_eig, fn, (t,))


def eig(a: Any) -> EigResult:
    """Eigenvalues and right eigenvectors of a general square matrix, numpy's ``linalg.eig``.

    As numpy: the eigenvalues are in LAPACK's order, the eigenvectors (columns) have unit
    2-norm, and for a real ``a`` the results are real when every eigenvalue is real and
    complex otherwise (conjugate pairs). Primitive; the gradient is PyTorch's (JAX's eig
    JVP, transposed), and for a real ``a`` it is the real part.

    - Gauge: each eigenvector is fixed only up to a factor (numpy normalises its norm to 1;
      its phase, or sign, is LAPACK's choice). The gradient projects out the norm direction,
      and a loss that depends on a complex eigenvector's phase has no gradient: ``tape.gradient``
      raises ``ValueError`` (PyTorch raises too). Losses of ``abs(v)``, ``v v^H``, of the
      eigenvalues, or of ``V diag(f(w)) V^-1`` are phase-free.
    - Degenerate eigenvalues: as PyTorch documents, gradients through the eigenvectors are
      finite only for distinct eigenvalues (NaN at exactly equal ones, huge and unstable
      near them); gradients of the eigenvalues alone (``eigvals``) stay finite for
      diagonalisable ``a``.
    - On a GPU it needs ``cupy.linalg.eig`` (recent CuPy, where cuSOLVER has ``geev``);
      without it ``NotImplementedError`` names it. CuPy's results are always complex and its
      eigenvalue order may differ from numpy's (CuPy documents both).

    >>> import gputape as gt
    >>> w, v = gt.linalg.eig(gt.constant([[2.0, 1.0], [0.0, 3.0]], dtype="float64"))
    >>> w.numpy().tolist()
    [2.0, 3.0]
    >>> gt.linalg.eig(gt.constant([[0.0, -1.0], [1.0, 0.0]], dtype="float64")).eigenvalues.numpy().tolist()
    [1j, -1j]
    """
    w, v = _eig_run(a, "eig")
    return EigResult(w, v)


def eigvals(a: Any) -> Tensor:
    """Eigenvalues of a general square matrix, numpy's ``linalg.eigvals`` (same values, order and dtype as ``eig``).

    ``eig(a)[0]``, so its gradient ``V^-H diag(g) V^H`` uses the eigenvectors; it is finite
    for any diagonalisable ``a`` (repeated eigenvalues included).

    >>> import gputape as gt
    >>> a = gt.constant([[1.0, 2.0], [3.0, 4.0]], dtype="float64")
    >>> with gt.GradientTape() as tape:
    ...     tape.watch(a)
    ...     s = gt.sum(gt.linalg.eigvals(a))  # the trace
    >>> (tape.gradient(s, a).numpy().round(12) + 0.0).tolist()  # (+ 0.0: no negative zeros)
    [[1.0, 0.0], [0.0, 1.0]]
    """
    return _eig_run(a, "eigvals")[0]


# -- svd ----------------------------------------------------------------------------------


class SVDResult(NamedTuple):
    """numpy's result of ``svd``: ``a = U @ diag(S) @ Vh``."""

    U: Any
    S: Any
    Vh: Any


@primitive("linalg.svd", complex="direct", save_out=True, nout=3)
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
    # PyTorch's svd_backward: with E_jk = S_k^2 - S_j^2,
    # gA = U [(skew(U^H gU) S + S skew(V^H gV)) / E + the phase term] V^H + the parts outside
    # span(U), span(V). For complex values the pair (u_i, v_i) is defined up to a common
    # factor e^(i phi): the loss must not depend on it, and the diagonal carries
    # i Im(diag(U^H gU) - diag(V^H gV)) / (2 S) (0 for real values).
    V = mH(F, Vh)
    num = 0
    im = 0
    if gU is not None:
        J = F.matmul(mH(F, U), gU)
        num = (J - mH(F, J)) * F.expand_dims(S, -2)
        if J.dtype.kind == "c":
            im = F.imag(_diag(F, J))
    if gVh is not None:
        gV = mH(F, gVh)
        K = F.matmul(Vh, gV)
        num = num + F.expand_dims(S, -1) * (K - mH(F, K))
        if K.dtype.kind == "c":
            imk = F.imag(_diag(F, K))
            _phase_free(F, im + imk, "svd", "singular vectors")
            im = im - imk
    elif gU is not None and J.dtype.kind == "c":
        _phase_free(F, im, "svd", "singular vectors")
    S2 = S * S
    inner = _gap_divide(F, num, F.expand_dims(S2, -2) - F.expand_dims(S2, -1), S)
    if not isinstance(im, int):
        inner = inner + _diag_embed(F, im * (0.5j) / S, inner)
    if m > k and gU is not None:
        gUs = gU / F.expand_dims(S, -2)
        left = F.matmul(U, inner) + gUs - F.matmul(U, F.matmul(mH(F, U), gUs))
        ga = F.matmul(left, Vh)
    elif n > k and gVh is not None:
        gVs = mH(F, gV / F.expand_dims(S, -2))
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
    singular values (see the note on ties in the ``gt.linalg`` docs), and for complex ``a`` a
    loss that does not depend on the common phase of each pair ``(U[:, i], Vh[i])``
    (otherwise ``tape.gradient`` raises ``ValueError``, as PyTorch does). With
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


@primitive("linalg.qr", complex="direct", save=(0,), save_out=True, nout=2)
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
    """``x @ inv(r)^H`` as one solve: ``(r^-1 x^H)^H``."""
    return mH(F, call(F, _solve, (r, mH(F, x)), {"vector": False}))


def _qr_grad_deep(F: Any, q: Any, r: Any, dq: Any, dr: Any) -> Any:
    """TensorFlow's QR gradient for ``M >= N`` (reduced): ``q`` is ``M x N``, ``r`` is ``N x N``."""
    qdq = F.matmul(mH(F, q), dq)
    rdr = F.matmul(r, mH(F, dr))
    low = tril(F, qdq - mH(F, qdq) + rdr - mH(F, rdr))
    ga = F.matmul(q, dr + _times_inv_rt(F, low, r)) + _times_inv_rt(F, dq - F.matmul(q, qdq), r)
    if qdq.dtype.kind != "c":
        return ga
    # TensorFlow's complex correction: R's real diagonal pins the phases, which adds
    # i Im(diag(r dr^H - dq^H q)) through the same triangular solve.
    corr = _diag_embed(F, F.imag(_diag(F, rdr - mH(F, qdq))) * 1j, qdq)
    return ga + _times_inv_rt(F, F.matmul(q, mH(F, corr)), r)


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
    dx = _qr_grad_deep(F, q, r[..., :, :m], gq + F.matmul(y, mH(F, dv)), gr[..., :, :m])
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


@primitive("linalg.pinv", complex="direct", save=(0,), save_out=True)
def _pinv(xp, a, rcond):
    return xp.linalg.pinv(a, rcond=rcond)


@_pinv.defvjp
def _(F, g, needs, nb, node, a, x):
    # Golub & Pereyra: dX = -X dA X + X X^H dA^H (I - A X) + (I - X A) dA^H X^H X, so
    # gA = -X^H g X^H + (I - A X) g^H X X^H + X^H X g^H (I - X A); exact while the rank is locally constant.
    xt, gt_ = mH(F, x), mH(F, g)
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
        rcond = max(t.shape[-2:]) * float(np.finfo(t.dtype if t.dtype.kind in "fc" else np.float64).eps)
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
    bt = matrix_arg(b, "lstsq", square=False) if as_tensor(b).ndim >= 2 else number_arg(b, "lstsq")
    if at.ndim != 2 or bt.ndim > 2 or bt.ndim == 0:
        raise LinAlgError(
            f"gt.linalg.lstsq: needs a of shape (M, N) and b of shape (M,) or (M, K), got {at.shape} and {bt.shape}"
        )
    m, n = at.shape
    if bt.shape[0] != m:
        raise LinAlgError(f"gt.linalg.lstsq: incompatible dimensions: a is {at.shape}, b is {bt.shape}")
    eps = float(np.finfo(at.dtype if at.dtype.kind in "fc" else np.float64).eps)
    rcond = None if rcond is None else norm_real(rcond, "linalg.lstsq", "rcond", finite=True)
    rc = max(m, n) * eps if rcond is None or rcond < 0 else rcond
    s = svd(at, compute_uv=False)
    sv = s.numpy()
    rank = int(np.sum(sv > rc * sv.max())) if sv.size else 0
    x = ops.matmul(pinv(at, rcond=rc), bt)
    if rank == n and m > n:
        rb = bt - ops.matmul(at, x)
        resid = ops.sum(ops.real(rb * ops.conj(rb)) if rb.dtype.kind == "c" else rb**2, axis=0)
        residuals = ops.reshape(resid, (1,)) if bt.ndim == 1 else resid
    else:
        residuals = ops.zeros((0,), dtype=x.dtype)
    return LstsqResult(x, residuals, rank, s)
