"""One self-contained HTML page: summary, findings by category with the user's source and the fix, plots.

It presents what the JSON report already holds — the findings and ``summary`` (``summary.data``:
the watchers' series of ``run``; ``summary.ranks``: per-rank step times of ``run --nproc``;
``summary.paths``: export-check's parity results) — so a page can be rendered from a saved JSON
report (``torchpact report --html page.html report.json``). The only arithmetic here is the geometry
of the plots.

No script, no network: inline CSS and inline SVG, and a Content-Security-Policy that forbids loading
or running anything else. The text of each rule found is on the page itself (a finding's code links
to it), not behind a link to a web site. Every string that comes from the user (module and parameter names, paths,
messages, source lines) goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
import math
from typing import Any, Iterable, Sequence

from torchpact.findings import Category, Finding
from torchpact.report.plaintext import markdown_to_text
from torchpact.report.sources import SourceCache

_CATEGORY_ORDER = [c.value for c in Category]
_SEV_ORDER = {"error": 0, "warning": 1, "info": 2}
_PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]
# viridis, 9 stops: dark = small gradient norm, yellow = large
_VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"]
_PHASE_COLORS = {"dataloader": "#ea580c", "forward": "#2563eb", "backward": "#9333ea", "optimizer": "#16a34a",
                 "communication": "#0891b2", "sync": "#dc2626", "idle": "#9ca3af"}

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def e(value: Any) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def render_html(findings: list[Finding], meta: dict[str, Any]) -> str:
    """The page for ``findings`` and the report ``meta`` (as the other reporters get them)."""
    from torchpact.report.json import report_dict

    return page(report_dict(findings, meta), sources=meta.get("sources"), rules=rule_texts(meta.get("rules")))


def rule_texts(table: Iterable[dict[str, Any]] | None) -> dict[str, str]:
    """Code -> page (markdown), from a rule table (``torchpact.docs.rule_table``) as ``meta["rules"]`` holds it."""
    return {r["code"]: r["help"] for r in table or [] if r.get("help")}


def page(doc: dict[str, Any], sources: dict[str, str] | None = None, rules: dict[str, str] | None = None) -> str:
    """The page for a JSON report document (``report_dict`` output or a loaded ``--format json`` file);
    ``rules``: code -> the rule's page (markdown), shown in the page's Rules section."""
    findings = [Finding.from_dict(f) for f in doc.get("findings", [])]
    summary = doc.get("summary") or {}
    command = doc.get("command") or ""
    rules = {c: t for c, t in (rules or {}).items() if any(f.code == c for f in findings)}
    body = [_header(doc, summary, findings), _toc(summary, findings, rules)]
    body.append(_findings_section(findings, sources or {}, rules))
    body.extend(_run_sections(summary))
    body.extend(_export_sections(summary))
    body.extend(_compile_sections(summary))
    body.append(_rules_section(rules))
    body.append(f'<footer>torchpact {e(doc.get("version"))} · torch {e(doc.get("torch"))} · '
                f'self-contained page: no script, no network</footer>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>torchpact · {e(command)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(b for b in body if b) + "\n</main>\n</body>\n</html>\n"
    )


# ------------------------------------------------------------------------------------------ header
def _header(doc: dict[str, Any], summary: dict[str, Any], findings: list[Finding]) -> str:
    sev = summary.get("by_severity") or {}
    counts = {s: sev.get(s, sum(1 for f in findings if f.severity.value == s)) for s in ("error", "warning", "info")}
    cards = [f'<div class="card {s}"><b>{counts[s]}</b>'
             f'<span>{s}{"s" if counts[s] != 1 and s != "info" else ""}</span></div>'
             for s in ("error", "warning", "info")]
    facts = []
    if "script" in summary:
        facts.append(("script", summary.get("script")))
        facts.append(("optimizer steps", summary.get("steps")))
        if summary.get("seconds") is not None:
            facts.append(("time", f"{summary['seconds']:.2f} s"))
        facts.append(("script exit code", summary.get("exit_code")))
        if summary.get("ranks"):
            facts.append(("ranks", len(summary["ranks"])))
        if summary.get("error"):
            facts.append(("error", summary.get("error")))
    for key, label in (("files", "files"), ("lines", "lines")):
        if key in summary:
            facts.append((label, summary[key]))
    if "target_dims" in summary:
        dims = summary.get("target_dims") or {}
        facts.append(("dimensions", ", ".join(f"{k}={v}" for k, v in dims.items()) or "none found"))
    if "device" in summary:
        facts.append(("device", summary.get("device")))
    if "seconds" in summary and "script" not in summary:
        facts.append(("time", f"{summary['seconds']:.2f} s"))
    if summary.get("torchpact_exit_code") is not None:
        facts.append(("torchpact exit code", _exit_reason(summary)))
    facts_html = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in facts if v is not None)
    categories = len({f.category for f in findings})
    verdict = ("No findings." if not findings else
               f"{len(findings)} finding{'s' * (len(findings) != 1)} in "
               f"{categories} categor{'ies' if categories != 1 else 'y'}.")
    return (f'<header class="top"><div><h1>torchpact report</h1>'
            f'<p class="cmd"><code>torchpact {e(doc.get("command"))}</code></p>'
            f'<p class="verdict">{e(verdict)}</p></div><div class="cards">{"".join(cards)}</div></header>'
            f'<dl class="facts">{facts_html}</dl>')


def _exit_reason(summary: dict[str, Any]) -> str:
    code, script = summary.get("torchpact_exit_code"), summary.get("exit_code")
    if script not in (None, 0) and code == script:
        return f"{code} (the script's own exit code, kept)"
    fail_on = summary.get("fail_on") or "the --fail-on severity"
    if code == 1:
        return f"1 (a finding at or above {fail_on})"
    if code == 0:
        return f"0 (no finding at or above {fail_on})"
    return str(code)


def _toc(summary: dict[str, Any], findings: list[Finding], rules: dict[str, str]) -> str:
    links = [("findings", "Findings")]
    data = summary.get("data") or {}
    if data.get("progress") or _grad_series(data):
        links.append(("training", "Training"))
    if _rank_series(summary):
        links.append(("ranks", "Ranks"))
    if data.get("profile"):
        links.append(("profile", "Profile"))
    if summary.get("paths"):
        links.append(("parity", "Export parity"))
    if summary.get("modes"):
        links.append(("compile", "Compile modes"))
    if rules:
        links.append(("rules", "Rules"))
    if len(links) < 2:
        return ""
    return '<nav>' + " ".join(f'<a href="#{a}">{e(t)}</a>' for a, t in links) + "</nav>"


# ---------------------------------------------------------------------------------------- findings
def _findings_section(findings: list[Finding], sources: dict[str, str], rules: dict[str, str]) -> str:
    if not findings:
        return '<section id="findings"><h2>Findings</h2><p class="empty">No findings.</p></section>'
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.category.value, []).append(f)
    order = sorted(groups, key=lambda c: (min(_SEV_ORDER[f.severity.value] for f in groups[c]),
                                          _CATEGORY_ORDER.index(c) if c in _CATEGORY_ORDER else 99))
    cache = SourceCache(sources)
    out = ['<section id="findings"><h2>Findings</h2>']
    for cat in order:
        items = sorted(groups[cat], key=lambda f: (_SEV_ORDER[f.severity.value], f.sort_key()))
        out.append(f'<section class="category"><h3>{e(cat)} <span class="count">{len(items)}</span></h3>')
        out.extend(_finding(f, cache, f.code in rules) for f in items)
        out.append("</section>")
    out.append("</section>")
    return "\n".join(out)


def _finding(f: Finding, cache: SourceCache, documented: bool = False) -> str:
    sev = f.severity.value
    where = ""
    if f.path:
        where = f.path
        if f.cell:
            where += f" cell {f.cell}"
        if f.line:
            where += f":{f.line}" + (f":{f.column}" if f.column else "")
    when = []
    ranks = f.extra.get("ranks") if f.extra else None
    if ranks and len(ranks) > 1:
        when.append("ranks " + ", ".join(map(str, ranks)))
    elif f.rank is not None:
        when.append(f"rank {f.rank}")
    if f.step is not None:
        when.append(f"step {f.step}")
    head = (f'<span class="pill {sev}">{sev}</span>'
            + (f'<a class="code" href="#rule-{e(f.code)}" title="the rule\'s text, below"><code>{e(f.code)}</code></a>'
               if documented else f'<span class="code"><code>{e(f.code)}</code></span>')
            + (f'<span class="loc">{e(where)}</span>' if where else "")
            + (f'<span class="when">{e(" · ".join(when))}</span>' if when else ""))
    parts = [f'<article class="finding {sev}"><div class="fhead">{head}</div>', f'<p class="msg">{e(f.message)}</p>']
    snippet = _snippet(f, cache)
    if snippet:
        parts.append(snippet)
    if f.subject:
        parts.append(f'<p class="subject">subject <code>{e(f.subject)}</code></p>')
    if f.fix:
        parts.append(f'<p class="fix"><b>Fix</b> {e(f.fix)}</p>')
    parts.append("</article>")
    return "".join(parts)


def _rules_section(rules: dict[str, str]) -> str:
    """Each found code's page, as plain text: the report explains itself without a network."""
    if not rules:
        return ""
    out = ['<section id="rules"><h2>Rules</h2>']
    for code in sorted(rules):
        out.append(f'<article class="rule" id="rule-{e(code)}"><pre class="ruletext">'
                   f'{e(markdown_to_text(rules[code]).strip())}</pre></article>')
    out.append("</section>")
    return "\n".join(out)


