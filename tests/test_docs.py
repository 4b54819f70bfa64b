"""docs/rules/ is generated from the rules; it must not be stale."""

from __future__ import annotations

import ast
from pathlib import Path

from torchpact.docs import generated_files, page, rule_table, runtime_checks
from torchpact.lint.registry import all_rules

DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules"


def test_docs_rules_are_up_to_date():
    wanted = generated_files()
    present = {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("*.md")}
    stale = sorted(n for n in wanted if present.get(n) != wanted[n])
    extra = sorted(set(present) - set(wanted))
    assert not stale and not extra, (
        f"docs/rules is stale (changed: {stale}, unexpected: {extra}); run `make docs`")


# --------------------------------------------------------------------------- severities agree everywhere
SRC = Path(__file__).resolve().parents[1] / "src" / "torchpact"


def _severities(expr: ast.AST, func: ast.AST | None) -> set[str]:
    """The Severity.X an expression can evaluate to (following a local name's assignments); None is "default"."""
    out = {n.attr.lower() for n in ast.walk(expr) if isinstance(n, ast.Attribute)
           and isinstance(n.value, ast.Name) and n.value.id == "Severity"}
    if any(isinstance(n, ast.Constant) and n.value is None for n in ast.walk(expr)):
        out.add("default")
    if isinstance(expr, ast.Name) and func is not None:
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets):
                out |= _severities(node.value, None)
    return out


def reported_severities() -> dict[str, set[str]]:
    """Code -> every severity the watchers and audits report it at, read from their calls.

    A watcher reports with ``session.report(CHECK, ..., severity=...)``, an audit with
    ``_finding(CHECK, ..., severity=...)``; without ``severity=`` the check's own applies.
    """
    files = [*(SRC / "watch" / "watchers").glob("*.py"), SRC / "audit" / "export.py", SRC / "audit" / "compile.py"]
    out: dict[str, set[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checks = {}
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", "") == "Check"):
                kw = {k.arg: k.value for k in node.value.keywords}
                checks[node.targets[0].id] = (kw["code"].value, kw["severity"].attr.lower())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            for call in ast.walk(func):
                if not (isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Name)
                        and call.args[0].id in checks):
                    continue
                name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                if name not in ("report", "_finding"):
                    continue
                code, default = checks[call.args[0].id]
                given = next((k.value for k in call.keywords if k.arg == "severity"), None)
                found = _severities(given, func) if given is not None else set()
                if given is None or not found or "default" in found:  # None keeps the check's own
                    found = (found - {"default"}) | {default}
                out.setdefault(code, set()).update(found)
    return out


def test_the_scan_sees_the_known_escalations():
    found = reported_severities()
    assert found["TP913"] == {"info", "warning"} and found["TP604"] == {"error", "info"}
    assert found["TP752"] == {"warning", "error"} and "info" in found["TP756"]


def test_every_runtime_severity_is_documented_on_the_rules_page():
    checks = runtime_checks()
    for code, severities in reported_severities().items():
        check = checks[code]
        text = page(code)
        assert f"Severity: `{check.severity.value}`" in text or f"`{check.severity.value}` (`torchpact" in text
        for severity in severities - {check.severity.value}:
            assert f"`{severity}`" in check.severity_note, f"{code} is reported as {severity}: say when in severity_note"
        if check.severity_note:
            assert check.severity_note in text, code


def test_severity_of_rule_page_cli_docs_and_sarif_agree(capsys):
    from torchpact.cli import main
    from torchpact.report.sarif import _LEVEL

    checks = runtime_checks()
    lint_table = {r["code"]: r for r in rule_table(include_runtime=False)}
    run_table = {r["code"]: r for r in rule_table(include_runtime=True)}
    for rule in all_rules():
        text = page(rule.code)
        assert f"Severity: `{rule.severity.value}`" in text
        assert lint_table[rule.code]["severity"] == rule.severity.value
        check = checks.get(rule.code)
        if check is not None:
            assert f"`{check.severity.value}` (`torchpact" in text.splitlines()[4]  # the header line says both
            assert f"## At runtime (`" in text and f"Severity: `{check.severity.value}`" in text
            assert run_table[rule.code]["severity"] == check.severity.value
    for code, check in checks.items():
        assert run_table[code]["severity"] == check.severity.value
    assert main(["rule", "TP604"]) == 0
    assert capsys.readouterr().out == (DOCS / "TP604.md").read_text(encoding="utf-8")
    assert {s.value for s in _LEVEL} == {"error", "warning", "info"}
