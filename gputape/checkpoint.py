"""Checkpoints: ``gt.save(path, obj)`` and ``gt.load(path, into=obj)``.

The file is a plain ``.npz`` archive (numpy only), read with
``allow_pickle=False``, so loading a checkpoint can never run code. Entries
are keyed by the object's *structure*, not by creation order:

- ``var:<path>``: a Variable, at its attribute path (``var:model/layers/0/kernel``);
- ``opt:<name>:iterations`` and ``opt:<name>:slot:<slot>:<variable path>``:
  an optimizer's step count and slots, each tied to the path of its variable;
- ``array:<path>``: any other numpy array or number in a saved dict
  (metadata such as the epoch), returned by ``load`` but never assigned.

``load`` reads and checks everything (format marker, every key, shape and
dtype) before it assigns anything, so a truncated, foreign or mismatched file
raises ``ValueError`` and leaves the model and optimizer untouched.

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
import tempfile
import zipfile
import zlib
from typing import Any

import numpy as np

from . import backend
from .module import Module
from .optim import Optimizer
from .tensor import Tensor, Variable

__all__ = ["load", "save"]

_MARKER = "__gputape_checkpoint__"
_FORMAT = "gputape-checkpoint/1"
_LAZY_HINT = (
    "if the model creates its variables lazily (gt.nn.Dense and other layers build on their first call), "
    "call it once on a sample batch before loading"
)


def _collect(obj: Any) -> tuple[dict[str, Variable], dict[str, Optimizer], dict[str, Any]]:
    """Walk ``obj`` into ``{path: Variable}``, ``{name: Optimizer}`` and ``{path: plain value}``."""
    variables: dict[str, Variable] = {}
    optimizers: dict[str, Optimizer] = {}
    plain: dict[str, Any] = {}

    def walk(o: Any, path: str) -> None:
        if isinstance(o, Module):
            for p, v in o.named_variables():
                variables[f"{path}/{p}" if path else p] = v
        elif isinstance(o, Variable):
            variables[path or (o.name or "variable")] = o
        elif isinstance(o, Optimizer):
            if not path:
                raise TypeError(
                    "gt.save: an optimizer alone has nothing to tie its slots to; save it with its model: "
                    "gt.save(path, {'model': model, 'optimizer': opt})"
                )
            if ":" in path:
                raise ValueError(f"gt.save: optimizer key {path!r} must not contain ':'")
            optimizers[path] = o
        elif isinstance(o, dict):
            for k, v in o.items():
                if not isinstance(k, str):
                    raise TypeError(f"gt.save: dict keys must be strings, got {k!r}")
                walk(v, f"{path}/{k}" if path else k)
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, f"{path}/{i}" if path else str(i))
        elif isinstance(o, Tensor):
            plain[path or "value"] = backend.to_host(o._data)
        elif isinstance(o, (np.ndarray, np.generic, int, float, bool)):
            plain[path or "value"] = o
        else:
            raise TypeError(
                f"gt.save: cannot save {type(o).__name__} at {path or 'the top level'!r}; "
                "save Modules, Variables, optimizers, arrays and numbers (in dicts and lists)"
            )

    walk(obj, "")
    return variables, optimizers, plain


def _slot_key(opt_name: str, slot: str, var_path: str) -> str:
    return f"opt:{opt_name}:slot:{slot}:{var_path}"


def save(path: str | os.PathLike[str], obj: Any) -> None:
    """Write the Variables (and optimizer state) of ``obj`` to ``path`` as an ``.npz`` archive.

    ``obj`` is a Module, or a dict (lists inside are fine) of Modules,
    Variables, optimizers and plain arrays or numbers. An optimizer's slots
    are stored under the paths of their variables, so the optimizer must be
    saved together with the model it trains. The file is written to a
    temporary name and renamed, so a crash never leaves half a checkpoint;
    the parent directory is created if needed; ``path`` is used as given
    (no ``.npz`` is appended).

    >>> import gputape as gt, tempfile, os
    >>> m = gt.Module(); m.w = gt.Variable([1.0, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz")
    >>> gt.save(path, m)
    >>> sorted(gt.load(path))
    ['var:w']
    """
    variables, optimizers, plain = _collect(obj)
    arrays: dict[str, Any] = {_MARKER: np.array(_FORMAT)}
    path_of = {}
    for p, v in variables.items():
        arrays[f"var:{p}"] = backend.to_host(v._data)
        path_of.setdefault(id(v), p)
    for name, opt in optimizers.items():
        state = opt.get_state()
        arrays[f"opt:{name}:iterations"] = np.array(state["iterations"], np.int64)
        for var, slots in state["slots"]:
            vp = path_of.get(id(var))
            if vp is None:
                raise ValueError(
                    f"gt.save: optimizer {name!r} has state for variable {var.name!r} (shape {var.shape}), which "
                    "is not among the saved variables; save the model it trains in the same call: "
                    "gt.save(path, {'model': model, 'optimizer': opt})"
                )
            for slot, a in slots.items():
                arrays[_slot_key(name, slot, vp)] = a
    for p, value in plain.items():
        a = np.asarray(value)
        if a.dtype.kind not in "biufc":
            raise TypeError(f"gt.save: {p!r} is a {a.dtype} array; only numeric and boolean arrays can be saved")
        arrays[f"array:{p}"] = a
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gputape-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read(path: str) -> dict[str, np.ndarray]:
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError(f"gt.load: {path!r} is a single .npy array, not a gputape checkpoint (written by gt.save)")
        with npz:
            data = {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as exc:
        if str(exc).startswith("gt.load:"):
            raise
        raise ValueError(
            f"gt.load: {path!r} is not a readable gputape checkpoint: the file is truncated, corrupt or in another "
            f"format ({type(exc).__name__}: {exc}). Nothing was loaded."
        ) from None
    marker = data.pop(_MARKER, None)
    if marker is None or marker.shape != () or str(marker) != _FORMAT:
        found = f"format marker {str(marker)!r}" if marker is not None else "no gputape format marker"
        raise ValueError(
            f"gt.load: {path!r} is an .npz archive but not a gputape checkpoint ({found}; expected {_FORMAT!r}, "
            "as written by gt.save). Nothing was loaded."
        )
    return data


def load(path: str | os.PathLike[str], into: Any = None, strict: bool = True) -> dict[str, np.ndarray]:
    """Read a checkpoint; with ``into``, check it against ``into`` and then assign every value.

    Returns the archive's arrays by key (see the module docstring). With
    ``into`` (the object, or one shaped like it, that was saved), every
    variable and optimizer entry must be present with matching shapes and a
    castable dtype, and the file must hold nothing else (``strict=False``
    allows missing and extra entries); otherwise ``ValueError`` lists every
    problem and nothing is assigned. Plain ``array:`` entries are returned,
    never assigned.

    >>> import gputape as gt, tempfile, os
    >>> m = gt.Module(); m.w = gt.Variable([1.0, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz"); gt.save(path, m)
    >>> _ = m.w.assign([0.0, 0.0]); _ = gt.load(path, into=m); m.w.numpy().tolist()
    [1.0, 2.0]
    """
    path = os.fspath(path)
    data = _read(path)
    if into is None:
        return data
    variables, optimizers, _ = _collect(into)
    problems: list[str] = []
    assigns: list[tuple[Variable, np.ndarray]] = []
    used = {k for k in data if k.startswith("array:")}

    def check(key: str, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray | None:
        a = data.get(key)
        if a is None:
            if strict:
                problems.append(f"missing {what} ({key!r})")
            return None
        used.add(key)
        if a.shape != tuple(shape):
            problems.append(f"{what}: the file has shape {a.shape}, expected {tuple(shape)}")
            return None
        if not np.can_cast(a.dtype, dtype, casting="same_kind"):
            problems.append(f"{what}: the file has dtype {a.dtype}, which cannot be stored in {dtype}")
            return None
        return a

    for p, v in variables.items():
        a = check(f"var:{p}", v.shape, v.dtype, f"variable {p!r}")
        if a is not None:
            assigns.append((v, a))

    states: list[tuple[Optimizer, dict[str, Any]]] = []
    for name, opt in optimizers.items():
        it = check(f"opt:{name}:iterations", (), np.dtype(np.int64), f"optimizer {name!r} iterations")
        prefix = f"opt:{name}:slot:"
        per_var: dict[str, dict[str, np.ndarray]] = {}
        for key in data:
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
            arrays = {
                s: check(k, v.shape, v.dtype, f"optimizer {name!r} slot {s!r} of {vp!r}") for s, k in keys.items()
            }
            if all(a is not None for a in arrays.values()):
                slots.append((v, arrays))
        if it is not None or not strict:
            states.append((opt, {"iterations": int(it) if it is not None else opt.iterations, "slots": slots}))

    extra = sorted(set(data) - used)
    if strict and extra:
        shown = ", ".join(repr(k) for k in extra[:8]) + (" ..." if len(extra) > 8 else "")
        problems.append(f"the file has {len(extra)} entries that `into` has no place for: {shown}")
    if problems:
        hint = f"\n({_LAZY_HINT}.)" if any("missing" in p or "no place" in p for p in problems) else ""
        listing = "\n  - ".join(problems)
        raise ValueError(
            f"gt.load: {path!r} does not match the object to load into; nothing was loaded:\n  - {listing}{hint}"
        )
    for opt, state in states:
        opt.set_state(state)
    for v, a in assigns:
        v.assign(a if v.device == "cpu" else backend.asarray_on(a.astype(v.dtype), v.device))
    return data
