"""The normalisation layers: ``BatchNormalization`` and ``LayerNormalization`` (Keras 3's defaults).

>>> import gputape as gt, numpy as np
>>> gt.nn.LayerNormalization()(np.array([[1.0, 3.0]], "float32")).shape
(1, 2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.custom_gradient import stop_gradient
from ..core.tensor import as_tensor
from ..ops import mean as _mean
from ..ops import reshape, sqrt, square
from . import constraints, initializers, regularizers
from .base_layer import Layer, _penalty_config
from .saving import register_keras_class

__all__ = ["BatchNormalization", "LayerNormalization"]


def _moments_axes(layer: Layer, shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    rank = len(shape)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if not rank or any(not -rank <= a < rank for a in axes):
        raise ValueError(
            f"{type(layer).__name__} {layer.name!r}: axis {axis} is out of range for inputs of shape {shape}"
        )
    return tuple(sorted(a % rank for a in axes))


def _add_gamma_beta(layer: Any, shape: tuple[int, ...]) -> None:
    # the normalisation layers' learned scale and offset (absent with scale=False / center=False)
    layer.gamma = (
        layer.add_weight(shape=shape, initializer=layer._inits[0], name="gamma", regularizer=layer.gamma_regularizer,
                         constraint=layer.gamma_constraint)
        if layer.scale
        else None
    )  # fmt: skip
    layer.beta = (
        layer.add_weight(shape=shape, initializer=layer._inits[1], name="beta", regularizer=layer.beta_regularizer,
                         constraint=layer.beta_constraint)
        if layer.center
        else None
    )  # fmt: skip


def _set_penalties(layer: Any, regs: tuple[Any, Any], cons: tuple[Any, Any]) -> None:
    # Keras' gamma_/beta_regularizer and _constraint, under Keras' names (get_config reads them there)
    layer.gamma_regularizer, layer.beta_regularizer = (regularizers.get(r) for r in regs)
    layer.gamma_constraint, layer.beta_constraint = (constraints.get(c) for c in cons)


def _scale_shift(layer: Any, y: Any, bshape: tuple[int, ...]) -> Any:
    if layer.gamma is not None:
        y = y * reshape(layer.gamma, bshape)
    if layer.beta is not None:
        y = y + reshape(layer.beta, bshape)
    return y


class BatchNormalization(Layer):
    """Normalise each feature over the batch (Keras 3's ``BatchNormalization``).

    With ``training=True`` (and the layer trainable) it uses the batch's mean
    and (biased) variance and updates the non-trainable moving statistics as
    Keras does: ``moving = moving * momentum + batch * (1 - momentum)``
    (``momentum=0.99``); otherwise it uses the moving statistics. The output is
    ``gamma * (x - mean) / sqrt(var + epsilon) + beta`` (``epsilon=1e-3``).
    A frozen layer (``trainable = False``) always runs in inference mode, as in Keras.

    >>> import gputape as gt, numpy as np
    >>> bn = gt.nn.BatchNormalization(momentum=0.5)
    >>> y = bn(np.array([[0.0], [2.0]], "float32"), training=True)
    >>> y.numpy().astype(float).round(4).ravel().tolist()
    [-0.9995, 0.9995]
    >>> bn.moving_mean.numpy().tolist(), bn.moving_variance.numpy().tolist()
    ([0.5], [1.0])
    """

    def __init__(
        self,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        beta_constraint: Any = None,
        gamma_constraint: Any = None,
        moving_mean_initializer: Any = "zeros",
        moving_variance_initializer: Any = "ones",
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= float(momentum) <= 1.0 or not float(epsilon) > 0.0:
            raise ValueError(f"BatchNormalization: need 0 <= momentum <= 1 and epsilon > 0, got {momentum}, {epsilon}")
        self.axis, self.momentum, self.epsilon = int(axis), float(momentum), float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self._inits = [initializers.get(i) for i in (gamma_initializer, beta_initializer)]
        _set_penalties(self, (gamma_regularizer, beta_regularizer), (gamma_constraint, beta_constraint))
        self._stat_inits = [initializers.get(i) for i in (moving_mean_initializer, moving_variance_initializer)]
        super().__init__(dtype=dtype, **kwargs)

    def _config(self) -> dict[str, Any]:
        cfg = {"axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon}
        return {**cfg, **_penalty_config(self, "gamma", "beta")}

    def _keras_config(self) -> dict[str, Any]:
        names = ("gamma_initializer", "beta_initializer", "moving_mean_initializer", "moving_variance_initializer")
        inits = dict(zip(names, (*self._inits, *self._stat_inits)))
        return {"center": self.center, "scale": self.scale, **{k: initializers.config_of(v) for k, v in inits.items()}}

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        (ax,) = _moments_axes(self, tuple(input_shape), self.axis)
        if input_shape[ax] is None:
            raise ValueError(f"BatchNormalization {self.name!r}: the size of axis {self.axis} must be known")
        shape = (int(input_shape[ax]),)
        _add_gamma_beta(self, shape)
        self.moving_mean = self.add_weight(
            shape=shape, initializer=self._stat_inits[0], trainable=False, name="moving_mean"
        )
        self.moving_variance = self.add_weight(
            shape=shape, initializer=self._stat_inits[1], trainable=False, name="moving_variance"
        )

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        x = as_tensor(inputs)
        (ax,) = _moments_axes(self, x.shape, self.axis)
        if x.shape[ax] != self.moving_mean.shape[0]:
            raise ValueError(
                f"BatchNormalization {self.name!r}: built for {self.moving_mean.shape[0]} features on axis "
                f"{self.axis}, got inputs of shape {x.shape}"
            )
        red = tuple(i for i in range(x.ndim) if i != ax)
        bshape = tuple(x.shape[ax] if i == ax else 1 for i in range(x.ndim))
        if training and self.trainable:
            mean = _mean(x, axis=red, keepdims=True)
            var = _mean(square(x - mean), axis=red, keepdims=True)
            m = self.momentum
            # the statistics are running averages, not part of the gradient
            self.moving_mean.assign(self.moving_mean * m + reshape(stop_gradient(mean), (-1,)) * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + reshape(stop_gradient(var), (-1,)) * (1.0 - m))
        else:
            mean = reshape(self.moving_mean.value(), bshape)
            var = reshape(self.moving_variance.value(), bshape)
        y = (x - mean) / sqrt(var + self.epsilon)
        return _scale_shift(self, y, bshape)


class LayerNormalization(Layer):
    """Normalise each example over ``axis`` (default the last): ``gamma * (x - mean) / sqrt(var + epsilon) + beta``.

    Keras 3's defaults: ``epsilon=1e-3``, ``gamma`` ones and ``beta`` zeros of
    the normalised axes' shape; the variance is the biased one.

    >>> import gputape as gt, numpy as np
    >>> y = gt.nn.LayerNormalization()(np.array([[1.0, 3.0]], "float32"))
    >>> y.numpy().astype(float).round(4).tolist()
    [[-0.9995, 0.9995]]
    """

    def __init__(
        self,
        axis: Any = -1,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        beta_constraint: Any = None,
        gamma_constraint: Any = None,
        dtype: Any = "float32",
        **kwargs: Any,
    ) -> None:
        if not float(epsilon) > 0.0:
            raise ValueError(f"LayerNormalization: epsilon must be > 0, got {epsilon}")
        self.axis = axis if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)
        self.epsilon, self.center, self.scale = float(epsilon), bool(center), bool(scale)
        self._inits = [initializers.get(i) for i in (gamma_initializer, beta_initializer)]
        _set_penalties(self, (gamma_regularizer, beta_regularizer), (gamma_constraint, beta_constraint))
        super().__init__(dtype=dtype, **kwargs)

    def _config(self) -> dict[str, Any]:
        return {"axis": self.axis, "epsilon": self.epsilon, **_penalty_config(self, "gamma", "beta")}

    def _keras_config(self) -> dict[str, Any]:
        inits = dict(zip(("gamma_initializer", "beta_initializer"), self._inits))
        axis = self.axis if isinstance(self.axis, int) else list(self.axis)
        return {
            "axis": axis,
            "center": self.center,
            "scale": self.scale,
            **{k: initializers.config_of(v) for k, v in inits.items()},
        }

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        axes = _moments_axes(self, tuple(input_shape), self.axis)
        shape = tuple(int(input_shape[a]) for a in axes)
        _add_gamma_beta(self, shape)

    def call(self, inputs: Any) -> Any:
        x = as_tensor(inputs)
        axes = _moments_axes(self, x.shape, self.axis)
        bshape = tuple(x.shape[i] if i in axes else 1 for i in range(x.ndim))
        mean = _mean(x, axis=axes, keepdims=True)
        y = (x - mean) / sqrt(_mean(square(x - mean), axis=axes, keepdims=True) + self.epsilon)
        return _scale_shift(self, y, bshape)


register_keras_class(BatchNormalization)
register_keras_class(LayerNormalization)
