"""gt.save: path collisions, atomic and durable writes, umask, symlinks, and the temp files of killed saves."""

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import gputape as gt
from gputape.checkpoint import write as _checkpoint_write

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file semantics (umask, symlinks, signals)")


def small_model(value=1.0):
    m = gt.Module()
    m.w = gt.Variable(np.full(3, value, np.float32))
    return m


def temps(folder):
    return sorted(n for n in os.listdir(folder) if n.endswith(".tmp"))


# -- collisions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj, first, second",
    [
        (lambda m1, m2: {"a/b": m1, "a": {"b": m2}}, r"obj\['a/b'\]", r"obj\['a'\]\['b'\]"),
        (lambda m1, m2: {"x": [m1], "x/0": m2}, r"obj\['x'\]\[0\]", r"obj\['x/0'\]"),
        (lambda m1, m2: {"a/w": m1.w, "a": m2}, r"obj\['a/w'\]", r"obj\['a'\] \(its variable 'w'\)"),
        (lambda m1, m2: {"e/1": 3, "e": {"1": 4}}, r"obj\['e/1'\]", r"obj\['e'\]\['1'\]"),
    ],
    ids=["nested-dict", "list-index", "variable-vs-module", "plain-values"],
)
def test_path_collisions_are_refused_naming_both(tmp_path, obj, first, second):
    path = tmp_path / "c.npz"
    with pytest.raises(ValueError, match=rf"gt.save: {first} .*and {second} .*both map to the entry"):
        gt.save(path, obj(small_model(1.0), small_model(2.0)))
    assert not path.exists() and temps(tmp_path) == []


def test_distinct_paths_with_slashes_still_save(tmp_path):
    gt.save(tmp_path / "ok.npz", {"a/b": small_model(1.0), "a": {"c": small_model(2.0)}})
    assert sorted(gt.load(tmp_path / "ok.npz")) == ["var:a/b/w", "var:a/c/w"]


# -- atomic, durable ------------------------------------------------------------------------------------


def test_file_and_folder_are_fsynced_before_and_after_the_rename(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: (calls.append(("fsync", stat.S_IFMT(os.fstat(fd).st_mode))), real_fsync(fd))[1]
    )
    monkeypatch.setattr(
        os, "replace", lambda a, b: (calls.append(("replace", os.path.basename(b))), real_replace(a, b))[1]
    )
    gt.save(tmp_path / "d.npz", small_model())
    expected = [("fsync", stat.S_IFREG), ("replace", "d.npz")]
    if os.name == "posix":
        expected.append(("fsync", stat.S_IFDIR))
    assert calls == expected


def test_a_failing_save_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    gt.save(path, small_model(1.0))
    old = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", broken)  # what writes each .npz member
    with pytest.raises(OSError, match="No space left"):
        gt.save(path, small_model(2.0))
    assert path.read_bytes() == old and temps(tmp_path) == []


@posix_only
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_files_honour_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        gt.save(tmp_path / "u.npz", small_model())
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "u.npz").stat().st_mode) == 0o666 & ~umask


@posix_only
def test_an_existing_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "private.npz"
    gt.save(path, small_model(1.0))
    path.chmod(0o600)
    gt.save(path, small_model(2.0))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert gt.load(path)["var:w"].tolist() == [2.0] * 3


@posix_only
@pytest.mark.parametrize("relative", [False, True])
def test_a_symlinked_path_writes_its_target_and_stays_a_link(tmp_path, relative):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "ckpt.npz"
    gt.save(target, small_model(1.0))
    link = tmp_path / "latest.npz"
    link.symlink_to(os.path.join("real", "ckpt.npz") if relative else target)
    gt.save(link, small_model(2.0))
    assert link.is_symlink()
    assert gt.load(target)["var:w"].tolist() == [2.0] * 3
    assert temps(tmp_path) == [] and temps(tmp_path / "real") == []


