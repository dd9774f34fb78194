"""Gradient health: per-variable gradient statistics, vanishing/exploding flags, a monitor.

:func:`grad_report` turns one step's gradients into a table (one row per
variable); :class:`GradientMonitor` keeps those reports over steps, exposes
them as arrays, draws them (matplotlib) and logs them to TensorBoard
(tensorboardX). Both plotting and logging are optional extras:
``pip install "gputape[debug]"``.

Thresholds (all keyword arguments of :func:`grad_report` and
:class:`GradientMonitor`; the defaults are stated here and in the report):

* **vanishing** when a gradient's L2 norm is below ``vanish_abs`` (``1e-7``),
  or below ``vanish_rel`` (``1e-4``) times the largest finite gradient norm
  among the reported variables (a layer learning ten thousand times slower
  than the fastest one; only checked when two or more variables have
  gradients);
* **exploding** when the norm is above ``explode_abs`` (``1e3``) or the
  gradient holds any NaN or infinity.

A gradient that is ``None`` (the target does not depend on the variable; see
``tape.explain``) gets a row with reason ``'None'`` and no statistics; it is
listed in :attr:`GradReport.none`, not in :attr:`GradReport.flagged`.

Statistics are computed on the gradient's own device in float64 and only the
scalars travel to the host.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.tensor import Tensor
from ..devices import backend

__all__ = ["GradReport", "GradStats", "GradientMonitor", "grad_report"]

# Default thresholds (documented in the module docstring).
VANISH_ABS = 1e-7
VANISH_REL = 1e-4
EXPLODE_ABS = 1e3

# The per-variable statistics a report and the monitor's history carry.
STATS = ("norm", "mean_abs", "max_abs", "zero_fraction", "nonfinite", "update_ratio")


def _install_hint(what: str, package: str) -> ImportError:
    return ImportError(
        f'{what} needs {package}, which is not installed: pip install "gputape[debug]" (or pip install {package})'
    )


@dataclasses.dataclass
class GradStats:
    """One variable's gradient statistics (one row of a :class:`GradReport`).

    ``norm`` is the L2 norm of the gradient, ``mean_abs``/``max_abs`` the mean
    and largest ``|g|``, ``zero_fraction`` the share of exact zeros,
    ``nonfinite`` the number of NaN/inf entries and ``update_ratio``
    ``lr * ||g|| / ||w||`` (``||g|| / ||w||`` without a learning rate; NaN when
    ``||w|| == 0``). For a ``None`` gradient the numbers are NaN, ``reason`` is
    ``'None'``. ``flag`` is ``None``, ``'vanishing'`` or ``'exploding'`` and
    ``reason`` says which threshold fired.
    """

    name: str
    shape: tuple[int, ...]
    norm: float = math.nan
    mean_abs: float = math.nan
    max_abs: float = math.nan
    zero_fraction: float = math.nan
    nonfinite: int = 0
    update_ratio: float = math.nan
    weight_norm: float = math.nan
    flag: str | None = None
    reason: str = ""
    is_none: bool = False


class GradReport:
    """A table of gradient statistics, one row per variable; ``str()`` renders it.

    Build one with :func:`grad_report`. Rows are :class:`GradStats`; index the
    report by position or by variable name.

    >>> import numpy as np
    >>> from gputape.debug import grad_report
    >>> r = grad_report([np.full(4, 1e-9), np.ones(4)], [np.ones(4), np.ones(4)])
    >>> [row.name for row in r.flagged], r["var0"].flag
    (['var0'], 'vanishing')
    """

    def __init__(self, rows: list[GradStats], learning_rate: float | None, thresholds: dict[str, float]) -> None:
        self.rows = rows
        self.learning_rate = learning_rate
        self.thresholds = thresholds

    @property
    def vanish_threshold(self) -> float:
        """The norm below which a row of this report is flagged vanishing.

        ``max(vanish_abs, vanish_rel * largest finite norm)`` when two or more rows have
        finite norms, else ``vanish_abs``: the one rule :func:`grad_report` flags by and
        :meth:`GradientMonitor.plot` draws.
        """
        t = self.thresholds
        finite = [r.norm for r in self.rows if not r.is_none and math.isfinite(r.norm)]
        if len(finite) > 1:
            return max(t["vanish_abs"], t["vanish_rel"] * max(finite))
        return t["vanish_abs"]

    @property
    def flagged(self) -> list[GradStats]:
        """Rows flagged ``'vanishing'`` or ``'exploding'``, in variable order."""
        return [r for r in self.rows if r.flag is not None]

    @property
    def none(self) -> list[GradStats]:
        """Rows whose gradient is ``None`` (see ``tape.explain`` for why)."""
        return [r for r in self.rows if r.is_none]

    @property
    def ok(self) -> bool:
        """True when no row is flagged and no gradient is ``None``."""
        return not self.flagged and not self.none

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __getitem__(self, key: int | str) -> GradStats:
        if isinstance(key, str):
            for r in self.rows:
                if r.name == key:
                    return r
            raise KeyError(f"grad_report: no variable named {key!r}; names are {[r.name for r in self.rows]}")
        return self.rows[key]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """``{name: {statistic: value}}`` for logging or JSON."""
        return {r.name: dataclasses.asdict(r) for r in self.rows}

    def __str__(self) -> str:
        ratio = "lr*|g|/|w|" if self.learning_rate is not None else "|g|/|w|"
        head = ["variable", "shape", "norm", "mean|g|", "max|g|", "zero%", "nonfinite", ratio, "flag"]
        body = []
        for r in self.rows:
            shape = "x".join(map(str, r.shape)) if r.shape else "()"
            if r.is_none:
                body.append([r.name, shape, "None", "", "", "", "", "", "None gradient"])
                continue
            body.append(
                [
                    r.name,
                    shape,
                    _fmt(r.norm),
                    _fmt(r.mean_abs),
                    _fmt(r.max_abs),
                    f"{100 * r.zero_fraction:.1f}",
                    str(r.nonfinite),
                    _fmt(r.update_ratio),
                    f"{r.flag}: {r.reason}" if r.flag else "",
                ]
            )
        widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
        # name and shape left-aligned, numbers right-aligned, flag column free-form
        align = ["<", "<", ">", ">", ">", ">", ">", ">", "<"]

        def line(cells: list[str]) -> str:
            return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths)).rstrip()

        t = self.thresholds
        out = [line(head), line(["-" * w for w in widths])]
        out += [line(b) for b in body]
        out.append(
            f"thresholds: vanishing if norm < {t['vanish_abs']:g} or < {t['vanish_rel']:g} x largest norm; "
            f"exploding if norm > {t['explode_abs']:g} or non-finite"
        )
        flagged, none = self.flagged, self.none
        summary = f"{len(flagged)} flagged" + (
            f": {', '.join(f'{r.name} ({r.flag})' for r in flagged)}" if flagged else ""
        )
        if none:
            summary += f"; {len(none)} None gradient(s): {', '.join(r.name for r in none)}"
        out.append(summary)
        return "\n".join(out)

    __repr__ = __str__


def _distinct_colours(n: int, colormaps: Any) -> list[Any]:
    """``n`` different colours: the qualitative tab10/tab20 while they last, then evenly spaced hues."""
    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["turbo"](x) for x in np.linspace(0.04, 0.96, n)]


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3e}"


def _raw(x: Any) -> Any:
    """The raw array behind a Tensor/Variable/array-like (cupy arrays stay on the device)."""
    if isinstance(x, Tensor):
        return x._data
    if hasattr(x, "__cuda_array_interface__") or isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def _as_list(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _name_of(v: Any, i: int) -> str:
    name = getattr(v, "name", None)
    return name if isinstance(name, str) and name else f"var{i}"


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else f"{n}_{k}")
    return out


def _stats(g: Any, w: Any) -> tuple[float, float, float, float, int, float]:
    """norm, mean|g|, max|g|, zero fraction, non-finite count, ||w|| -- on g's device."""
    xp = backend.xp_of(g)
    gf = g.astype(np.float64, copy=False).ravel()
    n = gf.size
    with np.errstate(all="ignore"):
        a = xp.abs(gf)
        norm = float(xp.sqrt(xp.sum(gf * gf)))
        mean_abs = float(xp.mean(a)) if n else 0.0
        max_abs = float(xp.max(a)) if n else 0.0
        zero = float(xp.count_nonzero(gf == 0)) / n if n else 0.0
        nonfinite = int(n - int(xp.count_nonzero(xp.isfinite(gf))))
        wnorm = math.nan
        if w is not None:
            wf = w.astype(np.float64, copy=False).ravel()
            wnorm = float(backend.xp_of(w).sqrt(backend.xp_of(w).sum(wf * wf)))
    return norm, mean_abs, max_abs, zero, nonfinite, wnorm


