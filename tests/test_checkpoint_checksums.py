"""The sha256 checksum gt.save writes per safetensors tensor, and gt.load's refusal of a file that fails it.

Before checksums, a flipped data byte loaded silently (a float's bytes are always some float):
200 of 200 random single-byte flips in a small model's file loaded without a word.
"""

import json
import struct

import numpy as np
import pytest
from checkpoint_helpers import assert_same, make_model, snapshot, train
from numpy.testing import assert_array_equal

import gputape as gt

pytest.importorskip("safetensors")  # gt.save writes .safetensors with the package; reading needs only numpy

PREFIX = "gputape.sha256."


def header_of(raw):
    """The parsed JSON header of a safetensors file's bytes, and where its data section starts."""
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), 8 + n


def tensor_at(header, offset):
    """The key of the tensor whose data holds byte ``offset`` of the data section."""
    return next(
        k for k, s in header.items() if k != "__metadata__" and s["data_offsets"][0] <= offset < s["data_offsets"][1]
    )


def state(model, opt):
    """Every value of ``model`` and ``opt``, in the model's order (slots in the order of their variables)."""
    slots = {id(v): per for v, per in opt.get_state()["slots"]}
    per_var = [per[k] for v in model.variables if id(v) in slots for per in [slots[id(v)]] for k in sorted(per)]
    return snapshot(model) + [np.array(opt.iterations.numpy())] + per_var


@pytest.fixture
def saved(tmp_path):
    """A model, its Adam state, an int, a bool and a float16 array in one file, and that file's bytes."""
    model, opt = make_model(0), gt.optim.Adam(0.01)
    train(model, opt, 2)
    path = tmp_path / "ckpt.safetensors"
    extra = {"epoch": 7, "done": np.array([True, False]), "h": np.arange(3, dtype=np.float16)}
    gt.save(path, {"model": model, "opt": opt, **extra})
    return path, path.read_bytes(), model, opt


def fresh():
    return make_model(5), gt.optim.Adam(0.01)


def test_an_unmodified_file_loads(saved):
    path, _, model, opt = saved
    twin, twin_opt = fresh()
    data = gt.load(path, into={"model": twin, "opt": twin_opt})
    assert_same(state(twin, twin_opt), state(model, opt))
    assert int(data["array:epoch"]) == 7 and data["array:h"].tolist() == [0.0, 1.0, 2.0]


def test_every_single_byte_flip_in_the_data_is_refused_naming_file_and_tensor(saved):
    path, raw, _, _ = saved
    header, start = header_of(raw)
    rng = np.random.default_rng(0)
    positions = rng.integers(start, len(raw), 200)
    assert len(set(tensor_at(header, p - start) for p in positions)) > 5  # the flips reach most tensors
    for pos, xor in zip(positions, rng.integers(1, 256, 200)):
        bad = bytearray(raw)
        bad[pos] ^= int(xor)
        path.write_bytes(bad)
        twin, twin_opt = fresh()
        before = state(twin, twin_opt)
        key = tensor_at(header, pos - start)
        with pytest.raises(ValueError, match=rf"{str(path)!r} is corrupt: tensor {key!r} does not match") as info:
            gt.load(path, into={"model": twin, "opt": twin_opt})
        assert "Nothing was loaded" in str(info.value)
        assert_same(state(twin, twin_opt), before)  # all or nothing: no variable, slot or step count changed
        with pytest.raises(ValueError, match="is corrupt"):
            gt.load(path)  # nothing to load into: still every tensor is checked


def test_every_single_byte_change_in_the_header_is_refused_or_changes_nothing(tmp_path):
    """The header is outside the data checksums, but dtype and shape are hashed, keys must match their
    checksums one to one, and the format checks the rest: no change to it loads different values."""
    model = make_model(0)
    path = tmp_path / "m.safetensors"
    gt.save(path, model)
    raw = path.read_bytes()
    _, start = header_of(raw)
    rng = np.random.default_rng(1)
    accepted = []
    for pos, xor in zip(range(start), rng.integers(1, 256, start)):
        bad = bytearray(raw)
        bad[pos] ^= int(xor)
        path.write_bytes(bad)
        twin = make_model(5)
        try:
            gt.load(path, into=twin, cast=True)
        except ValueError:
            continue
        assert_same(snapshot(twin), snapshot(model))
        accepted.append(bytes(bad[pos : pos + 1]))
    assert set(accepted) <= set(b" \t\r\n")  # the header's padding spaces may become other JSON whitespace


