"""Keras 3's formats: ``.weights.h5`` and ``.keras`` files move between gputape and Keras 3, both ways.

The round trips need h5py and Keras 3 (``pip install keras h5py jax``; CI's third phase); without
them they skip. Keras runs on its numpy backend (inference only, which is all a prediction
needs): the backend is chosen here, before Keras is first imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import zipfile

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf

# Keras needs a backend: jax where installed (it also trains, which test_keras_training_vs_keras needs in
# the same process: the first import of keras fixes the backend), else numpy (inference only: enough here)
os.environ.setdefault("KERAS_BACKEND", "jax" if importlib.util.find_spec("jax") else "numpy")


@pytest.fixture(scope="module")
def h5py():
    return pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def keras(h5py):
    keras = pytest.importorskip("keras")
    if not keras.__version__.startswith("3."):
        pytest.skip(f"Keras 3 is needed, found {keras.__version__}")
    return keras


def _randomize(model, seed=0):
    """Every weight set to distinct values (positive variances), so a misplaced weight changes the output."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        a = rng.normal(size=v.shape).astype(v.dtype)
        v.assign(np.abs(a) + 0.5 if "variance" in v.name else a)


def _keras_randomize(model, seed=1):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        a = rng.normal(size=tuple(v.shape)).astype("float32")
        v.assign(np.abs(a) + 0.5 if "variance" in v.path else a)


# The same architectures in both libraries: (gputape builder, Keras builder, input).
def _mlp(lib):
    L = lib.layers
    return [
        L.Dense(6, activation="relu"),
        L.Dropout(0.3),
        L.BatchNormalization(),
        L.Dense(5, activation="tanh"),
        L.LayerNormalization(),
        L.Reshape((5, 1)),
        L.Flatten(),
        L.Activation("sigmoid"),
        L.Dense(3, activation="softmax"),
    ]


X = np.linspace(-2, 2, 12, dtype="float32").reshape(3, 4)


def _g_seq():
    return tf.keras.Sequential([tf.keras.Input((4,)), *_mlp(tf.keras)])


def _k_seq(keras):
    return keras.Sequential([keras.Input((4,)), *_mlp(keras)])


def _functional(lib):
    L = lib.layers
    a, b = lib.Input((4,), name="a"), lib.Input((3,), name="b")
    shared = L.Dense(4, activation="relu", name="shared")
    h = L.Concatenate()([a, shared(L.Dense(4, name="pre")(b))])
    h = L.BatchNormalization()(h)
    s = L.Add()([shared(a), L.Dense(4)(a)])  # the shared layer's second call: node index 1
    out = L.Dense(2)(L.Concatenate()([h, s]))
    return lib.Model([a, b], [out, s])


XS = [X, np.linspace(1, -1, 9, dtype="float32").reshape(3, 3)]


def _embed(lib):
    ids = lib.Input((5,), dtype="int32")
    e = lib.layers.Embedding(10, 3)(ids)
    return lib.Model(ids, lib.layers.Dense(2)(lib.layers.Flatten()(e)))


def _nested(lib):
    inner = lib.Sequential([lib.layers.Dense(3, activation="relu"), lib.layers.Dense(3)])
    x = lib.Input((4,))
    return lib.Model(x, lib.layers.Dense(1)(inner(x)))  # a model inside a model: its weights nest too


IDS = np.array([[0, 1, 2, 3, 9], [4, 5, 6, 7, 8]], "int32")


def _close(a, b):
    for x, y in zip(a if isinstance(a, (list, tuple)) else [a], b if isinstance(b, (list, tuple)) else [b]):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6)


def _g_out(model, x):
    out = model(x)
    return [o.numpy() for o in out] if isinstance(out, (list, tuple)) else out.numpy()


def _k_out(model, x):
    out = model(x, training=False)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else np.asarray(out)


def _layer_order(model):
    order = getattr(model, "_keras_layer_order", None)
    return order() if order is not None else model.layers


