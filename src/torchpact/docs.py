"""Pages for every code: lint rules and runtime checks (``torchpact rule``, docs/rules/).

A code shared by a lint rule and a runtime check gets one page with an "At runtime" section, so
SARIF has one rule table. ``python -m torchpact.docs docs/rules`` rewrites the folder; a test fails
when it is stale. Runtime checks are read from the watcher modules, which import torch lazily.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from torchpact.findings import Evidence
from torchpact.lint import docs as lint_docs
from torchpact.lint.preview import is_preview
from torchpact.lint.registry import all_rules


def runtime_checks() -> dict[str, Any]:
    from torchpact.launch.distributed import RANK_FAILED
    from torchpact.launch.explain import SCRIPT_ERROR
    from torchpact.watch import all_checks

    checks = dict(all_checks())
    for check in (SCRIPT_ERROR, RANK_FAILED):
        checks[check.code] = check
    checks.update(_audit_checks())
    return checks


def _audit_checks() -> dict[str, Any]:
    """export-check / compile-check codes (their modules import torch lazily)."""
    from torchpact.audit import all_checks as audit_checks

    return audit_checks()


def _found_by(check: Any) -> str:
    if check.code in _audit_checks():
        return "torchpact compile-check" if check.category.value == "compile" else "torchpact export-check"
    return "torchpact run"


def _severity(check: Any) -> str:
    """The check's severity, and when a finding of it carries another one; a heuristic says so."""
    note = getattr(check, "severity_note", "")
    text = f"`{check.severity.value}`" + (f"; {note}" if note else "")
    if getattr(check, "evidence", None) == Evidence.INFERRED:
        text += "; evidence `inferred` (a heuristic reading of what the run showed)"
    return text


def _runtime_section(check: Any) -> str:
    return (f"## At runtime (`{_found_by(check)}`)\n\nSeverity: {_severity(check)}. {check.summary}\n\n"
            + re.sub(r"^## ", "### ", check.doc.strip(), flags=re.M) + "\n")


def check_markdown(check: Any) -> str:
    text = (f"# {check.code} — runtime check\n\n{check.summary}\n\n"
            f"Category: `{check.category.value}` · Severity: `{check.severity.value}` · "
            f"Found by: `{_found_by(check)}`\n\n")
    if getattr(check, "severity_note", "") or getattr(check, "evidence", None) == Evidence.INFERRED:
        text += f"Severity: {_severity(check)}.\n\n"
    return text + check.doc.strip() + "\n"


def page(code: str) -> str | None:
    """The page of a code, or None when no rule or check has it."""
    code = code.upper()
    rule = next((r for r in all_rules() if r.code == code), None)
    check = runtime_checks().get(code)
    if rule is not None:
        if check is None:
            return lint_docs.rule_markdown(rule)
        text = lint_docs.rule_markdown(rule, runtime=(_found_by(check), check.severity.value))
        return text + "\n" + _runtime_section(check)
    if check is not None:
        return check_markdown(check)
    return lint_docs.special_codes().get(code)


def _what_it_does(markdown: str) -> str:
    """The "What it does" section of a page as one paragraph, for SARIF's fullDescription."""
    match = re.search(r"^## What it does\n(.*?)(?=^## |\Z)", markdown, flags=re.M | re.S)
    return " ".join(match.group(1).split()) if match else ""


def rule_table(include_runtime: bool) -> list[dict[str, Any]]:
    """Rule metadata for SARIF's rule table: summary, description, page, default severity."""
    table: dict[str, dict[str, Any]] = {}
    for r in all_rules():
        help_md = page(r.code) if include_runtime else lint_docs.rule_markdown(r)
        table[r.code] = {"code": r.code, "name": r.name(), "summary": r.summary(), "category": r.category.value,
                         "severity": r.severity.value, "help": help_md, "description": _what_it_does(help_md)}
    for code, text in lint_docs.special_codes().items():
        table[code] = {"code": code, "name": code.lower(), "summary": text.splitlines()[0].split("— ", 1)[1],
                       "category": "input", "severity": lint_docs.SPECIAL_SEVERITY[code].value, "help": text,
                       "description": _what_it_does(text)}
    if include_runtime:
        for code, check in runtime_checks().items():
            if code in table:  # run / export-check report the check's severity
                table[code]["severity"] = check.severity.value
            else:
                help_md = check_markdown(check)
                table[code] = {"code": code, "name": code.lower(), "summary": check.summary,
                               "category": check.category.value, "severity": check.severity.value,
                               "help": help_md, "description": _what_it_does(help_md)}
    return [table[c] for c in sorted(table)]


def generated_files() -> dict[str, str]:
    checks = runtime_checks()
    codes = sorted({r.code for r in all_rules()} | set(checks) | set(lint_docs.special_codes()))
    files = {f"{code}.md": page(code) or "" for code in codes}
    rows = ["# Rules and checks", "",
            "Generated by `python -m torchpact.docs docs/rules`; do not edit. `lint` = static rule, "
            "`run` = runtime check of `torchpact run`. \"(preview)\": the rule's `error` and `warning` findings are "
            "reported only with `--preview` (or its code named in `select`) until their blind precision is measured "
            "above the bar; `info` findings are reported by default.", "",
            "| code | category | severity | found by | summary |", "|---|---|---|---|---|"]
    rules = {r.code: r for r in all_rules()}
    for code in codes:
        rule, check = rules.get(code), checks.get(code)
        if rule is not None:
            by = "lint, run" if check is not None else "lint"
            severity = rule.severity.value + (" (preview)" if is_preview(code, rule.severity) else "")
            if check is not None and (check.severity != rule.severity or check.severity_note):
                severity += f" (run: {check.severity.value}{', varies' if check.severity_note else ''})"
            rows.append(f"| [{code}]({code}.md) | {rule.category.value} | {severity} | {by} | {rule.summary()} |")
        elif check is not None:
            severity = check.severity.value + (" (varies)" if check.severity_note else "")
            rows.append(f"| [{code}]({code}.md) | {check.category.value} | {severity} | run | {check.summary} |")
        else:
            title = lint_docs.special_codes()[code].splitlines()[0].split("— ", 1)[1]
            severity = lint_docs.SPECIAL_SEVERITY[code].value
            rows.append(f"| [{code}]({code}.md) | input | {severity} | lint, run | {title} |")
    files["README.md"] = "\n".join(rows) + "\n"
    return files


def write_docs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    wanted = generated_files()
    for old in folder.glob("*.md"):
        if old.name not in wanted:
            old.unlink()
    for name, text in wanted.items():
        (folder / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write_docs(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rules"))
