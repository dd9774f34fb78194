"""The numpy-surface ops' gradients and Hessian-vector products against PyTorch's, in float64.

Uses ``compare`` from ``tests/test_vs_torch.py`` (first derivatives and HVPs of
``sum(f(*xs) * w)``). Only ops torch has; cumprod at zeros is checked against
torch's own exact zero handling.
"""

from __future__ import annotations

import numpy as np
import pytest

import gputape as gt

torch = pytest.importorskip("torch", reason="PyTorch is not installed; these tests compare gradients with it")
from test_vs_torch import compare, distinct, normal, uniform  # noqa: E402

pytestmark = pytest.mark.torch
T = torch

PERM_SORTED = distinct(3, 5, seed=4)

CASES = {
    "cumsum": (lambda x: gt.cumsum(x, axis=1), lambda x: T.cumsum(x, 1), (normal(3, 4),)),
    "cumsum-flat": (lambda x: gt.cumsum(x), lambda x: T.cumsum(x.reshape(-1), 0), (normal(2, 3),)),
    "cumprod": (lambda x: gt.cumprod(x, axis=0), lambda x: T.cumprod(x, 0), (uniform(0.5, 1.5, 4, 3),)),
    "cumprod-neg": (lambda x: gt.cumprod(x, axis=-1), lambda x: T.cumprod(x, -1), (uniform(-1.5, -0.5, 2, 5),)),
    "diff": (lambda x: gt.diff(x, axis=0), lambda x: T.diff(x, dim=0), (normal(4, 3),)),
    "diff-n2-prepend": (
        lambda x, p: gt.diff(x, n=2, prepend=p),
        lambda x, p: T.diff(x, n=2, prepend=p),
        (normal(3, 4), normal(3, 2)),
    ),
    "diagonal": (lambda x: gt.diagonal(x, 1, 1, 2), lambda x: T.diagonal(x, 1, 1, 2), (normal(2, 3, 4),)),
    "trace": (gt.trace, T.trace, (normal(4, 4),)),
    "diag-vec": (lambda v: gt.diag(v, -1), lambda v: T.diag(v, -1), (normal(3),)),
    "diag-mat": (lambda m: gt.diag(m, 1), lambda m: T.diag(m, 1), (normal(3, 4),)),
    "triu": (lambda m: gt.triu(m, 1), lambda m: T.triu(m, 1), (normal(2, 3, 4),)),
    "tril": (lambda m: gt.tril(m * m, -1), lambda m: T.tril(m * m, -1), (normal(4, 3),)),
    "outer": (gt.outer, T.outer, (normal(3), normal(4))),
    "tensordot": (lambda a, b: gt.tensordot(a, b), lambda a, b: T.tensordot(a, b), (normal(2, 3, 4), normal(3, 4, 2))),
    "tensordot-axes": (
        lambda a, b: gt.tensordot(a, b, ([0, 2], [1, 0])),
        lambda a, b: T.tensordot(a, b, ([0, 2], [1, 0])),
        (normal(4, 2, 3), normal(3, 4)),
    ),
    "inner": (gt.inner, T.inner, (normal(2, 4), normal(3, 4))),
    "kron": (gt.kron, T.kron, (normal(2, 3), normal(3, 2))),
    "cross": (lambda a, b: gt.cross(a, b), lambda a, b: T.linalg.cross(a, b), (normal(4, 3), normal(4, 3, seed=1))),
    "cross-axis0": (
        lambda a, b: gt.cross(a, b, axis=0),
        lambda a, b: T.linalg.cross(a, b, dim=0),
        (normal(3, 2), normal(3, 2, seed=1)),
    ),
    "flip": (lambda x: gt.flip(x, (0, 2)) * x, lambda x: T.flip(x, (0, 2)) * x, (normal(2, 3, 4),)),
    "fliplr-flipud": (lambda x: gt.fliplr(x) + gt.flipud(x), lambda x: T.fliplr(x) + T.flipud(x), (normal(3, 4),)),
    "rot90": (lambda x: gt.rot90(x, 3, (1, 2)), lambda x: T.rot90(x, 3, (1, 2)), (normal(2, 3, 4),)),
    "roll": (lambda x: gt.roll(x, (1, -2), (0, 1)), lambda x: T.roll(x, (1, -2), (0, 1)), (normal(3, 4),)),
    "roll-flat": (lambda x: gt.roll(x, 3), lambda x: T.roll(x, 3), (normal(2, 3),)),
    "repeat": (lambda x: gt.repeat(x, 3, axis=1), lambda x: T.repeat_interleave(x, 3, dim=1), (normal(2, 3),)),
    "repeat-counts": (
        lambda x: gt.repeat(x, [2, 0, 1], axis=0),
        lambda x: T.repeat_interleave(x, T.tensor([2, 0, 1]), dim=0),
        (normal(3, 2),),
    ),
    "tile": (lambda x: gt.tile(x, (2, 1, 3)), lambda x: T.tile(x, (2, 1, 3)), (normal(2, 3),)),
    "sort": (lambda x: gt.sort(x, axis=0), lambda x: T.sort(x, 0).values, (PERM_SORTED,)),
    "sort-last": (lambda x: gt.sort(x) ** 2.0, lambda x: T.sort(x, -1).values ** 2.0, (PERM_SORTED,)),
    "take_along_axis": (
        lambda x: gt.take_along_axis(x, np.array([[0, 2, 2], [1, 1, 0]]), axis=1),
        lambda x: T.take_along_dim(x, T.tensor([[0, 2, 2], [1, 1, 0]]), dim=1),
        (normal(2, 3),),
    ),
    "vstack": (lambda a, b: gt.vstack([a, b]), lambda a, b: T.vstack([a, b]), (normal(3), normal(2, 3))),
    "hstack": (lambda a, b: gt.hstack([a, b]), lambda a, b: T.hstack([a, b]), (normal(2, 1), normal(2, 3))),
    "dstack": (lambda a, b: gt.dstack([a, b]), lambda a, b: T.dstack([a, b]), (normal(2, 2), normal(2, 2, 2))),
    "column_stack": (
        lambda a, b: gt.column_stack([a, b]),
        lambda a, b: T.column_stack([a, b]),
        (normal(3), normal(3, 2)),
    ),
    "ravel": (lambda x: gt.ravel(x) ** 2.0, lambda x: T.ravel(x) ** 2.0, (normal(2, 3),)),
    "amax": (lambda x: gt.amax(x, axis=1), lambda x: T.amax(x, 1), (distinct(3, 4),)),
    "atleast_3d": (gt.atleast_3d, T.atleast_3d, (normal(3),)),
    "split-like": (
        lambda x: gt.array_split(x, 3)[1] * 2.0,
        lambda x: T.tensor_split(x, 3)[1] * 2.0,
        (normal(7, 2),),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_op_gradient_and_hvp_match_torch(name):
    gt_f, torch_f, arrays = CASES[name]
    compare(gt_f, torch_f, *arrays)


ZEROS = {"one": [2.0, 0.0, 3.0, 4.0], "two": [2.0, 0.0, 3.0, 0.0], "first": [0.0, 1.5, -2.0, 1.0], "all": [0.0, 0.0]}


@pytest.mark.parametrize("values", list(ZEROS.values()), ids=list(ZEROS))
def test_cumprod_with_zeros_matches_torch(values):
    """torch's cumprod backward handles zeros exactly; so must both of gputape's forms (order 1 and 2)."""
    compare(gt.cumprod, lambda t: T.cumprod(t, 0), np.array(values))
