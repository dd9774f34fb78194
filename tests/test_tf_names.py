"""The names TensorFlow's tests and guides use, the list of names gputape.tf has, and what a missing one says.

Values are checked against numpy, gradients against hand-derived values and, for the differentiable
names, in float64 to second order with ``gt.testing.check_grads``.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import gputape as gt
import gputape.tf as tf
from gputape.testing import check_grads
from gputape.tf import _names

README = Path(__file__).resolve().parents[1] / "README.md"


def _grad(f, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return tape.gradient(y, x)


# -- array ops -----------------------------------------------------------------------------------


def test_broadcast_to_values_and_gradient_sums_back():
    x = np.array([1.0, 2.0])
    assert_array_equal(tf.broadcast_to(x, [3, 2]).numpy(), np.broadcast_to(x, (3, 2)))
    assert tf.broadcast_to(x, tf.constant([2, 2])).shape == (2, 2)
    w = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    # d/dx sum(w * broadcast(x)) = column sums of w
    assert_allclose(_grad(lambda x: tf.reduce_sum(w * tf.broadcast_to(x, [3, 2])), x).numpy(), [9.0, 12.0])
    check_grads(lambda x: tf.broadcast_to(x, [3, 2]) ** 2, x, order=2)


def test_slice_values_minus_one_and_gradient():
    a = np.arange(12.0).reshape(3, 4)
    assert_array_equal(tf.slice(a, [1, 1], [2, -1]).numpy(), a[1:3, 1:])
    assert_array_equal(tf.slice(a, tf.constant([0, 2]), tf.constant([1, 2])).numpy(), a[0:1, 2:4])
    g = _grad(lambda x: tf.reduce_sum(tf.slice(x, [1, 0], [1, 2]) * 3.0), a).numpy()
    expected = np.zeros_like(a)
    expected[1, 0:2] = 3.0
    assert_array_equal(g, expected)
    check_grads(lambda x: tf.slice(x, [0, 1], [2, 2]) ** 3, a / 10, order=2)


@pytest.mark.parametrize(
    "begin,size,match",
    [([0], [1, 1], "one entry per dimension"), ([0, 3], [1, 2], r"begin\[1\]"), ([1, 0], [3, 1], r"size\[0\]")],
)
def test_slice_out_of_bounds_is_tensorflows_invalid_argument(begin, size, match):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"tf\.slice.*" + match):
        tf.slice(np.zeros((3, 3)), begin, size)


def test_pad_constant_values_and_gradient():
    a = np.array([[1.0, 2.0]])
    out = tf.pad(a, [[1, 0], [0, 2]], constant_values=7.0).numpy()
    assert_array_equal(out, np.pad(a, [[1, 0], [0, 2]], constant_values=7.0))
    assert_array_equal(_grad(lambda x: tf.reduce_sum(tf.pad(x, [[1, 1], [1, 1]]) * 2.0), a).numpy(), [[2.0, 2.0]])
    check_grads(lambda x: tf.pad(x, [[1, 0], [0, 1]]) ** 2, a, order=2)
    with pytest.raises(NotImplementedError, match="REFLECT"):
        tf.pad(a, [[1, 1], [1, 1]], mode="REFLECT")
    with pytest.raises(ValueError, match=r"tf\.pad: argument mode"):
        tf.pad(a, [[1, 1], [1, 1]], mode="wrap")


def test_boolean_mask_values_axis_and_gradient():
    a = np.arange(6.0).reshape(3, 2)
    assert_array_equal(tf.boolean_mask(a, [True, False, True]).numpy(), a[[0, 2]])
    assert_array_equal(tf.boolean_mask(a, [False, True], axis=1).numpy(), a[:, 1:])
    assert_array_equal(tf.boolean_mask(a, a > 2).numpy(), a[a > 2])
    g = _grad(lambda x: tf.reduce_sum(tf.boolean_mask(x, [True, False, True])), a).numpy()
    assert_array_equal(g, [[1, 1], [0, 0], [1, 1]])
    check_grads(lambda x: tf.boolean_mask(x, [True, False, True]) ** 2, a, order=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="mask has dtype int"):
        tf.boolean_mask(a, [1, 0, 1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="mask of shape"):
        tf.boolean_mask(a, [True, False])


@pytest.mark.parametrize("axis,batch_dims", [(1, 1), (2, 1), (2, 2), (2, -1), (None, 1)])
def test_gather_batch_dims_matches_a_loop_over_the_batch(axis, batch_dims):
    rng = np.random.default_rng(0)
    p = rng.normal(size=(2, 3, 4))
    idx = rng.integers(0, 3 if (axis or batch_dims) == 1 else 4, size=(2, 3, 2) if batch_dims in (2, -1) else (2, 5))
    b = batch_dims if batch_dims >= 0 else idx.ndim + batch_dims
    ax = b if axis is None else axis

    def ref(p, i, b, ax):
        if b == 0:
            return np.take(p, i, axis=ax)
        return np.stack([ref(p[k], i[k], b - 1, ax - 1) for k in range(p.shape[0])])

    got = tf.gather(p, idx, axis=axis, batch_dims=batch_dims).numpy()
    assert_array_equal(got, ref(p, idx, b, ax))
    check_grads(lambda x: tf.gather(x, idx, axis=axis, batch_dims=batch_dims) ** 2, p, order=2)


def test_gather_batch_dims_gradient_by_hand():
    p = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    g = _grad(lambda x: tf.reduce_sum(tf.gather(x, [[2, 2], [0, 1]], batch_dims=1)), p).numpy()
    assert_array_equal(g, [[0, 0, 2], [1, 1, 0]])  # row 0 takes entry 2 twice


def test_gather_batch_dims_bad_arguments():
    p = np.zeros((2, 3))
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be equal"):
        tf.gather(p, np.zeros((3, 1), int), batch_dims=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="less than or equal to axis"):
        tf.gather(p, np.zeros((2, 1), int), axis=0, batch_dims=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="batch_dims"):
        tf.gather(p, np.zeros((2,), int), batch_dims=2)


# -- tf.math ----------------------------------------------------------------------------------------


def test_reduce_euclidean_norm_values_and_gradient():
    a = np.array([[3.0, 4.0], [6.0, 8.0]])
    assert_allclose(tf.math.reduce_euclidean_norm(a).numpy(), np.sqrt(125.0))
    assert_allclose(tf.math.reduce_euclidean_norm(a, axis=1, keepdims=True).numpy(), [[5.0], [10.0]])
    assert_allclose(tf.math.reduce_euclidean_norm(np.array([3j, 4.0])).numpy(), 5.0)
    # d||x||/dx = x / ||x||
    assert_allclose(_grad(lambda x: tf.math.reduce_euclidean_norm(x, axis=1), a).numpy(), a / [[5.0], [10.0]])
    check_grads(lambda x: tf.math.reduce_euclidean_norm(x, axis=0), a, order=2)


def test_count_nonzero_values_dtype_and_no_gradient():
    a = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    got = tf.math.count_nonzero(a, axis=1)
    assert got.dtype == np.int64 and got.numpy().tolist() == [1, 2]
    assert int(tf.math.count_nonzero(a)) == 3
    assert tf.math.count_nonzero(a, axis=0, keepdims=True, dtype=tf.int32).numpy().tolist() == [[1, 1, 1]]
    assert int(tf.math.count_nonzero([True, False, True])) == 2
    assert _grad(lambda x: tf.cast(tf.math.count_nonzero(x), tf.float64), a) is None


def test_nextafter_values_promotion_and_no_gradient():
    x = np.array([1.0, 0.0, -1.0])
    assert_array_equal(tf.math.nextafter(x, 2.0).numpy(), np.nextafter(x, 2.0))
    x32 = x.astype(np.float32)
    assert tf.math.nextafter(x32, np.float32(0)).dtype == np.float32
    assert_array_equal(tf.math.nextafter(x32, np.float32(0)).numpy(), np.nextafter(x32, np.float32(0)))
    assert _grad(lambda x: tf.math.nextafter(x, 2.0), x) is None  # TensorFlow registers no gradient either
    with pytest.raises(tf.errors.InvalidArgumentError, match="float32 or float64"):
        tf.math.nextafter(tf.constant([1, 2]), tf.constant([2, 3]))


def test_floormod_floordiv_logical_xor():
    assert tf.math.floormod(-3, 2).numpy() == 1 and tf.math.mod is tf.math.floormod
    assert tf.math.floordiv(-3, 2).numpy() == -2
    assert tf.math.logical_xor([True, True], [True, False]).numpy().tolist() == [False, True]


# -- small tf names ---------------------------------------------------------------------------------


def test_get_static_value_executing_eagerly_is_tensor():
    assert tf.get_static_value(tf.constant([1, 2])).tolist() == [1, 2]
    assert tf.get_static_value(tf.Variable(1.0)) is None  # a variable's value can change
    assert tf.get_static_value(3) == 3
    assert tf.executing_eagerly() is True
    seen = []

    @tf.function
    def f(x):
        seen.append(tf.executing_eagerly())
        return x * 2

    f(tf.constant(1.0))
    assert seen == [False]  # traced, as in TensorFlow
    assert tf.is_tensor(tf.constant(1.0)) and tf.is_tensor(tf.Variable(1.0)) and not tf.is_tensor(np.zeros(2))


def test_variable_initializer_is_none_as_in_eager_tensorflow():
    assert tf.Variable([1.0]).initializer is None


def test_dtype_objects():
    assert tf.float32.as_numpy_dtype is np.float32 and tf.int64.as_numpy_dtype is np.int64
    assert tf.float32 == np.float32 == tf.as_dtype("float32") and tf.float32 != tf.float64 and tf.float32 != None  # noqa: E711
    assert tf.constant([1.0]).dtype == tf.float32 and tf.float32 == tf.constant([1.0]).dtype
    assert {np.dtype("float32"): 1}[tf.float32] == 1  # hashes as numpy's dtype
    assert np.zeros(2, dtype=tf.float64).dtype == np.float64
    assert tf.zeros([2], dtype=tf.int32).dtype == np.int32 and tf.cast([1.5], tf.float64).dtype == np.float64
    assert tf.float16.is_floating and tf.int8.is_integer and tf.bool.is_bool and tf.uint8.is_unsigned
    assert (tf.int8.min, tf.int8.max, tf.float32.size, tf.float32.name) == (-128, 127, 4, "float32")
    assert repr(tf.float32) == "tf.float32" and tf.float32.kind == "f"  # numpy's attributes forwarded
    assert pickle.loads(pickle.dumps(tf.float64)) == tf.float64
    assert tf.dtypes.float32 is tf.float32 and isinstance(tf.float32, tf.DType)
    with pytest.raises(AttributeError, match="immutable"):
        tf.float32.name = "x"


def test_dataset_enumerate_range_and_skip():
    ds = tf.data.Dataset.from_tensor_slices(np.array([7.0, 8.0, 9.0]))
    pairs = [(int(i), float(x)) for i, x in ds.enumerate(start=5)]
    assert pairs == [(5, 7.0), (6, 8.0), (7, 9.0)]
    i, _ = next(iter(ds.enumerate()))
    assert i.dtype == np.int64
    assert [int(x) for x in tf.data.Dataset.range(5).skip(2)] == [2, 3, 4]
    assert len(tf.data.Dataset.range(2, 10, 3)) == 3 and list(tf.data.Dataset.range(3).skip(-1)) == []


def test_debugging_numerics():
    tf.debugging.enable_check_numerics()
    try:
        with pytest.raises(FloatingPointError, match=r"gt\.log"):
            tf.math.log(tf.constant([-1.0]))
    finally:
        tf.debugging.disable_check_numerics()
    tf.debugging.disable_check_numerics()  # off already: a no-op, as in TensorFlow
    tf.math.log(tf.constant([-1.0]))  # no longer checked
    assert tf.debugging.check_numerics(tf.constant([1.0]), "fine").numpy().tolist() == [1.0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="weights : Tensor had NaN values"):
        tf.debugging.check_numerics(tf.constant([1.0, np.nan]), "weights")
    assert_array_equal(_grad(lambda x: tf.debugging.check_numerics(x, "x") * 3.0, np.array([1.0])).numpy(), [3.0])


def test_adjust_contrast_values_and_no_gradient_as_in_tensorflows_guide():
    img = np.random.default_rng(0).normal(size=(2, 3, 4, 3))
    mean = img.mean(axis=(-3, -2), keepdims=True)
    assert_allclose(tf.image.adjust_contrast(img, 1.5).numpy(), (img - mean) * 1.5 + mean)
    assert_allclose(tf.raw_ops.AdjustContrastv2(images=img, contrast_factor=0.5).numpy(), (img - mean) * 0.5 + mean)
    image, delta = tf.Variable([[[0.5, 0.0, 0.0]]]), tf.Variable(0.1)  # the guide's example
    with tf.GradientTape() as tape:
        new_image = tf.image.adjust_contrast(image, delta)
    with pytest.raises(LookupError, match="No gradient defined for operation 'AdjustContrastv2'"):
        tape.gradient(new_image, [image, delta])
    with pytest.raises(ValueError, match=r"tf\.image\.adjust_contrast: argument images must be at least 3-D"):
        tf.image.adjust_contrast(np.zeros((2, 2)), 2.0)


def test_errors_are_tensorflows_classes():
    e = tf.errors.InvalidArgumentError(None, None, "bad")
    assert isinstance(e, tf.errors.OpError) and isinstance(e, ValueError)
    assert (e.message, e.op, e.node_def, str(e)) == ("bad", None, None, "bad")
    assert issubclass(tf.errors.UnimplementedError, NotImplementedError)
    assert not issubclass(tf.errors.OutOfRangeError, ValueError)


# -- tf.raw_ops -------------------------------------------------------------------------------------

_X = np.array([[0.5, -1.0], [2.0, 3.0]])
RAW = [
    ("AddV2", {"x": _X, "y": _X}, lambda: tf.add(_X, _X)),
    ("Mul", {"x": _X, "y": 2.0}, lambda: tf.multiply(_X, 2.0)),
    ("RealDiv", {"x": _X, "y": 4.0}, lambda: _X / 4.0),
    ("Exp", {"x": _X}, lambda: np.exp(_X)),
    ("Relu", {"features": _X}, lambda: np.maximum(_X, 0)),
    ("LeakyRelu", {"features": _X, "alpha": 0.1}, lambda: np.where(_X > 0, _X, 0.1 * _X)),
    ("Sum", {"input": _X, "axis": 1, "keep_dims": True}, lambda: _X.sum(1, keepdims=True)),
    ("Mean", {"input": _X, "axis": [0, 1]}, lambda: _X.mean()),
    ("ArgMax", {"input": _X, "dimension": 0}, lambda: np.argmax(_X, 0)),
    ("MatMul", {"a": _X, "b": _X, "transpose_b": True}, lambda: _X @ _X.T),
    ("BatchMatMulV2", {"x": _X[None], "y": _X[None], "adj_x": True}, lambda: _X.T[None] @ _X[None]),
    ("Reshape", {"tensor": _X, "shape": [4]}, lambda: _X.reshape(4)),
    ("Transpose", {"x": _X, "perm": [1, 0]}, lambda: _X.T),
    ("ConcatV2", {"values": [_X, _X], "axis": 1}, lambda: np.concatenate([_X, _X], 1)),
    ("Pack", {"values": [_X, _X]}, lambda: np.stack([_X, _X])),
    ("Squeeze", {"input": _X[None]}, lambda: _X),
    ("Cast", {"x": _X, "DstT": tf.int32}, lambda: _X.astype(np.int32)),
    ("GatherV2", {"params": _X, "indices": [1, 0], "axis": 1}, lambda: _X[:, [1, 0]]),
    ("SelectV2", {"condition": _X > 0, "t": _X, "e": -_X}, lambda: np.abs(_X)),
    ("Slice", {"input": _X, "begin": [0, 1], "size": [-1, 1]}, lambda: _X[:, 1:]),
    ("BroadcastTo", {"input": _X[0], "shape": [3, 2]}, lambda: np.broadcast_to(_X[0], (3, 2))),
    ("PadV2", {"input": _X, "paddings": [[0, 1], [0, 0]], "constant_values": 9.0}, lambda: np.pad(_X, [[0, 1], [0, 0]],
                                                                                                   constant_values=9)),
    ("EuclideanNorm", {"input": _X, "axis": 0}, lambda: np.linalg.norm(_X, axis=0)),
    ("Einsum", {"inputs": [_X, _X], "equation": "ij,jk->ik"}, lambda: _X @ _X),
    ("Softmax", {"logits": _X}, lambda: np.exp(_X) / np.exp(_X).sum(-1, keepdims=True)),
    ("OneHot", {"indices": [0, 1], "depth": 2, "on_value": 5.0, "off_value": 0.0}, lambda: np.eye(2) * 5),
    ("Range", {"start": 0, "limit": 5, "delta": 2}, lambda: np.arange(0, 5, 2)),
    ("Atan2", {"y": _X, "x": 2.0}, lambda: np.arctan2(_X, 2.0)),
    ("NextAfter", {"x1": _X, "x2": 9.0}, lambda: np.nextafter(_X, 9.0)),
]  # fmt: skip


@pytest.mark.parametrize("name,kwargs,expected", RAW, ids=[r[0] for r in RAW])
def test_raw_ops_compute_the_tf_functions_values(name, kwargs, expected):
    got = getattr(tf.raw_ops, name)(**kwargs)
    want = expected()
    assert_allclose(got.numpy(), want.numpy() if hasattr(want, "numpy") else want, rtol=1e-6)


def test_raw_ops_take_keywords_only_and_are_differentiable():
    with pytest.raises(TypeError, match=r"tf.raw_ops.AddV2 only takes keyword args \(possible keys: \['x', 'y'"):
        tf.raw_ops.AddV2(1.0, 2.0)
    with pytest.raises(TypeError, match="missing required argument 'b'"):
        tf.raw_ops.MatMul(a=_X)
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        tf.raw_ops.Exp(x=_X, y=1)
    # d/da sum(a @ b) = ones @ b.T
    assert_allclose(_grad(lambda a: tf.reduce_sum(tf.raw_ops.MatMul(a=a, b=_X)), _X).numpy(), np.ones((2, 2)) @ _X.T)
    check_grads(lambda a: tf.raw_ops.Tanh(x=tf.raw_ops.MatMul(a=a, b=a, transpose_a=True)), _X, order=2)
    assert all(p.kind == p.KEYWORD_ONLY for p in __import__("inspect").signature(tf.raw_ops.Sum).parameters.values())
    assert len(tf.raw_ops.__all__) > 100


# -- a name gputape lacks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["tf.foo_bar", "tf.math.foo_bar", "tf.nn.foo_bar", "tf.linalg.foo_bar", "tf.random.foo_bar", "tf.data.foo_bar",
     "tf.keras.foo_bar", "tf.keras.layers.Conv2D", "tf.keras.losses.foo_bar", "tf.raw_ops.Conv2D",
     "tf.debugging.assert_equal", "tf.dtypes.qint8", "tf.signal.foo_bar", "tf.errors.foo_bar"],
)  # fmt: skip
def test_a_missing_name_says_it_is_not_in_gputape_and_where_the_list_is(path):
    *parent, name = path.split(".")[1:]
    ns = tf
    for p in parent:
        ns = getattr(ns, p)
    with pytest.raises(AttributeError, match=rf"^{path.replace('.', r'[.]')} is not in gputape") as e:
        getattr(ns, name)
    assert "python -m gputape names" in str(e.value) and "README.md" in str(e.value)
    assert not hasattr(ns, name)  # hasattr and getattr with a default still work


def test_a_typo_gets_a_suggestion_and_dunder_probes_stay_plain():
    with pytest.raises(AttributeError, match="did you mean reduce_sum"):
        tf.math.reduce_sun
    with pytest.raises(AttributeError, match="has no attribute '__wrapped__'"):
        tf.__wrapped__


# -- the generated list -----------------------------------------------------------------------------


def test_the_readme_list_is_what_the_code_exports():
    section = _names.readme_section(README.read_text(encoding="utf-8"))
    assert section is not None, "README.md lost its generated tf names section"
    assert section == _names.markdown(), (
        "README's tf names list is stale: run python -m gputape names --update README.md"
    )


def test_the_list_covers_the_namespaces_and_the_new_names():
    names = _names.supported_names()
    for path, name in [("tf", "broadcast_to"), ("tf.math", "reduce_euclidean_norm"), ("tf.raw_ops", "MatMul"),
                       ("tf.errors", "InvalidArgumentError"), ("tf.debugging", "enable_check_numerics"),
                       ("tf.keras.layers", "Dense"), ("tf.config", "list_physical_devices")]:  # fmt: skip
        assert name in names[path], (path, name)
    for path, listed in names.items():
        ns = tf
        for part in path.split(".")[1:]:
            ns = getattr(ns, part)
        assert all(hasattr(ns, n) for n in listed), path


def test_names_command_prints_the_list_and_updates_a_file(tmp_path):
    r = subprocess.run([sys.executable, "-m", "gputape", "names"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == _names.markdown()
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{_names.BEGIN}\nold list\n{_names.END}\noutro\n")
    assert _names.update(str(doc)) and not _names.update(str(doc))
    assert doc.read_text() == f"intro\n{_names.BEGIN}\n{_names.markdown()}{_names.END}\noutro\n"
    plain = tmp_path / "plain.md"
    plain.write_text("nothing here\n")
    with pytest.raises(ValueError, match="no generated-names section"):
        _names.update(str(plain))


def test_gt_is_untouched_by_tfs_dtype_objects():
    assert gt.float32 is np.dtype("float32")  # gputape's own dtypes stay numpy's
