"""The derivative language: each elementwise primitive's VJP is ONE expression, rendered everywhere it runs.

An elementwise primitive declares the cotangent of each input as an expression
over its inputs (``x``, ``y``), its output (``out``), the incoming cotangent
``g`` and its parameters (``alpha``)::

    tanh:  g * (1 - out * out)
    log:   multiply_no_nan(1 / x, g)          # 0 where g == 0, even at x == 0

:func:`derivative` turns that one declaration into every form the library runs:

* the VJP the backward sweep calls, generated as straight-line Python over the
  array namespace ``F`` (numpy/cupy in the fast sweep; gputape's own ops when a
  tape records the gradient, so higher-order gradients come for free), with a
  single generated CUDA kernel in place of the expression's several cupy
  launches on a GPU (:attr:`Derivative.vjp`);
* the text gt.function's CPU replay writes inline (:meth:`Derivative.python`):
  the very text the VJP evaluates, so a replay is bitwise the eager gradient;
* the CUDA ``ElementwiseKernel`` body (:meth:`Derivative.kernel`), alone or
  composed with its neighbours into one fused backward kernel (:func:`compose`);
* the numpy reference of that kernel, which is the VJP itself on numpy.

An elementwise function's *value* is one expression of the same language too
(:mod:`gputape.core.expr.forward`); the functions the language defines in itself
(``sigmoid``) are one expression each, rendered as a CUDA template from it.

Which residuals a primitive saves follows from the expressions: the inputs and
the output they mention, nothing else. The NaN guards are defined once, here:
``multiply_no_nan(x, y)`` is ``x * y`` but exactly 0 where ``y == 0`` (TensorFlow's
``MulNoNan``), ``where(c, a, b)`` never mixes the branch it does not take.

>>> from gputape.core import expr
>>> x, out, g = expr.var("x"), expr.var("out"), expr.var("g")
>>> d = g * (1 - out * out)
>>> expr.python(d, {"out": "a0"}), expr.cuda(d, {"out": "a0"})
('g * (1 - a0 * a0)', 'g * (T(1) - a0 * a0)')

This module imports nothing from gputape but :mod:`gputape.devices.backend`.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import config
from ...devices import backend

# -- expressions -------------------------------------------------------------------------------

_PREC = {"where": 9, "call": 9, "var": 9, "param": 9, "const": 9, "neg": 7, "*": 6, "/": 6, "+": 5, "-": 5}
_CMP = (">", ">=", "<", "<=", "==")


class Expr:
    """A node of a derivative expression: ``op`` and its ``args`` (sub-expressions or a name/value)."""

    __slots__ = ("args", "op")

    def __init__(self, op: str, args: tuple) -> None:
        self.op = op
        self.args = args

    def _bin(self, op: str, other: Any, right: bool = False) -> Expr:
        o = lift(other)
        return Expr(op, (o, self) if right else (self, o))

    def __add__(self, o: Any) -> Expr:
        return self._bin("+", o)

    def __radd__(self, o: Any) -> Expr:
        return self._bin("+", o, True)

    def __sub__(self, o: Any) -> Expr:
        return self._bin("-", o)

    def __rsub__(self, o: Any) -> Expr:
        return self._bin("-", o, True)

    def __mul__(self, o: Any) -> Expr:
        return self._bin("*", o)

    def __rmul__(self, o: Any) -> Expr:
        return self._bin("*", o, True)

    def __truediv__(self, o: Any) -> Expr:
        return self._bin("/", o)

    def __rtruediv__(self, o: Any) -> Expr:
        return self._bin("/", o, True)

    def __neg__(self) -> Expr:
        return Expr("neg", (self,))

    def __gt__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._bin(">", o)

    def __ge__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._bin(">=", o)

    def __lt__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._bin("<", o)

    def __le__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._bin("<=", o)

    def __bool__(self) -> bool:
        raise TypeError("a derivative expression has no truth value: use where(cond, a, b)")

    def __repr__(self) -> str:
        return f"<expr {python(self)}>"


def lift(v: Any) -> Expr:
    """An expression for ``v``: expressions pass through, Python numbers become constants."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float)):
        raise TypeError(f"derivative expressions take expressions and Python numbers, not {type(v).__name__}")
    return Expr("const", (v,))


def var(name: str) -> Expr:
    """A named operand: an input (``x``, ``y``), the output ``out`` or the cotangent ``g``."""
    return Expr("var", (name,))


def param(name: str) -> Expr:
    """A primitive's parameter (``node.params[name]`` in the VJP; a kernel argument on the GPU)."""
    return Expr("param", (name,))


def eq(a: Any, b: Any) -> Expr:
    """``a == b`` (``==`` on expressions keeps Python's identity meaning)."""
    return Expr("==", (lift(a), lift(b)))


