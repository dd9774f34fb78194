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
    assert blocks[0].strip() == (
        'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[examples]" && python examples/train_mlp.py'
    )
    assert "pytest" in blocks[1]


def _ci_commands() -> list[str]:
    ci = (ROOT / ".ci" / "run").read_text()
    return [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_readme_test_command_first_and_exactly():
    """.ci/run runs the README's test command word for word before it installs anything else.

    Anything installed earlier (torch, say) could hide a test that fails on a user's fresh
    machine, as the torch memory benchmark once did.
    """
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci
    test_cmd = _bash_blocks()[1].strip()
    cmds = _ci_commands()
    assert test_cmd in cmds, f"{test_cmd!r} is not a line of .ci/run"
    before = cmds[: cmds.index(test_cmd)]
    installs = [c for c in before if re.search(r"\b(pip|install|uv|conda)\b", c)]
    assert not installs, f".ci/run installs before the README's command: {installs}"
    after = cmds[cmds.index(test_cmd) + 1 :]
    assert any("torch==" in c for c in after), "the PyTorch comparisons run after the README's command"


def test_quickstart_runs_and_is_short():
    code = re.search(r"```python\n(.*?)```", README, flags=re.S).group(1)
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env=ENV)
    assert out.returncode == 0, out.stderr
    assert "(3, 2) w" in out.stdout


def test_readme_training_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 2, "the README should show the training stack after the quickstart"
    code = blocks[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env=ENV)
    assert out.returncode == 0, out.stderr
    assert "['dense" in out.stdout


def test_main_demo_trains_digits_and_checks_gradients(tmp_path):
    """The README's main job, with its default settings: >= 95% test accuracy on scikit-learn's digits."""
    ckpt = tmp_path / "out" / "mlp.npz"
    out = subprocess.run(
        [sys.executable, "examples/train_mlp.py", "--checkpoint", str(ckpt)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=ENV,
    )
    assert out.returncode == 0, out.stderr
    final = re.search(r"final test accuracy ([0-9.]+)", out.stdout)
    assert final and float(final.group(1)) >= 0.95, out.stdout
    assert "gradient check passed" in out.stdout
    epochs = re.findall(r"epoch +\d+ +loss ([0-9.]+) .*grad norm ([0-9.]+)", out.stdout)
    assert len(epochs) == 20 and float(epochs[-1][0]) < float(epochs[0][0]), out.stdout
    import gputape as gt

    saved = gt.load(ckpt)  # the checkpoint it wrote is a valid gputape checkpoint
    assert "var:model/layers/0/kernel" in saved and "opt:optimizer:iterations" in saved
    assert int(saved["array:epoch"]) == 20


def test_readme_compiled_step_example_runs():
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README, flags=re.S) if "@gt.function" in b]
    assert len(blocks) == 1, "the README shows one gt.function example"
    out = subprocess.run(
        [sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV
    )
    assert out.returncode == 0, out.stderr
    loss, traces = out.stdout.split()
    assert float(loss) > 0 and traces == "1"
