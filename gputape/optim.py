"""Optimizers, learning-rate schedules and gradient clipping (``gt.optim``).

The optimizers follow Keras 3's update rules exactly, so numbers match a
TensorFlow program step for step. ``apply_gradients(zip(grads, vars))``
updates each Variable through ``assign_sub``/``assign_add``: in place when no
tape holds the variable's current value, and copy-on-write when one does, so
a persistent tape's gradient stays the one for the values it recorded.
Slots (momentum, second moments) are plain device arrays, never tracked by
tapes; ``get_state``/``set_state`` expose them for checkpoints.

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
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import _state, backend
from .ops import maximum, sqrt, square, where
from .ops import sum as _sum
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
        if int(step_size) <= 0:
            raise ValueError(f"StepDecay: step_size must be a positive integer, got {step_size!r}")
        self.initial_learning_rate, self.step_size, self.gamma = float(initial_learning_rate), int(step_size), gamma

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
        if len(values) != len(boundaries) + 1:
            raise ValueError(
                f"PiecewiseConstantDecay: need one more value than boundaries, got {len(boundaries)} boundaries "
                f"and {len(values)} values"
            )
        self.boundaries, self.values = list(boundaries), [float(v) for v in values]

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
        if decay_steps <= 0:
            raise ValueError(f"ExponentialDecay: decay_steps must be positive, got {decay_steps!r}")
        self.initial_learning_rate, self.decay_steps = float(initial_learning_rate), decay_steps
        self.decay_rate, self.staircase = float(decay_rate), bool(staircase)

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
        if decay_steps <= 0:
            raise ValueError(f"CosineDecay: decay_steps must be positive, got {decay_steps!r}")
        self.initial_learning_rate, self.decay_steps, self.alpha = float(initial_learning_rate), decay_steps, alpha
        self.warmup_target, self.warmup_steps = warmup_target, int(warmup_steps)

    def __call__(self, step: int) -> float:
        if self.warmup_target is None:
            start = self.initial_learning_rate
        else:
            if step < self.warmup_steps:
                frac = step / self.warmup_steps
                return self.initial_learning_rate + frac * (self.warmup_target - self.initial_learning_rate)
            start, step = float(self.warmup_target), step - self.warmup_steps
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
    for t in t_list:
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
    t_list = list(t_list)
    clip = float(clip_norm)
    if not clip > 0:
        raise ValueError(f"clip_by_global_norm: clip_norm must be > 0, got {clip_norm!r}")
    norm = global_norm(t_list) if use_norm is None else as_tensor(use_norm)
    with np.errstate(invalid="ignore"):
        # norm - norm is 0 for a finite norm and NaN otherwise (TensorFlow's trick).
        scale = clip / maximum(norm, clip) + (norm - norm)
        out = [None if t is None else as_tensor(t) * scale.astype(as_tensor(t).dtype) for t in t_list]
    return out, norm


def clip_by_norm(t: Any, clip_norm: float, axes: Any = None) -> Tensor:
    """Scale ``t`` so that its L2 norm (over ``axes``, all by default) is at most ``clip_norm``.

    Differentiable everywhere, including at ``t == 0``.

    >>> import gputape as gt
    >>> gt.clip_by_norm(gt.constant([3.0, 4.0], "float64"), 1.0).numpy().round(2).tolist()
    [0.6, 0.8]
    >>> gt.clip_by_norm(gt.constant([[3.0, 0.1], [4.0, 0.0]], "float64"), 1.0, axes=0).numpy().round(2).tolist()
    [[0.6, 0.1], [0.8, 0.0]]
    """
    t = as_tensor(t)
    l2sum = _sum(t * t, axis=axes, keepdims=True)
    pos = l2sum > 0
    # sqrt only where positive: its derivative at 0 is infinite (TensorFlow's guard).
    norm = where(pos, sqrt(where(pos, l2sum, 1.0)), l2sum)
    return t * clip_norm / maximum(norm, clip_norm)


# -- optimizers -----------------------------------------------------------------------


def _raw(g: Any, var: Variable) -> Any:
    a = g._data if isinstance(g, Tensor) else backend.asarray_on(g, var.device)
    d = var._data
    if a.shape != d.shape:
        raise ValueError(f"apply_gradients: gradient of shape {a.shape} for variable {var.name!r} of shape {var.shape}")
    return a if a.dtype == d.dtype else a.astype(d.dtype)


_NOSLOTS: dict[str, Any] = {}


class Optimizer:
    """Base class: Keras' ``apply_gradients``, schedules, clipping, weight decay and state.

    Subclasses list their slot names and define ``_update(var, g, lr, slots, step)``
    on raw device arrays. ``learning_rate`` is a float or a
    :class:`LearningRateSchedule`; reading ``opt.learning_rate`` gives the
    rate the next step will use. ``clipnorm`` clips each gradient's norm,
    ``global_clipnorm`` their joint norm; ``weight_decay`` is decoupled
    (``w -= lr * weight_decay * w`` before the update), as in Keras.

    >>> import gputape as gt
    >>> opt = gt.optim.SGD(learning_rate=gt.optim.StepDecay(0.1, 1, 0.5))
    >>> w = gt.Variable([1.0])
    >>> opt.apply_gradients([(gt.constant([1.0]), w)]), opt.learning_rate, round(float(w[0]), 4)
    (1, 0.05, 0.9)
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
        if clipnorm is not None and global_clipnorm is not None:
            raise ValueError("set at most one of clipnorm and global_clipnorm")
        self._learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.clipnorm = clipnorm
        self.global_clipnorm = global_clipnorm
        self.name = name or type(self).__name__
        self.iterations = 0
        # id(var) -> (var, slots). The variable is held so its id cannot be
        # reused by a new object that would then inherit stale slots.
        self._slots: dict[int, tuple[Variable, dict[str, Any]]] = {}
        self._warned_none: set[int] = set()

    # -- learning rate -----------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The rate the next step uses (a schedule is evaluated at ``iterations``); assign a float or schedule.

        >>> import gputape as gt
        >>> opt = gt.optim.SGD(gt.optim.StepDecay(0.1, step_size=1, gamma=0.5))
        >>> opt.learning_rate
        0.1
        >>> opt.learning_rate = 0.3; opt.learning_rate
        0.3
        """
        lr = self._learning_rate
        return float(lr(self.iterations)) if callable(lr) else float(lr)

    @learning_rate.setter
    def learning_rate(self, value: float | Callable[[int], float]) -> None:
        self._learning_rate = value

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
            xp = backend.xp_of(var._data)
            slots = {n: xp.zeros(var.shape, var.dtype) for n in self.slot_names}
            self._slots[id(var)] = entry = (var, slots)
        return entry[1]

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
            "iterations": self.iterations,
            "slots": [(v, {n: np.array(backend.to_host(a)) for n, a in s.items()}) for v, s in self._slots.values()],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned; everything is checked before anything changes.

        >>> import gputape as gt, numpy as np
        >>> w = gt.Variable([1.0])
        >>> opt = gt.optim.SGD(0.1, momentum=0.9)
        >>> opt.set_state({"iterations": 5, "slots": [(w, {"momentum": np.array([0.5], "float32")})]})
        >>> opt.iterations, opt.get_state()["slots"][0][1]["momentum"].tolist()
        (5, [0.5])
        """
        try:
            iterations = int(state["iterations"])
            entries = list(state["slots"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{self.name}.set_state: expected {{'iterations': int, 'slots': [(variable, {{name: array}})]}} ({exc})"
            ) from None
        if iterations < 0:
            raise ValueError(f"{self.name}.set_state: iterations must be >= 0, got {iterations}")
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
                arrays[n] = a
            staged.append((var, arrays))
        for var, arrays in staged:
            slots = self._slots_for(var)
            for n, a in arrays.items():
                slots[n] = backend.asarray_on(a.astype(var.dtype), var.device)
        self.iterations = iterations

    # -- updating -------------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> int:
        """Apply one update step; returns the new ``iterations`` count.

        ``None`` gradients are skipped, with one :class:`~gputape.GputapeWarning`
        naming the variables the first time each one has none; if every
        gradient is None this raises ``ValueError`` (TensorFlow's rule: the
        loss does not depend on any variable, usually a bug).

        >>> import gputape as gt
        >>> w = gt.Variable([1.0])
        >>> gt.optim.SGD(0.5).apply_gradients([(gt.constant([2.0]), w)]), w.numpy().tolist()
        (1, [0.0])
        """
        pairs = list(grads_and_vars)
        for pair in pairs:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], Variable)):
                raise TypeError(
                    f"{self.name}.apply_gradients: expected (gradient, gt.Variable) pairs, as from "
                    f"zip(grads, model.trainable_variables); got {pair!r:.100}"
                )
        live = [(g, v) for g, v in pairs if g is not None]
        if pairs and not live:
            raise ValueError(
                f"{self.name}.apply_gradients: no gradients provided for any variable "
                f"({', '.join(repr(v.name) for _, v in pairs)}); does the loss depend on them, and was it "
                "computed inside the GradientTape?"
            )
        missing = [v for g, v in pairs if g is None and id(v) not in self._warned_none]
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
        raw = [(_raw(g, v), v) for g, v in live]
        raw = self._clip(raw)
        lr = self.learning_rate
        step = self.iterations + 1
        kind = self._fused_kind()
        if kind is not None and (self._fused_on_cpu or all(backend.is_gpu_array(v._data) for _, v in raw)):
            self._apply_fused(kind, raw, lr, step)
        else:
            wd = self.weight_decay
            slotted = bool(self.slot_names)
            for g, v in raw:
                if wd:
                    v.assign_sub(_wrap(v._data * (lr * wd)))
                self._update(v, g, lr, self._slots_for(v) if slotted else _NOSLOTS, step)
        self.iterations = step
        return step

    # On GPU arrays, SGD/Adam/AdamW update every parameter in one kernel launch
    # (gputape.kernels.FusedOptimizer, same Keras rules) using this optimizer's
    # own slot arrays, so get_state()/set_state() see the same state either way.
    _fused_on_cpu = False  # tests set it to run the same dispatch on the numpy reference

    def _fused_kind(self) -> str | None:
        return None

    def _apply_fused(self, kind: str, raw: list[tuple[Any, Variable]], lr: float, step: int) -> None:
        from . import kernels

        fused = self.__dict__.get("_fused")
        if fused is None:
            fused = kernels.FusedOptimizer(kind, lr, **self._fused_hyper())
            self._fused = fused
            self._fused_at = None
        fused.learning_rate = lr  # a device-side fill on a GPU: no synchronisation
        params = [v for _, v in raw]
        slots = []
        for v in params:
            sl = self._slots_for(v)
            slots.append((sl.get("momentum"), sl.get("velocity")))
        if self._fused_at != step - 1:  # first use, or iterations restored by set_state()
            if fused._step is None:
                fused._init_state(params[0]._data)
            fused.iterations = step - 1
        fused.update(params, [g for g, _ in raw], slots=slots)
        self._fused_at = step

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

    def _update(self, var: Variable, g: Any, lr: float, slots: dict[str, Any], step: int) -> None:
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
        return f"<{self.name} learning_rate={self._learning_rate!r} iterations={self.iterations}>"


