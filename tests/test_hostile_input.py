"""Hostile input: every public function, called with bad arguments, fails clearly or answers right.

The table lives in ``tests/_hostile.py`` (``PYTHONPATH=. python tests/_hostile.py`` prints the
counts per category and every case that is not ``clear`` or ``result``).

Counts before the boundary fixes (main at 0d1f945, 1512 calls over 94 public functions):
result 426, clear 369, numpy 180, python 174, hostile 158, gputape-other 141, accepted 56, wrong 8.
"""

from __future__ import annotations

import _hostile
import pytest

SPECS = _hostile.specs()


def test_the_table_covers_every_public_function():
    covered = {s.name for s in SPECS} | set(_hostile.SKIPPED)
    missing = sorted(set(_hostile.public_callables()) - covered)
    assert not missing, f"public functions the hostile table neither calls nor skips with a reason: {missing}"


@pytest.mark.xfail(reason="the boundary fixes are not in yet: this commit records the counts", strict=False)
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_every_hostile_call_fails_clearly_or_answers_right(spec):
    names = _hostile._public_names(spec)
    bad = []
    for param, kind in spec.kinds.items():
        for value in _hostile.BAD[kind]:
            o = _hostile.run_one(spec, param, value, names)
            if o.category not in ("clear", "result"):
                bad.append(f"{o.category}: {o.spec}({o.param}={o.bad}): {o.detail[:300]}")
    assert not bad, "\n".join(bad)
