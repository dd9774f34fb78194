"""Plain SGD's eager step: the generated step (``optim_base._plain_steps``: its parse, rule, new values
and commit in one function per variable count) against the general path.

Expected weights come from numpy's ``w -= lr * g``; the generated step and the general one must give
the same bits, errors, warnings and state, on the common case and on each case the generated parse
leaves to the general one. "general" is the step every other optimizer takes (the general parse,
``_apply_host``, ``rules.sgd``, ``_new_value``, ``_commit``); "parse" is the general parse followed by
the generated step without its parse (``Optimizer._step_plain``); "loop" is the generated step's
form for many variables (the same blocks in loops), taken here for every count.
"""

from __future__ import annotations

import signal
import threading
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_optim_safety import interrupt_trials

import gputape as gt
import gputape.optim.base as optim_base

PATHS = ("fast", "loop", "parse", "general")


def force(m, path):
    """Make plain SGD's steps take ``path``: 'fast' (as it is), 'loop', 'parse' or 'general' (this module's doc)."""
    if path == "general":
        m.setattr(gt.optim.SGD, "_plain", lambda self: False)
    elif path == "loop":  # the generated step's loop form, for every count
        m.setattr(optim_base, "_UNROLL", 0)
        m.setattr(optim_base, "_PLAIN_STEPS", {})
    elif path == "parse":
        steps = optim_base._plain_steps

        def no_parse(n):
            return (lambda self, pairs: None), steps(n)[1]

        m.setattr(optim_base, "_PLAIN_STEPS", {})
        m.setattr(optim_base, "_plain_steps", no_parse)


@pytest.fixture(params=["fast", "loop", "parse", "general"])
def mode(request, monkeypatch):
    force(monkeypatch, request.param)
    return request.param


SHAPES = ((7, 5), (5,), (), (3, 2, 4))


def _params(dtypes=(np.float32, np.float32, np.float64, np.float32), seed=0):
    rng = np.random.default_rng(seed)
    return [gt.Variable(rng.standard_normal(s).astype(d)) for s, d in zip(SHAPES, dtypes)]


def _grads(params, seed=1):
    rng = np.random.default_rng(seed)
    return [gt.constant(rng.standard_normal(p.shape).astype(p.dtype)) for p in params]


def _state(params, opt):
    return [p.numpy().tobytes() for p in params] + [int(opt.iterations)]


def test_the_step_is_numpy_s_w_minus_lr_g_bitwise(mode):
    params = _params()
    expect = [p.numpy() for p in params]
    opt = gt.optim.SGD(lambda step: 0.1 / (1 + step))  # a schedule: the rate of each step
    for k in range(4):
        grads = _grads(params, seed=k)
        assert opt.apply_gradients(zip(grads, params)) == k + 1
        for e, g in zip(expect, grads):
            e -= g.numpy() * np.asarray(0.1 / (1 + k), e.dtype)  # NEP 50: the rate in the array's dtype
    assert [p.numpy().tobytes() for p in params] == [e.tobytes() for e in expect]
    assert [str(p.dtype) for p in params] == ["float32", "float32", "float64", "float32"]
    assert int(opt.iterations) == 4


