"""The report for people: each finding with its source line, the fix, then a one-line summary."""

from __future__ import annotations

import os
import sys
from typing import Any

from torchpact.findings import Finding, Severity
from torchpact.report.sources import SourceCache

_COLOR = {Severity.ERROR: "\033[31m", Severity.WARNING: "\033[33m", Severity.INFO: "\033[36m"}
_BOLD, _DIM, _RESET = "\033[1m", "\033[2m", "\033[0m"


def use_color(stream: Any = None) -> bool:
    """Whether ``stream`` (stdout) is a terminal that wants colour (``NO_COLOR`` unset): the one test, for every
    command's report (``commands.outcome`` asks it)."""
    stream = stream or sys.stdout
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()


def place(f: Finding) -> str:
    """``path:cell N:line:column``, as much of it as the finding has."""
    parts = [f.path] if f.path else []
    if f.cell:
        parts.append(f"cell {f.cell}")
    if f.line:
        parts.append(str(f.line))
        if f.column:
            parts.append(str(f.column))
    return ":".join(parts)


def when(f: Finding) -> str:
    """``ranks 0,1, step 12``: the ranks (or rank) and the step a runtime finding was seen at; empty for lint's."""
    ranks = f.extra.get("ranks") if f.extra else None
    out = []
    if ranks and len(ranks) > 1:
        out.append(f"ranks {','.join(map(str, ranks))}")
    elif f.rank is not None:
        out.append(f"rank {f.rank}")
    if f.step is not None:
        out.append(f"step {f.step}")
    return ", ".join(out)


def _location(f: Finding) -> str:
    at = when(f)
    return f"{place(f)} [{at}]".strip() if at else place(f)


def _source_line(f: Finding, cache: SourceCache) -> str | None:
    lines = cache.lines(f)
    return lines[f.line - 1] if lines is not None and f.line else None


def fixable_note(findings: list[Finding], meta: dict[str, Any]) -> str:
    """``; 3 fixable with --fix (1 more with --unsafe-fixes)``, or nothing (after --fix, or with none)."""
    unsafe_on = bool(meta.get("unsafe_fixes"))
    safe = sum(1 for f in findings if f.extra.get("fixable")
               and (unsafe_on or f.extra.get("fix_applicability", "safe") == "safe"))
    unsafe = sum(1 for f in findings if f.extra.get("fixable")) - safe
    if meta.get("fixed") and not unsafe:
        return ""
    parts = []
    if safe and not meta.get("fixed"):
        parts.append(f"; {safe} fixable with --fix" + (" --unsafe-fixes" if unsafe_on else ""))
    if unsafe:
        parts.append(f"; {unsafe} more with --fix --unsafe-fixes (review them: see each rule's Fix safety)")
    return "".join(parts)


def render_text(findings: list[Finding], meta: dict[str, Any]) -> str:
    color = bool(meta.get("color"))
    paint = (lambda code, s: f"{code}{s}{_RESET}") if color else (lambda code, s: s)
    cache = SourceCache(meta.get("sources"))
    out: list[str] = []
    for f in findings:
        where = _location(f)
        head = (f"{paint(_BOLD, where)}: " if where else "") + (
            f"{paint(_COLOR[f.severity] + _BOLD, f.code)} {paint(_COLOR[f.severity], f.severity.value)} {f.message}")
        out.append(head)
        src = _source_line(f, cache)
        if src is not None:
            gutter = f"{f.line:>5} | "
            out.append(paint(_DIM, gutter) + src.rstrip())
            if f.column:
                width = 1
                if f.end_line == f.line and f.end_column and f.end_column > f.column:
                    width = f.end_column - f.column
                caret = paint(_COLOR[f.severity], "^" * width)
                out.append(" " * (len(gutter) - 2) + "| " + " " * (f.column - 1) + caret)
        if f.subject:
            out.append(f"      subject: {f.subject}")
        if f.fix:
            out.append(f"      {paint(_BOLD, 'fix')}: {f.fix}")
        out.append("")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in Severity}
    if findings:
        line = (f"Found {len(findings)} finding{'s' * (len(findings) != 1)}: "
                f"{counts[Severity.ERROR]} error, {counts[Severity.WARNING]} warning, {counts[Severity.INFO]} info")
        out.append(line + fixable_note(findings, meta) + ".")
    else:
        out.append("No findings.")
    for extra in meta.get("footer", []):
        out.append(extra)
    return "\n".join(out) + "\n"
