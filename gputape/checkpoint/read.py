"""The reading side of ``gt.load``: bounded readers for ``.npz`` and ``.safetensors``.

Reading happens in two phases so that nothing unbounded is ever read: opening an
archive parses only its directory and each entry's header (dtype, shape, byte
size); the caller checks those against what it expects, and only then asks for
an entry's data, which is read through a bounded reader into an array of the
declared size. A member cannot inflate past its declared size (zip bombs), a
header cannot declare more than the file holds, object and structured dtypes
are refused outright, and every content problem is a :class:`CheckpointContentError`
(a ``ValueError``), while a failure to read the path itself (an ``OSError``)
passes through untouched.

A safetensors file written by gputape carries a checksum per tensor in its
``__metadata__`` (see :func:`tensor_checksum`); when a file has them, every tensor
must have one and match it, so a flipped data byte is a :class:`CheckpointCorruptError`
instead of a silently different weight. Files without them (written by PyTorch, the
safetensors package, gputape before checksums) load with the format's own checks.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

__all__ = [
    "CHECKSUM_PREFIX",
    "Archive",
    "CheckpointContentError",
    "CheckpointCorruptError",
    "Entry",
    "is_safetensors",
    "open_archive",
    "refuse_irregular",
    "tensor_checksum",
]

# How many bytes one read() asks for: big enough to be fast, small enough that a
# bounded read never holds much beyond the array it fills.
_CHUNK = 4 << 20
# safetensors' own reader refuses headers over 100 MB; a gputape checkpoint's header
# is ~100 bytes per entry, so 8 MiB (~80k entries) is generous and keeps a hostile
# header's JSON parse well under 100 MB of memory.
SAFETENSORS_HEADER_CAP = 8 << 20
# numpy's arrays have at most 64 dimensions.
_MAX_NDIM = 64
_ARRAY_KINDS = "biufc"  # bool, int, uint, float, complex: everything gt.save writes

# safetensors dtype names -> numpy (the format is little-endian throughout). bfloat16 and
# the float8/float4 types have no numpy dtype and are refused with a clear error.
SAFETENSORS_DTYPES = {
    "BOOL": "bool",
    "U8": "<u1",
    "I8": "<i1",
    "U16": "<u2",
    "I16": "<i2",
    "U32": "<u4",
    "I32": "<i4",
    "U64": "<u8",
    "I64": "<i8",
    "F16": "<f2",
    "F32": "<f4",
    "F64": "<f8",
    "C64": "<c8",
}


# The safetensors __metadata__ key of a tensor's checksum is this prefix + the tensor's key; its value
# is tensor_checksum()'s hex digest. One flat string entry per tensor, because the format's metadata
# is a map of strings, and so that safetensors.safe_open(...).metadata() shows them as they are.
CHECKSUM_PREFIX = "gputape.sha256."
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


class CheckpointContentError(ValueError):
    """The file could be read, but its content is not a well-formed archive (truncated, corrupt, hostile)."""


class CheckpointCorruptError(CheckpointContentError):
    """The file is well formed, but its bytes do not match the checksums gputape wrote into it."""


def tensor_checksum(dtype: str, shape: Any, data: Any) -> str:
    """The sha256 hex digest gputape keeps per safetensors tensor: of ``"<dtype> <shape>\\n"``, then the raw bytes.

    ``dtype`` is the format's name (``"F32"``), ``shape`` is written as compact JSON,
    as in the file's header, and ``data`` is the tensor's bytes as stored (little-endian,
    C order). The dtype and shape are hashed too, so that a header byte turning
    ``F32`` into ``I32`` (the same size) is caught, not only a flipped data byte.

    >>> import hashlib, numpy as np
    >>> a = np.array([1.0, 2.0], "<f4")
    >>> tensor_checksum("F32", (2,), a) == hashlib.sha256(b"F32 [2]\\n" + a.tobytes()).hexdigest()
    True
    """
    h = hashlib.sha256(f"{dtype} {json.dumps(list(shape), separators=(',', ':'))}\n".encode())
    h.update(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    return h.hexdigest()


@dataclass(frozen=True)
class Entry:
    """One array in an archive, as its header declares it (nothing of its data has been read)."""

    key: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def is_safetensors(path: str) -> bool:
    """Whether ``path`` names a safetensors file (by its suffix, case-insensitive)."""
    return path.lower().endswith(".safetensors")


# -- opening the path -----------------------------------------------------------------------------


def _kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def refuse_irregular(path: str, mode: int, fn: str) -> None:
    """Raise unless ``mode`` is a regular file's: ``IsADirectoryError`` for a folder, ``ValueError`` otherwise."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    raise ValueError(f"{fn}: {path!r} is {_kind_of(mode)}, not a regular file; a checkpoint is a regular file")