class SGD(Optimizer):
    """Stochastic gradient descent, with optional (Nesterov) momentum, Keras' update.

    ``m = momentum * m - lr * g``; ``w += m`` (or ``w += momentum * m - lr * g``
    with ``nesterov=True``); plain ``w -= lr * g`` when ``momentum == 0``.

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
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"SGD: momentum must be in [0, 1], got {momentum!r}")
        super().__init__(learning_rate, **kw)
        self.momentum, self.nesterov = float(momentum), bool(nesterov)
        self.slot_names = ("momentum",) if self.momentum else ()

    def _fused_kind(self) -> str | None:
        return None if self.weight_decay else "sgd"

    def _fused_hyper(self) -> dict[str, Any]:
        return {"momentum": self.momentum, "nesterov": self.nesterov}

    def _update(self, var: Variable, g: Any, lr: float, slots: dict[str, Any], step: int) -> None:
        if not self.momentum:
            var.assign_sub(_wrap(g * lr))
            return
        m = slots["momentum"]
        m *= self.momentum
        m -= g * lr
        if self.nesterov:
            var.assign_add(_wrap(m * self.momentum - g * lr))
        else:
            var.assign_add(_wrap(m))


class Adam(Optimizer):
    """Adam (Kingma and Ba), Keras' form: bias correction folded into the step size.

    ``m += (g - m)(1 - beta_1)``; ``v += (g² - v)(1 - beta_2)``;
    ``w -= lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)``.
    ``amsgrad=True`` uses the running maximum of ``v``.

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
        self.beta_1, self.beta_2, self.epsilon, self.amsgrad = float(beta_1), float(beta_2), float(epsilon), amsgrad
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

    def _update(self, var: Variable, g: Any, lr: float, slots: dict[str, Any], step: int) -> None:
        xp = backend.xp_of(g)
        m, v = slots["momentum"], slots["velocity"]
        alpha = lr * math.sqrt(1.0 - self.beta_2**step) / (1.0 - self.beta_1**step)
        m += (g - m) * (1.0 - self.beta_1)
        v += (g * g - v) * (1.0 - self.beta_2)
        if self.amsgrad:
            vh = slots["velocity_hat"]
            xp.maximum(vh, v, out=vh)
            v = vh
        var.assign_sub(_wrap((m * alpha) / (xp.sqrt(v) + self.epsilon)))


