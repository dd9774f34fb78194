"""gt.function's CUDA graphs holding the optimizer update, variables in the runner's buffers.

A graph bakes in addresses and a variable's published array is never written, so the graphs
read and update variables in buffers of the runner's own; a variable the graph updates gets a
copy of its buffer after each launch (one device copy per variable per call).

On the CPU through the emulated graphs (``graphs="emulate"``: the same plan, buffers and
copies; a "graph" replays its segment on the arrays it captured, so a buffer the runner
failed to keep or refresh shows). Expected values: the same steps run eagerly (bitwise:
the fused kernel's numpy reference runs gt.optim's own update rules). The ``gpu``-marked
tests at the end run the same on cupy against the eager fused path.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys

import numpy as np
import pytest

import gputape as gt
from gputape.devices import backend

gfn = sys.modules["gputape.function"]


@pytest.fixture(autouse=True)
def _optimizer_in_graph(monkeypatch):
    # gt.function's optimizer_in_graph is off by default on a GPU until a GPU run has checked it;
    # these tests are that check (the emulated graphs run the logic whatever the default)
    monkeypatch.setattr(gfn, "OPTIMIZER_IN_GRAPH", True)


G = sys.modules["gputape.function._graphs"]


def _params(xp=np, dtype=np.float32, sizes=(12, 16, 16, 5), seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for a, b in itertools.pairwise(sizes):
        out += [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(dtype), (0.1 * rng.standard_normal(b)).astype(dtype)]
    return [gt.Variable(xp.asarray(a)) for a in out]


def _batches(n, xp=np, dtype=np.float32, seed=1):
    rng = np.random.default_rng(seed)
    return [
        (
            gt.constant(xp.asarray(rng.standard_normal((8, 12)).astype(dtype))),
            gt.constant(xp.asarray(rng.integers(0, 5, 8).astype(np.int64))),
        )
        for _ in range(n)
    ]


def _loss(params, x, y):
    w1, b1, w2, b2, w3, b3 = params
    h = gt.nn.relu(x @ w1 + b1)
    h = gt.tanh(h @ w2 + b2)
    return gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h @ w3 + b3))


MAKERS = {
    "sgd": lambda: gt.optim.SGD(0.1),
    "momentum-nesterov": lambda: gt.optim.SGD(0.05, momentum=0.9, nesterov=True),
    "adam-exponential-decay": lambda: gt.optim.Adam(gt.optim.ExponentialDecay(0.01, 2, 0.5)),
    "adam-step-decay": lambda: gt.optim.Adam(gt.optim.StepDecay(0.02, step_size=3, gamma=0.5)),
    "adamw": lambda: gt.optim.AdamW(0.01, weight_decay=0.05),
}


def _setup(make, graphs, xp=np):
    params = _params(xp)
    opt = make()

    def step(x, y):
        with gt.GradientTape() as tape:
            loss = _loss(params, x, y)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    f = step if graphs is None else gt.Function(step, graphs=graphs)
    return params, opt, f


def _state(params, opt):
    st = opt.get_state()
    return [backend.to_host(p._data).copy() for p in params], st["iterations"], st["slots"]


def _same_state(a, b, exact=True):
    (pa, ia, sa), (pb, ib, sb) = a, b
    assert ia == ib
    close = np.testing.assert_array_equal if exact else _close
    for x, y in zip(pa, pb):
        close(x, y)
    assert len(sa) == len(sb)
    for (_, da), (_, db) in zip(sa, sb):
        assert sorted(da) == sorted(db)
        for k in da:
            close(da[k], db[k])


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def _run(f, batches):
    for x, y in batches:
        f(x, y)


def _runner(f):
    return f._cache[f._keys[-1]].replay


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_optimizer_update_inside_one_graph_equals_eager_with_one_copy_out_per_variable(name):
    batches = _batches(8)
    e_params, e_opt, e_step = _setup(MAKERS[name], None)
    g_params, g_opt, f = _setup(MAKERS[name], "emulate")
    for k, (x, y) in enumerate(batches):
        want = e_step(x, y).numpy()
        got = f(x, y).numpy()
        assert np.array_equal(want, got), f"step {k}: loss {got} != eager {want}"
        _same_state(_state(e_params, e_opt), _state(g_params, g_opt))
        assert int(g_opt.iterations) == k + 1
        rep = f.graph_report
        if k >= 2:  # call 1 traces, call 2 runs eagerly (kernels compile), call 3 captures
            # the MLP step, forward, backward and update, is one graph and nothing runs between graphs
            assert rep["graphs"] == 1 and rep["optimizers_in_graphs"] == 1 and rep["host_steps"] == 0, rep
            assert rep["captures"] == 1 and not rep["refused"], rep
            # the two arguments are copied in once each; each variable is copied out of its buffer
            # into its new array (and, at the capture, into the buffer once); no slot is copied
            n = len(g_params) * (2 if k == 2 else 1)
            assert rep["copies"] == {"arguments": 2, "variables": n, "optimizer_slots": 0, "results": 1}, rep
    assert not np.array_equal(g_params[0].numpy(), _params()[0].numpy())
    runner = _runner(f)
    assert all(runner.var_buf[id(p)] is not p._data for p in g_params), "a variable's array is never the buffer"
    assert all(runner.var_src[id(p)] is p._data for p in g_params)  # ... and holds its value: nothing to copy in


def test_learning_rate_is_written_to_the_device_only_when_the_schedule_changes_it():
    _, opt, f = _setup(MAKERS["adam-step-decay"], "emulate")
    fills = []

    class Counted(np.ndarray):
        def fill(self, value):
            fills.append(float(value))
            super().fill(value)

    for k, (x, y) in enumerate(_batches(10)):
        f(x, y)
        if k == 2:  # captured: from now on the graph's host half sets the rate
            opt._fused._lr = opt._fused._lr.view(Counted)
    # StepDecay(0.02, 3, 0.5): steps 4..10 use the rate of iterations 3..9, which changes at 3, 6 and 9
    assert fills == [0.01, 0.005, 0.0025], fills


def _eager_and_graphs(make, scenario, xp=np, graphs="emulate"):
    """``scenario(params, opt, f, graphs)`` run eagerly, then with the graphs: the end states must match."""
    runs = []
    for g in (None, graphs):
        params, opt, f = _setup(make, g, xp)
        scenario(params, opt, f, g)
        runs.append(_state(params, opt))
    _same_state(*runs, exact=xp is np)
    return runs[1], f


def test_iterations_and_set_state_between_calls_are_followed_exactly():
    batches = _batches(9)

    def scenario(params, opt, f, graphs):
        _run(f, batches[:4])
        saved = opt.get_state()
        _run(f, batches[4:6])
        opt.set_state(saved)  # back to step 4: new slot arrays, iterations 4
        f(*batches[6])
        opt.iterations = 10  # the schedule and Adam's bias correction jump ahead
        _run(f, batches[7:])

    state, f = _eager_and_graphs(MAKERS["adam-exponential-decay"], scenario)
    assert state[1] == 12
    rep = f.graph_report
    assert rep["copies"]["optimizer_slots"] == 0, rep


def test_set_state_slots_are_copied_into_the_captured_ones():
    params, opt, f = _setup(MAKERS["adam-exponential-decay"], "emulate")
    for x, y in _batches(4):
        f(x, y)
    opt.set_state(opt.get_state())
    f(*_batches(1, seed=5)[0])
    assert f.graph_report["copies"]["optimizer_slots"] == 2 * len(params)  # momentum and velocity of each


def test_a_tensor_holding_a_variable_keeps_its_value_and_the_graph_is_not_recaptured():
    batches = _batches(7)

    def scenario(params, opt, f, graphs):
        _run(f, batches[:3])
        held = params[0].value()  # shares the variable's array, as in eager code
        before = held.numpy()
        f(*batches[3])
        assert np.array_equal(held.numpy(), before), "the held value must not change"
        _run(f, batches[4:])
        assert np.array_equal(held.numpy(), before)
        if graphs:
            rep = f.graph_report
            assert rep["captures"] == 1 and rep["copies"]["variables"] == len(params), rep

    _eager_and_graphs(MAKERS["adam-exponential-decay"], scenario)


def test_a_tape_holding_a_variable_keeps_its_saved_value():
    batches = _batches(5)

    def scenario(params, opt, f, graphs):
        _run(f, batches[:3])
        with gt.GradientTape(persistent=True) as tape:
            sq = gt.sum(params[1] * params[1])  # saves params[1]'s array
        want = 2.0 * params[1].numpy()
        _run(f, batches[3:])
        np.testing.assert_array_equal(tape.gradient(sq, params[1]).numpy(), want)

    _eager_and_graphs(MAKERS["sgd"], scenario)


def test_assign_between_calls_is_copied_into_the_captured_array():
    batches = _batches(6)

    def scenario(params, opt, f, graphs):
        _run(f, batches[:3])
        params[2].assign(np.full(params[2].shape, 0.25, np.float32))
        f(*batches[3])
        if graphs:
            rep = f.graph_report
            # the assigned value copied in, and each variable's new value copied out
            assert rep["copies"]["variables"] == 1 + len(params), rep
            assert _runner(f).var_src[id(params[2])] is params[2]._data
        _run(f, batches[4:])

    _eager_and_graphs(MAKERS["momentum-nesterov"], scenario)


def test_gradients_in_the_graph_and_an_eager_optimizer_outside():
    """Variables the graphs only read, updated eagerly between calls: each eager update publishes
    a new array, and each call copies it into the graphs' buffer."""
    batches = _batches(6)
    runs = []
    for graphs in (None, "emulate"):
        params, opt = _params(), MAKERS["adam-exponential-decay"]()

        def grads(x, y, params=params):
            with gt.GradientTape() as tape:
                loss = _loss(params, x, y)
            return tape.gradient(loss, params)

        f = grads if graphs is None else gt.Function(grads, graphs=graphs)
        for k, (x, y) in enumerate(batches):
            opt.apply_gradients(zip(f(x, y), params))
            if graphs and k >= 3:
                rep = f.graph_report
                assert rep["copies"]["variables"] == len(params), rep
                assert all(_runner(f).var_buf[id(p)] is not p._data for p in params)
        runs.append(_state(params, opt))
    _same_state(*runs)


