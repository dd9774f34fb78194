"""TensorFlow's explicit control flow: ``cond``, ``case``, ``switch_case``, ``while_loop``,
``map_fn``, ``scan``, ``foldl``, ``foldr``, ``vectorized_map`` and ``TensorArray``.

Each runs eagerly, as TensorFlow does outside ``tf.function``: ``cond`` reads the predicate
and calls one branch, ``while_loop`` is a Python loop, ``map_fn``/``scan``/the folds loop
over the static first axis and ``stack`` the results. Nothing here is a primitive: every
value comes from the recorded ops the branch or body calls, so every tape (persistent,
nested, ``jacobian``, ``batch_jacobian``, any order) differentiates through them with the
ops' own gradients, including gradients w.r.t. variables and tensors a body captures.

Checks follow TensorFlow's split between eager execution and graph building. Always: the
predicate is a boolean scalar, a loop's variables keep their nested structure, a
``TensorArray``'s reads and writes stay in range and write once. Inside a ``gt.function``
trace (TensorFlow's graph mode) also: each loop variable keeps its dtype and a shape
compatible with its ``shape_invariants`` (its entry shape by default). Two branches of a
``cond`` are not compared: only the taken one runs, so the other's side effects never happen.

>>> import gputape as gt
>>> x = gt.constant(3.0)
>>> float(gt.cond(x > 0, lambda: x * 2, lambda: -x))
6.0
>>> i, s = gt.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s + i), (0, 0.0))
>>> int(i), float(s)
(4, 6.0)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import _nest
from ..core.state import current_trace
from ..core.tensor import Tensor, TensorShape, Variable, as_tensor, constant
from .creation import zeros
from .errors import InvalidArgumentError, OutOfRangeError
from .shape import concatenate, split, squeeze, stack

__all__ = [
    "TensorArray",
    "case",
    "cond",
    "foldl",
    "foldr",
    "map_fn",
    "scan",
    "switch_case",
    "vectorized_map",
    "while_loop",
]



# -- shared helpers -------------------------------------------------------------------------


def _graph() -> bool:
    """Whether a ``gt.function`` trace records this thread: TensorFlow's graph-building checks apply."""
    return current_trace() is not None


def _predicate(pred: Any, where: str) -> bool:
    """The Python truth of a boolean scalar predicate (a Python bool, a bool array or tensor)."""
    if isinstance(pred, (bool, np.bool_)):
        return bool(pred)
    t = pred if isinstance(pred, Tensor) else as_tensor(pred)
    if t.dtype != np.bool_:
        raise TypeError(
            f"{where}: the predicate must be a boolean scalar, got a {t.dtype} tensor of shape {tuple(t.shape)}; "
            "compare it (x > 0) or cast it (tf.cast(x, tf.bool))"
        )
    if t.size != 1:
        raise ValueError(
            f"{where}: the predicate must be a scalar, got a boolean tensor of shape {tuple(t.shape)}; "
            "reduce it to one value first (tf.reduce_all or tf.reduce_any)"
        )
    return bool(t)


def _paths(spec: Any, prefix: str) -> list[str]:
    """The name of each leaf (``loop_vars[1]['h']``) of the structure ``_nest`` described by ``spec``."""
    if spec is None:
        return [prefix]
    kind, _, children = spec
    if kind == "dict":
        return [p for k, sub, _ in children for p in _paths(sub, f"{prefix}[{k!r}]")]
    return [p for i, (sub, _) in enumerate(children) for p in _paths(sub, f"{prefix}[{i}]")]


def _mismatch(a: Any, b: Any) -> str | None:
    """How two ``_nest`` specs differ: None (they do not), ``"type"`` (a container's type) or ``"structure"``."""
    if a == b:
        return None
    if a is None or b is None:
        return "structure"
    (ka, ta, ca), (kb, tb, cb) = a, b
    if ka != kb or len(ca) != len(cb):
        return "structure"
    if ka == "dict":
        if [k for k, _, _ in ca] != [k for k, _, _ in cb]:
            return "structure"
        ca, cb = [s for _, s, _ in ca], [s for _, s, _ in cb]
    else:
        ca, cb = [s for s, _ in ca], [s for s, _ in cb]
    if ta is not tb:
        return "type"
    for sa, sb in zip(ca, cb):
        found = _mismatch(sa, sb)
        if found:
            return found
    return "structure"


def _assert_same_structure(a: Any, b: Any, what: str, first: Any, second: Any) -> None:
    """TensorFlow's ``nest.assert_same_structure``: TypeError for a container's type, ValueError otherwise."""
    found = _mismatch(a, b)
    if found is None:
        return
    text = f"{what}: {first!r} and {second!r} do not have the same nested structure"
    if found == "type":
        raise TypeError(f"{text} (the same containers, of other sequence types: a list is not a tuple)")
    raise ValueError(text)


def _tensor(x: Any) -> Any:
    """A loop's or branch's leaf as TensorFlow returns it: a tensor (a TensorArray stays itself)."""
    if isinstance(x, TensorArray):
        return x
    if isinstance(x, Variable):
        return x.value()
    return as_tensor(x)