# Functions an expression may call: F.<name> in Python (numpy's meaning; gputape's
# ops under the same names), gt_<name> in CUDA. Plain math maps to the C library's
# single- and double-precision functions (a float kernel never computes in double).
_C_MATH = {
    "exp": "exp",
    "expm1": "expm1",
    "log": "log",
    "log1p": "log1p",
    "sqrt": "sqrt",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "tanh": "tanh",
    "sinh": "sinh",
    "cosh": "cosh",
    "erf": "erf",
    "abs": "fabs",
}
# Functions with a body of their own, templated on the floating type. NaN in, NaN out,
# as numpy's sign/minimum/maximum.
_C_TEMPLATES = {
    "sign": ("x", "return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);"),
    "minimum": ("a, b", "return (a != a || a < b) ? a : b;"),
    "maximum": ("a, b", "return (a != a || a > b) ? a : b;"),
    # "sigmoid": its body is generated from its definition (DEFINED, below)
    "multiply_no_nan": ("x, y", "return y == T(0) ? T(0) : x * y;"),
}
FUNCTIONS = frozenset(_C_MATH) | frozenset(_C_TEMPLATES) | {"where"}


def _call(name: str) -> Callable[..., Expr]:
    def fn(*args: Any) -> Expr:
        return Expr("call", (name, *(lift(a) for a in args)))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{name}(...)`` in a derivative expression."
    return fn


exp = _call("exp")
expm1 = _call("expm1")
log = _call("log")
log1p = _call("log1p")
sqrt = _call("sqrt")
sin = _call("sin")
cos = _call("cos")
tan = _call("tan")
tanh = _call("tanh")
sinh = _call("sinh")
cosh = _call("cosh")
erf = _call("erf")
sign = _call("sign")
minimum = _call("minimum")
maximum = _call("maximum")
sigmoid = _call("sigmoid")
multiply_no_nan = _call("multiply_no_nan")
absolute = _call("abs")  # (not ``abs``: that would hide the builtin here)


def where(cond: Any, a: Any, b: Any) -> Expr:
    """``a`` where ``cond`` else ``b``; the branch not taken never reaches the result (no NaN leaks)."""
    return Expr("where", (lift(cond), lift(a), lift(b)))


# -- rendering ---------------------------------------------------------------------------------


def _prec(e: Expr) -> int:
    if e.op in _CMP:
        return 3
    if e.op == "const" and e.args[0] < 0:
        return 7  # a negative literal reads like a negation
    return _PREC[e.op]


def _render(e: Expr, names: dict[str, str], c: bool, ns: str = "F", typed: _Typed | None = None) -> str:
    op = e.op
    if op == "var":
        return names.get(e.args[0], e.args[0])
    if op == "param":
        p = e.args[0]
        return names.get(p, p) if c else names.get(p, f"node.params[{p!r}]")
    if op == "const":
        v = e.args[0]
        return f"T({v!r})" if c else repr(v)
    if op == "call":
        subs = e.args[1:]
        args = [_render(a, names, c, ns, typed) for a in subs]
        if typed is not None and len(subs) == 2:  # minimum(x, 0)
            args[0], args[1] = typed.pair(subs[0], subs[1], args[0], args[1])
        return f"gt_{e.args[0]}({', '.join(args)})" if c else f"{ns}.{e.args[0]}({', '.join(args)})"
    if op == "where":
        cond, a, b = (_render(x, names, c, ns, typed) for x in e.args)
        if typed is not None:  # a literal branch takes the other branch's dtype, as numpy gives it
            a, b = typed.pair(e.args[1], e.args[2], a, b)
        return f"({cond} ? {a} : {b})" if c else f"{ns}.where({cond}, {a}, {b})"
    mine = _prec(e)
    if op == "neg":
        inner = e.args[0]
        s = _render(inner, names, c, ns, typed)
        wrap = _prec(inner) < mine or inner.op == "neg" or (inner.op == "const" and inner.args[0] < 0)
        return f"-({s})" if wrap else f"-{s}"
    left, right = e.args
    ls, rs = _render(left, names, c, ns, typed), _render(right, names, c, ns, typed)
    # Parentheses exactly where the tree has them: a * (b * c) is not (a * b) * c in floating point.
    if _prec(left) < mine or left.op in _CMP:
        ls = f"({ls})"
    if _prec(right) <= mine:
        rs = f"({rs})"
    if typed is not None:
        ls, rs = typed.pair(left, right, ls, rs)
    return f"{ls} {op} {rs}"


class _Literal(dict):
    """A Python number of a derivative, as the 0-d array of each floating dtype it meets.

    numpy converts a Python number operand to the array operand's dtype (NEP 50) on every
    call, which costs a small array's ufunc call twice what a same-dtype 0-d array operand
    does (~460 against ~220 ns on 16 float32 values). ``lit[a.dtype] * a`` is bitwise
    ``2 * a``: the same value converted the same way, once. Any dtype but float32/float64 gets
    the number itself (numpy's own rule then applies unchanged).
    """

    __slots__ = ("name", "value")

    def __init__(self, value: int | float) -> None:
        super().__init__()
        self.value = value
        # the name generated code gives it: readable, one per value (1 and 1.0 apart), e.g. K_m0_5
        self.name = "K_" + repr(value).replace("-", "m").replace(".", "_").replace("+", "p")
        with np.errstate(all="ignore"):
            for dt in (np.dtype(np.float32), np.dtype(np.float64)):
                a = np.array(value, dt)
                if np.isfinite(a):  # (a literal past the dtype's range keeps numpy's own handling)
                    a.flags.writeable = False
                    self[dt] = a

    def __missing__(self, dt: Any) -> int | float:
        return self.value