def open_regular(path: str) -> BinaryIO:
    """Open ``path`` for reading, refusing FIFOs, devices and sockets at once instead of blocking on them.

    ``os.stat`` first, so that a FIFO is never opened (opening one blocks until a
    writer appears); ``O_NONBLOCK`` in case the path is swapped for one in between,
    and ``fstat`` of what was actually opened. ``OSError`` passes through.
    """
    refuse_irregular(path, os.stat(path).st_mode, "gt.load")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        refuse_irregular(path, os.fstat(fd).st_mode, "gt.load")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file after all: ordinary reads from here on
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _Guarded(io.RawIOBase):
    """The opened file as the parsers see it; it keeps apart "the bytes are wrong" and "the path failed".

    A corrupt zip directory can point zipfile at a negative offset, which the OS
    reports as ``EINVAL``: that is a content problem. A real I/O error (EIO, a
    network timeout) is remembered in ``failure`` and re-raised as itself even
    where zipfile turns an ``OSError`` into ``BadZipFile``.
    """

    def __init__(self, f: BinaryIO, size: int) -> None:
        self._f, self.size = f, size
        self.failure: OSError | None = None
        # zipfile asks tell() after every read; answering from here saves an lseek each time
        self._pos = f.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _io(self, op: Callable[..., Any], *args: Any) -> Any:
        try:
            return op(*args)
        except OSError as exc:
            self.failure = exc
            raise

    def read(self, n: int = -1) -> bytes:
        data = self._io(self._f.read, n)
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        n = self._io(self._f.readinto, b)
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset + {0: 0, 1: self._pos, 2: self.size}[whence]
        if target < 0:
            raise CheckpointContentError(f"the archive points before the start of the file (offset {target})")
        if target != self._pos:
            self._pos = self._io(self._f.seek, target)
        return self._pos

    def close(self) -> None:
        super().close()
        self._f.close()

    def translate(self, exc: BaseException) -> BaseException:
        """The exception to raise for ``exc`` from a parser: the remembered I/O error, or a content error."""
        if self.failure is not None:
            return self.failure
        if isinstance(exc, CheckpointContentError):
            return exc
        return CheckpointContentError(f"{type(exc).__name__}: {exc}")


