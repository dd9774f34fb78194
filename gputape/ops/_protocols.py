"""numpy's protocols on Tensors: ``np.exp(t)``, ``np.sum(t, axis=0)``, ``np.linalg.norm(t)`` run gputape's ops.

The rule, for a numpy function or ufunc that receives a Tensor:

1. gputape has an op of that name (``gputape.ops`` for ``np.X``, ``gt.linalg`` for ``np.linalg.X``):
   it runs, differentiable and on the tape, with numpy's argument names mapped onto the op's
   (``np.sum(a=t, axis=0)``). A numpy argument the op lacks is accepted at its default and
   refused otherwise, by name; ``out=`` is refused unless None (tensors are immutable).
2. The function only reads values and its result carries no gradient by nature (comparisons
   such as ``allclose``, indices and counts, text, files, memory queries; ``_READS_VALUES``),
   or reads only metadata (``shape``, ``ndim``, ``result_type``; ``_METADATA``): it runs on the
   values as numpy would (``np.testing`` converts with ``np.asarray`` first and so works too).
3. Anything else raises a ``TypeError`` naming the function: computing it on the values would
   leave the tape without a word. Call it on ``t.numpy()`` to do that knowingly.

The table is generated from the op library's names (:func:`dispatch_table`), not kept by hand;
two names whose meaning differs from numpy's are left out or redirected (``_NOT_NUMPYS``,
``_REDIRECT``).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from ..core.tensor import Tensor, as_tensor
from ..devices import backend

_P = inspect.Parameter
_NOVALUE = np._NoValue

# Same name, another meaning: gt.identity is tf.identity (a copy on the tape), np.identity an identity matrix.
_NOT_NUMPYS = frozenset({"identity"})
# np.round takes ``decimals``, which gt.round (the primitive, numpy's rint) does not; gt.around does.
_REDIRECT = {"round": "around"}
# Arguments that change how numpy computes, never what: accepted whatever their value.
_HINTS = frozenset({"optimize", "like"})

# Results without a gradient by nature: they may read the values.
_READS_VALUES = frozenset(
    "allclose isclose array_equal array_equiv count_nonzero nonzero flatnonzero argwhere "
    "array2string array_repr array_str save savez savez_compressed savetxt shares_memory may_share_memory".split()
)
# Metadata only: the tensor itself answers (``t.shape``); no value is read, none is copied off a GPU.
_METADATA = frozenset("shape ndim size iscomplexobj isrealobj".split())
_DTYPES_ONLY = frozenset({"result_type"})  # numpy 2 promotes arrays by dtype alone


def _display(func: Any) -> str:
    mod = getattr(func, "__module__", None) or "numpy"
    return f"{mod.replace('numpy', 'np', 1)}.{func.__name__}"


class _Route:
    """How numpy's arguments of one function reach the gputape op of the same name."""

    __slots__ = ("gt", "gt_params", "name", "np_params", "np_sig", "required", "to")

    def __init__(self, np_func: Any, gt_func: Any) -> None:
        self.name = _display(np_func)
        self.gt = gt_func
        self.np_sig = inspect.signature(np_func)
        gsig = inspect.signature(gt_func)
        self.np_params = self.np_sig.parameters
        self.gt_params = gsig.parameters
        gpos = [p for p in self.gt_params.values() if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
        gstar = any(p.kind is _P.VAR_POSITIONAL for p in self.gt_params.values())
        kwonly = [q for q in self.gt_params.values() if q.kind is _P.KEYWORD_ONLY]
        self.required = [p.name for p in gpos + kwonly if p.default is _P.empty]
        # numpy's name -> gputape's parameter: by name first, then by position (numpy's ``a`` is gputape's ``x``)
        self.to: dict[str, Any] = {}
        for i, p in enumerate(self.np_params.values()):
            q = self.gt_params.get(p.name)
            if p.kind is _P.VAR_POSITIONAL:
                self.to[p.name] = "*" if gstar else None
            elif p.kind is _P.VAR_KEYWORD:
                self.to[p.name] = "**"
            elif q is not None and q.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD):
                self.to[p.name] = q
            elif p.kind is not _P.KEYWORD_ONLY and i < len(gpos) and gpos[i].name not in self.np_params:
                self.to[p.name] = gpos[i]
            else:
                self.to[p.name] = None

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        try:
            bound = self.np_sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None
        pos: dict[int, Any] = {}
        kw: dict[str, Any] = {}
        star: tuple = ()
        order = list(self.gt_params)
        for name, value in bound.arguments.items():
            q = self.to[name]
            if q == "*":
                star = value
            elif q == "**":
                for k, v in value.items():
                    if k in self.gt_params:
                        kw[k] = v
                    elif k not in _HINTS:
                        raise self._unsupported(k)
            elif q is None:
                if name in _HINTS or _is_default(value, self.np_params[name].default):
                    continue
                if name == "out":
                    raise TypeError(
                        f"{self.name}: out= is not supported on gt.Tensor (tensors are immutable); "
                        "use the returned tensor instead"
                    )
                raise self._unsupported(name)
            elif q.kind is _P.POSITIONAL_ONLY:
                pos[order.index(q.name)] = value
            else:
                kw[q.name] = value
        missing = [n for n in self.required if n not in kw and order.index(n) not in pos]
        if missing and not star:
            raise TypeError(
                f"{self.name} on a gt.Tensor runs gt.{self.gt.__name__}, which needs "
                f"{', '.join(repr(m) for m in missing)}; pass them (numpy's other forms of this call are not supported)"
            )
        return self.gt(*[pos[i] for i in sorted(pos)], *star, **kw)

    def _unsupported(self, arg: str) -> TypeError:
        return TypeError(
            f"{self.name}(..., {arg}=...) on a gt.Tensor: gt.{self.gt.__name__} has no {arg!r} argument; "
            f"leave it at its default, or call {self.name} on t.numpy() to compute without the tape (no gradient)"
        )


