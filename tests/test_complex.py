"""Complex numbers: real, imag, conj, angle, var/std against numpy, and gradients through complex values.

gputape's convention is TensorFlow's: the gradient of a real loss L with respect to z = x + iy is
dL/dx + i dL/dy, checked here against central finite differences of the real and imaginary parts,
for holomorphic and non-holomorphic functions, to second order (tests/test_complex_vs_torch.py
compares with PyTorch).
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt

rng = np.random.default_rng(5)
Z = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
Z[0, 0] = 0  # angle(0) is 0, as in numpy


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, np.float32, np.float64])
@pytest.mark.parametrize("name", ["real", "imag", "conj", "conjugate", "angle"])
def test_parts_match_numpy(name, dtype):
    z = (Z if np.dtype(dtype).kind == "c" else Z.real).astype(dtype)
    got = getattr(gt, name)(gt.constant(z)).numpy()
    want = getattr(np, name)(z)
    assert got.dtype == want.dtype
    assert_allclose(got, want, rtol=1e-6)


def test_angle_in_degrees_and_of_integers_match_numpy():
    assert_allclose(gt.angle(gt.constant(Z), deg=True).numpy(), np.angle(Z, deg=True))
    k = np.array([-2, 0, 3])
    assert gt.angle(gt.constant(k)).numpy().tolist() == np.angle(k).tolist()
    assert gt.imag(gt.constant(k)).numpy().tolist() == np.imag(k).tolist()


@pytest.mark.parametrize("fn", ["var", "std"])
@pytest.mark.parametrize("kw", [{}, {"axis": 0}, {"axis": 1, "ddof": 1, "keepdims": True}])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_var_and_std_of_complex_are_real_as_in_numpy(fn, kw, dtype):
    z = Z.astype(dtype)
    got = getattr(gt, fn)(gt.constant(z), **kw).numpy()
    want = getattr(np, fn)(z, **kw)
    assert got.dtype == want.dtype and got.dtype.kind == "f"
    assert_allclose(got, want, rtol=1e-5)


def test_parts_of_a_real_input_have_the_real_derivatives():
    x = gt.constant(rng.standard_normal(5))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ys = {n: gt.sum(getattr(gt, n)(x) * x) for n in ("real", "imag", "conj", "angle")}
    xv = x.numpy()
    assert_allclose(tape.gradient(ys["real"], x).numpy(), 2 * xv)  # d(x^2)
    assert_allclose(tape.gradient(ys["conj"], x).numpy(), 2 * xv)
    assert_allclose(tape.gradient(ys["imag"], x).numpy(), 0 * xv)  # imag(x) * x == 0
    assert_allclose(tape.gradient(ys["angle"], x).numpy(), np.angle(xv))  # angle is piecewise constant


def fd_grad(f, z, h=1e-6):
    """dL/dx + i dL/dy of the real function ``f`` of a complex array, by central differences."""
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = h
        g[i] = (f(z + e) - f(z - e)) / (2 * h) + 1j * (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
    return g


# name -> (gputape function of a complex tensor, the same function in numpy); all real-valued
LOSSES = {
    "abs-squared": (lambda z: gt.sum(gt.real(z * gt.conj(z))), lambda z: np.sum((z * z.conj()).real)),
    "abs": (lambda z: gt.sum(gt.abs(z)), lambda z: np.sum(np.abs(z))),
    "real-times-imag": (lambda z: gt.sum(gt.real(z) * gt.imag(z)), lambda z: np.sum(z.real * z.imag)),
    "z-squared": (
        lambda z: gt.sum(gt.real(z**2) + 2 * gt.imag(z * z)),
        lambda z: np.sum((z**2).real + 2 * (z * z).imag),
    ),
    "exp": (lambda z: gt.sum(gt.abs(gt.exp(z)) ** 2), lambda z: np.sum(np.abs(np.exp(z)) ** 2)),
    "angle": (lambda z: gt.sum(gt.angle(z) * gt.abs(z)), lambda z: np.sum(np.angle(z) * np.abs(z))),
    "log-divide": (lambda z: gt.sum(gt.imag(gt.log(z) / (z + 2))), lambda z: np.sum((np.log(z) / (z + 2)).imag)),
    "sin-cos-tanh": (
        lambda z: gt.sum(gt.real(gt.sin(z) * gt.cos(z) + gt.tanh(z))),
        lambda z: np.sum((np.sin(z) * np.cos(z) + np.tanh(z)).real),
    ),
    "sqrt-reciprocal": (
        lambda z: gt.sum(gt.imag(gt.sqrt(z) + gt.reciprocal(z))),
        lambda z: np.sum((np.sqrt(z) + 1 / z).imag),
    ),
    "matmul": (
        lambda z: gt.sum(gt.imag(gt.matmul(gt.reshape(z, (2, 2)), gt.transpose(gt.reshape(z, (2, 2)))))),
        lambda z: np.sum((z.reshape(2, 2) @ z.reshape(2, 2).T).imag),
    ),
    "var": (lambda z: gt.var(z), lambda z: np.var(z)),
    "mean-prod": (lambda z: gt.real(gt.mean(z) * gt.prod(z)), lambda z: (np.mean(z) * np.prod(z)).real),
    "conj-where": (
        lambda z: gt.sum(gt.imag(gt.where(np.array([True, False, True, False]), gt.conj(z), z * z))),
        lambda z: np.sum(np.where([True, False, True, False], z.conj(), z * z).imag),
    ),
}
Z4 = np.array([0.7 + 0.4j, -1.1 + 0.9j, 0.3 - 1.3j, 1.6 + 0.2j])


def _grad(f, z):
    with gt.GradientTape() as tape:
        tape.watch(z)
        y = f(z)
    return tape.gradient(y, z)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradient_of_a_real_loss_is_dL_dx_plus_i_dL_dy(name):
    f, nf = LOSSES[name]
    g = _grad(f, gt.constant(Z4))
    assert g.dtype == np.complex128
    assert_allclose(g.numpy(), fd_grad(nf, Z4), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["abs-squared", "exp", "angle", "log-divide", "matmul"])
def test_second_order_through_complex_values(name):
    # the Hessian-vector product of L along a complex direction v: the gradient of
    # <grad L, v> = Re(sum(grad * conj(v))), against finite differences of grad L itself
    f = LOSSES[name][0]
    v = np.array([0.3 - 0.2j, 0.5 + 0.1j, -0.4 + 0.6j, 0.2 + 0.3j])
    z = gt.constant(Z4)
    with gt.GradientTape() as outer:
        outer.watch(z)
        inner_g = _grad(f, z)
        s = gt.sum(gt.real(inner_g * np.conj(v)))
    hv = outer.gradient(s, z).numpy()
    h = 1e-5
    want = (_grad(f, gt.constant(Z4 + h * v)).numpy() - _grad(f, gt.constant(Z4 - h * v)).numpy()) / (2 * h)
    assert_allclose(hv, want, rtol=1e-5, atol=1e-6)  # the Hessian of a real L is symmetric (real-linear)


HOLOMORPHIC_UNARY = (
    "exp expm1 exp2 log log1p log2 log10 sqrt square reciprocal sin cos tan sinh cosh tanh "
    "arcsin arccos arctan arcsinh arctanh arccosh sinc cumsum cumprod negative"
).split()


@pytest.mark.parametrize("name", HOLOMORPHIC_UNARY)
def test_each_holomorphic_primitive_against_finite_differences(name):
    z0 = np.array([0.3 + 0.4j, -0.7 + 0.2j, -0.4 - 0.9j, 0.8 - 0.3j, -1.5 + 0.1j])  # every quadrant
    w = np.array([1 + 0.5j, -0.3 + 1j, 0.2 - 0.7j, 1.1 + 0.2j, 0.4 + 0.4j])
    g = _grad(lambda z: gt.sum(gt.real(getattr(gt, name)(z) * np.conj(w))), gt.constant(z0))
    want = fd_grad(lambda z: np.sum((getattr(np, name)(z) * np.conj(w)).real), z0)
    assert_allclose(g.numpy(), want, rtol=1e-6, atol=1e-7)


def test_complex_target_and_output_gradients_follow_tensorflow():
    # tf.GradientTape: d(z**2)/dz with the default all-ones cotangent is conj(2 z)
    z = gt.constant(Z4)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(z)
        y = z**2
        w = gt.exp(z)
    assert_allclose(tape.gradient(y, z).numpy(), np.conj(2 * Z4))
    og = np.array([1j, 2.0, -1.0 + 1j, 0.5])
    assert_allclose(tape.gradient(w, z, output_gradients=gt.constant(og)).numpy(), og * np.conj(np.exp(Z4)))


def test_complex64_and_a_real_source_through_complex_values():
    z = gt.constant(Z4.astype(np.complex64))
    g = _grad(LOSSES["abs-squared"][0], z)
    assert g.dtype == np.complex64
    assert_allclose(g.numpy(), 2 * Z4, rtol=1e-6)
    x = gt.constant(np.array([0.5, -1.5, 2.0]))
    with gt.GradientTape() as tape:  # |x (1 + 2i)|^2 = 5 x^2: a real gradient for a real source
        tape.watch(x)
        y = gt.sum(gt.abs(x * (1 + 2j)) ** 2)
    gx = tape.gradient(y, x)
    assert gx.dtype == np.float64
    assert_allclose(gx.numpy(), 10 * x.numpy())


def test_gradient_at_zero_of_abs_and_angle_is_zero():
    z = gt.constant(np.array([0j, 1 + 1j]))
    assert_allclose(_grad(lambda z: gt.sum(gt.abs(z)), z).numpy(), [0, (1 + 1j) / np.sqrt(2)])
    assert_allclose(_grad(lambda z: gt.sum(gt.angle(z)), z).numpy(), [0, (-1 + 1j) / 2])


def test_a_complex_variable_is_watched_and_compiled_steps_agree():
    v = gt.Variable(Z4)

    def grad():
        with gt.GradientTape() as tape:
            y = gt.sum(gt.abs(gt.exp(v) * v) ** 2 + gt.real(v * v))
        return tape.gradient(y, v)

    want = fd_grad(lambda z: np.sum(np.abs(np.exp(z) * z) ** 2 + (z * z).real), Z4)
    assert_allclose(grad().numpy(), want, rtol=1e-6)
    step = gt.function(grad)
    for _ in range(2):  # trace, then replay
        assert_allclose(step().numpy(), want, rtol=1e-6)


def test_ops_without_a_complex_gradient_refuse_complex_values_on_a_tape():
    z = gt.constant(Z4)
    with gt.GradientTape() as tape:
        tape.watch(z)
        with pytest.raises(TypeError, match=r"gt\.maximum: gradients through complex values"):
            gt.maximum(z, 0.5j)
        with pytest.raises(TypeError, match=r"gt\.sign: gradients through complex values"):
            gt.sign(z)
        with pytest.raises(TypeError, match=r"gt\.max: gradients through complex values .* no order.*gt\.abs"):
            gt.max(z)  # as PyTorch refuses complex max
    assert gt.maximum(z, 0.5j).dtype == np.complex128  # off the tape the forward runs as numpy's
    y = gt.constant(np.array([2.0, 1.0, 0.5, 3.0]) + 0j)
    with gt.GradientTape() as tape:  # the exponent's gradient: conj(z**y log z), log's principal branch
        tape.watch(y)
        p = gt.sum(gt.real(z**y))
    assert_allclose(tape.gradient(p, y).numpy(), np.conj(Z4 ** y.numpy() * np.log(Z4)))


def test_np_functions_dispatch_to_the_parts():
    t = gt.constant(Z)
    assert isinstance(np.real(t), gt.Tensor) and isinstance(np.angle(t), gt.Tensor)
    assert_allclose(np.imag(t).numpy(), Z.imag)
    assert_allclose(np.conj(t).numpy(), Z.conj())


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["abs-squared", "abs", "exp", "angle", "log-divide", "matmul", "var", "mean-prod"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_cupy_matches_numpy_through_complex_values(name, dtype):
    from gputape.devices import backend

    cp = backend.cupy_module()
    f = LOSSES[name][0]
    out = {}
    for where in ("cpu", "gpu"):
        z0 = Z4.astype(dtype)
        z = gt.constant(cp.asarray(z0) if where == "gpu" else z0)
        with gt.GradientTape() as outer:
            outer.watch(z)
            g = _grad(f, z)
            s = gt.sum(gt.real(g * gt.conj(g)))
        h = outer.gradient(s, z)
        assert g.device.startswith("cuda" if where == "gpu" else "cpu") and g.dtype == dtype
        out[where] = (g.numpy(), h.numpy())
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == np.complex64 else {"rtol": 1e-10, "atol": 1e-12}
    assert_allclose(out["gpu"][0], out["cpu"][0], **tol)
    assert_allclose(out["gpu"][1], out["cpu"][1], **tol)


def test_explain_and_check_numerics_treat_complex_values_as_differentiable():
    """explain() called a complex source 'not floating', and check_numerics never looked at complex arrays."""
    z = gt.constant(np.array([1.0 + 2.0j, 0.5 - 1.0j]))
    with gt.GradientTape() as tape:
        tape.watch(z)
        y = gt.sum(gt.real(z * gt.conj(z)))
    assert tape.explain(y, z).reason == "connected"
    w = gt.constant(np.array([1.0 + 1.0j, 0.0 + 0.0j]))
    with np.errstate(divide="ignore", invalid="ignore"):
        with pytest.raises(FloatingPointError, match="log"):
            with gt.debug.check_numerics():
                gt.log(w)


def test_real_imag_conj_methods_are_the_differentiable_ops():
    z = gt.constant(np.array([1 + 2j, 3 - 1j]))
    with gt.GradientTape() as tape:
        tape.watch(z)
        y = gt.sum(z.real * z.imag + gt.real(z.conj() * z))  # x*y + x^2 + y^2
    x, v = z.numpy().real, z.numpy().imag
    assert_allclose(tape.gradient(y, z).numpy(), (v + 2 * x) + 1j * (x + 2 * v))  # dL/dx + i dL/dy
    r = gt.constant([1.0, 2.0])
    assert r.real.numpy().tolist() == [1.0, 2.0] and r.imag.numpy().tolist() == [0.0, 0.0]
    assert r.conjugate().numpy().tolist() == [1.0, 2.0]


def test_tf_adjoint_conjugates_complex_matrices():
    import gputape.tf as tf

    a = np.array([[1 + 2j, 3j], [1, 2 - 1j]])
    b = np.array([[1, 1j], [2, 0.5]])
    assert_allclose(tf.matmul(a, b, adjoint_a=True).numpy(), a.conj().T @ b)
    assert_allclose(tf.matmul(a, b, adjoint_b=True).numpy(), a @ b.conj().T)
    assert_allclose(tf.matmul(a, b, transpose_a=True).numpy(), a.T @ b)
    assert_allclose(tf.linalg.adjoint(a).numpy(), a.conj().T)
    assert_allclose(tf.linalg.matrix_transpose(a, conjugate=True).numpy(), a.conj().T)
