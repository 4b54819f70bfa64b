"""Whether a training loop already waits for the device on every iteration, for TP902.

A read of a device value on the host is unavoidable when the host needs the value to go on: it
decides what runs next (the test of an ``if`` / ``while``, an ``assert``), or it is handed to code that
only runs on the host (a CPU library such as scipy's assignment solver, numpy, an environment's
``step``). A loop with such a read on every iteration — in its body, or in a function or a module of
this file that the body calls (the criterion's ``forward``) — waits for the GPU once per iteration
anyway; one more read for a log line adds a copy, not a new wait.
"""

from __future__ import annotations

import ast
import re

from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rules.memory._training_loops import runs_every_iteration

# Calls that only record or show a value: their argument is not needed to go on.
_RECORDS = re.compile(
    r"^(print|pprint|format|str|repr|float|int|bool|round|len|list|tuple|dict|set|sum|min|max|abs|"
    r"append|extend|insert|add|put|update|write\w*|log\w*|\w+_log|info|debug|warning|warn|error|"
    r"track\w*|record\w*|add_\w+|report\w*|set_postfix\w*|set_description\w*|save\w*|dump\w*|"
    r"item|tolist|numpy|cpu|detach|to|mean|std)$")
_DEPTH = 2


def synchronises_every_iteration(loop: ast.AST, ctx: FileContext) -> bool:
    """Whether ``loop`` has an unavoidable host read on each iteration (see above)."""
    body = getattr(loop, "body", [])
    for node in ctx.walk_scope(body):
        if not isinstance(node, ast.Call) or not runs_every_iteration(node, loop, ctx):
            continue
        if _unavoidable(node, ctx) or _callee_reads(node, ctx, _DEPTH, set()):
            return True
    return False


def _callee_reads(call: ast.Call, ctx: FileContext, depth: int, seen: set[int]) -> bool:
    """A function or module ``forward`` of this file that ``call`` runs has an unavoidable host read."""
    if depth <= 0:
        return False
    for fn in _callees(call, ctx):
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for node in ctx.walk_scope(fn.body):
            if isinstance(node, ast.Call) and (_unavoidable(node, ctx) or _callee_reads(node, ctx, depth - 1, seen)):
                return True
    return False


def _callees(call: ast.Call, ctx: FileContext) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    func = call.func
    if isinstance(func, ast.Name):
        cls = ctx.local_module_class(func)  # ``criterion(out, y)`` of ``criterion = MatchingLoss()``
        if cls is not None:
            forward = ctx.method(cls, "forward")
            return [forward] if forward is not None else []
        return list(ctx.functions.get(func.id, []))
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
        return list(ctx.functions.get(func.attr, []))
    return []


def _unavoidable(call: ast.Call, ctx: FileContext) -> bool:
    """``call`` copies a tensor to the host and the host needs the value to go on."""
    if not _to_host(call):
        return False
    node: ast.AST = call
    parent = ctx.parent(node)
    # ``t.cpu().numpy()``, ``t.item()``: the copy is the end of the receiver chain
    while isinstance(parent, ast.Attribute) and isinstance(ctx.parent(parent), ast.Call) \
            and ctx.parent(parent).func is parent and parent.attr in ("numpy", "tolist", "item", "detach"):
        node = ctx.parent(parent)
        parent = ctx.parent(node)
    for anc in [parent, *ctx.ancestors(parent)] if parent is not None else []:
        if isinstance(anc, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            return _within(node, anc.test, ctx)
        if isinstance(anc, ast.Call) and node is not anc.func and not _within(node, anc.func, ctx):
            return _host_code(anc, ctx)
        if isinstance(anc, ast.stmt):
            return False
    return False


def _to_host(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("cpu", "item", "tolist") and not call.args and not call.keywords:
        return True
    if func.attr == "to":
        target = call.args[0] if call.args else keyword(call, "device")
        return is_const(target, "cpu")
    return False


def _host_code(call: ast.Call, ctx: FileContext) -> bool:
    """A call that computes with host values: not torch's, not one that only records or shows them."""
    qn = ctx.call_name(call) or ""
    if qn.startswith("torch."):
        return False
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return bool(name) and not _RECORDS.match(name)


def _within(node: ast.AST, root: ast.AST, ctx: FileContext) -> bool:
    return node is root or any(anc is root for anc in ctx.ancestors(node))
