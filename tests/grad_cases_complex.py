"""Registry cases for the complex-part primitives (real, imag, conj, angle) on real float64 input.

The registry walk checks real functions of real arguments; the complex-input gradients of these
primitives are tested against finite differences of real and imaginary parts in test_complex.py.
"""

from __future__ import annotations

import numpy as np

import gputape as gt

_rng = np.random.default_rng(77)
_x = _rng.standard_normal((3, 4))

CASES: dict[str, list] = {
    "real": [(gt.real, (_x,)), (lambda x: gt.real(x) * x, (_x,))],
    "imag": [(lambda x: gt.imag(x) + x * x, (_x,))],
    "conj": [(lambda x: gt.conj(x) * x, (_x,))],
    # the angle of a real number is 0 or pi: a gradient of 0 away from 0
    "angle": [(lambda x: gt.angle(x) + x, (_x + np.sign(_x) * 0.5,))],
}
