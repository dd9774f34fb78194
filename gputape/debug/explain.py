"""``gt.debug``'s name for :mod:`gputape.core.explain` (why is a gradient None?).

The explanation is computed from a tape's own records, so it lives below :mod:`gputape.core.tape`
(whose ``explain``/``summary``/``to_dot`` methods call it); this module keeps the
``gputape.debug.explain`` spelling.
"""

from ..core.explain import REASONS, Explanation, explain, summary, to_dot

__all__ = ["REASONS", "Explanation", "explain", "summary", "to_dot"]