def _snippet(f: Finding, cache: SourceCache) -> str:
    lines = cache.lines(f)
    if lines is None or f.line is None:
        return ""
    lo, hi = max(1, f.line - 2), min(len(lines), f.line + 2)
    rows = []
    for n in range(lo, hi + 1):
        cls = ' class="hit"' if n == f.line else ""
        rows.append(f'<span{cls}><i>{n}</i>{e(lines[n - 1].rstrip()) or " "}</span>')
    return f'<pre class="src">{"".join(rows)}</pre>'


# ------------------------------------------------------------------------------------------- plots
def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return f"{v:.1e}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def _fixed(v: float, step: float) -> str:
    """A tick label with as many decimals as the tick spacing needs (2.295, 2.3, 2.305 — not 2.3 thrice)."""
    if not step or abs(v) >= 1e5 or (v and abs(v) < 1e-3 and step < 1e-3):
        return _fmt(v)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{min(decimals, 6)}f}"


def _bytes(v: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return str(v)


def _seconds(v: float) -> str:
    return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"


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


def _finite_points(points: Iterable[Sequence[Any]]) -> list[tuple[float, float]]:
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


def line_chart(title: str, series: list[tuple[str, list[tuple[float, float]]]], *, y_format=_fmt,
               log_y: bool = False, from_zero: bool = False, x_label: str = "step", width: int = 520,
               height: int = 230) -> str:
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
        text = _fixed(t, step) if y_format is _fmt and not log_y else y_format(t)
        out.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{e(text)}</text>')
    for t in _ticks(x0, x1, 6):
        if float(t).is_integer() or x1 - x0 < 6:
            x = sx(t)
            out.append(f'<text class="tick" x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{e(_fmt(t))}</text>')
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
                       f'fill="{fill}"><title>{e(name)} · step {s}: {e(_fmt(v))}</title></rect>')
    ybase = 30 + cell_h * len(values)
    every = max(1, math.ceil(len(steps) / 10), math.ceil(36 / cw))  # columns are checked steps, not evenly spaced
    for i in range(0, len(steps), every):
        out.append(f'<text class="tick" x="{label_w + (i + 0.5) * cw:.1f}" y="{ybase + 14}" '
                   f'text-anchor="middle">{e(_fmt(steps[i]))}</text>')
    ly = ybase + 26
    for i in range(60):
        out.append(f'<rect x="{label_w + i * 3}" y="{ly}" width="3.2" height="10" fill="{_color(i / 59)}"/>')
    out.append(f'<text class="tick" x="{label_w}" y="{ly + 24}">{e(_fmt(10 ** lo))}</text>'
               f'<text class="tick" x="{label_w + 180}" y="{ly + 24}" text-anchor="end">{e(_fmt(10 ** hi))}</text>'
               f'<text class="tick" x="{label_w + 190}" y="{ly + 9}">gradient norm (log scale); '
               f'red: NaN/inf, grey: zero; columns: checked steps</text></svg>')
    return "".join(out)


