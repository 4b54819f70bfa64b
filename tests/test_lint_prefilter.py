"""The engine's speed-ups change nothing found: a rule's ``calls``/``attrs`` pre-filter only drops
nodes its ``check`` would return on at once, and a file with no rule to run is still syntax-checked."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchpact.config import Config
from torchpact.lint.engine import callee_name, enabled_rules, lint_source
from torchpact.lint.registry import all_rules
from torchpact.lint.source import Source, SourceError

FILTERED = [r for r in all_rules() if r.calls or r.attrs or r.imported]


def _findings(code: str, rule_cls, prefilter: bool) -> list:
    rule = rule_cls()
    if not prefilter:
        rule.calls = rule.attrs = rule.imported = frozenset()
    config = Config(select=[rule_cls.code])
    findings, _ = lint_source(Source(path="snippet.py", text=textwrap.dedent(code)), config, [rule])
    return [f.to_dict() for f in findings]


def test_some_rules_declare_prefilters():
    assert len(FILTERED) >= 20


@pytest.mark.parametrize("rule", FILTERED, ids=lambda r: r.code)
def test_prefilter_keeps_every_finding(rule):
    examples = [*rule.valid, *(e.code for e in rule.invalid_examples())]
    for code in examples:
        assert _findings(code, rule, True) == _findings(code, rule, False), code


def test_prefilter_follows_import_aliases():
    code = """\
    import torch
    from torch import load as restore
    state = restore("model.pt", weights_only=False)
    """
    rule = next(r for r in FILTERED if r.code == "TP951")
    assert _findings(code, rule, True) == _findings(code, rule, False) != []


def test_callee_name_is_the_last_part_of_the_resolved_name():
    tree = ast.parse("opt.step()\nrestore(f)\nF.softmax(x)\nfns[0](x)\n")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    aliases = {"restore": "torch.load", "F": "torch.nn.functional"}
    assert [callee_name(c, aliases) for c in calls] == ["step", "load", "softmax", None]


def test_file_without_active_rules_is_still_syntax_checked():
    config = Config()
    rules = enabled_rules(config, "plain.py")
    with pytest.raises(SourceError):
        lint_source(Source(path="plain.py", text="def f(:\n    pass\n"), config, rules)
    # what only the compiler refuses (not the parser) is not an input problem, as before
    assert lint_source(Source(path="plain.py", text="return 1\n"), config, rules) == ([], [])
