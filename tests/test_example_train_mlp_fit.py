"""The README's main job with --fit: the same digits MLP trained by model.compile/model.fit."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_train_mlp_fit_reaches_95_percent_with_keras_progress_lines():
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")  # the example's extra
    out = subprocess.run(
        [sys.executable, "examples/train_mlp.py", "--fit", "--device", "cpu"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=ENV,
    )
    assert out.returncode == 0, out.stderr
    final = re.search(r"final test accuracy ([0-9.]+) \(test loss [0-9.]+\) after 20 epochs .*model\.fit", out.stdout)
    assert final and float(final.group(1)) >= 0.95, out.stdout
    assert "\r" not in out.stdout  # piped output is a log: Keras' line per epoch, no progress bar redraws
    text = out.stdout
    assert [f"Epoch {e}/20" for e in range(1, 21)] == re.findall(r"^Epoch \d+/20$", text, flags=re.M)
    logs = r" - loss: ([0-9.]+) - accuracy: ([0-9.]+) - val_loss: [0-9.]+ - val_accuracy: ([0-9.]+)$"
    ends = re.findall(r"^45/45 .*" + logs, text, flags=re.M)
    assert len(ends) == 20 and float(ends[-1][0]) < float(ends[0][0]), out.stdout
    assert float(ends[-1][2]) == pytest.approx(float(final.group(1)), abs=5e-4)  # the last val_accuracy is the test's


def test_fit_and_distributed_do_not_combine():
    out = subprocess.run(
        [sys.executable, "examples/train_mlp.py", "--fit", "--distributed"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=ENV,
    )  # fmt: skip
    assert out.returncode != 0 and "--fit and --distributed do not combine" in out.stderr