def _is_default(value: Any, default: Any) -> bool:
    if value is default:
        return True
    try:
        return type(value) is type(default) and isinstance(value, (bool, int, float, str)) and value == default
    except Exception:  # pragma: no cover - a comparison that raises is no default
        return False


_OPS: list[Any] = []  # gputape.ops, handed over by install() when it has defined every op


def install(ops: Any) -> None:
    """Give the protocols the finished ``gputape.ops`` namespace (called once, at the end of its import).

    The tables are built from it on first use; this module sits below it and does not import it.
    """
    _OPS[:] = [ops]


def _namespace() -> Any:
    if not _OPS:
        raise RuntimeError("gputape.ops._protocols: used before gputape.ops finished importing")
    return _OPS[0]


def _namespaces() -> list[tuple[Any, Any]]:
    """(numpy namespace, gputape namespace) pairs: ``np.X`` -> ``gputape.ops.X``, ``np.linalg.X`` -> ``gt.linalg.X``."""
    import importlib

    ops = _namespace()
    pairs = [(np, ops)]
    for sub in ("linalg", "fft"):
        try:
            mod = importlib.import_module(f"gputape.{sub}")
        except ImportError:
            continue
        pairs.append((getattr(np, sub), mod))
    return pairs


def _public(ns: Any) -> list[str]:
    names = getattr(ns, "__all__", None)
    return sorted(names if names is not None else (n for n in dir(ns) if not n.startswith("_")))


_TABLE: dict[Any, Any] | None = None
_UFUNCS: dict[Any, Any] | None = None


def dispatch_table() -> dict[Any, Any]:
    """Every numpy function a Tensor dispatches to a gputape op: ``{np function: gputape function}``.

    >>> import numpy as np, gputape as gt
    >>> from gputape.ops._protocols import dispatch_table
    >>> dispatch_table()[np.sum] is gt.sum, dispatch_table()[np.linalg.inv] is gt.linalg.inv
    (True, True)
    """
    return {f: r.gt for f, r in _routes().items()}


def _routes() -> dict[Any, _Route]:
    global _TABLE
    if _TABLE is None:
        table = {}
        for np_ns, gt_ns in _namespaces():
            for name in _public(gt_ns):
                f = getattr(np_ns, name, None)
                g = getattr(gt_ns, _REDIRECT.get(name, name), None)
                # (a decorated entry point, e.g. _errors.forwarder's, wraps its function)
                gf = inspect.unwrap(g) if g is not None else g
                if name in _NOT_NUMPYS or not callable(f) or isinstance(f, np.ufunc) or not inspect.isfunction(gf):
                    continue
                if not hasattr(f, "_implementation") and not type(f).__name__.endswith("Dispatcher"):
                    continue  # not an array function: numpy never hands it to a Tensor
                try:
                    table[f] = _Route(f, g)
                except (TypeError, ValueError):  # pragma: no cover - a signature inspect cannot read
                    continue
        _TABLE = table
    return _TABLE


def ufunc_table() -> dict[Any, Any]:
    """Every numpy ufunc with a gputape op of its name: ``{np.exp: gt.exp, np.absolute: gt.abs, ...}``.

    >>> import numpy as np, gputape as gt
    >>> from gputape.ops._protocols import ufunc_table
    >>> ufunc_table()[np.exp] is gt.exp
    True
    """
    global _UFUNCS
    if _UFUNCS is None:
        ops = _namespace()
        table = {}
        for name in _public(ops):
            u = getattr(np, name, None)
            if isinstance(u, np.ufunc) and callable(getattr(ops, name)):
                table.setdefault(u, getattr(ops, u.__name__, getattr(ops, name)))
        _UFUNCS = table
    return _UFUNCS


def _ours(types: Any) -> bool:
    """Only tensors, numpy arrays and device (cupy) arrays: other libraries' objects get NotImplemented."""
    return all(issubclass(t, (Tensor, np.ndarray)) or t.__module__.startswith("cupy") for t in types)