def grad_report(
    grads: Any,
    variables: Any = None,
    learning_rate: float | None = None,
    *,
    names: Sequence[str] | None = None,
    vanish_abs: float = VANISH_ABS,
    vanish_rel: float = VANISH_REL,
    explode_abs: float = EXPLODE_ABS,
) -> GradReport:
    """Gradient statistics per variable, with vanishing and exploding layers flagged.

    ``grads`` and ``variables`` are parallel lists (or dicts with the same keys,
    whose keys become the names) of gt Tensors/Variables or arrays; a gradient
    may be ``None``. Names come from ``names``, the dict keys, or each
    variable's ``.name`` (``var0``, ``var1``, ... otherwise). ``variables`` may
    be omitted (no update ratio then).

    Each row has the gradient's L2 norm, mean and max ``|g|``, the fraction of
    exact zeros, the number of non-finite entries, and the update/weight ratio
    ``learning_rate * ||g|| / ||w||`` (``||g|| / ||w||`` when no learning rate
    is given). A row is flagged ``'vanishing'`` when its norm is below
    ``vanish_abs`` (default 1e-7) or below ``vanish_rel`` (default 1e-4) times
    the largest norm in the report, and ``'exploding'`` when its norm exceeds
    ``explode_abs`` (default 1e3) or it holds NaN/inf.

    >>> import gputape as gt
    >>> w = gt.Variable([[1.0, 2.0], [3.0, 4.0]], name="w")
    >>> b = gt.Variable([0.0, 0.0], name="b")
    >>> with gt.GradientTape() as tape:
    ...     loss = gt.sum(w * w) * 1e-9
    >>> report = gt.debug.grad_report(tape.gradient(loss, [w, b]), [w, b], learning_rate=0.1)
    >>> report["w"].flag, report["b"].reason
    ('vanishing', 'None')
    >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
    variable  shape       norm    mean|g|     max|g|  zero%  nonfinite  lr*|g|/|w|  flag
    --------  -----  ---------  ---------  ---------  -----  ---------  ----------  -------------------------------
    w         2x2    1.095e-08  5.000e-09  8.000e-09    0.0          0   2.000e-10  vanishing: norm 1.1e-08 < 1e-07
    b         2           None                                                      None gradient
    thresholds: vanishing if norm < 1e-07 or < 0.0001 x largest norm; exploding if norm > 1000 or non-finite
    1 flagged: w (vanishing); 1 None gradient(s): b
    """
    if isinstance(grads, dict):
        keys = list(grads)
        if variables is not None and not isinstance(variables, dict):
            raise TypeError("grad_report: grads is a dict, so variables must be a dict with the same keys (or None)")
        vlist = [variables.get(k) if variables is not None else None for k in keys]
        glist = [grads[k] for k in keys]
        auto = [str(k) for k in keys]
    else:
        glist = _as_list(grads)
        vlist = _as_list(variables) if variables is not None else [None] * len(glist)
        if len(vlist) != len(glist):
            raise ValueError(
                f"grad_report: got {len(glist)} gradients for {len(vlist)} variables; pass them in the same order, "
                "as tape.gradient(loss, variables) returns them"
            )
        auto = [_name_of(v, i) for i, v in enumerate(vlist)]
    if names is not None:
        if len(names) != len(glist):
            raise ValueError(f"grad_report: got {len(names)} names for {len(glist)} gradients")
        auto = [str(n) for n in names]
    labels = _unique(auto)

    rows = []
    for name, g, v in zip(labels, glist, vlist):
        w = _raw(v) if v is not None else None
        if g is None:
            shape = tuple(w.shape) if w is not None else ()
            rows.append(GradStats(name=name, shape=shape, reason="None", is_none=True))
            continue
        ga = _raw(g)
        if w is not None and tuple(w.shape) != tuple(ga.shape):
            raise ValueError(
                f"grad_report: the gradient for {name!r} has shape {tuple(ga.shape)} but the variable has shape "
                f"{tuple(w.shape)}; are grads and variables in the same order?"
            )
        norm, mean_abs, max_abs, zero, nonfinite, wnorm = _stats(ga, w)
        scale = learning_rate if learning_rate is not None else 1.0
        ratio = scale * norm / wnorm if wnorm > 0 else math.nan
        rows.append(
            GradStats(
                name=name,
                shape=tuple(ga.shape),
                norm=norm,
                mean_abs=mean_abs,
                max_abs=max_abs,
                zero_fraction=zero,
                nonfinite=nonfinite,
                update_ratio=ratio,
                weight_norm=wnorm,
            )
        )

    thresholds = {"vanish_abs": vanish_abs, "vanish_rel": vanish_rel, "explode_abs": explode_abs}
    report = GradReport(rows, learning_rate, thresholds)
    vanish = report.vanish_threshold
    for r in rows:
        if r.is_none:
            continue
        if r.nonfinite:
            r.flag, r.reason = "exploding", f"{r.nonfinite} non-finite value(s)"
        elif r.norm > explode_abs:
            r.flag, r.reason = "exploding", f"norm {r.norm:.2g} > {explode_abs:g}"
        elif r.norm < vanish_abs:
            r.flag, r.reason = "vanishing", f"norm {r.norm:.2g} < {vanish_abs:g}"
        elif r.norm < vanish:
            r.flag = "vanishing"
            r.reason = f"norm {r.norm:.2g} < {vanish_rel:g} x largest norm {vanish / vanish_rel:.2g}"
    return report


