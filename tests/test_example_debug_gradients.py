"""examples/debug_gradients.py runs and tells the three stories, with the right lines."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gputape as gt

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "debug_gradients.py"

pytestmark = pytest.mark.skipif(
    not (hasattr(gt.GradientTape, "explain") and hasattr(gt.debug, "check_numerics")),
    reason="needs tape.explain and gt.debug.check_numerics (the lead's part of the debugging issue)",
)


def _line_of(marker: str) -> int:
    lines = EXAMPLE.read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if marker in line]
    assert len(hits) == 1, marker
    return hits[0]


def test_debug_gradients_example(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plot = tmp_path / "norms.png"
    proc = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", str(EXAMPLE), "--plot", str(plot)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # (a) the early layers of the sigmoid MLP are flagged, the last one is not; the ReLU fix flags none
    first = out[out.index("variable") : out.index("flagged:", out.index("variable"))]
    flagged = re.findall(r"^(w\d+) .*vanishing", first, re.M)
    assert "w0" in flagged and "w11" not in flagged
    assert "with ReLU + He init instead: flagged = []" in out
    # (b) the log(0) is traced to its line in the forward pass; sqrt's gradient to its forward line
    log_line = _line_of("# <- log(0)")
    assert re.search(
        rf"gt\.log created a non-finite value in the forward pass at \S*debug_gradients\.py:{log_line}\b", out
    )
    sqrt_line = _line_of("# <- d sqrt(u)/du")
    assert re.search(
        rf"gt\.sqrt .*created a non-finite value in the backward pass.*debug_gradients\.py:{sqrt_line}\b", out
    )
    # (c) the None gradient is explained as having left the tape, at the .numpy() line
    numpy_line = _line_of("# <- leaves the tape")
    assert re.search(rf"\[left_tape\] \(at \S*debug_gradients\.py:{numpy_line}\)", out)
    assert "UnconnectedGradientError" in out
    if plot.exists():  # only with matplotlib installed
        assert plot.stat().st_size > 1000
    else:
        assert "no plot" in out
