"""The page's sections for what a run, export-check and compile-check put in ``summary``: training
series and ranks, the profile, export parity, compile modes. Each picks its figures out of the summary and
lays them out; the plots are drawn by :mod:`torchpact.report.html_plots`."""

from __future__ import annotations

from typing import Any

from torchpact.report.html_format import duration, e, number, size
from torchpact.report.html_plots import PHASE_COLORS, finite_points, heatmap, line_chart, stacked_bars


def grad_series(data: dict[str, Any]) -> dict[str, list[Any]]:
    gh = data.get("grad_health") or {}
    series = gh.get("series") or gh.get("norms") or {}
    return series if isinstance(series, dict) else {}


def rank_series(summary: dict[str, Any]) -> list[tuple[str, list[tuple[float, float]]]]:
    out = []
    for r in summary.get("ranks") or []:
        pts = finite_points(r.get("step_times") or [])
        if pts:
            out.append((f"rank {r.get('rank')}", pts))
    return out


def run_sections(summary: dict[str, Any]) -> list[str]:
    data = summary.get("data") or {}
    out = []
    progress = data.get("progress") or {}
    charts = []
    loss = finite_points(progress.get("loss"))
    if loss:
        charts.append(line_chart("Loss (checked steps)", [("loss", loss)]))
    times = finite_points(progress.get("step_time"))
    if times:
        charts.append(line_chart("Step time", [("step time", times)], y_format=duration))
    memory = finite_points(progress.get("memory"))
    if memory:
        kind = progress.get("memory_kind") or "memory"
        series = [("allocated" if kind.startswith("cuda") else "resident set size", memory)]
        reserved = finite_points(progress.get("memory_reserved"))
        if reserved:
            series.append(("reserved", reserved))
        label = "CUDA memory" if kind.startswith("cuda") else "Process memory (RSS)"
        charts.append(line_chart(label, series, y_format=size, from_zero=True))
    grads = grad_series(data)
    heat = heatmap("Gradient norm per layer over steps", grads) if grads else ""
    if charts or heat:
        out.append('<section id="training"><h2>Training</h2><div class="charts">' + "".join(charts) + "</div>"
                   + (f'<div class="scroll">{heat}</div>' if heat else "") + "</section>")
    ranks = summary.get("ranks") or []
    if ranks:
        series = rank_series(summary)
        rows = "".join(
            f"<tr><td>{e(r.get('rank'))}</td><td>{e(r.get('steps'))}</td><td>{e(_median_step_time(r))}</td>"
            f"<td>{e(r.get('exit_code'))}</td><td>{e(r.get('error') or '')}</td></tr>" for r in ranks)
        chart = line_chart("Step time per rank", series, y_format=duration) if series else ""
        out.append('<section id="ranks"><h2>Ranks</h2>' + (f'<div class="charts">{chart}</div>' if chart else "")
                   + '<table><thead><tr><th>rank</th><th>steps</th><th>median step time</th><th>exit code</th>'
                   f'<th>error</th></tr></thead><tbody>{rows}</tbody></table></section>')
    profile = data.get("profile") or {}
    if profile:
        out.append(_profile_section(profile))
    return out


def _median_step_time(rank: dict[str, Any]) -> str:
    median = rank.get("step_time_median")
    return duration(median) if isinstance(median, (int, float)) else "—"


def _profile_section(profile: dict[str, Any]) -> str:
    order = list(profile.get("phases") or PHASE_COLORS)
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
                       f"<td>{e(number(o.get('self_ms', 0)))} ms</td><td>{e(number(o.get('total_ms', 0)))} ms</td>"
                       + (f"<td>{e(number(o.get('device_ms', 0)))} ms</td>" if 'device_ms' in o else "") + "</tr>"
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


def export_sections(summary: dict[str, Any]) -> list[str]:
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
                text = f"Δ {number(err)}" if st in ("ok", "mismatch") and err is not None else st
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
    return f"{number(a) if isinstance(a, num) else '—'} / {number(b) if isinstance(b, num) else '—'} ms"


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


def compile_sections(summary: dict[str, Any]) -> list[str]:
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
    return number(value) if isinstance(value, float) else value


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