def stacked_bars(title: str, rows: list[tuple[str, dict[str, float]]], order: list[str], *, unit=_seconds,
                 width: int = 1040) -> str:
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
                       f'fill="{_PHASE_COLORS.get(key, "#6b7280")}">'
                       f'<title>{e(key)}: {e(unit(v))} ({v / total:.0%})</title></rect>')
            x += w
        out.append(f'<text class="tick" x="{x + 6:.1f}" y="{y + 13}">{e(unit(total))}</text>')
    ly = 30 + 22 * len(rows) + 12
    lx = label_w
    for key in order:
        out.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{_PHASE_COLORS.get(key, "#6b7280")}"/>'
                   f'<text class="legend" x="{lx + 14}" y="{ly + 9}">{e(key)}</text>')
        lx += 24 + 7 * len(key)
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------------------------ run sections
def _grad_series(data: dict[str, Any]) -> dict[str, list]:
    gh = data.get("grad_health") or {}
    series = gh.get("series") or gh.get("norms") or {}
    return series if isinstance(series, dict) else {}


def _rank_series(summary: dict[str, Any]) -> list[tuple[str, list[tuple[float, float]]]]:
    out = []
    for r in summary.get("ranks") or []:
        pts = _finite_points(r.get("step_times") or [])
        if pts:
            out.append((f"rank {r.get('rank')}", pts))
    return out


