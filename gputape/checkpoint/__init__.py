"""Checkpoints: ``gt.save(path, obj)`` and ``gt.load(path, into=obj)``.

The file is a plain ``.npz`` archive (numpy only), or a ``.safetensors`` file when
the path ends in ``.safetensors``. Neither can hold code: only boolean and numeric
arrays are read, never pickles. Entries are keyed by the object's *structure*,
not by creation order:

- ``var:<path>``: a Variable, at its attribute path (``var:model/layers/0/kernel``);
- ``opt:<name>:iterations`` and ``opt:<name>:slot:<slot>:<variable path>``:
  an optimizer's step count and slots, each tied to the path of its variable;
- ``array:<path>``: any other numpy array or number in a saved dict
  (metadata such as the epoch), returned by ``load`` but never assigned.

``save(..., names=...)`` writes the variables under other keys instead (PyTorch's
state dict names, a Linear weight transposed with ``"T"``), and ``load(...,
names=...)`` reads them back with the same mapping; such a file has no format marker.

What ``load`` guarantees:

- *Nothing unbounded is read.* Each entry's header (dtype, shape) is checked
  against the variable or slot it is for before any of its data is read, and
  it is read through a reader that stops at its declared size, so a zip bomb
  or a header declaring 10**12 elements is refused with a ``ValueError`` naming
  the entry, at once. Entries that no target bounds (``array:`` entries, all of
  them when ``into`` is None, extra ones with ``strict=False``) may declare at
  most ``max(64 MiB, the file's size)`` bytes in total.
- *All or nothing.* Every object of one call (several models and optimizers in
  ``into``) is checked, values included, before anything is assigned.
- *Checksums.* A ``.safetensors`` file gets a sha256 per tensor in its metadata
  (``gputape.sha256.<key>``; ``.npz`` members have zip's CRC-32); a file whose bytes do
  not match them is refused as corrupt, naming the tensor. Files without them (written
  by PyTorch or the safetensors package) get the format's checks only.
- *Two kinds of failure.* A path that cannot be read raises its ``OSError``
  unchanged (``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``, a
  network ``TimeoutError``...); FIFOs, devices and sockets are refused at once,
  without blocking on them. A file whose *content* is wrong (truncated, corrupt,
  foreign, mismatched, hostile) raises ``ValueError``.
- *Dtypes.* A value loads silently only when the cast cannot change it: numpy's
  ``np.can_cast(file_dtype, target_dtype, "safe")``, less integers into floats
  whose mantissa is too short for them (numpy calls int64 -> float64 safe; 2**53 + 1
  does not survive it). So bool -> any number, int8/int16 -> int32/int64,
  uint8 -> int16, float16 -> float32/float64, float32 -> float64, int16 -> float32,
  int32 -> float64, complex64 -> complex128 are silent, and anything else
  (float64 -> float32, int64 -> float32/float64, uint64 -> int64, float -> int,
  int -> bool) raises unless ``cast=True``, which then casts like numpy's
  ``astype``; complex into a real variable is refused even then. The rule looks
  at dtypes only, never at values, so a file that loads today loads tomorrow.
- *Non-finite values* (NaN, inf) in variables and slots load, as in TensorFlow,
  with one ``GputapeWarning`` per call naming the entries.
- An optimizer's ``iterations`` must be an integer in ``[0, 2**63)``.

``save`` writes a temporary file beside the target, fsyncs it, renames it over
the target and fsyncs the folder, so a crash leaves either the old checkpoint or
the new one; temp files of earlier killed saves to the same path are removed
(see :func:`save`).

>>> import gputape as gt, numpy as np, tempfile, os
>>> model = gt.nn.Dense(2, name="fc")
>>> _ = model(np.ones((1, 3), "float32"))       # build the lazy layer first
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
>>> gt.save(path, {"model": model, "epoch": 3})
>>> twin = gt.nn.Dense(2); _ = twin(np.ones((1, 3), "float32"))
>>> int(gt.load(path, into={"model": twin})["array:epoch"])
3
>>> bool((twin.kernel.numpy() == model.kernel.numpy()).all())
True
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.module import Module
from ..core.state import defer_interrupts
from ..core.tape import GputapeWarning
from ..core.tensor import Tensor, Variable
from ..devices import backend
from ..optim import Optimizer
from . import read as _read
from . import write as _write

__all__ = ["load", "save"]

_MARKER = "__gputape_checkpoint__"
_FORMAT = "gputape-checkpoint/1"
_LAZY_HINT = (
    "if the model creates its variables lazily (gt.nn.Dense and other layers build on their first call), "
    "call it once on a sample batch before loading"
)
_INT64_MAX = 2**63 - 1
# What entries that no target bounds may declare in total, at least (or the file's size, if larger).
_UNBOUNDED_FLOOR = 64 << 20


def _collect(obj: Any, fn: str) -> tuple[dict[str, Variable], dict[str, Optimizer], dict[str, Any]]:
    """Walk ``obj`` into ``{path: Variable}``, ``{name: Optimizer}`` and ``{path: plain value}``.

    Two parts of ``obj`` that map to the same entry (``{"a/b": m1, "a": {"b": m2}}``)
    raise ``ValueError`` naming both: one would silently overwrite the other.
    """
    variables: dict[str, Variable] = {}
    optimizers: dict[str, Optimizer] = {}
    plain: dict[str, Any] = {}
    origin: dict[str, str] = {}  # entry key -> where in obj it came from

    def claim(key: str, where: str) -> None:
        if key in origin:
            raise ValueError(
                f"{fn}: {origin[key]} and {where} both map to the entry {key!r}, so one would be lost; "
                "rename one of them (a '/' in a dict key separates a path, as nesting does)"
            )
        origin[key] = where

    def walk(o: Any, path: str, where: str) -> None:
        if isinstance(o, Module):
            for p, v in o.named_variables():
                full = f"{path}/{p}" if path else p
                claim(f"var:{full}", f"{where} (its variable {p!r})")
                variables[full] = v
        elif isinstance(o, Variable):
            # tf.Variable's TensorFlow name 'w:0' is the variable 'w': the key stays 'var:w'
            full = path or (o.name.removesuffix(":0") or "variable")
            claim(f"var:{full}", where)
            variables[full] = o
        elif isinstance(o, Optimizer):
            if not path:
                raise TypeError(
                    f"{fn}: an optimizer alone has nothing to tie its slots to; save it with its model: "
                    "gt.save(path, {'model': model, 'optimizer': opt})"
                )
            if ":" in path:
                raise ValueError(f"{fn}: optimizer key {path!r} must not contain ':'")
            claim(f"opt:{path}", where)
            optimizers[path] = o
        elif isinstance(o, dict):
            for k, v in o.items():
                if not isinstance(k, str):
                    raise TypeError(f"{fn}: dict keys must be strings, got {k!r}")
                walk(v, f"{path}/{k}" if path else k, f"{where}[{k!r}]")
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, f"{path}/{i}" if path else str(i), f"{where}[{i}]")
        elif isinstance(o, (Tensor, np.ndarray, np.generic, int, float, bool)):
            full = path or "value"
            claim(f"array:{full}", where)
            plain[full] = backend.to_host(o._data) if isinstance(o, Tensor) else o
        else:
            raise TypeError(
                f"{fn}: cannot save {type(o).__name__} at {path or 'the top level'!r}; "
                "save Modules, Variables, optimizers, arrays and numbers (in dicts and lists)"
            )

    walk(obj, "", "obj")
    return variables, optimizers, plain


def _slot_key(opt_name: str, slot: str, var_path: str) -> str:
    return f"opt:{opt_name}:slot:{slot}:{var_path}"


# Keys a mapped name cannot take: the safetensors header's metadata entry and the .npz format marker.
_RESERVED_KEYS = ("__metadata__", _MARKER)


def _save_keys(names: Any, variables: dict[str, Variable]) -> dict[str, tuple[str, bool]]:
    """``names=`` of ``gt.save``: load's mapping, and every variable named once, under a key of its own."""
    mapping = _parse_names(names, variables, "gt.save")
    unnamed = [p for p in variables if p not in mapping]
    if unnamed:
        shown = ", ".join(f"{p!r} (shape {tuple(variables[p].shape)})" for p in unnamed[:8])
        more = f" and {len(unnamed) - 8} more" if len(unnamed) > 8 else ""
        raise ValueError(
            f"gt.save: names= leaves {len(unnamed)} variable{'s' * (len(unnamed) > 1)} unnamed: {shown}{more}; "
            "with names=, the file is in another library's naming, so every variable needs its key there: add "
            f"names[{unnamed[0]!r}] = '<key>' (or ('<key>', 'T') for a Dense kernel). Nothing was written."
        )
    owner: dict[str, str] = {}
    for p, (key, _) in mapping.items():
        if not key or key in _RESERVED_KEYS:
            raise ValueError(
                f"gt.save: names[{p!r}] = {names[p]!r} gives variable {p!r} the key {key!r}, which the file "
                "format reserves (or an empty one); choose another. Nothing was written."
            )
        if key in owner:
            raise ValueError(
                f"gt.save: names[{owner[key]!r}] and names[{p!r}] both give the key {key!r}, so the file would "
                f"hold only one of the variables {owner[key]!r} and {p!r}; give each its own key. "
                "Nothing was written."
            )
        owner[key] = p
    return mapping


