"""Nested structures (dicts, lists, tuples, namedtuples), as ``tf.nest`` flattens them.

One implementation for every user: the tape (``gradient()``'s targets and sources,
``watch``, custom_gradient results) and ``gt.function`` (its arguments, results and
cache key). A structure flattens to its leaves in a fixed order (dict keys sorted) and a
*spec*, a hashable description of the containers, from which :func:`unflatten` builds the
same structure, of the same types, around new leaves.

>>> import collections
>>> from gputape.core._nest import flatten, unflatten
>>> Pair = collections.namedtuple("Pair", "a b")
>>> leaves, spec = flatten({"x": Pair(1, [2, 3]), "y": 4})
>>> leaves
[1, 2, 3, 4]
>>> unflatten(spec, [10, 20, 30, 40])
{'x': Pair(a=10, b=[20, 30]), 'y': 40}
>>> hash(spec) == hash(flatten({"x": Pair(0, [0, 0]), "y": 0})[1])
True
"""

from __future__ import annotations

from typing import Any

__all__ = ["build", "flatten", "unflatten"]


def flatten(x: Any) -> tuple[list[Any], Any]:
    """``(leaves, spec)`` of a nested structure; anything but a dict, list or tuple is a leaf."""
    if isinstance(x, dict):
        keys = sorted(x, key=repr) if not all(isinstance(k, str) for k in x) else sorted(x)
        flat: list[Any] = []
        specs = []
        for k in keys:
            f, s = flatten(x[k])
            flat.extend(f)
            specs.append((k, s, len(f)))
        return flat, ("dict", type(x), tuple(specs))
    if isinstance(x, (list, tuple)):
        flat = []
        specs = []
        for item in x:
            f, s = flatten(item)
            flat.extend(f)
            specs.append((s, len(f)))
        return flat, ("seq", type(x), tuple(specs))
    return [x], None


def unflatten(spec: Any, flat: list[Any]) -> Any:
    """The structure ``spec`` describes, around the leaves ``flat`` (in :func:`flatten`'s order)."""
    return build(spec, iter(flat))


def build(s: Any, it: Any) -> Any:
    """:func:`unflatten` taking its leaves from the iterator ``it``."""
    # A module-level function, not a recursive closure: a closure that refers to
    # itself is a reference cycle, which kept every step's gradients alive until
    # the garbage collector ran (memory grew ~1 MB per MLP step).
    if s is None:
        return next(it)
    kind, typ, specs = s
    if kind == "dict":
        d = {k: build(sub, it) for k, sub, _ in specs}
        return d if typ is dict else typ(d)
    items = [build(sub, it) for sub, _ in specs]
    if typ is list:
        return items
    if typ is tuple:
        return tuple(items)
    return typ(*items) if hasattr(typ, "_fields") else typ(items)
