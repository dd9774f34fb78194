"""Walk the primitive registry for complex values: every primitive declares what it does with them
(``complex=`` on its declaration, no default), and the declaration is checked here.

- ``holomorphic`` and ``direct``: ``check_grads`` to second order on complex128 input, along real
  and imaginary directions, with the registry's own cases (tests/test_grad_registry.py) made
  complex, and with one operand real and the others complex: the real operand's gradient has
  the real dtype and is the real part of the gradient it gets as a complex number (TensorFlow's
  and numpy's convention: a gradient has its input's dtype; autograd's ``test_einsum_matmult``).
- ``refused``: complex values on a tape raise a TypeError naming the op, saying why and what to use.
- ``real``: the forward refuses complex input, as numpy's does.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import test_grad_registry as reg
import test_linalg_complex as lc

import gputape as gt
from gputape.core.dispatch import primitive
from gputape.core.primitive import COMPLEX_STATUSES, REGISTRY
from gputape.testing import check_grads

rng = np.random.default_rng(2727)


def status(name):
    s = REGISTRY[name].complex
    return "refused" if s.startswith("refused: ") else s


def cx(a):
    """A float array made complex (a small imaginary part keeps the cases' domains); others as they are."""
    a = np.asarray(a)
    return a + 0.3j * rng.standard_normal(a.shape) if a.dtype.kind == "f" else a


Z = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))

# cases the real ones do not carry over to: a real-input transform, and cast (whose real case
# casts to float64 on purpose)
OWN_CASES = {
    "cast": [(lambda z: gt.cast(gt.real(z), "complex128") * z, (Z,)), (lambda z: gt.cast(z, "complex128") * z, (Z,))],
    "fft.rfftn": [  # real input, complex output: the half spectrum scaled by a complex weight
        (lambda x: gt.fft.rfft(x) * (0.5 - 2j), (reg.r(3, 6),)),
        (lambda z: gt.fft.rfftn(gt.real(z) * gt.imag(z), s=(4, 5), axes=(0, 1), norm="ortho"), (Z,)),
    ],
}

# gt.linalg's decompositions: the real cases made complex are neither Hermitian where the
# primitive reads one triangle nor free of the vectors' phases; tests/test_linalg_complex.py's are
_LINALG_OWN = {
    "cholesky": ["cholesky", "cholesky-batch"],
    "eigh": ["eigh", "eigh-U", "eigh-projector", "eigvalsh"],
    "eig": ["eig", "eig-function", "eigvals"],
    "qr": ["qr-square", "qr-tall", "qr-wide", "qr-batch"],
    "svd": ["svd-square", "svd-tall", "svd-wide-batch", "svd-full", "svd-S", "svd-U-only", "svd-Vh-only"],
}
OWN_CASES.update({f"linalg.{n}": [lc.GRAD_CASES[k] for k in keys] for n, keys in _LINALG_OWN.items()})


def complex_cases(name):
    if name in OWN_CASES:
        return OWN_CASES[name]
    return [(f, tuple(cx(a) for a in args)) for f, args in reg.CASES[name]]


DIFFERENTIABLE = [n for n in sorted(REGISTRY) if status(n) in ("holomorphic", "direct")]
CHECKED = [(n, i, f, args) for n in DIFFERENTIABLE for i, (f, args) in enumerate(complex_cases(n))]


def test_every_primitive_declares_its_complex_status():
    table = {name: status(name) for name in sorted(REGISTRY)}
    assert set(table.values()) <= set(COMPLEX_STATUSES) | {"refused"}, table
    for name, s in table.items():
        if s == "refused":  # the reason is a sentence with what to use instead
            why = REGISTRY[name].complex.removeprefix("refused: ")
            assert len(why) > 40 and "gt." in why, (name, why)
    # the statuses numpy's definitions fix: ordered ops refuse (as PyTorch's max), holomorphic ones work
    for name in ("max", "min", "maximum", "minimum", "fmax", "fmin", "clip", "sign"):
        assert table[name] == "refused", name
    for name in ("arccosh", "sinc", "logsumexp", "power", "einsum", "matmul", "exp", "log", "sqrt"):
        assert table[name] == "holomorphic", name
    for name in ("floor", "ceil", "hypot", "arctan2", "logaddexp", "mod", "floor_divide", "deg2rad"):
        assert table[name] == "real", name


