"""gt.profiler: Chrome trace content, counts, summary, restoration of the originals, errors."""

import itertools
import json
import threading

import numpy as np
import pytest

import gputape as gt
from gputape import REGISTRY, GradientTape


@pytest.fixture(autouse=True)
def _no_leftover_session():
    yield
    if gt.profiler.is_active():  # a failed test must not leave every op wrapped
        gt.profiler.stop()


def _snapshot():
    return {name: (p.fwd, p.cpu, p.vjp) for name, p in REGISTRY.items()}, {
        m: GradientTape.__dict__[m] for m in ("gradient", "jacobian", "batch_jacobian")
    }


def _train_steps(n):
    w = gt.Variable(np.full((3, 2), 0.5, "float32"), name="w")
    x = np.ones((4, 3), "float32")
    for _ in range(n):
        with gt.GradientTape() as tape:
            loss = gt.sum(gt.tanh(x @ w))
        tape.gradient(loss, w)


def test_trace_file_events_counts_and_summary(tmp_path):
    with gt.profiler.profile(tmp_path) as prof:
        _train_steps(3)
        gt.exp(gt.constant([1.0]))  # forward only, never differentiated
    res = prof.result
    assert res.trace_path == str(tmp_path / "trace.json") == prof.trace_path
    assert res.summary_path == str(tmp_path / "summary.txt") == prof.summary_path

    trace = json.loads(open(res.trace_path).read())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for e in events:
        assert {"name", "cat", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["dur"] >= 0 and e["ts"] >= 0

    def count(name, cat):
        return sum(1 for e in events if e["name"] == name and e["cat"] == cat)

    for op in ("matmul", "tanh", "sum"):
        assert count(op, "forward") == 3, op
        assert count(op, "backward") == 3, op
    assert count("exp", "forward") == 1 and count("exp", "backward") == 0
    assert count("gradient", "tape") == 3
    # VJP events lie inside their gradient() span
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "gradient"]
    for e in events:
        if e["cat"] == "backward":
            assert any(a <= e["ts"] and e["ts"] + e["dur"] <= b + 1e-3 for a, b in spans)

    assert res.stats["matmul"] == {**res.stats["matmul"], "forward_calls": 3, "backward_calls": 3}
    assert res.stats["exp"]["backward_calls"] == 0
    text = open(res.summary_path).read()
    assert text.strip() == res.summary.strip() == str(res).strip()
    lines = {ln.split()[0]: ln.split() for ln in text.splitlines()[2:] if ln.split()}
    for op in ("matmul", "tanh", "sum", "exp"):
        assert op in lines
    assert lines["tanh"][1] == "3" and lines["tanh"][4] == "3"
    assert "gradient: 3 call(s)" in text
    shares = [float(lines[op][7]) for op in ("matmul", "tanh", "sum", "exp")]
    assert sum(shares) == pytest.approx(100.0, abs=0.3)


def test_cpu_fast_path_and_generic_path_both_counted(tmp_path):
    x = gt.constant(np.array([1.0, 2.0], "float32"))
    assert REGISTRY["add"].cpu is not None  # x + y takes the C-level path
    with gt.profiler.profile(None) as prof:
        x + x
        gt.add(x, [1.0, 2.0])  # a list: the generic apply path through fwd
        gt.reshape(x, (2, 1))
    assert prof.result.stats["add"]["forward_calls"] == 2
    assert prof.result.stats["reshape"]["forward_calls"] == 1
    assert prof.result.trace_path is None


def test_nothing_is_swapped_and_the_entry_is_removed_after_stop(tmp_path):
    from gputape.core import state as _state

    before, methods = _snapshot()
    gt.profiler.start(tmp_path)
    assert _state.profiler is not None and _state.anywhere  # the op path's one entry
    during, methods_during = _snapshot()
    assert all(all(a is b for a, b in zip(during[n], before[n])) for n in before)  # no primitive touched
    assert all(methods_during[m] is methods[m] for m in methods)
    _train_steps(1)
    result = gt.profiler.stop()
    assert result.stats["tanh"]["forward_calls"] == 1 and result.stats["tanh"]["backward_calls"] == 1
    assert _state.profiler is None
    assert _state.tls.obs is None and not _state.anywhere  # nothing observes any more: ops take the fast path


