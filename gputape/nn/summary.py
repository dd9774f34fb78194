"""Keras 3's ``model.summary()`` table, and the readable name of a layer's function.

>>> from gputape.nn.summary import _readable_bytes
>>> _readable_bytes(84), _readable_bytes(3 * 1024 * 1024)
('84.00 B', '3.00 MB')
"""

from __future__ import annotations

from typing import Any

from ..core.tensor import Variable


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _readable_bytes(n: float) -> str:
    # Keras' summary_utils.readable_memory_size
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TB"  # unreachable


def _summary_text(model: Any, rows: list[tuple[str, str, str]], line_length: int | None) -> str:
    """The table of ``rows`` (name (type), output shape, parameter count), then ``model``'s weight totals."""
    total = line_length or 76
    widths = [max(14, int(total * 0.44)), max(14, int(total * 0.32))]
    widths.append(max(9, total - 4 - sum(widths)))
    # a cell wider than its column widens the column (and the table), rather than pushing the
    # borders after it out of line; Keras' default widths stay for names that fit
    header = ("Layer (type)", "Output Shape", "Param #")
    for k in range(3):
        widths[k] = max(widths[k], *(len(r[k]) + 2 for r in (header, *rows)))

    def line(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * w for w in widths) + right

    def cells(edge: str, vals: tuple[str, str, str]) -> str:
        parts = [f" {vals[0]:<{widths[0] - 2}} ", f" {vals[1]:<{widths[1] - 2}} ", f" {vals[2]:>{widths[2] - 2}} "]
        return edge + edge.join(parts) + edge

    out = [f'Model: "{model.name}"', line("┏", "┳", "┓", "━"), cells("┃", header)]
    out.append(line("┡", "╇", "┩", "━"))
    for i, r in enumerate(rows):
        if i:
            out.append(line("├", "┼", "┤", "─"))
        out.append(cells("│", r))
    out.append(line("└", "┴", "┘", "─"))
    weights = model.weights
    tw = {id(v) for v in model.trainable_weights}

    def count(vs: list[Variable]) -> str:
        return f"{sum(v.size for v in vs):,} ({_readable_bytes(sum(v.nbytes for v in vs))})"

    out.append(f" Total params: {count(weights)}")
    out.append(f" Trainable params: {count([v for v in weights if id(v) in tw])}")
    out.append(f" Non-trainable params: {count([v for v in weights if id(v) not in tw])}")
    return "\n".join(out)