def test_eager_steps_of_the_same_optimizer_between_calls():
    batches = _batches(8)

    def scenario(params, opt, f, graphs):
        for k, (x, y) in enumerate(batches):
            if k in (4, 6):  # an eager step outside the function (its spare slots swap in)
                with gt.GradientTape() as tape:
                    loss = _loss(params, x, y)
                opt.apply_gradients(zip(tape.gradient(loss, params), params))
            else:
                f(x, y)

    _eager_and_graphs(MAKERS["adam-exponential-decay"], scenario)


def test_a_variable_read_after_the_update_sees_the_new_value():
    batches = _batches(5)
    outs = []
    for graphs in (None, "emulate"):
        params, opt = _params(), MAKERS["adam-exponential-decay"]()

        def step(x, y, params=params, opt=opt):
            with gt.GradientTape() as tape:
                loss = _loss(params, x, y)
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss, gt.sum(params[0] * params[0])

        f = step if graphs is None else gt.Function(step, graphs=graphs)
        outs.append([[t.numpy() for t in f(x, y)] for x, y in batches])
        if graphs:
            rep = f.graph_report
            assert rep["optimizers_in_graphs"] == 1 and rep["graphs"] == 2, rep  # the read waits for the launch
    for a, b in zip(*outs):
        assert all(np.array_equal(u, v) for u, v in zip(a, b))