class _Typed:
    """:func:`python_typed`'s state: which variables hold arrays, the literals' tables, temporaries."""

    def __init__(self, arrays: set[str], literal: Callable[[Any], str]) -> None:
        self.arrays = arrays
        self.literal = literal
        self.temps = 0

    def _arrayish(self, e: Expr) -> bool:
        # an array operand anywhere in it makes its value an array (or a numpy scalar): it has a dtype
        return e.op != "const" and bool(variables(e) & self.arrays)

    def pair(self, left: Expr, right: Expr, ls: str, rs: str) -> tuple[str, str]:
        """``ls``, ``rs`` with a literal side written as a table lookup by the other side's dtype."""
        if left.op == "const" and self._arrayish(right):
            k = self.literal(left.args[0])
            if right.op == "var":
                return f"{k}[{rs}.dtype]", rs
            t = self._temp()  # evaluated first (inside the lookup), then read: the order of the original
            return f"{k}[({t} := {rs}).dtype]", t
        if right.op == "const" and self._arrayish(left):
            k = self.literal(right.args[0])
            if left.op == "var":
                return ls, f"{k}[{ls}.dtype]"
            t = self._temp()
            return f"({t} := {ls})", f"{k}[{t}.dtype]"
        return ls, rs

    def _temp(self) -> str:
        self.temps += 1
        return f"_k{self.temps}"


def python(e: Expr, names: dict[str, str] | None = None, ns: str = "F") -> str:
    """``e`` as Python over the namespace ``F`` (or ``ns``; variables renamed by ``names``).

    >>> python(multiply_no_nan(1 / var("x"), var("g")), {"x": "a0"})
    'F.multiply_no_nan(1 / a0, g)'
    """
    return _render(e, names or {}, False, ns)


# numpy converts a Python number to the other operand's dtype (NEP 50, numpy >= 2): a literal may be
# handed to a ufunc as that dtype's 0-d array, to the same bits
_literals: dict[tuple, _Literal] = {}
# Tables shared, at most: the declared derivatives' few literals, NUMBERS' numbers and the number
# constants gt.function traces (one per distinct constant, each retrace with a new one adds one).
# Past it a table is made for its caller alone: generated code keeps the table it names.
LITERALS_MAX = 8192


def literal(value: int | float) -> _Literal:
    """The shared :class:`_Literal` table of ``value`` (-0.0 and 0.0, 1 and 1.0 apart); a fresh,
    unshared one once :data:`LITERALS_MAX` tables are kept.

    >>> import numpy as np
    >>> t = literal(0.5)
    >>> t[np.dtype(np.float32)].dtype, t[np.dtype(np.complex64)]
    (dtype('float32'), 0.5)
    """
    key = (type(value), repr(value))
    t = _literals.get(key)
    if t is None:
        t = _Literal(value)
        if len(_literals) < LITERALS_MAX:
            _literals[key] = t
    return t


# The Python numbers met beside host arrays (gputape.core.dispatch's entry points, the recorders, the
# gt.function trace), by value, each with its :func:`literal` table: 1 and 1.0 share one (the same
# float values), 0 and -0.0 share an empty one (the number itself is passed: its sign stays).
NUMBERS: dict[int | float, dict] = {}
_NO_LITERAL: dict = {}
NUMBERS_MAX = 4096  # distinct numbers kept; past it, a new number is passed as itself


def number_miss(v: int | float) -> dict:
    """The table for a number not in :data:`NUMBERS` yet: made and kept where its conversion is exact and safe."""
    if v != v or v == 0 or len(NUMBERS) >= NUMBERS_MAX:
        return _NO_LITERAL  # NaN (never found again), zeros' signs, a full table: numpy converts it
    if type(v) is int and abs(v) > 2**24:
        t = _NO_LITERAL  # (a large int's float32 value is left to numpy's own conversion)
    else:
        t = literal(v)
    NUMBERS[v] = t
    return t


def typed_number(v: Any, d: Any) -> Any:
    """What a ufunc is handed for operand ``v`` beside host array ``d``: a Python number's cached
    same-dtype 0-d array where that is bitwise the number (NEP 50), anything else as it is. The
    generated entry points do the same inline; gt.function's trace records it, so a replay computes
    what the eager op computed, as fast; multiply's and divide's recorders save it.

    >>> import numpy as np
    >>> typed_number(0.5, np.zeros(2, np.float32)).dtype, typed_number(0.5, np.zeros(2, np.int64))
    (dtype('float32'), 0.5)
    """
    if (type(v) is not float and type(v) is not int) or type(d) is not np.ndarray:
        return v
    t = NUMBERS.get(v)
    return (number_miss(v) if t is None else t).get(d.dtype, v)


