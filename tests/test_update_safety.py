"""A value a tape recorded never changes: every update of a variable publishes a new array.

gputape's rule (README, "Variables"): a variable's array, once published, is never written again;
``assign*``, the optimizers, the fused optimizer and gt.function's graphs compute each new value
into a new array and swap it in with one reference store. These tests pin what that rule buys:

* the three crashes of the removed C plain-SGD step, each in a subprocess of its own (a crash
  must fail the test, not kill the suite): numpy's error callback assigning the variable while
  ``SGD.apply_gradients`` updates it; a thread assigning the variable while another steps it;
  a callback deleting the variable's array during a step;
* the threads repro: one thread steps SGD on a shared variable while another records
  ``y = v * v`` and differentiates: every gradient uses the value the op saw;
* a tape's recorded value survives eager steps of every optimizer and ``assign*``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from fake_gpu import FakeArray
from test_placement import fake_gpu  # noqa: F401  (the fixture: a numpy-backed cuda:0)

import gputape as gt
from gputape import optim
from gputape.devices import backend
from gputape.optim.fused import FusedOptimizer, ref_optimizer_update


def _run_isolated(body: str, timeout: float = 120.0) -> str:
    """Run ``body`` in a fresh interpreter (faulthandler on): it must exit 0 and print OK last."""
    # (the gputape this process imported, wherever it is)
    root = os.path.dirname(os.path.dirname(os.path.abspath(gt.__file__)))
    head = f"import sys\nsys.path.insert(0, {root!r})\nimport numpy as np\nimport gputape as gt\n"
    code = head + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True, timeout=timeout
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit status {proc.returncode} (negative: killed by that signal)\n{out[-4000:]}"
    assert proc.stdout.strip().splitlines()[-1:] == ["OK"], out[-4000:]
    return out


# -- (a) numpy's error callback assigns the variable during SGD's update -------------------------


def test_an_error_callback_that_assigns_the_variable_during_a_step():
    _run_isolated(
        """
        import gc
        big = np.float32(3e38)
        v = gt.Variable(np.full(100_000, -big, np.float32))
        g = gt.constant(np.full(100_000, big, np.float32))
        with gt.GradientTape(persistent=True) as tape:
            y = gt.sum(v * v)
        saw = v.numpy()
        assigned = []

        def on_error(kind, flag):  # numpy calls this for the overflow of w - lr * g
            v.assign(np.full(100_000, 7.0, np.float32))
            assigned.append(v._data)
            gc.collect()

        old = np.seterrcall(on_error)
        try:
            with np.errstate(all="call"):
                gt.optim.SGD(1.0).apply_gradients([(g, v)])
        finally:
            np.seterrcall(old)
        assert assigned, "the callback never ran: the test did not exercise the race"
        # v holds one published value: the step's (computed from the value before the assign,
        # stored last) or the callback's; never a mix
        now = v.numpy()
        step = np.full(100_000, -np.inf, np.float32)
        assert np.array_equal(now, step) or np.array_equal(now, np.full(100_000, 7.0, np.float32)), now[:4]
        # the tape's gradient uses the value the op recorded
        assert np.array_equal(tape.gradient(y, v).numpy(), 2 * saw)
        # the memory is intact: unrelated numpy work afterwards is right
        a = np.arange(1_000_000, dtype=np.float64)
        assert float(a.sum()) == 499999500000.0
        print("OK")
        """
    )


# -- (b) one thread steps a 1M-float variable while another assigns it ---------------------------


def test_assign_in_one_thread_while_another_steps_sgd_on_the_variable():
    _run_isolated(
        """
        import sys, threading
        sys.setswitchinterval(1e-5)  # switch threads as often as possible
        n = 1_000_000
        v = gt.Variable(np.zeros(n, np.float32))
        ones = gt.constant(np.ones(n, np.float32))
        opt = gt.optim.SGD(1.0)
        zeros = np.zeros(n, np.float32)
        stop = threading.Event()
        bad = []

        def uniform(a, what):  # every published value is uniform: 0 or a step of -1 from one
            if a.min() != a.max():
                bad.append(f"{what}: torn value {a.min()}..{a.max()}")

        def stepper():
            try:
                for _ in range(300):
                    with gt.GradientTape(persistent=True) as tape:
                        x = v.value()  # the tape and x hold the published array
                        y = gt.sum(x * 2.0)
                    before = x.numpy()
                    opt.apply_gradients([(ones, v)])
                    uniform(before, "read")
                    if not np.array_equal(x.numpy(), before):
                        bad.append("a value the tape recorded changed")
                    uniform(v.numpy(), "after a step")
                    del tape, y
            finally:
                stop.set()

        def assigner():
            while not stop.is_set():
                v.assign(zeros)

        threads = [threading.Thread(target=stepper), threading.Thread(target=assigner)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        uniform(v.numpy(), "at the end")
        assert not bad, bad[:5]
        assert int(opt.iterations) == 300
        print("OK")
        """,
        timeout=300,
    )


# -- (c) a callback deletes the variable's array during a step -----------------------------------


@pytest.mark.parametrize("how", ["del", "reassign"])
def test_a_callback_that_deletes_the_variable_s_array_during_a_step(how):
    _run_isolated(
        f"""
        import gc
        how = {how!r}
        big = np.float32(3e38)
        v = gt.Variable(np.full(200_000, -big, np.float32))
        g = gt.constant(np.full(200_000, big, np.float32))
        with gt.GradientTape(persistent=True) as tape:
            y = gt.sum(v * v)
        saw = v.numpy()
        calls = []

        def on_error(kind, flag):
            calls.append(kind)
            if how == "del":
                del v._data  # the variable's array: its last reference but the tape's and the step's
            else:
                v._data = np.ones(200_000, np.float32)  # swapped behind the variable's back
            gc.collect()
            np.ones(200_000, np.float32) * 3  # fresh allocations that could reuse freed memory

        old = np.seterrcall(on_error)
        try:
            with np.errstate(all="call"):
                gt.optim.SGD(1.0).apply_gradients([(g, v)])
        finally:
            np.seterrcall(old)
        assert calls
        # the step computed its value from the array it read; it is what v holds now
        assert np.isinf(v.numpy()).all() and (v.numpy() < 0).all()
        assert np.array_equal(tape.gradient(y, v).numpy(), 2 * saw)
        # and the variable works on: an ordinary step, then unrelated numpy work
        gt.optim.SGD(0.5).apply_gradients([(gt.constant(np.zeros(200_000, np.float32)), v)])
        assert np.isinf(v.numpy()).all()
        assert float(np.arange(1000.0).sum()) == 499500.0
        print("OK")
        """
    )


# -- (d) one thread steps SGD while another records and differentiates ---------------------------


def test_gradients_in_one_thread_use_the_value_their_op_saw_while_another_steps_sgd():
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    n = 1 << 18
    v = gt.Variable(np.ones(n))
    step = gt.constant(np.full(n, 0.5))
    opt = optim.SGD(1.0)
    stop = threading.Event()
    wrong = []
    done = [0]

    def stepper():
        while not stop.is_set():
            opt.apply_gradients([(step, v)])

    def recorder():
        for _ in range(200):
            with gt.GradientTape() as tape:
                # one read (v * v reads the variable twice, and the stepper may publish in between:
                # the gradient would then rightly be s1 + s2 for y = s1 * s2)
                x = v.value()
                y = x * x  # y holds s * s for the value s the op saw
            g = tape.gradient(y, v).numpy()  # 2 * s, if the tape's saved s is still s
            y = y.numpy()
            if not np.array_equal((g / 2) ** 2, y):
                wrong.append(float(np.abs((g / 2) ** 2 - y).max()))
            done[0] += 1

    t1, t2 = threading.Thread(target=stepper), threading.Thread(target=recorder)
    try:
        t1.start()
        t2.start()
        t2.join()
    finally:
        stop.set()
        t1.join()
        sys.setswitchinterval(old_switch)
    assert done[0] == 200
    assert int(opt.iterations) > 0
    assert not wrong, f"{len(wrong)} of 200 gradients used a value the tape did not record"


# -- a recorded value survives eager steps of every optimizer and assign* ------------------------


def _fused(make):
    def made():
        opt = make()
        opt._fused_on_cpu = True  # the one-launch path, run on its numpy reference
        return opt

    return made


UPDATES = {
    "sgd": lambda: optim.SGD(0.1),
    "sgd-momentum": lambda: optim.SGD(0.1, momentum=0.9),
    "sgd-nesterov": lambda: optim.SGD(0.1, momentum=0.9, nesterov=True),
    "sgd-weight-decay": lambda: optim.SGD(0.1, weight_decay=0.01),
    "sgd-clipnorm": lambda: optim.SGD(0.1, clipnorm=0.5),
    "adam": lambda: optim.Adam(0.1),
    "amsgrad": lambda: optim.Adam(0.1, amsgrad=True),
    "adamw": lambda: optim.AdamW(0.1),
    "rmsprop": lambda: optim.RMSprop(0.1),
    "rmsprop-momentum-centered": lambda: optim.RMSprop(0.1, momentum=0.5, centered=True),
    "sgd-fused": _fused(lambda: optim.SGD(0.1, momentum=0.9)),
    "adam-fused": _fused(lambda: optim.Adam(0.1)),
    "adamw-fused": _fused(lambda: optim.AdamW(0.1)),
}
ASSIGNS = {
    "assign": lambda v: v.assign(v.numpy() + np.float32(0.25)),
    "assign_add": lambda v: v.assign_add(np.full(v.shape, 0.25, np.float32)),
    "assign_sub": lambda v: v.assign_sub(gt.constant(np.full(v.shape, 0.25, np.float32))),
}


def _eager_update(name):
    if name in ASSIGNS:
        return ASSIGNS[name]
    opt = UPDATES[name]()
    return lambda v: opt.apply_gradients([(gt.constant(np.full(v.shape, 0.5, np.float32)), v)])


def _recorded_value_survives(name, xp_type):
    rng = np.random.default_rng(0)
    v = gt.Variable(rng.standard_normal((5, 3)).astype(np.float32))
    update = _eager_update(name)
    update(v)  # slots exist
    with gt.GradientTape(persistent=True) as tape:
        y = gt.sum(v * v)  # saves v's array
    saw = v.numpy()
    held = v._data
    for _ in range(3):
        update(v)
        assert v._data is not held and type(v._data) is xp_type
    assert not np.array_equal(v.numpy(), saw)
    assert backend.to_host(held).tobytes() == saw.tobytes()  # the array the tape recorded was never written
    assert tape.gradient(y, v).numpy().tobytes() == (2 * saw).tobytes()


@pytest.mark.parametrize("name", sorted(UPDATES) + sorted(ASSIGNS))
def test_a_recorded_value_survives_every_eager_update(name):
    _recorded_value_survives(name, np.ndarray)


_launches = []


def _reference_launch(self, arrays, gs, slots, hyper, capture=None):
    """FusedOptimizer's kernel on the fake GPU: its numpy reference, on the fake device arrays."""
    _launches.append(self.kind)
    m = [s[0] for s in slots]
    v = [s[1] for s in slots]
    ref_optimizer_update(self.kind, arrays, gs, m, v, self._step, self._parity, self._lr, **hyper)


@pytest.mark.usefixtures("fake_gpu")
@pytest.mark.parametrize("name", sorted(n for n in UPDATES if "fused" not in n) + sorted(ASSIGNS))
def test_on_the_fake_gpu_a_recorded_value_survives_every_update(monkeypatch, name):
    # SGD, Adam and AdamW take the one-launch path on device arrays: its kernel, played here by
    # its reference, updates a copy of each variable's value, which is swapped in
    monkeypatch.setattr(FusedOptimizer, "_launch", _reference_launch)
    _launches.clear()
    with gt.device("cuda"):
        _recorded_value_survives(name, FakeArray)
    fused = name in ("sgd", "sgd-momentum", "sgd-nesterov", "sgd-clipnorm", "adam", "adamw")
    assert bool(_launches) == fused, _launches