class AdamW(Adam):
    """Adam with decoupled weight decay: ``w -= lr * weight_decay * w`` before each Adam step (Keras' default 0.004).

    >>> import gputape as gt
    >>> w = gt.Variable([1.0])
    >>> _ = gt.optim.AdamW(0.1, weight_decay=0.5).apply_gradients([(gt.constant([5.0]), w)])
    >>> round(float(w[0]), 4)
    0.85
    """

    def __init__(self, learning_rate: float | Callable[[int], float] = 0.001, weight_decay: float = 0.004, **kw: Any):
        super().__init__(learning_rate, weight_decay=weight_decay, **kw)


class RMSprop(Optimizer):
    """RMSprop, Keras' form (``epsilon`` inside the square root), with optional momentum and centering.

    ``v = rho * v + (1 - rho) * g²``; ``w -= lr * g / sqrt(v + epsilon)``
    (``v - mean_g² + epsilon`` when ``centered``); with ``momentum`` the step
    goes through ``m = momentum * m + step``.

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
        self.rho, self.momentum, self.epsilon, self.centered = float(rho), float(momentum), float(epsilon), centered
        self.slot_names = (
            ("velocity",) + (("momentum",) if self.momentum else ()) + (("average_gradient",) if centered else ())
        )

    def _update(self, var: Variable, g: Any, lr: float, slots: dict[str, Any], step: int) -> None:
        xp = backend.xp_of(g)
        v = slots["velocity"]
        v *= self.rho
        v += (1.0 - self.rho) * (g * g)
        if self.centered:
            a = slots["average_gradient"]
            a *= self.rho
            a += (1.0 - self.rho) * g
            denom = v - a * a + self.epsilon
        else:
            denom = v + self.epsilon
        inc = lr * g / xp.sqrt(denom)
        if self.momentum:
            m = slots["momentum"]
            m *= self.momentum
            m += inc
            var.assign_sub(_wrap(m))
        else:
            var.assign_sub(_wrap(inc))