def _entries_to_save(obj: Any, names: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
    variables, optimizers, plain = _collect(obj, "gt.save")
    keys = {p: (f"var:{p}", False) for p in variables} if names is None else _save_keys(names, variables)
    arrays: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}  # key -> what it holds, for a mapped name that meets an optimizer's or array's key

    def put(key: str, a: np.ndarray, what: str) -> None:
        if key in origin:
            raise ValueError(
                f"gt.save: {origin[key]} and {what} both map to the key {key!r}, so one would be lost; "
                "choose another name in names=. Nothing was written."
            )
        origin[key] = what
        arrays[key] = a

    path_of: dict[int, str] = {}
    for p, v in variables.items():
        key, transpose = keys[p]
        a = backend.to_host(v._data)
        # "T": a Dense kernel (in, out) is torch.nn.Linear's weight (out, in); contiguous, as the file holds it
        put(key, np.ascontiguousarray(a.T) if transpose else a, f"variable {p!r}")
        path_of.setdefault(id(v), p)
    for name, opt in optimizers.items():
        state = opt.get_state()
        it = state["iterations"]
        if not isinstance(it, (int, np.integer)) or not 0 <= it <= _INT64_MAX:
            raise ValueError(
                f"gt.save: optimizer {name!r} has iterations={it!r}, which is not a step count a checkpoint can "
                "hold (an integer in [0, 2**63))"
            )
        put(f"opt:{name}:iterations", np.array(it, np.int64), f"optimizer {name!r} iterations")
        for var, slots in state["slots"]:
            vp = path_of.get(id(var))
            if vp is None:
                raise ValueError(
                    f"gt.save: optimizer {name!r} has state for variable {var.name!r} (shape {var.shape}), which "
                    "is not among the saved variables; save the model it trains in the same call: "
                    "gt.save(path, {'model': model, 'optimizer': opt})"
                )
            for slot, a in slots.items():
                put(_slot_key(name, slot, vp), a, f"optimizer {name!r} slot {slot!r} of {vp!r}")
    for p, value in plain.items():
        a = np.asarray(value)
        if a.dtype.kind not in "biufc":
            raise TypeError(f"gt.save: {p!r} is a {a.dtype} array; only numeric and boolean arrays can be saved")
        put(f"array:{p}", a, f"the value {p!r}")
    return arrays


