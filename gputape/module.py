"""``gt.Module``: a container that finds the Variables and sub-modules it holds.

Like ``tf.Module``, a module does not register anything when attributes are
set: the properties walk the attributes (and lists, tuples and dicts inside
them) each time they are read, so any way of building a model works. Order is
the attributes' assignment order, depth first, which is stable across runs.
Variables are unhashable (they compare elementwise), so de-duplication is by
identity.
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
    differentiate (a list, so ``model.trainable_variables + [v]`` works).

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
    (['w', 'b'], 3, 'affine')
    >>> [path for path, _ in m.named_variables()]
    ['w', 'b', 'scale']
    """

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
        """Yield ``(path, Variable | Module)`` for everything reachable, depth first, each once."""
        seen: set[int] = {id(self)}
        yield from _walk_value(self, "", seen)

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
    def variables(self) -> list[Variable]:
        """All Variables of this module and its sub-modules, in a stable order, each once.

        >>> import gputape as gt
        >>> m = gt.Module()
        >>> m.a = gt.Variable(1.0)
        >>> m.same = m.a
        >>> len(m.variables)
        1
        """
        return [v for _, v in self.named_variables()]

    @property
    def trainable_variables(self) -> list[Variable]:
        """The trainable Variables (what a tape watches and an optimizer updates).

        >>> import gputape as gt
        >>> m = gt.Module()
        >>> m.vs = {"a": gt.Variable(1.0), "b": gt.Variable(2.0, trainable=False)}
        >>> [float(v) for v in m.trainable_variables]
        [1.0]
        """
        return [v for v in self.variables if v.trainable]

    @property
    def non_trainable_variables(self) -> list[Variable]:
        """The Variables with ``trainable=False`` (statistics, counters).

        >>> import gputape as gt
        >>> m = gt.Module()
        >>> m.count = gt.Variable(0, trainable=False)
        >>> len(m.non_trainable_variables)
        1
        """
        return [v for v in self.variables if not v.trainable]

    @property
    def submodules(self) -> list[Module]:
        """All modules reachable from this one (not itself), depth first, each once.

        >>> import gputape as gt
        >>> outer = gt.Module(name="outer")
        >>> outer.inner = gt.Module(name="inner")
        >>> outer.inner.leaf = gt.Module(name="leaf")
        >>> [m.name for m in outer.submodules]
        ['inner', 'leaf']
        """
        return [o for _, o in self._walk() if isinstance(o, Module)]

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
_SKIP = frozenset({"_name"})


def _walk_value(obj: Any, path: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, Module):
        items: Any = ((k, v) for k, v in vars(obj).items() if k not in _SKIP)
    elif isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return
    for key, value in items:
        if not isinstance(value, (Variable, Module, dict, list, tuple)):
            continue
        sub = f"{path}/{key}" if path else str(key)
        if id(value) in seen:  # shared or cyclic references: first path wins
            continue
        seen.add(id(value))
        if isinstance(value, (Variable, Module)):
            yield sub, value
            if isinstance(value, Variable):
                continue
        yield from _walk_value(value, sub, seen)
