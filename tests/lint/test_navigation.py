"""Navigation alone: parents, scopes, loops and branches of an indexed tree."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.navigation import walk_scope
from tests.lint._tree import call_of, indexed

CODE = """
def train(loader, flag):
    for x in loader:
        if flag:
            a = step(x)
        else:
            b = other(x)
        c = flag and third(x)
    else:
        done()
    class Inner:
        def method(self):
            inside()
"""


def test_parents_scopes_and_enclosing_definitions():
    nav = indexed(CODE)
    step = call_of(nav, "step")
    fn = nav.nodes(ast.FunctionDef)[0]
    assert isinstance(nav.parent(step), ast.Assign) and nav.statement(step) is nav.parent(step)
    assert nav.scope(step) is fn and nav.enclosing_function(step) is fn and nav.enclosing_class(step) is None
    inside = call_of(nav, "inside")
    assert nav.enclosing_class(inside).name == "Inner" and nav.scope(inside).name == "method"
    assert nav.scope(fn) is nav.tree and list(nav.ancestors(nav.tree)) == []


def test_loops_count_the_body_not_the_iterable_nor_the_else():
    nav = indexed(CODE)
    loop = nav.nodes(ast.For)[0]
    assert nav.enclosing_loops(call_of(nav, "step")) == [loop] and nav.in_loop(call_of(nav, "step"))
    assert not nav.in_loop(loop.iter) and not nav.in_loop(call_of(nav, "done"))
    assert not nav.in_loop(call_of(nav, "inside"))  # another function's body


def test_conditional_and_exclusive_branches():
    nav = indexed(CODE)
    step, other, third = call_of(nav, "step"), call_of(nav, "other"), call_of(nav, "third")
    assert nav.conditional(step) and nav.conditional(other) and nav.conditional(third)
    assert not nav.conditional(nav.nodes(ast.For)[0].iter)
    assert nav.exclusive(step, other) and not nav.exclusive(step, third)


def test_walk_scope_stops_at_nested_scopes_and_walks_each_root_once():
    nav = indexed(CODE)
    fn = nav.nodes(ast.FunctionDef)[0]
    names = {n.func.id for n in walk_scope(fn.body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert names == {"step", "other", "third", "done"}
    first = list(nav.walk_scope_once(fn.body))
    assert list(nav.walk_scope_once(fn.body)) == first == list(walk_scope(fn.body))
    assert nav._walks and len(nav._walks) == 1
