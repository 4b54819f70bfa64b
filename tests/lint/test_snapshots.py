"""Every rule's examples linted, and every finding's place, code, severity and message pinned in a plain-text
snapshot per rule (``tests/lint/snapshots/TPnnn.txt``), as ruff pins its rules' output: a change in what a
rule reports shows in review as a change to its snapshot, not only when a count moves.

The examples are each rule's own ``valid`` and ``invalid`` snippets (its docs and its test cases), linted
alone with only the rule selected, preview on (as ``tests/test_rules.py`` lints them). When a rule's output
changes on purpose, write the snapshots again and review their diff::

    TORCHPACT_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/lint/test_snapshots.py
"""

from __future__ import annotations

import difflib
import os
import textwrap
from pathlib import Path

import pytest

from torchpact.lint.registry import all_rules
from tests.lint_helpers import lint_code

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("TORCHPACT_UPDATE_SNAPSHOTS") == "1"
HOW_TO_UPDATE = "TORCHPACT_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/lint/test_snapshots.py"
RULES = all_rules()


def snapshot(rule) -> str:
    """The rule's examples and, under each, its findings: ``line:column code severity message``, with the
    source line and a caret under the column."""
    out = [f"# {rule.code} {rule.name()}: each example linted alone (select {rule.code}, preview on)",
           f"# written by: {HOW_TO_UPDATE}"]
    examples = [("invalid", i, ex.code) for i, ex in enumerate(rule.invalid_examples())]
    examples += [("valid", i, ex) for i, ex in enumerate(rule.valid)]
    for kind, i, code in examples:
        text = textwrap.dedent(code)
        lines = text.splitlines()
        findings, _ = lint_code(text, select=[rule.code])
        out.append("")
        out.append(f"== {kind} {i}: {len(findings)} finding{'s' * (len(findings) != 1)}")
        for f in sorted(findings, key=lambda f: f.sort_key()):
            message = f.message.replace("\n", "\n    ")
            out.append(f"{f.line}:{f.column} {f.code} {f.severity.value}: {message}")
            if f.line and 0 < f.line <= len(lines):
                out.append(f"  | {lines[f.line - 1]}")
                if f.column:
                    out.append(f"  | {' ' * (f.column - 1)}^")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_output_matches_its_snapshot(rule):
    path = SNAPSHOTS / f"{rule.code}.txt"
    actual = snapshot(rule)
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != actual:
            path.write_text(actual, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"no snapshot {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path} "
                    f"for {rule.code}; write it with: {HOW_TO_UPDATE}", pytrace=False)
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                            fromfile=f"snapshots/{path.name} (pinned)",
                                            tofile=f"{rule.code} (what it reports now)"))
        pytest.fail(f"{rule.code}'s findings changed:\n{diff}\nIf the change is intended: {HOW_TO_UPDATE} "
                    "and commit the snapshot with the change.", pytrace=False)


def test_every_snapshot_belongs_to_a_rule():
    codes = {r.code for r in RULES}
    stale = sorted(p.name for p in SNAPSHOTS.glob("*.txt") if p.stem not in codes)
    if UPDATE:
        for name in stale:
            (SNAPSHOTS / name).unlink()
        return
    assert not stale, f"snapshots of no rule (renamed or removed?): {stale}; {HOW_TO_UPDATE} deletes them"
