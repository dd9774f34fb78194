"""gputape.core.expr, the derivative language: rendering keeps the tree, declarations infer their
residuals, and the guards hold at the domain edges of the ops declared with it."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gputape as gt
from gputape.core import expr as X  # noqa: N812
from gputape.ops import raw_namespace

a, b, c, g = X.var("a"), X.var("b"), X.var("c"), X.var("g")


@pytest.mark.parametrize(
    ("e", "text"),
    [
        (a * (b * c), "a * (b * c)"),  # not (a * b) * c: floating point is not associative
        ((a * b) * c, "a * b * c"),
        (a - (b - c), "a - (b - c)"),
        ((a - b) - c, "a - b - c"),
        (a / (b / c), "a / (b / c)"),
        (-(a * b), "-(a * b)"),
        ((-a) * b, "-a * b"),
        (X.Expr("neg", (-a,)), "-(-a)"),
        (g * (a > 0), "g * (a > 0)"),
        (a * -0.5, "a * -0.5"),
        (X.where(a >= b, g, 0), "F.where(a >= b, g, 0)"),
        (X.multiply_no_nan(1 / a, g), "F.multiply_no_nan(1 / a, g)"),
    ],
)
def test_python_rendering_keeps_the_tree(e, text):
    assert X.python(e) == text


def test_cuda_rendering():
    assert X.cuda(X.where(a > 0, g, g * X.param("alpha"))) == "(a > T(0) ? g : g * alpha)"
    assert X.cuda(X.multiply_no_nan(1 / a, g)) == "gt_multiply_no_nan(T(1) / a, g)"
    assert X.cuda(-(g * X.sin(a))) == "-(g * gt_sin(a))"


# Random expression trees: the rendered Python must compute bit for bit what the tree says.
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def _eval(e, env):
    if e.op == "var":
        return env[e.args[0]]
    if e.op == "const":
        return e.args[0]
    if e.op == "neg":
        return -_eval(e.args[0], env)
    if e.op == "call":
        return getattr(env["F"], e.args[0])(*(_eval(x, env) for x in e.args[1:]))
    return _OPS[e.op](_eval(e.args[0], env), _eval(e.args[1], env))


_leaf = st.sampled_from([a, b, c]) | st.sampled_from([0.5, 2.0, -1.5, 3]).map(X.lift)
_tree = st.recursive(
    _leaf,
    lambda t: st.one_of(
        st.tuples(st.sampled_from(sorted(_OPS)), t, t).map(lambda p: X.Expr(p[0], (p[1], p[2]))),
        t.map(operator.neg),
        t.map(X.sin),
        t.map(X.exp),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_tree)
def test_rendered_python_is_bitwise_the_tree(e):
    rng = np.random.default_rng(0)
    env = {"F": raw_namespace(np), **{n: rng.uniform(0.5, 1.5, 5) for n in "abc"}}
    with np.errstate(all="ignore"):
        try:
            want = np.asarray(_eval(e, env))
        except ZeroDivisionError:  # a subtree of constants only, such as 0.5 / (0.5 - 0.5), on Python floats
            return
        got = np.asarray(eval(X.python(e), dict(env)))
    np.testing.assert_array_equal(got, want)


def test_every_function_an_expression_may_call_exists_wherever_it_is_rendered():
    """In the fast sweep's namespace, in gputape's (recorded sweep: higher order) and in the CUDA prelude."""
    from gputape.ops import DIFF_NAMESPACE

    for name in X.FUNCTIONS:
        assert callable(getattr(raw_namespace(np), name)), name
        assert callable(getattr(DIFF_NAMESPACE, name)), name
        assert name == "where" or f" gt_{name}(" in X.CUDA_PRELUDE, name


# -- declarations ------------------------------------------------------------------------------


def test_a_declaration_saves_what_its_expressions_read():
    try:
        d = X.derivative("demo_div", lambda x, y, out, g: (X.multiply_no_nan(1 / y, g), -out / y * g))
        assert (d.save, d.save_out, d.operands) == ((1,), True, ["y", "out"])
        assert d.python(0) == "F.multiply_no_nan(1 / a0, g)"
        # a cotangent that is the incoming one passes unconditionally; others only when needed
        assert "if needs[1]" in d.source and "if needs[0]" in d.source
        e = X.derivative("demo_pass", lambda x, y, g: (g, g * 2))
        assert e.save == () and not e.save_out and "(g, g * 2 if needs[1] else None,)" in e.source
    finally:
        X.DERIVATIVES.pop("demo_div", None)
        X.DERIVATIVES.pop("demo_pass", None)


def test_declaration_errors_are_clear():
    with pytest.raises(ValueError, match="already declared"):
        X.derivative("tanh", lambda x, g: g)
    with pytest.raises(ValueError, match="2 cotangents for 1 inputs"):
        X.derivative("demo_bad", lambda x, g: (g, g))
    with pytest.raises(TypeError, match="no truth value"):
        X.derivative("demo_bad", lambda x, g: g if x > 0 else -g)
    with pytest.raises(TypeError, match="Python numbers"):
        X.lift(np.ones(2))
    with pytest.raises(ValueError, match="undeclared parameters"):
        X.Derivative("demo_bad", ("x",), (X.var("g") * X.param("alpha"),), ())
    assert "demo_bad" not in X.DERIVATIVES


def test_every_declared_primitive_saves_what_its_expression_reads():
    """The registry and the declarations agree: the residual a node keeps is the one the VJP reads."""
    for name, d in X.DERIVATIVES.items():
        prim = gt.REGISTRY.get(name)
        if prim is None:
            continue  # gelu's kernels: gelu itself is composed from primitives
        assert prim.vjp is d.vjp, name
        assert (prim.save, prim.save_out) == (d.save, d.save_out), name


def test_the_fused_and_standalone_kernels_come_from_the_same_expression():
    d = X.DERIVATIVES["log"]
    assert d.kernel(0) == ("T g, T a0", "T out", "out = gt_multiply_no_nan(T(1) / a0, g)")
    t, operands = d.fusable(0)
    assert X.cuda(t) == "gt_multiply_no_nan(T(1) / a0, g)" and operands == ["a0"]
    assert X.DERIVATIVES["where"].fusable(1) is None  # its condition is not a float operand
    assert X.DERIVATIVES["leaky_relu"].fusable(0) is None  # parameters stay out of fused chains


# -- the domain edges of the ops declared with it -------------------------------------------------

# (op, inputs at an edge, the first-order gradient there with cotangent 1: what PyTorch gives,
# checked against torch itself in tests/test_vs_torch.py)
INF, NAN = np.inf, np.nan
EDGES = {
    "arccosh": (gt.arccosh, ([1.0],), [[INF]]),
    "arctanh": (gt.arctanh, ([-1.0, 1.0],), [[INF, INF]]),
    "arcsin": (gt.arcsin, ([-1.0, 1.0],), [[INF, INF]]),
    "arccos": (gt.arccos, ([-1.0, 1.0],), [[-INF, -INF]]),
    "log": (gt.log, ([0.0],), [[INF]]),
    "log2": (gt.log2, ([0.0],), [[INF]]),
    "log10": (gt.log10, ([0.0],), [[INF]]),
    "sqrt": (gt.sqrt, ([0.0],), [[INF]]),
    "hypot": (gt.hypot, ([0.0], [0.0]), [[NAN], [NAN]]),
    "arctan2": (gt.arctan2, ([0.0], [0.0]), [[0.0], [0.0]]),
    "logaddexp": (gt.logaddexp, ([INF, -INF, 0.0], [1.0, 1.0, -INF]), [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
}


def _grads(f, xs, mask):
    xs = [gt.constant(np.asarray(x, np.float64)) for x in xs]
    with gt.GradientTape() as outer:
        outer.watch(xs)
        with gt.GradientTape() as inner:
            inner.watch(xs)
            y = f(*xs)
            y = gt.sum(gt.where(mask, y, 0.0))
        gs = inner.gradient(y, xs)
        s = gt.sum(gt.stack([gt.sum(gi) for gi in gs]))
    return [gi.numpy() for gi in gs], [h.numpy() for h in outer.gradient(s, xs, unconnected_gradients="zero")]


@pytest.mark.parametrize("name", sorted(EDGES))
def test_gradient_at_the_domain_edge(name):
    f, xs, want = EDGES[name]
    with np.errstate(all="ignore"):
        got, _ = _grads(f, xs, np.ones(len(xs[0]), bool))
    for k, (gk, wk) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(gk, wk, err_msg=f"{name} input {k}")


@pytest.mark.parametrize("name", sorted(EDGES))
def test_a_masked_cotangent_gives_zero_at_the_domain_edge_at_every_order(name):
    """where(mask, f(x), 0) with the edge masked out: exactly 0, first and second order (the guards)."""
    f, xs, _ = EDGES[name]
    with np.errstate(all="ignore"):
        first, second = _grads(f, xs, np.zeros(len(xs[0]), bool))
    for gk in first + second:
        np.testing.assert_array_equal(gk, np.zeros_like(gk), err_msg=name)


def test_the_vectorised_kernels_take_only_same_shape_contiguous_aligned_large_operands():
    """The dispatch rule of the float4/double2 backward kernels (gt.config.set_vector_kernels),
    on stand-ins with a device array's attributes (the kernels themselves are tests/test_gpu.py's)."""
    import types

    from gputape.core.expr import VECTOR_MIN, _vectorisable

    def arr(shape, ptr=4096, contiguous=True):
        size = int(np.prod(shape))
        return types.SimpleNamespace(
            shape=shape,
            size=size,
            flags=types.SimpleNamespace(c_contiguous=contiguous),
            data=types.SimpleNamespace(ptr=ptr),
        )

    big = (VECTOR_MIN,)
    assert _vectorisable(arr(big), [arr(big, ptr=8192)])
    assert not _vectorisable(arr((VECTOR_MIN - 1,)), [arr((VECTOR_MIN - 1,))])  # too small to pay
    assert not _vectorisable(arr(big), [arr((1,))])  # a broadcast operand
    assert not _vectorisable(arr(big), [arr(big, contiguous=False)])
    assert not _vectorisable(arr(big, ptr=4100), [arr(big)])  # g misaligned
    assert not _vectorisable(arr(big), [arr(big, ptr=8200)])  # an operand misaligned


def test_every_vectorised_kernel_runs_its_derivative_body_on_every_lane_and_the_tail():
    from gputape.core.expr import DERIVATIVES, cuda

    for d in DERIVATIVES.values():
        if not d.gpu_kernel:
            continue
        body = f"out = {cuda(d.grads[0], d.names())}"
        for ctype, lanes in (("float", "xyzw"), ("double", "xy")):
            src = d.vector_source(ctype)
            # once per lane of the vector loop, once in the scalar tail
            assert src.count(body) == len(lanes) + 1, (d.name, ctype)
            for lane in lanes:
                assert f"v_out.{lane} = out;" in src
