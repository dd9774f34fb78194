"""gt.load against hostile and broken files: bounded reads, path errors, dtype policy, all-or-nothing across objects.

Each test reproduces one defect measured in issue 11; its name says which.
"""

import io
import os
import struct
import threading
import time
import tracemalloc
import warnings
import zlib

import numpy as np
import pytest
from checkpoint_helpers import assert_same, make_model, snapshot
from numpy.testing import assert_array_equal

import gputape as gt
from gputape.checkpoint import read as _checkpoint_read
from gputape.core.tape import GputapeWarning

MARKER_KEY, FORMAT = "__gputape_checkpoint__", "gputape-checkpoint/1"


# -- hand-built archives ---------------------------------------------------------------------------


def npy_header(shape, descr="<f8"):
    """The bytes of a version 1.0 .npy header, as numpy writes it before an array's data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


def npy_bytes(a):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(a))
    return buf.getvalue()


def stored(name, raw):
    """A zip member stored as is: (name, raw bytes, method, crc, inflated size)."""
    return (name, raw, 0, zlib.crc32(raw), len(raw))


def write_zip(path, members, cd_offset_shift=0):
    """Write a zip of ``(name, raw, method, crc, file_size)`` members exactly as given (no zip64: sizes < 4 GiB)."""
    out, central = bytearray(), bytearray()
    for name, raw, method, crc, size in members:
        n = name.encode()
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(raw), size, len(n), 0) + n + raw
        central += (
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                0,
                method,
                0,
                0,
                crc,
                len(raw),
                size,
                len(n),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + n
        )
    cd_offset = len(out) + cd_offset_shift
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), cd_offset, 0)
    path.write_bytes(bytes(out) + bytes(central) + eocd)


def marker_member(value=FORMAT):
    return stored(MARKER_KEY + ".npy", npy_bytes(np.array(value)))


def deflated_zeros(prefix, n_zeros):
    """Raw deflate of ``prefix + bytes(n_zeros)`` and its CRC, never holding the zeros: after a full flush
    the compressor starts afresh, so every MiB of zeros compresses to the same ~1 kB."""
    chunk = 1 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(n_zeros, chunk)
    tail = c.compress(bytes(rest)) + c.flush(zlib.Z_FINISH)
    crc, zeros = zlib.crc32(prefix), bytes(chunk)
    for _ in range(whole):
        crc = zlib.crc32(zeros, crc)
    return head + block * whole + tail, zlib.crc32(bytes(rest), crc)


KERNEL = "var:model/layers/0/kernel"


@pytest.fixture(scope="module")
def zip_bomb(tmp_path_factory):
    """The issue's bomb: a gputape-looking .npz (~4 MB) whose one float64 member inflates to ~4 GiB."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    count = ((1 << 32) - 4096) // 8
    header = npy_header((count,))
    raw, crc = deflated_zeros(header, count * 8)
    write_zip(path, [marker_member(), (KERNEL + ".npy", raw, 8, crc, len(header) + count * 8)])
    assert path.stat().st_size < 8 << 20
    return path


def measured(fn):
    """Run ``fn`` (which must raise ValueError); return (the error, seconds, peak bytes traced)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ValueError) as err:
            fn()
        return err.value, time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- nothing unbounded is read -----------------------------------------------------------------------


@pytest.mark.parametrize("into", ["model", None])
def test_zip_bomb_is_refused_in_under_a_second_and_100_MB(zip_bomb, into):
    model = make_model()
    before = snapshot(model)
    err, seconds, peak = measured(lambda: gt.load(zip_bomb, into={"model": model} if into else None))
    assert KERNEL in str(err) and "nothing was loaded" in str(err)
    assert seconds < 1.0, f"took {seconds:.2f} s"
    assert peak < 100 << 20, f"peak {peak / 2**20:.0f} MiB"
    assert_same(snapshot(model), before)


def test_member_that_inflates_past_its_header_is_refused_before_inflating(tmp_path):
    """The header declares the kernel's own (4, 8) float32, the zip directory ~4 GiB: refused at once."""
    model = make_model()
    header = npy_header((4, 8), "<f4")
    raw, crc = deflated_zeros(header, (1 << 32) - 4096 - len(header))
    path = tmp_path / "lying.npz"
    write_zip(path, [marker_member(), (KERNEL + ".npy", raw, 8, crc, (1 << 32) - 4096)])
    err, seconds, peak = measured(lambda: gt.load(path, into={"model": model}, strict=False))
    assert KERNEL in str(err) and "inflates to" in str(err)
    assert seconds < 1.0 and peak < 100 << 20


