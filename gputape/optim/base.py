"""The optimizer base class of gt.optim: one all-or-nothing step, slots, state, the fused dispatch.

:class:`Optimizer` turns ``apply_gradients`` into one step: every new value is
computed first (each algorithm's ``_compute``, over the update rules of
:mod:`gputape.optim.rules`), then all are committed together with Ctrl-C held
off. On GPU arrays SGD/Adam/AdamW take the one-launch path instead
(:class:`gputape.optim.fused.FusedOptimizer`). The algorithms themselves are in
:mod:`gputape.optim`, which re-exports this class.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..core import _errors
from ..core import state as _state
from ..core import tensor as _tensor
from ..core._generate import generate
from ..core.state import defer_interrupts
from ..core.tape import GputapeWarning, GradientTape
from ..core.tensor import _LATE_REPORTS, COMBINE, SAME_KIND, Tensor, Variable, _indent, _same_kind, _wrap
from ..devices import backend
from . import rules as _rules
from .fused import FusedOptimizer
from .rules import SCALED, SCALED_INTO
from .schedules import _integer, _rate, _real


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
    and whether the variable's new value is ``w + delta`` (``add=True``) or
    ``w - delta``. The step computes each new value into a new array (a
    variable's published array is never written: a tape or another thread may
    hold it); the commit swaps ``out`` and ``slots`` and stores the new arrays.
    A ``_compute`` marked ``fresh_delta = True`` promises that a ``delta`` that
    is not one of its ``out`` arrays is a temporary of its own arithmetic that
    nothing else references (of the variable's shape and dtype), and the new
    value is written into it: an update then allocates nothing more. One marked
    ``donates = True`` takes ``into=``: a gradient donated by ``gt.function``'s
    replay (an array that replay allocated and that nothing else can see, proven
    from its record: ``gputape.function._codegen.donations``), which the rule may
    write its arithmetic into once it no longer reads ``g``; the new value then goes
    into it too (when the delta is one of ``out``'s arrays).

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
    # a schedule, a callable, a tensor, or the Variable a number lives in (the learning_rate setter)
    _learning_rate: Any

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
    def learning_rate(self) -> Any:
        """The rate: Keras 3's 0-d ``learning_rate`` Variable for a number, else the schedule's next rate.

        A number given as the rate (or set later) lives in a 0-d float64 Variable
        in host memory whatever the device, as ``iterations`` (Keras' is float32;
        float64 keeps the rate as given for float64 models): ``opt.learning_rate.assign(0.01)`` or ``opt.learning_rate
        = 0.01`` changes it in place, and every step reads it, a ``gt.function``
        replay too, without retracing. With a schedule or a callable the
        property gives the rate the next step will use (a float); setting a
        number afterwards goes back to the Variable.

        >>> import gputape as gt
        >>> opt = gt.optim.SGD(0.1)
        >>> opt.learning_rate
        <gt.Variable 'learning_rate' shape=() dtype=float64, numpy=0.1>
        >>> _ = opt.learning_rate.assign(0.05); float(opt.learning_rate)
        0.05
        >>> opt = gt.optim.SGD(gt.optim.StepDecay(0.1, step_size=1, gamma=0.5))
        >>> opt.learning_rate
        0.1
        >>> opt.learning_rate = 0.3; float(opt.learning_rate)
        0.3
        """
        lr = self._learning_rate
        if isinstance(lr, Variable):
            return lr
        return self._rate_at(self._step_count())

    @learning_rate.setter
    def learning_rate(self, value: float | Callable[[int], float]) -> None:
        if isinstance(value, Variable) and value is self.__dict__.get("_lr_variable"):
            self._learning_rate = value  # (`opt.learning_rate = opt.learning_rate`)
        elif callable(value):
            self._learning_rate = value
        elif isinstance(value, (Tensor, np.ndarray)):  # read at every step (a Variable can change), checked then
            self._learning_rate = value
            self._rate_at(self._step_count() if hasattr(self, "_iterations") else 0)
        elif isinstance(value, (str, bytes)):
            raise TypeError(
                f"{type(self).__name__}: learning_rate must be a number in [0, inf), a LearningRateSchedule or "
                f"a callable step -> rate, got the string {value!r}; pass a number, e.g. {type(self).__name__}(0.01)"
            )
        else:
            rate = _rate(type(self).__name__, "learning_rate", value)
            var = self.__dict__.get("_lr_variable")
            if var is None:
                # Host memory, as `iterations`: each step reads it as a Python float for almost nothing.
                var = self._lr_variable = Variable(
                    np.asarray(rate, np.float64), trainable=False, name="learning_rate", device="cpu"
                )
            else:
                var.assign(np.asarray(rate, np.float64))  # the same object: a compiled step that read it sees this
            self._learning_rate = var

    def _rate_at(self, step: int) -> float:
        lr = self._learning_rate
        var = self.__dict__.get("_lr_variable")
        if var is not None and lr is var:  # the common case: a number, possibly assign()ed since
            rate = float(var._data)
            if 0.0 <= rate < math.inf:
                return rate
            value = rate
        else:
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

        Then, as Keras does, each updated variable that has a ``constraint``
        (a layer's ``kernel_constraint``) is assigned ``constraint(variable)``.
        """
        try:
            pairs = list(grads_and_vars)
        except _errors.NEVER_WRAP:
            raise
        except Exception as e:
            # None or a number (Keras fails on its own unpacking): say what the argument must be
            raise TypeError(
                f"{self.name}.apply_gradients: argument grads_and_vars ({_errors.describe(grads_and_vars)}) is not an "
                f"iterable of (gradient, variable) pairs [{type(e).__name__}: {e}]; pass zip(grads, "
                "model.trainable_variables)"
            ) from e
        if _state.tls.obs is None and self._plain():
            # plain SGD's common case, parsed and stepped by one function generated for this many
            # pairs: (Tensor, Variable) pairs of host arrays of equal shapes and dtypes, each variable
            # once, outside gt.function's trace and with no observer. It returns None, having changed
            # nothing, for anything else (None, a bad pair, a cast, a repeat): the general path's to
            # parse, which raises or warns exactly as before.
            n = len(pairs)
            done = (_PLAIN_STEPS.get(n) or _plain_steps(n))[0](self, pairs)
            if done is not None:
                if _tensor._constrained:  # (a flag read, not a call: this is the hot path)
                    self._constrain(pairs)
                return done
        if not pairs:
            return self._step_count()
        live = []
        missing = []
        seen = set()
        for pair in pairs:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], Variable)):
                raise TypeError(
                    f"{self.name}.apply_gradients: argument grads_and_vars must hold (gradient, gt.Variable) pairs, "
                    f"as from zip(grads, model.trainable_variables); got {pair!r:.100}"
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
            # step, so replays rerun the learning-rate schedule and the step count (and the
            # constraints' ops and assignments, traced below, replay after it)
            step = tr.optimizer_step(self, live)
        else:
            step = self._apply_live(live)
        if _tensor._constrained:
            self._constrain(live)
        return step

    def _constrain(self, pairs: list[Any]) -> None:
        # every projection computed before any is assigned: an error leaves the step's values as they are
        staged = [(v, v._constraint(v)) for g, v in pairs if g is not None and v._constraint is not None]
        for v, value in staged:
            v.assign(value)

    def _plain(self) -> bool:
        """True when a step is ``w -= lr * g`` for every variable, no slots, no clipping (plain SGD)."""
        return False

    def _step_plain(self, raw: list[Any], variables: list[Variable], into: tuple[bool, ...] | None = None) -> int:
        """Plain SGD of checked host gradients: the generated step (:func:`_plain_steps`) without its parse.

        ``into[k]``: gradient ``k`` is donated (gt.function's replay proved it its own): ``g * lr``
        and then ``w - g * lr`` are written into it (:data:`~gputape.optim.rules.SCALED_INTO`).
        """
        return (_PLAIN_STEPS.get(len(raw)) or _plain_steps(len(raw)))[1](self, raw, variables, into)

    def _apply_live(self, live: list[tuple[Any, Variable]], donated: tuple[bool, ...] | None = None) -> int:
        # Phase 1 computes every new value and changes nothing: whatever raises here
        # (a gradient's shape or dtype, a schedule's NaN, a Ctrl-C) leaves the state as it was.
        # (``donated``: from gt.function's replay, which gradients are arrays of its own that
        # nothing else can see; written only in phase 1, and dead after the step either way.)
        raw = []
        host = True  # every gradient a host array of its variable's shape and dtype
        for g, v in live:
            # (a raw host array comes from gt.function's replay of this step, which skips the wrap)
            a = g._data if isinstance(g, Tensor) else g
            # the common case in one test: a host gradient of the variable's shape and dtype
            if not (type(a) is _ndarray and _same_kind(a, v._data)):
                a = _raw(g, v, self.name)
                host = False
            raw.append((a, v))
        if donated is not None and not host:  # (a converted gradient: only the exact arrays were proven)
            donated = tuple(d and a is g for d, (a, _), (g, _) in zip(donated, raw, live))
        if host and self._plain():
            return self._step_plain([a for a, _ in raw], [v for _, v in raw], donated)
        return self._apply_checked(raw, donated)

    def _apply_checked(self, raw: list[tuple[Any, Variable]], donated: tuple[bool, ...] | None = None) -> int:
        """The step of gradients checked against their variables (arrays of their shapes and dtypes)."""
        if self.clipnorm is not None or self.global_clipnorm is not None:
            raw = self._clip(raw)
            donated = None  # (a clipped gradient is a new array or the same one: not worth telling apart)
        step = self._step_count() + 1
        lr = self._rate_at(step - 1)
        kind = self._fused_kind()
        if kind is not None and (
            self._fused_on_cpu
            or (backend.is_gpu_array(raw[0][1]._data) and all(backend.is_gpu_array(v._data) for _, v in raw))
        ):
            self._apply_fused(kind, raw, lr, step)
            return step
        self._apply_host(raw, lr, step, donated)
        return step

    def _apply_host(
        self, raw: list[tuple[Any, Variable]], lr: float, step: int, donated: tuple[bool, ...] | None = None
    ) -> None:
        """Phase 1, every new value (slots into their spares, variables into new arrays); then the commit."""
        wd = self.weight_decay
        compute = self._compute
        fresh_delta = getattr(type(self)._compute, "fresh_delta", False)
        if donated is not None and not getattr(type(self)._compute, "donates", False):
            donated = None  # (a rule without into= never writes its gradient)
        entries = self._slots if self.slot_names else None
        used, fresh, news, late = [], [], [], []
        for k, (g, v) in enumerate(raw):
            if entries is None:
                slots = spare = _NOSLOTS
            else:
                entry = entries.get(id(v))
                if entry is None:
                    entry = self._new_entry(v)
                    fresh.append(entry)
                used.append(entry)
                slots, spare = entry[1], entry[2] or self._spares(entry)
            w = v._data
            if wd:  # decoupled decay first: ``w - lr * wd * w``, into the decay's own new array
                decay = _rules.decoupled_decay(w, lr, wd)
                w = _new_value(v, w, decay, False, decay, late)
            mine = g if donated is not None and donated[k] else None
            if mine is None:
                delta, add = compute(g, lr, slots, spare, step)
            else:
                delta, add = compute(g, lr, slots, spare, step, into=mine)
            if wd:
                out = w  # (the decayed value is this step's own array: the step goes into it)
            elif fresh_delta and (delta is not g or mine is not None) and all(delta is not a for a in spare.values()):
                out = delta
            else:
                out = mine  # (a donated gradient the rule is done with; the delta is a slot's array)
            news.append(_new_value(v, w, delta, add, out, late))
        self._commit([v for _, v in raw], news, step, used, fresh, late)

    def _commit(
        self,
        variables: list[Variable],
        news: list[Any],
        step: int,
        used: Iterable[list] = (),
        fresh: Iterable[list] = (),
        late: list[BaseException] | None = None,
    ) -> None:
        """Phase 2: the slot swaps (``used``), new slots (``fresh``), the variables' new arrays and the count.

        Every value was computed before: this is reference stores only, with Ctrl-C held until
        the last one, so a step is taken whole or not at all, and nothing here can fail. A reader
        (a tape's saved value, another thread) holds the old array or the new one, never a mix.

        numpy reports a floating-point error of an update (``np.seterr`` "raise", or a warning
        filter set to "error") after it wrote the result (``late``): such a report does not stop
        the step half way; it is committed whole and the first report raised after the last store.
        """
        with defer_interrupts():
            for entry in used:
                entry[1], entry[2] = entry[2], entry[1]
            for entry in fresh:
                self._slots[id(entry[0])] = entry
            for v, new in zip(variables, news):
                v._data = new
            self._count_step(step)
        if late:
            raise late[0]

    # On GPU arrays, SGD/Adam/AdamW update every parameter in one kernel launch
    # (gputape.optim.fused.FusedOptimizer, whose numpy reference runs the same update_rule)
    # using this optimizer's own slot arrays, so get_state()/set_state() see the same state.
    _fused_on_cpu = False  # tests set it to run the same dispatch on the numpy reference

    def _fused_kind(self) -> str | None:
        return None

    def _fused_opt(self, kind: str, lr: float) -> FusedOptimizer:
        fused = self.__dict__.get("_fused")
        if fused is None:
            fused = FusedOptimizer(kind, lr, **self._fused_hyper())
            self._fused = fused
            self._fused_at = None  # the step count the fused one's device counter holds
        return fused

    def _apply_fused(self, kind: str, raw: list[tuple[Any, Variable]], lr: float, step: int) -> None:
        fused = self._fused_opt(kind, lr)
        params = [v for _, v in raw]
        fresh = {id(v): self._new_entry(v) for v in params if id(v) not in self._slots}
        entries = [self._slots.get(id(v)) or fresh[id(v)] for v in params]
        slots = [(e[1].get("momentum"), e[1].get("velocity")) for e in entries]
        # One launch updates the slots in place and each variable's value in a new array that
        # FusedOptimizer then swaps in (a variable's published array is never written); it checks
        # every parameter before it launches anything, so an error there changes nothing either. Its
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

    # -- the update inside a CUDA graph (gputape.function's _GraphOptimizer) -------------------
    # The graph holds the fused launch; these host halves run before each replay's launch.

    def _graph_kind(self) -> str | None:
        """The fused kind when a graph can hold the whole update (clipping needs host norms: no)."""
        if self.clipnorm is not None or self.global_clipnorm is not None:
            return None
        return self._fused_kind()

    def _graph_state(self, variables: list[Variable]) -> tuple[FusedOptimizer, list[tuple[Any, Any]]]:
        """At capture: the fused optimizer (made if the eager steps did not) and each variable's slots."""
        kind = self._graph_kind()
        assert kind is not None
        fused = self._fused_opt(kind, self._rate_at(self._step_count()))
        if fused._step is None:
            fused._init_state(variables[0]._data)
        slots: list[tuple[Any, Any]] = []
        for v in variables:
            if not self.slot_names:  # (plain SGD keeps no slots: no entries either, as eagerly)
                slots.append((None, None))
                continue
            entry = self._slots.get(id(v))
            if entry is None:
                entry = self._slots[id(v)] = self._new_entry(v)
            slots.append((entry[1].get("momentum"), entry[1].get("velocity")))
        return fused, slots

    def _graph_prepare(self) -> tuple[int, float]:
        """The step number and its learning rate; raises (a schedule's NaN) before anything changes."""
        step = self._step_count() + 1
        return step, self._rate_at(step - 1)

    def _graph_commit(
        self,
        fused: FusedOptimizer,
        parity: int,
        prepared: tuple[int, float],
        variables: list[Variable],
        slots: list[tuple[Any, Any]],
        copy: Callable[[Any, Any], None],
    ) -> int:
        """Just before the launch, with Ctrl-C held: the device state the graph reads, and the count.

        The graph updates the slot arrays it captured: where ``set_state`` (or an eager
        step's spare swap) put other arrays in their place, their values are copied into
        the captured ones, which go back in (returns how many copies). The learning rate
        is written to the device only when it changed, the device step count only when it
        is not the host's (``iterations`` assigned, ``set_state``, an eager fused step's
        parity flip); both are asynchronous fills on the graph's stream.
        """
        copies = 0
        for v, pair in zip(variables, slots):
            entry = self._slots.get(id(v))
            for name, bound in zip(("momentum", "velocity"), pair if entry is not None else ()):
                if bound is None or entry[1][name] is bound:
                    continue
                now = entry[1][name]
                copy(bound, now)
                entry[1][name] = bound
                spare = entry[2]
                if spare is not None and spare.get(name) is bound:
                    spare[name] = now  # the spare must not alias the slot it is written from
                copies += 1
        step, lr = prepared
        if fused._lr0 != lr:
            fused.learning_rate = lr
        if self._fused_at != step - 1 or fused._parity != parity:
            fused.iterations = step - 1
            fused._parity = parity
        self._fused_at = step
        self._count_step(step)
        return copies

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
        lr = self._learning_rate
        var = self.__dict__.get("_lr_variable")
        shown = float(var._data) if var is not None and lr is var else lr
        return f"<{self.name} learning_rate={shown!r} iterations={self._step_count()}>"


_NOSLOTS: dict[str, Any] = {}
_ndarray = np.ndarray


# A variable's new value, ``{w} + {delta}`` or ``{w} - {delta}`` (``ufunc``; ``op`` names it in errors), as source:
# _new_value is compiled from it and the generated plain-SGD step inlines it for each variable.
# Into ``{out}``, a temporary of this step's own that nothing else references, when it is one of the
# variable's array type, shape and dtype; else into a new array (``{out}`` then names the result).
# ``{w}`` is only read. A ``{delta}`` of another kind is cast as ``assign_sub`` casts (or refused,
# before anything changed); a floating-point report numpy makes after writing the result goes to
# the list ``{late}``.
_NEW_VALUE = """\
if not ({delta_kind}):
    {delta} = {v}._check({op}, _wrap({delta}))
if {out} is None or not ({out_kind}):
    {out} = {xp}.empty_like({w})
{combine}"""


def _new_value_source(v: str, w: str, delta: str, out: str, late: str, xp: str, op: str, ufunc: str) -> str:
    """:data:`_NEW_VALUE` with these names (``op``, ``ufunc``: expressions of the operation)."""
    return _NEW_VALUE.format(
        v=v,
        w=w,
        delta=delta,
        out=out,
        xp=xp,
        op=op,
        delta_kind=SAME_KIND.format(a=delta, b=w),
        out_kind=SAME_KIND.format(a=out, b=w),
        combine=COMBINE.format(ufunc=ufunc, old=w, arr=delta, out=out, report=f"{late}.append(exc)"),
    )


_new_value = generate(
    "_new_value",
    "def _new_value(v, w, delta, add, out, late):\n"
    '    """``w + delta`` (``add``) or ``w - delta`` for variable ``v`` (``w``: its value so far this step)."""\n'
    "    xp = backend.xp_of(w)\n"
    + _indent(
        _new_value_source(
            v="v",
            w="w",
            delta="delta",
            out="out",
            late="late",
            xp="xp",
            op='("assign_add" if add else "assign_sub")',
            ufunc="(xp.add if add else xp.subtract)",
        ),
        "    ",
    )
    + "    return out\n",
    {"backend": backend, "_wrap": _wrap, "_LATE_REPORTS": _LATE_REPORTS},
)


def _parse_source(i: str | int, fail: str) -> list[str]:
    """Pair ``p{i}`` parsed into ``g{i}, v{i}`` and its host array ``a{i}``, or ``fail`` (a statement).

    The general parse's common case: a (Tensor, Variable) tuple, a host array of the variable's kind.
    """
    return [
        f"if type(p{i}) is not tuple or len(p{i}) != 2:",
        f"    {fail}",
        f"g{i}, v{i} = p{i}",
        f"if not isinstance(v{i}, Variable) or not isinstance(g{i}, Tensor):",
        f"    {fail}",
        f"a{i} = g{i}._data",
        f"w{i} = v{i}._data",
        f"if not (type(a{i}) is ndarray and {SAME_KIND.format(a=f'a{i}', b=f'w{i}')}):",
        f"    {fail}",
    ]


def _update_source(i: str | int, first: bool, donated: str | None = None) -> list[str]:
    """Variable ``v{i}``'s new value ``o{i}`` from host gradient ``a{i}``: the rule, then :data:`_NEW_VALUE`.

    The rule is :data:`gputape.optim.rules.SCALED` with the rate converted once per run of equal
    dtypes, as ``scaled`` converts it (``first``: the first variable, which starts the run); where
    ``donated`` (an expression) is true, :data:`~gputape.optim.rules.SCALED_INTO`, into ``a{i}``.
    """
    lines = [f"dt = a{i}.dtype", f"t = _rate(a{i}, lr)"]
    if not first:
        lines = [f"if a{i}.dtype is not dt:"] + ["    " + x for x in lines]
    # (d{i}, this step's own new array, is the out of its update: written into, nothing allocated;
    # the variable's value is read again here, as the general path reads it after the rate)
    rule = f"d{i} = {SCALED.format(g=f'a{i}', rate='t')}"
    if donated is not None:
        into = SCALED_INTO.format(xp="np", g=f"a{i}", rate="t", into=f"a{i}")
        rule = f"if {donated}:\n    d{i} = {into}\nelse:\n    {rule}"
    lines += rule.split("\n") + [f"w{i} = v{i}._data", f"o{i} = d{i}"]
    return lines + _new_value_source(f"v{i}", f"w{i}", f"d{i}", f"o{i}", "late", "np", '"assign_sub"', "subtract")[
        :-1
    ].split("\n")


def _block(lines: list[str], by: str = "    ") -> list[str]:
    return [by + x for x in lines]


# At most this many variables get a step of one block each; more get the loop form (one function
# for any count), whose compile time does not grow with the model.
_UNROLL = 32


def _plain_step_source(n: int) -> str:
    """The source of plain SGD's step of ``n`` variables: ``plain_sgd_step_{n}(self, pairs)`` and ``..._raw_{n}``.

    From the declarations the general path runs: the parse (:func:`_parse_source`), the rule and
    each new value (:func:`_update_source`) and the commit (reference stores with Ctrl-C held, as
    :meth:`Optimizer._commit`), variable by variable in the general path's order (numpy's warnings
    and error callbacks come in the same order). The parse returns None before anything changed
    for any pair it does not take; ``plain_sgd_step_raw_{n}`` takes gradients the general parse
    checked (``into``: which of them are donated, see :meth:`Optimizer._step_plain`).
    Straight-line, one block per variable, up to :data:`_UNROLL` variables; beyond, the
    same blocks in loops (``n`` is then 0 in the names: one function for every count).
    """
    head, raw_head = f"def plain_sgd_step_{n}(self, pairs):", f"def plain_sgd_step_raw_{n}(self, raw, variables, into):"
    start = ["step = self._step_count() + 1", "lr = self._rate_at(step - 1)", "late = []"]
    end = ["if late:", "    raise late[0]", "return step"]
    if n == 0:  # (no pairs: the general path's no-op)
        return f"{head}\n    return None\n\n\n{raw_head}\n    return None\n"
    if n > _UNROLL:

        def loop(donated: str | None) -> list[str]:
            lines = start + ["news = []", "dt = None"]
            if donated is None:
                lines.append("for a, v in zip(raw, variables):")
            else:
                lines.append("for a, v, m in zip(raw, variables, repeat(False) if into is None else into):")
            lines += _block(_update_source("", False, donated)) + ["    news.append(o)", "with defer_interrupts():"]
            lines += ["    for v, o in zip(variables, news):", "        v._data = o"]
            return lines + ["    self._count_step(step)"]

        parse = ["raw = []", "variables = []", "for p in pairs:"] + _block(_parse_source("", "return None"))
        parse += ["    raw.append(a)", "    variables.append(v)"]
        # each variable once: one step reads every old value before it writes any
        parse += ["if len(set(map(id, variables))) < len(raw):", "    return None"]
        lines = [head] + _block(parse + loop(None) + end) + ["", "", raw_head] + _block(loop("m") + end)
        return "\n".join(lines) + "\n"
    parse = [f"{', '.join(f'p{i}' for i in range(n))}, = pairs"]
    for i in range(n):
        parse += _parse_source(i, "return None")
    parse += [f"if len({{{', '.join(f'id(v{i})' for i in range(n))}}}) < {n}:", "    return None"]

    def body(donated: bool) -> list[str]:
        lines = list(start)
        for i in range(n):
            lines += _update_source(i, i == 0, f"into is not None and into[{i}]" if donated else None)
        lines += ["with defer_interrupts():"] + [f"    v{i}._data = o{i}" for i in range(n)]
        return lines + ["    self._count_step(step)"] + end

    unpack = [f"{', '.join(f'a{i}' for i in range(n))}, = raw", f"{', '.join(f'v{i}' for i in range(n))}, = variables"]
    lines = [head] + _block(parse + body(False)) + ["", "", raw_head] + _block(unpack + body(True))
    return "\n".join(lines) + "\n"


# n -> (plain_sgd_step, plain_sgd_step_raw) for n variables (the loop form under n = 0's names
# beyond _UNROLL), generated on first use
_PLAIN_STEPS: dict[int, tuple[Callable[..., Any], Callable[..., Any]]] = {}


def _plain_steps(n: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Plain SGD's generated step of ``n`` variables (:func:`_plain_step_source`), made once per ``n``."""
    if n > _UNROLL:
        pair = _PLAIN_STEPS.get(-1)
        if pair is None:
            pair = _PLAIN_STEPS[-1] = _compile_plain_step(n, "loop")
        _PLAIN_STEPS[n] = pair
        return pair
    pair = _compile_plain_step(n, str(n))
    if len(_PLAIN_STEPS) >= 64:  # (a program whose variable count keeps changing: keep the cache small)
        _PLAIN_STEPS.clear()
    _PLAIN_STEPS[n] = pair
    return pair


def _compile_plain_step(n: int, suffix: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    ns = {
        "np": np,
        "ndarray": np.ndarray,
        "subtract": np.subtract,
        "Tensor": Tensor,
        "Variable": Variable,
        "_rate": _rules._rate,
        "_wrap": _wrap,
        "_LATE_REPORTS": _LATE_REPORTS,
        "defer_interrupts": defer_interrupts,
        "repeat": itertools.repeat,
    }
    src = _plain_step_source(n).replace(f"_step_{n}(", f"_step_{suffix}(").replace(f"_raw_{n}(", f"_raw_{suffix}(")
    step = generate(f"plain_sgd_step_{suffix}", src, ns)
    return step, ns[f"plain_sgd_step_raw_{suffix}"]


__all__ = ["Optimizer"]
