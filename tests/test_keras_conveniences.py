"""Conveniences a TensorFlow user expects: f-string formatting, numpy-like printing, versions, reprs."""

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf


def test_format_spec_on_scalars_like_numpy_and_a_clear_error_otherwise():
    loss = tf.constant(2.0) / 3.0
    assert f"{loss:.4f}" == "0.6667" == f"{np.float32(2.0) / np.float32(3.0):.4f}"
    assert f"{tf.Variable(1234.5):,.1f}" == "1,234.5"
    assert f"{tf.constant(7):>4d}" == "   7"
    assert f"{loss}" == str(loss)
    with pytest.raises(TypeError, match=r"only 0-d \(scalar\) tensors take a format spec"):
        f"{tf.constant([1.0, 2.0]):.2f}"
    with pytest.raises(TypeError):  # numpy refuses the same
        f"{np.array([1.0, 2.0]):.2f}"


def test_repr_is_numpy_repr_summarised_at_1000_elements_with_aligned_rows():
    a = np.arange(1000, dtype=np.float32)
    assert repr(tf.constant(a)).endswith(repr(a) + ">")  # 1000 elements: printed in full, like numpy
    assert "..." not in repr(tf.constant(a))
    b = np.arange(1001, dtype=np.float32)
    assert "..." in repr(tf.constant(b)) and repr(tf.constant(b)).endswith(repr(b) + ">")
    m = np.arange(12.0).reshape(3, 4)
    text = repr(tf.constant(m))
    assert text == f"<gt.Tensor: shape=(3, 4), dtype=float64, numpy=\n{m!r}>"
    rows = text.splitlines()[1:]
    assert len({r.index("[", 7) if r.startswith("array") else r.index("[") for r in rows}) == 1  # aligned
    assert str(tf.constant(m)) == f"gt.Tensor(\n{m}, shape=(3, 4), dtype=float64)"
    assert repr(tf.constant(0.25)) == "<gt.Tensor: shape=(), dtype=float32, numpy=0.25>"
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]], name="w")
    assert repr(v) == (
        "<gt.Variable 'w:0' shape=(2, 2) dtype=float32, numpy=\narray([[1., 2.],\n       [3., 4.]], dtype=float32)>"
    )


def test_versions_and_dtypes():
    major, minor, _ = (int(p) for p in tf.__version__.split("."))
    assert (major, minor) >= (2, 16)  # the first TensorFlow whose tf.keras is Keras 3
    assert tf.version.VERSION == tf.__version__
    assert tf.keras.__version__.startswith("3.")
    assert tf.dtypes.float32 == tf.float32 == np.float32
    assert tf.dtypes.as_dtype("int64") == tf.int64
    assert tf.dtypes.cast(tf.constant([1.5]), tf.dtypes.int32).dtype == np.int32
    with pytest.raises(TypeError, match=r"tf\.as_dtype"):
        tf.as_dtype(object())


def test_dataset_and_dataloader_reprs_say_what_they_hold():
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((10, 3), "float32"), np.arange(10))).shuffle(10).batch(4)
    assert repr(ds) == (
        "<Dataset element_spec=(TensorSpec(shape=(None, 3), dtype=float32), TensorSpec(shape=(None,), "
        "dtype=int64)), cardinality=3>"
    )
    exact = tf.data.Dataset.from_tensor_slices(np.zeros((10, 3))).batch(4, drop_remainder=True)
    assert "shape=(4, 3)" in repr(exact) and "cardinality=2" in repr(exact)
    loader = gt.data.DataLoader(np.zeros((10, 3)), batch_size=4)
    assert repr(loader).startswith("<DataLoader shapes=[(10, 3)], batch_size=4, batches=3")


def test_layers_losses_and_metrics_print_informatively():
    for obj in (
        tf.keras.layers.Dense(3),
        tf.keras.layers.BatchNormalization(),
        tf.keras.losses.MeanSquaredError(),
        tf.keras.metrics.Precision(),
        tf.keras.Sequential([tf.keras.layers.Dense(1)]),
    ):
        text = repr(obj)
        assert type(obj).__name__ in text and " at 0x" not in text
    assert "not built" in repr(tf.keras.layers.Dense(3))


def test_summary_widens_its_columns_for_long_names():
    name = "a_layer_whose_name_runs_to_sixty_characters_long__0123456789"
    assert len(name) == 60
    m = gt.nn.Sequential([gt.nn.Dense(4, name=name), gt.nn.Dense(1, name="out")], name="long")
    m(np.zeros((2, 3), "float32"))
    lines: list[str] = []
    m.summary(print_fn=lines.append)
    table = [s for s in "\n".join(lines).splitlines() if s[:1] in "┏┃┡│├└"]
    assert len({len(s) for s in table}) == 1, "\n".join(table)  # every border lines up
    row = next(s for s in table if name in s)
    assert f"│ {name} (Dense) │" in row  # the whole name, inside its column
    # the column borders sit at the same places on every line
    cols = {tuple(i for i, c in enumerate(s) if c in "┃┳┓┏╇┡┩│┼├┤┴└┘") for s in table}
    assert len(cols) == 1, "\n".join(table)
    short: list[str] = []
    m2 = gt.nn.Sequential([gt.nn.Dense(1, name="d")], name="s")
    m2(np.zeros((1, 1), "float32"))
    m2.summary(print_fn=short.append)
    assert max(len(s) for s in "\n".join(short).splitlines()) == 76  # Keras' width when names fit
