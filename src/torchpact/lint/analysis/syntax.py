"""Small questions about one call or literal, asked the same way by every analysis and rule."""

from __future__ import annotations

import ast


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def argument(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    """A call's argument by keyword, else by position (when no ``*args`` comes before it)."""
    value = keyword(call, name)
    if value is not None:
        return value
    if position is not None and len(call.args) > position and not any(
            isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return None


def keyword_is_true(call: ast.Call, name: str) -> bool:
    value = keyword(call, name)
    return value is not None and is_const(value, True)


def is_const(node: ast.AST | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value if isinstance(value, bool) or value is None else (
        isinstance(node, ast.Constant) and node.value == value)


def mentions_grad(expr: ast.AST) -> bool:
    """Whether an attribute or subscript chain goes through ``.grad`` (``p.grad``, ``p.grad[0]``, ``p.grad.data``)."""
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Attribute) and expr.attr == "grad":
            return True
        expr = expr.value
    return False