def save(path: str | os.PathLike[str], obj: Any, *, names: Mapping[str, str | tuple[str, str]] | None = None) -> None:
    """Write the Variables (and optimizer state) of ``obj`` to ``path``, as ``.npz`` or ``.safetensors``.

    ``obj`` is a Module, or a dict (lists inside are fine) of Modules,
    Variables, optimizers and plain arrays or numbers; two parts of it that map
    to the same entry raise ``ValueError`` naming both. A path ending in ``.h5``,
    ``.hdf5`` or ``.keras`` is refused (those are Keras' formats: ``model.save_weights``,
    ``model.save``). An optimizer's slots are
    stored under the paths of their variables, so the optimizer must be saved
    together with the model it trains. ``path`` is used as given (no ``.npz`` is
    appended); one ending in ``.safetensors`` (any case) is written in that format,
    which needs the optional package (``pip install "gputape[safetensors]"``) and
    holds no complex128 arrays. A safetensors file gets a sha256 checksum per tensor
    in its ``__metadata__`` (``gputape.sha256.<key>``, see
    :func:`gputape.checkpoint.read.tensor_checksum`), and ``gt.load`` refuses a file
    whose bytes no longer match them.

    ``names`` writes another library's naming and layout, the exact inverse of
    :func:`load`'s ``names``: ``{variable path: key}``, or ``(key, "T")`` to store a
    2-D variable transposed, as ``torch.nn.Linear`` keeps its weight (out, in) where
    ``gt.nn.Dense`` keeps its kernel (in, out). Every variable must be named, each
    under its own key, and ``"T"`` is for 2-D variables only; otherwise ``ValueError``
    names the variable and the entry, and nothing is written. Such a file has no
    gputape format marker, so it loads back with the same ``names``; saved from the
    model alone, it is a state dict ``torch.nn.Module.load_state_dict(
    safetensors.torch.load_file(path), strict=True)`` takes. Optimizer state and
    plain values, if saved with it, keep gputape's keys.

    The write is atomic: a temp file ``.<name>.gputape-<host>-<pid>-<random>.tmp``
    in the target's folder is written, fsynced, renamed over the target, and the
    folder is fsynced, so a crash leaves the old file or the new one, never half of
    one. A symlinked ``path`` is followed (the link's target is rewritten, the link
    stays). The file keeps the permission bits of the one it replaces, or gets
    ``0o666 & ~umask`` like ``open()``. Before writing, temp files of earlier saves
    to the same target are removed when their writer is dead (checked by pid on the
    same machine) or they have not been written to for a day (a writer elsewhere).
    The parent directory is created if needed; a path that exists but is not a
    regular file is refused.

    >>> import gputape as gt, tempfile, os
    >>> m = gt.Module(); m.w = gt.Variable([1.0, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz")
    >>> gt.save(path, m)
    >>> sorted(gt.load(path))
    ['var:w']
    >>> fc = gt.nn.Dense(2); fc.build((None, 3))                    # kernel (3, 2), bias (2,)
    >>> torch_names = {"kernel": ("weight", "T"), "bias": "bias"}
    >>> gt.save(path, fc, names=torch_names)                        # PyTorch's Linear(3, 2) naming
    >>> twin = gt.nn.Dense(2); twin.build((None, 3))
    >>> _ = gt.load(path, into=twin, names=torch_names)
    >>> bool((twin.kernel.numpy() == fc.kernel.numpy()).all())
    True
    """
    path = os.fspath(path)
    if path.lower().endswith((".h5", ".hdf5", ".keras")):
        # Those names promise HDF5 or Keras' archive; a zip under them is what Keras (and h5py) cannot read.
        raise ValueError(
            f"gt.save: {path!r} names an HDF5 or Keras file, but gt.save writes gputape's checkpoint (a .npz zip, or "
            ".safetensors); use such a name, or Keras 3's formats: model.save_weights('x.weights.h5') and "
            "model.save('m.keras'). Nothing was written."
        )
    arrays = _entries_to_save(obj, names)
    # A file in another library's naming is not in gputape's layout: no marker says it is.
    marker = {_MARKER: _FORMAT} if names is None else {}
    if _read.is_safetensors(path):
        blob = _write.safetensors_bytes(path, arrays, marker)
        _write.atomic_write(path, lambda f: f.write(blob))
    else:
        arrays = {k: np.array(v) for k, v in marker.items()} | arrays
        _write.atomic_write(path, lambda f: _write.npz_write(f, arrays))


