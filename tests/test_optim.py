"""gt.optim: each optimizer against a hand-computed numpy update, schedules, clipping, state, tape safety."""

import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import gputape as gt

W0 = np.array([1.0, -2.0, 0.5])
GRADS = [np.array([0.3, -1.0, 2.0]), np.array([-0.5, 0.2, 1.0]), np.array([0.1, 0.4, -3.0])]


def run(opt, steps=3):
    """Apply GRADS to a float64 variable starting at W0; return the value after each step."""
    w = gt.Variable(W0.copy(), name="w")
    out = []
    for g in GRADS[:steps]:
        opt.apply_gradients([(gt.constant(g), w)])
        out.append(w.numpy())
    return out


def check(opt, reference):
    for got, want in zip(run(opt), reference()):
        assert_allclose(got, want, rtol=1e-12, atol=1e-15)


# -- update rules against numpy ------------------------------------------------------------


def test_sgd_plain():
    def ref():
        w = W0.copy()
        for g in GRADS:
            w = w - 0.1 * g
            yield w

    check(gt.optim.SGD(0.1), ref)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum(nesterov):
    def ref():
        w, m = W0.copy(), np.zeros(3)
        for g in GRADS:
            m = 0.9 * m - 0.1 * g
            w = w + (0.9 * m - 0.1 * g if nesterov else m)
            yield w

    check(gt.optim.SGD(0.1, momentum=0.9, nesterov=nesterov), ref)


def adam_ref(lr, b1, b2, eps, amsgrad=False, wd=0.0):
    w, m, v, vh = W0.copy(), np.zeros(3), np.zeros(3), np.zeros(3)
    for t, g in enumerate(GRADS, start=1):
        w = w - lr * wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vh = np.maximum(vh, v)
        alpha = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        w = w - alpha * m / (np.sqrt(vh if amsgrad else v) + eps)
        yield w


def test_adam():
    check(gt.optim.Adam(0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-6), lambda: adam_ref(0.01, 0.8, 0.99, 1e-6))


def test_adam_amsgrad():
    check(gt.optim.Adam(0.01, amsgrad=True), lambda: adam_ref(0.01, 0.9, 0.999, 1e-7, amsgrad=True))


def test_adamw():
    check(gt.optim.AdamW(0.01, weight_decay=0.1), lambda: adam_ref(0.01, 0.9, 0.999, 1e-7, wd=0.1))
    assert gt.optim.AdamW().weight_decay == 0.004  # Keras' default


@pytest.mark.parametrize("momentum", [0.0, 0.5])
@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop(momentum, centered):
    def ref():
        w, v, a, m = W0.copy(), np.zeros(3), np.zeros(3), np.zeros(3)
        for g in GRADS:
            v = 0.9 * v + 0.1 * g * g
            if centered:
                a = 0.9 * a + 0.1 * g
                denom = v - a * a + 1e-7
            else:
                denom = v + 1e-7
            inc = 0.01 * g / np.sqrt(denom)
            if momentum:
                m = momentum * m + inc
                w = w - m
            else:
                w = w - inc
            yield w

    check(gt.optim.RMSprop(0.01, momentum=momentum, centered=centered), ref)


def test_weight_decay_on_any_optimizer_is_decoupled():
    def ref():
        w = W0.copy()
        for g in GRADS:
            w = w - 0.1 * 0.5 * w
            w = w - 0.1 * g
            yield w

    check(gt.optim.SGD(0.1, weight_decay=0.5), ref)


def test_float32_variables_get_float32_updates_from_float64_gradients():
    w = gt.Variable(np.ones(2, np.float32))
    gt.optim.Adam(0.1).apply_gradients([(gt.constant(np.array([1.0, -1.0])), w)])
    assert w.dtype == np.float32
    assert_allclose(w.numpy(), [0.9, 1.1], rtol=1e-6)


# -- schedules -----------------------------------------------------------------------------


