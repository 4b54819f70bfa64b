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

from typing import Any, Iterable

from torchpact.findings import Category, Finding
from torchpact.report.html_format import e
from torchpact.report.html_sections import (compile_sections, export_sections, grad_series, rank_series,
                                             run_sections)
from torchpact.report.plaintext import markdown_to_text
from torchpact.report.sources import SourceCache
from torchpact.report.text import place, when
_CATEGORY_ORDER = [c.value for c in Category]
_SEV_ORDER = {"error": 0, "warning": 1, "info": 2}
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"



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
    body.extend(run_sections(summary))
    body.extend(export_sections(summary))
    body.extend(compile_sections(summary))
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
    if data.get("progress") or grad_series(data):
        links.append(("training", "Training"))
    if rank_series(summary):
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
    where = place(f) if f.path else ""
    at = when(f)
    head = (f'<span class="pill {sev}">{sev}</span>'
            + (f'<a class="code" href="#rule-{e(f.code)}" title="the rule\'s text, below"><code>{e(f.code)}</code></a>'
               if documented else f'<span class="code"><code>{e(f.code)}</code></span>')
            + (f'<span class="loc">{e(where)}</span>' if where else "")
            + (f'<span class="when">{e(at)}</span>' if at else ""))
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