# -- loading -------------------------------------------------------------------------------------


@dataclass
class _Want:
    """One entry ``load`` needs, and what it must be to fit its target."""

    key: str
    shape: tuple[int, ...]
    dtype: np.dtype
    what: str
    transpose: bool = False
    iterations: bool = False

    @property
    def label(self) -> str:
        """The target and the entry, for messages: ``variable 'fc/kernel' (entry 'var:fc/kernel')``."""
        return f"{self.what} (entry {self.key!r}{', transposed' * self.transpose})"


def _not_readable(path: str, why: object) -> ValueError:
    if isinstance(why, _read.CheckpointCorruptError):
        return ValueError(
            f"gt.load: {path!r} is corrupt: {why}; its bytes changed after gt.save wrote them (a disk, copy or "
            "transfer error?). Nothing was loaded."
        )
    return ValueError(
        f"gt.load: {path!r} is not a readable gputape checkpoint: the file is truncated, corrupt or in another "
        f"format ({why}). Nothing was loaded."
    )


def _value_preserving(src: np.dtype, dst: np.dtype) -> bool:
    """numpy's "safe" casts, less integers into floats too short for them (numpy calls int64 -> float64 safe,
    but 2**53 + 1 does not survive it)."""
    if not np.can_cast(src, dst, casting="safe"):
        return False
    if src.kind in "iu" and dst.kind in "fc":
        return np.finfo(dst).nmant + 1 >= np.iinfo(src).bits - (src.kind == "i")
    return True