def test_schedule_values():
    step = gt.optim.StepDecay(1.0, step_size=3, gamma=0.5)
    assert [step(s) for s in range(7)] == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25]
    pw = gt.optim.PiecewiseConstantDecay([2, 4], [0.3, 0.2, 0.1])
    assert [pw(s) for s in range(6)] == [0.3, 0.3, 0.3, 0.2, 0.2, 0.1]
    ex = gt.optim.ExponentialDecay(0.5, decay_steps=4, decay_rate=0.1)
    assert_allclose([ex(s) for s in (0, 2, 4, 8)], [0.5, 0.5 * 0.1**0.5, 0.05, 0.005])
    ex_s = gt.optim.ExponentialDecay(0.5, decay_steps=4, decay_rate=0.1, staircase=True)
    assert_allclose([ex_s(s) for s in (0, 3, 4, 7, 8)], [0.5, 0.5, 0.05, 0.05, 0.005])
    cos = gt.optim.CosineDecay(2.0, decay_steps=10, alpha=0.1)
    expected = [2.0 * ((1 - 0.1) * 0.5 * (1 + math.cos(math.pi * min(s, 10) / 10)) + 0.1) for s in (0, 3, 5, 10, 15)]
    assert_allclose([cos(s) for s in (0, 3, 5, 10, 15)], expected)
    warm = gt.optim.CosineDecay(0.0, decay_steps=10, warmup_target=1.0, warmup_steps=4)
    assert_allclose([warm(s) for s in (0, 2, 4, 9, 14, 20)], [0.0, 0.5, 1.0, 0.5, 0.0, 0.0], atol=1e-12)


def test_schedule_errors():
    with pytest.raises(ValueError):
        gt.optim.StepDecay(0.1, 0)
    with pytest.raises(ValueError):
        gt.optim.PiecewiseConstantDecay([1], [1.0])
    with pytest.raises(ValueError):
        gt.optim.ExponentialDecay(0.1, 0, 0.5)
    with pytest.raises(ValueError):
        gt.optim.CosineDecay(0.1, 0)


def test_optimizer_uses_the_schedule_at_the_current_step():
    sched = gt.optim.PiecewiseConstantDecay([0, 1], [0.1, 0.01, 0.001])
    opt = gt.optim.SGD(learning_rate=sched)

    def ref():
        w = W0.copy()
        for lr, g in zip([0.1, 0.01, 0.001], GRADS):
            w = w - lr * g
            yield w

    check(opt, ref)
    assert opt.iterations == 3 and opt.learning_rate == 0.001
    opt.learning_rate = 0.5  # Keras lets you replace it
    assert opt.learning_rate == 0.5


def test_callable_learning_rate():
    opt = gt.optim.SGD(learning_rate=lambda step: 0.1 / (step + 1))
    w = gt.Variable(np.zeros(1))
    for _ in range(2):
        opt.apply_gradients([(gt.constant(np.ones(1)), w)])
    assert_allclose(w.numpy(), [-0.1 - 0.05])


# -- apply_gradients contract ---------------------------------------------------------------


def test_none_gradient_is_skipped_with_one_warning_naming_the_variable():
    a, b = gt.Variable(np.ones(2), name="used"), gt.Variable(np.ones(2), name="unused")
    opt = gt.optim.SGD(0.5)
    with pytest.warns(gt.GputapeWarning, match=r"'unused'") as record:
        opt.apply_gradients([(gt.constant(np.ones(2)), a), (None, b)])
    assert len(record) == 1 and "'used'" not in str(record[0].message)
    assert_array_equal(b.numpy(), [1.0, 1.0])
    assert_array_equal(a.numpy(), [0.5, 0.5])
    opt.apply_gradients([(gt.constant(np.ones(2)), a), (None, b)])  # no second warning (it would be an error)
    assert_array_equal(a.numpy(), [0.0, 0.0])


def test_all_none_gradients_raise():
    with pytest.raises(ValueError, match="no gradients provided"):
        gt.optim.Adam().apply_gradients([(None, gt.Variable(1.0, name="w"))])


