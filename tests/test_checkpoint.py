"""gt.save / gt.load: round trips (with optimizer state) and bad files that must load nothing."""

import os
import pickle
import zipfile

import numpy as np
import pytest
from checkpoint_helpers import assert_same, make_model, snapshot, train

import gputape as gt

# -- round trips -------------------------------------------------------------------------------


def test_module_round_trip(tmp_path):
    model = make_model(0)
    path = tmp_path / "m.npz"
    gt.save(path, model)
    saved = snapshot(model)
    other = make_model(1)
    assert not np.array_equal(other.variables[0].numpy(), saved[0])
    gt.load(path, into=other)
    assert_same(snapshot(other), saved)


def test_round_trip_with_optimizer_state_continues_identically(tmp_path):
    model, opt = make_model(0), gt.optim.Adam(0.01)
    train(model, opt, 3)
    path = tmp_path / "ckpt.npz"
    gt.save(path, {"model": model, "optimizer": opt, "epoch": 3, "note": np.arange(3)})

    twin, twin_opt = make_model(5), gt.optim.Adam(0.01)
    data = gt.load(path, into={"model": twin, "optimizer": twin_opt})
    assert int(data["array:epoch"]) == 3 and data["array:note"].tolist() == [0, 1, 2]
    assert twin_opt.iterations == 3
    assert_same(snapshot(twin), snapshot(model))

    train(model, opt, 2, seed=1)
    train(twin, twin_opt, 2, seed=1)
    assert_same(snapshot(twin), snapshot(model))  # Adam's moments came back too


def test_keys_follow_structure(tmp_path):
    model, opt = make_model(), gt.optim.SGD(0.1, momentum=0.9)
    train(model, opt, 1)
    path = tmp_path / "k.npz"
    gt.save(path, {"model": model, "optimizer": opt})
    keys = set(gt.load(path))
    assert "var:model/layers/0/kernel" in keys
    assert "opt:optimizer:iterations" in keys
    assert "opt:optimizer:slot:momentum:model/layers/1/bias" in keys


def test_file_has_no_pickles_and_uses_the_exact_path(tmp_path):
    path = tmp_path / "no_suffix"
    gt.save(path, make_model())
    assert path.exists() and not (tmp_path / "no_suffix.npz").exists()
    with np.load(path, allow_pickle=False) as npz:  # every member loads without pickle
        for k in npz.files:
            assert npz[k].dtype != object


def test_save_creates_folders_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "a" / "b" / "c.npz"
    gt.save(path, make_model())
    assert os.listdir(path.parent) == ["c.npz"]


def test_variables_and_lists_in_dicts(tmp_path):
    v = gt.Variable(np.array([1.0, 2.0]), name="v")
    ws = [gt.Variable(np.zeros(2)), gt.Variable(np.ones(1))]
    path = tmp_path / "d.npz"
    gt.save(path, {"v": v, "ws": ws})
    v.assign([9.0, 9.0])
    ws[1].assign([5.0])
    gt.load(path, into={"v": v, "ws": ws})
    assert v.numpy().tolist() == [1.0, 2.0] and ws[1].numpy().tolist() == [1.0]


# -- bad files load nothing ----------------------------------------------------------------------


@pytest.fixture
def trained(tmp_path):
    model, opt = make_model(0), gt.optim.Adam(0.01)
    train(model, opt, 2)
    path = tmp_path / "good.npz"
    gt.save(path, {"model": model, "optimizer": opt})
    return path


def fresh():
    model, opt = make_model(7), gt.optim.Adam(0.01)
    return model, opt, snapshot(model)


def assert_untouched(model, opt, before):
    assert_same(snapshot(model), before)
    assert opt.iterations == 0 and opt.get_state()["slots"] == []


def test_truncated_file(trained, tmp_path):
    data = trained.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 30):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        model, opt, before = fresh()
        with pytest.raises(ValueError, match="truncated, corrupt"):
            gt.load(bad, into={"model": model, "optimizer": opt})
        assert_untouched(model, opt, before)


def test_corrupted_member(trained, tmp_path):
    data = bytearray(trained.read_bytes())
    data[200:260] = bytes(60)  # zero part of the first stored array
    bad = tmp_path / "corrupt.npz"
    bad.write_bytes(bytes(data))
    model, opt, before = fresh()
    with pytest.raises(ValueError):
        gt.load(bad, into={"model": model, "optimizer": opt})
    assert_untouched(model, opt, before)


def test_foreign_files(tmp_path):
    model, opt, before = fresh()
    other_npz = tmp_path / "other.npz"
    np.savez(other_npz, weights=np.ones(3))
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a checkpoint\n" * 20)
    npy = tmp_path / "array.npy"
    np.save(npy, np.ones(3))
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    for path, msg in [
        (other_npz, "not a gputape checkpoint"),
        (text, "not a readable gputape checkpoint"),
        (npy, "single .npy array"),
        (empty, "not a readable gputape checkpoint"),
    ]:
        with pytest.raises(ValueError, match=msg):
            gt.load(path, into={"model": model, "optimizer": opt})
        assert_untouched(model, opt, before)
    with pytest.raises(FileNotFoundError):
        gt.load(tmp_path / "missing.npz", into=model)


class _Boom:
    ran = False

    def __reduce__(self):
        return (_Boom._explode, ())

    @staticmethod
    def _explode():
        _Boom.ran = True
        return "exploded"