def _dtype_problem(src: np.dtype, dst: np.dtype, cast: bool) -> str | None:
    if _value_preserving(src, dst):
        return None
    if src.kind == "c" and dst.kind != "c":
        return (
            f"the file has dtype {src}, complex, and {dst} would lose the imaginary part (refused even with cast=True)"
        )
    if cast:
        return None
    return (
        f"the file has dtype {src}, which {dst} cannot hold without possibly changing values "
        "(only casts that cannot change a value, such as float16 -> float32, are silent); pass cast=True to "
        "cast like numpy's astype"
    )


def _parse_names(names: Any, variables: dict[str, Variable], fn: str) -> dict[str, tuple[str, bool]]:
    """``names=`` as ``{variable path: (file key, transpose)}``, the same rules for ``gt.save`` and ``gt.load``."""
    obj = "`into`" if fn == "gt.load" else "the object saved"
    if not isinstance(names, Mapping):
        raise TypeError(f"{fn}: names must be a dict {{variable path: file key}}, got {type(names).__name__}")
    unknown = [p for p in names if p not in variables]
    if unknown:
        known = ", ".join(repr(p) for p in list(variables)[:8]) + (" ..." if len(variables) > 8 else "")
        raise ValueError(f"{fn}: names= has paths that {obj} does not have: {unknown[:8]}; its variables are {known}")
    out = {}
    for p, spec in names.items():
        if isinstance(spec, str):
            out[p] = (spec, False)
        elif isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str) and spec[1] == "T":
            # Only a matrix: reversing the axes of anything else (a conv kernel) is not what
            # another library's layout is, and would load or save a silently wrong tensor.
            shape = tuple(variables[p].shape)
            if len(shape) != 2:
                raise ValueError(
                    f"{fn}: names[{p!r}] = {spec!r} transposes variable {p!r}, which has shape {shape}; 'T' swaps "
                    "the two axes of a 2-D tensor (a Dense kernel (in, out) and torch.nn.Linear's weight "
                    f"(out, in)); map it without 'T'. Nothing was {'loaded' if fn == 'gt.load' else 'written'}."
                )
            out[p] = (spec[0], True)
        else:
            raise TypeError(
                f"{fn}: names[{p!r}] must be a key of the file, or (key, 'T') to transpose it, got {spec!r}"
            )
    return out