def _outcome(call, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call(*args)
        except Exception as exc:  # (the outcome compared is the exception itself)
            result = (type(exc), str(exc))
    return result, [str(w.message) for w in caught]


CASES = {
    "a None gradient": lambda g, p: [(None, p[0])] + list(zip(g[1:], p[1:])),
    "only None": lambda g, p: [(None, v) for v in p],
    "list pairs": lambda g, p: [[a, v] for a, v in zip(g, p)],
    "a repeated variable": lambda g, p: list(zip(g, p)) + [(g[0], p[0])],
    "a float64 gradient of a float32 variable": lambda g, p: [(gt.cast(g[0], "float64"), p[0])],
    "a wrong shape": lambda g, p: [(g[1], p[0])],
    "a raw numpy gradient": lambda g, p: [(g[0].numpy(), p[0])],
    "a variable as the gradient": lambda g, p: [(gt.Variable(g[0].numpy()), p[0])],
    "not a variable": lambda g, p: [(g[0], g[1])],
    "not a pair": lambda g, p: [(g[0],)],
    "nothing": lambda g, p: [],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_other_case_gets_the_same_result_errors_and_warnings_on_both_paths(case, monkeypatch):
    outcomes = []
    for path in PATHS:
        with monkeypatch.context() as m:
            force(m, path)
            params = _params()
            opt = gt.optim.SGD(0.25)
            pairs = CASES[case](_grads(params), params)
            outcomes.append((_outcome(opt.apply_gradients, pairs), _state(params, opt)))
    assert all(o == outcomes[0] for o in outcomes[1:])


class _MyVariable(gt.Variable):
    __slots__ = ()


class _MyTensor(gt.Tensor):
    __slots__ = ()


def test_subclasses_are_left_to_python_with_the_same_bits(mode):
    params, twins = _params(), _params()
    params[1] = _MyVariable(params[1].numpy())
    grads = _grads(twins)
    sub = gt.Tensor.__new__(_MyTensor)
    sub._data, sub._id = grads[0].numpy(), grads[0]._id
    gt.optim.SGD(0.5).apply_gradients(zip([sub] + grads[1:], params))
    gt.optim.SGD(0.5).apply_gradients(zip(grads, twins))
    assert [p.numpy().tobytes() for p in params] == [p.numpy().tobytes() for p in twins]


def test_a_held_variable_array_is_never_written(mode):
    params = _params()
    w = params[0]
    held = w.value()  # (shares the variable's array, as a tape's saved value does)
    old = held.numpy().copy()
    view = w._data[1]  # a view of it too
    g = _grads(params)
    gt.optim.SGD(0.5).apply_gradients(zip(g, params))
    assert held.numpy().tobytes() == old.tobytes() and view.tobytes() == old[1].tobytes()
    assert w.numpy().tobytes() == (old - g[0].numpy() * np.float32(0.5)).tobytes()
    assert w._data is not held._data


def test_a_gradient_that_is_the_variable_s_own_array(mode):
    w = gt.Variable(np.arange(4, dtype=np.float32))
    g = w.value()  # the gradient array is the variable's
    gt.optim.SGD(0.25).apply_gradients([(g, w)])
    ref = np.arange(4, dtype=np.float32)
    assert w.numpy().tobytes() == (ref - ref * np.float32(0.25)).tobytes()
    assert g.numpy().tobytes() == ref.tobytes()  # the gradient (the old array) kept its value


def test_every_step_publishes_new_arrays_and_never_writes_the_old_ones(mode):
    params = _params()
    arrays = [p._data for p in params]  # (as a tape or another thread would hold them)
    before = [a.tobytes() for a in arrays]
    grads = _grads(params)
    gt.optim.SGD(0.5).apply_gradients(zip(grads, params))
    assert [a.tobytes() for a in arrays] == before
    assert all(p._data is not a for p, a in zip(params, arrays))
    # and the new array is the step's own temporary, lr * g, not a further allocation: it is
    # not a view, nothing else references it, and it is writeable like any variable array
    assert all(p._data.flags.owndata and p._data.flags.c_contiguous for p in params)


def test_a_gt_function_trace_of_the_step_replays_it(mode):
    params, twins = _params(), _params()
    opt, ref = gt.optim.SGD(0.1), gt.optim.SGD(0.1)

    @gt.function
    def step(*grads):
        return opt.apply_gradients(zip(grads, params))

    for k in range(3):
        grads = _grads(params, seed=k)
        step(*grads)
        ref.apply_gradients(zip(grads, twins))
    assert [p.numpy().tobytes() for p in params] == [p.numpy().tobytes() for p in twins]
    assert int(opt.iterations) == int(ref.iterations) == 3


def test_a_bad_schedule_changes_nothing(mode):
    params = _params()
    opt = gt.optim.SGD(lambda step: float("nan") if step == 1 else 0.1)
    opt.apply_gradients(zip(_grads(params), params))
    before = _state(params, opt)
    with pytest.raises(ValueError, match="learning rate"):
        opt.apply_gradients(zip(_grads(params), params))
    assert _state(params, opt) == before


@pytest.mark.parametrize("report", ["raise", "warning-as-error"])
@pytest.mark.parametrize("shared", [False, True], ids=["unheld", "held"])
def test_a_floating_point_error_in_the_commit_is_raised_after_the_whole_step(monkeypatch, report, shared):
    # numpy reports an overflow of the commit's subtract after it wrote the result: the step is
    # committed whole (every variable, the count), then the report raised; on both paths
    outcomes = []
    for path in PATHS:
        with monkeypatch.context() as m:
            force(m, path)
            big = np.float32(3e38)
            params = [gt.Variable(np.full(3, -big)), gt.Variable(np.full(2, 1.0, np.float32))]
            held = [p.value() for p in params] if shared else []  # (a holder: its values must not change)
            grads = [gt.constant(np.full(3, big)), gt.constant(np.full(2, 1.0, np.float32))]
            opt = gt.optim.SGD(1.0)
            with np.errstate(over="raise" if report == "raise" else "warn"), warnings.catch_warnings():
                if report != "raise":
                    warnings.simplefilter("error", RuntimeWarning)
                try:
                    opt.apply_gradients(zip(grads, params))
                    raised = None
                except Exception as exc:
                    raised = type(exc)
            outcomes.append((raised, _state(params, opt)))
            assert [h.numpy().tolist() for h in held] == ([[-big] * 3, [1.0, 1.0]] if shared else [])
    assert all(o == outcomes[0] for o in outcomes[1:])
    assert outcomes[0][0] is (FloatingPointError if report == "raise" else RuntimeWarning)
    assert outcomes[0][1][1:] == [np.zeros(2, np.float32).tobytes(), 1]  # the second variable and the count
    assert np.isinf(np.frombuffer(outcomes[0][1][0], np.float32)).all()


def test_the_general_commit_finishes_before_it_raises_a_floating_point_report():
    # momentum SGD takes the general path (_commit): the same rule
    big = np.float32(3e38)
    params = [gt.Variable(np.full(3, -big)), gt.Variable(np.full(2, 1.0, np.float32))]
    grads = [gt.constant(np.full(3, big)), gt.constant(np.full(2, 1.0, np.float32))]
    opt = gt.optim.SGD(1.0, momentum=0.5)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        opt.apply_gradients(zip(grads, params))
    assert np.isinf(params[0].numpy()).all() and params[1].numpy().tolist() == [0.0, 0.0]
    assert int(opt.iterations) == 1


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_ctrl_c_inside_numpy_s_error_handling_of_an_update_leaves_the_step_undone(mode):
    # A warning shown for an update's subtract runs Python code, where a pending SIGINT raises.
    # Every new value is computed before the commit (which is reference stores only), so the
    # interrupt stops the step before anything changed: all old, and the next step is normal.
    big = np.float32(3e38)
    params = [gt.Variable(np.full(3, -big)), gt.Variable(np.full(2, 1.0, np.float32))]
    grads = [gt.constant(np.full(3, big)), gt.constant(np.full(2, 1.0, np.float32))]
    opt = gt.optim.SGD(1.0)
    calls = []

    def on_error(kind, flag):
        calls.append(kind)
        signal.raise_signal(signal.SIGINT)  # a Ctrl-C now: the handler runs at the next bytecode
        calls.append("after")

    before = _state(params, opt)
    old = np.seterrcall(on_error)
    try:
        with np.errstate(over="call"), pytest.raises(KeyboardInterrupt):
            opt.apply_gradients(zip(grads, params))
    finally:
        np.seterrcall(old)
    assert calls == ["overflow"]
    assert _state(params, opt) == before  # the whole step undone
    with np.errstate(over="ignore"):
        opt.apply_gradients(zip(grads, params))
    assert np.isinf(params[0].numpy()).all() and params[1].numpy().tolist() == [0.0, 0.0]
    assert int(opt.iterations) == 1


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_real_ctrl_c_at_a_random_moment_leaves_a_whole_step_or_none(mode):
    # (larger layers than the safety suite's: a longer step, so that many signals land inside it)
    counts = interrupt_trials(lambda: gt.optim.SGD(0.01), 150, sizes=(1568, 768, 384, 10))
    assert counts["half"] == 0, dict(counts)
    assert counts["before"] + counts["after"] >= 15, dict(counts)


# -- the generated step against the general path over random cases ------------------------------

_DTYPES = (np.float16, np.float32, np.float64)
_SHAPES = ((), (1,), (3,), (2, 3))
_GRADS = ("float64", "complex64", "int32", "shape", "raw", "none", "variable")


def _case(data):
    """A random apply_gradients call: variables, pairs (most of them the common case), a rate, numpy's error state."""
    draw = data.draw
    n = draw(st.integers(0, 5), label="variables")
    seed = draw(st.integers(0, 2**16), label="seed")
    big = draw(st.sampled_from([1.0, 1.0, 3e38]), label="scale")
    specs = [[draw(st.sampled_from(_SHAPES)), draw(st.sampled_from(_DTYPES)), "tensor", "tuple"] for _ in range(n)]
    # half of the cases are all common pairs (the generated step's own); the others spoil one or two
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]), label="spoilt") if n else 0):
        spec = specs[draw(st.integers(0, n - 1))]
        if draw(st.booleans()):
            spec[2] = draw(st.sampled_from(_GRADS))
        else:
            spec[3] = draw(st.sampled_from(["list", "triple", "not a variable"]))
    repeat = n > 0 and draw(st.sampled_from([False, False, False, True]), label="repeat")
    rate = draw(st.sampled_from([0.0, 0.25, 1.0, 1e39, "schedule", "nan schedule", "string schedule"]))
    errors = draw(st.sampled_from(["ignore", "warn", "raise", "warning-as-error"]))
    held = draw(st.booleans(), label="held")
    return seed, big, [tuple(spec) for spec in specs], repeat, rate, errors, held


