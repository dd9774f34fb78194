"""Keras 3's own file formats: the ``.keras`` model archive and the ``.weights.h5`` weights file.

Both are written in exactly Keras 3's layout (``keras/src/saving/saving_lib.py``), so a
file either side writes, the other reads:

- ``model.weights.h5`` / ``x.weights.h5``: HDF5, one group per layer at its *object path*
  (a ``Sequential``'s or functional model's layers under ``layers/<snake_case class name>``,
  numbered ``dense``, ``dense_1``, ... per class; a subclassed model's sub-layers under their
  attribute names), each holding ``vars/0``, ``vars/1``, ... in the layer's weight order
  (created-trainable first) and the layer's name as the ``vars`` group's ``name`` attribute.
  Names (``dense_3``) never decide where a weight goes: two models built in different
  orders still exchange weights.
- ``.keras``: a zip of ``metadata.json``, ``config.json`` (the model's class and config,
  each layer's under Keras' class name and config keys) and ``model.weights.h5``.

Reading needs h5py (``pip install "gputape[h5]"``); without it the functions raise an
``ImportError`` naming that extra. Nothing in a file is executed: classes are gputape's own
(under Keras' names) or ones passed in ``custom_objects``. What does not move: compiled state
(the optimizer, losses, metrics: ``compile_config`` is written empty and ignored on load),
``Lambda`` layers (Keras stores Python bytecode for them) and custom activation functions.

>>> import gputape as gt, numpy as np, os, tempfile
>>> from gputape.nn.saving import load_weights_h5, save_weights_h5
>>> _ = __import__("pytest").importorskip("h5py")
>>> m = gt.nn.Sequential([gt.nn.Dense(3), gt.nn.Dense(1)]); m.build((None, 2))
>>> path = os.path.join(tempfile.mkdtemp(), "m.weights.h5")
>>> save_weights_h5(m, path)
>>> import h5py; sorted(h5py.File(path)["layers"])
['dense', 'dense_1']
"""

from __future__ import annotations

import datetime
import io
import json
import os
import zipfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core.state import defer_interrupts
from ..core.tensor import Variable
from ..devices import backend
from . import activations
from ._config import keras_snake

__all__ = [
    "deserialize",
    "load_model",
    "load_weights_h5",
    "register_keras_class",
    "save_model",
    "save_weights_h5",
    "serialize",
]

# The Keras release whose saving_lib layout this follows (metadata.json's keras_version).
KERAS_VERSION = "3.15.1"
_CONFIG, _METADATA, _WEIGHTS = "config.json", "metadata.json", "model.weights.h5"
# A config.json is a few kB per layer; more than this is not a model config.
_CONFIG_CAP = 64 << 20

# Keras' class name -> the gputape class that rebuilds it; and each gputape class -> (Keras' class name,
# module, registered_name) it is saved under. gputape.tf.keras adds its model classes and InputLayer
# through register_keras_class when it is imported (its Sequential then rebuilds "Sequential").
_CLASSES: dict[str, type] = {}
_KERAS_NAMES: dict[type, tuple[str, str, str | None]] = {}


def register_keras_class(
    cls: type, module: str = "keras.layers", name: str | None = None, registered: str | None = None
) -> None:
    """Save ``cls`` under Keras' class ``name`` (default: its own) and ``module``; rebuild that name with it.

    >>> import gputape as gt
    >>> register_keras_class(gt.nn.Dense)  # already registered: gputape's layers are
    """
    _CLASSES[name or cls.__name__] = cls
    _KERAS_NAMES[cls] = (name or cls.__name__, module, registered)


def _require_h5py(what: str) -> Any:
    try:
        import h5py
    except ImportError:
        raise ImportError(
            f'{what} needs the optional h5py package (Keras 3\'s weights are HDF5): pip install "gputape[h5]"'
        ) from None
    return h5py


# -- the object paths of Keras' weights layout ---------------------------------------------------------


def _is_layer(x: Any) -> bool:
    # gt.nn.Any, without importing it: the layers import this module to save themselves
    return hasattr(type(x), "_own_weights")


def _name_key(name: str) -> str:
    return f"~{name}" if name.startswith("_") else name  # Keras visits private attributes last


