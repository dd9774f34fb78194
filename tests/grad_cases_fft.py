"""Registry cases for gt.fft's primitives: real functions of real float64 arguments.

Complex inputs are built inside the function (``a + 1j * b``) and complex outputs are made
real (``gt.real``, ``gt.imag``, ``abs(.)**2``), so the registry's real check_grads walks
each transform, with ``n``/``s`` cropping and padding and each ``norm``.
"""

from __future__ import annotations

import numpy as np

import gputape as gt

_rng = np.random.default_rng(2024)


def _r(*shape):
    return _rng.standard_normal(shape)


def _c(a, b):
    return a + 1j * b


CASES: dict[str, list] = {
    "fft.c2c": [
        (lambda a, b: gt.real(gt.fft.fft(_c(a, b))) + 2 * gt.imag(gt.fft.fft(_c(a, b))), (_r(3, 5), _r(3, 5))),
        (lambda x: abs(gt.fft.fft(x, n=7, norm="ortho")) ** 2, (_r(2, 5),)),
        (lambda a, b: gt.imag(gt.fft.ifftn(_c(a, b), s=(2, 6), axes=(0, 1), norm="forward")), (_r(3, 4), _r(3, 4))),
    ],
    "fft.rfftn": [
        (lambda x: gt.real(gt.fft.rfft(x)) - gt.imag(gt.fft.rfft(x)), (_r(3, 6),)),
        (lambda x: abs(gt.fft.rfftn(x, s=(4, 5), axes=(0, 1), norm="ortho")) ** 2, (_r(3, 6),)),
    ],
    "fft.irfftn": [
        (lambda a, b: gt.fft.irfft(_c(a, b)), (_r(2, 4), _r(2, 4))),
        (lambda a, b: gt.fft.irfft(_c(a, b), n=7, norm="ortho"), (_r(2, 4), _r(2, 4))),
        (lambda a, b: gt.fft.irfftn(_c(a, b), s=(3, 5), axes=(0, 1), norm="forward"), (_r(3, 4), _r(3, 4))),
    ],
}