def _convert(value: Any, dtype: np.dtype) -> Tensor:
    """``value`` as a tensor, Python numbers and arrays in ``dtype`` where that keeps their values
    (TensorFlow's ``preferred_dtype``); a tensor keeps its own dtype (a mismatch is the caller's error)."""
    if isinstance(value, Tensor):
        return _tensor(value)
    a = np.asarray(value)
    if a.dtype != dtype and a.dtype != object:
        with np.errstate(all="ignore"):
            c = a.astype(dtype)
        if np.array_equal(c, a):
            a = c
    return constant(a)


def _invariant(shape: Any, where: str) -> tuple | None:
    """A shape invariant as a tuple with None for free dimensions; None: any shape (unknown rank)."""
    if shape is None:
        return None
    as_list = getattr(shape, "as_list", None)
    if as_list is not None:
        try:
            shape = as_list()
        except ValueError:  # TensorFlow's TensorShape(None): unknown rank
            return None
    if not isinstance(shape, (list, tuple)) or not all(d is None or isinstance(d, (int, np.integer)) for d in shape):
        raise TypeError(
            f"{where}: a shape invariant must be a tf.TensorShape or a list of ints and None, got {shape!r}"
        )
    return tuple(None if d is None else int(d) for d in shape)


def _compatible(shape: tuple, invariant: tuple | None) -> bool:
    if invariant is None:
        return True
    return len(shape) == len(invariant) and all(i is None or i == s for s, i in zip(shape, invariant))


def _shape_str(shape: tuple | None) -> str:
    return "<unknown>" if shape is None else repr(tuple(shape))


# -- cond, case, switch_case ----------------------------------------------------------------


def cond(
    pred: Any,
    true_fn: Callable[[], Any] | None = None,
    false_fn: Callable[[], Any] | None = None,
    name: str | None = None,
) -> Any:
    """TensorFlow's ``tf.cond``: ``true_fn()`` if the boolean scalar ``pred`` is true, else ``false_fn()``.

    Only the taken branch runs (TensorFlow's eager behaviour), and its result is returned as
    it is, so a tape differentiates through whatever that branch computed.

    >>> import gputape as gt
    >>> x = gt.constant(-2.0)
    >>> with gt.GradientTape() as t:
    ...     t.watch(x)
    ...     y = gt.cond(x > 0, lambda: x * x, lambda: 3.0 * x)
    >>> float(y), float(t.gradient(y, x))
    (-6.0, 3.0)
    """
    if true_fn is None:
        raise TypeError("tf.cond(): 'true_fn' argument required")
    if false_fn is None:
        raise TypeError("tf.cond(): 'false_fn' argument required")
    if not callable(true_fn):
        raise TypeError(f"tf.cond: 'true_fn' must be callable, got {true_fn!r}.")
    if not callable(false_fn):
        raise TypeError(f"tf.cond: 'false_fn' must be callable, got {false_fn!r}.")
    return true_fn() if _predicate(pred, "tf.cond") else false_fn()


def case(
    pred_fn_pairs: Any,
    default: Callable[[], Any] | None = None,
    exclusive: bool = False,
    strict: bool = False,
    name: str = "case",
) -> Any:
    """TensorFlow's ``tf.case``: the result of the first ``fn`` whose ``pred`` is true, else ``default()``.

    ``pred_fn_pairs`` is a list of ``(pred, fn)`` pairs (a dict only with ``exclusive=True``,
    as in TensorFlow's eager mode). Without ``default``, the last pair is the default and one
    predicate must be true; with ``exclusive=True`` at most one may be.

    >>> import gputape as gt
    >>> x = gt.constant(5.0)
    >>> float(gt.case([(x < 0, lambda: -x), (x < 3, lambda: x)], default=lambda: 3.0 + 0 * x))
    3.0
    """
    if not isinstance(pred_fn_pairs, (list, tuple, dict)):
        raise TypeError(f"tf.case: 'pred_fn_pairs' must be a list, tuple, or dict. Received: {type(pred_fn_pairs)}")
    if isinstance(pred_fn_pairs, dict):
        if not exclusive:
            raise ValueError(
                "Unordered dictionaries are not supported for the 'pred_fn_pairs' argument when "
                "`exclusive=False` and eager mode is enabled."
            )
        pred_fn_pairs = list(pred_fn_pairs.items())
    for pair in pred_fn_pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"tf.case: Each entry in 'pred_fn_pairs' must be a 2-tuple. Received {pair}.")
        pred, fn = pair
        if not isinstance(pred, Tensor):
            raise TypeError(
                f"tf.case: pred must be a Tensor, got: {pred!r} "
                "(pred_fn_pairs takes boolean tensors; tf.cond takes Python bools)"
            )
        if pred.dtype != np.bool_:
            raise TypeError(f"tf.case: pred must be Tensor of type bool: got {pred.dtype} in pred_fn_pairs")
        if not callable(fn):
            raise TypeError(f"tf.case: fn for pred {pred!r} must be callable.")
    if default is not None and not callable(default):
        raise TypeError("tf.case: 'default' must be callable.")
    if not pred_fn_pairs:
        if default is None:
            raise ValueError("tf.case: 'pred_fn_pairs' is empty and there is no 'default'")
        return default()
    if exclusive:
        values = [_predicate(p, "tf.case") for p, _ in pred_fn_pairs]
        if sum(values) > 1:
            raise InvalidArgumentError(
                None,
                None,
                f"Input error: exclusive=True: more than 1 conditions evaluated as True: {values} (tf.case)",
            )
    # in order, reading no predicate after the first true one: inside gt.function each read
    # value specialises the trace, so reading fewer keeps the number of traces down
    values = []
    for pred, fn in pred_fn_pairs:
        values.append(_predicate(pred, "tf.case"))
        if values[-1]:
            return fn()
    if default is None:
        raise InvalidArgumentError(
            None, None, f"Input error: None of conditions evaluated as True: {values} (tf.case without a default)"
        )
    return default()


