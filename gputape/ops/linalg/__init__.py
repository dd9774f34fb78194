"""numpy.linalg's functions as differentiable ops: ``_core`` (inv, solve, det, slogdet, cholesky,
band_part), ``_norm`` (norm, matrix_power), ``_spectral`` (eigh, eig, svd, qr, pinv, lstsq).

Their public path is :mod:`gputape.linalg` (``gt.linalg``), which re-exports them.
"""