TEMPORARIES = re.compile(r"\b_k[0-9]+\b")  # the names python_typed's text assigns (code that writes it frees them)


def python_typed(e: Expr, names: dict[str, str], arrays: set[str], name_of: Callable[[_Literal], str]) -> str:
    """``e`` as :func:`python` writes it, but each literal beside an array-valued operand is a
    lookup of :func:`literal`'s table (named by ``name_of``) by that operand's dtype: bitwise the
    same results on numpy 2, fewer nanoseconds. ``arrays``: the variables known to hold arrays
    (``g``, ``out``, and the inputs that are tensors), in the expression's own names.

    >>> x, g = var("x"), var("g")
    >>> python_typed(g * (1 - x * x), {"x": "a0"}, {"g", "x"}, lambda t: "ONE")
    'g * (ONE[(_k1 := a0 * a0).dtype] - _k1)'
    """
    return _render(e, names, False, "F", _Typed(arrays, lambda v: name_of(literal(v))))


def cuda(e: Expr, names: dict[str, str] | None = None) -> str:
    """``e`` as a CUDA C++ expression in the floating type ``T`` (calls :data:`CUDA_PRELUDE`).

    >>> cuda(where(var("x") > 0, var("g"), 0))
    '(x > T(0) ? g : T(0))'
    """
    return _render(e, names or {}, True)


def variables(e: Expr) -> set[str]:
    """The variable names ``e`` reads."""
    if e.op == "var":
        return {e.args[0]}
    out: set[str] = set()
    for a in e.args:
        if isinstance(a, Expr):
            out |= variables(a)
    return out


def params_of(e: Expr) -> set[str]:
    """The parameter names ``e`` reads."""
    if e.op == "param":
        return {e.args[0]}
    out: set[str] = set()
    for a in e.args:
        if isinstance(a, Expr):
            out |= params_of(a)
    return out


def _size(e: Expr) -> int:
    return (e.op not in ("var", "param", "const")) + sum(_size(a) for a in e.args if isinstance(a, Expr))


def substitute(e: Expr, env: dict[str, Expr]) -> Expr:
    """``e`` with variables replaced by the expressions ``env`` names."""
    if e.op == "var":
        return env.get(e.args[0], e)
    if e.op in ("const", "param"):
        return e
    return Expr(e.op, tuple(substitute(a, env) if isinstance(a, Expr) else a for a in e.args))


def compose(links: list[tuple[Expr, list[str]]]) -> tuple[Expr, int]:
    """One expression for a chain of VJPs, the first applied first: (expr, operand count).

    Each link is ``(expression over g and operands, its operand names)``; its
    operands become the next free ``p{i}``; ``g`` is the previous link's result.

    >>> e, n = compose([(var("g") * (1 - var("a0") * var("a0")), ["a0"]), (var("g") * var("a1"), ["a1"])])
    >>> python(e), n
    ('g * (1 - p0 * p0) * p1', 2)
    """
    cur, n = var("g"), 0
    for e, operands in links:
        env = {"g": cur}
        for name in operands:
            env[name] = var(f"p{n}")
            n += 1
        cur = substitute(e, env)
    return cur, n


def kernel_source(e: Expr, nparams: int, name: str) -> tuple[str, str, str, str]:
    """``cupy.ElementwiseKernel`` arguments for ``out = e`` over ``g`` and ``p0..p{n-1}``
    (compile with :data:`CUDA_PRELUDE` as the preamble)."""
    ins = ", ".join(["T g"] + [f"T p{i}" for i in range(nparams)])
    return ins, "T out", f"out = {cuda(e)}", name


# -- straight-line code, and the functions the language defines in itself -------------------------


def _key(e: Expr) -> tuple:
    if e.op == "const":
        return ("const", type(e.args[0]).__name__, e.args[0])  # 1 and 1.0 render differently
    return (e.op, *(_key(a) if isinstance(a, Expr) else a for a in e.args))


def _count(e: Expr, counts: dict[tuple, int], reps: dict[tuple, Expr]) -> None:
    if e.op in ("var", "param", "const"):
        return
    k = _key(e)
    counts[k] = counts.get(k, 0) + 1
    reps[k] = e
    for a in e.args:
        if isinstance(a, Expr):
            _count(a, counts, reps)


def _replace(e: Expr, key: tuple, by: Expr) -> Expr:
    if e.op in ("var", "param", "const"):
        return e
    if _key(e) == key:
        return by
    return Expr(e.op, tuple(_replace(a, key, by) if isinstance(a, Expr) else a for a in e.args))