def _run_sections(summary: dict[str, Any]) -> list[str]:
    data = summary.get("data") or {}
    out = []
    progress = data.get("progress") or {}
    charts = []
    loss = _finite_points(progress.get("loss"))
    if loss:
        charts.append(line_chart("Loss (checked steps)", [("loss", loss)]))
    times = _finite_points(progress.get("step_time"))
    if times:
        charts.append(line_chart("Step time", [("step time", times)], y_format=_seconds))
    memory = _finite_points(progress.get("memory"))
    if memory:
        kind = progress.get("memory_kind") or "memory"
        series = [("allocated" if kind.startswith("cuda") else "resident set size", memory)]
        reserved = _finite_points(progress.get("memory_reserved"))
        if reserved:
            series.append(("reserved", reserved))
        label = "CUDA memory" if kind.startswith("cuda") else "Process memory (RSS)"
        charts.append(line_chart(label, series, y_format=_bytes, from_zero=True))
    grads = _grad_series(data)
    heat = heatmap("Gradient norm per layer over steps", grads) if grads else ""
    if charts or heat:
        out.append('<section id="training"><h2>Training</h2><div class="charts">' + "".join(charts) + "</div>"
                   + (f'<div class="scroll">{heat}</div>' if heat else "") + "</section>")
    ranks = summary.get("ranks") or []
    if ranks:
        series = _rank_series(summary)
        rows = "".join(
            f"<tr><td>{e(r.get('rank'))}</td><td>{e(r.get('steps'))}</td><td>{e(_median_step_time(r))}</td>"
            f"<td>{e(r.get('exit_code'))}</td><td>{e(r.get('error') or '')}</td></tr>" for r in ranks)
        chart = line_chart("Step time per rank", series, y_format=_seconds) if series else ""
        out.append('<section id="ranks"><h2>Ranks</h2>' + (f'<div class="charts">{chart}</div>' if chart else "")
                   + '<table><thead><tr><th>rank</th><th>steps</th><th>median step time</th><th>exit code</th>'
                   f'<th>error</th></tr></thead><tbody>{rows}</tbody></table></section>')
    profile = data.get("profile") or {}
    if profile:
        out.append(_profile_section(profile))
    return out


def _median_step_time(rank: dict[str, Any]) -> str:
    median = rank.get("step_time_median")
    return _seconds(median) if isinstance(median, (int, float)) else "—"


