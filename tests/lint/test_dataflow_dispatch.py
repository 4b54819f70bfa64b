"""ScopeFlow dispatches on the statement's type: every statement with a body of its own has a method,
so no block is read as plain expressions (which would miss the names it binds)."""

from __future__ import annotations

import ast

from torchpact.lint.dataflow import _STATEMENTS, ScopeFlow


def test_every_statement_with_a_body_has_its_own_method():
    compound = {t for t in ast.stmt.__subclasses__() if "body" in t._fields}
    assert compound <= set(_STATEMENTS), compound - set(_STATEMENTS)


def test_a_statement_without_a_method_only_reads():
    tree = ast.parse("assert a\nglobal g\nb\n")
    flow = ScopeFlow(tree)
    assert flow.visits == 3 and not flow.local_names
