"""The primitive registry: one declaration per primitive, and the node it records.

A :class:`Primitive` pairs a forward on raw arrays with its VJP and declares which values the
VJP needs (``save``/``save_out``); :func:`primitive` registers one in :data:`REGISTRY`. The
elementwise primitives declare their derivative as one expression (:mod:`gputape.core.expr`), from
which the VJP, the CPU replay's inline text, the CUDA kernel body and the numpy reference are
generated. A :class:`Node` is one recorded application: what the sweep needs to call the VJP,
and nothing else. Complex values follow TensorFlow's convention; each primitive declares what
it does with them (``complex=``: holomorphic, direct, real or refused), and the end of the
module runs that.

This layer sits above :mod:`gputape.core.tensor` and below the dispatch, the sweep and the ops.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .tensor import FLOAT_DTYPES

_NOPARAMS: dict[str, Any] = {}
_NOSAVED: list = []  # shared by nodes that save nothing; never mutated


class Primitive:
    """A differentiable operation: forward on raw arrays, VJP beside it.

    ``fwd(xp, *arrays, **params)`` computes the output with array module
    ``xp``. ``vjp(F, g, needs, nb, node, *saved)`` returns one cotangent per
    positional input (``None`` where ``needs[i]`` is False or the input is not
    differentiable). ``saved`` holds the inputs listed in ``save`` (``True``
    for all, a ``slice`` for those from a position on) followed by the output when
    ``save_out`` is set. ``g`` may carry
    ``nb`` extra leading (batch) dimensions; VJPs use negative axes so that
    they stay correct under them.

    ``fresh_cotangents`` (set by :meth:`defvjp`) declares, per input, that the VJP on host
    (numpy) arrays of the raw namespace returns for it memory the call allocated: never one
    of its arguments or a view of one, never shared with another result, and that the call
    keeps no reference to its arguments or results. Only a declared cotangent may be
    *donated* (gt.function's replay lets an optimizer write its update into a gradient
    that nothing else can see); the default, ``()``, declares nothing, so an undeclared
    VJP (a pass-through ``g``, a reshape or transpose back, a custom gradient) never is.
    ``fresh_forward`` declares the same of the forward's result (a numpy ufunc's output:
    never a view of an input); default False.

    ``complex`` declares, with no default, what the primitive does with complex values on a
    tape (the module's end says how each is run): ``"holomorphic"`` (its VJP is written as
    ``g * f'(z)`` with analytic expressions), ``"direct"`` (its VJP is complex-correct as
    written, or ``complex_vjp`` replaces it for complex nodes), ``"real"`` (its forward
    refuses complex input, as numpy's does) or ``refused(why)`` (the forward runs, a tape
    refuses, saying why and what to use).
    """

    __slots__ = (
        "batchable",
        "call",
        "complex",
        "complex_vjp",
        "cpu",
        "doc",
        "fresh_cotangents",
        "fresh_forward",
        "fwd",
        "name",
        "nout",
        "public",
        "record",
        "save",
        "save_out",
        "vjp",
    )

    def __init__(
        self,
        name: str,
        fwd: Callable[..., Any],
        save: bool | tuple[int, ...] | slice = (),
        save_out: bool = False,
        nout: int = 1,
        batchable: bool = True,
        *,
        complex: str,  # noqa: A002 (what it does with complex values; the builtin is unused here)
    ) -> None:
        if complex not in COMPLEX_STATUSES and not complex.startswith(_REFUSED):
            raise ValueError(
                f"primitive {name!r}: complex={complex!r} is not a complex status; declare one of "
                f"{', '.join(COMPLEX_STATUSES)} or refused('why, and what to use')"
            )
        self.name = name
        self.complex = complex
        self.complex_vjp: Callable[..., Any] | None = None  # a "direct" primitive's VJP for complex nodes
        self.fwd = fwd
        self.vjp: Callable[..., Any] | None = None
        self.fresh_cotangents: tuple[bool, ...] = ()  # declared with the VJP (defvjp); none by default
        self.fresh_forward = False  # the forward's result is memory it allocated (declared where so)
        self.save = save
        self.save_out = save_out
        self.nout = nout
        self.batchable = batchable
        self.doc = fwd.__doc__
        # Optional C-level callable equal to fwd for numpy inputs (np.tanh,
        # operator.mul): saves a Python frame per op on the CPU fast paths.
        self.cpu: Callable[..., Any] | None = None
        # ``call(args, params)``: the dispatch entry (gputape.core.dispatch sets it when it registers
        # the primitive; this layer sits below the dispatch)
        self.call: Callable[[tuple, dict], Any] = _undispatched
        # ``record(obs, args, params, res, datas)``: the recorder generated for this primitive
        # (gputape.core.recording.recorder_n, set with ``call``); None: not dispatched
        self.record: Callable[..., None] | None = None
        # the public function (gt.nn.sigmoid), for VJPs that call the primitive by name on tensors
        # (``F.sigmoid`` in gputape.ops' namespace); None: the primitive itself, through ``call``
        self.public: Callable[..., Any] | None = None

    def defvjp(self, vjp: Callable[..., Any] | None = None, *, fresh: tuple[bool, ...] = ()) -> Any:
        """Register ``vjp`` as this primitive's vector-Jacobian product (a decorator without ``vjp``).

        ``fresh``: per input, whether its cotangent is always memory the VJP allocated
        (the class docstring's ``fresh_cotangents``); leave it empty unless every branch of
        the VJP allocates that result (a ufunc's or matmul's output, or a view of one it made).
        """
        if vjp is None:
            return lambda f: self.defvjp(f, fresh=fresh)
        self.vjp = vjp
        self.fresh_cotangents = tuple(fresh)
        return vjp

    def __call__(self, *args: Any, **params: Any) -> Any:
        return self.call(args, params)

    def __repr__(self) -> str:
        return f"<gt primitive {self.name}>"


def _undispatched(args: tuple, params: dict) -> Any:
    raise RuntimeError(
        "this primitive was made without gputape.core.dispatch; call gputape.core.dispatch.apply(prim, args, params)"
    )


REGISTRY: dict[str, Primitive] = {}


class Node:
    """One recorded op: what the sweep needs to call its VJP, and nothing else.

    ``ids``/``shapes`` describe the positional inputs (id 0 for constants),
    ``casts`` the dtype to cast each input's cotangent back to when the op
    promoted it (None when nothing was promoted), ``saved`` the raw residual
    arrays the primitive declared, ``out`` the output id (a tuple of ids for
    multi-output ops). Tapes hold nodes; a node's residuals are freed when the
    last tape that recorded it drops it. ``meta`` is the output's ``(shape, dtype)``
    (a tuple of those for multi-output ops), for ``tape.summary()``: two references,
    known when the op ran. ``info`` (user file:line, output shape and dtype) is None
    unless locations are recorded (``gt.debug``).
    """

    __slots__ = ("casts", "ids", "info", "meta", "out", "params", "prim", "saved", "shapes")

    def __repr__(self) -> str:
        return f"<Node {self.prim.name} in={self.shapes} out={self.out}>"

    def saved_ids(self) -> tuple[int, ...]:
        """The tensor id behind each saved residual (0 for constants)."""
        s = self.prim.save
        if s is True or type(s) is slice:
            sids = self.ids if s is True else self.ids[s]
        else:
            sids = tuple(self.ids[i] for i in s) if s else ()
        if self.prim.save_out:
            sids = sids + (self.out if type(self.out) is tuple else (self.out,))
        return sids

    def swept(self) -> Swept:
        """This node without its residuals: what a tape keeps once the node's VJP ran."""
        return Swept((self.prim, self.ids, self.out, self.info))


class Swept(tuple):
    """A node whose residuals were freed (its VJP ran on a non-persistent tape): the op, its
    wiring and its location, which ``explain()``, ``summary()`` and ``to_dot()`` still read.

    A tuple underneath, read by name. The backward leaves the plain tuple ``(prim, ids, out,
    info)`` in the node's place (a class call per node cost the chain's sweep 17 us of 190);
    :func:`records` makes those Swept for the readers, once.
    """

    __slots__ = ()
    prim = property(operator.itemgetter(0), doc="the primitive")
    ids = property(operator.itemgetter(1), doc="the input ids (0 for constants)")
    out = property(operator.itemgetter(2), doc="the output id (a tuple of ids for multi-output ops)")
    info = property(operator.itemgetter(3), doc="(file:line, shape, dtype) or None")

    def __repr__(self) -> str:
        return f"<Swept {self.prim.name} out={self.out}>"


def records(nodes: list) -> list:
    """``nodes`` (a tape's list) with each plain ``(prim, ids, out, info)`` tuple the backward left
    replaced, in place, by its :class:`Swept` record; Nodes and Swept records stay as they are.

    >>> import gputape as gt
    >>> n = records([(gt.REGISTRY["exp"], (1,), 2, None)])[0]
    >>> type(n).__name__, n.prim.name, n.out
    ('Swept', 'exp', 2)
    """
    for p, n in enumerate(nodes):
        if type(n) is tuple:
            nodes[p] = Swept(n)
    return nodes


# -- complex values on the tape --------------------------------------------------
# gputape follows TensorFlow's convention (README, "Complex numbers"): the gradient of a real
# loss L with respect to z = x + iy is dL/dx + i dL/dy, and a VJP maps the cotangent g of
# f(z) to g * conj(f'(z)) where f is holomorphic. The real VJPs of the "holomorphic"
# primitives are written as g * f'(z) with analytic expressions, so conj(vjp(conj(g))) is that
# complex VJP: a node with complex values runs a clone of its primitive whose VJP is wrapped
# so (the float path is untouched, and gt.function, which inlines only the declared VJPs,
# calls the wrapped one as it is). "direct" primitives' VJPs are complex-correct as written
# (TensorFlow's _RealGrad, _AbsGrad, ...) or replaced by their ``complex_vjp``; a "real"
# primitive's forward refuses complex input; a refused one raises on a tape, since its VJP
# would be silently wrong, and says why and what to use.
COMPLEX_STATUSES = ("holomorphic", "direct", "real")
_REFUSED = "refused: "


def refused(why: str) -> str:
    """The ``complex`` status of a primitive whose forward takes complex values but whose gradient
    does not exist for them or is not implemented: ``why`` says which, and what to use instead.

    >>> refused("no order; take gt.abs(z) first")
    'refused: no order; take gt.abs(z) first'
    """
    return _REFUSED + why


# complex max, min, clip, maximum...: numpy orders complex numbers lexicographically, which is
# no function of z a gradient could follow; PyTorch refuses complex max and min for this reason
UNORDERED = refused(
    "complex numbers have no order, so this op has no gradient for them (PyTorch refuses complex max "
    "and min too); apply it to a real quantity, e.g. gt.abs(z) or gt.real(z)"
)

_COMPLEX_PRIMS: dict[Primitive, Primitive] = {}
DIFF_DTYPES = FLOAT_DTYPES | {np.dtype(np.complex64), np.dtype(np.complex128)}


def _complex_node(node: Node, odt: Any) -> None:
    """Give a node that has complex values the complex form of its primitive, or refuse it."""
    if odt.kind != "c":
        for c in node.casts:  # (a loop, not any() over a generator: every mixed-dtype op comes here)
            if c is not None and c.kind == "c":
                break
        else:
            return  # real values of several dtypes (float32 with float64, integer index operands)
    prim = node.prim
    status = prim.complex
    if status == "real" or status.startswith(_REFUSED):
        why = (
            status[len(_REFUSED) :]
            if status != "real"
            else "it is defined for real values only; take real values first (gt.real, gt.imag, gt.abs)"
        )
        raise TypeError(f"gt.{prim.name}: gradients through complex values ({odt} result) are refused: {why}")
    holomorphic = status == "holomorphic"
    if prim.nout != 1 and not holomorphic:
        return
    c = _COMPLEX_PRIMS.get(prim)
    if c is None:
        c = _COMPLEX_PRIMS[prim] = _complex_prim(prim, holomorphic)
    node.prim = c


def _complex_prim(prim: Primitive, holomorphic: bool) -> Primitive:
    """A clone of ``prim`` whose VJP takes complex cotangents (TensorFlow's convention)."""
    inner = prim.complex_vjp or prim.vjp

    def complex_vjp(F: Any, g: Any, needs: Any, nb: int, node: Node, *saved: Any) -> Any:
        if holomorphic:
            g = F.conj(g)
        out = list(inner(F, g, needs, nb, node, *saved))
        casts = node.casts
        for k, o in enumerate(out):
            if o is None:
                continue
            if holomorphic:
                o = F.conj(o)
            # a real input of a complex result: its gradient is the real part (TensorFlow's Cast rule)
            if casts is not None and casts[k] is not None and casts[k].kind != "c" and np.iscomplexobj(o):
                o = F.real(o)
            out[k] = o
        return out

    c = Primitive(prim.name, prim.fwd, prim.save, prim.save_out, prim.nout, prim.batchable, complex=prim.complex)
    c.vjp = complex_vjp
    c.cpu = prim.cpu
    c.call = prim.call
    c.record = None  # (a complex node's clone is never dispatched: it only runs the VJP)
    c.public = prim.public
    c.doc = prim.doc
    return c
