"""The README's commands and quickstart are what CI and users actually run."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

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


# Every ```python block of the README runs on its own: a newcomer copies one block into a
# fresh file, not the README from the top. A block may opt out only with the line
# `<!-- not run: REASON -->` just before it; a reason "needs the X package" (or "needs X")
# still runs the block where X is importable, and "needs a GPU" runs it where one answers.
_NOT_RUN = re.compile(r"<!--\s*not run:(.*?)-->")
_NEEDS_PACKAGE = re.compile(r"needs (?:the )?`?([A-Za-z_][\w.]*)`?(?: package)?")


def _python_blocks() -> list[tuple[int, str, str | None]]:
    """(line number, code, opt-out reason or None) for each ```python block."""
    blocks = []
    lines = README.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            prev = lines[start - 1] if start else ""
            m = _NOT_RUN.search(prev)
            blocks.append((start + 1, "\n".join(lines[start + 1 : j]) + "\n", m.group(1).strip() if m else None))
            i = j
        i += 1
    return blocks


def _gpu_answers() -> bool:
    code = "import gputape as gt, sys; sys.exit(0 if str(gt.zeros(1).device).startswith('cuda') else 1)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=ENV, timeout=120).returncode == 0


def _skip_reason(reason: str | None) -> str | None:
    """None when the block should run here, else why it is skipped."""
    import importlib.util

    if reason is None:
        return None
    if "gpu" in reason.lower():
        return None if _gpu_answers() else reason
    m = _NEEDS_PACKAGE.search(reason)
    if m and m.group(1) != "a":
        return None if importlib.util.find_spec(m.group(1).split(".")[0]) else reason
    return reason


_BLOCKS = _python_blocks()


def test_readme_python_blocks_are_found():
    assert len(_BLOCKS) >= 5, _BLOCKS
    for line, _code, reason in _BLOCKS:
        assert reason is None or reason, f"README.md:{line}: `<!-- not run: -->` needs a reason"


@pytest.mark.parametrize("line,code,reason", _BLOCKS, ids=[f"README.md:{b[0]}" for b in _BLOCKS])
def test_readme_python_block_runs_on_its_own(line, code, reason, tmp_path):
    assert reason is None or reason, f"README.md:{line}: `<!-- not run: -->` needs a reason"
    why = _skip_reason(reason)
    if why:
        pytest.skip(f"README.md:{line}: {why}")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60, env=ENV
    )
    assert out.returncode == 0, f"README.md:{line} fails on its own:\n{out.stderr}"


def _github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_links_to_its_own_sections_resolve():
    """The table of contents (and every other `](#anchor)` link) points at a real heading."""
    text = re.sub(r"```.*?```", "", README, flags=re.S)
    anchors = {_github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert "quickstart" in links, "the README has a table of contents"
    missing = sorted({a for a in links if a not in anchors})
    assert not missing, f"README links to missing sections: {missing}"


def test_links_into_the_benchmarks_readme_resolve_and_its_headings_say_what_was_measured():
    """README.md links to sections of benchmarks/README.md by anchor: each must exist there, and no
    heading there is named after a work item ("Issue 24", "third session") instead of what it measured."""
    bench = (ROOT / "benchmarks" / "README.md").read_text()
    headings = re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", bench, flags=re.S), flags=re.M)
    anchors = {_github_anchor(h) for h in headings}
    links = re.findall(r"\]\(benchmarks/README\.md#([^)]+)\)", README)
    assert links, "README.md links to the benchmark tables it quotes"
    missing = sorted({a for a in links if a not in anchors})
    assert not missing, f"README.md links to missing sections of benchmarks/README.md: {missing}"
    internal = [h for h in headings if re.search(r"\b(issue|session|deliverable)\b", h, flags=re.I)]
    assert not internal, f"benchmarks/README.md headings named after work items: {internal}"


def test_quickstart_comes_right_after_set_up():
    headings = re.findall(r"^## (.+)$", re.sub(r"```.*?```", "", README, flags=re.S), flags=re.M)
    assert headings[headings.index("Set up") + 1] == "Quickstart", headings