def test_a_stream_longer_than_declared_is_cut_at_the_declared_size(tmp_path):
    """zip directory and header agree on the kernel's size; the deflate stream goes on for 1 GiB more. The
    reader stops at the declared size (and checks the CRC of what it read), so it loads, in bounded memory."""
    model = make_model()
    kernel = np.arange(32, dtype=np.float32).reshape(4, 8)
    member = npy_bytes(kernel)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = c.compress(member) + c.flush(zlib.Z_FULL_FLUSH)
    more, _ = deflated_zeros(b"", 1 << 30)
    path = tmp_path / "long.npz"
    write_zip(path, [marker_member(), (KERNEL + ".npy", raw + more, 8, zlib.crc32(member), len(member))])
    tracemalloc.start()
    try:
        gt.load(path, into={"model": model}, strict=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_array_equal(model.layers[0].kernel.numpy(), kernel)
    assert peak < 100 << 20


@pytest.mark.parametrize("into", [True, False])
def test_header_declaring_1e12_elements_is_a_value_error_naming_the_entry(tmp_path, into):
    path = tmp_path / "huge.npz"
    header = npy_header((10**12,))
    write_zip(path, [marker_member(), stored("var:w.npy", header)])
    w = gt.Variable(np.zeros(3))
    with pytest.raises(ValueError, match="'var:w'") as err:  # never numpy's _ArrayMemoryError
        gt.load(path, into={"w": w} if into else None)
    assert not isinstance(err.value, MemoryError)
    assert w.numpy().tolist() == [0.0, 0.0, 0.0]


def test_untargeted_entries_are_capped_in_total(tmp_path, monkeypatch):
    """``array:`` entries (and everything when into is None) have no target to bound them: their declared
    sizes may add up to max(64 MiB, the file's size). Stored members of a real file always fit."""
    path = tmp_path / "meta.npz"
    gt.save(path, {"a": np.zeros(1000), "b": np.zeros(1000)})
    assert sorted(gt.load(path)) == ["array:a", "array:b"]
    monkeypatch.setattr(gt.checkpoint, "_UNBOUNDED_FLOOR", 1000)  # below the file's size: still loads
    assert sorted(gt.load(path)) == ["array:a", "array:b"]
    header = npy_header((200_000,))  # 1.6 MB of zeros in a few kB: over max(floor, file size)
    raw, crc = deflated_zeros(header, 1_600_000)
    bomb = tmp_path / "small_bomb.npz"
    write_zip(bomb, [marker_member(), ("array:x.npy", raw, 8, crc, len(header) + 1_600_000)])
    with pytest.raises(ValueError, match=r"nothing in `into` bounds.*'array:x'"):
        gt.load(bomb)


@pytest.mark.parametrize(
    "descr, why",
    [("|O", "object"), ([("a", "<f4"), ("b", "<i4")], "structured"), ("<U8", "string"), ("<M8[s]", "datetime")],
)
def test_object_structured_and_string_dtypes_are_refused_from_the_header(tmp_path, descr, why):
    path = tmp_path / f"{why}.npz"
    write_zip(path, [marker_member(), stored("var:w.npy", npy_header((2,), descr) + b"\0" * 64)])
    w = gt.Variable(np.zeros(2))
    with pytest.raises(ValueError, match="'var:w'"):
        gt.load(path, into={"w": w})
    assert w.numpy().tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "members, msg",
    [
        (
            [marker_member(), stored("var:w.npy", npy_bytes(np.ones(2))), stored("var:w.npy", npy_bytes(np.ones(2)))],
            "appears twice",
        ),
        ([marker_member(), stored("var:w", npy_bytes(np.ones(2)))], "not an .npy array"),
        ([marker_member(), stored("var:w.npy", npy_bytes(np.ones(2)))[:2] + (12, 0, 144)], "compression method 12"),
        ([marker_member(), stored("var:w.npy", npy_bytes(np.ones(2))[:-3])], "inflates to"),
        ([marker_member(), stored("var:w.npy", b"\x93NUMPY\x03\x00" + npy_header((2,))[8:])], "version"),
        ([marker_member(np.array(["x"] * 1000))], "format marker"),
    ],
    ids=["duplicate", "not-npy", "bzip2", "short", "npy-v3", "huge-marker"],
)
def test_malformed_archives_are_content_errors(tmp_path, members, msg):
    path = tmp_path / "bad.npz"
    write_zip(path, members)
    with pytest.raises(ValueError, match=msg):
        gt.load(path, into={"w": gt.Variable(np.zeros(2))})


