"""Whether a layer a model builds can ever run, for rules about what a model's layers do.

A layer changes what a model computes only when its ``forward`` calls it. A layer that is built but
never called — ``self.dropout = nn.Dropout(p)`` that no method reads, an ``nn.BatchNorm2d(c)``
statement whose result is dropped — adds no dropout, no batch statistics and no running-stat
update. Lint cannot follow every call, so a layer counts as used unless it certainly is not: its
result is discarded, or it is bound to a name or attribute (``self.bn``) that nothing in the file
ever reads (by that attribute name, on any object, or as a string such as ``getattr(self, "bn")``).
A layer handed to anything (a container such as ``nn.Sequential``, ``add_module``, a list, a
return) counts as used.
"""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext


def layer_used(call: ast.Call, ctx: FileContext) -> bool:
    """Whether the module ``call`` builds may be called (see above); False only when it certainly is not."""
    value: ast.AST = call
    parent = ctx.parent(call)
    while isinstance(parent, ast.IfExp) and value is not parent.test:  # ``nn.BatchNorm2d(c) if bn else None``
        value, parent = parent, ctx.parent(parent)
    if isinstance(parent, ast.Expr):
        return False  # built and dropped
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is value:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(_read(target, ctx) for target in targets)
    return True


def _read(target: ast.AST, ctx: FileContext) -> bool:
    if isinstance(target, ast.Name):
        return target.id in _names_read(ctx)
    if isinstance(target, ast.Attribute):
        return target.attr in _attributes_read(ctx) or target.attr in _strings(ctx)
    return True  # ``self.layers[i] = ...``, unpacking: part of something that may be used


def _names_read(ctx: FileContext) -> frozenset[str]:
    found = ctx.memo.get("names_read")
    if found is None:
        found = ctx.memo["names_read"] = frozenset(
            n.id for n in ctx.nodes(ast.Name) if not isinstance(n.ctx, ast.Store))  # type: ignore[attr-defined]
    return found  # type: ignore[return-value]


def _attributes_read(ctx: FileContext) -> frozenset[str]:
    found = ctx.memo.get("attributes_read")
    if found is None:
        found = ctx.memo["attributes_read"] = frozenset(
            a.attr for a in ctx.nodes(ast.Attribute) if not isinstance(a.ctx, ast.Store))  # type: ignore[attr-defined]
    return found  # type: ignore[return-value]


def _strings(ctx: FileContext) -> frozenset[str]:
    found = ctx.memo.get("string_constants")
    if found is None:
        found = ctx.memo["string_constants"] = frozenset(
            c.value for c in ctx.nodes(ast.Constant) if isinstance(c.value, str))  # type: ignore[attr-defined]
    return found  # type: ignore[return-value]
