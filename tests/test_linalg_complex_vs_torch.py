"""gt.linalg's complex gradients (and eig's real and complex ones) against PyTorch, in complex128.

For a real loss both libraries give ``dL/dx + i dL/dy`` (tests/test_complex_vs_torch.py says
why), so each case computes the same real loss of the same function in both and compares
the gradients and a Hessian-vector product along a complex direction. Losses of eigenvectors
and singular vectors are phase free and do not depend on the order of the eigenvalues (the
two libraries' LAPACKs may order them differently).
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt

torch = pytest.importorskip("torch", reason="PyTorch is not installed; these tests compare gradients with it")
pytestmark = pytest.mark.torch
TL = torch.linalg
rng = np.random.default_rng(31)


def cplx(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def cwell(*shape):
    return 0.3 * cplx(*shape) + 2.0 * np.eye(shape[-1])


def hpd(*shape):
    a = cplx(*shape)
    return a @ np.conj(np.swapaxes(a, -1, -2)) / shape[-1] + np.eye(shape[-1])


W9 = np.arange(1.0, 10.0).reshape(3, 3) / 9


def _gt_eig_loss(w, v):
    # a sum over eigenpairs (order free) of a function of w_i and |v_i| (phase free)
    return gt.sum(gt.abs(w) ** 1.5 * gt.sum(gt.abs(v) ** 2 * W9[:, :1], axis=-2)) + gt.sum(gt.real(w * w))


def _t_eig_loss(w, v):
    return (w.abs() ** 1.5 * ((v.abs() ** 2) * torch.tensor(W9[:, :1])).sum(-2)).sum() + (w * w).real.sum()


def _gt_qr(x):
    q, r = gt.linalg.qr(x)
    k = min(x.shape[-2:])
    d = gt.sign(gt.real(gt.sum(r[..., :, :k] * np.eye(k), axis=-1)))
    return gt.concatenate([gt.reshape(q * d[..., None, :], (-1,)), gt.reshape(r * d[..., :, None], (-1,))])


def _t_qr(x):
    q, r = TL.qr(x)
    d = torch.sign(torch.diagonal(r, 0, -2, -1).real)
    return torch.cat([(q * d[..., None, :]).reshape(-1), (r * d[..., :, None]).reshape(-1)])


def _gt_svd(x):
    u, s, vh = gt.linalg.svd(x, full_matrices=False)
    parts = [s, gt.abs(u), gt.abs(vh), gt.matmul(u * (s**2)[..., None, :], vh)]
    return gt.concatenate([gt.reshape(p, (-1,)) for p in parts])


def _t_svd(x):
    u, s, vh = TL.svd(x, full_matrices=False)
    parts = [s, u.abs(), vh.abs(), (u * (s**2)[..., None, :]) @ vh]
    return torch.cat([p.reshape(-1) for p in parts])


# name -> (gputape function, torch function, inputs); outputs may be real or complex
CASES = {
    "inv": (gt.linalg.inv, TL.inv, (cwell(3, 3),)),
    "solve": (gt.linalg.solve, TL.solve, (cwell(2, 3, 3), cplx(2, 3, 2))),
    "det": (gt.linalg.det, TL.det, (cwell(3, 3),)),
    "slogdet": (
        lambda a: gt.concatenate([gt.reshape(p, (-1,)) for p in gt.linalg.slogdet(a)]),
        lambda a: torch.cat([p.reshape(-1) for p in TL.slogdet(a)]),
        (cwell(2, 3, 3),),
    ),
    # the same formula in both (Murray's, with conjugate transposes): compared without symmetrising
    "cholesky": (gt.linalg.cholesky, TL.cholesky, (hpd(3, 3),)),
    "eigh": (
        lambda a: (lambda w, v: gt.concatenate([w, gt.reshape(gt.abs(v), (-1,))]))(*gt.linalg.eigh(a)),
        lambda a: (lambda w, v: torch.cat([w, v.abs().reshape(-1)]))(*TL.eigh(a)),
        (hpd(3, 3),),
    ),
    "eigvalsh": (gt.linalg.eigvalsh, TL.eigvalsh, (hpd(4, 4),)),
    "svd-square": (_gt_svd, _t_svd, (cplx(3, 3),)),
    "svd-tall": (_gt_svd, _t_svd, (cplx(4, 2),)),
    "svd-wide": (_gt_svd, _t_svd, (cplx(2, 4),)),
    "svdvals": (lambda a: gt.linalg.svd(a, compute_uv=False), TL.svdvals, (cplx(3, 4),)),
    "qr-tall": (_gt_qr, _t_qr, (cplx(4, 3),)),
    "qr-wide": (_gt_qr, _t_qr, (cplx(2, 4),)),
    "pinv": (gt.linalg.pinv, TL.pinv, (cplx(4, 3),)),
    "matrix_power": (lambda a: gt.linalg.matrix_power(a, -3), lambda a: TL.matrix_power(a, -3), (cwell(3, 3),)),
    "lstsq": (lambda a, b: gt.linalg.lstsq(a, b).x, lambda a, b: TL.lstsq(a, b).solution, (cplx(5, 3), cplx(5, 2))),
    "eig-complex": (
        lambda a: _gt_eig_loss(*gt.linalg.eig(a)),
        lambda a: _t_eig_loss(*TL.eig(a)),
        (cplx(3, 3),),
    ),
    "eig-real": (
        lambda a: _gt_eig_loss(*gt.linalg.eig(a)),
        lambda a: _t_eig_loss(*TL.eig(a)),
        (np.array([[0.3, -1.2, 0.1], [1.0, 0.2, 0.4], [0.1, 0.3, 2.0]]),),
    ),
    "eigvals": (
        lambda a: gt.sum(gt.linalg.eigvals(a) ** 2) + gt.sum(gt.abs(gt.linalg.eigvals(a)) ** 3),
        lambda a: (TL.eigvals(a) ** 2).sum() + (TL.eigvals(a).abs() ** 3).sum(),
        (cplx(2, 3, 3),),
    ),
}
for _o in [None, 1, 2, 3, 0.5, np.inf, -np.inf]:
    CASES[f"vector_norm-{_o}"] = (
        lambda x, o=_o: gt.linalg.norm(x, o, axis=-1),
        lambda x, o=_o: TL.vector_norm(x, 2 if o is None else o, dim=-1),
        (cplx(2, 5),),
    )
for _o in ["fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]:
    CASES[f"matrix_norm-{_o}"] = (
        lambda x, o=_o: gt.linalg.norm(x, o, axis=(-2, -1)),
        lambda x, o=_o: TL.matrix_norm(x, o),
        (cplx(2, 3, 4),),
    )


def _loss_weights(shape, complex_out, seed):
    r = np.random.default_rng(seed)
    w = r.standard_normal(shape)
    return w + 1j * r.standard_normal(shape) if complex_out else w


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_and_hessian_vector_product_match_pytorch(name):
    gf, tf, arrays = CASES[name]
    ta = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = tf(*ta)
    w = _loss_weights(tuple(ty.shape), ty.is_complex(), 7)
    vs = [
        _loss_weights(a.shape, True, 8 + k) if np.iscomplexobj(a) else _loss_weights(a.shape, False, 8 + k)
        for k, a in enumerate(arrays)
    ]
    # the real loss Re(sum(conj(w) * f)): its gradient, then the gradient of <grad, v>
    tl = (torch.tensor(w).conj() * ty).real.sum()
    tg = torch.autograd.grad(tl, ta, create_graph=True)
    ts = sum((g * torch.tensor(v).conj()).real.sum() for g, v in zip(tg, vs))
    th = torch.autograd.grad(ts, ta)

    xs = [gt.constant(a) for a in arrays]
    with gt.GradientTape() as outer:
        outer.watch(xs)
        with gt.GradientTape() as inner:
            inner.watch(xs)
            y = gf(*xs)
            loss = gt.sum(gt.real(np.conj(w) * y))
        gg = inner.gradient(loss, xs)
        s = sum(gt.sum(gt.real(g * np.conj(v))) for g, v in zip(gg, vs))
    hh = outer.gradient(s, xs)

    assert_allclose(y.numpy(), ty.detach().resolve_conj().numpy(), rtol=1e-10, atol=1e-12, err_msg="forward value")
    for k in range(len(arrays)):
        assert gg[k].dtype == arrays[k].dtype
        assert_allclose(
            gg[k].numpy(), tg[k].detach().resolve_conj().numpy(), rtol=1e-8, atol=1e-10, err_msg=f"gradient {k}"
        )
        assert_allclose(
            hh[k].numpy(), th[k].resolve_conj().numpy(), rtol=1e-7, atol=1e-9, err_msg=f"Hessian-vector product {k}"
        )


def test_both_refuse_a_loss_that_depends_on_an_eigenvectors_phase():
    a = cplx(3, 3)
    t = torch.tensor(a, requires_grad=True)
    with pytest.raises(RuntimeError, match="ill-defined"):
        TL.eig(t)[1].real.sum().backward()
    x = gt.constant(a)
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.sum(gt.real(gt.linalg.eig(x)[1]))
    with pytest.raises(ValueError, match="phases"):
        tape.gradient(y, x)
