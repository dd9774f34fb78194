"""gt.optim fails safe: hyperparameters are checked at construction, and a step is all or nothing.

An exception or a Ctrl-C during ``apply_gradients`` leaves every variable, every slot and
``iterations`` either as they were before the step or as one full step leaves them. The
interrupt test delivers a real SIGINT (``os.kill`` from a timer thread) at random moments
spread over the step and compares the state bitwise with a twin optimizer stepped without
interruption.
"""

from __future__ import annotations

import itertools
import math
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from _signals import SigintAfter

import gputape as gt
import gputape.optim as optim
import gputape.optim.base as optim_base  # where Optimizer commits a step
from gputape.core.state import defer_interrupts

NAN, INF = float("nan"), float("inf")

# -- every invalid hyperparameter raises at construction ----------------------------------------

# (id, call, exception, words the message must contain: the class or function, the parameter,
# the value and, for a ValueError, the valid range)
INVALID = [
    ("sgd-lr-nan", lambda: optim.SGD(NAN), ValueError, ["SGD", "learning_rate", "nan", "[0, inf)"]),
    ("sgd-lr-negative", lambda: optim.SGD(-1.0), ValueError, ["SGD", "learning_rate", "-1.0", "[0, inf)"]),
    ("sgd-lr-inf", lambda: optim.SGD(INF), ValueError, ["SGD", "learning_rate", "inf", "[0, inf)"]),
    ("sgd-lr-string", lambda: optim.SGD("0.1"), TypeError, ["SGD", "learning_rate", "'0.1'"]),
    ("sgd-lr-none", lambda: optim.SGD(None), TypeError, ["SGD", "learning_rate", "None"]),
    ("sgd-lr-bool", lambda: optim.SGD(True), TypeError, ["SGD", "learning_rate", "True"]),
    ("sgd-lr-list", lambda: optim.SGD([0.1]), TypeError, ["SGD", "learning_rate", "[0.1]"]),
    ("sgd-momentum-negative", lambda: optim.SGD(0.1, momentum=-0.1), ValueError, ["SGD", "momentum", "-0.1", "[0, 1]"]),
    ("sgd-momentum-above-1", lambda: optim.SGD(0.1, momentum=1.5), ValueError, ["SGD", "momentum", "1.5", "[0, 1]"]),
    ("sgd-momentum-nan", lambda: optim.SGD(0.1, momentum=NAN), ValueError, ["SGD", "momentum", "nan", "[0, 1]"]),
    ("sgd-momentum-string", lambda: optim.SGD(0.1, momentum="0.9"), TypeError, ["SGD", "momentum", "'0.9'"]),
    ("sgd-nesterov-string", lambda: optim.SGD(0.1, 0.9, nesterov="yes"), TypeError, ["SGD", "nesterov", "'yes'"]),
    (
        "sgd-clipnorm-negative",
        lambda: optim.SGD(0.1, clipnorm=-1.0),
        ValueError,
        ["SGD", "clipnorm", "-1.0", "(0, inf)"],
    ),
    ("sgd-clipnorm-zero", lambda: optim.SGD(0.1, clipnorm=0.0), ValueError, ["SGD", "clipnorm", "0.0", "(0, inf)"]),
    ("sgd-global-clipnorm-nan", lambda: optim.SGD(0.1, global_clipnorm=NAN), ValueError, ["global_clipnorm", "nan"]),
    ("sgd-clip-both", lambda: optim.SGD(0.1, clipnorm=1.0, global_clipnorm=1.0), ValueError, ["SGD", "at most one"]),
    ("sgd-weight-decay-negative", lambda: optim.SGD(0.1, weight_decay=-0.1), ValueError, ["weight_decay", "-0.1"]),
    ("sgd-weight-decay-inf", lambda: optim.SGD(0.1, weight_decay=INF), ValueError, ["weight_decay", "inf", "[0, inf)"]),
    ("sgd-name-int", lambda: optim.SGD(0.1, name=3), TypeError, ["SGD", "name", "3"]),
    ("adam-beta1-one", lambda: optim.Adam(0.1, beta_1=1.0), ValueError, ["Adam", "beta_1", "1.0", "[0, 1)"]),
    ("adam-beta1-negative", lambda: optim.Adam(0.1, beta_1=-0.1), ValueError, ["Adam", "beta_1", "-0.1", "[0, 1)"]),
    ("adam-beta2-one", lambda: optim.Adam(0.1, beta_2=1.0), ValueError, ["Adam", "beta_2", "1.0", "[0, 1)"]),
    ("adam-beta2-nan", lambda: optim.Adam(0.1, beta_2=NAN), ValueError, ["Adam", "beta_2", "nan"]),
    ("adam-epsilon-zero", lambda: optim.Adam(0.1, epsilon=0.0), ValueError, ["Adam", "epsilon", "0.0", "(0, inf)"]),
    ("adam-epsilon-negative", lambda: optim.Adam(0.1, epsilon=-1e-7), ValueError, ["Adam", "epsilon", "-1e-07"]),
    ("adam-amsgrad-string", lambda: optim.Adam(0.1, amsgrad="no"), TypeError, ["Adam", "amsgrad", "'no'"]),
    ("adam-lr-nan", lambda: optim.Adam(NAN), ValueError, ["Adam", "learning_rate", "nan"]),
    (
        "adamw-weight-decay-negative",
        lambda: optim.AdamW(0.1, weight_decay=-0.01),
        ValueError,
        ["AdamW", "weight_decay"],
    ),
    (
        "adamw-weight-decay-none",
        lambda: optim.AdamW(0.1, weight_decay=None),
        TypeError,
        ["AdamW", "weight_decay", "None"],
    ),
    ("adamw-beta1-one", lambda: optim.AdamW(0.1, beta_1=1.0), ValueError, ["AdamW", "beta_1", "[0, 1)"]),
    ("rmsprop-rho-one", lambda: optim.RMSprop(0.1, rho=1.0), ValueError, ["RMSprop", "rho", "1.0", "[0, 1)"]),
    ("rmsprop-rho-negative", lambda: optim.RMSprop(0.1, rho=-0.5), ValueError, ["RMSprop", "rho", "-0.5"]),
    (
        "rmsprop-momentum-2",
        lambda: optim.RMSprop(0.1, momentum=2.0),
        ValueError,
        ["RMSprop", "momentum", "2.0", "[0, 1]"],
    ),
    ("rmsprop-epsilon-zero", lambda: optim.RMSprop(0.1, epsilon=0.0), ValueError, ["RMSprop", "epsilon", "(0, inf)"]),
    ("rmsprop-centered-int", lambda: optim.RMSprop(0.1, centered=1), TypeError, ["RMSprop", "centered", "1"]),
    ("rmsprop-lr-negative", lambda: optim.RMSprop(-0.01), ValueError, ["RMSprop", "learning_rate", "-0.01"]),
    ("step-lr-negative", lambda: optim.StepDecay(-0.1, 10), ValueError, ["StepDecay", "initial_learning_rate", "-0.1"]),
    ("step-size-zero", lambda: optim.StepDecay(0.1, 0), ValueError, ["StepDecay", "step_size", "0", ">= 1"]),
    ("step-size-fraction", lambda: optim.StepDecay(0.1, 2.5), TypeError, ["StepDecay", "step_size", "2.5"]),
    ("step-gamma-negative", lambda: optim.StepDecay(0.1, 10, gamma=-0.5), ValueError, ["StepDecay", "gamma", "-0.5"]),
    ("step-gamma-nan", lambda: optim.StepDecay(0.1, 10, gamma=NAN), ValueError, ["StepDecay", "gamma", "nan"]),
    ("piecewise-count", lambda: optim.PiecewiseConstantDecay([10], [1.0]), ValueError, ["PiecewiseConstantDecay", "1"]),
    (
        "piecewise-not-increasing",
        lambda: optim.PiecewiseConstantDecay([10, 5], [1.0, 0.5, 0.1]),
        ValueError,
        ["PiecewiseConstantDecay", "boundaries[1]", "increasing"],
    ),
    (
        "piecewise-value-negative",
        lambda: optim.PiecewiseConstantDecay([10], [1.0, -0.5]),
        ValueError,
        ["PiecewiseConstantDecay", "values[1]", "-0.5", "[0, inf)"],
    ),
    (
        "piecewise-value-string",
        lambda: optim.PiecewiseConstantDecay([10], [1.0, "a"]),
        TypeError,
        ["PiecewiseConstantDecay", "values[1]", "'a'"],
    ),
    (
        "piecewise-boundary-nan",
        lambda: optim.PiecewiseConstantDecay([NAN], [1.0, 0.5]),
        ValueError,
        ["PiecewiseConstantDecay", "boundaries[0]", "nan"],
    ),
    (
        "exponential-rate-negative",
        lambda: optim.ExponentialDecay(0.1, 2, decay_rate=-1.0),
        ValueError,
        ["ExponentialDecay", "decay_rate", "-1.0", "[0, inf)"],
    ),
    (
        "exponential-steps-zero",
        lambda: optim.ExponentialDecay(0.1, 0, 0.5),
        ValueError,
        ["decay_steps", "0", "(0, inf)"],
    ),
    ("exponential-steps-negative", lambda: optim.ExponentialDecay(0.1, -2, 0.5), ValueError, ["decay_steps", "-2"]),
    ("exponential-lr-nan", lambda: optim.ExponentialDecay(NAN, 2, 0.5), ValueError, ["initial_learning_rate", "nan"]),
    ("exponential-staircase", lambda: optim.ExponentialDecay(0.1, 2, 0.5, "yes"), TypeError, ["staircase", "'yes'"]),
    ("cosine-steps-zero", lambda: optim.CosineDecay(0.1, 0), ValueError, ["CosineDecay", "decay_steps", "0"]),
    ("cosine-alpha-negative", lambda: optim.CosineDecay(0.1, 10, alpha=-0.1), ValueError, ["alpha", "-0.1", "[0, 1]"]),
    ("cosine-alpha-above-1", lambda: optim.CosineDecay(0.1, 10, alpha=1.5), ValueError, ["alpha", "1.5", "[0, 1]"]),
    ("cosine-warmup-target", lambda: optim.CosineDecay(0.1, 10, warmup_target=-1.0), ValueError, ["warmup_target"]),
    ("cosine-warmup-steps", lambda: optim.CosineDecay(0.1, 10, warmup_steps=-1), ValueError, ["warmup_steps", "-1"]),
    ("cosine-lr-string", lambda: optim.CosineDecay("0.1", 10), TypeError, ["CosineDecay", "initial_learning_rate"]),
    (
        "clip-global-zero",
        lambda: gt.clip_by_global_norm([gt.constant([1.0])], 0.0),
        ValueError,
        ["clip_by_global_norm", "clip_norm", "0.0", "(0, inf)"],
    ),
    (
        "clip-global-nan",
        lambda: gt.clip_by_global_norm([gt.constant([1.0])], NAN),
        ValueError,
        ["clip_by_global_norm", "clip_norm", "nan"],
    ),
    (
        "clip-global-string",
        lambda: gt.clip_by_global_norm([gt.constant([1.0])], "1"),
        TypeError,
        ["clip_by_global_norm", "clip_norm", "'1'"],
    ),
    (
        "clip-norm-negative",
        lambda: gt.clip_by_norm(gt.constant([1.0]), -1.0),
        ValueError,
        ["clip_by_norm", "clip_norm", "-1.0", "(0, inf)"],
    ),
    ("clip-norm-inf", lambda: gt.clip_by_norm(gt.constant([1.0]), INF), ValueError, ["clip_by_norm", "inf"]),
]


