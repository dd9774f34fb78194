"""gt.debug.grad_report and GradientMonitor: statistics against numpy, flags, None, history, plot, TensorBoard."""

import math

import numpy as np
import pytest

import gputape as gt
from gputape.debug import GradientMonitor, grad_report
from gputape.debug.health import EXPLODE_ABS, VANISH_ABS, VANISH_REL


def _mlp_grads(depth, scale, act, seed=0, width=16):
    """Gradients of a deep MLP: w_k ~ N(0, scale^2 / width), activation ``act``."""
    rng = np.random.default_rng(seed)
    ws = [
        gt.Variable((rng.standard_normal((width, width)) * scale / np.sqrt(width)).astype("float64"), name=f"w{k}")
        for k in range(depth)
    ]
    x = gt.constant(rng.standard_normal((8, width)))
    with gt.GradientTape() as tape:
        h = x
        for w in ws:
            h = act(h @ w)
        loss = gt.sum(h * h)
    return tape.gradient(loss, ws), ws


def test_statistics_match_numpy():
    rng = np.random.default_rng(1)
    g = rng.standard_normal((5, 4)).astype("float32")
    g[0] = 0.0
    w = rng.standard_normal((5, 4)).astype("float32")
    r = grad_report([gt.constant(g)], [gt.Variable(w, name="layer")], learning_rate=0.01)
    row = r["layer"]
    g64 = g.astype(np.float64)
    assert row.name == "layer" and row.shape == (5, 4)
    assert row.norm == pytest.approx(np.linalg.norm(g64), rel=1e-12)
    assert row.mean_abs == pytest.approx(np.abs(g64).mean(), rel=1e-12)
    assert row.max_abs == pytest.approx(np.abs(g64).max(), rel=1e-12)
    assert row.zero_fraction == pytest.approx(4 / 20)
    assert row.nonfinite == 0
    assert row.update_ratio == pytest.approx(0.01 * np.linalg.norm(g64) / np.linalg.norm(w.astype(np.float64)))
    assert row.flag is None and r.flagged == [] and r.ok


def test_ratio_without_learning_rate_and_zero_weight():
    r = grad_report([np.full(4, 2.0), np.ones(2)], [np.ones(4), np.zeros(2)])
    assert r[0].update_ratio == pytest.approx(2.0)  # ||g|| / ||w|| = 4 / 2
    assert math.isnan(r[1].update_ratio)  # a zero weight has no ratio
    assert "|g|/|w|" in str(r) and "lr*" not in str(r)


def test_raw_arrays_plain_lists_dicts_and_default_names():
    r = grad_report([np.ones(3), [1.0, 2.0]], None)
    assert [x.name for x in r] == ["var0", "var1"]
    assert math.isnan(r[0].update_ratio)
    d = grad_report({"a": np.ones(2), "b": np.ones(2)}, {"a": np.ones(2), "b": np.ones(2)})
    assert [x.name for x in d] == ["a", "b"]
    same = grad_report([np.ones(2), np.ones(2)], [gt.Variable([1.0, 1.0], name="w")] * 2)
    assert [x.name for x in same] == ["w", "w_1"]
    single = grad_report(np.ones(3), np.ones(3))
    assert len(single) == 1


def test_nonfinite_counted_and_flagged_exploding():
    g = np.array([1.0, np.nan, np.inf, -np.inf, 0.0])
    r = grad_report([g], [np.ones(5)])
    assert r[0].nonfinite == 3
    assert r[0].flag == "exploding" and "non-finite" in r[0].reason
    assert r.flagged == [r[0]]


def test_none_gradient_row():
    w = gt.Variable([1.0, 2.0], name="w")
    unused = gt.Variable([[1.0]], name="unused")
    with gt.GradientTape() as tape:
        loss = gt.sum(w * w)
    r = grad_report(tape.gradient(loss, [w, unused]), [w, unused])
    row = r["unused"]
    assert row.is_none and row.reason == "None" and row.shape == (1, 1) and row.flag is None
    assert math.isnan(row.norm)
    assert r.none == [row] and r.flagged == [] and not r.ok
    text = str(r)
    assert "None gradient" in text and "1 None gradient(s): unused" in text


