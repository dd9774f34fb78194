"""gt.save/gt.load in the safetensors format: round trips, hostile headers, and a PyTorch state dict."""

import hashlib
import json
import struct
import sys
import time

import numpy as np
import pytest
from checkpoint_helpers import assert_same, make_model, snapshot, train
from numpy.testing import assert_allclose, assert_array_equal

import gputape as gt
from gputape.checkpoint import read as _checkpoint_read


def block_safetensors(monkeypatch):
    """Make ``import safetensors`` fail, as on a machine without the extra."""
    for name in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)


# -- written by gt.save ------------------------------------------------------------------------------


def test_round_trip_with_optimizer_state_continues_identically(tmp_path):
    pytest.importorskip("safetensors")
    model, opt = make_model(0), gt.optim.Adam(0.01)
    train(model, opt, 3)
    path = tmp_path / "ckpt.safetensors"
    gt.save(path, {"model": model, "optimizer": opt, "epoch": 3})
    twin, twin_opt = make_model(5), gt.optim.Adam(0.01)
    data = gt.load(path, into={"model": twin, "optimizer": twin_opt})
    assert int(data["array:epoch"]) == 3 and twin_opt.iterations == 3
    assert_same(snapshot(twin), snapshot(model))
    train(model, opt, 2, seed=1)
    train(twin, twin_opt, 2, seed=1)
    assert_same(snapshot(twin), snapshot(model))


def test_the_file_is_plain_safetensors_with_the_marker_and_checksums_in_its_metadata(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    from safetensors.numpy import load_file

    model = make_model()
    path = tmp_path / "m.safetensors"
    gt.save(path, model)
    # each checksum is sha256 of "<dtype> <shape>\n" and the raw bytes: anyone can recompute it
    sums = {
        f"gputape.sha256.var:{p}": hashlib.sha256(
            f"F32 {json.dumps(list(v.shape), separators=(',', ':'))}\n".encode() + v.numpy().tobytes()
        ).hexdigest()
        for p, v in model.named_variables()
    }
    with safetensors.safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"__gputape_checkpoint__": "gputape-checkpoint/1", **sums}
    other = load_file(str(path))
    assert sorted(other) == sorted(f"var:{p}" for p, _ in model.named_variables())
    for p, v in model.named_variables():
        assert_array_equal(other[f"var:{p}"], v.numpy())
    assert sorted(n.name for n in tmp_path.iterdir()) == ["m.safetensors"]  # no temp file left


def test_the_suffix_picks_the_format_in_any_case(tmp_path):
    pytest.importorskip("safetensors")
    path = tmp_path / "m.SafeTensors"
    gt.save(path, make_model())
    assert path.read_bytes()[8:9] == b"{"  # a JSON header, not a zip
    twin = make_model(1)
    gt.load(path, into=twin)
    assert_same(snapshot(twin), snapshot(make_model()))


def test_save_without_the_package_names_the_extra(tmp_path, monkeypatch):
    block_safetensors(monkeypatch)
    with pytest.raises(ImportError, match=r'pip install "gputape\[safetensors\]"'):
        gt.save(tmp_path / "m.safetensors", make_model())
    assert list(tmp_path.iterdir()) == []


def test_load_needs_only_numpy(tmp_path, monkeypatch):
    pytest.importorskip("safetensors")
    path = tmp_path / "m.safetensors"
    gt.save(path, make_model())
    block_safetensors(monkeypatch)
    twin = make_model(1)
    gt.load(path, into=twin)
    assert_same(snapshot(twin), snapshot(make_model()))


def test_dtypes_safetensors_cannot_hold_are_refused_naming_the_entry(tmp_path):
    pytest.importorskip("safetensors")
    with pytest.raises(TypeError, match=r"'array:z'.*complex128"):
        gt.save(tmp_path / "c.safetensors", {"z": np.array([1j])})
    assert list(tmp_path.iterdir()) == []


