"""The README's commands and quickstart are what CI and users actually run."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the subprocesses import gputape from this checkout even where it is not installed
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
README = (ROOT / "README.md").read_text()


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_readme_has_exactly_two_setup_commands():
    blocks = _bash_blocks()
    assert len(blocks) == 2, blocks
    assert "examples/" in blocks[0]
    assert "pytest" in blocks[1]


def test_ci_runs_the_readme_install_and_test_commands():
    """.ci/run must use the README's own install and test commands (a missing step fails CI, not a user)."""
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = _bash_blocks()[1].strip()
    parts = [p.strip() for p in test_cmd.split("&&")]
    install = next(p for p in parts if p.startswith("pip install"))
    run = next(p for p in parts if "pytest" in p)
    ci_lines = [line.strip() for line in ci.splitlines()]
    assert install in ci_lines, f"{install!r} not in .ci/run"
    assert run in ci_lines, f"{run!r} not in .ci/run"
    assert "python3 -m venv" in ci and "set -euo pipefail" in ci


def test_quickstart_runs_and_is_short():
    code = re.search(r"```python\n(.*?)```", README, flags=re.S).group(1)
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env=ENV)
    assert out.returncode == 0, out.stderr
    assert "(3, 2) w" in out.stdout


def test_main_demo_trains_and_checks_gradients():
    out = subprocess.run(
        [sys.executable, "examples/train_mlp.py", "--epochs", "15"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=ENV,
    )
    assert out.returncode == 0, out.stderr
    final = re.search(r"final test accuracy ([0-9.]+)", out.stdout)
    assert final and float(final.group(1)) >= 0.9, out.stdout
    assert "gradient check passed" in out.stdout
