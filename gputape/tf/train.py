"""``tf.train``: ``Checkpoint``, ``CheckpointManager`` and ``latest_checkpoint``, on gputape's checkpoint files.

TensorFlow's API over gputape's own format (``gt.save``/``gt.load``: a pickle-free ``.npz``
archive, checked whole before anything is assigned, written atomically). TensorFlow's
``.index``/``.data`` files are not read or written: a checkpoint ``save`` returns the path
``<prefix>-<n>`` and that path is one file. What a checkpoint holds: every object given
(models, layers and modules by their variables' paths, optimizers with their slots and
``iterations``, Variables), ``save_counter``, and the global seed's random state
(:func:`gputape.random.get_state`), so that restoring and continuing a seeded program gives
bitwise the losses of the run that was not interrupted. The position of a data iterator is
not kept: save at an epoch boundary (an unseeded shuffle draws its order from the global seed's
next stream, which is restored). A ``Dropout(seed=...)`` layer's own generator is not kept either.

>>> import gputape.tf as tf, os, tempfile
>>> v = tf.Variable(1.0)
>>> ckpt = tf.train.Checkpoint(v=v)
>>> folder = tempfile.mkdtemp()
>>> path = ckpt.save(os.path.join(folder, "ckpt"))
>>> os.path.basename(path), os.path.basename(tf.train.latest_checkpoint(folder))
('ckpt-1', 'ckpt-1')
>>> _ = v.assign(5.0); _ = ckpt.restore(path); float(v.numpy())
1.0
"""

from __future__ import annotations

import json as _json
import os as _os
import re as _re
from typing import Any as _Any

import numpy as _np

from .. import random as _random
from ..checkpoint import load as _load
from ..checkpoint import save as _save
from ..checkpoint.write import atomic_write as _atomic_write
from ..core.module import Module as _Module
from ..core.tensor import Variable as _Variable
from ..optim import Optimizer as _Optimizer

__all__ = ["Checkpoint", "CheckpointManager", "latest_checkpoint"]

_STATE_FILE = "checkpoint"  # TensorFlow's name for a folder's checkpoint state file
_RNG_KEY = "_gputape_random_state"
_TRACKABLE = (_Module, _Variable, _Optimizer)


