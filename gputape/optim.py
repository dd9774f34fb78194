"""Optimizers, learning-rate schedules and gradient clipping (``gt.optim``).

The optimizers follow Keras 3's update rules exactly, so numbers match a
TensorFlow program step for step. ``apply_gradients(zip(grads, vars))``
updates each Variable through ``assign_sub``/``assign_add``: in place when no
tape holds the variable's current value, and copy-on-write when one does, so
a persistent tape's gradient stays the one for the values it recorded.
Slots (momentum, second moments) are plain device arrays, never tracked by
tapes; ``get_state``/``set_state`` expose them for checkpoints.

Fail-safe rules: every hyperparameter is checked when the optimizer or schedule
is made (``TypeError`` for a wrong type, ``ValueError`` naming the class, the
parameter, its value and the valid range), and a learning rate that a schedule
or callable produces is checked at the step that uses it. A step is all or
nothing: every new value is computed first, then all of them are committed
together with Ctrl-C held off (:func:`gputape._state.defer_interrupts`), so an
exception or a KeyboardInterrupt leaves every variable, slot and
``iterations`` as they were before the step or as the whole step leaves them.

>>> import gputape as gt
>>> w = gt.Variable([1.0, -2.0], name="w")
>>> opt = gt.optim.Adam(learning_rate=0.1)
>>> for _ in range(3):
...     with gt.GradientTape() as tape:
...         loss = gt.sum(w * w)
...     opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
1
2
3
>>> [round(float(x), 3) for x in w]
[0.702, -1.701]
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import _optim_rules as _rules
from . import _state, backend
from ._optim_fused import FusedOptimizer
from ._state import defer_interrupts
from .ops import maximum, sqrt, square, where
from .ops import sum as _sum
from .ops._util import norm_list
from .tape import GputapeWarning, GradientTape
from .tensor import Tensor, Variable, _wrap, as_tensor, constant

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "CosineDecay",
    "ExponentialDecay",
    "LearningRateSchedule",
    "Optimizer",
    "PiecewiseConstantDecay",
    "RMSprop",
    "StepDecay",
    "clip_by_global_norm",
    "clip_by_norm",
    "global_norm",
]


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


# -- clipping -------------------------------------------------------------------------


def global_norm(t_list: Iterable[Any]) -> Tensor:
    """``sqrt(sum of squares of every entry of every tensor)``; None entries are skipped.

    >>> import gputape as gt
    >>> float(gt.global_norm([gt.constant([3.0]), None, gt.constant([[4.0]])]))
    5.0
    """
    total = None
    for t in norm_list(t_list, "global_norm", "a list of tensors"):
        if t is None:
            continue
        s = _sum(square(as_tensor(t)))
        total = s if total is None else total + s
    return sqrt(total) if total is not None else constant(0.0)


def clip_by_global_norm(t_list: Iterable[Any], clip_norm: float, use_norm: Any = None) -> tuple[list[Any], Tensor]:
    """Scale all tensors by ``clip_norm / max(global_norm, clip_norm)``; returns ``(clipped, global_norm)``.

    TensorFlow's function: None entries stay None; the returned norm is the
    norm before clipping; a non-finite norm makes every entry NaN, so a
    diverged step is visible rather than silently zeroed.

    >>> import gputape as gt
    >>> clipped, norm = gt.clip_by_global_norm([gt.constant([3.0]), gt.constant([4.0])], 1.0)
    >>> [round(float(c[0]), 2) for c in clipped], float(norm)
    ([0.6, 0.8], 5.0)
    """
    t_list = norm_list(t_list, "clip_by_global_norm", "a list of tensors")
    clip = _real("gt.clip_by_global_norm", "clip_norm", clip_norm, low_open=True)
    norm = global_norm(t_list) if use_norm is None else as_tensor(use_norm)
    with np.errstate(invalid="ignore"):
        # norm - norm is 0 for a finite norm and NaN otherwise (TensorFlow's trick).
        scale = clip / maximum(norm, clip) + (norm - norm)
        out = [None if t is None else as_tensor(t) * scale.astype(as_tensor(t).dtype) for t in t_list]
    return out, norm


def clip_by_norm(t: Any, clip_norm: float, axes: Any = None) -> Tensor:
    """Scale ``t`` so that its L2 norm (over ``axes``, all by default) is at most ``clip_norm``.

    Differentiable everywhere, including at ``t == 0``. A number ``clip_norm``
    must be in (0, inf) (checked; a tensor or array is used as given).

    >>> import gputape as gt
    >>> gt.clip_by_norm(gt.constant([3.0, 4.0], "float64"), 1.0).numpy().round(2).tolist()
    [0.6, 0.8]
    >>> gt.clip_by_norm(gt.constant([[3.0, 0.1], [4.0, 0.0]], "float64"), 1.0, axes=0).numpy().round(2).tolist()
    [[0.6, 0.1], [0.8, 0.0]]
    """
    if not hasattr(clip_norm, "shape"):  # tensors and arrays are used as given
        clip_norm = _real("gt.clip_by_norm", "clip_norm", clip_norm, low_open=True)
    t = as_tensor(t)
    l2sum = _sum(t * t, axis=axes, keepdims=True)
    pos = l2sum > 0
    # sqrt only where positive: its derivative at 0 is infinite (TensorFlow's guard).
    norm = where(pos, sqrt(where(pos, l2sum, 1.0)), l2sum)
    return t * clip_norm / maximum(norm, clip_norm)


# -- optimizers -----------------------------------------------------------------------


def _same_host_kind(a: np.ndarray, d: Any) -> bool:
    return type(d) is np.ndarray and a.shape == d.shape and a.dtype == d.dtype


def _raw(g: Any, var: Variable, owner: str) -> Any:
    """The gradient as an array of the variable's shape, dtype and device; anything else raises here."""
    d = var._data
    if isinstance(g, Tensor):
        a = g._data
        if (type(a) is not np.ndarray or type(d) is not np.ndarray) and backend.device_of(a) != backend.device_of(d):
            raise ValueError(
                f"{owner}.apply_gradients: the gradient for variable {var.name!r} is on {backend.device_of(a)}, "
                f"the variable on {backend.device_of(d)}; move it with .to({var.device!r}) first"
            )
    else:
        a = backend.asarray_on(g, var.device)
    if a.shape != d.shape:
        raise ValueError(
            f"{owner}.apply_gradients: gradient of shape {a.shape} for variable {var.name!r} of shape {var.shape}"
        )
    if a.dtype == d.dtype:
        return a
    if not np.can_cast(a.dtype, d.dtype, casting="same_kind"):
        raise TypeError(
            f"{owner}.apply_gradients: a gradient of dtype {a.dtype} cannot update variable {var.name!r} of dtype "
            f"{d.dtype} (it would lose information, e.g. an imaginary part); pass a real gradient"
        )
    return a.astype(d.dtype)