def switch_case(
    branch_index: Any, branch_fns: Any, default: Callable[[], Any] | None = None, name: str = "switch_case"
) -> Any:
    """TensorFlow's ``tf.switch_case``: ``branch_fns[branch_index]()``, or ``default()`` out of range.

    ``branch_fns`` is a list of callables, a dict ``{int: fn}`` or a list of ``(int, fn)``
    pairs with keys ``0..n-1``; without ``default`` the last branch is the default.

    >>> import gputape as gt
    >>> fns = [lambda: gt.constant(10), lambda: gt.constant(20)]
    >>> int(gt.switch_case(gt.constant(1), fns)), int(gt.switch_case(7, fns))
    (20, 20)
    """
    if isinstance(branch_fns, dict):
        pairs = sorted(branch_fns.items())
    elif isinstance(branch_fns, (list, tuple)) and branch_fns and all(isinstance(b, tuple) for b in branch_fns):
        pairs = sorted(branch_fns)
    elif isinstance(branch_fns, (list, tuple)):
        pairs = list(enumerate(branch_fns))
    else:
        raise TypeError(f"tf.switch_case: 'branch_fns' must be a list, tuple, or dict. Received: {type(branch_fns)}")
    if not pairs:
        raise ValueError("tf.switch_case: 'branch_fns' must not be empty")
    if [k for k, _ in pairs] != list(range(len(pairs))):
        raise ValueError(f"tf.switch_case: the branch keys must be 0 to {len(pairs) - 1}, got {[k for k, _ in pairs]}")
    for k, fn in pairs:
        if not callable(fn):
            raise TypeError(f"tf.switch_case: branch_fns[{k}] must be callable, got {fn!r}")
    fns = [fn for _, fn in pairs]
    if isinstance(branch_index, (bool, np.bool_)) or not isinstance(branch_index, (int, np.integer)):
        t = branch_index if isinstance(branch_index, Tensor) else as_tensor(branch_index)
        if t.dtype.kind not in "iu":
            raise TypeError(
                f"tf.switch_case: branch_index must be an integer scalar (int32 or int64), got {t.dtype}; "
                "cast it with tf.cast(i, tf.int32)"
            )
        if t.ndim != 0:
            raise ValueError(f"tf.switch_case: branch_index must be a scalar, got shape {tuple(t.shape)}")
        branch_index = int(t)
    if 0 <= branch_index < len(fns):
        return fns[branch_index]()
    return (default or fns[-1])()


# -- while_loop -------------------------------------------------------------------------------