def test_constructed_vanishing_network_flagged():
    # 12 sigmoid layers with small weights: sigmoid' <= 1/4 and |w| << 1 shrink the
    # gradient by > 10x per layer, so the first layers fall below 1e-4 x the last one.
    grads, ws = _mlp_grads(12, 0.5, gt.nn.sigmoid)
    r = grad_report(grads, ws)
    norms = [row.norm for row in r]
    assert norms[0] < VANISH_REL * max(norms)
    flagged = {row.name for row in r.flagged}
    assert "w0" in flagged and "w11" not in flagged
    assert all(row.flag == "vanishing" for row in r.flagged)
    # the early layers are flagged by the absolute rule, the middle ones by the relative rule
    assert "< 1e-07" in r["w0"].reason
    assert any("x largest norm" in row.reason for row in r.flagged)
    assert "vanishing" in str(r)


def test_constructed_exploding_network_flagged():
    # 8 linear layers with gain 4: the gradient grows ~4x per layer towards the input.
    grads, ws = _mlp_grads(8, 4.0, lambda h: h)
    r = grad_report(grads, ws)
    assert r["w0"].norm > EXPLODE_ABS
    assert r["w0"].flag == "exploding" and "> 1000" in r["w0"].reason
    assert all(row.flag != "vanishing" for row in r)


def test_absolute_vanishing_threshold_and_custom_thresholds():
    r = grad_report([np.full(3, 1e-9)], [np.ones(3)])
    assert r[0].flag == "vanishing" and f"< {VANISH_ABS:g}" in r[0].reason
    r = grad_report([np.full(3, 1e-9)], [np.ones(3)], vanish_abs=1e-12)
    assert r[0].flag is None  # a single variable: the relative rule does not apply
    r = grad_report([np.full(3, 10.0)], [np.ones(3)], explode_abs=5.0)
    assert r[0].flag == "exploding"
    assert r.thresholds == {"vanish_abs": VANISH_ABS, "vanish_rel": VANISH_REL, "explode_abs": 5.0}


def test_table_is_aligned():
    r = grad_report([np.ones(3), None, np.full((2, 2), 1e-12)], [np.ones(3), np.ones(4), np.ones((2, 2))])
    lines = str(r).splitlines()
    header, rule, rows = lines[0], lines[1], lines[2:5]
    assert header.split() == ["variable", "shape", "norm", "mean|g|", "max|g|", "zero%", "nonfinite", "|g|/|w|", "flag"]
    # the gaps between the rule's dashes are blank in the header and in every row
    gaps = [i for i, c in enumerate(rule) if c == " "]
    assert len(gaps) == 2 * 8
    for line in [header, *rows]:
        assert all(i >= len(line) or line[i] == " " for i in gaps), line
    assert "thresholds:" in lines[-2] and "1e-07" in lines[-2] and "1000" in lines[-2]


def test_mismatched_inputs_are_loud():
    with pytest.raises(ValueError, match="2 gradients for 1 variables"):
        grad_report([np.ones(2), np.ones(2)], [np.ones(2)])
    with pytest.raises(ValueError, match="same order"):
        grad_report([np.ones(2)], [np.ones(3)])


