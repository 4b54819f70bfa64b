"""The page's plots as inline SVG: line charts, the per-layer heatmap, stacked bars. Only geometry here."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from torchpact.report.html_format import duration, e, number, tick_label

_PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]
# viridis, 9 stops: dark = small gradient norm, yellow = large
_VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"]
PHASE_COLORS = {"dataloader": "#ea580c", "forward": "#2563eb", "backward": "#9333ea", "optimizer": "#16a34a",
                 "communication": "#0891b2", "sync": "#dc2626", "idle": "#9ca3af"}


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, x = [], first
    while x <= hi + step * 1e-9:
        out.append(round(x, 12))
        x += step
    return out


def finite_points(points: Iterable[Sequence[Any]] | None) -> list[tuple[float, float]]:
    out = []
    for p in points or []:
        try:
            x, y = float(p[0]), float(p[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(x) and math.isfinite(y):
            out.append((x, y))
    return out


def _thin(points: list[tuple[float, float]], limit: int = 600) -> list[tuple[float, float]]:
    if len(points) <= limit:
        return points
    stride = -(-len(points) // limit)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def line_chart(title: str, series: list[tuple[str, list[tuple[float, float]]]], *,
               y_format: Callable[[float], str] = number, log_y: bool = False, from_zero: bool = False,
               x_label: str = "step", width: int = 520, height: int = 230) -> str:
    """An SVG line chart of (label, [(x, y)]) series; empty string when there is nothing to draw.
    ``from_zero``: the y axis starts at 0, for a quantity whose size matters more than its wiggles (memory:
    0.4 MiB more on 500 MiB must not look like a cliff)."""
    series = [(label, _thin(pts)) for label, pts in series if pts]
    if log_y:
        series = [(label, [(x, y) for x, y in pts if y > 0]) for label, pts in series]
        series = [(label, pts) for label, pts in series if pts]
    if not series:
        return ""
    left, right, top, bottom = 62, 12, 30, 36
    pw, ph = width - left - right, height - top - bottom
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    tf = (lambda y: math.log10(y)) if log_y else (lambda y: y)
    y0, y1 = tf(min(ys)), tf(max(ys))
    if not log_y:
        y0 = min(y0, 0.0) if y0 >= 0 and (from_zero or y0 < 0.5 * y1) else y0
    if y1 == y0:
        y0, y1 = y0 - 1 if log_y else y0 - abs(y0) * 0.1 - 1e-12, y1 + 1 if log_y else y1 + abs(y1) * 0.1 + 1e-12
    pad = (y1 - y0) * 0.06
    y0, y1 = (y0 - pad if (log_y or y0 != 0) else y0), y1 + pad

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (tf(y) - y0) / (y1 - y0) * ph

    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{e(title)}"><text class="ctitle" x="{left}" y="18">{e(title)}</text>']
    if log_y:
        yt = [10.0 ** k for k in range(math.floor(y0), math.ceil(y1) + 1) if y0 <= k <= y1] or [10 ** y0]
    else:
        yt = _ticks(y0, y1)
    step = yt[1] - yt[0] if len(yt) > 1 else 0
    for t in yt:
        y = top + ph - ((math.log10(t) if log_y else t) - y0) / (y1 - y0) * ph
        text = tick_label(t, step) if y_format is number and not log_y else y_format(t)
        out.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{e(text)}</text>')
    for t in _ticks(x0, x1, 6):
        if float(t).is_integer() or x1 - x0 < 6:
            x = sx(t)
            out.append(f'<text class="tick" x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{e(number(t))}</text>')
    out.append(f'<line class="axis" x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}"/>'
               f'<text class="tick" x="{left + pw}" y="{height - 4}" text-anchor="end">{e(x_label)}</text>')
    for i, (label, pts) in enumerate(series):
        color = _PALETTE[i % len(_PALETTE)]
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        if len(pts) == 1:
            x, y = pts[0]
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                       f'<title>{e(label)}</title></circle>')
        else:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{d}">'
                       f'<title>{e(label)}</title></polyline>')
    if len(series) > 1:
        lx = left + 8
        for i, (label, _) in enumerate(series[:8]):
            color = _PALETTE[i % len(_PALETTE)]
            out.append(f'<rect x="{lx}" y="{top + 4 + i * 14}" width="10" height="3" fill="{color}"/>'
                       f'<text class="legend" x="{lx + 14}" y="{top + 9 + i * 14}">{e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def _color(t: float) -> str:
    """viridis at t in [0, 1], interpolated between the stops."""
    t = min(1.0, max(0.0, t)) * (len(_VIRIDIS) - 1)
    i = min(int(t), len(_VIRIDIS) - 2)
    f = t - i
    a, b = _VIRIDIS[i], _VIRIDIS[i + 1]
    rgb = [round(int(a[k:k + 2], 16) * (1 - f) + int(b[k:k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def heatmap(title: str, rows: dict[str, list[Sequence[Any]]], *, max_columns: int = 120, width: int = 1040) -> str:
    """Per-layer gradient norm over steps: one row per layer, one column per checked step, log colour scale."""
    rows = {name: pts for name, pts in rows.items() if pts}
    if not rows:
        return ""
    steps = sorted({int(p[0]) for pts in rows.values() for p in pts})
    if len(steps) > max_columns:  # show every k-th checked step
        stride = -(-len(steps) // max_columns)
        steps = steps[::stride] + ([steps[-1]] if (len(steps) - 1) % stride else [])
    column = {s: i for i, s in enumerate(steps)}
    values: dict[str, dict[int, float]] = {}
    for name, pts in rows.items():
        values[name] = {}
        for p in pts:
            try:
                values[name][int(p[0])] = float(p[1])
            except (TypeError, ValueError):
                continue
    logs = [math.log10(v) for vals in values.values() for v in vals.values() if math.isfinite(v) and v > 0]
    lo, hi = (min(logs), max(logs)) if logs else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    label_w = max(80, min(280, 24 + 6.6 * max(len(n) for n in values)))
    legend_h = 44
    cell_h = 16 if len(values) <= 40 else 10
    cw = max(2.0, (width - label_w - 20) / max(1, len(steps)))
    plot_w = cw * len(steps)
    height = 30 + cell_h * len(values) + 22 + legend_h
    out = [(f'<svg class="chart heat" viewBox="0 0 {label_w + plot_w + 20:.0f} {height}" '
            f'width="{label_w + plot_w + 20:.0f}" height="{height}" role="img" aria-label="{e(title)}">'
            f'<text class="ctitle" x="0" y="18">{e(title)}</text>')]
    for r, (name, vals) in enumerate(values.items()):
        y = 30 + r * cell_h
        shown = name if len(name) * 6.6 < label_w - 12 else "…" + name[-int((label_w - 20) / 6.6):]
        out.append(f'<text class="rowlabel" x="{label_w - 8:.0f}" y="{y + cell_h * 0.72:.1f}" text-anchor="end">'
                   f'<title>{e(name)}</title>{e(shown)}</text>')
        for s, v in vals.items():
            c = column.get(s)
            if c is None:
                continue
            if not math.isfinite(v):
                fill = "#ef4444"
            elif v <= 0:
                fill = "#d1d5db"
            else:
                fill = _color((math.log10(v) - lo) / (hi - lo))
            out.append(f'<rect x="{label_w + c * cw:.1f}" y="{y}" width="{cw + 0.3:.1f}" height="{cell_h - 1}" '
                       f'fill="{fill}"><title>{e(name)} · step {s}: {e(number(v))}</title></rect>')
    ybase = 30 + cell_h * len(values)
    every = max(1, math.ceil(len(steps) / 10), math.ceil(36 / cw))  # columns are checked steps, not evenly spaced
    for i in range(0, len(steps), every):
        out.append(f'<text class="tick" x="{label_w + (i + 0.5) * cw:.1f}" y="{ybase + 14}" '
                   f'text-anchor="middle">{e(number(steps[i]))}</text>')
    ly = ybase + 26
    for i in range(60):
        out.append(f'<rect x="{label_w + i * 3}" y="{ly}" width="3.2" height="10" fill="{_color(i / 59)}"/>')
    out.append(f'<text class="tick" x="{label_w}" y="{ly + 24}">{e(number(10 ** lo))}</text>'
               f'<text class="tick" x="{label_w + 180}" y="{ly + 24}" text-anchor="end">{e(number(10 ** hi))}</text>'
               f'<text class="tick" x="{label_w + 190}" y="{ly + 9}">gradient norm (log scale); '
               f'red: NaN/inf, grey: zero; columns: checked steps</text></svg>')
    return "".join(out)


def stacked_bars(title: str, rows: list[tuple[str, dict[str, float]]], order: list[str], *,
                 unit: Callable[[float], str] = duration, width: int = 1040) -> str:
    """Horizontal stacked bars: one row each, segments in ``order`` coloured by phase."""
    rows = [(label, parts) for label, parts in rows if sum(max(0.0, v) for v in parts.values()) > 0]
    if not rows:
        return ""
    label_w, right = 90, 90
    total_max = max(sum(max(0.0, v) for v in parts.values()) for _, parts in rows)
    pw = width - label_w - right
    height = 34 + 22 * len(rows) + 30
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{e(title)}"><text class="ctitle" x="0" y="18">{e(title)}</text>']
    for r, (label, parts) in enumerate(rows):
        y = 30 + r * 22
        x = float(label_w)
        out.append(f'<text class="rowlabel" x="{label_w - 8}" y="{y + 13}" text-anchor="end">{e(label)}</text>')
        total = sum(max(0.0, v) for v in parts.values())
        for key in order:
            v = max(0.0, float(parts.get(key, 0.0)))
            if v <= 0:
                continue
            w = v / total_max * pw
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="16" '
                       f'fill="{PHASE_COLORS.get(key, "#6b7280")}">'
                       f'<title>{e(key)}: {e(unit(v))} ({v / total:.0%})</title></rect>')
            x += w
        out.append(f'<text class="tick" x="{x + 6:.1f}" y="{y + 13}">{e(unit(total))}</text>')
    ly = 30 + 22 * len(rows) + 12
    lx = label_w
    for key in order:
        out.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{PHASE_COLORS.get(key, "#6b7280")}"/>'
                   f'<text class="legend" x="{lx + 14}" y="{ly + 9}">{e(key)}</text>')
        lx += 24 + 7 * len(key)
    out.append("</svg>")
    return "".join(out)