def while_loop(
    cond: Callable[..., Any],
    body: Callable[..., Any],
    loop_vars: Any,
    shape_invariants: Any = None,
    parallel_iterations: int = 10,
    back_prop: bool = True,
    swap_memory: bool = False,
    maximum_iterations: Any = None,
    name: str | None = None,
) -> Any:
    """TensorFlow's ``tf.while_loop``: ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``.

    ``loop_vars`` is a tuple or list (each item one argument of ``cond`` and ``body``, nested
    as you like: tuples, lists, dicts, namedtuples) or a single value; ``body`` returns the
    same structure. The loop runs as a Python loop, recorded op by op, so gradients flow to
    the initial values and to anything ``body`` captures. ``maximum_iterations`` stops it
    after that many iterations. Inside ``gt.function`` each variable must keep its dtype and a
    shape compatible with ``shape_invariants`` (tf.TensorShape or lists with None), as
    TensorFlow requires in a graph. ``parallel_iterations``, ``back_prop`` and ``swap_memory``
    are accepted and change nothing.

    >>> import gputape as gt
    >>> x = gt.constant(2.0)
    >>> with gt.GradientTape() as t:
    ...     t.watch(x)
    ...     _, y = gt.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (0, gt.constant(1.0)))
    >>> float(y), float(t.gradient(y, x))  # x**3 and 3 x**2
    (8.0, 12.0)
    """
    if not callable(cond):
        raise TypeError(f"tf.while_loop: 'cond' must be callable, got {cond!r}.")
    if not callable(body):
        raise TypeError(f"tf.while_loop: 'body' must be callable, got {body!r}.")
    if not isinstance(parallel_iterations, int) or parallel_iterations < 1:
        raise TypeError("'parallel_iterations' must be a positive integer.")
    if isinstance(loop_vars, (list, tuple)) and not loop_vars:
        raise ValueError("'loop_vars' must be provided.")
    unpack = isinstance(loop_vars, (list, tuple))
    flat0, spec0 = _nest.flatten(list(loop_vars) if unpack else [loop_vars])
    # variables enter as their values (TensorFlow's convert_variables_to_tensors): a read the tape sees
    flat0 = [v.value() if isinstance(v, Variable) else v for v in flat0]
    args = _nest.unflatten(spec0, flat0)
    limit = None
    if maximum_iterations is not None:
        m = maximum_iterations if isinstance(maximum_iterations, Tensor) else as_tensor(maximum_iterations)
        if m.ndim != 0:
            raise ValueError(f"'maximum_iterations' must be a scalar. Received shape: {tuple(m.shape)}")
        if m.dtype.kind not in "iu":
            raise TypeError(f"tf.while_loop: 'maximum_iterations' must be an integer, got {m.dtype}")
        limit = int(m)
    # spec0 describes [loop_vars] for a single value: its names start inside that list
    names = _paths(spec0, "loop_vars") if unpack else _paths(spec0[2][0][0], "loop_vars")
    check = _graph()
    if check:
        expect = _loop_invariants(flat0, names, spec0, shape_invariants, unpack)
    n = 0
    while (limit is None or n < limit) and _predicate(cond(*args), "tf.while_loop: cond"):
        out = body(*args)
        if not unpack or (len(args) == 1 and not isinstance(out, (list, tuple))):
            out = [out]  # a one-variable loop whose body returns the value itself
        elif not isinstance(out, (list, tuple)):
            raise ValueError(
                f"tf.while_loop: body returned {type(out).__name__}, but there are {len(args)} loop "
                f"variables; return a tuple or list of {len(args)} values, one per loop variable"
            )
        out = list(out)
        flat, spec = _nest.flatten(out)
        _assert_same_structure(
            spec0,
            spec,
            "tf.while_loop: the body changed the loop variables' structure",
            _nest.unflatten(spec0, names),
            out,
        )
        if check:
            _check_iteration(expect, flat, names)
        args = out
        n += 1
    result = _nest.unflatten(spec0, [_tensor(v) for v in _nest.flatten(args)[0]])
    if not unpack:
        return result[0]
    if isinstance(loop_vars, tuple):
        return type(loop_vars)(*result) if hasattr(loop_vars, "_fields") else tuple(result)
    return result


def _loop_invariants(flat0: list, names: list, spec0: Any, shape_invariants: Any, unpack: bool) -> list:
    """Per leaf, ``(dtype, shape, shape invariant)`` a graph-mode loop holds it to (None for Python values)."""
    given = shape_invariants is not None
    if given:
        invariants = _leaves_like(spec0, shape_invariants if unpack else [shape_invariants])
    else:
        invariants = [None] * len(flat0)
    expect: list[tuple[Any, tuple, Any] | None] = []
    for x, inv, nm in zip(flat0, invariants, names):
        if not isinstance(x, Tensor):
            expect.append(None)
            continue
        shape = tuple(x.shape)
        if given:
            inv = _invariant(inv, "tf.while_loop")
            if not _compatible(shape, inv):
                raise ValueError(
                    f"The shape invariant specified for {nm} is not compatible with the initial shape of the "
                    f"loop variable. It enters the loop with shape {_shape_str(shape)}, but the specified shape "
                    f"invariant is {_shape_str(inv)}."
                )
        else:
            inv = shape
        expect.append((x.dtype, shape, inv))
    return expect


def _leaves_like(spec: Any, other: Any) -> list:
    """``other``'s items at the leaf positions of the structure ``spec`` describes (a shape
    invariant is a leaf there, even a list of dimensions)."""
    if spec is None:
        return [other]
    kind, _, children = spec
    if kind == "dict":
        if not isinstance(other, dict) or sorted(map(repr, other)) != sorted(repr(k) for k, _, _ in children):
            raise ValueError(f"tf.while_loop: shape_invariants {other!r} must have the structure of loop_vars")
        return [leaf for k, sub, _ in children for leaf in _leaves_like(sub, other[k])]
    if not isinstance(other, (list, tuple)) or len(other) != len(children):
        raise ValueError(f"tf.while_loop: shape_invariants {other!r} must have the structure of loop_vars")
    return [leaf for (sub, _), o in zip(children, other) for leaf in _leaves_like(sub, o)]


def _check_iteration(expect: list, flat: list, names: list) -> None:
    for e, x, nm in zip(expect, flat, names):
        if e is None or isinstance(x, TensorArray):
            continue
        dtype, _, inv = e
        t = x if isinstance(x, Tensor) else as_tensor(x)
        if t.dtype != dtype:
            raise TypeError(
                f"Loop var {nm} enters the loop with type {dtype}, but has type {t.dtype} after 1 iteration. "
                "All loop vars returned from the body function must have the same type (cast it in the body)."
            )
        if not _compatible(tuple(t.shape), inv):
            raise ValueError(
                f"Input tensor {nm} enters the loop with shape {_shape_str(inv)}, but has shape "
                f"{_shape_str(tuple(t.shape))} after one iteration. To allow the shape to vary across iterations, "
                "use the `shape_invariants` argument of tf.while_loop to specify a less-specific shape."
            )


# -- map_fn, scan, foldl, foldr, vectorized_map ---------------------------------------------


