"""The compiled backward returns the sweep's bits or raises the sweep's error, on random programs.

A program is one to three registry primitives (their cases in ``test_grad_registry``, which walks
``gputape.core.primitive.REGISTRY``) chained through a broadcast link, then a broadcasting product with
an operand of a drawn shape, each operand a watched source, a constant or an integer array, in
float16/32/64 or complex64/128; targets (one or several, gradient of the sum), ``output_gradients``
of every dtype and shape (right and wrong, arrays, Tensors and Python numbers), persistent and
nested tapes, ``'none'``/``'zero'``, repeated, intermediate, unconnected and integer sources. Each
program runs in two variants (the same program with other dtypes, or another broadcast shape),
first through the sweep (``GradientTape(compile=False)``), then interleaved through the compiled
backward three times each, so that one variant's compiled code meets the other's tapes if their
keys collide (issue 24's wrong gradient was such a collision). The counters must show the
compiled path taken, so the test cannot pass by falling back.

``GPUTAPE_PROPERTY_EXAMPLES`` sets the number of examples (default 100 per device, half as many mirrored); the
``slow``-marked variant (``GPUTAPE_SLOW_TESTS=1``) runs ten times as many.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from bitwise_helpers import same_bits
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_grad_registry import ALL, COMPOSITES, _flat

import gputape as gt
from gputape import config
from gputape.core import expr
from gputape.devices import backend

report = gt.debug.backward_cache_report

CASES = [(n, f, a) for n, _, f, a in ALL] + [(n, f, a) for n, f, a in COMPOSITES]
# the cases of more than one operand, drawn half the time: mixed dtypes meet there (promotion, casts)
MIXING = [k for k, (_, _, a) in enumerate(CASES) if len(a) > 1]
FLOATS = ["float16", "float32", "float64", "complex64", "complex128"]
OG_DTYPES = [*FLOATS, "int64"]
# drawn more often: the dtypes most primitives take (linear algebra refuses float16, some ops complex)
OPERAND_DTYPES = ["float64", "float32", "float64", "float32", *FLOATS]
PALETTES = [
    ("float64", "complex128"),
    ("float32", "complex64"),
    ("float64", "complex128"),
    ("float32", "complex128"),
    ("float16", "complex64"),
    ("float32", "float64"),
    ("float16", "float32"),
    ("float16", "complex64"),
    ("complex64", "complex128"),
    ("float64",),
    ("float32",),
]
EXAMPLES = int(os.environ.get("GPUTAPE_PROPERTY_EXAMPLES", "100"))
# fallbacks a program may take in place of the compiled backward (all counted, none silent)
ALLOWED_FALLBACKS = {"opted_out", "recording_gradient", "no_source_recorded"}


@dataclass(frozen=True)
class Variant:
    dtypes: tuple  # one per operand of every step, in order
    extra: int  # the broadcast operand's shape, as an index into _extra_shapes
    extra_dtype: str


@dataclass(frozen=True)
class Program:
    steps: tuple  # (case index, roles per operand, linked to the previous step)
    variants: tuple  # two Variants
    persistent: bool
    nested: bool
    targets: tuple  # which outputs are targets: step indices, or -1 for the broadcast product
    og: tuple  # per target: None, "match", "tensor", "number", ("dtype", name) or "shape"
    unconnected: str
    repeat: bool  # the first source twice
    intermediate: bool  # the first step's output as a source
    unused: bool  # a watched tensor the targets do not read, as a source


@st.composite
def programs(draw, mirrored=False):
    """Random programs; ``mirrored``: one or two ops of several operands whose second variant has one op's
    dtypes swapped (keys that differ least: a collision there returns a wrong gradient, as in issue 24)."""
    steps = []
    for k in range(1 if mirrored else draw(st.integers(1, 3))):
        c = draw(st.sampled_from(MIXING) if mirrored else st.sampled_from(MIXING) | st.sampled_from(range(len(CASES))))
        nargs = len(CASES[c][2])
        kinds = ["source"] if mirrored else ["source"] * 4 + ["constant", "int"]
        roles = tuple(draw(st.sampled_from(kinds)) for _ in range(nargs))
        steps.append((c, roles, k > 0 and draw(st.integers(0, 3)) > 0))  # linked: mostly (a chain)
    # Operands take their dtypes from a palette of two (or one), so that the second variant can
    # be the first with dtypes swapped between an op's operands or one operand flipped: the
    # changes that leave the most of a key alike (issue 24: complex * real, then real * complex).
    how = "swap" if mirrored else draw(st.sampled_from(["swap", "swap", "swap", "flip", "redraw", "shape"]))
    # (a swap needs two dtypes to swap: mostly a real and a complex one, whose casts mirror each other)
    palette = draw(st.sampled_from(PALETTES[:5] if how == "swap" else PALETTES))
    a = tuple(draw(st.sampled_from(palette)) for _, roles, _ in steps for _ in roles)
    if how == "swap":  # one op's operands' dtypes reversed, the rest alike
        k = draw(st.integers(0, len(steps) - 1))
        at = sum(len(roles) for _, roles, _ in steps[:k])
        m = len(steps[k][1])
        b = a[:at] + tuple(reversed(a[at : at + m])) + a[at + m :]
    elif how == "flip":
        k = draw(st.integers(0, len(a) - 1))
        b = a[:k] + (draw(st.sampled_from(FLOATS)),) + a[k + 1 :]
    elif how == "redraw":
        b = tuple(draw(st.sampled_from(OPERAND_DTYPES)) if draw(st.booleans()) else d for d in a)
    else:
        b = a
    extra = [draw(st.integers(0, 3)) for _ in range(2)]
    xdt = [draw(st.sampled_from(palette)) for _ in range(2)]
    if mirrored:
        xdt[1] = xdt[0]
    if how == "shape":
        extra[1] = (extra[0] + draw(st.integers(1, 3))) % 4
    variants = (Variant(a, extra[0], xdt[0]), Variant(b, extra[1], xdt[0] if how == "shape" else xdt[1]))
    outs = [*range(len(steps)), -1]
    targets = tuple(draw(st.lists(st.sampled_from(outs), min_size=1, max_size=3)))
    if draw(st.booleans()) and -1 not in targets:  # the last product reads the whole chain
        targets = (*targets, -1)
    # (complex output gradients carry imaginary parts a wrong cast would drop; errors: a few)
    ogs = ["none", "match", "match", "match", "tensor", "tensor", "number", "dtype", "shape"]
    og = []
    for _ in targets:
        kind = draw(st.sampled_from(ogs))
        og.append(("dtype", draw(st.sampled_from(OG_DTYPES))) if kind == "dtype" else kind)
    return Program(
        steps=tuple(steps),
        variants=variants,
        persistent=draw(st.booleans()),
        nested=draw(st.integers(0, 4)) == 0,
        targets=targets,
        og=tuple(og) if draw(st.booleans()) else (),  # () : output_gradients=None
        unconnected=draw(st.sampled_from(["none", "zero"])),
        repeat=draw(st.booleans()),
        intermediate=draw(st.booleans()),
        unused=draw(st.booleans()),
    )


_MULTIPLY = next(k for k, (n, _, a) in enumerate(CASES) if n == "multiply" and len(a) == 2)
# issue 24's program: complex * real, then real * complex, a complex output gradient
ISSUE_24 = Program(
    steps=((_MULTIPLY, ("source", "source"), False),),
    variants=(Variant(("complex128", "float64"), 0, "float64"), Variant(("float64", "complex128"), 0, "float64")),
    persistent=False,
    nested=False,
    targets=(0,),
    og=("match",),
    unconnected="none",
    repeat=False,
    intermediate=False,
    unused=False,
)


def _extra_shapes(shape):
    """Shapes that broadcast against ``shape``: a scalar, all ones, its last axis, a new leading axis."""
    return [(), (1,) * len(shape), tuple(shape[-1:]), (2, *shape)]


def _value(a, dtype):
    a = np.asarray(a, np.float64)
    if dtype.startswith("complex"):
        return (a + 0.25j * a[::-1].reshape(a.shape) if a.ndim else a + 0.25j).astype(dtype)
    return a.astype(dtype)


def _og(kind, y, place):
    d = y.dtype
    if kind == "none":
        return None
    if kind == "number":
        return 2.0
    if kind == "shape":
        return place(np.ones((*y.shape, 1), d))
    if kind[0] == "dtype":
        d = np.dtype(kind[1])
    v = np.linspace(-1.5, 2.5, max(y.size, 1))[: y.size].reshape(y.shape)
    v = (v + 0.5j * v if d.kind == "c" else v).astype(d)
    return place(v) if kind == "tensor" else place(v)._data  # a Tensor, or the device's raw array


def run(prog, variant, comp, place):
    """The program's gradients as host arrays (None where None), or the error it raised: (class, message)."""
    try:
        return ("ok", _run(prog, variant, comp, place))
    except Exception as e:  # the same error on both paths is part of the contract
        return ("error", type(e), str(e))