def test_a_primitive_cannot_be_declared_without_a_complex_status():
    with pytest.raises(TypeError, match="complex"):
        primitive("test_undeclared")
    with pytest.raises(ValueError, match=r"'test_typo'.*not a complex status.*holomorphic"):
        primitive("test_typo", complex="holomorphc")(lambda xp, x: x)
    assert "test_undeclared" not in REGISTRY and "test_typo" not in REGISTRY


@pytest.mark.parametrize(("name", "i", "f", "args"), CHECKED, ids=[f"{n}-{i}" for n, i, _, _ in CHECKED])
def test_declared_complex_primitives_pass_check_grads_on_complex128(name, i, f, args):
    assert any(np.iscomplexobj(a) for a in args) or name == "fft.rfftn"
    check_grads(f, *args, order=2)


def _refusal_cases():
    out = []
    for name in sorted(REGISTRY):
        if status(name) in ("refused", "real"):
            out += [(name, i, f, args) for i, (f, args) in enumerate(complex_cases(name))]
    return out


REFUSALS = _refusal_cases()


@pytest.mark.parametrize(("name", "i", "f", "args"), REFUSALS, ids=[f"{n}-{i}" for n, i, _, _ in REFUSALS])
def test_refused_and_real_only_primitives_say_so_on_complex_values(name, i, f, args):
    xs = [gt.constant(a) for a in args]
    try:
        f(*xs)  # off the tape
    except TypeError as e:  # the forward refuses complex input (numpy's ufuncs, gt.nn)
        msg = str(e)
        assert re.match(r"gt\.[\w.]+: ", msg) and "complex" in msg, msg
        assert status(name) == "real" or name == "erf", f"{name} is declared refused but its forward refuses: {msg}"
        return
    assert status(name) == "refused", f"{name} is declared real-only but its forward takes complex values"
    with gt.GradientTape() as tape:
        tape.watch(xs)
        with pytest.raises(TypeError) as info:
            f(*xs)
    msg = str(info.value)
    assert msg.startswith(f"gt.{name}: gradients through complex values"), msg
    assert REGISTRY[name].complex.removeprefix("refused: ") in msg


# -- one operand real, the others complex ---------------------------------------------------


def _mixed():
    out = []
    for n, i, f, args in CHECKED:
        operands = [k for k, a in enumerate(args) if np.iscomplexobj(a)]
        if len(operands) > 1:  # the binary (and n-ary) cases: each operand real in turn
            out += [(n, i, k, f, args) for k in operands]
    return out


MIXED = _mixed()


def _grads(f, vals, k):
    """The gradient for operand k of a real loss of f, at first and second order, and its Jacobian."""
    xs = [gt.constant(a) for a in vals]
    y0 = reg._flat(f(*xs))
    w = np.cos(np.arange(y0.size)).reshape(y0.shape) + 1j * np.sin(np.arange(y0.size) * 0.7).reshape(y0.shape)
    with gt.GradientTape(persistent=True) as outer:
        outer.watch(xs)
        with gt.GradientTape(persistent=True) as tape:
            tape.watch(xs)
            y = reg._flat(f(*xs))
            yr = gt.real(y)
            loss = gt.sum(gt.real(y * w))
        g = tape.gradient(loss, xs[k])
        s = gt.sum(gt.square(gt.real(g)))  # (a real g: its real part is itself; a complex one: the same function)
    return g, outer.gradient(s, xs[k], unconnected_gradients="zero"), tape.jacobian(yr, xs[k])


def test_the_walk_covers_every_binary_primitive():
    walked = {n for n, *_ in MIXED}
    binary = {"add", "subtract", "multiply", "multiply_no_nan", "divide", "power", "matmul", "einsum", "where"}
    assert binary <= walked, sorted(binary - walked)