def _wants(
    archive: _read.Archive,
    variables: dict[str, Variable],
    optimizers: dict[str, Optimizer],
    names: dict[str, tuple[str, bool]],
    strict: bool,
    problems: list[str],
) -> tuple[list[tuple[Variable, _Want]], list[tuple[Optimizer, _Want, list[tuple[Variable, dict[str, _Want]]]]]]:
    """What every target needs from the file; problems found in the directory alone go to ``problems``."""
    var_wants = []
    for p, v in variables.items():
        key, transpose = names.get(p, (f"var:{p}", False))
        var_wants.append((v, _Want(key, tuple(v.shape), np.dtype(v.dtype), f"variable {p!r}", transpose)))
    opt_wants = []
    for name, opt in optimizers.items():
        it = _Want(f"opt:{name}:iterations", (), np.dtype(np.int64), f"optimizer {name!r} iterations", iterations=True)
        prefix = f"opt:{name}:slot:"
        per_var: dict[str, dict[str, str]] = {}
        for key in archive.entries:
            if key.startswith(prefix):
                slot, _, vp = key[len(prefix) :].partition(":")
                per_var.setdefault(vp, {})[slot] = key
        slots = []
        for vp, keys in per_var.items():
            v = variables.get(vp)
            if v is None:
                if strict:
                    problems.append(f"optimizer {name!r} has state for variable {vp!r}, which `into` does not have")
                continue
            if set(keys) != set(opt.slot_names):
                problems.append(
                    f"optimizer {name!r}: variable {vp!r} has slots {sorted(keys)} in the file, but "
                    f"{type(opt).__name__} uses {sorted(opt.slot_names)} (a different optimizer or settings?)"
                )
                continue
            what = f"optimizer {name!r} slot {{}} of {vp!r}"
            slots.append(
                (v, {s: _Want(k, tuple(v.shape), np.dtype(v.dtype), what.format(repr(s))) for s, k in keys.items()})
            )
        opt_wants.append((opt, it, slots))
    return var_wants, opt_wants


def _header_problem(entry: _read.Entry, want: _Want, cast: bool) -> str | None:
    """What is wrong with ``entry`` for ``want``, judged from its header alone (before any data is read)."""
    if want.iterations:
        if entry.shape != () or entry.dtype.kind not in "iu":
            return (
                f"{want.label}: the file has a {entry.dtype} array of shape {entry.shape}, expected an integer scalar"
            )
        return None
    shape = entry.shape[::-1] if want.transpose else entry.shape
    if shape != want.shape:
        seen = f"{entry.shape} (transposed: {shape})" if want.transpose else f"{entry.shape}"
        return f"{want.label}: the file has shape {seen}, expected {want.shape}"
    why = _dtype_problem(entry.dtype, want.dtype, cast)
    return f"{want.label}: {why}" if why else None


def _unbounded_problem(archive: _read.Archive, keys: list[str]) -> str | None:
    cap = max(_UNBOUNDED_FLOOR, archive.size)
    total = sum(archive.entries[k].nbytes for k in keys)
    if total <= cap:
        return None
    big = max(keys, key=lambda k: archive.entries[k].nbytes)
    e = archive.entries[big]
    return (
        f"entries that nothing in `into` bounds declare {total} bytes in all, more than the {cap} bytes allowed "
        f"(max(64 MiB, the file's size)); the largest is {big!r}, {e.dtype} of shape {e.shape} ({e.nbytes} bytes)"
    )


