"""SARIF 2.1.0, for GitHub code scanning and other static-analysis dashboards.

Paths under the working directory are relative URIs against ``%SRCROOT%`` (the checkout, for code
scanning); others are absolute ``file:`` URIs. The rule table holds only the rules of this run's
results, each with its summary, its description and its page (``help``); a link to the page only where
``TORCHPACT_RULES_URL`` says where the pages are served (report/links.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from torchpact.findings import Finding, Severity
from torchpact.report import one_line
from torchpact.report.links import rule_url
from torchpact.report.notebooks import NotebookLines
from torchpact.report.plaintext import markdown_to_text

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def artifact_location(path: str) -> dict[str, str]:
    """A percent-encoded URI: relative to %SRCROOT% for a relative path, else an absolute file: URI."""
    if os.path.isabs(path):
        return {"uri": Path(path).as_uri()}
    return {"uri": quote(path.replace(os.sep, "/"), safe="/"), "uriBaseId": SRCROOT}


def _rule(code: str, meta: dict[str, Any] | None, example: Finding) -> dict[str, Any]:
    # A code without metadata (a report rendered where the check is unknown) still gets a generic entry:
    # one finding's message is not the rule's description.
    r = meta or {"name": code.lower(), "summary": f"torchpact {code} ({example.category.value})",
                 "category": example.category.value, "severity": example.severity.value}
    entry: dict[str, Any] = {
        "id": code,
        "name": r.get("name") or code.lower(),
        "shortDescription": {"text": r.get("summary") or code},
        "fullDescription": {"text": r.get("description") or r.get("summary") or code},
        "defaultConfiguration": {"level": _LEVEL[Severity(r.get("severity") or "warning")]},
        "properties": {"category": r.get("category"), "tags": [r.get("category")]},
    }
    if r.get("help"):
        entry["help"] = {"text": markdown_to_text(r["help"]), "markdown": r["help"]}
    url = rule_url(code)
    if url:
        entry["helpUri"] = url
    return entry


def _location(f: Finding, notebooks: NotebookLines) -> dict[str, Any]:
    region: dict[str, int] = {}
    if f.cell:  # cell lines are not file lines: the raw .ipynb line that holds the source line
        raw = notebooks.raw_line(f)
        if raw is not None:
            region["startLine"] = raw
    elif f.line:
        region["startLine"] = f.line
        if f.column:
            region["startColumn"] = f.column
        if f.end_line:
            region["endLine"] = f.end_line
            if f.end_column:
                region["endColumn"] = f.end_column
    phys: dict[str, Any] = {"artifactLocation": artifact_location(f.path or "")}
    if region:
        phys["region"] = region
    return {"physicalLocation": phys}


def render_sarif(findings: list[Finding], meta: dict[str, Any]) -> str:
    from torchpact import __version__

    known = {r["code"]: r for r in meta.get("rules", [])}
    examples: dict[str, Finding] = {}
    for f in findings:
        examples.setdefault(f.code, f)
    codes = sorted(examples)
    rule_index = {c: i for i, c in enumerate(codes)}
    notebooks = NotebookLines()
    results = []
    for f in findings:
        text = one_line(f)
        if f.cell:
            text = f"[cell {f.cell}" + (f", line {f.line}" if f.line else "") + f"] {text}"
        result: dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": rule_index[f.code],
            "level": _LEVEL[f.severity],
            "message": {"text": text},
        }
        if f.path:
            result["locations"] = [_location(f, notebooks)]
        props = {k: v for k, v in (("subject", f.subject), ("rank", f.rank), ("step", f.step), ("cell", f.cell),
                                   ("cellLine", f.line if f.cell else None),
                                   ("evidence", f.evidence.value if f.evidence is not None else None),
                                   ("evidenceReasons", f.extra.get("evidence_reasons"))) if v is not None}
        if props:
            result["properties"] = props
        results.append(result)
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "torchpact",
            "version": __version__,
            "rules": [_rule(c, known.get(c), examples[c]) for c in codes],
        }},
        "originalUriBaseIds": {SRCROOT: {"uri": Path(os.getcwd()).as_uri().rstrip("/") + "/"}},
        "results": results,
    }
    doc = {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2) + "\n"