def test_apply_gradients_validates_its_input():
    opt = gt.optim.SGD()
    with pytest.raises(TypeError, match="pairs"):
        opt.apply_gradients([gt.constant(1.0)])
    with pytest.raises(TypeError, match="pairs"):
        opt.apply_gradients([(gt.constant(1.0), gt.constant(1.0))])
    with pytest.raises(ValueError, match="shape"):
        opt.apply_gradients([(gt.constant(np.ones(3)), gt.Variable(np.ones(2), name="w"))])


def test_apply_gradients_accepts_a_zip_and_returns_iterations():
    vs = [gt.Variable(np.ones(2)), gt.Variable(np.ones(1))]
    opt = gt.optim.SGD(0.1)
    assert opt.apply_gradients(zip([np.ones(2), np.ones(1)], vs)) == 1  # raw arrays are gradients too
    assert opt.apply_gradients(zip([np.ones(2), np.ones(1)], vs)) == 2


def test_minimize():
    w = gt.Variable(np.array([3.0]))
    opt = gt.optim.SGD(0.25)
    opt.minimize(lambda: gt.sum(w * w), [w])
    assert_allclose(w.numpy(), [1.5])
    with gt.GradientTape() as tape:
        loss = gt.sum(w * w)
    opt.minimize(loss, lambda: [w], tape=tape)
    assert_allclose(w.numpy(), [0.75])
    with pytest.raises(TypeError, match="callable"):
        opt.minimize(gt.constant(1.0), [w])


# -- a new array per update, never corrupting a value a tape saved ---------------------------------


@pytest.mark.parametrize(
    "make", [lambda: gt.optim.SGD(0.1), lambda: gt.optim.SGD(0.1, momentum=0.9), gt.optim.Adam, gt.optim.RMSprop]
)
def test_updates_publish_new_arrays_and_never_write_the_old_ones(make):
    w = gt.Variable(np.ones((4, 4)))
    opt = make()
    seen = []
    for _ in range(3):
        with gt.GradientTape() as tape:
            loss = gt.sum(w * w)
        seen.append((w._data, w._data.copy()))
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        assert w._data is not seen[-1][0]
    assert all(a.tobytes() == b.tobytes() for a, b in seen)


@pytest.mark.parametrize(
    "make", [lambda: gt.optim.SGD(0.1, momentum=0.9), gt.optim.Adam, lambda: gt.optim.RMSprop(centered=True)]
)
def test_slots_take_turns_in_two_buffers_instead_of_allocating_each_step(make):
    w = gt.Variable(np.ones((4, 4)))
    opt = make()
    buffers = set()
    for _ in range(5):
        opt.apply_gradients([(np.full((4, 4), 0.5), w)])
        buffers.update(a.ctypes.data for a in opt._slots[id(w)][1].values())
    assert len(buffers) == 2 * len(opt.slot_names)  # each slot's new values go to its spare, then they swap


def test_a_variable_passed_twice_is_refused():
    w = gt.Variable(np.ones(2), name="tied")
    opt = gt.optim.Adam()
    with pytest.raises(ValueError, match="'tied' appears more than once"):
        opt.apply_gradients([(np.ones(2), w), (np.ones(2), w)])
    assert opt.iterations == 0 and opt.get_state()["slots"] == []


def test_update_never_corrupts_a_value_a_live_persistent_tape_holds():
    w = gt.Variable(np.array([1.0, 2.0]))
    x = gt.constant(np.array([3.0, 4.0]))
    with gt.GradientTape(persistent=True) as tape:
        loss = gt.sum(w * w * x)  # d/dw = 2 w x, and the tape saved w's value
    g1 = tape.gradient(loss, w)
    opt = gt.optim.SGD(0.1, momentum=0.5)
    opt.apply_gradients([(g1, w)])
    assert_allclose(w.numpy(), [1.0 - 0.6, 2.0 - 1.6])  # the update happened
    g2 = tape.gradient(loss, w)  # still the gradient at the recorded value, not the updated one
    assert_allclose(g2.numpy(), [6.0, 16.0])
    del tape


