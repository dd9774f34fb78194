"""Device placement (TensorFlow's rule), the one-transfer rule and the transfer counters.

On a CPU machine a fake GPU (``tests/fake_gpu.py``: numpy arrays of their own subclass
behind the backend's cupy seam) stands in for ``cuda:0``, so every constructor's placement
decision, the mismatch error, soft placement and the counters run through the backend's
real code. The real copies are checked by the ``gpu``-marked tests at the end.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
from fake_gpu import FakeArray, FakeCupy

import gputape as gt
import gputape.devices.placement as pl
import gputape.tf as tf
from gputape import config
from gputape.core import expr
from gputape.core import state as _state
from gputape.devices import backend


@pytest.fixture
def fake_gpu(monkeypatch):
    """A fake ``cuda:0`` that answers the smoke kernel and is the default device."""
    if backend.gpu_available():
        pytest.skip("a real GPU answers here: the gpu-marked tests below check the real copies")
    monkeypatch.setattr(backend, "_cupy", FakeCupy())
    monkeypatch.setattr(backend, "_probed", {})
    monkeypatch.setattr(backend, "_default", None)
    monkeypatch.delenv("GPUTAPE_DEVICE", raising=False)
    # the fake runs no CUDA: generated VJPs take their array path (no fused kernel fits)
    monkeypatch.setattr(expr, "launch_dtype", lambda dt: None)
    monkeypatch.setattr(config, "_soft_placement", False)
    gt.debug.reset_transfer_stats()
    yield monkeypatch
    gt.debug.reset_transfer_stats()


def h2d():
    return gt.debug.transfer_stats()["host_to_device"]


class _Init:
    """A Keras initializer returning host numpy, as gputape's own do."""

    def __call__(self, shape, dtype="float32"):
        return np.full(shape, 0.5, dtype)


def _dense_weights():
    layer = gt.nn.Dense(3, kernel_initializer=_Init())
    layer.build((None, 2))
    return layer.kernel


# Every way to make a value from host data, each returning the new tensor.
CONSTRUCTORS = {
    "constant(float)": lambda: gt.constant(2.0),
    "constant(list)": lambda: gt.constant([1.0, 2.0]),
    "constant(numpy)": lambda: gt.constant(np.arange(3.0)),
    "constant(numpy scalar)": lambda: gt.constant(np.float32(1.5)),
    "Variable(float)": lambda: gt.Variable(2.0),
    "Variable(list)": lambda: gt.Variable([1.0, 2.0]),
    "Variable(numpy)": lambda: gt.Variable(np.zeros((2, 2), "float32")),
    "Variable(callable)": lambda: gt.Variable(lambda: np.ones(3)),
    "Variable(zeros)": lambda: gt.Variable(gt.zeros([5])),
    "zeros": lambda: gt.zeros((2, 3)),
    "ones_like(numpy)": lambda: gt.ones_like(np.zeros(2)),
    "full": lambda: gt.full((2,), 3.0),
    "eye": lambda: gt.eye(2),
    "arange": lambda: gt.arange(4),
    "random.normal": lambda: gt.random.normal((2, 2)),
    "random.uniform": lambda: gt.random.uniform((3,)),
    "initializer -> Variable": lambda: gt.Variable(gt.nn.initializers.get("glorot_uniform")((2, 2))),
    "layer weight": _dense_weights,
    "tf.constant": lambda: tf.constant([1.0]),
    "tf.Variable(2.0)": lambda: tf.Variable(2.0),
    "tf.Variable(tf.zeros)": lambda: tf.Variable(tf.zeros([5])),
}


# -- the decision, without a second device -----------------------------------------------


def test_placement_decision_on_the_cpu():
    with gt.device("cpu"):
        assert pl.placement(2.0) == "cpu"
        assert pl.placement(np.zeros(2)) == "cpu"
        assert pl.placement(gt.constant(1.0), variable=True) == "cpu"
        assert pl.placement([1.0], "CPU:0") == "cpu"
        assert pl.scope_device() == "cpu"
    assert pl.scope_device() is None  # outside every scope: the default device decides
    with pytest.raises(ValueError, match="unknown device"):
        pl.placement(1.0, "tpu")


def test_tensorflow_device_names_parse():
    assert backend.parse_device("/device:GPU:1") == "cuda:1"
    assert backend.parse_device("/GPU:0") == "cuda:0"
    assert backend.parse_device("/device:CPU:0") == "cpu"


# -- every constructor on the fake GPU -----------------------------------------------------


@pytest.mark.parametrize("make", CONSTRUCTORS.values(), ids=CONSTRUCTORS.keys())
def test_host_data_lands_on_the_default_gpu(fake_gpu, make):
    assert gt.current_device() == "cuda:0"
    t = make()
    assert t.device == "cuda:0" and type(t._data) is FakeArray


