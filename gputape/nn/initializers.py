"""Weight initializers (``gt.nn.initializers``), with Keras' names and math.

An initializer is a callable ``init(shape, dtype) -> numpy array``. Random ones
draw from ``gt.random``'s generator unless given a ``seed``, so
``gt.random.seed(n)`` makes a whole model's initial weights reproducible.
Fan-in and fan-out follow Keras: for a 2-d kernel ``(in, out)``; for a
convolution kernel the leading dimensions are the receptive field.

Placement: an initializer draws on the host (one generator for every device, so a seed
gives the same weights on the CPU and a GPU) and returns numpy; the variable it
initialises (``gt.Variable(init(shape))``, a layer's ``add_weight``) lands on the current
device, which costs one host->device copy per weight, once, at creation.

>>> import gputape as gt
>>> w = gt.nn.initializers.get("glorot_uniform")((64, 32), "float32")
>>> w.shape, str(w.dtype), bool(abs(w).max() <= (6 / 96) ** 0.5)
((64, 32), 'float32', True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import random as _random
from ._config import constructor_kwargs

__all__ = [
    "Constant",
    "GlorotNormal",
    "GlorotUniform",
    "HeNormal",
    "HeUniform",
    "Initializer",
    "LecunNormal",
    "LecunUniform",
    "Ones",
    "RandomNormal",
    "RandomUniform",
    "TruncatedNormal",
    "VarianceScaling",
    "Zeros",
    "config_of",
    "get",
    "serialize",
]


class Initializer:
    """Base class: ``__call__(shape, dtype='float32')`` returns a host numpy array.

    >>> import gputape as gt, numpy as np
    >>> class Arange(gt.nn.initializers.Initializer):
    ...     def __call__(self, shape, dtype="float32"):
    ...         return np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    >>> gt.nn.Dense(2, kernel_initializer=Arange())(np.ones((1, 2))).numpy().tolist()
    [[2.0, 4.0]]
    """

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments under Keras' keys (Keras' ``Initializer.get_config``).

        >>> import gputape as gt
        >>> gt.nn.initializers.RandomNormal(stddev=0.1).get_config()
        {'mean': 0.0, 'stddev': 0.1, 'seed': None}
        """
        return {k: getattr(self, k) for k in self._keys}

    _keys: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Initializer:
        """A new initializer from ``get_config()``'s dict, or from a Keras 3 config.

        >>> import gputape as gt
        >>> gt.nn.initializers.Constant.from_config({"value": 2.0})((1,)).tolist()
        [2.0]
        """
        return cls(**constructor_kwargs(cls, config, cls.__name__))


class Zeros(Initializer):
    """All zeros (Keras ``'zeros'``), the usual bias initializer.

    >>> import gputape as gt
    >>> gt.nn.initializers.Zeros()((2,)).tolist()
    [0.0, 0.0]
    """

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        return np.zeros(_shape(shape), dtype)


class Ones(Initializer):
    """All ones (Keras ``'ones'``).

    >>> import gputape as gt
    >>> gt.nn.initializers.Ones()((2,)).tolist()
    [1.0, 1.0]
    """

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        return np.ones(_shape(shape), dtype)


class Constant(Initializer):
    """Every entry equal to ``value``.

    >>> import gputape as gt
    >>> gt.nn.initializers.Constant(0.5)((2,)).tolist()
    [0.5, 0.5]
    """

    _keys = ("value",)

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        return np.full(_shape(shape), self.value, dtype)


class _Random(Initializer):
    # seeded initializers draw from their own generator, the others from gt.random's
    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def _rng(self) -> np.random.Generator:
        return _random.generator(self.seed)


class RandomNormal(_Random):
    """Normal draws, ``mean=0.0, stddev=0.05`` by default (Keras' ``'random_normal'``).

    >>> import gputape as gt
    >>> w = gt.nn.initializers.RandomNormal(seed=0)((400, 300))
    >>> bool(abs(w.std() - 0.05) < 0.001 and abs(w.mean()) < 0.001)
    True
    """

    _keys = ("mean", "stddev", "seed")

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        return self._rng().normal(self.mean, self.stddev, _shape(shape)).astype(dtype)


class RandomUniform(_Random):
    """Uniform draws in ``[minval, maxval)``, ``[-0.05, 0.05)`` by default (Keras' ``'random_uniform'``).

    >>> import gputape as gt
    >>> w = gt.nn.initializers.RandomUniform(seed=0)((1000,))
    >>> bool(w.min() >= -0.05 and w.max() < 0.05)
    True
    """

    _keys = ("minval", "maxval", "seed")

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.minval, self.maxval = float(minval), float(maxval)

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        return self._rng().uniform(self.minval, self.maxval, _shape(shape)).astype(dtype)


