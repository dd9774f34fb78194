"""How many Python function calls gputape makes in one warm eager training step.

    python -m benchmarks.hops [--batch 32]

The step is a two-layer MLP as a user writes it: ``relu(x @ w1 + b1) @ w2 + b2``, the sparse
softmax cross-entropy and its mean under a ``GradientTape``, then ``tape.gradient`` and
``gt.optim.SGD.apply_gradients``. Every Python frame whose code lives in the gputape package,
generated code included (its file names sit under the package, ``<generated add>``, or start
with ``<gputape``: the expression forwards and the compiled backward), counts once per call,
attributed to the phase of the step it ran in. C functions (numpy's ufuncs, ``dict.get``) are
not Python frames and do not count; numpy's own Python wrappers are outside gputape and do not
count either. A count is deterministic, unlike a time: ``tests/test_hops.py`` bounds it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections import Counter
from typing import Any

import numpy as np

import gputape as gt

_PACKAGE = os.path.dirname(os.path.abspath(gt.__file__))
PHASES = ("tape", "forward", "loss", "tape exit", "gradient", "optimizer")


def _ours(filename: str) -> bool:
    return filename.startswith(_PACKAGE) or filename.startswith("<gputape")


def _name(code: Any) -> str:
    f = code.co_filename
    where = os.path.relpath(f, _PACKAGE) if f.startswith(_PACKAGE) else f
    return f"{where}:{code.co_name}"


def count_step(batch: int = 32, warm: int = 5) -> Counter:
    """``Counter`` of ``(phase, "file:function")`` -> calls in one eager step after ``warm`` steps."""
    rng = np.random.default_rng(0)
    d, h, c = 20, 16, 5
    x = gt.constant(rng.standard_normal((batch, d)).astype(np.float32))
    labels = rng.integers(0, c, batch)
    params = [
        gt.Variable((rng.standard_normal((d, h)) * 0.1).astype(np.float32), name="w1"),
        gt.Variable(np.zeros(h, np.float32), name="b1"),
        gt.Variable((rng.standard_normal((h, c)) * 0.1).astype(np.float32), name="w2"),
        gt.Variable(np.zeros(c, np.float32), name="b2"),
    ]
    w1, b1, w2, b2 = params
    opt = gt.optim.SGD(0.1)
    phase = ["tape"]
    calls: Counter = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and _ours(frame.f_code.co_filename):
            calls[(phase[0], _name(frame.f_code))] += 1

    def step(mark: Any) -> None:
        mark("tape")
        with gt.GradientTape() as tape:
            mark("forward")
            hidden = gt.nn.relu(x @ w1 + b1)
            logits = hidden @ w2 + b2
            mark("loss")
            loss = gt.mean(gt.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
            mark("tape exit")
        mark("gradient")
        grads = tape.gradient(loss, params)
        mark("optimizer")
        opt.apply_gradients(zip(grads, params))

    def quiet(name: str) -> None:
        pass

    def mark(name: str) -> None:
        phase[0] = name

    for _ in range(warm):
        step(quiet)
    # no collection inside the counted step: a __del__ of an earlier object would be counted
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        step(mark)
    finally:
        sys.setprofile(old)
        if was_enabled:
            gc.enable()
    return calls


def report(calls: Counter) -> str:
    """The calls by phase, then by function within each phase (most first)."""
    lines = [f"{sum(calls.values())} Python calls inside gputape in one warm eager MLP step"]
    for p in PHASES:
        mine = {k[1]: n for k, n in calls.items() if k[0] == p}
        lines.append(f"  {p}: {sum(mine.values())}")
        for name, n in sorted(mine.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"    {n:3d}  {name}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    print(report(count_step(ap.parse_args().batch)))


if __name__ == "__main__":
    main()
