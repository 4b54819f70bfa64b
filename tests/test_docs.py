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


def test_every_rule_says_what_it_relies_on_and_its_page_shows_it_with_the_default():
    for rule in all_rules():
        assert rule.requires and all(isinstance(f, str) and f.strip() for f in rule.requires), rule.code
        text = page(rule.code)
        assert "## Evidence and default" in text and all(f in text for f in rule.requires), rule.code
        assert f"- `{rule.severity.value}`: " in text, rule.code


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


def _runtime_modules() -> list[tuple[Path, dict[str, tuple[str, str]], ast.Module]]:
    """Each watcher / audit module, its checks (variable -> (code, severity)) and its tree."""
    files = [*(SRC / "watch" / "watchers").glob("*.py"), *(SRC / "audit" / "export").glob("*.py"),
             SRC / "audit" / "compile.py"]
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(files)}

    def checks_of(tree: ast.Module) -> dict[str, tuple[str, str]]:
        checks = {}
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", "") == "Check"):
                kw = {k.arg: k.value for k in node.value.keywords}
                checks[node.targets[0].id] = (kw["code"].value, kw["severity"].attr.lower())
        return checks

    # export-check's paths are modules of one package; its checks are defined once, in checks.py
    package = checks_of(trees[SRC / "audit" / "export" / "checks.py"])
    return [(path, package if path.parent.name == "export" else checks_of(tree), tree)
            for path, tree in trees.items()]


def reported_severities() -> dict[str, set[str]]:
    """Code -> the severities the watchers and audits report it at, read from the calls that name its check.

    A watcher reports with ``session.report(CHECK, ..., severity=...)``, an audit with
    ``_finding(CHECK, ..., severity=...)``, the profiler with ``Verdict(CHECK, ..., severity)``; without
    a severity the check's own applies. A severity passed in through a helper's parameter is not
    followed here: :func:`test_every_severity_a_module_reports_is_documented` covers those.
    """
    out: dict[str, set[str]] = {}
    for _, checks, tree in _runtime_modules():
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            for call in ast.walk(func):
                if not (isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Name)
                        and call.args[0].id in checks):
                    continue
                code, default = checks[call.args[0].id]
                given = [k.value for k in call.keywords if k.arg == "severity"]
                given += [a for a in call.args[1:] if _severities(a, None) - {"default"}
                          or (isinstance(a, ast.Name) and a.id == "severity")]
                found = set().union(*(_severities(g, func) for g in given)) if given else set()
                if not found or "default" in found:  # None keeps the check's own
                    found = (found - {"default"}) | {default}
                out.setdefault(code, set()).update(found)
    return out


def test_the_scan_sees_the_known_escalations():
    found = reported_severities()
    assert found["TP913"] == {"info", "warning"} and found["TP604"] == {"error", "info"}
    assert found["TP752"] == {"warning", "error"} and "info" in found["TP756"]


def test_every_severity_a_module_reports_is_documented():
    """Each Severity.X a watcher or audit module uses is the default or the documented note of one of its checks."""
    for path, checks, tree in _runtime_modules():
        used = set()
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef):
                used |= _severities(func, None) - {"default"}
        documented = set()
        for code, default in checks.values():
            documented.add(default)
            note = getattr(runtime_checks()[code], "severity_note", "")
            documented |= {s for s in ("error", "warning", "info") if f"`{s}`" in note}
        assert used <= documented, f"{path.name} reports {sorted(used - documented)}: say when in a severity_note"


def test_every_runtime_severity_is_documented_on_the_rules_page():
    checks = runtime_checks()
    for code, severities in reported_severities().items():
        check = checks[code]
        text = page(code)
        assert f"Severity: `{check.severity.value}`" in text or f"`{check.severity.value}` (`torchpact" in text
        for severity in severities - {check.severity.value}:
            assert f"`{severity}`" in check.severity_note, (
                f"{code} is reported as {severity}: say when in severity_note")
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
            assert "## At runtime (`" in text and f"Severity: `{check.severity.value}`" in text
            assert run_table[rule.code]["severity"] == check.severity.value
    for code, check in checks.items():
        assert run_table[code]["severity"] == check.severity.value
    assert main(["rule", "TP604"]) == 0
    assert capsys.readouterr().out == (DOCS / "TP604.md").read_text(encoding="utf-8")
    assert {s.value for s in _LEVEL} == {"error", "warning", "info"}