@pytest.mark.parametrize("make", CONSTRUCTORS.values(), ids=CONSTRUCTORS.keys())
def test_a_cpu_scope_places_on_the_cpu(fake_gpu, make):
    with gt.device("cpu"):
        t = make()
    assert t.device == "cpu" and type(t._data) is np.ndarray


@pytest.mark.parametrize("make", CONSTRUCTORS.values(), ids=CONSTRUCTORS.keys())
def test_a_gpu_scope_places_on_the_gpu_when_the_default_is_the_cpu(fake_gpu, make):
    fake_gpu.setenv("GPUTAPE_DEVICE", "cpu")
    assert make().device == "cpu"
    with gt.device("cuda"):
        t = make()
    assert t.device == "cuda:0" and type(t._data) is FakeArray


def test_device_argument_overrides_the_scope(fake_gpu):
    with gt.device("cuda"):
        assert gt.constant(np.zeros(2), device="cpu").device == "cpu"
        assert gt.Variable(2.0, device="cpu").device == "cpu"
        assert gt.zeros(2, device="cpu").device == "cpu"
        assert gt.random.normal((2,), device="cpu").device == "cpu"
    with gt.device("cpu"):
        assert gt.constant(np.zeros(2), device="cuda").device == "cuda:0"
        assert gt.Variable([1.0], device="cuda:0").device == "cuda:0"


def test_gpu_arrays_stay_on_their_gpu(fake_gpu):
    fake_gpu.setenv("GPUTAPE_DEVICE", "cpu")
    a = FakeCupy().asarray(np.arange(3.0))
    assert gt.constant(a).device == "cuda:0"
    assert gt.Variable(a).device == "cuda:0"
    g = gt.constant([1.0], device="cuda")
    with gt.device("cpu"):
        assert gt.constant(a).device == "cuda:0"  # a cupy array stays unless device= asks
        assert gt.constant(g) is not None and gt.constant(g).device == "cuda:0"  # tf.constant(t) is t
        assert gt.Variable(a).device == "cpu"  # TensorFlow creates variables on the scope's device
    h = gt.constant([1.0], device="cpu")
    assert gt.Variable(h).device == "cpu"  # the default device is the CPU here
    fake_gpu.delenv("GPUTAPE_DEVICE")
    assert gt.Variable(h).device == "cuda:0"  # a host tensor is host data: the default GPU


def test_each_host_value_is_copied_once_and_counted(fake_gpu):
    a = np.arange(6.0, dtype="float32")
    gt.debug.reset_transfer_stats()
    gt.constant(a)
    gt.Variable(a)
    gt.Variable(2.0)
    st = gt.debug.transfer_stats()
    assert st["host_to_device"] == 3 and st["host_to_device_bytes"] == 24 + 24 + 4
    assert st["device_to_host"] == 0


def test_assigning_host_data_to_a_gpu_variable_copies_it(fake_gpu):
    v = gt.Variable([1.0, 2.0])
    gt.debug.reset_transfer_stats()
    v.assign([3.0, 4.0])
    v.assign_add(np.ones(2, "float32"))
    assert v.device == "cuda:0" and v.numpy().tolist() == [4.0, 5.0]
    st = gt.debug.transfer_stats()
    assert st["host_to_device"] == 2 and st["device_to_host"] == 1  # (.numpy())


# -- one transfer, not one per op -------------------------------------------------------------


def test_a_host_tensor_in_a_gpu_op_is_refused(fake_gpu):
    x = gt.constant([1.0, 2.0])
    with gt.device("cpu"):
        h = gt.constant([3.0, 4.0])
        hv = gt.Variable([[1.0], [2.0]])
    gt.debug.reset_transfer_stats()
    for f in (lambda: x + h, lambda: h * x, lambda: gt.maximum(x, h), lambda: gt.matmul(x[None], hv)):
        with pytest.raises(ValueError) as e:
            f()
        msg = str(e.value)
        assert "cpu" in msg and "cuda:0" in msg and "set_soft_device_placement(True)" in msg
        assert ".to('cuda:0')" in msg
    assert "variable on cpu" in msg
    assert h2d() == 0  # nothing copied behind the user's back


def test_soft_placement_copies_and_counts(fake_gpu):
    x = gt.constant([1.0, 2.0])
    with gt.device("cpu"):
        h = gt.constant([3.0, 4.0])
    gt.config.set_soft_device_placement(True)
    gt.debug.reset_transfer_stats()
    y = x + h
    z = h * x
    assert y.device == z.device == "cuda:0"
    st = gt.debug.transfer_stats()
    assert st["host_to_device"] == 2 and st["host_to_device_bytes"] == 16
    with gt.GradientTape() as tape:  # and the gradient flows to the host tensor's id
        tape.watch(h)
        s = gt.sum(x * h)
    assert tape.gradient(s, h).numpy().tolist() == [1.0, 2.0]