def test_clipping_keeps_the_update_a_host_step():
    _, _, f = _setup(lambda: gt.optim.Adam(0.01, global_clipnorm=0.5), "emulate")
    for x, y in _batches(4):
        f(x, y)
    rep = f.graph_report
    assert rep["optimizers_in_graphs"] == 0 and rep["host_steps"] == 1, rep


def test_clipping_set_after_the_capture_moves_the_update_out_of_the_graph():
    batches = _batches(7)

    def scenario(params, opt, f, graphs):
        _run(f, batches[:4])
        opt.global_clipnorm = 0.05  # (set as an attribute: the fused kernel cannot clip)
        _run(f, batches[4:])
        if graphs:
            rep = f.graph_report
            assert rep["optimizers_in_graphs"] == 0 and rep["host_steps"] == 1, rep

    _eager_and_graphs(MAKERS["adamw"], scenario)


def test_a_refused_optimizer_capture_falls_back_to_the_eager_step():
    batches = _batches(6)
    e_params, e_opt, e_step = _setup(MAKERS["adamw"], None)
    g_params, g_opt, f = _setup(MAKERS["adamw"], "emulate")
    f._refuse = lambda fn: type(fn) is G._GraphOptimizer
    for x, y in batches:
        assert np.array_equal(e_step(x, y).numpy(), f(x, y).numpy())
    _same_state(_state(e_params, e_opt), _state(g_params, g_opt))
    rep = f.graph_report
    assert len(rep["refused"]) == 1 and rep["optimizers_in_graphs"] == 0 and rep["host_steps"] == 1, rep