class TruncatedNormal(_Random):
    """Normal draws redrawn beyond two standard deviations (Keras' ``'truncated_normal'``, ``stddev=0.05``).

    >>> import gputape as gt
    >>> w = gt.nn.initializers.TruncatedNormal(seed=0)((1000,))
    >>> bool(abs(w).max() <= 0.1)
    True
    """

    _keys = ("mean", "stddev", "seed")

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        return (self.mean + _truncated_normal(self._rng(), self.stddev, _shape(shape))).astype(dtype)


class VarianceScaling(Initializer):
    """Keras' ``VarianceScaling``: variance ``scale / n`` with ``n`` the fan in, out or their mean.

    ``distribution`` is ``'uniform'``, ``'truncated_normal'`` (cut at two
    standard deviations and rescaled so the variance is still ``scale / n``,
    as Keras does) or ``'untruncated_normal'``.

    >>> import gputape as gt
    >>> init = gt.nn.initializers.VarianceScaling(2.0, "fan_in", "truncated_normal", seed=0)
    >>> w = init((400, 300))
    >>> bool(abs(w.std() - (2 / 400) ** 0.5) < 0.002)
    True
    """

    _keys: tuple[str, ...] = ("scale", "mode", "distribution", "seed")

    def __init__(
        self,
        scale: float = 1.0,
        mode: str = "fan_in",
        distribution: str = "truncated_normal",
        seed: int | None = None,
    ) -> None:
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"VarianceScaling: mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")
        if distribution == "normal":
            distribution = "truncated_normal"  # Keras' old spelling
        if distribution not in ("uniform", "truncated_normal", "untruncated_normal"):
            raise ValueError(
                "VarianceScaling: distribution must be 'uniform', 'truncated_normal' or 'untruncated_normal', "
                f"got {distribution!r}"
            )
        self.scale, self.mode, self.distribution, self.seed = float(scale), mode, distribution, seed

    def __call__(self, shape: Any, dtype: Any = "float32") -> np.ndarray:
        shape = _shape(shape)
        fan_in, fan_out = _fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        var = self.scale / max(1.0, n)
        rng = _random.generator(self.seed)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * var)
            out = rng.uniform(-limit, limit, shape)
        elif self.distribution == "untruncated_normal":
            out = rng.normal(0.0, math.sqrt(var), shape)
        else:
            # 0.8796... is the stddev of a unit normal truncated to [-2, 2].
            out = _truncated_normal(rng, math.sqrt(var) / 0.87962566103423978, shape)
        return out.astype(dtype)


class GlorotUniform(VarianceScaling):
    """Uniform in ``±sqrt(6 / (fan_in + fan_out))`` (Keras' default kernel initializer).

    >>> import gputape as gt
    >>> w = gt.nn.initializers.GlorotUniform(seed=1)((10, 6))
    >>> bool(abs(w).max() <= (6 / 16) ** 0.5)
    True
    """

    _keys = ("seed",)

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "uniform", seed)


class GlorotNormal(VarianceScaling):
    """Truncated normal with variance ``2 / (fan_in + fan_out)``.

    >>> import gputape as gt
    >>> gt.nn.initializers.GlorotNormal(seed=1)((10, 6)).shape
    (10, 6)
    """

    _keys = ("seed",)

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)


class HeUniform(VarianceScaling):
    """Uniform in ``±sqrt(6 / fan_in)``, for ReLU layers.

    >>> import gputape as gt
    >>> w = gt.nn.initializers.HeUniform(seed=1)((24, 5))
    >>> bool(abs(w).max() <= (6 / 24) ** 0.5)
    True
    """

    _keys = ("seed",)

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "uniform", seed)


class HeNormal(VarianceScaling):
    """Truncated normal with variance ``2 / fan_in``, for ReLU layers.

    >>> import gputape as gt
    >>> gt.nn.initializers.HeNormal(seed=1)((24, 5)).shape
    (24, 5)
    """

    _keys = ("seed",)

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "truncated_normal", seed)


class LecunNormal(VarianceScaling):
    """Truncated normal with variance ``1 / fan_in`` (for SELU networks).

    >>> import gputape as gt
    >>> gt.nn.initializers.LecunNormal(seed=1)((24, 5)).shape
    (24, 5)
    """

    _keys = ("seed",)

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "truncated_normal", seed)


class LecunUniform(VarianceScaling):
    """Uniform in ``±sqrt(3 / fan_in)``.

    >>> import gputape as gt
    >>> w = gt.nn.initializers.LecunUniform(seed=1)((12, 5))
    >>> bool(abs(w).max() <= (3 / 12) ** 0.5)
    True
    """

    _keys = ("seed",)

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "uniform", seed)