def _profile_section(profile: dict[str, Any]) -> str:
    order = list(profile.get("phases") or _PHASE_COLORS)
    parts = ['<section id="profile"><h2>Profile</h2>']
    if profile.get("status") and profile.get("status") != "ok":
        parts.append(f'<p class="empty">{e(profile.get("reason") or profile.get("status"))}</p></section>')
        return "".join(parts)
    steps = profile.get("steps") or []
    median = profile.get("median") or {}
    rows = [("median", {k: float(v) for k, v in median.items() if isinstance(v, (int, float))})]
    rows += [(f"step {s.get('step')}", {k: float(v) for k, v in (s.get("phases") or {}).items()}) for s in steps]
    parts.append(f'<p class="note">{e(profile.get("note") or "")}</p>')
    parts.append(f'<div class="scroll">{stacked_bars("Where step time goes", rows, order)}</div>')
    ops = profile.get("top_ops") or []
    if ops:
        body = "".join(f"<tr><td><code>{e(o.get('name'))}</code></td><td>{e(o.get('calls'))}</td>"
                       f"<td>{e(_fmt(o.get('self_ms', 0)))} ms</td><td>{e(_fmt(o.get('total_ms', 0)))} ms</td>"
                       + (f"<td>{e(_fmt(o.get('device_ms', 0)))} ms</td>" if 'device_ms' in o else "") + "</tr>"
                       for o in ops)
        device = any("device_ms" in o for o in ops)
        parts.append('<h3>Top operators</h3><table><thead><tr><th>operator</th><th>calls</th><th>self (host)</th>'
                     f'<th>total (host)</th>{"<th>device</th>" if device else ""}</tr></thead>'
                     f'<tbody>{body}</tbody></table>')
    if profile.get("trace"):
        parts.append(f'<p class="note">trace: <code>{e(profile["trace"])}</code> (open in Perfetto or TensorBoard)</p>')
    parts.append("</section>")
    return "".join(parts)


# --------------------------------------------------------------------------------- export / compile
_STATUS_CLASS = {"ok": "ok", "mismatch": "bad", "error": "bad", "failed": "bad", "skipped": "skip"}


def _export_sections(summary: dict[str, Any]) -> list[str]:
    paths = summary.get("paths")
    if not isinstance(paths, dict) or not paths:
        return []
    variants = [v.get("name") for v in summary.get("variants") or []]
    if not variants:
        variants = list(dict.fromkeys(v.get("name") for p in paths.values() for v in p.get("variants") or []))
    head = "".join(f"<th>{e(v)}</th>" for v in variants)
    rows = []
    for name, p in paths.items():
        status = p.get("status", "")
        by_variant = {v.get("name"): v for v in p.get("variants") or []}
        cells = []
        for v in variants:
            r = by_variant.get(v)
            if r is None:
                cells.append('<td class="skip">—</td>')
                continue
            st = r.get("status", "")
            err = r.get("max_abs_err")
            if st == "ok" and not err:
                text = "ok"
            else:
                text = f"Δ {_fmt(err)}" if st in ("ok", "mismatch") and err is not None else st
            tip = r.get("problem") or ""
            cells.append(f'<td class="{_STATUS_CLASS.get(st, "skip")}" title="{e(tip)}">{e(text)}</td>')
        rows.append(f'<tr><th>{e(name)}</th><td class="{_STATUS_CLASS.get(status, "skip")} status">{e(status)}</td>'
                    f'{"".join(cells)}{_latency_cell(p.get("latency_ms") or {})}'
                    f'<td class="reason">{e(p.get("reason") or "")}</td></tr>')
    return [('<section id="parity"><h2>Export parity</h2><p class="note">Each path\'s artifact against eager on '
             'each input variant (Δ: largest absolute difference). Latency on the example: eager timed first, '
             'before any export; a pair is compared only when both are stable.</p>'
             '<div class="scroll"><table class="parity">'
             f'<thead><tr><th>path</th><th>result</th>{head}<th>latency artifact / eager</th><th>why</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table></div></section>')]


def _pair(a: Any, b: Any) -> str:
    num = (int, float)
    return f"{_fmt(a) if isinstance(a, num) else '—'} / {_fmt(b) if isinstance(b, num) else '—'} ms"