class Optimizer:
    """Base class: Keras' ``apply_gradients``, schedules, clipping, weight decay and state.

    Subclasses list their slot names and define
    ``_compute(g, lr, slots, out, step) -> (delta, add)`` on raw device arrays:
    it writes every slot's new value into ``out[name]`` (a spare buffer of the
    slot's shape and dtype), changes nothing else, and returns the increment
    and whether the variable gets ``+= delta`` (``add=True``) or ``-= delta``;
    the commit swaps ``out`` and ``slots`` and applies the increment.

    ``learning_rate`` is a number, a :class:`LearningRateSchedule`, a callable
    ``f(step) -> rate`` or a 0-d tensor (read at every step); reading
    ``opt.learning_rate`` gives the rate the next step will use. ``clipnorm``
    clips each gradient's norm, ``global_clipnorm`` their joint norm;
    ``weight_decay`` is decoupled (``w -= lr * weight_decay * w`` before the
    update), as in Keras.

    Every hyperparameter is checked here: a learning rate and ``weight_decay``
    must be finite and >= 0, ``clipnorm``/``global_clipnorm`` finite and > 0
    (each class adds its own ranges). A schedule's rate is checked at the step
    that uses it, before anything changes. Values set as attributes later
    (``opt.clipnorm = ...``) are not checked; ``opt.learning_rate = ...`` is.

    >>> import gputape as gt
    >>> opt = gt.optim.SGD(learning_rate=gt.optim.StepDecay(0.1, 1, 0.5))
    >>> w = gt.Variable([1.0])
    >>> opt.apply_gradients([(gt.constant([1.0]), w)]), opt.learning_rate, round(float(w[0]), 4)
    (1, 0.05, 0.9)
    >>> gt.optim.SGD(-0.1)
    Traceback (most recent call last):
    ValueError: SGD: learning_rate must be a number in [0, inf), got -0.1
    """

    slot_names: tuple[str, ...] = ()

    def __init__(
        self,
        learning_rate: float | Callable[[int], float],
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        global_clipnorm: float | None = None,
        name: str | None = None,
    ) -> None:
        owner = type(self).__name__
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a string or None, got {name!r} of type {type(name).__name__}")
        if clipnorm is not None and global_clipnorm is not None:
            raise ValueError(
                f"{owner}: set at most one of clipnorm and global_clipnorm, got clipnorm={clipnorm!r} and "
                f"global_clipnorm={global_clipnorm!r}"
            )
        self.name = name or owner
        self.learning_rate = learning_rate  # the setter checks it
        self.weight_decay = None if weight_decay is None else _real(owner, "weight_decay", weight_decay)
        self.clipnorm = None if clipnorm is None else _real(owner, "clipnorm", clipnorm, low_open=True)
        self.global_clipnorm = (
            None if global_clipnorm is None else _real(owner, "global_clipnorm", global_clipnorm, low_open=True)
        )
        # The step count, as in Keras: a 0-d int64 non-trainable Variable. It lives in host
        # memory whatever the device, so that each step reads it as a Python int for almost nothing
        # (int() of a 0-d numpy array) and there is no second copy to fall out of step with it.
        self._iterations = Variable(np.zeros((), np.int64), trainable=False, name="iteration")
        # id(var) -> [var, slots, spare slots]. The variable is held so its id cannot be
        # reused by a new object that would then inherit stale slots.
        self._slots: dict[int, list[Any]] = {}
        self._warned_none: set[int] = set()

    # -- step count ----------------------------------------------------------------------
    @property
    def iterations(self) -> Variable:
        """The number of steps taken: a 0-d int64 non-trainable Variable (Keras' ``optimizer.iterations``).

        ``int(opt.iterations)`` and ``opt.iterations.numpy()`` read it; assigning
        ``opt.iterations = n`` (or ``opt.iterations.assign(n)``) sets it, e.g. to
        resume a schedule. It is kept in host memory: move it with ``.to(device)``
        (or ``gt.cast`` it) to compute with it on a GPU. Inside ``gt.function`` it is
        read at every call, so a compiled step sees the current count.

        >>> import gputape as gt
        >>> opt = gt.optim.SGD(0.1)
        >>> _ = opt.apply_gradients([(gt.constant([1.0]), gt.Variable([1.0]))])
        >>> opt.iterations
        <gt.Variable 'iteration' shape=() dtype=int64, numpy=1>
        >>> int(opt.iterations), opt.iterations.trainable
        (1, False)
        """
        return self._iterations

    @iterations.setter
    def iterations(self, value: Any) -> None:
        n = value.numpy() if isinstance(value, Tensor) else value
        if isinstance(n, np.ndarray) and n.shape == ():
            n = n.item()
        n = _integer(self.name, "iterations", n, 0)
        if n >= 2**63:
            raise ValueError(f"{self.name}: iterations must be an integer in [0, 2**63) (int64), got {n}")
        self._iterations.assign(np.asarray(n, np.int64))

    def _step_count(self) -> int:
        return int(self._iterations._data)  # host memory: no device synchronisation

    def _count_step(self, step: int) -> None:
        # A new 0-d array rather than a write into the old one: a value read earlier (a tensor
        # from opt.iterations.value()) keeps the count it had, as after Variable.assign, and this is
        # ~10x cheaper than assign() on the step's path. gt.function replays the whole optimizer
        # step, so the count needs no trace record of its own.
        self._iterations._data = np.array(step, np.int64)

    # -- learning rate -----------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The rate the next step uses (a schedule is evaluated at ``iterations``); assign a number or schedule.

        >>> import gputape as gt
        >>> opt = gt.optim.SGD(gt.optim.StepDecay(0.1, step_size=1, gamma=0.5))
        >>> opt.learning_rate
        0.1
        >>> opt.learning_rate = 0.3; opt.learning_rate
        0.3
        """
        return self._rate_at(self._step_count())

    @learning_rate.setter
    def learning_rate(self, value: float | Callable[[int], float]) -> None:
        if callable(value):
            self._learning_rate: Any = value
        elif isinstance(value, (Tensor, np.ndarray)):  # read at every step (a Variable can change), checked then
            self._learning_rate = value
            self._rate_at(self._step_count() if hasattr(self, "_iterations") else 0)
        elif isinstance(value, (str, bytes)):
            raise TypeError(
                f"{type(self).__name__}: learning_rate must be a number in [0, inf), a LearningRateSchedule or "
                f"a callable step -> rate, got the string {value!r}; pass a number, e.g. {type(self).__name__}(0.01)"
            )
        else:
            self._learning_rate = _rate(type(self).__name__, "learning_rate", value)

    def _rate_at(self, step: int) -> float:
        lr = self._learning_rate
        if type(lr) is float:  # checked when it was set
            return lr
        value = lr(step) if callable(lr) else lr
        try:
            if isinstance(value, (str, bytes, bool, np.bool_)):
                raise TypeError
            rate = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"{self.name}: the learning rate {lr!r} gave {value!r} of type {type(value).__name__} at step {step}; "
                "a learning rate must be a real number"
            ) from None
        if not (0.0 <= rate < math.inf):
            raise ValueError(
                f"{self.name}: the learning rate {lr!r} gave {rate!r} at step {step}; a learning rate must be a "
                "number in [0, inf)"
            )
        return rate

    # -- slots ---------------------------------------------------------------------------
    def build(self, var_list: Iterable[Variable]) -> None:
        """Create the slots of each variable (``apply_gradients`` does it on first sight).

        >>> import gputape as gt
        >>> opt = gt.optim.Adam(); opt.build([gt.Variable([1.0, 2.0])])
        >>> [sorted(s) for _, s in opt.get_state()["slots"]]
        [['momentum', 'velocity']]
        """
        for v in var_list:
            self._slots_for(v)

    def _slots_for(self, var: Variable) -> dict[str, Any]:
        entry = self._slots.get(id(var))
        if entry is None:
            entry = self._slots[id(var)] = self._new_entry(var)
        return entry[1]

    def _new_entry(self, var: Variable) -> list[Any]:
        """``[var, slots, spare]``: zero slots; ``spare`` is made by :meth:`_spares` when needed."""
        xp = backend.xp_of(var._data)
        return [var, {n: xp.zeros(var.shape, var.dtype) for n in self.slot_names}, None]

    @staticmethod
    def _spares(entry: list[Any]) -> dict[str, Any]:
        """A spare buffer for each slot of ``entry``, made once.

        A step writes the slots' new values into the spares and the commit swaps the two
        dicts, so a step allocates nothing for slots and the old values stay intact until
        the commit. The price: one more copy of the slots in memory (the one-launch GPU
        path updates in place and needs none).
        """
        var = entry[0]
        xp = backend.xp_of(var._data)
        spare = entry[2] = {n: xp.empty(var.shape, var.dtype) for n in entry[1]}
        return spare

    def get_state(self) -> dict[str, Any]:
        """``{'iterations': int, 'slots': [(variable, {slot name: numpy array}), ...]}`` (host copies).

        >>> import gputape as gt
        >>> w = gt.Variable([1.0])
        >>> opt = gt.optim.SGD(0.1, momentum=0.9)
        >>> _ = opt.apply_gradients([(gt.constant([1.0]), w)])
        >>> state = opt.get_state()
        >>> state["iterations"], state["slots"][0][0] is w, state["slots"][0][1]["momentum"].tolist()
        (1, True, [-0.10000000149011612])
        """
        return {
            "iterations": self._step_count(),
            "slots": [(v, {n: np.array(backend.to_host(a)) for n, a in s.items()}) for v, s, _ in self._slots.values()],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned; everything is checked before anything changes.

        >>> import gputape as gt, numpy as np
        >>> w = gt.Variable([1.0])
        >>> opt = gt.optim.SGD(0.1, momentum=0.9)
        >>> opt.set_state({"iterations": 5, "slots": [(w, {"momentum": np.array([0.5], "float32")})]})
        >>> int(opt.iterations), opt.get_state()["slots"][0][1]["momentum"].tolist()
        (5, [0.5])
        """
        try:
            iterations = int(state["iterations"])
            entries = list(state["slots"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{self.name}.set_state: expected {{'iterations': int, 'slots': [(variable, {{name: array}})]}} ({exc})"
            ) from None
        if not 0 <= iterations < 2**63:
            raise ValueError(f"{self.name}.set_state: iterations must be in [0, 2**63) (int64), got {iterations}")
        staged = []
        for var, slots in entries:
            if not isinstance(var, Variable):
                raise TypeError(f"{self.name}.set_state: slots must be keyed by Variables, got {type(var).__name__}")
            if set(slots) != set(self.slot_names):
                raise ValueError(
                    f"{self.name}.set_state: variable {var.name!r} has slots {sorted(slots)}, "
                    f"this optimizer uses {sorted(self.slot_names)}"
                )
            arrays = {}
            for n, a in slots.items():
                a = np.asarray(backend.to_host(a._data) if isinstance(a, Tensor) else a)
                if a.shape != var.shape:
                    raise ValueError(
                        f"{self.name}.set_state: slot {n!r} of variable {var.name!r} has shape {a.shape}, "
                        f"the variable has shape {var.shape}"
                    )
                arrays[n] = backend.asarray_on(a.astype(var.dtype), var.device)
            staged.append((var, arrays))
        with defer_interrupts():
            for var, arrays in staged:
                self._slots_for(var).update(arrays)
            self._count_step(iterations)

    # -- updating -------------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> int:
        """Apply one update step; returns the new ``iterations`` count.

        ``None`` gradients are skipped, with one :class:`~gputape.GputapeWarning`
        naming the variables the first time each one has none; if every
        gradient is None this raises ``ValueError`` (Keras' and TensorFlow's
        rule: the loss does not depend on any variable, usually a bug). No
        pairs at all (``apply_gradients([])``) is a no-op that leaves
        ``iterations`` as it is, as in Keras.

        The step is all or nothing: the gradients, the learning rate and every
        new value are computed before anything is assigned, and the
        assignments (variables, slots, ``iterations``) are committed together
        with a Ctrl-C held until they are done. So an error in any gradient, a
        schedule's NaN or a KeyboardInterrupt leaves the state of before the
        step or of after it, never a mix.

        >>> import gputape as gt
        >>> w = gt.Variable([1.0])
        >>> gt.optim.SGD(0.5).apply_gradients([(gt.constant([2.0]), w)]), w.numpy().tolist()
        (1, [0.0])
        >>> gt.optim.SGD(0.5).apply_gradients([])
        0
        """
        pairs = list(grads_and_vars)
        if not pairs:
            return self._step_count()
        live = []
        missing = []
        seen = set()
        for pair in pairs:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], Variable)):
                raise TypeError(
                    f"{self.name}.apply_gradients: expected (gradient, gt.Variable) pairs, as from "
                    f"zip(grads, model.trainable_variables); got {pair!r:.100}"
                )
            seen.add(id(pair[1]))
            if pair[0] is not None:
                live.append(pair)
            elif id(pair[1]) not in self._warned_none:
                missing.append(pair[1])
        if len(seen) < len(pairs):
            # one step reads every old value before it writes any, so a second update of the
            # same variable would silently overwrite the first
            twice = next(v for i, (_, v) in enumerate(pairs) if any(v is u for _, u in pairs[:i]))
            raise ValueError(
                f"{self.name}.apply_gradients: variable {twice.name!r} appears more than once; pass each variable "
                "once (add up its gradients first)"
            )
        if not live:
            raise ValueError(
                f"{self.name}.apply_gradients: no gradients provided for any variable "
                f"({', '.join(repr(v.name) for _, v in pairs)}); does the loss depend on them, and was it "
                "computed inside the GradientTape?"
            )
        if missing:
            self._warned_none.update(id(v) for v in missing)
            names = ", ".join(repr(v.name) for v in missing)
            warnings.warn(
                f"{self.name}.apply_gradients: gradients do not exist for variables [{names}]; they are not "
                "updated (they do not affect the loss, or were used outside the tape). Warned once per variable.",
                GputapeWarning,
                stacklevel=2,
            )
        tr = _state.current_trace()
        if tr is not None and tr.owned():
            # inside gt.function's trace: update now, and record the update as one replay
            # step, so replays rerun the learning-rate schedule and the step count
            return tr.optimizer_step(self, live)
        return self._apply_live(live)

    def _apply_live(self, live: list[tuple[Any, Variable]]) -> int:
        # Phase 1 computes every new value and changes nothing: whatever raises here
        # (a gradient's shape or dtype, a schedule's NaN, a Ctrl-C) leaves the state as it was.
        raw = []
        for g, v in live:
            a = g._data if isinstance(g, Tensor) else None
            # the common case in one test: a host gradient of the variable's shape and dtype. No
            # local name for v._data: a variable whose array is referenced looks shared (and is copied)
            if not (type(a) is np.ndarray and _same_host_kind(a, v._data)):
                a = _raw(g, v, self.name)
            raw.append((a, v))
        if self.clipnorm is not None or self.global_clipnorm is not None:
            raw = self._clip(raw)
        step = self._step_count() + 1
        lr = self._rate_at(step - 1)
        kind = self._fused_kind()
        if kind is not None and (
            self._fused_on_cpu
            or (backend.is_gpu_array(raw[0][1]._data) and all(backend.is_gpu_array(v._data) for _, v in raw))
        ):
            self._apply_fused(kind, raw, lr, step)
            return step
        wd = self.weight_decay
        compute = self._compute
        entries = self._slots if self.slot_names else None
        used, fresh, assigns = [], [], []
        for g, v in raw:
            if entries is None:
                slots = spare = _NOSLOTS
            else:
                entry = entries.get(id(v))
                if entry is None:
                    entry = self._new_entry(v)
                    fresh.append(entry)
                used.append(entry)
                slots, spare = entry[1], entry[2] or self._spares(entry)
            delta, add = compute(g, lr, slots, spare, step)
            if wd:
                assigns.append((v.assign_sub, _wrap(_rules.decoupled_decay(v._data, lr, wd))))
            assigns.append((v.assign_add if add else v.assign_sub, _wrap(delta)))
        # Phase 2 commits: reference swaps and assignments of arrays whose shapes, dtypes and
        # devices were checked above, with Ctrl-C held until the last one. assign_* keep
        # copy-on-write (a value a live tape holds is replaced, not changed); the copy that
        # makes is the one thing here that can still fail, and only by running out of memory.
        with defer_interrupts():
            for entry in used:
                entry[1], entry[2] = entry[2], entry[1]
            for entry in fresh:
                entries[id(entry[0])] = entry  # type: ignore[index]
            for assign, delta in assigns:
                assign(delta)
            self._count_step(step)
        return step

    # On GPU arrays, SGD/Adam/AdamW update every parameter in one kernel launch
    # (gputape._optim_fused.FusedOptimizer, whose numpy reference runs the same update_rule)
    # using this optimizer's own slot arrays, so get_state()/set_state() see the same state.
    _fused_on_cpu = False  # tests set it to run the same dispatch on the numpy reference

    def _fused_kind(self) -> str | None:
        return None

    def _apply_fused(self, kind: str, raw: list[tuple[Any, Variable]], lr: float, step: int) -> None:
        fused = self.__dict__.get("_fused")
        if fused is None:
            fused = FusedOptimizer(kind, lr, **self._fused_hyper())
            self._fused = fused
            self._fused_at = None
        params = [v for _, v in raw]
        fresh = {id(v): self._new_entry(v) for v in params if id(v) not in self._slots}
        entries = [self._slots.get(id(v)) or fresh[id(v)] for v in params]
        slots = [(e[1].get("momentum"), e[1].get("velocity")) for e in entries]
        # One launch updates variables and slots in place; FusedOptimizer checks every
        # parameter before it launches anything, so an error there changes nothing either. Its
        # numpy reference (the CPU run of this path) ignores floating-point errors as the kernel
        # does, so np.seterr(all="raise") cannot stop it halfway.
        with defer_interrupts(), np.errstate(all="ignore"):
            fused.learning_rate = lr  # a device-side fill on a GPU: no synchronisation
            if self._fused_at != step - 1:  # first use, or iterations restored by set_state()
                if fused._step is None:
                    fused._init_state(params[0]._data)
                fused.iterations = step - 1
            fused.update(params, [g for g, _ in raw], slots=slots)
            self._slots.update(fresh)
            self._fused_at = step
            self._count_step(step)

    def _fused_hyper(self) -> dict[str, Any]:
        return {}

    def _clip(self, raw: list[tuple[Any, Variable]]) -> list[tuple[Any, Variable]]:
        if self.clipnorm is not None:
            out = []
            for g, v in raw:
                n = math.sqrt(float(backend.xp_of(g).sum(g * g)))
                out.append((g * (self.clipnorm / n) if n > self.clipnorm else g, v))
            return out
        if self.global_clipnorm is not None:
            n = math.sqrt(math.fsum(float(backend.xp_of(g).sum(g * g)) for g, _ in raw))
            if n > self.global_clipnorm:
                return [(g * (self.global_clipnorm / n), v) for g, v in raw]
        return raw

    def _compute(self, g: Any, lr: float, slots: dict[str, Any], out: dict[str, Any], step: int) -> tuple[Any, bool]:
        raise NotImplementedError

    def minimize(self, loss: Any, var_list: Any, tape: GradientTape | None = None) -> int:
        """Compute gradients of ``loss`` (a zero-argument callable, or a tensor recorded by ``tape``) and apply them.

        >>> import gputape as gt
        >>> w = gt.Variable(3.0)
        >>> _ = gt.optim.SGD(0.25).minimize(lambda: w * w, [w])
        >>> float(w)
        1.5
        """
        if callable(var_list):
            var_list = var_list()
        var_list = list(var_list)
        if tape is None:
            if not callable(loss):
                raise TypeError(f"{self.name}.minimize: pass loss as a callable, or the tape that recorded it")
            with GradientTape() as tape:
                value = loss()
        else:
            value = loss
        grads = tape.gradient(value, var_list)
        return self.apply_gradients(zip(grads, var_list))

    def __repr__(self) -> str:
        return f"<{self.name} learning_rate={self._learning_rate!r} iterations={self._step_count()}>"


