"""The engine's speed-ups change nothing found: a rule's ``calls``/``attrs``/``imported`` pre-filter
only drops nodes its ``check`` would return on at once, a rule that needs torch is skipped only where
the file cannot import it, project facts read from the index are those of a walk, and a file with no
rule to run is still syntax-checked."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchpact.config import Config
from torchpact.lint.context import FileContext
from torchpact.lint.engine import (
    callee_name,
    enabled_rules,
    index,
    lint_source,
    may_import,
)
from torchpact.lint.project import summarize_tree
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
    def warm_start(model, path):
        model.load_state_dict(restore(path, weights_only=False))
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


@pytest.mark.parametrize("text, imports", [
    ("import torch\n", True), ("import os, torch.nn as nn\n", True), ("from torch import nn\n", True),
    ("import torch_geometric\nx = torch_geometric.nn\n", False), ("import mytorch\n", False),
    ("# torchvision only\nimport torchvision\n", False), ("import ｔｏｒｃｈ\n", True),  # NFKC: Python reads torch
])
def test_may_import_is_true_for_every_import_of_the_package(text, imports):
    assert may_import(text, "torch") is imports
    assert any(type(n) in (ast.Import, ast.ImportFrom) for n in ast.walk(ast.parse(text)))


def test_torch_rules_still_run_on_a_torch_import_spelled_in_another_normal_form():
    code = "import ｔｏｒｃｈ as torch\nxs = torch.range(0, 3)\n"
    findings, _ = lint_source(Source(path="f.py", text=code), Config(preview=True), None)
    assert [f.code for f in findings] == ["TP313"]


def test_files_without_torch_are_still_syntax_checked():
    with pytest.raises(SourceError):
        lint_source(Source(path="f.py", text="import numpy as np\ndef f(:\n    np.log(x)\n"), Config(), None)


def test_a_statement_importing_a_name_twice_is_checked_once():
    code = "from torch.cuda.amp import autocast, autocast\n"
    rule = next(r for r in FILTERED if r.code == "TP311")
    assert len(_findings(code, rule, True)) == len(_findings(code, rule, False)) >= 1


def test_project_facts_from_the_index_are_those_of_a_walk():
    code = textwrap.dedent("""\
    import utils
    @decorate(opt.zero_grad())
    def train(loader, sampler):
        helper = lambda: sampler.set_epoch(0)
        for p in model.parameters():
            p.grad = None
        utils.run_epoch(loader)
        class Inner:
            model.eval()
            def method(self):
                torch.save(self, "m.pt")
    """)
    tree = ast.parse(code)
    ctx = FileContext(Source(path="f.py", text=code), tree)
    index(ctx)
    summary = summarize_tree(tree, ctx.by_type, ctx.navigation.parents)
    assert summary == summarize_tree(tree)
    assert summary.facts == {"train": ["set_epoch", "zero_grad"], "method": ["save"]}