def _run(prog, variant, comp, place):
    dts = iter(variant.dtypes)
    inputs = []
    for c, roles, _ in prog.steps:
        xs = []
        for a, role in zip(CASES[c][2], roles):
            dt = next(dts)
            if role == "int":
                xs.append((place(np.round(np.asarray(a) * 3).astype(np.int64)), role))
            else:
                xs.append((place(_value(a, dt)), role))
        inputs.append(xs)
    sources = [x for xs in inputs for x, role in xs if role == "source"]
    ints = [x for xs in inputs for x, role in xs if role == "int"]  # integer sources: None (zeros with 'zero')
    spare = place(np.linspace(0.5, 1.5, 3))
    outer = gt.GradientTape(persistent=True, compile=comp) if prog.nested else None
    if outer is not None:  # it records the inner gradient's computation too (second order)
        outer.__enter__()
        outer.watch(sources)
    try:
        with gt.GradientTape(persistent=prog.persistent, compile=comp) as tape:
            tape.watch(sources)
            if prog.unused:
                tape.watch(spare)
            outs, prev = [], None
            for (c, _, linked), xs in zip(prog.steps, inputs):
                args = [x for x, _ in xs]
                if linked and prev is not None:
                    link = gt.sum(prev)
                    if link.dtype.kind == "c" and args[0].dtype.kind != "c":
                        link = gt.real(link)
                    args[0] = args[0] + link * 0.5
                prev = _flat(CASES[c][1](*args))
                outs.append(prev)
            shape = _extra_shapes(outs[-1].shape)[variant.extra]
            w = place(_value(np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape), variant.extra_dtype))
            outs.append(outs[-1] * w)
        targets = [outs[t] for t in prog.targets]
        srcs = sources + ints
        if prog.repeat and srcs:
            srcs.append(srcs[0])
        if prog.intermediate:
            srcs.append(outs[0])
        if prog.unused:
            srcs.append(spare)
        og = [_og(k, y, place) for k, y in zip(prog.og, targets)] if prog.og else None
        got = []
        for _ in range(2 if prog.persistent else 1):  # a persistent tape answers twice from one recording
            g = tape.gradient(targets, srcs, output_gradients=og, unconnected_gradients=prog.unconnected)
            got += [None if x is None else x.numpy() for x in g]
        if outer is not None:
            outer.__exit__(None, None, None)
            second, outer = outer, None
            g = second.gradient(
                [gt.sum(x) for x in g if x is not None] + targets, srcs, unconnected_gradients=prog.unconnected
            )
            got += [None if x is None else x.numpy() for x in g]
        return got
    finally:
        if outer is not None:
            outer.__exit__(None, None, None)