def _raise_problems(path: str, problems: list[str], into: Any) -> None:
    if problems:
        hint = f"\n({_LAZY_HINT}.)" if any("missing" in p or "no place" in p for p in problems) else ""
        listing = "\n  - ".join(problems)
        what = "does not match the object to load into" if into is not None else "cannot be loaded safely"
        raise ValueError(f"gt.load: {path!r} {what}; nothing was loaded:\n  - {listing}{hint}")


def _check_marker(archive: _read.Archive, path: str) -> None:
    if archive.marker == _FORMAT:
        return
    found = f"format marker {archive.marker!r}" if archive.marker is not None else "no gputape format marker"
    raise ValueError(
        f"gt.load: {path!r} is an archive but not a gputape checkpoint ({found}; expected {_FORMAT!r}, as written by "
        "gt.save). To load a foreign state dict (PyTorch's, say), map its keys with names={variable path: key}. "
        "Nothing was loaded."
    )


def _warn_nonfinite(path: str, arrays: dict[str, np.ndarray]) -> None:
    bad = sorted(k for k, a in arrays.items() if a.dtype.kind in "fc" and not np.isfinite(a).all())
    if bad:
        shown = ", ".join(repr(k) for k in bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        warnings.warn(
            f"gt.load: {path!r} has NaN or infinite values in {len(bad)} entries: {shown}; they were loaded as they "
            "are (a diverged run?)",
            GputapeWarning,
            stacklevel=3,
        )


def load(
    path: str | os.PathLike[str],
    into: Any = None,
    strict: bool = True,
    *,
    cast: bool = False,
    names: Mapping[str, str | tuple[str, str]] | None = None,
) -> dict[str, np.ndarray]:
    """Read a checkpoint; with ``into``, check it against ``into`` and then assign every value.

    Returns the file's arrays by key (see the module docstring), as stored.
    With ``into`` (the object, or one shaped like it, that was saved), every
    variable and optimizer entry must be present with the target's shape and a
    dtype it can hold (``cast=True`` allows value-changing casts, see the module
    docstring), and the file must hold nothing else (``strict=False`` allows
    missing and extra entries); otherwise ``ValueError`` lists every problem and
    nothing is assigned. Plain ``array:`` entries are returned, never assigned.
    A path that cannot be read raises its own ``OSError``.

    ``names`` loads files that gputape did not write (no format marker needed),
    such as a PyTorch state dict saved with ``safetensors.torch.save_file``: it maps
    a variable path of ``into`` to the file's key, or to ``(key, "T")`` to transpose
    the file's 2-D array first (a variable of another rank with ``"T"`` is refused).
    Nothing is guessed: ``torch.nn.Linear`` keeps its weight as (out, in) and
    ``gt.nn.Dense`` its kernel as (in, out), so that mapping must say ``"T"``.
    Variables not in ``names`` use their usual keys. ``gt.save(path, obj, names=...)``
    writes such a file, and the same ``names`` reads it back.
    Reading a ``.safetensors`` file needs only numpy.

    >>> import gputape as gt, tempfile, os
    >>> m = gt.Module(); m.w = gt.Variable([1.0, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz"); gt.save(path, m)
    >>> _ = m.w.assign([0.0, 0.0]); _ = gt.load(path, into=m); m.w.numpy().tolist()
    [1.0, 2.0]
    >>> row = gt.Module(); row.w = gt.Variable([[1.0, 2.0]])           # shape (1, 2)
    >>> gt.save(path, row)
    >>> col = gt.Module(); col.kernel = gt.Variable([[0.0], [0.0]])    # shape (2, 1)
    >>> _ = gt.load(path, into=col, names={"kernel": ("var:w", "T")}); col.kernel.numpy().tolist()
    [[1.0], [2.0]]
    """
    path = os.fspath(path)
    if names is not None and into is None:
        raise ValueError("gt.load: names= maps the variables of `into` to the file's keys; pass into= as well")
    try:
        archive = _read.open_archive(path)
    except _read.CheckpointContentError as exc:
        raise _not_readable(path, exc) from None
    with archive:
        return _load(archive, path, into, strict, cast, names)


def _load(
    archive: _read.Archive, path: str, into: Any, strict: bool, cast: bool, names: Mapping[str, Any] | None
) -> dict[str, np.ndarray]:
    if names is None:
        _check_marker(archive, path)
    problems: list[str] = []
    if into is None:
        var_wants, opt_wants = [], []
    else:
        variables, optimizers, _ = _collect(into, "gt.load")
        mapping = _parse_names(names, variables, "gt.load") if names is not None else {}
        var_wants, opt_wants = _wants(archive, variables, optimizers, mapping, strict, problems)
    wants = [w for _, w in var_wants]
    for _, it, slots in opt_wants:
        wants.append(it)
        wants.extend(w for _, per in slots for w in per.values())

    present = []
    for want in wants:
        entry = archive.entries.get(want.key)
        if entry is None:
            if strict:
                problems.append(f"missing {want.label}")
            continue
        why = _header_problem(entry, want, cast)
        if why:
            problems.append(why)
        else:
            present.append(want)
    targeted = {w.key for w in wants}
    unbounded = [k for k in archive.entries if k not in targeted]
    extra = sorted(k for k in unbounded if not k.startswith("array:"))
    if strict and into is not None and extra:
        shown = ", ".join(repr(k) for k in extra[:8]) + (" ..." if len(extra) > 8 else "")
        problems.append(f"the file has {len(extra)} entries that `into` has no place for: {shown}")
    too_big = _unbounded_problem(archive, unbounded)
    if too_big:
        problems.append(too_big)
    _raise_problems(path, problems, into)

    # Every header fits: now read, each entry exactly once and bounded by its declared size.
    data: dict[str, np.ndarray] = {}
    try:
        for key in [*dict.fromkeys(w.key for w in present), *unbounded]:
            data[key] = archive.read(key)
    except _read.CheckpointContentError as exc:
        raise _not_readable(path, exc) from None
    values: dict[int, np.ndarray] = {}
    for want in present:
        a = data[want.key]
        if want.iterations:
            n = int(a)
            if 0 <= n <= _INT64_MAX:
                values[id(want)] = np.int64(n)
            else:
                problems.append(f"{want.label}: the file has {n}, not a step count (an integer in [0, 2**63))")
            continue
        a = np.asarray(a.T if want.transpose else a, dtype=want.dtype)  # unsafe only where cast=True allowed it
        values[id(want)] = a if a.flags.c_contiguous else np.ascontiguousarray(a)
    _raise_problems(path, problems, into)
    state_keys = {w.key for w in present if not w.iterations}
    _warn_nonfinite(path, {k: a for k, a in data.items() if k in state_keys or k.startswith(("var:", "opt:"))})

    states = []
    for opt, it, slots in opt_wants:
        loaded = [
            (v, {s: values[id(w)] for s, w in per.items()})
            for v, per in slots
            if all(id(w) in values for w in per.values())
        ]
        states.append(
            (opt, {"iterations": int(values[id(it)]) if id(it) in values else opt.iterations, "slots": loaded})
        )
    # Device copies first (they can fail: out of memory), then every assignment with a Ctrl-C
    # held until the last one, so a load is never half applied.
    assigns = [
        (v, a if v.device == "cpu" else backend.asarray_on(a, v.device))
        for v, want in var_wants
        if (a := values.get(id(want))) is not None
    ]
    with defer_interrupts():
        for opt, state in states:
            opt.set_state(state)
        for v, a in assigns:
            v.assign(a)
    return data