def array_function(self: Tensor, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    """``Tensor.__array_function__``: see the module docstring for the rule."""
    if not _ours(types):
        return NotImplemented
    route = _routes().get(func)
    if route is not None:
        return route(args, kwargs)
    name = func.__name__
    impl = getattr(func, "_implementation", func)
    if name in _METADATA and func is getattr(np, name, None):
        return impl(*args, **kwargs)
    if name in _DTYPES_ONLY and func is getattr(np, name, None):
        return func(*_map(lambda t: t.dtype, args), **kwargs)
    if name in _READS_VALUES and func is getattr(np, name, None):
        label = _display(func)
        return func(*_map(lambda t: _host(t, label), args), **_map(lambda t: _host(t, label), kwargs))
    ops = _namespace()
    # np.ones(2, like=t): a creation function numpy and gputape both name (np.linalg.cond is not gt.cond)
    if callable(getattr(ops, name, None)) and not name.startswith("_") and func is getattr(np, name, None):
        raise TypeError(f"{_display(func)}(..., like=tensor) is not supported on gt.Tensor: call gt.{name} instead")
    raise TypeError(
        f"{_display(func)} is not supported on gt.Tensor: gputape has no op of that name, and computing it on "
        "the values would silently leave the tape (no gradient). Call it on t.numpy() to compute on plain "
        "arrays, knowingly without gradient, or build it from gputape's ops (see the README's numpy surface)"
    )


def _host(t: Tensor, label: str) -> Any:
    if backend.xp_of(t._data) is not np:
        raise TypeError(f"{label}: the tensor is on {t.device}; read its values with t.numpy() first")
    return t.__array__()  # notes the export, as np.asarray(t) does


def _map(fn: Any, obj: Any) -> Any:
    """``fn`` applied to each Tensor in nested lists, tuples and dicts (numpy's sequence arguments)."""
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(fn, o) for o in obj) if type(obj) in (list, tuple) else obj
    if isinstance(obj, dict):
        return {k: _map(fn, v) for k, v in obj.items()}
    return obj


# A ufunc call's keyword arguments at the values that change nothing.
_UFUNC_DEFAULTS = {"where": True, "casting": "same_kind", "order": "K", "dtype": None, "subok": True, "signature": None}
# ufunc methods that are a gputape reduction or scan: (ufunc name, method) -> (op name, numpy's default axis)
_UFUNC_METHODS = {
    ("add", "reduce"): "sum",
    ("multiply", "reduce"): "prod",
    ("maximum", "reduce"): "max",
    ("minimum", "reduce"): "min",
    ("add", "accumulate"): "cumsum",
    ("multiply", "accumulate"): "cumprod",
}


def array_ufunc(self: Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """``Tensor.__array_ufunc__``: ``np.exp(t)`` and ``ndarray + t`` run gputape's op; ``np.add.reduce(t)``
    its reduction; a ufunc gputape lacks raises a TypeError naming it (never a silent detached ndarray)."""
    label = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    out = kwargs.pop("out", None)
    if out is not None and any(o is not None for o in (out if isinstance(out, tuple) else (out,))):
        raise TypeError(f"{label}: out= is not supported on gt.Tensor (tensors are immutable); use the result")
    for k, v in kwargs.items():
        if k not in _UFUNC_DEFAULTS or not (v is _UFUNC_DEFAULTS[k] or _is_default(v, _UFUNC_DEFAULTS[k])):
            if not (method in ("reduce", "accumulate") and k in ("axis", "keepdims")):
                raise TypeError(
                    f"{label}(..., {k}=...) on a gt.Tensor is not supported; leave it at its default, or call "
                    f"{label} on t.numpy() to compute without the tape (no gradient)"
                )
    ops = _namespace()
    if method == "__call__":
        op = ufunc_table().get(ufunc)
        if op is not None:
            return op(*inputs)
    elif method == "outer" and ufunc in ufunc_table() and len(inputs) == 2:
        a, b = (as_tensor(i) for i in inputs)
        return ufunc_table()[ufunc](ops.reshape(a, a.shape + (1,) * b.ndim), b)
    elif (ufunc.__name__, method) in _UFUNC_METHODS and len(inputs) == 1:
        op = getattr(ops, _UFUNC_METHODS[ufunc.__name__, method])
        axis = kwargs.get("axis", 0)  # a ufunc method's default axis is 0, not None
        return op(inputs[0], axis, kwargs["keepdims"]) if kwargs.get("keepdims") else op(inputs[0], axis)
    raise TypeError(
        f"{label} is not supported on gt.Tensor: gputape has no op for it, and computing it on the values "
        "would silently leave the tape (no gradient). Call it on t.numpy() to compute on plain arrays, "
        "knowingly without gradient, or build it from gputape's ops"
    )