def test_big_endian_and_scalar_values_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    path = tmp_path / "e.safetensors"
    gt.save(path, {"be": np.arange(3, dtype=">f4"), "n": 5, "flag": True, "c": np.array([1 + 2j], np.complex64)})
    data = gt.load(path)
    assert data["array:be"].tolist() == [0.0, 1.0, 2.0] and int(data["array:n"]) == 5
    assert bool(data["array:flag"]) and data["array:c"].tolist() == [1 + 2j]


def test_the_dtype_policy_is_the_same(tmp_path):
    pytest.importorskip("safetensors")
    path = tmp_path / "f64.safetensors"
    gt.save(path, {"v": gt.Variable(np.array([0.1, 2.0]))})
    v = gt.Variable(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"float64.*cast=True"):
        gt.load(path, into={"v": v})
    assert v.numpy().tolist() == [0.0, 0.0]
    gt.load(path, into={"v": v}, cast=True)
    assert v.numpy().tolist() == np.array([0.1, 2.0]).astype(np.float32).tolist()


# -- hostile files (hand-built: no package needed) -------------------------------------------------------


def st_file(path, header, data=b"", length=None):
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


MARK = {"__metadata__": {"__gputape_checkpoint__": "gputape-checkpoint/1"}}
W = {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}


@pytest.mark.parametrize(
    "header, data, length, msg",
    [
        ({**MARK, "var:w": W}, bytes(16), 1 << 40, "over the .*-byte cap"),
        ({**MARK, "var:w": W}, bytes(16), 10_000, "but the file has"),
        (b"[1, 2]", b"", None, "not a JSON object"),
        (b'{"var:w": {}, "var:w": {}}', b"", None, "names 'var:w' twice"),
        (b"[" * 100_000 + b"]" * 100_000, b"", None, "nests too deeply|not a readable"),
        (b"\xff\xfe{}", b"", None, "not a readable"),
        ({**MARK, "var:w": {**W, "dtype": "BF16", "data_offsets": [0, 4]}}, bytes(4), None, "'var:w'.*'BF16'.*float32"),
        ({**MARK, "var:w": {**W, "shape": [10**12]}}, bytes(16), None, "'var:w': data_offsets"),
        ({**MARK, "var:w": {**W, "shape": [-2]}}, bytes(16), None, "'var:w' declares an invalid shape"),
        ({**MARK, "var:w": {**W, "shape": [True, 2]}}, bytes(16), None, "'var:w' declares an invalid shape"),
        ({**MARK, "var:w": {**W, "data_offsets": [8, 24]}}, bytes(24), None, "'var:w' starts at byte 8"),
        ({**MARK, "var:w": W, "var:v": W}, bytes(16), None, "starts at byte 0, expected 16"),
        ({**MARK, "var:w": W}, bytes(40), None, "hold 16 bytes of data, but the file has 40"),
        ({**MARK, "var:w": W}, bytes(10), None, "but the file has 10"),
        ({**MARK, "var:w": {**W, "extra": 1}}, bytes(16), None, "expected"),
        ({"__metadata__": {"a": 1}, "var:w": W}, bytes(16), None, "map of strings"),
    ],
    ids=[
        "header-cap",
        "header-past-eof",
        "not-object",
        "duplicate-key",
        "deep-nesting",
        "not-utf8",
        "bfloat16",
        "huge-shape",
        "negative-dim",
        "bool-dim",
        "hole",
        "overlap",
        "trailing-bytes",
        "truncated",
        "extra-field",
        "metadata-not-str",
    ],
)
def test_hostile_headers_are_refused_at_once_and_load_nothing(tmp_path, header, data, length, msg):
    path = st_file(tmp_path / "bad.safetensors", header, data, length)
    w = gt.Variable(np.zeros(2))
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=msg):
        gt.load(path, into={"w": w})
    assert time.perf_counter() - t0 < 1.0
    assert w.numpy().tolist() == [0.0, 0.0]


def test_a_valid_hand_built_file_loads(tmp_path):
    path = st_file(tmp_path / "ok.safetensors", {**MARK, "var:w": W}, np.array([1.5, -2.0]).tobytes())
    w = gt.Variable(np.zeros(2))
    gt.load(path, into={"w": w})
    assert w.numpy().tolist() == [1.5, -2.0]