def test_raw_numpy_operands_are_constants_copied_and_counted(fake_gpu):
    x = gt.constant([1.0, 2.0, 3.0])
    gt.debug.reset_transfer_stats()
    y = x + np.ones(3, "float32")
    z = gt.where(x > 1.5, x, np.zeros(3, "float32"))
    w = x * 2.0  # a Python number is a kernel argument: nothing to copy
    assert y.device == z.device == w.device == "cuda:0"
    st = gt.debug.transfer_stats()
    assert st["host_to_device"] == 2 and st["host_to_device_bytes"] == 24


# -- counters ----------------------------------------------------------------------------------


def test_copies_both_ways_are_counted_with_bytes(fake_gpu):
    gt.debug.reset_transfer_stats()
    x = gt.constant(np.zeros((4, 4), "float32"))
    x.numpy()
    c = x.to("cpu")
    c.to("cuda")
    st = gt.debug.transfer_stats()
    assert st == {"host_to_device": 2, "host_to_device_bytes": 128, "device_to_host": 2, "device_to_host_bytes": 128}
    assert gt.memory_info("cpu")["transfers"] == st
    gt.debug.reset_transfer_stats()
    assert set(gt.debug.transfer_stats().values()) == {0}


def test_counters_sum_every_thread(fake_gpu):
    gt.debug.reset_transfer_stats()

    def work():
        for _ in range(50):
            gt.constant(np.ones(2, "float32"))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = gt.debug.transfer_stats()
    assert st["host_to_device"] == 200 and st["host_to_device_bytes"] == 1600


# -- the seeds' programs: zero host->device transfers after the first step --------------------


def _seed_steps(n):
    """``w = tf.Variable(2.0)``, ``tf.Variable(tf.zeros([5]))`` and a Dense MLP + Adam; transfers per step."""
    rng = np.random.default_rng(0)
    X = tf.constant(rng.normal(size=(16, 4)).astype("float32"))
    Y = tf.constant(rng.normal(size=(16, 1)).astype("float32"))
    w = tf.Variable(2.0)
    b = tf.Variable(tf.zeros([5]))
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.Adam(0.01)
    counts = []
    for _ in range(n):
        gt.debug.reset_transfer_stats()
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(model(X) - Y)) + w * w + tf.reduce_sum(b * 3.0)
        grads = t.gradient(loss, [w, b, *model.trainable_variables])
        opt.apply_gradients(zip(grads, [w, b, *model.trainable_variables]))
        counts.append(gt.debug.transfer_stats()["host_to_device"])
    devices = {v.device for v in (w, b, *model.trainable_variables)}
    return counts, devices


def test_seed_programs_make_no_transfer_after_the_first_step(fake_gpu):
    fake_gpu.setenv("GPUTAPE_DEVICE", "cpu")
    with gt.device("cuda"):
        # the fake GPU runs no fused optimizer kernel: the optimizer's array path
        fake_gpu.setattr(gt.optim.Adam, "_fused_kind", lambda self: None)
        counts, devices = _seed_steps(4)
    assert devices == {"cuda:0"}
    assert counts[1:] == [0, 0, 0], counts


# -- gt.function: transfers per call ----------------------------------------------------------


def test_graph_report_lists_transfers_per_call():
    x = gt.constant(np.ones(3, "float32"), device="cpu")

    def f(x):
        return gt.exp(x) * 2.0

    cf = gt.function(f, graphs="emulate")
    cf(x)
    assert cf.graph_report["transfers"] is None  # the first call traced: no replay yet
    cf(x)
    rep = cf.graph_report["transfers"]
    assert rep == {"host_to_device": 0, "host_to_device_bytes": 0, "device_to_host": 0, "device_to_host_bytes": 0}


# -- the placement log ------------------------------------------------------------------------


def test_log_device_placement_logs_each_op_once_per_call_site(caplog):
    caplog.set_level(logging.INFO, logger="gputape.devices.placement")
    x = gt.constant([1.0, 2.0], device="cpu")
    with gt.debug.log_device_placement(True):
        assert _state.tls.obs.placement is not None  # an observer entry, this thread only
        for _ in range(3):
            y = x * 2.0
            z = gt.exp(y)
        gt.exp(y)  # another call site
    lines = [r.getMessage() for r in caplog.records if r.name == "gputape.devices.placement"]
    assert [line.split(" (")[0] for line in lines] == ["gt.multiply on cpu", "gt.exp on cpu", "gt.exp on cpu"]
    assert all("test_placement.py:" in line for line in lines)
    caplog.clear()
    gt.exp(z)
    assert not caplog.records  # off after the block
    assert _state.tls.obs is None


