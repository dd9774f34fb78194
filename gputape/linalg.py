"""``gt.linalg``: numpy's ``linalg`` for float32/float64 and complex64/complex128 tensors, differentiable.

The public path of :mod:`gputape.ops.linalg` (``_core``: inv, solve, det, slogdet, cholesky,
band_part; ``_norm``: norm, matrix_power; ``_spectral``: eigh, eig, svd, qr, pinv, lstsq).

Each function takes numpy's arguments and returns numpy's results (named tuples where
numpy returns them), with leading batch dimensions (``solve`` broadcasts them). Forward
passes run ``numpy.linalg`` on the CPU and ``cupy.linalg`` on a GPU.

Primitives (a hand-written VJP each): ``inv``, ``solve`` (adjoint solve), ``det``,
``slogdet``, ``cholesky`` (Murray's formula), ``eigh``, ``eig``, ``svd``, ``qr``, ``pinv``
(Golub-Pereyra), the vector p-norm inside ``norm``, and ``band_part`` (the triangle mask
the VJPs use). Compositions of those and of gputape's ops: ``eigvalsh``, ``eigvals``, ``norm`` (every
other ``ord``), ``matrix_power``, ``lstsq`` (through ``pinv``). Every VJP is written with
differentiable ops, so gradients of gradients work.

Conventions worth knowing:

- Complex input: every function takes it, as numpy does, and gradients follow gputape's
  (TensorFlow's) convention: for a real loss ``L`` of ``z = x + iy`` the gradient is
  ``dL/dx + i dL/dy`` (the conjugate of the holomorphic derivative for ``inv``, ``solve``,
  ``det``, ``matrix_power``, ``eig``'s eigenvalues), the same as PyTorch's. The formulas are
  the real ones with conjugate transposes (``^H``). Eigenvectors and singular vectors of
  complex matrices are defined up to a phase each: a loss that depends on those phases has
  no gradient and ``tape.gradient`` raises ``ValueError`` (PyTorch raises too).

- ``cholesky``, ``eigh`` and ``eigvalsh`` read one triangle (as numpy); their gradient is
  the symmetric matrix giving the derivative along symmetric perturbations (PyTorch's,
  and TensorFlow's for cholesky). To check it with finite differences, perturb
  symmetrically (differentiate ``f((x + x.T) / 2)``).
- Eigenvector and singular-vector gradients need distinct values: at exactly repeated
  eigenvalues (singular values) they are NaN, as in PyTorch and JAX; losses of the
  eigenvalues (singular values) alone are finite and correct there. Details in
  ``gputape.ops.linalg._spectral``.
- ``svd(full_matrices=True)`` ignores the cotangents of the extra (arbitrary) columns.
- ``norm`` has gradient 0 at 0.
- Errors: non-square or rank < 2 input, a singular matrix (``inv``, ``solve``), a matrix
  that is not positive definite (``cholesky``) raise ``numpy.linalg.LinAlgError`` (a
  ``ValueError``) naming the gputape function; cupy does not check singularity and
  returns non-finite values instead. ``eig``/``eigvals`` on a GPU need ``cupy.linalg.eig``
  (recent CuPy, where cuSOLVER has ``geev``); without it ``NotImplementedError`` names it.

>>> import gputape as gt
>>> a = gt.constant([[4.0, 1.0], [1.0, 3.0]], dtype="float64")
>>> with gt.GradientTape() as tape:
...     tape.watch(a)
...     logdet = gt.linalg.slogdet(a).logabsdet
>>> bool(abs(tape.gradient(logdet, a).numpy() - gt.linalg.inv(a).numpy().T).max() < 1e-12)
True
"""

from __future__ import annotations

from .ops.linalg._core import LinAlgError, SlogdetResult, band_part, cholesky, det, inv, slogdet, solve
from .ops.linalg._norm import matrix_power, norm
from .ops.linalg._spectral import (
    EighResult,
    EigResult,
    LstsqResult,
    QRResult,
    SVDResult,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    lstsq,
    pinv,
    qr,
    svd,
)

__all__ = [
    "EigResult",
    "EighResult",
    "LinAlgError",
    "LstsqResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "band_part",
    "cholesky",
    "det",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "inv",
    "lstsq",
    "matrix_power",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
]
