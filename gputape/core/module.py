"""``gt.Module``: a container that finds the Variables and sub-modules it holds.

Like ``tf.Module``, a module does not register anything when attributes are
set: the properties walk the attributes (and lists, tuples and dicts inside
them) each time they are read, so any way of building a model works. The order
is ``tf.Module``'s: attributes sorted by name, dict entries by key, a module's
own Variables before those of its sub-modules, and the properties return
tuples. (Keras layers, :class:`gputape.nn.Layer`, keep Keras' order instead:
lists, in creation order.) Variables are unhashable (they compare
elementwise), so de-duplication is by identity: the first path wins.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

from .tensor import Variable

__all__ = ["Module"]


def _snake(name: str) -> str:
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


class Module:
    """Base class for models and layers: collects Variables and sub-modules from attributes.

    Subclass it, assign Variables, modules, or lists/tuples/dicts of them to
    attributes, and read ``trainable_variables`` to get what a tape should
    differentiate: a tuple in ``tf.Module``'s order (attributes sorted by
    name, a module's own Variables before its sub-modules').

    >>> import gputape as gt
    >>> class Affine(gt.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = gt.Variable([[1.0], [2.0]], name="w")
    ...         self.b = gt.Variable([0.0], name="b")
    ...         self.scale = gt.Variable(1.0, trainable=False, name="scale")
    ...     def __call__(self, x):
    ...         return (x @ self.w + self.b) * self.scale
    >>> m = Affine()
    >>> [v.name for v in m.trainable_variables], len(m.variables), m.name
    (['b', 'w'], 3, 'affine')
    >>> [path for path, _ in m.named_variables()]
    ['b', 'scale', 'w']
    """

    # tf.Module sorts attributes (and dict keys) by name; Keras layers keep creation order.
    _sorted_walk = True

    def __init__(self, name: str | None = None) -> None:
        self._name = name if name is not None else _snake(type(self).__name__)

    @property
    def name(self) -> str:
        """The module's name (the snake-cased class name unless one was given).

        >>> import gputape as gt
        >>> class ResidualBlock(gt.Module):
        ...     pass
        >>> ResidualBlock().name, ResidualBlock(name="rb").name
        ('residual_block', 'rb')
        """
        try:
            return self._name
        except AttributeError:  # a subclass that forgot super().__init__()
            return _snake(type(self).__name__)

    @property
    def name_scope(self) -> contextlib.AbstractContextManager[None]:
        """A context manager, for TensorFlow code that writes ``with self.name_scope:``.

        gputape runs eagerly and names no ops, so entering it changes nothing.

        >>> import gputape as gt
        >>> with gt.Module(name="m").name_scope:
        ...     pass
        """
        return contextlib.nullcontext()

    # -- walking ----------------------------------------------------------------------
    def _walk(self) -> Iterator[tuple[str, Any]]:
        """Yield ``(path, Variable | Module)`` for everything reachable, each once (tf.Module's order)."""
        yield from _walk_module(self, "", {id(self)})

    def named_variables(self) -> list[tuple[str, Variable]]:
        """``(path, variable)`` pairs; paths follow attributes, like ``'layers/0/kernel'``.

        Paths are what checkpoints use: they depend on the model's structure,
        not on the order in which objects were created.

        >>> import gputape as gt
        >>> class M(gt.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.blocks = [gt.Module(name="b0")]
        ...         self.blocks[0].v = gt.Variable(0.0)
        >>> M().named_variables()[0][0]
        'blocks/0/v'
        """
        return [(p, o) for p, o in self._walk() if isinstance(o, Variable)]

    @property
    def variables(self) -> tuple[Variable, ...]:
        """All Variables of this module and its sub-modules, each once, as a tuple (``tf.Module``'s order).

        >>> import gputape as gt
        >>> m = gt.Module()
        >>> m.b, m.a = gt.Variable(1.0, name="b"), gt.Variable(2.0, name="a")
        >>> m.same = m.a
        >>> [v.name for v in m.variables]
        ['a', 'b']
        """
        return tuple(v for _, v in self.named_variables())

    @property
    def trainable_variables(self) -> tuple[Variable, ...]:
        """The trainable Variables (what a tape watches and an optimizer updates).

        >>> import gputape as gt
        >>> m = gt.Module()
        >>> m.vs = {"a": gt.Variable(1.0), "b": gt.Variable(2.0, trainable=False)}
        >>> [float(v) for v in m.trainable_variables]
        [1.0]
        """
        return tuple(v for v in self.variables if v.trainable)

    @property
    def non_trainable_variables(self) -> tuple[Variable, ...]:
        """The Variables with ``trainable=False`` (statistics, counters).

        >>> import gputape as gt
        >>> m = gt.Module()
        >>> m.count = gt.Variable(0, trainable=False)
        >>> len(m.non_trainable_variables)
        1
        """
        return tuple(v for v in self.variables if not v.trainable)

    @property
    def submodules(self) -> tuple[Module, ...]:
        """All modules reachable from this one (not itself), each once: direct ones first, then theirs.

        >>> import gputape as gt
        >>> outer = gt.Module(name="outer")
        >>> outer.inner = gt.Module(name="inner")
        >>> outer.inner.leaf = gt.Module(name="leaf")
        >>> [m.name for m in outer.submodules]
        ['inner', 'leaf']
        """
        return tuple(o for _, o in self._walk() if isinstance(o, Module))

    @classmethod
    def with_name_scope(cls, method: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator kept for TensorFlow code; returns ``method`` unchanged (no op names here).

        >>> import gputape as gt
        >>> gt.Module.with_name_scope(len)([1, 2])
        2
        """
        return method

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {len(self.variables)} variables>"


# Attributes that hold bookkeeping, never parameters: walking them would find
# nothing and, for back-references such as a parent pointer, loop.
_SKIP = frozenset({"_name", "_losses", "_output_shape", "_build_input_shape"})


_WALKED = (Variable, Module, dict, list, tuple)


def _walk_module(mod: Module, path: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """tf.Module's ``_flatten_module``: this module's leaves first, then each sub-module's, depth first."""
    items = [(k, v) for k, v in vars(mod).items() if k not in _SKIP]
    ordered = getattr(type(mod), "_sorted_walk", True)
    if ordered:
        items.sort(key=lambda kv: kv[0])
    subs: list[tuple[str, Module]] = []
    for key, value in items:
        for p, leaf in _leaves(value, key, seen, ordered):
            yield (f"{path}/{p}" if path else p), leaf
            if isinstance(leaf, Module):
                subs.append((f"{path}/{p}" if path else p, leaf))
    for p, sub in subs:
        yield from _walk_module(sub, p, seen)


def _leaves(value: Any, path: str, seen: set[int], ordered: bool) -> Iterator[tuple[str, Any]]:
    """Variables and Modules inside ``value`` (nested lists, tuples, dicts), not entering modules."""
    if not isinstance(value, _WALKED) or id(value) in seen:
        return  # shared or cyclic references: the first path wins
    seen.add(id(value))
    if isinstance(value, (Variable, Module)):
        yield path, value
        return
    if isinstance(value, dict):
        entries: Any = sorted(value.items(), key=lambda kv: str(kv[0])) if ordered else value.items()
    else:
        entries = enumerate(value)
    for key, item in entries:
        if isinstance(item, _WALKED):
            yield from _leaves(item, f"{path}/{key}", seen, ordered)
