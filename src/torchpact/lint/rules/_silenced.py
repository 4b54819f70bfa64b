"""Whether a deprecated call runs where its author silenced that very warning, on purpose.

``with warnings.catch_warnings():`` followed, inside the block and before the call, by
``warnings.filterwarnings("ignore", message=..., category=...)`` or ``warnings.simplefilter("ignore",
...)`` (or ``catch_warnings(action="ignore", ...)``) is scoped: the filter is undone when the block
ends, so it says "this call, deliberately". The filter matches as the ``warnings`` module matches:
its category is the warning's or a base class of it (``Warning``), and its message is a regular
expression matched, ignoring case, at the start of the warning's text. A rule that does not know
the text of its warning counts only filters without a message. A module-wide ``simplefilter`` is
no such sign, and a function defined inside the block runs later, outside it.
"""

from __future__ import annotations

import ast
import re

from torchpact.lint.context import FileContext, is_const, keyword

_FILTERS = {"warnings.filterwarnings", "warnings.simplefilter"}
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def silenced(node: ast.AST, ctx: FileContext, category: str | None, text: str | None) -> bool:
    """``node`` runs inside a ``catch_warnings`` block that ignores the warning (``category``, ``text``)."""
    for anc in ctx.ancestors(node):
        if isinstance(anc, _NESTED):
            return False
        if not isinstance(anc, (ast.With, ast.AsyncWith)):
            continue
        for item in anc.items:
            call = item.context_expr
            if not (isinstance(call, ast.Call) and ctx.call_name(call) == "warnings.catch_warnings"):
                continue
            if is_const(keyword(call, "action"), "ignore") and _matches(call, None, ctx, category, text,
                                                                         category_at=None):
                return True
            for stmt in ctx.walk_scope(anc.body):
                if isinstance(stmt, ast.Call) and stmt.lineno <= getattr(node, "lineno", 0) \
                        and _ignores(stmt, ctx, category, text):
                    return True
    return False


def _ignores(call: ast.Call, ctx: FileContext, category: str | None, text: str | None) -> bool:
    name = ctx.call_name(call)
    if name not in _FILTERS:
        return False
    action = call.args[0] if call.args else keyword(call, "action")
    if not is_const(action, "ignore"):
        return False
    if name == "warnings.simplefilter":
        return _matches(call, None, ctx, category, text, category_at=1)
    message = call.args[1] if len(call.args) > 1 else keyword(call, "message")
    return _matches(call, message, ctx, category, text, category_at=2)


def _matches(call: ast.Call, message: ast.AST | None, ctx: FileContext, category: str | None, text: str | None,
             category_at: int | None) -> bool:
    filter_category = keyword(call, "category")
    if filter_category is None and category_at is not None and len(call.args) > category_at:
        filter_category = call.args[category_at]
    if filter_category is not None:
        cat = ctx.resolve(filter_category) or (filter_category.id if isinstance(filter_category, ast.Name) else "")
        cat = cat.rsplit(".", 1)[-1]
        if cat != "Warning" and cat != category:
            return False
    if message is None or is_const(message, ""):
        return True
    if not (isinstance(message, ast.Constant) and isinstance(message.value, str)) or text is None:
        return False
    try:
        return re.compile(message.value, re.I).match(text) is not None
    except re.error:
        return False