def test_monitor_history():
    mon = GradientMonitor(learning_rate=0.5)
    a, b = gt.Variable([1.0, 1.0], name="a"), gt.Variable([2.0], name="b")
    for step in range(4):
        with gt.GradientTape() as tape:
            loss = gt.sum(a * a) * 10.0**-step + (gt.sum(b * b) if step != 2 else 0.0)
        grads = tape.gradient(loss, [a, b])
        rep = mon.record(step * 10, grads, [a, b])
        assert rep is mon.reports[-1]
    assert mon.steps.tolist() == [0, 10, 20, 30]
    assert mon.names == ["a", "b"]
    norms = mon.array("norm")
    assert norms.shape == (4, 2)
    expected_a = [np.linalg.norm([2.0, 2.0]) * 10.0**-s for s in range(4)]
    np.testing.assert_allclose(norms[:, 0], expected_a, rtol=1e-6)
    assert np.isnan(norms[2, 1])  # b's gradient is None at step 20
    h = mon.history
    assert set(h) == {"norm", "mean_abs", "max_abs", "zero_fraction", "nonfinite", "update_ratio", "step"}
    np.testing.assert_allclose(h["update_ratio"][:, 0], 0.5 * np.array(expected_a) / np.sqrt(2), rtol=1e-6)
    assert (20, "b", "None") in mon.flags()
    with pytest.raises(ValueError, match="unknown statistic"):
        mon.array("nope")
    with pytest.raises(TypeError, match="thresholds are"):
        GradientMonitor(vanish=1.0)


def test_monitor_with_custom_writer():
    class Writer:
        def __init__(self):
            self.calls = []

        def add_scalar(self, tag, value, step):
            self.calls.append((tag, value, step))

    w = Writer()
    mon = GradientMonitor(writer=w)
    mon.record(3, [np.ones(2)], [np.ones(2)])
    tags = {t for t, _, _ in w.calls}
    assert "gradients/norm/var0" in tags and all(s == 3 for _, _, s in w.calls)


