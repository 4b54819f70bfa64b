"""The JSON report of DESIGN.md: tool, version, torch, command, findings, summary."""

from __future__ import annotations

import json
from typing import Any

from torchpact.findings import Finding, summarize


def report_dict(findings: list[Finding], meta: dict[str, Any]) -> dict[str, Any]:
    from torchpact import __version__

    summary = summarize(findings)
    summary.update(meta.get("summary", {}))
    return {
        "tool": "torchpact",
        "version": __version__,
        "torch": meta.get("torch"),
        "command": meta.get("command"),
        "findings": [f.to_dict() for f in findings],
        "summary": summary,
    }


def render_json(findings: list[Finding], meta: dict[str, Any]) -> str:
    return json.dumps(report_dict(findings, meta), indent=2, sort_keys=False) + "\n"
