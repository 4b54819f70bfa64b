"""SARIF 2.1.0, for GitHub code scanning and other static-analysis dashboards."""

from __future__ import annotations

import json
import os
from typing import Any

from torchpact.findings import Finding, Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _uri(path: str) -> str:
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return rel.replace(os.sep, "/")


def render_sarif(findings: list[Finding], meta: dict[str, Any]) -> str:
    from torchpact import __version__

    rules_meta = {r["code"]: r for r in meta.get("rules", [])}
    for f in findings:  # findings from sources that brought no rule table still get an entry
        rules_meta.setdefault(f.code, {"code": f.code, "name": f.code.lower(), "summary": f.message,
                                       "category": f.category.value, "severity": f.severity.value})
    codes = sorted(rules_meta)
    rule_index = {c: i for i, c in enumerate(codes)}
    rules = []
    for code in codes:
        r = rules_meta[code]
        entry: dict[str, Any] = {
            "id": code,
            "name": r.get("name", code),
            "shortDescription": {"text": r.get("summary", code)},
            "defaultConfiguration": {"level": _LEVEL[Severity(r.get("severity", "warning"))]},
            "properties": {"category": r.get("category"), "tags": [r.get("category")]},
        }
        if r.get("help"):
            entry["fullDescription"] = {"text": r["help"][:1000]}
            entry["help"] = {"text": r["help"], "markdown": r["help"]}
        rules.append(entry)
    results = []
    for f in findings:
        result: dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": rule_index[f.code],
            "level": _LEVEL[f.severity],
            "message": {"text": f.message + (f" Fix: {f.fix}" if f.fix else "")},
        }
        if f.path:
            region: dict[str, int] = {}
            if f.line:
                region["startLine"] = f.line
                if f.column:
                    region["startColumn"] = f.column
                if f.end_line:
                    region["endLine"] = f.end_line
                    if f.end_column:
                        region["endColumn"] = f.end_column
            phys: dict[str, Any] = {"artifactLocation": {"uri": _uri(f.path)}}
            if region:
                phys["region"] = region
            result["locations"] = [{"physicalLocation": phys}]
        props = {k: v for k, v in (("subject", f.subject), ("rank", f.rank), ("step", f.step), ("cell", f.cell)) if v is not None}
        if props:
            result["properties"] = props
        results.append(result)
    doc = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "torchpact",
                "version": __version__,
                "informationUri": "https://github.com/torchpact/torchpact",
                "rules": rules,
            }},
            "results": results,
        }],
    }
    return json.dumps(doc, indent=2) + "\n"
