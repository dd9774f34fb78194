"""Gradient cases for the numpy-surface primitives (cumsum, cumprod, take_along_axis and its adjoint).

``tests/test_grad_registry.py`` merges ``CASES`` into its registry walk, which checks
each case to second order in float64, through the vectorised jacobian, and in float32.
The compositions built on these primitives (sort, diff, kron, ...) are checked the
same ways in ``tests/test_numpy_ops.py``.
"""

from __future__ import annotations

import numpy as np

import gputape as gt

rng = np.random.default_rng(4321)


def normal(*shape):
    return rng.standard_normal(shape)


def uniform(lo, hi, *shape):
    return rng.uniform(lo, hi, shape)


def distinct(*shape):
    """Distinct, well-separated values: sorts have no ties."""
    return rng.permutation(int(np.prod(shape))).reshape(shape) * 0.37 + 0.1


# A cumprod slice with one exact zero and one with two: the first-zero rule at order 1,
# the exact (n, n) expansion at order 2.
ZEROS = np.array([[0.7, 0.0, 1.3, -0.8], [1.1, 0.0, 0.9, 0.0], [0.0, 1.2, -0.6, 1.4]])
PERM = np.array([[2, 0, 1, 3], [3, 2, 1, 0], [0, 1, 2, 3]])
PICK = np.array([[1, 1, 3], [0, 2, 0], [3, 3, 3]])  # repeated: the adjoint accumulates

CASES: dict[str, list] = {
    "cumsum": [
        (lambda x: gt.cumsum(x, axis=1), (normal(3, 4),)),
        (lambda x: gt.cumsum(x), (normal(2, 3),)),
        (lambda x: gt.cumsum(x, axis=0) * x, (normal(4, 2),)),
    ],
    "cumprod": [
        (lambda x: gt.cumprod(x, axis=1), (uniform(0.5, 1.5, 3, 4),)),
        (lambda x: gt.cumprod(x, axis=0), (uniform(-1.5, -0.5, 4, 3),)),
        (lambda x: gt.cumprod(x), (uniform(0.5, 1.5, 2, 3),)),
        (lambda x: gt.cumprod(x, axis=-1), (ZEROS,)),
        (lambda x: gt.cumprod(x, axis=0), (ZEROS,)),
    ],
    "take_along_axis": [
        (lambda x: gt.take_along_axis(x, PERM, axis=1), (normal(3, 4),)),
        (lambda x: gt.take_along_axis(x, PICK, axis=1), (normal(3, 4),)),
        (lambda x: gt.take_along_axis(x, PICK.T, axis=0) * 2.0, (normal(4, 3),)),
        (lambda x: gt.sort(x, axis=-1), (distinct(3, 4),)),
        (lambda x: gt.sort(x, axis=0), (distinct(3, 4),)),
        (lambda x: gt.partition(x, 2, axis=1), (distinct(2, 5),)),
    ],
    "scatter_along_axis": [
        # reached as the VJP of take_along_axis; called directly through the primitive
        (
            lambda g: gt.REGISTRY["scatter_along_axis"](g, gt.constant(PICK), axis=-1, shape=(3, 4), unique=False),
            (normal(3, 3),),
        ),
        (
            lambda g: gt.REGISTRY["scatter_along_axis"](g, gt.constant(PERM), axis=-1, shape=(3, 4), unique=True),
            (normal(3, 4),),
        ),
    ],
}