@pytest.mark.parametrize(("name", "i", "k", "f", "args"), MIXED, ids=[f"{n}-{i}-real{k}" for n, i, k, _, _ in MIXED])
def test_a_real_operand_beside_complex_ones_gets_a_real_gradient(name, i, k, f, args):
    mixed = list(args)
    mixed[k] = np.real(args[k]).copy()
    check_grads(f, *mixed, order=2)
    as_complex = list(mixed)
    as_complex[k] = mixed[k] + 0j
    g, h, jac = _grads(f, mixed, k)
    gc, hc, jacc = _grads(f, as_complex, k)
    for got, want in ((g, gc), (h, hc), (jac, jacc)):  # first order, second order, the vectorised Jacobian
        assert got.dtype == np.float64, (name, got.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy().real, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("real_first", [True, False])
def test_einsum_matmult_of_a_real_and_a_complex_operand_autograd(real_first):
    a = rng.standard_normal((2, 3))
    b = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    if not real_first:
        a, b = b.T.copy(), a.T.copy()
    check_grads(lambda x, y: gt.einsum("ij,jk->ik", x, y), a, b, order=2)
    xa, xb = gt.constant(a), gt.constant(b)

    def step():
        with gt.GradientTape() as tape:
            tape.watch([xa, xb])
            loss = gt.sum(gt.abs(gt.einsum("ij,jk->ik", xa, xb)) ** 2)
        return tape.gradient(loss, [xa, xb])

    compiled = gt.function(step)
    for ga, gb in [step(), step(), compiled(), compiled(), compiled()]:  # eager (twice), traced, replayed
        assert ga.dtype == a.dtype and gb.dtype == b.dtype
        y = a @ b
        np.testing.assert_allclose(ga.numpy(), (2 * y @ b.conj().T).real if real_first else 2 * y @ b.conj().T)
        np.testing.assert_allclose(gb.numpy(), 2 * a.conj().T @ y if real_first else (2 * a.conj().T @ y).real)


def test_readme_lists_every_primitives_complex_status_as_declared():
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from benchmarks import numpy_surface as ns

    readme = (root / "README.md").read_text()
    assert ns.readme_block(readme, ns._CBLOCK) == ns.complex_table(), "run: python -m benchmarks.numpy_surface --write"
    listed = re.findall(r"`([\w.]+)`", ns.complex_table().split("| --- | --- |")[1])
    assert set(REGISTRY) <= set(listed)


# -- HIPS autograd's complex cases (tests/numpy_utils.py: unary_ufunc_check and stat_check with
# test_complex=True): comp = transform(lims, 0.4) + 0.1j * transform(lims, 0.3), and a matrix


def _autograd_complex(lims):
    lo, hi = lims
    t = lambda x: x * (hi - lo) + lo  # autograd's transform
    return [np.array(t(0.4) + 0.1j * t(0.3)), t(rng.random((3, 2))) + 0.1j * rng.random((3, 2))]


@pytest.mark.parametrize(("name", "lims"), [("arccosh", (1.0, 4.0)), ("sinc", (-2.0, 2.0)), ("arcsinh", (-2.0, 2.0))])
def test_complex_unary_ufuncs_autograd(name, lims):
    for z in _autograd_complex(lims):
        check_grads(getattr(gt, name), z, order=2)


@pytest.mark.parametrize("name", ["max", "min", "amax", "amin"])
def test_complex_max_and_min_are_refused_with_what_to_use_autograd(name):
    z = gt.constant(_autograd_complex((-2.0, 2.0))[1])
    with gt.GradientTape() as tape:
        tape.watch(z)
        with pytest.raises(TypeError, match=r"gt\.m(ax|in): gradients through complex values .*no order.*gt\.abs\(z\)"):
            getattr(gt, name)(z, axis=0)
    assert getattr(gt, name)(z).dtype == np.complex128  # off the tape numpy's forward runs
    check_grads(lambda z: getattr(gt, name)(gt.abs(z)), z.numpy(), order=2)  # what the message says works
