"""GitHub Actions workflow commands: one ``::error file=...::`` annotation per finding.

A notebook finding is annotated on the raw .ipynb line holding its cell's line, as SARIF does.
"""

from __future__ import annotations

from typing import Any

from torchpact.findings import Finding, Severity
from torchpact.report import one_line
from torchpact.report.notebooks import NotebookLines

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(findings: list[Finding], meta: dict[str, Any]) -> str:
    out = []
    notebooks = NotebookLines()
    for f in findings:
        props = []
        if f.path:
            props.append(f"file={_escape_property(f.path)}")
        if f.cell:  # GitHub shows the raw .ipynb: the line of the file that holds the cell's line
            raw = notebooks.raw_line(f)
            if raw is not None:
                props.append(f"line={raw}")
        elif f.line:
            props.append(f"line={f.line}")
            if f.end_line:
                props.append(f"endLine={f.end_line}")
        if f.column and not f.cell:
            props.append(f"col={f.column}")
            if f.end_column and f.end_line == f.line:
                props.append(f"endColumn={f.end_column}")
        props.append(f"title={_escape_property(f'torchpact {f.code} ({f.category.value})')}")
        message = one_line(f)
        if f.cell:
            message = f"[cell {f.cell}" + (f", line {f.line}" if f.line else "") + "] " + message
        out.append(f"::{_LEVEL[f.severity]} {','.join(props)}::{_escape_data(message)}")
    return "\n".join(out) + ("\n" if out else "")
