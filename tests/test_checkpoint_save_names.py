"""gt.save(path, obj, names=...): another library's naming and layout, the exact inverse of gt.load's names=."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from checkpoint_helpers import assert_same, make_model, snapshot, train
from numpy.testing import assert_allclose, assert_array_equal

import gputape as gt

# torch.nn.Sequential(Linear(4, 8), ReLU(), Linear(8, 3)) names its weights by position: 0.* and 2.*
TORCH_NAMES = {
    "layers/0/kernel": ("0.weight", "T"),  # Dense (in, out) is Linear's weight (out, in)
    "layers/0/bias": "0.bias",
    "layers/1/kernel": ("2.weight", "T"),
    "layers/1/bias": "2.bias",
}


def torch_mlp(torch):
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


@pytest.fixture(params=["safetensors", "npz"])
def suffix(request):
    if request.param == "safetensors":
        pytest.importorskip("safetensors")
    return request.param


def read_back(path):
    """The file's arrays by key, read by the format's own library (not by gputape)."""
    if str(path).endswith(".safetensors"):
        from safetensors.numpy import load_file

        return load_file(str(path))
    with np.load(path, allow_pickle=False) as z:
        return dict(z)


# -- the layout written ------------------------------------------------------------------------------


def test_the_file_has_exactly_the_mapped_keys_in_the_mapped_layout(tmp_path, suffix):
    model = make_model(0)
    path = tmp_path / f"mlp.{suffix}"
    gt.save(path, model, names=TORCH_NAMES)
    data = read_back(path)
    assert sorted(data) == ["0.bias", "0.weight", "2.bias", "2.weight"]  # no marker, no var: keys
    assert data["0.weight"].shape == (8, 4) and data["2.weight"].shape == (3, 8)
    assert_array_equal(data["0.weight"], model.layers[0].kernel.numpy().T)
    assert_array_equal(data["2.bias"], model.layers[1].bias.numpy())
    assert sorted(n.name for n in tmp_path.iterdir()) == [path.name]  # no temp file left


def test_load_with_the_same_names_is_the_inverse(tmp_path, suffix):
    model = make_model(0)
    path = tmp_path / f"mlp.{suffix}"
    gt.save(path, model, names=TORCH_NAMES)
    twin = make_model(5)
    gt.load(path, into=twin, names=TORCH_NAMES)
    assert_same(snapshot(twin), snapshot(model))
    # not gputape's layout, and no marker claims it is: without names= the hint says what to do
    with pytest.raises(ValueError, match=r"no gputape format marker.*names="):
        gt.load(path, into=twin)


def test_optimizer_state_saved_beside_keeps_gputapes_keys_and_training_continues(tmp_path, suffix):
    model, opt = make_model(0), gt.optim.Adam(0.01)
    train(model, opt, 3)
    names = {f"model/{p}": spec for p, spec in TORCH_NAMES.items()}
    path = tmp_path / f"ckpt.{suffix}"
    gt.save(path, {"model": model, "opt": opt, "epoch": 3}, names=names)
    assert {"0.weight", "opt:opt:iterations", "opt:opt:slot:momentum:model/layers/0/kernel", "array:epoch"} <= set(
        read_back(path)
    )
    twin, twin_opt = make_model(5), gt.optim.Adam(0.01)
    data = gt.load(path, into={"model": twin, "opt": twin_opt}, names=names)
    assert int(data["array:epoch"]) == 3 and int(twin_opt.iterations) == 3
    train(model, opt, 2, seed=1)
    train(twin, twin_opt, 2, seed=1)
    assert_same(snapshot(twin), snapshot(model))


def test_keys_numpys_savez_would_take_as_its_own_arguments_save(tmp_path):
    m = gt.Module()
    m.a, m.b = gt.Variable([1.0, 2.0]), gt.Variable([3.0])
    names = {"a": "allow_pickle", "b": "file"}  # np.savez(f, **arrays) would misread both
    gt.save(tmp_path / "m.npz", m, names=names)
    assert {k: a.tolist() for k, a in read_back(tmp_path / "m.npz").items()} == {
        "allow_pickle": [1.0, 2.0],
        "file": [3.0],
    }
    twin = gt.Module()
    twin.a, twin.b = gt.Variable([0.0, 0.0]), gt.Variable([0.0])
    gt.load(tmp_path / "m.npz", into=twin, names=names)
    assert twin.a.numpy().tolist() == [1.0, 2.0] and twin.b.numpy().tolist() == [3.0]


# -- refused mappings: a clear error naming the variable and the entry, and nothing written ------------------


def with_entry(**changes):
    out = dict(TORCH_NAMES)
    for k, v in changes.items():
        path = k.replace("__", "/")
        if v is None:
            out.pop(path)
        else:
            out[path] = v
    return out


@pytest.mark.parametrize(
    "names, error, msg",
    [
        (
            with_entry(layers__1__bias=None),
            ValueError,
            r"names= leaves 1 variable unnamed: 'layers/1/bias' \(shape \(3,\)\).*names\['layers/1/bias'\] = ",
        ),
        (
            with_entry(layers__1__bias="0.bias"),
            ValueError,
            r"names\['layers/0/bias'\] and names\['layers/1/bias'\] both give the key '0.bias'",
        ),
        (
            with_entry(layers__0__bias=("0.bias", "T")),
            ValueError,
            r"names\['layers/0/bias'\] = \('0.bias', 'T'\) transposes variable 'layers/0/bias', which has shape \(8,\)",
        ),
        (
            with_entry(layers__0__bias="__metadata__"),
            ValueError,
            r"names\['layers/0/bias'\] = '__metadata__'.*reserves",
        ),
        (
            {**TORCH_NAMES, "layers/2/kernel": "x"},
            ValueError,
            r"names= has paths that the object saved does not have: \['layers/2",
        ),
        (with_entry(layers__0__bias=("0.bias", "t")), TypeError, r"names\['layers/0/bias'\] must be a key of the file"),
        (list(TORCH_NAMES.items()), TypeError, "names must be a dict"),
    ],
    ids=["unnamed", "same-key", "transpose-1d", "reserved", "unknown-path", "bad-spec", "not-a-dict"],
)
def test_a_bad_mapping_is_refused_and_nothing_is_written(tmp_path, suffix, names, error, msg):
    path = tmp_path / f"mlp.{suffix}"
    gt.save(path, {"w": gt.Variable([1.0])})
    old = path.read_bytes()
    with pytest.raises(error, match=rf"gt.save: {msg}"):
        gt.save(path, make_model(0), names=names)
    assert path.read_bytes() == old and os.listdir(tmp_path) == [path.name]


def test_a_mapped_key_that_meets_a_saved_value_is_refused(tmp_path):
    names = {f"model/{p}": spec for p, spec in TORCH_NAMES.items()} | {"model/layers/1/bias": "array:epoch"}
    with pytest.raises(ValueError, match=r"variable 'model/layers/1/bias' and the value 'epoch' both map to"):
        gt.save(tmp_path / "m.npz", {"model": make_model(0), "epoch": 3}, names=names)
    assert os.listdir(tmp_path) == []


def test_load_refuses_transposing_a_tensor_that_is_not_2d(tmp_path):
    """'T' reverses no axes but a matrix's: a conv kernel reversed is not another library's layout."""
    path = tmp_path / "k.npz"
    np.savez(path, k=np.zeros((2, 3, 4)))
    m = gt.Module()
    m.k = gt.Variable(np.ones((4, 3, 2)))
    with pytest.raises(ValueError, match=r"gt.load: names\['k'\] = \('k', 'T'\) transposes variable 'k'.*\(4, 3, 2\)"):
        gt.load(path, into=m, names={"k": ("k", "T")})
    assert m.k.numpy().sum() == 24


# -- PyTorch -------------------------------------------------------------------------------------------------


@pytest.mark.torch
def test_torch_loads_a_gputape_mlp_strictly_with_the_same_outputs(tmp_path):
    torch = pytest.importorskip("torch")
    load_file = pytest.importorskip("safetensors.torch").load_file
    model = make_model(0)
    train(model, gt.optim.Adam(0.01), 3)
    path = tmp_path / "mlp.safetensors"
    gt.save(path, model, names=TORCH_NAMES)

    net = torch_mlp(torch)
    net.load_state_dict(load_file(str(path)), strict=True)
    x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    with torch.no_grad():
        got = net(torch.from_numpy(x)).numpy()
    assert_allclose(got, model(x).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.torch
def test_torch_to_gputape_to_torch_round_trips_exactly(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    net = torch_mlp(torch)
    st.save_file(net.state_dict(), str(tmp_path / "from_torch.safetensors"))

    model = make_model(5)
    gt.load(tmp_path / "from_torch.safetensors", into=model, names=TORCH_NAMES)
    gt.save(tmp_path / "back.safetensors", model, names=TORCH_NAMES)
    back = torch_mlp(torch)
    back.load_state_dict(st.load_file(str(tmp_path / "back.safetensors")), strict=True)
    for (k, a), (k2, b) in zip(net.state_dict().items(), back.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    x = torch.randn(16, 4)
    with torch.no_grad():
        assert torch.equal(net(x), back(x))


# -- the README's example ----------------------------------------------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the subprocess imports gputape from this checkout even where it is not installed
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def readme_block():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    (block,) = [b for b in blocks if "gt.save(path, model, names=names)" in b]
    return block


def test_the_readmes_saving_example_runs(tmp_path):
    pytest.importorskip("safetensors")
    code = readme_block().replace("/tmp/gputape-mlp.safetensors", str(tmp_path / "mlp.safetensors"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV)
    assert out.returncode == 0, out.stderr
    assert "same outputs: True" in out.stdout
    assert "is corrupt: tensor '2.weight' does not match the sha256 checksum" in out.stdout


@pytest.mark.torch
def test_torch_loads_what_the_readmes_saving_example_writes(tmp_path):
    torch = pytest.importorskip("torch")
    load_file = pytest.importorskip("safetensors.torch").load_file
    path = tmp_path / "mlp.safetensors"
    code = readme_block().replace("/tmp/gputape-mlp.safetensors", str(path))
    scope = {}
    exec(code.split("raw = ")[0], scope)  # up to the corruption: the file as gt.save wrote it
    net = torch_mlp(torch)
    net.load_state_dict(load_file(str(path)), strict=True)
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    with torch.no_grad():
        assert_allclose(net(torch.from_numpy(x)).numpy(), scope["model"](x).numpy(), rtol=1e-6, atol=1e-6)