def test_a_schedule_error_in_the_host_half_changes_nothing():
    def rate(step):
        return float("nan") if step == 4 else 0.01

    params, opt, f = _setup(lambda: gt.optim.Adam(rate), "emulate")
    batches = _batches(6)
    _run(f, batches[:4])
    before = _state(params, opt)
    with pytest.raises(ValueError, match="learning rate"):
        f(*batches[4])
    _same_state(before, _state(params, opt))


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name == "nt", reason="needs POSIX SIGINT")
def test_ctrl_c_during_the_host_half_and_launch_is_held_until_the_step_is_whole():
    batches = _batches(6)
    e_params, e_opt, e_step = _setup(MAKERS["adam-exponential-decay"], None)
    g_params, g_opt, f = _setup(MAKERS["adam-exponential-decay"], "emulate")
    for x, y in batches[:4]:
        e_step(x, y)
        f(x, y)
    emu = _runner(f).backend
    launch = emu.launch

    def interrupted_launch(graph):
        signal.raise_signal(signal.SIGINT)  # after the host half, before the launch (this thread, at once)
        launch(graph)

    emu.launch = interrupted_launch
    with pytest.raises(KeyboardInterrupt):
        f(*batches[4])
    emu.launch = launch
    e_step(*batches[4])
    _same_state(_state(e_params, e_opt), _state(g_params, g_opt))  # the whole step, not half of it
    e_step(*batches[5])
    f(*batches[5])
    _same_state(_state(e_params, e_opt), _state(g_params, g_opt))


# -- on a GPU: the same against the eager fused path --------------------------------------------


@pytest.fixture(scope="module")
def cp():
    mod = backend.cupy_module()
    assert mod is not None  # the conftest hook skips gpu-marked tests without a GPU
    return mod


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_gpu_graph_with_the_optimizer_inside_equals_the_eager_fused_path(cp, name):
    batches = _batches(8, xp=cp)
    e_params, e_opt, e_step = _setup(MAKERS[name], None, xp=cp)
    g_params, g_opt, f = _setup(MAKERS[name], True, xp=cp)
    for k, (x, y) in enumerate(batches):
        _close(float(e_step(x, y)), float(f(x, y)))
        _same_state(_state(e_params, e_opt), _state(g_params, g_opt), exact=False)
        if k >= 2:
            rep = f.graph_report
            assert rep["graphs"] == 1 and rep["optimizers_in_graphs"] == 1 and not rep["refused"], rep
            assert rep["copies"]["variables"] == len(g_params) * (2 if k == 2 else 1), rep
    assert g_opt._fused.iterations == int(g_opt.iterations) == len(batches)


@pytest.mark.gpu
def test_gpu_graph_follows_held_values_set_state_and_iterations(cp):
    batches = _batches(9, xp=cp)

    def scenario(params, opt, f, graphs):
        _run(f, batches[:3])
        held = params[0].value()
        before = cp.asnumpy(held._data)
        f(*batches[3])
        np.testing.assert_array_equal(cp.asnumpy(held._data), before)
        saved = opt.get_state()
        f(*batches[4])
        opt.set_state(saved)
        opt.iterations = 7
        params[2].assign(cp.full(params[2].shape, 0.25, cp.float32))
        _run(f, batches[5:])

    _eager_and_graphs(MAKERS["adam-exponential-decay"], scenario, xp=cp, graphs=True)