def _keras_layers(layer: Any) -> list[Any] | None:
    """The ``layers`` Keras walks first for a Sequential or functional model (its order decides the paths)."""
    order = getattr(layer, "_keras_layer_order", None)
    if order is not None:
        return order()
    if _keras_type(layer) == "Sequential":
        return list(layer.layers)
    return None


def _keras_type(layer: Any) -> str:
    for klass in type(layer).__mro__:
        if klass.__name__ in ("Sequential", "Functional") and klass.__module__.startswith("gputape."):
            return klass.__name__
    return "Layer"


def _attributes(layer: Any) -> list[tuple[str, Any]]:
    """A layer's attributes in Keras' visiting order; a Model's ``layers`` property is one of them, as in Keras."""
    items = {k: v for k, v in vars(layer).items() if not k.startswith("__")}
    if "layers" not in items and _keras_type(layer) == "Layer" and hasattr(type(layer), "layers"):
        items["layers"] = layer.layers
    return sorted(items.items(), key=lambda kv: _name_key(kv[0]))


def _walk(layer: Any, path: str, visited: set[int]) -> Iterator[tuple[str, Any, list[Variable]]]:
    """``(object path, layer, own weights)`` for ``layer`` and every layer below it, as Keras' ``_save_state``."""
    if id(layer) in visited:
        return
    own, subs = layer._own_weights()
    plain = [m for m in subs if not _is_layer(m) and m.variables]
    if plain:
        raise ValueError(
            f"{type(layer).__name__} {layer.name!r} holds the gt.Module {plain[0].name!r} with variables; Keras' "
            "weights layout has a place only for layers and their own weights: make it a gt.nn.Layer"
        )
    yield path, layer, own
    visited.add(id(layer))
    children = []
    first = _keras_layers(layer)
    if first is not None:
        children.append(("layers", first))
    children += _attributes(layer)
    for attr, value in children:
        child = f"{path}/{attr}" if path else attr
        if _is_layer(value):
            yield from _walk(value, child, visited)
        elif isinstance(value, (list, tuple, dict)):
            yield from _walk_container(value, child, visited, set())


def _walk_container(container: Any, path: str, visited: set[int], seen: set[int]) -> Iterator[Any]:
    if id(container) in seen:
        return
    seen.add(id(container))
    used: dict[str, int] = {}

    def unique(name: str) -> str:  # Keras' _get_unique_name: counted even for a layer already visited
        if name in used:
            used[name] += 1
            return f"{name}_{used[name]}"
        used[name] = 0
        return name

    for item in container.values() if isinstance(container, dict) else container:
        if _is_layer(item):
            yield from _walk(item, f"{path}/{unique(keras_snake(type(item).__name__))}", visited)
        elif isinstance(item, (list, tuple, dict)):
            yield from _walk_container(item, f"{path}/{unique('container')}", visited, seen)


def _entries(model: Any, what: str) -> list[tuple[str, Any, list[Variable]]]:
    if not _is_layer(model):
        raise TypeError(f"{what}: expected a gt.nn.Layer or Keras model, got {type(model).__name__}")
    if not model.built:
        raise ValueError(
            f"{what}: {type(model).__name__} {model.name!r} is not built, so it has no weights yet; call it on a "
            "batch or call model.build((None, features)) first"
        )
    return list(_walk(model, "", set()))


# -- weights files ---------------------------------------------------------------------------------------


def _h5_bytes(model: Any, what: str) -> bytes:
    h5py = _require_h5py(what)
    entries = _entries(model, what)
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        for path, layer, own in entries:
            group = f.create_group(f"{path}/vars" if path else "vars")
            group.attrs["name"] = layer.name
            for i, v in enumerate(own):
                group[str(i)] = backend.to_host(v._data)
    return buf.getvalue()


def save_weights_h5(model: Any, path: str | os.PathLike[str]) -> None:
    """Write ``model``'s weights to ``path`` as Keras 3's ``.weights.h5`` (atomically, as ``gt.save``).

    >>> import gputape as gt, os, tempfile
    >>> _ = __import__("pytest").importorskip("h5py")
    >>> d = gt.nn.Dense(2, name="fc"); d.build((None, 3))
    >>> save_weights_h5(d, os.path.join(tempfile.mkdtemp(), "fc.weights.h5"))
    """
    from ..checkpoint.write import atomic_write

    blob = _h5_bytes(model, "save_weights")
    atomic_write(os.fspath(path), lambda f: f.write(blob))


