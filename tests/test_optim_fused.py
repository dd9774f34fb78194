"""gt.optim's one-launch path (kernels.FusedOptimizer) against its per-variable path.

There is one numpy statement of each update (gputape.optim.rules): the optimizers'
CPU step computes with it, and the fused kernel's reference applies the same
functions in place, so the two paths agree bit for bit.

On a GPU, SGD/Adam/AdamW update every parameter in one kernel launch. Here the same
dispatch runs on the numpy reference (``_fused_on_cpu``), so the plumbing (slots,
learning-rate schedule, step counter, weight decay, state restore) is checked on the CPU;
the kernel itself is checked against that reference by the gpu-marked tests.
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt

MAKERS = {
    "sgd": lambda: gt.optim.SGD(0.1),
    "sgd_momentum": lambda: gt.optim.SGD(0.1, momentum=0.9),
    "sgd_nesterov": lambda: gt.optim.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: gt.optim.Adam(gt.optim.ExponentialDecay(0.01, decay_steps=2, decay_rate=0.5)),
    "adamw": lambda: gt.optim.AdamW(0.01, weight_decay=0.1),
}


def _params(seed: int = 1) -> list[gt.Variable]:
    rng = np.random.default_rng(seed)
    return [
        gt.Variable(rng.standard_normal((3, 4)).astype(np.float32), name="w"),
        gt.Variable(rng.standard_normal(4).astype(np.float32), name="b"),
        gt.Variable(rng.standard_normal(2), name="w64"),  # a second dtype: one launch per dtype
    ]


def _grads(params: list[gt.Variable], t: int) -> list[gt.Tensor]:
    return [gt.constant(np.full(p.shape, (t + 1) * (i + 1) * 0.5, p.dtype)) for i, p in enumerate(params)]


def _train(make, fused: bool, steps: int, params=None, opt=None):
    params = params if params is not None else _params()
    opt = opt if opt is not None else make()
    opt._fused_on_cpu = fused
    for t in range(steps):
        opt.apply_gradients(zip(_grads(params, t), params))
    return params, opt


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_fused_path_equals_per_variable_path(name):
    ref, opt_ref = _train(MAKERS[name], False, 5)
    got, opt_got = _train(MAKERS[name], True, 5)
    assert opt_got._fused is not None and opt_got.iterations == opt_ref.iterations == 5
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(b.numpy(), a.numpy())  # one rule, run twice: bitwise
    for (_, sa), (_, sb) in zip(opt_ref.get_state()["slots"], opt_got.get_state()["slots"]):
        for k in sa:
            np.testing.assert_array_equal(np.asarray(sb[k]), np.asarray(sa[k]))


def test_the_kernel_reference_runs_the_optimizers_own_update_rules():
    """ref_optimizer_update (the fused kernel's numpy reference) and gt.optim's CPU step call
    the same functions; a random run of each kind agrees bitwise with gt.optim."""
    from gputape.kernels import registry as kernels
    from gputape.optim import fused as _optim_fused
    from gputape.optim import rules as _optim_rules

    assert kernels.ref_optimizer_update is _optim_fused.ref_optimizer_update
    assert _optim_fused.RULES["sgd"] is gt.optim.SGD.update_rule is _optim_rules.sgd
    assert _optim_fused.RULES["adam"] is gt.optim.Adam.update_rule is _optim_rules.adam
    assert _optim_fused.RULES["adamw"] is gt.optim.AdamW.update_rule
    rng = np.random.default_rng(3)
    cases = [
        ("sgd", lambda: gt.optim.SGD(0.05, momentum=0.9, nesterov=True), {"momentum": 0.9, "nesterov": True}),
        ("adamw", lambda: gt.optim.AdamW(0.05, weight_decay=0.1, beta_1=0.8), {"weight_decay": 0.1, "beta_1": 0.8}),
    ]
    for kind, make, kw in cases:
        for dtype in (np.float32, np.float64):
            start = [rng.standard_normal(s).astype(dtype) for s in ((3, 2), (5,))]
            grads = [[rng.standard_normal(p.shape).astype(dtype) for p in start] for _ in range(4)]
            vs = [gt.Variable(p.copy()) for p in start]
            opt = make()
            fused = kernels.FusedOptimizer(kind, 0.05, **kw)
            mine = [p.copy() for p in start]
            for gs in grads:
                opt.apply_gradients([(gt.constant(g), v) for g, v in zip(gs, vs)])
                fused.update(mine, gs)
            for v, p in zip(vs, mine):
                np.testing.assert_array_equal(p, v.numpy())


@pytest.mark.parametrize("name", ["sgd_momentum", "adam", "adamw"])
def test_fused_state_restore_resumes_exactly(name):
    ref, _ = _train(MAKERS[name], False, 6)
    params, opt = _train(MAKERS[name], True, 3)
    state = opt.get_state()
    fresh = MAKERS[name]()
    fresh.set_state(state)
    fresh._fused_on_cpu = True
    for t in range(3, 6):
        fresh.apply_gradients(zip(_grads(params, t), params))
    for a, b in zip(ref, params):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "make",
    [
        lambda: gt.optim.Adam(0.01, amsgrad=True),
        lambda: gt.optim.RMSprop(0.01),
        lambda: gt.optim.SGD(0.1, weight_decay=0.1),
    ],
    ids=["amsgrad", "rmsprop", "sgd_weight_decay"],
)
def test_unfusable_settings_keep_the_per_variable_path(make):
    _, opt = _train(make, True, 2)
    assert opt.__dict__.get("_fused") is None