# (module-level: an error message names the schedule, the same object on every path)
def _decaying(step):
    return 0.5 / (1 + step)


def _nan(step):
    return float("nan")


def _text(step):
    return "0.1"


_SCHEDULES = {"schedule": _decaying, "nan schedule": _nan, "string schedule": _text}


def _run_case(case):
    """The case's outcome: result or error, warnings, every variable's array and the count."""
    seed, big, specs, repeat, rate, errors, held = case
    rng = np.random.default_rng(seed)
    params, pairs = [], []
    for shape, dtype, kind, container in specs:
        with np.errstate(all="ignore"):
            v = gt.Variable((rng.standard_normal(shape) * big).astype(dtype))
            g = (rng.standard_normal(shape) * big).astype(dtype)
            other = g.astype(kind) if kind in ("float64", "complex64", "int32") else None
        params.append(v)
        if other is not None:
            g = gt.constant(other)
        elif kind == "shape":
            g = gt.constant(np.zeros((4,), dtype))
        elif kind == "raw":
            pass
        elif kind == "none":
            g = None
        elif kind == "variable":
            g = gt.Variable(g)
        else:
            g = gt.constant(g)
        pair = {"tuple": (g, v), "list": [g, v], "triple": (g, v, v), "not a variable": (g, g)}[container]
        pairs.append(pair)
    if repeat:
        pairs.append(pairs[0])
    lr = _SCHEDULES.get(rate, rate)
    opt = gt.optim.SGD(lr)
    holders = [(p.value(), p.numpy()) for p in params] if held else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if errors == "warning-as-error":
            warnings.simplefilter("error", RuntimeWarning)
        try:
            with np.errstate(all="raise" if errors == "raise" else "ignore" if errors == "ignore" else "warn"):
                result = opt.apply_gradients(pairs)
        except Exception as exc:  # (the outcome compared is the exception itself)
            result = (type(exc), str(exc))
    for h, old in holders:  # a published array is never written
        assert h.numpy().tobytes() == old.tobytes()
    state = [(type(p._data), p._data.shape, str(p._data.dtype), p._data.tobytes()) for p in params]
    return result, [(w.category, str(w.message)) for w in caught], state, int(opt.iterations)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same cases every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_the_generated_step_equals_the_general_path_over_random_cases(data, monkeypatch):
    case = _case(data)
    outcomes = []
    for path in PATHS:
        with monkeypatch.context() as m:
            force(m, path)
            parsed: list = []
            m.setattr(optim_base.Optimizer, "_apply_live", _counting(optim_base.Optimizer._apply_live, parsed))
            outcomes.append(_run_case(case))
        if path == "fast":
            _TALLY["generated" if not parsed and isinstance(outcomes[0][0], int) else "general"] += 1
    assert all(o == outcomes[0] for o in outcomes[1:])


_TALLY: Counter = Counter()


def _counting(general, calls):
    def apply_live(self, live):
        calls.append(live)
        return general(self, live)

    return apply_live


def test_the_random_cases_took_both_paths():
    # (runs after the property test: pytest keeps a module's order) most steps the generated one's,
    # many left to the general parse
    if not _TALLY:
        pytest.skip("the property test did not run")
    assert _TALLY["generated"] >= 60 and _TALLY["general"] >= 60, dict(_TALLY)


def test_a_step_over_many_variables_is_generated_once_per_count():
    params = [gt.Variable(np.ones(3, np.float32)) for _ in range(300)]
    grads = [gt.constant(np.ones(3, np.float32)) for _ in params]
    opt = gt.optim.SGD(0.5)
    opt.apply_gradients(zip(grads, params))
    step = optim_base._PLAIN_STEPS[300]
    opt.apply_gradients(zip(grads, params))
    assert optim_base._PLAIN_STEPS[300] is step
    assert all(p.numpy().tolist() == [0.0] * 3 for p in params)