@posix_only
def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.npz"
    link.symlink_to(tmp_path / "sub" / "new.npz")
    gt.save(link, small_model())
    assert link.is_symlink() and (tmp_path / "sub" / "new.npz").is_file()


def test_a_directory_in_the_way_is_an_oserror(tmp_path):
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(IsADirectoryError):
        gt.save(tmp_path / "d.npz", small_model())
    assert temps(tmp_path) == []


# -- stale temp files ------------------------------------------------------------------------------------


def _temp_name(target, host, pid, rand="0123abcd"):
    return f"{_checkpoint_write.temp_prefix(str(target))}.gputape-{host}-{pid}-{rand}.tmp"


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: a zombie would still answer os.kill(pid, 0)
    return proc.pid


@posix_only
def test_stale_temps_are_removed_and_live_ones_kept(tmp_path):
    target = tmp_path / "m.npz"
    here, elsewhere = _checkpoint_write._HOST, "00000000" if _checkpoint_write._HOST != "00000000" else "11111111"
    day_ago = time.time() - _checkpoint_write.STALE_AFTER_S - 60
    files = {
        "dead writer here": (_temp_name(target, here, _dead_pid()), None, False),
        "live writer here": (_temp_name(target, here, os.getpid()), None, True),
        "live writer here, old and quiet": (_temp_name(target, here, os.getppid()), day_ago, False),
        "writer elsewhere, recent": (_temp_name(target, elsewhere, 1), None, True),
        "writer elsewhere, a day quiet": (_temp_name(target, elsewhere, 1, "4567cdef"), day_ago, False),
        "legacy mkstemp temp, a day old": (".gputape-ab12cd34.tmp", day_ago, False),
        "legacy mkstemp temp, recent": (".gputape-ab12cd35.tmp", None, True),
        "another target's temp": (_temp_name(tmp_path / "other.npz", here, _dead_pid()), None, True),
    }
    for name, mtime, _ in files.values():
        (tmp_path / name).write_bytes(b"partial")
        if mtime is not None:
            os.utime(tmp_path / name, (mtime, mtime))
    gt.save(target, small_model())
    left = set(os.listdir(tmp_path))
    for why, (name, _, kept) in files.items():
        assert (name in left) == kept, why


_CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np, numpy.lib.format as fmt
    import gputape as gt

    real = fmt.write_array

    def write_then_stall(fp, array, *args, **kwargs):  # np.savez writes one member per call
        real(fp, array, *args, **kwargs)
        if array.size == 1_000_000:  # the 4 MB array is in the temp file, what follows it is not
            print("stalled", flush=True)
            time.sleep(120)

    fmt.write_array = write_then_stall
    m = gt.Module(); m.w = gt.Variable(np.full(1_000_000, 7.0, np.float32)); m.b = gt.Variable(np.ones(2))
    gt.save(sys.argv[1], m)
    """
)


@posix_only
def test_a_killed_save_leaves_the_old_file_and_the_next_save_cleans_its_temp(tmp_path):
    path = tmp_path / "ckpt.npz"
    gt.save(path, small_model(1.0))
    old = path.read_bytes()
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "stalled"
        (tmp,) = temps(tmp_path)
        assert f"-{child.pid}-" in tmp and (tmp_path / tmp).stat().st_size > 4_000_000  # mid-write
        gt.save(path, small_model(2.0))  # a concurrent save: the live writer's temp is left alone
        assert temps(tmp_path) == [tmp]
        gt.save(path, small_model(1.0))
        old = path.read_bytes()
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert path.read_bytes() == old  # the kill changed nothing
    assert_array_equal(gt.load(path)["var:w"], np.ones(3, np.float32))
    assert temps(tmp_path) == [tmp]  # the killed writer's temp is still there ...
    gt.save(path, small_model(3.0))
    assert temps(tmp_path) == []  # ... until the next save to the same path
    assert gt.load(path)["var:w"].tolist() == [3.0] * 3