def test_a_pickled_payload_never_runs(tmp_path):
    path = tmp_path / "evil.npz"
    with zipfile.ZipFile(path, "w") as z:  # a valid marker plus an object array that would unpickle code
        with z.open("__gputape_checkpoint__.npy", "w") as f:
            np.lib.format.write_array(f, np.array("gputape-checkpoint/1"))
        with z.open("var:w.npy", "w") as f:
            np.lib.format.write_array(f, np.array([_Boom()], dtype=object), allow_pickle=True)
    pickle.dumps(_Boom())  # sanity: the payload is picklable
    w = gt.Variable(np.zeros(1))
    m = gt.Module()
    m.w = w
    with pytest.raises(ValueError):
        gt.load(path, into=m)
    assert not _Boom.ran
    assert w.numpy().tolist() == [0.0]


def test_shape_mismatch_names_the_variable_and_loads_nothing(tmp_path):
    small = make_model(0)
    path = tmp_path / "small.npz"
    gt.save(path, small)
    gt.random.seed(1)
    wide = gt.nn.Sequential([gt.nn.Dense(8, activation="relu"), gt.nn.Dense(5)])  # last layer differs
    wide.build((None, 4))
    before = snapshot(wide)
    with pytest.raises(ValueError, match=r"layers/1/kernel.*\(8, 3\).*\(8, 5\)") as err:
        gt.load(path, into=wide)
    assert "nothing was loaded" in str(err.value)
    assert_same(snapshot(wide), before)  # not even the first layer, which matched


def test_unbuilt_model_gets_a_hint_and_strict_false_allows_partial(trained):
    lazy = gt.nn.Sequential([gt.nn.Dense(8, activation="relu"), gt.nn.Dense(3)])
    with pytest.raises(ValueError, match="call it once on a sample batch"):
        gt.load(trained, into={"model": lazy, "optimizer": gt.optim.Adam()})
    model, _, _ = fresh()
    data = gt.load(trained, into={"model": model}, strict=False)  # the optimizer's entries are ignored
    assert_same(snapshot(model), [data[f"var:model/{p}"] for p, _ in model.named_variables()])


def test_missing_entries_are_reported(tmp_path):
    model = make_model()
    path = tmp_path / "m.npz"
    gt.save(path, model)
    bigger = gt.Module()
    bigger.model = model
    bigger.extra = gt.Variable(np.ones(2))
    with pytest.raises(ValueError, match="missing variable 'model/extra'"):
        gt.load(path, into={"model": bigger})


def test_optimizer_mismatch_loads_nothing(trained):
    model, _, before = fresh()
    sgd = gt.optim.SGD(0.1, momentum=0.9)
    with pytest.raises(ValueError, match="slots"):
        gt.load(trained, into={"model": model, "optimizer": sgd})
    assert_same(snapshot(model), before)
    assert sgd.iterations == 0


def test_dtype_that_cannot_be_stored(tmp_path):
    path = tmp_path / "f.npz"
    gt.save(path, {"v": gt.Variable(np.array([1.5]))})
    iv = gt.Variable(np.array([1], np.int64))
    with pytest.raises(ValueError, match="dtype float64"):
        gt.load(path, into={"v": iv})
    assert iv.numpy().tolist() == [1]


def test_save_errors(tmp_path):
    model, opt = make_model(), gt.optim.Adam()
    train(model, opt, 1)
    with pytest.raises(TypeError, match="optimizer alone"):
        gt.save(tmp_path / "x.npz", opt)
    with pytest.raises(ValueError, match="not among the saved variables"):
        gt.save(tmp_path / "x.npz", {"optimizer": opt})
    with pytest.raises(TypeError, match="cannot save"):
        gt.save(tmp_path / "x.npz", {"f": lambda: 0})
    with pytest.raises(TypeError, match="keys must be strings"):
        gt.save(tmp_path / "x.npz", {1: model})
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_cuda_variables_and_slots_round_trip_like_the_cpu_reference(tmp_path, suffix):
    cp = pytest.importorskip("cupy")
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    w0 = np.arange(6, dtype=np.float32).reshape(2, 3)

    def stepped(xp):
        m = gt.Module()
        m.w = gt.Variable(xp.asarray(w0))
        opt = gt.optim.SGD(0.1, momentum=0.9)
        opt.apply_gradients([(gt.constant(xp.ones((2, 3), xp.float32)), m.w)])
        return m, opt

    model, opt = stepped(cp)
    ref, ref_opt = stepped(np)  # the numpy reference: the same step on the CPU
    path = tmp_path / f"cuda{suffix}"
    gt.save(path, {"model": model, "opt": opt})
    twin = gt.Module()
    twin.w = gt.Variable(cp.zeros((2, 3), cp.float32))
    twin_opt = gt.optim.SGD(0.1, momentum=0.9)
    gt.load(path, into={"model": twin, "opt": twin_opt})
    assert twin.w.device == "cuda:0" and twin_opt.iterations == 1
    np.testing.assert_allclose(twin.w.numpy(), ref.w.numpy(), rtol=1e-6)
    ((var, slots),) = twin_opt.get_state()["slots"]
    assert var is twin.w
    np.testing.assert_allclose(slots["momentum"], ref_opt.get_state()["slots"][0][1]["momentum"], rtol=1e-6)
