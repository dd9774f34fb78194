"""Forward values in the expression language: each elementwise function's value is ONE expression.

``relu: maximum(x, 0)``, declared with :func:`forward` next to the function it
defines, renders everything that computes that value:

* the forward numpy and cupy run (:attr:`Forward.fn`), straight-line Python with
  each repeated subexpression computed once (:func:`gputape.core.expr.hoist`): a
  primitive's forward is this function itself;
* the CUDA device function ``gt_<name>_fwd`` (:meth:`Forward.cuda`) that the
  fused bias+activation kernels of :mod:`gputape.kernels.registry` call;
* and so the numpy reference of those kernels, which is the CPU forward.

Functions the language defines in itself (``sigmoid``) are expanded where an
array module evaluates an expression (numpy has no sigmoid) and called as their
generated CUDA templates in kernels.

This module imports nothing from gputape but :mod:`gputape.core.expr`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import (
    ARRAY_FUNCTIONS,
    DEFINED,
    Expr,
    cuda_statements,
    hoist,
    lift,
    param,
    params_of,
    python,
    substitute,
    var,
    variables,
)


def expand(e: Expr) -> Expr:
    """``e`` with each call of a function the language defines (``sigmoid``) replaced by its definition.

    >>> from gputape.core.expr import sigmoid
    >>> python(expand(sigmoid(var("z")))).count("F.exp(-F.abs(z))")
    3
    """
    if e.op in ("var", "param", "const"):
        return e
    args = tuple(expand(a) if isinstance(a, Expr) else a for a in e.args)
    if e.op == "call" and args[0] in DEFINED:
        names, body = DEFINED[args[0]]
        return substitute(body, dict(zip(names, args[1:])))
    return Expr(e.op, args)


def calls(e: Expr) -> set[str]:
    """The functions ``e`` calls (``where`` included)."""
    out = {e.args[0]} if e.op == "call" else {"where"} if e.op == "where" else set()
    for a in e.args:
        if isinstance(a, Expr):
            out |= calls(a)
    return out


def python_function(fname: str, args: tuple[str, ...], e: Expr, ns: str = "F") -> str:
    """Source of ``def fname(ns, *args)`` returning ``e`` (defined functions expanded, repeats
    computed once), calling functions on the namespace argument ``ns``; ``args`` name the
    variables and parameters.

    >>> from gputape.core.expr import exp
    >>> print(python_function("f", ("x",), exp(var("x")) + exp(var("x")), "xp"))
    def f(xp, x):
        t0 = xp.exp(x)
        return t0 + t0
    <BLANKLINE>
    """
    names = {a: a for a in args}
    defs, res = hoist(expand(e))
    lines = [f"def {fname}({ns}, {', '.join(args)}):"]
    lines += [f"    {n} = {python(d, names, ns)}" for n, d in defs]
    lines.append(f"    return {python(res, names, ns)}")
    return "\n".join(lines) + "\n"


# -- forward values ------------------------------------------------------------------------------


class Forward:
    """One elementwise function's value as one expression over ``x`` and its parameters, and what it generates.

    :attr:`fn` is ``fn(F, x, *params)``, generated straight-line Python calling the
    expression's functions on ``F``: an array module (numpy, cupy) when
    :attr:`array_native`, else a namespace that has the functions :attr:`calls`
    names (gputape's ops compose it on tensors; ``ops.raw_namespace`` on arrays).
    :meth:`cuda` is the CUDA device function ``gt_<name>_fwd`` from the same expression.
    """

    __slots__ = ("calls", "expr", "fn", "name", "params", "source")

    def __init__(self, name: str, e: Expr, params: tuple[str, ...]) -> None:
        unknown = variables(e) - {"x"}
        if unknown:
            raise ValueError(f"forward {name!r}: unknown variables {sorted(unknown)}; a forward reads only x")
        undeclared = params_of(e) - set(params)
        if undeclared:
            raise ValueError(f"forward {name!r}: undeclared parameters {sorted(undeclared)}")
        self.name = name
        self.expr = e
        self.params = params
        self.calls = frozenset(calls(expand(e)))
        self.source = python_function("forward", ("x", *params), e)
        ns: dict[str, Any] = {}
        exec(compile(self.source, f"<gputape.core.expr forward {name}>", "exec"), ns)
        self.fn = ns["forward"]
        self.fn.__name__ = self.fn.__qualname__ = f"{name}_forward"

    @property
    def array_native(self) -> bool:
        """True when numpy and cupy evaluate :attr:`fn` themselves: ``fn(xp, x)``."""
        return self.calls <= ARRAY_FUNCTIONS

    def cuda(self) -> str:
        """The device function ``gt_<name>_fwd(T x, T <param>...)``, a template on the floating type.

        >>> print(FORWARDS["relu"].cuda().strip())
        template <typename T> __device__ __forceinline__ T gt_relu_fwd(T x) {
          return gt_maximum(x, T(0));
        }
        """
        args = ", ".join(f"T {a}" for a in ("x", *self.params))
        return (
            f"template <typename T> __device__ __forceinline__ T gt_{self.name}_fwd({args}) {{\n"
            f"  {cuda_statements(self.expr)}\n}}\n"
        )


FORWARDS: dict[str, Forward] = {}


def forward(name: str, fn: Callable[..., Any], params: tuple[str, ...] = ()) -> Forward:
    """Declare elementwise function ``name``'s value: ``fn(x, *params)`` returns its expression.

    >>> import numpy as np
    >>> f = forward("demo_square", lambda x: x * x)
    >>> f.fn(np, np.array([3.0])).tolist(), f.array_native
    ([9.0], True)
    >>> del FORWARDS["demo_square"]
    """
    if name in FORWARDS:
        raise ValueError(f"forward {name!r} is already declared")
    f = Forward(name, lift(fn(var("x"), *(param(p) for p in params))), tuple(params))
    FORWARDS[name] = f
    return f


__all__ = ["FORWARDS", "Forward", "calls", "expand", "forward", "python_function"]