def same(got, want):
    assert got[0] == want[0], (got, want)
    if want[0] == "error":
        assert got[1:] == want[1:], (got, want)
        return
    assert len(got[1]) == len(want[1])
    for k, (a, b) in enumerate(zip(got[1], want[1])):
        same_bits(a, b, f"gradient {k}")


def check(prog, place, tally):
    gt.debug.clear_backward_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # integer sources, complex casts, float16 overflow: the same on both paths
        want = [run(prog, v, False, place) for v in prog.variants]
        for _ in range(3):  # per variant: first sight, compile, hit; the variants interleaved
            for v, w in zip(prog.variants, want):
                same(run(prog, v, True, place), w)
    r = report()
    if all(w[0] == "error" for w in want):
        tally["error"] += 1
        return
    assert "compile_error" not in r["fallbacks"], r
    if r["hits"]:
        tally["compiled"] += 1
    elif not (r["misses"] or r["fallbacks"]):
        tally["no_backward"] += 1  # no floating target: neither path ran (gradient() answers None)
    else:
        assert set(r["fallbacks"]) <= ALLOWED_FALLBACKS, r
        assert set(r["fallbacks"]) - {"opted_out"}, r  # the compiled path was not taken: it must say why
        tally["fallback"] += 1


def _host(a):
    return gt.constant(a)


def _property(place, examples, derandomize=True, mirrored=False):
    tally: Counter = Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,  # the default suite: the same programs every run; the long one: new ones
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(programs(mirrored))
    @example(ISSUE_24) if mirrored else (lambda f: f)
    def prop(prog):
        check(prog, place, tally)

    prop()
    # not vacuous: most programs that compute a gradient take the compiled path
    assert tally["compiled"] >= max(1, examples // 4), tally
    return tally


@pytest.fixture
def compiling(monkeypatch):
    monkeypatch.setattr(config, "_compile_backward", True)
    yield
    gt.debug.clear_backward_cache()


@pytest.fixture
def fake_gpu(monkeypatch):
    from fake_gpu import FakeCupy

    if backend.gpu_available():
        pytest.skip("a real GPU answers here")
    cp = FakeCupy()
    monkeypatch.setattr(backend, "_cupy", cp)
    monkeypatch.setattr(backend, "_probed", {})
    monkeypatch.setattr(expr, "launch_dtype", lambda dt: None)  # the fake runs no kernels
    return lambda a: gt.constant(cp.asarray(a))


def test_compiled_backward_equals_the_sweep_on_numpy(compiling):
    _property(_host, EXAMPLES)


def test_compiled_backward_equals_the_sweep_on_a_fake_gpu(compiling, fake_gpu):
    _property(fake_gpu, EXAMPLES)


@pytest.mark.parametrize("device", ["numpy", "fake_gpu"])
def test_mirrored_dtypes_never_share_compiled_code(compiling, request, device):
    _property(_host if device == "numpy" else request.getfixturevalue("fake_gpu"), EXAMPLES // 2, mirrored=True)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("GPUTAPE_SLOW_TESTS"), reason="ten times the examples: set GPUTAPE_SLOW_TESTS=1")
@pytest.mark.parametrize("mirrored", [False, True], ids=["programs", "mirrored"])
@pytest.mark.parametrize("device", ["numpy", "fake_gpu"])
def test_compiled_backward_equals_the_sweep_long(compiling, request, device, mirrored):
    place = _host if device == "numpy" else request.getfixturevalue("fake_gpu")
    _property(place, 10 * EXAMPLES, derandomize=False, mirrored=mirrored)