def _latency_cell(lat: dict[str, Any]) -> str:
    """p50 and p99 of artifact / eager; when unstable, says so and why, the figures kept apart."""
    if not lat or (lat.get("artifact") is None and lat.get("eager") is None):
        return '<td class="num"></td>'
    figures = (f'p50 {_pair(lat.get("artifact"), lat.get("eager"))}<br>'
               f'<span class="p99">p99 {_pair(lat.get("artifact_p99"), lat.get("eager_p99"))}</span>')
    if lat.get("unstable"):
        return (f'<td class="latency unstable"><b>not comparable</b> (unstable: {e(lat["unstable"])})'
                f'<br><span class="p99">{figures}</span></td>')
    return f'<td class="num latency">{figures}</td>'


def _compile_sections(summary: dict[str, Any]) -> list[str]:
    modes = summary.get("modes")
    if not isinstance(modes, dict) or not modes:
        return []
    keys: list[str] = []
    for m in modes.values():
        for k, v in (m or {}).items():
            if k not in keys and (isinstance(v, (str, int, float, bool)) or v is None):
                keys.append(k)
    head = "".join(f"<th>{e(k.replace('_', ' '))}</th>" for k in keys)
    eager = summary.get("eager_latency_ms") or {}
    rows = (f'<tr><th>eager</th>{"<td></td>" * len(keys)}{_p50_p99_cell(eager)}</tr>' if eager else "")
    rows += "".join(f"<tr><th>{e(name)}</th>" + "".join(f"<td>{e(_mode_value(m.get(k)))}</td>" for k in keys)
                    + _p50_p99_cell(m.get("latency_ms") or {}) + "</tr>"
                    for name, m in modes.items())
    recommendation = summary.get("recommendation") or {}
    advice = ("<ul>" + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in recommendation.items()) + "</ul>"
              if isinstance(recommendation, dict) else f"<p>{e(recommendation)}</p>")
    extra = (f'<p class="note">graphs: {e(summary.get("graphs"))}, graph breaks: '
             f'{e(len(summary.get("graph_breaks") or []))}; eager timed first, before any dynamo work, and again in '
             f'the same rounds as each mode</p>{advice}')
    return [(f'<section id="compile"><h2>Compile modes</h2>{extra}<div class="scroll"><table><thead><tr>'
             f'<th>mode</th>{head}<th>latency p50 / p99</th></tr></thead><tbody>{rows}</tbody></table></div>'
             f'</section>')]


def _mode_value(value: Any) -> Any:
    return _fmt(value) if isinstance(value, float) else value


def _p50_p99_cell(latency: dict[str, Any]) -> str:
    """One line per input: p50 / p99, and why the pair is unstable when it is."""
    lines = []
    for label, x in latency.items():
        if not isinstance(x, dict):
            continue
        text = f"{e(label)}: {_pair(x.get('p50'), x.get('p99'))}"
        sp = x.get("speedup")
        if isinstance(sp, dict):
            text += f" (eager / mode {sp.get('ratio')}x, 95% [{sp.get('low')}, {sp.get('high')}])"
        if x.get("unstable") or x.get("error"):
            text += f' <span class="unstable">(unstable: {e(x.get("unstable") or x.get("error"))})</span>'
        lines.append(text)
    return f'<td class="latency">{"<br>".join(lines)}</td>'


