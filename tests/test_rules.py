"""Every rule's own examples are its tests (Fixit style): valid snippets stay silent, invalid ones
are reported the stated number of times, and fixes produce exactly the stated code."""

from __future__ import annotations

import textwrap

import pytest

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.registry import all_rules
from torchpact.lint.rule import REQUIRED_SECTIONS
from tests.lint_helpers import lint_code

RULES = all_rules()
CATEGORY_PREFIX = {
    Category.MEMORY: "TP1", Category.AUTOGRAD: "TP2", Category.NUMERICS: "TP3", Category.TRAINING: "TP4",
    Category.DATA: "TP5", Category.DISTRIBUTED: "TP6", Category.EXPORT: "TP7", Category.COMPILE: "TP8",
    # performance takes TP900-TP949, security TP950-TP999
    Category.PERFORMANCE: ("TP90", "TP91", "TP92", "TP93", "TP94"),
    Category.SECURITY: ("TP95", "TP96", "TP97", "TP98", "TP99"),
}


def _cases(kind: str):
    for rule in RULES:
        examples = rule.valid if kind == "valid" else rule.invalid_examples()
        for i, ex in enumerate(examples):
            yield pytest.param(rule, ex, id=f"{rule.code}-{kind}-{i}")


@pytest.mark.parametrize("rule,example", list(_cases("valid")))
def test_valid_example_is_silent(rule, example):
    findings, _ = lint_code(example, select=[rule.code])
    assert [f for f in findings if f.code == rule.code] == [], findings


@pytest.mark.parametrize("rule,example", list(_cases("invalid")))
def test_invalid_example_is_reported(rule, example):
    findings, fixed = lint_code(example.code, select=[rule.code])
    mine = [f for f in findings if f.code == rule.code]
    assert len(mine) == example.count, findings
    assert all(f.line and f.column for f in mine)
    assert {f.severity for f in mine} == {example.severity or rule.severity}, "severity policy: see CONTRIBUTING.md"
    if example.evidence is not None:
        assert {f.evidence for f in mine} == {example.evidence}, [f.extra.get("evidence_reasons") for f in mine]
    if rule.severity == Severity.ERROR and example.severity in (None, Severity.ERROR):
        assert {f.evidence for f in mine} == {Evidence.MUST}, "an error needs must evidence"
    if example.fixed is not None:
        assert fixed == textwrap.dedent(example.fixed)
        again, _ = lint_code(fixed, select=[rule.code])
        assert [f for f in again if f.code == rule.code] == []
    else:
        assert not any(f.extra.get("fixable") for f in mine), "a fix was offered but the example states none"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_metadata(rule):
    assert rule.code.startswith(CATEGORY_PREFIX[rule.category]), "code must sit in its category's range"
    assert rule.__module__.split(".")[-2] == rule.category.value, "rule file must sit in its category folder"
    assert isinstance(rule.severity, Severity)
    sections = rule.sections()
    for title in REQUIRED_SECTIONS:
        assert sections.get(title), f"docstring lacks a '## {title}' section"
    assert rule.summary() and not rule.summary().startswith("#")
    assert rule.valid and rule.invalid, "every rule needs valid and invalid examples"
    assert rule.message and rule.fix_hint, "every finding says what is wrong and how to fix it"
    assert rule.fixable == any(e.fixed for e in rule.invalid_examples())


def test_at_least_thirty_rules_cover_every_category():
    assert len(RULES) >= 30
    assert {r.category for r in RULES} == set(Category) - {Category.INPUT}
