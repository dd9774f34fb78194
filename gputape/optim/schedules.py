"""Learning-rate schedules (``gt.optim.ExponentialDecay``, ...) and the hyperparameter checks of gt.optim.

Every hyperparameter is checked when an optimizer or schedule is made: ``TypeError``
for a wrong type, ``ValueError`` naming the class, the parameter, its value and the
valid range. Re-exported by :mod:`gputape.optim`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

# -- hyperparameter checks ------------------------------------------------------------------


def _interval(low: float, high: float, low_open: bool, high_open: bool) -> str:
    hi = "inf)" if high == math.inf else f"{high:g}{')' if high_open else ']'}"
    return f"{'(' if low_open else '['}{low:g}, {hi}"


def _real(
    owner: str,
    name: str,
    value: Any,
    low: float = 0.0,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a float, or a TypeError/ValueError naming ``owner``, ``name``, the value and the range.

    Infinity is never in range (an infinite rate or norm only makes NaNs).

    >>> _real("SGD", "momentum", 0.5, 0.0, 1.0)
    0.5
    >>> _real("SGD", "momentum", 1.5, 0.0, 1.0)
    Traceback (most recent call last):
    ValueError: SGD: momentum must be a number in [0, 1], got 1.5
    """
    rng = _interval(low, high, low_open, high_open)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a number in {rng}, got {value!r} of type {type(value).__name__}")
    x = float(value)
    above = x > low if low_open else x >= low
    below = x < high if (high_open or high == math.inf) else x <= high
    if not (above and below):  # NaN fails both comparisons
        raise ValueError(f"{owner}: {name} must be a number in {rng}, got {value!r}")
    return x