def _unstacked(elems: Any, what: str) -> tuple[list[list], Any, int]:
    """Each leaf of ``elems`` split along its first axis: (per leaf the slices, spec, length)."""
    flat, spec = _nest.flatten(elems)
    if not flat:
        raise ValueError(f"{what}: elems must contain at least one tensor")
    flat = [_tensor(x) for x in flat]
    for x in flat:
        if x.ndim == 0:
            raise ValueError(
                f"{what}: elems must be tensors of rank 1 or more (it iterates the first axis), got a scalar"
            )
    n = flat[0].shape[0]
    if any(x.shape[0] != n for x in flat):
        shapes = [tuple(x.shape) for x in flat]
        raise ValueError(f"{what}: all elems must have the same first dimension, got shapes {shapes}")
    return [_rows(x) for x in flat], spec, n


def _rows(x: Tensor) -> list:
    """``x`` unstacked along axis 0 (one split: its gradient is one concatenate, not n scatters)."""
    n = x.shape[0]
    if n == 0:
        return []
    return [squeeze(p, 0) for p in split(x, n, 0)] if n > 1 else [squeeze(x, 0)]


def _stack_results(results: list, what: str) -> Any:
    """The per-iteration results (each a nested structure) stacked leaf by leaf along a new axis 0."""
    flats = [_nest.flatten(r) for r in results]
    spec = flats[0][1]
    for i, (_, s) in enumerate(flats[1:], 1):
        _assert_same_structure(spec, s, f"{what}: fn's results at iterations 0 and {i}", results[0], results[i])
    columns = zip(*[[_tensor(v) for v in f] for f, _ in flats])
    return _nest.unflatten(spec, [stack(list(c)) for c in columns])


def _signature_leaf(s: Any) -> tuple[Any, tuple | None]:
    """(dtype, shape or None) of one fn_output_signature leaf: a dtype or a TensorSpec-like object."""
    if hasattr(s, "dtype") and not isinstance(s, (np.dtype, type)):
        shape = getattr(s, "shape", None)
        return np.dtype(s.dtype), None if shape is None else tuple(shape)
    return np.dtype(s), None


def map_fn(
    fn: Callable[[Any], Any],
    elems: Any,
    dtype: Any = None,
    parallel_iterations: Any = None,
    back_prop: bool = True,
    swap_memory: bool = False,
    infer_shape: bool = True,
    name: str | None = None,
    fn_output_signature: Any = None,
) -> Any:
    """TensorFlow's ``tf.map_fn``: ``fn`` applied to each slice of ``elems`` along axis 0, stacked.

    ``elems`` may be nested (``fn`` gets the same structure of slices). The results must
    match ``fn_output_signature`` (dtypes or TensorSpecs, nested as fn's results), which
    defaults to the signature of ``elems``; a result of another dtype raises TensorFlow's
    InvalidArgumentError. Each call is recorded, so tapes differentiate through it.

    >>> import gputape as gt
    >>> gt.map_fn(lambda r: gt.sum(r * r), gt.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().tolist()
    [5.0, 25.0]
    >>> xs = gt.constant([1, 2, 3])
    >>> gt.map_fn(lambda x: gt.cast(x, gt.float32) / 2, xs, fn_output_signature=gt.float32).numpy().tolist()
    [0.5, 1.0, 1.5]
    """
    if not callable(fn):
        raise TypeError(f"tf.map_fn: fn must be callable. Received: {fn}")
    signature = fn_output_signature if fn_output_signature is not None else dtype
    rows, spec, n = _unstacked(elems, "tf.map_fn")
    if signature is None:
        # TensorFlow's default: fn's results have the structure and dtypes of elems' slices
        flat_e, _ = _nest.flatten(elems)
        sig_flat: list[tuple[Any, tuple | None]] = [
            (np.dtype(_tensor(x).dtype), tuple(_tensor(x).shape[1:])) for x in flat_e
        ]
        sig_spec = spec
    else:
        leaves, sig_spec = _nest.flatten(signature)
        sig_flat = [_signature_leaf(s) for s in leaves]
    if n == 0:
        if any(s is None or None in s for _, s in sig_flat):
            raise ValueError("tf.map_fn: elems are empty and fn_output_signature gives no shape for the results")
        return _nest.unflatten(sig_spec, [zeros((0, *(s or ())), d) for d, s in sig_flat])
    results = []
    for i in range(n):
        out = fn(_nest.unflatten(spec, [r[i] for r in rows]))
        flat, s = _nest.flatten(out)
        _assert_same_structure(
            sig_spec,
            s,
            "tf.map_fn: fn's result must have the structure of fn_output_signature",
            _nest.unflatten(sig_spec, [d for d, _ in sig_flat]),
            out,
        )
        converted = []
        for v, (d, _) in zip(flat, sig_flat):
            t = _convert(v, d)
            if t.dtype != d:
                raise InvalidArgumentError(
                    None,
                    None,
                    f"TensorArray dtype is {d} but Op is trying to write dtype {t.dtype} (tf.map_fn: fn returned "
                    f"{t.dtype} where the output signature says {d}; pass fn_output_signature={t.dtype} or cast)",
                )
            converted.append(t)
        results.append(_nest.unflatten(sig_spec, converted))
    return _stack_results(results, "tf.map_fn")