CASES = {
    "sequential": (_g_seq, _k_seq, X),
    "functional": (lambda: _functional(tf.keras), lambda k: _functional(k), XS),
    "embedding": (lambda: _embed(tf.keras), lambda k: _embed(k), IDS),
    "nested": (lambda: _nested(tf.keras), lambda k: _nested(k), X),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_keras_weights_h5_both_ways(case, keras, tmp_path):
    make_g, make_k, x = CASES[case]
    g, k = make_g(), make_k(keras)
    _randomize(g)
    g.save_weights(tmp_path / "g.weights.h5")
    k.load_weights(tmp_path / "g.weights.h5")
    _close(_k_out(k, x), _g_out(g, x))

    _keras_randomize(k)
    k.save_weights(tmp_path / "k.weights.h5")
    g.load_weights(tmp_path / "k.weights.h5")
    _close(_g_out(g, x), _k_out(k, x))


@pytest.mark.parametrize("case", sorted(CASES))
def test_keras_model_archive_both_ways(case, keras, tmp_path):
    make_g, make_k, x = CASES[case]
    g = make_g()
    _randomize(g)
    g.save(tmp_path / "g.keras")
    k = keras.models.load_model(tmp_path / "g.keras")
    assert [layer.name for layer in k.layers] == [layer.name for layer in _layer_order(g)]
    _close(_k_out(k, x), _g_out(g, x))

    k = make_k(keras)
    _keras_randomize(k)
    k.save(tmp_path / "k.keras")
    g2 = tf.keras.models.load_model(tmp_path / "k.keras")
    assert [layer.name for layer in _layer_order(g2)] == [layer.name for layer in k.layers]  # Keras' graph order
    _close(_g_out(g2, x), _k_out(k, x))


def test_keras_subclassed_model_through_custom_objects(keras, tmp_path):
    def define(lib):
        class Net(lib.Model):
            def __init__(self, hidden=8, **kwargs):
                super().__init__(**kwargs)
                self.hidden_units = hidden
                self.hidden = lib.layers.Dense(hidden, activation="relu")
                self.blocks = [lib.layers.Dense(3), lib.layers.BatchNormalization()]
                self.zout = lib.layers.Dense(2)

            def call(self, x, training=False):
                return self.zout(self.blocks[1](self.blocks[0](self.hidden(x)), training=training))

            def get_config(self):
                return {**super().get_config(), "hidden": self.hidden_units}

        return Net

    GNet, KNet = define(tf.keras), define(keras)
    g = GNet(hidden=5)
    g(X)
    _randomize(g)
    g.save(tmp_path / "g.keras")
    cfg = json.loads(zipfile.ZipFile(tmp_path / "g.keras").read("config.json"))
    assert (cfg["class_name"], cfg["config"]["hidden"]) == ("Net", 5)
    k = keras.models.load_model(tmp_path / "g.keras", custom_objects={"Net": KNet})
    _close(_k_out(k, X), _g_out(g, X))

    k = KNet(hidden=6)
    k(X)
    _keras_randomize(k)
    k.save(tmp_path / "k.keras")
    g2 = tf.keras.models.load_model(tmp_path / "k.keras", custom_objects={"Net": GNet})
    assert g2.hidden_units == 6
    _close(_g_out(g2, X), _k_out(k, X))


@pytest.mark.parametrize(
    "make",
    [
        lambda L: L.Dense(3, activation="relu"),
        lambda L: L.Dropout(0.2),
        lambda L: L.BatchNormalization(momentum=0.9),
        lambda L: L.LayerNormalization(),
        lambda L: L.Embedding(7, 2),
        lambda L: L.Reshape((2, 2)),
        lambda L: L.Concatenate(axis=1),
        lambda L: L.Activation("tanh"),
        lambda L: L.Flatten(),
        lambda L: L.Add(),
    ],
)
def test_keras_layer_configs_use_keras_keys(make, keras):
    """Every key a gputape layer's config holds is one Keras' class takes, under Keras' own class name."""
    from gputape.nn.saving import serialize

    g, k = make(tf.keras.layers), make(keras.layers)
    entry = serialize(g)
    assert entry["class_name"] == type(k).__name__ and entry["module"] == "keras.layers"
    assert set(entry["config"]) <= set(k.get_config()), set(entry["config"]) - set(k.get_config())
    rebuilt = keras.layers.deserialize(entry)
    for key in entry["config"]:
        if key not in ("name", "dtype") and not key.endswith("initializer"):
            got, want = rebuilt.get_config()[key], entry["config"][key]
            assert got == want or list(np.atleast_1d(got)) == list(np.atleast_1d(want)), key


def test_keras_metadata_and_members(h5py, tmp_path):
    m = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    m.save(tmp_path / "m.keras")
    zf = zipfile.ZipFile(tmp_path / "m.keras")
    assert sorted(zf.namelist()) == ["config.json", "metadata.json", "model.weights.h5"]
    meta = json.loads(zf.read("metadata.json"))
    assert meta["keras_version"].startswith("3.") and "date_saved" in meta
    cfg = json.loads(zf.read("config.json"))
    assert (cfg["module"], cfg["class_name"], cfg["compile_config"]) == ("keras", "Sequential", {})
    assert cfg["config"]["build_input_shape"] == [None, 2]


# -- gputape alone (h5py, no Keras) ----------------------------------------------------------------------


def test_keras_h5_names_never_hold_a_zip(h5py, tmp_path):
    m = gt.nn.Sequential([gt.nn.Dense(2)])
    m.build((None, 3))
    m.save_weights(tmp_path / "w.weights.h5")
    assert (tmp_path / "w.weights.h5").read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    for name in ("w.h5", "w.hdf5", "w.keras"):
        with pytest.raises(ValueError, match=r"\.weights\.h5"):
            m.save_weights(tmp_path / name)
        assert not (tmp_path / name).exists()
    with pytest.raises(ValueError, match=r"\.keras"):
        m.save(tmp_path / "m.h5")
    with pytest.raises(ValueError, match=r"\.keras"):
        m.save(tmp_path / "m.npz")
    assert not (tmp_path / "m.h5").exists() and not (tmp_path / "m.npz").exists()
    # other names keep gputape's checkpoint, and an old gputape .h5 (a zip) still loads
    m.save_weights(tmp_path / "w.npz")
    for name in ("w.h5", "w.keras"):
        with pytest.raises(ValueError, match=r"names an HDF5 or Keras file.*Nothing was written"):
            gt.save(tmp_path / name, m)
    os.replace(tmp_path / "w.npz", tmp_path / "old.h5")  # what gputape's save_weights used to write
    twin = gt.nn.Sequential([gt.nn.Dense(2)])
    twin.build((None, 3))
    twin.load_weights(tmp_path / "old.h5")
    assert np.array_equal(twin.weights[0].numpy(), m.weights[0].numpy())


def test_keras_h5_without_h5py_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "h5py", None)
    m = gt.nn.Dense(2)
    m.build((None, 3))
    with pytest.raises(ImportError, match=r"gputape\[h5\]"):
        m.save_weights(tmp_path / "w.weights.h5")
    with pytest.raises(ImportError, match=r"gputape\[h5\]"):
        tf.keras.models.load_model(tmp_path / "m.keras")
    assert not (tmp_path / "w.weights.h5").exists()