def test_a_foreign_file_needs_names(tmp_path):
    path = st_file(tmp_path / "foreign.safetensors", {"weight": W}, bytes(16))
    with pytest.raises(ValueError, match=r"no gputape format marker.*names="):
        gt.load(path)


def test_format_mixups_get_a_hint(tmp_path):
    st = st_file(tmp_path / "really_safetensors.npz", {**MARK, "var:w": W}, bytes(16))
    with pytest.raises(ValueError, match="looks like a safetensors file"):
        gt.load(st)
    z = tmp_path / "really.safetensors"
    gt.save(tmp_path / "m.npz", {"w": gt.Variable(np.zeros(2))})
    z.write_bytes((tmp_path / "m.npz").read_bytes())
    with pytest.raises(ValueError, match="zip archive"):
        gt.load(z)


def test_ten_thousand_entries_are_well_under_the_header_cap(tmp_path):
    n = 10_000
    header = {f"array:{i}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(n)}
    path = st_file(tmp_path / "many.safetensors", {**MARK, **header}, np.arange(n, dtype=np.float32).tobytes())
    assert path.stat().st_size * 8 < _checkpoint_read.SAFETENSORS_HEADER_CAP
    data = gt.load(path)
    assert len(data) == n and data["array:9999"].tolist() == [9999.0]


# -- names=: files gputape did not write -------------------------------------------------------------------


def test_names_map_a_foreign_npz_too(tmp_path):
    path = tmp_path / "foreign.npz"
    np.savez(path, **{"fc.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "fc.bias": np.ones(2, np.float32)})
    layer = gt.nn.Dense(2)
    layer.build((None, 3))
    gt.load(path, into=layer, names={"kernel": ("fc.weight", "T"), "bias": "fc.bias"})
    assert_array_equal(layer.kernel.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).T)
    assert layer.bias.numpy().tolist() == [1.0, 1.0]


def test_names_errors(tmp_path):
    path = tmp_path / "foreign.npz"
    np.savez(path, w=np.ones(2))
    m = gt.Module()
    m.w = gt.Variable(np.zeros(2))
    with pytest.raises(ValueError, match="names= has paths that `into` does not have: \\['x'\\]"):
        gt.load(path, into=m, names={"x": "w"})
    with pytest.raises(TypeError, match=r"names\['w'\] must be a key of the file"):
        gt.load(path, into=m, names={"w": ("w", "transpose")})
    with pytest.raises(ValueError, match="pass into="):
        gt.load(path, names={"w": "w"})
    with pytest.raises(ValueError, match=r"missing variable 'w' \(entry 'nope'\)"):
        gt.load(path, into=m, names={"w": "nope"})
    gt.load(path, into=m, names={"w": "w"})
    assert m.w.numpy().tolist() == [1.0, 1.0]


@pytest.mark.torch
def test_torch_state_dict_into_dense_mlp_gives_the_same_outputs(tmp_path):
    torch = pytest.importorskip("torch")
    save_file = pytest.importorskip("safetensors.torch").save_file
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    path = tmp_path / "mlp.safetensors"
    save_file(net.state_dict(), str(path))  # keys 0.weight (8, 4), 0.bias, 2.weight (3, 8), 2.bias

    model = make_model(1)
    names = {
        "layers/0/kernel": ("0.weight", "T"),  # torch.nn.Linear keeps (out, in), Dense (in, out)
        "layers/0/bias": "0.bias",
        "layers/1/kernel": ("2.weight", "T"),
        "layers/1/bias": "2.bias",
    }
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"'0.weight'.*shape \(8, 4\), expected \(4, 8\)"):
        gt.load(path, into=model, names={**names, "layers/0/kernel": "0.weight"})  # never transposed by guess
    assert_same(snapshot(model), before)

    gt.load(path, into=model, names=names)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).numpy()
    assert_allclose(model(x).numpy(), expected, rtol=1e-6, atol=1e-6)
