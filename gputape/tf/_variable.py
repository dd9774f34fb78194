"""``tf.Variable``: a ``gt.Variable`` made with TensorFlow's arguments and TensorFlow's ``:0`` name.

TensorFlow names a variable's value by its output index: ``tf.Variable(1.0,
name="w").name == "w:0"`` (``"Variable:0"`` without a name). ``tf.Variable``
here makes an ordinary :class:`gputape.Variable` with that name, so tapes,
optimizers, ``gt.function`` and checkpoints treat it as any other variable
(checkpoints key a bare variable by its name without the ``:0``). Variables that
gputape's own API makes keep the names they are given: ``gt.Variable(1.0,
name="w").name == "w"``, and Keras layers' weights are ``"<layer>/<weight>"``
(Keras 3 has no ``:0`` either).

``isinstance(v, tf.Variable)`` is true for every gt.Variable, whoever made it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.tensor import Variable as _Variable

__all__ = ["Variable"]


class _VariableType(type):
    # tf.Variable is a factory for gt.Variable, not a second class: gputape's code tests
    # `type(v) is Variable` on its hot paths (a tape watching a read), which a subclass would fail.
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _Variable)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _Variable)

    def __call__(  # type: ignore[override]
        cls,
        initial_value: Any = None,
        trainable: bool | None = None,
        validate_shape: bool = True,
        caching_device: Any = None,
        name: str | None = None,
        variable_def: Any = None,
        dtype: Any = None,
        import_scope: Any = None,
        constraint: Any = None,
        synchronization: Any = None,
        aggregation: Any = None,
        shape: Any = None,
        **kwargs: Any,
    ) -> _Variable:
        kwargs.pop("experimental_enable_variable_lifting", None)
        if kwargs:
            raise TypeError(f"tf.Variable: unexpected keyword arguments {sorted(kwargs)}")
        if variable_def is not None:
            raise NotImplementedError("tf.Variable: variable_def= is not supported")
        if constraint is not None and not callable(constraint):
            raise ValueError(f"tf.Variable: the `constraint` argument must be a callable, got {constraint!r}")
        if initial_value is None:
            raise ValueError("tf.Variable: initial_value must be given (a tensor, array, number or callable)")
        if name is not None and (not isinstance(name, str) or ":" in name):
            raise ValueError(
                f"tf.Variable: name must be a string without ':' (TensorFlow adds ':0' itself), got {name!r}"
            )
        trainable = True if trainable is None else trainable
        v = _Variable(initial_value, trainable=trainable, name=f"{name or 'Variable'}:0", dtype=dtype)
        if shape is not None and tuple(shape) != tuple(v.shape):
            raise ValueError(
                f"tf.Variable: shape={tuple(shape)} does not match the initial value's shape {tuple(v.shape)} "
                "(gputape variables have a fixed shape)"
            )
        if constraint is not None:
            v.constraint = constraint  # optimizers apply it after each step, as TensorFlow's do
        return v


if TYPE_CHECKING:  # what type checkers see: a call makes a gt.Variable (the metaclass's __call__ above)

    class Variable(_Variable):
        def __init__(
            self,
            initial_value: Any = None,
            trainable: bool | None = None,
            validate_shape: bool = True,
            caching_device: Any = None,
            name: str | None = None,
            variable_def: Any = None,
            dtype: Any = None,
            import_scope: Any = None,
            constraint: Any = None,
            synchronization: Any = None,
            aggregation: Any = None,
            shape: Any = None,
            **kwargs: Any,
        ) -> None: ...

else:

    class Variable(metaclass=_VariableType):
        """``tf.Variable(initial_value, trainable=None, name=None, dtype=None, shape=None)``, named ``name:0``.

        ``trainable=None`` means True, as in TensorFlow. ``constraint`` (a callable
        ``w -> w'``) is applied by optimizers after each step. ``validate_shape``,
        ``caching_device``, ``import_scope``, ``synchronization`` and ``aggregation``
        are accepted and have no effect; ``shape`` must be the value's (variables
        have a fixed shape here).

        >>> import gputape.tf as tf
        >>> w = tf.Variable([1.0, 2.0], name="w")
        >>> w.name, tf.Variable(3.0).name, isinstance(w, tf.Variable)
        ('w:0', 'Variable:0', True)
        >>> with tf.GradientTape() as tape:
        ...     y = tf.reduce_sum(w * w)
        >>> [v.name for v in tape.watched_variables()], tape.gradient(y, w).numpy().tolist()
        (['w:0'], [2.0, 4.0])
        """