_NOSLOTS: dict[str, Any] = {}


class SGD(Optimizer):
    """Stochastic gradient descent, with optional (Nesterov) momentum, Keras' update.

    ``m = momentum * m - lr * g``; ``w += m`` (or ``w += momentum * m - lr * g``
    with ``nesterov=True``); plain ``w -= lr * g`` when ``momentum == 0``.
    ``momentum`` must be in [0, 1] (Keras' range).

    >>> import gputape as gt
    >>> w = gt.Variable([1.0])
    >>> opt = gt.optim.SGD(0.1, momentum=0.9)
    >>> for _ in range(2):
    ...     _ = opt.apply_gradients([(gt.constant([1.0]), w)])
    >>> round(float(w[0]), 4)
    0.71
    """

    def __init__(
        self,
        learning_rate: float | Callable[[int], float] = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(learning_rate, **kw)
        self.momentum = _real(type(self).__name__, "momentum", momentum, 0.0, 1.0)
        self.nesterov = _flag(type(self).__name__, "nesterov", nesterov)
        self.slot_names = ("momentum",) if self.momentum else ()

    def _fused_kind(self) -> str | None:
        return None if self.weight_decay else "sgd"

    def _fused_hyper(self) -> dict[str, Any]:
        return {"momentum": self.momentum, "nesterov": self.nesterov}

    update_rule = staticmethod(_rules.sgd)  # also the fused kernel's reference (gputape._optim_fused.RULES)

    def _compute(self, g: Any, lr: float, slots: dict[str, Any], out: dict[str, Any], step: int) -> tuple[Any, bool]:
        if not self.momentum:
            return self.update_rule(g, lr, 0.0, False, None, None)
        return self.update_rule(g, lr, self.momentum, self.nesterov, slots["momentum"], out["momentum"])


class Adam(Optimizer):
    """Adam (Kingma and Ba), Keras' form: bias correction folded into the step size.

    ``m += (g - m)(1 - beta_1)``; ``v += (g² - v)(1 - beta_2)``;
    ``w -= lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)``.
    ``amsgrad=True`` uses the running maximum of ``v``. ``beta_1`` and
    ``beta_2`` must be in [0, 1) (1 divides by zero or never moves);
    ``epsilon`` must be > 0 (0 makes 0/0 = NaN wherever a gradient entry has
    always been 0).

    >>> import gputape as gt
    >>> w = gt.Variable([1.0])
    >>> _ = gt.optim.Adam(0.1).apply_gradients([(gt.constant([5.0]), w)])
    >>> round(float(w[0]), 4)
    0.9
    """

    def __init__(
        self,
        learning_rate: float | Callable[[int], float] = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(learning_rate, **kw)
        owner = type(self).__name__
        self.beta_1 = _real(owner, "beta_1", beta_1, 0.0, 1.0, high_open=True)
        self.beta_2 = _real(owner, "beta_2", beta_2, 0.0, 1.0, high_open=True)
        self.epsilon = _real(owner, "epsilon", epsilon, low_open=True)
        self.amsgrad = _flag(owner, "amsgrad", amsgrad)
        self.slot_names = ("momentum", "velocity", "velocity_hat") if amsgrad else ("momentum", "velocity")

    def _fused_kind(self) -> str | None:
        if self.amsgrad:
            return None
        if type(self) is AdamW:
            return "adamw"
        return None if self.weight_decay else "adam"

    def _fused_hyper(self) -> dict[str, Any]:
        hyper: dict[str, Any] = {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}
        if type(self) is AdamW:
            hyper["weight_decay"] = self.weight_decay
        return hyper

    update_rule = staticmethod(_rules.adam)  # also the fused kernel's reference (gputape._optim_fused.RULES)

    def _compute(self, g: Any, lr: float, slots: dict[str, Any], out: dict[str, Any], step: int) -> tuple[Any, bool]:
        hat = (slots["velocity_hat"], out["velocity_hat"]) if self.amsgrad else (None, None)
        return self.update_rule(
            g, lr, step, self.beta_1, self.beta_2, self.epsilon,
            slots["momentum"], slots["velocity"], out["momentum"], out["velocity"], *hat,
        )  # fmt: skip


class AdamW(Adam):
    """Adam with decoupled weight decay: ``w -= lr * weight_decay * w`` before each Adam step (Keras' default 0.004).

    ``weight_decay`` must be a number >= 0 (not None, as in Keras).

    >>> import gputape as gt
    >>> w = gt.Variable([1.0])
    >>> _ = gt.optim.AdamW(0.1, weight_decay=0.5).apply_gradients([(gt.constant([5.0]), w)])
    >>> round(float(w[0]), 4)
    0.85
    """

    def __init__(self, learning_rate: float | Callable[[int], float] = 0.001, weight_decay: float = 0.004, **kw: Any):
        super().__init__(learning_rate, weight_decay=_real(type(self).__name__, "weight_decay", weight_decay), **kw)


class RMSprop(Optimizer):
    """RMSprop, Keras' form (``epsilon`` inside the square root), with optional momentum and centering.

    ``v = rho * v + (1 - rho) * g²``; ``w -= lr * g / sqrt(v + epsilon)``
    (``v - mean_g² + epsilon`` when ``centered``); with ``momentum`` the step
    goes through ``m = momentum * m + step``. ``rho`` must be in [0, 1),
    ``momentum`` in [0, 1], ``epsilon`` > 0.

    >>> import gputape as gt
    >>> w = gt.Variable([1.0])
    >>> _ = gt.optim.RMSprop(0.01).apply_gradients([(gt.constant([2.0]), w)])
    >>> round(float(w[0]), 4)
    0.9684
    """

    def __init__(
        self,
        learning_rate: float | Callable[[int], float] = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(learning_rate, **kw)
        owner = type(self).__name__
        self.rho = _real(owner, "rho", rho, 0.0, 1.0, high_open=True)
        self.momentum = _real(owner, "momentum", momentum, 0.0, 1.0)
        self.epsilon = _real(owner, "epsilon", epsilon, low_open=True)
        self.centered = _flag(owner, "centered", centered)
        self.slot_names = (
            ("velocity",) + (("momentum",) if self.momentum else ()) + (("average_gradient",) if centered else ())
        )

    def _compute(self, g: Any, lr: float, slots: dict[str, Any], out: dict[str, Any], step: int) -> tuple[Any, bool]:
        xp = backend.xp_of(g)
        v = xp.multiply(slots["velocity"], self.rho, out=out["velocity"])
        v += (1.0 - self.rho) * (g * g)
        if self.centered:
            a = xp.multiply(slots["average_gradient"], self.rho, out=out["average_gradient"])
            a += (1.0 - self.rho) * g
            denom = v - a * a
            denom += self.epsilon
        else:
            denom = v + self.epsilon
        inc = lr * g / xp.sqrt(denom)
        if self.momentum:
            m = xp.multiply(slots["momentum"], self.momentum, out=out["momentum"])
            m += inc
            return m, False
        return inc, False
