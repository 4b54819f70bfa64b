"""GitHub Actions workflow commands: one ``::error file=...::`` annotation per finding."""

from __future__ import annotations

from typing import Any

from torchpact.findings import Finding, Severity

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(findings: list[Finding], meta: dict[str, Any]) -> str:
    out = []
    for f in findings:
        props = []
        if f.path:
            props.append(f"file={_escape_property(f.path)}")
        if f.line:
            props.append(f"line={f.line}")
            if f.end_line:
                props.append(f"endLine={f.end_line}")
        if f.column:
            props.append(f"col={f.column}")
            if f.end_column and f.end_line == f.line:
                props.append(f"endColumn={f.end_column}")
        props.append(f"title={_escape_property(f'torchpact {f.code} ({f.category.value})')}")
        message = f.message + (f" Fix: {f.fix}" if f.fix else "")
        if f.cell:
            message = f"[cell {f.cell}] " + message
        out.append(f"::{_LEVEL[f.severity]} {','.join(props)}::{_escape_data(message)}")
    return "\n".join(out) + ("\n" if out else "")