_CSS = """
:root{--fg:#111827;--mut:#6b7280;--bg:#f6f7f9;--card:#fff;--line:#e5e7eb;--err:#dc2626;--warn:#d97706;--info:#2563eb;
  --ok:#16a34a}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1100px;margin:0 auto;padding:24px 20px 40px}
code,pre{font-family:ui-monospace,"SFMono-Regular","DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
h1{font-size:24px;margin:0}
h2{font-size:18px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:18px 0 8px;text-transform:capitalize}
header.top{display:flex;justify-content:space-between;gap:20px;align-items:flex-start;flex-wrap:wrap}
.cmd{margin:4px 0;color:var(--mut);word-break:break-all}
.verdict{margin:4px 0;font-weight:600}
.cards{display:flex;gap:10px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:86px;
  text-align:center;border-top:4px solid}
.card b{display:block;font-size:24px;line-height:1.2}
.card span{color:var(--mut);font-size:12px}
.card.error{border-top-color:var(--err)}.card.warning{border-top-color:var(--warn)}
.card.info{border-top-color:var(--info)}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:14px 0 0;background:var(--card);
  border:1px solid var(--line);border-radius:8px;padding:10px 14px}
dl.facts dt{color:var(--mut)}dl.facts dd{margin:0;word-break:break-all}
nav{margin:14px 0 0;display:flex;gap:14px}
nav a{color:var(--info);text-decoration:none}
.count{display:inline-block;background:var(--line);border-radius:10px;padding:0 8px;font-size:12px;color:var(--fg)}
.finding{background:var(--card);border:1px solid var(--line);border-left:4px solid var(--mut);border-radius:6px;
  padding:10px 14px;margin:8px 0}
.finding.error{border-left-color:var(--err)}.finding.warning{border-left-color:var(--warn)}
.finding.info{border-left-color:var(--info)}
.fhead{display:flex;flex-wrap:wrap;gap:10px;align-items:baseline}
.pill{font-size:11px;font-weight:700;text-transform:uppercase;border-radius:4px;padding:1px 6px;color:#fff}
.pill.error{background:var(--err)}.pill.warning{background:var(--warn)}.pill.info{background:var(--info)}
.code{font-weight:700;color:inherit}a.code:hover{text-decoration:underline}a.code{text-decoration:none}
.loc{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12.5px;color:#374151;word-break:break-all}
.when{color:var(--mut);font-size:12px}
.msg{margin:6px 0}
pre.ruletext{white-space:pre-wrap;background:#f8fafc;border:1px solid #e2e8f0;border-radius:6px;padding:10px 12px;
  margin:10px 0}
pre.src{background:#0f172a;color:#e2e8f0;border-radius:6px;padding:8px 0;margin:8px 0;overflow-x:auto}
pre.src span{display:block;padding:0 12px;white-space:pre}
pre.src span.hit{background:#7f1d1d80;border-left:3px solid #f87171;padding-left:9px}
pre.src i{font-style:normal;color:#64748b;display:inline-block;width:3.2em;text-align:right;margin-right:12px;
  user-select:none}
.subject{margin:4px 0;color:var(--mut)}
.fix{margin:6px 0 0;background:#f0fdf4;border:1px solid #bbf7d0;border-radius:6px;padding:6px 10px}
.fix b{color:var(--ok);margin-right:6px}
.empty{color:var(--mut)}
.note{color:var(--mut);margin:4px 0 8px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px}
.chart{background:var(--card);border:1px solid var(--line);border-radius:8px;max-width:100%;height:auto}
.scroll{overflow-x:auto;margin-top:12px}
svg text{font-family:system-ui,"DejaVu Sans",sans-serif}
.ctitle{font-size:13px;font-weight:600;fill:var(--fg)}
.tick,.legend{font-size:11px;fill:var(--mut)}
.rowlabel{font-size:11px;fill:#374151;font-family:ui-monospace,"DejaVu Sans Mono",monospace}
.grid{stroke:var(--line);stroke-width:1}.axis{stroke:#9ca3af;stroke-width:1}
table{border-collapse:collapse;background:var(--card);border:1px solid var(--line);margin:8px 0;font-size:13px}
th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
thead th{background:#f3f4f6;font-weight:600}
td.ok{background:#dcfce7;color:#166534}td.bad{background:#fee2e2;color:#991b1b;font-weight:600}td.skip{color:var(--mut)}
table.parity td{text-align:center;white-space:nowrap}table.parity td.reason{text-align:left;white-space:normal;
  min-width:260px}
td.num{text-align:right}
table.parity td.latency{white-space:normal;min-width:150px}.p99{color:var(--mut);font-size:12px}
td.unstable,span.unstable{text-align:left;color:var(--warn);font-size:12px}td.unstable .p99{color:var(--mut)}
footer{margin-top:36px;color:var(--mut);font-size:12px}
"""
