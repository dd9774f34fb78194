"""Gradient debugging: why a gradient is None, where a NaN was born, gradient health.

>>> import gputape as gt
>>> x = gt.constant(1.0)
>>> with gt.GradientTape() as tape:
...     y = x * 2.0
>>> tape.explain(y, x).reason
'not_watched'
"""

from ..core.backward.compiled import backward_cache_report, clear_backward_cache
from ..core.explain import REASONS, Explanation
from .health import GradientMonitor, grad_report
from .numerics import check_numerics, disable_check_numerics, enable_check_numerics, record_locations
from .placement import log_device_placement, reset_transfer_stats, transfer_stats

# Written out: type checkers take a package's names from it (pyright treats names a typed package
# only imports as private without it).
__all__ = [
    "REASONS",
    "Explanation",
    "GradientMonitor",
    "backward_cache_report",
    "check_numerics",
    "clear_backward_cache",
    "disable_check_numerics",
    "enable_check_numerics",
    "grad_report",
    "log_device_placement",
    "record_locations",
    "reset_transfer_stats",
    "transfer_stats",
]