def test_update_never_changes_a_snapshot_taken_before_it():
    w = gt.Variable(np.array([1.0, 2.0]))
    snapshot = w.value()
    gt.optim.Adam(0.1).apply_gradients([(gt.constant([1.0, 1.0]), w)])
    assert_array_equal(snapshot.numpy(), [1.0, 2.0])
    assert not np.allclose(w.numpy(), [1.0, 2.0])


# -- clipping ------------------------------------------------------------------------------------


def test_clip_by_global_norm():
    a, b = gt.constant(np.array([3.0, 0.0])), gt.constant(np.array([[4.0]]))
    clipped, norm = gt.clip_by_global_norm([a, None, b], 2.5)
    assert float(norm) == 5.0 and clipped[1] is None
    assert_allclose(clipped[0].numpy(), [1.5, 0.0])
    assert_allclose(clipped[2].numpy(), [[2.0]])
    same, norm2 = gt.clip_by_global_norm([a, b], 10.0)
    assert float(norm2) == 5.0
    assert_allclose(same[0].numpy(), a.numpy())
    inf, _ = gt.clip_by_global_norm([gt.constant(np.array([np.inf, 1.0]))], 1.0)
    assert np.isnan(inf[0].numpy()).all()  # TensorFlow: a non-finite norm gives NaN, visibly
    with pytest.raises(ValueError, match="clip_norm"):
        gt.clip_by_global_norm([a], 0.0)
    assert float(gt.global_norm([])) == 0.0


def test_clip_by_global_norm_is_differentiable():
    def f(x, y):
        out, _ = gt.clip_by_global_norm([x, y], 1.0)
        return gt.sum(out[0] * 2.0) + gt.sum(out[1])

    gt.testing.check_grads(f, np.array([1.0, 2.0]), np.array([[0.5, -3.0]]), order=1)


def test_clip_by_norm():
    t = gt.constant(np.array([[3.0, 1.0], [4.0, 0.0]]))
    assert_allclose(gt.clip_by_norm(t, 1.0).numpy(), t.numpy() / np.sqrt(26.0))
    assert_allclose(gt.clip_by_norm(t, 1.0, axes=0).numpy(), [[0.6, 1.0], [0.8, 0.0]])
    assert_allclose(gt.clip_by_norm(t, 100.0).numpy(), t.numpy())
    z = gt.constant(np.zeros(3))
    with gt.GradientTape() as tape:
        tape.watch(z)
        y = gt.sum(gt.clip_by_norm(z, 1.0))
    assert np.isfinite(tape.gradient(y, z).numpy()).all()  # no NaN at zero


def test_optimizer_clipnorm_and_global_clipnorm():
    w1, w2 = gt.Variable(np.zeros(2)), gt.Variable(np.zeros(1))
    gt.optim.SGD(1.0, global_clipnorm=1.0).apply_gradients([(np.array([3.0, 0.0]), w1), (np.array([4.0]), w2)])
    assert_allclose(w1.numpy(), [-0.6, 0.0])
    assert_allclose(w2.numpy(), [-0.8])
    w = gt.Variable(np.zeros(2))
    gt.optim.SGD(1.0, clipnorm=1.0).apply_gradients([(np.array([3.0, 4.0]), w)])
    assert_allclose(w.numpy(), [-0.6, -0.8])
    with pytest.raises(ValueError, match="at most one"):
        gt.optim.SGD(clipnorm=1.0, global_clipnorm=1.0)


