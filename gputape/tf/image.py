"""``tf.image``: the image ops TensorFlow's gradient guide uses.

``adjust_contrast`` computes TensorFlow's values; like TensorFlow's ``AdjustContrastv2``, it has no
gradient registered, so a tape that differentiates through it raises ``LookupError`` (the guide's
example of an op without a gradient) instead of returning a silent None.

>>> import gputape.tf as tf
>>> tf.image.adjust_contrast(tf.constant([[[1.0], [3.0]]]), 2.0).numpy().tolist()
[[[0.0], [4.0]]]
"""

from __future__ import annotations

from typing import Any as _Any

from .. import ops as _ops
from ..core.custom_gradient import custom_gradient as _custom_gradient
from ..core.tensor import as_tensor as _as_tensor

__all__ = ["adjust_contrast"]


def adjust_contrast(images: _Any, contrast_factor: _Any) -> _Any:
    """Per channel, ``(x - mean) * contrast_factor + mean`` with the mean over height and width
    (``images`` is ``[..., height, width, channels]``). No gradient, as in TensorFlow.

    >>> import gputape.tf as tf
    >>> image, delta = tf.Variable([[[0.5, 0.0, 0.0]]]), tf.Variable(0.1)
    >>> with tf.GradientTape() as tape:
    ...     new_image = tf.image.adjust_contrast(image, delta)
    >>> try:
    ...     tape.gradient(new_image, [image, delta])
    ... except LookupError as e:
    ...     print(type(e).__name__)
    LookupError
    """
    x = _as_tensor(images)
    if x.ndim < 3:
        raise ValueError(
            f"tf.image.adjust_contrast: argument images must be at least 3-D [..., height, width, channels], "
            f"got shape {x.shape}"
        )
    return _adjust_contrast(x, _ops.identity(contrast_factor))


@_custom_gradient
def _adjust_contrast(x: _Any, factor: _Any) -> _Any:
    mean = _ops.mean(x, axis=(-3, -2), keepdims=True)
    y = (x - mean) * _ops.cast(factor, x.dtype) + mean

    def grad(dy: _Any) -> _Any:
        raise LookupError(
            "No gradient defined for operation 'AdjustContrastv2' (op type: AdjustContrastv2): TensorFlow "
            "registers none for tf.image.adjust_contrast; write the formula with differentiable ops instead"
        )

    return y, grad


del annotations

# A name TensorFlow has and gputape lacks: an AttributeError that says so and where the list is.
from ._util import missing_name as _missing_name  # noqa: E402

__getattr__ = _missing_name(__name__)