def test_a_directory_pointing_before_the_file_is_a_content_error_not_an_oserror(tmp_path):
    path = tmp_path / "neg.npz"
    write_zip(path, [marker_member(), stored("var:w.npy", npy_bytes(np.ones(2)))], cd_offset_shift=200)
    with pytest.raises(ValueError, match="not a readable gputape checkpoint") as err:
        gt.load(path)
    assert not isinstance(err.value, OSError)


# -- path errors pass through; non-regular files are refused at once -----------------------------------


def _finishes(fn, seconds=5.0):
    """Run ``fn`` in a thread; return its exception (or None), failing if it is still blocked after ``seconds``."""
    box = {}

    def target():
        try:
            fn()
            box["exc"] = None
        except BaseException as exc:
            box["exc"] = exc

    t = threading.Thread(target=target, daemon=True)  # a daemon, so a regression hangs only this thread
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds} s"
    return box["exc"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo (POSIX)")
def test_a_fifo_raises_at_once_instead_of_blocking(tmp_path):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    exc = _finishes(lambda: gt.load(fifo, into={"w": gt.Variable(np.zeros(2))}))
    assert time.perf_counter() - t0 < 1.0
    assert isinstance(exc, ValueError) and "FIFO" in str(exc) and "regular file" in str(exc)
    exc = _finishes(lambda: gt.save(fifo, {"w": gt.Variable(np.zeros(2))}))  # save refuses it too
    assert isinstance(exc, ValueError) and "FIFO" in str(exc)
    assert os.path.exists(fifo) and not os.path.isfile(fifo)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_refused_at_once():
    exc = _finishes(lambda: gt.load("/dev/zero"))
    assert isinstance(exc, ValueError) and "character device" in str(exc)


def test_unreadable_paths_raise_their_own_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        gt.load(tmp_path / "missing.npz")
    with pytest.raises(IsADirectoryError):
        gt.load(tmp_path)
    with pytest.raises(NotADirectoryError):
        (tmp_path / "file").write_bytes(b"x")
        gt.load(tmp_path / "file" / "inner.npz")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_permission_error_passes_through(tmp_path):
    path = tmp_path / "locked.npz"
    gt.save(path, {"w": gt.Variable(np.zeros(2))})
    path.chmod(0)
    try:
        with pytest.raises(PermissionError):
            gt.load(path)
    finally:
        path.chmod(0o644)


class _FailingFile(io.FileIO):
    """A file whose reads fail with ``exc``, at once or once ``armed`` (a flaky network share)."""

    def __init__(self, path, exc, armed):
        super().__init__(path, "rb")
        self.exc, self.armed = exc, armed

    def read(self, n=-1):
        if self.armed:
            raise self.exc
        return super().read(n)

    def readinto(self, b):
        if self.armed:
            raise self.exc
        return super().readinto(b)


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
@pytest.mark.parametrize("where", ["directory", "data"])
def test_an_oserror_while_reading_is_not_reported_as_a_corrupt_file(tmp_path, monkeypatch, suffix, where):
    """A TimeoutError (or EIO) from the file is raised as itself: in the directory, where zipfile would
    turn it into BadZipFile, and in the data, after every header was fine."""
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    model = make_model()
    path = tmp_path / f"m{suffix}"
    gt.save(path, model)
    files = []

    def failing_open(p):
        failing_open.__wrapped__(p).close()  # the real checks still run
        files.append(_FailingFile(p, TimeoutError("timed out"), armed=where == "directory"))
        return files[-1]

    def arming_read(self, key):
        files[-1].armed = True
        return real_read(self, key)

    real_read = _checkpoint_read.Archive.read
    failing_open.__wrapped__ = _checkpoint_read.open_regular
    monkeypatch.setattr(_checkpoint_read, "open_regular", failing_open)
    monkeypatch.setattr(_checkpoint_read.Archive, "read", arming_read)
    twin = make_model(3)
    before = snapshot(twin)
    with pytest.raises(TimeoutError, match="timed out"):
        gt.load(path, into=twin)
    assert_same(snapshot(twin), before)


# -- dtype policy ------------------------------------------------------------------------------------


def checkpoint_with(tmp_path, value, key="var:v"):
    path = tmp_path / "v.npz"
    np.savez(path, **{MARKER_KEY: np.array(FORMAT), key: value})
    return path


SILENT = [
    ("float16", "float32"),
    ("float16", "float64"),
    ("float32", "float64"),
    ("int8", "int32"),
    ("int16", "int64"),
    ("uint8", "int16"),
    ("int16", "float32"),
    ("int32", "float64"),
    ("bool", "float32"),
    ("bool", "int32"),
    ("complex64", "complex128"),
    ("float32", "complex64"),
    (">f4", "float32"),
]
NEEDS_CAST = [
    ("float64", "float32"),
    ("int64", "float32"),
    ("uint64", "float32"),
    ("int64", "float64"),
    ("uint64", "int64"),
    ("float32", "int32"),
    ("int32", "int16"),
    ("float32", "float16"),
    ("int32", "bool"),
    ("float32", "bool"),
]


@pytest.mark.parametrize("src, dst", SILENT)
def test_value_preserving_casts_are_silent(tmp_path, src, dst):
    values = (np.arange(6) % 3).astype(src)
    v = gt.Variable(np.zeros(6, dst))
    gt.load(checkpoint_with(tmp_path, values), into={"v": v})
    assert v.dtype == np.dtype(dst)
    assert_array_equal(v.numpy(), values.astype(dst))


@pytest.mark.parametrize("src, dst", NEEDS_CAST)
def test_value_changing_casts_raise_unless_cast_true(tmp_path, src, dst):
    base = np.array([1.5, 3.0, 0.0, 2.0**40 + 1]) if np.dtype(src).kind == "f" else np.array([1, 3, 0, 2**40 + 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        values = base.astype(src)
    v = gt.Variable(np.zeros(values.shape, dst))
    path = checkpoint_with(tmp_path, values)
    with pytest.raises(ValueError, match=rf"'v'.*dtype {np.dtype(src)}.*{np.dtype(dst)}.*cast=True"):
        gt.load(path, into={"v": v})
    assert not v.numpy().any()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's own overflow warning of astype
        warnings.simplefilter("ignore", GputapeWarning)  # 1e300 -> float32 is inf
        expected = values.astype(dst)
        gt.load(path, into={"v": v}, cast=True)
    assert_array_equal(v.numpy(), expected)


@pytest.mark.parametrize("cast", [False, True])
def test_complex_into_real_is_refused_even_with_cast(tmp_path, cast):
    v = gt.Variable(np.zeros(2, np.float64))
    with pytest.raises(ValueError, match="imaginary part"):
        gt.load(checkpoint_with(tmp_path, np.array([1 + 2j, 3j])), into={"v": v}, cast=cast)
    assert v.numpy().tolist() == [0.0, 0.0]


def test_float64_1e300_into_float32_is_refused_not_silently_inf(tmp_path):
    v = gt.Variable(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"float64.*float32"):
        gt.load(checkpoint_with(tmp_path, np.array([1e300, 1.0])), into={"v": v})
    assert v.numpy().tolist() == [0.0, 0.0]


def test_non_finite_values_load_with_one_warning_naming_the_entries(tmp_path):
    model, opt = make_model(), gt.optim.SGD(0.1, momentum=0.9)
    model.layers[0].kernel.assign(np.full((4, 8), np.nan, np.float32))
    model.layers[1].bias.assign(np.array([np.inf, 0, -np.inf], np.float32))
    opt.build(model.variables)
    path = tmp_path / "nan.npz"
    gt.save(path, {"model": model, "optimizer": opt, "loss": np.float64(np.nan)})
    twin = make_model(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gt.load(path, into={"model": twin, "optimizer": gt.optim.SGD(0.1, momentum=0.9)})
    ours = [w for w in caught if issubclass(w.category, GputapeWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    msg = str(ours[0].message)
    assert "'var:model/layers/0/kernel'" in msg and "'var:model/layers/1/bias'" in msg and "2 entries" in msg
    assert "array:loss" not in msg  # metadata is the user's business, not model state
    assert np.isnan(twin.layers[0].kernel.numpy()).all()  # loaded, as TensorFlow does
    with pytest.warns(GputapeWarning, match="NaN or infinite"):  # the project's filter makes it an error otherwise
        gt.load(path)


# -- optimizer iterations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [np.uint64(2**64 - 1), np.int64(-1), np.float64(3.0), np.array([3])], ids=["2**64-1", "-1", "float", "1-d"]
)
def test_invalid_iterations_are_refused_at_load(tmp_path, value):
    model, opt = make_model(), gt.optim.SGD(0.1)
    path = tmp_path / "it.npz"
    gt.save(path, {"model": model, "opt": opt})
    with np.load(path) as z:
        arrays = dict(z)
    arrays["opt:opt:iterations"] = value
    np.savez(path, **arrays)
    twin, twin_opt = make_model(1), gt.optim.SGD(0.1)
    before = snapshot(twin)
    with pytest.raises(ValueError, match="optimizer 'opt' iterations"):
        gt.load(path, into={"model": twin, "opt": twin_opt})
    assert twin_opt.iterations == 0
    assert_same(snapshot(twin), before)


def test_largest_iterations_round_trip_and_save_refuses_what_int64_cannot_hold(tmp_path):
    model, opt = make_model(), gt.optim.SGD(0.1)
    opt.iterations = 2**63 - 1
    gt.save(tmp_path / "max.npz", {"model": model, "opt": opt})
    other = gt.optim.SGD(0.1)
    gt.load(tmp_path / "max.npz", into={"model": model, "opt": other})
    assert other.iterations == 2**63 - 1
    with pytest.raises(ValueError, match=r"iterations must be an integer in \[0, 2\*\*63\)"):
        opt.iterations = 2**64 - 1  # optimizer.iterations is an int64 Variable: refused at once
    assert int(opt.iterations) == 2**63 - 1

    class Counting(gt.optim.SGD):  # an optimizer whose own state reports a count int64 cannot hold
        def get_state(self):
            return {**super().get_state(), "iterations": 2**64 - 1}

    with pytest.raises(ValueError, match=r"optimizer 'opt' has iterations=18446744073709551615"):
        gt.save(tmp_path / "over.npz", {"model": model, "opt": Counting(0.1)})
    assert not (tmp_path / "over.npz").exists()


# -- all objects of one call are checked before anything is assigned ------------------------------------


def _two_optimizers(tmp_path, corrupt):
    model, o1, o2 = make_model(), gt.optim.SGD(0.1, momentum=0.9), gt.optim.SGD(0.1, momentum=0.9)
    for o in (o1, o2):
        o.build(model.variables)
        o.iterations = 7
    path = tmp_path / "two.npz"
    gt.save(path, {"model": model, "opt1": o1, "opt2": o2})
    with np.load(path) as z:
        arrays = dict(z)
    corrupt(arrays)
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda a: a.__setitem__("opt:opt2:iterations", np.array(-1)),
        lambda a: a.__setitem__("opt:opt2:slot:momentum:model/layers/1/bias", np.zeros(4, np.float32)),
        lambda a: a.__setitem__("opt:opt2:slot:momentum:model/layers/1/bias", np.zeros(3, np.float64)),
        lambda a: a.__setitem__("opt:opt2:iterations", np.array(2**64 - 1, np.uint64)),
    ],
    ids=["negative-iterations", "slot-shape", "slot-dtype", "iterations-overflow"],
)
def test_an_invalid_second_optimizer_changes_nothing(tmp_path, corrupt):
    path = _two_optimizers(tmp_path, corrupt)
    model, q1, q2 = make_model(5), gt.optim.SGD(0.1, momentum=0.9), gt.optim.SGD(0.1, momentum=0.9)
    before = snapshot(model)
    with pytest.raises(ValueError, match="opt2"):
        gt.load(path, into={"model": model, "opt1": q1, "opt2": q2})
    for q in (q1, q2):
        assert q.iterations == 0 and q.get_state()["slots"] == []
    assert_same(snapshot(model), before)


def test_the_valid_two_optimizer_file_loads_both(tmp_path):
    path = _two_optimizers(tmp_path, lambda a: None)
    model, q1, q2 = make_model(5), gt.optim.SGD(0.1, momentum=0.9), gt.optim.SGD(0.1, momentum=0.9)
    gt.load(path, into={"model": model, "opt1": q1, "opt2": q2})
    assert q1.iterations == q2.iterations == 7
    assert len(q1.get_state()["slots"]) == len(q2.get_state()["slots"]) == 4
    assert_same(snapshot(model), snapshot(make_model(0)))


def test_colliding_paths_in_into_are_refused(tmp_path):
    m1, m2 = gt.Module(), gt.Module()
    m1.w, m2.w = gt.Variable([1.0]), gt.Variable([2.0])
    gt.save(tmp_path / "ok.npz", {"a": {"b": m1}})
    with pytest.raises(ValueError, match=r"obj\['a/b'\].*obj\['a'\]\['b'\].*'var:a/b/w'"):
        gt.load(tmp_path / "ok.npz", into={"a/b": m1, "a": {"b": m2}})
    assert m2.w.numpy().tolist() == [2.0]
