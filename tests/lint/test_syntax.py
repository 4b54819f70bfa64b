"""The small syntax questions every analysis and rule asks the same way."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.syntax import argument, is_const, keyword_is_true, mentions_grad


def _expr(code: str) -> ast.expr:
    return ast.parse(code, mode="eval").body


def test_arguments_by_keyword_or_position_but_not_after_a_starred_one():
    call = _expr("f(a, b, key=True)")
    assert ast.unparse(argument(call, "x", 1)) == "b" and keyword_is_true(call, "key")
    assert argument(_expr("f(*xs, b)"), "x", 1) is None and argument(call, "x") is None
    assert is_const(_expr("None"), None) and is_const(_expr("1"), 1) and not is_const(_expr("1"), True)


def test_mentions_grad_follows_attributes_and_subscripts():
    assert mentions_grad(_expr("p.grad")) and mentions_grad(_expr("p.grad[0].data"))
    assert not mentions_grad(_expr("p.gradient")) and not mentions_grad(_expr("grad"))