def test_a_primitive_registered_while_profiling_is_profiled_too():
    from gputape.core.dispatch import primitive

    @primitive("demo_profiled_cube", complex="holomorphic", save=True)
    def cube(xp, x):
        return x * x * x

    @cube.defvjp
    def _(F, g, needs, nb, node, x):
        return (g * 3 * x * x,)

    try:
        with gt.profiler.profile(None) as prof:
            x = gt.constant([2.0])
            with gt.GradientTape() as tape:
                tape.watch(x)
                y = cube(x)
            assert float(tape.gradient(y, x)[0]) == 12.0
        assert prof.result.stats["demo_profiled_cube"]["forward_calls"] == 1
        assert prof.result.stats["demo_profiled_cube"]["backward_calls"] == 1
    finally:
        del REGISTRY["demo_profiled_cube"]


def test_stopped_even_when_the_profiled_code_raises(tmp_path):
    from gputape.core import state as _state

    with pytest.raises(ZeroDivisionError), gt.profiler.profile(tmp_path):
        gt.exp(gt.constant([1.0]))
        1 / 0
    assert not gt.profiler.is_active()
    assert _state.profiler is None
    assert (tmp_path / "trace.json").exists()


def test_double_start_and_stray_stop_are_clear_errors(tmp_path):
    gt.profiler.start(tmp_path)
    with pytest.raises(RuntimeError, match="already running"):
        gt.profiler.start(tmp_path / "other")
    with pytest.raises(RuntimeError, match="already running"), gt.profiler.profile(None):
        pass
    gt.profiler.stop()
    with pytest.raises(RuntimeError, match="no profiling session"):
        gt.profiler.stop()


def test_nested_backward_events_use_self_time():
    # A tape recording the gradient computation makes the VJPs call gputape ops:
    # those forward events nest inside the backward ones.
    x = gt.constant(0.5)
    with gt.profiler.profile(None) as prof:
        with gt.GradientTape() as outer:
            outer.watch(x)
            with gt.GradientTape() as inner:
                inner.watch(x)
                y = gt.tanh(x)
            g = inner.gradient(y, x)
        outer.gradient(g, x)
    st = prof.result.stats
    assert st["tanh"]["backward_calls"] >= 2
    assert all(v["forward_ns"] >= 0 and v["backward_ns"] >= 0 for v in st.values())


def test_threads_get_their_own_tid(tmp_path):
    def work():
        gt.exp(gt.constant([1.0]))

    with gt.profiler.profile(tmp_path) as prof:
        work()
        t = threading.Thread(target=work)
        t.start()
        t.join()
    events = json.loads(open(prof.trace_path).read())["traceEvents"]
    tids = {e["tid"] for e in events if e["ph"] == "X" and e["name"] == "exp"}
    assert len(tids) == 2
    assert prof.result.stats["exp"]["forward_calls"] == 2


def test_gradients_unchanged_while_profiling():
    w = gt.Variable([1.0, 2.0])
    with gt.GradientTape() as t:
        y = gt.sum(gt.sin(w) * w)
    ref = t.gradient(y, w).numpy()
    with gt.profiler.profile(None):
        with gt.GradientTape() as t:
            y = gt.sum(gt.sin(w) * w)
        got = t.gradient(y, w).numpy()
        jac_tape = gt.GradientTape()
        with jac_tape:
            jac_tape.watch(w)
            z = w * w
        jac = jac_tape.jacobian(z, w).numpy()
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(jac, np.diag([2.0, 4.0]))