class _LoadStatus:
    """What ``restore``/``read`` return: TensorFlow's status object. Every check has already passed, since a
    gputape load matches every variable and slot of the checkpoint before it assigns anything."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def assert_consumed(self) -> _LoadStatus:
        """Every value in the checkpoint found its object (a gputape load has already checked it).

        >>> import gputape.tf as tf
        >>> tf.train.Checkpoint().restore(None).assert_consumed().path is None
        True
        """
        return self

    assert_existing_objects_matched = assert_nontrivial_match = expect_partial = assert_consumed

    def run_restore_ops(self, session: _Any = None) -> None:
        """Nothing to run: eager restores happen at once (TensorFlow 1's graph mode had ops to run)."""


class Checkpoint:
    """TensorFlow's ``tf.train.Checkpoint(**objects)``: save and restore models, optimizers and Variables together.

    ``save(prefix)`` writes ``<prefix>-<n>`` (``n`` the new ``save_counter``) and records it in
    the folder's ``checkpoint`` state file, which :func:`latest_checkpoint` reads; ``write(path)``
    writes exactly ``path`` and records nothing. ``restore(path)`` / ``read(path)`` check the
    file against every object first and change nothing when it does not match (``ValueError``
    naming each problem); ``restore(None)`` does nothing, as in TensorFlow, so
    ``ckpt.restore(manager.latest_checkpoint)`` starts fresh when there is none. The files are
    gputape's (see :mod:`gputape.tf.train`), not TensorFlow's.

    >>> import gputape.tf as tf, numpy as np, os, tempfile
    >>> model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    >>> opt = tf.keras.optimizers.Adam(0.1)
    >>> with tf.GradientTape() as tape:
    ...     loss = tf.reduce_sum(model(np.ones((1, 2), "float32")))
    >>> _ = opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    >>> ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    >>> path = ckpt.write(_os.path.join(tempfile.mkdtemp(), "step"))
    >>> twin = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    >>> twin_opt = tf.keras.optimizers.Adam(0.1)
    >>> _ = tf.train.Checkpoint(model=twin, optimizer=twin_opt).read(path)
    >>> int(twin_opt.iterations), bool(np.array_equal(twin.weights[0].numpy(), model.weights[0].numpy()))
    (1, True)
    """

    def __init__(self, root: _Any = None, **kwargs: _Any) -> None:
        objects = dict(kwargs)
        if root is not None:
            objects["root"] = root
        for name, obj in objects.items():
            if name == "save_counter" or name.startswith("_"):
                raise ValueError(f"tf.train.Checkpoint: {name!r} is reserved; give the object another name")
            if not isinstance(obj, _TRACKABLE):
                raise TypeError(
                    f"tf.train.Checkpoint: {name}={type(obj).__name__} cannot be saved; pass models, layers, modules, "
                    "optimizers and Variables (a number to keep: wrap it in a tf.Variable)"
                )
        self._objects = objects
        self.save_counter = _Variable(_np.int64(0), trainable=False, name="save_counter")

    def __getattr__(self, name: str) -> _Any:
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(f"'Checkpoint' object has no attribute {name!r}; it holds {sorted(objects)}")

    def _tree(self) -> dict[str, _Any]:
        return {**self._objects, "save_counter": self.save_counter}

    def write(self, file_prefix: _Any, options: _Any = None) -> str:
        """Write the checkpoint to exactly ``file_prefix`` (no number added, no state file); return the path.

        >>> import gputape.tf as tf, os, tempfile
        >>> path = tf.train.Checkpoint(v=tf.Variable(2.0)).write(_os.path.join(tempfile.mkdtemp(), "w"))
        >>> _os.path.basename(path)
        'w'
        """
        path = _os.fspath(file_prefix)
        state = _json.dumps(_random.get_state()).encode()
        _save(path, {**self._tree(), _RNG_KEY: _np.frombuffer(state, _np.uint8)})
        return path

    def save(self, file_prefix: _Any, options: _Any = None) -> str:
        """Add one to ``save_counter``, write ``<file_prefix>-<save_counter>`` and record it as the latest.

        >>> import gputape.tf as tf, os, tempfile
        >>> ckpt = tf.train.Checkpoint(v=tf.Variable(2.0)); prefix = _os.path.join(tempfile.mkdtemp(), "c")
        >>> [_os.path.basename(ckpt.save(prefix)) for _ in range(2)], int(ckpt.save_counter)
        (['c-1', 'c-2'], 2)
        """
        prefix = _os.fspath(file_prefix)
        self.save_counter.assign(self.save_counter.numpy() + 1)
        path = self.write(f"{prefix}-{int(self.save_counter.numpy())}")
        _write_state(_os.path.dirname(_os.path.abspath(path)), path, [path])
        return path

    def read(self, save_path: _Any, options: _Any = None) -> _LoadStatus:
        """Restore every object from ``save_path`` (checked whole first); the same as :meth:`restore`.

        >>> import gputape.tf as tf
        >>> tf.train.Checkpoint().read(None).path is None
        True
        """
        if save_path is None:
            return _LoadStatus(None)
        path = _os.fspath(save_path)
        data = _load(path, into=self._tree())
        blob = data.get(f"array:{_RNG_KEY}")
        if blob is not None:
            _random.set_state(_json.loads(bytes(_np.asarray(blob, _np.uint8)).decode()))
        return _LoadStatus(path)

    def restore(self, save_path: _Any, options: _Any = None) -> _LoadStatus:
        """Restore every object (and ``save_counter``, and the global seed's random state) from ``save_path``.

        ``None`` restores nothing (a first run, when ``latest_checkpoint`` found none).

        >>> import gputape.tf as tf
        >>> tf.train.Checkpoint().restore(None).assert_consumed().path is None
        True
        """
        return self.read(save_path, options)

    def __repr__(self) -> str:
        return f"<tf.train.Checkpoint of {sorted(self._objects)}, save_counter={int(self.save_counter.numpy())}>"


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(s: str) -> str:
    return _re.sub(r"\\(.)", r"\1", s)


def _relative(folder: str, path: str) -> str:
    rel = _os.path.relpath(_os.path.abspath(path), folder)
    return path if rel.startswith("..") else rel


def _write_state(folder: str, latest: str, paths: list[str]) -> None:
    """The folder's ``checkpoint`` file in TensorFlow's text format (paths relative to the folder)."""
    lines = [f"model_checkpoint_path: {_quote(_relative(folder, latest))}"]
    lines += [f"all_model_checkpoint_paths: {_quote(_relative(folder, p))}" for p in paths]
    text = "\n".join(lines) + "\n"
    _atomic_write(_os.path.join(folder, _STATE_FILE), lambda f: f.write(text.encode()))


def _read_state(folder: str, filename: str = _STATE_FILE) -> tuple[str | None, list[str]]:
    try:
        with open(_os.path.join(folder, filename), encoding="utf-8") as f:
            text = f.read(1 << 20)
    except FileNotFoundError:
        return None, []
    latest, paths = None, []
    for line in text.splitlines():
        m = _re.match(r'\s*(\w+)\s*:\s*"((?:[^"\\]|\\.)*)"\s*$', line)
        if m is None:
            continue
        value = _unquote(m.group(2))
        value = value if _os.path.isabs(value) else _os.path.join(folder, value)
        if m.group(1) == "model_checkpoint_path":
            latest = value
        elif m.group(1) == "all_model_checkpoint_paths":
            paths.append(value)
    return latest, paths


def latest_checkpoint(checkpoint_dir: _Any, latest_filename: str | None = None) -> str | None:
    """The path of the newest checkpoint recorded in ``checkpoint_dir``'s state file, or None.

    None also when the state file names a file that no longer exists.

    >>> import gputape.tf as tf, tempfile
    >>> tf.train.latest_checkpoint(tempfile.mkdtemp()) is None
    True
    """
    latest, _ = _read_state(_os.fspath(checkpoint_dir), latest_filename or _STATE_FILE)
    return latest if latest is not None and _os.path.isfile(latest) else None


class CheckpointManager:
    """TensorFlow's ``tf.train.CheckpointManager``: numbered saves in ``directory``, the oldest beyond ``max_to_keep``
    deleted, and the list kept in the folder's ``checkpoint`` state file (a new manager picks it up).

    >>> import gputape.tf as tf, os, tempfile
    >>> ckpt = tf.train.Checkpoint(v=tf.Variable(0.0))
    >>> manager = tf.train.CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=2)
    >>> for _ in range(3):
    ...     _ = manager.save()
    >>> [_os.path.basename(p) for p in manager.checkpoints], _os.path.basename(manager.latest_checkpoint)
    (['ckpt-2', 'ckpt-3'], 'ckpt-3')
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: _Any,
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: float | None = None,
        checkpoint_name: str = "ckpt",
        step_counter: _Any = None,
        checkpoint_interval: _Any = None,
        init_fn: _Any = None,
    ) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"tf.train.CheckpointManager: checkpoint must be a tf.train.Checkpoint, got {checkpoint!r}")
        if max_to_keep is not None and (
            isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1
        ):
            raise ValueError(
                f"tf.train.CheckpointManager: max_to_keep must be a positive integer or None (keep all), "
                f"got {max_to_keep!r}"
            )
        for arg, value in (
            ("keep_checkpoint_every_n_hours", keep_checkpoint_every_n_hours),
            ("step_counter", step_counter),
            ("checkpoint_interval", checkpoint_interval),
            ("init_fn", init_fn),
        ):
            if value is not None:
                raise NotImplementedError(f"tf.train.CheckpointManager: {arg}= is not supported")
        self._checkpoint = checkpoint
        self.directory = _os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._prefix = _os.path.join(self.directory, checkpoint_name)
        latest, paths = _read_state(self.directory)
        self._paths = [p for p in paths if _os.path.isfile(p)]
        if latest is not None and _os.path.isfile(latest) and latest not in self._paths:
            self._paths.append(latest)

    @property
    def checkpoints(self) -> list[str]:
        """The kept checkpoints' paths, oldest first."""
        return list(self._paths)

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest kept checkpoint's path, or None before the first save."""
        return self._paths[-1] if self._paths else None

    def save(self, checkpoint_number: int | None = None, check_interval: bool = True, options: _Any = None) -> str:
        """Write a new checkpoint (``<name>-<save_counter>``, or ``<name>-<checkpoint_number>``), drop the oldest.

        >>> import gputape.tf as tf, os, tempfile
        >>> m = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(0.0)), tempfile.mkdtemp(), None)
        >>> _os.path.basename(m.save(checkpoint_number=10))
        'ckpt-10'
        """
        ckpt = self._checkpoint
        ckpt.save_counter.assign(ckpt.save_counter.numpy() + 1)
        number = int(ckpt.save_counter.numpy()) if checkpoint_number is None else int(checkpoint_number)
        path = ckpt.write(f"{self._prefix}-{number}")
        self._paths = [p for p in self._paths if p != path] + [path]
        if self._max_to_keep is not None:
            for old in self._paths[: -self._max_to_keep]:
                try:
                    _os.remove(old)
                except FileNotFoundError:
                    pass
            self._paths = self._paths[-self._max_to_keep :]
        _write_state(self.directory, path, self._paths)
        return path

    def restore_or_initialize(self) -> str | None:
        """Restore the latest checkpoint when there is one (and return its path), else do nothing (None)."""
        latest = self.latest_checkpoint
        self._checkpoint.restore(latest)
        return latest


del annotations
