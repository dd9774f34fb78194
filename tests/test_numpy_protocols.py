"""numpy's protocols on tensors: __array_function__, __array_ufunc__, ndarray-signature methods, einsum sublists.

Every numpy function the generated dispatch table sends to gputape is called here on tensors
(benchmarks/numpy_surface.py's SAMPLES) and compared with numpy on the values; the README's
table of them must be the generator's output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import gputape as gt
from gputape.ops._protocols import dispatch_table, ufunc_table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import numpy_surface as ns  # noqa: E402

FUNCS = sorted(dispatch_table(), key=ns.numpy_name)
NO_GRADIENT = {"argmax", "argmin", "argsort", "argpartition", "ones_like", "zeros_like"}


def _leaves(out):
    return [x for o in out for x in _leaves(o)] if isinstance(out, (tuple, list)) else [out]


def test_every_dispatched_function_has_a_sample():
    assert sorted(ns.numpy_name(f) for f in FUNCS) == sorted(ns.SAMPLES)


def test_the_table_is_generated_from_the_op_library_not_a_hand_list():
    table = dispatch_table()
    assert table[np.sum] is gt.sum and table[np.linalg.inv] is gt.linalg.inv and table[np.round] is gt.around
    assert np.identity not in table  # gt.identity is tf.identity, not numpy's identity matrix
    assert ufunc_table()[np.exp] is gt.exp and ufunc_table()[np.absolute] is gt.abs
    assert not [u for u in ufunc_table() if not isinstance(u, np.ufunc)]


@pytest.mark.parametrize("func", FUNCS, ids=ns.numpy_name)
def test_numpy_function_on_tensors_runs_gputape_and_matches_numpy(func):
    name = ns.numpy_name(func)
    args, kwargs = ns.SAMPLES[name](gt.constant)
    out, _, grad = ns.run_on_tensors(func, args, kwargs)
    ref_args, ref_kwargs = ns.SAMPLES[name](lambda a: a)
    ref = func(*ref_args, **ref_kwargs)
    got, want = _leaves(out), _leaves(ref)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(g, int) and np.ndim(w) == 0:  # lstsq's rank: an integer, no gradient
            assert g == w
            continue
        assert isinstance(g, gt.Tensor), f"{name} returned {type(g).__name__}, not a tensor"
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-10, atol=1e-12)
        assert g.dtype == np.asarray(w).dtype or name.startswith("arg"), (name, g.dtype, np.asarray(w).dtype)
    assert (grad == "no") == (name in NO_GRADIENT), (name, grad)


@pytest.mark.parametrize("u", sorted(ufunc_table(), key=lambda u: u.__name__), ids=lambda u: u.__name__)
def test_ufunc_on_tensors_runs_gputape_and_matches_numpy(u):
    xs = ns.ufunc_inputs(u)
    out = u(*[gt.constant(x) for x in xs])
    assert isinstance(out, gt.Tensor)
    np.testing.assert_allclose(out.numpy(), u(*xs), rtol=1e-12)


def test_readme_table_is_the_generated_one():
    readme = (ROOT / "README.md").read_text()
    assert ns.readme_block(readme) == ns.table(), "run: python -m benchmarks.numpy_surface --write"


def test_np_std_sum_mean_max_stay_on_the_tape_with_numpys_keywords():
    x = gt.constant(np.arange(6.0).reshape(2, 3) ** 1.5)
    a = x.numpy()
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = np.std(x, axis=1, ddof=1) + np.sum(a=x, axis=1) + np.mean(x, 1) + np.max(x, axis=1, keepdims=False)
        loss = np.sum(y)
    assert isinstance(loss, gt.Tensor)
    np.testing.assert_allclose(float(loss), np.sum(np.std(a, 1, ddof=1) + a.sum(1) + a.mean(1) + a.max(1)), rtol=1e-12)
    g = tape.gradient(loss, x).numpy()
    d = a - a.mean(1, keepdims=True)
    want = d / (a.std(1, ddof=1, keepdims=True) * 2) + 1 + 1 / 3 + (a == a.max(1, keepdims=True))
    np.testing.assert_allclose(g, want, rtol=1e-12)


def test_ndarray_operator_tensor_and_lists_of_tensors_stay_on_the_tape():
    x = gt.constant([1.0, 2.0], "float64")
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = np.array([3.0, 4.0]) * x  # ndarray.__mul__ hands it to Tensor.__array_ufunc__
        z = np.concatenate([y, np.ones(2)]) + np.stack([x, x]).sum()
        loss = np.sum(z)
    assert isinstance(y, gt.Tensor) and isinstance(z, gt.Tensor)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [3.0 + 8.0, 4.0 + 8.0])


def test_value_readers_and_np_testing_work_on_tensors():
    x = gt.constant([1.0, 2.0, 0.0])
    a = x.numpy()
    assert np.allclose(x, a) and np.array_equal(x, a) and np.array_equiv(x, a)
    assert np.isclose(x, a).tolist() == [True] * 3
    assert np.count_nonzero(x) == 2 and np.flatnonzero(x).tolist() == [0, 1] and np.nonzero(x)[0].tolist() == [0, 1]
    np.testing.assert_allclose(x, a)
    np.testing.assert_array_equal(x, a)
    np.testing.assert_equal(x, a)
    np.testing.assert_array_almost_equal(x, a)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(x, a + 1)
    assert "1." in np.array2string(x)


def test_metadata_functions_read_no_values():
    x = gt.constant(np.zeros((2, 3), "float32"))
    assert np.shape(x) == (2, 3) and np.ndim(x) == 2 and np.size(x) == 6 and np.size(x, 1) == 3
    assert np.result_type(x, 1.0) == np.float32 and np.result_type(x, np.float64) == np.float64
    assert not np.iscomplexobj(x) and np.isrealobj(x)


def test_anything_else_raises_naming_the_function_and_what_to_do():
    x = gt.constant([1.0, -2.0])
    for call, name in [
        (lambda: np.median(x), "np.median"),
        (lambda: np.linalg.cond(gt.constant(np.eye(2))), "np.linalg.cond"),
        (lambda: np.signbit(x), "np.signbit"),
        (lambda: np.add.reduceat(x, [0]), "np.add.reduceat"),
        (lambda: np.logical_and.reduce(x > 0), "np.logical_and.reduce"),
    ]:
        with pytest.raises(TypeError, match=name.replace(".", r"\.")) as e:
            call()
        assert "t.numpy()" in str(e.value)


def test_out_and_unsupported_arguments_are_refused_by_name():
    x = gt.constant([1.0, 2.0])
    with pytest.raises(TypeError, match="out="):
        np.sum(x, out=np.zeros(()))
    with pytest.raises(TypeError, match="out="):
        np.exp(x, out=np.zeros(2))
    with pytest.raises(TypeError, match="out="):
        x.sum(out=np.zeros(()))
    with pytest.raises(TypeError, match="'where'"):
        np.sum(x, where=np.array([True, False]))
    with pytest.raises(TypeError, match="'order'"):
        np.reshape(x, (2,), order="F")
    with pytest.raises(TypeError, match="dtype="):
        np.add(x, 1.0, dtype="float32")
    with pytest.raises(TypeError, match="needs 'x', 'y'"):
        np.where(x > 0)  # numpy's one-argument form is nonzero's
    with pytest.raises(TypeError, match=r"gt\.ones"):
        np.ones(2, like=x)
    # defaults passed explicitly are fine
    assert float(np.sum(x, out=None, where=True if False else np._NoValue, keepdims=False)) == 3.0
    assert np.exp(x, out=None, where=True, casting="same_kind").shape == (2,)


def test_ufunc_methods_that_are_reductions_and_scans():
    a = np.arange(1.0, 7.0).reshape(2, 3)
    x = gt.constant(a)
    with gt.GradientTape() as tape:
        tape.watch(x)
        r = np.add.reduce(x), np.multiply.reduce(x, axis=1), np.maximum.reduce(x, axis=None)
        s = np.add.accumulate(x), np.multiply.accumulate(x, axis=1), np.multiply.outer(x[0], x[1])
        loss = sum(np.sum(t) for t in r + s)
    for got, want in zip(
        r + s,
        [np.add.reduce(a), np.multiply.reduce(a, axis=1), a.max()]
        + [np.add.accumulate(a), np.multiply.accumulate(a, axis=1), np.multiply.outer(a[0], a[1])],
    ):
        assert isinstance(got, gt.Tensor)
        np.testing.assert_allclose(got.numpy(), want)
    assert tape.gradient(loss, x) is not None


def test_methods_have_ndarrays_signatures_and_values():
    a = np.array([[1.5, -2.25, 3.0], [0.5, 4.0, -1.0]])
    x = gt.constant(a)
    pairs = [
        (x.sum(0, "float32", None, True), a.sum(0, "float32", None, True)),
        (x.mean(axis=1, keepdims=True), a.mean(axis=1, keepdims=True)),
        (x.prod(1), a.prod(1)),
        (x.max(0, None, True), a.max(0, None, True)),
        (x.min(axis=None), a.min(axis=None)),
        (x.std(1, None, None, 1), a.std(1, None, None, 1)),
        (x.var(ddof=1, keepdims=True), a.var(ddof=1, keepdims=True)),
        (x.argmax(1, keepdims=True), a.argmax(1, keepdims=True)),
        (x.argmin(keepdims=True), a.argmin(keepdims=True)),
        (x.argmax(), a.argmax()),
        (x.cumsum(1), a.cumsum(1)),
        (x.cumprod(), a.cumprod()),
        (x.clip(-1, 1), a.clip(-1, 1)),
        (x.clip(min=0), a.clip(min=0)),
        (x.clip(a_min=-1, a_max=2), np.clip(a, -1, 2)),
        (x.round(1), a.round(1)),
        (x.squeeze(), a.squeeze()),
        (x.swapaxes(0, 1), a.swapaxes(0, 1)),
        (x.repeat(2, axis=0), a.repeat(2, axis=0)),
        (x.dot(a.T), a.dot(a.T)),
        (x.take([2, 0], axis=1), a.take([2, 0], axis=1)),
        (x.diagonal(), a.diagonal()),
        (x.trace(1), a.trace(1)),
        (x.argsort(axis=1), a.argsort(axis=1)),
        (x.ravel("F"), a.ravel("F")),
        (x.flatten(), a.flatten()),
        (x.copy(), a.copy()),
        (x.abs(), np.abs(a)),
        (x.mT, a.mT),
        (x.T, a.T),
    ]
    for got, want in pairs:
        assert isinstance(got, gt.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
        assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype
    assert x.tolist() == a.tolist() and x.item(1, 1) == a.item(1, 1) and x.item(4) == a.item(4)
    with pytest.raises(ValueError, match="mT"):
        gt.constant([1.0]).mT
    with pytest.raises(TypeError, match="not both"):
        x.clip(0, a_min=1)
    with pytest.raises(ValueError, match="mode"):
        x.take([0], mode="wrap")


def test_methods_are_differentiable():
    a = np.array([[1.5, -2.25, 3.0], [0.5, 4.0, -1.0]])
    x = gt.constant(a)
    with gt.GradientTape() as tape:
        tape.watch(x)
        loss = x.copy().sum() + x.cumsum(1).sum() + x.clip(min=0).sum() + x.std() + x.dot(a.T).sum() + x.mT.sum()
    n = a.size
    want = 1 + np.array([[3, 2, 1]] * 2) + (a > 0) + (a - a.mean()) / (n * a.std()) + a.T.sum(1) + 1
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), want, rtol=1e-12)


def test_einsum_sublist_form_matches_the_string_form_with_gradients():
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(12.0).reshape(3, 4) / 7
    x, y = gt.constant(a), gt.constant(b)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch([x, y])
        s1 = gt.einsum(x, [0, 1], y, [1, 2], [0, 2])
        s2 = gt.einsum("ij,jk->ik", x, y)
        s3 = np.einsum(x, [0, 1], [1, 0])
        s4 = np.einsum(x, [Ellipsis, 1], y, [1, 2])
    np.testing.assert_allclose(s1.numpy(), a @ b)
    np.testing.assert_allclose(s3.numpy(), a.T)
    np.testing.assert_allclose(s4.numpy(), np.einsum(a, [Ellipsis, 1], b, [1, 2]))
    for u, v in zip(tape.gradient(s1, [x, y]), tape.gradient(s2, [x, y])):
        np.testing.assert_allclose(u.numpy(), v.numpy())
    with pytest.raises(TypeError, match="sublist"):
        gt.einsum(x, ["i", "j"])


def test_array_function_defers_to_other_libraries():
    class Other:
        def __array_function__(self, func, types, args, kwargs):
            return "other"

    assert gt.constant([1.0]).__array_function__(np.sum, (gt.Tensor, Other), (), {}) is NotImplemented


@pytest.mark.gpu
def test_numpy_functions_on_gpu_tensors_run_on_the_gpu():
    with gt.device("cuda"):
        x = gt.constant(np.arange(6.0).reshape(2, 3))
    y = np.sum(np.std(x, axis=1)) + np.exp(x).sum()
    assert y.device.startswith("cuda")
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(float(y.to("cpu")), np.sum(np.std(a, axis=1)) + np.exp(a).sum())
    with pytest.raises(TypeError, match="numpy"):
        np.allclose(x, a)


def test_numpy_functions_on_tensors_match_torch_gradients():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).standard_normal((3, 4))
    x = gt.constant(a)
    with gt.GradientTape() as tape:
        tape.watch(x)
        loss = np.sum(np.std(x, axis=0, ddof=1) * np.max(x, axis=0)) + np.mean(np.cumsum(x, axis=1) ** 2)
    xt = torch.tensor(a, requires_grad=True)
    ref = (torch.std(xt, 0, correction=1) * xt.max(0).values).sum() + (torch.cumsum(xt, 1) ** 2).mean()
    ref.backward()
    np.testing.assert_allclose(float(loss), ref.item(), rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), xt.grad.numpy(), rtol=1e-10)


def test_copy_false_with_another_dtype_is_refused_as_numpy_refuses():
    t = gt.constant([1.0, 2.0])
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.asarray(t, dtype="float64", copy=False)
    np.testing.assert_array_equal(np.asarray(t, dtype="float64"), [1.0, 2.0])
    assert np.asarray(t, copy=False).dtype == np.float32