def test_a_ctrl_c_while_starting_leaves_no_session(monkeypatch):
    import signal
    import time

    from gputape.core import state as _state

    real = _state.set_profiler
    calls = []

    def interrupted(session):
        calls.append(session)
        if len(calls) == 1:  # a real SIGINT between the two stores of start()
            signal.raise_signal(signal.SIGINT)  # (this thread, at once)
            time.sleep(0.01)
        real(session)

    monkeypatch.setattr(_state, "set_profiler", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gt.profiler.start(None)
    assert calls[0] is not None and calls[-1] is None  # installed, then undone before the interrupt went on
    assert not gt.profiler.is_active()
    assert _state.profiler is None


# -- custom_gradient ops ----------------------------------------------------------------------


@gt.custom_gradient
def _scaled_exp(x):
    y = gt.exp(x) * 2.0

    def grad(dy):
        return dy * y

    return y, grad


def test_custom_gradient_ops_are_profiled_forward_and_backward():
    from gputape.core import custom_gradient as tape_mod

    originals = (tape_mod._custom_forward, tape_mod._custom_vjp, tape_mod._CUSTOM.vjp)
    x = gt.constant(np.array([0.0, 1.0], "float32"))
    with gt.profiler.profile(None) as prof:
        for _ in range(2):
            with gt.GradientTape() as tape:
                tape.watch(x)
                y = gt.sum(_scaled_exp(x))
            g = tape.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), 2 * np.exp([0.0, 1.0]), rtol=1e-6)
    st = prof.result.stats["custom_gradient:_scaled_exp"]
    assert st["forward_calls"] == 2 and st["backward_calls"] == 2
    # the ops inside the forward and inside grad_fn are events of their own; the custom op's
    # times are self times, so every share still adds up
    assert prof.result.stats["exp"]["forward_calls"] == 2
    assert prof.result.stats["multiply"]["forward_calls"] >= 4  # exp(x) * 2 and dy * y, twice
    assert all(v["forward_ns"] >= 0 and v["backward_ns"] >= 0 for v in prof.result.stats.values())
    assert (tape_mod._custom_forward, tape_mod._custom_vjp, tape_mod._CUSTOM.vjp) == originals


# -- device timing: the CUDA-event path, run on the CPU with a fake clock --------------------


class FakeEvents:
    """A device clock whose every record() is 1 us after the previous one, in call order.

    Then an event with no device-timed children lasts exactly 1 us of device time, and one
    with n direct device-timed children has a self time of (n + 1) us: the numbers the
    profiler must compute from the pairs it recorded, whatever the host clock says.
    """

    def __init__(self):
        self.now = 0
        self.synced = []

    def applies(self, args):
        return True

    def record(self):
        self.now += 1000
        return self.now

    def synchronize(self, event):
        self.synced.append(event)

    def elapsed_ns(self, a, b):
        # one stream: an event is complete once a later-or-equal one was synchronized
        assert self.synced and b <= max(self.synced), "a device time read before its event completed"
        return b - a


