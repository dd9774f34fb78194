"""Keras 3 configs in, gputape constructor arguments out: the one place that reads Keras' config dicts.

A Keras config holds every argument of the Keras class, among them features gputape does
not have (regularizers, constraints, quantization, ``renorm``). Such a key is dropped when
its value is Keras' "off" value, so a plain model loads; any other value raises, naming the
class, the key and the value, instead of building a layer that computes something else.

>>> from gputape.nn._config import constructor_kwargs
>>> class Unit:
...     def __init__(self, units, name=None):
...         pass
>>> constructor_kwargs(Unit, {"units": 2, "kernel_regularizer": None, "name": "u"}, "Unit")
{'units': 2, 'name': 'u'}
"""

from __future__ import annotations

import inspect
import re
from typing import Any

__all__ = ["KERAS_OFF", "constructor_kwargs", "dtype_name", "keras_snake"]

# Keras arguments gputape does not implement, with the values that mean "not used": dropping
# them changes nothing a layer computes. (renorm_momentum is read only when renorm is on.)
KERAS_OFF: dict[str, tuple[Any, ...]] = {
    "renorm_momentum": (0.99,),
    "data_format": (None, "channels_last"),
    "lora_alpha": (None,),
}


def _is_off(key: str, value: Any) -> bool:
    if key in KERAS_OFF:
        return any(value == off for off in KERAS_OFF[key])
    return value is None or value is False


def _accepted(cls: type) -> set[str] | None:
    """The keyword arguments ``cls(...)`` takes, following ``**kwargs`` up the MRO; None when anything goes."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return None
        names.update(p.name for p in params.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return names - {"self"}
    return None  # **kwargs all the way up: the class takes whatever its config holds


def dtype_name(value: Any) -> Any:
    """A Keras ``DTypePolicy`` config (``{"class_name": "DTypePolicy", "config": {"name": ...}}``) as its name."""
    if isinstance(value, dict) and value.get("class_name") in ("DTypePolicy", "FloatDTypePolicy"):
        name = value.get("config", {}).get("name")
        if name not in (None, "float32", "float64", "float16", "int32", "int64"):
            raise ValueError(
                f"dtype policy {name!r} (mixed precision) is not supported by gputape; save the model with a plain "
                "dtype such as 'float32'"
            )
        return name
    return value


def constructor_kwargs(cls: type, config: dict[str, Any], what: str) -> dict[str, Any]:
    """``config`` (Keras' or gputape's) as keyword arguments ``cls`` takes.

    Keys the class does not take are dropped when their value is Keras' "off" value;
    otherwise ``ValueError`` names ``what``, the key and the value.
    """
    if not isinstance(config, dict):
        raise TypeError(f"{what}.from_config: config must be a dict, got {type(config).__name__}")
    accepted = _accepted(cls)
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "dtype":
            value = dtype_name(value)
        if accepted is None or key in accepted:
            out[key] = value
        elif not _is_off(key, value):
            raise ValueError(
                f"{what}: the config sets {key}={value!r}, which gputape's {cls.__name__} does not implement; "
                "the model cannot be rebuilt without changing what it computes (remove that setting in Keras and "
                "save again, or pass a class of your own in custom_objects)"
            )
    return out


def keras_snake(name: str) -> str:
    """Keras' ``naming.to_snake_case``, which names the groups of a weights file (``Conv2D`` -> ``conv2d``).

    >>> keras_snake("BatchNormalization"), keras_snake("Conv2D"), keras_snake("MLP")
    ('batch_normalization', 'conv2d', 'mlp')
    """
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