def _load_h5(model: Any, source: Any, label: str, what: str) -> None:
    """Check every layer's weights in the HDF5 ``source`` against ``model``, then assign them all at once."""
    from ..checkpoint import _dtype_problem

    h5py = _require_h5py(what)
    entries = _entries(model, what)
    problems: list[str] = []
    values: list[tuple[Variable, np.ndarray]] = []
    try:
        f = h5py.File(source, "r")
    except OSError as exc:
        if isinstance(source, (str, os.PathLike)) and not os.path.isfile(source):
            raise
        raise ValueError(f"{what}: {label} is not an HDF5 file ({exc}); nothing was loaded") from None
    with f:
        for path, layer, own in entries:
            key = f"{path}/vars" if path else "vars"
            group = f.get(key)
            if group is None and "_layer_checkpoint_dependencies" in f:  # Keras' fallback for 2.13's files
                group = f.get(key.replace("layers", "_layer_checkpoint_dependencies"))
            names = sorted(group.keys(), key=lambda k: (len(k), k)) if isinstance(group, h5py.Group) else []
            who = f"{type(layer).__name__} {layer.name!r} (group {key!r})"
            if len(names) != len(own):
                if own or names:
                    problems.append(f"{who}: the file has {len(names)} weights, the layer has {len(own)}")
                continue
            for i, v in enumerate(own):
                ds = group.get(str(i))
                if not isinstance(ds, h5py.Dataset):
                    problems.append(f"{who}: weight {i} ({v.name!r}) is missing")
                    continue
                if tuple(ds.shape) != tuple(v.shape):
                    problems.append(
                        f"{who}: weight {i} ({v.name!r}) has shape {tuple(ds.shape)} in the file, "
                        f"the layer's is {tuple(v.shape)}"
                    )
                    continue
                why = (
                    _dtype_problem(np.dtype(ds.dtype), np.dtype(v.dtype), False)
                    if ds.dtype.kind in "biufc"
                    else (f"the file has dtype {ds.dtype}")
                )
                if why:
                    problems.append(f"{who}: weight {i} ({v.name!r}): {why}")
                    continue
                values.append((v, np.asarray(ds[()], dtype=v.dtype)))
    if problems:
        listing = "\n  - ".join(problems)
        raise ValueError(
            f"{what}: {label} does not match {type(model).__name__} {model.name!r}; nothing was loaded:\n  - {listing}"
        )
    # Device copies first (they can fail), then every assignment with a Ctrl-C held until the last.
    staged = [(v, a if v.device == "cpu" else backend.asarray_on(a, v.device)) for v, a in values]
    with defer_interrupts():
        for v, a in staged:
            v.assign(a)


def load_weights_h5(model: Any, path: str | os.PathLike[str]) -> None:
    """Read a Keras 3 ``.weights.h5`` file (or the weights inside a ``.keras`` archive) into ``model``.

    Every weight is checked (count per layer, shapes, a dtype the variable holds
    without changing values) before any is assigned: a mismatch raises ``ValueError``
    listing each problem and changes nothing.

    >>> import gputape as gt, numpy as np, os, tempfile
    >>> _ = __import__("pytest").importorskip("h5py")
    >>> a, b = gt.nn.Dense(2), gt.nn.Dense(2); a.build((None, 3)); b.build((None, 3))
    >>> path = os.path.join(tempfile.mkdtemp(), "fc.weights.h5"); save_weights_h5(a, path); load_weights_h5(b, path)
    >>> bool(np.array_equal(a.kernel.numpy(), b.kernel.numpy()))
    True
    """
    path = os.fspath(path)
    if path.lower().endswith(".keras"):
        with _open_keras(path, "load_weights") as zf:
            _load_h5(model, io.BytesIO(_member(zf, _WEIGHTS, path)), repr(path), "load_weights")
        return
    _load_h5(model, path, repr(path), "load_weights")


# -- configs ---------------------------------------------------------------------------------------------