def test_keras_mismatched_weights_change_nothing(h5py, tmp_path):
    a = gt.nn.Sequential([gt.nn.Dense(4), gt.nn.Dense(2)])
    a.build((None, 3))
    a.save_weights(tmp_path / "a.weights.h5")
    b = gt.nn.Sequential([gt.nn.Dense(4), gt.nn.Dense(3)])  # the second layer differs
    b.build((None, 3))
    before = [w.numpy().copy() for w in b.weights]
    with pytest.raises(ValueError, match=r"layers/dense_1/vars.*shape \(4, 2\).*\(4, 3\)") as info:
        b.load_weights(tmp_path / "a.weights.h5")
    assert "nothing was loaded" in str(info.value)
    assert all(np.array_equal(x, w.numpy()) for x, w in zip(before, b.weights))  # not even the first layer
    c = gt.nn.Sequential([gt.nn.Dense(4)])
    c.build((None, 3))
    c.save_weights(tmp_path / "c.weights.h5")
    with pytest.raises(ValueError, match=r"layers/dense_1.*0 weights, the layer has 2"):
        a.load_weights(tmp_path / "c.weights.h5")
    (tmp_path / "junk.weights.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(ValueError, match=r"not an HDF5 file"):
        a.load_weights(tmp_path / "junk.weights.h5")


def test_keras_weights_are_placed_by_structure_not_by_name(h5py, tmp_path):
    a = gt.nn.Sequential([gt.nn.Dense(3, name="first"), gt.nn.BatchNormalization(), gt.nn.Dense(1)])
    a.build((None, 2))
    _randomize(a)
    a.save_weights(tmp_path / "a.weights.h5")
    b = gt.nn.Sequential([gt.nn.Dense(3, name="other"), gt.nn.BatchNormalization(), gt.nn.Dense(1)])
    b.build((None, 2))
    b.load_weights(tmp_path / "a.weights.h5")
    x = np.ones((2, 2), "float32")
    assert np.array_equal(a(x).numpy(), b(x).numpy())
    f = h5py.File(tmp_path / "a.weights.h5")
    assert f["layers/dense/vars"].attrs["name"] == "first"
    assert [f[f"layers/batch_normalization/vars/{i}"].shape for i in range(4)] == [(3,)] * 4
    assert np.array_equal(f["layers/batch_normalization/vars/2"][()], a.layers[1].moving_mean.numpy())


def test_keras_model_round_trip_in_gputape(h5py, tmp_path):
    g = _functional(tf.keras)
    _randomize(g)
    g.save(tmp_path / "f.keras")
    twin = tf.keras.models.load_model(tmp_path / "f.keras")
    assert [a.numpy().tobytes() for a in twin(XS)] == [a.numpy().tobytes() for a in g(XS)]
    assert [layer.name for layer in twin.layers if layer.weights] == [layer.name for layer in g.layers if layer.weights]


def test_keras_what_a_config_cannot_carry_is_refused(h5py, tmp_path):
    lam = gt.nn.Sequential([gt.nn.Dense(2), gt.nn.Lambda(lambda x: x * 2)])
    lam.build((None, 3))
    with pytest.raises(ValueError, match=r"Lambda layer .* wraps Python code"):
        lam.save(tmp_path / "l.keras")
    fn = gt.nn.Sequential([gt.nn.Dense(2, activation=lambda x: x)])
    fn.build((None, 3))
    with pytest.raises(ValueError, match=r"activation .* has no Keras name"):
        fn.save(tmp_path / "f.keras")
    plain = gt.nn.Sequential([gt.nn.Dense(2), gt.nn.relu])
    plain.build((None, 3))
    with pytest.raises(ValueError, match=r"is not a layer"):
        plain.save(tmp_path / "p.keras")
    unbuilt = gt.nn.Sequential([gt.nn.Dense(2)])
    with pytest.raises(ValueError, match=r"not built"):
        unbuilt.save(tmp_path / "u.keras")
    assert not any(tmp_path.iterdir())


def test_keras_config_features_gputape_lacks_are_refused_by_name():
    from gputape.nn.saving import deserialize

    off = {"units": 2, "kernel_regularizer": None, "bias_constraint": None, "quantization_config": None}
    assert deserialize({"class_name": "Dense", "config": off}).units == 2
    constrained = {**off, "kernel_constraint": {"class_name": "NonNeg", "config": {}}}
    assert type(deserialize({"class_name": "Dense", "config": constrained}).kernel_constraint).__name__ == "NonNeg"
    on = {**off, "lora_rank": 4}
    with pytest.raises(ValueError, match=r"lora_rank=.*Dense does not implement"):
        deserialize({"class_name": "Dense", "config": on})
    with pytest.raises(ValueError, match=r"unknown class 'Conv2D'.*custom_objects"):
        deserialize({"class_name": "Conv2D", "config": {}})
    with pytest.raises(ValueError, match=r"mixed precision"):
        deserialize(
            {
                "class_name": "Dense",
                "config": {"units": 1, "dtype": {"class_name": "DTypePolicy", "config": {"name": "mixed_float16"}}},
            }
        )


def test_keras_load_model_refuses_other_files(h5py, tmp_path):
    (tmp_path / "x.keras").write_bytes(b"PK not really")
    with pytest.raises(ValueError, match=r"not a \.keras archive"):
        tf.keras.models.load_model(tmp_path / "x.keras")
    with zipfile.ZipFile(tmp_path / "y.keras", "w") as zf:
        zf.writestr("metadata.json", "{}")
    with pytest.raises(ValueError, match=r"no config\.json"):
        tf.keras.models.load_model(tmp_path / "y.keras")
    with pytest.raises(ValueError, match=r"not a \.keras file"):
        tf.keras.models.load_model(tmp_path / "m.h5")


def test_keras_model_checkpoint_callback_writes_keras_formats(h5py, tmp_path):
    m = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    m.compile(optimizer="sgd", loss="mse")
    cbs = [
        tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "m{epoch}.keras")),
        tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "w{epoch}.weights.h5"), save_weights_only=True),
    ]
    m.fit(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"), epochs=1, verbose=0, callbacks=cbs)
    assert zipfile.is_zipfile(tmp_path / "m1.keras")
    assert (tmp_path / "w1.weights.h5").read_bytes()[:4] == b"\x89HDF"
    twin = tf.keras.models.load_model(tmp_path / "m1.keras")
    assert np.array_equal(twin(np.ones((1, 2))).numpy(), m(np.ones((1, 2))).numpy())