def hoist(e: Expr) -> tuple[list[tuple[str, Expr]], Expr]:
    """``e`` as straight-line code: ``(temporaries, result)``, every subexpression that occurs
    more than once computed once into ``t0, t1, ...`` (largest first), in evaluation order.

    >>> x = var("x")
    >>> e = exp(-absolute(x))
    >>> defs, res = hoist(where(x >= 0, 1 / (1 + e), e / (1 + e)))
    >>> [(n, python(d)) for n, d in defs], python(res)
    ([('t0', 'F.exp(-F.abs(x))'), ('t1', '1 + t0')], 'F.where(x >= 0, 1 / t1, t0 / t1)')
    """
    defs: dict[str, Expr] = {}
    while True:
        counts: dict[tuple, int] = {}
        reps: dict[tuple, Expr] = {}
        for root in (*defs.values(), e):
            _count(root, counts, reps)
        repeated = [k for k, n in counts.items() if n > 1]
        if not repeated:
            break
        k = max(repeated, key=lambda k: _size(reps[k]))
        tv = var(f"_h{len(defs)}")
        defs = {n: _replace(d, k, tv) for n, d in defs.items()}
        defs[tv.args[0]] = reps[k]
        e = _replace(e, k, tv)
    order: list[str] = []

    def visit(x: Expr) -> None:  # each temporary right before its first use
        if x.op == "var" and x.args[0] in defs:
            if x.args[0] not in order:
                visit(defs[x.args[0]])
                order.append(x.args[0])
            return
        for a in x.args:
            if isinstance(a, Expr):
                visit(a)

    visit(e)
    ren = {n: var(f"t{i}") for i, n in enumerate(order)}
    return [(f"t{i}", substitute(defs[n], ren)) for i, n in enumerate(order)], substitute(e, ren)


def _sigmoid_definition(x: Expr) -> Expr:
    # exp of -|x| only: never overflows, and keeps precision in both tails
    e = exp(-absolute(x))
    return where(x >= 0, 1 / (1 + e), e / (1 + e))


# Functions of the language defined in the language (name -> (arguments, body)): a CUDA
# template generated from the body, and expanded in place where an array module evaluates
# an expression (numpy has no sigmoid). One statement of their math for every backend.
DEFINED: dict[str, tuple[tuple[str, ...], Expr]] = {"sigmoid": (("x",), _sigmoid_definition(var("x")))}
FUNCTIONS = FUNCTIONS | frozenset(DEFINED)
# What numpy and cupy offer under the language's names and with its meaning.
ARRAY_FUNCTIONS = (frozenset(_C_MATH) - {"erf"}) | {"sign", "minimum", "maximum", "where"}


def cuda_statements(e: Expr, names: dict[str, str] | None = None) -> str:
    """``e`` as the statements of a CUDA function body in ``T``: temporaries (:func:`hoist`), then ``return``.

    >>> cuda_statements(exp(var("x")) * exp(var("x")))
    'T t0 = gt_exp(x);\\n  return t0 * t0;'
    """
    defs, res = hoist(e)
    lines = [f"T {n} = {cuda(d, names)};" for n, d in defs] + [f"return {cuda(res, names)};"]
    return "\n  ".join(lines)


def _cuda_prelude() -> str:
    lines = [
        "// Generated by gputape.core.expr: the functions derivative expressions call, per floating type.",
        "#ifndef GPUTAPE_EXPR_PRELUDE",
        "#define GPUTAPE_EXPR_PRELUDE",
    ]
    for name, c in _C_MATH.items():
        lines.append(f"__device__ __forceinline__ float gt_{name}(float x) {{ return {c}f(x); }}")
        lines.append(f"__device__ __forceinline__ double gt_{name}(double x) {{ return {c}(x); }}")
    for name, (args, body) in _C_TEMPLATES.items():
        params = ", ".join(f"T {a.strip()}" for a in args.split(","))
        lines.append(f"template <typename T> __device__ __forceinline__ T gt_{name}({params}) {{\n  {body}\n}}")
    for name, (args, e) in DEFINED.items():
        params = ", ".join(f"T {a}" for a in args)
        lines.append(
            f"template <typename T> __device__ __forceinline__ T gt_{name}({params}) {{\n  {cuda_statements(e)}\n}}"
        )
    lines.append("#endif")
    return "\n".join(lines) + "\n"


CUDA_PRELUDE = _cuda_prelude()


# -- declarations --------------------------------------------------------------------------------


# the names a VJP's text is written over (Derivative.python's rename replaces them)
# Expressions that are a name or a number: as a VJP's result, one of its arguments passed through
_LEAVES = frozenset(("var", "param", "const"))
_VJP_NAMES = re.compile(r"\b(g|a[0-9]+|F|node)\b")