def test_log_device_placement_switch_and_tf_names(caplog):
    caplog.set_level(logging.INFO, logger="gputape.devices.placement")
    tf.debugging.set_log_device_placement(True)
    try:
        gt.constant([1.0], device="cpu") + 1.0
    finally:
        tf.debugging.set_log_device_placement(False)
    assert _state.tls.obs is None
    assert any("gt.add on cpu" in r.getMessage() for r in caplog.records)
    assert tf.config is gt.config and tf.device is gt.device


def test_log_device_placement_names_the_gpu(fake_gpu, caplog):
    caplog.set_level(logging.INFO, logger="gputape.devices.placement")
    with gt.debug.log_device_placement():
        gt.constant([1.0]) * 3.0
    assert any("gt.multiply on cuda:0" in r.getMessage() for r in caplog.records)


# -- gt.config -----------------------------------------------------------------------------------


def test_config_devices_and_soft_placement(fake_gpu):
    assert [d.device_type for d in gt.config.list_physical_devices()] == ["CPU", "GPU"]
    assert gt.config.list_logical_devices("GPU")[0].name == "/device:GPU:0"
    with pytest.raises(ValueError, match="device_type"):
        gt.config.list_physical_devices("TPU")
    with pytest.raises(TypeError, match="bool"):
        gt.config.set_soft_device_placement("yes")
    assert gt.config.get_soft_device_placement() is False


def test_config_on_this_machine():
    gpus = gt.config.list_physical_devices("GPU")
    assert (len(gpus) > 0) == backend.gpu_available()


# -- the real GPU ------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_placement_copies_and_counters():
    import cupy as cp

    with gt.device("cuda"):
        for name, make in CONSTRUCTORS.items():
            t = make()
            assert isinstance(t._data, cp.ndarray), name
    gt.debug.reset_transfer_stats()
    with gt.device("cuda"):
        x = gt.constant(np.zeros((8, 8), "float32"))
    x.numpy()
    st = gt.debug.transfer_stats()
    assert st == {"host_to_device": 1, "host_to_device_bytes": 256, "device_to_host": 1, "device_to_host_bytes": 256}
    with gt.device("cpu"):
        h = gt.constant(np.ones((8, 8), "float32"))
    with pytest.raises(ValueError, match="cuda:0"):
        x + h
    config.set_soft_device_placement(True)
    try:
        gt.debug.reset_transfer_stats()
        assert (x + h).device == "cuda:0" and h2d() == 1
    finally:
        config.set_soft_device_placement(False)


@pytest.mark.gpu
def test_gpu_training_step_makes_no_transfer_after_the_first():
    with gt.device("cuda"):
        counts, devices = _seed_steps(4)
    assert devices == {"cuda:0"}
    assert counts[1:] == [0, 0, 0], counts


@pytest.mark.gpu
def test_gpu_compiled_step_reports_its_transfers():
    with gt.device("cuda"):
        w = gt.Variable(np.ones((4, 4), "float32"))
        x = gt.constant(np.ones((2, 4), "float32"))

    @gt.function
    def step(x):
        with gt.GradientTape() as t:
            loss = gt.sum(gt.matmul(x, w) ** 2)
        w.assign_sub(0.01 * t.gradient(loss, w))
        return loss

    for _ in range(3):
        step(x)
    assert step.graph_report["transfers"] == {
        "host_to_device": 0,
        "host_to_device_bytes": 0,
        "device_to_host": 0,
        "device_to_host_bytes": 0,
    }
    with pytest.raises(ValueError, match="set_soft_device_placement"):
        step(np.ones((2, 4), "float32"))  # a host array argument is a host tensor of the step


def test_readme_transfer_example_runs(capsys):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = text.split("**Seeing transfers.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "cpu 0"


def test_python_values_of_gpu_tensors_are_counted_device_to_host_copies(fake_gpu):
    """float(), int(), bool(), .item() and index use of a GPU tensor each copy its value to the host."""
    x = gt.constant(np.array(2.5, "float32"))
    i = gt.constant(np.array(1, "int64"))
    assert x.device == i.device == "cuda:0"
    gt.debug.reset_transfer_stats()
    values = [float(x), x.item(), bool(x), int(i), [10, 20, 30][i]]
    st = gt.debug.transfer_stats()
    assert values == [2.5, 2.5, True, 1, 20]
    assert st["device_to_host"] == 5
    assert st["device_to_host_bytes"] == 3 * 4 + 2 * 8
    assert st["host_to_device"] == 0