def test_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'gputape[debug]')")
    mon = GradientMonitor()
    for step in range(5):
        mon.record(step, [np.full(3, 0.1 * (step + 1)), np.zeros(2)], [np.ones(3), np.ones(2)])
    out = mon.plot(tmp_path / "norms.png")
    data = open(out, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_tensorboard(tmp_path):
    pytest.importorskip("tensorboardX", reason="tensorboardX not installed (pip install 'gputape[debug]')")
    from tensorboardX.event_file_writer import EventFileWriter  # noqa: F401 - the package is usable

    mon = GradientMonitor()
    mon.record(0, [np.ones(2)], [np.ones(2)])
    mon.to_tensorboard(tmp_path)
    mon.record(1, [np.ones(2) * 2], [np.ones(2)])
    mon.close()
    files = list(tmp_path.glob("events.out.tfevents.*"))
    assert files and files[0].stat().st_size > 0
    from tensorboardX.proto import event_pb2

    raw = files[0].read_bytes()
    # TFRecord framing: u64 length, u32 crc, payload, u32 crc
    scalars, pos = [], 0
    while pos < len(raw):
        n = int.from_bytes(raw[pos : pos + 8], "little")
        ev = event_pb2.Event.FromString(raw[pos + 12 : pos + 12 + n])
        pos += 16 + n
        scalars += [(v.tag, v.simple_value, ev.step) for v in ev.summary.value]
    assert ("gradients/norm/var0", pytest.approx(np.sqrt(2)), 0) in scalars
    assert ("gradients/norm/var0", pytest.approx(np.sqrt(8)), 1) in scalars


def test_missing_optional_packages_say_what_to_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith(("matplotlib", "tensorboardX")):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    mon = GradientMonitor()
    mon.record(0, [np.ones(2)], [np.ones(2)])
    with pytest.raises(ImportError, match=r"pip install \"gputape\[debug\]\""):
        mon.plot("x.png")
    with pytest.raises(ImportError, match="tensorboardX"):
        mon.to_tensorboard("logs")


def _deep_sigmoid_monitor(layers: int = 24, steps: int = 6) -> GradientMonitor:
    """A real network whose report has vanishing layers (deep sigmoid chain), an exploding one
    (a huge last layer) and, at one step, a non-finite gradient."""
    rng = np.random.default_rng(0)
    ws = [gt.Variable(rng.normal(0.0, 0.5, (8, 8)), name=f"w{i}") for i in range(layers)]
    ws[-1].assign(ws[-1].numpy() * 60.0)  # a linear head 60x too large: the last layers explode
    mon = GradientMonitor()
    for step in range(steps):
        x = rng.normal(size=(4, 8))
        with gt.GradientTape() as tape:
            h = x
            for w in ws[:-1]:
                h = gt.nn.sigmoid(h @ w)  # each sigmoid shrinks the gradient by <= 4x: the first layers vanish
            out = h @ ws[-1]
            loss = gt.sum(out * out)
        grads = [g.numpy() for g in tape.gradient(loss, ws)]
        if step == 3:
            grads[layers // 2][0, 0] = np.nan
        mon.record(step, grads, [w.numpy() for w in ws])
    return mon


def test_plot_draws_what_the_report_says(tmp_path):
    """Distinct colours for 24 layers, the legend outside the data, both thresholds as the report
    applies them, and exactly the flagged values marked (issue 16)."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'gputape[debug]')")
    mon = _deep_sigmoid_monitor()
    flags = [(s, n, f) for s, n, f in mon.flags() if f != "None"]
    kinds = {f for _, _, f in flags}
    assert kinds == {"vanishing", "exploding"}, flags  # the constructed net has both
    rows = [r for rep in mon.reports for r in rep.rows]
    assert any(r.flag == "vanishing" and r.norm < VANISH_ABS for r in rows), "some layer vanishes by the absolute rule"
    assert any(r.flag == "vanishing" and r.norm > VANISH_ABS for r in rows), "some layer vanishes by the relative rule"
    assert any(r.flag is None for r in rows), "some layers are healthy"

    fig = mon.figure()
    ax = fig.axes[0]
    by_gid = {a.get_gid(): a for a in ax.get_children() if a.get_gid()}
    lines = [by_gid[f"grad:{n}"] for n in mon.names]
    from matplotlib.colors import to_rgba

    colours = {(to_rgba(ln.get_color()), ln.get_linestyle()) for ln in lines}
    assert len({to_rgba(ln.get_color()) for ln in lines}) == len(mon.names) == 24
    assert len(colours) == 24

    # thresholds: the vanishing one per step is the report's, the exploding one is explode_abs
    vanish = by_gid["threshold:vanishing"]
    np.testing.assert_allclose(vanish.get_ydata(), [rep.vanish_threshold for rep in mon.reports])
    assert any(rep.vanish_threshold > rep.thresholds["vanish_abs"] for rep in mon.reports)
    assert list(by_gid["threshold:exploding"].get_ydata()) == [EXPLODE_ABS] * len(mon.reports)

    # every flagged value is marked, nothing else is, and each mark is on the flagged side
    drawn = set()
    for kind in ("vanishing", "exploding", "nonfinite"):
        if f"flags:{kind}" in by_gid:
            for x, y in by_gid[f"flags:{kind}"].get_offsets():
                drawn.add((int(x), kind))
                rep = mon.reports[int(x)]
                if kind == "vanishing":
                    assert y < rep.vanish_threshold
                elif kind == "exploding":
                    assert y > rep.thresholds["explode_abs"]
    want = {(s, "nonfinite" if not np.isfinite(mon.reports[s][n].norm) else f) for s, n, f in flags}
    assert drawn == want
    assert len(by_gid["flags:vanishing"].get_offsets()) == sum(f == "vanishing" for _, _, f in flags)
    # unflagged finite values lie between the two thresholds drawn at their step
    norms = mon.array("norm")
    flagged = {(s, n) for s, n, _ in flags}
    for i, rep in enumerate(mon.reports):
        for j, name in enumerate(mon.names):
            if (i, name) not in flagged and np.isfinite(norms[i, j]):
                assert rep.vanish_threshold <= norms[i, j] <= rep.thresholds["explode_abs"]

    # the legend lies outside the axes
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend_box = fig.legends[0].get_window_extent(renderer)
    axes_box = ax.get_window_extent(renderer)
    assert legend_box.x0 >= axes_box.x1, (legend_box, axes_box)
    out = mon.plot(tmp_path / "health.png")
    assert open(out, "rb").read()[:8] == b"\x89PNG\r\n\x1a\n"
