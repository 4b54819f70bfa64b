"""Bindings alone: the definitions that reach a name, attributes across methods, the module's."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.budget import Budget
from tests.lint._tree import indexed, name_read

CODE = """
LIMIT = 3

class Trainer:
    def setup(self):
        self.model = build()

    def run(self, flag):
        x = 1
        if flag:
            x = 2
        (a, b) = (x, 4)
        for item in self.model:
            pass
        return x, a, b, self.model, LIMIT, item
"""


def _binder(code: str = CODE):
    nav = indexed(code)
    return nav, Bindings(nav, Budget())


def _values(flow: Bindings, expr: ast.AST) -> list[str]:
    return sorted(ast.unparse(v) for v in flow.values(expr))


def test_plain_names_get_the_definitions_that_reach_the_read():
    nav, flow = _binder()
    assert _values(flow, name_read(nav, "x")) == ["1", "2"]
    assert _values(flow, name_read(nav, "a")) == ["x"] and _values(flow, name_read(nav, "b")) == ["4"]
    assert _values(flow, name_read(nav, "LIMIT")) == ["3"]  # not bound here: the module's


def test_attributes_of_self_come_from_the_class_methods_and_loops_bind_what_they_iterate():
    nav, flow = _binder()
    attr = [n for n in nav.nodes(ast.Attribute) if n.attr == "model" and isinstance(n.ctx, ast.Load)][-1]
    assert _values(flow, attr) == ["build()"]
    [(owner, value)] = flow.bindings(name_read(nav, "item"))
    assert isinstance(owner, ast.For) and getattr(value, "iterable", None) is owner.iter


def test_parameters_are_bound_without_a_value_and_tables_are_built_once():
    nav, flow = _binder()
    run = [f for f in nav.nodes(ast.FunctionDef) if f.name == "run"][0]
    table = flow.assignments(run)
    assert table["flag"][0][1] is None and table is flow.assignments(run)
    assert flow.flow(run) is flow.flow(run)
    assert flow.values(ast.Constant(1))[0].value == 1  # not a name: itself