# -- state ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: gt.optim.SGD(0.1, momentum=0.9),
        lambda: gt.optim.Adam(0.05),
        lambda: gt.optim.AdamW(0.05, amsgrad=True),
        lambda: gt.optim.RMSprop(0.01, momentum=0.5, centered=True),
    ],
)
def test_state_round_trip_continues_the_same_trajectory(make):
    w = gt.Variable(W0.copy())
    opt = make()
    for g in GRADS[:2]:
        opt.apply_gradients([(gt.constant(g), w)])
    state = opt.get_state()
    w_twin = gt.Variable(w.numpy())
    twin = make()
    twin.set_state({"iterations": state["iterations"], "slots": [(w_twin, s) for _, s in state["slots"]]})
    opt.apply_gradients([(gt.constant(GRADS[2]), w)])
    twin.apply_gradients([(gt.constant(GRADS[2]), w_twin)])
    assert twin.iterations == opt.iterations == 3
    assert_array_equal(w_twin.numpy(), w.numpy())


def test_get_state_returns_copies():
    w = gt.Variable(np.ones(2))
    opt = gt.optim.SGD(0.1, momentum=0.9)
    opt.apply_gradients([(np.ones(2), w)])
    state = opt.get_state()
    state["slots"][0][1]["momentum"][:] = 99.0
    assert_allclose(opt.get_state()["slots"][0][1]["momentum"], [-0.1, -0.1])


def test_set_state_checks_everything_before_changing_anything():
    w, v = gt.Variable(np.ones(2), name="w"), gt.Variable(np.ones(3), name="v")
    opt = gt.optim.Adam()
    opt.apply_gradients([(np.ones(2), w), (np.ones(3), v)])
    before = opt.get_state()
    good = {"momentum": np.zeros(2), "velocity": np.zeros(2)}
    bad_shape = {"momentum": np.zeros(2), "velocity": np.zeros(2)}
    with pytest.raises(ValueError, match="shape"):
        opt.set_state({"iterations": 7, "slots": [(w, good), (v, bad_shape)]})
    with pytest.raises(ValueError, match="slots"):
        opt.set_state({"iterations": 7, "slots": [(w, {"momentum": np.zeros(2)})]})
    with pytest.raises(ValueError, match="iterations"):
        opt.set_state({"slots": []})
    after = opt.get_state()
    assert after["iterations"] == before["iterations"] == 1
    for (_, s0), (_, s1) in zip(before["slots"], after["slots"]):
        for k in s0:
            assert_array_equal(s0[k], s1[k])


def test_slots_are_not_trainable_state():
    w = gt.Variable(np.ones(2))
    opt = gt.optim.Adam()
    opt.apply_gradients([(np.ones(2), w)])
    m = gt.Module()
    m.w = w
    m.opt = opt  # an optimizer held by a model adds nothing to its variables
    assert m.variables == [w] or (len(m.variables) == 1 and m.variables[0] is w)


def test_no_unexpected_warnings_during_a_normal_loop():
    w = gt.Variable(np.ones(3))
    opt = gt.optim.AdamW(0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            with gt.GradientTape() as tape:
                loss = gt.sum(gt.square(w))
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_sgd_steps_are_numpys_formula_bitwise_with_python_float_rates(dtype, momentum, nesterov):
    # the rule multiplies by the rate as a 0-d array of the gradient's dtype (kept per rate and
    # dtype): the same bits as numpy's g * lr with the Python float, also as the rate changes
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((5, 3)).astype(dtype)
    rates = [0.1, 0.1, 1e-3, 0.37, 0.1]
    opt = gt.optim.SGD(lambda step: rates[int(step)], momentum=momentum, nesterov=nesterov)
    w, ref, m = gt.Variable(w0), w0.copy(), np.zeros_like(w0)
    for lr in rates:
        g = rng.standard_normal(w0.shape).astype(dtype)
        opt.apply_gradients([(gt.constant(g), w)])
        if momentum:
            m = m * momentum - g * lr
            ref = ref + (m * momentum - g * lr if nesterov else m)
        else:
            ref = ref - g * lr
        np.testing.assert_array_equal(w.numpy(), ref)
        assert w.numpy().dtype == np.dtype(dtype)
