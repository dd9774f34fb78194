"""``stop_gradient`` and ``custom_gradient``: where a user decides what the tape sees.

``custom_gradient`` records one node whose VJP is the user's ``grad_fn``; the function's own
ops run hidden from the tapes (a ``"custom"`` entry on the observer stack), and the
variables it reads are collected so that ``grad_fn(..., variables=...)`` can return their
gradients. ``stop_gradient`` marks the cut for ``explain()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..ops import DIFF_NAMESPACE as _DIFF_F
from . import _errors
from . import state as _state
from . import tensor as _tensor_mod
from ._nest import flatten as _flatten
from ._nest import unflatten as _unflatten
from .primitive import Node, Primitive
from .recording import _where, recorder_n
from .state import tls as _tls
from .tensor import FLOAT_DTYPES, Tensor, Variable, _wrap, _wrap_op


def stop_gradient(x: Any) -> Tensor:
    """Return ``x`` as a new tensor through which no gradient flows.

    >>> import gputape as gt
    >>> x = gt.constant(2.0)
    >>> with gt.GradientTape() as t:
    ...     t.watch(x)
    ...     y = x * gt.stop_gradient(x)
    >>> float(t.gradient(y, x))
    2.0
    """
    from .tensor import as_tensor

    x = as_tensor(x)
    res = _wrap_op(x._data)
    obs = _tls.obs
    if obs is not None:
        tapes = obs.tapes
        if tapes:
            where = None
            for tape in tapes:
                if x._id in tape._tensors or x._id in tape._broken:
                    where = where or _where()
                    tape._broken[res._id] = ("stop_gradient", "stop_gradient", where, (x._id,))
                else:
                    tape._edges[res._id] = ("stop_gradient", (x._id,))
    return res


def _custom_fwd(xp: Any, *arrays: Any, **params: Any) -> Any:  # pragma: no cover - never run
    raise RuntimeError("custom_gradient nodes are recorded directly")


# the user's grad_fn answers for complex values (TensorFlow's convention, as every VJP here)
_CUSTOM = Primitive("custom_gradient", _custom_fwd, nout=1, batchable=False, complex="direct")


def _custom_vjp(F: Any, g: Any, needs: list[bool], nb: int, node: Node, *saved: Any) -> list:
    info = node.params
    grad_fn = info["grad_fn"]
    variables = info["variables"]
    gs = g if isinstance(g, list) else [g]
    diff = F is _DIFF_F
    dys = []
    for x, (shape, dtype) in zip(gs, info["out_meta"]):
        if x is None:  # an output the target does not use: its cotangent is zero
            x = F.zeros(shape, dtype)
        dys.append(x if diff else _wrap(x))
    if variables:
        res = grad_fn(*dys, variables=variables)
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise ValueError(
                f"custom_gradient {info['name']!r}: grad_fn uses variables, so it must return "
                "(input_gradients, variable_gradients)"
            )
        input_grads, var_grads = res
        var_grads = list(var_grads) if isinstance(var_grads, (list, tuple)) else [var_grads]
        if len(var_grads) != len(variables):
            raise ValueError(
                f"custom_gradient {info['name']!r}: grad_fn returned {len(var_grads)} variable gradients "
                f"for {len(variables)} variables; return one per variable"
            )
    else:
        input_grads = grad_fn(*dys)
        var_grads = []
    flat_in = list(input_grads) if isinstance(input_grads, (list, tuple)) else [input_grads]
    if len(flat_in) != info["nargs"]:
        raise ValueError(
            f"custom_gradient {info['name']!r}: grad_fn returned {len(flat_in)} gradients for "
            f"{info['nargs']} inputs; return exactly one gradient (or None) per input"
        )
    out = []
    for i, x in enumerate(flat_in + var_grads):
        if x is not None and not isinstance(x, Tensor):
            x = _wrap(_custom_grad_array(x, i, info))
        if x is None:
            out.append(None)
        else:
            out.append(x if diff else x._data)
    return out


def _custom_grad_array(x: Any, i: int, info: dict) -> Any:
    """A gradient grad_fn returned as a number, list or array; anything else is the user's bug, named.

    Python numbers and lists take the dtype of the function's (first) output, so that a
    float64 function's ``lambda dy: 2.0`` is a float64 gradient, not float32.
    """
    out_dtype = info["out_meta"][0][1]
    dtype = out_dtype if not hasattr(x, "dtype") and out_dtype in FLOAT_DTYPES else None
    try:
        return _tensor_mod._to_array(x, dtype)
    except (TypeError, ValueError) as exc:
        what = f"input {i}" if i < info["nargs"] else f"variable {info['variables'][i - info['nargs']].name!r}"
        raise TypeError(
            f"custom_gradient {info['name']!r}: grad_fn returned {_errors.describe(x)} as the gradient for {what}; "
            "return a tensor (or an array, a number, or None for no gradient) per input"
        ) from exc


_CUSTOM.vjp = _custom_vjp
_CUSTOM.record = recorder_n(_CUSTOM)


def custom_gradient(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator to define a function's gradient yourself (``tf.custom_gradient``).

    ``f(*args)`` returns ``(y, grad_fn)``; ``grad_fn(*dys)`` returns one gradient
    per argument of ``f``. If ``f`` reads Variables other than its arguments, ``grad_fn``
    must accept ``variables=None`` and return ``(input_grads, variable_grads)``; a Variable
    passed as an argument is an input, as in TensorFlow.

    >>> import gputape as gt
    >>> @gt.custom_gradient
    ... def clip_grad_identity(x):
    ...     def grad(dy):
    ...         return gt.clip(dy, -1.0, 1.0)
    ...     return gt.identity(x), grad
    >>> x = gt.constant([1.0, 2.0])
    >>> with gt.GradientTape() as t:
    ...     t.watch(x); y = gt.sum(clip_grad_identity(x) * 10.0)
    >>> t.gradient(y, x).numpy().tolist()
    [1.0, 1.0]
    """
    name = getattr(f, "__name__", "custom_gradient")

    def wrapped(*args: Any) -> Any:
        from .tensor import as_tensor

        forward = _CustomForward()
        try:
            with forward:  # the tapes do not record f's own ops; its variable reads are collected
                result, grad_fn = _custom_forward(f, args)
        finally:
            if forward._undo is not None:  # a Ctrl-C on __exit__'s first bytecode skipped its pop
                _state.pop(forward)
        variables = list(forward.watched.values())
        obs = _tls.obs
        for w in obs.watchers if obs is not None else ():  # an enclosing custom_gradient sees these reads too
            for v in variables:
                w.setdefault(v._id, v)
        if variables:
            # TensorFlow's rule: a Variable passed as an argument is an input (grad_fn returns its
            # gradient among the inputs'); only variables read from elsewhere are `variables`.
            arg_ids = {id(a) for a in args if type(a) is Variable}
            if arg_ids:
                variables = [v for v in variables if id(v) not in arg_ids]
        if variables:
            try:
                sig = inspect.signature(grad_fn)
                takes = "variables" in sig.parameters or any(
                    p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()
                )
            except (TypeError, ValueError):
                takes = True
            if not takes:
                raise TypeError(
                    f"custom_gradient {name!r}: the function reads variables "
                    f"{[v.name for v in variables]}, so grad_fn must accept a keyword argument "
                    "'variables' and return (input_gradients, variable_gradients)"
                )
        flat_r, r_spec = _flatten(result)
        outs = [_wrap_op(as_tensor(r)._data) for r in flat_r]  # op outputs: even ids (explain)
        inputs = [a if isinstance(a, Tensor) else None for a in args]
        tensor_args = tuple(a if a is not None else 0.0 for a in inputs) + tuple(variables)
        params = {
            "grad_fn": grad_fn,
            "variables": variables,
            "nargs": len(args),
            "name": name,
            "out_meta": [(o.shape, o.dtype) for o in outs],
        }
        if obs is not None and obs.tapes:
            for tape in obs.tapes:
                if tape._auto:
                    for v in variables:
                        if v._trainable:
                            tape._watch_variable(v)
            prim = _CUSTOM if len(outs) == 1 else _custom_multi(len(outs))
            prim.record(obs, tensor_args, params, outs[0] if len(outs) == 1 else outs, None)
        return _unflatten(r_spec, outs)

    wrapped.__name__ = name
    wrapped.__doc__ = f.__doc__
    wrapped.__wrapped__ = f  # type: ignore[attr-defined]
    return wrapped


def _custom_forward(f: Callable[..., Any], args: tuple) -> Any:
    """A ``custom_gradient`` function's forward: one call, which ``gt.profiler`` times as the op."""
    if _state.anywhere and _state.profiler is not None:
        return _state.profiler.call(f"custom_gradient:{getattr(f, '__name__', 'custom_gradient')}", "forward", f, args)
    return f(*args)


_custom_multis: dict[int, Primitive] = {}


def _custom_multi(n: int) -> Primitive:
    if n not in _custom_multis:
        p = Primitive(f"custom_gradient[{n}]", _custom_fwd, nout=n, batchable=False, complex="direct")
        p.vjp = _custom_vjp
        p.record = recorder_n(p)
        _custom_multis[n] = p
    return _custom_multis[n]


class _CustomForward(_state.Scope):
    """A ``custom_gradient`` forward on the observer stack: hides the tapes, collects variable reads."""

    observes = "custom"
    _guarded = False  # custom_gradient guards its pop with try/finally (and runs per call)

    def __init__(self) -> None:
        self.watched: dict[int, Variable] = {}