_BY_NAME: dict[str, Callable[[], Initializer]] = {
    "zeros": Zeros,
    "ones": Ones,
    "glorot_uniform": GlorotUniform,
    "glorot_normal": GlorotNormal,
    "he_uniform": HeUniform,
    "he_normal": HeNormal,
    "xavier_uniform": GlorotUniform,
    "xavier_normal": GlorotNormal,
    "lecun_normal": LecunNormal,
    "lecun_uniform": LecunUniform,
    "random_normal": RandomNormal,
    "random_uniform": RandomUniform,
    "truncated_normal": TruncatedNormal,
    "constant": Constant,
    "variance_scaling": VarianceScaling,
    # Keras' aliases
    "normal": RandomNormal,
    "uniform": RandomUniform,
    "one": Ones,
    "zero": Zeros,
}


_BY_CLASS: dict[str, type[Initializer]] = {
    c.__name__: c
    for c in (
        Zeros,
        Ones,
        Constant,
        RandomNormal,
        RandomUniform,
        TruncatedNormal,
        VarianceScaling,
        GlorotUniform,
        GlorotNormal,
        HeUniform,
        HeNormal,
        LecunNormal,
        LecunUniform,
    )
}


def serialize(init: Any, what: str = "initializer") -> dict[str, Any]:
    """``init`` as Keras 3 serializes an initializer in a model's config (``keras.initializers.serialize``).

    A callable that is not one of gputape's initializers has no config to write:
    ``ValueError`` names ``what``.

    >>> import gputape as gt
    >>> gt.nn.initializers.serialize(gt.nn.initializers.get("zeros"))["class_name"]
    'Zeros'
    """
    if type(init).__name__ not in _BY_CLASS or not isinstance(init, Initializer):
        raise ValueError(
            f"{what}: {init!r} is not one of gputape's initializers ({sorted(_BY_CLASS)}), so a Keras config "
            "cannot name it; build the layer with an initializer's name (such as 'glorot_uniform') to save its config"
        )
    return {
        "module": "keras.initializers",
        "class_name": type(init).__name__,
        "config": init.get_config(),
        "registered_name": None,
    }


def config_of(init: Any) -> Any:
    """What a layer's ``get_config`` holds for ``init``: Keras' dict when gputape can write one, else ``init`` itself.

    >>> import gputape as gt
    >>> gt.nn.initializers.config_of(gt.nn.initializers.Ones())["class_name"]
    'Ones'
    """
    try:
        return serialize(init)
    except ValueError:
        return init  # a callable of the user's: get_config shows it; saving a .keras file refuses it by name


def get(identifier: str | dict[str, Any] | Callable[..., Any]) -> Callable[..., Any]:
    """An initializer from its Keras name (``'he_normal'``, ``'random_normal'``, ``'HeNormal'``), a Keras 3 config
    dict (``{"class_name": "GlorotUniform", "config": {...}}``) or a callable.

    >>> import gputape as gt
    >>> [type(gt.nn.initializers.get(n)).__name__ for n in ("he_normal", "random_normal", "GlorotUniform", "uniform")]
    ['HeNormal', 'RandomNormal', 'GlorotUniform', 'RandomUniform']
    """
    if callable(identifier):
        return identifier
    if isinstance(identifier, dict):  # Keras' serialized form, as in a .keras file's config
        cls = _BY_CLASS.get(str(identifier.get("class_name")))
        if cls is None:
            raise ValueError(
                f"unknown initializer {identifier.get('class_name')!r} in a Keras config; gputape has "
                f"{sorted(_BY_CLASS)} (or pass your own class in custom_objects)"
            )
        return cls.from_config(identifier.get("config") or {})
    if isinstance(identifier, str):
        from ..core.module import _snake

        key = _snake(identifier)
        if key in _BY_NAME:
            return _BY_NAME[key]()
        raise ValueError(f"unknown initializer {identifier!r}; use one of {sorted(_BY_NAME)} or a callable")
    raise TypeError(f"initializer must be a name or a callable (shape, dtype) -> array, got {identifier!r}")


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def _fans(shape: tuple[int, ...]) -> tuple[float, float]:
    if len(shape) == 0:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    receptive = math.prod(shape[:-2])
    return float(shape[-2] * receptive), float(shape[-1] * receptive)


def _truncated_normal(rng: np.random.Generator, std: float, shape: tuple[int, ...]) -> np.ndarray:
    out = rng.normal(0.0, 1.0, shape)
    bad = np.abs(out) > 2.0
    while bad.any():  # redraw only the tails: about 5% per round
        out[bad] = rng.normal(0.0, 1.0, int(bad.sum()))
        bad = np.abs(out) > 2.0
    return out * std