def scan(
    fn: Callable[[Any, Any], Any],
    elems: Any,
    initializer: Any = None,
    parallel_iterations: int = 10,
    back_prop: bool = True,
    swap_memory: bool = False,
    infer_shape: bool = True,
    reverse: bool = False,
    name: str | None = None,
) -> Any:
    """TensorFlow's ``tf.scan``: the accumulators ``a = fn(a, x)`` over the slices of ``elems``, stacked.

    Without ``initializer`` the first slice is the first accumulator (and the first result);
    ``reverse=True`` runs from the last slice, keeping each result at its slice's position.

    >>> import gputape as gt
    >>> gt.scan(lambda a, x: a + x, gt.constant([1.0, 2.0, 3.0])).numpy().tolist()
    [1.0, 3.0, 6.0]
    >>> gt.scan(lambda a, x: a * x, gt.constant([1.0, 2.0, 3.0]), initializer=gt.constant(2.0),
    ...         reverse=True).numpy().tolist()
    [12.0, 12.0, 6.0]
    """
    if not callable(fn):
        raise TypeError(f"tf.scan: fn must be callable. Received: {fn}")
    rows, spec, n = _unstacked(elems, "tf.scan")
    order = range(n - 1, -1, -1) if reverse else range(n)
    slices = [_nest.unflatten(spec, [r[i] for r in rows]) for i in order]
    if initializer is None:
        if n == 0:
            raise ValueError("tf.scan: elems are empty and there is no initializer")
        acc, slices, results = slices[0], slices[1:], [slices[0]]
    else:
        acc, results = initializer, []
        if n == 0:
            raise ValueError("tf.scan: elems are empty; there is nothing to scan")
    acc_spec = _nest.flatten(acc)[1]
    for x in slices:
        acc = fn(acc, x)
        _assert_same_structure(
            acc_spec,
            _nest.flatten(acc)[1],
            "tf.scan: fn's result must have the structure of the accumulator",
            initializer,
            acc,
        )
        results.append(acc)
    if reverse:
        results.reverse()
    return _stack_results(results, "tf.scan")


def _fold(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any, reverse: bool, what: str) -> Any:
    if not callable(fn):
        raise TypeError(f"{what}: fn must be callable. Received: {fn}")
    rows, spec, n = _unstacked(elems, what)
    order = list(range(n - 1, -1, -1) if reverse else range(n))
    if initializer is None:
        if n == 0:
            raise ValueError(f"{what}: elems are empty and there is no initializer")
        acc, order = _nest.unflatten(spec, [r[order[0]] for r in rows]), order[1:]
    else:
        acc = initializer
    acc_spec = _nest.flatten(acc)[1]
    for i in order:
        acc = fn(acc, _nest.unflatten(spec, [r[i] for r in rows]))
        _assert_same_structure(
            acc_spec,
            _nest.flatten(acc)[1],
            f"{what}: fn's result must have the structure of the accumulator",
            initializer,
            acc,
        )
    flat, s = _nest.flatten(acc)
    return _nest.unflatten(s, [_tensor(v) for v in flat])


def foldl(
    fn: Callable[[Any, Any], Any],
    elems: Any,
    initializer: Any = None,
    parallel_iterations: int = 10,
    back_prop: bool = True,
    swap_memory: bool = False,
    name: str | None = None,
) -> Any:
    """TensorFlow's ``tf.foldl``: ``a = fn(a, x)`` over the slices of ``elems`` from the first; the last ``a``.

    >>> import gputape as gt
    >>> float(gt.foldl(lambda a, x: a * 10 + x, gt.constant([1.0, 2.0, 3.0])))
    123.0
    """
    return _fold(fn, elems, initializer, False, "tf.foldl")


def foldr(
    fn: Callable[[Any, Any], Any],
    elems: Any,
    initializer: Any = None,
    parallel_iterations: int = 10,
    back_prop: bool = True,
    swap_memory: bool = False,
    name: str | None = None,
) -> Any:
    """TensorFlow's ``tf.foldr``: ``a = fn(a, x)`` over the slices of ``elems`` from the last; the last ``a``.

    >>> import gputape as gt
    >>> float(gt.foldr(lambda a, x: a * 10 + x, gt.constant([1.0, 2.0, 3.0])))
    321.0
    """
    return _fold(fn, elems, initializer, True, "tf.foldr")


def vectorized_map(fn: Callable[[Any], Any], elems: Any, fallback_to_while_loop: bool = True, warn: bool = True) -> Any:
    """TensorFlow's ``tf.vectorized_map``: ``fn`` on each slice of ``elems`` along axis 0, results stacked.

    The results' structure and dtypes are whatever ``fn`` returns (no signature needed).
    gputape runs ``fn`` once per slice (TensorFlow's ``fallback_to_while_loop`` path) and
    stacks the results, so any ``fn`` works, tapes inside ``fn`` included (per-example
    gradients), and an outer tape differentiates through it.

    >>> import gputape as gt
    >>> w = gt.constant([1.0, -2.0])
    >>> xs = gt.constant([[1.0, 1.0], [2.0, 0.0]])
    >>> def grad_norm(x):
    ...     with gt.GradientTape() as t:
    ...         t.watch(w)
    ...         loss = gt.sum(w * x) ** 2
    ...     return gt.linalg.norm(t.gradient(loss, w))
    >>> [round(v, 4) for v in gt.vectorized_map(grad_norm, xs).numpy().tolist()]
    [2.8284, 8.0]
    """
    if not callable(fn):
        raise TypeError(f"tf.vectorized_map: fn must be callable. Received: {fn}")
    rows, spec, n = _unstacked(elems, "tf.vectorized_map")
    if n == 0:
        raise ValueError(
            "tf.vectorized_map: elems are empty, so the results' shape is unknown; use tf.map_fn with "
            "fn_output_signature"
        )
    return _stack_results([fn(_nest.unflatten(spec, [r[i] for r in rows])) for i in range(n)], "tf.vectorized_map")