def _read_exactly(f: Any, dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Read ``prod(shape) * itemsize`` bytes from ``f`` into a new array, in bounded chunks."""
    nbytes = math.prod(shape) * dtype.itemsize
    out = np.empty(nbytes, np.uint8)
    view, pos = memoryview(out), 0
    while pos < nbytes:
        chunk = f.read(min(_CHUNK, nbytes - pos))
        if not chunk:
            raise CheckpointContentError(f"{what} is truncated: {pos} of its {nbytes} bytes are there")
        view[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    return out.view(dtype).reshape(shape)


def _check_dtype_and_shape(key: str, dtype: np.dtype, shape: Any, allow: str = _ARRAY_KINDS) -> tuple[int, ...]:
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in allow:
        raise CheckpointContentError(
            f"entry {key!r} has dtype {dtype!s}; a checkpoint holds only boolean and numeric arrays "
            "(object, structured and string arrays are refused)"
        )
    if (
        not isinstance(shape, (tuple, list))
        or len(shape) > _MAX_NDIM
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise CheckpointContentError(f"entry {key!r} declares an invalid shape {shape!r}")
    return tuple(shape)


# -- archives ------------------------------------------------------------------------------------


class Archive:
    """An opened checkpoint: ``entries`` (headers only), ``marker`` (the format marker or None), ``read(key)``."""

    entries: dict[str, Entry]
    marker: str | None

    def __init__(self, f: _Guarded) -> None:
        self._f = f
        self.entries = {}
        self.marker = None

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return self._f.size

    def _read(self, entry: Entry) -> np.ndarray:
        raise NotImplementedError

    def read(self, key: str) -> np.ndarray:
        """The data of entry ``key``, exactly as its header declared it (``CheckpointContentError`` or ``OSError``)."""
        try:
            return self._read(self.entries[key])
        except CONTENT_ERRORS as exc:
            raise self._f.translate(exc) from exc

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Recording:
    """Keeps what numpy's header parser consumes: the header's exact bytes (numpy caps them at ~10 kB)."""

    def __init__(self, f: Any) -> None:
        self.f, self.seen = f, bytearray()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.seen += data
        return data


def _npy_header(member: Any, key: str) -> tuple[np.dtype, tuple[int, ...], bool, bytes]:
    """Parse one .npy header: dtype, shape, Fortran order, and the header's raw bytes."""
    fmt = np.lib.format
    recording = _Recording(member)
    version = fmt.read_magic(recording)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(recording)
    elif version == (2, 0):
        shape, fortran, dtype = fmt.read_array_header_2_0(recording)
    else:  # 3.0 exists only for structured dtypes with non-latin-1 field names
        raise CheckpointContentError(f"entry {key!r} is a .npy of version {version}, expected 1.0 or 2.0")
    return dtype, shape, fortran, bytes(recording.seen)


class _Npz(Archive):
    def __init__(self, f: _Guarded) -> None:
        super().__init__(f)
        start = f.read(16)
        if start.startswith(b"\x93NUMPY"):
            raise CheckpointContentError("it is a single .npy array, not a gputape checkpoint (written by gt.save)")
        if len(start) > 8 and start[8:9] == b"{" and struct.unpack("<Q", start[:8])[0] < f.size:
            raise CheckpointContentError("it looks like a safetensors file; give it the .safetensors suffix")
        f.seek(0)
        self._zip = zipfile.ZipFile(f)
        self._members: dict[str, tuple[zipfile.ZipInfo, bytes, bool]] = {}
        for info in self._zip.infolist():
            name = info.filename
            if not name.endswith(".npy") or info.is_dir():
                raise CheckpointContentError(f"member {name!r} is not an .npy array")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1:
                raise CheckpointContentError(
                    f"member {name!r} is encrypted or uses compression method {info.compress_type}; "
                    "numpy writes stored or deflated members only"
                )
            key = name[: -len(".npy")]
            if key in self._members:
                raise CheckpointContentError(f"member {name!r} appears twice")
            with self._zip.open(info) as member:
                dtype, shape, fortran, header = _npy_header(member, key)
            shape = _check_dtype_and_shape(key, dtype, shape, _ARRAY_KINDS + "U")
            entry = Entry(key, dtype, shape)
            # The zip directory's size of the member bounds what zipfile will inflate; it must be
            # exactly header + declared data, so a member cannot inflate past what its header declares.
            if info.file_size != len(header) + entry.nbytes:
                raise CheckpointContentError(
                    f"entry {key!r}: its header declares {shape} {dtype!s} ({entry.nbytes} bytes of data), "
                    f"but the archive says the member inflates to {info.file_size - len(header)} bytes"
                )
            self._members[key] = (info, header, fortran)
            self.entries[key] = entry
        marker = self.entries.pop("__gputape_checkpoint__", None)
        if marker is not None:
            if marker.dtype.kind != "U" or marker.shape != () or marker.nbytes > 256:
                raise CheckpointContentError(f"its format marker is a {marker.dtype!s} array of shape {marker.shape}")
            self.marker = str(self._read(marker))
        for e in self.entries.values():
            if e.dtype.kind == "U":
                _check_dtype_and_shape(e.key, e.dtype, e.shape)  # raises: strings only in the marker

    def _read(self, entry: Entry) -> np.ndarray:
        info, header, fortran = self._members[entry.key]
        what, shape = f"entry {entry.key!r}", entry.shape
        with self._zip.open(info) as member:
            if member.read(len(header)) != header:  # the header parsed before, not parsed again
                raise CheckpointContentError(f"{what} changed while it was read")
            # Fortran order is stored with the axes reversed; transposing back gives the array.
            a = _read_exactly(member, entry.dtype, shape[::-1] if fortran else shape, what)
            if member.read(1):  # also where zipfile checks the CRC, which the last byte triggers
                raise CheckpointContentError(f"{what} holds more data than its header declares")
        return a.T if fortran else a

    def close(self) -> None:
        self._zip.close()
        super().close()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise CheckpointContentError(f"the header names {k!r} twice")
        out[k] = v
    return out


class _Safetensors(Archive):
    """The safetensors layout: an 8-byte little-endian header length, a JSON header, then the raw data.

    The header is capped; every entry's dtype, shape and ``data_offsets`` are checked
    (each size is shape x itemsize, the entries tile the data region exactly, as
    safetensors itself requires), so no entry can claim a byte the file does not hold.
    """

    def __init__(self, f: _Guarded) -> None:
        super().__init__(f)
        size = f.size
        head = f.read(8)
        if head.startswith(b"PK"):
            raise CheckpointContentError("it is a zip archive (an .npz?), not a safetensors file")
        if len(head) != 8:
            raise CheckpointContentError("it is shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > SAFETENSORS_HEADER_CAP:
            raise CheckpointContentError(
                f"its safetensors header declares {n} bytes, over the {SAFETENSORS_HEADER_CAP}-byte cap"
            )
        if 8 + n > size:
            raise CheckpointContentError(f"its safetensors header declares {n} bytes, but the file has {size}")
        raw = f.read(n)
        if len(raw) != n:
            raise CheckpointContentError("its safetensors header is truncated")
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
        except RecursionError:
            raise CheckpointContentError("its safetensors header nests too deeply") from None
        if not isinstance(header, dict):
            raise CheckpointContentError("its safetensors header is not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise CheckpointContentError("its safetensors __metadata__ is not a map of strings")
        self.marker = metadata.get("__gputape_checkpoint__")
        self._start = 8 + n
        data_len = size - self._start
        self._offsets: dict[str, int] = {}
        self._dtype_names: dict[str, str] = {}
        for key, spec in header.items():
            if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
                raise CheckpointContentError(
                    f"entry {key!r}: expected {{dtype, shape, data_offsets}}, got {spec!r:.200}"
                )
            name = spec["dtype"]
            if name not in SAFETENSORS_DTYPES:
                raise CheckpointContentError(
                    f"entry {key!r} has safetensors dtype {name!r:.40}, which numpy cannot hold "
                    f"(supported: {', '.join(SAFETENSORS_DTYPES)}); convert it (e.g. bfloat16 to float32) first"
                )
            dtype = np.dtype(SAFETENSORS_DTYPES[name])
            shape = _check_dtype_and_shape(key, dtype, spec["shape"])
            offsets = spec["data_offsets"]
            if (
                not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets))
                or offsets[1] - offsets[0] != math.prod(shape) * dtype.itemsize
            ):
                raise CheckpointContentError(
                    f"entry {key!r}: data_offsets {offsets!r:.80} do not hold {shape} {name} "
                    f"({math.prod(shape) * dtype.itemsize} bytes)"
                )
            self.entries[key] = Entry(key, dtype, shape)
            self._offsets[key] = offsets[0]
            self._dtype_names[key] = name
        end = 0
        for key in sorted(self._offsets, key=lambda k: (self._offsets[k], self.entries[k].nbytes)):
            if self._offsets[key] != end:
                raise CheckpointContentError(f"entry {key!r} starts at byte {self._offsets[key]}, expected {end}")
            end += self.entries[key].nbytes
        if end != data_len:
            raise CheckpointContentError(f"its entries hold {end} bytes of data, but the file has {data_len}")
        self._checksums = _checksums(metadata, self.entries)

    def _read(self, entry: Entry) -> np.ndarray:
        self._f.seek(self._start + self._offsets[entry.key])
        a = _read_exactly(self._f, entry.dtype, entry.shape, f"entry {entry.key!r}")
        expected = self._checksums.get(entry.key)
        if expected is not None and tensor_checksum(self._dtype_names[entry.key], entry.shape, a) != expected:
            raise CheckpointCorruptError(
                f"tensor {entry.key!r} does not match the sha256 checksum written beside it "
                f"(metadata {CHECKSUM_PREFIX + entry.key!r})"
            )
        return a


def _checksums(metadata: dict[str, str], entries: dict[str, Entry]) -> dict[str, str]:
    """The file's checksums by tensor key; once a file has any, every tensor must have exactly one.

    All or none: a single corrupted byte in one metadata key (``gputape.sha256.w`` turned
    ``gputape.sha256.x``) must not make its tensor go unchecked.
    """
    sums = {k[len(CHECKSUM_PREFIX) :]: v for k, v in metadata.items() if k.startswith(CHECKSUM_PREFIX)}
    if not sums:
        return sums
    orphans = sorted(set(sums) - set(entries))
    if orphans:
        raise CheckpointCorruptError(f"its metadata has a checksum for {orphans[0]!r}, which is not one of its tensors")
    unchecked = sorted(set(entries) - set(sums))
    if unchecked:
        raise CheckpointCorruptError(
            f"tensor {unchecked[0]!r} has no checksum in the metadata, while {len(sums)} other tensors have one"
        )
    malformed = sorted(k for k, v in sums.items() if not _HEX64.match(v))
    if malformed:
        raise CheckpointCorruptError(
            f"the checksum of tensor {malformed[0]!r} is not a sha256 hex digest: {sums[malformed[0]]!r:.80}"
        )
    return sums


# The exceptions that mean "the bytes are wrong", as opposed to "the path cannot be read" (OSError).
CONTENT_ERRORS = (
    CheckpointContentError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    ValueError,
    KeyError,
    struct.error,
    NotImplementedError,
    RecursionError,
)


def open_archive(path: str) -> Archive:
    """Open ``path`` (safetensors by suffix, else ``.npz``) and parse its headers; the caller must close it.

    Raises ``OSError`` when the path cannot be read, :class:`CheckpointContentError`
    (with the original problem chained) when its content is malformed.
    """
    raw = open_regular(path)
    f = _Guarded(raw, os.fstat(raw.fileno()).st_size)
    try:
        try:
            return (_Safetensors if is_safetensors(path) else _Npz)(f)
        except CONTENT_ERRORS as exc:
            raise f.translate(exc) from exc
    except BaseException:
        f.close()
        raise
