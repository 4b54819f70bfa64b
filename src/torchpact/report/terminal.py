"""The report for people at a terminal (rich): findings grouped by category, coloured, with the user's
source around each line and the fix.

Used for ``--format text`` when stdout is a terminal and ``NO_COLOR`` is unset (``meta["color"]``);
otherwise :mod:`torchpact.report.text` writes the plain text that pipes, files and CI logs get. Like
every reporter it only presents: findings and ``meta`` in, a string out.
"""

from __future__ import annotations

import io
import os
import shutil
from typing import Any

from torchpact.findings import Category, Finding, Severity
from torchpact.report.sources import SourceCache
from torchpact.report.text import fixable_note, place, when

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}
_BADGE = {Severity.ERROR: "white on red", Severity.WARNING: "black on yellow", Severity.INFO: "black on cyan"}
_ORDER = [c.value for c in Category]
CONTEXT = 1  # source lines shown above and below the finding's line


def render_terminal(findings: list[Finding], meta: dict[str, Any], width: int | None = None) -> str:
    """Coloured, grouped report as a string of ANSI text (``width`` defaults to the terminal's)."""
    from rich.console import Console, Group
    from rich.padding import Padding
    from rich.rule import Rule
    from rich.syntax import Syntax
    from rich.text import Text

    width = width or shutil.get_terminal_size((100, 24)).columns
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="standard", width=width, highlight=False,
                      emoji=False, legacy_windows=False, no_color=bool(os.environ.get("NO_COLOR")))
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.category.value, []).append(f)
    order = sorted(groups, key=lambda c: (-max(f.severity.rank for f in groups[c]),
                                          _ORDER.index(c) if c in _ORDER else 99))
    cache = SourceCache(meta.get("sources"))
    for cat in order:
        items = sorted(groups[cat], key=lambda f: (-f.severity.rank, f.sort_key()))
        console.print(Rule(Text(f" {cat} · {len(items)} ", style="bold"), align="left", style="grey50"))
        for f in items:
            head = Text()
            head.append(f" {f.severity.value.upper()} ", style=_BADGE[f.severity])
            head.append(f" {f.code} ", style=_STYLE[f.severity])
            head.append(place(f) if f.path else "", style="bold")
            at = when(f)
            if at:
                head.append(f"  [{at}]", style="grey50")
            parts: list[Any] = [head, Padding(Text(f.message), (0, 0, 0, 2), expand=False)]
            text = cache.text(f)
            if text is not None and f.line and f.line <= text.count("\n") + 1:
                lo = max(1, f.line - CONTEXT)
                hi = f.line + CONTEXT
                parts.append(Padding(Syntax(text, "python", theme="ansi_dark", line_numbers=True,
                                            line_range=(lo, hi), highlight_lines={f.line}, word_wrap=False,
                                            background_color="default"), (0, 0, 0, 2), expand=False))
            if f.subject:
                parts.append(Padding(Text.assemble(("subject ", "grey50"), (f.subject, "")), (0, 0, 0, 2),
                                     expand=False))
            if f.fix:
                parts.append(Padding(Text.assemble(("fix ", "bold green"), (f.fix, "green")), (0, 0, 0, 2),
                                     expand=False))
            console.print(Group(*parts))
            console.print()
    counts = {s: sum(1 for f in findings if f.severity == s) for s in Severity}
    if findings:
        line = Text.assemble(
            (f"Found {len(findings)} finding{'s' * (len(findings) != 1)}: ", "bold"),
            (f"{counts[Severity.ERROR]} error", _STYLE[Severity.ERROR] if counts[Severity.ERROR] else "grey50"),
            (", ", ""),
            (f"{counts[Severity.WARNING]} warning", _STYLE[Severity.WARNING] if counts[Severity.WARNING] else "grey50"),
            (", ", ""), (f"{counts[Severity.INFO]} info", _STYLE[Severity.INFO] if counts[Severity.INFO] else "grey50"))
        note = fixable_note(findings, meta)
        if note:
            line.append(note, style="green")
        line.append(".")
        console.print(line)
    else:
        console.print(Text("No findings.", style="bold green"))
    for extra in meta.get("footer", []):
        console.print(Text(extra, style="grey50"))
    return buf.getvalue()