class Derivative:
    """One elementwise primitive's derivative: one expression per input, and what it generates.

    ``inputs`` names the positional inputs, ``grads`` holds each input's
    cotangent (None: not differentiable), ``params`` the parameters the
    expressions read. ``save``/``save_out`` are the residuals the expressions
    need (in the primitive's convention), ``operands`` their names in the
    order the VJP receives them (``a0, a1, ...``). ``fresh``: per input, whether its
    cotangent is an operation's result (a numpy ufunc's or ``where``'s output on host arrays:
    memory the VJP allocated), not a bare name passed through (``g``, an operand, a
    parameter): the primitive's :attr:`~gputape.core.primitive.Primitive.fresh_cotangents`.
    """

    __slots__ = (
        "_kernels",
        "fresh",
        "gpu_kernel",
        "grads",
        "inputs",
        "name",
        "operands",
        "params",
        "save",
        "save_out",
        "source",
        "vjp",
    )

    def __init__(self, name: str, inputs: tuple[str, ...], grads: tuple[Expr | None, ...], params: tuple[str, ...]):
        self.name = name
        self.inputs = inputs
        self.grads = grads
        self.params = params
        used: set[str] = set()
        for gr in grads:
            if gr is not None:
                used |= variables(gr)
                unknown = params_of(gr) - set(params)
                if unknown:
                    raise ValueError(f"derivative {name!r}: undeclared parameters {sorted(unknown)}")
        known = set(inputs) | {"out", "g"}
        if used - known:
            raise ValueError(f"derivative {name!r}: unknown variables {sorted(used - known)}; known: {sorted(known)}")
        idx = tuple(i for i, n in enumerate(inputs) if n in used)
        self.save: bool | tuple[int, ...] = True if len(idx) == len(inputs) else idx
        self.save_out = "out" in used
        self.operands = [inputs[i] for i in idx] + (["out"] if self.save_out else [])
        self.fresh = tuple(gr is not None and gr.op not in _LEAVES for gr in grads)
        self._kernels: dict[Any, Any] = {}
        # the VJP launches one generated kernel on a GPU (_gpu) instead of a cupy launch per operation
        self.gpu_kernel = len(inputs) == 1 and _size(self.grads[0]) >= 2
        self.source = self._vjp_source()
        ns: dict[str, Any] = {"_gpu": self._gpu}
        exec(compile(self.source, f"<gputape.core.expr vjp {name}>", "exec"), ns)
        self.vjp = ns["vjp"]
        self.vjp.__name__ = self.vjp.__qualname__ = f"{name}_vjp"

    def names(self) -> dict[str, str]:
        """Variable name -> the name the VJP gives it (``a0``, ``a1``, ... in saved order)."""
        return {n: f"a{j}" for j, n in enumerate(self.operands)}

    def python(self, k: int, rename: dict[str, str] | None = None) -> str | None:
        """Input ``k``'s cotangent as the VJP's Python text (over ``F``, ``g``, ``a0..``, ``node``).

        ``rename`` maps those names to the ones of the code it is written into (gt.function's
        replay, the compiled backward), which then evaluates the very text the VJP does.
        """
        gr = self.grads[k]
        if gr is None:
            return None
        text = python(gr, self.names())
        return text if rename is None else _VJP_NAMES.sub(lambda m: rename[m.group(1)], text)

    def python_typed(
        self,
        k: int,
        rename: dict[str, str],
        tensors: tuple[bool, ...],
        name_of: Callable[[_Literal], str],
        numbers: dict[str, int | float] | None = None,
    ) -> str | None:
        """:meth:`python`'s text with its literals as :func:`python_typed` writes them (numpy only).

        ``tensors``: which inputs are tensors (arrays) on the tape; a constant operand may be a
        Python number, which has no dtype to look a literal up by. ``numbers``: inputs known to
        hold these Python numbers (gt.function's constants), written as literals (so typed too).

        >>> DERIVATIVES["tanh"].python_typed(0, {"g": "g", "a0": "a0", "F": "F", "node": "n"}, (True,), lambda t: "K")
        'g * (K[(_k1 := a0 * a0).dtype] - _k1)'
        """
        gr = self.grads[k]
        if gr is None:
            return None
        arrays = {"g", "out"} | {n for n, t in zip(self.inputs, tensors) if t}
        if numbers:
            gr = substitute(gr, {n: lift(v) for n, v in numbers.items()})
        text = python_typed(gr, self.names(), arrays, name_of)
        return _VJP_NAMES.sub(lambda m: rename[m.group(1)], text)

    def _vjp_source(self) -> str:
        args = "".join(f", a{j}" for j in range(len(self.operands)))
        lines = [f"def vjp(F, g, needs, nb, node{args}):"]
        if self.gpu_kernel:
            ps = "".join(f", node.params[{p!r}]" for p in self.params)
            lines += [
                "    if F.gpu:",
                f"        r = _gpu(g{args}{ps})",
                "        if r is not None:",
                "            return (r,)",
            ]
        outs = []
        for k, gr in enumerate(self.grads):
            text = self.python(k)
            if text is None:
                outs.append("None")
            elif len(self.inputs) == 1 or gr.op == "var":
                outs.append(text)  # the sweep skips cotangents it does not need: no test for a bare name
            else:
                outs.append(f"{text} if needs[{k}] else None")
        lines.append(f"    return ({', '.join(outs)},)")
        return "\n".join(lines) + "\n"

    # -- CUDA
    def kernel_operands(self, k: int) -> list[str]:
        """The operands (in VJP order) input ``k``'s cotangent reads."""
        gr = self.grads[k]
        vs = variables(gr) if gr is not None else set()
        return [n for n in self.operands if n in vs]

    def kernel_name(self, k: int) -> str:
        return f"gt_{self.name}_bwd" if len(self.inputs) == 1 else f"gt_{self.name}_bwd{k}"

    def kernel(self, k: int) -> tuple[str, str, str]:
        """(in_params, out_params, body) of input ``k``'s standalone backward ElementwiseKernel.

        >>> DERIVATIVES["tanh"].kernel(0)
        ('T g, T a0', 'T out', 'out = g * (T(1) - a0 * a0)')
        """
        names = self.names()
        ops = self.kernel_operands(k)
        ins = ", ".join(["T g"] + [f"T {names[n]}" for n in ops] + [f"T {p}" for p in self.params])
        return ins, "T out", f"out = {cuda(self.grads[k], names)}"

    def fusable(self, k: int) -> tuple[Expr, list[str]] | None:
        """(expression over ``g`` and ``a{j}``, operand names) for gt.function's fused chains, else None.

        Parameters and non-float operands (``where``'s condition) stay out of fused kernels.
        """
        gr = self.grads[k]
        if gr is None or params_of(gr) or any(g is None for g in self.grads):
            return None
        names = self.names()
        return substitute(gr, {n: var(a) for n, a in names.items()}), [names[n] for n in self.kernel_operands(k)]

    def vector_name(self, ctype: str) -> str:
        """The name of the vectorised kernel (:meth:`vector_source`) for C type ``ctype``."""
        return f"{self.kernel_name(0)}_vec_{_VECTOR[ctype][2]}"

    def vector_source(self, ctype: str) -> str:
        """Input 0's backward as a raw CUDA kernel with vector loads (``float4``/``double2``).

        The same body as :meth:`kernel` (the derivative expression's CUDA text), for the case
        cupy's ElementwiseKernel cannot specialise: every array of one shape, contiguous and
        16-byte aligned. Each thread of a grid-stride loop loads one vector of each operand,
        runs the body once per lane and stores one vector; the ``n % width`` elements left
        over take a scalar loop. Launched by :meth:`_gpu` when ``gt.config.set_vector_kernels``
        is on (off by default until a GPU run has measured it against the ElementwiseKernel).

        >>> src = DERIVATIVES["tanh"].vector_source("float")
        >>> "float4" in src and "out = g * (T(1) - a0 * a0)" in src
        True
        """
        vec, width, _ = _VECTOR[ctype]
        names = self.names()
        arrays = ["g", *(names[n] for n in self.kernel_operands(0))]
        body = f"out = {cuda(self.grads[0], names)}"
        sig = [f"const {ctype}* __restrict__ {a}_" for a in arrays]
        sig += [f"const {ctype} {p}" for p in self.params]
        sig += [f"{ctype}* __restrict__ out_", "const long long n"]
        lines = [
            CUDA_PRELUDE,
            f'extern "C" __global__ void {self.vector_name(ctype)}({", ".join(sig)}) {{',
            f"  typedef {ctype} T;",
            f"  typedef {vec} V;",
            "  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "  const long long stride = (long long)gridDim.x * blockDim.x;",
            f"  const long long nv = n / {width};",
            "  for (long long i = first; i < nv; i += stride) {",
        ]
        lines += [f"    const V v_{a} = reinterpret_cast<const V*>({a}_)[i];" for a in arrays]
        lines.append("    V v_out;")
        for lane in _LANES[:width]:
            loads = " ".join(f"const T {a} = v_{a}.{lane};" for a in arrays)
            lines.append(f"    {{ {loads} T out; {body}; v_out.{lane} = out; }}")
        lines += [
            "    reinterpret_cast<V*>(out_)[i] = v_out;",
            "  }",
            f"  for (long long i = nv * {width} + first; i < n; i += stride) {{",
            "    " + " ".join(f"const T {a} = {a}_[i];" for a in arrays) + f" T out; {body}; out_[i] = out;",
            "  }",
            "}",
        ]
        return "\n".join(lines) + "\n"

    def _gpu(self, g: Any, *args: Any) -> Any:
        """The unary cotangent in one generated kernel on cupy arrays; None when no kernel fits the dtypes."""
        saved = args[: len(self.operands)]
        params = args[len(self.operands) :]
        dt = launch_dtype(np.result_type(g.dtype, *(a.dtype for a in saved)))
        if dt is None:
            return None
        ops = [a if a.dtype == dt else a.astype(dt) for a in saved]
        gd = g if g.dtype == dt else g.astype(dt)
        if config._vector_kernels and _vectorisable(gd, ops):
            out = self._vector_launch(gd, ops, params, dt)
        else:
            k = self._kernel_for(g.device.id)
            with g.device:
                out = k(gd, *ops, *params)
        return out if out.dtype == g.dtype else out.astype(g.dtype)

    def _vector_launch(self, g: Any, ops: list, params: tuple, dt: np.dtype) -> Any:
        ctype = "float" if dt == np.float32 else "double"
        width = _VECTOR[ctype][1]
        key = (g.device.id, ctype)
        k = self._kernels.get(key)
        cp = backend.cupy_module()
        if k is None:
            k = self._kernels[key] = _vector_function(cp, self, g.device.id, ctype)
        n = g.size
        blocks = max(1, min((n // width + 255) // 256, _VECTOR_MAX_BLOCKS))
        with g.device:
            out = cp.empty(g.shape, dt)
            k((blocks,), (256,), (g, *ops, *(dt.type(p) for p in params), out, np.int64(n)))
        return out

    def _kernel_for(self, device_id: int) -> Any:
        k = self._kernels.get(device_id)
        if k is None:
            cp = backend.cupy_module()
            with _lock:
                k = self._kernels.get(device_id)
                if k is None:
                    ins, outs, body = self.kernel(0)
                    with cp.cuda.Device(device_id):
                        k = cp.ElementwiseKernel(ins, outs, body, self.kernel_name(0), preamble=CUDA_PRELUDE)
                    self._kernels[device_id] = k
        return k


_lock = threading.Lock()
# The vectorised backward kernels (Derivative.vector_source): C type -> (vector type, lanes, suffix).
_VECTOR = {"float": ("float4", 4, "f32"), "double": ("double2", 2, "f64")}
_LANES = ("x", "y", "z", "w")
VECTOR_MIN = 1 << 16  # smaller arrays are launch-bound: the ElementwiseKernel is as fast
_VECTOR_MAX_BLOCKS = 8192  # of 256 threads: several waves on any GPU; the loop strides over the rest


_VECTOR_MODULES: dict[tuple[int, str], tuple[Any, frozenset[str]]] = {}


def _vector_function(cp: Any, d: Derivative, device_id: int, ctype: str) -> Any:
    """``d``'s vectorised kernel on GPU ``device_id``: every declared one's vectorised kernel is
    compiled in one module per device and C type (one NVRTC run, not one per primitive); one
    declared after that module was built is compiled on its own."""
    with _lock, cp.cuda.Device(device_id):
        key = (device_id, ctype)
        entry = _VECTOR_MODULES.get(key)
        if entry is None:
            ds = [e for e in DERIVATIVES.values() if e.gpu_kernel]
            code = "".join(e.vector_source(ctype) for e in ds)  # (the prelude is include-guarded)
            entry = _VECTOR_MODULES[key] = (cp.RawModule(code=code), frozenset(e.name for e in ds))
        module, names = entry
        if d.name in names and DERIVATIVES.get(d.name) is d:
            return module.get_function(d.vector_name(ctype))
        return cp.RawKernel(d.vector_source(ctype), d.vector_name(ctype))


def _vectorisable(g: Any, ops: list) -> bool:
    """Every array of ``g``'s shape, C-contiguous and 16-byte aligned, and large enough to pay."""
    if g.size < VECTOR_MIN:
        return False
    for a in (g, *ops):
        if a.shape != g.shape or not a.flags.c_contiguous or a.data.ptr % 16:
            return False
    return True


KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def launch_dtype(dt: np.dtype) -> np.dtype | None:
    """The dtype a kernel runs in for data of dtype ``dt`` (float16 in float32); None: no kernel."""
    if dt in KERNEL_DTYPES:
        return dt
    if dt == np.float16:
        return np.dtype(np.float32)
    return None


DERIVATIVES: dict[str, Derivative] = {}


def derivative(name: str, grads: Callable[..., Any], params: tuple[str, ...] = ()) -> Derivative:
    """Declare elementwise primitive ``name``'s derivative; return what it generates.

    ``grads`` is a function whose parameters name the inputs, then ``out`` and
    ``g`` (both optional), then ``params``; it returns each input's cotangent
    expression (a tuple for several inputs; None for an input that has none).

    >>> d = derivative("demo_cube", lambda x, g: g * (3 * x * x))
    >>> d.save, d.save_out, d.python(0)
    (True, False, 'g * (3 * a0 * a0)')
    >>> del DERIVATIVES["demo_cube"]
    """
    if name in DERIVATIVES:
        raise ValueError(f"derivative {name!r} is already declared")
    argnames = list(inspect.signature(grads).parameters)
    inputs = tuple(n for n in argnames if n not in ("out", "g") and n not in params)
    env = {n: var(n) for n in argnames if n not in params} | {p: param(p) for p in params}
    res = grads(**env)
    res = res if isinstance(res, tuple) else (res,)
    if len(res) != len(inputs):
        raise ValueError(f"derivative {name!r}: {len(res)} cotangents for {len(inputs)} inputs {inputs}")
    d = Derivative(name, inputs, tuple(None if r is None else lift(r) for r in res), tuple(params))
    DERIVATIVES[name] = d
    return d