class GradientMonitor:
    """Record :func:`grad_report` over training steps; plot it or log it to TensorBoard.

    ``record(step, grads, variables)`` computes and keeps one report (and logs
    it to an attached TensorBoard writer). The history is available as arrays:
    :attr:`steps` (shape ``[n_steps]``), :meth:`array` (``[n_steps, n_vars]``
    for one statistic, NaN where a variable was absent or its gradient None),
    and :attr:`names`. Threshold keyword arguments are passed to
    :func:`grad_report`.

    ``writer`` may be any object with ``add_scalar(tag, value, step)`` (a
    tensorboardX or torch ``SummaryWriter``); :meth:`to_tensorboard` creates a
    tensorboardX writer for you.

    >>> import numpy as np
    >>> from gputape.debug import GradientMonitor
    >>> mon = GradientMonitor(learning_rate=0.1)
    >>> for step in range(3):
    ...     _ = mon.record(step, [np.full(3, 10.0 ** -step)], [np.ones(3)])
    >>> mon.steps.tolist(), mon.names
    ([0, 1, 2], ['var0'])
    >>> np.round(mon.array("norm")[:, 0], 4).tolist()
    [1.7321, 0.1732, 0.0173]
    """

    def __init__(
        self,
        learning_rate: float | None = None,
        *,
        writer: Any = None,
        tag_prefix: str = "gradients",
        **thresholds: float,
    ) -> None:
        unknown = set(thresholds) - {"vanish_abs", "vanish_rel", "explode_abs"}
        if unknown:
            raise TypeError(
                f"GradientMonitor: unknown keyword(s) {sorted(unknown)}; thresholds are vanish_abs, vanish_rel, "
                "explode_abs"
            )
        self.learning_rate = learning_rate
        self.thresholds = thresholds
        self.writer = writer
        self.tag_prefix = tag_prefix
        self.reports: list[GradReport] = []
        self._steps: list[int] = []
        self._names: dict[str, int] = {}  # name -> column, first-seen order
        self._own_writer = False

    def record(self, step: int, grads: Any, variables: Any = None, **kwargs: Any) -> GradReport:
        """Compute ``grad_report(grads, variables)`` for ``step``, keep it, log it; return it."""
        lr = kwargs.pop("learning_rate", self.learning_rate)
        report = grad_report(grads, variables, lr, **{**self.thresholds, **kwargs})
        self.reports.append(report)
        self._steps.append(int(step))
        for r in report.rows:
            self._names.setdefault(r.name, len(self._names))
        if self.writer is not None:
            self._log(int(step), report)
        return report

    @property
    def steps(self) -> np.ndarray:
        """The recorded steps, shape ``[n_steps]``."""
        return np.asarray(self._steps, dtype=np.int64)

    @property
    def names(self) -> list[str]:
        """Variable names in first-recorded order (the columns of :meth:`array`)."""
        return list(self._names)

    def array(self, stat: str = "norm") -> np.ndarray:
        """One statistic over steps: shape ``[n_steps, n_vars]``, NaN where absent or None."""
        if stat not in STATS:
            raise ValueError(f"GradientMonitor.array: unknown statistic {stat!r}; choose one of {STATS}")
        out = np.full((len(self.reports), len(self._names)), np.nan)
        for i, rep in enumerate(self.reports):
            for r in rep.rows:
                if not r.is_none:
                    out[i, self._names[r.name]] = getattr(r, stat)
        return out

    @property
    def history(self) -> dict[str, np.ndarray]:
        """Every statistic as an array ``[n_steps, n_vars]``, plus ``'step'``."""
        h = {s: self.array(s) for s in STATS}
        h["step"] = self.steps
        return h

    def flags(self) -> list[tuple[int, str, str]]:
        """``(step, variable, 'vanishing'|'exploding'|'None')`` for every flagged row."""
        out = []
        for step, rep in zip(self._steps, self.reports):
            for r in rep.rows:
                if r.flag or r.is_none:
                    out.append((step, r.name, r.flag or "None"))
        return out

    def figure(self, stat: str = "norm", logy: bool = True) -> Any:
        """The plot of ``stat`` per variable over steps as a matplotlib ``Figure`` (no pyplot state).

        What is drawn is what the reports say. Every variable has its own colour however
        many there are (tab10/tab20, then evenly spaced hues of a continuous map, with line
        styles cycling), and the legend sits outside the axes. For ``stat="norm"`` both
        thresholds are drawn as :func:`grad_report` applies them: the exploding line at
        ``explode_abs``, and the vanishing threshold per step, ``max(vanish_abs, vanish_rel x
        the step's largest norm)`` (:attr:`GradReport.vanish_threshold`); each flagged value is
        marked (down triangles: vanishing; up triangles: exploding; crosses at the top edge:
        non-finite). Artists carry gids (``grad:<name>``, ``threshold:vanishing``,
        ``threshold:exploding``, ``flags:vanishing``, ``flags:exploding``,
        ``flags:nonfinite``) so that tests and users can find them.

        Needs matplotlib (``pip install "gputape[debug]"``).
        """
        try:
            from matplotlib import colormaps
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
            from matplotlib.transforms import blended_transform_factory
        except ImportError:
            raise _install_hint("GradientMonitor.plot", "matplotlib") from None
        data = self.array(stat)
        names = list(self._names)
        n = len(names)
        ncol = 1 + (n + 4) // 20  # about 20 legend rows fit beside 4.5 inches of axes
        fig = Figure(figsize=(8 + 1.6 * ncol, 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        steps = self.steps
        colours = _distinct_colours(n, colormaps)
        styles = ("-", "--", "-.", ":")
        marker = "." if len(steps) < 50 else None
        for j, name in enumerate(names):
            y = data[:, j]
            if logy:
                y = np.where(y > 0, y, np.nan)  # zeros and NaN cannot sit on a log axis
            ax.plot(
                steps,
                y,
                color=colours[j],
                linestyle=styles[(j // 20) % 4] if n > 20 else "-",
                marker=marker,
                label=name,
                gid=f"grad:{name}",
            )
        if stat == "norm" and self.reports:
            t = self.reports[-1].thresholds
            vanish = np.array([rep.vanish_threshold for rep in self.reports])
            # Per step, as each report applied them (record() may pass other thresholds per call).
            explode = np.array([rep.thresholds["explode_abs"] for rep in self.reports])
            for y, colour, label, gid in (
                (vanish, "0.25", f"vanishing: < max({t['vanish_abs']:g}, {t['vanish_rel']:g} x largest)", "vanishing"),
                (explode, "red", f"exploding: > {t['explode_abs']:g} or non-finite", "exploding"),
            ):
                ax.plot(
                    steps,
                    y,
                    color=colour,
                    linestyle="--",
                    linewidth=1.5,
                    drawstyle="steps-mid",
                    label=label,
                    gid=f"threshold:{gid}",
                )
            pts: dict[str, list[tuple[int, float]]] = {"vanishing": [], "exploding": [], "nonfinite": []}
            for step, rep in zip(self._steps, self.reports):
                for r in rep.rows:
                    if r.flag is None:
                        continue
                    kind = "nonfinite" if r.flag == "exploding" and not math.isfinite(r.norm) else r.flag
                    pts[kind].append((step, r.norm if kind != "nonfinite" else 1.0))  # 1.0: the axes' top
            top = blended_transform_factory(ax.transData, ax.transAxes)
            for kind, m, c in (("vanishing", "v", "0.2"), ("exploding", "^", "red"), ("nonfinite", "X", "red")):
                if pts[kind]:
                    xs, ys = zip(*pts[kind])
                    ax.scatter(
                        xs,
                        ys,
                        marker=m,
                        s=36,
                        facecolors="none" if kind == "vanishing" else c,
                        edgecolors=c,
                        zorder=3,
                        label=f"flagged {kind}",
                        gid=f"flags:{kind}",
                        **({"transform": top, "clip_on": False} if kind == "nonfinite" else {}),
                    )
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel(f"gradient {stat}")
        ax.set_title(f"gradient {stat} per variable")
        ax.grid(True, alpha=0.3)
        fig.legend(loc="outside right upper", fontsize="small", ncol=ncol)
        return fig

    def plot(self, path: str | os.PathLike, stat: str = "norm", logy: bool = True) -> str:
        """Draw :meth:`figure` into an image file (PNG, SVG, PDF); return its path.

        Needs matplotlib (``pip install "gputape[debug]"``); uses no pyplot
        state, so it works headless and leaves the user's backend alone.
        """
        fig = self.figure(stat, logy)
        path = os.fspath(path)
        fig.savefig(path)
        return path

    def to_tensorboard(self, logdir: str | os.PathLike) -> Any:
        """Attach a tensorboardX ``SummaryWriter`` on ``logdir``, write the history so far; return it.

        Later :meth:`record` calls log as they happen. Tags are
        ``<tag_prefix>/<statistic>/<variable>``. Needs tensorboardX
        (``pip install "gputape[debug]"``); call :meth:`close` when done.
        """
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise _install_hint("GradientMonitor.to_tensorboard", "tensorboardX") from None
        if self.writer is not None and self._own_writer:
            self.writer.close()
        self.writer = SummaryWriter(logdir=os.fspath(logdir))
        self._own_writer = True
        for step, rep in zip(self._steps, self.reports):
            self._log(step, rep)
        self.writer.flush()
        return self.writer

    def _log(self, step: int, report: GradReport) -> None:
        p = self.tag_prefix
        for r in report.rows:
            if r.is_none:
                continue
            for stat in STATS:
                v = float(getattr(r, stat))
                if math.isnan(v) and stat == "update_ratio":
                    continue
                self.writer.add_scalar(f"{p}/{stat}/{r.name}", v, step)

    def close(self) -> None:
        """Flush and close the writer that :meth:`to_tensorboard` opened (a passed-in one is only flushed)."""
        if self.writer is None:
            return
        if self._own_writer:
            self.writer.close()
            self.writer = None
            self._own_writer = False
        elif hasattr(self.writer, "flush"):
            self.writer.flush()
