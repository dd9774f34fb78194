"""The update rules of SGD and Adam: the one numpy/cupy statement of their math.

``gputape.optim``'s optimizers compute every step with these functions (into spare
arrays, so a step can be committed all at once), and the reference of the fused
GPU kernel (``kernels/optimizers.cu``, :func:`gputape.optim.fused.ref_optimizer_update`)
is these same functions applied in place. Keras 3's forms, in the arrays' dtype
(Python-float coefficients take the array's dtype).

>>> import numpy as np
>>> delta, add = sgd(np.array([2.0]), 0.5, 0.0, False, None, None)
>>> delta.tolist(), add
([1.0], False)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core._generate import generate
from ..devices import backend

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_F32_MAX = float(np.finfo(np.float32).max)
_rate_typed: tuple[Any, Any, Any] = (None, None, None)  # (rate, dtype, the rate as a 0-d array of it)


def _rate(g: Any, lr: float) -> Any:
    """``lr`` as the 0-d host array of ``g``'s dtype that numpy converts it to in ``g * lr``.

    NEP 50: a Python float beside a float32/float64 array takes the array's dtype, rounded to
    nearest, as ``np.asarray(lr, dtype)`` rounds it; the multiply then costs half the time
    (0.2 us a variable per step). Kept for the last rate and dtype (the rate's object held, so
    its identity stands for its value); a float32 overflow, other dtypes, device arrays: ``lr``.
    """
    global _rate_typed
    dt = g.dtype
    c = _rate_typed
    if c[0] is lr and c[1] is dt:
        return c[2]
    if type(lr) is not float or type(g) is not np.ndarray or not (dt is _F64 or (dt is _F32 and abs(lr) <= _F32_MAX)):
        return lr
    t = np.asarray(lr, dt)
    _rate_typed = (lr, dt, t)  # (one store: a thread reading it sees the old triple or this one)
    return t


def decoupled_decay(p: Any, lr: float, weight_decay: float) -> Any:
    """What decoupled weight decay subtracts from ``p`` before the step: ``lr * weight_decay * p``."""
    return p * (lr * weight_decay)


# Plain SGD's step (and momentum SGD's ``lr * g``), declared once as source: ``{g}`` times
# ``{rate}``, the learning rate as numpy converts it beside ``{g}`` (:func:`_rate`), into a new
# array; SCALED_INTO is the same ufunc on the same operands into ``{into}``, a gradient donated to
# the step (``g`` itself, an array nothing else can see: ``gputape.function``'s replay proves it),
# so the same bits. scaled() is compiled from them, and the optimizer's generated plain-SGD step
# inlines the same text.
SCALED = "{g} * {rate}"
SCALED_INTO = "{xp}.multiply({g}, {rate}, out={into})"

scaled = generate(
    "scaled",
    "def scaled(g, lr, into=None):\n"
    "    \"\"\"``g * lr``, plain SGD's step (and momentum SGD's ``lr * g``): a new array of ``g``'s dtype,\n"
    "    or ``into``, a donated gradient (:data:`SCALED_INTO`).\n\n"
    "    >>> scaled(np.array([2.0, 4.0]), 0.5).tolist()\n"
    "    [1.0, 2.0]\n"
    '    """\n'
    "    if type(g) is np.ndarray:\n"
    "        lr = _rate(g, lr)\n"
    "    if into is not None:\n"
    f"        return {SCALED_INTO.format(xp='backend.xp_of(g)', g='g', rate='lr', into='into')}\n"
    f"    return {SCALED.format(g='g', rate='lr')}\n",
    globals(),
)


def sgd(g: Any, lr: float, momentum: float, nesterov: bool, m0: Any, m_out: Any, into: Any = None) -> tuple[Any, bool]:
    """SGD's step: ``(delta, add)`` with ``w += delta`` when ``add`` else ``w -= delta``.

    ``m = momentum * m0 - lr * g`` is written to ``m_out`` (``m0`` is not changed);
    ``w += m`` (``nesterov``: ``w += momentum * m - lr * g``); without momentum
    ``w -= lr * g`` and the slots are unused. ``delta`` is ``m_out``, a new array or
    ``into``, a donated gradient that ``lr * g`` is written into (:func:`scaled`).
    """
    if not momentum:
        return scaled(g, lr, into), False
    step = scaled(g, lr, into)
    m = backend.xp_of(g).multiply(m0, momentum, out=m_out)
    m -= step
    if nesterov:
        delta = m * momentum
        delta -= step
        return delta, True
    return m, True


def adam(
    g: Any,
    lr: float,
    step: int,
    beta_1: float,
    beta_2: float,
    epsilon: float,
    m0: Any,
    v0: Any,
    m_out: Any,
    v_out: Any,
    vhat0: Any = None,
    vhat_out: Any = None,
    into: Any = None,
) -> tuple[Any, bool]:
    """Adam's step ``t = step``: ``(delta, False)``, ``w -= delta``; the bias correction folded into the rate.

    ``m = m0 + (g - m0)(1 - beta_1)`` into ``m_out``, ``v = v0 + (g² - v0)(1 - beta_2)``
    into ``v_out`` (``vhat0`` given: AMSGrad, ``max(vhat0, v)`` into ``vhat_out``), then
    ``delta = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)``, a new array
    or ``into``, a donated gradient (dead once ``v`` is computed; the same ufuncs on the same
    operands, so the same bits).
    """
    xp = backend.xp_of(g)
    alpha = lr * math.sqrt(1.0 - beta_2**step) / (1.0 - beta_1**step)
    # m0 + (g - m0)(1 - beta_1), as an in-place update would compute it, into the spare
    m = xp.subtract(g, m0, out=m_out)
    m *= 1.0 - beta_1
    m += m0
    v = xp.multiply(g, g, out=v_out)
    v -= v0
    v *= 1.0 - beta_2
    v += v0
    if vhat0 is not None:
        v = xp.maximum(vhat0, v, out=vhat_out)
    denom = xp.sqrt(v)
    denom += epsilon
    delta = m * alpha if into is None else xp.multiply(m, alpha, out=into)
    delta /= denom
    return delta, False


__all__ = ["adam", "decoupled_decay", "scaled", "sgd"]
