"""The writing side of ``gt.save``: atomic, durable replacement of the target, and cleanup of killed saves' temps."""

from __future__ import annotations

import os
import re
import secrets
import socket
import stat
import time
import zipfile
import zlib
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from .read import CHECKSUM_PREFIX, SAFETENSORS_DTYPES, refuse_irregular, tensor_checksum

__all__ = ["STALE_AFTER_S", "atomic_write", "npz_write", "remove_stale_temps", "safetensors_bytes", "temp_prefix"]

# A temp file is stale once its writer is dead (same machine and pid namespace: os.kill(pid, 0)
# says so at once), or, for a writer we cannot ask (another machine on a shared folder, a
# reused pid), once it has not been written to for a day.
STALE_AFTER_S = 24 * 3600
_TEMP = re.compile(r"\.gputape-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{8}\.tmp\Z")
# What gputape 0.1 named its temp files (tempfile.mkstemp, one per folder, not per target).
_LEGACY_TEMP = re.compile(r"\.gputape-[a-z0-9_]{8}\.tmp\Z")
_NAME_PART = 120  # of the target's name in its temp name: keeps it under NAME_MAX (255)


def _host_token() -> str:
    """This machine and pid namespace, so that a pid is only ever judged where it means something."""
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        ns = ""
    return f"{zlib.crc32((socket.gethostname() + ns).encode()):08x}"


_HOST = _host_token()


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def temp_prefix(target: str) -> str:
    """The start of every temp file name of a save to ``target`` (in the target's folder)."""
    return f".{os.path.basename(target)[:_NAME_PART]}"


def remove_stale_temps(target: str) -> list[str]:
    """Remove temps of earlier saves to ``target`` whose writer is dead or a day quiet; return what was removed."""
    folder = os.path.dirname(target)
    prefix, now, removed = temp_prefix(target), time.time(), []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = _TEMP.match(name, len(prefix)) if name.startswith(prefix) else None
        legacy = _LEGACY_TEMP.match(name)
        if m is None and legacy is None:
            continue
        full = os.path.join(folder, name)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        dead = m is not None and m["host"] == _HOST and not _pid_alive(int(m["pid"]))
        if dead or now - st.st_mtime > STALE_AFTER_S:
            try:
                os.remove(full)
                removed.append(full)
            except FileNotFoundError:  # another save cleaned it first
                pass
    return removed


def _fsync_folder(folder: str) -> None:
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a directory; the rename has happened regardless
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, write: Callable[[BinaryIO], object]) -> str:
    """Write ``path`` all at once: a temp file beside it, fsync, rename over it, fsync the folder.

    A symlinked ``path`` is followed (its target is written, the link stays). The
    new file gets the old one's permission bits, or ``0o666 & ~umask`` like
    ``open()`` when there is none. Temp files of earlier, killed saves to the same
    target are removed first. Returns the path written.
    """
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    if old is not None:
        refuse_irregular(target, old.st_mode, "gt.save")
    remove_stale_temps(target)
    tmp = os.path.join(folder, f"{temp_prefix(target)}.gputape-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o666)  # the kernel applies the umask, exactly as for open()
    try:
        with os.fdopen(fd, "wb") as f:
            if old is not None and hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_folder(folder)
    return target


def safetensors_bytes(path: str, arrays: dict[str, np.ndarray], metadata: dict[str, str]) -> bytes:
    """``arrays`` as a safetensors file, serialized by the safetensors package (the optional extra)."""
    try:
        from safetensors.numpy import save as serialize
    except ImportError:
        raise ImportError(
            f"gt.save: {path!r} ends in .safetensors, which needs the optional safetensors package: "
            'pip install "gputape[safetensors]" (or save to a .npz path)'
        ) from None
    name_of = {np.dtype(d): name for name, d in SAFETENSORS_DTYPES.items()}
    tensors, sums = {}, {}
    for key, a in arrays.items():
        little = a.dtype.newbyteorder("<")  # the format is little-endian; a no-op for bool and 1-byte types
        if little not in name_of:
            raise TypeError(
                f"gt.save: entry {key!r} has dtype {a.dtype}, which safetensors cannot hold "
                f"(it has {', '.join(SAFETENSORS_DTYPES)}); cast it or save to a .npz path"
            )
        a = np.asarray(a, dtype=little)
        a = a if a.flags.c_contiguous else a.copy(order="C")
        tensors[key] = a
        # of exactly the bytes the file will hold, so load can tell a flipped byte from the data saved
        sums[CHECKSUM_PREFIX + key] = tensor_checksum(name_of[little], a.shape, a)
    return serialize(tensors, metadata={**metadata, **sums})


def npz_write(f: BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as an ``.npz`` archive, as ``np.savez`` writes it (stored members, no pickles).

    Not ``np.savez(f, **arrays)`` itself: a key named ``file`` or ``allow_pickle`` would
    land on its parameters (the second silently), and ``names=`` lets a user choose keys.
    """
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, a in arrays.items():
            with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(a), allow_pickle=False)
