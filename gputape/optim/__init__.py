"""Optimizers and learning-rate schedules (``gt.optim``); gradient clipping is ``gt.clip_by_global_norm``,
``gt.clip_by_norm`` and ``gt.global_norm`` (:mod:`gputape.optim.clip`).

The optimizers follow Keras 3's update rules exactly, so numbers match a
TensorFlow program step for step. ``apply_gradients(zip(grads, vars))``
computes each Variable's new value into a new array and swaps it in (a
variable's published array is never written), so a persistent tape's gradient
stays the one for the values it recorded, and a step is committed all at once.
Slots (momentum, second moments) are plain device arrays, never tracked by
tapes; ``get_state``/``set_state`` expose them for checkpoints.

Fail-safe rules: every hyperparameter is checked when the optimizer or schedule
is made (``TypeError`` for a wrong type, ``ValueError`` naming the class, the
parameter, its value and the valid range), and a learning rate that a schedule
or callable produces is checked at the step that uses it. A step is all or
nothing: every new value is computed first, then all of them are committed
together with Ctrl-C held off (:func:`gputape.core.state.defer_interrupts`), so an
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

from collections.abc import Callable
from typing import Any

from ..devices import backend
from . import rules as _rules
from .base import Optimizer
from .schedules import (
    CosineDecay,
    ExponentialDecay,
    LearningRateSchedule,
    PiecewiseConstantDecay,
    StepDecay,
    _flag,
    _real,
)

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
]


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

    update_rule = staticmethod(_rules.sgd)  # also the fused kernel's reference (gputape.optim.fused.RULES)

    def _compute(
        self, g: Any, lr: float, slots: dict[str, Any], out: dict[str, Any], step: int, into: Any = None
    ) -> tuple[Any, bool]:
        if not self.momentum:
            return self.update_rule(g, lr, 0.0, False, None, None, into)
        return self.update_rule(g, lr, self.momentum, self.nesterov, slots["momentum"], out["momentum"], into)

    # its delta is out["momentum"] or a new array of its own (Optimizer's doc: the step writes into it)
    _compute.fresh_delta = True  # type: ignore[attr-defined]
    _compute.donates = True  # type: ignore[attr-defined]  # takes into= (Optimizer's doc)

    def _plain(self) -> bool:
        # w -= lr * g with this class's own rule: the base class's one-loop host path
        return (
            not (self.momentum or self.weight_decay or self._fused_on_cpu)
            and self.clipnorm is None
            and self.global_clipnorm is None
            and type(self)._compute is SGD._compute
        )


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

    update_rule = staticmethod(_rules.adam)  # also the fused kernel's reference (gputape.optim.fused.RULES)

    def _compute(
        self, g: Any, lr: float, slots: dict[str, Any], out: dict[str, Any], step: int, into: Any = None
    ) -> tuple[Any, bool]:
        hat = (slots["velocity_hat"], out["velocity_hat"]) if self.amsgrad else (None, None)
        return self.update_rule(
            g, lr, step, self.beta_1, self.beta_2, self.epsilon,
            slots["momentum"], slots["velocity"], out["momentum"], out["velocity"], *hat, into=into,
        )  # fmt: skip

    _compute.fresh_delta = True  # type: ignore[attr-defined]  # delta: a new array of its own
    _compute.donates = True  # type: ignore[attr-defined]  # takes into= (Optimizer's doc)


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

    _compute.fresh_delta = True  # type: ignore[attr-defined]  # delta: out["momentum"] or a new array