def test_device_timing_path_with_a_fake_clock(tmp_path):
    clock = FakeEvents()
    x = gt.constant(np.array([0.0, 1.0], "float32"))
    with gt.profiler.profile(tmp_path, device_timing=clock) as prof:
        with gt.GradientTape() as tape:
            tape.watch(x)
            y = _scaled_exp(x)  # custom forward: exp and multiply inside
        tape.gradient(y, x)
    res = prof.result
    assert res.device_timed and clock.synced  # synchronized at stop() only (elapsed_ns checks it)
    st = res.stats
    assert st["exp"]["forward_device_calls"] == 1 and st["exp"]["forward_device_ns"] == 1000
    # the custom forward has two device-timed children (exp, multiply): self = 3 us
    assert st["custom_gradient:_scaled_exp"]["forward_device_ns"] == 3000
    # its backward runs grad_fn's one multiply (diff=False: on tensors, so it is an op event)
    assert st["custom_gradient:_scaled_exp"]["backward_device_ns"] == 2000
    for name, s in st.items():
        for cat in ("forward", "backward"):
            assert s[f"{cat}_device_calls"] == s[f"{cat}_calls"], name  # every call applied here
    assert "fwd device ms" in res.summary and "device clock: CUDA events" in res.summary

    trace = json.loads(open(res.trace_path).read())["traceEvents"]
    host = [e for e in trace if e["ph"] == "X" and e["tid"] != gt.profiler.DEVICE_TID]
    dev = [e for e in trace if e["ph"] == "X" and e["tid"] == gt.profiler.DEVICE_TID]
    assert sorted((e["name"], e["cat"] + ".device") for e in host) == sorted((e["name"], e["cat"]) for e in dev)
    assert {e["cat"] for e in dev} == {"forward.device", "backward.device", "tape.device"}
    assert any(e["args"]["name"] == "device (CUDA events)" for e in trace if e["ph"] == "M")
    # placed by offset from the session's first event: strictly increasing starts, 1 us apart at least
    starts = sorted(e["ts"] for e in dev)
    assert starts[0] >= 1.0 and all(b - a >= 1.0 for a, b in itertools.pairwise(starts))
    leaf = next(e for e in dev if e["name"] == "exp")
    assert leaf["dur"] == 1.0 and leaf["args"]["self_us"] == 1.0


def test_device_timing_off_and_bad_arguments():
    with gt.profiler.profile(None, device_timing=False) as prof:
        gt.exp(gt.constant([1.0]))
    assert not prof.result.device_timed and "device" not in prof.result.summary
    assert prof.result.stats["exp"]["forward_device_calls"] == 0
    with pytest.raises(TypeError, match="device_timing"):
        gt.profiler.start(None, device_timing="cuda")
    assert not gt.profiler.is_active()
    from gputape.devices import backend

    if backend.cuda_unavailable_reason() is not None:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            gt.profiler.start(None, device_timing=True)
        assert not gt.profiler.is_active()
        with gt.profiler.profile(None) as prof:  # the default: host clock only without a GPU
            gt.exp(gt.constant([1.0]))
        assert not prof.result.device_timed


def test_cuda_events_apply_only_to_gpu_arrays():
    from gputape.devices import backend

    if backend.cupy_module() is None:
        with pytest.raises(RuntimeError, match="CuPy"):
            gt.profiler.CudaEvents()
        return
    ev = gt.profiler.CudaEvents()
    a = np.ones(2)
    assert not ev.applies((np, a)) and not ev.applies((a, 2.0)) and not ev.applies((None, [None, a]))


@pytest.mark.gpu
def test_cuda_event_timing_on_the_gpu(tmp_path):
    """Device times from CUDA events: every op call on the GPU is timed, forward and VJP."""
    from gputape.devices import backend

    cp = backend.cupy_module()
    w = gt.Variable(cp.full((256, 256), 0.01, "float32"), name="w")
    x = gt.constant(cp.ones((512, 256), "float32"))
    with gt.profiler.profile(tmp_path, device_timing=True) as prof:
        for _ in range(3):
            with gt.GradientTape() as tape:
                loss = gt.sum(gt.tanh(x @ w))
            g = tape.gradient(loss, w)
            float(gt.sum(g))
    res = prof.result
    assert res.device_timed
    for op in ("matmul", "tanh", "sum"):
        s = res.stats[op]
        assert s["forward_device_calls"] == s["forward_calls"] == 3, op
        assert s["backward_device_calls"] == s["backward_calls"] == 3, op
        assert s["forward_device_ns"] > 0 and s["backward_device_ns"] > 0, op
    trace = json.loads(open(res.trace_path).read())["traceEvents"]
    dev = [e for e in trace if e["ph"] == "X" and e["tid"] == gt.profiler.DEVICE_TID]
    assert len(dev) >= 18 and all(e["dur"] >= 0 for e in dev)