# -- TensorArray ------------------------------------------------------------------------------


class TensorArray:
    """TensorFlow's ``tf.TensorArray``: a list of same-dtype tensors written once each, then stacked.

    ``write``, ``unstack`` and ``scatter`` return the array (use the returned one, as in
    TensorFlow); ``read``, ``stack``, ``gather`` and ``concat`` return tensors recorded by
    the tape, so gradients flow through the written values. TensorFlow's errors: reading an
    index never written or already read with ``clear_after_read`` (InvalidArgumentError),
    writing an index twice (InvalidArgumentError), an index past ``size`` without
    ``dynamic_size`` (OutOfRangeError), a value of another dtype (InvalidArgumentError) or of
    a shape incompatible with ``element_shape`` (ValueError).

    >>> import gputape as gt
    >>> ta = gt.TensorArray(gt.float32, size=0, dynamic_size=True)
    >>> for i in range(3):
    ...     ta = ta.write(i, gt.constant(float(i * i)))
    >>> ta.stack().numpy().tolist(), int(ta.size())
    ([0.0, 1.0, 4.0], 3)
    """

    def __init__(
        self,
        dtype: Any,
        size: Any = None,
        dynamic_size: bool | None = None,
        clear_after_read: bool | None = None,
        tensor_array_name: str | None = None,
        handle: Any = None,
        flow: Any = None,
        infer_shape: bool = True,
        element_shape: Any = None,
        colocate_with_first_write_call: bool = True,
        name: str | None = None,
    ) -> None:
        if handle is not None or flow is not None:
            raise ValueError("TensorArray handles are not supported when eager execution is enabled.")
        if size is None:
            raise ValueError("Size must be declared for TensorArrays when eager execution is enabled.")
        self._dtype = np.dtype(dtype)
        n = self._index(size, "size")
        self._items: list[Any] = [None] * n
        self._dynamic_size = bool(dynamic_size)
        self._clear_after_read = True if clear_after_read is None else bool(clear_after_read)
        self._infer_shape = infer_shape
        self._element_shape = _invariant(element_shape, "tf.TensorArray(element_shape)")
        self._read: set[int] = set()

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def dynamic_size(self) -> bool:
        return self._dynamic_size

    @property
    def element_shape(self) -> Any:
        """The elements' shape as far as known (None for an unknown dimension; None itself: unknown rank)."""
        return None if self._element_shape is None else TensorShape(self._element_shape)

    @staticmethod
    def _index(i: Any, what: str) -> int:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer, Tensor)):
            raise TypeError(f"tf.TensorArray: {what} must be an integer, got {i!r}")
        if isinstance(i, Tensor) and (i.dtype.kind not in "iu" or i.ndim != 0):
            raise TypeError(
                f"tf.TensorArray: {what} must be an integer scalar, got a {i.dtype} tensor of shape {i.shape}"
            )
        return int(i)

    def size(self, name: str | None = None) -> Tensor:
        """The number of elements (written or not), as an int32 scalar tensor."""
        return constant(len(self._items), dtype=np.int32)

    def write(self, index: Any, value: Any, name: str | None = None) -> TensorArray:
        """Write ``value`` at ``index`` (once); returns the array."""
        self._write(self._index(index, "index"), value)
        return self

    def _write(self, i: int, value: Any) -> None:
        if i < 0:
            raise OutOfRangeError(None, None, f"Writing to negative indices (index {i}) is not allowed.")
        if i >= len(self._items):
            if not self._dynamic_size:
                raise OutOfRangeError(
                    None,
                    None,
                    f"Tried to write to index {i} but array is not resizeable and size is: {len(self._items)} "
                    "(create the TensorArray with dynamic_size=True to let it grow)",
                )
            self._items.extend([None] * (i + 1 - len(self._items)))
        if self._items[i] is not None or i in self._read:
            raise InvalidArgumentError(
                None,
                None,
                f"Could not write to TensorArray index {i} because it has already been written to. "
                "(each index is written once; write the next index, or use a new TensorArray)",
            )
        t = _convert(value, self._dtype)
        if t.dtype != self._dtype:
            raise InvalidArgumentError(
                None, None, f"TensorArray dtype is {self._dtype} but Op is trying to write dtype {t.dtype}"
            )
        shape = tuple(t.shape)
        if not _compatible(shape, self._element_shape):
            raise ValueError(
                f"Incompatible shape for value {_shape_str(shape)}, expected {_shape_str(self._element_shape)} "
                f"(TensorArray.write at index {i})"
            )
        if self._infer_shape:
            self._element_shape = shape
        self._items[i] = t

    def read(self, index: Any, name: str | None = None) -> Tensor:
        """The element at ``index`` (cleared after the read unless ``clear_after_read=False``).

        >>> import gputape as gt
        >>> ta = gt.TensorArray(gt.float32, size=2, clear_after_read=False).unstack([[1.0, 2.0], [3.0, 4.0]])
        >>> ta.read(1).numpy().tolist(), ta.read(1).numpy().tolist()
        ([3.0, 4.0], [3.0, 4.0])
        """
        i = self._index(index, "index")
        t = self._get(i)
        if self._clear_after_read:
            self._items[i] = None
            self._read.add(i)
        return t

    def _get(self, i: int) -> Tensor:
        if i < 0:
            raise OutOfRangeError(None, None, f"Reading from negative indices (index {i}) is not allowed.")
        if i >= len(self._items):
            raise OutOfRangeError(None, None, f"Tried to read from index {i} but array size is: {len(self._items)}")
        t = self._items[i]
        if t is None:
            if i in self._read:
                raise InvalidArgumentError(
                    None,
                    None,
                    f"Could not read index {i} twice because it was cleared after a previous read "
                    "(perhaps try setting clear_after_read = false?)",
                )
            raise InvalidArgumentError(
                None, None, f"Could not read from TensorArray index {i} because it has not yet been written to."
            )
        return t

    def stack(self, name: str | None = None) -> Tensor:
        """All elements stacked along a new axis 0."""
        if not self._items:
            return self._empty()
        return stack([self._get(i) for i in range(len(self._items))])

    def _empty(self) -> Tensor:
        shape = self._element_shape
        if shape is None or None in shape:
            raise ValueError("tf.TensorArray: stacking an empty TensorArray needs a fully known element_shape")
        return zeros((0,) + shape, self._dtype)

    def gather(self, indices: Any, name: str | None = None) -> Tensor:
        """The elements at ``indices`` stacked along a new axis 0.

        >>> import gputape as gt
        >>> ta = gt.TensorArray(gt.int32, size=3).unstack([10, 20, 30])
        >>> ta.gather([2, 0]).numpy().tolist()
        [30, 10]
        """
        idx = [self._index(i, "each index") for i in _ints(indices)]
        if not idx:
            return self._empty()
        return stack([self._get(i) for i in idx])

    def concat(self, name: str | None = None) -> Tensor:
        """All elements joined along their existing axis 0.

        >>> import gputape as gt
        >>> ta = gt.TensorArray(gt.float32, size=2, infer_shape=False).write(0, [1.0]).write(1, [2.0, 3.0])
        >>> ta.concat().numpy().tolist()
        [1.0, 2.0, 3.0]
        """
        parts = [self._get(i) for i in range(len(self._items))]
        if not parts:
            return self._empty()
        for i, p in enumerate(parts):
            if p.ndim == 0:
                raise InvalidArgumentError(
                    None, None, f"Concat saw a scalar shape at index {i} but requires at least vectors."
                )
        return concatenate(parts, axis=0)

    def unstack(self, value: Any, name: str | None = None) -> TensorArray:
        """Write the slices of ``value`` along axis 0 to indices ``0, 1, ...``; returns the array."""
        t = _convert(value, self._dtype)
        if t.ndim == 0:
            raise ValueError("tf.TensorArray.unstack: value must have rank 1 or more")
        n = t.shape[0]
        if n > len(self._items) and not self._dynamic_size:
            raise ValueError(f"Cannot unstack {n} tensors into a TensorArray of static size {len(self._items)}")
        for i, row in enumerate(_rows(t)):
            self._write(i, row)
        return self

    def scatter(self, indices: Any, value: Any, name: str | None = None) -> TensorArray:
        """Write the slices of ``value`` along axis 0 to ``indices``; returns the array.

        >>> import gputape as gt
        >>> gt.TensorArray(gt.float32, size=3).scatter([2, 0, 1], [5.0, 6.0, 7.0]).stack().numpy().tolist()
        [6.0, 7.0, 5.0]
        """
        t = _convert(value, self._dtype)
        idx = [self._index(i, "each index") for i in _ints(indices)]
        if t.ndim == 0 or t.shape[0] != len(idx):
            raise ValueError(
                f"tf.TensorArray.scatter: value's first dimension must equal the number of indices ({len(idx)}), "
                f"got shape {tuple(t.shape)}"
            )
        for i, row in zip(idx, _rows(t)):
            self._write(i, row)
        return self

    def close(self, name: str | None = None) -> None:
        """Drop every element."""
        self._items = []

    def identity(self) -> TensorArray:
        return self

    def __repr__(self) -> str:
        written = sum(t is not None for t in self._items)
        return f"TensorArray(dtype={self._dtype}, size={len(self._items)}, written={written})"


def _ints(indices: Any) -> list:
    """A list of Python ints, from a list, an array or an integer tensor (read on the host)."""
    if isinstance(indices, Tensor):
        if indices.dtype.kind not in "iu":
            raise TypeError(f"tf.TensorArray: indices must be integers, got {indices.dtype}")
        return [int(i) for i in indices.numpy().reshape(-1)]
    return list(indices)
