"""``gt.debug``'s name for :mod:`gputape.explain` (why is a gradient None?).

The explanation is computed from a tape's own records, so it lives below :mod:`gputape.tape`
(whose ``explain``/``summary``/``to_dot`` methods call it); this module keeps the
``gputape.debug.explain`` spelling.
"""

from ..explain import REASONS, Explanation, explain, summary, to_dot

__all__ = ["REASONS", "Explanation", "explain", "summary", "to_dot"]
