"""The VJP namespaces find every primitive by name; nothing outside gputape.ops fills them."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import gputape as gt
from gputape.core.primitive import REGISTRY
from gputape.ops import DIFF_NAMESPACE, raw_namespace


def test_a_primitive_declared_above_the_ops_is_found_by_name_in_both_namespaces():
    raw = raw_namespace(np)
    x = np.array([-1.0, 0.5, 2.0])
    np.testing.assert_allclose(raw.sigmoid(x), 1 / (1 + np.exp(-x)), rtol=1e-12)
    assert DIFF_NAMESPACE.sigmoid is gt.nn.sigmoid  # the public function: a recording tape records it
    assert DIFF_NAMESPACE.erf is gt.erf
    e = np.exp(x - x.max())
    np.testing.assert_allclose(raw.softmax(x, -1), e / e.sum(), rtol=1e-12)


def test_an_unknown_name_is_a_clear_attribute_error():
    with pytest.raises(AttributeError, match="no 'no_such_op'"):
        raw_namespace(np).no_such_op
    with pytest.raises(AttributeError, match="neither an array function nor a primitive"):
        DIFF_NAMESPACE.no_such_op


def test_second_order_through_vjps_that_call_primitives_by_name():
    x = gt.constant([0.3, -0.7], "float64")
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.sum(gt.nn.softplus(x))  # VJP: g * sigmoid(x), F.sigmoid on tensors when recorded
        g = inner.gradient(y, x)
    s = 1 / (1 + np.exp(-x.numpy()))
    np.testing.assert_allclose(g.numpy(), s, rtol=1e-12)
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), s * (1 - s), rtol=1e-12)


def test_no_module_outside_the_ops_sets_a_namespace_attribute():
    pkg = Path(gt.__file__).parent
    found = []
    for path in pkg.rglob("*.py"):
        if path.parent.name == "ops":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and "NAMESPACE" in t.value.id:
                    found.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register_f":
                found.append(f"{path}:{node.lineno}")
    assert not found


def test_every_registered_primitive_resolves_in_the_raw_namespace():
    raw = raw_namespace(np)
    missing = [n for n, p in REGISTRY.items() if n.isidentifier() and getattr(raw, n, None) is None]
    assert not missing


def test_a_primitive_without_a_public_function_is_named_as_such_on_tensors():
    from gputape.core.dispatch import primitive

    @primitive("demo_no_public", complex="holomorphic")
    def fwd(xp, x):
        return x

    try:
        assert raw_namespace(np).demo_no_public(np.ones(2)).tolist() == [1.0, 1.0]
        with pytest.raises(AttributeError, match="declares no public function"):
            DIFF_NAMESPACE.demo_no_public
    finally:
        del REGISTRY["demo_no_public"]