def _json_ready(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_json_ready(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_ready(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise ValueError(
        f"save: {where} is a {type(value).__name__}, which a Keras config cannot hold; build the layer from names "
        "(initializers, activations) or give the class a get_config that returns plain values"
    )


def serialize(layer: Any) -> dict[str, Any]:
    """``layer`` as Keras 3's ``serialize_keras_object`` writes it into a model's config.

    gputape's layers and models go under Keras' class names and modules; any other
    class (a subclassed layer or model) under its own name, to be rebuilt on load
    from ``custom_objects`` through its ``from_config`` (``get_config`` must describe it).

    >>> import gputape as gt
    >>> d = gt.nn.Dense(2, activation="relu", name="fc"); d.build((None, 3))
    >>> c = serialize(d); c["class_name"], c["config"]["units"], c["build_config"]
    ('Dense', 2, {'input_shape': [None, 3]})
    """
    if not _is_layer(layer):
        raise ValueError(
            f"save: {layer!r} is not a layer; Keras' config can hold only layers (wrap a function in a layer class "
            "of your own, given to load_model in custom_objects)"
        )
    cls = type(layer)
    known = _KERAS_NAMES.get(cls)
    builtin = known is not None
    if cls.__dict__.get("_wraps_code"):
        raise ValueError(
            f"save: {cls.__name__} layer {layer.name!r} wraps Python code, which a .keras config cannot carry safely "
            "(Keras itself stores bytecode and refuses it in safe mode); write a small layer class instead and pass "
            "it to load_model in custom_objects"
        )
    fn = getattr(layer, "activation", None)
    if builtin and callable(fn):
        name = getattr(fn, "__name__", None)
        try:
            same = name is not None and activations.get(name) is fn
        except ValueError:
            same = False
        if not same:
            raise ValueError(
                f"save: {cls.__name__} {layer.name!r} uses the activation {fn!r}, which has no Keras name; use one of "
                f"{sorted(activations._BY_NAME)} or a layer class of your own"
            )
    config = _json_ready(layer.get_config(), f"{cls.__name__} {layer.name!r}'s config")
    name, module, registered = known if known is not None else (cls.__name__, cls.__module__, cls.__name__)
    out: dict[str, Any] = {"module": module, "class_name": name, "config": config, "registered_name": registered}
    shape = layer.__dict__.get("_build_input_shape")
    if layer.built and shape is not None:
        out["build_config"] = {"input_shape": shape}
    return out


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """Rebuild a layer or model from what :func:`serialize` (or Keras) wrote; classes by name, no code run.

    ``custom_objects`` maps class names (Keras' ``registered_name`` or ``class_name``)
    to classes of your own; they take precedence over gputape's.

    >>> import gputape as gt
    >>> d = deserialize({"class_name": "Dense", "config": {"units": 3, "kernel_regularizer": None}})
    >>> type(d).__name__, d.units
    ('Dense', 3)
    """
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"load_model: expected a serialized Keras object (a dict with 'class_name'), got {config!r}")
    custom = dict(custom_objects or {})
    name = config["class_name"]
    cls: Any = custom.get(config.get("registered_name") or "") or custom.get(name)
    if cls is None:
        cls = _CLASSES.get(name)
    if cls is None:
        raise ValueError(
            f"load_model: unknown class {name!r} (registered name {config.get('registered_name')!r}); gputape rebuilds "
            f"{sorted(_CLASSES)}; pass a class of your own as custom_objects={{{name!r}: YourClass}}"
        )
    inner = config.get("config", {})
    try:
        obj = cls.from_config(inner, custom_objects=custom) if _takes_custom(cls) else cls.from_config(inner)
    except TypeError as exc:
        raise TypeError(f"load_model: rebuilding {name} from its config failed: {exc}") from exc
    build = config.get("build_config") or {}
    shape = build.get("input_shape")
    if _is_layer(obj) and not obj.built and shape is not None:
        _build_from_shape(obj, shape)
    return obj


def _takes_custom(cls: Any) -> bool:
    import inspect

    try:
        return "custom_objects" in inspect.signature(cls.from_config).parameters
    except (TypeError, ValueError):
        return False


def _build_from_shape(layer: Any, shape: Any) -> None:
    """Keras' ``build_from_config``: gputape's layers build from the shape; a class of the user's runs one batch
    of zeros instead, so that sub-layers it creates in ``__init__`` and builds on call get their weights too."""
    nested = bool(shape) and isinstance(shape[0], (list, tuple))
    if type(layer) in _KERAS_NAMES:
        layer.build([tuple(s) for s in shape] if nested else tuple(shape))
        return
    from ..core.tensor import constant

    def zeros(s: Any) -> Any:
        if s and isinstance(s[0], (list, tuple)):
            return [zeros(i) for i in s]
        return constant(np.zeros([1 if d is None else d for d in s], np.float32))

    layer(zeros(shape), training=False)


# -- the .keras archive ----------------------------------------------------------------------------------


def save_model(model: Any, path: str | os.PathLike[str]) -> None:
    """Write ``model`` as Keras 3's ``.keras`` archive (config, metadata and weights), atomically.

    >>> import gputape as gt, zipfile, os, tempfile
    >>> _ = __import__("pytest").importorskip("h5py")
    >>> m = gt.nn.Sequential([gt.nn.Dense(2)]); m.build((None, 3))
    >>> path = os.path.join(tempfile.mkdtemp(), "m.keras"); save_model(m, path)
    >>> sorted(zipfile.ZipFile(path).namelist())
    ['config.json', 'metadata.json', 'model.weights.h5']
    """
    from ..checkpoint.write import atomic_write

    path = os.fspath(path)
    config = serialize(model)
    config.setdefault("build_config", {"input_shape": model.__dict__.get("_build_input_shape")})
    config["compile_config"] = {}  # compiled state does not move (see the module docstring)
    weights = _h5_bytes(model, "save")
    metadata = {"keras_version": KERAS_VERSION, "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(_METADATA, json.dumps(metadata))
        zf.writestr(_CONFIG, json.dumps(config))
        zf.writestr(_WEIGHTS, weights)
    blob = buf.getvalue()
    atomic_write(path, lambda f: f.write(blob))


def _open_keras(path: str, what: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{what}: {path!r} is not a .keras archive (not a zip file)") from None


def _member(zf: zipfile.ZipFile, name: str, path: str, cap: int | None = None) -> bytes:
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise ValueError(f"{path!r} is not a Keras 3 model archive: it has no {name}") from None
    if cap is not None and info.file_size > cap:
        raise ValueError(f"{path!r}: {name} declares {info.file_size} bytes, more than a model config holds")
    return zf.read(info)


def load_model(
    path: str | os.PathLike[str],
    custom_objects: dict[str, Any] | None = None,
    compile: bool = True,  # noqa: A002 (Keras' argument name)
    safe_mode: bool = True,
) -> Any:
    """Rebuild the model a ``.keras`` archive holds (gputape's or Keras 3's) and load its weights.

    ``compile`` and ``safe_mode`` are Keras' arguments: no compiled state is restored
    (compile the model again), and nothing in the file is ever executed.

    >>> import gputape.tf as tf, numpy as np, os, tempfile
    >>> _ = __import__("pytest").importorskip("h5py")
    >>> m = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.keras"); m.save(path)
    >>> twin = tf.keras.models.load_model(path)
    >>> bool(np.array_equal(twin(np.ones((1, 3))).numpy(), m(np.ones((1, 3))).numpy()))
    True
    """
    path = os.fspath(path)
    if not path.lower().endswith(".keras"):
        raise ValueError(
            f"load_model: {path!r} is not a .keras file; gputape reads Keras 3's .keras archives (weights alone: "
            "model.load_weights('x.weights.h5'); gputape checkpoints: gt.load)"
        )
    _require_h5py("load_model")
    with _open_keras(path, "load_model") as zf:
        try:
            config = json.loads(_member(zf, _CONFIG, path, _CONFIG_CAP))
        except json.JSONDecodeError as exc:
            raise ValueError(f"load_model: {path!r} has a config.json that is not JSON ({exc})") from None
        model = deserialize(config, custom_objects)
        _load_h5(model, io.BytesIO(_member(zf, _WEIGHTS, path)), repr(path), "load_model")
    return model
