"""``tf.TensorShape``: a shape whose sizes, or whose rank, may be unknown (``None``).

A tensor's own ``.shape`` is always fully known (gputape runs on values); this class is for
what TensorFlow code writes about shapes it does not know yet: ``shape_invariants`` of
``tf.while_loop``, ``TensorSpec``-like declarations, compatibility checks.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any


def _dim(d: Any) -> int | None:
    if d is None:
        return None
    if hasattr(d, "value") and not isinstance(d, int):  # TensorFlow's Dimension
        d = d.value
        if d is None:
            return None
    try:
        n = operator.index(d)
    except TypeError:
        raise TypeError(f"tf.TensorShape: a dimension must be an int or None, got {d!r} ({type(d).__name__})") from None
    if n < 0:
        raise ValueError(f"tf.TensorShape: a dimension must be >= 0 or None (unknown), got {n}")
    return n


class TensorShape:
    """TensorFlow's ``tf.TensorShape``: dimensions are ints or ``None``; ``TensorShape(None)`` has
    an unknown rank.

    >>> import gputape.tf as tf
    >>> s = tf.TensorShape([None, 3])
    >>> s.rank, s.as_list(), s[1], s.is_compatible_with([5, 3]), s.merge_with([5, None])
    (2, [None, 3], 3, True, TensorShape([5, 3]))
    >>> tf.TensorShape(None).rank is None, tf.TensorShape([2, 3]) == (2, 3)
    (True, True)
    >>> tf.zeros([2, 3]).shape == tf.TensorShape([2, 3])
    True
    """

    __slots__ = ("_dims",)

    def __init__(self, dims: Any) -> None:
        if dims is None:
            self._dims: tuple[int | None, ...] | None = None
        elif isinstance(dims, TensorShape):
            self._dims = dims._dims
        else:
            try:
                seq = list(dims)
            except TypeError:
                seq = [dims]  # TensorShape(3) is a shape of rank 1, as in TensorFlow
            self._dims = tuple(_dim(d) for d in seq)

    # -- what it knows ----------------------------------------------------------------
    @property
    def rank(self) -> int | None:
        return None if self._dims is None else len(self._dims)

    ndims = rank

    @property
    def dims(self) -> list[int | None] | None:
        return None if self._dims is None else list(self._dims)

    def as_list(self) -> list[int | None]:
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self._dims)

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self) -> int | None:
        """The number of elements, or None when a size or the rank is unknown."""
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims or ():
            n *= d  # type: ignore[operator]
        return n

    # -- comparing and combining -------------------------------------------------------
    def is_compatible_with(self, other: Any) -> bool:
        """Whether some fully known shape fits both (an unknown size or rank fits anything)."""
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def assert_is_compatible_with(self, other: Any) -> None:
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {as_shape(other)} are incompatible")

    def merge_with(self, other: Any) -> TensorShape:
        """The shape with what either knows; ValueError when they are not compatible."""
        other = as_shape(other)
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are not compatible")
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        return TensorShape([a if a is not None else b for a, b in zip(self._dims, other._dims)])

    def most_specific_compatible_shape(self, other: Any) -> TensorShape:
        """The most specific shape both fit: ``None`` where they differ."""
        other = as_shape(other)
        if self._dims is None or other._dims is None or len(self._dims) != len(other._dims):
            return TensorShape(None)
        return TensorShape([a if a == b else None for a, b in zip(self._dims, other._dims)])

    def with_rank(self, rank: int) -> TensorShape:
        if self._dims is None:
            return TensorShape([None] * rank)
        if len(self._dims) != rank:
            raise ValueError(f"Shape {self} must have rank {rank}")
        return self

    def concatenate(self, other: Any) -> TensorShape:
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    # -- Python protocols -----------------------------------------------------------------
    def __len__(self) -> int:
        if self._dims is None:
            raise ValueError("Cannot take the length of shape with unknown rank.")
        return len(self._dims)

    def __bool__(self) -> bool:
        return self._dims is not None

    def __iter__(self) -> Iterator[int | None]:
        if self._dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return iter(self._dims)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return TensorShape(None if self._dims is None else self._dims[key])
        if self._dims is None:
            return None
        return self._dims[key]

    def __eq__(self, other: Any) -> bool:
        try:
            other = as_shape(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self._dims == other._dims

    def __ne__(self, other: Any) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self._dims)

    def __add__(self, other: Any) -> TensorShape:
        return self.concatenate(other)

    def __radd__(self, other: Any) -> TensorShape:
        return as_shape(other).concatenate(self)

    def __repr__(self) -> str:
        return "TensorShape(None)" if self._dims is None else f"TensorShape({list(self._dims)})"

    def __str__(self) -> str:
        if self._dims is None:
            return "<unknown>"
        if len(self._dims) == 1:
            return f"({self._dims[0]},)"
        return "(" + ", ".join(str(d) for d in self._dims) + ")"


def as_shape(shape: Any) -> TensorShape:
    """``shape`` as a :class:`TensorShape` (itself when it is one)."""
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)