def _integer(owner: str, name: str, value: Any, low: int) -> int:
    """``value`` as an int >= ``low`` (a float with an integral value is accepted)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {name} must be an integer >= {low}, got {value!r} of type {type(value).__name__}")
    if value < low:
        raise ValueError(f"{owner}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _steps(x: float) -> float | int:
    return int(x) if x.is_integer() else x  # an int stays one (in repr and in get_config-like use)


def _flag(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}: {name} must be True or False, got {value!r} of type {type(value).__name__}")
    return bool(value)


def _rate(owner: str, name: str, value: Any) -> float:
    """A learning rate: a finite number >= 0 (0 is allowed: it freezes the variables, as in Keras)."""
    return _real(owner, name, value)


# -- learning-rate schedules ----------------------------------------------------------


class LearningRateSchedule:
    """Base class: ``schedule(step) -> float``; pass one as an optimizer's ``learning_rate``.

    The optimizer calls it with the number of steps taken so far (0 on the
    first step), as Keras does.

    >>> import gputape as gt
    >>> class Halving(gt.optim.LearningRateSchedule):
    ...     def __call__(self, step):
    ...         return 1.0 / 2 ** step
    >>> [Halving()(s) for s in range(3)]
    [1.0, 0.5, 0.25]
    """

    def __call__(self, step: int) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class StepDecay(LearningRateSchedule):
    """``initial_learning_rate * gamma ** (step // step_size)`` (PyTorch's ``StepLR``).

    >>> import gputape as gt
    >>> s = gt.optim.StepDecay(0.1, step_size=10, gamma=0.5)
    >>> [s(0), s(9), s(10), s(25)]
    [0.1, 0.1, 0.05, 0.025]
    """

    def __init__(self, initial_learning_rate: float, step_size: int, gamma: float = 0.1) -> None:
        self.initial_learning_rate = _rate("StepDecay", "initial_learning_rate", initial_learning_rate)
        self.step_size = _integer("StepDecay", "step_size", step_size, 1)
        self.gamma = _real("StepDecay", "gamma", gamma)

    def __call__(self, step: int) -> float:
        return self.initial_learning_rate * self.gamma ** (int(step) // self.step_size)


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[i]`` while ``step <= boundaries[i]`` (TensorFlow's rule), ``values[-1]`` after.

    >>> import gputape as gt
    >>> s = gt.optim.PiecewiseConstantDecay([100, 200], [1.0, 0.5, 0.1])
    >>> [s(0), s(100), s(101), s(201)]
    [1.0, 1.0, 0.5, 0.1]
    """

    def __init__(self, boundaries: list[int], values: list[float]) -> None:
        boundaries, values = list(boundaries), list(values)
        if len(values) != len(boundaries) + 1:
            raise ValueError(
                f"PiecewiseConstantDecay: need one more value than boundaries, got {len(boundaries)} boundaries "
                f"and {len(values)} values"
            )
        for i, b in enumerate(boundaries):
            _real("PiecewiseConstantDecay", f"boundaries[{i}]", b, -math.inf)
            if i and not b > boundaries[i - 1]:
                raise ValueError(
                    f"PiecewiseConstantDecay: boundaries must be strictly increasing, got {boundaries[i - 1]!r} "
                    f"then {b!r} at boundaries[{i}]"
                )
        self.boundaries = boundaries
        self.values = [_rate("PiecewiseConstantDecay", f"values[{i}]", v) for i, v in enumerate(values)]

    def __call__(self, step: int) -> float:
        for b, v in zip(self.boundaries, self.values):
            if step <= b:
                return v
        return self.values[-1]


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``; integer exponent with ``staircase``.

    >>> import gputape as gt
    >>> s = gt.optim.ExponentialDecay(1.0, decay_steps=10, decay_rate=0.5)
    >>> [s(0), s(10), round(s(5), 4), gt.optim.ExponentialDecay(1.0, 10, 0.5, staircase=True)(15)]
    [1.0, 0.5, 0.7071, 0.5]
    """

    def __init__(
        self, initial_learning_rate: float, decay_steps: int, decay_rate: float, staircase: bool = False
    ) -> None:
        self.initial_learning_rate = _rate("ExponentialDecay", "initial_learning_rate", initial_learning_rate)
        self.decay_steps = _steps(_real("ExponentialDecay", "decay_steps", decay_steps, low_open=True))
        # a negative rate to a fractional power is complex; above 1 the rate grows (Keras allows it)
        self.decay_rate = _real("ExponentialDecay", "decay_rate", decay_rate)
        self.staircase = _flag("ExponentialDecay", "staircase", staircase)

    def __call__(self, step: int) -> float:
        p = step / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return self.initial_learning_rate * self.decay_rate**p


class CosineDecay(LearningRateSchedule):
    """Cosine decay from ``initial_learning_rate`` to ``alpha`` times it over ``decay_steps`` (Keras).

    With ``warmup_target`` set, the rate first rises linearly from
    ``initial_learning_rate`` to ``warmup_target`` over ``warmup_steps``, then
    decays from ``warmup_target``.

    >>> import gputape as gt
    >>> s = gt.optim.CosineDecay(1.0, decay_steps=100, alpha=0.1)
    >>> [s(0), round(s(50), 4), round(s(100), 4), round(s(1000), 4)]
    [1.0, 0.55, 0.1, 0.1]
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        alpha: float = 0.0,
        warmup_target: float | None = None,
        warmup_steps: int = 0,
    ) -> None:
        self.initial_learning_rate = _rate("CosineDecay", "initial_learning_rate", initial_learning_rate)
        self.decay_steps = _steps(_real("CosineDecay", "decay_steps", decay_steps, low_open=True))
        self.alpha = _real("CosineDecay", "alpha", alpha, 0.0, 1.0)  # the final rate as a fraction of the first
        self.warmup_target = None if warmup_target is None else _rate("CosineDecay", "warmup_target", warmup_target)
        self.warmup_steps = _integer("CosineDecay", "warmup_steps", warmup_steps, 0)

    def __call__(self, step: int) -> float:
        if self.warmup_target is None:
            start = self.initial_learning_rate
        else:
            if step < self.warmup_steps:
                frac = step / self.warmup_steps
                return self.initial_learning_rate + frac * (self.warmup_target - self.initial_learning_rate)
            start, step = self.warmup_target, step - self.warmup_steps
        done = min(step, self.decay_steps) / self.decay_steps
        cosine = 0.5 * (1.0 + math.cos(math.pi * done))
        return start * ((1.0 - self.alpha) * cosine + self.alpha)


__all__ = ["CosineDecay", "ExponentialDecay", "LearningRateSchedule", "PiecewiseConstantDecay", "StepDecay"]
