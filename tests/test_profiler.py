"""gt.profiler: Chrome trace content, counts, summary, restoration of the originals, errors."""

import json
import threading

import numpy as np
import pytest

import gputape as gt
from gputape.tape import REGISTRY, GradientTape


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


def test_originals_restored_after_stop(tmp_path):
    before, methods = _snapshot()
    gt.profiler.start(tmp_path)
    during, _ = _snapshot()
    assert during["tanh"][0] is not before["tanh"][0]
    assert during["tanh"][1] is not before["tanh"][1]
    assert during["tanh"][2] is not before["tanh"][2]
    assert GradientTape.__dict__["gradient"] is not methods["gradient"]
    _train_steps(1)
    gt.profiler.stop()
    after, methods_after = _snapshot()
    for name, objs in before.items():
        assert all(a is b for a, b in zip(after[name], objs)), name
    assert all(methods_after[m] is methods[m] for m in methods)
    # primitives without a C fast path keep cpu None
    assert REGISTRY["reshape"].cpu is None


def test_restored_even_when_the_profiled_code_raises(tmp_path):
    before, methods = _snapshot()
    with pytest.raises(ZeroDivisionError), gt.profiler.profile(tmp_path):
        gt.exp(gt.constant([1.0]))
        1 / 0
    assert not gt.profiler.is_active()
    after, methods_after = _snapshot()
    assert all(all(a is b for a, b in zip(after[n], before[n])) for n in before)
    assert all(methods_after[m] is methods[m] for m in methods)
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


def test_a_ctrl_c_while_ops_are_swapped_leaves_all_or_nothing(monkeypatch):
    import os
    import signal
    import time

    from gputape import profiler

    before, methods = _snapshot()
    calls = []
    swap = profiler._Session.swap

    def interrupted_swap(self, *a):
        calls.append(1)
        if len(calls) == 5:  # a real SIGINT, halfway through the swapping
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
        return swap(self, *a)

    monkeypatch.setattr(profiler._Session, "swap", interrupted_swap)
    with pytest.raises(KeyboardInterrupt):
        gt.profiler.start(None)
    assert len(calls) > 5  # the swapping finished before the interrupt was raised, then was undone
    assert not gt.profiler.is_active()
    after, methods_after = _snapshot()
    assert all(all(a is b for a, b in zip(after[n], before[n])) for n in before)
    assert all(methods_after[m] is methods[m] for m in methods)