@pytest.mark.parametrize(("call", "exc", "words"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_hyperparameters_raise_at_construction(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"


def test_the_learning_rate_setter_checks_too():
    opt = optim.SGD(0.1)
    with pytest.raises(ValueError, match=r"SGD: learning_rate must be a number in \[0, inf\), got -0.5"):
        opt.learning_rate = -0.5
    with pytest.raises(TypeError, match="learning_rate"):
        opt.learning_rate = "0.2"
    assert opt.learning_rate == 0.1  # unchanged


@pytest.mark.parametrize(
    "call",
    [
        lambda: optim.SGD(0.0),  # a zero rate freezes the variables (Keras and PyTorch accept it)
        lambda: optim.SGD(1),
        lambda: optim.SGD(np.float32(0.1)),
        lambda: optim.SGD(0.1, momentum=1.0),
        lambda: optim.SGD(0.1, momentum=0, nesterov=np.bool_(True)),
        lambda: optim.Adam(0.1, beta_1=0.0, beta_2=0.0),
        lambda: optim.AdamW(0.1, weight_decay=0.0),
        lambda: optim.RMSprop(0.1, rho=0.0, momentum=1.0),
        lambda: optim.SGD(optim.ExponentialDecay(0.1, 2, 0.0)),
        lambda: optim.SGD(lambda step: 0.1),
        lambda: optim.SGD(gt.Variable(0.1)),
        lambda: optim.StepDecay(0.1, 10.0, gamma=2.0),
        lambda: optim.CosineDecay(0.1, 10, alpha=1.0, warmup_target=0.0, warmup_steps=0),
        lambda: optim.PiecewiseConstantDecay([], [0.1]),
        lambda: optim.ExponentialDecay(0.1, 2.5, 1.5),
    ],
)
def test_edge_values_that_are_valid_are_accepted(call):
    made = call()
    if isinstance(made, optim.LearningRateSchedule):
        rates = [made(step) for step in range(4)]
    else:
        w = gt.Variable([1.0, -2.0])
        for _ in range(4):
            made.apply_gradients([(gt.constant([0.5, 0.0]), w)])
        rates = [made.learning_rate, *w.numpy().tolist()]
        assert made.iterations == 4
    assert all(math.isfinite(r) for r in rates), rates


# -- learning rates computed at step time -------------------------------------------------------


def _model(seed: int = 0, sizes: tuple[int, ...] = (3, 4, 2)) -> tuple[list[gt.Variable], list[gt.Tensor]]:
    """An MLP's float32 weights and biases, and one fixed gradient for each."""
    rng = np.random.default_rng(seed)
    params, grads = [], []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        for name, shape in ((f"w{i}", (a, b)), (f"b{i}", (b,))):
            params.append(gt.Variable((0.1 * rng.standard_normal(shape)).astype(np.float32), name=name))
            grads.append(gt.constant((0.1 * rng.standard_normal(shape)).astype(np.float32)))
    return params, grads


def _snapshot(params: list[gt.Variable], opt: gt.optim.Optimizer) -> list[np.ndarray]:
    """Everything a step may change, as host copies: variables, slots, iterations."""
    st = opt.get_state()
    out = [p.numpy() for p in params] + [np.array(st["iterations"])]
    for _var, slots in st["slots"]:
        out += [slots[k] for k in sorted(slots)]
    return out


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Bitwise equality (a NaN equals the same NaN)."""
    return len(a) == len(b) and all(x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


class _NaNAtStep(optim.LearningRateSchedule):
    def __init__(self, bad_step: int, value: float = NAN) -> None:
        self.bad_step, self.value = bad_step, value

    def __call__(self, step: int) -> float:
        return self.value if step == self.bad_step else 0.1


@pytest.mark.parametrize(
    ("lr", "exc", "words"),
    [
        (_NaNAtStep(1), ValueError, ["gave nan at step 1", "[0, inf)"]),
        (_NaNAtStep(1, -0.5), ValueError, ["gave -0.5 at step 1"]),
        (_NaNAtStep(1, INF), ValueError, ["gave inf at step 1"]),
        (lambda step: 0.1 if step == 0 else "0.1", TypeError, ["'0.1'", "at step 1"]),
        (lambda step: 0.1 if step == 0 else None, TypeError, ["None", "at step 1"]),
    ],
    ids=["nan", "negative", "inf", "string", "none"],
)
def test_a_schedule_that_goes_bad_raises_at_that_step_and_changes_nothing(lr, exc, words):
    params, grads = _model()
    opt = optim.Adam(lr)
    opt.apply_gradients(zip(grads, params))  # step 0 is fine
    before = _snapshot(params, opt)
    with pytest.raises(exc) as info:
        opt.apply_gradients(zip(grads, params))
    for word in words:
        assert word in str(info.value)
    assert "Adam" in str(info.value)
    assert _same(_snapshot(params, opt), before)


def test_a_variable_learning_rate_is_read_and_checked_at_each_step():
    lr = gt.Variable(0.5, dtype="float64")
    w = gt.Variable([1.0])
    opt = optim.SGD(lr)
    opt.apply_gradients([(gt.constant([1.0]), w)])
    lr.assign(0.25)
    opt.apply_gradients([(gt.constant([1.0]), w)])
    np.testing.assert_allclose(w.numpy(), [1.0 - 0.5 - 0.25])
    lr.assign(float("nan"))
    with pytest.raises(ValueError, match="gave nan at step 2"):
        opt.apply_gradients([(gt.constant([1.0]), w)])
    assert opt.iterations == 2
    np.testing.assert_allclose(w.numpy(), [0.25])


# -- apply_gradients([]) ------------------------------------------------------------------------


@pytest.mark.parametrize("empty", [lambda: [], lambda: iter(()), lambda: zip([], [])], ids=["list", "iter", "zip"])
def test_apply_gradients_of_nothing_is_a_no_op(empty):
    params, grads = _model()
    opt = optim.Adam(0.1)
    assert opt.apply_gradients(empty()) == 0 and opt.iterations == 0  # Keras: iterations is not bumped
    opt.apply_gradients(zip(grads, params))
    before = _snapshot(params, opt)
    assert opt.apply_gradients(empty()) == 1
    assert _same(_snapshot(params, opt), before)


def test_only_none_gradients_raise_as_in_keras_and_change_nothing():
    params, grads = _model()
    opt = optim.SGD(0.1, momentum=0.9)
    opt.apply_gradients(zip(grads, params))
    before = _snapshot(params, opt)
    with pytest.raises(ValueError, match="no gradients provided for any variable"):
        opt.apply_gradients((None, p) for p in params)
    assert _same(_snapshot(params, opt), before)


# -- an exception part-way through a step changes nothing ---------------------------------------

MAKERS: dict[str, Callable[[], gt.optim.Optimizer]] = {
    "sgd": lambda: optim.SGD(0.1),
    "sgd-momentum-nesterov-decay": lambda: optim.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda: optim.Adam(0.01),
    "adam-amsgrad-clip": lambda: optim.Adam(0.01, amsgrad=True, clipnorm=0.5),
    "adamw-global-clip": lambda: optim.AdamW(0.01, global_clipnorm=0.5),
    "rmsprop-centered-momentum": lambda: optim.RMSprop(0.01, momentum=0.5, centered=True),
}


def _fused(make: Callable[[], gt.optim.Optimizer]) -> Callable[[], gt.optim.Optimizer]:
    def made() -> gt.optim.Optimizer:
        opt = make()
        opt._fused_on_cpu = True  # the one-launch path, run on its numpy reference
        return opt

    return made


MAKERS["adam-fused"] = _fused(MAKERS["adam"])
MAKERS["sgd-momentum-fused"] = _fused(lambda: optim.SGD(0.1, momentum=0.9))


def _bad_last(kind: str, grads: list[gt.Tensor]) -> list:
    bad = list(grads)
    if kind == "shape":
        bad[-1] = gt.constant(np.ones((5, 5), np.float32))
    elif kind == "complex":
        bad[-1] = np.ones(grads[-1].shape, np.complex64)
    elif kind == "strings":
        bad[-1] = np.full(grads[-1].shape, "x")
    elif kind == "ragged":
        bad[-1] = [[1.0], [2.0, 3.0]]
    elif kind == "underflow":  # raises inside the arithmetic, after the other variables' new values exist
        bad[-1] = gt.constant(np.full(grads[-1].shape, 1e-44, np.float32))
    return bad


FAILURES = [
    (name, kind)
    for name in sorted(MAKERS)
    for kind in ["shape", "complex", "strings", "ragged", "underflow", "duplicate"]
    # the fused path's numpy reference ignores floating-point errors, as its kernel does
    if not (kind == "underflow" and "fused" in name)
]


@pytest.mark.parametrize("first_step", [True, False], ids=["first-step", "later-step"])
@pytest.mark.parametrize(("name", "kind"), FAILURES, ids=[f"{n}-{k}" for n, k in FAILURES])
def test_an_exception_during_a_step_changes_nothing(name, kind, first_step):
    params, grads = _model()
    twin_params, _ = _model()
    opt, twin = MAKERS[name](), MAKERS[name]()
    if not first_step:
        for _ in range(2):
            opt.apply_gradients(zip(grads, params))
            twin.apply_gradients(zip(grads, twin_params))
    before = _snapshot(params, opt)
    pairs = list(zip(_bad_last(kind, grads), params))
    if kind == "duplicate":
        pairs.append((grads[0], params[0]))
    with np.errstate(all="raise"), pytest.raises((ValueError, TypeError, FloatingPointError)) as info:
        opt.apply_gradients(pairs)
    assert isinstance(info.value, FloatingPointError) == (kind == "underflow")
    assert _same(_snapshot(params, opt), before), f"{kind} changed the state"
    # and nothing hidden went wrong: the next good step equals the twin's
    opt.apply_gradients(zip(grads, params))
    twin.apply_gradients(zip(grads, twin_params))
    assert _same(_snapshot(params, opt), _snapshot(twin_params, twin))


# -- a Ctrl-C at any moment of a step: all or nothing ---------------------------------------------


class _CountingDefer(defer_interrupts):
    """defer_interrupts that counts the interrupts it held: those that arrived during a commit."""

    held = 0

    def __exit__(self, *exc):
        if self._held is not None and self._held.received:
            type(self).held += 1
        return super().__exit__(*exc)


def _interrupted_steps(run, run_twin, state, twin_state, trials: int, rng, step: float, counts: Counter) -> None:
    """Call ``run`` ``trials`` times, each cut by a real SIGINT at a random moment within 1.3 step
    times, and count each outcome against a twin that ``run_twin`` steps without interruption:
    ``before`` (interrupted, nothing applied), ``after`` (interrupted, the whole step applied),
    ``late`` (the signal came after the step returned), ``half`` (anything else: the bug; the
    state is then reset to the twin's). ``state``/``twin_state``: ``(params, optimizer)``."""
    (params, opt), (twin_params, twin) = state, twin_state
    expected = _snapshot(twin_params, twin)
    assert _same(_snapshot(params, opt), expected)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the timer thread gets the GIL at once, not after 5 ms
    try:
        for _ in range(trials):
            timer = SigintAfter(float(rng.uniform(0.0, 1.3 * step)))
            inside = True
            try:
                timer.arm()
                run()
                inside = False
                timer.join()
                time.sleep(0)  # the handler runs here when the signal came after the step
                for _spin in range(100):
                    pass
            except KeyboardInterrupt:
                timer.join()
            now = _snapshot(params, opt)
            if _same(now, expected):
                kind = "before" if inside else "half"  # returning normally without a change is wrong too
            else:
                run_twin()
                expected = _snapshot(twin_params, twin)
                if _same(now, expected):
                    kind = "after" if inside else "late"
                else:  # count it, and carry on from the twin's state
                    kind = "half"
                    for p, q in zip(params, twin_params):
                        p.assign(q.numpy())
                    st = twin.get_state()
                    opt.set_state(
                        {"iterations": st["iterations"], "slots": [(p, s) for p, (_, s) in zip(params, st["slots"])]}
                    )
            counts[kind] += 1
    finally:
        signal.signal(signal.SIGINT, old_handler)
        sys.setswitchinterval(old_switch)


def interrupt_trials(make: Callable[[], gt.optim.Optimizer], trials: int, sizes=(784, 384, 192, 10), seed=0):
    """Deliver SIGINT at random moments during ``apply_gradients``; classify each outcome.

    Returns a Counter: ``before`` (interrupted, nothing applied), ``after`` (interrupted,
    the whole step applied), ``late`` (the signal came after the step returned), ``half``
    (anything else: the bug), ``held`` (interrupts that arrived during the commit and were
    held until it ended) and the median step time ``step_us``. The state is compared
    bitwise with a twin optimizer that steps without interruption. (It also runs against
    an optim module without ``defer_interrupts``, to measure the code before this fix.)
    """
    params, grads = _model(seed, sizes)
    twin_params, _ = _model(seed, sizes)
    opt, twin = make(), make()
    pairs, twin_pairs = list(zip(grads, params)), list(zip(grads, twin_params))
    for _ in range(2):  # slots exist and the step is warm before timing
        opt.apply_gradients(pairs)
        twin.apply_gradients(twin_pairs)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        opt.apply_gradients(pairs)
        times.append(time.perf_counter() - t0)
        twin.apply_gradients(twin_pairs)
    step = statistics.median(times)
    rng = np.random.default_rng(seed)
    counts: Counter = Counter(step_us=round(step * 1e6))
    counting = "defer_interrupts" in vars(optim_base)
    if counting:
        _CountingDefer.held = 0
        optim_base.defer_interrupts = _CountingDefer
    try:
        _interrupted_steps(
            lambda: opt.apply_gradients(pairs),
            lambda: twin.apply_gradients(twin_pairs),
            (params, opt),
            (twin_params, twin),
            trials,
            rng,
            step,
            counts,
        )
    finally:
        if counting:
            optim_base.defer_interrupts = defer_interrupts
            counts["held"] = _CountingDefer.held
    return counts


INTERRUPTED = {
    "sgd-plain": lambda: optim.SGD(0.01),  # the one-loop path (Optimizer._apply_plain)
    "sgd-momentum-nesterov-decay": lambda: optim.SGD(0.01, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "adam": lambda: optim.Adam(1e-3),
    "adamw-amsgrad": lambda: optim.AdamW(1e-3, amsgrad=True),
    "rmsprop-centered-momentum": lambda: optim.RMSprop(1e-3, momentum=0.5, centered=True),
    "adam-fused": _fused(lambda: optim.Adam(1e-3)),
}


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_real_ctrl_c_at_a_random_moment_leaves_a_whole_step_or_none():
    total: Counter = Counter()
    report = []
    for name, make in INTERRUPTED.items():
        counts = interrupt_trials(make, 100)
        report.append(f"{name}: {dict(counts)}")
        counts.pop("step_us")
        total.update(counts)
    summary = "\n".join(report + [f"total: {dict(total)}"])
    print(summary)
    assert total["half"] == 0, summary
    trials = sum(total[k] for k in ("before", "after", "late", "half"))
    assert trials == 100 * len(INTERRUPTED)
    # the test exercises the window: many signals arrive during the step, some during the commit
    assert total["before"] + total["after"] >= trials // 10, summary
    assert total["held"] >= 3 and total["after"] >= total["held"], summary


def _compiled_step(params: list[gt.Variable], opt: gt.optim.Optimizer) -> Callable:
    """A gt.function training step of the MLP ``params`` (relu layers, softmax cross-entropy)."""

    @gt.function
    def step(x, y):
        with gt.GradientTape() as tape:
            h = x
            for i in range(0, len(params), 2):
                h = h @ params[i] + params[i + 1]
                if i + 2 < len(params):
                    h = gt.nn.relu(h)
            loss = -gt.mean(gt.nn.log_softmax(h)[np.arange(x.shape[0]), y])
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    return step


def compiled_interrupt_trials(make, trials: int, sizes=(784, 256, 10), batch=64, seed=0):
    """:func:`interrupt_trials` for a ``gt.function``-compiled training step (forward, gradient, update).

    The same classification against a twin function stepped without interruption; afterwards
    both take two more steps, which must agree bitwise (the interrupted function trains on).
    """
    params, _ = _model(seed, sizes)
    twin_params, _ = _model(seed, sizes)
    opt, twin = make(), make()
    f, twin_f = _compiled_step(params, opt), _compiled_step(twin_params, twin)
    rng = np.random.default_rng(seed)
    x = gt.constant(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    y = gt.constant(rng.integers(0, sizes[-1], batch))
    for _ in range(3):  # traced, warm
        f(x, y)
        twin_f(x, y)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        f(x, y)
        times.append(time.perf_counter() - t0)
        twin_f(x, y)
    step = statistics.median(times)
    counts: Counter = Counter(step_us=round(step * 1e6))
    _interrupted_steps(
        lambda: f(x, y), lambda: twin_f(x, y), (params, opt), (twin_params, twin), trials, rng, step, counts
    )
    for _ in range(2):
        f(x, y)
        twin_f(x, y)
    counts["trains_on"] = int(_same(_snapshot(params, opt), _snapshot(twin_params, twin)))
    return counts


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
@pytest.mark.parametrize("name", ["adam", "sgd-momentum"])
def test_a_real_ctrl_c_during_a_compiled_step_leaves_a_whole_step_or_none(name):
    make = {"adam": lambda: optim.Adam(1e-3), "sgd-momentum": lambda: optim.SGD(0.01, momentum=0.9)}[name]
    counts = compiled_interrupt_trials(make, 150, sizes=(256, 128, 10), batch=32)
    assert counts["half"] == 0, dict(counts)
    assert counts["trains_on"] == 1, dict(counts)
    assert counts["before"] + counts["after"] >= 15, dict(counts)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_real_ctrl_c_during_eager_adam_steps_leaves_a_whole_step_or_none():
    counts = interrupt_trials(lambda: optim.Adam(1e-3), 300, sizes=(256, 128, 10))
    assert counts["half"] == 0, dict(counts)
    assert counts["before"] + counts["after"] >= 30, dict(counts)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_ctrl_c_between_the_commit_s_stores_is_held_until_the_last(compiled, monkeypatch):
    # The commit is a few reference stores, too short for a random signal to land in often: this
    # one lands there every time (just before the step count, the last store). Held, the step is
    # whole (variables, slots and count new); not held, the count would stay old.
    params, _ = _model(0, (16, 8, 4))
    twin_params, _ = _model(0, (16, 8, 4))
    opt, twin = optim.Adam(1e-2), optim.Adam(1e-2)
    f, twin_f = _compiled_step(params, opt), _compiled_step(twin_params, twin)
    if not compiled:
        f, twin_f = f.python_function, twin_f.python_function
    rng = np.random.default_rng(0)
    x = gt.constant(rng.standard_normal((8, 16)).astype(np.float32))
    y = gt.constant(rng.integers(0, 4, 8))
    for _ in range(3):
        f(x, y)
        twin_f(x, y)
    count_step = optim_base.Optimizer._count_step

    def interrupted(self, step):
        signal.raise_signal(signal.SIGINT)  # the handler runs at the next bytecode
        count_step(self, step)

    monkeypatch.setattr(optim_base.Optimizer, "_count_step", interrupted)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            f(x, y)
    finally:
        signal.signal(signal.SIGINT, old_handler)
        monkeypatch.setattr(optim_base.Optimizer, "_count_step", count_step)
    twin_f(x, y)
    assert _same(_snapshot(params, opt), _snapshot(twin_params, twin))  # the whole step
    for _ in range(2):  # and it trains on
        f(x, y)
        twin_f(x, y)
    assert _same(_snapshot(params, opt), _snapshot(twin_params, twin))


# -- on a GPU: the same steps, and the same refusal -----------------------------------------------

ON_GPU = sorted(name for name in MAKERS if "fused" not in name)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ON_GPU)
def test_on_the_gpu_steps_match_the_cpu_and_a_bad_step_changes_nothing(name):
    from gputape.devices import backend

    cp = backend.cupy_module()
    params, grads = _model()
    gpu_params = [gt.Variable(cp.asarray(p.numpy()), name=p.name) for p in params]
    gpu_grads = [gt.constant(cp.asarray(g.numpy())) for g in grads]
    opt, gpu_opt = MAKERS[name](), MAKERS[name]()  # SGD/Adam/AdamW take the one-launch kernel there
    for _ in range(3):
        opt.apply_gradients(zip(grads, params))
        gpu_opt.apply_gradients(zip(gpu_grads, gpu_params))
    for a, b in zip(_snapshot(params, opt), _snapshot(gpu_params, gpu_opt)):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    before = _snapshot(gpu_params, gpu_opt)
    with pytest.raises(ValueError, match=r"is on cpu, the variable on cuda:0"):
        gpu_opt.apply_gradients(zip([*gpu_grads[:-1], grads[-1]], gpu_params))
    assert _same(_snapshot(gpu_params, gpu_opt), before)
