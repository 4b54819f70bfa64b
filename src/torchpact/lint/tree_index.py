"""The one walk of a parsed file: every node by type, and each node's parent (lint's index, and the
project summary's when it runs on a tree lint did not index)."""

from __future__ import annotations

import ast

# Nodes without child nodes (half of every tree), and the fields that can hold children of the
# commonest others, in ``_fields`` order: the walk skips the rest (names, numbers, contexts, and the
# operator singletons such as ``ast.Add``, which no rule asks for) without looking.
LEAVES = frozenset({ast.Name, ast.Constant, ast.alias, ast.Pass, ast.Break, ast.Continue, ast.Global,
                    ast.Nonlocal})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {
    ast.Attribute: ("value",), ast.Call: ("func", "args", "keywords"), ast.keyword: ("value",),
    ast.arg: ("annotation",), ast.Subscript: ("value", "slice"), ast.Expr: ("value",),
    ast.Assign: ("targets", "value"), ast.BinOp: ("left", "right"), ast.Return: ("value",),
    ast.Compare: ("left", "comparators"), ast.UnaryOp: ("operand",), ast.BoolOp: ("values",),
    ast.AugAssign: ("target", "value"), ast.Tuple: ("elts",), ast.List: ("elts",), ast.Set: ("elts",),
    ast.Starred: ("value",), ast.Dict: ("keys", "values"), ast.If: ("test", "body", "orelse"),
    ast.IfExp: ("test", "body", "orelse"), ast.For: ("target", "iter", "body", "orelse"),
    ast.JoinedStr: ("values",), ast.FormattedValue: ("value", "format_spec"),
}


def index_tree(tree: ast.AST, parents: dict[int, ast.AST]) -> dict[type, list[ast.AST]]:
    """Every node of ``tree`` by type, filling ``parents`` (id(child) -> node) on the way. Iterative,
    so deep nesting cannot overflow it. Pre-order, left to right; the ``Load``/``Store`` context
    markers are shared singletons, not indexed."""
    by_type: dict[type, list[ast.AST]] = {}
    stack: list[ast.AST] = [tree]
    AST, CONTEXT = ast.AST, ast.expr_context
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        t = type(node)
        bucket = by_type.get(t)
        if bucket is None:
            by_type[t] = [node]
        else:
            bucket.append(node)
        if t in LEAVES:
            continue
        children = []
        for name in _CHILD_FIELDS.get(t) or node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        children.append(item)
            elif isinstance(value, AST) and not isinstance(value, CONTEXT):
                children.append(value)
        for child in reversed(children):
            parents[id(child)] = node
            push(child)
    return by_type