def test_a_same_size_dtype_change_in_the_header_is_caught(saved):
    """F32 -> I32 keeps every size and offset: only the dtype in the checksum tells."""
    path, raw, _, _ = saved
    bad = raw.replace(b'"dtype":"F32"', b'"dtype":"I32"', 1)
    assert len(bad) == len(raw) and bad != raw
    path.write_bytes(bad)
    with pytest.raises(ValueError, match=r"is corrupt: tensor .* does not match"):
        gt.load(path, cast=True)


def rewrite_metadata(raw, change):
    """``raw`` with its header's metadata passed through ``change`` (the data section kept as it is)."""
    header, start = header_of(raw)
    change(header["__metadata__"])
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + raw[start:]


@pytest.mark.parametrize(
    "change, msg",
    [
        (lambda m: m.pop(f"{PREFIX}var:model/layers/0/bias"), "tensor 'var:model/layers/0/bias' has no checksum"),
        (
            lambda m: m.update({f"{PREFIX}var:gone": "0" * 64}),
            "its metadata has a checksum for 'var:gone', which is not one of",
        ),
        (lambda m: m.update({f"{PREFIX}array:epoch": "xyz"}), "the checksum of tensor 'array:epoch' is not a sha256"),
        (lambda m: m.update({f"{PREFIX}array:epoch": "0" * 64}), "tensor 'array:epoch' does not match"),
    ],
    ids=["one-missing", "orphan", "malformed", "wrong"],
)
def test_checksums_are_all_or_none(saved, change, msg):
    path, raw, _, _ = saved
    path.write_bytes(rewrite_metadata(raw, change))
    twin, twin_opt = fresh()
    before = state(twin, twin_opt)
    with pytest.raises(ValueError, match=rf"is corrupt: {msg}"):
        gt.load(path, into={"model": twin, "opt": twin_opt})
    assert_same(state(twin, twin_opt), before)


def test_a_file_without_checksums_loads_with_the_format_checks(saved):
    """gputape's files from before the checksums: the marker and nothing else in the metadata."""
    path, raw, model, opt = saved
    path.write_bytes(rewrite_metadata(raw, lambda m: [m.pop(k) for k in list(m) if k.startswith(PREFIX)]))
    twin, twin_opt = fresh()
    gt.load(path, into={"model": twin, "opt": twin_opt})
    assert_same(state(twin, twin_opt), state(model, opt))


def test_a_file_of_the_safetensors_numpy_api_without_metadata_loads(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "plain.safetensors"
    weights = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, np.float32)}
    save_file(weights, str(path))
    layer = gt.nn.Dense(2)
    layer.build((None, 3))
    gt.load(path, into=layer, names={"kernel": ("w", "T"), "bias": "b"})
    assert_array_equal(layer.kernel.numpy(), weights["w"].T)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x40  # no checksum to catch it: the format's own checks are all there is, as before
    path.write_bytes(raw)
    gt.load(path, into=layer, names={"kernel": ("w", "T"), "bias": "b"})
    assert not np.array_equal(layer.kernel.numpy(), weights["w"].T) or layer.bias.numpy().tolist() != [1.0, 1.0]


@pytest.mark.torch
def test_a_torch_written_file_loads(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    lin = torch.nn.Linear(3, 2)
    path = tmp_path / "torch.safetensors"
    save_file(lin.state_dict(), str(path), metadata={"format": "pt"})
    layer = gt.nn.Dense(2)
    layer.build((None, 3))
    gt.load(path, into=layer, names={"kernel": ("weight", "T"), "bias": "bias"})
    assert_array_equal(layer.kernel.numpy(), lin.weight.detach().numpy().T)
    assert_array_equal(layer.bias.numpy(), lin.bias.detach().numpy())
